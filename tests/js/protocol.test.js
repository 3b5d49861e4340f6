// The JS/wasm protocol: src/bindings/embind.cc defines the call and result blocks' layout once
// and exports it (core.protocol()); index.js builds every read and write from it. These tests
// round-trip every call slot through the C++ side (Handle::echoCall describes the call block as
// C++ reads it), check that a module speaking another protocol is refused, and that a trace's
// buffers are released once JS has copied them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { init, readProtocol } from '../../web/lib/index.js';
import { seedWorkedExample as seed } from '../../web/lib/examples.js';

const hs = await init();

test('every call slot, its type, rank, dims, count and data, the flags and the window reach C++ as JS wrote them', () => {
  const P = hs._protocol;
  assert.deepEqual(Object.keys(P.slot), ['query', 'key', 'value', 'keyPaddingMask', 'attnMask', 'headGates']);
  const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2 });
  // A distinct tensor per slot: ranks 1 to 4, float and bool, different counts.
  const tensors = [
    { data: Float32Array.from({ length: 24 }, (_, i) => i + 0.5), shape: [2, 3, 4], count: 24, type: 'float' },
    { data: Float32Array.from({ length: 5 }, (_, i) => -i), shape: [5], count: 5, type: 'float' },
    { data: Float32Array.from({ length: 16 }, (_, i) => i * i), shape: [1, 2, 2, 4], count: 16, type: 'float' },
    { data: Uint8Array.from([1, 0, 1, 1, 0, 0]), shape: [2, 3], count: 6, type: 'bool' },
    { data: Float32Array.from({ length: 9 }, (_, i) => (i % 2 ? -Infinity : 0)), shape: [3, 3], count: 9, type: 'float' },
    // headGates: one float per head.
    { data: Float32Array.from([0.5, NaN, 0]), shape: [3], count: 3, type: 'float' },
  ];
  assert.equal(tensors.length, P.callSlots, 'a tensor for every slot');
  assert.deepEqual(Object.keys(P.flags), ['needWeights', 'averageWeights', 'isCausal', 'headStats', 'alibi']);
  const everyFlag = Object.values(P.flags).reduce((a, b) => a | b, 0);
  assert.equal(new Set(Object.values(P.flags)).size, 5, 'distinct flags');
  assert.ok(Number.isInteger(P.windowWord) && P.windowWord !== P.flagsWord, 'a word of its own for options.window');
  assert.ok(Object.values(P.flags).every((f) => f > 0 && (f & (f - 1)) === 0), 'one bit each');
  for (const flags of [0, P.flags.needWeights, P.flags.averageWeights | P.flags.isCausal,
    P.flags.needWeights | P.flags.averageWeights | P.flags.isCausal, P.flags.headStats,
    P.flags.headStats | P.flags.isCausal, P.flags.alibi, P.flags.alibi | P.flags.isCausal, everyFlag]) {
    for (let empty = -1; empty < tensors.length; empty++) {
      // Every slot filled, then each slot left empty in turn; a window with each.
      const window = [0, 1, 7, 2 ** 24][(empty + 1) % 4];
      tensors.forEach((t, i) => { mha._slots[i] = i === empty ? null : t; });
      mha._writeCall(flags, window);
      const echoedFlags = mha._state.handle.echoCall();
      assert.equal(echoedFlags, flags);
      // The options as a call reads them (Handle::Options): each flag's bit, then the window.
      const bits = ['needWeights', 'averageWeights', 'isCausal', 'headStats', 'alibi'].map((f) => (flags & P.flags[f] ? 1 : 0));
      assert.equal(mha._state.handle.echoOptions(), `${bits.join(' ')} ${window}`);
      const heap = hs._heap();
      for (let i = 0; i < tensors.length; i++) {
        const w = mha._resultBlock + i * P.wordsPerTensor;
        const words = heap._u32;
        if (i === empty) {
          assert.equal(words[w + P.type], P.none, `slot ${i} should be empty`);
          continue;
        }
        const t = tensors[i];
        assert.equal(words[w + P.type], t.type === 'bool' ? P.bool : P.float, `slot ${i} type`);
        assert.equal(words[w + P.rank], t.shape.length, `slot ${i} rank`);
        assert.deepEqual(Array.from({ length: t.shape.length }, (_, d) => words[w + P.dims + d]), t.shape);
        assert.equal(words[w + P.count], t.count);
        const at = words[w + P.address];
        const got = t.type === 'bool' ? heap._u8.slice(at, at + t.count) : heap._f32.slice(at >>> 2, (at >>> 2) + t.count);
        assert.deepEqual(got, t.data, `slot ${i} data`);
      }
    }
  }
  mha.dispose();
});

