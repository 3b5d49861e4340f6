// initWorker()'s createTransformer: the calling thread's Transformer, asynchronous, in a worker.
// The same config, shapes, hooks, numbers (bit for bit) and errors (code, message, argument);
// tensors transferred both ways; handles freed on dispose, when dropped, and with the worker;
// generate() and transformer case documents through the worker once the calling thread has them;
// generate in chunks (bit for bit, other requests served between them, cancelled by a signal or
// by a change of the weights, queued per model).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import v8 from 'node:v8';
import vm from 'node:vm';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { init, Tensor } from '../../web/lib/index.js';
import { initWorker } from '../../web/lib/worker-client.js';
import { assertSameResultBits } from './same-bits.js';
import { transferCheckingWorker } from './worker-shim.js';
import { errorFields, randomStateDict, rejectsWith, settle } from './transformer-helpers.js';

const hs = await init();
const remote = await initWorker();
after(async () => {
  local.dispose();
  assert.equal(hs.liveHandles(), 0, 'live handles left in the calling thread');
  assert.equal(await remote.liveHandles(), 0, 'live handles left in the worker');
  await remote.terminate();
});

const CONFIG = { vocabSize: 11, maxLen: 7, dModel: 8, nLayers: 2, nHeads: 2, dMlp: 12, seed: 4 };
const TOKENS = [[1, 2, 3, 4, 5], [10, 9, 8, 7, 6]];
const local = hs.createTransformer(CONFIG);
const STATE = randomStateDict(local.parameterShapes(), 1);
local.loadStateDict(STATE);
const HAS_GENERATE = typeof local.generate === 'function';

async function remoteModel(config = CONFIG, stateDict = STATE) {
  const m = await remote.createTransformer(config);
  if (stateDict !== null) await m.loadStateDict(stateDict);
  return m;
}

test('createTransformer: config, parameterShapes and hookNames as the calling thread has them', async () => {
  const m = await remote.createTransformer(CONFIG);
  try {
    assert.deepEqual(m.config, local.config);
    assert.ok(Object.isFrozen(m.config));
    assert.deepEqual(m.parameterShapes(), local.parameterShapes());
    assert.deepEqual(m.hookNames(), local.hookNames());
    // Copies: editing one changes nothing for the next caller.
    m.parameterShapes()['tok_embed.weight'].push(99);
    m.hookNames().pop();
    assert.deepEqual(m.parameterShapes(), local.parameterShapes());
    assert.deepEqual(m.hookNames(), local.hookNames());
    assert.equal(m.disposed, false);
    // Defaults filled in, as in the calling thread.
    const d = await remote.createTransformer({ vocabSize: 5, maxLen: 3, dModel: 4 });
    assert.deepEqual(d.config, { vocabSize: 5, maxLen: 3, dModel: 4, nLayers: 1, nHeads: 1, nKvHeads: null, attnWindow: 0, dMlp: 0, norm: 'pre',
      positions: 'learned', causal: true, act: 'gelu', bias: true, lnEps: 1e-5, tieEmbeddings: false,
      ropeLayout: 'half', ropeBase: 10000, ropeFraction: 1, attnSinks: false, seed: 0 });
    await d.dispose();
  } finally {
    await m.dispose();
  }
});

