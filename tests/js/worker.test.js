// initWorker(): headscope in a node:worker_threads Worker gives the in-thread API's numbers and
// errors, asynchronously.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

import { init, HeadscopeError, Tensor } from '../../web/lib/index.js';
import { initWorker } from '../../web/lib/worker-client.js';
import { transferCheckingWorker } from './worker-shim.js';

const WORKER_URL = new URL('../../web/lib/worker.js', import.meta.url);
const seed = JSON.parse(readFileSync(new URL('../golden/seed-worked-example.json', import.meta.url), 'utf8'));

// The seed example in the JS API's terms.
const SEED_CONFIG = { embedDim: 4, numHeads: 2, bias: false };
const SEED_STATE_DICT = seed.state_dict;
const SEED_X = seed.inputs.query;
const SEED_OPTIONS = { needWeights: true, averageAttnWeights: false };

function f32(nested) {
  return Float32Array.from(nested.flat(Infinity));
}

function assertSameTensor(got, want, name) {
  if (want === null) {
    assert.equal(got, null, `${name}: expected null`);
    return;
  }
  assert.ok(got instanceof Tensor, `${name}: expected a Tensor`);
  assert.ok(got.data instanceof Float32Array, `${name}.data: expected a Float32Array`);
  assert.deepEqual(got.shape, want.shape, `${name}.shape`);
  // Same WebAssembly module and kernels on both sides: bit-identical.
  assert.deepEqual(Array.from(got.data), Array.from(want.data), `${name}.data`);
}

function assertSameResult(got, want) {
  assert.deepEqual(Object.keys(got).sort(), Object.keys(want).sort());
  for (const name of Object.keys(want)) assertSameTensor(got[name], want[name], name);
}

// Rejects with a HeadscopeError of this code; returns the error.
async function rejectsWith(promise, code) {
  let error = null;
  try {
    await promise;
  } catch (e) {
    error = e;
  }
  assert.ok(error instanceof HeadscopeError, `expected a HeadscopeError, got ${error}`);
  assert.equal(error.code, code, error.message);
  return error;
}

function thrownBy(fn) {
  try {
    fn();
  } catch (e) {
    return e;
  }
  assert.fail('expected a throw');
}

// A deterministic (L, N, E) input different for each seed.
function input(seedValue, L, N, E) {
  const data = new Float32Array(L * N * E);
  let s = seedValue * 7919 + 17;
  for (let i = 0; i < data.length; i++) {
    s = (s * 1103515245 + 12345) % 2147483648;
    data[i] = (s / 2147483648) * 2 - 1;
  }
  return { data, shape: [L, N, E] };
}

function weights(E, seedValue) {
  return {
    in_proj_weight: input(seedValue, 3 * E, 1, E),
    in_proj_bias: input(seedValue + 1, 3 * E, 1, 1),
    'out_proj.weight': input(seedValue + 2, E, 1, E),
    'out_proj.bias': input(seedValue + 3, E, 1, 1),
  };
}

// weights() gives (rows, 1, cols) tensors; the state_dict wants (rows, cols) and (rows,).
function stateDict(E, seedValue) {
  const w = weights(E, seedValue);
  return {
    in_proj_weight: { data: w.in_proj_weight.data, shape: [3 * E, E] },
    in_proj_bias: { data: w.in_proj_bias.data, shape: [3 * E] },
    'out_proj.weight': { data: w['out_proj.weight'].data, shape: [E, E] },
    'out_proj.bias': { data: w['out_proj.bias'].data, shape: [E] },
  };
}

let hs;      // in-thread
let remote;  // in a worker

before(async () => {
  hs = await init();
  remote = await initWorker();
});

after(async () => {
  await remote.terminate();
});

