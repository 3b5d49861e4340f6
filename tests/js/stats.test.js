// options.headStats: per (batch item, head) the mean over its query rows of the row's entropy
// (nats, over all S' keys), attention distance (sum_j w_ij |i - j| over the first S keys: the
// extra keys of addBiasKV / addZeroAttn add none) and largest weight; fully masked rows (all
// weights 0) left out, NaN for a head with no row left (L = 0 too) or with a NaN row (mha.h,
// HeadStats). Checked against a float64 JS computation from trace()'s per-head weights, for
// calls drawn by fast-check (every layout and option, masks with fully masked rows, both kernel
// paths, empty sequences); the same statistics whatever forward() returns of the weights, with any
// gates, from trace(), through initWorker(), from the 2-thread module; the seed's statistics worked
// out by hand; errors naming options.headStats.
//
// Reproduce a failure with fast-check's seed and path from the message:
//   HEADSCOPE_STATS_SEED=<seed> node --test tests/js/stats.test.js
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { init, HeadscopeError, Tensor } from '../../web/lib/index.js';
import { initWorker } from '../../web/lib/worker-client.js';
import { seedWorkedExample as seed } from '../../web/lib/examples.js';
import { mulberry32 } from './helpers.js';

const SEED = Number(process.env.HEADSCOPE_STATS_SEED ?? 20251201);
const RUNS = Number(process.env.HEADSCOPE_STATS_RUNS ?? 500);
const TOLERANCE = 1e-6;  // relative
// Plus float32's subnormal spacing twice over: a head as peaked as exp(-30 * ...) can have an
// entropy below FLT_MIN (1.2e-38), where a float32 holds fewer digits (the row's statistic and
// the mean are each rounded to a multiple of 2^-149).
const SUBNORMAL_SLACK = 2 ** -147;
const NAMES = ['entropy', 'distance', 'maxWeight'];

// The SIMD128 build, which the threaded module is: the bits compared with it below are a build's
// (under --experimental-wasm-relaxed-simd init() would load the relaxed one).
const hs = await init({ simd: 'simd128' });

after(() => {
  assert.equal(hs.liveHandles(), 0, 'live handles left after the suite');
});

const count = (shape) => shape.reduce((a, b) => a * b, 1);

// --- the float64 reference ------------------------------------------------------------------

/**
 * Head statistics from per-head weights ([N,] H, L, S') by their definitions, in float64: for
 * each (n, h), the mean over the rows i that are not all 0 of -sum_j w ln w (0 ln 0 = 0),
 * sum_{j < S} w |i - j| and max_j w; NaN with no such row or with a NaN row.
 */
function referenceStats(weights, extraKeys) {
  const shape = weights.shape;
  const [L, Sp] = shape.slice(-2);
  const S = Sp - extraKeys;
  const heads = count(shape.slice(0, -2));
  const out = Object.fromEntries(NAMES.map((n) => [n, new Float64Array(heads)]));
  for (let nh = 0; nh < heads; nh++) {
    let entropy = 0;
    let distance = 0;
    let maxWeight = 0;
    let rows = 0;
    for (let i = 0; i < L; i++) {
      const row = weights.data.subarray((nh * L + i) * Sp, (nh * L + i + 1) * Sp);
      if (row.every((w) => w === 0)) continue;  // fully masked: no distribution
      rows++;
      if (row.some(Number.isNaN)) {
        entropy = distance = maxWeight = NaN;
        continue;
      }
      let m = 0;
      for (let j = 0; j < Sp; j++) {
        const w = row[j];
        if (w > 0) entropy -= w * Math.log(w);
        if (j < S) distance += w * Math.abs(i - j);
        m = Math.max(m, w);
      }
      maxWeight += m;
    }
    out.entropy[nh] = rows ? entropy / rows : NaN;
    out.distance[nh] = rows ? distance / rows : NaN;
    out.maxWeight[nh] = rows ? maxWeight / rows : NaN;
  }
  return { ...out, shape: shape.slice(0, -2) };
}

