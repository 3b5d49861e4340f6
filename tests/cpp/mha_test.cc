// The fast path (Highway kernels) against the Eigen reference on hundreds of random shapes and
// option combinations; the trace's stages recombining to the output; no allocation per call.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "headscope/mha.h"
#include "headscope/reference.h"
#include "test_util.h"

// Counts every operator new in this test binary, to show Forward allocates nothing once warm.
// The replacements pair malloc with free; GCC 12 inlines the delete below into std::vector's
// destructor, still sees the standard operator new there, and warns about a mismatch that is not.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
static std::atomic<size_t> g_news{0};
void* operator new(size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  g_news.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace headscope {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// One randomly drawn call: config, weights, inputs and options, owning all its data.
struct RandomCall {
  MhaConfig config;
  std::unique_ptr<MultiheadAttention> mha;
  std::vector<float> query, key, value, kpm_f, attn_f;
  std::vector<uint8_t> kpm_b, attn_b;
  Shape q_shape, k_shape, v_shape;
  ForwardOptions options;
  std::string description;

  TensorView q() const { return {query.data(), q_shape, query.size()}; }
  TensorView k() const { return {key.data(), k_shape, key.size()}; }
  TensorView v() const { return {value.data(), v_shape, value.size()}; }
};

Shape InputShape(bool batched, bool batch_first, int64_t n, int64_t len, int64_t dim) {
  if (!batched) return {len, dim};
  return batch_first ? Shape{n, len, dim} : Shape{len, n, dim};
}

void Draw(std::mt19937& rng, RandomCall* c) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  // Head sizes and key counts on both sides of SmallAttention's bounds (hd 16, S' 12), so the
  // direct and the packed attention paths both meet every option.
  const int hd_choices[] = {1, 2, 3, 4, 5, 8, 16, 17, 24};
  const int64_t hd = hd_choices[pick(0, 8)];
  MhaConfig& cfg = c->config;
  cfg.num_heads = pick(1, 4);
  cfg.embed_dim = cfg.num_heads * hd;
  cfg.bias = coin(0.7);
  cfg.add_bias_kv = coin(0.3);
  cfg.add_zero_attn = coin(0.3);
  cfg.kdim = coin(0.3) ? pick(1, 12) : 0;
  cfg.vdim = coin(0.3) ? pick(1, 12) : 0;
  cfg.batch_first = coin(0.5);
  ASSERT_TRUE(MultiheadAttention::Create(cfg, &c->mha).ok());
  test::LoadRandomWeights(c->mha.get(), &rng);

  const bool batched = coin(0.7);
  const int64_t N = batched ? pick(1, 3) : 1;
  const int64_t L = coin(0.03) ? 0 : pick(1, 12);
  const bool self = cfg.same_qkv_dim() && coin(0.4);
  const int64_t S = self ? L : (coin(0.03) ? 0 : coin(0.25) ? pick(13, 36) : pick(1, 12));
  const int64_t H = cfg.num_heads;
  c->q_shape = InputShape(batched, cfg.batch_first, N, L, cfg.embed_dim);
  c->k_shape = InputShape(batched, cfg.batch_first, N, S, cfg.key_dim());
  c->v_shape = InputShape(batched, cfg.batch_first, N, S, cfg.value_dim());
  c->query = test::RandomVector(&rng, static_cast<size_t>(c->q_shape.NumElements()), 2.0f);
  c->key = self ? c->query
                : test::RandomVector(&rng, static_cast<size_t>(c->k_shape.NumElements()), 2.0f);
  c->value = self ? c->query
                  : test::RandomVector(&rng, static_cast<size_t>(c->v_shape.NumElements()), 2.0f);

  ForwardOptions& o = c->options;
  o.need_weights = coin(0.7);
  o.average_attn_weights = coin(0.5);
  o.is_causal = coin(0.2);
  // Masks: bool masks block ~30% of entries, float masks add values with some -inf.
  auto fill_bool = [&](std::vector<uint8_t>* m, size_t n) {
    m->resize(n);
    for (auto& x : *m) x = coin(0.3);
  };
  auto fill_float = [&](std::vector<float>* m, size_t n) {
    *m = test::RandomVector(&rng, n, 2.0f);
    for (auto& x : *m) if (coin(0.2)) x = -kInf;
  };
  const int kpm_kind = pick(0, 2);
  const Shape kpm_shape = batched ? Shape{N, S} : Shape{S};
  const size_t kpm_n = static_cast<size_t>(N * S);
  if (kpm_kind == 1) {
    fill_bool(&c->kpm_b, kpm_n);
    o.key_padding_mask = MaskView::Bool(c->kpm_b.data(), kpm_shape, kpm_n);
  } else if (kpm_kind == 2) {
    fill_float(&c->kpm_f, kpm_n);
    o.key_padding_mask = MaskView::Float(c->kpm_f.data(), kpm_shape, kpm_n);
  }
  const int attn_kind = pick(0, 4);  // none, bool 2-D, bool 3-D, float 2-D, float 3-D
  if (attn_kind != 0) {
    const bool three = attn_kind == 2 || attn_kind == 4;
    const Shape shape = three ? Shape{N * H, L, S} : Shape{L, S};
    const size_t n = static_cast<size_t>(shape.NumElements());
    const size_t slices = three ? static_cast<size_t>(N * H) : 1;
    const bool as_bool = attn_kind <= 2;
    if (o.is_causal) {  // with is_causal, a given attn_mask must be the causal mask itself
      c->attn_b.resize(n);
      c->attn_f.resize(n);
      for (size_t b = 0; b < slices; ++b) {
        for (int64_t i = 0; i < L; ++i) {
          for (int64_t j = 0; j < S; ++j) {
            const size_t idx = (b * L + i) * S + j;
            c->attn_b[idx] = j > i;
            c->attn_f[idx] = j > i ? -kInf : 0.0f;
          }
        }
      }
    } else if (as_bool) {
      fill_bool(&c->attn_b, n);
    } else {
      fill_float(&c->attn_f, n);
    }
    o.attn_mask = as_bool ? MaskView::Bool(c->attn_b.data(), shape, n)
                          : MaskView::Float(c->attn_f.data(), shape, n);
  }
  c->description = "E=" + std::to_string(cfg.embed_dim) + " H=" + std::to_string(H) +
                   " kdim=" + std::to_string(cfg.key_dim()) +
                   " vdim=" + std::to_string(cfg.value_dim()) + " bias=" +
                   std::to_string(cfg.bias) + " bias_kv=" + std::to_string(cfg.add_bias_kv) +
                   " zero_attn=" + std::to_string(cfg.add_zero_attn) +
                   " batch_first=" + std::to_string(cfg.batch_first) + " q" +
                   c->q_shape.ToString() + " k" + c->k_shape.ToString() + " kpm=" +
                   std::to_string(kpm_kind) + " attn=" + std::to_string(attn_kind) +
                   " causal=" + std::to_string(o.is_causal) + " need_weights=" +
                   std::to_string(o.need_weights) + " avg=" +
                   std::to_string(o.average_attn_weights);
}

void ExpectSameResult(const ForwardResult& got, const ForwardResult& want, double tol,
                      const std::string& what) {
  ASSERT_EQ(got.output_shape, want.output_shape) << what;
  ASSERT_EQ(got.weights_shape, want.weights_shape) << what;
  EXPECT_LE(test::RelativeError(got.output.data(), want.output.data(), want.output.size()), tol)
      << what;
  if (want.has_weights()) {
    EXPECT_LE(test::RelativeError(got.weights.data(), want.weights.data(), want.weights.size()),
              tol)
        << what;
  }
}

// One drawn call on the fast path and on the Eigen reference, compared; the fast path's result
// stays in *fast for further checks.
void ExpectFastMatchesReference(RandomCall& c, ForwardResult* fast) {
  ForwardResult ref;
  Status s = c.mha->Forward(c.q(), c.k(), c.v(), c.options, fast);
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = ReferenceForward(c.mha->weights(), c.q(), c.k(), c.v(), c.options, &ref);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameResult(*fast, ref, 2e-5, c.description);
}

TEST(FastPathVsReference, RandomShapesAndOptions) {
  std::mt19937 rng(2026);
  for (int iteration = 0; iteration < 400; ++iteration) {
    RandomCall c;
    Draw(rng, &c);
    SCOPED_TRACE("iteration " + std::to_string(iteration) + ": " + c.description);
    ForwardResult fast;
    ASSERT_NO_FATAL_FAILURE(ExpectFastMatchesReference(c, &fast));
  }
}

TEST(FastPathVsReference, EveryTargetOnLargerShapes) {
  // Sizes past the query tile (64 rows) and several matmul panels, on every SIMD target.
  std::mt19937 rng(7);
  MhaConfig cfg;
  cfg.embed_dim = 96;
  cfg.num_heads = 6;
  cfg.add_bias_kv = true;
  std::unique_ptr<MultiheadAttention> mha;
  ASSERT_TRUE(MultiheadAttention::Create(cfg, &mha).ok());
  test::LoadRandomWeights(mha.get(), &rng, 0.2f);
  const int64_t L = 70, S = 45, N = 2;
  std::vector<float> q = test::RandomVector(&rng, L * N * 96);
  std::vector<float> kv = test::RandomVector(&rng, S * N * 96);
  ForwardOptions opt;
  opt.average_attn_weights = false;
  ForwardResult ref;
  ASSERT_TRUE(ReferenceForward(mha->weights(), {q.data(), {L, N, 96}, q.size()},
                               {kv.data(), {S, N, 96}, kv.size()},
                               {kv.data(), {S, N, 96}, kv.size()}, opt, &ref)
                  .ok());
  test::ForEachTarget([&](const char* target) {
    ForwardResult fast;
    ASSERT_TRUE(mha->Forward({q.data(), {L, N, 96}, q.size()}, {kv.data(), {S, N, 96}, kv.size()},
                             {kv.data(), {S, N, 96}, kv.size()}, opt, &fast)
                    .ok());
    ExpectSameResult(fast, ref, 2e-5, target);
  });
}

TEST(FastPathVsReference, CausalTilesSkipFutureKeysOnEveryTarget) {
  // Causal calls skip the keys past each 64-row query tile's last row: three tiles, per-head and
  // averaged weights, a key padding mask, and the trace's scores (-inf where skipped).
  std::mt19937 rng(13);
  MhaConfig cfg;
  cfg.embed_dim = 96;
  cfg.num_heads = 3;  // hd = 32: the packed path
  std::unique_ptr<MultiheadAttention> mha;
  ASSERT_TRUE(MultiheadAttention::Create(cfg, &mha).ok());
  test::LoadRandomWeights(mha.get(), &rng, 0.2f);
  const int64_t L = 150, N = 2;
  std::vector<float> x = test::RandomVector(&rng, L * N * 96);
  std::vector<uint8_t> kpm(N * L, 0);
  kpm[5] = kpm[L + 70] = kpm[L + 140] = 1;
  const TensorView xv{x.data(), {L, N, 96}, x.size()};
  for (bool average : {false, true}) {
    ForwardOptions opt;
    opt.is_causal = true;
    opt.average_attn_weights = average;
    opt.key_padding_mask = MaskView::Bool(kpm.data(), {N, L}, kpm.size());
    ForwardResult ref;
    ASSERT_TRUE(ReferenceForward(mha->weights(), xv, xv, xv, opt, &ref).ok());
    test::ForEachTarget([&](const char* target) {
      ForwardResult fast;
      ASSERT_TRUE(mha->Forward(xv, xv, xv, opt, &fast).ok());
      ExpectSameResult(fast, ref, 2e-5, target);
    });
  }
  ForwardOptions opt;
  opt.is_causal = true;
  AttentionTrace trace;
  ASSERT_TRUE(mha->Trace(xv, xv, xv, opt, &trace).ok());
  const float* scores = trace.scores.data.data();  // [N, H, L, L]
  for (int64_t b = 0; b < N * 3; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t j = 0; j < L; ++j) {
        const float s = scores[(b * L + i) * L + j];
        if (j > i) {
          ASSERT_EQ(s, -kInf) << "future key " << j << " of query " << i;
        } else {
          ASSERT_TRUE(std::isfinite(s)) << "key " << j << " of query " << i;
        }
      }
    }
  }
}

