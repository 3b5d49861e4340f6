// The attention stage of multi-head attention, after the input projections and before the output
// projection: for every batch element and head, scores = (Q / sqrt(hd)) K^T + masks, weights =
// softmax(scores), head output = weights x V, written into the concatenation.
#ifndef HEADSCOPE_KERNELS_ATTENTION_H_
#define HEADSCOPE_KERNELS_ATTENTION_H_

#include <cstddef>
#include <cstdint>

namespace headscope {

struct AttentionArgs {
  size_t batch = 0;      // N
  size_t heads = 0;      // H
  size_t q_len = 0;      // L
  size_t kv_len = 0;     // S: keys the masks and causality apply to
  size_t kv_total = 0;   // S' >= S: the extra keys (bias_k, zero attention) are never masked
  size_t head_dim = 0;   // hd
  size_t embed = 0;      // E = H * hd
  // Queries are divided by this before q . k, in that order, as torch 1.13's
  // _scaled_dot_product_attention does (`q / math.sqrt(hd)`, a float32 division by the rounded
  // root): scaling the product instead overflows where torch's scores are finite (q . k near
  // FLT_MAX * sqrt(hd)), and a multiply by 1 / sqrt(hd) would differ from torch by an ulp.
  float sqrt_head_dim = 1.0f;

  const float* q = nullptr;  // [N, L, E]  projected queries, head h in columns h*hd ..
  const float* k = nullptr;  // [N, S', E] projected keys
  const float* v = nullptr;  // [N, S', E] projected values

  // Additive masks, -inf where blocked (bool masks are converted before this stage).
  const float* attn_mask = nullptr;  // [L, S], or [N*H, L, S] when attn_mask_per_head
  bool attn_mask_per_head = false;
  const float* key_padding_mask = nullptr;  // [N, S]
  bool causal = false;                      // key j > query i blocked, for j < S

  float* concat = nullptr;           // out: [N, L, E]
  float* weights = nullptr;          // optional out: [N, H, L, S'], or averaged [N, L, S']
  bool average_weights = false;
  float* scores = nullptr;           // optional out (trace): [N, H, L, S'] masked, pre-softmax

  // Threads that may run the stage at once (the multi-threaded build's ThreadCount() when the
  // caller sized the workspace): each needs its own scratch (packed K/V, score tile).
  size_t workers = 1;

  // Extension point: positional biases (ALiBi, relative) and per-head gates are further
  // additive terms / multipliers applied where the masks are; grouped-query attention maps head
  // h to K/V head h / group. Neither changes the stage's shape.
};

// Query rows per tile: bounds the score scratch to kAttentionQueryTile x S' whatever L is.
inline constexpr size_t kAttentionQueryTile = 64;

// Heads small enough that packing K and V (per head, per call) costs more than it saves: the
// stage then takes direct dot products. Tutorial shapes (hd 2..8, a handful of keys) live here.
// Measured in WebAssembly (attention stage, V8): direct is 2.2x faster at L=S'=3 hd=2, 1.1x at
// L=S'=12 hd=12, 1.4x slower at L=S'=16 hd=16 and 1.5x slower at L=S'=32 hd=16.
inline constexpr size_t kSmallMaxHeadDim = 16;
inline constexpr size_t kSmallMaxKeys = 12;
inline bool SmallAttention(const AttentionArgs& a) {
  return a.head_dim <= kSmallMaxHeadDim && a.kv_total <= kSmallMaxKeys;
}

// Floats of scratch Attention() needs for these sizes and args.workers threads (saturating at
// UINT64_MAX, so a caller can check it against its memory limit before allocating).
uint64_t AttentionWorkspaceFloats(const AttentionArgs& args);

// Runs the stage; `workspace` holds AttentionWorkspaceFloats(args) floats, 64-byte aligned.
void Attention(const AttentionArgs& args, float* workspace);

}  // namespace headscope

#endif  // HEADSCOPE_KERNELS_ATTENTION_H_
