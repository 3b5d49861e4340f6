// The sizes of one forward() call, read from the config and the query and key shapes: the one
// place in the JavaScript that knows torch.nn.MultiheadAttention's layouts. The C++ core
// (PlanCall) checks the call; this module only says, before anything runs, what a call that
// succeeds takes and returns, for the code that must know it in advance (the CLIs' result-size
// bound, the demo's choice between the page and the Web Worker, the Heads view's batch picker).
//
// PyTorch's rule: a query of rank 3 is batched and a query of rank 2 is not (any other rank
// fails). Batched tensors are (L, N, E), sequence first, unless batch_first, which makes them
// (N, L, E); unbatched ones are (L, E) and batch_first is ignored. The key and value are in the
// query's layout with S positions, and add_bias_kv and add_zero_attn each append one key (bias_k,
// then a zero key) after the S given ones, so the weights have S' = S + extra columns. The output
// has the query's layout with width E; the weights are (N, L, S') averaged over the heads, or
// (N, H, L, S') per head, without the N when unbatched.

/**
 * The sizes of a call. `config` is the JavaScript form (embedDim, numHeads, addBiasKV,
 * addZeroAttn, batchFirst, kdim, vdim; absent flags are false and absent kdim / vdim are
 * embedDim, as normalizeConfig fills them). The shapes may be those of a call that will fail:
 * N and L are null when the query has neither rank 2 nor rank 3, S and Sp also when the key's
 * rank is not the query's (a call PyTorch refuses before it has a result).
 * @param {{ embedDim: number, numHeads: number, addBiasKV?: boolean, addZeroAttn?: boolean,
 *   batchFirst?: boolean, kdim?: number, vdim?: number }} config
 * @param {readonly number[]} queryShape
 * @param {readonly number[]} [keyShape] the query's shape when omitted (self-attention)
 * @returns {{ batched: boolean, batchFirst: boolean, N: number | null, L: number | null,
 *   S: number | null, Sp: number | null, E: number, H: number, kdim: number, vdim: number }}
 *   batched: the query has rank 3; batchFirst: batched and (N, L, E) (false when unbatched, where
 *   batch_first has no effect); N: batch size (1 when unbatched); L: queries; S: keys given;
 *   Sp: keys the weights cover (S plus one for addBiasKV and one for addZeroAttn).
 */
export function callDims(config, queryShape, keyShape = queryShape) {
  const rank = queryShape.length;
  const valid = rank === 2 || rank === 3;
  const batched = rank === 3;
  const batchFirst = batched && config.batchFirst === true;
  // Where the sequence and the batch sit in a tensor of the query's layout.
  const seq = batchFirst ? 1 : 0;
  const S = valid && keyShape.length === rank ? keyShape[seq] : null;
  const extraKeys = (config.addBiasKV ? 1 : 0) + (config.addZeroAttn ? 1 : 0);
  const E = config.embedDim;
  return {
    batched,
    batchFirst,
    N: !valid ? null : batched ? queryShape[batchFirst ? 0 : 1] : 1,
    L: valid ? queryShape[seq] : null,
    S,
    Sp: S === null ? null : S + extraKeys,
    E,
    H: config.numHeads,
    kdim: config.kdim ?? E,
    vdim: config.vdim ?? E,
  };
}

/**
 * The shape of a tensor of `length` positions and `width` features in the call's layout:
 * (length, width) unbatched, (length, N, width), or batchFirst (N, length, width).
 * @param {{ batched: boolean, batchFirst: boolean, N: number | null }} dims from callDims
 * @returns {number[]}
 */
export function sequenceShape(dims, length, width) {
  if (!dims.batched) return [length, width];
  return dims.batchFirst ? [dims.N, length, width] : [length, dims.N, width];
}

/**
 * The shape of forward()'s output: the query's layout with width E. null when the query's rank
 * is wrong.
 * @param {ReturnType<typeof callDims>} dims
 * @returns {number[] | null}
 */
export function outputShape(dims) {
  return dims.L === null ? null : sequenceShape(dims, dims.L, dims.E);
}

/**
 * The shape of forward()'s weights: ([N,] L, S') averaged over the heads (PyTorch's default) or
 * ([N,] H, L, S') per head. null when needWeights is false (forward() returns no weights) or
 * when the shapes' ranks make the call fail. trace()'s scores and weights are always per head.
 * @param {ReturnType<typeof callDims>} dims
 * @param {{ needWeights?: boolean, averageAttnWeights?: boolean }} [options] forward()'s options
 *   (absent or null means PyTorch's default, true)
 * @returns {number[] | null}
 */
export function weightsShape(dims, { needWeights, averageAttnWeights } = {}) {
  if (needWeights === false || dims.L === null || dims.Sp === null) return null;
  const lead = dims.batched ? [dims.N] : [];
  const heads = averageAttnWeights === false ? [dims.H] : [];
  return [...lead, ...heads, dims.L, dims.Sp];
}
