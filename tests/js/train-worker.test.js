// Training through initWorker(): backward / setOptimizer / trainStep as the calling thread's, bit
// for bit, and train(): a run of many steps in the worker, in chunks, with progress events, pause,
// resume and cancel, other requests served between chunks, and the weights of the same steps run
// in the calling thread.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { initWorker } from '../../web/lib/worker-client.js';
import { makeTask } from '../../web/lib/tasks.js';
import { engineAndWorker } from './helpers.js';

const { hs, remote } = await engineAndWorker();

const TASK = { name: 'induction', seqLen: 16, seed: 3 };
const { name: TASK_NAME, ...TASK_OPTIONS } = TASK;
const task = makeTask(TASK_NAME, TASK_OPTIONS);
const CONFIG = { vocabSize: task.vocabSize, maxLen: 16, dModel: 16, nLayers: 2, nHeads: 2, seed: 5 };
const OPTIMIZER = { type: 'adamw', lr: 3e-3, betas: [0.9, 0.98], weightDecay: 0.01, clipGradNorm: 1 };

function assertSameWeights(a, b, what) {
  assert.deepEqual(Object.keys(a), Object.keys(b));
  for (const k of Object.keys(a)) {
    assert.deepEqual(a[k].shape, b[k].shape, `${what}: ${k} shape`);
    assert.ok(Buffer.from(a[k].data.buffer, a[k].data.byteOffset, a[k].data.byteLength)
      .equals(Buffer.from(b[k].data.buffer, b[k].data.byteOffset, b[k].data.byteLength)), `${what}: ${k} bits`);
  }
}

test('backward, setOptimizer and trainStep through the worker give the calling thread\'s bits', async () => {
  const local = hs.createTransformer(CONFIG);
  const m = await remote.createTransformer(CONFIG);
  try {
    const { tokens, targets } = task.batch(4, 0);
    const want = local.backward(tokens, targets, { headGateGrads: true });
    const got = await m.backward(tokens, targets, { headGateGrads: true });
    assert.equal(got.loss, want.loss);
    assert.deepEqual(got.grads.headGates, want.grads.headGates);
    for (const k of Object.keys(local.parameterShapes())) {
      assert.deepEqual([...got.grads[k].data], [...want.grads[k].data], k);
    }
    local.setOptimizer(OPTIMIZER);
    await m.setOptimizer(OPTIMIZER);
    for (let i = 0; i < 3; i++) {
      const b = task.batch(4, i);
      assert.deepEqual(await m.trainStep(b.tokens, b.targets), local.trainStep(b.tokens, b.targets));
    }
    assertSameWeights(await m.stateDict(), local.stateDict(), 'after 3 steps');
    // Errors cross with their code and argument.
    await assert.rejects(m.setOptimizer({ type: 'adamw', lr: -1 }), { code: 'INVALID_ARGUMENT', argument: 'options.lr' });
    await assert.rejects(m.trainStep(tokens, [[1]]), { code: 'SHAPE_MISMATCH' });
  } finally {
    local.dispose();
    await m.dispose();
  }
});

test('train(): the steps of a built-in task in chunks, the calling thread\'s weights bit for bit', async () => {
  const local = hs.createTransformer(CONFIG);
  const m = await remote.createTransformer(CONFIG);
  try {
    local.setOptimizer(OPTIMIZER);
    await m.setOptimizer(OPTIMIZER);
    const steps = 60;
    const progress = [];
    const run = await m.train({ steps, task: TASK, batchSize: 8, startIndex: 2, chunkMs: 5 },
      { onProgress: (e) => progress.push(e) });
    const result = await run.done;
    assert.deepEqual(result, { status: 'done', step: steps });
    assert.equal(run.status, 'done');
    // Every step's loss arrived once, in order, in the chunks' events.
    const losses = progress.flatMap((e) => [...e.losses]);
    assert.equal(losses.length, steps);
    assert.ok(progress.length > 1, `several chunks (${progress.length})`);
    assert.equal(progress.at(-1).step, steps);
    const want = [];
    for (let i = 0; i < steps; i++) {
      const b = task.batch(8, 2 + i);
      want.push(local.trainStep(b.tokens, b.targets).loss);
    }
    assert.deepEqual(losses, want);
    assertSameWeights(await m.stateDict(), local.stateDict(), 'after the run');
    assert.ok(want.at(-1) < want[0], `the loss fell: ${want[0]} -> ${want.at(-1)}`);
  } finally {
    local.dispose();
    await m.dispose();
  }
});

