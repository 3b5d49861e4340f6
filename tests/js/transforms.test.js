// The Heads view's data transforms (web/views/heads/transforms.js): tokens, features, weight presets and
// summaries. The presets are checked the only way that counts: the real engine runs them on the
// seed's log line and on a sentence with repeated words, and each head looks where its construction
// says it does.
import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import { init } from '../../web/lib/index.js';
import { readFileSync } from 'node:fs';
import * as T from '../../web/views/heads/transforms.js';
import { caseLabels } from '../../web/views/heads/data.js';

const hs = await init();
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const LOG_LINE = T.DEFAULT_TEXT;
const LOG_TOKENS = ['2024-01-15', '10:30:45', 'ERROR', '[', 'order-api', ']', 'connection_timeout',
  'retry', '=', '3', 'duration', '=', '5000ms', 'service', '=', 'database'];
const REPEATS = 'the cat sat on the mat because the mat was warm';

function close(a, b, tol, what) {
  assert.ok(Math.abs(a - b) <= tol, `${what}: ${a} vs ${b} (tolerance ${tol})`);
}

/** Runs tokens through a layer of the given presets; returns per-head weights and the trace. */
function runPresets(tokens, { numHeads, heads, sharpness = 6, seed = 1, options = {} }) {
  const x = T.embed(tokens);
  const mha = hs.createMultiheadAttention({ embedDim: 64, numHeads });
  try {
    mha.loadStateDict(T.buildStateDict({ embedDim: 64, numHeads, heads, sharpness, seed, length: tokens.length }));
    const trace = mha.trace(x, x, x, options);
    const L = tokens.length;
    const head = (h) => T.headWeights(trace.weights.data, { h, H: numHeads, L, S: L });
    return { trace, head, L, x };
  } finally {
    mha.dispose();
  }
}

const indicesWhere = (tokens, predicate) => tokens.flatMap((t, j) => (predicate(t, j) ? [j] : []));
const rowMass = (w, S, i, keys) => keys.reduce((sum, j) => sum + w[i * S + j], 0);

describe('seededRandom and hashString', () => {
  test('the same seed gives the same sequence, in [0, 1)', () => {
    const a = T.seededRandom(42);
    const b = T.seededRandom(42);
    const xs = Array.from({ length: 1000 }, () => a());
    assert.deepEqual(xs, Array.from({ length: 1000 }, () => b()));
    assert.ok(xs.every((x) => x >= 0 && x < 1));
    close(xs.reduce((s, x) => s + x, 0) / xs.length, 0.5, 0.05, 'mean');
    assert.notDeepEqual(Array.from({ length: 5 }, T.seededRandom(43)), xs.slice(0, 5));
  });

  test('hashString is a deterministic 32-bit hash that depends on the seed', () => {
    assert.equal(T.hashString('error'), T.hashString('error'));
    assert.notEqual(T.hashString('error'), T.hashString('errors'));
    assert.notEqual(T.hashString('error', 1), T.hashString('error', 2));
    const h = T.hashString('timeout');
    assert.ok(Number.isInteger(h) && h >= 0 && h < 2 ** 32);
  });
});

