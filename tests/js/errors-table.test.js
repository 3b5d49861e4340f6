// The classes of bad input of docs/errors.md that api.test.js, worker.test.js and the C++ tests
// do not already cover, one test per row: what each class gets (a HeadscopeError with a stable
// code and a message naming the argument), and that the module computes correct results after
// every error (checked against the plain-JS reference).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { init, HeadscopeError } from '../../web/lib/index.js';
import { referenceForward } from './reference.js';
import { expectError } from './helpers.js';

const hs = await init();
const seed = JSON.parse(readFileSync(new URL('../golden/seed-worked-example.json', import.meta.url), 'utf8'));

after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

function fill(shape, offset = 0) {
  const n = shape.reduce((a, b) => a * b, 1);
  return { data: Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.7 + offset) * 0.5), shape };
}

// A module with weights, and a check that it still computes what the reference computes.
function module(config) {
  const mha = hs.createMultiheadAttention(config);
  const stateDict = Object.fromEntries(Object.entries(mha.parameterShapes()).map(([k, s], i) => [k, fill(s, i)]));
  mha.loadStateDict(stateDict);
  const c = mha.config;
  const lead = (n, len, dim) => (c.batchFirst ? [n, len, dim] : [len, n, dim]);
  const q = fill(lead(2, 3, c.embedDim), 1);
  const k = fill(lead(2, 5, c.kdim), 2);
  const v = fill(lead(2, 5, c.vdim), 3);
  const options = { keyPaddingMask: [[false, true, false, false, false], [true, true, true, true, true]], averageAttnWeights: false };
  const want = referenceForward(c, stateDict, q, k, v, options);
  const stillWorks = () => {
    const got = mha.forward(q, k, v, options);
    for (const name of ['output', 'weights']) {
      assert.deepEqual(got[name].shape, want[name].shape);
      got[name].data.forEach((x, i) => assert.ok(Math.abs(x - want[name].data[i]) < 1e-5, `${name}[${i}]`));
    }
  };
  stillWorks();
  return { mha, stateDict, stillWorks };
}

// Runs each [fn, code, ...fragments] and checks the module after each.
function refuseAll(m, cases) {
  for (const [fn, code, ...fragments] of cases) {
    expectError(fn, code, ...fragments);
    m.stillWorks();
  }
}

const X = [[1, 0, 1, 2], [0, 2, 1, 0], [1, 1, 0, 1]];  // (L=3, E=4)

test('sizes: zero, negative, fractional, NaN, infinite, absurd or non-numbers in the config', () => {
  // Numbers that are no size get the core's rule (it owns the range); other types JS's type check.
  const bad = [0, -1, 2.5, NaN, Infinity, -Infinity, 2 ** 24 + 1, 2 ** 53];
  const shown = ['0', '-1', '2.5', 'NaN', 'Infinity', '-Infinity', '16777217', '9007199254740992'];
  for (const name of ['embedDim', 'numHeads', 'kdim', 'vdim']) {
    bad.forEach((value, i) => {
      const e = expectError(() => hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, [name]: value }),
        'INVALID_ARGUMENT', `config.${name}: expected`, `an integer in [1, 16777216], got number ${shown[i]}`);
      assert.equal(e.argument, `config.${name}`);
    });
    for (const value of ['4', true, {}, [4]]) {
      expectError(() => hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, [name]: value }),
        'INVALID_ARGUMENT', `config.${name}: expected`, 'a number');
    }
  }
  expectError(() => hs.createMultiheadAttention({ numHeads: 2 }), 'INVALID_ARGUMENT', 'config.embedDim', 'got undefined');
  expectError(() => hs.createMultiheadAttention({ embedDim: 4, numHeads: null }), 'INVALID_ARGUMENT', 'config.numHeads', 'got null');
  // The bound itself is allowed, and nothing proportional to it is allocated before weights are.
  const before = hs.memory().heapInUse;
  const huge = hs.createMultiheadAttention({ embedDim: 2 ** 24, numHeads: 1, kdim: 2 ** 24, vdim: null });
  assert.ok(hs.memory().heapInUse - before < 65536);
  assert.deepEqual(huge.parameterShapes()['out_proj.weight'], [2 ** 24, 2 ** 24]);
  assert.equal(huge.config.vdim, 2 ** 24);
  huge.dispose();
  assert.equal(hs.liveHandles(), 0);
});

test('embedDim not divisible by numHeads, including more heads than dims', () => {
  for (const [embedDim, numHeads] of [[4, 3], [6, 4], [4, 8], [1, 2], [15, 10]]) {
    expectError(() => hs.createMultiheadAttention({ embedDim, numHeads }), 'INVALID_ARGUMENT',
      `config.numHeads: embedDim (${embedDim}) must be divisible by numHeads (${numHeads})`);
  }
  assert.equal(hs.liveHandles(), 0);
});

