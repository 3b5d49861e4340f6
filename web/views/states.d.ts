// Types of the views' public states and of the names their options take (web/views/*/state.js),
// written by hand; web/views/index.d.ts exports them with the components.

export type HeadCount = 1 | 2 | 4 | 8 | 16;
export type PresetName = 'previous-token' | 'first-token' | 'keyword' | 'numbers' | 'same-token' | 'random' | 'blend';

/** The Heads view's state (heads/state.js). Heads and token positions are 1-based. */
export interface HeadsState {
  text: string;
  heads: HeadCount;
  weights: 'presets' | 'random';
  presets: PresetName[];
  seed: number;
  sharpness: number;
  causal: boolean;
  padded: number[];
  off: number[];
  show: number[] | null;
  view: 'heads' | 'average';
  /** The attention variant (heads/variant-state.js); the defaults are none. K/V heads, a divisor of heads (= heads: multi-head attention; 1: multi-query). */
  kvHeads: number;
  /** forward's alibi option: head h subtracts slope_h |i - j| from its scores. */
  alibi: boolean;
  /** forward's window option, 0 (off) to 4096 keys; with causal, query i sees keys i - w < j <= i, without, |i - j| < w. */
  window: number;
  /** RoPE: the rotated dims of each head, even, 0 (off) to the head dim 64 / heads. */
  ropeDims: number;
  /** 'half' unless ropeDims > 0. */
  ropeLayout: 'half' | 'interleaved';
  /** > 0; 10000 unless ropeDims > 0. */
  ropeBase: number;
}

/** The Walkthrough's state (walkthrough/state.js), in the seed's x·W notation. */
export interface WalkthroughState {
  L: number;
  E: number;
  H: number;
  x: number[][];
  wq: number[][];
  wk: number[][];
  wv: number[][];
  wo: number[][];
  bias: null | { q: number[]; k: number[]; v: number[]; o: number[] };
  causal: boolean;
  /** Read-only: where the numbers came from. */
  readonly source: string;
  /** Read-only: whether a loaded case's own masks apply. */
  readonly masked: boolean;
}

export type WalkthroughPatch = Partial<Omit<WalkthroughState, 'source' | 'masked'>> & {
  preset?: 'seed' | 'learned' | 'random' | 'identity';
  /** With preset 'random'. */
  seed?: number;
  source?: string;
  masked?: boolean;
};

export type ChangeCause = 'input' | 'setState' | 'case' | 'reset';

/** The Train view's state (train/state.js). */
export interface TrainState {
  task: 'copy' | 'reverse' | 'sort' | 'previous-token' | 'induction' | 'kv-lookup' | 'brackets' | 'log-line';
  layers: number;
  heads: number;
  /** K/V heads, a divisor of heads (= heads: multi-head attention; 1: multi-query). */
  kvHeads: number;
  dModel: 16 | 32 | 64 | 128;
  mlp: boolean;
  norm: 'pre' | 'post' | 'none';
  positions: 'learned' | 'sinusoidal' | 'none' | 'alibi' | 'rope';
  /** RoPE's pairs of dims: i with i + r/2 ('half') or 2i with 2i + 1 ('interleaved'); 'half' unless positions is 'rope'. */
  ropeLayout: 'half' | 'interleaved';
  /** RoPE's base (> 0; 10000 unless positions is 'rope'). */
  ropeBase: number;
  /** The rotated fraction of each head's dims, in (0, 1] (1 unless positions is 'rope'). */
  ropeFraction: number;
  /** Sliding-window attention, 0 (full attention) to 256. */
  attnWindow: number;
  /** Attention sinks (gpt-oss): a learned sink logit per head, so a head can attend to nothing (false: none). */
  attnSinks: boolean;
  lr: number;
  weightDecay: number;
  batch: number;
  clip: number;
  seed: number;
  steps: number;
  /** Heads switched off in the ablation box, [layer (0-based), head (1-based)], sorted; a new setup empties it. */
  off: [number, number][];
  /** The loss curves' log scale. */
  log: boolean;
  /** The keyword detector's tokens (words of the task's vocabulary, space-separated); '' none. */
  keywords: string;
  /** The custom detector's formula over i, j, ti, tj, T (headscope/detectors compileFormula); '' none. */
  pattern: string;
}

export type HeadsControl = 'text' | 'weights' | 'heads' | 'seed' | 'sharpness' | 'causal' | 'view' | 'batch' |
  'padding' | 'presets' | 'switches' | 'export' | 'explain' | 'variants';
export type HeadsPart = 'grid' | 'lines' | 'ablation';
export type WalkthroughStage = 'input' | 'projections' | 'qkv' | 'scores' | 'weights' | 'heads' | 'output';
export type WalkthroughControl = 'presets' | 'sizes' | 'legend' | 'explain' | 'export';
export type TrainControl = 'task' | 'model' | 'optimizer' | 'buttons' | 'history' | 'variants' | 'detectors' | 'ablation' | 'inside' | 'whatif';
export type ExperimentName = 'log-line' | 'induction' | 'kv-heads' | 'positions' | 'sinks';
export type ExportFormat = 'svg' | 'png' | 'json' | 'csv';
