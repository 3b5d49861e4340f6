// headscope: torch.nn.MultiheadAttention's forward pass, PyTorch-exact, in WebAssembly.
//
//   import { init } from 'headscope';
//   const hs = await init();
//   const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2 });
//   mha.loadStateDict(stateDict);
//   const { output, weights } = mha.forward(query, key, value, { needWeights: true });
//
// Works unchanged in browsers (the .wasm is found next to this file) and in Node >= 20 (the
// .wasm is read from disk and handed to the module, which cannot fetch() a file path).
// init({ threads: 2 }) loads the multi-threaded build from ./mt/ instead (same results, bit for
// bit; browsers need a cross-origin isolated page).
import createHeadscopeCore from './headscope_core.js';
import { HeadscopeError } from './errors.js';
import { MAX_DIM, Tensor, describe, toFloatTensor, toMask } from './tensor.js';
import { parseCase, compareWithExpected } from './case.js';

export { HeadscopeError, Tensor };
export { initWorker } from './worker-client.js';

const isNode = typeof process === 'object' && typeof process.versions?.node === 'string' &&
  typeof window === 'undefined';

// One loaded module per thread count: init() and init({ threads: 1 }) share the single-threaded
// module, init({ threads: n }) gets a multi-threaded one with n threads. Each is loaded once; a
// failed load is forgotten, so it can be retried.
const apiPromises = new Map();
// The C++ pool's limit (src/headscope/parallel.h kMaxThreads).
const MAX_THREADS = 64;

/**
 * Loads and compiles the WebAssembly module once; later calls with the same `threads` return the
 * same API. threads >= 2 loads the multi-threaded module (needs SharedArrayBuffer: in browsers a
 * cross-origin isolated page, i.e. COOP/COEP headers).
 * @param {{ wasmBinary?: ArrayBuffer | Uint8Array, wasmUrl?: string | URL, threads?: number }} [options]
 */
export function init(options = {}) {
  let threads;
  try {
    threads = checkInitOptions(options);
  } catch (e) {
    return Promise.reject(e);
  }
  let apiPromise = apiPromises.get(threads);
  if (apiPromise === undefined) {
    const file = threads === 1 ? 'headscope_core.wasm' : 'mt/headscope_core_mt.wasm';
    apiPromise = (threads === 1 ? loadCore(options) : loadCoreMt(options, threads))
      .then((core) => new Headscope(core), (e) => {
        if (e instanceof HeadscopeError) throw e;
        throw new HeadscopeError('LOAD_ERROR', `init: could not load ${file} ` +
          `(${e?.message ?? e}); in a source checkout, build it with \`npm run build\``);
      });
    apiPromises.set(threads, apiPromise);
    apiPromise.catch(() => { apiPromises.delete(threads); });  // a failed load can be retried
  }
  return apiPromise;
}

// Validates init()'s options; returns the thread count (1 unless options.threads says otherwise).
function checkInitOptions(options) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    fail('INVALID_ARGUMENT', `init: options: expected an object, got ${describe(options)}`);
  }
  checkKeys(options, { wasmBinary: 0, wasmUrl: 0, threads: 0 }, 'init: options');
  const threads = options.threads ?? 1;
  if (typeof threads !== 'number' || !Number.isInteger(threads) || threads < 1 ||
      threads > MAX_THREADS) {
    fail('INVALID_ARGUMENT', `init: options.threads: expected an integer in [1, ${MAX_THREADS}] ` +
      `(1: the single-threaded module), got ${describe(threads)}`);
  }
  return threads;
}

async function loadCore({ wasmBinary, wasmUrl } = {}) {
  const url = wasmUrl ?? new URL('./headscope_core.wasm', import.meta.url);
  // Emscripten would print its own abort lines on stderr; failures reach the caller as a rejected
  // promise instead.
  const args = { print: () => {}, printErr: () => {} };
  if (wasmBinary) {
    args.wasmBinary = wasmBinary;
  } else if (isNode) {
    const { readFile } = await import('node:fs/promises');
    args.wasmBinary = await readFile(url);
  } else {
    args.locateFile = (path) => (path.endsWith('.wasm') ? String(url) : path);
  }
  return createHeadscopeCore(args);
}

