// Soak: many calls, memory flat. After a warm-up (workspace, input arena and result buffers sized
// once per module), forward calls allocate nothing: hs.memory()'s wasmBytes (the WebAssembly
// memory) and heapInUse (malloc's bytes in use) are identical before and after, whatever the
// count. Modules created and disposed return the heap to its baseline; errors leave nothing behind.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { init, HeadscopeError } from '../../web/lib/index.js';
import { referenceForward } from './reference.js';
import { mulberry32 } from './helpers.js';

const hs = await init();

after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const rng = mulberry32(7);
const random = (shape) => ({ data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => rng() * 2 - 1), shape });

function module(config) {
  const mha = hs.createMultiheadAttention(config);
  const stateDict = Object.fromEntries(Object.entries(mha.parameterShapes()).map(([k, s]) => [k, random(s)]));
  mha.loadStateDict(stateDict);
  return { mha, stateDict };
}

function assertSameMemory(before, after, what) {
  assert.equal(after.wasmBytes, before.wasmBytes, `${what}: WebAssembly memory ${before.wasmBytes} -> ${after.wasmBytes}`);
  assert.equal(after.heapInUse, before.heapInUse, `${what}: malloc heap in use ${before.heapInUse} -> ${after.heapInUse}`);
}

const sameTensor = (a, b) => a === b || (a !== null && b !== null && a.shape.join() === b.shape.join() &&
  a.data.every((x, i) => Object.is(x, b.data[i])));

test('100,000 forward calls of one shape: memory flat, results unchanged', () => {
  const { mha, stateDict } = module({ embedDim: 8, numHeads: 2 });
  const x = random([5, 2, 8]);  // (L, N, E)
  const options = { keyPaddingMask: { data: Uint8Array.from([0, 0, 0, 1, 1, 0, 0, 0, 0, 1]), shape: [2, 5] } };
  const first = mha.forward(x, x, x, options);
  const want = referenceForward(mha.config, stateDict, x, x, x, options);
  first.output.data.forEach((v, i) => assert.ok(Math.abs(v - want.output.data[i]) < 1e-5));
  for (let i = 0; i < 100; i++) mha.forward(x, x, x, options);  // warm
  const before = hs.memory();
  const started = performance.now();
  for (let i = 1; i <= 100_000; i++) {
    const r = mha.forward(x, x, x, options);
    if (i % 20_000 === 0) {
      assertSameMemory(before, hs.memory(), `after ${i} calls`);
      assert.ok(sameTensor(r.output, first.output) && sameTensor(r.weights, first.weights), `call ${i} differs`);
    }
  }
  const ms = performance.now() - started;
  assertSameMemory(before, hs.memory(), 'after 100,000 calls');
  console.log(`# soak: 100,000 forward calls (L=5, N=2, E=8, 2 heads, key padding mask) in ${Math.round(ms)} ms ` +
    `(${(ms * 1000 / 100_000).toFixed(1)} us/call); heap ${before.heapInUse} bytes, memory ${before.wasmBytes} bytes, flat`);
  mha.dispose();
});

test('20,000 calls of mixed shapes, options, trace and forward: memory flat after one round', () => {
  const a = module({ embedDim: 12, numHeads: 3, addBiasKV: true, batchFirst: true });
  const b = module({ embedDim: 6, numHeads: 2, kdim: 3, vdim: 5, addZeroAttn: true, bias: false });
  const kinds = [
    () => { const q = random([2, 7, 12]); return () => a.mha.forward(q, q, q); },
    () => { const q = random([3, 1, 12]); const k = random([3, 9, 12]); return () => a.mha.forward(q, k, k, { averageAttnWeights: false }); },
    () => { const q = random([4, 12]); return () => a.mha.forward(q, q, q, { isCausal: true, needWeights: false }); },
    () => { const q = random([1, 8, 12]); return () => a.mha.trace(q, q, q, { attnMask: { data: new Float32Array(8 * 8).fill(-1), shape: [8, 8] } }); },
    () => { const q = random([0, 2, 12]); return () => a.mha.forward(q, q, q); },
    () => { const q = random([5, 6]); const k = random([4, 3]); const v = random([4, 5]); return () => b.mha.forward(q, k, v, { keyPaddingMask: [true, true, true, true] }); },
    () => { const q = random([2, 3, 6]); const k = random([6, 3, 3]); const v = random([6, 3, 5]); return () => b.mha.trace(q, k, v); },
    () => { const q = random([8, 1, 6]); const k = random([1, 1, 3]); const v = random([1, 1, 5]); return () => b.mha.forward(q, k, v, { attnMask: { data: new Uint8Array(8 * 2), shape: [2, 8, 1] } }); },
  ].map((make) => make());
  const firsts = kinds.map((call) => call());
  for (let round = 0; round < 2; round++) kinds.forEach((call) => call());
  const before = hs.memory();
  for (let i = 0; i < 20_000; i++) {
    const r = kinds[i % kinds.length]();
    if (i < kinds.length * 2) {
      const f = firsts[i % kinds.length];
      for (const k of Object.keys(f)) assert.ok(sameTensor(r[k], f[k]), `kind ${i % kinds.length}: ${k} differs`);
    }
  }
  assertSameMemory(before, hs.memory(), 'after 20,000 mixed calls');
  a.mha.dispose();
  b.mha.dispose();
});

