// Built-in tasks for training the small transformer: deterministic generators of (tokens, targets)
// batches from a seed, with each task's vocabulary, a fixed probe input, accuracy and a text
// rendering. Plain JS with no Node imports and no WebAssembly: pages and Workers import it too.
//
//   import { makeTask, TASKS } from 'headscope/tasks';
//   const task = makeTask('induction', { seqLen: 32, seed: 1 });
//   const { tokens, targets } = task.batch(16, step);   // (B, T) int32 each
//
// Targets follow the reference loss (F.cross_entropy(ignore_index=-100) over logits (B, T, V) and
// targets (B, T)): targets[b][t] is what the logits at position t should predict, -100 where
// nothing is. Every task is next-token prediction (the target is the following token) except
// previous-token, whose target is the token before. docs/tasks.md defines every task.
//
// Randomness: a counter-based generator (below), so a row is a pure function of (seed, stream,
// row number) and the same bits come out in Node and every browser.
import { HeadscopeError } from './errors.js';
import { IGNORE_INDEX, caseLoss } from './case.js';
import {
  Tensor, describe, quoteInput, readArgument, toFloatTensor, toTokens, typedArrayLength, typedArrayName,
  typedArraySet,
} from './tensor.js';

const MAX_SEQ_LEN = 512;
const MAX_BATCH = 4096;
const MAX_SEED = Number.MAX_SAFE_INTEGER;   // 2^53 - 1, as generate()'s seed
const TWO_32 = 2 ** 32;

// The streams a row can come from: a row's generator key is (seed, stream, row), so training,
// held-out and probe rows never share a key.
const TRAIN = 0;
const HELD_OUT = 1;
const PROBE = 2;

function fail(code, message) {
  throw new HeadscopeError(code, message);
}

// What a caller gave, for a message: a number as itself (`got 3`), anything else described.
const shown = (value) => (typeof value === 'number' ? String(value) : describe(value));

// ---------------------------------------------------------------------------------------------
// The generator. mix32 is Chris Wellons' "triple32" integer hash (a bijection on 32 bits with
// near-ideal avalanche). Draw number i of a row is
//   mix32(mix32(mix32(mix32(mix32(i ^ 0x9e3779b9) ^ seedLo) ^ seedHi) ^ (stream * 2^21 + rowHi)) ^ rowLo)
// where seed = seedHi * 2^32 + seedLo and row = rowHi * 2^32 + rowLo (row < 2^53, so rowHi < 2^21).
// The key words are an injective function of (seed, stream, row), and for a fixed draw number
// each step is a bijection in its word: two rows whose keys differ in one word differ in every
// draw. An integer in [0, n) is a draw u taken if u < 2^32 - (2^32 mod n) (else the next draw),
// reduced mod n: exactly uniform. Only Math.imul, shifts and xor: the same bits everywhere.

function mix32(x) {
  x ^= x >>> 17;
  x = Math.imul(x, 0xed5ad4bb);
  x ^= x >>> 11;
  x = Math.imul(x, 0xac4c1b51);
  x ^= x >>> 15;
  x = Math.imul(x, 0x31848bab);
  x ^= x >>> 14;
  return x >>> 0;
}

class RowRandom {
  constructor(seed, stream, row) {
    this.seedLo = seed % TWO_32;
    this.seedHi = Math.floor(seed / TWO_32);
    this.streamRowHi = stream * 2 ** 21 + Math.floor(row / TWO_32);
    this.rowLo = row % TWO_32;
    this.counter = 0;
  }

  /** The next uint32 draw. */
  next() {
    let h = mix32((this.counter++ ^ 0x9e3779b9) >>> 0);
    h = mix32(h ^ this.seedLo);
    h = mix32(h ^ this.seedHi);
    h = mix32(h ^ this.streamRowHi);
    return mix32(h ^ this.rowLo);
  }

  /** A uniform integer in [0, n), 1 <= n <= 2^32. */
  below(n) {
    const limit = TWO_32 - (TWO_32 % n);
    for (;;) {
      const u = this.next();
      if (u < limit) return u % n;
    }
  }

  /** A uniform integer in [lo, hi]. */
  between(lo, hi) {
    return lo + this.below(hi - lo + 1);
  }

