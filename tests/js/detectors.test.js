// headscope/detectors: the head detectors against a line-by-line port of TransformerLens's
// head_detector (its detection patterns and its "mul" score, exclude_bos, exclude_current_token)
// on random patterns and tokens (fast-check); known patterns; a trained induction model's
// circuit found (a previous-token head in layer 0, induction heads in layer 1); the keyword and
// custom detectors (a token set; a matrix, a predicate or a formula) against their definitions,
// the formula language against JavaScript, log-line's level head found at the answer rows; bad
// input.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { init } from '../../web/lib/index.js';
import { makeTask } from '../../web/lib/tasks.js';
import { ALL_DETECTORS, DETECTORS, compileFormula, detectionPattern, headScores, modelHeadScores } from '../../web/lib/detectors.js';

const hs = await init();
after(() => assert.equal(hs.liveHandles(), 0));

// TransformerLens (transformer_lens/head_detector.py), ported operation by operation on (T, T)
// arrays of arrays: get_*_detection_pattern, then compute_head_attention_similarity_score's
// "mul" branch; a batch is the mean of the per-sequence scores (detect_head over a list).
const tril = (m) => m.map((row, i) => row.map((v, j) => (j <= i ? v : 0)));
const tl = {
  'previous-token': (t) => {
    const T = t.length;
    const d = Array.from({ length: T }, () => new Array(T).fill(0));
    for (let i = 1; i < T; i++) d[i][i - 1] = 1;  // detection_pattern[1:, :-1] = eye(T - 1)
    return tril(d);
  },
  'same-token': (t) => {
    const eq = t.map((ti) => t.map((tj) => (ti === tj ? 1 : 0)));  // token_pattern == its transpose
    eq.forEach((row, i) => { row[i] = 0; });                      // fill_diagonal(0)
    return tril(eq);
  },
  induction: (t) => {
    const dup = tl['same-token'](t);
    const T = t.length;
    const rolled = dup.map((row) => row.map((_, j) => row[(j - 1 + T) % T]));  // roll(shifts=1, dims=1)
    return tril(rolled.map((row) => row.map((v, j) => (j === 0 ? 0 : v))));     // first column 0
  },
  // Not in TransformerLens: attention to position 0, the same measure.
  'first-token': (t) => t.map((_, i) => t.map((__, j) => (j === 0 && i >= 0 ? 1 : 0))),
};
function tlScore(P, D, excludeBos, excludeCurrent) {
  const A = P.map((row) => row.slice());
  if (excludeBos) A.forEach((row) => { row[0] = 0; });
  if (excludeCurrent) A.forEach((row, i) => { row[i] = 0; });
  let num = 0;
  let den = 0;
  A.forEach((row, i) => row.forEach((v, j) => { num += v * D[i][j]; den += v; }));
  return num / den;
}

// A random causal softmax pattern (B, H, T, T) from integer weights, rows summing to 1.
const arbCase = fc.record({
  B: fc.integer({ min: 1, max: 3 }), H: fc.integer({ min: 1, max: 3 }), T: fc.integer({ min: 2, max: 9 }),
  vocab: fc.integer({ min: 1, max: 4 }), seed: fc.integer({ min: 0, max: 2 ** 31 - 1 }),
  excludeBos: fc.boolean(), excludeCurrentToken: fc.boolean(),
});
function materialize({ B, H, T, vocab, seed }) {
  let x = seed >>> 0;
  const next = () => { x = (Math.imul(x, 1664525) + 1013904223) >>> 0; return x; };
  const tokens = Array.from({ length: B }, () => Array.from({ length: T }, () => next() % vocab));
  const data = new Float32Array(B * H * T * T);
  for (let r = 0; r < B * H * T; r++) {
    const i = r % T;
    let sum = 0;
    const w = Array.from({ length: i + 1 }, () => 1 + (next() % 9));
    w.forEach((v) => { sum += v; });
    w.forEach((v, j) => { data[r * T + j] = v / sum; });
  }
  return { tokens, pattern: { data, shape: [B, H, T, T] } };
}

