// The Train view's RoPE base and fraction in the form, in Chromium: shown only with positions
// rope, set as a reader types them, they reach the model (the exported model's config, and the
// layer case's rope_dims and rope_base that the Heads view opens), the URL holds them and a link
// opens them; a bad value is refused with a message naming the field and nothing changes;
// another positions hides them and puts them back to their defaults.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.js';
import { axe } from './axe.js';

const TRAIN = '#panel-train';

async function settle(page, want) {
  await page.waitForFunction((w) => {
    const s = window.headscopeDemo.train.getState();
    return Object.entries(w).every(([k, v]) => s[k] === v) &&
      document.querySelector('#panel-train .hs-train')?.dataset.ready === 'true' &&
      /^step \d+/.test(document.querySelector('#panel-train .hs-train-counter')?.textContent ?? '');
  }, want, { timeout: 60_000 });
}

// Types `value` into a number field and commits it (the form reads its setup on change).
async function type(page, name, value) {
  await page.fill(`${TRAIN} input[name="${name}"]`, value);
  await page.dispatchEvent(`${TRAIN} input[name="${name}"]`, 'change');
}

test('RoPE base and fraction: the form sets them, the model has them, the URL round-trips them, a bad one is named', { timeout: 180_000 }, async () => {
  const p = await openPage('/demo/#train?steps=0');
  try {
    const { page } = p;
    await settle(page, { positions: 'learned' });
    const base = page.locator(`${TRAIN} input[name="ropeBase"]`);
    const fraction = page.locator(`${TRAIN} input[name="ropeFraction"]`);
    assert.equal(await base.isVisible(), false, 'no base without rope');
    assert.equal(await fraction.isVisible(), false, 'no fraction without rope');
    await page.selectOption(`${TRAIN} select[name="positions"]`, 'rope');
    await settle(page, { positions: 'rope' });
    await base.waitFor({ state: 'visible' });
    await fraction.waitFor({ state: 'visible' });
    assert.equal(await base.inputValue(), '10000');
    assert.equal(await fraction.inputValue(), '1');
    await type(page, 'ropeBase', '500');
    await settle(page, { ropeBase: 500 });
    await type(page, 'ropeFraction', '0.5');
    await settle(page, { ropeBase: 500, ropeFraction: 0.5 });
    await page.waitForFunction(() => /ropeFraction=/.test(location.hash));
    const hash = await page.evaluate(() => location.hash);
    assert.match(hash, /&positions=rope&ropeBase=500&ropeFraction=0\.5&/);

    // The model: the exported config, and the layer case (16 dims a head, half of them turned).
    const [config, layer] = await page.evaluate(async () => {
      const view = window.headscopeDemo.train;
      return [(await view.exportModel()).config, (await view.layerCase(1)).config];
    });
    assert.deepEqual([config.positions, config.rope_layout, config.rope_base, config.rope_fraction], ['rope', 'half', 500, 0.5]);
    assert.deepEqual([layer.rope_dims, layer.rope_base], [8, 500]);
    const violations = await axe(page, `${TRAIN} .hs-train-controls`);
    assert.deepEqual(violations, [], JSON.stringify(violations, null, 2));

    // A bad value: refused, named, nothing changed.
    await type(page, 'ropeFraction', '1.5');
    await page.waitForFunction(() => /ropeFraction: expected a number in \(0, 1\], got 1\.5/.test(
      document.querySelector('#panel-train .hs-train-message').textContent));
    await type(page, 'ropeBase', '-1');
    await page.waitForFunction(() => /ropeBase: expected a finite number > 0, got -1/.test(
      document.querySelector('#panel-train .hs-train-message').textContent));
    const kept = await page.evaluate(() => window.headscopeDemo.train.getState());
    assert.deepEqual([kept.ropeBase, kept.ropeFraction], [500, 0.5], 'nothing applied');

    // The link opens the same setting, shown in the form.
    const q = await openPage(`/demo/${hash}`);
    try {
      await settle(q.page, { positions: 'rope', ropeBase: 500, ropeFraction: 0.5 });
      assert.equal(await q.page.inputValue(`${TRAIN} input[name="ropeBase"]`), '500');
      assert.equal(await q.page.inputValue(`${TRAIN} input[name="ropeFraction"]`), '0.5');
      assert.equal((await q.page.evaluate(() => window.headscopeDemo.train.exportModel())).config.rope_fraction, 0.5);
      assert.deepEqual(q.pageErrors, []);
    } finally {
      await q.close();
    }

    // Another positions: the fields go back to their defaults and out of the link.
    await page.fill(`${TRAIN} input[name="ropeBase"]`, '500');
    await page.fill(`${TRAIN} input[name="ropeFraction"]`, '0.5');
    await page.selectOption(`${TRAIN} select[name="positions"]`, 'learned');
    await settle(page, { positions: 'learned', ropeBase: 10000, ropeFraction: 1 });
    await base.waitFor({ state: 'hidden' });
    assert.doesNotMatch(await page.evaluate(() => location.hash), /rope/);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});
