// The "Your weights" view in Debian's Chromium with files a learner might really load: one big
// enough to take seconds (its progress, Cancel, and a second load replacing it), one that is not
// UTF-8, one with non-ASCII text, and one over the size limit.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, ftruncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openPage, screenshot } from './harness.js';
import { init } from '../../web/lib/index.js';

const root = '#panel-load';
const seedPath = fileURLToPath(new URL('../golden/seed-worked-example.json', import.meta.url));
const seedText = readFileSync(seedPath, 'utf8');

// Self-attention over L tokens of E dims with deterministic numbers (3 decimals keep the file
// small). L = 12000, E = 64 is ~4.8 MB and computes for about 5 s in the page's worker here:
// attention costs L^2 E, so the file stays small while the job is long enough to watch and cancel.
function bigCaseFile(L = 12000, E = 64) {
  let s = 1;
  const next = () => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return Math.round((s / 2 ** 32 * 2 - 1) * 1000) / 1000;
  };
  const matrix = (rows, cols) => Array.from({ length: rows }, () => Array.from({ length: cols }, next));
  const doc = {
    name: `big self-attention L=${L} E=${E}`,
    config: { embed_dim: E, num_heads: 4 },
    state_dict: {
      in_proj_weight: matrix(3 * E, E), in_proj_bias: matrix(1, 3 * E)[0],
      'out_proj.weight': matrix(E, E), 'out_proj.bias': matrix(1, E)[0],
    },
    inputs: { query: matrix(L, E), need_weights: false },
  };
  return { name: 'big-case.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(doc)) };
}

function assertClean(p) {
  assert.deepEqual(p.pageErrors, [], 'page errors');
  assert.deepEqual(p.consoleErrors, [], 'console errors');
  assert.deepEqual(p.foreignRequests, [], 'requests to other origins');
}

const isHeadscopeWorker = (w) => w.url().endsWith('/lib/worker.js');

// Chromium lets a terminated worker finish its running task for up to 2 s before it stops it by
// force (WorkerThread's forcible termination delay), and a forward pass is one task: the page
// drops the job at once, the worker's thread is gone within this.
const WORKER_STOP_MS = 3500;

// Resolves true once the page's headscope worker has been terminated (it has one at a time).
async function workerClosed(page, timeout = WORKER_STOP_MS) {
  const worker = page.workers().find(isHeadscopeWorker);
  assert.ok(worker, 'the big case runs in the headscope worker');
  return Promise.race([
    new Promise((resolve) => worker.once('close', () => resolve(true))),
    new Promise((resolve) => setTimeout(() => resolve(false), timeout)),
  ]);
}

// The page's main thread answers within `ms` while the worker computes (setTimeout lag).
async function maxTimerLag(page, durationMs) {
  return page.evaluate((d) => new Promise((resolve) => {
    let worst = 0;
    let last = performance.now();
    const end = last + d;
    const tick = () => {
      const now = performance.now();
      worst = Math.max(worst, now - last - 20);
      last = now;
      if (now < end) setTimeout(tick, 20);
      else resolve(worst);
    };
    setTimeout(tick, 20);
  }), durationMs);
}

