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
