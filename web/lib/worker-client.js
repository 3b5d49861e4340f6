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
//   const model = await hs.createTransformer({ vocabSize: 28, maxLen: 32, dModel: 32 });
//   const { logits, hooks } = await model.forward([[1, 2, 3]], { hooks: ['hook_embed'] });
//
// Inputs are copied to the worker (each argument read once, into a structured clone whose buffers
// are then transferred: the caller keeps its arrays); results come back as Tensor objects whose
// buffers were transferred, not copied. Failures reject with the HeadscopeError (same code,
// message and argument) the call would throw in the calling thread; an argument that structured
// clone cannot carry (a Proxy, a function, a symbol, a detached buffer) is INVALID_ARGUMENT
// naming it, and nothing is sent; generate's options object is the exception, its own keys read
// once (as the calling thread reads them) to keep options.signal on this side.
import { HeadscopeError } from './errors.js';
import {
  Tensor, argumentError, checkSimdOption, checkTimeoutMs, describe, describeThrown, quoteInput, readArgument,
  typedArrayName,
} from './tensor.js';

const hasGlobalWorker = typeof Worker === 'function';

async function createWorker(script) {
  if (hasGlobalWorker) return new Worker(script, { type: 'module' });
  const { Worker: NodeWorker } = await import(/* webpackIgnore: true */ 'node:worker_threads');
  // worker_threads takes a path or a URL object; a URL given as a string becomes a URL object.
  const target = typeof script === 'string' && /^(file|data):/i.test(script) ? new URL(script) : script;
  return new NodeWorker(target, workerOptions(globalThis.process?.execArgv ?? []));
}

// A worker inherits the process's execArgv, but refuses --input-type (set by `node -e` and
// `node --input-type=module < script`, which the worker's own file does not need): drop it. An
// execArgv given explicitly is checked, and V8's WebAssembly feature flags
// (--experimental-wasm-relaxed-simd, which Node 20 needs for the relaxed-SIMD build) are refused
// there ("invalid execArgv flags"); they are process-wide, so the worker has them anyway: dropped too.
const V8_WASM_FLAG = /^--(no-)?(experimental[-_])?wasm[-_]/;
function workerOptions(execArgv) {
  const i = execArgv.findIndex((a) => a === '--input-type' || a.startsWith('--input-type='));
  if (i < 0) return {};
  const drop = execArgv[i] === '--input-type' ? 2 : 1;
  return { execArgv: execArgv.filter((a, j) => (j < i || j >= i + drop) && !V8_WASM_FLAG.test(a)) };
}

// How long initWorker() waits for the worker's "ready" before giving up with LOAD_ERROR.
const DEFAULT_READY_TIMEOUT_MS = 60_000;

/**
 * Starts headscope in a worker and resolves once its WebAssembly module is loaded. Settles within
 * `options.timeoutMs` (default 60 s): a worker that never says it is ready is ended (when this
 * call started it) and the promise rejects with LOAD_ERROR. `options.simd` is init()'s, in the
 * worker (default 'auto').
 * @param {Worker | import('node:worker_threads').Worker | string | URL} [worker] a Worker running
 *   './worker.js', or the URL of that script; default: a new Worker running './worker.js'.
 * @param {{ timeoutMs?: number, simd?: 'auto' | 'relaxed' | 'simd128' }} [options]
 * @returns {Promise<RemoteHeadscope>}
 */
