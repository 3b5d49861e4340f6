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
// bit; browsers need a cross-origin isolated page). Single-threaded, init() loads the relaxed-SIMD
// build (./headscope_core_relaxed: its matmuls use f32x4.relaxed_madd, an FMA on x86 and Arm)
// where the engine validates relaxed SIMD, else the SIMD128 one; init({ simd }) chooses, and
// hs.simd says which runs. Results are bit-identical within one build, not across the two.
import createHeadscopeCore from './headscope_core.js';
import { HeadscopeError } from './errors.js';
import {
  MAX_DIM, Tensor, checkIntact, checkSimdOption, checkTimeoutMs, describe, describeThrown, quoteInput, readArgument,
  toFloatTensor, toMask, toTokens, typedArrayLength, typedArrayName, typedArraySet,
} from './tensor.js';
import { MHA_SCHEMA, OPTIMIZER_SCHEMA, TRANSFORMER_SCHEMA, readConfig } from './config.js';
import {
  checkTransformerCase, parseCase, compareWithExpected, readCaseResult, transformerCaseHooks,
  transformerCaseResult,
} from './case.js';

export { HeadscopeError, Tensor };
export { initWorker } from './worker-client.js';

const isNode = typeof process === 'object' && typeof process.versions?.node === 'string' &&
  typeof window === 'undefined';

// Loaded modules, shared by every init() call that asks for the same module from the same place:
// key `${threads}|${build}|${wasmUrl or ''}` (build: 'relaxed' or 'simd128', as resolved from
// options.simd). init({ wasmBinary }) is never cached (the caller's bytes are the module; two
// calls with different bytes must not share one). A failed load is forgotten, so it can be
// retried, and never occupies another caller's key.
const apiPromises = new Map();
// The C++ pool's limit (src/headscope/parallel.h kMaxThreads).
const MAX_THREADS = 64;
// A headscope .wasm is well under 1 MiB; anything past this is not one (an endless stream, a
// device file), and reading stops there.
export const MAX_WASM_BYTES = 64 * 1024 * 1024;
// How long a load may take before init() gives up with LOAD_ERROR (fetch, compile, and for the
// threaded module the start of its workers).
const DEFAULT_LOAD_TIMEOUT_MS = 60_000;

// init({ simd }) picks one of two builds ('relaxed', 'simd128'); 'auto' picks the relaxed one
// where the engine validates RELAXED_PROBE: a module of one function (v128, v128, v128) -> v128
// whose body is f32x4.relaxed_madd (fd 85 02, the final opcode). Chromium >= 114 and Node >= 22
// validate it; Node 20 only under --experimental-wasm-relaxed-simd.
const RELAXED_PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x01, 0x60, 0x03, 0x7b, 0x7b, 0x7b,
  0x01, 0x7b, 0x03, 0x02, 0x01, 0x00, 0x0a, 0x0d, 0x01, 0x0b, 0x00, 0x20, 0x00, 0x20, 0x01, 0x20,
  0x02, 0xfd, 0x85, 0x02, 0x0b,
]);
let relaxedSupported;
/** True when this engine runs relaxed SIMD (WebAssembly.validate of a relaxed_madd probe). */
export function relaxedSimdSupported() {
  if (relaxedSupported === undefined) {
    try {
      relaxedSupported = typeof WebAssembly === 'object' && WebAssembly.validate(RELAXED_PROBE);
    } catch {
      relaxedSupported = false;
    }
  }
  return relaxedSupported;
}

// The build `o` (checked options) loads: the threaded module is SIMD128 only; a caller's
// wasmBinary or wasmUrl is taken for the SIMD128 module unless simd: 'relaxed' says otherwise
// (the two builds' JS glue differ, so the bytes must match the build asked for).
function resolveBuild(o) {
  if (o.simd === 'simd128') return 'simd128';
  if (o.simd === 'auto') {
    return o.threads === 1 && o.wasmBinary === undefined && o.wasmUrl === undefined &&
      relaxedSimdSupported() ? 'relaxed' : 'simd128';
  }
  if (o.threads !== 1) {
    fail('INVALID_ARGUMENT', `init: options.simd: 'relaxed' is single-threaded only (the threaded ` +
      `module, threads = ${o.threads}, is SIMD128); use simd: 'auto' or 'simd128' with threads, or threads: 1`);
  }
  if (!relaxedSimdSupported()) {
    fail('LOAD_ERROR', "init: options.simd: 'relaxed' needs WebAssembly relaxed SIMD, which this " +
      'runtime lacks (WebAssembly.validate refuses f32x4.relaxed_madd). Chromium 114+ and Node 22+ ' +
      'have it; Node 20 needs the flag --experimental-wasm-relaxed-simd (node ' +
      "--experimental-wasm-relaxed-simd app.js). simd: 'auto' falls back to the SIMD128 build.");
  }
  return 'relaxed';
}

/**
 * Loads and compiles the WebAssembly module once; later calls with the same `threads`, build (and
 * `wasmUrl`) return the same API. threads >= 2 loads the multi-threaded module (needs
 * SharedArrayBuffer: in browsers a cross-origin isolated page, i.e. COOP/COEP headers). `simd`
 * (single-threaded only): 'auto' (default) loads the relaxed-SIMD build where the engine has
 * relaxed SIMD, else the SIMD128 one; 'relaxed' or 'simd128' asks for one (LOAD_ERROR where
 * relaxed SIMD is missing). Every load settles within `timeoutMs` (default 60 s): resolved, or
 * rejected with LOAD_ERROR after stopping everything it started.
 * @param {{ wasmBinary?: ArrayBuffer | ArrayBufferView, wasmUrl?: string | URL, threads?: number,
 *   simd?: 'auto' | 'relaxed' | 'simd128', timeoutMs?: number }} [options]
 */
export function init(options = {}) {
  let o;
  let build;
  try {
    o = checkInitOptions(options);
    build = resolveBuild(o);
  } catch (e) {
    return Promise.reject(e);
  }
  const key = o.wasmBinary === undefined ? `${o.threads}|${build}|${o.wasmUrl ?? ''}` : null;
  let apiPromise = key === null ? undefined : apiPromises.get(key);
  if (apiPromise === undefined) {
    const file = o.threads !== 1 ? 'mt/headscope_core_mt.wasm'
      : build === 'relaxed' ? 'headscope_core_relaxed.wasm' : 'headscope_core.wasm';
    const cleanup = { stop: null };   // set by the loader once it has started threads
    const load = o.threads !== 1 ? loadCoreMt(o, cleanup)
      : build === 'relaxed' ? loadCoreRelaxed(o) : loadCore(o);
    apiPromise = withTimeout(load, o.timeoutMs, cleanup)
      .then((core) => new Headscope(core, () => {
        if (key !== null && apiPromises.get(key) === apiPromise) apiPromises.delete(key);
      }), (e) => {
        if (e instanceof HeadscopeError) throw e;
        throw new HeadscopeError('LOAD_ERROR', loadFailure(e, o.wasmUrl ?? file), { cause: e });
      });
    if (key !== null) {
      apiPromises.set(key, apiPromise);
      // A failed load can be retried (and is removed only if it still holds the key).
      apiPromise.catch(() => { if (apiPromises.get(key) === apiPromise) apiPromises.delete(key); });
    }
  }
  return apiPromise;
}

// What init() says when the module could not load. A page whose Content-Security-Policy lacks
// 'wasm-unsafe-eval' gets its bytes but may not compile them: say that, not "build it".
function loadFailure(e, file) {
  const why = describeThrown(e);
  if (/Content Security Policy|wasm-unsafe-eval|wasm-eval|unsafe-eval/i.test(why)) {
    return `init: the page's Content-Security-Policy does not allow WebAssembly: add 'wasm-unsafe-eval' ` +
      `to its script-src directive (script-src 'self' 'wasm-unsafe-eval') so ${file} can be compiled (${why})`;
  }
  return `init: could not load ${file} (${why}); in a source checkout, build it with \`npm run build\``;
}

// Rejects with LOAD_ERROR after `ms`; a load that finishes later is stopped (its threads ended).
function withTimeout(load, ms, cleanup) {
  let timer;
  let timedOut = false;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      cleanup.stop?.();
      reject(new HeadscopeError('LOAD_ERROR', `init: the WebAssembly module did not load within ` +
        `${ms} ms (options.timeoutMs)`));
    }, ms);
    // Node: a pending timer alone must not keep the process alive.
    timer?.unref?.();
  });
  load.then((core) => { if (timedOut) closeCore(core); }, () => {});
  return Promise.race([load, timeout]).finally(() => clearTimeout(timer));
}

// init()'s options: each one's reader, from a caller's value other than undefined to what init()
// uses (threads, simd, wasmUrl as a string, wasmBinary as a private copy of the bytes, timeoutMs).
const INIT_OPTIONS = Object.freeze(Object.assign(Object.create(null), {
  threads: (v) => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > MAX_THREADS) {
      fail('INVALID_ARGUMENT', `init: options.threads: expected an integer in [1, ${MAX_THREADS}] ` +
        `(1: the single-threaded module), got ${describe(v)}`);
    }
    return v;
  },
  simd: (v) => checkSimdOption(v, 'init: options.simd'),
  wasmUrl: (v) => urlString(v),
  wasmBinary: (v) => bytesCopy(v, 'init: options.wasmBinary'),
  timeoutMs: (v) => checkTimeoutMs(v, 'init: options.timeoutMs'),
}));

// Validates init()'s options, reading each once (INIT_OPTIONS; undefined is the default).
function checkInitOptions(options) {
  return readArgument('init: options', () => {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      fail('INVALID_ARGUMENT', `init: options: expected an object, got ${describe(options)}`);
    }
    const o = {
      threads: 1, simd: 'auto', wasmUrl: undefined, wasmBinary: undefined, timeoutMs: DEFAULT_LOAD_TIMEOUT_MS,
    };
    for (const name of Object.keys(options)) {
      const v = options[name];
      const read = INIT_OPTIONS[name];
      if (read === undefined) {
        fail('INVALID_ARGUMENT', `init: options.${quoteInput(name)}: unknown option (expected one of ` +
          'wasmBinary, wasmUrl, threads, simd, timeoutMs)');
      }
      if (v !== undefined) o[name] = read(v);
    }
    return o;
  });
}