// The multi-threaded module (web/lib/mt/): imported only when asked for, so single-threaded users
// never fetch it. Its threads live in Emscripten's pthread workers (Web Workers, or worker_threads
// in Node), all started before the factory resolves (headscopeWorkers: PTHREAD_POOL_SIZE).
async function loadCoreMt({ wasmBinary, wasmUrl } = {}, threads) {
  // WebAssembly threads share one memory, a SharedArrayBuffer: browsers provide it only to
  // cross-origin isolated pages.
  if (typeof SharedArrayBuffer !== 'function' ||
      (!isNode && globalThis.crossOriginIsolated !== true)) {
    throw new HeadscopeError('LOAD_ERROR', `init: options.threads = ${threads} needs ` +
      'SharedArrayBuffer, which browsers only provide to cross-origin isolated pages: serve the ' +
      'page with the headers Cross-Origin-Opener-Policy: same-origin and ' +
      'Cross-Origin-Embedder-Policy: require-corp (tools/serve.js does), or use threads: 1');
  }
  const base = new URL('./mt/', import.meta.url);
  const url = wasmUrl ?? new URL('headscope_core_mt.wasm', base);
  const { default: createHeadscopeCoreMt } = await import('./mt/headscope_core_mt.mjs');
  const args = { print: () => {}, printErr: () => {}, headscopeWorkers: threads - 1 };
  if (wasmBinary) {
    args.wasmBinary = wasmBinary;
  } else if (isNode) {
    const { readFile } = await import('node:fs/promises');
    args.wasmBinary = await readFile(url);
  }
  if (!isNode) {
    // The wasm where the caller says; the pthread worker script next to the module.
    args.locateFile = (path) => String(path.endsWith('.wasm') ? url : new URL(path, base));
  }
  const core = await createHeadscopeCoreMt(args);
  // Node: idle pthread workers must not keep the process alive once the caller is done.
  if (isNode) for (const w of core.PThread.unusedWorkers) w.unref();
  core.setThreadCount(threads);
  if (core.threadCount() !== threads) {
    throw new HeadscopeError('LOAD_ERROR', `init: options.threads = ${threads}: the module ` +
      `started ${core.threadCount()} threads`);
  }
  return core;
}

// Layout of the call and result blocks shared with src/bindings/embind.cc.
const WORDS_PER_TENSOR = 8;
const TYPE = { none: 0, bool: 1, float: 2 };
const FLAG = { needWeights: 1, averageWeights: 2, isCausal: 4 };
const TRACE_STAGES = ['q', 'k', 'v', 'scores', 'weights', 'headOutputs', 'concat', 'output'];
// Largest hs.maxCallBytes: the WebAssembly build's size_t is 32 bits.
const MAX_CALL_BYTES = 2 ** 32 - 1;

// The C++ core names arguments as PyTorch does; the JS API uses camelCase for the same things.
const JS_NAMES = [
  ['key_padding_mask', 'options.keyPaddingMask'], ['attn_mask', 'options.attnMask'],
  ['is_causal', 'options.isCausal'], ['need_weights', 'options.needWeights'],
  ['embed_dim', 'embedDim'], ['num_heads', 'numHeads'], ['state_dict', 'stateDict'],
];
function jsMessage(message) {
  let m = message;
  for (const [torch, js] of JS_NAMES) m = m.replace(new RegExp(`\\b${torch}\\b`, 'g'), js);
  return m;
}

const CONFIG_DEFAULTS = {
  embedDim: undefined, numHeads: undefined, bias: true, addBiasKV: false, addZeroAttn: false,
  kdim: undefined, vdim: undefined, batchFirst: false,
};
const FORWARD_DEFAULTS = {
  keyPaddingMask: null, attnMask: null, needWeights: true, averageAttnWeights: true,
  isCausal: false, out: null,
};
// trace() takes forward()'s options except `out`.
const TRACE_DEFAULTS = { ...FORWARD_DEFAULTS };
delete TRACE_DEFAULTS.out;

