// Types of 'headscope/experiments' (web/lib/experiments.js), written by hand.
import type { Headscope, OptimizerOptions, RemoteHeadscope, TransformerConfig } from './index.js';

export declare const HEAD_COUNTS: readonly number[];
/** The documented experiments (docs/experiments.md): two of head counts, three of attention variants. */
export declare const EXPERIMENTS: Readonly<Record<'log-line' | 'induction' | 'kv-heads' | 'positions' | 'sinks', Readonly<ExperimentOptions>>>;
/** The fields a variant may set. */
export declare const VARIANT_FIELDS: readonly ['nKvHeads', 'positions', 'attnWindow', 'attnSinks'];
/** One attention variant of an experiment: its name (the row's) and the config fields it sets. */
export interface ExperimentVariant extends Partial<Pick<TransformerConfig, 'nKvHeads' | 'positions' | 'attnWindow' | 'attnSinks'>> { name: string }
/** The rows in words: the best only when above every other row on every seed (rankBySpread), then one head and the narrowest heads, or each variant, against the top. */
export declare function describeResult(result: { rows: readonly ExperimentRow[] }): string;
/**
 * The rows against the highest mean accuracy by the seeds' min-max spread: a row is below the top
 * when its best seed is under the top's worst; the top is the clear best when every other row is.
 */
export declare function rankBySpread(rows: readonly ExperimentRow[]): {
  top: ExperimentRow; clear: boolean; within: ExperimentRow[]; below: ExperimentRow[]; isBelow(row: ExperimentRow): boolean;
};

/** The model of every run: these fields of createTransformer's config (the head count is each run's). */
export interface ExperimentOptions
  extends Partial<Pick<TransformerConfig, 'dModel' | 'nLayers' | 'dMlp' | 'norm' | 'positions'>> {
  /** A built-in task and its options (headscope/tasks); the run's seed replaces task.seed. */
  task: { name: string; [option: string]: unknown };
  /** Head counts, each dividing dModel (default HEAD_COUNTS; one count with variants). */
  heads?: readonly number[];
  /** Compare these variants at the one head count instead: one run per variant and seed, a row per variant. */
  variants?: readonly ExperimentVariant[];
  /** One run per seed and head count: the model's initial weights and the task's rows (default [1, 2, 3]). */
  seeds?: readonly number[];
  steps?: number;
  batchSize?: number;
  /** Held-out evaluation every this many steps (and at step 0 and the end). */
  evalEvery?: number;
  /** Held-out rows evaluated (task.heldOut(evalRows, 0)). */
  evalRows?: number;
  optimizer?: OptimizerOptions;
}

export interface CurvePoint { step: number; trainLoss: number; heldOutLoss: number; accuracy: number }

export interface RunResult {
  heads: number;
  /** The variant's name, in an experiment of variants. */
  variant?: string;
  headDim: number;
  seed: number;
  curve: CurvePoint[];
  finalAccuracy: number;
  finalLoss: number;
  ms: number;
  /** Set when a step was refused (non-finite): the run stopped there. */
  refused?: string;
}

export interface SummaryStats { mean: number; min: number; max: number; sd: number }
export interface ExperimentRow {
  heads: number;
  /** The variant's name, in an experiment of variants. */
  variant?: string;
  headDim: number;
  seeds: number[];
  accuracy: SummaryStats;
  loss: SummaryStats;
  msMedian: number;
  refused: number;
}

export interface ExperimentResult { options: Required<ExperimentOptions>; runs: RunResult[]; rows: ExperimentRow[] }

export interface PlannedRun { heads: number; variant?: string; seed: number; model: TransformerConfig; task: { name: string; [option: string]: unknown } }

type Engine = Headscope | RemoteHeadscope;

export declare function planExperiment(options: ExperimentOptions): { options: Required<ExperimentOptions>; runs: PlannedRun[] };
export declare function runOne(engine: Engine, run: PlannedRun, options: Required<ExperimentOptions>,
  hooks?: { onProgress?: (event: CurvePoint & { heads: number; variant?: string; seed: number }) => void; signal?: AbortSignal }): Promise<RunResult>;
export declare function runExperiment(engines: Engine | readonly Engine[], options: ExperimentOptions, hooks?: {
  onProgress?: (event: CurvePoint & { heads: number; variant?: string; seed: number }) => void;
  onRun?: (result: RunResult, index: number, total: number) => void;
  signal?: AbortSignal;
}): Promise<ExperimentResult>;
export declare function summarize(results: readonly RunResult[]): ExperimentRow[];
export declare function formatTable(result: { rows: readonly ExperimentRow[] }): string;
