// The Heads view's weights: state_dicts of torch.nn.MultiheadAttention whose heads were built by
// hand (the presets), initialised as PyTorch does, or with heads switched off.
import { designLength, featureLayout, PRESET_LENGTH } from './features.js';
import { seededRandom, gaussian } from './random.js';
import { HeadWriter } from './channels.js';
import { ALL_PRESETS, defaultPresets, PRESET_WRITERS } from './presets.js';
import { MHA_SCHEMA, divisible } from '../../lib/config.js';

/**
 * An orthogonal E x E matrix (rows orthonormal), from Gram-Schmidt on Gaussian rows.
 * @returns {Float64Array} row-major
 */
function randomOrthogonal(E, random) {
  const m = new Float64Array(E * E);
  for (let r = 0; r < E; r++) {
    const row = m.subarray(r * E, (r + 1) * E);
    for (;;) {
      for (let e = 0; e < E; e++) row[e] = gaussian(random);
      for (let p = 0; p < r; p++) {
        const prev = m.subarray(p * E, (p + 1) * E);
        let dot = 0;
        for (let e = 0; e < E; e++) dot += row[e] * prev[e];
        for (let e = 0; e < E; e++) row[e] -= dot * prev[e];
      }
      let norm = 0;
      for (let e = 0; e < E; e++) norm += row[e] * row[e];
      norm = Math.sqrt(norm);
      if (norm > 1e-6) {
        for (let e = 0; e < E; e++) row[e] /= norm;
        break;
      }
    }
  }
  return m;
}

function checkHeads(embedDim, numHeads) {
  if (!Number.isInteger(numHeads) || numHeads < 1 || !divisible(MHA_SCHEMA, { embedDim, numHeads })) {
    throw new RangeError(`numHeads must be a positive divisor of embedDim (${embedDim}), got ${numHeads}`);
  }
}

/**
 * A torch.nn.MultiheadAttention state_dict (embed_dim E, num_heads H, bias=True) whose head h
 * implements heads[h] inside its own rows: W_q and W_k rows h*hd..(h+1)*hd (hd = E / H) hold the
 * preset's channels (see PRESET_WRITERS), rows it does not need stay 0.
 *
 * Values and output, the same for every preset: W_V = Q and W_O = Q^T for a seeded random
 * orthogonal Q (E x E). Head h carries Q_h (its hd rows of Q) times the mix of tokens it attends
 * to, and the layer's output is sum_h Q_h^T Q_h (that head's mix): when every head looks at the
 * same key, the output is exactly that key's embedding. Switching head h off (ablate) removes its
 * term and nothing else.
 *
 * @param {{ embedDim?: number, numHeads: number, heads?: string[], seed?: number, sharpness?: number, length?: number }} o
 *   heads: one name of ALL_PRESETS per head (default defaultPresets(numHeads)); seed: random
 *   presets and Q; sharpness: logits between a head's intended keys and the best other key;
 *   length: the number of tokens it will see (the presets stay exact up to max(32, length)).
 * @returns {{ in_proj_weight: { data: Float32Array, shape: number[] }, in_proj_bias: ...,
 *   'out_proj.weight': ..., 'out_proj.bias': ... }}
 */
export function buildStateDict({ embedDim = 64, numHeads, heads, seed = 1, sharpness = 6, length = PRESET_LENGTH } = {}) {
  if (!Number.isInteger(length) || length < 1) {
    throw new RangeError(`buildStateDict: length must be a positive integer (the tokens it is for), got ${length}`);
  }
  const layout = { ...featureLayout(embedDim), length: designLength(length) };
  checkHeads(embedDim, numHeads);
  const presets = heads ?? defaultPresets(numHeads);
  if (!Array.isArray(presets) || presets.length !== numHeads) {
    throw new RangeError(`buildStateDict: heads must name one preset per head (${numHeads}), got ${presets}`);
  }
  for (const p of presets) {
    if (!ALL_PRESETS.includes(p)) {
      throw new RangeError(`buildStateDict: unknown preset ${JSON.stringify(p)} (expected one of ${ALL_PRESETS.join(', ')})`);
    }
  }
  if (typeof sharpness !== 'number' || !Number.isFinite(sharpness) || sharpness < 0) {
    throw new RangeError(`buildStateDict: sharpness must be a non-negative number, got ${sharpness}`);
  }
  const E = embedDim;
  const hd = E / numHeads;
  const random = seededRandom(seed);
  const inProjWeight = new Float32Array(3 * E * E);
  const inProjBias = new Float32Array(3 * E);
  // Written in float64, stored in float32 at the end.
  const w = new Float64Array(3 * E * E);
  const b = new Float64Array(3 * E);
  presets.forEach((preset, h) => {
    PRESET_WRITERS[preset](new HeadWriter(w, b, E, hd, h), layout, sharpness, random);
  });
  const q = randomOrthogonal(E, random);
  w.set(q, 2 * E * E);  // W_V = Q
  inProjWeight.set(w);
  inProjBias.set(b);
  const outWeight = new Float32Array(E * E);
  for (let r = 0; r < E; r++) for (let c = 0; c < E; c++) outWeight[r * E + c] = q[c * E + r];  // W_O = Q^T
  return {
    in_proj_weight: { data: inProjWeight, shape: [3 * E, E] },
    in_proj_bias: { data: inProjBias, shape: [3 * E] },
    'out_proj.weight': { data: outWeight, shape: [E, E] },
    'out_proj.bias': { data: new Float32Array(E), shape: [E] },
  };
}

