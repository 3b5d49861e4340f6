// Smoke test of the benchmark (tools/bench): a quick Node-only run on the two tutorial shapes with
// every engine (headscope both ways, onnxruntime-web's two graphs, tfjs-wasm, the Eigen reference
// path in WASM, plain JS). Every engine must pass its numerical check against headscope and be
// timed, and the reports must be written (to a temporary folder, never docs/). Then the 2-thread
// rows, which only run on the larger shapes, on the smallest of them (BERT-base L=32).
// Needs Debian's python3-onnx (tools/setup.sh) for the ONNX graphs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { ENGINES, QUICK_SHAPES } from '../../tools/bench/engines.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
// The engines a shape gets (some engines name the shapes they run on).
const enginesOf = (shapeId) => ENGINES.filter((e) => e.shapes?.includes(shapeId) ?? true);

function assertTimed(row, what) {
  assert.equal(row.error, undefined, `${what}: ${row.error}`);
  assert.equal(row.check.ok, true, `${what}: check failed (${row.check.error}: ${row.check.detail})`);
  assert.ok(row.check.error <= 1e-3, `${what}: relative error ${row.check.error}`);
  assert.ok(row.ms > 0 && Number.isFinite(row.ms), `${what}: timed (${row.ms} ms)`);
  assert.ok(row.runs >= 3 && row.batch >= 1, `${what}: ${row.runs} runs x ${row.batch}`);
}

test('npm run bench -- --quick --node-only: every engine checked and timed, reports written', { timeout: 300_000 }, (t) => {
  const out = mkdtempSync(join(tmpdir(), 'headscope-bench-'));
  t.after(() => rmSync(out, { recursive: true, force: true }));
  const r = spawnSync(process.execPath, [join(root, 'tools/bench/bench.mjs'), '--quick', '--node-only', '--out', out],
    { cwd: root, encoding: 'utf8', timeout: 280_000 });
  assert.equal(r.status, 0, `bench exited with ${r.status}:\n${r.stderr.slice(-4000)}`);

  const results = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8'));
  assert.deepEqual(results.envs.map((e) => e.env), ['node']);
  const node = results.envs[0];
  assert.ok(node.roofline.gflops > 0, 'roofline probe measured a peak');
  assert.deepEqual(node.shapes.map((s) => s.shape), QUICK_SHAPES);
  for (const s of node.shapes) {
    assert.deepEqual(s.rows.map((row) => row.engine), enginesOf(s.shape).map((e) => e.id), `${s.shape}: every engine ran`);
    for (const row of s.rows) assertTimed(row, `${s.shape} ${row.engine}`);
  }

  const md = readFileSync(join(out, 'results.md'), 'utf8');
  assert.match(md, /^# headscope benchmark/m);
  assert.match(md, /\| shape \| engine \| ms \| GFLOP\/s \|/);
  for (const e of new Set(QUICK_SHAPES.flatMap(enginesOf))) assert.ok(md.includes(`| ${e.label} |`) || md.includes(`| **${e.label}** |`), `results.md has a row for ${e.label}`);
  assert.match(md, /## Targets: Node v20|## Targets: Node v\d+/);
  assert.match(md, /\| L=3 E=4 H=2: vs tfjs-wasm, per call \(`out` array reused\) \| >= 10\.0x \|/);
  assert.match(md, /\| L=3 E=4 H=2: vs tfjs-wasm, per call \(new output array each call\) \| >= 10\.0x \|/);
  const svg = readFileSync(join(out, 'chart.svg'), 'utf8');
  assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
  const bars = QUICK_SHAPES.reduce((n, id) => n + enginesOf(id).length, 0);
  assert.ok((svg.match(/<rect /g) ?? []).length >= bars, 'a bar per engine and shape');
});

test('npm run bench -- --quick --node-only --shapes bert-32 --engines hs-mt,ort-mha-mt: the 2-thread rows', { timeout: 300_000 }, (t) => {
  const out = mkdtempSync(join(tmpdir(), 'headscope-bench-'));
  t.after(() => rmSync(out, { recursive: true, force: true }));
  const r = spawnSync(process.execPath, [join(root, 'tools/bench/bench.mjs'), '--quick', '--node-only', '--no-build',
    '--shapes', 'bert-32', '--engines', 'hs-mt,ort-mha-mt', '--out', out], { cwd: root, encoding: 'utf8', timeout: 280_000 });
  assert.equal(r.status, 0, `bench exited with ${r.status}:\n${r.stderr.slice(-4000)}`);
  const [s] = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8')).envs[0].shapes;
  assert.deepEqual(s.rows.map((row) => row.engine), ['hs', 'hs-mt', 'ort-mha-mt']);
  for (const row of s.rows) assertTimed(row, `bert-32 ${row.engine}`);
  // headscope's threaded module gives the single-threaded bits (its check is against 'hs').
  assert.equal(s.rows[1].check.error, 0);
  const md = readFileSync(join(out, 'results.md'), 'utf8');
  assert.ok(md.includes('| headscope (2 threads) |') || md.includes('| **headscope (2 threads)** |'), 'hs-mt row in results.md');
});
