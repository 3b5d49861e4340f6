// Transformer::InitializeFromSeed (transformer.h, "Initial weights from a seed") and
// GetParameter on seeded models: the same seed gives the same bits, in two models and on every
// platform (the values and hashes pinned below were computed by an independent Python
// implementation of the documented scheme, and this program also runs under Node as wasm_*);
// every entry has its PyTorch default distribution (mean, std, bounds, Kolmogorov-Smirnov);
// constants are exact; a seeded model computes finite logits whose loss is near log(vocab).
#include "headscope/transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace headscope {
namespace {

// The expected distribution of each entry, written from PyTorch's rules (torch 1.13:
// nn.Embedding.reset_parameters, nn.Linear.reset_parameters, MultiheadAttention.
// _reset_parameters, nn.LayerNorm.reset_parameters) independently of transformer.cc's table.
struct Expected {
  enum Kind { kNormal, kUniform, kConstant } kind;
  double value;  // the bound of U(-a, a), or the constant
};

Expected ExpectedOf(const TransformerConfig& c, const std::string& name) {
  const double D = static_cast<double>(c.d_model);
  const auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  const auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (name == "tok_embed.weight" || name == "pos_embed.weight") return {Expected::kNormal, 1.0};
  if (ends("in_proj_weight")) {
    const double fan_in = D, fan_out = 3 * D;  // torch: size(1) and size(0) of (3D, D)
    return {Expected::kUniform, std::sqrt(3.0) * std::sqrt(2.0 / (fan_in + fan_out))};
  }
  if (ends("in_proj_bias") || ends("out_proj.bias")) return {Expected::kConstant, 0.0};
  if (ends("out_proj.weight") || has("fc_in") || name.rfind("unembed.", 0) == 0) {
    return {Expected::kUniform, 1.0 / std::sqrt(D)};
  }
  if (has("fc_out")) return {Expected::kUniform, 1.0 / std::sqrt(static_cast<double>(c.d_mlp))};
  if (has("ln")) return {Expected::kConstant, ends("weight") ? 1.0 : 0.0};
  ADD_FAILURE() << "no expectation for " << name;
  return {Expected::kConstant, 0.0};
}

std::unique_ptr<Transformer> Seeded(const TransformerConfig& c, uint64_t seed) {
  std::unique_ptr<Transformer> m;
  Status s = Transformer::Create(c, &m);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return nullptr;
  s = m->InitializeFromSeed(seed);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return m;
}

std::vector<float> Entry(const Transformer& m, const std::string& name) {
  TensorView v;
  const Status s = m.GetParameter(name, &v);
  EXPECT_TRUE(s.ok()) << name << ": " << s.ToString();
  if (!s.ok()) return {};
  return std::vector<float>(v.data, v.data + v.size);
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// FNV-1a over the little-endian bytes of every float of every entry, in state_dict order.
uint64_t HashOfWeights(const Transformer& m) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const TransformerParamSpec& p : TransformerParams(m.config())) {
    for (float f : Entry(m, p.name)) {
      const uint32_t u = Bits(f);
      for (int s = 0; s < 32; s += 8) h = (h ^ ((u >> s) & 0xFF)) * 0x100000001B3ull;
    }
  }
  return h;
}

TransformerConfig Small() {  // the 2-layer attention-only shape of an induction-head lab
  TransformerConfig c;
  c.vocab_size = 28;
  c.max_len = 32;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 2;
  return c;
}

TransformerConfig PostNoBias() {
  TransformerConfig c;
  c.vocab_size = 50;
  c.max_len = 16;
  c.d_model = 48;
  c.n_layers = 2;
  c.n_heads = 3;
  c.d_mlp = 96;
  c.norm = NormPlacement::kPost;
  c.bias = false;
  return c;
}

TransformerConfig Big() {  // 1,072,896 parameters
  TransformerConfig c;
  c.vocab_size = 1024;
  c.max_len = 128;
  c.d_model = 128;
  c.n_layers = 4;
  c.n_heads = 4;
  c.d_mlp = 512;
  return c;
}