function fail(code, message) {
  throw new HeadscopeError(code, message);
}

function checkKeys(object, allowed, name) {
  for (const key of Object.keys(object)) {
    if (!(key in allowed)) {
      fail('INVALID_ARGUMENT', `${name}.${key}: unknown option (expected one of ` +
        `${Object.keys(allowed).join(', ')})`);
    }
  }
}

// An options argument: an object (null is not), with known keys only.
function checkOptions(options, allowed) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    fail('INVALID_ARGUMENT', `options: expected an object, got ${describe(options)}`);
  }
  checkKeys(options, allowed, 'options');
  return options;
}

function checkSize(value, name, { optional = false } = {}) {
  if (optional && (value === undefined || value === null)) return 0;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > MAX_DIM) {
    fail('INVALID_ARGUMENT', `${name}: expected ${optional ? 'undefined or ' : ''}an integer in ` +
      `[1, ${MAX_DIM}], got ${describe(value)}`);
  }
  return value;
}

function checkBool(value, name) {
  if (typeof value !== 'boolean') {
    fail('INVALID_ARGUMENT', `${name}: expected true or false, got ${describe(value)}`);
  }
  return value;
}

/** Validates a createMultiheadAttention config and fills PyTorch's defaults. */
export function normalizeConfig(config) {
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    fail('INVALID_ARGUMENT', 'config: expected an object like { embedDim: 4, numHeads: 2 }, ' +
      `got ${describe(config)}`);
  }
  checkKeys(config, CONFIG_DEFAULTS, 'config');
  const c = { ...CONFIG_DEFAULTS };
  for (const [k, v] of Object.entries(config)) if (v !== undefined) c[k] = v;
  c.embedDim = checkSize(c.embedDim, 'config.embedDim');
  c.numHeads = checkSize(c.numHeads, 'config.numHeads');
  if (c.embedDim % c.numHeads !== 0) {
    fail('INVALID_ARGUMENT', `config.numHeads: embedDim (${c.embedDim}) must be divisible by ` +
      `numHeads (${c.numHeads})`);
  }
  for (const k of ['bias', 'addBiasKV', 'addZeroAttn', 'batchFirst']) checkBool(c[k], `config.${k}`);
  c.kdim = checkSize(c.kdim, 'config.kdim', { optional: true }) || c.embedDim;
  c.vdim = checkSize(c.vdim, 'config.vdim', { optional: true }) || c.embedDim;
  return c;
}

class Headscope {
  constructor(core) {
    this._core = core;
    this._live = new Set();
    // A module dropped without dispose() still gets its wasm memory back when collected.
    this._finalizer = new FinalizationRegistry((state) => {
      if (!state.disposed) {
        state.disposed = true;
        state.handle.delete();
        this._live.delete(state);
      }
    });
    /** SIMD target the kernels run on: 'WASM' (SIMD128). */
    this.kernelTarget = core.kernelTarget();
    /** Threads each call may use: 1 for the default module, n for init({ threads: n }). */
    this.threads = core.threadCount();
    this._u8 = core.HEAPU8;
    this._u32 = core.HEAPU32;
    this._f32 = core.HEAPF32;
    // The threaded module's memory is a SharedArrayBuffer, which growth does not detach.
    this._shared = typeof SharedArrayBuffer === 'function' &&
      core.HEAPU8.buffer instanceof SharedArrayBuffer;
  }

  // The heap views. The default module's are taken again only after memory growth detached the
  // old ones (length 0): the module object holds many properties (a dictionary in V8), and
  // reading HEAPU32 from it on every call costs more than this check. Shared memory is never
  // detached, so the threaded module's views are read from the module (which Emscripten updates
  // when memory grows) every time.
  _heap() {
    if (this._shared || this._u32.length === 0) {
      this._u8 = this._core.HEAPU8;
      this._u32 = this._core.HEAPU32;
      this._f32 = this._core.HEAPF32;
    }
    return this;
  }

