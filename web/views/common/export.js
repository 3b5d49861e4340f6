// Exports of a view's numbers and pictures: self-contained SVG (colours and text inline, no
// stylesheet, no script), PNG (the same layout drawn on a canvas: no image decoding, so a strict
// CSP is no obstacle), and the numbers as JSON and CSV. A view describes what it shows as
// "panels" (a titled grid of cells, or a chart of lines); one layout serves both pictures.
//
//   panel = { title, rows, cols, rowLabels, colLabels, value(i, j) -> number,
//             color(i, j) -> CSS colour, text?(i, j) -> string | null (drawn in the cell),
//             mark?: [i, j] (the explained or hovered cell, outlined) }
//   chart = { kind: 'chart', title, width, height, x: { min, max, label },
//             left: { min, max, log? }, right?: { min, max },
//             series: [{ label, color, axis: 'left' | 'right', dash?, points: [[x, y], ...] }] }
//             (points with a non-finite y, or y <= 0 on a log axis, are left out)
//
// This module holds the panels' layout, shared by both pictures: export-svg.js and export-png.js
// draw it; export-data.js has the JSON, CSV and download helpers, export-bar.js the toolbar.
import { formatNumber } from './numbers.js';

const CELL = 18;
export const TITLE = 20;
export const LABEL_W = 64;
export const LABEL_H = 18;
const GAP = 16;
const MAX_WIDTH = 1200;
export const FONT = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';

/** The theme of `element` (its CSS custom properties), for pictures drawn outside the page. */
export function exportTheme(element) {
  const style = getComputedStyle(element);
  const v = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
  return { bg: v('--hs-bg', '#ffffff'), fg: v('--hs-fg', '#1f2328'), muted: v('--hs-muted', '#59636e'),
    border: v('--hs-border', '#d1d9e0'),
    // The first head colours: the Train view's curves use them for their lines.
    heads: [v('--hs-head-1', '#0969da'), v('--hs-head-2', '#cf222e'), v('--hs-head-3', '#1a7f37')] };
}

// Panels placed left to right, wrapping at MAX_WIDTH.
export function layout(panels) {
  let x = GAP;
  let y = GAP;
  let rowHeight = 0;
  let width = 0;
  const placed = panels.map((p) => {
    const cell = p.kind === 'chart' ? 0 : p.rows * p.cols > 1024 ? 10 : CELL;
    const w = p.kind === 'chart' ? p.width : LABEL_W + p.cols * cell;
    const h = p.kind === 'chart' ? TITLE + p.height + LEGEND_H : TITLE + LABEL_H + p.rows * cell;
    if (x > GAP && x + w > MAX_WIDTH) {
      x = GAP;
      y += rowHeight + GAP;
      rowHeight = 0;
    }
    const at = { p, x, y, w, h, cell };
    x += w + GAP;
    rowHeight = Math.max(rowHeight, h);
    width = Math.max(width, x);
    return at;
  });
  return { placed, width: Math.max(width, 200), height: y + rowHeight + GAP };
}

// A chart's drawing as primitives both pictures draw: the frame, one polyline per series and the
// texts (axis ends, the legend), placed at (x, y).
const LEGEND_H = 18;
const CHART_PAD = { l: 44, r: 40, t: 6, b: 18 };
export function chartShapes(p, x, y, theme) {
  const top = y + TITLE;
  const frame = { x: x + CHART_PAD.l, y: top + CHART_PAD.t, w: p.width - CHART_PAD.l - CHART_PAD.r,
    h: p.height - CHART_PAD.t - CHART_PAD.b };
  const xSpan = p.x.max > p.x.min ? p.x.max - p.x.min : 1;
  const px = (v) => frame.x + (frame.w * (v - p.x.min)) / xSpan;
  const t = (axis, v) => {
    const { min, max, log } = axis;
    const f = log ? (Math.log(v) - Math.log(min)) / (Math.log(max) - Math.log(min)) : (v - min) / (max - min || 1);
    return frame.y + frame.h * (1 - Math.min(1, Math.max(0, f)));
  };
  const lines = p.series.map((s) => {
    const axis = s.axis === 'right' ? p.right : p.left;
    const points = s.points.filter(([, v]) => Number.isFinite(v) && !(axis.log && v <= 0))
      .map(([u, v]) => [px(u), t(axis, v)]);
    return { points, color: s.color, dash: Boolean(s.dash) };
  });
  const label = (v) => formatNumber(v, Math.abs(v) < 0.01 && v !== 0 ? 4 : 2);
  const texts = [
    { x: frame.x - 4, y: frame.y + 8, text: label(p.left.max), anchor: 'end' },
    { x: frame.x - 4, y: frame.y + frame.h, text: label(p.left.min), anchor: 'end' },
    { x: frame.x, y: frame.y + frame.h + 13, text: String(p.x.min), anchor: 'start' },
    { x: frame.x + frame.w, y: frame.y + frame.h + 13, text: `${p.x.max}${p.x.label ? ` ${p.x.label}` : ''}`, anchor: 'end' },
  ];
  if (p.right) {
    texts.push({ x: frame.x + frame.w + 4, y: frame.y + 8, text: label(p.right.max), anchor: 'start' },
      { x: frame.x + frame.w + 4, y: frame.y + frame.h, text: label(p.right.min), anchor: 'start' });
  }
  let lx = x + CHART_PAD.l;
  const legend = p.series.map((s) => {
    const at = { x: lx, y: top + p.height + 12, color: s.color, dash: Boolean(s.dash), text: s.label };
    lx += 24 + 6.5 * Array.from(s.label).length + 16;
    return at;
  });
  return { frame, lines, texts: texts.map((tx) => ({ ...tx, fill: theme.muted })), legend };
}

// A label cut to n characters (code points, so an emoji is never split into a lone surrogate).
export const clip = (s, n) => {
  const chars = Array.from(String(s));
  return chars.length > n ? `${chars.slice(0, n - 1).join('')}…` : chars.join('');
};
