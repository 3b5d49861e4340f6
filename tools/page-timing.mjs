#!/usr/bin/env node
// Page timing of the demo's Walkthrough and Heads views in Debian's Chromium (headless, through
// playwright-core, against tools/serve.js): how long an interaction takes until the next frame
// is painted, as medians over repeated runs. A measurement tool, not a test: it never fails on
// a slow number, it prints them (and exits 0 unless the page could not be opened).
//
//   node tools/page-timing.mjs                 a table
//   node tools/page-timing.mjs --json          the same numbers as JSON
//   node tools/page-timing.mjs --runs 21       repetitions per measurement (default 15)
//   node tools/page-timing.mjs --size 16x16x16 tokens x dims x heads (default 16x16x16)
//   node tools/page-timing.mjs --cold-runs 3   fresh pages for "heads (first time)" (default 5)
//
// Measured, at the given size (the demo's controls set it first):
//   edit       a new number typed into X[0][0] (its 'input' event), as the view recomputes while
//              typing
//   preset     a click on "Seeded random" / "Identity" (alternating: a new set of numbers at
//              the same sizes)
//   heads      the head count changed H -> H/2 -> H ... (alternating; needs an even H)
//   heads (first time)  a fresh page at L x E, then H heads: every head's matrices are created
//              (--cold-runs N pages, default 5; 0 leaves it out)
// For each: `to paint` is from just before the event is dispatched until the first task after
// the next frame was rendered (requestAnimationFrame, then a MessageChannel message: the
// rendering step of that frame, style, layout and paint, has run by then). It includes the wait
// for the frame's vsync slot (up to ~16.7 ms at 60 Hz). `busy` leaves that wait out: the event's
// script time plus the rendering step of the frame (from the rAF callback to the message).
// `settled` is until the work the view deferred to after the frame (the numbers of the matrices
// out of view, written in tasks of ~10 ms) is done too: the view's data-pending attribute is off.
// Also reported: the number of elements in the view after the last run.
//
// The Heads view (--heads-tokens N, default 128, at 16 heads; --no-heads leaves it out):
//   heads edit   the sentence's last token changed (a new text of N tokens, 'input' event): the
//                view tokenizes, runs trace + the ablation forward, redraws 16 heatmaps, the
//                line view and the ablation, all in the next frame
//   long case    a 3,000-token case (E 8, 2 heads) loaded in "Your weights" and shown in the Heads
//                view: the longest main-thread task (PerformanceObserver 'longtask', which reports
//                tasks over 50 ms; 0 when there was none) from the file's selection until the view
//                shows the case
//
// The Train view (--no-train leaves it out): the induction preset played for --train-seconds
// (default 10): the longest main-thread task meanwhile (PerformanceObserver 'longtask': tasks
// over 50 ms; 0 when there was none), and the steps per second it trained.
import { chromium } from 'playwright-core';
import { cpus } from 'node:os';
import { startServer } from './serve.js';

const CHROMIUM_PATH = '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

function parseArgs(argv) {
  const args = { json: false, runs: 15, coldRuns: 5, size: [16, 16, 16], headsTokens: 128, heads: true, train: true, trainSeconds: 10 };
  for (let k = 0; k < argv.length; k++) {
    const a = argv[k];
    if (a === '--json') args.json = true;
    else if (a === '--runs') args.runs = Number(argv[++k]);
    else if (a === '--cold-runs') args.coldRuns = Number(argv[++k]);
    else if (a === '--size') args.size = String(argv[++k]).split('x').map(Number);
    else if (a === '--heads-tokens') args.headsTokens = Number(argv[++k]);
    else if (a === '--no-heads') args.heads = false;
    else if (a === '--no-train') args.train = false;
    else if (a === '--train-seconds') args.trainSeconds = Number(argv[++k]);
    else if (a === '--help' || a === '-h') {
      console.log('usage: node tools/page-timing.mjs [--json] [--runs N] [--cold-runs N] [--size LxExH] [--heads-tokens N] [--no-heads]');
      process.exit(0);
    } else {
      console.error(`page-timing: unknown argument ${a}`);
      process.exit(2);
    }
  }
  if (!Number.isInteger(args.runs) || args.runs < 1 || !Number.isInteger(args.coldRuns) || args.coldRuns < 0) {
    console.error('page-timing: --runs needs a positive integer, --cold-runs a non-negative one');
    process.exit(2);
  }
  const [L, E, H] = args.size;
  if (![L, E, H].every(Number.isInteger) || E % H !== 0) {
    console.error('page-timing: --size needs L x E x H with H dividing E');
    process.exit(2);
  }
  return args;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};

