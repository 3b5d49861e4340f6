// The Chromium side of the benchmark: loads every engine from this origin (served by
// tools/serve.js with the repository as its root) and exposes window.headscopeBench for
// tools/bench/bench.mjs, which drives the page with playwright-core. The engines, data and timing
// are tools/bench/engines.js, the same module the Node run uses.
//
//   page.html?build=build/wasm                 the benchmark (engines loaded, body[data-ready])
//   page.html?build=build/wasm&probe=memory    only headscope, for the fresh-module memory probe
//   &lib=build/bench/lib                       headscope from the run's snapshot of web/lib
//                                              (default: web/lib)
import { MEMORY_SHAPE, SHAPES, benchShape, loadRelaxed, loadThreaded, memoryProbe, roofline } from './engines.js';

const params = new URLSearchParams(location.search);
const buildDir = params.get('build') ?? 'build/wasm';
const libDir = params.get('lib') ?? 'web/lib';
const logEl = document.getElementById('log');
const log = (line) => { logEl.textContent += `${line}\n`; };

async function loadEmscripten(factoryUrl) {
  const create = (await import(factoryUrl)).default;
  const wasmUrl = factoryUrl.replace(/\.js$/, '.wasm');
  return create({ locateFile: (p) => (p.endsWith('.wasm') ? wasmUrl : p), print: () => {}, printErr: () => {} });
}

async function setup() {
  const { init, relaxedSimdSupported } = await import(`/${libDir}/index.js`);
  // The SIMD128 build: the reference rows (Chromium has relaxed SIMD, which init()'s 'auto' would
  // pick); the relaxed rows get theirs from loadRelaxed below.
  const hs = await init({ simd: 'simd128' });
  if (params.get('probe') === 'memory') {
    window.headscopeBench = { memory: () => memoryProbe(hs, MEMORY_SHAPE) };
    return;
  }
  const ort = await import('/node_modules/onnxruntime-web/dist/ort.wasm.min.mjs');
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.proxy = false;
  ort.env.wasm.wasmPaths = '/node_modules/onnxruntime-web/dist/';
  const tf = window.tf;
  tf.wasm.setWasmPaths('/node_modules/@tensorflow/tfjs-backend-wasm/dist/');
  tf.wasm.setThreadsCount(1);
  // The page is cross-origin isolated, so tfjs would pick its threaded build: one thread, plain
  // SIMD build, as in Node.
  tf.env().set('WASM_HAS_MULTITHREAD_SUPPORT', false);
  if (!(await tf.setBackend('wasm'))) throw new Error('tfjs: the wasm backend did not initialize');
  await tf.ready();
  const bench = `/${buildDir}/tools/bench/`;
  const eigen = await loadEmscripten(new URL(`${bench}hs_eigen_bench.js`, location.href).href);
  const roof = await loadEmscripten(new URL(`${bench}hs_roofline.js`, location.href).href);
  const roofRelaxed = relaxedSimdSupported()
    ? await loadEmscripten(new URL(`${bench}hs_roofline_relaxed.js`, location.href).href) : null;
  const ctx = {
    hs, ort, tf, eigen, gc: typeof window.gc === 'function' ? window.gc : undefined,
    loadModel: async (file) => {
      const r = await fetch(`/build/bench/onnx/${file}`);
      if (!r.ok) throw new Error(`${file}: HTTP ${r.status}`);
      return new Uint8Array(await r.arrayBuffer());
    },
  };
  // The training rows of headscope run in a module of their own (init with wasmBinary is never
  // shared), so that its wasm memory after training is the training's alone (engines.js, train.js).
  const fresh = (file, simd) => {
    let wasmBinary = null;
    return async () => {
      if (!wasmBinary) {
        const r = await fetch(`/${libDir}/${file}`);
        if (!r.ok) throw new Error(`${file}: HTTP ${r.status}`);
        wasmBinary = new Uint8Array(await r.arrayBuffer());
      }
      return init({ wasmBinary, simd });
    };
  };
  ctx.freshHeadscope = fresh('headscope_core.wasm', 'simd128');
  await loadRelaxed(ctx, init);
  if (ctx.hsRelaxed) ctx.freshHeadscopeRelaxed = fresh('headscope_core_relaxed.wasm', 'relaxed');
  await loadThreaded(ctx, init, () => import('/node_modules/onnxruntime-web/dist/ort.wasm.min.mjs?threads=2'),
    '/node_modules/onnxruntime-web/dist/');
  window.headscopeBench = {
    versions: {
      ort: ort.env.versions?.web ?? null,
      tfjs: tf.version_core,
      tfjsSimd: await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT'),
      tfjsThreads: tf.wasm.getThreadsCount(),
      userAgent: navigator.userAgent,
      crossOriginIsolated,
      relaxedSimd: relaxedSimdSupported(),
    },
    roofline: (options) => roofline(roof, options),
    rooflineRelaxed: roofRelaxed ? (options) => roofline(roofRelaxed, options) : null,
    // extra.trainReference: PyTorch's first training losses per train shape (bench.mjs measures
    // them natively), the reference of the training rows' checks.
    shape: async (id, engines, timing, extra = {}) => {
      const shape = SHAPES.find((s) => s.id === id);
      ctx.trainReference = extra.trainReference ?? {};
      const result = await benchShape(ctx, shape, engines, timing, (s, row) =>
        log(`${s.id} ${row.engine}: ${row.ms?.toFixed(4) ?? row.skipped ?? row.error ?? 'check failed'}`));
      return result;
    },
  };
}

setup().then(() => { document.body.dataset.ready = 'true'; }, (error) => {
  log(`setup failed: ${error?.stack ?? error}`);
  window.headscopeBenchError = String(error?.stack ?? error);
  document.body.dataset.ready = 'error';
});