  /**
   * Shuffles `list` in place (Fisher-Yates from the front: entry i swaps with a uniform j in
   * [i, length)); with `count`, only the first `count` steps, which make the first `count`
   * entries a uniform ordered sample without replacement. Returns the list.
   */
  shuffle(list, count = list.length) {
    for (let i = 0; i < count && i < list.length - 1; i++) {
      const j = i + this.below(list.length - i);
      const t = list[i];
      list[i] = list[j];
      list[j] = t;
    }
    return list;
  }

  /** One element of `list`, uniformly. */
  pick(list) {
    return list[this.below(list.length)];
  }
}

// ---------------------------------------------------------------------------------------------
// Options: each task lists its options in the order they are resolved; a later option's range
// may depend on earlier ones (a length must fit seqLen). Every option is an integer.

const LETTERS = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
const letters = (n) => Array.from(LETTERS.slice(0, n));
const halfOf = (n) => Math.floor(n / 2);
const evenBelow = (n) => n - (n % 2);

const seqLenOption = (min, value) => ['seqLen', () => ({ min, max: MAX_SEQ_LEN, value })];
const SEED_OPTION = ['seed', () => ({ min: 0, max: MAX_SEED, value: 0 })];
const symbolsOption = (value) => ['symbols', () => ({ min: 2, max: LETTERS.length, value })];

/** An options argument read once: own enumerable keys, each read once, all of them known. */
function readOptions(options, known) {
  if (options === undefined) return {};
  return readArgument('options', () => {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      fail('INVALID_ARGUMENT', `options: expected an object, got ${describe(options)}`);
    }
    const out = {};
    for (const key of Object.keys(options)) {
      if (!known.includes(key)) {
        fail('INVALID_ARGUMENT', `options.${quoteInput(key)}: unknown option (expected one of ${known.join(', ')})`);
      }
      out[key] = options[key];
    }
    return out;
  });
}

function resolveOptions(given, specs) {
  const o = {};
  for (const [key, rangeOf] of specs) {
    const { min, max, value, even = false, why = '' } = rangeOf(o);
    const v = given[key];
    if (v === undefined) {
      o[key] = value;
      continue;
    }
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max || (even && v % 2 !== 0)) {
      fail('INVALID_ARGUMENT', `options.${key}: expected ${even ? 'an even integer' : 'an integer'} ` +
        `in [${min}, ${max}]${why ? ` (${why})` : ''}, got ${shown(v)}`);
    }
    o[key] = v;
  }
  return Object.freeze(o);
}

// ---------------------------------------------------------------------------------------------
// The tasks. Each definition has a name, a one-line description, its option specs and
// build(options) -> { vocab, write(random, tokens, targets, isProbe) }, where write fills one row
// (tokens prefilled with id 0, targets with -100) and isProbe asks for the illustrative variant.

// copy, reverse, sort: <bos> x_1 .. x_n <sep> answer_1 .. answer_n <pad> ..., the answer counted.
function answerTask(name, description, answerOf) {
  return {
    name,
    description,
    options: [
      seqLenOption(4, 32), SEED_OPTION, symbolsOption(20),
      ['length', (o) => {
        const max = halfOf(o.seqLen - 2);
        return { min: 1, max, value: max, why: `<bos>, <sep> and twice the length must fit seqLen = ${o.seqLen}` };
      }],
    ],
    build(o) {
      const BOS = 1, SEP = 2;   // and <pad> (0) after the answer when 2 x length + 2 < seqLen
      const vocab = ['<pad>', '<bos>', '<sep>', ...letters(o.symbols)];
      const n = o.length;
      return {
        vocab,
        write(random, tokens, targets) {
          const x = Array.from({ length: n }, () => SEP + 1 + random.below(o.symbols));
          const answer = answerOf(x);
          tokens[0] = BOS;
          for (let i = 0; i < n; i++) tokens[1 + i] = x[i];
          tokens[n + 1] = SEP;
          for (let i = 0; i < n; i++) {
            tokens[n + 2 + i] = answer[i];
            targets[n + 1 + i] = answer[i];
          }
        },
      };
    },
  };
}

const previousToken = {
  name: 'previous-token',
  description: 'random symbols; predict at each position the token before it (a previous-token head)',
  options: [seqLenOption(3, 32), SEED_OPTION, symbolsOption(26)],
  build(o) {
    const BOS = 0;
    return {
      vocab: ['<bos>', ...letters(o.symbols)],
      write(random, tokens, targets) {
        tokens[0] = BOS;
        for (let t = 1; t < tokens.length; t++) tokens[t] = 1 + random.below(o.symbols);
        for (let t = 2; t < tokens.length; t++) targets[t] = tokens[t - 1];
      },
    };
  },
};

