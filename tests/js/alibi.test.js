// ALiBi and sliding-window attention through WebAssembly: the Transformer's positions 'alibi' and
// attnWindow (the PyTorch goldens with them, tests/golden/transformer/*alibi*, *-w{w}-* and
// tests/golden/train/*alibi*, *-w{w}-*, run in transformer.test.js and train.test.js with every
// other golden). Here: the config and its messages; no position embedding with ALiBi; the bias
// and the window in hook_attn_scores, checked against a plain-JS recomputation from hook_q and
// hook_k; generation's kept logits equal forward's, bit for bit; gradients and training steps; the
// case parser; and an induction head formed with ALiBi through the public API (fixed seeds).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { init } from '../../web/lib/index.js';
import { parseCase } from '../../web/lib/case.js';
import { makeTask } from '../../web/lib/tasks.js';
import { expectError, mulberry32 } from './helpers.js';
import { alibiSlopes, referenceForward } from './reference.js';
import { expectInductionForms, withTransformer } from './transformer-helpers.js';

const hs = await init({ simd: 'simd128' });
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const withModel = (config, fn) => withTransformer(hs, config, fn);

// Press et al.'s slopes, written out (tests/js/reference.js).
const slopes = alibiSlopes;

test('the config: positions "alibi" and attnWindow, their defaults and messages', () => {
  withModel({ vocabSize: 7, maxLen: 8, dModel: 8, nHeads: 2, positions: 'alibi', seed: 1 }, (m) => {
    assert.equal(m.config.positions, 'alibi');
    assert.equal(m.config.attnWindow, 0);
    assert.ok(!('pos_embed.weight' in m.parameterShapes()), 'no position embedding');
    assert.ok(!m.hookNames().includes('hook_pos_embed'));
  });
  withModel({ vocabSize: 7, maxLen: 8, dModel: 8, attnWindow: 3, seed: 1 }, (m) => {
    assert.equal(m.config.attnWindow, 3);
    assert.deepEqual(m.parameterShapes()['pos_embed.weight'], [8, 8]);
  });
  expectError(() => hs.createTransformer({ vocabSize: 7, maxLen: 8, dModel: 8, attnWindow: -1 }),
    'INVALID_ARGUMENT', 'config.attnWindow', '0 (full attention)');
  expectError(() => hs.createTransformer({ vocabSize: 7, maxLen: 8, dModel: 8, attnWindow: 1.5 }),
    'INVALID_ARGUMENT', 'config.attnWindow');
  expectError(() => hs.createTransformer({ vocabSize: 7, maxLen: 8, dModel: 8, positions: 'rotary' }),
    'INVALID_ARGUMENT', 'config.positions', "'alibi'");
});

// hook_attn_scores of layer l recomputed in JS: (q / sqrt(dh)) . k (float64 of the float32 hooks),
// - m_h |i - j| with ALiBi, -inf outside the window (and above the diagonal, causal).
function expectedScores(config, q, k, b, h, i, j) {
  const [, H, T, dh] = q.shape;
  const G = k.shape[1];
  const w = config.attnWindow ?? 0, causal = config.causal ?? true;
  if ((causal && j > i) || (w > 0 && (j <= i - w || (!causal && j >= i + w)))) return -Infinity;
  const g = Math.floor(h / (H / G));
  let dot = 0;
  for (let x = 0; x < dh; x++) {
    dot += (q.data[((b * H + h) * T + i) * dh + x] / Math.fround(Math.sqrt(dh))) * k.data[((b * G + g) * T + j) * dh + x];
  }
  return config.positions === 'alibi' ? dot - slopes(H)[h] * Math.abs(i - j) : dot;
}

