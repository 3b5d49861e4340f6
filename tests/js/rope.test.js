// Rotary position embeddings through WebAssembly: the Transformer's positions 'rope' with
// ropeLayout, ropeBase and ropeFraction, and MultiheadAttention's ropeDims. The PyTorch goldens with them (tests/golden/transformer/
// *-rope-*, tests/golden/train/*-rope-*) run in case-transformer.test.js and train.test.js with
// every other golden; here their worst errors are reported apart, and what they cannot show
// through the public API: the config and its hooks; the two layouts are one model up to a
// permutation of each head's W_q / W_k rows (and differ without it); the scores depend on the
// relative position only; generation continues the positions through the KV cache (a full
// forward's bits, its greedy tokens); the same bits through a Worker; and an induction head formed
// with RoPE through the public API (fixed seeds, both layouts), as alibi.test.js does for ALiBi.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { init } from '../../web/lib/index.js';
import { initWorker } from '../../web/lib/worker-client.js';
import { assertSameResultBits } from './same-bits.js';
import { makeTask } from '../../web/lib/tasks.js';
import { configOf, expectInductionForms } from './transformer-helpers.js';

const hs = await init({ simd: 'simd128' });
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const base = { vocabSize: 11, maxLen: 12, dModel: 16, nLayers: 2, nHeads: 2, dMlp: 16, positions: 'rope' };
const tokens = [[1, 5, 2, 8, 8, 3, 0, 10, 4, 9, 9, 1], [2, 7, 3, 3, 6, 5, 4, 4, 1, 0, 10, 2]];

function withModels(configs, fn) {
  const ms = [];
  try {
    for (const c of configs) ms.push(hs.createTransformer(c));
    return fn(...ms);
  } finally {
    for (const m of ms) m.dispose();
  }
}

// max |got - want| / max |want|
function relative(got, want) {
  let err = 0;
  let scale = 0;
  for (let i = 0; i < want.length; i++) {
    if (!Number.isFinite(want[i])) continue;
    err = Math.max(err, Math.abs(got[i] - want[i]));
    scale = Math.max(scale, Math.abs(want[i]));
  }
  return scale > 0 ? err / scale : err;
}

test('positions rope: the config, its state_dict (no pos_embed) and its hooks (hook_rot_q / hook_rot_k after hook_v)', () => {
  withModels([{ ...base, nKvHeads: 1, ropeLayout: 'interleaved', ropeFraction: 0.5 }], (m) => {
    assert.equal(m.config.positions, 'rope');
    assert.deepEqual([m.config.ropeLayout, m.config.ropeBase, m.config.ropeFraction], ['interleaved', 10000, 0.5]);
    assert.ok(!('pos_embed.weight' in m.parameterShapes()));
    const names = m.hookNames();
    assert.ok(!names.includes('hook_pos_embed'));
    const at = (n) => names.indexOf(n);
    assert.equal(at('blocks.0.attn.hook_rot_q'), at('blocks.0.attn.hook_v') + 1);
    assert.equal(at('blocks.0.attn.hook_rot_k'), at('blocks.0.attn.hook_v') + 2);
    const { hooks } = m.forward(tokens, { hooks: ['blocks.1.attn.hook_q', 'blocks.1.attn.hook_rot_q', 'blocks.1.attn.hook_rot_k'] });
    assert.deepEqual(hooks['blocks.1.attn.hook_rot_q'].shape, [2, 2, 12, 8]);
    assert.deepEqual(hooks['blocks.1.attn.hook_rot_k'].shape, [2, 1, 12, 8]);  // the G = 1 K/V head
    // Position 0 does not turn; the pass-through dims (4 .. 7 of each head) never do.
    const q = hooks['blocks.1.attn.hook_q'].data;
    const rq = hooks['blocks.1.attn.hook_rot_q'].data;
    for (let i = 0; i < q.length; i += 8) {
      const t = (i / 8) % 12;
      for (let d = 0; d < 8; d++) {
        if (t === 0 || d >= 4) assert.equal(rq[i + d], q[i + d], `row ${i / 8} dim ${d}`);
      }
    }
  });
  withModels([{ ...base, positions: 'learned' }], (m) => {
    assert.ok(!m.hookNames().some((n) => n.includes('hook_rot_')));
    assert.deepEqual([m.config.ropeLayout, m.config.ropeBase, m.config.ropeFraction], ['half', 10000, 1]);
  });
});

