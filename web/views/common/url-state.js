// A view's state in a URL hash: `#heads?text=a+b&heads=2&off=2`, `#walkthrough?L=3&E=4&H=2&x=...`,
// `#train?task=induction&steps=300`. The generic part: the hash's view and query, the readers and
// writers of one parameter, and a table-driven codec (encodeParams / decodeParams) that the views'
// own url-state.js modules (heads/, walkthrough/, train/) describe their fields with. Encode then
// decode gives the same state back, exactly (tests/js/view-state.test.js checks that over random
// states): numbers are written as JavaScript's shortest round-trip decimal (String(v)), so no
// digit is lost.
//
// A decoder returns a patch for the view's update(), which checks every value; a parameter that is
// not a field, is given twice, or is not even of the field's kind, is an error naming it.
import { HeadscopeError } from '../../lib/errors.js';
import { quoteInput } from '../../lib/tensor.js';

/**
 * Throws the HeadscopeError of a bad URL parameter. (The parameter's name is the link's text:
 * quoted, so a hostile link cannot make the message huge or break it over lines.)
 */
export function failParam(param, message) {
  throw new HeadscopeError('INVALID_ARGUMENT', `URL parameter ${quoteInput(param)}: ${message}`);
}

/** '1,2.5,-3' -> [1, 2.5, -3] ('' -> []); an item that is not a number is an error naming it. */
export const numberList = (text, param) => (text === '' ? [] : text.split(',').map((w, k) => {
  const v = Number(w);
  if (w.trim() === '' || Number.isNaN(v)) failParam(param, `item ${k + 1} (${JSON.stringify(w.slice(0, 20))}) is not a number`);
  return v;
}));
export const numberText = (list) => list.map((v) => String(v)).join(',');
export const boolText = (v) => (v ? '1' : '0');

/** '1' or 'true', '0' or 'false'; anything else is an error naming the parameter. */
export function boolOf(text, param) {
  if (text === '1' || text === 'true') return true;
  if (text === '0' || text === 'false') return false;
  return failParam(param, `expected 1 or 0, got ${JSON.stringify(text.slice(0, 20))}`);
}

/** A number; an empty or non-numeric text is an error naming the parameter. */
export function numberOf(text, param) {
  const v = Number(text);
  if (text.trim() === '' || Number.isNaN(v)) failParam(param, `expected a number, got ${JSON.stringify(text.slice(0, 20))}`);
  return v;
}

/** Whether two states' fields are the same (JSON-equal). */
export const sameValue = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/**
 * URL parameters (without the '#view?') of `state`'s fields, in the table's order:
 * `params` maps a field to { write(value) -> text, read(text, param) -> value }; `skip(name)`
 * leaves a field out (a default, say, to keep links short).
 */
export function encodeParams(params, state, skip = () => false) {
  const out = new URLSearchParams();
  for (const [name, { write }] of Object.entries(params)) {
    if (!skip(name)) out.set(name, write(state[name]));
  }
  return out.toString();
}

/**
 * A patch from URL parameters, each read by its field's `read`; a parameter that is not a field of
 * `params` (own keys only: 'constructor', '__proto__' or 'toString' are unknown, not inherited) or
 * is given twice is an error naming it. `view` names the view in the message ("the Heads view").
 */
export function decodeParams(query, params, view) {
  const patch = {};
  for (const [name, text] of new URLSearchParams(query)) {
    const spec = Object.hasOwn(params, name) ? params[name] : undefined;
    if (spec === undefined) failParam(name, `unknown (${view}'s are ${Object.keys(params).join(', ')})`);
    if (Object.hasOwn(patch, name)) failParam(name, 'given twice');
    patch[name] = spec.read(text, name);
  }
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
