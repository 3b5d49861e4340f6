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

// A tiny RFC 4180 reader: rows of cells (quoted cells may hold commas, quotes, CR and LF).
function parseCSV(text) {
  const rows = [];
  let row = [];
  let cell = '';
  let quoted = false;
  for (let k = 0; k < text.length; k++) {
    const c = text[k];
    if (quoted) {
      if (c === '"' && text[k + 1] === '"') {
        cell += '"';
        k++;
      } else if (c === '"') {
        quoted = false;
      } else {
        cell += c;
      }
    } else if (c === '"') {
      quoted = true;
    } else if (c === ',') {
      row.push(cell);
      cell = '';
    } else if (c === '\r' && text[k + 1] === '\n') {
      row.push(cell);
      rows.push(row);
      row = [];
      cell = '';
      k++;
    } else {
      cell += c;
    }
  }
  assert.equal(quoted, false, 'the CSV ends outside a quoted cell');
  assert.equal(row.length + cell.length, 0, 'the CSV ends with CRLF');
  return rows;
}

test('Heads: text with characters XML forbids (U+0001, U+000B, U+FFFE, U+FFFF) exports a well-formed SVG, a CSV that round-trips, valid JSON', async () => {
  // U+000B separates tokens (it is a space); U+0001, U+FFFE and U+FFFF are tokens of their own,
  // which XML 1.0 cannot hold at all (not even as character references). (The Heads state refuses
  // text with a lone surrogate; the export replaces those too.)
  const text = 'cat\u0001 sat\u000bon \ufffe the \uffff mat, "said" he\r\nagain\ttab';
  const p = await widgetPage('<headscope-heads id="h" heads="2"></headscope-heads>');
  try {
    const tokens = T.tokenize(text).tokens;
    // Set from script, then drawn (the view computes in an animation frame).
    await p.page.evaluate(async ([t, n]) => {
      const el = document.querySelector('#h');
      await el.setText(t);
      for (let k = 0; k < 100; k++) {
        const doc = JSON.parse(await (await el.exportAs('json')).text());
        if (doc.tokens.queries.length === n) return;
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error('the new text was not drawn in 5 s');
    }, [text, tokens.length]);
    assert.ok(tokens.includes('\u0001') && tokens.includes('\ufffe') && tokens.includes('\uffff'), JSON.stringify(tokens));
    const svg = await exported(p.page, '#h', 'svg');
    const shape = await p.page.evaluate((s) => {
      const doc = new DOMParser().parseFromString(s, 'image/svg+xml');
      const error = doc.querySelector('parsererror');
      const g = doc.querySelector('g[data-panel]');
      // The row labels (text-anchor end, left of the grid) and each cell's title.
      const rowLabels = [...(g?.querySelectorAll('text[text-anchor="end"]') ?? [])].map((t) => t.textContent);
      const titles = [...(g?.querySelectorAll('rect > title') ?? [])].map((t) => t.textContent);
      return { error: error === null ? null : error.textContent, rowLabels, titles };
    }, svg.text);
    assert.equal(shape.error, null, 'the SVG parses as XML');
    // The visible text: every token, the forbidden characters shown as U+FFFD.
    const shown = (s) => s.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]|[\ud800-\udfff]/g, '\ufffd');
    assert.deepEqual(shape.rowLabels, tokens.map((t) => shown(Array.from(t).length > 10 ? `${Array.from(t).slice(0, 9).join('')}…` : t)));
    assert.ok(shape.titles.includes(`${shown(tokens[0])} → ${shown(tokens[1])}: ${shape.titles[1].split(': ')[1]}`), shape.titles[1]);
    assert.ok(shape.rowLabels.includes('cat') && shape.rowLabels.includes('\ufffd') && shape.rowLabels.includes('mat'));
    // JSON: valid, the tokens exactly.
    const json = JSON.parse((await exported(p.page, '#h', 'json')).text);
    assert.deepEqual(json.tokens.queries, tokens);
    assert.equal(json.state.text, text);
    // CSV: every token cell reads back as the token.
    const rows = parseCSV((await exported(p.page, '#h', 'csv')).text);
    assert.deepEqual(rows[0], ['head', 'query', 'query_token', 'key', 'key_token', 'weight', 'score']);
    const L = tokens.length;
    assert.equal(rows.length, 1 + 2 * L * L);
    for (let i = 0; i < L; i++) assert.equal(rows[1 + i * L][2], tokens[i], `query token ${i + 1}`);
    assert.ok(rows.every((r) => r.length === 7), 'seven cells in every row');
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('Heads with a loaded case whose name has control characters: the SVG parses', async () => {
  const p = await widgetPage('<headscope-heads id="h"></headscope-heads>');
  try {
    const { seedWorkedExample } = await import('../../web/lib/examples.js');
    const doc = { ...structuredClone(seedWorkedExample), name: 'bad\u0001name\u001b[2J\uffff' };
    await p.page.evaluate((d) => document.querySelector('#h').setCase(d), doc);
    const svg = (await exported(p.page, '#h', 'svg')).text;
    const parsed = await p.page.evaluate((s) => {
      const d = new DOMParser().parseFromString(s, 'image/svg+xml');
      return { error: d.querySelector('parsererror')?.textContent ?? null,
        panels: [...d.querySelectorAll('g[data-panel]')].map((g) => g.getAttribute('data-panel')) };
    }, svg);
    assert.equal(parsed.error, null);
    assert.deepEqual(parsed.panels, ['Head 1: case bad\ufffdname\ufffd[2J\ufffd', 'Head 2: case bad\ufffdname\ufffd[2J\ufffd']);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});
