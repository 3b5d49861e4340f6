// The attention stage (kernels/attention.h) on raw arguments, against a plain scalar stage written
// from the definitions: scores = (q / sqrt(hd)) . k + masks, -inf outside the visible keys,
// softmax with the zero-row and NaN-row policies, weights x V. Operands sit in padded, strided
// buffers whose padding is NaN (a kernel that ignores a stride reads NaN), outputs in buffers
// whose padding must survive, and K/V may have fewer heads than the queries (grouped-query
// attention through AttentionShape::KvHead), so every geometry field the kernels take is checked.
// Both the packed and the small-head path, on every SIMD target; with the thread pool
// (HEADSCOPE_THREADS) also 2 and 3 threads, bit for bit against 1.
#include "headscope/kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "headscope/parallel.h"
#include "headscope/tensor.h"
#include "test_util.h"

namespace headscope {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kSentinel = 12345.0f;  // output padding: the stage must leave it alone

// One drawn call of the stage, owning its buffers.
struct StageCall {
  AttentionShape shape;
  size_t out_pad = 0;  // floats between the concat's rows beyond H * hd (same strides as q)
  std::vector<float> q, k, v, attn_mask, kpm;
  bool causal = false, mask_per_head = false, has_attn_mask = false, has_kpm = false;
  size_t q_offset = 0;  // ScoreModifiers::q_offset (the scalar stage knows none: 0 there)
  std::vector<float> slopes;  // [H] ALiBi slopes; empty: none
  size_t window = 0;          // ScoreModifiers::window
  std::vector<float> head_sinks;  // [H] attention sinks' logits (ScoreModifiers::sinks); empty: none
  bool want_weights = false, average = false, want_scores = false, want_sinks = false;
  std::vector<float> gates;  // [H] head gates; empty: none (AttentionOutputs::head_gates null)
  std::string description;
};

// The stage's results, as the scalar reference and the kernel each produce them.
struct StageResult {
  std::vector<float> concat;      // q geometry (padding included)
  std::vector<float> weights;     // [N, H, L, S'] or averaged [N, L, S'] (empty if not asked)
  std::vector<float> scores;      // [N, H, L, S'] (empty if not asked)
  std::vector<float> max_weight;  // [N, H, L] sinks (each empty if not asked)
  std::vector<float> entropy;
  std::vector<float> distance;
};

// The row statistics of RowSinks from one row of weights, in double, from their definitions.
// With an attention sink (head_sink) the entropy counts the sink's mass 1 - sum_j w_j too.
void RowStats(const float* w, size_t Sp, size_t S, size_t i, float* max_weight, double* entropy,
              double* distance, bool head_sink = false) {
  float best = 0.0f;
  double e = 0.0, d = 0.0;
  for (size_t j = 0; j < Sp; ++j) {
    if (std::isnan(w[j])) best = kNaN;
    if (!std::isnan(best) && w[j] > best) best = w[j];
    if (w[j] > 0.0f || std::isnan(w[j])) e -= static_cast<double>(w[j]) * std::log(static_cast<double>(w[j]));
    if (j < S) d += static_cast<double>(w[j]) * std::fabs(static_cast<double>(i) - static_cast<double>(j));
  }
  double mass = 0.0;
  for (size_t j = 0; j < Sp; ++j) mass += w[j];
  if (head_sink && best > 0.0f && 1.0 - mass > 0.0) e -= (1.0 - mass) * std::log(1.0 - mass);
  *max_weight = best;
  *entropy = e;
  *distance = std::isnan(best) ? kNaN : d;  // a NaN row is NaN throughout, extra keys or not
}

size_t QFloats(const AttentionShape& s) { return s.batch * s.q_batch_stride; }
size_t KvFloats(const AttentionShape& s) { return s.batch * s.kv_batch_stride; }

// Written from the definitions, in double, without the kernels' helpers (no VisibleKeys, no
// KvHead): query i sees keys j < S with j <= i when causal, i - w < j with a window w (and
// j < i + w without causal), and every extra key; ALiBi adds -(slope_h |i - j|) to the first S.
StageResult ScalarStage(const StageCall& c) {
  const AttentionShape& s = c.shape;
  const size_t N = s.batch, H = s.heads, L = s.q_len, S = s.kv_len, Sp = s.kv_total;
  const size_t hd = s.head_dim, group = s.heads / s.kv_heads;
  const float sqrt_hd = std::sqrt(static_cast<float>(hd));
  StageResult r;
  r.concat.assign(QFloats(s), kSentinel);
  std::vector<float> per_head(N * H * L * Sp), scores(N * H * L * Sp);
  r.max_weight.assign(N * H * L, 0.0f);
  r.entropy.assign(N * H * L, 0.0f);
  r.distance.assign(N * H * L, 0.0f);
  for (size_t n = 0; n < N; ++n) {
    for (size_t h = 0; h < H; ++h) {
      const size_t g = h / group;
      for (size_t i = 0; i < L; ++i) {
        const float* q = c.q.data() + n * s.q_batch_stride + i * s.q_row_stride + h * hd;
        float* srow = scores.data() + ((n * H + h) * L + i) * Sp;
        for (size_t j = 0; j < Sp; ++j) {
          const float* k = c.k.data() + n * s.kv_batch_stride + j * s.kv_row_stride + g * hd;
          double dot = 0.0;
          for (size_t x = 0; x < hd; ++x) dot += static_cast<double>(q[x] / sqrt_hd) * k[x];
          float score = static_cast<float>(dot);
          if (j < S) {
            if (c.has_attn_mask) {
              const size_t slice = c.mask_per_head ? n * H + h : 0;
              score += c.attn_mask[(slice * L + i) * S + j];
            }
            if (c.has_kpm) score += c.kpm[n * S + j];
            if (!c.slopes.empty()) {
              score += -(c.slopes[h] * static_cast<float>(i > j ? i - j : j - i));
            }
            if (c.causal && j > i) score = -kInf;
            if (c.window > 0 && (j + c.window <= i || (!c.causal && i + c.window <= j))) {
              score = -kInf;
            }
          }
          srow[j] = score;
        }
        // Softmax: NaN or +inf anywhere -> NaN row; all -inf (or no keys) -> zero row.
        float* wrow = per_head.data() + ((n * H + h) * L + i) * Sp;
        // An attention sink joins the max and the sum (NaN or +inf: a NaN row), its weight dropped;
        // a row with no visible key stays a zero row.
        const bool sink = !c.head_sinks.empty();
        const double logit = sink ? c.head_sinks[h] : 0.0;
        bool nan = false;
        double max = -kInf;
        for (size_t j = 0; j < Sp; ++j) {
          if (std::isnan(srow[j]) || srow[j] == kInf) nan = true;
          if (srow[j] > max) max = srow[j];
        }
        if (sink && max != -kInf && (std::isnan(logit) || logit == kInf)) nan = true;
        bool masked = false;
        if (nan) {
          for (size_t j = 0; j < Sp; ++j) wrow[j] = kNaN;
        } else if (max == -kInf) {
          masked = true;
          for (size_t j = 0; j < Sp; ++j) wrow[j] = 0.0f;
        } else {
          if (sink) max = std::max(max, logit);
          double sum = sink ? std::exp(logit - max) : 0.0;
          for (size_t j = 0; j < Sp; ++j) sum += std::exp(srow[j] - max);
          for (size_t j = 0; j < Sp; ++j)
            wrow[j] = static_cast<float>(std::exp(srow[j] - max) / sum);
        }
        double entropy, distance;
        const size_t row = (n * H + h) * L + i;
        RowStats(wrow, Sp, S, i, &r.max_weight[row], &entropy, &distance, sink);
        r.entropy[row] = static_cast<float>(entropy);
        r.distance[row] = static_cast<float>(distance);
        float* out = r.concat.data() + n * s.q_batch_stride + i * s.q_row_stride + h * hd;
        for (size_t x = 0; x < hd; ++x) {
          double acc = 0.0;
          for (size_t j = 0; j < Sp; ++j) {
            acc += static_cast<double>(wrow[j]) *
                   c.v[n * s.kv_batch_stride + j * s.kv_row_stride + g * hd + x];
          }
          out[x] = masked ? 0.0f : static_cast<float>(acc);  // even where V holds NaN
          // The gate multiplies the finished output, the zero of a masked row too (NaN gate: NaN).
          if (!c.gates.empty()) out[x] *= c.gates[h];
        }
      }
    }
  }
  if (c.want_weights && !c.average) r.weights = per_head;
  if (c.want_weights && c.average) {
    r.weights.assign(N * L * Sp, 0.0f);
    for (size_t n = 0; n < N; ++n) {
      for (size_t x = 0; x < L * Sp; ++x) {
        double sum = 0.0;
        for (size_t h = 0; h < H; ++h) sum += per_head[(n * H + h) * L * Sp + x];
        r.weights[n * L * Sp + x] = static_cast<float>(sum / H);
      }
    }
  }
  if (c.want_scores) r.scores = scores;
  if (!c.want_sinks) {
    r.max_weight.clear();
    r.entropy.clear();
    r.distance.clear();
  }
  return r;
}

StageResult RunStage(const StageCall& c, size_t workers) {
  const AttentionShape& s = c.shape;
  StageResult r;
  r.concat.assign(QFloats(s), kSentinel);
  if (c.want_weights)
    r.weights.assign(s.batch * (c.average ? 1 : s.heads) * s.q_len * s.kv_total, kSentinel);
  if (c.want_scores) r.scores.assign(s.batch * s.heads * s.q_len * s.kv_total, kSentinel);
  if (c.want_sinks) {
    r.max_weight.assign(s.batch * s.heads * s.q_len, kSentinel);
    r.entropy.assign(s.batch * s.heads * s.q_len, kSentinel);
    r.distance.assign(s.batch * s.heads * s.q_len, kSentinel);
  }
  AttentionArgs a;
  a.shape = s;
  a.sqrt_head_dim = std::sqrt(static_cast<float>(s.head_dim));
  a.q = c.q.data();
  a.k = c.k.data();
  a.v = c.v.data();
  a.modifiers.attn_mask = c.has_attn_mask ? c.attn_mask.data() : nullptr;
  a.modifiers.attn_mask_per_head = c.mask_per_head;
  a.modifiers.key_padding_mask = c.has_kpm ? c.kpm.data() : nullptr;
  a.modifiers.causal = c.causal;
  a.modifiers.q_offset = c.q_offset;
  a.modifiers.alibi_slopes = c.slopes.empty() ? nullptr : c.slopes.data();
  a.modifiers.window = c.window;
  a.modifiers.sinks = c.head_sinks.empty() ? nullptr : c.head_sinks.data();
  a.out.concat = r.concat.data();
  a.out.weights = c.want_weights ? r.weights.data() : nullptr;
  a.out.average_weights = c.average;
  a.out.scores = c.want_scores ? r.scores.data() : nullptr;
  a.out.sinks.max_weight = c.want_sinks ? r.max_weight.data() : nullptr;
  a.out.sinks.entropy = c.want_sinks ? r.entropy.data() : nullptr;
  a.out.sinks.distance = c.want_sinks ? r.distance.data() : nullptr;
  a.out.head_gates = c.gates.empty() ? nullptr : c.gates.data();
  a.workers = workers;
  AlignedBuffer workspace;
  EXPECT_TRUE(workspace.Resize(static_cast<size_t>(AttentionWorkspaceFloats(a)) + 1));
  Attention(a, workspace.data());
  return r;
}

// Draws a call: sizes on both sides of SmallAttention's bounds and of the 64-row query tile,
// K/V heads dividing the heads, padded strides, masks with -inf, fully masked rows, NaN rows.
StageCall Draw(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  StageCall c;
  AttentionShape& s = c.shape;
  const int hds[] = {1, 2, 3, 5, 8, 16, 17, 24, 33};
  s.head_dim = static_cast<size_t>(hds[pick(0, 8)]);
  s.heads = static_cast<size_t>(pick(1, 4));
  std::vector<size_t> divisors;
  for (size_t d = 1; d <= s.heads; ++d) {
    if (s.heads % d == 0) divisors.push_back(d);
  }
  s.kv_heads = divisors[static_cast<size_t>(pick(0, static_cast<int>(divisors.size()) - 1))];
  s.batch = static_cast<size_t>(pick(1, 3));
  s.q_len = static_cast<size_t>(coin(0.03) ? 0 : coin(0.2) ? pick(60, 140) : pick(1, 12));
  s.kv_len = static_cast<size_t>(coin(0.05) ? 0 : coin(0.3) ? pick(13, 90) : pick(1, 12));
  s.kv_total = s.kv_len + static_cast<size_t>(coin(0.3) ? pick(1, 2) : 0);
  const bool padded = coin(0.5);
  s.q_row_stride = s.heads * s.head_dim + (padded ? static_cast<size_t>(pick(1, 5)) : 0);
  s.q_batch_stride = s.q_len * s.q_row_stride + (padded ? static_cast<size_t>(pick(0, 7)) : 0);
  s.kv_row_stride = s.kv_heads * s.head_dim + (padded ? static_cast<size_t>(pick(1, 5)) : 0);
  s.kv_batch_stride = s.kv_total * s.kv_row_stride + (padded ? static_cast<size_t>(pick(0, 7)) : 0);

  const size_t N = s.batch, H = s.heads, L = s.q_len, S = s.kv_len;
  // Operands: NaN everywhere a kernel must not read, then the values. One float more, so an
  // empty operand is still a real pointer, as MultiheadAttention's activations always are.
  c.q.assign(QFloats(s) + 1, kNaN);
  c.k.assign(KvFloats(s) + 1, kNaN);
  c.v.assign(KvFloats(s) + 1, kNaN);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (size_t n = 0; n < N; ++n) {
    for (size_t i = 0; i < L; ++i) {
      for (size_t x = 0; x < H * s.head_dim; ++x) {
        c.q[n * s.q_batch_stride + i * s.q_row_stride + x] = value(rng);
      }
    }
    for (size_t j = 0; j < s.kv_total; ++j) {
      for (size_t x = 0; x < s.kv_heads * s.head_dim; ++x) {
        c.k[n * s.kv_batch_stride + j * s.kv_row_stride + x] = value(rng);
        c.v[n * s.kv_batch_stride + j * s.kv_row_stride + x] = value(rng);
      }
    }
  }
  // NaN rows: a NaN query element poisons its row of one head; a NaN value reaches every row.
  if (L > 0 && coin(0.1)) {
    c.q[pick(0, static_cast<int>(N) - 1) * s.q_batch_stride +
        pick(0, static_cast<int>(L) - 1) * s.q_row_stride +
        pick(0, static_cast<int>(H * s.head_dim) - 1)] = kNaN;
  }
  if (s.kv_total > 0 && coin(0.07)) {
    c.v[pick(0, static_cast<int>(N) - 1) * s.kv_batch_stride +
        pick(0, static_cast<int>(s.kv_total) - 1) * s.kv_row_stride +
        pick(0, static_cast<int>(s.kv_heads * s.head_dim) - 1)] = kNaN;
  }

  c.causal = coin(0.3);
  c.has_attn_mask = coin(0.4);
  c.mask_per_head = coin(0.5);
  c.attn_mask.resize((c.mask_per_head ? N * H : 1) * L * S);
  for (float& x : c.attn_mask) x = coin(0.2) ? -kInf : value(rng);
  c.has_kpm = coin(0.4);
  c.kpm.resize(N * S);
  for (float& x : c.kpm) x = coin(0.2) ? -kInf : value(rng);
  // A fully blocked key_padding_mask row: every row of that batch element is fully masked
  // unless extra keys rescue it.
  if (c.has_kpm && S > 0 && coin(0.3)) {
    const size_t n = static_cast<size_t>(pick(0, static_cast<int>(N) - 1));
    for (size_t j = 0; j < S; ++j) c.kpm[n * S + j] = -kInf;
  }
  // ALiBi (Press et al.'s slopes) and sliding windows, causal or bidirectional.
  if (coin(0.3)) {
    for (size_t h = 0; h < H; ++h) c.slopes.push_back(AlibiSlope(h, H));
  }
  if (coin(0.3)) c.window = static_cast<size_t>(coin(0.3) ? pick(1, 3) : pick(1, 40));
  c.want_weights = coin(0.7);
  c.average = coin(0.5);
  c.want_scores = coin(0.5);
  c.want_sinks = coin(0.6);
  // Attention sinks (gpt-oss): a logit per head, now and then -inf (no effect), NaN or +inf
  // (NaN rows), or far above the scores (every weight tiny).
  if (coin(0.3)) {
    for (size_t h = 0; h < H; ++h) {
      const int kind = pick(0, 19);
      c.head_sinks.push_back(kind == 0 ? -kInf : kind == 1 ? kNaN : kind == 2 ? kInf
                             : kind == 3 ? 40.0f : 2.0f * value(rng));
    }
  }
  c.description = "N=" + std::to_string(N) + " H=" + std::to_string(H) +
                  " H_kv=" + std::to_string(s.kv_heads) + " L=" + std::to_string(L) +
                  " S=" + std::to_string(S) + " S'=" + std::to_string(s.kv_total) +
                  " hd=" + std::to_string(s.head_dim) + (padded ? " padded" : "") +
                  (c.causal ? " causal" : "") + (c.has_attn_mask ? " attn_mask" : "") +
                  (c.mask_per_head ? "(per head)" : "") + (c.has_kpm ? " kpm" : "") +
                  (c.slopes.empty() ? "" : " alibi") +
                  (c.window > 0 ? " window=" + std::to_string(c.window) : "") +
                  (c.want_weights ? (c.average ? " avg-weights" : " weights") : "") +
                  (c.want_scores ? " scores" : "") + (c.want_sinks ? " row-stats" : "") +
                  (c.head_sinks.empty() ? "" : " attn-sinks");
  return c;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what,
                 const std::string& description) {
  ASSERT_EQ(got.size(), want.size()) << what << " " << description;
  EXPECT_LE(test::RelativeError(got.data(), want.data(), got.size()), 2e-5)
      << what << " " << description;
}

// The float64 reference of the statistics: the sinks must be the row statistics of the stage's
// own per-head weights computed in double, to 1e-6 relative per row (the kernel sums in double
// too, so what is left is the final float rounding).
void ExpectSinksMatchOwnWeights(const StageCall& c, const StageResult& got) {
  if (!c.want_sinks || !c.want_weights || c.average) return;
  const AttentionShape& s = c.shape;
  const size_t rows = s.batch * s.heads * s.q_len;
  for (size_t row = 0; row < rows; ++row) {
    float max_weight;
    double entropy, distance;
    RowStats(got.weights.data() + row * s.kv_total, s.kv_total, s.kv_len, row % s.q_len,
             &max_weight, &entropy, &distance, !c.head_sinks.empty());
    const auto close = [](float x, double want) {
      return (std::isnan(x) && std::isnan(want)) ||
             std::fabs(static_cast<double>(x) - want) <= 1e-6 * std::fabs(want) + 1e-30;
    };
    ASSERT_TRUE(close(got.max_weight[row], max_weight)) << c.description << " row " << row;
    ASSERT_TRUE(close(got.entropy[row], entropy))
        << c.description << " row " << row << ": " << got.entropy[row] << " vs " << entropy;
    ASSERT_TRUE(close(got.distance[row], distance))
        << c.description << " row " << row << ": " << got.distance[row] << " vs " << distance;
  }
}

void ExpectMatchesScalar(const StageCall& c, const StageResult& got) {
  const StageResult want = ScalarStage(c);
  ExpectClose(got.concat, want.concat, "concat", c.description);
  ExpectClose(got.weights, want.weights, "weights", c.description);
  ExpectClose(got.scores, want.scores, "scores", c.description);
  ExpectClose(got.max_weight, want.max_weight, "max_weight", c.description);
  ExpectClose(got.entropy, want.entropy, "entropy", c.description);
  ExpectClose(got.distance, want.distance, "distance", c.description);
  ExpectSinksMatchOwnWeights(c, got);
}

void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  if (!a.empty()) {
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
  }
}

