#!/usr/bin/env node
// headscope's command line (the npm package's `bin`):
//
//   headscope run FILE.json [--check] [--tolerance T]   run a case file, print output + weights
//   headscope example                                   the seed's worked example, step by step
//
// Exit codes: 0 ok, 1 --check mismatch, 2 bad input (one line on stderr, "headscope: ..."),
// 3 headscope itself failed: the WebAssembly module did not load, or an internal error (a bug);
// one line on stderr too.
import { parseCase } from './case.js';
import { readFileSync } from 'node:fs';
import { HeadscopeError } from './errors.js';
import { projectionMatrices, seedWorkedExample } from './examples.js';

// Loaded on first use, so that a missing build is one line on stderr rather than a stack trace.
let api = null;
async function headscope() {
  if (api === null) {
    try {
      api = await import('./index.js');
    } catch (e) {
      throw new LoadError(`cannot load headscope's WebAssembly module (${e.message}); ` +
        'in a source checkout, build it with `npm run build`');
    }
  }
  let hs;
  try {
    hs = await api.init();
  } catch (e) {
    throw new LoadError(`cannot load headscope's WebAssembly module (${e?.message ?? e})`);
  }
  return { hs, parseCase };
}

const USAGE = `usage:
  headscope run FILE.json [--check] [--tolerance T]
      Runs one case file (the JSON case format: config, state_dict, inputs, optional expected)
      and prints {"output": ..., "weights": ...} as JSON; weights is null when need_weights is
      false, and non-finite numbers are written "inf", "-inf", "nan".
      --check        compare with the file's "expected", exit 1 on mismatch
      --tolerance T  relative error allowed by --check (default 1e-4)
  headscope example
      Prints the seed's worked example (3 tokens, 4 dims, 2 heads) step by step.
  headscope --help | -h      this text
  headscope --version        the package version

Exit codes: 0 ok, 1 --check mismatch, 2 bad input, 3 headscope failed (module not loaded, bug).`;

class UsageError extends Error {}
class LoadError extends Error {}

function version() {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
  return pkg.version;
}

// ---------------------------------------------------------------------------------------------
// run

function parseRunArgs(args) {
  let file = null;
  let check = false;
  let tolerance = 1e-4;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--check') {
      check = true;
    } else if (a === '--tolerance' || a.startsWith('--tolerance=')) {
      const text = a === '--tolerance' ? args[++i] : a.slice('--tolerance='.length);
      const t = text === undefined || text.trim() === '' ? NaN : Number(text);
      if (!(t >= 0) || !Number.isFinite(t)) {
        throw new UsageError(`--tolerance: expected a non-negative number, got ${
          text === undefined ? 'nothing' : JSON.stringify(text)}`);
      }
      tolerance = t;
    } else if ((a.startsWith('-') && a !== '-') || file !== null) {
      throw new UsageError(`run: unexpected argument '${a}'`);
    } else {
      file = a;
    }
  }
  if (file === null) throw new UsageError('run: expected a case file (headscope run FILE.json)');
  return { file, check, tolerance };
}

