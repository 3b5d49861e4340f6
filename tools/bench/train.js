// The benchmark's 'train' kind (engines.js): training steps per second of the reference model
// tools/tiny_transformer.py, on next-token targets of seeded random token sequences.
//
// Engines (each is one step per run(): forward, mean cross-entropy, backward, optimizer step, the
// loss back in JS as a number):
//  - 'hs-train': headscope's Transformer.trainStep(tokens, targets) with AdamW (TRAIN_OPTIMIZER),
//    the model from the config's seed, in a fresh module when the context can make one
//    (ctx.freshHeadscope(): init({ wasmBinary }), never shared),
//    so that its wasm memory after training is the training's own. Written against the training
//    API's contract (setOptimizer, trainStep returning { loss, gradNorm } of the batch before the
//    update); a build without trainStep gives a skipped row (SkipError), not a failure.
//  - 'tfjs-train': the same model written in tfjs ops (tfjs-core + tfjs-backend-wasm, one
//    thread), every parameter a tf.variable holding headscope's seeded stateDict(), trained by
//    tf.train.adam inside optimizer.minimize. tfjs's Adam has no decoupled weight decay: this row
//    runs Adam with weight decay 0 (AdamW's p *= 1 - lr * wd is one multiply per parameter, so
//    the omission only makes tfjs's step cheaper). Token embedding as oneHot(tokens) x tok_embed
//    (tfjs-backend-wasm has no UnsortedSegmentSum kernel, which gather's gradient needs); Linear
//    weights held transposed, (in, out) (isLinearWeight).
//  - 'torch-cpu-train' (native: bench.mjs runs tools/bench/torch_train_bench.py): PyTorch's
//    torch.optim.AdamW on the same weights and batches; its losses are the checks' reference.
//
// Checks: the first step's loss (the initial weights on the pool's first batch) against
// headscope's (when it trains) and torch's (when measured) within TRAIN_LOSS_TOLERANCE; the
// second step's (after one update) is reported against the same (a check of the gradients; tfjs
// has no weight decay there, so it is held to TRAIN_STEP2_TOLERANCE); after timing, the mean loss
// over the last full cycle of the batch pool must be below the first cycle's.

/** AdamW as the training API takes it (setOptimizer), and as torch_train_bench.py runs it. */
export const TRAIN_OPTIMIZER = { type: 'adamw', lr: 1e-3, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0.01, clipGradNorm: 0 };
/** Relative tolerance of the first step's loss against the reference engines'. */
export const TRAIN_LOSS_TOLERANCE = 1e-4;
/** ... and of the second step's (after one optimizer step), which also tests the gradients. */
export const TRAIN_STEP2_TOLERANCE = 1e-3;
/** How many batches the pool holds (cycled: step s trains on batch s mod TRAIN_POOL). */
export const TRAIN_POOL = 4;

/** An engine that cannot run in this build (headscope without trainStep): reported, not a failure. */
export class SkipError extends Error {
  constructor(message) {
    super(message);
    this.skip = true;
  }
}

/**
 * A train shape's batch pool: TRAIN_POOL batches of B sequences of T token ids, uniform over the
 * vocabulary from the given seeded generator; targets[b, t] = tokens[b, t + 1], the last -100
 * (ignored). The same batches for every engine (torch_train_bench.py reads them from a file).
 */
export function makeTrainBatches(shape, rand) {
  const { B, T } = shape;
  const V = shape.config.vocabSize;
  const pool = [];
  for (let p = 0; p < TRAIN_POOL; p++) {
    const tokens = new Int32Array(B * T);
    for (let i = 0; i < tokens.length; i++) tokens[i] = Math.floor(rand() * V);
    const targets = new Int32Array(B * T);
    for (let b = 0; b < B; b++) {
      for (let t = 0; t < T - 1; t++) targets[b * T + t] = tokens[b * T + t + 1];
      targets[b * T + T - 1] = -100;
    }
    pool.push({ tokens, targets });
  }
  return pool;
}

/** The pool as torch_train_bench.py reads it: per batch its tokens then its targets, int32 LE. */
export function trainBatchesBytes(pool) {
  const n = pool[0].tokens.length;
  const all = new Int32Array(pool.length * 2 * n);
  pool.forEach((b, i) => {
    all.set(b.tokens, 2 * i * n);
    all.set(b.targets, (2 * i + 1) * n);
  });
  return new Uint8Array(all.buffer);
}

const mean = (a) => a.reduce((s, x) => s + x, 0) / a.length;

/**
 * The loss trajectory of a row's steps (losses[s]: the loss of step s, on batch s mod P): the
 * first and the last full cycle of the pool (the same batches, so their means compare the model,
 * not the data), and whether the latter is lower.
 */
