// The causal experiments through the package (Transformer.logitLens, attentionRollout,
// scoreContributions, activationPatching): PyTorch's float64 numbers
// (tests/golden/experiments, tools/make_experiments_golden.py) within 1e-5 in WebAssembly; the
// identities their definitions give; unbatched tokens; the same results through initWorker();
// and bad arguments refused naming them, leaving the model working.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { init } from '../../web/lib/index.js';
import { initWorker } from '../../web/lib/worker-client.js';
import { expectError } from './helpers.js';

const hs = await init({ simd: 'simd128' });
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const dir = new URL('../golden/experiments/', import.meta.url);
const goldens = readdirSync(dir).filter((f) => f.endsWith('.json')).sort()
  .map((f) => ({ file: f, doc: JSON.parse(readFileSync(new URL(f, dir), 'utf8')) }));

const camel = (k) => k.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const flat = (a) => (Array.isArray(a) ? a.flatMap(flat) : [a === '-inf' ? -Infinity : a === 'inf' ? Infinity : a]);

function modelOf(doc) {
  const config = Object.fromEntries(Object.entries(doc.config).map(([k, v]) => [camel(k), v]));
  const m = hs.createTransformer({ ...config, seed: null });
  m.loadStateDict(doc.state_dict);
  return m;
}

// The largest error relative to max(1, |want|); infinities equal. Asserts it is within 1e-5.
function close(got, wantNested, what) {
  const want = flat(wantNested);
  assert.equal(got.length, want.length, `${what}: length`);
  let worst = 0;
  for (let i = 0; i < want.length; i++) {
    if (!Number.isFinite(want[i])) {
      assert.equal(got[i], want[i], `${what}[${i}]`);
      continue;
    }
    worst = Math.max(worst, Math.abs(got[i] - want[i]) / Math.max(1, Math.abs(want[i])));
  }
  assert.ok(worst <= 1e-5, `${what}: worst relative error ${worst}`);
  return worst;
}

test('every experiment agrees with PyTorch in float64 within 1e-5, in WebAssembly', () => {
  assert.ok(goldens.length >= 4, 'tests/golden/experiments (tools/make_experiments_golden.py)');
  const worst = { lens: 0, rollout: 0, terms: 0, patching: 0 };
  for (const { file, doc } of goldens) {
    const m = modelOf(doc);
    try {
      const want = doc.expected;
      const L = doc.config.n_layers, B = doc.clean.length, T = doc.clean[0].length;
      const { logits } = m.logitLens(doc.clean);
      assert.deepEqual(logits.shape, [L + 1, B, T, doc.config.vocab_size], file);
      worst.lens = Math.max(worst.lens, close(logits.data, want.logit_lens, `${file} lens`));
      const { rollout } = m.attentionRollout(doc.clean);
      assert.deepEqual(rollout.shape, [L, B, T, T]);
      worst.rollout = Math.max(worst.rollout, close(rollout.data, want.rollout, `${file} rollout`));
      for (const q of want.scores) {
        const r = m.scoreContributions(doc.clean, { layer: q.layer, head: q.head, batch: q.batch, position: q.position });
        assert.deepEqual(r.terms.shape, [T, doc.config.d_model / doc.config.n_heads]);
        worst.terms = Math.max(worst.terms, close(r.terms.data, q.terms, `${file} terms`));
        close(r.dot.data, q.dot, `${file} dot`);
        close(r.bias.data, q.bias, `${file} bias`);
        close(r.score.data, q.score, `${file} score`);
      }
      for (const site of ['heads', 'positions']) {
        const p = m.activationPatching(doc.clean, doc.corrupted, doc.targets, { site });
        assert.equal(p.site, site);
        assert.deepEqual(p.loss.shape, [L, site === 'heads' ? doc.config.n_heads : T]);
        worst.patching = Math.max(worst.patching, close(p.loss.data, want.patching[site].loss, `${file} ${site} loss`),
          close(p.logit.data, want.patching[site].logit, `${file} ${site} logit`));
        close([p.clean.loss, p.clean.logit, p.corrupted.loss, p.corrupted.logit],
          [want.patching.clean.loss, want.patching.clean.logit, want.patching.corrupted.loss, want.patching.corrupted.logit],
          `${file} baselines`);
      }
    } finally {
      m.dispose();
    }
  }
  console.log(`experiments goldens: ${goldens.length} models; worst relative errors ` +
    Object.entries(worst).map(([k, v]) => `${k} ${v.toExponential(1)}`).join(', '));
});

