// Labelled matrices with numbers and a colour scale: the building block of every view.
// Pure DOM (no innerHTML: every value reaches the page through textContent), styled by
// headscope.css; colours are set through the CSSOM, which a strict Content-Security-Policy allows.

/** Colour scales. 'weights': 0..1, one hue. 'signed': blue below 0, red above, white at 0. */
export function makeScale(values, kind = 'signed') {
  if (kind === 'weights') return { kind, min: 0, max: 1 };
  let max = 0;
  for (const v of values) if (Number.isFinite(v)) max = Math.max(max, Math.abs(v));
  return { kind, min: -max, max: max || 1 };
}

const BLUE = [37, 99, 235];
const RED = [220, 38, 38];
const TEAL = [13, 148, 136];

/**
 * Background colour of a value, as rgba over the page background so the same scale reads in light
 * and dark colour schemes. -Infinity (a masked score) gets a hatched class instead (see headscope.css).
 */
export function colorFor(value, scale) {
  if (!Number.isFinite(value)) return 'transparent';
  let t;
  let rgb;
  if (scale.kind === 'weights') {
    t = Math.min(1, Math.max(0, value));
    rgb = TEAL;
  } else {
    t = Math.min(1, Math.abs(value) / scale.max);
    rgb = value < 0 ? BLUE : RED;
  }
  return `rgba(${rgb[0]}, ${rgb[1]}, ${rgb[2]}, ${(0.08 + 0.62 * t).toFixed(3)})`;
}

export function formatNumber(value, decimals = 3) {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Infinity) return '∞';
  if (value === -Infinity) return '−∞';
  const s = value.toFixed(decimals);
  return s === `-${(0).toFixed(decimals)}` ? (0).toFixed(decimals) : s;
}

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

/**
 * Renders a matrix as a table into `root` (replacing its content) and returns the table.
 * @param {HTMLElement} root
 * @param {{
 *   title: string, subtitle?: string,
 *   data: ArrayLike<number>, rows: number, cols: number,
 *   rowLabels?: string[], colLabels?: string[],
 *   scale?: { kind: string, min: number, max: number },
 *   decimals?: number,
 *   editable?: boolean, onEdit?: (i: number, j: number, value: number) => void,
 *   explain?: (i: number, j: number) => string | null,
 *   onExplain?: (text: string | null) => void,
 *   name: string,
 * }} m  `name` identifies the matrix in data attributes and accessible labels ("X", "A1").
 */
export function renderMatrix(root, m) {
  const scale = m.scale ?? makeScale(m.data, 'signed');
  const decimals = m.decimals ?? 3;
  const table = el('table', 'hs-matrix');
  table.dataset.matrix = m.name;
  const caption = el('caption', 'hs-matrix-title', m.title);
  if (m.subtitle) caption.append(el('span', 'hs-matrix-subtitle', ` ${m.subtitle}`));
  table.append(caption);
  if (m.colLabels) {
    const head = el('tr');
    head.append(el('th', 'hs-corner'));
    for (const label of m.colLabels) {
      const th = el('th', 'hs-col-label', label);
      th.scope = 'col';
      head.append(th);
    }
    const thead = el('thead');
    thead.append(head);
    table.append(thead);
  }
  const tbody = el('tbody');
  for (let i = 0; i < m.rows; i++) {
    const tr = el('tr');
    if (m.rowLabels) {
      const th = el('th', 'hs-row-label', m.rowLabels[i]);
      th.scope = 'row';
      tr.append(th);
    }
    for (let j = 0; j < m.cols; j++) {
      const value = m.data[i * m.cols + j];
      const td = el('td', 'hs-cell');
      td.dataset.row = String(i);
      td.dataset.col = String(j);
      td.style.backgroundColor = colorFor(value, scale);
      if (value === -Infinity) td.classList.add('hs-masked');
      const label = `${m.name} row ${i + 1} column ${j + 1}`;
      if (m.editable) {
        const input = el('input', 'hs-cell-input');
        input.type = 'text';
        input.inputMode = 'decimal';
        input.value = formatNumber(value, decimals);
        input.setAttribute('aria-label', label);
        input.addEventListener('change', () => {
          const v = Number(input.value.trim());
          if (input.value.trim() === '' || !Number.isFinite(v)) {
            input.setAttribute('aria-invalid', 'true');
            input.title = 'Enter a number';
            return;
          }
          input.removeAttribute('aria-invalid');
          input.title = '';
          m.onEdit?.(i, j, v);
        });
        td.append(input);
      } else {
        const span = el('span', 'hs-cell-value', formatNumber(value, decimals));
        td.append(span);
        if (m.explain) {
          span.tabIndex = 0;
          span.setAttribute('aria-label', `${label}: ${span.textContent}`);
          const show = () => m.onExplain?.(m.explain(i, j));
          span.addEventListener('mouseenter', show);
          span.addEventListener('focus', show);
        }
      }
      tr.append(td);
    }
    tbody.append(tr);
  }
  table.append(tbody);
  root.replaceChildren(table);
  return table;
}

/** A legend for a scale: swatches from min to max with the ends and the meaning spelled out. */
export function renderLegend(root, scale) {
  const box = el('div', 'hs-legend');
  const steps = 9;
  const swatches = el('div', 'hs-legend-swatches');
  for (let k = 0; k < steps; k++) {
    const v = scale.min + ((scale.max - scale.min) * k) / (steps - 1);
    const s = el('span', 'hs-legend-swatch');
    s.style.backgroundColor = colorFor(v, scale);
    swatches.append(s);
  }
  const text = scale.kind === 'weights'
    ? 'Attention weight: no colour = 0, deep teal = 1. Each row sums to 1 (a fully masked row is all 0).'
    : `Values: blue below 0 (down to ${formatNumber(scale.min, 2)}), red above 0 (up to ` +
      `${formatNumber(scale.max, 2)}); stronger colour = larger magnitude.`;
  box.append(swatches, el('span', 'hs-legend-text', text));
  root.replaceChildren(box);
  return box;
}
