// The Train view: a small transformer learns a built-in task in a Web Worker while the reader
// watches its loss curves, every head's attention on the task's probe row, and the head
// detectors (previous-token, first-token, same-token, induction) move as the heads specialise.
// Then switch heads off and see the held-out loss change, and see each head's importance (the
// gradient of the loss with respect to its gate, Michel et al. 2019).
//
// All training and every forward pass run in the view's own Worker (session.js): the page's
// thread only draws, so it never holds a task for long. This file makes the component (create)
// and draws an evaluation. Its parts: options.js, controls.js, skeleton.js, session.js (the
// engine, one model, the job queue, chunks and evaluations), playback.js (play, pause, step,
// reset, a new setup, training to a step), rate.js (steps per second), heads-grid.js, variants.js
// (the variant's invariants), detectors.js, ablation.js, inside.js (the causal experiments),
// curves.js, history.js (every evaluation's record: detector scores, losses, the probe's
// patterns) and history-chart.js (its section: the scores against the step, first labels, the
// phase change, the scrubber), model-file.js (the model as a case file, and back), layer-case.js
// (a layer as the Heads view's case), export.js, whatif.js (the what-if runner, a component).
import { defineView } from '../common/component.js';
import { changeReporter } from '../common/options.js';
import { button, setText } from '../common/dom.js';
import { HeadscopeError } from '../../lib/errors.js';
import { download, toJSON, MIME } from '../common/export-data.js';
import { readTrainOptions } from './options.js';
import { buildControls, mark, unmark } from './controls.js';
import { buildSkeleton } from './skeleton.js';
import { createSession } from './session.js';
import { createPlayback, DEFAULT_CHUNK } from './playback.js';
import { createHistory } from './history.js';
import { createHistoryChart } from './history-chart.js';
import { drawHeadGrid } from './heads-grid.js';
import { createDetectorInputs, drawDetectors } from './detectors.js';
import { scoreLayer } from './session.js';
import { encodeTrainState } from './url-state.js';
import { applyTrainState } from './state.js';
import { createAblation } from './ablation.js';
import { createInside } from './inside.js';
import { createVariants } from './variants.js';
import { createModelFile, noModel } from './model-file.js';
import { layerCase, openedHead } from './layer-case.js';
import { checkTrainFormat, exportTrain } from './export.js';
import { whatIf } from './whatif.js';

/**
 * The Train view (views/index.js documents create's options, options.js checks them). Its
 * extras: ready (resolves when the first model, and the state's steps, are trained and drawn),
 * play(), pause(), step(n), reset(), setCase(caseDocument) (a transformer case as the model:
 * loadModel), exportAs(format), exportModel(), stateDict(), layerCase(l), patternOf(l, h),
 * isPlaying(), whatIf (its what-if runner), history() (the training history's records, first
 * labels and phase change), showStep(step) (the heads grid and detectors at a recorded step; null:
 * now), shownStep(), shownPatternOf(l, h) (what the grid shows for a head). update() returns a
 * Promise: a new setup trains from 0.
 */
export const train = defineView('train', createTrain, { engine: 'transformer', optionalEngine: true });

