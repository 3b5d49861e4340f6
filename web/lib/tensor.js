// Tensors in and out of headscope: nested arrays or { data, shape } in, { data, shape, toArray() }
// out. Every check names the argument and says what was received and what was expected.
import { HeadscopeError } from './errors.js';

// Largest size of one dimension; the C++ core refuses anything larger too (kMaxDim).
export const MAX_DIM = 2 ** 24;
const MAX_RANK = 4;

export class Tensor {
  /** @param {Float32Array} data @param {number[]} shape */
  constructor(data, shape) {
    this.data = data;
    this.shape = shape;
  }

  /** Nested arrays in the tensor's shape (a plain number for rank 0). */
  toArray() {
    return nest(this.data, this.shape, 0, { i: 0 });
  }
}

function nest(data, shape, axis, cursor) {
  if (axis === shape.length) return data[cursor.i++];
  const out = new Array(shape[axis]);
  for (let j = 0; j < shape[axis]; j++) out[j] = nest(data, shape, axis + 1, cursor);
  return out;
}

export function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return `an array of length ${value.length}`;
  if (ArrayBuffer.isView(value)) return `a ${value.constructor.name} of length ${value.length}`;
  if (typeof value === 'string') {
    return `string ${JSON.stringify(value.length > 30 ? value.slice(0, 27) + '...' : value)}`;
  }
  if (typeof value === 'object') return `an object with keys [${Object.keys(value).join(', ')}]`;
  return `${typeof value} ${String(value)}`;
}

function fail(code, message) {
  throw new HeadscopeError(code, message);
}

const TENSOR_HELP = 'nested arrays of numbers, or { data: Float32Array, shape: number[] }';
const MASK_HELP =
  'nested arrays of booleans or numbers, or { data: Uint8Array | Float32Array, shape: number[] }';

/**
 * Walks nested arrays: the shape comes from the first element at each depth, every sibling must
 * agree, and each leaf goes through `leaf(value, path)`.
 */
function flatten(value, name, leaf) {
  const shape = [];
  const leaves = [];
  let leafDepth = -1;
  const visit = (v, path, depth) => {
    if (!Array.isArray(v)) {
      if (leafDepth < 0) {
        // An earlier sibling was an array reaching this depth (the [] of [[], true]).
        if (shape.length > depth) {
          fail('SHAPE_MISMATCH', `${path}: expected an array like its siblings, got ${describe(v)}`);
        }
        leafDepth = depth;
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
    if (depth >= shape.length) shape.push(v.length);
    else if (shape[depth] !== v.length) {
      fail('SHAPE_MISMATCH', `${path}: expected ${shape[depth]} elements like its siblings, ` +
        `got ${v.length}`);
    }
    for (let i = 0; i < v.length; i++) visit(v[i], `${path}[${i}]`, depth + 1);
  };
  visit(value, name, 0);
  return { shape, leaves };
}

function checkShape(shape, name) {
  if (!Array.isArray(shape)) {
    fail('INVALID_ARGUMENT', `${name}.shape: expected an array of sizes, got ${describe(shape)}`);
  }
  if (shape.length > MAX_RANK) {
    fail('SHAPE_MISMATCH', `${name}.shape: expected at most ${MAX_RANK} dimensions, got ` +
      `[${shape.join(', ')}]`);
  }
  let count = 1;
  for (let i = 0; i < shape.length; i++) {
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
  return count;
}

/**
 * A float tensor from the caller: nested arrays of numbers or { data: Float32Array, shape }.
 * `nonFiniteStrings` accepts "inf", "-inf", "nan" leaves (the case format's spelling).
 * @returns {{ data: Float32Array, shape: number[] }}
 */
export function toFloatTensor(value, name, { nonFiniteStrings = false } = {}) {
  if (Array.isArray(value)) {
    const { shape, leaves } = flatten(value, name, (v, path) => {
      if (typeof v === 'number') return v;
      if (nonFiniteStrings && typeof v === 'string') {
        const x = NON_FINITE[v];
        if (x !== undefined) return x;
      }
      fail('INVALID_ARGUMENT', `${path}: expected a number${nonFiniteStrings
        ? ' (or "inf", "-inf", "nan")' : ''}, got ${describe(v)}`);
    });
    return { data: Float32Array.from(leaves), shape };
  }
  if (value !== null && typeof value === 'object' && !ArrayBuffer.isView(value) && 'data' in value) {
    const count = checkShape(value.shape, name);
    if (!(value.data instanceof Float32Array)) {
      fail('INVALID_ARGUMENT', `${name}.data: expected a Float32Array, got ${describe(value.data)}`);
    }
    if (value.data.length !== count) {
      fail('SHAPE_MISMATCH', `${name}: data has ${value.data.length} elements but shape ` +
        `[${value.shape.join(', ')}] needs ${count}`);
    }
    return { data: value.data, shape: value.shape.slice() };
  }
  fail('INVALID_ARGUMENT', `${name}: expected a tensor (${TENSOR_HELP}), got ${describe(value)}`);
}

const NON_FINITE = { inf: Infinity, '+inf': Infinity, Infinity: Infinity, '-inf': -Infinity,
  '-Infinity': -Infinity, nan: NaN, NaN: NaN };

/**
 * A mask: booleans (true = blocked) become a Uint8Array, numbers (added to the scores) a
 * Float32Array. null/undefined means no mask.
 * @returns {null | { data: Uint8Array | Float32Array, shape: number[], type: 'bool' | 'float' }}
 */
export function toMask(value, name, { nonFiniteStrings = false } = {}) {
  if (value === null || value === undefined) return null;
  if (Array.isArray(value)) {
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
    if (kind === 'bool') return { data: Uint8Array.from(leaves, (b) => (b ? 1 : 0)), shape, type: 'bool' };
    return { data: Float32Array.from(leaves), shape, type: 'float' };
  }
  if (typeof value === 'object' && !ArrayBuffer.isView(value) && 'data' in value) {
    const count = checkShape(value.shape, name);
    const { data } = value;
    let type;
    if (data instanceof Uint8Array) type = 'bool';
    else if (data instanceof Float32Array) type = 'float';
    else {
      fail('INVALID_ARGUMENT', `${name}.data: expected a Uint8Array (booleans) or a Float32Array ` +
        `(added to the scores), got ${describe(data)}`);
    }
    if (data.length !== count) {
      fail('SHAPE_MISMATCH', `${name}: data has ${data.length} elements but shape ` +
        `[${value.shape.join(', ')}] needs ${count}`);
    }
    return { data, shape: value.shape.slice(), type };
  }
  fail('INVALID_ARGUMENT', `${name}: expected null or a mask (${MASK_HELP}), got ${describe(value)}`);
}
