// The Heads view's attention variants in Chromium: for each variant (grouped-query and multi-query
// K/V heads, ALiBi, sliding windows with and without the causal mask, RoPE in both layouts, and
// all of them at once) a link opens it, and every weight the view exports is the engine's own for
// that config and those options, computed in the same page through the public API (init() of
// the package's index.js, a MultiheadAttention made here, the K/V rows pooled by this file's own
// code), and differs from the plain layer's (so a view that ignored the variant fails). The
// controls set a variant as a reader does, the URL holds it and a reload gives the same numbers;
// what cannot combine is refused with a message naming the field, or not offered, with the reason;
// axe passes with every variant control shown; a loaded case's alibi and window are applied.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.js';
import { axe } from './axe.js';

const root = '#panel-heads';
const TEXT = 'ERROR [api] timeout after 30 s, retry=3 then ok';

// In the page: the view's exported weights and state, and the engine's weights for the same
// sentence, weights, config and options (the test's `call`), and those of the plain layer.
async function pageNumbers(call) {
  const view = window.headscopeDemo.heads;
  const doc = JSON.parse(await (await view.exportAs('json')).text());
  const { init } = await import('/lib/index.js');
  const { tokenize } = await import('/views/heads/tokens.js');
  const { embed, PRESET_LENGTH } = await import('/views/heads/features.js');
  const { buildStateDict, randomStateDict } = await import('/views/heads/weights.js');
  const hs = await init();
  const s = doc.state;
  const { tokens } = tokenize(s.text);
  const x = embed(tokens, { embedDim: 64 });
  const L = tokens.length;
  const H = s.heads, G = call.config.numKvHeads ?? H, hd = 64 / H;
  const plainDict = s.weights === 'random'
    ? randomStateDict({ embedDim: 64, numHeads: H, seed: s.seed })
    : buildStateDict({ embedDim: 64, numHeads: H, heads: s.presets, seed: s.seed, sharpness: s.sharpness, length: Math.max(PRESET_LENGTH, L) });
  let dict = plainDict;
  if (G !== H && s.weights === 'random') dict = randomStateDict({ embedDim: 64, numHeads: H, seed: s.seed, numKvHeads: G });
  else if (G !== H) {
    // The presets' K and V rows pooled per group of H / G heads: each K/V head the mean of its group's.
    const pool = (t, cols) => {
      const rows = 64 + 2 * G * hd;
      const out = new Float32Array(rows * cols);
      out.set(t.data.subarray(0, 64 * cols));
      for (let row = 64; row < rows; row++) {
        const part = row < 64 + G * hd ? 0 : 1;
        const r = row - 64 - part * G * hd;
        const g = Math.floor(r / hd);
        for (let c = 0; c < cols; c++) {
          let sum = 0;
          for (let k = 0; k < H / G; k++) sum += t.data[(64 + part * 64 + (g * (H / G) + k) * hd + r % hd) * cols + c];
          out[row * cols + c] = sum / (H / G);
        }
      }
      return { data: out, shape: cols === 1 ? [rows] : [rows, cols] };
    };
    dict = { ...plainDict, in_proj_weight: pool(plainDict.in_proj_weight, 64), in_proj_bias: pool(plainDict.in_proj_bias, 1) };
  }
  const causal = { data: Uint8Array.from({ length: L * L }, (_, k) => (k % L > Math.floor(k / L) ? 1 : 0)), shape: [L, L] };
  const weightsOf = (config, sd, options) => {
    const mha = hs.createMultiheadAttention({ embedDim: 64, numHeads: H, ...config });
    try {
      mha.loadStateDict(sd);
      const o = { averageAttnWeights: false, ...options };
      if (o.attnMask === 'causal') o.attnMask = causal;
      return Array.from(mha.forward(x, x, x, o).weights.data);
    } finally {
      mha.dispose();
    }
  };
  const plainOptions = s.causal ? { attnMask: 'causal' } : {};
  return {
    state: s,
    shown: doc.heads.map((h) => h.weights.flat()).flat(),
    engine: weightsOf(call.config, dict, call.options),
    plain: weightsOf({}, plainDict, plainOptions),
    note: document.querySelector('#panel-heads .hs-heads-variant-note').textContent,
    hash: location.hash,
  };
}

