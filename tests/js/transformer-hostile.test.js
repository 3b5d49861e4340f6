// Callers that lie, for the transformer's entry points: createTransformer(config), loadStateDict,
// stateDict and forward, in the calling thread and through initWorker(). Getters that throw,
// answer differently on every read or call back into headscope (dispose, forward, load, a module
// that grows memory, closing the engine or ending the worker), Proxies, revoked Proxies, objects
// whose valueOf / toString / Symbol.toPrimitive throw or re-enter, detached buffers, typed arrays
// with a lying own length, huge and sparse arrays, NaN / Infinity / -0 / 1.5 / 2^53 as sizes and
// token ids, state_dicts with prototype keys, shapes that lie, hooks arrays with getters, head
// gates of the wrong shape. For every one: a HeadscopeError naming the argument (or the numbers
// of what was read first), each caller value read once, no state_dict half loaded (stateDict()
// afterwards is the one before), the model and an independent one (another widget of the page)
// giving their bits as before, the heap and liveHandles() back at their level.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { spawnSync } from 'node:child_process';
import { init, HeadscopeError } from '../../web/lib/index.js';
import { initWorker } from '../../web/lib/worker-client.js';
import { expectError } from './helpers.js';
import { hostileTensor } from './hostile-tensors.js';
import { assertSameResultBits } from './same-bits.js';
import { randomStateDict, rejectsWith, settle } from './transformer-helpers.js';

const hs = await init();
const WASM = new URL('../../web/lib/headscope_core.wasm', import.meta.url);
const INDEX_URL = new URL('../../web/lib/index.js', import.meta.url).href;

// The victim's kind: small, two layers, an MLP; and its tokens, weights and numbers.
const CONFIG = { vocabSize: 11, maxLen: 7, dModel: 8, nLayers: 2, nHeads: 2, dMlp: 12 };
const TOKENS = [[1, 2, 3, 4, 5], [10, 9, 8, 7, 6]];
const HOOKS = ['blocks.0.attn.hook_pattern', 'blocks.1.hook_resid_post'];
const shapes = (() => {
  const m = hs.createTransformer(CONFIG);
  const s = m.parameterShapes();
  m.dispose();
  return s;
})();
const STATE = randomStateDict(shapes, 1);
const STATE2 = randomStateDict(shapes, 2);   // what a refused load must not leave behind
const HOSTILE_KEY = 'blocks.1.attn.out_proj.weight';   // the entry the tricks go into (a middle one)

// The independent model: another config, its numbers taken once at the start.
const witness = hs.createTransformer({ vocabSize: 13, maxLen: 6, dModel: 12, nLayers: 1, nHeads: 3, dMlp: 8,
  norm: 'post', positions: 'sinusoidal', seed: 5 });
const WITNESS_TOKENS = [[0, 12, 3, 4]];
const witnessWant = witness.forward(WITNESS_TOKENS, { hooks: ['blocks.0.attn.hook_z'] });
function witnessStillExact() {
  assertSameResultBits(witness.forward(WITNESS_TOKENS, { hooks: ['blocks.0.attn.hook_z'] }), witnessWant, 'witness');
}

function freshVictim(stateDict = STATE) {
  const m = hs.createTransformer(CONFIG);
  m.loadStateDict(stateDict);
  return m;
}
const reference = freshVictim();
const WANT = reference.forward(TOKENS, { hooks: HOOKS });
const WANT_STATE = reference.stateDict();
const WANT2_STATE = (() => {
  const m = freshVictim(STATE2);
  const s = m.stateDict();
  m.dispose();
  return s;
})();
reference.dispose();

const liveAtStart = hs.liveHandles();
after(() => {
  assert.equal(hs.liveHandles(), liveAtStart, 'live handles back at their level');
  witness.dispose();
});

// ---- Tensor-shaped arguments built with a trick (hostile-tensors.js) ----

// What a getter does on its first read (ctx.victim is the model under attack).
const CALLBACKS = {
  none: () => {},
  dispose: (ctx) => ctx.victim.dispose(),
  // A whole call on the same model and one on the witness, from inside the call.
  forward: (ctx) => {
    assertSameResultBits(ctx.victim.forward(TOKENS, { hooks: HOOKS }), WANT, 're-entrant forward');
    witnessStillExact();
  },
  load: (ctx) => ctx.victim.loadStateDict(STATE),
  stateDict: (ctx) => assertSameResultBits(ctx.victim.stateDict(), WANT_STATE, 're-entrant stateDict'),
  // A new model whose weights grow the wasm memory (detaching the heap views taken before).
  grow: () => {
    const before = hs.memory().wasmBytes;
    const big = hs.createTransformer({ vocabSize: 2048, maxLen: 4, dModel: 256, seed: 1 });
    big.forward([1, 2]);
    big.dispose();
    return hs.memory().wasmBytes >= before;
  },
};

const TRICKS = ['getters', 'changing-getters', 'proxy-object', 'proxy-shape', 'nested-proxy-rows', 'lying-length',
  'lying-small', 'proxy-typed-array', 'detached', 'throwing-getter', 'revoked', 'revoked-shape', 'symbol-shape',
  'valueOf-shape', 'toPrimitive-element', 'toString-element', 'nan-size', 'fractional-size', 'size-2^53',
  'negative-zero-size', 'huge-shape', 'shape-lies', 'huge-sparse', 'sparse', 'shared-buffer'];

