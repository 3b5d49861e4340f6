// The worker under requests made to stall it or to change a model through a refusal: every request
// is answered or refused within a bounded time, whatever lengths and shapes its arguments claim;
// a refused request leaves the model bit for bit as it was (weights and optimizer state); a
// training run's batches are checked whole before the first step.
//
// Two clients: initWorker() (what callers use) and raw messages to worker.js (what a page that
// talks to the worker itself can send: no client-side checks at all), the latter driven by
// fast-check with hostile values put at random places of valid requests.
//
// Reproduce a failure: HEADSCOPE_PROPERTY_SEED=<seed> node --test tests/js/worker-bounds.test.js
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Worker } from 'node:worker_threads';
import fc from 'fast-check';
import { initWorker } from '../../web/lib/worker-client.js';
import { MAX_TRAIN_BATCHES } from '../../web/lib/worker.js';

const SEED = Number(process.env.HEADSCOPE_PROPERTY_SEED ?? 20261207);
// A reply may take this long at most. The slowest legitimate refusal here walks 2^25 values
// (about 0.3 s); posting the largest hostile message takes about as long again.
const REPLY_BOUND_MS = 5000;

const CONFIG = { vocabSize: 8, maxLen: 8, dModel: 8, nLayers: 1, nHeads: 2, seed: 3 };
const OPTIMIZER = { type: 'adamw', lr: 1e-2 };
const BATCH = { tokens: [[1, 2, 3, 4], [5, 6, 7, 0]], targets: [[2, 3, 4, 5], [6, 7, 0, -100]] };

const remote = await initWorker();
after(async () => {
  assert.equal(await remote.liveHandles(), 0, 'live handles left in the worker');
  await remote.terminate();
});

const bits = (sd) => Object.fromEntries(Object.entries(sd).map(([k, v]) =>
  [k, Buffer.from(v.data.buffer, v.data.byteOffset, v.data.byteLength).toString('base64')]));

/** Resolves with the promise's value, or fails the test if it takes longer than `ms`. */
async function within(ms, promise, what) {
  let timer;
  const started = performance.now();
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
    if (performance.now() - started > ms) assert.fail(`${what}: took ${performance.now() - started} ms`);
  }
}

async function trainedModel() {
  const m = await remote.createTransformer(CONFIG);
  await m.setOptimizer(OPTIMIZER);
  await m.trainStep(BATCH.tokens, BATCH.targets);
  return m;
}

test('train({ batches }) of length 2^32 - 1 is refused at once; the worker answers everything meanwhile', async () => {
  const m = await trainedModel();
  try {
    const before = bits(await m.stateDict());
    const sparse = [];
    sparse.length = 2 ** 32 - 1;  // a few bytes to send; four billion holes to walk
    const refused = m.train({ steps: 3, batches: sparse });
    // Queued behind it: each must be answered, and promptly.
    const forward = m.forward([[1, 2, 3]]);
    const memory = remote.memory();
    await within(REPLY_BOUND_MS, assert.rejects(refused, {
      code: 'INVALID_ARGUMENT',
      message: `spec.batches: expected a non-empty array of { tokens, targets } of at most ${MAX_TRAIN_BATCHES} ` +
        'batches (they are cycled), got an array of length 4294967295',
    }), 'the refusal');
    assert.deepEqual((await within(REPLY_BOUND_MS, forward, 'a queued forward')).logits.shape, [1, 3, 8]);
    assert.ok((await within(REPLY_BOUND_MS, memory, 'memory')).heapInUse > 0);
    // Just past the bound: refused too; at the bound an array of holes names its first hole.
    const over = new Array(MAX_TRAIN_BATCHES + 1).fill(BATCH);
    await assert.rejects(m.train({ steps: 1, batches: over }), { code: 'INVALID_ARGUMENT', message: /at most 65536 batches/ });
    const holes = [BATCH];
    holes.length = MAX_TRAIN_BATCHES;
    await within(REPLY_BOUND_MS, assert.rejects(m.train({ steps: 1, batches: holes }),
      { code: 'INVALID_ARGUMENT', message: 'spec.batches[1]: a hole in the array; expected { tokens, targets }' }), 'holes');
    assert.deepEqual(bits(await m.stateDict()), before, 'no refusal changed a weight');
    // A run of the maximum number of batches is accepted and cancellable.
    const run = await m.train({ steps: 1_000_000, batches: new Array(MAX_TRAIN_BATCHES).fill(BATCH), chunkMs: 5 });
    await run.cancel();
    assert.equal((await within(REPLY_BOUND_MS, run.done, 'cancel')).status, 'cancelled');
  } finally {
    await m.dispose();
  }
});

