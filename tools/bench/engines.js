// The benchmark's shapes, data, engines and timing, shared by the Node runner (bench.mjs) and the
// Chromium page (page.js). Nothing here loads a library: the caller hands in a context
//   { hs, ort, tf, eigen, gc?, loadModel(file) -> Promise<Uint8Array> }
// built the way its environment loads things (files from node_modules in Node, same-origin URLs in
// the browser), so both environments time exactly the same code.
//
// A shape is of one kind, and its engines are that kind's (ENGINES' `kind`, default 'mha'):
//  - 'mha' (the default): torch.nn.MultiheadAttention's forward (unbatched query (L, E), key and
//    value (S, E), in_proj + out_proj with biases);
//  - 'transformer': the logits of hs.createTransformer's forward on (B, T) token ids, the
//    reference module tools/tiny_transformer.py; onnxruntime-web runs its torch.onnx export
//    (tools/bench/make_transformer_onnx.py);
//  - 'generate': hs.createTransformer's generate on one sequence (B = 1), headscope only: the
//    time per new token with its KV cache at context T against a full forward over T tokens (what
//    a program without a cache runs per new token). Its engines check themselves (the greedy tokens
//    against the argmax of full forwards), as the two compute different things.
//  - 'train': training steps per second of the same model (train.js): forward, mean cross-entropy,
//    backward and optimizer step on next-token batches of seeded random tokens, a fixed pool cycled;
//    headscope's trainStep (AdamW) against the model written in tfjs ops (Adam) and, natively,
//    PyTorch on the CPU (bench.mjs runs tools/bench/torch_train_bench.py). Its engines check
//    themselves (first-step losses against each other's, the loss decreasing over the timed steps);
//    a timed call is one step, from Int32Array token ids and targets to the loss as a JS number.
// Every engine computes it on the same inputs and weights, and every timed call goes from JS
// arrays (Float32Arrays; token ids) to a JS Float32Array: input conversion/copy into the engine
// and the output copy out are inside the timing. Each kind's headscope engine (KIND_BASE) is the
// reference of the checks and of the ratios.

import { hashString, seededRandom as mulberry32 } from '../../web/views/heads/transforms.js';
import { registerTfjsGradients } from './tfjs_gradients.js';
import { SkipError, makeTrainBatches, prepareHeadscopeTrain, prepareTfjsTrain } from './train.js';

export { SkipError };

/**
 * A transformer row's full config: the reference module's defaults (pre-norm, learned positions,
 * causal, exact GELU, biases) made explicit, so the torch.onnx export is given the very config
 * headscope is; weights from the seed (PyTorch's default initialisation, see docs/api.md).
 */
function transformerConfig(sizes) {
  return { norm: 'pre', positions: 'learned', causal: true, act: 'gelu', bias: true, lnEps: 1e-5, seed: 1, ...sizes };
}

/**
 * Shapes (calls faster than 10 ms are timed in batches). series: extra rows, headscope only.
 * kind: what the shape computes (default 'mha', see the top of this file).
 */
export const SHAPES = [
  { id: 'tiny-3', label: 'L=3 E=4 H=2', L: 3, S: 3, E: 4, H: 2, causal: false },
  { id: 'tiny-8', label: 'L=8 E=16 H=2', L: 8, S: 8, E: 16, H: 2, causal: false },
  { id: 'small-32', label: 'L=32 E=64 H=4', L: 32, S: 32, E: 64, H: 4, causal: false },
  { id: 'bert-32', label: 'BERT-base L=32', L: 32, S: 32, E: 768, H: 12, causal: false },
  { id: 'bert-128', label: 'BERT-base L=128', L: 128, S: 128, E: 768, H: 12, causal: false },
  { id: 'bert-128-causal', label: 'BERT-base L=128 causal', L: 128, S: 128, E: 768, H: 12, causal: true },
  { id: 'bert-256', label: 'BERT-base L=256', L: 256, S: 256, E: 768, H: 12, causal: false },
  { id: 'bert-512', label: 'BERT-base L=512', L: 512, S: 512, E: 768, H: 12, causal: false },
  { id: 'bert-512-causal', label: 'BERT-base L=512 causal', L: 512, S: 512, E: 768, H: 12, causal: true },
  { id: 'gpt2-1024', label: 'GPT-2 L=1024', L: 1024, S: 1024, E: 768, H: 12, causal: false },
  { id: 'gpt2-1024-causal', label: 'GPT-2 L=1024 causal', L: 1024, S: 1024, E: 768, H: 12, causal: true },
  { id: 'decode-1024', label: 'decode L=1 S=1024', L: 1, S: 1024, E: 768, H: 12, causal: false },
  // Decode linearity and the projection-rate probe (see bench.mjs): headscope only.
  { id: 'decode-2048', label: 'decode L=1 S=2048', L: 1, S: 2048, E: 768, H: 12, causal: false, series: 'decode' },
  { id: 'decode-4096', label: 'decode L=1 S=4096', L: 1, S: 4096, E: 768, H: 12, causal: false, series: 'decode' },
  // Transformers (issue 11): the induction-head lab's 2-layer attention-only model, per call, and
  // a ~1M-parameter model (0.93M: vocab 512, 64 positions, 4 blocks with MLPs), batch 8.
  { id: 'tt-small', kind: 'transformer', label: 'transformer 2L d32 T=32 B=1', B: 1, T: 32,
    config: transformerConfig({ vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, dMlp: 0 }) },
  { id: 'tt-1m', kind: 'transformer', label: 'transformer 4L d128 T=64 B=8', B: 8, T: 64,
    config: transformerConfig({ vocabSize: 512, maxLen: 64, dModel: 128, nLayers: 4, nHeads: 4, dMlp: 512 }) },
  // Generation (issue 11): tt-1m's sizes with 512 positions (0.99M parameters), one sequence
  // (B = 1); at context T, newTokens decode steps centred on T are timed (see prepareGeneration).
  ...[64, 128, 256, 384].map((T) => ({
    id: `gen-${T}`, kind: 'generate', label: `generate 4L d128 context ${T} B=1`, B: 1, T, newTokens: 32,
    config: transformerConfig({ vocabSize: 512, maxLen: 512, dModel: 128, nLayers: 4, nHeads: 4, dMlp: 512 }),
  })),
  // Training (issue 14): steps per second on B = 16 sequences of T tokens (train.js). The
  // induction lab's 2-layer attention-only model, and 4 blocks with MLPs (0.82M parameters).
  { id: 'train-small', kind: 'train', label: 'train 2L d32 T=32 B=16', B: 16, T: 32,
    config: transformerConfig({ vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, dMlp: 0 }) },
  { id: 'train-1m', kind: 'train', label: 'train 4L d128 T=64 B=16', B: 16, T: 64,
    config: transformerConfig({ vocabSize: 64, maxLen: 64, dModel: 128, nLayers: 4, nHeads: 4, dMlp: 512 }) },
];
export const QUICK_SHAPES = ['tiny-3', 'tiny-8', 'tt-small', 'gen-64'];
/** The memory target's shape: headscope alone, without weights, in a fresh module. */
export const MEMORY_SHAPE = { id: 'long-4096', label: 'L=4096 E=768 H=12', L: 4096, S: 4096, E: 768, H: 12, causal: false };