// Where the hostile tensor goes. `base` is what it stands for; `run` makes the call; `want` the
// result of a call that read `base` (for loads: the stateDict() after it).
const GATES = { data: new Float32Array(4).fill(1), shape: [2, 2] };   // gates of 1 change no bit
const SLOTS = {
  tokens: { base: { data: Int32Array.from(TOKENS.flat()), shape: [2, 5] }, argument: 'tokens',
    run: (m, v) => m.forward(v, { hooks: HOOKS }), want: () => WANT },
  headGates: { base: GATES, argument: 'options.headGates',
    run: (m, v) => m.forward(TOKENS, { hooks: HOOKS, headGates: v }), want: () => WANT },
  // The tensor inside an options object whose own getter also calls back.
  options: { base: GATES, argument: 'options.headGates',
    run: (m, v, ctx) => m.forward(TOKENS, { get hooks() { ctx.reads.hooks = (ctx.reads.hooks ?? 0) + 1; ctx.callback(ctx); return HOOKS; },
      headGates: v }),
    want: () => WANT },
  stateDict: { base: STATE2[HOSTILE_KEY], argument: `stateDict['${HOSTILE_KEY}']`,
    run: (m, v) => m.loadStateDict({ ...STATE2, [HOSTILE_KEY]: v }), want: () => WANT2_STATE, load: true },
};

function runOne(trick, slotName, callback) {
  const slot = SLOTS[slotName];
  const victim = freshVictim();
  const ctx = { victim, reads: {}, callback: CALLBACKS[callback], coerced: false };
  const heapBefore = hs.memory().heapInUse;
  const { value, expect } = hostileTensor(trick, ctx, slot.base);
  const what = `${trick} in ${slotName}, callback ${callback}`;
  const { value: result, error } = (() => {
    try {
      return { value: slot.run(victim, value, ctx) };
    } catch (e) {
      return { error: e };
    }
  })();
  if (error !== undefined) {
    assert.ok(error instanceof HeadscopeError, `${what}: ${error?.stack ?? error}`);
    if (error.code !== 'DISPOSED') {
      assert.ok(error.message.startsWith(slot.argument), `${what}: "${error.message}" does not name ${slot.argument}`);
    }
  }
  assert.equal(ctx.coerced, false, `${what}: a caller value was coerced`);
  for (const [k, n] of Object.entries(ctx.reads)) assert.equal(n, 1, `${what}: ${k} read ${n} times`);
  const disposedByCallback = callback === 'dispose' && Object.keys(ctx.reads).length > 0;
  if (disposedByCallback && expect === 'ok') {
    assert.equal(error?.code, 'DISPOSED', `${what}: a call whose model a getter disposed`);
  } else if (expect === 'ok') {
    assert.equal(error, undefined, `${what}: ${error?.message}`);
    if (slot.load) assertSameResultBits(victim.stateDict(), slot.want(), `${what}: loaded`);
    else assertSameResultBits(result, slot.want(), what);
  } else if (disposedByCallback) {
    // The caller's values are all read (and JS's checks made) before the model is checked again;
    // the core's checks come after: either error is the answer.
    assert.ok([expect, 'DISPOSED'].includes(error?.code), `${what}: ${error?.message}`);
  } else {
    assert.equal(error?.code, expect, `${what}: ${error?.message}`);
  }
  if (!victim.disposed) {
    // A refused load loaded nothing; the model still gives its numbers.
    if (slot.load && error !== undefined) assertSameResultBits(victim.stateDict(), WANT_STATE, `${what}: half-loaded`);
    if (!slot.load || error !== undefined) assertSameResultBits(victim.forward(TOKENS, { hooks: HOOKS }), WANT, `${what}: after`);
  } else {
    expectError(() => victim.forward(TOKENS), 'DISPOSED');
  }
  victim.dispose();
  witnessStillExact();
  assert.ok(hs.memory().heapInUse <= heapBefore, `${what}: heap grew from ${heapBefore} to ${hs.memory().heapInUse}`);
  assert.equal(hs.liveHandles(), liveAtStart, `${what}: live handles`);
}

test('hostile tensors in tokens, headGates, options and state_dict entries, with re-entrant getters: ' +
  'a clear error or the first read\'s numbers; read once; nothing half loaded; the heap unharmed', () => {
  runOne('getters', 'tokens', 'none');   // (the first call of all allocates a few bytes, once)
  const heapAtStart = hs.memory().heapInUse;
  let runs = 0;
  for (const trick of TRICKS) {
    for (const slot of Object.keys(SLOTS)) {
      for (const callback of Object.keys(CALLBACKS)) {
        runOne(trick, slot, callback);
        runs++;
      }
    }
  }
  assert.equal(runs, TRICKS.length * 4 * 6);
  assert.equal(hs.memory().heapInUse, heapAtStart, 'the heap returned to its level');
});

// ---- Token ids and sizes ----

// fn(an engine of its own, closed afterwards): for what would bloat or close the shared one.
async function withOtherEngine(fn) {
  const other = await init({ wasmBinary: await readFile(WASM) });
  try {
    return await fn(other);
  } finally {
    other.close();
  }
}

test('token ids: NaN, Infinity, 1.5, 2^53, -1, vocabSize, 2^31, objects: INVALID_ARGUMENT naming tokens; -0 is 0', () => {
  const m = freshVictim();
  for (const id of [NaN, Infinity, -Infinity, 1.5, 2 ** 53, -(2 ** 53), 2 ** 31, -(2 ** 31) - 1, '1', true, null, 1n]) {
    const e = expectError(() => m.forward([1, id]), 'INVALID_ARGUMENT', 'tokens[1]: expected an integer token id');
    assert.equal(e.argument, undefined);
  }
  for (const id of [-1, 11, 2 ** 31 - 1, -(2 ** 31)]) {
    const e = expectError(() => m.forward([[1, id]]), 'INVALID_ARGUMENT', `tokens: token [0, 1] is ${id}`, '[0, 10]');
    assert.equal(e.argument, 'tokens');
    expectError(() => m.forward({ data: Int32Array.of(1, id), shape: [1, 2] }), 'INVALID_ARGUMENT', `token [0, 1] is ${id}`);
  }
  let coerced = false;
  expectError(() => m.forward([1, { valueOf: () => { coerced = true; return 1; } }]), 'INVALID_ARGUMENT', 'tokens[1]');
  assert.equal(coerced, false);
  assertSameResultBits(m.forward([[-0, 1]]), m.forward([[0, 1]]));
  expectError(() => m.forward({ data: Int32Array.of(1), shape: [-0] }), 'SHAPE_MISMATCH', 'tokens: data has 1 elements');
  assertSameResultBits(m.forward(TOKENS, { hooks: HOOKS }), WANT);
  m.dispose();
});

