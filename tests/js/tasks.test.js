// headscope/tasks: the built-in training tasks. Determinism (a batch is a pure function of seed,
// index and batch size; held-out batches are never training batches; pinned bits), shapes and
// ranges, each task's meaning checked by an oracle of its own that reads the sequence's display
// strings, the documented generator re-implemented here from docs/tasks.md, accuracy() and
// evaluate() on known logits, errors naming the option, the real model on every task, and the
// types.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { makeTask, TASKS } from 'headscope/tasks';
import { init } from '../../web/lib/index.js';
import { expectError } from './helpers.js';

const NAMES = ['copy', 'reverse', 'sort', 'previous-token', 'induction', 'kv-lookup', 'brackets', 'log-line'];

const rowOf = (tensor, b) => {
  const T = tensor.shape[1];
  return Array.from(tensor.data.subarray(b * T, (b + 1) * T));
};
const wordsOf = (task, row) => row.map((id) => task.vocab[id]);
const sameBits = (a, b) => a.tokens.data.every((x, i) => x === b.tokens.data[i]) &&
  a.targets.data.every((x, i) => x === b.targets.data[i]);
// FNV-1a over a batch's tokens then targets: pins the generator's bits.
function fnv(batch) {
  let h = 0x811c9dc5;
  for (const array of [batch.tokens.data, batch.targets.data]) {
    for (const x of array) {
      h = Math.imul(h ^ (x & 0xff), 0x01000193) >>> 0;
      h = Math.imul(h ^ ((x >>> 8) & 0xff), 0x01000193) >>> 0;
      h = Math.imul(h ^ ((x >>> 16) & 0xff), 0x01000193) >>> 0;
      h = Math.imul(h ^ (x >>> 24), 0x01000193) >>> 0;
    }
  }
  return h.toString(16).padStart(8, '0');
}

// ------------------------------------------------------------------------------------------
// The oracles: each recomputes a row's answer from its display strings alone.

function checkAnswerRow(task, row, targets, answerOf) {
  const w = wordsOf(task, row);
  assert.equal(w[0], '<bos>');
  const sep = w.indexOf('<sep>');
  const x = w.slice(1, sep);
  assert.equal(x.length, task.options.length);
  assert.deepEqual(w.slice(sep + 1, sep + 1 + x.length), answerOf(x), w.join(' '));
  assert.ok(w.slice(sep + 1 + x.length).every((s) => s === '<pad>'));
  targets.forEach((target, t) => {
    const counted = t >= sep && t < sep + x.length;
    assert.equal(target, counted ? row[t + 1] : -100, `target ${t} of ${w.join(' ')}`);
  });
}