export async function initWorker(worker, options = {}) {
  let timeoutMs = DEFAULT_READY_TIMEOUT_MS;
  let simd;
  try {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      throw new HeadscopeError('INVALID_ARGUMENT', `initWorker: options: expected an object, got ${describe(options)}`);
    }
    for (const name of Object.keys(options)) {
      const v = options[name];
      if (name !== 'timeoutMs' && name !== 'simd') {
        throw new HeadscopeError('INVALID_ARGUMENT', `initWorker: options.${quoteInput(name)}: unknown option ` +
          '(expected one of timeoutMs, simd)');
      }
      if (v === undefined) continue;
      if (name === 'simd') simd = checkSimdOption(v, 'initWorker: options.simd');
      else timeoutMs = checkTimeoutMs(v, 'initWorker: options.timeoutMs');
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
  // The worker loads its module once this arrives (worker.js start).
  channel.notifyInit(simd === undefined ? {} : { simd });
  let ready;
  try {
    ready = await channel.ready;
  } catch (e) {
    if (owned) await channel.stop();
    channel.detach();
    throw e;
  } finally {
    clearTimeout(timer);
  }
  channel.idle();
  return RemoteHeadscope.forWorker(channel, ready);
}

// Requests and their replies, matched by id, over one worker.
class Channel {
  constructor(worker, owned) {
    this.worker = worker;
    this.owned = owned;
    this.pending = new Map();  // request id -> { resolve, reject }
    this.runs = new Map();     // training job id -> its TrainingRun's event handler
    this.early = new Map();    // job id -> events that came before the run was registered
    this.generations = new Map();     // generation id -> its generate-done handler
    this.earlyGenerations = new Map();  // generation id -> a generate-done that came first
    this.abandoned = new Set();       // generation ids whose generate-done nobody waits for
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
      const listeners = [['message', onMessage], ['error', onError], ['messageerror', onMessageError],
        ['exit', onExit]];
      for (const [type, listener] of listeners) worker.on(type, listener);
      this.detach = () => {
        for (const [type, listener] of listeners) worker.off?.(type, listener);
      };
    } else if (typeof worker.addEventListener === 'function') {
      const listeners = [['message', onEvent], ['error', onError], ['messageerror', onMessageError]];
      for (const [type, listener] of listeners) worker.addEventListener(type, listener);
      this.detach = () => {
        for (const [type, listener] of listeners) worker.removeEventListener?.(type, listener);
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
      if (data.error) ready.reject(errorIn(data.error));
      else ready.resolve({ kernelTarget: data.kernelTarget, simd: data.simd, methods: data.methods ?? {} });
      return;
    }
    if (data.type === 'train-progress' || data.type === 'train-done') {
      const run = this.runs.get(data.job);
      if (run !== undefined) run(data);
      else this.early.set(data.job, [...(this.early.get(data.job) ?? []), data]);
      if (data.type === 'train-done') {
        this.runs.delete(data.job);
        this.idleIfNothingWaits();
      }
      return;
    }
    if (data.type === 'generate-done') {
      const handler = this.generations.get(data.generation);
      this.generations.delete(data.generation);
      // (Nobody waits for a generation whose caller cancelled it: its end is dropped.)
      if (handler !== undefined) handler(data);
      else if (!this.abandoned.delete(data.generation)) this.earlyGenerations.set(data.generation, data);
      this.idleIfNothingWaits();
      return;
    }
    const request = this.pending.get(data.id);
    if (request === undefined) return;  // a reply nobody waits for (a collected object's dispose)
    this.pending.delete(data.id);
    if (data.ok) request.resolve(data.result);
    else request.reject(errorIn(data.error));
    this.idleIfNothingWaits();
  }

  // Routes a training job's events to `handler` (those that came first, too); the worker stays
  // referenced (Node) until the run ends.
  watchRun(job, handler) {
    this.runs.set(job, handler);
    this.busy();
    const early = this.early.get(job) ?? [];
    this.early.delete(job);
    for (const event of early) {
      handler(event);
      if (event.type === 'train-done') this.runs.delete(job);
    }
    this.idleIfNothingWaits();
  }

  // Routes a generation's generate-done to `handler` (also one that came first); the worker
  // stays referenced (Node) until it comes.
  watchGeneration(generation, handler) {
    const early = this.earlyGenerations.get(generation);
    if (early !== undefined) {
      this.earlyGenerations.delete(generation);
      handler(early);
      return;
    }
    this.generations.set(generation, handler);
    this.busy();
  }

  // A generation whose caller stopped waiting (cancelled): its generate-done is dropped.
  abandonGeneration(generation) {
    if (!this.generations.delete(generation) && !this.earlyGenerations.delete(generation)) {
      this.abandoned.add(generation);
    }
    this.idleIfNothingWaits();
  }

  // `names` name the arguments (null: headscope's own, such as an object id): each is read once
  // into a snapshot (see snapshot()). A disposed object's request is sent all the same: the
  // worker, which serves in order, answers DISPOSED (also when a getter of the arguments disposed
  // it: that dispose was sent first).
  request(op, args, names) {
    let sent;
    try {
      if (this.closed !== null) throw this.closedError();
      sent = snapshot(args, names);
      // The caller's getters ran: one may have ended the worker.
      if (this.closed !== null) throw this.closedError();
    } catch (e) {
      return Promise.reject(e);
    }
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      try {
        this.worker.postMessage({ id, op, args: sent.args }, sent.transfer);
      } catch (e) {
        // Not expected once every argument is a clone of its own; said in the same words.
        reject(new HeadscopeError('INVALID_ARGUMENT', `${op}: the arguments cannot be sent to the ` +
          `worker (${e?.message ?? e})`));
        return;
      }
      this.pending.set(id, { resolve, reject });
      this.busy();
    });
  }

  closedError() {
    return new HeadscopeError(this.closed.code, this.closed.message);
  }

  // The first message: init()'s options for the worker, which answers with 'ready'.
  notifyInit(options) {
    try {
      this.worker.postMessage({ type: 'init', options });
    } catch (e) {
      this.fail('INTERNAL', `headscope worker: could not send it its options (${e?.message ?? e})`);
    }
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
    const runs = [...this.runs.values()];
    this.runs.clear();
    for (const run of runs) run({ type: 'train-done', status: 'error', error: { code, message } });
    const generations = [...this.generations.values()];
    this.generations.clear();
    for (const g of generations) g({ type: 'generate-done', ok: false, error: { code, message } });
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

  // Idle once no request waits for a reply and no training run or generation is active.
  idleIfNothingWaits() {
    if (this.pending.size === 0 && this.runs.size === 0 && this.generations.size === 0) this.idle();
  }

  idle() {
    if (this.owned && typeof this.worker.unref === 'function') this.worker.unref();
  }
}

