// The what-if runner (the Train view's "What if?" part): the seeds' experiments (headscope/
// experiments' EXPERIMENTS) run side by side in Workers, one click each: the held-out loss per head
// count on a log axis (the mean over the seeds, in a band from their min to their max), the table
// of final accuracies with their spread and time, and what the runs measured, in words, whichever
// way it went (a best only when it is above the others on every seed). The same seeds give the
// numbers of docs/experiments.md and of `node tools/whatif.mjs` (the SIMD128 build: the accuracies
// bit for bit, the losses to an ulp of the browser's Math.exp; tests/browser/whatif.test.js).
//
//   const runner = whatIf.create(root, { workers: 2 });
//   await runner.update({ experiment: 'log-line' });   // runs it (as its button does)
//   runner.getState();                                  // { experiment: 'log-line' }
import { HeadscopeError } from '../../lib/errors.js';
import { initWorker } from '../../lib/index.js';
import { describeResult, EXPERIMENTS, runExperiment } from '../../lib/experiments.js';
import { defineView } from '../common/component.js';
import { button, el, setText, statusEl, svgEl } from '../common/dom.js';
import { drawCurves, drawTable, H, W } from './whatif-draw.js';
import { onWidth, widthOf } from './svg-width.js';

const LABELS = { 'log-line': 'How many heads? (log line)', induction: 'How many heads? (induction)',
  'kv-heads': 'K/V heads: 8, 2 or 1? (induction)', positions: 'Learned positions, ALiBi, a window or RoPE? (induction)',
  sinks: 'Attention sinks or none? (induction)' };
const ownWorker = () => initWorker(undefined, { simd: 'simd128' });

/**
 * The what-if runner. Options: engine (initWorker()'s API: the runs go on it in turn, and it stays
 * the caller's) or workers (how many Workers of its own run side by side, 2) and startWorker (starts
 * one: initWorker() of the SIMD128 build); state ({ experiment }: run it at once); buttons (more
 * buttons for its row). Extras: run(name, overrides) runs EXPERIMENTS[name] with `overrides` (a
 * smaller one, for a quick look or a test), result() the last run's result.
 */
export const whatIf = defineView('whatIf', createWhatIf, { engine: 'transformer', optionalEngine: true });

