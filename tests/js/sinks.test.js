// Attention sinks (gpt-oss) through WebAssembly: the Transformer's attnSinks and
// MultiheadAttention's (the PyTorch goldens with them, tests/golden/transformer/*-sinks-* and
// tests/golden/train/*-sinks-*, run in transformer.test.js and train.test.js with every other
// golden). Here: the config, the parameter's place and initial value; hook_pattern against the
// closed form from hook_attn_scores and the sinks, computed in JS; generation's kept logits equal
// forward's bit for bit; a sink of -Infinity changes no bit; gradients and training; the case
// parser; and an induction head formed with sinks through the public API (fixed seeds).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { init } from '../../web/lib/index.js';
import { parseCase } from '../../web/lib/case.js';
import { makeTask } from '../../web/lib/tasks.js';
import { expectError, mulberry32 } from './helpers.js';
import { expectInductionForms, withTransformer } from './transformer-helpers.js';

const hs = await init({ simd: 'simd128' });
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const withModel = (config, fn) => withTransformer(hs, config, fn);
const sinkKey = (l) => `blocks.${l}.attn.sinks`;
const setSinks = (m, l, values) =>
  m.loadStateDict({ [sinkKey(l)]: { data: Float32Array.from(values), shape: [values.length] } }, { strict: false });

test('the config: attnSinks adds blocks.{l}.attn.sinks (nHeads), 0 from a seed, after in_proj_bias', () => {
  withModel({ vocabSize: 7, maxLen: 8, dModel: 8, nLayers: 2, nHeads: 2, seed: 1 }, (m) => {
    assert.equal(m.config.attnSinks, false);
    assert.ok(!(sinkKey(0) in m.parameterShapes()));
  });
  withModel({ vocabSize: 7, maxLen: 8, dModel: 12, nLayers: 2, nHeads: 3, nKvHeads: 1, attnSinks: true, seed: 1 }, (m) => {
    assert.equal(m.config.attnSinks, true);
    const keys = Object.keys(m.parameterShapes());
    for (const l of [0, 1]) {
      assert.deepEqual(m.parameterShapes()[sinkKey(l)], [3]);
      // The reference module's order: torch's own attention parameters, then sinks, then out_proj.
      assert.equal(keys.indexOf(sinkKey(l)), keys.indexOf(`blocks.${l}.attn.in_proj_bias`) + 1);
      assert.equal(keys.indexOf(`blocks.${l}.attn.out_proj.weight`), keys.indexOf(sinkKey(l)) + 1);
      assert.deepEqual(Array.from(m.stateDict()[sinkKey(l)].data), [0, 0, 0]);
    }
  });
  expectError(() => hs.createTransformer({ vocabSize: 7, maxLen: 8, dModel: 8, attnSinks: 'yes' }),
    'INVALID_ARGUMENT', 'config.attnSinks');
});

test('hook_pattern is exp(x - m) / (sum exp(x - m) + exp(s_h - m)) of hook_attn_scores: rows sum to less than 1', () => {
  const configs = [
    { vocabSize: 9, maxLen: 12, dModel: 12, nLayers: 2, nHeads: 3, attnSinks: true, seed: 3 },
    { vocabSize: 9, maxLen: 12, dModel: 16, nLayers: 1, nHeads: 4, nKvHeads: 2, positions: 'alibi', attnWindow: 4, attnSinks: true, seed: 4 },
    { vocabSize: 9, maxLen: 40, dModel: 16, nLayers: 1, nHeads: 2, causal: false, positions: 'rope', attnSinks: true, seed: 5 },
  ];
  for (const config of configs) {
    withModel(config, (m) => {
      const H = config.nHeads;
      const sinks = Array.from({ length: H }, (_, h) => [-1.5, 4, 0.25, 2][h % 4]);
      setSinks(m, 0, sinks);
      const T = config.maxLen, B = 2;
      const tokens = { data: Int32Array.from({ length: B * T }, (_, p) => (p * 5 + 3) % config.vocabSize), shape: [B, T] };
      const r = m.forward(tokens, { hooks: ['blocks.0.attn.hook_attn_scores', 'blocks.0.attn.hook_pattern'] });
      const scores = r.hooks['blocks.0.attn.hook_attn_scores'], pattern = r.hooks['blocks.0.attn.hook_pattern'];
      let worst = 0, lightest = 1;
      for (let row = 0; row < B * H * T; row++) {
        const h = Math.floor(row / T) % H, s = Math.fround(sinks[h]);
        const x = scores.data.subarray(row * T, (row + 1) * T);
        const m0 = Math.max(s, ...x);
        const sum = x.reduce((a, v) => a + Math.exp(v - m0), 0) + Math.exp(s - m0);
        let mass = 0;
        for (let j = 0; j < T; j++) {
          const got = pattern.data[row * T + j];
          worst = Math.max(worst, Math.abs(got - Math.exp(x[j] - m0) / sum));
          mass += got;
        }
        assert.ok(mass < 1, `${JSON.stringify(config)} row ${row}: sums to ${mass}`);
        lightest = Math.min(lightest, mass);
      }
      assert.ok(worst < 2e-6, `${JSON.stringify(config)}: pattern off by ${worst}`);
      assert.ok(lightest < 0.5, 'a sink of 4 takes most of some rows');
    });
  }
});