// Multi-threaded rows (2 threads each, engines with `threads`): the shapes big enough for threads
// to pay off. bench.mjs runs them after the single-threaded rows of every shape, in modules of
// their own (headscope's init({ threads: 2 }), a second onnxruntime-web instance whose env says
// numThreads = 2), so the single-threaded rows are measured exactly as before.
export const MT_SHAPES = ['bert-32', 'bert-128', 'bert-128-causal', 'bert-256', 'bert-512',
  'bert-512-causal', 'gpt2-1024', 'gpt2-1024-causal', 'decode-1024'];

// headscope's rows run its SIMD128 build (init({ simd: 'simd128' }), the reference of the checks
// and ratios); the rows with `simd: 'relaxed'` run the relaxed-SIMD build (init({ simd: 'relaxed' }):
// the matmuls' multiply-adds are f32x4.relaxed_madd, an FMA on x86), beside their kind's SIMD128
// row, and are skipped where the runtime has no relaxed SIMD. `series`: also runs on the decode
// series shapes (the projection rate of its build, report.mjs).
export const ENGINES = [
  { id: 'hs', label: 'headscope (no weights)', headscope: true },
  { id: 'hs-relaxed', label: 'headscope relaxed SIMD (no weights)', headscope: true, simd: 'relaxed', series: true },
  { id: 'hs-heads', label: 'headscope (per-head weights)', headscope: true },
  // forward()'s `out` option: the output written into one reused Float32Array. It only matters
  // where allocating the result is a visible part of the call (V8 charges ~0.3 us for any typed
  // array over 64 bytes), so it runs on the tutorial shapes only.
  { id: 'hs-out', label: 'headscope (no weights, `out` array reused)', headscope: true,
    shapes: ['tiny-3', 'tiny-8', 'small-32'] },
  // Where a tutorial-sized call's time goes (issue 16's last lever): the WebAssembly export that
  // forward() calls, alone, again and again on the inputs the last forward() left in wasm memory:
  // no argument reading, no copies in or out. hs-out minus this is the JS side of a call (reading
  // and checking the arguments, copying them in, describing the result), hs minus hs-out the new
  // output array. A measurement of headscope's internals (private fields), in no target.
  { id: 'hs-core', label: 'headscope wasm call alone (inputs in place, no JS marshalling)', headscope: true,
    reference: true, shapes: ['tiny-3', 'tiny-8', 'small-32'] },
  { id: 'ort-mha', label: 'onnxruntime-web MultiHeadAttention graph', peer: 'ort' },
  { id: 'ort-matmul', label: 'onnxruntime-web MatMul/Softmax graph', peer: 'ort' },
  { id: 'tfjs', label: 'tfjs-backend-wasm (SIMD) matMul/softmax', peer: 'tfjs' },
  // Reference rows, in no target: slow at the large shapes, so they may get fewer runs there.
  { id: 'eigen', label: 'Eigen reference path in WASM', reference: true },
  { id: 'js', label: 'plain JS', reference: true },
  { id: 'hs-mt', label: 'headscope (2 threads)', headscope: true, threads: 2, shapes: MT_SHAPES },
  { id: 'ort-mha-mt', label: 'onnxruntime-web MultiHeadAttention graph (2 threads)', peer: 'ort',
    threads: 2, shapes: MT_SHAPES },
  // Transformer rows: hs.createTransformer(config).forward(tokens) and onnxruntime-web on the
  // torch.onnx export of the reference module with the same weights, exported with fixed shapes
  // and with dynamic (B, T) axes (make_transformer_onnx.py; which is faster depends on the size).
  { id: 'hs-model', label: 'headscope Transformer.forward', headscope: true, kind: 'transformer' },
  { id: 'hs-model-relaxed', label: 'headscope relaxed SIMD Transformer.forward', headscope: true, simd: 'relaxed',
    kind: 'transformer' },
  { id: 'ort-model', label: 'onnxruntime-web, torch.onnx export (fixed shapes)', peer: 'ort', kind: 'transformer',
    export: 'fixed', suffix: '.onnx' },
  { id: 'ort-model-dyn', label: 'onnxruntime-web, torch.onnx export (dynamic B, T)', peer: 'ort', kind: 'transformer',
    export: 'dynamic', suffix: '.dynamic.onnx' },
  // Generation rows: the time per new token of generate (its KV cache; measurePerToken), and the
  // full forward over the context that a program without a cache would run for each new token.
  { id: 'hs-gen', label: 'headscope Transformer.generate, per new token (KV cache)', headscope: true, kind: 'generate' },
  { id: 'hs-gen-full', label: 'headscope Transformer.forward over the context (no cache)', headscope: true, kind: 'generate' },
  // Training rows (train.js): one optimizer step each. tfjs's Adam has no weight decay (AdamW's
  // decay is one multiply per parameter: the omission only makes tfjs's step cheaper). The native
  // PyTorch row is measured by bench.mjs in a subprocess, outside the JS environments.
  { id: 'hs-train', label: 'headscope Transformer.trainStep (AdamW)', headscope: true, kind: 'train' },
  { id: 'hs-train-relaxed', label: 'headscope relaxed SIMD Transformer.trainStep (AdamW)', headscope: true,
    simd: 'relaxed', kind: 'train' },
  { id: 'tfjs-train', label: 'tfjs-backend-wasm (SIMD) ops + tf.train.adam (no weight decay)', peer: 'tfjs', kind: 'train' },
  { id: 'torch-cpu-train', label: 'PyTorch 1.13 CPU, native, 1 thread (torch.optim.AdamW)', native: true, kind: 'train' },
];

/** The engine of each kind that every other engine of a shape is checked against and divided by. */
export const KIND_BASE = { mha: 'hs', transformer: 'hs-model', generate: 'hs-gen', train: 'hs-train' };
export const kindOf = (shapeOrEngine) => shapeOrEngine.kind ?? 'mha';
export const baseEngine = (shape) => KIND_BASE[kindOf(shape)];
/** The engines that run on a shape: its kind's, less those that name other shapes. */
export function enginesFor(shape) {
  return ENGINES.filter((e) => kindOf(e) === kindOf(shape) && (e.shapes?.includes(shape.id) ?? true));
}