const induction = {
  name: 'induction',
  description: 'a random sequence of distinct symbols repeated (random period): the repeats are ' +
    'predictable by an induction head (two layers)',
  options: [
    seqLenOption(5, 32), SEED_OPTION, symbolsOption(26),
    ['maxLength', (o) => {
      const max = Math.min(o.symbols, halfOf(o.seqLen - 1));
      return { min: 2, max, value: max, why: `at most symbols = ${o.symbols} distinct symbols, ` +
        `repeated at least once after <bos> within seqLen = ${o.seqLen}` };
    }],
    ['minLength', (o) => ({ min: 2, max: o.maxLength, value: Math.max(2, Math.ceil(o.maxLength / 2)),
      why: `at most maxLength = ${o.maxLength}` })],
  ],
  build(o) {
    const BOS = 0;
    const symbols = Array.from({ length: o.symbols }, (_, s) => 1 + s);
    return {
      vocab: ['<bos>', ...letters(o.symbols)],
      write(random, tokens, targets, isProbe) {
        const T = tokens.length;
        const n = isProbe ? o.maxLength : random.between(o.minLength, o.maxLength);
        const x = random.shuffle(symbols.slice(), n);
        tokens[0] = BOS;
        for (let i = 0; i < T - 1; i++) tokens[1 + i] = x[i % n];
        // From the second copy's first token on, the next token is the one after the previous
        // occurrence of the current one.
        for (let t = n + 1; t < T - 1; t++) targets[t] = tokens[t + 1];
      },
    };
  },
};

const kvLookup = {
  name: 'kv-lookup',
  description: 'key-value pairs, then keys asked again: predict each asked key\'s value',
  options: [
    seqLenOption(6, 32), SEED_OPTION,
    ['keys', () => ({ min: 1, max: 26, value: 14 })],
    ['values', () => ({ min: 2, max: 10, value: 10 })],
    ['pairs', (o) => {
      const slots = halfOf(o.seqLen - 2);   // pairs + queries
      const max = Math.min(o.keys, slots - 1);
      return { min: 1, max, value: Math.min(max, Math.round((2 * slots) / 3)), why: `distinct ` +
        `keys (keys = ${o.keys}), leaving room for a query: 2 + 2 x (pairs + queries) <= seqLen = ${o.seqLen}` };
    }],
    ['queries', (o) => {
      const max = Math.min(o.pairs, halfOf(o.seqLen - 2) - o.pairs);
      return { min: 1, max, value: max, why: `distinct keys of the pairs = ${o.pairs}, and ` +
        `2 + 2 x (pairs + queries) <= seqLen = ${o.seqLen}` };
    }],
  ],
  build(o) {
    const BOS = 1, SEP = 2, KEY0 = 3, VALUE0 = 3 + o.keys;
    const keyIds = Array.from({ length: o.keys }, (_, k) => KEY0 + k);
    const pairIndices = Array.from({ length: o.pairs }, (_, i) => i);
    return {
      vocab: ['<pad>', '<bos>', '<sep>', ...letters(o.keys),
        ...Array.from({ length: o.values }, (_, v) => String(v))],
      write(random, tokens, targets) {
        const keys = random.shuffle(keyIds.slice(), o.pairs);
        const values = Array.from({ length: o.pairs }, () => VALUE0 + random.below(o.values));
        tokens[0] = BOS;
        for (let i = 0; i < o.pairs; i++) {
          tokens[1 + 2 * i] = keys[i];
          tokens[2 + 2 * i] = values[i];
        }
        const at = 1 + 2 * o.pairs;
        tokens[at] = SEP;
        const asked = random.shuffle(pairIndices.slice(), o.queries);
        for (let q = 0; q < o.queries; q++) {
          const p = at + 1 + 2 * q;
          tokens[p] = keys[asked[q]];
          tokens[p + 1] = values[asked[q]];
          targets[p] = values[asked[q]];
        }
      },
    };
  },
};

const BRACKETS = [['(', ')'], ['[', ']'], ['{', '}']];

