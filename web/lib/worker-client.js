// headscope off the calling thread: the API of init(), asynchronous, served by './worker.js' in a
// Web Worker (browsers) or a worker_threads Worker (Node).
//
//   import { initWorker } from 'headscope';
//   const hs = await initWorker();                 // or initWorker(myWorker) / initWorker(url)
//   const mha = await hs.createMultiheadAttention({ embedDim: 4, numHeads: 2 });
//   await mha.loadStateDict(stateDict);
//   const { output, weights } = await mha.forward(query, key, value, { needWeights: true });
//   output.toArray();
//   await hs.terminate();
//
// Inputs are copied to the worker (structured clone: the caller keeps its arrays); results come
// back as Tensor objects whose buffers were transferred, not copied. Failures reject with the
// HeadscopeError (same code and message) the call would throw in the calling thread.
import { HeadscopeError } from './errors.js';
import { Tensor, checkTimeoutMs, describe } from './tensor.js';

const hasGlobalWorker = typeof Worker === 'function';

async function createWorker(script) {
  if (hasGlobalWorker) return new Worker(script, { type: 'module' });
  const { Worker: NodeWorker } = await import(/* webpackIgnore: true */ 'node:worker_threads');
  // worker_threads takes a path or a URL object; a URL given as a string becomes a URL object.
  const target = typeof script === 'string' && /^(file|data):/i.test(script) ? new URL(script) : script;
  return new NodeWorker(target, workerOptions(globalThis.process?.execArgv ?? []));
}

// A worker inherits the process's execArgv, but refuses --input-type (set by `node -e` and
// `node --input-type=module < script`, which the worker's own file does not need): drop it.
function workerOptions(execArgv) {
  const i = execArgv.findIndex((a) => a === '--input-type' || a.startsWith('--input-type='));
  if (i < 0) return {};
  const drop = execArgv[i] === '--input-type' ? 2 : 1;
  return { execArgv: execArgv.filter((_, j) => j < i || j >= i + drop) };
}

// How long initWorker() waits for the worker's "ready" before giving up with LOAD_ERROR.
const DEFAULT_READY_TIMEOUT_MS = 60_000;

/**
 * Starts headscope in a worker and resolves once its WebAssembly module is loaded. Settles within
 * `options.timeoutMs` (default 60 s): a worker that never says it is ready is ended (when this
 * call started it) and the promise rejects with LOAD_ERROR.
 * @param {Worker | import('node:worker_threads').Worker | string | URL} [worker] a Worker running
 *   './worker.js', or the URL of that script; default: a new Worker running './worker.js'.
 * @param {{ timeoutMs?: number }} [options]
 * @returns {Promise<RemoteHeadscope>}
 */
export async function initWorker(worker, options = {}) {
  let timeoutMs = DEFAULT_READY_TIMEOUT_MS;
  try {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      throw new HeadscopeError('INVALID_ARGUMENT', `initWorker: options: expected an object, got ${describe(options)}`);
    }
    for (const name of Object.keys(options)) {
      const v = options[name];
      if (name !== 'timeoutMs') {
        throw new HeadscopeError('INVALID_ARGUMENT', `initWorker: options.${name}: unknown option ` +
          '(expected one of timeoutMs)');
      }
      if (v === undefined) continue;
      timeoutMs = checkTimeoutMs(v, 'initWorker: options.timeoutMs');
    }
  } catch (e) {
    if (e instanceof HeadscopeError) throw e;
    throw new HeadscopeError('INVALID_ARGUMENT', `initWorker: options: reading it threw (${e?.message ?? e})`);
  }
  let target = worker;
  if (target === undefined || target === null) {
    target = await createWorker(new URL('./worker.js', import.meta.url)).catch((e) => {
      throw new HeadscopeError('INTERNAL', `headscope worker: could not start (${e?.message ?? e})`);
    });
  } else if (typeof target === 'string' || target instanceof URL) {
    target = await createWorker(target).catch((e) => {
      throw new HeadscopeError('INVALID_ARGUMENT', `worker: could not start a worker from ` +
        `${JSON.stringify(String(worker))} (${e?.message ?? e})`);
    });
  } else if (typeof target !== 'object' || typeof target.postMessage !== 'function') {
    throw new HeadscopeError('INVALID_ARGUMENT', 'worker: expected a Worker, the URL of headscope\'s ' +
      `worker.js (string or URL) or undefined, got ${describe(target)}`);
  }
  const owned = target !== worker;
  const channel = new Channel(target, owned);
  const timer = setTimeout(() => channel.fail('LOAD_ERROR', 'initWorker: the worker did not ' +
    `report ready within ${timeoutMs} ms (options.timeoutMs); is it running headscope's worker.js?`),
  timeoutMs);
  let kernelTarget;
  try {
    kernelTarget = await channel.ready;
  } catch (e) {
    if (owned) await channel.stop();
    channel.detach();
    throw e;
  } finally {
    clearTimeout(timer);
  }
  channel.idle();
  return new RemoteHeadscope(channel, kernelTarget);
}