const urlHref = Object.getOwnPropertyDescriptor(URL.prototype, 'href').get;
function urlString(value) {
  if (typeof value === 'string') return value;
  try {
    return Reflect.apply(urlHref, value, []);   // a real URL (its internal slot, not a getter)
  } catch {
    fail('INVALID_ARGUMENT', `init: options.wasmUrl: expected a string or a URL, got ${describe(value)}`);
  }
}

const arrayBufferSlice = Function.prototype.call.bind(ArrayBuffer.prototype.slice);
const bufferByteLength = Function.prototype.call.bind(
  Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, 'byteLength').get);
// A private copy of the caller's bytes (an ArrayBuffer or any typed array / DataView), so that
// nothing the caller does later changes what is compiled.
function bytesCopy(value, name) {
  if (typedArrayName(value) !== undefined) {
    return new Uint8Array(new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
  }
  let bytes;
  try {
    bytes = bufferByteLength(value);
  } catch {
    fail('INVALID_ARGUMENT', `${name}: expected an ArrayBuffer or a Uint8Array of a .wasm file, ` +
      `got ${describe(value)}`);
  }
  if (bytes > MAX_WASM_BYTES) {
    fail('LOAD_ERROR', `${name}: ${bytes} bytes is larger than a headscope module can be ` +
      `(${MAX_WASM_BYTES})`);
  }
  return new Uint8Array(arrayBufferSlice(value, 0));
}

// The .wasm's bytes from `url`: a file path or file: URL in Node (a regular file, at most
// MAX_WASM_BYTES), otherwise fetched, stopping at MAX_WASM_BYTES.
async function readWasm(url, timeoutMs) {
  const href = String(url);
  // A path (no scheme; `C:\\...` has a one-letter one) or a file: URL is read from disk in Node.
  if (isNode && (!/^[a-z][a-z0-9+.-]+:/i.test(href) || href.startsWith('file:'))) {
    const { open } = await import('node:fs/promises');
    const { constants } = await import('node:fs');
    const path = href.startsWith('file:') ? new URL(href) : href;
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
    const file = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
    try {
      const info = await file.stat();
      // A FIFO or a device (/dev/zero) would block or never end: only regular files are read.
      if (!info.isFile()) throw new Error(`${href} is not a regular file`);
      if (info.size > MAX_WASM_BYTES) {
        throw new Error(`${href} is ${info.size} bytes, more than a headscope module can be ` +
          `(${MAX_WASM_BYTES})`);
      }
      const bytes = new Uint8Array(info.size);
      let at = 0;
      while (at < bytes.length) {
        const { bytesRead } = await file.read(bytes, at, bytes.length - at, at);
        if (bytesRead === 0) break;
        at += bytesRead;
      }
      return bytes.subarray(0, at);
    } finally {
      await file.close();
    }
  }
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  timer?.unref?.();
  try {
    const response = await fetch(href, { credentials: 'same-origin', signal: controller.signal });
    if (!response.ok) throw new Error(`HTTP ${response.status} for ${href}`);
    const declared = Number(response.headers.get('content-length'));
    if (declared > MAX_WASM_BYTES) {
      throw new Error(`${href} is ${declared} bytes, more than a headscope module can be ` +
        `(${MAX_WASM_BYTES})`);
    }
    const reader = response.body.getReader();
    const chunks = [];
    let total = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > MAX_WASM_BYTES) {
        controller.abort();
        throw new Error(`${href} is more than ${MAX_WASM_BYTES} bytes, more than a headscope ` +
          'module can be');
      }
      chunks.push(value);
    }
    const bytes = new Uint8Array(total);
    let at = 0;
    for (const c of chunks) {
      bytes.set(c, at);
      at += c.byteLength;
    }
    return bytes;
  } catch (e) {
    if (controller.signal.aborted && e?.name === 'AbortError') {
      throw new Error(`fetching ${href} took longer than ${timeoutMs} ms`);
    }
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

async function loadCore({ wasmBinary, wasmUrl, timeoutMs }) {
  // Emscripten would print its own abort lines on stderr; failures reach the caller as a rejected
  // promise instead. The bytes are always read here (bounded) and handed over, so Emscripten never
  // fetches anything itself.
  const args = { print: () => {}, printErr: () => {} };
  args.wasmBinary = wasmBinary ?? await readWasm(wasmUrl ?? new URL('./headscope_core.wasm',
    import.meta.url), timeoutMs);
  return createHeadscopeCore(args);
}

// The relaxed-SIMD build (./headscope_core_relaxed.{js,wasm}): imported only when it is the one
// that loads, so SIMD128 users never fetch it. The same loading as loadCore's.
async function loadCoreRelaxed({ wasmBinary, wasmUrl, timeoutMs }) {
  const { default: createHeadscopeCoreRelaxed } = await import('./headscope_core_relaxed.js');
  const args = { print: () => {}, printErr: () => {} };
  args.wasmBinary = wasmBinary ?? await readWasm(wasmUrl ?? new URL('./headscope_core_relaxed.wasm',
    import.meta.url), timeoutMs);
  return createHeadscopeCoreRelaxed(args);
}

// Ends a loaded module's threads (the threaded build's pthread workers); a no-op otherwise.
// The C++ pool's threads are stopped and joined first: Emscripten's terminateAllThreads() frees a
// running thread's stack and TLS before its worker is gone, and a pool thread still spinning or
// waking would then run on freed memory (seen: "memory access out of bounds" in a worker).
function closeCore(core) {
  try {
    if (typeof core?.setThreadCount === 'function' && core.threadCount() > 1) core.setThreadCount(1);
  } catch {
    // A module too broken to stop its pool: its workers are ended below all the same.
  }
  try {
    core?.PThread?.terminateAllThreads();
  } catch {
    // Already ended.
  }
}

// The multi-threaded module (web/lib/mt/): imported only when asked for, so single-threaded users
// never fetch it. Its threads live in Emscripten's pthread workers (Web Workers, or worker_threads
// in Node), all started before the factory resolves (headscopeWorkers: PTHREAD_POOL_SIZE).
// `cleanup.stop` ends them, whether the load succeeds, fails or times out.
async function loadCoreMt({ wasmBinary, wasmUrl, timeoutMs, threads }, cleanup) {
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
  args.wasmBinary = wasmBinary ?? await readWasm(url, timeoutMs);
  // The pthread worker script next to the module.
  if (!isNode) args.locateFile = (path) => String(new URL(path, base));
  // Emscripten's Node glue adds process-wide 'uncaughtException' and 'unhandledRejection'
  // handlers (the latter rethrows, ending the process) on every load: right for a program, wrong
  // for a library, and a leak across loads. They are removed again right after the factory runs.
  const before = isNode ? listenerSets() : null;
  let core;
  cleanup.stop = () => closeCore(args);   // Emscripten's Module is `args` itself
  try {
    const pending = createHeadscopeCoreMt(args);
    if (isNode) removeNewListeners(before);
    core = await pending;
  } catch (e) {
    closeCore(args);
    throw e;
  }
  try {
    // Node: idle pthread workers must not keep the process alive once the caller is done.
    if (isNode) for (const w of core.PThread.unusedWorkers) w.unref();
    core.setThreadCount(threads);
    if (core.threadCount() !== threads) {
      throw new HeadscopeError('LOAD_ERROR', `init: options.threads = ${threads}: the module ` +
        `started ${core.threadCount()} threads`);
    }
  } catch (e) {
    closeCore(core);
    throw e;
  }
  return core;
}

const GLUE_EVENTS = ['uncaughtException', 'unhandledRejection'];
function listenerSets() {
  return GLUE_EVENTS.map((event) => new Set(process.listeners(event)));
}
function removeNewListeners(before) {
  GLUE_EVENTS.forEach((event, i) => {
    for (const l of process.listeners(event)) if (!before[i].has(l)) process.off(event, l);
  });
}

// The call and result blocks' layout is src/bindings/embind.cc's: read from the module
// (core.protocol()) when it loads, never restated here. The names below are the ones this file
// fills; a module that describes anything else is refused with LOAD_ERROR.
const CALL_SLOTS = ['query', 'key', 'value', 'keyPaddingMask', 'attnMask', 'headGates'];
const FLAG_NAMES = ['needWeights', 'averageWeights', 'isCausal', 'headStats', 'alibi'];
const FORWARD_RESULTS = ['output', 'weights'];
const HEAD_STATS_RESULTS = ['entropy', 'distance', 'maxWeight'];
// The Transformer's: its call slots (by name, as MultiheadAttention's) and its results.
const MODEL_CALL_SLOTS = ['tokens', 'headGates', 'targets', 'corrupted'];
const MODEL_RESULTS = {
  forwardResults: ['logits', '*hooks'], generateResults: ['tokens', 'logits'],
  backwardResults: ['*grads', 'headGates'], parameterResults: ['parameter'],
};

/** The module's protocol, with the numbers the per-call path uses precomputed. */
export function readProtocol(core) {
  let p;
  try {
    p = JSON.parse(core.protocol());
  } catch (e) {
    throw new HeadscopeError('LOAD_ERROR', `init: the module does not describe its call protocol (${describeThrown(e)})`);
  }
  const same = (a, b) => Array.isArray(a) && a.length === b.length && a.every((x, i) => x === b[i]);
  const known = p.version === 1 && same(p.callSlots, CALL_SLOTS) && same(p.forwardResults, FORWARD_RESULTS) &&
    same(p.headStatsResults, HEAD_STATS_RESULTS) &&
    FLAG_NAMES.every((f) => Number.isInteger(p.flags?.[f])) && Array.isArray(p.traceResults) &&
    Number.isInteger(p.windowWord) && p.windowWord >= 0 && p.windowWord !== p.flagsWord &&
    CALL_SLOTS.includes(p.parameterSlot) && p.maxRank === 4 && Number.isInteger(p.types?.int32) &&
    same(p.transformer?.callSlots, MODEL_CALL_SLOTS) && MODEL_CALL_SLOTS.includes(p.transformer.parameterSlot) &&
    Object.entries(MODEL_RESULTS).every(([k, v]) => same(p.transformer[k], v));
  if (!known) {
    throw new HeadscopeError('LOAD_ERROR', 'init: the WebAssembly module speaks another call protocol ' +
      `than this index.js (${core.protocol()}); rebuild it with \`npm run build\``);
  }
  const w = p.tensorWords;
  return Object.freeze({
    wordsPerTensor: p.wordsPerTensor,
    address: w.address, type: w.type, rank: w.rank, dims: w.dims, count: w.count,
    none: p.types.none, bool: p.types.bool, float: p.types.float, int32: p.types.int32,
    slot: Object.freeze(Object.fromEntries(p.callSlots.map((name, i) => [name, i]))),
    callSlots: p.callSlots.length,
    parameterSlot: p.callSlots.indexOf(p.parameterSlot),
    flagsWord: p.flagsWord,
    flags: Object.freeze({ ...p.flags }),
    windowWord: p.windowWord,  // options.window's word (0: no window)
    traceResults: Object.freeze([...p.traceResults]),
    headStatsResults: Object.freeze([...p.headStatsResults]),
    transformer: Object.freeze({
      slot: Object.freeze(Object.fromEntries(p.transformer.callSlots.map((name, i) => [name, i]))),
      callSlots: p.transformer.callSlots.length,
      parameterSlot: p.transformer.callSlots.indexOf(p.transformer.parameterSlot),
      flagsWord: -1,  // (no flags: its options are arguments)
      windowWord: -1,
    }),
  });
}
// Largest hs.maxCallBytes: the WebAssembly build's size_t is 32 bits.
const MAX_CALL_BYTES = 2 ** 32 - 1;

// Throws the HeadscopeError of a core status, "CODE\nargument\nmessage" (Handle::lastStatus).
// The core writes its messages in the JS API's names (the module sets status.h's Naming to JS),
// so they are used as they are; `argument` is the structured id of the argument the error is
// about ('options.attnMask', 'config.numHeads', 'stateDict'; '' when it is no one argument's).
function failWithStatus(status, hint = '') {
  const a = status.indexOf('\n');
  const b = status.indexOf('\n', a + 1);
  throw new HeadscopeError(status.slice(0, a), status.slice(b + 1) + hint,
    { argument: status.slice(a + 1, b) });
}

const FORWARD_DEFAULTS = Object.freeze({
  keyPaddingMask: null, attnMask: null, needWeights: true, averageAttnWeights: true,
  isCausal: false, headGates: null, headStats: false, alibi: false, window: 0, out: null,
});
// trace() takes forward()'s options except `out`.
const TRACE_OPTIONS = Object.freeze(Object.fromEntries(
  Object.keys(FORWARD_DEFAULTS).filter((k) => k !== 'out').map((k) => [k, FORWARD_DEFAULTS[k]])));

function fail(code, message) {
  throw new HeadscopeError(code, message);
}

// An own-key test: `in` would also accept `constructor`, `toString` or `__proto__`.
const hasOwn = Object.hasOwn;

function unknownOption(name, key, allowed) {
  fail('INVALID_ARGUMENT', `${name}.${quoteInput(key)}: unknown option (expected one of ` +
    `${Object.keys(allowed).join(', ')})`);
}

/**
 * An options argument read once: a new plain object holding the caller's own enumerable keys
 * (each read exactly once), all of them in `allowed`. undefined counts as {}.
 */
/** The defaults with what readOptions read over them (an option given as undefined: the default). */
function withDefaults(given, defaults) {
  const out = { ...defaults };
  for (const k of Object.keys(given)) if (given[k] !== undefined) out[k] = given[k];
  return out;
}

function readOptions(options, allowed, name = 'options') {
  if (options === undefined) return {};
  return readArgument(name, () => {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      fail('INVALID_ARGUMENT', `${name}: expected an object, got ${describe(options)}`);
    }
    const out = {};
    for (const key of Object.keys(options)) {
      if (!hasOwn(allowed, key)) unknownOption(name, key, allowed);
      out[key] = options[key];
    }
    return out;
  });
}