const ORACLES = {
  copy: (task, row, targets) => checkAnswerRow(task, row, targets, (x) => x),
  reverse: (task, row, targets) => checkAnswerRow(task, row, targets, (x) => x.slice().reverse()),
  // Display strings a..t sort as strings (the default 20 symbols are all lowercase).
  sort: (task, row, targets) => checkAnswerRow(task, row, targets, (x) => x.slice().sort()),
  'previous-token': (task, row, targets) => {
    const w = wordsOf(task, row);
    assert.equal(w[0], '<bos>');
    assert.ok(w.slice(1).every((s) => /^[a-zA-Z]$/.test(s)));
    targets.forEach((target, t) => assert.equal(target, t >= 2 ? row[t - 1] : -100));
  },
  // At every position whose token occurred before, the target is the next token, which is the
  // token after that earlier occurrence; nowhere else is anything predicted.
  induction: (task, row, targets) => {
    const w = wordsOf(task, row);
    assert.equal(w[0], '<bos>');
    const period = w.slice(2).indexOf(w[1]) + 1;
    assert.ok(period >= task.options.minLength && period <= task.options.maxLength, `period ${period}`);
    assert.equal(new Set(w.slice(1, 1 + period)).size, period, 'the sequence has distinct symbols');
    for (let i = 1 + period; i < w.length; i++) assert.equal(w[i], w[i - period], 'repeated');
    targets.forEach((target, t) => {
      const earlier = w.lastIndexOf(w[t], t - 1);
      if (t < w.length - 1 && earlier >= 1) {
        assert.equal(target, row[t + 1]);
        assert.equal(w[t + 1], w[earlier + 1]);
      } else {
        assert.equal(target, -100, `position ${t} of ${w.join(' ')}`);
      }
    });
  },
  'kv-lookup': (task, row, targets) => {
    const w = wordsOf(task, row);
    const sep = w.indexOf('<sep>');
    const table = new Map();
    for (let i = 1; i < sep; i += 2) {
      assert.match(w[i], /^[a-z]$/);
      assert.match(w[i + 1], /^[0-9]$/);
      assert.ok(!table.has(w[i]), 'distinct keys');
      table.set(w[i], w[i + 1]);
    }
    assert.equal(table.size, task.options.pairs);
    const asked = new Set();
    targets.forEach((target, t) => {
      const isQuery = t > sep && (t - sep) % 2 === 1 && w[t] !== '<pad>';
      if (!isQuery) return assert.equal(target, -100);
      assert.ok(table.has(w[t]) && !asked.has(w[t]), `query ${w[t]}`);
      asked.add(w[t]);
      assert.equal(task.vocab[target], table.get(w[t]));
    });
    assert.equal(asked.size, task.options.queries);
  },
  brackets: (task, row, targets) => {
    const w = wordsOf(task, row);
    const eq = w.indexOf('=');
    const s = w.slice(1, eq);
    assert.ok(s.length % 2 === 0 && s.length >= task.options.minLength && s.length <= task.options.maxLength);
    const closer = { '(': ')', '[': ']', '{': '}' };
    const stack = [];
    let balanced = true;
    for (const c of s) {
      if (closer[c]) stack.push(closer[c]);
      else if (stack.pop() !== c) balanced = false;
    }
    balanced &&= stack.length === 0;
    assert.equal(w[eq + 1], balanced ? 'yes' : 'no', w.join(' '));
    // Unbalanced strings keep as many closers of each kind as openers: counting cannot tell.
    for (const [open, close] of Object.entries(closer)) {
      assert.equal(s.filter((c) => c === open).length, s.filter((c) => c === close).length);
    }
    targets.forEach((target, t) => assert.equal(target, t === eq ? row[eq + 1] : -100));
  },
  'log-line': (task, row, targets) => {
    const line = parseLogLine(task.describe(row));
    assert.equal(line.label, logRule(line) ? 'PAGE' : 'OK', task.describe(row));
    const q = wordsOf(task, row).indexOf('?');
    targets.forEach((target, t) => assert.equal(target, t === q ? row[q + 1] : -100));
  },
};

const LOG_PATTERN = /^<bos> (\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d) (DEBUG|INFO|WARN|ERROR) (\[[a-z-]+\]) ([a-z_]+)((?: [a-z]+=\S+)+) \? (PAGE|OK)(?: <pad>)*$/;

function parseLogLine(text) {
  const m = LOG_PATTERN.exec(text);
  assert.ok(m, `not a log line: ${text}`);
  const fields = Object.fromEntries(m[6].trim().split(' ').map((kv) => kv.split('=')));
  assert.ok('duration' in fields && 'service' in fields, text);
  return { date: m[1], time: m[2], level: m[3], component: m[4], event: m[5], ...fields, label: m[7] };
}

const logRule = (line) => line.level === 'ERROR' && ['database', 'payment'].includes(line.service) &&
  parseInt(line.duration, 10) > 1000;

// Options other than the defaults, for every task.
const VARIANTS = {
  copy: [{ seqLen: 4 }, { seqLen: 17, symbols: 3, length: 5 }],
  reverse: [{ seqLen: 9, symbols: 52 }],
  sort: [{ seqLen: 64, length: 20 }],
  'previous-token': [{ seqLen: 3, symbols: 2 }, { seqLen: 100, symbols: 52 }],
  induction: [{ seqLen: 5 }, { seqLen: 64, symbols: 52, minLength: 3, maxLength: 31 }, { symbols: 6 }],
  'kv-lookup': [{ seqLen: 6 }, { seqLen: 33, keys: 4, values: 2 }, { seqLen: 40, pairs: 3, queries: 3 }],
  brackets: [{ seqLen: 5 }, { types: 1, minLength: 10, maxLength: 10 }, { seqLen: 64, types: 3 }],
  'log-line': [{ seqLen: 32 }],
};

// ------------------------------------------------------------------------------------------

test('TASKS lists every task with a one-line description, frozen', () => {
  assert.deepEqual(TASKS.map((t) => t.name), NAMES);
  for (const t of TASKS) {
    assert.ok(typeof t.description === 'string' && t.description.length > 20 && !t.description.includes('\n'));
    assert.ok(Object.isFrozen(t));
    assert.equal(makeTask(t.name).description, t.description);
  }
  assert.ok(Object.isFrozen(TASKS));
});

