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
import { parseCase } from '../../lib/case.js';
import { formatNumber } from '../common/matrix.js';

/** Largest number of tokens and embedding size the walkthrough shows ("tutorial size"). */
export const MAX_SIZE = 16;

const SEED_X = [[1, 0, 1, 2], [0, 2, 1, 0], [1, 1, 0, 1]];
const SEED_WO = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0]];
/** The "learned-looking" head-1 W_Q the seed shows: a linear combination, not a pick of dims. */
export const LEARNED_WQ1 = [[0.3, -0.8], [1.1, 0.2], [-0.5, 0.7], [0.9, -0.4]];

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

const identity = (n) => Array.from({ length: n }, (_, i) => Array.from({ length: n }, (_, j) => (i === j ? 1 : 0)));
const cloneMatrix = (m) => m.map((row) => row.slice());
const transpose = (m) => (m.length === 0 ? [] : m[0].map((_, j) => m.map((row) => row[j])));

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

function checkSizes({ L, E, H }) {
  for (const [name, v] of [['tokens', L], ['embedding size', E]]) {
    if (!Number.isInteger(v) || v < 1 || v > MAX_SIZE) {
      throw new RangeError(`${name}: expected an integer in [1, ${MAX_SIZE}], got ${v}`);
    }
  }
  if (!Number.isInteger(H) || H < 1 || E % H !== 0) {
    throw new RangeError(`heads: expected a divisor of the embedding size ${E}, got ${H}`);
  }
}

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

function resizeMatrix(m, rows, cols, fill) {
  return Array.from({ length: rows }, (_, i) =>
    Array.from({ length: cols }, (_, j) => (i < m.length && j < m[i].length ? m[i][j] : fill(i, j))));
}
const resizeVector = (v, n, fill) => Array.from({ length: n }, (_, i) => (i < v.length ? v[i] : fill(i)));

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

/** d_k: the size of one head. */
export const headDim = (state) => state.E / state.H;

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

/**
 * PyTorch's state_dict for the state: in_proj_weight (3E, E) = [W_Q^T; W_K^T; W_V^T] (a torch
 * projection computes x W^T), out_proj.weight = W_O^T, and the biases when the state has them.
 */
export function toStateDict(state) {
  const sd = {
    in_proj_weight: [...transpose(state.wq), ...transpose(state.wk), ...transpose(state.wv)],
    'out_proj.weight': transpose(state.wo),
  };
  if (state.bias) {
    sd.in_proj_bias = [...state.bias.q, ...state.bias.k, ...state.bias.v];
    sd['out_proj.bias'] = state.bias.o.slice();
  }
  return sd;
}

/** createMultiheadAttention's config for the state. */
export const moduleConfig = (state) => ({ embedDim: state.E, numHeads: state.H, bias: state.bias !== null });

/** trace()'s options: the loaded case's masks, if any. */
export function traceOptions(state) {
  if (!state.masks) return {};
  const { attnMask, keyPaddingMask, isCausal } = state.masks;
  return { attnMask, keyPaddingMask, isCausal };
}

/** In words, what the state's masks do (empty without masks). */
export function describeMasks(state) {
  if (!state.masks) return '';
  const { attnMask, keyPaddingMask, isCausal } = state.masks;
  const parts = [];
  const kind = (m) => (m.type === 'bool' ? 'boolean' : 'additive');
  if (attnMask) parts.push(`a ${kind(attnMask)} attn_mask [${attnMask.shape.join(', ')}]`);
  else if (isCausal) parts.push('a causal mask (is_causal)');
  if (keyPaddingMask) parts.push(`a ${kind(keyPaddingMask)} key_padding_mask [${keyPaddingMask.shape.join(', ')}]`);
  return parts.length ? `Masks from the case: ${parts.join(' and ')} are added to the scores ` +
    '(−∞ where a key is blocked).' : '';
}

/**
 * What the masks add to each score, (H, L, L) row-major, as PyTorch applies them: a boolean mask
 * blocks (−∞) where true, a float mask is added, attn_mask (L, L) or per head (H, L, L), plus
 * key_padding_mask (L) on every row; is_causal without attn_mask blocks the keys after the query.
 * null without masks.
 */