test('hook_attn_scores holds the ALiBi bias and the window\'s -Infinity; the pattern is 0 there', () => {
  const configs = [
    { vocabSize: 9, maxLen: 12, dModel: 12, nLayers: 2, nHeads: 3, positions: 'alibi', seed: 3 },
    { vocabSize: 9, maxLen: 12, dModel: 12, nLayers: 1, nHeads: 6, nKvHeads: 3, positions: 'alibi', attnWindow: 4, seed: 4 },
    { vocabSize: 9, maxLen: 12, dModel: 8, nLayers: 1, nHeads: 2, causal: false, attnWindow: 3, seed: 5 },
    { vocabSize: 9, maxLen: 40, dModel: 16, nLayers: 1, nHeads: 4, positions: 'alibi', attnWindow: 17, seed: 6 },
  ];
  for (const config of configs) {
    withModel(config, (m) => {
      const T = config.maxLen, B = 2;
      const tokens = { data: Int32Array.from({ length: B * T }, (_, p) => (p * 5 + 3) % config.vocabSize), shape: [B, T] };
      const hooks = ['blocks.0.attn.hook_q', 'blocks.0.attn.hook_k', 'blocks.0.attn.hook_attn_scores', 'blocks.0.attn.hook_pattern'];
      const r = m.forward(tokens, { hooks });
      const [q, k, scores, pattern] = hooks.map((n) => r.hooks[n]);
      const H = config.nHeads;
      let worst = 0;
      for (let b = 0; b < B; b++) for (let h = 0; h < H; h++) for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) {
        const at = ((b * H + h) * T + i) * T + j;
        const want = expectedScores(config, q, k, b, h, i, j);
        if (want === -Infinity) {
          assert.equal(scores.data[at], -Infinity, `${JSON.stringify(config)} score ${[b, h, i, j]}`);
          assert.equal(pattern.data[at], 0);
        } else {
          worst = Math.max(worst, Math.abs(scores.data[at] - want));
        }
      }
      assert.ok(worst < 1e-5, `${JSON.stringify(config)}: scores off by ${worst}`);
    });
  }
});

test('generate: ALiBi and windowed models\' kept logits are forward\'s over the whole sequence, bit for bit', () => {
  const configs = [
    { vocabSize: 11, maxLen: 40, dModel: 16, nLayers: 2, nHeads: 4, positions: 'alibi', seed: 7 },
    { vocabSize: 11, maxLen: 40, dModel: 16, nLayers: 2, nHeads: 2, attnWindow: 5, seed: 8 },
    { vocabSize: 11, maxLen: 40, dModel: 24, nLayers: 2, nHeads: 6, nKvHeads: 2, dMlp: 16, positions: 'alibi', attnWindow: 18, seed: 9 },
  ];
  for (const config of configs) {
    withModel(config, (m) => {
      const prompt = { data: Int32Array.from([1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6]), shape: [2, 10] };
      const g = m.generate(prompt, { maxNewTokens: 30, logits: true });
      const full = m.forward(g.tokens).logits;   // (2, 40, V)
      const V = config.vocabSize, T = 40;
      for (let b = 0; b < 2; b++) {
        for (let s = 0; s < 30; s++) {
          const kept = g.logits.data.subarray((b * 30 + s) * V, (b * 30 + s + 1) * V);
          const want = full.data.subarray((b * T + 9 + s) * V, (b * T + 10 + s) * V);
          assert.deepEqual(new Uint32Array(kept.slice().buffer), new Uint32Array(want.slice().buffer),
            `${JSON.stringify(config)} row ${b} step ${s}`);
        }
      }
    });
  }
});

test('training: backward gives every parameter a gradient; AdamW steps lower the loss', () => {
  for (const config of [
    { vocabSize: 8, maxLen: 12, dModel: 12, nLayers: 2, nHeads: 3, dMlp: 12, positions: 'alibi', seed: 2 },
    { vocabSize: 8, maxLen: 12, dModel: 8, nLayers: 2, nHeads: 2, attnWindow: 3, causal: false, seed: 2 },
  ]) {
    withModel(config, (m) => {
      const tokens = { data: Int32Array.from({ length: 24 }, (_, p) => (p * 3 + 1) % 8), shape: [2, 12] };
      const targets = { data: Int32Array.from({ length: 24 }, (_, p) => (p * 3 + 4) % 8), shape: [2, 12] };
      const { grads } = m.backward(tokens, targets);
      assert.deepEqual(Object.keys(grads).sort(), Object.keys(m.parameterShapes()).sort());
      m.setOptimizer({ type: 'adamw', lr: 1e-2 });
      const first = m.trainStep(tokens, targets).loss;
      let last = first;
      for (let s = 0; s < 20; s++) last = m.trainStep(tokens, targets).loss;
      assert.ok(last < first, `${JSON.stringify(config)}: ${first} -> ${last}`);
    });
  }
});