TEST(TransformerInit, SameSeedSameBitsOtherSeedsDiffer) {
  for (const TransformerConfig& c : {Small(), PostNoBias()}) {
    const auto a = Seeded(c, 7), b = Seeded(c, 7), other = Seeded(c, 8);
    ASSERT_TRUE(a && b && other);
    for (const TransformerParamSpec& p : TransformerParams(c)) {
      SCOPED_TRACE(p.name);
      const std::vector<float> va = Entry(*a, p.name), vb = Entry(*b, p.name);
      const std::vector<float> vo = Entry(*other, p.name);
      ASSERT_EQ(va.size(), static_cast<size_t>(p.shape.NumElements()));
      EXPECT_EQ(0, std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)));
      if (ExpectedOf(c, p.name).kind == Expected::kConstant) {
        EXPECT_EQ(va, vo);
      } else {
        size_t same = 0;
        for (size_t i = 0; i < va.size(); ++i) same += Bits(va[i]) == Bits(vo[i]);
        EXPECT_LE(same, va.size() / 100) << "seeds 7 and 8 share too many values";
      }
    }
    // Re-initialising replaces every entry: seed 8's model given seed 7 equals seed 7's.
    ASSERT_TRUE(other->InitializeFromSeed(7).ok());
    EXPECT_EQ(HashOfWeights(*other), HashOfWeights(*a));
  }
  // Different entries are different streams (not one stream shifted or repeated).
  const auto m = Seeded(Small(), 1);
  const std::vector<float> q0 = Entry(*m, "blocks.0.attn.in_proj_weight");
  const std::vector<float> q1 = Entry(*m, "blocks.1.attn.in_proj_weight");
  size_t same = 0;
  for (size_t i = 0; i < q0.size(); ++i) same += Bits(q0[i]) == Bits(q1[i]);
  EXPECT_LE(same, q0.size() / 100);
}

// Each value depends on (seed, key, index) only: not on the other entries of the config.
TEST(TransformerInit, AnEntryDoesNotDependOnTheRestOfTheConfig) {
  TransformerConfig one = Small(), more = Small();
  one.n_layers = 1;
  more.n_layers = 4;
  more.vocab_size = 40;  // tok_embed.weight: 40 rows, its first 28 those of the 28-row one
  more.d_mlp = 64;
  more.bias = false;
  const auto a = Seeded(one, 3), b = Seeded(more, 3);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(Entry(*a, "blocks.0.attn.in_proj_weight"), Entry(*b, "blocks.0.attn.in_proj_weight"));
  EXPECT_EQ(Entry(*a, "blocks.0.attn.out_proj.weight"), Entry(*b, "blocks.0.attn.out_proj.weight"));
  EXPECT_EQ(Entry(*a, "pos_embed.weight"), Entry(*b, "pos_embed.weight"));
  const std::vector<float> ta = Entry(*a, "tok_embed.weight"), tb = Entry(*b, "tok_embed.weight");
  ASSERT_EQ(tb.size(), 40u * 32u);
  EXPECT_TRUE(std::equal(ta.begin(), ta.end(), tb.begin()));
}

// Values pinned as bits, for seed 1: computed by the Python implementation of the scheme (the
// formulas of transformer.h, with Python's float arithmetic and math.log/cos/sin), and checked
// by this same program natively and in WebAssembly, so a change of the scheme, of a compiler's
// arithmetic or of a C library's log/cos/sin result shows here.
TEST(TransformerInit, PinnedValuesAndHashesForSeed1) {
  const auto m = Seeded(Small(), 1);
  ASSERT_TRUE(m);
  const std::vector<float> tok = Entry(*m, "tok_embed.weight");
  const std::vector<float> qkv = Entry(*m, "blocks.0.attn.in_proj_weight");
  ASSERT_GE(tok.size(), 3u);
  ASSERT_GE(qkv.size(), 3u);
  const uint32_t want_tok[3] = {0x3e52e350u, 0xbee3d5dcu, 0x3f240a90u};  // 0.2059 -0.4450 0.6408
  const uint32_t want_qkv[3] = {0x3d337e7cu, 0xbdc448f0u, 0x3dbbd6deu};  // 0.0438 -0.0958 0.0917
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Bits(tok[i]), want_tok[i]) << "tok_embed.weight[" << i << "] = " << tok[i];
    EXPECT_EQ(Bits(qkv[i]), want_qkv[i]) << "in_proj_weight[" << i << "] = " << qkv[i];
  }
  // Whole models: 11,484, 42,816 and 1,072,896 floats (82,944 + 16,384 normals in the last).
  EXPECT_EQ(HashOfWeights(*m), 0xeb5125f5a9dbf741ull);
  const auto post = Seeded(PostNoBias(), 1);
  ASSERT_TRUE(post);
  EXPECT_EQ(HashOfWeights(*post), 0x0012666b416238a4ull);
  const auto big = Seeded(Big(), 1);
  ASSERT_TRUE(big);
  EXPECT_EQ(HashOfWeights(*big), 0xc5426fa1cff727f8ull);
}

