// Per-target code of the attention stage (see attention.h): QDotK, MaskScores, Softmax and
// WeightedSumV as named stages over tiles of query rows, built on the packed matmul. Operands are
// addressed only through AttentionShape (strides, KvHead) and the visible keys only through
// VisibleKeys, so the geometry lives in attention.h, not in these loops.

#if defined(HEADSCOPE_KERNELS_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HEADSCOPE_KERNELS_ATTENTION_INL_H_
#undef HEADSCOPE_KERNELS_ATTENTION_INL_H_
#else
#define HEADSCOPE_KERNELS_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>

#include "headscope/kernels/attention.h"
#include "headscope/kernels/matmul-inl.h"
#include "headscope/kernels/matmul.h"
#include "headscope/kernels/softmax-inl.h"
#include "headscope/parallel.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace headscope {
namespace HWY_NAMESPACE {

// q_tile[r, :] = q_r / sqrt(hd) for the tile's rows of one head (rows of stride E in, hd out):
// torch divides the queries before the product (see AttentionArgs::sqrt_head_dim). Once per query
// row and head, O(L E) per call against the O(L S' E) of the scores.
HWY_INLINE void ScaleQueries(const AttentionArgs& a, const float* HWY_RESTRICT q_rows, size_t rows,
                             float* HWY_RESTRICT q_tile) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), hd = a.shape.head_dim;
  const auto vdiv = hn::Set(d, a.sqrt_head_dim);
  for (size_t r = 0; r < rows; ++r) {
    const float* HWY_RESTRICT src = q_rows + r * a.shape.q_row_stride;
    float* HWY_RESTRICT dst = q_tile + r * hd;
    size_t x = 0;
    for (; x + N <= hd; x += N) hn::StoreU(hn::Div(hn::LoadU(d, src + x), vdiv), d, dst + x);
    for (; x < hd; ++x) dst[x] = src[x] / a.sqrt_head_dim;
  }
}

// scores[r, j] = q_tile_r . k_j for the tile's scaled queries (ScaleQueries) and the first `keys`
// keys; K packed as the matmul's right operand.
HWY_INLINE void QDotK(const AttentionArgs& a, const float* q_tile, const float* packed_k,
                      size_t rows, size_t keys, float* scores, size_t ld_scores) {
  MatMulPackedImpl(q_tile, a.shape.head_dim, packed_k, nullptr, rows, keys, a.shape.head_dim, 1.0f,
                   scores, ld_scores);
}

// Applies the ScoreModifiers to entries [from, keys) of one score row (query `i`): adds
// attn_mask and key_padding_mask, then the ALiBi bias, and sets the keys outside VisibleKeys to
// -inf. The one place the scores are modified (soft-capping would go here too, see
// ScoreModifiers). Entries before `from` are not touched (a tile that skipped them never reads
// them).
HWY_INLINE void MaskScores(const AttentionArgs& a, size_t n, size_t h, size_t i, float* row,
                           size_t from, size_t keys) {
  const AttentionShape& s = a.shape;
  const ScoreModifiers& m = a.modifiers;
  const size_t masked = keys < s.kv_len ? keys : s.kv_len;  // the extra keys are never masked
  if (from >= masked) return;
  if (m.attn_mask != nullptr) {
    const size_t slice = m.attn_mask_per_head ? n * s.heads + h : 0;
    AddInPlaceImpl(row + from, m.attn_mask + (slice * s.q_len + i) * s.kv_len + from,
                   masked - from);
  }
  if (m.key_padding_mask != nullptr) {
    AddInPlaceImpl(row + from, m.key_padding_mask + n * s.kv_len + from, masked - from);
  }
  const KeyRange visible = m.LimitsKeys() ? VisibleKeys(s, m, i) : KeyRange{0, masked};
  if (m.alibi_slopes != nullptr) {
    // -(slope |p - j|): the float product of the slope and the exact distance (|p - j| < 2^24),
    // negated, then added: the reference module's bias tensor and its add, two roundings. The
    // product goes through a volatile so that no compiler fuses it with the add (GCC contracts
    // across statements natively; an FMA would round once and differ in the last bit). Only the
    // visible keys: the others become -inf below.
    const float slope = m.alibi_slopes[h];
    const size_t p = m.q_offset + i;
    const size_t lo = std::max(from, visible.begin), hi = std::min(masked, visible.end);
    for (size_t j = lo; j < hi; ++j) {
      volatile float bias = -(slope * static_cast<float>(p > j ? p - j : j - p));
      row[j] += bias;
    }
  }
  if (m.LimitsKeys()) {
    // Blocked outright rather than added: a NaN in an invisible key must not reach the row
    // (docs/errors.md, the causal rule), which -inf + NaN would.
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    for (size_t j = from; j < visible.begin && j < masked; ++j) row[j] = kNegInf;
    for (size_t j = std::max(from, visible.end); j < masked; ++j) row[j] = kNegInf;
  }
}
HWY_INLINE void MaskScores(const AttentionArgs& a, size_t n, size_t h, size_t i, float* row) {
  MaskScores(a, n, h, i, row, 0, a.shape.kv_total);
}

// Head h's attention sink (ScoreModifiers::sinks) as the softmax takes it; none without sinks.
HWY_INLINE SinkTerm HeadSink(const AttentionArgs& a, size_t h) {
  SinkTerm t;
  if (a.modifiers.sinks != nullptr) t.logit = a.modifiers.sinks + h;
  return t;
}

