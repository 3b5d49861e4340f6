// The walkthrough's sizes and nested-array matrices: the largest size it shows, the head counts an
// embedding size allows, and the small matrix helpers the other model modules share.

/** Largest number of tokens and embedding size the walkthrough shows ("tutorial size"). */
export const MAX_SIZE = 16;

/** Every divisor of n, ascending: the head counts an embedding size allows. */
export function divisors(n) {
  const out = [];
  for (let d = 1; d <= n; d++) if (n % d === 0) out.push(d);
  return out;
}

/** The divisor of e closest to h (the smaller one on a tie): heads after an embedding change. */
export function nearestDivisor(e, h) {
  let best = 1;
  for (const d of divisors(e)) if (Math.abs(d - h) < Math.abs(best - h)) best = d;
  return best;
}

export const identity = (n) => Array.from({ length: n }, (_, i) => Array.from({ length: n }, (_, j) => (i === j ? 1 : 0)));
export const cloneMatrix = (m) => m.map((row) => row.slice());
export const transpose = (m) => (m.length === 0 ? [] : m[0].map((_, j) => m.map((row) => row[j])));

export function checkSizes({ L, E, H }) {
  for (const [name, v] of [['tokens', L], ['embedding size', E]]) {
    if (!Number.isInteger(v) || v < 1 || v > MAX_SIZE) {
      throw new RangeError(`${name}: expected an integer in [1, ${MAX_SIZE}], got ${v}`);
    }
  }
  if (!Number.isInteger(H) || H < 1 || E % H !== 0) {
    throw new RangeError(`heads: expected a divisor of the embedding size ${E}, got ${H}`);
  }
}

export function resizeMatrix(m, rows, cols, fill) {
  return Array.from({ length: rows }, (_, i) =>
    Array.from({ length: cols }, (_, j) => (i < m.length && j < m[i].length ? m[i][j] : fill(i, j))));
}
export const resizeVector = (v, n, fill) => Array.from({ length: n }, (_, i) => (i < v.length ? v[i] : fill(i)));

/** d_k: the size of one head. */
export const headDim = (state) => state.E / state.H;
