#!/usr/bin/env node
// The benchmark: headscope against onnxruntime-web, tfjs-backend-wasm, the Eigen reference path in
// WASM and plain JS, one thread each, same inputs and weights, in Node and in Debian's Chromium;
// plus 2-thread rows (headscope's init({ threads: 2 }), onnxruntime-web numThreads = 2) on the
// larger shapes (engines.js MT_SHAPES); transformer rows (hs.createTransformer's forward
// against onnxruntime-web on the torch.onnx export of the reference module); generation rows
// (its generate's time per new token with the KV cache against a full forward over the context);
// and training rows (steps per second of its trainStep against the same model in tfjs ops with
// tf.train.adam, and natively PyTorch on the CPU, one thread: tools/bench/torch_train_bench.py).
// headscope's rows run its SIMD128 build; the 'headscope relaxed SIMD' rows (engines.js, simd:
// 'relaxed') its relaxed-SIMD build, in Node (--experimental-wasm-relaxed-simd set at run time
// where Node 20 needs it) and in Chromium, with that build's roofline (relaxed_madd) beside the
// SIMD128 one.
//
//   npm run bench                      everything; writes docs/bench/results.md, chart.svg, results.json
//   npm run bench -- --quick           smoke run: the two tutorial shapes, the small transformer and
//                                      generation at context 64, few runs, no memory/decode probes
//   node tools/bench/bench.mjs [options]
//     --quick          fewer shapes and runs (engines.js QUICK_SHAPES)
//     --node-only      skip Chromium          --chromium-only   skip Node
//     --shapes a,b     only these shape ids (tools/bench/engines.js SHAPES), or every shape of a
//                      kind: mha, transformer, generate (gen-64,gen-128,gen-256,gen-384),
//                      train (train-small,train-1m)
//     --engines a,b    only these engines (hs, hs-model, hs-gen, hs-train always run: the kinds'
//                      references; torch-cpu-train is the native PyTorch training row;
//                      hs-relaxed, hs-model-relaxed, hs-train-relaxed the relaxed-SIMD build)
//     --out DIR        where the reports go (default docs/bench); a complete run (no --quick,
//                      --shapes, --engines, --node-only or --chromium-only) also writes
//                      DIR/history/<cpu model>.json, which results.md's "Every CPU" section reads
//     --no-build       use the built modules as they are (default: `npm run build` and the
//                      bench's CMake targets first; both are no-ops when up to date)
//     --build-dir DIR  the Emscripten build folder of the bench modules (default build/wasm, the
//                      `wasm` CMake preset)
//     --passes N       measure everything N times over (each environment's whole sequence of
//                      shapes, then again) and report, per row, the pass with the median time:
//                      a neighbour's burst on a shared machine then moves one pass, not the
//                      verdict (run-to-run noise on a shared VM reached 40% on single rows;
//                      docs/architecture.md). Default 1
//
// What it does: builds what it needs, writes the weights of each (E, H) pair to build/bench/onnx/
// and runs tools/bench/make_onnx.py (Debian's python3-onnx) to build the ONNX graphs from them,
// writes each transformer row's seeded state_dict there and runs make_transformer_onnx.py
// (Debian's python3-torch) to export the reference module with it (each only when changed),
// for the training rows writes each train shape's seeded state_dict and batch pool to
// build/bench/train/ and times PyTorch's steps on them first (torch_train_bench.py, when
// python3-torch is importable; its first-step losses are the reference of the JS rows' checks),
// measures the SIMD128 and relaxed-SIMD rooflines, checks every engine's output against its kind's headscope row
// (max relative error <= 1e-3, or the engine is not timed; the generation rows: greedy tokens
// against the argmax of full forwards), times it (warm-up, then the median of >= 20 runs; calls
// under 10 ms are batched; per new token: the median of paired differences, engines.js
// measurePerToken), probes headscope's peak wasm memory at L=4096 in a fresh module (a child
// process; a fresh page) and the decode series, then writes the reports.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync,
} from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import {
  ENGINES, FULL_TIMING, MEMORY_SHAPE, QUICK_SHAPES, QUICK_TIMING, SHAPES, baseEngine, benchShape,
  enginesFor, flops, kindOf, loadRelaxed, loadThreaded, makeWeights, memoryProbe, modelId, roofline, trainBatches,
  trainMatmuls, transformerWeights, weightsBytes, weightsId,
} from './engines.js';
import { mergePasses, writeReports } from './report.mjs';
import { TRAIN_OPTIMIZER, TRAIN_POOL, trainBatchesBytes } from './train.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const ONNX_DIR = join(ROOT, 'build/bench/onnx');
const TRAIN_DIR = join(ROOT, 'build/bench/train');
const TORCH_ENGINE = 'torch-cpu-train';
// The npm package as built when the run starts: Node, the memory probe and the page all load this
// copy (one per run, removed at its end), so a rebuild of web/lib during a long run cannot mix two
// builds in one report, and two runs at once do not share one.
let LIB_SNAPSHOT = `build/bench/lib-${process.pid}`;
const CHROMIUM_PATH = '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  // window.gc for benchShape: a full collection before each row's timing (see engines.js).
  '--js-flags=--expose-gc',
];

