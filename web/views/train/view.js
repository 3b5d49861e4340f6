// The Train view: a small transformer learns a built-in task in a Web Worker while the reader
// watches its loss curves, every head's attention on the task's probe row, and the head
// detectors (previous-token, first-token, same-token, induction) move as the heads specialise.
// Then switch heads off and see the held-out loss change, and see each head's importance (the
// gradient of the loss with respect to its gate, Michel et al. 2019).
//
// All training and every forward pass run in the view's own Worker (initWorker): the page's
// thread only draws, so it never holds a task for long. The Worker runs the SIMD128 build, not
// the relaxed one: a run is then the same bits in every browser, on every CPU and in Node (the
// relaxed build's fused multiply-adds depend on the CPU), so a link to a run is that run. Training goes in chunks (train() of the
// worker API, CHUNK_STEPS at a time) with an evaluation after each: held-out loss and accuracy,
// the probe's patterns, the detectors.
import { initWorker } from '../../lib/index.js';
import { HeadscopeError } from '../../lib/errors.js';
import { makeTask } from '../../lib/tasks.js';
import { DETECTORS, headScores } from '../../lib/detectors.js';
import { button, checkbox, columnHeads, el, labelled, setText } from '../common/dom.js';
import { formatNumber } from '../common/matrix.js';
import { renderHeatmap } from '../common/heatmap.js';
import { changeReporter, checkNames } from '../common/options.js';
import { applyTrainState, defaultTrainState, D_MODELS, sameSetup, TASK_NAMES, trainSetup } from './state.js';
import { createCurves } from './curves.js';
import { createWhatIf } from './whatif.js';
import { caseLoss, parseCase } from '../../lib/case.js';
import { download, nested, toJSON, MIME } from '../common/export.js';
import { checkTrainFormat, exportTrain } from './export.js';

/** Steps per chunk between two evaluations while playing. */
const CHUNK_STEPS = 25;
/** Held-out rows of each evaluation. */
const EVAL_ROWS = 64;
export const TRAIN_CONTROLS = ['task', 'model', 'optimizer', 'buttons', 'detectors', 'ablation', 'whatif'];

const DETECTOR_LABELS = { 'previous-token': 'previous token', 'first-token': 'first token', 'same-token': 'same token', induction: 'induction' };

/**
 * @param {Element} root
 * @param {{ state?: object, onStatus?: (text: string) => void, onChange?: (state: object, cause: string) => void,
 *   hide?: string[], compact?: boolean, worker?: () => Promise<object> }} options worker: starts the
 *   view's engine (default initWorker())
 * @returns {{ getState(): object, setState(patch: object): Promise<void>, play(): void, pause(): void,
 *   step(n?: number): Promise<void>, reset(): Promise<void>, ready: Promise<void>, stateDict(): Promise<object>,
 *   exportAs(format: 'svg' | 'png' | 'json' | 'csv' | 'case'): Promise<Blob>, destroy(): void }}
 */
