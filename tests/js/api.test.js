// The npm package's API against the built WebAssembly module: the seed example both ways, every
// golden case, the trace recombined by hand, the error model, and memory behaviour.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { init, HeadscopeError, Tensor } from '../../web/lib/index.js';
import { expectError, mulberry32 } from './helpers.js';

const goldenDir = new URL('../golden/', import.meta.url);
const golden = (name) => JSON.parse(readFileSync(new URL(name, goldenDir), 'utf8'));
const hs = await init();

after(() => {
  // Every object the suite created was disposed (runCase disposes its own).
  assert.equal(hs.liveHandles(), 0, 'live handles left after the suite');
});

const X = [[1, 0, 1, 2], [0, 2, 1, 0], [1, 1, 0, 1]];
const W_O = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0]];
const Y = [[1.701, 2.595, 2.600, 1.695], [1.034, 2.723, 1.232, 2.525], [1.315, 2.639, 2.035, 1.919]];

function seedModule() {
  const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  const identity = [0, 1, 2, 3].map((r) => [0, 1, 2, 3].map((c) => (r === c ? 1 : 0)));
  // Head 1 reads dims 0-1, head 2 dims 2-3: Wq = Wk = Wv = I; torch's out_proj.weight is W_O^T.
  mha.loadStateDict({
    in_proj_weight: [...identity, ...identity, ...identity],
    'out_proj.weight': W_O[0].map((_, r) => W_O.map((row) => row[r])),
  });
  return mha;
}

function assertClose(actual, expected, tol, what) {
  const a = actual.flat(Infinity);
  const e = expected.flat(Infinity);
  assert.equal(a.length, e.length, `${what}: size`);
  a.forEach((x, i) => assert.ok(Math.abs(x - e[i]) <= tol, `${what}[${i}]: ${x} vs ${e[i]}`));
}

test('seed worked example through the object API', () => {
  const mha = seedModule();
  const { output, weights } = mha.forward(X, X, X, { averageAttnWeights: false });
  assert.ok(output instanceof Tensor);
  assert.deepEqual(output.shape, [3, 4]);
  assertClose(output.toArray(), Y, 5e-4, 'Y');
  assert.deepEqual(weights.shape, [2, 3, 3]);
  assertClose(weights.toArray()[0][1], [0.045, 0.768, 0.187], 5e-4, 'head 1 row 2');
  // Averaged weights are the mean of the heads.
  const avg = mha.forward(X, X, X).weights;
  assert.deepEqual(avg.shape, [3, 3]);
  avg.data.forEach((x, i) => assert.ok(Math.abs(x - (weights.data[i] + weights.data[9 + i]) / 2) < 1e-6));
  assert.equal(mha.forward(X, X, X, { needWeights: false }).weights, null);
  mha.dispose();
});

test('seed worked example through runCase matches the object API', () => {
  const viaCase = hs.runCase(golden('seed-worked-example.json'));
  const mha = seedModule();
  const direct = mha.forward(X, X, X, { averageAttnWeights: false });
  mha.dispose();
  assert.deepEqual(Array.from(viaCase.output.data), Array.from(direct.output.data));
  assert.deepEqual(Array.from(viaCase.weights.data), Array.from(direct.weights.data));
  assertClose(viaCase.output.toArray(), Y, 5e-4, 'Y');
});

test('every golden case through the WebAssembly build within 1e-4', () => {
  const files = readdirSync(goldenDir).filter((f) => f.endsWith('.json'));
  assert.ok(files.length >= 40, `${files.length} golden cases`);
  let worst = 0;
  for (const file of files) {
    const doc = golden(file);
    const result = hs.runCase(doc);
    const check = hs.checkCase(doc, result);
    assert.ok(check.ok, `${file}: ${check.detail}`);
    worst = Math.max(worst, check.maxRelativeError);
    // JSON text works as well as the parsed object.
    if (file === files[0]) assert.deepEqual(hs.runCase(JSON.stringify(doc)).output.data, result.output.data);
  }
  console.log(`# golden (wasm, npm API): ${files.length} cases, worst relative error ${worst.toExponential(2)}`);
});

