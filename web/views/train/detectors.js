// The Train view's detectors table: each head's scores on the held-out rows for the head
// detectors of TransformerLens (previous-token, first-token, same-token, induction), and the
// reader's keyword and pattern detectors when set (state.keywords, state.pattern), as bars.
import { columnHeads, el, labelled } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';
import { ALL_DETECTORS, DETECTORS } from '../../lib/detectors.js';
import { mark, unmark } from './controls.js';

export const DETECTOR_LABELS = { 'previous-token': 'previous token', 'first-token': 'first token', 'same-token': 'same token', induction: 'induction',
  keyword: 'keyword', custom: 'your pattern' };

/** The detectors a layer's scores hold, in ALL_DETECTORS' order (the four, then the reader's). */
export const scoredDetectors = (layerScores) => ALL_DETECTORS.filter((d) => layerScores?.[d] !== undefined);

/** A head is labelled by a detector when it scores above this on it. */
export const LABEL_THRESHOLD = 0.4;

/**
 * The label of head h (0-based) of a layer: the detector it scores highest on (the first in
 * DETECTORS on a tie), when above LABEL_THRESHOLD; null otherwise. The heads grid's captions and
 * the history's "first gets its label" both read this rule.
 * @param {object} layerScores headScores' result for the layer
 */
export function headLabel(layerScores, h) {
  let best = null;
  let top = LABEL_THRESHOLD;
  for (const d of scoredDetectors(layerScores)) {
    const v = layerScores[d]?.[h] ?? 0;
    if (v > top) [best, top] = [d, v];
  }
  return best;
}

/** @param {Element} table @param {object} state the setup (layers, heads) @param {object[]} scores per layer */
export function drawDetectors(table, state, scores) {
  const shown = scoredDetectors(scores[0]);
  const head = columnHeads(['head', ...shown.map((d) => DETECTOR_LABELS[d])]);
  const rows = [];
  for (let l = 0; l < state.layers; l++) {
    for (let h = 0; h < state.heads; h++) {
      const tr = el('tr');
      const th = el('th', '', `L${l} H${h + 1}`);
      th.scope = 'row';
      tr.append(th);
      for (const d of shown) {
        const v = scores[l][d]?.[h] ?? 0;
        const td = el('td', 'hs-train-score');
        td.dataset.detector = d;
        const bar = el('span', 'hs-train-bar');
        bar.style.width = `${Math.max(0, Math.min(1, v)) * 100}%`;
        td.append(bar, el('span', 'hs-train-score-value', formatNumber(v, 2)));
        tr.append(td);
      }
      rows.push(tr);
    }
  }
  const thead = el('thead');
  thead.append(head);
  const tbody = el('tbody');
  tbody.append(...rows);
  // (The text in a block of its own, which the CSS holds to the scrolling box's width and left
  // edge: a caption is as wide as its table.)
  const caption = el('caption', 'hs-note');
  caption.append(el('span', 'hs-train-detectors-note', 'Mean attention to the key each detector names (TransformerLens\'s head detectors): ' +
    '1 means the head does exactly that.' + (shown.length > DETECTORS.length ? ' Keyword and your pattern: at the rows the task ' +
    'scores (where it has a target).' : '')));
  table.replaceChildren(caption, thead, tbody);
}


/**
 * The reader's two detectors, above the table: keyword tokens (words of the task's vocabulary)
 * and a pattern formula (i, j, ti, tj, T; web/lib/detectors.js compileFormula). A change applies
 * them through `apply` (the view's update: applyTrainState checks them and names the field).
 * @param {Element} root
 * @param {{ apply: (patch: { keywords: string, pattern: string }) => void }} o
 */
export function createDetectorInputs(root, { apply }) {
  const keywords = el('input', 'hs-train-detector-input');
  keywords.name = 'keywords';
  keywords.type = 'text';
  keywords.placeholder = 'e.g. DEBUG INFO WARN ERROR';
  keywords.spellcheck = false;
  const pattern = el('input', 'hs-train-detector-input');
  pattern.name = 'pattern';
  pattern.type = 'text';
  pattern.placeholder = 'e.g. j == i - 2';
  pattern.spellcheck = false;
  const read = () => apply({ keywords: keywords.value.trim().replace(/\s+/g, ' '), pattern: pattern.value.trim() });
  for (const input of [keywords, pattern]) {
    input.addEventListener('change', read);
    input.addEventListener('keydown', (e) => { if (e.key === 'Enter') read(); });
  }
  root.replaceChildren(
    labelled('Keyword detector (tokens, space-separated):', keywords, 'hs-train-detector-field'),
    labelled('Your pattern (key j, query i, tokens tj, ti):', pattern, 'hs-train-detector-field'),
    el('p', 'hs-note', 'Keyword: the attention on keys holding one of these tokens. Your pattern: the attention where the ' +
      'formula holds, e.g. j == i - 2 (two back), tj == ti && j < i (an earlier copy), tj == "ERROR". Both are measured ' +
      'at the rows the task scores, and a head scoring above 0.4 gets the label.'));
  // A refused field keeps what was typed, marked, until the two are accepted (as the form's).
  const refused = new Set();
  const fields = { keywords, pattern };
  return {
    /** Shows the state's keywords and pattern (unless the reader is typing in that field, or it was refused). */
    sync(state) {
      if (document.activeElement !== keywords && !refused.has(keywords)) keywords.value = state.keywords;
      if (document.activeElement !== pattern && !refused.has(pattern)) pattern.value = state.pattern;
    },
    /** The field `key` ('keywords' or 'pattern') was refused: marked, described by `message`. */
    markInvalid(key, message) {
      if (!fields[key]) return;
      refused.add(fields[key]);
      mark(fields[key], message);
    },
    accept() {
      for (const input of refused) unmark(input);
      refused.clear();
    },
  };
}