test('the layouts are one model up to a permutation of each head\'s W_q and W_k rows, and differ without it', () => {
  for (const ropeFraction of [1, 0.5]) {
    for (const nKvHeads of [null, 1]) {
      const what = `fraction ${ropeFraction} kv ${nKvHeads}`;
      const ci = { ...base, ropeLayout: 'interleaved', ropeFraction, nKvHeads, seed: 11 };
      const ch = { ...base, ropeLayout: 'half', ropeFraction, nKvHeads, seed: null };
      withModels([ci, ch, ch], (inter, half, same) => {
        const D = 16, dh = 8, r = 2 * Math.floor(ropeFraction * dh / 2), G = nKvHeads ?? 2;
        // Half's dim j of a head reads interleaved's dim src[j]: (i, i + r/2) <- (2i, 2i + 1).
        const src = Array.from({ length: dh }, (_, j) => (j >= r ? j : j < r / 2 ? 2 * j : 2 * (j - r / 2) + 1));
        const sd = inter.stateDict();
        const permuted = {};
        for (const [k, t] of Object.entries(sd)) {
          if (!k.includes('attn.in_proj_')) {
            permuted[k] = t;
            continue;
          }
          const cols = t.shape.length === 2 ? t.shape[1] : 1;
          const data = Float32Array.from(t.data);
          for (let row = 0; row < D + G * dh; row++) {
            const head0 = row < D ? Math.floor(row / dh) * dh : D + Math.floor((row - D) / dh) * dh;
            const from = head0 + src[row - head0];
            data.set(t.data.subarray(from * cols, (from + 1) * cols), row * cols);
          }
          permuted[k] = { data, shape: t.shape };
        }
        half.loadStateDict(permuted);
        same.loadStateDict(sd);
        const a = inter.forward(tokens).logits.data;
        const b = half.forward(tokens).logits.data;
        const c = same.forward(tokens).logits.data;
        assert.ok(relative(b, a) <= 1e-5, `${what}: permuted ${relative(b, a)}`);
        assert.ok(relative(c, a) >= 1e-2, `${what}: unpermuted ${relative(c, a)}`);
      });
    }
  }
});

test('RoPE\'s relative positions: query m\'s score for key n is that of m + k for n + k (same tokens), within 1e-5', () => {
  const periodic = [4, 9, 1, 7, 4, 9, 1, 7, 4, 9, 1, 7];  // period 4: layer 0's input repeats
  for (const ropeLayout of ['half', 'interleaved']) {
    for (const causal of [true, false]) {
      const what = `${ropeLayout} causal ${causal}`;
      const scoresOf = (config) => withModels([config], (m) =>
        m.forward([periodic], { hooks: ['blocks.0.attn.hook_attn_scores'] }).hooks['blocks.0.attn.hook_attn_scores'].data);
      const s = scoresOf({ ...base, ropeLayout, ropeBase: 100, causal, seed: 5 });
      const learned = scoresOf({ ...base, positions: 'learned', causal, seed: 5 });
      let scale = 0;
      for (const x of s) if (Number.isFinite(x)) scale = Math.max(scale, Math.abs(x));
      let err = 0;
      let spread = 0;
      let lerr = 0;
      const at = (h, m, n) => (h * 12 + m) * 12 + n;
      for (let h = 0; h < 2; h++) {
        for (let m = 0; m + 4 < 12; m++) {
          for (let n = 0; n + 4 < 12; n++) {
            if (causal && n > m) continue;
            err = Math.max(err, Math.abs(s[at(h, m, n)] - s[at(h, m + 4, n + 4)]));
            lerr = Math.max(lerr, Math.abs(learned[at(h, m, n)] - learned[at(h, m + 4, n + 4)]));
            if (!causal || n + 4 <= m) spread = Math.max(spread, Math.abs(s[at(h, m, n)] - s[at(h, m, n + 4)]));
          }
        }
      }
      assert.ok(err / scale <= 1e-5, `${what}: ${err / scale}`);
      assert.ok(spread / scale >= 1e-2, `${what}: the same tokens at another distance score the same (${spread / scale})`);
      assert.ok(lerr / scale >= 1e-3, `${what}: learned positions keep it too (${lerr / scale})`);
    }
  }
});

