// The worker is a transport, not a third API (issue 29, item 2): every public method of the
// engine and of the objects it creates is offered by initWorker()'s objects, from the classes
// themselves (worker.js methodTable); a method added to index.js in the worker is served and
// offered with no code in worker.js or worker-client.js; index.d.ts's remote types declare every
// method the remote objects have.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { init } from '../../web/lib/index.js';
import { initWorker } from '../../web/lib/worker-client.js';
import { publicMethods } from '../../web/lib/worker.js';

const hs = await init();
const remote = await initWorker();
after(async () => {
  assert.equal(hs.liveHandles(), 0);
  await remote.terminate();
});

const MHA = { embedDim: 4, numHeads: 2 };
const MODEL = { vocabSize: 8, maxLen: 8, dModel: 8, seed: 1 };

// The methods a class's objects have, own and inherited (not Object's).
function methodsOf(object) {
  const names = new Set();
  for (let p = Object.getPrototypeOf(object); p !== null && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    for (const n of Object.getOwnPropertyNames(p)) {
      if (n !== 'constructor' && !n.startsWith('_') && typeof Object.getOwnPropertyDescriptor(p, n).value === 'function') names.add(n);
    }
  }
  return [...names];
}

test('every method of the engine and its objects is offered through the worker', async () => {
  const local = { engine: hs, mha: hs.createMultiheadAttention(MHA), model: hs.createTransformer(MODEL) };
  const far = { engine: remote, mha: await remote.createMultiheadAttention(MHA), model: await remote.createTransformer(MODEL) };
  try {
    for (const kind of Object.keys(local)) {
      const served = publicMethods(local[kind]);
      assert.ok(served.length > 2, `${kind} serves its methods`);
      const offered = methodsOf(far[kind]);
      for (const name of served) assert.ok(offered.includes(name), `${kind}.${name} is offered through the worker`);
      // And what a worker handles itself: creation, disposal, a chunked generate, training runs.
      for (const name of methodsOf(local[kind])) {
        assert.ok(offered.includes(name) || ['close', 'dispose'].includes(name), `${kind}.${name}`);
      }
    }
    // Offered methods work, arguments and results crossing as the calling thread's.
    await far.model.checkBatch([[1, 2]], [[2, 3]]);
    await assert.rejects(far.model.checkBatch([[1, 9]], [[2, 3]]), { code: 'INVALID_ARGUMENT', argument: 'tokens' });
    assert.deepEqual(await far.engine.liveHandles(), 2);
    assert.equal((await far.model.stateDict())['tok_embed.weight'].data.length, 64);
  } finally {
    local.mha.dispose();
    local.model.dispose();
    await far.mha.dispose();
    await far.model.dispose();
  }
});

test('a method added to index.js in the worker is served and offered with no code in the transport', async () => {
  // A worker whose index.js Transformer has one more method than the package's.
  const lib = new URL('../../web/lib/', import.meta.url).href;
  const worker = new Worker(`
    const lib = ${JSON.stringify(lib)};
    (async () => {
      const { init } = await import(lib + 'index.js');
      const hs = await init();
      const model = hs.createTransformer({ vocabSize: 4, maxLen: 4, dModel: 4 });
      Object.getPrototypeOf(model).parameterCount = function parameterCount(scale = 1) {
        return scale * Object.values(this.parameterShapes()).reduce((n, s) => n + s.reduce((a, b) => a * b, 1), 0);
      };
      model.dispose();
      await import(lib + 'worker.js');
    })();`, { eval: true });
  const patched = await initWorker(worker);
  try {
    const model = await patched.createTransformer({ vocabSize: 4, maxLen: 4, dModel: 4 });
    assert.equal(typeof model.parameterCount, 'function');
    const local = hs.createTransformer({ vocabSize: 4, maxLen: 4, dModel: 4 });
    const want = Object.values(local.parameterShapes()).reduce((n, s) => n + s.reduce((a, b) => a * b, 1), 0);
    local.dispose();
    assert.equal(await model.parameterCount(), want);
    assert.equal(await model.parameterCount(2), 2 * want);
    await model.dispose();
  } finally {
    await patched.terminate();
  }
});

test('index.d.ts declares every method the remote objects have', async () => {
  const dts = readFileSync(new URL('../../web/lib/index.d.ts', import.meta.url), 'utf8');
  const declared = (name) => {
    const at = dts.indexOf(`export interface ${name} {`);
    assert.ok(at >= 0, name);
    const body = dts.slice(at, dts.indexOf('\n}\n', at));
    return new Set([...body.matchAll(/^ {2}(\w+)\(/gm)].map((m) => m[1]));
  };
  const mha = await remote.createMultiheadAttention(MHA);
  const model = await remote.createTransformer(MODEL);
  try {
    for (const [iface, object] of [['RemoteHeadscope', remote], ['RemoteMultiheadAttention', mha], ['RemoteTransformer', model]]) {
      const names = declared(iface);
      for (const m of methodsOf(object)) assert.ok(names.has(m), `${iface}.${m} is declared in index.d.ts`);
    }
  } finally {
    await mha.dispose();
    await model.dispose();
  }
});
