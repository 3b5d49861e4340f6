// Helpers of the transformer tests that hold its entries (init(), init({ threads }), initWorker())
// to each other.
import assert from 'node:assert/strict';
import { HeadscopeError } from '../../web/lib/index.js';
import { expectError, mulberry32 } from './helpers.js';

/** fn(model) for a Transformer of `config` made by `hs`, disposed after whatever fn does. */
export function withTransformer(hs, config, fn) {
  const m = hs.createTransformer(config);
  try {
    return fn(m);
  } finally {
    m.dispose();
  }
}

/** What a call (sync or async) gives: { value } or { error } (whatever it threw or rejected with). */
export async function settle(fn) {
  try {
    return { value: await fn() };
  } catch (error) {
    return { error };
  }
}

/** fn's call (sync or async) must fail with a HeadscopeError of `code` (expectError's checks). */
export async function rejectsWith(fn, code, ...fragments) {
  const { error } = await settle(fn);
  return expectError(() => {
    if (error !== undefined) throw error;
  }, code, ...fragments);
}

/** A HeadscopeError's code, message and argument: what two entries' errors must share. */
export function errorFields(e) {
  assert.ok(e instanceof HeadscopeError, `expected a HeadscopeError, got ${e?.stack ?? e}`);
  return { code: e.code, message: e.message, argument: e.argument };
}

/** A state_dict of the given parameterShapes(): seeded uniform values in [-scale, scale). */
export function randomStateDict(shapes, seed, scale = 0.5) {
  const rng = mulberry32(seed);
  return Object.fromEntries(Object.entries(shapes).map(([k, shape]) => {
    const n = shape.reduce((a, b) => a * b, 1);
    // LayerNorm weights near 1, as a trained model's, so the numbers stay in a useful range.
    const base = k.endsWith('ln1.weight') || k.endsWith('ln2.weight') || k === 'ln_final.weight' ? 1 : 0;
    return [k, { data: Float32Array.from({ length: n }, () => base + (rng() * 2 - 1) * scale), shape }];
  }));
}

/** (B, T) token ids (or (T) when batch is null) in [0, vocab), seeded. */
export function randomTokens(vocab, batch, T, seed) {
  const rng = mulberry32(seed);
  const row = () => Array.from({ length: T }, () => Math.floor(rng() * vocab));
  return batch === null ? row() : Array.from({ length: batch }, row);
}

// ---- The training goldens (tests/golden/train/), read by train.test.js and relaxed-build.mjs ----

const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
/** A golden's snake_case config as createTransformer's. */
export const configOf = (doc) => Object.fromEntries(Object.entries(doc.config).map(([k, v]) => [camel(k), v]));
/** Nested arrays (or a number) flattened. */
export const flat = (x) => (Array.isArray(x) ? x.flat(Infinity) : [x]);
/** The C++ test's rule (tests/cpp/transformer_train_test.cc): max |got - want| / max(max |want|, floor). */
export function tensorError(got, want, floor) {
  let diff = 0;
  let scale = floor;
  want.forEach((w, i) => {
    diff = Math.max(diff, Math.abs(got[i] - w));
    scale = Math.max(scale, Math.abs(w));
  });
  return diff / scale;
}
export const relative = (got, want) => Math.abs(got - want) / Math.abs(want);
/** torch's option names in the goldens, as setOptimizer's. */
export function optimizerOf(o) {
  const out = { type: o.type, lr: o.lr, clipGradNorm: o.clip_grad_norm };
  if (o.type === 'adamw') Object.assign(out, { betas: o.betas, eps: o.eps, weightDecay: o.weight_decay });
  return out;
}

/**
 * The induction lab's recipe with another attention (alibi.test.js, rope.test.js; learning.test.js
 * has the learned-positions one): a 2-layer attention-only model of `config` trained with AdamW
 * (lr 3e-3) on batches of 16 induction rows (T 32, task seed 1) in chunks of 100 steps until a
 * layer-1 head attends from the second copy to the token after the current token's first
 * occurrence (mean weight > 0.4 over 64 held-out rows) and the second half's loss is below 1.0,
 * or maxSteps. Returns the measures at the start and the end ({ score, scores, secondHalfLoss,
 * loss, accuracy }), the steps and the seconds, and a line for the test's diagnostic.
 */
/**
 * The learning check of the variants' suites: trainInduction on `model`, its line as a
 * diagnostic of test `t`, and a layer-1 induction head formed (best score > 0.4, second-half loss
 * < 1.0) from a start without one (score < 0.2, second-half loss > 2.5). Returns trainInduction's
 * result.
 */
export function expectInductionForms(t, model, makeTask, label) {
  const result = trainInduction(model, makeTask, { label });
  const { start, last, steps, line } = result;
  t.diagnostic(line);
  assert.ok(last.score > 0.4, `best layer-1 induction score ${last.score} after ${steps} steps`);
  assert.ok(last.secondHalfLoss < 1.0, `second-half loss ${last.secondHalfLoss}`);
  assert.ok(start.score < 0.2 && start.secondHalfLoss > 2.5);
  return result;
}

export function trainInduction(model, makeTask, { maxSteps = 2000, every = 100, label = '' } = {}) {
  const optimizer = { type: 'adamw', lr: 3e-3, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0.01 };
  const task = makeTask('induction', { seqLen: 32, seed: 1 });
  model.setOptimizer(optimizer);
  const held = task.heldOut(64, 0);
  const T = task.seqLen;
  const half = { data: Int32Array.from(held.targets.data, (y, p) => (p % T < T / 2 ? -100 : y)), shape: held.targets.shape };
  const measure = () => {
    const r = model.forward(held.tokens, { hooks: ['blocks.1.attn.hook_pattern'] });
    const pattern = r.hooks['blocks.1.attn.hook_pattern'];
    const [B, H] = pattern.shape;
    const scores = new Array(H).fill(0);
    let positions = 0;
    for (let b = 0; b < B; b++) {
      let n = 1;
      while (held.tokens.data[b * T + 1 + n] !== held.tokens.data[b * T + 1]) n++;
      for (let p = n + 1; p <= Math.min(2 * n, T - 1); p++) {
        positions++;
        for (let h = 0; h < H; h++) scores[h] += pattern.data[((b * H + h) * T + p) * T + (p - n + 1)];
      }
    }
    const s = scores.map((x) => x / positions);
    return { score: Math.max(...s), scores: s, secondHalfLoss: task.evaluate(r.logits, half).loss, ...task.evaluate(r.logits, held.targets) };
  };
  const start = measure();
  let steps = 0;
  let last = start;
  const started = performance.now();
  while (steps < maxSteps) {
    for (let i = 0; i < every; i++, steps++) {
      const { tokens, targets } = task.batch(16, steps);
      assert.ok(model.trainStep(tokens, targets).stepped);
    }
    last = measure();
    if (last.score > 0.4 && last.secondHalfLoss < 1.0) break;
  }
  const seconds = (performance.now() - started) / 1000;
  const line = `induction with ${label} (model seed ${model.config.seed ?? 1}, task seed 1, ${model.config.nHeads} heads, AdamW lr 3e-3, batch 16): ` +
    `${steps} steps in ${seconds.toFixed(1)} s; layer-1 induction scores [${last.scores.map((x) => x.toFixed(3))}] ` +
    `(at start ${start.score.toFixed(3)}); second-half loss ${start.secondHalfLoss.toFixed(3)} -> ${last.secondHalfLoss.toFixed(3)}; ` +
    `held-out accuracy ${start.accuracy.toFixed(3)} -> ${last.accuracy.toFixed(3)}`;
  return { start, last, steps, seconds, line };
}
