// The Train view's state in a URL (`#train?task=induction&steps=300`): every field, numbers in
// their shortest round-trip form, booleans 1/0. A value that is not of its field's kind is passed
// on as it is, for applyTrainState to name (common/url-state.js has the codec). The variants'
// fields are left out at their defaults (kvHeads equal to heads, attnWindow 0, attnSinks off, the
// rotary fields' defaults: ropeLayout half, ropeBase 10000, ropeFraction 1), so a link made before
// they existed is the link of the same setting now, and decodes to it. So are the reader's view
// fields at theirs: off (the switched-off heads, `off=0.2,1.1`: layer.head, head 1-based, as the
// page names them L0 H2) only when some head is off, log only when on, and the reader's detectors
// (keywords, pattern: text) only when set.
import { boolText, decodeParams, encodeParams } from '../common/url-state.js';
import { ROPE_DEFAULTS, TRAIN_KEYS } from './state.js';

const TEXT = new Set(['task', 'norm', 'positions', 'ropeLayout', 'keywords', 'pattern']);
const readBoolean = (t) => (t === '1' || t === 'true' ? true : t === '0' || t === 'false' ? false : t);
const readNumber = (t) => (t.trim() === '' ? NaN : Number(t));
// 'l.h' items as [l, h]; an item of another form is passed on as its text, for applyTrainState to name.
const readOff = (t) => (t === '' ? [] : t.split(',').map((w) => (/^\d+\.\d+$/.test(w) ? w.split('.').map(Number) : w)));
const writeOff = (off) => off.map(([l, h]) => `${l}.${h}`).join(',');
const TRAIN_PARAMS = Object.fromEntries(TRAIN_KEYS.map((k) => [k,
  k === 'off' ? { write: writeOff, read: readOff }
    : k === 'mlp' || k === 'attnSinks' || k === 'log' ? { write: boolText, read: readBoolean }
    : TEXT.has(k) ? { write: String, read: (t) => t } : { write: String, read: readNumber }]));

/** The Train view's state as URL parameters (without '#train?'): every field but the variants' defaults. */
export function encodeTrainState(s) {
  return encodeParams(TRAIN_PARAMS, s, (k) => (k === 'kvHeads' && s.kvHeads === s.heads) || (k === 'attnWindow' && s.attnWindow === 0) ||
    (k === 'attnSinks' && s.attnSinks === false) || (k === 'off' && s.off.length === 0) || (k === 'log' && s.log === false) ||
    ((k === 'keywords' || k === 'pattern') && s[k] === '') ||
    (k in ROPE_DEFAULTS && s[k] === ROPE_DEFAULTS[k]));
}

/** A patch for the Train view's update() from URL parameters; an unknown parameter is an error. */
export function decodeTrainState(query) {
  return decodeParams(query, TRAIN_PARAMS, 'the Train view');
}
