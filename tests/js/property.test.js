// Property test: thousands of random small calls of the WebAssembly build, through the public API,
// against the plain-JS float64 reference (reference.js). Every option of the constructor and of
// forward() is drawn at random; inputs mix nested arrays and typed arrays; some calls carry NaN or
// infinity in their data, many have fully masked rows. Shapes must agree exactly, values within
// TOLERANCE relative to max(1, max |expected|) of each tensor, NaN and +-inf at the same places,
// and a call with finite inputs (masks: finite numbers or -inf) never gives NaN: masking alone
// never makes NaN (the zero-row policy).
//
// Reproduce a failure with its seed: HEADSCOPE_PROPERTY_SEED=<seed> node --test tests/js/property.test.js
// (HEADSCOPE_PROPERTY_CALLS=<n> for more or fewer calls). The message names the call's index.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { init } from '../../web/lib/index.js';
import { parseCase, compareWithExpected } from '../../web/lib/case.js';
import { referenceForward } from './reference.js';
import { mulberry32 } from './helpers.js';

const SEED = Number(process.env.HEADSCOPE_PROPERTY_SEED ?? 20251129);
const CALLS = Number(process.env.HEADSCOPE_PROPERTY_CALLS ?? 3000);
const CALLS_PER_MODULE = 3;  // a module is reused across shapes: its workspace must not leak state
const TOLERANCE = 1e-4;

const hs = await init();

after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

// Draws of one run, all from one seeded generator.
function draws(rng) {
  const int = (lo, hi) => lo + Math.floor(rng() * (hi - lo + 1));
  const pick = (xs) => xs[Math.floor(rng() * xs.length)];
  const chance = (p) => rng() < p;
  const floats = (n, lo, hi) => Float32Array.from({ length: n }, () => lo + (hi - lo) * rng());
  return { int, pick, chance, floats };
}

const count = (shape) => shape.reduce((a, b) => a * b, 1);

/** Nested arrays of `data` in `shape` (every dimension > 0). */
function nest(data, shape, axis = 0, offset = 0) {
  if (axis === shape.length - 1) return Array.from(data.subarray(offset, offset + shape[axis]));
  const step = count(shape.slice(axis + 1));
  return Array.from({ length: shape[axis] }, (_, i) => nest(data, shape, axis + 1, offset + i * step));
}

/** The API's form of a tensor: nested arrays (when no dimension is 0) or { data, shape }. */
function apiForm(t, nested) {
  if (!nested || t.shape.some((d) => d === 0)) return t;
  const arrays = nest(t.data, t.shape);
  return t.data instanceof Uint8Array ? arrays.map(function toBool(x) {
    return Array.isArray(x) ? x.map(toBool) : x !== 0;
  }) : arrays;
}

function makeModule(d, index) {
  const E = d.int(1, 16);
  const divisors = [];
  for (let h = 1; h <= E; h++) if (E % h === 0) divisors.push(h);
  const dim = () => (d.chance(0.25) ? d.int(1, 8) : d.pick([undefined, null, E]));
  const config = {
    embedDim: E, numHeads: d.pick(divisors), bias: d.chance(0.7), addBiasKV: d.chance(0.25),
    addZeroAttn: d.chance(0.25), kdim: dim(), vdim: dim(), batchFirst: d.chance(0.5),
  };
  const mha = hs.createMultiheadAttention(config);
  const nonFiniteWeights = d.chance(0.03);
  const stateDict = {};
  for (const [key, shape] of Object.entries(mha.parameterShapes())) {
    const data = d.floats(count(shape), -0.6, 0.6);
    if (nonFiniteWeights && d.chance(0.5)) data[d.int(0, data.length - 1)] = d.pick([NaN, Infinity, -Infinity]);
    stateDict[key] = { data, shape };
  }
  const apiStateDict = Object.fromEntries(Object.entries(stateDict).map(([k, t]) => [k, apiForm(t, d.chance(0.5))]));
  mha.loadStateDict(d.chance(0.2) ? new Map(Object.entries(apiStateDict)) : apiStateDict);
  return { mha, config: mha.config, stateDict, nonFiniteWeights, label: `module ${index}` };
}

// A bool (Uint8Array: 0 or any nonzero byte) or float (Float32Array) mask of `shape`.
function randomMask(d, shape, { nonFinite }) {
  const n = count(shape);
  if (d.chance(0.5)) {
    const p = d.pick([0.2, 0.5, 0.8, 1]);
    return { data: Uint8Array.from({ length: n }, () => (d.chance(p) ? d.pick([1, 1, 1, 255, 7]) : 0)), shape };
  }
  const pInf = d.pick([0, 0.3, 0.7]);
  const data = Float32Array.from({ length: n }, () => (d.chance(pInf) ? -Infinity : -2 + 4 * d.int(0, 1000) / 1000));
  if (nonFinite && n > 0 && d.chance(0.3)) data[d.int(0, n - 1)] = d.pick([NaN, Infinity]);
  return { data, shape };
}

