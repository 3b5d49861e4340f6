// The Train view's controls: the setup form (task; model: layers, heads, K/V heads, dModel, MLP,
// LayerNorm, positions, RoPE's layout, base and rotated fraction (shown only for rope), attention
// window, attention sinks; optimizer: learning rate, weight decay, batch, clip, seed) and the
// training bar (Play, Step, Step 10, Step 100, Reset, the speed, "Train to step", the log scale,
// the step counter, Export model, Load model). Built once; sync() shows the state in them,
// readSetup() reads the form as a patch. The bar is outside the form: its controls change how
// the run goes, not its setup.
import { button, checkbox, el, labelled, setOptions, setText } from '../common/dom.js';
import { D_MODELS, MAX_STEPS, NORMS, POSITIONS, ROPE_LAYOUTS, TASK_NAMES, kvHeadChoices, windowChoices } from './state.js';
import { CHUNKS, DEFAULT_CHUNK } from './playback.js';

const FIELDS = ['task', 'layers', 'heads', 'kvHeads', 'dModel', 'norm', 'positions', 'ropeLayout', 'ropeBase', 'ropeFraction',
  'attnWindow', 'lr', 'weightDecay', 'batch', 'clip', 'seed'];
// The settings of rope only: shown with it, and left out of a patch without it (applyTrainState
// puts them back to their defaults when positions is not rope).
const ROPE_FIELDS = ['ropeLayout', 'ropeBase', 'ropeFraction'];
const TEXT_FIELDS = ['task', 'norm', 'positions', 'ropeLayout'];

const select = (name, values, label, text) => {
  const s = el('select');
  s.name = name;
  setOptions(s, values, text);
  return { control: s, label: labelled(label, s) };
};
// The variants' options follow the setup: K/V heads are the heads' divisors, the windows fit the
// task's rows (a state's own value is always among them).
const kvText = (heads) => (g) => `${g}${g === heads ? ' (MHA)' : g === 1 ? ' (MQA)' : ' (GQA)'}`;
const windowText = (w) => (w === 0 ? 'full' : String(w));
const layoutText = (l) => (l === 'half' ? 'half (GPT-NeoX, LLaMA)' : 'interleaved (RoFormer, GPT-J)');
const number = (name, label, { min, max, step }) => {
  const i = el('input');
  i.type = 'number';
  i.name = name;
  Object.assign(i, { min: String(min), max: String(max), step: String(step) });
  return { control: i, label: labelled(label, i) };
};

/** A refused field: aria-invalid, and described by the message that says why (its id). */
export function mark(control, message) {
  control.setAttribute('aria-invalid', 'true');
  if (message) control.setAttribute('aria-describedby', message.id);
}
export function unmark(control) {
  control.removeAttribute('aria-invalid');
  control.removeAttribute('aria-describedby');
}

