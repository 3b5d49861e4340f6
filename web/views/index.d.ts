// Types of 'headscope/views' (web/views/index.js), written by hand; checked by
// tests/js/types.test.js against tests/js/typed-views-usage.ts. The states and the names the
// options take are in states.d.ts (exported here too).
import type { CaseDocument, Headscope, RemoteHeadscope, Tensor, TransformerCaseDocument } from '../lib/index.js';
import type { ExperimentOptions, ExperimentResult } from '../lib/experiments.js';
import type {
  HeadCount, PresetName, HeadsState, WalkthroughState, WalkthroughPatch, ChangeCause, TrainState, HeadsControl,
  HeadsPart, WalkthroughStage, WalkthroughControl, TrainControl, ExperimentName, ExportFormat,
} from './states.js';

export type * from './states.js';

interface CommonOptions<S> {
  engine: Headscope;
  onStatus?: (text: string) => void;
  onChange?: (state: S, cause: ChangeCause) => void;
  compact?: boolean;
  readonly?: boolean;
}

export interface HeadsOptions extends CommonOptions<HeadsState> {
  state?: Partial<HeadsState>;
  hide?: readonly HeadsControl[] | string;
  parts?: readonly HeadsPart[] | string;
}

export interface WalkthroughOptions extends CommonOptions<WalkthroughState> {
  state?: WalkthroughPatch;
  stages?: readonly WalkthroughStage[] | string;
  /** The heads shown (1-based); null: all. */
  heads?: readonly number[] | null;
  hide?: readonly WalkthroughControl[] | string;
  initialCase?: CaseDocument | string;
}

/**
 * Every view is a component: create(root, { engine, state, ...options }) -> { update, getState,
 * destroy } and the view's extras. A view renders into `root` only.
 */
export interface Component<S, P, U = void> {
  /** Applies a patch; throws (the Train view: rejects) a HeadscopeError naming a bad field; then nothing changes. */
  update(patch: P): U;
  /** A copy of the whole state. */
  getState(): S;
  /** Frees the view's engine objects (and Workers of its own) and empties `root`. */
  destroy(): void;
}

export interface View<S, P> extends Component<S, P> {
  /** Shows a case document; the Heads view's promise resolves when it is shown. */
  setCase(caseDocument: CaseDocument | string): boolean | Promise<void>;
  /**
   * The view as a file, once its pending changes are drawn (the walkthrough also 'case': its
   * numbers as a case document); a format it does not export rejects with INVALID_ARGUMENT.
   */
  exportAs(format: ExportFormat | 'case'): Promise<Blob>;
}

/** What the Heads view's setCase may be told besides the case (a case holds numbers only). */
export interface HeadsCaseOptions {
  /** The queries' labels, one per query (default t1..tL); self-attention's keys take them too. */
  tokens?: readonly string[] | null;
  /** What the intro says of the case while it is shown (default: whose heads they are). */
  about?: string | null;
}

/** onOpenHead's second argument: which head, of which model. */
export interface OpenedHead {
  /** 0-based, as the page names layers (L0, L1). */
  layer: number;
  /** 1-based (H1, H2). */
  head: number;
  /** The model's step when the case was made. */
  step: number;
  /** The probe row's tokens as the task writes them: the case's query labels. */
  tokens: string[];
  /** The Train view's state then (a link to the run: the case's weights are in no link). */
  state: TrainState;
}

export interface HeadsView extends View<HeadsState, Partial<HeadsState>> {
  setCase(caseDocument: CaseDocument | string, options?: HeadsCaseOptions): Promise<void>;
  /** Whether it shows a case (setCase) rather than the sentence, which its state describes either way. */
  showsCase(): boolean;
  /** Resolves when everything asked of the view so far is computed and drawn. */
  settled(): Promise<void>;
}

export interface WalkthroughView extends View<WalkthroughState, WalkthroughPatch> {
  /** Whether it could show the case (else the view says why). */
  setCase(caseDocument: CaseDocument | string): boolean;
  /** The heads whose sections are shown (1-based; null: all). */
  showHeads(heads: readonly number[] | string | null): void;
}

export interface TrainOptions {
  /** initWorker()'s API to train in (it stays yours); default: a SIMD128 Worker of the view's own. */
  engine?: RemoteHeadscope;
  /** The setup, and the step to train to once started. */
  state?: Partial<TrainState>;
  onStatus?: (text: string) => void;
  onChange?: (state: TrainState, cause: ChangeCause) => void;
  /** A head card's "Open in the Heads view" button: its layer as an attention case (no button without it). */
  onOpenHead?: ((caseDocument: CaseDocument, where: OpenedHead) => void) | null;
  hide?: readonly TrainControl[] | string;
  compact?: boolean;
}

