// What a first-time user of the Heads view tripped over (issue 13), each checked in Chromium:
// the readout after a recompute, emoji tokens, stale controls and the self-attention label of a
// loaded case, head colours past 8, and a head-count change that keeps the reader's choices.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage, screenshot } from './harness.js';
import { openTrainedHead, settleTrain } from './train-helpers.js';
import { makeTask } from '../../web/lib/tasks.js';

const root = '#panel-heads';

function assertClean(p) {
  assert.deepEqual(p.pageErrors, [], 'page errors');
  assert.deepEqual(p.consoleErrors, [], 'console errors');
  assert.deepEqual(p.foreignRequests, [], 'requests to other origins');
}

const explainText = (page) => page.textContent(`${root} .hs-heads-explain`);
const settled = (page) => page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));

test('the readout follows a recompute: new sharpness, new weights, new sentence', async () => {
  const p = await openPage('/demo/#heads');
  try {
    await p.page.waitForSelector(`${root} .hs-head-grid [data-head="1"] canvas`);
    // Focus head 1's heatmap and move to query 3 -> key 2: the line names that cell's weight.
    await p.page.focus(`${root} [data-head="1"] canvas`);
    await p.page.keyboard.press('ArrowDown');
    await p.page.keyboard.press('ArrowDown');
    await p.page.keyboard.press('ArrowRight');
    const before = await explainText(p.page);
    assert.match(before, /Head 1, query 3 .* key 2 .*: weight [\d.]+/);
    const weightOf = (line) => line.match(/weight ([\d.]+)/)[1];
    // A new sharpness changes head 1's weights: the line shows the new one, not the old.
    await p.page.fill(`${root} [name="sharpness"]`, '1');
    await p.page.dispatchEvent(`${root} [name="sharpness"]`, 'input');
    await p.page.waitForFunction(([sel, old]) => document.querySelector(sel).textContent !== old,
      [`${root} .hs-heads-explain`, before]);
    await settled(p.page);
    const after = await explainText(p.page);
    assert.match(after, /Head 1, query 3 .* key 2 /, 'the same cell');
    assert.notEqual(weightOf(after), weightOf(before), `${before} -> ${after}`);
    // It equals what the heatmap itself says of that cell now.
    const label = await p.page.getAttribute(`${root} [data-head="1"] canvas`, 'aria-label');
    assert.ok(label.includes(`weight ${weightOf(after)}`), `${label} vs ${after}`);
    // A new sentence: the cell is gone, the hint comes back.
    await p.page.fill(`${root} [name="text"]`, 'x y');
    await p.page.waitForFunction((sel) => /Hover or focus a heatmap cell/.test(document.querySelector(sel).textContent),
      `${root} .hs-heads-explain`);
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('emoji and other grapheme clusters stay one token each', async () => {
  const p = await openPage('/demo/#heads');
  try {
    await p.page.fill(`${root} [name="text"]`, '👍🏽 ok 👨‍👩‍👧 🇫🇷 café');
    await p.page.waitForFunction((sel) => document.querySelectorAll(sel).length === 5, `${root} [data-pad-token]`);
    const chips = await p.page.$$eval(`${root} [data-pad-token]`, (bs) => bs.map((b) => b.textContent));
    assert.deepEqual(chips, ['👍🏽', 'ok', '👨‍👩‍👧', '🇫🇷', 'café']);
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('a head-count change keeps presets and switched-off heads; 16 heads have 16 colours', async () => {
  const p = await openPage('/demo/#heads');
  try {
    await p.page.waitForSelector(`${root} [data-head-preset="1"]`);
    await p.page.selectOption(`${root} [data-head-preset="1"]`, 'numbers');
    await p.page.uncheck(`${root} [data-head-ablate="2"]`);
    await p.page.selectOption(`${root} [name="heads"]`, '8');
    await p.page.waitForFunction((sel) => document.querySelectorAll(sel).length === 8, `${root} .hs-head-grid [data-head]`);
    assert.equal(await p.page.inputValue(`${root} [data-head-preset="1"]`), 'numbers', 'head 1 keeps its preset');
    assert.equal(await p.page.isChecked(`${root} [data-head-ablate="2"]`), false, 'head 2 stays off');
    assert.equal(await p.page.isChecked(`${root} [data-head-ablate="3"]`), true);
    await p.page.selectOption(`${root} [name="heads"]`, '16');
    await p.page.waitForFunction((sel) => document.querySelectorAll(sel).length === 16, `${root} .hs-head-grid [data-head]`);
    const colours = await p.page.$$eval(`${root} .hs-head-grid [data-head] .hs-head-swatch`,
      (els) => els.map((e) => getComputedStyle(e).backgroundColor));
    assert.equal(colours.length, 16);
    assert.equal(new Set(colours).size, 16, colours.join(' '));
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('a loaded case hides the sentence\'s controls, says what it shows, and labels self-attention keys as tokens', async () => {
  const p = await openPage('/demo/#load');
  try {
    // Self-attention written out: the key is given, equal to the query.
    const E = 4;
    const q = [[1, 0, 0, 1], [0, 1, 1, 0], [1, 1, 0, 0]];
    const eye = Array.from({ length: 3 * E }, (_, i) => Array.from({ length: E }, (_, j) => (i % E === j ? 1 : 0)));
    const doc = {
      name: 'explicit-self', config: { embed_dim: E, num_heads: 2, bias: false },
      state_dict: { in_proj_weight: eye, 'out_proj.weight': eye.slice(0, E) },
      inputs: { query: q, key: q.map((r) => r.slice()), value: q.map((r) => r.slice()) },
    };
    await p.page.setInputFiles('#panel-load input[type="file"]',
      { name: 'self.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(doc)) });
    await p.page.waitForFunction(() => document.querySelector('.hs-status')?.textContent.includes('Loaded self.json'));
    await p.page.click('#panel-load button:has-text("Show in the Heads view")');
    await p.page.waitForFunction((sel) => document.querySelectorAll(sel).length === 2, `${root} .hs-head-grid [data-head]`);
    await settled(p.page);
    const visible = await p.page.$$eval(`${root} [name]`, (els) => els.filter((e) => e.getClientRects().length > 0)
      .map((e) => e.getAttribute('name')));
    for (const name of ['text', 'heads', 'seed', 'sharpness', 'causal']) {
      assert.ok(!visible.includes(name), `${name} is hidden in case mode (visible: ${visible})`);
    }
    assert.match(await p.page.textContent(`${root} .hs-heads-case-note`), /Showing case "?explicit-self"?.*2 heads, 3 queries/);
    const keys = await p.page.$$eval(`${root} .hs-lines-key [data-line-token]`, (bs) => bs.map((b) => b.textContent));
    assert.deepEqual(keys, ['t1', 't2', 't3'], 'keys named as the query tokens (self-attention)');
    // The intro is the case's, and the hash says a file is shown (a link cannot hold it).
    assert.match(await p.page.textContent(`${root} .hs-heads-intro`), /^The heads of case explicit-self: its own weights.*t1, t2/);
    await p.page.waitForFunction(() => location.hash === '#heads?from=file&name=explicit-self');
    // Back to the sentence: its controls return, and the hash is the sentence's (whose state is
    // the one before the case: the change is the case going).
    await p.page.selectOption(`${root} [name="weights"]`, 'presets');
    await p.page.waitForFunction((sel) => document.querySelector(sel).getClientRects().length > 0, `${root} [name="text"]`);
    await p.page.waitForFunction(() => location.hash === '#heads');
    assert.match(await p.page.textContent(`${root} .hs-heads-intro`), /built by hand/);
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('the URL hash holds the shown view\'s state: a link opens it, edits update it, hashchange switches views', async () => {
  const link = '/demo/#heads?text=one+two+three&heads=2&off=2&view=average';
  const p = await openPage(link);
  try {
    await p.page.waitForSelector(`${root} .hs-heads-average .hs-head-card`);
    assert.equal(await p.page.getAttribute('#tab-heads', 'aria-selected'), 'true');
    assert.equal(await p.page.inputValue(`${root} [name="text"]`), 'one two three');
    assert.equal(await p.page.inputValue(`${root} [name="heads"]`), '2');
    assert.match(await p.page.textContent(`${root} .hs-ablation-summary`), /with Head 2 switched off/);
    // An edit rewrites the hash; reloading it gives the same state.
    await p.page.fill(`${root} [name="text"]`, 'four five');
    await p.page.waitForFunction(() => location.hash.includes('text=four+five'));
    const hash = await p.page.evaluate(() => location.hash);
    assert.match(hash, /^#heads\?/);
    await p.page.reload();
    await p.page.waitForFunction(() => document.body.dataset.ready === 'true');
    await p.page.waitForFunction((sel) => document.querySelector(sel)?.value === 'four five', `${root} [name="text"]`);
    assert.equal(await p.page.evaluate(() => location.hash), hash);
    // Switching tabs writes the view; a new hash switches back and applies its state.
    await p.page.click('#tab-walkthrough');
    assert.equal(await p.page.evaluate(() => location.hash), '#walkthrough');
    await p.page.evaluate(() => { location.hash = '#walkthrough?L=2&E=2&H=1&x=1,2,3,4&wq=1,0,0,1&wk=1,0,0,1&wv=1,0,0,1&wo=1,0,0,1'; });
    await p.page.waitForFunction(() => document.querySelectorAll('#panel-walkthrough table[data-matrix="X"] tbody tr').length === 2);
    const x = await p.page.$$eval('#panel-walkthrough table[data-matrix="X"] tbody td', (tds) =>
      tds.map((td) => (td.querySelector('input')?.value ?? td.textContent).trim()));
    assert.deepEqual(x.map(Number), [1, 2, 3, 4]);
    await p.page.evaluate(() => { location.hash = '#heads?heads=8'; });
    await p.page.waitForFunction((sel) => document.querySelectorAll(sel).length === 8, `${root} .hs-head-grid [data-head]`);
    assert.equal(await p.page.getAttribute('#tab-heads', 'aria-selected'), 'true');
    // A bad link says what is wrong.
    await p.page.evaluate(() => { location.hash = '#heads?heads=3'; });
    await p.page.waitForFunction(() => /heads: expected one of 1, 2, 4, 8, 16/.test(document.querySelector('.hs-status').textContent));
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('untrained (random) weights: the heatmap stretches its colours to the head\'s range and says why', async () => {
  const p = await openPage('/demo/#heads?weights=random&heads=2');
  try {
    await p.page.waitForFunction((sel) => /nearly uniform/.test(document.querySelector(sel)?.textContent ?? ''),
      `${root} [data-head="1"] .hs-head-description`);
    const text = await p.page.textContent(`${root} [data-head="1"] .hs-head-description`);
    const [, lo, hi] = text.match(/between ([\d.]+) and ([\d.]+)/).map(Number);
    assert.ok(hi - lo < 0.2, `near-uniform weights: ${lo}..${hi}`);
    await settled(p.page);
    // The drawn cells span light to dark: alpha (the weights colour's) from its lowest to highest.
    const alphas = await p.page.evaluate((sel) => {
      const canvas = document.querySelector(sel);
      const ctx = canvas.getContext('2d');
      const { data } = ctx.getImageData(0, 0, canvas.width, canvas.height);
      const out = [];
      for (let k = 3; k < data.length; k += 4 * 7) if (data[k] > 0) out.push(data[k]);
      return [Math.min(...out), Math.max(...out)];
    }, `${root} [data-head="1"] canvas`);
    assert.ok(alphas[1] - alphas[0] > 120, `the colours span the scale: alpha ${alphas}`);
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('a 3,000-token case runs in the worker with elapsed time and Cancel; cancelled, the view is back on the sentence', async () => {
  const L = 3000;
  const E = 8;
  let s = 7;
  const next = () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return Math.round((s / 2 ** 32 * 2 - 1) * 1000) / 1000; };
  const m = (r, c) => Array.from({ length: r }, () => Array.from({ length: c }, next));
  const doc = { name: 'long', config: { embed_dim: E, num_heads: 2 },
    state_dict: { in_proj_weight: m(3 * E, E), in_proj_bias: m(1, 3 * E)[0], 'out_proj.weight': m(E, E), 'out_proj.bias': m(1, E)[0] },
    inputs: { query: m(L, E) } };
  const p = await openPage('/demo/#load');
  try {
    await p.page.setInputFiles('#panel-load input[type="file"]',
      { name: 'long.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(doc)) });
    await p.page.waitForFunction(() => document.querySelector('.hs-status')?.textContent.includes('Loaded long.json'), null, { timeout: 60_000 });
    // Cancel as soon as it appears (an observer in the page: the worker may take well under a
    // second, too short to rely on polling from here).
    await p.page.evaluate((sel) => {
      const panel = document.querySelector(sel);
      const observer = new MutationObserver(() => {
        const cancel = panel.querySelector('.hs-heads-cancel');
        if (!cancel) return;
        observer.disconnect();
        window.busyText = panel.querySelector('.hs-heads-busy').textContent;
        cancel.click();
      });
      observer.observe(panel, { childList: true, subtree: true });
    }, root);
    await p.page.click('#panel-load button:has-text("Show in the Heads view")');
    await p.page.waitForFunction(() => typeof window.busyText === 'string');
    assert.match(await p.page.evaluate(() => window.busyText), /Large case \(18000000 weights\): running in a Web Worker, \d+ s/);
    await p.page.waitForFunction((sel) => /Cancelled: case "?long"? was not shown/.test(document.querySelector(sel).textContent),
      `${root} .hs-heads-message`);
    assert.equal(await p.page.getAttribute(`${root} .hs-heads`, 'aria-busy'), 'false');
    assert.equal(await p.page.inputValue(`${root} [name="weights"]`), 'presets');
    // The view works: a new sentence is computed (in the page), and the case can be shown again.
    await p.page.fill(`${root} [name="text"]`, 'a b c');
    await p.page.waitForFunction((sel) => document.querySelectorAll(sel).length === 3, `${root} [data-pad-token]`);
    await p.page.click('#tab-load');
    await p.page.click('#panel-load button:has-text("Show in the Heads view")');
    await p.page.waitForFunction((sel) => /3000 queries/.test(document.querySelector(sel)?.textContent ?? ''),
      `${root} .hs-heads-case-note`, { timeout: 60_000 });
    await p.page.waitForFunction((sel) => document.querySelector(sel).getAttribute('aria-busy') === 'false', `${root} .hs-heads`, { timeout: 60_000 });
    assert.match(await p.page.textContent(`${root} .hs-heads-message`), /Showing queries 1–128 of 3000/);
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('a head opened from the Train view: the task\'s tokens, an intro naming the model and step, and an honest link', async () => {
  const p = await openPage('/demo/#train?steps=25');
  try {
    const { page } = p;
    await settleTrain(page, { steps: 25 });
    const trainState = await page.evaluate(() => window.headscopeDemo.train.getState());
    const { worst } = await openTrainedHead(page, { layer: 1, head: 2, step: 25 });
    assert.ok(worst <= 1e-5, `the Heads view's weights are the trained head's (${worst})`);
    // The probe row's tokens as the task writes them, from the task module in Node.
    const task = makeTask(trainState.task, { seed: trainState.seed });
    const tokens = Array.from(task.probe().tokens.data, (id) => task.vocab[id]);
    assert.ok(new Set(tokens).size > 2, `the probe row has symbols to show (${tokens})`);
    const lineLabels = (side) => page.$$eval(`${root} .hs-lines-${side} [data-line-token]`, (bs) => bs.map((b) => b.textContent));
    assert.deepEqual(await lineLabels('query'), tokens, 'queries labelled by the task\'s tokens');
    assert.deepEqual(await lineLabels('key'), tokens, 'and keys (self-attention)');
    const exported = await page.evaluate(async () => JSON.parse(await (await window.headscopeDemo.heads.exportAs('json')).text()).tokens);
    assert.deepEqual(exported, { queries: tokens, keys: tokens }, 'the export names them too');
    // The intro says what is shown, not the hand-built heads' text.
    const intro = await page.textContent(`${root} .hs-heads-intro`);
    assert.match(intro, new RegExp(`^L1 H2 of the model the Train view trained \\(${trainState.task}\\) at step 25:`));
    assert.doesNotMatch(intro, /built by hand/);
    await page.evaluate(() => window.scrollTo(0, 0));
    await screenshot(page, 'heads-from-train', { fullPage: false });
    // The hash does not claim to reopen it (it was #heads?show=2, the hand-built heads): it names
    // the Train view's run.
    await page.waitForFunction(() => location.hash.startsWith('#heads?from=train'));
    const hash = await page.evaluate(() => location.hash);
    const params = new URLSearchParams(hash.split('?')[1]);
    assert.deepEqual([...params.keys()], ['from', 'layer', 'head', 'train']);
    assert.deepEqual([params.get('layer'), params.get('head')], ['1', '2']);
    assert.match(params.get('train'), /(^|&)steps=25(&|$)/);

    // Opened afresh, the link says what it showed and links to the run; that link reopens it.
    const q = await openPage(`/demo/${hash}`);
    try {
      await q.page.waitForFunction(() => /This link showed L1 H2 of a model trained in the Train view/
        .test(document.querySelector('.hs-status').textContent));
      const status = await q.page.textContent('.hs-status');
      assert.match(status, new RegExp(`\\(${trainState.task}, step 25\\)\\..*hand-built heads.*"Open in the Heads view" on L1 H2`));
      assert.equal(await q.page.getAttribute('#tab-heads', 'aria-selected'), 'true');
      assert.equal(await q.page.evaluate(() => window.headscopeDemo.heads.showsCase()), false);
      assert.match(await q.page.textContent(`${root} .hs-heads-intro`), /built by hand/, 'the hand-built heads, and it says so');
      assert.equal(await q.page.evaluate(() => location.hash), '#heads', 'the hash now is what is shown');
      await q.page.click('.hs-status a');
      await settleTrain(q.page, { steps: 25 });
      assert.deepEqual(await q.page.evaluate(() => window.headscopeDemo.train.getState()), trainState, 'the same run');
      const again = await openTrainedHead(q.page, { layer: 1, head: 2, step: 25 });
      assert.equal(again.worst, worst, 'the same head, the same numbers');
      assert.deepEqual(await q.page.evaluate(() => location.hash), hash);
      assertClean(q);
    } finally {
      await q.close();
    }
    // Back to the sentence (every head shown), the hash is the Heads view's own again.
    await page.selectOption(`${root} [name="weights"]`, 'presets');
    await page.waitForFunction(() => location.hash === '#heads');
    assert.match(await page.textContent(`${root} .hs-heads-intro`), /built by hand/);
    assertClean(p);
  } finally {
    await p.close();
  }
});