const worst = (a, b) => a.reduce((m, v, k) => Math.max(m, Math.abs(v - b[k])), 0);

// [link parameters, the state fields they set, the engine's config and options for them, the note]
const CASES = [
  ['kvHeads=2', { kvHeads: 2 }, { config: { numKvHeads: 2 }, options: {} }, /2 query heads share each K\/V head \(2 for 4: grouped-query\): .* 2x smaller/],
  ['heads=8&kvHeads=1&weights=random&seed=5', { heads: 8, kvHeads: 1, weights: 'random' }, { config: { numKvHeads: 1 }, options: {} }, /8 query heads share each K\/V head \(1 for 8: multi-query\)/],
  ['alibi=1', { alibi: true }, { config: {}, options: { alibi: true } }, /ALiBi: .*slopes 0\.25, 0\.0625, 0\.015625, 0\.00390625\): near keys gain/],
  ['window=3&causal=1', { window: 3, causal: true }, { config: {}, options: { window: 3, isCausal: true } }, /Sliding window of 3: query i sees only the keys i − 2 … i/],
  ['window=2', { window: 2, causal: false }, { config: {}, options: { window: 2 } }, /Sliding window of 2 without the causal mask: .*\|i − j\| < 2/],
  ['ropeDims=16', { ropeDims: 16, ropeLayout: 'half', ropeBase: 10000 }, { config: { ropeDims: 16, ropeLayout: 'half', ropeBase: 10000 }, options: {} }, /RoPE: 16 of each head's 16 dims .*pairs \(i, i \+ r\/2\), base 10000/],
  ['ropeDims=8&ropeLayout=interleaved&ropeBase=100', { ropeDims: 8, ropeLayout: 'interleaved', ropeBase: 100 },
    { config: { ropeDims: 8, ropeLayout: 'interleaved', ropeBase: 100 }, options: {} }, /RoPE: 8 of each head's 16 dims .*\(2i, 2i \+ 1\), base 100/],
  ['heads=8&kvHeads=2&alibi=1&window=4&causal=1&ropeDims=8&ropeLayout=interleaved&off=2',
    { heads: 8, kvHeads: 2, alibi: true, window: 4, causal: true, ropeDims: 8, ropeLayout: 'interleaved' },
    { config: { numKvHeads: 2, ropeDims: 8, ropeLayout: 'interleaved', ropeBase: 10000 }, options: { alibi: true, window: 4, isCausal: true } },
    /4 query heads share each K\/V head.*ALiBi.*Sliding window of 4.*RoPE: 8 of each head's 8 dims/],
];

test('each variant: a link opens it, and the weights the view exports are the engine\'s for that config and options', { timeout: 180_000 }, async () => {
  for (const [params, fields, call, note] of CASES) {
    const link = `/demo/#heads?text=${encodeURIComponent(TEXT)}&${params}`;
    const p = await openPage(link);
    try {
      const got = await p.page.evaluate(pageNumbers, call);
      for (const [k, v] of Object.entries(fields)) assert.deepEqual(got.state[k], v, `${params}: state.${k}`);
      assert.equal(got.shown.length, got.engine.length, `${params}: every head's weights`);
      assert.ok(worst(got.shown, got.engine) <= 1e-6, `${params}: the view's weights are the engine's (worst ${worst(got.shown, got.engine)})`);
      assert.ok(worst(got.shown, got.plain) > 1e-3, `${params}: the variant changes the weights (${worst(got.shown, got.plain)})`);
      assert.match(got.note, note, params);
      // The hash the page writes back holds the same variant.
      for (const part of params.split('&').filter((x) => !x.startsWith('off') && !x.startsWith('seed'))) {
        assert.ok(got.hash.includes(part), `${params}: the hash ${got.hash} has ${part}`);
      }
      assert.deepEqual(p.pageErrors, [], params);
      assert.deepEqual(p.consoleErrors, [], params);
    } finally {
      await p.close();
    }
  }
});

test('the controls set a variant as a reader does; the URL holds it and a reload gives the same numbers', { timeout: 120_000 }, async () => {
  const p = await openPage('/demo/#heads');
  try {
    const { page } = p;
    await page.waitForSelector(`${root} .hs-head-grid [data-head="1"] canvas`);
    assert.match(await page.textContent(`${root} .hs-heads-variant-note`), /No variant: plain multi-head attention/);
    assert.equal(await page.evaluate(() => location.hash), '#heads', 'the default state is no variant, and no parameter');
    assert.equal(await page.isVisible(`${root} [name="ropeBase"]`), false, 'RoPE\'s base only with RoPE on');
    assert.deepEqual(await page.$$eval(`${root} [name="kvHeads"] option`, (o) => o.map((x) => x.textContent)), ['4 (MHA)', '2 (GQA)', '1 (MQA)']);
    await page.selectOption(`${root} [name="heads"]`, '8');
    assert.deepEqual(await page.$$eval(`${root} [name="kvHeads"] option`, (o) => o.map((x) => x.value)), ['8', '4', '2', '1'], 'the divisors of 8');
    await page.selectOption(`${root} [name="kvHeads"]`, '4');
    await page.check(`${root} [name="alibi"]`);
    await page.check(`${root} [name="causal"]`);
    await page.selectOption(`${root} [name="window"]`, '8');
    await page.selectOption(`${root} [name="ropeDims"]`, '4');
    await page.selectOption(`${root} [name="ropeLayout"]`, 'interleaved');
    await page.fill(`${root} [name="ropeBase"]`, '500');
    await page.waitForFunction(() => /ropeBase=500/.test(location.hash));
    const hash = await page.evaluate(() => location.hash);
    assert.match(hash, /heads=8&.*causal=1.*&kvHeads=4&alibi=1&window=8&ropeDims=4&ropeLayout=interleaved&ropeBase=500$/);
    const call = { config: { numKvHeads: 4, ropeDims: 4, ropeLayout: 'interleaved', ropeBase: 500 }, options: { alibi: true, window: 8, isCausal: true } };
    const first = await page.evaluate(pageNumbers, call);
    assert.ok(worst(first.shown, first.engine) <= 1e-6, `the controls' variant is the engine's (worst ${worst(first.shown, first.engine)})`);
    // A typed base that is not one yet is marked, not applied.
    await page.fill(`${root} [name="ropeBase"]`, '-3');
    assert.equal(await page.getAttribute(`${root} [name="ropeBase"]`, 'aria-invalid'), 'true');
    assert.equal(await page.evaluate(() => window.headscopeDemo.heads.getState().ropeBase), 500);
    // Head counts the variant cannot take are not offered, with the reason.
    const disabled = await page.$$eval(`${root} [name="heads"] option`, (o) => o.filter((x) => x.disabled).map((x) => [x.value, x.title]));
    assert.deepEqual(disabled, [['1', '4 K/V heads do not divide 1 heads'], ['2', '4 K/V heads do not divide 2 heads']]);
    assert.match(await page.textContent(`${root} .hs-heads-variant-note`), /Head counts not offered with this variant: 1 \(4 K\/V heads do not divide 1 heads\); 2 /);

    const q = await openPage(`/demo/${hash}`);
    try {
      const again = await q.page.evaluate(pageNumbers, call);
      assert.deepEqual(again.state, first.state, 'the link gives the same state');
      assert.deepEqual(again.shown, first.shown, 'and the same numbers');
      assert.deepEqual(q.pageErrors, []);
    } finally {
      await q.close();
    }
    // Switching RoPE off puts its layout and base back, and the link drops them.
    await page.selectOption(`${root} [name="ropeDims"]`, '0');
    await page.waitForFunction(() => !/rope/.test(location.hash));
    const s = await page.evaluate(() => window.headscopeDemo.heads.getState());
    assert.deepEqual([s.ropeDims, s.ropeLayout, s.ropeBase], [0, 'half', 10000]);
    assert.deepEqual(p.pageErrors, []);
    assert.deepEqual(p.consoleErrors, []);
  } finally {
    await p.close();
  }
});

test('what cannot combine is refused naming the field; axe passes with every variant control shown', { timeout: 120_000 }, async () => {
  const p = await openPage(`/demo/#heads?ropeDims=16&kvHeads=2`);
  try {
    const { page } = p;
    await page.waitForSelector(`${root} .hs-head-grid [data-head="1"] canvas`);
    const refused = await page.evaluate(() => {
      const view = window.headscopeDemo.heads;
      const out = [];
      for (const patch of [{ heads: 8 }, { heads: 1 }, { ropeDims: 3 }, { ropeDims: 0, ropeLayout: 'interleaved' }, { window: -1 }, { kvHeads: 3 }, { ropeBase: 0 }]) {
        try {
          view.update(patch);
          out.push('applied');
        } catch (e) {
          out.push(`${e.code}: ${e.message}`);
        }
      }
      return { out, state: view.getState() };
    });
    assert.deepEqual(refused.out.map((m) => m.split(':').slice(0, 3).join(':')), [
      'INVALID_ARGUMENT: setState: state.ropeDims', 'INVALID_ARGUMENT: setState: state.kvHeads', 'INVALID_ARGUMENT: setState: state.ropeDims',
      'INVALID_ARGUMENT: setState: state.ropeLayout', 'INVALID_ARGUMENT: setState: state.window', 'INVALID_ARGUMENT: setState: state.kvHeads',
      'INVALID_ARGUMENT: setState: state.ropeBase',
    ]);
    assert.match(refused.out[0], /at most the head dim 64 \/ 8 heads = 8, got 16/);
    assert.match(refused.out[3], /applies only with ropeDims > 0/);
    assert.equal(refused.state.heads, 4, 'nothing applied');
    assert.equal(refused.state.ropeDims, 16);
    // A bad link says what is wrong.
    await page.evaluate(() => { location.hash = '#heads?ropeLayout=interleaved'; });
    await page.waitForFunction(() => /ropeLayout: applies only with ropeDims > 0/.test(document.querySelector('.hs-status').textContent));
    await page.evaluate(() => { location.hash = '#heads?ropeDims=16&ropeLayout=interleaved&ropeBase=50&kvHeads=2&alibi=1&window=4'; });
    await page.waitForFunction(() => window.headscopeDemo.heads.getState().window === 4);
    await page.evaluate(() => window.headscopeDemo.heads.settled());
    assert.equal(await page.isVisible(`${root} [name="ropeBase"]`), true);
    const v = await axe(page, root);
    assert.deepEqual(v, [], JSON.stringify(v, null, 2));
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});

test('a loaded case\'s alibi and window options are the ones the Heads view applies', { timeout: 60_000 }, async () => {
  const p = await openPage('/demo/#heads');
  try {
    const { page } = p;
    await page.waitForSelector(`${root} .hs-head-grid [data-head="1"] canvas`);
    const [shown, engine, plain] = await page.evaluate(async () => {
      let s = 11;
      const next = () => { s = (Math.imul(s, 1103515245) + 12345) >>> 0; return (s / 2 ** 32) * 2 - 1; };
      const m = (r, c) => Array.from({ length: r }, () => Array.from({ length: c }, next));
      const E = 8, L = 6;
      const sd = { in_proj_weight: m(3 * E, E), 'out_proj.weight': m(E, E) };
      const query = m(L, E);
      const doc = { name: 'windowed', config: { embed_dim: E, num_heads: 2, bias: false }, state_dict: sd,
        inputs: { query, alibi: true, window: 2, is_causal: true } };
      const view = window.headscopeDemo.heads;
      await view.setCase(doc);
      const exported = JSON.parse(await (await view.exportAs('json')).text());
      const hs = window.headscopeDemo.engine;
      const mha = hs.createMultiheadAttention({ embedDim: E, numHeads: 2, bias: false });
      try {
        mha.loadStateDict(sd);
        const o = { averageAttnWeights: false };
        return [exported.heads.map((h) => h.weights.flat()).flat(),
          Array.from(mha.forward(query, query, query, { ...o, alibi: true, window: 2, isCausal: true }).weights.data),
          Array.from(mha.forward(query, query, query, o).weights.data)];
      } finally {
        mha.dispose();
      }
    });
    assert.ok(worst(shown, engine) <= 1e-6, `the case's weights with its alibi and window (worst ${worst(shown, engine)})`);
    assert.ok(worst(shown, plain) > 1e-2, 'not the full-attention weights');
    assert.deepEqual(p.pageErrors, []);
  } finally {
    await p.close();
  }
});
