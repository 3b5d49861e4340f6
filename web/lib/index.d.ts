// Types of the headscope npm package (written by hand; checked by `tsc` against
// tests/js/typed-usage.ts). Names follow torch.nn.MultiheadAttention, in camelCase.

/** Nested arrays of numbers: (L, E) unbatched, (L, N, E) or, batchFirst, (N, L, E) batched. */
export type NestedNumbers = number | readonly NestedNumbers[];
export type NestedBooleans = boolean | readonly NestedBooleans[];

/** A float tensor: nested arrays, or a Float32Array with its shape (row-major). */
export type TensorInput = readonly NestedNumbers[] | { data: Float32Array; shape: readonly number[] };

/**
 * A mask: booleans (true = that position is blocked, PyTorch's MultiheadAttention convention) or
 * numbers (added to the scores). Typed: Uint8Array (nonzero = blocked) or Float32Array.
 */
export type MaskInput =
  | readonly NestedBooleans[]
  | readonly NestedNumbers[]
  | { data: Uint8Array | Float32Array; shape: readonly number[] };

/** A result tensor: data in row-major order, PyTorch's shape. */
export declare class Tensor {
  constructor(data: Float32Array, shape: number[]);
  readonly data: Float32Array;
  readonly shape: number[];
  /** Nested arrays in the tensor's shape. */
  toArray(): NestedNumbers;
}

export type HeadscopeErrorCode =
  | 'INVALID_ARGUMENT'
  | 'SHAPE_MISMATCH'
  | 'MISSING_PARAMETER'
  | 'UNKNOWN_PARAMETER'
  | 'RESOURCE_EXHAUSTED'
  | 'PARSE_ERROR'
  | 'IO_ERROR'
  | 'CANCELLED'
  | 'DISPOSED'
  | 'LOAD_ERROR'
  | 'INTERNAL';

/** Every error headscope throws. The message names the argument, what was received and expected. */
export declare class HeadscopeError extends Error {
  constructor(code: HeadscopeErrorCode, message: string, options?: { cause?: unknown });
  readonly name: 'HeadscopeError';
  readonly code: HeadscopeErrorCode;
  /** True only for errors headscope created (a brand no look-alike object or Proxy can forge). */
  static is(value: unknown): value is HeadscopeError;
}

/** torch.nn.MultiheadAttention's constructor arguments (dropout is not supported: inference). */
export interface MultiheadAttentionConfig {
  embedDim: number;
  numHeads: number;
  /**
   * Key/value heads G (grouped-query attention; 1: multi-query), dividing numHeads; default
   * numHeads. Head h reads K/V head h / (numHeads / G): the K and V projections have G * headDim
   * rows (in_proj_weight (E + 2 G headDim, E), or k/v_proj_weight (G headDim, kdim / vdim);
   * in_proj_bias (E + 2 G headDim); bias_k / bias_v (1, 1, G headDim)), trace()'s k and v have
   * G heads. Not a torch.nn.MultiheadAttention argument.
   */
  numKvHeads?: number | null;
  /** Default true. */
  bias?: boolean;
  /** Default false. */
  addBiasKV?: boolean;
  /** Default false. */
  addZeroAttn?: boolean;
  /** Key feature size; default embedDim. */
  kdim?: number | null;
  /** Value feature size; default embedDim. */
  vdim?: number | null;
  /** Default false: inputs are (L, N, E); true: (N, L, E). */
  batchFirst?: boolean;
  /**
   * = 0 (no rotation). Rotary position embeddings (headscope's, not a torch argument): the first
   * ropeDims dims (even, at most the head dim) of every head of q and k turn by position after
   * the projections: query i at position i, key j at j (the extra keys of addBiasKV / addZeroAttn
   * do not turn); trace() then has rotQ / rotK.
   */
  ropeDims?: number;
  /** = 'half' (ropeDims > 0 only): pairs (i, i + r/2) (GPT-NeoX, LLaMA) or (2i, 2i + 1) ('interleaved'). */
  ropeLayout?: 'half' | 'interleaved';
  /** = 10000 (ropeDims > 0 only): pair i of r turns by pos / ropeBase^(2i / r). */
  ropeBase?: number;
  /**
   * = false. Attention sinks (gpt-oss; not a torch argument): the parameter 'sinks' (numHeads),
   * loaded as every other, is a logit per head that joins each softmax row's denominator without
   * a value: the weights of a row sum to less than 1.
   */
  attnSinks?: boolean;
}

export type NormalizedConfig = Required<{ [K in keyof MultiheadAttentionConfig]: NonNullable<MultiheadAttentionConfig[K]> }>;