describe('initWorker', () => {
  test('reports the kernel target like init()', () => {
    assert.equal(remote.kernelTarget, hs.kernelTarget);
    assert.ok(remote.worker instanceof Worker);
  });

  test('runCase on the seed example gives the in-thread numbers', async () => {
    const want = hs.runCase(seed);
    const got = await remote.runCase(seed);
    assertSameResult(got, want);
    assert.deepEqual(got.output.shape, [3, 4]);
    assert.deepEqual(got.weights.shape, [2, 3, 3]);
    // and PyTorch's
    const check = hs.checkCase(seed, got);
    assert.ok(check.ok, check.detail);
    assert.deepEqual(await remote.checkCase(seed, got), check);
    // a case given as JSON text
    assertSameResult(await remote.runCase(JSON.stringify(seed)), want);
  });

  test('every golden case, all at once, gives the in-thread numbers', async () => {
    const dir = new URL('../golden/', import.meta.url);
    const docs = readdirSync(dir).filter((f) => f.endsWith('.json'))
      .map((f) => readFileSync(new URL(f, dir), 'utf8'));
    assert.ok(docs.length > 50);
    const results = await Promise.all(docs.map((text) => remote.runCase(text)));
    docs.forEach((text, i) => assertSameResult(results[i], hs.runCase(text)));
  });

  test('createMultiheadAttention + loadStateDict + forward gives the in-thread numbers', async () => {
    const local = hs.createMultiheadAttention(SEED_CONFIG);
    local.loadStateDict(SEED_STATE_DICT);
    const want = local.forward(SEED_X, SEED_X, SEED_X, SEED_OPTIONS);
    const wantAgain = local.forward(want.output, want.output, want.output);
    local.dispose();

    const mha = await remote.createMultiheadAttention(SEED_CONFIG);
    assert.deepEqual(mha.config, { ...SEED_CONFIG, numKvHeads: 2, addBiasKV: false, addZeroAttn: false,
      kdim: 4, vdim: 4, batchFirst: false, ropeDims: 0, ropeLayout: 'half', ropeBase: 10000, attnSinks: false });
    assert.ok(Object.isFrozen(mha.config));
    assert.deepEqual(mha.parameterShapes(), { in_proj_weight: [12, 4], 'out_proj.weight': [4, 4] });
    assert.equal(await mha.loadStateDict(SEED_STATE_DICT), undefined);
    const got = await mha.forward(SEED_X, SEED_X, SEED_X, SEED_OPTIONS);
    assertSameResult(got, want);
    assert.deepEqual(got.output.toArray(), want.output.toArray());
    assert.deepEqual(got.weights.toArray(), want.weights.toArray());

    // { data, shape } inputs are copied, not transferred: the caller keeps them.
    const x = { data: f32(SEED_X), shape: [3, 4] };
    const before = Array.from(x.data);
    assertSameResult(await mha.forward(x, x, x, SEED_OPTIONS), want);
    assert.equal(x.data.length, 12);
    assert.deepEqual(Array.from(x.data), before);
    // A Tensor result can be fed back in.
    assertSameResult(await mha.forward(got.output, got.output, got.output), wantAgain);
    // `out` cannot reach across threads: refused, not silently ignored.
    await assert.rejects(mha.forward(SEED_X, SEED_X, SEED_X, { out: new Float32Array(12) }),
      (e) => e instanceof HeadscopeError && e.code === 'INVALID_ARGUMENT' &&
        e.message.includes('options.out') && e.message.includes('initWorker'));
    await mha.dispose();
  });

  test('trace gives every in-thread intermediate', async () => {
    const local = hs.createMultiheadAttention(SEED_CONFIG);
    local.loadStateDict(SEED_STATE_DICT);
    const want = local.trace(SEED_X, SEED_X, SEED_X, SEED_OPTIONS);
    local.dispose();

    const mha = await remote.createMultiheadAttention(SEED_CONFIG);
    await mha.loadStateDict(SEED_STATE_DICT);
    const got = await mha.trace(SEED_X, SEED_X, SEED_X, SEED_OPTIONS);
    assert.deepEqual(Object.keys(got),
      ['q', 'k', 'v', 'scores', 'weights', 'headOutputs', 'concat', 'output']);
    assertSameResult(got, want);
    await mha.dispose();
  });

  test('forward and trace take alibi and window (the generic path): the in-thread bits and errors', async () => {
    const options = { ...SEED_OPTIONS, isCausal: true, alibi: true, window: 2 };
    const local = hs.createMultiheadAttention(SEED_CONFIG);
    local.loadStateDict(SEED_STATE_DICT);
    const want = local.forward(SEED_X, SEED_X, SEED_X, options);
    const wantTrace = local.trace(SEED_X, SEED_X, SEED_X, { alibi: true, window: 2 });
    const plain = local.forward(SEED_X, SEED_X, SEED_X, SEED_OPTIONS);
    const badWindow = thrownBy(() => local.forward(SEED_X, SEED_X, SEED_X, { window: -1 }));
    local.dispose();

    const mha = await remote.createMultiheadAttention(SEED_CONFIG);
    await mha.loadStateDict(SEED_STATE_DICT);
    const got = await mha.forward(SEED_X, SEED_X, SEED_X, options);
    assertSameResult(got, want);
    assert.notDeepEqual(Array.from(got.output.data), Array.from(plain.output.data), 'the options changed the output');
    assert.equal(got.weights.data[2], 0, 'query 0 does not see key 2 (causal)');
    assertSameResult(await mha.trace(SEED_X, SEED_X, SEED_X, { alibi: true, window: 2 }), wantTrace);
    const e = await rejectsWith(mha.forward(SEED_X, SEED_X, SEED_X, { window: -1 }), 'INVALID_ARGUMENT');
    assert.equal(e.message, badWindow.message);
    assertSameResult(await mha.forward(SEED_X, SEED_X, SEED_X, options), want);
    await mha.dispose();
  });

  test('errors reject with the in-thread code and message, and the worker keeps serving', async () => {
    const local = hs.createMultiheadAttention(SEED_CONFIG);
    local.loadStateDict(SEED_STATE_DICT);
    const mha = await remote.createMultiheadAttention(SEED_CONFIG);
    await mha.loadStateDict(SEED_STATE_DICT);

    const bad = [[1, 2, 3], [4, 5, 6]];  // last dimension 3, embedDim 4
    const localError = thrownBy(() => local.forward(bad, bad, bad));
    const error = await rejectsWith(mha.forward(bad, bad, bad), 'SHAPE_MISMATCH');
    assert.equal(error.message, localError.message);
    assert.equal(error.name, 'HeadscopeError');

    // the next call works
    assertSameResult(await mha.forward(SEED_X, SEED_X, SEED_X, SEED_OPTIONS),
      local.forward(SEED_X, SEED_X, SEED_X, SEED_OPTIONS));

    // every kind of error, each followed by a working call
    const cases = [
      [() => remote.createMultiheadAttention({ embedDim: 4, numHeads: 3 }),
        () => hs.createMultiheadAttention({ embedDim: 4, numHeads: 3 }), 'INVALID_ARGUMENT'],
      [() => mha.loadStateDict({ nope: [1] }), () => local.loadStateDict({ nope: [1] }), 'UNKNOWN_PARAMETER'],
      [() => mha.loadStateDict({ in_proj_weight: SEED_STATE_DICT.in_proj_weight }),
        () => local.loadStateDict({ in_proj_weight: SEED_STATE_DICT.in_proj_weight }), 'MISSING_PARAMETER'],
      [() => mha.forward(SEED_X, SEED_X, SEED_X, { needWeights: 1 }),
        () => local.forward(SEED_X, SEED_X, SEED_X, { needWeights: 1 }), 'INVALID_ARGUMENT'],
      [() => mha.forward(SEED_X), () => local.forward(SEED_X), 'INVALID_ARGUMENT'],
      [() => remote.runCase({ config: {} }), () => hs.runCase({ config: {} }), 'PARSE_ERROR'],
      [() => remote.runCase('{'), () => hs.runCase('{'), 'PARSE_ERROR'],
    ];
    for (const [call, localCall, code] of cases) {
      const e = await rejectsWith(call(), code);
      assert.equal(e.message, thrownBy(localCall).message);
      assertSameResult(await remote.runCase(seed), hs.runCase(seed));
    }

    // arguments that cannot be cloned reject instead of throwing
    await rejectsWith(mha.forward(SEED_X, SEED_X, SEED_X, { needWeights: () => true }), 'INVALID_ARGUMENT');
    assertSameResult(await mha.forward(SEED_X, SEED_X, SEED_X, SEED_OPTIONS),
      local.forward(SEED_X, SEED_X, SEED_X, SEED_OPTIONS));
    local.dispose();
    await mha.dispose();
  });

  test('a disposed remote object rejects with DISPOSED', async () => {
    const local = hs.createMultiheadAttention(SEED_CONFIG);
    local.dispose();
    const localError = thrownBy(() => local.forward(SEED_X, SEED_X, SEED_X));

    const liveBefore = await remote.liveHandles();
    const mha = await remote.createMultiheadAttention(SEED_CONFIG);
    await mha.loadStateDict(SEED_STATE_DICT);
    assert.equal(await remote.liveHandles(), liveBefore + 1);
    assert.equal(mha.disposed, false);
    await mha.dispose();
    assert.equal(mha.disposed, true);
    assert.equal(await remote.liveHandles(), liveBefore);
    await mha.dispose();  // twice: a no-op, as in-thread

    const e = await rejectsWith(mha.forward(SEED_X, SEED_X, SEED_X), 'DISPOSED');
    assert.equal(e.message, localError.message);
    await rejectsWith(mha.trace(SEED_X, SEED_X, SEED_X), 'DISPOSED');
    await rejectsWith(mha.loadStateDict(SEED_STATE_DICT), 'DISPOSED');

    // requests are served in order: a forward sent right after dispose() sees it disposed
    const other = await remote.createMultiheadAttention(SEED_CONFIG);
    await other.loadStateDict(SEED_STATE_DICT);
    const pending = other.forward(SEED_X, SEED_X, SEED_X);
    const disposing = other.dispose();
    const late = other.forward(SEED_X, SEED_X, SEED_X);
    assertSameResult(await pending, hs.runCase({ ...seed, inputs: { ...seed.inputs,
      average_attn_weights: true } }));
    await disposing;
    await rejectsWith(late, 'DISPOSED');
  });

  test('20 concurrent forwards each get their own result', async () => {
    const E = 8;
    const sd = stateDict(E, 5);
    const local = hs.createMultiheadAttention({ embedDim: E, numHeads: 2 });
    local.loadStateDict(sd);
    const mha = await remote.createMultiheadAttention({ embedDim: E, numHeads: 2 });
    await mha.loadStateDict(sd);

    // different shapes and options per call, so a mixed-up reply cannot pass
    const calls = Array.from({ length: 20 }, (_, i) => {
      const q = input(100 + i, 1 + (i % 5), 1 + (i % 3), E);
      const kv = input(200 + i, 2 + (i % 4), 1 + (i % 3), E);
      const options = { averageAttnWeights: i % 2 === 0, needWeights: i % 7 !== 3 };
      return { q, kv, options };
    });
    const results = await Promise.all(calls.map(({ q, kv, options }) => mha.forward(q, kv, kv, options)));
    calls.forEach(({ q, kv, options }, i) => {
      assertSameResult(results[i], local.forward(q, kv, kv, options));
    });

    // and mixed kinds of requests at once, one of them failing
    const mixed = await Promise.allSettled([
      mha.forward(calls[0].q, calls[0].kv, calls[0].kv),
      remote.runCase(seed),
      mha.forward([[1]], [[1]], [[1]]),
      mha.trace(calls[1].q, calls[1].q, calls[1].q),
      remote.createMultiheadAttention({ embedDim: 0, numHeads: 1 }),
    ]);
    assert.deepEqual(mixed.map((r) => r.status), ['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'rejected']);
    assertSameResult(mixed[0].value, local.forward(calls[0].q, calls[0].kv, calls[0].kv));
    assertSameResult(mixed[1].value, hs.runCase(seed));
    assert.equal(mixed[2].reason.code, 'SHAPE_MISMATCH');
    assertSameResult(mixed[3].value, local.trace(calls[1].q, calls[1].q, calls[1].q));
    assert.equal(mixed[4].reason.code, 'INVALID_ARGUMENT');
    local.dispose();
    await mha.dispose();
  });

  test('two workers at once each compute their own results', async () => {
    // One given as a Worker, one as the script's URL.
    const a = await initWorker(new Worker(WORKER_URL));
    const b = await initWorker(WORKER_URL.href);
    try {
      const jobs = [[a, 16, 4, 11], [b, 12, 3, 22], [a, 8, 2, 33], [b, 16, 1, 44]];
      const locals = jobs.map(([, E, H, s]) => {
        const m = hs.createMultiheadAttention({ embedDim: E, numHeads: H, batchFirst: s > 30 });
        m.loadStateDict(stateDict(E, s));
        return m;
      });
      const remotes = await Promise.all(jobs.map(async ([w, E, H, s]) => {
        const m = await w.createMultiheadAttention({ embedDim: E, numHeads: H, batchFirst: s > 30 });
        await m.loadStateDict(stateDict(E, s));
        return m;
      }));
      const inputs = jobs.map(([, E], j) => Array.from({ length: 5 }, (_, i) => input(j * 10 + i, 3 + i, 2, E)));
      const results = await Promise.all(remotes.flatMap((m, j) => inputs[j].map((x) => m.forward(x, x, x))));
      let n = 0;
      locals.forEach((m, j) => inputs[j].forEach((x) => assertSameResult(results[n++], m.forward(x, x, x))));
      assertSameResult(await a.runCase(seed), hs.runCase(seed));
      assertSameResult(await b.runCase(seed), hs.runCase(seed));
      for (const m of locals) m.dispose();
      assert.equal(await a.liveHandles(), 2);
      assert.equal(await b.liveHandles(), 2);
    } finally {
      await a.terminate();
      await b.terminate();
    }
  });

  test('terminate() rejects pending and later calls with DISPOSED', async () => {
    const w = await initWorker();
    const mha = await w.createMultiheadAttention(SEED_CONFIG);
    await mha.loadStateDict(SEED_STATE_DICT);
    const big = input(1, 64, 8, 4);
    const pending = Promise.allSettled(Array.from({ length: 5 }, () => mha.forward(big, big, big)));
    await w.terminate();
    for (const r of await pending) await rejectsWith(Promise.reject(r.reason), 'DISPOSED');
    await rejectsWith(mha.forward(SEED_X, SEED_X, SEED_X), 'DISPOSED');
    await rejectsWith(w.runCase(seed), 'DISPOSED');
    await mha.dispose();  // never rejects
  });

  test('a worker that dies rejects pending and later calls with INTERNAL', async () => {
    // A stand-in worker: ready, then exits on the first request.
    const dying = new Worker(`
      const { parentPort } = require('node:worker_threads');
      parentPort.postMessage({ type: 'ready', kernelTarget: 'FAKE', methods: { runCase: ['caseDocument'] } });
      parentPort.on('message', () => process.exit(3));`, { eval: true });
    const w = await initWorker(dying);
    assert.equal(w.kernelTarget, 'FAKE');
    const pending = await Promise.allSettled([w.runCase(seed), w.createMultiheadAttention(SEED_CONFIG)]);
    for (const r of pending) {
      const e = await rejectsWith(Promise.reject(r.reason), 'INTERNAL');
      assert.match(e.message, /exited \(code 3\)/);
    }
    await rejectsWith(w.runCase(seed), 'INTERNAL');
    await w.terminate();

    // one that throws
    const throwing = new Worker(`
      const { parentPort } = require('node:worker_threads');
      parentPort.postMessage({ type: 'ready', kernelTarget: 'FAKE', methods: { memory: [] } });
      parentPort.on('message', () => { throw new Error('boom'); });`, { eval: true });
    const t = await initWorker(throwing);
    const e = await rejectsWith(t.memory(), 'INTERNAL');
    assert.match(e.message, /boom/);
    await t.terminate();

    // a script that does not exist: initWorker itself rejects
    await rejectsWith(initWorker(new URL('./no-such-worker.js', WORKER_URL)), 'INTERNAL');
  });

  test('initWorker rejects a non-worker argument', async () => {
    await rejectsWith(initWorker(42), 'INVALID_ARGUMENT');
    await rejectsWith(initWorker({}), 'INVALID_ARGUMENT');
    // worker_threads refuses a relative path not starting with ./ in its constructor
    const e = await rejectsWith(initWorker('web/lib/worker.js'), 'INVALID_ARGUMENT');
    assert.match(e.message, /^worker: could not start a worker from "web\/lib\/worker.js"/);
  });

  test('a Node process using initWorker() exits without terminate()', async () => {
    const script = `
      import { initWorker } from ${JSON.stringify(new URL('../../web/lib/worker-client.js', import.meta.url).href)};
      const hs = await initWorker();
      const r = await hs.runCase(${JSON.stringify(JSON.stringify(seed))});
      setTimeout(async () => console.log(JSON.stringify((await hs.runCase(${JSON.stringify(JSON.stringify(seed))})).output.shape)), 50);`;
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script],
      { timeout: 20000 });
    assert.equal(stdout.trim(), '[3,4]');
  });

  test('worker.js serves through a browser-style `self` global', async () => {
    // A module worker's global scope: self.postMessage out, self.onmessage in; every tensor of a
    // reply must be transferred.
    const w = await initWorker(transferCheckingWorker());
    try {
      assert.equal(w.kernelTarget, hs.kernelTarget);
      assertSameResult(await w.runCase(seed), hs.runCase(seed));
      const mha = await w.createMultiheadAttention(SEED_CONFIG);
      await mha.loadStateDict(SEED_STATE_DICT);
      const local = hs.createMultiheadAttention(SEED_CONFIG);
      local.loadStateDict(SEED_STATE_DICT);
      assertSameResult(await mha.trace(SEED_X, SEED_X, SEED_X), local.trace(SEED_X, SEED_X, SEED_X));
      local.dispose();
      await rejectsWith(w.runCase({}), 'PARSE_ERROR');
      assertSameResult(await w.runCase(seed), hs.runCase(seed));
    } finally {
      await w.terminate();
    }
  });
});