const brackets = {
  name: 'brackets',
  description: 'a string of brackets, then "=": predict yes if it is balanced, no if not (half of ' +
    'each; the unbalanced ones are balanced strings with two characters swapped)',
  options: [
    seqLenOption(5, 32), SEED_OPTION,
    ['types', () => ({ min: 1, max: BRACKETS.length, value: 2 })],
    ['maxLength', (o) => {
      const max = evenBelow(o.seqLen - 3);
      return { min: 2, max, value: max, even: true, why: `<bos>, "=" and the label must fit seqLen = ${o.seqLen}` };
    }],
    ['minLength', (o) => ({ min: 2, max: o.maxLength, value: 2, even: true, why: `at most maxLength = ${o.maxLength}` })],
  ],
  build(o) {
    const BOS = 1, EQUALS = 2, YES = 3, NO = 4, OPEN0 = 5;   // type k: open 5 + 2k, close 6 + 2k
    const vocab = ['<pad>', '<bos>', '=', 'yes', 'no', ...BRACKETS.slice(0, o.types).flat()];
    return {
      vocab,
      write(random, tokens, targets, isProbe) {
        const n = isProbe ? o.maxLength : o.minLength + 2 * random.below((o.maxLength - o.minLength) / 2 + 1);
        const balanced = isProbe || random.below(2) === 0;
        const s = balancedBrackets(random, n, o.types, OPEN0);
        if (!balanced) unbalance(random, s, OPEN0);
        tokens[0] = BOS;
        s.forEach((id, i) => { tokens[1 + i] = id; });
        tokens[n + 1] = EQUALS;
        tokens[n + 2] = balanced ? YES : NO;
        targets[n + 1] = tokens[n + 2];
      },
    };
  },
};

// A uniformly random balanced string of n (even) brackets, by the cycle lemma: of the rotations
// of a shuffled sequence of n/2 opens and n/2 + 1 closes, exactly one stays at or above depth 0
// until its last close; that rotation without its last close is the word. Each opener then gets
// a uniform type, and its closer the same.
function balancedBrackets(random, n, types, open0) {
  const steps = random.shuffle([...Array(n / 2).fill(1), ...Array(n / 2 + 1).fill(-1)]);
  let depth = 0, lowest = 0, start = 0;
  steps.forEach((step, i) => {
    depth += step;
    if (depth < lowest) { lowest = depth; start = i + 1; }
  });
  const ids = [];
  const open = [];
  for (let i = 0; i < n; i++) {
    if (steps[(start + i) % steps.length] === 1) {
      const type = random.below(types);
      open.push(type);
      ids.push(open0 + 2 * type);
    } else {
      ids.push(open0 + 2 * open.pop() + 1);
    }
  }
  return ids;
}

function isBalanced(ids, open0) {
  const stack = [];
  for (const id of ids) {
    if ((id - open0) % 2 === 0) stack.push(id + 1);
    else if (stack.pop() !== id) return false;
  }
  return stack.length === 0;
}

// Swaps two different characters of a balanced string until it is not balanced (the counts of
// every bracket kind stay equal, so counting alone cannot tell); after 64 draws that stay
// balanced, swaps the first (an opener) with the last (a closer), which never is.
function unbalance(random, ids, open0) {
  const n = ids.length;
  for (let attempt = 0; attempt < 64; attempt++) {
    const i = random.below(n);
    let j = random.below(n - 1);
    if (j >= i) j++;
    if (ids[i] === ids[j]) continue;
    [ids[i], ids[j]] = [ids[j], ids[i]];
    if (!isBalanced(ids, open0)) return;
    [ids[i], ids[j]] = [ids[j], ids[i]];
  }
  [ids[0], ids[n - 1]] = [ids[n - 1], ids[0]];
}

