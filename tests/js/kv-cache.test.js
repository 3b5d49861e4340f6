// The engine's numbers for the attention variants, as the Train view's variants panel shows them:
// hs.kvCacheBytes(config, { batch, positions }) (the KV caches' bytes computed by the core from a
// config) against model.kvCacheBytes() (the bytes a generation's caches hold, measured), for MHA,
// GQA and MQA, in this thread and in a Worker; and hs.alibiSlopes(nHeads) against Press et al.'s
// slopes written out here and against the bias hook_attn_scores carries.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { engineAndWorker, expectError } from './helpers.js';

const { hs, remote } = await engineAndWorker({ simd: 'simd128' });

const base = { vocabSize: 11, maxLen: 16, dModel: 32, nLayers: 2, nHeads: 4, seed: 2 };

test('kvCacheBytes(config) is what a generation\'s caches hold: MHA, GQA, MQA, ALiBi and a window', () => {
  const B = 3, T = 5, n = 6;
  const prompt = Array.from({ length: B }, (_, b) => Array.from({ length: T }, (_, t) => (b + 2 * t) % 11));
  const sizes = {};
  for (const extra of [{}, { nKvHeads: 2 }, { nKvHeads: 1 }, { nKvHeads: 2, positions: 'alibi', attnWindow: 3 }]) {
    const config = { ...base, ...extra };
    const predicted = hs.kvCacheBytes(config, { batch: B, positions: T + n });
    // Per layer K and V: B x (T + n) x nKvHeads x dHead floats.
    assert.equal(predicted, 2 * 2 * B * (T + n) * (extra.nKvHeads ?? 4) * 8 * 4);
    const m = hs.createTransformer(config);
    try {
      assert.equal(m.kvCacheBytes(), 0, 'no generation yet');
      m.generate(prompt, { maxNewTokens: n });
      assert.equal(m.kvCacheBytes(), predicted, JSON.stringify(extra));
    } finally {
      m.dispose();
    }
    sizes[extra.nKvHeads ?? 4] = predicted;
  }
  assert.equal(sizes[4], 2 * sizes[2]);
  assert.equal(sizes[4], 4 * sizes[1]);
  // The defaults: one sequence of maxLen positions; the docs' example (api.md#kv-cache-bytes).
  assert.equal(hs.kvCacheBytes(base), 2 * 2 * 16 * 32 * 4);
  assert.deepEqual([4, 2, 1].map((G) => hs.kvCacheBytes({ ...base, maxLen: 32, nKvHeads: G })), [16384, 8192, 4096]);
  assert.equal(hs.kvCacheBytes({ ...base, causal: false }), 0, 'a non-causal model caches nothing');
});

test('kvCacheBytes refuses what createTransformer refuses, and bad sizes', () => {
  expectError(() => hs.kvCacheBytes({ ...base, nKvHeads: 3 }), 'INVALID_ARGUMENT', 'nKvHeads');
  expectError(() => hs.kvCacheBytes({ ...base, positions: 'rotary' }), 'INVALID_ARGUMENT', 'config.positions');
  expectError(() => hs.kvCacheBytes(null), 'INVALID_ARGUMENT', 'config');
  expectError(() => hs.kvCacheBytes(base, { batch: 0 }), 'INVALID_ARGUMENT', 'options.batch');
  expectError(() => hs.kvCacheBytes(base, { positions: 2.5 }), 'INVALID_ARGUMENT', 'options.positions');
  expectError(() => hs.kvCacheBytes(base, { rows: 1 }), 'INVALID_ARGUMENT', 'rows');
  assert.equal(hs.liveHandles(), 0, 'the size computation keeps no handle');
});

test('alibiSlopes: Press et al.\'s slopes, the bias hook_attn_scores carries', () => {
  // p the largest power of two <= H; 2^(-8 (h + 1) / p), then the odd slopes of 2p heads.
  const press = (H) => {
    let p = 1;
    while (p * 2 <= H) p *= 2;
    return Array.from({ length: H }, (_, h) => Math.fround(2 ** (h < p ? (-8 * (h + 1)) / p : (-8 * (2 * (h - p) + 1)) / (2 * p))));
  };
  for (const H of [1, 2, 3, 4, 6, 8, 12, 16, 64]) {
    const s = hs.alibiSlopes(H);
    assert.ok(Array.isArray(s));
    assert.deepEqual(s, press(H), `${H} heads`);
  }
  // The bias in the scores: hook_attn_scores of an ALiBi model minus those of the same weights
  // with no positions (the same parameters) is -slope |i - j| to a float rounding of the scores.
  const config = { vocabSize: 9, maxLen: 10, dModel: 12, nLayers: 1, nHeads: 3 };
  const alibi = hs.createTransformer({ ...config, positions: 'alibi', seed: 5 });
  const plain = hs.createTransformer({ ...config, positions: 'none', seed: null });
  try {
    plain.loadStateDict(alibi.stateDict());
    const tokens = [1, 4, 2, 8, 5, 7, 3, 0, 6, 2];
    const hook = 'blocks.0.attn.hook_attn_scores';
    const a = alibi.forward(tokens, { hooks: [hook] }).hooks[hook];
    const p = plain.forward(tokens, { hooks: [hook] }).hooks[hook];
    const slopes = hs.alibiSlopes(3);
    const T = tokens.length;
    for (let h = 0; h < 3; h++) {
      for (let i = 0; i < T; i++) {
        for (let j = 0; j <= i; j++) {
          const at = (h * T + i) * T + j;
          const bias = a.data[at] - p.data[at];
          assert.ok(Math.abs(bias + slopes[h] * (i - j)) <= 1e-5 * (1 + Math.abs(p.data[at])), `head ${h} (${i}, ${j}): ${bias}`);
        }
      }
    }
  } finally {
    alibi.dispose();
    plain.dispose();
  }
  expectError(() => hs.alibiSlopes(0), 'INVALID_ARGUMENT', 'nHeads');
  expectError(() => hs.alibiSlopes(2.5), 'INVALID_ARGUMENT', 'nHeads');
});

test('through a Worker: the same numbers, the measured bytes of a remote generation', async () => {
  const config = { ...base, nKvHeads: 2 };
  assert.equal(await remote.kvCacheBytes(config, { batch: 2, positions: 9 }), hs.kvCacheBytes(config, { batch: 2, positions: 9 }));
  assert.deepEqual(await remote.alibiSlopes(6), hs.alibiSlopes(6));
  const m = await remote.createTransformer(config);
  try {
    await m.generate([[1, 2, 3], [4, 5, 6]], { maxNewTokens: 6 });
    assert.equal(await m.kvCacheBytes(), hs.kvCacheBytes(config, { batch: 2, positions: 9 }));
  } finally {
    await m.dispose();
  }
});
