// The Train view's training history and run controls (issue 31, item 1 and the playback
// learner items) in Chromium: the step where an L1 head first gets its "induction" label, found in
// what the page shows, and the heads' patterns one recorded step before it, scrubbed back to,
// compared bit for bit with a Node run of the same seed; Step 10 / 100, the speed, "Train to
// step" and its refusals; a setup changed while playing; a link's replay progress; the steps per
// second; the switched-off heads and the log scale in the URL.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.js';
import { init } from '../../web/lib/index.js';
import { makeTask } from '../../web/lib/tasks.js';
import { headScores } from '../../web/lib/detectors.js';
import { defaultTrainState, trainSetup } from '../../web/views/train/state.js';

const counterAt = (n) => (c) => Number(document.querySelector('#panel-train .hs-train-counter')?.textContent.match(/^step (\d+)/)?.[1]) >= c;
const message = '#panel-train .hs-train-message';

// The induction preset in Node (SIMD128, as the view's Worker): every 25 steps to `to`, the
// held-out detector scores, and at `at` the probe row's hook_pattern of layer 1.
async function nodeRun(to, at) {
  const hs = await init({ simd: 'simd128' });
  const s = defaultTrainState();
  const task = makeTask(s.task, { seed: s.seed });
  const setup = trainSetup(s, task);
  const m = hs.createTransformer(setup.model);
  const held = task.heldOut(64, 0);
  const probe = task.probe();
  const out = { scores: new Map(), pattern: null };
  try {
    m.setOptimizer(setup.optimizer);
    for (let k = 0; k <= to; k++) {
      if (k % 25 === 0) out.scores.set(k, headScores(m.forward(held.tokens, { hooks: ['blocks.1.attn.hook_pattern'] }).hooks['blocks.1.attn.hook_pattern'], held.tokens));
      if (k === at) out.pattern = m.forward(probe.tokens, { hooks: ['blocks.1.attn.hook_pattern'] }).hooks['blocks.1.attn.hook_pattern'].data.slice();
      if (k < to) {
        const { tokens, targets } = task.batch(s.batch, k);
        m.trainStep(tokens, targets);
      }
    }
  } finally {
    m.dispose();
  }
  return out;
}

