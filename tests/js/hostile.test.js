// Callers that lie: typed arrays with spoofed lengths, Proxies, getters that answer differently on
// every read or call back into headscope (dispose, forward, load, create a module that grows
// memory), revoked Proxies, detached buffers, methods called on the wrong `this`. For every one:
// either a HeadscopeError that names the argument or the right numbers; each caller value read
// exactly once; and afterwards an independent module on the same engine (another widget of the
// page) still gives the seed's worked example bit for bit, and the malloc heap is back at its
// level. fast-check draws the combinations (fixed seed, so a failure reproduces).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { init, HeadscopeError } from '../../web/lib/index.js';
import { seedWorkedExample as seed } from '../../web/lib/examples.js';
import { referenceForward } from './reference.js';
import { expectError } from './helpers.js';
import { hostileTensor } from './hostile-tensors.js';

const hs = await init();

// The independent module: the seed's worked example, its numbers taken once at the start.
const seedMha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
seedMha.loadStateDict(seed.state_dict);
const seedX = seed.inputs.query;
const seedWant = seedMha.forward(seedX, seedX, seedX, { averageAttnWeights: false });
function seedStillExact() {
  const got = seedMha.forward(seedX, seedX, seedX, { averageAttnWeights: false });
  assert.deepEqual(got.output.data, seedWant.output.data);
  assert.deepEqual(got.weights.data, seedWant.weights.data);
}

// The victim: E = 4, H = 2, with bias, fresh for every run.
const CONFIG = { embedDim: 4, numHeads: 2 };
const rand = (n, s) => Float32Array.from({ length: n }, (_, i) => Math.sin(s * 7.1 + i * 1.3));
const STATE = {
  in_proj_weight: { data: rand(48, 1), shape: [12, 4] },
  in_proj_bias: { data: rand(12, 2), shape: [12] },
  'out_proj.weight': { data: rand(16, 3), shape: [4, 4] },
  'out_proj.bias': { data: rand(4, 4), shape: [4] },
};
const X = { data: rand(12, 5), shape: [3, 4] };
const mhaConfig = { ...CONFIG, bias: true, addBiasKV: false, addZeroAttn: false, kdim: 4, vdim: 4, batchFirst: false };

function freshVictim() {
  const m = hs.createMultiheadAttention(CONFIG);
  m.loadStateDict(STATE);
  return m;
}

function assertMatchesReference(result, q, k, v, options = {}) {
  const want = referenceForward(mhaConfig, STATE, q, k, v, options);
  assert.deepEqual(result.output.shape, want.output.shape);
  result.output.data.forEach((x, i) => assert.ok(Math.abs(x - want.output.data[i]) < 1e-5,
    `output[${i}] = ${x}, reference ${want.output.data[i]}`));
}

// What a getter does on its first read: nothing, or call back into headscope.
const CALLBACKS = {
  none: () => {},
  // The victim is disposed in the middle of its own call.
  dispose: (ctx) => ctx.victim.dispose(),
  // A complete call on the same module, and one on the seed module, from inside the call.
  forward: (ctx) => {
    assertMatchesReference(ctx.victim.forward(X, X, X), X, X, X);
    seedStillExact();
  },
  load: (ctx) => ctx.victim.loadStateDict(STATE),
  // A new module whose call grows the wasm memory (detaching every heap view taken before).
  grow: () => {
    const before = hs.memory().wasmBytes;
    const big = hs.createMultiheadAttention({ embedDim: 8, numHeads: 1, bias: false });
    big.loadStateDict({ in_proj_weight: { data: new Float32Array(192), shape: [24, 8] },
      'out_proj.weight': { data: new Float32Array(64), shape: [8, 8] } });
    const L = 1100 + Math.floor(Math.random() * 50);
    big.forward({ data: new Float32Array(L * 8), shape: [L, 8] }, { data: new Float32Array(L * 8),
      shape: [L, 8] }, { data: new Float32Array(L * 8), shape: [L, 8] }, { averageAttnWeights: true });
    big.dispose();
    return hs.memory().wasmBytes > before;
  },
  create: () => {
    const other = hs.createMultiheadAttention(CONFIG);
    other.loadStateDict(STATE);
    other.forward(X, X, X);
    other.dispose();
  },
};