export function lossTrajectory(losses, P = TRAIN_POOL) {
  const steps = losses.length;
  const finite = losses.every(Number.isFinite);
  if (steps < 2 * P) return { steps, finite, decreased: false, detail: `only ${steps} steps, fewer than two cycles of ${P} batches` };
  const lastStart = Math.floor(steps / P) * P - P;
  const firstCycle = mean(losses.slice(0, P));
  const lastCycle = mean(losses.slice(lastStart, lastStart + P));
  return { steps, finite, firstCycle, lastCycle, decreased: finite && lastCycle < firstCycle };
}

/**
 * The first-step (and second-step) losses of a row against the reference rows' (`refs`: { name:
 * [loss of step 0, loss of step 1] }, those available): ok when every first loss is within
 * TRAIN_LOSS_TOLERANCE relative and every second within step2Tolerance. error: the worst relative
 * difference of the first step (null when there is no reference); against: { name: { step1,
 * step2 } }, the relative differences.
 */
export function checkLosses(losses, refs, step2Tolerance = TRAIN_STEP2_TOLERANCE) {
  const rel = (a, b) => Math.abs(a - b) / Math.max(Math.abs(b), 1e-30);
  const parts = [];
  const against = {};
  let error = null;
  let ok = Number.isFinite(losses[0]);
  if (!ok) parts.push(`first-step loss ${losses[0]} is not finite`);
  for (const [name, ref] of Object.entries(refs)) {
    if (!ref || !Number.isFinite(ref[0])) continue;
    const e1 = rel(losses[0], ref[0]);
    error = Math.max(error ?? 0, e1);
    ok &&= e1 <= TRAIN_LOSS_TOLERANCE;
    let part = `step 1: ${losses[0].toFixed(6)} vs ${name} ${ref[0].toFixed(6)} (${e1.toExponential(1)})`;
    against[name] = { step1: e1 };
    if (losses.length > 1 && Number.isFinite(ref[1])) {
      const e2 = rel(losses[1], ref[1]);
      against[name].step2 = e2;
      ok &&= e2 <= step2Tolerance;
      part += `, step 2: ${losses[1].toFixed(6)} vs ${ref[1].toFixed(6)} (${e2.toExponential(1)})`;
    }
    parts.push(part);
  }
  if (error === null && parts.length === 0) parts.push(`first-step loss ${losses[0]}; no reference loss (headscope's trainStep and torch both unavailable)`);
  return { ok, error, detail: parts.join('; '), against };
}

/**
 * The reference losses for a row: headscope's first losses when hs-train ran first in this
 * shape (benchShape's `reference`, its runner's losses) and torch's from bench.mjs
 * (ctx.trainReference[shape.id]).
 */
function referenceLosses(ctx, shape, reference, self) {
  const refs = {};
  if (self !== 'hs-train' && reference?.losses) refs.headscope = reference.losses.slice(0, 2);
  const torch = ctx.trainReference?.[shape.id];
  if (torch?.losses) refs.torch = torch.losses;
  return refs;
}

/** The parameter count of a state_dict-like { name: { shape } } object. */
function countParameters(shapes) {
  return Object.values(shapes).reduce((n, s) => n + (s.shape ?? s).reduce((a, b) => a * b, 1), 0);
}

/**
 * The runner pieces every train engine shares: run() trains one step on the next batch of the
 * pool (records its loss, returns { loss, losses }, so that benchShape's `reference` carries the
 * first losses), check() against the references, afterMeasure() the loss trajectory.
 */
function trainRunner(ctx, shape, id, pool, step, extra) {
  const losses = [];
  let s = 0;
  const out = { loss: NaN, losses };
  return {
    async: false,
    run: () => {
      const b = pool[s++ % pool.length];
      out.loss = step(b);
      losses.push(out.loss);
      return out;
    },
    // Two steps before timing: the second step's loss (after one update) is checked too.
    check: (first, reference) => {
      if (losses.length < 2) { out.loss = step(pool[s++ % pool.length]); losses.push(out.loss); }
      return checkLosses(losses, referenceLosses(ctx, shape, reference, id),
        id === 'tfjs-train' ? TRAIN_STEP2_TOLERANCE : TRAIN_LOSS_TOLERANCE);
    },
    afterMeasure: (row) => {
      const trajectory = lossTrajectory(losses);
      const fields = { losses: { first: losses[0], second: losses[1], ...trajectory }, ...(extra.memory?.() ?? {}) };
      if (!trajectory.decreased) {
        fields.check = { ...row.check, ok: false, detail: `${row.check.detail}; loss did not decrease over the timed steps: ` +
          (trajectory.detail ?? `${trajectory.firstCycle} -> ${trajectory.lastCycle} over ${trajectory.steps} steps`) };
      }
      return fields;
    },
    ...extra,
  };
}

