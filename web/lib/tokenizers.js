// Tokenizers for a reader's own text: characters (grapheme clusters, as the Heads view splits a
// sentence) and a byte-level BPE trained on the text in the page (GPT-2's scheme: UTF-8 bytes,
// merges learned by pair frequency inside pre-tokenized chunks). Plain JavaScript like tasks.js:
// no WebAssembly and no network, so a page, a Worker or a Node script uses it the same way.
//
//   import { trainBpe, charTokenizer, tokenizerFromJSON } from 'headscope/tokenizers';
//   const bpe = trainBpe(text, { vocabSize: 512, special: ['<pad>', '<bos>'] });
//   const ids = bpe.encode('the cat');          // Int32Array of token ids
//   bpe.decode(ids);                            // 'the cat': every well-formed string round-trips
//   bpe.vocab;                                  // each id's text, for showing the vocabulary
//   tokenizerFromJSON(bpe.toJSON());            // the same tokenizer (its merges and specials)
//
// Ids: the special tokens first (0 .. k-1, in the order given), then (BPE) the 256 bytes, then one
// id per merge in the order learned. Training is deterministic: the same text and options give
// the same merges on every engine (counts are integers; ties go to the pair whose ids are
// smallest, first id first). Special tokens are never produced by encode() from text (a text
// that contains "<bos>" encodes its characters); a caller adds them by id (special['<bos>']).
import { HeadscopeError } from './errors.js';
import { quoteInput } from './tensor.js';

function fail(code, message) {
  throw new HeadscopeError(code, message);
}

function describe(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return `an array of length ${v.length}`;
  if (typeof v === 'string') return `a string of length ${v.length}`;
  return typeof v === 'object' ? `an object (${Object.prototype.toString.call(v).slice(8, -1)})` : `${typeof v} ${String(v)}`;
}

/** The largest vocabulary a tokenizer takes (ids fit an Int32Array and a model's vocabSize). */
export const MAX_VOCAB = 65536;
/** The longest special token. */
const MAX_SPECIAL = 64;

// A text argument: a well-formed string (a lone surrogate has no UTF-8 bytes, so it could not
// round-trip; it is refused by position rather than silently replaced by U+FFFD).
function checkText(text, name) {
  if (typeof text !== 'string') fail('INVALID_ARGUMENT', `${name}: expected a string, got ${describe(text)}`);
  if (!text.isWellFormed()) {
    let i = 0;
    for (; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) i++;
      else if (c >= 0xd800 && c <= 0xdfff) break;
    }
    fail('INVALID_ARGUMENT', `${name}: a lone surrogate (U+${text.charCodeAt(i).toString(16).toUpperCase()}) at index ${i}: ` +
      'expected well-formed Unicode text');
  }
  return text;
}

function checkSpecial(special) {
  if (special === undefined) return [];
  if (!Array.isArray(special) || special.length > 256) {
    fail('INVALID_ARGUMENT', `options.special: expected an array of at most 256 token strings, got ${describe(special)}`);
  }
  const out = [];
  special.forEach((s, i) => {
    if (typeof s !== 'string' || s.length === 0 || s.length > MAX_SPECIAL || !s.isWellFormed()) {
      fail('INVALID_ARGUMENT', `options.special[${i}]: expected a non-empty string of at most ${MAX_SPECIAL} characters, got ${describe(s)}`);
    }
    if (out.includes(s)) fail('INVALID_ARGUMENT', `options.special[${i}]: '${quoteInput(s)}' is listed twice`);
    out.push(s);
  });
  return out;
}

function readOptions(options, allowed) {
  if (options === undefined) return {};
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    fail('INVALID_ARGUMENT', `options: expected an object, got ${describe(options)}`);
  }
  const out = {};
  for (const key of Object.keys(options)) {
    if (!allowed.includes(key)) fail('INVALID_ARGUMENT', `options.${quoteInput(key)}: unknown option (expected one of ${allowed.join(', ')})`);
    out[key] = options[key];
  }
  return out;
}