test('defaults: T 32 and a vocabulary of at most 28 (log-line: T 18, vocabulary 45)', () => {
  for (const name of NAMES) {
    const task = makeTask(name);
    assert.equal(task.name, name);
    assert.equal(task.seqLen, name === 'log-line' ? 18 : 32);
    assert.ok(name === 'log-line' ? task.vocabSize === 45 : task.vocabSize <= 28, `${name}: ${task.vocabSize}`);
    assert.equal(task.vocab.length, task.vocabSize);
    assert.equal(new Set(task.vocab).size, task.vocabSize, 'display strings are distinct');
    assert.equal(task.options.seqLen, task.seqLen);
    assert.equal(task.options.seed, 0);
    assert.ok(Object.isFrozen(task) && Object.isFrozen(task.vocab) && Object.isFrozen(task.options));
  }
  assert.deepEqual(makeTask('induction').options, { seqLen: 32, seed: 0, symbols: 26, maxLength: 15, minLength: 8 });
  assert.deepEqual(makeTask('kv-lookup').options, { seqLen: 32, seed: 0, keys: 14, values: 10, pairs: 10, queries: 5 });
  assert.deepEqual(makeTask('brackets').options, { seqLen: 32, seed: 0, types: 2, maxLength: 28, minLength: 2 });
  assert.deepEqual(makeTask('sort').options, { seqLen: 32, seed: 0, symbols: 20, length: 15 });
});

test('shapes, ranges and every task\'s meaning, defaults and variants, many seeds and indices', () => {
  for (const name of NAMES) {
    for (const options of [{}, ...VARIANTS[name]]) {
      fc.assert(fc.property(
        fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }), fc.integer({ min: 0, max: 2 ** 40 }),
        fc.integer({ min: 1, max: 9 }), fc.boolean(),
        (seed, index, B, heldOut) => {
          const task = makeTask(name, { ...options, seed });
          const batch = heldOut ? task.heldOut(B, index) : task.batch(B, index);
          const T = task.seqLen;
          for (const tensor of [batch.tokens, batch.targets]) {
            assert.ok(tensor.data instanceof Int32Array);
            assert.deepEqual(tensor.shape, [B, T]);
          }
          assert.ok(batch.tokens.data.every((id) => id >= 0 && id < task.vocabSize));
          assert.ok(batch.targets.data.every((id) => id === -100 || (id >= 0 && id < task.vocabSize)));
          for (let b = 0; b < B; b++) {
            const targets = rowOf(batch.targets, b);
            assert.ok(targets.some((x) => x !== -100), 'at least one counted target per row');
            ORACLES[name](task, rowOf(batch.tokens, b), targets);
          }
        }), { numRuns: 25, seed: 14 });
    }
  }
});

test('a batch is a pure function of (seed, index, batchSize): rows index * B .. of one stream', () => {
  for (const name of NAMES) {
    const task = makeTask(name, { seed: 7 });
    const again = makeTask(name, { seed: 7 });
    assert.ok(sameBits(task.batch(16, 3), task.batch(16, 3)));
    assert.ok(sameBits(task.batch(16, 3), again.batch(16, 3)));
    assert.ok(sameBits(task.heldOut(5, 2), again.heldOut(5, 2)));
    // Rows 48..63 are batch(16, 3), and also rows 16..31 of batch(32, 1), and batch(8, 6) + batch(8, 7).
    const big = task.batch(32, 1);
    const T = task.seqLen;
    assert.deepEqual(task.batch(16, 3).tokens.data, big.tokens.data.subarray(16 * T));
    assert.deepEqual(task.batch(8, 7).targets.data, big.targets.data.subarray(24 * T));
    assert.ok(!sameBits(task.batch(16, 3), task.batch(16, 4)), `${name}: another index`);
    assert.ok(!sameBits(task.batch(16, 3), makeTask(name, { seed: 8 }).batch(16, 3)), `${name}: another seed`);
    // Fresh arrays on every call: editing one batch changes no other.
    const first = task.batch(4, 0);
    first.tokens.data.fill(0);
    assert.ok(task.batch(4, 0).tokens.data.some((x) => x !== 0));
  }
});

test('held-out batches are never training batches (400 indices each, every task)', () => {
  for (const name of NAMES) {
    const task = makeTask(name, { seed: 3 });
    const train = new Set();
    for (let i = 0; i < 400; i++) train.add(task.batch(8, i).tokens.data.join());
    for (let i = 0; i < 400; i++) assert.ok(!train.has(task.heldOut(8, i).tokens.data.join()), `${name} ${i}`);
  }
  // Where a task's example space is large, not even one row of either stream is in the other.
  for (const name of ['copy', 'reverse', 'sort', 'previous-token', 'induction', 'kv-lookup']) {
    const task = makeTask(name, { seed: 3 });
    const rows = new Set();
    const train = task.batch(2000, 0).tokens;
    for (let b = 0; b < 2000; b++) rows.add(rowOf(train, b).join());
    const held = task.heldOut(2000, 0).tokens;
    for (let b = 0; b < 2000; b++) assert.ok(!rows.has(rowOf(held, b).join()), `${name} row ${b}`);
  }
});

