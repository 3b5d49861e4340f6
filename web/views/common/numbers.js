// Numbers as the views write and read them: fixed decimals ("−∞" for a masked score), a value that
// fits a fixed-width cell, the exact text of a value, and what a reader typed into a cell.

/** The largest finite float32: the engine computes in float32, so a cell cannot hold more. */
export const FLOAT32_MAX = 3.4028234663852886e38;

export function formatNumber(value, decimals = 3) {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Infinity) return '∞';
  if (value === -Infinity) return '−∞';
  const s = value.toFixed(decimals);
  return s === `-${(0).toFixed(decimals)}` ? (0).toFixed(decimals) : s;
}

/**
 * A value in at most `width` characters, for a fixed-width cell: `decimals` decimals when they
 * fit, fewer for large numbers, then exponent notation ("1.2e+9").
 */
export function formatFit(value, decimals = 3, width = 7) {
  let s = formatNumber(value, decimals);
  for (let d = decimals - 1; s.length > width && d >= 0; d--) s = formatNumber(value, d);
  for (let d = 2; s.length > width && d >= 0; d--) s = value.toExponential(d);
  return s;
}

/** The shortest text that reads back as `value` (what an editable cell shows while focused). */
export function exactText(value) {
  if (Object.is(value, -0)) return '0';
  return String(value);
}

/**
 * Reads what was typed into a cell. Accepts a decimal comma ("1,5" is 1.5), a leading "+", a
 * typographic minus and exponents ("2e-3"); refuses anything else, and numbers a float32 cannot
 * hold (beyond ±3.4e38).
 * @returns {{ value: number } | { error: string }}  error: why, in words, for the cell's message
 */
export function parseCellText(text) {
  let s = String(text).trim().replace(/[\u2212\u2012\u2013]/g, '-');
  if (s === '') return { error: 'the cell is empty' };
  if (/^[+-]?(\d+,\d*|,\d+)(e[+-]?\d+)?$/i.test(s)) s = s.replace(',', '.');
  if (!/^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(s)) {
    return { error: /^[+-]?(inf|infinity|∞|nan)$/i.test(s) ? `“${text.trim()}” is not a finite number`
      : `“${text.trim()}” is not a number` };
  }
  const value = Number(s);
  if (!Number.isFinite(value) || !Number.isFinite(Math.fround(value)) || Math.abs(value) > FLOAT32_MAX) {
    return { error: `${text.trim()} is beyond float32's range (±3.4e38), which the engine computes in` };
  }
  return { value: value === 0 ? 0 : value };
}