  /** @param {object} config torch.nn.MultiheadAttention's constructor arguments, camelCase. */
  createMultiheadAttention(config) {
    return new MultiheadAttention(this, normalizeConfig(config));
  }

  /** Runs one case document (shared/spec/case-format.md): { output, weights }. */
  runCase(caseDocument) {
    const c = parseCase(caseDocument);
    const mha = this.createMultiheadAttention(c.config);
    try {
      mha.loadStateDict(c.stateDict);
      return mha.forward(c.query, c.key, c.value, c.options);
    } finally {
      mha.dispose();
    }
  }

  /**
   * Compares a result with the case's `expected`: shapes equal, NaN/inf at the same places, and
   * max |got - expected| / max |expected| <= tolerance per tensor.
   */
  checkCase(caseDocument, result, options = {}) {
    const { tolerance = 1e-4 } = checkOptions(options, { tolerance: 1e-4 });
    // Tensor-like, so results that crossed a worker boundary (plain objects) qualify too.
    const isTensor = (t) => t !== null && typeof t === 'object' && ArrayBuffer.isView(t.data) &&
      Array.isArray(t.shape);
    if (result === null || typeof result !== 'object' || !isTensor(result.output) ||
        !(result.weights === null || isTensor(result.weights))) {
      fail('INVALID_ARGUMENT', 'result: expected { output: Tensor, weights: Tensor | null } as ' +
        `forward() and runCase() return, got ${describe(result)}`);
    }
    if (typeof tolerance !== 'number' || !(tolerance >= 0)) {
      fail('INVALID_ARGUMENT', `options.tolerance: expected a non-negative number, got ${describe(tolerance)}`);
    }
    return compareWithExpected(parseCase(caseDocument), result, tolerance);
  }

  /** Objects created and not yet disposed. */
  liveHandles() {
    return this._live.size;
  }

  /** wasmBytes: the WebAssembly memory's size; heapInUse: bytes malloc has handed out. */
  memory() {
    // mallinfo() counts in a C int: read it unsigned, or a heap past 2 GiB shows negative.
    return { wasmBytes: this._core.HEAPU8.length, heapInUse: this._core.heapInUse() >>> 0 };
  }

  /** Calls needing more bytes than this are refused with RESOURCE_EXHAUSTED (default 2 GiB). */
  get maxCallBytes() {
    return this._core.maxCallBytes();
  }

  set maxCallBytes(bytes) {
    // The core's limit is a 32-bit size_t in WebAssembly: larger values would wrap to 0.
    if (typeof bytes !== 'number' || !(bytes >= 0) || !(bytes <= MAX_CALL_BYTES)) {
      fail('INVALID_ARGUMENT', `maxCallBytes: expected a number of bytes in [0, ${MAX_CALL_BYTES}], ` +
        `got ${describe(bytes)}`);
    }
    this._core.setMaxCallBytes(bytes);
  }
}

// Runs a core call; a trap or abort inside WebAssembly becomes an INTERNAL error (a headscope bug,
// or a small allocation of the core failing when the wasm heap is exhausted to its last bytes).
function callCore(fn) {
  try {
    return fn();
  } catch (e) {
    if (e instanceof HeadscopeError) throw e;
    throw new HeadscopeError('INTERNAL', `headscope internal error: ${e?.message ?? e}`);
  }
}