test('1,000 create/load/forward/dispose cycles return the heap to its baseline', () => {
  const x = random([3, 2, 8]);
  const cycle = (i) => {
    const { mha } = module({ embedDim: 8, numHeads: [1, 2, 4, 8][i % 4], addBiasKV: i % 3 === 0 });
    mha.forward(x, x, x);
    if (i % 2) mha.trace(x, x, x);
    mha.dispose();
  };
  cycle(0);  // first use of embind's machinery
  const baseline = hs.memory();
  for (let i = 0; i < 1000; i++) {
    cycle(i);
    assert.equal(hs.liveHandles(), 0);
  }
  assertSameMemory(baseline, hs.memory(), 'after 1,000 cycles');
  // Modules held at once, then disposed: back to the baseline too.
  const held = Array.from({ length: 50 }, (_, i) => module({ embedDim: 16, numHeads: 4, batchFirst: i % 2 === 0 }).mha);
  held.forEach((m) => m.forward(random([2, 4, 16]), random([2, 4, 16]), random([2, 4, 16])));
  assert.equal(hs.liveHandles(), 50);
  assert.ok(hs.memory().heapInUse > baseline.heapInUse);
  held.forEach((m) => m.dispose());
  assert.equal(hs.memory().heapInUse, baseline.heapInUse);
  assert.equal(hs.liveHandles(), 0);
});

test('10,000 bad calls of every kind do not grow the heap; the module computes the same after', () => {
  const { mha } = module({ embedDim: 4, numHeads: 2 });
  const x = random([3, 4]);
  const want = mha.forward(x, x, x);
  const disposed = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2 });
  disposed.dispose();
  const empty = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2 });  // no weights loaded
  // Tiny inputs, per-head weights of 4 GiB: over the default 2 GiB limit.
  const wide = module({ embedDim: 256, numHeads: 256, kdim: 1, vdim: 1, bias: false }).mha;
  const wideQ = random([128, 256]);
  const wideK = random([32768, 1]);
  const doc = { config: { embed_dim: 4, num_heads: 2 }, state_dict: {}, inputs: { query: [[1, 2, 3, 4]] } };
  const bad = [
    ['INVALID_ARGUMENT', () => mha.forward(null, x, x)],
    ['INVALID_ARGUMENT', () => mha.forward('x', x, x)],
    ['SHAPE_MISMATCH', () => mha.forward([[1, 2], [3]], x, x)],
    ['SHAPE_MISMATCH', () => mha.forward(random([3, 5]), x, x)],                      // C++: last dimension
    ['SHAPE_MISMATCH', () => mha.forward(x, random([2, 4]), x)],                      // C++: S of key vs value
    ['SHAPE_MISMATCH', () => mha.forward(x, x, x, { keyPaddingMask: [true] })],       // C++: mask shape
    ['INVALID_ARGUMENT', () => mha.forward(x, x, x, { isCausal: true, attnMask: [[true, true, true], [true, true, true], [true, true, true]] })],
    ['INVALID_ARGUMENT', () => mha.forward(x, x, x, { needWeights: 1 })],
    ['INVALID_ARGUMENT', () => mha.forward(x, x, x, { nope: 1 })],
    ['SHAPE_MISMATCH', () => mha.forward({ data: new Float32Array(5), shape: [3, 4] }, x, x)],
    ['INVALID_ARGUMENT', () => mha.forward({ data: new Float64Array(12), shape: [3, 4] }, x, x)],
    ['UNKNOWN_PARAMETER', () => mha.loadStateDict({ foo: [1] })],
    ['SHAPE_MISMATCH', () => mha.loadStateDict({ in_proj_bias: [1, 2] }, { strict: false })],
    ['MISSING_PARAMETER', () => mha.loadStateDict({ in_proj_bias: random([12]) })],
    ['MISSING_PARAMETER', () => empty.forward(x, x, x)],
    ['INVALID_ARGUMENT', () => hs.createMultiheadAttention({ embedDim: 4, numHeads: 3 })],
    ['INVALID_ARGUMENT', () => hs.createMultiheadAttention({ embedDim: 0, numHeads: 1 })],
    ['DISPOSED', () => disposed.forward(x, x, x)],
    ['PARSE_ERROR', () => hs.runCase('{')],
    ['MISSING_PARAMETER', () => hs.runCase(doc)],                                      // created, then disposed
    ['RESOURCE_EXHAUSTED', () => wide.forward(wideQ, wideK, wideK, { averageAttnWeights: false })],
    ['RESOURCE_EXHAUSTED', () => wide.trace(wideQ, wideK, wideK)],
  ];
  const expectCode = ([code, fn], i) => assert.throws(fn, (e) => e instanceof HeadscopeError && e.code === code,
    `bad call ${i}: expected ${code}`);
  bad.forEach(expectCode);  // warm: the input arena of the largest refused inputs
  const before = hs.memory();
  for (let i = 0; i < 10_000; i++) expectCode(bad[i % bad.length], i % bad.length);
  assertSameMemory(before, hs.memory(), 'after 10,000 bad calls');
  const again = mha.forward(x, x, x);
  assert.ok(sameTensor(again.output, want.output) && sameTensor(again.weights, want.weights));
  assert.equal(hs.liveHandles(), 3);
  for (const m of [mha, empty, wide]) m.dispose();
});
