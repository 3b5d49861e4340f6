// The relaxed-SIMD build (web/lib/headscope_core_relaxed: the matmuls' multiply-adds are
// f32x4.relaxed_madd, one FMA on x86 and Arm) under Node. Node 20 validates relaxed SIMD only
// with --experimental-wasm-relaxed-simd, so tests/js/relaxed.test.js runs this file in a child
// process with the flag:
//
//   node --experimental-wasm-relaxed-simd tests/js/relaxed-build.mjs
//
// (not named *.test.js: `node --test tests/js/` would run it without the flag). What it holds
// the relaxed build to: init()'s default picks it and says so (hs.simd); the PyTorch goldens of
// tests/golden (MHA), tests/golden/transformer (forward and hooks) and tests/golden/train
// (backward, 5-step optimizer runs) pass with the tolerances the SIMD128 build is held to
// (api.test.js, transformer.test.js, train.test.js); its outputs agree with the SIMD128 build's
// within BUILD_TOLERANCE and differ from them in some bits (its FMA rounds once); within the
// build, bits do not depend on the path: generation with the KV cache gives the bits of a full
// recomputation, a Worker and a second module give the thread's bits.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { init, initWorker, relaxedSimdSupported } from '../../web/lib/index.js';
import { assertSameResultBits } from './same-bits.js';
import { configOf, flat, optimizerOf, relative, tensorError } from './transformer-helpers.js';

// Relaxed against SIMD128, per tensor: max |relaxed - simd128| / max(1, max |simd128|). Each
// product of k terms rounds k times fewer in the relaxed build; measured at most a few 1e-7 on
// these sets (the report line prints it), and both are within 1e-4 of float64 PyTorch.
const BUILD_TOLERANCE = 1e-5;

const relaxed = await init({ simd: 'relaxed' });
const simd128 = await init({ simd: 'simd128' });
after(() => {
  assert.equal(relaxed.liveHandles(), 0, 'live handles left in the relaxed module');
  assert.equal(simd128.liveHandles(), 0, 'live handles left in the SIMD128 module');
});

const goldenDir = new URL('../golden/', import.meta.url);
const readJson = (url) => JSON.parse(readFileSync(url, 'utf8'));
const jsonFiles = (dir) => readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
const bits = (f32) => new Uint32Array(f32.buffer, f32.byteOffset, f32.length);

/** Relaxed against SIMD128 over the tensors of two results: { error, differing, total }. */
class BuildDiff {
  constructor() { this.error = 0; this.where = '(none)'; this.differing = 0; this.total = 0; }
  note(a, b, where) {
    if (a === null || b === null) {
      assert.equal(a, b, `${where}: one build has a tensor the other has not`);
      return;
    }
    assert.equal(a.length, b.length, `${where}: length`);
    let scale = 1;
    let diff = 0;
    const ba = bits(a);
    const bb = bits(b);
    for (let i = 0; i < a.length; i++) {
      if (Number.isFinite(b[i])) {
        scale = Math.max(scale, Math.abs(b[i]));
        diff = Math.max(diff, Math.abs(a[i] - b[i]));
      } else {
        assert.ok(Object.is(a[i], b[i]) || (Number.isNaN(a[i]) && Number.isNaN(b[i])), `${where}[${i}]: ${a[i]} vs ${b[i]}`);
      }
      if (ba[i] !== bb[i]) this.differing++;
    }
    this.total += a.length;
    const e = diff / scale;
    assert.ok(e <= BUILD_TOLERANCE, `${where}: relaxed vs SIMD128 ${e} > ${BUILD_TOLERANCE}`);
    if (e > this.error) [this.error, this.where] = [e, where];
  }
  toString() {
    return `relaxed vs SIMD128 worst ${this.error.toExponential(2)} (${this.where}), ` +
      `${this.differing} of ${this.total} floats differ in some bit`;
  }
}

