// The npm package as a user gets it: `npm pack` (whose prepack builds the wasm), install the
// tarball into an empty project, import it and run its bin through npx. No network needed: the
// package has no runtime dependencies.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));
const goldenDir = join(root, 'tests/golden');

// npm run from `npm test` exports npm_* variables (config, package, lifecycle): keep them away
// from the nested npm calls, which must behave as in a fresh shell.
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
env.npm_config_update_notifier = 'false';
env.npm_config_fund = 'false';
env.npm_config_audit = 'false';

function sh(command, args, cwd) {
  const r = spawnSync(command, args, { cwd, env, encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.error) throw r.error;
  return r;
}

const describeRun = (r) => `exit ${r.status}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;

test('npm pack produces an installable package with a working API and bin', { timeout: 900_000 }, (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'headscope-pack-'));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));

  // 1. Pack (prepack runs tools/build-wasm.sh; its output lands on stdout before npm's JSON).
  const pack = sh('npm', ['pack', '--json', '--pack-destination', tmp], root);
  assert.equal(pack.status, 0, describeRun(pack));
  const jsonStart = pack.stdout.search(/^\[\s*$/m);
  assert.ok(jsonStart >= 0, `no JSON in npm pack's output:\n${pack.stdout}`);
  const [info] = JSON.parse(pack.stdout.slice(jsonStart));
  const tarball = join(tmp, info.filename);
  assert.ok(existsSync(tarball), tarball);

  const files = info.files.map((f) => f.path).sort();
  // The reference a package user reads ships with the README that links to it (the README used to
  // hold it); the contributors' docs (architecture, building, tests, benchmark) and images do not.
  const shippedDocs = ['docs/api.md', 'docs/widgets.md', 'docs/guarantees.md', 'docs/errors.md',
    'docs/case-format.md', 'docs/tasks.md', 'docs/experiments.md'];
  for (const f of ['package.json', 'README.md', ...shippedDocs, 'web/lib/index.js', 'web/lib/index.d.ts',
    'web/lib/headscope_core.js', 'web/lib/headscope_core.wasm',
    'web/lib/headscope_core_relaxed.js', 'web/lib/headscope_core_relaxed.wasm', 'web/lib/cli.js',
    'web/lib/examples.js', 'web/lib/tensor.js', 'web/lib/case.js', 'web/lib/shapes.js', 'web/lib/errors.js',
    'web/lib/mt/headscope_core_mt.mjs', 'web/lib/mt/headscope_core_mt.worker.js',
    'web/lib/mt/headscope_core_mt.wasm', 'web/lib/mt/package.json']) {
    assert.ok(files.includes(f), `${f} in the tarball: ${files.join(', ')}`);
  }
  const unwanted = files.filter((f) => (/^(tests?|src|tools|build|docs|third_party|node_modules)\//.test(f) &&
    !shippedDocs.includes(f)) ||
    (/\.(cc|h|hpp|cmake|ts)$/.test(f) && !f.endsWith('.d.ts')) || /\.test\.js$/.test(f) || /\.tmp$/.test(f));
  assert.deepEqual(unwanted, [], 'no test, source or build files in the tarball');
  const wasm = info.files.find((f) => f.path === 'web/lib/headscope_core.wasm');
  assert.ok(wasm.size > 10_000, `wasm size ${wasm.size}`);

  // 2. Install it into an empty project, offline.
  const app = join(tmp, 'app');
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'),
    JSON.stringify({ name: 'headscope-pack-smoke', version: '1.0.0', private: true, type: 'module' }));
  const install = sh('npm', ['install', '--offline', '--no-audit', '--no-fund', tarball], app);
  assert.equal(install.status, 0, describeRun(install));
  assert.ok(existsSync(join(app, 'node_modules/headscope/web/lib/headscope_core.wasm')));
  assert.ok(!existsSync(join(app, 'node_modules/headscope/tests')));

  // 3. The API by its package name, from a script outside the repository.
  const seed = JSON.parse(readFileSync(join(goldenDir, 'seed-worked-example.json'), 'utf8'));
  writeFileSync(join(app, 'smoke.mjs'), `
import { init, HeadscopeError } from 'headscope';
// The SIMD128 build, which the threaded module is: the bits compared with it below are a build's
// (under --experimental-wasm-relaxed-simd init() would load the relaxed one).
const hs = await init({ simd: 'simd128' });
const doc = ${JSON.stringify(seed)};
const { output, weights } = hs.runCase(doc);
// The multi-threaded module from the installed package: same bits, and the process still exits.
const hs2 = await init({ threads: 2 });
const mtSame = hs2.threads === 2 && hs2.runCase(doc).output.data.every((x, i) => Object.is(x, output.data[i]));
const check = hs.checkCase(doc, { output, weights });
let error = null;
try { hs.createMultiheadAttention({ embedDim: 4, numHeads: 3 }); } catch (e) { error = e; }
console.log(JSON.stringify({
  kernelTarget: hs.kernelTarget, outputShape: output.shape, weightsShape: weights.shape,
  y00: output.toArray()[0][0], a11: weights.toArray()[0][1][1], ok: check.ok,
  errorIsHeadscopeError: error instanceof HeadscopeError, live: hs.liveHandles(), mtSame,
}));
`);
  const smoke = sh(process.execPath, ['smoke.mjs'], app);
  assert.equal(smoke.status, 0, describeRun(smoke));
  const got = JSON.parse(smoke.stdout);
  assert.equal(got.kernelTarget, 'WASM');
  assert.deepEqual(got.outputShape, [3, 4]);
  assert.deepEqual(got.weightsShape, [2, 3, 3]);
  assert.ok(Math.abs(got.y00 - 1.700548709848323) < 1e-4, `Y[0][0] = ${got.y00}`);
  assert.ok(Math.abs(got.a11 - 0.7679179361387025) < 1e-4, `A[0][1][1] = ${got.a11}`);
  assert.equal(got.ok, true);
  assert.equal(got.errorIsHeadscopeError, true);
  assert.equal(got.live, 0);
  assert.equal(got.mtSame, true);

  // 3b. The relaxed-SIMD build from the installed package (Node 20 needs the flag for it).
  writeFileSync(join(app, 'relaxed.mjs'), `
import { init } from 'headscope';
const hs = await init();
const check = hs.checkCase(${JSON.stringify(seed)}, hs.runCase(${JSON.stringify(seed)}));
console.log(JSON.stringify({ simd: hs.simd, ok: check.ok }));
`);
  const relaxed = sh(process.execPath, ['--experimental-wasm-relaxed-simd', 'relaxed.mjs'], app);
  assert.equal(relaxed.status, 0, describeRun(relaxed));
  assert.deepEqual(JSON.parse(relaxed.stdout), { simd: 'relaxed', ok: true });

  // 4. The bin, through npx (local install only: --no never fetches).
  copyFileSync(join(goldenDir, 'mask-bool-and-kpm-float.json'), join(app, 'case.json'));
  const run = sh('npx', ['--no', 'headscope', 'run', 'case.json', '--check'], app);
  assert.equal(run.status, 0, describeRun(run));
  assert.match(run.stderr, /^headscope: case\.json: ok, matches expected/, describeRun(run));
  assert.ok(Array.isArray(JSON.parse(run.stdout).output));

  const example = sh('npx', ['--no', 'headscope', 'example'], app);
  assert.equal(example.status, 0, describeRun(example));
  assert.ok(example.stdout.includes('0.768'), example.stdout);
  assert.ok(example.stdout.includes('= 1.701'), example.stdout);

  const version = sh('npx', ['--no', '--', 'headscope', '--version'], app);
  assert.equal(version.status, 0, describeRun(version));
  assert.equal(version.stdout.trim(), JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version);

  const bad = sh('npx', ['--no', 'headscope', 'run', 'missing.json'], app);
  assert.equal(bad.status, 2, describeRun(bad));
  assert.match(bad.stderr, /^headscope: IO_ERROR: missing\.json: [^\n]+\n$/);
});
