// RoPE in the Train view, in Chromium: positions rope and its layout set in the form as a reader
// does, a few steps trained, and the variants panel's RoPE tables checked against the engine's
// numbers computed in the same page through the public API (a Transformer loaded with the
// exported model for each layer's input and hook_pattern, and MultiheadAttentions with ropeDims
// built here from its weights: the scores of a repeated sequence, the other layout with W_Q / W_K
// rows permuted by this file's own map, and without); axe on the panel; the URL round trip; export
// and Load model carrying rope_layout, rope_base and rope_fraction; a head opened in the Heads view
// is the trained head, and the Walkthrough says why it cannot show it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage, screenshot } from './harness.js';
import { axe } from './axe.js';
import { fromLink, openTrainedHead } from './train-helpers.js';

const TRAIN = '#panel-train';

// The RoPE tables as numbers: { shift: rows, layouts: rows } (the th's text, then data-value numbers).
const readRope = () => Object.fromEntries(['shift', 'layouts'].map((name) => {
  const t = document.querySelector(`#panel-train .hs-train-rope-${name}`);
  return [name, t ? [...t.tBodies[0].rows].map((r) => [r.cells[0].textContent, ...[...r.cells].slice(1).map((c) => Number(c.dataset.value))]) : null];
}));

async function settle(page, want) {
  await page.waitForFunction((w) => {
    const s = window.headscopeDemo.train.getState();
    const rope = document.querySelector('#panel-train .hs-train-variants-rope');
    return Object.entries(w).every(([k, v]) => s[k] === v) &&
      document.querySelector('#panel-train .hs-train')?.dataset.ready === 'true' &&
      document.querySelector('#panel-train .hs-train-variants')?.dataset.ready === 'true' &&
      document.querySelector('#panel-train .hs-train-variants').dataset.drawn === JSON.stringify(s) &&
      (s.positions !== 'rope' || (rope.dataset.ready === 'true' && rope.dataset.step === String(s.steps)));
  }, want, { timeout: 60_000 });
}