test('every detector is TransformerLens\'s detection pattern and "mul" score, batch means included', () => {
  fc.assert(fc.property(arbCase, (c) => {
    const { tokens, pattern } = materialize(c);
    const { B, H, T } = c;
    const got = headScores(pattern, tokens, { excludeBos: c.excludeBos, excludeCurrentToken: c.excludeCurrentToken });
    for (const name of DETECTORS) {
      for (let h = 0; h < H; h++) {
        let want = 0;
        for (let b = 0; b < B; b++) {
          const P = Array.from({ length: T }, (_, i) =>
            Array.from(pattern.data.subarray(((b * H + h) * T + i) * T, ((b * H + h) * T + i + 1) * T)));
          want += tlScore(P, tl[name](tokens[b]), c.excludeBos, c.excludeCurrentToken);
        }
        want /= B;
        const g = got[name][h];
        if (Number.isNaN(want)) assert.ok(Number.isNaN(g), `${name} h${h}: NaN expected`);
        else assert.ok(Math.abs(g - want) <= 1e-12 * Math.max(1, Math.abs(want)), `${name} h${h}: ${g} vs ${want}`);
      }
      // detectionPattern is the same matrix.
      const d = detectionPattern(name, tokens[0]);
      assert.deepEqual(Array.from(d), tl[name](tokens[0]).flat());
    }
  }), { numRuns: 300 });
});

test('known patterns: a previous-token head, a <bos> head, an induction head', () => {
  const tokens = [0, 5, 6, 7, 5, 6, 7];  // <bos> a b c a b c: the second copy's induction keys
  const T = tokens.length;
  const head = (key) => {
    const data = new Float32Array(T * T);
    for (let i = 0; i < T; i++) data[i * T + key(i)] = 1;
    return data;
  };
  const prev = head((i) => Math.max(0, i - 1));
  const bos = head(() => 0);
  const induction = head((i) => (i >= 4 ? i - 2 : 0));  // 4 (a) -> 2 (b), 5 -> 3, 6 -> 4
  const pattern = { data: new Float32Array([...prev, ...bos, ...induction]), shape: [3, T, T] };
  const s = headScores(pattern, tokens);
  // (Row 1's only earlier key is 0: there the <bos> and induction heads are previous-token heads too.)
  assert.deepEqual(s['previous-token'], [6 / 7, 1 / 7, 1 / 7]);
  assert.deepEqual(s['first-token'], [2 / 7, 1, 4 / 7]);
  assert.deepEqual(s.induction, [0, 0, 3 / 7]);
  assert.deepEqual(s['same-token'], [0, 0, 0]);
  // excludeBos drops the <bos> column from both sums: the induction head is all induction then.
  // (The <bos> head has nothing left: no score.)
  assert.deepEqual(headScores(pattern, tokens, { excludeBos: true, detectors: ['induction'] }).induction, [0, NaN, 1]);
});

test('a trained induction model: a previous-token head in layer 0, induction heads in layer 1', (t) => {
  const task = makeTask('induction', { seqLen: 32, seed: 1 });
  const m = hs.createTransformer({ vocabSize: task.vocabSize, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, seed: 1 });
  try {
    m.setOptimizer({ type: 'adamw', lr: 3e-3 });
    const held = task.heldOut(32, 0);
    const before = modelHeadScores(m, held.tokens);
    for (let s = 0; s < 400; s++) {
      const b = task.batch(16, s);
      m.trainStep(b.tokens, b.targets);
    }
    const s = modelHeadScores(m, held.tokens);
    const best = (rows, l) => Math.max(...rows[l]);
    t.diagnostic(`induction: layer 1 best ${best(before.induction, 1).toFixed(3)} -> ${best(s.induction, 1).toFixed(3)}; ` +
      `previous-token: layer 0 best ${best(before['previous-token'], 0).toFixed(3)} -> ${best(s['previous-token'], 0).toFixed(3)}`);
    assert.ok(best(s.induction, 1) > 0.4, `layer 1 induction ${best(s.induction, 1)}`);
    assert.ok(best(s.induction, 1) > 5 * best(s.induction, 0));
    assert.ok(best(s['previous-token'], 0) > 0.2 && best(s['previous-token'], 0) > 2 * best(s['previous-token'], 1));
    assert.ok(best(before.induction, 1) < 0.1);
    // modelHeadScores is headScores on the forward's hooks.
    const { hooks } = m.forward(held.tokens, { hooks: ['blocks.1.attn.hook_pattern'] });
    assert.deepEqual(headScores(hooks['blocks.1.attn.hook_pattern'], held.tokens).induction, s.induction[1]);
  } finally {
    m.dispose();
  }
});

