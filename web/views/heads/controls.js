// The Heads view's controls: the sentence, the weights, head count, seed, sharpness, causal mask,
// the view mode, the attention variant (variants.js), the batch element of a case, and the
// key-padding chips' box. Built once
// (buildControls); syncControls() shows the state in them and hides what the options and the mode
// leave out; listenToControls() turns their events into patches of the state.
import { checkbox, el, focusedIn, labelled } from '../common/dom.js';
import { tokenize } from './tokens.js';
import { buildVariants, listenToVariants, syncVariants } from './variants.js';

/** @param { headCounts: number[], embedDim: number } o @returns the elements, by name */
export function buildControls({ headCounts, embedDim }) {
  const controls = el('form', 'hs-controls hs-heads-controls');
  controls.addEventListener('submit', (e) => e.preventDefault());
  const text = el('input', 'hs-heads-text');
  text.type = 'text';
  text.name = 'text';
  text.spellcheck = false;
  text.autocomplete = 'off';
  const textLabel = labelled('Sentence or log line', text, 'hs-heads-text-label');
  const tokenNote = el('span', 'hs-note hs-heads-token-note');
  tokenNote.setAttribute('aria-live', 'polite');
  const caseNote = el('span', 'hs-note hs-heads-case-note');

  const source = el('select');
  source.name = 'weights';
  for (const [value, label] of [['presets', 'Presets (built by hand)'], ['random', 'Seeded random (PyTorch init)'],
    ['case', 'Loaded case']]) {
    const o = el('option', '', label);
    o.value = value;
    source.append(o);
  }
  source.querySelector('option[value="case"]').disabled = true;

  const heads = el('select');
  heads.name = 'heads';
  for (const n of headCounts) {
    const o = el('option', '', `${n} (head dim ${embedDim / n})`);
    o.value = String(n);
    heads.append(o);
  }
  const seed = el('input', 'hs-heads-seed');
  seed.type = 'number';
  seed.name = 'seed';
  seed.min = '0';
  seed.step = '1';
  const sharpness = el('input');
  sharpness.type = 'range';
  sharpness.name = 'sharpness';
  sharpness.min = '0';
  sharpness.max = '12';
  sharpness.step = '0.5';
  const sharpnessValue = el('output', 'hs-heads-sharpness-value');
  const sharpnessLabel = labelled('Sharpness', sharpness);
  sharpnessLabel.append(sharpnessValue);
  const { input: causal, label: causalLabel } = checkbox('causal', 'Causal mask');

  const viewGroup = el('fieldset', 'hs-heads-viewmode');
  viewGroup.append(el('legend', '', 'Weights shown'));
  const viewRadios = {};
  for (const [value, label] of [['heads', 'per head'], ['average', 'averaged (PyTorch default)']]) {
    const r = el('input');
    r.type = 'radio';
    r.name = 'view';
    r.value = value;
    viewRadios[value] = r;
    const l = el('label');
    l.append(r, label);
    viewGroup.append(l);
  }
  const batch = el('select');
  batch.name = 'batch';
  const batchLabel = labelled('Batch element', batch);
  batchLabel.hidden = true;

  const row1 = el('div', 'hs-heads-row');
  row1.append(textLabel, tokenNote, caseNote);
  const row2 = el('div', 'hs-heads-row');
  const sourceLabel = labelled('Weights', source);
  const headsLabel = labelled('Heads', heads);
  const seedLabel = labelled('Seed', seed);
  row2.append(sourceLabel, headsLabel, seedLabel, sharpnessLabel, causalLabel, viewGroup, batchLabel);
  const variants = buildVariants();
  const row3 = el('div', 'hs-heads-row');
  row3.append(variants.box);
  controls.append(row1, row2, row3, variants.note);

  const chipsBox = el('div', 'hs-heads-chips-box');
  const chipsTitle = el('p', 'hs-note', 'Key padding: click a token to mask it as a key (key_padding_mask); ' +
    'no query may attend to it.');
  const chips = el('div', 'hs-heads-chips');
  chips.setAttribute('role', 'group');
  chips.setAttribute('aria-label', 'Tokens: press to pad (mask as a key)');
  chipsBox.append(chipsTitle, chips);
  return { controls, text, textLabel, tokenNote, caseNote, source, sourceLabel, heads, headsLabel, seed, seedLabel, sharpness, sharpnessValue, sharpnessLabel, causal, causalLabel, viewGroup, viewRadios, batch, batchLabel, row1, row2, row3, variants, chipsBox, chips };
}

