// docs/experiments.md cannot drift from the experiments (issue 31): its tables are what
// tools/whatif.mjs renders from the committed docs/experiments-results.json, and those results are
// of the experiments EXPERIMENTS plans now; no training here. tests/browser/whatif.test.js reruns
// the sinks table (the cheapest whole one; its "no sinks" runs are a row of three more tables) in
// the page against the committed runs; `node tools/whatif.mjs --check` reruns them all
// (docs/experiments.md says when).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { EXPERIMENTS, planExperiment } from '../../web/lib/experiments.js';
import { differences, DOC_PATH, experimentRecord, loadResults, planDifferences, prose, renderDoc, resultOfRecord, runRecord, sameRun } from '../../tools/whatif.mjs';

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
    const [first, ...rest] = g.map(({ name, k }) => { const { variant, ...run } = results.experiments[name].runs[k]; return run; });
    for (const r of rest) assert.ok(sameRun(first, r), JSON.stringify([first, r]));
  }
});

// The rerun itself is tests/browser/whatif.test.js's: the sinks table run in the page's Workers,
// compared by sameRun with the committed runs (one fresh run of a whole table in the suite, not
// two). Here: what differences() and sameRun see, without training.
test('differences: a change inside a curve is seen, an ulp of a loss is not, a record round-trips', () => {
  const sinks = results.experiments.sinks;
  assert.deepEqual(differences('sinks', sinks, structuredClone(sinks)), []);
  const tweaked = (f) => { const t = structuredClone(sinks); f(t.runs[4].curve[3], t.runs[4]); return differences('sinks', sinks, t); };
  assert.match(tweaked((p) => { p[2] *= 1 + 1e-9; }).join('\n'), /run 5 \(attention sinks, seed 2\).*the curves differ/);
  assert.equal(tweaked((p) => { p[3] += 1 / 64; }).length, 1, 'an accuracy is exact');
  assert.equal(tweaked((p, run) => { run.finalAccuracy -= 1 / 64; }).length, 1);
  assert.deepEqual(tweaked((p, run) => { p[2] *= 1 + 2 ** -52; run.ms += 1000; }), [], 'an ulp of a loss, and the time, are not a difference');
  const fewer = structuredClone(sinks);
  fewer.runs.pop();
  assert.match(differences('sinks', sinks, fewer).join('\n'), /6 runs committed, 5 now/);
  // The record round trip keeps every number (step 0's NaN training loss included).
  const again = resultOfRecord(sinks).runs.map(runRecord);
  assert.ok(Number.isNaN(resultOfRecord(sinks).runs[0].curve[0].trainLoss));
  assert.deepEqual(again, sinks.runs);
  assert.equal(experimentRecord(resultOfRecord(sinks), { seconds: 1, machine: 'x' }).runs.length, 6);
});
