// The attention stage of multi-head attention, after the input projections and before the output
// projection: for every batch element and head, scores = (Q / sqrt(hd)) K^T + masks, weights =
// softmax(scores), head output = weights x V, written into the concatenation.
//
// Its arguments name their geometry instead of assuming it: AttentionShape (sizes, strides and
// which K/V head a query head reads), VisibleKeys (the keys a query row may see, as a range),
// ScoreModifiers (everything applied to the scores between q . k and the softmax) and
// AttentionOutputs (what the stage writes, including per-row statistics). The kernels read
// operands only through them, so grouped-query attention, sliding windows or another activation
// layout are changes to these values, not to the kernels.
#ifndef HEADSCOPE_KERNELS_ATTENTION_H_
#define HEADSCOPE_KERNELS_ATTENTION_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "headscope/kernels/matmul.h"  // PackedFloats

namespace headscope {

// Sizes and strides (in floats) of the stage's operands. Query head h reads columns
// [h * hd, (h + 1) * hd) of its rows of q; it reads K and V head KvHead(h) (columns
// [KvHead(h) * hd, ...) of the K/V rows). The concatenation has the queries' geometry.
struct AttentionShape {
  size_t batch = 0;      // N
  size_t heads = 0;      // H, query heads
  size_t kv_heads = 0;   // H_kv, K/V heads; H_kv divides H (grouped-query: H_kv < H)
  size_t q_len = 0;      // L
  size_t kv_len = 0;     // S: keys the masks and visibility apply to
  size_t kv_total = 0;   // S' >= S: the extra keys (bias_k, zero attention) are always visible
  size_t head_dim = 0;   // hd

  // Row (n, i) of q and of the concatenation starts at n * q_batch_stride + i * q_row_stride;
  // row (n, j) of k and v at n * kv_batch_stride + j * kv_row_stride.
  size_t q_batch_stride = 0;
  size_t q_row_stride = 0;
  size_t kv_batch_stride = 0;
  size_t kv_row_stride = 0;

  // The one head-to-K/V-head mapping every path uses: consecutive query heads share a K/V head,
  // as in grouped-query attention (heads / kv_heads query heads per group).
  size_t KvHead(size_t h) const { return h / (heads / kv_heads); }
  // Where query head h of batch element n starts (its row 0) in q and the concatenation, and
  // where its K/V head starts in k and v: the per-head offsets of the forward and the backward.
  size_t QOffset(size_t n, size_t h) const { return n * q_batch_stride + h * head_dim; }
  size_t KvOffset(size_t n, size_t h) const { return n * kv_batch_stride + KvHead(h) * head_dim; }
  // Where (n, h)'s rows start in per-head weights or scores, dense [N, H, L, S'].
  size_t WeightsOffset(size_t n, size_t h) const { return (n * heads + h) * q_len * kv_total; }

  // Contiguous activations, queries [N, L, H * hd] and keys and values [N, S', H_kv * hd]: how
  // MultiheadAttention lays them out. kv_heads 0 means H (one K/V head per query head).
  static AttentionShape Dense(size_t batch, size_t heads, size_t q_len, size_t kv_len,
                              size_t kv_total, size_t head_dim, size_t kv_heads = 0) {
    AttentionShape s;
    s.batch = batch;
    s.heads = heads;
    s.kv_heads = kv_heads > 0 ? kv_heads : heads;
    s.q_len = q_len;
    s.kv_len = kv_len;
    s.kv_total = kv_total;
    s.head_dim = head_dim;
    s.q_row_stride = heads * head_dim;
    s.kv_row_stride = s.kv_heads * head_dim;
    s.q_batch_stride = q_len * heads * head_dim;
    s.kv_batch_stride = kv_total * s.kv_heads * head_dim;
    return s;
  }
};

// Everything applied to a score row between q . k and the softmax, in one place: MaskScores
// consumes it (and VisibleKeys the visibility part).
struct ScoreModifiers {
  // Additive masks, -inf where blocked (bool masks are converted before the stage). They cover
  // the first S keys; the extra keys are never masked.
  const float* attn_mask = nullptr;  // [L, S], or [N*H, L, S] when attn_mask_per_head
  bool attn_mask_per_head = false;
  const float* key_padding_mask = nullptr;  // [N, S]
  bool causal = false;                      // query i sees keys j <= q_offset + i (of the first S)
  // The key position of query row 0: the queries are the keys q_offset.. of a longer sequence
  // (generation with a KV cache: new tokens after the cached ones). 0 otherwise.
  size_t q_offset = 0;

