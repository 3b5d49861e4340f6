// The walkthrough's pure model (web/views/walkthrough/model.js): presets, resizing, edits, the
// state_dict it builds, which cases it shows, and the "explain this cell" texts, checked against
// the real library's trace.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { init } from '../../web/lib/index.js';
import { seedWorkedExample, projectionMatrices } from '../../web/lib/examples.js';
import {
  MAX_SIZE, LEARNED_WQ1, divisors, nearestDivisor, seedState, learnedLookingState, randomState,
  identityState, randomEntry, resizeState, headDim, inputMatrices, inputData, withCell,
  toStateDict, moduleConfig, traceOptions, maskTerms, describeMasks, stateFromCase, explainCell,
  formatTerm, traceOverflow,
} from '../../web/views/walkthrough/model.js';
import { parseCellText, formatFit, exactText, FLOAT32_MAX } from '../../web/views/common/numbers.js';
import { handCheck } from './hand-check.js';

const hs = await init();
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

const goldenDir = new URL('../golden/', import.meta.url);
const goldenFiles = readdirSync(goldenDir).filter((f) => f.endsWith('.json'));
const golden = (name) => JSON.parse(readFileSync(new URL(name, goldenDir), 'utf8'));

/** The trace the view shows for a state: one module, one trace(X, X, X). */
function traceOf(state) {
  const mha = hs.createMultiheadAttention(moduleConfig(state));
  try {
    mha.loadStateDict(toStateDict(state));
    return mha.trace(state.x, state.x, state.x, traceOptions(state));
  } finally {
    mha.dispose();
  }
}

const close = (a, b, tol) => Math.abs(a - b) <= tol;
function assertAllClose(actual, expected, tol, what) {
  const a = Array.from(actual).flat(Infinity);
  const e = Array.from(expected).flat(Infinity);
  assert.equal(a.length, e.length, `${what}: size`);
  a.forEach((x, i) => assert.ok(Object.is(x, e[i]) || close(x, e[i], tol), `${what}[${i}]: ${x} vs ${e[i]}`));
}

test('divisors and nearestDivisor give the head counts an embedding size allows', () => {
  assert.deepEqual(divisors(1), [1]);
  assert.deepEqual(divisors(12), [1, 2, 3, 4, 6, 12]);
  assert.deepEqual(divisors(13), [1, 13]);
  assert.equal(nearestDivisor(6, 4), 3);   // 3 and 6 are 1 and 2 away
  assert.equal(nearestDivisor(12, 5), 4);  // tie 4/6: the smaller
  assert.equal(nearestDivisor(16, 16), 16);
  assert.equal(nearestDivisor(7, 2), 1);
});

test('the seed state builds the seed case\'s state_dict and the library reproduces its numbers', () => {
  const s = seedState();
  assert.deepEqual([s.L, s.E, s.H, headDim(s)], [3, 4, 2, 2]);
  assert.deepEqual(toStateDict(s), structuredClone(seedWorkedExample.state_dict));
  // Per head, the editable matrices are the seed's 4x2 W_Q^(h), W_K^(h), W_V^(h).
  const { heads, wo } = projectionMatrices(seedWorkedExample);
  heads.forEach(({ wq, wk, wv }, h) => {
    assert.deepEqual(Array.from(inputData(s, `WQ${h + 1}`)), wq.flat());
    assert.deepEqual(Array.from(inputData(s, `WK${h + 1}`)), wk.flat());
    assert.deepEqual(Array.from(inputData(s, `WV${h + 1}`)), wv.flat());
  });
  assert.deepEqual(Array.from(inputData(s, 'WO')), wo.flat());
  const t = traceOf(s);
  assertAllClose(t.output.data, seedWorkedExample.expected.output, 1e-5, 'Y');
  assertAllClose(t.weights.data, seedWorkedExample.expected.weights, 1e-6, 'A');
  // The numbers the browser tests look for.
  const shown = Array.from(t.output.data, (v) => v.toFixed(3));
  assert.ok(shown.includes('2.595') && shown.includes('2.723'));
  assert.equal(t.weights.data[4].toFixed(3), '0.768');
});

