// The seeds' what-if experiments, measured: `import { runExperiment } from 'headscope/experiments'`.
//
// "What if there is one head? 64 heads of one dimension?" An experiment trains the same small
// transformer on one built-in task (headscope/tasks) once per head count and seed, everything else
// fixed (dModel, layers, optimizer, batches, steps), and reports each run's loss curves (training
// and held-out) and final held-out accuracy, and per head count the mean, spread and time. An
// experiment with `variants` compares attention variants instead (K/V heads, positions, a window,
// attention sinks) at one head count: one run per (variant, seed), a row per variant. It runs
// on init()'s API (in this thread, one run after another) or on initWorker() engines (runs side by
// side, one per worker): the same seeds give the same bits either way (docs/experiments.md).
//
//   const result = await runExperiment(await init(), { task: { name: 'log-line' }, heads: [1, 4, 64] });
//   console.log(formatTable(result));
import { HeadscopeError } from './errors.js';
import { quoteInput } from './tensor.js';
import { makeTask } from './tasks.js';

/** The seeds' head counts at dModel 64: head dim 64 ... 1. */
export const HEAD_COUNTS = Object.freeze([1, 2, 4, 8, 16, 64]);

/**
 * The documented experiments (docs/experiments.md; tools/whatif.mjs and the Train view's "What
 * if?" run them): dModel 64, heads 1 ... 64, three seeds, the rest fixed; or 8 heads and a row per
 * attention variant.
 */
export const EXPERIMENTS = Object.freeze({
  // One counted position per line, the label after "?": PAGE iff the level is ERROR, service= is
  // database or payment and duration= is over 1000ms; three fields, at positions that vary from
  // line to line, must be read at once (docs/tasks.md).
  'log-line': Object.freeze({ task: { name: 'log-line' }, nLayers: 2, dMlp: 0, steps: 300 }),
  // A random sequence repeated: predicting the second copy needs a previous-token head and an
  // induction head, whose match is on token identity: a head of a few dimensions cannot hold it.
  induction: Object.freeze({ task: { name: 'induction', seqLen: 32 }, nLayers: 2, dMlp: 0, steps: 400 }),
  // The variants on the induction task, 8 heads of 8 dims: fewer K/V heads keep fewer keys and
  // values (GQA, MQA: 4 and 8 times smaller KV caches); ALiBi, a window and RoPE replace the
  // position embedding or restrict what a head sees. What do they cost the circuit at this budget?
  'kv-heads': Object.freeze({ task: { name: 'induction', seqLen: 32 }, nLayers: 2, dMlp: 0, steps: 400, heads: Object.freeze([8]),
    variants: Object.freeze([{ name: 'MHA (8 K/V heads)' }, { name: 'GQA (2 K/V heads)', nKvHeads: 2 }, { name: 'MQA (1 K/V head)', nKvHeads: 1 }]) }),
  positions: Object.freeze({ task: { name: 'induction', seqLen: 32 }, nLayers: 2, dMlp: 0, steps: 400, heads: Object.freeze([8]),
    variants: Object.freeze([{ name: 'learned positions' }, { name: 'ALiBi', positions: 'alibi' }, { name: 'ALiBi, window 8', positions: 'alibi', attnWindow: 8 },
      { name: 'RoPE', positions: 'rope' }]) }),
  // Attention sinks (gpt-oss): a learned logit per head in every softmax row lets a head attend to
  // nothing. Does the induction circuit form as well with them? (The first row is kv-heads' MHA row.)
  sinks: Object.freeze({ task: { name: 'induction', seqLen: 32 }, nLayers: 2, dMlp: 0, steps: 400, heads: Object.freeze([8]),
    variants: Object.freeze([{ name: 'no sinks' }, { name: 'attention sinks', attnSinks: true }]) }),
});

/** What a variant may set (createTransformer's fields), besides its name. */
export const VARIANT_FIELDS = Object.freeze(['nKvHeads', 'positions', 'attnWindow', 'attnSinks']);

/**
 * The rows against the one with the highest mean held-out accuracy, by the seeds' spread: a row is
 * clearly below the top when its best seed is under the top's worst seed (their min-max ranges do
 * not meet), and the top is the clear best only when every other row is clearly below it. With
 * three seeds a gap of a point of the means can sit inside one seed's luck, so a gap inside the
 * spread is not called a difference. `within`: the other rows whose range meets the top's.
 */
