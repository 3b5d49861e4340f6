// The multi-threaded module (init({ threads })): the same results as the single-threaded module,
// bit for bit (every output float is computed by one thread with the same operations), for every
// golden case and for shapes large enough that the projections and the attention stage really
// run on several threads; its errors; flat memory over repeated calls. Its own file: init()
// caches modules per process, and one test removes SharedArrayBuffer for a moment.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { init, HeadscopeError } from '../../web/lib/index.js';
import { mulberry32 } from './helpers.js';
import { assertSameBits } from './same-bits.js';

// The SIMD128 build, which the threaded module is: the bits compared with it below are a build's
// (under --experimental-wasm-relaxed-simd init() would load the relaxed one).
const st = await init({ simd: 'simd128' });
const mt = await init({ threads: 2 });

const goldenDir = new URL('../golden/', import.meta.url);

test('threads: the API reports them; each thread count has its own cached module', async () => {
  assert.equal(st.threads, 1);
  assert.equal(mt.threads, 2);
  assert.notEqual(st, mt);
  assert.equal(await init({ threads: 2 }), mt);
  assert.equal(await init({ threads: 1 }), st);
  assert.equal(await init({}), st);
  assert.equal(mt.kernelTarget, 'WASM');
  // The threaded module is SIMD128 only; init({ threads }) with simd 'auto' loads it all the same.
  assert.equal(mt.simd, 'simd128');
  assert.equal(st.simd, 'simd128');
});

test('every golden case: the 2-thread module gives the single-threaded bits', () => {
  const files = readdirSync(goldenDir).filter((f) => f.endsWith('.json'));
  assert.ok(files.length >= 40);
  for (const file of files) {
    const doc = JSON.parse(readFileSync(new URL(file, goldenDir), 'utf8'));
    const want = st.runCase(doc);
    const got = mt.runCase(doc);
    assertSameBits(got.output, want.output, `${file} output`);
    assertSameBits(got.weights, want.weights, `${file} weights`);
    assert.ok(mt.checkCase(doc, got).ok, file);
  }
});

const rng = mulberry32(11);
const random = (shape) => ({
  data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => rng() * 2 - 1), shape,
});

// The same module (config and weights) in both builds.
function pair(config) {
  const a = st.createMultiheadAttention(config);
  const b = mt.createMultiheadAttention(config);
  const stateDict = Object.fromEntries(Object.entries(a.parameterShapes()).map(([k, s]) => [k, random(s)]));
  a.loadStateDict(stateDict);
  b.loadStateDict(stateDict);
  return [a, b];
}

// Shapes past every threshold of the threaded paths: projections (>= 100k multiply-adds) split
// into row blocks and panel runs; the attention stage split by (batch, head), or by (batch,
// query tile) when the weights are averaged; L = 70 has a partial second tile; decode has one
// query row (projections split by columns only).
const SHAPES = [
  { name: 'E=768 H=12 L=64 (BERT-like)', config: { embedDim: 768, numHeads: 12 }, L: 64, S: 64, N: null },
  { name: 'E=96 H=6 L=70 N=2 with masks', config: { embedDim: 96, numHeads: 6 }, L: 70, S: 70, N: 2, masks: true },
  { name: 'E=96 H=6 L=70 N=2 batchFirst, addBiasKV, addZeroAttn, causal',
    config: { embedDim: 96, numHeads: 6, batchFirst: true, addBiasKV: true, addZeroAttn: true },
    L: 70, S: 70, N: 2, causal: true },
  { name: 'decode E=768 H=12 L=1 S=300', config: { embedDim: 768, numHeads: 12 }, L: 1, S: 300, N: null },
  { name: 'cross E=128 H=4 L=130 S=90 kdim/vdim', config: { embedDim: 128, numHeads: 4, kdim: 40, vdim: 56 },
    L: 130, S: 90, N: 1 },
];

