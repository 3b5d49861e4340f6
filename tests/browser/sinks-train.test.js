// Attention sinks in the Train view, in Chromium: the "attention sinks" checkbox, toggled from the
// keyboard as a reader does, makes a model with blocks.{l}.attn.sinks (the exported case's
// attn_sinks and the view's stateDict()); a few steps trained, the variants panel's sink table
// (each head's sink logit and mean sink mass on the held-out rows) is checked against the engine's
// numbers computed in the same page through the public API (init() of the same SIMD128 build, a
// Transformer loaded with the exported model, forward on the task's held-out rows, 1 - the row
// sums of hook_pattern); the URL round trip; export and Load model; a head opened in the Heads
// view keeps its sink (rows under 1), and the Walkthrough says why it cannot show it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.js';
import { axe } from './axe.js';
import { fromLink, openTrainedHead, settleTrain as settle } from './train-helpers.js';

const TRAIN = '#panel-train';

// The checkbox and the sinks table: its header and rows (the th's text, then data-value numbers).
const readSinks = () => {
  const t = document.querySelector('#panel-train .hs-train-variants-sinks table');
  return t ? { checked: document.querySelector('#panel-train input[name="attnSinks"]').checked, caption: t.caption.textContent, heads: [...t.tHead.rows[0].cells].map((c) => c.textContent),
    rows: [...t.tBodies[0].rows].map((r) => [r.cells[0].textContent, ...[...r.cells].slice(1).map((c) => Number(c.dataset.value))]) } : null;
};

// In the page: each layer's sink logits and mean sink mass for the model of `doc` (exportModel's)
// on the view's held-out rows (the task's heldOut(64, 0) of the state's seed), by the public API.
async function engineSinks(doc) {
  const { init } = await import('/lib/index.js');
  const { parseCase } = await import('/lib/case.js');
  const { makeTask } = await import('/lib/tasks.js');
  const hs = await init({ simd: 'simd128' });
  const s = window.headscopeDemo.train.getState();
  const held = makeTask(s.task, { seed: s.seed }).heldOut(64, 0);
  const config = parseCase(doc).config;
  const model = hs.createTransformer({ ...config, seed: null });
  try {
    model.loadStateDict(doc.state_dict);
    const hooks = Array.from({ length: config.nLayers }, (_, l) => `blocks.${l}.attn.hook_pattern`);
    const run = model.forward(held.tokens, { hooks });
    const sd = model.stateDict();
    return hooks.map((hook, l) => {
      const [B, H, T] = run.hooks[hook].shape;
      const P = run.hooks[hook].data;
      const mass = [];
      let lightest = 1;
      for (let h = 0; h < H; h++) {
        let m = 0;
        for (let b = 0; b < B; b++) for (let i = 0; i < T; i++) {
          let sum = 0;
          for (let j = 0; j < T; j++) sum += P[((b * H + h) * T + i) * T + j];
          lightest = Math.min(lightest, sum);
          m += 1 - sum;
        }
        mass.push(m / (B * T));
      }
      return { logits: Array.from(sd[`blocks.${l}.attn.sinks`].data), mass, lightest, shape: [B, H, T] };
    });
  } finally {
    model.dispose();
  }
}