test('the learned-looking preset puts the seed\'s matrix in head 1\'s W_Q only', () => {
  const s = learnedLookingState();
  assert.deepEqual(Array.from(inputData(s, 'WQ1')), LEARNED_WQ1.flat());
  assert.deepEqual(Array.from(inputData(s, 'WQ2')), Array.from(inputData(seedState(), 'WQ2')));
  assert.deepEqual(s.wk, seedState().wk);
  // torch's q rows 0-1 are W_Q^(1) transposed.
  const sd = toStateDict(s);
  assert.deepEqual(sd.in_proj_weight.slice(0, 2), [[0.3, 1.1, -0.5, 0.9], [-0.8, 0.2, 0.7, -0.4]]);
  const t = traceOf(s);
  // Q1 = X·W_Q^(1), checked by hand for token 0: [1,0,1,2]·columns.
  assert.ok(close(t.q.data[0], 0.3 - 0.5 + 1.8, 1e-6));
  assert.ok(close(t.q.data[1], -0.8 + 0.7 - 0.8, 1e-6));
});

test('seeded random numbers are deterministic, one decimal, and in range', () => {
  const a = randomState({ L: 5, E: 6, H: 3 }, 7);
  const b = randomState({ L: 5, E: 6, H: 3 }, 7);
  const c = randomState({ L: 5, E: 6, H: 3 }, 8);
  assert.deepEqual(a, b);
  assert.notDeepEqual(a.x, c.x);
  for (const m of inputMatrices(a)) {
    for (let i = 0; i < m.rows; i++) {
      for (let j = 0; j < m.cols; j++) {
        const v = m.get(i, j);
        const range = m.name === 'X' ? 2 : 1;
        assert.ok(v >= -range && v <= range, `${m.name}: ${v}`);
        assert.ok(close(Math.round(v * 10), v * 10, 1e-9), `${m.name}: ${v} has one decimal`);
        assert.ok(!Object.is(v, -0));
      }
    }
  }
  assert.equal(a.x[2][3], randomEntry(7, 'x', 2, 3));
  const withBias = randomState({ L: 2, E: 4, H: 2 }, 3, { withBias: true });
  assert.equal(withBias.bias.q.length, 4);
  assert.throws(() => randomState({ L: 2, E: 6, H: 4 }), /divisor/);
  assert.throws(() => randomState({ L: 17, E: 4, H: 2 }), /tokens/);
  assert.throws(() => randomState({ L: 2, E: 0, H: 1 }), /embedding/);
});

test('identity keeps the tokens and makes every projection the identity', () => {
  const s = identityState(randomState({ L: 4, E: 6, H: 3 }, 2, { withBias: true }));
  assert.deepEqual(s.x, randomState({ L: 4, E: 6, H: 3 }, 2).x);
  for (const w of [s.wq, s.wk, s.wv, s.wo]) w.forEach((row, i) => row.forEach((v, j) => assert.equal(v, i === j ? 1 : 0)));
  assert.deepEqual(s.bias.o, [0, 0, 0, 0, 0, 0]);
  // With identity projections and W_O, Y is the concatenation.
  const t = traceOf(s);
  assertAllClose(t.output.data, t.concat.data, 1e-6, 'Y = concat');
});

