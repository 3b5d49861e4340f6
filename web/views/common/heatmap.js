// The canvas heatmap of the Heads view, the ablation map and the loader's transformer patterns.
import { colorFor, makeScale } from './scale.js';
import { formatNumber } from './numbers.js';
import { el, focusedIn, partsOf, syncLabels } from './dom.js';

export const WEIGHT_SCALE = makeScale([], 'weights');

// Canvas draws wait until every DOM update of the frame is done: reading the theme's colours then
// costs one style recalculation, not one per canvas.
const drawQueue = new Set();
export function queueDraw(draw) {
  drawQueue.add(draw);
  if (drawQueue.size === 1) {
    queueMicrotask(() => {
      const draws = [...drawQueue];
      drawQueue.clear();
      for (const d of draws) d();
    });
  }
}

// Heatmaps far from the viewport are not drawn: a 16-head, 128-token grid is 8 rows of cards, of
// which two or three are on screen. Each canvas is observed; a draw of one that is more than a
// viewport away waits until it comes near (then it draws once, with its latest data).
const nearScreen = new WeakMap();   // canvas -> { near, pending: draw | null }
const observer = typeof IntersectionObserver === 'function'
  ? new IntersectionObserver((entries) => {
    for (const e of entries) {
      const s = nearScreen.get(e.target);
      if (!s) continue;
      s.near = e.isIntersecting;
      if (s.near && s.pending) {
        const draw = s.pending;
        s.pending = null;
        queueDraw(draw);
      }
    }
  }, { rootMargin: '100% 0px' })
  : null;

/** Observes `canvas`; returns draw() that runs now (queued) when the canvas is near, later otherwise. */
function lazyDraw(canvas, draw) {
  if (observer === null) return () => queueDraw(draw);
  // Unknown until the first observation: draw (the first frame must not stay blank).
  const s = { near: true, pending: null };
  nearScreen.set(canvas, s);
  observer.observe(canvas);
  return () => {
    if (s.near) queueDraw(draw);
    else s.pending = draw;
  };
}

// Colours of the current scheme (light or dark), read from the CSS variables at draw time, once
// per batch of draws and root node (the page, or a widget's shadow root).
const themeCache = new Map();
export function themeColors(element) {
  const rootNode = element.getRootNode();
  const cached = themeCache.get(rootNode);
  if (cached) return cached;
  const style = getComputedStyle(element);
  const v = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
  const theme = { fg: v('--hs-fg', '#1f2328'), border: v('--hs-border', '#d1d9e0'), focus: v('--hs-focus', '#0969da') };
  theme.borderRgba = asRgba(theme.border);
  themeCache.set(rootNode, theme);
  queueMicrotask(() => themeCache.delete(rootNode));
  return theme;
}