function errorIn(error) {
  return new HeadscopeError(error.code, error.message,
    error.argument === undefined ? undefined : { argument: error.argument });
}

/**
 * The arguments of one request, each read once into a structured clone of its own, which the
 * worker gets with its buffers transferred (one copy in all, as postMessage alone makes). An
 * argument given twice (self-attention's query, key and value) is cloned once. A getter that
 * throws is INVALID_ARGUMENT naming the argument (index.js's words); so is a value that cannot
 * cross, before anything is sent.
 * @returns {{ args: unknown[], transfer: ArrayBuffer[] }}
 */
function snapshot(args, names) {
  const out = new Array(args.length);
  const buffers = new Set();
  for (let i = 0; i < args.length; i++) {
    const value = args[i];
    const first = typeof value === 'object' && value !== null ? args.indexOf(value) : i;
    if (first < i) {
      out[i] = out[first];
    } else if (names[i] === null || value === null ||
        (typeof value !== 'object' && typeof value !== 'function' && typeof value !== 'symbol')) {
      out[i] = value;   // a primitive: nothing to read, and a string is copied once by postMessage
    } else {
      try {
        out[i] = structuredClone(value);
      } catch (e) {
        throw cloneError(e, names[i]);
      }
      collectBuffers(out[i], buffers, 0);
    }
  }
  return { args: out, transfer: [...buffers] };
}

function cloneError(e, name) {
  if (typeof DOMException === 'function' && e instanceof DOMException && e.name === 'DataCloneError') {
    return new HeadscopeError('INVALID_ARGUMENT', `${name}: cannot be sent to the worker ` +
      `(${describeThrown(e)}); expected plain values (objects, arrays, numbers, strings, typed ` +
      'arrays), not a Proxy, a function, a symbol or a detached buffer', { cause: e });
  }
  return argumentError(e, name);
}

// The ArrayBuffers of a snapshot's typed arrays (a SharedArrayBuffer is shared, not moved), down
// to where tensors sit: stateDict -> entry -> data, options -> headGates -> data, result -> hooks
// -> tensor -> data. Nested arrays (of numbers) hold none.
function collectBuffers(value, buffers, depth) {
  if (value === null || typeof value !== 'object' || depth > 3 || Array.isArray(value)) return;
  const buffer = ArrayBuffer.isView(value) ? value.buffer : value;
  if (buffer instanceof ArrayBuffer) {
    buffers.add(buffer);
    return;
  }
  for (const v of value instanceof Map ? value.values() : Object.values(value)) {
    collectBuffers(v, buffers, depth + 1);
  }
}

