// Two builds of the package, the same bits? Loads web/lib/index.js of build A and of build B in
// one Node process (two separate modules) and compares, bit for bit, what both compute from the
// same inputs: MultiheadAttention forward and trace over many configs (masks, causal, extra keys,
// kdim/vdim, gates, statistics, small-head and packed paths), and Transformer forward (logits and
// every hook A has), greedy and sampled generation (tokens and each step's logits), backward
// (every gradient, gate gradients) and AdamW/SGD steps (losses, norms, the weights after them),
// over configs that cover the norm placements, positions, MLP or not, bias, causal or not, and
// both sides of the backward's keep-q/k/v bound.
//
//   node tools/bench/ab-bits.mjs --a /path/to/old/web/lib --b web/lib [--simd simd128|relaxed] [--threads N]
//
// Build A is typically a checkout of the previous commit (`git worktree add` or `git archive`,
// then `npm ci && npm run build` there). relaxed needs node --experimental-wasm-relaxed-simd.
// Prints the number of calls and tensors compared; exits 1 at the first difference.
import { floats, loadBuilds, random } from './ab-builds.mjs';

const { A, B, simd } = await loadBuilds(
  'node tools/bench/ab-bits.mjs --a <build A web/lib> [--b <build B web/lib>] [--simd simd128|relaxed] [--threads N]');

let calls = 0;
let tensors = 0;
function fail(what) {
  console.error(`DIFFERENT: ${what}`);
  process.exit(1);
}
function sameTensor(a, b, what) {
  if (a === null || a === undefined || b === null || b === undefined) {
    if (a !== b) fail(`${what}: ${a} vs ${b}`);
    return;
  }
  if (JSON.stringify(a.shape) !== JSON.stringify(b.shape)) fail(`${what}: shape ${a.shape} vs ${b.shape}`);
  const x = new Uint32Array(a.data.buffer, a.data.byteOffset, a.data.length);
  const y = new Uint32Array(b.data.buffer, b.data.byteOffset, b.data.length);
  if (x.length !== y.length) fail(`${what}: length`);
  for (let i = 0; i < x.length; i++) {
    if (x[i] !== y[i]) fail(`${what}: element ${i}: ${a.data[i]} vs ${b.data[i]}`);
  }
  tensors++;
}
function sameValue(a, b, what) {
  if (!Object.is(a, b) && JSON.stringify(a) !== JSON.stringify(b)) fail(`${what}: ${a} vs ${b}`);
}
// Runs fn on both builds; both throw the same message, or both return.
function both(fn, what) {
  const run = (hs) => {
    try {
      return { value: fn(hs) };
    } catch (e) {
      return { error: `${e.code}: ${e.message}` };
    }
  };
  const a = run(A);
  const b = run(B);
  calls++;
  if (a.error !== b.error) fail(`${what}: ${a.error ?? 'ok'} vs ${b.error ?? 'ok'}`);
  return [a.value, b.value];
}

