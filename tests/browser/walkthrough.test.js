// The Walkthrough view in Debian's Chromium, for what a first-time user trips over (issue 13):
// the explanation next to its cell, cell input, the keyboard, colour contrast, narrow screens,
// hand-checkable explanations and axe-core's accessibility rules.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { openPage, screenshot } from './harness.js';
import { axe } from './axe.js';
import { init } from '../../web/lib/index.js';
import { seedWorkedExample } from '../../web/lib/examples.js';
import { handCheck } from '../js/hand-check.js';
import { seedState, resizeState, withCell, moduleConfig, toStateDict, traceOptions } from '../../web/views/walkthrough/model.js';

const ROOT = '#panel-walkthrough';
const golden = (name) => fileURLToPath(new URL(`../golden/${name}`, import.meta.url));

function assertClean(p) {
  assert.deepEqual(p.pageErrors, [], 'page errors');
  assert.deepEqual(p.consoleErrors, [], 'console errors');
  assert.deepEqual(p.foreignRequests, [], 'requests to other origins');
}

/** Until the view has written every matrix (off-screen ones get their numbers after the frame). */
const settled = (page) => page.waitForFunction((root) => !document.querySelector(`${root} .hs-walkthrough`)
  .hasAttribute('data-pending'), ROOT);

/** Sets tokens, embedding size and heads through the view's own controls. */
async function setSizes(page, L, E, H) {
  const select = (label, v) => page.locator(`${ROOT} label`, { hasText: label }).locator('select').selectOption(String(v));
  await select('Tokens L', L);
  await select('Embedding size E', E);
  await select('Heads H', H);
  await settled(page);
}

async function preset(page, name) {
  await page.click(`${ROOT} button:has-text("${name}")`);
  await settled(page);
}

const cellSel = (matrix, i, j) => `${ROOT} table[data-matrix="${matrix}"] td[data-row="${i}"][data-col="${j}"]`;

async function cellTexts(page, matrix) {
  return page.$$eval(`${ROOT} table[data-matrix="${matrix}"] tbody td`, (tds) =>
    tds.map((td) => (td.querySelector('input')?.value ?? td.textContent).trim()));
}

/** Y of the seed example with X[i][j] = v, from the library in Node. */
async function seedOutputWith(edits) {
  const hs = await init();
  const doc = structuredClone(seedWorkedExample);
  for (const [i, j, v] of edits) doc.inputs.query[i][j] = v;
  doc.inputs.key = doc.inputs.value = doc.inputs.query;
  return Array.from(hs.runCase(doc).output.data);
}

// Shown to 3 decimals (half a unit: 5e-4), computed by the page's build (relaxed SIMD in
// Chromium, FMA) against Node's SIMD128: the two builds differ by ~1e-7, which can tip a rounding.
function assertNear(shown, want, what) {
  assert.equal(shown.length, want.length, `${what}: size`);
  shown.forEach((v, k) => assert.ok(Math.abs(Number(v) - want[k]) <= 5e-4 + 1e-6, `${what}[${k}]: ${v} vs ${want[k]}`));
}

const intersects = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;

// ---- 1. The explanation never covers its cell ---------------------------------------------------