// A result as the worker sends it (resultOut in worker.js): each { data, shape } a Tensor, groups
// of them (headStats, hooks, a stateDict) objects of Tensors, anything else as it is.
function resultIn(value) {
  if (value === null || typeof value !== 'object') return value;
  if (typedArrayName(value.data) !== undefined && Array.isArray(value.shape)) return new Tensor(value.data, value.shape);
  if (Array.isArray(value)) return value.map(resultIn);
  const out = {};
  for (const [name, v] of Object.entries(value)) out[name] = resultIn(v);
  return out;
}


// `this` of a method called detached (`const f = model.forward; f()`) or on a look-alike object:
// index.js's error, as the calling thread's objects give it.
function wrongThis(className, method, self) {
  return new HeadscopeError('INVALID_ARGUMENT', `${className}.${method}: called on ${describe(self)}, ` +
    `not on a ${className}; call it as object.${method}(...) (a method taken off its object loses its this)`);
}

// generate's options without `signal`, which stays here (an AbortSignal cannot cross; the
// worker's calling-thread generate would refuse it as an unknown option): the other options read
// once, into a plain object, which is what is sent. Options that are no plain object go as given,
// for the worker to refuse in the calling thread's words.
function withoutSignal(options) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    return { signal: undefined, sent: options };
  }
  return readArgument('options', () => {
    const sent = {};
    let signal;
    for (const key of Object.keys(options)) {
      const value = options[key];
      if (key === 'signal') signal = value;
      else sent[key] = value;
    }
    if (signal === null) signal = undefined;
    if (signal !== undefined && !isAbortSignal(signal)) {
      throw new HeadscopeError('INVALID_ARGUMENT', `options.signal: expected an AbortSignal (or ` +
        `undefined), got ${describe(signal)}`);
    }
    return { signal, sent };
  });
}

function isAbortSignal(value) {
  if (typeof AbortSignal === 'function' && value instanceof AbortSignal) return true;
  return typeof value === 'object' && typeof value.aborted === 'boolean' &&
    typeof value.addEventListener === 'function' && typeof value.removeEventListener === 'function';
}

function cancelledError(signal) {
  const reason = signal.reason;
  return new HeadscopeError('CANCELLED', 'generate: cancelled by the caller (options.signal was ' +
    `aborted${reason instanceof Error && reason.message ? `: ${quoteInput(reason.message)}` : ''})`, { cause: reason });
}

// ---- The engine's methods, offered generically ----
// The worker tells which methods the engine and each kind of object serve ({ name: [parameter
// names] }: the ready message, a create's reply; worker.js methodTable, read from index.js's
// classes), and each becomes an async method of the remote class here on first sight: a method
// added to index.js is available through initWorker() with no code in either file. The methods
// defined below by hand are the ones that differ in a worker: forward's `out`, a chunked
// generate with its signal, train, dispose, and the constants answered without a round trip.

// Defines the methods of `table` that `Class` does not define itself, each a 'call' request for
// the object's id (`idOf(self)`: 0 for the engine), brand-checked by `check`. `Class` is one
// engine's own subclass (RemoteHeadscope's constructor makes them), so two workers serving
// different methods never share what they offer.
function offerMethods(Class, table, check, idOf) {
  for (const [name, params] of Object.entries(table)) {
    if (name in Class.prototype) continue;
    const method = {
      async [name](...args) {
        const self = check(this, name);
        return resultIn(await self._channel.request('call', [idOf(self), name, ...args],
          [null, null, ...params, ...args.slice(params.length).map((_, i) => `arguments[${params.length + i}]`)]));
      },
    }[name];
    Object.defineProperty(Class.prototype, name, { value: method, writable: true, configurable: true });
  }
}

/** init()'s API, asynchronous, in a worker; the engine's methods come from the worker (offerMethods). */
class RemoteHeadscope {
  #brand = true;

