// Browser-test harness for node:test: Debian's Chromium (/usr/bin/chromium, installed by
// tools/setup.sh) driven headless by playwright-core, against tools/serve.js serving web/.
// Nothing leaves the machine: every request to another origin is recorded and aborted.
//
//   import { test } from 'node:test';
//   import assert from 'node:assert/strict';
//   import { openPage, screenshot } from './harness.js';
//
//   test('the demo starts', async () => {
//     const { page, consoleErrors, pageErrors, foreignRequests, close } = await openPage('/demo/');
//     try {
//       assert.equal(await page.evaluate(() => document.body.dataset.ready), 'true');
//       await screenshot(page, 'demo-start');             // tests/browser/artifacts/demo-start.png
//       assert.deepEqual(pageErrors, []);
//       assert.deepEqual(consoleErrors, []);
//       assert.deepEqual(foreignRequests, []);
//     } finally {
//       await close();
//     }
//   });
//
// Lifetime: one server (startServer({ port: 0 }) on web/) and one browser per test process
// (node --test runs each file in its own process), started by the first openPage and shared by
// every page. SHUTDOWN IS AUTOMATIC: importing this module registers node:test's `after(shutdown)`
// on the file's root test, which closes the browser and the server when the file's tests are done.
// `shutdown()` is also exported and idempotent; calling it yourself is harmless but not needed.
// Each openPage has its own browser context (fresh cookies, storage, cache): close() it.
//
// openPage(path, options) -> { page, url, consoleErrors, pageErrors, foreignRequests, ready, close }
//   path             '/demo/', '/widgets/example.html#x' (resolved against the server's url), or
//                    a full 'http://127.0.0.1:PORT/...' URL of another server you started yourself
//                    with startServer({ root }) (then that server's origin is "this origin")
//   viewport         { width: 1280, height: 800 }
//   colorScheme      'light' | 'dark' | 'no-preference' (prefers-color-scheme); default: light
//   reducedMotion    'reduce' | 'no-preference'; deviceScaleFactor: number (default 1)
//   waitForReady     true: wait until document.body.dataset.ready is 'true' or 'error' (the demo
//                    sets it); false: only wait for the load event (plain test pages)
//   timeout          ms for navigation and readiness (default 20000); on timeout openPage throws
//                    with the errors seen so far, and closes its context. It throws at once,
//                    the same way, if a <script> fails to load (a 404, or a module whose imports
//                    fail: the page could never become ready)
//   page             Playwright Page (https://playwright.dev/docs/api/class-page)
//   url              the server's base URL, 'http://127.0.0.1:PORT/'
//   consoleErrors    string[]: console messages of type 'error' ("text (at url:line)"); CSP
//                    violations and failed loads (404s) show up here
//   pageErrors       string[]: uncaught exceptions and unhandled rejections ("Name: message")
//   foreignRequests  string[]: URLs of requests (WebSockets too) to any other origin, all aborted
//   ready            document.body.dataset.ready after the wait ('true', 'error'; null if not waited)
//   close()          closes the context (and its pages)
// screenshot(page, name, { fullPage = true } = {}) -> absolute path of
//   tests/browser/artifacts/<name>.png (name: letters, digits, '.', '_', '-')
import { after } from 'node:test';
import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { startServer } from '../../tools/serve.js';

export const CHROMIUM_PATH = '/usr/bin/chromium';
export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
export const ARTIFACTS_DIR = fileURLToPath(new URL('./artifacts/', import.meta.url));

let serverPromise = null;
let browserPromise = null;

/** The shared server on web/ (started on first use): { url, port, close }. */
export function getServer() {
  serverPromise ??= startServer({ port: 0 });
  return serverPromise;
}

/**
 * The shared headless Chromium (launched on first use). Playwright's launch() gives Chromium a
 * fresh temporary --user-data-dir (under os.tmpdir()) and deletes it when the browser closes.
 */
export function getBrowser() {
  browserPromise ??= chromium.launch({
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: CHROMIUM_ARGS,
    timeout: 60_000,
  }).catch((error) => {
    browserPromise = null;
    throw new Error(
      `could not launch ${CHROMIUM_PATH} (install it with tools/setup.sh): ${error.message}`,
      { cause: error });
  });
  return browserPromise;
}

