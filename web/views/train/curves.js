// The Train view's curves: training loss, held-out loss and held-out accuracy against the step, in
// one SVG (loss on the left axis, linear or log; accuracy 0..1 on the right), with the history's
// phase change shaded and the step the heads grid shows as a line. Updated in place: three paths,
// the band, the line and the axis labels, whatever the number of points. Drawn at the SVG's width
// on the screen (svg-width.js), so the axis text keeps its size on a phone.
import { el, setText, svgEl } from '../common/dom.js';
import { onWidth, widthOf } from './svg-width.js';

const WIDE = 640;   // the width drawn at before the SVG is laid out
const H = 220;
const PAD = { l: 48, r: 44, t: 12, b: 28 };

export function createCurves() {
  const box = el('figure', 'hs-train-curves');
  const svg = svgEl('svg', { viewBox: `0 0 ${WIDE} ${H}`, class: 'hs-train-curves-svg', role: 'img' });
  const grid = svgEl('g', { class: 'hs-train-gridlines' });
  const train = svgEl('path', { class: 'hs-train-line-train', fill: 'none' });
  const held = svgEl('path', { class: 'hs-train-line-held', fill: 'none' });
  const acc = svgEl('path', { class: 'hs-train-line-acc', fill: 'none' });
  const labels = svgEl('g', { class: 'hs-train-labels' });
  const phase = svgEl('rect', { class: 'hs-train-phase', y: PAD.t, height: H - PAD.t - PAD.b, width: 0 });
  const cursor = svgEl('line', { class: 'hs-train-cursor', y1: PAD.t, y2: H - PAD.b });
  svg.append(grid, phase, train, held, acc, cursor, labels);
  const legend = el('figcaption', 'hs-train-legend');
  for (const [cls, text] of [['train', 'training loss'], ['held', 'held-out loss'], ['acc', 'held-out accuracy (right axis)']]) {
    const item = el('span', `hs-train-key hs-train-key-${cls}`, text);
    legend.append(item);
  }
  box.append(svg, legend);

  /**
   * @param {{ step: number, trainLoss: number, heldOutLoss: number, accuracy: number }[]} points
   * @param {{ log: boolean, maxStep: number, phase?: { from: number, to: number } | null,
   *   shown?: number | null }} o  phase: the history's phase change (shaded); shown: the step the
   *   heads grid shows when not the last (a line)
   */
  let last = null;   // update's arguments: drawn again at a new width
  onWidth(svg, () => { if (last) update(...last); });
  function update(points, { log = false, maxStep = 0, phase: change = null, shown = null } = {}) {
    last = [points, { log, maxStep, phase: change, shown }];
    const W = widthOf(svg, WIDE);
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    const losses = points.flatMap((p) => [p.trainLoss, p.heldOutLoss]).filter((v) => Number.isFinite(v) && v > 0);
    let lo = losses.length ? Math.min(...losses) : 0.01;
    let hi = losses.length ? Math.max(...losses) : 1;
    if (!log) lo = 0;
    if (log) {
      lo = Math.max(1e-4, lo * 0.9);
      hi = Math.max(hi * 1.1, lo * 10);
    } else {
      hi = Math.max(hi * 1.05, 1e-3);
    }
    const end = Math.max(1, maxStep, ...points.map((p) => p.step));
    const x = (step) => PAD.l + ((W - PAD.l - PAD.r) * step) / end;
    const yLoss = (v) => {
      const t = log ? (Math.log(v) - Math.log(lo)) / (Math.log(hi) - Math.log(lo)) : (v - lo) / (hi - lo);
      return H - PAD.b - (H - PAD.t - PAD.b) * Math.min(1, Math.max(0, t));
    };
    const yAcc = (v) => H - PAD.b - (H - PAD.t - PAD.b) * v;
    const path = (key, y) => {
      let d = '';
      for (const p of points) {
        const v = p[key];
        if (!Number.isFinite(v) || (log && key !== 'accuracy' && v <= 0)) continue;
        d += `${d ? 'L' : 'M'}${x(p.step).toFixed(1)} ${y(v).toFixed(1)}`;
      }
      return d;
    };
    phase.setAttribute('x', change ? x(change.from).toFixed(1) : '0');
    phase.setAttribute('width', change ? Math.max(2, x(change.to) - x(change.from)).toFixed(1) : '0');
    cursor.setAttribute('visibility', shown === null ? 'hidden' : 'visible');
    for (const k of ['x1', 'x2']) cursor.setAttribute(k, x(shown ?? 0).toFixed(1));
    train.setAttribute('d', path('trainLoss', yLoss));
    held.setAttribute('d', path('heldOutLoss', yLoss));
    acc.setAttribute('d', path('accuracy', yAcc));
    // Axes: four loss ticks, accuracy 0 / 0.5 / 1, the first and last step.
    const ticks = [];
    for (let k = 0; k <= 3; k++) {
      const v = log ? Math.exp(Math.log(lo) + ((Math.log(hi) - Math.log(lo)) * k) / 3) : lo + ((hi - lo) * k) / 3;
      ticks.push(['l', yLoss(v), v === 0 ? '0' : v < 0.01 ? v.toExponential(0) : v.toFixed(v < 1 ? 2 : 1)]);
    }
    for (const v of [0, 0.5, 1]) ticks.push(['r', yAcc(v), v.toFixed(1)]);
    grid.replaceChildren(...ticks.filter((t) => t[0] === 'l').map(([, y]) => svgEl('line', { x1: PAD.l, x2: W - PAD.r, y1: y, y2: y })));
    labels.replaceChildren(
      ...ticks.map(([side, y, text]) => {
        const t = svgEl('text', { x: side === 'l' ? PAD.l - 6 : W - PAD.r + 6, y: y + 4, 'text-anchor': side === 'l' ? 'end' : 'start' });
        t.textContent = text;
        return t;
      }),
      ...[[0, 'start'], [end, 'end']].map(([s, anchor]) => {
        const t = svgEl('text', { x: x(s), y: H - 8, 'text-anchor': anchor });
        t.textContent = `step ${s}`;
        return t;
      }),
    );
    const lastPoint = points[points.length - 1];
    svg.setAttribute('aria-label', lastPoint
      ? `Loss curves to step ${lastPoint.step}: held-out loss ${lastPoint.heldOutLoss.toFixed(3)}, accuracy ${(100 * lastPoint.accuracy).toFixed(1)}%`
      : 'Loss curves: no step yet');
    setText(legend.lastChild, `held-out accuracy (right axis)${lastPoint ? `: ${(100 * lastPoint.accuracy).toFixed(1)}%` : ''}`);
  }
  return { element: box, update };
}
