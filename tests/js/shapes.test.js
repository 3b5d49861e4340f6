// web/lib/shapes.js, the JavaScript's one statement of PyTorch's layouts, against the engine:
// for configs and calls drawn by fast-check (every layout, add_bias_kv / add_zero_attn, kdim /
// vdim, empty sequences, with and without weights), the sizes callDims reads back from the shapes
// are the ones the call was built from, and outputShape / weightsShape are the shapes forward()
// and trace() really return. Calls whose ranks are wrong get null sizes, and the engine refuses
// them. The shapes are built here from the drawn sizes, not by shapes.js, so nothing is checked
// against itself.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { init, HeadscopeError } from '../../web/lib/index.js';
import { callDims, outputShape, sequenceShape, weightsShape } from '../../web/lib/shapes.js';
import { resultWeightsShape } from '../../web/lib/case.js';

const hs = await init();

after(() => {
  assert.equal(hs.liveHandles(), 0, 'live handles left after the suite');
});

const count = (shape) => shape.reduce((a, b) => a * b, 1);
const filled = (shape, offset) => ({
  data: Float32Array.from({ length: count(shape) }, (_, i) => Math.sin(i * 0.37 + offset)), shape,
});

// A module of `config` with deterministic weights of the shapes it asks for.
function module(config) {
  const mha = hs.createMultiheadAttention(config);
  const stateDict = Object.fromEntries(Object.entries(mha.parameterShapes())
    .map(([name, shape], i) => [name, filled(shape, i)]));
  mha.loadStateDict(stateDict);
  return mha;
}

// PyTorch's layouts, written out here independently of shapes.js.
function layout({ batched, batchFirst, N }, T, width) {
  if (!batched) return [T, width];
  return batchFirst ? [N, T, width] : [T, N, width];
}

const sizeOrDefault = fc.option(fc.integer({ min: 1, max: 8 }), { nil: undefined });
const flag = fc.constantFrom(true, false, undefined);

// A config (in the form createMultiheadAttention takes) and the sizes of one call of it.
const arbitraryCall = fc.record({
  E: fc.integer({ min: 1, max: 16 }),
  headPick: fc.nat(),
  bias: fc.boolean(),
  addBiasKV: fc.boolean(),
  addZeroAttn: fc.boolean(),
  batchFirst: flag,
  kdim: sizeOrDefault,
  vdim: sizeOrDefault,
  batched: fc.boolean(),
  N: fc.integer({ min: 1, max: 3 }),
  L: fc.integer({ min: 0, max: 6 }),
  S: fc.integer({ min: 0, max: 6 }),
  needWeights: flag,
  averageAttnWeights: flag,
}).map((d) => {
  const divisors = Array.from({ length: d.E }, (_, i) => i + 1).filter((h) => d.E % h === 0);
  const config = { embedDim: d.E, numHeads: divisors[d.headPick % divisors.length], bias: d.bias,
    addBiasKV: d.addBiasKV, addZeroAttn: d.addZeroAttn };
  for (const k of ['batchFirst', 'kdim', 'vdim']) if (d[k] !== undefined) config[k] = d[k];
  const options = {};
  for (const k of ['needWeights', 'averageAttnWeights']) if (d[k] !== undefined) options[k] = d[k];
  return { ...d, H: config.numHeads, config, options };
});

test('callDims, outputShape and weightsShape give the shapes the engine returns, in every layout', () => {
  let runs = 0;
  fc.assert(fc.property(arbitraryCall, (d) => {
    runs++;
    const { config, options } = d;
    const batchFirst = d.batched && d.batchFirst === true;
    const kdim = d.kdim ?? d.E;
    const vdim = d.vdim ?? d.E;
    const where = { batched: d.batched, batchFirst, N: d.N };
    const query = filled(layout(where, d.L, d.E), 1);
    const key = filled(layout(where, d.S, kdim), 2);
    const value = filled(layout(where, d.S, vdim), 3);

    const dims = callDims(config, query.shape, key.shape);
    const Sp = d.S + (d.addBiasKV ? 1 : 0) + (d.addZeroAttn ? 1 : 0);
    assert.deepEqual(dims, { batched: d.batched, batchFirst, N: d.batched ? d.N : 1, L: d.L, S: d.S, Sp,
      E: d.E, H: d.H, kdim, vdim });
    assert.deepEqual(sequenceShape(dims, d.S, vdim), value.shape);

    const mha = module(config);
    try {
      // The same sizes from the normalized config (every default filled) as from the given one.
      assert.deepEqual(callDims(mha.config, query.shape, key.shape), dims);
      const got = mha.forward(query, key, value, options);
      assert.deepEqual(got.output.shape, outputShape(dims));
      assert.deepEqual(got.weights?.shape ?? null, weightsShape(dims, options));
      // The CLIs' bound of a case's result uses the same rule.
      assert.deepEqual(resultWeightsShape({ config, query, key, options }), weightsShape(dims, options));
      // trace() returns every head's weights and scores, whatever forward()'s options say.
      const t = mha.trace(query, key, value);
      const perHead = weightsShape(dims, { averageAttnWeights: false });
      assert.deepEqual(t.weights.shape, perHead);
      assert.deepEqual(t.scores.shape, perHead);
      assert.deepEqual(t.output.shape, outputShape(dims));
    } finally {
      mha.dispose();
    }
  }), { seed: 20261215, numRuns: 1000 });
  assert.equal(runs, 1000);
});

