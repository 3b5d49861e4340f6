// Ready-made cases in the JSON case format (docs/case-format.md). Plain data, no Node
// imports: the demo page imports this file in browsers too.
//
// Everything exported here is deep-frozen; use structuredClone(seedWorkedExample) to edit a copy.

const X = [[1, 0, 1, 2], [0, 2, 1, 0], [1, 1, 0, 1]];

/**
 * The worked example of the seed article on multi-head attention (the text headscope was started
 * from; it is not in this repository): 3 tokens x 4 dims X, two heads whose Q, K and V
 * projections pick dims 0-1 (head 1) and dims 2-3 (head 2), no biases, and
 * W_O = [[1,0,1,0],[0,1,0,1],[1,0,0,1],[0,1,1,0]], Y = Concat(head_1, head_2) W_O.
 *
 * In PyTorch's terms: in_proj_weight's q, k and v blocks are each the 4x4 identity (the seed's
 * 4x2 W_Q^(h) is the transpose of rows 2h..2h+1 of the q block), and out_proj.weight = W_O
 * transposed (a projection computes x W^T). Same content as tests/golden/seed-worked-example.json;
 * `expected` holds PyTorch's float64 results from that file.
 */
export const seedWorkedExample = deepFreeze({
  name: 'seed-worked-example',
  config: {
    embed_dim: 4, num_heads: 2, bias: false, add_bias_kv: false, add_zero_attn: false,
    kdim: null, vdim: null, batch_first: false,
  },
  state_dict: {
    in_proj_weight: [
      [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1],  // q
      [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1],  // k
      [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1],  // v
    ],
    'out_proj.weight': [[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0]],
  },
  inputs: {
    query: X,
    key: X,
    value: X,
    key_padding_mask: null,
    attn_mask: null,
    need_weights: true,
    average_attn_weights: false,
    is_causal: false,
  },
  expected: {
    output: [
      [1.700548709848323, 2.5947222591347527, 2.6002827225336826, 1.6949882464493933],
      [1.0343062492208694, 2.722529573224908, 1.2320820638612975, 2.5247537585844797],
      [1.314892497578954, 2.639282378211342, 2.034834007492198, 1.9193408682980977],
    ],
    weights: [
      [
        [0.4011120926797859, 0.1977758146404282, 0.4011120926797859],
        [0.04538836291379466, 0.7679179361387025, 0.18669370094750284],
        [0.1977758146404282, 0.4011120926797859, 0.4011120926797859],
      ],
      [
        [0.8481915308314308, 0.050132993657320254, 0.10167547551124893],
        [0.4011120926797859, 0.4011120926797859, 0.1977758146404282],
        [0.575975345215362, 0.14002924504337802, 0.28399540974126003],
      ],
    ],
  },
});

/**
 * A case's projection matrices in the textbook notation of the seed (x W, not x W^T):
 * per head, W_Q, W_K, W_V of shape (E, head_dim) (the transpose of that head's rows of PyTorch's
 * q, k, v blocks), and W_O (E, E) = out_proj.weight transposed. Only for cases with a packed
 * in_proj_weight (kdim = vdim = embed_dim); biases are not included.
 * @returns {{ heads: { wq: number[][], wk: number[][], wv: number[][] }[], wo: number[][] }}
 */
export function projectionMatrices(caseDocument) {
  const { embed_dim: e, num_heads: h } = caseDocument.config;
  const sd = caseDocument.state_dict;
  const inProj = sd.in_proj_weight;
  if (!Array.isArray(inProj)) {
    throw new Error('projectionMatrices: the case has no in_proj_weight (kdim or vdim != embed_dim)');
  }
  const hd = e / h;
  // Rows r0..r0+hd-1 of in_proj_weight, transposed: (E, hd).
  const block = (r0) => Array.from({ length: e }, (_, i) =>
    Array.from({ length: hd }, (_, j) => inProj[r0 + j][i]));
  const heads = Array.from({ length: h }, (_, k) => ({
    wq: block(k * hd),
    wk: block(e + k * hd),
    wv: block(2 * e + k * hd),
  }));
  const out = sd['out_proj.weight'];
  const wo = out[0].map((_, i) => out.map((row) => row[i]));
  return { heads, wo };
}

/** The seed's W_Q^(h), W_K^(h), W_V^(h) (4x2 each) and W_O (4x4), as printed in the seed. */
export function seedProjections() {
  return projectionMatrices(seedWorkedExample);
}

function deepFreeze(value) {
  if (value !== null && typeof value === 'object') {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}