test('tokens as an Int32Array (one sequence) and a worker\'s model (a promise of the scores)', async () => {
  const { initWorker } = await import('../../web/lib/worker-client.js');
  const task = makeTask('induction', { seqLen: 12, seed: 2 });
  const probe = task.probe();
  assert.deepEqual(detectionPattern('induction', probe.tokens.data), detectionPattern('induction', Array.from(probe.tokens.data)));
  const config = { vocabSize: task.vocabSize, maxLen: 12, dModel: 8, nLayers: 2, nHeads: 2, seed: 4 };
  const local = hs.createTransformer(config);
  const remote = await initWorker();
  try {
    const m = await remote.createTransformer(config);
    const fromWorker = modelHeadScores(m, probe.tokens);
    assert.equal(typeof fromWorker.then, 'function');
    assert.deepEqual(await fromWorker, modelHeadScores(local, probe.tokens));
    await m.dispose();
  } finally {
    local.dispose();
    await remote.terminate();
  }
});

test('bad input: HeadscopeError naming the argument', () => {
  const pattern = { data: new Float32Array(4), shape: [1, 1, 2, 2] };
  const cases = [
    [() => headScores(null, [[1, 2]]), /pattern: expected a Tensor/],
    [() => headScores({ data: new Float32Array(4), shape: [1, 1, 2, 3] }, [[1, 2]]), /pattern: expected \(B, H, T, T\)/],
    [() => headScores(pattern, [[1, 2, 3]]), /pattern: expected/],
    [() => headScores(pattern, [[1, 2], [3]]), /tokens\[1\]: expected 2 token ids/],
    [() => headScores(pattern, [[1, 1.5]]), /tokens\[0\]\[1\]: expected an integer/],
    [() => headScores(pattern, [[1, 2]], { detectors: ['nope'] }), /options.detectors\[0\]/],
    [() => headScores(pattern, [[1, 2]], { detectors: [] }), /options.detectors/],
    [() => headScores(pattern, [[1, 2]], { excludeBos: 1 }), /options.excludeBos: expected a boolean/],
    [() => headScores(pattern, [[1, 2]], { other: 1 }), /options.other: unknown option/],
    [() => detectionPattern('nope', [1]), /name: expected one of/],
    [() => detectionPattern('induction', [[1], [2]]), /one sequence/],
    [() => modelHeadScores({}, [1]), /model: expected a Transformer/],
  ];
  for (const [f, re] of cases) {
    assert.throws(f, (e) => e.name === 'HeadscopeError' && re.test(e.message), String(re));
  }
});

