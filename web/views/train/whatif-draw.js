// The what-if runner's drawings (whatif.js): the mean held-out loss over the seeds per head count
// as curves (one line each, in the heads' colours), and the table of final accuracies.
import { columnHeads, el, svgEl } from '../common/dom.js';
import { headColor } from '../common/head-colors.js';
import { formatTable } from '../../lib/experiments.js';

export const W = 640;
export const H = 220;
const PAD = { l: 48, r: 90, t: 12, b: 28 };

// The mean held-out loss over the seeds at each evaluated step, one line per head count (or per
// variant: the map's keys are then the variants' names, drawn in the experiment's `order`, not in
// the order the Workers' runs happened to report).
export function drawCurves(svg, curves, steps, order = null) {
  svg.hidden = false;
  let hi = 0;
  const lines = [];
  const keys = order ? order.filter((name) => curves.has(name)) : [...curves.keys()].sort((a, b) => a - b);
  keys.forEach((heads, k) => {
    const bySeed = [...curves.get(heads).values()];
    const points = bySeed[0].map((p, i) => {
      const vals = bySeed.map((c) => c[i]?.heldOutLoss).filter(Number.isFinite);
      return { step: p.step, loss: vals.reduce((a, b) => a + b, 0) / vals.length };
    });
    for (const p of points) hi = Math.max(hi, p.loss);
    lines.push({ heads, points, color: headColor(k) });
  });
  hi = Math.max(hi * 1.05, 1e-3);
  const x = (s) => PAD.l + ((W - PAD.l - PAD.r) * s) / steps;
  const y = (v) => H - PAD.b - (H - PAD.t - PAD.b) * (v / hi);
  const children = [];
  for (const { heads, points, color } of lines) {
    const path = svgEl('path', { fill: 'none', 'stroke-width': 2, d: points.map((p, i) => `${i ? 'L' : 'M'}${x(p.step).toFixed(1)} ${y(p.loss).toFixed(1)}`).join('') });
    path.style.stroke = color;
    path.dataset.heads = String(heads);
    const last = points[points.length - 1];
    const label = svgEl('text', { x: x(last.step) + 6, y: y(last.loss) + 4, class: 'hs-train-whatif-label' });
    label.textContent = typeof heads === 'number' ? `${heads} head${heads > 1 ? 's' : ''}` : heads;
    label.style.fill = color;
    children.push(path, label);
  }
  for (const [v, text] of [[0, '0'], [hi, hi.toFixed(2)]]) {
    const t = svgEl('text', { x: PAD.l - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'hs-train-whatif-axis' });
    t.textContent = text;
    children.push(t);
  }
  const s = svgEl('text', { x: W - PAD.r, y: H - 8, 'text-anchor': 'end', class: 'hs-train-whatif-axis' });
  s.textContent = `step ${steps}`;
  children.push(s);
  svg.replaceChildren(...children);
  svg.setAttribute('aria-label', `Held-out loss per ${typeof keys[0] === 'number' ? 'head count' : 'variant'}, mean over the seeds: ${lines.map((l) =>
    `${typeof l.heads === 'number' ? `${l.heads} heads` : l.heads} ${l.points[l.points.length - 1].loss.toFixed(3)}`).join(', ')}`);
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