test('loadStateDict, stateDict and forward give the calling thread\'s bits; inputs stay the caller\'s', async () => {
  const m = await remoteModel();
  try {
    assert.equal(await m.loadStateDict(STATE), undefined);
    const sd = await m.stateDict();
    assertSameResultBits(sd, local.stateDict(), 'stateDict');
    assert.ok(Object.values(sd).every((t) => t instanceof Tensor));
    const hooks = local.hookNames();
    for (const [tokens, options] of [[TOKENS, undefined], [TOKENS, { hooks }], [TOKENS[1], { hooks: ['hook_embed'] }],
      [TOKENS, { hooks: ['logits', 'blocks.1.attn.hook_pattern'], headGates: [[0, 1], [0.5, 2]] }],
      [{ data: Int32Array.from(TOKENS.flat()), shape: [2, 5] }, { headGates: null, hooks: null }]]) {
      const want = local.forward(tokens, options);
      const got = await m.forward(tokens, options);
      assertSameResultBits(got, want, JSON.stringify(options));
      assert.ok(got.logits instanceof Tensor);
      assert.deepEqual(got.logits.toArray(), want.logits.toArray());
    }
    // The caller's typed arrays are copied, not transferred.
    const ids = Int32Array.from(TOKENS.flat());
    const entry = STATE['unembed.weight'].data;
    await m.forward({ data: ids, shape: [2, 5] });
    await m.loadStateDict({ 'unembed.weight': STATE['unembed.weight'] }, { strict: false });
    assert.equal(ids.length, 10);
    assert.deepEqual(Array.from(ids), TOKENS.flat());
    assert.equal(entry.length, STATE['unembed.weight'].shape[0] * STATE['unembed.weight'].shape[1]);
    // Results go back in: a stateDict() loads into another model (a Map too), logits are plain tensors.
    const other = await remote.createTransformer({ ...CONFIG, seed: 99 });
    await other.loadStateDict(new Map(Object.entries(sd)));
    assertSameResultBits(await other.forward(TOKENS), local.forward(TOKENS), 'reloaded');
    await other.dispose();
  } finally {
    await m.dispose();
  }
});