test('config sizes: NaN, Infinity, 1.5, 2^53, -1, 0, objects with valueOf / toString / toPrimitive: ' +
  'INVALID_ARGUMENT naming them, never coerced', () => {
  const live = hs.liveHandles();
  let coerced = false;
  const liar = (v) => ({ valueOf: () => { coerced = true; return v; }, toString: () => { coerced = true; return String(v); },
    [Symbol.toPrimitive]: () => { coerced = true; witness.forward(WITNESS_TOKENS); return v; } });
  for (const key of ['vocabSize', 'maxLen', 'dModel', 'nLayers', 'nHeads']) {
    for (const v of [NaN, Infinity, -Infinity, 1.5, 2 ** 53, -1, 0, -0, 2 ** 24 + 1]) {
      const e = expectError(() => hs.createTransformer({ ...CONFIG, nHeads: 1, [key]: v }), 'INVALID_ARGUMENT', `config.${key}: expected`);
      assert.equal(e.argument, `config.${key}`, `${key} = ${v}`);
    }
    expectError(() => hs.createTransformer({ ...CONFIG, [key]: liar(4) }), 'INVALID_ARGUMENT', `config.${key}: expected a number`);
    expectError(() => hs.createTransformer({ ...CONFIG, [key]: '4' }), 'INVALID_ARGUMENT', `config.${key}: expected a number`);
  }
  for (const v of [NaN, Infinity, 1.5, -1, 2 ** 53]) {
    expectError(() => hs.createTransformer({ ...CONFIG, dMlp: v }), 'INVALID_ARGUMENT', 'config.dMlp: expected 0 (no MLP)');
    expectError(() => hs.createTransformer({ ...CONFIG, seed: v }), 'INVALID_ARGUMENT', 'config.seed: expected an integer in [0, 2^53 - 1]');
  }
  for (const v of [NaN, 0, -0, -1e-5, Infinity]) {
    expectError(() => hs.createTransformer({ ...CONFIG, lnEps: v }), 'INVALID_ARGUMENT', 'config.lnEps: expected a finite number > 0');
  }
  for (const [key, v] of [['norm', liar('pre')], ['positions', { toString: () => 'learned' }], ['act', 'GELU'], ['causal', 1],
    ['bias', liar(true)], ['causal', 'true'], ['lnEps', liar(1e-5)], ['seed', liar(1)]]) {
    expectError(() => hs.createTransformer({ ...CONFIG, [key]: v }), 'INVALID_ARGUMENT', `config.${key}: expected`);
  }
  assert.equal(coerced, false, 'a config value was coerced');
  // -0 as dMlp is 0 (no MLP); as seed it is seed 0.
  const a = hs.createTransformer({ ...CONFIG, dMlp: -0, seed: -0 });
  const b = hs.createTransformer({ ...CONFIG, dMlp: 0, seed: 0 });
  assert.ok(!Object.keys(a.parameterShapes()).some((k) => k.includes('mlp')));
  assertSameResultBits(a.stateDict(), b.stateDict());
  a.dispose();
  b.dispose();
  // The largest seed is a seed.
  hs.createTransformer({ ...CONFIG, seed: 2 ** 53 - 1 }).dispose();
  assert.equal(hs.liveHandles(), live);
  witnessStillExact();
});

test('a config whose weights cannot fit the 32-bit WebAssembly memory is RESOURCE_EXHAUSTED naming config', () => withOtherEngine(async (other) => {
  for (const config of [{ vocabSize: 2 ** 24, maxLen: 2 ** 24, dModel: 2 ** 24 },
    { vocabSize: 65537, maxLen: 1, dModel: 65536, positions: 'none', norm: 'none', bias: false }]) {
    const { value, error } = await settle(() => other.createTransformer(config));
    if (value !== undefined) {
      const fwd = await settle(() => value.forward([1]));
      value.dispose();
      assert.fail(`created; forward then gave ${fwd.error?.code}: ${fwd.error?.message}`);
    }
    expectError(() => { throw error; }, 'RESOURCE_EXHAUSTED');
    assert.match(error.argument ?? error.message, /^config/);
  }
}));

test('a config whose seeded weights exhaust memory: RESOURCE_EXHAUSTED naming config, nothing left behind', () => withOtherEngine((other) => {
  const heap = other.memory().heapInUse;
  // 2^20 x 768 floats (3 GiB) for the embedding alone: refused at its first allocation.
  const e = expectError(() => other.createTransformer({ vocabSize: 2 ** 20, maxLen: 1, dModel: 768, positions: 'none' }),
    'RESOURCE_EXHAUSTED');
  assert.equal(other.liveHandles(), 0);
  assert.equal(other.memory().heapInUse, heap);
  assert.match(e.argument, /^config/, e.message);
  assert.match(e.message, /^config/);
}));

// ---- createTransformer(config) ----

