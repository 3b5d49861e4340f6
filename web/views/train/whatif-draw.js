// The what-if runner's drawings (whatif.js): the held-out loss per head count (or variant) against
// the training step, on a log axis (the step-0 loss, near ln V, would squash every later loss onto
// the floor of a linear one), each a line through the mean over the seeds in a band from their min
// to their max (a mean alone hides whether two head counts differ by more than a seed's luck);
// and the table of final accuracies.
import { columnHeads, el, svgEl } from '../common/dom.js';
import { headColor } from '../common/head-colors.js';
import { formatTable } from '../../lib/experiments.js';

export const W = 640;
export const H = 260;
// Room on the left for the loss ticks and the axis title, on the right for the lines' labels
// (a variant's name: "MHA (8 K/V heads)"), below for the step ticks and title.
export const PAD = Object.freeze({ l: 58, r: 124, t: 22, b: 42 });
// Label rows: 11px text needs about 13 units between baselines not to overlap.
const LABEL_GAP = 13;
// The lowest loss the axis reaches: a run that fits its held-out rows exactly would otherwise
// stretch the axis over decades of nothing.
const FLOOR = 1e-5;

/**
 * Per line (head count, or variant in `order`): at each evaluated step the mean, min and max of
 * the held-out loss over the seeds that reported it.
 */
export function seriesOf(curves, order = null) {
  const keys = order ? order.filter((name) => curves.has(name)) : [...curves.keys()].sort((a, b) => a - b);
  return keys.map((key) => {
    const bySeed = [...curves.get(key).values()];
    const points = bySeed[0].map((p, i) => {
      const vals = bySeed.map((c) => c[i]?.heldOutLoss).filter(Number.isFinite);
      return { step: p.step, mean: vals.reduce((a, b) => a + b, 0) / vals.length, min: Math.min(...vals), max: Math.max(...vals), seeds: vals.length };
    });
    return { key, points };
  });
}

/**
 * The log axis: from the decade below the lowest loss to a little above the highest (not the next
 * decade: the step-0 loss would leave most of it empty), at least one decade; ticks at the powers
 * of ten in it.
 */
export function logDomain(series) {
  const values = series.flatMap((s) => s.points.flatMap((p) => [p.min, p.max])).filter((v) => v > 0);
  const a = Math.floor(Math.log10(Math.max(Math.min(...values, 1), FLOOR)));
  const hi = Math.max(Math.max(...values, 0) * 1.15, pow10(a + 1));
  const b = Math.floor(Math.log10(hi) + 1e-9);
  return { lo: pow10(a), hi, decades: Array.from({ length: b - a + 1 }, (_, k) => a + k) };
}

// 10^k, correctly rounded (10 ** -5 is 9.999999999999999e-6, and a tick's value must be its label's).
const pow10 = (k) => Number(`1e${k}`);

/** A power of ten as its decimal: 0.001, 0.1, 1, 10. */
export function decadeLabel(k) {
  return k < 0 ? pow10(k).toFixed(-k) : String(pow10(k));
}

/** Round steps for the x axis: 0 and multiples of 1, 2 or 5 x 10^k, at most six ticks, and the last step. */
export function stepTicks(steps) {
  const raw = steps / 5;
  const p = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
  const every = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
  const ticks = [];
  for (let s = 0; s < steps - every / 2; s += every) ticks.push(s);
  ticks.push(steps);
  return ticks;
}

/**
 * Label positions that do not overlap: each wants to sit at its line's end (`want`), in order of
 * height they are pushed apart to `gap` and kept in [top, bottom]. Returns the positions in the
 * order given. (Lines that end at the same loss, as several head counts do at 100% accuracy, would
 * otherwise stack their labels on one another.)
 */
export function spreadLabels(want, gap, top, bottom) {
  const order = want.map((y, i) => ({ y: Math.min(Math.max(y, top), bottom), i })).sort((a, b) => a.y - b.y || a.i - b.i);
  for (let k = 1; k < order.length; k++) order[k].y = Math.max(order[k].y, order[k - 1].y + gap);
  for (let k = order.length - 1; k >= 0; k--) {
    order[k].y = Math.min(order[k].y, k === order.length - 1 ? bottom : order[k + 1].y - gap);
  }
  for (let k = 0; k < order.length; k++) order[k].y = Math.max(order[k].y, k === 0 ? top : order[k - 1].y + gap);
  const out = new Array(want.length);
  for (const { y, i } of order) out[i] = y;
  return out;
}

const text = (attributes, content) => {
  const t = svgEl('text', attributes);
  t.textContent = content;
  return t;
};