const CONFIG = { vocabSize: 16, maxLen: 12, dModel: 16, nLayers: 2, nHeads: 4, seed: 3 };
const TOKENS = [3, 1, 4, 1, 5, 9, 2, 6];
const CORRUPTED = [3, 1, 7, 1, 5, 0, 2, 6];
const TARGETS = [1, 4, 1, 5, 9, 2, 6, -100];

test('identities: the last lens stage is forward(), rollout rows sum to 1, terms sum to the score, patching a prompt into itself changes nothing', () => {
  const m = hs.createTransformer(CONFIG);
  try {
    const { logits } = m.logitLens(TOKENS);
    assert.deepEqual(logits.shape, [3, 8, 16], 'unbatched tokens: no batch axis');
    const f = m.forward(TOKENS).logits.data;
    assert.deepEqual(logits.data.subarray(2 * 8 * 16), f, 'the last stage is forward() bit for bit');
    assert.notDeepEqual(logits.data.subarray(0, 8 * 16), f, 'the embeddings read out differently');
    const { rollout } = m.attentionRollout(TOKENS);
    assert.deepEqual(rollout.shape, [2, 8, 8]);
    for (let r = 0; r < 16; r++) {
      const row = rollout.data.subarray(r * 8, r * 8 + 8);
      assert.ok(Math.abs(row.reduce((a, b) => a + b, 0) - 1) < 1e-6, `row ${r} sums to 1`);
      assert.ok(row.slice((r % 8) + 1).every((v) => v === 0), 'causal: nothing from later positions');
    }
    const scores = m.forward(TOKENS, { hooks: ['blocks.1.attn.hook_attn_scores'] }).hooks['blocks.1.attn.hook_attn_scores'];
    const s = m.scoreContributions(TOKENS, { layer: 1, head: 2, position: 5 });
    for (let j = 0; j < 8; j++) {
      const want = scores.data[(2 * 8 + 5) * 8 + j];
      assert.equal(s.score.data[j], want);
      if (j > 5) {
        assert.equal(s.bias.data[j], -Infinity, 'a later key is masked');
      } else {
        const sum = Array.from(s.terms.data.subarray(j * 4, j * 4 + 4)).reduce((a, b) => a + b, 0);
        assert.ok(Math.abs(sum - want) < 1e-5 && Math.abs(s.dot.data[j] - want) < 1e-5, `key ${j}`);
      }
    }
    const same = m.activationPatching(TOKENS, TOKENS, TARGETS, { site: 'positions' });
    assert.deepEqual(same.loss.shape, [2, 8]);
    assert.equal(same.clean.loss, same.corrupted.loss);
    assert.ok(same.loss.data.every((v) => v === Math.fround(same.clean.loss)), 'patching a run with its own activations');
    const p = m.activationPatching(TOKENS, CORRUPTED, TARGETS);
    assert.deepEqual(p.loss.shape, [2, 4]);
    assert.notEqual(p.clean.loss, p.corrupted.loss);
    // Patching position 2 (the first corrupted one) into the stream entering block 0 restores
    // the clean run at every position before 5, the next corrupted one.
    const q = m.activationPatching(TOKENS, CORRUPTED, TARGETS, { site: 'positions' });
    assert.ok(q.loss.data.slice(0, 8).some((v) => v !== Math.fround(q.corrupted.loss)), 'some position matters');
  } finally {
    m.dispose();
  }
});

