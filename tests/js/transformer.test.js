// hs.createTransformer against the PyTorch golden cases of tests/golden/transformer/ (written by
// tools/make_transformer_golden.py from the reference module in float64): logits and every hook
// within 1e-4 relative through WebAssembly; seeded weights, stateDict round trips, errors that
// name the argument and leave the model working.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { init } from '../../web/lib/index.js';
import { expectError } from './helpers.js';

const hs = await init();
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const dir = new URL('../golden/transformer/', import.meta.url);
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
const load = (f) => JSON.parse(readFileSync(new URL(f, dir), 'utf8'));

const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
function configOf(doc) {
  return Object.fromEntries(Object.entries(doc.config).map(([k, v]) => [camel(k), v]));
}
const NON_FINITE = { inf: Infinity, '-inf': -Infinity, nan: NaN };
function flat(x) {
  const out = [];
  const walk = (v) => (Array.isArray(v) ? v.forEach(walk) : out.push(typeof v === 'string' ? NON_FINITE[v] : v));
  walk(x);
  return out;
}
function shapeOf(x) {
  const s = [];
  for (let v = x; Array.isArray(v); v = v[0]) s.push(v.length);
  return s;
}
// max |got - want| / max(1, max |want|) over the finite entries; non-finite ones must be equal.
function relativeError(got, want) {
  let scale = 1;
  for (const w of want) if (Number.isFinite(w)) scale = Math.max(scale, Math.abs(w));
  let worst = 0;
  want.forEach((w, i) => {
    if (!Number.isFinite(w)) {
      assert.ok(Object.is(got[i], w) || (Number.isNaN(w) && Number.isNaN(got[i])), `entry ${i}: ${got[i]} vs ${w}`);
    } else {
      worst = Math.max(worst, Math.abs(got[i] - w) / scale);
    }
  });
  return worst;
}

function model(doc) {
  const m = hs.createTransformer(configOf(doc));
  m.loadStateDict(doc.state_dict);
  return m;
}

test('every golden case: logits and every hook within 1e-4 of PyTorch', () => {
  assert.ok(files.length >= 30, 'tests/golden/transformer has the generated set');
  let worst = 0;
  let where = '';
  for (const f of files) {
    const doc = load(f);
    const m = model(doc);
    try {
      const hooks = Object.keys(doc.expected.hooks ?? {});
      const options = { hooks };
      if (doc.inputs.head_gates) options.headGates = doc.inputs.head_gates;
      const r = m.forward(doc.inputs.tokens, options);
      assert.deepEqual(r.logits.shape, shapeOf(doc.expected.logits), `${f} logits shape`);
      const check = (name, t, want) => {
        assert.deepEqual(t.shape, shapeOf(want), `${f} ${name} shape`);
        const e = relativeError(t.data, flat(want));
        assert.ok(e <= 1e-4, `${f} ${name}: relative error ${e}`);
        if (e > worst) [worst, where] = [e, `${f} ${name}`];
      };
      check('logits', r.logits, doc.expected.logits);
      for (const h of hooks) check(h, r.hooks[h], doc.expected.hooks[h]);
    } finally {
      m.dispose();
    }
  }
  test.diagnostic?.(`worst ${worst} at ${where}`);
  console.log(`# transformer goldens in WebAssembly: worst relative error ${worst.toExponential(2)} (${where})`);
});

test('a seed gives the same weights every time, stateDict() round-trips bit for bit', () => {
  const config = { vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, seed: 7 };
  const a = hs.createTransformer(config);
  const b = hs.createTransformer(config);
  const c = hs.createTransformer({ ...config, seed: 8 });
  try {
    const sa = a.stateDict();
    const sb = b.stateDict();
    assert.deepEqual(Object.keys(sa), Object.keys(a.parameterShapes()));
    for (const k of Object.keys(sa)) {
      assert.deepEqual(sa[k].shape, a.parameterShapes()[k]);
      assert.deepEqual(sa[k].data, sb[k].data, k);
    }
    assert.notDeepEqual(c.stateDict()['tok_embed.weight'].data, sa['tok_embed.weight'].data);
    const tokens = [[1, 2, 3, 4, 5, 1, 2, 3]];
    c.loadStateDict(sa);
    assert.deepEqual(c.forward(tokens).logits.data, a.forward(tokens).logits.data);
    const unbatched = a.forward(tokens[0]);
    assert.deepEqual(unbatched.logits.shape, [8, 28]);
    assert.deepEqual(unbatched.logits.data, a.forward(tokens).logits.data);
  } finally {
    a.dispose();
    b.dispose();
    c.dispose();
  }
});