describe('tokenize', () => {
  test('an emoji, a flag, a ZWJ family or a letter with combining marks is one token, never split', () => {
    assert.deepEqual(T.tokenize('👍🏽 ok').tokens, ['👍🏽', 'ok']);
    assert.deepEqual(T.tokenize('👨‍👩‍👧!').tokens, ['👨‍👩‍👧', '!']);
    assert.deepEqual(T.tokenize('🇫🇷🇩🇪 a').tokens, ['🇫🇷', '🇩🇪', 'a']);
    assert.deepEqual(T.tokenize('cafe\u0301 x').tokens, ['cafe\u0301', 'x']);
    assert.deepEqual(T.tokenize('a👍🏽b 😀😀').tokens, ['a', '👍🏽', 'b', '😀', '😀']);
    // Every token is whole graphemes: joined back, the text's graphemes less its spaces.
    const text = '🏳️‍🌈 x\u0308y 👩🏾‍💻=1 ❤️';
    const graphemes = [...new Intl.Segmenter(undefined, { granularity: 'grapheme' }).segment(text)]
      .map((s) => s.segment).filter((g) => g.trim() !== '');
    assert.equal(T.tokenize(text).tokens.join(''), graphemes.join(''));
    for (const token of T.tokenize(text).tokens) {
      const inside = [...new Intl.Segmenter(undefined, { granularity: 'grapheme' }).segment(token)].map((s) => s.segment);
      assert.ok(inside.every((g) => graphemes.includes(g) || /^[\p{L}\p{N}=]$/u.test(g)), `${token}: ${inside}`);
    }
  });

  test('the seed\'s log line: brackets and = alone; dates, times, identifiers whole', () => {
    assert.deepEqual(T.tokenize(LOG_LINE), { tokens: LOG_TOKENS, total: 16, truncated: false });
  });

  test('sentences: words, numbers and punctuation', () => {
    assert.deepEqual(T.tokenize('Hello, world! It\'s 3.14 (roughly)...').tokens,
      ['Hello', ',', 'world', '!', 'It\'s', '3.14', '(', 'roughly', ')', '.', '.', '.']);
    assert.deepEqual(T.tokenize('ERROR: payment-svc failed at 192.168.0.1:8080').tokens,
      ['ERROR', ':', 'payment-svc', 'failed', 'at', '192.168.0.1:8080']);
    assert.deepEqual(T.tokenize('key:value a:1').tokens, ['key', ':', 'value', 'a', ':', '1']);
    assert.deepEqual(T.tokenize('  \n\t ').tokens, []);
  });

  test('Han characters are one token each; other scripts keep their words', () => {
    assert.deepEqual(T.tokenize('多头注意力 works').tokens, ['多', '头', '注', '意', '力', 'works']);
    assert.deepEqual(T.tokenize('Größe café').tokens, ['Größe', 'café']);
  });

  test('maxTokens truncates and says so', () => {
    const text = Array.from({ length: 140 }, (_, i) => `w${i}`).join(' ');
    const r = T.tokenize(text);
    assert.equal(r.tokens.length, T.MAX_TOKENS);
    assert.equal(T.MAX_TOKENS, 128);
    assert.equal(r.total, 140);
    assert.equal(r.truncated, true);
    assert.equal(r.tokens[127], 'w127');
    assert.equal(T.tokenize(text, { maxTokens: 32 }).tokens.length, 32);
    assert.deepEqual(T.tokenize(text, { maxTokens: 3 }), { tokens: ['w0', 'w1', 'w2'], total: 140, truncated: true });
    assert.equal(T.tokenize('a b', { maxTokens: 2 }).truncated, false);
    assert.throws(() => T.tokenize(7), TypeError);
    assert.throws(() => T.tokenize('a', { maxTokens: -1 }), RangeError);
  });
});

describe('token classes', () => {
  test('keywords: the word or any part of it', () => {
    for (const t of ['ERROR', 'connection_timeout', 'Failed', 'NullPointerException', 'db.timeout', 'WARN']) {
      assert.ok(T.isKeyword(t), t);
    }
    for (const t of ['terror', 'retry', 'order-api', '5000ms', '=']) assert.ok(!T.isKeyword(t), t);
  });

  test('number, upper, punct, word', () => {
    assert.deepEqual(T.tokenClasses('ERROR'), { number: false, upper: true, keyword: true, punct: false, word: true });
    assert.deepEqual(T.tokenClasses('5000ms'), { number: true, upper: false, keyword: false, punct: false, word: false });
    assert.deepEqual(T.tokenClasses('['), { number: false, upper: false, keyword: false, punct: true, word: false });
    assert.equal(T.tokenClasses('2024-01-15').number, true);
    assert.equal(T.tokenClasses('I').upper, false);  // one letter is not an upper-case word
    assert.equal(T.tokenClasses('order-api').word, true);
  });
});