/**
 * options.headGates read once: null (no gates), or a float snapshot of shape [H] from an array of
 * numbers, a Float32Array or { data, shape }. JS checks only the kind; the shape (one gate per
 * head) is C++'s rule (PlanCall), whose message arrives as `options.headGates: expected 2 numbers
 * (one per head), got 3`.
 */
function toHeadGates(value) {
  if (value === null || value === undefined) return null;
  const name = 'options.headGates';
  if (typedArrayName(value) !== undefined) {
    if (typedArrayName(value) !== 'Float32Array') {
      fail('INVALID_ARGUMENT', `${name}: expected an array of numbers or a Float32Array (one gate ` +
        `per head), got ${describe(value)}`);
    }
    // As a 1-D { data, shape } tensor: its length is read once, and the snapshot is the fixed
    // view toFloatTensor takes of any Float32Array (copied into wasm memory by _writeCall).
    return toFloatTensor({ data: value, shape: [typedArrayLength(value)] }, name);
  }
  return toFloatTensor(value, name);
}

// A config size: JS checks only that it is a number (null / undefined for optional ones); which
// numbers are sizes (integers in [1, 2^24], embedDim divisible by numHeads) is the core's rule
// (Handle::init, ValidateConfig), whose messages say so.
function checkNumber(value, name, { optional = false } = {}) {
  if (optional && (value === undefined || value === null)) return null;
  if (typeof value !== 'number') {
    fail('INVALID_ARGUMENT', `${name}: expected ${optional ? 'null or ' : ''}a number (the size, ` +
      `an integer), got ${describe(value)}`);
  }
  return value;
}

function checkBool(value, name) {
  if (typeof value !== 'boolean') {
    fail('INVALID_ARGUMENT', `${name}: expected true or false, got ${describe(value)}`);
  }
  return value;
}

// forward()'s options.window: 0 (no window) or a key count, the core's range (plan.cc, the same
// words), checked here because the call block's word holds only a uint32.
function checkWindow(value) {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > MAX_DIM) {
    fail('INVALID_ARGUMENT', `options.window: expected 0 (no window) or an integer in [1, ${MAX_DIM}], ` +
      `got ${describe(value)}`);
  }
  return value;
}

/** Checks a createMultiheadAttention config's types (the core checks its values). */
export function normalizeConfig(config) {
  readArgument('config', () => {
    if (config === null || typeof config !== 'object' || Array.isArray(config)) {
      fail('INVALID_ARGUMENT', 'config: expected an object like { embedDim: 4, numHeads: 2 }, ' +
        `got ${describe(config)}`);
    }
  });
  // Every field of the schema (config.js), type-checked, defaults filled in.
  return readArgument('config', () => readConfig(MHA_SCHEMA, config, 'config'));
}

// `this` of a method called detached (`const f = hs.memory; f()`) or on a look-alike object.
function wrongThis(className, method, self) {
  fail('INVALID_ARGUMENT', `${className}.${method}: called on ${describe(self)}, not on a ` +
    `${className}; call it as object.${method}(...) (a method taken off its object loses its this)`);
}

const mapSize = Function.prototype.call.bind(Object.getOwnPropertyDescriptor(Map.prototype, 'size').get);
const mapForEach = Function.prototype.call.bind(Map.prototype.forEach);
function isMap(value) {
  try {
    mapSize(value);   // throws unless value is a real Map (a Proxy of one is not)
    return true;
  } catch {
    return false;
  }
}

class Headscope {
  #brand = true;