// The sinks of one softmax row (query i of head h, batch element n), from its weights [first,
// keys) (the rest, skipped keys, are 0, or NaN in a NaN row whose entry `first` is NaN too).
// Sums run in double, key by key in order: every term of the entropy and of the distance is >= 0,
// so the only rounding left is the final float's (a float64 reference of the same weights agrees
// to about 1e-7 relative), and the order is the same on every path and thread count. The cost,
// one log per weight, is paid only by calls that ask for statistics.
// (Out of line: the row loops of calls without statistics keep their size; measured 4-5% of a
// tutorial-sized forward otherwise.)
HWY_NOINLINE void WriteRowSinksSlow(const AttentionArgs& a, size_t n, size_t h, size_t i,
                                    const float* HWY_RESTRICT weights, size_t first,
                                    size_t keys) {
  const RowSinks& sinks = a.out.sinks;
  const size_t at = (n * a.shape.heads + h) * a.shape.q_len + i;
  if (keys > first && weights[first] != weights[first]) {  // a NaN row is NaN throughout
    if (sinks.max_weight != nullptr) sinks.max_weight[at] = weights[first];
    if (sinks.entropy != nullptr) sinks.entropy[at] = weights[first];
    if (sinks.distance != nullptr) sinks.distance[at] = weights[first];
    return;
  }
  float max = 0.0f;  // weights are >= 0; a fully masked row (all 0, or no keys) gives 0
  double entropy = 0.0, distance = 0.0, mass = 0.0;
  const size_t positioned = keys < a.shape.kv_len ? keys : a.shape.kv_len;
  const size_t pos = a.modifiers.q_offset + i;
  for (size_t j = first; j < keys; ++j) {
    const float w = weights[j];
    if (w != w) {
      max = w;
      entropy = distance = static_cast<double>(w);
      break;
    }
    if (w > max) max = w;
    if (w > 0.0f) {
      const double wd = static_cast<double>(w);
      mass += wd;
      if (sinks.entropy != nullptr) entropy -= wd * std::log(wd);
      if (j < positioned) distance += wd * static_cast<double>(pos > j ? pos - j : j - pos);
    }
  }
  // An attention sink holds the row's missing mass 1 - sum_j w_j: the entropy is the whole
  // distribution's (the sink's term too); the max weight and the distance are the keys' only.
  // (A row with no weight left, masked or underflowed, stays 0 throughout.)
  const double sink_mass = 1.0 - mass;
  if (a.modifiers.sinks != nullptr && max > 0.0f && sink_mass > 0.0) {
    entropy -= sink_mass * std::log(sink_mass);
  }
  if (sinks.max_weight != nullptr) sinks.max_weight[at] = max;
  if (sinks.entropy != nullptr) sinks.entropy[at] = static_cast<float>(entropy);
  if (sinks.distance != nullptr) sinks.distance[at] = static_cast<float>(distance);
}
HWY_INLINE void WriteRowSinks(const AttentionArgs& a, size_t n, size_t h, size_t i,
                              const float* HWY_RESTRICT weights, size_t first, size_t keys) {
  if (a.out.sinks.any()) WriteRowSinksSlow(a, n, h, i, weights, first, keys);
}

// head_out[r, :] = weights[r, first:keys] x V[first:keys], V packed transposed (all S' keys);
// rows that were fully masked get 0. Keys before `first` (a window's tile skipped them) have
// weight 0: leaving them out drops 0 x v terms at the chain's start, where the accumulator is
// still +0 (the caller keeps keys whose V is not finite, for which 0 x v is NaN).
HWY_INLINE void WeightedSumV(const AttentionArgs& a, const float* weights, size_t ld_weights,
                             const float* packed_vt, size_t rows, size_t first, size_t keys,
                             const bool* fully_masked, float* head_out) {
  const AttentionShape& s = a.shape;
  MatMulPackedImpl(weights + first, ld_weights, packed_vt + first * kPanel, nullptr, rows,
                   s.head_dim, keys - first, 1.0f, head_out, s.q_row_stride,
                   /*packed_k=*/s.kv_total);
  for (size_t r = 0; r < rows; ++r) {
    // The softmax row is already 0; zeroing the output too keeps NaN/inf in V from leaking
    // into a row the policy defines as 0.
    if (fully_masked[r]) {
      std::memset(head_out + r * s.q_row_stride, 0, s.head_dim * sizeof(float));
    }
  }
}

// head_out[r, :] *= head_gates[h] for `rows` rows of one head's output (stride q_row_stride): a
// per-head gate, applied where the head's output is written so nothing downstream changes.
HWY_INLINE void GateHeadRows(const AttentionArgs& a, size_t h, size_t rows,
                             float* HWY_RESTRICT head_out) {
  if (a.out.head_gates == nullptr) return;
  const float gate = a.out.head_gates[h];
  for (size_t r = 0; r < rows; ++r) {
    float* HWY_RESTRICT row = head_out + r * a.shape.q_row_stride;
    for (size_t x = 0; x < a.shape.head_dim; ++x) row[x] *= gate;
  }
}

