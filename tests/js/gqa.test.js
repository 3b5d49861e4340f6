// Grouped-query and multi-query attention through WebAssembly: MultiheadAttention's numKvHeads and
// the Transformer's nKvHeads (the PyTorch goldens with them, tests/golden/gqa-*, mqa-*,
// gates/gates-gqa-*, transformer/*-kv*, train/*-kv*, run in api.test.js, gates.test.js,
// transformer.test.js and train.test.js with every other golden). Here: the configs and the
// state_dict's shapes; a grouped module is the plain module with its K/V rows repeated per head,
// bit for bit (output, per-head weights, head statistics, gates, the trace, whose k and v keep the
// G heads); the Transformer's hooks, generation, gradients and a training step; the case parsers;
// the same bits through a Worker.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parseCase } from '../../web/lib/case.js';
import { engineAndWorker, expectError, mulberry32 } from './helpers.js';
import { assertSameBits, assertSameResultBits } from './same-bits.js';

const { hs, remote } = await engineAndWorker({ simd: 'simd128' });

const random = mulberry32(30);
const floats = (n, scale = 1) => Float32Array.from({ length: n }, () => (2 * random() - 1) * scale);
const tensor = (shape) => ({ data: floats(shape.reduce((a, b) => a * b, 1)), shape });

function withModules(configs, fn) {
  const ms = configs.map((c) => hs.createMultiheadAttention(c));
  try {
    return fn(...ms);
  } finally {
    for (const m of ms) m.dispose();
  }
}

// The state_dict of `config` (grouped) with random values, and the plain module's (numKvHeads
// null) whose K/V rows are its rows repeated per head: head h reads K/V head h / (H / G).
function grouped(config) {
  const E = config.embedDim, H = config.numHeads, G = config.numKvHeads, hd = E / H, group = H / G;
  const same = (config.kdim ?? E) === E && (config.vdim ?? E) === E;
  const sd = {};
  const shapes = withModules([config], (m) => m.parameterShapes());
  for (const [k, shape] of Object.entries(shapes)) sd[k] = tensor(shape);
  // Rows [E, cols] from grouped rows [G hd, cols].
  const repeat = (rows, cols) => {
    const out = new Float32Array(E * cols);
    for (let h = 0; h < H; h++) out.set(rows.subarray(Math.floor(h / group) * hd * cols, (Math.floor(h / group) + 1) * hd * cols), h * hd * cols);
    return out;
  };
  const twin = {};
  const Ekv = G * hd;
  const cat = (...parts) => { const o = new Float32Array(parts.reduce((a, p) => a + p.length, 0)); let at = 0; for (const p of parts) { o.set(p, at); at += p.length; } return o; };
  if (same) {
    const w = sd.in_proj_weight.data;
    twin.in_proj_weight = { data: cat(w.subarray(0, E * E), repeat(w.subarray(E * E, (E + Ekv) * E), E), repeat(w.subarray((E + Ekv) * E), E)), shape: [3 * E, E] };
  } else {
    twin.q_proj_weight = sd.q_proj_weight;
    twin.k_proj_weight = { data: repeat(sd.k_proj_weight.data, sd.k_proj_weight.shape[1]), shape: [E, sd.k_proj_weight.shape[1]] };
    twin.v_proj_weight = { data: repeat(sd.v_proj_weight.data, sd.v_proj_weight.shape[1]), shape: [E, sd.v_proj_weight.shape[1]] };
  }
  if (sd.in_proj_bias) {
    const b = sd.in_proj_bias.data;
    twin.in_proj_bias = { data: cat(b.subarray(0, E), repeat(b.subarray(E, E + Ekv), 1), repeat(b.subarray(E + Ekv), 1)), shape: [3 * E] };
  }
  if (sd.bias_k) {
    twin.bias_k = { data: repeat(sd.bias_k.data, 1), shape: [1, 1, E] };
    twin.bias_v = { data: repeat(sd.bias_v.data, 1), shape: [1, 1, E] };
  }
  twin['out_proj.weight'] = sd['out_proj.weight'];
  if (sd['out_proj.bias']) twin['out_proj.bias'] = sd['out_proj.bias'];
  return { sd, twin };
}