  static check(self, method) {
    if (self === null || typeof self !== 'object' || !(#brand in self)) throw wrongThis('Headscope', method, self);
    return self;
  }

  // The engine of a worker that serves `methods`: an instance of this engine's own subclass,
  // which offers them (offerMethods), with its own subclasses for the objects it creates.
  static forWorker(channel, ready) {
    const Engine = class RemoteEngine extends RemoteHeadscope {};
    offerMethods(Engine, ready.methods, (self, name) => RemoteHeadscope.check(self, name), () => 0);
    return new Engine(channel, ready);
  }

  constructor(channel, { kernelTarget, simd }) {
    this._channel = channel;
    // An object dropped without dispose() still frees its memory in the worker when collected.
    this._finalizer = new FinalizationRegistry((id) => channel.notify('dispose', [id]));
    /** SIMD target the worker's kernels run on: 'WASM'. */
    this.kernelTarget = kernelTarget;
    /** The worker's WebAssembly build: 'relaxed' or 'simd128' (init()'s hs.simd). */
    this.simd = simd;
    // This engine's classes of remote objects (their methods are the worker's).
    this._classes = {
      MultiheadAttention: class extends RemoteMultiheadAttention {},
      Transformer: class extends RemoteTransformer {},
    };
  }

  /** The Worker (browser) or worker_threads Worker serving this API. */
  get worker() {
    return RemoteHeadscope.check(this, 'worker')._channel.worker;
  }

  /** @param {object} config torch.nn.MultiheadAttention's constructor arguments, camelCase. */
  async createMultiheadAttention(config) {
    const channel = RemoteHeadscope.check(this, 'createMultiheadAttention')._channel;
    return new this._classes.MultiheadAttention(this,
      await channel.request('create', ['MultiheadAttention', config], [null, 'config']));
  }

  /** @param {object} config createTransformer's config (index.js), in the worker. */
  async createTransformer(config) {
    const channel = RemoteHeadscope.check(this, 'createTransformer')._channel;
    return new this._classes.Transformer(this, await channel.request('create', ['Transformer', config], [null, 'config']));
  }

  /**
   * init()'s checkCase, in the worker: only the result's fields the comparison reads are sent
   * (its tensors and loss), so a caller's own additions (a callback, headStats) stay behind.
   */
  async checkCase(caseDocument, result, options) {
    const channel = RemoteHeadscope.check(this, 'checkCase')._channel;
    return channel.request('call', [0, 'checkCase', caseDocument, caseResult(result), options],
      [null, null, 'caseDocument', 'result', 'options']);
  }

  /**
   * Ends the worker, which frees everything it held: every object of this API counts as
   * disposed, and pending and later calls reject with HeadscopeError DISPOSED.
   * @returns {Promise<void>}
   */
  async terminate() {
    return RemoteHeadscope.check(this, 'terminate')._channel.terminate();
  }
}

// The fields checkCase reads of a result of either case kind ({ output, weights } or { logits,
// hooks, loss }), each read once.
const CASE_RESULT_FIELDS = ['output', 'weights', 'logits', 'hooks', 'loss'];
function caseResult(result) {
  if (result === null || typeof result !== 'object') return result;
  return readArgument('result', () => {
    const fields = {};
    for (const name of CASE_RESULT_FIELDS) {
      const value = result[name];
      if (value !== undefined) fields[name] = value;
    }
    return fields;
  });
}

/** What the worker's objects share: an id in the worker, its requests, its constants. */
class RemoteObject {
  // The class name ('MultiheadAttention', 'Transformer'): a brand no look-alike can carry.
  #kind;

  static check(self, kind, method) {
    if (self === null || typeof self !== 'object' || !(#kind in self) || self.#kind !== kind) {
      throw wrongThis(kind, method, self);
    }
    return self;
  }

  constructor(owner, kind, { id, config, methods, constants }) {
    this.#kind = kind;
    this._owner = owner;
    this._channel = owner._channel;
    this._id = id;
    this._disposed = false;
    this._constants = constants;
    /** The config with the defaults filled in (PyTorch's, for a MultiheadAttention). */
    this.config = Object.freeze(config);
    owner._finalizer.register(this, id, this);
    const Class = this.constructor;  // (this engine's own subclass)
    offerMethods(Class, methods, (self, name) => Class.check(self, name), (self) => self._id);
  }

  // A constant's value as the worker sent it at creation, copied (parameterShapes, hookNames).
  _constant(name) {
    return structuredClone(this._constants[name]);
  }

  // A request for this object: [id, ...args], the arguments named by `names`.
  _request(op, args, names) {
    return this._channel.request(op, [this._id, ...args], [null, ...names]);
  }

  _dispose() {
    if (this._disposed) return Promise.resolve();
    this._disposed = true;
    this._owner._finalizer.unregister(this);
    // (A worker that was terminated or died has nothing left to free.)
    return this._channel.request('dispose', [this._id], [null]).then(() => {}, () => {});
  }

  // Disposed, or its worker is gone (terminated or died), which freed it.
  _isDisposed() {
    return this._disposed || this._channel.closed !== null;
  }
}

// The base of the remote class of one kind of object ('MultiheadAttention', 'Transformer'): its
// brand check, and the methods every kind has, each checking `this` as that kind (so a detached
// one names it: "Transformer.disposed: called on ...").
function remoteKind(kind) {
  const Kind = class extends RemoteObject {
    constructor(owner, created) {
      super(owner, kind, created);
    }

    static check(self, method) {
      return RemoteObject.check(self, kind, method);
    }

    /** state_dict keys and shapes of this config, in PyTorch's (the reference module's) order. */
    parameterShapes() {
      return Kind.check(this, 'parameterShapes')._constant('parameterShapes');
    }

    /**
     * Frees the object's memory in the worker; later calls reject with DISPOSED. Never rejects (a
     * worker that is gone has freed everything already).
     * @returns {Promise<void>}
     */
    async dispose() {
      return Kind.check(this, 'dispose')._dispose();
    }

    /** True once dispose() was called, or once the worker is gone. */
    get disposed() {
      return Kind.check(this, 'disposed')._isDisposed();
    }
  };
  return Kind;
}

/** A MultiheadAttention living in the worker; every method returns a promise. */
class RemoteMultiheadAttention extends remoteKind('MultiheadAttention') {
  /** @returns {Promise<{ output: Tensor, weights: Tensor | null }>} */
  async forward(query, key, value, options) {
    RemoteMultiheadAttention.check(this, 'forward');
    // The result comes back as arrays transferred from the worker; writing into the caller's
    // array would take another copy and hide that. Refused rather than silently ignored.
    if (options !== null && typeof options === 'object' && options.out !== undefined &&
        options.out !== null) {
      throw new HeadscopeError('INVALID_ARGUMENT', 'options.out: not available through ' +
        'initWorker() (results arrive as arrays transferred from the worker); omit it');
    }
    return resultIn(await this._request('call', ['forward', query, key, value, options],
      [null, 'query', 'key', 'value', 'options']));
  }
}

/**
 * A training run in the worker (RemoteTransformer.train). `done` resolves when it ends with
 * { status: 'done' | 'cancelled' | 'refused' | 'error', step, refused?, loss?, gradNorm?, error? }
 * (refused: a step the optimizer would not take, see trainStep, with that step's loss and norm;
 * error: a HeadscopeError, after the progress of the steps taken); it never rejects. Requests
 * that change the model during a run (setOptimizer, loadStateDict, trainStep) are served
 * between chunks, so the step they land at depends on timing.
 */
class TrainingRun {
  constructor(model, job, onProgress) {
    this._model = model;
    this._job = job;
    /** Steps done so far (as of the last progress event). */
    this.step = 0;
    /** 'running' | 'paused' | 'done' | 'cancelled' | 'refused' | 'error' */
    this.status = 'running';
    this.done = new Promise((resolve) => {
      model._channel.watchRun(job, (event) => {
        if (event.step !== undefined && event.step !== null) this.step = event.step;
        if (event.type === 'train-progress') {
          if (onProgress !== undefined) {
            try {
              onProgress({ step: event.step, losses: event.losses, gradNorms: event.gradNorms,
                elapsedMs: event.elapsedMs });
            } catch {
              // A throwing callback must not end the run's bookkeeping.
            }
          }
          return;
        }
        this.status = event.status;
        const out = { status: event.status, step: this.step };
        if (event.refused !== undefined) {
          out.refused = event.refused;
          out.loss = event.loss;
          out.gradNorm = event.gradNorm;
        }
        if (event.error !== undefined) out.error = errorIn(event.error);
        resolve(out);
      });
    });
  }

  async _control(action) {
    const r = await this._model._request('trainControl', [this._job, action], [null, null]);
    if (r.status === 'paused' || r.status === 'running') this.status = r.status;
    if (r.step !== null) this.step = r.step;
    return r;
  }

  /** Stops after the current chunk; resolves with { status: 'paused', step } (the step it stopped at). */
  pause() { return this._control('pause'); }
  /** Continues a paused run. */
  resume() { return this._control('resume'); }
  /** Ends the run after the current chunk; `done` then resolves with status 'cancelled'. */
  cancel() { return this._control('cancel'); }
}

/** A Transformer (hs.createTransformer) living in the worker; every method returns a promise. */
class RemoteTransformer extends remoteKind('Transformer') {
  /** The hook names forward({ hooks }) accepts for this config. */
  hookNames() {
    return RemoteTransformer.check(this, 'hookNames')._constant('hookNames');
  }




  /**
   * The calling thread's generate(prompt, options), in the worker: its tensors, the same bits.
   * The worker draws the tokens in chunks of about 30 ms and serves other requests between them
   * (one generation per model at a time: later ones wait their turn). options.signal, an
   * AbortSignal (not sent to the worker), cancels it: the promise rejects at once with
   * HeadscopeError CANCELLED and the worker ends the generation at its next chunk boundary,
   * freeing its caches. A change of the model's weights between chunks (loadStateDict, trainStep,
   * train) ends it with CANCELLED too.
   */
  async generate(prompt, options) {
    RemoteTransformer.check(this, 'generate');
    const { signal, sent } = withoutSignal(options);
    if (signal !== undefined && signal.aborted) throw cancelledError(signal);
    const { generation } = await this._request('generate', [prompt, sent], ['prompt', 'options']);
    const channel = this._channel;
    return new Promise((resolve, reject) => {
      let onAbort = null;
      const settle = (event) => {
        if (onAbort !== null) signal.removeEventListener('abort', onAbort);
        if (event.ok) resolve(resultIn(event.result));
        else reject(errorIn(event.error));
      };
      if (signal !== undefined) {
        onAbort = () => {
          onAbort = null;
          channel.abandonGeneration(generation);
          // Nothing to wait for: the worker answers it between chunks, and its end is dropped.
          this._request('generateCancel', [generation], [null]).catch(() => {});
          reject(cancelledError(signal));
        };
        if (signal.aborted) {  // during the request's round trip
          onAbort();
          return;
        }
        signal.addEventListener('abort', onAbort, { once: true });
      }
      channel.watchGeneration(generation, settle);
    });
  }




  /**
   * Trains in the worker without a request per step: spec.steps trainStep calls (with the
   * optimizer setOptimizer set) on batches of a built-in task (spec.task: { name, ...options }
   * as makeTask takes them, spec.batchSize; batch index spec.startIndex + step) or on
   * spec.batches ([{ tokens, targets }], cycled). The worker runs the steps in chunks of about
   * spec.chunkMs (default 30) ms and serves other requests between them (a forward to draw
   * patterns, pause, cancel), so neither thread freezes. options.onProgress({ step, losses,
   * gradNorms, elapsedMs }) gets each chunk: the steps done so far and the chunk's per-step
   * losses and gradient norms (Float64Arrays). Resolves at once to a TrainingRun.
   * @returns {Promise<TrainingRun>}
   */
  async train(spec, options = {}) {
    RemoteTransformer.check(this, 'train');
    const onProgress = options?.onProgress;
    if (onProgress !== undefined && typeof onProgress !== 'function') {
      throw new HeadscopeError('INVALID_ARGUMENT', `options.onProgress: expected a function, got ${typeof onProgress}`);
    }
    const { job } = await this._request('train', [spec], ['spec']);
    return new TrainingRun(this, job, onProgress);
  }
}
