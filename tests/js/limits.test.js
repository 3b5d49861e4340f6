// Memory limits of the WebAssembly build, in their own process (node --test runs each file in
// one): WebAssembly memory grows but never shrinks, and these tests take it to 4 GiB.
//
// 1. Calls whose buffers would exceed hs.maxCallBytes are refused before anything is allocated;
//    a refused call of any entry holds nothing more after it than before it.
// 2. Real exhaustion of the 32-bit address space (hs.maxCallBytes raised to its maximum, 2^32 - 1):
//    calls under the limit whose buffers cannot be allocated throw HeadscopeError
//    RESOURCE_EXHAUSTED, and the module computes correct results afterwards.
// Shapes have tiny inputs and huge per-head buffers (embedDim = numHeads, kdim = vdim = 1), and
// every failing allocation happens before the memory is written, so the process's real memory use
// stays small (the WebAssembly memory reserves address space; untouched pages cost nothing).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { init, HeadscopeError } from '../../web/lib/index.js';
import { referenceForward } from './reference.js';
import { expectError } from './helpers.js';

const hs = await init();
const DEFAULT_LIMIT = hs.maxCallBytes;
const GiB = 2 ** 30;

after(() => {
  hs.maxCallBytes = DEFAULT_LIMIT;
  assert.equal(hs.liveHandles(), 0, 'live handles left after the suite');
});

// Deterministic weights and inputs: small values from a formula, no RNG needed.
function fill(shape, seed) {
  const n = shape.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = Math.sin(i * 0.37 + seed) * 0.25;
  return { data, shape };
}

function module(config) {
  const mha = hs.createMultiheadAttention(config);
  const stateDict = Object.fromEntries(Object.entries(mha.parameterShapes()).map(([k, s], i) => [k, fill(s, i)]));
  mha.loadStateDict(stateDict);
  return { mha, stateDict };
}

// embedDim = numHeads (headDim 1) and kdim = vdim = 1: per-head scores/weights are H x L x S
// floats from inputs of L x E and S floats.
const wideConfig = (E) => ({ embedDim: E, numHeads: E, kdim: 1, vdim: 1, bias: false });

// A small call checked against the reference and against its own first result, bit for bit.
function smallCheck(m) {
  const q = fill([3, 2, m.mha.config.embedDim], 11);
  const k = fill([4, 2, m.mha.config.kdim], 12);
  const v = fill([4, 2, m.mha.config.vdim], 13);
  const options = { keyPaddingMask: [[false, false, true, false], [true, true, true, true]], averageAttnWeights: false };
  const want = referenceForward(m.mha.config, m.stateDict, q, k, v, options);
  return () => {
    const got = m.mha.forward(q, k, v, options);
    for (const name of ['output', 'weights']) {
      assert.deepEqual(got[name].shape, want[name].shape);
      got[name].data.forEach((x, i) => assert.ok(Math.abs(x - want[name].data[i]) < 1e-4,
        `${name}[${i}]: ${x} vs ${want[name].data[i]}`));
    }
    return got;
  };
}

test('calls whose buffers would exceed hs.maxCallBytes are refused before allocating', () => {
  assert.equal(DEFAULT_LIMIT, 2 * GiB);
  const wide = module(wideConfig(256));
  const q = fill([128, 256], 1);       // 128 KiB
  const k = fill([32768, 1], 2);       // 128 KiB: per-head weights 256 x 128 x 32768 floats = 4 GiB
  const longK = fill([2 ** 21, 1], 3); // 8 MiB: projected keys and values 2 x 2 GiB
  const calls = [
    () => wide.mha.forward(q, k, k, { averageAttnWeights: false }),
    () => wide.mha.trace(q, k, k),
    () => wide.mha.forward(q, longK, longK, { needWeights: false }),
    () => wide.mha.forward(fill([2, 1, 256], 4), fill([2 ** 20, 1, 1], 5), fill([2 ** 20, 1, 1], 5), { needWeights: false }),
  ];
  // The first refusal may grow the input arena (the inputs are copied in to be checked), nothing else.
  const start = hs.memory();
  const first = expectError(calls[2], 'RESOURCE_EXHAUSTED', 'would exceed the limit of 2147483648 bytes');
  assert.ok(first.message.includes('S=2097152'), first.message);
  assert.ok(hs.memory().heapInUse - start.heapInUse <= (128 + 2 * 8192) * 1024 + 1024, 'only the inputs were allocated');
  const before = hs.memory();
  for (let round = 0; round < 3; round++) {
    for (const call of calls) expectError(call, 'RESOURCE_EXHAUSTED', 'would exceed the limit');
  }
  assert.deepEqual(hs.memory(), before, 'memory changed by refused calls');
  assert.ok(before.wasmBytes < 256 * 2 ** 20, `WebAssembly memory ${before.wasmBytes}`);

  // A lower limit refuses ordinary calls the same way; raised again, the module computes.
  const m = module({ embedDim: 8, numHeads: 2, addZeroAttn: true });
  const check = smallCheck(m);
  const ok = check();
  try {
    hs.maxCallBytes = 1024;
    expectError(check, 'RESOURCE_EXHAUSTED', 'would exceed the limit of 1024 bytes');
    // Below even the inputs: they still fit the arena earlier calls reserved (nothing new is
    // allocated for them), and the call's own buffers are refused.
    hs.maxCallBytes = 100;
    expectError(check, 'RESOURCE_EXHAUSTED', 'would exceed the limit of 100 bytes');
  } finally {
    hs.maxCallBytes = DEFAULT_LIMIT;
  }
  assert.deepEqual(check().output.data, ok.output.data);
  wide.mha.dispose();
  m.mha.dispose();
});

