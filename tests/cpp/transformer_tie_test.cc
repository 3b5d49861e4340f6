// tie_embeddings (TransformerConfig): unembed.weight is tok_embed.weight, one tensor, as the
// reference module ties them (tools/tiny_transformer.py; its goldens in tests/golden/transformer/
// and tests/golden/train/ hold the numbers against PyTorch). Here what the goldens cannot show:
// the state_dict lists one storage under both keys and the parameters list it once; a tied
// model's logits and gradients are the bits of an untied model whose unembed.weight holds the
// same values (its two gradients summed); setting tok_embed.weight changes the logits; a step
// moves the tensor once; a state_dict whose two keys differ is refused; seeds; generation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

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

// Vocabulary 11, max_len 9, d_model 8, 2 layers of 2 heads, an MLP of 16.
TransformerConfig Config(bool tied) {
  TransformerConfig c;
  std::tie(c.vocab_size, c.max_len, c.d_model, c.n_layers, c.n_heads, c.d_mlp) =
      std::make_tuple(11, 9, 8, 2, 2, 16);
  c.tie_embeddings = tied;
  return c;
}

Status Set(Transformer* m, const std::string& name, const std::vector<float>& v, const Shape& s) {
  return m->SetParameter(name, {v.data(), s, v.size()});
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// An untied model holding a tied one's values (unembed.weight = tok_embed.weight's).
std::unique_ptr<Transformer> UntiedTwin(const Transformer& tied) {
  std::unique_ptr<Transformer> twin = MakeTransformer(Config(false), 0);
  for (const TransformerParamSpec& p : TransformerParams(tied.config())) {
    EXPECT_TRUE(Set(twin.get(), p.name, EntryValues(tied, p.name), p.shape).ok()) << p.name;
  }
  return twin;
}

TEST(TiedEmbeddings, TheStateDictListsOneTensorUnderBothKeysAndTheParametersOnce) {
  const std::vector<TransformerParamSpec> tied = TransformerParams(Config(true));
  const std::vector<TransformerParamSpec> untied = TransformerParams(Config(false));
  ASSERT_EQ(tied.size(), untied.size());  // torch's state_dict(): the same keys
  int64_t tied_floats = 0, untied_floats = 0, tied_params = 0;
  for (size_t i = 0; i < tied.size(); ++i) {
    EXPECT_EQ(tied[i].name, untied[i].name);
    EXPECT_EQ(tied[i].shape, untied[i].shape);
    EXPECT_EQ(tied[i].tied_to, tied[i].name == "unembed.weight" ? "tok_embed.weight" : "");
    EXPECT_EQ(untied[i].tied_to, "");
    untied_floats += untied[i].shape.NumElements();
    if (!tied[i].tied_to.empty()) continue;  // named_parameters(): each tensor once
    tied_floats += tied[i].shape.NumElements();
    ++tied_params;
  }
  EXPECT_EQ(tied_params, static_cast<int64_t>(untied.size()) - 1);
  EXPECT_EQ(tied_floats, untied_floats - 11 * 8) << "the parameter count counts it once";

  std::unique_ptr<Transformer> m = MakeTransformer(Config(true), 3);
  TensorView tok, unembed;
  ASSERT_TRUE(m->GetParameter("tok_embed.weight", &tok).ok());
  ASSERT_TRUE(m->GetParameter("unembed.weight", &unembed).ok());
  EXPECT_EQ(tok.data, unembed.data) << "one storage";
  EXPECT_EQ(tok.shape, unembed.shape);

  // Either key loads the tensor: a state_dict without tok_embed.weight completes the model.
  std::unique_ptr<Transformer> fresh = MakeTransformer(Config(true), 0);
  for (const TransformerParamSpec& p : tied) {
    if (p.name == "tok_embed.weight") continue;
    ASSERT_TRUE(Set(fresh.get(), p.name, EntryValues(*m, p.name), p.shape).ok()) << p.name;
  }
  EXPECT_TRUE(fresh->CheckComplete().ok());
  EXPECT_TRUE(SameBits(EntryValues(*fresh, "tok_embed.weight"), EntryValues(*m, "tok_embed.weight")));
}

TEST(TiedEmbeddings, LogitsAndGradientsAreAnUntiedModelsWithTheSameValuesSummed) {
  std::unique_ptr<Transformer> tied = MakeTransformer(Config(true), 5);
  std::unique_ptr<Transformer> twin = UntiedTwin(*tied);
  TransformerOptions o;
  o.hooks = TransformerHookNames(tied->config());
  TransformerResult a, b;
  ASSERT_TRUE(tied->Forward(kBatch, o, &a).ok());
  ASSERT_TRUE(twin->Forward(kBatch, o, &b).ok());
  ASSERT_EQ(a.logits.size(), b.logits.size());
  EXPECT_EQ(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)), 0);

  BackwardResult ga, gb;
  ASSERT_TRUE(tied->Backward(kBatch, kTargets, BackwardOptions{}, &ga).ok());
  ASSERT_TRUE(twin->Backward(kBatch, kTargets, BackwardOptions{}, &gb).ok());
  EXPECT_EQ(ga.loss, gb.loss);
  for (const TransformerParamSpec& p : TransformerParams(tied->config())) {
    if (p.name == "tok_embed.weight" || p.name == "unembed.weight") continue;
    EXPECT_TRUE(SameBits(EntryValues(*tied, p.name, true), EntryValues(*twin, p.name, true))) << p.name;
  }
  // The one tensor's gradient: the unembedding's plus the embedding's, one float sum each.
  const std::vector<float> g = EntryValues(*tied, "tok_embed.weight", true);
  const std::vector<float> g_embed = EntryValues(*twin, "tok_embed.weight", true);
  const std::vector<float> g_unembed = EntryValues(*twin, "unembed.weight", true);
  ASSERT_EQ(g.size(), g_embed.size());
  std::vector<float> sum(g.size());
  for (size_t i = 0; i < g.size(); ++i) sum[i] = g_unembed[i] + g_embed[i];
  EXPECT_TRUE(SameBits(g, sum));
  TensorView gt, gu;
  ASSERT_TRUE(tied->Gradient("tok_embed.weight", &gt).ok());
  ASSERT_TRUE(tied->Gradient("unembed.weight", &gu).ok());
  EXPECT_EQ(gt.data, gu.data) << "both keys read the one gradient";

  // Setting tok_embed.weight changes the logits through the unembedding too.
  std::vector<float> w = EntryValues(*tied, "tok_embed.weight");
  for (float& x : w) x = -0.5f * x + 0.125f;
  const Shape vd{11, 8};
  ASSERT_TRUE(Set(tied.get(), "tok_embed.weight", w, vd).ok());
  ASSERT_TRUE(Set(twin.get(), "tok_embed.weight", w, vd).ok());
  ASSERT_TRUE(Set(twin.get(), "unembed.weight", w, vd).ok());
  TransformerResult a2, b2;
  ASSERT_TRUE(tied->Forward(kBatch, o, &a2).ok());
  ASSERT_TRUE(twin->Forward(kBatch, o, &b2).ok());
  EXPECT_EQ(std::memcmp(a2.logits.data(), b2.logits.data(), a2.logits.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a2.logits.data(), a.logits.data(), a.logits.size() * sizeof(float)), 0);
}