test('a sink of -Infinity changes no bit; generate\'s kept logits are forward\'s, bit for bit', () => {
  const base = { vocabSize: 11, maxLen: 40, dModel: 24, nLayers: 2, nHeads: 6, nKvHeads: 2, dMlp: 16, positions: 'rope', attnWindow: 18, seed: 9 };
  const tokens = { data: Int32Array.from({ length: 80 }, (_, p) => (p * 7 + 2) % 11), shape: [2, 40] };
  withModel(base, (plain) => withModel({ ...base, attnSinks: true }, (m) => {
    m.loadStateDict(plain.stateDict(), { strict: false });
    for (const l of [0, 1]) setSinks(m, l, new Array(6).fill(-Infinity));
    const a = plain.forward(tokens).logits.data, b = m.forward(tokens).logits.data;
    assert.deepEqual(new Uint32Array(b.slice().buffer), new Uint32Array(a.slice().buffer));
    for (const l of [0, 1]) setSinks(m, l, [-1, 0, 0.5, 1, 2, 3]);
    const c = m.forward(tokens).logits.data;
    assert.ok(c.some((v, i) => v !== a[i]), 'finite sinks change the logits');
    const prompt = { data: Int32Array.from([1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6]), shape: [2, 10] };
    const g = m.generate(prompt, { maxNewTokens: 30, logits: true });
    const full = m.forward(g.tokens).logits;
    const V = 11, T = 40;
    for (let b = 0; b < 2; b++) {
      for (let s = 0; s < 30; s++) {
        const kept = g.logits.data.subarray((b * 30 + s) * V, (b * 30 + s + 1) * V);
        const want = full.data.subarray((b * T + 9 + s) * V, (b * T + 10 + s) * V);
        assert.deepEqual(new Uint32Array(kept.slice().buffer), new Uint32Array(want.slice().buffer), `row ${b} step ${s}`);
      }
    }
  }));
});

test('training: the sinks get a gradient (central differences of the loss agree) and AdamW moves them', () => {
  const config = { vocabSize: 8, maxLen: 12, dModel: 8, nLayers: 1, nHeads: 2, dMlp: 8, attnSinks: true, seed: 2 };
  withModel(config, (m) => {
    setSinks(m, 0, [0.5, -0.25]);
    const tokens = { data: Int32Array.from({ length: 24 }, (_, p) => (p * 3 + 1) % 8), shape: [2, 12] };
    const targets = { data: Int32Array.from({ length: 24 }, (_, p) => (p * 3 + 4) % 8), shape: [2, 12] };
    const { grads } = m.backward(tokens, targets);
    assert.deepEqual(Object.keys(grads).sort(), Object.keys(m.parameterShapes()).sort());
    const g = grads[sinkKey(0)].data;
    for (let h = 0; h < 2; h++) {
      const at = (v) => {
        const s = [0.5, -0.25];
        s[h] = v;
        setSinks(m, 0, s);
        return m.backward(tokens, targets).loss;
      };
      const base = [0.5, -0.25][h], step = 1e-2;
      const fd = (at(base + step) - at(base - step)) / (2 * step);
      assert.ok(Math.abs(fd - g[h]) < 2e-3 * Math.max(1, Math.abs(g[h])), `head ${h}: ${g[h]} vs ${fd}`);
    }
    setSinks(m, 0, [0.5, -0.25]);
    m.setOptimizer({ type: 'adamw', lr: 1e-2 });
    const first = m.trainStep(tokens, targets).loss;
    let last = first;
    for (let s = 0; s < 20; s++) last = m.trainStep(tokens, targets).loss;
    assert.ok(last < first, `${first} -> ${last}`);
    const after = Array.from(m.stateDict()[sinkKey(0)].data);
    assert.ok(after[0] !== 0.5 && after[1] !== -0.25, `sinks after 21 steps: ${after}`);
  });
});