class MultiheadAttention {
  constructor(hs, config) {
    const core = hs._core;
    const handle = callCore(() => new core.Handle());
    let parameters;
    try {
      const code = callCore(() => handle.init(config.embedDim, config.numHeads, config.bias,
        config.addBiasKV, config.addZeroAttn, config.kdim, config.vdim, config.batchFirst));
      if (code !== 0) {
        fail(callCore(() => handle.lastErrorCode()), jsMessage(callCore(() => handle.lastError())));
      }
      parameters = callCore(() => handle.expectedParameters());
    } catch (e) {
      handle.delete();
      throw e;
    }
    this._hs = hs;
    this._core = core;
    this._state = { handle, disposed: false };
    this._callBlock = handle.callBlock() >>> 2;
    this._address = handle.address();  // for core._headscope_forward (see forward())
    this._arenaBase = 0;  // the handle's input arena in wasm memory, as last reserved
    this._arenaBytes = 0;
    this._resultBlock = handle.resultBlock() >>> 2;
    // Scratch of _writeCall, reused by every call.
    this._slots = [null, null, null, null, null];
    this._offsets = [0, 0, 0, 0, 0];
    this._copies = [false, false, false, false, false];
    this._parameters = new Map(JSON.parse(parameters));
    /** The constructor arguments with PyTorch's defaults filled in. */
    this.config = Object.freeze({ ...config });
    hs._live.add(this._state);
    hs._finalizer.register(this, this._state, this._state);
  }

  /** state_dict keys this config has, with their shapes, in PyTorch's order. */
  parameterShapes() {
    return Object.fromEntries([...this._parameters].map(([k, s]) => [k, s.slice()]));
  }

  /**
   * Loads weights by PyTorch's state_dict names. Checks every entry before loading any, so a bad
   * state_dict changes nothing. strict (default): every key of the config must be present.
   */
  loadStateDict(stateDict, options = {}) {
    const handle = this._handle();
    const entries = stateDict instanceof Map ? [...stateDict]
      : (stateDict !== null && typeof stateDict === 'object' && !Array.isArray(stateDict))
        ? Object.entries(stateDict) : null;
    if (entries === null) {
      fail('INVALID_ARGUMENT', 'stateDict: expected an object mapping PyTorch state_dict keys ' +
        `(${[...this._parameters.keys()].join(', ')}) to tensors, got ${describe(stateDict)}`);
    }
    const { strict = true } = checkOptions(options, { strict: true });
    checkBool(strict, 'options.strict');
    const tensors = [];
    for (const [key, value] of entries) {
      const name = `stateDict['${key}']`;
      const want = this._parameters.get(key);
      if (want === undefined) {
        fail('UNKNOWN_PARAMETER', `${name}: unknown key for this config (expected keys: ` +
          `${[...this._parameters.keys()].join(', ')})`);
      }
      const t = toFloatTensor(value, name);
      if (t.shape.length !== want.length || t.shape.some((d, i) => d !== want[i])) {
        fail('SHAPE_MISMATCH', `${name}: expected shape [${want.join(', ')}], got ` +
          `[${t.shape.join(', ')}]`);
      }
      tensors.push([key, t]);
    }
    if (strict) {
      const given = new Set(tensors.map(([k]) => k));
      const missing = [...this._parameters].filter(([k]) => !given.has(k));
      if (missing.length) {
        fail('MISSING_PARAMETER', `stateDict: missing ${missing.map(([k, s]) =>
          `${k} [${s.join(', ')}]`).join(', ')} (pass { strict: false } to load a subset)`);
      }
    }
    for (const [key, t] of tensors) {
      this._writeCall(t, null, null, null, null, 0);
      this._check(this._call(() => handle.setParameter(key)));
    }
  }

  /**
   * torch.nn.MultiheadAttention.forward. Returns { output, weights }; weights is null when
   * needWeights is false, (N, L, S) averaged or (N, H, L, S) per head otherwise.
   */
  forward(query, key, value, options = {}) {
    this._handle();  // refuses a disposed object
    const out = this._prepare(query, key, value, options, FORWARD_DEFAULTS);
    // handle.forward() without embind's per-call argument checks (src/bindings/embind.cc).
    const address = this._address;
    this._check(callCore(() => this._core._headscope_forward(address)));
    const [output, weights] = this._readResults(2, out);
    return { output, weights };
  }

