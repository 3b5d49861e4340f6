// The multi-threaded module in Chromium: on the demo server's pages (cross-origin isolated by
// tools/serve.js's COOP/COEP headers, under its strict CSP) init({ threads: 2 }) loads, its
// pthread workers start, and a shape large enough to run the threaded paths gives the
// single-threaded SIMD128 module's bits (the threaded module is SIMD128; Chromium's default
// single-threaded module is the relaxed-SIMD one, whose bits are its own).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.js';

test('Chromium: init({ threads: 2 }) on the cross-origin isolated demo page matches threads: 1 bit for bit', async () => {
  const { page, consoleErrors, pageErrors, foreignRequests, close } = await openPage('/demo/');
  try {
    const result = await page.evaluate(async () => {
      const { init } = await import('/lib/index.js');
      const st = await init({ simd: 'simd128' });
      const mt = await init({ threads: 2 });
      // Deterministic inputs (no Math.random): E=96 H=6 L=70 N=2 passes every threshold.
      const fill = (n, seed) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37 + seed));
      const run = (hs) => {
        const mha = hs.createMultiheadAttention({ embedDim: 96, numHeads: 6 });
        const shapes = mha.parameterShapes();
        mha.loadStateDict(Object.fromEntries(Object.entries(shapes).map(([k, s], j) =>
          [k, { data: fill(s.reduce((a, b) => a * b, 1), j), shape: s }])));
        const x = { data: fill(70 * 2 * 96, 9), shape: [70, 2, 96] };
        const r = mha.forward(x, x, x, { averageAttnWeights: false });
        mha.dispose();
        return [...new Uint32Array(r.output.data.buffer), ...new Uint32Array(r.weights.data.buffer)];
      };
      const a = run(st), b = run(mt);
      return {
        isolated: globalThis.crossOriginIsolated, threads: [st.threads, mt.threads], simd: [st.simd, mt.simd],
        length: a.length, differing: a.filter((x, i) => x !== b[i]).length,
      };
    });
    assert.equal(result.isolated, true);
    assert.deepEqual(result.threads, [1, 2]);
    assert.deepEqual(result.simd, ['simd128', 'simd128']);
    assert.equal(result.length, 70 * 2 * 96 + 2 * 6 * 70 * 70);
    assert.equal(result.differing, 0);
    assert.deepEqual(pageErrors, []);
    assert.deepEqual(consoleErrors, []);
    assert.deepEqual(foreignRequests, []);
  } finally {
    await close();
  }
});
