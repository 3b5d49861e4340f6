// The Train view's keyword and pattern detectors in Chromium: "What does each head do?" sets the
// log levels as the keyword detector, and the layer-0 head that reads the level at the answer
// gets the "keyword" label and its score (Node's numbers of the same run); a pattern typed in is
// scored (Node's numbers) and goes into the URL; a bad pattern is refused naming the field and the
// character, leaving the view as it was; the preset says which run it replaced.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.js';
import { trainInNode } from './node-run.js';
import { scoreLayer } from '../../web/views/train/session.js';

const LOG_LINE = { task: 'log-line', layers: 2, heads: 4, kvHeads: 4, dModel: 64, lr: 3e-3, weightDecay: 0.01, batch: 16, clip: 1, seed: 1 };

test('Train view: keyword and pattern detectors, from the preset and the inputs, are Node\'s scores; bad input named', { timeout: 240_000 }, async () => {
  const p = await openPage('/demo/#train?steps=20');
  try {
    const { page } = p;
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train-counter')?.textContent.startsWith('step 20'), null, { timeout: 60_000 });
    await page.click('#panel-train [name="each-head"]');
    await page.waitForFunction(() => document.querySelectorAll('#panel-train .hs-train-costs .hs-train-cost').length === 8, null, { timeout: 180_000 });
    assert.match(await page.textContent('#panel-train .hs-train-message'),
      /replaced your run \(induction, 2 x 2 heads, step 20\) with the log-line preset\. To train it again, open #train\?task=induction/);
    assert.equal(await page.inputValue('#panel-train [name="keywords"]'), 'DEBUG INFO WARN ERROR');
    const read = () => page.evaluate(() => {
      const cols = Array.from(document.querySelectorAll('#panel-train .hs-train-detectors thead th'), (th) => th.textContent);
      const rows = Array.from(document.querySelectorAll('#panel-train .hs-train-detectors tbody tr'), (tr) =>
        Object.fromEntries(Array.from(tr.querySelectorAll('td'), (td) => [td.dataset.detector, td.textContent.replace(/^\s+/, '')])));
      const captions = Array.from(document.querySelectorAll('#panel-train .hs-train-head .hs-train-head-name'), (s) => s.textContent);
      return { cols, rows, captions, hash: location.hash };
    });
    const shown = await read();
    assert.deepEqual(shown.cols, ['head', 'previous token', 'first token', 'same token', 'induction', 'keyword']);
    // Node: the same run, scored as the view scores it.
    const { model, task, state } = await trainInNode(300, LOG_LINE);
    const held = task.heldOut(64, 0);
    const hooks = ['blocks.0.attn.hook_pattern', 'blocks.1.attn.hook_pattern'];
    const score = (s) => {
      const run = model.forward(held.tokens, { hooks });
      return hooks.map((h) => scoreLayer(run.hooks[h], held, { ...state, ...s }, task));
    };
    try {
      const want = score({ keywords: 'DEBUG INFO WARN ERROR', pattern: '' });
      const keyword = want.flatMap((layer) => layer.keyword);
      assert.deepEqual(shown.rows.map((r) => r.keyword), keyword.map((v) => v.toFixed(2)));
      const best = keyword.indexOf(Math.max(...keyword));
      assert.ok(best < 4 && keyword[best] > 0.9, `a layer-0 head reads the level at the answer: ${keyword}`);
      assert.match(shown.captions[best], new RegExp(`^L0 H${best + 1}: keyword$`));
      // A pattern, typed: its column, Node's scores, the URL.
      await page.fill('#panel-train [name="pattern"]', 'tj == "service=" || tj == "duration="');
      await page.press('#panel-train [name="pattern"]', 'Enter');
      await page.waitForFunction(() => document.querySelectorAll('#panel-train .hs-train-detectors thead th').length === 7);
      const after = await read();
      const custom = score({ keywords: 'DEBUG INFO WARN ERROR', pattern: 'tj == "service=" || tj == "duration="' }).flatMap((layer) => layer.custom);
      assert.deepEqual(after.rows.map((r) => r.custom), custom.map((v) => v.toFixed(2)));
      assert.match(after.hash, /keywords=DEBUG(%20|\+)INFO/);
      assert.match(after.hash, /pattern=tj/);
      // A bad one: refused by name and character; the table stays.
      await page.fill('#panel-train [name="pattern"]', 'j = i');
      await page.press('#panel-train [name="pattern"]', 'Enter');
      await page.waitForFunction(() => /Train\.pattern: at character 3/.test(document.querySelector('#panel-train .hs-train-message').textContent));
      assert.equal((await read()).cols.length, 7);
      assert.deepEqual(p.pageErrors, []);
    } finally {
      model.dispose();
    }
  } finally {
    await p.close();
  }
});