/** Relative tolerance of every engine's output against headscope's: max|a-b| / max|ref|. */
export const CHECK_TOLERANCE = 1e-3;

/** ONNX model base name of an (E, H, causal) triple; its weights file is shared with the non-causal one. */
export function modelId(shape) {
  return `e${shape.E}-h${shape.H}${shape.causal ? '-causal' : ''}`;
}
export function weightsId(shape) {
  return `e${shape.E}-h${shape.H}`;
}

// --- Deterministic data ----------------------------------------------------------------------

// The demo's seeded generator and string hash (mulberry32, FNV-1a): one implementation serves
// the page, the tests and the benchmark's inputs.
function uniform(n, bound, rand) {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = (2 * rand() - 1) * bound;
  return a;
}

/**
 * The state_dict of an (E, H) pair, PyTorch layout: in_proj_weight (3E, E) xavier-uniform as torch
 * initializes it, out_proj.weight (E, E) U(+-1/sqrt(E)), biases U(+-0.1) (nonzero, so the bias path
 * is exercised). The same for every L of the pair.
 */
export function makeWeights(E, H) {
  const rand = mulberry32(hashString(`weights-${E}-${H}`));
  return {
    inProjWeight: uniform(3 * E * E, Math.sqrt(6 / (E + 3 * E)), rand),
    inProjBias: uniform(3 * E, 0.1, rand),
    outProjWeight: uniform(E * E, 1 / Math.sqrt(E), rand),
    outProjBias: uniform(E, 0.1, rand),
  };
}

/** The weights as tools/bench/make_onnx.py reads them: the four arrays back to back, float32 LE. */
export function weightsBytes(w) {
  const all = new Float32Array(w.inProjWeight.length + w.inProjBias.length +
    w.outProjWeight.length + w.outProjBias.length);
  let o = 0;
  for (const a of [w.inProjWeight, w.inProjBias, w.outProjWeight, w.outProjBias]) {
    all.set(a, o);
    o += a.length;
  }
  return new Uint8Array(all.buffer);
}

/** A transformer or generation shape's (B, T) token ids, uniform over the vocabulary. */
export function makeTokens(shape) {
  const rand = mulberry32(hashString(`tokens-${shape.id}`));
  const tokens = new Int32Array(shape.B * shape.T);
  for (let i = 0; i < tokens.length; i++) tokens[i] = Math.floor(rand() * shape.config.vocabSize);
  return tokens;
}

/**
 * The seeded weights of a transformer shape, as tools/bench/make_transformer_onnx.py reads them:
 * the state_dict's [name, shape] list (the reference module's order) and its tensors back to
 * back, float32 LE. From headscope itself: createTransformer({ ..., seed }).stateDict().
 */
export function transformerWeights(hs, shape) {
  const model = hs.createTransformer(shape.config);
  try {
    const sd = model.stateDict();
    const entries = Object.entries(sd).map(([name, t]) => [name, t.shape]);
    const all = new Float32Array(Object.values(sd).reduce((n, t) => n + t.data.length, 0));
    let o = 0;
    for (const t of Object.values(sd)) {
      all.set(t.data, o);
      o += t.data.length;
    }
    return { entries, bytes: new Uint8Array(all.buffer) };
  } finally {
    model.dispose();
  }
}

/** query (L, E), key and value (S, E): U(-1, 1), distinct arrays. */
export function makeInputs(shape) {
  const rand = mulberry32(hashString(`inputs-${shape.id}`));
  return {
    query: uniform(shape.L * shape.E, 1, rand),
    key: uniform(shape.S * shape.E, 1, rand),
    value: uniform(shape.S * shape.E, 1, rand),
  };
}

/**
 * Useful floating-point work of one forward, multiply and add counted apart (2 per MAC):
 * projections 2E^2 (2L + 2S), scores QK^T and weights x V 2 E per (query, key) pair each; with a
 * causal mask only the L(L+1)/2 unmasked pairs count. Softmax and biases are not counted.
 */
export function flops(shape) {
  if (kindOf(shape) === 'transformer') return transformerFlops(shape);
  if (kindOf(shape) === 'generate') return decodeStepFlops(shape);
  if (kindOf(shape) === 'train') return trainStepFlops(shape);
  const { L, S, E, causal } = shape;
  const pairs = causal ? (L * (L + 1)) / 2 : L * S;
  const projection = 2 * E * E * (2 * L + 2 * S);
  const attention = 4 * E * pairs;
  return { projection, attention, total: projection + attention };
}

/**
 * A transformer forward, counted the same way, over its B sequences of T tokens: per block the
 * attention projections 8 D^2 per token (in_proj 3 D^2, out_proj D^2) and 4 D per unmasked
 * (query, key) pair, the MLP 4 D dMlp per token; the unembedding 2 D vocabSize per token.
 * LayerNorm, GELU, softmax, biases and the embeddings are not counted.
 */
function transformerFlops(shape) {
  const { B, T } = shape;
  const pairs = shape.config.causal ? (T * (T + 1)) / 2 : T * T;
  return modelFlops(shape.config, B * T, B * pairs);
}

/**
 * One training step, estimated as 3 forwards over its B x T tokens (the backward's two matmuls
 * per forward matmul: the gradients of the inputs and of the weights), each counted as
 * transformerFlops counts; the optimizer's elementwise update, the loss and tfjs's one-hot
 * embedding matmul are not counted.
 */
function trainStepFlops(shape) {
  const f = transformerFlops(shape);
  return Object.fromEntries(Object.entries(f).map(([k, v]) => [k, 3 * v]));
}

/**
 * One decode step of a generation shape (B = 1): one position through every block against the
 * cache, at the mean number of keys of its timed steps (T + 1/2, see prepareGeneration).
 */
function decodeStepFlops(shape) {
  return modelFlops(shape.config, 1, promptLength(shape) + (shape.newTokens + 1) / 2);
}

/** transformerFlops' count for `tokens` positions and `pairs` unmasked (query, key) pairs. */
function modelFlops(config, tokens, pairs) {
  const { dModel: D, nLayers, dMlp, vocabSize } = config;
  const projection = nLayers * 8 * D * D * tokens;
  const attention = nLayers * 4 * D * pairs;
  const mlp = nLayers * 4 * D * dMlp * tokens;
  const unembed = 2 * D * vocabSize * tokens;
  return { projection, attention, mlp, unembed, total: projection + attention + mlp + unembed };
}