test('init() picks the relaxed build where relaxed SIMD validates, and hs.simd says which runs', async () => {
  assert.equal(relaxedSimdSupported(), true, 'this child runs with --experimental-wasm-relaxed-simd');
  assert.equal(await init(), relaxed, "simd 'auto' is the relaxed build here, one cached module");
  assert.equal(await init({ simd: 'auto', threads: 1 }), relaxed);
  assert.equal(relaxed.simd, 'relaxed');
  assert.equal(simd128.simd, 'simd128');
  assert.notEqual(relaxed, simd128);
  assert.equal(relaxed.kernelTarget, 'WASM');
  assert.equal(relaxed.threads, 1);
  // A caller's bytes are the SIMD128 module's unless simd: 'relaxed' says otherwise.
  const bytes = readFileSync(new URL('../../web/lib/headscope_core_relaxed.wasm', import.meta.url));
  const own = await init({ wasmBinary: bytes, simd: 'relaxed' });
  assert.notEqual(own, relaxed, 'init({ wasmBinary }) is never shared');
  assert.equal(own.simd, 'relaxed');
  own.close();
  const plain = await init({ wasmBinary: readFileSync(new URL('../../web/lib/headscope_core.wasm', import.meta.url)) });
  assert.equal(plain.simd, 'simd128');
  plain.close();
});

test('every MHA golden case within 1e-4 of PyTorch in the relaxed build, and within BUILD_TOLERANCE of SIMD128', (t) => {
  const files = jsonFiles(goldenDir);
  assert.ok(files.length >= 40, `${files.length} golden cases`);
  let worst = 0;
  const diff = new BuildDiff();
  for (const f of files) {
    const doc = readJson(new URL(f, goldenDir));
    const r = relaxed.runCase(doc);
    const check = relaxed.checkCase(doc, r);
    assert.ok(check.ok, `${f}: ${check.detail}`);
    worst = Math.max(worst, check.maxRelativeError);
    const s = simd128.runCase(doc);
    diff.note(r.output.data, s.output.data, `${f} output`);
    diff.note(r.weights?.data ?? null, s.weights?.data ?? null, `${f} weights`);
  }
  t.diagnostic(`relaxed build, MHA goldens: ${files.length} cases, worst relative error ${worst.toExponential(2)}; ${diff}`);
});

test('every transformer golden case: logits and hooks within 1e-4 of PyTorch in the relaxed build', (t) => {
  const dir = new URL('transformer/', goldenDir);
  const files = jsonFiles(dir);
  assert.ok(files.length >= 30, 'tests/golden/transformer has the generated set');
  let worst = 0;
  const diff = new BuildDiff();
  for (const f of files) {
    const doc = readJson(new URL(f, dir));
    const r = relaxed.runCase(doc);
    const check = relaxed.checkCase(doc, r);
    assert.ok(check.ok, `${f}: ${check.detail}`);
    worst = Math.max(worst, check.maxRelativeError);
    const s = simd128.runCase(doc);
    diff.note(r.logits.data, s.logits.data, `${f} logits`);
  }
  t.diagnostic(`relaxed build, transformer goldens: ${files.length} cases, worst relative error ${worst.toExponential(2)}; ${diff}`);
});

// ---- Training: tests/golden/train, held as train.test.js holds the SIMD128 build ----

function withModel(hs, doc, fn) {
  const m = hs.createTransformer(configOf(doc));
  try {
    m.loadStateDict(doc.state_dict);
    return fn(m);
  } finally {
    m.dispose();
  }
}

