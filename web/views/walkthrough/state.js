// The Walkthrough's public state and options: what the view's update() (a widget's setState())
// takes, getState() returns and the headscope-change event carries, and the names its stages,
// heads and hide options accept. Pure functions (no DOM), tested in Node
// (tests/js/view-state.test.js).
//
//   {
//     L, E, H                        tokens (1-16), embedding size (1-16), heads (a divisor of E)
//     x: number[][]                  (L, E) the tokens
//     wq, wk, wv, wo: number[][]     (E, E), in the seed's x·W notation (model.js)
//     bias: null | { q, k, v, o }    (E) numbers each; null: bias=False (the seed has none)
//     source: string                 where the numbers came from, in words (read-only)
//     causal: boolean                a causal mask (query i sees keys 0..i)
//     masked: boolean                whether a loaded case's own masks apply (read-only: they
//                                    come only with a case, setCase)
//   }
// update() also takes `preset`: 'seed' | 'learned' | 'random' | 'identity' (with `seed` for
// 'random'), applied first; then L, E, H resize (keeping what still fits, model.js's resizeState);
// then any matrices given replace the current ones and must have the new sizes.
import { HeadscopeError } from '../../lib/errors.js';
import { quoteInput } from '../../lib/tensor.js';
import { FLOAT32_MAX } from '../common/numbers.js';
import {
  MAX_SIZE, identityState, learnedLookingState, randomState, resizeState, seedState,
} from './model.js';

/** Stages the `stages` option can show, in the order of the page. */
export const WALKTHROUGH_STAGES = ['input', 'projections', 'qkv', 'scores', 'weights', 'heads', 'output'];
/** Controls the `hide` option can name. */
export const WALKTHROUGH_CONTROLS = ['presets', 'sizes', 'legend', 'explain', 'export'];
export const WALKTHROUGH_PRESETS = ['seed', 'learned', 'random', 'identity'];

/** The stage of a matrix of the view by its data-matrix name (X, WQ1, BQ1, Q1, S1, A1, H1, CONCAT, WO, BO, Y). */
export function stageOf(name) {
  if (name === 'X') return 'input';
  if (/^[WB][QKV]\d+$/.test(name)) return 'projections';
  if (/^[QKV]\d+$/.test(name)) return 'qkv';
  if (/^S\d+$/.test(name)) return 'scores';
  if (/^A\d+$/.test(name)) return 'weights';
  if (/^H\d+$/.test(name)) return 'heads';
  return 'output';
}

const KEYS = ['preset', 'seed', 'L', 'E', 'H', 'x', 'wq', 'wk', 'wv', 'wo', 'bias', 'causal'];
const CAUSAL = Object.freeze({ attnMask: null, keyPaddingMask: null, isCausal: true });
const causalOnly = (masks) => masks !== null && masks.isCausal === true && !masks.attnMask && !masks.keyPaddingMask;

function fail(where, message) {
  throw new HeadscopeError('INVALID_ARGUMENT', `${where}: ${message}`);
}

const describe = (v) => (Array.isArray(v) ? `an array of ${v.length}` : v === null ? 'null'
  : typeof v === 'object' ? 'an object' : typeof v === 'string' ? JSON.stringify(v.slice(0, 40)) : String(v));

function checkNumber(v, where) {
  if (typeof v !== 'number' || !Number.isFinite(v) || Math.abs(v) > FLOAT32_MAX) {
    fail(where, `expected a finite number within float32's range (|v| <= 3.4e38), got ${describe(v)}`);
  }
  return v + 0;  // -0 is 0
}

function matrix(value, rows, cols, where) {
  if (!Array.isArray(value) || value.length !== rows) fail(where, `expected ${rows} rows of ${cols} numbers, got ${describe(value)}`);
  return value.map((row, i) => {
    if (!Array.isArray(row) || row.length !== cols) fail(`${where}[${i}]`, `expected ${cols} numbers, got ${describe(row)}`);
    return row.map((v, j) => checkNumber(v, `${where}[${i}][${j}]`));
  });
}

function vector(value, n, where) {
  if (!Array.isArray(value) || value.length !== n) fail(where, `expected ${n} numbers, got ${describe(value)}`);
  return value.map((v, j) => checkNumber(v, `${where}[${j}]`));
}

function size(v, where) {
  if (!Number.isInteger(v) || v < 1 || v > MAX_SIZE) fail(where, `expected an integer in [1, ${MAX_SIZE}], got ${describe(v)}`);
  return v;
}

