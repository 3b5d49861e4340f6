// headscope in a Web Worker (or a Node worker_threads Worker): the same API as init(), run off the
// calling thread. Use it through initWorker() from './worker-client.js'; the protocol below is
// what that client speaks.
//
//   browser: new Worker(new URL('headscope/worker', import.meta.url), { type: 'module' })
//   Node:    new (await import('node:worker_threads')).Worker(new URL('./worker.js', import.meta.url))
//
// Protocol (structured-clone messages):
//   worker -> caller, once:  { type: 'ready', kernelTarget } or { type: 'ready', error: { code, message } }
//   caller -> worker:        { id, op, args }   op: create | createTransformer | dispose | runCase
//                                                   | checkCase | liveHandles | memory, or a method
//                                                   of a created object (args [objectId, ...]):
//                                                   loadStateDict | forward | trace (MultiheadAttention)
//                                                   | Transformer.<loadStateDict | stateDict | forward
//                                                   | generate>
//   worker -> caller:        { id, ok: true, result } or { id, ok: false, error: { code, message, argument? } }
// Replies come in request order. Tensors go out as { data, shape } (data a Float32Array, or an
// Int32Array of token ids), groups of them (headStats, hooks, a stateDict) as objects of those,
// with their buffers transferred. An error is answered and the worker keeps serving; nothing a
// request does ends it. `argument` is the HeadscopeError's structured argument id, if it has one.
//
// The file loads in browsers without touching node: modules: node:worker_threads is imported only
// when there is no worker global scope (`self`).
import { init, HeadscopeError, Tensor } from './index.js';

// object id -> { kind, object }: kind is the class name, 'MultiheadAttention' or 'Transformer'.
const objects = new Map();
let nextObjectId = 1;

function register(kind, object) {
  const id = nextObjectId++;
  objects.set(id, { kind, object });
  return id;
}

// The object of this kind, or the DISPOSED error the calling thread gives for a disposed one
// (index.js's words). An id of another kind is no object of this one.
function lookup(id, kind) {
  const entry = objects.get(id);
  if (entry === undefined || entry.kind !== kind) {
    throw new HeadscopeError('DISPOSED', `${kind}: this object was disposed; create a new one`);
  }
  return entry.object;
}

// A result as it crosses: Tensors as { data, shape } with their buffers collected for transfer,
// groups of them (headStats, hooks, a stateDict) as objects of those, anything else (null, a
// loss, a number) as it is.
function resultOut(value, transfer) {
  if (value === null || typeof value !== 'object') return value;
  if (value instanceof Tensor) {
    if (!transfer.includes(value.data.buffer)) transfer.push(value.data.buffer);
    return { data: value.data, shape: value.shape };
  }
  if (Array.isArray(value)) return value.map((v) => resultOut(v, transfer));
  const out = {};
  for (const [name, v] of Object.entries(value)) out[name] = resultOut(v, transfer);
  return out;
}

// index.js's Transformer.forward copies options.hooks by iterating it, which walks the array's
// whole length: a sparse array of length 2^32 - 1 (which crosses to the worker in a few bytes)
// exhausts the JS heap, and a worker that runs out of heap takes its whole process down with it.
// An array longer than hookNames() holds a name twice or one the model does not have, which
// forward refuses anyway: refused here before the walk, as INVALID_ARGUMENT naming it.
function checkHooksLength(model, options) {
  const hooks = options !== null && typeof options === 'object' ? options.hooks : undefined;
  if (!Array.isArray(hooks)) return;
  const most = model.hookNames().length;
  if (hooks.length > most) {
    throw new HeadscopeError('INVALID_ARGUMENT', `options.hooks: expected at most ${most} hook ` +
      `names (this model's hookNames(), each once), got an array of length ${hooks.length}`);
  }
}

// The request of a method of `kind`: args [objectId, ...arguments] -> its result, tensors
// transferred.
function method(kind, name) {
  return (hs, [id, ...args], transfer) => {
    const object = lookup(id, kind);
    // (generate is the Transformer's in builds that have it.)
    if (typeof object[name] !== 'function') {
      throw new HeadscopeError('INVALID_ARGUMENT', `${kind}.${name}: not available in this build ` +
        'of headscope');
    }
    if (kind === 'Transformer' && name === 'forward') checkHooksLength(object, args[1]);
    return resultOut(object[name](...args), transfer) ?? null;
  };
}

const OPS = {
  create(hs, [config]) {
    const mha = hs.createMultiheadAttention(config);
    return { id: register('MultiheadAttention', mha), config: mha.config,
      parameterShapes: mha.parameterShapes() };
  },
  createTransformer(hs, [config]) {
    const model = hs.createTransformer(config);
    return { id: register('Transformer', model), config: model.config,
      parameterShapes: model.parameterShapes(), hookNames: model.hookNames() };
  },
  loadStateDict: method('MultiheadAttention', 'loadStateDict'),
  forward: method('MultiheadAttention', 'forward'),
  trace: method('MultiheadAttention', 'trace'),
  'Transformer.loadStateDict': method('Transformer', 'loadStateDict'),
  'Transformer.stateDict': method('Transformer', 'stateDict'),
  'Transformer.forward': method('Transformer', 'forward'),
  'Transformer.generate': method('Transformer', 'generate'),
  dispose(hs, [id]) {
    // Disposing twice is a no-op, as in the calling thread.
    const entry = objects.get(id);
    if (entry !== undefined) {
      objects.delete(id);
      entry.object.dispose();
    }
    return null;
  },
  runCase(hs, [caseDocument], transfer) {
    return resultOut(hs.runCase(caseDocument), transfer);
  },
  checkCase(hs, [caseDocument, result, options]) {
    // Tensors arrive as plain { data, shape } objects, which is all the comparison reads.
    return hs.checkCase(caseDocument, result, options);
  },
  liveHandles(hs) {
    return hs.liveHandles();
  },
  memory(hs) {
    return hs.memory();
  },
};

function errorOut(e) {
  if (e instanceof HeadscopeError) {
    return e.argument === undefined ? { code: e.code, message: e.message }
      : { code: e.code, message: e.message, argument: e.argument };
  }
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
