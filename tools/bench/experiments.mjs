// How long each causal experiment takes on the Train view's default model (induction task,
// 2 layers of 2 heads, dModel 32, attention only; one held-out row of the task's length), in
// Node, through the package: the median of --runs calls after --warmup calls, per experiment,
// with the CPU model. A benchmark (run by hand, results in docs/bench/README.md), not a test.
//
//   node tools/bench/experiments.mjs [--runs 51] [--warmup 5] [--simd simd128|relaxed] [--layers 2] [--heads 2]
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { init } from '../../web/lib/index.js';
import { makeTask } from '../../web/lib/tasks.js';
import { defaultTrainState, trainSetup } from '../../web/views/train/state.js';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const runs = Number(arg('runs', '51')), warmup = Number(arg('warmup', '5'));
const hs = await init({ simd: arg('simd', 'simd128') });
const state = { ...defaultTrainState(), layers: Number(arg('layers', '2')), heads: Number(arg('heads', '2')) };
state.kvHeads = state.heads;
const task = makeTask(state.task, { seed: state.seed });
const setup = trainSetup(state, task);
const model = hs.createTransformer(setup.model);
const row = task.heldOut(1, 0);
const tokens = row.tokens, targets = row.targets;
// The corrupted prompt: the row's first half redrawn (induction's second half repeats the first,
// so patching tells which heads carry the copy).
const T = tokens.shape[1];
const corrupted = { data: Int32Array.from(tokens.data, (t, i) => (i < T / 2 ? (t + 1 + i) % task.vocabSize : t)), shape: tokens.shape };

function median(fn) {
  for (let i = 0; i < warmup; i++) fn();
  const times = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    fn();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return times[times.length >> 1];
}

const experiments = [
  ['forward (for scale)', () => model.forward(tokens)],
  ['logitLens', () => model.logitLens(tokens)],
  ['attentionRollout', () => model.attentionRollout(tokens)],
  ['scoreContributions', () => model.scoreContributions(tokens, { layer: state.layers - 1, head: 0, position: T - 1 })],
  ['activationPatching heads', () => model.activationPatching(tokens, corrupted, targets, { site: 'heads' })],
  ['activationPatching positions', () => model.activationPatching(tokens, corrupted, targets, { site: 'positions' })],
];
const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
console.log(`# Causal experiments, Node ${process.version}, ${cpu} (${os.cpus().length} threads), ${hs.simd}`);
console.log(`model: ${state.layers} layers x ${state.heads} heads, dModel ${state.dModel}, vocab ${task.vocabSize}, T = ${T}; ` +
  `median of ${runs} calls after ${warmup}\n`);
console.log('| experiment | median ms |\n| --- | ---: |');
for (const [name, fn] of experiments) console.log(`| ${name} | ${median(fn).toFixed(3)} |`);
model.dispose();
