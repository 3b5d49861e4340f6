#include "headscope/reference.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>

#include "headscope/kernels/attention.h"  // AlibiSlope
#include "headscope/plan.h"

namespace headscope {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::Matrix<float, 1, Eigen::Dynamic>;
using ConstMap = Eigen::Map<const Matrix>;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Rotary position embeddings (rope_dims > 0), written apart from the fast path's RotateHeads: the
// first `rows` rows of m (heads of hd columns side by side), row t at position t, each head's
// pair i turned by t / base^(2i / r) in double, rounded to float once.
void Rope(const MhaConfig& c, size_t rows, size_t hd, Matrix* m) {
  const size_t r = static_cast<size_t>(c.rope_dims), pairs = r / 2;
  const bool interleaved = c.rope_layout == RopeLayout::kInterleaved;
  for (size_t i = 0; i < pairs; ++i) {
    const double theta = 1.0 / std::pow(c.rope_base, static_cast<double>(2 * i) / r);
    const size_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + pairs;
    for (size_t t = 0; t < rows; ++t) {
      const double co = std::cos(static_cast<double>(t) * theta);
      const double si = std::sin(static_cast<double>(t) * theta);
      for (size_t col = 0; col + hd <= static_cast<size_t>(m->cols()); col += hd) {
        const double x0 = (*m)(t, col + a), x1 = (*m)(t, col + b);
        (*m)(t, col + a) = static_cast<float>(x0 * co - x1 * si);
        (*m)(t, col + b) = static_cast<float>(x0 * si + x1 * co);
      }
    }
  }
}

// Rows of batch element n of a (L, E)-like input, gathered into a dense (len, dim) matrix.
Matrix Gather(const float* data, const RowLayout& layout, size_t n, size_t len, size_t dim) {
  Matrix m(len, dim);
  for (size_t i = 0; i < len; ++i) {
    for (size_t j = 0; j < dim; ++j) m(i, j) = data[layout.Row(n, i) + j];
  }
  return m;
}

// x W^T + b, as torch.nn.functional.linear.
Matrix Linear(const Matrix& x, const float* w, size_t out, size_t in, const float* b) {
  Matrix y = x * ConstMap(w, out, in).transpose();
  if (b != nullptr) y.rowwise() += Eigen::Map<const Vector>(b, out);
  return y;
}

// A mask entry as the additive term torch turns it into.
float MaskValue(const MaskView& m, size_t index) {
  if (m.type == MaskType::kBool) return static_cast<const uint8_t*>(m.data)[index] ? -kInf : 0.0f;
  return static_cast<const float*>(m.data)[index];
}

// Softmax of one row with the zero-row policy; returns true if the row was fully masked.
// sink: the head's attention sink (attn_sinks), or null: one more entry of the softmax whose
// weight is dropped; NaN or +inf makes the row NaN, and a row whose weights are all 0 (every key
// masked, or all underflowed under the sink) is fully masked.
bool SoftmaxRow(Eigen::Ref<Vector> row, const float* sink) {
  bool any_nan = false;
  for (Eigen::Index j = 0; j < row.size(); ++j) any_nan |= std::isnan(row(j));
  const float row_max = row.size() > 0 ? row.maxCoeff() : -kInf;
  const bool bad_sink = sink != nullptr && !(*sink < kInf) && row_max != -kInf;
  if (any_nan || row_max == kInf || bad_sink) {
    row.setConstant(std::numeric_limits<float>::quiet_NaN());
    return false;
  }
  if (row_max == -kInf) {
    row.setZero();
    return true;
  }
  const float max = sink != nullptr && *sink > row_max ? *sink : row_max;
  // std::exp per entry, not Eigen's vectorized exp: that clamps its input at -88.7, so it
  // returns ~3e-39 for -inf (0 * inf in V became inf instead of NaN) and misses float's
  // subnormal range (exp(-90) = 8.2e-40, a weight torch keeps; 0 only below -103.97).
  row = row.unaryExpr([max](float x) { return std::exp(x - max); });
  const float sum = row.sum();
  if (!(sum > 0.0f)) {
    row.setZero();
    return true;
  }
  row /= sink != nullptr ? sum + std::exp(*sink - max) : sum;
  return false;
}

// HeadStats of one head's (L, S') weights, in double, straight from the definitions (mha.h):
// means over the rows that are not fully masked.
// With attention sinks the entropy is the whole distribution's: the sink's missing mass
// 1 - sum_j w_j adds its -m ln m.
void HeadStatsOf(const Matrix& weights, const Eigen::Array<bool, Eigen::Dynamic, 1>& fully_masked,
                 size_t S, size_t at, bool sinks, HeadStats* stats) {
  double entropy = 0.0, distance = 0.0, max_weight = 0.0;
  size_t rows = 0;
  for (Eigen::Index i = 0; i < weights.rows(); ++i) {
    if (fully_masked(i)) continue;
    double row_max = 0.0, mass = 0.0;
    for (Eigen::Index j = 0; j < weights.cols(); ++j) {
      const double w = weights(i, j);
      mass += w;
      if (std::isnan(w)) row_max = w;
      if (!std::isnan(row_max)) row_max = std::max(row_max, w);
      if (w > 0.0 || std::isnan(w)) entropy -= w * std::log(w);
      if (static_cast<size_t>(j) < S) distance += w * std::abs(static_cast<double>(i - j));
      if (std::isnan(w)) distance += w;
    }
    if (sinks && row_max > 0.0 && 1.0 - mass > 0.0) entropy -= (1.0 - mass) * std::log(1.0 - mass);
    max_weight += row_max;
    ++rows;
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  stats->entropy.data()[at] = static_cast<float>(rows ? entropy / rows : nan);
  stats->distance.data()[at] = static_cast<float>(rows ? distance / rows : nan);
  stats->max_weight.data()[at] = static_cast<float>(rows ? max_weight / rows : nan);
}

}  // namespace

Status ReferenceForward(const MhaWeights& w, const TensorView& query, const TensorView& key,
                        const TensorView& value, const ForwardOptions& opt,
                        ForwardResult* result) {
  const MhaConfig& c = w.config();
  CallPlan p;
  HEADSCOPE_RETURN_IF_ERROR(PlanCall(c, query, key, value, opt, &p));
  HEADSCOPE_RETURN_IF_ERROR(w.CheckComplete());
  const size_t N = p.batch, L = p.q_len, S = p.kv_len, Sp = p.kv_total, E = p.embed;
  const size_t H = p.heads, hd = p.head_dim;
  // Grouped-query attention: G K/V heads of Ekv = G hd columns; head h reads K/V head h / (H / G).
  const size_t Ekv = p.kv_embed, group = H / p.kv_heads;
  const bool average = opt.average_attn_weights;
  if (!result->output.Resize(p.output_floats()) ||
      !result->weights.Resize(opt.need_weights ? p.weights_floats(average) : 0)) {
    return Status(StatusCode::kResourceExhausted, "reference: out of memory");
  }
  result->output_shape = p.output_shape;
  result->weights_shape = p.weights_shape;
  HeadStats& stats = result->head_stats;
  stats.shape = p.head_stats_shape;
  const size_t stats_floats = p.head_stats ? N * H : 0;
  if (!stats.entropy.Resize(stats_floats) || !stats.distance.Resize(stats_floats) ||
      !stats.max_weight.Resize(stats_floats)) {
    return Status(StatusCode::kResourceExhausted, "reference: out of memory");
  }
  // Heads with no query rows or no keys at all keep NaN (no row has a distribution).
  for (float* s : {stats.entropy.data(), stats.distance.data(), stats.max_weight.data()}) {
    std::fill_n(s, stats_floats, std::numeric_limits<float>::quiet_NaN());
  }
  if (opt.need_weights && p.weights_floats(average) > 0) {
    std::fill_n(result->weights.data(), p.weights_floats(average), 0.0f);
  }
  // torch 1.13 divides q by sqrt(hd) before q k^T (`q / math.sqrt(E)`, then bmm/baddbmm): the
  // same order here, so q . k near FLT_MAX * sqrt(hd) stays finite as in torch.
  const float sqrt_hd = std::sqrt(static_cast<float>(hd));

  // Empty matrices are skipped, not computed: Eigen offsets their null data pointers (UB).
  for (size_t n = 0; n < N && L > 0; ++n) {
    Matrix q = Linear(Gather(query.data, p.query, n, L, E), w.q_weight(), E, E, w.q_bias());
    Matrix k(Sp, Ekv), v(Sp, Ekv);
    if (S > 0) {
      k.topRows(S) = Linear(Gather(key.data, p.key, n, S, p.kdim), w.k_weight(), Ekv, p.kdim,
                            w.k_bias());
      v.topRows(S) = Linear(Gather(value.data, p.value, n, S, p.vdim), w.v_weight(), Ekv, p.vdim,
                            w.v_bias());
    }
    if (c.rope_dims > 0) {  // query i at position i, key j at j (the extra keys below do not turn)
      Rope(c, L, hd, &q);
      Rope(c, S, hd, &k);
    }
    size_t extra = S;
    if (c.add_bias_kv) {
      k.row(extra) = Eigen::Map<const Vector>(w.bias_k(), Ekv);
      v.row(extra) = Eigen::Map<const Vector>(w.bias_v(), Ekv);
      ++extra;
    }
    if (c.add_zero_attn) {
      k.row(extra).setZero();
      v.row(extra).setZero();
    }

    Matrix concat = Matrix::Zero(L, E);  // with no keys at all (S' = 0) every row is masked
    for (size_t h = 0; h < H && Sp > 0; ++h) {
      const auto qh = q.middleCols(h * hd, hd);
      const auto kh = k.middleCols(h / group * hd, hd);
      const auto vh = v.middleCols(h / group * hd, hd);
      const Matrix qh_scaled = qh / sqrt_hd;
      Matrix scores = qh_scaled * kh.transpose();  // (L, S')
      for (size_t i = 0; i < L; ++i) {
        for (size_t j = 0; j < S; ++j) {  // masks never reach the extra keys
          if (opt.attn_mask.present()) {
            const size_t slice = p.attn_mask_per_head ? n * H + h : 0;
            scores(i, j) += MaskValue(opt.attn_mask, (slice * L + i) * S + j);
          }
          if (opt.key_padding_mask.present()) {
            scores(i, j) += MaskValue(opt.key_padding_mask, n * S + j);
          }
          // ALiBi, -(slope |i - j|) after the masks (not on the extra keys), then the visibility:
          // causal j <= i, the window i - w < j (and j < i + w without causal).
          if (p.alibi) {
            const float distance = static_cast<float>(i > j ? i - j : j - i);
            scores(i, j) += -(AlibiSlope(h, H) * distance);
          }
          if (p.causal && j > i) scores(i, j) = -kInf;
          if (p.window > 0 && (j + p.window <= i || (!p.causal && i + p.window <= j))) {
            scores(i, j) = -kInf;
          }
        }
      }
      Eigen::Array<bool, Eigen::Dynamic, 1> fully_masked(L);
      const float* sink = c.attn_sinks ? w.sinks() + h : nullptr;
      for (size_t i = 0; i < L; ++i) fully_masked(i) = SoftmaxRow(scores.row(i), sink);
      Matrix head = scores * vh;  // (L, hd)
      for (size_t i = 0; i < L; ++i) {
        if (fully_masked(i)) head.row(i).setZero();
      }
      concat.middleCols(h * hd, hd) = head;
      if (p.head_stats) HeadStatsOf(scores, fully_masked, S, n * H + h, c.attn_sinks, &stats);

      if (opt.need_weights) {
        float* dst = result->weights.data() + (average ? n * L * Sp : (n * H + h) * L * Sp);
        Eigen::Map<Matrix> out(dst, L, Sp);
        if (average) {
          out += scores / static_cast<float>(H);
        } else {
          out = scores;
        }
      }
    }

    // Gates scale the finished concatenation, as torch's `concat * gates` would: after the
    // zero-row policy and also when there are no keys at all (0 * NaN gate is NaN there too).
    for (size_t h = 0; h < H && p.head_gates != nullptr; ++h) {
      concat.middleCols(h * hd, hd) *= p.head_gates[h];
    }
    const Matrix y = Linear(concat, w.out_weight(), E, E, w.out_bias());
    for (size_t i = 0; i < L; ++i) {
      for (size_t j = 0; j < E; ++j) result->output[p.output.Row(n, i) + j] = y(i, j);
    }
  }
  return Status::Ok();
}

}  // namespace headscope
