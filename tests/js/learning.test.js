// Learning checks: small transformers trained with trainStep on the built-in tasks
// (headscope/tasks) learn what the tasks are made for, with fixed seeds (model weights, task
// streams) so each run is the same bits every time. Each check prints what it measured.
//   - induction: the 2-layer attention-only model of the induction lab forms an induction head:
//     a layer-1 head attends from the second copy to the token after the previous occurrence of
//     the current token (> 0.4 on held-out rows and on the probe) and the loss on the second half
//     of the sequence falls below 1.0, within 1,200 steps;
//   - copy and sort (the task defaults: T 32, 15 symbols from 20): held-out accuracy targets.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { init } from '../../web/lib/index.js';
import { makeTask } from '../../web/lib/tasks.js';

const hs = await init();
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const report = (t, line) => t.diagnostic(line);
const fixed = (x, n = 3) => x.toFixed(n);

// The period n of an induction row: <bos> x_1 .. x_n x_1 ..., the x distinct, so x_1 comes back
// first at position 1 + n.
function periodOf(tokens, T, b) {
  for (let n = 1; n < T - 1; n++) if (tokens[b * T + 1 + n] === tokens[b * T + 1]) return n;
  throw new Error(`row ${b} has no repeat`);
}

// Per head of a (B, H, T, T) pattern: the attention from each position t of the second copy
// (t in [n + 1, 2n]) to t - n + 1, the token after the previous occurrence of tokens[t] (at
// t - n), averaged over those positions of every row.
function inductionScores(pattern, tokens) {
  const [B, H, T] = pattern.shape;
  const scores = new Array(H).fill(0);
  let positions = 0;
  for (let b = 0; b < B; b++) {
    const n = periodOf(tokens, T, b);
    for (let t = n + 1; t <= Math.min(2 * n, T - 1); t++) {
      assert.equal(tokens[b * T + t], tokens[b * T + t - n]);
      positions++;
      for (let h = 0; h < H; h++) scores[h] += pattern.data[((b * H + h) * T + t) * T + (t - n + 1)];
    }
  }
  return scores.map((s) => s / positions);
}

// targets with every position before `from` set to -100: the loss of the positions from there on.
function fromPosition(targets, from) {
  const [B, T] = targets.shape;
  const data = Int32Array.from(targets.data, (y, p) => (p % T < from ? -100 : y));
  return { data, shape: [B, T] };
}

// The induction lab's model and a recipe that forms the circuit well within the budget.
const INDUCTION = {
  model: { vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, dMlp: 0, norm: 'pre', positions: 'learned', seed: 1 },
  task: { seqLen: 32, seed: 1 },        // 26 symbols, periods 8..15: V = 27 (the model's 28 is a superset)
  optimizer: { type: 'adamw', lr: 3e-3, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0.01 },
  batch: 16,
  maxSteps: 1200,
  every: 50,                           // evaluate every 50 steps, stop at the first that passes
  heldOut: 64,
};

test('induction: a layer-1 head becomes an induction head and the second half\'s loss falls below 1.0 ' +
  'within 1,200 steps', { timeout: 120_000 }, (t) => {
  const { model: config, optimizer, batch, maxSteps, every } = INDUCTION;
  const task = makeTask('induction', INDUCTION.task);
  assert.ok(task.vocabSize <= config.vocabSize);
  const m = hs.createTransformer(config);
  try {
    m.setOptimizer(optimizer);
    const held = task.heldOut(INDUCTION.heldOut, 0);
    const probe = task.probe();
    const half = fromPosition(held.targets, task.seqLen / 2);
    const measure = () => {
      const r = m.forward(held.tokens, { hooks: ['blocks.1.attn.hook_pattern'] });
      const scores = inductionScores(r.hooks['blocks.1.attn.hook_pattern'], held.tokens.data);
      const p = m.forward(probe.tokens, { hooks: ['blocks.1.attn.hook_pattern'] });
      const probeScores = inductionScores(p.hooks['blocks.1.attn.hook_pattern'], probe.tokens.data);
      const best = scores.indexOf(Math.max(...scores));
      return {
        scores, probeScores, best, score: scores[best], probeScore: probeScores[best],
        secondHalfLoss: task.evaluate(r.logits, half).loss, ...task.evaluate(r.logits, held.targets),
      };
    };
    const start = measure();
    const started = performance.now();
    let steps = 0;
    let last = start;
    let trainLoss = NaN;
    while (steps < maxSteps) {
      for (let i = 0; i < every; i++, steps++) {
        const { tokens, targets } = task.batch(batch, steps);
        const r = m.trainStep(tokens, targets);
        assert.ok(r.stepped, r.refused);
        trainLoss = r.loss;
      }
      last = measure();
      if (last.score > 0.4 && last.probeScore > 0.4 && last.secondHalfLoss < 1.0) break;
    }
    const seconds = (performance.now() - started) / 1000;
    report(t, `induction (model seed ${config.seed}, task seed ${INDUCTION.task.seed}, AdamW lr ${optimizer.lr} betas ` +
      `[${optimizer.betas}] wd ${optimizer.weightDecay}, batch ${batch}): ${steps} steps in ${fixed(seconds, 1)} s; ` +
      `layer-1 induction scores on ${INDUCTION.heldOut} held-out rows [${last.scores.map((s) => fixed(s))}] ` +
      `(at start [${start.scores.map((s) => fixed(s))}]), best head ${last.best}: ${fixed(last.score)}, on the probe ` +
      `${fixed(last.probeScore)}; second-half loss ${fixed(start.secondHalfLoss)} -> ${fixed(last.secondHalfLoss)}; ` +
      `held-out loss ${fixed(last.loss)}, accuracy ${fixed(start.accuracy)} -> ${fixed(last.accuracy)}; last batch loss ${fixed(trainLoss)}`);
    assert.ok(steps <= maxSteps);
    assert.ok(last.score > 0.4, `best layer-1 head's induction score ${last.score} after ${steps} steps`);
    assert.ok(last.probeScore > 0.4, `its score on the probe ${last.probeScore}`);
    assert.ok(last.secondHalfLoss < 1.0, `second-half loss ${last.secondHalfLoss}`);
    // It was not there at the start: chance-level attention and loss near ln(26).
    assert.ok(start.score < 0.2 && start.secondHalfLoss > 2.5, JSON.stringify({ score: start.score, loss: start.secondHalfLoss }));
  } finally {
    m.dispose();
  }
});