// Averaged weights: sum over heads as each head finishes, divide once after the last head, as
// torch's mean does.
HWY_INLINE void AccumulateAverage(const AttentionArgs& a, size_t n, size_t h, size_t i0,
                                  size_t rows, const float* weights) {
  const size_t S = a.shape.kv_total;
  float* avg = a.out.weights + (n * a.shape.q_len + i0) * S;
  if (h == 0) {
    std::memcpy(avg, weights, rows * S * sizeof(float));
  } else {
    AddInPlaceImpl(avg, weights, rows * S);
  }
}

HWY_INLINE void FinishAverage(const AttentionArgs& a, size_t n) {
  const float inv_heads = 1.0f / static_cast<float>(a.shape.heads);
  const size_t count = a.shape.q_len * a.shape.kv_total;
  float* avg = a.out.weights + n * count;
  for (size_t x = 0; x < count; ++x) avg[x] *= inv_heads;
}

// kt[x * S' + j] = k_j[x]: one head's keys transposed (lanes run over keys), so a score row is
// hd broadcast multiply-adds per vector of keys, with no horizontal sums.
HWY_INLINE void SmallTransposeK(const float* HWY_RESTRICT k, size_t ld_k, size_t keys, size_t hd,
                                float* HWY_RESTRICT kt) {
  for (size_t j = 0; j < keys; ++j) {
    for (size_t x = 0; x < hd; ++x) kt[x * keys + j] = k[j * ld_k + x];
  }
}

// c[r, col] = sum over t < steps of a[r * lda + t] * b[t * ldb + col], for kRows rows r and
// col < cols: the small path's two products, with A broadcast and B's rows loaded as vectors:
//   scores    a = the scaled queries (t: x < hd), b = SmallTransposeK's K^T (col: key j)
//   weights x V  a = the softmax rows (t: key j), b = V's rows (col: x < hd)
// Every number is one multiply-add chain over t from 0 in the micro-kernel's ChainMulAdd (FMA
// natively where the target has it, multiply then add in WebAssembly SIMD128, relaxed_madd in the
// relaxed-SIMD build; matmul-inl.h), the packed path's chain, the last cols % Lanes columns
// through one-lane vectors of the same operations rather than scalar code, whose contraction the
// compiler decides. So a row's numbers depend neither on the path nor on how many keys follow it
// (what generation with a KV cache relies on, transformer.h), nor on kRows: blocking rows only
// gives the out-of-order core kRows independent chains per vector where one row has cols / Lanes
// (2 at 8 keys), whose steps-long chains (a multiply and an add each in SIMD128) wait on latency.
template <size_t kRows>
HWY_INLINE void SmallProductRows(const float* HWY_RESTRICT a, size_t lda,
                                 const float* HWY_RESTRICT b, size_t ldb, size_t steps,
                                 size_t cols, float* HWY_RESTRICT c, size_t ldc) {
  // Columns [col, col + Lanes(dt)) of the kRows rows, for a full vector or one lane.
  const auto group = [&](auto dt, size_t col) HWY_ATTR {
    hn::Vec<decltype(dt)> acc[kRows];
    for (size_t r = 0; r < kRows; ++r) acc[r] = hn::Zero(dt);
    for (size_t t = 0; t < steps; ++t) {
      const auto bv = hn::LoadU(dt, b + t * ldb + col);
      for (size_t r = 0; r < kRows; ++r) acc[r] = ChainMulAdd(hn::Set(dt, a[r * lda + t]), bv, acc[r]);
    }
    for (size_t r = 0; r < kRows; ++r) hn::StoreU(acc[r], dt, c + r * ldc + col);
  };
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t col = 0;
  for (; col + N <= cols; col += N) group(d, col);
  for (; col < cols; ++col) group(hn::CappedTag<float, 1>(), col);
}

// SmallProductRows over `rows` rows: kSmallRowBlock at a time, then one by one (the same chains).
inline constexpr size_t kSmallRowBlock = 4;
HWY_INLINE void SmallProduct(const float* HWY_RESTRICT a, size_t lda, const float* HWY_RESTRICT b,
                             size_t ldb, size_t steps, size_t rows, size_t cols,
                             float* HWY_RESTRICT c, size_t ldc) {
  size_t r = 0;
  for (; r + kSmallRowBlock <= rows; r += kSmallRowBlock) {
    SmallProductRows<kSmallRowBlock>(a + r * lda, lda, b, ldb, steps, cols, c + r * ldc, ldc);
  }
  for (; r < rows; ++r) SmallProductRows<1>(a + r * lda, lda, b, ldb, steps, cols, c + r * ldc, ldc);
}

