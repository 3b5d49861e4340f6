// A view's numbers as files: JSON (non-finite numbers as the case format's strings), CSV, nested
// arrays of a tensor, the formats' MIME types, and a download that never leaves the page.

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
