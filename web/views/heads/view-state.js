// The Heads view's live state: the fields its parts read (0-based sets of heads and tokens, the
// hover and pin, the explained cell, the loaded case's batch element), and the conversion to and
// from the public state of state.js (1-based lists, what update() takes and getState() returns).
//
// While a case is shown, the sentence's own head count, presets and weights are kept aside (the
// public state keeps describing the sentence) and come back when the view returns to it. The
// attention variant's fields (variant-state.js) always describe the sentence's layer: a case
// brings its own config and options.
import { applyHeadsState, copyHeadsState } from './state.js';
import { defaultPresets } from './presets.js';
import { defaultVariants, VARIANT_KEYS } from './variant-state.js';

const DEFAULT_HEADS = 4;
const oneBased = (set) => [...set].map((k) => k + 1).sort((a, b) => a - b);

/**
 * @param {object} start  the starting public state (options.js)
 * @param {{ presetMenus: boolean, switches: boolean }} offers  what the parts offer (per-card
 *   preset menus, on/off boxes: the hide and readonly options)
 */
export function createViewState(start, { presetMenus, switches }) {
  const state = {
    source: 'presets',      // 'presets' | 'random' | 'case'
    text: '',
    numHeads: DEFAULT_HEADS,
    presets: defaultPresets(DEFAULT_HEADS),
    seed: 1,
    sharpness: 6,
    causal: false,
    padded: new Set(),      // key positions masked by key_padding_mask (0-based)
    ablated: new Set(),     // heads switched off (0-based): output removed, lines faded
    shown: null,            // null, or the heads (0-based) shown in the grid and the lines
    view: 'heads',          // 'heads' | 'average'
    ...defaultVariants(DEFAULT_HEADS),  // kvHeads, alibi, window, ropeDims, ropeLayout, ropeBase
    presetMenus,
    switches,
    hover: null,            // { side: 'query' | 'key', index }
    pinned: null,
    cell: null,             // { head (null: average), i, j }: the heatmap cell last explained
    batch: 0,               // the loaded case's batch element (0-based)
  };
  // The sentence's head count, presets and weights, kept while a case is shown.
  const sentence = { heads: start.heads, presets: start.presets, weights: 'presets' };

  /** The public state (state.js): a copy. */
  function publicState() {
    const inCase = state.source === 'case';
    return copyHeadsState({
      text: state.text, heads: inCase ? sentence.heads : state.numHeads,
      weights: inCase ? sentence.weights : state.source, presets: inCase ? sentence.presets : state.presets,
      seed: state.seed, sharpness: state.sharpness, causal: state.causal,
      padded: oneBased(state.padded), off: oneBased(state.ablated),
      show: state.shown === null ? null : oneBased(state.shown),
      view: state.view,
      ...Object.fromEntries(VARIANT_KEYS.map((k) => [k, state[k]])),
    });
  }

  function assign(s) {
    sentence.heads = s.heads;
    sentence.presets = s.presets;
    sentence.weights = s.weights;
    if (state.source !== 'case') {
      state.source = s.weights;
      state.numHeads = s.heads;
      state.presets = s.presets;
    }
    state.text = s.text;
    state.seed = s.seed;
    state.sharpness = s.sharpness;
    state.causal = s.causal;
    state.padded = new Set(s.padded.map((j) => j - 1));
    state.ablated = new Set(s.off.map((h) => h - 1));
    state.shown = s.show === null ? null : new Set(s.show.map((h) => h - 1));
    state.view = s.view;
    for (const k of VARIANT_KEYS) state[k] = s[k];
  }

  /** Applies a patch of the public state; a bad field throws (state.js) and nothing changes. */
  function apply(patch) {
    const liveHeads = state.source === 'case' ? state.numHeads : undefined;
    assign(applyHeadsState(patch, publicState(), 'setState: state', { liveHeads }));
  }

  /** A case of H heads is shown: every head on and shown, no pin, no explained cell. */
  function enterCase(H) {
    state.batch = 0;
    state.source = 'case';
    state.numHeads = H;
    state.ablated.clear();
    state.shown = null;
    state.pinned = null;
    state.cell = null;
  }

  /** Back to the sentence (with `weights`, default its own): its head count and presets. */
  function leaveCase(weights = sentence.weights) {
    state.source = weights;
    state.numHeads = sentence.heads;
    state.presets = sentence.presets;
  }

  assign(start);
  return { state, publicState, apply, enterCase, leaveCase };
}
