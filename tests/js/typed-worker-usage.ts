// A typed use of the remote Transformer (initWorker().createTransformer), which tsc checks against
// index.d.ts (transformer-worker.test.js), resolved through the package's own `exports`.
import { HeadscopeError, initWorker } from 'headscope';
import type { RemoteHeadscope, RemoteTransformer, Tensor } from 'headscope';

export async function remoteTransformerTypes(): Promise<number> {
  const remote: RemoteHeadscope = await initWorker();
  const model: RemoteTransformer = await remote.createTransformer({ vocabSize: 8, maxLen: 4, dModel: 4, nHeads: 2 });
  const shapes: Record<string, number[]> = model.parameterShapes();
  const hookNames: string[] = model.hookNames();
  await model.loadStateDict(await model.stateDict(), { strict: true });
  const { logits, hooks } = await model.forward([[1, 2, 3]], { hooks: ['hook_embed'], headGates: [[1, 0]] });
  const embed: Tensor | undefined = hooks?.hook_embed;
  const generated = await model.generate([1, 2], { maxNewTokens: 2, temperature: 0, logits: true });
  const ids: Int32Array = generated.tokens.data;
  // A cancellable generation: options.signal (the worker's generate only).
  const controller = new AbortController();
  const cancellable = model.generate([1, 2], { maxNewTokens: 2, signal: controller.signal });
  controller.abort();
  await cancellable.catch((e: unknown) => (e instanceof HeadscopeError && e.code === 'CANCELLED' ? null : Promise.reject(e)));
  const disposed: boolean = model.disposed;
  await model.dispose();
  await remote.terminate();
  return logits.data.length + Object.keys(shapes).length + hookNames.length + (embed?.shape.length ?? 0) +
    ids.length + (disposed ? 1 : 0) + model.config.nLayers;
}

import type { TransformerCaseDocument, TransformerCaseResult, TransformerCaseCheck } from 'headscope';
export async function remoteTransformerCaseTypes(doc: TransformerCaseDocument): Promise<boolean> {
  const remote = await initWorker();
  const result: TransformerCaseResult = await remote.runCase(doc);
  const check: TransformerCaseCheck = await remote.checkCase(doc, result);
  await remote.terminate();
  return check.ok;
}

import type { TrainingRun, TrainProgress, TrainStepResult } from 'headscope';
export async function remoteTrainingTypes(): Promise<number> {
  const remote = await initWorker();
  const model = await remote.createTransformer({ vocabSize: 27, maxLen: 16, dModel: 16, nLayers: 2, nHeads: 2 });
  await model.setOptimizer({ type: 'adamw', lr: 3e-3, betas: [0.9, 0.98], clipGradNorm: 1 });
  const step: TrainStepResult = await model.trainStep([[1, 2, 3]], [[2, 3, -100]]);
  const { loss, grads } = await model.backward([[1, 2, 3]], [[2, 3, -100]], { headGateGrads: true });
  const gate: number | undefined = grads.headGates?.[0]?.[1];
  let seen = 0;
  const run: TrainingRun = await model.train({ steps: 10, task: { name: 'induction', seqLen: 16 }, batchSize: 4 },
    { onProgress: (e: TrainProgress) => { seen += e.losses.length; } });
  await run.pause();
  await run.resume();
  const done = await run.done;
  await model.dispose();
  await remote.terminate();
  return step.loss + loss + (gate ?? 0) + done.step + seen;
}
