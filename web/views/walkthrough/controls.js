// The Walkthrough's controls: the presets (the seed's example, its learned-looking W_Q, seeded
// random numbers, identity projections) with the random seed, and the sizes (L, E, H). Each
// change is a new state, applied as a structural one (the matrices change shape).
import { el } from '../common/dom.js';
import {
  MAX_SIZE, divisors, headDim, identityState, learnedLookingState, nearestDivisor, randomState, resizeState,
  seedState,
} from './model.js';

function option(value, text, selected) {
  const o = el('option', '', text);
  o.value = String(value);
  o.selected = selected;
  return o;
}

// A label whose text comes before its control.
function labelled(text, control) {
  const label = el('label', '', text);
  label.append(control);
  return label;
}

/**
 * @param {{ state: () => object, apply: (next: object) => void, onStatus: (text: string) => void }} o
 *   state: the current model.js state; apply: shows a new one (structural)
 * @returns {{ presets: Element, sizes: Element, showSizes(state: object): void }}
 */
export function buildControls({ state, apply, onStatus }) {
  let randomSeed = 1;
  const presets = el('div', 'hs-controls hs-wt-presets');
  presets.setAttribute('role', 'group');
  presets.setAttribute('aria-label', 'Presets');
  const presetLabel = el('span', 'hs-wt-control-label', 'Numbers:');
  const presetButtons = [
    ['Seed example', 'The seed article\'s 3 x 4 example: heads pick dims 0-1 and 2-3', () => seedState()],
    ['Learned-looking W_Q', 'The seed\'s example with its learned-looking W_Q for head 1',
      () => learnedLookingState()],
    ['Seeded random', 'Random numbers from the seed below, at the current sizes',
      () => randomState(state(), randomSeed, { withBias: state().bias !== null })],
    ['Identity', 'Every projection the identity, at the current sizes; X kept', () => identityState(state())],
  ].map(([text, description, make]) => {
    const b = el('button', '', text);
    b.type = 'button';
    b.title = description;
    b.addEventListener('click', () => {
      apply(make());
      onStatus(`Walkthrough: ${state().source}.`);
    });
    return b;
  });
  const seedInput = el('input', 'hs-wt-seed');
  seedInput.type = 'number';
  seedInput.min = '0';
  seedInput.step = '1';
  seedInput.value = String(randomSeed);
  seedInput.addEventListener('change', () => {
    const v = Number(seedInput.value);
    if (Number.isInteger(v) && v >= 0) {
      randomSeed = v;
      seedInput.removeAttribute('aria-invalid');
    } else {
      seedInput.setAttribute('aria-invalid', 'true');
    }
  });
  presets.append(presetLabel, ...presetButtons, labelled('Random seed', seedInput));

  const sizes = el('div', 'hs-controls hs-wt-sizes');
  sizes.setAttribute('role', 'group');
  sizes.setAttribute('aria-label', 'Sizes');
  const tokensSelect = el('select');
  const embedSelect = el('select');
  const headsSelect = el('select');
  for (let n = 1; n <= MAX_SIZE; n++) {
    tokensSelect.append(option(n, String(n), false));
    embedSelect.append(option(n, String(n), false));
  }
  const headDimText = el('span', 'hs-wt-headdim');
  sizes.append(labelled('Tokens L', tokensSelect), labelled('Embedding size E', embedSelect),
    labelled('Heads H', headsSelect), headDimText);
  const resize = (change) => {
    const { state: next, droppedMasks } = resizeState(state(), change, randomSeed);
    apply(next);
    const s = state();
    onStatus(`Walkthrough: ${s.L} tokens x ${s.E} dims, ${s.H} head${s.H > 1 ? 's' : ''}` +
      `${droppedMasks ? '; the case\'s masks no longer fit and were dropped' : ''}.`);
  };
  tokensSelect.addEventListener('change', () => resize({ L: Number(tokensSelect.value) }));
  embedSelect.addEventListener('change', () => {
    const E = Number(embedSelect.value);
    resize({ E, H: nearestDivisor(E, state().H) });
  });
  headsSelect.addEventListener('change', () => resize({ H: Number(headsSelect.value) }));

  /** The size controls as the state's sizes (the heads: the divisors of E). */
  function showSizes({ L, E, H }) {
    tokensSelect.value = String(L);
    embedSelect.value = String(E);
    const options = divisors(E);
    if (headsSelect.options.length !== options.length ||
        [...headsSelect.options].some((o, k) => Number(o.value) !== options[k])) {
      headsSelect.replaceChildren(...options.map((d) => option(d, String(d), d === H)));
    }
    headsSelect.value = String(H);
    headDimText.textContent = `d_k = E / H = ${headDim({ E, H })}`;
  }

  return { presets, sizes, showSizes };
}