test('every train golden case in the relaxed build: backward (1e-5 loss, 1e-4 gradients) and 5-step optimizer runs (1e-4)', (t) => {
  const dir = new URL('train/', goldenDir);
  const files = jsonFiles(dir);
  assert.ok(files.length >= 30, 'tests/golden/train has the generated set');
  let worstLoss = 0;
  let worstGrad = 0;
  let worstParam = 0;
  let runs = 0;
  const diff = new BuildDiff();
  for (const f of files) {
    const doc = readJson(new URL(f, dir));
    const scale = Math.max(...Object.values(doc.grads).map((g) => Math.max(...flat(g).map(Math.abs))));
    const simdGrads = withModel(simd128, doc, (m) => m.backward(doc.tokens, doc.targets, { headGates: doc.head_gates }).grads);
    withModel(relaxed, doc, (m) => {
      const r = m.backward(doc.tokens, doc.targets, { headGates: doc.head_gates });
      const e = relative(r.loss, doc.loss);
      assert.ok(e <= 1e-5, `${f} loss ${r.loss} vs ${doc.loss}: ${e}`);
      worstLoss = Math.max(worstLoss, e);
      for (const [name, want] of Object.entries(doc.grads)) {
        const err = tensorError(r.grads[name].data, flat(want), 1e-3 * scale);
        assert.ok(err <= 1e-4, `${f} grads['${name}']: error ${err}`);
        worstGrad = Math.max(worstGrad, err);
        // Gradients are differences of products: held to the tensor's own scale like the goldens.
        const g = simdGrads[name].data;
        const gscale = Math.max(1e-3 * scale, ...Array.from(g, Math.abs));
        let d = 0;
        r.grads[name].data.forEach((x, i) => { d = Math.max(d, Math.abs(x - g[i])); });
        assert.ok(d / gscale <= BUILD_TOLERANCE * 10, `${f} grads['${name}']: relaxed vs SIMD128 ${d / gscale}`);
      }
    });
    for (const run of doc.runs) {
      const what = `${f} ${JSON.stringify(run.optimizer)}`;
      withModel(relaxed, doc, (m) => {
        const o = optimizerOf(run.optimizer);
        m.setOptimizer(o);
        let allT1 = true;
        run.batches.forEach((b, s) => {
          allT1 = allT1 && b.tokens[0].length === 1;
          const r = m.trainStep(b.tokens, b.targets);
          assert.equal(r.stepped, true, `${what} step ${s}: ${r.refused}`);
          const le = relative(r.loss, run.losses[s]);
          assert.ok(le <= 1e-5, `${what} step ${s}: loss ${r.loss} vs ${run.losses[s]}`);
          worstLoss = Math.max(worstLoss, le);
          const ne = Math.abs(r.gradNorm - run.grad_norms[s]) / Math.max(1e-3, run.grad_norms[s]);
          assert.ok(ne <= 1e-4, `${what} step ${s}: gradNorm ${r.gradNorm} vs ${run.grad_norms[s]}`);
          assert.equal(r.clipped, run.clipped[s], `${what} step ${s}: clipped`);
        });
        const D = doc.config.d_model;
        const steps = run.batches.length;
        const after = m.stateDict();
        for (const [name, value] of Object.entries(run.state_dict_after)) {
          const want = flat(value);
          const got = after[name].data;
          // The entries whose gradient is zero in exact arithmetic (train.test.js): float32 noise
          // that Adam scales to up to lr a step, held to steps * lr.
          const inW = name.endsWith('in_proj_weight');
          const inB = name.endsWith('in_proj_bias');
          const keptGot = [];
          const keptWant = [];
          want.forEach((w, j) => {
            const row = inW ? Math.floor(j / D) : j;
            const zero = (inB && row >= D && row < 2 * D) || (allT1 && (inW || inB) && row < 2 * D);
            if (zero) {
              assert.ok(Math.abs(got[j] - w) <= steps * o.lr + 1e-6, `${what} ${name}[${j}]`);
            } else {
              keptGot.push(got[j]);
              keptWant.push(w);
            }
          });
          if (keptWant.length === 0) continue;
          const e = tensorError(keptGot, keptWant, 1e-3);
          assert.ok(e <= 1e-4, `${what} ${name}: error ${e} after ${steps} steps`);
          worstParam = Math.max(worstParam, e);
        }
        runs++;
      });
    }
    // The forward's logits of the trained-from weights, against SIMD128's.
    const logits = (hs) => withModel(hs, doc, (m) => m.forward(doc.tokens).logits.data);
    diff.note(logits(relaxed), logits(simd128), `${f} logits`);
  }
  t.diagnostic(`relaxed build, train goldens: ${files.length} cases, ${runs} optimizer runs; worst loss error ` +
    `${worstLoss.toExponential(2)}, gradient ${worstGrad.toExponential(2)}, parameters ${worstParam.toExponential(2)}; ${diff}`);
});

// ---- What the build's own bits promise ----

function seededArray(n, seed) {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 31 - 1;
  });
}