/** max |a - b| / max |ref|, and where the worst difference is. */
export function relativeError(got, ref) {
  if (!(got instanceof Float32Array) || got.length !== ref.length) {
    return { error: Infinity, detail: `length ${got?.length} vs ${ref.length}` };
  }
  let maxRef = 0;
  let maxDiff = 0;
  let at = 0;
  for (let i = 0; i < ref.length; i++) {
    maxRef = Math.max(maxRef, Math.abs(ref[i]));
    const d = Math.abs(got[i] - ref[i]);
    if (!(d <= maxDiff)) { maxDiff = d; at = i; }   // NaN counts as the worst
  }
  const error = Number.isNaN(maxDiff) ? Infinity : maxDiff / (maxRef || 1);
  return { error, detail: `worst at ${at}: ${got[at]} vs ${ref[at]}` };
}

// --- Engines ---------------------------------------------------------------------------------
// prepare(ctx, shape, weights, inputs) -> { run(): Float32Array | Promise<Float32Array>,
//                                           async: boolean, dispose() }

function transpose(a, rows, cols) {
  const t = new Float32Array(a.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) t[c * rows + r] = a[r * cols + c];
  return t;
}

function prepareHeadscope(ctx, shape, w, x, perHead, reuseOutput = false) {
  const { L, S, E, H, causal } = shape;
  const mha = ctx.hs.createMultiheadAttention({ embedDim: E, numHeads: H });
  mha.loadStateDict({
    in_proj_weight: { data: w.inProjWeight, shape: [3 * E, E] },
    in_proj_bias: { data: w.inProjBias, shape: [3 * E] },
    'out_proj.weight': { data: w.outProjWeight, shape: [E, E] },
    'out_proj.bias': { data: w.outProjBias, shape: [E] },
  });
  const q = { data: x.query, shape: [L, E] };
  const k = { data: x.key, shape: [S, E] };
  const v = { data: x.value, shape: [S, E] };
  const options = perHead
    ? { needWeights: true, averageAttnWeights: false, isCausal: causal }
    : { needWeights: false, isCausal: causal };
  if (reuseOutput) options.out = new Float32Array(L * E);
  return {
    async: false,
    run: () => mha.forward(q, k, v, options).output.data,
    dispose: () => mha.dispose(),
    mha,
  };
}

// hs-core: one forward() writes the call block and the inputs; then only the export runs. Its
// result is read through a view made once (the output stays where it is between identical calls).
function prepareHeadscopeCore(ctx, shape, w, x) {
  const runner = prepareHeadscope(ctx, shape, w, x, false, true);
  const mha = runner.mha;
  const output = runner.run();  // the hs-out row's call: forward() into a reused array
  const core = mha._core;
  const address = mha._address;
  const heap = mha._hs._heap();
  const block = mha._resultBlock;
  const P = mha._hs._protocol;
  const start = heap._u32[block + P.address] >>> 2;
  const view = heap._f32.subarray(start, start + output.length);
  return {
    async: false,
    run: () => {
      if (core._headscope_forward(address) !== 0) throw new Error('headscope_forward failed');
      return view;
    },
    dispose: runner.dispose,
  };
}

/** The onnxruntime-web session of a model file under build/bench/onnx/, made once per ctx. */
async function ortSession(ctx, file) {
  const { ort } = ctx;
  ctx.ortSessions ??= new Map();
  let session = ctx.ortSessions.get(file);
  if (!session) {
    session = await ort.InferenceSession.create(await ctx.loadModel(file), {
      executionProviders: ['wasm'],
      graphOptimizationLevel: 'all',
    });
    ctx.ortSessions.set(file, session);
  }
  return session;
}

function prepareOrt(ctx, shape, kind) {
  return ortSession(ctx, `${modelId(shape)}.${kind}.onnx`);
}

function ortRunner(ctx, session, shape, x) {
  const { ort } = ctx;
  const { L, S, E } = shape;
  return {
    async: true,
    run: async () => {
      const r = await session.run({
        query: new ort.Tensor('float32', x.query, [1, L, E]),
        key: new ort.Tensor('float32', x.key, [1, S, E]),
        value: new ort.Tensor('float32', x.value, [1, S, E]),
      });
      return r.output.data;
    },
    dispose: () => {},
  };
}

function prepareHeadscopeModel(ctx, shape, tokens) {
  const model = ctx.hs.createTransformer(shape.config);
  const input = { data: tokens, shape: [shape.B, shape.T] };
  const parameters = Object.values(model.parameterShapes()).reduce((n, s) => n + s.reduce((a, b) => a * b, 1), 0);
  return {
    async: false,
    facts: { parameters },
    model,
    run: () => model.forward(input).logits.data,
    dispose: () => model.dispose(),
  };
}

/** The index of the first largest value: generate's greedy choice. */
function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

/**
 * Generation against full recomputation: generate(prompt, { maxNewTokens: newTokens + 1, logits:
 * true }) must give the tokens of the timed call (`tokens`), and at a few of its steps s the
 * logits it chose token P + s from (P: the prompt's length) must be forward(its first P + s
 * tokens)'s last row, whose argmax is that token. error: the largest relative difference of those
 * rows (0: the same bits).
 */
function checkGeneration(model, shape, prompt, tokens) {
  const { newTokens: k } = shape;
  const P = promptLength(shape);
  const V = shape.config.vocabSize;
  const g = model.generate(prompt, { maxNewTokens: k + 1, logits: true });
  const seq = g.tokens.data;
  if (seq.length !== tokens.length || seq.some((t, i) => t !== tokens[i])) {
    return { ok: false, error: Infinity, detail: 'generate with logits: true gave other tokens than without' };
  }
  const steps = [0, 1, k >> 1, k];
  let error = 0;
  for (const s of steps) {
    const len = P + s;
    const full = model.forward({ data: seq.subarray(0, len), shape: [1, len] }).logits.data.subarray((len - 1) * V);
    error = Math.max(error, relativeError(g.logits.data.subarray(s * V, (s + 1) * V), full).error);
    if (argmax(full) !== seq[len]) {
      return { ok: false, error, detail: `step ${s}: generated token ${seq[len]}, the full forward's argmax is ${argmax(full)}` };
    }
  }
  return {
    ok: error <= CHECK_TOLERANCE, error,
    detail: `greedy tokens = argmax of the full forward at steps ${steps.join(', ')}` +
      `${error === 0 ? ', logits bit-identical' : ''}`,
  };
}

/**
 * A generation shape's prompt: T - newTokens / 2 tokens, so that its newTokens decode steps see
 * T - newTokens / 2 + 1 ... T + newTokens / 2 keys, T + 1/2 on average: the time per new token
 * "at context T" is the mean over steps centred on T (exact for a cost linear in the context).
 */
function promptLength(shape) {
  return shape.T - shape.newTokens / 2;
}