/**
 * `current` (a model.js state) with `patch` applied, every field checked first: a HeadscopeError
 * names the first bad one (`${where}.wq[2][0]`...) and nothing is applied.
 */
export function applyWalkthroughState(patch, current, where = 'setState: state') {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) {
    fail(where, `expected an object with any of ${KEYS.join(', ')}, got ${describe(patch)}`);
  }
  const p = {};
  for (const key of Object.keys(patch)) {
    if (key === 'source') continue;  // getState's description of the numbers: ignored when given back
    const value = patch[key];  // read once: a getter or a Proxy answers once
    if (key === 'masked') {
      // Read-only: given back as getState reported it, fine; anything else cannot be done here.
      if (value !== (current.masks !== null && !causalOnly(current.masks))) {
        fail(`${where}.masked`, 'read-only (a case\'s masks come only with the case: setCase)');
      }
      continue;
    }
    if (!KEYS.includes(key)) fail(`${where}.${quoteInput(key)}`, `unknown field (expected any of ${KEYS.join(', ')})`);
    p[key] = value;
  }
  let s = current;
  let seed = 1;
  if ('seed' in p) {
    if (!Number.isSafeInteger(p.seed) || p.seed < 0) fail(`${where}.seed`, `expected an integer >= 0, got ${describe(p.seed)}`);
    seed = p.seed;
  }
  if ('preset' in p) {
    if (!WALKTHROUGH_PRESETS.includes(p.preset)) fail(`${where}.preset`, `expected one of ${WALKTHROUGH_PRESETS.join(', ')}, got ${describe(p.preset)}`);
    s = p.preset === 'seed' ? seedState() : p.preset === 'learned' ? learnedLookingState()
      : p.preset === 'random' ? randomState(s, seed, { withBias: s.bias !== null }) : identityState(s);
  } else if ('seed' in p) {
    fail(`${where}.seed`, "only with preset: 'random'");
  }
  const L = 'L' in p ? size(p.L, `${where}.L`) : s.L;
  const E = 'E' in p ? size(p.E, `${where}.E`) : s.E;
  const H = 'H' in p ? p.H : s.H;
  if (!Number.isInteger(H) || H < 1 || E % H !== 0) fail(`${where}.H`, `expected a divisor of E = ${E}, got ${describe(H)}`);
  if ('causal' in p && typeof p.causal !== 'boolean') fail(`${where}.causal`, `expected true or false, got ${describe(p.causal)}`);
  const wasCausal = causalOnly(s.masks);
  if (L !== s.L || E !== s.E || H !== s.H) s = resizeState(s, { L, E, H }, seed).state;
  const next = { ...s };
  // A causal mask fits any size; a case's own masks go with a resize (resizeState).
  const causal = 'causal' in p ? p.causal : wasCausal && !('preset' in p);
  if (causal) next.masks = CAUSAL;
  else if ('causal' in p || causalOnly(next.masks)) next.masks = null;
  if ('x' in p) next.x = matrix(p.x, L, E, `${where}.x`);
  for (const k of ['wq', 'wk', 'wv', 'wo']) if (k in p) next[k] = matrix(p[k], E, E, `${where}.${k}`);
  if ('bias' in p) {
    if (p.bias === null) {
      next.bias = null;
    } else {
      if (typeof p.bias !== 'object' || Array.isArray(p.bias)) fail(`${where}.bias`, `expected null or { q, k, v, o }, got ${describe(p.bias)}`);
      const b = {};
      for (const k of ['q', 'k', 'v', 'o']) b[k] = vector(p.bias[k], E, `${where}.bias.${k}`);
      next.bias = b;
    }
  }
  // Numbers given back as they were (getState -> setState) keep their source.
  const edited = ['x', 'wq', 'wk', 'wv', 'wo', 'bias'].some((k) => k in p && JSON.stringify(next[k]) !== JSON.stringify(s[k]));
  if (edited) next.source = 'numbers set by the page';
  return next;
}

/** The public state of a model.js state: copies of every array. */
export function publicWalkthroughState(s) {
  const copy = (m) => m.map((row) => row.slice());
  return {
    L: s.L, E: s.E, H: s.H, x: copy(s.x), wq: copy(s.wq), wk: copy(s.wk), wv: copy(s.wv), wo: copy(s.wo),
    bias: s.bias && { q: s.bias.q.slice(), k: s.bias.k.slice(), v: s.bias.v.slice(), o: s.bias.o.slice() },
    source: s.source, causal: causalOnly(s.masks), masked: s.masks !== null && !causalOnly(s.masks),
  };
}