// ---- MultiheadAttention ----------------------------------------------------------------------
function mhaCase(rand, id) {
  const H = [1, 2, 3, 4][Math.floor(rand() * 4)];
  const hd = [1, 2, 4, 8, 16, 32][Math.floor(rand() * 6)];
  const E = H * hd;
  const config = {
    embedDim: E, numHeads: H, bias: rand() < 0.8, addBiasKV: rand() < 0.2, addZeroAttn: rand() < 0.2,
    batchFirst: rand() < 0.5,
  };
  const cross = rand() < 0.3;
  if (cross && rand() < 0.5) config.kdim = 1 + Math.floor(rand() * 20);
  if (cross && rand() < 0.5) config.vdim = 1 + Math.floor(rand() * 20);
  const kdim = config.kdim ?? E;
  const vdim = config.vdim ?? E;
  const L = 1 + Math.floor(rand() * (rand() < 0.5 ? 12 : 70));
  const S = cross ? 1 + Math.floor(rand() * 70) : L;
  const batched = rand() < 0.6;
  const N = batched ? 1 + Math.floor(rand() * 3) : 1;
  const shapeOf = (len, dim) => (!batched ? [len, dim] : config.batchFirst ? [N, len, dim] : [len, N, dim]);
  const sd = {};
  const same = kdim === E && vdim === E;
  if (same) sd.in_proj_weight = { data: floats(rand, 3 * E * E), shape: [3 * E, E] };
  else {
    sd.q_proj_weight = { data: floats(rand, E * E), shape: [E, E] };
    sd.k_proj_weight = { data: floats(rand, E * kdim), shape: [E, kdim] };
    sd.v_proj_weight = { data: floats(rand, E * vdim), shape: [E, vdim] };
  }
  if (config.bias) sd.in_proj_bias = { data: floats(rand, 3 * E), shape: [3 * E] };
  if (config.addBiasKV) {
    sd.bias_k = { data: floats(rand, E), shape: [1, 1, E] };
    sd.bias_v = { data: floats(rand, E), shape: [1, 1, E] };
  }
  sd['out_proj.weight'] = { data: floats(rand, E * E), shape: [E, E] };
  if (config.bias) sd['out_proj.bias'] = { data: floats(rand, E), shape: [E] };
  const q = { data: floats(rand, N * L * E, 2), shape: shapeOf(L, E) };
  const k = cross ? { data: floats(rand, N * S * kdim, 2), shape: shapeOf(S, kdim) } : q;
  const v = cross ? { data: floats(rand, N * S * vdim, 2), shape: shapeOf(S, vdim) } : (same ? q : null);
  if (v === null) return null;
  const options = { needWeights: rand() < 0.6, averageAttnWeights: rand() < 0.5, headStats: rand() < 0.3 };
  const causal = rand() < 0.4;
  const mask = rand();
  if (mask < 0.2) {
    const data = Uint8Array.from({ length: L * S }, () => (rand() < 0.2 ? 1 : 0));
    options.attnMask = { data, shape: [L, S] };
  } else if (mask < 0.35) {
    options.attnMask = { data: floats(rand, L * S, 3), shape: [L, S] };
  } else if (mask < 0.45 && batched) {
    options.keyPaddingMask = { data: Uint8Array.from({ length: N * S }, () => (rand() < 0.2 ? 1 : 0)), shape: [N, S] };
  }
  if (causal && options.attnMask === undefined && L === S) options.isCausal = true;
  if (rand() < 0.25) options.headGates = floats(rand, H, 2);
  const [a, b] = both((hs) => {
    const m = hs.createMultiheadAttention(config);
    try {
      m.loadStateDict(sd);
      const r = m.forward(q, k, v, options);
      const t = m.trace(q, k, v, options);
      return { r, t };
    } finally {
      m.dispose();
    }
  }, `mha ${id}`);
  if (a === undefined) return null;
  const what = `mha ${id} ${JSON.stringify(config)} L=${L} S=${S} N=${N}`;
  sameTensor(a.r.output, b.r.output, `${what} output`);
  sameTensor(a.r.weights, b.r.weights, `${what} weights`);
  for (const key of ['entropy', 'distance', 'maxWeight']) {
    if (a.r.headStats) sameTensor(a.r.headStats[key], b.r.headStats[key], `${what} headStats.${key}`);
  }
  for (const key of ['q', 'k', 'v', 'scores', 'weights', 'headOutputs', 'concat', 'output']) {
    sameTensor(a.t[key], b.t[key], `${what} trace.${key}`);
  }
  return true;
}

// ---- Transformer ------------------------------------------------------------------------------
const TRANSFORMERS = [
  { vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, dMlp: 0 },          // the lab's
  { vocabSize: 11, maxLen: 12, dModel: 12, nLayers: 3, nHeads: 3, dMlp: 20, norm: 'post', positions: 'sinusoidal', act: 'relu', bias: false },
  { vocabSize: 10, maxLen: 9, dModel: 8, nLayers: 2, nHeads: 2, dMlp: 12, norm: 'none', positions: 'none' },
  { vocabSize: 12, maxLen: 10, dModel: 16, nLayers: 2, nHeads: 4, dMlp: 32, causal: false },
  { vocabSize: 16, maxLen: 40, dModel: 48, nLayers: 2, nHeads: 3, dMlp: 64, positions: 'sinusoidal' },
  { vocabSize: 7, maxLen: 8, dModel: 6, nLayers: 1, nHeads: 3, dMlp: 9, norm: 'post', causal: false },
  { vocabSize: 9, maxLen: 20, dModel: 8, nLayers: 1, nHeads: 8, dMlp: 0, norm: 'none', bias: false },
  // q, k and v recomputed in the backward (more than 2 MiB of them: Saved::kKeepQkvBytes).
  { vocabSize: 64, maxLen: 64, dModel: 128, nLayers: 2, nHeads: 4, dMlp: 128 },
];

