// Per-target code of the attention stage (see attention.h): QDotK, MaskScores, Softmax and
// WeightedSumV as named stages over tiles of query rows, built on the packed matmul.

#if defined(HEADSCOPE_KERNELS_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HEADSCOPE_KERNELS_ATTENTION_INL_H_
#undef HEADSCOPE_KERNELS_ATTENTION_INL_H_
#else
#define HEADSCOPE_KERNELS_ATTENTION_INL_H_
#endif

#include <cstddef>
#include <cstring>
#include <limits>

#include "headscope/kernels/attention.h"
#include "headscope/kernels/matmul-inl.h"
#include "headscope/kernels/matmul.h"
#include "headscope/kernels/softmax-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace headscope {
namespace HWY_NAMESPACE {

// scores[r, j] = scale * q_r . k_j for the tile's rows; K packed as the matmul's right operand.
HWY_INLINE void QDotK(const AttentionArgs& a, const float* q_rows, const float* packed_k,
                      size_t rows, float* scores, size_t ld_scores) {
  MatMulPackedImpl(q_rows, a.embed, packed_k, nullptr, rows, a.kv_total, a.head_dim, a.scale,
                   scores, ld_scores);
}

// Adds attn_mask and key_padding_mask and applies causality to one score row (query `i`).
HWY_INLINE void MaskScores(const AttentionArgs& a, size_t n, size_t h, size_t i, float* row) {
  if (a.attn_mask != nullptr) {
    const size_t slice = a.attn_mask_per_head ? n * a.heads + h : 0;
    AddInPlaceImpl(row, a.attn_mask + (slice * a.q_len + i) * a.kv_len, a.kv_len);
  }
  if (a.key_padding_mask != nullptr) {
    AddInPlaceImpl(row, a.key_padding_mask + n * a.kv_len, a.kv_len);
  }
  if (a.causal) {
    for (size_t j = i + 1; j < a.kv_len; ++j) row[j] = -std::numeric_limits<float>::infinity();
  }
}

// head_out[r, :] = weights[r, :] x V, V packed transposed; rows that were fully masked get 0.
HWY_INLINE void WeightedSumV(const AttentionArgs& a, const float* weights, size_t ld_weights,
                             const float* packed_vt, size_t rows, const bool* fully_masked,
                             float* head_out) {
  MatMulPackedImpl(weights, ld_weights, packed_vt, nullptr, rows, a.head_dim, a.kv_total, 1.0f,
                   head_out, a.embed);
  for (size_t r = 0; r < rows; ++r) {
    // The softmax row is already 0; zeroing the output too keeps NaN/inf in V from leaking
    // into a row the policy defines as 0.
    if (fully_masked[r]) std::memset(head_out + r * a.embed, 0, a.head_dim * sizeof(float));
  }
}

HWY_INLINE void AttentionImpl(const AttentionArgs& a, float* workspace) {
  const size_t L = a.q_len, S = a.kv_total, E = a.embed, hd = a.head_dim;
  const size_t tile = L < kAttentionQueryTile ? L : kAttentionQueryTile;
  float* packed_k = workspace;                                   // [ceil(S/16)][hd][16]
  float* packed_vt = packed_k + PackedFloats(S, hd);             // [ceil(hd/16)][S][16]
  float* score_tile = packed_vt + PackedFloats(hd, S);           // [tile, S']
  bool* fully_masked = reinterpret_cast<bool*>(score_tile + tile * S);  // [tile]
  const bool per_head_weights = a.weights != nullptr && !a.average_weights;

  for (size_t n = 0; n < a.batch; ++n) {
    for (size_t h = 0; h < a.heads; ++h) {
      const float* k_head = a.k + n * S * E + h * hd;  // rows of stride E
      const float* v_head = a.v + n * S * E + h * hd;
      PackB(k_head, S, hd, E, 1, packed_k);
      PackB(v_head, hd, S, 1, E, packed_vt);
      for (size_t i0 = 0; i0 < L; i0 += tile) {
        const size_t rows = (L - i0 < tile) ? L - i0 : tile;
        // Per-head weights are computed in place in the caller's output: no copy.
        float* scores = per_head_weights ? a.weights + ((n * a.heads + h) * L + i0) * S
                                         : score_tile;
        QDotK(a, a.q + (n * L + i0) * E + h * hd, packed_k, rows, scores, S);
        for (size_t r = 0; r < rows; ++r) {
          float* row = scores + r * S;
          MaskScores(a, n, h, i0 + r, row);
          if (a.scores != nullptr) {
            std::memcpy(a.scores + ((n * a.heads + h) * L + i0 + r) * S, row, S * sizeof(float));
          }
          fully_masked[r] = SoftmaxImpl(row, S);
        }
        WeightedSumV(a, scores, S, packed_vt, rows, fully_masked,
                     a.concat + (n * L + i0) * E + h * hd);
        if (a.weights != nullptr && a.average_weights) {
          // Sum over heads here, divide once after the last head, as torch's mean does.
          float* avg = a.weights + (n * L + i0) * S;
          if (h == 0) {
            std::memcpy(avg, scores, rows * S * sizeof(float));
          } else {
            AddInPlaceImpl(avg, scores, rows * S);
          }
        }
      }
    }
    if (a.weights != nullptr && a.average_weights) {
      const float inv_heads = 1.0f / static_cast<float>(a.heads);
      float* avg = a.weights + n * L * S;
      for (size_t x = 0; x < L * S; ++x) avg[x] *= inv_heads;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace headscope
HWY_AFTER_NAMESPACE();

#endif  // HEADSCOPE_KERNELS_ATTENTION_INL_H_
