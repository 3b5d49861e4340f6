// Colour scales of the matrices and heatmaps: 'weights' (0..1, one hue) and 'signed' (blue below
// 0, red above), and the colour of a value on one.

/** Colour scales. 'weights': 0..1, one hue. 'signed': blue below 0, red above, white at 0. */
export function makeScale(values, kind = 'signed') {
  if (kind === 'weights') return { kind, min: 0, max: 1 };
  let max = 0;
  for (const v of values) if (Number.isFinite(v)) max = Math.max(max, Math.abs(v));
  return { kind, min: -max, max: max || 1 };
}

// Colours are rgba over the page background, so one scale reads in the light and the dark
// colour scheme (and on a canvas, which cannot resolve CSS variables). The weights' teal and its
// strongest alpha are chosen so that, over either scheme's background (#ffffff, #0d1117), a
// weight of 1 has at least 3:1 contrast against an empty cell (0) and the scheme's text on it
// at least 4.5:1 (3.24 and 4.87 light, 3.27 and 4.90 dark). The alpha grows with the square root
// of the weight, so that small weights are visible: 0.25 already gets half the colour.
const WEIGHT_RGB = [36, 134, 122];
const WEIGHT_ALPHA = 0.82;
const BLUE = [37, 99, 235];
const RED = [220, 38, 38];
const LEVELS = 256;
const rgba = (rgb, a) => `rgba(${rgb[0]}, ${rgb[1]}, ${rgb[2]}, ${a.toFixed(3)})`;
const WEIGHT_PALETTE = Array.from({ length: LEVELS + 1 }, (_, k) => rgba(WEIGHT_RGB, WEIGHT_ALPHA * Math.sqrt(k / LEVELS)));
const signedAlpha = (k) => 0.08 + 0.62 * (k / LEVELS);
const RED_PALETTE = Array.from({ length: LEVELS + 1 }, (_, k) => rgba(RED, signedAlpha(k)));
const BLUE_PALETTE = Array.from({ length: LEVELS + 1 }, (_, k) => rgba(BLUE, signedAlpha(k)));

/**
 * The colour of a value as a small integer (equal integers, equal colours): -1 for no colour
 * (NaN, ±∞), 0..256 for a weight or a value >= 0, 257..513 for a value < 0.
 */
export function colorIndex(value, scale) {
  if (!Number.isFinite(value)) return -1;
  if (scale.kind === 'weights') return Math.round(Math.min(1, Math.max(0, value)) * LEVELS);
  const k = Math.round(Math.min(1, Math.abs(value) / scale.max) * LEVELS);
  return value < 0 ? LEVELS + 1 + k : k;
}

export function paletteColor(index, kind) {
  if (index < 0) return 'transparent';
  if (kind === 'weights') return WEIGHT_PALETTE[index];
  return index > LEVELS ? BLUE_PALETTE[index - LEVELS - 1] : RED_PALETTE[index];
}

/**
 * Background colour of a value, as rgba over the page background so the same scale reads in light
 * and dark colour schemes. -Infinity (a masked score) gets a hatched class instead (see headscope.css).
 */
export function colorFor(value, scale) {
  return paletteColor(colorIndex(value, scale), scale.kind);
}