test('resizing keeps overlapping values and fills new ones from the seeded random preset', () => {
  const s = seedState();
  const { state: bigger, droppedMasks } = resizeState(s, { L: 5, E: 6, H: 3 }, 4);
  assert.equal(droppedMasks, false);
  assert.deepEqual([bigger.L, bigger.E, bigger.H], [5, 6, 3]);
  for (let i = 0; i < 3; i++) for (let j = 0; j < 4; j++) assert.equal(bigger.x[i][j], s.x[i][j]);
  for (let i = 0; i < 4; i++) for (let j = 0; j < 4; j++) assert.equal(bigger.wo[i][j], s.wo[i][j]);
  assert.equal(bigger.x[4][5], randomEntry(4, 'x', 4, 5));
  assert.equal(bigger.wq[5][0], randomEntry(4, 'wq', 5, 0));
  // Back down: the seed again.
  const { state: back } = resizeState(bigger, { L: 3, E: 4, H: 2 }, 4);
  assert.deepEqual({ ...back, source: '' }, { ...s, source: '' });
  // Changing only the heads regroups the same numbers.
  const { state: oneHead } = resizeState(s, { H: 1 });
  assert.deepEqual(oneHead.wq, s.wq);
  assert.deepEqual(Array.from(inputData(oneHead, 'WQ1')), s.wq.flat());
  assert.throws(() => resizeState(s, { H: 3 }), /divisor/);
  assert.doesNotThrow(() => traceOf(resizeState(s, { L: MAX_SIZE, E: MAX_SIZE, H: 16 }).state));
  // The state passed in is not changed.
  assert.deepEqual(s, seedState());
});

test('withCell edits one cell of the matrix as shown, without touching the old state', () => {
  const s = seedState();
  const edited = withCell(s, 'X', 0, 0, 2);
  assert.equal(edited.x[0][0], 2);
  assert.equal(s.x[0][0], 1);
  assert.equal(edited.wq, s.wq, 'untouched matrices are shared');
  // Head 2's W_K column 1 is column 3 of the full matrix.
  const k = withCell(s, 'WK2', 3, 1, 0.5);
  assert.equal(k.wk[3][3], 0.5);
  assert.equal(inputData(k, 'WK2')[3 * 2 + 1], 0.5);
  assert.equal(withCell(s, 'WO', 1, 2, -1).wo[1][2], -1);
  const b = randomState({ L: 2, E: 4, H: 2 }, 1, { withBias: true });
  assert.equal(withCell(b, 'BV2', 0, 1, 0.25).bias.v[3], 0.25);
  assert.equal(withCell(b, 'BO', 0, 3, 0.75).bias.o[3], 0.75);
  assert.throws(() => withCell(s, 'BO', 0, 0, 1), /no editable matrix/);
  assert.throws(() => withCell(s, 'WQ3', 0, 0, 1), /no editable matrix/);
  assert.throws(() => withCell(s, 'X', 3, 0, 1), /outside/);
  assert.throws(() => withCell(s, 'X', 0, 0, NaN), /finite/);
  // The edit reaches the library: Y changes as a hand computation says.
  const before = traceOf(s);
  const after = traceOf(edited);
  assert.notEqual(after.output.data[0], before.output.data[0]);
  assert.equal(after.q.data[0], 2);
});

test('toStateDict transposes into PyTorch\'s layout, with biases when present', () => {
  const s = randomState({ L: 3, E: 4, H: 2 }, 5, { withBias: true });
  const sd = toStateDict(s);
  assert.deepEqual(Object.keys(sd), ['in_proj_weight', 'out_proj.weight', 'in_proj_bias', 'out_proj.bias']);
  assert.equal(sd.in_proj_weight.length, 12);
  assert.equal(sd.in_proj_weight[4 + 1][2], s.wk[2][1]);  // k block row 1 = column 1 of W_K
  assert.equal(sd['out_proj.weight'][0][3], s.wo[3][0]);
  assert.deepEqual(sd.in_proj_bias, [...s.bias.q, ...s.bias.k, ...s.bias.v]);
  // The module's parameter shapes accept it (strict load).
  const mha = hs.createMultiheadAttention(moduleConfig(s));
  assert.doesNotThrow(() => mha.loadStateDict(sd));
  mha.dispose();
});