TEST(FastPathVsReference, NonFiniteInputsPropagateLikeTorch) {
  // NaN in a key poisons that key's score in every query row, so every softmax row is NaN, as in
  // torch. Masking the key does not help there either: torch adds the mask to the scores
  // (baddbmm), and -inf + NaN is NaN. NaN in a value only reaches the outputs through weights x V.
  std::mt19937 rng(11);
  MhaConfig cfg;
  cfg.embed_dim = 8;
  cfg.num_heads = 2;
  std::unique_ptr<MultiheadAttention> mha;
  ASSERT_TRUE(MultiheadAttention::Create(cfg, &mha).ok());
  test::LoadRandomWeights(mha.get(), &rng);
  std::vector<float> q = test::RandomVector(&rng, 3 * 8), k = test::RandomVector(&rng, 4 * 8);
  std::vector<float> v = test::RandomVector(&rng, 4 * 8);
  k[2 * 8 + 5] = std::numeric_limits<float>::quiet_NaN();  // key row 2
  const TensorView qv{q.data(), {3, 8}, q.size()}, kv{k.data(), {4, 8}, k.size()},
      vv{v.data(), {4, 8}, v.size()};
  const uint8_t pad[4] = {0, 0, 1, 0};
  for (bool masked : {false, true}) {
    ForwardOptions opt;
    opt.average_attn_weights = false;
    if (masked) opt.key_padding_mask = MaskView::Bool(pad, {4}, 4);
    ForwardResult fast, ref;
    ASSERT_TRUE(mha->Forward(qv, kv, vv, opt, &fast).ok());
    ASSERT_TRUE(ReferenceForward(mha->weights(), qv, kv, vv, opt, &ref).ok());
    ExpectSameResult(fast, ref, 2e-5, masked ? "NaN key, masked" : "NaN key");
    for (size_t i = 0; i < fast.weights.size(); ++i) EXPECT_TRUE(std::isnan(fast.weights[i]));
    for (size_t i = 0; i < fast.output.size(); ++i) EXPECT_TRUE(std::isnan(fast.output[i]));
  }
  // +inf in a float mask: exp(inf - inf) makes that row NaN (torch.softmax does too); the other
  // rows stay finite.
  std::vector<float> finite_k = test::RandomVector(&rng, 4 * 8);
  const TensorView fk{finite_k.data(), {4, 8}, finite_k.size()};
  std::vector<float> attn(3 * 4, 0.0f);
  attn[1 * 4 + 3] = std::numeric_limits<float>::infinity();
  ForwardOptions opt;
  opt.average_attn_weights = false;
  opt.attn_mask = MaskView::Float(attn.data(), {3, 4}, attn.size());
  ForwardResult fast, ref;
  ASSERT_TRUE(mha->Forward(qv, fk, vv, opt, &fast).ok());
  ASSERT_TRUE(ReferenceForward(mha->weights(), qv, fk, vv, opt, &ref).ok());
  ExpectSameResult(fast, ref, 2e-5, "+inf in attn_mask");
  for (size_t h = 0; h < 2; ++h) {
    for (size_t i = 0; i < 3; ++i) {
      for (size_t j = 0; j < 4; ++j) {
        EXPECT_EQ(std::isnan(fast.weights[(h * 3 + i) * 4 + j]), i == 1) << h << i << j;
      }
    }
  }
}