test('config getters that throw, re-enter, dispose or close the engine; Proxies; prototype keys', async () => {
  const live = hs.liveHandles();
  expectError(() => hs.createTransformer({ ...CONFIG, get dModel() { throw new Error('boom'); } }), 'INVALID_ARGUMENT',
    'config: reading it threw (Error: boom)');
  // A getter that runs a whole model's life and a forward on the witness: read once, created.
  let reads = 0;
  const config = { ...CONFIG };
  Object.defineProperty(config, 'vocabSize', { enumerable: true, get() {
    reads++;
    const inner = freshVictim();
    assertSameResultBits(inner.forward(TOKENS, { hooks: HOOKS }), WANT);
    inner.dispose();
    CALLBACKS.grow();
    witnessStillExact();
    return CONFIG.vocabSize;
  } });
  const m = hs.createTransformer(config);
  assert.equal(reads, 1);
  m.loadStateDict(STATE);
  assertSameResultBits(m.forward(TOKENS, { hooks: HOOKS }), WANT);
  m.dispose();
  // A Proxy config: each key read once.
  const gets = {};
  const proxied = new Proxy({ ...CONFIG }, { get(t, k) { gets[k] = (gets[k] ?? 0) + 1; return t[k]; } });
  hs.createTransformer(proxied).dispose();
  for (const [k, n] of Object.entries(gets)) assert.equal(n, 1, `config.${String(k)} read ${n} times`);
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  expectError(() => hs.createTransformer(proxy), 'INVALID_ARGUMENT', 'config');
  for (const name of ['constructor', 'toString', 'hasOwnProperty', 'valueOf', '__defineGetter__']) {
    expectError(() => hs.createTransformer({ ...CONFIG, [name]: 1 }), 'INVALID_ARGUMENT', `config.${name}: unknown option`);
  }
  expectError(() => hs.createTransformer(JSON.parse('{"vocabSize":2,"maxLen":2,"dModel":2,"__proto__":{"x":1}}')),
    'INVALID_ARGUMENT', 'config.__proto__: unknown option');
  // An inherited size is no size: config keys are own keys.
  expectError(() => hs.createTransformer(Object.create({ ...CONFIG })), 'INVALID_ARGUMENT', 'config.vocabSize: expected a number');
  for (const bad of [null, undefined, 7, 'config', [CONFIG], () => CONFIG]) {
    expectError(() => hs.createTransformer(bad), 'INVALID_ARGUMENT', 'config');
  }
  assert.equal(hs.liveHandles(), live);
  // A getter that closes the engine the model is being created on: DISPOSED, nothing created.
  const other = await init({ wasmBinary: await readFile(WASM) });
  expectError(() => other.createTransformer({ ...CONFIG, get maxLen() { other.close(); return 7; } }), 'DISPOSED',
    'engine was closed');
  assert.equal(other.liveHandles(), 0);
  witnessStillExact();
});

// ---- loadStateDict / stateDict ----

test('loadStateDict: prototype keys, symbol keys, late throwing getters, strict getters, C++ refusals: ' +
  'nothing loaded', () => {
  const m = freshVictim();
  const unchanged = (what) => {
    assertSameResultBits(m.stateDict(), WANT_STATE, `${what}: half-loaded`);
    assertSameResultBits(m.forward(TOKENS, { hooks: HOOKS }), WANT, `${what}: numbers`);
  };
  for (const key of ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'prototype']) {
    const sd = JSON.parse(JSON.stringify({ 'tok_embed.weight': 0 }).replace('tok_embed.weight', key));
    sd[key] = [1];
    for (const strict of [true, false]) {
      const e = expectError(() => m.loadStateDict({ ...STATE2, ...sd }, { strict }), 'UNKNOWN_PARAMETER', `stateDict['${key}']`);
      assert.equal(e.argument, 'stateDict');
      unchanged(key);
    }
  }
  expectError(() => m.loadStateDict(new Map([...Object.entries(STATE2), ['__proto__', [1]]])), 'UNKNOWN_PARAMETER',
    "stateDict['__proto__']");
  expectError(() => m.loadStateDict(new Map([[Symbol('k'), [1]], ...Object.entries(STATE2)])), 'UNKNOWN_PARAMETER', 'is not a string');
  unchanged('prototype keys');
  // Inherited entries are not entries.
  expectError(() => m.loadStateDict(Object.create(STATE2)), 'MISSING_PARAMETER', 'tok_embed.weight');
  unchanged('inherited');
  // A getter of the last entry throws: nothing of the others is loaded.
  const late = { ...STATE2 };
  Object.defineProperty(late, 'unembed.bias', { enumerable: true, get() { throw new Error('late'); } });
  expectError(() => m.loadStateDict(late), 'INVALID_ARGUMENT', 'stateDict: reading it threw (Error: late)');
  unchanged('late getter');
  // An entry the core refuses (its shape) after entries it accepted: nothing loaded.
  expectError(() => m.loadStateDict({ ...STATE2, 'unembed.bias': { data: new Float32Array(12), shape: [12] } }),
    'SHAPE_MISMATCH', "stateDict['unembed.bias']: expected shape [11], got [12]");
  unchanged('core refusal');
  expectError(() => m.loadStateDict({ ...STATE2, 'unembed.bias': { data: new Float32Array(11), shape: [11, 1] } }),
    'SHAPE_MISMATCH', "stateDict['unembed.bias']");
  unchanged('shape that lies');
  // Missing keys (strict): nothing loaded.
  const partial = { ...STATE2 };
  delete partial['blocks.1.ln2.bias'];
  expectError(() => m.loadStateDict(partial), 'MISSING_PARAMETER', 'blocks.1.ln2.bias', 'pass { strict: false }');
  unchanged('missing');
  // options read once, strict a boolean; options getters that throw.
  let reads = 0;
  m.loadStateDict(STATE, { get strict() { reads++; return reads === 1; } });
  assert.equal(reads, 1);
  expectError(() => m.loadStateDict(STATE2, { strict: 'yes' }), 'INVALID_ARGUMENT', 'options.strict');
  expectError(() => m.loadStateDict(STATE2, { get strict() { throw new Error('x'); } }), 'INVALID_ARGUMENT', 'options: reading it threw');
  expectError(() => m.loadStateDict(STATE2, { constructor: true }), 'INVALID_ARGUMENT', 'options.constructor: unknown option');
  for (const bad of [null, 7, 'sd', [STATE2]]) expectError(() => m.loadStateDict(bad), 'INVALID_ARGUMENT', 'stateDict');
  unchanged('options');
  // A Proxy state_dict: each entry read once, loaded whole.
  const gets = {};
  m.loadStateDict(new Proxy({ ...STATE2 }, { get(t, k) { gets[k] = (gets[k] ?? 0) + 1; return t[k]; } }));
  for (const [k, n] of Object.entries(gets)) assert.equal(n, 1, `${String(k)} read ${n} times`);
  assertSameResultBits(m.stateDict(), WANT2_STATE, 'the Proxy\'s entries');
  m.dispose();
  witnessStillExact();
});