function createWhatIf(root, { engine, state, workers = 2, startWorker = ownWorker, buttons: extraButtons = [] }) {
  const box = el('section', 'hs-train-whatif');
  const title = el('h2', 'hs-prose hs-train-h2', 'What if? The seeds\' experiments, run here');
  const note = el('p', 'hs-note hs-prose', 'The same model (dModel 64, 2 layers, attention only) trained with 1, 2, 4, 8, 16 ' +
    'and 64 heads (head dims 64 to 1), three seeds each, everything else fixed; or with 8 heads and the attention ' +
    `variants (K/V heads; learned positions, ALiBi, a window, RoPE; attention sinks). The runs go side by side in ${workers} Workers. ` +
    'The chart: the held-out loss on a log scale, a line per head count (or variant) through the mean of the seeds, in a band from their ' +
    'lowest to their highest. A verdict names a best only when it is above the others on every seed.');
  const buttons = el('div', 'hs-train-buttons');
  const runButtons = Object.keys(EXPERIMENTS).map((name) => {
    const b = button(LABELS[name], 'hs-train-whatif-run');
    b.dataset.experiment = name;
    return b;
  });
  const cancel = button('Cancel', 'hs-train-whatif-cancel');
  cancel.disabled = true;
  buttons.append(...runButtons, cancel, ...extraButtons);
  const progress = statusEl('p', 'hs-train-whatif-progress');
  const svg = svgEl('svg', { viewBox: `0 0 ${W} ${H}`, class: 'hs-train-curves-svg hs-train-whatif-chart', role: 'img',
    'aria-label': 'Held-out loss per head count: no experiment run yet' });
  // An SVG element has no `hidden` property (it is HTMLElement's): the attribute hides it, until
  // the first run draws.
  svg.setAttribute('hidden', '');
  const table = el('table', 'hs-train-whatif-table');
  table.hidden = true;
  const verdict = el('p', 'hs-train-whatif-verdict');
  box.append(title, note, buttons, progress, svg, table, verdict);
  root.replaceChildren(box);

  // The chart at the SVG's width on the screen, drawn again when that changes.
  let drawn = null;   // drawCurves' arguments after the svg
  const draw = (...args) => {
    drawn = args;
    svg.removeAttribute('hidden');   // laid out first, to be measured
    drawCurves(svg, ...args, widthOf(svg, W));
  };
  onWidth(svg, () => { if (drawn) draw(...drawn); });

  let controller = null;
  let engines = [];
  let result = null;
  let experiment = null;

  /** Runs an experiment: EXPERIMENTS[name], with `overrides` (a smaller one, for a quick look or a test). */
  async function run(name, overrides = {}) {
    const options = { ...EXPERIMENTS[name], ...overrides };
    experiment = name;
    controller?.abort();
    controller = new AbortController();
    const { signal } = controller;
    for (const b of runButtons) b.disabled = true;
    cancel.disabled = false;
    setText(verdict, '');
    table.hidden = true;
    svg.setAttribute('hidden', '');
    const started = performance.now();
    const curves = new Map();   // heads (or the variant's name) -> seed -> curve
    const order = options.variants?.map((v) => v.name) ?? null;
    try {
      engines = engine ? [engine] : await Promise.all(Array.from({ length: workers }, () => startWorker()));
      let done = 0;
      result = await runExperiment(engines, options, {
        signal,
        onProgress: (p) => {
          const line = p.variant ?? p.heads;
          if (!curves.has(line)) curves.set(line, new Map());
          const c = curves.get(line);
          if (!c.has(p.seed)) c.set(p.seed, []);
          c.get(p.seed).push(p);
        },
        onRun: (r, k, total) => {
          done++;
          setText(progress, `${name}: ${done} of ${total} runs done (last: ${r.variant ?? `${r.heads} heads`}, seed ${r.seed}, ` +
            `${(100 * r.finalAccuracy).toFixed(1)}%), ${((performance.now() - started) / 1000).toFixed(0)} s`);
          draw(curves, options.steps, order);
        },
      });
      draw(curves, options.steps, order);
      drawTable(table, result);
      setText(verdict, describeResult(result));
      setText(progress, `${name}: ${result.runs.length} runs in ${((performance.now() - started) / 1000).toFixed(0)} s.`);
      box.dataset.done = name;
    } catch (e) {
      setText(progress, signal.aborted ? `${name}: cancelled.` : `${name}: ${e.message}`);
    } finally {
      endEngines();
      for (const b of runButtons) b.disabled = false;
      cancel.disabled = true;
    }
  }

  // The Workers it started end with the run; an engine given by the caller stays.
  function endEngines() {
    if (!engine) for (const e of engines) Promise.resolve(e.terminate?.()).catch(() => {});
    engines = [];
  }

  /** update({ experiment }): runs EXPERIMENTS[experiment]; resolves when it has run. */
  function update(patch) {
    const known = Object.keys(EXPERIMENTS);
    if (patch === null || typeof patch !== 'object' || Object.keys(patch).some((k) => k !== 'experiment') ||
        !known.includes(patch.experiment)) {
      throw new HeadscopeError('INVALID_ARGUMENT', `setState: state.experiment: expected one of ${known.join(', ')}`);
    }
    return run(patch.experiment);
  }

  for (const b of runButtons) b.addEventListener('click', () => { run(b.dataset.experiment); });
  cancel.addEventListener('click', () => controller?.abort());
  if (state !== undefined) update(state).catch(() => {});

  return {
    update,
    /** { experiment }: the experiment last started, or null. */
    getState: () => ({ experiment }),
    run,
    result: () => result,
    destroy() {
      controller?.abort();
      endEngines();
      root.replaceChildren();
    },
  };
}