/**
 * The generation rows: hs-gen times generate's new tokens after a prompt of promptLength tokens
 * (the first of the shape's T; measurePerToken; its run() is the longer call, checked by
 * checkGeneration); hs-gen-full is the full forward over the T tokens (logits (1, T, V)),
 * checked against generate's first step from them, the logits of the same last position.
 */
function prepareGeneration(ctx, shape, tokens, withCache) {
  const r = prepareHeadscopeModel(ctx, shape, tokens);
  const { model } = r;
  if (withCache) {
    const P = promptLength(shape);
    const prompt = { data: tokens.subarray(0, P), shape: [shape.B, P] };
    const generate = (n) => ({ async: false, run: () => model.generate(prompt, { maxNewTokens: n }).tokens.data });
    const k = shape.newTokens;
    const long = generate(k + 1);
    const short = generate(1);
    return {
      ...r, run: long.run, check: (out) => checkGeneration(model, shape, prompt, out),
      measure: (timing) => measurePerToken(long, short, k, timing),
    };
  }
  const V = shape.config.vocabSize;
  return {
    ...r,
    flops: transformerFlops(shape).total,
    check: (logits) => {
      const first = model.generate({ data: tokens, shape: [shape.B, shape.T] }, { maxNewTokens: 1, logits: true }).logits.data;
      const { error, detail } = relativeError(logits.subarray((shape.T - 1) * V), first);
      return { ok: error <= CHECK_TOLERANCE, error, detail: `last row vs generate's first step: ${detail}` };
    },
  };
}

/** onnxruntime-web on <shape id><suffix>: int64 token ids (converted once, here), logits out. */
async function prepareOrtModel(ctx, shape, tokens, suffix) {
  const { ort } = ctx;
  const session = await ortSession(ctx, `${shape.id}${suffix}`);
  const ids = BigInt64Array.from(tokens, (t) => BigInt(t));
  const dims = [shape.B, shape.T];
  return {
    async: true,
    run: async () => (await session.run({ tokens: new ort.Tensor('int64', ids, dims) })).logits.data,
    dispose: () => {},
  };
}

function prepareTfjs(ctx, shape, w, x) {
  const { tf } = ctx;
  const { L, S, E, H, causal } = shape;
  const hd = E / H;
  const scale = 1 / Math.sqrt(hd);
  // Weights once, as an idiomatic tfjs port would hold them: (in, out) for matMul, the 1/sqrt(hd)
  // scale folded into the query projection.
  const wT = transpose(w.inProjWeight, 3 * E, E);   // (E, 3E): columns [q | k | v]
  const cols = (c0) => {
    const m = new Float32Array(E * E);
    for (let r = 0; r < E; r++) m.set(wT.subarray(r * 3 * E + c0, r * 3 * E + c0 + E), r * E);
    return m;
  };
  const wq = cols(0).map((a) => a * scale);
  const bq = w.inProjBias.slice(0, E).map((a) => a * scale);
  const t = {
    wq: tf.tensor2d(wq, [E, E]),
    bq: tf.tensor1d(bq),
    wk: tf.tensor2d(cols(E), [E, E]),
    bk: tf.tensor1d(w.inProjBias.slice(E, 2 * E)),
    wv: tf.tensor2d(cols(2 * E), [E, E]),
    bv: tf.tensor1d(w.inProjBias.slice(2 * E)),
    wo: tf.tensor2d(transpose(w.outProjWeight, E, E), [E, E]),
    bo: tf.tensor1d(w.outProjBias),
    mask: null,
  };
  if (causal) {
    const m = new Float32Array(L * S);
    for (let i = 0; i < L; i++) for (let j = i + 1; j < S; j++) m[i * S + j] = -Infinity;
    t.mask = tf.tensor2d(m, [L, S]);
  }
  const forward = () => tf.tidy(() => {
    const q = tf.tensor2d(x.query, [L, E]);
    const k = tf.tensor2d(x.key, [S, E]);
    const v = tf.tensor2d(x.value, [S, E]);
    const heads = (a, rows) => tf.transpose(tf.reshape(a, [rows, H, hd]), [1, 0, 2]);
    const qh = heads(tf.fused.matMul({ a: q, b: t.wq, bias: t.bq }), L);
    const kh = heads(tf.fused.matMul({ a: k, b: t.wk, bias: t.bk }), S);
    const vh = heads(tf.fused.matMul({ a: v, b: t.wv, bias: t.bv }), S);
    let scores = tf.matMul(qh, kh, false, true);   // (H, L, S)
    if (t.mask) scores = tf.add(scores, t.mask);
    const ctxh = tf.matMul(tf.softmax(scores), vh);   // (H, L, hd)
    const concat = tf.reshape(tf.transpose(ctxh, [1, 0, 2]), [L, E]);
    return tf.fused.matMul({ a: concat, b: t.wo, bias: t.bo });
  });
  return {
    async: false,
    run: () => {
      const out = forward();
      const data = out.dataSync();   // a copy out of wasm memory
      out.dispose();
      return data;
    },
    dispose: () => { for (const v of Object.values(t)) v?.dispose(); },
  };
}

function prepareEigen(ctx, shape, w, x) {
  const mod = ctx.eigen;
  const { L, S, E, H, causal } = shape;
  const m = new mod.EigenMha(E, H);
  const set = (name, data, rows, cols) => {
    const p = m.scratch(data.length);
    if (!p) throw new Error('eigen: out of memory');
    mod.HEAPF32.set(data, p >>> 2);
    if (!m.setParameter(name, rows, cols)) throw new Error(`eigen: ${m.lastError()}`);
  };
  set('in_proj_weight', w.inProjWeight, 3 * E, E);
  set('in_proj_bias', w.inProjBias, 3 * E, 0);
  set('out_proj.weight', w.outProjWeight, E, E);
  set('out_proj.bias', w.outProjBias, E, 0);
  const base = m.scratch((L + 2 * S) * E) >>> 2;
  if (!base) throw new Error('eigen: out of memory');
  return {
    async: false,
    run: () => {
      const heap = mod.HEAPF32;   // re-read: a call may grow memory
      heap.set(x.query, base);
      heap.set(x.key, base + L * E);
      heap.set(x.value, base + (L + S) * E);
      const out = m.forward(L, S, causal) >>> 2;
      if (!out) throw new Error(`eigen: ${m.lastError()}`);
      return mod.HEAPF32.slice(out, out + L * E);
    },
    dispose: () => m.delete(),
  };
}