function assertStatsClose(got, want, where) {
  assert.deepEqual(Object.keys(got), NAMES, `${where}: headStats keys`);
  for (const name of NAMES) {
    const g = got[name];
    assert.ok(g instanceof Tensor && g.data instanceof Float32Array, `${where}: ${name} is a Float32 Tensor`);
    assert.deepEqual(g.shape, want.shape, `${where}: ${name} shape`);
    for (let i = 0; i < g.data.length; i++) {
      const x = g.data[i];
      const w = want[name][i];
      if (Number.isNaN(w)) {
        assert.ok(Number.isNaN(x), `${where}: ${name}[${i}] = ${x}, expected NaN`);
      } else {
        assert.ok(Math.abs(x - w) <= TOLERANCE * Math.abs(w) + SUBNORMAL_SLACK,
          `${where}: ${name}[${i}] = ${x}, expected ${w} (relative error ${(Math.abs(x - w) / Math.abs(w)).toExponential(2)})`);
      }
    }
  }
}

// Bit-identical statistics (NaN payloads included).
function assertSameStats(got, want, where) {
  assert.deepEqual(Object.keys(got), NAMES, `${where}: keys`);
  for (const name of NAMES) {
    assert.deepEqual(got[name].shape, want[name].shape, `${where}: ${name} shape`);
    const a = new Uint32Array(got[name].data.buffer, got[name].data.byteOffset, got[name].data.length);
    const b = new Uint32Array(want[name].data.buffer, want[name].data.byteOffset, want[name].data.length);
    const i = a.findIndex((x, j) => x !== b[j]);
    assert.equal(i, -1, `${where}: ${name}[${i}] = ${got[name].data[i]}, expected ${want[name].data[i]}`);
  }
}

// --- drawn calls ----------------------------------------------------------------------------

// A config and one call of it. Head dims up to 8 with S' <= 12 take the kernel's direct path,
// head dims of 17 and more (or more keys) its packed path; L up to 70 has a second query tile.
const arbitraryCall = fc.record({
  H: fc.integer({ min: 1, max: 4 }),
  hd: fc.oneof(fc.integer({ min: 1, max: 8 }), fc.integer({ min: 17, max: 33 })),
  bias: fc.boolean(),
  addBiasKV: fc.boolean(),
  addZeroAttn: fc.boolean(),
  batchFirst: fc.boolean(),
  kdim: fc.option(fc.integer({ min: 1, max: 12 }), { nil: undefined }),
  vdim: fc.option(fc.integer({ min: 1, max: 12 }), { nil: undefined }),
  batched: fc.boolean(),
  N: fc.integer({ min: 1, max: 3 }),
  L: fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 0, max: 10 }) },
    { weight: 2, arbitrary: fc.integer({ min: 11, max: 20 }) }, { weight: 1, arbitrary: fc.integer({ min: 60, max: 70 }) }),
  S: fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 0, max: 10 }) }, { weight: 2, arbitrary: fc.integer({ min: 11, max: 24 }) }),
  self: fc.boolean(),
  keyPaddingMask: fc.constantFrom(null, 'bool', 'float', 'bool-full-item', 'float-full-item'),
  attnMask: fc.constantFrom(null, 'bool-2d', 'float-2d', 'bool-3d', 'float-3d', 'bool-full-rows', 'float-full-rows',
    'float-nonfinite'),
  isCausal: fc.boolean(),
  scale: fc.constantFrom(1, 1, 4, 30),  // 30: peaked rows, weights that underflow to 0
  nan: fc.constantFrom(false, false, false, false, false, false, false, 'query', 'key'),
  gates: fc.constantFrom(null, null, 'random', 'zeros', 'nan'),
  data: fc.integer({ min: 1, max: 2 ** 31 - 1 }),  // the seed of the call's numbers
});

