// Tensor-shaped arguments built with a trick, for the tests of callers that lie
// (hostile.test.js, transformer-hostile.test.js). `base` is the tensor the trick stands for
// ({ data: a Float32Array, or an Int32Array of token ids, shape: [rows, columns] }); `ctx.reads`
// counts reads per property and ctx.callback(ctx) runs on the first read of each (a getter that
// calls back into headscope); `ctx.coerced` is set if a caller's valueOf / toString /
// Symbol.toPrimitive was called. Returns { value, expect, first }: expect is 'ok' (valid on the
// first reads) or the code of the error; first, where given, the tensor the first reads return.

export function hostileTensor(trick, ctx, base) {
  const reads = ctx.reads;
  const onRead = (what) => {
    reads[what] = (reads[what] ?? 0) + 1;
    if (reads[what] === 1) ctx.callback(ctx);
  };
  const Kind = base.data.constructor;   // Float32Array, or Int32Array for token ids
  const copy = () => ({ data: base.data.slice(), shape: base.shape.slice() });
  const nested = () => {
    const w = base.shape[1];
    return Array.from({ length: base.shape[0] }, (_, i) => Array.from(base.data.subarray(i * w, i * w + w)));
  };
  switch (trick) {
    case 'lying-length': {
      // A big array that claims to be small: validation must see the true length.
      const data = new Kind(65536);
      Object.defineProperty(data, 'length', { value: base.data.length });
      Object.defineProperty(data, 'byteLength', { value: base.data.length * 4 });
      return { value: { data, shape: base.shape.slice() }, expect: 'SHAPE_MISMATCH' };
    }
    case 'lying-small': {
      // A right-sized array that claims to be big.
      const data = base.data.slice();
      Object.defineProperty(data, 'length', { value: 65536 });
      return { value: { data, shape: base.shape.slice() }, expect: 'ok' };
    }
    case 'proxy-typed-array':
      return { value: { data: new Proxy(base.data.slice(), {}), shape: base.shape.slice() }, expect: 'INVALID_ARGUMENT' };
    case 'changing-getters': {
      // First reads valid; every later read a much bigger, different tensor.
      const first = copy();
      const big = { data: new Kind(4096 * 4), shape: [4096, 4] };
      return {
        value: {
          get data() { onRead('data'); return reads.data === 1 ? first.data : big.data; },
          get shape() { onRead('shape'); return reads.shape === 1 ? first.shape : big.shape; },
        },
        expect: 'ok',
        first,
      };
    }
    case 'proxy-object': {
      const first = copy();
      const target = { data: first.data, shape: first.shape };
      return {
        value: new Proxy(target, {
          get(t, k) {
            if (typeof k === 'string') onRead(k);
            if (k === 'shape' && reads.shape > 1) return [1, 1, 1, 1, 1];
            if (k === 'data' && reads.data > 1) return new Kind(1 << 20);
            return t[k];
          },
        }),
        expect: 'ok',
        first,
      };
    }
    case 'proxy-shape': {
      const first = copy();
      const shape = new Proxy(first.shape.slice(), {
        get(t, k) {
          if (k === 'length') { onRead('shape.length'); return reads['shape.length'] === 1 ? t.length : 4; }
          if (k === '0') { onRead('shape[0]'); return reads['shape[0]'] === 1 ? t[0] : 1 << 20; }
          return t[k];
        },
      });
      return { value: { data: first.data, shape }, expect: 'ok', first };
    }
    case 'nested-proxy-rows': {
      // Nested arrays whose rows change length after the first read.
      const rows = [];
      const w = base.shape[1];
      for (let i = 0; i < base.shape[0]; i++) {
        const row = Array.from(base.data.subarray(i * w, i * w + w));
        rows.push(new Proxy(row, {
          get(t, k) {
            if (k === 'length') { onRead(`row${i}.length`); return reads[`row${i}.length`] === 1 ? w : 100000; }
            return t[k];
          },
        }));
      }
      return { value: rows, expect: 'ok', first: copy() };
    }
    case 'revoked': {
      const { proxy, revoke } = Proxy.revocable({ data: base.data, shape: base.shape }, {});
      revoke();
      return { value: proxy, expect: 'INVALID_ARGUMENT' };
    }
    case 'revoked-shape': {
      const { proxy, revoke } = Proxy.revocable([3, 4], {});
      revoke();
      return { value: { data: base.data.slice(), shape: proxy }, expect: 'INVALID_ARGUMENT' };
    }
    case 'symbol-shape':
      return { value: { data: base.data.slice(), shape: [Symbol('three'), 4] }, expect: 'INVALID_ARGUMENT' };
    case 'valueOf-shape': {
      // An object whose valueOf would say the size (and re-enter): sizes are numbers, never coerced.
      const size = { valueOf: () => { ctx.coerced = true; ctx.callback(ctx); return base.shape[0]; } };
      return { value: { data: base.data.slice(), shape: [size, base.shape[1]] }, expect: 'INVALID_ARGUMENT' };
    }
    case 'detached': {
      const data = base.data.slice();
      structuredClone(data.buffer, { transfer: [data.buffer] });
      return { value: { data, shape: base.shape.slice() }, expect: 'SHAPE_MISMATCH' };
    }
    case 'throwing-getter':
      return {
        value: { get data() { throw new RangeError('boom'); }, shape: base.shape.slice() },
        expect: 'INVALID_ARGUMENT',
      };
    case 'shared-buffer': {
      // A length-tracking view of a growable SharedArrayBuffer: valid, copied at its true length.
      const sab = new SharedArrayBuffer(base.data.length * 4, { maxByteLength: 1 << 20 });
      const data = new Kind(sab);
      data.set(base.data);
      return { value: { data, shape: base.shape.slice() }, expect: 'ok', first: copy() };
    }
    case 'getters': {
      const first = copy();
      return { value: { get data() { onRead('data'); return first.data; }, get shape() { onRead('shape'); return first.shape; } },
        expect: 'ok', first };
    }
    case 'toPrimitive-element': {
      const value = nested();
      value[0][0] = { [Symbol.toPrimitive]: () => { ctx.coerced = true; throw new Error('coerced'); } };
      return { value, expect: 'INVALID_ARGUMENT' };
    }
    case 'toString-element': {
      const value = nested();
      value[1][0] = { toString: () => { ctx.coerced = true; return '1'; }, valueOf: () => { ctx.coerced = true; return 1; } };
      return { value, expect: 'INVALID_ARGUMENT' };
    }
    case 'nan-size':
      return { value: { data: base.data.slice(), shape: [NaN, base.shape[1]] }, expect: 'INVALID_ARGUMENT' };
    case 'fractional-size':
      return { value: { data: base.data.slice(), shape: [base.shape[0] + 0.5, base.shape[1]] }, expect: 'INVALID_ARGUMENT' };
    case 'size-2^53':
      return { value: { data: base.data.slice(), shape: [2 ** 53, base.shape[1]] }, expect: 'RESOURCE_EXHAUSTED' };
    case 'negative-zero-size':
      // -0 is the size 0: the data (of more elements) does not fit it.
      return { value: { data: base.data.slice(), shape: [-0, base.shape[1]] }, expect: 'SHAPE_MISMATCH' };
    case 'huge-shape':
      return { value: { data: base.data.slice(), shape: [2 ** 24, 2 ** 24] }, expect: 'SHAPE_MISMATCH' };
    case 'shape-lies':
      // The right number of elements in a shape of another rank.
      return { value: { data: base.data.slice(), shape: [base.data.length] }, expect: 'SHAPE_MISMATCH' };
    case 'huge-sparse':
      return { value: new Array(2 ** 24 + 1), expect: 'RESOURCE_EXHAUSTED' };
    case 'sparse': {
      const value = nested();
      delete value[1][1];
      return { value, expect: 'INVALID_ARGUMENT' };
    }
    default:
      throw new Error(`unknown trick ${trick}`);
  }
}
