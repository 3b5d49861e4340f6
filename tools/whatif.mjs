#!/usr/bin/env node
// The seeds' what-if experiments, measured (docs/experiments.md has the committed tables):
//   node tools/whatif.mjs                       every experiment of EXPERIMENTS, as documented
//   node tools/whatif.mjs --experiment sinks     one of them (log-line, induction, kv-heads,
//                                                positions, sinks)
//   node tools/whatif.mjs --workers 2 --json    runs side by side in 2 Workers; JSON instead of tables
// The same seeds give the same numbers on every run and machine (the times differ). Needs the
// built package (npm run build).
import { cpus } from 'node:os';
import { parseArgs } from 'node:util';
import { init, initWorker } from '../web/lib/index.js';
import { describeResult, EXPERIMENTS, formatTable, runExperiment } from '../web/lib/experiments.js';

const { values } = parseArgs({
  options: {
    experiment: { type: 'string' },
    workers: { type: 'string', default: '1' },
    json: { type: 'boolean', default: false },
  },
});
const names = values.experiment ? [values.experiment] : Object.keys(EXPERIMENTS);
for (const n of names) {
  if (!(n in EXPERIMENTS)) {
    console.error(`--experiment: expected one of ${Object.keys(EXPERIMENTS).join(', ')}, got ${n}`);
    process.exit(2);
  }
}
const workerCount = Number(values.workers);
if (!Number.isInteger(workerCount) || workerCount < 1 || workerCount > 16) {
  console.error(`--workers: expected an integer in [1, 16], got ${values.workers}`);
  process.exit(2);
}
// The SIMD128 build, as the page's Train view uses: the same bits on every CPU (the relaxed
// build's fused multiply-adds depend on the CPU).
const engines = workerCount === 1 ? [await init({ simd: 'simd128' })]
  : await Promise.all(Array.from({ length: workerCount }, () => initWorker(undefined, { simd: 'simd128' })));
const out = {};
try {
  for (const name of names) {
    const started = performance.now();
    const result = await runExperiment(engines, EXPERIMENTS[name], {
      onRun: (r, k, total) => { if (!values.json) process.stderr.write(`${name}: run ${k + 1}/${total} (heads ${r.heads}, seed ${r.seed}) ${(r.finalAccuracy * 100).toFixed(1)}%\n`); },
    });
    out[name] = { ...result, seconds: (performance.now() - started) / 1000 };
    if (!values.json) {
      const o = result.options;
      console.log(`\n### ${name}: ${o.task.name} (T ${o.task.seqLen}), dModel ${o.dModel}, ${o.nLayers} layers, ` +
        `${o.dMlp ? `MLP ${o.dMlp}` : 'attention only'}, ${o.steps} steps of ${o.batchSize}, AdamW lr ${o.optimizer.lr}, ` +
        `seeds ${o.seeds.join(', ')}; held-out accuracy on ${o.evalRows} rows\n`);
      console.log(formatTable(result));
      console.log(`\n${describeResult(result)}`);
      console.log(`\n${out[name].seconds.toFixed(0)} s on ${cpus()[0]?.model ?? 'this CPU'}, ${engines.length} engine(s)`);
    }
  }
} finally {
  if (workerCount > 1) for (const e of engines) await e.terminate();
}
if (values.json) console.log(JSON.stringify(out));