// Tutorial-sized heads (see SmallAttention): direct dot products on the projected rows, no
// packing, and the softmax over a whole tile of short rows at once. Same stages, masks and
// zero-row policy as the packed path, and the same operations in the same order for each number
// (SmallProduct's chains, SoftmaxRowsImpl's sums): a row gets the packed path's bits, so
// the choice of path (which depends on the number of keys) never shows in the results.
HWY_INLINE void SmallAttentionImpl(const AttentionArgs& a, float* workspace) {
  const AttentionShape& s = a.shape;
  const size_t L = s.q_len, S = s.kv_total, hd = s.head_dim;
  const size_t tile = L < kAttentionQueryTile ? L : kAttentionQueryTile;
  float* score_tile = workspace;                                    // [tile, S']
  // The workspace is sized for the packed path (AttentionWorkspaceFloats); this uses less of it.
  float* kt = score_tile + tile * S;                                // [hd, S']
  float* q_tile = kt + hd * S;                                      // [tile, hd]
  uint8_t* row_state = reinterpret_cast<uint8_t*>(q_tile + tile * hd);  // [tile]
  float* const weights = a.out.weights;
  const bool per_head_weights = weights != nullptr && !a.out.average_weights;
  for (size_t n = 0; n < s.batch; ++n) {
    const float* k_base = a.k + n * s.kv_batch_stride;
    const float* v_base = a.v + n * s.kv_batch_stride;
    const float* q_base = a.q + n * s.q_batch_stride;
    float* concat_base = a.out.concat + n * s.q_batch_stride;
    for (size_t h = 0; h < s.heads; ++h) {
      const size_t kv_col = s.KvHead(h) * hd;
      for (size_t i0 = 0; i0 < L; i0 += tile) {
        const size_t rows = (L - i0 < tile) ? L - i0 : tile;
        // Per-head weights are computed in place in the caller's output; averaged weights
        // start in the first head's slot and later heads add to it.
        float* scores = per_head_weights ? weights + ((n * s.heads + h) * L + i0) * S
                        : (weights != nullptr && h == 0) ? weights + (n * L + i0) * S
                                                         : score_tile;
        if (i0 == 0) SmallTransposeK(k_base + kv_col, s.kv_row_stride, S, hd, kt);
        // The tile's queries / sqrt(hd), as ScaleQueries, then q K^T.
        ScaleQueries(a, q_base + i0 * s.q_row_stride + h * hd, rows, q_tile);
        SmallProduct(q_tile, hd, kt, S, hd, rows, S, scores, S);
        if (a.modifiers.Any()) {
          for (size_t r = 0; r < rows; ++r) MaskScores(a, n, h, i0 + r, scores + r * S);
        }
        if (a.out.scores != nullptr) {
          std::memcpy(a.out.scores + ((n * s.heads + h) * L + i0) * S, scores,
                      rows * S * sizeof(float));
        }
        SoftmaxRowsImpl(scores, rows, S, row_state, HeadSink(a, h));
        float* const out_rows = concat_base + i0 * s.q_row_stride + h * hd;
        SmallProduct(scores, S, v_base + kv_col, s.kv_row_stride, S, rows, hd, out_rows,
                     s.q_row_stride);
        for (size_t r = 0; r < rows; ++r) {
          float* const out_row = out_rows + r * s.q_row_stride;
          // A fully masked row's output is 0 whatever V holds (NaN/inf in V must not leak in):
          // its weights are 0, but 0 x NaN is NaN.
          if (row_state[r] == kRowMasked) std::memset(out_row, 0, hd * sizeof(float));
        }
        GateHeadRows(a, h, rows, out_rows);
        if (a.out.sinks.any()) {
          for (size_t r = 0; r < rows; ++r) WriteRowSinksSlow(a, n, h, i0 + r, scores + r * S, 0, S);
        }
        if (weights != nullptr && a.out.average_weights && h > 0) {
          AddInPlaceImpl(weights + (n * L + i0) * S, scores, rows * S);
        }
      }
    }
    if (weights != nullptr && a.out.average_weights) FinishAverage(a, n);
  }
}

// 1 + the last row j < rows of the (rows x cols, stride ld) block holding a NaN or an infinity,
// or 0 if every value is finite. 0 * x is 0 for finite x and NaN otherwise.
HWY_INLINE size_t RowsThroughLastNonFinite(const float* HWY_RESTRICT m, size_t rows, size_t cols,
                                           size_t ld) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto zero = hn::Zero(d);
  for (size_t j = rows; j-- > 0;) {
    const float* HWY_RESTRICT row = m + j * ld;
    auto acc = zero;
    size_t x = 0;
    for (; x + N <= cols; x += N) acc = hn::Add(acc, hn::Mul(hn::LoadU(d, row + x), zero));
    float tail = 0.0f;
    for (; x < cols; ++x) tail += row[x] * 0.0f;
    if (!hn::AllFalse(d, hn::IsNaN(acc)) || tail != tail) return j + 1;
  }
  return 0;
}

// The first row j < rows of the block holding a NaN or an infinity, or `rows` if none.
HWY_INLINE size_t FirstNonFiniteRow(const float* HWY_RESTRICT m, size_t rows, size_t cols,
                                    size_t ld) {
  for (size_t j = 0; j < rows; ++j) {
    if (RowsThroughLastNonFinite(m + j * ld, 1, cols, ld) != 0) return j;
  }
  return rows;
}