const TRICKS = ['lying-length', 'lying-small', 'proxy-typed-array', 'changing-getters', 'proxy-object',
  'proxy-shape', 'nested-proxy-rows', 'revoked', 'revoked-shape', 'symbol-shape', 'valueOf-shape',
  'detached', 'throwing-getter', 'shared-buffer'];
// Where the hostile value goes: an input, a state_dict entry, the attention mask (a float mask of
// zeros: the numbers equal the unmasked call's), or the attention mask inside an options object
// whose own getters also call back.
const SLOTS = ['query', 'key', 'value', 'stateDict', 'attnMask', 'options'];
const ZERO_MASK = { data: new Float32Array(9), shape: [3, 3] };

function runOne({ trick, slot, callback }) {
  const victim = freshVictim();
  const ctx = { victim, reads: {}, callback: CALLBACKS[callback] };
  const heapBefore = hs.memory().heapInUse;
  const base = slot === 'stateDict' ? STATE['out_proj.weight']
    : slot === 'attnMask' || slot === 'options' ? ZERO_MASK : X;
  const { value, expect, first } = hostileTensor(trick, ctx, base);
  let result = null;
  let error = null;
  try {
    if (slot === 'stateDict') {
      victim.loadStateDict({ ...STATE, 'out_proj.weight': value });
    } else if (slot === 'attnMask') {
      result = victim.forward(X, X, X, { attnMask: value });
    } else if (slot === 'options') {
      const options = {
        get needWeights() { ctx.reads.needWeights = (ctx.reads.needWeights ?? 0) + 1; ctx.callback(ctx); return true; },
        attnMask: value,
      };
      result = victim.forward(X, X, X, options);
    } else {
      const args = [X, X, X];
      args[['query', 'key', 'value'].indexOf(slot)] = value;
      result = victim.forward(...args);
    }
  } catch (e) {
    error = e;
  }
  // Never anything but a HeadscopeError, and one that names the argument.
  if (error !== null) {
    assert.ok(error instanceof HeadscopeError, `${trick}/${slot}/${callback}: ${error?.stack ?? error}`);
    const argName = slot === 'stateDict' ? "stateDict['out_proj.weight']"
      : slot === 'attnMask' || slot === 'options' ? 'options.attnMask' : slot;
    if (error.code !== 'DISPOSED') assert.ok(error.message.startsWith(argName), error.message);
  }
  // Every caller property was read once.
  for (const [what, n] of Object.entries(ctx.reads)) assert.equal(n, 1, `${trick}: ${what} read ${n} times`);
  const disposedByCallback = callback === 'dispose' && Object.keys(ctx.reads).length > 0;
  if (disposedByCallback && (expect === 'ok')) {
    assert.equal(error?.code, 'DISPOSED', `${trick}/${slot}: a call whose object was disposed by a getter`);
  } else if (expect === 'ok') {
    assert.equal(error, null, `${trick}/${slot}/${callback}: ${error?.message}`);
    if (slot === 'attnMask' || slot === 'options') {
      assertMatchesReference(result, X, X, X);
    } else if (slot !== 'stateDict') {
      const args = [X, X, X];
      args[['query', 'key', 'value'].indexOf(slot)] = first ?? X;
      assertMatchesReference(result, ...args);
    } else {
      assertMatchesReference(victim.forward(X, X, X), X, X, X);
    }
  } else {
    assert.equal(error?.code, expect, `${trick}/${slot}/${callback}: ${error?.message}`);
  }
  // The victim still works (unless it was disposed) and a refused load changed nothing.
  if (!victim.disposed) assertMatchesReference(victim.forward(X, X, X), X, X, X);
  else expectError(() => victim.forward(X, X, X), 'DISPOSED');
  victim.dispose();
  seedStillExact();
  // The victim's memory is back; modules made by callbacks were disposed.
  const heapAfter = hs.memory().heapInUse;
  assert.ok(heapAfter <= heapBefore, `heap grew from ${heapBefore} to ${heapAfter}`);
}