test('parseCase reads attn_sinks from the goldens; runCase matches them', (t) => {
  const dir = new URL('../golden/transformer/', import.meta.url);
  const files = readdirSync(dir).filter((f) => f.endsWith('.json') && f.includes('-sinks'));
  assert.ok(files.length >= 8, `${files.length} sink goldens`);
  let worst = 0, at = '';
  for (const f of files) {
    const text = readFileSync(new URL(f, dir), 'utf8');
    assert.equal(parseCase(text).config.attnSinks, true, f);
    const report = hs.checkCase(text, hs.runCase(text));
    assert.ok(report.ok, `${f}: ${report.detail}`);
    if (report.maxRelativeError > worst) [worst, at] = [report.maxRelativeError, f];
  }
  t.diagnostic(`${files.length} sink goldens in WebAssembly: worst relative error ${worst.toExponential(2)} (${at})`);
  const doc = JSON.parse(readFileSync(new URL(files[0], dir), 'utf8'));
  doc.config.attn_sinks = 1;
  expectError(() => parseCase(doc), 'PARSE_ERROR', 'config.attn_sinks');
});

test('MultiheadAttention attnSinks: the parameter sinks (numHeads); each row is the plain row scaled by its own sum', () => {
  const rng = mulberry32(12);
  for (const config of [
    { embedDim: 8, numHeads: 2, batchFirst: true },
    { embedDim: 12, numHeads: 3, numKvHeads: 1, batchFirst: true },
    { embedDim: 64, numHeads: 2, batchFirst: true },  // (a head dim past the small path's)
  ]) {
    const plain = hs.createMultiheadAttention(config);
    const sunk = hs.createMultiheadAttention({ ...config, attnSinks: true });
    try {
      assert.deepEqual(sunk.parameterShapes().sinks, [config.numHeads]);
      const sd = Object.fromEntries(Object.entries(plain.parameterShapes()).map(([k, shape]) =>
        [k, { data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => rng() - 0.5), shape }]));
      plain.loadStateDict(sd);
      const zeros = { data: new Float32Array(3 * config.embedDim), shape: [1, 3, config.embedDim] };
      expectError(() => sunk.forward(zeros, zeros, zeros), 'MISSING_PARAMETER', 'sinks');
      const H = config.numHeads;
      sunk.loadStateDict({ ...sd, sinks: { data: Float32Array.from({ length: H }, (_, h) => h - 0.5), shape: [H] } });
      const T = 20, x = { data: Float32Array.from({ length: 2 * T * config.embedDim }, () => 2 * rng() - 1), shape: [2, T, config.embedDim] };
      const opts = { isCausal: true, averageAttnWeights: false };
      const a = plain.forward(x, x, x, opts).weights.data, b = sunk.forward(x, x, x, opts).weights.data;
      let worst = 0;
      for (let row = 0; row < a.length / T; row++) {
        let mass = 0;
        for (let j = 0; j < T; j++) mass += b[row * T + j];
        assert.ok(mass < 1, `row ${row}: ${mass}`);
        for (let j = 0; j < T; j++) worst = Math.max(worst, Math.abs(b[row * T + j] - a[row * T + j] * mass));
      }
      assert.ok(worst < 1e-6, `${JSON.stringify(config)}: off by ${worst}`);
    } finally {
      plain.dispose();
      sunk.dispose();
    }
  }
});

test('induction with attention sinks: a layer-1 induction head forms and the second half\'s loss falls, fixed seeds',
  { timeout: 300_000 }, (t) => {
    const config = { vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, dMlp: 0, norm: 'pre', attnSinks: true, seed: 1 };
    withModel(config, (m) => {
      expectInductionForms(t, m, makeTask, 'sinks');
      t.diagnostic(`sinks after training: ${Array.from(m.stateDict()['blocks.1.attn.sinks'].data, (v) => v.toFixed(3))}`);
    });
  });