test('loadStateDict getters that dispose the model, close its engine or re-enter the load', async () => {
  const m = freshVictim();
  expectError(() => m.loadStateDict({ ...STATE2, get 'unembed.bias'() { m.dispose(); return STATE2['unembed.bias']; } }),
    'DISPOSED', 'Transformer: this object was disposed');
  for (const call of [() => m.stateDict(), () => m.forward(TOKENS), () => m.loadStateDict(STATE)]) {
    expectError(call, 'DISPOSED', 'Transformer: this object was disposed');
  }
  // An inner complete load from a getter; the outer load is then all of the outer's entries.
  const n = freshVictim();
  let inner = false;
  n.loadStateDict({ ...STATE2, get 'unembed.bias'() { n.loadStateDict(STATE); inner = true; return STATE2['unembed.bias']; } });
  assert.ok(inner);
  assertSameResultBits(n.stateDict(), WANT2_STATE, 'outer load');
  // An inner load that a later getter's throw refuses leaves the inner one's state.
  const sneaky = { ...STATE2 };
  Object.defineProperty(sneaky, 'unembed.bias', { enumerable: true, get() { n.loadStateDict(STATE); throw new Error('late'); } });
  expectError(() => n.loadStateDict(sneaky), 'INVALID_ARGUMENT', 'stateDict: reading it threw (Error: late)');
  assertSameResultBits(n.stateDict(), WANT_STATE, 'the inner load only');
  n.dispose();
  // Closing the engine from a getter: DISPOSED naming the closed engine; stateDict() too.
  const other = await init({ wasmBinary: await readFile(WASM) });
  const o = other.createTransformer(CONFIG);
  o.loadStateDict(STATE);
  expectError(() => o.loadStateDict({ ...STATE2, get 'unembed.bias'() { other.close(); return STATE2['unembed.bias']; } }),
    'DISPOSED', 'engine was closed');
  expectError(() => o.stateDict(), 'DISPOSED', 'engine was closed');
  assert.equal(o.disposed, true);
  assert.equal(other.liveHandles(), 0);
  witnessStillExact();
});

test('methods on a wrong this, Proxies of the model, revoked Proxies: INVALID_ARGUMENT naming the method', () => {
  const m = freshVictim();
  for (const name of ['forward', 'loadStateDict', 'stateDict', 'dispose', 'parameterShapes', 'hookNames',
    ...(typeof m.generate === 'function' ? ['generate'] : [])]) {
    const f = m[name];
    expectError(() => f(TOKENS), 'INVALID_ARGUMENT', `Transformer.${name}: called on undefined`);
    expectError(() => f.call({}, TOKENS), 'INVALID_ARGUMENT', `Transformer.${name}`);
    expectError(() => f.call(new Proxy(m, {}), TOKENS), 'INVALID_ARGUMENT', `Transformer.${name}`);
    expectError(() => f.call(witness._hs ?? hs, TOKENS), 'INVALID_ARGUMENT', `Transformer.${name}`);
  }
  const { createTransformer } = hs;
  expectError(() => createTransformer(CONFIG), 'INVALID_ARGUMENT', 'Headscope.createTransformer: called on undefined');
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  for (const [call, name] of [[() => m.forward(proxy), 'tokens'], [() => m.forward(TOKENS, proxy), 'options'],
    [() => m.forward(TOKENS, { hooks: proxy }), 'options.hooks'], [() => m.forward(TOKENS, { headGates: proxy }), 'options.headGates'],
    [() => m.loadStateDict(proxy), 'stateDict'], [() => m.loadStateDict(STATE, proxy), 'options']]) {
    const e = expectError(call, 'INVALID_ARGUMENT');
    assert.ok(e.message.startsWith(name), e.message);
  }
  assertSameResultBits(m.forward(TOKENS, { hooks: HOOKS }), WANT);
  m.dispose();
});

// ---- forward's options: hooks and headGates ----

test('options.hooks with getters, Proxies, non-strings, repeats: INVALID_ARGUMENT naming them, or the hooks asked for', () => {
  const m = freshVictim();
  const withHooks = (hooks) => m.forward(TOKENS, { hooks });
  // An element getter that re-enters (a whole forward) answers with its first value.
  const hooks = [...HOOKS];
  let reads = 0;
  Object.defineProperty(hooks, 1, { enumerable: true, get() {
    reads++;
    assertSameResultBits(m.forward(TOKENS, { hooks: HOOKS }), WANT);
    return reads === 1 ? HOOKS[1] : 'hook_embed';
  } });
  assertSameResultBits(withHooks(hooks), WANT);
  assert.equal(reads, 1);
  const throwing = [...HOOKS];
  Object.defineProperty(throwing, 0, { get() { throw new Error('no hook'); } });
  expectError(() => withHooks(throwing), 'INVALID_ARGUMENT', 'options.hooks: reading it threw (Error: no hook)');
  let coerced = false;
  for (const [bad, fragment] of [[[1], 'options.hooks[0]: expected a hook name'],
    [['hook_embed', { toString: () => { coerced = true; return 'logits'; } }], 'options.hooks[1]: expected a hook name'],
    [['hook_embed', null], 'options.hooks[1]'], [[Symbol('logits')], 'options.hooks[0]'],
    [['hook_embed\nlogits'], 'options.hooks[0]'], [['logits', 'logits'], "options.hooks[1]: 'logits' is listed twice"],
    [['blocks.2.hook_resid_pre'], "options.hooks[0]: unknown hook 'blocks.2.hook_resid_pre'"],
    [['__proto__'], "options.hooks[0]: unknown hook '__proto__'"], ['logits', 'options.hooks: expected an array'],
    [{ 0: 'logits', length: 1 }, 'options.hooks: expected an array'], [new Set(['logits']), 'options.hooks: expected an array']]) {
    expectError(() => withHooks(bad), 'INVALID_ARGUMENT', fragment);
  }
  const sparse = ['logits'];
  sparse[2] = 'hook_embed';
  expectError(() => withHooks(sparse), 'INVALID_ARGUMENT', 'options.hooks[1]');
  assert.equal(coerced, false);
  // An element getter that disposes the model: DISPOSED.
  const disposing = [HOOKS[0]];
  Object.defineProperty(disposing, 1, { enumerable: true, get() { m.dispose(); return HOOKS[1]; } });
  expectError(() => withHooks(disposing), 'DISPOSED');
  witnessStillExact();
});