  // ALiBi (Press et al. 2022): [H] slopes, or null. Score (i, j) of head h, j < S, gets
  // -(slope_h * |p - j|) added after the masks, p = q_offset + i the query's position (causal:
  // p - j >= 0 for every visible key, Press et al.'s -slope (i - j); non-causal the symmetric
  // distance, as BLOOM-style bidirectional uses define it). The product is one float multiply of
  // the slope by the exact distance, its negation added once: the reference module's
  // `scores + -(slopes * |i - j|)`. Extra keys (bias_k, the zero key) have no position: no bias.
  // AlibiSlope gives Press et al.'s slopes.
  const float* alibi_slopes = nullptr;
  // Sliding window: 0 = none. w >= 1: with causal, query position p sees keys
  // p - w < j <= p (Mistral's / Longformer's causal window, w keys including itself); without
  // causal the bidirectional window |p - j| < w. Through VisibleKeys, so every kernel skips the
  // keys outside it: cost grows with w, not with S.
  size_t window = 0;
  // Attention sinks (gpt-oss): [H] logits, or null. Head h's sink joins each of its softmax rows
  // as one more entry, in the max and the sum, whose weight is not kept: the row's weights sum to
  // 1 - p_sink. Not a key: never masked, no position, no value, not in the trace's scores. The
  // softmax consumes it, not MaskScores (SoftmaxImpl's `sink`). A row whose every key is masked
  // gets weights 0 and output 0 (the zero-row policy; torch's weights are 0 there too), whatever
  // the sink. A NaN or +inf sink makes the head's other rows NaN, as torch.softmax over the row
  // and the sink does.
  const float* sinks = nullptr;
  // (A slot for later, not implemented: soft-capping, `float soft_cap`, scores = cap *
  // tanh(scores / cap) before the masks, Gemma 2.)

  // True if some query rows see fewer than all S keys, so a tile may skip keys no row sees.
  bool LimitsKeys() const { return causal || window > 0; }
  // True if MaskScores changes anything (else the stage skips its per-row calls).
  bool Any() const {
    return attn_mask != nullptr || key_padding_mask != nullptr || alibi_slopes != nullptr ||
           LimitsKeys();
  }
};

// Press et al.'s ALiBi slope of head h (0-based) of `heads`: with p the largest power of two <=
// heads, heads h < p get 2^(-8 (h + 1) / p), and the remaining heads the odd-indexed slopes of 2p
// heads, 2^(-8 (2 (h - p) + 1) / (2 p)) (the ALiBi repository's get_slopes, which BLOOM's
// build_alibi_tensor also computes). In double, rounded once to float: 8 (h + 1) / p is exact, and
// the float is get_slopes' (checked for 1..256 heads by tools/make_transformer_golden.py).
inline float AlibiSlope(size_t h, size_t heads) {
  size_t p = 1;
  while (p * 2 <= heads) p *= 2;
  const double e = h < p ? -8.0 * static_cast<double>(h + 1) / static_cast<double>(p)
                         : -8.0 * static_cast<double>(2 * (h - p) + 1) / static_cast<double>(2 * p);
  return static_cast<float>(std::pow(2.0, e));
}

// The keys [begin, end) of the first S that query row i may see; keys outside it get -inf.
// The extra keys (S <= j < S') are visible to every row.
struct KeyRange {
  size_t begin = 0;
  size_t end = 0;
};
// Causal: end = p + 1 (p = q_offset + i, the query's position); a window w moves begin to
// p + 1 - w, and without causal end to p + w. Both ends are non-decreasing in i, which the tiles'
// key skipping and the backward's row chunks rely on. An empty range (begin = end) is a fully
// masked row.
inline KeyRange VisibleKeys(const AttentionShape& shape, const ScoreModifiers& mods, size_t i) {
  KeyRange r{0, shape.kv_len};
  const size_t p = mods.q_offset + i;
  if (mods.causal && p + 1 < r.end) r.end = p + 1;
  if (mods.window > 0) {
    if (p + 1 > mods.window) r.begin = p + 1 - mods.window;
    if (!mods.causal && p + mods.window < r.end) r.end = p + mods.window;
    if (r.begin > r.end) r.begin = r.end;
  }
  return r;
}

// Per-row outputs ("sinks"): one value per (batch element, head, query row), [N, H, L], written
// where the stage has the row at hand, so statistics need no second pass over the weights and no
// [N, H, L, S'] buffer. Each pointer is optional (null: not computed, no cost). A fully masked row
// (all weights 0) gives 0 in every sink; a NaN row gives NaN.
struct RowSinks {
  // The row's largest softmax weight (the head's "confidence" for that query).
  float* max_weight = nullptr;
  // Shannon entropy of the row in nats, -sum_j w_j ln w_j over all S' keys (0 ln 0 = 0).
  float* entropy = nullptr;
  // Attention distance, sum_j w_j |p - j| over the first S keys, p = q_offset + i the query's
  // position: the extra keys (bias_k, the zero key) have no position, so the weight on them adds
  // no distance.
  float* distance = nullptr;
  bool any() const { return max_weight != nullptr || entropy != nullptr || distance != nullptr; }
};

// What the stage writes. concat has the queries' geometry (AttentionShape's q strides).
struct AttentionOutputs {
  float* concat = nullptr;   // [N, L, H * hd]
  float* weights = nullptr;  // optional: [N, H, L, S'], or averaged [N, L, S']
  bool average_weights = false;
  float* scores = nullptr;   // optional (trace): [N, H, L, S'] masked, pre-softmax
  // Optional [H]: head h's rows of the concatenation are multiplied by head_gates[h] as they are
  // written (after the zero-row policy, so a gate of NaN makes even a fully masked row NaN, as
  // torch's `concat * gates` would). null: no multiply at all, the bits of an ungated call.
  const float* head_gates = nullptr;
  RowSinks sinks;
};

struct AttentionArgs {
  AttentionShape shape;
  // Queries are divided by this before q . k, in that order, as torch 1.13's
  // _scaled_dot_product_attention does (`q / math.sqrt(hd)`, a float32 division by the rounded
  // root): scaling the product instead overflows where torch's scores are finite (q . k near
  // FLT_MAX * sqrt(hd)), and a multiply by 1 / sqrt(hd) would differ from torch by an ulp.
  float sqrt_head_dim = 1.0f;

