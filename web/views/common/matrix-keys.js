// Keyboard, focus and hover of a matrix component (matrix.js): the matrix is one Tab stop and the
// arrow keys move inside it (a roving tabindex); a computed cell explains itself when it is focused
// or hovered. An editable matrix hands its keys and focus changes to matrix-edit.js (`edit`).
//
// `m` is the matrix's shared state (matrix.js): table, rows, cols, cells, active.

/**
 * @param {object} m
 * @param {{ onExplain?: Function, onExplainEnd?: Function, edit: null | { key(e, k): void,
 *   focusIn(k): void, focusOut(k): void } }} o
 * @returns {{ moveTarget(k, e): number, focusCell(k): void }}
 */
export function attachKeys(m, { onExplain, onExplainEnd, edit }) {
  const { table } = m;
  let hovered = -1;

  function setActive(k) {
    if (k === m.active || !m.cells[k]) return;
    if (m.cells[m.active]) m.cells[m.active].content.tabIndex = -1;
    m.active = k;
    m.cells[k].content.tabIndex = 0;
  }

  function indexOf(target) {
    const td = target.closest?.('td.hs-cell');
    if (!td || !table.contains(td)) return -1;
    const k = Number(td.dataset.row) * m.cols + Number(td.dataset.col);
    return m.cells[k]?.td === td ? k : -1;
  }

  /** The cell a navigation key moves to from k, or -1 for a key that does not move. */
  function moveTarget(k, e) {
    const { rows, cols } = m;
    let i = Math.floor(k / cols);
    let j = k % cols;
    switch (e.key) {
      case 'ArrowUp': i = Math.max(0, i - 1); break;
      case 'ArrowDown': i = Math.min(rows - 1, i + 1); break;
      case 'ArrowLeft': j = Math.max(0, j - 1); break;
      case 'ArrowRight': j = Math.min(cols - 1, j + 1); break;
      case 'Home': j = 0; if (e.ctrlKey) i = 0; break;
      case 'End': j = cols - 1; if (e.ctrlKey) i = rows - 1; break;
      case 'PageUp': i = 0; break;
      case 'PageDown': i = rows - 1; break;
      default: return -1;
    }
    return i * cols + j;
  }

  function focusCell(k) {
    setActive(k);
    m.cells[k].content.focus();
  }

  table.addEventListener('keydown', (e) => {
    const k = indexOf(e.target);
    if (k < 0) return;
    if (edit) {
      edit.key(e, k);
      return;
    }
    if (e.key === 'Escape') {
      onExplainEnd?.({ dismiss: true });
      return;
    }
    const to = moveTarget(k, e);
    if (to < 0) return;
    e.preventDefault();
    focusCell(to);
  });

  table.addEventListener('focusin', (e) => {
    const k = indexOf(e.target);
    if (k < 0) return;
    setActive(k);
    if (edit) {
      edit.focusIn(k);
    } else {
      const cell = m.cells[k];
      onExplain?.(cell.i, cell.j, cell.content);
    }
  });

  table.addEventListener('focusout', (e) => {
    const k = indexOf(e.target);
    if (k < 0) return;
    if (edit) edit.focusOut(k);
    if (!edit && !table.contains(e.relatedTarget)) onExplainEnd?.();
  });

  // Hover: computed cells explain themselves.
  if (!edit) {
    table.addEventListener('mouseover', (e) => {
      const k = indexOf(e.target);
      if (k < 0 || k === hovered) return;
      hovered = k;
      const cell = m.cells[k];
      onExplain?.(cell.i, cell.j, cell.content);
    });
    table.addEventListener('mouseleave', () => {
      hovered = -1;
      onExplainEnd?.();
    });
  }

  return { indexOf, moveTarget, focusCell };
}