test('pinned bits: batch(16, 0) and heldOut(16, 0) of seed 1 (a change here changes every trained result)', () => {
  const pinned = {};
  for (const name of NAMES) {
    const task = makeTask(name, { seed: 1 });
    pinned[name] = [fnv(task.batch(16, 0)), fnv(task.heldOut(16, 0)), fnv(task.probe())];
  }
  assert.deepEqual(pinned, PINNED);
});

// FNV-1a of batch(16, 0), heldOut(16, 0) and probe() (tokens then targets, int32 little end first).
const PINNED = {
  'copy': ['f671e0b8', '8145519f', '459f4345'],
  'reverse': ['c24be0b8', '371c60df', 'd1fdb745'],
  'sort': ['8b738a18', '595f0fdf', 'f26e58e5'],
  'previous-token': ['a343d888', 'c003bdda', '6b215fd8'],
  'induction': ['0eeb6e65', 'ab301fd2', 'fec00a9b'],
  'kv-lookup': ['90f1246e', 'f8b5e7f7', '4dc23c98'],
  'brackets': ['a93e44ae', 'd7e87296', '4a5609cd'],
  'log-line': ['df588efa', 'b7e23bcd', '7195ae2a'],
};

// docs/tasks.md's generator, written again from the text: draw i of a row is a chain of triple32
// over (i ^ 0x9e3779b9, seedLo, seedHi, stream * 2^21 + rowHi, rowLo); an integer below n is a
// draw under 2^32 - (2^32 mod n), mod n. previous-token's row is <bos> then 1 + below(symbols)
// for each later position.
test('the generator is the one docs/tasks.md writes down', () => {
  const triple32 = (x) => {
    x = (x ^ (x >>> 17)) >>> 0; x = Math.imul(x, 0xed5ad4bb) >>> 0;
    x = (x ^ (x >>> 11)) >>> 0; x = Math.imul(x, 0xac4c1b51) >>> 0;
    x = (x ^ (x >>> 15)) >>> 0; x = Math.imul(x, 0x31848bab) >>> 0;
    return (x ^ (x >>> 14)) >>> 0;
  };
  const rowDraws = (seed, stream, row) => {
    const words = [seed % 2 ** 32, Math.floor(seed / 2 ** 32), stream * 2 ** 21 + Math.floor(row / 2 ** 32), row % 2 ** 32];
    let i = 0;
    const draw = () => words.reduce((h, w) => triple32((h ^ w) >>> 0), triple32((i++ ^ 0x9e3779b9) >>> 0));
    return (n) => {
      for (;;) {
        const u = draw();
        if (u < 2 ** 32 - (2 ** 32 % n)) return u % n;
      }
    };
  };
  for (const [seed, stream, index] of [[0, 0, 0], [1, 0, 5], [2 ** 40 + 3, 1, 2 ** 33], [Number.MAX_SAFE_INTEGER, 0, 2 ** 49]]) {
    const task = makeTask('previous-token', { seed, seqLen: 40, symbols: 7 });
    const batch = stream === 0 ? task.batch(3, index) : task.heldOut(3, index);
    for (let b = 0; b < 3; b++) {
      const below = rowDraws(seed, stream, index * 3 + b);
      const want = [0, ...Array.from({ length: 39 }, () => 1 + below(7))];
      assert.deepEqual(rowOf(batch.tokens, b), want, `seed ${seed} stream ${stream} row ${index * 3 + b}`);
    }
  }
  // The probe: stream 2, row 0, seed 0, whatever the task's seed.
  const below = rowDraws(0, 2, 0);
  const want = [0, ...Array.from({ length: 39 }, () => 1 + below(7))];
  assert.deepEqual(rowOf(makeTask('previous-token', { seed: 9, seqLen: 40, symbols: 7 }).probe().tokens, 0), want);
});