test('hostile tensors, getters and re-entrant callbacks: a clear error or the right numbers; ' +
  'read once; the other module and the heap unharmed', () => {
  const heapAtStart = hs.memory().heapInUse;
  let runs = 0;
  fc.assert(fc.property(
    fc.record({ trick: fc.constantFrom(...TRICKS), slot: fc.constantFrom(...SLOTS),
      callback: fc.constantFrom(...Object.keys(CALLBACKS)) }),
    (c) => { runs++; runOne(c); }), { seed: 20261201, numRuns: 600 });
  // And every combination once, so no class depends on the draw.
  for (const trick of TRICKS) for (const slot of SLOTS) for (const callback of Object.keys(CALLBACKS)) {
    runOne({ trick, slot, callback });
    runs++;
  }
  assert.equal(hs.liveHandles(), 1);
  assert.equal(hs.memory().heapInUse, heapAtStart, 'the heap returned to its level');
  assert.ok(runs >= 600 + TRICKS.length * SLOTS.length * 6);
});

test('a getter that disposes the object mid-call: DISPOSED, then and after its memory is reused', () => {
  const victim = freshVictim();
  const q = { get data() { victim.dispose(); return X.data; }, shape: [3, 4] };
  expectError(() => victim.forward(q, X, X), 'DISPOSED');
  // New modules take over the freed memory; the disposed object still refuses, never answering
  // with another module's numbers.
  const others = Array.from({ length: 8 }, () => freshVictim());
  for (const o of others) o.forward(X, X, X);
  expectError(() => victim.forward(X, X, X), 'DISPOSED');
  expectError(() => victim.trace(X, X, X), 'DISPOSED');
  expectError(() => victim.loadStateDict(STATE), 'DISPOSED');
  for (const o of others) o.dispose();
  seedStillExact();
});

test('re-entrant forward() from an input getter completes, and the outer call gets its own numbers', () => {
  const victim = freshVictim();
  const k2 = { data: rand(12, 9), shape: [3, 4] };
  let inner = null;
  const q = { get data() { inner = victim.forward(k2, k2, k2); return X.data; }, shape: [3, 4] };
  const outer = victim.forward(q, X, X);
  assertMatchesReference(outer, X, X, X);
  assertMatchesReference(inner, k2, k2, k2);
  victim.dispose();
});

test('options read once; out detached or shrunk by a later getter is refused, not written', () => {
  const victim = freshVictim();
  let reads = 0;
  const options = { get needWeights() { reads++; return reads === 1 ? false : 'not a boolean'; } };
  const r = victim.forward(X, X, X, options);
  assert.equal(reads, 1);
  assert.equal(r.weights, null);
  // out is checked after every getter: a query getter that detaches it makes a SHAPE_MISMATCH.
  const out = new Float32Array(12);
  const q = { get data() { structuredClone(out.buffer, { transfer: [out.buffer] }); return X.data; }, shape: [3, 4] };
  expectError(() => victim.forward(q, X, X, { out }), 'SHAPE_MISMATCH', 'options.out', 'got length 0');
  // A resizable buffer shrunk by a getter: same.
  const rab = new ArrayBuffer(48, { maxByteLength: 96 });
  const out2 = new Float32Array(rab);
  const q2 = { get data() { rab.resize(16); return X.data; }, shape: [3, 4] };
  expectError(() => victim.forward(q2, X, X, { out: out2 }), 'SHAPE_MISMATCH', 'options.out', 'got length 4');
  // out with a lying own length, or a Proxy of a Float32Array.
  const liar = new Float32Array(3);
  Object.defineProperty(liar, 'length', { value: 12 });
  expectError(() => victim.forward(X, X, X, { out: liar }), 'SHAPE_MISMATCH', 'options.out', 'got length 3');
  expectError(() => victim.forward(X, X, X, { out: new Proxy(new Float32Array(12), {}) }), 'INVALID_ARGUMENT', 'options.out');
  // An own `set` on out is not called.
  const own = new Float32Array(12);
  own.set = () => { throw new Error('called the caller\'s set'); };
  assertMatchesReference(victim.forward(X, X, X, { out: own }), X, X, X);
  // Masks: a lying Uint8Array.
  const kpm = new Uint8Array(2);
  Object.defineProperty(kpm, 'length', { value: 3 });
  expectError(() => victim.forward(X, X, X, { keyPaddingMask: { data: kpm, shape: [3] } }), 'SHAPE_MISMATCH',
    'options.keyPaddingMask: data has 2 elements');
  // Proxy options whose ownKeys trap lies about nothing but whose get trap counts.
  let gets = 0;
  const proxied = new Proxy({ isCausal: true }, { get(t, k) { gets++; return t[k]; } });
  victim.forward(X, X, X, proxied);
  assert.equal(gets, 1);
  // alibi and window are read once each: a getter that changes its answer has its first one used
  // (a window of 2^30 would be refused); a number-like object is no number.
  let optionReads = 0;
  const shifty = { isCausal: true, get window() { optionReads++; return optionReads === 1 ? 2 : 2 ** 30; },
    get alibi() { optionReads++; return true; } };
  const once = victim.forward(X, X, X, shifty);
  assert.equal(optionReads, 2);
  assert.deepEqual(once.output.data, victim.forward(X, X, X, { isCausal: true, window: 2, alibi: true }).output.data);
  expectError(() => victim.forward(X, X, X, { window: { valueOf: () => 2 } }), 'INVALID_ARGUMENT', 'options.window');
  victim.dispose();
  seedStillExact();
});