// The thread counts to run with: the pool's sizes in the threaded library, else one.
std::vector<int> ThreadCounts() {
#if defined(HEADSCOPE_THREADS)
  return {1, 2, 3};
#else
  return {1};
#endif
}

TEST(AttentionStage, MatchesScalarStageOnRandomArguments) {
  test::ForEachTarget([](const char*) {
    std::mt19937 rng(17);
    for (int draw = 0; draw < 250; ++draw) {
      const StageCall c = Draw(rng);
      StageResult first;
      for (int threads : ThreadCounts()) {
        SetThreadCount(threads);
        const StageResult got = RunStage(c, static_cast<size_t>(threads));
        if (threads == 1) {
          ExpectMatchesScalar(c, got);
          first = got;
        } else {
          SCOPED_TRACE(c.description + " threads=" + std::to_string(threads));
          ExpectSameBits(got.concat, first.concat, "concat");
          ExpectSameBits(got.weights, first.weights, "weights");
          ExpectSameBits(got.scores, first.scores, "scores");
          ExpectSameBits(got.max_weight, first.max_weight, "max_weight");
          ExpectSameBits(got.entropy, first.entropy, "entropy");
          ExpectSameBits(got.distance, first.distance, "distance");
        }
      }
      SetThreadCount(1);
      if (::testing::Test::HasFailure()) return;  // one drawn call's report is enough
    }
  });
}