/** trace()'s keyword arguments: forward()'s except `out`. */
export interface TraceOptions {
  /** (N, S), or (S) unbatched. */
  keyPaddingMask?: MaskInput | null;
  /** (L, S), (N * numHeads, L, S), or (numHeads, L, S) unbatched. */
  attnMask?: MaskInput | null;
  /** Default true. */
  needWeights?: boolean;
  /** Default true: weights averaged over heads (N, L, S); false: per head (N, H, L, S). */
  averageAttnWeights?: boolean;
  /** Default false. With attnMask given, it must be the causal mask. */
  isCausal?: boolean;
  /**
   * (numHeads): one gate per head, the same for every batch item (default: all 1, no change).
   * Head h's output (weights x V, its columns of the concatenation) is multiplied by gate h before
   * out_proj: 0 switches the head off (as zeroing its columns of out_proj.weight would), 0.5
   * halves it. The attention weights are not gated. NaN/Infinity propagate as in `concat * gates`
   * (a gate of 0 times a NaN head output is NaN).
   */
  headGates?: readonly number[] | Float32Array | { data: Float32Array; shape: readonly number[] } | null;
  /**
   * Default false. true: the result also has `headStats`, per batch item and head, computed in
   * the pass from every softmax row (needWeights may stay false).
   */
  headStats?: boolean;
  /**
   * Default false. Not a PyTorch argument: ALiBi (Press et al.): head h's score (i, j) gets
   * -(slope_h |i - j|) added after the masks, slope_h = 2^(-8 (h + 1) / numHeads) for a power of
   * two numHeads (get_slopes' rule otherwise). The extra keys of addBiasKV / addZeroAttn get no bias.
   */
  alibi?: boolean;
  /**
   * Default 0 (no window). Not a PyTorch argument: a sliding window of w keys, an integer in
   * [1, 2^24]: with isCausal query i sees the keys i - w < j <= i, without it |i - j| < w. The
   * extra keys of addBiasKV / addZeroAttn stay visible. Keys outside it are skipped (the cost
   * grows with w, not S); they show as -Infinity in trace()'s scores and 0 in the weights.
   */
  window?: number;
}

/**
 * Per-head statistics of one call (options.headStats), each ([N,] H): for batch item n and head h
 * the mean over its query rows i of a statistic of the row's weights w_i. Fully masked rows (all
 * weights 0) are left out; a head with no row left (or L = 0) gets NaN, as does a head with a NaN row.
 */
export interface HeadStats {
  /** -sum_j w_ij ln w_ij over all keys, in nats: 0 for one key, ln S for uniform attention. */
  entropy: Tensor;
  /** sum_j w_ij |i - j| over the keys with a position (the extra keys of addBiasKV / addZeroAttn add none). */
  distance: Tensor;
  /** max_j w_ij, the head's confidence: 1 for one key, 1/S for uniform attention. */
  maxWeight: Tensor;
}

/** forward()'s keyword arguments. */
export interface ForwardOptions extends TraceOptions {
  /**
   * Writes the output into this array (the query's element count) and returns it as
   * `output.data`, instead of allocating a new one: for hot loops on tutorial-sized shapes, where
   * allocating the result is a fifth of the call. Not available through initWorker().
   */
  out?: Float32Array | null;
}

export interface ForwardResult {
  /** The query's layout: (L, E), (L, N, E) or (N, L, E). */
  output: Tensor;
  /** null when needWeights is false. S counts the extra keys of addBiasKV / addZeroAttn. */
  weights: Tensor | null;
  /** Only when options.headStats was true. */
  headStats?: HeadStats;
}

/** Every intermediate of one forward pass. A leading N axis only for batched input. */
export interface AttentionTrace {
  /** ([N,] H, L, headDim): query projection, split into heads. */
  q: Tensor;
  /** ([N,] G, S, headDim): the key projection's G = numKvHeads heads (H unless grouped-query). */
  k: Tensor;
  /** ([N,] G, S, headDim). */
  v: Tensor;
  /** ([N,] H, L, S): QK^T / sqrt(headDim) + masks; -Infinity where blocked. */
  scores: Tensor;
  /** ([N,] H, L, S): softmax(scores); all-zero rows where every key is masked. */
  weights: Tensor;
  /** ([N,] H, L, headDim): weights x V, times the head's gate when headGates was given. */
  headOutputs: Tensor;
  /** ([N,] L, E): the heads side by side (gated: what out_proj sees). */
  concat: Tensor;
  /** The query's layout: concat x W_O^T + b_O. */
  output: Tensor;
  /** ([N,] H, L, headDim): q turned by position (config.ropeDims > 0 only): what the scores use. */
  rotQ?: Tensor;
  /** ([N,] G, S, headDim): k turned by position (config.ropeDims > 0 only; extra keys unturned). */
  rotK?: Tensor;
  /** Only when options.headStats was true. */
  headStats?: HeadStats;
}

export type StateDict =
  | { readonly [key: string]: TensorInput }
  | ReadonlyMap<string, TensorInput>;

