// "kind": "transformer" case documents (docs/case-format.md) through hs.runCase and hs.checkCase,
// the npm CLI and, when built, the native CLI: every golden case of tests/golden/transformer/
// (written by tools/make_transformer_golden.py from PyTorch in float64) matches within 1e-4, a
// changed expectation is a mismatch naming what differs, and malformed documents are refused
// naming their JSON path (or the state_dict key) while the engine keeps working.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { init } from '../../web/lib/index.js';
import { caseLoss, parseCase, resultJsonBytesBound } from '../../web/lib/case.js';
import { expectError } from './helpers.js';

const hs = await init();
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const root = fileURLToPath(new URL('../../', import.meta.url));
const dir = join(root, 'tests/golden/transformer');
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
const textOf = (f) => readFileSync(join(dir, f), 'utf8');
const load = (f) => JSON.parse(textOf(f));
const SMALL = 'pre-learned-attn-only-l1-h1-b2.json';  // V=7 max_len=8 D=4, 1 layer, 1 head, B=2 T=5
const small = load(SMALL);
const copy = (doc) => structuredClone(doc);
// The native CLI: build/native (tools/test.sh builds it before the package tests), or another
// build of the same sources named by HEADSCOPE_NATIVE_CLI.
const nativeCli = process.env.HEADSCOPE_NATIVE_CLI ?? join(root, 'build/native/headscope');

// The engine still computes the small case bit for bit as before (after an error).
const reference = hs.runCase(small);
function stillWorks(what) {
  const again = hs.runCase(small);
  assert.deepEqual(again.logits.data, reference.logits.data, `${what}: logits changed`);
  assert.equal(again.loss, reference.loss, `${what}: loss changed`);
  assert.equal(hs.liveHandles(), 0, `${what}: runCase left a live model`);
}

test('every golden transformer case: runCase + checkCase match PyTorch within 1e-4', () => {
  assert.ok(files.length >= 30, `${files.length} golden transformer cases`);
  let worst = 0;
  let worstLoss = 0;
  for (const f of files) {
    const text = textOf(f);
    const doc = JSON.parse(text);
    const result = hs.runCase(text);
    // What runCase returns: logits, the hooks the expected section names (in its order), the
    // loss exactly when there are targets.
    assert.deepEqual(Object.keys(result.hooks), Object.keys(doc.expected.hooks), f);
    assert.equal('loss' in result, doc.inputs.targets !== undefined, `${f}: loss iff targets`);
    const cmp = hs.checkCase(doc, result);
    assert.ok(cmp.ok, `${f}: ${cmp.detail}`);
    assert.equal(cmp.tensors.length, 1 + Object.keys(doc.expected.hooks).length, f);
    assert.ok(cmp.tensors.every((t) => t.ok && t.maxRelativeError <= 1e-4), f);
    assert.deepEqual(cmp.tensors.map((t) => t.name), ['logits', ...Object.keys(doc.expected.hooks).map((h) => `hooks.${h}`)]);
    assert.equal(cmp.maxRelativeError, Math.max(...cmp.tensors.map((t) => t.maxRelativeError)));
    if (doc.expected.loss !== undefined) {
      assert.equal(cmp.loss.expected, doc.expected.loss);
      assert.equal(cmp.loss.got, result.loss);
      assert.ok(cmp.loss.ok && cmp.loss.error <= 1e-4, `${f}: loss error ${cmp.loss.error}`);
      worstLoss = Math.max(worstLoss, cmp.loss.error);
    } else {
      assert.equal(cmp.loss, null);
    }
    worst = Math.max(worst, cmp.maxRelativeError);
  }
  assert.equal(hs.liveHandles(), 0);
  console.log(`# transformer cases (wasm, runCase): ${files.length}, worst relative error ` +
    `${worst.toExponential(2)}, worst loss error ${worstLoss.toExponential(2)}`);
});

