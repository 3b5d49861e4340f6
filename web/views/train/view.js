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
// reset, a new setup), heads-grid.js, variants.js (the variant's invariants), detectors.js,
// ablation.js, inside.js (the causal experiments), curves.js, model-file.js (the model as a case file, and back), layer-case.js (a
// layer as the Heads view's case), export.js, whatif.js (the what-if runner, a component).
import { defineView } from '../common/component.js';
import { changeReporter } from '../common/options.js';
import { button, setText } from '../common/dom.js';
import { download, toJSON, MIME } from '../common/export-data.js';
import { readTrainOptions } from './options.js';
import { buildControls } from './controls.js';
import { buildSkeleton } from './skeleton.js';
import { createSession } from './session.js';
import { createPlayback } from './playback.js';
import { drawHeadGrid } from './heads-grid.js';
import { drawDetectors } from './detectors.js';
import { createAblation } from './ablation.js';
import { createInside } from './inside.js';
import { createVariants } from './variants.js';
import { createModelFile, noModel } from './model-file.js';
import { layerCase } from './layer-case.js';
import { checkTrainFormat, exportTrain } from './export.js';
import { whatIf } from './whatif.js';

/**
 * The Train view (views/index.js documents create's options, options.js checks them). Its
 * extras: ready (resolves when the first model, and the state's steps, are trained and drawn),
 * play(), pause(), step(n), reset(), setCase(caseDocument) (a transformer case as the model:
 * loadModel), exportAs(format), exportModel(), stateDict(), layerCase(l), patternOf(l, h),
 * isPlaying(), whatIf (its what-if runner). update() returns a Promise: a new setup trains from 0.
 */
export const train = defineView('train', createTrain, { engine: 'transformer', optionalEngine: true });

function createTrain(root, options, where) {
  const o = readTrainOptions(options, where);
  const target = o.start.steps;   // a link's step: train to it once mounted
  // What the parts share: the state, the engine and its one model with its task, held-out rows
  // and probe, the curve's points, the head gates ([layer][head] 0/1, null: every head on), the
  // last evaluation ({ probeRun, scores }), and the running flags.
  const t = { state: { ...o.start, steps: 0 }, engine: null, model: null, task: null, held: null, probe: null,
    curve: [], gates: null, last: null, playing: false, lastRate: 0, generation: 0, destroyed: false };
  const controls = buildControls(o.hidden);
  const dom = buildSkeleton(root, { compact: o.compact, hidden: o.hidden, controls });
  const sync = () => controls.sync(t.state, t.playing, t.lastRate, t.task?.seqLen);
  const say = (text, { keepError = false } = {}) => {
    dom.message.textContent = text;
    if (!keepError) dom.message.classList.remove('hs-error');
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
  const playback = createPlayback(t, { session, sync, fail, changed, say });
  const variants = createVariants(t, { root: dom.variants, serial });
  const file = createModelFile(t, { session, loaded: (name) => {
    say(`Loaded ${name ?? 'a model'}: training goes on from here (with a new optimizer).`, { keepError: true });
    changed('input');
  } });
  const openHead = o.onOpenHead && ((l, h) => serial(() => layerCase(t, l)).then((doc) => o.onOpenHead(doc, { layer: l, head: h })).catch(fail));
  const curveOptions = () => ({ log: controls.log.checked, maxStep: Math.max(t.state.steps, 100) });

  // The last evaluation: the curves, the probe row, every head, the variants, detectors, ablation.
  function draw() {
    const { probeRun, scores } = t.last;
    sync();
    dom.curves.update(t.curve, curveOptions());
    setText(dom.probeText, `Probe row: ${t.task.describe(t.probe.tokens)}`);
    drawHeadGrid(dom.grid, { state: t.state, task: t.task, probe: t.probe, probeRun, scores, gates: t.gates, onOpen: openHead });
    variants.draw();
    drawDetectors(dom.detectors, t.state, scores);
    ablation.draw();
    inside.draw();
  }

  // "What does each head do?": one click trains the log-line task with 4 heads of 16 dims to step
  // 300 here, then switches each head off in turn (the costs below the grid; the patterns above).
  const eachHead = button('What does each head do? (4 heads, log line, 300 steps)', 'hs-train-whatif-each');
  eachHead.name = 'each-head';
  eachHead.addEventListener('click', async () => {
    try {
      eachHead.disabled = true;
      await playback.update({ task: 'log-line', layers: 2, heads: 4, kvHeads: 4, dModel: 64, mlp: false, norm: 'pre',
        positions: 'learned', attnWindow: 0, attnSinks: false, lr: 3e-3, weightDecay: 0.01, batch: 16, clip: 1, seed: 1, steps: 300 });
      await serial(ablation.measureEachOff);
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
  controls.resetButton.addEventListener('click', () => { playback.reset().catch(() => {}); });
  controls.log.addEventListener('change', () => dom.curves.update(t.curve, curveOptions()));
  // A change of the setup (task, model, optimizer, seed) is a new model from step 0.
  controls.form.addEventListener('change', () => playback.setup(controls.readSetup()));

  const ready = serial(session.newModel).then(async () => {
    sync();
    if (target > 0) await playback.trainTo(target);
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