// Installed in the page: runs `action` and resolves with its timings once the next frame is done.
// The frame callback is requested before the action runs, so that it is the frame's first
// callback and its message the first task after the frame (the view may queue work of its own
// for after the frame: `settled` waits for that too).
function installTimer() {
  const nextTask = () => new Promise((resolve) => {
    const channel = new MessageChannel();
    channel.port1.onmessage = () => resolve(performance.now());
    channel.port2.postMessage(0);
  });
  window.__hsTime = (action) => new Promise((resolve) => {
    let t0;
    let t1;
    requestAnimationFrame(() => {
      const tRaf = performance.now();
      nextTask().then(async (t2) => {
        // The work the view queued for after the frame: done when it takes data-pending off.
        let t3 = await nextTask();
        while (document.querySelector('.hs-walkthrough[data-pending]')) t3 = await nextTask();
        resolve({ toPaint: t2 - t0, busy: (t1 - t0) + (t2 - tRaf), script: t1 - t0, settled: t3 - t0 });
      });
    });
    t0 = performance.now();
    action();
    t1 = performance.now();
  });
}

// The Heads view: an edit of an N-token sentence at 16 heads, then the longest task of a 3,000-token case.
async function measureHeads(page, server, args) {
  const N = args.headsTokens;
  const words = Array.from({ length: N }, (_, k) => (k % 9 === 0 ? `retry=${k}` : ['ERROR', '[api]', 'timeout', 'db', '5000ms', 'GET', '/v1', 'ok'][k % 8]));
  const text = words.join(' ');
  await page.goto(`${server.url}demo/#heads?heads=16&text=${encodeURIComponent(text)}`, { waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="true"]', { state: 'attached', timeout: 30_000 });
  await page.waitForFunction((n) => document.querySelectorAll('#panel-heads [data-pad-token]').length === n &&
    document.querySelectorAll('#panel-heads .hs-head-grid [data-head]').length === 16, N, { timeout: 30_000 });
  await page.evaluate(installTimer);
  const samples = [];
  for (let k = 0; k < args.runs + 1; k++) {
    const s = await page.evaluate(({ k: run }) => {
      const input = document.querySelector('#panel-heads [name="text"]');
      return window.__hsTime(() => {
        input.value = input.value.replace(/\S+$/, run % 2 ? 'ok' : 'db');
        input.dispatchEvent(new Event('input', { bubbles: true }));
      });
    }, { k });
    if (k > 0) samples.push(s);   // the first is a warm-up
    await page.waitForTimeout(30);
  }
  const tokens = await page.evaluate(() => document.querySelectorAll('#panel-heads [data-pad-token]').length);
  const results = {
    [`heads edit (${tokens} tokens, 16 heads)`]: {
      runs: samples.length, toPaintMs: median(samples.map((s) => s.toPaint)), busyMs: median(samples.map((s) => s.busy)),
      scriptMs: median(samples.map((s) => s.script)), settledMs: median(samples.map((s) => s.settled)),
      maxToPaintMs: Math.max(...samples.map((s) => s.toPaint)),
    },
  };
  // A 3,000-token case, loaded and shown.
  const L = 3000;
  const E = 8;
  let seed = 7;
  const next = () => { seed = (Math.imul(seed, 1103515245) + 12345) >>> 0; return Math.round((seed / 2 ** 32 * 2 - 1) * 1000) / 1000; };
  const m = (r, c) => Array.from({ length: r }, () => Array.from({ length: c }, next));
  const doc = { name: 'long', config: { embed_dim: E, num_heads: 2 },
    state_dict: { in_proj_weight: m(3 * E, E), in_proj_bias: m(1, 3 * E)[0], 'out_proj.weight': m(E, E), 'out_proj.bias': m(1, E)[0] },
    inputs: { query: m(L, E) } };
  await page.goto(`${server.url}demo/#load`, { waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="true"]', { state: 'attached', timeout: 30_000 });
  await page.evaluate(() => {
    window.__longTasks = [];
    new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__longTasks.push(e.duration); })
      .observe({ type: 'longtask' });
  });
  const started = Date.now();
  await page.setInputFiles('#panel-load input[type="file"]', { name: 'long.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(doc)) });
  await page.waitForFunction(() => document.querySelector('.hs-status')?.textContent.includes('Loaded long.json'), null, { timeout: 120_000 });
  await page.click('#panel-load button:has-text("Show in the Heads view")');
  await page.waitForFunction(() => /3000 queries/.test(document.querySelector('#panel-heads .hs-heads-case-note')?.textContent ?? '') &&
    document.querySelector('#panel-heads .hs-heads')?.getAttribute('aria-busy') === 'false', null, { timeout: 120_000 });
  await page.waitForTimeout(300);
  const longTasks = await page.evaluate(() => window.__longTasks);
  results['long case (3,000 tokens): longest task'] = {
    runs: 1, toPaintMs: Math.max(0, ...longTasks), busyMs: NaN, scriptMs: NaN, settledMs: Date.now() - started,
    maxToPaintMs: Math.max(0, ...longTasks), longTasks: longTasks.length,
  };
  return results;
}

// The Train view while it trains: the longest main-thread task, and the training speed.
async function measureTrain(page, server, args) {
  await page.goto(`${server.url}demo/#train`, { waitUntil: 'load' });
  await page.waitForFunction(() => document.querySelector('#panel-train .hs-train')?.dataset.ready === 'true', null, { timeout: 60_000 });
  await page.evaluate(() => {
    window.__longTasks = [];
    new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__longTasks.push(e.duration); })
      .observe({ type: 'longtask' });
  });
  const stepOf = () => page.evaluate(() => Number(document.querySelector('#panel-train .hs-train-counter').textContent.match(/step (\d+)/)[1]));
  const before = await stepOf();
  const started = Date.now();
  await page.click('#panel-train [name="play"]');
  await page.waitForTimeout(args.trainSeconds * 1000);
  await page.click('#panel-train [name="play"]');
  const seconds = (Date.now() - started) / 1000;
  await page.waitForTimeout(500);
  const steps = (await stepOf()) - before;
  const longTasks = await page.evaluate(() => window.__longTasks);
  return {
    [`train (induction preset, ${args.trainSeconds} s): longest task`]: {
      runs: 1, toPaintMs: Math.max(0, ...longTasks), busyMs: NaN, scriptMs: NaN, settledMs: NaN,
      maxToPaintMs: Math.max(0, ...longTasks), longTasks: longTasks.length, stepsPerSecond: steps / seconds,
    },
  };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const [L, E, H] = args.size;
  const server = await startServer({ port: 0 });
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: CHROMIUM_ARGS });
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, serviceWorkers: 'block' });
    const page = await context.newPage();
    const pageErrors = [];
    page.on('pageerror', (e) => pageErrors.push(e.message));
    await page.goto(`${server.url}demo/`, { waitUntil: 'load' });
    await page.waitForSelector('body[data-ready="true"], body[data-ready="error"]', { state: 'attached', timeout: 30_000 });
    if (await page.evaluate(() => document.body.dataset.ready) !== 'true') throw new Error('the demo did not start');
    await page.evaluate(installTimer);
    const root = '#panel-walkthrough';
    const select = (label, value) => page.getByLabel(label, { exact: false }).first().selectOption(String(value));
    // Sizes: tokens, then the embedding size (which picks a head count), then the heads.
    await select('Tokens L', L);
    await select('Embedding size E', E);
    await select('Heads H', H);
    const shown = await page.evaluate((r) => {
      const view = document.querySelector(r);
      const pick = (text) => [...view.querySelectorAll('label')].find((l) => l.textContent.startsWith(text))?.querySelector('select')?.value;
      return [pick('Tokens'), pick('Embedding'), pick('Heads')].map(Number);
    }, root);
    if (shown.join('x') !== args.size.join('x')) throw new Error(`the view is at ${shown.join('x')}, not ${args.size.join('x')}`);

    const results = {};
    const time = async (name, makeAction, runs) => {
      const samples = [];
      for (let k = 0; k < runs; k++) {
        samples.push(await page.evaluate(makeAction, { root, k }));
        await page.waitForTimeout(30);   // let idle work settle between runs
      }
      results[name] = {
        runs,
        toPaintMs: median(samples.map((s) => s.toPaint)),
        busyMs: median(samples.map((s) => s.busy)),
        scriptMs: median(samples.map((s) => s.script)),
        settledMs: median(samples.map((s) => s.settled)),
        maxToPaintMs: Math.max(...samples.map((s) => s.toPaint)),
      };
    };

    // One warm-up of each, not counted.
    const edit = ({ root: r, k }) => {
      const input = document.querySelector(`${r} table[data-matrix="X"] td[data-row="0"][data-col="0"] input`);
      return window.__hsTime(() => {
        input.value = String(((k % 7) + 1) / 4);
        input.dispatchEvent(new InputEvent('input', { bubbles: true, composed: true, inputType: 'insertText' }));
      });
    };
    const preset = ({ root: r, k }) => {
      const buttons = [...document.querySelectorAll(`${r} button`)];
      const b = buttons.find((x) => x.textContent === (k % 2 ? 'Identity' : 'Seeded random'));
      return window.__hsTime(() => b.click());
    };
    const heads = ({ root: r, k }) => {
      const label = [...document.querySelectorAll(`${r} label`)].find((l) => l.textContent.startsWith('Heads'));
      const s = label.querySelector('select');
      const all = [...s.options].map((o) => Number(o.value));
      const max = Math.max(...all);
      const target = k % 2 ? max : max / 2;
      return window.__hsTime(() => {
        s.value = String(target);
        s.dispatchEvent(new Event('change', { bubbles: true }));
      });
    };
    await page.evaluate(edit, { root, k: 100 });
    await time('edit', edit, args.runs);
    await page.evaluate(preset, { root, k: 0 });
    await time('preset', preset, args.runs);
    if (H % 2 === 0) {
      await time('heads', heads, args.runs % 2 ? args.runs + 1 : args.runs);   // ends at H again
    }
    const elements = await page.evaluate((r) => document.querySelector(r).querySelectorAll('*').length, root);

    // The first time the view shows H heads at these sizes (every head's matrices are new): a
    // fresh page each run, at L x E with the heads the embedding change picked, then H.
    if (args.coldRuns > 0) {
      const samples = [];
      for (let k = 0; k < args.coldRuns; k++) {
        await page.goto(`${server.url}demo/`, { waitUntil: 'load' });
        await page.waitForSelector('body[data-ready="true"]', { state: 'attached', timeout: 30_000 });
        await page.evaluate(installTimer);
        await select('Tokens L', L);
        await select('Embedding size E', E);
        await page.waitForTimeout(100);
        samples.push(await page.evaluate(({ r, target }) => {
          const label = [...document.querySelectorAll(`${r} label`)].find((l) => l.textContent.startsWith('Heads'));
          const s = label.querySelector('select');
          if (Number(s.value) === target) return null;
          return window.__hsTime(() => {
            s.value = String(target);
            s.dispatchEvent(new Event('change', { bubbles: true }));
          });
        }, { r: root, target: H }));
      }
      const kept = samples.filter(Boolean);
      if (kept.length) {
        results['heads (first time)'] = {
          runs: kept.length,
          toPaintMs: median(kept.map((x) => x.toPaint)),
          busyMs: median(kept.map((x) => x.busy)),
          scriptMs: median(kept.map((x) => x.script)),
          settledMs: median(kept.map((x) => x.settled)),
          maxToPaintMs: Math.max(...kept.map((x) => x.toPaint)),
        };
      }
    }
    if (args.heads) Object.assign(results, await measureHeads(page, server, args));
    if (args.train) Object.assign(results, await measureTrain(page, server, args));
    if (pageErrors.length) throw new Error(`page errors: ${pageErrors.join('; ')}`);

    const report = {
      size: { tokens: L, dims: E, heads: H },
      cpu: `${cpus()[0]?.model ?? 'unknown'} x ${cpus().length}`,
      chromium: browser.version(),
      elements,
      results,
    };
    if (args.json) {
      console.log(JSON.stringify(report, null, 2));
    } else {
      console.log(`Walkthrough at ${L} tokens x ${E} dims x ${H} heads (and the Heads view); ${report.cpu}; Chromium ${report.chromium}`);
      console.log(`${elements} elements in the view`);
      console.log('');
      const rows = [['measure', 'runs', 'to paint (median)', 'busy (median)', 'script (median)', 'to paint (max)',
        'settled (median)']];
      for (const [name, r] of Object.entries(results)) {
        rows.push([name, String(r.runs), `${r.toPaintMs.toFixed(1)} ms`, Number.isNaN(r.busyMs) ? '' : `${r.busyMs.toFixed(1)} ms`,
          Number.isNaN(r.scriptMs) ? "" : `${r.scriptMs.toFixed(1)} ms`, `${r.maxToPaintMs.toFixed(1)} ms`, Number.isNaN(r.settledMs) ? `${r.stepsPerSecond?.toFixed(0) ?? ''} steps/s` : `${r.settledMs.toFixed(1)} ms`]);
      }
      const widths = rows[0].map((_, c) => Math.max(...rows.map((row) => row[c].length)));
      for (const [n, row] of rows.entries()) {
        console.log(row.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))).join('  '));
        if (n === 0) console.log(widths.map((w) => '-'.repeat(w)).join('  '));
      }
    }
  } finally {
    await browser.close();
    await server.close();
  }
}

main().catch((e) => {
  console.error(`page-timing: ${e.message}`);
  process.exit(1);
});