function buildCall(d) {
  const rng = mulberry32(d.data);
  const E = d.H * d.hd;
  const self = d.self && d.kdim === undefined && d.vdim === undefined;
  const config = { embedDim: E, numHeads: d.H, bias: d.bias, addBiasKV: d.addBiasKV, addZeroAttn: d.addZeroAttn,
    batchFirst: d.batchFirst, kdim: d.kdim, vdim: d.vdim };
  const N = d.batched ? d.N : 1;
  const L = d.L;
  const S = self ? L : d.S;
  const layout = (T, width) => (!d.batched ? [T, width] : d.batchFirst ? [N, T, width] : [T, N, width]);
  const random = (shape, scale = 1) => ({ data: Float32Array.from({ length: count(shape) }, () => (rng() * 2 - 1) * scale), shape });
  const query = random(layout(L, E), d.scale);
  const key = self ? query : random(layout(S, d.kdim ?? E), d.scale);
  const value = self ? query : random(layout(S, d.vdim ?? E));
  if (d.nan === 'query' && query.data.length > 0) query.data[Math.floor(rng() * query.data.length)] = NaN;
  if (d.nan === 'key' && key.data.length > 0) key.data[Math.floor(rng() * key.data.length)] = NaN;

  const options = {};
  const kpmShape = d.batched ? [N, S] : [S];
  const maskData = (kind, n, p) => (kind.startsWith('bool')
    ? Uint8Array.from({ length: n }, () => (rng() < p ? 1 : 0))
    : Float32Array.from({ length: n }, () => (rng() < p ? -Infinity : rng() * 4 - 2)));
  if (d.keyPaddingMask !== null) {
    const data = maskData(d.keyPaddingMask, count(kpmShape), 0.3);
    if (d.keyPaddingMask.endsWith('full-item') && S > 0) {  // one batch item with every key padded
      const n = Math.floor(rng() * N);
      data.fill(data instanceof Uint8Array ? 1 : -Infinity, n * S, (n + 1) * S);
    }
    options.keyPaddingMask = { data, shape: kpmShape };
  }
  if (d.attnMask !== null && !d.isCausal) {
    const shape = d.attnMask.endsWith('3d') || rng() < 0.3 ? [N * d.H, L, S] : [L, S];
    const data = maskData(d.attnMask, count(shape), 0.3);
    if (d.attnMask.endsWith('full-rows') && S > 0) {  // some rows with every key masked
      for (let r = 0; r * S < data.length; r++) {
        if (rng() < 0.4) data.fill(data instanceof Uint8Array ? 1 : -Infinity, r * S, (r + 1) * S);
      }
    }
    if (d.attnMask === 'float-nonfinite' && data.length > 0) {  // a NaN or +inf score: a NaN row
      data[Math.floor(rng() * data.length)] = rng() < 0.5 ? NaN : Infinity;
    }
    options.attnMask = { data, shape };
  }
  if (d.isCausal) options.isCausal = true;
  if (d.gates === 'random') options.headGates = Array.from({ length: d.H }, () => rng() * 2 - 0.5);
  if (d.gates === 'zeros') options.headGates = new Array(d.H).fill(0);
  if (d.gates === 'nan') options.headGates = Array.from({ length: d.H }, (_, h) => (h === 0 ? NaN : 1));
  return { config, N, L, S, E, query, key, value, options, extraKeys: (d.addBiasKV ? 1 : 0) + (d.addZeroAttn ? 1 : 0) };
}

function loaded(engine, config, seedValue) {
  const mha = engine.createMultiheadAttention(config);
  const rng = mulberry32(seedValue);
  mha.loadStateDict(Object.fromEntries(Object.entries(mha.parameterShapes()).map(([k, shape]) =>
    [k, { data: Float32Array.from({ length: count(shape) }, () => (rng() * 2 - 1) * 0.6), shape }])));
  return mha;
}

