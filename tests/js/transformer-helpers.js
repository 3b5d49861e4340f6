// Helpers of the transformer tests that hold its entries (init(), init({ threads }), initWorker())
// to each other.
import assert from 'node:assert/strict';
import { HeadscopeError } from '../../web/lib/index.js';
import { expectError, mulberry32 } from './helpers.js';

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