export function maskTerms(state) {
  if (!state.masks) return null;
  const { L, H } = state;
  const { attnMask, keyPaddingMask, isCausal } = state.masks;
  const add = new Float64Array(H * L * L);
  const term = (m, k) => (m.type === 'bool' ? (m.data[k] ? -Infinity : 0) : m.data[k]);
  for (let h = 0; h < H; h++) {
    for (let i = 0; i < L; i++) {
      for (let j = 0; j < L; j++) {
        let t = 0;
        if (attnMask) t += term(attnMask, attnMask.shape.length === 3 ? (h * L + i) * L + j : i * L + j);
        else if (isCausal && j > i) t = -Infinity;
        if (keyPaddingMask) t += term(keyPaddingMask, j);
        add[(h * L + i) * L + j] = t;
      }
    }
  }
  return add;
}

function nested(t) {
  const [rows, cols] = t.shape;
  return Array.from({ length: rows }, (_, i) => Array.from(t.data.subarray(i * cols, (i + 1) * cols)));
}

function sameTensor(a, b) {
  return a === b || (a.shape.length === b.shape.length && a.shape.every((d, i) => d === b.shape[i]) &&
    a.data.every((v, i) => Object.is(v, b.data[i])));
}

/**
 * Whether the walkthrough can show a case document (object or JSON text), and as which state.
 * It can when the case has a packed in_proj_weight, an unbatched query of at most 16 x 16, is
 * self-attention (key and value absent or equal to the query) and adds no extra keys
 * (add_bias_kv, add_zero_attn). Biases and masks are kept, so the trace equals the case's forward.
 * Malformed documents throw the library's PARSE_ERROR.
 * @returns {{ state: object } | { reason: string }}
 */
export function stateFromCase(caseDocument) {
  const c = parseCase(caseDocument);
  const { embedDim: E, numHeads: H } = c.config;
  const name = c.name ? `case "${c.name}"` : 'the loaded case';
  const heads = (why) => ({ reason: `The walkthrough shows unbatched self-attention of up to ` +
    `${MAX_SIZE} tokens x ${MAX_SIZE} dims; ${name} ${why}. A Heads view (the demo's Heads tab, or ` +
    'a <headscope-heads> widget) shows it.' });
  if (c.config.kdim !== undefined && c.config.kdim !== E) return heads('has kdim != embed_dim');
  if (c.config.vdim !== undefined && c.config.vdim !== E) return heads('has vdim != embed_dim');
  if (!c.stateDict.has('in_proj_weight')) return heads('has separate q/k/v projection weights');
  if (c.config.addBiasKV || c.config.addZeroAttn) {
    return heads('adds extra keys (add_bias_kv / add_zero_attn)');
  }
  if (c.query.shape.length !== 2) return heads(`has a batched query [${c.query.shape.join(', ')}]`);
  const [L] = c.query.shape;
  if (L < 1 || L > MAX_SIZE || E > MAX_SIZE) return heads(`is ${L} tokens x ${E} dims`);
  if (!sameTensor(c.key, c.query) || !sameTensor(c.value, c.query)) {
    return heads('is cross-attention (its key or value differs from the query)');
  }
  const inProj = nested(c.stateDict.get('in_proj_weight'));
  const block = (b) => transpose(inProj.slice(b * E, (b + 1) * E));
  const bias = c.config.bias !== false;
  const vector = (key, from, to) => Array.from(c.stateDict.get(key).data.subarray(from, to));
  const { attnMask = null, keyPaddingMask = null, isCausal = false } = c.options;
  return {
    state: {
      L, E, H,
      x: nested(c.query),
      wq: block(0), wk: block(1), wv: block(2),
      wo: transpose(nested(c.stateDict.get('out_proj.weight'))),
      bias: bias ? {
        q: vector('in_proj_bias', 0, E), k: vector('in_proj_bias', E, 2 * E),
        v: vector('in_proj_bias', 2 * E, 3 * E), o: vector('out_proj.bias', 0, E),
      } : null,
      masks: attnMask || keyPaddingMask || isCausal ? { attnMask, keyPaddingMask, isCausal } : null,
      source: name,
    },
  };
}