// Node's gc() without restarting under --expose-gc: the flag set at run time, the function taken
// from a fresh context, which gets it.
function nodeGc() {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc');
}

// The relaxed-SIMD rows in Node 20, which validates relaxed SIMD only under
// --experimental-wasm-relaxed-simd: the flag is set here at run time, before the relaxed modules
// are compiled (as --expose-gc is above; V8 reads its wasm feature flags per compilation), so
// `npm run bench` needs no flag, and Node >= 22, which has relaxed SIMD on, gets no unknown one.
// The probe is index.js's (a relaxed_madd function).
const RELAXED_PROBE = Uint8Array.from(Buffer.from(
  '0061736d0100000001080160037b7b7b017b030201000a0d010b00200020012002fd85020b', 'hex'));
function enableRelaxedSimd() {
  if (!WebAssembly.validate(RELAXED_PROBE)) setFlagsFromString('--experimental-wasm-relaxed-simd');
  return WebAssembly.validate(RELAXED_PROBE);
}

function parseArgs(argv) {
  const a = {
    quick: false, node: true, chromium: true, shapes: null, engines: null,
    out: join(ROOT, 'docs/bench'), build: true, buildDir: 'build/wasm', probeMemory: false,
    passes: 1,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${arg} needs a value`);
      return argv[++i];
    };
    switch (arg) {
      case '--quick': a.quick = true; break;
      case '--node-only': a.chromium = false; break;
      case '--chromium-only': a.node = false; break;
      case '--shapes': a.shapes = value().split(','); break;
      case '--engines': a.engines = value().split(','); break;
      case '--out': a.out = resolve(value()); break;
      case '--no-build': a.build = false; break;
      case '--build-dir': a.buildDir = value().replace(/\/+$/, ''); break;
      case '--passes': {
        const text = value();
        a.passes = Number(text);
        if (!/^[1-9][0-9]?$/.test(text)) usage(`--passes: expected a whole number from 1 to 99, got ${JSON.stringify(text)}`);
        break;
      }
      case '--probe-memory': a.probeMemory = true; LIB_SNAPSHOT = value(); break;   // internal: the child process
      case '-h': case '--help': usage(); break;
      default: usage(`unknown option ${arg}`);
    }
  }
  const kinds = new Set(SHAPES.map(kindOf));
  a.shapes &&= a.shapes.flatMap((id) => (kinds.has(id) ? SHAPES.filter((s) => kindOf(s) === id).map((s) => s.id) : [id]));
  for (const id of a.shapes ?? []) {
    if (!SHAPES.some((s) => s.id === id)) usage(`unknown shape ${id} (one of ${SHAPES.map((s) => s.id).join(', ')})`);
  }
  for (const id of a.engines ?? []) {
    if (!ENGINES.some((e) => e.id === id)) usage(`unknown engine ${id} (one of ${ENGINES.map((e) => e.id).join(', ')})`);
  }
  return a;
}

function usage(error) {
  // The header comment up to its "What it does" paragraph.
  const lines = readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').filter((l) => l.startsWith('//'));
  const text = lines.slice(0, lines.findIndex((l) => l.startsWith('// What it does'))).map((l) => l.slice(3))
    .join('\n').trimEnd();
  if (error) {
    console.error(`bench: ${error}\n\n${text}`);
    process.exit(2);
  }
  console.log(text);
  process.exit(0);
}

const log = (...m) => console.error(...m);

// --- Build ------------------------------------------------------------------------------------

function run(cmd, args, options = {}) {
  const r = spawnSync(cmd, args, {
    cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8',
    env: { ...process.env, NODE_PATH: '/usr/share/nodejs' }, ...options,
  });
  if (r.error || r.status !== 0) {
    throw new Error(`${cmd} ${args.join(' ')} failed (${r.error?.message ?? `exit ${r.status}`}):\n` +
      `${(r.stdout ?? '').slice(-3000)}${(r.stderr ?? '').slice(-3000)}`);
  }
  return r.stdout;
}

const BENCH_TARGETS = ['hs_eigen_bench', 'hs_roofline', 'hs_roofline_relaxed'];

function build(args) {
  log('bench: building headscope (npm run build) and the bench modules');
  run('npm', ['run', 'build']);
  const dir = join(ROOT, args.buildDir);
  if (args.buildDir === 'build/wasm') {
    run('cmake', ['--build', '--preset', 'wasm', '--target', ...BENCH_TARGETS]);
  } else {
    if (!existsSync(join(dir, 'build.ninja'))) {
      run('emcmake', ['cmake', '-S', '.', '-B', dir, '-G', 'Ninja', '-DCMAKE_BUILD_TYPE=Release',
        '-DHEADSCOPE_TESTS=OFF', '-DHEADSCOPE_CLI=OFF']);
    }
    run('cmake', ['--build', dir, '--target', ...BENCH_TARGETS]);
  }
}

function benchModulePath(args, name) {
  const p = join(ROOT, args.buildDir, 'tools/bench', name);
  if (!existsSync(p)) {
    throw new Error(`${relative(ROOT, p)} is missing: run without --no-build (or build the ` +
      `${BENCH_TARGETS.join(', ')} CMake targets)`);
  }
  return p;
}

/** Copies web/lib (the package's JS and wasm) to LIB_SNAPSHOT; returns the wasm's identity. */
function snapshotPackage() {
  const src = join(ROOT, 'web/lib');
  const dst = join(ROOT, LIB_SNAPSHOT);
  const wasm = join(src, 'headscope_core.wasm');
  if (!existsSync(wasm)) throw new Error('web/lib/headscope_core.wasm is missing: run without --no-build (npm run build)');
  rmSync(dst, { recursive: true, force: true });
  mkdirSync(dst, { recursive: true });
  for (const f of readdirSync(src)) if (/\.(js|wasm)$/.test(f)) copyFileSync(join(src, f), join(dst, f));
  // The multi-threaded module (init({ threads }), the hs-mt rows) lives in web/lib/mt/; without
  // it those rows report that it did not load.
  mkdirSync(join(dst, 'mt'));
  for (const f of existsSync(join(src, 'mt')) ? readdirSync(join(src, 'mt')) : []) {
    copyFileSync(join(src, 'mt', f), join(dst, 'mt', f));
  }
  const bytes = readFileSync(join(dst, 'headscope_core.wasm'));
  return {
    wasmSha256: createHash('sha256').update(bytes).digest('hex'),
    wasmBytes: bytes.length,
    builtAt: statSync(wasm).mtime.toISOString(),
  };
}

// --- ONNX models ------------------------------------------------------------------------------

function writeIfChanged(file, bytes) {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (!existsSync(file) || !readFileSync(file).equals(b)) writeFileSync(file, b);
}

/** Runs one of the bench's Python scripts (Debian's interpreter) on a spec file; logs its line. */
function runPython(script, spec, needs) {
  try {
    log(`bench: ${run('/usr/bin/python3', [join(ROOT, 'tools/bench', script), '--spec', spec]).trim()}`);
  } catch (error) {
    throw new Error(`${error.message}\n(${script} needs ${needs}: tools/setup.sh installs it)`);
  }
}

/** Writes each needed (E, H) pair's weights (only when changed) and runs make_onnx.py. */
function makeOnnx(shapes) {
  mkdirSync(ONNX_DIR, { recursive: true });
  const models = new Map();
  for (const s of shapes) {
    const wid = weightsId(s);
    const weightsFile = join(ONNX_DIR, `${wid}.weights.bin`);
    if (!models.has(modelId(s))) {
      models.set(modelId(s), { id: modelId(s), E: s.E, H: s.H, causal: s.causal, weights: weightsFile });
    }
  }
  for (const file of new Set([...models.values()].map((m) => m.weights))) {
    const m = [...models.values()].find((x) => x.weights === file);
    writeIfChanged(file, weightsBytes(makeWeights(m.E, m.H)));
  }
  const spec = join(ONNX_DIR, 'spec.json');
  writeFileSync(spec, JSON.stringify({ out: ONNX_DIR, models: [...models.values()] }, null, 1));
  runPython('make_onnx.py', spec, "Debian's python3-onnx");
}

/** The reference module's config (tools/tiny_transformer.py's names) of a createTransformer config. */
function referenceConfig(c) {
  return {
    vocab_size: c.vocabSize, max_len: c.maxLen, d_model: c.dModel, n_layers: c.nLayers, n_heads: c.nHeads,
    d_mlp: c.dMlp, norm: c.norm, positions: c.positions, causal: c.causal, act: c.act, bias: c.bias, ln_eps: c.lnEps,
  };
}

/**
 * Writes each transformer shape's seeded state_dict (headscope's, from the run's snapshot of the
 * package; only when changed) and runs make_transformer_onnx.py, which exports the reference
 * module with it when its inputs changed.
 */
async function makeTransformerOnnx(shapes) {
  mkdirSync(ONNX_DIR, { recursive: true });
  const hs = await (await importHeadscope()).init({ simd: 'simd128' });
  const models = shapes.map((s) => {
    const { entries, bytes } = transformerWeights(hs, s);
    const weights = join(ONNX_DIR, `${s.id}.weights.bin`);
    writeIfChanged(weights, bytes);
    return { id: s.id, batch: s.B, tokens: s.T, config: referenceConfig(s.config), state_dict: entries, weights };
  });
  hs.close();
  const spec = join(ONNX_DIR, 'transformers.json');
  writeFileSync(spec, JSON.stringify({ out: ONNX_DIR, models }, null, 1));
  runPython('make_transformer_onnx.py', spec, "Debian's python3-torch and python3-onnx");
}

// --- PyTorch training (native) ------------------------------------------------------------------

/**
 * The native PyTorch training row of each train shape: writes its seeded state_dict (headscope's,
 * as the tfjs row starts from) and its batch pool to build/bench/train/, runs
 * torch_train_bench.py on them (one thread) and returns { native, trainReference }: native is
 * the results' `native` entry (rows as benchShape's), trainReference each shape's first two
 * losses, which the JS rows are checked against. Without python3-torch the rows say `skipped`.
 */
async function runTorchTrain(shapes, timing) {
  mkdirSync(TRAIN_DIR, { recursive: true });
  const hs = await (await importHeadscope()).init({ simd: 'simd128' });
  const models = shapes.map((s) => {
    const { entries, bytes } = transformerWeights(hs, s);
    const weights = join(TRAIN_DIR, `${s.id}.weights.bin`);
    const batches = join(TRAIN_DIR, `${s.id}.batches.bin`);
    writeIfChanged(weights, bytes);
    writeIfChanged(batches, trainBatchesBytes(trainBatches(s)));
    return {
      id: s.id, batch: s.B, tokens: s.T, pool: TRAIN_POOL, config: referenceConfig(s.config),
      state_dict: entries, weights, batches,
    };
  });
  hs.close();
  const spec = join(TRAIN_DIR, 'train.json');
  writeFileSync(spec, JSON.stringify({ threads: 1, optimizer: TRAIN_OPTIMIZER, timing, models }, null, 1));
  log(`bench: [torch] training ${shapes.map((s) => s.id).join(', ')} (torch_train_bench.py, 1 thread)`);
  const r = spawnSync('/usr/bin/python3', [join(ROOT, 'tools/bench/torch_train_bench.py'), '--spec', spec], {
    cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8',
  });
  let out = null;
  try {
    out = JSON.parse((r.stdout ?? '').trim().split('\n').pop());
  } catch { /* reported below */ }
  const fail = (what, message) => ({
    native: {
      env: 'native', label: 'PyTorch (native CPU)',
      shapes: shapes.map((s) => ({ shape: s.id, rows: [{ engine: TORCH_ENGINE, [what]: message }] })),
    },
    trainReference: {},
  });
  if (r.error || r.status !== 0 || !out?.rows) {
    const message = out?.error ?? `torch_train_bench.py failed (${r.error?.message ?? `exit ${r.status}`}): ` +
      `${(r.stderr ?? '').slice(-2000)}`;
    // No torch (exit 3; no /usr/bin/python3) is a skipped row, not a failure: the row is a
    // reference, in no target.
    const missing = r.status === 3 || r.error?.code === 'ENOENT';
    return fail(missing ? 'skipped' : 'error', missing ? `${message} (tools/setup.sh installs python3-torch)` : message);
  }
  // Debian's torch calls the libblas.so.3 of the alternatives system: netlib's reference BLAS
  // unless OpenBLAS/BLIS is installed; the label says which, as it decides the row's speed.
  const blas = !out.blas ? 'BLAS unknown' : /\/blas\/libblas/.test(out.blas) ? "netlib's reference BLAS"
    : /openblas/i.test(out.blas) ? 'OpenBLAS' : /blis/i.test(out.blas) ? 'BLIS' : /mkl/i.test(out.blas) ? 'MKL' : out.blas;
  const label = `PyTorch ${out.torch} (native CPU, ${out.threads} thread${out.threads === 1 ? '' : 's'}` +
    `${out.cpuCapability ? `, ${out.cpuCapability}` : ''}, ${blas})`;
  const native = {
    env: 'native', label,
    versions: { torch: out.torch, threads: out.threads, cpuCapability: out.cpuCapability, blas: out.blas },
    shapes: out.rows.map((t) => {
      const shape = shapes.find((s) => s.id === t.shape);
      const { stepsPerSecond, firstLosses, ...row } = t;
      delete row.shape;
      const l = t.losses;
      return {
        shape: t.shape,
        rows: [{
          engine: TORCH_ENGINE, ...row,
          check: {
            ok: l.decreased, error: null,
            detail: `first-step loss ${l.first.toFixed(6)} (the JS rows' reference); ` +
              (l.decreased ? `loss ${l.firstCycle.toFixed(4)} -> ${l.lastCycle.toFixed(4)} over ${l.steps} steps`
                : `loss did not decrease: ${l.detail ?? `${l.firstCycle} -> ${l.lastCycle}`}`),
          },
          gflops: flops(shape).total / (t.ms * 1e6),
        }],
      };
    }),
  };
  for (const s of native.shapes) {
    const row = s.rows[0];
    log(`bench: [torch] ${s.shape.padEnd(17)} ${TORCH_ENGINE.padEnd(13)} ${row.ms.toPrecision(4)} ms/step ` +
      `(${(1000 / row.ms).toPrecision(4)} steps/s, ${row.runs}x${row.batch}), first-step loss ${row.losses.first.toFixed(6)}` +
      `${row.check.ok ? '' : ` CHECK FAILED: ${row.check.detail}`}`);
  }
  const trainReference = Object.fromEntries(out.rows.map((t) => [t.shape, { losses: t.firstLosses }]));
  return { native, trainReference };
}