export function rankBySpread(rows) {
  const top = rows.reduce((a, b) => (b.accuracy.mean > a.accuracy.mean ? b : a));
  const others = rows.filter((r) => r !== top);
  const isBelow = (r) => r.accuracy.max < top.accuracy.min;
  const within = others.filter((r) => !isBelow(r));
  return { top, clear: within.length === 0, within, below: others.filter(isBelow), isBelow };
}

/**
 * What an experiment's rows say, in words: the best only when it is above the others on every seed
 * (rankBySpread), else the rows within the seeds' spread of the highest mean; then one head and the
 * narrowest heads against the top, or each variant.
 */
export function describeResult({ rows }) {
  const pct = (x) => `${(100 * x).toFixed(1)}%`;
  const { top, clear, within, below, isBelow } = rankBySpread(rows);
  const dims = (d) => `${d} dim${d > 1 ? 's' : ''}`;
  const heads = (r) => `${r.heads} head${r.heads > 1 ? 's' : ''}`;
  const name = (r) => r.variant ?? heads(r);
  const list = (xs) => (xs.length > 1 ? `${xs.slice(0, -1).join(', ')} and ${xs[xs.length - 1]}` : xs[0]);
  const topName = (r) => (r.variant ? r.variant : `${heads(r)} of ${dims(r.headDim)}`);
  const first = rows.length === 1
    ? `Only ${topName(top)}: ${pct(top.accuracy.mean)} held-out accuracy (mean of ${top.seeds.length} seeds).`
    : clear
    ? `Best: ${topName(top)}, ${pct(top.accuracy.mean)} held-out accuracy (mean of ${top.seeds.length} seeds), above every other ` +
      `${top.variant ? 'variant' : 'head count'} on every seed.`
    : `No clear best: ${topName(top)} has the highest mean, ${pct(top.accuracy.mean)} held-out accuracy (mean of ${top.seeds.length} seeds), ` +
      `but ${list(within.map((r) => `${name(r)} at ${pct(r.accuracy.mean)}`))} ${within.length > 1 ? 'overlap' : 'overlaps'} it within the seeds' min-max spread.`;
  if (top.variant) return [first, ...below.map((r) => `${r.variant}: ${pct(r.accuracy.mean)}, lower on every seed.`)].join(' ');
  const parts = [first];
  const one = rows.find((r) => r.heads === 1);
  const narrow = rows.reduce((a, b) => (b.headDim < a.headDim ? b : a));
  if (one && one !== top) {
    parts.push(isBelow(one)
      ? `One head is not enough here: ${pct(one.accuracy.mean)}, lower on every seed than ${heads(top)}.`
      : `One head does as well here: ${pct(one.accuracy.mean)}, within the seeds' spread.`);
  }
  if (narrow !== top && narrow !== one) {
    parts.push(isBelow(narrow)
      ? `Heads of ${dims(narrow.headDim)} are too narrow here: ${pct(narrow.accuracy.mean)}, lower on every seed than ${heads(top)}.`
      : `Heads of ${dims(narrow.headDim)} are not worse here: ${pct(narrow.accuracy.mean)}, within the seeds' spread.`);
  }
  return parts.join(' ');
}

const DEFAULTS = Object.freeze({
  dModel: 64, nLayers: 2, dMlp: 0, norm: 'pre', positions: 'learned',
  steps: 600, batchSize: 16, evalEvery: 50, evalRows: 64, seeds: [1, 2, 3],
  optimizer: { type: 'adamw', lr: 3e-3, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0.01, clipGradNorm: 1 },
});
const KEYS = ['task', 'heads', 'seeds', 'dModel', 'nLayers', 'dMlp', 'norm', 'positions', 'steps', 'batchSize',
  'evalEvery', 'evalRows', 'optimizer', 'variants'];

function fail(where, message) {
  throw new HeadscopeError('INVALID_ARGUMENT', `${where}: ${message}`);
}

/**
 * The plan of an experiment: its options with defaults filled in, and one run per (heads, seed).
 * Checks everything first (a HeadscopeError names the option); the task's own options are checked
 * by makeTask, the model's by createTransformer.
 */