test('unknown option names are own keys only: constructor, toString, __proto__ are refused', async () => {
  const victim = freshVictim();
  for (const name of ['constructor', 'toString', 'hasOwnProperty', 'valueOf']) {
    expectError(() => victim.forward(X, X, X, { [name]: 1 }), 'INVALID_ARGUMENT', `options.${name}: unknown option`);
    expectError(() => hs.createMultiheadAttention({ ...CONFIG, [name]: 1 }), 'INVALID_ARGUMENT', `config.${name}: unknown option`);
    expectError(() => victim.loadStateDict(STATE, { [name]: 1 }), 'INVALID_ARGUMENT', `options.${name}: unknown option`);
  }
  const proto = JSON.parse('{"__proto__": 1}');
  expectError(() => victim.forward(X, X, X, proto), 'INVALID_ARGUMENT', 'options.__proto__: unknown option');
  await assert.rejects(init({ constructor: 1 }), { code: 'INVALID_ARGUMENT', message: /options\.constructor: unknown option/ });
  victim.dispose();
});

test('methods called with a wrong this, revoked Proxies, Symbols: HeadscopeError, never a raw TypeError', () => {
  const victim = freshVictim();
  const { forward, trace, loadStateDict, dispose, parameterShapes } = victim;
  for (const [f, name] of [[forward, 'forward'], [trace, 'trace'], [loadStateDict, 'loadStateDict'],
    [dispose, 'dispose'], [parameterShapes, 'parameterShapes']]) {
    expectError(() => f(X, X, X), 'INVALID_ARGUMENT', `MultiheadAttention.${name}: called on undefined`);
    expectError(() => f.call({}, X, X, X), 'INVALID_ARGUMENT', `MultiheadAttention.${name}`);
    expectError(() => f.call(new Proxy(victim, {}), X, X, X), 'INVALID_ARGUMENT', `MultiheadAttention.${name}`);
  }
  const { createMultiheadAttention, memory, runCase, close } = hs;
  expectError(() => createMultiheadAttention(CONFIG), 'INVALID_ARGUMENT', 'Headscope.createMultiheadAttention');
  expectError(() => memory(), 'INVALID_ARGUMENT', 'Headscope.memory');
  expectError(() => runCase.call(Object.create(hs), seed), 'INVALID_ARGUMENT', 'Headscope.runCase');
  expectError(() => close.call(null), 'INVALID_ARGUMENT', 'Headscope.close');
  const getter = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(hs), 'maxCallBytes').get;
  expectError(() => getter.call({}), 'INVALID_ARGUMENT', 'Headscope.maxCallBytes');
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  for (const call of [() => victim.forward(proxy, X, X), () => victim.forward(X, X, X, proxy),
    () => victim.forward(X, X, X, { attnMask: proxy }), () => victim.loadStateDict(proxy),
    () => hs.createMultiheadAttention(proxy), () => hs.runCase(proxy), () => hs.checkCase(seed, proxy)]) {
    expectError(call, 'INVALID_ARGUMENT');
  }
  expectError(() => victim.forward({ data: X.data, shape: [3, Symbol.iterator] }, X, X), 'INVALID_ARGUMENT',
    'query.shape[1]: expected a non-negative integer, got symbol Symbol(Symbol.iterator)');
  expectError(() => victim.loadStateDict(new Map([[Symbol('k'), X]])), 'UNKNOWN_PARAMETER', 'is not a string');
  victim.dispose();
  seedStillExact();
});

