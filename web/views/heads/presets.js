// The Heads view's presets: the jobs a hand-built head can do, and how each writes its channels
// (channels.js) into the head's query and key rows.
import { gaussian } from './random.js';
import { writeIdentity, writeKeyFeature, writeOffset } from './channels.js';

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

// Same-token tie-break: of two equal tokens, prefer the earlier one, by SAME_TOKEN_ORDER *
// sharpness logits over the whole ramp (the key's 'order' feature, p / max(32, L)).
const SAME_TOKEN_ORDER = 0.5;

/** How each preset writes its head: writer(head, layout, sharpness, random). */
export const PRESET_WRITERS = {
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