test('generate continues the positions through the KV cache: each step is a full forward\'s bits and its argmax', () => {
  for (const ropeLayout of ['half', 'interleaved']) {
    for (const nKvHeads of [null, 1]) {
      withModels([{ ...base, ropeLayout, ropeFraction: 0.5, nKvHeads, seed: 23 }], (m) => {
        const prompt = [[1, 5, 2], [8, 0, 3]];
        const n = 9;
        const V = 11;
        const g = m.generate(prompt, { maxNewTokens: n, logits: true });
        assert.deepEqual(g.tokens.shape, [2, 12]);
        for (let s = 0; s < n; s++) {
          const seqs = [0, 1].map((b) => Array.from(g.tokens.data.subarray(b * 12, b * 12 + 3 + s)));
          const { logits } = m.forward(seqs);
          const T = 3 + s;
          for (let b = 0; b < 2; b++) {
            const row = logits.data.subarray((b * T + T - 1) * V, (b * T + T) * V);
            const kept = g.logits.data.subarray((b * n + s) * V, (b * n + s + 1) * V);
            assert.deepEqual(new Uint32Array(kept.slice().buffer), new Uint32Array(row.slice().buffer), `${ropeLayout} kv ${nKvHeads} step ${s} sequence ${b}`);
            let best = 0;
            for (let v = 1; v < V; v++) if (row[v] > row[best]) best = v;
            assert.equal(g.tokens.data[b * 12 + T], best);
          }
        }
      });
    }
  }
});

test('a Worker computes the same bits (forward with the turned hooks, backward)', async () => {
  const remote = await initWorker(undefined, { simd: 'simd128' });
  try {
    const config = { ...base, ropeLayout: 'interleaved', ropeFraction: 0.75, nKvHeads: 1, seed: 3 };
    const options = { hooks: ['blocks.0.attn.hook_rot_q', 'blocks.1.attn.hook_rot_k', 'logits'] };
    const targets = tokens.map((row) => row.map((t) => (t + 1) % 11));
    const local = withModels([config], (m) => ({ f: m.forward(tokens, options), b: m.backward(tokens, targets) }));
    const m = await remote.createTransformer(config);
    assertSameResultBits(await m.forward(tokens, options), local.f, 'forward');
    assertSameResultBits(await m.backward(tokens, targets), local.b, 'backward');
    await m.dispose();
    assert.equal(await remote.liveHandles(), 0);
  } finally {
    await remote.terminate();
  }
});

test('MultiheadAttention ropeDims: the rules, trace()\'s rotQ / rotK, the MHA rope goldens', () => {
  assert.throws(() => hs.createMultiheadAttention({ embedDim: 8, numHeads: 2, ropeDims: 3 }),
    { message: 'config.ropeDims: expected 0 (no rotation) or an even number of dims up to the head dim embedDim / numHeads = 4, got 3' });
  assert.throws(() => hs.createMultiheadAttention({ embedDim: 8, numHeads: 2, ropeLayout: 'interleaved' }),
    { message: 'config.ropeLayout: applies only with ropeDims > 0 (ropeDims is 0): leave it at its default, "half", got "interleaved"' });
  const mha = hs.createMultiheadAttention({ embedDim: 8, numHeads: 2, ropeDims: 2, ropeLayout: 'interleaved', batchFirst: true });
  const plain = hs.createMultiheadAttention({ embedDim: 8, numHeads: 2, batchFirst: true });
  try {
    const sd = {};
    for (const [k, shape] of Object.entries(mha.parameterShapes())) {
      sd[k] = { data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, (_, i) => Math.sin(i * 1.7)), shape };
    }
    mha.loadStateDict(sd);
    plain.loadStateDict(sd);
    const x = { data: Float32Array.from({ length: 2 * 5 * 8 }, (_, i) => Math.cos(i * 0.3)), shape: [2, 5, 8] };
    const t = mha.trace(x, x, x, { isCausal: true });
    const p = plain.trace(x, x, x, { isCausal: true });
    assert.deepEqual(Object.keys(p), ['q', 'k', 'v', 'scores', 'weights', 'headOutputs', 'concat', 'output']);
    assert.deepEqual(Object.keys(t), [...Object.keys(p), 'rotQ', 'rotK']);
    assertSameResultBits(t.q, p.q, 'q: the projection');
    assert.deepEqual(t.rotQ.shape, [2, 2, 5, 4]);
    // Position 0 and dims 2, 3 (beyond rope_dims) do not turn; the others do.
    let moved = 0;
    for (let i = 0; i < t.q.data.length; i++) {
      const row = Math.floor(i / 4) % 5;
      const dim = i % 4;
      if (row === 0 || dim >= 2) assert.equal(t.rotQ.data[i], t.q.data[i]);
      else moved = Math.max(moved, Math.abs(t.rotQ.data[i] - t.q.data[i]));
    }
    assert.ok(moved > 1e-3);
    assertSameResultBits(mha.forward(x, x, x, { isCausal: true, needWeights: false }).output, t.output, 'forward = trace');
  } finally {
    mha.dispose();
    plain.dispose();
  }
  const dir = new URL('../golden/', import.meta.url);
  const files = readdirSync(dir).filter((f) => f.startsWith('rope-')).sort();
  assert.ok(files.length >= 5);
  let worst = 0;
  for (const f of files) {
    const doc = JSON.parse(readFileSync(new URL(f, dir), 'utf8'));
    const check = hs.checkCase(doc, hs.runCase(doc));
    assert.ok(check.ok, `${f}: ${check.detail}`);
    worst = Math.max(worst, check.maxRelativeError);
  }
  console.log(`# MultiheadAttention rope goldens in WebAssembly: ${files.length}, worst relative error ${worst.toExponential(2)}`);
});