test('MultiheadAttention: numKvHeads in the config and the state_dict\'s shapes', () => {
  withModules([{ embedDim: 12, numHeads: 6 }, { embedDim: 12, numHeads: 6, numKvHeads: 2, addBiasKV: true },
    { embedDim: 12, numHeads: 6, numKvHeads: 3, kdim: 5, vdim: 7 }], (plain, g2, g3) => {
    assert.equal(plain.config.numKvHeads, 6, 'null means numHeads');
    assert.equal(g2.config.numKvHeads, 2);
    assert.deepEqual(g2.parameterShapes(), {
      in_proj_weight: [20, 12], in_proj_bias: [20], bias_k: [1, 1, 4], bias_v: [1, 1, 4],
      'out_proj.weight': [12, 12], 'out_proj.bias': [12],
    });
    assert.deepEqual(g3.parameterShapes(), {
      q_proj_weight: [12, 12], k_proj_weight: [6, 5], v_proj_weight: [6, 7], in_proj_bias: [24],
      'out_proj.weight': [12, 12], 'out_proj.bias': [12],
    });
  });
  expectError(() => hs.createMultiheadAttention({ embedDim: 12, numHeads: 6, numKvHeads: 4 }),
    'INVALID_ARGUMENT', 'config.numKvHeads: numHeads (6) must be divisible by numKvHeads (4)');
  // The split spelling of in_proj_weight loads: q (E, E), k and v (G hd, E).
  withModules([{ embedDim: 8, numHeads: 4, numKvHeads: 1, bias: false }], (m) => {
    const x = tensor([3, 8]);
    const split = { q_proj_weight: tensor([8, 8]), k_proj_weight: tensor([2, 8]), v_proj_weight: tensor([2, 8]), 'out_proj.weight': tensor([8, 8]) };
    m.loadStateDict(split);
    const a = m.forward(x, x, x);
    m.loadStateDict({ in_proj_weight: { data: Float32Array.from([...split.q_proj_weight.data, ...split.k_proj_weight.data, ...split.v_proj_weight.data]), shape: [12, 8] }, 'out_proj.weight': split['out_proj.weight'] });
    assertSameResultBits(m.forward(x, x, x), a, 'in_proj_weight = [q; k; v]');
    expectError(() => m.loadStateDict({ k_proj_weight: tensor([8, 8]) }, { strict: false }), 'SHAPE_MISMATCH', 'k_proj_weight');
  });
});

