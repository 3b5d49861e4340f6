// The Train view (issue 12, first part) in Chromium: the induction preset trained to a fixed step
// with a fixed seed gives the same weights, bit for bit, as the same training in Node; the curves,
// the heads grid and the detectors show; pause, step and reset work; the URL holds the run.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.js';
import { init } from '../../web/lib/index.js';
import { makeTask } from '../../web/lib/tasks.js';
import { defaultTrainState, trainSetup } from '../../web/views/train/state.js';

const STEPS = 60;

// The same run in Node, on the SIMD128 build the Train view's Worker uses.
async function nodeRun(steps) {
  const hs = await init({ simd: 'simd128' });
  const s = defaultTrainState();
  const task = makeTask(s.task, { seed: s.seed });
  const setup = trainSetup(s, task);
  const m = hs.createTransformer(setup.model);
  try {
    m.setOptimizer(setup.optimizer);
    for (let k = 0; k < steps; k++) {
      const { tokens, targets } = task.batch(s.batch, k);
      m.trainStep(tokens, targets);
    }
    const sd = m.stateDict();
    return Object.fromEntries(Object.entries(sd).map(([k, v]) => [k, Array.from(new Uint32Array(v.data.buffer, v.data.byteOffset, v.data.length))]));
  } finally {
    m.dispose();
  }
}

test('Train view: the induction preset to step 60 in the page is Node\'s run, bit for bit; step, pause, reset, URL', { timeout: 180_000 }, async () => {
  const p = await openPage(`/demo/#train?steps=${STEPS}`);
  try {
    const { page } = p;
    await page.waitForFunction((n) => document.querySelector('#panel-train .hs-train-counter')?.textContent.startsWith(`step ${n}`),
      STEPS, { timeout: 120_000 });
    assert.equal(await page.getAttribute('#tab-train', 'aria-selected'), 'true');
    // The weights, as float bits.
    const bits = await page.evaluate(async () => {
      const sd = await window.headscopeDemo.train.stateDict();
      return Object.fromEntries(Object.entries(sd).map(([k, v]) => [k, Array.from(new Uint32Array(v.data.buffer, v.data.byteOffset, v.data.length))]));
    });
    const want = await nodeRun(STEPS);
    assert.deepEqual(Object.keys(bits).sort(), Object.keys(want).sort());
    for (const k of Object.keys(want)) assert.deepEqual(bits[k], want[k], `${k}: the same bits as Node`);
    // What the view shows: 2 layers x 2 heads, the detectors, a curve with points at 0 and 60.
    assert.equal(await page.locator('#panel-train .hs-train-head canvas').count(), 4);
    assert.equal(await page.locator('#panel-train .hs-train-detectors tbody tr').count(), 4);
    assert.match(await page.getAttribute('#panel-train .hs-train-curves-svg', 'aria-label'), /to step 60: held-out loss [\d.]+/);
    assert.match(await page.evaluate(() => location.hash), /^#train\?.*steps=60/);
    // Step: one more; play then pause: it stops; reset: back to 0.
    await page.click('#panel-train [name="step"]');
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train-counter').textContent.startsWith('step 61'));
    await page.click('#panel-train [name="play"]');
    await page.waitForFunction(() => Number(document.querySelector('#panel-train .hs-train-counter').textContent.match(/step (\d+)/)[1]) >= 86, null, { timeout: 60_000 });
    await page.click('#panel-train [name="play"]');
    await page.waitForTimeout(1500);
    const paused = await page.textContent('#panel-train .hs-train-counter');
    await page.waitForTimeout(800);
    assert.equal(await page.textContent('#panel-train .hs-train-counter'), paused, 'paused: the step stays');
    // Switching a head off changes the held-out loss; importance bars appear.
    await page.uncheck('#panel-train [data-gate="1.1"]');
    await page.waitForFunction(() => /With L1 H1 off/.test(document.querySelector('#panel-train .hs-train-ablation-result')?.textContent ?? ''));
    await page.click('#panel-train [name="importance"]');
    await page.waitForFunction(() => document.querySelectorAll('#panel-train .hs-train-importance-bars .hs-train-importance').length === 4);
    // Each head off in turn: four costs, the largest a positive loss increase.
    await page.click('#panel-train [name="each-off"]');
    await page.waitForFunction(() => document.querySelectorAll('#panel-train .hs-train-cost').length === 4);
    const costs = await page.$$eval('#panel-train .hs-train-cost', (rows) => rows.map((r) => Number(r.dataset.cost)));
    assert.ok(Math.max(...costs) > 0, `switching some head off costs loss: ${costs}`);
    // Keyboard: Play is reachable and works with the keyboard.
    await page.focus('#panel-train [name="seed"]');
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('name')), 'play');
    await page.click('#panel-train [name="reset"]');
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train-counter').textContent.startsWith('step 0'));
    assert.deepEqual(p.pageErrors, []);
    assert.deepEqual(p.consoleErrors, []);
    assert.deepEqual(p.foreignRequests, []);
  } finally {
    await p.close();
  }
});

