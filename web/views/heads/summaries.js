// Summaries of the engine's results for the Heads view: a head's block of the weights, the
// engine's per-head statistics, and how much the output changed with heads switched off.

/** The per-head statistics the engine computes with options.headStats (docs/api.md, "Head statistics"). */
export const HEAD_STATS = ['entropy', 'distance', 'maxWeight'];

/**
 * Batch element n's per-head statistics from trace()'s or forward()'s headStats ({ entropy,
 * distance, maxWeight }, Tensors of shape (N, H) batched or (H) unbatched): { entropy, distance,
 * maxWeight }, each H numbers (row n, a view, no copy; n is ignored when unbatched).
 */
export function headStatsRow(headStats, n = 0) {
  const row = {};
  for (const name of HEAD_STATS) {
    const { data, shape } = headStats[name];
    const H = shape[shape.length - 1];
    row[name] = shape.length === 2 ? data.subarray(n * H, (n + 1) * H) : data;
  }
  return row;
}

/**
 * Mean of one statistic over the heads, leaving out the heads the engine gave NaN (every query
 * row fully masked); NaN when every head is.
 * @param {ArrayLike<number>} values one per head
 */
export function meanOverHeads(values) {
  let total = 0;
  let n = 0;
  for (let h = 0; h < values.length; h++) {
    if (Number.isNaN(values[h])) continue;
    total += values[h];
    n++;
  }
  return n ? total / n : NaN;
}

/** The (L, S) block of head h in ([N,] H, L, S) weights, batch element n (a view, no copy). */
export function headWeights(weights, { n = 0, h, H, L, S }) {
  const start = ((n * H) + h) * L * S;
  return weights.subarray(start, start + L * S);
}

/** The key with the largest weight in each query row: Int32Array(L), -1 for an all-zero row. */
export function argmaxRows(weights, L, S) {
  const out = new Int32Array(L);
  for (let i = 0; i < L; i++) {
    let best = -1;
    let bestW = 0;
    for (let j = 0; j < S; j++) {
      if (weights[i * S + j] > bestW) {
        bestW = weights[i * S + j];
        best = j;
      }
    }
    out[i] = best;
  }
  return out;
}

/**
 * How much the output changed: per token the Euclidean norm of (after - before) over E, the
 * Frobenius norm of the whole difference, and that norm relative to the norm of `before`.
 * @param {ArrayLike<number>} before (L, E)
 * @param {ArrayLike<number>} after (L, E)
 * @returns {{ perToken: Float64Array, total: number, relative: number, difference: Float32Array }}
 */
export function outputDifference(before, after, L, E) {
  const perToken = new Float64Array(L);
  const difference = new Float32Array(L * E);
  let total = 0;
  let base = 0;
  for (let i = 0; i < L; i++) {
    let s = 0;
    for (let e = 0; e < E; e++) {
      const d = after[i * E + e] - before[i * E + e];
      difference[i * E + e] = d;
      s += d * d;
      base += before[i * E + e] ** 2;
    }
    perToken[i] = Math.sqrt(s);
    total += s;
  }
  total = Math.sqrt(total);
  return { perToken, total, relative: base > 0 ? total / Math.sqrt(base) : 0, difference };
}

/**
 * Rows of batch element n from an output in the query's layout: (L, E) unbatched, (L, N, E)
 * or, batchFirst, (N, L, E). Returns (L, E) row-major.
 */
export function batchRows(data, shape, { n = 0, batchFirst = false } = {}) {
  if (shape.length === 2) return data;
  const [a, b, E] = shape;
  if (batchFirst) return data.subarray(n * b * E, (n + 1) * b * E);
  const out = new Float32Array(a * E);
  for (let i = 0; i < a; i++) out.set(data.subarray((i * b + n) * E, (i * b + n + 1) * E), i * E);
  return out;
}