  /**
   * Every intermediate of one forward pass, per head: q, k, v ([N,] H, L|S, hd), scores (scaled,
   * masked, -inf where blocked), weights (softmax), headOutputs (weights x V), concat ([N,] L, E)
   * and output. The leading N appears only for batched input.
   */
  trace(query, key, value, options = {}) {
    const handle = this._handle();
    this._prepare(query, key, value, options, TRACE_DEFAULTS);
    this._check(this._call(() => handle.trace()));
    const tensors = this._readResults(TRACE_STAGES.length);
    return Object.fromEntries(TRACE_STAGES.map((name, i) => [name, tensors[i]]));
  }

  /** Frees this object's WebAssembly memory. Any later use throws HeadscopeError (DISPOSED). */
  dispose() {
    const state = this._state;
    if (state.disposed) return;
    state.disposed = true;
    state.handle.delete();
    this._hs._live.delete(state);
    this._hs._finalizer.unregister(state);
  }

  get disposed() {
    return this._state.disposed;
  }

  _handle() {
    if (this._state.disposed) {
      fail('DISPOSED', 'MultiheadAttention: this object was disposed; create a new one');
    }
    return this._state.handle;
  }

  // Validates the forward arguments and writes them to the call block. This and _readResults are
  // the whole per-call cost in JS, which is most of a tutorial-sized call's time (a 3 x 4 forward
  // takes well under a microsecond in WebAssembly): no spreads, Maps or per-call typed-array views.
  // Returns options.out (forward() only), checked against the output's size, or null.
  _prepare(query, key, value, options, allowed) {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      fail('INVALID_ARGUMENT', `options: expected an object, got ${describe(options)}`);
    }
    let { needWeights, averageAttnWeights, isCausal, keyPaddingMask, attnMask, out } =
      FORWARD_DEFAULTS;
    for (const name in options) {
      if (!Object.hasOwn(options, name)) continue;  // as a spread would: own keys only
      const v = options[name];
      switch (name) {
        case 'needWeights': if (v !== undefined) needWeights = checkBool(v, 'options.needWeights'); break;
        case 'averageAttnWeights':
          if (v !== undefined) averageAttnWeights = checkBool(v, 'options.averageAttnWeights');
          break;
        case 'isCausal': if (v !== undefined) isCausal = checkBool(v, 'options.isCausal'); break;
        case 'keyPaddingMask': keyPaddingMask = v; break;
        case 'attnMask': attnMask = v; break;
        case 'out':
          if (allowed !== FORWARD_DEFAULTS) checkKeys(options, allowed, 'options');
          if (v !== undefined && v !== null) {
            if (!(v instanceof Float32Array)) {
              fail('INVALID_ARGUMENT', `options.out: expected a Float32Array to write the output ` +
                `into (or null), got ${describe(v)}`);
            }
            out = v;
          }
          break;
        default: checkKeys(options, allowed, 'options');
      }
    }
    // Self-attention passes one array three times: convert (and copy) it once.
    const q = toFloatTensor(query, 'query');
    const k = key === query ? q : toFloatTensor(key, 'key');
    const v = value === query ? q : value === key ? k : toFloatTensor(value, 'value');
    const flags = (needWeights ? FLAG.needWeights : 0) |
      (averageAttnWeights ? FLAG.averageWeights : 0) | (isCausal ? FLAG.isCausal : 0);
    // The output has the query's shape, so `out` can be checked before any work is done.
    if (out !== null && out.length !== q.data.length) {
      fail('SHAPE_MISMATCH', `options.out: expected a Float32Array of ${q.data.length} elements ` +
        `(the output has the query's shape [${q.shape.join(', ')}]), got length ${out.length}`);
    }
    this._writeCall(q, k, v, toMask(keyPaddingMask, 'options.keyPaddingMask'),
      toMask(attnMask, 'options.attnMask'), flags);
    return out;
  }

  // Copies the tensors into the handle's arena (one copy each; data shared between arguments
  // once) and describes them in the call block, slots in the call block's order.
  _writeCall(t0, t1, t2, t3, t4, flags) {
    const slots = this._slots;
    slots[0] = t0; slots[1] = t1; slots[2] = t2; slots[3] = t3; slots[4] = t4;
    const offsets = this._offsets;
    const copies = this._copies;
    let bytes = 0;
    for (let i = 0; i < 5; i++) {
      const t = slots[i];
      copies[i] = false;
      if (t === null) continue;
      let j = 0;
      while (j < i && (slots[j] === null || slots[j].data !== t.data)) j++;
      if (j < i) {
        offsets[i] = offsets[j];
      } else {
        offsets[i] = bytes;
        copies[i] = true;
        bytes += Math.ceil(t.data.byteLength / 16) * 16;
      }
    }
    // The arena only moves when reserve() grows it, so a call that fits the last reservation
    // skips that round trip into WebAssembly.
    let base = this._arenaBase;
    if (bytes > this._arenaBytes) {
      const handle = this._state.handle;
      base = callCore(() => handle.reserve(bytes));
      if (base === 0 && bytes > 0) {
        fail('RESOURCE_EXHAUSTED', `inputs: could not allocate ${bytes} bytes of WebAssembly memory`);
      }
      this._arenaBase = base;
      this._arenaBytes = bytes;
    }
    // reserve() may have grown memory: take the heap views only now. Offsets are multiples of
    // 16 bytes, so float data goes through HEAPF32 without a per-call view of the caller's data.
    const heap = this._hs._heap();
    const heapU32 = heap._u32;
    let w = this._callBlock;
    for (let i = 0; i < 5; i++, w += WORDS_PER_TENSOR) {
      const t = slots[i];
      slots[i] = null;  // keep no reference to the caller's data between calls
      if (t === null) {
        for (let j = 0; j < WORDS_PER_TENSOR; j++) heapU32[w + j] = 0;
        continue;
      }
      const at = base + offsets[i];
      const { data, shape } = t;
      if (copies[i]) {
        if (data instanceof Float32Array) heap._f32.set(data, at >>> 2);
        else heap._u8.set(data, at);
      }
      heapU32[w] = at;
      heapU32[w + 1] = t.type === 'bool' ? TYPE.bool : TYPE.float;
      heapU32[w + 2] = shape.length;
      for (let d = 0; d < 4; d++) heapU32[w + 3 + d] = d < shape.length ? shape[d] : 0;
      heapU32[w + 7] = data.length;
    }
    heapU32[this._callBlock + 5 * WORDS_PER_TENSOR] = flags;
  }

  // Copies the results out of wasm memory; result 0 goes into `out` when one is given. (A new
  // Float32Array of more than 16 floats costs V8 ~0.3 us, an off-heap allocation: for a
  // tutorial-sized call that is a fifth of the whole time, hence forward()'s `out` option.)
  _readResults(count, into = null) {
    const heap = this._hs._heap();
    const heapU32 = heap._u32;
    const results = new Array(count);
    for (let i = 0; i < count; i++) {
      const w = this._resultBlock + i * WORDS_PER_TENSOR;
      if (heapU32[w + 1] === TYPE.none) {
        results[i] = null;
        continue;
      }
      const rank = heapU32[w + 2];
      const shape = new Array(rank);
      for (let d = 0; d < rank; d++) shape[d] = heapU32[w + 3 + d];
      const start = heapU32[w] >>> 2;
      const end = start + heapU32[w + 7];
      let data;
      if (i === 0 && into !== null) {
        data = into;
        data.set(heap._f32.subarray(start, end));
      } else {
        data = heap._f32.slice(start, end);
      }
      results[i] = new Tensor(data, shape);
    }
    return results;
  }

  _call(fn) {
    return callCore(fn);
  }

  _check(code) {
    if (code !== 0) {
      const handle = this._state.handle;
      fail(callCore(() => handle.lastErrorCode()), jsMessage(callCore(() => handle.lastError())));
    }
  }
}