test('bad train({ batches }) entries are refused before the first step; nothing changes', async () => {
  const m = await trainedModel();
  const twin = await trainedModel();  // the same model, never sent a bad request
  try {
    const before = bits(await m.stateDict());
    const bad = [
      [[BATCH, null], 'spec.batches[1]: expected { tokens, targets }, got null'],
      [[BATCH, 7], 'spec.batches[1]: expected { tokens, targets }, got number 7'],
      [[BATCH, []], 'spec.batches[1]: expected { tokens, targets }, got an array of length 0'],
      [[BATCH, { tokens: [[1, 2]] }], 'spec.batches[1].targets: expected token ids'],
      [[BATCH, { ...BATCH, weights: 1 }], 'spec.batches[1].weights: unknown key (expected tokens, targets)'],
      [[BATCH, { tokens: [[1, 9]], targets: [[2, 3]] }], 'spec.batches[1]: tokens: token [0, 1] is 9, expected an integer in [0, 7]'],
      [[BATCH, { tokens: [[1, 2]], targets: [[-100, -100]] }], 'spec.batches[1]: targets: every target is -100'],
      [[BATCH, { tokens: [[1, 2]], targets: [[2]] }], 'spec.batches[1]: targets: expected integers of the tokens\' shape (1, 2)'],
      [[BATCH, { tokens: new Array(9).fill(1), targets: new Array(9).fill(1) }], 'spec.batches[1]: tokens: expected (B, T) with B >= 1 and 1 <= T <= maxLen = 8'],
      [[BATCH, { tokens: [[1.5, 2]], targets: [[2, 3]] }], 'spec.batches[1].tokens[0][0]: expected an integer token id'],
    ];
    for (const [batches, message] of bad) {
      await assert.rejects(m.train({ steps: 5, batches }), (e) => {
        assert.equal(e.name, 'HeadscopeError');
        assert.ok(e.message.startsWith(message), `"${e.message}" should start with "${message}"`);
        return true;
      });
    }
    // A task whose batches the model cannot take: refused before the first step as well.
    await assert.rejects(m.train({ steps: 5, task: { name: 'induction' }, batchSize: 4 }),
      { code: 'SHAPE_MISMATCH', message: /^spec\.task: its batches do not fit this model: tokens: expected \(B, T\)/ });
    assert.deepEqual(bits(await m.stateDict()), before, 'no refused run took a step');
    // The optimizer state is untouched too: the same steps from here give the twin's bits.
    for (const model of [m, twin]) {
      const run = await model.train({ steps: 3, batches: [BATCH] });
      assert.deepEqual(await run.done, { status: 'done', step: 3 });
    }
    assert.deepEqual(bits(await m.stateDict()), bits(await twin.stateDict()));
  } finally {
    await m.dispose();
    await twin.dispose();
  }
});

// ---- Raw protocol: fast-check ----------------------------------------------------------------

