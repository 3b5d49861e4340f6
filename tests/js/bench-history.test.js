// The benchmark's history of CPUs (tools/bench/report.mjs): a complete run lands in
// <out>/history/<cpu>.json (one file per CPU model, the latest run of each), and results.md's
// "Every CPU it was run on" section shows every kept run's targets, evaluated again from its
// measured times. Runs on synthetic results (no timing): what is checked is the bookkeeping.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { cpuSlug, evaluateTargets, readHistory, writeReports } from '../../tools/bench/report.mjs';

// A run of one shape (BERT L=128) in Node: headscope and the two onnxruntime-web graphs.
function run(cpu, date, hsMs, ortMs) {
  const r = (engine, ms) => ({ engine, ms, min: ms, max: ms, gflops: 1, runs: 20, batch: 1, check: { ok: true, error: 0, detail: 'x' } });
  return {
    date, command: 'npm run bench', quick: false, seconds: 1,
    machine: { cpu, logicalCpus: 2, memoryGiB: 24, platform: 'linux x64' },
    headscope: { wasmSha256: 'ab'.repeat(32), wasmBytes: 1, builtAt: date },
    timing: { minRuns: 20, warmupMs: 300, minWarmupCalls: 2, targetRunMs: 20, slowCallMs: 1000, slowRuns: 5 },
    envs: [{
      env: 'node', label: 'Node v20.20.2', versions: { node: 'v20.20.2', ort: '1.30.0', tfjs: '4.22.0' },
      shapes: [{ shape: 'bert-128', rows: [r('hs', hsMs), r('ort-mha', ortMs), r('ort-matmul', ortMs * 2)] }],
    }],
  };
}