// The log-line task (after the second seed's example of reading an operations log). A line:
//   <bos> DATE TIME LEVEL [COMPONENT] EVENT key=value ... ? LABEL
// with duration= and service= always present and retry=, timeout= (same values as duration) and
// upstream= (same values as service) each present half the time, in a random order. LABEL is PAGE
// iff level = ERROR, service is database or payment, and duration is over 1000ms; else OK.
// Half the lines are PAGE; each OK line breaks exactly one of the three conditions (a uniform
// one), so a reader of k of the three fields can score at most (3 + k) / 6.
const LOG = Object.freeze({
  dates: ['2024-01-15', '2024-01-16', '2024-02-29'],
  times: ['10:30:45', '03:12:09', '18:47:30'],
  levels: ['DEBUG', 'INFO', 'WARN', 'ERROR'],
  components: ['[order-api]', '[user-api]', '[gateway]', '[billing-job]'],
  events: ['connection_timeout', 'query_slow', 'request_done', 'cache_miss'],
  keys: ['retry=', 'duration=', 'timeout=', 'service=', 'upstream='],
  retries: ['0', '1', '2', '3'],
  durations: ['100ms', '250ms', '500ms', '1000ms', '1500ms', '3000ms', '5000ms', '9000ms'],
  services: ['database', 'payment', 'cache', 'search', 'auth'],
});
const LOG_THRESHOLD_MS = 1000;
const LOG_CRITICAL = ['database', 'payment'];
const LOG_VOCAB = Object.freeze(['<pad>', '<bos>', '?', 'PAGE', 'OK', ...LOG.dates, ...LOG.times,
  ...LOG.levels, ...LOG.components, ...LOG.events, ...LOG.keys, ...LOG.retries, ...LOG.durations,
  ...LOG.services]);
const LOG_LONGEST = 1 + 5 + 2 * LOG.keys.length + 2;   // every optional field present
const logId = (text) => LOG_VOCAB.indexOf(text);
const logIds = (texts) => texts.map(logId);
// The second seed's line, the probe: it pages (ERROR, database, 5000ms).
const SEED_LINE = ['2024-01-15', '10:30:45', 'ERROR', '[order-api]', 'connection_timeout',
  'retry=', '3', 'duration=', '5000ms', 'service=', 'database'];

const logLine = {
  name: 'log-line',
  description: 'a generated log line; predict at "?" whether to page the on-call: level ERROR, ' +
    'service database or payment and duration over 1000ms, all three',
  options: [seqLenOption(LOG_LONGEST, LOG_LONGEST), SEED_OPTION],
  build() {
    const ids = {
      dates: logIds(LOG.dates), times: logIds(LOG.times), components: logIds(LOG.components),
      events: logIds(LOG.events), retries: logIds(LOG.retries), durations: logIds(LOG.durations),
      services: logIds(LOG.services), calmLevels: logIds(['DEBUG', 'INFO', 'WARN']),
      critical: logIds(LOG_CRITICAL), calmServices: logIds(LOG.services.filter((s) => !LOG_CRITICAL.includes(s))),
      long: logIds(LOG.durations.filter((d) => parseInt(d, 10) > LOG_THRESHOLD_MS)),
      short: logIds(LOG.durations.filter((d) => parseInt(d, 10) <= LOG_THRESHOLD_MS)),
    };
    const [RETRY, DURATION, TIMEOUT, SERVICE, UPSTREAM] = logIds(LOG.keys);
    const BOS = logId('<bos>'), QUERY = logId('?'), PAGE = logId('PAGE'), OK = logId('OK');
    return {
      vocab: LOG_VOCAB,
      glue: new Set(logIds(LOG.keys)),   // retry=3, not retry= 3
      write(random, tokens, targets, isProbe) {
        let line;
        let page;
        if (isProbe) {
          line = logIds(SEED_LINE);
          page = true;
        } else {
          page = random.below(2) === 0;
          const broken = page ? -1 : random.below(3);   // 0 level, 1 service, 2 duration
          line = [random.pick(ids.dates), random.pick(ids.times),
            broken === 0 ? random.pick(ids.calmLevels) : logId('ERROR'),
            random.pick(ids.components), random.pick(ids.events)];
          const fields = [
            [DURATION, random.pick(broken === 2 ? ids.short : ids.long)],
            [SERVICE, random.pick(broken === 1 ? ids.calmServices : ids.critical)],
          ];
          if (random.below(2) === 0) fields.push([RETRY, random.pick(ids.retries)]);
          if (random.below(2) === 0) fields.push([TIMEOUT, random.pick(ids.durations)]);
          if (random.below(2) === 0) fields.push([UPSTREAM, random.pick(ids.services)]);
          for (const field of random.shuffle(fields)) line.push(...field);
        }
        tokens[0] = BOS;
        line.forEach((id, i) => { tokens[1 + i] = id; });
        const q = line.length + 1;
        tokens[q] = QUERY;
        tokens[q + 1] = page ? PAGE : OK;
        targets[q] = tokens[q + 1];
      },
    };
  },
};