test('the rope goldens in WebAssembly: forward (runCase) within 1e-4 of PyTorch, gradients within 1e-4', () => {
  const dir = new URL('../golden/transformer/', import.meta.url);
  const files = readdirSync(dir).filter((f) => f.includes('-rope-')).sort();
  assert.ok(files.length >= 14, `${files.length} rope forward goldens`);
  let worst = 0;
  let where = '';
  for (const f of files) {
    const doc = JSON.parse(readFileSync(new URL(f, dir), 'utf8'));
    const check = hs.checkCase(doc, hs.runCase(doc));
    assert.ok(check.ok, `${f}: ${check.detail}`);
    for (const t of check.tensors) {
      if (t.maxRelativeError > worst) [worst, where] = [t.maxRelativeError, `${f} ${t.name}`];
    }
  }
  const tdir = new URL('../golden/train/', import.meta.url);
  const tfiles = readdirSync(tdir).filter((f) => f.includes('-rope-')).sort();
  assert.ok(tfiles.length >= 4, `${tfiles.length} rope training goldens`);
  let gworst = 0;
  let gwhere = '';
  const flat = (x) => (Array.isArray(x) ? x.flat(Infinity) : [x]);
  for (const f of tfiles) {
    const doc = JSON.parse(readFileSync(new URL(f, tdir), 'utf8'));
    withModels([{ ...configOf(doc), seed: null }], (m) => {
      m.loadStateDict(doc.state_dict);
      const r = m.backward(doc.tokens, doc.targets, { headGates: doc.head_gates });
      const scale = Math.max(...Object.values(doc.grads).map((g) => Math.max(...flat(g).map(Math.abs))));
      for (const [name, want] of Object.entries(doc.grads)) {
        const w = flat(want);
        let e = 0;
        for (let i = 0; i < w.length; i++) e = Math.max(e, Math.abs(r.grads[name].data[i] - w[i]));
        const rel = e / Math.max(Math.max(...w.map(Math.abs)), 1e-3 * scale);
        assert.ok(rel <= 1e-4, `${f} grads['${name}']: ${rel}`);
        if (rel > gworst) [gworst, gwhere] = [rel, `${f} ${name}`];
      }
    });
  }
  console.log(`# rope goldens in WebAssembly: ${files.length} forward, worst relative error ${worst.toExponential(2)} ` +
    `(${where}); ${tfiles.length} training, worst gradient error ${gworst.toExponential(2)} (${gwhere})`);
});

// The induction lab's model with rotary positions instead of learned ones (alibi.test.js's recipe
// and check, transformer-helpers.js expectInductionForms): no position is added to the stream, so layer
// 0's previous-token head must come from the turn of q and k alone.
for (const ropeLayout of ['half', 'interleaved']) {
  test(`induction with RoPE (${ropeLayout}): a layer-1 induction head forms and the second half's loss falls, fixed seeds`,
    { timeout: 300_000 }, (t) => {
      const m = hs.createTransformer({ vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 4, dMlp: 0, norm: 'pre',
        positions: 'rope', ropeLayout, seed: 1 });
      try {
        expectInductionForms(t, m, makeTask, `RoPE, ${ropeLayout} layout`);
      } finally {
        m.dispose();
      }
    });
}