test('options.hooks: an empty name is refused, never a result read past the hooks computed', () => {
  const m = freshVictim();
  try {
    for (const [hooks, i] of [[[''], 0], [['hook_embed', ''], 1], [['', 'hook_embed'], 0], [['logits', 'hook_embed', ''], 2]]) {
      expectError(() => m.forward(TOKENS, { hooks }), 'INVALID_ARGUMENT', `options.hooks[${i}]: expected a hook name, got string ""`);
    }
    assertSameResultBits(m.forward(TOKENS, { hooks: HOOKS }), WANT);
  } finally {
    m.dispose();
  }
});

test('options.hooks is read once: a Proxy\'s length and elements each read once', () => {
  const m = freshVictim();
  try {
    const reads = {};
    const hooks = new Proxy([...HOOKS], { get(t, k) { reads[String(k)] = (reads[String(k)] ?? 0) + 1; return t[k]; } });
    assertSameResultBits(m.forward(TOKENS, { hooks }), WANT);
    for (const [k, n] of Object.entries(reads)) assert.equal(n, 1, `options.hooks ${k} read ${n} times`);
  } finally {
    m.dispose();
  }
});

// Run in a child process: the calling thread's failure is the process running out of heap (or
// never returning), which would end the test runner itself.
function inChild(script) {
  const r = spawnSync(process.execPath, ['--max-old-space-size=256', '--input-type=module', '-e',
    `import { init } from ${JSON.stringify(INDEX_URL)};
     const hs = await init();
     const m = hs.createTransformer(${JSON.stringify(CONFIG)});
     try { ${script}; console.log('no error'); } catch (e) { console.log(e.name, e.code, e.message.slice(0, 100)); }`],
  { encoding: 'utf8', timeout: 30_000 });
  return { out: r.stdout.trim(), status: r.status, signal: r.signal };
}

test('options.hooks of a huge length (sparse, or a Proxy whose length grows): INVALID_ARGUMENT, no heap exhaustion', () => {
  for (const script of ['const a = []; a.length = 2 ** 32 - 1; m.forward([1], { hooks: a })',
    'let n = 0; m.forward([1], { hooks: new Proxy([], { get: (t, k) => (k === "length" ? (n += 1e6) : "hook_embed") }) })']) {
    const r = inChild(script);
    assert.match(r.out, /^HeadscopeError INVALID_ARGUMENT options\.hooks/, `${script}: ${JSON.stringify(r)}`);
  }
});

test('options.headGates of wrong shapes and kinds: errors naming options.headGates; NaN gates propagate', () => {
  const m = freshVictim();
  for (const [gates, code, fragment] of [[[1, 1, 1, 1], 'SHAPE_MISMATCH', 'expected (nLayers, nHeads) = [2, 2]'],
    [[[1, 1]], 'SHAPE_MISMATCH', 'got [1, 2]'], [[[1, 1, 1], [1, 1, 1]], 'SHAPE_MISMATCH', 'got [2, 3]'],
    [[[[1, 1], [1, 1]]], 'SHAPE_MISMATCH', 'options.headGates'], [[[1, 1], [1]], 'SHAPE_MISMATCH', 'options.headGates[1]'],
    [[], 'SHAPE_MISMATCH', 'options.headGates'], [{ data: new Float32Array(4), shape: [4] }, 'SHAPE_MISMATCH', 'got [4]'],
    [{ data: new Float32Array(4), shape: [2, 3] }, 'SHAPE_MISMATCH', 'data has 4 elements'],
    [{ data: new Float64Array(4), shape: [2, 2] }, 'INVALID_ARGUMENT', 'options.headGates.data'],
    [{ data: new Uint8Array(4), shape: [2, 2] }, 'INVALID_ARGUMENT', 'options.headGates.data'],
    [new Float32Array(4), 'INVALID_ARGUMENT', 'options.headGates'], ['1,1,1,1', 'INVALID_ARGUMENT', 'options.headGates'],
    [[[1, '1'], [1, 1]], 'INVALID_ARGUMENT', 'options.headGates[0][1]'], [[[1, true], [1, 1]], 'INVALID_ARGUMENT', 'options.headGates[0][1]']]) {
    const e = expectError(() => m.forward(TOKENS, { headGates: gates }), code, fragment);
    assert.ok(e.message.startsWith('options.headGates'), e.message);
    if (code === 'SHAPE_MISMATCH' && e.argument !== undefined) assert.equal(e.argument, 'options.headGates');
  }
  const nan = m.forward(TOKENS, { headGates: [[NaN, 1], [1, 1]] });
  assert.ok(nan.logits.data.every(Number.isNaN), 'a NaN gate makes every logit NaN, as in PyTorch');
  const inf = m.forward(TOKENS, { headGates: [[Infinity, 1], [1, 1]] });
  assert.equal(inf.logits.shape.length, 3);
  const zero = m.forward(TOKENS, { headGates: [[-0, 1], [1, 1]] });
  assertSameResultBits(zero.logits, m.forward(TOKENS, { headGates: [[0, 1], [1, 1]] }).logits, '-0 gate as 0');
  assertSameResultBits(m.forward(TOKENS, { hooks: HOOKS }), WANT);
  m.dispose();
  witnessStillExact();
});

