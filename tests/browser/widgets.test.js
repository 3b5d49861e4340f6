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
      // The attention variant's fields, at their defaults (no variant); K/V heads follow heads="8".
      kvHeads: 8, alibi: false, window: 0, ropeDims: 0, ropeLayout: 'half', ropeBase: 10000,
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

test('<headscope-train>: kv-heads, attn-window, attn-sinks and the rope attributes reach the model\'s config; bad ones are named', { timeout: 120_000 }, async () => {
  const p = await widgetPage(`
    <headscope-train id="r" task="copy" layers="1" heads="4" kv-heads="2" attn-window="4" attn-sinks positions="rope"
      rope-layout="interleaved" rope-base="500" rope-fraction="0.5" compact hide="ablation whatif"></headscope-train>
    <headscope-train id="parse" positions="rope" rope-base="-2" rope-fraction="1.5" rope-layout="spiral" kv-heads="x" attn-window="999"
      attn-sinks="maybe"></headscope-train>
    <headscope-train id="rule" heads="4" kv-heads="3" positions="learned" rope-base="100"></headscope-train>`, { count: 3 });
  try {
    const { page } = p;
    // The model the widget trains: its exported case's config (what createTransformer was given).
    const configOf = (id) => page.evaluate(async (sel) => {
      const el = document.querySelector(sel);
      await el.ready;
      return JSON.parse(await (await el.exportAs('case')).text()).config;
    }, id);
    const config = await configOf('#r');
    assert.deepEqual([config.n_heads, config.n_kv_heads, config.attn_window, config.attn_sinks, config.positions, config.rope_layout,
      config.rope_base, config.rope_fraction], [4, 2, 4, true, 'rope', 'interleaved', 500, 0.5]);
    const state = await page.evaluate(() => document.querySelector('#r').state);
    assert.deepEqual([state.kvHeads, state.attnWindow, state.attnSinks, state.ropeLayout, state.ropeBase, state.ropeFraction],
      [2, 4, true, 'interleaved', 500, 0.5]);
    // The model has its sink logits (one per head, 0 from the seed at step 0).
    const sinks = await page.evaluate(async () => {
      const doc = JSON.parse(await (await document.querySelector('#r').exportAs('case')).text());
      return doc.state_dict['blocks.0.attn.sinks'];
    });
    assert.deepEqual(sinks, [0, 0, 0, 0]);
    // A changed attribute changes the model.
    await page.evaluate(() => document.querySelector('#r').setAttribute('rope-base', '2500'));
    await page.waitForFunction(() => document.querySelector('#r').state.ropeBase === 2500);
    assert.equal((await configOf('#r')).rope_base, 2500);
    // attn-sinks="false" turns the sinks off: a model without them.
    await page.evaluate(() => document.querySelector('#r').setAttribute('attn-sinks', 'false'));
    await page.waitForFunction(() => document.querySelector('#r').state.attnSinks === false);
    assert.equal((await configOf('#r')).attn_sinks, undefined, 'no attn_sinks in the case of a model without sinks');
    const problems = (id) => page.evaluate((sel) => [...document.querySelector(sel).shadowRoot.querySelectorAll('.hs-widget-problems li')]
      .map((li) => li.textContent), id);
    const parse = (await problems('#parse')).join('\n');
    assert.match(parse, /^rope-base="-2": expected a number > 0/m);
    assert.match(parse, /^rope-fraction="1\.5": expected a number in \(0, 1\]/m);
    assert.match(parse, /^rope-layout="spiral": expected one of half, interleaved/m);
    assert.match(parse, /^kv-heads="x": expected an integer in \[1, 128\]/m);
    assert.match(parse, /^attn-window="999": expected an integer in \[0, 256\]/m);
    assert.match(parse, /^attn-sinks="maybe": expected no value \(present means on\), "true" or "false"/m);
    // Values of the right kind that the setup refuses: the message shows the attributes and names the field.
    const rule = (await problems('#rule')).join('\n');
    assert.match(rule, /kv-heads="3".*state\.kvHeads: expected a divisor of heads 4, got 3/);
    await page.evaluate(() => document.querySelector('#rule').setAttribute('kv-heads', '2'));
    await page.waitForFunction(() => /rope-base="100".*ropeBase: applies only with positions 'rope'/.test(
      [...document.querySelector('#rule').shadowRoot.querySelectorAll('.hs-widget-problems li')].map((li) => li.textContent).join('\n')));
    assertClean(p);
  } finally {
    await p.close();
  }
});

