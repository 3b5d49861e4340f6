// The widgets as a tutorial author installs them: the real `npm pack` tarball installed into an
// empty folder, served by a plain static server (the `send` package, not tools/serve.js), in
// Chromium:
//   1. same origin: a page imports 'headscope/widgets' from node_modules through an import map
//      and renders each widget with options;
//   2. another origin: a page under a strict Content-Security-Policy loads the widgets' module
//      from the first origin (CORS), with the headers docs/widgets.md's hosting section lists;
//   3. the same page without 'wasm-unsafe-eval' in its CSP: the widget says that is what is missing.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import send from 'send';
import { chromium } from 'playwright-core';
import { CHROMIUM_ARGS, CHROMIUM_PATH } from './harness.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
Object.assign(env, { npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' });
const sh = (command, args, cwd) => spawnSync(command, args, { cwd, env, encoding: 'utf8', maxBuffer: 64 << 20 });

const tmp = mkdtempSync(join(tmpdir(), 'headscope-widgets-pack-'));
const servers = [];
let browser = null;
after(async () => {
  await browser?.close();
  for (const s of servers) s.close();
  rmSync(tmp, { recursive: true, force: true });
});

// A static server on `dir` (127.0.0.1, a free port) that adds `headers` to every response.
async function staticServer(dir, headers = {}) {
  const server = createServer((req, res) => {
    for (const [k, v] of Object.entries(headers)) res.setHeader(k, v);
    send(req, decodeURIComponent(new URL(req.url, 'http://x').pathname), { root: dir, dotfiles: 'deny' })
      .on('error', (e) => { res.statusCode = e.status ?? 500; res.end(); })
      .pipe(res);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(server);
  return `http://127.0.0.1:${server.address().port}`;
}

const WIDGETS = `
  <headscope-walkthrough id="w" stages="input weights" compact></headscope-walkthrough>
  <headscope-heads id="h" text="the cat sat on the mat" heads="2" show-heads="2" hide="seed"></headscope-heads>`;

async function open(url) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const errors = [];
  const foreign = [];
  page.on('pageerror', (e) => errors.push(`${e.name}: ${e.message}`));
  await context.route('**/*', (route) => {
    const u = new URL(route.request().url());
    if (u.hostname === '127.0.0.1') return route.continue();
    foreign.push(u.href);
    return route.abort('blockedbyclient');
  });
  await page.goto(url);
  await page.waitForFunction(() => [...document.querySelectorAll('headscope-walkthrough, headscope-heads, headscope-train')]
    .every((w) => w.dataset.ready), null, { timeout: 30_000 });
  return { page, errors, foreign, close: () => context.close() };
}

const summary = (page) => page.evaluate(() => {
  const w = document.querySelector('#w').shadowRoot;
  const h = document.querySelector('#h').shadowRoot;
  const shown = (e) => e.getClientRects().length > 0;
  return {
    ready: [document.querySelector('#w').dataset.ready, document.querySelector('#h').dataset.ready],
    status: [w, h].map((r) => r.querySelector('.hs-status').textContent),
    matrices: [...w.querySelectorAll('table[data-matrix]')].filter(shown).map((t) => t.dataset.matrix),
    cards: [...h.querySelectorAll('.hs-head-grid [data-head]')].filter(shown).map((c) => c.dataset.head),
    seedShown: [...h.querySelectorAll('[name="seed"]')].some(shown),
    // Set only by headscope.css's :host rule: the stylesheet loaded into the shadow root.
    styled: getComputedStyle(document.querySelector('#w')).getPropertyValue('--hs-head-1').trim() !== '',
  };
});

test('the packed widgets render from node_modules, same origin and from another origin under a strict CSP', { timeout: 900_000 }, async () => {
  // The tarball (prepack builds the wasm), installed offline into an empty folder.
  const pack = sh('npm', ['pack', '--json', '--pack-destination', tmp], root);
  assert.equal(pack.status, 0, pack.stderr);
  const [info] = JSON.parse(pack.stdout.slice(pack.stdout.search(/^\[\s*$/m)));
  for (const f of ['web/widgets/headscope-widgets.js', 'web/widgets/headscope-widgets.d.ts', 'web/views/index.js',
    'web/views/train/view.js', 'web/views/train/whatif.js', 'web/lib/experiments.js', 'web/lib/experiments.d.ts',
    'web/views/index.d.ts', 'web/views/headscope.css', 'web/views/heads/view.js', 'web/views/walkthrough/view.js',
    'web/views/common/heatmap.js']) {
    assert.ok(info.files.some((x) => x.path === f), `${f} is in the tarball`);
  }
  assert.ok(!info.files.some((x) => x.path.startsWith('web/demo/')), 'the demo page is not in the package');
  const app = join(tmp, 'app');
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'tutorial', version: '1.0.0', private: true }));
  const install = sh('npm', ['install', '--offline', '--no-audit', '--no-fund', join(tmp, info.filename)], app);
  assert.equal(install.status, 0, install.stderr);
  assert.ok(existsSync(join(app, 'node_modules/headscope/web/widgets/headscope-widgets.js')));

  // The package's exports resolve for a bundler or an import map: 'headscope/widgets', 'headscope/views'.
  const resolved = sh(process.execPath, ['--input-type=module', '-e',
    "console.log(import.meta.resolve('headscope/widgets'), import.meta.resolve('headscope/views'))"], app);
  assert.match(resolved.stdout, /node_modules\/headscope\/web\/widgets\/headscope-widgets\.js .*node_modules\/headscope\/web\/views\/index\.js/);

  // 1. Same origin, an import map (no CSP on this plain server).
  writeFileSync(join(app, 'index.html'), `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>tutorial</title>
    <script type="importmap">{ "imports": { "headscope": "/node_modules/headscope/web/lib/index.js",
      "headscope/widgets": "/node_modules/headscope/web/widgets/headscope-widgets.js" } }</script>
    <script type="module">import 'headscope/widgets';</script></head><body>${WIDGETS}
    <headscope-train id="t" task="copy" layers="1" heads="2" steps="5" hide="whatif"></headscope-train></body></html>`);
  const assets = await staticServer(app, { 'Access-Control-Allow-Origin': '*' });
  browser = await chromium.launch({ executablePath: CHROMIUM_PATH, args: CHROMIUM_ARGS, headless: true });
  const same = await open(`${assets}/index.html`);
  try {
    const s = await summary(same.page);
    assert.deepEqual(s.ready, ['true', 'true'], JSON.stringify(s));
    assert.deepEqual(s.matrices, ['X', 'A1', 'A2'], 'stages="input weights"');
    assert.deepEqual(s.cards, ['2'], 'show-heads="2"');
    assert.equal(s.seedShown, false, 'hide="seed"');
    // The Train widget trains in its own Worker, started from node_modules.
    await same.page.waitForFunction(() => document.querySelector('#t').shadowRoot
      .querySelector('.hs-train-counter')?.textContent.startsWith('step 5'), null, { timeout: 60_000 });
    assert.deepEqual(same.errors, []);
    assert.deepEqual(same.foreign, []);
  } finally {
    await same.close();
  }

  // 2. Another origin, strict CSP: the module, the stylesheet and the wasm come from `assets`.
  const CSP = (wasm) => `default-src 'none'; script-src 'self' ${assets}${wasm ? " 'wasm-unsafe-eval'" : ''}; ` +
    `style-src 'self' ${assets}; connect-src ${assets}; img-src 'self' data:; worker-src 'self'`;
  const page = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>course</title>
    <script type="module" src="${assets}/node_modules/headscope/web/widgets/headscope-widgets.js"></script>
    </head><body>${WIDGETS}</body></html>`;
  const siteDir = join(tmp, 'site');
  mkdirSync(siteDir);
  writeFileSync(join(siteDir, 'index.html'), page);
  const site = await staticServer(siteDir, { 'Content-Security-Policy': CSP(true) });
  const cross = await open(`${site}/index.html`);
  try {
    const s = await summary(cross.page);
    assert.deepEqual(s.ready, ['true', 'true'], JSON.stringify(s));
    assert.deepEqual(s.matrices, ['X', 'A1', 'A2']);
    assert.deepEqual(s.cards, ['2']);
    assert.equal(s.styled, true, 'the stylesheet loaded from the other origin');
    assert.deepEqual(cross.errors, []);
  } finally {
    await cross.close();
  }

  // 3. The same page without 'wasm-unsafe-eval': an error that says so, not "npm run build".
  const strictDir = join(tmp, 'strict');
  mkdirSync(strictDir);
  writeFileSync(join(strictDir, 'index.html'), page);
  const strict = await staticServer(strictDir, { 'Content-Security-Policy': CSP(false) });
  const blocked = await open(`${strict}/index.html`);
  try {
    const s = await summary(blocked.page);
    assert.deepEqual(s.ready, ['error', 'error']);
    for (const status of s.status) {
      assert.match(status, /Content-Security-Policy does not allow WebAssembly: add 'wasm-unsafe-eval'/, status);
      assert.doesNotMatch(status, /npm run build/);
    }
  } finally {
    await blocked.close();
  }
});