test('sizes in tensor shapes: negative, fractional, NaN, infinite, non-numbers, absurd, too many', () => {
  const m = module({ embedDim: 4, numHeads: 2 });
  const x = fill([3, 4]);
  const shapes = [[3, -4], [3, 4.5], [3, NaN], [3, Infinity], [3, '4'], [3, null], [3, undefined]];
  const cases = [];
  for (const shape of shapes) {
    cases.push([() => m.mha.forward({ data: x.data, shape }, x, x), 'INVALID_ARGUMENT', 'query.shape[1]: expected a non-negative integer']);
    cases.push([() => m.mha.forward(x, x, x, { keyPaddingMask: { data: new Uint8Array(3), shape: [shape[1]] } }),
      'INVALID_ARGUMENT', 'options.keyPaddingMask.shape[0]']);
    cases.push([() => m.mha.loadStateDict({ 'out_proj.bias': { data: new Float32Array(4), shape: [shape[1]] } }, { strict: false }),
      'INVALID_ARGUMENT', "stateDict['out_proj.bias'].shape[0]"]);
  }
  cases.push(
    [() => m.mha.forward({ data: new Float32Array(0), shape: [2 ** 24 + 1, 0] }, x, x), 'RESOURCE_EXHAUSTED',
      'query.shape[0]: 16777217 exceeds the maximum size 16777216'],
    [() => m.mha.forward(x, x, x, { attnMask: { data: new Float32Array(0), shape: [0, 2 ** 40] } }), 'RESOURCE_EXHAUSTED',
      'options.attnMask.shape[1]'],
    [() => m.mha.forward({ data: x.data, shape: [1, 1, 1, 3, 4] }, x, x), 'SHAPE_MISMATCH', 'query.shape: expected at most 4 dimensions'],
    [() => m.mha.forward({ data: x.data, shape: '3x4' }, x, x), 'INVALID_ARGUMENT', 'query.shape: expected an array of sizes'],
    [() => m.mha.forward({ data: x.data }, x, x), 'INVALID_ARGUMENT', 'query.shape: expected an array of sizes, got undefined'],
  );
  refuseAll(m, cases);
  m.mha.dispose();
});

test('zero sizes are valid: empty sequences, an empty batch, a huge batch of empty sequences', () => {
  const m = module({ embedDim: 4, numHeads: 2 });
  const bias = m.stateDict['out_proj.bias'].data;
  // L = 0: an empty output of the query's shape.
  let r = m.mha.forward(fill([0, 2, 4]), fill([5, 2, 4]), fill([5, 2, 4]));
  assert.deepEqual([r.output.shape, r.weights.shape], [[0, 2, 4], [2, 0, 5]]);
  // S = 0: no key to attend to, so every row is fully masked: out_proj.bias.
  r = m.mha.forward(fill([3, 4]), fill([0, 4]), fill([0, 4]), { keyPaddingMask: { data: new Uint8Array(0), shape: [0] } });
  assert.deepEqual([r.output.shape, r.weights.shape], [[3, 4], [3, 0]]);
  assert.deepEqual(Array.from(r.output.data), [...bias, ...bias, ...bias]);
  // N = 0.
  r = m.mha.forward(fill([3, 0, 4]), fill([5, 0, 4]), fill([5, 0, 4]), { averageAttnWeights: false });
  assert.deepEqual([r.output.shape, r.weights.shape], [[3, 0, 4], [0, 2, 3, 5]]);
  // A batch of 2^24 empty sequences: nothing to compute, answered at once.
  const started = performance.now();
  const empty = { data: new Float32Array(0), shape: [0, 2 ** 24, 4] };
  r = m.mha.forward(empty, empty, empty);
  assert.deepEqual([r.output.shape, r.weights.shape], [[0, 2 ** 24, 4], [2 ** 24, 0, 0]]);
  assert.ok(performance.now() - started < 1000);
  m.stillWorks();
  m.mha.dispose();
});

test('wrong rank or shape of query, key or value', () => {
  const m = module({ embedDim: 4, numHeads: 2, kdim: 3, vdim: 5, batchFirst: true });
  const q = fill([2, 3, 4]);
  const k = fill([2, 5, 3]);
  const v = fill([2, 5, 5]);
  refuseAll(m, [
    [() => m.mha.forward(fill([4]), k, v), 'SHAPE_MISMATCH', 'query: expected a 2-D (L, E) unbatched or 3-D (N, L, E) batched tensor, got shape [4]'],
    [() => m.mha.forward({ data: new Float32Array(1), shape: [] }, k, v), 'SHAPE_MISMATCH', 'query:', 'got shape []'],
    [() => m.mha.forward(fill([1, 2, 3, 4]), k, v), 'SHAPE_MISMATCH', 'query:', 'got shape [1, 2, 3, 4]'],
    [() => m.mha.forward([], k, v), 'SHAPE_MISMATCH', 'query:', 'got shape [0]'],
    [() => m.mha.forward(q, fill([5, 3]), v), 'SHAPE_MISMATCH', 'key: expected a 3-D (batched, like query), got shape [5, 3]'],
    [() => m.mha.forward(q, k, fill([5, 5])), 'SHAPE_MISMATCH', 'value: expected a 3-D (batched, like query)'],
    [() => m.mha.forward(fill([2, 3, 5]), k, v), 'SHAPE_MISMATCH', 'query: expected last dimension embedDim = 4, got shape [2, 3, 5]'],
    [() => m.mha.forward(q, fill([2, 5, 4]), v), 'SHAPE_MISMATCH', 'key: expected last dimension kdim = 3, got shape [2, 5, 4]'],
    [() => m.mha.forward(q, k, fill([2, 5, 3])), 'SHAPE_MISMATCH', 'value: expected last dimension vdim = 5'],
    [() => m.mha.forward([[1, 2, 3, 4], [1, 2, 3]], k, v), 'SHAPE_MISMATCH', 'query[1]: expected 4 elements like its siblings, got 3'],
    [() => m.mha.forward([[1, 2, 3, 4], 5], k, v), 'SHAPE_MISMATCH', 'query[1]: expected an array nested 2 deep like its siblings'],
    [() => m.mha.forward([[1, 2, 3, [4]]], k, v), 'SHAPE_MISMATCH', 'query[0][3]: expected a value like its siblings'],
  ]);
  m.mha.dispose();
});

