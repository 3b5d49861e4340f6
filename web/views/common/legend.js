// The legend of a colour scale (scale.js): swatches from min to max, the ends and the meaning in words.
import { el } from './dom.js';
import { colorFor } from './scale.js';
import { formatNumber } from './numbers.js';

/** A legend for a scale: swatches from min to max with the ends and the meaning spelled out. */
export function renderLegend(root, scale) {
  const box = el('div', 'hs-legend');
  const steps = 9;
  const swatches = el('div', 'hs-legend-swatches');
  swatches.setAttribute('aria-hidden', 'true');
  for (let k = 0; k < steps; k++) {
    const v = scale.min + ((scale.max - scale.min) * k) / (steps - 1);
    const s = el('span', 'hs-legend-swatch');
    s.style.backgroundColor = colorFor(v, scale);
    swatches.append(s);
  }
  const text = scale.kind === 'weights'
    ? 'Attention weight: no colour = 0, deep teal = 1 (colour grows with the square root, so small ' +
      'weights show). Each row sums to 1 (a fully masked row is all 0).'
    : `Values: blue below 0 (down to ${formatNumber(scale.min, 2)}), red above 0 (up to ` +
      `${formatNumber(scale.max, 2)}); stronger colour = larger magnitude.`;
  box.append(swatches, el('span', 'hs-legend-text', text));
  root.replaceChildren(box);
  return box;
}
