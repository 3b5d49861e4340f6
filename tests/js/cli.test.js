// The command line (web/lib/cli.js), run as a child process the way npm's bin shim runs it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { seedWorkedExample, seedProjections } from '../../web/lib/examples.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const cli = join(root, 'web/lib/cli.js');
const goldenDir = join(root, 'tests/golden');
const seedFile = join(goldenDir, 'seed-worked-example.json');
const dataDir = join(root, 'tests/cpp/data');

function headscope(...args) {
  const r = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', cwd: root });
  if (r.error) throw r.error;
  return r;
}

const shapeOf = (a) => (Array.isArray(a) ? [a.length, ...shapeOf(a[0])] : []);
const flat = (a) => (Array.isArray(a) ? a.flatMap(flat) : [a]);
const fromCaseNumber = (x) => ({ inf: Infinity, '-inf': -Infinity, nan: NaN }[x] ?? x);

function assertClose(got, want, tolerance, what) {
  assert.deepEqual(shapeOf(got), shapeOf(want), `${what}: shape`);
  const g = flat(got).map(fromCaseNumber);
  const w = flat(want).map(fromCaseNumber);
  g.forEach((x, i) => {
    if (Number.isFinite(w[i])) {
      assert.ok(Math.abs(x - w[i]) <= tolerance, `${what}[${i}]: got ${x}, expected ${w[i]}`);
    } else {
      assert.ok(Object.is(x, w[i]), `${what}[${i}]: got ${x}, expected ${w[i]}`);
    }
  });
}

// Bad input: exit 2, nothing on stdout, exactly one line "headscope: ..." on stderr.
function assertBadInput(r, ...mentions) {
  assert.equal(r.status, 2, `exit code (stderr: ${r.stderr})`);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, /^headscope: [^\n]+\n$/, `one line on stderr, got ${JSON.stringify(r.stderr)}`);
  assert.doesNotMatch(r.stderr, /\bat .*:\d+:\d+/, 'no stack trace');
  for (const m of mentions) assert.ok(r.stderr.includes(m), `stderr mentions ${m}: ${r.stderr}`);
}

test('run prints output and weights of the seed case as JSON', () => {
  const r = headscope('run', seedFile);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, '');
  const got = JSON.parse(r.stdout);
  assert.deepEqual(Object.keys(got), ['output', 'weights']);
  const want = JSON.parse(readFileSync(seedFile, 'utf8')).expected;
  assert.deepEqual(shapeOf(got.output), [3, 4]);
  assert.deepEqual(shapeOf(got.weights), [2, 3, 3]);
  assertClose(got.output, want.output, 1e-4, 'output');
  assertClose(got.weights, want.weights, 1e-4, 'weights');
  assert.ok(Math.abs(got.weights[0][1][1] - 0.768) < 5e-4);
});