test('probe(): one fixed row per task, the same for every seed; log-line\'s is the seed\'s line', () => {
  for (const name of NAMES) {
    const a = makeTask(name, { seed: 1 }).probe();
    const b = makeTask(name, { seed: 99 }).probe();
    assert.deepEqual(a.tokens.shape, [1, makeTask(name).seqLen]);
    assert.deepEqual(a.targets.shape, a.tokens.shape);
    assert.ok(sameBits(a, b));
    assert.equal(a.text, makeTask(name).describe(a.tokens));
    ORACLES[name](makeTask(name), rowOf(a.tokens, 0), rowOf(a.targets, 0));
  }
  assert.equal(makeTask('log-line').probe().text, '<bos> 2024-01-15 10:30:45 ERROR [order-api] ' +
    'connection_timeout retry=3 duration=5000ms service=database ? PAGE <pad> <pad> <pad> <pad>');
  // The induction probe repeats the longest period exactly: two copies and one more token.
  const w = makeTask('induction').probe().text.split(' ');
  assert.equal(w.slice(2).indexOf(w[1]) + 1, 15);
  assert.match(makeTask('brackets').probe().text, /^<bos>( [()[\]]){28} = yes <pad>$/);
});

test('log-line: balanced labels, and no single field decides them', () => {
  const task = makeTask('log-line', { seed: 5 });
  const lines = [];
  for (let i = 0; i < 12; i++) {
    const { tokens } = task.batch(500, i);
    for (let b = 0; b < 500; b++) lines.push(parseLogLine(task.describe(rowOf(tokens, b))));
  }
  const page = lines.filter((l) => l.label === 'PAGE').length / lines.length;
  assert.ok(page > 0.47 && page < 0.53, `PAGE share ${page}`);
  // The best accuracy of a rule that reads only these fields (the majority label per value).
  const bestAccuracy = (fields) => {
    const votes = new Map();
    for (const l of lines) {
      const key = fields.map((f) => l[f] ?? '-').join('|');
      const v = votes.get(key) ?? [0, 0];
      v[l.label === 'PAGE' ? 1 : 0]++;
      votes.set(key, v);
    }
    return [...votes.values()].reduce((s, [ok, pg]) => s + Math.max(ok, pg), 0) / lines.length;
  };
  for (const f of ['level', 'service', 'duration']) {
    const a = bestAccuracy([f]);
    assert.ok(a > 0.63 && a < 0.70, `${f} alone: ${a} (2/3 expected)`);
  }
  for (const f of ['date', 'time', 'component', 'event', 'retry', 'timeout', 'upstream']) {
    assert.ok(bestAccuracy([f]) < 0.53, `${f} alone: ${bestAccuracy([f])} (1/2 expected)`);
  }
  const two = bestAccuracy(['level', 'service']);
  assert.ok(two > 0.80 && two < 0.87, `two fields: ${two} (5/6 expected)`);
  assert.equal(bestAccuracy(['level', 'service', 'duration']), 1);
  // The distractor fields come and go, and their order varies.
  assert.ok(lines.some((l) => l.timeout) && lines.some((l) => !l.timeout));
  assert.ok(new Set(lines.map((l) => Object.keys(l).join())).size > 20);
});

test('brackets: half balanced; every length between minLength and maxLength occurs', () => {
  const task = makeTask('brackets', { seed: 2 });
  const { tokens } = task.batch(4000, 0);
  const words = Array.from({ length: 4000 }, (_, b) => task.describe(rowOf(tokens, b)).split(' '));
  const yes = words.filter((w) => w.includes('yes')).length / words.length;
  assert.ok(yes > 0.47 && yes < 0.53, `balanced share ${yes}`);
  const lengths = new Set(words.map((w) => w.indexOf('=') - 1));
  assert.deepEqual([...lengths].sort((a, b) => a - b), Array.from({ length: 14 }, (_, i) => 2 + 2 * i));
});

test('describe(): a row as text from arrays, Int32Arrays and (T) / (1, T) tensors', () => {
  const task = makeTask('copy', { seqLen: 6 });
  const { tokens } = task.batch(1, 0);
  const text = task.describe(tokens);
  assert.match(text, /^<bos> [a-t] [a-t] <sep> [a-t] [a-t]$/);
  assert.equal(task.describe(tokens.data), text);
  assert.equal(task.describe(Array.from(tokens.data)), text);
  assert.equal(task.describe([Array.from(tokens.data)]), text);
  assert.equal(task.describe({ data: tokens.data, shape: [6] }), text);
  assert.equal(task.describe([]), '');
  // A typed array's own `length` is not believed.
  const spoofed = new Int32Array([1, 3]);
  Object.defineProperty(spoofed, 'length', { value: 1000 });
  assert.equal(task.describe(spoofed), '<bos> a');
  expectError(() => task.describe([1, 23]), 'INVALID_ARGUMENT', 'tokens[1]: expected a token id in [0, 22], got 23');
  expectError(() => task.describe(task.batch(2, 0).tokens), 'SHAPE_MISMATCH', 'tokens: expected one sequence, (T) or (1, T), got shape [2, 6]');
  expectError(() => task.describe('abc'), 'INVALID_ARGUMENT', 'tokens: expected token ids');
});