// Kolmogorov-Smirnov distance between the sorted sample and the expected CDF.
double KsDistance(std::vector<float> v, const Expected& e) {
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  double d = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = v[i];
    const double cdf = e.kind == Expected::kNormal
                           ? 0.5 * (1.0 + std::erf(x / std::sqrt(2.0)))
                           : std::min(1.0, std::max(0.0, (x + e.value) / (2 * e.value)));
    d = std::max({d, cdf - static_cast<double>(i) / n, static_cast<double>(i + 1) / n - cdf});
  }
  return d;
}

TEST(TransformerInit, EveryEntryHasItsPyTorchDistribution) {
  TransformerConfig c;  // a 512-wide model: every kind of entry, with many values each
  c.vocab_size = 256;
  c.max_len = 64;
  c.d_model = 512;
  c.n_layers = 1;
  c.n_heads = 8;
  c.d_mlp = 1024;
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{0xFFFFFFFFFFFFFFFFull}}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const auto m = Seeded(c, seed);
    ASSERT_TRUE(m);
    for (const TransformerParamSpec& p : TransformerParams(c)) {
      SCOPED_TRACE(p.name);
      const Expected e = ExpectedOf(c, p.name);
      const std::vector<float> v = Entry(*m, p.name);
      const double n = static_cast<double>(v.size());
      if (e.kind == Expected::kConstant) {
        for (float x : v) ASSERT_EQ(x, static_cast<float>(e.value));
        continue;
      }
      double sum = 0, sq = 0, lo = v[0], hi = v[0];
      bool finite = true;
      for (float x : v) {
        finite = finite && std::isfinite(x);
        sum += x;
        sq += static_cast<double>(x) * x;
        lo = std::min(lo, static_cast<double>(x));
        hi = std::max(hi, static_cast<double>(x));
      }
      ASSERT_TRUE(finite);
      const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
      // sigma of the distribution; kurtosis 3 (normal) or 1.8 (uniform) sets the spread of sd.
      const double sigma = e.kind == Expected::kNormal ? e.value : e.value / std::sqrt(3.0);
      const double kurtosis = e.kind == Expected::kNormal ? 3.0 : 1.8;
      EXPECT_LE(std::fabs(mean), 4 * sigma / std::sqrt(n)) << "mean " << mean;
      EXPECT_LE(std::fabs(sd / sigma - 1), 5 * std::sqrt((kurtosis - 1) / (4 * n)))
          << "std " << sd << ", expected " << sigma;
      if (n >= 100000) {
        EXPECT_LE(std::fabs(sd / sigma - 1), 0.01) << "std " << sd;
      }
      // KS at alpha ~ 1e-4 (1.95 / sqrt(n) is alpha 0.001).
      EXPECT_LE(KsDistance(v, e), 2.2 / std::sqrt(n));
      if (e.kind == Expected::kUniform) {
        // Inside the bound, and near it at both ends (a gap of 24 / n misses with odds e^-12).
        const double a = e.value;
        EXPECT_LE(hi, static_cast<float>(a));
        EXPECT_GE(lo, -static_cast<float>(a));
        EXPECT_GE(hi, a * (1 - 24 / n)) << "max " << hi << " of U(-" << a << ", " << a << ")";
        EXPECT_LE(lo, -a * (1 - 24 / n)) << "min " << lo << " of U(-" << a << ", " << a << ")";
      } else {
        // Tails: the largest |value| of n normals is about sqrt(2 ln n) (4.8 for 131,072).
        EXPECT_GT(std::max(hi, -lo), 3.5);
        EXPECT_LT(std::max(hi, -lo), 8.6);  // the generator's bound, sqrt(-2 ln 2^-53)
        size_t inside = 0;  // within one sigma: 68.27 %
        for (float x : v) inside += std::fabs(x) < 1.0f;
        const double p = 0.6826894921370859;
        EXPECT_LE(std::fabs(inside / n - p), 5 * std::sqrt(p * (1 - p) / n));
      }
    }
  }
}