/**
 * Shows the state in the controls (also after update()); hides what the `hide` option and
 * read-only mode leave out, and in case mode the sentence's controls (a case has its own tokens,
 * heads, weights and variant). `batched`: the shown case has a batch (its element is a control);
 * `slopes`: the engine's ALiBi slopes of the shown run (the variant's note).
 */
export function syncControls(c, state, { hidden, readonly, batched, view, slopes = null }) {
  const caseMode = state.source === 'case';
  c.source.value = state.source;
  if (c.text.value !== state.text) c.text.value = state.text;
  c.heads.value = String(state.numHeads);
  if (focusedIn(view) !== c.seed) c.seed.value = String(state.seed);
  c.sharpnessValue.textContent = String(state.sharpness);
  c.causal.checked = state.causal;
  c.viewRadios[state.view].checked = true;
  const off = (name) => hidden.has(name) || (readonly && name !== 'view');
  c.textLabel.hidden = caseMode || off('text');
  c.tokenNote.hidden = caseMode;
  c.caseNote.hidden = !caseMode;
  c.sourceLabel.hidden = off('weights');
  c.headsLabel.hidden = caseMode || off('heads');
  c.seedLabel.hidden = caseMode || off('seed');
  c.sharpnessLabel.hidden = caseMode || state.source === 'random' || off('sharpness');
  c.causalLabel.hidden = caseMode || off('causal');
  c.viewGroup.hidden = off('view');
  c.chipsBox.hidden = caseMode || off('padding');
  c.batchLabel.hidden = !(caseMode && batched) || off('batch');
  c.variants.box.hidden = caseMode || off('variants');
  c.variants.note.hidden = c.variants.box.hidden;
  if (!caseMode) syncVariants(c.variants, state, { headsSelect: c.heads, slopes, view });
  const rows = [c.row1, c.row2, c.row3];
  const rowsShown = rows.map((r) => [...r.children].some((child) => !child.hidden));
  rows.forEach((r, k) => { r.hidden = !rowsShown[k]; });
  c.controls.hidden = !rowsShown.some(Boolean);
}

/**
 * The controls' events: `edit(patch)` applies a patch of the public state (and recomputes);
 * the batch element is view state only (`schedule(true)` recomputes).
 * @param {{ vs: ReturnType<import('./view-state.js').createViewState>, edit: (patch: object) => void,
 *   schedule: (compute: boolean) => void }} o
 */
export function listenToControls(c, { vs, edit, schedule }) {
  const { state } = vs;
  c.text.addEventListener('input', () => {
    // New tokens: the padded positions and the pin meant other tokens.
    const before = tokenize(state.text).tokens.join('\u0000');
    const after = tokenize(c.text.value).tokens.join('\u0000');
    if (before !== after) state.pinned = null;
    edit(before !== after ? { text: c.text.value, padded: [] } : { text: c.text.value });
  });
  c.source.addEventListener('change', () => {
    if (c.source.value === 'case') return;
    state.pinned = null;
    // Back to the sentence: its own head count and presets, every head on.
    if (state.source === 'case') vs.leaveCase(c.source.value);
    edit({ weights: c.source.value, off: [], show: null });
  });
  c.heads.addEventListener('change', () => {
    edit({ heads: Number(c.heads.value) });
  });
  c.seed.addEventListener('input', () => {
    const v = Number(c.seed.value);
    if (c.seed.value.trim() === '' || !Number.isInteger(v) || v < 0 || v > 0xffffffff) {
      c.seed.setAttribute('aria-invalid', 'true');
      return;
    }
    c.seed.removeAttribute('aria-invalid');
    edit({ seed: v });
  });
  c.sharpness.addEventListener('input', () => {
    edit({ sharpness: Number(c.sharpness.value) });
  });
  c.causal.addEventListener('change', () => {
    edit({ causal: c.causal.checked });
  });
  for (const r of Object.values(c.viewRadios)) {
    r.addEventListener('change', () => {
      // The averaged view needs PyTorch's averaged weights: a compute (see Engine.run).
      if (r.checked) edit({ view: r.value });
    });
  }
  listenToVariants(c.variants, { edit });
  c.batch.addEventListener('change', () => {
    state.batch = Number(c.batch.value) - 1;
    state.pinned = null;
    schedule(true);
  });
}
