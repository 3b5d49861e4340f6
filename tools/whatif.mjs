#!/usr/bin/env node
// The seeds' what-if experiments, measured; docs/experiments.md's tables are this tool's output:
//   node tools/whatif.mjs                       every experiment of EXPERIMENTS: prints the tables
//   node tools/whatif.mjs --experiment sinks     one of them (log-line, induction, kv-heads,
//                                                positions, sinks)
//   node tools/whatif.mjs --write                runs them, stores the runs in
//                                                docs/experiments-results.json and rewrites the
//                                                tables of docs/experiments.md (between its
//                                                whatif markers) from that file
//   node tools/whatif.mjs --check                runs them and fails (exit 1) when a run's numbers
//                                                differ from the committed results (the times
//                                                aside) or the doc from what those render
//   node tools/whatif.mjs --render               no training: rewrites the doc's tables from the
//                                                committed results (after a change of wording)
//   node tools/whatif.mjs --workers 2 --json    runs side by side in 2 Workers; JSON instead of tables
// The same seeds give the same numbers on every run and machine (the times differ), so --check
// passes on any machine until training changes. Needs the built package (npm run build).
// tests/js/experiments-doc.test.js imports the functions below: it checks the doc against the
// committed results and reruns one table (docs/experiments.md, "How these tables are made").
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { IGNORE_INDEX } from '../web/lib/case.js';
import { describeResult, EXPERIMENTS, formatTable, planExperiment, runExperiment, summarize } from '../web/lib/experiments.js';
import { makeTask } from '../web/lib/tasks.js';

export const DOC_PATH = fileURLToPath(new URL('../docs/experiments.md', import.meta.url));
export const RESULTS_PATH = fileURLToPath(new URL('../docs/experiments-results.json', import.meta.url));
const NOTE = 'Written by node tools/whatif.mjs --write; docs/experiments.md\'s tables are rendered from it. ' +
  'The accuracies and losses are exact (fixed seeds; the SIMD128 build); ms, seconds and machine are the writing run\'s.';

// ---- The results file: one record per experiment, one line per run ----

/** A run as the results file keeps it: each curve point [step, trainLoss, heldOutLoss, accuracy] (JSON has no NaN: step 0's trainLoss is null). */
export function runRecord(r) {
  return { heads: r.heads, headDim: r.headDim, ...(r.variant ? { variant: r.variant } : {}), seed: r.seed,
    finalAccuracy: r.finalAccuracy, finalLoss: r.finalLoss, ms: Math.round(r.ms), ...(r.refused ? { refused: r.refused } : {}),
    curve: r.curve.map((p) => [p.step, Number.isNaN(p.trainLoss) ? null : p.trainLoss, p.heldOutLoss, p.accuracy]) };
}

/** The run of a record, as runExperiment returns it (what formatTable, describeResult and the page's chart read). */
export function runOfRecord(x) {
  return { ...x, curve: x.curve.map(([step, trainLoss, heldOutLoss, accuracy]) => ({ step, trainLoss: trainLoss ?? NaN, heldOutLoss, accuracy })) };
}

/** An experiment's record: its planned options, its runs, and where and how long it ran. */
export function experimentRecord(result, { seconds, machine }) {
  return { options: result.options, machine, seconds: Math.round(seconds), runs: result.runs.map(runRecord) };
}

/** runExperiment's result from a record: { options, runs, rows }. */
export function resultOfRecord(record) {
  const runs = record.runs.map(runOfRecord);
  return { options: record.options, runs, rows: summarize(runs) };
}

export function loadResults(path = RESULTS_PATH) {
  return JSON.parse(readFileSync(path, 'utf8'));
}

/** The results file's text: experiments in EXPERIMENTS' order, one line per run, so a diff shows which runs changed. */
export function serializeResults(results) {
  const names = Object.keys(EXPERIMENTS).filter((n) => n in results.experiments);
  const lines = ['{', `  "note": ${JSON.stringify(NOTE)},`, '  "experiments": {'];
  names.forEach((name, i) => {
    const { runs, ...rest } = results.experiments[name];
    lines.push(`    ${JSON.stringify(name)}: {`);
    for (const [k, v] of Object.entries(rest)) lines.push(`      ${JSON.stringify(k)}: ${JSON.stringify(v)},`);
    lines.push('      "runs": [', ...runs.map((r, j) => `        ${JSON.stringify(r)}${j < runs.length - 1 ? ',' : ''}`), '      ]');
    lines.push(`    }${i < names.length - 1 ? ',' : ''}`);
  });
  lines.push('  }', '}', '');
  return lines.join('\n');
}

