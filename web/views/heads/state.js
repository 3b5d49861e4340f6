// The Heads view's public state: what the view's update() (a widget's setState()) takes,
// getState() returns, the headscope-change event carries and the URL hash holds (url-state.js).
// Pure functions (no DOM), so the URL round trip is property-tested in Node
// (tests/js/view-state.test.js).
//
//   {
//     text: string                  the sentence or log line
//     heads: 1 | 2 | 4 | 8 | 16     head count (head dim 64 / heads)
//     weights: 'presets' | 'random' hand-built heads, or PyTorch's initialisation from `seed`
//     presets: string[]             one preset per head (PRESET_NAMES), length `heads`
//     seed: integer >= 0            seeds the random weights and the presets' noise
//     sharpness: number in [0, 12]  logits between a preset head's intended key and the others
//     causal: boolean               causal attention mask
//     padded: number[]              token positions (1-based) masked as keys (key_padding_mask)
//     off: number[]                 heads (1-based) switched off: their output removed
//     show: number[] | null         heads (1-based) shown in the grid and the lines; null: all.
//                                   Hiding a head only hides it; it keeps contributing.
//     view: 'heads' | 'average'     per-head weights, or PyTorch's averaged weights
//     kvHeads, alibi, window, ropeDims, ropeLayout, ropeBase
//                                   the attention variant (variant-state.js: K/V heads, ALiBi, a
//                                   sliding window, RoPE); their defaults are no variant
//   }
//
// Heads and tokens are 1-based everywhere a reader sees them (Head 1 is the first), so they are
// 1-based here too. A loaded case's state is the case itself (setCase), not part of this state.
import { HeadscopeError } from '../../lib/errors.js';
import { quoteInput } from '../../lib/tensor.js';
import { DEFAULT_TEXT } from './tokens.js';
import { ALL_PRESETS, defaultPresets } from './presets.js';
import { applyVariants, defaultVariants, VARIANT_KEYS } from './variant-state.js';

export const HEAD_COUNTS = [1, 2, 4, 8, 16];
export const PRESET_NAMES = ALL_PRESETS;
export const MAX_SHARPNESS = 12;
/** Longest text the state accepts (the view tokenizes at most tokens.js's MAX_TOKENS of it). */
export const MAX_TEXT_LENGTH = 2000;

export function defaultHeadsState() {
  return {
    text: DEFAULT_TEXT, heads: 4, weights: 'presets', presets: defaultPresets(4), seed: 1,
    sharpness: 6, causal: false, padded: [], off: [], show: null, view: 'heads', ...defaultVariants(4),
  };
}

const KEYS = ['text', 'heads', 'weights', 'presets', 'seed', 'sharpness', 'causal', 'padded', 'off', 'show', 'view',
  ...VARIANT_KEYS];

function fail(where, message) {
  throw new HeadscopeError('INVALID_ARGUMENT', `${where}: ${message}`);
}

function describe(v) {
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
  if (Array.isArray(v)) return 'an array';
  if (v === null) return 'null';
  return typeof v === 'object' ? 'an object' : String(v);
}

/** Sorted, de-duplicated 1-based positions in [1, max]. */
function positions(value, where, max, what) {
  if (!Array.isArray(value)) fail(where, `expected an array of ${what} (1-based), got ${describe(value)}`);
  if (value.length > 4096) fail(where, `expected at most 4096 entries, got ${value.length}`);
  const out = new Set();
  for (let k = 0; k < value.length; k++) {
    const v = value[k];
    if (!Number.isInteger(v) || v < 1 || v > max) {
      fail(`${where}[${k}]`, `expected an integer in [1, ${max}] (${what}, 1-based), got ${describe(v)}`);
    }
    out.add(v);
  }
  return [...out].sort((a, b) => a - b);
}

/**
 * `current` with the fields of `patch` applied, every field checked: a HeadscopeError names the
 * first bad field (`${where}.heads`...) and nothing is applied. A new head count keeps the presets,
 * switched-off and shown heads that still exist (new heads get the default presets).
 * @param {object} patch @param {object} current a full state (defaultHeadsState() shape)
 * @param {string} [where] how the error names the argument
 * @param {{ liveHeads?: number }} [options] liveHeads: the head count `off` and `show` refer to
 *   when it is not the state's own (a loaded case's heads)
 */