function transformerCase(config, ci) {
  const rand = random(1000 + ci);
  const Bsz = config.dModel >= 128 ? 16 : 1 + Math.floor(rand() * 3);
  const T = config.dModel >= 128 ? 64 : Math.min(config.maxLen, 1 + Math.floor(rand() * config.maxLen));
  const tokens = { data: Int32Array.from({ length: Bsz * T }, () => Math.floor(rand() * config.vocabSize)), shape: [Bsz, T] };
  const targets = { data: Int32Array.from(tokens.data, (x, i) => (rand() < 0.2 ? -100 : (x + i) % config.vocabSize)), shape: [Bsz, T] };
  targets.data[0] = 1;
  const gates = { data: floats(rand, config.nLayers * config.nHeads, 2), shape: [config.nLayers, config.nHeads] };
  const what = `transformer ${ci} ${JSON.stringify(config)} B=${Bsz} T=${T}`;
  const [a, b] = both((hs) => {
    const m = hs.createTransformer({ ...config, seed: 7 + ci });
    try {
      const hooks = m.hookNames();
      const out = { hooks };
      out.plain = m.forward(tokens);
      out.hooked = m.forward(tokens, { hooks: hooks.filter((h) => !/\.ln[12]\.hook_normalized$/.test(h)) });
      out.gated = m.forward(tokens, { headGates: gates });
      const prompt = { data: tokens.data.subarray(0, Math.max(1, T >> 1)), shape: [1, Math.max(1, T >> 1)] };
      const room = config.maxLen - prompt.shape[1];
      out.greedy = m.generate(prompt, { maxNewTokens: room, logits: true });
      out.sampled = m.generate(prompt, { maxNewTokens: room, temperature: 0.8, topK: 5, topP: 0.9, seed: 3, logits: true, headGates: gates });
      out.backward = m.backward(tokens, targets, { headGates: gates, headGateGrads: true });
      out.backwardPlain = m.backward(tokens, targets);
      m.setOptimizer({ type: 'adamw', lr: 1e-2, weightDecay: 0.01, clipGradNorm: ci % 2 ? 0.5 : 0 });
      out.steps = [0, 1, 2].map(() => m.trainStep(tokens, targets));
      out.afterAdam = m.stateDict();
      m.setOptimizer({ type: 'sgd', lr: 0.05 });
      out.steps.push(m.trainStep(tokens, targets));
      out.afterSgd = m.stateDict();
      out.trained = m.forward(tokens);
      return out;
    } finally {
      m.dispose();
    }
  }, what);
  sameValue(a.hooks.filter((h) => !/\.ln[12]\.hook_normalized$/.test(h)),
    b.hooks.filter((h) => !/\.ln[12]\.hook_normalized$/.test(h)), `${what} hook names`);
  sameTensor(a.plain.logits, b.plain.logits, `${what} logits`);
  for (const h of Object.keys(a.hooked.hooks)) sameTensor(a.hooked.hooks[h], b.hooked.hooks[h], `${what} hook ${h}`);
  sameTensor(a.gated.logits, b.gated.logits, `${what} gated logits`);
  for (const g of ['greedy', 'sampled']) {
    sameTensor(a[g].tokens, b[g].tokens, `${what} ${g} tokens`);
    sameTensor(a[g].logits, b[g].logits, `${what} ${g} logits`);
  }
  for (const r of ['backward', 'backwardPlain']) {
    sameValue(a[r].loss, b[r].loss, `${what} ${r} loss`);
    for (const k of Object.keys(a[r].grads)) {
      if (k === 'headGates') sameValue(a[r].grads[k], b[r].grads[k], `${what} ${r} gate grads`);
      else sameTensor(a[r].grads[k], b[r].grads[k], `${what} ${r} grad ${k}`);
    }
    sameValue(Object.keys(a[r].grads), Object.keys(b[r].grads), `${what} ${r} grad keys`);
  }
  a.steps.forEach((s, i) => sameValue(JSON.stringify(s), JSON.stringify(b.steps[i]), `${what} step ${i}`));
  for (const sd of ['afterAdam', 'afterSgd']) {
    for (const k of Object.keys(a[sd])) sameTensor(a[sd][k], b[sd][k], `${what} ${sd} ${k}`);
  }
  sameTensor(a.trained.logits, b.trained.logits, `${what} trained logits`);
}

const start = Date.now();
const rand = random(20261207);
let mhaCases = 0;
for (let i = 0; mhaCases < 400; i++) if (mhaCase(rand, i)) mhaCases++;
TRANSFORMERS.forEach(transformerCase);
console.log(`same bits (${simd}): ${mhaCases} MultiheadAttention configs (forward and trace), ` +
  `${TRANSFORMERS.length} transformer configs (forward, hooks, generation, backward, 4 optimizer steps); ` +
  `${calls} calls, ${tensors} tensors compared bit for bit, ${((Date.now() - start) / 1000).toFixed(1)} s`);
A.close?.();
B.close?.();