// Every kind of refusal: the worker's error has the calling thread's code, message and argument,
// and the model works afterwards.
const BAD_CALLS = [
  ['config not an object', (h) => h.createTransformer(null)],
  ['config.nHeads not dividing dModel', (h) => h.createTransformer({ ...CONFIG, nHeads: 3 })],
  ['config.vocabSize 1.5', (h) => h.createTransformer({ ...CONFIG, vocabSize: 1.5 })],
  ['config.maxLen NaN', (h) => h.createTransformer({ ...CONFIG, maxLen: NaN })],
  ['config.dModel Infinity', (h) => h.createTransformer({ ...CONFIG, dModel: Infinity })],
  ['config.nLayers 2**53', (h) => h.createTransformer({ ...CONFIG, nLayers: 2 ** 53 })],
  ['config.nLayers 257', (h) => h.createTransformer({ ...CONFIG, nLayers: 257 })],
  ['config.dMlp -1', (h) => h.createTransformer({ ...CONFIG, dMlp: -1 })],
  ['config.seed -1', (h) => h.createTransformer({ ...CONFIG, seed: -1 })],
  ['config.seed 2**53', (h) => h.createTransformer({ ...CONFIG, seed: 2 ** 53 })],
  ['config.lnEps 0', (h) => h.createTransformer({ ...CONFIG, lnEps: 0 })],
  ['config.norm Pre', (h) => h.createTransformer({ ...CONFIG, norm: 'Pre' })],
  ['config.causal 1', (h) => h.createTransformer({ ...CONFIG, causal: 1 })],
  ['config.vocabSize a string', (h) => h.createTransformer({ ...CONFIG, vocabSize: '11' })],
  ['config.__proto__', (h) => h.createTransformer(JSON.parse('{"vocabSize":2,"maxLen":2,"dModel":2,"__proto__":1}'))],
  ['config.constructor', (h) => h.createTransformer({ ...CONFIG, constructor: 1 })],
  ['tokens out of range', (h, m) => m.forward([[1, 2, 11]])],
  ['tokens negative', (h, m) => m.forward({ data: Int32Array.of(0, -1), shape: [2] })],
  ['tokens 1.5', (h, m) => m.forward([1, 1.5])],
  ['tokens NaN', (h, m) => m.forward([NaN])],
  ['tokens 2**53', (h, m) => m.forward([2 ** 53])],
  ['tokens longer than maxLen', (h, m) => m.forward([0, 1, 2, 3, 4, 5, 6, 7])],
  ['tokens empty', (h, m) => m.forward([])],
  ['tokens ragged', (h, m) => m.forward([[1, 2], [3]])],
  ['tokens 3-D', (h, m) => m.forward([[[1]]])],
  ['tokens Float32Array data', (h, m) => m.forward({ data: Float32Array.of(1), shape: [1] })],
  ['tokens shape that lies', (h, m) => m.forward({ data: Int32Array.of(1, 2, 3), shape: [2, 2] })],
  ['tokens shape 1.5', (h, m) => m.forward({ data: Int32Array.of(1, 2), shape: [1.5] })],
  ['tokens huge sparse', (h, m) => m.forward(new Array(2 ** 24 + 1))],
  ['options.hooks unknown', (h, m) => m.forward(TOKENS, { hooks: ['blocks.2.hook_resid_pre'] })],
  ['options.hooks twice', (h, m) => m.forward(TOKENS, { hooks: ['hook_embed', 'hook_embed'] })],
  ['options.hooks not an array', (h, m) => m.forward(TOKENS, { hooks: 'logits' })],
  ['options.hooks a number', (h, m) => m.forward(TOKENS, { hooks: [1] })],
  ['options.headGates wrong shape', (h, m) => m.forward(TOKENS, { headGates: [[1, 1, 1], [1, 1, 1]] })],
  ['options.headGates 1-D', (h, m) => m.forward(TOKENS, { headGates: [1, 1, 1, 1] })],
  ['options.headGates ragged', (h, m) => m.forward(TOKENS, { headGates: [[1, 1], [1]] })],
  ['options.headGates lying shape', (h, m) => m.forward(TOKENS, { headGates: { data: new Float32Array(4), shape: [2, 3] } })],
  ['options unknown', (h, m) => m.forward(TOKENS, { hook: [] })],
  ['options not an object', (h, m) => m.forward(TOKENS, 7)],
  ['options NaN', (h, m) => m.forward(TOKENS, NaN)],
  ['options -0', (h, m) => m.forward(TOKENS, -0)],
  ['stateDict unknown key', (h, m) => m.loadStateDict({ bogus: [1] }, { strict: false })],
  ['stateDict __proto__ key', (h, m) => m.loadStateDict(JSON.parse('{"__proto__":[1]}'))],
  ['stateDict wrong shape', (h, m) => m.loadStateDict({ 'tok_embed.weight': [[1]] })],
  ['stateDict shape that lies', (h, m) => m.loadStateDict({ 'unembed.bias': { data: new Float32Array(11), shape: [1, 11] } },
    { strict: false })],
  ['stateDict missing keys', (h, m) => m.loadStateDict({ 'unembed.bias': STATE['unembed.bias'] })],
  ['stateDict not an object', (h, m) => m.loadStateDict([1, 2])],
  ['loadStateDict options.strict 1', (h, m) => m.loadStateDict(STATE, { strict: 1 })],
  ['loadStateDict unknown option', (h, m) => m.loadStateDict(STATE, { strict: true, partial: true })],
];
if (HAS_GENERATE) {
  BAD_CALLS.push(
    ['generate options.maxNewTokens a string', (h, m) => m.generate([1], { maxNewTokens: '2' })],
    ['generate options.maxNewTokens past maxLen', (h, m) => m.generate([1, 2, 3], { maxNewTokens: 5 })],
    ['generate prompt out of range', (h, m) => m.generate([11])],
    ['generate unknown option', (h, m) => m.generate([1], { steps: 2 })],
    ['generate options.temperature NaN', (h, m) => m.generate([1], { temperature: NaN })],
  );
}

test('every refusal: the calling thread\'s code, message and argument; the model keeps working', async () => {
  const m = await remoteModel();
  try {
    const want = local.forward(TOKENS, { hooks: ['blocks.1.hook_resid_post'] });
    for (const [what, call] of BAD_CALLS) {
      const inThread = await settle(() => call(hs, local));
      assert.ok(inThread.error !== undefined, `${what}: the calling thread accepted it`);
      const viaWorker = await settle(() => call(remote, m));
      assert.ok(viaWorker.error !== undefined, `${what}: the worker accepted it`);
      assert.deepEqual(errorFields(viaWorker.error), errorFields(inThread.error), what);
      assertSameResultBits(await m.forward(TOKENS, { hooks: ['blocks.1.hook_resid_post'] }), want, `after ${what}`);
      assertSameResultBits(await m.stateDict(), local.stateDict(), `stateDict after ${what}`);
    }
    // The core's errors carry their argument across.
    const e = await rejectsWith(() => m.forward([[1, 2, 11]]), 'INVALID_ARGUMENT', 'tokens: token [0, 2] is 11');
    assert.equal(e.argument, 'tokens');
    assert.equal(e.name, 'HeadscopeError');
  } finally {
    await m.dispose();
  }
  assert.equal(await remote.liveHandles(), 0);
});

