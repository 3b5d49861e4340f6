// Two builds of the package timed against each other in one process (A/B): web/lib/index.js of
// build A and of build B loaded side by side (two modules), the same inputs and weights, samples
// interleaved pair by pair with the order alternating (AB, BA, ...), so that a slow period of a
// shared machine hits both alike. Prints, per shape, the median per-call time of each build and
// the median of the pairs' ratios B / A.
//
//   node tools/bench/ab-time.mjs --a /path/to/old/web/lib [--b web/lib] [--pairs 101] [--sample-ms 10]
//        [--shapes tiny-3,tiny-8,small-32,bert-128,train-small,gen-64] [--simd simd128|relaxed] [--threads N]
//
// Shapes: any of tools/bench/engines.js's MultiheadAttention, train and generate shapes, each
// timed with the benchmark's own runner: by default L=3 E=4 H=2, L=8 E=16 H=2, L=32 E=64 H=4 and
// BERT L=128 E=768 H=12 (forward without weights, a new output array per call, as the row
// 'headscope (no weights)'), and the small model's training step (train-small: 2 layers, d_model
// 32, 2 heads, B=16 T=32, AdamW). A gen-* shape times a whole generate call. --a equal to --b
// (an A/A run) shows the noise.
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { loadBuilds, option } from './ab-builds.mjs';
import { SHAPES, kindOf, makeInputs, makeTokens, makeWeights, prepareEngine, trainBatches } from './engines.js';

const pairs = Number(option('pairs', '101'));
const sampleMs = Number(option('sample-ms', '10'));
const shapes = option('shapes', 'tiny-3,tiny-8,small-32,bert-128,train-small').split(',');
const { A, B, dirA, dirB, simd } = await loadBuilds(
  'node tools/bench/ab-time.mjs --a <build A web/lib> [--b <build B web/lib>] [--pairs N] [--shapes ...]');

// Each shape's runner is the benchmark's own (engines.js prepareEngine, the same weights and
// inputs): the row 'headscope (no weights)' for MultiheadAttention, 'hs-train' for training,
// 'hs-gen' for generation (one call: the prompt, then newTokens + 1 steps).
const ENGINE = { mha: 'hs', train: 'hs-train', generate: 'hs-gen' };
async function prepare(id, hs) {
  const shape = SHAPES.find((s) => s.id === id);
  if (!shape || !ENGINE[kindOf(shape)]) throw new Error(`unknown or untimed shape ${id}`);
  const kind = kindOf(shape);
  const w = kind === 'mha' ? makeWeights(shape.E, shape.H) : null;
  const x = kind === 'mha' ? makeInputs(shape)
    : kind === 'train' ? { batches: trainBatches(shape) } : { tokens: makeTokens(shape) };
  return prepareEngine(ENGINE[kind], { hs }, shape, w, x);
}

const median = (a) => {
  const s = [...a].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

console.log(`A: ${dirA}\nB: ${dirB}\n${os.cpus()[0]?.model ?? 'unknown CPU'}, ` +
  `Node ${process.version}, ${simd}, ${pairs} interleaved pairs per shape`);
for (const shape of shapes) {
  const a = await prepare(shape, A);
  const b = await prepare(shape, B);
  // A warm-up of both (the JIT's tiers), then calls per sample: about sampleMs of A's calls, from
  // the fastest of three measurements (a busy machine only ever makes a call slower).
  for (const t1 = performance.now() + 300; performance.now() < t1;) { a.run(); b.run(); }
  let perCall = Infinity;
  for (let r = 0; r < 3; r++) {
    const t0 = performance.now();
    let n = 0;
    while (performance.now() - t0 < sampleMs / 2) { a.run(); n++; }
    perCall = Math.min(perCall, (performance.now() - t0) / n);
  }
  const calls = Math.max(1, Math.round(sampleMs / perCall));
  const time = (x) => {
    const t0 = performance.now();
    for (let i = 0; i < calls; i++) x.run();
    return ((performance.now() - t0) * 1000) / calls;   // microseconds per call
  };
  const ta = [];
  const tb = [];
  const ratios = [];
  for (let p = 0; p < pairs; p++) {
    let x;
    let y;
    if (p % 2 === 0) {
      x = time(a);
      y = time(b);
    } else {
      y = time(b);
      x = time(a);
    }
    ta.push(x);
    tb.push(y);
    ratios.push(y / x);
  }
  const fmt = (us) => (us >= 1000 ? `${(us / 1000).toFixed(3)} ms` : `${us.toFixed(2)} us`);
  console.log(`${shape.padEnd(12)} A ${fmt(median(ta)).padStart(10)}  B ${fmt(median(tb)).padStart(10)}  ` +
    `B/A ${median(ratios).toFixed(3)} (pairs' ratios ${Math.min(...ratios).toFixed(3)}-${Math.max(...ratios).toFixed(3)}; ` +
    `${calls} call${calls > 1 ? 's' : ''} a sample)`);
  a.dispose();
  b.dispose();
}