test('runCase and checkCase errors name the JSON path or argument', () => {
  const doc = golden('seed-worked-example.json');
  expectError(() => hs.runCase('{not json'), 'PARSE_ERROR', '$: not valid JSON');
  expectError(() => hs.runCase({ ...doc, config: { ...doc.config, num_heads: 3 } }), 'PARSE_ERROR',
    'config.num_heads', 'divisible');
  expectError(() => hs.runCase({ ...doc, inputs: { ...doc.inputs, query: [[1, 2, 'x', 4]] } }),
    'PARSE_ERROR', 'inputs.query[0][2]', '"inf", "-inf", "nan"');
  expectError(() => hs.runCase({ ...doc, inputs: { ...doc.inputs, querry: [] } }), 'PARSE_ERROR',
    'inputs.querry: unknown key');
  expectError(() => hs.checkCase(doc, { output: null }), 'INVALID_ARGUMENT', 'result');
  expectError(() => hs.checkCase(doc, hs.runCase(doc), { tolerance: -1 }), 'INVALID_ARGUMENT', 'options.tolerance');
  assert.equal(hs.liveHandles(), 0, 'runCase disposes its module even when it fails');
});

test('typed arrays and nested arrays give the same result', () => {
  const mha = seedModule();
  const typed = { data: Float32Array.from(X.flat()), shape: [3, 4] };
  const a = mha.forward(typed, typed, typed, { keyPaddingMask: { data: Uint8Array.from([0, 0, 1]), shape: [3] } });
  const b = mha.forward(X, X, X, { keyPaddingMask: [false, false, true] });
  assert.deepEqual(a.output.data, b.output.data);
  assert.deepEqual(a.weights.data, b.weights.data);
  // The masked key gets no weight.
  for (let i = 0; i < 3; i++) assert.equal(b.weights.data[i * 3 + 2], 0);
  mha.dispose();
});

test('forward writes into options.out when given, and checks it first', () => {
  const mha = seedModule();
  const rng = mulberry32(17);
  const xb = { data: Float32Array.from({ length: 2 * 3 * 4 }, () => rng() - 0.5), shape: [3, 2, 4] };
  const want = mha.forward(xb, xb, xb, { averageAttnWeights: false });
  const out = new Float32Array(24).fill(NaN);
  const got = mha.forward(xb, xb, xb, { averageAttnWeights: false, out });
  assert.equal(got.output.data, out, 'output.data is the caller\'s array');
  assert.deepEqual(got.output.shape, [3, 2, 4]);
  assert.deepEqual(Array.from(out), Array.from(want.output.data));
  assert.deepEqual(got.weights.data, want.weights.data);
  assert.notEqual(got.weights.data.buffer, out.buffer);
  // Reused: the next call overwrites it; null means "allocate" as without the option.
  const again = mha.forward(X, X, X, { out: out.subarray(0, 12), needWeights: false });
  assert.deepEqual(Array.from(out.subarray(0, 12)), Array.from(mha.forward(X, X, X).output.data));
  assert.equal(again.output.data.buffer, out.buffer);
  assert.notEqual(mha.forward(X, X, X, { out: null }).output.data, out);
  // Refused before any work: wrong type, wrong size (the output has the query's shape); trace()
  // has no `out`. The array is left untouched and the module keeps working.
  const before = Array.from(out);
  expectError(() => mha.forward(X, X, X, { out: new Float64Array(12) }), 'INVALID_ARGUMENT',
    'options.out', 'Float32Array', 'Float64Array');
  expectError(() => mha.forward(X, X, X, { out: [0, 0] }), 'INVALID_ARGUMENT', 'options.out');
  expectError(() => mha.forward(X, X, X, { out }), 'SHAPE_MISMATCH', 'options.out', '12 elements',
    '[3, 4]', 'length 24');
  expectError(() => mha.trace(X, X, X, { out }), 'INVALID_ARGUMENT', 'options.out', 'unknown option');
  assert.deepEqual(Array.from(out), before);
  assertClose(mha.forward(X, X, X).output.toArray(), Y, 2e-3, 'after the refusals');
  mha.dispose();
});

