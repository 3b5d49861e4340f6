// The Walkthrough's state in a URL (`#walkthrough?L=3&E=4&H=2&x=...`): nothing for the seed's
// example, else every number (x and the weights row-major, the biases bq bk bv bo together, causal).
// common/url-state.js has the parameter readers and writers.
import {
  boolOf, failParam, numberList, numberOf, numberText, sameValue,
} from '../common/url-state.js';
import { publicWalkthroughState } from './state.js';
import { seedState } from './model.js';

const MATRICES = ['x', 'wq', 'wk', 'wv', 'wo'];
const BIASES = ['bq', 'bk', 'bv', 'bo'];

/** The Walkthrough's state as URL parameters: empty for the seed's example, else every number. */
export function encodeWalkthroughState(state) {
  const seed = publicWalkthroughState(seedState());
  const numbers = (s) => ({ L: s.L, E: s.E, H: s.H, x: s.x, wq: s.wq, wk: s.wk, wv: s.wv, wo: s.wo, bias: s.bias, causal: s.causal });
  if (sameValue(numbers(state), numbers(seed))) return '';
  const params = new URLSearchParams();
  params.set('L', String(state.L));
  params.set('E', String(state.E));
  params.set('H', String(state.H));
  for (const m of MATRICES) params.set(m, numberText(state[m].flat()));
  if (state.bias !== null) BIASES.forEach((b, k) => params.set(b, numberText(state.bias['qkvo'[k]])));
  if (state.causal) params.set('causal', '1');
  return params.toString();
}

/** A patch for the Walkthrough's update() from URL parameters. */
export function decodeWalkthroughState(query) {
  const params = new URLSearchParams(query);
  const known = ['L', 'E', 'H', ...MATRICES, ...BIASES, 'causal'];
  for (const [name] of params) {
    if (!known.includes(name)) failParam(name, `unknown (the Walkthrough's are ${known.join(', ')})`);
    if (params.getAll(name).length > 1) failParam(name, 'given twice');
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
      failParam(m, `expected ${rows} x ${E} = ${rows * E} numbers, got ${flat.length}`);
    }
    patch[m] = Array.from({ length: rows }, (_, i) => flat.slice(i * E, (i + 1) * E));
  }
  const given = BIASES.filter((b) => params.has(b));
  if (given.length > 0) {
    if (given.length !== 4) failParam(BIASES.find((b) => !params.has(b)), 'missing (biases come as bq, bk, bv and bo together)');
    patch.bias = Object.fromEntries(BIASES.map((b, k) => ['qkvo'[k], numberList(params.get(b), b)]));
  } else {
    patch.bias = null;
  }
  patch.causal = params.has('causal') ? boolOf(params.get('causal'), 'causal') : false;
  return patch;
}
