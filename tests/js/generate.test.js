// model.generate through WebAssembly: greedy generation with the KV cache gives, at every step,
// the bits forward() gives the last position of the whole sequence so far (so its tokens are the
// argmax of a full recomputation), and its greedy tokens are PyTorch's on every attention variant
// (tests/golden/generate, tools/make_generate_golden.py); sampling is a function of the seed and stays inside topK /
// topP; bad options are refused naming them and leave the model working.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { init } from '../../web/lib/index.js';
import { field, TRANSFORMER_SCHEMA } from '../../web/lib/config.js';
import { expectError } from './helpers.js';

// The SIMD128 build, which the threaded module is: the bits compared with it below are a build's
// (under --experimental-wasm-relaxed-simd init() would load the relaxed one).
const hs = await init({ simd: 'simd128' });
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const bits = (f32) => new Uint32Array(f32.buffer, f32.byteOffset, f32.length);

// Checks generate(prompt, { maxNewTokens: n, logits: true }) against forward() step by step.
function checkAgainstRecomputation(model, prompt, n, options = {}) {
  const V = model.config.vocabSize;
  const B = prompt.length, T = prompt[0].length;
  const { tokens, logits } = model.generate(prompt, { maxNewTokens: n, logits: true, ...options });
  assert.ok(tokens.data instanceof Int32Array);
  assert.deepEqual(tokens.shape, [B, T + n]);
  assert.deepEqual(logits.shape, [B, n, V]);
  const rows = tokens.toArray();
  rows.forEach((r, b) => assert.deepEqual(r.slice(0, T), prompt[b], 'the prompt comes first'));
  for (let s = 0; s < n; s++) {
    const soFar = rows.map((r) => r.slice(0, T + s));
    const full = model.forward(soFar, options.headGates ? { headGates: options.headGates } : {}).logits;
    for (let b = 0; b < B; b++) {
      const want = full.data.subarray(((b * (T + s)) + T + s - 1) * V, ((b * (T + s)) + T + s) * V);
      const got = logits.data.subarray((b * n + s) * V, (b * n + s + 1) * V);
      assert.deepEqual(bits(got), bits(want), `step ${s}, sequence ${b}: cached logits = recomputed, bit for bit`);
      let argmax = 0;
      for (let j = 1; j < V; j++) if (want[j] > want[argmax]) argmax = j;
      assert.equal(rows[b][T + s], argmax, `step ${s}, sequence ${b}: greedy token`);
    }
  }
  return tokens;
}

test('greedy generation equals the argmax of a full recomputation at every step, bit for bit', () => {
  const configs = [
    // The induction lab's shape; the context crosses the small-head path's 12 keys.
    { vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, seed: 1 },
    { vocabSize: 19, maxLen: 20, dModel: 12, nLayers: 1, nHeads: 4, dMlp: 24, norm: 'post', positions: 'sinusoidal', act: 'relu', seed: 2 },
    { vocabSize: 23, maxLen: 24, dModel: 15, nLayers: 3, nHeads: 3, dMlp: 8, norm: 'none', positions: 'none', bias: false, seed: 3 },
    { vocabSize: 50, maxLen: 72, dModel: 64, nLayers: 2, nHeads: 4, dMlp: 128, seed: 4 },
    { vocabSize: 11, maxLen: 10, dModel: 8, nLayers: 2, nHeads: 2, dMlp: 8, causal: false, seed: 5 },
  ];
  for (const config of configs) {
    const m = hs.createTransformer(config);
    try {
      const T = 3;
      const prompt = [0, 1].map((b) => Array.from({ length: T }, (_, i) => (i * 5 + b * 3 + 1) % config.vocabSize));
      checkAgainstRecomputation(m, prompt, config.maxLen - T);
    } finally {
      m.dispose();
    }
  }
});

