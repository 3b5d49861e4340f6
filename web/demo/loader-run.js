// The loader's engine calls: a parsed case run in stages (loader-jobs.js). Small cases run in the
// page (they take microseconds, less than a worker round trip); large ones in the page's Web
// Worker, so the page stays responsive and Cancel works (it ends the worker).
import { pageWorker, pageWorkerStarted } from '../views/common/page-worker.js';
import { checkTransformerCase, transformerCaseHooks, transformerCaseResult } from '../lib/case.js';
import { callDims } from '../lib/shapes.js';
import { patternHooks } from './transformer-case.js';

// Cases whose attention costs more than this many multiply-adds run in the Web Worker.
const WORKER_THRESHOLD = 2e6;

/**
 * Multiply-adds of one forward pass of a parsed case: the four projections (queries and output
 * E x E, keys kdim x E, values vdim x E) plus attention (scores and weights x values over the S'
 * keys, bias_k and the zero key included), per batch element. 0 for a case whose shapes fail at
 * once (a query of the wrong rank, or a key of another rank than the query).
 */
export function caseCost(c) {
  const { N, L, S, Sp, E, kdim, vdim } = callDims(c.config, c.query.shape, c.key.shape);
  if (L === null || S === null) return 0;
  return N * (2 * L * E * E + S * (kdim + vdim) * E + 2 * L * Sp * E);
}

// The engine for a case of `cost` multiply-adds: the page's, or the page's worker (started here).
async function engineFor(hs, jobs, current, cost) {
  if (cost < WORKER_THRESHOLD) return hs;
  current.usesWorker = true;
  if (!pageWorkerStarted()) await jobs.enter(current, 'weights', ' (starting the worker)');
  return pageWorker();
}

/**
 * An attention case's forward: { result, ms }. `hs` is the page's engine, `jobs` loader-jobs.js's,
 * `current` the running job.
 */
export async function runAttention(hs, jobs, current, c) {
  const { enter } = jobs;
  const engine = await engineFor(hs, jobs, current, caseCost(c));
  await enter(current, 'weights');
  const mha = await engine.createMultiheadAttention(c.config);
  try {
    await mha.loadStateDict(c.stateDict);
    await enter(current, 'compute');
    const started = performance.now();
    const result = await mha.forward(c.query, c.key, c.value, c.options);
    return { result, ms: performance.now() - started };
  } finally {
    // After a cancel the worker, and this object with it, is gone already.
    if (!current.usesWorker || current === jobs.current()) await mha.dispose();
  }
}

/**
 * A transformer case: runCase's steps in stages, asking for every layer's pattern besides the
 * hooks the case expects. The model starts without weights (the case's replace them all), its
 * keys, shapes and cost are checked before any weight is copied (checkTransformerCase), and a
 * case above the worker threshold runs in the Web Worker, where Cancel ends it.
 */
export async function runTransformer(hs, jobs, current, c) {
  const { enter } = jobs;
  // Checked here first, on a model without weights (nothing allocated for them): a case the
  // engine would refuse never starts a worker.
  const empty = hs.createTransformer({ ...c.config, seed: null });
  let hooks;
  let cost;
  try {
    hooks = transformerCaseHooks(c, empty.hookNames(), patternHooks(c.config.nLayers));
    cost = checkTransformerCase(c, empty.parameterShapes(), hooks);
  } finally {
    empty.dispose();
  }
  const engine = await engineFor(hs, jobs, current, cost.multiplyAdds);
  await enter(current, 'weights');
  const model = await engine.createTransformer({ ...c.config, seed: null });
  try {
    await model.loadStateDict(Object.fromEntries(c.stateDict));
    await enter(current, 'compute');
    const started = performance.now();
    const out = await model.forward(c.tokens, { hooks, headGates: c.headGates });
    return { result: transformerCaseResult(c, out), ms: performance.now() - started };
  } finally {
    // After a cancel the worker, and this object with it, is gone already.
    if (!current.usesWorker || current === jobs.current()) await model.dispose();
  }
}
