// A plain-JS reference of torch.nn.MultiheadAttention's forward pass, for tests: float64 math on
// the given numbers, loops written the way the formulas read, no cleverness. Semantics are
// docs/case-format.md's:
//   - projections x W^T + b; in_proj_weight rows are [Wq; Wk; Wv] (or q/k/v_proj_weight when
//     kdim or vdim differ from embedDim); bias_k / bias_v, then a zero key / value, appended after
//     the projection (never masked); with numKvHeads G the K and V rows are G * headDim and head
//     h reads K/V head floor(h / (H / G)) (grouped-query attention); with ropeDims r > 0 the
//     first r dims of each head of q (row i) and of the projected keys (row j; not the extra
//     ones) turn by the position: pair p by i / ropeBase^(2p / r), (a, b) -> (a cos - b sin,
//     a sin + b cos), pairs (p, p + r/2) ('half') or (2p, 2p + 1) ('interleaved');
//   - scores = (q . k) / sqrt(headDim) + attnMask + keyPaddingMask, bool masks adding -inf where
//     true; isCausal blocks key j > query i outright (-inf), as the engine and PyTorch's fused
//     path do;
//   - headscope's position options (not torch's): alibi adds -(m_h |i - j|) after the masks (m_h
//     Press et al.'s slopes, alibiSlopes), window w blocks j <= i - w (and j >= i + w without
//     isCausal); neither touches the extra keys of addBiasKV / addZeroAttn;
//   - softmax as torch.softmax: a row holding NaN or +inf is all NaN; a row whose every score is
//     -inf (every key masked) is the zero-row policy: weights 0 and that head's output 0;
//   - weights x V with IEEE arithmetic (0 x NaN is NaN: a NaN value at a zero weight still leaks,
//     as in PyTorch), then out_proj.
//
// referenceForward(config, stateDict, query, key, value, options) takes the public API's
// arguments (config as mha.config; tensors as nested arrays or { data, shape }; masks as nested
// booleans / numbers or { data: Uint8Array | Float32Array, shape }) and returns
// { output, weights, scores, headWeights }, each { data: Float64Array, shape } in PyTorch's
// layout (weights null without needWeights; scores and headWeights are the trace's
// ([N,] H, L, S') stages).

/** { data: number[] | TypedArray, shape, bool } from nested arrays or { data, shape }. */
function tensor(x) {
  if (x === null || x === undefined) return null;
  if (!Array.isArray(x)) return { data: x.data, shape: [...x.shape], bool: x.data instanceof Uint8Array };
  const shape = [];
  for (let v = x; Array.isArray(v); v = v[0]) shape.push(v.length);
  const data = x.flat(Infinity);
  return { data, shape, bool: typeof data[0] === 'boolean' };
}

/** Rows of a (T, D) / (T, N, D) / (N, T, D) input: at(n, t, d). */
function reader(t, batched, batchFirst) {
  const [a, b, c] = t.shape;
  const d = t.data;
  if (!batched) return { N: 1, T: a, at: (n, i, e) => d[i * b + e] };
  if (batchFirst) return { N: a, T: b, at: (n, i, e) => d[(n * b + i) * c + e] };
  return { N: b, T: a, at: (n, i, e) => d[(i * b + n) * c + e] };
}

/** y[t][o] = b[o] + sum_i x(t, i) W[row0 + o][i], W of inDim columns, b from b0 (or none). */
function linear(x, T, inDim, W, row0, outDim, b, b0) {
  const y = [];
  for (let t = 0; t < T; t++) {
    const row = new Float64Array(outDim);
    for (let o = 0; o < outDim; o++) {
      let s = b ? b[b0 + o] : 0;
      for (let i = 0; i < inDim; i++) s += x(t, i) * W[(row0 + o) * inDim + i];
      row[o] = s;
    }
    y.push(row);
  }
  return y;
}

function softmax(row) {
  const max = Math.max(-Infinity, ...row);
  if (row.some(Number.isNaN) || max === Infinity) return { w: row.map(() => NaN), zero: false };
  if (max === -Infinity) return { w: row.map(() => 0), zero: true };  // the zero-row policy
  const e = row.map((s) => Math.exp(s - max));
  const sum = e.reduce((a, b) => a + b, 0);
  return { w: e.map((x) => x / sum), zero: false };
}

/**
 * Press et al.'s ALiBi slopes for H heads, written out: p the largest power of two <= H;
 * 2^(-8 (h + 1) / p) for h < p, then 2^(-8 (2 (h - p) + 1) / (2 p)); float32 (Math.fround).
 */
export function alibiSlopes(H) {
  let p = 1;
  while (p * 2 <= H) p *= 2;
  return Array.from({ length: H }, (_, h) =>
    Math.fround(2 ** (h < p ? (-8 * (h + 1)) / p : (-8 * (2 * (h - p) + 1)) / (2 * p))));
}