// A module with the given in_proj_weight and out_proj.weight (and zero biases when cfg.bias).
std::unique_ptr<MultiheadAttention> ModuleWithWeights(const MhaConfig& cfg,
                                                      const std::vector<float>& in_proj,
                                                      const std::vector<float>& out_proj) {
  std::unique_ptr<MultiheadAttention> mha;
  EXPECT_TRUE(MultiheadAttention::Create(cfg, &mha).ok());
  const int64_t E = cfg.embed_dim;
  EXPECT_TRUE(mha->SetParameter("in_proj_weight", {in_proj.data(), {3 * E, E}, in_proj.size()}).ok());
  EXPECT_TRUE(mha->SetParameter("out_proj.weight", {out_proj.data(), {E, E}, out_proj.size()}).ok());
  if (cfg.bias) {
    const std::vector<float> zeros(3 * E, 0.0f);
    EXPECT_TRUE(mha->SetParameter("in_proj_bias", {zeros.data(), {3 * E}, 3 * static_cast<size_t>(E)}).ok());
    EXPECT_TRUE(mha->SetParameter("out_proj.bias", {zeros.data(), {E}, static_cast<size_t>(E)}).ok());
  }
  return mha;
}

TEST(FastPathVsReference, QueriesAreScaledBeforeTheDotProduct) {
  // torch computes (q / sqrt(hd)) k^T: with q = k0 = 7.9e18 everywhere and hd = 16 the score of
  // key 0 is 2.5e38, finite, while q . k0 = 1e39 would overflow to inf (a NaN softmax row). Every
  // path must divide first: the short-row path (S' <= 12), the packed path (more keys, with and
  // without causal key skipping, two query tiles), the reference, and the trace's scores. Key 0
  // then takes all the weight, so each output row is value 0 exactly (identity projections).
  for (int64_t H : {1, 2}) {
    MhaConfig cfg;
    cfg.num_heads = H;
    cfg.embed_dim = 16 * H;
    cfg.bias = false;
    const int64_t E = cfg.embed_dim;
    std::vector<float> in_proj(3 * E * E, 0.0f), out_proj(E * E, 0.0f);
    for (int64_t i = 0; i < 3 * E; ++i) in_proj[i * E + i % E] = 1.0f;
    for (int64_t i = 0; i < E; ++i) out_proj[i * E + i] = 1.0f;
    std::unique_ptr<MultiheadAttention> mha = ModuleWithWeights(cfg, in_proj, out_proj);
    for (int64_t S : {3, 13, 70}) {
      for (bool causal : {false, true}) {
        const int64_t L = causal ? S : 70;
        std::mt19937 rng(static_cast<unsigned>(S * 10 + causal + H));
        const float big = 7.9e18f;
        std::vector<float> q(L * E, big), k = test::RandomVector(&rng, S * E);
        std::vector<float> v = test::RandomVector(&rng, S * E);
        std::fill(k.begin(), k.begin() + E, big);
        const TensorView qv{q.data(), {L, E}, q.size()}, kv{k.data(), {S, E}, k.size()},
            vv{v.data(), {S, E}, v.size()};
        ForwardOptions opt;
        opt.is_causal = causal;
        const std::string what = "H=" + std::to_string(H) + " S=" + std::to_string(S) +
                                 (causal ? " causal" : "");
        test::ForEachTarget([&](const char* target) {
          ForwardResult fast;
          ASSERT_TRUE(mha->Forward(qv, kv, vv, opt, &fast).ok());
          int64_t wrong = 0;
          for (int64_t i = 0; i < L * E; ++i) wrong += fast.output[i] != v[i % E];
          EXPECT_EQ(wrong, 0) << what << " " << target << ": output[0] = " << fast.output[0];
        });
        ForwardResult ref;
        ASSERT_TRUE(ReferenceForward(mha->weights(), qv, kv, vv, opt, &ref).ok());
        int64_t wrong = 0;
        for (int64_t i = 0; i < L * E; ++i) wrong += ref.output[i] != v[i % E];
        EXPECT_EQ(wrong, 0) << what << " reference: output[0] = " << ref.output[0];
        AttentionTrace t;
        ASSERT_TRUE(mha->Trace(qv, kv, vv, opt, &t).ok());
        for (int64_t r = 0; r < H * L; ++r) {  // [H, L, S]: key 0's score is 16 big^2 / 4
          EXPECT_FLOAT_EQ(t.scores.data[r * S], 16.0f * (big / 4.0f) * big) << what << " row " << r;
        }
        EXPECT_EQ(t.q.data[0], big) << what << ": the trace's q is the projection, unscaled";
      }
    }
  }
}