// --- Node -------------------------------------------------------------------------------------

async function loadEmscripten(path) {
  const create = (await import(path)).default;
  return create({ wasmBinary: readFileSync(path.replace(/\.js$/, '.wasm')), print: () => {}, printErr: () => {} });
}

async function importHeadscope() {
  return import(pathToFileURL(join(ROOT, LIB_SNAPSHOT, 'index.js')).href);
}

async function nodeContext(args) {
  const { init } = await importHeadscope();
  // The SIMD128 build: the reference rows (init()'s 'auto' would pick the relaxed one here).
  const hs = await init({ simd: 'simd128' });
  const ort = await import('onnxruntime-web');
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.proxy = false;
  ort.env.wasm.wasmPaths = join(ROOT, 'node_modules/onnxruntime-web/dist/');
  const tf = await import('@tensorflow/tfjs-core');
  const tfw = await import('@tensorflow/tfjs-backend-wasm');
  tfw.setWasmPaths(join(ROOT, 'node_modules/@tensorflow/tfjs-backend-wasm/dist/'));
  tfw.setThreadsCount(1);
  tf.env().set('WASM_HAS_MULTITHREAD_SUPPORT', false);
  if (!(await tf.setBackend('wasm'))) throw new Error('tfjs: the wasm backend did not initialize');
  await tf.ready();
  const eigen = await loadEmscripten(benchModulePath(args, 'hs_eigen_bench.js'));
  const roof = await loadEmscripten(benchModulePath(args, 'hs_roofline.js'));
  const relaxed = WebAssembly.validate(RELAXED_PROBE);   // enableRelaxedSimd() ran in main()
  const roofRelaxed = relaxed ? await loadEmscripten(benchModulePath(args, 'hs_roofline_relaxed.js')) : null;
  const versions = {
    node: process.version,
    relaxedSimd: relaxed,
    ort: ort.env.versions?.web ?? null,
    tfjs: tf.version_core,
    tfjsSimd: await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT'),
    tfjsThreads: tfw.getThreadsCount(),
  };
  if (!versions.tfjsSimd) throw new Error('tfjs: WASM SIMD is not available');
  const ctx = { hs, ort, tf, eigen, gc: nodeGc(), loadModel: async (file) => readFileSync(join(ONNX_DIR, file)) };
  // A module of its own (init with wasmBinary is never shared) for each training row of
  // headscope, so that its wasm memory after training is the training's alone.
  const wasmBinary = readFileSync(join(ROOT, LIB_SNAPSHOT, 'headscope_core.wasm'));
  ctx.freshHeadscope = () => init({ wasmBinary, simd: 'simd128' });
  await loadRelaxed(ctx, init);
  if (ctx.hsRelaxed) {
    const relaxedBinary = readFileSync(join(ROOT, LIB_SNAPSHOT, 'headscope_core_relaxed.wasm'));
    ctx.freshHeadscopeRelaxed = () => init({ wasmBinary: relaxedBinary, simd: 'relaxed' });
  }
  // Node's 'onnxruntime-web' (ort.node.min.mjs) shares onnxruntime-common's backend registry
  // between instances; the self-contained browser bundle, under its own URL, is a second one.
  const ortBundle = join(ROOT, 'node_modules/onnxruntime-web/dist/ort.wasm.min.mjs');
  await loadThreaded(ctx, init, () => import(`${pathToFileURL(ortBundle).href}?threads=2`),
    join(ROOT, 'node_modules/onnxruntime-web/dist/'));
  return { ctx, roof, roofRelaxed, versions };
}