test('mismatched batch sizes or sequence lengths', () => {
  const seqFirst = module({ embedDim: 4, numHeads: 2 });
  refuseAll(seqFirst, [
    [() => seqFirst.mha.forward(fill([3, 2, 4]), fill([5, 3, 4]), fill([5, 3, 4])), 'SHAPE_MISMATCH',
      "key: batch size 3 does not match query's 2 (key shape [5, 3, 4], query shape [3, 2, 4])"],
    [() => seqFirst.mha.forward(fill([3, 2, 4]), fill([5, 2, 4]), fill([5, 1, 4])), 'SHAPE_MISMATCH',
      "value: batch size 1 does not match query's 2"],
    [() => seqFirst.mha.forward(fill([3, 2, 4]), fill([5, 2, 4]), fill([4, 2, 4])), 'SHAPE_MISMATCH',
      "value: sequence length 4 does not match key's 5"],
    [() => seqFirst.mha.forward(fill([3, 4]), fill([5, 4]), fill([6, 4])), 'SHAPE_MISMATCH', "value: sequence length 6 does not match key's 5"],
  ]);
  // L and S may differ (cross-attention): not an error.
  assert.deepEqual(seqFirst.mha.forward(fill([7, 4]), fill([2, 4]), fill([2, 4])).weights.shape, [7, 2]);
  seqFirst.mha.dispose();
  const batchFirst = module({ embedDim: 4, numHeads: 2, batchFirst: true });
  refuseAll(batchFirst, [
    // A sequence-first tensor given to a batchFirst module reads as (N=3, L=2).
    [() => batchFirst.mha.forward(fill([2, 3, 4]), fill([5, 2, 4]), fill([5, 2, 4])), 'SHAPE_MISMATCH', "key: batch size 5 does not match query's 2"],
  ]);
  batchFirst.mha.dispose();
});

test('masks of the wrong shape, element type or length', () => {
  const m = module({ embedDim: 4, numHeads: 2 });
  const q = fill([3, 2, 4]);
  const kv = fill([5, 2, 4]);
  const f = (mask) => () => m.mha.forward(q, kv, kv, mask);
  refuseAll(m, [
    [f({ keyPaddingMask: { data: new Uint8Array(5), shape: [5] } }), 'SHAPE_MISMATCH', 'options.keyPaddingMask: expected shape (N, S) = [2, 5], got [5]'],
    [f({ keyPaddingMask: { data: new Uint8Array(10), shape: [5, 2] } }), 'SHAPE_MISMATCH', 'options.keyPaddingMask', 'got [5, 2]'],
    [f({ attnMask: { data: new Uint8Array(15), shape: [5, 3] } }), 'SHAPE_MISMATCH',
      'options.attnMask: expected shape (L, S) = [3, 5] or (N * numHeads, L, S) = [4, 3, 5], got [5, 3]'],
    [f({ attnMask: { data: new Uint8Array(30), shape: [2, 3, 5] } }), 'SHAPE_MISMATCH', 'options.attnMask', 'got [2, 3, 5]'],
    [f({ attnMask: { data: new Uint8Array(60), shape: [2, 2, 3, 5] } }), 'SHAPE_MISMATCH', 'options.attnMask', 'got [2, 2, 3, 5]'],
    [f({ keyPaddingMask: { data: new Uint8Array(9), shape: [2, 5] } }), 'SHAPE_MISMATCH', 'options.keyPaddingMask: data has 9 elements but shape [2, 5] needs 10'],
    [f({ attnMask: { data: new Float32Array(16), shape: [3, 5] } }), 'SHAPE_MISMATCH', 'options.attnMask: data has 16 elements'],
    [f({ attnMask: [[true, false, false, false, false], [false, false, false, false]] }), 'SHAPE_MISMATCH', 'options.attnMask[1]: expected 5 elements'],
    ...[Int8Array, Uint8ClampedArray, Int32Array, Float64Array, Uint16Array].map((T) => [
      f({ keyPaddingMask: { data: new T(10), shape: [2, 5] } }), 'INVALID_ARGUMENT',
      `options.keyPaddingMask.data: expected a Uint8Array (booleans) or a Float32Array (added to the scores), got a ${T.name}`]),
    [f({ attnMask: { data: Array(15).fill(false), shape: [3, 5] } }), 'INVALID_ARGUMENT', 'options.attnMask.data', 'got an array of length 15'],
    [f({ keyPaddingMask: [[true, false, 0, false, false], [false, false, false, false, false]] }), 'INVALID_ARGUMENT',
      'options.keyPaddingMask[0][2]: expected a boolean like the first element (masks are all booleans or all numbers), got number 0'],
    [f({ keyPaddingMask: [['no', false, false, false, false], [false, false, false, false, false]] }), 'INVALID_ARGUMENT',
      'options.keyPaddingMask[0][0]: expected a boolean or a number, got string "no"'],
    [f({ keyPaddingMask: [[null, false, false, false, false], [false, false, false, false, false]] }), 'INVALID_ARGUMENT',
      'options.keyPaddingMask[0][0]', 'got null'],
    [f({ attnMask: 'causal' }), 'INVALID_ARGUMENT', 'options.attnMask: expected null or a mask', 'got string "causal"'],
    [f({ attnMask: true }), 'INVALID_ARGUMENT', 'options.attnMask: expected null or a mask', 'got boolean true'],
    [f({ attnMask: new Uint8Array(15) }), 'INVALID_ARGUMENT', 'options.attnMask: expected null or a mask', 'got a Uint8Array'],
    [f({ isCausal: true, attnMask: { data: new Uint8Array(15), shape: [3, 5] } }), 'INVALID_ARGUMENT',
      'options.attnMask: with options.isCausal=true it must be null or the causal mask', 'entry [0, 1] differs'],
  ]);
  m.mha.dispose();
});

