// Labelled matrices with numbers and a colour scale: the building block of the walkthrough.
// Pure DOM (no innerHTML: every value reaches the page through textContent), styled by
// headscope.css; colours are set through the CSSOM, which a strict Content-Security-Policy allows.
//
// A matrix is a component: createMatrix() builds it once and update() changes its shape, labels
// and numbers in place. Its parts: matrix-cells.js (the cells: made, reshaped, drawn),
// matrix-keys.js (one Tab stop, the arrow keys inside, explanations on focus and hover),
// matrix-edit.js (editable cells with a spreadsheet's keys) and matrix-message.js (why typed text
// was not used). They share the object `m` below.
import { el } from './dom.js';
import { makeScale } from './scale.js';
import { createCells } from './matrix-cells.js';
import { attachKeys } from './matrix-keys.js';
import { attachEditing } from './matrix-edit.js';
import { createCellMessage } from './matrix-message.js';

/**
 * A matrix component. `element` is its box (a scrolling table and, for editable matrices, the
 * message line under it); update() draws it.
 * @param {{
 *   name: string,                       the matrix in data-matrix and labels ("X", "A1")
 *   editable?: boolean,
 *   decimals?: number,                  decimals shown (3)
 *   onEdit?: (i: number, j: number, value: number) => string | null | void,
 *       a valid number was typed; return a reason (string) to refuse it
 *   onExplain?: (i: number, j: number, cell: HTMLElement) => void,
 *       a computed cell is hovered or focused
 *   onExplainEnd?: (how?: { dismiss: true }) => void,
 *       the pointer left the matrix / focus left its cells; `dismiss`: Escape on a cell
 *   onShown?: () => void,               the browser is about to render the matrix again after
 *       skipping it (content-visibility: auto, see `skipped`)
 * }} options
 */
export function createMatrix({ name, editable = false, decimals = 3, onEdit, onExplain, onExplainEnd, onShown } = {}) {
  const element = el('div', 'hs-matrix-box');
  const scroller = el('div', 'hs-matrix-scroll');
  const table = el('table', 'hs-matrix');
  table.dataset.matrix = name;
  const caption = el('caption', 'hs-matrix-title');
  const captionTitle = document.createTextNode('');
  const captionSubtitle = el('span', 'hs-matrix-subtitle');
  caption.append(captionTitle, captionSubtitle);
  const thead = el('thead');
  const headRow = el('tr');
  headRow.append(el('td', 'hs-corner'));
  thead.append(headRow);
  const tbody = el('tbody');
  table.append(caption, thead, tbody);
  scroller.append(table);
  element.append(scroller);
  // Under content-visibility: auto (the walkthrough's stylesheet) the browser skips rendering a
  // matrix far from the viewport and says so: a view can then write its numbers a little later.
  let skipped = false;
  scroller.addEventListener('contentvisibilityautostatechange', (e) => {
    skipped = e.skipped;
    if (!skipped) onShown?.();
  });

  // What the parts share.
  const m = {
    name, editable, decimals, element, table, headRow, tbody,
    rows: 0,
    cols: 0,
    cells: [],        // row-major: { td, content, text, color, masked, i, j }
    values: null,     // what update() was given last, for Escape
    active: 0,        // the cell that is the matrix's Tab stop
    editing: null,    // editable: { k, original }, the cell being edited and its number then
    invalid: -1,      // editable: the cell holding text that is not a number
  };
  const cells = createCells(m);
  const nav = {};
  const edit = editable ? attachEditing(m, { onEdit, nav, message: createCellMessage(m) }) : null;
  Object.assign(nav, attachKeys(m, { onExplain, onExplainEnd, edit }));

  let shownSubtitle = '';
  /**
   * Draws the matrix.
   * @param {{ title: string, subtitle?: string, rows: number, cols: number,
   *   rowLabels?: string[], colLabels?: string[], data: ArrayLike<number>,
   *   scale?: { kind: string, min: number, max: number } }} spec
   */
  function update(spec) {
    if (captionTitle.data !== spec.title) captionTitle.data = spec.title;
    const subtitle = spec.subtitle ? ` ${spec.subtitle}` : '';
    if (subtitle !== shownSubtitle) {
      captionSubtitle.textContent = subtitle;
      shownSubtitle = subtitle;
    }
    cells.reshape(spec.rows, spec.cols, spec.rowLabels, spec.colLabels);
    m.values = spec.data;
    cells.draw(spec.data, spec.scale ?? makeScale(spec.data, 'signed'));
  }

  return {
    element,
    table,
    name,
    update,
    /** Whether the browser currently skips rendering the matrix (off screen). */
    get skipped() { return skipped; },
    /**
     * What to take `skipped` to be until the browser says (a matrix attached anew: the view's
     * estimate of whether it lands far from the viewport).
     */
    assumeSkipped(value) { skipped = value; },
    /** The size to reserve (content-visibility) before the first update() draws the cells. */
    hintShape(r, c) {
      if (m.rows !== 0 || m.cols !== 0) return;
      element.style.setProperty('--hs-rows', String(r));
      element.style.setProperty('--hs-cols', String(c));
    },
    /** The cell (i, j): { td, content } or undefined. */
    cell: (i, j) => (i < m.rows && j < m.cols ? m.cells[i * m.cols + j] : undefined),
    /** Every cell of row i (col undefined) or column j (row undefined), or the one cell. */
    cellsIn(row, col) {
      const out = [];
      for (let i = 0; i < m.rows; i++) {
        if (row !== undefined && i !== row) continue;
        for (let j = 0; j < m.cols; j++) if (col === undefined || j === col) out.push(m.cells[i * m.cols + j]);
      }
      return out;
    },
  };
}

/**
 * Renders a matrix as a table into `root` (replacing its content) and returns the table: the
 * one-shot form of createMatrix(). `spec` is createMatrix's options and update()'s argument in one.
 */
export function renderMatrix(root, spec) {
  const matrix = createMatrix(spec);
  matrix.update(spec);
  root.replaceChildren(matrix.element);
  return matrix.table;
}
