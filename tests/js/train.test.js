// Training through WebAssembly: model.backward, setOptimizer and trainStep against PyTorch's
// golden cases of tests/golden/train/ (tools/make_train_golden.py, float64 autograd and torch
// 1.13's AdamW / SGD with clip_grad_norm_): the loss within 1e-5 relative, every gradient and
// every head-gate gradient within 1e-4 of the tensor's scale, every 5-step optimizer run's losses,
// gradient norms, clipping decisions and weights within 1e-4 (the entries whose gradient is zero
// in exact arithmetic held to lr per step: tests/golden/train/README.md). Then what the goldens
// cannot show: backward changes nothing, its loss is the JS cross-entropy of forward's logits bit
// for bit, (T) is (1, T), setOptimizer starts afresh while loadStateDict keeps the moments, a step
// that would make a weight non-finite is refused and changes nothing, bad input is refused naming
// the argument (and the model trains on as its twin that never saw it), callers that lie, and
// bit-identical runs (two fresh models; the 2-thread module).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { init, HeadscopeError } from '../../web/lib/index.js';
import { makeTask } from '../../web/lib/tasks.js';
import { caseLoss } from '../../web/lib/case.js';
import { expectError } from './helpers.js';
import { hostileTensor } from './hostile-tensors.js';
import { assertSameResultBits } from './same-bits.js';
import { configOf, flat, optimizerOf, randomStateDict, randomTokens, relative, tensorError } from './transformer-helpers.js';

// The SIMD128 build, which the threaded module is: the bits compared with it below are a build's
// (under --experimental-wasm-relaxed-simd init() would load the relaxed one).
const hs = await init({ simd: 'simd128' });
after(() => assert.equal(hs.liveHandles(), 0, 'live handles left after the suite'));

// ---- The golden cases ----

const dir = new URL('../golden/train/', import.meta.url);
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
const docs = files.map((f) => JSON.parse(readFileSync(new URL(f, dir), 'utf8')));

function shapeOf(x) {
  const s = [];
  for (let v = x; Array.isArray(v); v = v[0]) s.push(v.length);
  return s;
}
function goldenModel(doc) {
  const m = hs.createTransformer(configOf(doc));
  m.loadStateDict(doc.state_dict);
  return m;
}
function withModel(m, fn) {
  try {
    return fn(m);
  } finally {
    m.dispose();
  }
}

class Worst {
  constructor() { this.error = 0; this.where = '(none)'; }
  note(e, where) { if (e > this.error) [this.error, this.where] = [e, where]; }
  toString() { return `${this.error.toExponential(2)} (${this.where})`; }
}

test('the golden set covers every stage and optimizer', () => {
  assert.ok(files.length >= 30, 'tests/golden/train has the generated set (tools/make_train_golden.py)');
  const seen = new Set();
  for (const doc of docs) {
    const c = doc.config;
    for (const k of ['norm', 'positions', 'act']) seen.add(`${k}=${c[k]}`);
    seen.add(`causal=${c.causal}`).add(`bias=${c.bias}`).add(`mlp=${c.d_mlp > 0}`);
    if (c.tie_embeddings) seen.add('tied');
    if (doc.head_gates !== null) seen.add('gates');
    for (const run of doc.runs) seen.add(`${run.optimizer.type}${run.optimizer.clip_grad_norm > 0 ? '+clip' : ''}`);
  }
  for (const want of ['norm=pre', 'norm=post', 'norm=none', 'positions=learned', 'positions=sinusoidal',
    'positions=none', 'act=gelu', 'act=relu', 'causal=true', 'causal=false', 'bias=true', 'bias=false',
    'mlp=true', 'mlp=false', 'gates', 'adamw', 'adamw+clip', 'sgd', 'sgd+clip', 'tied']) {
    assert.ok(seen.has(want), want);
  }
});

test('every golden case: backward\'s loss, every gradient and the head-gate gradients match PyTorch', (t) => {
  const loss = new Worst();
  const grads = new Worst();
  const gates = new Worst();
  for (const [i, doc] of docs.entries()) {
    const f = files[i];
    withModel(goldenModel(doc), (m) => {
      const r = m.backward(doc.tokens, doc.targets, { headGateGrads: true, headGates: doc.head_gates });
      assert.deepEqual(Object.keys(r), ['loss', 'grads'], f);
      assert.equal(typeof r.loss, 'number');
      const e = relative(r.loss, doc.loss);
      assert.ok(e <= 1e-5, `${f} loss ${r.loss} vs ${doc.loss}: ${e}`);
      loss.note(e, f);
      assert.deepEqual(Object.keys(r.grads), [...Object.keys(doc.grads), 'headGates'], `${f}: stateDict()'s keys and order`);
      // (named_parameters(): the state_dict's keys but a tied unembed.weight, whose tensor is
      // tok_embed.weight.)
      const tied = (k) => doc.config.tie_embeddings === true && k === 'unembed.weight';
      assert.deepEqual(Object.keys(doc.grads), Object.keys(m.parameterShapes()).filter((k) => !tied(k)));
      // The floor: a tensor whose gradient is zero in exact arithmetic is judged on the scale of
      // the model's gradients (the C++ test's rule).
      const scale = Math.max(...Object.values(doc.grads).map((g) => Math.max(...flat(g).map(Math.abs))));
      for (const [name, want] of Object.entries(doc.grads)) {
        const g = r.grads[name];
        assert.ok(g.data instanceof Float32Array, `${f} ${name}`);
        assert.deepEqual(g.shape, shapeOf(want), `${f} ${name} shape`);
        const err = tensorError(g.data, flat(want), 1e-3 * scale);
        assert.ok(err <= 1e-4, `${f} grads['${name}']: error ${err}`);
        grads.note(err, `${f} ${name}`);
      }
      const gotGates = r.grads.headGates;
      assert.deepEqual(shapeOf(gotGates), shapeOf(doc.head_gate_grads), `${f} head gate grads shape`);
      const wantGates = flat(doc.head_gate_grads);
      const gscale = Math.max(...wantGates.map(Math.abs));
      const ge = tensorError(flat(gotGates), wantGates, Math.max(1e-3 * gscale, 1e-12));
      assert.ok(ge <= 1e-4, `${f} head gate grads: error ${ge}`);
      gates.note(ge, f);
      // Without headGateGrads: the same parameter gradients, no headGates key.
      const plain = m.backward(doc.tokens, doc.targets, { headGates: doc.head_gates });
      assert.ok(!('headGates' in plain.grads), `${f}: no gate gradients unless asked`);
      assert.ok(Object.is(plain.loss, r.loss), f);
      const { headGates, ...params } = r.grads;
      assertSameResultBits(plain.grads, params, `${f} grads without headGateGrads`);
    });
  }
  const line = `train goldens in WebAssembly: ${files.length} cases; worst loss error ${loss}; ` +
    `worst gradient error ${grads}; worst gate-gradient error ${gates}`;
  t.diagnostic(line);
});

test('every golden optimizer run: 5 trainSteps give torch\'s losses, gradient norms, clipping and weights', (t) => {
  const loss = new Worst();
  const norm = new Worst();
  const params = new Worst();
  const noise = new Worst();   // |got - want| / lr of the zero-gradient entries
  let runs = 0;
  for (const [i, doc] of docs.entries()) {
    for (const run of doc.runs) {
      const what = `${files[i]} ${JSON.stringify(run.optimizer)}`;
      withModel(goldenModel(doc), (m) => {
        const o = optimizerOf(run.optimizer);
        assert.equal(m.optimizerSteps, 0);
        m.setOptimizer(o);
        assert.equal(m.optimizerSteps, 0, `${what}: a new optimizer has taken no step`);
        let allT1 = true;
        run.batches.forEach((b, s) => {
          allT1 = allT1 && b.tokens[0].length === 1;
          const r = m.trainStep(b.tokens, b.targets);
          assert.deepEqual(Object.keys(r), ['loss', 'gradNorm', 'clipped', 'stepped'], `${what} step ${s}`);
          assert.equal(r.stepped, true, `${what} step ${s}: ${r.refused}`);
          const le = relative(r.loss, run.losses[s]);
          assert.ok(le <= 1e-5, `${what} step ${s}: loss ${r.loss} vs ${run.losses[s]}`);
          loss.note(le, `${what} step ${s}`);
          const want = run.grad_norms[s];
          const ne = Math.abs(r.gradNorm - want) / Math.max(1e-3, want);
          assert.ok(ne <= 1e-4, `${what} step ${s}: gradNorm ${r.gradNorm} vs ${want}`);
          norm.note(ne, `${what} step ${s}`);
          assert.equal(r.clipped, run.clipped[s], `${what} step ${s}: clipped`);
          assert.equal(m.optimizerSteps, s + 1);
        });
        const D = doc.config.d_model;
        const steps = run.batches.length;
        const after = m.stateDict();
        assert.deepEqual(Object.keys(after), Object.keys(run.state_dict_after));
        for (const [name, value] of Object.entries(run.state_dict_after)) {
          const want = flat(value);
          const got = after[name].data;
          assert.deepEqual(after[name].shape, shapeOf(value), `${what} ${name} shape`);
          // The key rows of in_proj_bias, and with T = 1 in every batch the query and key rows of
          // in_proj_weight / in_proj_bias: zero gradients in exact arithmetic, float32 noise that
          // Adam scales to up to lr a step. Held to steps * lr.
          const inW = name.endsWith('in_proj_weight');
          const inB = name.endsWith('in_proj_bias');
          const keptGot = [];
          const keptWant = [];
          want.forEach((w, j) => {
            const row = inW ? Math.floor(j / D) : j;
            const zero = (inB && row >= D && row < 2 * D) || (allT1 && (inW || inB) && row < 2 * D);
            if (zero) {
              const off = Math.abs(got[j] - w);
              assert.ok(off <= steps * o.lr + 1e-6, `${what} ${name}[${j}]: off by ${off} > ${steps} lr`);
              noise.note(off / o.lr, `${what} ${name}[${j}]`);
            } else {
              keptGot.push(got[j]);
              keptWant.push(w);
            }
          });
          if (keptWant.length === 0) continue;
          const e = tensorError(keptGot, keptWant, 1e-3);
          assert.ok(e <= 1e-4, `${what} ${name}: error ${e} after ${steps} steps`);
          params.note(e, `${what} ${name}`);
        }
        runs++;
      });
    }
  }
  const line = `train goldens in WebAssembly: ${runs} optimizer runs of 5 steps; worst loss error ${loss}; ` +
    `worst gradNorm error ${norm}; worst parameter error ${params}; zero-gradient entries off by at most ` +
    `${noise.error.toFixed(3)} lr (${noise.where})`;
  t.diagnostic(line);
});