test('<headscope-heads>: kv-heads, alibi, window, rope-dims, rope-layout and rope-base set the variant; bad ones are named', { timeout: 60_000 }, async () => {
  const p = await widgetPage(`
    <headscope-heads id="v" text="${TEXT}" heads="8" kv-heads="2" alibi window="2" causal rope-dims="4" rope-layout="interleaved" rope-base="100"></headscope-heads>
    <headscope-heads id="bad" text="${TEXT}" heads="8" rope-dims="16" window="x" kv-heads="3"></headscope-heads>`, { count: 2 });
  try {
    const { page } = p;
    const v = await inspect(page, '#v');
    assert.deepEqual(v.problems, []);
    const { kvHeads, alibi, window, causal, ropeDims, ropeLayout, ropeBase } = v.state;
    assert.deepEqual({ kvHeads, alibi, window, causal, ropeDims, ropeLayout, ropeBase },
      { kvHeads: 2, alibi: true, window: 2, causal: true, ropeDims: 4, ropeLayout: 'interleaved', ropeBase: 100 });
    assert.ok(v.visibleControls.includes('ropeBase') && v.visibleControls.includes('kvHeads'), v.visibleControls.join(' '));
    // The exported weights are the engine's for that variant (same sentence, weights and options).
    const worst = await page.evaluate(async (text) => {
      const el = document.querySelector('#v');
      const shown = JSON.parse(await (await el.exportAs('json')).text()).heads.map((h) => h.weights.flat()).flat();
      const { init } = await import('/lib/index.js');
      const { tokenize } = await import('/views/heads/tokens.js');
      const { embed } = await import('/views/heads/features.js');
      const { buildStateDict, groupKeyValues } = await import('/views/heads/weights.js');
      const hs = await init();
      const { tokens } = tokenize(text);
      const x = embed(tokens, { embedDim: 64 });
      const sd = groupKeyValues(buildStateDict({ embedDim: 64, numHeads: 8, seed: 1, sharpness: 6, length: 32 }), { embedDim: 64, numHeads: 8, numKvHeads: 2 });
      const mha = hs.createMultiheadAttention({ embedDim: 64, numHeads: 8, numKvHeads: 2, ropeDims: 4, ropeLayout: 'interleaved', ropeBase: 100 });
      try {
        mha.loadStateDict(sd);
        const w = mha.forward(x, x, x, { averageAttnWeights: false, alibi: true, window: 2, isCausal: true }).weights.data;
        return shown.reduce((m, s, k) => Math.max(m, Math.abs(s - w[k])), 0);
      } finally {
        mha.dispose();
      }
    }, TEXT);
    assert.ok(worst <= 1e-6, `the widget's weights are the engine's (worst ${worst})`);
    const bad = (await inspect(page, '#bad')).problems.join('\n');
    assert.match(bad, /^window="x": expected an integer in \[0, 4096\]/m);
    assert.match(bad, /^kv-heads="3": expected one of 1, 2, 4, 8, 16/m);
    assert.match(bad, /heads="8" rope-dims="16": setState: state\.ropeDims: expected 0 \(no RoPE\) or an even number of dims at most the head dim 64 \/ 8 heads = 8, got 16/);
    assertClean(p);
  } finally {
    await p.close();
  }
});

// ---- The widget contract: every method the .d.ts types, called right after `await el.ready` ----