// A refused call holds nothing more after it than before it: what it grew before the step that
// failed is freed (a Transformer forward of (2^20, 16) tokens kept its 1.8 GB of logits: heapInUse
// went from 13 KB to 1.81 GB until dispose()), with the copy of its inputs when they grew the
// arena. Every entry, refused by its checks and under every maxCallBytes from 4 KiB up to the
// one it fits (so the refusal comes at every stage), each after a warm call of another shape.
test('a refused call of every entry leaves heapInUse no higher than before it', () => {
  const SLACK = 16 * 1024;  // the last error's message, kept for lastStatus
  const model = hs.createTransformer({ vocabSize: 40, maxLen: 64, dModel: 32, nLayers: 2, nHeads: 4, dMlp: 64, seed: 3 });
  const m = module({ embedDim: 32, numHeads: 4 });
  const tokens = Array.from({ length: 16 }, (_, b) => Array.from({ length: 64 }, (_, t) => (b * 64 + t) * 7 % 40));
  const targets = tokens.map((row) => row.map((x) => (x * 3) % 40));
  const hooks = model.hookNames();
  const warm = () => {
    model.forward([[1, 2, 3]], { hooks });
    m.mha.forward(fill([1, 2, 32], 1), fill([1, 2, 32], 2), fill([1, 2, 32], 3));
  };
  const refuses = (what, call, code) => {
    warm();
    const before = hs.memory().heapInUse;
    const e = expectError(call, code);
    const after = hs.memory().heapInUse;
    assert.ok(after <= before + SLACK, `${what}: heapInUse ${before} before, ${after} after (${e.message})`);
  };
  try {
    // The review's case: the logits of (2^20, 16) tokens fit 2 GiB, the activations do not.
    refuses('forward of (2^20, 16) tokens', () => model.forward({ data: new Int32Array(2 ** 24), shape: [2 ** 20, 16] }),
      'RESOURCE_EXHAUSTED');
    refuses('forward of bad tokens', () => model.forward([[1, 99]]), 'INVALID_ARGUMENT');
    refuses('forward with an unknown hook', () => model.forward(tokens, { hooks: ['nope'] }), 'INVALID_ARGUMENT');
    refuses('generate at a negative temperature', () => model.generate(tokens, { maxNewTokens: 0, temperature: -1 }), 'INVALID_ARGUMENT');
    refuses('backward with every target ignored', () => model.backward(tokens, tokens.map((r) => r.map(() => -100))), 'INVALID_ARGUMENT');
    refuses('trainStep before setOptimizer', () => model.trainStep(tokens, targets), 'INVALID_ARGUMENT');
    refuses('setOptimizer with lr NaN', () => model.setOptimizer({ type: 'sgd', lr: NaN }), 'INVALID_ARGUMENT');
    const sd = model.stateDict();
    refuses('loadStateDict of a mis-shaped entry', () => model.loadStateDict({ ...sd, 'unembed.bias': { data: new Float32Array(3), shape: [3] } }),
      'SHAPE_MISMATCH');
    refuses('loadStateDict missing an entry', () => model.loadStateDict({ 'unembed.bias': sd['unembed.bias'] }), 'MISSING_PARAMETER');
    refuses('MultiheadAttention forward of a bad shape', () => m.mha.forward(fill([2, 5], 1), fill([2, 5], 1), fill([2, 5], 1)),
      'SHAPE_MISMATCH');
    model.setOptimizer({ type: 'sgd', lr: 0 });
    const q = fill([64, 8, 32], 4);
    const calls = [
      ['forward', () => model.forward(tokens)],
      ['forward with every hook', () => model.forward(tokens, { hooks })],
      ['generate', () => model.generate(tokens.map((r) => r.slice(0, 4)), { maxNewTokens: 60, logits: true })],
      ['backward', () => model.backward(tokens, targets, { headGateGrads: true })],
      ['trainStep', () => model.trainStep(tokens, targets)],
      ['MultiheadAttention forward', () => m.mha.forward(q, q, q, { averageAttnWeights: false })],
      ['MultiheadAttention trace', () => m.mha.trace(q, q, q)],
    ];
    for (const [what, call] of calls) {
      let refused = 0;
      for (let limit = 4096; ; limit *= 2) {
        warm();
        const before = hs.memory().heapInUse;
        hs.maxCallBytes = limit;
        let error = null;
        try {
          call();
        } catch (e) {
          error = e;
        } finally {
          hs.maxCallBytes = DEFAULT_LIMIT;
        }
        if (error === null) break;
        assert.ok(error instanceof HeadscopeError && error.code === 'RESOURCE_EXHAUSTED', `${what}: ${error}`);
        refused++;
        const after = hs.memory().heapInUse;
        assert.ok(after <= before + SLACK, `${what} refused under ${limit} bytes: heapInUse ${before} before, ${after} after`);
        assert.ok(limit < GiB, `${what} refused under ${limit} bytes`);
      }
      assert.ok(refused >= 4, `${what}: ${refused} refusals`);
    }
    // And every one of them works afterwards.
    warm();
    for (const [, call] of calls) call();
  } finally {
    model.dispose();
    m.mha.dispose();
  }
});