// One (batch element, head) of the packed path over query tiles [t_begin, t_end): pack K_h and
// V_h, then per tile QDotK, MaskScores, Softmax, WeightedSumV, and the running sum of averaged
// weights. `workspace` is one thread's scratch (AttentionWorkspaceFloats for one worker).
HWY_INLINE void PackedHeadTiles(const AttentionArgs& a, size_t n, size_t h, size_t t_begin,
                                size_t t_end, float* workspace) {
  const AttentionShape& s = a.shape;
  const size_t L = s.q_len, S = s.kv_total, hd = s.head_dim;
  const size_t tile = PackedQueryTile(a);
  float* packed_k = workspace;                                   // [ceil(S/16)][hd][16]
  float* packed_vt = packed_k + PackedFloats(S, hd);             // [ceil(hd/16)][S][16]
  float* score_tile = packed_vt + PackedFloats(hd, S);           // [tile, S']
  float* q_tile = score_tile + tile * S;                         // [tile, hd]
  bool* fully_masked = reinterpret_cast<bool*>(q_tile + tile * hd);  // [tile]
  float* const weights = a.out.weights;
  const bool per_head_weights = weights != nullptr && !a.out.average_weights;
  const float* k_head = a.k + s.KvOffset(n, h);  // [S', hd], rows strided
  const float* v_head = a.v + s.KvOffset(n, h);
  PackB(k_head, S, hd, s.kv_row_stride, 1, packed_k);
  PackB(v_head, hd, S, 1, s.kv_row_stride, packed_vt);
  // Tiles skip the keys no row of theirs sees: past the last row's VisibleKeys end (about half
  // the QK^T and weights x V work of a causal call) and, with a sliding window, before the first
  // row's begin (rounded down to a panel, kPanel = 16 keys, so the packed K and V are entered at a
  // panel's start): a windowed tile's work is about (window + 2 tile) keys, whatever S is. Only
  // without extra keys: those sit after the skipped ones and every row sees them. PyTorch
  // multiplies the skipped keys' 0 weights by V all the same, and 0 * NaN or 0 * inf is NaN: keys
  // from the first to the last V row holding one are never skipped.
  const bool range_skip = a.modifiers.LimitsKeys() && S == s.kv_len;
  const size_t v_keys = range_skip ? RowsThroughLastNonFinite(v_head, S, hd, s.kv_row_stride) : 0;
  const size_t v_first = range_skip && a.modifiers.window > 0 && v_keys > 0
                             ? FirstNonFiniteRow(v_head, v_keys, hd, s.kv_row_stride)
                             : S;
  const auto panel_floor = [](size_t j) { return j / kPanel * kPanel; };
  // MaskScores is needed where it adds something or where a window's low keys must become -inf;
  // a causal call without masks, ALiBi or trace leaves the -inf writes to the softmax's range.
  const bool mask_rows = !range_skip || a.modifiers.attn_mask != nullptr ||
                         a.modifiers.key_padding_mask != nullptr ||
                         a.modifiers.alibi_slopes != nullptr || a.modifiers.window > 0 ||
                         a.out.scores != nullptr;
  for (size_t t = t_begin; t < t_end; ++t) {
    const size_t i0 = t * tile;
    const size_t rows = (L - i0 < tile) ? L - i0 : tile;
    // Per-head weights are computed in place in the caller's output: no copy.
    float* scores = per_head_weights ? weights + ((n * s.heads + h) * L + i0) * S : score_tile;
    // The tile's keys [first, keys). The skipped keys' weights are 0 and their trace scores -inf,
    // as computed ones would be.
    const size_t keys =
        range_skip ? std::min(S, std::max(VisibleKeys(s, a.modifiers, i0 + rows - 1).end, v_keys))
                   : S;
    const size_t first =
        range_skip ? std::min(panel_floor(std::min(VisibleKeys(s, a.modifiers, i0).begin, v_first)),
                              panel_floor(keys))
                   : 0;
    ScaleQueries(a, a.q + s.QOffset(n, h) + i0 * s.q_row_stride, rows, q_tile);
    // Each score is its own dot product: the keys from a panel's start are K's panels from there.
    QDotK(a, q_tile, packed_k + first * hd, rows, keys - first, scores + first, S);
    for (size_t r = 0; r < rows; ++r) {
      float* row = scores + r * S;
      // Under range_skip the keys a row cannot see, [first, begin) and [end, keys) (no extra
      // keys), are blocked outright to -inf: the softmax runs over [begin rounded down to a
      // panel, end) only and the other weights are set after. The same bits as over the whole
      // row: -inf changes no max, its exp is +0 and adds +0 to its lane's sum, each key keeps its
      // lane (the softmax starts at a multiple of 16, a multiple of every target's lanes), and a
      // weight of 0 x (1 / sum) is 0. The mask's -inf writes are skipped where nothing needs them
      // (a causal call without additive masks, ALiBi, window or trace).
      KeyRange soft{0, keys};
      if (range_skip) {
        const KeyRange v = VisibleKeys(s, a.modifiers, i0 + r);
        soft.end = std::min(keys, v.end);
        soft.begin = std::max(first, std::min(panel_floor(v.begin), panel_floor(soft.end)));
      }
      if (mask_rows) MaskScores(a, n, h, i0 + r, row, first, keys);
      if (a.out.scores != nullptr) {
        constexpr float kNegInf = -std::numeric_limits<float>::infinity();
        float* trace_row = a.out.scores + ((n * s.heads + h) * L + i0 + r) * S;
        std::fill(trace_row, trace_row + first, kNegInf);
        std::memcpy(trace_row + first, row + first, (keys - first) * sizeof(float));
        std::fill(trace_row + keys, trace_row + S, kNegInf);
      }
      fully_masked[r] = SoftmaxImpl(row + soft.begin, soft.end - soft.begin, HeadSink(a, h));
      // The invisible and the skipped keys' weights: 0, or NaN in a row the NaN policy made all
      // NaN (a NaN query poisons every score of its row, the masked ones too: NaN + -inf is NaN).
      // Keys outside [first, keys) only where the caller reads the weights.
      const float fill =
          soft.end > soft.begin && row[soft.begin] != row[soft.begin] ? row[soft.begin] : 0.0f;
      std::fill(row + (weights != nullptr ? 0 : first), row + soft.begin, fill);
      std::fill(row + soft.end, row + (weights != nullptr ? S : keys), fill);
      WriteRowSinks(a, n, h, i0 + r, row, first, keys);
    }
    float* head_out = a.out.concat + s.QOffset(n, h) + i0 * s.q_row_stride;
    WeightedSumV(a, scores, S, packed_vt, rows, first, keys, fully_masked, head_out);
    GateHeadRows(a, h, rows, head_out);
    if (weights != nullptr && a.out.average_weights) AccumulateAverage(a, n, h, i0, rows, scores);
  }
}