// In the page: the engine's numbers for the trained model of `doc` (exportModel's), layer by layer.
async function engineNumbers(doc) {
  const hs = window.headscopeDemo.engine;
  const { parseCase } = await import('/lib/case.js');
  const config = parseCase(doc).config;
  const { dModel: E, nHeads: H, nLayers, ropeLayout, ropeBase, ropeFraction } = config;
  const G = config.nKvHeads ?? H, dh = E / H, T = config.maxLen, r = 2 * Math.floor(ropeFraction * dh / 2);
  const model = hs.createTransformer({ ...config, seed: null });
  const out = [];
  try {
    model.loadStateDict(doc.state_dict);
    const hooks = [];
    for (let l = 0; l < nLayers; l++) hooks.push(`blocks.${l}.ln1.hook_normalized`, `blocks.${l}.attn.hook_pattern`);
    const run = model.forward(doc.inputs.tokens, { hooks });
    const other = ropeLayout === 'half' ? 'interleaved' : 'half';
    // Dim j of `other` reads dim src[j] of the trained layout.
    const src = Array.from({ length: dh }, (_, j) => (j >= r ? j : other === 'half'
      ? (j < r / 2 ? 2 * j : 2 * (j - r / 2) + 1) : (j % 2 === 0 ? j / 2 : (j - 1) / 2 + r / 2)));
    const causal = Array.from({ length: T }, (_, i) => Array.from({ length: T }, (_, j) => j > i));
    const max = (a, b) => a.reduce((m, x, k) => Math.max(m, Math.abs(x - b[k])), 0);
    for (let l = 0; l < nLayers; l++) {
      const x = run.hooks[`blocks.${l}.ln1.hook_normalized`].data;
      const rows = Array.from({ length: T }, (_, i) => Array.from(x.subarray(i * E, (i + 1) * E)));
      const sd = {};
      for (const k of ['in_proj_weight', 'in_proj_bias', 'out_proj.weight', 'out_proj.bias']) sd[k] = doc.state_dict[`blocks.${l}.attn.${k}`];
      const mine = hs.createMultiheadAttention({ embedDim: E, numHeads: H, numKvHeads: config.nKvHeads, ropeDims: r, ropeLayout, ropeBase });
      const theirs = hs.createMultiheadAttention({ embedDim: E, numHeads: H, numKvHeads: config.nKvHeads, ropeDims: r, ropeLayout: other, ropeBase });
      try {
        mine.loadStateDict(sd);
        const periodic = rows.map((_, i) => rows[i % 4]);
        const s = mine.trace(periodic, periodic, periodic, { averageAttnWeights: false }).scores.data;
        let shifted = 0, apart = 0, scale = 0;
        for (let h = 0; h < H; h++) for (let m = 0; m < T; m++) for (let n = 0; n < T; n++) {
          const at = (i, j) => (h * T + i) * T + j;
          scale = Math.max(scale, Math.abs(s[at(m, n)]));
          if (m + 4 < T && n + 4 < T) {
            shifted = Math.max(shifted, Math.abs(s[at(m, n)] - s[at(m + 4, n + 4)]));
            apart = Math.max(apart, Math.abs(s[at(m, n)] - s[at(m, n + 4)]));
          }
        }
        const options = { attnMask: causal, averageAttnWeights: false };
        const own = mine.forward(rows, rows, rows, options).weights.data;
        const hook = run.hooks[`blocks.${l}.attn.hook_pattern`].data;
        // Rows of each head of W_Q (0 .. E) and W_K (E .. E + G dh) moved by src; V as it is.
        const move = (t, cols) => {
          const data = Float32Array.from(t.flat());
          const from = Float32Array.from(data);
          for (let row = 0; row < E + G * dh; row++) {
            const head0 = row < E ? Math.floor(row / dh) * dh : E + Math.floor((row - E) / dh) * dh;
            data.set(from.subarray((head0 + src[row - head0]) * cols, (head0 + src[row - head0] + 1) * cols), row * cols);
          }
          return { data, shape: cols === 1 ? [t.length] : [t.length, cols] };
        };
        theirs.loadStateDict({ ...sd, in_proj_weight: move(sd.in_proj_weight, E), in_proj_bias: move(sd.in_proj_bias, 1) });
        const permuted = theirs.forward(rows, rows, rows, options).weights.data;
        theirs.loadStateDict(sd);
        const unpermuted = theirs.forward(rows, rows, rows, options).weights.data;
        out.push({ shifted, relative: shifted / scale, apart, caseVsHook: max(own, hook), permuted: max(permuted, own), unpermuted: max(unpermuted, own) });
      } finally {
        mine.dispose();
        theirs.dispose();
      }
    }
  } finally {
    model.dispose();
  }
  return out;
}