// ------------------------------------------------------------------------------------------
// Scoring

// Logits (B, T, V) whose first largest entry is `pick(b, t)` at each position (0 elsewhere).
function logitsPicking(B, T, V, pick) {
  const data = new Float32Array(B * T * V);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      const j = pick(b, t);
      if (j >= 0) data[(b * T + t) * V + j] = 1;
    }
  }
  return { data, shape: [B, T, V] };
}

test('accuracy() and evaluate(): 1 on logits that pick the targets, lower when some do not', () => {
  for (const name of NAMES) {
    const task = makeTask(name);
    const { targets } = task.batch(8, 0);
    const T = task.seqLen, V = task.vocabSize;
    const at = (b, t) => targets.data[b * T + t];
    const perfect = logitsPicking(8, T, V, at);
    assert.equal(task.accuracy(perfect, targets), 1);
    assert.equal(task.accuracy(perfect, targets, { measure: 'sequence' }), 1);
    const counted = targets.data.filter((x) => x !== -100).length;
    // Row 0's first counted position now picks another token.
    const first = rowOf(targets, 0).findIndex((x) => x !== -100);
    const oneWrong = logitsPicking(8, T, V, (b, t) => (b === 0 && t === first ? (at(b, t) + 1) % V : at(b, t)));
    const e = task.evaluate(oneWrong, targets);
    assert.equal(e.accuracy, (counted - 1) / counted);
    assert.equal(e.sequenceAccuracy, 7 / 8);
    assert.deepEqual([e.correct, e.counted, e.sequencesCorrect, e.sequences], [counted - 1, counted, 7, 8]);
    assert.equal(task.accuracy(oneWrong, targets), e.accuracy);
    assert.equal(task.accuracy(oneWrong, targets, { measure: 'sequence' }), 7 / 8);
    // Equal logits: the loss is ln V and only targets 0 are right (the lowest index wins a tie).
    const flat = task.evaluate({ data: new Float32Array(8 * T * V), shape: [8, T, V] }, targets);
    assert.ok(Math.abs(flat.loss - Math.log(V)) < 1e-12, `${flat.loss}`);
    assert.equal(flat.correct, targets.data.filter((x) => x === 0).length);
  }
});

test('accuracy(): ties go to the lowest index, NaN is wrong, (T, V) and nested arrays work', () => {
  const task = makeTask('copy', { seqLen: 4 });   // one counted position: t = 2
  const targets = [-100, -100, 3, -100];
  const row = (values) => [[0, 0, 0, 0], [0, 0, 0, 0], values, [0, 0, 0, 0]];
  assert.equal(task.accuracy(row([0, 0, 0, 1]), targets), 1);
  assert.equal(task.accuracy(row([0, 0, 1, 1]), targets), 0, 'a tie with a lower index loses');
  assert.equal(task.accuracy(row([0, 0, 0, 0]), [-100, -100, 0, -100]), 1, 'a tie won by index 0');
  assert.equal(task.accuracy(row([NaN, 0, 0, 1]), targets), 0);
  assert.equal(task.accuracy(row([0, 0, 0, NaN]), targets), 0);
  assert.equal(task.accuracy([row([0, 0, 0, 1])], [targets]), 1);
  const e = task.evaluate(row([0, 0, 0, 1]), targets);
  assert.ok(Math.abs(e.loss - (Math.log(3 + Math.E) - 1)) < 1e-12);
  assert.deepEqual([e.counted, e.sequences], [1, 1]);
});

