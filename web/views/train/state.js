// The Train view's public state: the experiment a reader sets up (task, model, optimizer, seed)
// and how far it has trained. Pure functions, tested in Node (tests/js/train-view-state.test.js).
//
//   {
//     task: TaskName                 a built-in task (headscope/tasks), with its default options
//     layers: 1..4, heads: a divisor of dModel, dModel: 16 | 32 | 64 | 128
//     kvHeads: a divisor of heads    K/V heads (grouped-query attention; 1: multi-query; = heads:
//                                    plain multi-head). A patch changing heads alone keeps K/V
//                                    heads equal to heads when they were (so links without it
//                                    stay plain multi-head attention)
//     attnWindow: 0..256             sliding-window attention (0: full attention)
//     attnSinks: boolean             attention sinks (gpt-oss): a learned sink logit per head in
//                                    every softmax row, so a head can attend to nothing
//     mlp: boolean                   an MLP of 4 dModel per block, or attention only
//     norm: 'pre' | 'post' | 'none', positions: 'learned' | 'sinusoidal' | 'none' | 'alibi' | 'rope' (the schema's choices)
//     ropeLayout: 'half' | 'interleaved', ropeBase: number > 0, ropeFraction: number in (0, 1]
//                                    rotary embeddings' layout, base and rotated fraction of each
//                                    head (the schema's rows); off their defaults only with
//                                    positions 'rope' (another positions puts them back); rope
//                                    needs 2 rotary dims per head at least (ropeDims)
//     lr: number in (0, 1], weightDecay: number in [0, 1], batch: 1..256, clip: number >= 0 (0: off)
//     seed: integer >= 0             the model's initial weights and the task's rows
//     steps: integer >= 0            where training stands (the URL's: train to this step)
//     off: [layer, head][]           heads switched off in the ablation box (layer 0-based, head
//                                    1-based, as the page names them: L1 H2 is [1, 2]), sorted;
//                                    a new setup switches every head back on
//     log: boolean                   the loss curves' log scale
//   }
// off and log are how the reader looks at the model, not the model: changing them (or steps)
// keeps the trained model (sameSetup).
import { HeadscopeError } from '../../lib/errors.js';
import { quoteInput } from '../../lib/tensor.js';
import { TASKS, makeTask } from '../../lib/tasks.js';
import { compileFormula } from '../../lib/detectors.js';
import { TRANSFORMER_SCHEMA, accepts, choices, divisible, expectation, field } from '../../lib/config.js';

export const TASK_NAMES = TASKS.map((t) => t.name);
export const D_MODELS = [16, 32, 64, 128];
// The model's choices are the transformer schema's (web/lib/schema.js).
export const NORMS = choices(TRANSFORMER_SCHEMA, 'norm');
// 'rope' included: a head opens in the Heads view as a MultiheadAttention case of its layer that
// carries the rotation (layer-case.js: rope_dims, rope_layout, rope_base).
export const POSITIONS = choices(TRANSFORMER_SCHEMA, 'positions');
export const ROPE_LAYOUTS = choices(TRANSFORMER_SCHEMA, 'ropeLayout');
/** The rotary fields and their defaults (the schema's), kept at them unless positions is 'rope'. */
const ROPE_KEYS = ['ropeLayout', 'ropeBase', 'ropeFraction'];
export const ROPE_DEFAULTS = Object.fromEntries(ROPE_KEYS.map((k) => [k, field(TRANSFORMER_SCHEMA, k).default.value]));
/**
 * The rotary dims of each head (the Transformer's RopeDims, src/headscope/transformer.h): the
 * largest even number <= ropeFraction x head dim; 0 without positions 'rope'.
 */
export const ropeDims = (s) => (s.positions === 'rope' ? 2 * Math.floor(s.ropeFraction * Math.floor(s.dModel / s.heads) / 2) : 0);
/** Whether a setting's heads divide its dModel (the schema's rule, in the view's names). */
export const headsDivide = (s) => divisible(TRANSFORMER_SCHEMA, { dModel: s.dModel, nHeads: s.heads });
/** The state's fields, in the order of a link's parameters. */
export const TRAIN_KEYS = ['task', 'layers', 'heads', 'kvHeads', 'dModel', 'mlp', 'norm', 'positions', ...ROPE_KEYS, 'attnWindow',
  'attnSinks', 'lr', 'weightDecay', 'batch', 'clip', 'seed', 'steps', 'off', 'log', 'keywords', 'pattern'];
