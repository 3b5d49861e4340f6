// The Heads view's controls: the sentence, the weights, head count, seed, sharpness, causal mask,
// the view mode, the batch element of a case, and the key-padding chips' box. Built once; the
// view's syncControls() shows the state in them and hides what its options and mode leave out.
import { checkbox, el, labelled } from '../common/dom.js';

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
  controls.append(row1, row2);

  const chipsBox = el('div', 'hs-heads-chips-box');
  const chipsTitle = el('p', 'hs-note', 'Key padding: click a token to mask it as a key (key_padding_mask); ' +
    'no query may attend to it.');
  const chips = el('div', 'hs-heads-chips');
  chips.setAttribute('role', 'group');
  chips.setAttribute('aria-label', 'Tokens: press to pad (mask as a key)');
  chipsBox.append(chipsTitle, chips);
  return { controls, text, textLabel, tokenNote, caseNote, source, sourceLabel, heads, headsLabel, seed, seedLabel, sharpness, sharpnessValue, sharpnessLabel, causal, causalLabel, viewGroup, viewRadios, batch, batchLabel, row1, row2, chipsBox, chips };
}
