// Exports of the views (issue 13): SVG that stands alone (no script, no external reference), PNG,
// the numbers as JSON and CSV (checked against the engine run in Node on the same inputs), the
// walkthrough's numbers as a case document that the library runs and checks, and the buttons'
// downloads.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.js';
import { init } from '../../web/lib/index.js';
import * as T from '../../web/views/heads/transforms.js';

const TEXT = 'the cat sat on the mat';

async function widgetPage(body) {
  const p = await openPage('/widgets/example.html', { waitForReady: false });
  const html = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>export test</title>
    <script type="module" src="/widgets/headscope-widgets.js"></script></head><body><main>${body}</main></body></html>`;
  await p.page.route('**/widgets/__test__.html', (route) => route.fulfill({ contentType: 'text/html', body: html }));
  await p.page.goto(`${p.url}widgets/__test__.html`);
  await p.page.waitForFunction(() => [...document.querySelectorAll('headscope-walkthrough, headscope-heads')]
    .every((w) => w.dataset.ready === 'true'));
  await p.page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  return p;
}

// A widget's export, read in the page: { type, size, text (not for png), png: { width, height } }.
const exported = (page, selector, format) => page.evaluate(async ([sel, f]) => {
  const blob = await document.querySelector(sel).exportAs(f);
  const out = { type: blob.type, size: blob.size };
  if (f === 'png') {
    const bitmap = await createImageBitmap(blob);
    out.png = { width: bitmap.width, height: bitmap.height };
    const head = new Uint8Array(await blob.slice(0, 8).arrayBuffer());
    out.signature = Array.from(head);
  } else {
    out.text = await blob.text();
  }
  return out;
}, [selector, format]);

test('Heads: SVG stands alone, PNG decodes, JSON and CSV hold the engine\'s numbers', async () => {
  const p = await widgetPage(`<headscope-heads id="h" text="${TEXT}" heads="4" show-heads="1 3" off="3"></headscope-heads>`);
  try {
    const svg = await exported(p.page, '#h', 'svg');
    assert.equal(svg.type, 'image/svg+xml');
    assert.match(svg.text, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    assert.doesNotMatch(svg.text, /<script|href=|url\(|var\(--/i, 'no script, no external reference, no CSS variable');
    const shape = await p.page.evaluate((text) => {
      const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
      const groups = [...doc.querySelectorAll('g[data-panel]')];
      return { error: doc.querySelector('parsererror') !== null, panels: groups.map((g) => g.dataset.panel),
        cells: groups.map((g) => g.querySelectorAll('rect[fill]:not([fill="none"])').length) };
    }, svg.text);
    assert.equal(shape.error, false, 'the SVG parses');
    assert.doesNotMatch(svg.text, /data-mark/, 'no cell explained yet: nothing outlined');
    assert.deepEqual(shape.panels.map((t) => t.split(':')[0]), ['Head 1', 'Head 3'], 'the shown heads');
    assert.match(shape.panels[1], /switched off/);
    assert.deepEqual(shape.cells, [36, 36], '6 x 6 cells per head');

    // The explained cell (focus head 1's heatmap, one step right) is outlined in the picture.
    await p.page.locator('#h').locator('[data-head="1"] canvas').focus();
    await p.page.keyboard.press('ArrowRight');
    const marked = await exported(p.page, '#h', 'svg');
    assert.match(marked.text, /<g data-panel="Head 1:[^"]*">(?:(?!<\/g>)[\s\S])*data-mark="0,1"/, 'head 1, query 1 -> key 2 outlined');

    const png = await exported(p.page, '#h', 'png');
    assert.equal(png.type, 'image/png');
    assert.deepEqual(png.signature, [137, 80, 78, 71, 13, 10, 26, 10]);
    assert.ok(png.png.width > 200 && png.png.height > 100, JSON.stringify(png.png));

    const json = JSON.parse((await exported(p.page, '#h', 'json')).text);
    assert.equal(json.view, 'heads');
    assert.deepEqual(json.state.show, [1, 3]);
    assert.deepEqual(json.heads.map((h) => [h.head, h.on]), [[1, true], [3, false]]);
    // The same layer in Node: the view's features and preset weights, the engine's trace.
    const hs = await init();
    const tokens = T.tokenize(TEXT).tokens;
    assert.deepEqual(json.tokens.queries, tokens);
    const x = T.embed(tokens, { embedDim: 64 });
    const sd = T.buildStateDict({ embedDim: 64, numHeads: 4, heads: json.state.presets, seed: 1, sharpness: 6 });
    const mha = hs.createMultiheadAttention({ embedDim: 64, numHeads: 4 });
    mha.loadStateDict(sd);
    const { weights } = mha.trace(x, x, x, {});
    mha.dispose();
    const L = tokens.length;
    for (const h of json.heads) {
      for (let i = 0; i < L; i++) {
        for (let j = 0; j < L; j++) {
          const want = weights.data[((h.head - 1) * L + i) * L + j];
          assert.ok(Math.abs(h.weights[i][j] - want) <= 1e-6, `head ${h.head} [${i}][${j}]: ${h.weights[i][j]} vs ${want}`);
        }
      }
    }
    const csv = (await exported(p.page, '#h', 'csv')).text.trim().split('\r\n');
    assert.equal(csv[0], 'head,query,query_token,key,key_token,weight,score');
    assert.equal(csv.length, 1 + 2 * L * L);
    const row = csv[1 + L * L + L + 2].split(',');  // head 3, query 2, key 3
    assert.deepEqual(row.slice(0, 5), ['3', '2', tokens[1], '3', tokens[2]]);
    assert.equal(Number(row[5]), json.heads[1].weights[1][2]);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('Walkthrough: the case file export runs in the library and matches; the buttons download', async () => {
  const p = await widgetPage('<headscope-walkthrough id="w" preset="random" seed="5" tokens="4" dims="6" heads="3" causal></headscope-walkthrough>');
  try {
    const doc = JSON.parse((await exported(p.page, '#w', 'case')).text);
    assert.deepEqual(doc.config, { embed_dim: 6, num_heads: 3, bias: false });
    assert.equal(doc.inputs.is_causal, true);
    const hs = await init();
    const check = hs.checkCase(doc, hs.runCase(doc));
    assert.equal(check.ok, true, JSON.stringify(check));
    // And the shown numbers are the case's: Y[1][2] of the page equals expected.output[1][2].
    const json = JSON.parse((await exported(p.page, '#w', 'json')).text);
    assert.equal(json.matrices.Y[1][2], doc.expected.output[1][2]);
    assert.deepEqual(json.state.x, doc.inputs.query);
    const csv = (await exported(p.page, '#w', 'csv')).text.trim().split('\r\n');
    assert.ok(csv.includes(`Y,1,2,${json.matrices.Y[1][2]}`));
    const svg = (await exported(p.page, '#w', 'svg')).text;
    assert.doesNotMatch(svg, /<script|href=/);
    assert.match(svg, /data-panel="A2: A = softmax\(scores\)"/);
    // The toolbar's buttons offer the same files as downloads.
    const button = p.page.locator('#w').locator('[data-export="case"]');
    const [download] = await Promise.all([p.page.waitForEvent('download'), button.click()]);
    assert.equal(download.suggestedFilename(), 'walkthrough-case.json');
    const [png] = await Promise.all([p.page.waitForEvent('download'), p.page.locator('#w').locator('[data-export="png"]').click()]);
    assert.equal(png.suggestedFilename(), 'headscope-walkthrough.png');
    assert.deepEqual(p.pageErrors, []);
    assert.deepEqual(p.consoleErrors, []);
  } finally {
    await p.close();
  }
});