test('history: the step an L1 head first becomes "induction", and the pattern before it scrubbed back to, are Node\'s run', { timeout: 240_000 }, async () => {
  const p = await openPage('/demo/#train?steps=400');
  try {
    const { page } = p;
    await page.waitForFunction(counterAt(400), 400, { timeout: 180_000 });
    await page.waitForFunction(() => /Replayed to step 400/.test(document.querySelector('#panel-train .hs-train-message').textContent));
    // What the page shows: the history's list of first labels, and the chart of that head.
    const firsts = await page.$$eval('#panel-train .hs-train-history-firsts li', (items) => items.map((li) =>
      ({ head: li.dataset.head, detector: li.dataset.detector, step: Number(li.dataset.step), text: li.textContent })));
    const l1 = firsts.filter((f) => f.head.startsWith('1.') && f.detector === 'induction').sort((a, b) => a.step - b.step)[0];
    assert.ok(l1, `an L1 head becomes an induction head: ${JSON.stringify(firsts)}`);
    const h = Number(l1.head.split('.')[1]);
    console.log(`# first L1 induction label: L1 H${h} at step ${l1.step}`);
    assert.match(await page.textContent(`#panel-train .hs-train-history-head[data-head="1.${h}"] figcaption`), new RegExp(`induction from step ${l1.step}`));
    // Node's run: the first evaluation (every 25 steps, as the page's) where that head's highest
    // score is induction above 0.4 is the page's step; the step before it is not.
    const before = l1.step - 25;
    const node = await nodeRun(400, before);
    const label = (sc) => ['previous-token', 'first-token', 'same-token', 'induction'].reduce((best, d) => (sc[d][h - 1] > (best ? sc[best][h - 1] : 0.4) ? d : best), null);
    const nodeFirst = [...node.scores.keys()].find((k) => label(node.scores.get(k)) === 'induction');
    assert.equal(l1.step, nodeFirst, 'the page\'s first induction step is Node\'s');
    assert.notEqual(label(node.scores.get(before)), 'induction');
    // Scrub back: the list's "(before)" button (a 24 px target at least), then the keyboard on the scrubber.
    const target = await page.locator('#panel-train .hs-train-history-show').first().boundingBox();
    assert.ok(target.width >= 24 && target.height >= 24, `${target.width} x ${target.height}`);
    await page.click(`#panel-train .hs-train-history-firsts li[data-head="1.${h}"][data-detector="induction"] button[name="show-before"]`);
    await page.waitForFunction((s) => document.querySelector('#panel-train .hs-train').dataset.shown === String(s), before);
    assert.match(await page.textContent('#panel-train .hs-train-shown'), new RegExp(`Showing step ${before} from the history.*model is at step 400`));
    assert.equal(await page.getAttribute(`#panel-train .hs-train-head[data-layer="1"][data-head="${h}"]`, 'data-label'), '', 'no label before');
    const shown = await page.evaluate((hh) => window.headscopeDemo.train.shownPatternOf(1, hh), h);
    const T = shown.length;
    const want = node.pattern.subarray((h - 1) * T * T, h * T * T);
    const bits = (a) => Array.from(new Uint32Array(Float32Array.from(a).buffer));
    assert.deepEqual(bits(shown.flat()), bits(want), `L1 H${h} at step ${before}: the page shows Node's hook_pattern, bit for bit`);
    // It is a pre-induction pattern: far from the head's pattern now.
    const nowPattern = await page.evaluate((hh) => window.headscopeDemo.train.patternOf(1, hh), h);
    const moved = Math.max(...nowPattern.flat().map((v, k) => Math.abs(v - shown.flat()[k])));
    assert.ok(moved > 0.2, `the head's pattern changed since step ${before}: ${moved}`);
    // The scrubber: ArrowRight moves one recorded step later (the first label's), with its label.
    await page.focus('#panel-train input[name="historyStep"]');
    await page.keyboard.press('ArrowRight');
    await page.waitForFunction((s) => document.querySelector('#panel-train .hs-train').dataset.shown === String(s), l1.step);
    assert.equal(await page.getAttribute(`#panel-train .hs-train-head[data-layer="1"][data-head="${h}"]`, 'data-label'), 'induction');
    assert.equal(await page.getAttribute('#panel-train input[name="historyStep"]', 'aria-valuetext'), `step ${l1.step}`);
    // The phase change is marked and its steps are the shaded band's.
    const phase = await page.evaluate(() => ({ ...document.querySelector('#panel-train .hs-train-history-phase').dataset }));
    assert.ok(Number(phase.from) <= l1.step && Number(phase.to) >= before, JSON.stringify(phase));
    // Back to now; a step without patterns is refused, naming the field.
    await page.click('#panel-train button[name="back-to-now"]');
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train').dataset.shown === 'now');
    const refused = await page.evaluate(() => { try { window.headscopeDemo.train.showStep(13); return null; } catch (e) { return e.message; } });
    assert.match(refused, /Show step: step 13 has no recorded patterns/);
    // The memory each record costs, as the page says: 2 layers x 2 heads x 32 x 32 floats.
    const bytes = Number(await page.getAttribute('#panel-train .hs-train-history-memory', 'data-bytes'));
    assert.equal(bytes, 17 * 2 * 2 * 32 * 32 * 4, 'the 17 evaluations 0, 25, ..., 400 keep 16 KiB each');
    assert.deepEqual(p.pageErrors, []);
    assert.deepEqual(p.consoleErrors, []);
  } finally {
    await p.close();
  }
});