// The keyword and custom detectors: "mul" scores of their detection patterns, as the four above.
test('keyword and custom detectors are the "mul" score of their patterns; matrix, predicate and formula agree', () => {
  fc.assert(fc.property(arbCase, fc.integer({ min: 0, max: 3 }), fc.integer({ min: 1, max: 3 }), (c, keyword, back) => {
    const { tokens, pattern } = materialize(c);
    const { B, H, T } = c;
    const formula = `j == i - ${back} || tj == ${keyword} && j < i`;
    const js = (i, j, t) => j === i - back || (t[j] === keyword && j < i);
    // Every row: the formula's matrix of each sequence differs, so the matrix form takes one row.
    const targets = tokens.map((row) => row.map((_, i) => (i % 2 === 0 ? 7 : -100)));
    const opts = { excludeBos: c.excludeBos, excludeCurrentToken: c.excludeCurrentToken, keywords: [keyword] };
    const byFormula = headScores(pattern, tokens, { ...opts, detectors: ['keyword', 'custom'], custom: formula, targets });
    const byFunction = headScores(pattern, tokens, { ...opts, detectors: ['custom'], custom: (i, j, t) => js(i, j, t), targets });
    assert.deepEqual(byFunction.custom, byFormula.custom);
    for (let h = 0; h < H; h++) {
      for (const [name, D] of [['keyword', (t) => t.map((_, i) => t.map((tj, j) => (j <= i && tj === keyword ? 1 : 0)))],
        ['custom', (t) => t.map((_, i) => t.map((__, j) => (j <= i && js(i, j, t) ? 1 : 0)))]]) {
        let want = 0;
        for (let b = 0; b < B; b++) {
          // Only the counted (even) rows: the others' attention is left out of both sums.
          const P = Array.from({ length: T }, (_, i) => (i % 2 === 0
            ? Array.from(pattern.data.subarray(((b * H + h) * T + i) * T, ((b * H + h) * T + i + 1) * T)) : new Array(T).fill(0)));
          want += tlScore(P, D(tokens[b]), c.excludeBos, c.excludeCurrentToken);
        }
        want /= B;
        const g = byFormula[name][h];
        if (Number.isNaN(want)) assert.ok(Number.isNaN(g), `${name} h${h}: NaN expected`);
        else assert.ok(Math.abs(g - want) <= 1e-12 * Math.max(1, Math.abs(want)), `${name} h${h}: ${g} vs ${want}`);
      }
    }
    // The matrix form of the first sequence's pattern gives its scores.
    const D = detectionPattern('custom', tokens[0], { custom: formula });
    const one = { data: pattern.data.subarray(0, H * T * T), shape: [1, H, T, T] };
    const matrix = Array.from({ length: T }, (_, i) => Array.from(D.subarray(i * T, (i + 1) * T)));
    assert.deepEqual(headScores(one, [tokens[0]], { detectors: ['custom'], custom: matrix }).custom,
      headScores(one, [tokens[0]], { detectors: ['custom'], custom: formula }).custom);
  }), { numRuns: 200 });
});

test('the formula language: operators, precedence and vocabulary tokens as JavaScript computes them', () => {
  const vocab = ['<bos>', 'a', 'b', 'ERROR'];
  const cases = [
    ['j == i - 2', (i, j) => j === i - 2],
    ['i - j >= 2 && i - j <= 3', (i, j) => i - j >= 2 && i - j <= 3],
    ['j % 3 == 0 || !(tj == ti)', (i, j, ti, tj) => j % 3 === 0 || !(tj === ti)],
    ['tj == "ERROR"', (i, j, ti, tj) => tj === 3],
    ['(i + j) / 2 == j', (i, j) => Math.trunc((i + j) / 2) === j],
    ['j == T - 1 - i', (i, j, ti, tj, T) => j === T - 1 - i],
    ['-j + i * 2 > 3 == 1', (i, j) => ((-j + i * 2 > 3) ? 1 : 0) === 1],
    ['i / 0 == 0 && i % 0 == 0', () => true],
    ['tj', (i, j, ti, tj) => tj !== 0],
  ];
  for (const [text, js] of cases) {
    const f = compileFormula(text, { vocab });
    for (let i = 0; i < 6; i++) {
      for (let j = 0; j <= i; j++) {
        for (const [ti, tj] of [[0, 0], [1, 3], [2, 2], [3, 1]]) assert.equal(f(i, j, ti, tj, 6), js(i, j, ti, tj, 6), `${text} at ${i} ${j} ${ti} ${tj}`);
      }
    }
  }
  const bad = [
    ['j ==', /at character 5: expected a number/],
    ['x > 1', /at character 1: unknown name x/],
    ['tj == "WARN"', /at character 7: "WARN" is not a token of the vocabulary/],
    ['i ) j', /at character 3: expected an operator or the end, got \)/],
    ['1 $ 2', /at character 3: unexpected \$ 2/],
    ['(i == j', /expected \), got the end/],
    ['', /expected a formula/],
    ['i'.repeat(501), /at most 500 characters/],
    [42, /expected a formula/],
  ];
  for (const [text, re] of bad) {
    assert.throws(() => compileFormula(text, { vocab, name: 'options.custom' }),
      (e) => e.name === 'HeadscopeError' && e.code === 'INVALID_ARGUMENT' && /^options\.custom: /.test(e.message) && re.test(e.message), String(re));
  }
  // A deep but legal nesting compiles (no stack overflow at the length limit).
  assert.equal(compileFormula(`${'('.repeat(240)}i${')'.repeat(240)} == j`)(2, 2, 0, 0, 3), true);
});

