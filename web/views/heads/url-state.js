// The Heads view's state in a URL (`#heads?text=a+b&heads=2&off=2`): the state's fields as
// parameters (lists comma-separated, booleans 1/0, `show=all` for every head), only those that
// differ from the default state, which keeps links short. common/url-state.js has the codec.
import {
  boolOf, boolText, decodeParams, encodeParams, numberList, numberOf, numberText, sameValue,
} from '../common/url-state.js';
import { defaultHeadsState } from './state.js';

const same = (v) => v;
const HEADS_PARAMS = {
  text: { write: same, read: same },
  heads: { write: String, read: numberOf },
  weights: { write: same, read: same },
  presets: { write: (v) => v.join(','), read: (t) => (t === '' ? [] : t.split(',')) },
  seed: { write: String, read: numberOf },
  sharpness: { write: String, read: numberOf },
  causal: { write: boolText, read: boolOf },
  padded: { write: numberText, read: numberList },
  off: { write: numberText, read: numberList },
  show: { write: (v) => (v === null ? 'all' : numberText(v)), read: (t, p) => (t === 'all' ? null : numberList(t, p)) },
  view: { write: same, read: same },
  // The attention variant (variant-state.js), written only off its defaults: K/V heads only when
  // they are not the heads, the RoPE fields only with RoPE on.
  kvHeads: { write: String, read: numberOf },
  alibi: { write: boolText, read: boolOf },
  window: { write: String, read: numberOf },
  ropeDims: { write: String, read: numberOf },
  ropeLayout: { write: same, read: same },
  ropeBase: { write: String, read: numberOf },
};

/** The Heads view's state as URL parameters (without '#heads?'), default fields left out. */
export function encodeHeadsState(state) {
  const defaults = defaultHeadsState();
  // presets are written whenever the head count is: the defaults of another count differ.
  return encodeParams(HEADS_PARAMS, state, (name) => (name === 'kvHeads' ? state.kvHeads === state.heads
    : sameValue(state[name], defaults[name]) && !(name === 'presets' && state.heads !== defaults.heads)));
}

/** A patch for the Heads view's update() from URL parameters; an unknown parameter is an error. */
export function decodeHeadsState(query) {
  return decodeParams(query, HEADS_PARAMS, 'the Heads view');
}