test('run controls: Step 10 and 100, one step per update, Train to step with its refusals, 24 px targets', { timeout: 180_000 }, async () => {
  const p = await openPage('/demo/#train');
  try {
    const { page } = p;
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train')?.dataset.ready === 'true', null, { timeout: 60_000 });
    await page.click('#panel-train [name="step10"]');
    await page.waitForFunction(counterAt(10), 10);
    await page.click('#panel-train [name="step100"]');
    await page.waitForFunction(counterAt(110), 110);
    assert.equal(await page.evaluate(() => window.headscopeDemo.train.getState().steps), 110);
    // One step per update: every step is an evaluation in the history (the heads redrawn each).
    await page.selectOption('#panel-train select[name="chunk"]', '1');
    await page.click('#panel-train [name="step10"]');
    await page.waitForFunction(counterAt(120), 120);
    const steps = await page.evaluate(() => window.headscopeDemo.train.history().records.map((r) => r.step));
    assert.deepEqual(steps.slice(-11), [110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120]);
    // Train to step: refusals name the field and leave the view working.
    for (const [text, why] of [['abc', /Train to step: expected an integer in \[1, 100000\]/], ['100001', /Train to step: expected an integer in \[1, 100000\], got "100001"/],
      ['2.5', /Train to step: expected an integer/], ['50', /Train to step: the model is already at step 120/]]) {
      await page.fill('#panel-train input[name="trainTo"]', text);
      await page.click('#panel-train [name="train-to"]');
      await page.waitForFunction((w) => new RegExp(w).test(document.querySelector('#panel-train .hs-train-message').textContent), why.source);
      assert.ok(await page.$eval(message, (m) => m.classList.contains('hs-error')), text);
    }
    await page.selectOption('#panel-train select[name="chunk"]', '25');
    await page.fill('#panel-train input[name="trainTo"]', '170');
    await page.focus('#panel-train input[name="trainTo"]');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => /Trained to step 170 in [\d.]+ s/.test(document.querySelector('#panel-train .hs-train-message').textContent));
    assert.equal(await page.evaluate(() => window.headscopeDemo.train.getState().steps), 170);
    assert.match(await page.evaluate(() => location.hash), /steps=170/);
    // Every new control is labelled and at least 24 px in both directions.
    for (const sel of ['[name="step10"]', '[name="step100"]', 'select[name="chunk"]', 'input[name="trainTo"]', '[name="train-to"]',
      'input[name="historyStep"]', '[name="now"]']) {
      const box = await page.locator(`#panel-train ${sel}`).first().boundingBox();
      assert.ok(box.width >= 24 && box.height >= 24, `${sel}: ${box.width} x ${box.height}`);
    }
    for (const name of ['chunk', 'trainTo', 'historyStep']) {
      assert.ok(await page.$eval(`#panel-train [name="${name}"]`, (c) => c.labels.length === 1 && c.labels[0].textContent.trim().length > 0), name);
    }
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('learner items: a setup changed while playing plays on from 0 and says so; a link\'s replay shows its progress', { timeout: 180_000 }, async () => {
  const p = await openPage('/demo/#train?steps=300');
  try {
    const { page } = p;
    await page.waitForFunction(() => /^Replaying to step 300: \d+%$/.test(document.querySelector('#panel-train .hs-train-message')?.textContent ?? ''),
      null, { timeout: 60_000, polling: 'raf' });
    await page.waitForFunction(() => /^Replayed to step 300 in [\d.]+ s\.$/.test(document.querySelector('#panel-train .hs-train-message').textContent),
      null, { timeout: 120_000 });
    await page.click('#panel-train [name="play"]');
    await page.waitForFunction(counterAt(350), 350, { timeout: 60_000 });
    await page.fill('#panel-train input[name="lr"]', '0.004');
    await page.dispatchEvent('#panel-train input[name="lr"]', 'change');
    await page.waitForFunction(() => /The setup changed \(lr\): a new model from step 0; the run to step \d+ is gone\. Playing on from step 0\./
      .test(document.querySelector('#panel-train .hs-train-message').textContent));
    await page.waitForFunction(() => {
      const s = window.headscopeDemo.train.getState();
      return s.lr === 0.004 && s.steps >= 25 && s.steps < 300 && window.headscopeDemo.train.isPlaying();
    });
    await page.click('#panel-train [name="play"]');
    assert.equal(await page.evaluate(() => window.headscopeDemo.train.isPlaying()), false);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('learner items: steps/s is the rate over the last second while playing, and a Step shows none', { timeout: 180_000 }, async () => {
  const p = await openPage('/demo/#train');
  try {
    const { page } = p;
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train')?.dataset.ready === 'true', null, { timeout: 60_000 });
    await page.click('#panel-train [name="play"]');
    // Samples of (time, step, the rate shown) for 3 s, taken in the page each frame.
    const samples = await page.evaluate(() => new Promise((resolve) => {
      const out = [];
      const t0 = performance.now();
      const c = document.querySelector('#panel-train .hs-train-counter');
      const tick = () => {
        const now = performance.now();
        out.push([now, Number(c.textContent.match(/^step (\d+)/)[1]), Number(c.dataset.rate)]);
        if (now - t0 < 3000) requestAnimationFrame(tick); else resolve(out);
      };
      requestAnimationFrame(tick);
    }));
    await page.click('#panel-train [name="play"]');
    // From 1.2 s on, the rate shown is the steps the counter moved in the last second (within the
    // moves of one chunk at either end of the window).
    let checked = 0;
    for (const [t, step, shown] of samples) {
      if (t - samples[0][0] < 1200 || !(shown > 0)) continue;
      const then = samples.filter(([u]) => u <= t - 1000).at(-1);
      const observed = ((step - then[1]) * 1000) / (t - then[0]);
      assert.ok(Math.abs(shown - observed) <= 25 * 2 + 0.3 * observed, `shown ${shown.toFixed(0)} vs ${observed.toFixed(0)} steps/s at ${(t - samples[0][0]).toFixed(0)} ms`);
      checked++;
    }
    assert.ok(checked > 10, `${checked} samples checked`);
    await page.waitForFunction(() => !window.headscopeDemo.train.isPlaying() && !/steps\/s/.test(document.querySelector('#panel-train .hs-train-counter').textContent));
    const at = await page.evaluate(() => window.headscopeDemo.train.getState().steps);
    await page.click('#panel-train [name="step"]');
    await page.waitForFunction(counterAt(at + 1), at + 1);
    assert.doesNotMatch(await page.textContent('#panel-train .hs-train-counter'), /steps\/s/, 'a single step\'s round trip is no rate');
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('learner items: switched-off heads and the log scale are in the URL, and a link brings them back', { timeout: 180_000 }, async () => {
  const p = await openPage('/demo/#train?steps=25&off=1.2&log=1');
  try {
    const { page } = p;
    await page.waitForFunction(() => /With L1 H2 off/.test(document.querySelector('#panel-train .hs-train-ablation-result')?.textContent ?? ''),
      null, { timeout: 60_000 });
    assert.equal(await page.isChecked('#panel-train [data-gate="1.2"]'), false);
    assert.equal(await page.isChecked('#panel-train [data-gate="1.1"]'), true);
    assert.equal(await page.isChecked('#panel-train [name="log"]'), true);
    assert.deepEqual(await page.evaluate(() => window.headscopeDemo.train.getState().off), [[1, 2]]);
    // The reader's switch and log scale reach the URL.
    await page.uncheck('#panel-train [data-gate="0.1"]');
    await page.waitForFunction(() => /&off=0\.1%2C1\.2&log=1$/.test(location.hash));
    await page.uncheck('#panel-train [name="log"]');
    await page.waitForFunction(() => /&off=0\.1%2C1\.2$/.test(location.hash));
    const hash = await page.evaluate(() => location.hash);
    // That link, opened afresh: the same switches, the same loss without them.
    const loss = await page.getAttribute('#panel-train .hs-train-ablation-result', 'data-loss');
    const q = await openPage(`/demo/${hash}`);
    try {
      await q.page.waitForFunction(() => /With L0 H1, L1 H2 off/.test(document.querySelector('#panel-train .hs-train-ablation-result')?.textContent ?? ''),
        null, { timeout: 60_000 });
      assert.equal(await q.page.getAttribute('#panel-train .hs-train-ablation-result', 'data-loss'), loss);
      assert.equal(await q.page.isChecked('#panel-train [name="log"]'), false);
    } finally {
      await q.close();
    }
    // A bad head in a link is refused, naming the field.
    await page.evaluate(() => { location.hash = '#train?steps=25&off=5.1'; });
    await page.waitForFunction(() => /off\[0\]: expected a head "layer\.head" of 2 layers/.test(document.body.textContent));
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});