test('MultiheadAttention: a grouped module is the plain one with its K/V rows repeated, bit for bit', () => {
  const configs = [
    { embedDim: 8, numHeads: 4, numKvHeads: 2 },
    { embedDim: 8, numHeads: 4, numKvHeads: 1, batchFirst: true },
    { embedDim: 12, numHeads: 6, numKvHeads: 3, kdim: 5, vdim: 7, addBiasKV: true, addZeroAttn: true },
    { embedDim: 32, numHeads: 8, numKvHeads: 4, bias: false },  // head dim 4, 20 keys: the packed path
  ];
  for (const config of configs) {
    const { sd, twin } = grouped(config);
    const { numKvHeads, ...plainConfig } = config;
    withModules([config, plainConfig], (g, p) => {
      g.loadStateDict(sd);
      p.loadStateDict(twin);
      const E = config.embedDim, H = config.numHeads, S = 20;
      const q = tensor(config.batchFirst ? [2, 5, E] : [5, 2, E]);
      const k = tensor(config.batchFirst ? [2, S, config.kdim ?? E] : [S, 2, config.kdim ?? E]);
      const v = tensor(config.batchFirst ? [2, S, config.vdim ?? E] : [S, 2, config.vdim ?? E]);
      const headGates = Float32Array.from({ length: H }, (_, h) => (h === 1 ? 0 : 1 + h / 4));
      for (const options of [{}, { averageAttnWeights: false, headStats: true },
        { headGates, needWeights: false }, { keyPaddingMask: { data: Uint8Array.from({ length: 2 * S }, (_, i) => (i % 7 === 3 ? 1 : 0)), shape: [2, S] } }]) {
        const what = `${JSON.stringify(config)} ${Object.keys(options)}`;
        assertSameResultBits(g.forward(q, k, v, options), p.forward(q, k, v, options), what);
      }
      const a = g.trace(q, k, v, { headGates, headStats: true });
      const b = p.trace(q, k, v, { headGates, headStats: true });
      const G = numKvHeads, hd = E / H, Sp = S + (config.addBiasKV ? 1 : 0) + (config.addZeroAttn ? 1 : 0);
      assert.deepEqual(a.k.shape, [2, G, Sp, hd], 'trace.k: the G K/V heads');
      assert.deepEqual(a.v.shape, [2, G, Sp, hd]);
      for (const key of ['q', 'scores', 'weights', 'headOutputs', 'concat', 'output']) assertSameBits(a[key], b[key], key);
      assertSameResultBits(a.headStats, b.headStats, 'headStats');
      for (let n = 0; n < 2; n++) {
        for (let g2 = 0; g2 < G; g2++) {
          const at = (n * G + g2) * Sp * hd, from = (n * H + g2 * (H / G)) * Sp * hd;
          assert.deepEqual(a.k.data.subarray(at, at + Sp * hd), b.k.data.subarray(from, from + Sp * hd));
          assert.deepEqual(a.v.data.subarray(at, at + Sp * hd), b.v.data.subarray(from, from + Sp * hd));
        }
      }
    });
  }
});

const T_CONFIG = { vocabSize: 11, maxLen: 12, dModel: 16, nLayers: 2, nHeads: 4, dMlp: 16 };
const TOKENS = [[3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 5, 8, 9, 7]];
const TARGETS = [[1, 4, 1, 5, 9, 2, -100], [5, 3, 5, 8, 9, 7, -100]];

test('Transformer: nKvHeads, the state_dict, hooks, generation, gradients and a training step', () => {
  const plain = hs.createTransformer({ ...T_CONFIG, seed: 3 });
  const g = hs.createTransformer({ ...T_CONFIG, nKvHeads: 2, seed: 3 });
  const mqa = hs.createTransformer({ ...T_CONFIG, nKvHeads: 1, seed: 3 });
  try {
    assert.equal(plain.config.nKvHeads, null, 'null means nHeads');
    assert.equal(g.config.nKvHeads, 2);
    const shapes = g.parameterShapes();
    assert.deepEqual(shapes['blocks.0.attn.in_proj_weight'], [32, 16], '(D + 2 G dh, D)');
    assert.deepEqual(shapes['blocks.1.attn.in_proj_bias'], [32]);
    assert.deepEqual(mqa.parameterShapes()['blocks.0.attn.in_proj_weight'], [24, 16]);
    assert.deepEqual(plain.parameterShapes()['blocks.0.attn.in_proj_weight'], [48, 16]);
    assert.deepEqual(g.hookNames(), plain.hookNames());
    const { hooks } = g.forward(TOKENS, { hooks: ['blocks.0.attn.hook_q', 'blocks.0.attn.hook_k', 'blocks.1.attn.hook_v', 'blocks.1.attn.hook_pattern'] });
    assert.deepEqual(hooks['blocks.0.attn.hook_q'].shape, [2, 4, 7, 4]);
    assert.deepEqual(hooks['blocks.0.attn.hook_k'].shape, [2, 2, 7, 4]);
    assert.deepEqual(hooks['blocks.1.attn.hook_v'].shape, [2, 2, 7, 4]);
    assert.deepEqual(hooks['blocks.1.attn.hook_pattern'].shape, [2, 4, 7, 7]);
    // Generation: each step's logits are a full recomputation's (the KV cache holds 2 heads).
    const { tokens, logits } = g.generate(TOKENS, { maxNewTokens: 3, logits: true });
    const whole = g.forward({ data: tokens.data, shape: tokens.shape }).logits;
    for (let b = 0; b < 2; b++) {
      for (let s = 0; s < 3; s++) {
        const at = ((b * 10) + 7 + s - 1) * 11, from = (b * 3 + s) * 11;
        assert.deepEqual(logits.data.subarray(from, from + 11), whole.data.subarray(at, at + 11), `step ${s}`);
      }
    }
    // Gradients: one per parameter, of its shape; a few AdamW steps lower the loss.
    const { loss, grads } = g.backward(TOKENS, TARGETS);
    for (const [k, shape] of Object.entries(shapes)) assert.deepEqual(grads[k].shape, shape, k);
    assert.ok(grads['blocks.0.attn.in_proj_weight'].data.some((x) => x !== 0));
    g.setOptimizer({ type: 'adamw', lr: 0.01 });
    let last;
    for (let i = 0; i < 15; i++) last = g.trainStep(TOKENS, TARGETS).loss;
    assert.ok(last < loss, `${last} < ${loss}`);
    expectError(() => hs.createTransformer({ ...T_CONFIG, nKvHeads: 3 }), 'INVALID_ARGUMENT',
      'config.nKvHeads: nHeads (4) must be divisible by nKvHeads (3)');
    expectError(() => g.loadStateDict({ 'blocks.0.attn.in_proj_weight': tensor([48, 16]) }, { strict: false }),
      'SHAPE_MISMATCH', "stateDict['blocks.0.attn.in_proj_weight']", '[32, 16]');
  } finally {
    plain.dispose();
    g.dispose();
    mqa.dispose();
  }
});

