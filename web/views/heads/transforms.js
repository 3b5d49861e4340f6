// Data transforms of the Heads view, with no DOM: text -> tokens -> deterministic features ->
// weights whose heads mean something -> summary numbers of the attention the engine computed.
// They run unchanged in Node (tests/js/transforms.test.js) and in browsers.
//
// Nothing here computes attention: the engine does (mha.trace / mha.forward). These functions only
// prepare its inputs (embeddings, state_dicts, masks) and summarise its outputs (output
// differences; the per-head entropy, distance and max weight are the engine's, options.headStats).

/** The second seed's log line: the Heads view's default text. */
export const DEFAULT_TEXT =
  '2024-01-15 10:30:45 ERROR [order-api] connection_timeout retry=3 duration=5000ms service=database';

/** Tokens kept by default (the Heads view's limit; the token note says when a text has more). */
export const MAX_TOKENS = 128;

/**
 * The sequence length the presets are written for: position selectivity (positionMargin) and the
 * 'order' ramp cover max(PRESET_LENGTH, L) positions, so a text of up to 32 tokens gets the same
 * numbers whatever its length, and a longer one keeps every preset exact (embed and
 * buildStateDict's `length`).
 */
export const PRESET_LENGTH = 32;
const designLength = (L) => Math.max(PRESET_LENGTH, L);

// ---------------------------------------------------------------------------------------------
// Random numbers and hashing

/**
 * mulberry32: a small seeded generator, the same sequence in every browser and in Node.
 * @param {number} seed any number (its low 32 bits are used)
 * @returns {() => number} uniform in [0, 1)
 */
