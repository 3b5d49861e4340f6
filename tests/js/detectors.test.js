// headscope/detectors: the head detectors against a line-by-line port of TransformerLens's
// head_detector (its detection patterns and its "mul" score, exclude_bos, exclude_current_token)
// on random patterns and tokens (fast-check); known patterns; a trained induction model's
// circuit found (a previous-token head in layer 0, induction heads in layer 1); bad input.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { init } from '../../web/lib/index.js';
import { makeTask } from '../../web/lib/tasks.js';
import { DETECTORS, detectionPattern, headScores, modelHeadScores } from '../../web/lib/detectors.js';

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
