// The Train view (issue 12, first part) in Chromium: the induction preset trained to a fixed step
// with a fixed seed gives the same weights, bit for bit, as the same training in Node; the curves,
// the heads grid and the detectors show; pause, step and reset work; the URL holds the run.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { openPage } from './harness.js';
import { trainInNode } from './node-run.js';
import { init } from '../../web/lib/index.js';
import { makeTask } from '../../web/lib/tasks.js';
import { defaultTrainState, trainSetup } from '../../web/views/train/state.js';

const STEPS = 60;

// The same run in Node, on the SIMD128 build the Train view's Worker uses.
async function nodeRun(steps) {
  const { model: m } = await trainInNode(steps);
  try {
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

// Issue 28, item 2: a file that fails to load leaves the trained model as it was, and the
// fast-check suite of hostile files below holds the same for any refusal.
const bitsOf = () => window.headscopeDemo.train.stateDict().then((sd) =>
  Object.fromEntries(Object.entries(sd).map(([k, v]) => [k, Array.from(new Uint32Array(v.data.buffer, v.data.byteOffset, v.data.length))])));

test('a failed Load model keeps the trained model: weights, step, optimizer state and URL', { timeout: 300_000 }, async () => {
  const p = await openPage('/demo/#train?steps=40');
  try {
    const { page } = p;
    const counter = '#panel-train .hs-train-counter';
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.startsWith('step 40'), counter, { timeout: 60_000 });
    const doc = await page.evaluate(() => window.headscopeDemo.train.exportModel());
    const before = await page.evaluate(bitsOf);
    const hash = await page.evaluate(() => location.hash);
    // The exported file with one key removed, through the Load model control as a reader does.
    const broken = structuredClone(doc);
    delete broken.state_dict['unembed.bias'];
    await page.setInputFiles('#panel-train input[name="load"]',
      { name: 'broken.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(broken)) });
    await page.waitForFunction(() => /stateDict: missing unembed\.bias/.test(document.querySelector('#panel-train .hs-train-message')?.textContent ?? ''),
      null, { timeout: 30_000 });
    assert.match(await page.textContent(counter), /^step 40/, 'the step count stays');
    assert.equal(await page.evaluate(() => location.hash), hash, 'the URL stays');
    assert.deepEqual(await page.evaluate(bitsOf), before, 'the weights stay, bit for bit');
    assert.equal(await page.evaluate(() => window.headscopeDemo.train.getState().steps), 40);
    // The optimizer state stayed too: five more steps give Node's run of 45, bit for bit.
    await page.evaluate(() => window.headscopeDemo.train.step(5));
    assert.match(await page.textContent(counter), /^step 45/);
    const after = await page.evaluate(bitsOf);
    const want = await nodeRun(45);
    for (const k of Object.keys(want)) assert.deepEqual(after[k], want[k], `${k}: Node's run of 45 steps`);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

// Edits of an exported file that no Train view may accept (each breaks the file or asks for a
// model the view does not build): every one is refused within a bounded time, and the view's
// model, step and URL are bit for bit what they were.
function hostileEdit(doc) {
  const keys = Object.keys(doc.state_dict);
  const set = (path, value) => (d) => {
    const parts = path.split('/');
    let o = d;
    for (const k of parts.slice(0, -1)) o = o[k];
    o[parts.at(-1)] = value;
  };
  return fc.oneof(
    fc.constantFrom(...keys).map((k) => ['delete state_dict key', k, (d) => { delete d.state_dict[k]; }]),
    fc.constantFrom(...keys).map((k) => ['one element short', k, (d) => {
      const v = d.state_dict[k];
      if (Array.isArray(v[0])) v.pop(); else v.push(0);
    }]),
    fc.constantFrom(...keys).chain((k) => fc.constantFrom(null, 'x', [], [[[[[[1]]]]]], { data: 1 }, 1e39)
      .map((v) => [`state_dict value ${JSON.stringify(v)}`, k, set(`state_dict/${k}`, v)])),
    fc.constantFrom('vocab_size', 'max_len', 'd_model', 'n_layers', 'd_mlp').chain((key) =>
      fc.constantFrom(0, -1, 1.5, 2 ** 24, 2 ** 24 + 1, 2 ** 31, 'x', true, [], 3, 5, 7, 1e300)
        .filter((v) => v !== doc.config[key])
        .map((v) => [`config.${key}`, v, set(`config/${key}`, v)])),
    fc.constantFrom(3, 5, 7, 0, 2 ** 24, 1.5, 'x').map((v) => ['config.n_heads', v, set('config/n_heads', v)]),
    fc.constantFrom(['act', 'relu'], ['causal', false], ['bias', false], ['norm', 'postnorm'], ['positions', 'rotary'], ['ln_eps', 0])
      .map(([k, v]) => [`config.${k}`, v, set(`config/${k}`, v)]),
    fc.constantFrom('weights', 'expect', '__proto__x').map((k) => ['top-level key', k, (d) => { d[k] = 1; }]),
    fc.constantFrom('task=induction seed=1 steps=100000000000000000000', 'task=induction seed=99999999999 steps=1',
      'task=nosuchtask seed=1 steps=1')
      .map((v) => ['name', v, (d) => { d.name = d.name.replace(/task=\S+ seed=\d+ steps=\d+/, v); }]),
    fc.constantFrom(2 ** 16, 2 ** 20).map((n) => ['tokens', n, (d) => { d.inputs.tokens = new Array(n).fill(1); }]),
  );
}

test('fast-check: hostile model files are refused in bounded time and leave the trained model as it was',
  { timeout: 600_000 }, async () => {
    const p = await openPage('/demo/#train?steps=20');
    try {
      const { page } = p;
      await page.waitForFunction(() => document.querySelector('#panel-train .hs-train-counter')?.textContent.startsWith('step 20'),
        null, { timeout: 60_000 });
      const doc = await page.evaluate(() => window.headscopeDemo.train.exportModel());
      const before = await page.evaluate(bitsOf);
      const hash = await page.evaluate(() => location.hash);
      let worst = 0;
      await fc.assert(fc.asyncProperty(hostileEdit(doc), async ([what, detail, edit]) => {
        const d = structuredClone(doc);
        edit(d);
        const text = JSON.stringify(d);
        const { refused, ms } = await page.evaluate(async (t) => {
          const t0 = performance.now();
          const r = await window.headscopeDemo.train.loadModel(t).then(() => null,
            (e) => ({ name: e?.name, code: e?.code, message: String(e?.message) }));
          return { refused: r, ms: performance.now() - t0 };
        }, text);
        worst = Math.max(worst, ms);
        const label = `${what} ${JSON.stringify(detail)}`;
        assert.ok(refused !== null, `${label}: accepted`);
        assert.equal(refused.name, 'HeadscopeError', `${label}: ${refused.message}`);
        assert.ok(ms < 10_000, `${label}: ${ms} ms`);
        assert.equal(await page.evaluate(() => window.headscopeDemo.train.getState().steps), 20, label);
        assert.equal(await page.evaluate(() => location.hash), hash, label);
        assert.deepEqual(await page.evaluate(bitsOf), before, `${label}: the weights changed`);
      }), { seed: Number(process.env.HEADSCOPE_PROPERTY_SEED ?? 20261207), numRuns: 40, endOnFailure: true });
      console.log(`# slowest refusal ${worst.toFixed(0)} ms`);
      assert.deepEqual(p.pageErrors, []);
    } finally {
      await p.close();
    }
  });
