import type { CaseDocument } from './index.js';

/** The seed's worked example (3 tokens x 4 dims, two heads, its W_O) as a frozen case document. */
export declare const seedWorkedExample: Readonly<CaseDocument>;

export interface ProjectionMatrices {
  /** Per head, in the textbook notation x W: (E, headDim) each. */
  heads: { wq: number[][]; wk: number[][]; wv: number[][] }[];
  /** (E, E): out_proj.weight transposed. */
  wo: number[][];
}

/** A case's projections in the seed's notation (cases with a packed in_proj_weight only). */
export declare function projectionMatrices(caseDocument: CaseDocument): ProjectionMatrices;

/** The seed's W_Q^(h), W_K^(h), W_V^(h) (4x2) and W_O (4x4). */
export declare function seedProjections(): ProjectionMatrices;