TEST(FastPathVsReference, SubnormalWeightsReachTheOutputOnEveryTarget) {
  // E=1, all weights 1: the scores are the keys. torch.softmax([0, -90]) keeps e^-90 = 8.2e-40 (a
  // float subnormal), so a value of 3e38 adds 0.2458 and a value of inf makes the output inf (a
  // weight of 0 would make it NaN). Short rows (2 keys) and packed ones (20 keys, the rest at
  // -200, where exp is 0).
  MhaConfig cfg;
  cfg.embed_dim = 1;
  cfg.num_heads = 1;
  std::unique_ptr<MultiheadAttention> mha =
      ModuleWithWeights(cfg, std::vector<float>(3, 1.0f), std::vector<float>(1, 1.0f));
  const float q[1] = {1.0f};
  for (int64_t S : {2, 20}) {
    for (float big : {3e38f, std::numeric_limits<float>::infinity()}) {
      std::vector<float> k(S, -200.0f), v(S, 1.0f);
      k[0] = 0.0f;
      k[S - 1] = -90.0f;
      v[S - 1] = big;
      const TensorView qv{q, {1, 1}, 1}, kv{k.data(), {S, 1}, k.size()}, vv{v.data(), {S, 1}, v.size()};
      const float want = big == 3e38f ? 1.2458204f : big;  // torch 1.13, float32
      const std::string what = "S=" + std::to_string(S) + " value " + std::to_string(big);
      ForwardOptions opt;
      ForwardResult ref;
      ASSERT_TRUE(ReferenceForward(mha->weights(), qv, kv, vv, opt, &ref).ok());
      EXPECT_FLOAT_EQ(ref.output[0], want) << what << " reference";
      EXPECT_GT(ref.weights[S - 1], 0.0f) << what << " reference";
      test::ForEachTarget([&](const char* target) {
        ForwardResult fast;
        ASSERT_TRUE(mha->Forward(qv, kv, vv, opt, &fast).ok());
        EXPECT_FLOAT_EQ(fast.output[0], want) << what << " " << target;
        EXPECT_FLOAT_EQ(fast.weights[S - 1], std::exp(-90.0f)) << what << " " << target;
      });
    }
  }
}

TEST(FastPath, ReusedModuleMatchesFreshAcrossShapes) {
  // The workspace is sized per call and reused: alternating shapes must not leak state.
  std::mt19937 rng(5);
  std::vector<RandomCall> calls(30);
  for (auto& c : calls) Draw(rng, &c);
  RandomCall& shared = calls[0];
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < calls.size(); ++i) {
      // Run call i's inputs through a module with shared's config only if compatible; else its own.
      RandomCall& c = calls[i];
      ForwardResult first, again;
      ASSERT_TRUE(c.mha->Forward(c.q(), c.k(), c.v(), c.options, &first).ok());
      ASSERT_TRUE(shared.mha->Forward(shared.q(), shared.k(), shared.v(), shared.options, &again)
                      .ok());
      ForwardResult second;
      ASSERT_TRUE(c.mha->Forward(c.q(), c.k(), c.v(), c.options, &second).ok());
      ExpectSameResult(second, first, 0.0, c.description);
    }
  }
}

