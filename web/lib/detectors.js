// Head detectors: how much of a head's attention goes where a kind of head would put it, from
// the attention patterns and the tokens alone (TransformerLens's head_detector, its "mul"
// measure, plus the first-token detector). Plain JavaScript like tasks.js: no WebAssembly, so a
// page, a Worker or a Node script uses it the same way.
//
//   import { headScores, modelHeadScores, DETECTORS } from 'headscope/detectors';
//   const { hooks } = model.forward(tokens, { hooks: ['blocks.1.attn.hook_pattern'] });
//   headScores(hooks['blocks.1.attn.hook_pattern'], tokens);   // { induction: [h0, h1], ... }
//   modelHeadScores(model, probe.tokens);                       // every layer: [l][h] per detector
//
// A detector is a 0/1 "detection pattern" D over (query i, key j), lower triangular like a causal
// pattern; a head's score on one sequence is sum(P * D) / sum(P) over all (i, j): the fraction of
// the head's attention that lands where D has a 1. Over a batch the score is the mean of the
// sequences' scores (TransformerLens's detect_head over a list). The patterns, with tokens t:
//   previous-token  D[i][i - 1] = 1                        (TransformerLens previous_token_head)
//   first-token     D[i][0] = 1                            (attention to <bos>, a sink)
//   same-token      D[i][j] = 1 for j < i, t[j] = t[i]     (duplicate_token_head)
//   induction       D[i][j] = 1 for 1 <= j <= i, t[j - 1] = t[i]   (induction_head: the token
//                   after an earlier occurrence of the current one, the duplicate pattern shifted
//                   one key to the right)
// Options as TransformerLens's: excludeBos sets P[:, 0] = 0 and excludeCurrentToken P[i][i] = 0
// before both sums. A sequence whose (remaining) attention sums to 0 has no score (NaN). Scores are
// summed in float64 in a fixed order: the same numbers in every engine.
import { HeadscopeError } from './errors.js';
import { quoteInput } from './tensor.js';

/** The detector names, in the order results list them. */
export const DETECTORS = Object.freeze(['previous-token', 'first-token', 'same-token', 'induction']);

function fail(code, message) {
  throw new HeadscopeError(code, message);
}

function describe(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return `an array of length ${v.length}`;
  return typeof v === 'object' ? `an object (${Object.prototype.toString.call(v).slice(8, -1)})` : `${typeof v} ${String(v)}`;
}

// Tokens (T) or (B, T) as [B, T, Int32Array]: nested arrays of integers or { data, shape }.
function readTokens(tokens, name) {
  if (tokens instanceof Int32Array) {  // one sequence (T), as task.probe().tokens.data
    if (tokens.length < 1) fail('SHAPE_MISMATCH', `${name}: expected at least one token`);
    return [1, tokens.length, tokens.slice()];
  }
  if (tokens !== null && typeof tokens === 'object' && !Array.isArray(tokens) && 'data' in tokens) {
    const { data, shape } = tokens;
    if (!(data instanceof Int32Array) || !Array.isArray(shape) || (shape.length !== 1 && shape.length !== 2)) {
      fail('INVALID_ARGUMENT', `${name}: expected { data: Int32Array, shape: [T] or [B, T] }, got ${describe(tokens)}`);
    }
    const [B, T] = shape.length === 1 ? [1, shape[0]] : shape;
    if (!Number.isInteger(B) || !Number.isInteger(T) || B < 1 || T < 1 || B * T !== data.length) {
      fail('SHAPE_MISMATCH', `${name}: shape [${shape.join(', ')}] does not hold ${data.length} token ids`);
    }
    return [B, T, data.slice()];
  }
  if (!Array.isArray(tokens) || tokens.length === 0) {
    fail('INVALID_ARGUMENT', `${name}: expected token ids (T) or (B, T), got ${describe(tokens)}`);
  }
  const rows = Array.isArray(tokens[0]) ? tokens.slice() : [tokens];
  const T = rows[0].length;
  const data = new Int32Array(rows.length * T);
  rows.forEach((row, b) => {
    if (!Array.isArray(row) || row.length !== T) {
      fail('SHAPE_MISMATCH', `${name}[${b}]: expected ${T} token ids like row 0, got ${describe(row)}`);
    }
    for (let t = 0; t < T; t++) {
      const v = row[t];
      if (!Number.isInteger(v)) fail('INVALID_ARGUMENT', `${name}[${b}][${t}]: expected an integer token id, got ${describe(v)}`);
      data[b * T + t] = v;
    }
  });
  if (T < 1) fail('SHAPE_MISMATCH', `${name}: expected at least one token`);
  return [rows.length, T, data];
}

function readOptions(options) {
  if (options === undefined) return { detectors: DETECTORS, excludeBos: false, excludeCurrentToken: false };
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    fail('INVALID_ARGUMENT', `options: expected an object, got ${describe(options)}`);
  }
  const known = ['detectors', 'excludeBos', 'excludeCurrentToken'];
  const out = {};
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) fail('INVALID_ARGUMENT', `options.${quoteInput(key)}: unknown option (expected one of ${known.join(', ')})`);
    out[key] = options[key];
  }
  const detectors = out.detectors === undefined ? DETECTORS : out.detectors;
  if (!Array.isArray(detectors) || detectors.length === 0 || detectors.length > DETECTORS.length) {
    fail('INVALID_ARGUMENT', `options.detectors: expected a non-empty array of ${DETECTORS.map((d) => `'${d}'`).join(', ')}, got ${describe(detectors)}`);
  }
  const names = detectors.slice();
  names.forEach((d, i) => {
    if (!DETECTORS.includes(d)) fail('INVALID_ARGUMENT', `options.detectors[${i}]: expected one of ${DETECTORS.map((x) => `'${x}'`).join(', ')}, got ${describe(d)}`);
  });
  for (const k of ['excludeBos', 'excludeCurrentToken']) {
    if (out[k] !== undefined && typeof out[k] !== 'boolean') fail('INVALID_ARGUMENT', `options.${k}: expected a boolean, got ${describe(out[k])}`);
  }
  return { detectors: names, excludeBos: out.excludeBos === true, excludeCurrentToken: out.excludeCurrentToken === true };
}

