// The Train view's training history (web/views/train/history.js), its rate meter (rate.js) and
// its view fields in the state and the URL (off, log), in Node: first labels by the heads grid's
// rule, the phase-change rule on a real induction run and on made-up curves, the memory cap's
// thinning (what it keeps), and the rate over the last second.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { init } from '../../web/lib/index.js';
import { makeTask } from '../../web/lib/tasks.js';
import { headScores } from '../../web/lib/detectors.js';
import { createHistory, phaseChange, PHASE } from '../../web/views/train/history.js';
import { headLabel, LABEL_THRESHOLD } from '../../web/views/train/detectors.js';
import { createRateMeter } from '../../web/views/train/rate.js';
import { applyTrainState, defaultTrainState, trainSetup } from '../../web/views/train/state.js';
import { decodeTrainState, encodeTrainState } from '../../web/views/train/url-state.js';

// A layer's scores for H heads, every detector at `base` but the ones given ({ induction: [..] }).
const layerScores = (H, given = {}, base = 0.05) => Object.fromEntries(['previous-token', 'first-token', 'same-token', 'induction']
  .map((d) => [d, given[d] ?? new Array(H).fill(base)]));
const record = (step, loss, scores, patterns = null) => ({ step, trainLoss: loss, heldOutLoss: loss, accuracy: 0, scores, patterns });

test('headLabel: the highest detector above 0.4, the earlier one on a tie, none at 0.4', () => {
  assert.equal(headLabel(layerScores(2, { induction: [0.41, 0.4] }), 0), 'induction');
  assert.equal(headLabel(layerScores(2, { induction: [0.41, 0.4] }), 1), null, 'exactly the threshold is no label');
  assert.equal(headLabel(layerScores(1, { 'previous-token': [0.6], induction: [0.6] }), 0), 'previous-token');
  assert.equal(headLabel(layerScores(1, { 'same-token': [0.5], induction: [0.7] }), 0), 'induction');
  assert.equal(LABEL_THRESHOLD, 0.4);
});

test('history: each head\'s first step with each label, and the record before it', () => {
  const h = createHistory();
  const steps = [[0, [0.1, 0.1]], [25, [0.3, 0.45]], [50, [0.5, 0.2]], [75, [0.55, 0.5]]];
  for (const [step, induction] of steps) h.add(record(step, 1, [layerScores(2), layerScores(2, { induction })]));
  assert.deepEqual(h.firsts(), [
    { layer: 1, head: 2, detector: 'induction', step: 25, before: 0 },
    { layer: 1, head: 1, detector: 'induction', step: 50, before: 25 },
  ]);
  // A record at a step not after the last one is a new run: the history starts again.
  h.add(record(0, 1, [layerScores(2), layerScores(2)]));
  assert.equal(h.records().length, 1);
  assert.deepEqual(h.firsts(), []);
});

test('phaseChange: the steepest fall of the smoothed held-out loss after step 50, only when sharp', () => {
  // A plateau, a cliff between 300 and 325, a plateau: found, whether evaluated every 25 or every step.
  const cliff = (s) => (s < 300 ? 3 - s / 1000 : s < 325 ? 2.7 - (2.2 * (s - 300)) / 25 : 0.5);
  for (const every of [25, 1]) {
    const recs = [];
    for (let s = 0; s <= 600; s += every) recs.push(record(s, cliff(s), []));
    const p = phaseChange(recs);
    assert.ok(p && p.from >= 290 && p.to <= 335, `every ${every}: ${JSON.stringify(p)}`);
  }
  // The first fall from the initial guess is left out; a steady fall is no phase change.
  const early = [];
  for (let s = 0; s <= 600; s += 25) early.push(record(s, s <= 25 ? 4 - s / 10 : 1.5 - s / 2000, []));
  assert.equal(phaseChange(early), null, 'a fall before step 50 and then a steady one');
  const rising = [0, 100, 200, 300].map((s) => record(s, 1 + s / 100, []));
  assert.equal(phaseChange(rising), null);
  assert.equal(phaseChange([record(0, 3, []), record(100, 1, [])]), null, 'too few records');
  assert.deepEqual(PHASE, { window: 25, skip: 50, factor: 3 });
});

test('history: past the budget every second older record drops its patterns; first labels, the record before them, the first, the last and the pinned one keep theirs', () => {
  const bytes = 1024;                           // one record's patterns
  const h = createHistory({ budget: 10 * bytes });
  const pattern = () => [new Float32Array(bytes / 4)];
  for (let k = 0; k <= 40; k++) {
    const induction = [k >= 17 ? 0.5 : 0.1];
    if (k === 5) h.pin(5 * 25);
    h.add(record(k * 25, 1, [layerScores(1, { induction })], pattern()));
  }
  const kept = h.records().filter((r) => r.patterns).map((r) => r.step);
  assert.ok(h.bytes() <= 10 * bytes, `${h.bytes()} bytes kept`);
  assert.equal(h.bytes(), kept.length * bytes, 'the count is the kept arrays\' bytes');
  for (const step of [0, 16 * 25, 17 * 25, 40 * 25, 5 * 25]) assert.ok(kept.includes(step), `step ${step} kept: ${kept}`);
  assert.equal(h.records().length, 41, 'every record keeps its scores');
  // The patterns are copies: the caller's arrays may be reused.
  const source = [new Float32Array([1, 2])];
  const g = createHistory();
  g.add(record(0, 1, [layerScores(1)], source));
  source[0][0] = 9;
  assert.equal(g.at(0).patterns[0][0], 1);
});