test('methods on a wrong this: INVALID_ARGUMENT in the calling thread\'s words', async () => {
  const m = await remoteModel(CONFIG, null);
  try {
    for (const name of ['forward', 'loadStateDict', 'stateDict', 'dispose', 'parameterShapes', 'hookNames',
      ...(HAS_GENERATE ? ['generate'] : [])]) {
      const f = m[name];
      for (const self of [undefined, {}, new Proxy(m, {})]) {
        const viaWorker = await settle(() => f.call(self, TOKENS));
        const inThread = await settle(() => local[name].call(self, TOKENS));
        assert.deepEqual(errorFields(viaWorker.error), errorFields(inThread.error), `${name} on ${self}`);
      }
    }
    // (The getter is RemoteTransformer's; the object's class is its engine's subclass of it.)
    let proto = Object.getPrototypeOf(m);
    while (!Object.hasOwn(proto, 'disposed')) proto = Object.getPrototypeOf(proto);
    const disposedGetter = Object.getOwnPropertyDescriptor(proto, 'disposed').get;
    await rejectsWith(() => disposedGetter.call({}), 'INVALID_ARGUMENT', 'Transformer.disposed');
    const { createTransformer } = remote;
    await rejectsWith(() => createTransformer(CONFIG), 'INVALID_ARGUMENT', 'Headscope.createTransformer: called on undefined');
    // A remote MultiheadAttention is not a Transformer.
    const mha = await remote.createMultiheadAttention({ embedDim: 4, numHeads: 1 });
    await rejectsWith(() => m.forward.call(mha, TOKENS), 'INVALID_ARGUMENT', 'Transformer.forward: called on');
    await rejectsWith(() => mha.forward.call(m, TOKENS), 'INVALID_ARGUMENT', 'MultiheadAttention.forward: called on');
    await mha.dispose();
  } finally {
    await m.dispose();
  }
});

test('dispose frees the model in the worker; later calls reject DISPOSED in the calling thread\'s words', async () => {
  const before = await remote.liveHandles();
  const m = await remoteModel();
  assert.equal(await remote.liveHandles(), before + 1);
  // Requests are served in order: a forward sent before dispose() completes, one after is refused.
  const pending = m.forward(TOKENS);
  const disposing = m.dispose();
  const late = m.forward(TOKENS);
  assert.equal(m.disposed, true);
  assertSameResultBits(await pending, local.forward(TOKENS));
  assert.equal(await disposing, undefined);
  const d = hs.createTransformer(CONFIG);
  d.dispose();
  const inThread = await settle(() => d.forward(TOKENS));
  assert.deepEqual(errorFields((await settle(() => late)).error), errorFields(inThread.error));
  for (const call of [() => m.forward(TOKENS), () => m.stateDict(), () => m.loadStateDict(STATE),
    ...(HAS_GENERATE ? [() => m.generate([1])] : [])]) {
    const e = await rejectsWith(call, 'DISPOSED', 'Transformer: this object was disposed');
    assert.equal(e.message, inThread.error.message);
  }
  await m.dispose();  // twice: a no-op
  assert.equal(await remote.liveHandles(), before);
  // The metadata stays readable, as in the calling thread.
  assert.deepEqual(m.hookNames(), local.hookNames());
});

test('a remote model dropped without dispose() is freed in the worker once collected', async () => {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  const before = await remote.liveHandles();
  await (async () => {
    const m = await remote.createTransformer(CONFIG);
    await m.forward(TOKENS);
  })();
  assert.equal(await remote.liveHandles(), before + 1);
  let live = before + 1;
  for (let i = 0; i < 50 && live > before; i++) {
    gc();
    await new Promise((resolve) => setTimeout(resolve, 10));
    live = await remote.liveHandles();
  }
  assert.equal(live, before, 'the collected model was disposed in the worker');
});