test('train(): pause stops at a step, other requests are served, resume and cancel', async () => {
  const m = await remote.createTransformer(CONFIG);
  try {
    await m.setOptimizer(OPTIMIZER);
    const run = await m.train({ steps: 1e6, task: TASK, batchSize: 4, chunkMs: 5 });
    await new Promise((r) => setTimeout(r, 50));
    const paused = await run.pause();
    assert.equal(paused.status, 'paused');
    assert.equal(run.status, 'paused');
    // Nothing moves while paused; forward is served.
    const w1 = await m.stateDict();
    const { logits } = await m.forward(task.probe().tokens);
    assert.deepEqual(logits.shape, [1, 16, task.vocabSize]);
    await new Promise((r) => setTimeout(r, 40));
    assertSameWeights(await m.stateDict(), w1, 'while paused');
    assert.equal(run.step, paused.step);
    await run.resume();
    await new Promise((r) => setTimeout(r, 40));
    const cancelled = await run.cancel();
    assert.equal(cancelled.status, 'cancelled');
    const result = await run.done;
    assert.equal(result.status, 'cancelled');
    assert.ok(result.step > paused.step && result.step < 1e6, `${paused.step} -> ${result.step}`);
    // A finished run's controls answer 'finished'.
    assert.equal((await run.pause()).status, 'finished');
  } finally {
    await m.dispose();
  }
});

test('train(): refused steps, errors and disposal end a run with a status, never a hang', async () => {
  const m = await remote.createTransformer(CONFIG);
  try {
    // No optimizer: refused at once.
    await assert.rejects(m.train({ steps: 5, task: TASK, batchSize: 2 }), { code: 'INVALID_ARGUMENT', message: /setOptimizer/ });
    await m.setOptimizer(OPTIMIZER);
    // One run at a time per model.
    let run = await m.train({ steps: 1e6, task: TASK, batchSize: 2, chunkMs: 5 });
    await assert.rejects(m.train({ steps: 5, task: TASK, batchSize: 2 }), { code: 'INVALID_ARGUMENT', message: /training already/ });
    await run.cancel();
    let r = await run.done;
    assert.equal(r.status, 'cancelled');
    // A non-finite weight: the optimizer refuses the step; nothing changes.
    const sd = await m.stateDict();
    sd['unembed.weight'].data[0] = Infinity;
    await m.loadStateDict(sd);
    const progress = [];
    run = await m.train({ steps: 5, task: TASK, batchSize: 2 }, { onProgress: (e) => progress.push(e) });
    r = await run.done;
    assert.equal(r.status, 'refused');
    assert.equal(r.step, 0);
    assert.ok(r.refused.length > 0);
    assert.ok(!Number.isFinite(r.loss) || !Number.isFinite(r.gradNorm), `${r.loss} ${r.gradNorm}`);
    assert.deepEqual(progress, [], 'no step was taken, no progress');
    // Bad specs are refused at once, naming the field.
    for (const [spec, re] of [
      [{ steps: 0, task: TASK, batchSize: 2 }, /spec\.steps/],
      [{ steps: 2, task: TASK }, /spec\.batchSize/],
      [{ steps: 2, batches: [] }, /batches/],
      [{ steps: 2, task: TASK, batchSize: 2, batches: [] }, /not both/],
      [{ steps: 2, task: TASK, batchSize: 2, lr: 1 }, /spec\.lr: unknown option/],
      [{ steps: 2, task: { name: 'nope' }, batchSize: 2 }, /task name/],
      [null, /spec: expected an object/],
    ]) {
      await assert.rejects(m.train(spec), (e) => e.code === 'INVALID_ARGUMENT' && re.test(e.message), String(re));
    }
    await assert.rejects(m.train({ steps: 1, task: TASK, batchSize: 1 }, { onProgress: 3 }), /onProgress/);
    // Disposing the model ends its run.
    await m.loadStateDict((await remote.createTransformer(CONFIG).then(async (fresh) => {
      const s = await fresh.stateDict();
      await fresh.dispose();
      return s;
    })));
    run = await m.train({ steps: 1e6, task: TASK, batchSize: 2, chunkMs: 5 });
    await new Promise((res) => setTimeout(res, 20));
    await m.dispose();
    r = await run.done;
    assert.equal(r.status, 'cancelled');
  } finally {
    await m.dispose();
  }
});