// Every shape's single-threaded rows first, then the 2-thread rows of every shape, appended to
// their shape's rows: the threaded engines' workers (onnxruntime-web's thread pool starts with its
// first session) do not exist yet while any single-threaded row is timed. runShape(shape,
// engines) -> benchShape's result.
async function inTwoPasses(work, runShape) {
  const threaded = (id) => ENGINES.find((e) => e.id === id).threads !== undefined;
  const shapes = [];
  for (const { shape, engines } of work) shapes.push(await runShape(shape, engines.filter((id) => !threaded(id))));
  for (const { shape, engines } of work) {
    const mt = engines.filter(threaded);
    if (mt.length) shapes.find((r) => r.shape === shape.id).rows.push(...(await runShape(shape, mt)).rows);
  }
  return shapes;
}

const fmtErr = (e, digits) => (Number.isFinite(e) ? e.toExponential(digits) : 'n/a');

function logRow(env) {
  return (shape, row) => {
    const what = row.skipped ? `SKIPPED ${row.skipped}` : row.error ? `ERROR ${row.error}`
      : !row.check?.ok ? `CHECK FAILED (${fmtErr(row.check?.error, 2)}: ${row.check?.detail})`
        : `${row.ms.toPrecision(4)} ms (${row.runs}x${row.batch}, err ${fmtErr(row.check.error, 1)})` +
          (row.losses ? ` = ${(1000 / row.ms).toPrecision(4)} steps/s; ${row.check.detail}; ` +
            `loss ${row.losses.firstCycle.toFixed(4)} -> ${row.losses.lastCycle.toFixed(4)} over ${row.losses.steps} steps` : '') +
          (row.newTokens ? ` per new token: generate of ${row.newTokens + 1} tokens ${row.generateMs.toPrecision(4)} ms, ` +
            `of 1 ${row.promptMs.toPrecision(4)} ms` : '');
    log(`bench: [${env}] ${shape.id.padEnd(17)} ${row.engine.padEnd(13)} ${what}`);
  };
}