TEST(TiedEmbeddings, AStepMovesTheTensorOnce) {
  // SGD: p - lr g once, with g the summed gradient, and the norm counts the tensor once.
  std::unique_ptr<Transformer> m = MakeTransformer(Config(true), 7);
  OptimizerConfig sgd;
  sgd.kind = OptimizerConfig::kSgd;
  sgd.lr = 0.1;
  ASSERT_TRUE(m->SetOptimizer(sgd).ok());
  BackwardResult br;
  ASSERT_TRUE(m->Backward(kBatch, kTargets, BackwardOptions{}, &br).ok());
  const std::vector<float> p0 = EntryValues(*m, "tok_embed.weight");
  const std::vector<float> g = EntryValues(*m, "tok_embed.weight", true);
  double norm = 0;
  for (const TransformerParamSpec& p : TransformerParams(m->config())) {
    if (!p.tied_to.empty()) continue;
    for (float x : EntryValues(*m, p.name, true)) norm += static_cast<double>(x) * x;
  }
  TrainStepResult r;
  ASSERT_TRUE(m->TrainStep(kBatch, kTargets, &r).ok());
  ASSERT_TRUE(r.stepped);
  EXPECT_DOUBLE_EQ(r.grad_norm, std::sqrt(norm));
  const std::vector<float> p1 = EntryValues(*m, "unembed.weight");
  for (size_t i = 0; i < p0.size(); ++i) {
    ASSERT_EQ(p1[i], std::fma(g[i], static_cast<float>(-sgd.lr), p0[i])) << i;
  }

  // AdamW with weight decay, first step: the moment is (1 - beta1) g of the summed gradient, and
  // p (1 - lr wd) - lr g / (|g| + eps) once (the bias-corrected m / sqrt(v) is g / |g|).
  std::unique_ptr<Transformer> a = MakeTransformer(Config(true), 7);
  OptimizerConfig adamw;  // (lr 1e-3, betas 0.9 / 0.999, eps 1e-8)
  adamw.weight_decay = 0.1;
  ASSERT_TRUE(a->SetOptimizer(adamw).ok());
  ASSERT_TRUE(a->TrainStep(kBatch, kTargets, &r).ok());
  ASSERT_TRUE(r.stepped);
  const std::vector<float> q1 = EntryValues(*a, "tok_embed.weight");
  const float* m1 = a->optimizer()->exp_avg(0);  // slot 0: tok_embed.weight
  ASSERT_NE(m1, nullptr);
  for (size_t i = 0; i < p0.size(); ++i) {
    const double gi = g[i], want = p0[i] * (1 - adamw.lr * 0.1) - adamw.lr * gi / (std::fabs(gi) + 1e-8);
    EXPECT_NEAR(m1[i], 0.1 * gi, 1e-6 * std::fabs(gi) + 1e-12) << i;
    EXPECT_NEAR(q1[i], want, 1e-6) << i;
  }
}