// Trains a fresh model on `task` for `steps` steps; the held-out evaluation before and after.
function trainOn(taskName, recipe) {
  const task = makeTask(taskName, recipe.task);
  const m = hs.createTransformer({ vocabSize: task.vocabSize, maxLen: task.seqLen, ...recipe.model });
  try {
    m.setOptimizer(recipe.optimizer);
    const held = task.heldOut(recipe.heldOut, 0);
    const evaluate = () => task.evaluate(m.forward(held.tokens).logits, held.targets);
    const before = evaluate();
    const started = performance.now();
    let trainLoss = NaN;
    for (let s = 0; s < recipe.steps; s++) {
      const { tokens, targets } = task.batch(recipe.batch, s);
      const r = m.trainStep(tokens, targets);
      assert.ok(r.stepped, r.refused);
      trainLoss = r.loss;
    }
    const seconds = (performance.now() - started) / 1000;
    return { task, before, after: evaluate(), seconds, trainLoss };
  } finally {
    m.dispose();
  }
}

function describeRun(name, recipe, run) {
  const o = recipe.optimizer;
  const c = recipe.model;
  return `${name} (T ${run.task.seqLen}, length ${run.task.options.length}, ${run.task.options.symbols} symbols, task seed ` +
    `${run.task.options.seed}; model dModel ${c.dModel} nLayers ${c.nLayers} nHeads ${c.nHeads} dMlp ${c.dMlp ?? 0} seed ` +
    `${c.seed}; AdamW lr ${o.lr} wd ${o.weightDecay ?? 0.01}, batch ${recipe.batch}): ${recipe.steps} steps in ` +
    `${fixed(run.seconds, 1)} s; held-out (${recipe.heldOut} rows) loss ${fixed(run.before.loss)} -> ${fixed(run.after.loss)}, ` +
    `accuracy ${fixed(run.before.accuracy)} -> ${fixed(run.after.accuracy)}, sequence accuracy ` +
    `${fixed(run.before.sequenceAccuracy)} -> ${fixed(run.after.sequenceAccuracy)}; last batch loss ${fixed(run.trainLoss)}`;
}

// One attention layer copies: the answer is n + 1 positions back, a fixed offset.
const COPY = {
  task: { seed: 1 },
  model: { dModel: 32, nLayers: 1, nHeads: 2, seed: 1 },
  optimizer: { type: 'adamw', lr: 3e-3 },
  batch: 16,
  steps: 400,
  heldOut: 256,
};

test('copy: one attention layer reaches held-out accuracy >= 0.99 (sequence accuracy >= 0.9) in 400 steps',
  { timeout: 120_000 }, (t) => {
    const run = trainOn('copy', COPY);
    report(t, describeRun('copy', COPY, run));
    assert.ok(run.after.accuracy >= 0.99, `accuracy ${run.after.accuracy}`);
    assert.ok(run.after.sequenceAccuracy >= 0.9, `sequence accuracy ${run.after.sequenceAccuracy}`);
    assert.ok(run.before.accuracy < 0.2, `chance at the start (${run.before.accuracy})`);
  });

// Sorting attends by content (the smallest symbol not yet written): two layers with an MLP.
const SORT = {
  task: { seed: 1 },
  model: { dModel: 32, nLayers: 2, nHeads: 2, dMlp: 64, seed: 1 },
  optimizer: { type: 'adamw', lr: 3e-3 },
  batch: 16,
  steps: 1500,
  heldOut: 256,
};

test('sort: two layers with an MLP reach held-out accuracy >= 0.95 in 1,500 steps', { timeout: 120_000 }, (t) => {
  const run = trainOn('sort', SORT);
  report(t, describeRun('sort', SORT, run));
  assert.ok(run.after.accuracy >= 0.95, `accuracy ${run.after.accuracy}`);
  assert.ok(run.before.accuracy < 0.2, `chance at the start (${run.before.accuracy})`);
});