function mhaForward(hs, E, H, L) {
  const mha = hs.createMultiheadAttention({ embedDim: E, numHeads: H });
  try {
    const shapes = mha.parameterShapes();
    mha.loadStateDict(Object.fromEntries(Object.entries(shapes).map(([k, s], j) =>
      [k, { data: seededArray(s.reduce((a, b) => a * b, 1), 7 + j).map((x) => x / Math.sqrt(E)), shape: s }])));
    const x = { data: seededArray(L * E, 3), shape: [L, E] };
    return mha.forward(x, x, x, { averageAttnWeights: false });
  } finally {
    mha.dispose();
  }
}

test('the relaxed build is not the SIMD128 one: its fused multiply-adds change some bits, within BUILD_TOLERANCE', (t) => {
  const diff = new BuildDiff();
  const a = mhaForward(relaxed, 96, 6, 40);
  const b = mhaForward(simd128, 96, 6, 40);
  diff.note(a.output.data, b.output.data, 'E=96 L=40 output');
  diff.note(a.weights.data, b.weights.data, 'E=96 L=40 weights');
  // An engine on a CPU without FMA would lower relaxed_madd to a multiply and an add, and give
  // SIMD128's bits: then this fails, and says so.
  assert.ok(diff.differing > 0, 'relaxed_madd gave SIMD128\'s bits everywhere: no FMA ran (a CPU without FMA?)');
  t.diagnostic(`E=96 H=6 L=40: ${diff}`);
  assertSameResultBits(mhaForward(relaxed, 96, 6, 40), a, 'a second relaxed forward');
});

test('generation with the KV cache gives the bits of a full recomputation in the relaxed build', () => {
  const configs = [
    // The context crosses the small-head path's 12 keys: that path's chains are relaxed_madd too.
    { vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, seed: 1 },
    { vocabSize: 50, maxLen: 40, dModel: 64, nLayers: 2, nHeads: 4, dMlp: 128, seed: 4 },
  ];
  for (const config of configs) {
    const m = relaxed.createTransformer(config);
    try {
      const V = config.vocabSize;
      const T = 3;
      const n = config.maxLen - T;
      const prompt = [0, 1].map((b) => Array.from({ length: T }, (_, i) => (i * 5 + b * 3 + 1) % V));
      const { tokens, logits } = m.generate(prompt, { maxNewTokens: n, logits: true });
      const rows = tokens.toArray();
      for (let s = 0; s < n; s++) {
        const full = m.forward(rows.map((r) => r.slice(0, T + s))).logits;
        for (let b = 0; b < 2; b++) {
          const want = full.data.subarray((b * (T + s) + T + s - 1) * V, (b * (T + s) + T + s) * V);
          const got = logits.data.subarray((b * n + s) * V, (b * n + s + 1) * V);
          assert.deepEqual(bits(got), bits(want), `dModel ${config.dModel} step ${s}, sequence ${b}: cached = recomputed`);
        }
      }
    } finally {
      m.dispose();
    }
  }
});

test('initWorker({ simd }) passes the option to the worker: its build and bits are the thread\'s', async () => {
  const config = { vocabSize: 20, maxLen: 16, dModel: 32, nLayers: 2, nHeads: 4, dMlp: 48, seed: 9 };
  const tokens = [[1, 2, 3, 4, 5, 6, 7, 8], [8, 7, 6, 5, 4, 3, 2, 1]];
  for (const [simd, hs] of [['relaxed', relaxed], ['simd128', simd128], [undefined, relaxed]]) {
    const remote = await initWorker(undefined, simd === undefined ? {} : { simd });
    try {
      assert.equal(remote.simd, hs.simd, `initWorker({ simd: ${simd} })`);
      const model = await remote.createTransformer(config);
      const local = hs.createTransformer(config);
      try {
        assertSameResultBits(await model.forward(tokens), local.forward(tokens), `worker (${simd}) forward`);
      } finally {
        await model.dispose();
        local.dispose();
      }
    } finally {
      await remote.terminate();
    }
  }
});

test('the threaded module stays SIMD128 under simd: auto', async () => {
  const mt = await init({ threads: 2 });
  try {
    assert.equal(mt.simd, 'simd128');
    assertSameResultBits(mhaForward(mt, 96, 6, 70), mhaForward(simd128, 96, 6, 70), 'threads 2 vs SIMD128');
  } finally {
    mt.close();
  }
});