test('a long load shows its stages and elapsed time, Cancel stops it at once, the page still works', async () => {
  const p = await openPage('/demo/#load');
  try {
    const { page } = p;
    await page.setInputFiles(`${root} input[type="file"]`, bigCaseFile());
    const progress = page.locator(`${root} .hs-job`);
    await progress.waitFor({ state: 'visible' });
    assert.match(await page.textContent(`${root} .hs-job-title`), /Loading big-case\.json \(4\.\d MB\)/);
    await page.waitForSelector(`${root} [data-stage="compute"][aria-current="step"]`);
    assert.match(await page.textContent(`${root} .hs-job-state`), /Computing… \(step 4 of 5\)/);
    for (const done of ['read', 'parse', 'weights']) {
      assert.ok(await page.locator(`${root} [data-stage="${done}"].hs-job-done`).count(), `${done} is marked done`);
    }
    assert.match(await page.textContent('.hs-status'), /big-case\.json: Computing/);

    // The elapsed time keeps moving, and the page stays responsive, while the worker computes.
    const elapsed = page.locator(`${root} .hs-job-elapsed`);
    const first = await elapsed.textContent();
    await page.waitForFunction(([sel, was]) => document.querySelector(sel).textContent !== was,
      [`${root} .hs-job-elapsed`, first], { timeout: 2000 });
    const lag = await maxTimerLag(page, 600);
    assert.ok(lag < 150, `the main thread was blocked for ${lag.toFixed(0)} ms while computing`);
    assert.match(await page.textContent(`${root} .hs-job-state`), /Computing/, 'still computing');
    await screenshot(page, 'load-progress');

    // Cancel, from the keyboard, by its accessible name.
    const cancel = page.getByRole('button', { name: /cancel loading/i });
    await cancel.focus();
    const closed = workerClosed(page);
    const clicked = Date.now();
    await page.keyboard.press('Enter');
    await page.waitForFunction((sel) => /Cancelled after/.test(document.querySelector(sel).textContent),
      `${root} .hs-job-state`, { timeout: 1000 });
    assert.ok(Date.now() - clicked < 1000, 'cancelled within a second');
    assert.match(await page.textContent('.hs-status'), /cancelled/);
    assert.equal(await closed, true, 'the worker computing the case was terminated');
    assert.equal(await page.locator(`${root} .hs-job-cancel`).isVisible(), false, 'Cancel is gone');
    assert.equal(await page.evaluate(() => document.activeElement?.type), 'file', 'focus moved to the file input');
    await screenshot(page, 'load-cancelled');

    // The page still works: the seed case loads (on the main thread) and its numbers show.
    await page.setInputFiles(`${root} input[type="file"]`, seedPath);
    await page.waitForFunction((sel) => /Matches the file's expected values/.test(document.querySelector(sel).textContent),
      `${root} .hs-load-summary`);
    assert.equal(await progress.isVisible(), false, 'the progress box is gone once loaded');
    await page.click(`${root} button:has-text("Show in the Walkthrough")`);
    const walkthrough = await page.textContent('#panel-walkthrough');
    for (const n of ['2.595', '0.768', '1.701']) assert.ok(walkthrough.includes(n), `seed number ${n} shows`);

    // And a big case after a cancel starts a fresh worker.
    await page.click('#tab-load');
    await page.setInputFiles(`${root} input[type="file"]`, bigCaseFile());
    await page.waitForSelector(`${root} [data-stage="compute"][aria-current="step"]`);
    assert.equal(page.workers().filter(isHeadscopeWorker).length, 1, 'one fresh worker');
    const closedAgain = workerClosed(page);
    await page.focus(`${root} input[type="file"]`);
    await page.keyboard.press('Escape');   // Escape inside the view cancels too
    await page.waitForFunction((sel) => /Cancelled after/.test(document.querySelector(sel).textContent),
      `${root} .hs-job-state`, { timeout: 1000 });
    assert.equal(await closedAgain, true);
    assertClean(p);
  } finally {
    await p.close();
  }
});