test('accuracy() and evaluate() refuse what they cannot score, naming the argument', () => {
  const task = makeTask('copy', { seqLen: 4 });
  const logits = { data: new Float32Array(2 * 4 * 23), shape: [2, 4, 23] };
  const targets = { data: new Int32Array([-100, -100, 3, -100, -100, -100, 4, -100]), shape: [2, 4] };
  expectError(() => task.accuracy(logits, { data: targets.data, shape: [8] }), 'SHAPE_MISMATCH',
    'targets: expected shape (B, T) = [2, 4] to match logits [2, 4, 23], got [8]');
  expectError(() => task.accuracy({ data: new Float32Array(8), shape: [8] }, targets), 'SHAPE_MISMATCH',
    'logits: expected (B, T, V) or (T, V) logits, got shape [8]');
  expectError(() => task.evaluate(logits, { data: new Int32Array([-100, -100, 23, -100, 0, 0, 0, 0]), shape: [2, 4] }),
    'INVALID_ARGUMENT', 'targets: target [0, 2] is 23, expected -100 or an integer in [0, 22] (V = 23)');
  expectError(() => task.evaluate(logits, { data: new Int32Array(8).fill(-100), shape: [2, 4] }),
    'INVALID_ARGUMENT', 'targets: every target is -100');
  expectError(() => task.accuracy(logits, targets, { measure: 'row' }), 'INVALID_ARGUMENT',
    "options.measure: expected one of 'position', 'sequence', got string \"row\"");
  expectError(() => task.accuracy(logits, targets, { per: 'row' }), 'INVALID_ARGUMENT',
    'options.per: unknown option (expected one of measure)');
  expectError(() => task.accuracy(logits, [[1.5]]), 'INVALID_ARGUMENT', 'targets[0][0]: expected an integer token id');
  expectError(() => task.accuracy({ data: new Float64Array(8), shape: [2, 4, 1] }, targets), 'INVALID_ARGUMENT',
    'logits.data: expected a Float32Array');
});

// ------------------------------------------------------------------------------------------
// Options

test('bad task names and options: HeadscopeError naming them', () => {
  expectError(() => makeTask('parity'), 'INVALID_ARGUMENT', "name: expected a task name, one of 'copy', 'reverse', " +
    "'sort', 'previous-token', 'induction', 'kv-lookup', 'brackets', 'log-line', got string \"parity\"");
  expectError(() => makeTask(), 'INVALID_ARGUMENT', 'name: expected a task name', 'got undefined');
  expectError(() => makeTask('toString'), 'INVALID_ARGUMENT', 'name: expected a task name');
  expectError(() => makeTask('copy', null), 'INVALID_ARGUMENT', 'options: expected an object, got null');
  expectError(() => makeTask('copy', [1]), 'INVALID_ARGUMENT', 'options: expected an object');
  expectError(() => makeTask('copy', { seqLen: 3 }), 'INVALID_ARGUMENT',
    'options.seqLen: expected an integer in [4, 512], got 3');
  expectError(() => makeTask('copy', { seqLen: 513 }), 'INVALID_ARGUMENT', 'options.seqLen: expected an integer in [4, 512], got 513');
  expectError(() => makeTask('copy', { seqLen: 8.5 }), 'INVALID_ARGUMENT', 'got 8.5');
  expectError(() => makeTask('copy', { seqLen: '32' }), 'INVALID_ARGUMENT', 'options.seqLen', 'got string "32"');
  expectError(() => makeTask('log-line', { seqLen: 17 }), 'INVALID_ARGUMENT', 'options.seqLen: expected an integer in [18, 512], got 17');
  expectError(() => makeTask('copy', { seed: -1 }), 'INVALID_ARGUMENT', 'options.seed: expected an integer in [0, 9007199254740991], got -1');
  expectError(() => makeTask('copy', { seed: 2 ** 53 }), 'INVALID_ARGUMENT', 'options.seed');
  expectError(() => makeTask('copy', { seed: NaN }), 'INVALID_ARGUMENT', 'options.seed', 'got NaN');
  expectError(() => makeTask('copy', { length: 16 }), 'INVALID_ARGUMENT',
    'options.length: expected an integer in [1, 15] (<bos>, <sep> and twice the length must fit seqLen = 32), got 16');
  expectError(() => makeTask('copy', { symbols: 53 }), 'INVALID_ARGUMENT', 'options.symbols: expected an integer in [2, 52], got 53');
  expectError(() => makeTask('induction', { symbols: 10, maxLength: 11 }), 'INVALID_ARGUMENT',
    'options.maxLength: expected an integer in [2, 10] (at most symbols = 10 distinct symbols');
  expectError(() => makeTask('induction', { maxLength: 6, minLength: 7 }), 'INVALID_ARGUMENT',
    'options.minLength: expected an integer in [2, 6]');
  expectError(() => makeTask('kv-lookup', { pairs: 15 }), 'INVALID_ARGUMENT', 'options.pairs: expected an integer in [1, 14]');
  expectError(() => makeTask('kv-lookup', { pairs: 12, queries: 4 }), 'INVALID_ARGUMENT', 'options.queries: expected an integer in [1, 3]');
  expectError(() => makeTask('brackets', { maxLength: 7 }), 'INVALID_ARGUMENT',
    'options.maxLength: expected an even integer in [2, 28]');
  expectError(() => makeTask('brackets', { types: 4 }), 'INVALID_ARGUMENT', 'options.types: expected an integer in [1, 3], got 4');
  expectError(() => makeTask('copy', { sequenceLength: 8 }), 'INVALID_ARGUMENT',
    'options.sequenceLength: unknown option (expected one of seqLen, seed, symbols, length)');
  expectError(() => makeTask('log-line', { symbols: 8 }), 'INVALID_ARGUMENT',
    'options.symbols: unknown option (expected one of seqLen, seed)');
  // undefined means the default
  assert.equal(makeTask('copy', { seqLen: undefined, length: undefined }).seqLen, 32);
});

