// Editing the cells of an editable matrix (matrix.js), with a spreadsheet's keys: typing starts
// editing (replacing the number), Enter or F2 edits the number in place, Enter commits, Escape
// cancels; what is not a number is marked and explained (matrix-message.js), never used, and the
// cell's last good number comes back when it loses focus.
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
  let pointerDown = false;
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
    if (pointerDown) {
      startEditing(k, { caret: false });
    } else {
      input.select();
    }
  }

  m.table.addEventListener('pointerdown', () => {
    pointerDown = true;
    setTimeout(() => { pointerDown = false; }, 0);
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
