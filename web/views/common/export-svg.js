// A view's panels (export.js) as a self-contained SVG document: colours and text inline, no
// stylesheet, no script, and only characters XML 1.0 can hold.
import { formatNumber } from './numbers.js';
import { chartShapes, clip, layout, LABEL_H, LABEL_W, TITLE } from './export.js';

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
