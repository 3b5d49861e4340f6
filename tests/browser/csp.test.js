// The server's Content-Security-Policy as Chromium enforces it, on a tiny page of this test's own
// (served from a temp folder by startServer({ root })): inline scripts, inline handlers and inline
// style attributes are refused, eval and new Function throw, same-origin scripts run, WebAssembly
// compiles ('wasm-unsafe-eval'), the page is cross-origin isolated (COOP + COEP), and the
// harness aborts and records a request to another origin.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer } from '../../tools/serve.js';
import { openPage, screenshot } from './harness.js';

const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>csp mechanics</title>
  <script>window.inlineRan = true;</script>
  <link rel="stylesheet" href="page.css">
</head>
<body onload="window.handlerRan = true">
  <p id="styled" style="color: rgb(255, 0, 0)">inline style attribute</p>
  <p id="sheet">same-origin stylesheet</p>
  <script src="external.js"></script>
</body>
</html>
`;

const EXTERNAL = `window.externalRan = true;
const results = {};
try { results.eval = String(eval('1 + 1')); } catch (e) { results.eval = e.name; }
try { results.newFunction = String(new Function('return 2')()); } catch (e) { results.newFunction = e.name; }
try { results.setTimeoutString = (setTimeout('window.timeoutStringRan = true', 0), 'scheduled'); } catch (e) { results.setTimeoutString = e.name; }
window.cspResults = results;
// The smallest valid module: magic + version.
WebAssembly.instantiate(new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]))
  .then(() => { results.wasm = 'compiled'; }, (e) => { results.wasm = e.name + ': ' + e.message; })
  .finally(() => { document.body.dataset.ready = 'true'; });
`;

const CSS = '#sheet { color: rgb(0, 0, 255); }\n';

let root;
let server;
before(async () => {
  root = await mkdtemp(join(tmpdir(), 'headscope-csp-'));
  await writeFile(join(root, 'index.html'), PAGE);
  await writeFile(join(root, 'external.js'), EXTERNAL);
  await writeFile(join(root, 'page.css'), CSS);
  server = await startServer({ port: 0, root });
});
after(async () => {
  await server?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

test('Chromium enforces the CSP: no inline code, no eval, wasm allowed, cross-origin isolated', async () => {
  const { page, consoleErrors, pageErrors, foreignRequests, ready, close } =
    await openPage(`${server.url}index.html`);
  try {
    assert.equal(ready, 'true');
    await page.waitForTimeout(50);   // let the string setTimeout fire if it was (wrongly) allowed
    const seen = await page.evaluate(() => ({
      inlineRan: window.inlineRan ?? false,
      handlerRan: window.handlerRan ?? false,
      externalRan: window.externalRan ?? false,
      timeoutStringRan: window.timeoutStringRan ?? false,
      results: window.cspResults,
      inlineStyle: getComputedStyle(document.getElementById('styled')).color,
      sheetStyle: getComputedStyle(document.getElementById('sheet')).color,
      crossOriginIsolated: window.crossOriginIsolated,
      sharedArrayBuffer: typeof SharedArrayBuffer,
    }));
    await screenshot(page, 'csp-mechanics');

    assert.equal(seen.externalRan, true, 'the same-origin script ran');
    assert.equal(seen.inlineRan, false, 'the inline <script> must not run');
    assert.equal(seen.handlerRan, false, 'the inline onload handler must not run');
    assert.equal(seen.results.eval, 'EvalError', 'eval must throw');
    assert.equal(seen.results.newFunction, 'EvalError', 'new Function must throw');
    assert.equal(seen.timeoutStringRan, false, 'setTimeout(string) must not run');
    assert.equal(seen.results.wasm, 'compiled', "WebAssembly compiles under 'wasm-unsafe-eval'");
    assert.notEqual(seen.inlineStyle, 'rgb(255, 0, 0)', 'the inline style attribute must be ignored');
    assert.equal(seen.sheetStyle, 'rgb(0, 0, 255)', 'the same-origin stylesheet applies');
    assert.equal(seen.crossOriginIsolated, true, 'COOP + COEP make the page cross-origin isolated');
    assert.equal(seen.sharedArrayBuffer, 'function');

    assert.deepEqual(pageErrors, []);
    assert.deepEqual(foreignRequests, []);
    // Chromium reports each refusal on the console.
    const violations = consoleErrors.filter((e) => /Content Security Policy/i.test(e));
    assert.ok(violations.some((e) => /inline script/i.test(e)), JSON.stringify(consoleErrors, null, 2));
    assert.ok(violations.some((e) => /style/i.test(e)), JSON.stringify(consoleErrors, null, 2));
  } finally {
    await close();
  }
});

test('the harness aborts and records requests to other origins', async () => {
  const { page, foreignRequests, close } = await openPage(`${server.url}index.html`);
  try {
    // A navigation is not governed by the page's CSP, so it reaches the harness's route, which
    // aborts it before any lookup (.invalid never resolves anyway).
    const foreign = 'http://headscope-harness-check.invalid/x';
    await page.evaluate((url) => { location.href = url; }, foreign);
    const deadline = Date.now() + 5000;
    while (foreignRequests.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(foreignRequests, [foreign]);
  } finally {
    await close();
  }
});

test('openPage with waitForReady: false only waits for load', async () => {
  const { ready, page, close } = await openPage(`${server.url}index.html`, { waitForReady: false, colorScheme: 'dark' });
  try {
    assert.equal(ready, null);
    assert.equal(await page.evaluate(() => matchMedia('(prefers-color-scheme: dark)').matches), true);
  } finally {
    await close();
  }
});