// A dense call of given sizes with values in every operand, no masks.
StageCall DenseCall(size_t N, size_t H, size_t kv_heads, size_t L, size_t S, size_t hd,
                    std::mt19937& rng) {
  StageCall c;
  c.shape = AttentionShape::Dense(N, H, L, S, S, hd);
  c.shape.kv_heads = kv_heads;
  c.shape.kv_row_stride = kv_heads * hd;
  c.shape.kv_batch_stride = S * kv_heads * hd;
  c.q = test::RandomVector(&rng, QFloats(c.shape), 2.0f);
  c.k = test::RandomVector(&rng, KvFloats(c.shape), 2.0f);
  c.v = test::RandomVector(&rng, KvFloats(c.shape), 2.0f);
  c.description = "dense N=" + std::to_string(N) + " H=" + std::to_string(H) +
                  " H_kv=" + std::to_string(kv_heads) + " L=" + std::to_string(L) +
                  " S=" + std::to_string(S) + " hd=" + std::to_string(hd);
  return c;
}

// Causal calls over several query tiles skip the keys past each tile's last visible key: the
// skipped keys still get weight 0 and score -inf, and the kept ones match the scalar stage.
// Gates on every path (small-head, packed, causal tiles, threads): each head's output times its
// gate, as the scalar stage computes it; weights, scores and sinks exactly the ungated bits.
TEST(AttentionStage, HeadGatesScaleEachHeadsOutput) {
  test::ForEachTarget([](const char*) {
    std::mt19937 rng(29);
    std::uniform_real_distribution<float> value(-2.0f, 2.0f);
    for (int draw = 0; draw < 150; ++draw) {
      StageCall c = Draw(rng);
      const StageResult ungated = RunStage(c, 1);
      const float special[] = {0.0f, 0.5f, 1.0f, -1.0f, kInf, kNaN};
      c.gates.resize(c.shape.heads);
      for (float& g : c.gates) {
        g = std::bernoulli_distribution(0.5)(rng) ? special[std::uniform_int_distribution<int>(0, 5)(rng)]
                                                    : value(rng);
      }
      SCOPED_TRACE(c.description + " gated");
      StageResult first;
      for (int threads : ThreadCounts()) {
        SetThreadCount(threads);
        const StageResult got = RunStage(c, static_cast<size_t>(threads));
        if (threads == 1) {
          ExpectMatchesScalar(c, got);
          ExpectSameBits(got.weights, ungated.weights, "weights (gates must not change them)");
          ExpectSameBits(got.scores, ungated.scores, "scores");
          ExpectSameBits(got.max_weight, ungated.max_weight, "max_weight");
          ExpectSameBits(got.entropy, ungated.entropy, "entropy");
          ExpectSameBits(got.distance, ungated.distance, "distance");
          first = got;
        } else {
          ExpectSameBits(got.concat, first.concat, "concat");
        }
      }
      SetThreadCount(1);
      // All-one gates are a multiply by 1: the ungated bits exactly.
      std::fill(c.gates.begin(), c.gates.end(), 1.0f);
      ExpectSameBits(RunStage(c, 1).concat, ungated.concat, "concat with gates of 1");
    }
  });
}

