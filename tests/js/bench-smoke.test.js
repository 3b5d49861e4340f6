// Smoke test of the benchmark (tools/bench): a quick Node-only run on the two tutorial shapes with
// every engine (headscope both ways, onnxruntime-web's two graphs, tfjs-wasm, the Eigen reference
// path in WASM, plain JS) and on the small transformer (headscope's Transformer.forward and
// onnxruntime-web on the two torch.onnx exports of the reference module), and generation at context
// 64 (generate's time per new token with its KV cache, and the full forward it saves). Every
// engine must pass its numerical check (generation: its greedy tokens against the argmax of full
// forwards) and be timed, and the reports must be written (to a
// temporary folder, never docs/). Then the 2-thread rows, which only run on the larger shapes, on
// the smallest of them (BERT-base L=32).
// Needs Debian's python3-onnx and python3-torch (tools/setup.sh) for the ONNX graphs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { QUICK_SHAPES, SHAPES, enginesFor } from '../../tools/bench/engines.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
// The engines a shape gets (its kind's; some engines name the shapes they run on).
const enginesOf = (shapeId) => enginesFor(SHAPES.find((s) => s.id === shapeId));

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
  // bench.mjs sets --experimental-wasm-relaxed-simd when Node needs it: the relaxed-SIMD build's
  // peak and rows are measured too (engines with simd: 'relaxed', checked against SIMD128's).
  assert.equal(node.versions.relaxedSimd, true);
  assert.ok(node.rooflineRelaxed?.gflops > 0, 'relaxed roofline probe measured a peak');
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
  assert.match(md, /\| Node v\d+[.\d]* \| relaxed SIMD \(relaxed_madd\) \| [\d.]+ GFLOP\/s \|/);
  assert.ok(md.includes('| **headscope relaxed SIMD (no weights)** |'), 'the relaxed MHA row');
  assert.match(md, /\| L=3 E=4 H=2: vs tfjs-wasm, per call \(`out` array reused\) \| >= 10\.0x \|/);
  assert.match(md, /\| L=3 E=4 H=2: vs tfjs-wasm, per call \(new output array each call\) \| >= 10\.0x \|/);
  // The small transformer: its target, and its row of the Transformer table with its parameter
  // count (tok_embed 28x32 + pos_embed 32x32 + 2 x (ln1 64 + in_proj 3168 + out_proj 1056) +
  // ln_final 64 + unembed 28x32 + 28 = 11,484).
  assert.equal(node.shapes.find((s) => s.shape === 'tt-small').facts.parameters, 11484);
  assert.match(md, /\| transformer 2L d32 T=32 B=1: forward, per call vs onnxruntime-web \(the faster torch\.onnx export\) \| >= 10\.0x \|/);
  assert.match(md, /^## Transformer$/m);
  assert.match(md, /\| Node v\d+[.\d]* \| transformer 2L d32 T=32 B=1 \(vocab 28, 2 heads, dMlp 0\) \| 11,484 \| [\d.]+ \| [\d.]+ \((fixed|dynamic)\) \| [\d.]+x \| >= 10\.0x \| (PASS|\*\*FAIL\*\*) \|/);
  // Generation at context 64 (tt-1m's sizes with 512 positions: 57,344 parameters more than its
  // 933,120): checked against full forwards, and its table and the recomputation target.
  const gen = node.shapes.find((s) => s.shape === 'gen-64');
  assert.equal(gen.facts.parameters, 990464);
  assert.match(gen.rows[0].check.detail, /^greedy tokens = argmax of the full forward at steps 0, 1, 16, 32/);
  assert.equal(gen.rows[0].newTokens, 32);
  assert.ok(gen.rows[0].generateMs > 0 && gen.rows[0].promptMs > 0, 'the two generate calls timed');
  assert.match(md, /^## Generation$/m);
  assert.match(md, /\| Node v\d+[.\d]* \| 64 \| [\d.]+ \([\d.-]+ to [\d.-]+\) \| [\d.]+ \/ [\d.]+ \| [\d.]+ \| [\d.]+x \|  \|/);
  assert.match(md, /^- Node v\d+[.\d]*, faster than recomputing the full forward from context 64 on: (met|\*\*not met\*\*), [\d.]+x \(>= 1\.00x\); 64: /m);
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