// '#rgb', '#rrggbb' or 'rgb(...)' as 'rgba(r, g, b, 1)' (for the image path's byte colours).
function asRgba(color) {
  let m = /^#([0-9a-f]{6})$/i.exec(color);
  if (m) {
    const n = parseInt(m[1], 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, 1)`;
  }
  m = /^#([0-9a-f])([0-9a-f])([0-9a-f])$/i.exec(color);
  if (m) return `rgba(${m.slice(1).map((h) => parseInt(h + h, 16)).join(', ')}, 1)`;
  return color.startsWith('rgb') ? color : 'rgba(128, 128, 128, 1)';
}

// colorFor() of the 0..1 weights scale, at 1/256 steps: a heatmap redraw fills up to 16k cells.
const WEIGHT_COLORS = Array.from({ length: 257 }, (_, k) => colorFor(k / 256, WEIGHT_SCALE));
// The same 257 colours as RGBA bytes, for the image path (no string per cell).
// As 32-bit words (in the platform's byte order: written through a Uint32Array view of the
// ImageData, each word lands as the same four bytes).
let weightWords = null;
const WEIGHT_WORDS = () => {
  if (weightWords === null) {
    weightWords = new Uint32Array(WEIGHT_COLORS.length);
    new Uint8Array(weightWords.buffer).set(WEIGHT_COLORS.flatMap((c) => rgbaBytes(c)));
  }
  return weightWords;
};
const wordOf = (bytes) => new Uint32Array(Uint8Array.from(bytes).buffer)[0];

/** The WEIGHT_COLORS index of a value on a weights scale (stretched or not), or -1 off the scale. */
function weightIndex(value, scale) {
  if (scale.kind !== 'weights') return -1;
  if (scale.stretch) {
    return value >= scale.min && value <= scale.max ? Math.round(((value - scale.min) / (scale.max - scale.min)) * 256) : -1;
  }
  return value >= 0 && value <= 1 ? Math.round(value * 256) : -1;
}
export function cellColor(value, scale) {
  // weightIndex: the 0..1 scale at 1/256 steps, or a stretched one (stretchedScale: the head's
  // own range drawn as the full 0..1); a value off a stretched range as on the plain scale.
  const k = weightIndex(value, scale);
  if (k >= 0) return WEIGHT_COLORS[k];
  return scale.stretch ? cellColor(value, WEIGHT_SCALE) : colorFor(value, scale);
}

/**
 * Pixels per cell of a heatmap of `size` rows or columns (the larger): big cells with numbers up
 * to 10, then smaller; from 49 on the cells are drawn as one image (drawImage of an ImageData),
 * without per-cell gaps or axis labels (hover, focus and the explanation line name the cell).
 */
export function heatmapCellSize(size) {
  return size <= 10 ? 30 : size <= 20 ? 16 : size <= 48 ? 12 : size <= 80 ? 6 : 4;
}
const IMAGE_FROM = 6;  // cells of this many pixels or fewer are drawn as an image

// 'rgba(r, g, b, a)' -> [r, g, b, 255 a], cached: the image path writes bytes, not styles.
const rgbaCache = new Map();
function rgbaBytes(color) {
  let bytes = rgbaCache.get(color);
  if (bytes === undefined) {
    const m = /rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)(?:,\s*([\d.]+))?\)/.exec(color);
    bytes = m ? [Number(m[1]), Number(m[2]), Number(m[3]), Math.round(255 * (m[4] === undefined ? 1 : Number(m[4])))] : [0, 0, 0, 0];
    if (rgbaCache.size > 4096) rgbaCache.clear();
    rgbaCache.set(color, bytes);
  }
  return bytes;
}

/**
 * A weights scale over [min, max] of the finite `values` (at least 1e-6 wide): for near-uniform
 * attention (PyTorch's initial weights give every key about 1/S), whose differences the fixed
 * 0..1 scale would leave invisible.
 */
export function stretchedScale(values) {
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    if (!Number.isFinite(v)) continue;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  if (!(max > min)) return WEIGHT_SCALE;
  if (max - min < 1e-6) max = min + 1e-6;
  return { kind: 'weights', min, max, stretch: true };
}

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

  let m = null;
  let cell = 0;
  let dpr = 1;
  let active = [0, 0];
  let hover = null;
  const clampCell = ([i, j]) => [Math.max(0, Math.min(m.rows - 1, i)), Math.max(0, Math.min(m.cols - 1, j))];
  const name = () => `${m.name}. Arrow keys move between cells. Current cell: ${m.describe(active[0], active[1])}`;

  const draw = () => {
    const ctx = canvas.getContext('2d');
    if (!ctx || m === null) return;
    const { rows, cols, stride = m.cols, data, scale = WEIGHT_SCALE } = m;
    const theme = themeColors(canvas);
    const width = cols * cell;
    const height = rows * cell;
    const gap = cell >= 14 ? 1 : 0.5;
    const maskedCells = new Path2D();
    let anyMasked = false;
    const pixel = cell <= IMAGE_FROM;
    if (pixel) {
      // The pixel path: one canvas pixel per cell (an ImageData), scaled up by CSS
      // (image-rendering: pixelated): a 16-head, 128-token grid is 262k cells, far too many
      // fillRect calls for one frame, and a full-size canvas per head too many pixels to raster.
      const pixels = ctx.createImageData(cols, rows);
      const px = new Uint32Array(pixels.data.buffer);
      const maskedWord = wordOf(rgbaBytes(theme.borderRgba));
      const table = WEIGHT_WORDS();
      const masked = m.masked;
      for (let i = 0; i < rows; i++) {
        const row = i * stride;
        const out = i * cols;
        for (let j = 0; j < cols; j++) {
          const value = data[row + j];
          if (masked !== undefined && masked(i, j)) {
            px[out + j] = maskedWord;
            continue;
          }
          const k = weightIndex(value, scale);
          px[out + j] = k >= 0 ? table[k] : wordOf(rgbaBytes(cellColor(value, scale)));
        }
      }
      ctx.putImageData(pixels, 0, 0);
      const place = (ringEl, at, inset) => {
        ringEl.hidden = at === null;
        if (at === null) return;
        ringEl.style.left = `${at[1] * cell - inset}px`;
        ringEl.style.top = `${at[0] * cell - inset}px`;
        ringEl.style.width = `${cell + 2 * inset}px`;
        ringEl.style.height = `${cell + 2 * inset}px`;
      };
      place(hoverRing, hover, 1);
      place(focusRing, focusedIn(box) === canvas ? active : null, 2);
      return;
    }
    hoverRing.hidden = true;
    focusRing.hidden = true;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < cols; j++) {
        if (m.masked?.(i, j)) {
          maskedCells.rect(j * cell, i * cell, cell - gap, cell - gap);
          anyMasked = true;
          continue;
        }
        ctx.fillStyle = cellColor(data[i * stride + j], scale);
        ctx.fillRect(j * cell, i * cell, cell - gap, cell - gap);
      }
    }
    if (anyMasked) {  // hatched, like .hs-masked cells in matrix.js's tables
      ctx.save();
      ctx.clip(maskedCells);
      ctx.strokeStyle = theme.border;
      ctx.lineWidth = 1;
      ctx.beginPath();
      for (let t = -height; t < width; t += 5) {
        ctx.moveTo(t, height);
        ctx.lineTo(t + height, 0);
      }
      ctx.stroke();
      ctx.restore();
    }
    if (Math.max(rows, cols) <= 10) {  // big cells: the numbers too
      ctx.fillStyle = theme.fg;
      ctx.font = '10px system-ui, sans-serif';
      ctx.textAlign = 'center';
      ctx.textBaseline = 'middle';
      for (let i = 0; i < rows; i++) {
        for (let j = 0; j < cols; j++) {
          if (!m.masked?.(i, j)) ctx.fillText(formatNumber(data[i * stride + j], 2), (j + 0.5) * cell, (i + 0.5) * cell);
        }
      }
    }
    const ring = ([i, j], color, lineWidth) => {
      ctx.strokeStyle = color;
      ctx.lineWidth = lineWidth;
      ctx.strokeRect(j * cell + lineWidth / 2, i * cell + lineWidth / 2, cell - gap - lineWidth, cell - gap - lineWidth);
    };
    if (hover) ring(hover, theme.fg, 1);
    if (focusedIn(box) === canvas) ring(active, theme.focus, 2);
  };

  // Something placeNear (common/place.js) can hold a box next to: cell (i, j) on the screen.
  const anchorOf = (i, j) => ({
    getBoundingClientRect() {
      const r = canvas.getBoundingClientRect();
      const w = r.width / m.cols;
      const h = r.height / m.rows;
      const left = r.left + j * w;
      const top = r.top + i * h;
      return { left, top, right: left + w, bottom: top + h, width: w, height: h, x: left, y: top };
    },
  });
  const cellAt = (event) => {
    const r = canvas.getBoundingClientRect();
    const j = Math.floor(((event.clientX - r.left) / r.width) * m.cols);
    const i = Math.floor(((event.clientY - r.top) / r.height) * m.rows);
    return i >= 0 && i < m.rows && j >= 0 && j < m.cols ? [i, j] : null;
  };
  const moveTo = (next) => {
    active = clampCell(next);
    canvas.setAttribute('aria-label', name());
    m.onCell?.(active[0], active[1], true, anchorOf(active[0], active[1]));
    draw();
  };
  canvas.addEventListener('keydown', (event) => {
    const [i, j] = active;
    const next = {
      ArrowUp: [i - 1, j], ArrowDown: [i + 1, j], ArrowLeft: [i, j - 1], ArrowRight: [i, j + 1],
      Home: [i, 0], End: [i, m.cols - 1], PageUp: [0, j], PageDown: [m.rows - 1, j],
    }[event.key];
    if (next === undefined) return;
    event.preventDefault();
    moveTo(next);
  });
  canvas.addEventListener('focus', () => moveTo(active));
  canvas.addEventListener('blur', () => {
    draw();
    m?.onLeave?.();
  });
  canvas.addEventListener('mousemove', (event) => {
    const at = cellAt(event);
    if (at === null || (hover && at[0] === hover[0] && at[1] === hover[1])) return;
    hover = at;
    m.onCell?.(at[0], at[1], false, anchorOf(at[0], at[1]));
    draw();
  });
  canvas.addEventListener('mouseleave', () => {
    hover = null;
    draw();
    if (focusedIn(box) !== canvas) m?.onLeave?.();
  });
  canvas.addEventListener('click', (event) => {
    const at = cellAt(event);
    if (at === null) return;
    active = at;
    if (focusedIn(box) === canvas) moveTo(at);
    else canvas.focus();
  });

  function update(next) {
    m = next;
    const size = Math.max(m.rows, m.cols);
    const nextCell = heatmapCellSize(size);
    const nextDpr = Math.min(3, globalThis.devicePixelRatio || 1);
    const pixel = nextCell <= IMAGE_FROM;
    const width = pixel ? m.cols : Math.max(1, Math.round(m.cols * nextCell * nextDpr));
    const height = pixel ? m.rows : Math.max(1, Math.round(m.rows * nextCell * nextDpr));
    canvas.classList.toggle('hs-heatmap-pixelated', pixel);
    if (canvas.width !== width || canvas.height !== height || nextCell !== cell) {
      cell = nextCell;
      dpr = nextDpr;
      canvas.width = width;
      canvas.height = height;
      canvas.style.width = `${m.cols * cell}px`;
      canvas.style.height = `${m.rows * cell}px`;
      box.style.setProperty('--hs-cell', `${cell}px`);
    }
    // Labels of cells too small to carry them are left out (the image path).
    const labelled = cell > IMAGE_FROM;
    syncLabels(colLabels, labelled ? m.colLabels.slice(0, m.cols) : []);
    syncLabels(rowLabels, labelled ? m.rowLabels.slice(0, m.rows) : []);
    box.dataset.heatmap = m.id;
    canvas.dataset.heatmapCanvas = m.id;
    active = clampCell(m.active ?? active);
    if (hover && (hover[0] >= m.rows || hover[1] >= m.cols)) hover = null;
    canvas.setAttribute('aria-label', name());
    drawSoon();
  }
  const drawSoon = lazyDraw(canvas, draw);
  return { update, redraw: drawSoon };
}