test('state_dict entries missing, unknown, mis-shaped, of the wrong type or length', () => {
  const same = module({ embedDim: 4, numHeads: 2, addBiasKV: true });
  const other = module({ embedDim: 4, numHeads: 2, kdim: 3, bias: false });
  const sd = same.stateDict;
  refuseAll(same, [
    // q_proj_weight is in_proj_weight's first block in this config (an alias), in its own shape.
    [() => same.mha.loadStateDict({ ...sd, q_proj_weight: fill([4, 3]) }), 'SHAPE_MISMATCH',
      "stateDict['q_proj_weight']: expected shape [4, 4], got [4, 3]"],
    [() => same.mha.loadStateDict({ ...sd, 'out_proj.Weight': fill([4, 4]) }), 'UNKNOWN_PARAMETER',
      "stateDict['out_proj.Weight']: unknown key for this config (expected keys: in_proj_weight, in_proj_bias, bias_k, bias_v, out_proj.weight, out_proj.bias; or, for in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight)"],
    [() => same.mha.loadStateDict(new Map([['bias_q', fill([1, 1, 4])]])), 'UNKNOWN_PARAMETER', "stateDict['bias_q']"],
    [() => same.mha.loadStateDict({ ...sd, bias_k: fill([4]) }), 'SHAPE_MISMATCH', "stateDict['bias_k']: expected shape [1, 1, 4], got [4]"],
    [() => same.mha.loadStateDict({ ...sd, in_proj_weight: fill([4, 12]) }), 'SHAPE_MISMATCH', "stateDict['in_proj_weight']: expected shape [12, 4], got [4, 12]"],
    [() => same.mha.loadStateDict({ ...sd, bias_v: undefined }), 'INVALID_ARGUMENT', "stateDict['bias_v']: expected a tensor", 'got undefined'],
    [() => same.mha.loadStateDict({ ...sd, bias_v: null }), 'INVALID_ARGUMENT', "stateDict['bias_v']: expected a tensor", 'got null'],
    [() => same.mha.loadStateDict({ ...sd, bias_v: 'zeros' }), 'INVALID_ARGUMENT', "stateDict['bias_v']", 'got string "zeros"'],
    [() => same.mha.loadStateDict({ ...sd, bias_v: { data: new Float64Array(4), shape: [1, 1, 4] } }), 'INVALID_ARGUMENT',
      "stateDict['bias_v'].data: expected a Float32Array, got a Float64Array of length 4"],
    [() => same.mha.loadStateDict({ ...sd, bias_v: { data: new Float32Array(5), shape: [1, 1, 4] } }), 'SHAPE_MISMATCH',
      "stateDict['bias_v']: data has 5 elements but shape [1, 1, 4] needs 4"],
    [() => same.mha.loadStateDict({ ...sd, bias_v: [[[0, 0, 0, 'x']]] }), 'INVALID_ARGUMENT', "stateDict['bias_v'][0][0][3]: expected a number"],
    [() => same.mha.loadStateDict({ in_proj_weight: sd.in_proj_weight }), 'MISSING_PARAMETER',
      'stateDict: missing in_proj_bias [12], bias_k [1, 1, 4], bias_v [1, 1, 4], out_proj.weight [4, 4], out_proj.bias [4] (pass { strict: false } to load a subset)'],
    [() => same.mha.loadStateDict(sd, { strict: 'no' }), 'INVALID_ARGUMENT', 'options.strict: expected true or false, got string "no"'],
    [() => same.mha.loadStateDict(sd, { strikt: false }), 'INVALID_ARGUMENT', 'options.strikt: unknown option (expected one of strict)'],
    [() => same.mha.loadStateDict(sd, null), 'INVALID_ARGUMENT', 'options: expected an object, got null'],
    [() => same.mha.loadStateDict('weights.json'), 'INVALID_ARGUMENT', 'stateDict: expected an object mapping PyTorch state_dict keys'],
  ]);
  refuseAll(other, [
    [() => other.mha.loadStateDict({ in_proj_weight: fill([12, 4]) }, { strict: false }), 'UNKNOWN_PARAMETER',
      "stateDict['in_proj_weight']: unknown key for this config (expected keys: q_proj_weight, k_proj_weight, v_proj_weight, out_proj.weight)"],
    [() => other.mha.loadStateDict({ k_proj_weight: fill([3, 4]) }, { strict: false }), 'SHAPE_MISMATCH',
      "stateDict['k_proj_weight']: expected shape [4, 3], got [3, 4]"],
    [() => other.mha.loadStateDict({ in_proj_bias: fill([12]) }, { strict: false }), 'UNKNOWN_PARAMETER', "stateDict['in_proj_bias']"],
  ]);
  // A module whose weights were never (or only partly) loaded refuses to compute.
  const fresh = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, kdim: 3 });
  fresh.loadStateDict({ q_proj_weight: fill([4, 4]) }, { strict: false });
  expectError(() => fresh.forward(fill([2, 4]), fill([2, 3]), fill([2, 4])), 'MISSING_PARAMETER',
    'stateDict: missing k_proj_weight [4, 3], v_proj_weight [4, 4], in_proj_bias [12], out_proj.weight [4, 4], out_proj.bias [4]');
  expectError(() => fresh.trace(fill([2, 4]), fill([2, 3]), fill([2, 4])), 'MISSING_PARAMETER', 'stateDict: missing');
  fresh.dispose();
  same.mha.dispose();
  other.mha.dispose();
});