function createTrain(root, options, where) {
  const o = readTrainOptions(options, where);
  const target = o.start.steps;   // a link's step: train to it once mounted
  // What the parts share: the state, the engine and its one model with its task, held-out rows
  // and probe, the curve's points, the head gates ([layer][head] 0/1, null: every head on), the
  // last evaluation ({ probeRun, scores }), the training history (history.js), the step the grid
  // shows (null: now), the steps per chunk, and the running flags.
  const t = { state: { ...o.start, steps: 0, off: [] }, engine: null, model: null, task: null, held: null, probe: null,
    curve: [], history: createHistory(), shown: null, chunk: DEFAULT_CHUNK, gates: null, last: null, playing: false, lastRate: 0,
    generation: 0, destroyed: false };
  const controls = buildControls(o.hidden);
  const historyChart = createHistoryChart({ show: (step) => showStep(step) });
  const dom = buildSkeleton(root, { compact: o.compact, hidden: o.hidden, controls, history: historyChart });
  dom.backToNow.addEventListener('click', () => showStep(null));
  const sync = () => controls.sync(t.state, t.playing, t.lastRate, t.task?.seqLen);
  // The message line; error: shown as a refusal (until the next message that does not keep it).
  const say = (text, { keepError = false, error = false } = {}) => {
    dom.message.textContent = text;
    if (error) dom.message.classList.add('hs-error');
    else if (!keepError) dom.message.classList.remove('hs-error');
  };
  function fail(e) {
    t.playing = false;
    dom.message.textContent = `Train: ${e?.message ?? e}`;
    dom.message.classList.add('hs-error');
    o.onStatus(`Train: ${e?.message ?? e}`);
    sync();
  }
  const reporter = changeReporter(() => ({ ...t.state }), o.onChange);
  reporter.settle();
  const changed = (cause) => reporter.changed(cause);

  const session = createSession(t, { startWorker: o.startWorker, draw, changed,
    stopped: (text) => say(text, { keepError: true }) });
  const { serial } = session;
  const ablation = createAblation(t, { root: dom.ablation, serial, fail, redraw: draw });
  const inside = createInside(t, { root: dom.inside, serial, fail });
  // A value the setup refused (state.js names the field: "Train.lr: expected ..."): the message
  // says why and what the model goes on with; the field keeps what was typed, marked invalid and
  // described by the message, until a setup is accepted.
  const fieldOf = (e) => /^Train\.(\w+):/.exec(e?.message ?? '')?.[1] ?? null;
  const refused = (e) => {
    const key = fieldOf(e);
    const inUse = key !== null && key in t.state ? ` The model goes on with ${key} ${t.state[key]}: correct the marked field.` : '';
    say(`${e.message}.${inUse}`, { error: true });
    controls.markInvalid(key, dom.message);
  };
  const playback = createPlayback(t, { session, sync, fail, changed, say, viewFields, refused, accepted: () => controls.accept() });
  const variants = createVariants(t, { root: dom.variants, serial });
  const file = createModelFile(t, { session, loaded: (name) => {
    say(`Loaded ${name ?? 'a model'}: training goes on from here (with a new optimizer).`, { keepError: true });
    changed('input');
  } });
  const openHead = o.onOpenHead && ((l, h) => serial(async () => [await layerCase(t, l), openedHead(t, l, h)])
    .then(([doc, where]) => o.onOpenHead(doc, where)).catch(fail));
  const curveOptions = () => ({ log: t.state.log, maxStep: Math.max(t.state.steps, 100), phase: t.history.phaseChange(),
    shown: t.shown });

  // The last evaluation: the curves, the history, the probe row, every head, the variants,
  // detectors, ablation.
  function draw() {
    sync();
    setText(dom.probeText, `Probe row: ${t.task.describe(t.probe.tokens)}`);
    drawShown();
    variants.draw();
    ablation.draw();
    inside.draw();
  }

  // The heads grid and the detectors table: the last evaluation, or the record the reader
  // scrubbed back to (its patterns as they were then); the history and the "shown" line say which.
  function drawShown() {
    const record = t.shown === null ? null : t.history.at(t.shown);
    if (t.shown !== null && !record?.patterns) t.shown = null;   // thinned or cleared: now again
    const probeRun = record?.patterns ? { hooks: Object.fromEntries(record.patterns.map((data, l) => [`blocks.${l}.attn.hook_pattern`, { data }])) }
      : t.last.probeRun;
    const scores = record?.patterns ? record.scores : t.last.scores;
    drawHeadGrid(dom.grid, { state: t.state, task: t.task, probe: t.probe, probeRun, scores, gates: t.gates, onOpen: openHead });
    drawDetectors(dom.detectors, t.state, scores);
    dom.shownLine.hidden = t.shown === null;
    setText(dom.shownText, t.shown === null ? '' : `Showing step ${t.shown} from the history: the heads and the detector table as they were ` +
      `then. The model is at step ${t.state.steps} (the curves, the switches and the variants panel are the model now).`);
    dom.view.dataset.shown = t.shown === null ? 'now' : String(t.shown);
    historyChart.update(t.history, { layers: t.state.layers, heads: t.state.heads, shown: t.shown, now: t.state.steps,
      maxStep: Math.max(t.state.steps, 100) });
    dom.curves.update(t.curve, curveOptions());
  }

  /** Shows a recorded step (one that kept its patterns) in the grid and the detectors; null: now. */
  function showStep(step) {
    if (step !== null && !t.history.at(step)?.patterns) {
      const kept = t.history.records().filter((r) => r.patterns).map((r) => r.step);
      say(`Show step: step ${String(step).slice(0, 20)} has no recorded patterns (kept: ${kept.length} steps, ` +
        `${kept.slice(0, 3).join(', ')}${kept.length > 3 ? ` ... ${kept.at(-1)}` : ''})`, { error: true });
      return false;
    }
    t.shown = step === t.state.steps && t.history.records().at(-1)?.step === step ? null : step;
    t.history.pin(t.shown);
    if (t.last) drawShown();
    return true;
  }

  // The state's view fields: the log scale, and the heads switched off (through the ablation
  // box's switches, as the reader's clicks: each measures the held-out loss without them).
  async function viewFields(next) {
    const rescore = next.keywords !== t.state.keywords || next.pattern !== t.state.pattern;
    t.state = { ...t.state, log: next.log, keywords: next.keywords, pattern: next.pattern };
    detectorInputs.sync(t.state);
    if (rescore) await serial(rescoreDetectors);
    dom.curves.update(t.curve, curveOptions());
    const want = new Set(next.off.map(([l, h]) => `${l}.${h}`));
    for (const box of dom.ablation.querySelectorAll('input[data-gate]')) {
      const on = !want.has(box.dataset.gate);
      if (box.checked !== on) {
        box.checked = on;
        box.dispatchEvent(new Event('change', { bubbles: true }));
      }
    }
    await serial(() => {});   // the measurements the switches queued
    sync();
  }
  // The reader's keyword and pattern detectors changed: the current model's held-out patterns
  // scored again (one forward), the grid's labels and the table drawn with them. The history's
  // records from here on carry them too.
  async function rescoreDetectors() {
    if (!t.model || !t.last) return;
    const hooks = Array.from({ length: t.state.layers }, (_, l) => `blocks.${l}.attn.hook_pattern`);
    const run = await t.model.forward(t.held.tokens, { hooks });
    t.last = { ...t.last, scores: hooks.map((h) => scoreLayer(run.hooks[h], t.held, t.state, t.task)) };
    draw();
  }
  // (Checked here first, so a refusal names the field as the form's do: "Train.pattern: ...".)
  const detectorInputs = createDetectorInputs(dom.detectorInputs, {
    apply: (patch) => {
      try {
        applyTrainState(patch, t.state, 'Train');
      } catch (e) {
        say(e.message, { error: true });
        detectorInputs.markInvalid(fieldOf(e), dom.message);
        return;
      }
      detectorInputs.accept();
      say('');
      playback.update(patch).catch(fail);
    },
  });
  detectorInputs.sync(t.state);

  // A switch (the reader's or viewFields'): the state's off follows the ablation's gates.
  dom.ablation.addEventListener('change', (e) => {
    if (!e.target.matches?.('input[data-gate]')) return;
    const off = [];
    t.gates?.forEach((row, l) => row.forEach((g, h) => { if (g === 0) off.push([l, h + 1]); }));
    t.state = { ...t.state, off };
    changed('input');
  });

  // "What does each head do?": one click trains the log-line task with 4 heads of 16 dims to step
  // 300 here, then switches each head off in turn (the costs below the grid; the patterns above).
  const eachHead = button('What does each head do? (4 heads, log line, 300 steps)', 'hs-train-whatif-each');
  eachHead.name = 'each-head';
  // The preset replaces the reader's run: the message says which run went and how to get it back
  // (its setup and step, as the link that trains it again). Its keyword detector
  // reads the log levels, so the head that reads them gets its label.
  eachHead.addEventListener('click', async () => {
    try {
      eachHead.disabled = true;
      const was = { ...t.state };
      await playback.update({ task: 'log-line', layers: 2, heads: 4, kvHeads: 4, dModel: 64, mlp: false, norm: 'pre',
        positions: 'learned', attnWindow: 0, attnSinks: false, lr: 3e-3, weightDecay: 0.01, batch: 16, clip: 1, seed: 1, steps: 300,
        keywords: 'DEBUG INFO WARN ERROR', pattern: '' });
      await serial(ablation.measureEachOff);
      if (was.steps > 0 && !(was.task === 'log-line' && was.heads === 4 && was.steps === 300)) {
        say(`"What does each head do?" replaced your run (${was.task}, ${was.layers} x ${was.heads} heads, step ${was.steps}) ` +
          `with the log-line preset. To train it again, open #train?${encodeTrainState(was)}`, { keepError: true });
      }
      dom.ablationBox.scrollIntoView?.({ block: 'start' });
    } catch (e) {
      fail(e);
    } finally {
      eachHead.disabled = false;
    }
  });
  const runner = whatIf.create(dom.whatIf, { buttons: [eachHead] });

  /**
   * The view as a file (export.js): 'svg' | 'png' the curves and every head on the probe row,
   * 'json' the curve, the probe row and each head's pattern and detector scores, 'csv' the curve,
   * 'case' the trained model (exportModel's document). A Promise of a Blob, after the running job.
   */
  function exportAs(format) {
    try {
      checkTrainFormat(format);
    } catch (e) {
      return Promise.reject(e);
    }
    if (format === 'case') return file.exportModel().then((doc) => new Blob([toJSON(doc)], { type: MIME.case }));
    return serial(() => {
      if (!t.model || !t.last) throw noModel('exportAs');
      return exportTrain(format, { state: { ...t.state }, task: t.task, probe: t.probe, curve: [...t.curve], last: t.last,
        gates: t.gates, log: controls.log.checked, element: dom.view });
    });
  }

  controls.exportButton.addEventListener('click', async () => {
    try {
      const doc = await file.exportModel();
      download(new Blob([toJSON(doc)], { type: 'application/json' }), `headscope-train-${t.state.task}-step${t.state.steps}.json`, dom.view);
    } catch (e) {
      fail(e);
    }
  });
  controls.loadInput.addEventListener('change', async () => {
    const input = controls.loadInput;
    const chosen = input.files?.[0];
    input.value = '';
    if (!chosen) return;
    try {
      await file.loadModel(new Uint8Array(await chosen.arrayBuffer()));
    } catch (e) {
      fail(e);
    }
  });
  controls.playButton.addEventListener('click', () => (t.playing ? playback.pause() : playback.play()));
  controls.stepButton.addEventListener('click', () => { playback.step(1).catch(() => {}); });
  for (const b of controls.stepMore) b.addEventListener('click', () => { playback.step(Number(b.dataset.steps)).catch(() => {}); });
  controls.resetButton.addEventListener('click', () => { playback.reset().catch(() => {}); });
  controls.speed.addEventListener('change', () => { t.chunk = Number(controls.speed.value); });
  // A refused step marks the field (as the form's refusals) until a step is accepted.
  const trainTo = () => {
    const field = controls.trainTo;
    return playback.trainToStep(field.value).then((ok) => (ok ? unmark(field) : mark(field, dom.message)));
  };
  controls.trainToButton.addEventListener('click', trainTo);
  controls.trainTo.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      trainTo();
    }
  });
  controls.log.addEventListener('change', () => {
    t.state = { ...t.state, log: controls.log.checked };
    dom.curves.update(t.curve, curveOptions());
    changed('input');
  });
  // A change of the setup (task, model, optimizer, seed) is a new model from step 0.
  controls.form.addEventListener('change', () => playback.setup(controls.readSetup()));

  const ready = serial(session.newModel).then(async () => {
    sync();
    if (target > 0) await playback.trainTo(target, 'Replaying');
    await viewFields(o.start);
    dom.view.dataset.ready = 'true';
  }).catch((e) => {
    fail(e);
    dom.view.dataset.ready = 'error';
    throw e;
  });
  ready.catch(() => {});

  return {
    ready,
    update: playback.update,
    getState: () => ({ ...t.state }),
    play: playback.play, pause: playback.pause, step: playback.step, reset: playback.reset,
    isPlaying: () => t.playing,
    /** Runs the "Inside the model" section's experiments at the current step (its button). */
    lookInside: inside.measure,
    /** The trained weights: stateDict() of the model (names as the reference module's). */
    stateDict: () => serial(() => t.model.stateDict()),
    whatIf: runner,
    exportModel: file.exportModel,
    exportAs,
    loadModel: file.loadModel,
    setCase: file.loadModel,
    layerCase: (l) => layerCase(t, l),
    /**
     * The training history: each record's step, losses, accuracy, detector scores ([layer]
     * { detector: [head] }) and whether it kept its patterns; each head's first labels; the phase
     * change; the bytes the patterns take.
     */
    history: () => ({
      records: t.history.records().map(({ patterns, ...r }) => ({ ...r, patterns: patterns !== null })),
      firsts: t.history.firsts(), phaseChange: t.history.phaseChange(), bytes: t.history.bytes(),
    }),
    showStep: (step) => {
      if (step !== null && !Number.isInteger(step)) throw new HeadscopeError('INVALID_ARGUMENT', `showStep: step: expected a recorded step or null, got ${String(step).slice(0, 20)}`);
      if (!showStep(step)) throw new HeadscopeError('INVALID_ARGUMENT', dom.message.textContent);
    },
    /** The step the heads grid shows (null: now). */
    shownStep: () => t.shown,
    /** Layer l, head h (1-based)'s pattern as the grid shows it (a recorded step's, or now's): T rows of T. */
    shownPatternOf: (l, h) => {
      const T = t.task.seqLen;
      const record = t.shown === null ? null : t.history.at(t.shown);
      const all = record ? record.patterns[l] : t.last.probeRun.hooks[`blocks.${l}.attn.hook_pattern`].data;
      const data = all.subarray((h - 1) * T * T, h * T * T);
      return Array.from({ length: T }, (_, i) => Array.from(data.subarray(i * T, (i + 1) * T)));
    },
    /** Layer l, head h (1-based)'s attention on the probe row, as the model computes it: T rows of T. */
    patternOf: (l, h) => serial(async () => {
      const hook = `blocks.${l}.attn.hook_pattern`;
      const { hooks } = await t.model.forward(t.probe.tokens, { hooks: [hook] });
      const T = t.task.seqLen;
      const data = hooks[hook].data.subarray((h - 1) * T * T, h * T * T);
      return Array.from({ length: T }, (_, i) => Array.from(data.subarray(i * T, (i + 1) * T)));
    }),
    destroy() {
      t.destroyed = true;
      t.playing = false;
      runner.destroy();
      t.generation++;
      const e = t.engine;
      t.engine = null;
      if (o.ownsEngine) Promise.resolve(e?.terminate?.()).catch(() => {});
      root.replaceChildren();
    },
  };
}
