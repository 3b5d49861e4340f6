// A typed use of the public API, compiled by `tsc --noEmit` in tests/js/types.test.js: it must
// type-check against web/lib/index.d.ts (and the lines marked @ts-expect-error must not).
import { init, relaxedSimdSupported, HeadscopeError, Tensor } from 'headscope';
import type {
  AttentionTrace, CaseDocument, ForwardResult, Headscope, MultiheadAttention, SimdBuild, StateDict,
} from 'headscope';

export async function example(doc: CaseDocument): Promise<number> {
  const hs: Headscope = await init();
  const threaded: Headscope = await init({ threads: 2 });
  const threads: number = threaded.threads + hs.threads;
  await init({ wasmBinary: new Uint8Array(8), timeoutMs: 5000 });
  // @ts-expect-error timeoutMs is a number
  await init({ timeoutMs: 'soon' });
  threaded.close();
  const closed: boolean = threaded.closed;
  void closed;
  const isOurs: boolean = HeadscopeError.is(new Error('x'));
  void isOurs;
  // @ts-expect-error threads is a number
  await init({ threads: '2' });
  const build: SimdBuild = (await init({ simd: relaxedSimdSupported() ? 'relaxed' : 'auto' })).simd;
  const simd128: 'relaxed' | 'simd128' = (await init({ simd: 'simd128' })).simd;
  void build;
  void simd128;
  // @ts-expect-error simd is one of 'auto', 'relaxed', 'simd128'
  await init({ simd: 'fma' });
  const remoteBuild: SimdBuild = (await initWorker(undefined, { simd: 'auto', timeoutMs: 1000 })).simd;
  void remoteBuild;
  const mha: MultiheadAttention = hs.createMultiheadAttention({
    embedDim: 4, numHeads: 2, bias: false, addBiasKV: false, addZeroAttn: false,
    kdim: undefined, vdim: null, batchFirst: false,
  });
  const stateDict: StateDict = {
    in_proj_weight: { data: new Float32Array(48), shape: [12, 4] },
    'out_proj.weight': [[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0]],
  };
  mha.loadStateDict(stateDict);
  void threads;
  mha.loadStateDict(new Map([['in_proj_weight', { data: new Float32Array(48), shape: [12, 4] }]]),
    { strict: false });
  const x = [[1, 0, 1, 2], [0, 2, 1, 0], [1, 1, 0, 1]];
  const { output, weights }: ForwardResult = mha.forward(x, x, x, {
    keyPaddingMask: [false, false, true],
    attnMask: { data: new Float32Array(9), shape: [3, 3] },
    needWeights: true, averageAttnWeights: false, isCausal: false,
  });
  const first: number = output.data[0];
  const shape: number[] = output.shape;
  const nested = output.toArray();
  if (weights !== null) weights.toArray();
  const reused = new Float32Array(12);
  const into: Float32Array = mha.forward(x, x, x, { out: reused, needWeights: false }).output.data;
  void into;
  const trace: AttentionTrace = mha.trace(x, x, x, { headGates: [1, 0] });
  mha.forward(x, x, x, { headGates: new Float32Array([0.5, 1]) });
  mha.forward(x, x, x, { headGates: { data: new Float32Array(2), shape: [2] }, needWeights: false });
  // @ts-expect-error gates are numbers
  mha.forward(x, x, x, { headGates: [true, false] });
  const scores: Tensor = trace.scores;
  const headOutputs: Float32Array = trace.headOutputs.data;
  const config = mha.config;
  const heads: number = config.numHeads;
  try {
    hs.runCase(doc);
  } catch (e) {
    if (e instanceof HeadscopeError) {
      const code: 'INVALID_ARGUMENT' | 'SHAPE_MISMATCH' | string = e.code;
      void code;
    }
  }
  const check = hs.checkCase(doc, hs.runCase(JSON.stringify(doc)), { tolerance: 1e-4 });
  mha.dispose();
  // @ts-expect-error numHeads is required
  hs.createMultiheadAttention({ embedDim: 4 });
  // @ts-expect-error masks are booleans or numbers, not strings
  mha.forward(x, x, x, { attnMask: [['yes']] });
  // @ts-expect-error trace() has no `out`
  mha.trace(x, x, x, { out: reused });
  // @ts-expect-error weights may be null
  weights.data;
  return first + shape.length + (Array.isArray(nested) ? 1 : 0) + scores.shape.length +
    headOutputs.length + heads + (check.ok ? 1 : 0) + hs.liveHandles() + hs.memory().wasmBytes;
}

