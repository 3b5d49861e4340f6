// headscope in a Web Worker (or a Node worker_threads Worker): the same API as init(), run off the
// calling thread. Use it through initWorker() from './worker-client.js'; the protocol below is
// what that client speaks.
//
//   browser: new Worker(new URL('headscope/worker', import.meta.url), { type: 'module' })
//   Node:    new (await import('node:worker_threads')).Worker(new URL('./worker.js', import.meta.url))
//
// Protocol (structured-clone messages):
//   worker -> caller, once:  { type: 'ready', kernelTarget } or { type: 'ready', error: { code, message } }
//   caller -> worker:        { id, op, args }   op: create | loadStateDict | forward | trace | dispose
//                                                   | runCase | checkCase | liveHandles | memory
//   worker -> caller:        { id, ok: true, result } or { id, ok: false, error: { code, message } }
// Replies come in request order. Tensors go out as { data: Float32Array, shape } with their buffers
// transferred. An error is answered and the worker keeps serving; nothing a request does ends it.
//
// The file loads in browsers without touching node: modules: node:worker_threads is imported only
// when there is no worker global scope (`self`).
import { init, HeadscopeError } from './index.js';

const objects = new Map();  // object id -> MultiheadAttention
let nextObjectId = 1;

// Same code and message as using a disposed MultiheadAttention in the calling thread (index.js).
function disposedError() {
  return new HeadscopeError('DISPOSED', 'MultiheadAttention: this object was disposed; create a new one');
}

function lookup(id) {
  const mha = objects.get(id);
  if (mha === undefined) throw disposedError();
  return mha;
}

function tensorOut(t, transfer) {
  if (t === null || t === undefined) return null;
  if (!transfer.includes(t.data.buffer)) transfer.push(t.data.buffer);
  return { data: t.data, shape: t.shape };
}

// { name: Tensor | null } -> { name: { data, shape } | null }, collecting buffers to transfer.
function tensorsOut(result, transfer) {
  const out = {};
  for (const [name, t] of Object.entries(result)) {
    // headStats is a group of tensors ({ entropy, distance, maxWeight }), not a tensor.
    out[name] = name === 'headStats' ? tensorsOut(t, transfer) : tensorOut(t, transfer);
  }
  return out;
}

const OPS = {
  create(hs, [config]) {
    const mha = hs.createMultiheadAttention(config);
    const id = nextObjectId++;
    objects.set(id, mha);
    return { id, config: mha.config, parameterShapes: mha.parameterShapes() };
  },
  loadStateDict(hs, [id, stateDict, options]) {
    lookup(id).loadStateDict(stateDict, options);
    return null;
  },
  forward(hs, [id, query, key, value, options], transfer) {
    return tensorsOut(lookup(id).forward(query, key, value, options), transfer);
  },
  trace(hs, [id, query, key, value, options], transfer) {
    return tensorsOut(lookup(id).trace(query, key, value, options), transfer);
  },
  dispose(hs, [id]) {
    // Disposing twice is a no-op, as in the calling thread.
    const mha = objects.get(id);
    if (mha !== undefined) {
      objects.delete(id);
      mha.dispose();
    }
    return null;
  },
  runCase(hs, [caseDocument], transfer) {
    return tensorsOut(hs.runCase(caseDocument), transfer);
  },
  checkCase(hs, [caseDocument, result, options]) {
    // Tensors arrive as plain { data, shape } objects, which is all the comparison reads.
    const r = result !== null && typeof result === 'object' ? result : {};
    return hs.checkCase(caseDocument, { output: r.output ?? null, weights: r.weights ?? null }, options);
  },
  liveHandles(hs) {
    return hs.liveHandles();
  },
  memory(hs) {
    return hs.memory();
  },
};

function errorOut(e) {
  if (e instanceof HeadscopeError) return { code: e.code, message: e.message };
  // Not a HeadscopeError: a TypeError from a malformed argument the API did not anticipate, or a
  // bug. Either way the caller gets a HeadscopeError and the worker carries on.
  return { code: 'INTERNAL', message: `headscope worker: ${e?.message ?? String(e)}` };
}

function serve(post, hsPromise) {
  // Every request waits for init(); reactions run in registration order, so replies (and the
  // effects of dispose before a later forward) keep the order of the requests.
  return (message) => {
    if (message === null || typeof message !== 'object' || message.id === undefined) return;
    const { id, op, args } = message;
    hsPromise.then((hs) => {
      const transfer = [];
      let reply;
      try {
        if (!Object.hasOwn(OPS, op)) {
          throw new HeadscopeError('INVALID_ARGUMENT', `headscope worker: unknown request ${JSON.stringify(op)}`);
        }
        reply = { id, ok: true, result: OPS[op](hs, Array.isArray(args) ? args : [], transfer) };
      } catch (e) {
        reply = { id, ok: false, error: errorOut(e) };
      }
      send(post, reply, transfer);
    }, (e) => {
      send(post, { id, ok: false, error: errorOut(e) }, []);
    });
  };
}

function send(post, reply, transfer) {
  try {
    post(reply, transfer);
  } catch (e) {
    // A result that cannot be cloned: answer with the error instead of dying.
    try {
      post({ id: reply.id, ok: false, error: errorOut(e) }, []);
    } catch {
      // Nothing more can be sent; stay alive for the next request.
    }
  }
}

function start(post) {
  const hsPromise = init();
  hsPromise.then(
    (hs) => post({ type: 'ready', kernelTarget: hs.kernelTarget }, []),
    (e) => post({ type: 'ready', error: errorOut(e) }, []));
  return serve(post, hsPromise);
}

const workerScope = typeof self === 'object' && self !== null && typeof self.postMessage === 'function' &&
  typeof window === 'undefined' ? self : null;

if (workerScope !== null) {
  // Browser (module) worker: install the handler before anything is awaited, so no early message
  // is dispatched to nobody.
  const handle = start((message, transfer) => workerScope.postMessage(message, transfer));
  workerScope.onmessage = (event) => handle(event.data);
} else if (typeof importScripts === 'undefined' && typeof globalThis.process?.versions?.node === 'string') {
  // Node worker_threads (no worker global scope). parentPort queues messages until a listener is
  // attached.
  const { parentPort } = await import(/* webpackIgnore: true */ 'node:worker_threads');
  if (parentPort !== null) {
    const handle = start((message, transfer) => parentPort.postMessage(message, transfer));
    parentPort.on('message', handle);
  }
  // Imported in a main thread (no parentPort): nothing to serve.
}
