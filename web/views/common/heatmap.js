// The canvas heatmap of the Heads view, the ablation map, the Train view's heads and the loader's
// transformer patterns: renderHeatmap() builds it once per root and updates it in place. Its
// parts: heatmap-draw.js (the canvas), heatmap-colors.js (colours, the theme), draw-queue.js
// (when a canvas draws). This module holds the skeleton, the keyboard, pointer and focus, and
// update().
import { el, focusedIn, partsOf, syncLabels } from './dom.js';
import { lazyDraw } from './draw-queue.js';
import { drawHeatmap, heatmapCellSize, IMAGE_FROM } from './heatmap-draw.js';

/**
 * A compact heatmap of a (rows x cols) block (row stride `stride`): cells drawn on a canvas (a
 * 16-head, 32-token grid is 16k cells: as DOM elements they take a third of a second to lay out),
 * token labels on both axes as text. The canvas is one keyboard stop: arrow keys, Home/End and
 * PageUp/PageDown move the active cell, whose description becomes the canvas's accessible name and
 * goes to `onCell` (the view's live explanation line). Hover and click work too. Also the
 * loader's attention-pattern grid of a transformer case (transformer-case.js).
 * @param {Element} root
 * @param {{ id: string, name: string, data: ArrayLike<number>, rows: number, cols: number,
 *   stride?: number, rowLabels: string[], colLabels: string[], scale?: object,
 *   masked?: (i: number, j: number) => boolean, describe: (i: number, j: number) => string,
 *   active?: [number, number] | null,
 *   onCell?: (i: number, j: number, byKeyOrClick: boolean, anchor: { getBoundingClientRect(): object }) => void,
 *   onLeave?: () => void }} m  onCell's anchor is the cell on the screen (for placeNear); onLeave:
 *   the pointer left and the canvas has no focus
 */
export function renderHeatmap(root, m) {
  const parts = partsOf(root, 'heatmap', () => createHeatmap(root));
  parts.update(m);
}