test('batch_first and sequence-first layouts agree', () => {
  const rng = mulberry32(3);
  const sd = {};
  const make = (rows, cols) => Array.from({ length: rows }, () => Array.from({ length: cols }, () => rng() - 0.5));
  sd.in_proj_weight = make(24, 8);
  sd.in_proj_bias = make(1, 24)[0];
  sd['out_proj.weight'] = make(8, 8);
  sd['out_proj.bias'] = make(1, 8)[0];
  const seqFirst = hs.createMultiheadAttention({ embedDim: 8, numHeads: 2 });
  const batchFirst = hs.createMultiheadAttention({ embedDim: 8, numHeads: 2, batchFirst: true });
  seqFirst.loadStateDict(sd);
  batchFirst.loadStateDict(sd);
  const xb = [make(5, 8), make(5, 8)];  // (N=2, L=5, E=8)
  const xs = xb[0].map((_, l) => xb.map((batch) => batch[l]));  // (L, N, E)
  const a = batchFirst.forward(xb, xb, xb);
  const b = seqFirst.forward(xs, xs, xs);
  assert.deepEqual(a.output.shape, [2, 5, 8]);
  assert.deepEqual(b.output.shape, [5, 2, 8]);
  const at = a.output.toArray();
  const bt = b.output.toArray();
  for (let n = 0; n < 2; n++) for (let l = 0; l < 5; l++) assertClose(at[n][l], bt[l][n], 1e-6, 'layout');
  assert.deepEqual(a.weights.data, b.weights.data);
  seqFirst.dispose();
  batchFirst.dispose();
});

test('trace stages recombine to the output', () => {
  const doc = golden('realistic-e64-h4-self-kpm.json');
  const mha = hs.createMultiheadAttention({ embedDim: 64, numHeads: 4, batchFirst: doc.config.batch_first });
  mha.loadStateDict(doc.state_dict);
  const q = doc.inputs.query;
  const opts = { keyPaddingMask: doc.inputs.key_padding_mask };
  const t = mha.trace(q, q, q, opts);
  const fwd = mha.forward(q, q, q, { ...opts, averageAttnWeights: false });
  assert.deepEqual(t.output.data, fwd.output.data);
  assert.deepEqual(t.weights.data, fwd.weights.data);
  const [N, H, L, hd] = t.q.shape;
  const S = t.k.shape[2];
  const E = H * hd;
  const at = (tensor, ...idx) => tensor.data[idx.reduce((o, i, a) => o * tensor.shape[a] + i, 0)];
  const wo = doc.state_dict['out_proj.weight'];
  const bo = doc.state_dict['out_proj.bias'];
  for (let n = 0; n < N; n++) {
    for (let h = 0; h < H; h++) {
      for (let i = 0; i < L; i++) {
        // weights = softmax(scores)
        let max = -Infinity;
        for (let j = 0; j < S; j++) max = Math.max(max, at(t.scores, n, h, i, j));
        let sum = 0;
        for (let j = 0; j < S; j++) sum += Math.exp(at(t.scores, n, h, i, j) - max);
        for (let j = 0; j < S; j++) {
          const want = max === -Infinity ? 0 : Math.exp(at(t.scores, n, h, i, j) - max) / sum;
          assert.ok(Math.abs(at(t.weights, n, h, i, j) - want) < 1e-5);
        }
        // head output = weights x V, placed in the concatenation at columns h*hd
        for (let d = 0; d < hd; d++) {
          let want = 0;
          for (let j = 0; j < S; j++) want += at(t.weights, n, h, i, j) * at(t.v, n, h, j, d);
          assert.ok(Math.abs(at(t.headOutputs, n, h, i, d) - want) < 1e-4);
          assert.equal(at(t.concat, n, i, h * hd + d), at(t.headOutputs, n, h, i, d));
        }
      }
    }
    // output = concat W_O^T + b_O (output in the query's layout)
    for (let i = 0; i < L; i++) {
      for (let o = 0; o < E; o++) {
        let want = bo[o];
        for (let c = 0; c < E; c++) want += at(t.concat, n, i, c) * wo[o][c];
        const got = doc.config.batch_first ? at(t.output, n, i, o) : at(t.output, i, n, o);
        assert.ok(Math.abs(got - want) < 1e-4, `output ${n},${i},${o}: ${got} vs ${want}`);
      }
    }
  }
  mha.dispose();
});