// A page with the widgets' module and no widget yet; the tests create them from script.
async function emptyWidgetPage() {
  const p = await openPage('/widgets/example.html', { waitForReady: false });
  const html = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>widget contract</title>
    <script type="module" src="/widgets/headscope-widgets.js"></script></head><body><main></main></body></html>`;
  await p.page.route('**/widgets/__test__.html', (route) => route.fulfill({ contentType: 'text/html', body: html }));
  await p.page.goto(`${p.url}widgets/__test__.html`);
  await p.page.waitForFunction(() => customElements.get('headscope-heads') && customElements.get('headscope-train'));
  // fresh(tag, attributes, call): a new widget, `await el.ready`, then at once `call(el)`; its
  // outcome as data: { ok, value } (a Blob as { type, size, text }) or { ok: false, name, code,
  // message, headscope: HeadscopeError.is(error) }. The widget is removed afterwards.
  await p.page.evaluate(() => {
    window.outcome = async (promise) => {
      // Handled at once (a rejection left for a later microtask is reported as unhandled).
      const settled = promise.then((v) => ({ ok: true, v }), (e) => ({ ok: false, e }));
      const { HeadscopeError } = await import('/lib/index.js');
      const { ok, v, e } = await settled;
      if (!ok) return { ok: false, name: e?.name, code: e?.code ?? null, message: String(e?.message ?? e), headscope: HeadscopeError.is(e) };
      if (v instanceof Blob) {
        return { ok: true, value: { type: v.type, size: v.size, text: v.type === 'image/png' ? null : await v.text() } };
      }
      return { ok: true, value: v ?? null };
    };
    window.fresh = async (tag, attributes, call) => {
      const el = document.createElement(tag);
      for (const [k, v] of Object.entries(attributes)) el.setAttribute(k, v);
      document.querySelector('main').append(el);
      try {
        await el.ready;
        return await window.outcome(Promise.resolve().then(() => call(el)));
      } finally {
        el.remove();
      }
    };
  });
  return p;
}

// In the page: does `svg` parse as XML, and which panels has it.
const svgPanels = (page, svg) => page.evaluate((s) => {
  const d = new DOMParser().parseFromString(s, 'image/svg+xml');
  return { error: d.querySelector('parsererror')?.textContent ?? null,
    panels: [...d.querySelectorAll('g[data-panel]')].map((g) => g.getAttribute('data-panel')),
    lines: d.querySelectorAll('polyline').length };
}, svg);

function assertRefused(out, code, mention, what) {
  assert.equal(out.ok, false, `${what}: expected a rejection, got ${JSON.stringify(out).slice(0, 200)}`);
  assert.equal(out.headscope, true, `${what}: a HeadscopeError, got ${out.name}: ${out.message}`);
  assert.equal(out.name, 'HeadscopeError', what);
  assert.equal(out.code, code, `${what}: ${out.message}`);
  if (mention) assert.match(out.message, mention, what);
}

test('<headscope-heads>: every typed method works right after `await el.ready`; failures are HeadscopeErrors', { timeout: 120_000 }, async () => {
  const p = await emptyWidgetPage();
  const { seedWorkedExample } = await import('../../web/lib/examples.js');
  try {
    const { page } = p;
    // run(attributes, fn, arg): fn(el, arg) in the page (sent as its source) on a fresh widget.
    const run = (attributes, fn, arg) => page.evaluate(([a, f, x]) => {
      const body = new Function('el', 'x', `return (${f})(el, x);`);
      return window.fresh('headscope-heads', a, (el) => body(el, x));
    }, [attributes, fn.toString(), arg]);
    const attrs = { text: TEXT, heads: '2' };
    // exportAs: each format, at once (this rejected with "nothing to export" before the first frame).
    for (const format of ['svg', 'png', 'json', 'csv']) {
      const out = await run(attrs, (el, f) => el.exportAs(f), format);
      assert.equal(out.ok, true, `exportAs('${format}') right after ready: ${out.message}`);
      assert.equal(out.value.type, { svg: 'image/svg+xml', png: 'image/png', json: 'application/json', csv: 'text/csv' }[format]);
      assert.ok(out.value.size > 100, format);
      if (format === 'json') assert.deepEqual(JSON.parse(out.value.text).tokens.queries, TEXT.split(' '), 'the text attribute\'s tokens');
      if (format === 'svg') {
        const svg = await svgPanels(page, out.value.text);
        assert.equal(svg.error, null);
        assert.deepEqual(svg.panels.map((t) => t.split(':')[0]), ['Head 1', 'Head 2']);
      }
    }
    assertRefused(await run(attrs, (el) => el.exportAs('case')), 'INVALID_ARGUMENT', /exportAs: format: expected one of svg, png, json, csv, got "case"/, 'exportAs(case)');
    assertRefused(await run(attrs, (el) => el.exportAs(7)), 'INVALID_ARGUMENT', /got 7/, 'exportAs(7)');
    // state: read at once; assigning it is setState.
    const state = await run(attrs, (el) => el.state);
    assert.equal(state.value.text, TEXT);
    assert.equal(state.value.heads, 2);
    const assigned = await run(attrs, async (el) => {
      el.state = { heads: 4 };
      await el.setState({});
      return el.state.heads;
    });
    assert.deepEqual(assigned, { ok: true, value: 4 });
    // setState, setText: applied; the next export shows them (not the previous frame's numbers).
    const texted = await run(attrs, async (el) => {
      await el.setText('one two three');
      return JSON.parse(await (await el.exportAs('json')).text()).tokens.queries;
    });
    assert.deepEqual(texted, { ok: true, value: ['one', 'two', 'three'] });
    const patched = await run(attrs, async (el) => {
      await el.setState({ heads: 8, off: [3] });
      const doc = JSON.parse(await (await el.exportAs('json')).text());
      return [doc.heads.length, doc.heads.filter((h) => !h.on).map((h) => h.head)];
    });
    assert.deepEqual(patched, { ok: true, value: [8, [3]] });
    assertRefused(await run(attrs, (el) => el.setState({ heads: 3 })), 'INVALID_ARGUMENT', /state\.heads/, 'setState({ heads: 3 })');
    assertRefused(await run(attrs, (el) => el.setText(42)), 'INVALID_ARGUMENT', /text/, 'setText(42)');
    // An empty text has nothing to export: a HeadscopeError that says so.
    assertRefused(await run(attrs, async (el) => { await el.setText(''); return el.exportAs('svg'); }),
      'INVALID_ARGUMENT', /nothing to export/, 'exportAs with no tokens');
    // setCase: the seed case's two heads, exported at once.
    const cased = await run(attrs, async (el, doc) => {
      await el.setCase(doc);
      return JSON.parse(await (await el.exportAs('json')).text()).tokens.queries;
    }, seedWorkedExample);
    assert.deepEqual(cased, { ok: true, value: ['t1', 't2', 't3'] });
    // A widget taken out of the page: DISPOSED.
    const removed = await page.evaluate(async () => {
      const el = document.createElement('headscope-heads');
      el.setAttribute('text', 'a b');
      document.querySelector('main').append(el);
      await el.ready;
      el.remove();
      return window.outcome(el.exportAs('svg'));
    });
    assertRefused(removed, 'DISPOSED', /exportAs/, 'exportAs after removal');
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('<headscope-walkthrough>: every typed method works right after `await el.ready`; failures are HeadscopeErrors', { timeout: 120_000 }, async () => {
  const p = await emptyWidgetPage();
  const { seedWorkedExample } = await import('../../web/lib/examples.js');
  try {
    const { page } = p;
    const run = (attributes, fn, arg) => page.evaluate(([a, f, x]) => {
      const body = new Function('el', 'x', `return (${f})(el, x);`);
      return window.fresh('headscope-walkthrough', a, (el) => body(el, x));
    }, [attributes, fn.toString(), arg]);
    const attrs = { preset: 'random', seed: '2', tokens: '3', dims: '4', heads: '2' };
    for (const format of ['svg', 'png', 'json', 'csv', 'case']) {
      const out = await run(attrs, (el, f) => el.exportAs(f), format);
      assert.equal(out.ok, true, `exportAs('${format}'): ${out.message}`);
      assert.ok(out.value.size > 100, format);
      if (format === 'svg') assert.equal((await svgPanels(page, out.value.text)).error, null);
      if (format === 'json') assert.deepEqual(JSON.parse(out.value.text).state.L, 3);
    }
    assertRefused(await run(attrs, (el) => el.exportAs('pdf')), 'INVALID_ARGUMENT', /exportAs: format: expected one of svg, png, json, csv, case, got "pdf"/, 'exportAs(pdf)');
    const state = await run(attrs, (el) => el.state);
    assert.deepEqual([state.value.L, state.value.E, state.value.H], [3, 4, 2]);
    assert.deepEqual(await run(attrs, async (el) => { el.state = { causal: true }; await el.setState({}); return el.state.causal; }), { ok: true, value: true });
    assert.deepEqual(await run(attrs, async (el) => { await el.setState({ L: 2 }); return el.state.L; }), { ok: true, value: 2 });
    assertRefused(await run(attrs, (el) => el.setState({ H: 3 })), 'INVALID_ARGUMENT', /H|heads/, 'setState({ H: 3 })');
    assert.deepEqual(await run(attrs, (el, doc) => el.setCase(doc), seedWorkedExample), { ok: true, value: true });
    assert.deepEqual(await run(attrs, (el) => el.setCase('not json')), { ok: true, value: false }, 'an unreadable case is shown in the view');
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('<headscope-train>: every typed method works right after `await el.ready` (exportAs: curves, heads, data, model); failures are HeadscopeErrors', { timeout: 240_000 }, async () => {
  const p = await emptyWidgetPage();
  try {
    const { page } = p;
    const run = (attributes, fn, arg) => page.evaluate(([a, f, x]) => {
      const body = new Function('el', 'x', `return (${f})(el, x);`);
      return window.fresh('headscope-train', a, (el) => body(el, x));
    }, [attributes, fn.toString(), arg]);
    const attrs = { task: 'copy', layers: '1', heads: '2', dmodel: '16', steps: '30', compact: '' };
    // exportAs right after ready: the attributes' run (to step 30) is what is exported.
    const svg = await run(attrs, (el) => el.exportAs('svg'));
    assert.equal(svg.ok, true, `exportAs('svg'): ${svg.name}: ${svg.message}`);
    assert.equal(svg.value.type, 'image/svg+xml');
    assert.doesNotMatch(svg.value.text, /<script|href=|url\(|var\(--/i, 'self-contained');
    const pic = await svgPanels(page, svg.value.text);
    assert.equal(pic.error, null);
    assert.deepEqual(pic.panels, ['Loss and accuracy (copy, step 30)', 'L0 H1', 'L0 H2']);
    assert.equal(pic.lines, 3, 'training loss, held-out loss, accuracy');
    const png = await run(attrs, (el) => el.exportAs('png'));
    assert.equal(png.ok, true, png.message);
    assert.equal(png.value.type, 'image/png');
    const json = await run(attrs, (el) => el.exportAs('json'));
    assert.equal(json.ok, true, json.message);
    const doc = JSON.parse(json.value.text);
    assert.equal(doc.view, 'train');
    assert.deepEqual([doc.state.task, doc.state.steps], ['copy', 30]);
    assert.deepEqual(doc.curve.map((c) => c.step), [0, 25, 30]);
    assert.equal(doc.curve[0].trainLoss, null, 'no training loss before training');
    assert.ok(doc.curve.every((c) => c.heldOutLoss > 0 && c.accuracy >= 0 && c.accuracy <= 1));
    assert.deepEqual(doc.heads.map((h) => [h.layer, h.head, h.on]), [[0, 1, true], [0, 2, true]]);
    const T = doc.probe.tokens.length;
    for (const h of doc.heads) {
      assert.equal(h.pattern.length, T);
      h.pattern.forEach((row, i) => {
        assert.ok(Math.abs(row.reduce((a, b) => a + b, 0) - 1) < 1e-4, `L${h.layer} H${h.head} row ${i} sums to 1`);
        assert.ok(row.slice(i + 1).every((w) => w === 0), 'causal');
      });
      assert.deepEqual(Object.keys(h.detectors).sort(), ['first-token', 'induction', 'previous-token', 'same-token']);
    }
    const csv = await run(attrs, (el) => el.exportAs('csv'));
    assert.equal(csv.ok, true, csv.message);
    const rows = csv.value.text.trim().split('\r\n').map((r) => r.split(','));
    assert.deepEqual(rows[0], ['step', 'train_loss', 'held_out_loss', 'held_out_accuracy']);
    assert.deepEqual(rows.slice(1).map((r) => Number(r[0])), [0, 25, 30]);
    assert.equal(rows[1][1], '', 'no training loss at step 0');
    assert.equal(Number(rows[3][2]), doc.curve[2].heldOutLoss);
    // 'case': the trained model, a transformer case document the library runs and matches.
    const model = await run(attrs, (el) => el.exportAs('case'));
    assert.equal(model.ok, true, model.message);
    const caseDoc = JSON.parse(model.value.text);
    assert.equal(caseDoc.kind, 'transformer');
    assert.match(caseDoc.name, /task=copy seed=1 steps=30/);
    const { init } = await import('../../web/lib/index.js');
    const hs = await init({ simd: 'simd128' });
    assert.equal(hs.checkCase(caseDoc, hs.runCase(caseDoc)).ok, true);
    assertRefused(await run(attrs, (el) => el.exportAs('gif')), 'INVALID_ARGUMENT', /exportAs: format: expected one of svg, png, json, csv, case, got "gif"/, 'exportAs(gif)');

    const quick = { task: 'copy', layers: '1', heads: '2', dmodel: '16', compact: '' };
    // state, setState (a larger steps trains on; a bad field is refused), the state setter.
    assert.deepEqual(await run(quick, (el) => [el.state.task, el.state.steps]), { ok: true, value: ['copy', 0] });
    assert.deepEqual(await run(quick, async (el) => { await el.setState({ steps: 5 }); return el.state.steps; }), { ok: true, value: 5 });
    assert.deepEqual(await run(quick, async (el) => { el.state = { seed: 9 }; await el.setState({}); return el.state.seed; }), { ok: true, value: 9 });
    assertRefused(await run(quick, (el) => el.setState({ heads: 3 })), 'INVALID_ARGUMENT', /heads/, 'setState({ heads: 3 })');
    // play, pause, step, reset.
    assert.deepEqual(await run(quick, async (el) => { await el.play(); await el.pause(); return true; }), { ok: true, value: true });
    assert.deepEqual(await run(quick, async (el) => { await el.step(3); return el.state.steps; }), { ok: true, value: 3 });
    assert.deepEqual(await run(quick, async (el) => { await el.step(2); await el.reset(); return el.state.steps; }), { ok: true, value: 0 });
    assertRefused(await run(quick, (el) => el.step(0)), 'INVALID_ARGUMENT', /step: n: expected an integer in \[1, 100000\]/, 'step(0)');
    // setCase: a trained model (the 'case' export) is loaded, at its step; a bad document is refused.
    const loaded = await run(quick, async (el, d) => { await el.setCase(d); return [el.state.steps, el.state.task]; }, caseDoc);
    assert.deepEqual(loaded, { ok: true, value: [30, 'copy'] });
    assertRefused(await run(quick, (el) => el.setCase({ kind: 'transformer' })), 'PARSE_ERROR', /config/, 'setCase({ kind })');
    assertRefused(await run(quick, (el) => el.setCase('{')), 'PARSE_ERROR', null, 'setCase("{")');
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});