// LayerNorm weight 1 and bias 0 in every placement; the attention biases 0; no bias entries at
// all with bias = false.
TEST(TransformerInit, ConstantsAreExact) {
  for (NormPlacement norm : {NormPlacement::kPre, NormPlacement::kPost, NormPlacement::kNone}) {
    TransformerConfig c = PostNoBias();
    c.norm = norm;
    c.bias = true;
    const auto m = Seeded(c, 11);
    ASSERT_TRUE(m);
    size_t ones = 0, zeros = 0;
    for (const TransformerParamSpec& p : TransformerParams(c)) {
      const bool ln = p.name.find("ln") != std::string::npos;
      const bool attn_bias = p.name.find("in_proj_bias") != std::string::npos ||
                             p.name.find("out_proj.bias") != std::string::npos;
      if (!ln && !attn_bias) continue;
      const float want = ln && p.name.find("weight") != std::string::npos ? 1.0f : 0.0f;
      for (float x : Entry(*m, p.name)) ASSERT_EQ(Bits(x), Bits(want)) << p.name;
      (want == 1.0f ? ones : zeros) += 1;
    }
    const size_t lns = norm == NormPlacement::kNone ? 0 : norm == NormPlacement::kPre ? 5 : 4;
    EXPECT_EQ(ones, lns);
    EXPECT_EQ(zeros, lns + 4);  // + in_proj_bias and out_proj.bias of 2 layers
  }
}

double MeanLoss(Transformer* m, const std::vector<int32_t>& tokens, int64_t B, int64_t T) {
  TransformerResult r;
  const Status s = m->Forward({tokens.data(), B, T}, TransformerOptions(), &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return NAN;
  for (size_t i = 0; i < r.logits.size(); ++i) {
    if (!std::isfinite(r.logits[i])) {
      ADD_FAILURE() << "logit " << i << " is " << r.logits[i];
      return NAN;
    }
  }
  std::vector<int32_t> targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    targets[i] = (i + 1) % static_cast<size_t>(T) == 0 ? -100 : tokens[i + 1];
  }
  double loss = 0;
  EXPECT_TRUE(Transformer::Loss(r.logits.data(), B * T, m->config().vocab_size, targets.data(),
                                &loss)
                  .ok());
  return loss;
}

// A seeded model computes finite logits, and (its unembedding reading LayerNormed rows through
// U(+-1/sqrt(D)) weights) logits of about 0.6 std: a loss near log(vocab), a model that can learn.
TEST(TransformerInit, ASeededModelRunsForward) {
  for (const TransformerConfig& c : {Small(), PostNoBias(), Big()}) {
    const auto m = Seeded(c, 5);
    ASSERT_TRUE(m);
    const int64_t B = 2, T = c.max_len;
    std::vector<int32_t> tokens(static_cast<size_t>(B * T));
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((i * 7 + 3) % static_cast<size_t>(c.vocab_size));
    }
    const double loss = MeanLoss(m.get(), tokens, B, T);
    const double uniform = std::log(static_cast<double>(c.vocab_size));
    EXPECT_GT(loss, uniform - 0.5) << "vocab " << c.vocab_size;
    EXPECT_LT(loss, uniform + 1.5) << "vocab " << c.vocab_size;
  }
}