// The multi-threaded stage (HEADSCOPE_THREADS, ThreadCount() > 1): tasks are whole
// (batch element, head) pairs, each computed exactly as the serial loop computes it, in its own
// scratch; they write disjoint columns of the concatenation and disjoint slices of the per-head
// weights, trace scores and sinks. Averaged weights add the heads in order 0..H-1 into shared
// rows, so there a task is (batch element, query tile) running every head in order (repacking
// K_h and V_h per tile, a few percent more work) and then scaling its own rows. Either way each
// output float sees the same operations in the same order as in the serial build: bit-identical
// results.
HWY_INLINE void ParallelAttention(const AttentionArgs& a, float* workspace) {
  const AttentionShape& s = a.shape;
  const size_t L = s.q_len, S = s.kv_total, hd = s.head_dim, H = s.heads;
  const size_t tile = PackedQueryTile(a);
  const size_t tiles = (L + tile - 1) / tile;
  // One worker's slice, rounded to 64 bytes as in AttentionWorkspaceFloats.
  const size_t stride =
      (PackedFloats(S, hd) + PackedFloats(hd, S) + tile * S + tile * hd + tile + 15) / 16 * 16;
  if (a.out.weights != nullptr && a.out.average_weights) {
    const float inv_heads = 1.0f / static_cast<float>(H);
    ParallelFor(s.batch * tiles, [&](size_t task, size_t worker) {
      const size_t n = task / tiles, t = task % tiles;
      float* ws = workspace + worker * stride;
      for (size_t h = 0; h < H; ++h) PackedHeadTiles(a, n, h, t, t + 1, ws);
      const size_t i0 = t * tile, rows = (L - i0 < tile) ? L - i0 : tile;
      float* avg = a.out.weights + (n * L + i0) * S;
      for (size_t x = 0; x < rows * S; ++x) avg[x] *= inv_heads;  // as FinishAverage
    });
  } else {
    ParallelFor(s.batch * H, [&](size_t task, size_t worker) {
      PackedHeadTiles(a, task / H, task % H, 0, tiles, workspace + worker * stride);
    });
  }
}

// One (batch element, head) of AttentionBackward: where its operands start (AttentionShape's
// QOffset / KvOffset and WeightsOffset), its gate and its gate gradient's sum.
struct HeadBackwardOperands {
  const float* p;   // [T, T], row stride T
  const float* dz;  // rows of the shape's q_row_stride
  const float* q;
  const float* k;  // k and v: rows of the shape's kv_row_stride
  const float* v;
  float* dq;  // rows of grads' q_row_stride
  float* dk;  // dk and dv: rows of ld_dkv (grads' kv_row_stride, or a later grouped head's
  float* dv;  // scratch, hd)
  size_t ld_dkv;
  float gate;
  double* gate_grad;  // null, or += the head's sum of P M
  double* sink_grad;  // null, or += d loss / d the head's sink (AttentionBackwardArgs::sink_grads)
};