test('terminate(): every model counts as disposed, calls reject DISPOSED, dispose() never rejects', async () => {
  const w = await initWorker();
  const m = await w.createTransformer(CONFIG);
  await m.loadStateDict(STATE);
  const pending = Promise.allSettled([m.forward(TOKENS, { hooks: local.hookNames() }), m.stateDict()]);
  await w.terminate();
  assert.equal(m.disposed, true);
  for (const r of await pending) {
    assert.equal(r.status, 'rejected');
    assert.equal(r.reason.code, 'DISPOSED');
  }
  await rejectsWith(() => m.forward(TOKENS), 'DISPOSED', 'terminated');
  await rejectsWith(() => w.createTransformer(CONFIG), 'DISPOSED', 'terminated');
  assert.equal(await m.dispose(), undefined);
});

// worker.js through a browser-style `self` whose replies must transfer every typed array.
test('results are transferred, not copied: logits, every hook, stateDict entries, generated tokens', async () => {
  const w = await initWorker(transferCheckingWorker());
  try {
    const m = await w.createTransformer(CONFIG);
    await m.loadStateDict(STATE);
    assertSameResultBits(await m.forward(TOKENS, { hooks: local.hookNames() }),
      local.forward(TOKENS, { hooks: local.hookNames() }));
    assertSameResultBits(await m.stateDict(), local.stateDict());
    if (HAS_GENERATE) {
      assertSameResultBits(await m.generate(TOKENS, { maxNewTokens: 2, logits: true }),
        local.generate(TOKENS, { maxNewTokens: 2, logits: true }));
    }
    await rejectsWith(() => m.forward([99]), 'INVALID_ARGUMENT', 'tokens');
    await m.dispose();
  } finally {
    await w.terminate();
  }
});

test('generate() through the worker: the calling thread\'s tokens and logits',
  { skip: HAS_GENERATE ? false : 'the calling thread\'s Transformer has no generate() yet' }, async () => {
    const m = await remoteModel();
    try {
      for (const [prompt, options] of [[[1, 2], undefined], [TOKENS.map((r) => r.slice(0, 3)), { maxNewTokens: 4, logits: true }],
        [[3, 4, 5], { maxNewTokens: 3, temperature: 1.2, topK: 4, topP: 0.8, seed: 9, logits: true }],
        [{ data: Int32Array.of(1, 2), shape: [1, 2] }, { maxNewTokens: 5, headGates: [[1, 0], [0, 1]] }]]) {
        const want = local.generate(prompt, options);
        const got = await m.generate(prompt, options);
        assertSameResultBits(got, want, JSON.stringify(options));
        assert.ok(got.tokens.data instanceof Int32Array, 'token ids stay int32');
      }
    } finally {
      await m.dispose();
    }
  });

// ---- generate in chunks: the worker serves other requests between them, and can cancel ----

// A long generation's model: a context of thousands, so that generating takes seconds.
const LONG = { vocabSize: 28, maxLen: 12000, dModel: 32, nLayers: 2, nHeads: 2, positions: 'sinusoidal', seed: 6 };

test('generate through the worker runs in chunks and gives the calling thread\'s tokens and logits bit for bit: ' +
  'greedy and sampled, sinusoidal and learned, causal and not', async () => {
  const configs = [
    { vocabSize: 29, maxLen: 700, dModel: 32, nLayers: 2, nHeads: 4, dMlp: 48, positions: 'sinusoidal', seed: 2 },
    { vocabSize: 29, maxLen: 700, dModel: 32, nLayers: 2, nHeads: 4, positions: 'learned', seed: 3 },
    { vocabSize: 17, maxLen: 90, dModel: 16, nLayers: 2, nHeads: 2, dMlp: 16, causal: false, positions: 'sinusoidal', seed: 4 },
    { vocabSize: 17, maxLen: 90, dModel: 16, nLayers: 1, nHeads: 2, causal: false, positions: 'learned', norm: 'post', seed: 5 },
  ];
  const optionSets = [{}, { temperature: 0.9, topK: 12, topP: 0.95, seed: 17 }, { temperature: 1.4, seed: 3, headGates: null }];
  for (const config of configs) {
    const mine = hs.createTransformer(config);
    const m = await remote.createTransformer(config);
    try {
      for (const extra of optionSets) {
        const prompt = [[1, 2, 3], [4, 5, 6]];
        const options = { maxNewTokens: config.maxLen - 3, logits: true, ...extra };
        const want = mine.generate(prompt, options);
        const got = await m.generate(prompt, options);
        assertSameResultBits(got, want, `${JSON.stringify(config)} ${JSON.stringify(extra)}`);
      }
      // Gated, unbatched.
      const gates = Array.from({ length: config.nLayers }, (_, l) => Array.from({ length: config.nHeads }, (_, h) => (l + h) % 3 - 0.5));
      assertSameResultBits(await m.generate([7, 8], { maxNewTokens: 40, headGates: gates, logits: true }),
        mine.generate([7, 8], { maxNewTokens: 40, headGates: gates, logits: true }), 'gated');
    } finally {
      mine.dispose();
      await m.dispose();
    }
  }
});

