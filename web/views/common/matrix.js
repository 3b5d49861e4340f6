// Labelled matrices with numbers and a colour scale: the building block of every view.
// Pure DOM (no innerHTML: every value reaches the page through textContent), styled by
// headscope.css; colours are set through the CSSOM, which a strict Content-Security-Policy allows.
//
// A matrix is a component: createMatrix() builds it once and update() changes its shape, labels
// and numbers in place, touching only the cells whose text or colour changed (a 16-head
// walkthrough has ~11k cells, and an edit changes most of them). Each matrix is one Tab stop;
// the arrow keys move inside it (a roving tabindex). Editable cells are text inputs with a
// spreadsheet's keys: typing starts editing (replacing the number), Enter or F2 edits the
// number in place, Enter commits, Escape cancels; what is not a number is marked and explained,
// never used, and the cell's last good number comes back when it loses focus.

/** The largest finite float32: the engine computes in float32, so a cell cannot hold more. */
export const FLOAT32_MAX = 3.4028234663852886e38;

/** Colour scales. 'weights': 0..1, one hue. 'signed': blue below 0, red above, white at 0. */
export function makeScale(values, kind = 'signed') {
  if (kind === 'weights') return { kind, min: 0, max: 1 };
  let max = 0;
  for (const v of values) if (Number.isFinite(v)) max = Math.max(max, Math.abs(v));
  return { kind, min: -max, max: max || 1 };
}

// Colours are rgba over the page background, so one scale reads in the light and the dark
// colour scheme (and on a canvas, which cannot resolve CSS variables). The weights' teal and its
// strongest alpha are chosen so that, over either scheme's background (#ffffff, #0d1117), a
// weight of 1 has at least 3:1 contrast against an empty cell (0) and the scheme's text on it
// at least 4.5:1 (3.24 and 4.87 light, 3.27 and 4.90 dark). The alpha grows with the square root
// of the weight, so that small weights are visible: 0.25 already gets half the colour.
const WEIGHT_RGB = [36, 134, 122];
const WEIGHT_ALPHA = 0.82;
const BLUE = [37, 99, 235];
const RED = [220, 38, 38];
const LEVELS = 256;
const rgba = (rgb, a) => `rgba(${rgb[0]}, ${rgb[1]}, ${rgb[2]}, ${a.toFixed(3)})`;
const WEIGHT_PALETTE = Array.from({ length: LEVELS + 1 }, (_, k) => rgba(WEIGHT_RGB, WEIGHT_ALPHA * Math.sqrt(k / LEVELS)));
const signedAlpha = (k) => 0.08 + 0.62 * (k / LEVELS);
const RED_PALETTE = Array.from({ length: LEVELS + 1 }, (_, k) => rgba(RED, signedAlpha(k)));
const BLUE_PALETTE = Array.from({ length: LEVELS + 1 }, (_, k) => rgba(BLUE, signedAlpha(k)));

/**
 * The colour of a value as a small integer (equal integers, equal colours): -1 for no colour
 * (NaN, ±∞), 0..256 for a weight or a value >= 0, 257..513 for a value < 0.
 */
export function colorIndex(value, scale) {
  if (!Number.isFinite(value)) return -1;
  if (scale.kind === 'weights') return Math.round(Math.min(1, Math.max(0, value)) * LEVELS);
  const k = Math.round(Math.min(1, Math.abs(value) / scale.max) * LEVELS);
  return value < 0 ? LEVELS + 1 + k : k;
}

function paletteColor(index, kind) {
  if (index < 0) return 'transparent';
  if (kind === 'weights') return WEIGHT_PALETTE[index];
  return index > LEVELS ? BLUE_PALETTE[index - LEVELS - 1] : RED_PALETTE[index];
}

/**
 * Background colour of a value, as rgba over the page background so the same scale reads in light
 * and dark colour schemes. -Infinity (a masked score) gets a hatched class instead (see headscope.css).
 */
export function colorFor(value, scale) {
  return paletteColor(colorIndex(value, scale), scale.kind);
}