test('hs.maxCallBytes accepts 0 .. 2^32 - 1 and refuses anything else', () => {
  try {
    for (const bad of [2 ** 32, 2 ** 40, Infinity, -1, NaN, '1024', null, undefined]) {
      expectError(() => { hs.maxCallBytes = bad; }, 'INVALID_ARGUMENT', 'maxCallBytes', '4294967295');
      assert.equal(hs.maxCallBytes, DEFAULT_LIMIT, `${bad} changed the limit`);
    }
    hs.maxCallBytes = 2 ** 32 - 1;
    assert.equal(hs.maxCallBytes, 2 ** 32 - 1);
    hs.maxCallBytes = 0;
    assert.equal(hs.maxCallBytes, 0);
  } finally {
    hs.maxCallBytes = DEFAULT_LIMIT;
  }
});

test('real exhaustion: calls under the limit whose buffers do not fit throw RESOURCE_EXHAUSTED', () => {
  hs.maxCallBytes = 2 ** 32 - 1;
  const baseline = hs.memory().heapInUse;
  const a = module(wideConfig(1024));  // 2 x 4 MiB of weights
  const checkA = smallCheck(a);
  const okA = checkA();

  // (1) One result buffer larger than what is left of the 4 GiB: output (4 MiB - 4 KiB) + per-head
  // weights (4 GiB - 4 MiB) = 2^32 - 4096 bytes, under the limit; nothing else fits beside them.
  const q1023 = fill([1023, 1024], 1);
  const k1024 = fill([1024, 1], 2);
  expectError(() => a.mha.forward(q1023, k1024, k1024, { averageAttnWeights: false }), 'RESOURCE_EXHAUSTED',
    'forward result: could not allocate 4294963200 bytes');
  assert.deepEqual(checkA().output.data, okA.output.data);

  // (2) A trace that grows the WebAssembly memory past 2 GiB, then fails: scores and weights of
  // 1024 x 511 x 1022 floats (2 GiB - 8 MiB each), 2^32 - 16 KiB bytes in all.
  const q511 = fill([511, 1024], 3);
  const k1022 = fill([1022, 1], 4);
  const held = hs.memory().heapInUse;
  expectError(() => a.mha.trace(q511, k1022, k1022), 'RESOURCE_EXHAUSTED', 'trace: could not allocate 4294950912 bytes');
  const grown = hs.memory();
  assert.ok(grown.wasmBytes > 2 * GiB, `memory grew to ${grown.wasmBytes}`);
  // The stages allocated before the failing one (the 2 GiB of scores) are freed with the refusal:
  // they used to stay with the module until its next trace or dispose().
  assert.ok(grown.heapInUse <= held, `heap in use ${grown.heapInUse}, ${held} before the trace`);
  assert.deepEqual(checkA().output.data, okA.output.data);

  // (3) Memory another module holds: b's per-head weights (2.5 GB) would fit an empty heap, not
  // beside a's 2 GiB.
  const b = module(wideConfig(1024));
  const checkB = smallCheck(b);
  const okB = checkB();
  expectError(() => b.mha.forward(fill([600, 1024], 5), k1024, k1024, { averageAttnWeights: false }),
    'RESOURCE_EXHAUSTED', 'forward result: could not allocate');
  assert.deepEqual(checkB().output.data, okB.output.data);
  assert.deepEqual(checkA().output.data, okA.output.data);

  a.mha.dispose();
  b.mha.dispose();
  assert.equal(hs.memory().heapInUse, baseline, 'dispose() returned everything');
  hs.maxCallBytes = DEFAULT_LIMIT;
});