test('stateFromCase shows every tutorial-size unbatched self-attention golden case exactly', () => {
  const shown = [];
  const refused = [];
  for (const file of goldenFiles) {
    const doc = golden(file);
    const result = stateFromCase(doc);
    if (result.reason) {
      assert.match(result.reason, /Heads view/);
      refused.push(file);
      continue;
    }
    shown.push(file);
    const { state } = result;
    assert.equal(state.bias !== null, doc.config.bias !== false, `${file}: bias`);
    // The walkthrough's trace is the case's forward, bit for bit.
    const viaCase = hs.runCase(doc);
    const t = traceOf(state);
    assert.deepEqual(Array.from(t.output.data), Array.from(viaCase.output.data), `${file}: output`);
    const check = hs.checkCase(doc, { output: t.output, weights: viaCase.weights });
    assert.ok(check.ok, `${file}: ${check.detail}`);
    // Masks: what the explanation says they add is what the engine added.
    const terms = maskTerms(state);
    if (state.masks) assert.ok(describeMasks(state).length > 0);
    const { L, H } = state;
    const hd = headDim(state);
    for (let h = 0; h < H; h++) {
      for (let i = 0; i < L; i++) {
        for (let j = 0; j < L; j++) {
          let dot = 0;
          for (let d = 0; d < hd; d++) dot += t.q.data[(h * L + i) * hd + d] * t.k.data[(h * L + j) * hd + d];
          const m = terms ? terms[(h * L + i) * L + j] : 0;
          const score = t.scores.data[(h * L + i) * L + j];
          if (m === -Infinity) assert.equal(score, -Infinity, `${file}: masked score`);
          else assert.ok(close(dot / Math.sqrt(hd) + m, score, 1e-4 * (1 + Math.abs(score))), `${file}: score ${h},${i},${j}`);
        }
      }
    }
  }
  for (const f of ['seed-worked-example.json', 'unbatched-self.json', 'causal-unbatched-self.json',
    'kpm-float-unbatched-self.json', 'no-bias-unbatched-self.json']) {
    assert.ok(shown.includes(f), `${f} should be shown`);
  }
  for (const f of ['batched-seq-first-self.json', 'unbatched-cross-s-gt-l.json', 'kdim-only-unbatched.json',
    'bias-kv-zero-attn-unbatched-no-bias.json', 'realistic-e64-h4-self-kpm.json']) {
    assert.ok(refused.includes(f), `${f} should be left to the Heads view`);
  }
});

test('stateFromCase leaves rotary embeddings, attention sinks and shared K/V heads to the Heads view', () => {
  const doc = golden('unbatched-self.json');
  const E = doc.config.embed_dim;
  const H = doc.config.num_heads;
  assert.ok(stateFromCase(doc).state);
  const rope = { ...doc, config: { ...doc.config, rope_dims: 2 } };
  assert.match(stateFromCase(rope).reason, /turns q and k by position \(rope_dims\).*Heads view/);
  // Attention sinks: the walkthrough's rows sum to 1; a case with a sink logit per head is not its model.
  const sinks = { ...doc, config: { ...doc.config, attn_sinks: true },
    state_dict: { ...doc.state_dict, sinks: Array.from({ length: H }, () => 0.5) } };
  assert.match(stateFromCase(sinks).reason, /has attention sinks \(attn_sinks\).*Heads view/);
  if (H > 1) {
    const G = 1;
    const rows = doc.state_dict.in_proj_weight;
    const hd = E / H;
    const kv = { ...doc, config: { ...doc.config, num_kv_heads: G },
      state_dict: { ...doc.state_dict, in_proj_weight: [...rows.slice(0, E), ...rows.slice(E, E + G * hd), ...rows.slice(2 * E, 2 * E + G * hd)] } };
    delete kv.state_dict.in_proj_bias;
    kv.config.bias = false;
    delete kv.state_dict['out_proj.bias'];
    assert.match(stateFromCase(kv).reason, /shares K\/V heads/);
  }
});