function causalMask(d, slices, L, S) {
  const bool = d.chance(0.5);
  const data = bool ? new Uint8Array(slices * L * S) : new Float32Array(slices * L * S);
  for (let b = 0; b < slices; b++) {
    for (let i = 0; i < L; i++) {
      for (let j = i + 1; j < S; j++) data[(b * L + i) * S + j] = bool ? 1 : -Infinity;
    }
  }
  return { data, shape: slices === 1 ? [L, S] : [slices, L, S] };
}

function makeCall(d, m) {
  const { embedDim: E, numHeads: H, kdim, vdim, batchFirst } = m.config;
  const batched = d.chance(0.75);
  const N = batched ? d.int(1, 3) : 1;
  const self = kdim === E && vdim === E && d.chance(0.3);
  const L = d.int(0, 8);
  const S = self ? L : d.int(0, 8);
  const shapeOf = (T, D) => (!batched ? [T, D] : batchFirst ? [N, T, D] : [T, N, D]);
  const nonFinite = d.chance(0.15);
  const input = (T, D) => {
    const data = d.floats(count(shapeOf(T, D)), -2, 2);
    if (nonFinite && data.length > 0 && d.chance(0.6)) {
      for (let k = d.int(1, 2); k > 0; k--) data[d.int(0, data.length - 1)] = d.pick([NaN, Infinity, -Infinity]);
    }
    return { data, shape: shapeOf(T, D) };
  };
  const query = input(L, E);
  const key = self ? query : input(S, kdim);
  const value = self ? query : (d.chance(0.1) && vdim === kdim ? key : input(S, vdim));

  const options = {};
  if (d.chance(0.45)) {
    options.keyPaddingMask = randomMask(d, batched ? [N, S] : [S], { nonFinite });
    if (batched && S > 0 && d.chance(0.15)) {  // one batch element with every key padded
      const n = d.int(0, N - 1);
      const kpm = options.keyPaddingMask;
      for (let j = 0; j < S; j++) kpm.data[n * S + j] = kpm.data instanceof Uint8Array ? 1 : -Infinity;
    }
  }
  if (d.chance(0.45)) {
    options.attnMask = randomMask(d, d.chance(0.5) ? [L, S] : [N * H, L, S], { nonFinite });
  }
  if (d.chance(0.2)) {
    options.isCausal = true;
    if (options.attnMask) options.attnMask = d.chance(0.5) ? causalMask(d, d.pick([1, N * H]), L, S) : undefined;
  }
  if (d.chance(0.15)) options.needWeights = false;
  if (d.chance(0.5)) options.averageAttnWeights = false;
  const viaTrace = d.chance(0.1);

  // What the API gets: each tensor nested or typed at random; shared objects stay shared.
  const forms = new Map();
  const api = (t) => {
    if (t === undefined) return undefined;
    if (!forms.has(t)) forms.set(t, apiForm(t, d.chance(0.5)));
    return forms.get(t);
  };
  const apiOptions = Object.fromEntries(Object.entries(options).map(([k, v]) => [k, typeof v === 'object' ? api(v) : v]));
  const finiteInputs = !nonFinite && !m.nonFiniteWeights;
  return {
    query, key, value, options, viaTrace, finiteInputs,
    args: [api(query), api(key), api(value), apiOptions],
    describe: () => JSON.stringify({
      config: m.config, batched, N, L, S, self, viaTrace, nonFinite, nonFiniteWeights: m.nonFiniteWeights,
      options: Object.fromEntries(Object.entries(options).map(([k, v]) => [k, typeof v === 'object' && v
        ? { type: v.data.constructor.name, shape: v.shape, data: Array.from(v.data, String) } : v])),
    }),
  };
}

/** Shapes equal; NaN / +-inf at the same places; finite values within TOLERANCE (relative). */
function compareTensor(got, want, what, where, stats) {
  assert.ok(got !== null && want !== null, `${where}: ${what} is ${got === null ? 'null' : 'not null'}`);
  assert.deepEqual(got.shape, want.shape, `${where}: ${what} shape`);
  assert.ok(got.data instanceof Float32Array, `${where}: ${what}.data is not a Float32Array`);
  let scale = 1;
  for (const e of want.data) if (Number.isFinite(e)) scale = Math.max(scale, Math.abs(e));
  for (let i = 0; i < want.data.length; i++) {
    const g = got.data[i];
    const e = want.data[i];
    if (!Number.isFinite(e) || !Number.isFinite(g)) {
      assert.ok(Object.is(g, e) || (Number.isNaN(g) && Number.isNaN(e)),
        `${where}: ${what}[${i}] = ${g}, expected ${e}`);
      continue;
    }
    const err = Math.abs(g - e) / scale;
    if (err > stats.worst) Object.assign(stats, { worst: err, worstAt: `${where}: ${what}[${i}] = ${g}, expected ${e}` });
    assert.ok(err <= TOLERANCE, `${where}: ${what}[${i}] = ${g}, expected ${e} (relative error ${err.toExponential(2)})`);
  }
}

