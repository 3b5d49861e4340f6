// The transformer through each of headscope's entries gives the same bits: the single-threaded
// module (init()), the threaded module (init({ threads: 2 }): every output float computed by one
// thread with the same operations) and the Worker entry (initWorker(): the single-threaded module
// in a worker thread). Logits, every hook, stateDict() and generate(), for configs with and
// without an MLP, pre / post / no norm, learned / sinusoidal / no positions, B > 1 and T = maxLen,
// sizes past the threaded paths' thresholds.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { init } from '../../web/lib/index.js';
import { initWorker } from '../../web/lib/worker-client.js';
import { assertSameResultBits } from './same-bits.js';
import { randomStateDict, randomTokens } from './transformer-helpers.js';
import { mulberry32 } from './helpers.js';

// The SIMD128 build, which the threaded module is: the bits compared with it below are a build's
// (under --experimental-wasm-relaxed-simd init() would load the relaxed one).
const st = await init({ simd: 'simd128' });
const mt = await init({ threads: 2 });
const remote = await initWorker();

// Whether the calling thread's Transformer has generate() (it is being added): its tests run then.
const probe = st.createTransformer({ vocabSize: 2, maxLen: 2, dModel: 2 });
const HAS_GENERATE = typeof probe.generate === 'function';
probe.dispose();

after(async () => {
  assert.equal(st.liveHandles(), 0, 'single-threaded module: live handles left');
  assert.equal(mt.liveHandles(), 0, 'threaded module: live handles left');
  assert.equal(await remote.liveHandles(), 0, 'worker: live handles left');
  await remote.terminate();
});

const CASES = [
  { name: 'pre-norm, learned positions, GELU MLP, B = 4, T = maxLen = 64 (threaded sizes)',
    config: { vocabSize: 50, maxLen: 64, dModel: 128, nLayers: 2, nHeads: 4, dMlp: 512 }, batch: 4 },
  { name: 'post-norm, sinusoidal, ReLU MLP, not causal, B = 3, T = maxLen = 40',
    config: { vocabSize: 37, maxLen: 40, dModel: 96, nLayers: 3, nHeads: 6, dMlp: 200, norm: 'post',
      positions: 'sinusoidal', act: 'relu', causal: false }, batch: 3 },
  { name: 'no norm, no positions, attention-only, no bias, B = 2, T = maxLen = 16 (serial sizes)',
    config: { vocabSize: 29, maxLen: 16, dModel: 24, nLayers: 1, nHeads: 3, norm: 'none', positions: 'none',
      bias: false }, batch: 2 },
  { name: 'pre-norm, sinusoidal, GELU MLP, lnEps 1e-3, unbatched (T) = maxLen = 130',
    config: { vocabSize: 300, maxLen: 130, dModel: 64, nLayers: 2, nHeads: 2, dMlp: 256, positions: 'sinusoidal',
      lnEps: 1e-3 }, batch: null },
];

// The same model in the three entries: [single-threaded, threaded, remote].
async function triple(config, stateDict) {
  const models = [st.createTransformer(config), mt.createTransformer(config), await remote.createTransformer(config)];
  if (stateDict !== undefined) {
    models[0].loadStateDict(stateDict);
    models[1].loadStateDict(stateDict);
    await models[2].loadStateDict(stateDict);
  }
  return models;
}

async function disposeAll(models) {
  for (const m of models) await m.dispose();
}

// (nLayers, nHeads) gates with a head switched off and one halved.
function gates({ nLayers = 1, nHeads = 1 }, seed) {
  const rng = mulberry32(seed);
  const g = Array.from({ length: nLayers }, () => Array.from({ length: nHeads }, () => rng() * 1.5));
  g[0][0] = 0;
  g[nLayers - 1][nHeads - 1] = 0.5;
  return g;
}

