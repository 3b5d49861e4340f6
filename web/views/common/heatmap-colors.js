// The heatmaps' colours: the weights scale as a table of 257 colours (and of RGBA words for the
// image path), a stretched scale for near-uniform attention, and the theme's colours read from the
// CSS variables of the page or shadow root a canvas is in.
import { colorFor, makeScale } from './scale.js';

export const WEIGHT_SCALE = makeScale([], 'weights');

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
export const WEIGHT_WORDS = () => {
  if (weightWords === null) {
    weightWords = new Uint32Array(WEIGHT_COLORS.length);
    new Uint8Array(weightWords.buffer).set(WEIGHT_COLORS.flatMap((c) => rgbaBytes(c)));
  }
  return weightWords;
};
export const wordOf = (bytes) => new Uint32Array(Uint8Array.from(bytes).buffer)[0];

/** The WEIGHT_COLORS index of a value on a weights scale (stretched or not), or -1 off the scale. */
export function weightIndex(value, scale) {
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

// 'rgba(r, g, b, a)' -> [r, g, b, 255 a], cached: the image path writes bytes, not styles.
const rgbaCache = new Map();
export function rgbaBytes(color) {
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