export function planExperiment(options = {}) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) fail('runExperiment: options', 'expected an object');
  for (const k of Object.keys(options)) if (!KEYS.includes(k)) fail(`runExperiment: options.${quoteInput(k)}`, `unknown option (expected any of ${KEYS.join(', ')})`);
  const o = { ...DEFAULTS, heads: HEAD_COUNTS, ...options };
  if (o.task === null || typeof o.task !== 'object' || typeof o.task.name !== 'string') {
    fail('runExperiment: options.task', "expected { name, ...task options } of a built-in task, e.g. { name: 'log-line' }");
  }
  const { name, ...taskOptions } = o.task;
  const task = makeTask(name, taskOptions);
  const ints = (v, where, min, max) => {
    if (!Number.isInteger(v) || v < min || v > max) fail(where, `expected an integer in [${min}, ${max}], got ${String(v)}`);
    return v;
  };
  ints(o.dModel, 'runExperiment: options.dModel', 1, 512);
  if (!Array.isArray(o.heads) || o.heads.length === 0) fail('runExperiment: options.heads', 'expected a non-empty array of head counts');
  o.heads.forEach((h, k) => {
    ints(h, `runExperiment: options.heads[${k}]`, 1, o.dModel);
    if (o.dModel % h !== 0) fail(`runExperiment: options.heads[${k}]`, `expected a divisor of dModel ${o.dModel}, got ${h}`);
  });
  if (!Array.isArray(o.seeds) || o.seeds.length === 0) fail('runExperiment: options.seeds', 'expected a non-empty array of integer seeds');
  o.seeds.forEach((s, k) => ints(s, `runExperiment: options.seeds[${k}]`, 0, 2 ** 31 - 1));
  ints(o.steps, 'runExperiment: options.steps', 1, 1_000_000);
  ints(o.batchSize, 'runExperiment: options.batchSize', 1, 4096);
  ints(o.evalEvery, 'runExperiment: options.evalEvery', 1, 1_000_000);
  ints(o.evalRows, 'runExperiment: options.evalRows', 1, 4096);
  const variants = o.variants ?? [null];
  if (o.variants !== undefined) {
    if (!Array.isArray(o.variants) || o.variants.length === 0) fail('runExperiment: options.variants', 'expected a non-empty array of { name, ...fields }');
    if (o.heads.length !== 1) fail('runExperiment: options.heads', 'expected one head count with variants');
    o.variants.forEach((v, k) => {
      if (v === null || typeof v !== 'object' || typeof v.name !== 'string' || v.name === '') fail(`runExperiment: options.variants[${k}]`, 'expected { name, ...fields }');
      for (const f of Object.keys(v)) if (f !== 'name' && !VARIANT_FIELDS.includes(f)) fail(`runExperiment: options.variants[${k}].${quoteInput(f)}`, `unknown field (expected name, ${VARIANT_FIELDS.join(', ')})`);
    });
  }
  const runs = [];
  for (const variant of variants) for (const heads of o.heads) {
    for (const seed of o.seeds) {
      const { name: variantName, ...fields } = variant ?? {};
      runs.push({
        heads, seed, ...(variant ? { variant: variantName } : {}),
        model: { vocabSize: task.vocabSize, maxLen: task.seqLen, dModel: o.dModel, nLayers: o.nLayers, nHeads: heads,
          dMlp: o.dMlp, norm: o.norm, positions: o.positions, causal: true, seed, ...fields },
        // The task's stream and the model's initial weights both follow the run's seed.
        task: { name, ...task.options, seed },
      });
    }
  }
  return { options: { ...o, task: { name, ...task.options } }, runs };
}

/**
 * One run: train `run.model` on `run.task` for `options.steps` steps, evaluating the held-out
 * rows every `evalEvery` steps and at the end. `engine` is init()'s API or an initWorker()
 * engine (every call is awaited, so either works).
 * @returns {Promise<{ heads, seed, curve: { step, trainLoss, heldOutLoss, accuracy }[],
 *   finalAccuracy, finalLoss, ms, refused? }>}
 */