test('the explanation opens beside the explained cell, never over it (1280x800 and a 390x844 phone)', async () => {
  for (const viewport of [{ width: 1280, height: 800 }, { width: 390, height: 844 }]) {
    const p = await openPage('/demo/', { viewport });
    try {
      const { page } = p;
      await setSizes(page, 8, 8, 2);
      await preset(page, 'Seeded random');
      const cells = [];
      for (const m of ['Q1', 'S1', 'A1', 'H1', 'A2', 'CONCAT', 'Y']) {
        const cols = m.startsWith('Q') || m.startsWith('H') ? 4 : 8;
        cells.push([m, 0, 0], [m, 7, cols - 1], [m, 3, Math.floor(cols / 2)]);
      }
      let checked = 0;
      for (const [m, i, j] of cells) {
        for (const block of ['end', 'start', 'center']) {
          // The pointer on the cell, with the cell at the bottom, top or middle of the screen.
          const center = await page.$eval(cellSel(m, i, j), (td, b) => {
            td.scrollIntoView({ block: b, inline: 'nearest' });
            const r = td.getBoundingClientRect();
            return { x: r.left + r.width / 2, y: r.top + r.height / 2 };
          }, block);
          await page.mouse.move(center.x, center.y);
          await page.waitForFunction((sel) => !document.querySelector(sel).hidden, `${ROOT} .hs-explain`);
          await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
          const { cell, box, text, vw, vh } = await page.evaluate(({ sel, root }) => {
            const rect = (e) => { const r = e.getBoundingClientRect(); return { left: r.left, right: r.right, top: r.top, bottom: r.bottom }; };
            const explain = document.querySelector(`${root} .hs-explain`);
            return { cell: rect(document.querySelector(sel)), box: rect(explain), text: explain.textContent,
              vw: document.documentElement.clientWidth, vh: innerHeight };
          }, { sel: cellSel(m, i, j), root: ROOT });
          const what = `${viewport.width}px, ${m}[${i}][${j}] at the ${block}`;
          assert.match(text, new RegExp(`\\[${i}\\]\\[${j}\\]`), `${what}: explains this cell`);
          assert.ok(!intersects(cell, box), `${what}: the box ${JSON.stringify(box)} covers the cell ${JSON.stringify(cell)}`);
          assert.ok(box.left >= -0.5 && box.right <= vw + 0.5, `${what}: the box is inside the screen's width`);
          assert.ok(box.top >= -0.5 && box.bottom <= vh + 0.5, `${what}: the box is on screen ${JSON.stringify(box)}`);
          checked++;
        }
        // The keyboard: focusing the cell explains it, beside it.
        await page.mouse.move(0, 0);
        await page.focus(`${cellSel(m, i, j)} span`);
        const { cell, box } = await page.evaluate(({ sel, root }) => ({
          cell: document.querySelector(sel).getBoundingClientRect().toJSON(),
          box: document.querySelector(`${root} .hs-explain`).getBoundingClientRect().toJSON(),
        }), { sel: cellSel(m, i, j), root: ROOT });
        assert.ok(!intersects(cell, box), `${viewport.width}px, focused ${m}[${i}][${j}]: covered`);
      }
      assert.equal(checked, 63);
      await screenshot(page, `walkthrough-explain-${viewport.width}`, { fullPage: false });
      assertClean(p);
    } finally {
      await p.close();
    }
  }
});

test('the Heads view\'s explanation opens beside the hovered heatmap cell, never over it', async () => {
  for (const viewport of [{ width: 1280, height: 800 }, { width: 390, height: 844 }]) {
    const p = await openPage('/demo/#heads', { viewport });
    try {
      const { page } = p;
      const canvas = page.locator('#panel-heads .hs-heatmap-canvas').first();
      await canvas.waitFor();
      await canvas.scrollIntoViewIfNeeded();
      const box = await canvas.boundingBox();
      for (const [fi, fj] of [[0, 0], [0.5, 0.5], [0.95, 0.95], [0.95, 0.1]]) {
        const x = box.x + 3 + fj * (box.width - 6);
        const y = box.y + 3 + fi * (box.height - 6);
        await page.mouse.move(x, y);
        await page.waitForFunction(() => !document.querySelector('#panel-heads .hs-explain').hidden);
        const shown = await page.$eval('#panel-heads .hs-explain', (e) => {
          const r = e.getBoundingClientRect();
          return { text: e.textContent, top: r.top, bottom: r.bottom, left: r.left, right: r.right };
        });
        assert.match(shown.text, /Head 1, query \d+ .*key \d+/);
        // The hovered cell (the pointer's position) is not under the box.
        const covers = x >= shown.left && x <= shown.right && y >= shown.top && y <= shown.bottom;
        assert.equal(covers, false, `${viewport.width}px: the box ${JSON.stringify(shown)} covers the cell at ${x},${y}`);
      }
      // Leaving the heatmap closes it.
      await page.mouse.move(2, 2);
      await page.waitForFunction(() => document.querySelector('#panel-heads .hs-explain').hidden);
      assertClean(p);
    } finally {
      await p.close();
    }
  }
});