export function seededRandom(seed) {
  let a = seed >>> 0;
  return function next() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A standard normal sample from a uniform generator (Box-Muller). */
function gaussian(random) {
  const u = 1 - random();  // (0, 1]: log(u) is finite
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
}

/** FNV-1a over the UTF-16 code units of `text`, started from `seed`: a 32-bit unsigned hash. */
export function hashString(text, seed = 0) {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

// ---------------------------------------------------------------------------------------------
// Tokens

// Characters of scripts written without spaces: one token each.
const IDEOGRAPH = '\\p{Script=Han}\\p{Script=Hiragana}\\p{Script=Katakana}';
const WORD_CHAR = `(?:(?![${IDEOGRAPH}])[\\p{L}\\p{M}\\p{N}_])`;
// A word: word characters, joined by - . ' ’ (order-api, 2024-01-15, 3.14, don't) or, between
// digits, by : (10:30:45). Anything else that is not a space is a token of its own ([ ] = , ...).
const TOKEN_PATTERN = new RegExp(
  `[${IDEOGRAPH}]|${WORD_CHAR}+(?:(?:[-.'’]|(?<=\\p{N}):(?=\\p{N}))${WORD_CHAR}+)*|\\S`, 'gu');

/**
 * Splits a sentence or a log line into words, numbers and punctuation. Log-line aware: brackets,
 * '=' and other punctuation are tokens of their own, while dates (2024-01-15), times (10:30:45),
 * numbers with units (5000ms) and identifiers (order-api, connection_timeout) stay whole. Han,
 * Hiragana and Katakana characters are one token each; an emoji or any other grapheme cluster is
 * never split.
 *
 * @param {string} text
 * @param {{ maxTokens?: number }} [options] keep at most this many tokens (default 32)
 * @returns {{ tokens: string[], total: number, truncated: boolean }} the first maxTokens tokens;
 *   total counts every token of the text, truncated is total > maxTokens.
 */
export function tokenize(text, { maxTokens = MAX_TOKENS } = {}) {
  if (typeof text !== 'string') throw new TypeError(`tokenize: text must be a string, got ${typeof text}`);
  if (!Number.isInteger(maxTokens) || maxTokens < 0) {
    throw new RangeError(`tokenize: maxTokens must be a non-negative integer, got ${maxTokens}`);
  }
  const all = graphemeTokens(text);
  return { tokens: all.slice(0, maxTokens), total: all.length, truncated: all.length > maxTokens };
}

// A user-perceived character (an emoji with its skin tone or ZWJ sequence, a flag, a letter with
// its combining marks) is never split: TOKEN_PATTERN's \S takes one code point, so a match that
// starts inside a grapheme cluster joins the token before it, and one that ends inside a cluster
// runs to its end (Intl.Segmenter's grapheme boundaries; every runtime headscope supports has it).
const GRAPHEMES = typeof Intl === 'object' && typeof Intl.Segmenter === 'function'
  ? new Intl.Segmenter(undefined, { granularity: 'grapheme' }) : null;

function graphemeTokens(text) {
  const matches = [...text.matchAll(TOKEN_PATTERN)].map((m) => [m.index, m.index + m[0].length]);
  if (GRAPHEMES === null) return matches.map(([a, b]) => text.slice(a, b));
  const boundaries = new Set([0]);
  for (const s of GRAPHEMES.segment(text)) boundaries.add(s.index + s.segment.length);
  const spans = [];
  for (const [a, end] of matches) {
    let b = end;
    while (!boundaries.has(b)) b++;
    const last = spans.at(-1);
    if (last !== undefined && (!boundaries.has(a) || a < last[1])) last[1] = Math.max(last[1], b);
    else spans.push([a, b]);
  }
  return spans.map(([a, b]) => text.slice(a, b));
}

/** Lower-case words that mark trouble in a log line (the seed's ERROR, timeout, exception...). */
export const KEYWORDS = new Set([
  'error', 'errors', 'err', 'warn', 'warning', 'fatal', 'critical', 'crit', 'panic', 'fail',
  'failed', 'failure', 'fails', 'timeout', 'timeouts', 'timedout', 'exception', 'refused', 'denied',
  'unreachable', 'crash', 'crashed', 'abort', 'aborted', 'killed', 'oom',
]);

/** True when the token or one of its parts (split at - _ . : / and camelCase) is a keyword. */
export function isKeyword(token) {
  const parts = token.replace(/(\p{Ll})(\p{Lu})/gu, '$1 $2').toLowerCase().split(/[\s\-_.:/]+/u);
  return parts.some((p) => KEYWORDS.has(p));
}

/**
 * The character classes the embedding encodes, for one token.
 * number: starts with a digit (3, 5000ms, 2024-01-15, 10:30:45).
 * upper: an upper-case word of two letters or more (ERROR, HTTP).
 * keyword: see isKeyword (ERROR, connection_timeout, NullPointerException).
 * punct: no letter and no digit ([ ] = , .).
 * word: starts with a letter.
 */
export function tokenClasses(token) {
  const letters = token.match(/\p{L}/gu)?.length ?? 0;
  return {
    number: /^\p{N}/u.test(token),
    upper: letters >= 2 && /^\p{L}/u.test(token) && !/\p{Ll}/u.test(token) && /\p{Lu}/u.test(token),
    keyword: isKeyword(token),
    punct: !/[\p{L}\p{N}]/u.test(token),
    word: /^\p{L}/u.test(token),
  };
}

// ---------------------------------------------------------------------------------------------
// Features

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

// ---------------------------------------------------------------------------------------------
// Weight presets

/** The head presets, in the order they cycle over heads. */
export const PRESETS = ['previous-token', 'first-token', 'keyword', 'numbers', 'same-token', 'random'];

/** Every preset name buildStateDict accepts ('blend': all five patterns in one head). */
export const ALL_PRESETS = [...PRESETS, 'blend'];

/** One line per preset, for labels. */
export const PRESET_DESCRIPTIONS = {
  'previous-token': 'each token looks at the one before it (position)',
  'same-token': 'each token looks at the first copy of itself (identity)',
  'first-token': 'every token looks at the first token',
  keyword: 'every token looks at ERROR, timeout, failed…',
  numbers: 'every token looks at the numbers',
  random: 'random query and key weights',
  blend: 'all five patterns at once, in one head',
};

/** Presets for numHeads heads: PRESETS cycled; a single head gets 'blend' (the seed's what-if). */
export function defaultPresets(numHeads) {
  if (numHeads === 1) return ['blend'];
  return Array.from({ length: numHeads }, (_, h) => PRESETS[h % PRESETS.length]);
}

/**
 * How well m position pairs single out one offset among sequences of maxLength tokens: the gap
 * between sum_k cos(omega_k * 0) and the best sum_k cos(omega_k * d), 0 < |d| < maxLength.
 * Scaling a positional score by sharpness / gap puts the intended key exactly `sharpness` logits
 * above the best other one.
 */
export function positionMargin(frequencies, maxLength = PRESET_LENGTH) {
  let best = -Infinity;
  for (let d = 1; d < maxLength; d++) {
    let f = 0;
    for (const w of frequencies) f += Math.cos(w * d);
    best = Math.max(best, f);
  }
  return frequencies.length - best;
}

// A head's query/key rows are "channels": score(i, j) = sum_c qc(x_i) * kc(x_j) / sqrt(headDim),
// with qc(x) = qRow . x + qBias and kc(x) = kRow . x + kBias. Each preset claims channels in its own
// head's rows (in_proj_weight rows h*hd..(h+1)*hd of W_q and of W_k) and writes the sqrt(headDim)
// into the query side so that `sharpness` reads directly as logits.
class HeadWriter {
  constructor(inProjWeight, inProjBias, E, hd, h) {
    this.w = inProjWeight;
    this.b = inProjBias;
    this.E = E;
    this.hd = hd;
    this.h = h;
    this.next = 0;
    this.scale = Math.sqrt(hd);
  }

  get free() {
    return this.hd - this.next;
  }

  /** Claims the next channel: set(qRow, qBias, kRow, kBias) writers, or null when none is left. */
  channel() {
    if (this.next >= this.hd) return null;
    const r = this.h * this.hd + this.next++;
    const { E, w, b, scale } = this;
    return {
      q: (dim, value) => { w[r * E + dim] += value * scale; },
      qBias: (value) => { b[r] += value * scale; },
      k: (dim, value) => { w[(E + r) * E + dim] += value; },
      kBias: (value) => { b[E + r] += value; },
    };
  }
}

// score += strength * sum_k cos(omega_k (i - offset - j)) / gap over the first m pairs, where m is
// what the channels left allow. cos(w(i-o-j)) = sin(w(i-o)) sin(wj) + cos(w(i-o)) cos(wj), and
// sin(w(i-o)), cos(w(i-o)) are the query's own sin/cos rotated by -w*o: a fixed 2x2 map of its
// features. Returns the number of pairs used.
function writeOffset(head, layout, offset, strength, maxPairs = Infinity) {
  const { frequencies, start } = layout.position;
  const m = Math.min(frequencies.length, Math.floor(head.free / 2), maxPairs);
  if (m < 1) return 0;
  const used = frequencies.slice(0, m);
  const c = strength / positionMargin(used, layout.length ?? PRESET_LENGTH);
  used.forEach((w, k) => {
    const sinDim = start + 2 * k;
    const cosDim = sinDim + 1;
    const co = Math.cos(w * offset);
    const so = Math.sin(w * offset);
    const a = head.channel();  // key side: sin(w j)
    a.k(sinDim, 1);
    a.q(sinDim, c * co);
    a.q(cosDim, -c * so);
    const b = head.channel();  // key side: cos(w j)
    b.k(cosDim, 1);
    b.q(cosDim, c * co);
    b.q(sinDim, c * so);
  });
  return m;
}

// score += strength * (feature of the key): the query is a constant, so every query looks at the
// keys that have the feature, equally.
function writeKeyFeature(head, layout, feature, strength) {
  const ch = head.channel();
  if (ch === null) return false;
  ch.qBias(strength);
  ch.k(layout.classes.dim[feature], 1);
  return true;
}

// score += strength * (1/u) sum_{b in u blocks} cos(theta_b(i) - theta_b(j)): the identity blocks
// the channels allow, starting at block `first` (heads start at different blocks). Equal tokens
// score exactly `strength`; different tokens score less, by more the more blocks the head can read.
function writeIdentity(head, layout, strength, first, maxBlocks = Infinity) {
  const { blocks, start } = layout.identity;
  const u = Math.min(blocks, Math.floor(head.free / 2), maxBlocks);
  if (u < 1) return 0;
  const c = (strength * blocks) / u;  // each block carries 1/blocks of the unit vector's square
  for (let n = 0; n < u; n++) {
    const b = (first + n) % blocks;
    for (const dim of [start + 2 * b, start + 2 * b + 1]) {
      const ch = head.channel();
      ch.q(dim, c);
      ch.k(dim, 1);
    }
  }
  return u;
}

// Same-token tie-break: of two equal tokens, prefer the earlier one, by SAME_TOKEN_ORDER *
// sharpness logits over the whole ramp (the key's 'order' feature, p / max(32, L)).
const SAME_TOKEN_ORDER = 0.5;

const PRESET_WRITERS = {
  // Previous token: score(i, j) = s * K(i - 1 - j) / gap, K the head's position kernel
  // (writeOffset), peaked at j = i - 1 with every other key at least s logits lower (query 0, with
  // nothing before it, lands wherever K is next highest). 2 channels per pair: all 8 pairs at
  // headDim >= 16, the first 4 at headDim 8, 2 at headDim 4; the fewer pairs, the smaller the gap
  // and the larger the weights needed for the same s.
  'previous-token'(head, layout, s) {
    writeOffset(head, layout, 1, s);
  },
  // Same token: s * similarity of the identity vectors (1 for equal tokens, less for different
  // ones: the more identity blocks the head can read, the less), minus SAME_TOKEN_ORDER * s *
  // order(key): of equal tokens the earliest wins, so a repeated word looks back at its first
  // occurrence. One channel for the order, the rest for identity blocks.
  'same-token'(head, layout, s) {
    writeKeyFeature(head, layout, 'order', -SAME_TOKEN_ORDER * s);
    const blocks = Math.floor(head.free / 2);
    writeIdentity(head, layout, s, head.h * blocks, blocks);
  },
  // First token: the query is a constant, the key reads the 'first' flag: key 0 gets s logits.
  'first-token'(head, layout, s) {
    writeKeyFeature(head, layout, 'first', s);
  },
  // Keyword: the key reads the 'keyword' flag; a line without keywords gets uniform attention
  // (the head has nothing to look at, and its entropy says so).
  keyword(head, layout, s) {
    writeKeyFeature(head, layout, 'keyword', s);
  },
  // Numbers: the key reads the 'number' flag.
  numbers(head, layout, s) {
    writeKeyFeature(head, layout, 'number', s);
  },
  // Random query and key rows, N(0, sigma^2), sigma chosen so that the scores' standard deviation
  // is about s / 3 (score std ~ sigma^2 |x|^2, and |x|^2 is about pairs + 3.5 for these features).
  random(head, layout, s, random) {
    const sigma = Math.sqrt(s / (3 * (layout.position.size / 2 + 3.5)));
    while (head.free > 0) {
      const ch = head.channel();
      for (let e = 0; e < layout.embedDim; e++) {
        ch.q(e, (sigma * gaussian(random)) / head.scale);
        ch.k(e, sigma * gaussian(random));
      }
    }
  },
  // All five in one head, each at strength s, their scores added: what one head has to do when it
  // is asked to see everything (the seed's "only one head" what-if). The patterns interfere: a key
  // that is first and a number collects both bonuses and outshouts the rest. Channels: 1 each for
  // first, keyword, number and order, then position pairs on half of what is left, identity
  // blocks on the rest.
  blend(head, layout, s) {
    writeKeyFeature(head, layout, 'first', s);
    writeKeyFeature(head, layout, 'keyword', s);
    writeKeyFeature(head, layout, 'number', s);
    writeKeyFeature(head, layout, 'order', -SAME_TOKEN_ORDER * s);
    writeOffset(head, layout, 1, s, Math.max(1, Math.floor(head.free / 4)));
    writeIdentity(head, layout, s, 0, Math.floor(head.free / 2));
  },
};

/**
 * An orthogonal E x E matrix (rows orthonormal), from Gram-Schmidt on Gaussian rows.
 * @returns {Float64Array} row-major
 */
function randomOrthogonal(E, random) {
  const m = new Float64Array(E * E);
  for (let r = 0; r < E; r++) {
    const row = m.subarray(r * E, (r + 1) * E);
    for (;;) {
      for (let e = 0; e < E; e++) row[e] = gaussian(random);
      for (let p = 0; p < r; p++) {
        const prev = m.subarray(p * E, (p + 1) * E);
        let dot = 0;
        for (let e = 0; e < E; e++) dot += row[e] * prev[e];
        for (let e = 0; e < E; e++) row[e] -= dot * prev[e];
      }
      let norm = 0;
      for (let e = 0; e < E; e++) norm += row[e] * row[e];
      norm = Math.sqrt(norm);
      if (norm > 1e-6) {
        for (let e = 0; e < E; e++) row[e] /= norm;
        break;
      }
    }
  }
  return m;
}

function checkHeads(embedDim, numHeads) {
  if (!Number.isInteger(numHeads) || numHeads < 1 || embedDim % numHeads !== 0) {
    throw new RangeError(`numHeads must be a positive divisor of embedDim (${embedDim}), got ${numHeads}`);
  }
}

/**
 * A torch.nn.MultiheadAttention state_dict (embed_dim E, num_heads H, bias=True) whose head h
 * implements heads[h] inside its own rows: W_q and W_k rows h*hd..(h+1)*hd (hd = E / H) hold the
 * preset's channels (see PRESET_WRITERS), rows it does not need stay 0.
 *
 * Values and output, the same for every preset: W_V = Q and W_O = Q^T for a seeded random
 * orthogonal Q (E x E). Head h carries Q_h (its hd rows of Q) times the mix of tokens it attends
 * to, and the layer's output is sum_h Q_h^T Q_h (that head's mix): when every head looks at the
 * same key, the output is exactly that key's embedding. Switching head h off (ablate) removes its
 * term and nothing else.
 *
 * @param {{ embedDim?: number, numHeads: number, heads?: string[], seed?: number, sharpness?: number, length?: number }} o
 *   heads: one name of ALL_PRESETS per head (default defaultPresets(numHeads)); seed: random
 *   presets and Q; sharpness: logits between a head's intended keys and the best other key;
 *   length: the number of tokens it will see (the presets stay exact up to max(32, length)).
 * @returns {{ in_proj_weight: { data: Float32Array, shape: number[] }, in_proj_bias: ...,
 *   'out_proj.weight': ..., 'out_proj.bias': ... }}
 */
export function buildStateDict({ embedDim = 64, numHeads, heads, seed = 1, sharpness = 6, length = PRESET_LENGTH } = {}) {
  if (!Number.isInteger(length) || length < 1) {
    throw new RangeError(`buildStateDict: length must be a positive integer (the tokens it is for), got ${length}`);
  }
  const layout = { ...featureLayout(embedDim), length: designLength(length) };
  checkHeads(embedDim, numHeads);
  const presets = heads ?? defaultPresets(numHeads);
  if (!Array.isArray(presets) || presets.length !== numHeads) {
    throw new RangeError(`buildStateDict: heads must name one preset per head (${numHeads}), got ${presets}`);
  }
  for (const p of presets) {
    if (!ALL_PRESETS.includes(p)) {
      throw new RangeError(`buildStateDict: unknown preset ${JSON.stringify(p)} (expected one of ${ALL_PRESETS.join(', ')})`);
    }
  }
  if (typeof sharpness !== 'number' || !Number.isFinite(sharpness) || sharpness < 0) {
    throw new RangeError(`buildStateDict: sharpness must be a non-negative number, got ${sharpness}`);
  }
  const E = embedDim;
  const hd = E / numHeads;
  const random = seededRandom(seed);
  const inProjWeight = new Float32Array(3 * E * E);
  const inProjBias = new Float32Array(3 * E);
  // Written in float64, stored in float32 at the end.
  const w = new Float64Array(3 * E * E);
  const b = new Float64Array(3 * E);
  presets.forEach((preset, h) => {
    PRESET_WRITERS[preset](new HeadWriter(w, b, E, hd, h), layout, sharpness, random);
  });
  const q = randomOrthogonal(E, random);
  w.set(q, 2 * E * E);  // W_V = Q
  inProjWeight.set(w);
  inProjBias.set(b);
  const outWeight = new Float32Array(E * E);
  for (let r = 0; r < E; r++) for (let c = 0; c < E; c++) outWeight[r * E + c] = q[c * E + r];  // W_O = Q^T
  return {
    in_proj_weight: { data: inProjWeight, shape: [3 * E, E] },
    in_proj_bias: { data: inProjBias, shape: [3 * E] },
    'out_proj.weight': { data: outWeight, shape: [E, E] },
    'out_proj.bias': { data: new Float32Array(E), shape: [E] },
  };
}

/**
 * Seeded random weights distributed as PyTorch initialises nn.MultiheadAttention: in_proj_weight
 * xavier_uniform (bound sqrt(6 / (E + 3E))), out_proj.weight uniform(-1/sqrt(E), 1/sqrt(E)) (Linear's
 * default), both biases 0. An untrained layer: what its heads see before any learning.
 */
export function randomStateDict({ embedDim = 64, numHeads, seed = 1 } = {}) {
  checkHeads(embedDim, numHeads);
  const E = embedDim;
  const random = seededRandom(seed);
  const uniform = (n, bound) => Float32Array.from({ length: n }, () => (2 * random() - 1) * bound);
  return {
    in_proj_weight: { data: uniform(3 * E * E, Math.sqrt(6 / (4 * E))), shape: [3 * E, E] },
    in_proj_bias: { data: new Float32Array(3 * E), shape: [3 * E] },
    'out_proj.weight': { data: uniform(E * E, 1 / Math.sqrt(E)), shape: [E, E] },
    'out_proj.bias': { data: new Float32Array(E), shape: [E] },
  };
}

/**
 * A copy of a state_dict with heads switched off: out_proj.weight's columns h*hd..(h+1)*hd set to
 * 0 for every h in `ablated` (0-based). Exactly the same as zeroing those heads' outputs before W_O;
 * attention weights are unchanged. Accepts tensors as { data, shape } or nested arrays, and Maps.
 * @param {object | Map<string, unknown>} stateDict
 * @param {{ embedDim: number, numHeads: number, ablated: Iterable<number> }} o
 */
export function ablateStateDict(stateDict, { embedDim, numHeads, ablated }) {
  checkHeads(embedDim, numHeads);
  const entries = stateDict instanceof Map ? [...stateDict] : Object.entries(stateDict);
  const heads = [...ablated];
  const hd = embedDim / numHeads;
  const out = {};
  for (const [key, value] of entries) {
    if (key !== 'out_proj.weight') {
      out[key] = value;
      continue;
    }
    const t = ArrayBuffer.isView(value?.data) ? value
      : { data: Float32Array.from(value.flat(Infinity)), shape: [value.length, value[0].length] };
    const data = Float32Array.from(t.data);
    const cols = t.shape[1];
    for (const h of heads) {
      if (!Number.isInteger(h) || h < 0 || h >= numHeads) {
        throw new RangeError(`ablateStateDict: head ${h} is not in 0..${numHeads - 1}`);
      }
      for (let r = 0; r < t.shape[0]; r++) data.fill(0, r * cols + h * hd, r * cols + (h + 1) * hd);
    }
    out[key] = { data, shape: [...t.shape] };
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Masks

/** Boolean (L, S) causal mask for forward's attnMask: true above the diagonal (key after query). */
export function causalMask(L, S = L) {
  const data = new Uint8Array(L * S);
  for (let i = 0; i < L; i++) for (let j = i + 1; j < S; j++) data[i * S + j] = 1;
  return { data, shape: [L, S] };
}

/** Boolean (S) key padding mask for an unbatched forward: true for the padded key positions. */
export function keyPaddingMask(S, padded) {
  const data = new Uint8Array(S);
  for (const j of padded) if (j >= 0 && j < S) data[j] = 1;
  return { data, shape: [S] };
}

// ---------------------------------------------------------------------------------------------
// Summaries of the engine's results

/** The per-head statistics the engine computes with options.headStats (docs/api.md, "Head statistics"). */
export const HEAD_STATS = ['entropy', 'distance', 'maxWeight'];

/**
 * Batch element n's per-head statistics from trace()'s or forward()'s headStats ({ entropy,
 * distance, maxWeight }, Tensors of shape (N, H) batched or (H) unbatched): { entropy, distance,
 * maxWeight }, each H numbers (row n, a view, no copy; n is ignored when unbatched).
 */
export function headStatsRow(headStats, n = 0) {
  const row = {};
  for (const name of HEAD_STATS) {
    const { data, shape } = headStats[name];
    const H = shape[shape.length - 1];
    row[name] = shape.length === 2 ? data.subarray(n * H, (n + 1) * H) : data;
  }
  return row;
}

/**
 * Mean of one statistic over the heads, leaving out the heads the engine gave NaN (every query
 * row fully masked); NaN when every head is.
 * @param {ArrayLike<number>} values one per head
 */
export function meanOverHeads(values) {
  let total = 0;
  let n = 0;
  for (let h = 0; h < values.length; h++) {
    if (Number.isNaN(values[h])) continue;
    total += values[h];
    n++;
  }
  return n ? total / n : NaN;
}

/** The (L, S) block of head h in ([N,] H, L, S) weights, batch element n (a view, no copy). */
export function headWeights(weights, { n = 0, h, H, L, S }) {
  const start = ((n * H) + h) * L * S;
  return weights.subarray(start, start + L * S);
}

/** The key with the largest weight in each query row: Int32Array(L), -1 for an all-zero row. */
export function argmaxRows(weights, L, S) {
  const out = new Int32Array(L);
  for (let i = 0; i < L; i++) {
    let best = -1;
    let bestW = 0;
    for (let j = 0; j < S; j++) {
      if (weights[i * S + j] > bestW) {
        bestW = weights[i * S + j];
        best = j;
      }
    }
    out[i] = best;
  }
  return out;
}

/**
 * How much the output changed: per token the Euclidean norm of (after - before) over E, the
 * Frobenius norm of the whole difference, and that norm relative to the norm of `before`.
 * @param {ArrayLike<number>} before (L, E)
 * @param {ArrayLike<number>} after (L, E)
 * @returns {{ perToken: Float64Array, total: number, relative: number, difference: Float32Array }}
 */
export function outputDifference(before, after, L, E) {
  const perToken = new Float64Array(L);
  const difference = new Float32Array(L * E);
  let total = 0;
  let base = 0;
  for (let i = 0; i < L; i++) {
    let s = 0;
    for (let e = 0; e < E; e++) {
      const d = after[i * E + e] - before[i * E + e];
      difference[i * E + e] = d;
      s += d * d;
      base += before[i * E + e] ** 2;
    }
    perToken[i] = Math.sqrt(s);
    total += s;
  }
  total = Math.sqrt(total);
  return { perToken, total, relative: base > 0 ? total / Math.sqrt(base) : 0, difference };
}

/**
 * Rows of batch element n from an output in the query's layout: (L, E) unbatched, (L, N, E)
 * or, batchFirst, (N, L, E). Returns (L, E) row-major.
 */
export function batchRows(data, shape, { n = 0, batchFirst = false } = {}) {
  if (shape.length === 2) return data;
  const [a, b, E] = shape;
  if (batchFirst) return data.subarray(n * b * E, (n + 1) * b * E);
  const out = new Float32Array(a * E);
  for (let i = 0; i < a; i++) out.set(data.subarray((i * b + n) * E, (i * b + n + 1) * E), i * E);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Colours

/** Heads with a colour of their own (--hs-head-1..16 in headscope.css); more heads cycle them. */
export const HEAD_COLORS = 16;

/** CSS colour of head h (0-based): --hs-head-1..16 from headscope.css, cycled past 16 heads. */
export function headColor(h) {
  return `var(--hs-head-${(h % HEAD_COLORS) + 1})`;
}

/** True for heads that reuse a colour (h >= 16): the views draw them dashed to tell them apart. */
export function headDashed(h) {
  return h >= HEAD_COLORS;
}
