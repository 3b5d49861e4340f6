// The Heads view's attention-variant controls (K/V heads, ALiBi, window, RoPE dims, layout and
// base: variant-state.js has the fields and their rules) and the note that says in a line per
// variant what it changes. Built once (buildVariants); syncVariants() shows the state and greys
// out the head counts the variant cannot take, with the reason; listenToVariants() turns the
// controls' events into patches of the public state.
import { checkbox, el, focusedIn, labelled, setOptions, setText } from '../common/dom.js';
import { headDim, headsBlocked, kvHeadChoices, ropeDimChoices, ROPE_LAYOUTS, WINDOW_CHOICES } from './variant-state.js';

const kvText = (heads) => (g) => `${g}${g === heads ? ' (MHA)' : g === 1 ? ' (MQA)' : ' (GQA)'}`;
const offOr = (v) => (v === 0 ? 'off' : String(v));
const layoutText = (l) => (l === 'half' ? 'half (GPT-NeoX, LLaMA)' : 'interleaved (RoFormer, GPT-J)');

const select = (name, values, text) => {
  const s = el('select');
  s.name = name;
  setOptions(s, values, text);
  return s;
};

/** The fieldset of the variant's controls and its note: the elements, by name. */
export function buildVariants() {
  const box = el('fieldset', 'hs-heads-viewmode hs-heads-variants');
  box.append(el('legend', '', 'Attention variant'));
  const kvHeads = select('kvHeads', kvHeadChoices(4), kvText(4));
  kvHeads.title = 'Key/value heads: each serves heads / K/V heads query heads (grouped-query attention; 1: multi-query)';
  const { input: alibi, label: alibiLabel } = checkbox('alibi', 'ALiBi');
  alibi.title = 'Attention with linear biases: each head subtracts slope × distance from its scores';
  const window = select('window', WINDOW_CHOICES, offOr);
  window.title = 'Sliding-window attention: the keys a query sees (with the causal mask: itself and the window - 1 before it)';
  const ropeDims = select('ropeDims', ropeDimChoices(16), offOr);
  ropeDims.title = 'Rotary position embeddings: the dims of each head of q and k turned by position';
  const ropeLayout = select('ropeLayout', ROPE_LAYOUTS, layoutText);
  const ropeBase = el('input', 'hs-heads-rope-base');
  Object.assign(ropeBase, { type: 'number', name: 'ropeBase', min: '1', step: 'any' });
  const labels = {
    kvHeads: labelled('K/V heads', kvHeads), alibi: alibiLabel, window: labelled('Window', window),
    ropeDims: labelled('RoPE dims', ropeDims), ropeLayout: labelled('RoPE layout', ropeLayout),
    ropeBase: labelled('RoPE base', ropeBase),
  };
  box.append(...Object.values(labels));
  const note = el('p', 'hs-note hs-prose hs-heads-variant-note');
  note.setAttribute('aria-live', 'polite');
  return { box, note, labels, kvHeads, alibi, window, ropeDims, ropeLayout, ropeBase };
}

/**
 * Shows the live state (view-state.js) in the controls; `headsSelect`'s counts the variant
 * cannot take are disabled with the reason; `slopes`: the engine's ALiBi slopes of the shown run.
 */
