// docs/experiments.md cannot drift from the experiments (issue 31): its tables are what
// tools/whatif.mjs renders from the committed docs/experiments-results.json, those results are of
// the experiments EXPERIMENTS plans now, and a fresh run of the sinks experiment (the cheapest
// whole table; its "no sinks" runs are a row of three more tables) gives the committed bits. The
// other tables are rerun by `node tools/whatif.mjs --check` (docs/experiments.md says when).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { initWorker } from '../../web/lib/index.js';
import { EXPERIMENTS, planExperiment, runExperiment } from '../../web/lib/experiments.js';
import { differences, DOC_PATH, experimentRecord, loadResults, planDifferences, prose, renderDoc, resultOfRecord, runRecord } from '../../tools/whatif.mjs';

const doc = readFileSync(DOC_PATH, 'utf8');
const results = loadResults();

test('docs/experiments.md is what the committed results render, and its prose quotes no number', () => {
  assert.equal(renderDoc(doc, results), doc, 'run node tools/whatif.mjs --render (or --write) and commit the doc');
  for (const name of Object.keys(EXPERIMENTS)) {
    assert.match(doc, new RegExp(`<!-- whatif:begin ${name} [^\\n]*-->\\n\`EXPERIMENTS\\['${name}'\\]\`[^]*?\\n\\| [^]*?<!-- whatif:end ${name} -->`), `${name}: a table`);
  }
  // A hand edit inside a block is overwritten by the render, so it fails the check above.
  const edited = doc.replace('| 1 | 64 |', '| 1 | 64 | 0.1% |');
  assert.notEqual(renderDoc(edited, results), edited);
  // Numbers live in the blocks only: the prose reads them in words (a digit there could go stale).
  const digits = [...prose(doc).matchAll(/.{0,40}\d.{0,20}/g)].map((m) => m[0]);
  assert.deepEqual(digits, [], 'digits in the prose of docs/experiments.md');
  assert.throws(() => renderDoc(doc.replace(/<!-- whatif:begin sinks[^]*?<!-- whatif:end sinks -->/, ''), results), /lacks the blocks sinks/);
});

test('the committed results are of the experiments as EXPERIMENTS plans them now', () => {
  assert.deepEqual(Object.keys(results.experiments), Object.keys(EXPERIMENTS));
  for (const name of Object.keys(EXPERIMENTS)) {
    assert.deepEqual(planDifferences(name, results.experiments[name]), []);
    const { runs } = planExperiment(EXPERIMENTS[name]);
    assert.deepEqual(results.experiments[name].runs.map((r) => [r.variant ?? null, r.heads, r.seed]),
      runs.map((r) => [r.variant ?? null, r.heads, r.seed]), `${name}: one run per planned run, in order`);
  }
  // A changed setup is seen without training.
  const changed = structuredClone(results.experiments.sinks);
  changed.options.steps += 1;
  assert.equal(planDifferences('sinks', changed).length, 1);
});

// The same model config, task and seed in two experiments: the same run, so the same bits. (Each
// variants experiment's first row is the induction table's 8-head row.)
test('runs that several tables share are the same bits in each', () => {
  const key = (r) => JSON.stringify([r.model, r.task]);
  const all = Object.keys(EXPERIMENTS).flatMap((name) => planExperiment(EXPERIMENTS[name]).runs.map((run, k) => ({ name, run, k })));
  const groups = new Map();
  for (const x of all) groups.set(key(x.run), [...(groups.get(key(x.run)) ?? []), x]);
  const shared = [...groups.values()].filter((g) => g.length > 1);
  assert.equal(shared.length, 3, 'the 8-head induction runs, one per seed');
  assert.deepEqual(shared.map((g) => g.map(({ name }) => name)), Array(3).fill(['induction', 'kv-heads', 'positions', 'sinks']));
  for (const g of shared) {
    const [first, ...rest] = g.map(({ name, k }) => { const { ms, variant, ...bits } = results.experiments[name].runs[k]; return bits; });
    for (const r of rest) assert.deepEqual(r, first);
  }
});

test('a fresh run of the sinks experiment gives the committed results, bit for bit', { timeout: 300_000 }, async () => {
  // Two Workers side by side (the SIMD128 build, as tools/whatif.mjs and the page use).
  const engines = await Promise.all([0, 1].map(() => initWorker(undefined, { simd: 'simd128' })));
  try {
    const fresh = experimentRecord(await runExperiment(engines, EXPERIMENTS.sinks), { seconds: 0, machine: 'test' });
    assert.deepEqual(differences('sinks', results.experiments.sinks, fresh), []);
  } finally {
    for (const e of engines) await e.terminate();
  }
  // differences() sees a changed bit of a curve, not only of the final numbers.
  const tweaked = structuredClone(results.experiments.sinks);
  tweaked.runs[4].curve[3][2] += 2 ** -40;
  assert.match(differences('sinks', results.experiments.sinks, tweaked).join('\n'), /run 5 \(attention sinks, seed 2\).*the curves differ/);
  // The record round trip keeps every number (step 0's NaN training loss included).
  const again = resultOfRecord(results.experiments.sinks).runs.map(runRecord);
  assert.deepEqual(again.map(({ ms, ...r }) => r), results.experiments.sinks.runs.map(({ ms, ...r }) => r));
});