TEST(FastPath, NoAllocationPerCallOnceWarm) {
  std::mt19937 rng(9);
  MhaConfig cfg;
  cfg.embed_dim = 32;
  cfg.num_heads = 4;
  std::unique_ptr<MultiheadAttention> mha;
  ASSERT_TRUE(MultiheadAttention::Create(cfg, &mha).ok());
  test::LoadRandomWeights(mha.get(), &rng);
  std::vector<float> x = test::RandomVector(&rng, 2 * 10 * 32);
  const TensorView xv{x.data(), {10, 2, 32}, x.size()};
  ForwardOptions opt;
  ForwardResult result;
  ASSERT_TRUE(mha->Forward(xv, xv, xv, opt, &result).ok());  // warm-up sizes the buffers
  const float* out = result.output.data();
  const float* weights = result.weights.data();
  const size_t workspace = mha->workspace_bytes();
  const size_t news_before = g_news.load();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(mha->Forward(xv, xv, xv, opt, &result).ok());
  EXPECT_EQ(g_news.load(), news_before) << "operator new called during warm Forward calls";
  EXPECT_EQ(result.output.data(), out);
  EXPECT_EQ(result.weights.data(), weights);
  EXPECT_EQ(mha->workspace_bytes(), workspace);
}

// ---- Per-head gates (ForwardOptions::head_gates) ----

