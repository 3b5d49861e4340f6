// Tensors in and out of headscope: nested arrays or { data, shape } in, { data, shape, toArray() }
// out. Every check names the argument and says what was received and what was expected.
//
// Callers may lie. A typed array can carry an own `length` or `byteLength` property, a Proxy can
// stand in for an array or a tensor, a getter can answer differently on every read or call back
// into headscope. So every value a caller controls is read exactly once into a snapshot made of
// headscope's own objects (plain arrays of numbers, the caller's typed array plus its true length)
// and everything after works on the snapshot only. True lengths and types of typed arrays come
// from the engine's intrinsic getters, taken when this module loads, never from the object.
import { HeadscopeError, isHeadscopeError } from './errors.js';

// Largest size of one dimension; the C++ core refuses anything larger too (kMaxDim).
export const MAX_DIM = 2 ** 24;
const MAX_RANK = 4;
// Most elements one nested-array tensor may hold: 2^32 - 1 bytes of float32 (the largest call
// the WebAssembly build can describe), so a lying Proxy that claims 2^24 x 2^24 elements is
// refused at its first leaf instead of being walked for hours.
const MAX_NESTED_ELEMENTS = Math.floor((2 ** 32 - 1) / 4);

// `Function.prototype.call` bound once: later patches of prototypes do not reach these.
const uncurry = (fn) => Function.prototype.call.bind(fn);
const getterOf = (proto, key) => uncurry(Object.getOwnPropertyDescriptor(proto, key).get);
const TypedArrayPrototype = Object.getPrototypeOf(Uint8Array.prototype);
/** The [[TypedArrayName]] of a real typed array ('Float32Array', ...), otherwise undefined. */
export const typedArrayName = getterOf(TypedArrayPrototype, Symbol.toStringTag);
/** The true element count of a real typed array (0 once its buffer is detached). */
export const typedArrayLength = getterOf(TypedArrayPrototype, 'length');
const typedArrayBuffer = getterOf(TypedArrayPrototype, 'buffer');
const typedArraySubarray = uncurry(TypedArrayPrototype.subarray);
/** TypedArray.prototype.set as it was when headscope loaded: target.set(source, offset). */
export const typedArraySet = uncurry(TypedArrayPrototype.set);
const arrayBufferByteLength = getterOf(ArrayBuffer.prototype, 'byteLength');
// (Resizable ArrayBuffers: Node 20 and current browsers; undefined where the runtime has none.)
const arrayBufferResizable = Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, 'resizable') === undefined
  ? undefined : getterOf(ArrayBuffer.prototype, 'resizable');
const isArrayUnsafe = Array.isArray;
const objectKeys = Object.keys;

export class Tensor {
  /** @param {Float32Array} data @param {number[]} shape */
  constructor(data, shape) {
    this.data = data;
    this.shape = shape;
  }

  /** Nested arrays in the tensor's shape (a plain number for rank 0). */
  toArray() {
    const data = this?.data;
    const shape = this?.shape;
    if (typedArrayName(data) === undefined || !isArrayUnsafe(shape)) {
      throw new HeadscopeError('INVALID_ARGUMENT', 'Tensor.toArray: expected a Tensor ' +
        `({ data: Float32Array, shape }) as this, got ${describe(this)}`);
    }
    return nest(data, shape, 0, { i: 0 });
  }
}

function nest(data, shape, axis, cursor) {
  if (axis === shape.length) return data[cursor.i++];
  const out = new Array(shape[axis]);
  for (let j = 0; j < shape[axis]; j++) out[j] = nest(data, shape, axis + 1, cursor);
  return out;
}

function describeUnsafe(value) {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  const name = typedArrayName(value);
  if (name !== undefined) return `a ${name} of length ${typedArrayLength(value)}`;
  if (isArrayUnsafe(value)) return `an array of length ${value.length}`;
  if (typeof value === 'string') {
    // JSON.stringify escapes C0 controls and lone surrogates; DEL, C1 and the bidirectional
    // controls too, as quoteInput does.
    return `string ${JSON.stringify(value.length > 30 ? value.slice(0, 27) + '...' : value)
      .replace(/[\u007f-\u009f\u2028-\u202e\u2066-\u2069]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)}`;
  }
  if (typeof value === 'object') {
    const keys = objectKeys(value);
    const shown = keys.length > 8 ? [...keys.slice(0, 8), '...'] : keys;
    return `an object with keys [${shown.join(', ')}]`;
  }
  if (typeof value === 'function') return `function ${value.name || '(anonymous)'}`;
  return `${typeof value} ${String(value)}`;
}

