// The Train view's attention-sinks parts in Node, over init()'s engine: the state's attnSinks
// becomes the model's config (trainSetup: only when on); the layer case (layer-case.js) carries
// attn_sinks and the layer's sinks, and its MultiheadAttention gives the layer's hook_pattern (and
// without the sinks does not); the panel's numbers (variants-sinks.js sinkNumbers) are the model's
// logits and 1 - the held-out rows' sums of hook_pattern.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { init } from '../../web/lib/index.js';
import { makeTask } from '../../web/lib/tasks.js';
import { applyTrainState, defaultTrainState, trainSetup } from '../../web/views/train/state.js';
import { layerCase } from '../../web/views/train/layer-case.js';
import { sinkNumbers } from '../../web/views/train/variants-sinks.js';

const hs = await init({ simd: 'simd128' });
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

test('trainSetup: attnSinks in the config only when on', () => {
  const task = makeTask('induction', { seed: 1 });
  assert.ok(!('attnSinks' in trainSetup(defaultTrainState(), task).model), 'the default config as before sinks');
  assert.equal(trainSetup(applyTrainState({ attnSinks: true }, defaultTrainState()), task).model.attnSinks, true);
});

test('the layer case carries the sinks (the layer\'s pattern); the panel\'s numbers are the model\'s', async () => {
  const state = applyTrainState({ attnSinks: true, heads: 4, kvHeads: 2, steps: 30 }, defaultTrainState());
  const task = makeTask(state.task, { seed: state.seed });
  const setup = trainSetup(state, task);
  const model = hs.createTransformer(setup.model);
  try {
    model.setOptimizer(setup.optimizer);
    for (let s = 0; s < state.steps; s++) {
      const { tokens, targets } = task.batch(state.batch, s);
      assert.ok(model.trainStep(tokens, targets).stepped);
    }
    const hooks = Array.from({ length: state.layers }, (_, l) => `blocks.${l}.attn.hook_pattern`);
    const probe = task.probe();
    const probeRun = model.forward(probe.tokens, { hooks });
    const held = task.heldOut(64, 0);
    const heldRun = model.forward(held.tokens, { hooks });
    const sd = model.stateDict();
    const numbers = await sinkNumbers(model, heldRun, state.layers);
    const T = task.seqLen;
    for (let l = 0; l < state.layers; l++) {
      const logits = Array.from(sd[`blocks.${l}.attn.sinks`].data);
      assert.ok(logits.some((v) => v !== 0), `layer ${l}: 30 steps moved the sinks (${logits})`);
      assert.deepEqual(numbers[l].logits, logits);
      // 1 - the row sum, over the 64 x T rows of each head.
      const P = heldRun.hooks[hooks[l]].data;
      for (let h = 0; h < state.heads; h++) {
        let mass = 0;
        for (let b = 0; b < 64; b++) for (let i = 0; i < T; i++) {
          let sum = 0;
          for (let j = 0; j < T; j++) sum += P[((b * state.heads + h) * T + i) * T + j];
          mass += 1 - sum;
        }
        assert.ok(Math.abs(numbers[l].mass[h] - mass / (64 * T)) < 1e-12, `layer ${l} head ${h}: ${numbers[l].mass[h]} vs ${mass / (64 * T)}`);
        assert.ok(numbers[l].mass[h] > 0 && numbers[l].mass[h] < 1);
      }
      const c = await layerCase({ model, probe, state, engine: hs }, l);
      assert.equal(c.config.attn_sinks, true);
      assert.deepEqual(c.state_dict.sinks, logits);
      const hook = probeRun.hooks[hooks[l]].data;
      const q = c.inputs.query;
      const weights = (config, stateDict) => {
        const mha = hs.createMultiheadAttention(config);
        try {
          mha.loadStateDict(stateDict);
          return mha.forward(q, q, q, { attnMask: c.inputs.attn_mask, averageAttnWeights: false }).weights.data;
        } finally {
          mha.dispose();
        }
      };
      const base = { embedDim: c.config.embed_dim, numHeads: c.config.num_heads, numKvHeads: c.config.num_kv_heads ?? null };
      const worst = (w) => w.reduce((m, x, k) => Math.max(m, Math.abs(x - hook[k])), 0);
      assert.ok(worst(weights({ ...base, attnSinks: true }, c.state_dict)) < 1e-5, `layer ${l}: the case's weights are hook_pattern`);
      const { sinks, ...plain } = c.state_dict;
      assert.ok(worst(weights(base, plain)) > 1e-3, `layer ${l}: without the sinks the weights differ`);
    }
  } finally {
    model.dispose();
  }
});
