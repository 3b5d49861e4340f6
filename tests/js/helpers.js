// Helpers shared by the package's tests.
import assert from 'node:assert/strict';
import { HeadscopeError } from '../../web/lib/index.js';

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