test('the reference reproduces every PyTorch golden case (float64 vs float32 within 1e-6)', () => {
  const dir = new URL('../golden/', import.meta.url);
  const files = readdirSync(dir).filter((f) => f.endsWith('.json'));
  assert.ok(files.length >= 40);
  for (const file of files) {
    const c = parseCase(readFileSync(new URL(file, dir), 'utf8'));
    const mha = hs.createMultiheadAttention(c.config);  // for the normalized config
    const config = mha.config;
    mha.dispose();
    const r = referenceForward(config, c.stateDict, c.query, c.key, c.value, c.options);
    const f32 = (t) => t && { data: Float32Array.from(t.data), shape: t.shape };
    const check = compareWithExpected(c, { output: f32(r.output), weights: f32(r.weights) }, 1e-6);
    assert.ok(check.ok, `${file}: ${check.detail}`);
  }
});

test(`${CALLS} random calls match the plain-JS reference (seed ${SEED})`, () => {
  const d = draws(mulberry32(SEED));
  const stats = { worst: 0, worstAt: '' };
  const seen = { nonFinite: 0, fullyMaskedFinite: 0, empty: 0, trace: 0, causal: 0, nested: 0 };
  let m = null;
  for (let index = 0; index < CALLS; index++) {
    if (index % CALLS_PER_MODULE === 0) {
      m?.mha.dispose();
      m = makeModule(d, index / CALLS_PER_MODULE);
    }
    const call = makeCall(d, m);
    const where = `seed ${SEED} call ${index} ${call.describe()}`;
    const want = referenceForward(m.config, m.stateDict, call.query, call.key, call.value, call.options);
    let got;
    try {
      got = call.viaTrace ? m.mha.trace(...call.args) : m.mha.forward(...call.args);
    } catch (e) {
      assert.fail(`${where}: threw ${e.code ?? e.name}: ${e.message}`);
    }
    compareTensor(got.output, want.output, 'output', where, stats);
    if (call.viaTrace) {
      compareTensor(got.weights, want.headWeights, 'trace.weights', where, stats);
      compareTensor(got.scores, want.scores, 'trace.scores', where, stats);
    } else if (want.weights === null) {
      assert.equal(got.weights, null, `${where}: weights`);
    } else {
      compareTensor(got.weights, want.weights, 'weights', where, stats);
    }

    // Masking alone never makes NaN: finite data and masks of finite numbers or -inf give a
    // finite output and finite weights, fully masked rows included.
    const maskValues = [call.options.keyPaddingMask, call.options.attnMask].flatMap((t) => (t ? [...t.data] : []));
    const finite = call.finiteInputs && !maskValues.some((x) => Number.isNaN(x) || x === Infinity);
    const fullyMasked = [];
    const { shape: sh, data: sw } = want.headWeights;
    const Sp = sh.at(-1);
    for (let r = 0; r * Sp < sw.length && Sp > 0; r++) {
      if (want.scores.data.subarray(r * Sp, (r + 1) * Sp).every((x) => x === -Infinity)) fullyMasked.push(r);
    }
    if (finite) {
      for (const [name, t] of [['output', got.output], ['weights', got.weights]]) {
        if (t) assert.ok(t.data.every(Number.isFinite), `${where}: ${name} not finite though every input is`);
      }
      if (fullyMasked.length > 0 && !call.viaTrace && got.weights && call.options.averageAttnWeights === false) {
        for (const r of fullyMasked) {
          assert.ok(got.weights.data.subarray(r * Sp, (r + 1) * Sp).every((x) => x === 0), `${where}: row ${r} not all 0`);
        }
      }
      if (fullyMasked.length > 0) seen.fullyMaskedFinite++;
    } else {
      seen.nonFinite++;
    }
    if (call.query.shape.some((x) => x === 0) || call.key.shape.some((x) => x === 0)) seen.empty++;
    if (call.viaTrace) seen.trace++;
    if (call.options.isCausal) seen.causal++;
    if (Array.isArray(call.args[0])) seen.nested++;
  }
  m.mha.dispose();
  console.log(`# property: ${CALLS} calls (seed ${SEED}), worst relative error ${stats.worst.toExponential(2)} ` +
    `(tolerance ${TOLERANCE}) at ${stats.worstAt.replace(/ \{.*\}/, '')}`);
  console.log(`# property: coverage ${JSON.stringify(seen)}`);
  // The draws reach every kind of call often enough to mean something.
  const share = (x) => x / CALLS;
  assert.ok(share(seen.nonFinite) > 0.05, `non-finite calls: ${seen.nonFinite}`);
  assert.ok(share(seen.fullyMaskedFinite) > 0.05, `finite calls with fully masked rows: ${seen.fullyMaskedFinite}`);
  assert.ok(share(seen.empty) > 0.03 && share(seen.trace) > 0.03 && share(seen.causal) > 0.1 &&
    share(seen.nested) > 0.2, JSON.stringify(seen));
});
