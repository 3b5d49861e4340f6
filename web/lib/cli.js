#!/usr/bin/env node
// headscope's command line (the npm package's `bin`):
//
//   headscope run FILE.json|- [--check] [--tolerance T] [--head-gates G0,G1,...] [--head-stats]
//                 [--max-input-bytes N] [--max-output-bytes N]
//                                                       run a case file, print output + weights
//                                                       (a transformer case: logits, loss, hooks)
//   headscope example                                   the seed's worked example, step by step
//
// Exit codes: 0 ok, 1 --check mismatch, 2 bad input (one line on stderr, "headscope: ..."): a file
// that cannot be read (IO_ERROR), a document that is not a case (PARSE_ERROR, ...), a file over
// --max-input-bytes or a result over --max-output-bytes (RESOURCE_EXHAUSTED, checked from the
// shapes before anything is computed); 3 headscope itself failed: the WebAssembly module did not
// load, or an internal error (a bug); one line on stderr too. The same codes and limits as the
// native CLI (src/cli/main.cc). A message on stderr is always one line: characters that could
// end it or act on a terminal are written as escapes (printable below).
import {
  MAX_CASE_BYTES, MAX_RESULT_JSON_BYTES, checkResultJsonSize, compareWithExpected, parseCase,
  resultJsonBytesBound, resultWeightsShape, tensorJsonBytesBound,
} from './case.js';
import { closeSync, fstatSync, openSync, readFileSync, readSync } from 'node:fs';
import { HeadscopeError } from './errors.js';
import { projectionMatrices, seedWorkedExample } from './examples.js';
import { callDims } from './shapes.js';

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

