// A view's panels (export.js) drawn on a canvas as a PNG: the same layout as the SVG, with no
// image decoding (so a strict CSP is no obstacle).
import { HeadscopeError } from '../../lib/errors.js';
import { chartShapes, clip, FONT, layout, LABEL_H, LABEL_W, TITLE } from './export.js';

/** The panels drawn on a canvas at `scale` pixels per unit; resolves to a PNG Blob. */
export function panelsToPNG(panels, theme, scale = 2) {
  const { placed, width, height } = layout(panels);
  const canvas = document.createElement('canvas');
  canvas.width = Math.round(width * scale);
  canvas.height = Math.round(height * scale);
  const ctx = canvas.getContext('2d');
  ctx.scale(scale, scale);
  ctx.fillStyle = theme.bg;
  ctx.fillRect(0, 0, width, height);
  ctx.font = FONT;
  for (const { p, x, y, cell } of placed) {
    ctx.fillStyle = theme.fg;
    ctx.font = `600 ${FONT}`;
    ctx.textAlign = 'left';
    ctx.fillText(p.title, x, y + 14);
    ctx.font = '9px system-ui, sans-serif';
    if (p.kind === 'chart') {
      drawChart(ctx, chartShapes(p, x, y, theme), theme);
      continue;
    }
    const gx = x + LABEL_W;
    const gy = y + TITLE + LABEL_H;
    ctx.fillStyle = theme.muted;
    ctx.textAlign = 'center';
    p.colLabels.slice(0, p.cols).forEach((l, j) => ctx.fillText(clip(l, 4), gx + (j + 0.5) * cell, gy - 5));
    ctx.textAlign = 'right';
    p.rowLabels.slice(0, p.rows).forEach((l, i) => ctx.fillText(clip(l, 10), gx - 4, gy + (i + 0.5) * cell + 3));
    ctx.textAlign = 'center';
    for (let i = 0; i < p.rows; i++) {
      for (let j = 0; j < p.cols; j++) {
        ctx.fillStyle = p.color(i, j);
        ctx.fillRect(gx + j * cell, gy + i * cell, cell - 1, cell - 1);
        const text = p.text?.(i, j);
        if (text) {
          ctx.fillStyle = theme.fg;
          ctx.font = '8px system-ui, sans-serif';
          ctx.fillText(text, gx + (j + 0.5) * cell, gy + (i + 0.5) * cell + 3);
          ctx.font = '9px system-ui, sans-serif';
        }
      }
    }
    ctx.strokeStyle = theme.border;
    ctx.strokeRect(gx - 0.5, gy - 0.5, p.cols * cell, p.rows * cell);
    if (p.mark && p.mark[0] < p.rows && p.mark[1] < p.cols) {
      ctx.strokeStyle = theme.fg;
      ctx.lineWidth = 2;
      ctx.strokeRect(gx + p.mark[1] * cell - 1, gy + p.mark[0] * cell - 1, cell + 1, cell + 1);
      ctx.lineWidth = 1;
    }
  }
  return new Promise((resolve, reject) => canvas.toBlob((b) => (b ? resolve(b) : reject(new HeadscopeError('RESOURCE_EXHAUSTED',
    `exportAs: the browser gave no PNG for a ${canvas.width} x ${canvas.height} canvas (too large for it?)`))), 'image/png'));
}

// A chart's primitives on a canvas (the font already set).
function drawChart(ctx, { frame, lines, texts, legend }, theme) {
  ctx.strokeStyle = theme.border;
  ctx.lineWidth = 1;
  ctx.strokeRect(frame.x, frame.y, frame.w, frame.h);
  const stroke = (points, color, dash, width) => {
    ctx.strokeStyle = color;
    ctx.lineWidth = width;
    ctx.setLineDash(dash ? [6, 3] : []);
    ctx.beginPath();
    points.forEach(([u, v], k) => (k ? ctx.lineTo(u, v) : ctx.moveTo(u, v)));
    ctx.stroke();
  };
  for (const { points, color, dash } of lines) if (points.length) stroke(points, color, dash, 1.5);
  for (const tx of texts) {
    ctx.fillStyle = tx.fill;
    ctx.textAlign = tx.anchor === 'end' ? 'right' : 'left';
    ctx.fillText(tx.text, tx.x, tx.y);
  }
  ctx.textAlign = 'left';
  for (const l of legend) {
    stroke([[l.x, l.y - 3], [l.x + 18, l.y - 3]], l.color, l.dash, 2);
    ctx.fillStyle = theme.muted;
    ctx.fillText(l.text, l.x + 24, l.y);
  }
  ctx.setLineDash([]);
  ctx.lineWidth = 1;
}