// ---- A small model of every stage, with seeded weights ----

const CONFIG = { vocabSize: 11, maxLen: 7, dModel: 8, nLayers: 2, nHeads: 2, dMlp: 12, seed: 3 };
const TOKENS = [[1, 2, 3, 4, 5], [10, 9, 8, 7, 6]];
const TARGETS = [[2, 3, 4, 5, -100], [9, 8, 7, 6, -100]];
const ADAMW = { type: 'adamw', lr: 1e-2, betas: [0.9, 0.98], weightDecay: 0.05, clipGradNorm: 1 };
// Batch s of a seeded stream: (B, T) tokens and targets, every fifth target -100.
function batchOf(config, B, T, s) {
  const tokens = randomTokens(config.vocabSize, B, T, 1000 + s);
  const targets = randomTokens(config.vocabSize, B, T, 2000 + s).map((row, b) => row.map((y, i) => ((b * T + i) % 5 === 4 ? -100 : y)));
  return { tokens, targets };
}

// mean cross-entropy over the counted positions in double from float32 logits: the arithmetic
// the C++ core documents (per row log(sum exp(x - max)) - (x[target] - max), in row order).
function meanCrossEntropy(logits, targets, V) {
  let total = 0;
  let counted = 0;
  targets.forEach((y, p) => {
    if (y === -100) return;
    const row = p * V;
    let max = logits[row];
    for (let j = 1; j < V; j++) max = logits[row + j] > max ? logits[row + j] : max;
    let sum = 0;
    for (let j = 0; j < V; j++) sum += Math.exp(logits[row + j] - max);
    total += Math.log(sum) - (logits[row + y] - max);
    counted++;
  });
  return total / counted;
}
// GlobalGradNorm's definition: sqrt of the sum of double(g)^2 in named_parameters order.
function globalNorm(grads, names) {
  let sum = 0;
  for (const n of names) for (const g of grads[n].data) sum += g * g;
  return Math.sqrt(sum);
}

const SMALL_CONFIGS = [
  CONFIG,
  { vocabSize: 50, maxLen: 16, dModel: 16, nLayers: 2, nHeads: 4, dMlp: 32, norm: 'post', positions: 'sinusoidal', act: 'relu', seed: 4 },
  { vocabSize: 29, maxLen: 12, dModel: 12, nLayers: 3, nHeads: 3, norm: 'none', positions: 'none', bias: false, causal: false, seed: 5 },
];

// How far the core's cross-entropy may be from the JS float64 one: its exponentials and their
// sum are float32 (as torch's log_softmax), each exp within 1 ulp and the sum of `vocab` terms
// rounded up to vocab times (relative 2^-24 each), which moves log(sum), and so the loss, by at
// most about that much, absolutely.
const lossBound = (vocab) => (vocab + 2) * 2 ** -24;

// tests/golden/train/loss/cross-entropy-rows.json: rows of logits given directly (no model case),
// where the order of operations shows: max + log(sum) - x[t] gave 0 for ten equal logits of
// 7.6e22 (torch: ln 10). caseLoss (tasks' evaluate, the page's held-out loss) in double against
// F.cross_entropy in float64; the core's loss and gradient through backward, on a model whose
// unembedding gives the row at every position (unembed.weight 0, unembed.bias the row).
test('the loss of given logits is torch\'s, large ones included (ten equal logits of 7.6e22: ln 10), in caseLoss and backward', () => {
  const golden = JSON.parse(readFileSync(new URL('loss/cross-entropy-rows.json', dir), 'utf8'));
  assert.ok(golden.cases.length >= 8, 'tools/make_train_golden.py writes the loss cases');
  const big = golden.cases.find((c) => c.name === 'equal-7.6e22-v10');
  assert.equal(big.loss, Math.log(10));
  for (const c of golden.cases) {
    const V = c.logits[0].length;
    const logits = Float32Array.from(c.logits.flat());
    assert.deepEqual([...logits], c.logits.flat(), `${c.name}: float32 values`);
    const js = caseLoss(logits, Int32Array.from(c.targets), V);
    assert.ok(Math.abs(js - c.loss) <= 2 ** -50 * Math.max(1, Math.abs(c.loss)), `${c.name}: caseLoss ${js} vs torch ${c.loss}`);
    const counted = c.targets.filter((t) => t !== -100).length;
    c.logits.forEach((row, r) => {
      const t = c.targets[r];
      if (t === -100) return;
      const m = hs.createTransformer({ vocabSize: V, maxLen: 2, dModel: 2, seed: 1 });
      try {
        const sd = m.stateDict();
        sd['unembed.weight'] = { data: new Float32Array(V * 2), shape: [V, 2] };
        sd['unembed.bias'] = { data: Float32Array.from(row), shape: [V] };
        m.loadStateDict(sd);
        const { loss, grads } = m.backward([0], [t]);
        const want = c.row_losses[r];
        assert.ok(Math.abs(loss - want) <= lossBound(V) + 2 ** -51 * Math.abs(want),
          `${c.name} row ${r}: backward's loss ${loss} vs torch ${want}`);
        // One counted position: d loss / d unembed.bias is the row's softmax - onehot, which is
        // the golden mean's gradient times the case's count.
        grads['unembed.bias'].data.forEach((g, j) => assert.ok(Math.abs(g - c.grad[r][j] * counted) <= 1e-6,
          `${c.name} row ${r}: d loss / d logit ${j} ${g} vs ${c.grad[r][j] * counted}`));
      } finally {
        m.dispose();
      }
    });
  }
});

test('backward changes no weight and no optimizer state; its loss is the JS float64 cross-entropy of forward\'s ' +
  'logits (within the float32 sum\'s rounding); trainStep reports backward\'s loss and the norm of its gradients, bit for bit', (t) => {
  let checked = 0;
  let worstAbs = 0;
  const task = makeTask('copy', { seqLen: 8 });
  for (const config of SMALL_CONFIGS) {
    const m = hs.createTransformer(config);
    const twin = hs.createTransformer(config);
    try {
      const names = Object.keys(m.parameterShapes());
      const T = config.maxLen;
      const before = m.stateDict();
      for (let s = 0; s < 8; s++) {
        const { tokens, targets } = batchOf(config, 3, s % 2 === 0 ? T : T - 3, s);
        const logits = m.forward(tokens).logits;
        const r = m.backward(tokens, targets);
        assertSameResultBits(m.stateDict(), before, 'weights after backward');
        assertSameResultBits(m.forward(tokens).logits, logits, 'forward after backward');
        const js = meanCrossEntropy(logits.data, targets.flat(), config.vocabSize);
        const diff = Math.abs(js - r.loss);
        assert.ok(diff <= lossBound(config.vocabSize), `loss ${r.loss} vs JS ${js}`);
        worstAbs = Math.max(worstAbs, diff / lossBound(config.vocabSize));
        checked++;
        // The tasks module's loss (evaluate) is this JS arithmetic.
        assert.ok(Object.is(task.evaluate(logits, targets).loss, js), 'task.evaluate(...).loss');
        // The gradients depend on nothing that ran before: another batch in between, same bits.
        const other = batchOf(config, 1, 2, 99);
        m.backward(other.tokens, other.targets, { headGateGrads: true });
        assertSameResultBits(m.backward(tokens, targets), r, 'backward again');
        // trainStep's loss and norm: backward's loss, and the norm of backward's gradients.
        m.setOptimizer({ type: 'sgd', lr: 0 });   // lr 0: weights unchanged
        const step = m.trainStep(tokens, targets);
        assert.ok(Object.is(step.loss, r.loss), `trainStep loss ${step.loss} vs backward ${r.loss}`);
        assert.ok(Object.is(step.gradNorm, globalNorm(r.grads, names)), `gradNorm ${step.gradNorm} vs ${globalNorm(r.grads, names)}`);
      }
      // backward between steps leaves the optimizer's state alone: step, backward, step = step, step.
      m.setOptimizer(ADAMW);
      twin.setOptimizer(ADAMW);
      const b0 = batchOf(config, 2, T, 50);
      const b1 = batchOf(config, 2, T, 51);
      const b2 = batchOf(config, 2, T, 52);
      m.trainStep(b0.tokens, b0.targets);
      twin.trainStep(b0.tokens, b0.targets);
      m.backward(b2.tokens, b2.targets, { headGateGrads: true, headGates: Array.from({ length: config.nLayers }, () => new Array(config.nHeads).fill(0.5)) });
      assert.equal(m.optimizerSteps, 1);
      assert.deepEqual(m.trainStep(b1.tokens, b1.targets), twin.trainStep(b1.tokens, b1.targets));
      assertSameResultBits(m.stateDict(), twin.stateDict(), 'step, backward, step = step, step');
      // Forward sees the stepped weights: the next backward's loss is the cross-entropy of the
      // new logits, and so is the next step's.
      const after = m.forward(b1.tokens).logits;
      const next = m.backward(b1.tokens, b1.targets);
      const want = meanCrossEntropy(after.data, b1.targets.flat(), config.vocabSize);
      assert.ok(Math.abs(next.loss - want) <= lossBound(config.vocabSize), `${next.loss} vs ${want}`);
      assert.ok(Object.is(m.trainStep(b1.tokens, b1.targets).loss, next.loss));
    } finally {
      m.dispose();
      twin.dispose();
    }
  }
  t.diagnostic(`backward's loss vs JS float64 cross-entropy of forward's float32 logits, ${checked} batches: ` +
    `worst difference ${worstAbs.toFixed(3)} of the bound`);
});