test(`head statistics match the float64 reference from trace()'s weights (${RUNS} drawn calls, seed ${SEED})`, () => {
  const seen = { batched: 0, unbatched: 0, direct: 0, packed: 0, fullyMaskedRow: 0, nanHead: 0, emptyL: 0,
    extraKeys: 0, causal: 0, gated: 0, zeroWeight: 0, twoTiles: 0 };
  fc.assert(fc.property(arbitraryCall, (d) => {
    const c = buildCall(d);
    const mha = loaded(hs, c.config, d.data ^ 0x5bd1e995);
    try {
      const { query: q, key: k, value: v, options } = c;
      const trace = mha.trace(q, k, v, { ...options, headStats: true });
      const want = referenceStats(trace.weights, c.extraKeys);
      assert.deepEqual(want.shape, d.batched ? [c.N, d.H] : [d.H]);
      assertStatsClose(trace.headStats, want, 'trace');
      // forward() computes the same statistics whatever it returns of the weights, and with or
      // without gates (the weights are never gated).
      const variants = [{ needWeights: false }, { needWeights: true }, { averageAttnWeights: false },
        { needWeights: true, averageAttnWeights: true }];
      for (const extra of variants) {
        const r = mha.forward(q, k, v, { ...options, ...extra, headStats: true });
        assertSameStats(r.headStats, trace.headStats, `forward ${JSON.stringify(extra)}`);
      }
      const { headGates, ...ungated } = options;
      if (headGates !== undefined) {
        assertSameStats(mha.forward(q, k, v, { ...ungated, headStats: true }).headStats, trace.headStats, 'ungated');
        seen.gated++;
      }
      // Coverage.
      seen[d.batched ? 'batched' : 'unbatched']++;
      seen[d.hd <= 16 && c.S + c.extraKeys <= 12 ? 'direct' : 'packed']++;
      const w = trace.weights;
      const Sp = w.shape.at(-1);
      for (let r = 0; r * Sp < w.data.length; r++) {
        const row = w.data.subarray(r * Sp, (r + 1) * Sp);
        if (row.every((x) => x === 0)) {
          seen.fullyMaskedRow++;
          break;
        }
      }
      if (w.data.some((x, i) => x === 0 && !w.data.subarray(i - (i % Sp), i - (i % Sp) + Sp).every((y) => y === 0))) seen.zeroWeight++;
      if (trace.headStats.entropy.data.some(Number.isNaN)) seen.nanHead++;
      if (c.L === 0) seen.emptyL++;
      if (c.extraKeys > 0) seen.extraKeys++;
      if (d.isCausal) seen.causal++;
      if (c.L > 64) seen.twoTiles++;
    } finally {
      mha.dispose();
    }
  }), { seed: SEED, numRuns: RUNS, includeErrorInReport: true });
  console.log(`# stats: coverage of ${RUNS} calls ${JSON.stringify(seen)}`);
  for (const [k, n] of Object.entries(seen)) assert.ok(n >= RUNS / 100, `${k}: ${n} of ${RUNS} calls`);
});

test('no headStats key without the option; headStats: false is the same; trace() too', () => {
  const mha = loaded(hs, { embedDim: 8, numHeads: 2 }, 3);
  const x = { data: Float32Array.from({ length: 5 * 8 }, (_, i) => Math.sin(i)), shape: [5, 8] };
  for (const options of [{}, { headStats: false }, { headStats: undefined }]) {
    assert.deepEqual(Object.keys(mha.forward(x, x, x, options)), ['output', 'weights']);
    assert.ok(!('headStats' in mha.trace(x, x, x, options)));
  }
  assert.deepEqual(Object.keys(mha.forward(x, x, x, { headStats: true })), ['output', 'weights', 'headStats']);
  // A call without statistics after one with them returns none (nothing of the last call stays).
  assert.ok(!('headStats' in mha.forward(x, x, x)));
  // The same output and weights with and without statistics.
  const plain = mha.forward(x, x, x, { averageAttnWeights: false });
  const stats = mha.forward(x, x, x, { averageAttnWeights: false, headStats: true });
  assert.deepEqual(stats.output.data, plain.output.data);
  assert.deepEqual(stats.weights.data, plain.weights.data);
  mha.dispose();
});