TEST(TiedEmbeddings, AStateDictWhoseTwoKeysDifferIsRefused) {
  std::unique_ptr<Transformer> seeded = MakeTransformer(Config(true), 9);
  const std::vector<float> w = EntryValues(*seeded, "tok_embed.weight");
  std::vector<float> other = w;
  other[2 * 8 + 3] += 1.0f;
  const Shape vd{11, 8};
  std::unique_ptr<Transformer> m = MakeTransformer(Config(true), 0);
  ASSERT_TRUE(Set(m.get(), "tok_embed.weight", w, vd).ok());
  Status s = Set(m.get(), "unembed.weight", other, vd);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.argument(), Arg::kStateDict);
  EXPECT_NE(s.message().find("state_dict['unembed.weight']: differs from "
                             "state_dict['tok_embed.weight'] at [2, 3]: "),
            std::string::npos) << s.message();
  EXPECT_NE(s.message().find("tie_embeddings"), std::string::npos) << s.message();
  EXPECT_TRUE(SameBits(EntryValues(*m, "tok_embed.weight"), w)) << "refused: nothing written";
  EXPECT_TRUE(Set(m.get(), "unembed.weight", w, vd).ok()) << "the same values: one tensor";
  // The other order names the other key.
  std::unique_ptr<Transformer> n = MakeTransformer(Config(true), 0);
  ASSERT_TRUE(Set(n.get(), "unembed.weight", w, vd).ok());
  s = Set(n.get(), "tok_embed.weight", other, vd);
  EXPECT_NE(s.message().find("state_dict['tok_embed.weight']: differs from "
                             "state_dict['unembed.weight']"),
            std::string::npos) << s.message();
  // Once the weights were used (or initialised), a key set is a new state_dict.
  TransformerResult r;
  ASSERT_TRUE(seeded->Forward(kBatch, TransformerOptions{}, &r).ok());
  ASSERT_TRUE(Set(seeded.get(), "tok_embed.weight", w, vd).ok());
  ASSERT_TRUE(seeded->Forward(kBatch, TransformerOptions{}, &r).ok());
  EXPECT_TRUE(Set(seeded.get(), "unembed.weight", other, vd).ok());
  EXPECT_TRUE(SameBits(EntryValues(*seeded, "tok_embed.weight"), other));
  ASSERT_TRUE(seeded->InitializeFromSeed(9).ok());
  EXPECT_TRUE(Set(seeded.get(), "unembed.weight", other, vd).ok());
  // Untied, the two keys are two tensors.
  std::unique_ptr<Transformer> untied = MakeTransformer(Config(false), 9);
  EXPECT_TRUE(Set(untied.get(), "unembed.weight", other, vd).ok());
}

TEST(TiedEmbeddings, SeedsGiveTheTensorTheEmbeddingsInitialisation) {
  std::unique_ptr<Transformer> tied = MakeTransformer(Config(true), 11);
  std::unique_ptr<Transformer> untied = MakeTransformer(Config(false), 11);
  for (const TransformerParamSpec& p : TransformerParams(tied->config())) {
    const std::string from = p.tied_to.empty() ? p.name : p.tied_to;
    EXPECT_TRUE(SameBits(EntryValues(*tied, p.name), EntryValues(*untied, from))) << p.name;
  }
}

TEST(TiedEmbeddings, GenerationsLogitsAreAFullRecomputations) {
  std::unique_ptr<Transformer> m = MakeTransformer(Config(true), 13);
  GenerateOptions o;
  o.max_new_tokens = 2;
  o.keep_logits = true;
  GenerateResult g;
  ASSERT_TRUE(m->Generate({kTokens, 1, T}, o, &g).ok());
  for (int64_t s = 0; s < o.max_new_tokens; ++s) {
    TransformerResult r;
    ASSERT_TRUE(m->Forward({g.tokens.data(), 1, T + s}, TransformerOptions{}, &r).ok());
    EXPECT_EQ(std::memcmp(g.logits.data() + s * 11, r.logits.data() + (T + s - 1) * 11,
                          11 * sizeof(float)), 0) << "step " << s;
  }
}

}  // namespace
}  // namespace headscope
