// The Walkthrough's explanation box: how a hovered or focused computed cell was obtained
// (explain.js writes it out), opened beside the cell and never over it, with the cell and the
// cells it came from highlighted. It follows the cell when the page or a matrix scrolls, and
// when new numbers come (follow()).
import { placeNear } from '../common/place.js';
import { explainCell } from './model.js';
import { matrixName, stageOfName } from './specs.js';

/**
 * @param {object} w  the view's shared fields (view.js): state, trace, masks, tables, explained
 * @param {{ view: Element, explain: Element, hidden: Set<string> }} o  the view's box, the
 *   explanation box, and the hide option ('explain': no explanations)
 */
export function createExplainBox(w, { view, explain, hidden }) {
  let highlighted = [];    // cells marked as the explained one and its sources
  let placement = 0;

  function explainAt(stage, h, i, j) {
    if (!w.trace) return null;
    w.explained = { stage, h, i, j };
    const { text, sources } = explainCell(stage, { state: w.state, trace: w.trace, masks: w.masks }, h, i, j);
    highlight(matrixName(stage, h), i, j, sources);
    return text;
  }

  function explainedCell() {
    if (!w.explained) return null;
    const { stage, h, i, j } = w.explained;
    return w.tables.get(matrixName(stage, h))?.cell(i, j)?.td ?? null;
  }

  function schedulePlacement() {
    if (placement) return;
    placement = requestAnimationFrame(() => {
      placement = 0;
      const cell = explainedCell();
      if (cell && !explain.hidden && cell.isConnected) placeNear(explain, cell, view);
    });
  }

  /** Explains cell (i, j) of a stage's matrix for head h; `cellContent` is the cell on the page. */
  function show(stage, h, i, j, cellContent) {
    if (hidden.has('explain')) return;  // the hide option: no explanations
    const text = explainAt(stage, h, i, j);
    if (!text) return;
    explain.textContent = text;
    explain.hidden = false;
    placeNear(explain, cellContent.closest('td') ?? cellContent, view);
  }

  // The pointer left a matrix, or the focus left its cells: the explanation closes unless a
  // computed cell still has the focus (then it explains that one).
  function end() {
    queueMicrotask(() => {
      const focused = view.getRootNode().activeElement;
      if (focused?.classList?.contains('hs-cell-value') && view.contains(focused)) {
        const td = focused.closest('td');
        const { stage, h } = stageOfName(focused.closest('table').dataset.matrix);
        show(stage, h, Number(td.dataset.row), Number(td.dataset.col), focused);
        return;
      }
      hide();
    });
  }

  function hide() {
    w.explained = null;
    explain.hidden = true;
    highlight(null, 0, 0, []);
  }

  function highlight(target, i, j, sources) {
    for (const td of highlighted) td.classList.remove('hs-wt-source', 'hs-wt-target');
    highlighted = [];
    const mark = (name, r, c, className) => {
      for (const cell of w.tables.get(name)?.cellsIn(r, c) ?? []) {
        cell.td.classList.add(className);
        highlighted.push(cell.td);
      }
    };
    for (const s of sources) mark(s.matrix, s.row, s.col, 'hs-wt-source');
    if (target) mark(target, i, j, 'hs-wt-target');
  }

  /** After new numbers: the explained cell's new text, or no explanation if the cell is gone. */
  function follow() {
    if (!w.explained) return;
    const { stage, h, i, j } = w.explained;
    if (explainedCell()) {
      explain.textContent = explainAt(stage, h, i, j);
      schedulePlacement();
    } else {
      hide();
    }
  }

  // Scrolling (the page or a matrix) moves the explained cell: the explanation follows it to the
  // side of the cell that is on screen.
  const onScroll = () => { if (!explain.hidden) schedulePlacement(); };
  window.addEventListener('scroll', onScroll, { passive: true, capture: true });

  return {
    show, end, hide, follow,
    /** The explained cell (stage, h, i, j) or null, for the exports. */
    explained: () => w.explained,
    destroy() {
      if (placement) cancelAnimationFrame(placement);
      window.removeEventListener('scroll', onScroll, { capture: true });
    },
  };
}