TEST(AttentionStage, CausalTilesSkipInvisibleKeys) {
  std::mt19937 rng(3);
  for (size_t L : {63, 64, 65, 130, 200}) {
    StageCall c = DenseCall(2, 3, 3, L, L, 24, rng);
    c.causal = true;
    c.want_weights = true;
    c.want_scores = true;
    c.want_sinks = true;
    c.description += " causal";
    const StageResult got = RunStage(c, 1);
    ExpectMatchesScalar(c, got);
    const size_t Sp = c.shape.kv_total;
    for (size_t n = 0; n < 2; ++n) {
      for (size_t h = 0; h < 3; ++h) {
        for (size_t i = 0; i < L; ++i) {
          for (size_t j = i + 1; j < Sp; ++j) {
            const size_t at = ((n * 3 + h) * L + i) * Sp + j;
            ASSERT_EQ(got.weights[at], 0.0f) << c.description << " i=" << i << " j=" << j;
            ASSERT_EQ(got.scores[at], -kInf) << c.description << " i=" << i << " j=" << j;
          }
        }
      }
    }
  }
}

// Sliding windows on the packed path, long rows: causal and bidirectional, windows below, at and
// across a panel (16 keys) and the tile; with ALiBi, a NaN in V below
// every window (no key before it may be skipped: 0 x NaN is NaN, as in torch) and per-head
// weights, trace scores and sinks, against the scalar stage; the weights and scores outside the
// window are exactly 0 and -inf.
TEST(AttentionStage, WindowTilesSkipKeysOutsideTheWindow) {
  std::mt19937 rng(5);
  for (size_t L : {40, 130, 200}) {
    for (size_t w : {1, 2, 15, 16, 17, 64, 100}) {
      for (int variant = 0; variant < 4; ++variant) {
        StageCall c = DenseCall(2, 2, 2, L, L, 24, rng);
        c.causal = variant != 1;
        c.window = w;
        if (variant == 2) c.slopes = {AlibiSlope(0, 2), AlibiSlope(1, 2)};
        if (variant == 3) c.v[3 * c.shape.kv_row_stride + 5] = kNaN;  // key 3, batch 0
        c.want_weights = true;
        c.want_scores = true;
        c.want_sinks = true;
        c.description += " window=" + std::to_string(w) + (c.causal ? " causal" : " bidir") +
                         (variant == 2 ? " alibi" : "") + (variant == 3 ? " NaN in V" : "");
        const StageResult got = RunStage(c, 1);
        ExpectMatchesScalar(c, got);
        if (variant == 3) continue;
        const size_t Sp = c.shape.kv_total;
        for (size_t n = 0; n < 2; ++n) {
          for (size_t h = 0; h < 2; ++h) {
            for (size_t i = 0; i < L; ++i) {
              for (size_t j = 0; j < Sp; ++j) {
                const bool out = j + w <= i || (c.causal ? j > i : i + w <= j);
                if (!out) continue;
                const size_t at = ((n * 2 + h) * L + i) * Sp + j;
                ASSERT_EQ(got.weights[at], 0.0f) << c.description << " i=" << i << " j=" << j;
                ASSERT_EQ(got.scores[at], -kInf) << c.description << " i=" << i << " j=" << j;
              }
            }
          }
        }
      }
    }
  }
}

