// Helpers shared by the package's tests.
import assert from 'node:assert/strict';
import { after } from 'node:test';
import { HeadscopeError, init } from '../../web/lib/index.js';
import { initWorker } from '../../web/lib/worker-client.js';

/** A seeded uniform [0, 1) generator (mulberry32, the demo's): reproducible random tests. */
export { seededRandom as mulberry32 } from '../../web/views/heads/transforms.js';

/**
 * Runs fn, which must throw a HeadscopeError with `code` whose message contains every fragment;
 * returns the error.
 */
export function expectError(fn, code, ...fragments) {
  let error = null;
  try {
    fn();
  } catch (e) {
    error = e;
  }
  assert.ok(error instanceof HeadscopeError, `expected a HeadscopeError ${code}, got ${error?.stack ?? error}`);
  assert.ok(error instanceof Error);
  assert.equal(error.code, code, error.message);
  for (const f of fragments) assert.ok(error.message.includes(f), `"${error.message}" lacks "${f}"`);
  return error;
}

/**
 * The engine in this thread and one in a Worker, both with `options` (init's), for a suite that
 * compares them; after the suite, neither holds a live handle, and the Worker is terminated.
 */
export async function engineAndWorker(options) {
  const hs = await init(options);
  const remote = await initWorker(undefined, options);
  after(async () => {
    assert.equal(hs.liveHandles(), 0, 'live handles left in the calling thread');
    assert.equal(await remote.liveHandles(), 0, 'live handles left in the worker');
    await remote.terminate();
  });
  return { hs, remote };
}
