// The Train view's public state: the experiment a reader sets up (task, model, optimizer, seed)
// and how far it has trained. Pure functions, tested in Node (tests/js/train-view-state.test.js).
//
//   {
//     task: TaskName                 a built-in task (headscope/tasks), with its default options
//     layers: 1..4, heads: a divisor of dModel, dModel: 16 | 32 | 64 | 128
//     mlp: boolean                   an MLP of 4 dModel per block, or attention only
//     norm: 'pre' | 'post' | 'none', positions: 'learned' | 'sinusoidal' | 'none'
//     lr: number in (0, 1], weightDecay: number in [0, 1], batch: 1..256, clip: number >= 0 (0: off)
//     seed: integer >= 0             the model's initial weights and the task's rows
//     steps: integer >= 0            where training stands (the URL's: train to this step)
//   }
import { HeadscopeError } from '../../lib/errors.js';
import { quoteInput } from '../../lib/tensor.js';
import { TASKS } from '../../lib/tasks.js';
import { TRANSFORMER_SCHEMA, choices, divisible } from '../../lib/config.js';

export const TASK_NAMES = TASKS.map((t) => t.name);
export const D_MODELS = [16, 32, 64, 128];
// The model's choices are the transformer schema's (web/lib/schema.js).
export const NORMS = choices(TRANSFORMER_SCHEMA, 'norm');
// Not 'rope' (rotary positions) yet: a head opens in the Heads view and the Walkthrough as a
// MultiheadAttention case of its layer (layer-case.js), which would have to carry the layer's
// rope_dims (MultiheadAttention has the option) and be checked through both views first.
export const POSITIONS = choices(TRANSFORMER_SCHEMA, 'positions').filter((p) => p !== 'rope');
/** Whether a setting's heads divide its dModel (the schema's rule, in the view's names). */
export const headsDivide = (s) => divisible(TRANSFORMER_SCHEMA, { dModel: s.dModel, nHeads: s.heads });
/** The state's fields, in the order of a link's parameters. */
export const TRAIN_KEYS = ['task', 'layers', 'heads', 'dModel', 'mlp', 'norm', 'positions', 'lr', 'weightDecay', 'batch', 'clip', 'seed', 'steps'];
export const MAX_STEPS = 100_000;

/** The induction preset: the two-layer attention-only model whose layer-1 head becomes an induction head. */
export function defaultTrainState() {
  return { task: 'induction', layers: 2, heads: 2, dModel: 32, mlp: false, norm: 'pre', positions: 'learned',
    lr: 3e-3, weightDecay: 0.01, batch: 16, clip: 1, seed: 1, steps: 0 };
}

const fail = (where, message) => { throw new HeadscopeError('INVALID_ARGUMENT', `${where}: ${message}`); };
const describe = (v) => (typeof v === 'string' ? JSON.stringify(v.slice(0, 40)) : Array.isArray(v) ? 'an array' : String(v));

/** `current` with `patch` applied, every field checked first (nothing applied on an error). */
export function applyTrainState(patch, current, where = 'setState: state') {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) fail(where, `expected an object with any of ${TRAIN_KEYS.join(', ')}`);
  const p = {};
  for (const key of Object.keys(patch)) {
    if (!TRAIN_KEYS.includes(key)) fail(`${where}.${quoteInput(key)}`, `unknown field (expected any of ${TRAIN_KEYS.join(', ')})`);
    p[key] = patch[key];
  }
  const next = { ...current, ...p };
  const oneOf = (key, values) => {
    if (!values.includes(next[key])) fail(`${where}.${key}`, `expected one of ${values.join(', ')}, got ${describe(next[key])}`);
  };
  const int = (key, min, max) => {
    if (!Number.isInteger(next[key]) || next[key] < min || next[key] > max) fail(`${where}.${key}`, `expected an integer in [${min}, ${max}], got ${describe(next[key])}`);
  };
  const num = (key, min, max, openMin = false) => {
    const v = next[key];
    if (typeof v !== 'number' || !Number.isFinite(v) || v > max || (openMin ? v <= min : v < min)) {
      fail(`${where}.${key}`, `expected a number in ${openMin ? '(' : '['}${min}, ${max}], got ${describe(v)}`);
    }
  };
  oneOf('task', TASK_NAMES);
  int('layers', 1, 4);
  oneOf('dModel', D_MODELS);
  int('heads', 1, next.dModel);
  if (!headsDivide(next)) fail(`${where}.heads`, `expected a divisor of dModel ${next.dModel}, got ${next.heads}`);
  if (typeof next.mlp !== 'boolean') fail(`${where}.mlp`, `expected true or false, got ${describe(next.mlp)}`);
  oneOf('norm', NORMS);
  oneOf('positions', POSITIONS);
  num('lr', 0, 1, true);
  num('weightDecay', 0, 1);
  int('batch', 1, 256);
  num('clip', 0, 1e6);
  int('seed', 0, 2 ** 31 - 1);
  int('steps', 0, MAX_STEPS);
  return next;
}

/** What differs in `b` from `a` that needs a new model (anything but steps). */
export const sameSetup = (a, b) => TRAIN_KEYS.every((k) => k === 'steps' || a[k] === b[k]);

/** createTransformer's config and setOptimizer's options for a state and its task. */
export function trainSetup(s, task) {
  return {
    model: { vocabSize: task.vocabSize, maxLen: task.seqLen, dModel: s.dModel, nLayers: s.layers, nHeads: s.heads,
      dMlp: s.mlp ? 4 * s.dModel : 0, norm: s.norm, positions: s.positions, causal: true, act: 'gelu', bias: true, seed: s.seed },
    optimizer: { type: 'adamw', lr: s.lr, betas: [0.9, 0.999], eps: 1e-8, weightDecay: s.weightDecay,
      ...(s.clip > 0 ? { clipGradNorm: s.clip } : {}) },
    task: { name: s.task, seed: s.seed },
  };
}
