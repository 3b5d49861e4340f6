// The demo page in Debian's Chromium, as a learner uses it. Screenshots of each view are kept in
// tests/browser/artifacts/ (README images come from there).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openPage, screenshot } from './harness.js';
import { init } from '../../web/lib/index.js';
import { seedWorkedExample } from '../../web/lib/examples.js';

const golden = (name) => fileURLToPath(new URL(`../golden/${name}`, import.meta.url));

async function cellTexts(page, root, matrix) {
  return page.$$eval(`${root} table[data-matrix="${matrix}"] tbody td`, (tds) =>
    tds.map((td) => (td.querySelector('input')?.value ?? td.textContent).trim()));
}

// Every page must run without console errors and without a request to another origin.
function assertClean(p) {
  assert.deepEqual(p.pageErrors, [], 'page errors');
  assert.deepEqual(p.consoleErrors, [], 'console errors');
  assert.deepEqual(p.foreignRequests, [], 'requests to other origins');
}

test('the walkthrough shows the seed example, and editing X recomputes Y with the library', async () => {
  const p = await openPage('/demo/');
  try {
    const root = '#panel-walkthrough';
    const text = await p.page.textContent(root);
    for (const n of ['2.595', '2.723', '0.768', '0.045', '0.187', '1.701']) {
      assert.ok(text.includes(n), `seed number ${n} is on the page`);
    }
    await screenshot(p.page, 'walkthrough');

    // Edit X[0][0] from 1 to 2.5.
    const cell = p.page.locator(`${root} table[data-matrix="X"] td[data-row="0"][data-col="0"] input`);
    await cell.fill('2.5');
    await cell.press('Tab');
    const shown = (await cellTexts(p.page, root, 'Y')).map(Number);

    // The same change through the library in Node.
    const hs = await init();
    const doc = structuredClone(seedWorkedExample);
    doc.inputs.query[0][0] = 2.5;
    doc.inputs.key = doc.inputs.value = doc.inputs.query;
    const want = Array.from(hs.runCase(doc).output.data);
    assert.equal(shown.length, 12);
    shown.forEach((v, i) => assert.ok(Math.abs(v - want[i]) <= 5e-4, `Y[${i}]: ${v} vs ${want[i]}`));
    assert.notEqual(shown[0].toFixed(3), '1.701', 'Y changed');

    // Explain this cell: focusing Y[0][0] writes out its terms.
    await p.page.locator(`${root} table[data-matrix="Y"] td[data-row="0"][data-col="0"] span`).focus();
    const explanation = await p.page.textContent(`${root} .hs-explain`);
    assert.match(explanation, /=/);
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('the heads view: head count changes the grid, hiding a head changes the output', async () => {
  const p = await openPage('/demo/#heads');
  try {
    const root = '#panel-heads';
    await p.page.waitForSelector(`${root} .hs-head-grid [data-head]`);
    await screenshot(p.page, 'heads');
    const count = () => p.page.locator(`${root} .hs-head-grid [data-head]`).count();
    const before = await count();
    await p.page.selectOption(`${root} [name="heads"]`, '8').catch(async () => {
      await p.page.fill(`${root} [name="heads"]`, '8');
      await p.page.press(`${root} [name="heads"]`, 'Enter');
    });
    await p.page.waitForFunction((sel) => document.querySelectorAll(sel).length === 8,
      `${root} .hs-head-grid [data-head]`);
    assert.notEqual(before, 8);
    assert.equal(await count(), 8);

    const diff = async () => Number((await p.page.textContent(`${root} .hs-ablation-diff`)).match(/-?[\d.]+(e-?\d+)?/)[0]);
    const d0 = await diff();
    await p.page.click(`${root} [data-head-toggle="1"]`);
    assert.equal(await p.page.getAttribute(`${root} [data-head-toggle="1"]`, 'aria-pressed'), 'false');
    await p.page.waitForFunction(([sel, v]) => {
      const m = document.querySelector(sel)?.textContent.match(/-?[\d.]+(e-?\d+)?/);
      return m && Number(m[0]) !== v;
    }, [`${root} .hs-ablation-diff`, d0]);
    assert.ok((await diff()) > 0, 'switching head 1 off changes the output');
    await screenshot(p.page, 'heads-ablation');
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('typed markup is shown as text, never run', async () => {
  const p = await openPage('/demo/#heads');
  let dialogs = 0;
  p.page.on('dialog', async (d) => { dialogs++; await d.dismiss(); });
  try {
    const root = '#panel-heads';
    const payload = '<img src=x onerror=alert(1)> hello';
    await p.page.fill(`${root} [name="text"]`, payload);
    await p.page.press(`${root} [name="text"]`, 'Enter');
    await p.page.waitForFunction((sel) => document.querySelector(sel).textContent.includes('<img'), root);
    assert.equal(await p.page.locator(`${root} img`).count(), 0, 'no img element was created');
    await p.page.waitForTimeout(200);
    assert.equal(dialogs, 0);
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('a case file loads into both views; a malformed one shows an error', async () => {
  const p = await openPage('/demo/#load');
  const dir = mkdtempSync(join(tmpdir(), 'headscope-case-'));
  try {
    const root = '#panel-load';
    await p.page.setInputFiles(`${root} input[type="file"]`, golden('realistic-e64-h4-self-kpm.json'));
    await p.page.waitForFunction((sel) => /Matches the file's expected values/.test(document.querySelector(sel).textContent), `${root} .hs-load-summary`);
    await screenshot(p.page, 'load');
    await p.page.click(`${root} button:has-text("Show in the Heads view")`);
    assert.equal(await p.page.getAttribute('#tab-heads', 'aria-selected'), 'true');
    await p.page.waitForFunction(() => document.querySelectorAll('#panel-heads .hs-head-grid [data-head]').length === 4);

    const bad = join(dir, 'broken.json');
    const doc = JSON.parse(readFileSync(golden('seed-worked-example.json'), 'utf8'));
    doc.inputs.query[1][2] = 'x';
    writeFileSync(bad, JSON.stringify(doc));
    await p.page.click('#tab-load');
    await p.page.setInputFiles(`${root} input[type="file"]`, bad);
    await p.page.waitForFunction((sel) => document.querySelector(sel).textContent.length > 0, `${root} [role="alert"]`);
    const error = await p.page.textContent(`${root} [role="alert"]`);
    assert.match(error, /PARSE_ERROR: inputs\.query\[1\]\[2\]/);

    writeFileSync(bad, '{"config": ');
    await p.page.setInputFiles(`${root} input[type="file"]`, bad);
    await p.page.waitForFunction((sel) => /not valid JSON/.test(document.querySelector(sel).textContent), `${root} [role="alert"]`);
    await screenshot(p.page, 'load-error');
    assertClean(p);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await p.close();
  }
});

test('a loaded weights file cannot run code or fetch anything', async () => {
  const p = await openPage('/demo/#load');
  const dir = mkdtempSync(join(tmpdir(), 'headscope-case-'));
  let dialogs = 0;
  p.page.on('dialog', async (d) => { dialogs++; await d.dismiss(); });
  try {
    const root = '#panel-load';
    const doc = JSON.parse(readFileSync(golden('seed-worked-example.json'), 'utf8'));
    doc.name = '<img src="https://example.invalid/x.png" onerror="alert(1)"><script>alert(2)</script>';
    const file = join(dir, 'hostile.json');
    writeFileSync(file, JSON.stringify(doc));
    await p.page.setInputFiles(`${root} input[type="file"]`, file);
    await p.page.waitForFunction((sel) => document.querySelector(sel).textContent.includes('<img'), `${root} .hs-load-summary`);
    await p.page.click(`${root} button:has-text("Show in the Heads view")`);
    await p.page.waitForTimeout(300);
    assert.equal(await p.page.locator('img').count(), 0, 'the name stayed text: no img element');
    assert.equal(await p.page.locator('main script').count(), 0, 'no script element was added');
    assert.equal(dialogs, 0);
    assertClean(p);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await p.close();
  }
});

test('the widgets example page renders both widgets inside tutorial prose', async () => {
  const p = await openPage('/widgets/example.html', { waitForReady: false });
  try {
    await p.page.waitForFunction(() => {
      const widgets = [...document.querySelectorAll('headscope-walkthrough, headscope-heads')];
      return widgets.length === 3 && widgets.every((w) => w.dataset.ready === 'true');
    });
    const tables = await p.page.evaluate(() =>
      [...document.querySelectorAll('headscope-walkthrough, headscope-heads')]
        .map((w) => w.shadowRoot.querySelectorAll('table, svg').length));
    tables.forEach((n, i) => assert.ok(n > 0, `widget ${i} rendered`));
    const seedText = await p.page.evaluate(() => document.querySelector('headscope-walkthrough').shadowRoot.textContent);
    assert.ok(seedText.includes('2.595'));
    await screenshot(p.page, 'widgets');
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('phone width and dark scheme: the page fits and renders', async () => {
  const p = await openPage('/demo/', { viewport: { width: 390, height: 844 }, colorScheme: 'dark' });
  try {
    const overflow = await p.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 1, `page scrolls sideways by ${overflow}px`);
    await screenshot(p.page, 'walkthrough-phone-dark');
    assertClean(p);
  } finally {
    await p.close();
  }
});