test('data arrays whose length does not match their shape', () => {
  const m = module({ embedDim: 4, numHeads: 2 });
  const x = fill([3, 4]);
  refuseAll(m, [
    [() => m.mha.forward({ data: new Float32Array(13), shape: [3, 4] }, x, x), 'SHAPE_MISMATCH', 'query: data has 13 elements but shape [3, 4] needs 12'],
    [() => m.mha.forward(x, { data: new Float32Array(0), shape: [3, 4] }, x), 'SHAPE_MISMATCH', 'key: data has 0 elements but shape [3, 4] needs 12'],
    [() => m.mha.forward(x, x, { data: new Float32Array(11), shape: [3, 4] }), 'SHAPE_MISMATCH', 'value: data has 11 elements'],
    [() => m.mha.forward(x, x, x, { attnMask: { data: new Uint8Array(8), shape: [3, 3] } }), 'SHAPE_MISMATCH', 'options.attnMask: data has 8 elements but shape [3, 3] needs 9'],
    [() => m.mha.loadStateDict({ in_proj_bias: { data: new Float32Array(13), shape: [12] } }, { strict: false }), 'SHAPE_MISMATCH',
      "stateDict['in_proj_bias']: data has 13 elements but shape [12] needs 12"],
  ]);
  m.mha.dispose();
});

test('wrong typed-array types and typed arrays without a shape', () => {
  const m = module({ embedDim: 4, numHeads: 2 });
  const x = fill([3, 4]);
  const cases = [Float64Array, Int32Array, Uint8Array, Int16Array].map((T) => [
    () => m.mha.forward({ data: new T(12), shape: [3, 4] }, x, x), 'INVALID_ARGUMENT', `query.data: expected a Float32Array, got a ${T.name} of length 12`]);
  cases.push(
    [() => m.mha.forward({ data: new DataView(new ArrayBuffer(48)), shape: [3, 4] }, x, x), 'INVALID_ARGUMENT', 'query.data: expected a Float32Array'],
    [() => m.mha.forward({ data: new ArrayBuffer(48), shape: [3, 4] }, x, x), 'INVALID_ARGUMENT', 'query.data: expected a Float32Array'],
    [() => m.mha.forward({ data: Array(12).fill(0), shape: [3, 4] }, x, x), 'INVALID_ARGUMENT', 'query.data: expected a Float32Array, got an array of length 12'],
    [() => m.mha.forward(x, x.data, x), 'INVALID_ARGUMENT', 'key: expected a tensor (nested arrays of numbers, or { data: Float32Array, shape: number[] }), got a Float32Array of length 12'],
  );
  refuseAll(m, cases);
  // Other properties beside data and shape are ignored (a Tensor has toArray()).
  const r = m.mha.forward({ data: x.data, shape: [3, 4], note: 'extra' }, x, x);
  assert.deepEqual(r.output.shape, [3, 4]);
  m.mha.dispose();
});

test('null, undefined, strings, numbers and objects where tensors belong', () => {
  const m = module({ embedDim: 4, numHeads: 2 });
  const cases = [];
  for (const [value, description] of [[null, 'got null'], [undefined, 'got undefined'], ['X', 'got string "X"'],
    [4, 'got number 4'], [true, 'got boolean true'], [{ shape: [3, 4] }, 'got an object with keys [shape]'], [() => X, 'got function']]) {
    cases.push([() => m.mha.forward(value, X, X), 'INVALID_ARGUMENT', 'query: expected a tensor', description]);
    cases.push([() => m.mha.forward(X, value, X), 'INVALID_ARGUMENT', 'key: expected a tensor', description]);
    cases.push([() => m.mha.forward(X, X, value), 'INVALID_ARGUMENT', 'value: expected a tensor', description]);
  }
  cases.push(
    [() => m.mha.forward(X), 'INVALID_ARGUMENT', 'key: expected a tensor', 'got undefined'],
    [() => m.mha.forward([[1, 2, null, 4]], X, X), 'INVALID_ARGUMENT', 'query[0][2]: expected a number, got null'],
    [() => m.mha.forward([[1, 2, '3', 4]], X, X), 'INVALID_ARGUMENT', 'query[0][2]: expected a number, got string "3"'],
    [() => m.mha.forward([[1, 2, 3n, 4]], X, X), 'INVALID_ARGUMENT', 'query[0][2]: expected a number, got bigint 3'],
  );
  refuseAll(m, cases);
  m.mha.dispose();
});

