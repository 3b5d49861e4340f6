// Training in Chromium: the same seed, batches and steps give the bits Node gives (the loss and
// gradient norm of every step, every weight after the steps, a backward's gradients and gate
// gradients), in the page's thread and through initWorker(); the page's own copy of web/lib.
// Bits are a build's: the SIMD128 build in both (init({ simd: 'simd128' })), and the relaxed-SIMD
// build in both (Chromium has relaxed SIMD; Node 20 needs --experimental-wasm-relaxed-simd, so
// Node's side runs in a child process with the flag).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { openPage } from './harness.js';

// Runs in Node and, serialized, in the page: 40 AdamW steps (with clipping and weight decay) on
// induction batches, then SGD steps on copy batches, then a backward with gate gradients; every
// number as its float64 / float32 bit pattern (hex), so equality is bit equality.
async function train(libUrl, viaWorker, simd) {
  const { init } = await import(`${libUrl}/index.js`);
  const { initWorker } = await import(`${libUrl}/worker-client.js`);
  const { makeTask } = await import(`${libUrl}/tasks.js`);
  const hex64 = (x) => {
    const v = new DataView(new ArrayBuffer(8));
    v.setFloat64(0, x);
    return v.getBigUint64(0).toString(16);
  };
  const hex32 = (data) => Array.from(new Uint32Array(data.buffer, data.byteOffset, data.length), (u) => u.toString(16)).join(',');
  const induction = makeTask('induction', { seqLen: 24, seed: 7 });
  const copy = makeTask('copy', { seqLen: 24, seed: 7 });
  const config = { vocabSize: Math.max(induction.vocabSize, copy.vocabSize), maxLen: 24, dModel: 32, nLayers: 2,
    nHeads: 4, dMlp: 48, seed: 3 };
  const remote = viaWorker ? await initWorker(undefined, { simd }) : null;
  const hs = viaWorker ? null : await init({ simd });
  const model = viaWorker ? await remote.createTransformer(config) : hs.createTransformer(config);
  const out = { steps: [], simd: (remote ?? hs).simd };
  try {
    await model.setOptimizer({ type: 'adamw', lr: 3e-3, betas: [0.9, 0.98], weightDecay: 0.02, clipGradNorm: 0.5 });
    for (let i = 0; i < 40; i++) {
      const { tokens, targets } = induction.batch(8, i);
      const r = await model.trainStep(tokens, targets);
      out.steps.push([hex64(r.loss), hex64(r.gradNorm), r.clipped, r.stepped]);
    }
    await model.setOptimizer({ type: 'sgd', lr: 0.05 });
    for (let i = 0; i < 10; i++) {
      const { tokens, targets } = copy.batch(8, i);
      const r = await model.trainStep(tokens, targets);
      out.steps.push([hex64(r.loss), hex64(r.gradNorm), r.clipped, r.stepped]);
    }
    const probe = induction.heldOut(4, 0);
    const { loss, grads } = await model.backward(probe.tokens, probe.targets, { headGateGrads: true });
    out.backward = [hex64(loss), JSON.stringify(grads.headGates.map((row) => row.map(hex64)))];
    out.grads = Object.fromEntries(Object.entries(grads).filter(([k]) => k !== 'headGates').map(([k, t]) => [k, hex32(t.data)]));
    const sd = await model.stateDict();
    out.weights = Object.fromEntries(Object.entries(sd).map(([k, t]) => [k, hex32(t.data)]));
  } finally {
    await model.dispose();
    if (remote) await remote.terminate();
    if (hs) hs.close();
  }
  return out;
}

const LIB = new URL('../../web/lib', import.meta.url).href;

/** Both sides of one build: Node's ([in its thread, through its worker]) and the page's. */
async function runBuild(page, simd) {
  let inNode;
  if (simd === 'simd128') {
    inNode = [await train(LIB, false, simd), await train(LIB, true, simd)];
  } else {
    const script = `const train = ${train};\n` +
      `process.stdout.write(JSON.stringify([await train(${JSON.stringify(LIB)}, false, ${JSON.stringify(simd)}), ` +
      `await train(${JSON.stringify(LIB)}, true, ${JSON.stringify(simd)})]));`;
    const { stdout } = await promisify(execFile)(process.execPath,
      ['--experimental-wasm-relaxed-simd', '--input-type=module', '-e', script], { maxBuffer: 1 << 26, timeout: 120_000 });
    inNode = JSON.parse(stdout);
  }
  const inPage = await page.evaluate(`(${train})(new URL('/lib', location.href).href, false, ${JSON.stringify(simd)})`);
  const inPageWorker = await page.evaluate(`(${train})(new URL('/lib', location.href).href, true, ${JSON.stringify(simd)})`);
  return { inNode: inNode[0], inNodeWorker: inNode[1], inPage, inPageWorker };
}

