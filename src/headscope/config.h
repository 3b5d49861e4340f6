// The two argument sets of torch.nn.MultiheadAttention: constructor (MhaConfig) and forward
// (ForwardOptions). Field names follow PyTorch so a reader can map one to the other at a glance.
#ifndef HEADSCOPE_CONFIG_H_
#define HEADSCOPE_CONFIG_H_

#include <cstdint>

#include "headscope/status.h"
#include "headscope/tensor.h"

namespace headscope {

// Rotary position embeddings' pairing of a head's rotary dims (MhaConfig::rope_dims = r):
// kHalf pairs dim i with i + r/2 (GPT-NeoX, LLaMA: "rotate_half"), kInterleaved pairs 2i with
// 2i + 1 (RoFormer, GPT-J). Pair i turns by the angle pos * theta_i, theta_i = 1 / base^(2i / r).
enum class RopeLayout { kHalf, kInterleaved };

struct MhaConfig {
  int64_t embed_dim = 0;
  int64_t num_heads = 1;
  bool bias = true;
  bool add_bias_kv = false;
  bool add_zero_attn = false;
  int64_t kdim = 0;  // 0 means embed_dim (PyTorch's None)
  int64_t vdim = 0;  // 0 means embed_dim
  bool batch_first = false;
  // Grouped-query attention (not a torch.nn.MultiheadAttention argument): G key/value heads, G
  // dividing num_heads; query head h reads K/V head h / (num_heads / G). The K and V projections
  // then have G * head_dim rows (kv_dim()), and so do the keys and values a pass keeps. 0 means
  // num_heads (null): every head its own K/V head, today's module bit for bit. 1: multi-query.
  // (Positional biases are ForwardOptions, applied where masks are; per-head gates, also a
  // ForwardOptions, where each head's output is written.)
  int64_t num_kv_heads = 0;
  // Rotary position embeddings (RoPE, Su et al. 2021; not a torch.nn.MultiheadAttention
  // argument: headscope's rope_dims / ropeDims option, which the Transformer's positions "rope"
  // sets in its layers; rope_layout and rope_base only with rope_dims > 0). rope_dims = r > 0 (even, at most
  // head_dim): after the projections (and their biases) the first r dims of every query head
  // and key head are rotated by position, in pairs (rope_layout), by the angles pos * theta_i,
  // theta_i = 1 / rope_base^(2i / r), i in [0, r/2), whose cos and sin are computed in double and
  // rounded to float; the other head_dim - r dims pass through. Query i has position
  // q_offset + i (0 for Forward, the cache's length for ForwardCached), key j position j (the
  // cache's rows keep theirs); the extra keys of add_bias_kv / add_zero_attn are not rotated. The
  // trace's q and k stay the projections; rot_q and rot_k hold the rotated ones. 0: no rotation.
  int64_t rope_dims = 0;
  RopeLayout rope_layout = RopeLayout::kHalf;
  double rope_base = 10000.0;
  // Attention sinks (gpt-oss; not a torch.nn.MultiheadAttention argument): a learned logit per
  // head, the parameter "sinks" [num_heads], joins every softmax row of that head as one more
  // entry whose weight is dropped: weights exp(x_j - m) / (sum_j exp(x_j - m) + exp(s_h - m)),
  // m = max(max_j x_j, s_h), so a row sums to less than 1 and a head can attend to "nothing".
  // The sink is in the scores' units (after the 1 / sqrt(head_dim) scaling, masks and biases),
  // is never masked, and has no value (kernels/attention.h ScoreModifiers::sinks).
  bool attn_sinks = false;

  int64_t key_dim() const { return kdim > 0 ? kdim : embed_dim; }
  int64_t value_dim() const { return vdim > 0 ? vdim : embed_dim; }
  int64_t head_dim() const { return num_heads > 0 ? embed_dim / num_heads : 0; }
  int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  // The width of the projected keys and values: G * head_dim (embed_dim when G = num_heads).
  int64_t kv_dim() const { return kv_heads() * head_dim(); }
  // PyTorch's _qkv_same_embed_dim: one packed in_proj_weight instead of three.
  bool same_qkv_dim() const { return key_dim() == embed_dim && value_dim() == embed_dim; }
};

// Largest embed_dim / kdim / vdim / num_heads accepted: far beyond any real model, small enough
// that every size computed from them stays exact in 64-bit arithmetic.
inline constexpr int64_t kMaxDim = int64_t{1} << 24;

// Checks what PyTorch's constructor checks, plus sizes: positive, within kMaxDim, embed_dim
// divisible by num_heads, num_heads by num_kv_heads: the schema's rules (schema.h MhaConfigSchema; defined in schema.cc).
Status ValidateConfig(const MhaConfig& config);

struct ForwardOptions {
  MaskView key_padding_mask;  // (N, S) or (S) unbatched; bool true = ignore that key, float = added
  MaskView attn_mask;  // (L, S), (N*num_heads, L, S), or (num_heads, L, S) unbatched
  bool is_causal = false;  // causal mask (key j > query i blocked); attn_mask, if given, must be it
  bool need_weights = true;
  bool average_attn_weights = true;  // (N, L, S') averaged, else (N, num_heads, L, S')
  // (num_heads) or empty (every gate 1). Not a PyTorch argument: head h's output (weights x V,
  // its columns of the concatenation) is multiplied by head_gates[h] before out_proj, which is
  // what zeroing (gate 0) or scaling head h's columns of out_proj.weight computes. The attention
  // weights are not gated. One gate per head for every batch element.
  TensorView head_gates;
  // Not a PyTorch argument: also return, per batch element and head, the attention entropy, mean
  // distance and mean maximum weight (HeadStats in mha.h), computed in the pass from each
  // softmax row (the weights need not be returned for it).
  bool head_stats = false;
  // Not PyTorch arguments: position-dependent attention (kernels/attention.h ScoreModifiers).
  // Positions are indices: query row i is at position i (after a KV cache's rows: cache length +
  // i), key row j at j; the extra keys (bias_k, the zero key) have none and are never biased or
  // windowed. alibi: head h's score (i, j) gets -(slope_h |i - j|) added after the masks, with
  // Press et al.'s slopes for num_heads heads (AlibiSlope). window: 0 none; w >= 1 keys with
  // i - w < j <= i with is_causal (a sliding window of w keys), |i - j| < w without; the keys
  // outside it are skipped by the kernels, so a call's cost grows with w, not with S.
  bool alibi = false;
  int64_t window = 0;
};

}  // namespace headscope

#endif  // HEADSCOPE_CONFIG_H_