test('unbatched (T) tokens and targets give the (1, T) results, bit for bit', () => {
  const [a, b] = [hs.createTransformer(CONFIG), hs.createTransformer(CONFIG)];
  try {
    const row = TOKENS[1];
    const y = TARGETS[1];
    const one = a.backward(row, y, { headGateGrads: true });
    const batched = a.backward([row], [y], { headGateGrads: true });
    assertSameResultBits(one, batched, 'backward (T) vs (1, T)');
    assert.deepEqual(one.grads['tok_embed.weight'].shape, [CONFIG.vocabSize, CONFIG.dModel], 'gradients have the weights\' shapes');
    assertSameResultBits(a.backward({ data: Int32Array.from(row), shape: [5] }, { data: Int32Array.from(y), shape: [5] }),
      a.backward(row, y), '{ data, shape } (T)');
    assertSameResultBits(a.backward({ data: Int32Array.from(row), shape: [1, 5] }, { data: Int32Array.from(y), shape: [1, 5] }),
      a.backward(row, y), '{ data, shape } (1, T)');
    a.setOptimizer(ADAMW);
    b.setOptimizer(ADAMW);
    for (let s = 0; s < 4; s++) {
      const { tokens, targets } = batchOf(CONFIG, 1, 6, s);
      assert.deepEqual(a.trainStep(tokens[0], targets[0]), b.trainStep(tokens, targets), `step ${s}`);
    }
    assertSameResultBits(a.stateDict(), b.stateDict(), 'weights after (T) vs (1, T) steps');
  } finally {
    a.dispose();
    b.dispose();
  }
});

// n steps of batchOf(CONFIG, 2, 6, from ..) on m; the results.
function steps(m, from, n) {
  const out = [];
  for (let s = from; s < from + n; s++) {
    const { tokens, targets } = batchOf(CONFIG, 2, 6, s);
    const r = m.trainStep(tokens, targets);
    assert.ok(r.stepped, r.refused);
    out.push(r);
  }
  return out;
}

test('setOptimizer starts a new optimizer (fresh moments, optimizerSteps 0); a refused one keeps the old', () => {
  const a = hs.createTransformer(CONFIG);
  const b = hs.createTransformer(CONFIG);
  const c = hs.createTransformer(CONFIG);
  try {
    a.setOptimizer(ADAMW);
    steps(a, 0, 3);
    assert.equal(a.optimizerSteps, 3);
    // Again AdamW: from here on as a fresh model with a's current weights and a new optimizer.
    a.setOptimizer(ADAMW);
    assert.equal(a.optimizerSteps, 0);
    b.loadStateDict(a.stateDict());
    b.setOptimizer(ADAMW);
    assert.deepEqual(steps(a, 3, 3), steps(b, 3, 3));
    assertSameResultBits(a.stateDict(), b.stateDict(), 'a new AdamW = a fresh model\'s');
    assert.equal(a.optimizerSteps, 3);
    // Without the reset the path differs (the moments matter): c continues a's first optimizer.
    c.setOptimizer(ADAMW);
    steps(c, 0, 6);
    assert.notDeepEqual(c.stateDict()['unembed.weight'].data, a.stateDict()['unembed.weight'].data);
    // SGD after AdamW, AdamW after SGD: each starts at 0.
    a.setOptimizer({ type: 'sgd', lr: 0.05 });
    assert.equal(a.optimizerSteps, 0);
    steps(a, 6, 2);
    assert.equal(a.optimizerSteps, 2);
    a.setOptimizer(ADAMW);
    b.loadStateDict(a.stateDict());
    b.setOptimizer(ADAMW);
    assert.deepEqual(steps(a, 8, 2), steps(b, 8, 2));
    assertSameResultBits(a.stateDict(), b.stateDict(), 'AdamW after SGD');
    // A refused setOptimizer (its options checked in JS or in C++) keeps the optimizer and state.
    for (const bad of [{ type: 'adamw', lr: NaN }, { type: 'adamw', betas: [1, 0.9] }, { type: 'sgd', momentum: 0.9 },
      { type: 'adam' }, { type: 'adamw', eps: 0 }]) {
      expectError(() => a.setOptimizer(bad), 'INVALID_ARGUMENT', 'options');
      assert.equal(a.optimizerSteps, 2);
    }
    b.loadStateDict(a.stateDict());
    assert.deepEqual(steps(a, 10, 2), steps(b, 10, 2), 'the optimizer a refused setOptimizer left');
    assertSameResultBits(a.stateDict(), b.stateDict());
    // The defaults are torch's: AdamW lr 1e-3, betas [0.9, 0.999], eps 1e-8, weightDecay 0.01, no
    // clipping; undefined is the default; SGD lr 1e-3.
    for (const [short, full] of [[{ type: 'adamw' }, { type: 'adamw', lr: 1e-3, betas: [0.9, 0.999], eps: 1e-8, weightDecay: 0.01, clipGradNorm: 0 }],
      [{ type: 'adamw', lr: undefined, betas: undefined, clipGradNorm: undefined }, { type: 'adamw', lr: 1e-3, betas: [0.9, 0.999] }],
      [{ type: 'sgd' }, { type: 'sgd', lr: 1e-3, clipGradNorm: 0 }]]) {
      const w = a.stateDict();
      a.setOptimizer(short);
      b.loadStateDict(w);
      b.setOptimizer(full);
      assert.deepEqual(steps(a, 20, 2), steps(b, 20, 2), JSON.stringify(short));
      assertSameResultBits(a.stateDict(), b.stateDict(), JSON.stringify(short));
    }
  } finally {
    a.dispose();
    b.dispose();
    c.dispose();
  }
});

test('loadStateDict keeps the optimizer\'s moments and step count (as torch\'s optimizer survives load_state_dict)', () => {
  const a = hs.createTransformer(CONFIG);
  const b = hs.createTransformer(CONFIG);
  const fresh = hs.createTransformer(CONFIG);
  try {
    a.setOptimizer(ADAMW);
    b.setOptimizer(ADAMW);
    steps(a, 0, 3);
    steps(b, 0, 3);
    a.loadStateDict(a.stateDict());
    assert.equal(a.optimizerSteps, 3, 'the step count survives a load');
    assert.deepEqual(steps(a, 3, 3), steps(b, 3, 3));
    assertSameResultBits(a.stateDict(), b.stateDict(), 'load of the same weights, then steps = uninterrupted steps');
    // A partial load (strict: false) keeps them too.
    const { 'unembed.bias': bias } = a.stateDict();
    a.loadStateDict({ 'unembed.bias': bias }, { strict: false });
    assert.equal(a.optimizerSteps, 6);
    assert.deepEqual(steps(a, 6, 1), steps(b, 6, 1));
    // Other weights loaded: the moments and count are still the old optimizer's (a differs from a
    // fresh optimizer on the same weights).
    const w = fresh.stateDict();
    a.loadStateDict(w);
    assert.equal(a.optimizerSteps, 7);
    fresh.setOptimizer(ADAMW);
    const ra = steps(a, 7, 1);
    const rf = steps(fresh, 7, 1);
    assert.ok(Object.is(ra[0].loss, rf[0].loss), 'the same weights: the same loss');
    assert.notDeepEqual(a.stateDict()['unembed.weight'].data, fresh.stateDict()['unembed.weight'].data,
      'kept moments move the weights otherwise');
    assert.equal(a.optimizerSteps, 8);
  } finally {
    a.dispose();
    b.dispose();
    fresh.dispose();
  }
});