test('config errors name the option', () => {
  expectError(() => hs.createMultiheadAttention(), 'INVALID_ARGUMENT', 'config', 'undefined');
  expectError(() => hs.createMultiheadAttention({ embedDim: 4 }), 'INVALID_ARGUMENT', 'config.numHeads', 'undefined');
  expectError(() => hs.createMultiheadAttention({ embedDim: 4.5, numHeads: 1 }), 'INVALID_ARGUMENT', 'config.embedDim', '4.5');
  expectError(() => hs.createMultiheadAttention({ embedDim: -4, numHeads: 1 }), 'INVALID_ARGUMENT', 'config.embedDim', '-4');
  expectError(() => hs.createMultiheadAttention({ embedDim: NaN, numHeads: 1 }), 'INVALID_ARGUMENT', 'config.embedDim', 'NaN');
  expectError(() => hs.createMultiheadAttention({ embedDim: Infinity, numHeads: 1 }), 'INVALID_ARGUMENT', 'config.embedDim');
  expectError(() => hs.createMultiheadAttention({ embedDim: '4', numHeads: 1 }), 'INVALID_ARGUMENT', 'config.embedDim', 'string');
  expectError(() => hs.createMultiheadAttention({ embedDim: 2 ** 30, numHeads: 1 }), 'INVALID_ARGUMENT', 'config.embedDim');
  expectError(() => hs.createMultiheadAttention({ embedDim: 4, numHeads: 3 }), 'INVALID_ARGUMENT', 'divisible by numHeads (3)');
  expectError(() => hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: 1 }), 'INVALID_ARGUMENT', 'config.bias');
  expectError(() => hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, kdim: 0 }), 'INVALID_ARGUMENT', 'config.kdim');
  expectError(() => hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, num_heads: 2 }), 'INVALID_ARGUMENT', 'config.num_heads: unknown option');
  assert.equal(hs.liveHandles(), 0, 'a refused config leaves no handle');
});

test('state_dict errors: nothing is loaded from a bad state_dict', () => {
  const mha = seedModule();
  const before = mha.forward(X, X, X).output.data;
  const good = new Array(12).fill(0).map(() => [0, 0, 0, 0]);
  expectError(() => mha.loadStateDict(null), 'INVALID_ARGUMENT', 'stateDict', 'null');
  expectError(() => mha.loadStateDict([1, 2]), 'INVALID_ARGUMENT', 'stateDict');
  expectError(() => mha.loadStateDict({ in_proj_weight: good, foo: [1] }), 'UNKNOWN_PARAMETER', "stateDict['foo']", 'in_proj_weight');
  expectError(() => mha.loadStateDict({ in_proj_bias: [1, 2] }), 'UNKNOWN_PARAMETER', "stateDict['in_proj_bias']");
  expectError(() => mha.loadStateDict({ in_proj_weight: good, 'out_proj.weight': [[1, 2], [3, 4]] }),
    'SHAPE_MISMATCH', "stateDict['out_proj.weight']", 'expected shape [4, 4], got [2, 2]');
  expectError(() => mha.loadStateDict({ in_proj_weight: good }), 'MISSING_PARAMETER', 'out_proj.weight [4, 4]');
  expectError(() => mha.loadStateDict({ in_proj_weight: { data: new Float64Array(48), shape: [12, 4] } }, { strict: false }),
    'INVALID_ARGUMENT', "stateDict['in_proj_weight'].data", 'Float32Array', 'Float64Array');
  // None of the refused calls changed the weights.
  assert.deepEqual(mha.forward(X, X, X).output.data, before);
  // strict: false loads a subset.
  mha.loadStateDict({ in_proj_weight: good }, { strict: false });
  assert.notDeepEqual(mha.forward(X, X, X).output.data, before);
  mha.dispose();
  const fresh = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2 });
  expectError(() => fresh.forward(X, X, X), 'MISSING_PARAMETER', 'stateDict: missing', 'in_proj_weight [12, 4]');
  fresh.dispose();
});