export interface MultiheadAttention {
  readonly config: Readonly<NormalizedConfig>;
  readonly disposed: boolean;
  /** state_dict keys of this config with their shapes, in PyTorch's order. */
  parameterShapes(): Record<string, number[]>;
  /**
   * Loads weights by PyTorch's state_dict names (in_proj_weight, in_proj_bias, q_proj_weight,
   * k_proj_weight, v_proj_weight, out_proj.weight, out_proj.bias, bias_k, bias_v). Checks every
   * entry before loading any. strict (default true): every key of the config must be present.
   */
  loadStateDict(stateDict: StateDict, options?: { strict?: boolean }): void;
  forward(query: TensorInput, key: TensorInput, value: TensorInput, options?: ForwardOptions): ForwardResult;
  trace(query: TensorInput, key: TensorInput, value: TensorInput, options?: TraceOptions): AttentionTrace;
  /** Frees the WebAssembly memory; later use throws HeadscopeError with code 'DISPOSED'. */
  dispose(): void;
}

/** A case document of the headscope case format (PyTorch state_dict + forward arguments). */
export interface CaseDocument {
  /** Absent, null or 'mha': an attention case ("transformer": TransformerCaseDocument). */
  kind?: 'mha' | null;
  name?: string | null;
  config: {
    embed_dim: number;
    num_heads: number;
    bias?: boolean;
    add_bias_kv?: boolean;
    add_zero_attn?: boolean;
    kdim?: number | null;
    vdim?: number | null;
    batch_first?: boolean;
    dropout?: number | null;
    num_kv_heads?: number | null;
    rope_dims?: number | null;
    rope_layout?: 'half' | 'interleaved' | null;
    rope_base?: number | null;
  };
  state_dict: { [key: string]: unknown };
  inputs: {
    query: unknown;
    key?: unknown;
    value?: unknown;
    key_padding_mask?: unknown;
    attn_mask?: unknown;
    need_weights?: boolean | null;
    average_attn_weights?: boolean | null;
    is_causal?: boolean | null;
    /** headscope's options (not torch's): forward()'s alibi and window. */
    alibi?: boolean | null;
    window?: number | null;
  };
  expected?: { output: unknown; weights?: unknown } | null;
}

export interface CaseCheck {
  ok: boolean;
  /** Worst of output and weights: max |got - expected| / max |expected| per tensor. */
  maxRelativeError: number;
  /** Why it failed: which tensor, index and values. Empty when ok. */
  detail: string;
}

/** createTransformer's config (the reference module's, camelCase; defaults after =). */
export interface TransformerConfig {
  vocabSize: number;
  maxLen: number;
  dModel: number;
  /** = 1 */
  nLayers?: number;
  /** = 1; must divide dModel. */
  nHeads?: number;
  /**
   * = nHeads. Key/value heads G (grouped-query attention; 1: multi-query), dividing nHeads: each
   * layer's attention.in_proj_weight is ((nHeads + 2 G) dHead, dModel) (q's rows, then G K heads
   * and G V heads), hook_k / hook_v are (B, G, T, dHead), and generate()'s KV cache is nHeads / G
   * times smaller.
   */
  nKvHeads?: number | null;
  /**
   * = 0: full attention. Sliding-window attention: with causal, token t attends to the w tokens
   * t - w < s <= t; without causal, to |t - s| < w. The kernels skip the keys outside the window
   * (cost grows with w, not T); hook_attn_scores is -Infinity there.
   */
  attnWindow?: number;
  /**
   * = false. true: attention sinks (gpt-oss): each layer L has the parameter
   * blocks.L.attn.sinks (nHeads), a learned logit per head (0 at first) that joins each softmax
   * row's denominator without a value, so hook_pattern's rows sum to less than 1 (a head can
   * attend to nothing). backward() gives its gradient and the optimizer steps and decays it.
   */
  attnSinks?: boolean;
  /** = 0: attention-only (no MLP, no ln2). */
  dMlp?: number;
  /** = 'pre' */
  norm?: 'pre' | 'post' | 'none';
  /**
   * = 'learned'. 'alibi': no position embedding (no hook_pos_embed); every head h adds ALiBi's
   * -(m_h |i - j|) to its scores (Press et al.'s slopes m_h), shown in hook_attn_scores.
   * 'rope': rotary position embeddings (no position added to the stream, like
   * LLaMA): every layer turns q and k by position (ropeLayout, ropeBase, ropeFraction); the hooks
   * hook_rot_q / hook_rot_k hold them turned, and generate() continues the positions from the KV
   * cache.
   */
  positions?: 'learned' | 'sinusoidal' | 'none' | 'alibi' | 'rope';
  /** = true */
  causal?: boolean;
  /** = 'gelu' (the exact erf form) */
  act?: 'gelu' | 'relu';
  /** = true: Linear and attention biases (LayerNorm keeps its own). */
  bias?: boolean;
  /** = 1e-5 */
  lnEps?: number;
  /**
   * = false. true: unembed.weight is tok_embed.weight, one tensor (as GPT-2's): logits = x
   * tok_embed.weight^T (+ unembed.bias). stateDict() lists it under both keys (as torch's
   * state_dict()), loadStateDict() refuses the two with different values, backward() gives its
   * one gradient as grads['tok_embed.weight'] and the optimizer steps it once.
   */
  tieEmbeddings?: boolean;
  /**
   * = 'half' (positions 'rope' only: another value with other positions is refused). How a head's
   * r rotary dims pair up: 'half' pairs dim i with i + r/2 (GPT-NeoX, LLaMA's rotate_half),
   * 'interleaved' 2i with 2i + 1 (RoFormer, GPT-J).
   */
  ropeLayout?: 'half' | 'interleaved';
  /** = 10000 (positions 'rope' only). Pair i of r turns by the angle pos / ropeBase^(2i / r). */
  ropeBase?: number;
  /**
   * = 1, in (0, 1] (positions 'rope' only). The rotary dims r of each head are the largest even
   * number <= ropeFraction * dHead (at least 2); the other dims pass through (GPT-NeoX's
   * rotary_pct).
   */
  ropeFraction?: number;
  /**
   * = 0: deterministic initial weights (PyTorch's default initialisation) from this seed. null: no
   * weights at all (nothing allocated for them) until loadStateDict; every other call refuses with
   * MISSING_PARAMETER until then.
   */
  seed?: number | null;
}