/**
 * Seeded random weights distributed as PyTorch initialises nn.MultiheadAttention: in_proj_weight
 * xavier_uniform (bound sqrt(6 / (fan_in + fan_out)) of its shape), out_proj.weight
 * uniform(-1/sqrt(E), 1/sqrt(E)) (Linear's default), both biases 0. An untrained layer: what its
 * heads see before any learning. numKvHeads G < H: the grouped layer's shape (E + 2 G hd, E), alike.
 */
export function randomStateDict({ embedDim = 64, numHeads, seed = 1, numKvHeads = numHeads } = {}) {
  checkHeads(embedDim, numHeads);
  checkKvHeads(numHeads, numKvHeads);
  const E = embedDim;
  const rows = E + 2 * numKvHeads * (E / numHeads);
  const random = seededRandom(seed);
  const uniform = (n, bound) => Float32Array.from({ length: n }, () => (2 * random() - 1) * bound);
  return {
    in_proj_weight: { data: uniform(rows * E, Math.sqrt(6 / (E + rows))), shape: [rows, E] },
    in_proj_bias: { data: new Float32Array(rows), shape: [rows] },
    'out_proj.weight': { data: uniform(E * E, 1 / Math.sqrt(E)), shape: [E, E] },
    'out_proj.bias': { data: new Float32Array(E), shape: [E] },
  };
}

function checkKvHeads(numHeads, numKvHeads) {
  if (!Number.isInteger(numKvHeads) || numKvHeads < 1 || numHeads % numKvHeads !== 0) {
    throw new RangeError(`numKvHeads must be a positive divisor of numHeads (${numHeads}), got ${numKvHeads}`);
  }
}

/**
 * A plain layer's state_dict (in_proj (3E, E), in_proj_bias (3E)) as a grouped-query layer of
 * numKvHeads K/V heads G: the K and V rows (and bias entries) of each group of H / G heads are the
 * mean of the group's heads' rows, as the GQA paper (Ainslie et al. 2023) converts a multi-head
 * checkpoint; W_Q and out_proj stay. G = H returns the state_dict itself.
 */
export function groupKeyValues(stateDict, { embedDim, numHeads, numKvHeads }) {
  checkHeads(embedDim, numHeads);
  checkKvHeads(numHeads, numKvHeads);
  if (numKvHeads === numHeads) return stateDict;
  const E = embedDim;
  const hd = E / numHeads;
  const group = numHeads / numKvHeads;
  const Ekv = numKvHeads * hd;
  // Rows of width `cols` (1: the bias): Q's E rows, then K's and V's pooled to Ekv rows each.
  const pool = (from, cols) => {
    const out = new Float32Array((E + 2 * Ekv) * cols);
    out.set(from.subarray(0, E * cols));
    for (let part = 0; part < 2; part++) {
      for (let g = 0; g < numKvHeads; g++) {
        for (let r = 0; r < hd; r++) {
          for (let c = 0; c < cols; c++) {
            let sum = 0;
            for (let k = 0; k < group; k++) sum += from[(E + part * E + (g * group + k) * hd + r) * cols + c];
            out[(E + part * Ekv + g * hd + r) * cols + c] = sum / group;
          }
        }
      }
    }
    return out;
  };
  return {
    ...stateDict,
    in_proj_weight: { data: pool(stateDict.in_proj_weight.data, E), shape: [E + 2 * Ekv, E] },
    in_proj_bias: { data: pool(stateDict.in_proj_bias.data, 1), shape: [E + 2 * Ekv] },
  };
}

/**
 * A copy of a state_dict with heads switched off: out_proj.weight's columns h*hd..(h+1)*hd set to
 * 0 for every h in `ablated` (0-based). Exactly the same as zeroing those heads' outputs before W_O;
 * attention weights are unchanged. Accepts tensors as { data, shape } or nested arrays, and Maps.
 * @param {object | Map<string, unknown>} stateDict
 * @param {{ embedDim: number, numHeads: number, ablated: Iterable<number> }} o
 */
export function ablateStateDict(stateDict, { embedDim, numHeads, ablated }) {
  checkHeads(embedDim, numHeads);
  const entries = stateDict instanceof Map ? [...stateDict] : Object.entries(stateDict);
  const heads = [...ablated];
  const hd = embedDim / numHeads;
  const out = {};
  for (const [key, value] of entries) {
    if (key !== 'out_proj.weight') {
      out[key] = value;
      continue;
    }
    const t = ArrayBuffer.isView(value?.data) ? value
      : { data: Float32Array.from(value.flat(Infinity)), shape: [value.length, value[0].length] };
    const data = Float32Array.from(t.data);
    const cols = t.shape[1];
    for (const h of heads) {
      if (!Number.isInteger(h) || h < 0 || h >= numHeads) {
        throw new RangeError(`ablateStateDict: head ${h} is not in 0..${numHeads - 1}`);
      }
      for (let r = 0; r < t.shape[0]; r++) data.fill(0, r * cols + h * hd, r * cols + (h + 1) * hd);
    }
    out[key] = { data, shape: [...t.shape] };
  }
  return out;
}