test('an unbatched prompt gives (T + n) tokens and (n, V) logits; head gates apply as in forward', () => {
  const m = hs.createTransformer({ vocabSize: 13, maxLen: 16, dModel: 16, nLayers: 2, nHeads: 2, seed: 8 });
  try {
    const one = m.generate([3, 1, 4], { maxNewTokens: 5, logits: true });
    assert.deepEqual(one.tokens.shape, [8]);
    assert.deepEqual(one.logits.shape, [5, 13]);
    const batched = m.generate([[3, 1, 4]], { maxNewTokens: 5, logits: true });
    assert.deepEqual([...one.tokens.data], [...batched.tokens.data]);
    assert.deepEqual(bits(one.logits.data), bits(batched.logits.data));
    assert.deepEqual(Object.keys(m.generate([3, 1, 4])), ['tokens'], 'no logits unless asked');
    assert.equal(m.generate([3, 1, 4]).tokens.shape[0], 4, 'maxNewTokens defaults to 1');
    checkAgainstRecomputation(m, [[3, 1, 4], [2, 7, 1]], 13, { headGates: [[1, 0], [0.5, -1]] });
    const ungated = m.generate([[3, 1, 4]], { maxNewTokens: 13, logits: true });
    const gated = m.generate([[3, 1, 4]], { maxNewTokens: 13, logits: true, headGates: [[1, 0], [0.5, -1]] });
    assert.notDeepEqual(bits(gated.logits.data), bits(ungated.logits.data), 'the gates change the numbers');
    assert.deepEqual([...m.generate({ data: Int32Array.from([3, 1, 4]), shape: [1, 3] }).tokens.shape], [1, 4]);
  } finally {
    m.dispose();
  }
});

test('sampling: the same seed gives the same tokens, topK 1 is greedy, draws stay inside topK and topP', () => {
  const m = hs.createTransformer({ vocabSize: 40, maxLen: 48, dModel: 16, nLayers: 1, nHeads: 2, seed: 5 });
  try {
    const prompt = [[1, 2], [3, 4], [5, 6]];
    const n = 46;
    const run = (o) => m.generate(prompt, { maxNewTokens: n, logits: true, ...o });
    const greedy = run({});
    assert.deepEqual([...run({ temperature: 2, topK: 1, seed: 9 }).tokens.data], [...greedy.tokens.data]);
    assert.deepEqual([...run({ temperature: 2, topP: 1e-9, seed: 9 }).tokens.data], [...greedy.tokens.data]);
    const a = run({ temperature: 1.5, seed: 1 });
    assert.deepEqual([...run({ temperature: 1.5, seed: 1 }).tokens.data], [...a.tokens.data], 'same seed');
    assert.notDeepEqual([...run({ temperature: 1.5, seed: 2 }).tokens.data], [...a.tokens.data], 'other seed');
    assert.notDeepEqual([...a.tokens.data], [...greedy.tokens.data]);
    for (const [topK, topP] of [[3, 1], [0, 0.6], [5, 0.8]]) {
      const g = run({ temperature: 0.8, topK, topP, seed: 77 });
      const rows = g.tokens.toArray();
      for (let b = 0; b < prompt.length; b++) {
        for (let s = 0; s < n; s++) {
          const row = g.logits.data.subarray((b * n + s) * 40, (b * n + s + 1) * 40);
          const order = [...row.keys()].sort((x, y) => (row[x] !== row[y] ? row[y] - row[x] : x - y));
          const keep = topK > 0 ? topK : 40;
          const p = order.slice(0, keep).map((j) => Math.exp((row[j] - row[order[0]]) / 0.8));
          const total = p.reduce((x, y) => x + y, 0);
          let mass = 0;
          let nucleus = 0;
          while (nucleus < keep && (nucleus === 0 || mass < topP * total)) mass += p[nucleus++];
          assert.ok(order.slice(0, nucleus).includes(rows[b][2 + s]),
            `token ${rows[b][2 + s]} outside topK ${topK} / topP ${topP}`);
        }
      }
    }
  } finally {
    m.dispose();
  }
});