// JSON with sorted keys: equal values, equal text, whatever order the keys were written in.
const canon = (x) => JSON.stringify(x, (k, v) => (v && typeof v === 'object' && !Array.isArray(v)
  ? Object.fromEntries(Object.keys(v).sort().map((key) => [key, v[key]])) : v));

/**
 * The relative difference two losses may have and be the same measurement. The engine's numbers
 * are the same bits everywhere (the SIMD128 build), and so are the accuracies (counts of argmaxes),
 * but the held-out loss is computed by task.evaluate in JavaScript, whose Math.exp and Math.log
 * may differ in the last bit between JavaScript engines (Node 20's and Chromium's do, by an ulp).
 */
export const LOSS_TOLERANCE = 1e-12;

const close = (a, b) => a === b || (Number.isFinite(a) && Number.isFinite(b) && Math.abs(a - b) <= LOSS_TOLERANCE * Math.max(Math.abs(a), Math.abs(b)));

/** Are two run records the same measurement? The times aside, everything exact but the losses (LOSS_TOLERANCE). */
export function sameRun(c, f) {
  const { ms: _a, curve: cc, finalLoss: cl, ...cRest } = c;
  const { ms: _b, curve: fc, finalLoss: fl, ...fRest } = f;
  return canon(cRest) === canon(fRest) && close(cl, fl) && cc.length === fc.length &&
    cc.every(([step, train, held, acc], i) => step === fc[i][0] && close(train, fc[i][1]) && close(held, fc[i][2]) && acc === fc[i][3]);
}

/**
 * What differs between a committed record and a fresh one, in words (empty: the same): the options
 * and every run (sameRun), not the times (ms, seconds, machine), which depend on the machine.
 */
export function differences(name, committed, fresh) {
  if (!committed) return [`${name}: no committed results (run node tools/whatif.mjs --write --experiment ${name})`];
  const out = [];
  if (canon(committed.options) !== canon(fresh.options)) {
    out.push(`${name}: the experiment's options changed: committed ${canon(committed.options)}, now ${canon(fresh.options)}`);
  }
  if (committed.runs.length !== fresh.runs.length) out.push(`${name}: ${committed.runs.length} runs committed, ${fresh.runs.length} now`);
  committed.runs.forEach((c, k) => {
    const f = fresh.runs[k];
    if (f && !sameRun(c, f)) {
      out.push(`${name}: run ${k + 1} (${c.variant ?? `${c.heads} heads`}, seed ${c.seed}): committed accuracy ${c.finalAccuracy}, ` +
        `loss ${c.finalLoss}; now ${f.variant ?? `${f.heads} heads`}, seed ${f.seed}: accuracy ${f.finalAccuracy}, loss ${f.finalLoss}` +
        `${close(c.finalLoss, f.finalLoss) && c.finalAccuracy === f.finalAccuracy ? ' (the curves differ)' : ''}`);
    }
  });
  return out;
}

/** Does the committed record still describe EXPERIMENTS[name] (its planned options)? No training: a config change shows at once. */
export function planDifferences(name, committed) {
  const planned = planExperiment(EXPERIMENTS[name]).options;
  return committed && canon(committed.options) === canon(planned) ? []
    : [`${name}: EXPERIMENTS['${name}'] is not what the committed results ran (rerun node tools/whatif.mjs --write --experiment ${name})`];
}

// ---- The doc's generated blocks ----

const pct = (x) => `${(100 * x).toFixed(1)}%`;
const BLOCK = /<!-- whatif:begin ([\w-]+)[^>]*-->\n[\s\S]*?<!-- whatif:end \1 -->/g;
const begin = (id) => `<!-- whatif:begin ${id} (written by node tools/whatif.mjs from docs/experiments-results.json: edits here are overwritten) -->`;

/**
 * The floor a table's accuracies stand on: per seed, the share of the held-out targets that the
 * most common one takes (what always answering it scores), from the task itself (no training).
 */