// One head of AttentionBackward (attention.h), in row chunks of kPanel. Which keys a row saw is
// VisibleKeys' [begin, end), the forward's rule. Both ends move forward with the row (causal: end
// = i + 1; a window moves begin too), so a chunk of rows [r0, r1) sees only keys from
// VisibleKeys(r0).begin to VisibleKeys(r1 - 1).end (M, dQ) and the keys [j0, j1) are seen by the
// rows from the first whose end passes j0 to the last whose begin is below j1 (dV, dK). M and dS
// are computed and zeroed only over each chunk's key span, [its first begin rounded down to a
// panel, its last end rounded up to one), which holds every entry the products read: with a
// window the work and the [T, T] tile's touched part grow with the window, not with T.
HWY_INLINE void HeadBackwardImpl(const AttentionBackwardArgs& a, const HeadBackwardOperands& o,
                                 float* HWY_RESTRICT scratch) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const AttentionShape& s = a.shape;
  const size_t T = s.q_len, hd = s.head_dim;
  const size_t ld_dz = s.q_row_stride, ld_q = s.q_row_stride, ld_kv = s.kv_row_stride;
  const size_t ld_dq = a.grads.q_row_stride, ld_dkv = o.ld_dkv;
  const float scale = 1.0f / a.sqrt_head_dim;
  float* HWY_RESTRICT pack = scratch;
  float* HWY_RESTRICT ds = scratch + HeadBackwardPackFloats(T, hd);  // [T, T]: M, then dS
  const float g = o.gate;
  const auto chunk_end = [&](size_t r0) { return std::min(T, r0 + kPanel); };
  const auto visible = [&](size_t i) { return VisibleKeys(s, a.modifiers, i); };
  // The rows [i0, i1) that see any of the keys [j0, j1), moved on from the previous chunk's.
  const auto rows_seeing = [&](size_t j0, size_t j1, size_t* i0, size_t* i1) {
    while (*i0 < T && visible(*i0).end <= j0) ++*i0;
    if (*i1 < *i0) *i1 = *i0;
    while (*i1 < T && visible(*i1).begin < j1) ++*i1;
  };
  // A chunk's key span (see above): the keys [lo, hi) of the rows [r0, chunk_end(r0)).
  const auto span = [&](size_t r0) {
    const size_t r1 = chunk_end(r0), end = visible(r1 - 1).end;
    return KeyRange{visible(r0).begin / kPanel * kPanel,
                    std::min(T, (end + kPanel - 1) / kPanel * kPanel)};
  };
  // M [T, T] = dZ V^T (rows i: their chunk's span; each entry its own chain over hd, so starting
  // at a panel changes nothing).
  PackB(o.v, T, hd, ld_kv, 1, pack);
  for (size_t r0 = 0; r0 < T; r0 += kPanel) {
    const size_t r1 = chunk_end(r0);
    const KeyRange sp = span(r0);
    const size_t end = visible(r1 - 1).end;
    if (end > sp.begin) {
      MatMulPackedImpl(o.dz + r0 * ld_dz, ld_dz, pack + sp.begin * hd, nullptr, r1 - r0,
                       end - sp.begin, hd, 1.0f, ds + r0 * T + sp.begin, T);
    }
  }
  // The other three products' B is dZ, K or Q itself (rows of hd floats, stride ld): read in
  // place where the row-major kernel takes it (RowMajorBTakes: hd a whole number of column
  // groups) and T is below kOutlineMinK (where it was measured: the 1M model's T = 64 took
  // 0.99x the packed time; longer heads were not), else packed (all T rows) once per product.
  // The same chains either way (matmul-inl.h), so the same bits. `product` is rows [m] of
  // C [., hd] = alpha A B over B's rows [p0, p0 + k) (A stored transposed with kTransA: P^T, dS^T).
  const bool in_place = RowMajorBTakes(hd) && T < kOutlineMinK;
  const auto pack_rows = [&](const float* rows, size_t ld) {
    if (!in_place) PackB(rows, hd, T, 1, ld, pack);
  };
  const auto product = [&](auto trans_a, const float* a_block, const float* rows, size_t ld,
                           size_t p0, size_t m, size_t k, float alpha, float* c,
                           size_t ldc) HWY_ATTR {
    constexpr bool kTransA = decltype(trans_a)::value;
    if (in_place) {
      MatMulRowMajorBImpl<kTransA>(a_block, T, rows + p0 * ld, ld, m, hd, k, alpha, c, ldc);
    } else {
      MatMulPackedImpl<kTransA>(a_block, T, pack + p0 * kPanel, nullptr, m, hd, k, alpha, c, ldc,
                                T);
    }
  };
  using Plain = std::false_type;
  using Transposed = std::true_type;
  // dV [T, hd] = g P^T dZ: keys [j0, j1) from the rows that see them.
  pack_rows(o.dz, ld_dz);
  for (size_t j0 = 0, i0 = 0, i1 = 0; j0 < T; j0 += kPanel) {
    const size_t j1 = chunk_end(j0);
    rows_seeing(j0, j1, &i0, &i1);
    product(Transposed(), o.p + i0 * T + j0, o.dz, ld_dz, i0, j1 - j0, i1 - i0, g,
            o.dv + j0 * ld_dkv, ld_dkv);
  }
  // dS = P * (g M - rowsum(P * g M)), row by row over the visible keys, 0 outside them (within
  // the row's chunk span: nothing reads past it).
  const auto vg = hn::Set(d, g);
  KeyRange sp{0, 0};
  for (size_t i = 0; i < T; ++i) {
    const float* HWY_RESTRICT pr = o.p + i * T;
    float* HWY_RESTRICT mr = ds + i * T;
    const KeyRange keys = visible(i);
    if (i % kPanel == 0) sp = span(i);
    if (o.gate_grad != nullptr || o.sink_grad != nullptr) {
      double sum = 0, mass = 0;
      for (size_t j = keys.begin; j < keys.end; ++j) {
        sum += static_cast<double>(pr[j]) * mr[j];
        mass += pr[j];
      }
      if (o.gate_grad != nullptr) *o.gate_grad += sum;
      // The sink's dS: p_sink (0 - sum_j P_ij dP_ij), dP = g M; p_sink the row's missing mass.
      if (o.sink_grad != nullptr) *o.sink_grad -= (1.0 - mass) * static_cast<double>(g) * sum;
    }
    auto acc = hn::Zero(d);
    size_t j = keys.begin;
    for (; j + N <= keys.end; j += N) {
      acc = hn::MulAdd(hn::LoadU(d, pr + j), hn::Mul(vg, hn::LoadU(d, mr + j)), acc);
    }
    float dot = hn::GetLane(hn::SumOfLanes(d, acc));
    for (size_t t = j; t < keys.end; ++t) dot += pr[t] * (g * mr[t]);
    const auto vdot = hn::Set(d, dot);
    for (j = sp.begin; j < keys.begin; ++j) mr[j] = 0.0f;
    for (; j + N <= keys.end; j += N) {
      const auto dp = hn::Sub(hn::Mul(vg, hn::LoadU(d, mr + j)), vdot);
      hn::StoreU(hn::Mul(hn::LoadU(d, pr + j), dp), d, mr + j);
    }
    for (; j < keys.end; ++j) mr[j] = pr[j] * (g * mr[j] - dot);
    for (; j < sp.end; ++j) mr[j] = 0.0f;
  }
  // dQ [T, hd] = scale dS K: rows [r0, r1) over the keys from their first begin to their last
  // end.
  pack_rows(o.k, ld_kv);
  for (size_t r0 = 0; r0 < T; r0 += kPanel) {
    const size_t r1 = chunk_end(r0);
    const size_t k0 = visible(r0).begin, k1 = visible(r1 - 1).end;
    product(Plain(), ds + r0 * T + k0, o.k, ld_kv, k0, r1 - r0, k1 - k0, scale, o.dq + r0 * ld_dq,
            ld_dq);
  }
  // dK [T, hd] = scale dS^T Q: keys [j0, j1) from the rows that see them.
  pack_rows(o.q, ld_q);
  for (size_t j0 = 0, i0 = 0, i1 = 0; j0 < T; j0 += kPanel) {
    const size_t j1 = chunk_end(j0);
    rows_seeing(j0, j1, &i0, &i1);
    product(Transposed(), ds + i0 * T + j0, o.q, ld_q, i0, j1 - j0, i1 - i0, scale,
            o.dk + j0 * ld_dkv, ld_dkv);
  }
}