// At phone width in the dark scheme, so the progress box is seen there too.
test('a second load while one runs replaces it: the late result of the first is never shown', async () => {
  const p = await openPage('/demo/#load', { viewport: { width: 390, height: 844 }, colorScheme: 'dark' });
  try {
    const { page } = p;
    await page.setInputFiles(`${root} input[type="file"]`, bigCaseFile());
    await page.waitForSelector(`${root} [data-stage="compute"][aria-current="step"]`);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 1, `page scrolls sideways by ${overflow}px`);
    await screenshot(page, 'load-progress-phone-dark');
    const closed = workerClosed(page);
    await page.setInputFiles(`${root} input[type="file"]`, seedPath);
    await page.waitForFunction((sel) => /Matches the file's expected values/.test(document.querySelector(sel).textContent),
      `${root} .hs-load-summary`);
    assert.equal(await closed, true, 'the first job\'s worker was terminated');
    // Long enough for the big job to have finished, had it kept running.
    await page.waitForTimeout(1500);
    const summary = await page.textContent(`${root} .hs-load-summary`);
    assert.ok(summary.includes('seed'), summary);
    assert.ok(!summary.includes('big'), `the cancelled job's result is not shown: ${summary}`);
    assert.equal(await page.locator(`${root} .hs-job`).isVisible(), false);
    assert.match(await page.textContent('.hs-status'), /Loaded seed-worked-example\.json/);
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('files are read exactly: invalid UTF-8 is an error naming UTF-8, non-ASCII text survives', async () => {
  const p = await openPage('/demo/#load');
  try {
    const { page } = p;
    // A Latin-1 "é" (0xe9) inside the name: TextDecoder's default would make it U+FFFD and load.
    const doc = JSON.parse(seedText);
    doc.name = 'caf_';
    const bytes = Buffer.from(JSON.stringify(doc));
    const at = bytes.indexOf('caf_') + 3;
    bytes[at] = 0xe9;
    await page.setInputFiles(`${root} input[type="file"]`, { name: 'latin1.json', mimeType: 'application/json', buffer: bytes });
    await page.waitForFunction((sel) => document.querySelector(sel).textContent.length > 0, `${root} [role="alert"]`);
    const error = await page.textContent(`${root} [role="alert"]`);
    assert.match(error, /^Could not load latin1\.json: PARSE_ERROR: \$: the file is not valid UTF-8 text/);
    // 0xe9 starts a 3-byte character, which the next byte, '"', cannot continue.
    assert.match(error, new RegExp(`\\(bytes e9 22 at offset ${at}\\); case files are JSON, which is UTF-8$`));
    assert.equal(await page.textContent(`${root} .hs-load-summary`), '', 'nothing was loaded');
    await screenshot(page, 'load-not-utf8');

    // Where the bytes break, for each way they can; a byte order mark is kept for the parser.
    const decoded = await page.evaluate(async (cases) => {
      const { decodeCaseBytes } = await import('/demo/loader.js');
      return cases.map((bytes) => {
        try {
          return { text: decodeCaseBytes(new Uint8Array(bytes)) };
        } catch (e) {
          return { error: `${e.code}: ${e.message}` };
        }
      });
    }, [[0x61, 0xff, 0x62], [0x61, 0x80], [0x78, 0xe2, 0x82], [0x78, 0xed, 0xa0, 0x80],
      [0xef, 0xbb, 0xbf, 0x7b, 0x7d], [0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x99, 0x82]]);
    const why = (s) => ({ error: `PARSE_ERROR: $: the file is not valid UTF-8 text (${s}); case files are JSON, which is UTF-8` });
    assert.deepEqual(decoded, [
      why('bytes ff at offset 1'),                 // never valid
      why('bytes 80 at offset 1'),                 // a continuation byte with nothing to continue
      why('it ends inside a character: bytes e2 82 at offset 1'),
      why('bytes ed a0 at offset 1'),              // a UTF-16 surrogate, not a character
      { text: '\ufeff{}' },
      { text: '€🙂' },
    ]);

    // Non-ASCII names (2-, 3- and 4-byte characters) arrive unchanged.
    doc.name = 'Ünïcødé 注意 🙂';
    await page.setInputFiles(`${root} input[type="file"]`,
      { name: 'unicode.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(doc)) });
    await page.waitForFunction((sel) => /Matches the file's expected values/.test(document.querySelector(sel).textContent),
      `${root} .hs-load-summary`);
    assert.ok((await page.textContent(`${root} .hs-load-summary`)).startsWith('Ünïcødé 注意 🙂: embed_dim 4'));
    assert.equal(await page.textContent(`${root} [role="alert"]`), '', 'the earlier error is cleared');
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('a file over the size limit is refused before it is read', async () => {
  const p = await openPage('/demo/#load');
  const dir = mkdtempSync(join(tmpdir(), 'headscope-big-'));
  try {
    const { page } = p;
    const limit = await page.evaluate(async () => (await import('/demo/loader.js')).MAX_FILE_BYTES);
    assert.equal(limit, 64 * 1024 * 1024);
    const file = join(dir, 'huge.json');
    const fd = openSync(file, 'w');
    ftruncateSync(fd, limit + 1);   // sparse: nothing is written, and the page must not read it
    closeSync(fd);
    await page.setInputFiles(`${root} input[type="file"]`, file);
    await page.waitForFunction((sel) => document.querySelector(sel).textContent.length > 0, `${root} [role="alert"]`);
    assert.equal(await page.textContent(`${root} [role="alert"]`),
      `Could not load huge.json: it is ${limit + 1} bytes, more than the 64 MB (${limit} bytes) this page reads`);
    assert.equal(await page.locator(`${root} .hs-job`).isVisible(), false, 'no job was started');
    assert.match(await page.textContent('.hs-status'), /Could not load huge\.json/);
    assertClean(p);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await p.close();
  }
});

// Issue 28, item 3: 183 bytes that name a model of 2^24 x 8 embeddings froze the page for 7-8 s
// and grew its memory to 1.78 GB. Refused at once now, and a transformer case large enough to
// take time runs in the worker, as attention cases do.
test('a tiny transformer case naming a huge model is refused at once; large ones run in the worker', async () => {
  const p = await openPage('/demo/#load');
  try {
    const { page } = p;
    const memory = () => page.evaluate(() => window.headscopeDemo.engine.memory());
    const before = await memory();
    const tiny = '{"kind":"transformer","config":{"vocab_size":16777216,"max_len":8,"d_model":8},' +
      '"state_dict":{},"inputs":{"tokens":[1,2,3]}}';
    const started = Date.now();
    await page.setInputFiles(`${root} input[type="file"]`,
      { name: 'tiny.json', mimeType: 'application/json', buffer: Buffer.from(tiny) });
    await page.waitForFunction((sel) => document.querySelector(sel).textContent.length > 0, `${root} [role="alert"]`);
    const took = Date.now() - started;
    assert.ok(took < 2000, `refused after ${took} ms`);
    assert.match(await page.textContent(`${root} [role="alert"]`),
      /^Could not load tiny\.json: MISSING_PARAMETER: stateDict: missing tok_embed\.weight \[16777216, 8\], pos_embed\.weight \[8, 8\]/);
    const after = await memory();
    assert.equal(after.wasmBytes, before.wasmBytes, 'the page\'s WebAssembly memory did not grow');
    assert.ok(after.heapInUse - before.heapInUse < 64 * 1024, `heap ${before.heapInUse} -> ${after.heapInUse}`);
    assert.equal(page.workers().filter(isHeadscopeWorker).length, 0, 'no worker was needed to refuse it');

    // 1 layer, d_model 64, 512 tokens: about 10^8 multiply-adds, past the worker threshold.
    const hs = await init();
    const model = hs.createTransformer({ vocabSize: 4, maxLen: 512, dModel: 64, nHeads: 2, positions: 'none', seed: 4 });
    const stateDict = Object.fromEntries(Object.entries(model.stateDict()).map(([k, v]) =>
      [k, v.toArray().map(function round(x) { return Array.isArray(x) ? x.map(round) : Math.round(x * 1e4) / 1e4; })]));
    model.dispose();
    const doc = { kind: 'transformer', name: 'long', config: { vocab_size: 4, max_len: 512, d_model: 64, n_heads: 2, positions: 'none' },
      state_dict: stateDict, inputs: { tokens: Array.from({ length: 512 }, (_, i) => (i * 7) % 4) } };
    await page.setInputFiles(`${root} input[type="file"]`,
      { name: 'long.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(doc)) });
    await page.waitForFunction((sel) => document.querySelectorAll(sel).length === 2, `${root} .hs-tcase-head`, { timeout: 30_000 });
    assert.equal(page.workers().filter(isHeadscopeWorker).length, 1, 'it ran in the page\'s worker');
    assert.match(await page.textContent(`${root} .hs-load-summary`), /^long: a transformer case, vocab 4, max_len 512, d_model 64/);
    assertClean(p);
  } finally {
    await p.close();
  }
});

// A "kind": "transformer" case (the induction lab's model: 2 layers x 2 heads, B = 2, T = 32):
// checked against PyTorch's expected values, and a layers x heads grid of batch item 0's patterns.
test('a transformer case: the check per tensor and the loss, a labelled layers x heads pattern grid', async () => {
  const p = await openPage('/demo/#load');
  const lab = fileURLToPath(new URL('../golden/transformer/induction-lab-pre-learned-attn-only-l2-h2-b2.json', import.meta.url));
  const doc = JSON.parse(readFileSync(lab, 'utf8'));
  try {
    const { page } = p;
    await page.setInputFiles(`${root} input[type="file"]`, lab);
    const verdict = page.locator(`${root} .hs-tcase-verdict`);
    await verdict.waitFor({ state: 'visible' });
    const hooks = Object.keys(doc.expected.hooks);
    assert.match(await verdict.textContent(), new RegExp(`^Pass\\. Matches the file's expected values \\(max relative ` +
      `error \\d\\.\\d\\de-[78] over ${hooks.length + 1} tensors; loss 3\\.605159\\d+ vs ${doc.expected.loss}, error \\d\\.\\d\\de-\\d+\\)\\.$`));
    assert.match(await page.textContent(`${root} .hs-load-summary`), /^induction-lab-pre-learned-attn-only-l2-h2-b2: a transformer case, vocab 28, max_len 32, d_model 32, 2 layers x 2 heads, attention only/);
    // Per tensor: logits, every hook, the loss; all pass.
    const rows = page.locator(`${root} .hs-tcase-table tbody tr`);
    assert.equal(await rows.count(), hooks.length + 2);
    assert.deepEqual(await page.locator(`${root} .hs-tcase-table tbody th`).allTextContents(),
      ['logits', ...hooks.map((h) => `hooks.${h}`), 'loss']);
    assert.equal(await page.locator(`${root} .hs-tcase-table tbody tr.hs-fail`).count(), 0);
    // The grid: a heading per layer, a captioned heatmap per head, rows and columns labelled by
    // batch item 0's token ids, each heatmap a keyboard stop with an accessible name.
    assert.deepEqual(await page.locator(`${root} .hs-tcase-patterns h4`).allTextContents(), ['Layer 0', 'Layer 1']);
    const figures = page.locator(`${root} .hs-tcase-head`);
    assert.equal(await figures.count(), 4);
    assert.deepEqual(await figures.locator('figcaption').allTextContents(), ['Head 0', 'Head 1', 'Head 0', 'Head 1']);
    const ids = doc.inputs.tokens[0].map(String);
    for (let k = 0; k < 4; k++) {
      const figure = figures.nth(k);
      assert.deepEqual(await figure.locator('.hs-heatmap-rows span').allTextContents(), ids);
      assert.deepEqual(await figure.locator('.hs-heatmap-cols span').allTextContents(), ids);
      const canvas = figure.locator('canvas');
      assert.equal(await canvas.getAttribute('tabindex'), '0');
      assert.match(await canvas.getAttribute('aria-label'),
        new RegExp(`^Attention pattern of layer ${k >> 1}, head ${k & 1}, 32 x 32 tokens\\.`));
    }
    // Keyboard: Tab reaches the first heatmap from the per-tensor summary; the arrows read cells.
    await page.focus(`${root} .hs-tcase-tensors summary`);
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.closest('figure')?.dataset.layer), '0');
    await page.keyboard.press('ArrowDown');
    const readout = page.locator(`${root} .hs-tcase-readout`);
    const want = doc.expected.hooks['blocks.0.attn.hook_pattern'][0][0][1];
    assert.match(await readout.textContent(), new RegExp(`^layer 0, head 0: query 1 \\(token ${ids[1]}\\) → key 0 ` +
      `\\(token ${ids[0]}\\): weight ${want[0].toFixed(3)}$`));
    await page.keyboard.press('ArrowRight');
    await page.keyboard.press('ArrowRight');
    assert.match(await readout.textContent(), /query 1 .* → key 2 .*: weight 0 \(masked\)$/);
    await screenshot(page, 'load-transformer');

    // A wrong expected loss fails, naming it; a token out of range is refused naming its path.
    const wrong = structuredClone(doc);
    wrong.expected.loss += 0.5;
    await page.setInputFiles(`${root} input[type="file"]`,
      { name: 'wrong-loss.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(wrong)) });
    await page.waitForFunction((sel) => /^Fail\./.test(document.querySelector(sel)?.textContent ?? ''), `${root} .hs-tcase-verdict`);
    assert.match(await verdict.textContent(), /^Fail\. Differs from the file's expected values: loss: got 3\.605159\d+, expected 4\.105159/);
    assert.equal(await page.locator(`${root} .hs-tcase-table tbody tr.hs-fail th`).allTextContents().then((t) => t.join()), 'loss');
    assert.equal(await figures.count(), 4, 'the patterns still show');
    const bad = structuredClone(doc);
    bad.inputs.tokens[1][3] = 28;
    await page.setInputFiles(`${root} input[type="file"]`,
      { name: 'bad-token.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(bad)) });
    await page.waitForFunction((sel) => document.querySelector(sel).textContent.length > 0, `${root} [role="alert"]`);
    assert.equal(await page.textContent(`${root} [role="alert"]`), 'Could not load bad-token.json: PARSE_ERROR: ' +
      'inputs.tokens[1][3]: expected a token id in [0, 27] (config.vocab_size 28), got 28');
    assert.equal(await page.locator(`${root} .hs-tcase-head`).count(), 0, 'the earlier grid is cleared');
    // And an attention case still loads as before.
    await page.setInputFiles(`${root} input[type="file"]`, seedPath);
    await page.waitForFunction((sel) => /Matches the file's expected values/.test(document.querySelector(sel).textContent),
      `${root} .hs-load-summary`);
    assertClean(p);
  } finally {
    await p.close();
  }
});