test('a module that describes another protocol is refused with LOAD_ERROR', () => {
  const real = JSON.parse(hs._core.protocol());
  const variants = [
    { ...real, version: 2 },
    { ...real, callSlots: ['key', 'query', 'value', 'keyPaddingMask', 'attnMask'] },
    // A module without the headGates slot (built before gates) is refused, not given gates it ignores.
    { ...real, callSlots: ['query', 'key', 'value', 'keyPaddingMask', 'attnMask'] },
    { ...real, forwardResults: ['weights', 'output'] },
    { ...real, flags: { needWeights: 1 } },
    { ...real, parameterSlot: 'bias' },
    // A module without head statistics (built before them), or naming them otherwise.
    { ...real, flags: { needWeights: 1, averageWeights: 2, isCausal: 4 } },
    // A module without ALiBi and the window (built before them).
    { ...real, flags: { needWeights: 1, averageWeights: 2, isCausal: 4, headStats: 8 } },
    (({ windowWord, ...rest }) => rest)(real),
    { ...real, windowWord: real.flagsWord },
    (({ headStatsResults, ...rest }) => rest)(real),
    { ...real, headStatsResults: ['entropy', 'maxWeight', 'distance'] },
    { ...real, headStatsResults: ['entropy', 'distance'] },
  ];
  for (const v of variants) {
    assert.throws(() => readProtocol({ protocol: () => JSON.stringify(v) }), { code: 'LOAD_ERROR', message: /another call protocol/ });
  }
  assert.throws(() => readProtocol({ protocol: () => 'not json' }), { code: 'LOAD_ERROR' });
  assert.doesNotThrow(() => readProtocol({ protocol: () => JSON.stringify(real) }));
  const read = readProtocol({ protocol: () => JSON.stringify(real) });
  assert.deepEqual(read.headStatsResults, ['entropy', 'distance', 'maxWeight']);
  assert.equal(read.flags.headStats, real.flags.headStats);
  assert.equal(read.flags.alibi, real.flags.alibi);
  assert.equal(read.windowWord, real.windowWord);
  assert.ok(Object.isFrozen(read.headStatsResults));
});

test('the headStats flag reaches C++: forward() and trace() fill the three statistics slots when it is set', () => {
  const P = hs._protocol;
  const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  mha.loadStateDict(seed.state_dict);
  const x = seed.inputs.query;
  const slots = (first, n) => {
    const words = hs._heap()._u32;
    return Array.from({ length: n }, (_, i) => words[mha._resultBlock + (first + i) * P.wordsPerTensor + P.type]);
  };
  mha.forward(x, x, x, { headStats: true });
  assert.deepEqual(slots(0, 5), [P.float, P.float, P.float, P.float, P.float], 'forward: output, weights, 3 statistics');
  // (forward() without headStats writes only its two slots: the three after them keep what the
  // last call left, which the wrapper does not read.)
  assert.deepEqual(Object.keys(mha.forward(x, x, x)), ['output', 'weights']);
  const stages = P.traceResults.length;
  const t = mha.trace(x, x, x, { headStats: true });
  // (rotQ / rotK only with ropeDims > 0: their slots are empty here)
  assert.deepEqual(Object.keys(t), [...P.traceResults.filter((n) => n !== 'rotQ' && n !== 'rotK'), 'headStats']);
  assert.deepEqual(Object.keys(t.headStats), P.headStatsResults);
  for (const name of P.headStatsResults) assert.deepEqual(t.headStats[name].shape, [2]);
  mha.trace(x, x, x);
  assert.deepEqual(slots(stages, 3), [P.none, P.none, P.none], 'trace without headStats');
  mha.dispose();
});

test('trace() frees its buffers once they are copied out; forward and trace give the same numbers', () => {
  const E = 64;
  const L = 384;
  const mha = hs.createMultiheadAttention({ embedDim: E, numHeads: 4, bias: false });
  mha.loadStateDict({ in_proj_weight: { data: Float32Array.from({ length: 3 * E * E }, (_, i) => Math.sin(i) / 8), shape: [3 * E, E] },
    'out_proj.weight': { data: Float32Array.from({ length: E * E }, (_, i) => Math.cos(i) / 8), shape: [E, E] } });
  const x = { data: Float32Array.from({ length: L * E }, (_, i) => Math.sin(i * 0.37)), shape: [L, E] };
  const first = mha.forward(x, x, x, { averageAttnWeights: false });
  const before = hs.memory().heapInUse;
  const trace = mha.trace(x, x, x, { averageAttnWeights: false });
  const after = hs.memory().heapInUse;
  // What the trace held: q, k, v, headOutputs, concat, output (L x E each) and scores, weights
  // (H x L x L each): about 5 MB here. Kept, the heap would stay that much higher.
  const traceBytes = 4 * (6 * L * E + 2 * 4 * L * L);
  assert.ok(after - before < traceBytes / 10, `heap grew by ${after - before} bytes after trace() (a trace is ${traceBytes})`);
  assert.deepEqual(trace.output.data, first.output.data);
  assert.deepEqual(trace.weights.data, first.weights.data);
  // And the trace can be taken again.
  assert.deepEqual(mha.trace(x, x, x).output.data, first.output.data);
  mha.dispose();
});