function plan(args) {
  const ids = args.shapes ?? (args.quick ? QUICK_SHAPES : SHAPES.map((s) => s.id));
  const shapes = SHAPES.filter((s) => ids.includes(s.id));
  // A shape's engines are its kind's (some name the shapes they run on); the kind's headscope
  // engine always runs, the reference of the checks. The decode series rows are headscope only
  // (its SIMD128 build and the engines marked `series`: the relaxed build).
  // Native engines (PyTorch's training row) run outside the JS environments: see runAll.
  const wanted = (id, s) => id === baseEngine(s) || !args.engines || args.engines.includes(id);
  return shapes.map((s) => ({
    shape: s,
    engines: enginesFor(s).filter((e) => !e.native && (!s.series || e.id === baseEngine(s) || e.series))
      .map((e) => e.id).filter((id) => wanted(id, s)),
    native: enginesFor(s).filter((e) => e.native && (!args.engines || args.engines.includes(e.id))).map((e) => e.id),
  }));
}

async function runNode(args, work, timing, trainReference) {
  const { ctx, roof, roofRelaxed, versions } = await nodeContext(args);
  ctx.trainReference = trainReference;
  log(`bench: [node] roofline probe`);
  const result = { env: 'node', label: `Node ${process.version}`, versions, roofline: roofline(roof, { quick: args.quick }) };
  log(`bench: [node] SIMD128 mul+add peak ${result.roofline.gflops.toFixed(1)} GFLOP/s`);
  if (roofRelaxed) {
    result.rooflineRelaxed = roofline(roofRelaxed, { quick: args.quick });
    log(`bench: [node] relaxed SIMD relaxed_madd peak ${result.rooflineRelaxed.gflops.toFixed(1)} GFLOP/s`);
  } else {
    log(`bench: [node] no relaxed SIMD in this Node: the relaxed rows are skipped`);
  }
  const train1m = work.find((w) => w.shape.id === 'train-1m');
  if (train1m) {
    result.trainMatmuls = trainMatmuls(ctx.eigen, train1m.shape, { quick: args.quick });
    for (const [name, g] of Object.entries(result.trainMatmuls)) {
      log(`bench: [node] train-1m ${name} matmuls ${g.gflops.toFixed(1)} GFLOP/s (${(100 * g.gflops / result.roofline.gflops).toFixed(0)}% of the peak)`);
    }
  }
  result.shapes = await inTwoPasses(work, (shape, engines) => benchShape(ctx, shape, engines, timing, logRow('node')));
  for (const s of ctx.ortSessions?.values() ?? []) await s.release();
  for (const s of ctx.ortMtCtx?.ortSessions?.values() ?? []) await s.release();
  if (!args.quick) {
    log('bench: [node] memory probe (fresh process)');
    const out = execFileSync(process.execPath, [fileURLToPath(import.meta.url), '--probe-memory', LIB_SNAPSHOT],
      { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
    result.memory = JSON.parse(out.trim().split('\n').pop());
  }
  return result;
}

// --- Chromium ---------------------------------------------------------------------------------

async function runChromium(args, work, timing, trainReference) {
  const { chromium } = await import('playwright-core');
  const { startServer } = await import('../serve.js');
  // The repository as the root: the page, web/lib, node_modules' peers and build/ outputs.
  const server = await startServer({ port: 0, root: ROOT });
  const browser = await chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: CHROMIUM_ARGS, timeout: 60_000 });
  try {
    const open = async (query) => {
      const context = await browser.newContext({ serviceWorkers: 'block' });
      const foreign = [];
      const errors = [];
      const origin = new URL(server.url).origin;
      await context.route('**/*', (route) => {
        if (new URL(route.request().url()).origin === origin) return route.continue();
        foreign.push(route.request().url());
        return route.abort('blockedbyclient');
      });
      const page = await context.newPage();
      page.on('pageerror', (e) => errors.push(String(e)));
      page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
      await page.goto(`${server.url}tools/bench/page.html?build=${encodeURIComponent(args.buildDir)}` +
        `&lib=${encodeURIComponent(LIB_SNAPSHOT)}${query}`);
      await page.waitForSelector('body[data-ready="true"], body[data-ready="error"]', { state: 'attached', timeout: 120_000 });
      if (await page.evaluate(() => document.body.dataset.ready) !== 'true') {
        throw new Error(`bench page failed: ${await page.evaluate(() => window.headscopeBenchError)}\n${errors.join('\n')}`);
      }
      return { page, context, foreign, errors };
    };
    const { page, context, foreign, errors } = await open('');
    const versions = { chromium: browser.version(), ...(await page.evaluate(() => window.headscopeBench.versions)) };
    const result = { env: 'chromium', label: `Chromium ${browser.version()}`, versions };
    log('bench: [chromium] roofline probe');
    result.roofline = await page.evaluate((o) => window.headscopeBench.roofline(o), { quick: args.quick });
    log(`bench: [chromium] SIMD128 mul+add peak ${result.roofline.gflops.toFixed(1)} GFLOP/s`);
    result.rooflineRelaxed = await page.evaluate((o) => window.headscopeBench.rooflineRelaxed?.(o) ?? null, { quick: args.quick });
    if (result.rooflineRelaxed) {
      log(`bench: [chromium] relaxed SIMD relaxed_madd peak ${result.rooflineRelaxed.gflops.toFixed(1)} GFLOP/s`);
    } else {
      delete result.rooflineRelaxed;
      log('bench: [chromium] no relaxed SIMD in this Chromium: the relaxed rows are skipped');
    }
    const logger = logRow('chromium');
    result.shapes = await inTwoPasses(work, async (shape, engines) => {
      const r = await page.evaluate(([id, e, t, extra]) => window.headscopeBench.shape(id, e, t, extra),
        [shape.id, engines, timing, { trainReference }]);
      for (const row of r.rows) logger(shape, row);
      return r;
    });
    await context.close();
    if (!args.quick) {
      log('bench: [chromium] memory probe (fresh page)');
      const probe = await open('&probe=memory');
      result.memory = await probe.page.evaluate(() => window.headscopeBench.memory());
      foreign.push(...probe.foreign);
      errors.push(...probe.errors);
      await probe.context.close();
    }
    if (foreign.length) throw new Error(`the bench page requested other origins: ${foreign.join(', ')}`);
    result.pageErrors = errors;
    return result;
  } finally {
    await browser.close();
    await server.close();
  }
}