test('a step that would make a weight non-finite is refused: stepped false, refused says why, nothing changes', (t) => {
  const reasons = [];
  const { tokens, targets } = batchOf(CONFIG, 2, 6, 0);
  // A non-finite weight: in a row the batch uses (the loss and gradients are NaN), or in an unused
  // embedding row (finite gradients; the weight itself is refused), or NaN.
  const unused = CONFIG.vocabSize - 1;   // never in batchOf(.., 0): checked below
  assert.ok(!tokens.flat().includes(unused));
  for (const [what, poison, fragments] of [
    ['Infinity in unembed.weight', (sd) => { sd['unembed.weight'].data[3] = Infinity; }, ['grads[', 'nan']],
    ['-Infinity in tok_embed.weight of an unused token', (sd) => { sd['tok_embed.weight'].data[unused * CONFIG.dModel + 1] = -Infinity; },
      ["stateDict['tok_embed.weight']", 'already -inf']],
    ['NaN in blocks.0.attn.in_proj_weight', (sd) => { sd['blocks.0.attn.in_proj_weight'].data[0] = NaN; }, ['nan']],
  ]) {
    for (const optimizer of [ADAMW, { type: 'sgd', lr: 0.1 }]) {
      const a = hs.createTransformer(CONFIG);
      const b = hs.createTransformer(CONFIG);
      try {
        a.setOptimizer(optimizer);
        b.setOptimizer(optimizer);
        steps(a, 10, 2);
        steps(b, 10, 2);
        const good = a.stateDict();
        const bad = a.stateDict();
        poison(bad);
        a.loadStateDict(bad);
        const badBits = a.stateDict();
        const r = a.trainStep(tokens, targets);
        assert.deepEqual(Object.keys(r), ['loss', 'gradNorm', 'clipped', 'stepped', 'refused'], what);
        assert.equal(r.stepped, false, what);
        assert.equal(typeof r.refused, 'string');
        assert.ok(r.refused.length > 0);
        for (const f of [...fragments, 'the step was refused and changed nothing']) {
          assert.ok(r.refused.includes(f), `${what}: "${r.refused}" lacks "${f}"`);
        }
        reasons.push(`${what} (${optimizer.type}): ${r.refused}`);
        assertSameResultBits(a.stateDict(), badBits, `${what}: weights unchanged`);
        assert.equal(a.optimizerSteps, 2, `${what}: the step count unchanged`);
        // The model keeps working; with the good weights back it trains on exactly as b, which
        // never saw the refused step (its moments were not touched either).
        assert.equal(a.forward(tokens).logits.shape.length, 3);
        a.loadStateDict(good);
        assert.deepEqual(steps(a, 12, 2), steps(b, 12, 2), `${what}: after the refused step`);
        assertSameResultBits(a.stateDict(), b.stateDict(), `${what}: moments untouched`);
      } finally {
        a.dispose();
        b.dispose();
      }
    }
  }
  // An update that overflows float32: lr 1e38 with weight decay (the decay factor 1 - lr * wd),
  // and without (the step itself): refused naming options.lr; a new optimizer trains on.
  for (const [options, fragments] of [
    [{ type: 'adamw', lr: 1e38, weightDecay: 0.01 }, ['options.lr: 1e+38 is too large for float32', 'options.weightDecay']],
    [{ type: 'adamw', lr: 1e38, weightDecay: 0 }, ['options.lr: 1e+38 is too large for float32']],
    [{ type: 'sgd', lr: 1e300 }, ['options.lr: 1e+300 is too large for float32']],
  ]) {
    const a = hs.createTransformer(CONFIG);
    const b = hs.createTransformer(CONFIG);
    try {
      const w = a.stateDict();
      a.setOptimizer(options);
      const r = a.trainStep(TOKENS, TARGETS);
      assert.equal(r.stepped, false, JSON.stringify(options));
      assert.ok(Number.isFinite(r.loss) && Number.isFinite(r.gradNorm), 'the loss and norm are finite');
      for (const f of [...fragments, 'changed nothing']) assert.ok(r.refused.includes(f), `"${r.refused}" lacks "${f}"`);
      assert.ok(r.refused.startsWith('options.lr'), r.refused);
      reasons.push(`${JSON.stringify(options)}: ${r.refused}`);
      assertSameResultBits(a.stateDict(), w, 'weights unchanged');
      assert.equal(a.optimizerSteps, 0);
      // Refused again (nothing changed), then a sane optimizer trains as a fresh model's.
      assert.equal(a.trainStep(TOKENS, TARGETS).stepped, false);
      a.setOptimizer(ADAMW);
      b.setOptimizer(ADAMW);
      assert.deepEqual(steps(a, 0, 3), steps(b, 0, 3));
      assertSameResultBits(a.stateDict(), b.stateDict());
    } finally {
      a.dispose();
      b.dispose();
    }
  }
  for (const r of reasons) t.diagnostic(r);
});

// ---- Bad input: refused naming the argument; the model trains on as its twin ----