test('What if?: the runner trains each head count in Workers and shows curves, the table and the verdict, Node\'s numbers', { timeout: 180_000 }, async () => {
  const { runExperiment, formatTable, describeResult, EXPERIMENTS } = await import('../../web/lib/experiments.js');
  const small = { heads: [1, 4], seeds: [2], steps: 40, evalEvery: 20 };
  const p = await openPage('/demo/#train');
  try {
    const { page } = p;
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train')?.dataset.ready === 'true', null, { timeout: 60_000 });
    const shown = await page.evaluate(async (o) => {
      const w = window.headscopeDemo.train.whatIf;
      await w.run('log-line', o);
      const r = document.querySelector('#panel-train .hs-train-whatif');
      return {
        done: r.dataset.done,
        rows: [...r.querySelectorAll('.hs-train-whatif-table tbody tr')].map((tr) => [...tr.children].slice(0, 4).map((c) => c.textContent)),
        lines: [...r.querySelectorAll('.hs-train-whatif-chart path')].map((x) => x.dataset.heads),
        verdict: r.querySelector('.hs-train-whatif-verdict').textContent,
      };
    }, small);
    assert.equal(shown.done, 'log-line');
    assert.deepEqual(shown.lines, ['1', '4']);
    // The same experiment in Node (SIMD128): the same accuracies and losses, the same verdict.
    const hs = await init({ simd: 'simd128' });
    const want = await runExperiment(hs, { ...EXPERIMENTS['log-line'], ...small });
    const rows = formatTable(want).split('\n').slice(2).map((l) => l.split('|').slice(1, 5).map((c) => c.trim()));
    assert.deepEqual(shown.rows, rows);
    assert.equal(shown.verdict, describeResult(want));
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('Export model: a transformer case that the library checks; loaded back, the same logits, bit for bit', { timeout: 120_000 }, async () => {
  const p = await openPage('/demo/#train?steps=30');
  try {
    const { page } = p;
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train-counter')?.textContent.startsWith('step 30'),
      null, { timeout: 60_000 });
    const doc = await page.evaluate(() => window.headscopeDemo.train.exportModel());
    assert.equal(doc.kind, 'transformer');
    assert.equal(doc.name, 'headscope-train task=induction seed=1 steps=30');
    const hs = await init({ simd: 'simd128' });
    const check = hs.checkCase(doc, hs.runCase(doc));
    assert.equal(check.ok, true, JSON.stringify(check).slice(0, 500));
    // Reset to step 0 (new weights), then load the file: the step, the weights, the logits are back.
    await page.click('#panel-train [name="reset"]');
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train-counter').textContent.startsWith('step 0'));
    const again = await page.evaluate(async (d) => {
      await window.headscopeDemo.train.loadModel(JSON.stringify(d));
      return window.headscopeDemo.train.exportModel();
    }, doc);
    assert.equal(again.name, doc.name, 'the step comes back with the model');
    assert.deepEqual(again.expected.logits, doc.expected.logits, 'the same logits');
    assert.deepEqual(again.state_dict, doc.state_dict);
    // A model the view cannot set up is refused, naming the field.
    const bad = structuredClone(doc);
    bad.config.act = 'relu';
    const error = await page.evaluate((d) => window.headscopeDemo.train.loadModel(d).then(() => null, (e) => e.message), bad);
    assert.match(error, /loadModel: config\.act: the Train view takes gelu, got relu/);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('a trained head opens in the Heads view with the trained weights: its weights are the model\'s pattern', { timeout: 120_000 }, async () => {
  const p = await openPage('/demo/#train?steps=25');
  try {
    const { page } = p;
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train-counter')?.textContent.startsWith('step 25'),
      null, { timeout: 60_000 });
    // The model's own pattern of layer 1, head 2 on the probe row.
    const pattern = await page.evaluate(async () => {
      const doc = await window.headscopeDemo.train.layerCase(1);
      return doc.inputs.query.length;
    });
    assert.equal(pattern, 32);
    await page.click('#panel-train .hs-train-head[data-layer="1"][data-head="2"] .hs-train-open');
    await page.waitForFunction(() => document.querySelector('#tab-heads').getAttribute('aria-selected') === 'true');
    await page.waitForFunction(() => /layer 1 at step 25/.test(document.querySelector('#panel-heads .hs-heads-case-note')?.textContent ?? ''));
    const state = await page.evaluate(() => window.headscopeDemo.heads.getState());
    assert.deepEqual(state.show, [2], 'only the clicked head is shown');
    // The Heads view's numbers (its JSON export) against the model's hook_pattern.
    const [exported, hook] = await page.evaluate(async () => {
      const blob = await window.headscopeDemo.heads.exportAs('json');
      const json = JSON.parse(await blob.text());
      const t = window.headscopeDemo.train;
      return [json.heads[0].weights, await t.patternOf(1, 2)];
    });
    let worst = 0;
    exported.forEach((row, i) => row.forEach((v, j) => { worst = Math.max(worst, Math.abs(v - hook[i][j])); }));
    assert.ok(worst < 1e-5, `the Heads view's weights are the trained head's pattern (worst ${worst})`);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('What does each head do?: one click trains 4 heads on the log line and prices each head\'s ablation', { timeout: 180_000 }, async () => {
  const p = await openPage('/demo/#train');
  try {
    const { page } = p;
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train')?.dataset.ready === 'true', null, { timeout: 60_000 });
    await page.click('#panel-train [name="each-head"]');
    await page.waitForFunction(() => document.querySelectorAll('#panel-train .hs-train-cost').length === 8, null, { timeout: 150_000 });
    const state = await page.evaluate(() => window.headscopeDemo.train.getState());
    assert.deepEqual([state.task, state.heads, state.dModel, state.steps], ['log-line', 4, 64, 300]);
    assert.equal(await page.locator('#panel-train .hs-train-head canvas').count(), 8);
    const costs = await page.$$eval('#panel-train .hs-train-cost', (rows) => rows.map((r) => Number(r.dataset.cost)));
    assert.ok(costs.every(Number.isFinite) && Math.max(...costs) > 0.01, `some head matters: ${costs.map((c) => c.toFixed(3))}`);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});