test('parseCase reads positions "alibi" and attn_window from the goldens; runCase matches them', (t) => {
  const dir = new URL('../golden/transformer/', import.meta.url);
  const files = readdirSync(dir).filter((f) => f.endsWith('.json') && (f.includes('alibi') || /-w\d+-/.test(f)));
  assert.ok(files.length >= 16, `${files.length} ALiBi / window goldens`);
  let worst = 0, at = '';
  for (const f of files) {
    const text = readFileSync(new URL(f, dir), 'utf8');
    const c = parseCase(text);
    const w = /-w(\d+)-/.exec(f);
    assert.equal(c.config.attnWindow, w ? Number(w[1]) : 0, f);
    if (f.includes('alibi')) assert.equal(c.config.positions, 'alibi');
    const report = hs.checkCase(text, hs.runCase(text));
    assert.ok(report.ok, `${f}: ${report.detail}`);
    if (report.maxRelativeError > worst) [worst, at] = [report.maxRelativeError, f];
  }
  t.diagnostic(`${files.length} ALiBi / window goldens in WebAssembly: worst relative error ${worst.toExponential(2)} (${at})`);
  const doc = JSON.parse(readFileSync(new URL(files[0], dir), 'utf8'));
  doc.config.attn_window = -2;
  expectError(() => parseCase(doc), 'PARSE_ERROR', 'config.attn_window');
});

// --- MultiheadAttention's forward options alibi and window --------------------------------------

// A module of `config` with seeded weights (every state_dict entry uniform in [-0.5, 0.5)), and a
// seeded (T, E) / (T, N, E) / (N, T, E) input.
function seededModule(config, rng) {
  const mha = hs.createMultiheadAttention(config);
  const sd = Object.fromEntries(Object.entries(mha.parameterShapes()).map(([k, shape]) =>
    [k, { data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => rng() - 0.5), shape }]));
  mha.loadStateDict(sd);
  return { mha, sd };
}
const seededInput = (rng, N, T, D, batchFirst) => {
  const shape = N === null ? [T, D] : batchFirst ? [N, T, D] : [T, N, D];
  return { data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => 2 * rng() - 1), shape };
};
// max |got - want| / max(1, max |want|), with -Infinity / NaN required in the same places.
function relativeError(got, want, name) {
  let err = 0, scale = 1;
  for (let i = 0; i < want.length; i++) {
    if (!Number.isFinite(want[i])) {
      assert.ok(Object.is(got[i], want[i]) || (Number.isNaN(got[i]) && Number.isNaN(want[i])), `${name}[${i}]: ${got[i]} vs ${want[i]}`);
      continue;
    }
    scale = Math.max(scale, Math.abs(want[i]));
    err = Math.max(err, Math.abs(got[i] - want[i]));
  }
  return err / scale;
}

