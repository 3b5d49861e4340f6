// The Train view's "What if?" part: the seeds' experiments (headscope/experiments' EXPERIMENTS)
// run side by side in Workers, one click each: the held-out loss per head count (the mean over
// the seeds) as curves, the table of final accuracies with their spread and time, and what the
// runs measured, in words, whichever way it went. The same seeds give the numbers of
// docs/experiments.md and of `node tools/whatif.mjs`, bit for bit (the SIMD128 build).
import { initWorker } from '../../lib/index.js';
import { describeResult, EXPERIMENTS, formatTable, runExperiment } from '../../lib/experiments.js';
import { button, columnHeads, el, setText, svgEl } from '../common/dom.js';
import { headColor } from '../common/head-colors.js';

const LABELS = { 'log-line': 'How many heads? (log line)', induction: 'How many heads? (induction)' };
const W = 640;
const H = 220;
const PAD = { l: 48, r: 90, t: 12, b: 28 };

/** @param {{ workers?: number, startWorker?: () => Promise<object> }} o */
export function createWhatIf({ workers = 2, startWorker = () => initWorker(undefined, { simd: 'simd128' }) } = {}) {
  const box = el('section', 'hs-train-whatif');
  const title = el('h2', 'hs-prose hs-train-h2', 'What if? The seeds\' experiments, run here');
  const note = el('p', 'hs-note hs-prose', 'The same model (dModel 64, 2 layers, attention only) trained with 1, 2, 4, 8, 16 ' +
    'and 64 heads (head dims 64 to 1), three seeds each, everything else fixed; the runs go side by side in ' +
    `${workers} Workers.`);
  const buttons = el('div', 'hs-train-buttons');
  const runButtons = Object.keys(EXPERIMENTS).map((name) => {
    const b = button(LABELS[name], 'hs-train-whatif-run');
    b.dataset.experiment = name;
    return b;
  });
  const cancel = button('Cancel', 'hs-train-whatif-cancel');
  cancel.disabled = true;
  buttons.append(...runButtons, cancel);
  const progress = el('p', 'hs-train-whatif-progress');
  progress.setAttribute('role', 'status');
  const svg = svgEl('svg', { viewBox: `0 0 ${W} ${H}`, class: 'hs-train-curves-svg hs-train-whatif-chart', role: 'img',
    'aria-label': 'Held-out loss per head count: no experiment run yet' });
  svg.hidden = true;
  const table = el('table', 'hs-train-whatif-table');
  table.hidden = true;
  const verdict = el('p', 'hs-train-whatif-verdict');
  box.append(title, note, buttons, progress, svg, table, verdict);

  let controller = null;
  let engines = [];
  let result = null;

  /** Runs an experiment: EXPERIMENTS[name], with `overrides` (a smaller one, for a quick look or a test). */
  async function run(name, overrides = {}) {
    const options = { ...EXPERIMENTS[name], ...overrides };
    controller?.abort();
    controller = new AbortController();
    const { signal } = controller;
    for (const b of runButtons) b.disabled = true;
    cancel.disabled = false;
    setText(verdict, '');
    table.hidden = true;
    const started = performance.now();
    const curves = new Map();   // heads -> seed -> curve
    try {
      engines = await Promise.all(Array.from({ length: workers }, () => startWorker()));
      let done = 0;
      result = await runExperiment(engines, options, {
        signal,
        onProgress: (p) => {
          if (!curves.has(p.heads)) curves.set(p.heads, new Map());
          const c = curves.get(p.heads);
          if (!c.has(p.seed)) c.set(p.seed, []);
          c.get(p.seed).push(p);
        },
        onRun: (r, k, total) => {
          done++;
          setText(progress, `${name}: ${done} of ${total} runs done (last: ${r.heads} heads, seed ${r.seed}, ` +
            `${(100 * r.finalAccuracy).toFixed(1)}%), ${((performance.now() - started) / 1000).toFixed(0)} s`);
          drawCurves(curves, options.steps);
        },
      });
      drawCurves(curves, options.steps);
      drawTable(result);
      setText(verdict, describeResult(result));
      setText(progress, `${name}: ${result.runs.length} runs in ${((performance.now() - started) / 1000).toFixed(0)} s.`);
      box.dataset.done = name;
    } catch (e) {
      setText(progress, signal.aborted ? `${name}: cancelled.` : `${name}: ${e.message}`);
    } finally {
      for (const e of engines) Promise.resolve(e.terminate?.()).catch(() => {});
      engines = [];
      for (const b of runButtons) b.disabled = false;
      cancel.disabled = true;
    }
  }

  // The mean held-out loss over the seeds at each evaluated step, one line per head count.
  function drawCurves(curves, steps) {
    svg.hidden = false;
    let hi = 0;
    const lines = [];
    [...curves.keys()].sort((a, b) => a - b).forEach((heads, k) => {
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
      label.textContent = `${heads} head${heads > 1 ? 's' : ''}`;
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
    svg.setAttribute('aria-label', `Held-out loss per head count, mean over the seeds: ${lines.map((l) =>
      `${l.heads} heads ${l.points[l.points.length - 1].loss.toFixed(3)}`).join(', ')}`);
  }

  function drawTable(r) {
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

  for (const b of runButtons) b.addEventListener('click', () => { run(b.dataset.experiment); });
  cancel.addEventListener('click', () => controller?.abort());

  return {
    element: box,
    run,
    result: () => result,
    destroy() {
      controller?.abort();
      for (const e of engines) Promise.resolve(e.terminate?.()).catch(() => {});
    },
  };
}
