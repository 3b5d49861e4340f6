// The Train view's layout (issue 31, item 6), measured in Chromium: the heads grid fits 1280 px
// with 4 and 8 heads a layer; at 390 px the detectors table keeps each head's name beside its
// scores, the charts' axis text is at least 11 px, every control is a target of at least 24 x 24
// px, "Inside the model" and the detector inputs fit; disabled buttons look disabled; a refused
// form value is marked on its field until corrected.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.js';

const PHONE = { width: 390, height: 844 };
const ready = (page) => page.waitForFunction(() => document.querySelector('#panel-train .hs-train')?.dataset.ready === 'true',
  null, { timeout: 120_000 });
const atStep = (page, n) => page.waitForFunction((s) => window.headscopeDemo.train.getState().steps === s &&
  document.querySelector('#panel-train .hs-train')?.dataset.ready === 'true', n, { timeout: 180_000 });
// How far the page scrolls sideways (0: not at all).
const sideways = (page) => page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);

test('1280 px: 4 and 8 heads a layer side by side, no head card clipped, no sideways scroll (and 390 px)', { timeout: 120_000 }, async () => {
  for (const [heads, viewport] of [[4, { width: 1280, height: 800 }], [8, { width: 1280, height: 800 }], [2, PHONE], [8, PHONE]]) {
    const p = await openPage(`/demo/#train?heads=${heads}&dModel=64`, { viewport });
    try {
      const { page } = p;
      await ready(page);
      const m = await page.evaluate(() => {
        const grid = document.querySelector('#panel-train .hs-train-grid');
        const box = grid.getBoundingClientRect();
        const cards = [...grid.querySelectorAll('.hs-train-head')].map((c) => {
          const r = c.getBoundingClientRect();
          const canvas = c.querySelector('canvas').getBoundingClientRect();
          return { layer: Number(c.dataset.layer), left: r.left, right: r.right, top: r.top, canvasLeft: canvas.left, canvasRight: canvas.right,
            canvasWidth: canvas.width };
        });
        return { box: { left: box.left, right: box.right }, scroll: grid.scrollWidth, client: grid.clientWidth, cards };
      });
      const where = `${heads} heads at ${viewport.width} px`;
      assert.ok(await sideways(page) <= 0, `${where}: the page scrolls sideways by ${await sideways(page)} px`);
      assert.equal(m.cards.length, 2 * heads, where);
      assert.ok(m.scroll <= m.client, `${where}: the grid's content is ${m.scroll} px in a ${m.client} px box`);
      for (const [k, c] of m.cards.entries()) {
        assert.ok(c.left >= m.box.left - 0.5 && c.right <= m.box.right + 0.5 && c.canvasLeft >= m.box.left - 0.5 &&
          c.canvasRight <= m.box.right + 0.5, `${where}: card ${k} spans ${c.left}..${c.right} (its pattern ${c.canvasLeft}..` +
          `${c.canvasRight}) in the grid's ${m.box.left}..${m.box.right}`);
        assert.ok(c.canvasWidth >= 4 * 32, `${where}: card ${k}'s pattern is ${c.canvasWidth} px wide (cells under 4 px)`);
      }
      // At 1280 px a layer's heads are one row; a row never holds two layers.
      const rows = new Map();
      for (const c of m.cards) rows.set(Math.round(c.top), [...(rows.get(Math.round(c.top)) ?? []), c.layer]);
      for (const layers of rows.values()) assert.equal(new Set(layers).size, 1, `${where}: a row holds layers ${layers}`);
      if (viewport.width === 1280) assert.equal(rows.size, 2, `${where}: ${rows.size} rows for 2 layers`);
      assert.deepEqual(p.pageErrors, []);
    } finally {
      await p.close();
    }
  }
});