test('the seed worked example: statistics worked out by hand from its scores', () => {
  // X = [[1,0,1,2],[0,2,1,0],[1,1,0,1]], W_Q = W_K = W_V = I, d_k = 2: head h sees columns
  // 2h, 2h+1, so its scores are X_h X_h^T / sqrt(2).
  const X = seed.inputs.query;
  const scores = [0, 1].map((h) => X.map((a) => X.map((b) => (a[2 * h] * b[2 * h] + a[2 * h + 1] * b[2 * h + 1]) / Math.SQRT2)));
  assert.deepEqual(scores.map((s) => s.map((r) => r.map((x) => Math.round(x * Math.SQRT2)))),
    [[[1, 0, 1], [0, 4, 2], [1, 2, 2]], [[5, 1, 2], [1, 1, 0], [2, 0, 1]]]);
  const weights = scores.map((s) => s.map((r) => {
    const e = r.map((x) => Math.exp(x - Math.max(...r)));
    const sum = e.reduce((a, b) => a + b, 0);
    return e.map((x) => x / sum);
  }));
  // The seed article's A^(1) and A^(2), to 3 decimals.
  assert.deepEqual(weights.map((w) => w.map((r) => r.map((x) => x.toFixed(3)))), [
    [['0.401', '0.198', '0.401'], ['0.045', '0.768', '0.187'], ['0.198', '0.401', '0.401']],
    [['0.848', '0.050', '0.102'], ['0.401', '0.401', '0.198'], ['0.576', '0.140', '0.284']]]);
  const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const want = {
    entropy: weights.map((w) => mean(w.map((r) => -r.reduce((a, x) => a + x * Math.log(x), 0)))),
    distance: weights.map((w) => mean(w.map((r, i) => r.reduce((a, x, j) => a + x * Math.abs(i - j), 0)))),
    maxWeight: weights.map((w) => mean(w.map((r) => Math.max(...r)))),
  };
  // Head 1, by hand: row 1 of A^(1) is (a, b, a) with a = e/(2e+1), so its distance is
  // b*1 + a*2 and its entropy -(2a ln a + b ln b); rows 1 and 3 of A^(1) are permutations.
  const a = Math.E ** (1 / Math.SQRT2) / (2 * Math.E ** (1 / Math.SQRT2) + 1);
  assert.ok(Math.abs(weights[0][0][0] - a) < 1e-15);
  assert.ok(Math.abs(want.maxWeight[0] - mean([a, weights[0][1][1], a])) < 1e-15);
  // The numbers the CLIs print (tests/js/cli.test.js, tests/cpp/cli_head_flags_test.sh).
  assert.deepEqual(Object.values(want).map((v) => v.map((x) => x.toFixed(6))),
    [['0.921067', '0.842011'], ['0.676249', '0.714784'], ['0.523381', '0.608426']]);

  const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  mha.loadStateDict(seed.state_dict);
  const got = mha.forward(X, X, X, { headStats: true }).headStats;
  assertStatsClose(got, { ...want, shape: [2] }, 'seed');
  // Batched (L, 1, E): shape (1, H), the same numbers.
  const batched = X.map((row) => [row]);
  const b = mha.forward(batched, batched, batched, { headStats: true }).headStats;
  assertStatsClose(b, { ...want, shape: [1, 2] }, 'seed batched');
  // A key padding mask over key 3: every row's distribution over keys 1 and 2 only.
  const masked = mha.forward(X, X, X, { headStats: true, keyPaddingMask: [false, false, true] }).headStats;
  const two = scores.map((s) => s.map((r) => {
    const e = [Math.exp(r[0]), Math.exp(r[1])];
    return [e[0] / (e[0] + e[1]), e[1] / (e[0] + e[1]), 0];
  }));
  assertStatsClose(masked, {
    entropy: two.map((w) => mean(w.map((r) => -(r[0] * Math.log(r[0]) + r[1] * Math.log(r[1]))))),
    distance: two.map((w) => mean(w.map((r, i) => r[0] * i + r[1] * Math.abs(i - 1)))),
    maxWeight: two.map((w) => mean(w.map((r) => Math.max(...r)))),
    shape: [2],
  }, 'seed with key 3 padded');
  mha.dispose();
});

