// A view's state in a URL hash: `#heads?text=a+b&heads=2&off=2`, `#walkthrough?L=3&E=4&H=2&x=...`.
// The demo page keeps the hash in step with its views, so a tutorial can link to one exact
// setting; encode then decode gives the same state back, exactly (tests/js/view-state.test.js
// checks that over random states). Numbers are written as JavaScript's shortest round-trip
// decimal (String(v)), so no digit is lost.
//
// Only fields that differ from the default state are written, which keeps links short. decode*
// returns a patch for the view's setState, which checks every value; a parameter that is not a
// field, or is not even of the field's kind, is an error naming it.
import { HeadscopeError } from '../../lib/errors.js';
import { quoteInput } from '../../lib/tensor.js';
import { defaultHeadsState } from '../heads/state.js';
import { publicWalkthroughState } from '../walkthrough/state.js';
import { seedState } from '../walkthrough/model.js';

// (The parameter's name is the link's text: quoted, so a hostile link cannot make the message
// huge or break it over lines.)
const fail = (param, message) => {
  throw new HeadscopeError('INVALID_ARGUMENT', `URL parameter ${quoteInput(param)}: ${message}`);
};

const numberList = (text, param) => (text === '' ? [] : text.split(',').map((w, k) => {
  const v = Number(w);
  if (w.trim() === '' || Number.isNaN(v)) fail(param, `item ${k + 1} (${JSON.stringify(w.slice(0, 20))}) is not a number`);
  return v;
}));
const numberText = (list) => list.map((v) => String(v)).join(',');
const boolText = (v) => (v ? '1' : '0');
function boolOf(text, param) {
  if (text === '1' || text === 'true') return true;
  if (text === '0' || text === 'false') return false;
  return fail(param, `expected 1 or 0, got ${JSON.stringify(text.slice(0, 20))}`);
}
function numberOf(text, param) {
  const v = Number(text);
  if (text.trim() === '' || Number.isNaN(v)) fail(param, `expected a number, got ${JSON.stringify(text.slice(0, 20))}`);
  return v;
}

// ---- Heads --------------------------------------------------------------------------------------

const HEADS_PARAMS = {
  text: { write: (v) => v, read: (t) => t },
  heads: { write: String, read: numberOf },
  weights: { write: (v) => v, read: (t) => t },
  presets: { write: (v) => v.join(','), read: (t) => (t === '' ? [] : t.split(',')) },
  seed: { write: String, read: numberOf },
  sharpness: { write: String, read: numberOf },
  causal: { write: boolText, read: boolOf },
  padded: { write: numberText, read: numberList },
  off: { write: numberText, read: numberList },
  show: { write: (v) => (v === null ? 'all' : numberText(v)), read: (t, p) => (t === 'all' ? null : numberList(t, p)) },
  view: { write: (v) => v, read: (t) => t },
};

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/** The Heads view's state as URL parameters (without '#heads?'), default fields left out. */
export function encodeHeadsState(state) {
  const defaults = defaultHeadsState();
  const params = new URLSearchParams();
  for (const [name, { write }] of Object.entries(HEADS_PARAMS)) {
    // presets are written whenever the head count is: the defaults of another count differ.
    if (same(state[name], defaults[name]) && !(name === 'presets' && state.heads !== defaults.heads)) continue;
    params.set(name, write(state[name]));
  }
  return params.toString();
}

/** A patch for the Heads view's setState from URL parameters; an unknown parameter is an error. */
export function decodeHeadsState(query) {
  const params = new URLSearchParams(query);
  const patch = {};
  for (const [name, text] of params) {
    // Own keys only: 'constructor', '__proto__' or 'toString' are unknown, not inherited.
    const spec = Object.hasOwn(HEADS_PARAMS, name) ? HEADS_PARAMS[name] : undefined;
    if (spec === undefined) fail(name, `unknown (the Heads view's are ${Object.keys(HEADS_PARAMS).join(', ')})`);
    if (Object.hasOwn(patch, name)) fail(name, 'given twice');
    patch[name] = spec.read(text, name);
  }
  return patch;
}

// ---- Walkthrough ----------------------------------------------------------------------------------

const MATRICES = ['x', 'wq', 'wk', 'wv', 'wo'];
const BIASES = ['bq', 'bk', 'bv', 'bo'];

/** The Walkthrough's state as URL parameters: empty for the seed's example, else every number. */
export function encodeWalkthroughState(state) {
  const seed = publicWalkthroughState(seedState());
  const numbers = (s) => ({ L: s.L, E: s.E, H: s.H, x: s.x, wq: s.wq, wk: s.wk, wv: s.wv, wo: s.wo, bias: s.bias, causal: s.causal });
  if (same(numbers(state), numbers(seed))) return '';
  const params = new URLSearchParams();
  params.set('L', String(state.L));
  params.set('E', String(state.E));
  params.set('H', String(state.H));
  for (const m of MATRICES) params.set(m, numberText(state[m].flat()));
  if (state.bias !== null) BIASES.forEach((b, k) => params.set(b, numberText(state.bias['qkvo'[k]])));
  if (state.causal) params.set('causal', '1');
  return params.toString();
}

/** A patch for the Walkthrough's setState from URL parameters. */
export function decodeWalkthroughState(query) {
  const params = new URLSearchParams(query);
  const known = ['L', 'E', 'H', ...MATRICES, ...BIASES, 'causal'];
  for (const [name] of params) {
    if (!known.includes(name)) fail(name, `unknown (the Walkthrough's are ${known.join(', ')})`);
    if (params.getAll(name).length > 1) fail(name, 'given twice');
  }
  if ([...params.keys()].length === 0) return { preset: 'seed' };
  const patch = { preset: 'seed' };
  for (const n of ['L', 'E', 'H']) if (params.has(n)) patch[n] = numberOf(params.get(n), n);
  const L = patch.L ?? 3;
  const E = patch.E ?? 4;
  const rowsOf = (m) => (m === 'x' ? L : E);
  for (const m of MATRICES) {
    if (!params.has(m)) continue;
    const flat = numberList(params.get(m), m);
    const rows = rowsOf(m);
    if (!Number.isInteger(L) || !Number.isInteger(E) || flat.length !== rows * E) {
      fail(m, `expected ${rows} x ${E} = ${rows * E} numbers, got ${flat.length}`);
    }
    patch[m] = Array.from({ length: rows }, (_, i) => flat.slice(i * E, (i + 1) * E));
  }
  const given = BIASES.filter((b) => params.has(b));
  if (given.length > 0) {
    if (given.length !== 4) fail(BIASES.find((b) => !params.has(b)), 'missing (biases come as bq, bk, bv and bo together)');
    patch.bias = Object.fromEntries(BIASES.map((b, k) => ['qkvo'[k], numberList(params.get(b), b)]));
  } else {
    patch.bias = null;
  }
  patch.causal = params.has('causal') ? boolOf(params.get('causal'), 'causal') : false;
  return patch;
}

// ---- The hash -------------------------------------------------------------------------------------

/** '#heads?text=a' -> { view: 'heads', query: 'text=a' }; '#walkthrough' -> { view, query: '' }. */
export function parseHash(hash) {
  const text = hash.startsWith('#') ? hash.slice(1) : hash;
  const q = text.indexOf('?');
  return q < 0 ? { view: text, query: '' } : { view: text.slice(0, q), query: text.slice(q + 1) };
}

export function formatHash(view, query) {
  return `#${view}${query ? `?${query}` : ''}`;
}