test('tensor and option errors name the argument; the module keeps working', () => {
  const mha = seedModule();
  const ok = () => assertClose(mha.forward(X, X, X).output.toArray(), Y, 5e-4, 'after an error');
  const cases = [
    [() => mha.forward(null, X, X), 'INVALID_ARGUMENT', 'query', 'null'],
    [() => mha.forward(undefined, X, X), 'INVALID_ARGUMENT', 'query', 'undefined'],
    [() => mha.forward('hello', X, X), 'INVALID_ARGUMENT', 'query', 'string "hello"'],
    [() => mha.forward(X, 3, X), 'INVALID_ARGUMENT', 'key', 'number 3'],
    [() => mha.forward(X, X, [[1, 2, 3, 4], [1, 2, 3]]), 'SHAPE_MISMATCH', 'value[1]', 'expected 4 elements', 'got 3'],
    [() => mha.forward([[1, 2, 'x', 4]], X, X), 'INVALID_ARGUMENT', 'query[0][2]', 'expected a number'],
    [() => mha.forward(X, X, X, { keyPaddingMask: [[], true, false] }), 'SHAPE_MISMATCH', 'options.keyPaddingMask[1]', 'expected an array like its siblings'],
    [() => mha.forward([1, 0, 1, 2], X, X), 'SHAPE_MISMATCH', 'query', 'got shape [4]'],
    [() => mha.forward([[[[[1]]]]], X, X), 'SHAPE_MISMATCH', 'query', 'deeper than 4'],
    [() => mha.forward([[1, 0, 1]], X, X), 'SHAPE_MISMATCH', 'query', 'embedDim = 4', '[1, 3]'],
    [() => mha.forward({ data: new Float32Array(11), shape: [3, 4] }, X, X), 'SHAPE_MISMATCH', 'query', '11 elements', 'needs 12'],
    [() => mha.forward({ data: [1, 2], shape: [1, 2] }, X, X), 'INVALID_ARGUMENT', 'query.data', 'Float32Array', 'array of length 2'],
    [() => mha.forward({ data: new Float32Array(12), shape: [3, 4.5] }, X, X), 'INVALID_ARGUMENT', 'query.shape[1]', '4.5'],
    [() => mha.forward({ data: new Float32Array(12), shape: [3, -4] }, X, X), 'INVALID_ARGUMENT', 'query.shape[1]', '-4'],
    [() => mha.forward({ data: new Float32Array(0), shape: [0, 2 ** 30, 4] }, X, X), 'RESOURCE_EXHAUSTED', 'query.shape[1]'],
    [() => mha.forward({ data: new Float32Array(12), shape: '3x4' }, X, X), 'INVALID_ARGUMENT', 'query.shape'],
    [() => mha.forward(X, [[1, 0, 1, 2]], X), 'SHAPE_MISMATCH', 'value: sequence length 3 does not match key\'s 1'],
    [() => mha.forward([X], X.map((r) => [r, r]), X.map((r) => [r, r])), 'SHAPE_MISMATCH', 'key: batch size 2 does not match query\'s 3'],
    [() => mha.forward(X, [X], [X]), 'SHAPE_MISMATCH', 'key: expected a 2-D (unbatched, like query)', '[1, 3, 4]'],
    [() => mha.forward(X, X, X, { keyPaddingMask: [true, false] }), 'SHAPE_MISMATCH', 'options.keyPaddingMask', 'expected shape (S) = [3]', 'got [2]'],
    [() => mha.forward(X, X, X, { keyPaddingMask: [true, 0, false] }), 'INVALID_ARGUMENT', 'options.keyPaddingMask[1]', 'like the first element'],
    [() => mha.forward(X, X, X, { keyPaddingMask: ['a', 'b', 'c'] }), 'INVALID_ARGUMENT', 'options.keyPaddingMask[0]'],
    [() => mha.forward(X, X, X, { keyPaddingMask: { data: new Int32Array(3), shape: [3] } }), 'INVALID_ARGUMENT', 'options.keyPaddingMask.data', 'Uint8Array', 'Int32Array'],
    [() => mha.forward(X, X, X, { attnMask: [[true]] }), 'SHAPE_MISMATCH', 'options.attnMask', '(L, S) = [3, 3]', '(numHeads, L, S) = [2, 3, 3]'],
    [() => mha.forward(X, X, X, { attnMask: 'causal' }), 'INVALID_ARGUMENT', 'options.attnMask', 'string'],
    [() => mha.forward(X, X, X, { isCausal: true, attnMask: [[false, false, false], [false, false, false], [false, false, false]] }),
      'INVALID_ARGUMENT', 'options.attnMask', 'options.isCausal=true'],
    [() => mha.forward(X, X, X, { needWeights: 'yes' }), 'INVALID_ARGUMENT', 'options.needWeights', 'string "yes"'],
    [() => mha.forward(X, X, X, { needWeight: false }), 'INVALID_ARGUMENT', 'options.needWeight: unknown option'],
    [() => mha.forward(X, X, X, 5), 'INVALID_ARGUMENT', 'options', 'number 5'],
  ];
  try {
    for (const [fn, code, ...fragments] of cases) {
      expectError(fn, code, ...fragments);
      ok();
    }
  } finally {
    if (!mha.disposed) mha.dispose();
  }
  // is_causal with the causal mask itself is accepted, and equals is_causal alone.
  const causal = [[false, true, true], [false, false, true], [false, false, false]];
  const m2 = seedModule();
  assert.deepEqual(m2.forward(X, X, X, { isCausal: true, attnMask: causal }).output.data,
    m2.forward(X, X, X, { isCausal: true }).output.data);
  m2.dispose();
});