export async function runOne(engine, run, options, { onProgress = () => {}, signal } = {}) {
  const task = makeTask(run.task.name, (({ name, ...rest }) => rest)(run.task));
  const held = task.heldOut(options.evalRows, 0);
  const model = await engine.createTransformer(run.model);
  const started = performance.now();
  const curve = [];
  let trainLoss = 0;
  let trainCount = 0;
  let refused;
  try {
    await model.setOptimizer(options.optimizer);
    const evaluate = async (step) => {
      const { logits } = await model.forward(held.tokens);
      const e = task.evaluate(logits, held.targets);
      const point = { step, trainLoss: trainCount ? trainLoss / trainCount : NaN, heldOutLoss: e.loss, accuracy: e.accuracy };
      curve.push(point);
      trainLoss = 0;
      trainCount = 0;
      onProgress({ heads: run.heads, seed: run.seed, ...(run.variant ? { variant: run.variant } : {}), ...point });
    };
    await evaluate(0);
    for (let step = 0; step < options.steps; step++) {
      if (signal?.aborted) throw new HeadscopeError('INVALID_ARGUMENT', 'runExperiment: cancelled');
      const { tokens, targets } = task.batch(options.batchSize, step);
      const r = await model.trainStep(tokens, targets);
      if (!r.stepped) {
        refused = `step ${step + 1}: ${r.refused ?? 'not finite'}`;
        break;
      }
      trainLoss += r.loss;
      trainCount++;
      if ((step + 1) % options.evalEvery === 0 || step + 1 === options.steps) await evaluate(step + 1);
    }
  } finally {
    await model.dispose();
  }
  const last = curve[curve.length - 1];
  return { heads: run.heads, headDim: run.model.dModel / run.heads, seed: run.seed, ...(run.variant ? { variant: run.variant } : {}), curve,
    finalAccuracy: last.accuracy, finalLoss: last.heldOutLoss, ms: performance.now() - started,
    ...(refused ? { refused } : {}) };
}

/**
 * Runs the whole experiment. `engines`: one engine (runs in turn) or an array of engines (runs
 * side by side, one per engine at a time, e.g. one initWorker() each). Results in plan order.
 * @returns {Promise<{ options, runs: object[], rows: object[] }>}
 */
export async function runExperiment(engines, options, { onProgress, onRun = () => {}, signal } = {}) {
  const { options: o, runs } = planExperiment(options);
  const pool = Array.isArray(engines) ? engines : [engines];
  if (pool.length === 0) fail('runExperiment: engines', 'expected an engine or a non-empty array of engines');
  const results = new Array(runs.length);
  let next = 0;
  await Promise.all(pool.map(async (engine) => {
    while (next < runs.length) {
      const k = next++;
      results[k] = await runOne(engine, runs[k], o, { onProgress, signal });
      onRun(results[k], k, runs.length);
    }
  }));
  return { options: o, runs: results, rows: summarize(results) };
}

/** Per head count (or variant): mean, min, max and sample standard deviation of the final accuracy and loss, median time. */
export function summarize(results) {
  const byHeads = new Map();
  for (const r of results) {
    const key = r.variant ?? r.heads;
    if (!byHeads.has(key)) byHeads.set(key, []);
    byHeads.get(key).push(r);
  }
  const stats = (xs) => {
    const n = xs.length;
    const mean = xs.reduce((a, b) => a + b, 0) / n;
    const sd = n > 1 ? Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / (n - 1)) : 0;
    return { mean, min: Math.min(...xs), max: Math.max(...xs), sd };
  };
  return [...byHeads].map(([, rs]) => {
    const ms = rs.map((r) => r.ms).sort((a, b) => a - b);
    return {
      heads: rs[0].heads, headDim: rs[0].headDim, ...(rs[0].variant ? { variant: rs[0].variant } : {}), seeds: rs.map((r) => r.seed),
      accuracy: stats(rs.map((r) => r.finalAccuracy)), loss: stats(rs.map((r) => r.finalLoss)),
      msMedian: ms[Math.floor(ms.length / 2)], refused: rs.filter((r) => r.refused).length,
    };
  });
}

/** A Markdown table of an experiment's rows. */
export function formatTable({ rows }) {
  const pct = (x) => `${(100 * x).toFixed(1)}%`;
  const variants = Boolean(rows[0]?.variant);
  const lines = [`| ${variants ? 'variant | ' : ''}heads | head dim | held-out accuracy (mean, min-max) | held-out loss (mean ± sd) | time per run |`,
    `|${variants ? '---|' : ''}---:|---:|---|---|---:|`];
  for (const r of rows) {
    lines.push(`| ${variants ? `${r.variant} | ` : ''}${r.heads} | ${r.headDim} | ${pct(r.accuracy.mean)} (${pct(r.accuracy.min)}-${pct(r.accuracy.max)}) | ` +
      `${r.loss.mean.toFixed(3)} ± ${r.loss.sd.toFixed(3)} | ${(r.msMedian / 1000).toFixed(1)} s |${r.refused ? ` (${r.refused} refused)` : ''}`);
  }
  return lines.join('\n');
}