for (const [i, c] of CASES.entries()) {
  test(`${c.name}: logits, every hook and stateDict() bit for bit in all three entries`, async () => {
    const probeModel = st.createTransformer(c.config);
    const stateDict = randomStateDict(probeModel.parameterShapes(), 100 + i);
    const hooks = probeModel.hookNames();
    probeModel.dispose();
    const [a, b, r] = await triple(c.config, stateDict);
    try {
      const sd = a.stateDict();
      assertSameResultBits(b.stateDict(), sd, 'threaded stateDict');
      assertSameResultBits(await r.stateDict(), sd, 'worker stateDict');
      const tokens = randomTokens(c.config.vocabSize, c.batch, c.config.maxLen, 200 + i);
      const plain = a.forward(tokens);
      for (const options of [{}, { hooks }, { hooks, headGates: gates(c.config, 300 + i) }]) {
        const want = a.forward(tokens, options);
        const what = `options ${Object.keys(options).join(', ') || 'none'}`;
        assertSameResultBits(b.forward(tokens, options), want, `threaded, ${what}`);
        assertSameResultBits(await r.forward(tokens, options), want, `worker, ${what}`);
        if (options.headGates === undefined) {
          // Asking for hooks changes no logit.
          assertSameResultBits(want.logits, plain.logits, `logits with ${what}`);
        }
      }
      const expectedShape = c.batch === null ? [c.config.maxLen, c.config.vocabSize]
        : [c.batch, c.config.maxLen, c.config.vocabSize];
      assert.deepEqual(plain.logits.shape, expectedShape);
      assert.ok(plain.logits.data.every(Number.isFinite), 'finite logits');
    } finally {
      await disposeAll([a, b, r]);
    }
  });
}

test('seeded weights (no loadStateDict): the same weights and logits in all three entries', async () => {
  const config = { ...CASES[1].config, seed: 12345 };
  const [a, b, r] = await triple(config);
  try {
    const sd = a.stateDict();
    assertSameResultBits(b.stateDict(), sd, 'threaded stateDict');
    assertSameResultBits(await r.stateDict(), sd, 'worker stateDict');
    const tokens = randomTokens(config.vocabSize, 2, 17, 7);
    const want = a.forward(tokens, { hooks: ['blocks.2.attn.hook_pattern', 'blocks.2.hook_resid_post'] });
    assertSameResultBits(b.forward(tokens, { hooks: Object.keys(want.hooks) }), want, 'threaded');
    assertSameResultBits(await r.forward(tokens, { hooks: Object.keys(want.hooks) }), want, 'worker');
  } finally {
    await disposeAll([a, b, r]);
  }
});

test('generate: the same tokens and logits in all three entries, greedy and sampled',
  { skip: HAS_GENERATE ? false : 'the calling thread\'s Transformer has no generate() yet' }, async () => {
    const c = CASES[0];
    const probeModel = st.createTransformer(c.config);
    const stateDict = randomStateDict(probeModel.parameterShapes(), 400);
    probeModel.dispose();
    const [a, b, r] = await triple(c.config, stateDict);
    try {
      const prompt = randomTokens(c.config.vocabSize, 2, 40, 401);
      for (const options of [{ maxNewTokens: 12, logits: true },
        { maxNewTokens: 12, temperature: 0.8, topK: 10, topP: 0.9, seed: 3, logits: true },
        { maxNewTokens: 24, headGates: gates(c.config, 402) }]) {
        const want = a.generate(prompt, options);
        assert.deepEqual(want.tokens.shape, [2, 40 + options.maxNewTokens]);
        assertSameResultBits(b.generate(prompt, options), want, `threaded ${JSON.stringify(options)}`);
        assertSameResultBits(await r.generate(prompt, options), want, `worker ${JSON.stringify(options)}`);
      }
      // Unbatched prompt.
      const want = a.generate(prompt[0], { maxNewTokens: 3, logits: true });
      assert.deepEqual(want.tokens.shape, [43]);
      assertSameResultBits(await r.generate(prompt[0], { maxNewTokens: 3, logits: true }), want, 'worker (T)');
    } finally {
      await disposeAll([a, b, r]);
    }
  });