export async function openPage(path, {
  viewport = { width: 1280, height: 800 },
  colorScheme,
  reducedMotion,
  deviceScaleFactor,
  waitForReady = true,
  timeout = 20_000,
} = {}) {
  let target;
  let base;
  if (/^https?:\/\//.test(path)) {
    target = new URL(path);
    base = `${target.origin}/`;
  } else {
    base = (await getServer()).url;
    target = new URL(path, base);
  }
  const origin = target.origin;
  const browser = await getBrowser();

  const contextOptions = { viewport, serviceWorkers: 'block' };
  if (colorScheme !== undefined) contextOptions.colorScheme = colorScheme;
  if (reducedMotion !== undefined) contextOptions.reducedMotion = reducedMotion;
  if (deviceScaleFactor !== undefined) contextOptions.deviceScaleFactor = deviceScaleFactor;
  const context = await browser.newContext(contextOptions);
  context.setDefaultTimeout(timeout);
  context.setDefaultNavigationTimeout(timeout);

  const consoleErrors = [];
  const pageErrors = [];
  const foreignRequests = [];
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await context.close().catch(() => {});
  };

  try {
    await context.route('**/*', (route) => {
      const url = route.request().url();
      let requestOrigin;
      try {
        requestOrigin = new URL(url).origin;
      } catch {
        requestOrigin = null;
      }
      if (requestOrigin === origin) return route.continue();
      foreignRequests.push(url);
      return route.abort('blockedbyclient');
    });
    await context.routeWebSocket(/.*/, (ws) => {
      if (new URL(ws.url()).host === target.host) {
        ws.connectToServer();
        return;
      }
      foreignRequests.push(ws.url());
      ws.close({ code: 1008, reason: 'blocked by the test harness' });
    });

    const page = await context.newPage();
    // A <script> that fails to load (a 404, or a module whose imports fail) never runs, so the
    // page never sets data-ready: report it at once instead of waiting for the timeout.
    let scriptFailed;
    const scriptFailure = new Promise((resolve) => { scriptFailed = resolve; });
    await page.exposeFunction('__headscopeHarnessScriptError', (src) => scriptFailed(src));
    await page.addInitScript(() => {
      window.addEventListener('error', (event) => {
        const t = event.target;
        if (t && t !== window && t.tagName === 'SCRIPT') {
          window.__headscopeHarnessScriptError(t.src || '(inline script)');
        }
      }, true);
    });
    page.on('console', (message) => {
      if (message.type() !== 'error') return;
      const { url, lineNumber } = message.location();
      consoleErrors.push(url ? `${message.text()} (at ${url}:${lineNumber + 1})` : message.text());
    });
    page.on('pageerror', (error) => {
      pageErrors.push(`${error.name ?? 'Error'}: ${error.message}`);
    });

    await page.goto(target.href, { waitUntil: 'load' });
    let ready = null;
    if (waitForReady) {
      const readySelector = page.waitForSelector('body[data-ready="true"], body[data-ready="error"]',
        { state: 'attached', timeout });
      const failedScript = scriptFailure.then((src) => ({ failedScript: src }));
      let outcome;
      try {
        outcome = await Promise.race([readySelector, failedScript]);
      } catch (error) {
        const current = await page.evaluate(() => document.body?.dataset.ready ?? null).catch(() => null);
        throw new Error(
          `openPage(${JSON.stringify(path)}): document.body.dataset.ready did not become 'true' or ` +
          `'error' within ${timeout} ms (it is ${JSON.stringify(current)}).\n` +
          `pageErrors: ${JSON.stringify(pageErrors, null, 2)}\n` +
          `consoleErrors: ${JSON.stringify(consoleErrors, null, 2)}`,
          { cause: error });
      }
      if (outcome?.failedScript !== undefined) {
        readySelector.catch(() => {});   // abandoned; rejects when the context closes
        await new Promise((r) => setTimeout(r, 100));   // let the console report which file 404'd
        throw new Error(
          `openPage(${JSON.stringify(path)}): the script ${outcome.failedScript} failed to load ` +
          `(it, or a module it imports, is missing or broken), so the page never became ready.\n` +
          `pageErrors: ${JSON.stringify(pageErrors, null, 2)}\n` +
          `consoleErrors: ${JSON.stringify(consoleErrors, null, 2)}`);
      }
      ready = await page.evaluate(() => document.body.dataset.ready);
    }
    return { page, url: base, consoleErrors, pageErrors, foreignRequests, ready, close };
  } catch (error) {
    await close();
    throw error;
  }
}

export async function screenshot(page, name, { fullPage = true } = {}) {
  if (!/^[\w.-]+$/.test(name) || name.startsWith('.')) {
    throw new Error(`screenshot name must be letters, digits, '.', '_' or '-', got ${JSON.stringify(name)}`);
  }
  await mkdir(ARTIFACTS_DIR, { recursive: true });
  const path = join(ARTIFACTS_DIR, `${name}.png`);
  await page.screenshot({ path, fullPage });
  return path;
}

export async function shutdown() {
  const browser = browserPromise;
  const server = serverPromise;
  browserPromise = null;
  serverPromise = null;
  if (browser) await browser.then((b) => b.close(), () => {});
  if (server) await server.then((s) => s.close(), () => {});
}

after(shutdown);