// What generation with a KV cache relies on (transformer.h): a causal row's numbers depend
// neither on the keys after it nor on the kernel path. Row P-1 of a causal call over L keys is,
// bit for bit, row P-1 of the call over the first P positions, and the one query of a call with
// q_offset P-1 over P keys; P runs across the small-head path's bound (12 keys) and the query
// tile (64 rows), head dims across the SIMD width, on every target.
// The same with ALiBi and sliding windows (whose tiles also skip the keys below their first
// row's window, and whose softmax starts at a panel: the same bits as over the whole row).
TEST(AttentionStage, ACausalRowDependsNeitherOnLaterKeysNorOnThePath) {
  test::ForEachTarget([](const char* target) {
    std::mt19937 rng(41);
    struct Positions {
      size_t window;
      bool alibi;
      bool sinks = false;  // attention sinks: -0.5 and 3 (a dominant one)
    };
    for (const Positions pos : {Positions{0, false}, Positions{0, true}, Positions{1, false},
                                Positions{5, true}, Positions{17, false}, Positions{40, true},
                                Positions{0, false, true}, Positions{5, true, true}})
    for (size_t hd : {1, 3, 4, 5, 8, 12, 16, 17}) {
      const size_t H = 2, E = H * hd, L = 70;
      const std::vector<float> slopes =
          pos.alibi ? std::vector<float>{AlibiSlope(0, H), AlibiSlope(1, H)} : std::vector<float>();
      const std::vector<float> sinks =
          pos.sinks ? std::vector<float>{-0.5f, 3.0f} : std::vector<float>();
      StageCall full = DenseCall(1, H, H, L, L, hd, rng);
      full.causal = true;
      full.head_sinks = sinks;
      full.slopes = slopes;
      full.window = pos.window;
      full.want_weights = true;
      const StageResult all = RunStage(full, 1);
      for (size_t P : {1, 2, 5, 11, 12, 13, 16, 33, 64, 65, 70}) {
        SCOPED_TRACE(std::string(target) + " hd=" + std::to_string(hd) + " P=" +
                     std::to_string(P) + " window=" + std::to_string(pos.window) +
                     (pos.alibi ? " alibi" : "") + (pos.sinks ? " sinks" : ""));
        // The first P positions alone, causal.
        StageCall prefix = DenseCall(1, H, H, P, P, hd, rng);
        prefix.q.assign(full.q.begin(), full.q.begin() + P * E);
        prefix.k.assign(full.k.begin(), full.k.begin() + P * E);
        prefix.v.assign(full.v.begin(), full.v.begin() + P * E);
        prefix.causal = true;
        prefix.head_sinks = sinks;
        prefix.slopes = slopes;
        prefix.window = pos.window;
        prefix.want_weights = true;
        const StageResult head = RunStage(prefix, 1);
        // Position P-1's query alone over the P keys (a generation step).
        StageCall step = DenseCall(1, H, H, 1, P, hd, rng);
        step.q.assign(full.q.begin() + (P - 1) * E, full.q.begin() + P * E);
        step.k = prefix.k;
        step.v = prefix.v;
        step.causal = true;
        step.head_sinks = sinks;
        step.slopes = slopes;
        step.window = pos.window;
        step.q_offset = P - 1;
        step.want_weights = true;
        const StageResult one = RunStage(step, 1);
        const std::vector<float> want(all.concat.begin() + (P - 1) * E, all.concat.begin() + P * E);
        ExpectSameBits(std::vector<float>(head.concat.begin() + (P - 1) * E, head.concat.begin() + P * E),
                       want, "prefix call's last row");
        ExpectSameBits(one.concat, want, "q_offset step's row");
        for (size_t h = 0; h < H; ++h) {
          const float* w = all.weights.data() + (h * L + P - 1) * L;
          ExpectSameBits(std::vector<float>(one.weights.begin() + h * P, one.weights.begin() + (h + 1) * P),
                         std::vector<float>(w, w + P), "the step's weights");
        }
      }
    }
  });
}

// Grouped-query attention is a change of AttentionShape: with H_kv < H, head h reads K/V head
// h / (H / H_kv), which must equal the dense call whose K/V heads are repeated per query head.
TEST(AttentionStage, KvHeadMappingEqualsRepeatedKvHeads) {
  std::mt19937 rng(9);
  for (size_t kv_heads : {1, 2}) {
    for (size_t hd : {4, 24}) {  // small-head and packed paths
      const size_t N = 2, H = 4, L = 9, S = hd == 4 ? 7 : 30;
      StageCall grouped = DenseCall(N, H, kv_heads, L, S, hd, rng);
      grouped.want_weights = true;
      StageCall repeated = grouped;
      repeated.shape = AttentionShape::Dense(N, H, L, S, S, hd);
      repeated.k.assign(KvFloats(repeated.shape), 0.0f);
      repeated.v.assign(KvFloats(repeated.shape), 0.0f);
      for (size_t n = 0; n < N; ++n) {
        for (size_t j = 0; j < S; ++j) {
          for (size_t h = 0; h < H; ++h) {
            const size_t g = h / (H / kv_heads);
            for (size_t x = 0; x < hd; ++x) {
              const size_t to = n * repeated.shape.kv_batch_stride +
                                j * repeated.shape.kv_row_stride + h * hd + x;
              const size_t from =
                  n * grouped.shape.kv_batch_stride + j * grouped.shape.kv_row_stride + g * hd + x;
              repeated.k[to] = grouped.k[from];
              repeated.v[to] = grouped.v[from];
            }
          }
        }
      }
      const StageResult a = RunStage(grouped, 1), b = RunStage(repeated, 1);
      SCOPED_TRACE(grouped.description);
      ExpectSameBits(a.concat, b.concat, "concat");
      ExpectSameBits(a.weights, b.weights, "weights");
      ExpectMatchesScalar(grouped, a);
    }
  }
}