test('history: past MAX_RECORDS every second older record goes, its first labels stay', () => {
  const h = createHistory({ maxRecords: 50 });
  for (let k = 0; k < 200; k++) h.add(record(k, 1, [layerScores(1, { induction: [k >= 120 ? 0.5 : 0.1] })]));
  assert.ok(h.records().length <= 50 + 1 && h.records().length >= 25, `${h.records().length} records`);
  assert.deepEqual(h.firsts(), [{ layer: 0, head: 1, detector: 'induction', step: 120, before: 119 }]);
  assert.ok(h.at(120) && h.at(119) && h.at(0) && h.at(199));
});

test('history on a real run: the induction preset\'s L1 heads get "induction" after the phase change starts', async () => {
  const hs = await init({ simd: 'simd128' });
  const s = defaultTrainState();
  const task = makeTask(s.task, { seed: s.seed });
  const setup = trainSetup(s, task);
  const m = hs.createTransformer(setup.model);
  const held = task.heldOut(64, 0);
  const hooks = ['blocks.0.attn.hook_pattern', 'blocks.1.attn.hook_pattern'];
  const h = createHistory();
  try {
    m.setOptimizer(setup.optimizer);
    for (let k = 0; k <= 450; k++) {
      if (k % 25 === 0) {
        const r = m.forward(held.tokens, { hooks });
        const e = task.evaluate(r.logits, held.targets);
        h.add({ step: k, trainLoss: NaN, heldOutLoss: e.loss, accuracy: e.accuracy, scores: hooks.map((x) => headScores(r.hooks[x], held.tokens)), patterns: null });
      }
      const { tokens, targets } = task.batch(s.batch, k);
      m.trainStep(tokens, targets);
    }
  } finally {
    m.dispose();
  }
  const change = h.phaseChange();
  const induction = h.firsts().filter((f) => f.layer === 1 && f.detector === 'induction');
  console.log(`# phase change ${change?.from}-${change?.to}; L1 induction firsts ${induction.map((f) => `H${f.head}@${f.step}`).join(' ')}`);
  assert.ok(change, 'a phase change');
  assert.equal(induction.length, 2, 'both L1 heads become induction heads');
  for (const f of induction) {
    assert.ok(f.step >= change.from && f.step <= change.to + 100, `${JSON.stringify(f)} near ${JSON.stringify(change)}`);
    assert.ok(h.at(f.before).scores[1].induction[f.head - 1] <= 0.4, 'the record before has no induction label');
  }
});

test('rate: steps over the last second of wall-clock time, from a run\'s start', () => {
  const r = createRateMeter(1000);
  r.start(0, 100);
  assert.equal(r.add(500, 125), 50, 'half a second, 25 steps');
  assert.equal(r.add(1000, 150), 50);
  // Chunks of 25 every 100 ms for 2 s, then one slow chunk: the rate moves a little, not 20x.
  let now = 1000;
  let step = 150;
  for (let k = 0; k < 20; k++) r.add(now += 100, step += 25);
  assert.ok(Math.abs(r.add(now += 100, step += 25) - 250) < 30);
  const slow = r.add(now += 1500, step += 25);
  assert.ok(slow > 10 && slow < 250, `${slow}`);
  r.stop();
  assert.equal(r.add(9000, 1000), 0, 'a stopped meter starts again');
});

test('state: off and log round-trip through the URL, are left out at their defaults, and bad ones are named', () => {
  const base = defaultTrainState();
  const s = applyTrainState({ off: [[1, 2], [0, 1]], log: true }, base);
  assert.deepEqual(s.off, [[0, 1], [1, 2]], 'sorted');
  assert.match(encodeTrainState(s), /&steps=0&off=0\.1%2C1\.2&log=1$/);
  assert.deepEqual(applyTrainState(decodeTrainState(encodeTrainState(s)), base), s);
  assert.doesNotMatch(encodeTrainState(base), /off|log/);
  // A view field keeps the model; a new setup switches every head back on.
  assert.deepEqual(applyTrainState({ lr: 0.01 }, s).off, []);
  assert.deepEqual(applyTrainState({ steps: 30 }, s).off, s.off);
  for (const [query, message] of [
    ['off=2.1', /state\.off\[0\]: expected a head "layer\.head" of 2 layers \(0 to 1\) x 2 heads \(1 to 2\), got 2\.1/],
    ['off=1.0', /state\.off\[0\]: expected a head .* got 1\.0/],
    ['off=x', /state\.off\[0\]: expected a head .* got "x"/],
    ['off=1.1,1.1', /state\.off\[1\]: L1 H1 is given twice/],
    ['log=yes', /state\.log: expected true or false, got "yes"/],
  ]) assert.throws(() => applyTrainState(decodeTrainState(query), base), message, query);
});
