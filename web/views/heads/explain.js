// The Heads view's explanation box: what a hovered or focused heatmap cell holds, opened beside
// the cell (placeNear), and kept in step with new numbers after a recompute.
import { formatNumber } from '../common/numbers.js';
import { placeNear } from '../common/place.js';
import { describeCell, MAX_SHOWN } from './data.js';
import { headWeights } from './summaries.js';
import { EXPLAIN_HINT } from './skeleton.js';

/**
 * @param {{ explain: Element, view: Element }} dom  the box and the view it is placed in
 * @param {{ hidden: Set<string>, state: object }} o  hidden: the hide option ('explain': never
 *   opens); state: the live state (view-state.js), whose `cell` is the cell last explained
 */
export function createExplain({ explain, view }, { hidden, state }) {
  let anchor = null;

  /** Shows `line`, beside `at` when given (else beside the last anchor). */
  function show(line, at = undefined) {
    if (at !== undefined) anchor = at;
    explain.textContent = line;
    if (hidden.has('explain')) return;
    explain.hidden = false;
    if (anchor) placeNear(explain, anchor, view);
  }

  /** Cell (i, j) of `head` (null: the average); `remember`: it becomes the explained cell. */
  function cell(data, head, i, j, remember, at = null) {
    if (remember) state.cell = { head, i, j };
    if (!data) return;
    if (at) anchor = at;
    const values = head === null ? data.average : headWeights(data.weights, { h: head, H: data.H, L: data.L, S: data.S });
    let line = describeCell(data, head, i, j, values);
    if (head !== null) {
      const score = headWeights(data.scores, { h: head, H: data.H, L: data.L, S: data.S })[i * data.S + j];
      line += ` (score ${score === -Infinity ? '−∞: masked' : formatNumber(score, 3)})`;
    }
    show(line);
  }

  /**
   * After new numbers: the remembered cell's new line (the box stays as open or closed as it was),
   * or the hint (a line about numbers that are gone would be wrong).
   */
  function follow(data) {
    const c = state.cell;
    if (data && c && c.i < Math.min(data.L, MAX_SHOWN) && c.j < Math.min(data.S, MAX_SHOWN) && (c.head === null || c.head < data.H)) {
      const wasHidden = explain.hidden;
      cell(data, c.head, c.i, c.j, false);
      explain.hidden = wasHidden;
    } else {
      explain.textContent = EXPLAIN_HINT;
      explain.hidden = true;
    }
  }

  return { show, cell, follow, hide: () => { explain.hidden = true; } };
}
