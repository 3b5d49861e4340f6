// Bit-for-bit comparisons of results, for tests that hold two entries of headscope (the
// single-threaded module, the threaded one, the Worker entry) to the same bits.
import assert from 'node:assert/strict';

/** The same shape and the same bits, NaN payloads and signed zeros included (null: null). */
export function assertSameBits(got, want, what) {
  if (want === null) {
    assert.equal(got, null, `${what}: expected null`);
    return;
  }
  assert.deepEqual(got.shape, want.shape, `${what}: shape`);
  assert.equal(Object.prototype.toString.call(got.data), Object.prototype.toString.call(want.data),
    `${what}: data kind`);
  const a = new Uint32Array(got.data.buffer, got.data.byteOffset, got.data.length);
  const b = new Uint32Array(want.data.buffer, want.data.byteOffset, want.data.length);
  assert.equal(a.length, b.length, `${what}: length`);
  const i = a.findIndex((x, j) => x !== b[j]);
  assert.equal(i, -1, `${what}: element ${i} differs (${got.data[i]} vs ${want.data[i]})`);
}

/**
 * The same keys at every level and the same bits in every tensor of a result ({ logits, hooks },
 * a stateDict, { tokens, logits }); other values (a loss) must be equal.
 */
export function assertSameResultBits(got, want, what = 'result') {
  if (want !== null && typeof want === 'object' && !ArrayBuffer.isView(want.data)) {
    assert.ok(got !== null && typeof got === 'object', `${what}: expected an object`);
    assert.deepEqual(Object.keys(got), Object.keys(want), `${what}: keys`);
    for (const k of Object.keys(want)) assertSameResultBits(got[k], want[k], `${what}.${k}`);
  } else if (want !== null && typeof want === 'object') {
    assertSameBits(got, want, what);
  } else {
    assert.ok(Object.is(got, want), `${what}: ${got} vs ${want}`);
  }
}