const DEFINITIONS = [
  answerTask('copy', '<bos> x <sep>, then x again: predict each token of the copy', (x) => x),
  answerTask('reverse', '<bos> x <sep>, then x backwards: predict each token of the reversal',
    (x) => x.slice().reverse()),
  answerTask('sort', '<bos> x <sep>, then x sorted (a before b): predict each token of the sorted ' +
    'list', (x) => x.slice().sort((a, b) => a - b)),
  previousToken, induction, kvLookup, brackets, logLine,
];
const BY_NAME = new Map(DEFINITIONS.map((d) => [d.name, d]));

/** Every built-in task: { name, description }, in this order. */
export const TASKS = Object.freeze(DEFINITIONS.map(({ name, description }) =>
  Object.freeze({ name, description })));

// ---------------------------------------------------------------------------------------------
// Scoring: the same for every task.

/** (logits, targets) read once: { logits: Float32Array, targets: Int32Array copy, B, T, V }. */
function readScored(logits, targets) {
  const l = toFloatTensor(logits, 'logits');
  const t = toTokens(targets, 'targets');
  const batched = l.shape.length === 3;
  if (!batched && l.shape.length !== 2) {
    fail('SHAPE_MISMATCH', `logits: expected (B, T, V) or (T, V) logits, got shape [${l.shape.join(', ')}]`);
  }
  const [B, T, V] = batched ? l.shape : [1, ...l.shape];
  const want = batched ? [B, T] : [T];
  if (t.shape.length !== want.length || t.shape.some((d, i) => d !== want[i])) {
    fail('SHAPE_MISMATCH', `targets: expected shape ${batched ? '(B, T)' : '(T)'} = [${want.join(', ')}] ` +
      `to match logits [${l.shape.join(', ')}], got [${t.shape.join(', ')}]`);
  }
  if (V < 1) fail('SHAPE_MISMATCH', 'logits: expected at least one logit per position (V >= 1), got V = 0');
  const copy = new Int32Array(t.count);
  typedArraySet(copy, t.data);
  let counted = 0;
  for (let p = 0; p < copy.length; p++) {
    const target = copy[p];
    if (target === IGNORE_INDEX) continue;
    if (target < 0 || target >= V) {
      const where = batched ? `[${Math.floor(p / T)}, ${p % T}]` : `[${p}]`;
      fail('INVALID_ARGUMENT', `targets: target ${where} is ${target}, expected ${IGNORE_INDEX} or ` +
        `an integer in [0, ${V - 1}] (V = ${V})`);
    }
    counted++;
  }
  if (counted === 0) {
    fail('INVALID_ARGUMENT', `targets: every target is ${IGNORE_INDEX}: there is no counted position to score`);
  }
  return { logits: l.data, targets: copy, B, T, V };
}

// A position is right when its target's logit is the first largest: larger than every logit
// before it and at least every logit after (a NaN anywhere in the row makes it wrong).
function isArgmax(logits, base, V, target) {
  const x = logits[base + target];
  for (let j = 0; j < V; j++) {
    if (j === target) continue;
    if (!(j < target ? x > logits[base + j] : x >= logits[base + j])) return false;
  }
  return true;
}

function evaluate(logits, targets) {
  const s = readScored(logits, targets);
  let correct = 0, counted = 0, sequences = 0, sequencesCorrect = 0;
  for (let b = 0; b < s.B; b++) {
    let rowCounted = 0, rowCorrect = 0;
    for (let t = 0; t < s.T; t++) {
      const p = b * s.T + t;
      const target = s.targets[p];
      if (target === IGNORE_INDEX) continue;
      rowCounted++;
      if (isArgmax(s.logits, p * s.V, s.V, target)) rowCorrect++;
    }
    counted += rowCounted;
    correct += rowCorrect;
    if (rowCounted > 0) {
      sequences++;
      if (rowCorrect === rowCounted) sequencesCorrect++;
    }
  }
  return {
    loss: caseLoss(s.logits, s.targets, s.V),
    accuracy: correct / counted,
    sequenceAccuracy: sequencesCorrect / sequences,
    correct, counted, sequencesCorrect, sequences,
  };
}

const MEASURES = ['position', 'sequence'];

function accuracy(logits, targets, options) {
  const given = readOptions(options, ['measure']);
  const measure = given.measure === undefined ? 'position' : given.measure;
  if (!MEASURES.includes(measure)) {
    fail('INVALID_ARGUMENT', `options.measure: expected one of ${MEASURES.map((m) => `'${m}'`).join(', ')}, ` +
      `got ${describe(measure)}`);
  }
  const e = evaluate(logits, targets);
  return measure === 'position' ? e.accuracy : e.sequenceAccuracy;
}