/** @param {Set<string>} hidden the hide option's parts (task, model, optimizer, buttons) */
export function buildControls(hidden) {
  const form = el('form', 'hs-controls hs-train-controls');
  form.addEventListener('submit', (e) => e.preventDefault());
  const c = {
    task: select('task', TASK_NAMES, 'Task'),
    layers: select('layers', [1, 2, 3, 4], 'Layers'),
    heads: select('heads', [1, 2, 4, 8, 16, 32, 64], 'Heads'),
    kvHeads: select('kvHeads', kvHeadChoices(2), 'K/V heads', kvText(2)),
    dModel: select('dModel', D_MODELS, 'dModel'),
    norm: select('norm', NORMS, 'LayerNorm'),
    positions: select('positions', POSITIONS, 'Positions'),
    ropeLayout: select('ropeLayout', ROPE_LAYOUTS, 'RoPE layout', layoutText),
    // Any base > 0 and fraction in (0, 1] is a setting (step any: no value is "out of step").
    ropeBase: number('ropeBase', 'RoPE base', { min: 1, max: 1e9, step: 'any' }),
    ropeFraction: number('ropeFraction', 'RoPE fraction', { min: 0.0625, max: 1, step: 'any' }),
    attnWindow: select('attnWindow', [0], 'Attention window', windowText),
    lr: number('lr', 'Learning rate', { min: 0.00001, max: 1, step: 0.0005 }),
    weightDecay: number('weightDecay', 'Weight decay', { min: 0, max: 1, step: 0.01 }),
    batch: number('batch', 'Batch', { min: 1, max: 256, step: 1 }),
    clip: number('clip', 'Clip norm (0: off)', { min: 0, max: 100, step: 0.5 }),
    seed: number('seed', 'Seed', { min: 0, max: 2147483647, step: 1 }),
  };
  const { input: mlp, label: mlpLabel } = checkbox('mlp', ' MLP');
  const { input: sinks, label: sinksLabel } = checkbox('attnSinks', ' attention sinks');
  const taskRow = el('div', 'hs-train-row');
  taskRow.append(c.task.label);
  const modelRow = el('div', 'hs-train-row');
  modelRow.append(c.layers.label, c.heads.label, c.kvHeads.label, c.dModel.label, mlpLabel, c.norm.label, c.positions.label,
    c.ropeLayout.label, c.ropeBase.label, c.ropeFraction.label, c.attnWindow.label, sinksLabel);
  c.ropeLayout.control.title = 'Rotary embeddings\' pairs of dims: i with i + r/2 (half) or 2i with 2i + 1 (interleaved)';
  c.ropeBase.control.title = 'Rotary embeddings\' base: pair i of r turns by position / base^(2i / r) (LLaMA: 10000; larger: slower angles)';
  c.ropeFraction.control.title = 'The fraction of each head\'s dims that turn (GPT-NeoX\'s rotary_pct): the largest even number <= fraction x head dim';
  c.kvHeads.control.title = 'Key/value heads: each serves heads / K/V heads query heads (grouped-query attention; 1: multi-query)';
  c.attnWindow.control.title = 'Sliding-window attention: each token sees itself and the window - 1 tokens before it (full: all of them)';
  sinks.title = 'Attention sinks (gpt-oss): each head has a learned sink logit in every softmax row, so a row of the pattern may ' +
    'sum to less than 1: the head can attend to nothing';
  const optRow = el('div', 'hs-train-row');
  optRow.append(c.lr.label, c.weightDecay.label, c.batch.label, c.clip.label, c.seed.label);
  taskRow.hidden = hidden.has('task');
  modelRow.hidden = hidden.has('model');
  optRow.hidden = hidden.has('optimizer');
  form.append(taskRow, modelRow, optRow);

  const buttons = el('div', 'hs-train-buttons');
  buttons.setAttribute('role', 'group');
  buttons.setAttribute('aria-label', 'Training');
  const playButton = button('Play', 'hs-train-play');
  playButton.name = 'play';
  const stepButton = button('Step', 'hs-train-step');
  stepButton.name = 'step';
  const stepMore = [10, 100].map((n) => {
    const b = button(`Step ${n}`, 'hs-train-step');
    b.name = `step${n}`;
    b.dataset.steps = String(n);
    return b;
  });
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
  // Speed: steps per chunk, each chunk one evaluation and drawing (1: every step is drawn).
  const speed = el('select');
  speed.name = 'chunk';
  setOptions(speed, CHUNKS, (n) => (n === 1 ? '1 (every step drawn)' : String(n)));
  speed.value = String(DEFAULT_CHUNK);
  speed.title = 'Steps trained between two evaluations (each evaluation draws the heads and adds a point to the history)';
  const speedLabel = labelled('Steps per update', speed, 'hs-train-speed');
  // Text, not a number input: a number input hides what was typed when it is not a number (its
  // value is ''), and the refusal should quote it.
  const trainTo = el('input');
  trainTo.type = 'text';
  trainTo.inputMode = 'numeric';
  trainTo.name = 'trainTo';
  trainTo.placeholder = 'e.g. 500';
  trainTo.title = `A step after the model's, up to ${MAX_STEPS}: trained in updates of the chosen size, with the progress shown`;
  const trainToButton = button('Train to step', 'hs-train-to');
  trainToButton.name = 'train-to';
  const trainToLabel = labelled('Step to train to', trainTo, 'hs-train-to-field');
  const trainToGroup = el('span', 'hs-train-to-group');
  trainToGroup.append(trainToLabel, trainToButton);
  buttons.append(playButton, stepButton, ...stepMore, resetButton, speedLabel, trainToGroup, logLabel, counter, exportButton, loadLabel);
  buttons.hidden = hidden.has('buttons');

  // The fields whose typed value the setup refused: sync leaves them as typed, and marked, until a
  // setup is accepted (the reader sees what was refused; the message says what is in use).
  const refused = new Set();

  /**
   * Shows the state, whether it plays and the training rate (steps/s over the last second while
   * a run trains on its own, 0: none); seqLen: the task's row length (the windows offered are
   * below it).
   */
  function sync(state, playing, rate, seqLen = 0) {
    setOptions(c.kvHeads.control, kvHeadChoices(state.heads), kvText(state.heads));
    setOptions(c.attnWindow.control, [...new Set([...windowChoices(seqLen), state.attnWindow])].sort((a, b) => a - b), windowText);
    for (const k of FIELDS) {
      const control = c[k].control;
      if (!refused.has(control) && control.value !== String(state[k])) control.value = String(state[k]);
    }
    if (!refused.has(mlp)) mlp.checked = state.mlp;
    if (!refused.has(sinks)) sinks.checked = state.attnSinks;
    log.checked = state.log;
    for (const k of ROPE_FIELDS) c[k].label.hidden = state.positions !== 'rope';
    playButton.textContent = playing ? 'Pause' : 'Play';
    playButton.setAttribute('aria-pressed', String(playing));
    setText(counter, `step ${state.steps}${rate ? `, ${rate.toFixed(0)} steps/s (last second)` : ''}`);
    counter.dataset.rate = String(rate);
  }

  /** The form's setup as a patch of the state (unchecked: applyTrainState checks it). */
  function readSetup() {
    const patch = {};
    for (const k of TEXT_FIELDS) patch[k] = c[k].control.value;
    for (const k of FIELDS) if (!TEXT_FIELDS.includes(k)) patch[k] = Number(c[k].control.value);
    patch.mlp = mlp.checked;
    patch.attnSinks = sinks.checked;
    // The rotary settings are rope's only (another positions puts them back to their defaults).
    if (patch.positions !== 'rope') for (const k of ROPE_FIELDS) delete patch[k];
    return patch;
  }

  /**
   * A value the setup refused: the field named by the refusal (state.js's "Train.lr: ...") is
   * marked invalid, described by `message` (the line that says why), and keeps what was typed
   * until a value is accepted (sync unmarks it). False when no field of the form has that name.
   */
  function markInvalid(key, message) {
    const control = key === 'mlp' ? mlp : key === 'attnSinks' ? sinks : FIELDS.includes(key) ? c[key].control : null;
    if (control === null) return false;
    refused.add(control);
    mark(control, message);
    return true;
  }
  /** The setup was accepted (the form's, or update()'s): the refused fields show the state again. */
  function accept() {
    for (const control of refused) unmark(control);
    refused.clear();
  }

  return { form, buttons, playButton, stepButton, stepMore, resetButton, speed, trainTo, trainToButton, log, exportButton, loadInput,
    sync, readSetup, markInvalid, accept };
}