export function syncVariants(v, state, { headsSelect, slopes, view }) {
  const H = state.numHeads;
  setOptions(v.kvHeads, kvHeadChoices(H), kvText(H));
  setOptions(v.window, [...new Set([...WINDOW_CHOICES, state.window])].sort((a, b) => a - b), offOr);
  setOptions(v.ropeDims, [...new Set([...ropeDimChoices(headDim(H)), state.ropeDims])].sort((a, b) => a - b), offOr);
  v.kvHeads.value = String(state.kvHeads);
  v.alibi.checked = state.alibi;
  v.window.value = String(state.window);
  v.ropeDims.value = String(state.ropeDims);
  v.ropeLayout.value = state.ropeLayout;
  if (focusedIn(view) !== v.ropeBase) {
    v.ropeBase.value = String(state.ropeBase);
    v.ropeBase.removeAttribute('aria-invalid');
  }
  v.labels.ropeLayout.hidden = state.ropeDims === 0;
  v.labels.ropeBase.hidden = state.ropeDims === 0;
  const blocked = [];
  for (const o of headsSelect.options) {
    const reason = headsBlocked(state, Number(o.value));
    o.disabled = reason !== null;
    o.title = reason ?? '';
    if (reason !== null) blocked.push(`${o.value} (${reason})`);
  }
  const lines = describeVariant(state, slopes);
  if (blocked.length) lines.push(`Head counts not offered with this variant: ${blocked.join('; ')}.`);
  setText(v.note, lines.join(' '));
}

/** What the variant changes, a sentence per variant on (the engine's slopes for ALiBi). */
export function describeVariant(s, slopes) {
  const H = s.numHeads;
  const G = s.kvHeads;
  const built = s.source !== 'random';
  const lines = [];
  if (G < H) {
    lines.push(`${H / G} query heads share each K/V head (${G} for ${H}${G === 1 ? ': multi-query' : ': grouped-query'}): ` +
      `the K and V projections and a KV cache are ${H / G}x smaller.` +
      (built ? ' Each shared key and value is the mean of its group\'s (as the GQA paper converts a multi-head layer), ' +
        'so the hand-built heads of a group now look for the same keys.' : ''));
  }
  if (s.alibi) {
    const shown = (slopes ?? []).map(String).join(', ');
    lines.push('ALiBi: head h subtracts slope_h × |i − j| from each score (i − j: how far key j is from query i)' +
      `${shown ? ` (slopes ${shown})` : ''}: near keys gain, most in Head 1.`);
  }
  if (s.window > 0) {
    const w = s.window;
    lines.push(s.causal
      ? `Sliding window of ${w}: query i sees only the keys i − ${w - 1} … i; every weight outside the band is 0.`
      : `Sliding window of ${w} without the causal mask: query i sees the keys with |i − j| < ${w} (up to ${2 * w - 1}); ` +
        'every weight outside the band is 0.');
  }
  if (s.ropeDims > 0) {
    const pairs = s.ropeLayout === 'half' ? '(i, i + r/2)' : '(2i, 2i + 1)';
    lines.push(`RoPE: ${s.ropeDims} of each head's ${headDim(H)} dims of q and k turn by position (pairs ${pairs}, ` +
      `base ${s.ropeBase}), so a score depends on how far apart two tokens are, not where.` +
      (built ? ' The hand-built heads were written without it, so their patterns move.' : ''));
  }
  if (lines.length === 0) lines.push('No variant: plain multi-head attention, as torch.nn.MultiheadAttention computes it.');
  return lines;
}

/** The controls' events as patches of the public state (`edit`, view.js's). */
export function listenToVariants(v, { edit }) {
  v.kvHeads.addEventListener('change', () => edit({ kvHeads: Number(v.kvHeads.value) }));
  v.alibi.addEventListener('change', () => edit({ alibi: v.alibi.checked }));
  v.window.addEventListener('change', () => edit({ window: Number(v.window.value) }));
  v.ropeDims.addEventListener('change', () => edit({ ropeDims: Number(v.ropeDims.value) }));
  v.ropeLayout.addEventListener('change', () => edit({ ropeLayout: v.ropeLayout.value }));
  v.ropeBase.addEventListener('input', () => {
    const b = Number(v.ropeBase.value);
    // A base being typed ("1e") is not applied; the field says it is not a base yet.
    if (v.ropeBase.value.trim() === '' || !Number.isFinite(b) || b <= 0) {
      v.ropeBase.setAttribute('aria-invalid', 'true');
      return;
    }
    v.ropeBase.removeAttribute('aria-invalid');
    edit({ ropeBase: b });
  });
}
