// The walkthrough's presets: the seed's worked example (and its "learned-looking" W_Q), seeded
// random numbers at any size, identity projections. Each returns a new model.js state.
import { checkSizes, cloneMatrix, identity } from './shape.js';

const SEED_X = [[1, 0, 1, 2], [0, 2, 1, 0], [1, 1, 0, 1]];
const SEED_WO = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0]];

/** The "learned-looking" head-1 W_Q the seed shows: a linear combination, not a pick of dims. */
export const LEARNED_WQ1 = [[0.3, -0.8], [1.1, 0.2], [-0.5, 0.7], [0.9, -0.4]];

/**
 * The seed's worked example: 3 tokens x 4 dims, two heads whose projections pick dims 0-1 and 2-3
 * (so each full W is the identity), and its W_O.
 */
export function seedState() {
  return {
    L: 3, E: 4, H: 2,
    x: cloneMatrix(SEED_X),
    wq: identity(4), wk: identity(4), wv: identity(4),
    wo: cloneMatrix(SEED_WO),
    bias: null, masks: null,
    source: 'the seed\'s worked example',
  };
}

/** The seed's example with the "learned-looking" W_Q^(1) the seed shows instead of a dim pick. */
export function learnedLookingState() {
  const s = seedState();
  for (let i = 0; i < 4; i++) for (let j = 0; j < 2; j++) s.wq[i][j] = LEARNED_WQ1[i][j];
  s.source = 'the seed\'s example with its "learned-looking" W_Q of head 1';
  return s;
}

// A 32-bit string hash (FNV-1a) followed by a murmur3 finaliser: deterministic on every platform.
function hash32(text) {
  let h = 0x811c9dc5;
  for (let k = 0; k < text.length; k++) {
    h ^= text.charCodeAt(k);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * The seeded-random value of one cell: a function of (seed, matrix, row, column) alone, so a cell
 * keeps its random value whatever the sizes around it. One decimal, like the seed's numbers: the
 * token matrix in [-2, 2], weights and biases in [-1, 1].
 */
export function randomEntry(seed, matrix, i, j = 0) {
  const u = hash32(`${seed}:${matrix}:${i}:${j}`) / 0x100000000;  // [0, 1)
  const range = matrix === 'x' ? 2 : 1;
  const v = Math.round((u * 2 - 1) * range * 10) / 10;
  return v === 0 ? 0 : v;  // no -0
}

const randomMatrix = (seed, name, rows, cols) =>
  Array.from({ length: rows }, (_, i) => Array.from({ length: cols }, (_, j) => randomEntry(seed, name, i, j)));
const randomVector = (seed, name, n) => Array.from({ length: n }, (_, i) => randomEntry(seed, name, i));

/** Seeded random X, projections and W_O (and biases when `withBias`) at the given sizes. */
export function randomState({ L, E, H }, seed = 1, { withBias = false } = {}) {
  checkSizes({ L, E, H });
  return {
    L, E, H,
    x: randomMatrix(seed, 'x', L, E),
    wq: randomMatrix(seed, 'wq', E, E), wk: randomMatrix(seed, 'wk', E, E),
    wv: randomMatrix(seed, 'wv', E, E), wo: randomMatrix(seed, 'wo', E, E),
    bias: withBias ? {
      q: randomVector(seed, 'bq', E), k: randomVector(seed, 'bk', E),
      v: randomVector(seed, 'bv', E), o: randomVector(seed, 'bo', E),
    } : null,
    masks: null,
    source: `seeded random numbers (seed ${seed})`,
  };
}

/**
 * The same tokens with every projection the identity (each head reads its own d_k dims, as in the
 * seed) and zero biases.
 */
export function identityState(state) {
  const { E } = state;
  const zeros = () => new Array(E).fill(0);
  return {
    ...state,
    x: cloneMatrix(state.x),
    wq: identity(E), wk: identity(E), wv: identity(E), wo: identity(E),
    bias: state.bias ? { q: zeros(), k: zeros(), v: zeros(), o: zeros() } : null,
    masks: null,
    source: 'identity projections',
  };
}