export function referenceForward(config, stateDict, query, key, value, options = {}) {
  const E = config.embedDim;
  const H = config.numHeads;
  const hd = E / H;
  const G = config.numKvHeads ?? H;  // K/V heads
  const Ekv = G * hd;
  const kvCol = (h) => Math.floor(h / (H / G)) * hd;  // where head h's K/V head starts
  const kdim = config.kdim ?? E;
  const vdim = config.vdim ?? E;
  const sd = Object.fromEntries(Object.entries(stateDict instanceof Map ? Object.fromEntries(stateDict) : stateDict)
    .map(([k, v]) => [k, tensor(v).data]));
  const {
    needWeights = true, averageAttnWeights = true, isCausal = false, alibi = false, window = 0,
  } = options;
  const slopes = alibi ? alibiSlopes(H) : null;
  const q = tensor(query);
  const batched = q.shape.length === 3;
  const Q = reader(q, batched, config.batchFirst);
  const K = reader(tensor(key), batched, config.batchFirst);
  const V = reader(tensor(value), batched, config.batchFirst);
  const N = Q.N;
  const L = Q.T;
  const S = K.T;
  const Sp = S + (config.addBiasKV ? 1 : 0) + (config.addZeroAttn ? 1 : 0);
  const additive = (m) => (m === null ? null : Array.from(m.data, (v) => (m.bool ? (v ? -Infinity : 0) : v)));
  const am = tensor(options.attnMask);
  const kpm = tensor(options.keyPaddingMask);
  const attn = additive(am);
  const pad = additive(kpm);

  const separate = sd.in_proj_weight === undefined;
  const bIn = sd.in_proj_bias;
  const out = new Float64Array(q.data.length);
  const scores = new Float64Array(N * H * L * Sp);
  const headWeights = new Float64Array(N * H * L * Sp);
  const scale = 1 / Math.sqrt(hd);
  // Rotary position embeddings of one row of `heads` heads at position t, in place.
  const rope = (row, t, heads) => {
    const r = config.ropeDims;
    const half = (config.ropeLayout ?? 'half') === 'half';
    for (let p = 0; p < r / 2; p++) {
      const angle = t / Math.pow(config.ropeBase ?? 10000, (2 * p) / r);
      const [c, s] = [Math.cos(angle), Math.sin(angle)];
      const [a, b] = half ? [p, p + r / 2] : [2 * p, 2 * p + 1];
      for (let h = 0; h < heads; h++) {
        const x0 = row[h * hd + a];
        const x1 = row[h * hd + b];
        row[h * hd + a] = x0 * c - x1 * s;
        row[h * hd + b] = x0 * s + x1 * c;
      }
    }
  };

  for (let n = 0; n < N; n++) {
    const qp = linear((t, i) => Q.at(n, t, i), L, E, separate ? sd.q_proj_weight : sd.in_proj_weight, 0, E, bIn, 0);
    const kp = linear((t, i) => K.at(n, t, i), S, kdim, separate ? sd.k_proj_weight : sd.in_proj_weight,
      separate ? 0 : E, Ekv, bIn, E);
    const vp = linear((t, i) => V.at(n, t, i), S, vdim, separate ? sd.v_proj_weight : sd.in_proj_weight,
      separate ? 0 : E + Ekv, Ekv, bIn, E + Ekv);
    if (config.ropeDims > 0) {
      for (let t = 0; t < L; t++) rope(qp[t], t, H);
      for (let t = 0; t < S; t++) rope(kp[t], t, G);
    }
    if (config.addBiasKV) {
      kp.push(Float64Array.from(sd.bias_k));
      vp.push(Float64Array.from(sd.bias_v));
    }
    if (config.addZeroAttn) {
      kp.push(new Float64Array(Ekv));
      vp.push(new Float64Array(Ekv));
    }
    const concat = Array.from({ length: L }, () => new Float64Array(E));
    for (let h = 0; h < H; h++) {
      for (let i = 0; i < L; i++) {
        const row = [];
        for (let j = 0; j < Sp; j++) {
          let s = 0;
          for (let d = 0; d < hd; d++) s += qp[i][h * hd + d] * kp[j][kvCol(h) + d];
          s *= scale;
          if (j < S) {
            if (attn) s += am.shape.length === 3 ? attn[((n * H + h) * L + i) * S + j] : attn[i * S + j];
            if (pad) s += batched ? pad[n * S + j] : pad[j];
            if (slopes) s -= slopes[h] * Math.abs(i - j);
            if (isCausal && j > i) s = -Infinity;
            if (window > 0 && (j <= i - window || (!isCausal && j >= i + window))) s = -Infinity;
          }
          row.push(s);
        }
        const { w, zero } = softmax(row);
        const at = ((n * H + h) * L + i) * Sp;
        scores.set(row, at);
        headWeights.set(w, at);
        for (let d = 0; d < hd; d++) {
          let s = 0;
          if (!zero) for (let j = 0; j < Sp; j++) s += w[j] * vp[j][kvCol(h) + d];
          concat[i][h * hd + d] = s;
        }
      }
    }
    const y = linear((t, c) => concat[t][c], L, E, sd['out_proj.weight'], 0, E, sd['out_proj.bias'], 0);
    for (let i = 0; i < L; i++) {
      for (let o = 0; o < E; o++) {
        const index = !batched ? i * E + o : config.batchFirst ? (n * L + i) * E + o : (i * N + n) * E + o;
        out[index] = y[i][o];
      }
    }
  }

  const lead = batched ? [N] : [];
  let weights = null;
  if (needWeights && !averageAttnWeights) weights = { data: headWeights, shape: [...lead, H, L, Sp] };
  if (needWeights && averageAttnWeights) {
    const avg = new Float64Array(N * L * Sp);
    for (let n = 0; n < N; n++) {
      for (let x = 0; x < L * Sp; x++) {
        let s = 0;
        for (let h = 0; h < H; h++) s += headWeights[(n * H + h) * L * Sp + x];
        avg[n * L * Sp + x] = s / H;
      }
    }
    weights = { data: avg, shape: [...lead, L, Sp] };
  }
  return {
    output: { data: out, shape: q.shape },
    weights,
    scores: { data: scores, shape: [...lead, H, L, Sp] },
    headWeights: { data: headWeights, shape: [...lead, H, L, Sp] },
  };
}
