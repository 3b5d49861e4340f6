// The built-in training tasks: `import { makeTask, TASKS } from 'headscope/tasks'`.
// Every task and option is defined in docs/tasks.md.
import type { TensorInput, TokenTensor, TokensInput } from './index.js';

export type TaskName =
  | 'copy'
  | 'reverse'
  | 'sort'
  | 'previous-token'
  | 'induction'
  | 'kv-lookup'
  | 'brackets'
  | 'log-line';

/** Options every task takes. */
export interface CommonTaskOptions {
  /** T, the length of every sequence, up to 512 (default 32; log-line 18, its minimum too). */
  seqLen?: number;
  /** An integer in [0, 2^53 - 1] (default 0): the generator key of every training and held-out row. */
  seed?: number;
}

/** copy, reverse, sort. */
export interface AnswerTaskOptions extends CommonTaskOptions {
  /** Symbols a to z then A to Z, 2 to 52 (default 20). */
  symbols?: number;
  /** n, tokens of the input and of the answer, 1 to (seqLen - 2) / 2 (default that maximum). */
  length?: number;
}

export interface PreviousTokenOptions extends CommonTaskOptions {
  /** 2 to 52 (default 26). */
  symbols?: number;
}

export interface InductionOptions extends CommonTaskOptions {
  /** 2 to 52 (default 26). */
  symbols?: number;
  /** Longest period, at most symbols and (seqLen - 1) / 2 (default that maximum: 15 at T 32). */
  maxLength?: number;
  /** Shortest period, 2 to maxLength (default ceil(maxLength / 2): 8 at T 32). */
  minLength?: number;
}

export interface KvLookupOptions extends CommonTaskOptions {
  /** Key symbols a.., 1 to 26 (default 14). */
  keys?: number;
  /** Value symbols 0.., 2 to 10 (default 10). */
  values?: number;
  /** Key-value pairs per sequence, distinct keys (default 10 at T 32). */
  pairs?: number;
  /** Keys asked after <sep>, distinct (default 5 at T 32); 2 + 2 (pairs + queries) <= seqLen. */
  queries?: number;
}

export interface BracketsOptions extends CommonTaskOptions {
  /** Bracket kinds: 1 (), 2 also [], 3 also {} (default 2). */
  types?: number;
  /** Longest string, even, at most seqLen - 3 (default that maximum: 28 at T 32). */
  maxLength?: number;
  /** Shortest string, even, 2 to maxLength (default 2). */
  minLength?: number;
}

export interface TaskOptionsByName {
  copy: AnswerTaskOptions;
  reverse: AnswerTaskOptions;
  sort: AnswerTaskOptions;
  'previous-token': PreviousTokenOptions;
  induction: InductionOptions;
  'kv-lookup': KvLookupOptions;
  brackets: BracketsOptions;
  'log-line': CommonTaskOptions;
}

/** (B, T) token ids and targets (-100 where nothing is predicted), int32 both. */
export interface TaskBatch {
  tokens: TokenTensor;
  targets: TokenTensor;
}

export interface TaskProbe extends TaskBatch {
  /** describe() of the probe's tokens. */
  text: string;
}

export interface TaskEvaluation {
  /** Mean cross-entropy over the counted positions (float64; F.cross_entropy(ignore_index=-100)). */
  loss: number;
  /** correct / counted: the fraction of counted positions whose first largest logit is the target. */
  accuracy: number;
  /** sequencesCorrect / sequences: the fraction of rows with every counted position right. */
  sequenceAccuracy: number;
  correct: number;
  counted: number;
  sequencesCorrect: number;
  /** Rows with at least one counted position. */
  sequences: number;
}

export interface AccuracyOptions {
  /** 'position' (default): per counted position; 'sequence': the whole answer of a row exactly. */
  measure?: 'position' | 'sequence';
}

/** Logits as model.forward returns them: (B, T, V) with targets (B, T), or (T, V) with (T). */
export type LogitsInput = TensorInput;

export interface Task<N extends TaskName = TaskName> {
  readonly name: N;
  readonly description: string;
  /** The options with their defaults filled in. */
  readonly options: Readonly<Required<TaskOptionsByName[N]>>;
  readonly seqLen: number;
  readonly vocabSize: number;
  /** The display string of every token id, vocab[id]. */
  readonly vocab: readonly string[];
  /** Training rows index * batchSize .. (index + 1) * batchSize - 1 of this seed: the same bits every call. */
  batch(batchSize: number, index: number): TaskBatch;
  /** The same from the held-out stream, whose rows never share a generator key with training rows. */
  heldOut(batchSize: number, index: number): TaskBatch;
  /** One fixed illustrative row, (1, T), the same whatever the seed. */
  probe(): TaskProbe;
  accuracy(logits: LogitsInput, targets: TokensInput, options?: AccuracyOptions): number;
  evaluate(logits: LogitsInput, targets: TokensInput): TaskEvaluation;
  /** One sequence, (T) or (1, T), as text: display strings separated by spaces (retry=3 joined). */
  describe(tokens: TokensInput | Int32Array): string;
}

/** Every built-in task with a one-line description, in a fixed order. */
export declare const TASKS: readonly { readonly name: TaskName; readonly description: string }[];

export declare function makeTask<N extends TaskName>(name: N, options?: TaskOptionsByName[N]): Task<N>;