describe('features', () => {
  test('layout of embedDim 64: 16 position dims, 40 identity dims, 8 class dims', () => {
    const layout = T.featureLayout(64);
    assert.deepEqual([layout.position.start, layout.position.size], [0, 16]);
    assert.deepEqual([layout.identity.start, layout.identity.size, layout.identity.blocks], [16, 40, 20]);
    assert.equal(layout.classes.start, 56);
    assert.deepEqual(Object.keys(layout.classes.dim), T.CLASS_FEATURES);
    assert.equal(layout.classes.dim.bias, 56);
    assert.equal(layout.names.length, 64);
    assert.equal(layout.names[0], 'sin ω0');
    assert.equal(layout.names[63], 'word');
    // Highest frequency first, decreasing.
    const f = layout.position.frequencies;
    assert.equal(f.length, 8);
    assert.ok(f.every((w, k) => k === 0 || w < f[k - 1]));
    assert.deepEqual(T.featureLayout(32).identity.size, 16);
    for (const bad of [30, 24, 64.5, 'x']) assert.throws(() => T.featureLayout(bad), RangeError);
  });

  test('embed: position pairs, identity unit vectors equal for equal tokens, class flags', () => {
    const tokens = ['ERROR', 'x', '=', 'error', '42', '='];
    const { data, shape, layout } = T.embed(tokens);
    assert.deepEqual(shape, [6, 64]);
    assert.equal(data.length, 6 * 64);
    const row = (p) => data.subarray(p * 64, (p + 1) * 64);
    const id = (p) => Array.from(row(p).subarray(16, 56));
    // Position: sin / cos of omega_k p.
    layout.position.frequencies.forEach((w, k) => {
      close(row(3)[2 * k], Math.sin(3 * w), 1e-6, `sin ω${k}`);
      close(row(3)[2 * k + 1], Math.cos(3 * w), 1e-6, `cos ω${k}`);
    });
    // Identity: a unit vector of equal-length 2-d blocks, the same for ERROR and error.
    assert.deepEqual(id(0), id(3));
    assert.deepEqual(id(2), id(5));
    assert.notDeepEqual(id(0), id(1));
    close(Math.hypot(...id(1)), 1, 1e-5, '|identity|');
    for (let b = 0; b < 20; b++) close(Math.hypot(id(1)[2 * b], id(1)[2 * b + 1]), 1 / Math.sqrt(20), 1e-6, `block ${b}`);
    // Classes.
    const dim = layout.classes.dim;
    for (let p = 0; p < 6; p++) {
      assert.equal(row(p)[dim.bias], 1);
      assert.equal(row(p)[dim.first], p === 0 ? 1 : 0);
      close(row(p)[dim.order], p / Math.max(T.PRESET_LENGTH, tokens.length), 1e-7, 'order');
    }
    assert.deepEqual([dim.upper, dim.keyword, dim.word, dim.number, dim.punct].map((d) => row(0)[d]), [1, 1, 1, 0, 0]);
    assert.deepEqual([dim.upper, dim.keyword, dim.word].map((d) => row(3)[d]), [0, 1, 1]);
    assert.equal(row(4)[dim.number], 1);
    assert.equal(row(2)[dim.punct], 1);
    // Deterministic, and the hash seed is an option.
    assert.deepEqual(T.embed(tokens).data, data);
    assert.notDeepEqual(Array.from(T.embed(tokens, { seed: 5 }).data.subarray(16, 56)), id(0));
  });

  test('positionMargin: more pairs separate offsets better', () => {
    const f = T.featureLayout(64).position.frequencies;
    const m2 = T.positionMargin(f.slice(0, 2)) / 2;
    const m4 = T.positionMargin(f.slice(0, 4)) / 4;
    const m8 = T.positionMargin(f) / 8;
    assert.ok(m2 > 0 && m4 > m2 && m8 > m4, `${m2} ${m4} ${m8}`);
  });
});

