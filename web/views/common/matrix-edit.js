// Editing the cells of an editable matrix (matrix.js), as a spreadsheet does. A cell reached by a
// click, Tab or an arrow key is *selected*: its whole number is selected, so typing replaces it
// (a click, too: a text field's click would put the caret in the number and "3" after a click
// before 1.000 gave 31). Enter, F2 or a double-click edit the number *in place*, the caret after
// it, where the arrow keys, Home and End move the caret; so does a second click on a selected cell,
// the caret where it clicked. Enter commits (the number selected again), Escape cancels; what is
// not a number is marked and explained (matrix-message.js), never used, and the cell's last good
// number comes back when it loses focus.
//
// `m` is the matrix's shared state (matrix.js): name, decimals, table, cells, values (what
// update() was given last), editing ({ k, original }: the cell being edited and the number it had
// when editing began, or null) and invalid.
import { exactText, formatFit, parseCellText } from './numbers.js';

/**
 * @param {object} m
 * @param {{ onEdit?: (i, j, value) => string | null | void, nav: { indexOf, moveTarget, focusCell },
 *   message: ReturnType<import('./matrix-message.js').createCellMessage> }} o  nav: matrix-keys.js's
 *   (filled in once the keys are attached)
 * @returns {{ key(e, k): void, focusIn(k): void, focusOut(k): void }} what matrix-keys.js hands over
 */
export function attachEditing(m, { onEdit, nav, message }) {
  const done = (input) => input.classList.remove('hs-editing', 'hs-cell-input-wide');

  function startEditing(k, { caret = true } = {}) {
    const input = m.cells[k].content;
    if (!m.editing || m.editing.k !== k) m.editing = { k, original: m.values[k] };
    input.classList.add('hs-editing');
    if (caret) input.setSelectionRange(input.value.length, input.value.length);
    widen(input);
  }

  // A number longer than the cell is shown whole: the input grows over its neighbours while
  // focused, and the columns keep their widths.
  function widen(input) {
    const long = input.value.length > 7;
    input.classList.toggle('hs-cell-input-wide', long);
    if (long) input.style.setProperty('--hs-chars', String(input.value.length));
  }

  // Leaves editing mode for cell k (it lost focus): text that is not a number is dropped and
  // the cell's number shown again.
  function finishEditing(k) {
    const cell = m.cells[k];
    const input = cell.content;
    if (m.invalid === k) {
      const typed = input.value;
      message.clearInvalid();
      message.show(`${m.name} row ${cell.i + 1}, column ${cell.j + 1}: “${typed.trim()}” was not used; ` +
        `the cell keeps ${exactText(m.values[k])}.`, null);
    }
    m.editing = null;
    done(input);
    const text = formatFit(m.values[k], m.decimals);
    input.value = text;
    cell.text = text;
  }

  function cancelEditing(k) {
    const cell = m.cells[k];
    const original = m.editing?.k === k ? m.editing.original : m.values[k];
    message.clearInvalid();
    message.hide();
    m.editing = null;
    done(cell.content);
    if (!Object.is(original, m.values[k])) onEdit?.(cell.i, cell.j, original);
    cell.content.value = exactText(original);
    cell.text = cell.content.value;
    cell.content.select();
  }

  function key(e, k) {
    const input = m.cells[k].content;
    const isEditing = m.editing?.k === k;
    if (e.key === 'Escape') {
      if (isEditing || m.invalid === k) {
        e.preventDefault();
        cancelEditing(k);
      }
      return;
    }
    if (e.key === 'Enter' || e.key === 'F2') {
      e.preventDefault();
      if (!isEditing) {
        startEditing(k);
      } else if (m.invalid !== k) {
        m.editing = null;
        done(input);
        input.select();
      }
      return;
    }
    if (isEditing && (e.key === 'ArrowLeft' || e.key === 'ArrowRight' || e.key === 'Home' || e.key === 'End')) {
      return;  // the caret moves inside the number
    }
    const to = nav.moveTarget(k, e);
    if (to >= 0) {
      e.preventDefault();
      if (m.invalid === k) return;  // fix or Escape first: the message says so
      m.editing = null;
      done(input);
      nav.focusCell(to);
      return;
    }
    // Any other printable key starts editing; it replaces the selected number.
    if (!isEditing && e.key.length === 1 && !e.ctrlKey && !e.metaKey && !e.altKey) startEditing(k, { caret: false });
  }

  function focusIn(k) {
    const input = m.cells[k].content;
    if (m.invalid !== k) {
      input.value = exactText(m.values[k]);
      m.cells[k].text = input.value;
    }
    input.select();
  }

  // The pointer, before the browser places a caret: a press on a cell that does not have the focus
  // selects it (the browser's caret placement is prevented and the cell focused here, so focusIn
  // selects the number); a press on the selected cell edits in place, the caret where the browser
  // puts it; the second press of a double-click edits in place with the caret after the number
  // (the browser would select a word of it).
  m.table.addEventListener('mousedown', (e) => {
    const k = e.button === 0 ? nav.indexOf(e.target) : -1;
    if (k < 0) return;
    const input = m.cells[k].content;
    if (m.element.getRootNode().activeElement !== input) {
      e.preventDefault();
      nav.focusCell(k);
    } else if (e.detail >= 2) {
      e.preventDefault();
      startEditing(k);
    } else if (m.editing?.k !== k && m.invalid !== k) {
      startEditing(k, { caret: false });
    }
  });
  m.table.addEventListener('input', (e) => {
    const k = nav.indexOf(e.target);
    if (k < 0) return;
    const cell = m.cells[k];
    const input = cell.content;
    if (m.editing?.k !== k) startEditing(k, { caret: false });
    widen(input);
    const where = `${m.name} row ${cell.i + 1}, column ${cell.j + 1}`;
    const keeps = () => `the cell keeps ${exactText(m.values[k])} (Escape restores it).`;
    const parsed = parseCellText(input.value);
    if ('error' in parsed) {
      message.setInvalid(k, `${where}: ${parsed.error}; ${keeps()}`);
      return;
    }
    const refused = Object.is(parsed.value, m.values[k]) ? null : onEdit?.(cell.i, cell.j, parsed.value);
    if (typeof refused === 'string' && refused) {
      message.setInvalid(k, `${where}: ${refused}; ${keeps()}`);
      return;
    }
    message.clearInvalid();
    message.hide();
    cell.text = input.value;
  });

  return { key, focusIn, focusOut: finishEditing };
}