// The policies, exactly: a fully masked row is 0 (weights, output and its max weight) even where
// V holds NaN; a NaN query element makes its row's weights, output and max weight NaN, and no
// other head's; extra keys are never masked, so they rescue a fully masked row.
TEST(AttentionStage, FullyMaskedAndNaNRows) {
  std::mt19937 rng(4);
  for (size_t hd : {4, 24}) {
    for (size_t extra : {0, 1}) {
      const size_t N = 1, H = 2, L = 3, S = hd == 4 ? 5 : 20, Sp = S + extra;
      StageCall c;
      c.shape = AttentionShape::Dense(N, H, L, S, Sp, hd);
      c.q = test::RandomVector(&rng, QFloats(c.shape), 2.0f);
      c.k = test::RandomVector(&rng, KvFloats(c.shape), 2.0f);
      c.v = test::RandomVector(&rng, KvFloats(c.shape), 2.0f);
      c.v[0] = kNaN;  // key 0, head 0: reaches every row of head 0 that is not fully masked
      c.has_attn_mask = true;
      c.attn_mask.assign(L * S, 0.0f);
      for (size_t j = 0; j < S; ++j) c.attn_mask[1 * S + j] = -kInf;  // query 1 sees nothing
      c.q[2 * c.shape.q_row_stride + 1 * hd] = kNaN;                  // query 2, head 1
      c.want_weights = true;
      c.want_sinks = true;
      c.description = "policies hd=" + std::to_string(hd) + " extra=" + std::to_string(extra);
      const StageResult got = RunStage(c, 1);
      ExpectMatchesScalar(c, got);
      SCOPED_TRACE(c.description);
      auto w = [&](size_t h, size_t i, size_t j) { return got.weights[((h * L) + i) * Sp + j]; };
      auto out = [&](size_t h, size_t i, size_t x) {
        return got.concat[i * c.shape.q_row_stride + h * hd + x];
      };
      for (size_t h = 0; h < H; ++h) {
        if (extra == 0) {
          for (size_t j = 0; j < Sp; ++j) EXPECT_EQ(w(h, 1, j), 0.0f);
          for (size_t x = 0; x < hd; ++x) EXPECT_EQ(out(h, 1, x), 0.0f);
          EXPECT_EQ(got.max_weight[h * L + 1], 0.0f);
          EXPECT_EQ(got.entropy[h * L + 1], 0.0f);
          EXPECT_EQ(got.distance[h * L + 1], 0.0f);
        } else {
          EXPECT_EQ(w(h, 1, S), 1.0f);  // the extra key takes all the weight
        }
      }
      for (size_t j = 0; j < Sp; ++j) EXPECT_TRUE(std::isnan(w(1, 2, j)));
      for (size_t x = 0; x < hd; ++x) EXPECT_TRUE(std::isnan(out(1, 2, x)));
      EXPECT_TRUE(std::isnan(got.max_weight[1 * L + 2]));
      EXPECT_TRUE(std::isnan(got.entropy[1 * L + 2]));
      EXPECT_TRUE(std::isnan(got.distance[1 * L + 2]));
      EXPECT_FALSE(std::isnan(w(0, 2, 0)));   // head 0 of the same query is not a NaN row
      EXPECT_TRUE(std::isnan(out(0, 0, 0)));  // but V's NaN reaches head 0's outputs
    }
  }
}

// The attention backward (AttentionBackward) on raw arguments: its gradients against a scalar
// double backward written from the definitions, with the operands in two layouts, planar
// ([N, T, H * hd] each, as MultiheadAttention's activations) and interleaved (q | k | v per row,
// the gradients likewise), padded with NaN (a kernel that ignores a stride reads NaN). The two
// layouts give the same bits: every (n, h) is addressed through AttentionShape alone.
struct BackwardCall {
  AttentionShape shape;  // q_len = kv_len = kv_total = T
  bool causal = false;
  size_t window = 0;  // P is 0 outside the window (so the scalar backward needs no rule of its own)
  std::vector<float> p, dz, gates;
  std::vector<float> q, k, v;  // planar, [N, T, E] each
  bool sinks = false;  // attention sinks: P's rows sum to less than 1, the rest the sink's
};

// dq, dk, dv [N, T, E] each and the gate gradients [H] (with the sums of their terms' sizes), in
// double.
// With sinks also d sink_h = -sum_i p_sink(i) sum_j P_ij g M_ij, p_sink(i) = 1 - sum_j P_ij
// (dsink [2 H]: the gradients, then the sums of their terms' sizes).
void ScalarBackward(const BackwardCall& c, std::vector<double>* dq, std::vector<double>* dk,
                    std::vector<double>* dv, std::vector<double>* dgate,
                    std::vector<double>* dgate_size, std::vector<double>* dsink) {
  const AttentionShape& s = c.shape;
  const size_t T = s.q_len, hd = s.head_dim, E = s.heads * hd;
  const double scale = 1.0 / static_cast<double>(std::sqrt(static_cast<float>(hd)));
  dq->assign(s.batch * T * E, 0.0);
  dk->assign(s.batch * T * E, 0.0);
  dv->assign(s.batch * T * E, 0.0);
  dgate->assign(s.heads, 0.0);
  dgate_size->assign(s.heads, 0.0);
  dsink->assign(2 * s.heads, 0.0);
  for (size_t n = 0; n < s.batch; ++n) {
    for (size_t h = 0; h < s.heads; ++h) {
      const double g = c.gates.empty() ? 1.0 : c.gates[h];
      const auto at = [&](size_t i, size_t x) { return (n * T + i) * E + h * hd + x; };
      const float* P = c.p.data() + s.WeightsOffset(n, h);
      std::vector<double> ds(T * T, 0.0);
      for (size_t i = 0; i < T; ++i) {
        const size_t end = c.causal ? i + 1 : T;
        std::vector<double> m(T, 0.0);
        double dot = 0.0;
        for (size_t j = 0; j < end; ++j) {
          for (size_t x = 0; x < hd; ++x)
            m[j] += static_cast<double>(c.dz[at(i, x)]) * c.v[at(j, x)];
          (*dgate)[h] += P[i * T + j] * m[j];
          (*dgate_size)[h] += std::fabs(P[i * T + j] * m[j]);
          dot += P[i * T + j] * g * m[j];
        }
        double mass = 0.0;
        for (size_t j = 0; j < end; ++j) mass += P[i * T + j];
        if (c.sinks) {
          (*dsink)[h] -= (1.0 - mass) * dot;
          for (size_t j = 0; j < end; ++j) {
            (*dsink)[s.heads + h] += std::fabs((1.0 - mass) * P[i * T + j] * g * m[j]);
          }
        }
        for (size_t j = 0; j < end; ++j) ds[i * T + j] = P[i * T + j] * (g * m[j] - dot);
      }
      for (size_t i = 0; i < T; ++i) {
        for (size_t j = 0; j < T; ++j) {
          for (size_t x = 0; x < hd; ++x) {
            (*dv)[at(j, x)] += g * P[i * T + j] * c.dz[at(i, x)];
            (*dq)[at(i, x)] += scale * ds[i * T + j] * c.k[at(j, x)];
            (*dk)[at(j, x)] += scale * ds[i * T + j] * c.q[at(i, x)];
          }
        }
      }
    }
  }
}