// ---- Overflow ------------------------------------------------------------------------------

/**
 * Whether a trace overflowed float32 somewhere (a ±∞ or NaN that no mask put there), and where,
 * in words ("the scores"); null when every number is finite. A masked score is −∞ by design and a
 * fully masked row's weights are 0, so neither counts.
 */
export function traceOverflow(trace, masks = null) {
  const bad = (t) => { for (let n = 0; n < t.data.length; n++) if (!Number.isFinite(t.data[n])) return true; return false; };
  if (bad(trace.q) || bad(trace.k) || bad(trace.v)) return 'the queries, keys or values';
  const s = trace.scores.data;
  for (let n = 0; n < s.length; n++) {
    if (Number.isNaN(s[n]) || s[n] === Infinity || (s[n] === -Infinity && !(masks && masks[n] === -Infinity))) {
      return 'the scores';
    }
  }
  if (bad(trace.weights)) return 'the attention weights';
  if (bad(trace.headOutputs)) return 'the head outputs';
  if (bad(trace.concat) || bad(trace.output)) return 'the outputs';
  return null;
}

// ---- Explain this cell --------------------------------------------------------------------
//
// Each explanation writes out a sum (or a softmax) with the numbers it was computed from, then
// its result. The numbers are written with just enough decimals that a hand check works: the
// written terms, computed exactly, give the written result at its written precision. Three
// decimals usually do; a term needs more when the rounding of several terms adds up (a long sum,
// an exp), and the result itself gets a fourth or fifth decimal in the rare case that it sits on
// a rounding boundary (the engine computes in float32).

/**
 * A number inside a written-out sum: integers plain ("1"), others with up to `decimals`
 * decimals (3), trailing zeros dropped ("0.5", "1.414"). ∞ as "∞".
 */
export function formatTerm(v, decimals = 3) {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '∞';
  if (v === -Infinity) return '-∞';
  if (Number.isInteger(v)) return String(v);
  let s = v.toFixed(decimals);
  if (s.includes('.')) s = s.replace(/0+$/, '').replace(/\.$/, '');
  return s === '-0' ? '0' : s;
}
/** The value a written term stands for. */
const writtenValue = (v, decimals) => (Number.isFinite(v) ? Number(formatTerm(v, decimals)) : v);

/**
 * The decimals to write: `dr` for the result, and per check (a function from "how a term is
 * written" to the value the written terms give) `dt[k]` for its terms, the fewest (from 3) with
 * which every check gives the written result.
 */
function precisionFor(result, checks) {
  for (let dr = 3; dr <= 7; dr++) {
    const want = formatNumber(result, dr);
    const dt = checks.map((check) => {
      for (let d = 3; d <= 10; d++) if (formatNumber(check((v) => writtenValue(v, d)), dr) === want) return d;
      return -1;
    });
    if (dt.every((d) => d >= 0)) return { dr, dt };
  }
  return { dr: 3, dt: checks.map(() => 10) };
}

const factorAt = (d) => (v) => (v < 0 || Object.is(v, -0) ? `(${formatTerm(v, d)})` : formatTerm(v, d));
const sumOf = (terms) => terms.join(' + ');

/** Reads trace tensors by index; `t.data` is row-major in `t.shape`. */
function at(t, ...index) {
  let k = 0;
  for (let a = 0; a < index.length; a++) k = k * t.shape[a] + index[a];
  return t.data[k];
}

/** Σ_k w(a_k) * w(b_k) (+ w(bias)), as a check for precisionFor. */
const dotCheck = (a, b, bias = null) => (w) => {
  let sum = 0;
  for (let k = 0; k < a.length; k++) sum += w(a[k]) * w(b[k]);
  return bias === null ? sum : sum + w(bias);
};