// Characters a message never shows raw: C0 and C1 controls, DEL, the line and paragraph separators
// (U+2028/9), the bidirectional controls, lone surrogates.
const hidden = (cp) => cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0x2028 && cp <= 0x202e) ||
  (cp >= 0x2066 && cp <= 0x2069) || (cp >= 0xd800 && cp <= 0xdfff);

/**
 * A caller's text as a message quotes it (a state_dict key, an option name, a JSON key): at most
 * 64 code points (then "..."), control and bidirectional characters written as \uXXXX, so that a
 * hostile name can neither make a message huge nor break it over lines, clear a terminal or
 * reorder what is shown. Reads at most 65 code points of it. src/headscope/status.cc QuoteInput is
 * the same rule.
 */
export function quoteInput(text) {
  const s = String(text);
  let out = '';
  let cut = -1;   // out's length after 61 code points
  let n = 0;
  for (let i = 0; i < s.length;) {
    if (++n > 64) return `${out.slice(0, cut)}...`;
    const cp = s.codePointAt(i);
    const width = cp > 0xffff ? 2 : 1;
    out += hidden(cp) ? `\\u${cp.toString(16).padStart(4, '0')}` : s.slice(i, i + width);
    if (n === 61) cut = out.length;
    i += width;
  }
  return out;
}

/** A short description of any value, for error messages; never throws, runs no getter twice. */
export function describe(value) {
  try {
    return describeUnsafe(value);
  } catch {
    return 'an object that cannot be inspected (a revoked Proxy, or a trap that throws)';
  }
}

/** What a caller's callback threw, in a few words; never throws itself. */
export function describeThrown(e) {
  try {
    if (e !== null && typeof e === 'object') {
      const { name, message } = e;
      if (typeof message === 'string') {
        const text = `${typeof name === 'string' ? name : 'Error'}: ${message}`;
        return text.length > 200 ? `${text.slice(0, 197)}...` : text;
      }
    }
    return describe(e);
  } catch {
    return 'an exception that cannot be inspected';
  }
}

/**
 * Runs `read` (which reads a caller's value); an exception from the caller's own code (a getter,
 * a Proxy trap, a revoked Proxy) becomes INVALID_ARGUMENT naming the argument, with the original
 * as `cause`. headscope's own errors pass through.
 */
export function readArgument(name, read) {
  try {
    return read();
  } catch (e) {
    throw argumentError(e, name);
  }
}

/** headscope's own errors as they are; anything a caller's code threw as INVALID_ARGUMENT. */
export function argumentError(e, name) {
  if (isHeadscopeError(e)) return e;
  return new HeadscopeError('INVALID_ARGUMENT', `${name}: reading it threw ` +
    `(${describeThrown(e)}); expected a plain value`, { cause: e });
}

// The longest delay setTimeout honours (a larger one fires at once).
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** A timeout option (init's and initWorker's `timeoutMs`): a number of ms in (0, 2^31 - 1]. */
export function checkTimeoutMs(value, name) {
  if (typeof value !== 'number' || !(value > 0) || value > MAX_TIMEOUT_MS) {
    fail('INVALID_ARGUMENT', `${name}: expected a number of milliseconds in (0, ${MAX_TIMEOUT_MS}], ` +
      `got ${describe(value)}`);
  }
  return value;
}

// options.simd of init() and initWorker(): which WebAssembly build loads (index.js resolveBuild).
export const SIMD_OPTIONS = Object.freeze(['auto', 'relaxed', 'simd128']);
export function checkSimdOption(value, name) {
  if (typeof value !== 'string' || !SIMD_OPTIONS.includes(value)) {
    fail('INVALID_ARGUMENT', `${name}: expected one of ${SIMD_OPTIONS.map((x) => `'${x}'`).join(', ')} ` +
      `('auto': relaxed SIMD where the runtime has it, else SIMD128), got ${describe(value)}`);
  }
  return value;
}

