// The written-out numbers of the walkthrough's explanations: each explanation writes a sum (or a
// softmax) with the numbers it was computed from, then its result. The numbers are written with
// just enough decimals that a hand check works: the written terms, computed exactly, give the
// written result at its written precision. Three decimals usually do; a term needs more when the
// rounding of several terms adds up (a long sum, an exp), and the result itself gets a fourth or
// fifth decimal in the rare case that it sits on a rounding boundary (the engine computes in
// float32).
import { formatNumber } from '../common/numbers.js';

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
export const writtenValue = (v, decimals) => (Number.isFinite(v) ? Number(formatTerm(v, decimals)) : v);

/**
 * The decimals to write: `dr` for the result, and per check (a function from "how a term is
 * written" to the value the written terms give) `dt[k]` for its terms, the fewest (from 3) with
 * which every check gives the written result.
 */
export function precisionFor(result, checks) {
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

export const factorAt = (d) => (v) => (v < 0 || Object.is(v, -0) ? `(${formatTerm(v, d)})` : formatTerm(v, d));
export const sumOf = (terms) => terms.join(' + ');

/** Reads trace tensors by index; `t.data` is row-major in `t.shape`. */
export function at(t, ...index) {
  let k = 0;
  for (let a = 0; a < index.length; a++) k = k * t.shape[a] + index[a];
  return t.data[k];
}

/** Σ_k w(a_k) * w(b_k) (+ w(bias)), as a check for precisionFor. */
export const dotCheck = (a, b, bias = null) => (w) => {
  let sum = 0;
  for (let k = 0; k < a.length; k++) sum += w(a[k]) * w(b[k]);
  return bias === null ? sum : sum + w(bias);
};