// The held-out loss per head count (or per variant: the map's keys are then the variants' names,
// drawn in the experiment's `order`, not in the order the Workers' runs happened to report).
// width: the SVG's width on the screen in CSS px (svg-width.js), so its text keeps its size.
export function drawCurves(svg, curves, steps, order = null, width = W) {
  svg.removeAttribute('hidden');
  svg.setAttribute('viewBox', `0 0 ${width} ${H}`);
  const series = seriesOf(curves, order);
  const { lo, hi, decades } = logDomain(series);
  const x = (s) => PAD.l + ((width - PAD.l - PAD.r) * s) / steps;
  const bottom = H - PAD.b;
  const y = (v) => bottom - ((bottom - PAD.t) * (Math.log10(Math.max(v, lo)) - Math.log10(lo))) / (Math.log10(hi) - Math.log10(lo));
  const f = (v) => v.toFixed(1);
  const axes = svgEl('g', { class: 'hs-train-gridlines' });
  const ticks = [];
  for (const k of decades) {
    const v = pow10(k);
    axes.append(svgEl('line', { x1: PAD.l, x2: width - PAD.r, y1: f(y(v)), y2: f(y(v)) }));
    ticks.push(text({ x: PAD.l - 6, y: f(y(v) + 4), 'text-anchor': 'end', class: 'hs-train-whatif-axis hs-train-whatif-ytick',
      'data-value': v, 'data-y': f(y(v)) }, decadeLabel(k)));
  }
  for (const s of stepTicks(steps)) {
    ticks.push(text({ x: f(x(s)), y: bottom + 14, 'text-anchor': 'middle', class: 'hs-train-whatif-axis hs-train-whatif-xtick' }, String(s)));
  }
  const titles = [
    text({ x: (PAD.l + width - PAD.r) / 2, y: H - 6, 'text-anchor': 'middle', class: 'hs-train-whatif-axis hs-train-whatif-xtitle' }, 'training step'),
    text({ transform: `translate(14 ${(PAD.t + bottom) / 2}) rotate(-90)`, 'text-anchor': 'middle', class: 'hs-train-whatif-axis hs-train-whatif-ytitle' },
      'held-out loss (log scale)'),
    text({ x: PAD.l, y: PAD.t - 8, class: 'hs-train-whatif-axis' }, 'line: mean over the seeds; band: their min to max'),
  ];
  const bands = [];
  const lines = [];
  const ends = [];
  series.forEach(({ key, points }, k) => {
    const color = headColor(k);
    const band = svgEl('polygon', { class: 'hs-train-whatif-band',
      points: [...points.map((p) => `${f(x(p.step))},${f(y(p.max))}`), ...[...points].reverse().map((p) => `${f(x(p.step))},${f(y(p.min))}`)].join(' ') });
    band.style.fill = color;
    band.dataset.heads = String(key);
    bands.push(band);
    const path = svgEl('path', { class: 'hs-train-whatif-line', fill: 'none', 'stroke-width': 2,
      d: points.map((p, i) => `${i ? 'L' : 'M'}${f(x(p.step))} ${f(y(p.mean))}`).join('') });
    path.style.stroke = color;
    path.dataset.heads = String(key);
    lines.push(path);
    ends.push({ key, color, last: points[points.length - 1] });
  });
  const at = spreadLabels(ends.map((e) => y(e.last.mean) + 4), LABEL_GAP, PAD.t + 4, bottom);
  const labels = [];
  ends.forEach(({ key, color, last }, i) => {
    // A label moved off its line's end gets a leader to it.
    if (Math.abs(at[i] - 4 - y(last.mean)) > 1) {
      const leader = svgEl('line', { class: 'hs-train-whatif-leader', x1: f(x(last.step)), y1: f(y(last.mean)), x2: f(x(last.step) + 8), y2: f(at[i] - 4) });
      leader.style.stroke = color;
      labels.push(leader);
    }
    const label = text({ x: f(x(last.step) + 10), y: f(at[i]), class: 'hs-train-whatif-label' },
      typeof key === 'number' ? `${key} head${key > 1 ? 's' : ''}` : key);
    label.style.fill = color;
    label.dataset.heads = String(key);
    labels.push(label);
  });
  svg.replaceChildren(axes, ...bands, ...lines, ...labels, ...ticks, ...titles);
  const what = typeof series[0]?.key === 'number' ? 'head count' : 'variant';
  svg.setAttribute('aria-label', `Held-out loss per ${what} against the training step, log scale, the mean over the seeds and their min to max: ` +
    ends.map(({ key, last }) => `${typeof key === 'number' ? `${key} heads` : key} ${last.mean.toFixed(3)} (${last.min.toFixed(3)} to ${last.max.toFixed(3)})`).join(', '));
}

export function drawTable(table, r) {
  table.hidden = false;
  const md = formatTable(r).split('\n');
  const cells = (line) => line.split('|').slice(1, -1).map((c) => c.trim());
  const thead = el('thead');
  thead.append(columnHeads(cells(md[0])));
  const tbody = el('tbody');
  for (const line of md.slice(2)) {
    const tr = el('tr');
    cells(line).forEach((c, k) => {
      const cell = el(k === 0 ? 'th' : 'td', '', c);
      if (k === 0) cell.scope = 'row';
      tr.append(cell);
    });
    tbody.append(tr);
  }
  table.replaceChildren(thead, tbody);
}