test('errors arrive as one status (code and message) and name the JS argument', () => {
  const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  mha.loadStateDict(seed.state_dict);
  const x = seed.inputs.query;
  assert.throws(() => mha.forward(x, x, x, { keyPaddingMask: [true, false] }),
    { code: 'SHAPE_MISMATCH', message: 'options.keyPaddingMask: expected shape (S) = [3], got [2]',
      argument: 'options.keyPaddingMask' });
  // Code, the argument's id and the message, written by the core in the JS API's names.
  assert.equal(mha._state.handle.lastStatus(),
    'SHAPE_MISMATCH\noptions.keyPaddingMask\noptions.keyPaddingMask: expected shape (S) = [3], got [2]');
  assert.throws(() => mha.forward(x, x, x, { headGates: [1, 1, 1] }),
    { code: 'SHAPE_MISMATCH', argument: 'options.headGates' });
  assert.throws(() => hs.createMultiheadAttention({ embedDim: 4, numHeads: 3 }),
    { code: 'INVALID_ARGUMENT', argument: 'config.numHeads',
      message: 'config.numHeads: embedDim (4) must be divisible by numHeads (3)' });
  assert.throws(() => mha.loadStateDict({ bogus: [1] }, { strict: false }),
    { code: 'UNKNOWN_PARAMETER', argument: 'stateDict' });
  mha.dispose();
});

// The Transformer speaks the same protocol by name (issue 29, item 2): its call slots (tokens,
// headGates, targets) round-trip through TransformerHandle::echoCall as MultiheadAttention's do,
// written by the one writer both classes share.
test('the Transformer\'s named call slots reach C++ as JS wrote them (int32 ids, float gates)', () => {
  const T = hs._protocol.transformer;
  assert.deepEqual(Object.keys(T.slot), ['tokens', 'headGates', 'targets', 'corrupted']);
  assert.equal(T.parameterSlot, T.slot.tokens);
  const model = hs.createTransformer({ vocabSize: 11, maxLen: 8, dModel: 8, nLayers: 2, nHeads: 2 });
  const tensors = {
    tokens: { data: Int32Array.from([1, 2, 3, 4, 5, 6]), shape: [2, 3], count: 6, type: 'int32' },
    headGates: { data: Float32Array.from([1, 0.5, NaN, -0]), shape: [2, 2], count: 4, type: 'float' },
    targets: { data: Int32Array.from([2, 3, -100, 5, 6, 7]), shape: [2, 3], count: 6, type: 'int32' },
    corrupted: { data: Int32Array.from([9, 8, 7, 0, 1, 10]), shape: [2, 3], count: 6, type: 'int32' },
  };
  const names = Object.keys(T.slot);
  for (let empty = -1; empty < names.length; empty++) {
    const given = Object.fromEntries(names.filter((_, i) => i !== empty).map((n) => [n, tensors[n]]));
    model._write(given);
    model._state.handle.echoCall();
    const echoed = model._readResults(names.length);
    names.forEach((name, i) => {
      if (i === empty) {
        assert.equal(echoed[i], null, `${name} should be empty`);
        return;
      }
      const t = tensors[name];
      assert.deepEqual(echoed[i].shape, t.shape, `${name} shape`);
      assert.equal(echoed[i].data.constructor, t.type === 'int32' ? Int32Array : Float32Array, `${name} type`);
      assert.deepEqual(Array.from(echoed[i].data), Array.from(t.data), `${name} data`);
    });
  }
  // The results are named too: forward's logits then the hooks asked for, in order.
  const out = model.forward([[1, 2, 3]], { hooks: ['blocks.1.attn.hook_z', 'hook_embed'] });
  assert.deepEqual(Object.keys(out.hooks), ['blocks.1.attn.hook_z', 'hook_embed']);
  model.dispose();
});