/** headscope's trainStep (see the top of this file); id 'hs-train-relaxed' for its relaxed-SIMD row. */
export async function prepareHeadscopeTrain(ctx, shape, pool, id = 'hs-train') {
  let hs = ctx.hs;
  let fresh = false;
  if (ctx.freshHeadscope) {
    hs = await ctx.freshHeadscope();
    fresh = true;
  }
  const close = () => { if (fresh) hs.close(); };
  let model;
  try {
    model = hs.createTransformer(shape.config);
    if (typeof model.trainStep !== 'function' || typeof model.setOptimizer !== 'function') {
      throw new SkipError('this headscope build has no Transformer.trainStep / setOptimizer (the training API): row skipped');
    }
    try {
      model.setOptimizer(TRAIN_OPTIMIZER);
    } catch (e) {
      // The JS API of a newer web/lib over a headscope_core.wasm built before it: the core has no
      // binding yet. A build to redo, not a failure of the training.
      if (/is not a function/.test(String(e?.message))) {
        throw new SkipError(`web/lib/index.js has Transformer.setOptimizer but this headscope_core.wasm has no training ` +
          `binding (${e.message}): rebuild (npm run build); row skipped`);
      }
      throw e;
    }
  } catch (e) {
    try { model?.dispose(); } finally { close(); }
    throw e;
  }
  const dims = [shape.B, shape.T];
  const parameters = countParameters(model.parameterShapes());
  return trainRunner(ctx, shape, id, pool,
    (b) => model.trainStep({ data: b.tokens, shape: dims }, { data: b.targets, shape: dims }).loss, {
      facts: { parameters },
      memory: () => ({ memory: { ...hs.memory(), freshModule: fresh } }),
      dispose: () => { try { model.dispose(); } finally { close(); } },
    });
}

/** The model's initial state_dict: headscope's createTransformer(config).stateDict() (the seed). */
export function initialStateDict(hs, config) {
  const model = hs.createTransformer(config);
  try {
    return model.stateDict();
  } finally {
    model.dispose();
  }
}

/**
 * The Linear weights (in_proj_weight, out_proj, fc_in, fc_out, unembed: (out, in) in the
 * state_dict), which the tfjs model holds transposed, (in, out), as tf.layers.dense holds its
 * kernel: its matMuls are fused.matMul({ a: x, b: W^T, bias }). (tfjs-backend-wasm 4.22's fused
 * matMul with transposeB: true and a bias computes wrong numbers, measured here; without the bias
 * or without transposeB it is right.) Adam is elementwise: the layout changes nothing else.
 */
export function isLinearWeight(name, shape) {
  return shape.length === 2 && name !== 'tok_embed.weight' && name !== 'pos_embed.weight';
}

function transpose2d(a, rows, cols) {
  const t = new Float32Array(a.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) t[c * rows + r] = a[r * cols + c];
  return t;
}

/** A state_dict entry as the tfjs model's variable holds it: Linear weights transposed. */
export function tfjsParameter(name, t) {
  if (!isLinearWeight(name, t.shape)) return { data: t.data, shape: t.shape };
  const [rows, cols] = t.shape;
  return { data: transpose2d(t.data, rows, cols), shape: [cols, rows] };
}

/**
 * The reference module's forward and loss in tfjs ops (pre-norm, learned positions; the other
 * configs are not benchmarked and refused): returns loss(batch) -> scalar tensor, to be called
 * inside optimizer.minimize.
 */