// --- Main -------------------------------------------------------------------------------------

function machine() {
  const cpuinfo = existsSync('/proc/cpuinfo') ? readFileSync('/proc/cpuinfo', 'utf8') : '';
  const model = /^model name\s*:\s*(.+)$/m.exec(cpuinfo)?.[1] ?? cpus()[0]?.model ?? 'unknown CPU';
  return { cpu: model.trim(), logicalCpus: cpus().length, memoryGiB: Math.round(totalmem() / 2 ** 30), platform: `${process.platform} ${process.arch}` };
}

function commandLine(argv) {
  const rest = argv.join(' ');
  return process.env.npm_lifecycle_event === 'bench'
    ? `npm run bench${rest ? ` -- ${rest}` : ''}` : `node tools/bench/bench.mjs${rest ? ` ${rest}` : ''}`;
}

async function main() {
  const argv = process.argv.slice(2);
  const args = parseArgs(argv);
  // First: index.js decides whether relaxed SIMD is there once, on its first look.
  if (!args.probeMemory) enableRelaxedSimd();
  if (args.probeMemory) {
    const { init } = await importHeadscope();
    console.log(JSON.stringify(memoryProbe(await init({ simd: 'simd128' }), MEMORY_SHAPE)));
    return;
  }
  const started = Date.now();
  if (args.build) build(args);
  const headscope = snapshotPackage();
  try {
    await runAll(args, argv, started, headscope);
  } finally {
    rmSync(join(ROOT, LIB_SNAPSHOT), { recursive: true, force: true });
  }
}