// Token ids to decode: an array of integers or an Int32Array, each a token of this vocabulary.
function readIds(ids, size) {
  const isArray = Array.isArray(ids) || ids instanceof Int32Array;
  if (!isArray || ids.length > 1 << 26) fail('INVALID_ARGUMENT', `ids: expected an array or Int32Array of token ids, got ${describe(ids)}`);
  const out = new Int32Array(ids.length);
  for (let k = 0; k < ids.length; k++) {
    const v = ids[k];
    if (!Number.isInteger(v) || v < 0 || v >= size) fail('INVALID_ARGUMENT', `ids[${k}]: expected a token id in [0, ${size}), got ${describe(v)}`);
    out[k] = v;
  }
  return out;
}

// ---- Characters ----

const segmenter = () => new Intl.Segmenter(undefined, { granularity: 'grapheme' });

/**
 * A character tokenizer of `text`: one token per distinct grapheme cluster (an emoji family, a
 * letter with its accents: one token each), after options.special, sorted by code units so the
 * vocabulary does not depend on where a character first appears; options.unknown (default
 * '<unk>', added to the specials unless listed) stands for a character the text did not have.
 */
export function charTokenizer(text, options) {
  checkText(text, 'text');
  const o = readOptions(options, ['special', 'unknown']);
  const special = checkSpecial(o.special);
  const unknown = o.unknown === undefined ? '<unk>' : o.unknown;
  if (typeof unknown !== 'string' || unknown.length === 0 || unknown.length > MAX_SPECIAL) {
    fail('INVALID_ARGUMENT', `options.unknown: expected a non-empty string, got ${describe(unknown)}`);
  }
  if (!special.includes(unknown)) special.push(unknown);
  const chars = new Set();
  for (const { segment } of segmenter().segment(text)) chars.add(segment);
  const symbols = [...chars].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  if (special.length + symbols.length > MAX_VOCAB) {
    fail('RESOURCE_EXHAUSTED', `text: ${symbols.length} distinct characters, more than a vocabulary of ${MAX_VOCAB} holds`);
  }
  return makeChar(special, symbols, unknown);
}

function makeChar(special, symbols, unknown) {
  const vocab = [...special, ...symbols];
  const index = new Map(vocab.map((s, i) => [s, i]).slice(special.length));
  const unk = special.indexOf(unknown);
  return Object.freeze({
    kind: 'char',
    vocabSize: vocab.length,
    vocab: Object.freeze(vocab),
    special: Object.freeze(Object.fromEntries(special.map((s, i) => [s, i]))),
    /** Token ids of `text`, one per grapheme cluster (the unknown token for one not in the vocabulary). */
    encode(s) {
      checkText(s, 'text');
      const out = [];
      for (const { segment } of segmenter().segment(s)) out.push(index.get(segment) ?? unk);
      return Int32Array.from(out);
    },
    /** The text of token ids (special tokens as their strings). */
    decode(ids) {
      return Array.from(readIds(ids, vocab.length), (id) => vocab[id]).join('');
    },
    toJSON() {
      return { kind: 'char', special: [...special], unknown, symbols: [...symbols] };
    },
  });
}

// ---- Byte-level BPE ----

// Pre-tokenization (GPT-2's idea, in Unicode classes): a run of letters (with their marks), of
// digits, or of other symbols, each with at most one leading space; other whitespace in runs.
// Merges never cross a chunk, so a word's tokens do not depend on its neighbours.
const CHUNK = /[ ]?[\p{L}\p{M}]+|[ ]?\p{N}+|[ ]?[^\s\p{L}\p{M}\p{N}]+|\s+/gu;

function chunks(text) {
  return text.match(CHUNK) ?? [];
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: false });

