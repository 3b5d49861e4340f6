// init({ simd }): the relaxed-SIMD build and its fallback. In a child process with
// --experimental-wasm-relaxed-simd (Node 20 validates relaxed SIMD only with it) the relaxed build
// runs the goldens and the bit promises of tests/js/relaxed-build.mjs; in this process, without
// the flag, 'auto' loads the SIMD128 build and 'relaxed' is refused with an error that says how to
// get it; option values are checked like init()'s others.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { init, initWorker, relaxedSimdSupported, HeadscopeError } from '../../web/lib/index.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const child = fileURLToPath(new URL('./relaxed-build.mjs', import.meta.url));

test('the relaxed build under node --experimental-wasm-relaxed-simd: goldens, tolerances, bits (relaxed-build.mjs)', { timeout: 240_000 }, (t) => {
  // Without node --test's NODE_TEST_CONTEXT, which would make the child's node:test report in
  // the runner's binary protocol instead of TAP.
  const { NODE_TEST_CONTEXT, ...env } = process.env;
  const r = spawnSync(process.execPath, ['--experimental-wasm-relaxed-simd', '--test-reporter=tap', child],
    { cwd: root, encoding: 'utf8', timeout: 230_000, env });
  const out = `${r.stdout}\n${r.stderr}`;
  assert.equal(r.status, 0, `relaxed-build.mjs exited with ${r.status}:\n${out.slice(-6000)}`);
  // Every test of the file ran and passed (a child that ran nothing also exits 0).
  assert.match(r.stdout, /^# tests 8$/m, out.slice(-3000));
  assert.match(r.stdout, /^# pass 8$/m, out.slice(-3000));
  for (const line of r.stdout.split('\n').filter((l) => /^# (relaxed build|E=96)/.test(l))) t.diagnostic(line.slice(2));
});

const noFlag = relaxedSimdSupported() ? 'this Node validates relaxed SIMD without a flag (Node >= 22)' : false;

test('without relaxed SIMD: simd auto loads the SIMD128 build, simd relaxed is refused saying how to enable it', { skip: noFlag }, async () => {
  const hs = await init();
  assert.equal(hs.simd, 'simd128');
  assert.equal(await init({ simd: 'simd128' }), hs, 'auto and simd128 share the module here');
  assert.equal(await init({ simd: 'auto' }), hs);
  for (const attempt of [() => init({ simd: 'relaxed' }), () => initWorker(undefined, { simd: 'relaxed' })]) {
    await assert.rejects(attempt(), (e) => {
      assert.ok(e instanceof HeadscopeError, String(e));
      assert.equal(e.code, 'LOAD_ERROR');
      assert.match(e.message, /^init: options\.simd: 'relaxed' needs WebAssembly relaxed SIMD, which this runtime lacks/);
      assert.match(e.message, /Node 20 needs the flag --experimental-wasm-relaxed-simd/);
      return true;
    });
  }
  // The worker's default is the same fallback.
  const remote = await initWorker();
  try {
    assert.equal(remote.simd, 'simd128');
  } finally {
    await remote.terminate();
  }
});

test('init({ simd }) and initWorker({ simd }) accept only auto, relaxed and simd128', async () => {
  for (const bad of ['fma', 'SIMD128', '', 1, null, true, { toString: () => 'relaxed' }]) {
    for (const [call, name] of [[() => init({ simd: bad }), 'init'], [() => initWorker(undefined, { simd: bad }), 'initWorker']]) {
      await assert.rejects(call(), (e) => {
        assert.equal(e.code, 'INVALID_ARGUMENT', e.message);
        assert.ok(e.message.startsWith(`${name}: options.simd: expected one of 'auto', 'relaxed', 'simd128'`), e.message);
        return true;
      });
    }
  }
  // The threaded module is SIMD128: relaxed with threads is a contradiction, named as such.
  await assert.rejects(init({ simd: 'relaxed', threads: 2 }), (e) => {
    assert.equal(e.code, 'INVALID_ARGUMENT');
    assert.match(e.message, /^init: options\.simd: 'relaxed' is single-threaded only/);
    return true;
  });
  // undefined is the default, as for every init() option.
  assert.equal((await init({ simd: undefined })).simd, relaxedSimdSupported() ? 'relaxed' : 'simd128');
});
