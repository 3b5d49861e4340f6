#!/usr/bin/env node
// What a new result array costs in this environment, apart from headscope: the median time of
// `new Float32Array(n)` for the tutorial shapes' result sizes, in Node (this process) and in
// Debian's Chromium, each array kept alive for a while as a caller keeps its results (an array
// that escapes nowhere is optimized away by Chromium's V8, and measures nothing). forward()
// returns one such array per call, and so does onnxruntime-web's session.run: where this is
// microseconds (docs/architecture.md, "The result's allocation is the environment's"), it bounds
// every per-call ratio measured with a new output array.
//
//   node tools/bench/alloc-probe.mjs [--node-only]
import { chromium } from 'playwright-core';

// Runs in Node and, as a string, in the page: returns { 'new n': median ns, 'pooled n': ... }.
// "pooled" hands out views into 1 MiB ArrayBuffers, a new one when the last is used up (what a
// result pool such as Node's Buffer pool would cost): where it is much cheaper than "new", the
// cost is per allocation; where it is not, per byte of fresh ArrayBuffer.
function probe() {
  const keep = new Array(64);  // the last 64 arrays stay reachable
  const result = {};
  for (const n of [12, 128, 2048]) {  // L=3 E=4, L=8 E=16 and L=32 E=64 outputs
    const iters = n >= 2048 ? 20000 : 100000;
    for (const mode of ['new', 'pooled']) {
      const slabBytes = 1 << 20;
      let slab = null, offset = slabBytes;
      const times = [];
      for (let rep = 0; rep < 7; rep++) {
        const t0 = performance.now();
        for (let i = 0; i < iters; i++) {
          let a;
          if (mode === 'new') {
            a = new Float32Array(n);
          } else {
            if (offset + n * 4 > slabBytes) { slab = new ArrayBuffer(slabBytes); offset = 0; }
            a = new Float32Array(slab, offset, n);
            offset += n * 4;
          }
          a[0] = i;
          keep[i & 63] = a;
        }
        times.push(((performance.now() - t0) / iters) * 1e6);
      }
      times.sort((a, b) => a - b);
      result[`${mode} ${n}`] = Math.round(times[3]);
    }
  }
  globalThis.__keep = keep;
  return result;
}

const show = (where, r) => console.log(`${where}: Float32Array(n), median ns: ` +
  Object.entries(r).map(([k, ns]) => `${k.replace(' ', ' n=')} ${ns}`).join(', '));
show(`Node ${process.version}`, probe());
if (!process.argv.includes('--node-only')) {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await browser.newPage();
    show(`Chromium ${browser.version()}`, await page.evaluate(`(${probe.toString()})()`));
  } finally {
    await browser.close();
  }
}