test('the case parsers read num_kv_heads and n_kv_heads', () => {
  const golden = (path) => JSON.parse(readFileSync(new URL(`../golden/${path}`, import.meta.url), 'utf8'));
  const mha = parseCase(golden('gqa-g3-h6-cross-kdim-vdim-bool-3d.json'));
  assert.equal(mha.config.numKvHeads, 3);
  const r = hs.checkCase(golden('mqa-g1-h4-causal-batch-first.json'), hs.runCase(golden('mqa-g1-h4-causal-batch-first.json')));
  assert.ok(r.ok, r.detail);
  const plain = parseCase(golden('unbatched-self.json'));
  assert.equal(plain.config.numKvHeads, undefined, 'absent (null: num_heads)');
  const t = parseCase(golden('transformer/pre-learned-gelu-mlp-l2-h4-kv2-b2.json'));
  assert.equal(t.config.nKvHeads, 2);
  const doc = golden('gqa-g2-h4-batched-self.json');
  doc.config.num_kv_heads = 3;
  expectError(() => parseCase(doc), 'PARSE_ERROR', 'config.num_kv_heads: num_heads (4) must be divisible by num_kv_heads (3)');
});

test('through a Worker: the same bits', async () => {
  const config = { embedDim: 8, numHeads: 4, numKvHeads: 2, batchFirst: true };
  const { sd } = grouped(config);
  const x = tensor([2, 6, 8]);
  const local = hs.createMultiheadAttention(config);
  const m = await remote.createMultiheadAttention(config);
  try {
    assert.deepEqual(m.config, local.config);
    local.loadStateDict(sd);
    await m.loadStateDict(sd);
    const want = local.trace(x, x, x, { isCausal: true });
    const got = await m.trace(x, x, x, { isCausal: true });
    for (const k of ['q', 'k', 'v', 'weights', 'output']) assertSameBits(got[k], want[k], k);
  } finally {
    local.dispose();
    await m.dispose();
  }
  const t = await remote.createTransformer({ ...T_CONFIG, nKvHeads: 1, seed: 7 });
  const lt = hs.createTransformer({ ...T_CONFIG, nKvHeads: 1, seed: 7 });
  try {
    assertSameResultBits(await t.generate(TOKENS, { maxNewTokens: 2 }), lt.generate(TOKENS, { maxNewTokens: 2 }), 'generate');
    const a = await t.backward(TOKENS, TARGETS);
    const b = lt.backward(TOKENS, TARGETS);
    assertSameResultBits(a.grads, b.grads, 'grads');
  } finally {
    await t.dispose();
    lt.dispose();
  }
});
