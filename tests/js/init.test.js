// init(): a module that cannot load is a HeadscopeError (LOAD_ERROR), and a later init() retries.
// Its own file: init() caches the loaded module per process.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { init, HeadscopeError } from '../../web/lib/index.js';

test('init with bytes that are not WebAssembly fails with LOAD_ERROR, then retries', async () => {
  await assert.rejects(init({ wasmBinary: new Uint8Array([0, 1, 2, 3]) }), (e) => {
    assert.ok(e instanceof HeadscopeError);
    assert.equal(e.code, 'LOAD_ERROR');
    assert.match(e.message, /init: could not load headscope_core\.wasm/);
    return true;
  });
  const hs = await init();
  assert.equal(hs.kernelTarget, 'WASM');
  assert.equal(await init(), hs, 'init() resolves to the same API once loaded');
});