function tempDir(t) {
  const dir = mkdtempSync(join(tmpdir(), 'headscope-history-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test('cpuSlug: one file name per CPU model', () => {
  assert.equal(cpuSlug('Intel(R) Xeon(R) Processor'), 'intel-xeon-processor');
  assert.equal(cpuSlug('AMD EPYC 7B13 64-Core Processor'), 'amd-epyc-7b13-64-core-processor');
  assert.equal(cpuSlug('Apple M2 (TM)'), 'apple-m2');
  assert.equal(cpuSlug('../../etc'), 'etc', 'no path separators survive');
  assert.equal(cpuSlug('()'), 'unknown-cpu');
});

test('a complete run is kept per CPU, a partial run is not; results.md shows every CPU', (t) => {
  const out = tempDir(t);
  writeReports(run('AMD EPYC', '2026-11-29T10:00:00.000Z', 10, 13), out, { complete: true });
  writeReports(run('Intel(R) Xeon(R) Processor', '2026-12-01T10:00:00.000Z', 10, 11), out, { complete: true });
  // A partial run (say --shapes bert-128) writes results.md but leaves the history alone.
  writeReports(run('Intel(R) Xeon(R) Processor', '2026-12-02T10:00:00.000Z', 20, 11), out, { complete: false });
  assert.deepEqual(readdirSync(join(out, 'history')).sort(), ['amd-epyc.json', 'intel-xeon-processor.json']);
  const kept = readHistory(out);
  assert.deepEqual(kept.map((r) => [r.machine.cpu, r.date.slice(0, 10)]),
    [['AMD EPYC', '2026-11-29'], ['Intel(R) Xeon(R) Processor', '2026-12-01']], 'oldest first, the partial run not kept');

  const md = readFileSync(join(out, 'results.md'), 'utf8');
  const section = md.slice(md.indexOf('## Every CPU it was run on'));
  assert.ok(md.includes('## Every CPU it was run on'), 'the section is there');
  assert.match(section, /### AMD EPYC: 2026-11-29/);
  assert.match(section, /### Intel\(R\) Xeon\(R\) Processor: 2026-12-01/);
  // Each run's target, from its own times: 13/10 = 1.30x passes 1.25x, 11/10 = 1.10x fails.
  const line = (cpu) => section.slice(section.indexOf(`### ${cpu}`)).split('\n')
    .find((l) => l.startsWith('| E=768 H=12 L=128: vs the faster onnxruntime-web graph |'));
  assert.equal(line('AMD EPYC'), '| E=768 H=12 L=128: vs the faster onnxruntime-web graph | >= 1.25x | 1.30x PASS | not measured |');
  assert.equal(line('Intel(R) Xeon(R) Processor'), '| E=768 H=12 L=128: vs the faster onnxruntime-web graph | >= 1.25x | 1.10x **FAIL** | not measured |');
  // results.json is this run's alone (no history inside), marked partial.
  const json = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8'));
  assert.equal(json.complete, false);
  assert.equal(json.history, undefined);
  assert.equal(json.date, '2026-12-02T10:00:00.000Z');
});

test('a complete run replaces the earlier run of its CPU', (t) => {
  const out = tempDir(t);
  writeReports(run('AMD EPYC', '2026-11-29T10:00:00.000Z', 10, 13), out, { complete: true });
  writeReports(run('AMD EPYC', '2026-12-03T10:00:00.000Z', 10, 15), out, { complete: true });
  assert.deepEqual(readHistory(out).map((r) => r.date), ['2026-12-03T10:00:00.000Z']);
  assert.match(readFileSync(join(out, 'results.md'), 'utf8'), /\| >= 1\.25x \| 1\.50x PASS \|/);
});

test('a broken history file is left out with a message, and the report is still written', (t) => {
  const out = tempDir(t);
  mkdirSync(join(out, 'history'));
  writeFileSync(join(out, 'history', 'broken.json'), '{ not json');
  writeFileSync(join(out, 'history', 'other.json'), JSON.stringify({ hello: 1 }));
  writeFileSync(join(out, 'history', 'notes.txt'), 'not a run');
  const errors = [];
  const original = console.error;
  console.error = (m) => errors.push(String(m));
  try {
    writeReports(run('AMD EPYC', '2026-11-29T10:00:00.000Z', 10, 13), out, { complete: true });
  } finally {
    console.error = original;
  }
  assert.deepEqual(readHistory(out).map((r) => r.machine.cpu), ['AMD EPYC']);
  assert.equal(errors.filter((m) => m.includes('broken.json')).length >= 1, true, errors.join('\n'));
  assert.equal(errors.filter((m) => m.includes('other.json') && m.includes('not a results.json')).length >= 1, true, errors.join('\n'));
  assert.ok(existsSync(join(out, 'results.md')));
});

test('the committed history keeps an Intel and an AMD run, each complete, with its CPU and date', () => {
  const runs = readHistory(join(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '../../docs/bench'));
  const cpus = runs.map((r) => r.machine.cpu);
  assert.ok(cpus.some((c) => /intel/i.test(c)), `an Intel run: ${cpus.join(', ')}`);
  assert.ok(cpus.some((c) => /amd/i.test(c)), `an AMD run: ${cpus.join(', ')}`);
  for (const r of runs) {
    assert.equal(r.quick, false, `${r.file}: not a --quick run`);
    assert.deepEqual(r.envs.map((e) => e.env).sort(), ['chromium', 'node'], `${r.file}: both environments`);
    assert.match(r.date, /^\d{4}-\d\d-\d\dT/);
    assert.equal(r.file, `history/${cpuSlug(r.machine.cpu)}.json`, 'one file per CPU model, named after it');
  }
});

test('a target that needs more than the measured peak says so; one within it does not', () => {
  const r = (engine, ms, gflops) => ({ engine, ms, gflops, runs: 20, batch: 1, check: { ok: true, error: 0, detail: 'x' } });
  const env = {
    env: 'node', label: 'Node', roofline: { gflops: 40, accumulators: 12 },
    shapes: [
      { shape: 'tt-small', rows: [r('hs-model', 0.05, 14), r('ort-model', 0.1, 7)] },      // 2x of 10x: needs 70
      { shape: 'bert-128', rows: [r('hs', 10, 30), r('ort-mha', 11, 27), r('ort-matmul', 12, 25)] },  // 1.1x of 1.25x: needs 34
    ],
  };
  const targets = evaluateTargets(env);
  const tt = targets.find((x) => x.shape === 'tt-small' && x.hs === 'hs-model');
  assert.equal(tt.pass, false);
  assert.equal(tt.beyondPeak, true);
  assert.ok(Math.abs(tt.requiredGflops - 70) < 1e-9, String(tt.requiredGflops));
  assert.match(tt.gap, /needs 70\.0 GFLOP\/s, above this build's measured peak \(40\.0\): out of reach on this machine/);
  const bert = targets.find((x) => x.name === 'E=768 H=12 L=128: vs the faster onnxruntime-web graph');
  assert.equal(bert.pass, false);
  assert.equal(bert.beyondPeak, undefined);
  assert.doesNotMatch(bert.gap, /out of reach/);
});
