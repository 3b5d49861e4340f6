// Head detectors: `import { headScores, modelHeadScores, DETECTORS } from 'headscope/detectors'`.
// The definitions (TransformerLens's head_detector, "mul" measure) are in web/lib/detectors.js
// and docs/tasks.md.
import type { RemoteTransformer, TokensInput, Transformer } from './index.js';

export type DetectorName = 'previous-token' | 'first-token' | 'same-token' | 'induction' | 'keyword' | 'custom';

/** The four detectors scored by default, in the order results list them. */
export declare const DETECTORS: readonly DetectorName[];
/** DETECTORS, then 'keyword' and 'custom' (each scored only when named, with its parameter). */
export declare const ALL_DETECTORS: readonly DetectorName[];

/** The custom detector's pattern: a (T, T) matrix of 0 and 1, a predicate, or a formula string. */
export type CustomPattern =
  | readonly (readonly number[])[]
  | { data: ArrayLike<number>; shape: readonly number[] }
  | ((i: number, j: number, tokens: Int32Array) => boolean)
  | string;

export interface DetectorOptions {
  /** Which detectors to score (default the four of DETECTORS). */
  detectors?: readonly DetectorName[];
  /** The keyword detector's token ids: attention mass on keys holding one of them. */
  keywords?: readonly number[];
  /** The custom detector's pattern (key j <= query i where it says 1). */
  custom?: CustomPattern;
  /** The task's token strings, for "quoted" tokens in a custom formula. */
  vocab?: readonly string[];
  /** The tokens' targets (B, T): only the query rows whose target is not -100 count. */
  targets?: TokensInput;
  /** Leave attention to position 0 out of both sums (TransformerLens's exclude_bos). */
  excludeBos?: boolean;
  /** Leave each query's attention to itself out (exclude_current_token). */
  excludeCurrentToken?: boolean;
}

/** An attention pattern as forward's hooks return it: (B, H, T, T) or (H, T, T). */
export interface PatternInput {
  data: Float32Array | Float64Array;
  shape: readonly number[];
}

/** The (T, T) 0/1 detection pattern of one sequence, row-major (options: keywords, custom, vocab). */
export declare function detectionPattern(name: DetectorName, tokens: readonly number[] | Int32Array | TokensInput, options?: DetectorOptions): Uint8Array;

/**
 * A custom detector formula over i, j (query and key positions), ti, tj (their token ids) and T,
 * with integers, "quoted" vocabulary tokens, + - * / %, comparisons, && || ! and parentheses, as
 * a predicate. Refused with INVALID_ARGUMENT naming options.name and the character.
 */
export declare function compileFormula(text: string, options?: { vocab?: readonly string[] | null; name?: string }):
  (i: number, j: number, ti: number, tj: number, T: number) => boolean;

/** Per detector, each head's score (the mean over the sequences): number[H]. */
export declare function headScores(pattern: PatternInput, tokens: TokensInput, options?: DetectorOptions): Partial<Record<DetectorName, number[]>>;

/** Per detector, every layer's head scores from one forward with every pattern hook: number[nLayers][nHeads]. */
export declare function modelHeadScores(model: Pick<Transformer, 'forward' | 'config'>, tokens: TokensInput, options?: DetectorOptions): Partial<Record<DetectorName, number[][]>>;
/** The same for a worker's model: a promise. */
export declare function modelHeadScores(model: Pick<RemoteTransformer, 'forward' | 'config'>, tokens: TokensInput, options?: DetectorOptions): Promise<Partial<Record<DetectorName, number[][]>>>;