/** Token ids: (T) or (B, T), nested arrays of integers or { data: Int32Array, shape }. */
export type TokensInput = readonly number[] | readonly (readonly number[])[] | { data: Int32Array; shape: readonly number[] };

export interface TransformerForwardOptions {
  /** Hook names (hookNames()) to return; none by default (and then no layer keeps its trace). */
  hooks?: readonly string[] | null;
  /** (nLayers, nHeads): head h of layer l's output times gate [l][h] before its out_proj. */
  headGates?: readonly (readonly number[])[] | { data: Float32Array; shape: readonly number[] } | null;
}

export interface GenerateOptions {
  /** New tokens per sequence, 0 .. maxLen - T; default 1. */
  maxNewTokens?: number;
  /**
   * 0 (default): greedy, the first largest logit; > 0: sample from softmax(logits / temperature).
   * The temperature rule: a temperature so small that the logits divided by it overflow a double
   * (1e-320, 5e-324; the smallest normal double for logits beyond about 4) is greedy too, the
   * limit of sampling as the temperature goes to 0.
   */
  temperature?: number;
  /** Sample among the topK largest logits only; 0 (default): all. */
  topK?: number;
  /** Then among the smallest set of them whose probability reaches topP, in (0, 1]; 1 (default): all. */
  topP?: number;
  /** An integer in [0, 2^53 - 1] fixing the draws (default 0): the same seed, the same tokens. */
  seed?: number;
  /** (nLayers, nHeads), as forward's. */
  headGates?: TransformerForwardOptions['headGates'];
  /** Also return the logits each new token was chosen from. */
  logits?: boolean;
}

/** RemoteTransformer.generate's options: generate's, and a signal that cancels it. */
export interface RemoteGenerateOptions extends GenerateOptions {
  signal?: AbortSignal | null;
}

export interface BackwardOptions {
  /** (nLayers, nHeads) gates the forward pass runs with, as forward's. */
  headGates?: TransformerForwardOptions['headGates'];
  /** Also return grads.headGates: d loss / d gate [l][h] (at gates of 1 when none are given). */
  headGateGrads?: boolean;
}

export interface BackwardResult {
  /** Mean cross-entropy over the targets that are not -100 (the loss of forward's logits). */
  loss: number;
  /**
   * d loss / d weight for every stateDict() key but a tied unembed.weight (tieEmbeddings: its
   * tensor's gradient is tok_embed.weight's); headGates with options.headGateGrads.
   */
  grads: Record<string, Tensor> & { headGates?: number[][] };
}

/** setOptimizer's options: torch.optim.AdamW (the defaults below) or SGD (momentum 0). */
export type OptimizerOptions =
  | { type: 'adamw'; lr?: number; betas?: readonly [number, number]; eps?: number; weightDecay?: number; clipGradNorm?: number }
  | { type: 'sgd'; lr?: number; clipGradNorm?: number };

export interface TrainStepResult {
  /** The batch's loss before the update. */
  loss: number;
  /** The global L2 norm of the gradients before clipping. */
  gradNorm: number;
  /** Whether clipGradNorm scaled the gradients. */
  clipped: boolean;
  /** False when the optimizer refused a step that would make a weight non-finite (nothing changed). */
  stepped: boolean;
  /** Why the step was refused (only when stepped is false). */
  refused?: string;
}

/** Targets: the tokens' shape, integers in [0, vocabSize) or -100 (not counted). */
export type TargetsInput = TokensInput;

/** The experiments' options.headGates, as forward's. */
export interface ExperimentOptions {
  headGates?: TransformerForwardOptions['headGates'];
}

export interface ScoreContributionsOptions extends ExperimentOptions {
  /** The layer, the query head and the query position (integers from 0). */
  layer: number;
  head: number;
  position: number;
  /** The batch row for (B, T) tokens; default 0. */
  batch?: number;
}