/** A worker.js of its own, spoken to with raw messages. */
async function rawWorker() {
  const worker = new Worker(new URL('../../web/lib/worker.js', import.meta.url));
  const waiting = new Map();
  const runs = new Map();  // job -> resolve of its train-done
  let ready;
  const isReady = new Promise((resolve) => { ready = resolve; });
  worker.on('message', (m) => {
    if (m?.type === 'ready') ready(m);
    else if (m?.type === 'train-done') runs.get(m.job)?.(m);
    else if (m?.id !== undefined && waiting.has(m.id)) {
      waiting.get(m.id)(m);
      waiting.delete(m.id);
    }
  });
  worker.postMessage({ type: 'init', options: { simd: 'simd128' } });
  assert.equal((await isReady).error, undefined);
  let nextId = 1;
  // The tests name a request by the method it calls ('Transformer.forward', 'liveHandles'); the
  // protocol's message for it (worker.js): a 'call' of the method on the object (or the engine,
  // object 0), a 'create' of the kind, or a job's own op.
  const JOBS = ['train', 'trainControl', 'generate', 'generateCancel', 'dispose'];
  const message = (name, args) => {
    // (Arguments that are not a short array go as they are: the request itself is hostile, and
    // rebuilding it here would walk it.)
    if (!Array.isArray(args) || args.length > 16) return [name.startsWith('Transformer.') ? 'call' : name, args];
    if (name === 'createTransformer') return ['create', ['Transformer', ...args]];
    if (!name.startsWith('Transformer.')) return ['call', [0, name, ...args]];
    const method = name.slice('Transformer.'.length);
    return JOBS.includes(method) ? [method, args] : ['call', [args[0], method, ...args.slice(1)]];
  };
  const send = (name, args, wrap = (a) => a) => {
    const [op, fields] = message(name, args);
    const id = nextId++;
    args = wrap(fields);
    const reply = new Promise((resolve) => waiting.set(id, resolve));
    worker.postMessage({ id, op, args });
    return reply;
  };
  const call = async (op, args) => {
    const r = await send(op, args);
    if (!r.ok) throw Object.assign(new Error(r.error.message), r.error);
    return r.result;
  };
  // The train-done event of a job (registered before the job can end: it ends in a later turn).
  const done = (job) => new Promise((resolve) => runs.set(job, resolve));
  return { worker, send, call, done };
}

/** An array of `n` holes (a structured clone keeps them: a few bytes whatever n). */
const holes = (n) => {
  const a = [];
  a.length = n;
  return a;
};

// Values that claim far more than they cost to send, or are simply not what the slot takes.
const hostileValue = fc.oneof(
  fc.constantFrom(2 ** 32 - 1, 2 ** 24 + 1, 2 ** 24, 2 ** 20, 3).map(holes),
  // A hole after a good element, and a good element after 2^20 holes.
  fc.constantFrom(2 ** 24, 2 ** 20).map((n) => Object.assign(holes(n), { 0: 1 })),
  fc.constantFrom(2 ** 20).map((n) => Object.assign(holes(n + 1), { [n]: 1 })),
  // One row referenced 2^20 times: a clone of a few MB, 2^26 values to walk.
  fc.constantFrom(2, 64).map((w) => new Array(2 ** 20).fill(new Array(w).fill(1))),
  // A cycle (structured clone keeps it) and deep nesting.
  fc.constant(null).map(() => { const a = [1]; a.push(a); return a; }),
  fc.integer({ min: 5, max: 300 }).map((d) => { let v = [1]; for (let i = 0; i < d; i++) v = [v]; return v; }),
  // An object with many keys, a sparse object, odd primitives and typed arrays of every kind.
  fc.constant(null).map(() => Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`k${i}`, i]))),
  fc.constantFrom(NaN, Infinity, -0, 2 ** 60, -1, 1.5, '', 'x'.repeat(1 << 20), true, null, undefined, 10n),
  fc.constantFrom('Int32Array', 'Float32Array', 'Float64Array', 'Uint8Array').chain((kind) =>
    fc.integer({ min: 0, max: 40 }).map((n) => new globalThis[kind](n))),
  fc.constant(null).map(() => ({ data: new Int32Array(4), shape: [2 ** 24, 2 ** 24] })),
  fc.constant(null).map(() => ({ data: new Float32Array(2), shape: holes(2 ** 32 - 1) })),
);

