// The benchmark's shapes, data, engines and timing, shared by the Node runner (bench.mjs) and the
// Chromium page (page.js). Nothing here loads a library: the caller hands in a context
//   { hs, ort, tf, eigen, gc?, loadModel(file) -> Promise<Uint8Array> }
// built the way its environment loads things (files from node_modules in Node, same-origin URLs in
// the browser), so both environments time exactly the same code.
//
// Every engine computes torch.nn.MultiheadAttention's forward (unbatched query (L, E), key and
// value (S, E), in_proj + out_proj with biases) on the same inputs and weights, and every timed
// call goes from JS Float32Arrays to a JS Float32Array: input conversion/copy into the engine and
// the output copy out are inside the timing.

import { hashString, seededRandom as mulberry32 } from '../../web/demo/transforms.js';

/** Shapes (calls faster than 10 ms are timed in batches). series: extra rows, headscope only. */
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
];
export const QUICK_SHAPES = ['tiny-3', 'tiny-8'];
/** The memory target's shape: headscope alone, without weights, in a fresh module. */
export const MEMORY_SHAPE = { id: 'long-4096', label: 'L=4096 E=768 H=12', L: 4096, S: 4096, E: 768, H: 12, causal: false };

// Multi-threaded rows (2 threads each, engines with `threads`): the shapes big enough for threads
// to pay off. bench.mjs runs them after the single-threaded rows of every shape, in modules of
// their own (headscope's init({ threads: 2 }), a second onnxruntime-web instance whose env says
// numThreads = 2), so the single-threaded rows are measured exactly as before.
export const MT_SHAPES = ['bert-32', 'bert-128', 'bert-128-causal', 'bert-256', 'bert-512',
  'bert-512-causal', 'gpt2-1024', 'gpt2-1024-causal', 'decode-1024'];

export const ENGINES = [
  { id: 'hs', label: 'headscope (no weights)', headscope: true },
  { id: 'hs-heads', label: 'headscope (per-head weights)', headscope: true },
  // forward()'s `out` option: the output written into one reused Float32Array. It only matters
  // where allocating the result is a visible part of the call (V8 charges ~0.3 us for any typed
  // array over 64 bytes), so it runs on the tutorial shapes only.
  { id: 'hs-out', label: 'headscope (no weights, `out` array reused)', headscope: true,
    shapes: ['tiny-3', 'tiny-8', 'small-32'] },
  { id: 'ort-mha', label: 'onnxruntime-web MultiHeadAttention graph', peer: 'ort' },
  { id: 'ort-matmul', label: 'onnxruntime-web MatMul/Softmax graph', peer: 'ort' },
  { id: 'tfjs', label: 'tfjs-backend-wasm (SIMD) matMul/softmax', peer: 'tfjs' },
  // Reference rows, in no target: slow at the large shapes, so they may get fewer runs there.
  { id: 'eigen', label: 'Eigen reference path in WASM', reference: true },
  { id: 'js', label: 'plain JS', reference: true },
  { id: 'hs-mt', label: 'headscope (2 threads)', headscope: true, threads: 2, shapes: MT_SHAPES },
  { id: 'ort-mha-mt', label: 'onnxruntime-web MultiHeadAttention graph (2 threads)', peer: 'ort',
    threads: 2, shapes: MT_SHAPES },
];

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
  const { L, S, E, causal } = shape;
  const pairs = causal ? (L * (L + 1)) / 2 : L * S;
  const projection = 2 * E * E * (2 * L + 2 * S);
  const attention = 4 * E * pairs;
  return { projection, attention, total: projection + attention };
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
  };
}

async function prepareOrt(ctx, shape, kind) {
  const { ort } = ctx;
  ctx.ortSessions ??= new Map();
  const file = `${modelId(shape)}.${kind}.onnx`;
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

/** A runner for one engine and shape (throws if the engine cannot run it). */
export async function prepareEngine(engineId, ctx, shape, w, x) {
  switch (engineId) {
    case 'hs': return prepareHeadscope(ctx, shape, w, x, false);
    case 'hs-heads': return prepareHeadscope(ctx, shape, w, x, true);
    case 'hs-out': return prepareHeadscope(ctx, shape, w, x, false, true);
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
  // Warm-up: at least minWarmupCalls calls and warmupMs, or one call when it alone is slow.
  // `last` ends as the fastest warm-up call after the first (robust to one slow first call,
  // compilation, or a GC pause).
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
  const last = calls > 1 ? fastest : first;
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
  const sorted = samples.slice().sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  return { ms: median, min: sorted[0], max: sorted[sorted.length - 1], runs, batch };
}

/**
 * Checks and times every engine on one shape. headscope (no weights) is the reference of the
 * numerical check; an engine whose output differs by more than CHECK_TOLERANCE is not timed.
 * Without 'hs' first (the 2-thread pass), the reference is computed once, untimed, and no 'hs'
 * row is returned.
 */
export async function benchShape(ctx, shape, engineIds, timing, log = () => {}) {
  ctx.weights ??= new Map();
  if (!ctx.weights.has(weightsId(shape))) ctx.weights.set(weightsId(shape), makeWeights(shape.E, shape.H));
  const w = ctx.weights.get(weightsId(shape));
  const x = makeInputs(shape);
  const f = flops(shape);
  const rows = [];
  let reference = null;
  if (engineIds[0] !== 'hs') {
    const runner = await prepareEngine('hs', ctx, shape, w, x);
    try {
      reference = await runner.run();
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
      if (id === 'hs') {
        reference = out;
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
        Object.assign(row, await measure(runner, engine, timing));
        row.gflops = f.total / (row.ms * 1e6);
      }
    } catch (error) {
      row.error = String(error?.message ?? error);
    } finally {
      try { runner?.dispose(); } catch { /* already gone */ }
    }
    rows.push(row);
    log(shape, row);
  }
  return { shape: shape.id, flops: f, rows };
}

/** The roofline probe: best f32x4 mul+add rate over accumulator counts, in GFLOP/s. */
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