export function applyHeadsState(patch, current, where = 'setState: state', { liveHeads } = {}) {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) {
    fail(where, `expected an object with any of ${KEYS.join(', ')}, got ${describe(patch)}`);
  }
  // Read each field once (a getter or a Proxy answers once), then check.
  const p = {};
  for (const key of Object.keys(patch)) {
    if (!KEYS.includes(key)) fail(`${where}.${quoteInput(key)}`, `unknown field (expected any of ${KEYS.join(', ')})`);
    p[key] = patch[key];
  }
  const next = { ...current };
  if ('text' in p) {
    if (typeof p.text !== 'string') fail(`${where}.text`, `expected a string, got ${describe(p.text)}`);
    // Lone surrogates cannot be typed, and would not survive a URL (they become U+FFFD).
    if (!p.text.isWellFormed()) fail(`${where}.text`, 'expected well-formed Unicode text (it has a lone surrogate)');
    if (p.text.length > MAX_TEXT_LENGTH) fail(`${where}.text`, `expected at most ${MAX_TEXT_LENGTH} characters, got ${p.text.length}`);
    next.text = p.text;
  }
  if ('heads' in p) {
    if (!HEAD_COUNTS.includes(p.heads)) fail(`${where}.heads`, `expected one of ${HEAD_COUNTS.join(', ')}, got ${describe(p.heads)}`);
    if (p.heads !== current.heads) {
      const defaults = defaultPresets(p.heads);
      // One head cannot do five jobs one at a time: its default is the blend of them.
      next.presets = p.heads === 1 ? defaults : defaults.map((d, h) => (h < current.presets.length && current.heads !== 1 ? current.presets[h] : d));
      next.off = current.off.filter((h) => h <= p.heads);
      next.show = current.show === null ? null : current.show.filter((h) => h <= p.heads);
    }
    next.heads = p.heads;
  }
  if ('weights' in p) {
    if (p.weights !== 'presets' && p.weights !== 'random') fail(`${where}.weights`, `expected 'presets' or 'random', got ${describe(p.weights)}`);
    next.weights = p.weights;
  }
  if ('presets' in p) {
    if (!Array.isArray(p.presets) || p.presets.length !== next.heads) {
      fail(`${where}.presets`, `expected an array of ${next.heads} preset names (one per head), got ${describe(p.presets)}` +
        `${Array.isArray(p.presets) ? ` of ${p.presets.length}` : ''}`);
    }
    const presets = [...p.presets];
    presets.forEach((name, h) => {
      if (!PRESET_NAMES.includes(name)) fail(`${where}.presets[${h}]`, `expected one of ${PRESET_NAMES.join(', ')}, got ${describe(name)}`);
    });
    next.presets = presets;
  }
  if ('seed' in p) {
    if (!Number.isSafeInteger(p.seed) || p.seed < 0 || p.seed > 0xffffffff) {
      fail(`${where}.seed`, `expected an integer in [0, 4294967295], got ${describe(p.seed)}`);
    }
    next.seed = p.seed;
  }
  if ('sharpness' in p) {
    if (typeof p.sharpness !== 'number' || !(p.sharpness >= 0 && p.sharpness <= MAX_SHARPNESS)) {
      fail(`${where}.sharpness`, `expected a number in [0, ${MAX_SHARPNESS}], got ${describe(p.sharpness)}`);
    }
    next.sharpness = p.sharpness + 0;  // -0 is 0
  }
  if ('causal' in p) {
    if (typeof p.causal !== 'boolean') fail(`${where}.causal`, `expected true or false, got ${describe(p.causal)}`);
    next.causal = p.causal;
  }
  if ('padded' in p) next.padded = positions(p.padded, `${where}.padded`, 4096, 'token positions');
  const heads = liveHeads ?? next.heads;
  if ('off' in p) next.off = positions(p.off, `${where}.off`, heads, 'heads');
  if ('show' in p) next.show = p.show === null ? null : positions(p.show, `${where}.show`, heads, 'heads');
  if ('view' in p) {
    if (p.view !== 'heads' && p.view !== 'average') fail(`${where}.view`, `expected 'heads' or 'average', got ${describe(p.view)}`);
    next.view = p.view;
  }
  for (const k of VARIANT_KEYS) if (k in p) next[k] = p[k];
  applyVariants(p, current, next, where, fail);
  return next;
}

/** A deep copy (arrays copied), safe to hand out. */
export function copyHeadsState(s) {
  return { ...s, presets: [...s.presets], padded: [...s.padded], off: [...s.off], show: s.show === null ? null : [...s.show] };
}