function fail(code, message) {
  throw new HeadscopeError(code, message);
}

const TENSOR_HELP = 'nested arrays of numbers, or { data: Float32Array, shape: number[] }';
const MASK_HELP =
  'nested arrays of booleans or numbers, or { data: Uint8Array | Float32Array, shape: number[] }';

// An array length read once from a caller's array (a Proxy's `length` can be anything).
function lengthOf(array, path) {
  const n = array.length;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > MAX_DIM) {
    fail(n > MAX_DIM ? 'RESOURCE_EXHAUSTED' : 'INVALID_ARGUMENT', `${path}: expected an array of ` +
      `at most ${MAX_DIM} elements, got length ${describe(n)}`);
  }
  return n;
}

/**
 * Walks nested arrays: the shape comes from the first element at each depth, every sibling must
 * agree, and each leaf goes through `leaf(value, path)`. Each array's length and each element
 * are read once.
 */
function flatten(value, name, leaf) {
  const shape = [];
  const leaves = [];
  let leafDepth = -1;
  const visit = (v, path, depth) => {
    if (!isArrayUnsafe(v)) {
      if (leafDepth < 0) {
        // An earlier sibling was an array reaching this depth (the [] of [[], true]).
        if (shape.length > depth) {
          fail('SHAPE_MISMATCH', `${path}: expected an array like its siblings, got ${describe(v)}`);
        }
        leafDepth = depth;
        let count = 1;
        for (let i = 0; i < shape.length; i++) count *= shape[i];
        if (count > MAX_NESTED_ELEMENTS) {
          fail('RESOURCE_EXHAUSTED', `${name}: shape [${shape.join(', ')}] has ${count} elements, ` +
            `more than a call can hold (${MAX_NESTED_ELEMENTS})`);
        }
      } else if (leafDepth !== depth) {
        fail('SHAPE_MISMATCH', `${path}: expected an array nested ${leafDepth} deep like its ` +
          `siblings, got ${describe(v)}`);
      }
      leaves.push(leaf(v, path));
      return;
    }
    if (leafDepth >= 0 && depth >= leafDepth) {
      fail('SHAPE_MISMATCH', `${path}: expected a value like its siblings, got ${describe(v)}`);
    }
    if (depth >= MAX_RANK) {
      fail('SHAPE_MISMATCH', `${name}: arrays nested deeper than ${MAX_RANK} levels`);
    }
    const n = lengthOf(v, path);
    if (depth >= shape.length) shape.push(n);
    else if (shape[depth] !== n) {
      fail('SHAPE_MISMATCH', `${path}: expected ${shape[depth]} elements like its siblings, ` +
        `got ${n}`);
    }
    for (let i = 0; i < n; i++) visit(v[i], `${path}[${i}]`, depth + 1);
  };
  visit(value, name, 0);
  return { shape, leaves };
}

// A `shape` read once into a plain array of checked sizes; returns [shape, element count].
function snapshotShape(shapeValue, name) {
  if (!isArrayUnsafe(shapeValue)) {
    fail('INVALID_ARGUMENT', `${name}.shape: expected an array of sizes, got ${describe(shapeValue)}`);
  }
  const rank = shapeValue.length;
  if (typeof rank !== 'number' || !Number.isInteger(rank) || rank < 0) {
    fail('INVALID_ARGUMENT', `${name}.shape: expected an array of sizes, got length ${describe(rank)}`);
  }
  if (rank > MAX_RANK) {
    const shown = [];
    for (let i = 0; i < Math.min(rank, 8); i++) shown.push(describe(shapeValue[i]).replace(/^number /, ''));
    fail('SHAPE_MISMATCH', `${name}.shape: expected at most ${MAX_RANK} dimensions, got ` +
      `[${shown.join(', ')}${rank > 8 ? ', ...' : ''}]`);
  }
  const shape = new Array(rank);
  for (let i = 0; i < rank; i++) shape[i] = shapeValue[i];
  let count = 1;
  for (let i = 0; i < rank; i++) {
    const d = shape[i];
    if (typeof d !== 'number' || !Number.isInteger(d) || d < 0) {
      fail('INVALID_ARGUMENT', `${name}.shape[${i}]: expected a non-negative integer, got ` +
        describe(d));
    }
    if (d > MAX_DIM) {
      fail('RESOURCE_EXHAUSTED', `${name}.shape[${i}]: ${d} exceeds the maximum size ${MAX_DIM}`);
    }
    count *= d;
  }
  return [shape, count];
}