for (const s of SHAPES) {
  test(`${s.name}: 2 threads give the single-threaded bits (forward with and without weights, trace)`, () => {
    const [a, b] = pair(s.config);
    const E = s.config.embedDim;
    const batchFirst = s.config.batchFirst === true;
    const dims = (T, width) => (s.N === null ? [T, width] : batchFirst ? [s.N, T, width] : [T, s.N, width]);
    const q = random(dims(s.L, E));
    const k = random(dims(s.S, s.config.kdim ?? E));
    const v = s.config.kdim === undefined ? k : random(dims(s.S, s.config.vdim ?? E));
    const base = {};
    if (s.masks) {
      const n = s.N ?? 1;
      base.keyPaddingMask = { data: Uint8Array.from({ length: n * s.S }, (_, i) => (i % 7 === 3 ? 1 : 0)), shape: [n, s.S] };
      base.attnMask = random([s.L, s.S]);
    }
    if (s.causal) base.isCausal = true;
    for (const extra of [{ needWeights: false }, { needWeights: true }, { averageAttnWeights: false }]) {
      const options = { ...base, ...extra };
      const want = a.forward(q, k, v, options);
      const got = b.forward(q, k, v, options);
      assertSameBits(got.output, want.output, `output ${JSON.stringify(extra)}`);
      assertSameBits(got.weights, want.weights, `weights ${JSON.stringify(extra)}`);
    }
    const want = a.trace(q, k, v, base);
    const got = b.trace(q, k, v, base);
    for (const stage of Object.keys(want)) assertSameBits(got[stage], want[stage], `trace ${stage}`);
    a.dispose();
    b.dispose();
  });
}

test('the 2-thread module: repeated calls allocate nothing after the first', () => {
  const [a, b] = pair({ embedDim: 96, numHeads: 6 });
  a.dispose();
  const x = random([70, 2, 96]);
  const options = { averageAttnWeights: false };
  const first = b.forward(x, x, x, options);
  const before = mt.memory();
  for (let i = 0; i < 200; i++) {
    const r = b.forward(x, x, x, options);
    if (i % 50 === 0) assertSameBits(r.output, first.output, `call ${i}`);
  }
  assert.deepEqual(mt.memory(), before);
  b.dispose();
  assert.equal(mt.liveHandles(), 0);
});

test('init: a bad options.threads is INVALID_ARGUMENT naming it', async () => {
  for (const threads of [0, -1, 1.5, '2', 65, NaN, true]) {
    await assert.rejects(init({ threads }), (e) => {
      assert.ok(e instanceof HeadscopeError);
      assert.equal(e.code, 'INVALID_ARGUMENT');
      assert.match(e.message, /options\.threads: expected an integer in \[1, 64\]/);
      return true;
    }, `threads: ${String(threads)}`);
  }
  await assert.rejects(init({ thread: 2 }), (e) => e.code === 'INVALID_ARGUMENT' &&
    /init: options\.thread: unknown option/.test(e.message));
  await assert.rejects(init(null), (e) => e.code === 'INVALID_ARGUMENT' && /init: options/.test(e.message));
});

test('init: threads without SharedArrayBuffer is LOAD_ERROR naming threads and COOP/COEP', async () => {
  const saved = globalThis.SharedArrayBuffer;
  delete globalThis.SharedArrayBuffer;
  try {
    await assert.rejects(init({ threads: 3 }), (e) => {
      assert.ok(e instanceof HeadscopeError);
      assert.equal(e.code, 'LOAD_ERROR');
      assert.match(e.message, /options\.threads = 3 needs SharedArrayBuffer/);
      assert.match(e.message, /Cross-Origin-Opener-Policy: same-origin/);
      assert.match(e.message, /Cross-Origin-Embedder-Policy: require-corp/);
      return true;
    });
  } finally {
    globalThis.SharedArrayBuffer = saved;
  }
  // The failure is not cached: with SharedArrayBuffer back, the same call loads.
  const hs3 = await init({ threads: 3 });
  assert.equal(hs3.threads, 3);
  const [a] = [hs3.createMultiheadAttention({ embedDim: 768, numHeads: 12 })];
  a.dispose();
});