test('edge cases: L = 0 and S = 0 are NaN; one key is entropy 0, max weight 1; uniform is ln S\'; extra keys add no distance', () => {
  const E = 4;
  const H = 2;
  const run = (config, L, S, options = {}) => {
    const mha = loaded(hs, { embedDim: E, numHeads: H, ...config }, 9);
    try {
      const q = { data: new Float32Array(L * E).fill(0.5), shape: [L, 1, E] };
      const k = { data: new Float32Array(S * E).fill(0.5), shape: [S, 1, E] };
      return mha.forward(q, k, k, { headStats: true, ...options }).headStats;
    } finally {
      mha.dispose();
    }
  };
  const all = (s, x) => NAMES.every((n) => s[n].data.every((y) => Object.is(y, x) || (Number.isNaN(x) && Number.isNaN(y))));
  let s = run({}, 0, 3);
  assert.deepEqual(s.entropy.shape, [1, H]);
  assert.ok(all(s, NaN), 'L = 0');
  assert.ok(all(run({}, 3, 0), NaN), 'S = 0: every row fully masked');
  // S = 0 with a bias key: every row puts weight 1 on it, a key with no position.
  s = run({ addBiasKV: true }, 3, 0);
  assert.deepEqual([s.entropy.data, s.distance.data, s.maxWeight.data].map((t) => Array.from(t)), [[0, 0], [0, 0], [1, 1]]);
  // One key: entropy 0, weight 1, distance the mean |i - 0| = (0 + 1 + 2) / 3 = 1.
  s = run({}, 3, 1);
  assert.deepEqual([s.entropy.data, s.distance.data, s.maxWeight.data].map((t) => Array.from(t)), [[0, 0], [1, 1], [1, 1]]);
  // Equal keys (every score the same): uniform rows, entropy ln S', max 1/S'; with a zero key
  // too, S' = 5 and the zero key's weight (its score 0, not the others') adds no distance.
  s = run({}, 4, 4);
  for (let h = 0; h < H; h++) {
    assert.ok(Math.abs(s.entropy.data[h] - Math.log(4)) <= 1e-6 * Math.log(4));
    assert.ok(Math.abs(s.maxWeight.data[h] - 0.25) <= 1e-6);
    // mean over i of sum_j |i - j| / 4 for L = S = 4: (6 + 4 + 4 + 6) / 16.
    assert.ok(Math.abs(s.distance.data[h] - 20 / 16) <= 1e-6 * (20 / 16));
  }
  // Every row fully masked by the attn_mask but for one: the mean is that row's.
  const mask = [[true, true, true], [false, true, true], [true, true, true]];
  s = run({}, 3, 3, { attnMask: mask });
  assert.deepEqual([s.entropy.data, s.distance.data, s.maxWeight.data].map((t) => Array.from(t)), [[0, 0], [1, 1], [1, 1]]);
  // A NaN query row poisons its head's means, and only for its batch item.
  const mha = loaded(hs, { embedDim: E, numHeads: H }, 9);
  const q = { data: Float32Array.from({ length: 3 * 2 * E }, (_, i) => Math.sin(i)), shape: [3, 2, E] };
  q.data[E] = NaN;  // query row 0 of batch item 1
  s = mha.forward(q, q, q, { headStats: true }).headStats;
  mha.dispose();
  for (const n of NAMES) {
    assert.ok(s[n].data.slice(0, H).every(Number.isFinite), `${n}: item 0 finite`);
    assert.ok(s[n].data.slice(H).every(Number.isNaN), `${n}: item 1 NaN`);
  }
});

test('errors name options.headStats, in forward() and trace(); the module still works', () => {
  const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  mha.loadStateDict(seed.state_dict);
  const x = seed.inputs.query;
  for (const bad of ['yes', 1, 0, 'true', {}, [true], null]) {
    for (const call of ['forward', 'trace']) {
      let error = null;
      try {
        mha[call](x, x, x, { headStats: bad });
      } catch (e) {
        error = e;
      }
      assert.ok(error instanceof HeadscopeError, `${call} headStats ${JSON.stringify(bad)}: ${error}`);
      assert.equal(error.code, 'INVALID_ARGUMENT', error.message);
      assert.match(error.message, /^options\.headStats: expected true or false, got /, error.message);
    }
  }
  assert.ok(mha.forward(x, x, x, { headStats: true }).headStats.entropy.data.every(Number.isFinite));
  mha.dispose();
});

test('initWorker(): the worker returns the in-thread statistics (forward and trace) and the same error', async () => {
  const remote = await initWorker();
  try {
    const configs = [
      [{ embedDim: 4, numHeads: 2, bias: false }, [3, 4], {}],
      [{ embedDim: 40, numHeads: 2, addBiasKV: true, batchFirst: true }, [2, 15, 40], { averageAttnWeights: false }],
      [{ embedDim: 12, numHeads: 3 }, [6, 2, 12], { isCausal: true, needWeights: false, keyPaddingMask: { data: Uint8Array.from([0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1]), shape: [2, 6] } }],
    ];
    for (const [config, shape, options] of configs) {
      const local = loaded(hs, config, 4);
      const mha = await remote.createMultiheadAttention(config);
      const rng = mulberry32(4);
      const sd = Object.fromEntries(Object.entries(local.parameterShapes()).map(([k, s]) =>
        [k, { data: Float32Array.from({ length: count(s) }, () => (rng() * 2 - 1) * 0.6), shape: s }]));
      await mha.loadStateDict(sd);
      const x = { data: Float32Array.from({ length: count(shape) }, (_, i) => Math.cos(i * 0.7)), shape };
      const want = local.forward(x, x, x, { ...options, headStats: true });
      const got = await mha.forward(x, x, x, { ...options, headStats: true });
      assert.deepEqual(Object.keys(got), ['output', 'weights', 'headStats']);
      assertSameStats(got.headStats, want.headStats, `worker forward ${JSON.stringify(config)}`);
      for (const n of NAMES) assert.ok(got.headStats[n] instanceof Tensor, `${n} is a Tensor`);
      const { needWeights, averageAttnWeights, ...traceOptions } = options;
      const t = await mha.trace(x, x, x, { ...traceOptions, headStats: true });
      assertSameStats(t.headStats, want.headStats, `worker trace ${JSON.stringify(config)}`);
      assert.ok(!('headStats' in await mha.forward(x, x, x, options)));
      await assert.rejects(mha.forward(x, x, x, { headStats: 'yes' }),
        { code: 'INVALID_ARGUMENT', message: /^options\.headStats: expected true or false/ });
      await mha.dispose();
      local.dispose();
    }
  } finally {
    await remote.terminate();
  }
});