describe('state_dicts', () => {
  test('buildStateDict: PyTorch shapes, deterministic, W_O W_V = I', () => {
    const sd = T.buildStateDict({ embedDim: 64, numHeads: 8 });
    assert.deepEqual(Object.keys(sd), ['in_proj_weight', 'in_proj_bias', 'out_proj.weight', 'out_proj.bias']);
    assert.deepEqual(sd.in_proj_weight.shape, [192, 64]);
    assert.deepEqual(sd.in_proj_bias.shape, [192]);
    assert.deepEqual(sd['out_proj.weight'].shape, [64, 64]);
    assert.deepEqual(sd['out_proj.bias'].shape, [64]);
    assert.deepEqual(T.buildStateDict({ embedDim: 64, numHeads: 8 }), sd);
    // W_V is orthogonal and W_O its transpose: their product is the identity.
    const wv = sd.in_proj_weight.data.subarray(128 * 64);
    const wo = sd['out_proj.weight'].data;
    for (let r = 0; r < 64; r += 7) {
      for (let c = 0; c < 64; c += 5) {
        let dot = 0;
        for (let k = 0; k < 64; k++) dot += wo[r * 64 + k] * wv[k * 64 + c];
        close(dot, r === c ? 1 : 0, 1e-5, `(W_O W_V)[${r}][${c}]`);
      }
    }
  });

  test('buildStateDict: each preset writes only its own head\'s query and key rows', () => {
    for (const preset of T.ALL_PRESETS) {
      const heads = ['first-token', 'first-token', 'first-token', 'first-token'];
      heads[2] = preset;
      const alone = T.buildStateDict({ embedDim: 64, numHeads: 4, heads });
      const base = T.buildStateDict({ embedDim: 64, numHeads: 4, heads: ['first-token', 'first-token', 'first-token', 'first-token'] });
      const w = alone.in_proj_weight.data;
      const b = alone.in_proj_bias.data;
      for (let r = 0; r < 128; r++) {
        const inHead2 = (r % 64) >= 32 && (r % 64) < 48;
        if (inHead2) continue;
        assert.deepEqual(w.subarray(r * 64, (r + 1) * 64), base.in_proj_weight.data.subarray(r * 64, (r + 1) * 64), `${preset}: row ${r}`);
        assert.equal(b[r], base.in_proj_bias.data[r], `${preset}: bias ${r}`);
      }
    }
  });

  test('buildStateDict checks its arguments', () => {
    assert.throws(() => T.buildStateDict({ numHeads: 3 }), RangeError);
    assert.throws(() => T.buildStateDict({ numHeads: 2, heads: ['first-token'] }), RangeError);
    assert.throws(() => T.buildStateDict({ numHeads: 1, heads: ['nope'] }), /unknown preset/);
    assert.throws(() => T.buildStateDict({ numHeads: 1, sharpness: -1 }), RangeError);
  });

  test('defaultPresets cycles the presets; a single head gets the blend', () => {
    assert.deepEqual(T.defaultPresets(1), ['blend']);
    assert.deepEqual(T.defaultPresets(4), ['previous-token', 'first-token', 'keyword', 'numbers']);
    assert.deepEqual(T.defaultPresets(8), [...T.PRESETS, 'previous-token', 'first-token']);
    assert.deepEqual(T.defaultPresets(16).slice(12), ['previous-token', 'first-token', 'keyword', 'numbers']);
  });

  test('randomStateDict: PyTorch init bounds, zero biases, seeded', () => {
    const sd = T.randomStateDict({ embedDim: 64, numHeads: 4, seed: 3 });
    const bound = Math.sqrt(6 / 256);
    assert.ok(sd.in_proj_weight.data.every((x) => Math.abs(x) <= bound));
    assert.ok(sd['out_proj.weight'].data.every((x) => Math.abs(x) <= 1 / 8));
    assert.ok(sd.in_proj_bias.data.every((x) => x === 0) && sd['out_proj.bias'].data.every((x) => x === 0));
    assert.deepEqual(T.randomStateDict({ embedDim: 64, numHeads: 4, seed: 3 }), sd);
    assert.notDeepEqual(T.randomStateDict({ embedDim: 64, numHeads: 4, seed: 4 }).in_proj_weight.data, sd.in_proj_weight.data);
  });

  test('ablateStateDict zeroes the switched-off heads\' columns of out_proj.weight', () => {
    const E = 8;
    const data = Float32Array.from({ length: E * E }, (_, i) => i + 1);
    const sd = { in_proj_weight: { data: new Float32Array(3 * E * E), shape: [3 * E, E] },
      'out_proj.weight': { data, shape: [E, E] } };
    const off = T.ablateStateDict(sd, { embedDim: E, numHeads: 4, ablated: [1, 3] });
    assert.equal(off.in_proj_weight, sd.in_proj_weight);  // untouched entries are shared
    assert.equal(data[2], 3, 'the original is not modified');
    for (let r = 0; r < E; r++) {
      for (let c = 0; c < E; c++) {
        const zero = (c >= 2 && c < 4) || c >= 6;
        assert.equal(off['out_proj.weight'].data[r * E + c], zero ? 0 : r * E + c + 1);
      }
    }
    // Maps and nested arrays too.
    const nested = new Map([['out_proj.weight', [[1, 2], [3, 4]]]]);
    assert.deepEqual(Array.from(T.ablateStateDict(nested, { embedDim: 2, numHeads: 2, ablated: new Set([0]) })['out_proj.weight'].data), [0, 2, 0, 4]);
    assert.throws(() => T.ablateStateDict(sd, { embedDim: E, numHeads: 4, ablated: [4] }), RangeError);
  });
});