import { seedWorkedExample, seedProjections } from 'headscope/examples';
export function exampleTypes(): number {
  const wq: number[][] = seedProjections().heads[0].wq;
  return seedWorkedExample.config.embed_dim + wq.length;
}

import { initWorker } from 'headscope';
import type { RemoteHeadscope } from 'headscope';
export async function workerTypes(): Promise<number> {
  const remote: RemoteHeadscope = await initWorker();
  const mha = await remote.createMultiheadAttention({ embedDim: 4, numHeads: 1 });
  const x = [[1, 2, 3, 4]];
  const { output } = await mha.forward(x, x, x, { needWeights: false });
  await mha.dispose();
  await remote.terminate();
  return output.data.length;
}

import type { TransformerCaseDocument, TransformerCaseResult, TransformerCaseCheck } from 'headscope';
export async function transformerCaseTypes(doc: TransformerCaseDocument, text: string): Promise<number> {
  const hs = await init();
  const result: TransformerCaseResult = hs.runCase(doc);
  const check: TransformerCaseCheck = hs.checkCase(doc, result, { tolerance: 1e-4 });
  const worst: number = check.tensors[0].maxRelativeError + (check.loss?.error ?? 0);
  const either = hs.runCase(text);
  const ok: boolean = hs.checkCase(text, either).ok;
  const pattern = result.hooks?.['blocks.0.attn.hook_pattern']?.data;
  // @ts-expect-error a transformer case has no output
  hs.runCase(doc).output;
  // @ts-expect-error a transformer case's tokens, not a query
  hs.runCase({ kind: 'transformer', config: { vocab_size: 4, max_len: 4, d_model: 4 }, state_dict: {}, inputs: { query: [] } });
  return worst + (ok ? 1 : 0) + (pattern?.length ?? 0) + (result.loss ?? 0) + result.logits.shape.length;
}

import type { Transformer } from 'headscope';
export async function transformerTypes(): Promise<number> {
  const hs = await init();
  const model: Transformer = hs.createTransformer({ vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, seed: 1 });
  const { logits, hooks } = model.forward([[1, 2, 3]], { hooks: ['blocks.0.attn.hook_pattern'], headGates: [[1, 0], [1, 1]] });
  const pattern = hooks?.['blocks.0.attn.hook_pattern'];
  model.loadStateDict(model.stateDict());
  const generated = model.generate([1, 2, 3], { maxNewTokens: 8, temperature: 0.7, topK: 5, topP: 0.9, seed: 2, logits: true });
  const ids: Int32Array = generated.tokens.data;
  const stepLogits: Float32Array | undefined = generated.logits?.data;
  // @ts-expect-error the prompt is token ids, not text
  model.generate('hello');
  // @ts-expect-error maxNewTokens is a number
  model.generate([1], { maxNewTokens: '8' });
  // @ts-expect-error the calling thread's generate is synchronous: no signal (the worker's takes one)
  model.generate([1], { signal: new AbortController().signal });
  model.dispose();
  return logits.shape[2] + (pattern?.shape.length ?? 0) + model.hookNames().length + ids.length + (stepLogits?.length ?? 0);
}

export async function trainingTypes(): Promise<number> {
  const hs = await init();
  const model: Transformer = hs.createTransformer({ vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, seed: 1 });
  const { loss, grads } = model.backward([[1, 2, 3]], [[2, 3, -100]], { headGateGrads: true });
  const w: Float32Array = grads['unembed.weight'].data;
  model.setOptimizer({ type: 'adamw', lr: 1e-2, betas: [0.9, 0.98], eps: 1e-8, weightDecay: 0.01, clipGradNorm: 1 });
  model.setOptimizer({ type: 'sgd', lr: 0.1 });
  // @ts-expect-error SGD has no betas
  model.setOptimizer({ type: 'sgd', lr: 0.1, betas: [0.9, 0.99] });
  // @ts-expect-error the type is required
  model.setOptimizer({ lr: 0.1 });
  const r = model.trainStep({ data: new Int32Array([1, 2]), shape: [1, 2] }, [[2, -100]]);
  const refused: string | undefined = r.stepped ? undefined : r.refused;
  model.dispose();
  return loss + w.length + r.gradNorm + (refused?.length ?? 0) + model.optimizerSteps;
}