test('stateFromCase reads the seed case as the seed state, from an object or JSON text', () => {
  const { state } = stateFromCase(JSON.stringify(seedWorkedExample));
  const seed = seedState();
  for (const k of ['L', 'E', 'H', 'x', 'wq', 'wk', 'wv', 'wo', 'bias', 'masks']) assert.deepEqual(state[k], seed[k], k);
  assert.match(state.source, /seed-worked-example/);
  assert.throws(() => stateFromCase('{'), (e) => e.code === 'PARSE_ERROR');
  const tooBig = structuredClone(seedWorkedExample);
  tooBig.inputs.query = Array.from({ length: 17 }, () => [0, 0, 0, 0]);
  tooBig.inputs.key = tooBig.inputs.value = null;
  assert.match(stateFromCase(tooBig).reason, /17 tokens/);
});

test('formatTerm writes integers plainly and everything else with 3 (or the given) decimals, no trailing zeros', () => {
  assert.equal(formatTerm(1), '1');
  assert.equal(formatTerm(0), '0');
  assert.equal(formatTerm(-2), '-2');
  assert.equal(formatTerm(0.80222), '0.802');
  assert.equal(formatTerm(Math.SQRT2), '1.414');
  assert.equal(formatTerm(0.80222, 5), '0.80222');
  assert.equal(formatTerm(0.5, 4), '0.5');
  assert.equal(formatTerm(-0.0001), '0');
  assert.equal(formatTerm(-Infinity), '-∞');
});

test('explanations of the seed example say what the seed says', () => {
  const state = seedState();
  const trace = traceOf(state);
  const ctx = { state, trace };
  const y = explainCell('Y', ctx, 0, 0, 0);
  // The seed writes 0.802 + 0.898 = 1.701, which a hand check gets as 1.700: five decimals of
  // the concatenation add up to the result.
  assert.ok(y.text.includes('0.80222*1 + 0.79666*0 + 0.89832*1 + 1.79806*0 = 1.701'), y.text);
  assert.deepEqual(y.sources, [{ matrix: 'CONCAT', row: 0 }, { matrix: 'WO', col: 0 }]);
  const s = explainCell('S', ctx, 0, 0, 0);
  assert.ok(s.text.includes('q_0 · k_0 / sqrt(d_k) = (1*1 + 0*0) / 1.414 = 0.707'), s.text);
  const a = explainCell('A', ctx, 0, 1, 1);
  assert.ok(a.text.includes('exp(2.828) / (exp(0) + exp(2.828) + exp(1.414))'), a.text);
  assert.ok(a.text.endsWith('= 0.768'), a.text);
  const h = explainCell('H', ctx, 0, 0, 0);
  assert.ok(h.text.includes('0.401*1 + 0.198*0 + 0.401*1 = 0.802'), h.text);
  const c = explainCell('CONCAT', ctx, 0, 0, 2);
  assert.match(c.text, /head 2 output\[0\]\[0\]/);
  assert.ok(c.text.endsWith('= 0.898'));
  assert.deepEqual(c.sources, [{ matrix: 'H2', row: 0, col: 0 }]);
  const q = explainCell('Q', ctx, 1, 0, 1);
  assert.ok(q.text.includes('1*0 + 0*0 + 1*0 + 2*1 = 2.000'), q.text);
  assert.throws(() => explainCell('Z', ctx, 0, 0, 0), /unknown stage/);
});