test('a long generate in the worker: other requests are answered while it runs; options.signal cancels it ' +
  '(CANCELLED at once), the worker then answers a forward and has freed its caches', async () => {
  const m = await remote.createTransformer(LONG);
  try {
    await m.forward([[1, 2, 3]]);
    const base = (await remote.memory()).heapInUse;
    const controller = new AbortController();
    const started = performance.now();
    const running = settle(() => m.generate([1, 2, 3], { maxNewTokens: LONG.maxLen - 3, signal: controller.signal }));
    // Served between its chunks: a forward on the same model, and another model's.
    const during = await m.forward([[4, 5, 6]]);
    assertSameResultBits(during, await m.forward([[4, 5, 6]]));
    assert.ok(performance.now() - started < 20000, 'a forward waited for the whole generation');
    const aborted = performance.now();
    controller.abort(new Error('the user pressed stop'));
    const { error } = await running;
    const rejectedAfter = performance.now() - aborted;
    assert.ok(error !== undefined, 'the generation finished before it was cancelled: make it longer');
    assert.equal(error.code, 'CANCELLED');
    assert.match(error.message, /^generate: cancelled by the caller \(options\.signal was aborted: the user pressed stop\)/);
    assert.ok(rejectedAfter < 1000, `rejected ${rejectedAfter} ms after the abort`);
    const t = performance.now();
    assertSameResultBits(await m.forward([[4, 5, 6]]), during);
    const answeredAfter = performance.now() - t;
    assert.ok(answeredAfter < 5000, `the next forward was answered ${answeredAfter} ms after the cancel`);
    // The generation's KV caches (2 layers x 12000 positions x 32 x 2 floats: 6 MB) are freed.
    const heap = (await remote.memory()).heapInUse;
    assert.ok(heap < base + 2 ** 20, `heapInUse ${base} before, ${heap} after the cancelled generation`);
    // An already aborted signal: nothing is sent, CANCELLED.
    const gone = new AbortController();
    gone.abort();
    await rejectsWith(() => m.generate([1], { maxNewTokens: 2, signal: gone.signal }), 'CANCELLED', 'generate: cancelled by the caller');
    // A signal that is no AbortSignal is refused naming it; null is none.
    await rejectsWith(() => m.generate([1], { signal: 'stop' }), 'INVALID_ARGUMENT', 'options.signal: expected an AbortSignal');
    assertSameResultBits(await m.generate([1, 2], { maxNewTokens: 3, signal: null }), await m.generate([1, 2], { maxNewTokens: 3 }));
    // The calling thread's generate is synchronous: it takes no signal.
    assert.throws(() => local.generate([1], { signal: new AbortController().signal }),
      (e) => e.code === 'INVALID_ARGUMENT' && e.message.startsWith('options.signal: unknown option'));
  } finally {
    await m.dispose();
  }
});