// Requests and their replies, matched by id, over one worker.
class Channel {
  constructor(worker, owned) {
    this.worker = worker;
    this.owned = owned;
    this.pending = new Map();  // request id -> { resolve, reject }
    this.nextId = 1;
    this.closed = null;        // { code, message } once the worker cannot be used
    this.ready = new Promise((resolve, reject) => {
      this.readyPending = { resolve, reject };
    });
    const onMessage = (data) => this.receive(data);
    const onError = (e) => this.fail('INTERNAL', `headscope worker: the worker failed` +
      (e?.message ? ` (${e.message})` : ' (it could not load its script, or threw)'));
    const onMessageError = () => this.fail('INTERNAL', 'headscope worker: a reply could not be received');
    const onExit = (code) => this.fail('INTERNAL', `headscope worker: the worker exited (code ${code})`);
    const onEvent = (event) => onMessage(event.data);
    if (typeof worker.on === 'function') {
      // node:worker_threads: listeners get the data itself.
      worker.on('message', onMessage);
      worker.on('error', onError);
      worker.on('messageerror', onMessageError);
      worker.on('exit', onExit);
      this.detach = () => {
        worker.off?.('message', onMessage);
        worker.off?.('error', onError);
        worker.off?.('messageerror', onMessageError);
        worker.off?.('exit', onExit);
      };
    } else if (typeof worker.addEventListener === 'function') {
      worker.addEventListener('message', onEvent);
      worker.addEventListener('error', onError);
      worker.addEventListener('messageerror', onMessageError);
      this.detach = () => {
        worker.removeEventListener?.('message', onEvent);
        worker.removeEventListener?.('error', onError);
        worker.removeEventListener?.('messageerror', onMessageError);
      };
    } else {
      worker.onmessage = (event) => onMessage(event.data);
      worker.onerror = onError;
      worker.onmessageerror = onMessageError;
      this.detach = () => {
        worker.onmessage = null;
        worker.onerror = null;
        worker.onmessageerror = null;
      };
    }
  }

  receive(data) {
    if (data === null || typeof data !== 'object') return;
    if (data.type === 'ready') {
      const ready = this.readyPending;
      if (ready === null) return;
      this.readyPending = null;
      if (data.error) ready.reject(new HeadscopeError(data.error.code, data.error.message));
      else ready.resolve(data.kernelTarget);
      return;
    }
    const request = this.pending.get(data.id);
    if (request === undefined) return;  // a reply nobody waits for (a collected object's dispose)
    this.pending.delete(data.id);
    if (data.ok) request.resolve(data.result);
    else request.reject(new HeadscopeError(data.error.code, data.error.message));
    if (this.pending.size === 0) this.idle();
  }

  request(op, args) {
    if (this.closed !== null) {
      return Promise.reject(new HeadscopeError(this.closed.code, this.closed.message));
    }
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      try {
        this.worker.postMessage({ id, op, args });
      } catch (e) {
        // DataCloneError: something in the arguments (a function, say) cannot be sent.
        reject(new HeadscopeError('INVALID_ARGUMENT', `${op}: the arguments cannot be sent to the ` +
          `worker (${e?.message ?? e})`));
        return;
      }
      this.pending.set(id, { resolve, reject });
      this.busy();
    });
  }

  // A request without a reply to wait for.
  notify(op, args) {
    if (this.closed !== null) return;
    try {
      this.worker.postMessage({ id: 0, op, args });
    } catch {
      // Best effort.
    }
  }

  // Rejects everything pending and every later request with `code`.
  fail(code, message) {
    if (this.closed !== null) return;
    this.closed = { code, message };
    if (this.readyPending !== null) {
      this.readyPending.reject(new HeadscopeError(code, message));
      this.readyPending = null;
    }
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const request of pending) request.reject(new HeadscopeError(code, message));
    if ((code === 'INTERNAL' || code === 'LOAD_ERROR') && this.owned) this.stop();
  }

  stop() {
    try {
      return Promise.resolve(this.worker.terminate?.() ?? this.worker.close?.()).then(() => {}, () => {});
    } catch {
      return Promise.resolve();
    }
  }

  async terminate() {
    this.fail('DISPOSED', 'headscope worker: terminated; call initWorker() again');
    await this.stop();
  }

  // A Node worker this client created keeps the process alive only while a request is pending.
  busy() {
    if (this.owned && typeof this.worker.ref === 'function') this.worker.ref();
  }

  idle() {
    if (this.owned && typeof this.worker.unref === 'function') this.worker.unref();
  }
}

