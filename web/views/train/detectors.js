// The Train view's detectors table: each head's scores on the held-out rows for the head
// detectors of TransformerLens (previous-token, first-token, same-token, induction), as bars.
import { columnHeads, el } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';
import { DETECTORS } from '../../lib/detectors.js';

export const DETECTOR_LABELS = { 'previous-token': 'previous token', 'first-token': 'first token', 'same-token': 'same token', induction: 'induction' };

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
  for (const d of DETECTORS) {
    const v = layerScores[d]?.[h] ?? 0;
    if (v > top) [best, top] = [d, v];
  }
  return best;
}

/** @param {Element} table @param {object} state the setup (layers, heads) @param {object[]} scores per layer */
export function drawDetectors(table, state, scores) {
  const head = columnHeads(['head', ...DETECTORS.map((d) => DETECTOR_LABELS[d])]);
  const rows = [];
  for (let l = 0; l < state.layers; l++) {
    for (let h = 0; h < state.heads; h++) {
      const tr = el('tr');
      const th = el('th', '', `L${l} H${h + 1}`);
      th.scope = 'row';
      tr.append(th);
      for (const d of DETECTORS) {
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
  const caption = el('caption', 'hs-note', 'Mean attention to the key each detector names (TransformerLens\'s head detectors): ' +
    '1 means the head does exactly that.');
  table.replaceChildren(caption, thead, tbody);
}

