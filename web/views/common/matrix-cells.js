// The cells of a matrix component (matrix.js): made from a template, reshaped in place (every cell
// that still has a place is kept), and drawn touching only the cells whose text or colour changed
// (a 16-head walkthrough has ~11k cells, and an edit changes most of them).
//
// `m` is the matrix's shared state (matrix.js): name, editable, decimals, element, headRow,
// tbody, and the fields this module keeps up to date: rows, cols, cells (row-major: { td, content,
// text, color, masked, i, j }), active (the Tab stop), editing and invalid (matrix-edit.js).
import { el, setText } from './dom.js';
import { colorIndex, paletteColor } from './scale.js';
import { exactText, formatFit } from './numbers.js';

/** @returns {{ reshape(r, c, rowLabels, colLabels): void, draw(data, scale): void }} */
export function createCells(m) {
  // Cells are cloned from a template: a 16-head walkthrough creates thousands at once.
  let template = null;
  function makeCell(i, j) {
    if (!template) {
      template = el('td', 'hs-cell');
      let content;
      if (m.editable) {
        content = el('input', 'hs-cell-input');
        content.type = 'text';
        content.inputMode = 'decimal';
        content.autocomplete = 'off';
        content.spellcheck = false;
      } else {
        content = el('span', 'hs-cell-value');
        content.append(document.createTextNode(''));
      }
      content.tabIndex = -1;
      template.append(content);
    }
    const td = template.cloneNode(true);
    td.dataset.row = String(i);
    td.dataset.col = String(j);
    const content = td.firstChild;
    if (m.editable) content.setAttribute('aria-label', `${m.name} row ${i + 1} column ${j + 1}`);
    return { td, content, text: null, color: -2, masked: false, i, j };
  }

  // Rows and columns to (r, c), reusing every cell that still has a place.
  let shownRowLabels = null;
  let shownColLabels = null;
  function reshape(r, c, rowLabels, colLabels) {
    const { headRow, tbody } = m;
    const reshaped = r !== m.rows || c !== m.cols;
    if (reshaped) {
      while (headRow.children.length - 1 > c) headRow.lastChild.remove();
      while (headRow.children.length - 1 < c) {
        const th = el('th', 'hs-col-label');
        th.scope = 'col';
        headRow.append(th);
      }
      while (tbody.rows.length > r) tbody.lastChild.remove();
      const next = new Array(r * c);
      for (let i = 0; i < r; i++) {
        let tr = tbody.rows[i];
        if (!tr) {
          tr = el('tr');
          const th = el('th', 'hs-row-label');
          th.scope = 'row';
          tr.append(th);
          tbody.append(tr);
        }
        while (tr.children.length - 1 > c) tr.lastChild.remove();
        for (let j = 0; j < c; j++) {
          const old = i < m.rows && j < m.cols ? m.cells[i * m.cols + j] : null;
          if (old) {
            next[i * c + j] = old;
          } else {
            const cell = makeCell(i, j);
            tr.append(cell.td);
            next[i * c + j] = cell;
          }
        }
      }
      const previousActive = m.cells[m.active];
      m.cells = next;
      m.rows = r;
      m.cols = c;
      if (m.editing && !m.cells[m.editing.k]) m.editing = null;
      const keep = previousActive ? previousActive.i * c + previousActive.j : 0;
      m.active = previousActive && previousActive.i < r && previousActive.j < c ? keep : 0;
      for (const cell of m.cells) cell.content.tabIndex = -1;
      if (m.cells[m.active]) m.cells[m.active].content.tabIndex = 0;
      m.element.style.setProperty('--hs-rows', String(r));
      m.element.style.setProperty('--hs-cols', String(c));
    }
    // Labels are usually the same arrays as last time (the view caches them): nothing to do.
    if (rowLabels !== shownRowLabels || colLabels !== shownColLabels || reshaped) {
      for (let j = 0; j < c; j++) setText(headRow.children[j + 1], colLabels?.[j] ?? String(j));
      for (let i = 0; i < r; i++) setText(tbody.rows[i].firstChild, rowLabels?.[i] ?? String(i));
      shownRowLabels = rowLabels;
      shownColLabels = colLabels;
    }
  }

  // The focused cell input of this matrix, if any.
  function activeInput() {
    const root = m.element.getRootNode();
    const focused = root.activeElement ?? null;
    return focused && focused.classList?.contains('hs-cell-input') && m.element.contains(focused) ? focused : null;
  }

  // Every cell's colour, mask and text from `data` (row-major, as many values as cells).
  function draw(data, scale) {
    const kind = scale.kind;
    const focused = m.editable ? activeInput() : null;
    const { cells } = m;
    for (let k = 0; k < cells.length; k++) {
      const cell = cells[k];
      const v = data[k];
      const color = colorIndex(v, scale);
      if (color !== cell.color) {
        cell.td.style.backgroundColor = paletteColor(color, kind);
        cell.color = color;
      }
      const masked = v === -Infinity;
      if (masked !== cell.masked) {
        cell.td.classList.toggle('hs-masked', masked);
        cell.masked = masked;
      }
      if (m.editable) {
        // The cell being typed into keeps what is typed.
        if ((m.editing && m.editing.k === k) || m.invalid === k) continue;
        // A focused cell shows its whole number; the others what fits.
        const text = cell.content === focused ? exactText(v) : formatFit(v, m.decimals);
        if (text !== cell.text || cell.content.value !== text) {
          cell.content.value = text;
          cell.text = text;
        }
      } else {
        const text = formatFit(v, m.decimals);
        if (text !== cell.text) {
          cell.content.firstChild.data = text;
          cell.text = text;
        }
      }
    }
  }

  return { reshape, draw };
}