// Every line on stderr is one message: "headscope: " and the message with each character that
// could end the line or drive the terminal written as an escape (a file name or a state_dict key
// from a case file is in many messages): the C0 controls (\n, \r, \t, else \u00XX), DEL, the
// C1 controls, the bidirectional marks, embeddings, overrides and isolates, U+2028/U+2029 and lone
// surrogates as \uXXXX. The native CLI escapes the same characters the same way (src/cli/main.cc).
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
const SHORT_ESCAPES = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };
const printable = (text) => String(text).replace(UNPRINTABLE,
  (c) => SHORT_ESCAPES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
const report = (message) => process.stderr.write(`headscope: ${printable(message)}\n`);

const USAGE = `usage:
  headscope run FILE.json [--check] [--tolerance T] [--head-gates G0,G1,...] [--head-stats]
                [--max-input-bytes N] [--max-output-bytes N]
      Runs one case file (the JSON case format: config, state_dict, inputs, optional expected;
      FILE '-' reads standard input) and prints {"output": ..., "weights": ...} as JSON; weights
      is null when need_weights is false, and non-finite numbers are written "inf", "-inf", "nan".
      A "kind": "transformer" case prints {"logits": ..., "loss": ..., "hooks": {...}}: loss
      with inputs.targets, hooks those its expected section names (--head-gates and --head-stats
      are for attention cases only).
      --check               compare with the file's "expected", exit 1 on mismatch (with
                            --head-gates: the gated result)
      --tolerance T         relative error allowed by --check (default 1e-4): a decimal
                            number such as 0.001 or 1e-4 (not hex, not inf)
      --head-gates G0,G1,...
                            scale head h's output by G_h before out_proj: one number per head,
                            comma-separated (inf, -inf, nan allowed); 0 switches a head off
      --head-stats          also print "head_stats": {"entropy", "distance", "max_weight"},
                            each ([N,] H): per batch item and head, the mean over its query rows
                            of the row's entropy (nats), attention distance (sum w |i - j|) and
                            largest weight; fully masked rows left out, "nan" when none is left
      --max-input-bytes N   refuse a case file larger than N bytes (default ${MAX_CASE_BYTES})
      --max-output-bytes N  refuse a case whose printed result could exceed N bytes
                            (default ${MAX_RESULT_JSON_BYTES})
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

// A byte count: decimal digits only, at most 2^63 (the native CLI's range).
function byteCount(flag, text) {
  const n = text !== undefined && /^[0-9]+$/.test(text) ? Number(text) : NaN;
  if (!(n <= 2 ** 63)) {
    throw new UsageError(`${flag}: expected a number of bytes (0 to 2^63), got ${
      text === undefined ? 'nothing' : JSON.stringify(text)}`);
  }
  return n;
}

// --head-gates' list: comma-separated numbers (decimal, optional sign, fraction and exponent) or
// inf, -inf, nan, as float32; the native CLI accepts exactly the same lists (src/cli/main.cc).
const GATE = /^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$/;
const NON_FINITE_GATES = { inf: Infinity, '+inf': Infinity, '-inf': -Infinity, nan: NaN };
function parseGates(text) {
  const bad = (why) => new UsageError(`--head-gates: expected comma-separated numbers, one per ` +
    `head (inf, -inf, nan allowed), got ${text === undefined ? 'nothing' : JSON.stringify(text)}${why}`);
  if (text === undefined || text === '') throw bad('');
  const items = text.split(',');
  return Float32Array.from(items, (item, i) => {
    if (Object.hasOwn(NON_FINITE_GATES, item)) return NON_FINITE_GATES[item];
    if (!GATE.test(item)) throw bad(` (item ${i + 1}, ${JSON.stringify(item)}, is not a number)`);
    return Number(item);
  });
}

// --tolerance: a finite, non-negative decimal number (the grammar of --head-gates' numbers, which
// JSON's numbers are written in): Number() alone would also take 0x10, 0b1, 0o7, spaces and
// Infinity. The native CLI takes exactly the same text (src/cli/main.cc).
const TOLERANCE = /^\+?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$/;
function parseTolerance(text) {
  const t = text !== undefined && TOLERANCE.test(text) ? Number(text) : NaN;
  if (!Number.isFinite(t)) {
    throw new UsageError(`--tolerance: expected a finite non-negative decimal number (such as 0.001 ` +
      `or 1e-4), got ${text === undefined ? 'nothing' : JSON.stringify(text)}`);
  }
  return t;
}

function parseRunArgs(args) {
  let file = null;
  let check = false;
  let headGates = null;
  let headStats = false;
  let tolerance = 1e-4;
  let maxInputBytes = MAX_CASE_BYTES;
  let maxOutputBytes = MAX_RESULT_JSON_BYTES;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const flag = a.startsWith('--') ? a.split('=')[0] : a;
    const value = () => (a.includes('=') ? a.slice(a.indexOf('=') + 1) : args[++i]);
    if (a === '--check') {
      check = true;
    } else if (a === '--head-stats') {
      headStats = true;
    } else if (flag === '--head-gates') {
      headGates = parseGates(value());
    } else if (flag === '--tolerance') {
      tolerance = parseTolerance(value());
    } else if (flag === '--max-input-bytes') {
      maxInputBytes = byteCount(flag, value());
    } else if (flag === '--max-output-bytes') {
      maxOutputBytes = byteCount(flag, value());
    } else if ((a.startsWith('-') && a !== '-') || file !== null) {
      throw new UsageError(`run: unexpected argument '${a}'`);
    } else {
      file = a;
    }
  }
  if (file === null) throw new UsageError('run: expected a case file (headscope run FILE.json)');
  return { file, check, tolerance, headGates, headStats, maxInputBytes, maxOutputBytes };
}

const ERRNO_TEXT = { ENOENT: 'No such file or directory', EACCES: 'Permission denied',
  EISDIR: 'Is a directory' };
const ioError = (file, e) => new HeadscopeError('IO_ERROR',
  `${file}: cannot read (${ERRNO_TEXT[e.code] ?? e.message})`);

// The file's bytes, read a megabyte at a time and refused as soon as they pass the limit: an
// endless pipe or /dev/zero is never read whole (readFileSync would read until memory ran out).
function readCaseBytes(file, maxBytes) {
  let fd;
  try {
    fd = file === '-' ? 0 : openSync(file, 'r');
  } catch (e) {
    throw ioError(file, e);
  }
  const tooLarge = (what) => new HeadscopeError('RESOURCE_EXHAUSTED',
    `${file}: ${what}more than the limit of ${maxBytes} bytes`);
  try {
    let stat;
    try {
      stat = fstatSync(fd);
    } catch (e) {
      throw ioError(file, e);
    }
    if (stat.isDirectory()) throw ioError(file, { code: 'EISDIR' });
    if (stat.isFile() && stat.size > maxBytes) throw tooLarge(`${stat.size} bytes, `);
    const chunks = [];
    let total = 0;
    for (;;) {
      const chunk = Buffer.allocUnsafe(1 << 20);
      let n;
      try {
        n = readSync(fd, chunk, 0, chunk.length, null);
      } catch (e) {
        if (e.code === 'EAGAIN') {  // a non-blocking stdin with nothing yet: wait a little
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
          continue;
        }
        if (e.code === 'EOF') break;
        throw ioError(file, e);
      }
      if (n === 0) break;
      if (total + n > maxBytes) throw tooLarge('');
      chunks.push(n === chunk.length ? chunk : chunk.subarray(0, n));
      total += n;
    }
    return new Uint8Array(Buffer.concat(chunks, total));
  } finally {
    if (fd !== 0) closeSync(fd);
  }
}

// Shortest decimal that reads back as the same float32 (what %.9g gives, without the noise).
function formatNumber(x) {
  if (Number.isNaN(x)) return '"nan"';
  if (x === Infinity) return '"inf"';
  if (x === -Infinity) return '"-inf"';
  if (Object.is(x, -0)) return '-0';
  for (let p = 1; p < 10; p++) {  // 9 significant digits always read back as the same float32
    const s = x.toPrecision(p);
    if (Math.fround(Number(s)) === x) return String(Number(s));
  }
  return String(x);
}

// The JSON names of the head statistics, in print order, and the API's names for them.
const HEAD_STATS_KEYS = [['entropy', 'entropy'], ['distance', 'distance'], ['max_weight', 'maxWeight']];

// Writes {"output": ..., "weights": ...} (and "head_stats" when the result has it) from the
// result's typed arrays a megabyte at a time, waiting for stdout to drain, so that a large result
// never exists as one string (V8 cannot hold a string over 2^29 characters, and nested arrays of
// millions of numbers exhaust its heap).
function* resultChunks(result) {
  let text = '{"output": ';
  function* tensor({ data, shape }) {
    let index = 0;
    function* nested(axis) {
      if (axis === shape.length) {
        text += formatNumber(data[index++]);
        return;
      }
      text += '[';
      for (let i = 0; i < shape[axis]; i++) {
        if (i) text += ', ';
        if (axis + 1 === shape.length) {
          text += formatNumber(data[index++]);
          if (text.length >= (1 << 20)) {
            yield text;
            text = '';
          }
        } else {
          yield* nested(axis + 1);
        }
      }
      text += ']';
    }
    yield* nested(0);
  }
  if (result.logits !== undefined) {
    // A transformer case: {"logits": ..., "loss": ..., "hooks": {...}}, as its expected section.
    text = '{"logits": ';
    yield* tensor(result.logits);
    if (result.loss !== undefined) {
      text += `, "loss": ${Number.isFinite(result.loss) ? String(result.loss) : formatNumber(result.loss)}`;
    }
    if (result.hooks !== undefined) {
      text += ', "hooks": {';
      for (const [i, [name, t]] of Object.entries(result.hooks).entries()) {
        text += `${i ? ', ' : ''}${JSON.stringify(name)}: `;
        yield* tensor(t);
      }
      text += '}';
    }
    yield `${text}}\n`;
    return;
  }
  yield* tensor(result.output);
  text += ', "weights": ';
  if (result.weights === null) text += 'null';
  else yield* tensor(result.weights);
  if (result.headStats !== undefined) {
    text += ', "head_stats": {';
    for (const [i, [json, api]] of HEAD_STATS_KEYS.entries()) {
      text += `${i ? ', ' : ''}"${json}": `;
      yield* tensor(result.headStats[api]);
    }
    text += '}';
  }
  yield `${text}}\n`;
}

async function writeResult(result) {
  for (const chunk of resultChunks(result)) {
    if (!process.stdout.write(chunk)) await new Promise((resolve) => process.stdout.once('drain', resolve));
  }
}

// The printed result's size bound (checkResultJsonSize in case.js) with the head statistics
// counted: three ([N,] H) tensors and their keys. The same bound and message as the native CLI's.
// ', "head_stats": {"entropy": , "distance": , "max_weight": }' is 59 bytes.
const HEAD_STATS_KEY_BYTES = 64;

/** The shape of each head statistic a run of the parsed case returns: (N, H), (H), or null. */
function headStatsShape(parsedCase) {
  const dims = callDims(parsedCase.config, parsedCase.query.shape, parsedCase.key.shape);
  if (dims.Sp === null) return null;  // the call fails before it has a result
  return dims.batched ? [dims.N, dims.H] : [dims.H];
}

function checkPrintedSize(parsedCase, maxBytes, headStats) {
  if (!headStats) {
    checkResultJsonSize(parsedCase, maxBytes);
    return;
  }
  const stats = headStatsShape(parsedCase);
  const bound = resultJsonBytesBound(parsedCase) +
    (stats === null ? 0 : HEAD_STATS_KEY_BYTES + 3 * tensorJsonBytesBound(stats));
  if (bound <= maxBytes) return;
  const weights = resultWeightsShape(parsedCase);
  const shown = bound >= 1.8e19 ? '18446744073709551615' : String(bound);
  throw new HeadscopeError('RESOURCE_EXHAUSTED', `result: its JSON text could take ${shown} bytes ` +
    `(output [${parsedCase.query.shape.join(', ')}], weights ${weights === null ? 'null'
      : `[${weights.join(', ')}]`}, head_stats ${stats === null ? 'null' : `3 x [${stats.join(', ')}]`}), ` +
    `more than the limit of ${maxBytes} bytes`);
}

// hs.runCase with forward()'s headGates and headStats (runCase takes the case's options only).
function runCaseWith(hs, c, { headGates, headStats }) {
  if (headGates === null && !headStats) return hs.runCase(c);
  const mha = hs.createMultiheadAttention(c.config);
  try {
    mha.loadStateDict(c.stateDict);
    return mha.forward(c.query, c.key, c.value, { ...c.options, headGates, headStats });
  } finally {
    mha.dispose();
  }
}

async function run(args) {
  const { file, check, tolerance, headGates, headStats, maxInputBytes, maxOutputBytes } =
    parseRunArgs(args);
  // Errors of the document name the file: "headscope: case.json: PARSE_ERROR: config.embed_dim: ...".
  const named = (fn) => {
    try {
      return fn();
    } catch (e) {
      if (e instanceof HeadscopeError && e.code !== 'INTERNAL') {
        const hint = e.code === 'RESOURCE_EXHAUSTED' && e.message.startsWith('result:')
          ? ' (--max-output-bytes raises it)' : '';
        throw new UsageError(`${file}: ${e.code}: ${e.message}${hint}`);
      }
      throw e;
    }
  };
  let bytes;
  try {
    bytes = readCaseBytes(file, maxInputBytes);
  } catch (e) {
    if (!(e instanceof HeadscopeError)) throw e;
    // The message names the file already.
    throw new UsageError(`${e.code}: ${e.message}${e.code === 'RESOURCE_EXHAUSTED'
      ? ' (--max-input-bytes raises it)' : ''}`);
  }
  const c = named(() => parseCase(bytes, { maxInputBytes }));
  bytes = null;
  if (c.kind === 'transformer') {
    const flag = headGates !== null ? '--head-gates' : headStats ? '--head-stats' : null;
    if (flag !== null) {
      throw new UsageError(`${file}: ${flag} applies to attention cases only, and this is a ` +
        `"kind": "transformer" case${flag === '--head-gates' ? ' (its gates are inputs.head_gates)' : ''}`);
    }
  }
  if (headGates !== null && headGates.length !== c.config.numHeads) {
    throw new UsageError(`${file}: --head-gates: expected ${c.config.numHeads} numbers (one per ` +
      `head), got ${headGates.length}`);
  }
  named(() => checkPrintedSize(c, maxOutputBytes, headStats));
  const { hs } = await headscope();
  // runCase takes the parsed case as it is (parseCase returns its own results unchanged).
  const result = named(() => runCaseWith(hs, c, { headGates, headStats }));
  await writeResult(result);
  if (!check) return 0;
  if (c.expected === null) {
    throw new UsageError(`${file}: --check needs an "expected" member`);
  }
  const cmp = compareWithExpected(c, result, tolerance);
  const err = cmp.maxRelativeError.toPrecision(3);
  if (cmp.ok) {
    // A transformer case: over how many tensors, and the loss's own error.
    const over = cmp.tensors === undefined ? '' : ` over ${cmp.tensors.length} tensors` +
      (cmp.loss === null ? '' : `, loss error ${cmp.loss.error.toPrecision(3)}`);
    report(`${file}: ok, matches expected (max relative error ${err}${over}, ` +
      `tolerance ${tolerance}, ${hs.kernelTarget})`);
    return 0;
  }
  report(`${file}: MISMATCH (tolerance ${tolerance}): ${cmp.detail}`);
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
  report(`cannot write the output (${e.message})`);
  process.exit(2);
});

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (e) {
  if (e instanceof UsageError) {
    report(e.message);
    process.exitCode = 2;
  } else if (e instanceof HeadscopeError && e.code !== 'INTERNAL') {
    report(e.message);
    process.exitCode = 2;
  } else if (e instanceof LoadError) {
    report(e.message);
    process.exitCode = 3;
  } else {
    report(`internal error, please report it: ${e?.message ?? e}`);
    process.exitCode = 3;
  }
}