test('every flag combination and layout once, batch and sequences of several sizes', () => {
  for (const batchFirst of [false, true]) for (const addBiasKV of [false, true]) {
    for (const addZeroAttn of [false, true]) for (const batched of [false, true]) {
      const config = { embedDim: 6, numHeads: 3, kdim: 5, vdim: 2, batchFirst, addBiasKV, addZeroAttn };
      const [N, L, S] = [4, 3, 2];
      const where = { batched, batchFirst: batched && batchFirst, N };
      const query = filled(layout(where, L, 6), 1);
      const key = filled(layout(where, S, 5), 2);
      const value = filled(layout(where, S, 2), 3);
      const dims = callDims(config, query.shape, key.shape);
      const mha = module(config);
      for (const averageAttnWeights of [true, false]) {
        const got = mha.forward(query, key, value, { averageAttnWeights });
        const label = JSON.stringify({ config, batched, averageAttnWeights });
        assert.deepEqual(got.output.shape, outputShape(dims), label);
        assert.deepEqual(got.weights.shape, weightsShape(dims, { averageAttnWeights }), label);
      }
      assert.equal(mha.forward(query, key, value, { needWeights: false }).weights, null);
      assert.equal(weightsShape(dims, { needWeights: false }), null);
      mha.dispose();
    }
  }
});

test('a call whose ranks are wrong: null sizes and shapes, and the engine refuses it', () => {
  const config = { embedDim: 4, numHeads: 2, addBiasKV: true, batchFirst: true };
  const mha = module(config);
  const calls = [
    { q: [4], k: [4], nulls: ['N', 'L', 'S', 'Sp'] },
    { q: [1, 2, 3, 4], k: [1, 2, 3, 4], nulls: ['N', 'L', 'S', 'Sp'] },
    { q: [], k: [], nulls: ['N', 'L', 'S', 'Sp'] },
    // A batched query with an unbatched key (and the reverse): the query's sizes, no key sizes.
    { q: [2, 3, 4], k: [3, 4], nulls: ['S', 'Sp'] },
    { q: [3, 4], k: [2, 3, 4], nulls: ['S', 'Sp'] },
  ];
  for (const { q, k, nulls } of calls) {
    const dims = callDims(config, q, k);
    for (const name of ['N', 'L', 'S', 'Sp']) {
      assert.equal(dims[name] === null, nulls.includes(name), `${name} of query [${q}], key [${k}]`);
    }
    assert.equal(weightsShape(dims), null);
    assert.equal(weightsShape(dims, { averageAttnWeights: false }), null);
    assert.equal(resultWeightsShape({ config, query: { shape: q }, key: { shape: k }, options: {} }), null);
    if (nulls.includes('L')) assert.equal(outputShape(dims), null);
    assert.throws(() => mha.forward(filled(q, 1), filled(k, 2), filled(k, 3)),
      (e) => e instanceof HeadscopeError, `query [${q}], key [${k}]`);
  }
  mha.dispose();
});

test('unbatched calls ignore batchFirst; an omitted key means self-attention', () => {
  const dims = callDims({ embedDim: 4, numHeads: 2, batchFirst: true, addZeroAttn: true }, [5, 4]);
  assert.deepEqual(dims, { batched: false, batchFirst: false, N: 1, L: 5, S: 5, Sp: 6, E: 4, H: 2,
    kdim: 4, vdim: 4 });
  assert.deepEqual(outputShape(dims), [5, 4]);
  assert.deepEqual(weightsShape(dims), [5, 6]);
  assert.deepEqual(weightsShape(dims, { needWeights: true, averageAttnWeights: false }), [2, 5, 6]);
});
