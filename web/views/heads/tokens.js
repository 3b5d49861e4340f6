// The Heads view's tokenizer: a sentence or a log line -> words, numbers and punctuation, and the
// character classes the features encode (tokenClasses).

/** The second seed's log line: the Heads view's default text. */
export const DEFAULT_TEXT =
  '2024-01-15 10:30:45 ERROR [order-api] connection_timeout retry=3 duration=5000ms service=database';

/** Tokens kept by default (the Heads view's limit; the token note says when a text has more). */
export const MAX_TOKENS = 128;

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
