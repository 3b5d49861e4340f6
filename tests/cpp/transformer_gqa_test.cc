// Grouped-query and multi-query attention in the Transformer (TransformerConfig::n_kv_heads = G):
// each layer's attention reads G K/V heads, in_proj_weight [(H + 2 G) dh, D]. The goldens
// (tests/golden/transformer/*-kv*, tests/golden/train/*-kv*) hold the numbers against PyTorch;
// here what they cannot show: the state_dict and the seeded weights; a grouped model computes
// what the plain model (G = H) computes when its K/V rows are the grouped ones repeated per head,
// bit for bit (logits, every hook, generation), and its gradients are that twin's with each K/V
// head's summed over its group; the KV cache holds H / G times fewer bytes (measured); and the
// gradients match the float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "headscope/reference_transformer.h"
#include "headscope/transformer.h"
#include "test_util.h"

namespace headscope {
namespace {

using test::EntryValues;
using test::MakeTransformer;

constexpr int64_t B = 2, T = 7;
const int32_t kTokens[B * T] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
const int32_t kTargets[B * T] = {1, 4, 1, 5, 9, 2, -100, 5, 3, 5, 8, 9, 7, -100};
const TokenView kBatch{kTokens, B, T};

// Vocabulary 11, max_len 12, d_model 16, 2 layers of 4 heads (dim 4), G K/V heads (0: null).
TransformerConfig Config(int64_t kv_heads, NormPlacement norm = NormPlacement::kPre,
                         int64_t d_mlp = 16) {
  TransformerConfig c;
  std::tie(c.vocab_size, c.max_len, c.d_model, c.n_layers, c.n_heads, c.d_mlp) =
      std::make_tuple(11, 12, 16, 2, 4, d_mlp);
  c.n_kv_heads = kv_heads;
  c.norm = norm;
  return c;
}

bool SameBits(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && SameBits(a.data(), b.data(), a.size());
}

// Which row of the grouped in_proj (or its bias) the twin's row r is: q rows as they are, the
// twin's K (V) row of head h, offset i, is K (V) head h / group's row i.
int64_t GroupedRow(const TransformerConfig& c, int64_t r) {
  const int64_t D = c.d_model, H = c.n_heads, dh = D / H, G = c.n_kv_heads, group = H / G;
  if (r < D) return r;
  const int64_t part = (r - D) / D, in = (r - D) % D;  // 0: K, 1: V
  return D + part * G * dh + (in / dh / group) * dh + in % dh;
}

// The plain model (n_kv_heads null) whose every entry is `gqa`'s, the attention's K/V rows
// repeated per head.
std::unique_ptr<Transformer> RepeatedTwin(const Transformer& gqa) {
  TransformerConfig tc = gqa.config();
  tc.n_kv_heads = 0;
  std::unique_ptr<Transformer> twin = MakeTransformer(tc, 0);
  const int64_t D = tc.d_model;
  for (const TransformerParamSpec& p : TransformerParams(tc)) {
    std::vector<float> v = EntryValues(gqa, p.name);
    const bool in_w = p.name.find("attn.in_proj_weight") != std::string::npos;
    const bool in_b = p.name.find("attn.in_proj_bias") != std::string::npos;
    if (in_w || in_b) {
      const int64_t cols = in_w ? D : 1;
      std::vector<float> r(static_cast<size_t>(3 * D * cols));
      for (int64_t row = 0; row < 3 * D; ++row) {
        std::memcpy(r.data() + row * cols, v.data() + GroupedRow(gqa.config(), row) * cols,
                    static_cast<size_t>(cols) * sizeof(float));
      }
      v = r;
    }
    const Status s = twin->SetParameter(p.name, {v.data(), p.shape, v.size()});
    EXPECT_TRUE(s.ok()) << p.name << ": " << s.ToString();
  }
  return twin;
}

TEST(TransformerGroupedQuery, StateDictAndConfigRules) {
  const TransformerConfig c = Config(2);  // D 16, H 4, dh 4: Dkv 8
  EXPECT_EQ(KvDim(c), 8);
  EXPECT_EQ(KvDim(Config(0)), 16);
  EXPECT_EQ(KvDim(Config(1)), 4);
  int seen = 0;
  for (const TransformerParamSpec& p : TransformerParams(c)) {
    if (p.name == "blocks.0.attn.in_proj_weight") {
      EXPECT_EQ(p.shape, (Shape{32, 16}));  // 16 + 2 * 8 rows
      ++seen;
    }
    if (p.name == "blocks.1.attn.in_proj_bias") {
      EXPECT_EQ(p.shape, (Shape{32}));
      ++seen;
    }
    if (p.name == "blocks.0.attn.out_proj.weight") {
      EXPECT_EQ(p.shape, (Shape{16, 16}));
      ++seen;
    }
  }
  EXPECT_EQ(seen, 3);
  // The q/k/v_proj_weight aliases of in_proj_weight: 16, 8 and 8 rows.
  std::unique_ptr<Transformer> m = MakeTransformer(c, 1);
  TensorView k;
  ASSERT_TRUE(m->GetParameter("blocks.0.attn.k_proj_weight", &k).ok());
  EXPECT_EQ(k.shape, (Shape{8, 16}));
  EXPECT_TRUE(SameBits(k.data, EntryValues(*m, "blocks.0.attn.in_proj_weight").data() + 16 * 16, 128));

  TransformerConfig bad = Config(3);
  const Status s = ValidateTransformerConfig(bad);
  EXPECT_EQ(s.argument(), Arg::kNKvHeads);
  EXPECT_NE(s.message().find("n_heads (4) must be divisible by n_kv_heads (3)"), std::string::npos)
      << s.message();
  bad.n_kv_heads = 8;
  EXPECT_FALSE(ValidateTransformerConfig(bad).ok());
  std::unique_ptr<Transformer> none;
  EXPECT_FALSE(Transformer::Create(bad, &none).ok());
}

// Seeds: in_proj_weight is xavier_uniform_ of its [D + 2 Dkv, D] shape (bound sqrt(6 / (2 D +
// 2 Dkv))); the other entries are the plain model's bits (a pure function of seed, key and index).
TEST(TransformerGroupedQuery, SeededWeights) {
  std::unique_ptr<Transformer> g = MakeTransformer(Config(1), 21);
  std::unique_ptr<Transformer> plain = MakeTransformer(Config(0), 21);
  const double bound = std::sqrt(6.0 / (2.0 * 16 + 2.0 * 4));
  for (const TransformerParamSpec& p : TransformerParams(g->config())) {
    const std::vector<float> v = EntryValues(*g, p.name);
    if (p.name.find("in_proj_weight") != std::string::npos) {
      float top = 0;
      for (float x : v) top = std::max(top, std::fabs(x));
      EXPECT_LE(top, bound) << p.name;
      EXPECT_GT(top, 0.95 * bound) << p.name;
      continue;
    }
    if (p.name.find("in_proj_bias") != std::string::npos) {  // 0, as torch's, [D + 2 Dkv]
      EXPECT_EQ(v, std::vector<float>(24, 0.0f)) << p.name;
      continue;
    }
    EXPECT_TRUE(SameBits(v, EntryValues(*plain, p.name))) << p.name;
  }
}

// Logits and every hook are the repeated twin's bits; hook_k / hook_v hold the G K/V heads, the
// twin's heads g * (H / G).
TEST(TransformerGroupedQuery, ForwardIsTheRepeatedKvModelBitForBit) {
  for (const int64_t G : {1, 2}) {
    for (const NormPlacement norm : {NormPlacement::kPre, NormPlacement::kPost}) {
      SCOPED_TRACE("G=" + std::to_string(G) + " norm " + std::to_string(static_cast<int>(norm)));
      std::unique_ptr<Transformer> g = MakeTransformer(Config(G, norm), 5 + G);
      std::unique_ptr<Transformer> twin = RepeatedTwin(*g);
      TransformerOptions o;
      o.hooks = TransformerHookNames(g->config());
      const std::vector<float> gates = {1.0f, 0.0f, 0.5f, 2.0f, 1.0f, 1.0f, -1.0f, 1.0f};
      o.head_gates = {gates.data(), {2, 4}, gates.size()};
      TransformerResult a, b;
      ASSERT_TRUE(g->Forward(kBatch, o, &a).ok());
      ASSERT_TRUE(twin->Forward(kBatch, o, &b).ok());
      EXPECT_TRUE(SameBits(a.logits.data(), b.logits.data(), a.logits.size()));
      ASSERT_EQ(a.hooks.size(), b.hooks.size());
      const int64_t H = 4, dh = 4, group = 4 / G;
      for (size_t i = 0; i < a.hooks.size(); ++i) {
        const std::string& name = a.hooks[i].first;
        const TraceTensor& x = a.hooks[i].second;
        const TraceTensor& y = b.hooks[i].second;
        const bool kv = name.size() > 7 && (name.substr(name.size() - 7) == ".hook_k" ||
                                            name.substr(name.size() - 7) == ".hook_v");
        if (!kv) {
          EXPECT_EQ(x.shape, y.shape) << name;
          EXPECT_TRUE(SameBits(x.data.data(), y.data.data(),
                               static_cast<size_t>(y.shape.NumElements())))
              << name;
          continue;
        }
        EXPECT_EQ(x.shape, (Shape{B, G, T, dh})) << name;
        for (int64_t n = 0; n < B; ++n) {
          for (int64_t kvh = 0; kvh < G; ++kvh) {
            EXPECT_TRUE(SameBits(x.data.data() + (n * G + kvh) * T * dh,
                                 y.data.data() + (n * H + kvh * group) * T * dh,
                                 static_cast<size_t>(T * dh)))
                << name << " K/V head " << kvh;
          }
        }
      }
    }
  }
}

// Generation: the steps' logits are the full recomputation's and the twin's, and the caches hold
// H / G times fewer bytes: 2 layers x 2 (K and V) x B x (T + n) x G dh floats.
TEST(TransformerGroupedQuery, GenerationAndTheKvCachesBytes) {
  const int64_t n = 4, W = T + n;
  size_t plain_bytes = 0;
  for (const int64_t G : {0, 4, 2, 1}) {
    SCOPED_TRACE("G=" + std::to_string(G));
    std::unique_ptr<Transformer> m = MakeTransformer(Config(G), 31);
    GenerateOptions o;
    o.max_new_tokens = n;
    o.keep_logits = true;
    GenerateResult g;
    ASSERT_TRUE(m->Generate(kBatch, o, &g).ok());
    const size_t bytes = m->kv_cache_bytes();
    const int64_t kv = (G == 0 ? 4 : G) * 4;
    EXPECT_EQ(bytes, static_cast<size_t>(2 * 2 * B * W * kv) * sizeof(float));
    uint64_t predicted = 1;  // the size computed from the config alone is the measured one
    ASSERT_TRUE(KvCacheBytesFor(Config(G), B, W, &predicted).ok());
    EXPECT_EQ(predicted, static_cast<uint64_t>(bytes));
    if (G == 0) plain_bytes = bytes;
    if (G > 0) {
      EXPECT_EQ(bytes * static_cast<size_t>(4 / G), plain_bytes);
    }
    for (int64_t s = 0; s < n; ++s) {
      TransformerResult r;
      std::vector<int32_t> prefix;
      for (int64_t b = 0; b < B; ++b) {
        prefix.insert(prefix.end(), g.tokens.begin() + b * W, g.tokens.begin() + b * W + T + s);
      }
      ASSERT_TRUE(m->Forward({prefix.data(), B, T + s}, TransformerOptions{}, &r).ok());
      for (int64_t b = 0; b < B; ++b) {
        EXPECT_TRUE(SameBits(g.logits.data() + (b * n + s) * 11,
                             r.logits.data() + (b * (T + s) + T + s - 1) * 11, 11))
            << "step " << s << " sequence " << b;
      }
    }
    if (G > 0 && G < 4) {
      std::unique_ptr<Transformer> twin = RepeatedTwin(*m);
      GenerateResult t;
      ASSERT_TRUE(twin->Generate(kBatch, o, &t).ok());
      EXPECT_EQ(g.tokens, t.tokens);
      EXPECT_TRUE(SameBits(g.logits.data(), t.logits.data(), g.logits.size()));
      EXPECT_EQ(twin->kv_cache_bytes(), plain_bytes);
    }
    m->GenerateCancel();
    EXPECT_EQ(m->kv_cache_bytes(), 0u);
  }
}

// KvCacheBytesFor: H / G and H times smaller for GQA and MQA, 0 without causal, refused sizes.
TEST(TransformerGroupedQuery, KvCacheBytesForTheConfig) {
  TransformerConfig c = Config(0);
  uint64_t mha = 0, gqa = 0, mqa = 0, none = 1, bad = 1;
  ASSERT_TRUE(KvCacheBytesFor(c, 3, 100, &mha).ok());
  EXPECT_EQ(mha, static_cast<uint64_t>(2 * c.n_layers * 3 * 100 * c.d_model) * sizeof(float));
  c.n_kv_heads = 2;
  ASSERT_TRUE(KvCacheBytesFor(c, 3, 100, &gqa).ok());
  c.n_kv_heads = 1;
  ASSERT_TRUE(KvCacheBytesFor(c, 3, 100, &mqa).ok());
  EXPECT_EQ(mha, 2 * gqa);
  EXPECT_EQ(mha, 4 * mqa);
  c.causal = false;
  ASSERT_TRUE(KvCacheBytesFor(c, 3, 100, &none).ok());
  EXPECT_EQ(none, 0u);
  EXPECT_EQ(KvCacheBytesFor(c, 0, 100, &bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad, 0u);
  c.n_kv_heads = 3;  // does not divide 4 heads: the config's own error
  EXPECT_EQ(KvCacheBytesFor(c, 1, 1, &bad).code(), StatusCode::kInvalidArgument);
}

// At G = H / 4 (8 heads over 2 K/V heads) the cache is 4x smaller, measured.
TEST(TransformerGroupedQuery, QuarterKvHeadsMakeTheCacheFourTimesSmaller) {
  TransformerConfig c;
  std::tie(c.vocab_size, c.max_len, c.d_model, c.n_layers, c.n_heads) =
      std::make_tuple(28, 64, 32, 2, 8);
  std::unique_ptr<Transformer> mha = MakeTransformer(c, 3);
  c.n_kv_heads = 2;
  std::unique_ptr<Transformer> gqa = MakeTransformer(c, 3);
  GenerateOptions o;
  o.max_new_tokens = 40;
  GenerateResult a, b;
  ASSERT_TRUE(mha->Generate(kBatch, o, &a).ok());
  ASSERT_TRUE(gqa->Generate(kBatch, o, &b).ok());
  EXPECT_EQ(mha->kv_cache_bytes(), static_cast<size_t>(2 * 2 * B * (T + 40) * 32 * 4));
  EXPECT_EQ(mha->kv_cache_bytes(), 4 * gqa->kv_cache_bytes());
  std::printf("KV cache of 2 layers, B %d, %d positions, d_model 32, 8 heads: %zu bytes; with 2 "
              "K/V heads: %zu bytes (%.1fx smaller)\n",
              static_cast<int>(B), static_cast<int>(T + 40), mha->kv_cache_bytes(),
              gqa->kv_cache_bytes(),
              static_cast<double>(mha->kv_cache_bytes()) / gqa->kv_cache_bytes());
}

// The backward: every gradient but in_proj's is the twin's to float rounding (the K/V heads'
// gradients are sums over their groups, so the stream's gradients differ in the last bits), and
// in_proj's K/V rows are the sums of the twin's rows of their group; all of it the float64
// reference's.
TEST(TransformerGroupedQuery, GradientsAreTheTwinsSummedOverEachGroup) {
  for (const int64_t G : {1, 2}) {
    SCOPED_TRACE("G=" + std::to_string(G));
    std::unique_ptr<Transformer> g = MakeTransformer(Config(G), 41 + G);
    std::unique_ptr<Transformer> twin = RepeatedTwin(*g);
    BackwardOptions o;
    o.head_gate_grads = true;
    BackwardResult ga, gb;
    ASSERT_TRUE(g->Backward(kBatch, kTargets, o, &ga).ok());
    ASSERT_TRUE(twin->Backward(kBatch, kTargets, o, &gb).ok());
    EXPECT_EQ(ga.loss, gb.loss);  // the forward's bits
    ASSERT_EQ(ga.head_gate_grads.size(), gb.head_gate_grads.size());
    for (size_t i = 0; i < ga.head_gate_grads.size(); ++i) {
      EXPECT_NEAR(ga.head_gate_grads[i], gb.head_gate_grads[i],
                  1e-5 * std::max(1.0, std::fabs(gb.head_gate_grads[i])));
    }
    double scale = 0;
    for (const TransformerParamSpec& p : TransformerParams(twin->config())) {
      for (float x : EntryValues(*twin, p.name, true)) scale = std::max(scale, std::fabs(double{x}));
    }
    const int64_t D = 16;
    for (const TransformerParamSpec& p : TransformerParams(g->config())) {
      const std::vector<float> got = EntryValues(*g, p.name, true);
      std::vector<double> want;
      const std::vector<float> tw = EntryValues(*twin, p.name, true);
      const bool in_w = p.name.find("attn.in_proj_weight") != std::string::npos;
      const bool in_b = p.name.find("attn.in_proj_bias") != std::string::npos;
      if (in_w || in_b) {
        const int64_t cols = in_w ? D : 1;
        want.assign(got.size(), 0.0);
        for (int64_t row = 0; row < 3 * D; ++row) {
          const int64_t to = GroupedRow(g->config(), row);
          for (int64_t x = 0; x < cols; ++x) want[to * cols + x] += tw[row * cols + x];
        }
      } else {
        want.assign(tw.begin(), tw.end());
      }
      ASSERT_EQ(got.size(), want.size()) << p.name;
      double e = 0;
      for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::fabs(got[i] - want[i]));
      EXPECT_LE(e, 1e-5 * scale) << p.name;
    }

    // Against the float64 reference (which repeats nothing: it reads K/V head h / (H / G)).
    std::vector<std::pair<std::string, std::vector<double>>> sd;
    for (const TransformerParamSpec& p : TransformerParams(g->config())) {
      const std::vector<float> v = EntryValues(*g, p.name);
      sd.emplace_back(p.name, std::vector<double>(v.begin(), v.end()));
    }
    ReferenceTransformerResult ref;
    ASSERT_TRUE(ReferenceTransformer(g->config(), sd, kTokens, B, T, kTargets, nullptr, &ref).ok());
    EXPECT_NEAR(ga.loss, ref.loss, 1e-6);
    double rscale = 0;
    for (const auto& [name, v] : ref.grads) {
      for (double x : v) rscale = std::max(rscale, std::fabs(x));
    }
    for (const auto& [name, want] : ref.grads) {
      const std::vector<float> got = EntryValues(*g, name, true);
      ASSERT_EQ(got.size(), want.size()) << name;
      double e = 0;
      for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::fabs(got[i] - want[i]));
      EXPECT_LE(e, 1e-5 * rscale) << name;
    }
  }
}

// A training step of a grouped model: the loss falls over a few AdamW steps and a forward sees
// the new weights (its packed K/V panels repacked).
TEST(TransformerGroupedQuery, TrainingSteps) {
  std::unique_ptr<Transformer> m = MakeTransformer(Config(2), 51);
  OptimizerConfig adamw;
  adamw.lr = 1e-2;
  ASSERT_TRUE(m->SetOptimizer(adamw).ok());
  TrainStepResult first, r;
  ASSERT_TRUE(m->TrainStep(kBatch, kTargets, &first).ok());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(m->TrainStep(kBatch, kTargets, &r).ok());
  EXPECT_LT(r.loss, first.loss);
  TransformerResult fr;
  ASSERT_TRUE(m->Forward(kBatch, TransformerOptions{}, &fr).ok());
  double loss = 0;
  ASSERT_TRUE(Transformer::Loss(fr.logits.data(), B * T, 11, kTargets, &loss).ok());
  BackwardResult br;
  ASSERT_TRUE(m->Backward(kBatch, kTargets, BackwardOptions{}, &br).ok());
  EXPECT_EQ(br.loss, loss);
}

}  // namespace
}  // namespace headscope