  static check(self, method) {
    if (self === null || typeof self !== 'object' || !(#brand in self)) wrongThis('Headscope', method, self);
    return self;
  }

  constructor(core, onClose) {
    this._core = core;
    /** The call/result block layout of this module (readProtocol). */
    this._protocol = readProtocol(core);
    this._live = new Set();
    this._closed = false;
    this._onClose = onClose;
    // A module dropped without dispose() still gets its wasm memory back when collected.
    this._finalizer = new FinalizationRegistry((state) => {
      if (!state.disposed) {
        state.disposed = true;
        state.handle.delete();
        this._live.delete(state);
      }
    });
    /** SIMD target the kernels run on: 'WASM'. */
    this.kernelTarget = core.kernelTarget();
    /**
     * Which WebAssembly build runs: 'relaxed' (the matmuls' multiply-adds are relaxed_madd, fused
     * where the CPU has FMA) or 'simd128' (a multiply, then an add). Bits are the same within a
     * build (any engine, any thread count), not across the two.
     */
    this.simd = core.simdBuild();
    /** Threads each call may use: 1 for the default module, n for init({ threads: n }). */
    this.threads = core.threadCount();
    this._u8 = core.HEAPU8;
    this._u32 = core.HEAPU32;
    this._f32 = core.HEAPF32;
    this._i32 = core.HEAP32;
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
      this._i32 = this._core.HEAP32;
    }
    return this;
  }

  static open(self, method) {
    Headscope.check(self, method);
    if (self._closed) {
      fail('DISPOSED', `Headscope.${method}: this engine was closed (hs.close()); call init() ` +
        'again for a new one');
    }
    return self;
  }

  /** @param {object} config torch.nn.MultiheadAttention's constructor arguments, camelCase. */
  createMultiheadAttention(config) {
    Headscope.open(this, 'createMultiheadAttention');
    const c = normalizeConfig(config);
    // normalizeConfig ran the caller's getters: the engine may have been closed by one.
    Headscope.open(this, 'createMultiheadAttention');
    return new MultiheadAttention(this, c);
  }

  /**
   * A small transformer (tools/tiny_transformer.py's module): config in camelCase, weights from
   * `seed` (default 0; PyTorch's default initialisation, deterministic) until loadStateDict;
   * `seed: null` gives no weights at all (nothing allocated for them; every call but
   * loadStateDict refuses with MISSING_PARAMETER until a load fills them).
   */
  createTransformer(config) {
    Headscope.open(this, 'createTransformer');
    const c = normalizeTransformerConfig(config);
    Headscope.open(this, 'createTransformer');
    return new Transformer(this, c);
  }

  /**
   * Runs one case document (docs/case-format.md): { output, weights }; a "transformer" case:
   * { logits, hooks? (those its expected section names), loss? (with targets) }.
   */
  runCase(caseDocument) {
    Headscope.open(this, 'runCase');
    const c = readArgument('caseDocument', () => parseCase(caseDocument));
    if (c.kind === 'transformer') {
      // No initial weights: the case's replace them all, and a seeded model would first allocate
      // and fill every weight its config names, however large, before the checks below.
      const model = this.createTransformer({ ...c.config, seed: null });
      try {
        const hooks = transformerCaseHooks(c, model.hookNames());
        checkTransformerCase(c, model.parameterShapes(), hooks);
        model.loadStateDict(c.stateDict);
        return transformerCaseResult(c, model.forward(c.tokens, { hooks, headGates: c.headGates }));
      } finally {
        model.dispose();
      }
    }
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
   * max |got - expected| / max |expected| <= tolerance per tensor (a transformer case: logits and
   * every expected hook, each reported in `tensors`, and the loss within tolerance x
   * max(1, |expected|), reported in `loss`).
   */
  checkCase(caseDocument, result, options = {}) {
    Headscope.check(this, 'checkCase');
    const given = readOptions(options, { tolerance: 0 });
    const tolerance = given.tolerance ?? 1e-4;
    if (typeof tolerance !== 'number' || !(tolerance >= 0)) {
      fail('INVALID_ARGUMENT', `options.tolerance: expected a non-negative number, got ${describe(tolerance)}`);
    }
    const c = readArgument('caseDocument', () => parseCase(caseDocument));
    // The result read once into tensors of its own (results that crossed a worker boundary are
    // plain objects, and a caller's object may be anything).
    const got = readArgument('result', () => readCaseResult(c, result));
    return compareWithExpected(c, got, tolerance);
  }

  /**
   * Bytes a generation's KV caches hold for a transformer `config` (createTransformer's, `seed`
   * ignored): options.batch sequences (default 1) of options.positions positions each (prompt
   * plus new tokens; default config.maxLen). Per layer keys and values of batch x positions x
   * (nKvHeads x head dim) floats: grouped-query attention's are nHeads / nKvHeads times smaller,
   * multi-query's (nKvHeads 1) nHeads times; 0 for a non-causal model. The core computes it from
   * the config (no model is made); model.kvCacheBytes() after such a generate() is the same.
   */
  kvCacheBytes(config, options = {}) {
    Headscope.open(this, 'kvCacheBytes');
    const c = normalizeTransformerConfig(config);
    const o = { batch: 1, positions: c.maxLen, ...readOptions(options, { batch: 0, positions: 0 }) };
    for (const k of ['batch', 'positions']) {
      if (!Number.isInteger(o[k]) || o[k] < 1 || o[k] > MAX_DIM) {
        fail('INVALID_ARGUMENT', `options.${k}: expected an integer in [1, ${MAX_DIM}], got ${describe(o[k])}`);
      }
    }
    Headscope.open(this, 'kvCacheBytes');
    const core = this._core;
    const handle = callCore(() => new core.TransformerHandle());
    try {
      if (callCore(() => handle.kvCacheBytesFor(c, o.batch, o.positions)) !== 0) failWithStatus(callCore(() => handle.lastStatus()));
      return callCore(() => handle.lastKvCacheBytes());
    } finally {
      handle.delete();
    }
  }

  /**
   * ALiBi's slopes for `nHeads` heads (Press et al.'s get_slopes, float32 values): an array
   * whose entry h is the slope every layer of a positions: 'alibi' transformer uses for head h,
   * adding -slope |i - j| to its score (i, j). (A plain array: it crosses a worker as it is.)
   */
  alibiSlopes(nHeads) {
    Headscope.open(this, 'alibiSlopes');
    if (!Number.isInteger(nHeads) || nHeads < 1 || nHeads > MAX_DIM) {
      fail('INVALID_ARGUMENT', `nHeads: expected an integer in [1, ${MAX_DIM}], got ${describe(nHeads)}`);
    }
    const core = this._core;
    return Array.from({ length: nHeads }, (_, h) => callCore(() => core.alibiSlope(h, nHeads)));
  }

  /** Objects created and not yet disposed. */
  liveHandles() {
    Headscope.check(this, 'liveHandles');
    return this._live.size;
  }

  /** wasmBytes: the WebAssembly memory's size; heapInUse: bytes malloc has handed out. */
  memory() {
    Headscope.open(this, 'memory');
    // mallinfo() counts in a C int: read it unsigned, or a heap past 2 GiB shows negative.
    return { wasmBytes: this._core.HEAPU8.length, heapInUse: this._core.heapInUse() >>> 0 };
  }

  /** Calls needing more bytes than this are refused with RESOURCE_EXHAUSTED (default 2 GiB). */
  get maxCallBytes() {
    return Headscope.open(this, 'maxCallBytes')._core.maxCallBytes();
  }

  set maxCallBytes(bytes) {
    Headscope.open(this, 'maxCallBytes');
    // The core's limit is a 32-bit size_t in WebAssembly: larger values would wrap to 0.
    if (typeof bytes !== 'number' || !(bytes >= 0) || !(bytes <= MAX_CALL_BYTES)) {
      fail('INVALID_ARGUMENT', `maxCallBytes: expected a number of bytes in [0, ${MAX_CALL_BYTES}], ` +
        `got ${describe(bytes)}`);
    }
    this._core.setMaxCallBytes(bytes);
  }

  /**
   * Releases the engine: disposes every object it created, ends the threads of a threaded module
   * and forgets it, so the next init() loads a new one. Later use of this engine or its objects
   * throws DISPOSED. Closing twice is a no-op.
   */
  close() {
    Headscope.check(this, 'close');
    if (this._closed) return;
    this._closed = true;
    for (const state of this._live) {
      if (state.disposed) continue;
      state.disposed = true;
      try {
        state.handle.delete();
      } catch {
        // A heap too broken to free in: the engine is going away anyway.
      }
      this._finalizer.unregister(state);
    }
    this._live.clear();
    closeCore(this._core);
    this._onClose();
  }

  /** True once close() was called. */
  get closed() {
    return Headscope.check(this, 'closed')._closed;
  }
}

// Runs a core call; a trap or abort inside WebAssembly becomes an INTERNAL error (a headscope bug,
// or a small allocation of the core failing when the wasm heap is exhausted to its last bytes).
function callCore(fn) {
  try {
    return fn();
  } catch (e) {
    if (e instanceof HeadscopeError) throw e;
    throw new HeadscopeError('INTERNAL', `headscope internal error: ${describeThrown(e)}`, { cause: e });
  }
}

// ---- What every object owning a core handle shares (MultiheadAttention, Transformer) ----

/**
 * A loadStateDict argument pair read once: { strict, tensors: [[key, float snapshot]] }. JS reads
 * the values (their types, each read once); which keys a config has and their shapes are the
 * core's rules, applied as each entry is loaded (loadEntries).
 */
function readStateDict(stateDict, options, expectedKeys) {
  const given = readOptions(options, { strict: true });
  const strict = given.strict === undefined ? true : checkBool(given.strict, 'options.strict');
  // The entries, read once: [key, value] pairs of the caller's Map or own enumerable keys.
  const entries = readArgument('stateDict', () => {
    const pairs = [];
    if (isMap(stateDict)) {
      mapForEach(stateDict, (value, key) => { pairs.push([key, value]); });
    } else if (stateDict !== null && typeof stateDict === 'object' && !Array.isArray(stateDict)) {
      for (const key of Object.keys(stateDict)) pairs.push([key, stateDict[key]]);
    } else {
      fail('INVALID_ARGUMENT', 'stateDict: expected an object mapping PyTorch state_dict keys ' +
        `(${expectedKeys()}) to tensors, got ${describe(stateDict)}`);
    }
    return pairs;
  });
  const tensors = [];
  for (const [key, value] of entries) {
    if (typeof key !== 'string') {
      fail('UNKNOWN_PARAMETER', `stateDict: key ${describe(key)} is not a string (expected keys: ` +
        `${expectedKeys()})`);
    }
    tensors.push([key, toFloatTensor(value, `stateDict['${quoteInput(key)}']`)]);
  }
  return { strict, tensors };
}

/**
 * All or nothing: the entries go into the handle's staging copy (of the live entries when not
 * strict), which replaces the live one only once all were accepted (and, strict, all are there).
 * `write(t)` puts one snapshot into the handle's parameter slot; `check(code, hint)` throws.
 */
function loadEntries(handle, { strict, tensors }, write, check) {
  if (tensors.length === 0 && !strict) return;
  check(callCore(() => handle.loadBegin(!strict)));
  try {
    for (const [key, t] of tensors) {
      write(t);
      check(callCore(() => handle.setParameter(key)));
    }
    check(callCore(() => handle.loadCommit(strict)), ' (pass { strict: false } to load a subset)');
  } catch (e) {
    try {
      handle.loadAbort();
    } catch {
      // The staging copy is freed with the handle at the latest.
    }
    throw e;
  }
}

// Throws the core's error for a nonzero code; `hint` is appended to a MISSING_PARAMETER's message.
function checkCode(handle, code, hint = '') {
  if (code !== 0) {
    const status = callCore(() => handle.lastStatus());
    failWithStatus(status, status.startsWith('MISSING_PARAMETER\n') ? hint : '');
  }
}

function disposeState(hs, state) {
  if (state.disposed) return;
  state.disposed = true;
  state.handle.delete();
  hs._live.delete(state);
  hs._finalizer.unregister(state);
}

// The live handle, or DISPOSED naming what was disposed.
function liveHandle(hs, state, className) {
  if (state.disposed) {
    fail('DISPOSED', hs._closed
      ? `${className}: its engine was closed (hs.close()); call init() and create a new one`
      : `${className}: this object was disposed; create a new one`);
  }
  return state.handle;
}


/**
 * What MultiheadAttention and Transformer share: a handle in WebAssembly memory (disposed once),
 * its input arena, and the one writer of a call block and reader of a result block, both built
 * from the module's protocol (readProtocol: the slots by name, src/bindings/embind.cc's).
 * `layout`: the object's protocol ({ slot, callSlots, flagsWord, windowWord }); `className` names it in
 * DISPOSED errors.
 */
class EngineObject {
  constructor(hs, handle, className, layout) {
    this._hs = hs;
    this._core = hs._core;
    this._className = className;
    this._layout = layout;
    this._state = { handle, disposed: false };
    this._callBlock = handle.callBlock() >>> 2;
    this._arenaBase = 0;  // the handle's input arena in wasm memory, as last reserved
    this._arenaBytes = 0;
    this._arenaGrown = false;  // the last call's inputs grew it (freed again if refused)
    // Scratch of _writeCall, reused by every call.
    const n = layout.callSlots;
    this._slots = new Array(n).fill(null);
    this._offsets = new Array(n).fill(0);
    this._copies = new Array(n).fill(false);
    // Which call-block slots hold a tensor from the last call: an empty slot is cleared only if
    // it was not empty already (C++ never writes the call block), which saves most calls the
    // clearing of the mask and gate slots.
    this._filled = new Array(n).fill(true);
    hs._live.add(this._state);
    hs._finalizer.register(this, this._state, this._state);
  }

  // The live handle, or DISPOSED naming the class.
  _handle() {
    return liveHandle(this._hs, this._state, this._className);
  }

  // Puts the snapshots into the call block: `tensors` { slotName: snapshot } (the others empty).
  _write(tensors, flags = 0) {
    const slots = this._slots;
    const slot = this._layout.slot;
    for (const name in tensors) slots[slot[name]] = tensors[name];
    this._writeCall(flags);
  }

  // Copies the snapshots in this._slots (null: an empty slot) into the handle's arena (one copy
  // each; data shared between slots once) and describes them in the call block, in the protocol's
  // slot order; then the flags word and the window's word, for an object whose protocol has
  // them. The bytes reserved and copied both come from each snapshot's true element count.
  _writeCall(flags, window = 0) {
    const P = this._hs._protocol;
    const slots = this._slots;
    const n = this._layout.callSlots;
    const offsets = this._offsets;
    const copies = this._copies;
    let bytes = 0;
    for (let i = 0; i < n; i++) {
      const t = slots[i];
      copies[i] = false;
      if (t === null) continue;
      if (typedArrayLength(t.data) !== t.count) {
        for (let k = 0; k < n; k++) slots[k] = null;
        checkIntact(t);
      }
      let j = 0;
      while (j < i && (slots[j] === null || slots[j].data !== t.data)) j++;
      if (j < i) {
        offsets[i] = offsets[j];
      } else {
        offsets[i] = bytes;
        copies[i] = true;
        bytes += Math.ceil((t.type === 'bool' ? t.count : t.count * 4) / 16) * 16;
      }
    }
    // The arena only moves when reserve() grows it, so a call that fits the last reservation
    // skips that round trip into WebAssembly.
    let base = this._arenaBase;
    if (bytes > this._arenaBytes) {
      const handle = this._state.handle;
      this._arenaGrown = true;  // (freed again if the call is refused: _check)
      base = callCore(() => handle.reserve(bytes));
      if (base === 0 && bytes > 0) {
        for (let i = 0; i < n; i++) slots[i] = null;
        fail('RESOURCE_EXHAUSTED', `inputs: could not allocate ${bytes} bytes of WebAssembly memory`);
      }
      this._arenaBase = base;
      this._arenaBytes = bytes;
    }
    // reserve() may have grown memory: take the heap views only now. Offsets are multiples of
    // 16 bytes, so float data goes through HEAPF32 without a per-call view of the caller's data
    // (and token ids, int32, through HEAPU32: the conversion keeps every bit, negatives included).
    const heap = this._hs._heap();
    const heapU32 = heap._u32;
    const words = P.wordsPerTensor;
    let w = this._callBlock;
    for (let i = 0; i < n; i++, w += words) {
      const t = slots[i];
      slots[i] = null;  // keep no reference to the caller's data between calls
      if (t === null) {
        if (this._filled[i]) {
          for (let j = 0; j < words; j++) heapU32[w + j] = 0;
          this._filled[i] = false;
        }
        continue;
      }
      this._filled[i] = true;
      const at = base + offsets[i];
      const { data, shape, type } = t;
      if (copies[i]) {
        if (type === 'bool') typedArraySet(heap._u8, data, at);
        else if (type === 'int32') typedArraySet(heapU32, data, at >>> 2);
        else typedArraySet(heap._f32, data, at >>> 2);
      }
      heapU32[w + P.address] = at;
      heapU32[w + P.type] = type === 'bool' ? P.bool : type === 'int32' ? P.int32 : P.float;
      heapU32[w + P.rank] = shape.length;
      for (let d = 0; d < 4; d++) heapU32[w + P.dims + d] = d < shape.length ? shape[d] : 0;
      heapU32[w + P.count] = t.count;
    }
    if (this._layout.flagsWord >= 0) heapU32[this._callBlock + this._layout.flagsWord] = flags;
    if (this._layout.windowWord >= 0) heapU32[this._callBlock + this._layout.windowWord] = window;
  }

  // Copies `count` results out of wasm memory, as Tensors (null for an empty slot); result 0 goes
  // into `into` when one is given (a new Float32Array of more than 16 floats costs V8 ~0.3 us, an
  // off-heap allocation: for a tutorial-sized call a fifth of the whole time, hence forward()'s
  // `out`); `unbatched` drops each tensor's leading axis of 1. Token ids (int32) come back as an
  // Int32Array. The block is the handle's (the Transformer's grows with its hooks: asked anew).
  _readResults(count, into = null, unbatched = false) {
    const P = this._hs._protocol;
    const block = this._resultBlock ?? (callCore(() => this._state.handle.resultBlock()) >>> 2);
    const heap = this._hs._heap();
    const heapU32 = heap._u32;
    const results = new Array(count);
    for (let i = 0; i < count; i++) {
      const w = block + i * P.wordsPerTensor;
      const type = heapU32[w + P.type];
      if (type === P.none) {
        results[i] = null;
        continue;
      }
      const rank = heapU32[w + P.rank];
      const shape = new Array(rank);
      for (let d = 0; d < rank; d++) shape[d] = heapU32[w + P.dims + d];
      const start = heapU32[w + P.address] >>> 2;
      const end = start + heapU32[w + P.count];
      const view = type === P.int32 ? heap._i32 : heap._f32;
      let data;
      if (i === 0 && into !== null) {
        data = into;
        typedArraySet(data, view.subarray(start, end));
      } else {
        data = view.slice(start, end);
      }
      results[i] = new Tensor(data, unbatched && rank > 1 && shape[0] === 1 ? shape.slice(1) : shape);
    }
    return results;
  }

  // Throws the core's error for a nonzero code; `hint` is appended to a MISSING_PARAMETER's
  // message (the JS-side advice of loadStateDict).
  _check(code, hint = '') {
    const grown = this._arenaGrown;
    this._arenaGrown = false;
    if (code !== 0 && grown) this._releaseInputs();
    checkCode(this._state.handle, code, hint);
  }

  // After a refused call whose inputs grew the arena: the arena goes too (the core frees what the
  // call grew), so nothing more is held than before the call (the (2^20, 16) tokens of a refused
  // forward are 64 MiB); the next call reserves again.
  _releaseInputs() {
    const handle = this._state.handle;
    callCore(() => handle.releaseArena());
    this._arenaBase = 0;
    this._arenaBytes = 0;
  }

  // All or nothing (loadEntries): the entries go through the parameter slot into the handle's
  // staging copy, which replaces the live one once every entry was accepted.
  _load(load) {
    const parameterSlot = this._layout.parameterSlot;
    loadEntries(this._handle(), load, (t) => {
      this._slots[parameterSlot] = t;
      this._writeCall(0);
    }, (code, hint) => this._check(code, hint));
  }
}

class MultiheadAttention extends EngineObject {
  #brand = true;
  // Methods whose answer is fixed for the object's life: a remote object (initWorker) answers
  // them from the values its worker sent when it was created (worker.js constantsOf).
  static constants = Object.freeze(['parameterShapes']);

  static check(self, method) {
    if (self === null || typeof self !== 'object' || !(#brand in self)) {
      wrongThis('MultiheadAttention', method, self);
    }
    return self;
  }

  constructor(hs, config) {
    const core = hs._core;
    const handle = callCore(() => new core.Handle());
    let parameters;
    try {
      // The config by its fields' JS names: the binding reads it through the same schema.
      const code = callCore(() => handle.init(config));
      if (code !== 0) {
        failWithStatus(callCore(() => handle.lastStatus()));
      }
      // Accepted: null kdim / vdim mean embedDim, as in torch; a null numKvHeads means numHeads.
      config = {
        ...config,
        kdim: config.kdim ?? config.embedDim,
        vdim: config.vdim ?? config.embedDim,
        numKvHeads: config.numKvHeads ?? config.numHeads,
      };
      parameters = callCore(() => handle.expectedParameters());
    } catch (e) {
      handle.delete();
      throw e;
    }
    super(hs, handle, 'MultiheadAttention', hs._protocol);
    this._address = handle.address();  // for core._headscope_forward (see forward())
    this._resultBlock = handle.resultBlock() >>> 2;  // (fixed: the handle's own array)
    this._headStats = false;  // the last call asked for head statistics
    this._parameters = new Map(JSON.parse(parameters));
    /** The constructor arguments with PyTorch's defaults filled in. */
    this.config = Object.freeze({ ...config });
  }

  /** state_dict keys this config has, with their shapes, in PyTorch's order. */
  parameterShapes() {
    MultiheadAttention.check(this, 'parameterShapes');
    return Object.fromEntries([...this._parameters].map(([k, s]) => [k, s.slice()]));
  }

  /**
   * Loads weights by PyTorch's state_dict names. All or nothing: every entry is read and checked
   * before any is loaded, and the entries go into a staging copy of the module that replaces the
   * live one only once all of them were accepted. strict (default): every key of the config must
   * be present.
   */
  loadStateDict(stateDict, options = {}) {
    MultiheadAttention.check(this, 'loadStateDict');
    this._handle();
    const load = readStateDict(stateDict, options, () => [...this._parameters.keys()].join(', '));
    // (The caller's getters ran above: _load takes the handle anew, refusing a disposed object.)
    this._load(load);
  }

  /**
   * torch.nn.MultiheadAttention.forward. Returns { output, weights }; weights is null when
   * needWeights is false, (N, L, S) averaged or (N, H, L, S) per head otherwise. With
   * options.headStats also headStats: { entropy, distance, maxWeight }, each (N, H) or (H),
   * computed in the pass (the weights need not be returned for it; docs/api.md, "Head statistics").
   */
  forward(query, key, value, options = {}) {
    MultiheadAttention.check(this, 'forward');
    this._handle();  // refuses a disposed object before reading anything
    const out = this._prepare(query, key, value, options, FORWARD_DEFAULTS);
    // handle.forward() without embind's per-call argument checks (src/bindings/embind.cc).
    const address = this._address;
    this._check(callCore(() => this._core._headscope_forward(address)));
    if (this._headStats) return this._forwardResultWithStats(out);
    const [output, weights] = this._readResults(2, out);
    return { output, weights };
  }

  // (Apart from forward(): its hot path stays as small as it was without statistics.)
  _forwardResultWithStats(out) {
    const results = this._readResults(2 + HEAD_STATS_RESULTS.length, out);
    return { output: results[0], weights: results[1], headStats: this._groupHeadStats(results.slice(2)) };
  }

  // { entropy, distance, maxWeight }, each ([N,] H), from the protocol's head statistics slots.
  _groupHeadStats(tensors) {
    const names = this._hs._protocol.headStatsResults;
    return Object.fromEntries(names.map((name, i) => [name, tensors[i]]));
  }

  /**
   * Every intermediate of one forward pass, per head: q, k, v ([N,] H, L|S, hd), scores (scaled,
   * masked, -inf where blocked), weights (softmax), headOutputs (weights x V), concat ([N,] L, E)
   * and output. The leading N appears only for batched input. With options.headGates, headOutputs
   * and concat are the gated outputs (what out_proj sees); scores and weights are never gated.
   * With options.headStats also headStats, as forward() returns it. With config.ropeDims > 0 also
   * rotQ and rotK: q and k turned by position (rotary embeddings), what the scores use; q and k
   * stay the projections.
   */
  trace(query, key, value, options = {}) {
    MultiheadAttention.check(this, 'trace');
    this._handle();
    this._prepare(query, key, value, options, TRACE_OPTIONS);
    const handle = this._state.handle;
    const stages = this._hs._protocol.traceResults;
    const statsCount = this._headStats ? this._hs._protocol.headStatsResults.length : 0;
    this._check(callCore(() => handle.trace()));
    const tensors = this._readResults(stages.length + statsCount);
    // The trace's buffers (every intermediate, L x S per head twice) are copied out: free them.
    // (A trace that failed has freed what it had allocated already: the core's own refusal.)
    callCore(() => handle.releaseTrace());
    // (rotQ / rotK: only with rotary embeddings; the engine leaves their slots empty otherwise.)
    const trace = Object.fromEntries(stages.map((name, i) => [name, tensors[i]])
      .filter(([name, t]) => t !== null || (name !== 'rotQ' && name !== 'rotK')));
    if (statsCount > 0) trace.headStats = this._groupHeadStats(tensors.slice(stages.length));
    return trace;
  }

  /** Frees this object's WebAssembly memory. Any later use throws HeadscopeError (DISPOSED). */
  dispose() {
    disposeState(MultiheadAttention.check(this, 'dispose')._hs, this._state);
  }

  get disposed() {
    return MultiheadAttention.check(this, 'disposed')._state.disposed;
  }


  // Reads the forward arguments into snapshots, then (and only then) writes them to the call
  // block. Every value of the caller's is read once, before anything touches WebAssembly memory,
  // so a getter or Proxy trap that calls back into headscope (dispose(), another forward(), a
  // new module that grows memory) finds nothing half done; after the last read the object is
  // checked again, and from there to the result no caller code runs. This and _readResults are
  // the whole per-call cost in JS, which is most of a tutorial-sized call's time (a 3 x 4 forward
  // takes well under a microsecond in WebAssembly): no spreads, Maps or per-call typed-array views.
  // Returns options.out (forward() only), checked against the output's size, or null.
  _prepare(query, key, value, options, allowed) {
    let needWeights = true;
    let averageAttnWeights = true;
    let isCausal = false;
    let headStats = false;
    let alibi = false;
    let window = 0;
    let keyPaddingMask = null;
    let attnMask = null;
    let headGates = null;
    let out = null;
    if (options !== undefined) {
      const given = readOptions(options, allowed);
      for (const name in given) {
        const v = given[name];
        if (v === undefined) continue;
        switch (name) {
          case 'needWeights': needWeights = checkBool(v, 'options.needWeights'); break;
          case 'averageAttnWeights': averageAttnWeights = checkBool(v, 'options.averageAttnWeights'); break;
          case 'isCausal': isCausal = checkBool(v, 'options.isCausal'); break;
          case 'headStats': headStats = checkBool(v, 'options.headStats'); break;
          case 'alibi': alibi = checkBool(v, 'options.alibi'); break;
          case 'window': window = checkWindow(v); break;
          case 'keyPaddingMask': keyPaddingMask = v; break;
          case 'attnMask': attnMask = v; break;
          case 'headGates': headGates = v; break;
          case 'out':
            if (v !== null) {
              if (typedArrayName(v) !== 'Float32Array') {
                fail('INVALID_ARGUMENT', 'options.out: expected a Float32Array to write the output ' +
                  `into (or null), got ${describe(v)}`);
              }
              out = v;
            }
            break;
          default: break;
        }
      }
    }
    // Self-attention passes one array three times: convert (and copy) it once.
    const q = toFloatTensor(query, 'query');
    const k = key === query ? q : toFloatTensor(key, 'key');
    const v = value === query ? q : value === key ? k : toFloatTensor(value, 'value');
    const kpm = toMask(keyPaddingMask, 'options.keyPaddingMask');
    const am = toMask(attnMask, 'options.attnMask');
    const gates = toHeadGates(headGates);
    const P = this._hs._protocol;
    const flags = (needWeights ? P.flags.needWeights : 0) |
      (averageAttnWeights ? P.flags.averageWeights : 0) | (isCausal ? P.flags.isCausal : 0) |
      (headStats ? P.flags.headStats : 0) | (alibi ? P.flags.alibi : 0);
    // The output has the query's shape, so `out` can be checked before any work is done; its
    // true length is read after every caller getter has run (one of them may have detached it).
    if (out !== null && typedArrayLength(out) !== q.count) {
      fail('SHAPE_MISMATCH', `options.out: expected a Float32Array of ${q.count} elements ` +
        `(the output has the query's shape [${q.shape.join(', ')}]), got length ` +
        `${typedArrayLength(out)}`);
    }
    this._handle();  // a getter may have disposed this object
    const slots = this._slots;
    const at = P.slot;
    slots[at.query] = q;
    slots[at.key] = k;
    slots[at.value] = v;
    slots[at.keyPaddingMask] = kpm;
    slots[at.attnMask] = am;
    slots[at.headGates] = gates;
    this._headStats = headStats;  // how many results forward() and trace() read back
    this._writeCall(flags, window);
    return out;
  }

}

/** createTransformer's config: the schema's fields (config.js), type-checked, and `seed`. */
function normalizeTransformerConfig(config) {
  readArgument('config', () => {
    if (config === null || typeof config !== 'object' || Array.isArray(config)) {
      fail('INVALID_ARGUMENT', 'config: expected an object like { vocabSize: 28, maxLen: 32, dModel: 32 }, ' +
        `got ${describe(config)}`);
    }
  });
  const c = readArgument('config', () => readConfig(TRANSFORMER_SCHEMA, config, 'config', { extra: { seed: 0 } }));
  // null: no initial weights (the model refuses to compute until loadStateDict fills it), for a
  // caller about to load every weight: a seeded model of vocab 2^24 would first allocate and fill
  // 2^24 x dModel floats that the load then replaces.
  if (c.seed !== null) checkNumber(c.seed, 'config.seed');
  return c;
}

const TRANSFORMER_FORWARD = Object.freeze({ hooks: null, headGates: null });
const EXPERIMENT_OPTIONS = Object.freeze({ headGates: null });
const SCORE_OPTIONS = Object.freeze({ layer: null, head: null, position: null, batch: 0, headGates: null });
const PATCHING_OPTIONS = Object.freeze({ site: 'heads', headGates: null });
const PATCHING_SITES = Object.freeze(['heads', 'positions']);

/** An index option of scoreContributions: an integer (the core checks its range). */
function checkIndex(value, name) {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > MAX_DIM) {
    fail('INVALID_ARGUMENT', `${name}: expected an integer >= 0, got ${describe(value)}`);
  }
  return value;
}

/** A (n0, B, ...) result of unbatched tokens as (n0, ...): the batch axis (1) dropped. */
function dropBatchAxis(t, batched) {
  return batched ? t : new Tensor(t.data, [t.shape[0], ...t.shape.slice(2)]);
}
const TRANSFORMER_BACKWARD = Object.freeze({ headGates: null, headGateGrads: false });
const TRANSFORMER_GENERATE = Object.freeze({
  maxNewTokens: 1, temperature: 0, topK: 0, topP: 1, seed: 0, headGates: null, logits: false,
});

/** Token ids (T) or (B, T) as a (B, T) int32 snapshot, and whether they were batched. */
function toTokenRows(tokens, name) {
  const t = toTokens(tokens, name);
  const batched = t.shape.length !== 1;
  if (!batched) t.shape = [1, t.shape[0]];
  if (t.shape.length !== 2) {
    fail('SHAPE_MISMATCH', `${name}: expected (T) or (B, T) token ids, got shape [${t.shape.join(', ')}]`);
  }
  return { t, batched };
}

/**
 * tokens and targets of backward / trainStep as (B, T) int32 snapshots: the targets must have
 * the tokens' shape, (T) with (T) or (B, T) with (B, T) (the sizes are the core's check).
 */
function trainingRows(tokens, targets) {
  const { t, batched } = toTokenRows(tokens, 'tokens');
  const y = toTokenRows(targets, 'targets');
  if (y.batched !== batched) {
    const shape = (r) => `[${(r.batched ? r.t.shape : r.t.shape.slice(1)).join(', ')}]`;
    fail('SHAPE_MISMATCH', `targets: expected the tokens' shape ${shape({ t, batched })}, got ${shape(y)}`);
  }
  return { t, y: y.t };
}

/** A transformer in WebAssembly memory (hs.createTransformer). */
class Transformer extends EngineObject {
  #brand = true;
  // (As MultiheadAttention.constants.)
  static constants = Object.freeze(['parameterShapes', 'hookNames']);

  static check(self, method) {
    if (self === null || typeof self !== 'object' || !(#brand in self)) wrongThis('Transformer', method, self);
    return self;
  }

  constructor(hs, config) {
    const core = hs._core;
    const handle = callCore(() => new core.TransformerHandle());
    let parameters;
    let hooks;
    try {
      const code = callCore(() => handle.init(config));
      if (code !== 0) failWithStatus(callCore(() => handle.lastStatus()));
      if (config.seed !== null) {
        const seeded = callCore(() => handle.initFromSeed(config.seed));
        if (seeded !== 0) failWithStatus(callCore(() => handle.lastStatus()));
      }
      parameters = callCore(() => handle.expectedParameters());
      hooks = callCore(() => handle.hookNames());
    } catch (e) {
      handle.delete();
      throw e;
    }
    super(hs, handle, 'Transformer', hs._protocol.transformer);
    // [key, shape] per state_dict key; [key, shape, earlier key] for a key naming an earlier
    // key's tensor (tieEmbeddings: unembed.weight is tok_embed.weight), which has no gradient of
    // its own in backward() (named_parameters() lists the tensor once).
    const entries = JSON.parse(parameters);
    this._parameters = new Map(entries.map(([key, shape]) => [key, shape]));
    this._gradientNames = entries.filter((e) => e.length === 2).map(([key]) => key);
    this._hookNames = Object.freeze(JSON.parse(hooks));
    /** The config with the defaults filled in. */
    this.config = Object.freeze({ ...config });
  }

  /** state_dict keys and shapes of this config, in the reference module's order. */
  parameterShapes() {
    Transformer.check(this, 'parameterShapes');
    return Object.fromEntries([...this._parameters].map(([k, s]) => [k, s.slice()]));
  }

  /** The hook names forward({ hooks }) accepts for this config (TransformerLens names). */
  hookNames() {
    return [...Transformer.check(this, 'hookNames')._hookNames];
  }

  /** Loads weights by the reference module's state_dict names; all or nothing, as MultiheadAttention's. */
  loadStateDict(stateDict, options = {}) {
    Transformer.check(this, 'loadStateDict');
    this._handle();
    const load = readStateDict(stateDict, options, () => [...this._parameters.keys()].join(', '));
    this._load(load);
  }

  /** Every weight: { name: Tensor }, the reference module's keys in its order (copies). */
  stateDict() {
    Transformer.check(this, 'stateDict');
    const handle = this._handle();
    const out = {};
    for (const name of this._parameters.keys()) {
      this._check(callCore(() => handle.parameter(name)));
      out[name] = this._readResults(1)[0];
    }
    return out;
  }

  /**
   * Logits (B, T, vocabSize) of tokens (B, T), or (T, vocabSize) of (T); with options.hooks also
   * hooks: { name: Tensor } (each with the batch axis only for batched tokens); options.headGates
   * (nLayers, nHeads) scales each head's output before its out_proj.
   */
  forward(tokens, options = {}) {
    Transformer.check(this, 'forward');
    this._handle();
    const given = readOptions(options, TRANSFORMER_FORWARD);
    const { t, batched } = toTokenRows(tokens, 'tokens');
    let hookList = [];
    if (given.hooks !== undefined && given.hooks !== null) {
      hookList = readArgument('options.hooks', () => {
        const hooks = given.hooks;
        if (!Array.isArray(hooks)) {
          fail('INVALID_ARGUMENT', `options.hooks: expected an array of hook names, got ${describe(hooks)}`);
        }
        // length read once and bounded by the model's hooks (each may be asked for once), then
        // each element read once: a sparse array of length 2^32 - 1 or a Proxy whose length grows
        // is refused rather than walked.
        const n = hooks.length;
        const most = this._hookNames.length;
        if (!Number.isInteger(n) || n < 0 || n > most) {
          fail('INVALID_ARGUMENT', `options.hooks: expected at most ${most} hook names (this model's ` +
            `hookNames(), each once), got an array of length ${describe(n)}`);
        }
        const names = new Array(n);
        for (let i = 0; i < n; i++) {
          const name = hooks[i];
          if (typeof name !== 'string' || name === '' || name.includes('\n')) {
            fail('INVALID_ARGUMENT', `options.hooks[${i}]: expected a hook name, got ${describe(name)}`);
          }
          names[i] = name;
        }
        return names;
      });
    }
    const gates = given.headGates === undefined || given.headGates === null ? null
      : toFloatTensor(given.headGates, 'options.headGates');
    const handle = this._handle();  // a getter may have disposed this object
    this._write({ tokens: t, headGates: gates });
    this._check(callCore(() => handle.forward(hookList.join('\n'))));
    const results = this._readResults(1 + hookList.length, null, !batched);
    const out = { logits: results[0] };
    if (hookList.length > 0) out.hooks = Object.fromEntries(hookList.map((n, i) => [n, results[i + 1]]));
    return out;
  }

  /**
   * Appends options.maxNewTokens (default 1) tokens to the prompt, (T) or (B, T) token ids:
   * greedy at temperature 0 (the default; the first largest logit), else sampled from
   * softmax(logits / temperature) cut to the topK largest (0: all) and the topP nucleus (1: all),
   * with options.seed (an integer, default 0) fixing the draws. The temperature rule: a
   * temperature > 0 so small that the logits divided by it overflow a double (1e-320, 5e-324; the
   * smallest normal double for logits beyond about 4) takes the greedy choice, the limit of
   * sampling as the temperature goes to 0 (ties: the lower index). A causal model keeps a KV cache:
   * each new token costs one position's pass, and its logits are the bits forward() gives the
   * last position of the whole sequence. Returns { tokens } (int32, the prompt then the new
   * tokens: (T + n) or (B, T + n)), and with options.logits also logits ((n, V) or (B, n, V)),
   * the logits each new token was chosen from. options.headGates as forward's. Synchronous: it
   * returns when every token is drawn and cannot be cancelled (initWorker()'s generate runs in
   * chunks between which other requests are served, and takes options.signal to cancel).
   */
  generate(prompt, options = {}) {
    Transformer.check(this, 'generate');
    const { o, batched, handle } = this._generateArguments(prompt, options);
    this._check(callCore(() => handle.generate(o.maxNewTokens, o.temperature, o.topK, o.topP,
      o.seed, o.logits)));
    return this._generated(o.logits, batched);
  }

  // generate's arguments, read once and written to the call block: the options with defaults,
  // whether the prompt was batched, the live handle.
  _generateArguments(prompt, options) {
    this._handle();
    const o = withDefaults(readOptions(options, TRANSFORMER_GENERATE), TRANSFORMER_GENERATE);
    for (const k of ['maxNewTokens', 'temperature', 'topK', 'topP', 'seed']) {
      if (typeof o[k] !== 'number') fail('INVALID_ARGUMENT', `options.${k}: expected a number, got ${describe(o[k])}`);
    }
    checkBool(o.logits, 'options.logits');
    const { t, batched } = toTokenRows(prompt, 'prompt');
    const gates = o.headGates === null ? null : toFloatTensor(o.headGates, 'options.headGates');
    const handle = this._handle();  // a getter may have disposed this object
    this._write({ tokens: t, headGates: gates });
    return { o, batched, handle };
  }

  // A finished generation's { tokens, logits? } from the result slots.
  _generated(logits, batched) {
    const results = this._readResults(logits ? 2 : 1, null, !batched);
    const out = { tokens: results[0] };
    if (logits) out.logits = results[1];
    return out;
  }

  // ---- generate in chunks (the worker's Transformer.generate, worker.js): the same checks,
  // steps and bits as generate(), with other calls allowed between the chunks ----

  /** Checks generate's arguments and runs the prompt; no token is drawn yet. */
  _generateBegin(prompt, options = {}) {
    Transformer.check(this, '_generateBegin');
    const { o, batched, handle } = this._generateArguments(prompt, options);
    this._generation = null;
    this._check(callCore(() => handle.generateBegin(o.maxNewTokens, o.temperature, o.topK, o.topP,
      o.seed, o.logits)));
    this._generation = { logits: o.logits, batched };
  }

  /**
   * Draws up to `steps` more tokens per sequence; once all are drawn, returns generate()'s
   * result, else null. A change of the weights since _generateBegin (loadStateDict, trainStep)
   * is CANCELLED.
   */
  _generateContinue(steps) {
    Transformer.check(this, '_generateContinue');
    const handle = this._handle();
    const generation = this._generation;
    if (generation === null || generation === undefined) {
      fail('INVALID_ARGUMENT', 'generate: no generation in progress (_generateBegin starts one)');
    }
    const code = callCore(() => handle.generateContinue(steps));
    if (code !== 0) this._generation = null;
    this._check(code);
    if (!callCore(() => handle.generateDone())) return null;
    this._generation = null;
    return this._generated(generation.logits, generation.batched);
  }

  /** Ends the generation in progress, if any, and frees its caches. */
  _generateCancel() {
    Transformer.check(this, '_generateCancel');
    if (this._state.disposed) return;
    this._generation = null;
    const handle = this._state.handle;
    callCore(() => handle.generateCancel());
  }

  /**
   * The gradient of the mean cross-entropy of forward(tokens)'s logits against targets (the
   * tokens' shape; -100 where nothing is predicted) with respect to every weight, without
   * changing any: { loss, grads: { name: Tensor } } in stateDict()'s keys and order but a tied
   * unembed.weight (tieEmbeddings: one tensor, whose gradient, the sum of both uses, is
   * grads['tok_embed.weight'], as torch's named_parameters() lists it once); with
   * options.headGateGrads also grads.headGates, d loss / d gate as nested arrays (nLayers,
   * nHeads) of numbers (at options.headGates, or at gates of 1).
   */
  backward(tokens, targets, options = {}) {
    Transformer.check(this, 'backward');
    this._handle();
    const o = withDefaults(readOptions(options, TRANSFORMER_BACKWARD), TRANSFORMER_BACKWARD);
    checkBool(o.headGateGrads, 'options.headGateGrads');
    const { t, y } = trainingRows(tokens, targets);
    const gates = o.headGates === null ? null : toFloatTensor(o.headGates, 'options.headGates');
    const handle = this._handle();  // a getter may have disposed this object
    this._write({ tokens: t, headGates: gates, targets: y });
    this._check(callCore(() => handle.backward(o.headGateGrads)));
    const names = this._gradientNames;
    const results = this._readResults(names.length + (o.headGateGrads ? 1 : 0));
    const grads = {};
    names.forEach((n, i) => { grads[n] = results[i]; });
    if (o.headGateGrads) {
      const g = results[names.length];
      const [L, H] = g.shape;
      grads.headGates = Array.from({ length: L }, (_, l) => Array.from(g.data.subarray(l * H, (l + 1) * H)));
    }
    return { loss: callCore(() => handle.lastLoss()), grads };
  }

  /**
   * A new optimizer for this model's weights (its state starts empty, as a new torch optimizer's
   * does): { type: 'adamw', lr, betas: [b1, b2], eps, weightDecay, clipGradNorm } with
   * torch.optim.AdamW's defaults (lr 1e-3, betas [0.9, 0.999], eps 1e-8, weightDecay 0.01), or
   * { type: 'sgd', lr, clipGradNorm }. clipGradNorm > 0 clips the global gradient norm to it
   * before each step (clip_grad_norm_); 0, the default, does not clip.
   */
  setOptimizer(options) {
    Transformer.check(this, 'setOptimizer');
    this._handle();
    readArgument('options', () => {
      if (options === null || typeof options !== 'object' || Array.isArray(options)) {
        fail('INVALID_ARGUMENT', `options: expected an object like { type: 'adamw', lr: 1e-3 }, got ${describe(options)}`);
      }
    });
    // The schema's optimizer fields (config.js): the type first, then that type's fields (SGD has
    // no betas, eps or weight decay), each read once and type-checked, defaults filled in
    // (torch.optim.AdamW's); the ranges are the core's.
    const o = readArgument('options', () => readConfig(OPTIMIZER_SCHEMA, options, 'options', { variantField: 'type' }));
    const handle = this._handle();
    this._check(callCore(() => handle.setOptimizer(o)));
    this._optimizer = Object.freeze({ ...o, ...(o.betas ? { betas: Object.freeze(o.betas) } : {}) });
  }

  /** The options of the optimizer setOptimizer set, defaults filled in (frozen), or null. */
  get optimizer() {
    if (this === null || typeof this !== 'object' || !(#brand in this)) {
      fail('INVALID_ARGUMENT', `Transformer.optimizer: called on ${describe(this)}, not on a ` +
        'Transformer; read it as model.optimizer');
    }
    this._handle();
    return this._optimizer ?? null;
  }

  /**
   * One training step on a batch: backward, then the optimizer's update of every weight (in the
   * reference's named_parameters() order). Returns { loss, gradNorm, clipped, stepped } with the
   * batch's loss before the update and the gradients' global norm before clipping. A step that
   * would make a weight non-finite (a NaN or infinite loss or gradient, an overflowing update)
   * is not taken: stepped is false, refused says why, and the weights, the optimizer's state and
   * its step count are unchanged.
   */
  trainStep(tokens, targets) {
    Transformer.check(this, 'trainStep');
    const handle = this._writeBatch(tokens, targets);
    this._check(callCore(() => handle.trainStep()));
    const out = {
      loss: callCore(() => handle.lastLoss()),
      gradNorm: callCore(() => handle.lastGradNorm()),
      clipped: callCore(() => handle.lastClipped()),
      stepped: callCore(() => handle.lastStepped()),
    };
    if (!out.stepped) out.refused = callCore(() => handle.lastRefused());
    return out;
  }

  /**
   * Checks a batch as backward() and trainStep() would before computing anything (the tokens'
   * shape and ids, the targets' shape and values, at least one counted), and throws the same
   * HeadscopeError; computes nothing and changes nothing. For a caller holding many batches, to
   * refuse a bad one before the first step changes a weight (initWorker's train() does).
   */
  checkBatch(tokens, targets) {
    Transformer.check(this, 'checkBatch');
    const handle = this._writeBatch(tokens, targets);
    this._check(callCore(() => handle.checkBatch()));
  }

  // tokens and targets read once and written into the call block (slots 0 and 2); the handle,
  // checked again after the caller's getters ran (one may have disposed this object).
  _writeBatch(tokens, targets) {
    this._handle();
    const { t, y } = trainingRows(tokens, targets);
    const handle = this._handle();
    this._write({ tokens: t, targets: y });
    return handle;
  }

  /**
   * Bytes the KV caches of the generation in progress (or the last one) hold: engine.kvCacheBytes
   * of this config for that generation's batch and positions; 0 before any generate(), for a
   * non-causal model and once a generation was cancelled.
   */
  kvCacheBytes() {
    Transformer.check(this, 'kvCacheBytes');
    const handle = this._handle();
    return callCore(() => handle.kvCacheBytes());
  }

  // ---- Causal experiments (src/headscope/experiments.h; docs/api.md "Inside the model") ----

  // tokens and options.headGates of an experiment into the call block.
  _experimentInputs(tokens, options, allowed) {
    const o = withDefaults(readOptions(options, allowed), allowed);
    const { t, batched } = toTokenRows(tokens, 'tokens');
    const gates = o.headGates === null ? null : toFloatTensor(o.headGates, 'options.headGates');
    return { o, t, batched, gates };
  }

  /**
   * The logit lens: the residual stream before the first block and after each block, read out as
   * the model reads its last (ln_final under pre-norm, then the unembedding). Returns { logits }:
   * a Tensor (nLayers + 1, B, T, vocabSize), or (nLayers + 1, T, vocabSize) for (T) tokens; stage
   * 0 is the embeddings, stage l + 1 the stream after block l, and the last stage is forward()'s
   * logits bit for bit. options.headGates as forward's.
   */
  logitLens(tokens, options = {}) {
    Transformer.check(this, 'logitLens');
    this._handle();
    const { t, batched, gates } = this._experimentInputs(tokens, options, EXPERIMENT_OPTIONS);
    const handle = this._handle();  // a getter may have disposed this object
    this._write({ tokens: t, headGates: gates });
    this._check(callCore(() => handle.logitLens()));
    return { logits: dropBatchAxis(this._readResults(1)[0], batched) };
  }

  /**
   * Attention rollout (Abnar & Zuidema 2020): per layer the heads' mean pattern with the residual
   * connection, 0.5 A + 0.5 I, rows renormalised, multiplied through the layers in float64.
   * Returns { rollout }: a Tensor (nLayers, B, T, T) (or (nLayers, T, T)); entry l is the rollout
   * through blocks 0..l, row i how much each input position flows into position i's stream.
   */
  attentionRollout(tokens, options = {}) {
    Transformer.check(this, 'attentionRollout');
    this._handle();
    const { t, batched, gates } = this._experimentInputs(tokens, options, EXPERIMENT_OPTIONS);
    const handle = this._handle();
    this._write({ tokens: t, headGates: gates });
    this._check(callCore(() => handle.attentionRollout()));
    return { rollout: dropBatchAxis(this._readResults(1)[0], batched) };
  }

  /**
   * "Why is this weight high": head options.head of layer options.layer, query position
   * options.position (of batch row options.batch, default 0): for every key j the score's terms
   * q_d k_d / sqrt(dHead) (the rotated q and k under RoPE; a grouped-query head reads its group's
   * key head), their sum dot, the bias the kernels add (ALiBi's -slope |i - j|; -Infinity where the
   * key is masked; else 0) and the model's own score (dot + bias up to float rounding). Returns
   * { terms: Tensor (T, dHead), dot, bias, score: Tensor (T) }.
   */
  scoreContributions(tokens, options) {
    Transformer.check(this, 'scoreContributions');
    this._handle();
    if (options === undefined) {
      fail('INVALID_ARGUMENT', 'options: expected { layer, head, position } (integers), got undefined');
    }
    const { o, t, gates } = this._experimentInputs(tokens, options, SCORE_OPTIONS);
    const [layer, head, position, batch] = readArgument('options', () =>
      ['layer', 'head', 'position', 'batch'].map((k) => checkIndex(o[k], `options.${k}`)));
    const handle = this._handle();
    this._write({ tokens: t, headGates: gates });
    this._check(callCore(() => handle.scoreContributions(layer, head, batch, position)));
    const [terms, dot, bias, score] = this._readResults(4);
    return { terms, dot, bias, score };
  }

  /**
   * Activation patching: runs `clean` and `corrupted` (token ids of one shape), then for every
   * cell one run of `corrupted` with that cell's clean activation patched in, scored against
   * `targets` (the tokens' shape; -100 where nothing is predicted). options.site 'heads' (the
   * default): cell (l, h) patches head h's output (attn.hook_z) at every position, a grid
   * (nLayers, nHeads); 'positions': cell (l, t) patches the residual stream entering block l
   * (hook_resid_pre) at position t, a grid (nLayers, T). Returns { site, loss, logit: Tensor (the
   * grid), clean: { loss, logit }, corrupted: { loss, logit } }: loss the mean cross-entropy,
   * logit the mean logit of the target tokens over the counted positions (the correct token's
   * logit). options.headGates apply to every run.
   */
  activationPatching(clean, corrupted, targets, options = {}) {
    Transformer.check(this, 'activationPatching');
    this._handle();
    const o = withDefaults(readOptions(options, PATCHING_OPTIONS), PATCHING_OPTIONS);
    const site = PATCHING_SITES.indexOf(o.site);
    if (site < 0) {
      fail('INVALID_ARGUMENT', `options.site: expected 'heads' or 'positions', got ${describe(o.site)}`);
    }
    const { t, y } = trainingRows(clean, targets);
    const bad = toTokenRows(corrupted, 'corrupted').t;
    if (bad.shape[0] !== t.shape[0] || bad.shape[1] !== t.shape[1]) {
      fail('SHAPE_MISMATCH', `corrupted: expected the clean tokens' shape [${t.shape.join(', ')}], ` +
        `got [${bad.shape.join(', ')}]`);
    }
    const gates = o.headGates === null ? null : toFloatTensor(o.headGates, 'options.headGates');
    const handle = this._handle();
    this._write({ tokens: t, headGates: gates, targets: y, corrupted: bad });
    this._check(callCore(() => handle.activationPatching(site)));
    const [loss, logit] = this._readResults(2);
    const base = (i) => callCore(() => handle.patchingBaseline(i));
    return { site: o.site, loss, logit, clean: { loss: base(0), logit: base(1) },
      corrupted: { loss: base(2), logit: base(3) } };
  }

  /** Steps the current optimizer has taken (0 before setOptimizer). */
  get optimizerSteps() {
    if (this === null || typeof this !== 'object' || !(#brand in this)) {
      fail('INVALID_ARGUMENT', `Transformer.optimizerSteps: called on ${describe(this)}, not on a ` +
        'Transformer; read it as model.optimizerSteps');
    }
    const handle = this._handle();
    return callCore(() => handle.optimizerSteps());
  }

  /** Frees this model's WebAssembly memory; later use throws HeadscopeError (DISPOSED). */
  dispose() {
    disposeState(Transformer.check(this, 'dispose')._hs, this._state);
  }

  get disposed() {
    return Transformer.check(this, 'disposed')._state.disposed;
  }

}
