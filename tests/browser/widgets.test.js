// The widgets as a tutorial author configures them: every attribute of <headscope-heads> and
// <headscope-walkthrough>, visible messages for unknown and invalid ones, setState / setCase /
// setText, headscope-change events (one widget driving another), attribute changes after mount.
// Each test page is served at this server's origin (page.route), next to the real widgets.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.js';

const TEXT = 'the cat sat on the mat';

// Opens a page whose <body> is `body`, with the widgets' module loaded, and waits for every
// widget to be ready (or errored).
async function widgetPage(body, { count = null } = {}) {
  const p = await openPage('/widgets/example.html', { waitForReady: false });
  const html = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>widget test</title>
    <script type="module" src="/widgets/headscope-widgets.js"></script></head><body><main>${body}</main></body></html>`;
  await p.page.route('**/widgets/__test__.html', (route) => route.fulfill({ contentType: 'text/html', body: html }));
  await p.page.goto(`${p.url}widgets/__test__.html`);
  await p.page.waitForFunction((n) => {
    const widgets = [...document.querySelectorAll('headscope-walkthrough, headscope-heads, headscope-train')];
    return widgets.length > 0 && (n === null || widgets.length === n) && widgets.every((w) => w.dataset.ready);
  }, count);
  // The first frame of each view (it renders in requestAnimationFrame).
  await p.page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  return p;
}

function assertClean(p) {
  assert.deepEqual(p.pageErrors, [], 'page errors');
  assert.deepEqual(p.consoleErrors, [], 'console errors');
  assert.deepEqual(p.foreignRequests, [], 'requests to other origins');
}

// What a widget's shadow root shows: counts and texts the tests look at.
const inspect = (page, selector) => page.evaluate((sel) => {
  const w = document.querySelector(sel);
  const r = w.shadowRoot;
  const visible = (e) => e !== null && e.getClientRects().length > 0;
  const q = (s) => [...r.querySelectorAll(s)];
  return {
    ready: w.dataset.ready,
    problems: q('.hs-widget-problems li').map((li) => li.textContent),
    problemsVisible: visible(r.querySelector('.hs-widget-problems')),
    cards: q('.hs-head-grid [data-head]').filter(visible).map((c) => Number(c.dataset.head)),
    allCards: q('.hs-head-grid [data-head]').length,
    lineHeads: [...new Set(q('[data-line-head]').map((l) => Number(l.dataset.lineHead)))].sort((a, b) => a - b),
    text: r.querySelector('[name="text"]')?.value ?? null,
    visibleControls: q('[name]').filter(visible).map((c) => c.getAttribute('name')),
    prose: q('.hs-prose').filter(visible).length,
    offBoxes: q('[data-head-ablate]').filter((c) => !c.checked).map((c) => Number(c.dataset.headAblate)),
    chips: q('[data-pad-token]').map((c) => c.getAttribute('aria-pressed')),
    matrices: q('table[data-matrix]').filter(visible).map((t) => t.dataset.matrix),
    editable: q('input.hs-cell-input').filter(visible).length,
    sections: q('.hs-heads-section').filter(visible).length,
    averageShown: visible(r.querySelector('.hs-heads-average .hs-head-card')),
    state: w.state,
  };
}, selector);

test('<headscope-heads>: text, heads, show-heads, off, padded, causal, view, weights and presets attributes', async () => {
  const p = await widgetPage(`
    <headscope-heads id="a" text="${TEXT}" heads="8" show-heads="2 5" off="5" padded="1"></headscope-heads>
    <headscope-heads id="b" text="${TEXT}" heads="2" view="average" weights="random" seed="7" causal></headscope-heads>
    <headscope-heads id="c" text="${TEXT}" heads="2" presets="first-token previous-token" sharpness="3"></headscope-heads>`, { count: 3 });
  try {
    const a = await inspect(p.page, '#a');
    assert.deepEqual(a.problems, []);
    assert.equal(a.text, TEXT);
    assert.equal(a.allCards, 8, 'heads="8" builds 8 cards');
    assert.deepEqual(a.cards, [2, 5], 'show-heads="2 5" shows only those');
    assert.deepEqual(a.lineHeads, [2, 5], 'and only their lines');
    assert.deepEqual(a.offBoxes, [5], 'off="5" switches head 5 off');
    assert.deepEqual(a.chips.slice(0, 2), ['true', 'false'], 'padded="1" pads the first token');
    assert.deepEqual({ ...a.state, presets: a.state.presets.length }, {
      text: TEXT, heads: 8, weights: 'presets', presets: 8, seed: 1, sharpness: 6, causal: false,
      padded: [1], off: [5], show: [2, 5], view: 'heads',
    });
    const b = await inspect(p.page, '#b');
    assert.deepEqual(b.problems, []);
    assert.equal(b.averageShown, true, 'view="average" shows the averaged card');
    assert.equal(b.state.weights, 'random');
    assert.equal(b.state.seed, 7);
    assert.equal(b.state.causal, true, 'the boolean attribute causal');
    const c = await inspect(p.page, '#c');
    assert.deepEqual(c.state.presets, ['first-token', 'previous-token']);
    assert.equal(c.state.sharpness, 3);
    // The causal mask is in the numbers: no weight above the diagonal in widget b's grid data.
    const masked = await p.page.evaluate(() => document.querySelector('#b').shadowRoot
      .querySelector('.hs-heatmap-canvas').getAttribute('aria-label'));
    assert.match(masked, /attention weights|Arrow keys/);
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('<headscope-heads>: parts, hide, compact and readonly', async () => {
  const p = await widgetPage(`
    <headscope-heads id="parts" text="${TEXT}" parts="lines"></headscope-heads>
    <headscope-heads id="hide" text="${TEXT}" hide="seed sharpness causal view weights"></headscope-heads>
    <headscope-heads id="compact" text="${TEXT}" compact></headscope-heads>
    <headscope-heads id="full" text="${TEXT}"></headscope-heads>
    <headscope-heads id="ro" text="${TEXT}" readonly></headscope-heads>`, { count: 5 });
  try {
    const parts = await inspect(p.page, '#parts');
    assert.equal(parts.sections, 1, 'parts="lines": only the line view');
    assert.ok(parts.lineHeads.length > 0);
    const hide = await inspect(p.page, '#hide');
    assert.deepEqual(hide.visibleControls.filter((n) => ['seed', 'sharpness', 'causal', 'view', 'weights'].includes(n)), []);
    assert.ok(hide.visibleControls.includes('text') && hide.visibleControls.includes('heads'), hide.visibleControls.join());
    const compact = await inspect(p.page, '#compact');
    const full = await inspect(p.page, '#full');
    assert.equal(compact.prose, 0, 'compact: no intro, headings or notes');
    assert.ok(full.prose >= 4, `the full view has its prose (${full.prose})`);
    const ro = await inspect(p.page, '#ro');
    assert.deepEqual(ro.visibleControls.filter((n) => n !== 'view'), [], `readonly: ${ro.visibleControls.join()}`);
    assert.equal(await p.page.evaluate(() => document.querySelector('#ro').shadowRoot
      .querySelectorAll('[data-head-ablate]:not([hidden])').length), await p.page.evaluate(() => document.querySelector('#ro')
      .shadowRoot.querySelectorAll('.hs-head-on[hidden] [data-head-ablate]').length), 'readonly: no on/off boxes shown');
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('unknown and invalid attributes are shown in the widget, which keeps its other settings', async () => {
  const p = await widgetPage(`
    <headscope-heads id="h" text="${TEXT}" heads="3" colour="red" show-heads="1 9" hide="seed nothing" data-x="1" class="k"></headscope-heads>
    <headscope-walkthrough id="w" tokens="40" heads="3" stages="input bogus"></headscope-walkthrough>`, { count: 2 });
  try {
    const h = await inspect(p.page, '#h');
    assert.equal(h.problemsVisible, true);
    const all = h.problems.join('\n');
    assert.match(all, /heads="3": expected one of 1, 2, 4, 8, 16/);
    assert.match(all, /unknown attribute "colour"/);
    assert.match(all, /show-heads="1 9"/);
    assert.match(all, /hide="seed nothing": expected names from/);
    assert.doesNotMatch(all, /data-x|class/, 'global and data- attributes are not unknown');
    assert.equal(h.text, TEXT, 'the valid text attribute still applies');
    assert.equal(h.state.heads, 4, 'the default head count, with a message saying why');
    const w = await inspect(p.page, '#w');
    const wAll = w.problems.join('\n');
    assert.match(wAll, /tokens="40": expected an integer in \[1, 16\]/);
    assert.match(wAll, /heads="3".*divisor/);
    assert.match(wAll, /stages="input bogus"/);
    assert.ok(w.matrices.includes('Y'), 'the walkthrough still renders (every stage: the stages attribute was invalid)');
    // Fixing an attribute clears its message.
    await p.page.evaluate(() => document.querySelector('#h').setAttribute('heads', '2'));
    await p.page.waitForFunction(() => document.querySelector('#h').state.heads === 2 &&
      document.querySelector('#h').shadowRoot.querySelectorAll('.hs-head-grid [data-head]').length === 2);
    const fixed = await inspect(p.page, '#h');
    assert.doesNotMatch(fixed.problems.join('\n'), /heads="3"/);
    assert.equal(fixed.allCards, 2);
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('<headscope-walkthrough>: preset, sizes, causal, stages, show-heads, hide, compact, readonly', async () => {
  const p = await widgetPage(`
    <headscope-walkthrough id="stages" stages="input scores weights" show-heads="2"></headscope-walkthrough>
    <headscope-walkthrough id="sizes" preset="random" seed="3" tokens="5" dims="6" heads="3" causal></headscope-walkthrough>
    <headscope-walkthrough id="ro" readonly compact hide="legend explain"></headscope-walkthrough>`, { count: 3 });
  try {
    const s = await inspect(p.page, '#stages');
    assert.deepEqual(s.problems, []);
    assert.deepEqual(s.matrices, ['X', 'S2', 'A2'], 'only X, and head 2\'s scores and weights');
    const z = await inspect(p.page, '#sizes');
    assert.deepEqual(z.problems, []);
    assert.deepEqual([z.state.L, z.state.E, z.state.H, z.state.causal], [5, 6, 3, true]);
    assert.equal(z.matrices.filter((m) => /^A\d$/.test(m)).length, 3);
    // Causal: the first query's weights after the diagonal are 0.
    const a1 = await p.page.evaluate(() => [...document.querySelector('#sizes').shadowRoot
      .querySelectorAll('table[data-matrix="A1"] tbody tr:first-child td')].map((td) => td.textContent.trim()));
    assert.equal(Number(a1[0]), 1, `A1 row 1 under the causal mask: ${a1}`);
    assert.ok(a1.slice(1).every((v) => Number(v) === 0 || v === '0' || v === '−∞'), a1.join());
    const ro = await inspect(p.page, '#ro');
    assert.equal(ro.editable, 0, 'readonly: no editable cell');
    assert.equal(ro.prose, 0, 'compact: no title or intro');
    assert.deepEqual(ro.visibleControls, [], 'readonly: no presets or sizes');
    const hidden = await p.page.evaluate(() => {
      const r = document.querySelector('#ro').shadowRoot;
      return [r.querySelector('.hs-wt-legends').hidden, r.querySelector('.hs-explain').hidden];
    });
    assert.deepEqual(hidden, [true, true], 'hide="legend explain"');
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('setState, setText, setCase and headscope-change: one widget drives another, attributes update live', async () => {
  const p = await widgetPage(`
    <headscope-heads id="driver" text="${TEXT}"></headscope-heads>
    <headscope-heads id="follower" text="x" compact readonly></headscope-heads>
    <headscope-walkthrough id="w"></headscope-walkthrough>`, { count: 3 });
  try {
    await p.page.evaluate(() => {
      window.events = [];
      const driver = document.querySelector('#driver');
      const follower = document.querySelector('#follower');
      driver.addEventListener('headscope-change', (e) => {
        window.events.push(e.detail);
        follower.setState({ text: e.detail.state.text, heads: e.detail.state.heads });
      });
      document.querySelector('#w').addEventListener('headscope-change', (e) => window.events.push(e.detail));
    });
    // The reader types: the follower follows.
    const input = p.page.locator('#driver').locator('[name="text"]');
    await input.fill('a b c d');
    await p.page.waitForFunction(() => document.querySelector('#follower').state.text === 'a b c d');
    const ev = await p.page.evaluate(() => window.events.at(-1));
    assert.equal(ev.cause, 'input');
    assert.equal(ev.state.text, 'a b c d');
    // setText and setState from script fire the event too (cause 'setState').
    await p.page.evaluate(() => document.querySelector('#driver').setText('one two'));
    await p.page.waitForFunction(() => document.querySelector('#follower').state.text === 'one two');
    await p.page.evaluate(() => document.querySelector('#driver').setState({ heads: 2 }));
    await p.page.waitForFunction(() => document.querySelector('#follower').state.heads === 2);
    assert.equal(await p.page.evaluate(() => window.events.at(-1).cause), 'setState');
    // A bad setState rejects with a HeadscopeError naming the field; nothing changes.
    const err = await p.page.evaluate(() => document.querySelector('#driver').setState({ heads: 2, seed: -1 })
      .then(() => null, (e) => ({ name: e.name, code: e.code, message: e.message })));
    assert.deepEqual([err.name, err.code], ['HeadscopeError', 'INVALID_ARGUMENT']);
    assert.match(err.message, /state\.seed: expected an integer/);
    // An attribute set after mount updates the widget.
    await p.page.evaluate(() => document.querySelector('#driver').setAttribute('text', 'attribute text'));
    await p.page.waitForFunction(() => document.querySelector('#follower').state.text === 'attribute text');
    // The walkthrough: setState with sizes, then a case document.
    await p.page.evaluate(() => document.querySelector('#w').setState({ preset: 'identity', L: 2, E: 2, H: 1 }));
    let w = await inspect(p.page, '#w');
    assert.deepEqual([w.state.L, w.state.E, w.state.H], [2, 2, 1]);
    assert.deepEqual(w.state.wq, [[1, 0], [0, 1]]);
    const shown = await p.page.evaluate(() => document.querySelector('#w').setCase({
      name: 'tiny', config: { embed_dim: 2, num_heads: 2, bias: false },
      state_dict: { in_proj_weight: [[1, 0], [0, 1], [1, 0], [0, 1], [1, 0], [0, 1]], 'out_proj.weight': [[1, 0], [0, 1]] },
      inputs: { query: [[1, 0], [0, 1], [1, 1]] },
    }));
    assert.equal(shown, true);
    w = await inspect(p.page, '#w');
    assert.deepEqual([w.state.L, w.state.E, w.state.H], [3, 2, 2]);
    assert.equal(await p.page.evaluate(() => window.events.at(-1).state.L), 3, 'setCase fires headscope-change');
    // getState -> setState round-trips.
    const same = await p.page.evaluate(async () => {
      const el = document.querySelector('#w');
      const before = JSON.stringify(el.state);
      await el.setState(el.state);
      return before === JSON.stringify(el.state);
    });
    assert.equal(same, true);
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('<headscope-train>: task, model and steps attributes train in the widget; a bad one is shown; play and pause', { timeout: 120_000 }, async () => {
  const p = await widgetPage(`
    <headscope-train id="t" task="copy" layers="1" heads="2" dmodel="32" steps="5" compact hide="ablation"></headscope-train>
    <headscope-train id="bad" heads="3" seed="-1"></headscope-train>`, { count: 2 });
  try {
    const { page } = p;
    await page.waitForFunction(() => document.querySelector('#t').shadowRoot
      .querySelector('.hs-train-counter')?.textContent.startsWith('step 5'), null, { timeout: 60_000 });
    const t = await page.evaluate(() => {
      const r = document.querySelector('#t').shadowRoot;
      return { state: document.querySelector('#t').state, heads: r.querySelectorAll('.hs-train-head canvas').length,
        ablationShown: r.querySelector('.hs-train-ablation').closest('section').hidden === false,
        prose: [...r.querySelectorAll('.hs-prose')].filter((e) => e.getClientRects().length > 0).length };
    });
    assert.deepEqual([t.state.task, t.state.layers, t.state.heads, t.state.dModel, t.state.steps], ['copy', 1, 2, 32, 5]);
    assert.equal(t.heads, 2);
    assert.equal(t.ablationShown, false, 'hide="ablation"');
    assert.equal(t.prose, 0, 'compact');
    const bad = await page.evaluate(() => [...document.querySelector('#bad').shadowRoot.querySelectorAll('.hs-widget-problems li')]
      .map((li) => li.textContent).join('\n'));
    assert.match(bad, /seed="-1": expected an integer in \[0, 2147483647\]/);
    assert.match(bad, /heads="3".*divisor of dModel 32/);
    await page.evaluate(() => document.querySelector('#t').play());
    await page.waitForFunction(() => document.querySelector('#t').state.steps >= 30, null, { timeout: 60_000 });
    await page.evaluate(() => document.querySelector('#t').pause());
    assertClean(p);
  } finally {
    await p.close();
  }
});