// The states the hand-check tests explain every cell of: several sizes, biases, seeds, masks.
function explainedStates() {
  const states = [seedState(), learnedLookingState()];
  for (const [sizes, seed, withBias] of [[{ L: 4, E: 6, H: 2 }, 11, false], [{ L: 5, E: 4, H: 4 }, 12, true],
    [{ L: 8, E: 8, H: 2 }, 3, true], [{ L: 16, E: 16, H: 4 }, 7, false], [{ L: 12, E: 12, H: 3 }, 21, true]]) {
    states.push(randomState(sizes, seed, { withBias }));
  }
  // Hand-typed numbers with many decimals, which the sums must not round away.
  let typed = randomState({ L: 4, E: 4, H: 2 }, 5, { withBias: true });
  typed = withCell(withCell(typed, 'X', 0, 0, 0.123456), 'WQ1', 1, 1, -1.98765);
  states.push(typed);
  for (const f of ['causal-unbatched-self.json', 'kpm-float-unbatched-self.json', 'mask-float-3d-unbatched.json']) {
    const r = stateFromCase(golden(f));
    if (r.state) states.push(r.state);
  }
  return states;
}

function everyCell(state, fn) {
  const { L, E, H } = state;
  const hd = headDim(state);
  for (let h = 0; h < H; h++) {
    for (let i = 0; i < L; i++) {
      for (let j = 0; j < hd; j++) for (const stage of ['Q', 'K', 'V', 'H']) fn(stage, h, i, j);
      for (let j = 0; j < L; j++) for (const stage of ['S', 'A']) fn(stage, h, i, j);
    }
  }
  for (let i = 0; i < L; i++) for (let j = 0; j < E; j++) for (const stage of ['CONCAT', 'Y']) fn(stage, 0, i, j);
}

const traceKey = { Q: 'q', K: 'k', V: 'v', H: 'headOutputs', S: 'scores', A: 'weights', CONCAT: 'concat', Y: 'output' };
function traceValue(trace, state, stage, h, i, j) {
  const { L } = state;
  const hd = headDim(state);
  if (stage === 'CONCAT' || stage === 'Y') return trace[traceKey[stage]].data[i * state.E + j];
  const cols = stage === 'S' || stage === 'A' ? L : hd;
  return trace[traceKey[stage]].data[(h * L + i) * cols + j];
}

test('every explanation\'s result is the trace\'s number, at 3 or more decimals', () => {
  for (const state of explainedStates()) {
    const trace = traceOf(state);
    everyCell(state, (stage, h, i, j) => {
      const text = explainCell(stage, { state, trace }, h, i, j).text;
      const written = text.split(/ = |= /).pop();
      const v = traceValue(trace, state, stage, h, i, j);
      if (v === -Infinity) {
        assert.equal(written.split(' ')[0], '−∞', text);
        return;
      }
      const decimals = written.split('.')[1]?.length ?? 0;
      assert.ok(decimals >= 3 && decimals <= 7, text);
      assert.equal(Number(written), Number(v.toFixed(decimals)) + 0, text);  // + 0: no -0
    });
  }
});

test('every explanation passes a hand check: its written terms give its written result', () => {
  let checked = 0;
  let wider = 0;
  for (const state of explainedStates()) {
    const trace = traceOf(state);
    everyCell(state, (stage, h, i, j) => {
      const text = explainCell(stage, { state, trace }, h, i, j).text;
      for (const c of handCheck(text).checks) {
        assert.equal(c.computed, c.written, `${stage}${h + 1}[${i}][${j}]: ${c.expression} gives ${c.computed}, ` +
          `written ${c.written}\n${text}`);
        checked++;
      }
      if (/\d\.\d{4}/.test(text)) wider++;
    });
  }
  assert.ok(checked > 5000, `${checked} checks`);
  assert.ok(wider > 0, 'some terms needed more than 3 decimals');
});