function readCaseFile(file) {
  let text;
  try {
    text = readFileSync(file === '-' ? 0 : file, 'utf8');
  } catch (e) {
    const why = { ENOENT: 'no such file', EACCES: 'permission denied', EISDIR: 'is a directory' };
    throw new UsageError(`${file}: cannot read (${why[e.code] ?? e.message})`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new UsageError(`${file}: not valid JSON (${e.message})`);
  }
}

// Shortest decimal that reads back as the same float32 (what %.9g gives, without the noise).
function formatNumber(x) {
  if (Number.isNaN(x)) return '"nan"';
  if (x === Infinity) return '"inf"';
  if (x === -Infinity) return '"-inf"';
  if (Object.is(x, -0)) return '-0';
  for (let p = 1; p < 17; p++) {
    const s = x.toPrecision(p);
    if (Math.fround(Number(s)) === x) return String(Number(s));
  }
  return String(x);
}

function toJson(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return `[${value.map(toJson).join(', ')}]`;
  return formatNumber(value);
}

async function run(args) {
  const { file, check, tolerance } = parseRunArgs(args);
  const doc = readCaseFile(file);
  const { hs } = await headscope();
  let result;
  try {
    result = hs.runCase(doc);
  } catch (e) {
    if (e instanceof HeadscopeError && e.code !== 'INTERNAL') throw new UsageError(`${file}: ${e.message}`);
    throw e;
  }
  const output = result.output.toArray();
  const weights = result.weights === null ? null : result.weights.toArray();
  process.stdout.write(`{"output": ${toJson(output)}, "weights": ${toJson(weights)}}\n`);
  if (!check) return 0;
  if (doc.expected === undefined || doc.expected === null) {
    throw new UsageError(`${file}: --check needs an "expected" member`);
  }
  const cmp = hs.checkCase(doc, result, { tolerance });
  const err = cmp.maxRelativeError.toPrecision(3);
  if (cmp.ok) {
    process.stderr.write(`headscope: ${file}: ok, matches expected (max relative error ${err}, ` +
      `tolerance ${tolerance}, ${hs.kernelTarget})\n`);
    return 0;
  }
  process.stderr.write(`headscope: ${file}: MISMATCH (tolerance ${tolerance}): ${cmp.detail}\n`);
  return 1;
}

// ---------------------------------------------------------------------------------------------
// example

const fmt = (x) => {
  const s = x.toFixed(3);
  return s === '-0.000' ? '0.000' : s;
};
// A weight of W_O in the Y[0][0] line: "1" rather than "1.000" when it is an integer.
const fmtWeight = (x) => (Number.isInteger(x) ? String(x) : fmt(x));

/** A titled table: row labels on the left, optional column labels, numbers right-aligned. */
function table(title, matrix, { rows, cols } = {}) {
  const cells = matrix.map((row) => row.map(fmt));
  const rowLabels = rows ?? matrix.map(() => '');
  const labelWidth = Math.max(0, ...rowLabels.map((l) => l.length));
  const width = Math.max(...cells.flat().map((c) => c.length), ...(cols ?? []).map((c) => c.length));
  const pad = (s) => s.padStart(width);
  const lines = [title];
  const indent = '    ';
  if (cols) lines.push(`${indent}${''.padEnd(labelWidth)}   ${cols.map(pad).join('  ')}`);
  cells.forEach((row, i) => {
    lines.push(`${indent}${rowLabels[i].padEnd(labelWidth)} [ ${row.map(pad).join('  ')} ]`);
  });
  return lines.join('\n');
}

const labels = (prefix, n) => Array.from({ length: n }, (_, i) => `${prefix} ${i + 1}`);

async function example(args) {
  if (args.length > 0) throw new UsageError(`example: unexpected argument '${args[0]}'`);
  const { hs, parseCase } = await headscope();
  const doc = seedWorkedExample;
  const c = parseCase(doc);
  const mha = hs.createMultiheadAttention(c.config);
  let t;
  try {
    mha.loadStateDict(c.stateDict);
    t = mha.trace(c.query, c.key, c.value, c.options);
  } finally {
    mha.dispose();
  }
  const { heads, wo } = projectionMatrices(doc);
  const x = doc.inputs.query;
  const L = x.length;
  const E = c.config.embedDim;
  const H = c.config.numHeads;
  const hd = E / H;
  const q = t.q.toArray();
  const k = t.k.toArray();
  const v = t.v.toArray();
  const scores = t.scores.toArray();
  const weights = t.weights.toArray();
  const headOutputs = t.headOutputs.toArray();
  const concat = t.concat.toArray();
  const y = t.output.toArray();

  const tokens = labels('token', L);
  const keys = labels('key', L);
  const dims = labels('dim', E);
  const out = [];
  out.push('headscope: the worked example of the seed article, step by step');
  out.push(`(${L} tokens x ${E} dims, ${H} heads of d_k = ${hd}, no biases; every value below ` +
    `comes from headscope's WebAssembly engine, kernels: ${hs.kernelTarget})`);
  out.push('');
  out.push(table(`X (input: ${L} tokens x ${E} dims)`, x, { rows: tokens }));
  for (let h = 0; h < H; h++) {
    const n = h + 1;
    out.push('');
    out.push(`=== Head ${n} ===`);
    out.push('');
    out.push(table(`W_Q^(${n})`, heads[h].wq, { rows: dims }));
    out.push(table(`W_K^(${n})`, heads[h].wk, { rows: dims }));
    out.push(table(`W_V^(${n})`, heads[h].wv, { rows: dims }));
    out.push('');
    out.push(table(`Q^(${n}) = X W_Q^(${n})`, q[h], { rows: tokens }));
    out.push(table(`K^(${n}) = X W_K^(${n})`, k[h], { rows: tokens }));
    out.push(table(`V^(${n}) = X W_V^(${n})`, v[h], { rows: tokens }));
    out.push('');
    out.push(table(`scores^(${n}) = Q^(${n}) K^(${n})^T / sqrt(d_k)   (d_k = ${hd})`, scores[h],
      { rows: tokens, cols: keys }));
    out.push(table(`A^(${n}) = softmax(scores^(${n}))   (attention weights, each row sums to 1)`,
      weights[h], { rows: tokens, cols: keys }));
    out.push(table(`head_${n} = A^(${n}) V^(${n})`, headOutputs[h], { rows: tokens }));
  }
  out.push('');
  out.push('=== Concat and output projection ===');
  out.push('');
  const headNames = Array.from({ length: H }, (_, h) => `head_${h + 1}`).join(', ');
  out.push(table(`Concat(${headNames})   (columns side by side)`, concat, { rows: tokens }));
  out.push(table('W_O   (= torch out_proj.weight transposed)', wo, { rows: dims }));
  out.push(table(`Y = Concat(${headNames}) W_O`, y, { rows: tokens }));
  out.push('');
  const terms = concat[0].map((value, j) => `${fmt(value)}*${fmtWeight(wo[j][0])}`).join(' + ');
  out.push(`Y[0][0] = ${terms} = ${fmt(y[0][0])}`);
  out.push('(the seed prints 1.700: it adds intermediates already rounded to 3 decimals)');
  process.stdout.write(`${out.join('\n')}\n`);
  return 0;
}

// ---------------------------------------------------------------------------------------------

async function main(argv) {
  const [command, ...rest] = argv;
  if (command === undefined) throw new UsageError('expected a command: run or example (see --help)');
  if (command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (command === '--version' || command === '-v') {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  if ((command === 'run' || command === 'example') && (rest.includes('--help') || rest.includes('-h'))) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (command === 'run') return run(rest);
  if (command === 'example') return example(rest);
  throw new UsageError(`unknown command '${command}' (expected run or example; see --help)`);
}

// A reader that goes away (`headscope example | head`) is not an error.
process.stdout.on('error', (e) => {
  if (e.code === 'EPIPE') process.exit(process.exitCode ?? 0);
  process.stderr.write(`headscope: cannot write the output (${e.message})\n`);
  process.exit(2);
});

const oneLine = (s) => String(s).replace(/\s*\n\s*/g, ' ');

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (e) {
  if (e instanceof UsageError) {
    process.stderr.write(`headscope: ${oneLine(e.message)}\n`);
    process.exitCode = 2;
  } else if (e instanceof HeadscopeError && e.code !== 'INTERNAL') {
    process.stderr.write(`headscope: ${oneLine(e.message)}\n`);
    process.exitCode = 2;
  } else if (e instanceof LoadError) {
    process.stderr.write(`headscope: ${oneLine(e.message)}\n`);
    process.exitCode = 3;
  } else {
    process.stderr.write(`headscope: internal error, please report it: ${oneLine(e?.message ?? e)}\n`);
    process.exitCode = 3;
  }
}