/** Every path (list of keys) into a value's plain objects and arrays, the root included. */
function paths(value, prefix = [], out = []) {
  out.push(prefix);
  if (value !== null && typeof value === 'object' && !ArrayBuffer.isView(value)) {
    for (const k of Object.keys(value)) paths(value[k], [...prefix, k], out);
  }
  return out;
}

function replaceAt(value, path, replacement) {
  if (path.length === 0) return replacement;
  const copy = Array.isArray(value) ? value.slice() : { ...value };
  copy[path[0]] = replaceAt(value[path[0]], path.slice(1), replacement);
  return copy;
}

// Requests of the worker protocol that may change the model (or read it) with valid arguments;
// the hostile value goes somewhere in the arguments (never into the object id: that is a lookup,
// tested elsewhere). Requests that are answered ok are allowed to have changed the model: the
// property is that a refused one did not.
const TEMPLATES = {
  'Transformer.trainStep': (id) => [id, BATCH.tokens, BATCH.targets],
  'Transformer.backward': (id) => [id, BATCH.tokens, BATCH.targets, { headGateGrads: true }],
  'Transformer.train': (id) => [id, { steps: 2, batches: [BATCH, BATCH], chunkMs: 5 }],
  'Transformer.forward': (id) => [id, [[1, 2, 3]], { hooks: ['blocks.0.attn.hook_pattern'], headGates: [[1, 1]] }],
  'Transformer.generate': (id) => [id, [[1, 2]], { maxNewTokens: 3, temperature: 0.5, topK: 3, seed: 1 }],
  'Transformer.loadStateDict': (id, sd) => [id, sd, { strict: true }],
  'Transformer.setOptimizer': (id) => [id, { type: 'adamw', lr: 1e-2, betas: [0.9, 0.99] }],
  'Transformer.stateDict': (id) => [id],
  checkCase: () => [{ kind: 'transformer', config: { vocab_size: 4, max_len: 4, d_model: 2 }, state_dict: {},
    inputs: { tokens: [1, 2] }, expected: { logits: [[0, 0, 0, 0], [0, 0, 0, 0]] } },
  { logits: { data: new Float32Array(8), shape: [2, 4] } }, { tolerance: 1e-4 }],
  runCase: () => [{ kind: 'transformer', config: { vocab_size: 4, max_len: 4, d_model: 2 }, state_dict: {},
    inputs: { tokens: [1, 2] } }],
};

