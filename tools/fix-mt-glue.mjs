// Post-link fix of the multi-threaded module's JS (CMakeLists.txt, headscope_js_mt).
//
// Emscripten 3.1.6 with -sEXPORT_ES6 and the node environment still emits CommonJS-only code for
// Node (`__dirname`, `require("worker_threads")`, ...), which throws in an ES module
// (`__dirname is not defined`). Node's pthreads need that code, so this prepends module-scope
// `require` and `__dirname` built from import.meta.url. In browsers the guard leaves both
// undefined and the code never reaches them (it checks ENVIRONMENT_IS_NODE first). Top-level
// await: ES2022, in Node 20 and every browser with WASM SIMD and SharedArrayBuffer.
import { readFileSync, writeFileSync } from 'node:fs';

const file = process.argv[2];
const MARK = '// headscope: Node ESM shim';
const source = readFileSync(file, 'utf8');
if (!source.startsWith(MARK)) {
  const shim = `${MARK} (tools/fix-mt-glue.mjs)
const require = typeof process == 'object' && typeof process.versions?.node == 'string'
  ? (await import('node:module')).createRequire(import.meta.url) : undefined;
const __dirname = require ? require('node:path').dirname(require('node:url').fileURLToPath(import.meta.url))
  : undefined;
`;
  writeFileSync(file, shim + source);
}