test('matrices far off screen get their numbers right after the frame, the library\'s numbers', async () => {
  const p = await openPage('/demo/');
  try {
    const { page } = p;
    await setSizes(page, 16, 16, 16);
    await page.fill(`${cellSel('X', 0, 0)} input`, '3');
    await settled(page);
    // The same state in Node: the view's resizing (seed 1 fills new cells), then the edit.
    let state = seedState();
    state = resizeState(state, { L: 16 }).state;
    state = resizeState(state, { E: 16, H: 2 }).state;
    state = resizeState(state, { H: 16 }).state;
    state = withCell(state, 'X', 0, 0, 3);
    const hs = await init();
    const mha = hs.createMultiheadAttention(moduleConfig(state));
    mha.loadStateDict(toStateDict(state));
    const t = mha.trace(state.x, state.x, state.x, traceOptions(state));
    mha.dispose();
    // A16 and Y are far below the viewport: written all the same.
    assertNear(await cellTexts(page, 'A16'), Array.from(t.weights.data.subarray(15 * 256, 16 * 256)), 'A16');
    assertNear(await cellTexts(page, 'Y'), Array.from(t.output.data), 'Y');
    await page.locator(`${ROOT} table[data-matrix="Y"]`).scrollIntoViewIfNeeded();
    assertNear(await cellTexts(page, 'Y'), Array.from(t.output.data), 'Y on screen');
    assertClean(p);
  } finally {
    await p.close();
  }
});

// ---- 3. Cell input -----------------------------------------------------------------------------