test('RoPE in the Train view: the layout control, the panel\'s RoPE tables are the engine\'s numbers; axe; the URL; export and load; the Heads view', { timeout: 240_000 }, async (t) => {
  const p = await openPage('/demo/#train?steps=0');
  try {
    const { page } = p;
    await settle(page, { heads: 2, positions: 'learned' });
    const layout = page.locator(`${TRAIN} select[name="ropeLayout"]`);
    assert.equal(await layout.isVisible(), false, 'no layout without rope');
    await page.selectOption(`${TRAIN} select[name="positions"]`, 'rope');
    await settle(page, { positions: 'rope', ropeLayout: 'half' });
    assert.equal(await layout.isVisible(), true, 'the layout with rope');
    assert.deepEqual(await layout.locator('option').evaluateAll((o) => o.map((x) => x.value)), ['half', 'interleaved']);
    await page.selectOption(`${TRAIN} select[name="ropeLayout"]`, 'interleaved');
    await settle(page, { ropeLayout: 'interleaved', steps: 0 });
    await page.evaluate(() => window.headscopeDemo.train.step(30));
    await settle(page, { steps: 30 });
    const hash = await page.evaluate(() => location.hash);
    assert.match(hash, /&positions=rope&ropeLayout=interleaved&lr=.*&steps=30$/);

    const panel = await page.evaluate(readRope);
    const doc = await page.evaluate(() => window.headscopeDemo.train.exportModel());
    assert.deepEqual([doc.config.positions, doc.config.rope_layout, doc.config.rope_base, doc.config.rope_fraction], ['rope', 'interleaved', 10000, 1]);
    const engine = await page.evaluate(engineNumbers, doc);
    assert.equal(panel.shift.length, 2);
    engine.forEach((e, l) => {
      const [name, shifted, relative, apart] = panel.shift[l];
      const [, caseVsHook, permuted, unpermuted] = panel.layouts[l];
      assert.equal(name, `layer ${l}`);
      assert.equal(panel.layouts[l][0], `layer ${l}`);
      assert.ok(relative <= 1e-5 && e.relative <= 1e-5, `layer ${l}: shifted scores ${relative}, the engine's here ${e.relative}`);
      assert.ok(Math.abs(shifted - e.shifted) <= 2e-6, `layer ${l}: ${shifted} vs ${e.shifted}`);
      assert.ok(Math.abs(apart - e.apart) <= 1e-4 && apart > 0.05, `layer ${l}: the moved key ${apart} vs ${e.apart}`);
      assert.ok(caseVsHook <= 1e-5 && e.caseVsHook <= 1e-5, `layer ${l}: the layer case vs hook_pattern ${caseVsHook}, ${e.caseVsHook}`);
      assert.ok(permuted <= 1e-5 && e.permuted <= 1e-5, `layer ${l}: the permuted layout ${permuted}, ${e.permuted}`);
      assert.ok(Math.abs(unpermuted - e.unpermuted) <= 1e-4 && unpermuted > 1e-2, `layer ${l}: the wrong layout ${unpermuted} vs ${e.unpermuted}`);
    });
    t.diagnostic(`RoPE panel at step 30 (interleaved): ${JSON.stringify(panel)}; the engine here: ${JSON.stringify(engine)}`);
    await page.locator(`${TRAIN} .hs-train-variants-box`).scrollIntoViewIfNeeded();
    await screenshot(page, 'train-rope-panel', { fullPage: false });
    const violations = await axe(page, `${TRAIN} .hs-train-variants-box`);
    assert.deepEqual(violations, [], JSON.stringify(violations, null, 2));
    const controls = await axe(page, `${TRAIN} .hs-train-controls`);
    assert.deepEqual(controls, [], JSON.stringify(controls, null, 2));

    // The URL: the same setting, the same run, the same panel.
    const before = await page.evaluate(() => window.headscopeDemo.train.getState());
    assert.deepEqual(await fromLink(hash, { steps: 30, read: readRope, settle }), { state: before, panel, pageErrors: [] });

    // A head opens in the Heads view with the trained weights; the Walkthrough says why it cannot.
    const { worst } = await openTrainedHead(page, { layer: 1, head: 2, step: 30 });
    assert.ok(worst < 1e-5, `the Heads view's weights are the trained head's pattern (worst ${worst})`);
    assert.match(await page.textContent('#panel-walkthrough .hs-wt-note'), /turns q and k by position \(rope_dims\)\. A Heads view/);

    // Export, then Load model: the layout, base and fraction come back (a file with base 100 and
    // half the dims turned is another model of the same weights, and the view takes it as such).
    await page.click('#tab-train');
    await page.evaluate(() => window.headscopeDemo.train.update({ positions: 'learned', steps: 0 }));
    await settle(page, { positions: 'learned', ropeLayout: 'half', steps: 0 });
    assert.equal(await page.locator(`${TRAIN} .hs-train-rope-shift`).count(), 0, 'no RoPE tables without rope');
    const other = { ...doc, config: { ...doc.config, rope_base: 100, rope_fraction: 0.5 } };
    await page.evaluate((d) => window.headscopeDemo.train.loadModel(d), other);
    await settle(page, { positions: 'rope', ropeLayout: 'interleaved', ropeBase: 100, ropeFraction: 0.5, steps: 30 });
    assert.match(await page.evaluate(() => location.hash), /&positions=rope&ropeLayout=interleaved&ropeBase=100&ropeFraction=0\.5&/);
    assert.match(await page.textContent(`${TRAIN} .hs-train-variants-rope`), /turns 8 of its 16 query and key dims/);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});