/**
 * The fields a change of which keeps the model (the rest are its setup): the step, the reader's
 * switches and scale, and the two detectors the reader defines: keywords (token strings of the
 * task's vocabulary, space-separated: the keyword detector's set) and pattern (a formula for the
 * custom detector, web/lib/detectors.js compileFormula); '' for none.
 */
const VIEW_KEYS = ['steps', 'off', 'log', 'keywords', 'pattern'];
/** The longest keywords or pattern text a state takes. */
export const MAX_DETECTOR_TEXT = 500;
/** The largest attention window a state takes (the tasks' rows are at most this long). */
export const MAX_WINDOW = 256;
/** The divisors of `heads`, from heads down: the K/V head counts a setting with `heads` can have. */
export const kvHeadChoices = (heads) => Array.from({ length: heads }, (_, k) => heads - k).filter((g) => heads % g === 0);
/** The attention windows the form offers for rows of T tokens: 0 (full), then powers of two below T. */
export function windowChoices(T) {
  const out = [0];
  for (let w = 1; w < T && w <= MAX_WINDOW; w *= 2) out.push(w);
  return out;
}
export const MAX_STEPS = 100_000;

/** The induction preset: the two-layer attention-only model whose layer-1 head becomes an induction head. */
export function defaultTrainState() {
  return { task: 'induction', layers: 2, heads: 2, kvHeads: 2, dModel: 32, mlp: false, norm: 'pre', positions: 'learned',
    ...ROPE_DEFAULTS, attnWindow: 0, attnSinks: false, lr: 3e-3, weightDecay: 0.01, batch: 16, clip: 1, seed: 1, steps: 0, off: [], log: false,
    keywords: '', pattern: '' };
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
  // Heads changed alone: K/V heads that were the heads stay the heads (plain multi-head attention).
  if ('heads' in p && !('kvHeads' in p) && current.kvHeads === current.heads) next.kvHeads = next.heads;
  // Positions other than rope: the rotary fields the patch leaves out go back to their defaults.
  if (next.positions !== 'rope') for (const k of ROPE_KEYS) if (!(k in p)) next[k] = ROPE_DEFAULTS[k];
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
  if (!Number.isInteger(next.kvHeads) || next.kvHeads < 1 || next.heads % next.kvHeads !== 0) fail(`${where}.kvHeads`, `expected a divisor of heads ${next.heads}, got ${next.kvHeads}`);
  int('attnWindow', 0, MAX_WINDOW);
  for (const k of ['mlp', 'attnSinks']) if (typeof next[k] !== 'boolean') fail(`${where}.${k}`, `expected true or false, got ${describe(next[k])}`);
  oneOf('norm', NORMS);
  oneOf('positions', POSITIONS);
  for (const k of ROPE_KEYS) {
    const f = field(TRANSFORMER_SCHEMA, k);
    if (!accepts(f, next[k]) || (k === 'ropeFraction' && next[k] > 1)) {
      fail(`${where}.${k}`, `expected ${k === 'ropeFraction' ? 'a number in (0, 1]' : expectation(TRANSFORMER_SCHEMA, f)}, got ${describe(next[k])}`);
    }
    if (next.positions !== 'rope' && next[k] !== ROPE_DEFAULTS[k]) {
      fail(`${where}.${k}`, `applies only with positions 'rope' (positions is ${describe(next.positions)}): leave it at ${describe(ROPE_DEFAULTS[k])}`);
    }
  }
  if (next.positions === 'rope' && ropeDims(next) < 2) {
    fail(`${where}.heads`, `positions 'rope' turns pairs of dims: ropeFraction ${next.ropeFraction} of the head dim ` +
      `dModel / heads = ${Math.floor(next.dModel / next.heads)} leaves none (fewer heads, or a larger fraction)`);
  }
  num('lr', 0, 1, true);
  num('weightDecay', 0, 1);
  int('batch', 1, 256);
  num('clip', 0, 1e6);
  int('seed', 0, 2 ** 31 - 1);
  int('steps', 0, MAX_STEPS);
  if (typeof next.log !== 'boolean') fail(`${where}.log`, `expected true or false, got ${describe(next.log)}`);
  readDetectorText(next, where);
  // A new setup is a new model with every head on: switches the patch does not set go.
  if (!('off' in p) && !sameSetup(next, current)) next.off = [];
  next.off = readOff(next.off, next, `${where}.off`);
  return next;
}

