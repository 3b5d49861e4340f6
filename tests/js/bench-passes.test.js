// The benchmark's --passes (tools/bench): how the passes of one environment become its result
// (report.mjs mergePasses), how the report says so, and that a bad count is refused before
// anything runs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { mergePasses, writeReports } from '../../tools/bench/report.mjs';

const root = fileURLToPath(new URL('../../', import.meta.url));
const ok = { ok: true, error: 0, detail: 'reference' };

// One pass of an environment: tiny-8 with headscope and onnxruntime-web at the given times.
function pass(hsMs, ortMs, { peak = 50, ortCheck = ok, memory = 1000 } = {}) {
  return {
    env: 'node', label: 'Node test', versions: { node: 'v0' },
    roofline: { gflops: peak, accumulators: 8 },
    trainMatmuls: { forward: { gflops: peak * 0.9, products: ['1x1x1'] } },
    memory: { wasmBytes: memory, ms: 1 },
    shapes: [{
      shape: 'tiny-8', flops: 1000,
      rows: [
        { engine: 'hs', check: ok, ms: hsMs, min: hsMs * 0.9, max: hsMs * 1.1, gflops: 1, runs: 20, batch: 1 },
        { engine: 'ort-mha', check: ortCheck, ms: ortMs, min: ortMs, max: ortMs, gflops: 1, runs: 20, batch: 1 },
        { engine: 'tfjs', skipped: 'not in this build' },
      ],
    }],
  };
}

test('mergePasses: each row is its median pass (all times kept), a failure in any pass stands', () => {
  const one = pass(1, 10);
  assert.equal(mergePasses([one]), one, 'one pass: the pass itself');

  // Three passes; a neighbour's burst made pass 2's headscope and pass 3's ort slow.
  const merged = mergePasses([pass(1.0, 10, { peak: 50 }), pass(3.0, 11, { peak: 40 }), pass(1.2, 30, { peak: 55 })]);
  const [hs, ort, tfjs] = merged.shapes[0].rows;
  assert.equal(hs.ms, 1.2);
  assert.deepEqual(hs.passMs, [1.0, 3.0, 1.2]);
  assert.equal(hs.min, 1.2 * 0.9, 'the whole row of the median pass, min and max with it');
  assert.equal(ort.ms, 11);
  assert.deepEqual(ort.passMs, [10, 11, 30]);
  assert.deepEqual(tfjs, { engine: 'tfjs', skipped: 'not in this build' }, 'a skipped row stays as it was');
  assert.equal(merged.roofline.gflops, 50, 'the median roofline');
  assert.equal(merged.trainMatmuls.forward.gflops, 45);
  assert.equal(merged.memory.wasmBytes, 1000, "the first pass's memory probe");

  // Even count: the lower middle.
  assert.equal(mergePasses([pass(4, 10), pass(1, 10), pass(3, 10), pass(2, 10)]).shapes[0].rows[0].ms, 2);

  // A check that failed in one pass fails the merged row, whatever the other passes measured.
  const bad = { ok: false, error: 0.5, detail: 'worst at 0' };
  const failed = mergePasses([pass(1, 10), pass(1, 12, { ortCheck: bad }), pass(1, 11)]).shapes[0].rows[1];
  assert.equal(failed.check.ok, false);
  assert.equal(failed.ms, 12);
  assert.equal(failed.passMs, undefined);
});

test('the report says how many passes a run had', (t) => {
  const out = mkdtempSync(join(tmpdir(), 'headscope-passes-'));
  t.after(() => rmSync(out, { recursive: true, force: true }));
  const results = {
    date: new Date().toISOString(), command: 'npm run bench -- --passes 3', quick: true, passes: 3,
    machine: { cpu: 'Test CPU', logicalCpus: 2, memoryGiB: 1, platform: 'linux x64' },
    timing: { minRuns: 3, minWarmupCalls: 1, warmupMs: 1, targetRunMs: 1, slowRuns: 1, slowCallMs: 1 },
    envs: [mergePasses([pass(1, 10), pass(2, 12), pass(3, 14)])], seconds: 1,
  };
  writeReports(results, out);
  const md = readFileSync(join(out, 'results.md'), 'utf8');
  assert.match(md, /\*\*Passes:\*\* 3 \(`--passes`\)/);
  assert.equal(JSON.parse(readFileSync(join(out, 'results.json'), 'utf8')).envs[0].shapes[0].rows[0].ms, 2);
});

test('bench --passes takes a whole number from 1 to 99 and refuses anything else before running', () => {
  for (const bad of ['0', '-1', '1.5', 'three', '100']) {
    const r = spawnSync(process.execPath, [join(root, 'tools/bench/bench.mjs'), '--passes', bad, '--no-build'],
      { cwd: root, encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 2, `--passes ${bad}: exit ${r.status}\n${r.stderr.slice(-500)}`);
    assert.match(r.stderr, /--passes: expected a whole number from 1 to 99/);
  }
  const r = spawnSync(process.execPath, [join(root, 'tools/bench/bench.mjs'), '--passes'], { cwd: root, encoding: 'utf8' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--passes needs a value/);
});