TEST(AttentionBackward, MatchesScalarBackwardInEveryLayout) {
  test::ForEachTarget([](const char* target) {
    SCOPED_TRACE(target);
    std::mt19937 rng(29);
    const auto pick = [&](int lo, int hi) {
      return static_cast<size_t>(std::uniform_int_distribution<int>(lo, hi)(rng));
    };
    for (int trial = 0; trial < 60; ++trial) {
      BackwardCall c;
      const size_t N = pick(1, 3), H = pick(1, 4),
                   hd = std::vector<size_t>{1, 3, 8, 16, 32}[pick(0, 4)];
      const size_t T = trial % 3 == 0 ? pick(60, 140) : pick(1, 40), E = H * hd;
      c.shape = AttentionShape::Dense(N, H, T, T, T, hd);
      c.causal = pick(0, 1) == 1;
      if (trial % 4 == 1) c.window = pick(1, 3) == 1 ? pick(1, 3) : pick(1, 50);
      c.q = test::RandomVector(&rng, N * T * E);
      c.k = test::RandomVector(&rng, N * T * E);
      c.v = test::RandomVector(&rng, N * T * E);
      c.dz = test::RandomVector(&rng, N * T * E);
      if (pick(0, 2) == 0) c.gates = test::RandomVector(&rng, H, 2.0f);
      c.sinks = trial % 5 == 3;
      // Softmax rows over the visible keys, 0 past them (as the forward leaves them).
      c.p.assign(N * H * T * T, 0.0f);
      for (size_t r = 0; r < N * H * T; ++r) {
        const size_t i = r % T, w = c.window;
        size_t begin = 0, end = c.causal ? i + 1 : T;
        if (w > 0 && i + 1 > w) begin = i + 1 - w;
        if (w > 0 && !c.causal) end = std::min(T, i + w);
        float sum = 0.0f;
        for (size_t j = begin; j < end; ++j)
          sum += c.p[r * T + j] = std::exp(test::RandomVector(&rng, 1)[0]);
        // (With a sink its exp(s - max) joins the sum: here a share of the row's mass.)
        if (c.sinks) sum *= 1.0f + static_cast<float>(r % 7) / 4.0f;
        for (size_t j = begin; j < end; ++j) c.p[r * T + j] /= sum;
      }
      SCOPED_TRACE("N=" + std::to_string(N) + " H=" + std::to_string(H) + " hd=" +
                   std::to_string(hd) + " T=" + std::to_string(T) + (c.causal ? " causal" : "") +
                   " window=" + std::to_string(c.window));
      std::vector<double> dq, dk, dv, dgate, dgate_size, dsink;
      ScalarBackward(c, &dq, &dk, &dv, &dgate, &dgate_size, &dsink);

      // Runs the kernel with q, k, v and the gradients at `stride` floats a row (each block of E
      // at offsets 0, E, 2 E of a row in the interleaved layout); returns dq | dk | dv planar.
      const auto run = [&](bool interleaved, std::vector<double>* gate_grads,
                           std::vector<double>* sink_grads) {
        const size_t stride = interleaved ? 3 * E + 5 : E;  // + padding that must not be read
        const size_t part = interleaved ? E : N * T * stride;
        std::vector<float> in(N * T * stride * (interleaved ? 1 : 3), kNaN);
        std::vector<float> grads(in.size(), kSentinel);
        for (size_t r = 0; r < N * T; ++r) {
          for (size_t x = 0; x < E; ++x) {
            in[r * stride + x] = c.q[r * E + x];
            in[part + r * stride + x] = c.k[r * E + x];
            in[2 * part + r * stride + x] = c.v[r * E + x];
          }
        }
        AttentionBackwardArgs a;
        a.shape = c.shape;
        a.shape.q_row_stride = a.shape.kv_row_stride = stride;
        a.shape.q_batch_stride = a.shape.kv_batch_stride = T * stride;
        a.modifiers.causal = c.causal;
        a.modifiers.window = c.window;
        a.sqrt_head_dim = std::sqrt(static_cast<float>(hd));
        a.q = in.data();
        a.k = in.data() + part;
        a.v = in.data() + 2 * part;
        a.weights = c.p.data();
        a.head_gates = c.gates.empty() ? nullptr : c.gates.data();
        // dz keeps the concatenation's own layout here: the q geometry of a dense shape of its
        // own would be its strides; the kernel takes the shape's, so it moves with q.
        std::vector<float> dz(in.size(), kNaN);
        for (size_t r = 0; r < N * T; ++r) {
          for (size_t x = 0; x < E; ++x) dz[r * stride + x] = c.dz[r * E + x];
        }
        a.dz = dz.data();
        a.grads = a.shape;
        a.dq = grads.data();
        a.dk = grads.data() + part;
        a.dv = grads.data() + 2 * part;
        gate_grads->assign(H, 0.0);
        a.gate_grads = gate_grads->data();
        // The sinks' logits are not read by the backward (P has them in): any pointer will do.
        const std::vector<float> logits(H, 0.0f);
        sink_grads->assign(H, 0.0);
        if (c.sinks) {
          a.modifiers.sinks = logits.data();
          a.sink_grads = sink_grads->data();
        }
        AlignedBuffer scratch;
        EXPECT_TRUE(scratch.Resize(AttentionBackwardFloats(T, hd)));
        AttentionBackward(a, scratch.data());
        std::vector<float> out(3 * N * T * E);
        for (size_t r = 0; r < N * T; ++r) {
          for (size_t x = 0; x < E; ++x) {
            for (size_t b = 0; b < 3; ++b)
              out[(b * N * T + r) * E + x] = grads[b * part + r * stride + x];
          }
          if (interleaved) {  // the padding after each row's three blocks is left alone
            for (size_t x = 3 * E; x < stride; ++x) EXPECT_EQ(grads[r * stride + x], kSentinel);
          }
        }
        return out;
      };
      std::vector<double> gates_planar, gates_interleaved, sinks_planar, sinks_interleaved;
      const std::vector<float> planar = run(false, &gates_planar, &sinks_planar);
      const std::vector<float> interleaved = run(true, &gates_interleaved, &sinks_interleaved);
      EXPECT_EQ(std::memcmp(planar.data(), interleaved.data(), planar.size() * sizeof(float)), 0);
      EXPECT_EQ(gates_planar, gates_interleaved);
      EXPECT_EQ(sinks_planar, sinks_interleaved);
      for (size_t h = 0; h < H && c.sinks; ++h) {  // (P and M are float: 1e-5 of the terms' sizes)
        EXPECT_NEAR(sinks_planar[h], dsink[h], 1e-5 * (1e-30 + dsink[H + h])) << "sink " << h;
      }
      double scale = 1e-30, worst = 0.0;
      for (size_t b = 0; b < 3; ++b) {
        const std::vector<double>& want = b == 0 ? dq : b == 1 ? dk : dv;
        for (size_t i = 0; i < want.size(); ++i) {
          scale = std::max(scale, std::fabs(want[i]));
          worst = std::max(worst, std::fabs(planar[b * want.size() + i] - want[i]));
        }
      }
      EXPECT_LE(worst / scale, 1e-5);
      for (size_t h = 0; h < H; ++h) {
        EXPECT_NEAR(gates_planar[h], dgate[h], 1e-5 * (1e-30 + dgate_size[h]));  // M is float
      }
    }
  });
}