export function majorityBaseline(options) {
  const { name, ...taskOptions } = options.task;
  return options.seeds.map((seed) => {
    const task = makeTask(name, { ...taskOptions, seed });
    const counts = new Map();
    let total = 0;
    for (const t of task.heldOut(options.evalRows, 0).targets.data) {
      if (t === IGNORE_INDEX) continue;
      counts.set(t, (counts.get(t) ?? 0) + 1);
      total++;
    }
    const [id, n] = [...counts].reduce((a, b) => (b[1] > a[1] || (b[1] === a[1] && b[0] < a[0]) ? b : a));
    return { token: task.vocab[id], share: n / total };
  });
}

function setupLine(name, o) {
  const base = majorityBaseline(o);
  const shares = base.map((b) => b.share);
  const tokens = [...new Set(base.map((b) => b.token))];
  const lo = Math.min(...shares), hi = Math.max(...shares);
  // The task's options but its seed (each run's seed replaces it).
  const taskOptions = Object.entries(o.task).filter(([k]) => k !== 'name' && k !== 'seed').map(([k, v]) => `${k} ${v}`).join(', ');
  return `\`EXPERIMENTS['${name}']\`: the ${o.task.name} task (${taskOptions}), dModel ${o.dModel}, ${o.nLayers} layers, ` +
    `${o.dMlp ? `MLP ${o.dMlp}` : 'attention only'}, ${o.variants ? `${o.heads[0]} heads, a row per variant` : `heads ${o.heads.join(', ')}`}, ` +
    `${o.steps} steps of ${o.batchSize} rows, seeds ${o.seeds.join(', ')}; held-out accuracy and loss on ${o.evalRows} rows, ` +
    `evaluated every ${o.evalEvery} steps for the curves. Always answering a seed's most common held-out target ` +
    `(${tokens.join(' or ')}) would score ${lo === hi ? pct(lo) : `${pct(lo)} to ${pct(hi)}`}.`;
}

function experimentBlock(name, record) {
  const result = resultOfRecord(record);
  return [setupLine(name, record.options), '', formatTable(result), '',
    `The verdict, as the Train view's "What if?" words it: ${describeResult(result)}`, '',
    `Time per run: the median over the seeds, measured by the run that wrote this table (${record.machine}; ` +
    `${record.seconds} s for the table). It depends on the machine and its load; the check ignores it.`].join('\n');
}

// What every experiment shares; an experiment that differs here needs its own words, so it is refused.
function setupBlock(results) {
  const records = Object.keys(EXPERIMENTS).map((n) => results.experiments[n]);
  const { optimizer: opt, norm, positions } = records[0].options;
  for (const r of records) {
    if (canon(r.options.optimizer) !== canon(opt) || r.options.norm !== norm || r.options.positions !== positions) {
      throw new Error('whatif: the experiments no longer share optimizer, norm and positions: say how in setupBlock');
    }
  }
  return `Every experiment: ${opt.type === 'adamw' ? 'AdamW' : opt.type} lr ${opt.lr}, betas (${opt.betas.join(', ')}), eps ${opt.eps}, ` +
    `weight decay ${opt.weightDecay}, gradient clipping at norm ${opt.clipGradNorm}; ${norm}-LayerNorm, ${positions} positions ` +
    '(unless a variant sets others), causal. Each seed seeds both the model\'s initial weights and the task\'s rows.';
}

function totalBlock(results) {
  const seconds = Object.values(results.experiments).reduce((a, r) => a + r.seconds, 0);
  const machines = [...new Set(Object.values(results.experiments).map((r) => r.machine))];
  return `The tables' times add up to about ${Math.round(seconds / 60)} minutes (${machines.join('; ')}).`;
}

/**
 * docs/experiments.md with every generated block rewritten from `results`: a block per experiment
 * of EXPERIMENTS, `setup` and `total`. Throws when one is missing or unknown (the doc and the
 * experiments must list the same ones); everything outside the blocks stays as written.
 */
