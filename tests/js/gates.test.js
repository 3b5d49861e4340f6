// options.headGates: one gate per head scaling that head's output before out_proj. Checked against
// PyTorch (tests/golden/gates/: the same module with the heads' out_proj columns scaled), against
// a weight-edited second module, in trace(), through initWorker(), and in its errors.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { init } from '../../web/lib/index.js';
import { initWorker } from '../../web/lib/worker-client.js';
import { parseCase } from '../../web/lib/case.js';
import { seedWorkedExample as seed } from '../../web/lib/examples.js';

const hs = await init();
const gatesDir = new URL('../golden/gates/', import.meta.url);

// tests/golden/gates/head_gates.txt: "file g_0 ... g_H-1" per line (the case format has no gates).
function gatedCases() {
  return readFileSync(new URL('head_gates.txt', gatesDir), 'utf8').split('\n')
    .filter((line) => line.trim() !== '' && !line.startsWith('#'))
    .map((line) => {
      const [file, ...gates] = line.trim().split(/\s+/);
      return { file, doc: JSON.parse(readFileSync(new URL(file, gatesDir), 'utf8')), gates: gates.map(Number) };
    });
}

// A parsed case's module and forward arguments (hs.runCase takes no gates).
function runGated(doc, gates) {
  const parsed = parseCase(doc);
  const mha = hs.createMultiheadAttention(parsed.config);
  try {
    mha.loadStateDict(parsed.stateDict);
    const result = mha.forward(parsed.query, parsed.key, parsed.value, { ...parsed.options, headGates: gates });
    return { output: result.output, weights: result.weights };
  } finally {
    mha.dispose();
  }
}

after(() => {
  assert.equal(hs._live.size, 0, 'every module disposed');
});

test('the gated golden cases match PyTorch (out_proj columns scaled) only with their gates', () => {
  const cases = gatedCases();
  assert.ok(cases.length >= 5, `${cases.length} gated cases`);
  for (const { file, doc, gates } of cases) {
    const gated = hs.checkCase(doc, runGated(doc, gates), { tolerance: 1e-4 });
    assert.ok(gated.ok, `${file}: ${gated.detail}`);
    const ungated = hs.checkCase(doc, runGated(doc, null), { tolerance: 1e-4 });
    assert.ok(!ungated.ok, `${file}: matches without its gates, so it tests nothing`);
  }
});

test('an array, a Float32Array and { data, shape } are the same gates; all ones and null change nothing', () => {
  const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  mha.loadStateDict(seed.state_dict);
  const x = seed.inputs.query;
  const plain = mha.forward(x, x, x).output.data;
  const forms = [[0.5, 0], new Float32Array([0.5, 0]), { data: new Float32Array([0.5, 0]), shape: [2] }];
  const outputs = forms.map((headGates) => mha.forward(x, x, x, { headGates }).output.data);
  for (const o of outputs) assert.deepEqual(o, outputs[0]);
  assert.notDeepEqual(outputs[0], plain);
  assert.deepEqual(mha.forward(x, x, x, { headGates: [1, 1] }).output.data, plain);
  assert.deepEqual(mha.forward(x, x, x, { headGates: null }).output.data, plain);
  assert.deepEqual(mha.forward(x, x, x, { headGates: undefined }).output.data, plain);
  // A later call without gates is ungated again: nothing of the last call's gates stays behind.
  assert.deepEqual(mha.forward(x, x, x).output.data, plain);
  mha.dispose();
});

test('gate 0 equals zeroing the head\'s out_proj columns, gate 0.5 halving them; the weights stay', () => {
  const E = 8;
  const H = 4;
  const hd = E / H;
  const rand = (n, s) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 1.7 + s) / 2);
  const sd = { in_proj_weight: { data: rand(3 * E * E, 1), shape: [3 * E, E] }, in_proj_bias: { data: rand(3 * E, 2), shape: [3 * E] },
    'out_proj.weight': { data: rand(E * E, 3), shape: [E, E] }, 'out_proj.bias': { data: rand(E, 4), shape: [E] } };
  const x = { data: rand(5 * 2 * E, 5), shape: [5, 2, E] };
  const gates = [1, 0, 0.5, 1];
  const edited = Float32Array.from(sd['out_proj.weight'].data, (w, i) => w * gates[Math.floor((i % E) / hd)]);
  const a = hs.createMultiheadAttention({ embedDim: E, numHeads: H });
  const b = hs.createMultiheadAttention({ embedDim: E, numHeads: H });
  a.loadStateDict(sd);
  b.loadStateDict({ ...sd, 'out_proj.weight': { data: edited, shape: [E, E] } });
  const got = a.forward(x, x, x, { headGates: gates, averageAttnWeights: false });
  const want = b.forward(x, x, x, { averageAttnWeights: false });
  for (let i = 0; i < want.output.data.length; i++) {
    assert.ok(Math.abs(got.output.data[i] - want.output.data[i]) <= 1e-6, `output[${i}]`);
  }
  assert.deepEqual(got.weights.data, a.forward(x, x, x, { averageAttnWeights: false }).weights.data);
  a.dispose();
  b.dispose();
});