function createHeatmap(root) {
  const box = el('div', 'hs-heatmap');
  const colLabels = el('div', 'hs-heatmap-cols');
  colLabels.setAttribute('aria-hidden', 'true');
  const rowLabels = el('div', 'hs-heatmap-rows');
  rowLabels.setAttribute('aria-hidden', 'true');
  const canvas = el('canvas', 'hs-heatmap-canvas');
  canvas.tabIndex = 0;
  canvas.setAttribute('role', 'application');
  canvas.setAttribute('aria-roledescription', 'heatmap');
  // The canvas in a positioned box with the two rings of the pixel path (hover, focus), which
  // are elements over it there: a canvas of one pixel per cell cannot draw a ring around one.
  const plot = el('div', 'hs-heatmap-plot');
  const hoverRing = el('div', 'hs-heatmap-ring');
  const focusRing = el('div', 'hs-heatmap-ring hs-heatmap-ring-focus');
  hoverRing.hidden = true;
  focusRing.hidden = true;
  plot.append(canvas, hoverRing, focusRing);
  box.append(el('div', 'hs-heatmap-corner'), colLabels, rowLabels, plot);
  root.replaceChildren(box);

  // What heatmap-draw.js draws: the elements, the last update's `m`, the geometry and the cells.
  const hm = { canvas, box, hoverRing, focusRing, m: null, cell: 0, dpr: 1, active: [0, 0], hover: null };
  const clampCell = ([i, j]) => [Math.max(0, Math.min(hm.m.rows - 1, i)), Math.max(0, Math.min(hm.m.cols - 1, j))];
  const name = () => `${hm.m.name}. Arrow keys move between cells. Current cell: ${hm.m.describe(hm.active[0], hm.active[1])}`;
  const draw = () => drawHeatmap(hm);

  // Something placeNear (common/place.js) can hold a box next to: cell (i, j) on the screen.
  const anchorOf = (i, j) => ({
    getBoundingClientRect() {
      const r = canvas.getBoundingClientRect();
      const w = r.width / hm.m.cols;
      const h = r.height / hm.m.rows;
      const left = r.left + j * w;
      const top = r.top + i * h;
      return { left, top, right: left + w, bottom: top + h, width: w, height: h, x: left, y: top };
    },
  });
  const cellAt = (event) => {
    const r = canvas.getBoundingClientRect();
    const j = Math.floor(((event.clientX - r.left) / r.width) * hm.m.cols);
    const i = Math.floor(((event.clientY - r.top) / r.height) * hm.m.rows);
    return i >= 0 && i < hm.m.rows && j >= 0 && j < hm.m.cols ? [i, j] : null;
  };
  const moveTo = (next) => {
    hm.active = clampCell(next);
    canvas.setAttribute('aria-label', name());
    hm.m.onCell?.(hm.active[0], hm.active[1], true, anchorOf(hm.active[0], hm.active[1]));
    draw();
  };
  canvas.addEventListener('keydown', (event) => {
    const [i, j] = hm.active;
    const next = {
      ArrowUp: [i - 1, j], ArrowDown: [i + 1, j], ArrowLeft: [i, j - 1], ArrowRight: [i, j + 1],
      Home: [i, 0], End: [i, hm.m.cols - 1], PageUp: [0, j], PageDown: [hm.m.rows - 1, j],
    }[event.key];
    if (next === undefined) return;
    event.preventDefault();
    moveTo(next);
  });
  canvas.addEventListener('focus', () => moveTo(hm.active));
  canvas.addEventListener('blur', () => {
    draw();
    hm.m?.onLeave?.();
  });
  canvas.addEventListener('mousemove', (event) => {
    const at = cellAt(event);
    if (at === null || (hm.hover && at[0] === hm.hover[0] && at[1] === hm.hover[1])) return;
    hm.hover = at;
    hm.m.onCell?.(at[0], at[1], false, anchorOf(at[0], at[1]));
    draw();
  });
  canvas.addEventListener('mouseleave', () => {
    hm.hover = null;
    draw();
    if (focusedIn(box) !== canvas) hm.m?.onLeave?.();
  });
  canvas.addEventListener('click', (event) => {
    const at = cellAt(event);
    if (at === null) return;
    hm.active = at;
    if (focusedIn(box) === canvas) moveTo(at);
    else canvas.focus();
  });

  function update(next) {
    hm.m = next;
    const size = Math.max(hm.m.rows, hm.m.cols);
    const nextCell = heatmapCellSize(size);
    const nextDpr = Math.min(3, globalThis.devicePixelRatio || 1);
    const pixel = nextCell <= IMAGE_FROM;
    const width = pixel ? hm.m.cols : Math.max(1, Math.round(hm.m.cols * nextCell * nextDpr));
    const height = pixel ? hm.m.rows : Math.max(1, Math.round(hm.m.rows * nextCell * nextDpr));
    canvas.classList.toggle('hs-heatmap-pixelated', pixel);
    if (canvas.width !== width || canvas.height !== height || nextCell !== hm.cell) {
      hm.cell = nextCell;
      hm.dpr = nextDpr;
      canvas.width = width;
      canvas.height = height;
      canvas.style.width = `${hm.m.cols * hm.cell}px`;
      canvas.style.height = `${hm.m.rows * hm.cell}px`;
      box.style.setProperty('--hs-cell', `${hm.cell}px`);
    }
    // Labels of cells too small to carry them are left out (the image path).
    const labelled = hm.cell > IMAGE_FROM;
    syncLabels(colLabels, labelled ? hm.m.colLabels.slice(0, hm.m.cols) : []);
    syncLabels(rowLabels, labelled ? hm.m.rowLabels.slice(0, hm.m.rows) : []);
    box.dataset.heatmap = hm.m.id;
    canvas.dataset.heatmapCanvas = hm.m.id;
    hm.active = clampCell(hm.m.active ?? hm.active);
    if (hm.hover && (hm.hover[0] >= hm.m.rows || hm.hover[1] >= hm.m.cols)) hm.hover = null;
    canvas.setAttribute('aria-label', name());
    drawSoon();
  }
  const drawSoon = lazyDraw(canvas, draw);
  return { update, redraw: drawSoon };
}