test('390 px: the detectors table scrolls in its own box with each head\'s name beside its scores', { timeout: 120_000 }, async () => {
  const p = await openPage('/demo/#train', { viewport: PHONE });
  try {
    const { page } = p;
    await ready(page);
    // The box that scrolls the table sideways: the table's nearest scrollable ancestor (or itself).
    await page.evaluate(() => {
      window.detectorsScrollBox = () => {
        let box = document.querySelector('#panel-train .hs-train-detectors');
        while (box && !(box.scrollWidth > box.clientWidth && /auto|scroll/.test(getComputedStyle(box).overflowX))) box = box.parentElement;
        return box;
      };
    });
    const measure = () => page.evaluate(() => {
      const table = document.querySelector('#panel-train .hs-train-detectors');
      const box = window.detectorsScrollBox();
      if (!box) return null;
      const b = box.getBoundingClientRect();
      const inside = (r) => r.left >= b.left - 0.5 && r.right <= b.right + 0.5;
      return {
        scrollLeft: box.scrollLeft, max: box.scrollWidth - box.clientWidth, right: b.right,
        rows: [...table.querySelectorAll('tbody tr')].map((tr) => {
          const name = tr.querySelector('th').getBoundingClientRect();
          const scores = [...tr.querySelectorAll('td')].map((td) => td.getBoundingClientRect()).filter(inside);
          return { name: tr.querySelector('th').textContent, nameVisible: inside(name),
            // The name and every visible score on one row box: each overlaps the name's line.
            together: scores.length > 0 && scores.every((s) => s.top < name.bottom && s.bottom > name.top) };
        }),
      };
    });
    const scroll = async (to) => {
      await page.evaluate((x) => {
        const box = window.detectorsScrollBox();
        box.scrollLeft = x === 'end' ? box.scrollWidth : 0;
      }, to);
      await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    };
    const start = await measure();
    assert.ok(start, 'at 390 px the table is wider than its box and scrolls sideways');
    assert.ok(start.right <= PHONE.width, `the scrolling box ends at ${start.right} px`);
    assert.ok(await sideways(page) <= 0, 'the page does not scroll sideways');
    for (const to of ['end', 0]) {
      await scroll(to);
      const m = await measure();
      if (to === 'end') assert.equal(m.scrollLeft, m.max, 'scrolled to the end');
      assert.equal(m.rows.length, 4);
      for (const r of m.rows) {
        assert.ok(r.nameVisible, `scrolled to ${to}: ${r.name}'s name is outside the box`);
        assert.ok(r.together, `scrolled to ${to}: ${r.name}'s name and scores are not on one row`);
      }
    }
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('390 px: the loss curves\', the history\'s and the what-if chart\'s text is at least 11 px on the screen', { timeout: 180_000 }, async () => {
  const p = await openPage('/demo/#train?steps=50', { viewport: PHONE });
  try {
    const { page } = p;
    await atStep(page, 50);
    // A short what-if run, for its chart (the sizes, not the numbers).
    await page.evaluate(() => window.headscopeDemo.train.whatIf.run('log-line', { heads: [1, 2], seeds: [1], steps: 20, evalEvery: 10 }));
    const sizes = await page.evaluate(() => {
      const out = [];
      for (const sel of ['.hs-train-curves', '.hs-train-history', '.hs-train-whatif']) {
        const root = document.querySelector(`#panel-train ${sel}`);
        // SVG text: its font size times the SVG's scale on the screen (rotated or not).
        for (const t of root.querySelectorAll('svg text')) {
          if (!t.getClientRects().length || !t.textContent.trim()) continue;
          const { a, b } = t.getScreenCTM();
          out.push({ sel, text: t.textContent, px: parseFloat(getComputedStyle(t).fontSize) * Math.hypot(a, b), svg: true });
        }
        // HTML text (the history's axis words, the legends, the captions).
        const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
        for (let n = walker.nextNode(); n; n = walker.nextNode()) {
          const e = n.parentElement;
          if (!n.textContent.trim() || e.closest('svg') || !e.getClientRects().length) continue;
          out.push({ sel, text: n.textContent.slice(0, 30), px: parseFloat(getComputedStyle(e).fontSize), svg: false });
        }
      }
      return out;
    });
    for (const sel of ['.hs-train-curves', '.hs-train-whatif']) {
      assert.ok(sizes.some((s) => s.sel === sel && s.svg), `${sel}: axis text found`);
    }
    assert.ok(sizes.some((s) => s.sel === '.hs-train-history'), 'the history\'s text found');
    const small = sizes.filter((s) => s.px < 11);
    assert.deepEqual(small, [], `text under 11 px: ${JSON.stringify(small.slice(0, 5))}`);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('390 px: every control is a target of at least 24 x 24 px; "Inside the model" and the detector inputs fit the page', { timeout: 240_000 }, async () => {
  // Step 300 of the induction preset: the history lists first labels (with their buttons).
  const p = await openPage('/demo/#train?steps=300&keywords=a%20b', { viewport: PHONE });
  try {
    const { page } = p;
    await atStep(page, 300);
    await page.click('#panel-train [name="importance"]');
    await page.waitForSelector('#panel-train .hs-train-importance');
    await page.click('#panel-train [name="inside-run"]');
    await page.waitForFunction(() => document.querySelector('#panel-train .hs-train-inside')?.dataset.ready === 'true');
    const targets = await page.evaluate(() => {
      const out = [];
      const controls = '#panel-train :is(button, select, input, textarea, a[href], summary, [tabindex]:not([tabindex="-1"]))';
      for (const c of document.querySelectorAll(controls)) {
        if (!c.getClientRects().length) continue;   // hidden (rope's fields without rope)
        // A checkbox or radio button is clicked through its label too: the label is the target.
        const target = /^(checkbox|radio)$/.test(c.type) ? (c.closest('label') ?? c) : c;
        const r = target.getBoundingClientRect();
        out.push({ what: `${c.tagName.toLowerCase()} ${c.name || c.className || c.textContent.trim().slice(0, 20)}`, w: r.width, h: r.height });
      }
      return out;
    });
    assert.ok(targets.length >= 40, `${targets.length} controls`);
    assert.ok(targets.some((t) => /show-before|show-at/.test(t.what)), 'the history\'s first-label buttons are there');
    const small = targets.filter((t) => t.w < 24 || t.h < 24);
    assert.deepEqual(small, [], `targets under 24 x 24 px: ${JSON.stringify(small)}`);
    // The causal experiments and the reader's detectors: nothing past the page's edge; their
    // wide tables scroll inside their own boxes.
    assert.ok(await sideways(page) <= 0, `the page scrolls sideways by ${await sideways(page)} px`);
    const boxes = await page.evaluate(() => [...document.querySelectorAll('#panel-train :is(.hs-train-inside-box, .hs-train-detector-inputs, ' +
      '.hs-train-detector-input, .hs-inside-scroll, .hs-inside-rollout .hs-heatmap-box)')].map((e) => ({
      what: e.className, right: e.getBoundingClientRect().right })));
    assert.ok(boxes.length > 5);
    for (const b of boxes) assert.ok(b.right <= PHONE.width, `${b.what} ends at ${b.right} px`);
    const tables = await page.evaluate(() => [...document.querySelectorAll('#panel-train .hs-inside-scroll')].map((s) => ({
      scrolls: s.scrollWidth > s.clientWidth, overflow: getComputedStyle(s).overflowX })));
    assert.ok(tables.some((t) => t.scrolls), 'a wide experiment table scrolls in its box');
    for (const t of tables) assert.match(t.overflow, /auto|scroll/);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('disabled buttons look disabled (faded, not-allowed cursor); enabled ones do not', async () => {
  const p = await openPage('/demo/#train');
  try {
    const { page } = p;
    await ready(page);
    const looks = await page.$$eval('#panel-train button', (buttons) => buttons.filter((b) => b.getClientRects().length).map((b) => {
      const s = getComputedStyle(b);
      return { text: b.textContent.trim(), disabled: b.disabled, opacity: Number(s.opacity), cursor: s.cursor };
    }));
    const disabled = looks.filter((b) => b.disabled);
    // At step 0: "Back to now" (the grid shows now) and the what-if's Cancel (nothing runs).
    assert.ok(disabled.length >= 2, `disabled buttons: ${JSON.stringify(disabled)}`);
    for (const b of disabled) {
      assert.ok(b.opacity <= 0.6, `disabled "${b.text}" at opacity ${b.opacity}`);
      assert.equal(b.cursor, 'not-allowed', `disabled "${b.text}"`);
    }
    for (const b of looks.filter((x) => !x.disabled)) {
      assert.equal(b.opacity, 1, `enabled "${b.text}"`);
      assert.equal(b.cursor, 'pointer', `enabled "${b.text}"`);
    }
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('a refused value is marked on its field (aria-invalid, a red ring) and kept until corrected', { timeout: 120_000 }, async () => {
  const p = await openPage('/demo/#train');
  try {
    const { page } = p;
    await ready(page);
    const field = (name) => page.$eval(`#panel-train [name="${name}"]`, (e) => ({ value: e.value, invalid: e.getAttribute('aria-invalid'),
      describedBy: e.getAttribute('aria-describedby'), ring: getComputedStyle(e).boxShadow,
      message: document.querySelector('#panel-train .hs-train-message').id }));
    const message = () => page.textContent('#panel-train .hs-train-message');
    const clean = (await field('weightDecay')).ring;
    // lr 5: refused by name; the field keeps 5, marked, described by the message; the model keeps 0.003.
    await page.fill('#panel-train [name="lr"]', '5');
    await page.press('#panel-train [name="lr"]', 'Tab');
    await page.waitForFunction(() => /Train\.lr: expected a number in \(0, 1\], got 5/.test(document.querySelector('#panel-train .hs-train-message').textContent));
    let lr = await field('lr');
    assert.equal(lr.value, '5');
    assert.equal(lr.invalid, 'true');
    assert.equal(lr.describedBy, lr.message);
    assert.notEqual(lr.ring, clean, 'the refused field looks different');
    assert.match(await message(), /The model goes on with lr 0\.003/);
    assert.ok(await page.$eval('#panel-train .hs-train-message', (e) => e.classList.contains('hs-error')));
    assert.equal(await page.evaluate(() => window.headscopeDemo.train.getState().lr), 0.003);
    // A step (an evaluation redraws the controls) leaves it as typed and marked.
    await page.click('#panel-train [name="step"]');
    await atStep(page, 1);
    lr = await field('lr');
    assert.deepEqual([lr.value, lr.invalid], ['5', 'true']);
    // Corrected: accepted, unmarked.
    await page.fill('#panel-train [name="lr"]', '0.01');
    await page.press('#panel-train [name="lr"]', 'Tab');
    await page.waitForFunction(() => window.headscopeDemo.train.getState().lr === 0.01);
    lr = await field('lr');
    assert.deepEqual([lr.value, lr.invalid, lr.describedBy, lr.ring], ['0.01', null, null, clean]);
    // "Train to step" and the pattern detector: the same.
    await page.fill('#panel-train [name="trainTo"]', 'abc');
    await page.click('#panel-train [name="train-to"]');
    await page.waitForFunction(() => document.querySelector('#panel-train [name="trainTo"]').getAttribute('aria-invalid') === 'true');
    await page.fill('#panel-train [name="trainTo"]', '3');
    await page.click('#panel-train [name="train-to"]');
    await atStep(page, 3);
    await page.waitForFunction(() => !document.querySelector('#panel-train [name="trainTo"]').hasAttribute('aria-invalid'));
    await page.fill('#panel-train [name="pattern"]', 'j = i');
    await page.press('#panel-train [name="pattern"]', 'Enter');
    await page.waitForFunction(() => /Train\.pattern: at character 3/.test(document.querySelector('#panel-train .hs-train-message').textContent));
    const pattern = await field('pattern');
    assert.deepEqual([pattern.value, pattern.invalid], ['j = i', 'true']);
    await page.fill('#panel-train [name="pattern"]', 'j == i - 1');
    await page.press('#panel-train [name="pattern"]', 'Enter');
    await page.waitForFunction(() => window.headscopeDemo.train.getState().pattern === 'j == i - 1');
    assert.equal((await field('pattern')).invalid, null);
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});