test('bad input to backward, setOptimizer and trainStep: HeadscopeError naming the argument; the model trains on', () => {
  const m = hs.createTransformer(CONFIG);
  const twin = hs.createTransformer(CONFIG);
  m.setOptimizer(ADAMW);
  twin.setOptimizer(ADAMW);
  // After every refusal: the same weights and step count as the twin, and the same next step.
  let checks = 0;
  const stillTrains = (what) => {
    assertSameResultBits(m.stateDict(), twin.stateDict(), `${what}: weights`);
    assert.equal(m.optimizerSteps, twin.optimizerSteps, `${what}: optimizerSteps`);
    const r = m.trainStep(TOKENS, TARGETS);
    assert.ok(r.stepped, `${what}: ${r.refused}`);
    assert.deepEqual(r, twin.trainStep(TOKENS, TARGETS), `${what}: the next step`);
    checks++;
  };
  let coerced = false;
  const liar = (v) => ({ toString: () => { coerced = true; return v; }, valueOf: () => { coerced = true; return v; } });
  const bothTargets = (targets, code, ...fragments) => [
    [`backward targets ${JSON.stringify(targets)}`, () => m.backward(TOKENS, targets), code, ...fragments],
    [`trainStep targets ${JSON.stringify(targets)}`, () => m.trainStep(TOKENS, targets), code, ...fragments],
  ];
  const CASES = [
    // Targets out of range, of another shape, all ignored, not integers.
    ...bothTargets([[2, 3, 4, 5, 11], [9, 8, 7, 6, -100]], 'INVALID_ARGUMENT', 'targets: target [0, 4] is 11',
      'expected -100 (ignored) or an integer in [0, 10] (vocabSize 11)'),
    ...bothTargets([[2, 3, 4, 5, -100], [9, -1, 7, 6, -100]], 'INVALID_ARGUMENT', 'targets: target [1, 1] is -1'),
    ...bothTargets([[2, 3, 4, 5, -100], [9, 8, 7, -99, -100]], 'INVALID_ARGUMENT', 'targets: target [1, 3] is -99'),
    ...bothTargets([[2, 3, 4, 5, -100], [9, 8, 7, 6, 2 ** 31 - 1]], 'INVALID_ARGUMENT', `targets: target [1, 4] is ${2 ** 31 - 1}`),
    ...bothTargets([[2, 3, 4, 5]], 'SHAPE_MISMATCH', "targets: expected integers of the tokens' shape (2, 5)"),
    ...bothTargets([[2, 3, 4, 5], [9, 8, 7, 6]], 'SHAPE_MISMATCH', "targets: expected integers of the tokens' shape (2, 5)"),
    ...bothTargets([2, 3, 4, 5, 6], 'SHAPE_MISMATCH', "targets: expected the tokens' shape [2, 5], got [5]"),
    ...bothTargets([[[2, 3, 4, 5, 6]]], 'SHAPE_MISMATCH', 'targets: expected (T) or (B, T)'),
    ...bothTargets([[2, 3, 4, 5, 6], [1]], 'SHAPE_MISMATCH', 'targets[1]'),
    ...bothTargets([new Array(5).fill(-100), new Array(5).fill(-100)], 'INVALID_ARGUMENT',
      'targets: every target is -100 (ignored): there is no loss to compute'),
    ...bothTargets([[2.5, 3, 4, 5, 6], [9, 8, 7, 6, 5]], 'INVALID_ARGUMENT', 'targets[0][0]: expected an integer token id, got number 2.5'),
    ...bothTargets([[2, 3, 4, 5, 6], [9, NaN, 7, 6, 5]], 'INVALID_ARGUMENT', 'targets[1][1]: expected an integer token id'),
    ...bothTargets([[2, '3', 4, 5, 6], [9, 8, 7, 6, 5]], 'INVALID_ARGUMENT', 'targets[0][1]: expected an integer token id'),
    ...bothTargets([[2, liar(3), 4, 5, 6], [9, 8, 7, 6, 5]], 'INVALID_ARGUMENT', 'targets[0][1]: expected an integer token id'),
    ...bothTargets({ data: new Float32Array(10), shape: [2, 5] }, 'INVALID_ARGUMENT', 'targets.data: expected an Int32Array'),
    ...bothTargets({ data: new Int32Array(9), shape: [2, 5] }, 'SHAPE_MISMATCH', 'targets'),
    ...bothTargets(undefined, 'INVALID_ARGUMENT', 'targets: expected token ids'),
    ...bothTargets(null, 'INVALID_ARGUMENT', 'targets: expected token ids'),
    // Tokens: the forward's rules.
    ['backward tokens 11', () => m.backward([[1, 2, 3, 4, 11], [1, 2, 3, 4, 5]], TARGETS), 'INVALID_ARGUMENT', 'tokens: token [0, 4] is 11'],
    ['trainStep tokens -1', () => m.trainStep([[1, 2, 3, 4, 5], [1, 2, -1, 4, 5]], TARGETS), 'INVALID_ARGUMENT', 'tokens: token [1, 2] is -1'],
    ['trainStep T > maxLen', () => m.trainStep([[1, 2, 3, 4, 5, 6, 7, 8]], [[1, 2, 3, 4, 5, 6, 7, 8]]), 'SHAPE_MISMATCH', 'T <= maxLen = 7'],
    ['backward tokens 1.5', () => m.backward([[1, 2, 3, 4, 1.5], [1, 2, 3, 4, 5]], TARGETS), 'INVALID_ARGUMENT', 'tokens[0][4]'],
    // backward's options.
    ['backward unknown option', () => m.backward(TOKENS, TARGETS, { headGateGrad: true }), 'INVALID_ARGUMENT',
      'options.headGateGrad: unknown option (expected one of headGates, headGateGrads)'],
    ['backward headGateGrads 1', () => m.backward(TOKENS, TARGETS, { headGateGrads: 1 }), 'INVALID_ARGUMENT',
      'options.headGateGrads: expected true or false, got number 1'],
    ['backward headGates shape', () => m.backward(TOKENS, TARGETS, { headGates: [[1, 1]] }), 'SHAPE_MISMATCH',
      'options.headGates: expected (nLayers, nHeads) = [2, 2]'],
    ['backward options null', () => m.backward(TOKENS, TARGETS, null), 'INVALID_ARGUMENT', 'options: expected an object'],
    // setOptimizer: unknown options (what SGD does not take, what neither takes).
    ['sgd betas', () => m.setOptimizer({ type: 'sgd', betas: [0.9, 0.99] }), 'INVALID_ARGUMENT',
      'options.betas: unknown option (expected one of type, lr, clipGradNorm)'],
    ['sgd weightDecay', () => m.setOptimizer({ type: 'sgd', weightDecay: 0.1 }), 'INVALID_ARGUMENT', 'options.weightDecay: unknown option'],
    ['sgd eps', () => m.setOptimizer({ type: 'sgd', eps: 1e-8 }), 'INVALID_ARGUMENT', 'options.eps: unknown option'],
    ['sgd momentum', () => m.setOptimizer({ type: 'sgd', momentum: 0.9 }), 'INVALID_ARGUMENT', 'options.momentum: unknown option'],
    ['adamw momentum', () => m.setOptimizer({ type: 'adamw', momentum: 0.9 }), 'INVALID_ARGUMENT',
      'options.momentum: unknown option (expected one of type, lr, betas, eps, weightDecay, clipGradNorm)'],
    ['adamw weight_decay', () => m.setOptimizer({ type: 'adamw', weight_decay: 0.1 }), 'INVALID_ARGUMENT', 'options.weight_decay: unknown option'],
    ['__proto__ key', () => m.setOptimizer(JSON.parse('{"type": "sgd", "__proto__": {"lr": 1}}')), 'INVALID_ARGUMENT',
      'options.__proto__: unknown option'],
    // setOptimizer: the type.
    ['type adam', () => m.setOptimizer({ type: 'adam' }), 'INVALID_ARGUMENT', "options.type: expected one of 'adamw', 'sgd', got string \"adam\""],
    ['type SGD', () => m.setOptimizer({ type: 'SGD' }), 'INVALID_ARGUMENT', "options.type: expected one of 'adamw', 'sgd'"],
    ['no type', () => m.setOptimizer({ lr: 1e-3 }), 'INVALID_ARGUMENT', "options.type: expected one of 'adamw', 'sgd', got undefined"],
    ['type toString', () => m.setOptimizer({ type: liar('sgd') }), 'INVALID_ARGUMENT', "options.type: expected one of 'adamw', 'sgd', got an object"],
    ['type String object', () => m.setOptimizer({ type: new String('sgd') }), 'INVALID_ARGUMENT', 'options.type'],
    ['type symbol', () => m.setOptimizer({ type: Symbol('sgd') }), 'INVALID_ARGUMENT', 'options.type'],
    ['type __proto__', () => m.setOptimizer({ type: '__proto__' }), 'INVALID_ARGUMENT', 'options.type'],
    ['options null', () => m.setOptimizer(null), 'INVALID_ARGUMENT', "options: expected an object like { type: 'adamw', lr: 1e-3 }"],
    ['options missing', () => m.setOptimizer(), 'INVALID_ARGUMENT', 'options: expected an object'],
    ['options string', () => m.setOptimizer('adamw'), 'INVALID_ARGUMENT', 'options: expected an object'],
    ['options array', () => m.setOptimizer([{ type: 'adamw' }]), 'INVALID_ARGUMENT', 'options: expected an object'],
    // setOptimizer: numbers.
    ...[['adamw', NaN, 'nan'], ['adamw', -1, '-1'], ['adamw', Infinity, 'inf'], ['sgd', NaN, 'nan'], ['sgd', -1e-3, '-0.001'],
      ['sgd', -Infinity, '-inf']].map(([type, lr, shown]) => [`${type} lr ${lr}`, () => m.setOptimizer({ type, lr }),
      'INVALID_ARGUMENT', `options.lr: expected a finite number >= 0, got ${shown}`, { argument: 'options.lr' }]),
    ['lr string', () => m.setOptimizer({ type: 'adamw', lr: '0.1' }), 'INVALID_ARGUMENT', 'options.lr: expected a number, got string "0.1"'],
    ['lr liar', () => m.setOptimizer({ type: 'sgd', lr: liar(0.1) }), 'INVALID_ARGUMENT', 'options.lr: expected a number'],
    ['lr null', () => m.setOptimizer({ type: 'sgd', lr: null }), 'INVALID_ARGUMENT', 'options.lr: expected a number'],
    ['betas one', () => m.setOptimizer({ type: 'adamw', betas: [0.9] }), 'INVALID_ARGUMENT', 'options.betas: expected [beta1, beta2], got an array of length 1'],
    ['betas three', () => m.setOptimizer({ type: 'adamw', betas: [0.9, 0.99, 0.9] }), 'INVALID_ARGUMENT', 'options.betas: expected [beta1, beta2]'],
    ['betas number', () => m.setOptimizer({ type: 'adamw', betas: 0.9 }), 'INVALID_ARGUMENT', 'options.betas: expected [beta1, beta2]'],
    ['betas typed', () => m.setOptimizer({ type: 'adamw', betas: new Float64Array([0.9, 0.99]) }), 'INVALID_ARGUMENT', 'options.betas'],
    ['betas object', () => m.setOptimizer({ type: 'adamw', betas: { 0: 0.9, 1: 0.99, length: 2 } }), 'INVALID_ARGUMENT', 'options.betas'],
    ['betas string', () => m.setOptimizer({ type: 'adamw', betas: [0.9, '0.99'] }), 'INVALID_ARGUMENT', 'options.betas: expected two numbers'],
    ['betas liar', () => m.setOptimizer({ type: 'adamw', betas: [liar(0.9), 0.99] }), 'INVALID_ARGUMENT', 'options.betas: expected two numbers'],
    ['betas with a hole', () => m.setOptimizer({ type: 'adamw', betas: Object.assign(new Array(2), { 0: 0.9 }) }), 'INVALID_ARGUMENT',
      'options.betas: expected two numbers, got undefined'],
    ['beta1 1', () => m.setOptimizer({ type: 'adamw', betas: [1, 0.99] }), 'INVALID_ARGUMENT',
      'options.betas: expected options.betas[0] in [0, 1), got 1', { argument: 'options.betas' }],
    ['beta2 -0.1', () => m.setOptimizer({ type: 'adamw', betas: [0.9, -0.1] }), 'INVALID_ARGUMENT', 'options.betas[1] in [0, 1), got -0.1'],
    ['beta1 NaN', () => m.setOptimizer({ type: 'adamw', betas: [NaN, 0.99] }), 'INVALID_ARGUMENT', 'options.betas[0] in [0, 1), got nan'],
    ['eps 0', () => m.setOptimizer({ type: 'adamw', eps: 0 }), 'INVALID_ARGUMENT',
      'options.eps: expected a finite number > 0, got 0', { argument: 'options.eps' }],
    ['eps -1', () => m.setOptimizer({ type: 'adamw', eps: -1 }), 'INVALID_ARGUMENT', 'options.eps: expected a finite number > 0'],
    ['eps NaN', () => m.setOptimizer({ type: 'adamw', eps: NaN }), 'INVALID_ARGUMENT', 'options.eps'],
    ['eps 1e-50', () => m.setOptimizer({ type: 'adamw', eps: 1e-50 }), 'INVALID_ARGUMENT', 'options.eps: 1e-50 is 0 in float32'],
    ['weightDecay -1', () => m.setOptimizer({ type: 'adamw', weightDecay: -1 }), 'INVALID_ARGUMENT',
      'options.weightDecay: expected a finite number >= 0, got -1', { argument: 'options.weightDecay' }],
    ['weightDecay Infinity', () => m.setOptimizer({ type: 'adamw', weightDecay: Infinity }), 'INVALID_ARGUMENT', 'options.weightDecay'],
    ['clipGradNorm -1', () => m.setOptimizer({ type: 'sgd', clipGradNorm: -1 }), 'INVALID_ARGUMENT',
      'options.clipGradNorm: expected a finite number > 0 (or 0: no clipping), got -1', { argument: 'options.clipGradNorm' }],
    ['clipGradNorm NaN', () => m.setOptimizer({ type: 'adamw', clipGradNorm: NaN }), 'INVALID_ARGUMENT', 'options.clipGradNorm'],
    ['clipGradNorm Infinity', () => m.setOptimizer({ type: 'adamw', clipGradNorm: Infinity }), 'INVALID_ARGUMENT', 'options.clipGradNorm'],
    ['clipGradNorm true', () => m.setOptimizer({ type: 'adamw', clipGradNorm: true }), 'INVALID_ARGUMENT', 'options.clipGradNorm: expected a number'],
  ];
  try {
    for (const [what, call, code, ...rest] of CASES) {
      const last = rest.at(-1);
      const expect = typeof last === 'object' ? last : {};
      const fragments = typeof last === 'object' ? rest.slice(0, -1) : rest;
      const e = expectError(call, code, ...fragments);
      if (expect.argument !== undefined) assert.equal(e.argument, expect.argument, what);
      if (/^targets/.test(fragments[0] ?? '') && e.argument !== undefined) assert.equal(e.argument, 'targets', what);
      stillTrains(what);
    }
    assert.equal(coerced, false, 'a caller value was coerced');
    assert.equal(checks, CASES.length);
  } finally {
    m.dispose();
    twin.dispose();
  }
});

