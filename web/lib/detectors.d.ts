// Head detectors: `import { headScores, modelHeadScores, DETECTORS } from 'headscope/detectors'`.
// The definitions (TransformerLens's head_detector, "mul" measure) are in web/lib/detectors.js
// and docs/tasks.md.
import type { RemoteTransformer, TokensInput, Transformer } from './index.js';

export type DetectorName = 'previous-token' | 'first-token' | 'same-token' | 'induction';

/** The detector names, in the order results list them. */
export declare const DETECTORS: readonly DetectorName[];

export interface DetectorOptions {
  /** Which detectors to score (default all). */
  detectors?: readonly DetectorName[];
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

/** The (T, T) 0/1 detection pattern of one sequence, row-major. */
export declare function detectionPattern(name: DetectorName, tokens: readonly number[] | Int32Array | TokensInput): Uint8Array;

/** Per detector, each head's score (the mean over the sequences): number[H]. */
export declare function headScores(pattern: PatternInput, tokens: TokensInput, options?: DetectorOptions): Partial<Record<DetectorName, number[]>>;

/** Per detector, every layer's head scores from one forward with every pattern hook: number[nLayers][nHeads]. */
export declare function modelHeadScores(model: Pick<Transformer, 'forward' | 'config'>, tokens: TokensInput, options?: DetectorOptions): Partial<Record<DetectorName, number[][]>>;
/** The same for a worker's model: a promise. */
export declare function modelHeadScores(model: Pick<RemoteTransformer, 'forward' | 'config'>, tokens: TokensInput, options?: DetectorOptions): Promise<Partial<Record<DetectorName, number[][]>>>;