test('options are read once: getters, Proxies and throwing traps', () => {
  const reads = {};
  const options = new Proxy({ seqLen: 12, seed: 4, length: 3 }, {
    get(target, key) {
      reads[key] = (reads[key] ?? 0) + 1;
      return target[key];
    },
  });
  const task = makeTask('sort', options);
  assert.deepEqual(reads, { seqLen: 1, seed: 1, length: 1 });
  assert.deepEqual([task.seqLen, task.options.seed, task.options.length], [12, 4, 3]);
  let n = 10;
  const drifting = { get seqLen() { return n++; } };
  assert.equal(makeTask('copy', drifting).seqLen, 10);
  assert.equal(n, 11);
  const e = expectError(() => makeTask('copy', { get seed() { throw new Error('boom'); } }), 'INVALID_ARGUMENT',
    'options: reading it threw (Error: boom)');
  assert.equal(e.cause.message, 'boom');
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  expectError(() => makeTask('copy', proxy), 'INVALID_ARGUMENT', 'options');
});

test('batch() and heldOut() arguments', () => {
  const task = makeTask('copy');
  expectError(() => task.batch(0, 0), 'INVALID_ARGUMENT', 'batchSize: expected an integer in [1, 4096], got 0');
  expectError(() => task.batch(4097, 0), 'INVALID_ARGUMENT', 'batchSize: expected an integer in [1, 4096], got 4097');
  expectError(() => task.heldOut(2, -1), 'INVALID_ARGUMENT', 'index: expected an integer in [0, 4503599627370495] ' +
    '(its rows, from index x batchSize on, must stay below 2^53), got -1');
  expectError(() => task.batch(2, 2 ** 52), 'INVALID_ARGUMENT', 'index: expected an integer in [0, 4503599627370495]');
  expectError(() => task.batch(2, '1'), 'INVALID_ARGUMENT', 'index', 'got string "1"');
  expectError(() => task.batch(), 'INVALID_ARGUMENT', 'batchSize', 'got undefined');
  // The last rows of the stream exist.
  assert.deepEqual(task.batch(2, 2 ** 52 - 1).tokens.shape, [2, 32]);
  // Methods need no `this`.
  const { batch, accuracy } = task;
  const b = batch(2, 0);
  assert.equal(accuracy(logitsPicking(2, 32, 23, (i, t) => b.targets.data[i * 32 + t]), b.targets), 1);
});

// ------------------------------------------------------------------------------------------
// With the real model

test('the real model runs every task: forward a batch, score it', async () => {
  const hs = await init();
  after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));
  for (const name of NAMES) {
    const task = makeTask(name, { seed: 1 });
    const m = hs.createTransformer({ vocabSize: task.vocabSize, maxLen: task.seqLen, dModel: 32, nLayers: 2, nHeads: 2, seed: 1 });
    try {
      const { tokens, targets } = task.batch(8, 0);
      const { logits } = m.forward(tokens);
      assert.deepEqual(logits.shape, [8, task.seqLen, task.vocabSize]);
      const e = task.evaluate(logits, targets);
      assert.ok(e.accuracy >= 0 && e.accuracy <= 1 && e.sequenceAccuracy >= 0 && e.sequenceAccuracy <= 1);
      assert.ok(Number.isFinite(e.loss) && e.loss > 0, `${name}: loss ${e.loss}`);
      assert.equal(task.accuracy(logits, targets), e.accuracy);
      // The probe through forward with the pattern hook, as the lab's grid uses it.
      const probe = task.probe();
      const { hooks } = m.forward(probe.tokens, { hooks: ['blocks.1.attn.hook_pattern'] });
      assert.deepEqual(hooks['blocks.1.attn.hook_pattern'].shape, [1, 2, task.seqLen, task.seqLen]);
    } finally {
      m.dispose();
    }
  }
});

test('tsc accepts tests/js/tasks-typed-usage.ts against tasks.d.ts', () => {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const config = fileURLToPath(new URL('tsconfig.tasks.json', import.meta.url));
  const r = spawnSync(process.execPath, [tsc, '-p', config], { encoding: 'utf8' });
  assert.equal(r.status, 0, `tsc failed:\n${r.stdout}${r.stderr}`);
});