test('trace(): headOutputs and concat are gated (what out_proj sees), scores and weights are not', () => {
  const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  mha.loadStateDict(seed.state_dict);
  const x = seed.inputs.query;
  const plain = mha.trace(x, x, x);
  const gated = mha.trace(x, x, x, { headGates: [0.5, 0] });
  assert.deepEqual(gated.weights.data, plain.weights.data);
  assert.deepEqual(gated.scores.data, plain.scores.data);
  const [H, L, hd] = plain.headOutputs.shape;
  for (let i = 0; i < H * L * hd; i++) {
    const g = [0.5, 0][Math.floor(i / (L * hd))];
    assert.equal(gated.headOutputs.data[i], Math.fround(plain.headOutputs.data[i] * g));
  }
  assert.deepEqual(gated.output.data, mha.forward(x, x, x, { headGates: [0.5, 0] }).output.data);
  mha.dispose();
});

test('non-finite gates propagate as `concat * gates` does: a NaN gate makes the output NaN', () => {
  const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  mha.loadStateDict(seed.state_dict);
  const x = seed.inputs.query;
  const out = mha.forward(x, x, x, { headGates: [NaN, 1] }).output.data;
  // out_proj.weight mixes head 0's columns into every output column.
  assert.ok(Array.from(out).every(Number.isNaN));
  mha.dispose();
});

test('errors name options.headGates', () => {
  const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  mha.loadStateDict(seed.state_dict);
  const x = seed.inputs.query;
  assert.throws(() => mha.forward(x, x, x, { headGates: [1, 0, 1] }),
    { code: 'SHAPE_MISMATCH', message: 'options.headGates: expected 2 numbers (one per head), got 3' });
  assert.throws(() => mha.trace(x, x, x, { headGates: new Float32Array(1) }),
    { code: 'SHAPE_MISMATCH', message: 'options.headGates: expected 2 numbers (one per head), got 1' });
  assert.throws(() => mha.forward(x, x, x, { headGates: [[1, 0]] }),
    { code: 'SHAPE_MISMATCH', message: /^options\.headGates: expected a 1-D tensor of 2 numbers/ });
  assert.throws(() => mha.forward(x, x, x, { headGates: [1, 'off'] }),
    { code: 'INVALID_ARGUMENT', message: /^options\.headGates\[1\]: expected a number/ });
  assert.throws(() => mha.forward(x, x, x, { headGates: new Float64Array(2) }),
    { code: 'INVALID_ARGUMENT', message: /^options\.headGates: expected an array of numbers or a Float32Array/ });
  assert.throws(() => mha.forward(x, x, x, { headGates: 0 }), { code: 'INVALID_ARGUMENT', message: /^options\.headGates/ });
  // The module still works after each refusal.
  assert.equal(mha.forward(x, x, x).output.shape.join(), '3,4');
  mha.dispose();
});

test('options.headGates is read once, through a getter, before anything is written', () => {
  const mha = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
  mha.loadStateDict(seed.state_dict);
  const x = seed.inputs.query;
  let reads = 0;
  const options = { get headGates() { reads++; return [0, 1]; } };
  const once = mha.forward(x, x, x, options).output.data;
  assert.equal(reads, 1);
  assert.deepEqual(once, mha.forward(x, x, x, { headGates: [0, 1] }).output.data);
  mha.dispose();
});

test('initWorker(): headGates reach the worker and give the in-thread numbers', async () => {
  const remote = await initWorker();
  try {
    const local = hs.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
    local.loadStateDict(seed.state_dict);
    const mha = await remote.createMultiheadAttention({ embedDim: 4, numHeads: 2, bias: false });
    await mha.loadStateDict(seed.state_dict);
    const x = seed.inputs.query;
    for (const headGates of [[0, 1], new Float32Array([0.5, 2])]) {
      const want = local.forward(x, x, x, { headGates });
      assert.deepEqual((await mha.forward(x, x, x, { headGates })).output.data, want.output.data);
      assert.deepEqual((await mha.trace(x, x, x, { headGates })).headOutputs.data,
        local.trace(x, x, x, { headGates }).headOutputs.data);
    }
    await assert.rejects(mha.forward(x, x, x, { headGates: [1] }),
      { code: 'SHAPE_MISMATCH', message: 'options.headGates: expected 2 numbers (one per head), got 1' });
    await mha.dispose();
    local.dispose();
  } finally {
    await remote.terminate();
  }
});