test('forward options: unknown names (own keys only), getters read once, a getter that disposes: DISPOSED', () => {
  const m = freshVictim();
  for (const name of ['constructor', 'toString', 'hook', 'out', 'needWeights']) {
    expectError(() => m.forward(TOKENS, { [name]: 1 }), 'INVALID_ARGUMENT', `options.${name}: unknown option`);
  }
  expectError(() => m.forward(TOKENS, JSON.parse('{"__proto__": 1}')), 'INVALID_ARGUMENT', 'options.__proto__: unknown option');
  for (const bad of [null, 7, 'hooks', [HOOKS]]) expectError(() => m.forward(TOKENS, bad), 'INVALID_ARGUMENT', 'options');
  let reads = 0;
  assertSameResultBits(m.forward(TOKENS, { get hooks() { reads++; return reads === 1 ? HOOKS : 'not hooks'; } }), WANT);
  assert.equal(reads, 1);
  // Inherited options are not options.
  assert.deepEqual(Object.keys(m.forward(TOKENS, Object.create({ hooks: HOOKS }))), ['logits']);
  expectError(() => m.forward(TOKENS, { get headGates() { m.dispose(); return null; } }), 'DISPOSED');
  witnessStillExact();
});

// ---- Through initWorker(): the caller's values are read once, in the calling thread, into the
// structured clone that crosses; the worker refuses what the calling thread refuses. ----

test('through the worker: getters that throw, dispose, re-enter or end the worker; values that cannot ' +
  'cross; nothing half loaded; the worker unharmed', async () => {
  const remote = await initWorker();
  try {
    const r = await remote.createTransformer(CONFIG);
    await r.loadStateDict(STATE);
    const unchanged = async (what) => {
      assertSameResultBits(await r.stateDict(), WANT_STATE, `${what}: stateDict`);
      assertSameResultBits(await r.forward(TOKENS, { hooks: HOOKS }), WANT, `${what}: forward`);
      assert.equal(await remote.liveHandles(), 1, `${what}: live handles`);
    };
    // Getters that throw: INVALID_ARGUMENT naming the argument, in the calling thread's words.
    const local = freshVictim();
    const throwing = (extra = {}) => Object.defineProperty({ ...extra }, 'x', { enumerable: true, get() { throw new Error('boom'); } });
    for (const [name, call] of [
      ['config', (h) => h.createTransformer({ ...CONFIG, get maxLen() { throw new Error('boom'); } })],
      ['tokens', (h, m) => m.forward({ get data() { throw new Error('boom'); }, shape: [1] })],
      ['options', (h, m) => m.forward(TOKENS, { get hooks() { throw new Error('boom'); } })],
      ['stateDict', (h, m) => m.loadStateDict(throwing(STATE2))],
      ['options', (h, m) => m.loadStateDict(STATE2, { get strict() { throw new Error('boom'); } })],
    ]) {
      const viaWorker = await rejectsWith(() => call(remote, r), 'INVALID_ARGUMENT', `${name}: reading it threw (Error: boom)`);
      const inThread = await rejectsWith(() => call(hs, local), 'INVALID_ARGUMENT');
      assert.equal(viaWorker.message, inThread.message);
      await unchanged(`throwing ${name}`);
    }
    local.dispose();
    // Values structured clone cannot carry: INVALID_ARGUMENT naming the argument, nothing sent.
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const detached = new Int32Array(2);
    structuredClone(detached.buffer, { transfer: [detached.buffer] });
    const detachedGates = new Float32Array(4);
    structuredClone(detachedGates.buffer, { transfer: [detachedGates.buffer] });
    for (const [name, call] of [
      ['config', () => remote.createTransformer(new Proxy({ ...CONFIG }, {}))],
      ['config', () => remote.createTransformer({ ...CONFIG, seed: () => 1 })],
      ['tokens', () => r.forward(new Proxy(TOKENS, {}))],
      ['tokens', () => r.forward(proxy)],
      ['tokens', () => r.forward({ data: detached, shape: [2] })],
      ['tokens', () => r.forward([1, Symbol('id')])],
      ['options', () => r.forward(TOKENS, Symbol.iterator)],
      ['options', () => r.forward(TOKENS, { hooks: new Proxy(HOOKS, {}) })],
      ['options', () => r.forward(TOKENS, { headGates: { data: detachedGates, shape: [2, 2] } })],
      ['options', () => r.forward(TOKENS, { hooks: HOOKS, onHook: () => {} })],
      ['stateDict', () => r.loadStateDict(new Proxy({ ...STATE2 }, {}))],
      ['stateDict', () => r.loadStateDict({ ...STATE2, [HOSTILE_KEY]: { data: detachedGates, shape: [8, 8] } })],
    ]) {
      const e = await rejectsWith(call, 'INVALID_ARGUMENT', `${name}: cannot be sent to the worker`);
      assert.ok(e.cause !== undefined);
      await unchanged(`uncloneable ${name}`);
    }
    // Each caller value read once (into the clone); a getter that changes its answer is read once.
    let reads = 0;
    const changing = { get data() { reads++; return reads === 1 ? Int32Array.from(TOKENS.flat()) : new Int32Array(4096); }, shape: [2, 5] };
    assertSameResultBits(await r.forward(changing, { hooks: HOOKS }), WANT, 'changing getter');
    assert.equal(reads, 1);
    // A typed array with a lying own length crosses as what it is.
    const lying = new Int32Array(4096);
    Object.defineProperty(lying, 'length', { value: 10 });
    await rejectsWith(() => r.forward({ data: lying, shape: [2, 5] }), 'SHAPE_MISMATCH', 'tokens: data has 4096 elements');
    const liar = Int32Array.from(TOKENS.flat());
    Object.defineProperty(liar, 'length', { value: 4096 });
    assertSameResultBits(await r.forward({ data: liar, shape: [2, 5] }, { hooks: HOOKS }), WANT, 'lying-small');
    // A growable SharedArrayBuffer view: shared with the worker, read at its true length.
    const sab = new SharedArrayBuffer(40, { maxByteLength: 1 << 12 });
    new Int32Array(sab).set(TOKENS.flat());
    assertSameResultBits(await r.forward({ data: new Int32Array(sab), shape: [2, 5] }, { hooks: HOOKS }), WANT, 'shared');
    // A getter that re-enters with a whole remote call: both get their own numbers.
    let inner = null;
    const reentrant = { get data() { inner = r.forward(TOKENS, { hooks: HOOKS }); return Int32Array.from(TOKENS.flat()); }, shape: [2, 5] };
    assertSameResultBits(await r.forward(reentrant, { hooks: HOOKS }), WANT, 'outer');
    assertSameResultBits(await inner, WANT, 'inner');
    // A state_dict getter that loads another state_dict first: the outer load is what stays.
    const outer = { ...STATE2, get [HOSTILE_KEY]() { r.loadStateDict(STATE); return STATE2[HOSTILE_KEY]; } };
    await r.loadStateDict(outer);
    assertSameResultBits(await r.stateDict(), WANT2_STATE, 'outer load');
    await r.loadStateDict(STATE);
    // Refused loads through the worker load nothing.
    for (const [sd, code] of [[{ ...STATE2, 'unembed.bias': [1, 2] }, 'SHAPE_MISMATCH'],
      [{ ...STATE2, constructor: [1] }, 'UNKNOWN_PARAMETER'], [JSON.parse('{"__proto__": [1]}'), 'UNKNOWN_PARAMETER'],
      [{ ...STATE2, [HOSTILE_KEY]: { data: STATE2[HOSTILE_KEY].data, shape: [4, 16] } }, 'SHAPE_MISMATCH']]) {
      await rejectsWith(() => r.loadStateDict(sd), code, 'stateDict');
      await unchanged(`refused load ${code}`);
    }
    // The worker guards itself against a huge sparse hooks array (index.js would walk it).
    const sparse = [];
    sparse.length = 2 ** 32 - 1;
    await rejectsWith(() => r.forward(TOKENS, { hooks: sparse }), 'INVALID_ARGUMENT', 'options.hooks: expected at most 30 hook names');
    await unchanged('huge sparse hooks');
    // A getter that disposes the model: DISPOSED (its dispose was sent first).
    const d = await remote.createTransformer(CONFIG);
    await rejectsWith(() => d.forward({ get data() { d.dispose(); return Int32Array.of(1); }, shape: [1] }), 'DISPOSED',
      'Transformer: this object was disposed');
    await rejectsWith(() => d.stateDict(), 'DISPOSED');
    await unchanged('disposed by a getter');
    // Ids of another kind and stale ids (the worker's one generic 'call' op): a method of the
    // other kind is not served, a disposed object's id is DISPOSED naming its class.
    const mha = await remote.createMultiheadAttention({ embedDim: 8, numHeads: 2 });
    await rejectsWith(() => remote._channel.request('call', [mha._id, 'hookNames'], [null, null]), 'INVALID_ARGUMENT',
      'headscope worker: string "hookNames" is not a method this object serves');
    await rejectsWith(() => remote._channel.request('call', [r._id, 'trace', TOKENS, TOKENS, TOKENS], [null, null, 'q', 'k', 'v']),
      'INVALID_ARGUMENT', 'headscope worker: string "trace" is not a method this object serves');
    await mha.dispose();
    await rejectsWith(() => remote._channel.request('call', [mha._id, 'forward', TOKENS, TOKENS, TOKENS], [null, null, 'q', 'k', 'v']),
      'DISPOSED', 'MultiheadAttention: this object was disposed');
    await unchanged('stale ids');
    // A getter that ends the worker: DISPOSED, and everything after.
    await rejectsWith(() => r.forward({ get data() { remote.terminate(); return Int32Array.of(1); }, shape: [1] }), 'DISPOSED', 'terminated');
    await rejectsWith(() => r.stateDict(), 'DISPOSED', 'terminated');
    assert.equal(r.disposed, true);
  } finally {
    await remote.terminate();
  }
  witnessStillExact();
});

