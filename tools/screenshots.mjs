// Regenerates the docs' screenshots (docs/screenshots/*.png) from the running page in Debian's
// Chromium: `npm run build && node tools/screenshots.mjs`. Viewport-sized, one per view.
// `node tools/screenshots.mjs train-history whatif` writes only the shots named.
import { fileURLToPath } from 'node:url';
import { openPage, shutdown } from '../tests/browser/harness.js';

const out = (name) => fileURLToPath(new URL(`../docs/screenshots/${name}.png`, import.meta.url));
const shots = [
  { name: 'walkthrough', path: '/demo/', scroll: '#panel-walkthrough table[data-matrix="A1"]' },
  { name: 'walkthrough-output', path: '/demo/', scroll: '#panel-walkthrough table[data-matrix="Y"]',
    focus: '#panel-walkthrough table[data-matrix="Y"] td[data-row="0"][data-col="0"] span' },
  { name: 'heads', path: '/demo/#heads', scroll: '#panel-heads .hs-head-grid' },
  { name: 'heads-lines', path: '/demo/#heads', scroll: '#panel-heads svg' },
  { name: 'your-weights', path: '/demo/#load', upload: 'tests/golden/realistic-e64-h4-self-kpm.json' },
  { name: 'widgets', path: '/widgets/example.html', waitForReady: false },
  { name: 'phone-dark', path: '/demo/', viewport: { width: 390, height: 844 }, colorScheme: 'dark' },
  { name: 'widgets-linked', path: '/widgets/example.html', waitForReady: false, scroll: '#mirror' },
  { name: 'heads-128', path: `/demo/#heads?heads=16&text=${encodeURIComponent(Array.from({ length: 128 },
    (_, k) => ['ERROR', '[api]', 'timeout', 'retry=3', 'db', '5000ms', 'GET', '/v1'][k % 8]).join(' '))}`,
  scroll: '#panel-heads .hs-head-grid' },
  { name: 'train', path: '/demo/#train?steps=300', waitFor: () => document.querySelector('#panel-train .hs-train-counter')?.textContent.startsWith('step 300') },
  { name: 'train-heads', path: '/demo/#train?steps=300', scroll: '#panel-train .hs-train-grid',
    waitFor: () => document.querySelector('#panel-train .hs-train-counter')?.textContent.startsWith('step 300') },
  // The causal experiments at step 500 of the induction preset: patching, then the lens and rollout.
  { name: 'train-patching', path: '/demo/#train?steps=500', scroll: '#panel-train .hs-inside-patching',
    waitFor: () => document.querySelector('#panel-train .hs-train-counter')?.textContent.startsWith('step 500'),
    click: '#panel-train [name="inside-run"]',
    then: () => document.querySelector('#panel-train .hs-train-inside')?.dataset.ready === 'true' },
  { name: 'train-lens', path: '/demo/#train?steps=500', scroll: '#panel-train .hs-inside-lens',
    waitFor: () => document.querySelector('#panel-train .hs-train-counter')?.textContent.startsWith('step 500'),
    click: '#panel-train [name="inside-run"]',
    then: () => document.querySelector('#panel-train .hs-train-inside')?.dataset.ready === 'true' },
  // The log-line experiment, run in the page (about a minute): curves, table and verdict.
  { name: 'whatif', path: '/demo/#train', scroll: '#panel-train .hs-train-whatif',
    waitFor: () => document.querySelector('#panel-train .hs-train')?.dataset.ready === 'true',
    click: '#panel-train [data-experiment="log-line"]',
    then: () => document.querySelector('#panel-train .hs-train-whatif')?.dataset.done === 'log-line' },
  // The history at step 500, scrubbed back to the step before the first induction label.
  { name: 'train-history', path: '/demo/#train?steps=500', scroll: '#panel-train .hs-train-history',
    waitFor: () => /^Replayed to step 500/.test(document.querySelector('#panel-train .hs-train-message')?.textContent ?? ''),
    click: '#panel-train .hs-train-history-firsts li[data-detector="induction"] button[name="show-before"]',
    then: () => document.querySelector('#panel-train .hs-train')?.dataset.shown !== 'now' },
];
const only = process.argv.slice(2);
for (const name of only) if (!shots.some((s) => s.name === name)) throw new Error(`no screenshot named ${name}`);

try {
  for (const s of shots.filter((x) => only.length === 0 || only.includes(x.name))) {
    const p = await openPage(s.path, { viewport: s.viewport, colorScheme: s.colorScheme,
      waitForReady: s.waitForReady ?? true });
    try {
      if (s.waitForReady === false) {
        await p.page.waitForFunction(() => [...document.querySelectorAll('headscope-walkthrough, headscope-heads, headscope-train')]
          .every((w) => w.dataset.ready === 'true'));
      }
      if (s.waitFor) await p.page.waitForFunction(s.waitFor, null, { timeout: 120_000 });
      if (s.upload) {
        await p.page.setInputFiles('#panel-load input[type="file"]', s.upload);
        await p.page.waitForSelector('#panel-load .hs-load-summary p');
      }
      if (s.click) await p.page.click(s.click);
      if (s.then) await p.page.waitForFunction(s.then, null, { timeout: 600_000 });
      if (s.scroll) await p.page.locator(s.scroll).first().scrollIntoViewIfNeeded();
      if (s.focus) await p.page.locator(s.focus).focus();
      await p.page.screenshot({ path: out(s.name) });
      console.log(`wrote docs/screenshots/${s.name}.png`);
    } finally {
      await p.close();
    }
  }
} finally {
  await shutdown();
}