export function formatNumber(value, decimals = 3) {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Infinity) return '∞';
  if (value === -Infinity) return '−∞';
  const s = value.toFixed(decimals);
  return s === `-${(0).toFixed(decimals)}` ? (0).toFixed(decimals) : s;
}

/**
 * A value in at most `width` characters, for a fixed-width cell: `decimals` decimals when they
 * fit, fewer for large numbers, then exponent notation ("1.2e+9").
 */
export function formatFit(value, decimals = 3, width = 7) {
  let s = formatNumber(value, decimals);
  for (let d = decimals - 1; s.length > width && d >= 0; d--) s = formatNumber(value, d);
  for (let d = 2; s.length > width && d >= 0; d--) s = value.toExponential(d);
  return s;
}

/** The shortest text that reads back as `value` (what an editable cell shows while focused). */
export function exactText(value) {
  if (Object.is(value, -0)) return '0';
  return String(value);
}

/**
 * Reads what was typed into a cell. Accepts a decimal comma ("1,5" is 1.5), a leading "+", a
 * typographic minus and exponents ("2e-3"); refuses anything else, and numbers a float32 cannot
 * hold (beyond ±3.4e38).
 * @returns {{ value: number } | { error: string }}  error: why, in words, for the cell's message
 */
export function parseCellText(text) {
  let s = String(text).trim().replace(/[\u2212\u2012\u2013]/g, '-');
  if (s === '') return { error: 'the cell is empty' };
  if (/^[+-]?(\d+,\d*|,\d+)(e[+-]?\d+)?$/i.test(s)) s = s.replace(',', '.');
  if (!/^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(s)) {
    return { error: /^[+-]?(inf|infinity|∞|nan)$/i.test(s) ? `“${text.trim()}” is not a finite number`
      : `“${text.trim()}” is not a number` };
  }
  const value = Number(s);
  if (!Number.isFinite(value) || !Number.isFinite(Math.fround(value)) || Math.abs(value) > FLOAT32_MAX) {
    return { error: `${text.trim()} is beyond float32's range (±3.4e38), which the engine computes in` };
  }
  return { value: value === 0 ? 0 : value };
}

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