// AttentionBackward (attention.h): every (batch element, head) in order, each with its operands
// where the forward's stage finds them, one head's scratch reused. Grouped-query attention: the
// first head of a group writes its K/V head's dK and dV; each later one writes its own into the
// scratch after the [T, T] tile and adds them there, so the group's sum is formed in head order.
HWY_INLINE void AttentionBackwardImpl(const AttentionBackwardArgs& a, float* scratch) {
  const AttentionShape& s = a.shape;
  const size_t T = s.q_len, hd = s.head_dim, group = s.heads / s.kv_heads;
  float* const own_dk = scratch + HeadBackwardPackFloats(T, hd) + T * T;  // [T, hd] each
  float* const own_dv = own_dk + T * hd;
  for (size_t n = 0; n < s.batch; ++n) {
    for (size_t h = 0; h < s.heads; ++h) {
      HeadBackwardOperands o;
      o.p = a.weights + s.WeightsOffset(n, h);
      o.dz = a.dz + s.QOffset(n, h);
      o.q = a.q + s.QOffset(n, h);
      o.k = a.k + s.KvOffset(n, h);
      o.v = a.v + s.KvOffset(n, h);
      o.dq = a.dq + a.grads.QOffset(n, h);
      float* const dk = a.dk + a.grads.KvOffset(n, h);
      float* const dv = a.dv + a.grads.KvOffset(n, h);
      const bool first_of_group = h % group == 0;
      o.dk = first_of_group ? dk : own_dk;
      o.dv = first_of_group ? dv : own_dv;
      o.ld_dkv = first_of_group ? a.grads.kv_row_stride : hd;
      o.gate = a.head_gates != nullptr ? a.head_gates[h] : 1.0f;
      o.gate_grad = a.gate_grads != nullptr ? a.gate_grads + h : nullptr;
      o.sink_grad = a.sink_grads != nullptr ? a.sink_grads + h : nullptr;
      HeadBackwardImpl(a, o, scratch);
      if (first_of_group) continue;
      const size_t ld = a.grads.kv_row_stride;
      for (size_t j = 0; j < T; ++j) {
        for (size_t x = 0; x < hd; ++x) {
          dk[j * ld + x] += own_dk[j * hd + x];
          dv[j * ld + x] += own_dv[j * hd + x];
        }
      }
    }
  }
}

HWY_INLINE void AttentionImpl(const AttentionArgs& a, float* workspace) {
  if (SmallAttention(a)) return SmallAttentionImpl(a, workspace);
  const AttentionShape& s = a.shape;
  const size_t L = s.q_len, S = s.kv_total, E = s.heads * s.head_dim;
  // Threads only where the workspace has a slice for each of them and the stage is big enough
  // (QK^T and weights x V: 2 L S' E multiply-adds) to pay for waking them.
  if (ThreadCount() > 1 && static_cast<size_t>(ThreadCount()) <= a.workers &&
      2.0 * static_cast<double>(s.batch) * L * S * E >= kParallelMinMacs) {
    return ParallelAttention(a, workspace);
  }
  const size_t tile = PackedQueryTile(a);
  const size_t tiles = tile == 0 ? 0 : (L + tile - 1) / tile;  // (L = 0: no tiles)
  for (size_t n = 0; n < s.batch; ++n) {
    for (size_t h = 0; h < s.heads; ++h) PackedHeadTiles(a, n, h, 0, tiles, workspace);
    if (a.out.weights != nullptr && a.out.average_weights) FinishAverage(a, n);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace headscope
HWY_AFTER_NAMESPACE();

#endif  // HEADSCOPE_KERNELS_ATTENTION_INL_H_