test('MultiheadAttention forward and trace with alibi and window: the plain-JS float64 reference within 1e-5', (t) => {
  const rng = mulberry32(11);
  const calls = [
    { config: { embedDim: 8, numHeads: 4 }, N: 2, L: 6, options: { isCausal: true, alibi: true } },
    { config: { embedDim: 6, numHeads: 3 }, N: null, L: 4, S: 7, options: { alibi: true, window: 2 } },
    { config: { embedDim: 8, numHeads: 2, addBiasKV: true, addZeroAttn: true }, N: 2, L: 5,
      options: { isCausal: true, alibi: true, window: 2, keyPaddingMask: [[false, true, false, false, false], [false, false, false, true, false]] } },
    // The packed path (40 and 37 keys): 16-row tiles that skip the keys before the window.
    { config: { embedDim: 8, numHeads: 4, numKvHeads: 2, batchFirst: true }, N: 2, L: 40,
      options: { isCausal: true, alibi: true, window: 9 } },
    { config: { embedDim: 12, numHeads: 2 }, N: null, L: 37, options: { window: 5 } },
    { config: { embedDim: 40, numHeads: 2 }, N: 1, L: 70, options: { isCausal: true, window: 17, alibi: true } },
    // L > S: a causal window leaves the last queries no key (the zero-row policy).
    { config: { embedDim: 8, numHeads: 2 }, N: 2, L: 6, S: 3, options: { isCausal: true, window: 2 } },
  ];
  let worst = 0;
  for (const { config, N, L, S = null, options } of calls) {
    const { mha, sd } = seededModule(config, rng);
    const full = mha.config;
    const q = seededInput(rng, N, L, full.embedDim, full.batchFirst);
    const k = S === null ? q : seededInput(rng, N, S, full.kdim, full.batchFirst);
    const v = S === null ? q : seededInput(rng, N, S, full.vdim, full.batchFirst);
    const want = referenceForward(full, sd, q, k, v, { ...options, averageAttnWeights: false });
    const got = mha.forward(q, k, v, { ...options, averageAttnWeights: false });
    const trace = mha.trace(q, k, v, options);
    const name = JSON.stringify({ config, options: { ...options, keyPaddingMask: undefined } });
    assert.deepEqual(got.weights.shape, want.headWeights.shape, name);
    worst = Math.max(worst, relativeError(got.output.data, want.output.data, `${name} output`),
      relativeError(got.weights.data, want.headWeights.data, `${name} weights`),
      relativeError(trace.scores.data, want.scores.data, `${name} scores`));
    assert.deepEqual(trace.output.data, got.output.data, `${name}: trace's output is forward's`);
    assert.deepEqual(trace.weights.data, got.weights.data, `${name}: trace's weights are forward's`);
    mha.dispose();
  }
  assert.ok(worst < 1e-5, `worst relative error ${worst}`);
  t.diagnostic(`${calls.length} calls against the float64 reference: worst relative error ${worst.toExponential(2)}`);
});

test('MultiheadAttention options.alibi / options.window: refused naming the option, the module keeps working; a window as long as the sequence changes no bit', () => {
  const { mha } = seededModule({ embedDim: 8, numHeads: 2 }, mulberry32(3));
  const x = seededInput(mulberry32(4), 2, 20, 8, false);
  const before = mha.forward(x, x, x, { alibi: true, window: 3 });
  for (const window of [-1, 2.5, '3', 2 ** 24 + 1, NaN, Infinity, null, true, 3n, [2]]) {
    for (const call of [() => mha.forward(x, x, x, { window }), () => mha.trace(x, x, x, { window })]) {
      expectError(call, 'INVALID_ARGUMENT', 'options.window: expected 0 (no window) or an integer in [1, 16777216], got ');
    }
  }
  for (const alibi of [1, 'yes', null, {}]) {
    expectError(() => mha.forward(x, x, x, { alibi }), 'INVALID_ARGUMENT', 'options.alibi: expected true or false, got ');
  }
  const after = mha.forward(x, x, x, { alibi: true, window: 3 });
  assert.deepEqual(after.output.data, before.output.data);
  assert.deepEqual(after.weights.data, before.weights.data);
  // The defaults are no bias and no window; a window of L or more keys blocks nothing (it still
  // takes the windowed path: 16-row tiles), -0 is 0.
  for (const isCausal of [true, false]) {
    const plain = mha.forward(x, x, x, { isCausal, averageAttnWeights: false });
    assert.deepEqual(mha.forward(x, x, x, { isCausal, alibi: false, window: -0, averageAttnWeights: false }), plain);
    for (const window of [20, 2 ** 24]) {
      const wide = mha.forward(x, x, x, { isCausal, window, averageAttnWeights: false });
      assert.deepEqual(wide.output.data, plain.output.data, `isCausal ${isCausal}, window ${window}`);
      assert.deepEqual(wide.weights.data, plain.weights.data);
    }
  }
  mha.dispose();
});

// The induction lab's model with ALiBi instead of learned positions (tests/js/learning.test.js's
// recipe and check): a layer-1 head attends from the second copy to the token after the previous
// occurrence of the current token. ALiBi gives no position embedding: the previous-token head of
// layer 0 must come from the bias (4 heads: slopes 1/4 .. 1/256) and the content.
test('induction with ALiBi: a layer-1 induction head forms and the second half\'s loss falls, fixed seeds',
  { timeout: 300_000 }, (t) => {
    const config = { vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 4, dMlp: 0, norm: 'pre', positions: 'alibi', seed: 1 };
    withModel(config, (m) => expectInductionForms(t, m, makeTask, 'ALiBi'));
  });