export function renderDoc(doc, results) {
  const ids = ['setup', ...Object.keys(EXPERIMENTS), 'total'];
  const seen = new Set();
  const text = doc.replace(BLOCK, (_, id) => {
    if (!ids.includes(id)) throw new Error(`whatif: docs/experiments.md has a block "${id}", which is not one of ${ids.join(', ')}`);
    if (!results.experiments[id] && id !== 'setup' && id !== 'total') throw new Error(`whatif: no results for "${id}"`);
    seen.add(id);
    const body = id === 'setup' ? setupBlock(results) : id === 'total' ? totalBlock(results) : experimentBlock(id, results.experiments[id]);
    return `${begin(id)}\n${body}\n<!-- whatif:end ${id} -->`;
  });
  const missing = ids.filter((id) => !seen.has(id));
  if (missing.length) throw new Error(`whatif: docs/experiments.md lacks the blocks ${missing.join(', ')} (${begin('NAME')} ... <!-- whatif:end NAME -->)`);
  return text;
}

/** The doc's prose, the generated blocks and code spans cut out: where no measured number may stand. */
export function prose(doc) {
  return doc.replace(BLOCK, '').replace(/`[^`\n]*`/g, '');
}

// ---- The command ----

async function main() {
  const { values } = parseArgs({
    options: {
      experiment: { type: 'string' },
      workers: { type: 'string', default: '1' },
      json: { type: 'boolean', default: false },
      write: { type: 'boolean', default: false },
      check: { type: 'boolean', default: false },
      render: { type: 'boolean', default: false },
    },
  });
  if (values.render) {
    writeFileSync(DOC_PATH, renderDoc(readFileSync(DOC_PATH, 'utf8'), loadResults()));
    return 0;
  }
  const names = values.experiment ? [values.experiment] : Object.keys(EXPERIMENTS);
  for (const n of names) {
    if (!(n in EXPERIMENTS)) {
      console.error(`--experiment: expected one of ${Object.keys(EXPERIMENTS).join(', ')}, got ${n}`);
      return 2;
    }
  }
  const workerCount = Number(values.workers);
  if (!Number.isInteger(workerCount) || workerCount < 1 || workerCount > 16) {
    console.error(`--workers: expected an integer in [1, 16], got ${values.workers}`);
    return 2;
  }
  const { init, initWorker } = await import('../web/lib/index.js');
  // The SIMD128 build, as the page's Train view uses: the same bits on every CPU (the relaxed
  // build's fused multiply-adds depend on the CPU).
  const engines = workerCount === 1 ? [await init({ simd: 'simd128' })]
    : await Promise.all(Array.from({ length: workerCount }, () => initWorker(undefined, { simd: 'simd128' })));
  const machine = `${cpus()[0]?.model?.trim() ?? 'this CPU'}, ${cpus().length} CPUs, ${engines.length} engine${engines.length > 1 ? 's' : ''}`;
  const results = values.write || values.check ? loadResults() : null;
  const problems = [];
  const out = {};
  try {
    for (const name of names) {
      const started = performance.now();
      const result = await runExperiment(engines, EXPERIMENTS[name], {
        onRun: (r, k, total) => { if (!values.json) process.stderr.write(`${name}: run ${k + 1}/${total} (${r.variant ?? `heads ${r.heads}`}, seed ${r.seed}) ${pct(r.finalAccuracy)}\n`); },
      });
      const record = experimentRecord(result, { seconds: (performance.now() - started) / 1000, machine });
      out[name] = { ...result, seconds: record.seconds };
      if (values.check) problems.push(...differences(name, results.experiments[name], record));
      if (values.write) results.experiments[name] = record;
      if (!values.json) console.log(`\n### ${name}\n\n${experimentBlock(name, record)}`);
    }
  } finally {
    if (workerCount > 1) for (const e of engines) await e.terminate();
  }
  if (values.json) console.log(JSON.stringify(out));
  if (values.write) {
    writeFileSync(RESULTS_PATH, serializeResults(results));
    writeFileSync(DOC_PATH, renderDoc(readFileSync(DOC_PATH, 'utf8'), results));
  }
  if (values.check) {
    if (renderDoc(readFileSync(DOC_PATH, 'utf8'), results) !== readFileSync(DOC_PATH, 'utf8')) {
      problems.push('docs/experiments.md: its tables are not what docs/experiments-results.json renders (node tools/whatif.mjs --render)');
    }
    for (const p of problems) console.error(p);
    console.error(problems.length ? `whatif --check: ${problems.length} difference(s)` : `whatif --check: ${names.join(', ')} as committed`);
    return problems.length ? 1 : 0;
  }
  return 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) process.exitCode = await main();
