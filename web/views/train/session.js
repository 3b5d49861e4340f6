// The Train view's engine and its one model: everything runs in the view's Worker, one request
// at a time (serial), so a reset, a chunk, an ablation or an export never interleave. Training
// goes in chunks (the worker's train(), the batches task.batch(B, step) from the run's seed) with
// an evaluation after each: held-out loss and accuracy, the probe row with every hook_pattern,
// the head detectors, and with attention sinks each head's sink logit and mean sink mass; each
// evaluation is also a record of the training history (history.js). The page's thread only
// computes the task's `evaluate` and the detectors' sums (and the sink masses) from the returned
// arrays.
import { makeTask } from '../../lib/tasks.js';
import { headScores } from '../../lib/detectors.js';
import { extraDetectors, trainSetup } from './state.js';
import { sinkNumbers } from './variants-sinks.js';

/**
 * One layer's detector scores on the held-out rows: the four of TransformerLens over every row,
 * then the reader's keyword and pattern detectors (state.js extraDetectors) at the rows the task
 * scores (its targets), where a task like log-line answers.
 */
export function scoreLayer(pattern, held, state, task) {
  const scores = headScores(pattern, held.tokens);
  const extra = extraDetectors(state, task.vocab);
  return extra === null ? scores : { ...scores, ...headScores(pattern, held.tokens, { ...extra, targets: held.targets }) };
}

/** Held-out rows of each evaluation. */
const EVAL_ROWS = 64;

/**
 * @param {object} t  the view's shared fields (view.js): state, engine, model, task, held, probe,
 *   curve, history, gates, last, playing, generation, destroyed
 * @param {{ startWorker: () => Promise<object>, draw: () => void, stopped: (text: string) => void,
 *   changed: (cause: string) => void }} o  draw: an evaluation is in t.last; stopped: training
 *   stopped before the chunk's end (a refused step, an error), in words; changed: the state's
 *   step moved (onChange)
 */
export function createSession(t, { startWorker, draw, stopped, changed }) {
  let busy = Promise.resolve();

  // Runs `job` after the previous one (a reset, a chunk, an evaluation): one at a time.
  function serial(job) {
    const run = busy.then(job);
    busy = run.catch(() => {});
    return run;
  }

  // A model for the settings `s`, with its task, held-out rows and probe, and its optimizer; the
  // view's own model is not touched. `stateDict` given: the model is created without initial
  // weights and takes these (all or nothing); any failure disposes it and rethrows.
  async function buildModel(s, stateDict = null) {
    t.engine ??= await startWorker();
    const nextTask = makeTask(s.task, { seed: s.seed });
    const setup = trainSetup(s, nextTask);
    const next = await t.engine.createTransformer(stateDict === null ? setup.model : { ...setup.model, seed: null });
    try {
      if (stateDict !== null) await next.loadStateDict(stateDict);
      await next.setOptimizer(setup.optimizer);
    } catch (e) {
      await next.dispose();
      throw e;
    }
    return { model: next, task: nextTask, held: nextTask.heldOut(EVAL_ROWS, 0), probe: nextTask.probe() };
  }

  // Makes a built model the view's (disposing the one before) at `steps`, and evaluates it.
  async function adopt(built, steps) {
    const old = t.model;
    ({ model: t.model, task: t.task, held: t.held, probe: t.probe } = built);
    if (old) await old.dispose();
    t.gates = null;
    t.curve = [];
    t.history.clear();
    t.state = { ...t.state, steps, off: [] };
    await evaluate(NaN);
  }

  async function newModel() {
    if (t.model) await t.model.dispose();
    t.model = null;
    await adopt(await buildModel(t.state), 0);
  }

  // Held-out loss and accuracy, the probe's patterns and the detectors, then the drawing.
  async function evaluate(trainLoss) {
    const mine = t.generation;
    const hooks = Array.from({ length: t.state.layers }, (_, l) => `blocks.${l}.attn.hook_pattern`);
    const { model, held, probe, task } = t;
    const withSinks = t.state.attnSinks;  // this model's (a new setup may replace the state meanwhile)
    const [heldRun, probeRun] = [await model.forward(held.tokens, { hooks }), await model.forward(probe.tokens, { hooks })];
    // Attention sinks: each head's logit and mean sink mass on the held-out rows (variants-sinks.js).
    const sinks = withSinks ? await sinkNumbers(model, heldRun, hooks.length) : null;
    if (mine !== t.generation || t.destroyed) return;
    const e = task.evaluate(heldRun.logits, held.targets);
    t.curve.push({ step: t.state.steps, trainLoss, heldOutLoss: e.loss, accuracy: e.accuracy });
    const scores = hooks.map((h) => scoreLayer(heldRun.hooks[h], held, t.state, task));
    t.history.add({ step: t.state.steps, trainLoss, heldOutLoss: e.loss, accuracy: e.accuracy, scores,
      patterns: hooks.map((h) => probeRun.hooks[h].data) });
    t.last = { probeRun, scores, sinks };  // the last evaluation, which the ablation redraws with
    draw();
  }

  /** Trains n steps (one train() of the worker), then evaluates; whether every step was done. */
  async function trainSteps(n) {
    const mine = t.generation;
    let sum = 0;
    let count = 0;
    const run = await t.model.train({ task: trainSetup(t.state, t.task).task, batchSize: t.state.batch, steps: n,
      startIndex: t.state.steps }, { onProgress: (p) => { for (const l of p.losses) { sum += l; count++; } } });
    const done = await run.done;
    if (mine !== t.generation || t.destroyed) return false;
    t.state = { ...t.state, steps: t.state.steps + done.step };
    if (done.status !== 'done') {
      t.playing = false;
      stopped(done.status === 'refused'
        ? `Step ${t.state.steps + 1} was refused (${done.refused}): the weights stay as they were. Lower the learning rate or reset.`
        : `Training stopped: ${done.error?.message ?? done.status}`);
    }
    await evaluate(count ? sum / count : NaN);
    changed('input');
    return done.status === 'done';
  }

  return { serial, buildModel, adopt, newModel, trainSteps };
}