test('bad arguments are refused naming them, and the model keeps working', () => {
  const m = hs.createTransformer(CONFIG);
  try {
    expectError(() => m.scoreContributions(TOKENS), 'INVALID_ARGUMENT', 'options', 'layer, head, position');
    expectError(() => m.scoreContributions(TOKENS, { layer: 0, head: 0 }), 'INVALID_ARGUMENT', 'options.position', 'got null');
    expectError(() => m.scoreContributions(TOKENS, { layer: 2, head: 0, position: 0 }), 'INVALID_ARGUMENT', 'options.layer', '[0, 2)');
    expectError(() => m.scoreContributions(TOKENS, { layer: 0, head: 4, position: 0 }), 'INVALID_ARGUMENT', 'options.head', '[0, 4)');
    expectError(() => m.scoreContributions(TOKENS, { layer: 0, head: 0, position: 8 }), 'INVALID_ARGUMENT', 'options.position', '[0, 8)');
    expectError(() => m.scoreContributions(TOKENS, { layer: 0, head: 0, position: 0, batch: 1 }), 'INVALID_ARGUMENT', 'options.batch', '[0, 1)');
    expectError(() => m.scoreContributions(TOKENS, { layer: 0.5, head: 0, position: 0 }), 'INVALID_ARGUMENT', 'options.layer', 'integer');
    expectError(() => m.scoreContributions(TOKENS, { layer: 0, head: 0, position: 0, query: 1 }), 'INVALID_ARGUMENT', 'query');
    expectError(() => m.logitLens([1, 99]), 'INVALID_ARGUMENT', 'tokens');
    expectError(() => m.logitLens(TOKENS, { hooks: [] }), 'INVALID_ARGUMENT', 'hooks');
    expectError(() => m.attentionRollout(TOKENS, { headGates: [[1, 1]] }), 'SHAPE_MISMATCH', 'options.headGates');
    expectError(() => m.activationPatching(TOKENS, CORRUPTED.slice(1), TARGETS), 'SHAPE_MISMATCH', 'corrupted', '[1, 8]');
    expectError(() => m.activationPatching(TOKENS, CORRUPTED, TARGETS.slice(1)), 'SHAPE_MISMATCH', 'targets');
    expectError(() => m.activationPatching(TOKENS, CORRUPTED, TARGETS.map(() => -100)), 'INVALID_ARGUMENT', 'targets');
    expectError(() => m.activationPatching(TOKENS, CORRUPTED, TARGETS, { site: 'layers' }), 'INVALID_ARGUMENT', 'options.site', "'heads' or 'positions'");
    expectError(() => m.activationPatching(TOKENS, [3, 1, 7, 1, 5, 0, 2, 16], TARGETS), 'INVALID_ARGUMENT', 'tokens');
    // A getter that disposes the model mid-call: DISPOSED, nothing computed on a dead handle.
    const hostile = { layer: 0, head: 0, get position() { m.dispose(); return 0; } };
    expectError(() => m.scoreContributions(TOKENS, hostile), 'DISPOSED');
  } finally {
    m.dispose();
  }
  const again = hs.createTransformer(CONFIG);
  try {
    assert.deepEqual(again.logitLens(TOKENS).logits.shape, [3, 8, 16]);
  } finally {
    again.dispose();
  }
});

test('the experiments through initWorker() give the calling thread\'s numbers', async () => {
  const remote = await initWorker();
  try {
    const far = await remote.createTransformer(CONFIG);
    const near = hs.createTransformer(CONFIG);
    try {
      assert.deepEqual((await far.logitLens(TOKENS)).logits.data, near.logitLens(TOKENS).logits.data);
      assert.deepEqual((await far.attentionRollout(TOKENS)).rollout.data, near.attentionRollout(TOKENS).rollout.data);
      const opts = { layer: 1, head: 3, position: 7 };
      assert.deepEqual((await far.scoreContributions(TOKENS, opts)).terms.data, near.scoreContributions(TOKENS, opts).terms.data);
      const p = await far.activationPatching(TOKENS, CORRUPTED, TARGETS);
      assert.deepEqual(p.loss.data, near.activationPatching(TOKENS, CORRUPTED, TARGETS).loss.data);
    } finally {
      near.dispose();
      await far.dispose();
    }
  } finally {
    await remote.terminate();
  }
});
