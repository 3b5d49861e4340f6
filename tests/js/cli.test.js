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

// A case of E = 1 whose (400, 400) weights print as about 2 MB of JSON, in `dir`.
function writeBigWeightsCase(dir) {
  const doc = { config: { embed_dim: 1, num_heads: 1, bias: false },
    state_dict: { in_proj_weight: [[1], [1], [1]], 'out_proj.weight': [[1]] },
    inputs: { query: Array.from({ length: 400 }, (_, i) => [i / 400]) } };
  const file = join(dir, 'big-weights.json');
  writeFileSync(file, JSON.stringify(doc));
  return file;
}

test('a large result is written in chunks: 2 MB of JSON, valid and complete', () => {
  const dir = mkdtempSync(join(tmpdir(), 'headscope-cli-'));
  try {
    const file = writeBigWeightsCase(dir);
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

// --- --head-gates and --head-stats, in both CLIs -------------------------------------------------
//
// The native CLI (src/cli/main.cc) is run from HEADSCOPE_NATIVE_CLI, or build/native/headscope
// (cmake --preset native); these tests are skipped, saying why, when it is missing or was built
// before the flags.

const nativeCli = process.env.HEADSCOPE_NATIVE_CLI ?? join(root, 'build/native/headscope');
const nativeMissing = (() => {
  if (!existsSync(nativeCli)) return `${nativeCli} not built (HEADSCOPE_NATIVE_CLI names another)`;
  const r = spawnSync(nativeCli, ['--help'], { encoding: 'utf8' });
  if (!`${r.stdout}${r.stderr}`.includes('--head-stats')) return `${nativeCli} predates --head-stats: rebuild it`;
  return false;
})();

function native(...args) {
  const r = spawnSync(nativeCli, args, { encoding: 'utf8', cwd: root, maxBuffer: 64 << 20 });
  if (r.error) throw r.error;
  return r;
}

// The CLIs to run: the npm one always, the native one when it is built.
const clis = () => [['npm', headscope], ...(nativeMissing ? [] : [['native', native]])];

const gatesDir = join(goldenDir, 'gates');
// tests/golden/gates/head_gates.txt: "file g_0 ... g_H-1" per line.
const gatedCases = readFileSync(join(gatesDir, 'head_gates.txt'), 'utf8').split('\n')
  .filter((line) => line.trim() !== '' && !line.startsWith('#'))
  .map((line) => {
    const [file, ...gates] = line.trim().split(/\s+/);
    return { file: join(gatesDir, file), name: file, gates: gates.join(',') };
  });

// Stats as the JS API returns them, to compare the CLIs' printed ones with.
const hsApi = await import('../../web/lib/index.js').then((m) => m.init());
const { parseCase } = await import('../../web/lib/case.js');
function apiResult(file, options) {
  const c = parseCase(readFileSync(file));
  const mha = hsApi.createMultiheadAttention(c.config);
  try {
    mha.loadStateDict(c.stateDict);
    return mha.forward(c.query, c.key, c.value, { ...c.options, ...options });
  } finally {
    mha.dispose();
  }
}
const nested = ({ data, shape }) => {
  let i = 0;
  const build = (axis) => (axis === shape.length ? data[i++] : Array.from({ length: shape[axis] }, () => build(axis + 1)));
  return build(0);
};

// Float32 values of a printed tensor (the strings "nan", "inf", "-inf" as numbers).
const values = (a) => flat(a).map(fromCaseNumber);

// got within `tolerance` of want relative to max(1, max |want|), shapes equal, non-finite at the same places.
function assertNear(got, want, tolerance, what) {
  assert.deepEqual(shapeOf(got), shapeOf(want), `${what}: shape`);
  const g = values(got);
  const w = values(want);
  const scale = Math.max(1, ...w.filter(Number.isFinite).map(Math.abs));
  g.forEach((x, i) => {
    if (Number.isFinite(w[i]) && Number.isFinite(x)) {
      assert.ok(Math.abs(x - w[i]) <= tolerance * scale, `${what}[${i}]: got ${x}, expected ${w[i]}`);
    } else {
      assert.ok(Object.is(x, w[i]), `${what}[${i}]: got ${x}, expected ${w[i]}`);
    }
  });
}

test('--head-gates with --check: every gated golden case matches PyTorch\'s gated output, and only with its gates', () => {
  assert.ok(gatedCases.length >= 5, `${gatedCases.length} gated cases`);
  for (const [which, cli] of clis()) {
    for (const { file, name, gates } of gatedCases) {
      for (const args of [['--head-gates', gates], [`--head-gates=${gates}`, '--head-stats']]) {
        const r = cli('run', file, '--check', ...args);
        assert.equal(r.status, 0, `${which} ${name} ${args.join(' ')}: ${r.stderr}`);
        assert.match(r.stderr, /matches expected/, `${which} ${name}`);
        JSON.parse(r.stdout);
      }
      const ungated = cli('run', file, '--check');
      assert.equal(ungated.status, 1, `${which} ${name}: matches without its gates, so it tests nothing`);
      assert.match(ungated.stderr, /MISMATCH/);
    }
  }
});

test('--head-stats prints "head_stats" after the weights: the API\'s statistics, ([N,] H) each', () => {
  const files = ['seed-worked-example.json', 'batched-seq-first-self.json', 'need-weights-false-batched.json',
    'full-kpm-batch-element.json', 'bias-kv-zero-attn-batch-first-kpm-mask.json', 'causal-batched-self.json']
    .map((f) => join(goldenDir, f));
  let nanHeads = 0;
  for (const [which, cli] of clis()) {
    for (const file of [...files, ...gatedCases.map((g) => g.file)]) {
      const gates = gatedCases.find((g) => g.file === file)?.gates;
      const args = gates === undefined ? [] : ['--head-gates', gates];
      const r = cli('run', file, '--head-stats', ...args);
      assert.equal(r.status, 0, `${which} ${file}: ${r.stderr}`);
      const got = JSON.parse(r.stdout);
      assert.deepEqual(Object.keys(got), ['output', 'weights', 'head_stats'], `${which} ${file}`);
      assert.deepEqual(Object.keys(got.head_stats), ['entropy', 'distance', 'max_weight']);
      const want = apiResult(file, { headStats: true, headGates: gates === undefined ? null : gates.split(',').map(Number) });
      assert.equal(got.weights === null, want.weights === null, `${which} ${file}: weights`);
      for (const [json, api] of [['entropy', 'entropy'], ['distance', 'distance'], ['max_weight', 'maxWeight']]) {
        const t = want.headStats[api];
        assert.deepEqual(shapeOf(got.head_stats[json]), t.shape, `${which} ${file} ${json}: shape`);
        if (which === 'npm') {
          // The same engine: the same float32s, printed so that they read back exactly.
          assert.deepEqual(values(got.head_stats[json]).map(Math.fround), Array.from(t.data), `${file} ${json}`);
        } else {
          assertNear(got.head_stats[json], nested(t), 1e-5, `native ${file} ${json}`);
        }
        nanHeads += values(got.head_stats[json]).filter(Number.isNaN).length;
      }
      assertNear(got.output, nested(want.output), 1e-5, `${which} ${file} output`);
    }
  }
  // full-kpm-batch-element pads every key of one batch element: its heads have no row, "nan".
  assert.ok(nanHeads > 0, 'a head with every row fully masked prints "nan"');
  // The seed's statistics (tests/js/stats.test.js works them out from its weights).
  const seed = JSON.parse(headscope('run', seedFile, '--head-stats').stdout).head_stats;
  assert.deepEqual(shapeOf(seed.entropy), [2]);
  assert.ok(Math.abs(seed.entropy[0] - 0.92106694) < 1e-6 && Math.abs(seed.max_weight[1] - 0.60842633) < 1e-6, JSON.stringify(seed));
});

test('--head-stats adds its key and changes nothing else: output and weights print byte for byte as without it', () => {
  const tail = /^, "head_stats": \{"entropy": [^{}]*, "distance": [^{}]*, "max_weight": [^{}]*\}\}\n$/;
  for (const [which, cli] of clis()) {
    for (const file of [seedFile, join(goldenDir, 'need-weights-false-batched.json'), join(goldenDir, 'full-kpm-batch-element.json'),
      join(goldenDir, 'realistic-e64-h4-self-kpm.json')]) {
      const plain = cli('run', file);
      const stats = cli('run', file, '--head-stats');
      assert.equal(plain.status, 0, plain.stderr);
      assert.equal(stats.status, 0, stats.stderr);
      const head = plain.stdout.slice(0, -2);  // without '}\n'
      assert.ok(plain.stdout.endsWith('}\n') && stats.stdout.startsWith(head), `${which} ${file}`);
      assert.match(stats.stdout.slice(head.length), tail, `${which} ${file}`);
    }
    // All-ones gates are no gates.
    assert.equal(cli('run', seedFile, '--head-gates', '1,1').stdout, cli('run', seedFile).stdout, which);
  }
});

test('both CLIs print the same JSON for the same case and flags (the same keys, shapes, non-finite places; numbers within float rounding)', (t) => {
  if (nativeMissing) {
    t.skip(nativeMissing);
    return;
  }
  // Not the same bytes: the native CLI prints %.9g ("0.197775811"), the npm CLI the shortest
  // decimal that reads back as the same float32 ("0.19777581"), and the native kernels (AVX2,
  // AVX-512) and WebAssembly SIMD128 sum in different orders, a few float32 ulps apart. Read back
  // as float32 the two agree within 1e-5 of each tensor's scale.
  const files = readdirSync(goldenDir).filter((f) => f.endsWith('.json')).map((f) => join(goldenDir, f));
  const runs = [];
  for (const file of files) runs.push([file, []], [file, ['--head-stats']]);
  for (const { file, gates } of gatedCases) runs.push([file, ['--head-gates', gates]], [file, ['--head-stats', '--head-gates', gates]]);
  runs.push([seedFile, ['--head-gates', 'nan,1', '--head-stats']], [seedFile, ['--head-gates', '-inf,0', '--head-stats']]);
  for (const [file, args] of runs) {
    const a = headscope('run', file, ...args);
    const b = native('run', file, ...args);
    assert.equal(a.status, 0, `npm ${file} ${args}: ${a.stderr}`);
    assert.equal(b.status, 0, `native ${file} ${args}: ${b.stderr}`);
    const ja = JSON.parse(a.stdout);
    const jb = JSON.parse(b.stdout);
    assert.deepEqual(Object.keys(jb), Object.keys(ja), `${file} ${args}: keys`);
    assertNear(jb.output, ja.output, 1e-5, `${file} ${args}: output`);
    if (ja.weights === null) assert.equal(jb.weights, null);
    else assertNear(jb.weights, ja.weights, 1e-5, `${file} ${args}: weights`);
    if (ja.head_stats !== undefined) {
      assert.deepEqual(Object.keys(jb.head_stats), Object.keys(ja.head_stats));
      for (const k of Object.keys(ja.head_stats)) {
        assertNear(jb.head_stats[k], ja.head_stats[k], 1e-5, `${file} ${args}: head_stats.${k}`);
      }
    }
  }
});

test('--head-gates spellings: numbers in any decimal form, inf, -inf, nan; = or a separate argument', () => {
  const api = (gates) => apiResult(seedFile, { headGates: gates }).output;
  for (const [which, cli] of clis()) {
    const out = (...args) => {
      const r = cli('run', seedFile, ...args);
      assert.equal(r.status, 0, `${which} ${args}: ${r.stderr}`);
      return JSON.parse(r.stdout).output;
    };
    const half = out('--head-gates', '1,0.5');
    for (const spelling of ['1.,.5', '+1,5e-1', '1E0,0.50', '10e-1,5.0E-01', '1.0e+0,.5e0']) {
      assert.deepEqual(out('--head-gates', spelling), half, `${which} ${spelling}`);
    }
    assert.deepEqual(out('--head-gates=1,0.5'), half, which);
    if (which === 'npm') assert.deepEqual(values(half).map(Math.fround), Array.from(api([1, 0.5]).data));
    else assertNear(half, nested(api([1, 0.5])), 1e-5, 'native');
    // Non-finite gates propagate as concat * gates does (out_proj mixes head 0 into every column).
    for (const [spelling, gates] of [['nan,1', [NaN, 1]], ['inf,1', [Infinity, 1]], ['-inf,1', [-Infinity, 1]], ['+inf,0', [Infinity, 0]]]) {
      const got = out('--head-gates', spelling);
      const want = nested(apiResult(seedFile, { headGates: gates }).output);
      assert.deepEqual(values(got).map((x) => (Number.isFinite(x) ? 'finite' : x)),
        flat(want).map((x) => (Number.isFinite(x) ? 'finite' : x)), `${which} ${spelling}`);
      assert.ok(values(got).some((x) => !Number.isFinite(x)), `${which} ${spelling}`);
    }
    // A gate beyond float32 is inf, as Float32Array makes it; below its smallest subnormal, 0.
    assert.deepEqual(out('--head-gates', '1e39,1'), out('--head-gates', 'inf,1'), which);
    assert.deepEqual(out('--head-gates', '1e-50,1'), out('--head-gates', '0,1'), which);
  }
});

test('bad --head-gates lists exit 2 with a message naming --head-gates (the same in both CLIs)', () => {
  const lists = [
    ['', 'got ""'], ['x', '(item 1, "x", is not a number)'], ['1,', '(item 2, "", is not a number)'],
    [',1', '(item 1, "", is not a number)'], ['1,,2', '(item 2, "", is not a number)'], ['1;2', '"1;2"'],
    [' 1,2', '(item 1, " 1", is not a number)'], ['1, 2', '(item 2, " 2", is not a number)'],
    ['0x10,1', '"0x10"'], ['infinity,1', '"infinity"'], ['NaN,1', '"NaN"'], ['Inf,1', '"Inf"'],
    ['1e,2', '"1e"'], ['.,1', '"."'], ['1_000,1', '"1_000"'], ['--check', '"--check"'],
  ];
  for (const [which, cli] of clis()) {
    const firstLine = (r) => r.stderr.split('\n')[0];
    for (const [list, mention] of lists) {
      for (const args of [['--head-gates', list], [`--head-gates=${list}`]]) {
        const r = cli('run', seedFile, ...args);
        if (which === 'npm') assertBadInput(r, '--head-gates: expected comma-separated numbers', mention);
        assert.equal(r.status, 2, `${which} ${args}`);
        assert.equal(r.stdout, '', `${which} ${args}`);
        assert.ok(firstLine(r).startsWith('headscope: --head-gates: expected comma-separated numbers, one per head ' +
          '(inf, -inf, nan allowed), got ') && firstLine(r).includes(mention), `${which} ${args}: ${firstLine(r)}`);
        if (which === 'native') assert.equal(firstLine(r), firstLine(headscope('run', seedFile, ...args)), `${args}`);
      }
    }
    const nothing = cli('run', seedFile, '--head-gates');
    assert.equal(nothing.status, 2);
    assert.ok(firstLine(nothing).endsWith('got nothing'), `${which}: ${nothing.stderr}`);
    // One number per head of the case: its num_heads, checked before anything runs.
    for (const [list, n] of [['1', 1], ['1,0,1', 3]]) {
      const r = cli('run', seedFile, '--head-gates', list, '--head-stats');
      assertBadInput(r, `${seedFile}: --head-gates: expected 2 numbers (one per head), got ${n}`);
    }
    assertBadInput(cli('run', join(gatesDir, 'gates-zero-head0-causal-kpm.json'), '--head-gates', '0,1'),
      '--head-gates: expected 4 numbers (one per head), got 2');
    // --head-stats takes no value.
    assert.equal(cli('run', seedFile, '--head-stats=true').status, 2, which);
  }
});

test('--max-output-bytes counts the head statistics: 3 x ([N,] H) numbers and their keys, the same bound in both CLIs', () => {
  const bound = (cli, file, ...args) => {
    const r = cli('run', file, '--max-output-bytes', '0', ...args);
    assert.equal(r.status, 2, r.stderr);
    const m = /its JSON text could take (\d+) bytes \(([^)]*)\)/.exec(r.stderr);
    assert.ok(m, r.stderr);
    return { bytes: Number(m[1]), shapes: m[2], line: r.stderr.split('\n')[0] };
  };
  const batched = join(goldenDir, 'batched-seq-first-self.json');
  const N = shapeOf(JSON.parse(readFileSync(batched, 'utf8')).inputs.query)[1];
  const H = JSON.parse(readFileSync(batched, 'utf8')).config.num_heads;
  for (const [which, cli] of clis()) {
    // The seed: unbatched, 2 heads: 64 bytes of keys, three arrays of 2 numbers (17 bytes each, 4 an array).
    const plain = bound(cli, seedFile);
    const stats = bound(cli, seedFile, '--head-stats');
    assert.equal(stats.bytes, plain.bytes + 64 + 3 * (2 * 17 + 4), which);
    assert.equal(stats.shapes, `${plain.shapes}, head_stats 3 x [2]`, which);
    assertBadInput(headscope('run', seedFile, '--head-stats', '--max-output-bytes', String(stats.bytes - 1)),
      `RESOURCE_EXHAUSTED: result: its JSON text could take ${stats.bytes} bytes`, '(--max-output-bytes raises it)');
    assert.equal(cli('run', seedFile, '--head-stats', '--max-output-bytes', String(stats.bytes - 1)).status, 2, which);
    assert.equal(cli('run', seedFile, '--head-stats', '--max-output-bytes', String(stats.bytes)).status, 0, which);
    assert.equal(cli('run', seedFile, '--max-output-bytes', String(stats.bytes - 1)).status, 0, which);
    // Batched: (N, H) each.
    const b0 = bound(cli, batched);
    const b1 = bound(cli, batched, '--head-stats');
    assert.equal(b1.bytes, b0.bytes + 64 + 3 * (N * H * 17 + (1 + N) * 4), which);
    assert.ok(b1.shapes.endsWith(`head_stats 3 x [${N}, ${H}]`), b1.shapes);
    if (which === 'native') {
      assert.equal(stats.line, bound(headscope, seedFile, '--head-stats').line);
      assert.equal(b1.line, bound(headscope, batched, '--head-stats').line);
    }
    // The bound holds: no printed result with statistics is longer.
    for (const f of readdirSync(goldenDir).filter((x) => x.endsWith('.json')).slice(0, 30)) {
      const file = join(goldenDir, f);
      const r = cli('run', file, '--head-stats');
      assert.equal(r.status, 0, r.stderr);
      assert.ok(Buffer.byteLength(r.stdout) <= bound(cli, file, '--head-stats').bytes, `${which} ${f}`);
    }
  }
});

test('a large result with --head-stats is written in chunks, valid and complete, in both CLIs', () => {
  const dir = mkdtempSync(join(tmpdir(), 'headscope-cli-'));
  try {
    const file = writeBigWeightsCase(dir);
    for (const [which, cli] of clis()) {
      const r = cli('run', file, '--head-stats');
      assert.equal(r.status, 0, r.stderr);
      assert.ok(r.stdout.length > (1 << 20), `${which}: ${r.stdout.length} bytes`);
      const got = JSON.parse(r.stdout);
      assert.deepEqual(shapeOf(got.weights), [400, 400]);
      // Nearly uniform rows over 400 keys: entropy near ln 400, max weight near 1/400.
      assert.ok(Math.abs(got.head_stats.entropy[0] - Math.log(400)) < 0.05, `${which}: ${got.head_stats.entropy}`);
      assert.ok(Math.abs(got.head_stats.max_weight[0] - 1 / 400) < 1e-3, `${which}: ${got.head_stats.max_weight}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('--help of both CLIs describes --head-gates and --head-stats', () => {
  const texts = [['npm', headscope('--help').stdout]];
  if (!nativeMissing) texts.push(['native', native('--help').stderr]);
  for (const [which, text] of texts) {
    assert.match(text, /--head-gates G0,G1,\.\.\./, which);
    assert.match(text, /--head-stats/, which);
    assert.match(text, /"head_stats": \{"entropy", "distance",\s+"max_weight"\}/, which);
    assert.match(text, /inf, -inf, nan allowed/, which);
  }
});

// A case file with a state_dict key (or any text a message repeats) holding control characters:
// every message of both CLIs is one line, with those characters as escapes.
const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

test('messages on stderr are one line: control, DEL, C1 and bidi characters from a case file or a file name are escaped (both CLIs)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'headscope-cli-escape-'));
  try {
    const seed = JSON.parse(readFileSync(seedFile, 'utf8'));
    // A key that would clear the screen and forge a second "ok" line, and one with the other classes.
    const forged = 'w\u001b[2J\u001b[H\nheadscope: seed.json: ok, matches expected\r';
    const others = 'k\u0007\u007f\u009b31m\u202eevil\u2066\u2028\t\u0000';
    // (A key reaches the message quoted by the library, QuoteInput / quoteInput: every character
    // it hides as \uXXXX; a file name, below, by the CLI, which writes \n, \r and \t.)
    for (const [key, escaped] of [
      [forged, 'w\\u001b[2J\\u001b[H\\u000aheadscope: seed.json: ok, matches expected\\u000d'],
      [others, 'k\\u0007\\u007f\\u009b31m\\u202eevil\\u2066\\u2028\\u0009\\u0000'],
    ]) {
      const file = join(dir, 'key.json');
      writeFileSync(file, JSON.stringify({ ...seed, state_dict: { ...seed.state_dict, [key]: [1] } }));
      for (const [which, cli] of clis()) {
        const r = cli('run', file, '--check');
        assert.equal(r.status, 2, `${which}: ${r.stderr}`);
        assert.equal(r.stdout, '', which);
        assert.match(r.stderr, /^headscope: [^\n]+\n$/, `${which}: one line: ${JSON.stringify(r.stderr)}`);
        assert.doesNotMatch(r.stderr.slice(0, -1), RAW_CONTROL, `${which}: no raw control character: ${JSON.stringify(r.stderr)}`);
        assert.ok(r.stderr.includes(escaped), `${which}: the key, escaped: ${r.stderr}`);
      }
    }
    // A file name with a newline and ESC: the "ok" line of --check is still one line.
    const named = join(dir, 'seed\n\u001b[31mred\u009b.json');
    writeFileSync(named, readFileSync(seedFile));
    for (const [which, cli] of clis()) {
      const r = cli('run', named, '--check');
      assert.equal(r.status, 0, `${which}: ${r.stderr}`);
      assert.match(r.stderr, /^headscope: [^\n]+\n$/, `${which}: ${JSON.stringify(r.stderr)}`);
      assert.ok(r.stderr.includes('seed\\n\\u001b[31mred\\u009b.json: '), `${which}: ${r.stderr}`);
      assert.match(r.stderr, /matches expected/, which);
      // An unexpected argument is repeated in its message: escaped too.
      const bad = cli('run', seedFile, '--x\u001b]0;title\u0007');
      assert.equal(bad.status, 2, which);
      assert.match(firstLine(bad), /^headscope: (run: )?unexpected argument '--x\\u001b\]0;title\\u0007'$/, `${which}: ${bad.stderr}`);
      assert.doesNotMatch(bad.stderr, RAW_CONTROL, which);
      // Printable text outside ASCII stays as it is.
      const accents = join(dir, 'café-日本.json');
      writeFileSync(accents, readFileSync(seedFile));
      assert.match(cli('run', accents, '--check').stderr, /café-日本\.json: ok|café-日本\.json: matches/, which);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// The native CLI prints its usage after a usage error's line; the npm one only the line.
const firstLine = (r) => r.stderr.split('\n')[0];

test('--tolerance takes a decimal number only (0x10 is not 16), the same in both CLIs; byte counts decimal digits only', () => {
  const wrong = join(dataDir, 'wrong-expected.json');  // max relative error 0.00367
  const expected = 'headscope: --tolerance: expected a finite non-negative decimal number (such as 0.001 or 1e-4), got ';
  for (const [which, cli] of clis()) {
    for (const text of ['0x10', '0X10', '0b1', '0o7', '0x1p-3', '1_0', ' 1', '1 ', '', 'Infinity', 'inf', 'nan', 'NaN',
      '-1', '-0.5', '1e999', '1e', '.', 'e5', '1,5', '\u0661', '--check']) {
      for (const args of [['--tolerance', text], [`--tolerance=${text}`]]) {
        const r = cli('run', wrong, '--check', ...args);
        assert.equal(r.status, 2, `${which} ${JSON.stringify(args)}: ${r.stderr}`);
        assert.equal(r.stdout, '', `${which} ${JSON.stringify(args)}`);
        assert.equal(firstLine(r), `${expected}${JSON.stringify(text)}`, `${which} ${JSON.stringify(args)}`);
        if (which === 'npm') assert.equal(r.stderr, `${firstLine(r)}\n`, 'npm: one line');
      }
    }
    const nothing = cli('run', wrong, '--check', '--tolerance');
    assert.equal(firstLine(nothing), `${expected}nothing`, which);
    // Decimal spellings: the mismatch (0.00367) passes a tolerance of 0.01 and fails 0.001.
    for (const text of ['0.01', '1e-2', '1E-2', '.01', '10e-3', '+0.01', '0.010', '1', '16']) {
      assert.equal(cli('run', wrong, '--check', '--tolerance', text).status, 0, `${which} ${text}`);
      assert.equal(cli('run', wrong, '--check', `--tolerance=${text}`).status, 0, `${which} =${text}`);
    }
    for (const text of ['0.001', '1e-3', '0', '0.0']) {
      const r = cli('run', wrong, '--check', '--tolerance', text);
      assert.equal(r.status, 1, `${which} ${text}: ${r.stderr}`);
    }
    // Byte counts: digits only, with the flag and the text in the message.
    for (const flag of ['--max-input-bytes', '--max-output-bytes']) {
      for (const text of ['0x10', '1e6', '+10', ' 10', '10.0', '10 ', '-1', '']) {
        const r = cli('run', seedFile, flag, text);
        assert.equal(r.status, 2, `${which} ${flag} ${text}`);
        assert.equal(firstLine(r), `headscope: ${flag}: expected a number of bytes (0 to 2^63), got ${JSON.stringify(text)}`, which);
      }
    }
  }
});