// keywords: words of the task's vocabulary; pattern: a formula compileFormula accepts (its
// message names the field and the character).
function readDetectorText(s, where) {
  for (const k of ['keywords', 'pattern']) {
    if (typeof s[k] !== 'string' || s[k].length > MAX_DETECTOR_TEXT) {
      fail(`${where}.${k}`, `expected text of at most ${MAX_DETECTOR_TEXT} characters, got ${describe(s[k])}`);
    }
  }
  if (s.keywords.trim() === '' && s.pattern.trim() === '') return;
  const { vocab } = makeTask(s.task, { seed: s.seed });
  for (const word of s.keywords.split(/\s+/).filter(Boolean)) {
    if (!vocab.includes(word)) {
      fail(`${where}.keywords`, `${describe(word)} is not a token of the ${s.task} task (its tokens: ` +
        `${vocab.slice(0, 12).join(' ')}${vocab.length > 12 ? ' ...' : ''})`);
    }
  }
  if (s.pattern.trim() !== '') compileFormula(s.pattern, { vocab, name: `${where}.pattern` });
}

/** The state's detector options for headScores' extra detectors (keyword, custom), or null. */
export function extraDetectors(s, vocab) {
  const words = s.keywords.split(/\s+/).filter(Boolean);
  const detectors = [...(words.length ? ['keyword'] : []), ...(s.pattern.trim() ? ['custom'] : [])];
  if (detectors.length === 0) return null;
  return { detectors, vocab, ...(words.length ? { keywords: words.map((w) => vocab.indexOf(w)) } : {}),
    ...(s.pattern.trim() ? { custom: s.pattern } : {}) };
}

// The switched-off heads as sorted [layer, head] pairs of the setup's heads, each once.
function readOff(off, s, where) {
  if (!Array.isArray(off)) fail(where, `expected a list of [layer, head] pairs, got ${describe(off)}`);
  const seen = new Set();
  const pairs = off.map((pair, k) => {
    const [l, h] = Array.isArray(pair) && pair.length === 2 ? pair : [NaN, NaN];
    if (!Number.isInteger(l) || !Number.isInteger(h) || l < 0 || l >= s.layers || h < 1 || h > s.heads) {
      fail(`${where}[${k}]`, `expected a head "layer.head" of ${s.layers} layers (0 to ${s.layers - 1}) x ${s.heads} heads ` +
        `(1 to ${s.heads}), got ${Array.isArray(pair) ? pair.map(describe).join('.') : describe(pair)}`);
    }
    if (seen.has(`${l}.${h}`)) fail(`${where}[${k}]`, `L${l} H${h} is given twice`);
    seen.add(`${l}.${h}`);
    return [l, h];
  });
  return pairs.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
}

/** What differs in `b` from `a` that needs a new model (anything but steps, off and log). */
export const sameSetup = (a, b) => TRAIN_KEYS.every((k) => VIEW_KEYS.includes(k) || a[k] === b[k]);
/** The fields of a state that make its model (not steps, off or log), as a string to compare. */
export const setupOf = (s) => JSON.stringify(TRAIN_KEYS.filter((k) => !VIEW_KEYS.includes(k)).map((k) => s[k]));

/** createTransformer's config and setOptimizer's options for a state and its task. */
export function trainSetup(s, task) {
  return {
    model: { vocabSize: task.vocabSize, maxLen: task.seqLen, dModel: s.dModel, nLayers: s.layers, nHeads: s.heads,
      nKvHeads: s.kvHeads === s.heads ? null : s.kvHeads, attnWindow: s.attnWindow, dMlp: s.mlp ? 4 * s.dModel : 0, norm: s.norm, positions: s.positions,
      ...(s.positions === 'rope' ? { ropeLayout: s.ropeLayout, ropeBase: s.ropeBase, ropeFraction: s.ropeFraction } : {}),
      ...(s.attnSinks ? { attnSinks: true } : {}),
      causal: true, act: 'gelu', bias: true, seed: s.seed },
    optimizer: { type: 'adamw', lr: s.lr, betas: [0.9, 0.999], eps: 1e-8, weightDecay: s.weightDecay,
      ...(s.clip > 0 ? { clipGradNorm: s.clip } : {}) },
    task: { name: s.task, seed: s.seed },
  };
}