/**
 * How one computed cell was obtained, written out with the trace's numbers.
 * `stage`: 'Q' | 'K' | 'V' | 'S' (scores) | 'A' (softmax weights) | 'H' (head output) for head
 * `h` (0-based), or 'CONCAT' | 'Y' (h ignored). (i, j): row and column as shown.
 * `sources` names the cells the value came from (data-matrix name plus a row and/or a column;
 * a missing row or column means the whole column or row), for highlighting.
 * @returns {{ text: string, sources: { matrix: string, row?: number, col?: number }[] }}
 */
export function explainCell(stage, { state, trace, masks = maskTerms(state) }, h, i, j) {
  const { L, E } = state;
  const hd = headDim(state);
  const head = `Head ${h + 1}`;
  const n = h + 1;
  switch (stage) {
    case 'Q': case 'K': case 'V': {
      const key = stage.toLowerCase();
      const w = state[`w${key}`];
      const col = h * hd + j;
      const xs = state.x[i].slice(0, E);
      const ws = Array.from({ length: E }, (_, d) => w[d][col]);
      const bias = state.bias ? state.bias[key][col] : null;
      const result = at(trace[key], h, i, j);
      const { dr, dt: [d] } = precisionFor(result, [dotCheck(xs, ws, bias)]);
      const f = factorAt(d);
      const terms = xs.map((x, k) => `${f(x)}*${f(ws[k])}`);
      const sources = [{ matrix: 'X', row: i }, { matrix: `W${stage}${n}`, col: j }];
      if (state.bias) sources.push({ matrix: `B${stage}${n}`, col: j });
      return {
        text: `${head}: ${stage}[${i}][${j}] = x_${i} · W_${stage}[:, ${j}]` +
          `${state.bias ? ` + b_${stage}[${j}]` : ''}\n` +
          `= ${sumOf(terms)}${state.bias ? ` + ${f(bias)}` : ''} = ${formatNumber(result, dr)}`,
        sources,
      };
    }
    case 'S': {
      const qs = Array.from({ length: hd }, (_, d) => at(trace.q, h, i, d));
      const ks = Array.from({ length: hd }, (_, d) => at(trace.k, h, j, d));
      const score = at(trace.scores, h, i, j);
      const m = masks ? masks[(h * L + i) * L + j] : 0;
      const root = Math.sqrt(hd);
      const sources = [{ matrix: `Q${n}`, row: i }, { matrix: `K${n}`, row: j }];
      let text = `${head}: scores[${i}][${j}], query token ${i} against key token ${j}:\n`;
      if (m === -Infinity) {
        const f = factorAt(3);
        const raw = `(${sumOf(qs.map((q, k) => `${f(q)}*${f(ks[k])}`))}) / ${formatTerm(root)}`;
        text += `q_${i} · k_${j} / sqrt(d_k) + mask = ${raw} + (−∞) = ${formatNumber(score)}` +
          ` (the mask blocks key ${j} for query ${i})`;
        return { text, sources };
      }
      const dot = dotCheck(qs, ks);
      const { dr, dt: [d] } = precisionFor(score, [(w) => dot(w) / w(root) + w(m)]);
      const f = factorAt(d);
      const raw = `(${sumOf(qs.map((q, k) => `${f(q)}*${f(ks[k])}`))}) / ${formatTerm(root, d)}`;
      if (m !== 0) {
        text += `q_${i} · k_${j} / sqrt(d_k) + mask = ${raw} + ${f(m)} = ${formatNumber(score, dr)}`;
      } else {
        text += `q_${i} · k_${j} / sqrt(d_k) = ${raw} = ${formatNumber(score, dr)}`;
      }
      return { text, sources };
    }
    case 'A': {
      const row = Array.from({ length: L }, (_, c) => at(trace.scores, h, i, c));
      const weight = at(trace.weights, h, i, j);
      const sources = [{ matrix: `S${n}`, row: i }];
      const max = Math.max(...row);
      let text = `${head}: A[${i}][${j}] = softmax of scores row ${i}, entry ${j}:\n`;
      if (max === -Infinity) {
        text += `every key is masked for query ${i}: headscope returns an all-zero row ` +
          `(PyTorch would give NaN), so A[${i}][${j}] = ${formatNumber(weight)}`;
        return { text, sources };
      }
      // Written with exp(s) as in a textbook; past exp(20) the terms are shifted by the row's
      // maximum, as the engine itself computes them, so they stay readable.
      const shift = max > 20 ? max : 0;
      const ex = (s) => (s === -Infinity ? 0 : Math.exp(s - shift));
      const exps = row.map(ex);
      // Line 1 from the written scores, line 2 from the written exponentials.
      const fromScores = (w) => {
        const e = (s) => (s === -Infinity ? 0 : Math.exp(w(s) - w(shift)));
        let sum = 0;
        for (const s of row) sum += e(s);
        return e(row[j]) / sum;
      };
      const fromExps = (w) => {
        let sum = 0;
        for (const e of exps) sum += w(e);
        return w(exps[j]) / sum;
      };
      const { dr, dt: [d1, d2] } = precisionFor(weight, [fromScores, fromExps]);
      const arg = (s) => (s === -Infinity ? '-∞' : shift ? `${formatTerm(s, d1)} - ${formatTerm(shift, d1)}` : formatTerm(s, d1));
      const expOf = (s) => `exp(${arg(s)})`;
      if (shift) text += `(every score minus the row's maximum ${formatTerm(shift, d1)}, which leaves softmax unchanged)\n`;
      text += `exp(s[${i}][${j}]) / Σ_c exp(s[${i}][c]) = ${expOf(row[j])} / (${row.map(expOf).join(' + ')})\n` +
        `= ${formatTerm(exps[j], d2)} / (${exps.map((e) => formatTerm(e, d2)).join(' + ')}) = ${formatNumber(weight, dr)}`;
      return { text, sources };
    }
    case 'H': {
      const as = Array.from({ length: L }, (_, c) => at(trace.weights, h, i, c));
      const vs = Array.from({ length: L }, (_, c) => at(trace.v, h, c, j));
      const result = at(trace.headOutputs, h, i, j);
      const { dr, dt: [d] } = precisionFor(result, [dotCheck(as, vs)]);
      const f = factorAt(d);
      return {
        text: `${head}: output[${i}][${j}] = Σ_c A[${i}][c] * V[c][${j}]\n` +
          `= ${sumOf(as.map((a, k) => `${f(a)}*${f(vs[k])}`))} = ${formatNumber(result, dr)}`,
        sources: [{ matrix: `A${n}`, row: i }, { matrix: `V${n}`, col: j }],
      };
    }
    case 'CONCAT': {
      const from = Math.floor(j / hd);
      const c = j - from * hd;
      return {
        text: `concat[${i}][${j}] = head ${from + 1} output[${i}][${c}] (head ${from + 1} fills ` +
          `columns ${from * hd}${hd > 1 ? `–${from * hd + hd - 1}` : ''} of the concatenation)\n` +
          `= ${formatNumber(at(trace.concat, i, j))}`,
        sources: [{ matrix: `H${from + 1}`, row: i, col: c }],
      };
    }
    case 'Y': {
      const cs = Array.from({ length: E }, (_, d) => at(trace.concat, i, d));
      const ws = Array.from({ length: E }, (_, d) => state.wo[d][j]);
      const bias = state.bias ? state.bias.o[j] : null;
      const result = at(trace.output, i, j);
      const { dr, dt: [d] } = precisionFor(result, [dotCheck(cs, ws, bias)]);
      const f = factorAt(d);
      const sources = [{ matrix: 'CONCAT', row: i }, { matrix: 'WO', col: j }];
      if (state.bias) sources.push({ matrix: 'BO', col: j });
      return {
        text: `Y[${i}][${j}] = concat row ${i} · W_O column ${j}${state.bias ? ` + b_O[${j}]` : ''}\n` +
          `= ${sumOf(cs.map((x, k) => `${f(x)}*${f(ws[k])}`))}${state.bias ? ` + ${f(bias)}` : ''} = ${formatNumber(result, dr)}`,
        sources,
      };
    }
    default:
      throw new RangeError(`explainCell: unknown stage ${stage}`);
  }
}
