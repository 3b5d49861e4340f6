// A typed use of headscope/tasks, compiled by `tsc --noEmit -p tests/js/tsconfig.tasks.json` in
// tests/js/tasks.test.js: it must type-check against web/lib/tasks.d.ts (resolved through the
// package's own `exports`), and the lines marked @ts-expect-error must not.
import { init } from 'headscope';
import { makeTask, TASKS } from 'headscope/tasks';
import type { Task, TaskBatch, TaskEvaluation, TaskName, TaskProbe } from 'headscope/tasks';

export async function train(steps: number): Promise<number> {
  const names: TaskName[] = TASKS.map((t) => t.name);
  const task: Task<'induction'> = makeTask('induction', { seqLen: 32, seed: 1, minLength: 8 });
  const maxLength: number = task.options.maxLength;
  const hs = await init();
  const model = hs.createTransformer({
    vocabSize: task.vocabSize, maxLen: task.seqLen, dModel: 32, nLayers: 2, nHeads: 2, seed: 1,
  });
  let last = 0;
  for (let step = 0; step < steps; step++) {
    const { tokens, targets }: TaskBatch = task.batch(16, step);
    const shape: number[] = tokens.shape;
    const ids: Int32Array = targets.data;
    void shape;
    void ids;
    const heldOut = task.heldOut(64, step);
    const { logits } = model.forward(heldOut.tokens);
    const scores: TaskEvaluation = task.evaluate(logits, heldOut.targets);
    last = scores.loss + task.accuracy(logits, heldOut.targets, { measure: 'sequence' });
  }
  const probe: TaskProbe = task.probe();
  const text: string = probe.text + task.describe(probe.tokens) + task.describe([0, 1, 2]);
  const axis: string = task.vocab[probe.tokens.data[0]];
  void text;
  void axis;
  makeTask('log-line');
  makeTask('brackets', { types: 3, minLength: 4 });
  makeTask('kv-lookup', { keys: 10, pairs: 6, queries: 3 });
  // @ts-expect-error not a task
  makeTask('parity');
  // @ts-expect-error brackets has no symbols option
  makeTask('brackets', { symbols: 4 });
  // @ts-expect-error seqLen is a number
  makeTask('copy', { seqLen: '32' });
  const probeLogits = model.forward(probe.tokens).logits;
  task.accuracy(probeLogits, probe.targets);
  // @ts-expect-error measure is 'position' or 'sequence'
  task.accuracy(probeLogits, probe.targets, { measure: 'row' });
  // @ts-expect-error logits are float32, not token ids
  task.evaluate(probe.tokens, probe.targets);
  model.dispose();
  return last + maxLength + names.length;
}

import { DETECTORS, headScores, modelHeadScores } from 'headscope/detectors';
import type { DetectorName } from 'headscope/detectors';
export async function detectors(): Promise<number> {
  const task = makeTask('induction', { seqLen: 16 });
  const hs = await init();
  const model = hs.createTransformer({ vocabSize: task.vocabSize, maxLen: 16, dModel: 16, nLayers: 2, nHeads: 2 });
  const probe = task.probe();
  const { hooks } = model.forward(probe.tokens, { hooks: ['blocks.1.attn.hook_pattern'] });
  const pattern = hooks?.['blocks.1.attn.hook_pattern'];
  const names: readonly DetectorName[] = DETECTORS;
  const layer1: number[] = pattern ? headScores(pattern, probe.tokens, { excludeBos: true }).induction ?? [] : [];
  const all: number[][] = modelHeadScores(model, probe.tokens, { detectors: ['previous-token'] })['previous-token'] ?? [];
  // @ts-expect-error not a detector
  headScores(pattern!, probe.tokens, { detectors: ['bos'] });
  model.dispose();
  return names.length + layer1.length + all.length;
}