for (const simd of ['simd128', 'relaxed']) {
  test(`training gives the bits Node gives, in the page and through its Worker (the ${simd} build)`, async () => {
    const { page, pageErrors, foreignRequests, close } = await openPage('/widgets/example.html', { waitForReady: false });
    try {
      const { inNode, inNodeWorker, inPage, inPageWorker } = await runBuild(page, simd);
      for (const r of [inNode, inNodeWorker, inPage, inPageWorker]) assert.equal(r.simd, simd, 'the build asked for ran');
      assertSameTraining(inNode, { page: inPage, 'page worker': inPageWorker, 'node worker': inNodeWorker });
      assert.deepEqual(pageErrors, []);
      assert.deepEqual(foreignRequests, []);
    } finally {
      await close();
    }
  });
}

function assertSameTraining(inNode, others) {
  assert.equal(inNode.steps.length, 50);
  assert.ok(inNode.steps.every(([, , , stepped]) => stepped));
  assert.ok(inNode.steps.some(([, , clipped]) => clipped), 'clipping took effect at some step');
  for (const [what, got] of Object.entries(others)) {
    assert.deepEqual(got.steps, inNode.steps, `${what}: losses and gradient norms`);
    assert.deepEqual(got.backward, inNode.backward, `${what}: backward's loss and gate gradients`);
    assert.deepEqual(Object.keys(got.weights), Object.keys(inNode.weights));
    for (const k of Object.keys(inNode.weights)) {
      assert.equal(got.weights[k], inNode.weights[k], `${what}: weights ${k}`);
      assert.equal(got.grads[k], inNode.grads[k], `${what}: gradient ${k}`);
    }
  }
}

// Issue 28, item 1, in Chromium: a train request of a few bytes that claims four billion batches
// is refused at once by the page's Worker, which meanwhile answers everything queued behind it;
// a raw message with a sparse args array is refused too, and a bad batch takes no step.
test('the Worker in the page refuses sparse and bad batches at once and keeps answering', async () => {
  const { page, pageErrors, close } = await openPage('/widgets/example.html', { waitForReady: false });
  try {
    const r = await page.evaluate(async (lib) => {
      const { initWorker } = await import(`${lib}/worker-client.js`);
      const remote = await initWorker();
      const model = await remote.createTransformer({ vocabSize: 8, maxLen: 8, dModel: 8, seed: 2 });
      await model.setOptimizer({ type: 'adamw', lr: 1e-2 });
      const before = Array.from((await model.stateDict())['unembed.weight'].data);
      const sparse = [];
      sparse.length = 2 ** 32 - 1;
      const t0 = performance.now();
      const refused = model.train({ steps: 3, batches: sparse }).then(() => 'accepted', (e) => `${e.code}: ${e.message}`);
      const forward = model.forward([[1, 2, 3]]).then((f) => f.logits.shape.join(','));
      const memory = remote.memory().then((m) => m.heapInUse > 0);
      const out = { refused: await refused, forward: await forward, memory: await memory, ms: performance.now() - t0 };
      // Raw: no client checks at all.
      const raw = await new Promise((resolve) => {
        const onMessage = (e) => {
          if (e.data?.id !== 424242) return;
          remote.worker.removeEventListener('message', onMessage);
          resolve(e.data.ok ? 'ok' : `${e.data.error.code}: ${e.data.error.message}`);
        };
        remote.worker.addEventListener('message', onMessage);
        const args = [];
        args.length = 2 ** 32 - 1;
        remote.worker.postMessage({ id: 424242, op: 'call', args });
      });
      out.raw = raw;
      out.bad = await model.train({ steps: 3, batches: [{ tokens: [[1, 2]], targets: [[2, 3]] }, null] })
        .then(() => 'accepted', (e) => `${e.code}: ${e.message}`);
      out.unchanged = JSON.stringify(Array.from((await model.stateDict())['unembed.weight'].data)) === JSON.stringify(before);
      await model.dispose();
      await remote.terminate();
      return out;
    }, new URL('/lib', page.url()).href);
    assert.equal(r.refused, 'INVALID_ARGUMENT: spec.batches: expected a non-empty array of { tokens, targets } of at most ' +
      '65536 batches (they are cycled), got an array of length 4294967295');
    assert.equal(r.forward, '1,3,8');
    assert.equal(r.memory, true);
    assert.ok(r.ms < 3000, `answered in ${r.ms} ms`);
    assert.equal(r.raw, 'INVALID_ARGUMENT: headscope worker: expected at most 8 arguments, got an args array of length 4294967295');
    assert.equal(r.bad, 'INVALID_ARGUMENT: spec.batches[1]: expected { tokens, targets }, got null');
    assert.equal(r.unchanged, true, 'no refused run took a step');
    assert.deepEqual(pageErrors, []);
  } finally {
    await close();
  }
});