test('attention sinks in the Train view: the checkbox makes the model; the panel\'s sink numbers are the engine\'s; axe; the URL; export and load; the Heads view', { timeout: 300_000 }, async (t) => {
  const p = await openPage('/demo/#train?steps=0');
  try {
    const { page } = p;
    await settle(page, { heads: 2, attnSinks: false, steps: 0 });
    const box = page.locator(`${TRAIN} input[name="attnSinks"]`);
    assert.equal(await box.isChecked(), false, 'off by default');
    assert.equal(await page.locator(`${TRAIN} .hs-train-variants-sinks table`).count(), 0, 'no sink table without sinks');
    assert.equal(await page.evaluate(() => location.hash), '#train?task=induction&layers=2&heads=2&dModel=32&mlp=0&norm=pre&positions=learned' +
      '&lr=0.003&weightDecay=0.01&batch=16&clip=1&seed=1&steps=0', 'the default link is as before sinks');
    assert.ok(!Object.keys(await page.evaluate(() => window.headscopeDemo.train.stateDict())).some((k) => k.endsWith('.sinks')));
    // Its label names it, and the keyboard toggles it (Space on the focused box).
    assert.equal((await page.locator(`${TRAIN} label:has(input[name="attnSinks"])`).textContent()).trim(), 'attention sinks');
    await box.focus();
    await page.keyboard.press('Space');
    await settle(page, { attnSinks: true, steps: 0 });
    assert.equal(await box.isChecked(), true);
    const keys = Object.keys(await page.evaluate(() => window.headscopeDemo.train.stateDict()));
    assert.deepEqual(keys.filter((k) => k.endsWith('.sinks')), ['blocks.0.attn.sinks', 'blocks.1.attn.sinks']);
    // Step 0: every logit is 0 (the seed's), and the sink still takes weight from every row.
    const start = await page.evaluate(readSinks);
    assert.deepEqual(start.heads, ['head', 'sink logit, layer 0', 'mean sink mass, layer 0', 'sink logit, layer 1', 'mean sink mass, layer 1']);
    assert.match(start.caption, /rows of the pattern may sum to less than 1: the head can attend to nothing/);
    for (const [, s0, m0, s1, m1] of start.rows) {
      assert.deepEqual([s0, s1], [0, 0]);
      assert.ok(m0 > 0 && m0 < 1 && m1 > 0 && m1 < 1, `sink mass at step 0: ${m0}, ${m1}`);
    }

    await page.evaluate(() => window.headscopeDemo.train.step(40));
    await settle(page, { steps: 40 });
    const hash = await page.evaluate(() => location.hash);
    assert.match(hash, /&positions=learned&attnSinks=1&lr=.*&steps=40$/);
    const panel = await page.evaluate(readSinks);
    const doc = await page.evaluate(() => window.headscopeDemo.train.exportModel());
    assert.equal(doc.config.attn_sinks, true, 'the model config has the sinks');
    const engine = await page.evaluate(engineSinks, doc);
    assert.deepEqual(engine.map((e) => e.shape), [[64, 2, 32], [64, 2, 32]], 'the held-out batch: 64 rows of 32, 2 heads');
    assert.equal(panel.rows.length, 2);
    panel.rows.forEach(([name, ...cells], h) => {
      assert.equal(name, `H${h + 1}`);
      engine.forEach((e, l) => {
        const [logit, mass] = cells.slice(2 * l, 2 * l + 2);
        assert.equal(logit, e.logits[h], `layer ${l} head ${h + 1}: the sink logit is the model's`);
        assert.equal(logit, doc.state_dict[`blocks.${l}.attn.sinks`][h], 'and the exported weights\'');
        assert.ok(Math.abs(mass - e.mass[h]) <= 1e-12, `layer ${l} head ${h + 1}: sink mass ${mass} vs the engine's ${e.mass[h]}`);
        assert.ok(mass > 0 && mass < 1);
      });
    });
    assert.ok(engine.flatMap((e) => e.logits).some((v) => v !== 0), 'training moved the sink logits');
    assert.ok(engine.every((e) => e.lightest < 1), 'rows sum to less than 1');
    t.diagnostic(`sinks panel at step 40: ${JSON.stringify(panel.rows)}`);
    const violations = await axe(page, `${TRAIN} .hs-train-variants-box`);
    assert.deepEqual(violations, [], JSON.stringify(violations, null, 2));
    const controls = await axe(page, `${TRAIN} .hs-train-controls`);
    assert.deepEqual(controls, [], JSON.stringify(controls, null, 2));

    // The URL: the same setting, the same run, the same panel.
    const before = await page.evaluate(() => window.headscopeDemo.train.getState());
    const again = await fromLink(hash, { steps: 40, read: readSinks });
    assert.deepEqual(again, { state: before, panel, pageErrors: [] });
    assert.equal(panel.checked, true);

    // A head opens in the Heads view with its sink: the trained head's pattern, rows under 1.
    const { worst, pattern } = await openTrainedHead(page, { layer: 1, head: 2, step: 40 });
    assert.ok(worst < 1e-5, `the Heads view's weights are the trained head's pattern (worst ${worst})`);
    assert.ok(pattern.every((row) => row.reduce((a, b) => a + b, 0) < 1), 'every row of the head sums to less than 1');
    assert.match(await page.textContent('#panel-walkthrough .hs-wt-note'), /has attention sinks \(attn_sinks\).*A Heads view/);

    // Unchecked: a model without sinks, no table; Load model brings the sinks and the step back.
    await page.click('#tab-train');
    await page.uncheck(`${TRAIN} input[name="attnSinks"]`);
    await settle(page, { attnSinks: false, steps: 0 });
    assert.equal(await page.locator(`${TRAIN} .hs-train-variants-sinks table`).count(), 0);
    assert.equal((await page.evaluate(() => window.headscopeDemo.train.exportModel())).config.attn_sinks, undefined);
    await page.evaluate((d) => window.headscopeDemo.train.loadModel(d), doc);
    await settle(page, { attnSinks: true, steps: 40 });
    assert.deepEqual((await page.evaluate(readSinks)).rows.map((r) => [r[1], r[3]]), panel.rows.map((r) => [r[1], r[3]]),
      'the loaded model\'s sink logits');
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});