/** One score split into its terms: for every key j of the query. */
export interface ScoreContributions {
  /** (T, dHead): q_d k_d / sqrt(dHead), with q and k as the scores use them (rotated under RoPE). */
  terms: Tensor;
  /** (T): the sum of each key's terms. */
  dot: Tensor;
  /** (T): what the kernels add to the product: ALiBi's -slope |i - j|, -Infinity where masked, else 0. */
  bias: Tensor;
  /** (T): the model's own score (attn.hook_attn_scores): dot + bias up to float rounding. */
  score: Tensor;
}

export interface ActivationPatchingOptions extends ExperimentOptions {
  /** 'heads' (default): a grid (nLayers, nHeads) patching attn.hook_z; 'positions': (nLayers, T) patching hook_resid_pre. */
  site?: 'heads' | 'positions';
}

/** A run's metrics: the mean cross-entropy, and the mean logit of the target tokens. */
export interface PatchingMetrics {
  loss: number;
  logit: number;
}

export interface ActivationPatchingResult {
  site: 'heads' | 'positions';
  /** The grid of the patched runs' losses. */
  loss: Tensor;
  /** The grid of the patched runs' mean target logits. */
  logit: Tensor;
  clean: PatchingMetrics;
  corrupted: PatchingMetrics;
}

/** A tensor of int32 token ids. */
export interface TokenTensor {
  data: Int32Array;
  shape: number[];
  toArray(): any;
}

export interface Transformer {
  readonly config: Readonly<Required<TransformerConfig>>;
  readonly disposed: boolean;
  parameterShapes(): Record<string, number[]>;
  hookNames(): string[];
  loadStateDict(stateDict: StateDict, options?: { strict?: boolean }): void;
  /** Every weight, by the reference module's state_dict keys, as copies. */
  stateDict(): Record<string, Tensor>;
  /** logits (B, T, vocabSize), or (T, vocabSize) for (T) tokens; hooks only when asked for. */
  forward(tokens: TokensInput, options?: TransformerForwardOptions): { logits: Tensor; hooks?: Record<string, Tensor> };
  /**
   * The prompt (T) or (B, T) then maxNewTokens new tokens: (T + n) or (B, T + n); with
   * options.logits also the logits they were chosen from, (n, V) or (B, n, V). A causal model
   * keeps a KV cache; greedy steps are the argmax of a full recomputation, bit for bit.
   * Synchronous, so it cannot be cancelled and takes no signal: RemoteTransformer.generate
   * (initWorker()) runs in chunks and takes options.signal.
   */
  generate(prompt: TokensInput, options?: GenerateOptions): { tokens: TokenTensor; logits?: Tensor };
  /** Gradients of the loss on (tokens, targets) without changing any weight. */
  backward(tokens: TokensInput, targets: TargetsInput, options?: BackwardOptions): BackwardResult;
  /** A new optimizer (empty state) for every weight; AdamW's defaults: lr 1e-3, betas [0.9, 0.999], eps 1e-8, weightDecay 0.01; clipGradNorm 0 (none). */
  setOptimizer(options: OptimizerOptions): void;
  /** backward, then one optimizer step. */
  trainStep(tokens: TokensInput, targets: TargetsInput): TrainStepResult;
  /** Throws what backward / trainStep would for this batch (shapes, ids, targets); computes nothing. */
  checkBatch(tokens: TokensInput, targets: TargetsInput): void;
  /** Steps the current optimizer has taken. */
  readonly optimizerSteps: number;
  /** The options setOptimizer last set, defaults filled in, or null before it. */
  readonly optimizer: Readonly<Required<OptimizerOptions>> | null;
  /**
   * Bytes the KV caches of the generation in progress (or the last one) hold: Headscope's
   * kvCacheBytes of this config for its batch and prompt + new positions; 0 before any
   * generate(), for a non-causal model and after a cancelled generation.
   */
  kvCacheBytes(): number;
  /** The logit lens: logits (nLayers + 1, B, T, V) (or (nLayers + 1, T, V)); stage 0 the embeddings, the last forward()'s logits. */
  logitLens(tokens: TokensInput, options?: ExperimentOptions): { logits: Tensor };
  /** Attention rollout (Abnar and Zuidema 2020): (nLayers, B, T, T) (or (nLayers, T, T)). */
  attentionRollout(tokens: TokensInput, options?: ExperimentOptions): { rollout: Tensor };
  /** One score split into its per-dimension terms, for every key of the query. */
  scoreContributions(tokens: TokensInput, options: ScoreContributionsOptions): ScoreContributions;
  /** Activation patching: the clean run's activation of each cell patched into the corrupted run. */
  activationPatching(clean: TokensInput, corrupted: TokensInput, targets: TargetsInput,
    options?: ActivationPatchingOptions): ActivationPatchingResult;
  dispose(): void;
}