// Grouped-query attention (H_kv < H): a K/V head's dK and dV are the sums, in head order, of its
// group's heads' own, which are the gradients those heads give when each reads a copy of the K/V
// head (the kernel with H_kv = H over K and V repeated per head): dQ and the gate gradients are
// that run's bits, dK and dV its per-head gradients added in float, head after head.
TEST(AttentionBackward, GroupedHeadsAddTheirKvGradients) {
  test::ForEachTarget([](const char* target) {
    SCOPED_TRACE(target);
    std::mt19937 rng(30);
    const auto pick = [&](int lo, int hi) {
      return static_cast<size_t>(std::uniform_int_distribution<int>(lo, hi)(rng));
    };
    for (int trial = 0; trial < 24; ++trial) {
      const size_t N = pick(1, 2), H = std::vector<size_t>{2, 4, 6, 8}[pick(0, 3)];
      const size_t G = std::vector<size_t>{1, 2, H / 2}[pick(0, 2)];
      const size_t group = H / G, hd = std::vector<size_t>{1, 4, 8, 16}[pick(0, 3)];
      const size_t T = trial % 4 == 0 ? pick(60, 90) : pick(1, 20), E = H * hd, Ekv = G * hd;
      const bool causal = pick(0, 1) == 1;
      SCOPED_TRACE("N=" + std::to_string(N) + " H=" + std::to_string(H) + " G=" +
                   std::to_string(G) + " hd=" + std::to_string(hd) + " T=" + std::to_string(T));
      const std::vector<float> q = test::RandomVector(&rng, N * T * E);
      const std::vector<float> k = test::RandomVector(&rng, N * T * Ekv);
      const std::vector<float> v = test::RandomVector(&rng, N * T * Ekv);
      const std::vector<float> dz = test::RandomVector(&rng, N * T * E);
      const std::vector<float> gates = test::RandomVector(&rng, H, 2.0f);
      std::vector<float> p(N * H * T * T, 0.0f);
      for (size_t r = 0; r < N * H * T; ++r) {
        const size_t i = r % T, end = causal ? i + 1 : T;
        float sum = 0.0f;
        for (size_t j = 0; j < end; ++j)
          sum += p[r * T + j] = std::exp(test::RandomVector(&rng, 1)[0]);
        for (size_t j = 0; j < end; ++j) p[r * T + j] /= sum;
      }
      // K and V repeated per query head, [N, T, E].
      std::vector<float> k_rep(N * T * E), v_rep(N * T * E);
      for (size_t r = 0; r < N * T; ++r) {
        for (size_t h = 0; h < H; ++h) {
          for (size_t x = 0; x < hd; ++x) {
            k_rep[r * E + h * hd + x] = k[r * Ekv + (h / group) * hd + x];
            v_rep[r * E + h * hd + x] = v[r * Ekv + (h / group) * hd + x];
          }
        }
      }
      const auto run = [&](size_t kv_heads, const std::vector<float>& kk,
                           const std::vector<float>& vv, std::vector<float>* dq,
                           std::vector<float>* dk, std::vector<float>* dv,
                           std::vector<double>* gate_grads) {
        const size_t w = kv_heads * hd;
        AttentionBackwardArgs a;
        a.shape = AttentionShape::Dense(N, H, T, T, T, hd, kv_heads);
        a.modifiers.causal = causal;
        a.sqrt_head_dim = std::sqrt(static_cast<float>(hd));
        a.q = q.data();
        a.k = kk.data();
        a.v = vv.data();
        a.weights = p.data();
        a.head_gates = gates.data();
        a.dz = dz.data();
        a.grads = a.shape;
        dq->assign(N * T * E, kSentinel);
        dk->assign(N * T * w, kSentinel);
        dv->assign(N * T * w, kSentinel);
        a.dq = dq->data();
        a.dk = dk->data();
        a.dv = dv->data();
        gate_grads->assign(H, 0.0);
        a.gate_grads = gate_grads->data();
        AlignedBuffer scratch;
        EXPECT_TRUE(scratch.Resize(AttentionBackwardFloats(T, hd, H / kv_heads)));
        AttentionBackward(a, scratch.data());
      };
      std::vector<float> dq, dk, dv, dq_rep, dk_rep, dv_rep;
      std::vector<double> gg, gg_rep;
      run(G, k, v, &dq, &dk, &dv, &gg);
      run(H, k_rep, v_rep, &dq_rep, &dk_rep, &dv_rep, &gg_rep);
      EXPECT_EQ(std::memcmp(dq.data(), dq_rep.data(), dq.size() * sizeof(float)), 0);
      EXPECT_EQ(gg, gg_rep);
      std::vector<float> dk_sum(N * T * Ekv), dv_sum(N * T * Ekv);
      for (size_t r = 0; r < N * T; ++r) {
        for (size_t g = 0; g < G; ++g) {
          for (size_t x = 0; x < hd; ++x) {
            float sk = dk_rep[r * E + g * group * hd + x], sv = dv_rep[r * E + g * group * hd + x];
            for (size_t h = g * group + 1; h < (g + 1) * group; ++h) {
              sk += dk_rep[r * E + h * hd + x];
              sv += dv_rep[r * E + h * hd + x];
            }
            dk_sum[r * Ekv + g * hd + x] = sk;
            dv_sum[r * Ekv + g * hd + x] = sv;
          }
        }
      }
      EXPECT_EQ(std::memcmp(dk.data(), dk_sum.data(), dk.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(dv.data(), dv_sum.data(), dv.size() * sizeof(float)), 0);
    }
  });
}

}  // namespace
}  // namespace headscope
