// A typed use of the remote Transformer (initWorker().createTransformer), which tsc checks against
// index.d.ts (transformer-worker.test.js), resolved through the package's own `exports`.
import { initWorker } from 'headscope';
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
