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
import { expectError } from './helpers.js';

const hs = await init({ simd: 'simd128' });
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const withModel = (config, fn) => {
  const m = hs.createTransformer(config);
  try {
    return fn(m);
  } finally {
    m.dispose();
  }
};

// Press et al.'s slopes, written out: p the largest power of two <= H; 2^(-8 (h + 1) / p) for h < p,
// then 2^(-8 (2 (h - p) + 1) / (2 p)); float32 (Math.fround).
function slopes(H) {
  let p = 1;
  while (p * 2 <= H) p *= 2;
  return Array.from({ length: H }, (_, h) =>
    Math.fround(2 ** (h < p ? (-8 * (h + 1)) / p : (-8 * (2 * (h - p) + 1)) / (2 * p))));
}

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
  expectError(() => hs.createTransformer({ vocabSize: 7, maxLen: 8, dModel: 8, positions: 'rope' }),
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

// The induction lab's model with ALiBi instead of learned positions (tests/js/learning.test.js's
// recipe and check): a layer-1 head attends from the second copy to the token after the previous
// occurrence of the current token. ALiBi gives no position embedding: the previous-token head of
// layer 0 must come from the bias (4 heads: slopes 1/4 .. 1/256) and the content.
test('induction with ALiBi: a layer-1 induction head forms and the second half\'s loss falls, fixed seeds',
  { timeout: 300_000 }, (t) => {
    const config = { vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 4, dMlp: 0, norm: 'pre', positions: 'alibi', seed: 1 };
    const optimizer = { type: 'adamw', lr: 3e-3, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0.01 };
    const task = makeTask('induction', { seqLen: 32, seed: 1 });
    const batch = 16, maxSteps = 2000, every = 100;
    withModel(config, (m) => {
      m.setOptimizer(optimizer);
      const held = task.heldOut(64, 0);
      const T = task.seqLen;
      const half = { data: Int32Array.from(held.targets.data, (y, p) => (p % T < T / 2 ? -100 : y)), shape: held.targets.shape };
      const measure = () => {
        const r = m.forward(held.tokens, { hooks: ['blocks.1.attn.hook_pattern'] });
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
        return { score: Math.max(...s), scores: s, secondHalfLoss: task.evaluate(r.logits, half).loss,
          ...task.evaluate(r.logits, held.targets) };
      };
      const start = measure();
      let steps = 0, last = start;
      const started = performance.now();
      while (steps < maxSteps) {
        for (let i = 0; i < every; i++, steps++) {
          const { tokens, targets } = task.batch(batch, steps);
          assert.ok(m.trainStep(tokens, targets).stepped);
        }
        last = measure();
        if (last.score > 0.4 && last.secondHalfLoss < 1.0) break;
      }
      t.diagnostic(`induction with ALiBi (model seed 1, task seed 1, 4 heads, AdamW lr 3e-3, batch 16): ${steps} steps in ` +
        `${((performance.now() - started) / 1000).toFixed(1)} s; layer-1 induction scores [${last.scores.map((x) => x.toFixed(3))}] ` +
        `(at start ${start.score.toFixed(3)}); second-half loss ${start.secondHalfLoss.toFixed(3)} -> ${last.secondHalfLoss.toFixed(3)}; ` +
        `held-out accuracy ${start.accuracy.toFixed(3)} -> ${last.accuracy.toFixed(3)}`);
      assert.ok(last.score > 0.4, `best layer-1 induction score ${last.score} after ${steps} steps`);
      assert.ok(last.secondHalfLoss < 1.0, `second-half loss ${last.secondHalfLoss}`);
      assert.ok(start.score < 0.2 && start.secondHalfLoss > 2.5);
    });
  });
