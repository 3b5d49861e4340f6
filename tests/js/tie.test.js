// tieEmbeddings through WebAssembly: unembed.weight is tok_embed.weight, one tensor, as the
// reference module ties them (the goldens of tests/golden/transformer/ and tests/golden/train/
// with tie_embeddings run in transformer.test.js and train.test.js). Here: the config and the
// state_dict's two keys, loading (either key; both must agree, all or nothing), logits and
// gradients against an untied twin holding the same values, one gradient per tensor, the case
// parsers.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { init } from '../../web/lib/index.js';
import { parseCase } from '../../web/lib/case.js';
import { expectError } from './helpers.js';
import { assertSameBits, assertSameResultBits } from './same-bits.js';

const hs = await init({ simd: 'simd128' });
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const CONFIG = { vocabSize: 11, maxLen: 8, dModel: 8, nLayers: 2, nHeads: 2, dMlp: 16 };
const TOKENS = [[3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 5, 8, 9, 7]];
const TARGETS = [[1, 4, 1, 5, 9, 2, -100], [5, 3, 5, 8, 9, 7, -100]];
const vector = (data) => ({ shape: [data.length], data });

function withModels(configs, fn) {
  const models = configs.map((c) => hs.createTransformer(c));
  try {
    return fn(...models);
  } finally {
    for (const m of models) m.dispose();
  }
}

test('the config and the state_dict: one tensor under both keys, as torch\'s state_dict()', () => {
  withModels([{ ...CONFIG, tieEmbeddings: true, seed: 3 }, { ...CONFIG, seed: 3 }], (tied, untied) => {
    assert.equal(tied.config.tieEmbeddings, true);
    assert.equal(untied.config.tieEmbeddings, false, 'the default');
    assert.deepEqual(tied.parameterShapes(), untied.parameterShapes());
    const sd = tied.stateDict();
    assert.deepEqual(sd['unembed.weight'].data, sd['tok_embed.weight'].data);
    // A seed gives the tensor tok_embed.weight's initialisation; every other entry is untied's.
    const other = untied.stateDict();
    for (const k of Object.keys(sd)) {
      assert.deepEqual(sd[k].data, other[k === 'unembed.weight' ? 'tok_embed.weight' : k].data, k);
    }
  });
});

test('logits and gradients are an untied twin\'s holding the same values, its two gradients summed', () => {
  withModels([{ ...CONFIG, tieEmbeddings: true, seed: 5 }, { ...CONFIG, seed: null }], (tied, twin) => {
    twin.loadStateDict(tied.stateDict());
    assertSameResultBits(tied.forward(TOKENS).logits, twin.forward(TOKENS).logits, 'logits');
    const a = tied.backward(TOKENS, TARGETS);
    const b = twin.backward(TOKENS, TARGETS);
    assert.ok(Object.is(a.loss, b.loss));
    assert.deepEqual(Object.keys(a.grads), Object.keys(b.grads).filter((k) => k !== 'unembed.weight'),
      'named_parameters(): the tied tensor once, as tok_embed.weight');
    for (const k of Object.keys(a.grads)) {
      if (k !== 'tok_embed.weight') assertSameResultBits(a.grads[k], b.grads[k], k);
    }
    const sum = b.grads['tok_embed.weight'].data.map((g, i) => g + b.grads['unembed.weight'].data[i]);
    assertSameBits(vector(a.grads['tok_embed.weight'].data), vector(sum), 'the sum of both uses');

    // Setting tok_embed.weight alone moves the unembedding too.
    const w = tied.stateDict()['tok_embed.weight'];
    w.data.forEach((x, i) => { w.data[i] = 0.25 - 0.5 * x; });
    tied.loadStateDict({ 'tok_embed.weight': w }, { strict: false });
    twin.loadStateDict({ 'tok_embed.weight': w, 'unembed.weight': w }, { strict: false });
    assert.deepEqual(tied.stateDict()['unembed.weight'].data, w.data);
    assertSameResultBits(tied.forward(TOKENS).logits, twin.forward(TOKENS).logits, 'logits after the load');
  });
});

test('a state_dict whose two keys differ is refused naming the key, and nothing is loaded', () => {
  withModels([{ ...CONFIG, tieEmbeddings: true, seed: 7 }], (m) => {
    const before = m.stateDict();
    const sd = m.stateDict();
    sd['tok_embed.weight'].data.fill(0.5);
    sd['unembed.weight'].data.fill(0.5);
    sd['unembed.weight'].data[2 * 8 + 3] = 0.25;
    const e = expectError(() => m.loadStateDict(sd), 'INVALID_ARGUMENT',
      "stateDict['unembed.weight']: differs from stateDict['tok_embed.weight'] at [2, 3]: 0.25 against 0.5",
      'with tieEmbeddings the two keys name one tensor');
    assert.equal(e.argument, 'stateDict');
    assertSameResultBits(m.stateDict(), before, 'all or nothing');
    sd['unembed.weight'].data[2 * 8 + 3] = 0.5;
    m.loadStateDict(sd);
    assert.equal(m.stateDict()['unembed.weight'].data[0], 0.5);
    // Either key alone loads the tensor (a strict load counts it as loaded).
    const { 'tok_embed.weight': _, ...withoutTok } = before;
    m.loadStateDict(withoutTok);
    assertSameResultBits(m.stateDict(), before, 'loaded from unembed.weight');
  });
});

test('trainStep steps the one tensor once (SGD: p - lr g, with g the summed gradient)', () => {
  withModels([{ ...CONFIG, tieEmbeddings: true, seed: 9 }], (m) => {
    const p = m.stateDict()['tok_embed.weight'].data;
    const g = m.backward(TOKENS, TARGETS).grads['tok_embed.weight'].data;
    m.setOptimizer({ type: 'sgd', lr: 0.125 });  // a power of 2: p - lr g is one rounding in float
    assert.equal(m.trainStep(TOKENS, TARGETS).stepped, true);
    const after = m.stateDict();
    assert.deepEqual(after['unembed.weight'].data, after['tok_embed.weight'].data);
    assertSameBits(vector(after['tok_embed.weight'].data), vector(p.map((x, i) => x - 0.125 * g[i])), 'one step');
  });
});

test('the JS case parser takes tie_embeddings from the schema (schema.test.js probes both parsers)', () => {
  const doc = { kind: 'transformer', config: { vocab_size: 5, max_len: 4, d_model: 4, tie_embeddings: true },
    state_dict: {}, inputs: { tokens: [0, 1] } };
  assert.equal(parseCase(doc).config.tieEmbeddings, true);
  assert.equal(parseCase({ ...doc, config: { ...doc.config, tie_embeddings: null } }).config.tieEmbeddings, false);
  expectError(() => parseCase({ ...doc, config: { ...doc.config, tie_embeddings: 1 } }), 'PARSE_ERROR',
    'config.tie_embeddings: expected true or false, got number 1');
});