test('a refused loadStateDict loads nothing, also when the failure comes after the checks', () => {
  const victim = freshVictim();
  const before = victim.forward(X, X, X).output.data;
  const other = { ...STATE, in_proj_bias: { data: rand(12, 42), shape: [12] } };
  // A getter of a later entry throws: nothing of the earlier entries is loaded.
  const bad = { ...other, get 'out_proj.bias'() { throw new Error('late'); } };
  expectError(() => victim.loadStateDict(bad), 'INVALID_ARGUMENT', "stateDict: reading it threw (Error: late)");
  assert.deepEqual(victim.forward(X, X, X).output.data, before);
  // Memory exhaustion while loading: the whole load is refused and the module is unchanged.
  const huge = hs.createMultiheadAttention({ embedDim: 4096, numHeads: 1, bias: false });
  const w = new Float32Array(4096 * 4096);
  const fillers = [];
  try {
    // Fill the wasm memory until a load of 3 x 64 MiB can no longer be staged.
    for (let i = 0; i < 48; i++) {
      const f = hs.createMultiheadAttention({ embedDim: 4096, numHeads: 1, bias: false });
      fillers.push(f);
      try {
        f.loadStateDict({ 'out_proj.weight': { data: w, shape: [4096, 4096] } }, { strict: false });
      } catch (e) {
        assert.equal(e.code, 'RESOURCE_EXHAUSTED', e.message);
        break;
      }
    }
    let refused = null;
    try {
      huge.loadStateDict({ in_proj_weight: { data: new Float32Array(3 * 4096 * 4096), shape: [3 * 4096, 4096] },
        'out_proj.weight': { data: w, shape: [4096, 4096] } });
    } catch (e) {
      refused = e;
    }
    if (refused !== null) {
      assert.equal(refused.code, 'RESOURCE_EXHAUSTED', refused.message);
      // Nothing was loaded: forward still asks for every parameter.
      expectError(() => huge.forward({ data: new Float32Array(4096), shape: [1, 4096] },
        { data: new Float32Array(4096), shape: [1, 4096] }, { data: new Float32Array(4096), shape: [1, 4096] }),
      'MISSING_PARAMETER', 'in_proj_weight', 'out_proj.weight');
    }
  } finally {
    for (const f of fillers) f.dispose();
    huge.dispose();
  }
  assert.deepEqual(victim.forward(X, X, X).output.data, before);
  victim.dispose();
  seedStillExact();
});

test('config getters that call back (create, forward, dispose, close another engine) during createMultiheadAttention', async () => {
  const other = freshVictim();
  let reads = 0;
  const config = {
    get embedDim() {
      reads++;
      // A whole module's life and a call on another module, from inside the config read.
      const inner = hs.createMultiheadAttention(CONFIG);
      inner.loadStateDict(STATE);
      assertMatchesReference(inner.forward(X, X, X), X, X, X);
      inner.dispose();
      other.dispose();
      return 4;
    },
    numHeads: 2,
  };
  const m = hs.createMultiheadAttention(config);
  assert.equal(reads, 1);
  m.loadStateDict(STATE);
  assertMatchesReference(m.forward(X, X, X), X, X, X);
  m.dispose();
  expectError(() => other.forward(X, X, X), 'DISPOSED');
  // A getter that closes the engine it is being created on: DISPOSED, and nothing is created.
  const second = await init({ wasmBinary: await (await import('node:fs/promises')).readFile(
    new URL('../../web/lib/headscope_core.wasm', import.meta.url)) });
  expectError(() => second.createMultiheadAttention({ get embedDim() { second.close(); return 4; }, numHeads: 2 }),
    'DISPOSED', 'engine was closed');
  assert.equal(second.liveHandles(), 0);
  seedStillExact();
});

