// The command line (web/lib/cli.js), run as a child process the way npm's bin shim runs it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
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
  const r = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', cwd: root, maxBuffer: 64 << 20 });
  if (r.error) throw r.error;
  return r;
}

// Runs the CLI with a shell pipeline feeding stdin (`input` is a shell command), within
// `seconds`; reports how long it took and its peak RSS (a preload writes
// process.resourceUsage().maxRSS to a file as the process exits).
function measured(args, { input = null, seconds = 30 } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'headscope-cli-rss-'));
  try {
    const preload = join(dir, 'rss.cjs');
    const out = join(dir, 'rss.txt');
    writeFileSync(preload, `process.on('exit', () => require('fs').writeFileSync(${JSON.stringify(out)}, ` +
      'String(process.resourceUsage().maxRSS)));\n');
    const quote = (a) => `'${a.replace(/'/g, "'\\''")}'`;
    const command = [process.execPath, '-r', preload, cli, ...args].map(quote).join(' ');
    const t0 = Date.now();
    const r = spawnSync('sh', ['-c', input === null ? command : `${input} | ${command}`],
      { encoding: 'utf8', cwd: root, timeout: seconds * 1000, killSignal: 'SIGKILL' });
    const ms = Date.now() - t0;
    if (r.error) throw r.error;
    const maxRssKiB = existsSync(out) ? Number(readFileSync(out, 'utf8')) : NaN;
    return { ...r, ms, maxRssMiB: maxRssKiB / 1024 };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
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
    assertBadInput(headscope('run', dir), 'IO_ERROR', `${dir}: cannot read (Is a directory)`);
    assertBadInput(headscope('frobnicate'), 'frobnicate');
    assertBadInput(headscope());
    assertBadInput(headscope('run'), 'case file');
    assertBadInput(headscope('run', seedFile, '--tolerance', 'abc'), '--tolerance');
    assertBadInput(headscope('run', seedFile, '--bogus'), '--bogus');
    assertBadInput(headscope('run', seedFile, '--max-input-bytes', '-1'), '--max-input-bytes', 'number of bytes');
    assertBadInput(headscope('run', seedFile, '--max-output-bytes=1e9'), '--max-output-bytes', 'number of bytes');
    assertBadInput(headscope('run', seedFile, '--max-output-bytes'), '--max-output-bytes', 'got nothing');
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

// --- bounded input and output ------------------------------------------------------------------

test('/dev/zero and an endless pipe are refused at the input limit: exit 2, one line, in seconds', () => {
  for (const [what, args, input] of [
    ['/dev/zero', ['run', '/dev/zero'], null],
    ['an endless pipe', ['run', '-'], 'yes "[0,"'],
    ['an endless pipe under a lowered limit', ['run', '-', '--max-input-bytes', '1000000'], 'yes "[0,"'],
  ]) {
    const r = measured(args, { input });
    assertBadInput(r, 'RESOURCE_EXHAUSTED', 'more than the limit of', '--max-input-bytes');
    assert.ok(r.ms < 20000, `${what}: ${r.ms} ms`);
    // Read in chunks up to the limit (256 MiB, or 1 MB), never more.
    assert.ok(r.maxRssMiB < (args.length > 2 ? 150 : 700), `${what}: peak RSS ${r.maxRssMiB} MiB`);
  }
});

test('stdin and --max-input-bytes: a case from a pipe runs; one byte over the limit is refused', () => {
  const size = readFileSync(seedFile).length;
  let r = measured(['run', '-', '--max-input-bytes', String(size)], { input: `cat '${seedFile}'` });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(Object.keys(JSON.parse(r.stdout)), ['output', 'weights']);
  r = headscope('run', seedFile, `--max-input-bytes=${size - 1}`);
  assertBadInput(r, 'RESOURCE_EXHAUSTED', `${size} bytes, more than the limit of ${size - 1} bytes`);
});

test('a small case asking for gigabytes of output is refused from its shapes, quickly, with low RSS', () => {
  const dir = mkdtempSync(join(tmpdir(), 'headscope-cli-'));
  try {
    // 65 KB: 16384 tokens of one dimension; averaged weights 16384 x 16384 = 4.5 GB of JSON.
    const doc = { config: { embed_dim: 1, num_heads: 1, bias: false },
      state_dict: { in_proj_weight: [[1], [1], [1]], 'out_proj.weight': [[1]] },
      inputs: { query: Array.from({ length: 16384 }, () => [0]) } };
    const file = join(dir, 'huge-weights.json');
    writeFileSync(file, JSON.stringify(doc));
    const r = measured(['run', file]);
    assertBadInput(r, 'huge-weights.json: RESOURCE_EXHAUSTED: result: its JSON text could take 4563812392 ' +
      'bytes (output [16384, 1], weights [16384, 16384]), more than the limit of 268435456 bytes ' +
      '(--max-output-bytes raises it)');
    assert.ok(r.ms < 10000, `${r.ms} ms`);
    assert.ok(r.maxRssMiB < 200, `peak RSS ${r.maxRssMiB} MiB`);
    // Without weights the output is small and is printed.
    doc.inputs.need_weights = false;
    writeFileSync(file, JSON.stringify(doc));
    const ok = headscope('run', file);
    assert.equal(ok.status, 0, ok.stderr);
    assert.equal(JSON.parse(ok.stdout).output.length, 16384);
    // The limit is the caller's to set, both ways.
    assertBadInput(headscope('run', seedFile, '--max-output-bytes', '100'), 'RESOURCE_EXHAUSTED', 'limit of 100 bytes');
    assert.equal(headscope('run', seedFile, '--max-output-bytes', '100000').status, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a large result is written in chunks: 2 MB of JSON, valid and complete', () => {
  const dir = mkdtempSync(join(tmpdir(), 'headscope-cli-'));
  try {
    const doc = { config: { embed_dim: 1, num_heads: 1, bias: false },
      state_dict: { in_proj_weight: [[1], [1], [1]], 'out_proj.weight': [[1]] },
      inputs: { query: Array.from({ length: 400 }, (_, i) => [i / 400]) } };
    const file = join(dir, 'big-weights.json');
    writeFileSync(file, JSON.stringify(doc));
    const r = headscope('run', file);
    assert.equal(r.status, 0, r.stderr);
    assert.ok(r.stdout.length > (1 << 20), `${r.stdout.length} bytes`);
    const got = JSON.parse(r.stdout);
    assert.deepEqual(shapeOf(got.weights), [400, 400]);
    for (const row of got.weights) assert.ok(Math.abs(row.reduce((a, b) => a + b, 0) - 1) < 1e-5);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