function tensorsIn(result) {
  const out = {};
  for (const [name, t] of Object.entries(result)) {
    // headStats is a group of tensors ({ entropy, distance, maxWeight }), as in-thread.
    out[name] = t === null ? null : name === 'headStats' ? tensorsIn(t) : new Tensor(t.data, t.shape);
  }
  return out;
}

/** init()'s API, asynchronous, in a worker. */
class RemoteHeadscope {
  constructor(channel, kernelTarget) {
    this._channel = channel;
    // An object dropped without dispose() still frees its memory in the worker when collected.
    this._finalizer = new FinalizationRegistry((id) => channel.notify('dispose', [id]));
    /** SIMD target the worker's kernels run on: 'WASM' (SIMD128). */
    this.kernelTarget = kernelTarget;
  }

  /** The Worker (browser) or worker_threads Worker serving this API. */
  get worker() {
    return this._channel.worker;
  }

  /** @param {object} config torch.nn.MultiheadAttention's constructor arguments, camelCase. */
  async createMultiheadAttention(config) {
    const created = await this._channel.request('create', [config]);
    return new RemoteMultiheadAttention(this, created);
  }

  /** Runs one case document (shared/spec/case-format.md) in the worker: { output, weights }. */
  async runCase(caseDocument) {
    return tensorsIn(await this._channel.request('runCase', [caseDocument]));
  }

  /** init()'s checkCase, run in the worker: { ok, maxRelativeError, detail }. */
  checkCase(caseDocument, result, options) {
    const plain = result !== null && typeof result === 'object'
      ? { output: result.output ?? null, weights: result.weights ?? null } : result;
    return this._channel.request('checkCase', [caseDocument, plain, options]);
  }

  /** Objects created in the worker and not yet disposed. */
  liveHandles() {
    return this._channel.request('liveHandles', []);
  }

  /** The worker's { wasmBytes, heapInUse }. */
  memory() {
    return this._channel.request('memory', []);
  }

  /**
   * Ends the worker. Pending and later calls reject with HeadscopeError DISPOSED.
   * @returns {Promise<void>}
   */
  terminate() {
    return this._channel.terminate();
  }
}

/** A MultiheadAttention living in the worker; every method returns a promise. */
class RemoteMultiheadAttention {
  constructor(owner, { id, config, parameterShapes }) {
    this._owner = owner;
    this._channel = owner._channel;
    this._id = id;
    this._disposed = false;
    this._parameterShapes = parameterShapes;
    /** The constructor arguments with PyTorch's defaults filled in. */
    this.config = Object.freeze(config);
    owner._finalizer.register(this, id, this);
  }

  /** state_dict keys this config has, with their shapes, in PyTorch's order. */
  parameterShapes() {
    return Object.fromEntries(Object.entries(this._parameterShapes).map(([k, s]) => [k, s.slice()]));
  }

  /** @returns {Promise<void>} */
  async loadStateDict(stateDict, options) {
    await this._channel.request('loadStateDict', [this._id, stateDict, options]);
  }

  /** @returns {Promise<{ output: Tensor, weights: Tensor | null }>} */
  async forward(query, key, value, options) {
    // The result comes back as arrays transferred from the worker; writing into the caller's
    // array would take another copy and hide that. Refused rather than silently ignored.
    if (options !== null && typeof options === 'object' && options.out !== undefined &&
        options.out !== null) {
      throw new HeadscopeError('INVALID_ARGUMENT', 'options.out: not available through ' +
        'initWorker() (results arrive as arrays transferred from the worker); omit it');
    }
    return tensorsIn(await this._channel.request('forward', [this._id, query, key, value, options]));
  }

  /** @returns {Promise<{ q, k, v, scores, weights, headOutputs, concat, output }>} of Tensors */
  async trace(query, key, value, options) {
    return tensorsIn(await this._channel.request('trace', [this._id, query, key, value, options]));
  }

  /**
   * Frees the object's memory in the worker; later calls reject with DISPOSED. Never rejects (a
   * worker that is gone has freed everything already).
   * @returns {Promise<void>}
   */
  async dispose() {
    if (this._disposed) return;
    this._disposed = true;
    this._owner._finalizer.unregister(this);
    try {
      await this._channel.request('dispose', [this._id]);
    } catch {
      // The worker was terminated or died: nothing left to free.
    }
  }

  /** True once dispose() was called. */
  get disposed() {
    return this._disposed;
  }
}
