// Error messages quote a caller's text bounded and escaped (issue 28, items 12 and 13): a 10 MB
// name comes back as at most 64 code points and "...", control and bidirectional characters as
// \uXXXX, so no message is huge, spans lines, clears a terminal or reorders what is shown; every
// message stays under 4096 characters whatever it lists; a missing field says so; URL parameters
// named like Object.prototype's members are unknown, not "given twice".
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { init, HeadscopeError } from '../../web/lib/index.js';
import { initWorker } from '../../web/lib/worker-client.js';
import { makeTask } from '../../web/lib/tasks.js';
import { headScores } from '../../web/lib/detectors.js';
import { quoteInput } from '../../web/lib/tensor.js';
import { decodeHeadsState } from '../../web/views/heads/url-state.js';
import { decodeWalkthroughState } from '../../web/views/walkthrough/url-state.js';
import { applyTrainState, defaultTrainState } from '../../web/views/train/state.js';
import { decodeTrainState } from '../../web/views/train/url-state.js';

const hs = await init();
after(() => assert.equal(hs.liveHandles(), 0));

const HUGE = `${'x'.repeat(10 * 1024 * 1024)}\u0000`;
const NASTY = 'a\u0000b\u001b[2J\u0007c\nok d\u202ee\u0085f\u2066';
// What a message may never hold raw.
const RAW = /[\u0000-\u001f\u007f-\u009f\u2028-\u202e\u2066-\u2069]/;

function thrown(fn) {
  try {
    fn();
  } catch (e) {
    return e;
  }
  return null;
}

function assertQuoted(e, what, { quoted = null } = {}) {
  assert.ok(e instanceof HeadscopeError, `${what}: ${e?.stack ?? 'no error'}`);
  assert.doesNotMatch(e.message, RAW, `${what}: a raw control character in ${JSON.stringify(e.message.slice(0, 200))}`);
  assert.ok(e.message.length < 600, `${what}: a message of ${e.message.length} characters`);
  if (quoted !== null) assert.ok(e.message.includes(quoted), `${what}: "${e.message}" lacks "${quoted}"`);
}

test('quoteInput: 64 code points at most, escapes, reads no further than it needs', () => {
  assert.equal(quoteInput('in_proj_weight'), 'in_proj_weight');
  assert.equal(quoteInput(NASTY), 'a\\u0000b\\u001b[2J\\u0007c\\u000aok d\\u202ee\\u0085f\\u2066');
  assert.equal(quoteInput('y'.repeat(64)), 'y'.repeat(64));
  assert.equal(quoteInput('y'.repeat(65)), `${'y'.repeat(61)}...`);
  assert.equal(quoteInput('\u{1F600}'.repeat(70)), `${'\u{1F600}'.repeat(61)}...`, 'code points, not UTF-16 units');
  assert.equal(quoteInput('\ud800x'), '\\ud800x', 'a lone surrogate');
  const t0 = performance.now();
  quoteInput(HUGE);
  assert.ok(performance.now() - t0 < 50, 'a 10 MB name is cut, not walked');
});

test('names a caller chose, in every message that quotes one: bounded and escaped', () => {
  const model = hs.createTransformer({ vocabSize: 8, maxLen: 8, dModel: 8 });
  const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 1 });
  const attention = { config: { embed_dim: 4, num_heads: 1 }, state_dict: {}, inputs: { query: [[1, 2, 3, 4]] } };
  const transformer = { kind: 'transformer', config: { vocab_size: 4, max_len: 4, d_model: 2 }, state_dict: {}, inputs: { tokens: [1] } };
  const small = hs.createTransformer({ vocabSize: 4, maxLen: 4, dModel: 2, seed: 1 });
  const smallWeights = Object.fromEntries(Object.entries(small.stateDict()).map(([k, v]) => [k, v.toArray()]));
  small.dispose();
  for (const name of [HUGE, NASTY]) {
    const quoted = quoteInput(name);
    const cases = {
      'Transformer.loadStateDict key': () => model.loadStateDict({ [name]: [1] }),
      'Transformer.loadStateDict key, not strict': () => model.loadStateDict({ [name]: [1] }, { strict: false }),
      'MultiheadAttention.loadStateDict key': () => mha.loadStateDict({ [name]: [1] }),
      'a state_dict entry named so, not a tensor': () => mha.loadStateDict({ [name]: 'x' }),
      'createTransformer config key': () => hs.createTransformer({ vocabSize: 8, maxLen: 8, dModel: 8, [name]: 1 }),
      'forward option': () => model.forward([1], { [name]: 1 }),
      'generate option': () => model.generate([1], { [name]: 1 }),
      'setOptimizer option': () => model.setOptimizer({ type: 'adamw', [name]: 1 }),
      'createMultiheadAttention config key': () => hs.createMultiheadAttention({ embedDim: 4, numHeads: 1, [name]: 1 }),
      'init-style options': () => hs.checkCase(attention, { output: { data: new Float32Array(4), shape: [1, 4] } }, { [name]: 1 }),
      'runCase state_dict key (attention)': () => hs.runCase({ ...attention, state_dict: { [name]: [1] } }),
      'runCase state_dict key (transformer)': () => hs.runCase({ ...transformer, state_dict: { [name]: [1] } }),
      'runCase top-level key': () => hs.runCase({ ...transformer, [name]: 1 }),
      'runCase config key': () => hs.runCase({ ...transformer, config: { ...transformer.config, [name]: 1 } }),
      'runCase inputs key': () => hs.runCase({ ...attention, inputs: { ...attention.inputs, [name]: 1 } }),
      'runCase hook name': () => hs.runCase({ ...transformer, state_dict: smallWeights,
        expected: { logits: [[0, 0, 0, 0]], hooks: { [name]: [0] } } }),
      'makeTask name': () => makeTask(name),
      'makeTask option': () => makeTask('induction', { [name]: 1 }),
      'headScores option': () => headScores({ data: new Float32Array(4), shape: [1, 2, 2] }, [[1, 2]], { [name]: 1 }),
      'Train view state': () => applyTrainState({ [name]: 1 }, defaultTrainState(), 'setState: state'),
      'URL parameter, Heads': () => decodeHeadsState(`${encodeURIComponent(name.slice(0, 100000))}=1`),
      'URL parameter, Walkthrough': () => decodeWalkthroughState(`${encodeURIComponent(name.slice(0, 100000))}=1`),
      'URL parameter, Train': () => decodeTrainState(`${encodeURIComponent(name.slice(0, 100000))}=1`),
    };
    for (const [what, fn] of Object.entries(cases)) {
      const e = thrown(fn);
      // (A value, as opposed to a name, is described in 27 characters.)
      assertQuoted(e, `${what} (${name.length} characters)`, { quoted: what.startsWith('URL') ? null : quoted.slice(0, 20) });
    }
  }
  model.dispose();
  mha.dispose();
});