test('trainStep before setOptimizer, on a disposed model, on a wrong this: refused, the model unharmed', () => {
  const m = hs.createTransformer(CONFIG);
  const w = m.stateDict();
  expectError(() => m.trainStep(TOKENS, TARGETS), 'INVALID_ARGUMENT', 'trainStep: no optimizer set (call setOptimizer first)');
  assert.equal(m.optimizerSteps, 0);
  assertSameResultBits(m.stateDict(), w, 'no optimizer: nothing changed');
  // backward needs no optimizer.
  assert.ok(Number.isFinite(m.backward(TOKENS, TARGETS).loss));
  // Methods on a wrong this: INVALID_ARGUMENT naming the method.
  const getter = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(m), 'optimizerSteps').get;
  const calls = {
    backward: (self) => m.backward.call(self, TOKENS, TARGETS),
    trainStep: (self) => m.trainStep.call(self, TOKENS, TARGETS),
    setOptimizer: (self) => m.setOptimizer.call(self, ADAMW),
    optimizerSteps: (self) => getter.call(self),
  };
  for (const [name, call] of Object.entries(calls)) {
    for (const self of [undefined, null, {}, new Proxy(m, {}), hs, Object.create(m)]) {
      expectError(() => call(self), 'INVALID_ARGUMENT', `Transformer.${name}: called on`);
    }
  }
  const { trainStep } = m;
  expectError(() => trainStep(TOKENS, TARGETS), 'INVALID_ARGUMENT', 'Transformer.trainStep: called on undefined',
    'a method taken off its object loses its this');
  // Still a model: it trains once it has an optimizer.
  m.setOptimizer(ADAMW);
  assert.ok(m.trainStep(TOKENS, TARGETS).stepped);
  assert.equal(m.optimizerSteps, 1);
  m.dispose();
  for (const call of Object.values(calls)) expectError(() => call(m), 'DISPOSED', 'Transformer: this object was disposed');
});

test('trainStep before setOptimizer does not name an argument trainStep does not have', () => {
  const m = hs.createTransformer(CONFIG);
  try {
    const e = expectError(() => m.trainStep(TOKENS, TARGETS), 'INVALID_ARGUMENT', 'no optimizer set');
    assert.notEqual(e.argument, 'options.type');
  } finally {
    m.dispose();
  }
});

// ---- Callers that lie ----

const SHAPES = (() => {
  const m = hs.createTransformer(CONFIG);
  const s = m.parameterShapes();
  m.dispose();
  return s;
})();
const STATE = randomStateDict(SHAPES, 7);
const OTHER = { tokens: [[3, 3, 3], [4, 4, 4]], targets: [[1, 2, 3], [4, 5, -100]] };
function freshVictim() {
  const m = hs.createTransformer(CONFIG);
  m.loadStateDict(STATE);
  m.setOptimizer(ADAMW);
  return m;
}
const WANT = (() => {
  const m = freshVictim();
  const state = m.stateDict();
  const backward = m.backward(TOKENS, TARGETS, { headGateGrads: true });
  const step = m.trainStep(TOKENS, TARGETS);
  const stepped = m.stateDict();
  m.dispose();
  return { state, backward, step, stepped };
})();

const CALLBACKS = {
  none: () => {},
  dispose: (ctx) => ctx.victim.dispose(),
  // A whole backward of another batch on the same model, from inside the call.
  backward: (ctx) => { ctx.victim.backward(OTHER.tokens, OTHER.targets, { headGateGrads: true }); },
  forward: (ctx) => { ctx.victim.forward(OTHER.tokens, { hooks: ['blocks.1.attn.hook_pattern'] }); },
  // Loading the weights it has (the optimizer's state survives a load).
  load: (ctx) => ctx.victim.loadStateDict(STATE),
};
const TRICKS = ['getters', 'changing-getters', 'proxy-object', 'proxy-shape', 'nested-proxy-rows', 'lying-length',
  'lying-small', 'proxy-typed-array', 'detached', 'throwing-getter', 'revoked', 'revoked-shape', 'symbol-shape',
  'valueOf-shape', 'toPrimitive-element', 'toString-element', 'nan-size', 'fractional-size', 'size-2^53',
  'negative-zero-size', 'huge-shape', 'shape-lies', 'huge-sparse', 'sparse', 'shared-buffer'];
const asTensor = (rows) => ({ data: Int32Array.from(rows.flat()), shape: [rows.length, rows[0].length] });
const SLOTS = {
  'backward tokens': { argument: 'tokens', base: asTensor(TOKENS), run: (m, v) => m.backward(v, TARGETS, { headGateGrads: true }), step: false },
  'backward targets': { argument: 'targets', base: asTensor(TARGETS), run: (m, v) => m.backward(TOKENS, v, { headGateGrads: true }), step: false },
  'trainStep tokens': { argument: 'tokens', base: asTensor(TOKENS), run: (m, v) => m.trainStep(v, TARGETS), step: true },
  'trainStep targets': { argument: 'targets', base: asTensor(TARGETS), run: (m, v) => m.trainStep(TOKENS, v), step: true },
};

function runOne(trick, slotName, callback) {
  const slot = SLOTS[slotName];
  const victim = freshVictim();
  const ctx = { victim, reads: {}, callback: CALLBACKS[callback], coerced: false };
  const heapBefore = hs.memory().heapInUse;
  const { value, expect } = hostileTensor(trick, ctx, slot.base);
  const what = `${trick} in ${slotName}, callback ${callback}`;
  let result;
  let error;
  try {
    result = slot.run(victim, value);
  } catch (e) {
    error = e;
  }
  if (error !== undefined) {
    assert.ok(error instanceof HeadscopeError, `${what}: ${error?.stack ?? error}`);
    // (tokens of another shape than the targets are the targets' mismatch: either may be named.)
    const named = error.code === 'SHAPE_MISMATCH' && slot.argument === 'tokens' ? /^(tokens|targets)/ : new RegExp(`^${slot.argument}`);
    if (error.code !== 'DISPOSED') assert.match(error.message, named, `${what}: does not name ${slot.argument}`);
  }
  assert.equal(ctx.coerced, false, `${what}: a caller value was coerced`);
  for (const [k, n] of Object.entries(ctx.reads)) assert.equal(n, 1, `${what}: ${k} read ${n} times`);
  const disposedByCallback = callback === 'dispose' && Object.keys(ctx.reads).length > 0;
  if (disposedByCallback && expect === 'ok') {
    assert.equal(error?.code, 'DISPOSED', `${what}: a call whose model a getter disposed`);
  } else if (expect === 'ok') {
    assert.equal(error, undefined, `${what}: ${error?.message}`);
    if (slot.step) {
      assert.deepEqual(result, WANT.step, what);
      assertSameResultBits(victim.stateDict(), WANT.stepped, `${what}: stepped weights`);
    } else {
      assertSameResultBits(result, WANT.backward, what);
    }
  } else if (disposedByCallback) {
    assert.ok([expect, 'DISPOSED'].includes(error?.code), `${what}: ${error?.message}`);
  } else {
    assert.equal(error?.code, expect, `${what}: ${error?.message}`);
  }
  if (!victim.disposed) {
    if (error !== undefined || !slot.step) {
      // Nothing changed: the weights, the step count; the model trains as the reference did.
      assertSameResultBits(victim.stateDict(), WANT.state, `${what}: weights`);
      assert.equal(victim.optimizerSteps, 0, `${what}: optimizerSteps`);
      assert.deepEqual(victim.trainStep(TOKENS, TARGETS), WANT.step, `${what}: the step after`);
      assertSameResultBits(victim.stateDict(), WANT.stepped, `${what}: after`);
    } else {
      assert.equal(victim.optimizerSteps, 1);
    }
  } else {
    expectError(() => victim.trainStep(TOKENS, TARGETS), 'DISPOSED');
  }
  victim.dispose();
  assert.ok(hs.memory().heapInUse <= heapBefore, `${what}: heap grew from ${heapBefore} to ${hs.memory().heapInUse}`);
}