/** A "kind": "transformer" case document (docs/case-format.md): one forward pass of the model. */
export interface TransformerCaseDocument {
  kind: 'transformer';
  name?: string | null;
  /** TinyTransformer's keyword arguments, snake_case (createTransformer's config in camelCase). */
  config: {
    vocab_size: number;
    max_len: number;
    d_model: number;
    n_layers?: number | null;
    n_heads?: number | null;
    d_mlp?: number | null;
    norm?: 'pre' | 'post' | 'none' | null;
    positions?: 'learned' | 'sinusoidal' | 'none' | 'alibi' | 'rope' | null;
    causal?: boolean | null;
    act?: 'gelu' | 'relu' | null;
    bias?: boolean | null;
    ln_eps?: number | null;
    tie_embeddings?: boolean | null;
    n_kv_heads?: number | null;
    rope_layout?: 'half' | 'interleaved' | null;
    rope_base?: number | null;
    rope_fraction?: number | null;
  };
  state_dict: { [key: string]: unknown };
  inputs: {
    /** (T) or (B, T) integers in [0, vocab_size), 1 <= T <= max_len. */
    tokens: unknown;
    /** The shape of tokens: token ids, or -100 (not counted in the loss). */
    targets?: unknown;
    /** (n_layers, n_heads) floats. */
    head_gates?: unknown;
  };
  expected?: { logits: unknown; loss?: number | null; hooks?: { [hook: string]: unknown } | null } | null;
}

/** runCase's result for a transformer case. */
export interface TransformerCaseResult {
  logits: Tensor;
  /** The hooks the case's expected section names, in its order. */
  hooks?: Record<string, Tensor>;
  /** With inputs.targets: the mean cross-entropy over the counted positions (float64). */
  loss?: number;
}

export interface TransformerCaseCheck extends CaseCheck {
  /** logits, then "hooks.<name>" for each expected hook: each one's own check. */
  tensors: { name: string; ok: boolean; maxRelativeError: number; detail: string }[];
  /** error = |got - expected| / max(1, |expected|); null when the case expects no loss. */
  loss: { got: number | null; expected: number; error: number; ok: boolean } | null;
}

/** A WebAssembly build of headscope (init()'s options.simd, hs.simd). */
export type SimdBuild = 'relaxed' | 'simd128';

export interface Headscope {
  /** The SIMD target the kernels run on: 'WASM'. */
  readonly kernelTarget: string;
  /**
   * Which WebAssembly build runs: 'relaxed' (the relaxed-SIMD module: the matmuls'
   * multiply-adds are f32x4.relaxed_madd, one FMA where the CPU has one) or 'simd128'. Results
   * are bit-identical within one build (any engine, any thread count), not across the two.
   */
  readonly simd: SimdBuild;
  /** Threads each call may use: 1 for init(), n for init({ threads: n }). */
  readonly threads: number;
  createMultiheadAttention(config: MultiheadAttentionConfig): MultiheadAttention;
  /** A small transformer of tools/tiny_transformer.py's kind, with weights from config.seed. */
  createTransformer(config: TransformerConfig): Transformer;
  /**
   * Runs one case document (an object, JSON text, or its UTF-8 bytes; at most 256 MiB): an
   * attention case's { output, weights }, a "transformer" case's { logits, hooks?, loss? }.
   */
  runCase(caseDocument: TransformerCaseDocument): TransformerCaseResult;
  runCase(caseDocument: CaseDocument): ForwardResult;
  runCase(caseDocument: string | Uint8Array | ArrayBuffer): ForwardResult | TransformerCaseResult;
  /**
   * Compares a result with the case's expected values (default tolerance 1e-4); a transformer
   * case's check also reports each tensor and the loss.
   */
  checkCase(caseDocument: TransformerCaseDocument, result: TransformerCaseResult, options?: { tolerance?: number }): TransformerCaseCheck;
  checkCase(caseDocument: CaseDocument | TransformerCaseDocument | string | Uint8Array | ArrayBuffer, result: ForwardResult | TransformerCaseResult, options?: { tolerance?: number }): CaseCheck | TransformerCaseCheck;
  /**
   * Bytes a generation's KV caches hold for a transformer config (no model is made): batch
   * (default 1) sequences of positions (default config.maxLen) positions, per layer K and V of
   * nKvHeads x head dim floats each; 0 for a non-causal config.
   */
  kvCacheBytes(config: TransformerConfig, options?: { batch?: number; positions?: number }): number;
  /** ALiBi's slopes for nHeads heads (float32 values), as every layer of a positions: 'alibi' transformer uses them. */
  alibiSlopes(nHeads: number): number[];
  /** Objects created and not yet disposed. */
  liveHandles(): number;
  /** wasmBytes: WebAssembly memory size; heapInUse: bytes handed out by malloc. */
  memory(): { wasmBytes: number; heapInUse: number };
  /**
   * Calls needing more memory than this are refused with RESOURCE_EXHAUSTED (default 2 GiB; at
   * most 2 ** 32 - 1, the 32-bit address space; larger values throw INVALID_ARGUMENT).
   */
  maxCallBytes: number;
  /**
   * Releases the engine: disposes every object it created, ends a threaded module's threads and
   * forgets the module (the next init() loads a new one). Later use throws DISPOSED. Idempotent.
   */
  close(): void;
  /** True once close() was called. */
  readonly closed: boolean;
}