export interface TrainView extends Component<TrainState, Partial<TrainState>, Promise<void>> {
  /** Resolves when the first model (and the state's steps) is trained and drawn; rejects if it could not start. */
  readonly ready: Promise<void>;
  /** Loads a "kind": "transformer" case (exportModel's document) as the model: training goes on from it. */
  setCase(caseDocument: TransformerCaseDocument | string | Uint8Array): Promise<void>;
  loadModel(caseDocument: TransformerCaseDocument | string | Uint8Array): Promise<void>;
  /** The curves and heads (svg, png), their numbers (json), the curve (csv), the model (case). */
  exportAs(format: ExportFormat | 'case'): Promise<Blob>;
  exportModel(): Promise<TransformerCaseDocument>;
  play(): void;
  pause(): void;
  step(n?: number): Promise<void>;
  reset(): Promise<void>;
  isPlaying(): boolean;
  /** Runs the "Inside the model" section's causal experiments on the probe row at the current step. */
  lookInside(): Promise<void>;
  stateDict(): Promise<Record<string, Tensor>>;
  /** Layer `layer`'s attention on the probe row as an nn.MultiheadAttention case. */
  layerCase(layer: number): Promise<CaseDocument>;
  /** Layer `layer`, head `head` (1-based)'s attention on the probe row: T rows of T. */
  patternOf(layer: number, head: number): Promise<number[][]>;
  /** The view's what-if runner. */
  readonly whatIf: WhatIfView;
  /** The training history: a record per evaluation, each head's first labels, the phase change, the patterns' bytes. */
  history(): {
    records: { step: number; trainLoss: number; heldOutLoss: number; accuracy: number;
      scores: Record<string, number[]>[]; patterns: boolean }[];
    firsts: { layer: number; head: number; detector: string; step: number; before: number | null }[];
    phaseChange: { from: number; to: number; slope: number; lossFrom: number; lossTo: number } | null;
    bytes: number;
  };
  /** Shows a recorded step (one that kept its patterns) in the heads grid and detectors; null: now. */
  showStep(step: number | null): void;
  shownStep(): number | null;
  /** Layer `layer`, head `head` (1-based) as the grid shows it (a recorded step's pattern, or now's): T rows of T. */
  shownPatternOf(layer: number, head: number): number[][];
}

export interface WhatIfOptions {
  /** initWorker()'s API to run on, in turn (it stays yours); default: `workers` Workers of its own. */
  engine?: RemoteHeadscope;
  /** The experiment to run at once. */
  state?: { experiment: ExperimentName };
  workers?: number;
  startWorker?: () => Promise<RemoteHeadscope>;
  /** More buttons for its row. */
  buttons?: readonly Element[];
}

export interface WhatIfView extends Component<{ experiment: ExperimentName | null }, { experiment: ExperimentName }, Promise<void>> {
  /** Runs EXPERIMENTS[name], with `overrides` (a smaller run). */
  run(name: ExperimentName, overrides?: Partial<ExperimentOptions>): Promise<void>;
  result(): ExperimentResult | null;
}

export declare const heads: { create(root: Element, options: HeadsOptions): HeadsView };
export declare const walkthrough: { create(root: Element, options: WalkthroughOptions): WalkthroughView };
export declare const train: { create(root: Element, options?: TrainOptions): TrainView };
export declare const whatIf: { create(root: Element, options?: WhatIfOptions): WhatIfView };
export declare const STYLESHEET_URL: string;
export declare const HEAD_COUNTS: readonly HeadCount[];
export declare const PRESET_NAMES: readonly PresetName[];
export declare const HEADS_CONTROLS: readonly HeadsControl[];
export declare const HEADS_PARTS: readonly HeadsPart[];
export declare const WALKTHROUGH_STAGES: readonly WalkthroughStage[];
export declare const WALKTHROUGH_CONTROLS: readonly WalkthroughControl[];
export declare const WALKTHROUGH_PRESETS: readonly ('seed' | 'learned' | 'random' | 'identity')[];
export declare const TRAIN_CONTROLS: readonly TrainControl[];
export declare function defaultHeadsState(): HeadsState;
export declare function applyHeadsState(patch: Partial<HeadsState>, current: HeadsState, where?: string,
  options?: { liveHeads?: number }): HeadsState;

/** A colour scale of the matrices and heatmaps. */
export interface Scale { kind: 'signed' | 'weights'; min: number; max: number }
export declare function makeScale(values: Iterable<number>, kind: 'signed' | 'weights'): Scale;
export declare function colorFor(value: number, scale: Scale): string;
export declare function formatNumber(value: number, decimals?: number): string;
export declare function renderLegend(root: Element, scale: Scale): void;
export declare function renderMatrix(root: Element, spec: Record<string, unknown>): HTMLTableElement;
export declare function renderHeatmap(root: Element, spec: {
  id: string; name: string; data: ArrayLike<number>; rows: number; cols: number; stride?: number;
  rowLabels: string[]; colLabels: string[]; scale?: Scale;
  masked?: (i: number, j: number) => boolean; describe: (i: number, j: number) => string;
  active?: [number, number] | null; onCell?: (i: number, j: number, byKeyOrClick: boolean) => void;
}): void;
/** Deprecated: heads.create(root, { engine: hs, ...options }); the view also has setState (update) and loadCase (setCase). */
export declare function mountHeads(root: Element, options: Omit<HeadsOptions, 'engine'> & { hs: Headscope }): unknown;
/** Deprecated: walkthrough.create(root, { engine: hs, ...options }); the view also has setState (update) and loadCase (setCase). */
export declare function mountWalkthrough(root: Element, options: Omit<WalkthroughOptions, 'engine'> & { hs: Headscope }): unknown;
export declare function applyWalkthroughState(patch: WalkthroughPatch, current: object, where?: string): object;
export declare function publicWalkthroughState(state: object): WalkthroughState;
