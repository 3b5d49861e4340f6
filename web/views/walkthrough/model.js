// The walkthrough's data, without any DOM: the editable state (X and the projections in the seed's
// x·W notation), its presets and resizing, the PyTorch state_dict built from it, which case
// documents it can show, and the "explain this cell" texts built from a trace's numbers.
//
// The state is one plain object; every function here returns a new one and never mutates its
// argument, so the view can keep the previous state and the unit tests can compare them.
//
//   state = {
//     L, E, H,                       tokens, embedding size, heads (H divides E)
//     x:  number[][]                 (L, E) the tokens, one per row
//     wq, wk, wv: number[][]         (E, E) Q = X·W_Q; head h owns columns h*d_k .. (h+1)*d_k - 1
//     wo: number[][]                 (E, E) Y = concat·W_O
//     bias: null | { q, k, v, o }    (E) each; null for bias: false (the seed has none)
//     masks: null | { attnMask, keyPaddingMask, isCausal }   only from a loaded case
//     source: string                 where the numbers came from, for the status line
//   }
//
// Head h's W_Q^(h) (E, d_k) is the column block of wq, which is also the transpose of rows
// h*d_k .. of the q block of PyTorch's in_proj_weight; the whole E x E matrix is kept so that
// changing the number of heads regroups the same numbers instead of inventing new ones.
//
// This module holds the state's edits (resizing, the editable matrices, one cell); the others
// are re-exported from here, so `model.js` is the one import of the walkthrough's model:
// shape.js (sizes), presets.js (seed, random, identity), pytorch.js (state_dict, config, masks,
// overflow), from-case.js (stateFromCase), explain.js (explainCell).
import { checkSizes, headDim, resizeMatrix, resizeVector } from './shape.js';
import { randomEntry } from './presets.js';

export { MAX_SIZE, divisors, nearestDivisor, headDim } from './shape.js';
export {
  LEARNED_WQ1, seedState, learnedLookingState, randomEntry, randomState, identityState,
} from './presets.js';
export {
  toStateDict, moduleConfig, traceOptions, describeMasks, maskTerms, traceOverflow,
} from './pytorch.js';
export { stateFromCase } from './from-case.js';
export { formatTerm } from './explain-numbers.js';
export { explainCell } from './explain.js';

/**
 * New sizes, keeping every value that still has a place (the top-left block of each matrix) and
 * filling new ones from the seeded random preset. A loaded case's masks are kept only while the
 * tokens and heads they were written for stay; `droppedMasks` says when they went.
 * @returns {{ state: object, droppedMasks: boolean }}
 */
export function resizeState(state, { L = state.L, E = state.E, H = state.H }, seed = 1) {
  checkSizes({ L, E, H });
  const fill = (name) => (i, j) => randomEntry(seed, name, i, j);
  const keepMasks = state.masks !== null && L === state.L && H === state.H;
  const next = {
    ...state,
    L, E, H,
    x: resizeMatrix(state.x, L, E, fill('x')),
    wq: resizeMatrix(state.wq, E, E, fill('wq')),
    wk: resizeMatrix(state.wk, E, E, fill('wk')),
    wv: resizeMatrix(state.wv, E, E, fill('wv')),
    wo: resizeMatrix(state.wo, E, E, fill('wo')),
    bias: state.bias && {
      q: resizeVector(state.bias.q, E, fill('bq')), k: resizeVector(state.bias.k, E, fill('bk')),
      v: resizeVector(state.bias.v, E, fill('bv')), o: resizeVector(state.bias.o, E, fill('bo')),
    },
    masks: keepMasks ? state.masks : null,
  };
  return { state: next, droppedMasks: state.masks !== null && !keepMasks };
}

/**
 * The editable matrices of the view, by their data-matrix names: X, WQ1/WK1/WV1 (E, d_k) per
 * head, WO (E, E) and, with biases, BQ1/BK1/BV1 (1, d_k) per head and BO (1, E).
 * @returns {{ name: string, rows: number, cols: number, get(i, j): number }[]}
 */
export function inputMatrices(state) {
  const hd = headDim(state);
  const out = [{ name: 'X', rows: state.L, cols: state.E, get: (i, j) => state.x[i][j] }];
  for (let h = 0; h < state.H; h++) {
    for (const [letter, w] of [['Q', state.wq], ['K', state.wk], ['V', state.wv]]) {
      out.push({ name: `W${letter}${h + 1}`, rows: state.E, cols: hd, get: (i, j) => w[i][h * hd + j] });
    }
    if (state.bias) {
      for (const letter of ['Q', 'K', 'V']) {
        const b = state.bias[letter.toLowerCase()];
        out.push({ name: `B${letter}${h + 1}`, rows: 1, cols: hd, get: (_, j) => b[h * hd + j] });
      }
    }
  }
  out.push({ name: 'WO', rows: state.E, cols: state.E, get: (i, j) => state.wo[i][j] });
  if (state.bias) out.push({ name: 'BO', rows: 1, cols: state.E, get: (_, j) => state.bias.o[j] });
  return out;
}

/** Values of an editable matrix (by data-matrix name) as a row-major Float64Array. */
export function inputData(state, name) {
  const m = inputMatrices(state).find((x) => x.name === name);
  if (!m) throw new RangeError(`no editable matrix named ${name}`);
  const data = new Float64Array(m.rows * m.cols);
  for (let i = 0; i < m.rows; i++) for (let j = 0; j < m.cols; j++) data[i * m.cols + j] = m.get(i, j);
  return data;
}

/**
 * The state with one editable cell changed. `name` is a data-matrix name (X, WQ2, BO, ...);
 * (i, j) are the row and column in that matrix as shown.
 */
export function withCell(state, name, i, j, value) {
  if (!Number.isFinite(value)) throw new RangeError(`${name}[${i}][${j}]: expected a finite number, got ${value}`);
  const hd = headDim(state);
  const inRange = (rows, cols) => {
    if (!(Number.isInteger(i) && Number.isInteger(j) && i >= 0 && i < rows && j >= 0 && j < cols)) {
      throw new RangeError(`${name}[${i}][${j}]: outside the ${rows} x ${cols} matrix`);
    }
  };
  const setIn = (m, r, c) => {
    const copy = m.slice();
    copy[r] = m[r].slice();
    copy[r][c] = value;
    return copy;
  };
  if (name === 'X') {
    inRange(state.L, state.E);
    return { ...state, x: setIn(state.x, i, j) };
  }
  if (name === 'WO') {
    inRange(state.E, state.E);
    return { ...state, wo: setIn(state.wo, i, j) };
  }
  if (name === 'BO' && state.bias) {
    inRange(1, state.E);
    const o = state.bias.o.slice();
    o[j] = value;
    return { ...state, bias: { ...state.bias, o } };
  }
  const match = /^(W|B)([QKV])(\d+)$/.exec(name);
  const h = match ? Number(match[3]) - 1 : -1;
  if (match && h >= 0 && h < state.H && (match[1] === 'W' || state.bias)) {
    const key = match[2].toLowerCase();
    if (match[1] === 'W') {
      inRange(state.E, hd);
      return { ...state, [`w${key}`]: setIn(state[`w${key}`], i, h * hd + j) };
    }
    inRange(1, hd);
    const b = state.bias[key].slice();
    b[h * hd + j] = value;
    return { ...state, bias: { ...state.bias, [key]: b } };
  }
  throw new RangeError(`no editable matrix named ${name}`);
}
