// The parts of Transformer that transformer.cc (the forward passes) and transformer_train.cc
// (backward and training) share: a layer, the packed Linear panels, and what the forward keeps
// for the backward. Not a public header.
#ifndef HEADSCOPE_TRANSFORMER_INTERNAL_H_
#define HEADSCOPE_TRANSFORMER_INTERNAL_H_

#include <memory>
#include <vector>

#include "headscope/transformer.h"

namespace headscope {

// `arg` + ": unknown key for this config (expected keys: <the first 24 of TransformerParams(c), in
// order>)", kUnknownParameter naming the state_dict: the message of a key the model does not have.
Status UnknownKey(const TransformerConfig& c, const std::string& arg);

// A block: its attention module (whose weights are entries of the model's store) and the indices
// of its entries in that store (-1: absent in this config).
struct Transformer::Layer {
  std::unique_ptr<MultiheadAttention> attn;
  KvCache cache;  // Generate's keys and values of this layer (causal models)
  int ln1_w = -1, ln1_b = -1, ln2_w = -1, ln2_b = -1;
  int in_proj_w = -1, in_proj_b = -1, out_proj_w = -1, out_proj_b = -1;
  int sinks = -1;  // attn_sinks: blocks.{l}.attn.sinks [H]
  int fc_in_w = -1, fc_in_b = -1, fc_out_w = -1, fc_out_b = -1;
};

// A Linear weight packed for MatMulPacked, stamped with the store version it was packed from.
struct PackedLinear {
  AlignedBuffer panels;
  uint64_t version = 0;
};
struct Transformer::Packed {
  std::vector<PackedLinear> fc_in, fc_out;  // per layer
  PackedLinear unembed;
  uint64_t version = 0;  // the store version all of them were brought up to
};

// What a training forward keeps per layer for the backward ([M, D] rows, M = B * T, unless
// noted), copied as the forward produces them (the forward itself is the one Forward runs).
// What is cheap to compute again is not kept: the LayerNorm outputs (one row-wise pass), the
// attention's projections (one product, a third of the layer's) and the MLP's activation; that
// halves a layer's memory (the 1M model's training stays within 64 MB of WebAssembly memory).
struct SavedLayer {
  AlignedBuffer resid_pre;  // the block's input (ln1's input under pre-norm)
  AlignedBuffer sum1;       // post-norm: resid_pre + attention output, ln1's input
  AlignedBuffer concat;     // the heads' outputs after their gates, [B, T, D]
  AlignedBuffer pattern;    // softmax weights [B, H, T, T]
  AlignedBuffer resid_mid;  // the MLP sub-block's input x (ln2's input under pre-norm)
  AlignedBuffer h_pre;      // fc_in's output before the activation, [M, d_mlp]
  AlignedBuffer sum2;       // post-norm: resid_mid + MLP output, ln2's input
  // The attention's projections q | k | v, [M, D] then [M, Dkv] twice (Dkv = KvDim: D unless
  // grouped-query; the forward's own, copied), when Saved::keep_qkv; else the backward computes
  // them again.
  AlignedBuffer qkv;
};

struct Transformer::Saved {
  std::vector<SavedLayer> layers;
  // Whether the forward keeps each layer's q | k | v (SavedLayer::qkv): when all layers' together
  // are at most kKeepQkvBytes. Small models (the induction lab's: 0.4 MB) skip a third of each
  // layer's forward products in the backward that way; larger ones (the 1M model's would be
  // 6 MB) recompute them, which keeps their training within 64 MB of WebAssembly memory.
  static constexpr uint64_t kKeepQkvBytes = uint64_t{2} << 20;
  bool keep_qkv = false;
  AlignedBuffer final_in;  // the last block's output: ln_final's input under pre-norm
  AlignedBuffer logits;    // [M, V]
  AlignedBuffer dembed;    // tie_embeddings: the embedding's part of tok_embed's gradient [V, D]
  // The backward's buffers: gradients flowing through the residual stream and the stages, the
  // packed right-hand operand of each product, the recomputed projections, the attention
  // backward's scratch (kernels/attention.h AttentionBackward).
  AlignedBuffer dx, dtmp, dnorm, dwide, dlogits, pack, qkv, head;
};

}  // namespace headscope

#endif  // HEADSCOPE_TRANSFORMER_INTERNAL_H_