test('hostile tensors as tokens and targets of backward and trainStep, with re-entrant getters: a clear error ' +
  'or the first read\'s numbers; read once; nothing changed by a refused call; the heap unharmed', () => {
  const live = hs.liveHandles();
  runOne('getters', 'trainStep tokens', 'none');
  let runs = 0;
  for (const trick of TRICKS) {
    for (const slot of Object.keys(SLOTS)) {
      for (const callback of Object.keys(CALLBACKS)) {
        runOne(trick, slot, callback);
        runs++;
      }
    }
  }
  assert.equal(runs, TRICKS.length * 4 * 5);
  assert.equal(hs.liveHandles(), live);
});

test('setOptimizer and backward options: getters read once, Proxies, throwing and disposing getters', () => {
  const m = freshVictim();
  const twin = freshVictim();
  try {
    // Getters of every option but type (below) read once, even when they would answer otherwise later.
    const reads = {};
    const read = (k, first, later) => () => { reads[k] = (reads[k] ?? 0) + 1; return reads[k] === 1 ? first : later; };
    const o = { type: 'adamw' };
    for (const [k, first, later] of [['lr', 1e-2, NaN], ['betas', [0.9, 0.98], 'no'], ['eps', 1e-8, 0], ['weightDecay', 0.05, -1],
      ['clipGradNorm', 1, -1]]) {
      Object.defineProperty(o, k, { enumerable: true, get: read(k, first, later) });
    }
    m.setOptimizer(o);
    for (const [k, n] of Object.entries(reads)) assert.equal(n, 1, `options.${k} read ${n} times`);
    twin.setOptimizer(ADAMW);
    assert.deepEqual(m.trainStep(TOKENS, TARGETS), twin.trainStep(TOKENS, TARGETS), 'the first reads\' optimizer');
    assertSameResultBits(m.stateDict(), twin.stateDict());
    // betas' elements and length read once; a Proxy of betas.
    const betaReads = {};
    const betas = new Proxy([0.9, 0.98], { get(t, k) { betaReads[String(k)] = (betaReads[String(k)] ?? 0) + 1; return t[k]; } });
    m.setOptimizer({ ...ADAMW, betas });
    for (const [k, n] of Object.entries(betaReads)) assert.equal(n, 1, `options.betas ${k} read ${n} times`);
    twin.setOptimizer(ADAMW);
    assert.deepEqual(m.trainStep(TOKENS, TARGETS), twin.trainStep(TOKENS, TARGETS));
    // backward's options: a Proxy, each key read once.
    const gets = {};
    const r = m.backward(TOKENS, TARGETS, new Proxy({ headGateGrads: true, headGates: null }, {
      get(t, k) { gets[String(k)] = (gets[String(k)] ?? 0) + 1; return t[k]; } }));
    for (const [k, n] of Object.entries(gets)) assert.equal(n, 1, `backward options.${k} read ${n} times`);
    assertSameResultBits(r, twin.backward(TOKENS, TARGETS, { headGateGrads: true }));
    let hgReads = 0;
    m.backward(TOKENS, TARGETS, { get headGateGrads() { hgReads++; return hgReads === 1; } });
    assert.equal(hgReads, 1);
    // Getters that throw: INVALID_ARGUMENT naming what was being read, with the cause.
    for (const [call, fragment] of [
      [() => m.setOptimizer({ type: 'adamw', get lr() { throw new Error('boom'); } }), 'options: reading it threw (Error: boom)'],
      [() => m.setOptimizer({ get type() { throw new Error('boom'); } }), 'options: reading it threw (Error: boom)'],
      [() => m.setOptimizer({ type: 'adamw', betas: Object.defineProperty([0.9, 0.9], 1, { get() { throw new Error('boom'); } }) }),
        'options.betas: reading it threw (Error: boom)'],
      [() => m.backward(TOKENS, TARGETS, { get headGateGrads() { throw new Error('boom'); } }), 'options: reading it threw (Error: boom)'],
      [() => m.backward({ get data() { throw new Error('boom'); }, shape: [2, 5] }, TARGETS), 'tokens: reading it threw (Error: boom)'],
      [() => m.trainStep({ get data() { throw new Error('boom'); }, shape: [2, 5] }, TARGETS), 'tokens: reading it threw (Error: boom)'],
      [() => m.trainStep(TOKENS, { data: Int32Array.from(TARGETS.flat()), get shape() { throw new TypeError('no'); } }), 'targets: reading it threw (TypeError: no)'],
      [() => m.trainStep(TOKENS, [TARGETS[0], Object.defineProperty([...TARGETS[1]], 2, { get() { throw new Error('row'); } })]),
        'targets: reading it threw (Error: row)'],
    ]) {
      const e = expectError(call, 'INVALID_ARGUMENT', fragment);
      if (fragment.includes('reading it threw')) assert.ok(e.cause instanceof Error, fragment);
    }
    // Revoked Proxies.
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    for (const [call, name] of [[() => m.setOptimizer(proxy), 'options'], [() => m.setOptimizer({ type: 'adamw', betas: proxy }), 'options.betas'],
      [() => m.backward(TOKENS, TARGETS, proxy), 'options'], [() => m.backward(proxy, TARGETS), 'tokens'],
      [() => m.trainStep(TOKENS, proxy), 'targets']]) {
      const e = expectError(call, 'INVALID_ARGUMENT');
      assert.ok(e.message.startsWith(name), `${e.message} should name ${name}`);
    }
    // After all of that: m is twin, step for step.
    assertSameResultBits(m.stateDict(), twin.stateDict());
    assert.deepEqual(m.trainStep(TOKENS, TARGETS), twin.trainStep(TOKENS, TARGETS));
    // A getter that sets another optimizer and steps, from inside setOptimizer: the outer
    // optimizer is the one that stays (the inner step happened first).
    twin.setOptimizer({ type: 'adamw' });
    twin.trainStep(OTHER.tokens, OTHER.targets);
    twin.setOptimizer({ type: 'sgd', lr: 0.1 });
    m.setOptimizer({ type: 'sgd', get lr() { m.setOptimizer({ type: 'adamw' }); m.trainStep(OTHER.tokens, OTHER.targets); return 0.1; } });
    assert.equal(m.optimizerSteps, 0);
    assert.deepEqual(m.trainStep(TOKENS, TARGETS), twin.trainStep(TOKENS, TARGETS));
    assertSameResultBits(m.stateDict(), twin.stateDict(), 'the outer optimizer');
    // A tokens getter that runs a whole trainStep: the outer step is the second.
    twin.trainStep(OTHER.tokens, OTHER.targets);
    const outer = twin.trainStep(TOKENS, TARGETS);
    assert.deepEqual(m.trainStep({ get data() { m.trainStep(OTHER.tokens, OTHER.targets); return Int32Array.from(TOKENS.flat()); }, shape: [2, 5] },
      TARGETS), outer);
    assertSameResultBits(m.stateDict(), twin.stateDict(), 're-entrant trainStep');
    assert.equal(m.optimizerSteps, twin.optimizerSteps);
  } finally {
    m.dispose();
    twin.dispose();
  }
  // Getters that dispose the model mid-call: DISPOSED, and DISPOSED after.
  for (const [name, call] of [
    ['setOptimizer lr', (v) => v.setOptimizer({ type: 'adamw', get lr() { v.dispose(); return 1e-3; } })],
    ['setOptimizer betas', (v) => v.setOptimizer({ type: 'adamw', betas: Object.defineProperty([0.9, 0.9], 0, { get() { v.dispose(); return 0.9; } }) })],
    ['backward options', (v) => v.backward(TOKENS, TARGETS, { get headGateGrads() { v.dispose(); return true; } })],
    ['backward headGates', (v) => v.backward(TOKENS, TARGETS, { headGates: { get data() { v.dispose(); return new Float32Array(4).fill(1); }, shape: [2, 2] } })],
    ['backward targets', (v) => v.backward(TOKENS, { get data() { v.dispose(); return Int32Array.from(TARGETS.flat()); }, shape: [2, 5] })],
    ['trainStep tokens', (v) => v.trainStep({ get data() { v.dispose(); return Int32Array.from(TOKENS.flat()); }, shape: [2, 5] }, TARGETS)],
    ['trainStep targets', (v) => v.trainStep(TOKENS, [TARGETS[0], Object.defineProperty([...TARGETS[1]], 2, { get() { v.dispose(); return 7; } })])],
  ]) {
    const v = freshVictim();
    expectError(() => call(v), 'DISPOSED', 'Transformer: this object was disposed');
    assert.equal(v.disposed, true, name);
    for (const after of [() => v.trainStep(TOKENS, TARGETS), () => v.backward(TOKENS, TARGETS), () => v.setOptimizer(ADAMW), () => v.optimizerSteps]) {
      expectError(after, 'DISPOSED');
    }
  }
});