test('run writes weights null without need_weights and non-finite numbers as strings', () => {
  const dir = mkdtempSync(join(tmpdir(), 'headscope-cli-'));
  try {
    const doc = structuredClone(seedWorkedExample);
    doc.inputs.need_weights = false;
    delete doc.expected;
    writeFileSync(join(dir, 'no-weights.json'), JSON.stringify(doc));
    let r = headscope('run', join(dir, 'no-weights.json'));
    assert.equal(r.status, 0, r.stderr);
    let got = JSON.parse(r.stdout);
    assert.equal(got.weights, null);
    assertClose(got.output, seedWorkedExample.expected.output, 1e-4, 'output');

    // A NaN and an infinity in the query propagate; the CLI spells them as the case format does.
    doc.inputs.need_weights = true;
    doc.inputs.query = structuredClone(doc.inputs.query);
    doc.inputs.query[0][0] = 'nan';
    doc.inputs.query[1][2] = 'inf';
    writeFileSync(join(dir, 'non-finite.json'), JSON.stringify(doc));
    r = headscope('run', join(dir, 'non-finite.json'));
    assert.equal(r.status, 0, r.stderr);
    got = JSON.parse(r.stdout);
    const values = flat(got.output);
    assert.ok(values.includes('nan'), r.stdout);
    assert.ok(values.every((v) => typeof v === 'number' || ['nan', 'inf', '-inf'].includes(v)));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('--check passes on every golden case (WebAssembly build within 1e-4)', () => {
  const files = readdirSync(goldenDir).filter((f) => f.endsWith('.json')).sort();
  assert.ok(files.length >= 70, `golden cases: ${files.length}`);
  const failures = [];
  for (const f of files) {
    const r = headscope('run', join(goldenDir, f), '--check', '--tolerance', '1e-4');
    if (r.status !== 0 || !/: ok, matches expected \(max relative error /.test(r.stderr)) {
      failures.push(`${f}: exit ${r.status}: ${r.stderr.trim()}`);
      continue;
    }
    const err = Number(/max relative error ([^,]+),/.exec(r.stderr)[1]);
    if (!(err <= 1e-4)) failures.push(`${f}: max relative error ${err}`);
    JSON.parse(r.stdout);  // the result is still printed, as valid JSON
  }
  assert.deepEqual(failures, []);
});

test('--check exits 1 on a mismatch and names it', () => {
  const r = headscope('run', join(dataDir, 'wrong-expected.json'), '--check');
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /^headscope: .*wrong-expected\.json: MISMATCH[^\n]*output[^\n]*\n$/);
  JSON.parse(r.stdout);
  // A tolerance loose enough accepts it.
  assert.equal(headscope('run', join(dataDir, 'wrong-expected.json'), '--check', '--tolerance', '0.01').status, 0);
});

test('bad input exits 2 with one line on stderr', () => {
  const dir = mkdtempSync(join(tmpdir(), 'headscope-cli-'));
  try {
    const malformed = join(dir, 'malformed.json');
    writeFileSync(malformed, '{"config": {"embed_dim": 4,');
    assertBadInput(headscope('run', malformed), 'malformed.json', 'not valid JSON');

    assertBadInput(headscope('run', join(dataDir, 'bad-num-heads.json')), 'bad-num-heads.json',
      'config.num_heads', 'divisible');
    assertBadInput(headscope('run', join(dir, 'missing.json')), 'missing.json');
    assertBadInput(headscope('run', dir), 'cannot read');
    assertBadInput(headscope('frobnicate'), 'frobnicate');
    assertBadInput(headscope());
    assertBadInput(headscope('run'), 'case file');
    assertBadInput(headscope('run', seedFile, '--tolerance', 'abc'), '--tolerance');
    assertBadInput(headscope('run', seedFile, '--bogus'), '--bogus');
    assertBadInput(headscope('example', 'extra'), 'extra');

    // Parsed JSON that is not a case: the library's message names the JSON path.
    const badShape = join(dir, 'bad-shape.json');
    const doc = structuredClone(seedWorkedExample);
    doc.inputs.query = [[1, 2, 3], [4, 5, 6]];
    writeFileSync(badShape, JSON.stringify(doc));
    assertBadInput(headscope('run', badShape), 'bad-shape.json', 'query');
    const ragged = join(dir, 'ragged.json');
    doc.inputs.query = [[1, 0, 1, 2], [0, 2, 1]];
    writeFileSync(ragged, JSON.stringify(doc));
    assertBadInput(headscope('run', ragged), 'inputs.query[1]');

    // --check on a file without expected values.
    const noExpected = join(dir, 'no-expected.json');
    const bare = structuredClone(seedWorkedExample);
    delete bare.expected;
    writeFileSync(noExpected, JSON.stringify(bare));
    const r = headscope('run', noExpected, '--check');
    assert.equal(r.status, 2);
    assert.match(r.stderr, /^headscope: [^\n]*expected[^\n]*\n$/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('--help and --version', () => {
  for (const flag of ['--help', '-h']) {
    const r = headscope(flag);
    assert.equal(r.status, 0);
    assert.match(r.stdout, /usage:/);
    assert.match(r.stdout, /headscope run FILE\.json \[--check\] \[--tolerance T\]/);
    assert.match(r.stdout, /headscope example/);
  }
  const r = headscope('--version');
  assert.equal(r.status, 0);
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  assert.equal(r.stdout.trim(), pkg.version);
});

test('example prints the seed worked example step by step', () => {
  const r = headscope('example');
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, '');
  const out = r.stdout;
  for (const title of ['X (input', 'Head 1', 'Head 2', 'W_Q^(1)', 'W_K^(1)', 'W_V^(1)', 'W_Q^(2)',
    'Q^(1) = X W_Q^(1)', 'K^(2) = X W_K^(2)', 'V^(2) = X W_V^(2)', 'scores^(1) = Q^(1) K^(1)^T / sqrt(d_k)',
    'A^(1) = softmax(scores^(1))', 'A^(2)', 'head_1 = A^(1) V^(1)', 'head_2 = A^(2) V^(2)',
    'Concat(head_1, head_2)', 'W_O', 'Y = Concat(head_1, head_2) W_O']) {
    assert.ok(out.includes(title), `section ${title}`);
  }
  const row = (label, values) => new RegExp(`${label.replace(/[()^]/g, '\\$&')} \\[ ${values.join('\\s+')} \\]`);
  // The seed's numbers (rows of scores^(1), A^(1), head_1, head_2, Concat, Y).
  assert.match(out, row('token 2', ['0.000', '2.828', '1.414']));
  assert.match(out, row('token 1', ['0.401', '0.198', '0.401']));
  assert.match(out, row('token 2', ['0.045', '0.768', '0.187']));
  assert.match(out, row('token 3', ['0.198', '0.401', '0.401']));
  assert.match(out, row('token 2', ['0.232', '1.723']));
  assert.match(out, row('token 1', ['0.898', '1.798']));
  assert.match(out, row('token 3', ['0.716', '1.436']));
  assert.match(out, row('token 2', ['0.232', '1.723', '0.802', '1.000']));
  assert.match(out, row('token 1', ['1.701', '2.595', '2.600', '1.695']));
  assert.match(out, row('token 2', ['1.034', '2.723', '1.232', '2.525']));
  assert.match(out, row('token 3', ['1.315', '2.639', '2.035', '1.919']));
  assert.ok(out.includes('Y[0][0] = 0.802*1 + 0.797*0 + 0.898*1 + 1.798*0 = 1.701'), out);
  // Columns line up: every row of a table has the same length.
  const tables = [[]];
  for (const line of out.split('\n')) {
    if (/^ {4}\S.* \[ .* \]$/.test(line)) tables.at(-1).push(line);
    else if (tables.at(-1).length) tables.push([]);
  }
  const filled = tables.filter((t) => t.length);
  assert.ok(filled.length === 22, `tables: ${filled.length}`);
  for (const t of filled) {
    assert.equal(new Set(t.map((l) => l.length)).size, 1, `aligned:\n${t.join('\n')}`);
    assert.equal(new Set(t.map((l) => l.indexOf('['))).size, 1, `aligned:\n${t.join('\n')}`);
  }
  assert.ok(!out.includes('NaN') && !out.includes('undefined'));
});

test('examples.js holds the seed case of tests/golden', () => {
  const golden = JSON.parse(readFileSync(seedFile, 'utf8'));
  assert.deepEqual(JSON.parse(JSON.stringify(seedWorkedExample)), golden);
  assert.ok(Object.isFrozen(seedWorkedExample.inputs.query[0]));
  const { heads, wo } = seedProjections();
  assert.deepEqual(heads[0].wq, [[1, 0], [0, 1], [0, 0], [0, 0]]);
  assert.deepEqual(heads[1].wv, [[0, 0], [0, 0], [1, 0], [0, 1]]);
  assert.deepEqual(wo, [[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0]]);
});
