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
import { formatNumber } from './numbers.js';
import { HeadscopeError } from '../../lib/errors.js';

const CELL = 18;
const TITLE = 20;
const LABEL_W = 64;
const LABEL_H = 18;
const GAP = 16;
const MAX_WIDTH = 1200;
const FONT = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';

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
function layout(panels) {
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
function chartShapes(p, x, y, theme) {
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
const clip = (s, n) => {
  const chars = Array.from(String(s));
  return chars.length > n ? `${chars.slice(0, n - 1).join('')}…` : chars.join('');
};

// Characters XML 1.0 has no place for (outside its Char production: the C0 controls but tab, LF
// and CR; lone surrogates; U+FFFE and U+FFFF): a document holding one does not parse, even as a
// character reference. Each is replaced by U+FFFD, so the text keeps its length and shows where
// it was.
const NOT_XML_CHAR = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
const XML_ESCAPES = { '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&apos;',
  // Tab, LF and CR as references: a parser keeps them so in attribute values (it would turn a
  // literal one into a space) and in text (where it would turn CR into LF).
  '\t': '&#9;', '\n': '&#10;', '\r': '&#13;' };
/** `s` as XML text or attribute value: markup escaped, characters XML forbids replaced by U+FFFD. */
const escapeXml = (s) => String(s).replace(NOT_XML_CHAR, '\ufffd').replace(/[<>&"'\t\n\r]/g, (c) => XML_ESCAPES[c]);

/** A self-contained SVG document of the panels. */
export function panelsToSVG(panels, theme, title = 'headscope') {
  const { placed, width, height } = layout(panels);
  const out = [`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" ` +
    `font-family="system-ui, sans-serif" font-size="11">`, `<title>${escapeXml(title)}</title>`,
  `<rect width="100%" height="100%" fill="${escapeXml(theme.bg)}"/>`];
  for (const { p, x, y, cell } of placed) {
    out.push(`<g data-panel="${escapeXml(p.title)}">`);
    out.push(`<text x="${x}" y="${y + 14}" fill="${escapeXml(theme.fg)}" font-weight="600">${escapeXml(p.title)}</text>`);
    if (p.kind === 'chart') {
      const { frame, lines, texts, legend } = chartShapes(p, x, y, theme);
      out.push(`<rect x="${frame.x}" y="${frame.y}" width="${frame.w}" height="${frame.h}" fill="none" stroke="${escapeXml(theme.border)}"/>`);
      lines.forEach(({ points, color, dash }, k) => {
        if (points.length === 0) return;
        out.push(`<polyline data-series="${escapeXml(p.series[k].label)}" points="${points.map(([u, v]) => `${u.toFixed(1)},${v.toFixed(1)}`).join(' ')}" ` +
          `fill="none" stroke="${escapeXml(color)}" stroke-width="1.5"${dash ? ' stroke-dasharray="6 3"' : ''}/>`);
      });
      for (const tx of texts) {
        out.push(`<text x="${tx.x.toFixed(1)}" y="${tx.y.toFixed(1)}" fill="${escapeXml(tx.fill)}" text-anchor="${tx.anchor}" font-size="9">${escapeXml(tx.text)}</text>`);
      }
      for (const l of legend) {
        out.push(`<line x1="${l.x}" y1="${l.y - 3}" x2="${l.x + 18}" y2="${l.y - 3}" stroke="${escapeXml(l.color)}" stroke-width="2"${l.dash ? ' stroke-dasharray="6 3"' : ''}/>`,
          `<text x="${l.x + 24}" y="${l.y}" fill="${escapeXml(theme.muted)}" font-size="9">${escapeXml(l.text)}</text>`);
      }
      out.push('</g>');
      continue;
    }
    const gx = x + LABEL_W;
    const gy = y + TITLE + LABEL_H;
    p.colLabels.slice(0, p.cols).forEach((l, j) => out.push(`<text x="${gx + (j + 0.5) * cell}" y="${gy - 5}" fill="${escapeXml(theme.muted)}" ` +
      `text-anchor="middle" font-size="9">${escapeXml(clip(l, 4))}</text>`));
    p.rowLabels.slice(0, p.rows).forEach((l, i) => out.push(`<text x="${gx - 4}" y="${gy + (i + 0.5) * cell + 3}" fill="${escapeXml(theme.muted)}" ` +
      `text-anchor="end" font-size="9">${escapeXml(clip(l, 10))}</text>`));
    for (let i = 0; i < p.rows; i++) {
      for (let j = 0; j < p.cols; j++) {
        out.push(`<rect x="${gx + j * cell}" y="${gy + i * cell}" width="${cell - 1}" height="${cell - 1}" fill="${escapeXml(p.color(i, j))}">` +
          `<title>${escapeXml(`${p.rowLabels[i] ?? i + 1} → ${p.colLabels[j] ?? j + 1}: ${formatNumber(p.value(i, j), 4)}`)}</title></rect>`);
        const text = p.text?.(i, j);
        if (text) {
          out.push(`<text x="${gx + (j + 0.5) * cell}" y="${gy + (i + 0.5) * cell + 3}" fill="${escapeXml(theme.fg)}" ` +
            `text-anchor="middle" font-size="8">${escapeXml(text)}</text>`);
        }
      }
    }
    out.push(`<rect x="${gx - 0.5}" y="${gy - 0.5}" width="${p.cols * cell}" height="${p.rows * cell}" fill="none" stroke="${escapeXml(theme.border)}"/>`);
    if (p.mark && p.mark[0] < p.rows && p.mark[1] < p.cols) {
      out.push(`<rect data-mark="${p.mark[0]},${p.mark[1]}" x="${gx + p.mark[1] * cell - 1}" y="${gy + p.mark[0] * cell - 1}" ` +
        `width="${cell + 1}" height="${cell + 1}" fill="none" stroke="${escapeXml(theme.fg)}" stroke-width="2"/>`);
    }
    out.push('</g>');
  }
  out.push('</svg>');
  return out.join('\n');
}

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

/** CSV text of rows of values (the first row: the header), quoted where needed. */
export function toCSV(rows) {
  const cell = (v) => {
    // Non-finite numbers as the case format and the JSON export write them.
    const s = typeof v === 'number' ? (Number.isFinite(v) ? String(v) : Number.isNaN(v) ? 'nan' : v > 0 ? 'inf' : '-inf')
      : String(v ?? '');
    return /[",\n\r]/.test(s) || /^\s|\s$/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  return `${rows.map((r) => r.map(cell).join(',')).join('\r\n')}\r\n`;
}

/** JSON text in which the numbers JSON has no literal for are the case format's strings. */
export function toJSON(value) {
  return `${JSON.stringify(value, (_, v) => {
    if (typeof v === 'number' && !Number.isFinite(v)) return Number.isNaN(v) ? 'nan' : v > 0 ? 'inf' : '-inf';
    if (ArrayBuffer.isView(v)) return Array.from(v);
    return v;
  }, 1)}\n`;
}

/** Nested arrays of a flat row-major tensor { data, shape }. */
export function nested({ data, shape }, map = (v) => v) {
  const build = (offset, dim) => {
    if (dim === shape.length) return map(data[offset]);
    const stride = shape.slice(dim + 1).reduce((a, b) => a * b, 1);
    return Array.from({ length: shape[dim] }, (_, k) => build(offset + k * stride, dim + 1));
  };
  return shape.length === 0 ? map(data[0]) : build(0, 0);
}

/** Offers `blob` as a file download (an <a download> click; nothing leaves the page). */
export function download(blob, filename, container = document.body) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  a.hidden = true;
  container.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export const EXPORT_FORMATS = ['svg', 'png', 'json', 'csv'];
export const MIME = { svg: 'image/svg+xml', png: 'image/png', json: 'application/json', csv: 'text/csv', case: 'application/json' };

/**
 * The export toolbar of a view: a button per format; `make(format)` resolves to a Blob,
 * `name(format)` is its file name.
 */
export function exportBar(formats, make, name, onError) {
  const bar = document.createElement('div');
  bar.className = 'hs-export';
  bar.setAttribute('role', 'group');
  bar.setAttribute('aria-label', 'Export');
  const label = document.createElement('span');
  label.className = 'hs-export-label';
  label.textContent = 'Export:';
  bar.append(label);
  const labels = { svg: 'SVG', png: 'PNG', json: 'JSON', csv: 'CSV', case: 'Case file' };
  for (const f of formats) {
    const b = document.createElement('button');
    b.type = 'button';
    b.dataset.export = f;
    b.textContent = labels[f];
    b.title = f === 'case' ? 'The current numbers as a case document (with the expected output)'
      : `The current view as ${labels[f]}`;
    b.addEventListener('click', async () => {
      try {
        download(await make(f), name(f), bar);
      } catch (e) {
        onError(e);
      }
    });
    bar.append(b);
  }
  return bar;
}
