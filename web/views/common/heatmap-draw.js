// Drawing a heatmap (heatmap.js) on its canvas: big cells as rectangles (with their numbers up to
// 10 x 10, masked cells hatched), cells of a few pixels as one image (one pixel per cell, scaled up
// by CSS), and the hover and focus rings.
//
// `h` is the heatmap's shared state (heatmap.js): canvas, box, hoverRing, focusRing, and m (what
// update() was given), cell (pixels per cell), dpr, active and hover (cells as [i, j]).
import { focusedIn } from './dom.js';
import { formatNumber } from './numbers.js';
import {
  cellColor, rgbaBytes, themeColors, weightIndex, wordOf, WEIGHT_SCALE, WEIGHT_WORDS,
} from './heatmap-colors.js';


/**
 * Pixels per cell of a heatmap of `size` rows or columns (the larger): big cells with numbers up
 * to 10, then smaller; from 49 on the cells are drawn as one image (drawImage of an ImageData),
 * without per-cell gaps or axis labels (hover, focus and the explanation line name the cell).
 */
export function heatmapCellSize(size) {
  return size <= 10 ? 30 : size <= 20 ? 16 : size <= 48 ? 12 : size <= 80 ? 6 : 4;
}
export const IMAGE_FROM = 6;  // cells of this many pixels or fewer are drawn as an image

/** Draws the heatmap's current data, scale and rings. */
export function drawHeatmap(h) {
  const { canvas, box, hoverRing, focusRing, m, cell, dpr, hover, active } = h;
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
}
