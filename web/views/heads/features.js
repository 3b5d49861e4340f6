// The Heads view's features: deterministic embeddings of the tokens (position, token identity,
// character class; featureLayout says which dim carries what).
import { hashString, seededRandom } from './random.js';
import { tokenClasses } from './tokens.js';

/**
 * The sequence length the presets are written for: position selectivity (positionMargin) and the
 * 'order' ramp cover max(PRESET_LENGTH, L) positions, so a text of up to 32 tokens gets the same
 * numbers whatever its length, and a longer one keeps every preset exact (embed and
 * buildStateDict's `length`).
 */
export const PRESET_LENGTH = 32;
export const designLength = (L) => Math.max(PRESET_LENGTH, L);

/** The class dims at the end of every embedding, in order. */
export const CLASS_FEATURES = ['bias', 'first', 'order', 'number', 'upper', 'keyword', 'punct', 'word'];

/**
 * Position frequencies, highest first: omega_k = 3 * 1.3^-k (periods 2.1 to 13 tokens for 8 pairs).
 * Unlike the Transformer's 1/10000^(2k/d), every pair varies over a 32-token line, and a head that
 * can afford only its first m pairs still tells neighbours apart (see positionMargin).
 */
function positionFrequencies(pairs) {
  return Array.from({ length: pairs }, (_, k) => 3 * 1.3 ** -k);
}

/**
 * Which embedding dims carry what, for an embedDim that is a multiple of 8 and at least 32:
 *   position  [0, E/4):          sinusoidal pairs, dim 2k = sin(omega_k p), 2k+1 = cos(omega_k p)
 *   identity  [E/4, E-8):        a unit vector from a seeded hash of the lower-cased token, made of
 *                                2-d blocks (cos theta_b, sin theta_b) / sqrt(blocks): equal tokens
 *                                get equal vectors, and every block has the same length, so a head
 *                                that reads any set of blocks scores a token highest against itself
 *   classes   [E-8, E):          CLASS_FEATURES in order: bias (always 1), first (1 at position
 *                                0), order (p / max(32, L): a ramp, so heads can prefer earlier
 *                                keys), and 0/1 flags number, upper, keyword, punct, word
 *                                (tokenClasses)
 * For E = 64: 8 position pairs (16 dims), 20 identity blocks (40 dims), 8 class dims.
 * @returns {{ embedDim: number,
 *   position: { start: number, size: number, frequencies: number[] },
 *   identity: { start: number, size: number, blocks: number },
 *   classes: { start: number, size: number, dim: Record<string, number> },
 *   names: string[] }} names: a short label per dim ('sin ω0', 'id 3a', 'keyword')
 */
export function featureLayout(embedDim = 64) {
  if (!Number.isInteger(embedDim) || embedDim < 32 || embedDim % 8 !== 0) {
    throw new RangeError(`featureLayout: embedDim must be a multiple of 8 and at least 32, got ${embedDim}`);
  }
  const pairs = embedDim / 8;
  const position = { start: 0, size: 2 * pairs, frequencies: positionFrequencies(pairs) };
  const identity = { start: 2 * pairs, size: embedDim - 2 * pairs - CLASS_FEATURES.length };
  identity.blocks = identity.size / 2;
  const classes = { start: embedDim - CLASS_FEATURES.length, size: CLASS_FEATURES.length, dim: {} };
  CLASS_FEATURES.forEach((name, i) => { classes.dim[name] = classes.start + i; });
  const names = [];
  for (let k = 0; k < pairs; k++) names.push(`sin ω${k}`, `cos ω${k}`);
  for (let b = 0; b < identity.blocks; b++) names.push(`id ${b}a`, `id ${b}b`);
  names.push(...CLASS_FEATURES);
  return { embedDim, position, identity, classes, names };
}

/** Seed of the token-identity hash: fixed, so a token has the same vector in every run. */
export const IDENTITY_SEED = 20240115;

/**
 * Deterministic features of a token sequence (see featureLayout for the dims).
 * @param {string[]} tokens
 * @param {{ embedDim?: number, seed?: number }} [options] seed of the identity hash
 * @returns {{ data: Float32Array, shape: [number, number], layout: ReturnType<typeof featureLayout> }}
 *   data is (L, E) row-major, ready for mha.trace({ data, shape }, ...)
 */
export function embed(tokens, { embedDim = 64, seed = IDENTITY_SEED } = {}) {
  const layout = featureLayout(embedDim);
  const E = embedDim;
  const L = tokens.length;
  const data = new Float32Array(L * E);
  const { frequencies } = layout.position;
  const { blocks } = layout.identity;
  const norm = 1 / Math.sqrt(blocks);
  const identityCache = new Map();
  for (let p = 0; p < L; p++) {
    const row = data.subarray(p * E, (p + 1) * E);
    frequencies.forEach((w, k) => {
      row[2 * k] = Math.sin(w * p);
      row[2 * k + 1] = Math.cos(w * p);
    });
    const lower = tokens[p].toLowerCase();
    let id = identityCache.get(lower);
    if (id === undefined) {
      id = new Float32Array(layout.identity.size);
      const random = seededRandom(hashString(lower, seed));
      for (let b = 0; b < blocks; b++) {
        const theta = 2 * Math.PI * random();
        id[2 * b] = Math.cos(theta) * norm;
        id[2 * b + 1] = Math.sin(theta) * norm;
      }
      identityCache.set(lower, id);
    }
    row.set(id, layout.identity.start);
    const c = tokenClasses(tokens[p]);
    const dim = layout.classes.dim;
    row[dim.bias] = 1;
    row[dim.first] = p === 0 ? 1 : 0;
    row[dim.order] = p / designLength(L);
    for (const name of ['number', 'upper', 'keyword', 'punct', 'word']) row[dim[name]] = c[name] ? 1 : 0;
  }
  return { data, shape: [L, E], layout };
}