// A byte's display text: printable ASCII as itself, anything else as <0xNN>.
const byteText = (b) => (b >= 0x21 && b <= 0x7e ? String.fromCharCode(b) : b === 0x20 ? '␠' : `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);

/**
 * A byte-level BPE tokenizer trained on `text`: options.vocabSize (default 512) ids in all, the
 * options.special tokens, the 256 bytes, then merges learned one at a time: the most frequent
 * adjacent pair of tokens over the text's chunks (ties: the smallest ids) becomes a new token,
 * until the vocabulary is full or no pair occurs twice. `onProgress(merges, total)` (optional) is
 * called every 64 merges. Every well-formed string encodes, and decodes back to itself.
 */
export function trainBpe(text, options) {
  checkText(text, 'text');
  const o = readOptions(options, ['vocabSize', 'special', 'onProgress']);
  const special = checkSpecial(o.special);
  const base = special.length + 256;
  const vocabSize = o.vocabSize === undefined ? 512 : o.vocabSize;
  if (!Number.isInteger(vocabSize) || vocabSize < base || vocabSize > MAX_VOCAB) {
    fail('INVALID_ARGUMENT', `options.vocabSize: expected an integer in [${base}, ${MAX_VOCAB}] (the specials and 256 bytes, ` +
      `then merges), got ${describe(vocabSize)}`);
  }
  if (o.onProgress !== undefined && typeof o.onProgress !== 'function') {
    fail('INVALID_ARGUMENT', `options.onProgress: expected a function, got ${describe(o.onProgress)}`);
  }
  // The distinct chunks with their counts, each as a list of token ids (bytes at first).
  const counts = new Map();
  for (const c of chunks(text)) counts.set(c, (counts.get(c) ?? 0) + 1);
  const words = [...counts.keys()].sort().map((c) => ({ ids: Array.from(encoder.encode(c), (b) => b + special.length), n: counts.get(c) }));
  const merges = [];
  const PAIR = 1 << 17;  // a pair's key: a * PAIR + b (ids < 2^16 + 256 < 2^17)
  while (base + merges.length < vocabSize) {
    const pairs = new Map();
    for (const w of words) {
      for (let k = 0; k + 1 < w.ids.length; k++) {
        const key = w.ids[k] * PAIR + w.ids[k + 1];
        pairs.set(key, (pairs.get(key) ?? 0) + w.n);
      }
    }
    let best = -1;
    let most = 1;  // a pair must occur at least twice to be worth a token
    for (const [key, n] of pairs) if (n > most || (n === most && best >= 0 && key < best)) [best, most] = [key, n];
    if (best < 0) break;
    const a = Math.floor(best / PAIR), b = best % PAIR, id = base + merges.length;
    merges.push([a, b]);
    for (const w of words) {
      const ids = w.ids;
      let out = 0;
      for (let k = 0; k < ids.length; k++) {
        if (k + 1 < ids.length && ids[k] === a && ids[k + 1] === b) {
          ids[out++] = id;
          k++;
        } else {
          ids[out++] = ids[k];
        }
      }
      ids.length = out;
    }
    if (o.onProgress && merges.length % 64 === 0) o.onProgress(merges.length, vocabSize - base);
  }
  return makeBpe(special, merges);
}

function makeBpe(special, merges) {
  const k = special.length;
  const base = k + 256;
  // Each token's bytes and display text.
  const bytes = [];
  for (let i = 0; i < k; i++) bytes.push(encoder.encode(special[i]));
  for (let b = 0; b < 256; b++) bytes.push(Uint8Array.of(b));
  const text = [...special, ...Array.from({ length: 256 }, (_, b) => byteText(b))];
  const rank = new Map();
  merges.forEach(([a, b], m) => {
    const joined = new Uint8Array(bytes[a].length + bytes[b].length);
    joined.set(bytes[a]);
    joined.set(bytes[b], bytes[a].length);
    bytes.push(joined);
    text.push(text[a] + text[b]);
    rank.set(a * (1 << 17) + b, m);
  });
  // A chunk's ids: its bytes, then the learned merge of lowest rank applied wherever it occurs,
  // again and again (GPT-2's encode), which reproduces how training merged the same chunk.
  const cache = new Map();
  function encodeChunk(c) {
    let ids = cache.get(c);
    if (ids !== undefined) return ids;
    ids = Array.from(encoder.encode(c), (b) => b + k);
    for (;;) {
      let best = -1, bestRank = Infinity;
      for (let i = 0; i + 1 < ids.length; i++) {
        const r = rank.get(ids[i] * (1 << 17) + ids[i + 1]);
        if (r !== undefined && r < bestRank) [best, bestRank] = [i, r];
      }
      if (best < 0) break;
      const [a, b] = merges[bestRank];
      const out = [];
      for (let i = 0; i < ids.length; i++) {
        if (i + 1 < ids.length && ids[i] === a && ids[i + 1] === b) {
          out.push(base + bestRank);
          i++;
        } else {
          out.push(ids[i]);
        }
      }
      ids = out;
    }
    if (cache.size < 1 << 16) cache.set(c, ids);
    return ids;
  }
  const vocabSize = base + merges.length;
  return Object.freeze({
    kind: 'bpe',
    vocabSize,
    vocab: Object.freeze(text),
    special: Object.freeze(Object.fromEntries(special.map((s, i) => [s, i]))),
    merges: merges.length,
    /** Token ids of `text` (never a special token: add those by id). */
    encode(s) {
      checkText(s, 'text');
      const out = [];
      for (const c of chunks(s)) for (const id of encodeChunk(c)) out.push(id);
      return Int32Array.from(out);
    },
    /** The text of token ids: their bytes as UTF-8 (special tokens as their strings). */
    decode(ids) {
      const list = readIds(ids, vocabSize);
      let n = 0;
      for (const id of list) n += bytes[id].length;
      const all = new Uint8Array(n);
      let at = 0;
      for (const id of list) {
        all.set(bytes[id], at);
        at += bytes[id].length;
      }
      return decoder.decode(all);
    },
    toJSON() {
      return { kind: 'bpe', special: [...special], merges: merges.map((m) => [...m]) };
    },
  });
}

/** A tokenizer from its toJSON() (checked: a malformed document is refused naming the field). */
export function tokenizerFromJSON(doc) {
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) fail('INVALID_ARGUMENT', `doc: expected a tokenizer's toJSON(), got ${describe(doc)}`);
  const special = checkSpecial(doc.special);
  if (doc.kind === 'char') {
    if (!Array.isArray(doc.symbols) || special.length + doc.symbols.length > MAX_VOCAB ||
        !doc.symbols.every((s) => typeof s === 'string' && s.length > 0 && s.isWellFormed())) {
      fail('INVALID_ARGUMENT', 'doc.symbols: expected an array of non-empty strings');
    }
    if (new Set(doc.symbols).size !== doc.symbols.length) fail('INVALID_ARGUMENT', 'doc.symbols: a symbol is listed twice');
    if (!special.includes(doc.unknown)) fail('INVALID_ARGUMENT', 'doc.unknown: expected one of doc.special');
    return makeChar(special, [...doc.symbols], doc.unknown);
  }
  if (doc.kind === 'bpe') {
    const base = special.length + 256;
    if (!Array.isArray(doc.merges) || base + doc.merges.length > MAX_VOCAB) {
      fail('INVALID_ARGUMENT', `doc.merges: expected an array of at most ${MAX_VOCAB - base} [id, id] pairs`);
    }
    const seen = new Set();
    const merges = doc.merges.map((m, i) => {
      const limit = base + i;  // a merge joins tokens that exist before it
      if (!Array.isArray(m) || m.length !== 2 || !m.every((v) => Number.isInteger(v) && v >= special.length && v < limit)) {
        fail('INVALID_ARGUMENT', `doc.merges[${i}]: expected two token ids in [${special.length}, ${limit}), got ${describe(m)}`);
      }
      if (seen.has(`${m[0]},${m[1]}`)) fail('INVALID_ARGUMENT', `doc.merges[${i}]: the pair [${m[0]}, ${m[1]}] is merged twice`);
      seen.add(`${m[0]},${m[1]}`);
      return [m[0], m[1]];
    });
    return makeBpe(special, merges);
  }
  fail('INVALID_ARGUMENT', `doc.kind: expected 'char' or 'bpe', got ${describe(doc.kind)}`);
}