// Issue 28, item 15, for the transformer: tokens and targets in views of resizable
// buffers, resized by another argument's getter after their own checks.
test('resizable buffers resized by another argument\'s getter: refused naming the argument, or the checked numbers', () => {
  const victim = freshVictim();
  try {
    victim.setOptimizer({ type: 'sgd', lr: 0 });  // a step that changes nothing: the weights stay comparable
    const tokens = { data: Int32Array.from(TOKENS.flat()), shape: [2, 5] };
    const targets = { data: Int32Array.from(TOKENS.flat().map((t) => (t + 1) % 11)), shape: [2, 5] };
    const gates = { data: new Float32Array(4).fill(1), shape: [2, 2] };
    const wantLoss = victim.backward(tokens, targets).loss;
    for (const action of ['shrink', 'grow']) {
      // (Head gates are snapshotted after every other argument: no caller code runs after them.)
      for (const [target, base] of [['tokens', tokens], ['targets', targets]]) {
        const buffer = new ArrayBuffer(base.data.byteLength, { maxByteLength: 1 << 16 });
        const view = new base.data.constructor(buffer);
        view.set(base.data);
        const resized = { data: view, shape: base.shape };
        const hit = () => buffer.resize(action === 'shrink' ? 4 : 1 << 16);
        // The attacker: read after the target in every entry point's order.
        const lateGates = { get data() { hit(); return gates.data; }, shape: gates.shape };
        const lateTargets = { get data() { hit(); return targets.data; }, shape: targets.shape };
        const calls = target === 'tokens'
          ? [() => victim.forward(resized, { headGates: lateGates }).logits, () => victim.trainStep(resized, lateTargets).loss]
          : [() => victim.backward(tokens, resized, { headGates: lateGates }).loss];
        for (const call of calls) {
          if (action === 'grow') {
            const r = call();
            if (typeof r === 'number') assert.equal(r, wantLoss, `${target} grown`);
            else assertSameResultBits({ logits: r }, { logits: victim.forward(tokens).logits }, `${target} grown`);
          } else {
            expectError(call, 'INVALID_ARGUMENT', `${target}: its buffer was resized or detached`);
          }
          buffer.resize(base.data.byteLength);
          view.set(base.data);
        }
      }
    }
    assertSameResultBits(victim.forward(TOKENS, { hooks: HOOKS }), WANT, 'the victim afterwards');
  } finally {
    victim.dispose();
  }
  witnessStillExact();
});