/**
 * The detection pattern of `name` for one sequence of token ids (T numbers or an Int32Array):
 * a (T, T) row-major Uint8Array of 0 and 1 (see the top of this file).
 */
export function detectionPattern(name, tokens) {
  if (!DETECTORS.includes(name)) fail('INVALID_ARGUMENT', `name: expected one of ${DETECTORS.map((x) => `'${x}'`).join(', ')}, got ${describe(name)}`);
  const [B, T, t] = readTokens(tokens, 'tokens');
  if (B !== 1) fail('SHAPE_MISMATCH', `tokens: expected one sequence (T), got ${B} rows`);
  const d = new Uint8Array(T * T);
  for (let i = 0; i < T; i++) {
    for (let j = 0; j <= i; j++) d[i * T + j] = isDetected(name, t, 0, i, j) ? 1 : 0;
  }
  return d;
}

function isDetected(name, t, o, i, j) {
  switch (name) {
    case 'previous-token': return j === i - 1;
    case 'first-token': return j === 0;
    case 'same-token': return j < i && t[o + j] === t[o + i];
    default: return j >= 1 && t[o + j - 1] === t[o + i];  // induction
  }
}

/**
 * Scores of every head of one layer's attention patterns, (B, H, T, T) (or (H, T, T) for one
 * sequence), as forward's 'blocks.{l}.attn.hook_pattern' returns them, on the tokens they were
 * computed from, (B, T) or (T): { [detector]: number[H] }, each the mean over the sequences.
 */
export function headScores(pattern, tokens, options) {
  const o = readOptions(options);
  const [B, T, t] = readTokens(tokens, 'tokens');
  if (pattern === null || typeof pattern !== 'object' || !(pattern.data instanceof Float32Array || pattern.data instanceof Float64Array) ||
      !Array.isArray(pattern.shape)) {
    fail('INVALID_ARGUMENT', `pattern: expected a Tensor { data: Float32Array, shape: [B, H, T, T] }, got ${describe(pattern)}`);
  }
  const shape = pattern.shape.slice();
  const data = pattern.data;
  const full = shape.length === 3 ? [1, ...shape] : shape;
  const H = full[1];
  if (full.length !== 4 || full[0] !== B || full[2] !== T || full[3] !== T || !Number.isInteger(H) || H < 1 ||
      B * H * T * T !== data.length) {
    fail('SHAPE_MISMATCH', `pattern: expected (B, H, T, T) = [${B}, H, ${T}, ${T}] for tokens (${B}, ${T}), got [${shape.join(', ')}]`);
  }
  const out = {};
  for (const name of o.detectors) {
    const scores = new Array(H).fill(0);
    for (let h = 0; h < H; h++) {
      let sum = 0;
      for (let b = 0; b < B; b++) {
        const base = (b * H + h) * T * T;
        let hit = 0;
        let all = 0;
        for (let i = 0; i < T; i++) {
          for (let j = 0; j < T; j++) {
            if ((o.excludeBos && j === 0) || (o.excludeCurrentToken && j === i)) continue;
            const p = data[base + i * T + j];
            all += p;
            if (j <= i && isDetected(name, t, b * T, i, j)) hit += p;
          }
        }
        sum += hit / all;  // 0 / 0: NaN, no score
      }
      scores[h] = sum / B;
    }
    out[name] = scores;
  }
  return out;
}

/**
 * Every layer's head scores of a Transformer (hs.createTransformer) on tokens: one forward with
 * every layer's pattern hook, then headScores per layer. { [detector]: number[nLayers][nHeads] };
 * for a worker's model (initWorker().createTransformer), a promise of it.
 */
export function modelHeadScores(model, tokens, options) {
  const o = readOptions(options);
  const L = model?.config?.nLayers;
  if (!Number.isInteger(L) || typeof model.forward !== 'function') {
    fail('INVALID_ARGUMENT', `model: expected a Transformer (hs.createTransformer), got ${describe(model)}`);
  }
  const hooks = Array.from({ length: L }, (_, l) => `blocks.${l}.attn.hook_pattern`);
  const [B, T, t] = readTokens(tokens, 'tokens');
  const batched = { data: t, shape: [B, T] };
  const score = (result) => {
    const out = Object.fromEntries(o.detectors.map((d) => [d, []]));
    for (let l = 0; l < L; l++) {
      const scores = headScores(result.hooks[hooks[l]], batched, o);
      for (const d of o.detectors) out[d].push(scores[d]);
    }
    return out;
  };
  const result = model.forward(batched, { hooks });
  // A worker's model (initWorker().createTransformer) answers with a promise: so does this.
  return typeof result?.then === 'function' ? result.then(score) : score(result);
}