// ---------------------------------------------------------------------------------------------
// makeTask

function checkInteger(value, name, min, max, help = '') {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    fail('INVALID_ARGUMENT', `${name}: expected an integer in [${min}, ${max}]${help}, got ${shown(value)}`);
  }
  return value;
}

/** One sequence of token ids (number[], Int32Array, or a (T) or (1, T) tensor) as an own copy. */
function readSequence(tokens, vocabSize) {
  let ids;
  if (typedArrayName(tokens) === 'Int32Array') {
    ids = new Int32Array(typedArrayLength(tokens));
    typedArraySet(ids, tokens);
  } else {
    const t = toTokens(tokens, 'tokens');
    if (!(t.shape.length === 1 || (t.shape.length === 2 && t.shape[0] === 1))) {
      fail('SHAPE_MISMATCH', `tokens: expected one sequence, (T) or (1, T), got shape [${t.shape.join(', ')}]`);
    }
    ids = new Int32Array(t.count);
    typedArraySet(ids, t.data);
  }
  ids.forEach((id, i) => {
    if (id < 0 || id >= vocabSize) {
      fail('INVALID_ARGUMENT', `tokens[${i}]: expected a token id in [0, ${vocabSize - 1}], got ${id}`);
    }
  });
  return ids;
}

/**
 * A built-in task by name (TASKS lists them) with its options (docs/tasks.md: seqLen, seed and
 * the task's own; every option an integer, each read once). Returns a frozen task object whose
 * methods need no `this`.
 */
export function makeTask(name, options) {
  if (typeof name !== 'string' || !BY_NAME.has(name)) {
    fail('INVALID_ARGUMENT', `name: expected a task name, one of ${TASKS.map((t) => `'${t.name}'`).join(', ')}, ` +
      `got ${describe(name)}`);
  }
  const definition = BY_NAME.get(name);
  const given = readOptions(options, definition.options.map(([key]) => key));
  const o = resolveOptions(given, definition.options);
  const { vocab, write, glue = new Set() } = definition.build(o);
  const T = o.seqLen;
  const V = vocab.length;

  // Rows [first, first + B) of a stream as (B, T) int32 tensors.
  const rows = (seed, stream, first, B, isProbe = false) => {
    const tokens = new Int32Array(B * T);
    const targets = new Int32Array(B * T).fill(IGNORE_INDEX);
    for (let b = 0; b < B; b++) {
      write(new RowRandom(seed, stream, first + b), tokens.subarray(b * T, (b + 1) * T),
        targets.subarray(b * T, (b + 1) * T), isProbe);
    }
    return { tokens: new Tensor(tokens, [B, T]), targets: new Tensor(targets, [B, T]) };
  };
  const streamBatch = (stream) => (batchSize, index) => {
    checkInteger(batchSize, 'batchSize', 1, MAX_BATCH);
    const lastIndex = Math.floor(2 ** 53 / batchSize) - 1;
    checkInteger(index, 'index', 0, lastIndex, ' (its rows, from index x batchSize on, must stay ' +
      'below 2^53)');
    return rows(o.seed, stream, index * batchSize, batchSize);
  };
  const describeTokens = (tokens) => {
    let text = '';
    let previous = -1;
    for (const id of readSequence(tokens, V)) {
      text += previous === -1 || glue.has(previous) ? vocab[id] : ` ${vocab[id]}`;
      previous = id;
    }
    return text;
  };

  return Object.freeze({
    name,
    description: definition.description,
    /** The resolved options, defaults filled in. */
    options: o,
    seqLen: T,
    vocabSize: V,
    /** The display string of every token id. */
    vocab: Object.freeze(vocab.slice()),
    /** Training rows index * batchSize .. + batchSize: (B, T) tokens and targets. */
    batch: streamBatch(TRAIN),
    /** The same from the held-out stream, whose rows never share a generator key with training's. */
    heldOut: streamBatch(HELD_OUT),
    /** One fixed illustrative row, (1, T), the same for every seed; text is its rendering. */
    probe() {
      const probe = rows(0, PROBE, 0, 1, true);
      return { ...probe, text: describeTokens(probe.tokens.data) };
    },
    accuracy,
    evaluate,
    describe: describeTokens,
  });
}