// The caller's typed array as it will be copied: its true length now, and, when its buffer can
// change size (a SharedArrayBuffer, which another thread can grow, or a resizable ArrayBuffer,
// which a getter of a later argument can grow or shrink in this very call), a view of exactly that
// length: the copy can then never be longer than what was checked and reserved (a length-tracking
// view grown by a later getter overflowed the arena and corrupted the heap), and a shrunk buffer
// leaves the view out of bounds, which checkIntact() refuses at the copy.
function fixedView(data, count) {
  const buffer = typedArrayBuffer(data);
  let resizable;
  try {
    arrayBufferByteLength(buffer);   // throws for a SharedArrayBuffer
    resizable = arrayBufferResizable !== undefined && arrayBufferResizable(buffer);
  } catch {
    resizable = true;
  }
  return resizable ? typedArraySubarray(data, 0, count) : data;
}

/**
 * Throws INVALID_ARGUMENT naming the argument when a snapshot's typed array no longer holds the
 * elements it was checked with: caller code that ran after the check (a getter or a Proxy trap of
 * a later argument) shrank, resized or detached its buffer. Called right before each copy into
 * WebAssembly memory, after every caller value has been read, so what is copied is what was checked.
 */
export function checkIntact(t) {
  if (typedArrayLength(t.data) !== t.count) {
    fail('INVALID_ARGUMENT', `${t.name}: its buffer was resized or detached while the call read its ` +
      'other arguments (by a getter or a Proxy trap); expected data that stays as it was given');
  }
}

const FLOAT_KINDS = Object.freeze(['Float32Array']);
const MASK_KINDS = Object.freeze(['Uint8Array', 'Float32Array']);

// The `data` of a { data, shape } tensor: a real typed array of one of `kinds`, else an error.
function tensorObject(value, name, kinds, help) {
  const shapeValue = value.shape;
  const data = value.data;
  const [shape, count] = snapshotShape(shapeValue, name);
  const kind = typedArrayName(data);
  if (!kinds.includes(kind)) fail('INVALID_ARGUMENT', `${name}.data: expected ${help}, got ${describe(data)}`);
  const length = typedArrayLength(data);
  if (length !== count) {
    fail('SHAPE_MISMATCH', `${name}: data has ${length} elements but shape ` +
      `[${shape.join(', ')}] needs ${count}`);
  }
  return { data: fixedView(data, count), shape, count, type: kind === 'Uint8Array' ? 'bool' : 'float', name };
}

/**
 * A float tensor from the caller: nested arrays of numbers or { data: Float32Array, shape },
 * read once into a snapshot: { data, shape, count, type: 'float' }, where `data` is the caller's
 * Float32Array (or a new one for nested arrays), `count` its true length and `shape` a new array.
 * `nonFiniteStrings` accepts "inf", "-inf", "nan" leaves (the case format's spelling).
 */
export function toFloatTensor(value, name, options) {
  return readTensor(floatTensor, value, name, options);
}

// Reads a caller's tensor with `reader` (floatTensor, mask, tokenIds), options.nonFiniteStrings as
// its third argument; what the caller's code throws names the argument. A try/catch here rather
// than readArgument(): this runs on every forward(), and a reader passed by name is no closure.
function readTensor(reader, value, name, options) {
  try {
    return reader(value, name, options !== undefined && options.nonFiniteStrings === true);
  } catch (e) {
    throw argumentError(e, name);
  }
}

function floatTensor(value, name, nonFiniteStrings) {
  if (isArrayUnsafe(value)) {
    const { shape, leaves } = flatten(value, name, (v, path) => {
      if (typeof v === 'number') return v;
      if (nonFiniteStrings && typeof v === 'string') {
        const x = NON_FINITE[v];
        if (x !== undefined) return x;
      }
      fail('INVALID_ARGUMENT', `${path}: expected a number${nonFiniteStrings
        ? ' (or "inf", "-inf", "nan")' : ''}, got ${describe(v)}`);
    });
    const data = new Float32Array(leaves.length);
    for (let i = 0; i < leaves.length; i++) data[i] = leaves[i];
    return { data, shape, count: leaves.length, type: 'float' };
  }
  if (value !== null && typeof value === 'object' && typedArrayName(value) === undefined &&
      'data' in value) {
    return tensorObject(value, name, FLOAT_KINDS, 'a Float32Array');
  }
  fail('INVALID_ARGUMENT', `${name}: expected a tensor (${TENSOR_HELP}), got ${describe(value)}`);
}