// Gates drawn after a RandomCall (Draw's stream stays as it was): 0, 0.5, 1, -1, inf, NaN or a
// random value per head.
std::vector<float> DrawGates(std::mt19937& rng, size_t heads) {
  const float special[] = {0.0f, 0.5f, 1.0f, -1.0f, kInf, std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> gates(heads);
  for (float& g : gates) {
    g = std::bernoulli_distribution(0.5)(rng)
            ? special[std::uniform_int_distribution<int>(0, 5)(rng)]
            : std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
  }
  return gates;
}

TEST(HeadGates, FastPathMatchesReferenceAndLeavesWeightsAlone) {
  std::mt19937 rng(2027);
  for (int iteration = 0; iteration < 300; ++iteration) {
    RandomCall c;
    Draw(rng, &c);
    const std::vector<float> gates = DrawGates(rng, static_cast<size_t>(c.config.num_heads));
    SCOPED_TRACE("iteration " + std::to_string(iteration) + ": " + c.description);
    ForwardResult ungated;
    ASSERT_TRUE(c.mha->Forward(c.q(), c.k(), c.v(), c.options, &ungated).ok());
    c.options.head_gates = {gates.data(), {c.config.num_heads}, gates.size()};
    ForwardResult fast;
    ASSERT_NO_FATAL_FAILURE(ExpectFastMatchesReference(c, &fast));
    // Gates scale the heads' outputs, never the attention weights.
    ASSERT_EQ(fast.weights.size(), ungated.weights.size());
    if (fast.has_weights() && fast.weights.size() > 0) {
      EXPECT_EQ(std::memcmp(fast.weights.data(), ungated.weights.data(),
                            fast.weights.size() * sizeof(float)), 0);
    }
  }
}

TEST(HeadGates, OnesAreBitIdenticalToNoGates) {
  std::mt19937 rng(2028);
  for (int iteration = 0; iteration < 100; ++iteration) {
    RandomCall c;
    Draw(rng, &c);
    SCOPED_TRACE(c.description);
    ForwardResult ungated, gated;
    ASSERT_TRUE(c.mha->Forward(c.q(), c.k(), c.v(), c.options, &ungated).ok());
    const std::vector<float> ones(static_cast<size_t>(c.config.num_heads), 1.0f);
    c.options.head_gates = {ones.data(), {c.config.num_heads}, ones.size()};
    ASSERT_TRUE(c.mha->Forward(c.q(), c.k(), c.v(), c.options, &gated).ok());
    ASSERT_EQ(gated.output.size(), ungated.output.size());
    if (gated.output.size() > 0) {
      EXPECT_EQ(std::memcmp(gated.output.data(), ungated.output.data(),
                            gated.output.size() * sizeof(float)), 0);
    }
  }
}

// What the gate means: 0 is head h's columns of out_proj.weight zeroed, 0.5 those columns
// halved, in one module instead of a weight-edited second one. On the small-head path, the packed
// path (hd 24, 40 keys) and, in the threaded build, threads (a call big enough to use them).
TEST(HeadGates, EqualScalingTheHeadsColumnsOfOutProj) {
  struct Case { int64_t heads, hd, L, S, N; };
  for (const Case& k : {Case{2, 2, 3, 3, 1}, Case{3, 24, 9, 40, 2}, Case{4, 32, 70, 70, 2}}) {
    for (float gate : {0.0f, 0.5f}) {
      for (int64_t head = 0; head < k.heads; ++head) {
        SCOPED_TRACE("H=" + std::to_string(k.heads) + " hd=" + std::to_string(k.hd) + " gate " +
                     std::to_string(gate) + " on head " + std::to_string(head));
        std::mt19937 rng(31);
        MhaConfig cfg;
        cfg.num_heads = k.heads;
        cfg.embed_dim = k.heads * k.hd;
        const int64_t E = cfg.embed_dim;
        std::unique_ptr<MultiheadAttention> gated, edited;
        ASSERT_TRUE(MultiheadAttention::Create(cfg, &gated).ok());
        ASSERT_TRUE(MultiheadAttention::Create(cfg, &edited).ok());
        std::mt19937 rng_copy = rng;
        test::LoadRandomWeights(gated.get(), &rng);
        test::LoadRandomWeights(edited.get(), &rng_copy);
        std::vector<float> wo(gated->weights().out_weight(),
                              gated->weights().out_weight() + E * E);
        for (int64_t row = 0; row < E; ++row) {
          for (int64_t col = head * k.hd; col < (head + 1) * k.hd; ++col) wo[row * E + col] *= gate;
        }
        ASSERT_TRUE(edited->SetParameter("out_proj.weight", {wo.data(), {E, E}, wo.size()}).ok());
        const std::vector<float> x = test::RandomVector(&rng, k.L * k.N * E);
        const std::vector<float> y = test::RandomVector(&rng, k.S * k.N * E);
        const TensorView q{x.data(), {k.L, k.N, E}, x.size()}, kv{y.data(), {k.S, k.N, E}, y.size()};
        std::vector<float> gates(k.heads, 1.0f);
        gates[head] = gate;
        ForwardOptions opt;
        ForwardResult want, got;
        ASSERT_TRUE(edited->Forward(q, kv, kv, opt, &want).ok());
        opt.head_gates = {gates.data(), {k.heads}, gates.size()};
        ASSERT_TRUE(gated->Forward(q, kv, kv, opt, &got).ok());
        ExpectSameResult(got, want, 1e-6, "gated vs edited out_proj");
      }
    }
  }
}

// The trace shows what out_proj sees: head_outputs and concat are gated, scores and weights not.
TEST(HeadGates, TraceHoldsGatedHeadOutputs) {
  std::mt19937 rng(2029);
  for (int iteration = 0; iteration < 40; ++iteration) {
    RandomCall c;
    Draw(rng, &c);
    SCOPED_TRACE(c.description);
    const size_t H = static_cast<size_t>(c.config.num_heads);
    const std::vector<float> gates = DrawGates(rng, H);
    AttentionTrace plain, gated;
    ASSERT_TRUE(c.mha->Trace(c.q(), c.k(), c.v(), c.options, &plain).ok());
    c.options.head_gates = {gates.data(), {c.config.num_heads}, gates.size()};
    ASSERT_TRUE(c.mha->Trace(c.q(), c.k(), c.v(), c.options, &gated).ok());
    ForwardResult f;
    ForwardOptions per_head = c.options;
    per_head.need_weights = true;
    per_head.average_attn_weights = false;
    ASSERT_TRUE(c.mha->Forward(c.q(), c.k(), c.v(), per_head, &f).ok());
    EXPECT_EQ(test::RelativeError(gated.output.data.data(), f.output.data(), f.output.size()), 0.0);
    EXPECT_EQ(test::RelativeError(gated.weights.data.data(), plain.weights.data.data(),
                                  plain.weights.data.size()), 0.0);
    EXPECT_EQ(test::RelativeError(gated.scores.data.data(), plain.scores.data.data(),
                                  plain.scores.data.size()), 0.0);
    const Shape& shape = plain.head_outputs.shape;  // [N,] H, L, hd
    const size_t per_head_floats =
        static_cast<size_t>(shape[shape.rank - 2] * shape[shape.rank - 1]);
    for (size_t x = 0; x < plain.head_outputs.data.size(); ++x) {
      const size_t h = (x / per_head_floats) % H;  // the head element x belongs to
      const float want = plain.head_outputs.data[x] * gates[h];
      const float got = gated.head_outputs.data[x];
      EXPECT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << x;
    }
  }
}

// Head statistics (ForwardOptions::head_stats) from their definitions in float64 over the
// returned per-head weights: (N*H) values each; fully masked rows (all 0) are left out, NaN with
// no row left. `S` is the keys with a position (the extra keys add no distance).
struct Float64Stats {
  std::vector<double> entropy, distance, max_weight;
};
Float64Stats StatsOfWeights(const float* w, size_t NH, size_t L, size_t Sp, size_t S) {
  Float64Stats r;
  for (size_t nh = 0; nh < NH; ++nh) {
    double e = 0, d = 0, m = 0;
    size_t rows = 0;
    for (size_t i = 0; i < L; ++i) {
      const float* row = w + (nh * L + i) * Sp;
      bool zero = true;
      for (size_t j = 0; j < Sp; ++j) zero = zero && row[j] == 0.0f;
      if (zero) continue;
      double re = 0, rd = 0, rm = 0;
      for (size_t j = 0; j < Sp; ++j) {
        const double x = row[j];
        if (x > 0 || std::isnan(x)) re -= x * std::log(x);
        if (j < S || std::isnan(x)) rd += x * std::fabs(double(i) - double(j));
        rm = std::isnan(x) || std::isnan(rm) ? std::nan("") : std::max(rm, x);
      }
      e += re;
      d += rd;
      m += rm;
      ++rows;
    }
    const double nan = std::nan("");
    r.entropy.push_back(rows ? e / rows : nan);
    r.distance.push_back(rows ? d / rows : nan);
    r.max_weight.push_back(rows ? m / rows : nan);
  }
  return r;
}

void ExpectStatsNear(const HeadStats& got, const Float64Stats& want, double rel,
                     const std::string& what, double abs = 1e-30) {
  ASSERT_EQ(got.entropy.size(), want.entropy.size()) << what;
  const std::pair<const AlignedBuffer*, const std::vector<double>*> pairs[] = {
      {&got.entropy, &want.entropy}, {&got.distance, &want.distance},
      {&got.max_weight, &want.max_weight}};
  const char* names[] = {"entropy", "distance", "max_weight"};
  for (int k = 0; k < 3; ++k) {
    for (size_t i = 0; i < want.entropy.size(); ++i) {
      const double g = pairs[k].first->data()[i], w = (*pairs[k].second)[i];
      if (std::isnan(w)) {
        EXPECT_TRUE(std::isnan(g)) << what << " " << names[k] << "[" << i << "]";
      } else {
        EXPECT_LE(std::fabs(g - w), rel * std::fabs(w) + abs)
            << what << " " << names[k] << "[" << i << "] " << g << " vs " << w;
      }
    }
  }
}

// Float32 results as doubles, for comparing one engine's statistics with another's.
Float64Stats AsDoubles(const HeadStats& s) {
  Float64Stats r;
  for (size_t i = 0; i < s.entropy.size(); ++i) {
    r.entropy.push_back(s.entropy.data()[i]);
    r.distance.push_back(s.distance.data()[i]);
    r.max_weight.push_back(s.max_weight.data()[i]);
  }
  return r;
}

TEST(HeadStatistics, MatchFloat64OverTheWeightsOnEveryPathAndOption) {
  std::mt19937 rng(2030);
  for (int iteration = 0; iteration < 300; ++iteration) {
    RandomCall c;
    Draw(rng, &c);
    SCOPED_TRACE(c.description);
    const bool need_weights = c.options.need_weights;
    c.options.head_stats = true;
    ForwardResult stats_only;
    ASSERT_NO_FATAL_FAILURE(ExpectFastMatchesReference(c, &stats_only));
    const bool batched = c.q_shape.rank == 3;
    const int64_t N = batched ? c.q_shape[c.config.batch_first ? 0 : 1] : 1;
    const int64_t H = c.config.num_heads;
    ASSERT_EQ(stats_only.head_stats.shape, batched ? Shape({N, H}) : Shape({H}));

    // The same call with per-head weights: the statistics are those weights' statistics.
    c.options.need_weights = true;
    c.options.average_attn_weights = false;
    ForwardResult with_weights;
    ASSERT_TRUE(c.mha->Forward(c.q(), c.k(), c.v(), c.options, &with_weights).ok());
    const Shape& ws = with_weights.weights_shape;
    const size_t L = static_cast<size_t>(ws[ws.rank - 2]), Sp = static_cast<size_t>(ws[ws.rank - 1]);
    const size_t S = Sp - c.config.add_bias_kv - c.config.add_zero_attn;
    const Float64Stats want =
        StatsOfWeights(with_weights.weights.data(), static_cast<size_t>(N * H), L, Sp, S);
    ExpectStatsNear(with_weights.head_stats, want, 1e-6, "per-head weights call");
    // Asking for weights (or not, or averaged) changes nothing in the statistics.
    ExpectStatsNear(stats_only.head_stats, AsDoubles(with_weights.head_stats), 0.0,
                    need_weights ? "weights call vs drawn call" : "need_weights=false call");
    // The Eigen reference's float64 statistics over its own weights.
    ForwardResult ref;
    ASSERT_TRUE(ReferenceForward(c.mha->weights(), c.q(), c.k(), c.v(), c.options, &ref).ok());
    // (Another engine's weights differ by float rounding: a near-one-hot row's entropy, near 0,
    // differs by a large fraction of itself, hence an absolute floor too.)
    ExpectStatsNear(with_weights.head_stats, AsDoubles(ref.head_stats), 1e-4, "vs reference",
                    1e-5);
    // The trace computes the same statistics.
    AttentionTrace t;
    ASSERT_TRUE(c.mha->Trace(c.q(), c.k(), c.v(), c.options, &t).ok());
    ExpectStatsNear(t.head_stats, AsDoubles(with_weights.head_stats), 0.0, "trace");
    // Without head_stats there are none.
    c.options.head_stats = false;
    ForwardResult none;
    ASSERT_TRUE(c.mha->Forward(c.q(), c.k(), c.v(), c.options, &none).ok());
    EXPECT_FALSE(none.head_stats.present());
    EXPECT_EQ(none.head_stats.entropy.size(), 0u);
  }
}

// Known values: one-hot heads have entropy 0 and max weight 1; a uniform head over S keys has
// entropy ln S, max weight 1/S and, for query i, distance sum_j |i - j| / S.
TEST(HeadStatistics, OneHotAndUniformHeads) {
  MhaConfig cfg;
  cfg.embed_dim = 2;
  cfg.num_heads = 2;
  cfg.bias = false;
  std::unique_ptr<MultiheadAttention> mha;
  ASSERT_TRUE(MultiheadAttention::Create(cfg, &mha).ok());
  // Head 0 (column 0): q = 30 x0, k = x0, so scores are 90 x0_i x0_j (hd = 1): query 0 (x0 = 3)
  // and query 1 (x0 = -3) put all their weight on their own key (exp(-540) is 0 in float),
  // query 2 (x0 = 0) sees three equal scores. Head 1 (column 1): q = 0, uniform for every query.
  const float in_proj[] = {30, 0, 0, 0, /*k*/ 1, 0, 0, 1, /*v*/ 1, 0, 0, 1};
  const float out_proj[] = {1, 0, 0, 1};
  ASSERT_TRUE(mha->SetParameter("in_proj_weight", {in_proj, {6, 2}, 12}).ok());
  ASSERT_TRUE(mha->SetParameter("out_proj.weight", {out_proj, {2, 2}, 4}).ok());
  const float x[] = {3, 0, -3, 0, 0, 0};  // L = S = 3
  ForwardOptions opt;
  opt.head_stats = true;
  opt.need_weights = false;
  ForwardResult r;
  ASSERT_TRUE(mha->Forward({x, {3, 2}, 6}, {x, {3, 2}, 6}, {x, {3, 2}, 6}, opt, &r).ok());
  ASSERT_EQ(r.head_stats.shape, Shape({2}));
  const double ln3 = std::log(3.0);
  // Head 0: max weights 1, 1, 1/3; entropies 0, 0, ln 3; distances 0, 0, (2 + 1 + 0) / 3.
  EXPECT_NEAR(r.head_stats.max_weight.data()[0], 7.0 / 9.0, 1e-7);
  EXPECT_NEAR(r.head_stats.entropy.data()[0], ln3 / 3.0, 1e-7);
  EXPECT_NEAR(r.head_stats.distance.data()[0], 1.0 / 3.0, 1e-7);
  // Head 1: uniform; distances (0+1+2)/3, (1+0+1)/3, (2+1+0)/3 -> mean 8/9.
  EXPECT_EQ(r.head_stats.max_weight.data()[1], 1.0f / 3.0f);
  EXPECT_NEAR(r.head_stats.entropy.data()[1], ln3, 1e-6);
  EXPECT_NEAR(r.head_stats.distance.data()[1], 8.0 / 9.0, 1e-6);

  // A fully masked query row is left out of the means; all rows masked gives NaN.
  const uint8_t kpm_all[] = {1, 1, 1};
  opt.key_padding_mask = MaskView::Bool(kpm_all, {3}, 3);
  ASSERT_TRUE(mha->Forward({x, {3, 2}, 6}, {x, {3, 2}, 6}, {x, {3, 2}, 6}, opt, &r).ok());
  for (int h = 0; h < 2; ++h) {
    EXPECT_TRUE(std::isnan(r.head_stats.entropy.data()[h]));
    EXPECT_TRUE(std::isnan(r.head_stats.distance.data()[h]));
    EXPECT_TRUE(std::isnan(r.head_stats.max_weight.data()[h]));
  }
  const uint8_t row_masked[] = {0, 0, 0, /*query 1 sees nothing*/ 1, 1, 1, 0, 0, 0};
  opt.key_padding_mask = {};
  opt.attn_mask = MaskView::Bool(row_masked, {3, 3}, 9);
  ASSERT_TRUE(mha->Forward({x, {3, 2}, 6}, {x, {3, 2}, 6}, {x, {3, 2}, 6}, opt, &r).ok());
  // Uniform head over queries 0 and 2 only: distances 1 and 1 -> 1.
  EXPECT_NEAR(r.head_stats.distance.data()[1], 1.0, 1e-6);
  EXPECT_NEAR(r.head_stats.entropy.data()[1], std::log(3.0), 1e-6);
}

// Recomputes each stage of a trace from the previous one with plain loops.
TEST(Trace, StagesRecombineToTheOutput) {
  std::mt19937 rng(13);
  for (int iteration = 0; iteration < 60; ++iteration) {
    RandomCall c;
    Draw(rng, &c);
    SCOPED_TRACE(c.description);
    AttentionTrace t;
    Status s = c.mha->Trace(c.q(), c.k(), c.v(), c.options, &t);
    ASSERT_TRUE(s.ok()) << s.ToString();

    // The trace's output and weights are Forward's (per head).
    ForwardOptions per_head = c.options;
    per_head.need_weights = true;
    per_head.average_attn_weights = false;
    ForwardResult f;
    ASSERT_TRUE(c.mha->Forward(c.q(), c.k(), c.v(), per_head, &f).ok());
    ASSERT_EQ(t.output.shape, f.output_shape);
    ASSERT_EQ(t.weights.shape, f.weights_shape);
    EXPECT_EQ(test::RelativeError(t.output.data.data(), f.output.data(), f.output.size()), 0.0);
    EXPECT_EQ(test::RelativeError(t.weights.data.data(), f.weights.data(), f.weights.size()), 0.0);

    const MhaConfig& cfg = c.config;
    const bool batched = c.q_shape.rank == 3;
    const size_t N = batched ? static_cast<size_t>(c.q_shape[cfg.batch_first ? 0 : 1]) : 1;
    const size_t H = cfg.num_heads, hd = cfg.head_dim(), E = cfg.embed_dim;
    const size_t L = static_cast<size_t>(c.q_shape[batched && cfg.batch_first ? 1 : 0]);
    const size_t Sp = static_cast<size_t>(t.scores.shape[t.scores.shape.rank - 1]);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const float* wq = c.mha->weights().q_weight();
    const float* bq = c.mha->weights().q_bias();
    for (size_t n = 0; n < N; ++n) {
      for (size_t h = 0; h < H; ++h) {
        for (size_t i = 0; i < L; ++i) {
          const size_t row = (n * H + h) * L + i;
          // q = x Wq^T + bq, head h's columns.
          const size_t x_row = !batched ? i * E : cfg.batch_first ? (n * L + i) * E : (i * N + n) * E;
          for (size_t d = 0; d < hd; ++d) {
            double want = bq ? bq[h * hd + d] : 0.0;
            for (size_t e = 0; e < E; ++e) want += c.query[x_row + e] * wq[(h * hd + d) * E + e];
            EXPECT_NEAR(t.q.data[row * hd + d], want, 1e-4);
          }
          // scores (unmasked entries) = q . k * scale; weights = softmax(scores).
          double max = -kInf, sum = 0;
          for (size_t j = 0; j < Sp; ++j) max = std::max<double>(max, t.scores.data[row * Sp + j]);
          for (size_t j = 0; j < Sp; ++j) {
            const float sc = t.scores.data[row * Sp + j];
            if (sc == -kInf) continue;
            double dot = 0;
            for (size_t d = 0; d < hd; ++d) {
              dot += t.q.data[row * hd + d] * t.k.data[((n * H + h) * Sp + j) * hd + d];
            }
            if (!c.options.attn_mask.present() && !c.options.key_padding_mask.present()) {
              EXPECT_NEAR(sc, dot * scale, 1e-4);
            }
            sum += std::exp(sc - max);
          }
          for (size_t j = 0; j < Sp; ++j) {
            const double want = max == -kInf ? 0.0 : std::exp(t.scores.data[row * Sp + j] - max) / sum;
            EXPECT_NEAR(t.weights.data[row * Sp + j], want, 1e-5);
          }
          // head output = weights x V; and it sits in the concatenation at columns h*hd.
          for (size_t d = 0; d < hd; ++d) {
            double want = 0;
            for (size_t j = 0; j < Sp; ++j) {
              want += t.weights.data[row * Sp + j] * t.v.data[((n * H + h) * Sp + j) * hd + d];
            }
            EXPECT_NEAR(t.head_outputs.data[row * hd + d], want, 1e-4);
            EXPECT_EQ(t.concat.data[(n * L + i) * E + h * hd + d], t.head_outputs.data[row * hd + d]);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace headscope