test('unknown option names, non-boolean flags, options that are not objects', () => {
  const m = module({ embedDim: 4, numHeads: 2 });
  const cases = [];
  for (const flag of ['needWeights', 'averageAttnWeights', 'isCausal']) {
    for (const [value, got] of [[1, 'got number 1'], [0, 'got number 0'], ['true', 'got string "true"'], [null, 'got null']]) {
      cases.push([() => m.mha.forward(X, X, X, { [flag]: value }), 'INVALID_ARGUMENT', `options.${flag}: expected true or false, ${got}`]);
    }
  }
  for (const flag of ['bias', 'addBiasKV', 'addZeroAttn', 'batchFirst']) {
    cases.push([() => hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, [flag]: 'yes' }), 'INVALID_ARGUMENT',
      `config.${flag}: expected true or false, got string "yes"`]);
  }
  cases.push(
    [() => m.mha.forward(X, X, X, { need_weights: false }), 'INVALID_ARGUMENT',
      'options.need_weights: unknown option (expected one of keyPaddingMask, attnMask, needWeights, averageAttnWeights, isCausal, headGates, headStats, alibi, window, out)'],
    [() => m.mha.trace(X, X, X, { need_weights: false }), 'INVALID_ARGUMENT',
      'options.need_weights: unknown option (expected one of keyPaddingMask, attnMask, needWeights, averageAttnWeights, isCausal, headGates, headStats, alibi, window)'],
    [() => m.mha.forward(X, X, X, { out: new Float32Array(3) }), 'SHAPE_MISMATCH',
      'options.out: expected a Float32Array of 12 elements (the output has the query\'s shape [3, 4]), got length 3'],
    [() => m.mha.forward(X, X, X, { dropout: 0 }), 'INVALID_ARGUMENT', 'options.dropout: unknown option'],
    [() => hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, dropout: 0.1 }), 'INVALID_ARGUMENT',
      'config.dropout: unknown option (expected one of embedDim, numHeads, numKvHeads, bias, addBiasKV, addZeroAttn, kdim, vdim, batchFirst, ropeDims, ropeLayout, ropeBase, attnSinks)'],
    [() => m.mha.forward(X, X, X, null), 'INVALID_ARGUMENT', 'options: expected an object, got null'],
    [() => m.mha.forward(X, X, X, []), 'INVALID_ARGUMENT', 'options: expected an object, got an array of length 0'],
    [() => m.mha.forward(X, X, X, 'fast'), 'INVALID_ARGUMENT', 'options: expected an object, got string "fast"'],
    [() => hs.createMultiheadAttention([4, 2]), 'INVALID_ARGUMENT', 'config: expected an object like { embedDim: 4, numHeads: 2 }'],
    [() => hs.createMultiheadAttention('4,2'), 'INVALID_ARGUMENT', 'config: expected an object', 'got string "4,2"'],
  );
  refuseAll(m, cases);
  // undefined values mean "the default", as an absent key does.
  const a = m.mha.forward(X, X, X, { needWeights: undefined, attnMask: undefined, keyPaddingMask: null });
  const b = m.mha.forward(X, X, X);
  assert.deepEqual(a.output.data, b.output.data);
  assert.equal(hs.liveHandles(), 1);
  m.mha.dispose();
});

test('disposed objects refuse use; their config and parameter shapes stay readable', () => {
  const m = module({ embedDim: 4, numHeads: 2 });
  const live = hs.liveHandles();
  m.mha.dispose();
  assert.equal(hs.liveHandles(), live - 1);
  assert.equal(m.mha.disposed, true);
  for (const fn of [() => m.mha.forward(X, X, X), () => m.mha.trace(X, X, X), () => m.mha.loadStateDict(m.stateDict),
    () => m.mha.forward(null), () => m.mha.loadStateDict(null)]) {
    expectError(fn, 'DISPOSED', 'MultiheadAttention: this object was disposed; create a new one');
  }
  m.mha.dispose();  // a no-op
  assert.equal(m.mha.config.embedDim, 4);
  assert.deepEqual(m.mha.parameterShapes().in_proj_weight, [12, 4]);
});