const NON_FINITE = Object.freeze(Object.assign(Object.create(null), {
  inf: Infinity, '+inf': Infinity, Infinity: Infinity, '-inf': -Infinity,
  '-Infinity': -Infinity, nan: NaN, NaN: NaN,
}));

/**
 * A mask: booleans (true = blocked) become a Uint8Array, numbers (added to the scores) a
 * Float32Array. null/undefined means no mask. Read once, like toFloatTensor.
 * @returns {null | { data: Uint8Array | Float32Array, shape: number[], count: number,
 *   type: 'bool' | 'float' }}
 */
export function toMask(value, name, options) {
  if (value === null || value === undefined) return null;
  return readTensor(mask, value, name, options);
}

function mask(value, name, nonFiniteStrings) {
  if (isArrayUnsafe(value)) {
    let kind = null;
    const { shape, leaves } = flatten(value, name, (v, path) => {
      let x = v;
      if (nonFiniteStrings && typeof v === 'string' && NON_FINITE[v] !== undefined) x = NON_FINITE[v];
      const k = typeof x === 'boolean' ? 'bool' : typeof x === 'number' ? 'float' : null;
      if (k === null) {
        fail('INVALID_ARGUMENT', `${path}: expected a boolean or a number, got ${describe(v)}`);
      }
      if (kind === null) kind = k;
      else if (k !== kind) {
        fail('INVALID_ARGUMENT', `${path}: expected a ${kind === 'bool' ? 'boolean' : 'number'} ` +
          `like the first element (masks are all booleans or all numbers), got ${describe(v)}`);
      }
      return x;
    });
    const n = leaves.length;
    const data = kind === 'bool' ? new Uint8Array(n) : new Float32Array(n);
    for (let i = 0; i < n; i++) data[i] = kind === 'bool' ? (leaves[i] ? 1 : 0) : leaves[i];
    return { data, shape, count: n, type: kind === 'bool' ? 'bool' : 'float' };
  }
  if (typeof value === 'object' && typedArrayName(value) === undefined && 'data' in value) {
    return tensorObject(value, name, MASK_KINDS,
      'a Uint8Array (booleans) or a Float32Array (added to the scores)');
  }
  fail('INVALID_ARGUMENT', `${name}: expected null or a mask (${MASK_HELP}), got ${describe(value)}`);
}

const INT32_MIN = -(2 ** 31);
const INT32_MAX = 2 ** 31 - 1;

/**
 * Token ids from the caller: nested arrays of integers, (T) or (B, T), or { data: Int32Array,
 * shape }, read once into { data: Int32Array, shape, count, type: 'int32' }. JS checks what it
 * must to hand them over (integers that fit int32); which ids a model has (0 <= id < vocabSize)
 * and the sequence lengths it takes are the core's rules.
 */
export function toTokens(value, name) {
  return readTensor(tokenIds, value, name, undefined);
}

function tokenIds(value, name) {
  if (isArrayUnsafe(value)) {
    const { shape, leaves } = flatten(value, name, (v, path) => {
      if (typeof v !== 'number' || !Number.isInteger(v) || v < INT32_MIN || v > INT32_MAX) {
        fail('INVALID_ARGUMENT', `${path}: expected an integer token id, got ${describe(v)}`);
      }
      return v;
    });
    return { data: Int32Array.from(leaves), shape, count: leaves.length, type: 'int32' };
  }
  if (value !== null && typeof value === 'object' && typedArrayName(value) === undefined &&
      'data' in value) {
    const t = tensorObject(value, name, ['Int32Array'], 'an Int32Array of token ids');
    t.type = 'int32';
    return t;
  }
  fail('INVALID_ARGUMENT', `${name}: expected token ids (nested arrays of integers, (T) or ` +
    `(B, T), or { data: Int32Array, shape }), got ${describe(value)}`);
}