// The temperature rule (docs/guarantees.md): a temperature > 0 so small that the logits divided by
// it leave double's range takes the greedy choice. At 1e-320 the sampler used to return the least
// likely token (20 seeds of 20).
test('tiny temperatures (1e-320, 5e-324, 1e-300, the smallest normal) give the greedy tokens, never the argmin', () => {
  const tiny = [1e-320, 5e-324, 1e-300, 2.2250738585072014e-308];
  const m = hs.createTransformer({ vocabSize: 40, maxLen: 24, dModel: 16, nLayers: 2, nHeads: 2, dMlp: 32, seed: 3 });
  // Logits of +-1e30 (the unembedding is its bias): 1e-300 overflows them too; a tie at the max
  // goes to the lower index, as greedy's does.
  const rows = hs.createTransformer({ vocabSize: 40, maxLen: 24, dModel: 16, nLayers: 2, nHeads: 2, dMlp: 32, seed: 4 });
  try {
    const bias = Float32Array.from({ length: 40 }, (_, j) => (((j * 17) % 40) - 20) * 5e28);
    bias[11] = bias[29] = 1e30;
    bias[5] = -1e30;
    const sd = rows.stateDict();
    sd['unembed.weight'] = { data: new Float32Array(40 * 16), shape: [40, 16] };
    sd['unembed.bias'] = { data: bias, shape: [40] };
    rows.loadStateDict(sd);
    const prompt = [[1, 2], [3, 4], [5, 6]];
    const n = 20;
    const greedy = m.generate(prompt, { maxNewTokens: n });
    for (const temperature of tiny) {
      for (let seed = 0; seed < 6; seed++) {
        const options = { maxNewTokens: n, temperature, seed, topK: seed % 2 === 0 ? 0 : 7, topP: seed < 3 ? 1 : 0.9 };
        const g = m.generate(prompt, { ...options, logits: true });
        assert.deepEqual([...g.tokens.data], [...greedy.tokens.data], `temperature ${temperature}, seed ${seed}`);
        const tokens = g.tokens.toArray();
        for (let b = 0; b < prompt.length; b++) {
          for (let s = 0; s < n; s++) {
            const row = g.logits.data.subarray((b * n + s) * 40, (b * n + s + 1) * 40);
            const argmin = row.indexOf(Math.min(...row));
            assert.notEqual(tokens[b][2 + s], argmin, `temperature ${temperature}, seed ${seed}: the least likely token`);
          }
        }
        const fromRows = rows.generate(prompt, options).tokens.toArray();
        for (const r of fromRows) assert.deepEqual(r.slice(2), new Array(n).fill(11), `temperature ${temperature}, seed ${seed}`);
      }
    }
  } finally {
    m.dispose();
    rows.dispose();
  }
});

test('bad prompts and options are refused naming them, and the model keeps working', () => {
  const m = hs.createTransformer({ vocabSize: 10, maxLen: 8, dModel: 8, nLayers: 1, nHeads: 2 });
  const before = m.generate([1, 2, 3], { maxNewTokens: 5, logits: true });
  try {
    const e = expectError(() => m.generate([1, 10, 3]), 'INVALID_ARGUMENT', 'prompt: token [0, 1] is 10',
      '(vocabSize 10)');
    assert.equal(e.argument, 'prompt');
    expectError(() => m.generate([1, 2.5]), 'INVALID_ARGUMENT', 'prompt[1]: expected an integer token id');
    expectError(() => m.generate([]), 'SHAPE_MISMATCH', 'prompt');
    expectError(() => m.generate([[[1]]]), 'SHAPE_MISMATCH', 'prompt: expected (T) or (B, T)');
    // The sequences of a batch share the cache's positions: prompts of different lengths are a
    // ragged array, refused naming the row (pad them, or generate them one by one).
    expectError(() => m.generate([[1, 2, 3], [4, 5]]), 'SHAPE_MISMATCH', 'prompt[1]');
    const cases = [
      [{ maxNewTokens: 6 }, 'INVALID_ARGUMENT', 'options.maxNewTokens', '[0, 5]', 'maxLen = 8'],
      [{ maxNewTokens: -1 }, 'INVALID_ARGUMENT', 'options.maxNewTokens', 'got -1'],
      [{ maxNewTokens: 1.5 }, 'INVALID_ARGUMENT', 'options.maxNewTokens', 'expected an integer, got number 1.5'],
      [{ maxNewTokens: '2' }, 'INVALID_ARGUMENT', 'options.maxNewTokens: expected a number'],
      [{ maxNewTokens: NaN }, 'INVALID_ARGUMENT', 'options.maxNewTokens', 'NaN'],
      [{ temperature: -1 }, 'INVALID_ARGUMENT', 'options.temperature', '>= 0'],
      [{ temperature: Infinity }, 'INVALID_ARGUMENT', 'options.temperature'],
      [{ topK: -1 }, 'INVALID_ARGUMENT', 'options.topK', 'got -1'],
      [{ topK: 0.5 }, 'INVALID_ARGUMENT', 'options.topK', 'integer'],
      [{ topP: 0 }, 'INVALID_ARGUMENT', 'options.topP', '(0, 1]'],
      [{ topP: 1.01 }, 'INVALID_ARGUMENT', 'options.topP', '(0, 1]'],
      [{ seed: -1 }, 'INVALID_ARGUMENT', 'options.seed', '[0, 2^53 - 1]'],
      [{ seed: 2 ** 60 }, 'INVALID_ARGUMENT', 'options.seed'],
      [{ logits: 1 }, 'INVALID_ARGUMENT', 'options.logits: expected true or false'],
      [{ headGates: [1, 1] }, 'SHAPE_MISMATCH', 'options.headGates', '[1, 2]'],
      [{ maxTokens: 3 }, 'INVALID_ARGUMENT', 'options.maxTokens: unknown option'],
    ];
    for (const [options, code, ...fragments] of cases) {
      const err = expectError(() => m.generate([1, 2, 3], options), code, ...fragments);
      // Errors of the core carry the argument's id; JS's type checks name it in the message only.
      const key = Object.keys(options)[0];
      if (err.argument !== undefined) assert.equal(err.argument, `options.${key}`, err.message);
      if (typeof options[key] === 'number' && Number.isFinite(options[key]) && !['maxTokens', 'logits'].includes(key)) {
        assert.equal(err.argument, `options.${key}`, `the core refused ${JSON.stringify(options)}`);
      }
    }
    expectError(() => m.generate([1, 2, 3], 'greedy'), 'INVALID_ARGUMENT', 'options: expected an object');
    const after = m.generate([1, 2, 3], { maxNewTokens: 5, logits: true });
    assert.deepEqual([...after.tokens.data], [...before.tokens.data]);
    assert.deepEqual(bits(after.logits.data), bits(before.logits.data));
  } finally {
    m.dispose();
  }
  expectError(() => m.generate([1]), 'DISPOSED');
});

