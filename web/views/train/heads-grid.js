// The Train view's grid: every head's attention on the task's probe row, one heatmap per layer
// and head (layers as rows, heads as columns), each captioned with the detector it scores highest
// on (above 0.4) and marked when it is switched off. The grid fits its box (fitGrid): up to 8
// heads of a layer side by side, each pattern scaled to the width they share, so no card is clipped
// and the page never scrolls sideways (1280 px: 8 heads of the induction task's 32 tokens in one
// row; 390 px: two).
import { button, el, setText } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';
import { renderHeatmap } from '../common/heatmap.js';
import { DETECTOR_LABELS, headLabel } from './detectors.js';

/**
 * @param {Element} grid
 * @param {{ state: object, task: object, probe: object, probeRun: object, scores: object[],
 *   gates: number[][] | null, onOpen: ((l: number, h: number) => void) | null }} o  probeRun: the
 *   probe's forward with every hook_pattern; scores: the detectors' per layer; onOpen: a card's
 *   "Open in the Heads view" (layer, 1-based head), none when null
 */
export function drawHeadGrid(grid, { state, task, probe, probeRun, scores, gates, onOpen }) {
  const T = task.seqLen;
  const labels = Array.from(probe.tokens.data, (id) => task.vocab[id]);
  const cells = [];
  for (let l = 0; l < state.layers; l++) {
    const pattern = probeRun.hooks[`blocks.${l}.attn.hook_pattern`];
    for (let h = 0; h < state.heads; h++) cells.push({ l, h, data: pattern.data.subarray(h * T * T, (h + 1) * T * T) });
  }
  while (grid.children.length > cells.length) grid.lastChild.remove();
  while (grid.children.length < cells.length) {
    const card = el('figure', 'hs-train-head');
    const caption = el('figcaption');
    caption.append(el('span', 'hs-train-head-name'));
    if (onOpen) {
      const open = button('Open in the Heads view', 'hs-train-open');
      open.addEventListener('click', () => onOpen(Number(card.dataset.layer), Number(card.dataset.head)));
      caption.append(' ', open);
    }
    card.append(caption, el('div', 'hs-heatmap-box'));
    grid.append(card);
  }
  grid.dataset.heads = String(state.heads);
  grid.dataset.tokens = String(T);
  fitGrid(grid);
  watch(grid);
  cells.forEach(({ l, h, data }, k) => {
    const card = grid.children[k];
    card.dataset.layer = String(l);
    card.dataset.head = String(h + 1);
    const label = headLabel(scores[l], h);
    const off = gates?.[l][h] === 0;
    setText(card.firstChild.firstChild, `L${l} H${h + 1}${off ? ' (off)' : ''}${label ? `: ${DETECTOR_LABELS[label]}` : ''}`);
    card.dataset.label = label ?? '';
    card.classList.toggle('hs-head-off', off);
    renderHeatmap(card.lastChild, {
      id: `${l}.${h + 1}`, name: `Layer ${l} head ${h + 1} attention on the probe row, ${T} by ${T}`,
      data, rows: T, cols: T, rowLabels: labels, colLabels: labels,
      // Hatched: the keys the position rules hide (causal, and outside a sliding window's band).
      masked: (i, j) => j > i || (state.attnWindow > 0 && j <= i - state.attnWindow),
      describe: (i, j) => `layer ${l} head ${h + 1}: ${labels[i]} (${i}) → ${labels[j]} (${j}): ${formatNumber(data[i * T + j], 3)}`,
    });
  });
}

// The grid's geometry. A pattern's cells are at most the heatmap's own 12 px (heatmap-draw.js for
// up to 48 tokens), its token labels shown when its cells are at least LABELLED_CELL (the labels'
// 0.72rem text needs that much row), and never under MIN_CELL: fewer heads per row then.
const MAX_CELL = 12;
const LABELLED_CELL = 10;
const MIN_CELL = 4;
const GAP = 10;   // .hs-train-grid's gap

/**
 * The most heads per row (8, 4, 2 or 1, at most the heads: rows stay one layer's) whose patterns
 * keep cells of at least MIN_CELL px in the grid's width, and their cell size: set as
 * --hs-train-cols and --hs-train-cell, with hs-train-grid-plain when the labels do not fit.
 */
export function fitGrid(grid) {
  const heads = Number(grid.dataset.heads), T = Number(grid.dataset.tokens);
  const width = grid.clientWidth;
  if (!heads || !T || width === 0) return;
  // The row labels' width (their text's, whatever the cell size), measured with the labels shown.
  grid.classList.remove('hs-train-grid-plain');
  const labels = grid.querySelector('.hs-heatmap-rows')?.getBoundingClientRect().width ?? 0;
  let fit = null;
  for (let cols = 2 ** Math.floor(Math.log2(Math.min(heads, 8))); cols >= 1 && fit === null; cols /= 2) {
    const each = (width - (cols - 1) * GAP) / cols;
    const labelled = Math.min(MAX_CELL, (each - labels) / T);
    const cell = labelled >= LABELLED_CELL ? labelled : Math.min(MAX_CELL, each / T);
    if (cell >= MIN_CELL || cols === 1) fit = { cols, cell: Math.floor(cell * 100) / 100, plain: labelled < LABELLED_CELL };
  }
  grid.style.setProperty('--hs-train-cols', String(fit.cols));
  grid.style.setProperty('--hs-train-cell', `${fit.cell}px`);
  grid.style.setProperty('--hs-train-tokens', String(T));
  grid.classList.toggle('hs-train-grid-plain', fit.plain);
  grid.dataset.cell = String(fit.cell);
}

// A width change (the window, a phone turned) fits the grid again; one observer per grid.
const watched = new WeakSet();
function watch(grid) {
  if (watched.has(grid) || typeof ResizeObserver === 'undefined') return;
  watched.add(grid);
  let last = grid.clientWidth;
  new ResizeObserver(() => {
    if (grid.clientWidth === last) return;
    last = grid.clientWidth;
    fitGrid(grid);
  }).observe(grid);
}