test('targets must have the tokens\' shape: (T) with (T), (B, T) with (B, T)', () => {
  const m = hs.createTransformer(CONFIG);
  try {
    m.setOptimizer(ADAMW);
    expectError(() => m.backward([1, 2, 3], [[2, 3, -100]]), 'SHAPE_MISMATCH', "targets: expected the tokens' shape [3], got [1, 3]");
    expectError(() => m.trainStep([[1, 2, 3]], [2, 3, -100]), 'SHAPE_MISMATCH', "targets: expected the tokens' shape [1, 3], got [3]");
    assert.ok(m.trainStep([1, 2, 3], [2, 3, -100]).stepped);
  } finally {
    m.dispose();
  }
});

test('setOptimizer reads options.type once', () => {
  const m = hs.createTransformer(CONFIG);
  try {
    let reads = 0;
    // Valid on its first read, throwing on any later one: accepted if read once.
    m.setOptimizer({ get type() { reads++; if (reads > 1) throw new Error('read twice'); return 'sgd'; }, lr: 0.1 });
    assert.equal(reads, 1);
    const gets = {};
    m.setOptimizer(new Proxy({ type: 'adamw', lr: 1e-2 }, { get(t, k) { gets[String(k)] = (gets[String(k)] ?? 0) + 1; return t[k]; } }));
    for (const [k, n] of Object.entries(gets)) assert.equal(n, 1, `options.${k} read ${n} times`);
  } finally {
    m.dispose();
  }
});

test('setOptimizer takes own options only (an inherited type is no type, as an inherited lr is no lr)', () => {
  const m = hs.createTransformer(CONFIG);
  try {
    expectError(() => m.setOptimizer(Object.create({ type: 'sgd', lr: 0.5 })), 'INVALID_ARGUMENT', 'options.type');
  } finally {
    m.dispose();
  }
});

test('training allocates nothing after its first step; maxCallBytes bounds backward and trainStep; dispose frees it all', () => {
  const heapAtStart = hs.memory().heapInUse;
  const task = makeTask('induction', { seqLen: 32, seed: 1 });
  const m = hs.createTransformer({ vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, seed: 1 });
  const limit = hs.maxCallBytes;
  try {
    m.setOptimizer({ type: 'adamw', clipGradNorm: 1 });
    const first = task.batch(16, 0);
    m.trainStep(first.tokens, first.targets);
    m.backward(first.tokens, first.targets, { headGateGrads: true });
    const before = hs.memory();
    for (let s = 1; s <= 50; s++) {
      const { tokens, targets } = task.batch(16, s);
      assert.ok(m.trainStep(tokens, targets).stepped);
      if (s % 10 === 0) m.backward(tokens, targets, { headGateGrads: true });
    }
    assert.deepEqual(hs.memory(), before, 'no allocation after the first step');
    // A call over the module's limit: RESOURCE_EXHAUSTED naming tokens, nothing changed.
    const w = m.stateDict();
    hs.maxCallBytes = 4096;
    for (const call of [() => m.backward(first.tokens, first.targets), () => m.trainStep(first.tokens, first.targets)]) {
      const e = expectError(call, 'RESOURCE_EXHAUSTED', 'tokens: buffers for (16, 32) tokens would exceed the limit of 4096 bytes');
      assert.equal(e.argument, 'tokens');
    }
    hs.maxCallBytes = limit;
    assertSameResultBits(m.stateDict(), w, 'nothing changed');
    assert.equal(m.optimizerSteps, 51);
    assert.ok(m.trainStep(first.tokens, first.targets).stepped);
  } finally {
    hs.maxCallBytes = limit;
    m.dispose();
  }
  assert.equal(hs.memory().heapInUse, heapAtStart, 'the gradients and moments are freed with the model');
});

test('maxCallBytes bounds what one backward allocates, the attention layers\' buffers included', () => {
  // An attention-heavy shape (16 heads of dim 1, T 128: the [B, H, T, T] weights dominate). For a
  // limit a backward accepts, the heap grows by at most that limit; below the smallest accepted
  // limit the call is RESOURCE_EXHAUSTED.
  const config = { vocabSize: 7, maxLen: 128, dModel: 16, nLayers: 2, nHeads: 16, seed: 1 };
  const tokens = { data: new Int32Array(2 * 128).map((_, i) => i % 7), shape: [2, 128] };
  const targets = { data: new Int32Array(2 * 128).map((_, i) => (i * 3) % 7), shape: [2, 128] };
  const saved = hs.maxCallBytes;
  const attempt = (limit) => {
    const m = hs.createTransformer(config);
    try {
      m.forward(tokens);  // weights packed and forward buffers sized before the measurement
      const h0 = hs.memory().heapInUse;
      hs.maxCallBytes = limit;
      try {
        m.backward(tokens, targets);
      } catch (e) {
        assert.equal(e.code, 'RESOURCE_EXHAUSTED');
        return null;
      } finally {
        hs.maxCallBytes = saved;
      }
      return hs.memory().heapInUse - h0;
    } finally {
      m.dispose();
    }
  };
  let lo = 1 << 16;
  let hi = 1 << 27;
  assert.equal(attempt(lo), null);
  const grown = attempt(hi);
  assert.ok(grown !== null && grown <= hi);
  while (hi - lo > 1 << 14) {
    const mid = Math.floor((lo + hi) / 2);
    const g = attempt(mid);
    if (g === null) lo = mid;
    else {
      assert.ok(g <= mid, `a backward under a limit of ${mid} bytes grew the heap by ${g}`);
      hi = mid;
    }
  }
});

// ---- Determinism ----

// 20 steps of the induction task on `h`'s model; every step's result and the final weights.
function twentySteps(h, config, optimizer, batch) {
  const task = makeTask('induction', { seqLen: config.maxLen, seed: 2 });
  const m = h.createTransformer(config);
  try {
    m.setOptimizer(optimizer);
    const results = [];
    for (let s = 0; s < 20; s++) {
      const { tokens, targets } = task.batch(batch, s);
      results.push(m.trainStep(tokens, targets));
    }
    return { results, state: m.stateDict() };
  } finally {
    m.dispose();
  }
}

test('the same seed and batches give bit-identical weights after 20 steps, in two fresh models', (t) => {
  const config = { vocabSize: 28, maxLen: 32, dModel: 32, nLayers: 2, nHeads: 2, seed: 11 };
  for (const optimizer of [{ type: 'adamw', lr: 3e-3, clipGradNorm: 1 }, { type: 'sgd', lr: 0.1, clipGradNorm: 0.5 }]) {
    const a = twentySteps(hs, config, optimizer, 8);
    const b = twentySteps(hs, config, optimizer, 8);
    assert.deepEqual(a.results, b.results);
    assertSameResultBits(a.state, b.state, `${optimizer.type}: weights after 20 steps`);
    assert.ok(a.results.every((r) => r.stepped));
    assert.ok(a.results[19].loss < a.results[0].loss, `${optimizer.type}: it learns something`);
    t.diagnostic(`${optimizer.type}: loss ${a.results[0].loss.toFixed(4)} -> ${a.results[19].loss.toFixed(4)} in 20 steps`);
  }
});

test('the 2-thread module trains bit for bit as the single-threaded one (20 steps, threaded sizes)', async (t) => {
  if (typeof SharedArrayBuffer === 'undefined') {
    t.skip('no SharedArrayBuffer: the threaded module cannot load');
    return;
  }
  const mt = await init({ threads: 2 });
  assert.equal(mt.threads, 2);
  // Past the threaded paths' thresholds: projections of >= 100k multiply-adds, B x H >= 2.
  const config = { vocabSize: 50, maxLen: 64, dModel: 128, nLayers: 2, nHeads: 4, dMlp: 512, seed: 9 };
  const optimizer = { type: 'adamw', lr: 3e-3, clipGradNorm: 1 };
  const started = performance.now();
  const a = twentySteps(hs, config, optimizer, 4);
  const single = performance.now() - started;
  const b = twentySteps(mt, config, optimizer, 4);
  const threaded = performance.now() - started - single;
  assert.deepEqual(b.results, a.results);
  assertSameResultBits(b.state, a.state, 'weights after 20 steps, threaded vs single');
  assert.equal(mt.liveHandles(), 0);
  t.diagnostic(`20 steps: single-threaded ${single.toFixed(0)} ms, 2 threads ${threaded.toFixed(0)} ms; ` +
    `loss ${a.results[0].loss.toFixed(4)} -> ${a.results[19].loss.toFixed(4)}`);
});
