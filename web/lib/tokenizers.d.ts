// Tokenizers for a reader's own text: `import { trainBpe, charTokenizer } from 'headscope/tokenizers'`.
// The definitions (ids, training, determinism) are in web/lib/tokenizers.js and docs/api.md.

/** What both tokenizers offer. */
export interface Tokenizer {
  readonly kind: 'char' | 'bpe';
  /** Ids in all: the special tokens, then the symbols (char) or the 256 bytes and the merges (bpe). */
  readonly vocabSize: number;
  /** Each id's text, for showing the vocabulary (a byte outside printable ASCII as <0xNN>, a space as ␠). */
  readonly vocab: readonly string[];
  /** The special tokens' ids by their strings. */
  readonly special: Readonly<Record<string, number>>;
  /** Token ids of well-formed text (a lone surrogate is refused); never a special token. */
  encode(text: string): Int32Array;
  /** The text of token ids. */
  decode(ids: ArrayLike<number>): string;
  /** A JSON document tokenizerFromJSON takes back. */
  toJSON(): CharTokenizerJSON | BpeTokenizerJSON;
}

export interface BpeTokenizer extends Tokenizer {
  readonly kind: 'bpe';
  /** Merges learned (vocabSize - specials - 256). */
  readonly merges: number;
}

export interface CharTokenizerJSON { kind: 'char'; special: string[]; unknown: string; symbols: string[] }
export interface BpeTokenizerJSON { kind: 'bpe'; special: string[]; merges: [number, number][] }

/** The largest vocabulary a tokenizer takes. */
export declare const MAX_VOCAB: number;

/** One token per grapheme cluster of `text` (sorted), after the specials; options.unknown (default '<unk>') for others. */
export declare function charTokenizer(text: string, options?: { special?: readonly string[]; unknown?: string }): Tokenizer;

/** A byte-level BPE trained on `text`: options.vocabSize ids (default 512), deterministic. */
export declare function trainBpe(text: string, options?: {
  vocabSize?: number;
  special?: readonly string[];
  onProgress?: (merges: number, total: number) => void;
}): BpeTokenizer;

/** A tokenizer from its toJSON(). */
export declare function tokenizerFromJSON(doc: CharTokenizerJSON | BpeTokenizerJSON): Tokenizer;