test('generations of one model wait their turn; cancelling a waiting one leaves the running one; a weight change ' +
  'between chunks (loadStateDict, trainStep) ends one with CANCELLED', async () => {
  const config = { vocabSize: 23, maxLen: 300, dModel: 16, nLayers: 2, nHeads: 2, seed: 9 };
  const mine = hs.createTransformer(config);
  const m = await remote.createTransformer(config);
  try {
    const a = m.generate([1, 2], { maxNewTokens: 298, temperature: 0.8, seed: 1, logits: true });
    const b = m.generate([[3, 4, 5]], { maxNewTokens: 200, logits: true });
    const controller = new AbortController();
    const c = settle(() => m.generate([6], { maxNewTokens: 299, signal: controller.signal }));
    controller.abort();
    assertSameResultBits(await a, mine.generate([1, 2], { maxNewTokens: 298, temperature: 0.8, seed: 1, logits: true }));
    assertSameResultBits(await b, mine.generate([[3, 4, 5]], { maxNewTokens: 200, logits: true }));
    assert.equal((await c).error.code, 'CANCELLED');
    // A weight change between chunks: the caches hold the old weights' keys.
    const big = await remote.createTransformer(LONG);
    try {
      const sd = await big.stateDict();
      const replaced = settle(() => big.generate([1, 2, 3], { maxNewTokens: LONG.maxLen - 3 }));
      await big.forward([[1]]);  // the generation is under way
      await big.loadStateDict(sd);
      await rejectsWith(() => replaced.then(({ value, error }) => (error ? Promise.reject(error) : value)),
        'CANCELLED', 'generate: the model\'s weights were replaced (loadStateDict) while it was generating');
      await big.setOptimizer({ type: 'sgd', lr: 0 });
      const trained = settle(() => big.generate([1, 2, 3], { maxNewTokens: LONG.maxLen - 3 }));
      await big.forward([[1]]);
      await big.trainStep([[1, 2]], [[2, 3]]);
      await rejectsWith(() => trained.then(({ value, error }) => (error ? Promise.reject(error) : value)),
        'CANCELLED', 'generate: the model\'s weights changed while it was generating');
      // And it generates afresh.
      assertSameResultBits(await big.generate([1, 2, 3], { maxNewTokens: 4 }), await big.generate([1, 2, 3], { maxNewTokens: 4 }));
    } finally {
      await big.dispose();
    }
  } finally {
    mine.dispose();
    await m.dispose();
  }
});

// The golden transformer cases ("kind": "transformer" documents) through runCase and checkCase.
const goldenDir = new URL('../golden/transformer/', import.meta.url);
const goldenText = readdirSync(goldenDir).filter((f) => f.endsWith('.json')).sort()
  .map((f) => readFileSync(new URL(f, goldenDir), 'utf8'));
const caseSupport = await settle(() => hs.runCase(goldenText[0]));

test('transformer case documents through the worker\'s runCase and checkCase: the calling thread\'s results',
  { skip: caseSupport.error === undefined ? false : `the calling thread's runCase refuses them (${caseSupport.error?.message})` },
  async () => {
    assert.ok(goldenText.length >= 30);
    const results = await Promise.all(goldenText.map((text) => remote.runCase(text)));
    for (const [i, text] of goldenText.entries()) {
      const want = hs.runCase(text);
      assertSameResultBits(results[i], want, `case ${i}`);
      const check = hs.checkCase(text, want);
      assert.ok(check.ok, check.detail);
      assert.deepEqual(await remote.checkCase(JSON.parse(text), results[i]), check, `checkCase ${i}`);
    }
    // checkCase reads only a result's own fields of the case format: extras stay behind, a getter
    // that throws is the calling thread's error.
    const extra = { ...results[0], note: () => 'not sent', headStats: new Proxy({}, {}) };
    assert.deepEqual(await remote.checkCase(goldenText[0], extra), hs.checkCase(goldenText[0], extra));
    const throwing = { ...results[0], get logits() { throw new Error('boom'); } };
    const inThread = await settle(() => hs.checkCase(goldenText[0], throwing));
    const viaWorker = await settle(() => remote.checkCase(goldenText[0], throwing));
    assert.deepEqual(errorFields(viaWorker.error), errorFields(inThread.error));
    assert.match(viaWorker.error.message, /^result: reading it threw \(Error: boom\)/);
  });

test('tsc accepts a typed use of the remote Transformer (tests/js/typed-worker-usage.ts) against index.d.ts', () => {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const project = fileURLToPath(new URL('./tsconfig.worker.json', import.meta.url));
  const r = spawnSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8' });
  assert.equal(r.status, 0, `tsc failed:\n${r.stdout}${r.stderr}`);
});
