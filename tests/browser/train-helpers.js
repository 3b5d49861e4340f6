// What the Train view's browser tests share (variants.test.js, rope-train.test.js,
// sinks-train.test.js): waiting until a state is trained and drawn, the same run opened from its
// link, and a trained head opened in the Heads view.
import { openPage } from './harness.js';

/**
 * Waits until the demo's Train view has the state fields `want`, its model is ready and its
 * variants panel is drawn for that state (the panel's engine numbers fetched).
 */
export async function settleTrain(page, want) {
  await page.waitForFunction((w) => {
    const s = window.headscopeDemo.train.getState();
    return Object.entries(w).every(([k, v]) => s[k] === v) &&
      document.querySelector('#panel-train .hs-train')?.dataset.ready === 'true' &&
      document.querySelector('#panel-train .hs-train-variants')?.dataset.ready === 'true' &&
      document.querySelector('#panel-train .hs-train-variants').dataset.drawn === JSON.stringify(s) &&
      /^step \d+/.test(document.querySelector('#panel-train .hs-train-counter')?.textContent ?? '');
  }, want, { timeout: 60_000 });
}

/**
 * The demo opened at `hash` in a new page, trained to `steps`: its Train state, read() evaluated
 * in it (a function of the page: the panel's numbers) and its page errors.
 */
export async function fromLink(hash, { steps, read, settle = settleTrain }) {
  const q = await openPage(`/demo/${hash}`);
  try {
    await settle(q.page, { steps });
    return { state: await q.page.evaluate(() => window.headscopeDemo.train.getState()), panel: await q.page.evaluate(read),
      pageErrors: [...q.pageErrors] };
  } finally {
    await q.close();
  }
}

/**
 * Clicks "Open in the Heads view" of layer `layer`, head `head` (1-based) in the demo's Train view
 * trained to `step`, and waits for the Heads view to show it: the Heads view's weights (its JSON
 * export), the trained head's pattern on the probe row (patternOf) and the largest difference.
 */
export async function openTrainedHead(page, { layer, head, step }) {
  await page.click(`#panel-train .hs-train-head[data-layer="${layer}"][data-head="${head}"] .hs-train-open`);
  await page.waitForFunction((w) => new RegExp(`layer ${w.layer} at step ${w.step}\\b`).test(
    document.querySelector('#panel-heads .hs-heads-case-note')?.textContent ?? ''), { layer, step });
  const [shown, pattern] = await page.evaluate(async ([l, h]) => {
    const blob = await window.headscopeDemo.heads.exportAs('json');
    return [JSON.parse(await blob.text()).heads[0].weights, await window.headscopeDemo.train.patternOf(l, h)];
  }, [layer, head]);
  let worst = 0;
  shown.forEach((row, i) => row.forEach((v, j) => { worst = Math.max(worst, Math.abs(v - pattern[i][j])); }));
  return { shown, pattern, worst };
}