let messageIds = 0;

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
  const corner = el('td', 'hs-corner');
  headRow.append(corner);
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

  let rows = 0;
  let cols = 0;
  let cells = [];          // row-major: { td, content, text, color, masked, i, j }
  let scale = { kind: 'signed', min: -1, max: 1 };
  let values = null;       // what update() was given last, for Escape
  let active = 0;          // the cell that is the matrix's Tab stop
  let hovered = -1;
  // Editable: the cell being edited, the number it had when editing began, and whether it holds
  // text that is not a number.
  let editing = null;      // { k, original }
  let invalid = -1;
  let message = null;
  let pointerDown = false;
  let shownSubtitle = '';

  // Cells are cloned from a template: a 16-head walkthrough creates thousands at once.
  let template = null;
  function makeCell(i, j) {
    if (!template) {
      template = el('td', 'hs-cell');
      let content;
      if (editable) {
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
    if (editable) content.setAttribute('aria-label', `${name} row ${i + 1} column ${j + 1}`);
    return { td, content, text: null, color: -2, masked: false, i, j };
  }

  // Rows and columns to (r, c), reusing every cell that still has a place.
  let shownRowLabels = null;
  let shownColLabels = null;
  function reshape(r, c, rowLabels, colLabels) {
    const reshaped = r !== rows || c !== cols;
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
          const old = i < rows && j < cols ? cells[i * cols + j] : null;
          if (old) {
            next[i * c + j] = old;
          } else {
            const cell = makeCell(i, j);
            tr.append(cell.td);
            next[i * c + j] = cell;
          }
        }
      }
      const previousActive = cells[active];
      cells = next;
      rows = r;
      cols = c;
      if (editing && !cells[editing.k]) editing = null;
      const keep = previousActive ? previousActive.i * c + previousActive.j : 0;
      active = previousActive && previousActive.i < r && previousActive.j < c ? keep : 0;
      for (const cell of cells) cell.content.tabIndex = -1;
      if (cells[active]) cells[active].content.tabIndex = 0;
      element.style.setProperty('--hs-rows', String(r));
      element.style.setProperty('--hs-cols', String(c));
    }
    // Labels are usually the same arrays as last time (the view caches them): nothing to do.
    if (rowLabels !== shownRowLabels || colLabels !== shownColLabels || reshaped) {
      for (let j = 0; j < c; j++) setText(headRow.children[j + 1], colLabels?.[j] ?? String(j));
      for (let i = 0; i < r; i++) setText(tbody.rows[i].firstChild, rowLabels?.[i] ?? String(i));
      shownRowLabels = rowLabels;
      shownColLabels = colLabels;
    }
  }

  function activeInput() {
    const root = element.getRootNode();
    const focused = root.activeElement ?? null;
    return focused && focused.classList?.contains('hs-cell-input') && element.contains(focused) ? focused : null;
  }

  /**
   * Draws the matrix.
   * @param {{ title: string, subtitle?: string, rows: number, cols: number,
   *   rowLabels?: string[], colLabels?: string[], data: ArrayLike<number>,
   *   scale?: { kind: string, min: number, max: number } }} m
   */
  function update(m) {
    if (captionTitle.data !== m.title) captionTitle.data = m.title;
    const subtitle = m.subtitle ? ` ${m.subtitle}` : '';
    if (subtitle !== shownSubtitle) {
      captionSubtitle.textContent = subtitle;
      shownSubtitle = subtitle;
    }
    reshape(m.rows, m.cols, m.rowLabels, m.colLabels);
    scale = m.scale ?? makeScale(m.data, 'signed');
    values = m.data;
    const kind = scale.kind;
    const focused = editable ? activeInput() : null;
    for (let k = 0; k < cells.length; k++) {
      const cell = cells[k];
      const v = m.data[k];
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
      if (editable) {
        // The cell being typed into keeps what is typed.
        if ((editing && editing.k === k) || invalid === k) continue;
        // A focused cell shows its whole number; the others what fits.
        const text = cell.content === focused ? exactText(v) : formatFit(v, decimals);
        if (text !== cell.text || cell.content.value !== text) {
          cell.content.value = text;
          cell.text = text;
        }
      } else {
        const text = formatFit(v, decimals);
        if (text !== cell.text) {
          cell.content.firstChild.data = text;
          cell.text = text;
        }
      }
    }
  }

  // ---- Keyboard: one Tab stop, the arrow keys inside ---------------------------------------

  function setActive(k) {
    if (k === active || !cells[k]) return;
    if (cells[active]) cells[active].content.tabIndex = -1;
    active = k;
    cells[k].content.tabIndex = 0;
  }

  function indexOf(target) {
    const td = target.closest?.('td.hs-cell');
    if (!td || !table.contains(td)) return -1;
    const k = Number(td.dataset.row) * cols + Number(td.dataset.col);
    return cells[k]?.td === td ? k : -1;
  }

  /** The cell a navigation key moves to from k, or -1 for a key that does not move. */
  function moveTarget(k, e) {
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
    cells[k].content.focus();
  }

  table.addEventListener('keydown', (e) => {
    const k = indexOf(e.target);
    if (k < 0) return;
    if (editable) {
      editableKey(e, k);
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
    if (editable) {
      const input = cells[k].content;
      if (invalid !== k) {
        input.value = exactText(values[k]);
        cells[k].text = input.value;
      }
      if (pointerDown) {
        startEditing(k, { caret: false });
      } else {
        input.select();
      }
    } else {
      onExplain?.(cells[k].i, cells[k].j, cells[k].content);
    }
  });

  table.addEventListener('focusout', (e) => {
    const k = indexOf(e.target);
    if (k < 0) return;
    if (editable) finishEditing(k);
    if (!editable && !table.contains(e.relatedTarget)) onExplainEnd?.();
  });

  // ---- Hover: computed cells explain themselves ----------------------------------------------

  if (!editable) {
    table.addEventListener('mouseover', (e) => {
      const k = indexOf(e.target);
      if (k < 0 || k === hovered) return;
      hovered = k;
      onExplain?.(cells[k].i, cells[k].j, cells[k].content);
    });
    table.addEventListener('mouseleave', () => {
      hovered = -1;
      onExplainEnd?.();
    });
  }

  // ---- Editing -------------------------------------------------------------------------------

  function startEditing(k, { caret = true } = {}) {
    const input = cells[k].content;
    if (!editing || editing.k !== k) editing = { k, original: values[k] };
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
    const cell = cells[k];
    const input = cell.content;
    if (invalid === k) {
      const typed = input.value;
      clearInvalid();
      showMessage(`${name} row ${cell.i + 1}, column ${cell.j + 1}: “${typed.trim()}” was not used; ` +
        `the cell keeps ${exactText(values[k])}.`, null);
    }
    editing = null;
    input.classList.remove('hs-editing', 'hs-cell-input-wide');
    const text = formatFit(values[k], decimals);
    input.value = text;
    cell.text = text;
  }

  function cancelEditing(k) {
    const cell = cells[k];
    const original = editing?.k === k ? editing.original : values[k];
    clearInvalid();
    hideMessage();
    editing = null;
    cell.content.classList.remove('hs-editing', 'hs-cell-input-wide');
    if (!Object.is(original, values[k])) onEdit?.(cell.i, cell.j, original);
    cell.content.value = exactText(original);
    cell.text = cell.content.value;
    cell.content.select();
  }

  function editableKey(e, k) {
    const input = cells[k].content;
    const isEditing = editing?.k === k;
    if (e.key === 'Escape') {
      if (isEditing || invalid === k) {
        e.preventDefault();
        cancelEditing(k);
      }
      return;
    }
    if (e.key === 'Enter' || e.key === 'F2') {
      e.preventDefault();
      if (!isEditing) {
        startEditing(k);
      } else if (invalid !== k) {
        editing = null;
        input.classList.remove('hs-editing', 'hs-cell-input-wide');
        input.select();
      }
      return;
    }
    if (isEditing && (e.key === 'ArrowLeft' || e.key === 'ArrowRight' || e.key === 'Home' || e.key === 'End')) {
      return;  // the caret moves inside the number
    }
    const to = moveTarget(k, e);
    if (to >= 0) {
      e.preventDefault();
      if (invalid === k) return;  // fix or Escape first: the message says so
      editing = null;
      input.classList.remove('hs-editing', 'hs-cell-input-wide');
      focusCell(to);
      return;
    }
    // Any other printable key starts editing; it replaces the selected number.
    if (!isEditing && e.key.length === 1 && !e.ctrlKey && !e.metaKey && !e.altKey) startEditing(k, { caret: false });
  }

  if (editable) {
    table.addEventListener('pointerdown', () => {
      pointerDown = true;
      setTimeout(() => { pointerDown = false; }, 0);
    });
    table.addEventListener('input', (e) => {
      const k = indexOf(e.target);
      if (k < 0) return;
      const cell = cells[k];
      const input = cell.content;
      if (editing?.k !== k) startEditing(k, { caret: false });
      widen(input);
      const parsed = parseCellText(input.value);
      if ('error' in parsed) {
        setInvalid(k, `${name} row ${cell.i + 1}, column ${cell.j + 1}: ${parsed.error}; the cell keeps ` +
          `${exactText(values[k])} (Escape restores it).`);
        return;
      }
      const refused = Object.is(parsed.value, values[k]) ? null : onEdit?.(cell.i, cell.j, parsed.value);
      if (typeof refused === 'string' && refused) {
        setInvalid(k, `${name} row ${cell.i + 1}, column ${cell.j + 1}: ${refused}; the cell keeps ` +
          `${exactText(values[k])} (Escape restores it).`);
        return;
      }
      clearInvalid();
      hideMessage();
      cell.text = input.value;
    });
  }

  function ensureMessage() {
    if (message) return message;
    message = el('p', 'hs-cell-message');
    message.id = `hs-cell-message-${++messageIds}`;
    message.setAttribute('role', 'status');
    message.hidden = true;
    element.append(message);
    return message;
  }

  function showMessage(text, k) {
    const m = ensureMessage();
    m.textContent = text;
    m.hidden = false;
    m.classList.toggle('hs-error', k !== null);
    // Under the matrix, moved left if it would leave the screen (a narrow matrix at the right).
    m.style.left = '0px';
    const right = m.getBoundingClientRect().right;
    const width = document.documentElement.clientWidth;
    if (right > width - 4) {
      const boxLeft = element.getBoundingClientRect().left;
      m.style.left = `${-Math.min(right - width + 4, Math.max(0, boxLeft - 4))}px`;
    }
  }

  function hideMessage() {
    if (message) {
      message.hidden = true;
      message.textContent = '';
    }
  }

  function setInvalid(k, text) {
    if (invalid !== k) clearInvalid();
    invalid = k;
    const input = cells[k].content;
    input.setAttribute('aria-invalid', 'true');
    showMessage(text, k);
    input.setAttribute('aria-describedby', message.id);
  }

  function clearInvalid() {
    if (invalid < 0) return;
    const input = cells[invalid]?.content;
    if (input) {
      input.removeAttribute('aria-invalid');
      input.removeAttribute('aria-describedby');
    }
    invalid = -1;
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
      if (rows !== 0 || cols !== 0) return;
      element.style.setProperty('--hs-rows', String(r));
      element.style.setProperty('--hs-cols', String(c));
    },
    /** The cell (i, j): { td, content } or undefined. */
    cell: (i, j) => (i < rows && j < cols ? cells[i * cols + j] : undefined),
    /** Every cell of row i (col undefined) or column j (row undefined), or the one cell. */
    cellsIn(row, col) {
      const out = [];
      for (let i = 0; i < rows; i++) {
        if (row !== undefined && i !== row) continue;
        for (let j = 0; j < cols; j++) if (col === undefined || j === col) out.push(cells[i * cols + j]);
      }
      return out;
    },
  };
}

