// The Train view's history section (history.js keeps the records): every head's four detector
// scores against the step, one small chart per head (layers as rows, heads as columns, as the
// heads grid), each marked where the head first got a label and shaded where the held-out loss
// fell fastest (the phase change); a sentence per first label with buttons to show the heads at
// that step and the one before; the scrubber (a range over the records that kept their patterns)
// and "Back to now". Axis words are HTML, not SVG text, so they stay legible at phone width.
import { button, el, labelled, setText, svgEl } from '../common/dom.js';
import { formatNumber } from '../common/numbers.js';
import { DETECTORS } from '../../lib/detectors.js';
import { DETECTOR_LABELS, LABEL_THRESHOLD } from './detectors.js';
import { PATTERN_BUDGET_BYTES, PHASE } from './history.js';

const W = 200;
const H = 64;
/** At most this many points per line: a long 1-step run is drawn from every k-th record. */
const MAX_POINTS = 300;

const kib = (bytes) => (bytes >= 2 ** 20 ? `${formatNumber(bytes / 2 ** 20, 1)} MiB` : `${formatNumber(bytes / 1024, 0)} KiB`);

/**
 * @param {{ show: (step: number | null) => void }} o  show: the reader picked a recorded step (null:
 *   back to now)
 */
export function createHistoryChart({ show }) {
  const box = el('section', 'hs-train-history');
  box.setAttribute('aria-label', 'Training history');
  const title = el('h2', 'hs-prose hs-train-h2', 'History: each head\'s detector scores, step by step');
  const legend = el('p', 'hs-train-legend hs-train-history-legend');
  for (const d of DETECTORS) legend.append(el('span', `hs-train-key hs-train-key-${d}`, DETECTOR_LABELS[d]));
  legend.append(el('span', 'hs-train-key hs-train-key-threshold', `label threshold ${LABEL_THRESHOLD}`),
    el('span', 'hs-train-key hs-train-key-phase', 'phase change'));
  const axes = el('p', 'hs-note hs-train-history-axes');
  const phase = el('p', 'hs-train-history-phase');
  const firsts = el('ul', 'hs-train-history-firsts');
  const panels = el('div', 'hs-train-history-grid');
  const scrub = el('input', 'hs-train-history-range');
  scrub.type = 'range';
  scrub.name = 'historyStep';
  scrub.min = '0';
  scrub.step = '1';
  const scrubLabel = labelled('Show the heads at a recorded step', scrub, 'hs-train-history-scrub');
  const shownText = el('output', 'hs-train-history-shown');
  const now = button('Back to now', 'hs-train-now');
  now.name = 'now';
  const scrubRow = el('div', 'hs-train-history-controls');
  scrubRow.append(scrubLabel, shownText, now);
  const memory = el('p', 'hs-note hs-train-history-memory');
  box.append(title, legend, axes, phase, firsts, panels, scrubRow, memory);

  let steps = [];   // the recorded steps with patterns: the scrubber's positions
  scrub.addEventListener('input', () => {
    const k = Number(scrub.value);
    // The scrubber's last position is "now": the newest record is the model as it is.
    show(k >= steps.length - 1 ? null : steps[k]);
  });
  now.addEventListener('click', () => show(null));
  firsts.addEventListener('click', (e) => {
    const b = e.target.closest('button[data-step]');
    if (b) show(Number(b.dataset.step));
  });

  /**
   * @param {object} history  history.js's
   * @param {{ layers: number, heads: number, shown: number | null, now: number, maxStep: number }} o
   *   shown: the step the grid shows (null: now); now: the model's step; maxStep: the x axis's end
   *   (the loss curves')
   */
  function update(history, { layers, heads, shown, now: nowStep, maxStep }) {
    const records = history.records();
    const x = (step) => (W * step) / Math.max(1, maxStep);
    const y = (v) => H - 2 - (H - 4) * Math.max(0, Math.min(1, v));
    const stride = Math.max(1, Math.ceil(records.length / MAX_POINTS));
    const drawn = records.filter((r, i) => i % stride === 0 || i === records.length - 1);
    const change = history.phaseChange();
    const labels = history.firsts();
    setText(axes, `Across: step 0 to ${maxStep} (as the loss curves above). Up: the detector's score, 0 to 1; ` +
      `a head gets a label when its highest score is above ${LABEL_THRESHOLD} (the heads grid's rule). ` +
      'A circle marks the step each head first got each label.');
    setText(phase, change
      ? `Phase change: the held-out loss (smoothed over ${PHASE.window} steps) fell fastest between steps ${change.from} and ` +
        `${change.to}, from ${formatNumber(change.lossFrom, 3)} to ${formatNumber(change.lossTo, 3)}.`
      : `No phase change yet: no fall of the held-out loss after step ${PHASE.skip} is ${PHASE.factor} times steeper than the run's mean fall.`);
    phase.dataset.from = change ? String(change.from) : '';
    phase.dataset.to = change ? String(change.to) : '';

    const key = labels.map((f) => `${f.layer}.${f.head}.${f.detector}.${f.step}`).join(' ');
    if (firsts.dataset.key !== key) {
      firsts.dataset.key = key;
      firsts.replaceChildren(...labels.map((f) => {
        const li = el('li');
        li.dataset.head = `${f.layer}.${f.head}`;
        li.dataset.detector = f.detector;
        li.dataset.step = String(f.step);
        li.append(`L${f.layer} H${f.head} first labelled "${DETECTOR_LABELS[f.detector]}" at step ${f.step}. Show step `);
        if (f.before !== null) {
          const b = button(`${f.before} (before)`, 'hs-train-history-show');
          b.dataset.step = String(f.before);
          b.name = 'show-before';
          li.append(b, ' ');
        }
        const at = button(String(f.step), 'hs-train-history-show');
        at.dataset.step = String(f.step);
        at.name = 'show-at';
        li.append(at);
        return li;
      }));
    }
    for (const b of firsts.querySelectorAll('button[data-step]')) b.disabled = !history.at(Number(b.dataset.step))?.patterns;

    // One chart per head, built when the shape changes.
    const n = layers * heads;
    if (panels.dataset.shape !== `${layers}x${heads}`) {
      panels.dataset.shape = `${layers}x${heads}`;
      panels.style.setProperty('--hs-train-heads', String(Math.min(heads, 8)));
      panels.replaceChildren(...Array.from({ length: n }, (_, k) => {
        const [l, h] = [Math.floor(k / heads), k % heads];
        const fig = el('figure', 'hs-train-history-head');
        fig.dataset.head = `${l}.${h + 1}`;
        const svg = svgEl('svg', { viewBox: `0 0 ${W} ${H}`, class: 'hs-train-history-svg', role: 'img', preserveAspectRatio: 'none' });
        svg.append(svgEl('rect', { class: 'hs-train-phase', y: 0, height: H }),
          svgEl('line', { class: 'hs-train-threshold', x1: 0, x2: W, y1: y(LABEL_THRESHOLD), y2: y(LABEL_THRESHOLD) }),
          ...DETECTORS.map((d) => svgEl('path', { class: `hs-train-hist-line hs-train-hist-${d}`, fill: 'none', 'vector-effect': 'non-scaling-stroke' })),
          svgEl('g', { class: 'hs-train-hist-marks' }),
          svgEl('line', { class: 'hs-train-cursor', y1: 0, y2: H, 'vector-effect': 'non-scaling-stroke' }));
        fig.append(el('figcaption', 'hs-train-history-name'), svg);
        return fig;
      }));
    }
    for (let k = 0; k < n; k++) {
      const [l, h] = [Math.floor(k / heads), k % heads];
      const fig = panels.children[k];
      const svg = fig.lastChild;
      const [band, , ...rest] = svg.children;
      const paths = rest.slice(0, DETECTORS.length);
      const [marks, cursor] = rest.slice(DETECTORS.length);
      band.setAttribute('x', change ? x(change.from).toFixed(1) : '0');
      band.setAttribute('width', change ? Math.max(1.5, x(change.to) - x(change.from)).toFixed(1) : '0');
      DETECTORS.forEach((d, j) => {
        let path = '';
        for (const r of drawn) {
          const v = r.scores[l]?.[d]?.[h];
          if (Number.isFinite(v)) path += `${path ? 'L' : 'M'}${x(r.step).toFixed(1)} ${y(v).toFixed(1)}`;
        }
        paths[j].setAttribute('d', path);
      });
      const mine = labels.filter((f) => f.layer === l && f.head === h + 1);
      marks.replaceChildren(...mine.map((f) => {
        const v = history.at(f.step)?.scores[l][f.detector][h] ?? LABEL_THRESHOLD;
        const c = svgEl('circle', { class: `hs-train-hist-mark hs-train-hist-${f.detector}`, cx: x(f.step).toFixed(1), cy: y(v).toFixed(1), r: 3.5 });
        c.append(svgEl('title'));
        c.firstChild.textContent = `first "${DETECTOR_LABELS[f.detector]}" at step ${f.step}`;
        return c;
      }));
      const at = shown ?? nowStep;
      cursor.setAttribute('x1', x(at).toFixed(1));
      cursor.setAttribute('x2', x(at).toFixed(1));
      const name = `L${l} H${h + 1}${mine.length ? `: ${mine.map((f) => `${DETECTOR_LABELS[f.detector]} from step ${f.step}`).join(', ')}` : ''}`;
      setText(fig.firstChild, name);
      svg.setAttribute('aria-label', `Layer ${l} head ${h + 1}'s detector scores to step ${records.at(-1)?.step ?? 0}` +
        `${mine.length ? `; ${mine.map((f) => `first ${DETECTOR_LABELS[f.detector]} at step ${f.step}`).join('; ')}` : '; no label yet'}`);
    }

    // The scrubber: the steps whose patterns are kept; its value follows the shown step.
    steps = records.filter((r) => r.patterns).map((r) => r.step);
    scrub.max = String(Math.max(0, steps.length - 1));
    const k = shown === null ? steps.length - 1 : steps.indexOf(shown);
    scrub.value = String(Math.max(0, k));
    scrub.setAttribute('aria-valuetext', shown === null ? `step ${nowStep}, now` : `step ${shown}`);
    scrub.disabled = steps.length < 2;
    setText(shownText, shown === null ? `now: step ${nowStep}` : `step ${shown} (the model is at step ${nowStep})`);
    now.disabled = shown === null;
    const withPatterns = steps.length;
    setText(memory, `Kept: ${records.length} evaluations, ${withPatterns} with every head's pattern ` +
      `(${kib(history.bytes())}; ${withPatterns ? kib(history.bytes() / withPatterns) : '0 KiB'} each). Past ${kib(PATTERN_BUDGET_BYTES)}, ` +
      'every second older evaluation drops its patterns (its scores stay); each first label and the evaluation before it are kept.');
    memory.dataset.bytes = String(history.bytes());
  }

  return { element: box, update };
}