async function runAll(args, argv, started, headscope) {
  const work = plan(args);
  const onnx = (kind) => work.filter((w) => kindOf(w.shape) === kind && w.engines.some((e) => e.startsWith('ort-')))
    .map((w) => w.shape);
  if (onnx('mha').length) makeOnnx(onnx('mha'));
  if (onnx('transformer').length) await makeTransformerOnnx(onnx('transformer'));
  const timing = args.quick ? QUICK_TIMING : FULL_TIMING;
  // PyTorch's training rows first, alone on the machine: their losses are the JS rows' reference.
  const torchShapes = work.filter((w) => w.native.includes(TORCH_ENGINE)).map((w) => w.shape);
  const { native, trainReference } = torchShapes.length ? await runTorchTrain(torchShapes, timing) : { trainReference: {} };
  const results = {
    date: new Date().toISOString(),
    command: commandLine(argv),
    quick: args.quick,
    machine: machine(),
    headscope,
    timing,
    envs: [],
    ...(native && { native }),
  };
  // Pass p measures every environment once, in order; the passes' envs are merged row by row.
  const passes = [];
  for (let p = 0; p < args.passes; p++) {
    if (args.passes > 1) log(`bench: pass ${p + 1} of ${args.passes}`);
    const envs = [];
    if (args.node) envs.push(await runNode(args, work, timing, trainReference));
    if (args.chromium) envs.push(await runChromium(args, work, timing, trainReference));
    passes.push(envs);
  }
  results.passes = args.passes;
  results.envs = passes[0].map((_, i) => mergePasses(passes.map((envs) => envs[i])));
  results.seconds = Math.round((Date.now() - started) / 1000);
  // Only a run of everything, in both environments, stands for its CPU in docs/bench/history/.
  const complete = !args.quick && !args.shapes && !args.engines && args.node && args.chromium;
  const files = writeReports(results, args.out, { complete });
  log(`bench: done in ${results.seconds} s: ${files.map((f) => relative(process.cwd(), f)).join(', ')}`);
  // A skipped row (an engine this build or machine does not have) is reported, not a failure.
  const failed = [...results.envs, ...(native ? [native] : [])].flatMap((e) => e.shapes.flatMap((s) => s.rows
    .filter((r) => !r.skipped && (r.error || !r.check?.ok)).map((r) => `${e.env} ${s.shape} ${r.engine}`)));
  if (failed.length) {
    log(`bench: engines that failed their check or errored: ${failed.join('; ')}`);
    process.exitCode = 1;
  }
}

main().catch((error) => {
  console.error(`bench: ${error?.stack ?? error}`);
  process.exit(1);
});