// Initialising a model that already computed replaces its weights everywhere Forward reads them
// (the packed panels of the Linears and of the attention layers are rebuilt): its logits are a
// fresh seeded model's, bit for bit.
TEST(TransformerInit, ReinitialisingAWarmModelChangesWhatForwardComputes) {
  const TransformerConfig c = PostNoBias();
  const auto warm = Seeded(c, 1), fresh = Seeded(c, 2);
  ASSERT_TRUE(warm && fresh);
  std::vector<int32_t> tokens = {1, 5, 9, 2, 44, 3, 3, 7};
  const TokenView tv{tokens.data(), 2, 4};
  TransformerResult before, after, want;
  ASSERT_TRUE(warm->Forward(tv, TransformerOptions(), &before).ok());
  ASSERT_TRUE(warm->InitializeFromSeed(2).ok());
  ASSERT_TRUE(warm->Forward(tv, TransformerOptions(), &after).ok());
  ASSERT_TRUE(fresh->Forward(tv, TransformerOptions(), &want).ok());
  ASSERT_EQ(after.logits.size(), want.logits.size());
  EXPECT_EQ(0, std::memcmp(after.logits.data(), want.logits.data(),
                           want.logits.size() * sizeof(float)));
  EXPECT_NE(0, std::memcmp(before.logits.data(), want.logits.data(),
                           want.logits.size() * sizeof(float)));
}

// GetParameter on a seeded model: every key of TransformerParams, shaped as listed; the
// attention layers' split projections are the row blocks of in_proj_weight; unknown keys refused.
TEST(TransformerInit, GetParameterServesEveryKeyAndTheSplitProjections) {
  const TransformerConfig c = Small();
  const auto m = Seeded(c, 4);
  ASSERT_TRUE(m);
  for (const TransformerParamSpec& p : TransformerParams(c)) {
    TensorView v;
    ASSERT_TRUE(m->GetParameter(p.name, &v).ok()) << p.name;
    EXPECT_EQ(v.shape, p.shape) << p.name;
    EXPECT_EQ(v.size, static_cast<size_t>(p.shape.NumElements())) << p.name;
  }
  const std::vector<float> packed = Entry(*m, "blocks.1.attn.in_proj_weight");
  const size_t DD = static_cast<size_t>(c.d_model * c.d_model);
  const char* split[] = {"blocks.1.attn.q_proj_weight", "blocks.1.attn.k_proj_weight",
                         "blocks.1.attn.v_proj_weight"};
  for (size_t k = 0; k < 3; ++k) {
    const std::vector<float> part = Entry(*m, split[k]);
    ASSERT_EQ(part.size(), DD);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), packed.begin() + k * DD)) << split[k];
  }
  TensorView v;
  for (const char* bad : {"tok_embed", "blocks.2.attn.in_proj_weight", "blocks.0.mlp.fc_in.weight",
                          "blocks.0.attn.bias_k", "blocks.00.attn.in_proj_weight", ""}) {
    const Status s = m->GetParameter(bad, &v);
    EXPECT_EQ(s.code(), StatusCode::kUnknownParameter) << bad << ": " << s.ToString();
    EXPECT_EQ(s.argument(), Arg::kStateDict) << bad;
  }
}

// The cost of initialising a ~1M-parameter model (printed; bounded loosely so that a slow
// sanitizer or WebAssembly run still passes).
TEST(TransformerInit, TimeForAMillionParameters) {
  std::unique_ptr<Transformer> m;
  ASSERT_TRUE(Transformer::Create(Big(), &m).ok());
  size_t floats = 0;
  for (const TransformerParamSpec& p : TransformerParams(Big())) {
    floats += static_cast<size_t>(p.shape.NumElements());
  }
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(m->InitializeFromSeed(static_cast<uint64_t>(rep)).ok());
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::printf("InitializeFromSeed: %zu parameters in %.2f ms (best of 5)\n", floats, best);
  EXPECT_LT(best, 5000.0);
}

}  // namespace
}  // namespace headscope