test('maxNewTokens 0 returns the prompt; prompts of maxLen tokens can only take 0', () => {
  const m = hs.createTransformer({ vocabSize: 10, maxLen: 4, dModel: 8 });
  try {
    assert.deepEqual([...m.generate([[1, 2, 3, 4]], { maxNewTokens: 0 }).tokens.data], [1, 2, 3, 4]);
    expectError(() => m.generate([[1, 2, 3, 4]]), 'INVALID_ARGUMENT', 'options.maxNewTokens: expected an integer in [0, 0]');
  } finally {
    m.dispose();
  }
});

test('the threaded module generates the same tokens and logits, bit for bit', async () => {
  const mt = await init({ threads: 2 });
  // Big enough that the prompt's matmuls and attention take the threaded paths.
  const config = { vocabSize: 96, maxLen: 96, dModel: 128, nLayers: 2, nHeads: 4, dMlp: 512, seed: 4 };
  const a = hs.createTransformer(config);
  const b = mt.createTransformer(config);
  try {
    const prompt = [0, 1, 2, 3].map((s) => Array.from({ length: 40 }, (_, i) => (i * 29 + s * 7 + 5) % 96));
    for (const options of [{ maxNewTokens: 56, logits: true }, { maxNewTokens: 56, logits: true, temperature: 0.7, topK: 20, seed: 3 }]) {
      const x = a.generate(prompt, options);
      const y = b.generate(prompt, options);
      assert.deepEqual([...y.tokens.data], [...x.tokens.data]);
      assert.deepEqual(bits(y.logits.data), bits(x.logits.data));
    }
  } finally {
    a.dispose();
    b.dispose();
    mt.close();
  }
});

test('greedy tokens equal PyTorch\'s on every attention variant (tests/golden/generate)', (t) => {
  const dir = new URL('../golden/generate/', import.meta.url);
  const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
  assert.ok(files.length >= 9, `${files.length} generation goldens`);
  let tokens = 0;
  for (const f of files) {
    const doc = JSON.parse(readFileSync(new URL(f, dir), 'utf8'));
    // The golden's PyTorch-named config, in the JS API's names (through the schema).
    const config = Object.fromEntries(Object.entries(doc.config).map(([k, v]) => [field(TRANSFORMER_SCHEMA, k).js, v]));
    const m = hs.createTransformer({ ...config, seed: null });
    try {
      m.loadStateDict(doc.state_dict);  // (nested arrays, as the API takes them)
      const g = m.generate(doc.prompt, { maxNewTokens: doc.max_new_tokens });
      assert.deepEqual(g.tokens.toArray(), doc.expected.tokens, f);
      tokens += doc.prompt.length * doc.max_new_tokens;
    } finally {
      m.dispose();
    }
  }
  t.diagnostic(`${files.length} generation goldens: ${tokens} greedy tokens equal PyTorch's`);
});