test('raw protocol, fast-check: hostile lengths and shapes anywhere are answered in bounded time; ' +
  'a refusal changes nothing', { timeout: 600_000 }, async () => {
  const raw = await rawWorker();
  try {
    const { id } = await raw.call('createTransformer', [CONFIG]);
    await raw.call('Transformer.setOptimizer', [id, OPTIMIZER]);
    const good = await raw.call('Transformer.stateDict', [id]);
    // A twin in the same worker, sent exactly what the victim accepted and nothing else: where
    // no refusal touched the victim's optimizer state (its moments are not in the stateDict), the
    // two train alike at the end.
    const { id: twin } = await raw.call('createTransformer', [CONFIG]);
    await raw.call('Transformer.setOptimizer', [twin, OPTIMIZER]);
    let snapshot = bits(good);
    let refusals = 0;
    let accepted = 0;
    const slowest = { ms: 0, what: '' };

    const request = fc.constantFrom(...Object.keys(TEMPLATES)).chain((op) => {
      const template = TEMPLATES[op](id, good);
      const spots = paths(template).filter((p) => !(p.length === 1 && p[0] === '0' && template[0] === id));
      return fc.record({ op: fc.constant(op), path: fc.constantFrom(...spots), value: hostileValue,
        wrap: fc.oneof({ weight: 8, arbitrary: fc.constant('none') }, fc.constantFrom('args-holes', 'args-long')) });
    });

    await fc.assert(fc.asyncProperty(request, async ({ op, path, value, wrap }) => {
      const args = replaceAt(TEMPLATES[op](id, good), path, value);
      // The args array itself: padded with holes, or too long.
      const wrapArgs = (a) => (wrap === 'args-holes' ? Object.assign(holes(2 ** 32 - 1), a)
        : wrap === 'args-long' ? [...a, ...new Array(20).fill(0)] : a);
      const what = `${op} with ${describeValue(value)} at [${path.join('.')}] (${wrap})`;
      const started = performance.now();
      const reply = await within(REPLY_BOUND_MS, raw.send(op, args, wrapArgs), what);
      const ms = performance.now() - started;
      if (ms > slowest.ms) Object.assign(slowest, { ms, what });
      if (reply.ok) {
        accepted++;
        if (op === 'Transformer.train') {
          // An accepted run ends (at a step that depends on timing when cancelled): both models
          // then restart from the victim's weights with fresh optimizers.
          const end = raw.done(reply.result.job);
          await raw.call('Transformer.trainControl', [id, reply.result.job, 'cancel']);
          await end;
          await raw.call('Transformer.loadStateDict', [twin, await raw.call('Transformer.stateDict', [id])]);
          for (const m of [id, twin]) await raw.call('Transformer.setOptimizer', [m, OPTIMIZER]);
        } else {
          const mirrored = await raw.send(op, args[0] === id ? [twin, ...args.slice(1)] : args);
          assert.ok(mirrored.ok, `${what}: accepted for the victim but not its twin`);
        }
        // It may have changed the model: the next refusal is measured from here.
        snapshot = bits(await raw.call('Transformer.stateDict', [id]));
        return;
      }
      const now = bits(await raw.call('Transformer.stateDict', [id]));
      refusals++;
      assert.equal(typeof reply.error.code, 'string', what);
      assert.ok(reply.error.message.length < 2000, `${what}: a ${reply.error.message.length}-character message`);
      assert.deepEqual(now, snapshot, `${what}: refused (${reply.error.code}: ${reply.error.message}) but the weights changed`);
    }), { seed: SEED, numRuns: Number(process.env.HEADSCOPE_PROPERTY_RUNS ?? 150), endOnFailure: true });

    // Weights and optimizer state: the twin has the victim's weights, and three more steps on
    // each give the same bits.
    assert.deepEqual(bits(await raw.call('Transformer.stateDict', [twin])), snapshot, 'the twin has the victim\'s weights');
    for (let k = 0; k < 3; k++) {
      for (const m of [id, twin]) await raw.call('Transformer.trainStep', [m, BATCH.tokens, BATCH.targets]);
    }
    assert.deepEqual(bits(await raw.call('Transformer.stateDict', [id])),
      bits(await raw.call('Transformer.stateDict', [twin])), 'the optimizer state: the same steps, the same bits');
    assert.ok(refusals > 50, `${refusals} refusals, ${accepted} accepted`);
    assert.ok(slowest.ms < REPLY_BOUND_MS, `slowest: ${slowest.what} ${slowest.ms} ms`);
    console.log(`# ${refusals} refused, ${accepted} accepted; slowest reply ${slowest.ms.toFixed(0)} ms: ${slowest.what}`);
    for (const m of [id, twin]) await raw.call('Transformer.dispose', [m]);
    assert.equal(await raw.call('liveHandles', []), 0);
  } finally {
    await raw.worker.terminate();
  }
});

function describeValue(v) {
  if (Array.isArray(v)) return `an array of length ${v.length}`;
  if (ArrayBuffer.isView(v)) return `a ${v.constructor.name}(${v.length})`;
  if (typeof v === 'string') return `a string of ${v.length}`;
  if (v !== null && typeof v === 'object') return `an object of ${Object.keys(v).length} keys`;
  return String(v);
}
