// The attention variants in the Train view, in Chromium: the K/V heads, attention window and
// positions controls set a grouped-query, sliding-window ALiBi model that trains; the variants
// panel's numbers are checked against the engine's, computed in the same page through the public
// API (the KV cache's bytes: hs.kvCacheBytes; the window's band: the model's hook_pattern; ALiBi's
// bias: hook_attn_scores minus q . k / sqrt(dHead) from hook_q and hook_k, and each head's mean
// attention distance: the engine's headStats.distance over the layer's case); the URL round trip;
// the Heads view opens such a head with the layer's own pattern.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.js';
import { axe } from './axe.js';
import { fromLink, settleTrain as settle } from './train-helpers.js';

const TRAIN = '#panel-train';

// The panel's tables as numbers: [caption, rows of data-value numbers (the th's text first)].
const readTables = () => [...document.querySelectorAll('#panel-train .hs-train-variants-table')].map((t) => [
  t.caption.textContent,
  [...t.tBodies[0].rows].map((r) => [r.cells[0].textContent, ...[...r.cells].slice(1).map((c) => Number(c.dataset.value))]),
]);

test('the variant controls: GQA, a window and ALiBi train; the panel is the engine\'s numbers; the URL round-trips', { timeout: 240_000 }, async () => {
  const p = await openPage('/demo/#train?steps=0');
  try {
    const { page } = p;
    await settle(page, { heads: 2, kvHeads: 2, attnWindow: 0 });
    // The controls, as a reader sets them.
    await page.selectOption(`${TRAIN} select[name="heads"]`, '4');
    await settle(page, { heads: 4, kvHeads: 4 });
    assert.deepEqual(await page.$$eval(`${TRAIN} select[name="kvHeads"] option`, (o) => o.map((x) => x.textContent)),
      ['4 (MHA)', '2 (GQA)', '1 (MQA)']);
    await page.selectOption(`${TRAIN} select[name="kvHeads"]`, '2');
    await page.selectOption(`${TRAIN} select[name="positions"]`, 'alibi');
    await settle(page, { kvHeads: 2, positions: 'alibi' });
    const windows = await page.$$eval(`${TRAIN} select[name="attnWindow"] option`, (o) => o.map((x) => x.value));
    assert.deepEqual(windows, ['0', '1', '2', '4', '8', '16'], 'full, then powers of two below the task\'s length');
    await page.selectOption(`${TRAIN} select[name="attnWindow"]`, '8');
    await settle(page, { attnWindow: 8 });
    await page.evaluate(() => window.headscopeDemo.train.step(30));
    await settle(page, { steps: 30 });
    const hash = await page.evaluate(() => location.hash);
    assert.match(hash, /&heads=4&kvHeads=2&.*&positions=alibi&attnWindow=8&.*steps=30/);

    // The engine's numbers, in this page, through the public API.
    const engine = await page.evaluate(async () => {
      const demo = window.headscopeDemo;
      const hs = demo.engine;
      const view = demo.train;
      const s = view.getState();
      const doc = await view.exportModel();   // the trained model: its config and weights
      const { parseCase } = await import('/lib/case.js');
      const config = parseCase(doc).config;
      const T = config.maxLen;
      const kv = [4, 2, 1].map((G) => hs.kvCacheBytes({ ...config, nKvHeads: G }, { batch: 1, positions: T }));
      const model = hs.createTransformer({ ...config, seed: null });
      const hooks = [];
      for (let l = 0; l < s.layers; l++) hooks.push(`blocks.${l}.attn.hook_attn_scores`, `blocks.${l}.attn.hook_q`, `blocks.${l}.attn.hook_k`, `blocks.${l}.attn.hook_pattern`);
      try {
        model.loadStateDict(doc.state_dict);
        const run = model.forward(doc.inputs.tokens, { hooks });
        const H = s.heads, G = s.kvHeads, dh = s.dModel / H;
        // bias(h, i, j) = scores - (q_i / sqrt(dh)) . k_j, at distances 1 and T - 1 (row i, key 0).
        const bias = (l, h, i, j) => {
          const q = run.hooks[`blocks.${l}.attn.hook_q`].data, k = run.hooks[`blocks.${l}.attn.hook_k`].data;
          const g = Math.floor(h / (H / G));
          let dot = 0;
          for (let x = 0; x < dh; x++) dot += (q[(h * T + i) * dh + x] / Math.fround(Math.sqrt(dh))) * k[(g * T + j) * dh + x];
          return run.hooks[`blocks.${l}.attn.hook_attn_scores`].data[(h * T + i) * T + j] - dot;
        };
        const biases = Array.from({ length: H }, (_, h) => [bias(0, h, 1, 0), bias(1, h, T - 1, T - 8), bias(0, h, T - 1, T - 8) / 7]);
        // Mean attention distance per head: the engine's head statistics over each layer's case.
        const distances = [];
        for (let l = 0; l < s.layers; l++) {
          const c = await view.layerCase(l);
          const mha = hs.createMultiheadAttention({ embedDim: c.config.embed_dim, numHeads: c.config.num_heads,
            numKvHeads: c.config.num_kv_heads ?? null, bias: true });
          try {
            mha.loadStateDict(c.state_dict);
            const q = c.inputs.query;
            const tr = mha.trace(q, q, q, { attnMask: c.inputs.attn_mask, averageAttnWeights: false, headStats: true });
            distances.push(Array.from(tr.headStats.distance.data));
            // The layer's case gives the layer's own pattern (the Heads view shows this head as trained).
            const pat = run.hooks[`blocks.${l}.attn.hook_pattern`].data;
            let worst = 0;
            tr.weights.data.forEach((v, k) => { worst = Math.max(worst, Math.abs(v - pat[k])); });
            distances.push(worst);
          } finally {
            mha.dispose();
          }
        }
        const patterns = hooks.filter((n) => n.endsWith('hook_pattern')).map((n) => Array.from(run.hooks[n].data));
        return { kv, slopes: hs.alibiSlopes(H), biases, distances, patterns, T };
      } finally {
        model.dispose();
      }
    });
    const tables = await page.evaluate(readTables);
    assert.equal(tables.length, 3, 'the KV cache, the window and ALiBi');
    const [[kvCaption, kvRows], [, bandRows], [, alibiRows]] = tables;
    // KV cache: MHA, GQA (this model), MQA: the engine's bytes; 4 and 2 times smaller.
    assert.match(kvCaption, /one sequence of 32 positions/);
    assert.deepEqual(kvRows.map((r) => r[0]), ['MHA', 'GQA (this model)', 'MQA']);
    assert.deepEqual(kvRows.map((r) => r[2]), engine.kv);
    assert.deepEqual(engine.kv, [2 * 2 * 32 * 32 * 4, 2 * 2 * 32 * 16 * 4, 2 * 2 * 32 * 8 * 4]);
    // The window's band: every weight outside it is 0 in the engine's pattern, as the panel says.
    const { T } = engine;
    engine.patterns.forEach((P, l) => {
      let outside = 0;
      for (let h = 0; h < 4; h++) {
        for (let i = 0; i < T; i++) {
          for (let j = 0; j < T; j++) {
            if (j > i || j <= i - 8) {
              outside++;
              assert.equal(P[(h * T + i) * T + j], 0, `layer ${l} head ${h} (${i}, ${j}) outside the band`);
            }
          }
        }
      }
      assert.deepEqual(bandRows[l].slice(0, 3), [`layer ${l}`, outside, 0]);
      assert.ok(Math.abs(bandRows[l][3] - 1) < 1e-5, 'each row\'s band holds its attention');
    });
    // ALiBi: slopes 1/4 ... 1/256 (4 heads); the panel's bias is the scores' bias, head by head.
    assert.deepEqual(engine.slopes, [0.25, 0.0625, 0.015625, 0.00390625]);
    alibiRows.forEach((row, h) => {
      const [name, slope, d1, dLast, dist0, dist1] = row;
      assert.equal(name, `H${h + 1}`);
      assert.equal(slope, engine.slopes[h]);
      const [b1, bFar, perStep] = engine.biases[h];
      assert.ok(Math.abs(d1 - b1) <= 2e-5, `head ${h + 1}: bias at distance 1 ${d1} vs the scores' ${b1}`);
      assert.ok(Math.abs(dLast - bFar * (T - 1) / 7) <= 2e-4 * (T - 1), `head ${h + 1}: bias at distance ${T - 1}`);
      assert.ok(Math.abs(perStep + slope) <= 2e-4, `head ${h + 1}: the scores' bias per step is -slope`);
      // The mean attention distance: the engine's headStats.distance over the layer's case.
      assert.ok(Math.abs(dist0 - engine.distances[0][h]) <= 1e-4, `head ${h + 1} layer 0: ${dist0} vs ${engine.distances[0][h]}`);
      assert.ok(Math.abs(dist1 - engine.distances[2][h]) <= 1e-4, `head ${h + 1} layer 1: ${dist1} vs ${engine.distances[2][h]}`);
    });
    assert.ok(engine.distances[1] < 1e-5 && engine.distances[3] < 1e-5, `the layer cases give the layers' patterns (${engine.distances[1]}, ${engine.distances[3]})`);
    assert.equal(await page.locator(`${TRAIN} .hs-train-alibi-head canvas`).count(), 4, 'a bias matrix per head');
    // The new controls and the panel pass axe (labels, contrast, tables) with every section shown.
    const violations = await axe(page, '#panel-train');
    assert.deepEqual(violations, [], JSON.stringify(violations, null, 2));

    // The URL: the same setting opens from the link.
    const before = await page.evaluate(() => window.headscopeDemo.train.getState());
    const again = await fromLink(hash, { steps: 30, read: readTables });
    assert.deepEqual(again.state, before);
    assert.deepEqual(again.panel, tables, 'the same run, the same panel');
    assert.deepEqual(again.pageErrors, []);
    // Export then Load model carries n_kv_heads and attn_window.
    const doc = await page.evaluate(() => window.headscopeDemo.train.exportModel());
    assert.equal(doc.config.n_kv_heads, 2);
    assert.equal(doc.config.attn_window, 8);
    assert.equal(doc.config.positions, 'alibi');
    await page.evaluate(() => window.headscopeDemo.train.update({ kvHeads: 4, attnWindow: 0, positions: 'learned', steps: 0 }));
    await settle(page, { kvHeads: 4, attnWindow: 0 });
    assert.equal(await page.evaluate(() => document.querySelectorAll('#panel-train .hs-train-variants-table').length), 1, 'MHA, full attention, learned positions: the KV cache only');
    await page.evaluate((d) => window.headscopeDemo.train.loadModel(d), doc);
    await settle(page, { kvHeads: 2, attnWindow: 8, positions: 'alibi', steps: 30 });
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});
