// The relaxed-SIMD build in Chromium (which validates relaxed SIMD by default): the demo page's
// init() loads it under simd 'auto' and says so, and in the page it passes PyTorch goldens
// (MHA, transformer forward) with the tolerances of the SIMD128 build, agreeing with
// Node's SIMD128 results within the tolerance of tests/js/relaxed-build.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { init } from '../../web/lib/index.js';
import { openPage } from './harness.js';

const golden = (name) => JSON.parse(readFileSync(new URL(`../golden/${name}`, import.meta.url), 'utf8'));
const BUILD_TOLERANCE = 1e-5;   // relaxed vs SIMD128, per tensor: max |a - b| / max(1, max |b|)

const MHA = ['seed-worked-example.json', 'realistic-e64-h4-self-kpm.json', 'causal-batched-self.json',
  'kdim-vdim-bias-kv-zero-attn.json', 'exp-subnormal-weight-many-keys.json'];
const TRANSFORMER = ['transformer/induction-lab-pre-learned-attn-only-l2-h2-b2.json', 'transformer/wide-d48-pre-learned-gelu-mlp-l2-h6-b1.json'];

function relativeDiff(a, b) {
  let scale = 1;
  let diff = 0;
  b.forEach((x, i) => {
    if (Number.isFinite(x)) {
      scale = Math.max(scale, Math.abs(x));
      diff = Math.max(diff, Math.abs(a[i] - x));
    } else if (!(Object.is(a[i], x) || (Number.isNaN(a[i]) && Number.isNaN(x)))) {
      diff = Infinity;
    }
  });
  return diff / scale;
}

test('Chromium: init() picks the relaxed-SIMD build on the demo page and it passes the goldens', async () => {
  const { page, consoleErrors, pageErrors, foreignRequests, close } = await openPage('/demo/');
  try {
    assert.equal(await page.evaluate(() => document.body.dataset.simd), 'relaxed', 'the demo runs the relaxed build');
    assert.match(await page.textContent('.hs-status'), /^Engine ready \(WASM relaxed SIMD\)\.$/);
    const docs = [...MHA, ...TRANSFORMER].map(golden);
    const inPage = await page.evaluate(async (cases) => {
      const { init, relaxedSimdSupported } = await import('/lib/index.js');
      const hs = await init();
      const plain = await init({ simd: 'simd128' });
      const out = { supported: relaxedSimdSupported(), simd: hs.simd, plain: plain.simd, same: hs === plain, cases: [] };
      for (const doc of cases) {
        const r = hs.runCase(doc);
        const check = hs.checkCase(doc, r);
        out.cases.push({ ok: check.ok, detail: check.detail, error: check.maxRelativeError,
          data: Array.from((r.output ?? r.logits).data) });
      }
      return out;
    }, docs);
    assert.equal(inPage.supported, true, 'Chromium validates relaxed SIMD');
    assert.equal(inPage.simd, 'relaxed');
    assert.equal(inPage.plain, 'simd128');
    assert.equal(inPage.same, false, 'the two builds are two modules');
    const hs = await init({ simd: 'simd128' });
    [...MHA, ...TRANSFORMER].forEach((name, i) => {
      const c = inPage.cases[i];
      assert.ok(c.ok, `${name} in the page's relaxed build: ${c.detail}`);
      const r = hs.runCase(docs[i]);
      const e = relativeDiff(c.data, Array.from((r.output ?? r.logits).data));
      assert.ok(e <= BUILD_TOLERANCE, `${name}: relaxed (Chromium) vs SIMD128 (Node) ${e}`);
    });
    assert.deepEqual(pageErrors, []);
    assert.deepEqual(consoleErrors, []);
    assert.deepEqual(foreignRequests, []);
  } finally {
    await close();
  }
});