describe('masks', () => {
  test('causalMask blocks the keys after each query; keyPaddingMask the chosen keys', () => {
    assert.deepEqual(T.causalMask(3), { data: Uint8Array.from([0, 1, 1, 0, 0, 1, 0, 0, 0]), shape: [3, 3] });
    assert.deepEqual(T.keyPaddingMask(4, new Set([1, 3, 9])), { data: Uint8Array.from([0, 1, 0, 1]), shape: [4] });
  });
});

describe('summaries', () => {
  test('headStatsRow picks batch element n of the engine\'s (N, H) or (H) head statistics', () => {
    const t = (data, shape) => ({ data: Float32Array.from(data), shape });
    const batched = {
      entropy: t([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [2, 3]),
      distance: t([1, 2, 3, 4, 5, 6], [2, 3]),
      maxWeight: t([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [2, 3]),
    };
    const row = T.headStatsRow(batched, 1);
    assert.deepEqual(Object.keys(row), T.HEAD_STATS);
    assert.deepEqual(Array.from(row.entropy), Array.from(Float32Array.from([0.4, 0.5, 0.6])));
    assert.deepEqual(Array.from(row.distance), [4, 5, 6]);
    assert.deepEqual(Array.from(row.maxWeight), Array.from(Float32Array.from([0.6, 0.5, 0.4])));
    assert.equal(row.distance.buffer, batched.distance.data.buffer, 'a view, no copy');
    const unbatched = { entropy: t([0, 1], [2]), distance: t([2, 3], [2]), maxWeight: t([1, 0.5], [2]) };
    assert.equal(T.headStatsRow(unbatched).entropy, unbatched.entropy.data);
    assert.equal(T.headStatsRow(unbatched, 3).maxWeight, unbatched.maxWeight.data, 'n is ignored unbatched');
  });

  test('meanOverHeads leaves out the heads with no rows (NaN); NaN when none has any', () => {
    close(T.meanOverHeads(Float32Array.from([0.5, 1.5, 1])), 1, 1e-12, 'mean');
    close(T.meanOverHeads([2, NaN, 4]), 3, 1e-12, 'NaN head left out');
    assert.ok(Number.isNaN(T.meanOverHeads([NaN, NaN])));
    assert.ok(Number.isNaN(T.meanOverHeads([])));
  });

  test('headWeights and argmaxRows read (N, H, L, S) blocks', () => {
    // N = 2, H = 2, L = 2, S = 2.
    const w = Float32Array.from([1, 0, 0, 1, /* h1 */ 0.5, 0.5, 0.5, 0.5, /* n1 h0 */ 0, 1, 1, 0, /* n1 h1 */ 0.2, 0.8, 0, 0]);
    assert.deepEqual(Array.from(T.headWeights(w, { n: 1, h: 0, H: 2, L: 2, S: 2 })), [0, 1, 1, 0]);
    assert.deepEqual(Array.from(T.argmaxRows(w.subarray(12), 2, 2)), [1, -1]);
  });

  test('outputDifference: per-token norms, total and relative', () => {
    const before = Float32Array.from([3, 0, 0, 4]);
    const after = Float32Array.from([0, 0, 0, 4]);
    const d = T.outputDifference(before, after, 2, 2);
    assert.deepEqual(Array.from(d.perToken), [3, 0]);
    assert.equal(d.total, 3);
    close(d.relative, 3 / 5, 1e-12, 'relative');
    assert.deepEqual(Array.from(d.difference), [-3, 0, 0, 0]);
    assert.equal(T.outputDifference(new Float32Array(2), new Float32Array(2), 1, 2).relative, 0);
  });

  test('batchRows picks a batch element in either layout', () => {
    const seqFirst = Float32Array.from([0, 1, 10, 11, 20, 21, 30, 31]);  // (L=2, N=2, E=2)
    assert.deepEqual(Array.from(T.batchRows(seqFirst, [2, 2, 2], { n: 1 })), [10, 11, 30, 31]);
    assert.deepEqual(Array.from(T.batchRows(seqFirst, [2, 2, 2], { n: 1, batchFirst: true })), [20, 21, 30, 31]);
    assert.equal(T.batchRows(seqFirst, [4, 2]), seqFirst);
  });

  test('16 heads get 16 colours (--hs-head-1..16, each defined in both schemes); past 16 they cycle, dashed', () => {
    const colors = Array.from({ length: 16 }, (_, h) => T.headColor(h));
    assert.equal(new Set(colors).size, 16);
    assert.equal(T.headColor(15), 'var(--hs-head-16)');
    assert.equal(T.headColor(16), 'var(--hs-head-1)');
    assert.equal(T.headDashed(15), false);
    assert.equal(T.headDashed(16), true);
    // Every variable has a distinct value in the light block and in the dark block of the stylesheet.
    const css = readFileSync(new URL('../../web/views/headscope.css', import.meta.url), 'utf8');
    const [light, dark] = css.split('@media (prefers-color-scheme: dark)');
    for (const block of [light, dark.slice(0, dark.indexOf('}\n}'))]) {
      const values = Array.from({ length: 16 }, (_, h) => block.match(new RegExp(`--hs-head-${h + 1}: (#[0-9a-f]{6})`))?.[1]);
      assert.ok(values.every(Boolean), values.join());
      assert.equal(new Set(values).size, 16, values.join());
    }
  });

  test('caseLabels: t1..tL, keys of cross attention k1..kS, extra keys named', () => {
    assert.deepEqual(caseLabels({ L: 2, S: 2, sourceLength: 2, selfAttention: true }), { queries: ['t1', 't2'], keys: ['t1', 't2'] });
    assert.deepEqual(caseLabels({ L: 1, S: 4, sourceLength: 2, selfAttention: false, addBiasKV: true, addZeroAttn: true }),
      { queries: ['t1'], keys: ['k1', 'k2', 'bias_k', 'zero'] });
    // Tokens given with the case (setCase's option) name the queries, and self-attention's keys.
    assert.deepEqual(caseLabels({ L: 3, S: 3, sourceLength: 3, selfAttention: true, tokens: ['<bos>', 'a', 'a'] }),
      { queries: ['<bos>', 'a', 'a'], keys: ['<bos>', 'a', 'a'] });
    assert.deepEqual(caseLabels({ L: 2, S: 2, sourceLength: 2, selfAttention: false, tokens: ['x', 'y'] }),
      { queries: ['x', 'y'], keys: ['k1', 'k2'] });
  });
});

describe('the presets, run by the engine', () => {
  const tokens = T.tokenize(LOG_LINE).tokens;
  const numbers = indicesWhere(tokens, (t) => T.tokenClasses(t).number);
  const keywords = indicesWhere(tokens, (t) => T.isKeyword(t));

  test('the log line\'s keywords and numbers are the ones the seed names', () => {
    assert.deepEqual(keywords.map((j) => tokens[j]), ['ERROR', 'connection_timeout']);
    assert.deepEqual(numbers.map((j) => tokens[j]), ['2024-01-15', '10:30:45', '3', '5000ms']);
  });

  for (const numHeads of [4, 8, 16]) {
    test(`${numHeads} heads on the log line: previous-token, first-token, keyword and numbers heads`, () => {
      const heads = Array.from({ length: numHeads }, (_, h) => ['previous-token', 'first-token', 'keyword', 'numbers'][h % 4]);
      const { head, L } = runPresets(tokens, { numHeads, heads });
      const previous = head(0);
      const argPrevious = T.argmaxRows(previous, L, L);
      for (let i = 1; i < L; i++) {
        assert.equal(argPrevious[i], i - 1, `previous-token head, query ${i}`);
        assert.ok(previous[i * L + i - 1] > 0.9, `previous-token weight ${previous[i * L + i - 1]}`);
      }
      const first = head(1);
      assert.ok(T.argmaxRows(first, L, L).every((j) => j === 0), 'first-token head');
      for (let i = 0; i < L; i++) assert.ok(first[i * L] > 0.9, `first-token weight, query ${i}`);
      const keyword = head(2);
      const argKeyword = T.argmaxRows(keyword, L, L);
      for (let i = 0; i < L; i++) {
        assert.ok(keywords.includes(argKeyword[i]), `keyword head, query ${i} looks at ${tokens[argKeyword[i]]}`);
        assert.ok(rowMass(keyword, L, i, keywords) > 0.9, 'keyword mass');
      }
      const number = head(3);
      const argNumber = T.argmaxRows(number, L, L);
      for (let i = 0; i < L; i++) {
        assert.ok(numbers.includes(argNumber[i]), `numbers head, query ${i} looks at ${tokens[argNumber[i]]}`);
        assert.ok(rowMass(number, L, i, numbers) > 0.9, 'numbers mass');
      }
    });
  }

  // Beyond the presets' design length of 32 tokens: 128 tokens (the view's limit) of a long log,
  // every preset still does its job (positions and the order ramp cover the whole text).
  test('128 tokens: previous-token, first-token and same-token heads stay exact', () => {
    const long = T.tokenize(Array.from({ length: 12 }, (_, k) => `${LOG_LINE} step=${k}`).join(' ')).tokens;
    assert.equal(long.length, 128);
    const { head, L } = runPresets(long, { numHeads: 4, heads: ['previous-token', 'first-token', 'same-token', 'numbers'] });
    const prev = T.argmaxRows(head(0), L, L);
    for (let i = 1; i < L; i++) assert.equal(prev[i], i - 1, `previous-token head, query ${i}`);
    assert.ok(T.argmaxRows(head(1), L, L).every((j) => j === 0), 'first-token head');
    const lower = long.map((w) => w.toLowerCase());
    const same = T.argmaxRows(head(2), L, L);
    const hits = lower.filter((w, i) => same[i] === lower.indexOf(w)).length;
    assert.equal(hits, L, `same-token head: ${hits} of ${L} at the first copy`);
  });

  // The same-token head looks, from each token, at its first occurrence: an earlier copy of a
  // repeated word, itself otherwise. Narrow heads have fewer identity dims to tell tokens apart.
  function sameTokenHits(text, numHeads) {
    const words = T.tokenize(text).tokens;
    const { head, L } = runPresets(words, { numHeads, heads: Array(numHeads).fill('same-token') });
    const lower = words.map((w) => w.toLowerCase());
    const arg = T.argmaxRows(head(1), L, L);
    return { words, lower, arg, L, hits: lower.filter((w, i) => arg[i] === lower.indexOf(w)).length };
  }

  for (const numHeads of [2, 4, 8]) {
    test(`${numHeads} heads: the same-token head looks back at the first copy of a repeated word`, () => {
      const { words, lower, arg, L, hits } = sameTokenHits(REPEATS, numHeads);
      for (let i = 0; i < L; i++) {
        const firstCopy = lower.indexOf(lower[i]);
        if (firstCopy < i) assert.equal(arg[i], firstCopy, `query ${i} (${words[i]}) looks at ${words[arg[i]]}@${arg[i]}`);
      }
      assert.equal(hits, L, 'every other token looks at itself');
    });
  }

  test('the seed\'s what-if: at 16 heads of 4 dims the same-token head confuses tokens', () => {
    const narrow = sameTokenHits(LOG_LINE, 16);
    const wide = sameTokenHits(LOG_LINE, 4);
    assert.equal(wide.hits, wide.L);
    assert.ok(narrow.hits < wide.L - 3, `16 heads: ${narrow.hits} of ${narrow.L} right`);
  });

  test('one head blends the five patterns: the first token, a number, outshouts the rest', () => {
    const { head, L } = runPresets(tokens, { numHeads: 1, heads: ['blend'] });
    const arg = T.argmaxRows(head(0), L, L);
    assert.ok(arg.filter((j) => j === 0).length > L / 2, `argmax per query: ${arg}`);
  });

  // The numbers the Heads view's cards show are the engine's (trace with headStats): they say
  // what the presets were built to do.
  test('the engine\'s head statistics of the presets: sharp heads, near or far, uniform at sharpness 0', () => {
    const L = tokens.length;
    const heads = ['previous-token', 'first-token', 'keyword', 'numbers'];
    const { trace } = runPresets(tokens, { numHeads: 4, heads, options: { headStats: true } });
    const { entropy, distance, maxWeight } = T.headStatsRow(trace.headStats);
    assert.deepEqual(trace.headStats.entropy.shape, [4]);
    // previous-token and first-token look at one key each; keyword shares its weight between the
    // two keywords, numbers between the four numbers: ln 2 and ln 4 nats, confidence 1/2 and 1/4.
    for (const h of [0, 1]) {
      assert.ok(entropy[h] < 0.5, `${heads[h]}: entropy ${entropy[h]}`);
      assert.ok(maxWeight[h] > 0.9, `${heads[h]}: confidence ${maxWeight[h]}`);
    }
    close(entropy[2], Math.log(2), 0.2, 'keyword entropy');
    close(maxWeight[2], 1 / 2, 0.05, 'keyword confidence');
    close(entropy[3], Math.log(4), 0.2, 'numbers entropy');
    close(maxWeight[3], 1 / 4, 0.05, 'numbers confidence');
    // Query i of the previous-token head looks 1 back (query 0 has nothing behind it); every
    // query of the first-token head looks i back: (L - 1) / 2 on average.
    assert.ok(distance[0] >= 0.9 && distance[0] < 2, `previous-token distance ${distance[0]}`);
    close(distance[1], (L - 1) / 2, 0.5, 'first-token distance');
    const flat = runPresets(tokens, { numHeads: 2, sharpness: 0, options: { headStats: true } }).trace.headStats;
    for (let h = 0; h < 2; h++) {
      close(flat.entropy.data[h], Math.log(L), 1e-4, 'uniform entropy');
      close(flat.maxWeight.data[h], 1 / L, 1e-6, 'uniform confidence');
    }
  });

  test('sharpness 0 gives uniform attention; random heads are seeded', () => {
    const { trace, L } = runPresets(tokens, { numHeads: 8, sharpness: 0 });
    for (const w of trace.weights.data) close(w, 1 / L, 1e-6, 'uniform weight');
    const a = runPresets(tokens, { numHeads: 2, heads: ['random', 'random'], seed: 5 }).trace.weights.data;
    const b = runPresets(tokens, { numHeads: 2, heads: ['random', 'random'], seed: 5 }).trace.weights.data;
    const c = runPresets(tokens, { numHeads: 2, heads: ['random', 'random'], seed: 6 }).trace.weights.data;
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, c);
  });

  test('masks: a padded key gets no weight, the causal mask none above the diagonal', () => {
    const L = tokens.length;
    const { trace } = runPresets(tokens, {
      numHeads: 8,
      options: { keyPaddingMask: T.keyPaddingMask(L, [2]), attnMask: T.causalMask(L) },
    });
    const w = trace.weights.data;
    for (let h = 0; h < 8; h++) {
      for (let i = 0; i < L; i++) {
        assert.equal(w[(h * L + i) * L + 2], 0, 'padded key');
        for (let j = i + 1; j < L; j++) assert.equal(w[(h * L + i) * L + j], 0, 'future key');
      }
    }
  });

  test('switching a head off equals removing its slice of the concatenated heads before W_O', () => {
    const E = 64;
    const H = 8;
    const hd = E / H;
    const x = T.embed(tokens);
    const L = tokens.length;
    const sd = T.buildStateDict({ embedDim: E, numHeads: H });
    const full = hs.createMultiheadAttention({ embedDim: E, numHeads: H });
    const off = hs.createMultiheadAttention({ embedDim: E, numHeads: H });
    try {
      full.loadStateDict(sd);
      off.loadStateDict(T.ablateStateDict(sd, { embedDim: E, numHeads: H, ablated: [2] }));
      const trace = full.trace(x, x, x);
      const ablated = off.forward(x, x, x, { averageAttnWeights: false });
      assert.deepEqual(ablated.weights.data, trace.weights.data, 'weights do not change');
      const wo = sd['out_proj.weight'].data;
      let changed = 0;
      for (let i = 0; i < L; i++) {
        for (let r = 0; r < E; r++) {
          let contribution = 0;
          for (let c = 2 * hd; c < 3 * hd; c++) contribution += trace.concat.data[i * E + c] * wo[r * E + c];
          const expected = trace.output.data[i * E + r] - contribution;
          close(ablated.output.data[i * E + r], expected, 1e-4, `output[${i}][${r}]`);
          changed += Math.abs(contribution);
        }
      }
      assert.ok(changed > 1, 'the head contributed something');
      const diff = T.outputDifference(trace.output.data, ablated.output.data, L, E);
      assert.ok(diff.total > 0 && diff.relative > 0 && diff.relative < 1);
    } finally {
      full.dispose();
      off.dispose();
    }
  });
});
