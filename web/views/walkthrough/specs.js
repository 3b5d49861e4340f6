// What each of the Walkthrough's matrices shows for a state and its trace: the matrices on the
// page in page order (by their data-matrix names: X, WQ1, BQ1, Q1, S1, A1, H1, CONCAT, WO, BO,
// Y), each one's shape, labels, numbers and colour scale. No DOM.
import { makeScale } from '../common/scale.js';
import { headDim, inputData } from './model.js';

const WEIGHTS_SCALE = makeScale([], 'weights');

/** Row-major data of a trace tensor for head h ((H, rows, cols) -> (rows, cols)). */
function headSlice(t, h) {
  const size = t.shape[1] * t.shape[2];
  return t.data.subarray(h * size, (h + 1) * size);
}

function subscript(n) {
  return String(n).replace(/\d/g, (d) => '₀₁₂₃₄₅₆₇₈₉'[Number(d)]);
}

/** Whether a matrix is one of the numbers the reader gives (X, the weights, the biases). */
export const isInput = (name) => /^(X|WO|BO|[WB][QKV]\d+)$/.test(name);

/** The data-matrix name of a stage's matrix for head h (0-based); CONCAT and Y have no head. */
export const matrixName = (stage, h) => (stage === 'CONCAT' || stage === 'Y' ? stage : `${stage}${h + 1}`);

/** matrixName's inverse: the stage ('X', 'W', 'Q', 'S', ..., 'CONCAT', 'Y') and head of a name. */
export function stageOfName(name) {
  const stage = name === 'CONCAT' || name === 'Y' ? name : name[0];
  return { stage, h: stage === name ? 0 : Number(name.slice(1)) - 1 };
}

/** The matrices on the page for the state's sizes, by name, in page order. */
export function shownNames(state) {
  const names = ['X'];
  for (let n = 1; n <= state.H; n++) {
    names.push(`WQ${n}`, `WK${n}`, `WV${n}`);
    if (state.bias) names.push(`BQ${n}`, `BK${n}`, `BV${n}`);
    names.push(`Q${n}`, `K${n}`, `V${n}`, `S${n}`, `A${n}`, `H${n}`);
  }
  names.push('CONCAT', 'WO');
  if (state.bias) names.push('BO');
  names.push('Y');
  return names;
}

/** rows x cols of a matrix, by name, for the state's sizes. */
export function shapeOf(name, state) {
  const { L, E } = state;
  const hd = headDim(state);
  if (name === 'X' || name === 'CONCAT' || name === 'Y') return [L, E];
  if (name === 'WO') return [E, E];
  if (name === 'BO') return [1, E];
  if (name[0] === 'W') return [E, hd];
  if (name[0] === 'B') return [1, hd];
  if (name[0] === 'S' || name[0] === 'A') return [L, L];
  return [L, hd];
}

/** The signed scale shared by every matrix except A: the largest magnitude shown. */
export function sharedScale(state, trace) {
  let max = 0;
  const see = (v) => { if (Number.isFinite(v) && Math.abs(v) > max) max = Math.abs(v); };
  for (const row of state.x) row.forEach(see);
  for (const w of [state.wq, state.wk, state.wv, state.wo]) for (const row of w) row.forEach(see);
  if (state.bias) for (const k of ['q', 'k', 'v', 'o']) state.bias[k].forEach(see);
  for (const k of ['q', 'k', 'v', 'scores', 'headOutputs', 'concat', 'output']) {
    const d = trace[k].data;
    for (let n = 0; n < d.length; n++) see(d[n]);
  }
  return { kind: 'signed', min: -(max || 1), max: max || 1 };
}


const labelCache = new Map();
const labels = (prefix, n) => {
  const key = `${prefix}/${n}`;
  if (!labelCache.has(key)) labelCache.set(key, Array.from({ length: n }, (_, i) => `${prefix}${i}`));
  return labelCache.get(key);
};


/** What a matrix shows for the state and its trace: shape, labels, numbers, scale. */
export function specOf(name, scale, state, trace) {
  const { L, E } = state;
  const hd = headDim(state);
  const input = isInput(name);
  if (input) {
    const [t, sub] = inputTitle(name);
    const isBias = name.startsWith('B');
    const rows = isBias ? 1 : name === 'X' ? L : E;
    const cols = name === 'X' || name === 'WO' || name === 'BO' ? E : hd;
    return {
      title: t, subtitle: `${sub ? `${sub}, ` : ''}${rows}×${cols}`, rows, cols,
      rowLabels: isBias ? ['b'] : name === 'X' ? labels('x', L) : labels('', E),
      colLabels: labels('', cols), data: inputData(state, name), scale,
    };
  }
  if (name === 'CONCAT' || name === 'Y') {
    return {
      title: name === 'Y' ? `Y = Concat·W_O${state.bias ? ' + b_O' : ''}` : 'Concat(heads)',
      subtitle: `${L}×${E}`, rows: L, cols: E, rowLabels: labels('x', L), colLabels: labels('', E),
      data: name === 'Y' ? trace.output.data : trace.concat.data, scale,
    };
  }
  const stage = name[0];
  const n = Number(name.slice(1));
  const h = n - 1;
  switch (stage) {
    case 'Q': case 'K': case 'V':
      return {
        title: `${stage} = X·W_${stage}`, subtitle: `${L}×${hd}`, rows: L, cols: hd, rowLabels: labels('x', L),
        colLabels: labels('', hd), data: headSlice(trace[stage.toLowerCase()], h), scale,
      };
    case 'S':
      return {
        title: 'scores = Q·Kᵀ / √d_k', subtitle: `d_k = ${hd}`, rows: L, cols: L, rowLabels: labels('q', L),
        colLabels: labels('k', L), data: headSlice(trace.scores, h), scale,
      };
    case 'A':
      return {
        title: 'A = softmax(scores)', subtitle: 'rows sum to 1', rows: L, cols: L, rowLabels: labels('q', L),
        colLabels: labels('k', L), data: headSlice(trace.weights, h), scale: WEIGHTS_SCALE,
      };
    case 'H':
      return {
        title: `head${subscript(n)} = A·V`, subtitle: `${L}×${hd}`, rows: L, cols: hd, rowLabels: labels('x', L),
        colLabels: labels('', hd), data: headSlice(trace.headOutputs, h), scale,
      };
    default:
      throw new RangeError(`no matrix named ${name}`);
  }
}

function inputTitle(name) {
  const m = /^([WB])([QKVO])(\d*)$/.exec(name);
  if (name === 'X') return ['X', 'tokens × dims'];
  if (!m) return [name, ''];
  return [`${m[1] === 'W' ? 'W' : 'b'}_${m[2]}`, m[3] ? `head ${m[3]}` : ''];
}