// The 2-thread module (as tests/js/threads.test.js loads it), when this Node can run it.
const mt = typeof SharedArrayBuffer === 'function' ? await init({ threads: 2 }).catch((e) => e) : null;
const noThreads = mt === null ? 'no SharedArrayBuffer' : mt instanceof Error ? `init({ threads: 2 }): ${mt.message}` : false;

test('init({ threads: 2 }): bit-identical statistics on shapes that run the threaded stage', { skip: noThreads }, () => {
  // 2 L S' E >= 100k multiply-adds: the attention stage is split by (batch, head), or by
  // (batch, query tile) when the weights are averaged.
  const shapes = [
    { config: { embedDim: 96, numHeads: 6 }, L: 70, S: 70, N: 2, masks: true },
    { config: { embedDim: 96, numHeads: 6, batchFirst: true, addBiasKV: true, addZeroAttn: true }, L: 70, S: 70, N: 2, causal: true },
    { config: { embedDim: 128, numHeads: 4, kdim: 40, vdim: 56 }, L: 130, S: 90, N: null },
    { config: { embedDim: 64, numHeads: 8 }, L: 100, S: 100, N: 3, fullItem: true },
  ];
  for (const s of shapes) {
    const a = loaded(hs, s.config, 21);
    const b = loaded(mt, s.config, 21);
    try {
      const rng = mulberry32(22);
      const E = s.config.embedDim;
      const dims = (T, width) => (s.N === null ? [T, width] : s.config.batchFirst ? [s.N, T, width] : [T, s.N, width]);
      const random = (shape) => ({ data: Float32Array.from({ length: count(shape) }, () => rng() * 2 - 1), shape });
      const q = random(dims(s.L, E));
      const k = random(dims(s.S, s.config.kdim ?? E));
      const v = random(dims(s.S, s.config.vdim ?? E));
      const base = {};
      const n = s.N ?? 1;
      if (s.masks) {
        base.keyPaddingMask = { data: Uint8Array.from({ length: n * s.S }, (_, i) => (i % 7 === 3 ? 1 : 0)), shape: [n, s.S] };
        // Rows 5 and 40 fully masked.
        base.attnMask = { data: Uint8Array.from({ length: s.L * s.S }, (_, i) => ([5, 40].includes(Math.floor(i / s.S)) ? 1 : 0)), shape: [s.L, s.S] };
      }
      if (s.fullItem) {
        base.keyPaddingMask = { data: Uint8Array.from({ length: n * s.S }, (_, i) => (i >= s.S && i < 2 * s.S ? 1 : 0)), shape: [n, s.S] };
      }
      if (s.causal) base.isCausal = true;
      const where = JSON.stringify(s.config);
      for (const extra of [{ needWeights: false }, { needWeights: true }, { averageAttnWeights: false }]) {
        const options = { ...base, ...extra, headStats: true };
        assertSameStats(b.forward(q, k, v, options).headStats, a.forward(q, k, v, options).headStats, `${where} ${JSON.stringify(extra)}`);
      }
      const t = b.trace(q, k, v, { ...base, headStats: true });
      assertSameStats(t.headStats, a.forward(q, k, v, { ...base, headStats: true }).headStats, `${where} trace`);
      assertStatsClose(t.headStats, referenceStats(t.weights, (s.config.addBiasKV ? 1 : 0) + (s.config.addZeroAttn ? 1 : 0)), `${where} reference`);
      if (s.fullItem) assert.ok(t.headStats.entropy.data.slice(8, 16).every(Number.isNaN), 'batch item 1 has no row');
    } finally {
      a.dispose();
      b.dispose();
    }
  }
  assert.equal(mt.liveHandles(), 0);
});