/**
 * Renders a matrix as a table into `root` (replacing its content) and returns the table: the
 * one-shot form of createMatrix(). `m` is createMatrix's options and update()'s argument in one.
 */
export function renderMatrix(root, m) {
  const matrix = createMatrix(m);
  matrix.update(m);
  root.replaceChildren(matrix.element);
  return matrix.table;
}

/**
 * Places `box` (absolutely positioned inside `container`) next to `anchor` without covering it:
 * under the anchor when it fits in the viewport there (or there is more room below), otherwise
 * above; left-aligned with the anchor, kept inside the container's width.
 */
export function placeNear(box, anchor, container, { gap = 6 } = {}) {
  const c = container.getBoundingClientRect();
  const a = anchor.getBoundingClientRect();
  const height = box.offsetHeight;
  const width = box.offsetWidth;
  const viewport = window.innerHeight || document.documentElement.clientHeight;
  const below = viewport - a.bottom;
  const above = a.top;
  const under = height + gap <= below || below >= above;
  const top = under ? a.bottom - c.top + gap : a.top - c.top - height - gap;
  const left = Math.max(0, Math.min(a.left - c.left, c.width - width));
  box.style.top = `${Math.round(top)}px`;
  box.style.left = `${Math.round(left)}px`;
  box.dataset.side = under ? 'below' : 'above';
}

/** A legend for a scale: swatches from min to max with the ends and the meaning spelled out. */
export function renderLegend(root, scale) {
  const box = el('div', 'hs-legend');
  const steps = 9;
  const swatches = el('div', 'hs-legend-swatches');
  swatches.setAttribute('aria-hidden', 'true');
  for (let k = 0; k < steps; k++) {
    const v = scale.min + ((scale.max - scale.min) * k) / (steps - 1);
    const s = el('span', 'hs-legend-swatch');
    s.style.backgroundColor = colorFor(v, scale);
    swatches.append(s);
  }
  const text = scale.kind === 'weights'
    ? 'Attention weight: no colour = 0, deep teal = 1 (colour grows with the square root, so small ' +
      'weights show). Each row sums to 1 (a fully masked row is all 0).'
    : `Values: blue below 0 (down to ${formatNumber(scale.min, 2)}), red above 0 (up to ` +
      `${formatNumber(scale.max, 2)}); stronger colour = larger magnitude.`;
  box.append(swatches, el('span', 'hs-legend-text', text));
  root.replaceChildren(box);
  return box;
}