export interface InitOptions {
  /**
   * The .wasm bytes, if the caller has them (skips locating and reading the file): those of
   * headscope_core.wasm, of headscope_core_relaxed.wasm with simd: 'relaxed', or of
   * mt/headscope_core_mt.wasm when threads >= 2.
   */
  wasmBinary?: ArrayBuffer | ArrayBufferView;
  /** Where the .wasm is (default: next to index.js; mt/headscope_core_mt.wasm when threads >= 2). */
  wasmUrl?: string | URL;
  /**
   * Threads per call, 1 to 64 (default 1: the single-threaded module). 2 or more loads the
   * multi-threaded module (pthreads in Web Workers / Node worker_threads), whose results are
   * bit-identical to the single-threaded module's. Needs SharedArrayBuffer: in browsers a
   * cross-origin isolated page (headers Cross-Origin-Opener-Policy: same-origin and
   * Cross-Origin-Embedder-Policy: require-corp); otherwise init rejects with LOAD_ERROR.
   */
  threads?: number;
  /**
   * Which single-threaded build loads: 'auto' (default) the relaxed-SIMD one where the runtime
   * validates relaxed SIMD (Chromium 114+, Node 22+, Node 20 with
   * --experimental-wasm-relaxed-simd), else the SIMD128 one; 'relaxed' insists (LOAD_ERROR where
   * the runtime lacks it; INVALID_ARGUMENT with threads >= 2, the threaded module being SIMD128);
   * 'simd128' the SIMD128 one everywhere. With wasmBinary or wasmUrl, 'auto' takes the bytes for
   * the SIMD128 module's: pass simd: 'relaxed' with headscope_core_relaxed.wasm's.
   */
  simd?: 'auto' | SimdBuild;
  /**
   * Milliseconds the whole load may take (fetch, compile, the threaded module's workers) before
   * init rejects with LOAD_ERROR, having stopped what it started (default 60000).
   */
  timeoutMs?: number;
}

/** True when this runtime validates WebAssembly relaxed SIMD (what init()'s simd 'auto' checks). */
export declare function relaxedSimdSupported(): boolean;

/**
 * Loads and compiles the WebAssembly module once per thread count, build and source; later calls
 * with the same `threads`, resolved `simd` and `wasmUrl` resolve to the same API (init() and
 * init({ threads: 1 }) are the same). Calls with `wasmBinary` are never shared: each loads its own module. The .wasm is
 * read with a limit of 64 MiB (MAX_WASM_BYTES); in Node only regular files are read.
 */
export declare function init(options?: InitOptions): Promise<Headscope>;

/** Something to post requests to: a browser Worker or a node:worker_threads Worker. */
export type WorkerLike =
  | { postMessage(message: unknown, transfer?: Transferable[]): void; [key: string]: any };

/**
 * Runs headscope in a Web Worker (or a Node worker thread) with the same API shape, every call
 * returning a promise: large cases off the main thread. Default worker: the package's worker.js.
 * Rejections are HeadscopeError with the same code, message and argument as in-thread calls;
 * arguments go over as structured clones (each read once), so a Proxy, a function, a symbol or a
 * detached buffer is refused with INVALID_ARGUMENT naming the argument.
 */
export declare function initWorker(worker?: WorkerLike | string | URL | null,
  options?: { timeoutMs?: number; simd?: 'auto' | SimdBuild }): Promise<RemoteHeadscope>;

/** The largest .wasm init() reads (64 MiB): past it the load stops with LOAD_ERROR. */
export declare const MAX_WASM_BYTES: number;

export interface RemoteHeadscope {
  readonly kernelTarget: string;
  /** The worker's build (init()'s hs.simd in the worker; initWorker's options.simd chooses). */
  readonly simd: SimdBuild;
  readonly worker: WorkerLike;
  createMultiheadAttention(config: MultiheadAttentionConfig): Promise<RemoteMultiheadAttention>;
  createTransformer(config: TransformerConfig): Promise<RemoteTransformer>;
  runCase(caseDocument: TransformerCaseDocument): Promise<TransformerCaseResult>;
  runCase(caseDocument: CaseDocument): Promise<ForwardResult>;
  runCase(caseDocument: string | Uint8Array | ArrayBuffer): Promise<ForwardResult | TransformerCaseResult>;
  checkCase(caseDocument: TransformerCaseDocument, result: TransformerCaseResult, options?: { tolerance?: number }): Promise<TransformerCaseCheck>;
  checkCase(caseDocument: CaseDocument | TransformerCaseDocument | string | Uint8Array | ArrayBuffer, result: ForwardResult | TransformerCaseResult, options?: { tolerance?: number }): Promise<CaseCheck | TransformerCaseCheck>;
  kvCacheBytes(...args: Parameters<Headscope['kvCacheBytes']>): Promise<number>;
  alibiSlopes(nHeads: number): Promise<number[]>;
  liveHandles(): Promise<number>;
  memory(): Promise<{ wasmBytes: number; heapInUse: number }>;
  /** Ends the worker (every object counts as disposed); pending and later calls reject with DISPOSED. */
  terminate(): Promise<void>;
}