test('explanations of masked scores and fully masked rows', () => {
  const { state } = stateFromCase(golden('causal-unbatched-self.json'));
  const trace = traceOf(state);
  const s = explainCell('S', { state, trace }, 0, 0, 1);
  assert.match(s.text, /\(−∞\) = −∞/);
  const a = explainCell('A', { state, trace }, 0, 0, 1);
  assert.match(a.text, /exp\(-∞\)/);
  assert.ok(a.text.endsWith('= 0.000'), a.text);
  // A row where every key is masked: headscope's zero-row policy.
  const blocked = { ...state, masks: { attnMask: null, keyPaddingMask: {
    data: new Uint8Array(state.L).fill(1), shape: [state.L], type: 'bool' }, isCausal: false } };
  const t2 = traceOf(blocked);
  const text = explainCell('A', { state: blocked, trace: t2 }, 0, 0, 0).text;
  assert.match(text, /every key is masked/);
  // Large scores are written shifted by the row maximum.
  const big = withCell(withCell(seedState(), 'X', 0, 0, 40), 'X', 0, 1, 40);
  const t3 = traceOf(big);
  assert.match(explainCell('A', { state: big, trace: t3 }, 0, 0, 0).text, /minus the row's maximum/);
});

test('parseCellText: decimal commas, exponents and signs; no text, no infinities, nothing beyond float32', () => {
  const ok = (text, value) => assert.deepEqual(parseCellText(text), { value }, text);
  const bad = (text, pattern) => {
    const r = parseCellText(text);
    assert.ok('error' in r, `${text} is refused`);
    assert.match(r.error, pattern, text);
  };
  ok('1.5', 1.5);
  ok('1,5', 1.5);
  ok(' -0,25 ', -0.25);
  ok(',5', 0.5);
  ok('+2', 2);
  ok('−3', -3);
  ok('2e-3', 0.002);
  ok('-0', 0);
  ok('.5', 0.5);
  ok('3.4e38', 3.4e38);
  bad('', /empty/);
  bad('   ', /empty/);
  bad('-', /not a number/);
  bad('abc', /“abc” is not a number/);
  bad('1e', /not a number/);
  bad('1,000.5', /not a number/);
  bad('0x10', /not a number/);
  bad('Infinity', /not a finite number/);
  bad('NaN', /not a finite number/);
  bad('1e40', /beyond float32's range/);
  bad('-3.5e38', /beyond float32's range/);
  bad('1e400', /beyond float32's range/);
  assert.ok(FLOAT32_MAX === 3.4028234663852886e38 && Number.isFinite(Math.fround(FLOAT32_MAX)));
});

test('formatFit keeps a number within its cell; exactText reads back as the number', () => {
  assert.equal(formatFit(1), '1.000');
  assert.equal(formatFit(-12.3456), '-12.346');
  assert.equal(formatFit(-123.456), '-123.46');
  assert.equal(formatFit(1234567), '1234567');
  assert.equal(formatFit(12345678), '1.23e+7');
  assert.equal(formatFit(-1.5e20), '-2e+20');
  for (const v of [0, 1, -0.25, 0.123456789, 1e-9, -1.5e20, 3.4e38, 123456.789]) {
    assert.ok(formatFit(v).length <= 7, `${v}: ${formatFit(v)}`);
    assert.equal(Number(exactText(v)), v);
  }
  assert.equal(exactText(-0), '0');
});

test('traceOverflow finds numbers beyond float32 that no mask put there', () => {
  const fine = traceOf(seedState());
  assert.equal(traceOverflow(fine), null);
  const big = withCell(seedState(), 'X', 0, 0, 1e20);
  assert.equal(traceOverflow(traceOf(big)), 'the scores');
  const huge = withCell(seedState(), 'X', 0, 0, 3e38);
  assert.ok(traceOverflow(traceOf(withCell(huge, 'WQ1', 0, 0, 10))), 'Q overflows');
  // A causal mask's −∞ is not an overflow.
  const { state } = stateFromCase(golden('causal-unbatched-self.json'));
  assert.equal(traceOverflow(traceOf(state), maskTerms(state)), null);
  assert.equal(traceOverflow(traceOf(state), null), 'the scores', 'without the mask terms the −∞ would count');
});