/** The plain-JS engine: straightforward loops over Float32Arrays (dot products along rows). */
export function plainJsForward(shape, w, x, scratch) {
  const { L, S, E, H, causal } = shape;
  const hd = E / H;
  const scale = 1 / Math.sqrt(hd);
  const { q, k, v, ctx, p } = scratch;
  const linear = (input, rows, weight, wOffset, bias, bOffset, out) => {
    for (let i = 0; i < rows; i++) {
      const xi = i * E;
      for (let o = 0; o < E; o++) {
        const wo = wOffset + o * E;
        let s = bias[bOffset + o];
        for (let c = 0; c < E; c++) s += input[xi + c] * weight[wo + c];
        out[i * E + o] = s;
      }
    }
  };
  linear(x.query, L, w.inProjWeight, 0, w.inProjBias, 0, q);
  linear(x.key, S, w.inProjWeight, E * E, w.inProjBias, E, k);
  linear(x.value, S, w.inProjWeight, 2 * E * E, w.inProjBias, 2 * E, v);
  for (let h = 0; h < H; h++) {
    const ho = h * hd;
    for (let i = 0; i < L; i++) {
      const n = causal ? Math.min(i + 1, S) : S;
      const qi = i * E + ho;
      let max = -Infinity;
      for (let j = 0; j < n; j++) {
        const kj = j * E + ho;
        let s = 0;
        for (let d = 0; d < hd; d++) s += q[qi + d] * k[kj + d];
        s *= scale;
        p[j] = s;
        if (s > max) max = s;
      }
      let sum = 0;
      for (let j = 0; j < n; j++) {
        const e = Math.exp(p[j] - max);
        p[j] = e;
        sum += e;
      }
      const c = i * E + ho;
      for (let d = 0; d < hd; d++) ctx[c + d] = 0;
      for (let j = 0; j < n; j++) {
        const pj = p[j] / sum;
        const vj = j * E + ho;
        for (let d = 0; d < hd; d++) ctx[c + d] += pj * v[vj + d];
      }
    }
  }
  const out = new Float32Array(L * E);
  linear(ctx, L, w.outProjWeight, 0, w.outProjBias, 0, out);
  return out;
}

function preparePlainJs(ctx, shape, w, x) {
  const { L, S, E } = shape;
  const scratch = {
    q: new Float32Array(L * E), k: new Float32Array(S * E), v: new Float32Array(S * E),
    ctx: new Float32Array(L * E), p: new Float64Array(S),
  };
  return { async: false, run: () => plainJsForward(shape, w, x, scratch), dispose: () => {} };
}

/**
 * Loads the 2-thread rows' engines (MT_SHAPES) into ctx, for bench.mjs (Node) and page.js
 * (Chromium): headscope's multi-threaded module and a second onnxruntime-web instance, from
 * `importOrt` (ort.env is per module instance and its thread count is fixed when its wasm first
 * loads, so the single-threaded rows' instance cannot be reused; importing a self-contained
 * bundle under a URL of its own gives a separate one). A failure is kept and reported in those
 * rows, not fatal.
 */
export async function loadThreaded(ctx, init, importOrt, wasmPaths) {
  try {
    ctx.hsMt = await init({ threads: 2 });
  } catch (e) {
    ctx.hsMtError = String(e?.message ?? e);
  }
  try {
    const ortMt = await importOrt();
    ortMt.env.wasm.numThreads = 2;
    ortMt.env.wasm.proxy = false;
    ortMt.env.wasm.wasmPaths = wasmPaths;
    ctx.ortMt = ortMt;
  } catch (e) {
    ctx.ortMtError = String(e?.message ?? e);
  }
}

/**
 * headscope's relaxed-SIMD build for the `simd: 'relaxed'` rows: ctx.hsRelaxed, or the reason it
 * did not load in ctx.hsRelaxedError (the runtime has no relaxed SIMD: those rows are skipped).
 */
export async function loadRelaxed(ctx, init) {
  try {
    ctx.hsRelaxed = await init({ simd: 'relaxed' });
  } catch (e) {
    ctx.hsRelaxedError = String(e?.message ?? e);
  }
}

/** The context of a relaxed row: ctx with the relaxed build as its headscope. */
function relaxedContext(ctx) {
  if (!ctx.hsRelaxed) throw new SkipError(`headscope's relaxed-SIMD build did not load: ${ctx.hsRelaxedError}`);
  return { ...ctx, hs: ctx.hsRelaxed, freshHeadscope: ctx.freshHeadscopeRelaxed };
}

/** A runner for one engine and shape (throws if the engine cannot run it). */
export async function prepareEngine(engineId, ctx, shape, w, x) {
  switch (engineId) {
    case 'hs': return prepareHeadscope(ctx, shape, w, x, false);
    case 'hs-relaxed': return prepareHeadscope(relaxedContext(ctx), shape, w, x, false);
    case 'hs-model-relaxed': return prepareHeadscopeModel(relaxedContext(ctx), shape, x.tokens);
    case 'hs-train-relaxed': return prepareHeadscopeTrain(relaxedContext(ctx), shape, x.batches, 'hs-train-relaxed');
    case 'hs-heads': return prepareHeadscope(ctx, shape, w, x, true);
    case 'hs-out': return prepareHeadscope(ctx, shape, w, x, false, true);
    case 'hs-core': return prepareHeadscopeCore(ctx, shape, w, x);
    case 'hs-mt':
      if (!ctx.hsMt) throw new Error(`headscope (2 threads) did not load: ${ctx.hsMtError}`);
      return prepareHeadscope({ ...ctx, hs: ctx.hsMt }, shape, w, x, false);
    case 'ort-mha-mt': {
      if (!ctx.ortMt) throw new Error(`onnxruntime-web with 2 threads did not load: ${ctx.ortMtError}`);
      // Its own sessions: a session belongs to the ort instance (and thread count) that made it.
      ctx.ortMtCtx ??= { ort: ctx.ortMt, loadModel: ctx.loadModel };
      return ortRunner(ctx.ortMtCtx, await prepareOrt(ctx.ortMtCtx, shape, 'mha'), shape, x);
    }
    case 'ort-mha': return ortRunner(ctx, await prepareOrt(ctx, shape, 'mha'), shape, x);
    case 'ort-matmul': return ortRunner(ctx, await prepareOrt(ctx, shape, 'matmul'), shape, x);
    case 'tfjs': return prepareTfjs(ctx, shape, w, x);
    case 'eigen': return prepareEigen(ctx, shape, w, x);
    case 'js': return preparePlainJs(ctx, shape, w, x);
    case 'hs-model': return prepareHeadscopeModel(ctx, shape, x.tokens);
    case 'hs-gen': return prepareGeneration(ctx, shape, x.tokens, true);
    case 'hs-gen-full': return prepareGeneration(ctx, shape, x.tokens, false);
    case 'ort-model': case 'ort-model-dyn':
      return prepareOrtModel(ctx, shape, x.tokens, ENGINES.find((e) => e.id === engineId).suffix);
    case 'hs-train': return prepareHeadscopeTrain(ctx, shape, x.batches);
    case 'tfjs-train': return prepareTfjsTrain(ctx, shape, x.batches, registerTfjsGradients);
    case 'torch-cpu-train': throw new Error('torch-cpu-train is native: bench.mjs runs tools/bench/torch_train_bench.py');
    default: throw new Error(`unknown engine ${engineId}`);
  }
}