test('runCase and checkCase arguments', () => {
  const result = hs.runCase(seed);
  for (const [doc, got] of [[5, 'got number 5'], [null, 'got null'], [undefined, 'got undefined'], [[seed], 'got an array of length 1'],
    ['', 'not valid JSON'], ['[]', 'got an array of length 0'], ['null', 'got null'], [true, 'got boolean true']]) {
    expectError(() => hs.runCase(doc), 'PARSE_ERROR', '$: ', got);
    expectError(() => hs.checkCase(doc, result), 'PARSE_ERROR', '$: ', got);
  }
  const badResults = [undefined, null, 5, {}, { output: result.output }, { output: result.output.toArray(), weights: null },
    { output: { data: [1, 2], shape: [2] }, weights: null }, { output: result.output, weights: 'none' }];
  for (const r of badResults) {
    expectError(() => hs.checkCase(seed, r), 'INVALID_ARGUMENT', 'result: expected { output: Tensor, weights: Tensor | null }');
  }
  for (const [options, message] of [[{ tolerance: NaN }, 'options.tolerance: expected a non-negative number, got number NaN'],
    [{ tolerance: '1e-4' }, 'options.tolerance', 'got string'], [{ tolerance: -1e-4 }, 'options.tolerance'],
    [{ tol: 1 }, 'options.tol: unknown option (expected one of tolerance)'], [null, 'options: expected an object, got null']]) {
    expectError(() => hs.checkCase(seed, result, options), 'INVALID_ARGUMENT', message);
  }
  // Not errors: a result that crossed a worker boundary (plain objects), a case without expected.
  const plain = { output: { data: result.output.data, shape: result.output.shape }, weights: { ...result.weights } };
  assert.equal(hs.checkCase(seed, plain).ok, true);
  const { expected, ...noExpected } = seed;
  assert.ok(expected);
  assert.deepEqual(hs.checkCase(noExpected, result), { ok: false, maxRelativeError: 0, detail: 'the case has no expected values' });
  // A mismatch is a result, not an error; it names the tensor and index.
  const wrong = { output: { data: result.output.data.map((x, i) => (i === 5 ? x + 1 : x)), shape: [3, 4] }, weights: result.weights };
  assert.match(hs.checkCase(seed, wrong).detail, /^output\[5\]: got .*, expected .* \(relative error/);
  assert.equal(hs.liveHandles(), 0);
});

test('malformed case JSON: the error names the JSON path', () => {
  const with_ = (path, value) => {
    const doc = structuredClone(seed);
    const keys = path.split('.');
    let o = doc;
    for (const k of keys.slice(0, -1)) o = o[k];
    if (value === undefined) delete o[keys.at(-1)];
    else o[keys.at(-1)] = value;
    return doc;
  };
  const cases = [
    [with_('name', 5), 'name: expected a string, got number 5'],
    [with_('config', undefined), 'config: expected an object, got undefined'],
    [with_('config', [4, 2]), 'config: expected an object, got an array'],
    [with_('config.embed_dim', undefined), 'config.embed_dim: required'],
    [with_('config.embed_dim', 0), 'config.embed_dim: expected an integer in [1, 16777216], got number 0'],
    [with_('config.embed_dim', 4.5), 'config.embed_dim: expected an integer in [1, 16777216], got number 4.5'],
    [with_('config.num_heads', '2'), 'config.num_heads: expected an integer in [1, 16777216], got string "2"'],
    [with_('config.num_heads', 3), 'config.num_heads: embed_dim (4) must be divisible by num_heads (3)'],
    [with_('config.kdim', -1), 'config.kdim: expected null (= embed_dim) or an integer in [1, 16777216], got number -1'],
    [with_('config.bias', 'false'), 'config.bias: expected true or false, got string "false"'],
    [with_('config.dropout', 0.1), 'config.dropout: headscope computes the forward pass without dropout; expected 0 or null'],
    [with_('config.heads', 2), 'config.heads: unknown key (expected one of embed_dim, num_heads'],
    [with_('state_dict', null), 'state_dict: expected an object, got null'],
    [with_('state_dict.in_proj_weight', 'identity'), 'state_dict.in_proj_weight: expected a tensor'],
    [with_('state_dict.in_proj_weight', [[1, 0, 0, 0], [1, 0, 0]]), 'state_dict.in_proj_weight[1]: expected 4 elements like its siblings, got 3'],
    [with_('state_dict.in_proj_weight', [[1, 0, 'one', 0]]), 'state_dict.in_proj_weight[0][2]: expected a number (or "inf", "-inf", "nan"), got string "one"'],
    [with_('inputs', undefined), 'inputs: expected an object, got undefined'],
    [with_('inputs.query', undefined), 'inputs.query: required'],
    [with_('inputs.query', [[1, 0, 1, 2], [0, 2]]), 'inputs.query[1]: expected 4 elements like its siblings, got 2'],
    [with_('inputs.key', [[[[[1]]]]]), 'inputs.key: arrays nested deeper than 4 levels'],
    [with_('inputs.value', { data: [1], shape: [1] }), 'inputs.value.data: expected a Float32Array, got an array of length 1'],
    [with_('inputs.key_padding_mask', [false, 'true', false]), 'inputs.key_padding_mask[1]: expected a boolean or a number, got string "true"'],
    [with_('inputs.key_padding_mask', [false, 0, false]), 'inputs.key_padding_mask[1]: expected a boolean like the first element'],
    [with_('inputs.attn_mask', 'causal'), 'inputs.attn_mask: expected null or a mask'],
    [with_('inputs.need_weights', 1), 'inputs.need_weights: expected true or false, got number 1'],
    [with_('inputs.is_causal', 'yes'), 'inputs.is_causal: expected true or false'],
    [with_('inputs.mask', null), 'inputs.mask: unknown key (expected one of query, key, value, key_padding_mask, attn_mask'],
    [with_('expected', 'none'), 'expected: expected an object, got string "none"'],
    [with_('expected.output', undefined), 'expected.output: required'],
    [with_('expected.weights', [[[1, 'x']]]), 'expected.weights[0][0][1]: expected a number (or "inf", "-inf", "nan"), got string "x"'],
  ];
  for (const [doc, message] of cases) {
    const e = expectError(() => hs.runCase(doc), 'PARSE_ERROR', message);
    assert.ok(e.message.startsWith(message.split(':')[0] + ':'), e.message);
    // JSON text gives the same error.
    assert.equal(expectError(() => hs.runCase(JSON.stringify(doc)), 'PARSE_ERROR').message, e.message);
  }
  expectError(() => hs.runCase('{"config": {"embed_dim": 4,}}'), 'PARSE_ERROR', '$: not valid JSON (');
  // A well-formed document whose contents do not fit its config: the API's code, named by the
  // API's argument (query = inputs.query, stateDict['k'] = state_dict.k).
  expectError(() => hs.runCase(with_('inputs.query', [[1, 2, 3]])), 'SHAPE_MISMATCH', 'query: expected last dimension embedDim = 4');
  expectError(() => hs.runCase(with_('state_dict.bias_k', [[[1, 2, 3, 4]]])), 'UNKNOWN_PARAMETER', "stateDict['bias_k']");
  const missing = structuredClone(seed);
  delete missing.state_dict['out_proj.weight'];
  expectError(() => hs.runCase(missing), 'MISSING_PARAMETER', 'stateDict: missing out_proj.weight [4, 4]');
  expectError(() => hs.runCase(with_('inputs.key_padding_mask', [true])), 'SHAPE_MISMATCH', 'options.keyPaddingMask: expected shape (S) = [3], got [1]');
  assert.equal(hs.liveHandles(), 0, 'runCase disposes its module whatever fails');
  assert.ok(hs.checkCase(seed, hs.runCase(seed)).ok);
});

test('NaN and infinity in the data propagate as in PyTorch; masking alone never makes NaN', () => {
  const config = { embedDim: 4, numHeads: 2 };
  const m = module(config);
  const x = fill([3, 4], 5);
  const kv = fill([4, 4], 6);
  const run = (q, k, v, options = {}) => {
    const got = m.mha.forward(q, k, v, { ...options, averageAttnWeights: false });
    const want = referenceForward(m.mha.config, m.stateDict, q, k, v, { ...options, averageAttnWeights: false });
    for (const name of ['output', 'weights']) {
      got[name].data.forEach((g, i) => {
        const e = want[name].data[i];
        assert.ok(Number.isNaN(e) ? Number.isNaN(g) : Math.abs(g - e) < 1e-5, `${name}[${i}]: ${g} vs ${e}`);
      });
    }
    return got;
  };
  const withAt = (t, i, value) => ({ data: t.data.map((x, j) => (j === i ? value : x)), shape: t.shape });
  const rowIsNaN = (t, row, width) => t.data.subarray(row * width, (row + 1) * width).every(Number.isNaN);
  const finite = (t) => t.data.every(Number.isFinite);

  // NaN in query row 1: that row's weights and output are NaN, the others finite.
  let r = run(withAt(x, 4 + 2, NaN), kv, kv);
  assert.ok(rowIsNaN(r.output, 1, 4) && !rowIsNaN(r.output, 0, 4) && !rowIsNaN(r.output, 2, 4));
  // NaN in a key: every score row of its head holds NaN, so every weight row is NaN; masking
  // that key does not help (-inf + NaN is NaN), as in PyTorch.
  for (const options of [{}, { keyPaddingMask: [false, true, false, false] }]) {
    r = run(x, withAt(kv, 4 + 1, NaN), kv, options);
    assert.ok(r.output.data.every(Number.isNaN));
  }
  // NaN in a value reaches every row through weights x V (a 0 weight times NaN is NaN) ...
  r = run(x, kv, withAt(kv, 4 + 1, NaN), { keyPaddingMask: [false, true, false, false] });
  assert.ok(r.output.data.every(Number.isNaN));
  // ... except rows the zero-row policy defines: every key masked gives weights 0 and out_proj.bias.
  r = run(x, kv, withAt(kv, 4 + 1, NaN), { attnMask: [[false, false, false, false], [true, true, true, true], [false, false, false, false]] });
  assert.deepEqual(Array.from(r.output.data.subarray(4, 8)), Array.from(m.stateDict['out_proj.bias'].data));
  assert.ok(rowIsNaN(r.output, 0, 4) && rowIsNaN(r.output, 2, 4));
  // +inf in a key or a float mask: exp(inf - inf) makes the row NaN, as torch.softmax does.
  r = run(x, kv, kv, { attnMask: [[0, 0, 0, 0], [0, Infinity, 0, 0], [0, 0, 0, 0]] });
  assert.ok(rowIsNaN(r.output, 1, 4) && !rowIsNaN(r.output, 0, 4));
  // -inf in a float mask is masking: never NaN, whole rows of it included.
  for (const options of [
    { keyPaddingMask: [true, true, true, true] },
    { keyPaddingMask: [-Infinity, -Infinity, -Infinity, -Infinity] },
    { attnMask: [[true, true, true, true], [false, true, true, true], [true, true, true, true]] },
    { attnMask: [[-Infinity, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], keyPaddingMask: [false, true, true, true] },
    { isCausal: true, keyPaddingMask: [true, false, false, false] },
  ]) {
    r = run(x, kv, kv, options);
    assert.ok(finite(r.output) && finite(r.weights), JSON.stringify(options));
  }
  // isCausal blocks a future key outright (as the Eigen reference and PyTorch's fused path do):
  // NaN in key 3 reaches only the rows that may attend to it.
  r = run(fill([4, 4], 5), withAt(kv, 3 * 4, NaN), kv, { isCausal: true });
  assert.ok(finite({ data: r.output.data.subarray(0, 12) }) && rowIsNaN(r.output, 3, 4));
  m.mha.dispose();
});

test('init() with a WebAssembly module that cannot be loaded rejects, and a later init() succeeds', async () => {
  // A fresh process: init() loads the module once per process.
  const script = `
    import { init } from ${JSON.stringify(new URL('../../web/lib/index.js', import.meta.url).href)};
    const out = [];
    for (const options of [{ wasmBinary: new Uint8Array([0, 97, 115, 109]) }, { wasmUrl: new URL('file:///no/such/file.wasm') }]) {
      try { await init(options); out.push('resolved'); } catch (e) { out.push(e.constructor.name + ' ' + e.code); }
    }
    const hs = await init();
    out.push(hs.runCase(${JSON.stringify(JSON.stringify(seed))}).output.shape.join('x'));
    console.log(JSON.stringify(out));`;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { timeout: 30000 });
  // Both the CompileError (inside an Emscripten abort) and ENOENT become LOAD_ERROR.
  assert.deepEqual(JSON.parse(stdout), ['HeadscopeError LOAD_ERROR', 'HeadscopeError LOAD_ERROR', '3x4']);
});