test('a call over the memory limit is refused before allocating, then work goes on', () => {
  const mha = seedModule();
  const saved = hs.maxCallBytes;
  try {
    hs.maxCallBytes = 64;
    expectError(() => mha.forward(X, X, X), 'RESOURCE_EXHAUSTED', 'exceed the limit of 64 bytes');
    expectError(() => { hs.maxCallBytes = -1; }, 'INVALID_ARGUMENT', 'maxCallBytes');
  } finally {
    hs.maxCallBytes = saved;
  }
  assertClose(mha.forward(X, X, X).output.toArray(), Y, 5e-4, 'after refusal');
  mha.dispose();
});

test('disposed objects refuse use', () => {
  const mha = seedModule();
  assert.equal(mha.disposed, false);
  mha.dispose();
  mha.dispose();  // idempotent
  assert.equal(mha.disposed, true);
  expectError(() => mha.forward(X, X, X), 'DISPOSED', 'disposed');
  expectError(() => mha.trace(X, X, X), 'DISPOSED');
  expectError(() => mha.loadStateDict({}), 'DISPOSED');
});

test('no wasm heap growth over 10,000 forward calls of one shape', () => {
  const mha = seedModule();
  mha.forward(X, X, X);  // warm: workspace, arena and result buffers sized once
  const before = hs.memory();
  for (let i = 0; i < 10000; i++) mha.forward(X, X, X);
  const afterCalls = hs.memory();
  assert.equal(afterCalls.wasmBytes, before.wasmBytes, 'WebAssembly memory grew');
  assert.equal(afterCalls.heapInUse, before.heapInUse, 'malloc heap in use grew');
  mha.dispose();
});

test('dispose returns the memory', () => {
  const baseline = hs.memory().heapInUse;
  for (let round = 0; round < 20; round++) {
    const mha = hs.createMultiheadAttention({ embedDim: 64, numHeads: 4 });
    const t = golden('realistic-e64-h4-self-kpm.json');
    mha.loadStateDict(t.state_dict);
    mha.trace(t.inputs.query, t.inputs.query, t.inputs.query);
    mha.dispose();
  }
  assert.equal(hs.memory().heapInUse, baseline);
  assert.equal(hs.liveHandles(), 0);
});