export function mountTrain(root, { state: initialState, onStatus = () => {}, onChange = () => {}, onOpenHead = null, hide = [],
  compact = false, worker: startWorker = () => initWorker(undefined, { simd: 'simd128' }) } = {}) {
  const hidden = new Set(checkNames(hide, TRAIN_CONTROLS, 'mountTrain: options.hide'));
  let state = applyTrainState(initialState ?? {}, defaultTrainState(), 'mountTrain: options.state');
  const target = state.steps;   // a link's step: train to it once mounted
  state = { ...state, steps: 0 };

  let engine = null;
  let model = null;
  let task = null;
  let held = null;
  let probe = null;
  let curve = [];
  let playing = false;
  let busy = Promise.resolve();
  let destroyed = false;
  let generation = 0;
  let gates = null;       // [layer][head] 0/1, null: every head on
  let lastRate = 0;

  // ---- Skeleton --------------------------------------------------------------------------------
  const view = el('div', `hs-train${compact ? ' hs-compact' : ''}`);
  const intro = el('p', 'hs-prose hs-train-intro', 'Train a small transformer on a task, in this page. ' +
    'Watch the loss fall, every head\'s attention on one example, and the detectors that say what ' +
    'each head has learned to do (an induction head forms as the loss drops). Then switch heads off ' +
    'and see what each one was worth.');
  const controls = el('form', 'hs-controls hs-train-controls');
  controls.addEventListener('submit', (e) => e.preventDefault());
  const select = (name, values, label) => {
    const s = el('select');
    s.name = name;
    for (const v of values) {
      const o = el('option', '', String(v));
      o.value = String(v);
      s.append(o);
    }
    return { control: s, label: labelled(label, s) };
  };
  const number = (name, label, { min, max, step }) => {
    const i = el('input');
    i.type = 'number';
    i.name = name;
    Object.assign(i, { min: String(min), max: String(max), step: String(step) });
    return { control: i, label: labelled(label, i) };
  };
  const c = {
    task: select('task', TASK_NAMES, 'Task'),
    layers: select('layers', [1, 2, 3, 4], 'Layers'),
    heads: select('heads', [1, 2, 4, 8, 16, 32, 64], 'Heads'),
    dModel: select('dModel', D_MODELS, 'dModel'),
    norm: select('norm', ['pre', 'post', 'none'], 'LayerNorm'),
    positions: select('positions', ['learned', 'sinusoidal', 'none'], 'Positions'),
    lr: number('lr', 'Learning rate', { min: 0.00001, max: 1, step: 0.0005 }),
    weightDecay: number('weightDecay', 'Weight decay', { min: 0, max: 1, step: 0.01 }),
    batch: number('batch', 'Batch', { min: 1, max: 256, step: 1 }),
    clip: number('clip', 'Clip norm (0: off)', { min: 0, max: 100, step: 0.5 }),
    seed: number('seed', 'Seed', { min: 0, max: 2147483647, step: 1 }),
  };
  const { input: mlp, label: mlpLabel } = checkbox('mlp', ' MLP');
  const taskRow = el('div', 'hs-train-row');
  taskRow.append(c.task.label);
  const modelRow = el('div', 'hs-train-row');
  modelRow.append(c.layers.label, c.heads.label, c.dModel.label, mlpLabel, c.norm.label, c.positions.label);
  const optRow = el('div', 'hs-train-row');
  optRow.append(c.lr.label, c.weightDecay.label, c.batch.label, c.clip.label, c.seed.label);
  taskRow.hidden = hidden.has('task');
  modelRow.hidden = hidden.has('model');
  optRow.hidden = hidden.has('optimizer');
  controls.append(taskRow, modelRow, optRow);

  const buttons = el('div', 'hs-train-buttons');
  buttons.setAttribute('role', 'group');
  buttons.setAttribute('aria-label', 'Training');
  const playButton = button('Play', 'hs-train-play');
  playButton.name = 'play';
  const stepButton = button('Step', 'hs-train-step');
  stepButton.name = 'step';
  const resetButton = button('Reset', 'hs-train-reset');
  resetButton.name = 'reset';
  const { input: log, label: logLabel } = checkbox('log', ' log-scale loss');
  const counter = el('output', 'hs-train-counter', 'step 0');
  counter.setAttribute('aria-live', 'off');
  const exportButton = button('Export model', 'hs-train-export');
  exportButton.name = 'export';
  exportButton.title = 'The trained model as a transformer case file: its config, weights, the probe row and its logits';
  const loadInput = el('input', 'hs-train-load-input');
  loadInput.type = 'file';
  loadInput.accept = '.json,application/json';
  loadInput.name = 'load';
  const loadLabel = el('label', 'hs-train-load');
  loadLabel.append('Load model ', loadInput);
  buttons.append(playButton, stepButton, resetButton, logLabel, counter, exportButton, loadLabel);
  buttons.hidden = hidden.has('buttons');

  const message = el('p', 'hs-train-message');
  message.setAttribute('role', 'status');
  const curves = createCurves();
  const probeText = el('p', 'hs-note hs-train-probe');
  const gridTitle = el('h2', 'hs-prose hs-train-h2', 'Every head on the probe row');
  const grid = el('div', 'hs-train-grid');
  const detectorsTitle = el('h2', 'hs-prose hs-train-h2', 'What each head does (head detectors, on the held-out rows)');
  const detectors = el('table', 'hs-train-detectors');
  const ablationTitle = el('h2', 'hs-prose hs-train-h2', 'Switch heads off: the held-out loss, and each head\'s importance');
  const ablation = el('div', 'hs-train-ablation');
  const detectorsBox = el('section');
  detectorsBox.append(detectorsTitle, detectors);
  detectorsBox.hidden = hidden.has('detectors');
  const ablationBox = el('section');
  ablationBox.append(ablationTitle, ablation);
  ablationBox.hidden = hidden.has('ablation');
  const whatIf = createWhatIf();
  whatIf.element.hidden = hidden.has('whatif');
  // "What does each head do?": one click trains the log-line task with 4 heads of 16 dims to
  // step 300 in this view, then switches each head off in turn (the costs below the grid); the
  // detectors and the patterns of the four heads are above.
  const eachHead = button('What does each head do? (4 heads, log line, 300 steps)', 'hs-train-whatif-each');
  eachHead.name = 'each-head';
  eachHead.addEventListener('click', async () => {
    try {
      eachHead.disabled = true;
      await setPublicState({ task: 'log-line', layers: 2, heads: 4, dModel: 64, mlp: false, norm: 'pre',
        positions: 'learned', lr: 3e-3, weightDecay: 0.01, batch: 16, clip: 1, seed: 1, steps: 300 });
      await serial(measureEachOff);
      ablationBox.scrollIntoView?.({ block: 'start' });
    } catch (e) {
      fail(e);
    } finally {
      eachHead.disabled = false;
    }
  });
  whatIf.element.querySelector('.hs-train-buttons').append(eachHead);
  view.append(intro, controls, buttons, message, curves.element, gridTitle, probeText, grid, detectorsBox, ablationBox, whatIf.element);
  root.replaceChildren(view);

  function syncControls() {
    for (const k of ['task', 'layers', 'heads', 'dModel', 'norm', 'positions', 'lr', 'weightDecay', 'batch', 'clip', 'seed']) {
      const control = c[k].control;
      if (control.value !== String(state[k])) control.value = String(state[k]);
      control.removeAttribute('aria-invalid');
    }
    mlp.checked = state.mlp;
    playButton.textContent = playing ? 'Pause' : 'Play';
    playButton.setAttribute('aria-pressed', String(playing));
    setText(counter, `step ${state.steps}${lastRate ? `, ${lastRate.toFixed(0)} steps/s` : ''}`);
  }

  const reporter = changeReporter(() => ({ ...state }), onChange);
  reporter.settle();
  const changed = (cause) => reporter.changed(cause);

  // ---- The engine and one model ------------------------------------------------------------------
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
    engine ??= await startWorker();
    const nextTask = makeTask(s.task, { seed: s.seed });
    const setup = trainSetup(s, nextTask);
    const next = await engine.createTransformer(stateDict === null ? setup.model : { ...setup.model, seed: null });
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
    const old = model;
    ({ model, task, held, probe } = built);
    if (old) await old.dispose();
    gates = null;
    curve = [];
    state = { ...state, steps };
    await evaluate(NaN);
  }

  async function newModel() {
    if (model) await model.dispose();
    model = null;
    await adopt(await buildModel(state), 0);
  }

  // Held-out loss and accuracy, the probe's patterns and the detectors, then the drawing.
  const patternHooks = () => Array.from({ length: state.layers }, (_, l) => `blocks.${l}.attn.hook_pattern`);
  let last = null;  // the last evaluation's { probeRun, scores }, which the ablation redraws with

  async function evaluate(trainLoss) {
    const mine = generation;
    const hooks = patternHooks();
    const [heldRun, probeRun] = [await model.forward(held.tokens, { hooks }), await model.forward(probe.tokens, { hooks })];
    if (mine !== generation || destroyed) return;
    const e = task.evaluate(heldRun.logits, held.targets);
    curve.push({ step: state.steps, trainLoss, heldOutLoss: e.loss, accuracy: e.accuracy });
    const scores = hooks.map((h) => headScores(heldRun.hooks[h], held.tokens));
    last = { probeRun, scores };
    draw(probeRun, scores);
  }

  async function trainSteps(n) {
    const mine = generation;
    const started = performance.now();
    let sum = 0;
    let count = 0;
    const run = await model.train({ task: trainSetup(state, task).task, batchSize: state.batch, steps: n, startIndex: state.steps },
      { onProgress: (p) => { for (const l of p.losses) { sum += l; count++; } } });
    const done = await run.done;
    if (mine !== generation || destroyed) return false;
    state = { ...state, steps: state.steps + done.step };
    lastRate = done.step / Math.max(1e-3, (performance.now() - started) / 1000);
    if (done.status !== 'done') {
      playing = false;
      message.textContent = done.status === 'refused'
        ? `Step ${state.steps + 1} was refused (${done.refused}): the weights stay as they were. Lower the learning rate or reset.`
        : `Training stopped: ${done.error?.message ?? done.status}`;
    }
    await evaluate(count ? sum / count : NaN);
    changed('input');
    return done.status === 'done';
  }

  // ---- Drawing ---------------------------------------------------------------------------------
  function draw(probeRun, scores) {
    syncControls();
    curves.update(curve, { log: log.checked, maxStep: Math.max(state.steps, 100) });
    setText(probeText, `Probe row: ${task.describe(probe.tokens)}`);
    const T = task.seqLen;
    const labels = Array.from(probe.tokens.data, (id) => task.vocab[id]);
    // One heatmap per layer and head, in a grid of layers (rows) x heads (columns).
    const cells = [];
    for (let l = 0; l < state.layers; l++) {
      const pattern = probeRun.hooks[`blocks.${l}.attn.hook_pattern`];
      for (let h = 0; h < state.heads; h++) cells.push({ l, h, data: pattern.data.subarray(h * T * T, (h + 1) * T * T) });
    }
    while (grid.children.length > cells.length) grid.lastChild.remove();
    while (grid.children.length < cells.length) {
      const card = el('figure', 'hs-train-head');
      const caption = el('figcaption');
      caption.append(el('span', 'hs-train-head-name'));
      if (onOpenHead) {
        const open = button('Open in the Heads view', 'hs-train-open');
        open.addEventListener('click', () => {
          const [l, h] = [Number(card.dataset.layer), Number(card.dataset.head)];
          serial(() => layerCase(l)).then((doc) => onOpenHead(doc, { layer: l, head: h })).catch(fail);
        });
        caption.append(' ', open);
      }
      card.append(caption, el('div', 'hs-heatmap-box'));
      grid.append(card);
    }
    grid.style.setProperty('--hs-train-heads', String(Math.min(state.heads, 8)));
    cells.forEach(({ l, h, data }, k) => {
      const card = grid.children[k];
      card.dataset.layer = String(l);
      card.dataset.head = String(h + 1);
      const best = DETECTORS.map((d) => [d, scores[l][d]?.[h] ?? 0]).sort((a, b) => b[1] - a[1])[0];
      const off = gates?.[l][h] === 0;
      setText(card.firstChild.firstChild, `L${l} H${h + 1}${off ? ' (off)' : ''}${best[1] > 0.4 ? `: ${DETECTOR_LABELS[best[0]]}` : ''}`);
      card.classList.toggle('hs-head-off', off);
      renderHeatmap(card.lastChild, {
        id: `${l}.${h + 1}`, name: `Layer ${l} head ${h + 1} attention on the probe row, ${T} by ${T}`,
        data, rows: T, cols: T, rowLabels: labels, colLabels: labels,
        masked: (i, j) => j > i,
        describe: (i, j) => `layer ${l} head ${h + 1}: ${labels[i]} (${i}) → ${labels[j]} (${j}): ${formatNumber(data[i * T + j], 3)}`,
      });
    });
    drawDetectors(scores);
    drawAblation();
  }

  function drawDetectors(scores) {
    const head = columnHeads(['head', ...DETECTORS.map((d) => DETECTOR_LABELS[d])]);
    const rows = [];
    for (let l = 0; l < state.layers; l++) {
      for (let h = 0; h < state.heads; h++) {
        const tr = el('tr');
        const th = el('th', '', `L${l} H${h + 1}`);
        th.scope = 'row';
        tr.append(th);
        for (const d of DETECTORS) {
          const v = scores[l][d]?.[h] ?? 0;
          const td = el('td', 'hs-train-score');
          td.dataset.detector = d;
          const bar = el('span', 'hs-train-bar');
          bar.style.width = `${Math.max(0, Math.min(1, v)) * 100}%`;
          td.append(bar, el('span', 'hs-train-score-value', formatNumber(v, 2)));
          tr.append(td);
        }
        rows.push(tr);
      }
    }
    const thead = el('thead');
    thead.append(head);
    const tbody = el('tbody');
    tbody.append(...rows);
    const caption = el('caption', 'hs-note', 'Mean attention to the key each detector names (TransformerLens\'s head detectors): ' +
      '1 means the head does exactly that.');
    detectors.replaceChildren(caption, thead, tbody);
  }

  // The ablation box: a switch per head, the held-out loss with the switched-off heads, and each
  // head's importance |d loss / d gate| on the held-out rows.
  let ablationResult = null;
  function drawAblation() {
    if (ablation.childElementCount === 0 || ablation.dataset.shape !== `${state.layers}x${state.heads}`) {
      ablation.dataset.shape = `${state.layers}x${state.heads}`;
      const switches = el('div', 'hs-train-switches');
      switches.setAttribute('role', 'group');
      switches.setAttribute('aria-label', 'Heads on or off');
      for (let l = 0; l < state.layers; l++) {
        for (let h = 0; h < state.heads; h++) {
          const label = el('label', 'hs-train-switch');
          const box = el('input');
          box.type = 'checkbox';
          box.checked = true;
          box.dataset.gate = `${l}.${h + 1}`;
          box.addEventListener('change', () => {
            gates ??= Array.from({ length: state.layers }, () => new Array(state.heads).fill(1));
            gates[l][h] = box.checked ? 1 : 0;
            if (gates.every((row) => row.every((g) => g === 1))) gates = null;
            serial(measureAblation).catch(fail);
          });
          label.append(box, ` L${l} H${h + 1}`);
          switches.append(label);
        }
      }
      const result = el('p', 'hs-train-ablation-result');
      const importance = button('Head importance', 'hs-train-importance-button');
      importance.name = 'importance';
      importance.addEventListener('click', () => serial(measureImportance).catch(fail));
      const bars = el('div', 'hs-train-importance-bars');
      const eachOff = button('Each head off in turn', 'hs-train-each-off');
      eachOff.name = 'each-off';
      eachOff.addEventListener('click', () => serial(measureEachOff).catch(fail));
      const costs = el('div', 'hs-train-costs');
      ablation.replaceChildren(switches, result, importance, eachOff, bars, costs);
      ablationResult = result;
    }
  }

  async function measureAblation() {
    if (!model) return;
    const { logits } = await model.forward(held.tokens, gates ? { headGates: gates } : {});
    const e = task.evaluate(logits, held.targets);
    const base = curve[curve.length - 1];
    const off = gates ? gates.flatMap((row, l) => row.flatMap((g, h) => (g === 0 ? [`L${l} H${h + 1}`] : []))) : [];
    setText(ablationResult, off.length
      ? `With ${off.join(', ')} off: held-out loss ${formatNumber(e.loss, 3)} (with every head: ${formatNumber(base.heldOutLoss, 3)}), ` +
        `accuracy ${formatNumber(100 * e.accuracy, 1)}% (${formatNumber(100 * base.accuracy, 1)}%).`
      : `Every head on: held-out loss ${formatNumber(base.heldOutLoss, 3)}, accuracy ${formatNumber(100 * base.accuracy, 1)}%.`);
    ablationResult.dataset.loss = String(e.loss);
    // The grid's "(off)" marks: the same patterns and scores as the last evaluation (a gate scales
    // a head's output, not its pattern), drawn again.
    draw(last.probeRun, last.scores);
  }

  // What each head's ablation costs: the held-out loss with that head alone switched off, minus
  // the loss with every head on.
  async function measureEachOff() {
    if (!model) return;
    const base = task.evaluate((await model.forward(held.tokens)).logits, held.targets).loss;
    const rows = [];
    for (let l = 0; l < state.layers; l++) {
      for (let h = 0; h < state.heads; h++) {
        const g = Array.from({ length: state.layers }, (_, ll) => Array.from({ length: state.heads }, (_, hh) => (ll === l && hh === h ? 0 : 1)));
        const loss = task.evaluate((await model.forward(held.tokens, { headGates: g })).logits, held.targets).loss;
        rows.push({ l, h, cost: loss - base });
      }
    }
    const max = Math.max(1e-12, ...rows.map((r) => Math.abs(r.cost)));
    const costs = ablation.querySelector('.hs-train-costs');
    costs.replaceChildren(el('p', 'hs-note', `Held-out loss with one head off, minus ${formatNumber(base, 3)} (every head on):`),
      ...rows.map(({ l, h, cost }) => {
        const row = el('div', 'hs-train-importance hs-train-cost');
        row.dataset.head = `${l}.${h + 1}`;
        row.dataset.cost = String(cost);
        const bar = el('span', 'hs-train-bar');
        bar.style.width = `${(100 * Math.abs(cost)) / max}%`;
        row.append(el('span', 'hs-train-importance-name', `L${l} H${h + 1}`), bar, el('span', '', `${cost >= 0 ? '+' : ''}${formatNumber(cost, 3)}`));
        return row;
      }));
  }

  async function measureImportance() {
    if (!model) return;
    const { grads } = await model.backward(held.tokens, held.targets, { headGateGrads: true });
    const g = grads.headGates;
    const values = g.flatMap((row, l) => row.map((v, h) => ({ l, h, v: Math.abs(v) })));
    const max = Math.max(1e-12, ...values.map((x) => x.v));
    const bars = ablation.querySelector('.hs-train-importance-bars');
    bars.replaceChildren(el('p', 'hs-note', '|d loss / d gate| per head on the held-out rows (Michel et al. 2019): ' +
      'how much the loss would change if the head were scaled down a little.'),
    ...values.map(({ l, h, v }) => {
      const row = el('div', 'hs-train-importance');
      row.dataset.head = `${l}.${h + 1}`;
      const bar = el('span', 'hs-train-bar');
      bar.style.width = `${(100 * v) / max}%`;
      row.append(el('span', 'hs-train-importance-name', `L${l} H${h + 1}`), bar, el('span', '', formatNumber(v, 4)));
      return row;
    }));
  }

  /** A new setup resets to step 0; `steps` beyond the current step trains up to it. */
  async function setPublicState(patch) {
    const next = applyTrainState(patch, state);
    if (!sameSetup(next, state) || next.steps < state.steps) {
      const to = next.steps;
      state = { ...next, steps: 0 };
      await reset();
      if (to > 0) await trainTo(to);
    } else if (next.steps > state.steps) {
      await trainTo(next.steps);
    }
    changed('setState');
  }

  function fail(e) {
    playing = false;
    message.textContent = `Train: ${e?.message ?? e}`;
    message.classList.add('hs-error');
    onStatus(`Train: ${e?.message ?? e}`);
    syncControls();
  }

  /**
   * Layer l's attention on the probe row as a case document of nn.MultiheadAttention (the
   * Heads view's and the Walkthrough's kind): the trained in_proj and out_proj weights, and the
   * layer's input as the engine computed it (blocks.l.ln1.hook_normalized for a pre-LayerNorm
   * model, blocks.l.hook_resid_pre otherwise), with the causal mask.
   */
  async function layerCase(l) {
    const hook = state.norm === 'pre' ? `blocks.${l}.ln1.hook_normalized` : `blocks.${l}.hook_resid_pre`;
    const { hooks } = await model.forward(probe.tokens, { hooks: [hook] });
    const sd = await model.stateDict();
    const x = hooks[hook];
    const [, T, D] = x.shape;
    const query = Array.from({ length: T }, (_, i) => Array.from(x.data.subarray(i * D, (i + 1) * D)));
    const key = (name) => nested(sd[`blocks.${l}.attn.${name}`]);
    return {
      name: `${state.task} layer ${l} at step ${state.steps}`,
      config: { embed_dim: D, num_heads: state.heads, bias: true },
      state_dict: { in_proj_weight: key('in_proj_weight'), in_proj_bias: key('in_proj_bias'),
        'out_proj.weight': key('out_proj.weight'), 'out_proj.bias': key('out_proj.bias') },
      inputs: { query, attn_mask: Array.from({ length: T }, (_, i) => Array.from({ length: T }, (_, j) => j > i)),
        need_weights: true, average_attn_weights: false },
    };
  }

  // ---- Export and load -------------------------------------------------------------------------
  // The case file's name carries what the config does not: the task, the seed and the step.
  const caseName = () => `headscope-train task=${state.task} seed=${state.seed} steps=${state.steps}`;

  const noModel = (where) => new HeadscopeError('INVALID_ARGUMENT', `${where}: the view has no model (it did not start)`);

  /** The trained model as a transformer case document (docs/case-format.md), the probe row's logits expected. */
  function exportModel() {
    return serial(async () => {
      if (!model) throw noModel('exportModel');
      const sd = await model.stateDict();
      const { logits } = await model.forward(probe.tokens);
      const cfg = trainSetup(state, task).model;
      return {
        kind: 'transformer',
        name: caseName(),
        config: { vocab_size: cfg.vocabSize, max_len: cfg.maxLen, d_model: cfg.dModel, n_layers: cfg.nLayers,
          n_heads: cfg.nHeads, d_mlp: cfg.dMlp, norm: cfg.norm, positions: cfg.positions, causal: true, act: 'gelu',
          bias: true, ln_eps: 1e-5 },
        state_dict: Object.fromEntries(Object.entries(sd).map(([k, v]) => [k, nested(v)])),
        inputs: { tokens: nested(probe.tokens), targets: nested(probe.targets) },
        expected: { logits: nested(logits), loss: caseLoss(logits.data, probe.targets.data, task.vocabSize) },
      };
    });
  }

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
    if (format === 'case') return exportModel().then((doc) => new Blob([toJSON(doc)], { type: MIME.case }));
    return serial(() => {
      if (!model || !last) throw noModel('exportAs');
      return exportTrain(format, { state: { ...state }, task, probe, curve: [...curve], last, gates, log: log.checked, element: view });
    });
  }

  /**
   * Loads a transformer case document as the view's model: its config must be one the view can
   * set up (else a HeadscopeError names the field), its name gives the task, seed and step when
   * it was exported here (else the current task and seed, step 0). Training goes on from there
   * with a fresh optimizer. All or nothing: the new model is built and loaded beside the current
   * one, which stays (weights, step, optimizer state, settings and URL) when anything fails.
   */
  function loadModel(caseDocument) {
    return serial(async () => {
      const parsed = parseCase(caseDocument);
      if (parsed.kind !== 'transformer') throw new HeadscopeError('INVALID_ARGUMENT', 'loadModel: expected a "kind": "transformer" case');
      const cfg = parsed.config;
      const named = /task=([\w-]+) seed=(\d+) steps=(\d+)/.exec(parsed.name ?? '') ?? [];
      // The name's step is checked as a link's is (a step of 10^20 would be a run that never ends).
      const patch = { layers: cfg.nLayers, heads: cfg.nHeads, dModel: cfg.dModel, mlp: cfg.dMlp > 0, norm: cfg.norm,
        positions: cfg.positions, steps: named[3] ? Number(named[3]) : 0,
        ...(named[1] ? { task: named[1], seed: Number(named[2]) } : {}) };
      if (cfg.dMlp !== 0 && cfg.dMlp !== 4 * cfg.dModel) throw new HeadscopeError('INVALID_ARGUMENT', `loadModel: config.d_mlp: the Train view takes 0 or 4 d_model (${4 * cfg.dModel}), got ${cfg.dMlp}`);
      for (const [key, want] of [['causal', true], ['act', 'gelu'], ['bias', true]]) {
        if (cfg[key] !== want) throw new HeadscopeError('INVALID_ARGUMENT', `loadModel: config.${key}: the Train view takes ${want}, got ${cfg[key]}`);
      }
      const next = applyTrainState(patch, state, 'loadModel: config');
      const nextTask = makeTask(next.task, { seed: next.seed });
      if (nextTask.vocabSize !== cfg.vocabSize || nextTask.seqLen !== cfg.maxLen) {
        throw new HeadscopeError('INVALID_ARGUMENT', `loadModel: config.vocab_size / max_len: ${cfg.vocabSize} / ${cfg.maxLen} ` +
          `do not fit the task ${next.task} (${nextTask.vocabSize} / ${nextTask.seqLen})`);
      }
      const built = await buildModel(next, Object.fromEntries(parsed.stateDict));
      if (destroyed) {
        await built.model.dispose();
        return;
      }
      playing = false;
      generation++;
      state = { ...next };
      await adopt(built, next.steps);
      message.textContent = `Loaded ${parsed.name ?? 'a model'}: training goes on from here (with a new optimizer).`;
      changed('input');
    });
  }

  exportButton.addEventListener('click', async () => {
    try {
      const doc = await exportModel();
      download(new Blob([toJSON(doc)], { type: 'application/json' }), `headscope-train-${state.task}-step${state.steps}.json`, view);
    } catch (e) {
      fail(e);
    }
  });
  loadInput.addEventListener('change', async () => {
    const file = loadInput.files?.[0];
    loadInput.value = '';
    if (!file) return;
    try {
      await loadModel(new Uint8Array(await file.arrayBuffer()));
    } catch (e) {
      fail(e);
    }
  });

  // ---- Actions -----------------------------------------------------------------------------------
  async function loop() {
    while (playing && !destroyed) {
      const ok = await serial(() => trainSteps(CHUNK_STEPS));
      if (!ok) playing = false;
    }
    syncControls();
  }

  function play() {
    if (playing || destroyed) return;
    playing = true;
    message.textContent = '';
    message.classList.remove('hs-error');
    syncControls();
    loop().catch(fail);
  }

  function pause() {
    playing = false;
    syncControls();
  }

  function reset() {
    playing = false;
    generation++;
    lastRate = 0;
    return serial(async () => {
      await newModel();
      changed('reset');
    }).catch((e) => {
      fail(e);
      throw e;
    });
  }

  // Trains up to step `to` in chunks, each with its evaluation (the curve gets its points), as
  // playing would; a refused step or a reset stops it.
  async function trainTo(to) {
    const mine = generation;
    while (state.steps < to && mine === generation && !destroyed) {
      const ok = await serial(() => trainSteps(Math.min(CHUNK_STEPS, to - state.steps)));
      if (!ok) break;
    }
  }

  function step(n = 1) {
    if (!Number.isInteger(n) || n < 1 || n > 100_000) {
      return Promise.reject(new HeadscopeError('INVALID_ARGUMENT', `step: n: expected an integer in [1, 100000], got ${String(n)}`));
    }
    return serial(() => trainSteps(n)).catch((e) => {
      fail(e);
      throw e;
    });
  }

  playButton.addEventListener('click', () => (playing ? pause() : play()));
  stepButton.addEventListener('click', () => { step(1).catch(() => {}); });
  resetButton.addEventListener('click', () => { reset().catch(() => {}); });
  log.addEventListener('change', () => curves.update(curve, { log: log.checked, maxStep: Math.max(state.steps, 100) }));
  // A change of the setup (task, model, optimizer, seed) is a new model from step 0.
  const onControl = () => {
    const patch = {};
    for (const k of ['task', 'norm', 'positions']) patch[k] = c[k].control.value;
    for (const k of ['layers', 'heads', 'dModel', 'lr', 'weightDecay', 'batch', 'clip', 'seed']) patch[k] = Number(c[k].control.value);
    patch.mlp = mlp.checked;
    if (patch.dModel % patch.heads !== 0) patch.heads = Math.min(patch.dModel, state.heads) > 0 ? gcdHeads(patch.dModel, patch.heads) : 1;
    let next;
    try {
      next = applyTrainState(patch, state, 'Train');
    } catch (e) {
      message.textContent = e.message;
      return;
    }
    message.textContent = '';
    if (sameSetup(next, state)) return;
    state = { ...next, steps: 0 };
    reset().catch(() => {});
  };
  controls.addEventListener('change', onControl);

  const ready = serial(newModel).then(async () => {
    syncControls();
    if (target > 0) await trainTo(target);
    view.dataset.ready = 'true';
  }).catch((e) => {
    fail(e);
    view.dataset.ready = 'error';
    throw e;
  });
  ready.catch(() => {});

  return {
    ready,
    getState: () => ({ ...state }),
    setState: setPublicState,
    play, pause, step, reset,
    isPlaying: () => playing,
    /** The trained weights: stateDict() of the model (names as the reference module's). */
    stateDict: () => serial(() => model.stateDict()),
    whatIf,
    exportModel,
    exportAs,
    loadModel,
    layerCase,
    /** Layer l, head h (1-based)'s attention on the probe row, as the model computes it: T rows of T. */
    patternOf: (l, h) => serial(async () => {
      const hook = `blocks.${l}.attn.hook_pattern`;
      const { hooks } = await model.forward(probe.tokens, { hooks: [hook] });
      const T = task.seqLen;
      const data = hooks[hook].data.subarray((h - 1) * T * T, h * T * T);
      return Array.from({ length: T }, (_, i) => Array.from(data.subarray(i * T, (i + 1) * T)));
    }),
    destroy() {
      destroyed = true;
      playing = false;
      whatIf.destroy();
      generation++;
      const e = engine;
      engine = null;
      Promise.resolve(e?.terminate?.()).catch(() => {});
      root.replaceChildren();
    },
  };
}

// The largest head count <= h that divides d (a dModel change keeps the heads when it can).
function gcdHeads(d, h) {
  for (let k = Math.min(d, h); k >= 1; k--) if (d % k === 0) return k;
  return 1;
}