  const float* q = nullptr;  // projected queries, AttentionShape's q geometry
  const float* k = nullptr;  // projected keys,    its kv geometry (H_kv heads)
  const float* v = nullptr;  // projected values,  its kv geometry

  ScoreModifiers modifiers;
  AttentionOutputs out;

  // Threads the caller sized the workspace for (its CallContext's pool): each needs its own
  // scratch (packed K/V, score tile). The stage uses the pool only if that covers all of it.
  size_t workers = 1;
};

// Query rows per tile: bounds the score scratch to kAttentionQueryTile x S' whatever L is.
inline constexpr size_t kAttentionQueryTile = 64;
// The packed path's tile rows: kAttentionQueryTile (or L if fewer), except that a causal call
// whose L fits one such tile takes tiles of kCausalQueryTile rows, so that each tile skips the
// keys its rows do not see (with one tile of L rows its last row sees every key: nothing is
// skipped). A sliding window takes them at any L: a tile then sees about window + 16 keys, from its
// first row's begin to its last row's end. A row's numbers do not depend on the tiling (each is its own dot products, softmax
// and weights x V chain; skipped keys are 0-weight terms at a chain's end).
inline constexpr size_t kCausalQueryTile = 16;
inline size_t PackedQueryTile(const AttentionArgs& a) {
  const size_t L = a.shape.q_len;
  if (L > kCausalQueryTile && a.modifiers.LimitsKeys() && a.shape.kv_total == a.shape.kv_len &&
      (L <= kAttentionQueryTile || a.modifiers.window > 0)) {
    return kCausalQueryTile;
  }
  return L < kAttentionQueryTile ? L : kAttentionQueryTile;
}

// Heads small enough that packing K and V (per head, per call) costs more than it saves: the
// stage then takes direct dot products. Tutorial shapes (hd 2..8, a handful of keys) live here.
// Measured in WebAssembly (attention stage, V8): direct is 2.2x faster at L=S'=3 hd=2, 1.1x at
// L=S'=12 hd=12, 1.4x slower at L=S'=16 hd=16 and 1.5x slower at L=S'=32 hd=16.
inline constexpr size_t kSmallMaxHeadDim = 16;
inline constexpr size_t kSmallMaxKeys = 12;
inline bool SmallAttention(const AttentionArgs& a) {
  return a.shape.head_dim <= kSmallMaxHeadDim && a.shape.kv_total <= kSmallMaxKeys;
}

// Floats of scratch Attention() needs for these sizes and args.workers threads (saturating at
// UINT64_MAX, so a caller can check it against its memory limit before allocating).
uint64_t AttentionWorkspaceFloats(const AttentionArgs& args);

// Runs the stage; `workspace` holds AttentionWorkspaceFloats(args) floats, 64-byte aligned.
void Attention(const AttentionArgs& args, float* workspace);

// The attention stage's backward (the training's, transformer_train.cc), over the forward's own
// operands and addressed as the forward addresses them: per-head offsets through AttentionShape
// (QOffset, KvOffset: its KvHead mapping) and the keys each query row saw through VisibleKeys.
// For every batch element n and head h, with P the softmax weights, g the head's gate, dZ the
// gradient of the head's (gated) output and M = dZ V^T:
//   dV = g P^T dZ,  dS = P * (g M - rowsum(P * g M)),  dQ = scale dS K,  dK = scale dS^T Q
// (scale = 1 / sqrt(hd): scores = (Q / sqrt(hd)) K^T; an ALiBi bias is a constant of the scores
// and needs nothing here). The products are the packed matmul's
// (matmul-inl.h), over the visible keys only: P and dS are 0 outside them, so what is skipped
// are zero terms at a chain's end (dQ) or start (dV, dK), which change no bits. Where hd is whole
// column groups and T < 128 (RowMajorBTakes), dV, dQ and dK read dZ, K and Q in place
// (MatMulRowMajorBImpl) instead of packing them: the same chains, the same bits.
// Self-attention over the call's own keys: L = S = S' (no extra keys, no cache), masks other
// than the visibility rule (causal, the window) not supported. With grouped-query attention (H_kv < H) the
// H / H_kv query heads of a group read one K/V head, and its dK and dV are their sum: the group's
// first head writes them, each later one computes its own into the scratch and adds it, in head
// order (((dK_h0 + dK_h1) + dK_h2) ...; with H_kv = H nothing is added: the bits of one head).
struct AttentionBackwardArgs {
  // The forward's geometry and rule: q, k, v (the projections, unscaled) in the shape's q and kv
  // geometry, dz (the concatenation's gradient) in its q geometry; the visibility (VisibleKeys);
  // AttentionArgs' sqrt_head_dim.
  AttentionShape shape;
  ScoreModifiers modifiers;
  float sqrt_head_dim = 1.0f;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* weights = nullptr;     // [N, H, L, S']: the forward's per-head softmax weights
  const float* head_gates = nullptr;  // [H], or null (all 1): AttentionOutputs::head_gates
  const float* dz = nullptr;
  // The gradients, overwritten: dq in grads' q geometry, dk and dv in its kv geometry (grads has
  // the shape's sizes).
  AttentionShape grads;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
  double* gate_grads = nullptr;  // null, or [H]: += sum over n, i, j of P[i, j] M[i, j], in double
  // null, or [H] (with modifiers.sinks): += d loss / d sink_h = -sum over n, i of p_sink(i)
  // sum_j P[i, j] g M[i, j], in double; p_sink(i) = 1 - sum_j P[i, j] (the row's missing mass,
  // summed in double over the visible keys). The sink is one more softmax entry whose dP is 0,
  // so dS over the real keys keeps its formula.
  double* sink_grads = nullptr;
};
// A head's scratch: the packed operand of each product (the larger of K/V and their
// transposes), rounded to 64 bytes, then the [T, T] tile of M and dS, then (grouped-query only)
// a later head's own dK and dV, [T, hd] each, before they are added to its group's. The one
// definition of that layout, for the kernel and AttentionBackwardFloats.
inline size_t HeadBackwardPackFloats(size_t len, size_t head_dim) {
  const size_t a = PackedFloats(len, head_dim), b = PackedFloats(head_dim, len);
  return ((a > b ? a : b) + 15) / 16 * 16;
}
// Floats of scratch AttentionBackward needs (64-byte aligned): one head's, reused by every head.
// `group`: query heads per K/V head (H / H_kv; 1 without grouped-query attention).
inline size_t AttentionBackwardFloats(size_t len, size_t head_dim, size_t group = 1) {
  return HeadBackwardPackFloats(len, head_dim) + len * len +
         (group > 1 ? 2 * len * head_dim : 0);
}
void AttentionBackward(const AttentionBackwardArgs& args, float* scratch);

}  // namespace headscope

#endif  // HEADSCOPE_KERNELS_ATTENTION_H_