test('every message stays under 4096 characters, even listing a deep model\'s keys and hooks', () => {
  const deep = hs.createTransformer({ vocabSize: 4, maxLen: 4, dModel: 4, nLayers: 256, dMlp: 4, seed: null });
  try {
    for (const strict of [true, false]) {
      const e = thrown(() => deep.loadStateDict({ 'no.such.key': [1] }, { strict }));
      assertQuotedLong(e, `unknown key, strict ${strict}`);
      assert.match(e.message, /\.\.\. \(3078 keys in all: parameterShapes\(\) lists them\)\)$|more characters\)$/);
    }
    assertQuotedLong(thrown(() => deep.forward([1])), 'missing every weight');
  } finally {
    deep.dispose();
  }
  const e = new HeadscopeError('INTERNAL', `${'\u{1F600}'.repeat(3000)}`);
  assert.ok(e.message.length <= 4096, `${e.message.length}`);
  assert.match(e.message, /\.\.\. \(\d+ more characters\)$/);
  assert.doesNotMatch(e.message, /[\ud800-\udbff](?![\udc00-\udfff])/, 'no half surrogate pair at the cut');
});

function assertQuotedLong(e, what) {
  assert.ok(e instanceof HeadscopeError, `${what}: ${e?.stack}`);
  assert.ok(e.message.length <= 4096, `${what}: ${e.message.length} characters`);
}

test('messages of missing fields, out-of-range seeds and URL parameters named like Object.prototype members', () => {
  const e = thrown(() => hs.createTransformer({ maxLen: 8, dModel: 8 }));
  assert.equal(e.message, 'config.vocabSize: expected a number (the size, an integer), got undefined');
  // An integer option beyond 2^53 says the range it must be in.
  const model = hs.createTransformer({ vocabSize: 8, maxLen: 8, dModel: 8 });
  try {
    assert.match(thrown(() => model.generate([1], { seed: 2 ** 60 })).message,
      /^options\.seed: expected an integer in \[0, 2\^53 - 1\], got number 1152921504606846976$/);
    assert.match(thrown(() => model.generate([1], { seed: 1.5 })).message, /^options\.seed: expected an integer in \[0, 2\^53 - 1\], got number 1\.5$/);
    assert.match(thrown(() => model.generate([1], { topK: 0.5 })).message, /^options\.topK: expected an integer >= 0, got number 0\.5$/);
  } finally {
    model.dispose();
  }
  for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty']) {
    const u = thrown(() => decodeHeadsState(`${name}=1`));
    assert.match(u.message, new RegExp(`^URL parameter ${name}: unknown \\(the Heads view's are `), name);
    assert.doesNotMatch(u.message, /given twice/);
  }
  assert.match(thrown(() => decodeHeadsState('heads=2&heads=2')).message, /^URL parameter heads: given twice/);
  assert.match(thrown(() => decodeTrainState('steps=1&steps=2')).message, /^URL parameter steps: given twice/);
});

test('through the worker: spec and batch keys quoted as well', async () => {
  const remote = await initWorker();
  try {
    const m = await remote.createTransformer({ vocabSize: 8, maxLen: 8, dModel: 8 });
    await m.setOptimizer({ type: 'sgd', lr: 0.1 });
    for (const spec of [{ steps: 1, [NASTY]: 1 }, { steps: 1, batches: [{ tokens: [[1]], targets: [[1]], [NASTY]: 1 }] }]) {
      const e = await m.train(spec).then(() => null, (x) => x);
      assertQuoted(e, JSON.stringify(Object.keys(spec)), { quoted: quoteInput(NASTY) });
    }
    await m.dispose();
  } finally {
    await remote.terminate();
  }
});