export function tfjsTransformer(tf, config, B, T, v) {
  const { vocabSize: V, dModel: D, nLayers, nHeads: H, dMlp, lnEps } = config;
  if (config.norm !== 'pre' || config.positions !== 'learned' || config.act !== 'gelu') {
    throw new Error(`tfjs-train: only norm 'pre', positions 'learned', act 'gelu' are written (got ${config.norm}, ${config.positions}, ${config.act})`);
  }
  const dh = D / H;
  const N = B * T;
  const sqrtDh = Math.sqrt(dh);
  let mask = null;
  if (config.causal) {
    const m = new Float32Array(T * T);
    for (let i = 0; i < T; i++) for (let j = i + 1; j < T; j++) m[i * T + j] = -Infinity;
    mask = tf.tensor2d(m, [T, T]);
  }
  const p = (name) => v[name] ?? null;
  // nn.Linear: x W^T + b, with W^T held as the variable (see isLinearWeight).
  const linear = (x, name) => tf.fused.matMul({ a: x, b: p(`${name}.weight`), bias: p(`${name}.bias`) ?? undefined });
  const layerNorm = (x, name) => {
    const mu = tf.mean(x, -1, true);
    const xc = tf.sub(x, mu);
    const variance = tf.mean(tf.square(xc), -1, true);
    return tf.add(tf.mul(tf.mul(xc, tf.rsqrt(tf.add(variance, lnEps))), p(`${name}.weight`)), p(`${name}.bias`));
  };
  const gelu = (x) => tf.mul(tf.mul(x, 0.5), tf.add(tf.erf(tf.mul(x, Math.SQRT1_2)), 1));   // exact, erf form
  const heads = (x) => tf.transpose(tf.reshape(x, [B, T, H, dh]), [0, 2, 1, 3]);   // [B, H, T, dh]
  const pos = T === config.maxLen ? () => p('pos_embed.weight') : () => tf.slice(p('pos_embed.weight'), [0, 0], [T, D]);
  const loss = (batch) => {
    const ids = tf.tensor1d(batch.tokens, 'int32');
    let x = tf.matMul(tf.cast(tf.oneHot(ids, V), 'float32'), p('tok_embed.weight'));   // [N, D]
    x = tf.reshape(tf.add(tf.reshape(x, [B, T, D]), pos()), [N, D]);
    for (let l = 0; l < nLayers; l++) {
      const a = `blocks.${l}.attn`;
      const qkv = tf.fused.matMul({ a: layerNorm(x, `blocks.${l}.ln1`), b: p(`${a}.in_proj_weight`),
        bias: p(`${a}.in_proj_bias`) ?? undefined });
      const [q, k, vv] = tf.split(qkv, 3, 1);
      let scores = tf.matMul(heads(tf.div(q, sqrtDh)), heads(k), false, true);   // [B, H, T, T]
      if (mask) scores = tf.add(scores, mask);
      const z = tf.matMul(tf.softmax(scores), heads(vv));   // [B, H, T, dh]
      x = tf.add(x, linear(tf.reshape(tf.transpose(z, [0, 2, 1, 3]), [N, D]), `${a}.out_proj`));
      if (dMlp > 0) {
        const h = gelu(linear(layerNorm(x, `blocks.${l}.ln2`), `blocks.${l}.mlp.fc_in`));
        x = tf.add(x, linear(h, `blocks.${l}.mlp.fc_out`));
      }
    }
    const logits = linear(layerNorm(x, 'ln_final'), 'unembed');   // [N, V]
    // Mean cross-entropy over the targets that are not -100 (oneHot of -100 is a zero row).
    let count = 0;
    for (const t of batch.targets) if (t !== -100) count++;
    if (count === 0) throw new Error('tfjs-train: a batch whose targets are all -100');
    const target = tf.cast(tf.oneHot(tf.tensor1d(batch.targets, 'int32'), V), 'float32');
    return tf.mul(tf.sum(tf.mul(tf.logSoftmax(logits), target)), -1 / count);
  };
  return { loss, dispose: () => mask?.dispose() };
}

/** tfjs's training row (see the top of this file). */
export function prepareTfjsTrain(ctx, shape, pool, registerGradients) {
  const { tf } = ctx;
  if (tf.getBackend() !== 'wasm') throw new Error(`tfjs-train: the backend is ${tf.getBackend()}, not wasm`);
  registerGradients(tf);
  const sd = initialStateDict(ctx.hs, shape.config);
  const vars = {};
  for (const [name, t] of Object.entries(sd)) {
    const { data, shape: dims } = tfjsParameter(name, t);
    const initial = tf.tensor(data, dims, 'float32');
    vars[name] = tf.variable(initial, true);   // shares the data: one reference each
    initial.dispose();
  }
  const varList = Object.values(vars);
  const model = tfjsTransformer(tf, shape.config, shape.B, shape.T, vars);
  const { lr, betas, eps } = TRAIN_OPTIMIZER;
  const optimizer = tf.train.adam(lr, betas[0], betas[1], eps);
  const wasm = tf.backend().wasm;
  return trainRunner(ctx, shape, 'tfjs-train', pool, (b) => {
    const cost = optimizer.minimize(() => model.loss(b), true, varList);
    const loss = cost.dataSync()[0];
    cost.dispose();
    return loss;
  }, {
    facts: { parameters: countParameters(sd) },
    memory: () => {
      const m = tf.memory();
      return { memory: { wasmBytes: wasm?.HEAPU8?.length ?? null, tensorBytes: m.numBytes, tensors: m.numTensors } };
    },
    dispose: () => {
      optimizer.dispose();
      model.dispose();
      for (const x of varList) x.dispose();
    },
  });
}