export interface RemoteMultiheadAttention {
  readonly config: Readonly<NormalizedConfig>;
  /** True once dispose() was called or the worker is gone. */
  readonly disposed: boolean;
  parameterShapes(): Record<string, number[]>;
  loadStateDict(stateDict: StateDict, options?: { strict?: boolean }): Promise<void>;
  forward(query: TensorInput, key: TensorInput, value: TensorInput, options?: TraceOptions): Promise<ForwardResult>;
  trace(query: TensorInput, key: TensorInput, value: TensorInput, options?: TraceOptions): Promise<AttentionTrace>;
  /** Never rejects. */
  dispose(): Promise<void>;
}

/** A Transformer living in the worker (RemoteHeadscope.createTransformer): Transformer's API, async. */
export interface RemoteTransformer {
  readonly config: Readonly<Required<TransformerConfig>>;
  /** True once dispose() was called or the worker is gone. */
  readonly disposed: boolean;
  parameterShapes(): Record<string, number[]>;
  hookNames(): string[];
  loadStateDict(stateDict: StateDict, options?: { strict?: boolean }): Promise<void>;
  stateDict(): Promise<Record<string, Tensor>>;
  forward(tokens: TokensInput, options?: TransformerForwardOptions): Promise<{ logits: Tensor; hooks?: Record<string, Tensor> }>;
  /**
   * The calling thread's generate, run in chunks of about 30 ms between which the worker serves
   * other requests (one generation per model at a time). options.signal (not sent to the
   * worker) cancels it: the promise rejects at once with HeadscopeError CANCELLED and the worker
   * ends it at its next chunk boundary. A change of the weights between chunks (loadStateDict,
   * trainStep, train) ends it with CANCELLED too.
   */
  generate(prompt: TokensInput, options?: RemoteGenerateOptions): Promise<ReturnType<Transformer['generate']>>;
  backward(...args: Parameters<Transformer['backward']>): Promise<BackwardResult>;
  setOptimizer(options: OptimizerOptions): Promise<void>;
  trainStep(...args: Parameters<Transformer['trainStep']>): Promise<TrainStepResult>;
  checkBatch(...args: Parameters<Transformer['checkBatch']>): Promise<void>;
  kvCacheBytes(): Promise<number>;
  logitLens(...args: Parameters<Transformer['logitLens']>): Promise<ReturnType<Transformer['logitLens']>>;
  attentionRollout(...args: Parameters<Transformer['attentionRollout']>): Promise<ReturnType<Transformer['attentionRollout']>>;
  scoreContributions(...args: Parameters<Transformer['scoreContributions']>): Promise<ScoreContributions>;
  activationPatching(...args: Parameters<Transformer['activationPatching']>): Promise<ActivationPatchingResult>;
  /** Many steps in the worker, in chunks, with progress events; resolves at once to the run. */
  train(spec: TrainSpec, options?: { onProgress?: (event: TrainProgress) => void }): Promise<TrainingRun>;
  /** Never rejects. */
  dispose(): Promise<void>;
}

/** RemoteTransformer.train's spec: a built-in task (with batchSize) or batches, cycled. */
export type TrainSpec = {
  steps: number;
  /** The first batch index (task.batch(batchSize, startIndex + step)); default 0. */
  startIndex?: number;
  /** About how long the worker trains between serving other requests; default 30 ms. */
  chunkMs?: number;
} & (
  | { task: { name: string; [option: string]: unknown }; batchSize: number }
  | { batches: ReadonlyArray<{ tokens: TokensInput; targets: TargetsInput }> }
);

export interface TrainProgress {
  /** Steps done so far. */
  step: number;
  /** This chunk's per-step losses and gradient norms. */
  losses: Float64Array;
  gradNorms: Float64Array;
  elapsedMs: number;
}

export interface TrainingRun {
  readonly step: number;
  readonly status: 'running' | 'paused' | 'done' | 'cancelled' | 'refused' | 'error';
  /** Resolves when the run ends; never rejects. */
  readonly done: Promise<{ status: 'done' | 'cancelled' | 'refused' | 'error'; step: number; refused?: string; loss?: number; gradNorm?: number; error?: HeadscopeError }>;
  pause(): Promise<{ status: string; step: number | null }>;
  resume(): Promise<{ status: string; step: number | null }>;
  cancel(): Promise<{ status: string; step: number | null }>;
}