test('cell input: out-of-range and non-numbers are refused with a visible reason, commas accepted, widths fixed', async () => {
  const p = await openPage('/demo/');
  try {
    const { page } = p;
    const input = page.locator(`${cellSel('X', 0, 0)} input`);
    const seedY = await cellTexts(page, 'Y');
    const state = () => page.evaluate((sel) => {
      const el = document.querySelector(sel);
      const described = el.getAttribute('aria-describedby');
      const message = described ? el.getRootNode().getElementById(described) : null;
      const cs = getComputedStyle(el);
      return {
        value: el.value, invalid: el.getAttribute('aria-invalid'), focused: document.activeElement === el,
        message: message && !message.hidden ? message.textContent : null,
        outline: `${cs.outlineStyle} ${cs.outlineWidth} ${cs.outlineColor}`,
        error: getComputedStyle(document.body).getPropertyValue('--hs-error').trim(),
      };
    }, `${cellSel('X', 0, 0)} input`);
    const panelText = () => page.textContent(ROOT);

    // 1e40 is beyond float32: refused, marked, explained; nothing turns into NaN.
    for (const [typed, reason] of [['1e40', /float32's range/], ['1e20', /overflow float32/], ['abc', /not a number/],
      ['-', /not a number/], ['', /empty/]]) {
      await input.fill(typed);
      const s = await state();
      assert.equal(s.invalid, 'true', `${typed}: aria-invalid`);
      assert.match(s.message ?? '', reason, `${typed}: the message says why`);
      assert.match(s.message, /keeps 1/, `${typed}: and what the cell still uses`);
      assert.equal(s.value, typed, `${typed}: the typed text stays while focused`);
      assert.equal(s.focused, true);
      // The red outline shows while the cell has the focus.
      const red = await page.evaluate((c) => { const d = document.createElement('div'); d.style.color = c; document.body.append(d);
        const v = getComputedStyle(d).color; d.remove(); return v; }, s.error);
      assert.equal(s.outline, `solid 2px ${red}`, `${typed}: the error outline is visible while focused`);
      assert.deepEqual(await cellTexts(page, 'Y'), seedY, `${typed}: Y still uses the old value`);
      assert.doesNotMatch(await panelText(), /NaN|∞/, `${typed}: no NaN or ∞ on the page`);
    }
    await screenshot(page, 'walkthrough-invalid-cell', { fullPage: false });
    // Escape restores the number; so does leaving the cell.
    await input.press('Escape');
    let s = await state();
    assert.equal(s.invalid, null);
    assert.equal(s.value, '1');
    await input.fill('abc');
    await input.press('Tab');
    s = await state();
    assert.equal(s.invalid, null, 'blur clears the mark');
    assert.equal(s.value, '1.000', 'blur restores the number');

    // A decimal comma is a decimal point.
    await input.fill('1,5');
    s = await state();
    assert.equal(s.invalid, null, '1,5 is accepted');
    assertNear(await cellTexts(page, 'Y'), await seedOutputWith([[0, 0, 1.5]]), 'Y with X[0][0] = 1,5');
    await input.press('Tab');
    assert.equal(await input.inputValue(), '1.500');

    // Fixed column widths: typing never moves a cell of any matrix.
    const rects = () => page.$$eval(`${ROOT} td.hs-cell`, (tds) => tds.map((td) => {
      const r = td.getBoundingClientRect();
      return [Math.round(r.left * 2) / 2, Math.round(r.width * 2) / 2];
    }));
    const before = await rects();
    await input.focus();
    for (const typed of ['-12.345', '100', '-', '0.5', '123456.789', '-0,25', '1']) {
      await input.fill(typed);
      assert.deepEqual(await rects(), before, `typing ${typed} moved columns`);
    }
    // A long number is shown whole while edited, and shortened to fit when not.
    await input.fill('0.123456789');
    const fits = () => page.$eval(`${cellSel('X', 0, 0)} input`, (e) => ({ scroll: e.scrollWidth, client: e.clientWidth, value: e.value }));
    let f = await fits();
    assert.ok(f.scroll <= f.client + 1, `while edited, 0.123456789 is not clipped (${f.scroll} > ${f.client})`);
    assert.deepEqual(await rects(), before, 'a long number does not widen its column');
    await input.press('Tab');
    f = await fits();
    assert.equal(f.value, '0.123');
    await input.focus();
    assert.equal(await input.inputValue(), '0.123456789', 'focused, the cell shows the number it holds');
    await input.fill('123456.789');
    await input.press('Tab');
    f = await fits();
    assert.equal(f.value, '123457');
    assert.ok(f.scroll <= f.client + 1, 'a large number fits its cell');
    assert.deepEqual(await rects(), before);
    assertClean(p);
  } finally {
    await p.close();
  }
});

// ---- 4. Keyboard ---------------------------------------------------------------------------------

test('keyboard: one Tab stop per matrix (16 x 16 x 16), arrow keys inside, Enter/F2/typing edit, Escape cancels', async () => {
  const p = await openPage('/demo/');
  try {
    const { page } = p;
    // The seed example: arrows, typing, Enter, F2, Escape.
    const seedY = await cellTexts(page, 'Y');
    await page.focus(`${cellSel('X', 0, 0)} input`);
    const active = () => page.evaluate(() => {
      const e = document.activeElement;
      const td = e.closest('td');
      return { matrix: e.closest('table')?.dataset.matrix, i: Number(td?.dataset.row), j: Number(td?.dataset.col),
        value: e.value, tabbable: [...e.closest('table').querySelectorAll('[tabindex="0"]')].length };
    });
    await page.keyboard.press('ArrowRight');
    await page.keyboard.press('ArrowDown');
    let a = await active();
    assert.deepEqual([a.matrix, a.i, a.j, a.value, a.tabbable], ['X', 1, 1, '2', 1]);
    await page.keyboard.press('5');  // typing replaces the number
    a = await active();
    assert.equal(a.value, '5');
    assertNear(await cellTexts(page, 'Y'), await seedOutputWith([[1, 1, 5]]), 'Y with X[1][1] = 5');
    await page.keyboard.press('Escape');
    a = await active();
    assert.equal(a.value, '2', 'Escape restores the number');
    assert.deepEqual(await cellTexts(page, 'Y'), seedY, 'and the results');
    await page.keyboard.press('Enter');  // edit in place: the caret after the number
    await page.keyboard.type('5');
    a = await active();
    assert.equal(a.value, '25');
    await page.keyboard.press('Enter');
    await page.keyboard.press('ArrowLeft');  // out of editing, arrows move again
    a = await active();
    assert.deepEqual([a.i, a.j], [1, 0]);
    await page.keyboard.press('F2');
    await page.keyboard.press('Backspace');
    await page.keyboard.type('3');
    await page.keyboard.press('Escape');
    a = await active();
    assert.equal(a.value, '0', 'F2, then Escape, keeps the number');
    assertNear(await cellTexts(page, 'Y'), await seedOutputWith([[1, 1, 25]]), 'Y with X[1][1] = 25');

    // Computed matrices: the arrows move the explained cell.
    await page.focus(`${cellSel('A1', 0, 0)} span`);
    await page.keyboard.press('ArrowDown');
    await page.keyboard.press('ArrowRight');
    assert.match(await page.textContent(`${ROOT} .hs-explain`), /A\[1\]\[1\]/);
    await page.keyboard.press('End');
    assert.match(await page.textContent(`${ROOT} .hs-explain`), /A\[1\]\[2\]/);
    await page.keyboard.press('Escape');  // closes the explanation
    assert.equal(await page.$eval(`${ROOT} .hs-explain`, (e) => e.hidden), true);
    await page.keyboard.press('ArrowLeft');  // and moving on opens it again
    assert.match(await page.textContent(`${ROOT} .hs-explain`), /A\[1\]\[1\]/);
    assert.equal(await page.$eval(`${ROOT} .hs-explain`, (e) => e.hidden), false);

    // 16 x 16 x 16: every Tab stop from the first control to the end of the view.
    await setSizes(page, 16, 16, 16);
    await page.focus(`${ROOT} button`);
    const stops = [];
    for (let k = 0; k < 400; k++) {
      const where = await page.evaluate((root) => {
        const e = document.activeElement;
        if (!e.closest(root)) return null;
        return e.closest('table')?.dataset.matrix ?? e.tagName;
      }, ROOT);
      if (where === null) break;
      stops.push(where);
      await page.keyboard.press('Tab');
    }
    const matrices = await page.$$eval(`${ROOT} table[data-matrix]`, (ts) => ts.map((t) => t.dataset.matrix));
    assert.equal(matrices.length, 1 + 16 * 9 + 3);
    const inMatrices = stops.filter((s) => matrices.includes(s));
    assert.deepEqual(inMatrices, matrices, 'each matrix is one Tab stop, in page order');
    assert.ok(stops.length < 170, `${stops.length} Tab stops in the view`);
    assert.ok(stops.indexOf('Y') < 170, `Y is reached in ${stops.indexOf('Y')} presses`);
    assertClean(p);
  } finally {
    await p.close();
  }
});

// ---- 4b. Pointer editing and the URL (issue 31) --------------------------------------------------

test('a click selects a cell and typing replaces its number; a double-click, F2 or Enter edits in place', async () => {
  const p = await openPage('/demo/');
  try {
    const { page } = p;
    const input = (i, j) => page.locator(`${cellSel('X', i, j)} input`);
    const focused = () => page.evaluate(() => {
      const e = document.activeElement;
      return { value: e.value, selected: e.value.slice(e.selectionStart, e.selectionEnd), editing: e.classList.contains('hs-editing') };
    });
    // A click on X[0][0] (1) selects its whole number, like a spreadsheet's cell: typing replaces it.
    // The click lands on the left of the text, where a text field would put the caret before the 1.
    await input(0, 0).click({ position: { x: 3, y: 8 } });
    assert.deepEqual(await focused(), { value: '1', selected: '1', editing: false });
    await page.keyboard.type('3');
    assert.equal(await input(0, 0).inputValue(), '3', 'a click then "3" gives 3 (not 31)');
    assertNear(await cellTexts(page, 'Y'), await seedOutputWith([[0, 0, 3]]), 'Y with X[0][0] = 3');
    // From one cell to another by a click, on the right of the text this time: typing replaces it too.
    const right = await page.$eval(`${cellSel('X', 0, 2)} input`, (e) => e.getBoundingClientRect().width - 3);
    await input(0, 2).click({ position: { x: right, y: 8 } });
    await page.keyboard.type('-2');
    assert.equal(await input(0, 2).inputValue(), '-2', 'X[0][2] (1) replaced by -2');
    // A double-click edits the number in place: the caret after it, as F2 puts it.
    await input(1, 1).dblclick();
    assert.deepEqual(await focused(), { value: '2', selected: '', editing: true });
    await page.keyboard.type('5');
    assert.equal(await input(1, 1).inputValue(), '25');
    // In place, a click moves the caret inside the number (a text field's click) and keeps editing.
    await input(1, 1).click({ position: { x: 3, y: 8 } });
    await page.keyboard.type('1');
    assert.equal(await input(1, 1).inputValue(), '125', 'the click put the caret before 25');
    await page.keyboard.press('Enter');  // commits; the number is selected again
    assert.deepEqual(await focused(), { value: '125', selected: '125', editing: false });
    await page.keyboard.type('4');
    assert.equal(await input(1, 1).inputValue(), '4', 'selected again, typing replaces');
    assertNear(await cellTexts(page, 'Y'), await seedOutputWith([[0, 0, 3], [0, 2, -2], [1, 1, 4]]), 'Y after the three edits');
    // A second click on a selected cell is a deliberate edit too: the caret where it clicked.
    await page.keyboard.press('Tab');
    await input(2, 0).click();
    await input(2, 0).click({ position: { x: 3, y: 8 } });
    assert.equal((await focused()).editing, true, 'a click on the selected cell edits it in place');
    await page.keyboard.type('9');
    assert.equal(await input(2, 0).inputValue(), '91');
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('a cell edit reaches the URL, and the link brings the edited numbers back', async () => {
  const p = await openPage('/demo/');
  try {
    const { page } = p;
    await page.click(`${cellSel('X', 0, 1)} input`);
    await page.keyboard.type('2.5');
    await page.click(`${cellSel('WQ1', 1, 0)} input`);
    await page.keyboard.type('-0,75');
    await page.keyboard.press('Tab');
    // The hash follows once typing pauses: X and W_Q hold the typed numbers (the seed's W_Q has
    // head 1's block in its first two columns: row 1, column 0 of WQ1 is wq[1][0]).
    await page.waitForFunction(() => {
      const q = new URLSearchParams(location.hash.split('?')[1] ?? '');
      return q.get('x')?.split(',')[1] === '2.5' && q.get('wq')?.split(',')[4] === '-0.75';
    });
    const state = await page.evaluate(() => window.headscopeDemo.walkthrough.getState());
    assert.equal(state.x[0][1], 2.5);
    assert.equal(state.wq[1][0], -0.75);
    const y = await cellTexts(page, 'Y');
    // Escape after an edit undoes it, and the hash follows the undo too.
    await page.click(`${cellSel('X', 2, 3)} input`);
    await page.keyboard.type('8');
    await page.waitForFunction(() => new URLSearchParams(location.hash.split('?')[1]).get('x').split(',')[11] === '8');
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => new URLSearchParams(location.hash.split('?')[1]).get('x').split(',')[11] === '1');
    // The link, opened afresh, shows the edited numbers and the same results.
    const link = await page.evaluate(() => location.hash);
    const q = await openPage(`/demo/${link}`);
    try {
      await settled(q.page);
      // (Every number and size; `source` says in words where they came from: the link, now.)
      const { source, ...numbers } = state;
      const { source: linkSource, ...linkNumbers } = await q.page.evaluate(() => window.headscopeDemo.walkthrough.getState());
      assert.deepEqual(linkNumbers, numbers);
      assert.equal(await q.page.inputValue(`${cellSel('X', 0, 1)} input`), '2.500');
      assert.equal(await q.page.inputValue(`${cellSel('WQ1', 1, 0)} input`), '-0.750');
      assert.deepEqual(await cellTexts(q.page, 'Y'), y);
      assertClean(q);
    } finally {
      await q.close();
    }
    assertClean(p);
  } finally {
    await p.close();
  }
});

// ---- 5. Contrast -----------------------------------------------------------------------------------

// A case whose attention weights include exactly 1, 0 and 0.25: zero tokens score 0 against every
// key; query 0 may only see key 0 (a boolean attn_mask), query 1 sees all four keys equally.
const WEIGHTS_CASE = {
  name: 'weights 1, 0, 0.25',
  config: { embed_dim: 2, num_heads: 1, bias: false },
  state_dict: { in_proj_weight: [[1, 0], [0, 1], [1, 0], [0, 1], [1, 0], [0, 1]], 'out_proj.weight': [[1, 0], [0, 1]] },
  inputs: {
    query: [[0, 0], [0, 0], [0, 0], [0, 0]],
    attn_mask: [[false, true, true, true], [false, false, false, false], [false, false, true, true], [false, false, false, true]],
  },
};

async function loadInWalkthrough(page, doc) {
  await page.click('#tab-load');
  await page.setInputFiles('#panel-load input[type="file"]',
    { name: 'case.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(doc)) });
  await page.click('#panel-load button:has-text("Show in the Walkthrough")');
  await page.waitForFunction((root) => !document.querySelector(root).hidden, ROOT);
  await settled(page);
}

test('contrast: a weight of 1 against 0 is at least 3:1 in both schemes, small weights show, text stays readable', async () => {
  const seen = {};
  for (const colorScheme of ['light', 'dark']) {
    const p = await openPage('/demo/', { colorScheme });
    try {
      const { page } = p;
      await loadInWalkthrough(page, WEIGHTS_CASE);
      assert.deepEqual(await cellTexts(page, 'A1'), ['1.000', '0.000', '0.000', '0.000', '0.250', '0.250', '0.250', '0.250',
        '0.500', '0.500', '0.000', '0.000', '0.333', '0.333', '0.333', '0.000']);
      const colours = await page.evaluate((root) => {
        const parse = (c) => c.match(/[\d.]+/g).map(Number);
        // Composites each cell's background over the page background, as the screen shows it.
        const bg = parse(getComputedStyle(document.body).backgroundColor);
        const cell = (i, j) => {
          const td = document.querySelector(`${root} table[data-matrix="A1"] td[data-row="${i}"][data-col="${j}"]`);
          const [r, g, b, a = 1] = parse(getComputedStyle(td).backgroundColor);
          return { rgb: [r, g, b].map((v, k) => a * v + (1 - a) * bg[k]), text: parse(getComputedStyle(td.firstChild).color) };
        };
        return { one: cell(0, 0), zero: cell(0, 1), quarter: cell(1, 0), half: cell(2, 0), bg };
      }, ROOT);
      const lin = (c) => { const v = c / 255; return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
      const lum = ([r, g, b]) => 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
      const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((m, n) => n - m); return (x + 0.05) / (y + 0.05); };
      const r = {
        oneVsZero: ratio(colours.one.rgb, colours.zero.rgb),
        quarterVsZero: ratio(colours.quarter.rgb, colours.zero.rgb),
        halfVsQuarter: ratio(colours.half.rgb, colours.quarter.rgb),
        textOnOne: ratio(colours.one.text, colours.one.rgb),
        textOnZero: ratio(colours.zero.text, colours.zero.rgb),
      };
      seen[colorScheme] = Object.fromEntries(Object.entries(r).map(([k, v]) => [k, Number(v.toFixed(2))]));
      assert.ok(r.oneVsZero >= 3, `${colorScheme}: 1 vs 0 is ${r.oneVsZero.toFixed(2)}:1`);
      assert.ok(r.quarterVsZero >= 1.5, `${colorScheme}: 0.25 vs 0 is ${r.quarterVsZero.toFixed(2)}:1`);
      assert.ok(r.halfVsQuarter >= 1.15, `${colorScheme}: 0.5 vs 0.25 is ${r.halfVsQuarter.toFixed(2)}:1`);
      assert.ok(r.textOnOne >= 4.5, `${colorScheme}: text on a full weight ${r.textOnOne.toFixed(2)}:1`);
      assert.ok(r.textOnZero >= 4.5, `${colorScheme}: text on an empty cell ${r.textOnZero.toFixed(2)}:1`);
      await screenshot(page, `walkthrough-weights-${colorScheme}`, { fullPage: false });
      assertClean(p);
    } finally {
      await p.close();
    }
  }
  console.log(`# contrast ratios: ${JSON.stringify(seen)}`);
});

// ---- 6. Narrow screens ------------------------------------------------------------------------------

test('at 320 px neither the demo nor the widgets example scrolls sideways', async () => {
  const viewport = { width: 320, height: 640 };
  const sideways = (page) => page.evaluate(() => document.scrollingElement.scrollWidth);
  const p = await openPage('/demo/', { viewport });
  try {
    const { page } = p;
    assert.ok(await sideways(page) <= 320, `demo: ${await sideways(page)} px wide`);
    for (const tab of ['#tab-heads', '#tab-train', '#tab-load', '#tab-walkthrough']) {
      await page.click(tab);
      assert.ok(await sideways(page) <= 320, `demo ${tab}: ${await sideways(page)} px wide`);
    }
    await setSizes(page, 16, 16, 4);
    assert.ok(await sideways(page) <= 320, `16 x 16 x 4: ${await sideways(page)} px wide`);
    await page.focus(`${cellSel('Y', 15, 15)} span`);  // the explanation of the last cell
    assert.ok(await sideways(page) <= 320, `explanation open: ${await sideways(page)} px wide`);
    await page.fill(`${cellSel('WO', 0, 15)} input`, 'abc');  // a cell's message
    assert.ok(await sideways(page) <= 320, `cell message open: ${await sideways(page)} px wide`);
    await setSizes(page, 16, 16, 16);  // narrow W matrices side by side: a message at the right edge
    for (const m of ['WQ3', 'WK3', 'WV3']) {
      await page.fill(`${cellSel(m, 0, 0)} input`, 'abc');
      assert.ok(await sideways(page) <= 320, `${m}'s message: ${await sideways(page)} px wide`);
    }
    await page.fill(`${cellSel('WV3', 0, 0)} input`, 'abc');
    await screenshot(page, 'walkthrough-320', { fullPage: false });
    assertClean(p);
  } finally {
    await p.close();
  }
  const w = await openPage('/widgets/example.html', { viewport, waitForReady: false });
  try {
    await w.page.waitForFunction(() => [...document.querySelectorAll('headscope-walkthrough, headscope-heads')]
      .every((e) => e.dataset.ready === 'true'));
    assert.ok(await sideways(w.page) <= 320, `widgets example: ${await sideways(w.page)} px wide`);
    await screenshot(w.page, 'widgets-320');
    assertClean(w);
  } finally {
    await w.close();
  }
});

// ---- 12. Hand checks -------------------------------------------------------------------------------

test('explanations on the page pass a hand check: the written terms give the written result', async () => {
  const p = await openPage('/demo/');
  try {
    const { page } = p;
    await setSizes(page, 6, 6, 2);
    await preset(page, 'Seeded random');
    const texts = await page.evaluate(async (root) => {
      const out = [];
      for (const m of ['Q1', 'K2', 'V1', 'S1', 'A1', 'A2', 'H2', 'CONCAT', 'Y']) {
        for (const span of document.querySelectorAll(`${root} table[data-matrix="${m}"] td span`)) {
          span.focus();
          out.push(document.querySelector(`${root} .hs-explain`).textContent);
        }
      }
      return out;
    }, ROOT);
    assert.equal(texts.length, 6 * 3 * 3 + 36 * 3 + 6 * 3 + 36 * 2);
    let checks = 0;
    for (const text of texts) {
      for (const c of handCheck(text).checks) {
        assert.equal(c.computed, c.written, `${c.expression} gives ${c.computed}, the page writes ${c.written}\n${text}`);
        checks++;
      }
    }
    assert.ok(checks >= 6 * 3 * 3 + 36 * 4, `${checks} hand checks`);
    // The seed's Y[0][0], which three decimals get wrong (0.802 + 0.898 = 1.700).
    await preset(page, 'Seed example');
    await page.mouse.move(0, 0);  // the pointer off the cells: it would explain the one under it
    await page.focus(`${cellSel('Y', 0, 0)} span`);
    const y = await page.textContent(`${ROOT} .hs-explain`);
    assert.deepEqual(handCheck(y).checks.map((c) => [c.computed, c.written]), [['1.701', '1.701']], y);
    assertClean(p);
  } finally {
    await p.close();
  }
});

// ---- 13. axe-core --------------------------------------------------------------------------------

test('axe-core finds no violations in the Walkthrough, light and dark, with an explanation and a cell message open', async () => {
  for (const colorScheme of ['light', 'dark']) {
    const p = await openPage('/demo/', { colorScheme });
    try {
      const { page } = p;
      const report = (v) => JSON.stringify(v, null, 2);
      let v = await axe(page, ROOT);
      assert.deepEqual(v, [], `${colorScheme}, the seed example: ${report(v)}`);
      await page.focus(`${cellSel('A1', 1, 1)} span`);
      await page.fill(`${cellSel('X', 0, 0)} input`, 'abc');
      v = await axe(page, ROOT);
      assert.deepEqual(v, [], `${colorScheme}, explanation and message open: ${report(v)}`);
      // A loaded case with biases and a causal mask (hatched −∞ scores).
      await loadInWalkthrough(page, JSON.parse(readFileSync(golden('causal-unbatched-self.json'), 'utf8')));
      v = await axe(page, ROOT);
      assert.deepEqual(v, [], `${colorScheme}, a masked case with biases: ${report(v)}`);
      assertClean(p);
    } finally {
      await p.close();
    }
  }
});