test('the heap exhausted to its last bytes: every call throws a HeadscopeError, and work resumes', () => {
  hs.maxCallBytes = 2 ** 32 - 1;
  const baseline = hs.memory().heapInUse;
  const MAX_MEMORY = 4 * GiB - 64 * 1024;  // the WebAssembly build's maximum memory
  const STATIC = 5.5 * 2 ** 20;            // approximately: static data and the 5 MiB stack
  const held = [];
  const codes = {};
  const attempt = (name, fn) => {
    try {
      return fn();
    } catch (e) {
      assert.ok(e instanceof HeadscopeError, `${name}: not a HeadscopeError: ${e?.stack ?? e}`);
      codes[`${name}: ${e.code}`] = (codes[`${name}: ${e.code}`] ?? 0) + 1;
      return null;
    }
  };
  try {
    // Fill with memory that is held but never written: a Transformer generation begun and not
    // continued (_generateBegin, the first step of the worker's generate in chunks) holds its
    // step logits, n x vocabSize floats for options.logits, written only as tokens are drawn.
    // (A refused call frees what it grew, so failed traces do not fill the heap any more.) First
    // 2 GiB, then 0.7 of what is left each time, down to a few KiB.
    const V = 1024;
    const fillWith = (bytes) => {
      const n = Math.max(1, Math.floor(bytes / (4 * V)));
      const model = attempt('fill model', () => hs.createTransformer({ vocabSize: V, maxLen: n + 1, dModel: 4,
        positions: 'none', seed: 1 }));
      if (model === null) return false;
      held.push(model);
      attempt('fill generation', () => model._generateBegin([[0]], { maxNewTokens: n, logits: true }));
      return true;
    };
    assert.ok(fillWith(2 * GiB - 8 * 2 ** 20));
    assert.ok(hs.memory().heapInUse > 2 * GiB, `heap in use ${hs.memory().heapInUse}`);
    for (let i = 0; i < 60; i++) {
      const left = MAX_MEMORY - STATIC - hs.memory().heapInUse;
      if (left < 64 * 1024) break;
      if (!fillWith(0.7 * left)) break;
    }
    // Then small modules until not even one can be created.
    const small = module({ embedDim: 4, numHeads: 2 });
    held.push(small.mha);
    const check = smallCheck(small);
    const ok = check();
    let created = 0;
    while (created < 100_000) {
      const m = attempt('createMultiheadAttention', () => hs.createMultiheadAttention({ embedDim: 4, numHeads: 2 }));
      if (m === null) break;
      held.push(m);
      created++;
    }
    assert.ok(created < 100_000, 'the heap never ran out');
    // Everything refuses with a HeadscopeError or works; nothing aborts.
    const q = fill([3, 4], 1);
    attempt('forward (warm shape)', check);
    attempt('forward (new shape)', () => small.mha.forward(fill([9, 4], 2), fill([7, 4], 3), fill([7, 4], 3)));
    attempt('forward (bad shape)', () => small.mha.forward([[1, 2, 3]], q, q));
    attempt('forward (bad rank)', () => small.mha.forward([1, 2, 3, 4], q, q));
    attempt('trace', () => small.mha.trace(q, q, q));
    attempt('loadStateDict', () => small.mha.loadStateDict(small.stateDict));
    attempt('runCase', () => hs.runCase({ config: { embed_dim: 2, num_heads: 1 }, state_dict: {}, inputs: { query: [[1, 2]] } }));
    console.log(`# exhausted heap: ${hs.memory().heapInUse} bytes in use of ${hs.memory().wasmBytes}; ` +
      `errors: ${JSON.stringify(codes)}`);
  } finally {
    for (const m of held) m.dispose();
    hs.maxCallBytes = DEFAULT_LIMIT;
  }
  // INTERNAL errors are the core's own small allocations (an error message, the module object)
  // failing: the WebAssembly build aborts there, unwinding without destructors, so what those
  // calls had allocated so far stays allocated. A few bytes; everything else came back.
  const leaked = hs.memory().heapInUse - baseline;
  console.log(`# exhausted heap: ${leaked} bytes not returned after dispose() of everything`);
  assert.ok(leaked >= 0 && leaked < 4096, `${leaked} bytes not returned`);
  if (!Object.keys(codes).some((c) => c.endsWith('INTERNAL'))) assert.equal(leaked, 0);
  assert.equal(hs.liveHandles(), 0);
  const m = module({ embedDim: 8, numHeads: 4, addBiasKV: true });
  smallCheck(m)();
  m.mha.dispose();
});
