// The Train view's RoPE parts in Node, over init()'s engine: the state's rope fields become the
// model's config (trainSetup) and the layer case's (layer-case.js: rope_dims by the Transformer's
// RopeDims rule, rope_layout, rope_base), whose MultiheadAttention gives each layer's hook_pattern;
// the variants panel's RoPE numbers (variants-rope.js ropeNumbers): scores unchanged by a shift of
// query and key together, the other layout equal after the rows' permutation and not without it.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { init } from '../../web/lib/index.js';
import { makeTask } from '../../web/lib/tasks.js';
import { applyTrainState, defaultTrainState, ropeDims, trainSetup } from '../../web/views/train/state.js';
import { layerCase } from '../../web/views/train/layer-case.js';
import { layoutSource, ropeNumbers, SHIFT } from '../../web/views/train/variants-rope.js';

const hs = await init({ simd: 'simd128' });
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

// A Train view's shared fields (view.js's t) for `patch`, trained `steps` steps as the view does.
function trained(patch, steps) {
  const state = applyTrainState({ ...patch, steps }, defaultTrainState());
  const task = makeTask(state.task, { seed: state.seed });
  const setup = trainSetup(state, task);
  const model = hs.createTransformer(setup.model);
  model.setOptimizer(setup.optimizer);
  for (let s = 0; s < steps; s++) {
    const { tokens, targets } = task.batch(state.batch, s);
    model.trainStep(tokens, targets);
  }
  const probe = task.probe();
  const hooks = Array.from({ length: state.layers }, (_, l) => `blocks.${l}.attn.hook_pattern`);
  return { state, task, model, probe, engine: hs, generation: 0, last: { probeRun: model.forward(probe.tokens, { hooks }) } };
}

test('layoutSource: half <-> interleaved pairs, the pass-through dims kept; the two maps are inverse', () => {
  // rope.test.js's map: half's dim j reads interleaved's dim src[j].
  assert.deepEqual(layoutSource(8, 8, 'interleaved', 'half'), [0, 2, 4, 6, 1, 3, 5, 7]);
  assert.deepEqual(layoutSource(8, 4, 'interleaved', 'half'), [0, 2, 1, 3, 4, 5, 6, 7]);
  assert.deepEqual(layoutSource(8, 8, 'half', 'interleaved'), [0, 4, 1, 5, 2, 6, 3, 7]);
  for (const [dh, r] of [[8, 8], [8, 4], [16, 2], [6, 6]]) {
    const there = layoutSource(dh, r, 'half', 'interleaved');
    const back = layoutSource(dh, r, 'interleaved', 'half');
    assert.deepEqual(there.map((j) => back[j]).sort((a, b) => a - b), Array.from({ length: dh }, (_, j) => j));
    assert.deepEqual(back.map((j) => there[j]), Array.from({ length: dh }, (_, j) => j), `dh ${dh} r ${r}`);
  }
});

test('a rope model\'s layer case carries the turn and gives the trained layer\'s hook_pattern (1e-5); its RoPE numbers', async (t) => {
  const setups = [
    { positions: 'rope' },
    { positions: 'rope', ropeLayout: 'interleaved', heads: 4, kvHeads: 2 },
    { positions: 'rope', ropeFraction: 0.5, ropeBase: 100, layers: 1, mlp: true, norm: 'post' },
  ];
  for (const patch of setups) {
    const v = trained(patch, 30);
    const what = JSON.stringify(patch);
    try {
      const { state } = v;
      const T = v.task.seqLen;
      assert.equal(trainSetup(state, v.task).model.ropeLayout, state.ropeLayout);
      for (let l = 0; l < state.layers; l++) {
        const c = await layerCase(v, l);
        assert.deepEqual([c.config.rope_dims, c.config.rope_layout, c.config.rope_base], [ropeDims(state), state.ropeLayout, state.ropeBase], what);
        const mha = hs.createMultiheadAttention({ embedDim: c.config.embed_dim, numHeads: c.config.num_heads,
          numKvHeads: c.config.num_kv_heads ?? null, ropeDims: c.config.rope_dims, ropeLayout: c.config.rope_layout, ropeBase: c.config.rope_base });
        try {
          mha.loadStateDict(c.state_dict);
          const q = c.inputs.query;
          const w = mha.forward(q, q, q, { attnMask: c.inputs.attn_mask, averageAttnWeights: false }).weights.data;
          const hook = v.last.probeRun.hooks[`blocks.${l}.attn.hook_pattern`].data;
          let worst = 0;
          w.forEach((x, k) => { worst = Math.max(worst, Math.abs(x - hook[k])); });
          assert.ok(worst < 1e-5, `${what} layer ${l}: the layer case's weights vs hook_pattern: ${worst}`);
          // Without the turn the case is another attention (what the view showed before rope_dims).
          const plain = hs.createMultiheadAttention({ embedDim: c.config.embed_dim, numHeads: c.config.num_heads, numKvHeads: c.config.num_kv_heads ?? null });
          plain.loadStateDict(c.state_dict);
          const unturned = plain.forward(q, q, q, { attnMask: c.inputs.attn_mask, averageAttnWeights: false }).weights.data;
          plain.dispose();
          let off = 0;
          unturned.forEach((x, k) => { off = Math.max(off, Math.abs(x - hook[k])); });
          assert.ok(off > 1e-3, `${what} layer ${l}: without rope_dims the weights differ (${off})`);
        } finally {
          mha.dispose();
        }
        const n = await ropeNumbers(v, l);
        t.diagnostic(`${what} layer ${l}: shift ${SHIFT}: ${n.shifted.toExponential(2)} (relative ${n.relative.toExponential(2)}, ` +
          `max |s| ${n.scale.toFixed(2)}), key moved: ${n.apart.toFixed(3)}; case vs hook ${n.caseVsHook.toExponential(2)}; ` +
          `${n.other} permuted ${n.permuted.toExponential(2)}, unpermuted ${n.unpermuted.toFixed(3)}`);
        assert.ok(n.relative <= 1e-5, `${what} layer ${l}: shifted scores ${n.relative}`);
        assert.ok(n.apart >= 1e-2 * n.scale, `${what} layer ${l}: the same vectors further apart score the same (${n.apart})`);
        assert.ok(n.caseVsHook < 1e-5, `${what}: case vs hook ${n.caseVsHook}`);
        assert.ok(n.permuted < 1e-5, `${what}: the permuted layout ${n.permuted}`);
        assert.ok(n.unpermuted > 1e-3, `${what}: the wrong layout without the permutation ${n.unpermuted}`);
        assert.equal(n.other, state.ropeLayout === 'half' ? 'interleaved' : 'half');
        assert.equal(T, c.inputs.query.length);
      }
    } finally {
      v.model.dispose();
    }
  }
});