test('bad input is refused naming the argument, and the model keeps working', () => {
  const m = hs.createTransformer({ vocabSize: 10, maxLen: 6, dModel: 8, nLayers: 2, nHeads: 2, dMlp: 16 });
  const tokens = [[1, 2, 3], [4, 5, 6]];
  const want = m.forward(tokens).logits.data;
  try {
    const e = expectError(() => m.forward([[1, 2, 10]]), 'INVALID_ARGUMENT', 'tokens: token [0, 2] is 10',
      'expected an integer in [0, 9]');
    assert.equal(e.argument, 'tokens');
    expectError(() => m.forward([[1, 2.5]]), 'INVALID_ARGUMENT', 'tokens[0][1]: expected an integer token id');
    expectError(() => m.forward([0, 1, 2, 3, 4, 5, 6]), 'SHAPE_MISMATCH', 'T <= maxLen = 6');
    expectError(() => m.forward([[[1]]]), 'SHAPE_MISMATCH', 'tokens: expected (T) or (B, T)');
    expectError(() => m.forward([[1, 2], [3]]), 'SHAPE_MISMATCH', 'tokens[1]');
    expectError(() => m.forward(tokens, { hooks: ['blocks.2.hook_resid_pre'] }), 'INVALID_ARGUMENT',
      "options.hooks[0]: unknown hook 'blocks.2.hook_resid_pre'");
    expectError(() => m.forward(tokens, { hooks: 'logits' }), 'INVALID_ARGUMENT', 'options.hooks: expected an array');
    expectError(() => m.forward(tokens, { headGates: [[1, 1]] }), 'SHAPE_MISMATCH', 'options.headGates');
    expectError(() => m.forward(tokens, { hook: [] }), 'INVALID_ARGUMENT', 'options.hook: unknown option');
    expectError(() => m.loadStateDict({ 'tok_embed.weight': [[1]] }), 'SHAPE_MISMATCH',
      "stateDict['tok_embed.weight']: expected shape [10, 8], got [1, 1]");
    expectError(() => m.loadStateDict({ bogus: [1] }, { strict: false }), 'UNKNOWN_PARAMETER', "stateDict['bogus']");
    expectError(() => m.loadStateDict({ 'unembed.bias': new Array(10).fill(0) }), 'MISSING_PARAMETER',
      'tok_embed.weight', 'pass { strict: false }');
    assert.deepEqual(m.forward(tokens).logits.data, want, 'nothing was half-loaded');
  } finally {
    m.dispose();
  }
  expectError(() => hs.createTransformer({ vocabSize: 10, maxLen: 6, dModel: 8, nHeads: 3 }), 'INVALID_ARGUMENT',
    'config.nHeads: dModel (8) must be divisible by nHeads (3)');
  expectError(() => hs.createTransformer({ vocabSize: 0, maxLen: 6, dModel: 8 }), 'INVALID_ARGUMENT',
    'config.vocabSize: expected an integer in [1, 16777216], got number 0');
  expectError(() => hs.createTransformer({ vocabSize: 10, maxLen: 6, dModel: 8, norm: 'Pre' }), 'INVALID_ARGUMENT',
    "config.norm: expected one of 'pre', 'post', 'none'");
  expectError(() => hs.createTransformer({ vocabSize: 10, maxLen: 6, dModel: 8, seed: -1 }), 'INVALID_ARGUMENT',
    'config.seed: expected an integer in [0, 2^53 - 1]');
  expectError(() => hs.createTransformer({ vocabSize: '10', maxLen: 6, dModel: 8 }), 'INVALID_ARGUMENT',
    'config.vocabSize: expected a number');
  const d = hs.createTransformer({ vocabSize: 4, maxLen: 4, dModel: 4 });
  d.dispose();
  expectError(() => d.forward([1]), 'DISPOSED', 'Transformer');
});
