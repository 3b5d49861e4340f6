// The Train view's controls: the setup form (task; model: layers, heads, dModel, MLP, LayerNorm,
// positions; optimizer: learning rate, weight decay, batch, clip, seed) and the training bar
// (Play, Step, Reset, the log scale, the step counter, Export model, Load model). Built once;
// sync() shows the state in them, readSetup() reads the form as a patch.
import { button, checkbox, el, labelled, setText } from '../common/dom.js';
import { D_MODELS, NORMS, POSITIONS, TASK_NAMES } from './state.js';

const FIELDS = ['task', 'layers', 'heads', 'dModel', 'norm', 'positions', 'lr', 'weightDecay', 'batch', 'clip', 'seed'];
const TEXT_FIELDS = ['task', 'norm', 'positions'];

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

/** @param {Set<string>} hidden the hide option's parts (task, model, optimizer, buttons) */
export function buildControls(hidden) {
  const form = el('form', 'hs-controls hs-train-controls');
  form.addEventListener('submit', (e) => e.preventDefault());
  const c = {
    task: select('task', TASK_NAMES, 'Task'),
    layers: select('layers', [1, 2, 3, 4], 'Layers'),
    heads: select('heads', [1, 2, 4, 8, 16, 32, 64], 'Heads'),
    dModel: select('dModel', D_MODELS, 'dModel'),
    norm: select('norm', NORMS, 'LayerNorm'),
    positions: select('positions', POSITIONS, 'Positions'),
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
  form.append(taskRow, modelRow, optRow);

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

  /** Shows the state, whether it plays and the last training rate (steps/s, 0: none yet). */
  function sync(state, playing, rate) {
    for (const k of FIELDS) {
      const control = c[k].control;
      if (control.value !== String(state[k])) control.value = String(state[k]);
      control.removeAttribute('aria-invalid');
    }
    mlp.checked = state.mlp;
    playButton.textContent = playing ? 'Pause' : 'Play';
    playButton.setAttribute('aria-pressed', String(playing));
    setText(counter, `step ${state.steps}${rate ? `, ${rate.toFixed(0)} steps/s` : ''}`);
  }

  /** The form's setup as a patch of the state (unchecked: applyTrainState checks it). */
  function readSetup() {
    const patch = {};
    for (const k of TEXT_FIELDS) patch[k] = c[k].control.value;
    for (const k of FIELDS) if (!TEXT_FIELDS.includes(k)) patch[k] = Number(c[k].control.value);
    patch.mlp = mlp.checked;
    return patch;
  }

  return { form, buttons, playButton, stepButton, resetButton, log, exportButton, loadInput, sync, readSetup };
}