test('log-line: at the answer rows one layer-0 head reads the level (keyword detector), which over every row it does not show', () => {
  const task = makeTask('log-line', { seed: 1 });
  const m = hs.createTransformer({ vocabSize: task.vocabSize, maxLen: task.seqLen, dModel: 64, nLayers: 2, nHeads: 4, seed: 1 });
  try {
    m.setOptimizer({ type: 'adamw', lr: 3e-3, weightDecay: 0.01, clipGradNorm: 1 });
    for (let k = 0; k < 300; k++) {
      const b = task.batch(16, k);
      m.trainStep(b.tokens, b.targets);
    }
    const held = task.heldOut(64, 0);
    const keywords = ['DEBUG', 'INFO', 'WARN', 'ERROR'].map((x) => task.vocab.indexOf(x));
    const atAnswers = modelHeadScores(m, held.tokens, { detectors: ['keyword'], keywords, targets: held.targets }).keyword;
    const everywhere = modelHeadScores(m, held.tokens, { detectors: ['keyword'], keywords }).keyword;
    const best = Math.max(...atAnswers[0]);
    const h = atAnswers[0].indexOf(best);
    assert.ok(best > 0.9, `layer 0's best keyword head at the answer rows: ${atAnswers[0]}`);
    assert.ok(everywhere[0][h] < 0.5, `over every row: ${everywhere[0][h]}`);
  } finally {
    m.dispose();
  }
});

test('the new detectors\' bad input: named', () => {
  const pattern = { data: new Float32Array(4), shape: [1, 1, 2, 2] };
  const cases = [
    [{ detectors: ['keyword'] }, /options.keywords: expected a non-empty array of token ids/],
    [{ detectors: ['keyword'], keywords: [1, -1] }, /options.keywords\[1\]: expected a token id/],
    [{ detectors: ['custom'] }, /options.custom: expected a \(T, T\) detection pattern/],
    [{ detectors: ['custom'], custom: [[0, 1], [1, 2]] }, /options.custom\[1\]\[1\]: expected 0 or 1/],
    [{ detectors: ['custom'], custom: [[0, 1, 0]] }, /options.custom: expected a \(T, T\)/],
    [{ detectors: ['custom'], custom: [[0, 0, 0], [0, 0, 0], [0, 0, 0]] }, /a \(3, 3\) pattern for sequences of 2 tokens/],
    [{ detectors: ['custom'], custom: 'k == 1' }, /options.custom: at character 1: unknown name k/],
    [{ targets: [[1, 2, 3]] }, /options.targets: expected the tokens' shape \(1, 2\)/],
  ];
  for (const [options, re] of cases) {
    assert.throws(() => headScores(pattern, [[1, 2]], options), (e) => e.name === 'HeadscopeError' && re.test(e.message), String(re));
  }
  assert.deepEqual(ALL_DETECTORS, [...DETECTORS, 'keyword', 'custom']);
});