test('runCase is forward() with the case\'s hooks and gates; the loss is the mean over counted targets', () => {
  const f = 'pre-learned-gelu-mlp-l2-h4-gates-b2.json';
  const doc = load(f);
  const c = parseCase(doc);
  assert.equal(c.kind, 'transformer');
  const model = hs.createTransformer(c.config);
  let direct;
  try {
    model.loadStateDict(doc.state_dict);
    direct = model.forward(doc.inputs.tokens, { hooks: Object.keys(doc.expected.hooks), headGates: doc.inputs.head_gates });
  } finally {
    model.dispose();
  }
  const viaCase = hs.runCase(doc);
  assert.deepEqual(viaCase.logits.data, direct.logits.data);
  for (const h of Object.keys(doc.expected.hooks)) assert.deepEqual(viaCase.hooks[h].data, direct.hooks[h].data, h);
  // The gates matter: without them the case no longer matches.
  const { head_gates: gates, ...ungated } = doc.inputs;
  assert.ok(gates.flat().some((g) => g !== 1));
  assert.equal(hs.checkCase({ ...doc, inputs: ungated }, hs.runCase({ ...doc, inputs: ungated })).ok, false);
  // The loss, written out: (1/N) sum over counted (b, t) of logsumexp(logits[b][t]) - logits[b][t][target].
  const V = c.config.vocabSize;
  const targets = doc.inputs.targets.flat();
  let total = 0;
  let counted = 0;
  targets.forEach((t, p) => {
    if (t === -100) return;
    const row = Array.from(direct.logits.data.subarray(p * V, (p + 1) * V));
    total += Math.log(row.reduce((s, x) => s + Math.exp(x), 0)) - row[t];
    counted++;
  });
  assert.ok(counted > 0 && counted < targets.length, 'some targets are ignored');
  assert.ok(Math.abs(viaCase.loss - total / counted) < 1e-12, `${viaCase.loss} vs ${total / counted}`);
  assert.equal(caseLoss(direct.logits.data, Int32Array.from(targets), V), viaCase.loss);
});

