// Data: from the Heads view's state and the engine's results to what its parts show.
import { batchRows, headStatsRow, outputDifference } from './summaries.js';
import { quote } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';

/** Rows and columns a heatmap or the line view shows of a large case. */
export const MAX_SHOWN = 128;

/**
 * Labels of a loaded case: queries its `tokens` when given (setCase's option), else t1..tL; keys
 * the same for self-attention, else k1..kS.
 */
export function caseLabels({ L, S, sourceLength, selfAttention, addBiasKV, addZeroAttn, tokens = null }) {
  const queries = tokens ? tokens.slice(0, L) : Array.from({ length: L }, (_, i) => `t${i + 1}`);
  const keys = selfAttention ? queries.slice(0, sourceLength)
    : Array.from({ length: sourceLength }, (_, j) => `k${j + 1}`);
  if (addBiasKV) keys.push('bias_k');
  if (addZeroAttn) keys.push('zero');
  while (keys.length < S) keys.push(`k${keys.length + 1}`);
  return { queries, keys: keys.slice(0, S) };
}

/**
 * Whether a case's key is its query: the same object (key absent in the file) or equal numbers of
 * the same shape (a file that spells the query out twice is self-attention too).
 */
export function sameTensor(a, b) {
  if (a === b) return true;
  if (!a || !b || a.shape.length !== b.shape.length || a.shape.some((d, k) => d !== b.shape[k])) return false;
  for (let k = 0; k < a.data.length; k++) if (a.data[k] !== b.data[k]) return false;
  return a.data.length === b.data.length;
}

/** Weights a trace of the call holds: N x H x L x S' (every head's, bias_k and the zero key included). */
export const traceWeights = (dims) => dims.N * dims.H * dims.L * dims.Sp;

/**
 * What the views show for batch element n of a run: per-head weights and scores (H, L, S'), the
 * average (L, S'), outputs (L, E) and their difference, per-head statistics (the engine's headStats,
 * row n: entropy, distance, maxWeight, H values each). `dims` are the call's sizes (callDims of
 * its config and shapes), which give the layout of every tensor of the run.
 */
export function viewData(run, dims, { labels, presets, n = 0, note = '' }) {
  const { batched, batchFirst, H, E, L, Sp: S } = dims;
  const per = H * L * S;
  const weights = batched ? run.trace.weights.data.subarray(n * per, (n + 1) * per) : run.trace.weights.data;
  const scores = batched ? run.trace.scores.data.subarray(n * per, (n + 1) * per) : run.trace.scores.data;
  const average = run.average === null ? null
    : batched ? run.average.data.subarray(n * L * S, (n + 1) * L * S) : run.average.data;
  const output = batchRows(run.trace.output.data, run.trace.output.shape, { n, batchFirst });
  const ablatedOutput = batchRows(run.ablatedOutput.data, run.ablatedOutput.shape, { n, batchFirst });
  return {
    L, S, H, E, labels, presets, note,
    sourceKeys: dims.S,  // the keys with a position: S' less bias_k and the zero key
    weights, scores, average, output, ablatedOutput,
    difference: outputDifference(output, ablatedOutput, L, E),
    stats: headStatsRow(run.trace.headStats, n),
  };
}

export function headLabel(h) {
  return `Head ${h + 1}`;
}

export function describeCell(data, h, i, j, values) {
  const q = data.labels.queries[i];
  const k = data.labels.keys[j];
  const who = h === null ? 'Average of the heads' : headLabel(h);
  return `${who}, query ${i + 1} ${quote(q)} → key ${j + 1} ${quote(k)}: weight ${formatNumber(values[i * data.S + j], 3)}`;
}

export function shownSize(data) {
  return { rows: Math.min(data.L, MAX_SHOWN), cols: Math.min(data.S, MAX_SHOWN) };
}