// Issue 28, item 15: a view that tracks a resizable ArrayBuffer's length, resized by the getter
// of another argument after its own checks. Growing one used to overflow the call's arena (the
// next clean call gave NaN); shrinking one gave a result from data the caller no longer had. Every
// pair of (victim slot, attacker slot), in every reading order: shrinking or detaching is
// INVALID_ARGUMENT naming the victim, growing gives the numbers of the elements checked; the seed
// module and the heap are untouched.
test('resizable buffers resized by another argument\'s getter: refused or the checked numbers, never the heap', () => {
  const heapAtStart = hs.memory().heapInUse;
  const victim = freshVictim();
  const mask = { keyPaddingMask: { data: new Uint8Array(3), shape: [3] }, attnMask: { data: new Float32Array(9), shape: [3, 3] },
    headGates: { data: new Float32Array([1, 1]), shape: [2] } };
  const SLOTS_ = ['query', 'key', 'value', 'keyPaddingMask', 'attnMask', 'headGates'];
  let runs = 0;
  for (const target of SLOTS_) for (const attacker of SLOTS_) for (const action of ['shrink', 'grow', 'detach']) {
    if (target === attacker) continue;
    const base = target in mask ? mask[target] : X;
    const Kind = base.data.constructor;
    const buffer = new ArrayBuffer(base.data.byteLength, { maxByteLength: 1 << 16 });
    const view = new Kind(buffer);  // length-tracking
    view.set(base.data);
    const hit = () => {
      if (action === 'shrink') buffer.resize(Kind.BYTES_PER_ELEMENT);
      else if (action === 'grow') { buffer.resize(1 << 16); new Kind(buffer).fill(Kind === Uint8Array ? 1 : 1e30, base.data.length); }
      else structuredClone(buffer, { transfer: [buffer] });
    };
    const args = { query: X, key: X, value: X, ...mask };
    args[target] = { data: view, shape: base.shape.slice() };
    const a = args[attacker];
    args[attacker] = { get data() { hit(); return a.data; }, shape: a.shape };
    const { query, key, value, ...options } = args;
    let result = null;
    let error = null;
    try {
      result = victim.forward(query, key, value, options);
    } catch (e) {
      error = e;
    }
    const what = `${target} ${action} by ${attacker}`;
    // The attacker may be read before the target (then the target is read resized: an ordinary
    // shape error), or after (then it must be caught at the copy).
    if (action === 'grow' && result !== null) {
      const checked = { query: X, key: X, value: X, ...mask };
      const { query: q, key: k, value: v, ...o } = checked;
      assertMatchesReference(result, q, k, v, o);
    } else {
      assert.ok(error instanceof HeadscopeError, `${what}: ${error?.stack ?? 'a result'}`);
      assert.ok(['INVALID_ARGUMENT', 'SHAPE_MISMATCH'].includes(error.code), `${what}: ${error.code} ${error.message}`);
      assert.ok(error.message.includes(target === 'query' || target === 'key' || target === 'value' ? target : `options.${target}`),
        `${what}: ${error.message}`);
    }
    assertMatchesReference(victim.forward(X, X, X), X, X, X);
    seedStillExact();
    runs++;
  }
  assert.equal(runs, 6 * 5 * 3);
  victim.dispose();
  assert.equal(hs.memory().heapInUse, heapAtStart, 'the heap returned to its level');
});

test('a state_dict entry resized by a later entry\'s getter: refused, and the module keeps its weights', () => {
  const victim = freshVictim();
  const before = victim.forward(X, X, X).output.data;
  for (const action of ['shrink', 'grow']) {
    const buffer = new ArrayBuffer(48 * 4, { maxByteLength: 1 << 16 });
    const w = new Float32Array(buffer);
    w.set(STATE.in_proj_weight.data);
    const sd = {
      in_proj_weight: { data: w, shape: [12, 4] },
      in_proj_bias: STATE.in_proj_bias,
      'out_proj.weight': { get data() { buffer.resize(action === 'shrink' ? 4 : 1 << 16); return STATE['out_proj.weight'].data; }, shape: [4, 4] },
      'out_proj.bias': STATE['out_proj.bias'],
    };
    if (action === 'shrink') {
      expectError(() => victim.loadStateDict(sd), 'INVALID_ARGUMENT', "stateDict['in_proj_weight']: its buffer was resized or detached");
    } else {
      victim.loadStateDict(sd);  // the 48 elements checked
    }
    assert.deepEqual(victim.forward(X, X, X).output.data, before, action);
  }
  victim.dispose();
  seedStillExact();
});