// --- Timing ----------------------------------------------------------------------------------

export const FULL_TIMING = {
  minRuns: 20, warmupMs: 300, minWarmupCalls: 2, targetRunMs: 20,
  // Reference rows (Eigen, plain JS) whose single call takes longer than slowCallMs get
  // slowRuns runs instead of minRuns: they are in no target and would take minutes each.
  slowCallMs: 1000, slowRuns: 5,
};
export const QUICK_TIMING = {
  minRuns: 5, warmupMs: 30, minWarmupCalls: 2, targetRunMs: 3, slowCallMs: 200, slowRuns: 3,
};

const now = () => performance.now();

/**
 * Warm-up, then `runs` runs of `batch` calls each (batch > 1 when one call takes under half of
 * targetRunMs); returns the median time per call and the spread.
 */
export async function measure(runner, engine, timing) {
  const last = await warmUp(runner, timing);
  const timeBatch = async (n) => {
    const t0 = now();
    if (runner.async) {
      for (let b = 0; b < n; b++) await runner.run();
    } else {
      for (let b = 0; b < n; b++) runner.run();
    }
    return now() - t0;
  };
  // Fast calls run in batches of about targetRunMs: double a batch until it takes a quarter of
  // that (the browser's timer is coarse, one fast call may read as 0 ms), then scale it.
  let batch = 1;
  if (last * 2 < timing.targetRunMs) {
    let t = 0;
    for (;; batch *= 2) {
      t = await timeBatch(batch);
      if (t >= timing.targetRunMs / 4 || batch >= 1 << 22) break;
    }
    t = Math.min(t, await timeBatch(batch));   // a second look: a GC pause must not shrink the batch
    batch = Math.max(1, Math.round((batch * timing.targetRunMs) / Math.max(t, 1e-3)));
  }
  const runs = engine.reference && last > timing.slowCallMs ? timing.slowRuns : timing.minRuns;
  const samples = [];
  for (let r = 0; r < runs; r++) samples.push((await timeBatch(batch)) / batch);
  const { ms, min, max } = summary(samples);
  return { ms, min, max, runs, batch };
}

/**
 * Warm-up: at least minWarmupCalls calls and warmupMs, or one call when it alone is slow. Returns
 * the fastest warm-up call after the first (robust to one slow first call, compilation, or a GC
 * pause), or the first when there was one.
 */
async function warmUp(runner, timing) {
  let calls = 0;
  let first = 0;
  let fastest = Infinity;
  const w0 = now();
  for (;;) {
    const t0 = now();
    if (runner.async) await runner.run(); else runner.run();
    const t = now() - t0;
    if (calls++ === 0) first = t; else fastest = Math.min(fastest, t);
    if (calls >= timing.minWarmupCalls && now() - w0 >= timing.warmupMs) break;
    if (t >= timing.slowCallMs) break;
  }
  return calls > 1 ? fastest : first;
}

/** The median of samples (ms), their smallest and largest, and their quartiles. */
function summary(samples) {
  const sorted = samples.slice().sort((a, b) => a - b);
  const at = (f) => {
    const i = f * (sorted.length - 1);
    return sorted[Math.floor(i)] + (sorted[Math.ceil(i)] - sorted[Math.floor(i)]) * (i - Math.floor(i));
  };
  return { ms: at(0.5), min: sorted[0], max: sorted[sorted.length - 1], q1: at(0.25), q3: at(0.75) };
}

/** How many (long, short) pairs measurePerToken times: this many times timing.minRuns. */
export const GENERATE_PAIRS = 3;

/**
 * The time per new token of generate, from the synchronous runners `long` (generate(prompt, {
 * maxNewTokens: k + 1 }): the prompt's pass, then k decode steps) and `short` (maxNewTokens 1: the
 * prompt's pass alone; the first new token comes from its logits). Both warmed up as measure()
 * does, then GENERATE_PAIRS x minRuns pairs of one call each, back to back (which of the two goes
 * first alternates), and ms is the median over the pairs of (long - short) / k. Pairing the two
 * calls cancels what the machine's load does to both within a pair, which a difference of two
 * medians taken seconds apart does not; the prompt's pass (most of either call) drops out.
 * generateMs and promptMs are the medians of the long and short calls themselves; q1 and q3 the
 * quartiles of the per-token samples (their spread: how busy the machine was).
 */
async function measurePerToken(long, short, k, timing) {
  await warmUp(long, timing);
  await warmUp(short, timing);
  const time = (runner) => {
    const t0 = now();
    runner.run();
    return now() - t0;
  };
  const runs = GENERATE_PAIRS * timing.minRuns;
  const perToken = [];
  const longs = [];
  const shorts = [];
  for (let r = 0; r < runs; r++) {
    let tl;
    let ts;
    if (r % 2) {
      tl = time(long);
      ts = time(short);
    } else {
      ts = time(short);
      tl = time(long);
    }
    perToken.push((tl - ts) / k);
    longs.push(tl);
    shorts.push(ts);
  }
  return {
    ...summary(perToken), runs, batch: 1, newTokens: k,
    generateMs: summary(longs).ms, promptMs: summary(shorts).ms,
  };
}

/** A train shape's batch pool (train.js makeTrainBatches), from its seeded generator. */
export function trainBatches(shape) {
  return makeTrainBatches(shape, mulberry32(hashString(`train-${shape.id}`)));
}

/** A shape's weights (MHA: made here, cached per (E, H); a transformer's come from its seed) and inputs. */
function shapeData(ctx, shape) {
  if (kindOf(shape) === 'train') return { w: null, x: { batches: trainBatches(shape) } };
  if (kindOf(shape) !== 'mha') return { w: null, x: { tokens: makeTokens(shape) } };
  ctx.weights ??= new Map();
  if (!ctx.weights.has(weightsId(shape))) ctx.weights.set(weightsId(shape), makeWeights(shape.E, shape.H));
  return { w: ctx.weights.get(weightsId(shape)), x: makeInputs(shape) };
}