test('checkCase: a changed expectation is a mismatch naming the tensor, the index or the loss', () => {
  const result = hs.runCase(small);
  const wrongLoss = copy(small);
  wrongLoss.expected.loss += 0.01;
  let cmp = hs.checkCase(wrongLoss, result);
  assert.equal(cmp.ok, false);
  assert.match(cmp.detail, /^loss: got 1\.889\d+, expected 1\.899\d+ \(error 0\.00527 > 0\.0001\)$/);
  assert.equal(cmp.loss.ok, false);
  assert.ok(cmp.tensors.every((t) => t.ok));
  assert.equal(hs.checkCase(wrongLoss, result, { tolerance: 0.01 }).ok, true);

  const wrongHook = copy(small);
  wrongHook.expected.hooks['blocks.0.attn.hook_pattern'][1][0][2][0] = 0.5;
  cmp = hs.checkCase(wrongHook, result);
  assert.equal(cmp.ok, false);
  // [1][0][2][0] of [B=2, H=1, T=5, T=5] is flat index 25 + 10 = 35.
  assert.match(cmp.detail, /^hooks\.blocks\.0\.attn\.hook_pattern\[35\]: got [0-9.e-]+, expected 0\.5 \(relative error/);
  const pattern = cmp.tensors.find((t) => t.name === 'hooks.blocks.0.attn.hook_pattern');
  assert.equal(pattern.ok, false);
  assert.ok(pattern.maxRelativeError > 0.1);

  const wrongLogits = copy(small);
  wrongLogits.expected.logits[0][0][0] += 1;
  cmp = hs.checkCase(wrongLogits, result);
  assert.match(cmp.detail, /^logits\[0\]: got /);
  // A result without a hook the case expects, or without the loss.
  const { hooks, ...noHooks } = result;
  assert.ok(hooks);
  cmp = hs.checkCase(small, noHooks);
  assert.equal(cmp.ok, false);
  assert.match(cmp.detail, /^hooks\.hook_embed: not in the result$/);
  cmp = hs.checkCase(small, { logits: result.logits, hooks });
  assert.equal(cmp.detail, 'loss: not in the result');
  // Results that crossed a worker boundary (plain objects) are read as well.
  const plain = { logits: { data: result.logits.data, shape: result.logits.shape }, loss: result.loss,
    hooks: Object.fromEntries(Object.entries(hooks).map(([k, t]) => [k, { data: t.data, shape: [...t.shape] }])) };
  assert.equal(hs.checkCase(small, plain).ok, true);
  const { expected, ...noExpected } = small;
  assert.ok(expected);
  assert.equal(hs.checkCase(noExpected, result).detail, 'the case has no expected values');
  // Not results of a transformer case.
  for (const bad of [null, 5, {}, { logits: [[1]] }, { output: result.logits, weights: null },
    { logits: result.logits, loss: '1.9' }, { logits: result.logits, hooks: 'all' },
    { logits: result.logits, hooks: { hook_embed: [1] } }]) {
    expectError(() => hs.checkCase(small, bad), 'INVALID_ARGUMENT', 'result: expected { logits: Tensor');
  }
});

// One edit of the small golden case each, and the error it must give: [what, edit, code, message].
const MALFORMED = [
  ['kind misspelled', (d) => { d.kind = 'Transformer'; }, 'PARSE_ERROR', 'kind: expected one of "mha", "transformer" (absent or null: "mha"), got string "Transformer"'],
  ['kind a number', (d) => { d.kind = 1; }, 'PARSE_ERROR', 'kind: expected one of "mha", "transformer"'],
  ['kind empty', (d) => { d.kind = ''; }, 'PARSE_ERROR', 'kind: expected one of'],
  ['kind "mha" on a transformer document', (d) => { d.kind = 'mha'; }, 'PARSE_ERROR', 'config.act: unknown key'],
  ['no vocab_size', (d) => { delete d.config.vocab_size; }, 'PARSE_ERROR', 'config.vocab_size: required, expected an integer in [1, 16777216]'],
  ['no max_len', (d) => { d.config.max_len = null; }, 'PARSE_ERROR', 'config.max_len: required'],
  ['no d_model', (d) => { delete d.config.d_model; }, 'PARSE_ERROR', 'config.d_model: required'],
  ['no config', (d) => { delete d.config; }, 'PARSE_ERROR', 'config: expected an object'],
  ['d_model not divisible', (d) => { d.config.n_heads = 3; }, 'PARSE_ERROR', 'config.n_heads: d_model (4) must be divisible by n_heads (3)'],
  ['a camelCase key', (d) => { d.config.dModel = 4; }, 'PARSE_ERROR', 'config.dModel: unknown key'],
  ['a seed', (d) => { d.config.seed = 1; }, 'PARSE_ERROR', 'config.seed: unknown key'],
  ['a misspelt top-level key', (d) => { d.expect = d.expected; delete d.expected; }, 'PARSE_ERROR', 'expect: unknown key (expected one of config, expected, inputs, kind, meta, name, state_dict)'],
  ['an unknown top-level key', (d) => { d.weights = {}; }, 'PARSE_ERROR', 'weights: unknown key'],
  ['vocab_size 0', (d) => { d.config.vocab_size = 0; }, 'PARSE_ERROR', 'config.vocab_size: expected an integer in [1, 16777216], got number 0'],
  ['n_layers 300', (d) => { d.config.n_layers = 300; }, 'PARSE_ERROR', 'config.n_layers: expected an integer in [1, 256], got number 300'],
  ['d_mlp 1.5', (d) => { d.config.d_mlp = 1.5; }, 'PARSE_ERROR', 'config.d_mlp: expected 0 (no MLP) or an integer in [1, 16777216], got number 1.5'],
  ['norm Pre', (d) => { d.config.norm = 'Pre'; }, 'PARSE_ERROR', 'config.norm: expected one of "pre", "post", "none", got string "Pre"'],
  ['positions rotary', (d) => { d.config.positions = 'rotary'; }, 'PARSE_ERROR', 'config.positions: expected one of "learned", "sinusoidal", "none"'],
  ['act tanh', (d) => { d.config.act = 'tanh'; }, 'PARSE_ERROR', 'config.act: expected one of "gelu", "relu"'],
  ['causal "yes"', (d) => { d.config.causal = 'yes'; }, 'PARSE_ERROR', 'config.causal: expected true or false'],
  ['ln_eps 0', (d) => { d.config.ln_eps = 0; }, 'PARSE_ERROR', 'config.ln_eps: expected a finite number > 0, got number 0'],
  ['token out of range', (d) => { d.inputs.tokens[1][3] = 7; }, 'PARSE_ERROR', 'inputs.tokens[1][3]: expected a token id in [0, 6] (config.vocab_size 7), got 7'],
  ['negative token', (d) => { d.inputs.tokens[0][0] = -1; }, 'PARSE_ERROR', 'inputs.tokens[0][0]: expected a token id in [0, 6]'],
  ['non-integer token', (d) => { d.inputs.tokens[0][1] = 1.5; }, 'PARSE_ERROR', 'inputs.tokens[0][1]: expected an integer token id, got number 1.5'],
  ['token as a string', (d) => { d.inputs.tokens[1][4] = '1'; }, 'PARSE_ERROR', 'inputs.tokens[1][4]: expected an integer token id, got string "1"'],
  ['token beyond int32', (d) => { d.inputs.tokens[0][2] = 2 ** 31; }, 'PARSE_ERROR', 'inputs.tokens[0][2]: expected an integer token id'],
  ['tokens (B, T, 1)', (d) => { d.inputs.tokens = [[[1], [2]]]; }, 'PARSE_ERROR', 'inputs.tokens: expected (T) or (B, T) token ids, got shape [1, 2, 1]'],
  ['no tokens', (d) => { d.inputs.tokens = []; }, 'PARSE_ERROR', 'inputs.tokens: expected at least one row of at least one token, got shape [0]'],
  ['ragged tokens', (d) => { d.inputs.tokens[1].pop(); }, 'PARSE_ERROR', 'inputs.tokens[1]: expected 5 elements like its siblings, got 4'],
  ['tokens missing', (d) => { delete d.inputs.tokens; }, 'PARSE_ERROR', 'inputs.tokens: required'],
  ['T > max_len', (d) => { d.config.max_len = 4; }, 'PARSE_ERROR', 'inputs.tokens: T = 5 tokens, more than config.max_len = 4'],
  ['an attention input', (d) => { d.inputs.query = [[1]]; }, 'PARSE_ERROR', 'inputs.query: unknown key (expected one of tokens, targets, head_gates)'],
  ['targets out of range', (d) => { d.inputs.targets[0][4] = 9; }, 'PARSE_ERROR', 'inputs.targets[0][4]: expected -100 (not counted) or a token id in [0, 6] (config.vocab_size 7), got 9'],
  ['targets of another shape', (d) => { d.inputs.targets.pop(); }, 'PARSE_ERROR', 'inputs.targets: expected the shape of inputs.tokens, [2, 5], got [1, 5]'],
  ['targets all ignored', (d) => { d.inputs.targets = d.inputs.targets.map((r) => r.map(() => -100)); }, 'PARSE_ERROR', 'inputs.targets: every target is -100: there is no loss to compute'],
  ['head gates of another shape', (d) => { d.inputs.head_gates = [1, 0]; }, 'PARSE_ERROR', 'inputs.head_gates: expected shape (n_layers, n_heads) = [1, 1], got [2]'],
  ['head gates not numbers', (d) => { d.inputs.head_gates = [['on']]; }, 'PARSE_ERROR', 'inputs.head_gates[0][0]: expected a number'],
  ['no expected logits', (d) => { delete d.expected.logits; }, 'PARSE_ERROR', 'expected.logits: required when expected is given'],
  ['no expected loss with targets', (d) => { delete d.expected.loss; }, 'PARSE_ERROR', 'expected.loss: required when inputs.targets is given'],
  ['a loss without targets', (d) => { delete d.inputs.targets; }, 'PARSE_ERROR', 'expected.loss: given without inputs.targets'],
  ['a loss that is not a number', (d) => { d.expected.loss = 'low'; }, 'PARSE_ERROR', 'expected.loss: expected a number, got string "low"'],
  ['expected.output', (d) => { d.expected.output = d.expected.logits; }, 'PARSE_ERROR', 'expected.output: unknown key (expected one of logits, loss, hooks)'],
  ['a hook value that is not a tensor', (d) => { d.expected.hooks.hook_embed = 'x'; }, 'PARSE_ERROR', 'expected.hooks.hook_embed: expected a tensor'],
  ['a state_dict entry that is not a tensor', (d) => { d.state_dict['unembed.bias'] = [1, 'x']; }, 'PARSE_ERROR', "state_dict.unembed.bias[1]: expected a number"],
  // Found when the case runs: the hooks are the engine's, the state_dict's keys and shapes the model's.
  ['a hook of another layer', (d) => { d.expected.hooks['blocks.1.attn.hook_z'] = [0]; }, 'PARSE_ERROR', 'expected.hooks.blocks.1.attn.hook_z: not a hook of this config (its hooks: hook_embed, hook_pos_embed, blocks.0.hook_resid_pre'],
  ['an MLP hook of an attention-only model', (d) => { d.expected.hooks['blocks.0.hook_mlp_out'] = [0]; }, 'PARSE_ERROR', 'expected.hooks.blocks.0.hook_mlp_out: not a hook of this config'],
  ['a hook named __proto__', (d) => { Object.defineProperty(d.expected.hooks, '__proto__', { value: [1], enumerable: true }); }, 'PARSE_ERROR', 'expected.hooks.__proto__: not a hook of this config'],
  ['a wrong state_dict shape', (d) => { d.state_dict['tok_embed.weight'].pop(); }, 'SHAPE_MISMATCH', "stateDict['tok_embed.weight']: expected shape [7, 4], got [6, 4]", 'stateDict'],
  ['a missing state_dict key', (d) => { delete d.state_dict['unembed.bias']; }, 'MISSING_PARAMETER', 'unembed.bias'],
  ['an unknown state_dict key', (d) => { d.state_dict['blocks.0.mlp.fc_in.weight'] = [[1, 2, 3, 4]]; }, 'UNKNOWN_PARAMETER', "stateDict['blocks.0.mlp.fc_in.weight']"],
];

test('malformed transformer documents are refused naming the argument, and the engine keeps working', () => {
  assert.ok(MALFORMED.length >= 40);
  for (const [what, edit, code, message, argument] of MALFORMED) {
    const doc = copy(small);
    edit(doc);
    // As an object and as JSON text alike.
    for (const input of [doc, JSON.stringify(doc)]) {
      const e = expectError(() => hs.runCase(input), code, message);
      assert.doesNotMatch(e.message, /\n/, `${what}: one line`);
      if (argument !== undefined) assert.equal(e.argument, argument, what);
    }
    stillWorks(what);
  }
});

test('a tiny case naming a huge model is refused before anything is allocated; the budget holds', () => {
  // 183 bytes: vocab 2^24 x d_model 8 would be 268M floats of embeddings, seeded, then found
  // missing (it froze the page for 7-8 s and grew its memory to 1.78 GB).
  const tiny = '{"kind":"transformer","config":{"vocab_size":16777216,"max_len":8,"d_model":8},' +
    '"state_dict":{},"inputs":{"tokens":[1,2,3]}}';
  assert.ok(tiny.length <= 183);
  const before = hs.memory();
  const t0 = performance.now();
  expectError(() => hs.runCase(tiny), 'MISSING_PARAMETER', 'stateDict: missing tok_embed.weight [16777216, 8], pos_embed.weight [8, 8]');
  const ms = performance.now() - t0;
  assert.ok(ms < 500, `refused in ${ms.toFixed(0)} ms`);
  const after = hs.memory();
  assert.equal(after.wasmBytes, before.wasmBytes, 'WebAssembly memory did not grow');
  assert.ok(after.heapInUse - before.heapInUse < 64 * 1024, `heap ${before.heapInUse} -> ${after.heapInUse}`);
  // Keys and shapes are checked against the config before any weight is copied, naming the key.
  const wrong = copy(small);
  wrong.state_dict['unembed.weight'] = wrong.state_dict['unembed.weight'].slice(1);
  expectError(() => hs.runCase(wrong), 'SHAPE_MISMATCH', "stateDict['unembed.weight']: expected shape [7, 4], got [6, 4]");
  // A case whose keys and shapes are right but whose run is beyond the budget: RESOURCE_EXHAUSTED
  // with the estimate, and the engine untouched. d_model 4096, one layer, 1024 tokens: 67M weights.
  const config = { vocabSize: 4, maxLen: 1024, dModel: 4096, positions: 'none' };
  const shapes = hs.createTransformer({ ...config, seed: null });
  const stateDict = Object.fromEntries(Object.entries(shapes.parameterShapes()).map(([k, shape]) =>
    [k, { data: new Float32Array(shape.reduce((a, b) => a * b, 1)), shape }]));
  shapes.dispose();
  const big = { kind: 'transformer', config: { vocab_size: 4, max_len: 1024, d_model: 4096, positions: 'none' },
    state_dict: stateDict, inputs: { tokens: new Array(1024).fill(1) } };
  const heap = hs.memory().heapInUse;
  const e = expectError(() => hs.runCase(big), 'RESOURCE_EXHAUSTED', 'case: this transformer case would need about 640.8 MiB',
    'and 7.7e+10 multiply-adds, more than a case may ask for (1.0 GiB, 1.7e+10): config 67174404 weights, tokens [1024]');
  assert.doesNotMatch(e.message, /\n/);
  assert.ok(hs.memory().heapInUse - heap < 64 * 1024, 'refused before loading a weight');
  stillWorks('over budget');
});

test('createTransformer({ seed: null }): no weights until loadStateDict; nothing allocated for them', () => {
  const config = { vocabSize: 2 ** 20, maxLen: 8, dModel: 64 };
  const heap = hs.memory().heapInUse;
  const empty = hs.createTransformer({ ...config, seed: null });
  try {
    assert.equal(empty.config.seed, null);
    assert.ok(hs.memory().heapInUse - heap < 1024 * 1024, `an unseeded model of 2^27 weights took ${hs.memory().heapInUse - heap} bytes`);
    expectError(() => empty.forward([1, 2]), 'MISSING_PARAMETER', 'tok_embed.weight');
    expectError(() => empty.stateDict(), 'MISSING_PARAMETER', 'tok_embed.weight');
  } finally {
    empty.dispose();
  }
  // Loaded, it computes what a model created with those weights computes.
  const seeded = hs.createTransformer({ vocabSize: 7, maxLen: 8, dModel: 4, seed: 9 });
  const loaded = hs.createTransformer({ vocabSize: 7, maxLen: 8, dModel: 4, seed: null });
  try {
    loaded.loadStateDict(seeded.stateDict());
    assert.deepEqual(loaded.forward([1, 2, 3]).logits.data, seeded.forward([1, 2, 3]).logits.data);
  } finally {
    seeded.dispose();
    loaded.dispose();
  }
  expectError(() => hs.createTransformer({ ...config, seed: 'none' }), 'INVALID_ARGUMENT', 'config.seed: expected a number');
});

test('checkCase parses the case as runCase does; parseCase takes the kind as the doc defines it', () => {
  const result = hs.runCase(small);
  const bad = copy(small);
  bad.inputs.tokens[0][0] = 99;
  expectError(() => hs.checkCase(bad, result), 'PARSE_ERROR', 'inputs.tokens[0][0]: expected a token id');
  // A hook the config does not have is a mismatch for checkCase (which builds no model).
  const extra = copy(small);
  extra.expected.hooks['blocks.3.hook_resid_post'] = [0];
  const cmp = hs.checkCase(extra, result);
  assert.equal(cmp.ok, false);
  assert.equal(cmp.detail, 'hooks.blocks.3.hook_resid_post: not in the result');
  // Attention cases: no kind, null or "mha" are the same case.
  const seed = JSON.parse(readFileSync(join(root, 'tests/golden/seed-worked-example.json'), 'utf8'));
  const plain = parseCase(seed);
  assert.equal(plain.kind, 'mha');
  assert.deepEqual(parseCase({ ...seed, kind: 'mha' }), plain);
  assert.deepEqual(parseCase({ ...seed, kind: null }), plain);
  expectError(() => parseCase({ ...seed, kind: 'transformer' }), 'PARSE_ERROR', 'config.add_bias_kv: unknown key');
  assert.ok(hs.checkCase({ ...seed, kind: 'mha' }, hs.runCase({ ...seed, kind: 'mha' })).ok);
  // Defaults filled in, camelCase as createTransformer takes them.
  const minimal = copy(small);
  for (const k of ['n_layers', 'n_heads', 'd_mlp', 'norm', 'positions', 'causal', 'act', 'bias', 'ln_eps']) delete minimal.config[k];
  assert.deepEqual(parseCase(minimal).config, { vocabSize: 7, maxLen: 8, dModel: 4, nLayers: 1, nHeads: 1, dMlp: 0,
    norm: 'pre', positions: 'learned', causal: true, act: 'gelu', bias: true, lnEps: 1e-5, tieEmbeddings: false,
    ropeLayout: 'half', ropeBase: 10000, ropeFraction: 1,
    nKvHeads: null, attnWindow: 0, attnSinks: false });
  assert.ok(hs.checkCase(minimal, hs.runCase(minimal)).ok, 'the small case is all defaults');
  // Unbatched tokens: results without the batch axis.
  const unbatched = hs.runCase(load('none-learned-gelu-mlp-l2-h2-unbatched.json'));
  assert.deepEqual(unbatched.logits.shape, [6, 10]);
  assert.deepEqual(unbatched.hooks['blocks.1.attn.hook_pattern'].shape, [2, 6, 6]);
});

function runCli(cmd, args) {
  return spawnSync(cmd[0], [...cmd.slice(1), ...args], { encoding: 'utf8', maxBuffer: 64 * 2 ** 20 });
}

test('both CLIs run transformer cases: the result as the expected section, --check, errors', () => {
  const clis = [['npm', [process.execPath, join(root, 'web/lib/cli.js')]]];
  if (existsSync(nativeCli)) clis.push(['native', [nativeCli]]);
  else console.log(`# ${nativeCli} not built: the native CLI is skipped here`);
  const picks = [SMALL, 'none-learned-gelu-mlp-l2-h2-unbatched.json', 'none-none-gelu-mlp-l2-h2-b3.json',
    'post-sinusoidal-relu-nobias-mlp-l3-h3-gates-unbatched.json'];
  const printed = {};
  for (const [which, cmd] of clis) {
    for (const f of picks) {
      const file = join(dir, f);
      const r = runCli(cmd, ['run', file, '--check']);
      assert.equal(r.status, 0, `${which} ${f}: ${r.stderr}`);
      assert.match(r.stderr, /^headscope: .*: (ok, )?matches expected \(max relative error [0-9.e+-]+ over \d+ tensors/, `${which} ${f}`);
      const out = JSON.parse(r.stdout);
      const doc = load(f);
      // The size bound the CLIs check before running holds (the native one is the same formula).
      const bound = resultJsonBytesBound(parseCase(doc));
      assert.ok(Buffer.byteLength(r.stdout) <= bound, `${which} ${f}: ${Buffer.byteLength(r.stdout)} > ${bound}`);
      assert.deepEqual(Object.keys(out), ['logits', ...(doc.inputs.targets ? ['loss'] : []), 'hooks'], `${which} ${f}`);
      assert.deepEqual(Object.keys(out.hooks), Object.keys(doc.expected.hooks), `${which} ${f}`);
      // The printed result is itself an expected section that the case matches.
      const again = copy(doc);
      again.expected = out;
      assert.ok(hs.checkCase(again, hs.runCase(doc)).ok, `${which} ${f}: printed result`);
      (printed[f] ??= []).push(out);
    }
    for (const [flag, extra] of [['--head-stats', []], ['--head-gates', ['1']]]) {
      const r = runCli(cmd, ['run', join(dir, SMALL), flag, ...extra]);
      assert.equal(r.status, 2, `${which} ${flag}`);
      assert.equal(r.stdout, '');
      assert.equal(r.stderr, `headscope: ${join(dir, SMALL)}: ${flag} applies to attention cases only, and this is a ` +
        `"kind": "transformer" case${flag === '--head-gates' ? ' (its gates are inputs.head_gates)' : ''}\n`, which);
    }
    const r = runCli(cmd, ['run', join(dir, SMALL), '--max-output-bytes', '1000']);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /RESOURCE_EXHAUSTED: result: its JSON text could take \d+ bytes \(logits \[2, 5, 7\], 14 hooks\), more than the limit of 1000 bytes \(--max-output-bytes raises it\)\n$/, which);
  }
  // The two CLIs print the same structure and numbers (not byte for byte: float formatting).
  for (const [f, outs] of Object.entries(printed)) {
    if (outs.length < 2) continue;
    const [a, b] = outs;
    assert.ok(Math.abs(a.loss - b.loss) <= 1e-5 * Math.max(1, Math.abs(a.loss)) || a.loss === undefined, f);
    assert.deepEqual(Object.keys(a.hooks), Object.keys(b.hooks), f);
  }
});

test('both CLIs refuse malformed transformer files with exit 2 naming the path', async () => {
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const tmp = mkdtempSync(join(tmpdir(), 'headscope-tcase-'));
  try {
    const clis = [['npm', [process.execPath, join(root, 'web/lib/cli.js')]]];
    if (existsSync(nativeCli)) clis.push(['native', [nativeCli]]);
    // The parser's errors: the same code and JSON path from both.
    const picked = MALFORMED.filter(([, , code]) => code === 'PARSE_ERROR');
    picked.forEach(([, edit], i) => {
      const doc = copy(small);
      edit(doc);
      writeFileSync(join(tmp, `bad${i}.json`), JSON.stringify(doc));
    });
    for (const [which, cmd] of clis) {
      picked.forEach(([what, , code, message], i) => {
        const file = join(tmp, `bad${i}.json`);
        const r = runCli(cmd, ['run', file]);
        assert.equal(r.status, 2, `${which} ${what}: ${r.stderr}`);
        assert.equal(r.stdout, '', `${which} ${what}`);
        // The code and the JSON path (the parsers word some messages each their own way: "an
        // array of length 2" / "array [1,2]").
        const path = message.slice(0, message.indexOf(': ') + 2);
        assert.ok(r.stderr.startsWith(`headscope: ${file}: ${code}: ${path}`), `${which} ${what}: ${r.stderr}`);
        assert.match(r.stderr, /^[^\n]+\n$/, `${which} ${what}: one line`);
      });
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