/**
 * Checks and times every engine on one shape. The kind's headscope engine (KIND_BASE: headscope
 * without weights for MHA) is the reference of the numerical check; an engine whose output
 * differs by more than CHECK_TOLERANCE is not timed. Without it first (the 2-thread pass), the
 * reference is computed once, untimed, and no row of it is returned. A reference runner's
 * `facts` (a transformer's parameter count) are returned with the rows (another runner's when
 * the reference has none). A runner may bring its own check(output, reference) (the generation
 * and training rows, whose engines compute different things), its own measure(timing)
 * (measurePerToken), an afterMeasure(row) whose fields are added to the timed row (the training
 * rows' loss trajectory, which may fail the check) and the flops of its call (else the shape's).
 * An engine that cannot run in this build throws SkipError: its row says `skipped`, not `error`.
 */
export async function benchShape(ctx, shape, engineIds, timing, log = () => {}) {
  const base = baseEngine(shape);
  const { w, x } = shapeData(ctx, shape);
  const f = flops(shape);
  const rows = [];
  let reference = null;
  let facts;
  if (engineIds[0] !== base) {
    const runner = await prepareEngine(base, ctx, shape, w, x);
    try {
      reference = await runner.run();
      facts = runner.facts;
    } finally {
      runner.dispose();
    }
  }
  for (const id of engineIds) {
    const engine = ENGINES.find((e) => e.id === id);
    const row = { engine: id };
    let runner = null;
    try {
      runner = await prepareEngine(id, ctx, shape, w, x);
      const out = await runner.run();
      if (id === base) {
        reference = out;
        facts = runner.facts;
      }
      facts ??= runner.facts;
      if (runner.check) {
        row.check = runner.check(out, reference);
      } else if (id === base) {
        row.check = { ok: true, error: 0, detail: 'reference' };
      } else {
        const { error, detail } = relativeError(out, reference);
        row.check = { ok: error <= CHECK_TOLERANCE, error, detail };
      }
      if (row.check.ok) {
        // A full collection first, so the garbage of earlier rows (every engine allocates its
        // outputs) is not collected, and charged, during this row's timing; the garbage the row
        // makes itself still is. ctx.gc: Node's and Chromium's gc(), exposed by bench.mjs.
        ctx.gc?.();
        Object.assign(row, await (runner.measure ? runner.measure(timing) : measure(runner, engine, timing)));
        row.gflops = (runner.flops ?? f.total) / (row.ms * 1e6);
        if (runner.afterMeasure) Object.assign(row, runner.afterMeasure(row));
      }
    } catch (error) {
      if (error?.skip) row.skipped = String(error.message);
      else row.error = String(error?.message ?? error);
    } finally {
      try { runner?.dispose(); } catch { /* already gone */ }
    }
    rows.push(row);
    log(shape, row);
  }
  return { shape: shape.id, flops: f, ...(facts && { facts }), rows };
}

/**
 * The training step's matmuls, timed one at a time (eigen_bench.cc's matmulProbe, the npm
 * module's kernels): for a train shape's model, the forward products (x W^T), the backward's
 * input gradients (dY W) and weight gradients (dY^T X, MatMulPackedTransA, k = B * T), each
 * group's GFLOP/s over its products (2 m n k flops each). The per-head attention products are
 * not here (they are a few percent of the FLOPs and are measured as part of the step).
 */
export function trainMatmuls(eigen, shape, { quick = false } = {}) {
  const { dModel: D, dMlp = 0, vocabSize: V } = shape.config;
  const M = shape.B * shape.T;
  // (out, in) of every Linear of one block, then the unembedding's (counted once per layer: the
  // groups' rates are per product, weighted by FLOPs).
  const linears = [[3 * D, D], [D, D]];
  if (dMlp > 0) linears.push([dMlp, D], [D, dMlp]);
  linears.push([V, D]);
  const groups = {
    forward: linears.map(([out, inn]) => [M, out, inn, false]),
    'input gradients': linears.map(([out, inn]) => [M, inn, out, false]),
    'weight gradients': linears.map(([out, inn]) => [out, inn, M, true]),
  };
  const out = {};
  for (const [name, products] of Object.entries(groups)) {
    let flop = 0;
    let ms = 0;
    for (const [m, n, k, transA] of products) {
      const per = eigen.matmulProbe(m, n, k, transA, quick ? 1 : Math.max(1, Math.round(2e8 / (2 * m * n * k))));
      if (!(per > 0)) throw new Error(`trainMatmuls: the probe failed for ${m}x${n}x${k}`);
      flop += 2 * m * n * k;
      ms += per;
    }
    out[name] = { gflops: flop / ms / 1e6, products: products.map(([m, n, k, t]) => `${m}x${n}x${k}${t ? ' (A^T)' : ''}`) };
  }
  return out;
}

/**
 * The roofline probe: best f32x4 mul+add rate over accumulator counts, in GFLOP/s (the relaxed
 * probe, hs_roofline_relaxed: f32x4.relaxed_madd, the same 8 flops per round).
 */
export function roofline(mod, { quick = false } = {}) {
  const counts = [1, 2, 4, 6, 8, 10, 12, 13, 14, 16];
  const per = {};
  const targetMs = quick ? 10 : 60;
  for (const n of counts) {
    if (mod._roofline_run(n, 1000, 1, 0.9999, 0.0001) < 0) throw new Error(`roofline: no kernel for ${n} accumulators`);
    // Size the iteration count so one timed call takes about targetMs.
    let iterations = 100000;
    const t0 = now();
    mod._roofline_run(n, iterations, 1, 0.9999, 0.0001);
    const dt = Math.max(now() - t0, 0.01);
    iterations = Math.max(1000, Math.round(iterations * targetMs / dt));
    let best = 0;
    for (let r = 0; r < (quick ? 3 : 7); r++) {
      const s = now();
      mod._roofline_run(n, iterations, 1, 0.9999, 0.0001);
      const ms = now() - s;
      best = Math.max(best, (n * 8 * iterations) / (ms * 1e6));
    }
    per[n] = best;
  }
  const [bestN, gflops] = Object.entries(per).reduce((a, b) => (b[1] > a[1] ? b : a));
  return { gflops, accumulators: Number(bestN), perAccumulators: per };
}

/** headscope's peak wasm memory on one large call, in a fresh module (the caller's job). */
export function memoryProbe(hs, shape) {
  const { L, S, E, H } = shape;
  const w = makeWeights(E, H);
  const x = makeInputs(shape);
  const before = hs.memory().wasmBytes;
  const r = prepareHeadscope({ hs }, shape, w, x, false);
  const t0 = now();
  const out = r.run();
  const ms = now() - t0;
  const after = hs.memory();
  r.dispose();
  let finite = true;
  for (let i = 0; i < out.length; i += 97) finite &&= Number.isFinite(out[i]);
  return {
    shape: shape.id, L, S, E, H, wasmBytesAtStart: before, wasmBytes: after.wasmBytes,
    heapInUse: after.heapInUse, ms, finite,
  };
}
