// Transformer::Generate: greedy generation with the KV cache against a full recomputation at
// every step (the step's logits are the bits of Forward's last row over the sequence so far),
// across configs whose attention changes kernel path (<= 12 keys: the small-head path; more: the
// packed one) and query tile (64 rows) while the context grows; sampling's rules (top_k, top_p,
// seeds); non-causal models; head gates; bad options; tiny temperatures; generation in steps
// (GenerateBegin / GenerateContinue) against Generate, and what ends one; the sinusoidal table's
// rows computed once; and PyTorch's greedy tokens (tests/golden/generate/, from
// tools/make_generate_golden.py) for every attention variant.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "headscope/transformer.h"
#include "json_config.h"
#include "nlohmann/json.hpp"

namespace headscope {
namespace {

TransformerConfig Config(int64_t vocab, int64_t max_len, int64_t d_model, int64_t heads = 1,
                         int64_t layers = 1, int64_t d_mlp = 0) {
  TransformerConfig c;
  c.vocab_size = vocab;
  c.max_len = max_len;
  c.d_model = d_model;
  c.n_heads = heads;
  c.n_layers = layers;
  c.d_mlp = d_mlp;
  return c;
}

std::unique_ptr<Transformer> Model(const TransformerConfig& c, uint64_t seed) {
  std::unique_ptr<Transformer> m;
  EXPECT_TRUE(Transformer::Create(c, &m).ok());
  EXPECT_TRUE(m->InitializeFromSeed(seed).ok());
  return m;
}

std::vector<int32_t> Prompt(int64_t B, int64_t T, int64_t V, int salt) {
  std::vector<int32_t> t(static_cast<size_t>(B * T));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 7 + salt * 13 + 3) % V);
  return t;
}

// Generates n tokens after the prompt (greedy, logits kept) and checks every step against
// Forward over the sequence so far: the same bits for the last row's logits, the token its argmax.
void ExpectGreedyMatchesRecomputation(Transformer* m, int64_t B, int64_t T, int64_t n,
                                      const TensorView& gates = TensorView()) {
  const TransformerConfig& c = m->config();
  const int64_t V = c.vocab_size, W = T + n;
  const std::vector<int32_t> prompt = Prompt(B, T, V, static_cast<int>(c.d_model));
  GenerateOptions o;
  o.max_new_tokens = n;
  o.keep_logits = true;
  o.head_gates = gates;
  GenerateResult g;
  const Status s = m->Generate({prompt.data(), B, T}, o, &g);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(g.tokens_shape, (Shape{B, W}));
  ASSERT_EQ(g.logits_shape, (Shape{B, n, V}));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) ASSERT_EQ(g.tokens[b * W + t], prompt[b * T + t]);
  }
  TransformerOptions fo;
  fo.head_gates = gates;
  std::vector<int32_t> so_far(static_cast<size_t>(B * W));
  for (int64_t step = 0; step < n; ++step) {
    const int64_t len = T + step;
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(so_far.data() + b * len, g.tokens.data() + b * W, len * sizeof(int32_t));
    }
    TransformerResult full;
    ASSERT_TRUE(m->Forward({so_far.data(), B, len}, fo, &full).ok());
    for (int64_t b = 0; b < B; ++b) {
      SCOPED_TRACE("step " + std::to_string(step) + ", sequence " + std::to_string(b) +
                   ", context " + std::to_string(len));
      const float* want = full.logits.data() + (b * len + len - 1) * V;
      const float* got = g.logits.data() + (b * n + step) * V;
      ASSERT_EQ(0, std::memcmp(want, got, V * sizeof(float)))
          << "first logit: cached " << got[0] << ", recomputed " << want[0];
      const int32_t argmax =
          static_cast<int32_t>(std::max_element(want, want + V) - want);  // first largest
      ASSERT_EQ(g.tokens[b * W + len], argmax);
    }
  }
}

TEST(TransformerGenerate, GreedyWithTheKvCacheIsTheFullRecomputationBitForBit) {
  struct Case {
    int64_t d_model, heads, layers, d_mlp, max_len;
    NormPlacement norm;
    PositionKind positions;
    Activation act;
    bool bias;
    int64_t B, T;
  };
  const Case cases[] = {
      // The induction shape: 2 layers, attention only, head dim 16, the context crossing the
      // small-head path's 12 keys.
      {32, 2, 2, 0, 32, NormPlacement::kPre, PositionKind::kLearned, Activation::kGelu, true, 1, 3},
      // Head dims that are not a multiple of the SIMD width (3, 5, 12), MLPs, every norm and
      // position kind, batches.
      {12, 4, 1, 24, 20, NormPlacement::kPost, PositionKind::kSinusoidal, Activation::kRelu, true, 3, 1},
      {15, 3, 3, 8, 24, NormPlacement::kNone, PositionKind::kNone, Activation::kGelu, false, 2, 5},
      {24, 2, 2, 40, 18, NormPlacement::kPre, PositionKind::kSinusoidal, Activation::kGelu, false, 2, 12},
      {8, 8, 4, 16, 16, NormPlacement::kPost, PositionKind::kLearned, Activation::kRelu, true, 1, 1},
      // Past one query tile (64 rows) and into the packed path's range skipping.
      {64, 4, 2, 128, 80, NormPlacement::kPre, PositionKind::kLearned, Activation::kGelu, true, 2, 60},
  };
  for (const Case& k : cases) {
    TransformerConfig c;
    c.vocab_size = 29;
    c.max_len = k.max_len;
    c.d_model = k.d_model;
    c.n_heads = k.heads;
    c.n_layers = k.layers;
    c.d_mlp = k.d_mlp;
    c.norm = k.norm;
    c.positions = k.positions;
    c.act = k.act;
    c.bias = k.bias;
    SCOPED_TRACE("d_model " + std::to_string(k.d_model) + ", heads " + std::to_string(k.heads) +
                 ", layers " + std::to_string(k.layers) + ", d_mlp " + std::to_string(k.d_mlp));
    auto m = Model(c, 7 + static_cast<uint64_t>(k.d_model));
    ExpectGreedyMatchesRecomputation(m.get(), k.B, k.T, k.max_len - k.T);
  }
}

TEST(TransformerGenerate, NonCausalModelsRecomputeAndMatchToo) {
  TransformerConfig c = Config(17, 16, 16, 4, 2, 32);
  c.causal = false;
  auto m = Model(c, 3);
  ExpectGreedyMatchesRecomputation(m.get(), 2, 4, 12);
}

TEST(TransformerGenerate, HeadGatesApplyAsInForward) {
  TransformerConfig c = Config(23, 20, 16, 2, 2);
  auto m = Model(c, 11);
  const float gates[] = {1.0f, 0.0f, 0.5f, -1.0f};
  ExpectGreedyMatchesRecomputation(m.get(), 2, 3, 17, TensorView(gates, Shape{2, 2}, 4));
}

TEST(TransformerGenerate, ZeroNewTokensReturnsThePrompt) {
  TransformerConfig c = Config(10, 4, 8, 1, 1);
  auto m = Model(c, 1);
  const std::vector<int32_t> p = {1, 2, 3, 4};
  GenerateOptions o;
  o.max_new_tokens = 0;
  GenerateResult g;
  ASSERT_TRUE(m->Generate({p.data(), 1, 4}, o, &g).ok());
  EXPECT_EQ(g.tokens, p);
  EXPECT_EQ(g.tokens_shape, (Shape{1, 4}));
}

// Sampling: a pure function of the seed; top_k = 1 and a tiny top_p are greedy; each sampled
// token lies in the top_k / top_p set of the logits it was drawn from; seeds differ.
TEST(TransformerGenerate, SamplingFollowsTopKTopPAndTheSeed) {
  TransformerConfig c = Config(40, 48, 16, 2, 1);
  auto m = Model(c, 5);
  const int64_t B = 4, T = 2, n = 46, V = c.vocab_size, W = T + n;
  const std::vector<int32_t> prompt = Prompt(B, T, V, 1);
  const auto run = [&](double temperature, int64_t top_k, double top_p, uint64_t seed) {
    GenerateOptions o;
    o.max_new_tokens = n;
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    o.seed = seed;
    o.keep_logits = true;
    GenerateResult g;
    EXPECT_TRUE(m->Generate({prompt.data(), B, T}, o, &g).ok());
    return g;
  };
  GenerateResult greedy = run(0, 0, 1, 0);
  EXPECT_EQ(run(2.0, 1, 1.0, 9).tokens, greedy.tokens);
  EXPECT_EQ(run(2.0, 0, 1e-9, 9).tokens, greedy.tokens);
  GenerateResult a = run(1.5, 0, 1.0, 1), a2 = run(1.5, 0, 1.0, 1), b = run(1.5, 0, 1.0, 2);
  EXPECT_EQ(a.tokens, a2.tokens);
  EXPECT_NE(a.tokens, b.tokens);
  EXPECT_NE(a.tokens, greedy.tokens);
  // Membership of each drawn token in its step's top-k and nucleus.
  for (int64_t top_k : {int64_t{3}, int64_t{0}}) {
    for (double top_p : {1.0, 0.6}) {
      GenerateResult g = run(0.8, top_k, top_p, 77);
      for (int64_t bb = 0; bb < B; ++bb) {
        for (int64_t s = 0; s < n; ++s) {
          const float* row = g.logits.data() + (bb * n + s) * V;
          std::vector<int> order(static_cast<size_t>(V));
          for (int j = 0; j < V; ++j) order[j] = j;
          std::sort(order.begin(), order.end(), [&](int x, int y) {
            return row[x] != row[y] ? row[x] > row[y] : x < y;
          });
          size_t keep = top_k > 0 ? static_cast<size_t>(top_k) : static_cast<size_t>(V);
          std::vector<double> p(keep);
          double total = 0;
          for (size_t i = 0; i < keep; ++i) {
            total += p[i] = std::exp((row[order[i]] - row[order[0]]) / 0.8);
          }
          double mass = 0;
          size_t nucleus = 0;
          while (nucleus < keep && (nucleus == 0 || mass < top_p * total)) mass += p[nucleus++];
          const int32_t tok = g.tokens[bb * W + T + s];
          const auto at = std::find(order.begin(), order.begin() + nucleus, tok);
          ASSERT_NE(at, order.begin() + nucleus)
              << "token " << tok << " outside the top_k " << top_k << " / top_p " << top_p;
        }
      }
    }
  }
}

// The temperature rule (transformer.h GenerateOptions): a temperature > 0 so small that the
// logits divided by it leave double's range takes the greedy choice. At 1e-320 logit / T was
// inf, exp(inf - inf) NaN, and the draw fell through to the last sorted token: the least likely
// (20 seeds of 20). Temperatures 1e-320, 5e-324 (the smallest double), 1e-300 and the smallest
// normal double, with several seeds, top_k and top_p: the greedy tokens, never the argmin; on a
// model's own logits and on rows of logits from -1e30 to 1e30 with a tie at the max.
TEST(TransformerGenerate, TinyTemperaturesTakeTheGreedyChoice) {
  const double kTiny[] = {1e-320, 5e-324, 1e-300, std::numeric_limits<double>::min()};
  TransformerConfig c = Config(40, 24, 16, 2, 2, 32);
  auto m = Model(c, 3);
  const int64_t B = 3, T = 2, n = 20, V = c.vocab_size, W = T + n;
  const std::vector<int32_t> prompt = Prompt(B, T, V, 2);
  const auto run = [&](Transformer* model, double temperature, uint64_t seed, int64_t top_k,
                       double top_p) {
    GenerateOptions o;
    o.max_new_tokens = n;
    o.temperature = temperature;
    o.seed = seed;
    o.top_k = top_k;
    o.top_p = top_p;
    o.keep_logits = true;
    GenerateResult g;
    const Status s = model->Generate({prompt.data(), B, T}, o, &g);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return g;
  };
  const GenerateResult greedy = run(m.get(), 0.0, 0, 0, 1.0);
  for (double t : kTiny) {
    for (uint64_t seed = 0; seed < 6; ++seed) {
      const GenerateResult g = run(m.get(), t, seed, seed % 2 == 0 ? 0 : 7, seed < 3 ? 1.0 : 0.9);
      EXPECT_EQ(g.tokens, greedy.tokens) << "temperature " << t << ", seed " << seed;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t s = 0; s < n; ++s) {
          const float* row = g.logits.data() + (b * n + s) * V;
          const int32_t argmin = static_cast<int32_t>(std::min_element(row, row + V) - row);
          EXPECT_NE(g.tokens[b * W + T + s], argmin) << "temperature " << t << ", seed " << seed;
        }
      }
    }
  }
  // Logits of +-1e30 (a model whose unembedding is its bias): x / 1e-300 overflows double, so
  // 1e-300 takes the rule too. A tie at the max goes to its lower index, as greedy's does.
  auto rows = Model(c, 4);
  std::vector<float> zero(static_cast<size_t>(V * c.d_model), 0.0f), bias(static_cast<size_t>(V));
  for (int64_t j = 0; j < V; ++j) bias[j] = static_cast<float>((j * 17) % V - V / 2) * 5e28f;
  bias[11] = bias[29] = 1e30f;  // the largest, twice
  bias[5] = -1e30f;             // the least likely
  ASSERT_TRUE(rows->SetParameter("unembed.weight", {zero.data(), {V, c.d_model}, zero.size()}).ok());
  ASSERT_TRUE(rows->SetParameter("unembed.bias", {bias.data(), {V}, bias.size()}).ok());
  for (double t : kTiny) {
    for (uint64_t seed = 0; seed < 6; ++seed) {
      const GenerateResult g = run(rows.get(), t, seed, seed % 2 == 0 ? 0 : 7, 1.0);
      for (int64_t i = 0; i < B * n; ++i) {
        ASSERT_EQ(g.tokens[(i / n) * W + T + i % n], 11) << "temperature " << t << ", seed " << seed;
      }
    }
  }
}

// Generation in steps (GenerateBegin, GenerateContinue): however the steps are split, and with
// Forward, Backward and a refused Forward run between them, the tokens and logits are Generate's
// bit for bit: greedy and sampled, causal and not, learned and sinusoidal positions, with gates
// (whose caller's buffer is overwritten after GenerateBegin: the generation keeps a copy).
TEST(TransformerGenerate, StepsGiveGeneratesBitsHoweverTheyAreSplit) {
  struct Case {
    bool causal;
    PositionKind positions;
    double temperature;
    bool gated;
  };
  const Case cases[] = {
      {true, PositionKind::kLearned, 0.0, false},     {true, PositionKind::kSinusoidal, 0.9, true},
      {false, PositionKind::kLearned, 1.3, false},    {false, PositionKind::kSinusoidal, 0.0, true},
      {true, PositionKind::kNone, 0.7, false},
  };
  for (const Case& k : cases) {
    TransformerConfig c = Config(31, 40, 16, 2, 2, 24);
    c.causal = k.causal;
    c.positions = k.positions;
    SCOPED_TRACE(std::string(k.causal ? "causal" : "non-causal") + ", positions " +
                 std::to_string(static_cast<int>(k.positions)) + ", temperature " +
                 std::to_string(k.temperature));
    auto m = Model(c, 21);
    const int64_t B = 2, T = 3, n = 37, V = c.vocab_size;
    const std::vector<int32_t> prompt = Prompt(B, T, V, 4);
    std::vector<float> gates = {1.0f, 0.5f, -1.0f, 2.0f};
    GenerateOptions o;
    o.max_new_tokens = n;
    o.temperature = k.temperature;
    o.top_k = 9;
    o.seed = 5;
    o.keep_logits = true;
    if (k.gated) o.head_gates = {gates.data(), {2, 2}, gates.size()};
    GenerateResult whole;
    ASSERT_TRUE(m->Generate({prompt.data(), B, T}, o, &whole).ok());
    for (int64_t chunk : {int64_t{1}, int64_t{4}, int64_t{11}, n}) {
      SCOPED_TRACE("chunks of " + std::to_string(chunk));
      GenerateResult g;
      std::vector<float> callers = gates;  // the caller's buffer, overwritten after the call
      GenerateOptions oc = o;
      if (k.gated) oc.head_gates.data = callers.data();
      ASSERT_TRUE(m->GenerateBegin({prompt.data(), B, T}, oc, &g).ok());
      EXPECT_TRUE(m->generating());
      std::fill(callers.begin(), callers.end(), 99.0f);
      bool done = false;
      int calls = 0;
      while (!done) {
        ASSERT_TRUE(m->GenerateContinue(chunk, &g, &done).ok());
        ++calls;
        // Other work between the steps: a forward with every hook, a refused forward (which
        // frees the workspace), a backward.
        TransformerOptions hooked;
        hooked.hooks = TransformerHookNames(c);
        TransformerResult r;
        ASSERT_TRUE(m->Forward({prompt.data(), B, T}, hooked, &r).ok());
        EXPECT_FALSE(m->Forward({prompt.data(), B, c.max_len + 1}, {}, &r).ok());
        std::vector<int32_t> targets(prompt.size(), 1);
        BackwardResult br;
        ASSERT_TRUE(m->Backward({prompt.data(), B, T}, targets.data(), {}, &br).ok());
      }
      EXPECT_FALSE(m->generating());
      EXPECT_EQ(calls, (n + chunk - 1) / chunk);
      EXPECT_EQ(g.tokens, whole.tokens);
      EXPECT_EQ(g.tokens_shape, whole.tokens_shape);
      ASSERT_EQ(g.logits.size(), whole.logits.size());
      EXPECT_EQ(0, std::memcmp(g.logits.data(), whole.logits.data(), g.logits.size() * sizeof(float)));
      // Done: there is nothing to continue.
      EXPECT_EQ(m->GenerateContinue(1, &g, &done).code(), StatusCode::kInvalidArgument);
    }
  }
}

// A weight changed between the steps ends the generation (its KV caches hold the old weights'
// keys): kCancelled, saying why; the model then generates afresh. GenerateCancel ends one; a
// continue without a generation, or with another result, is refused.
TEST(TransformerGenerate, AWeightChangeOrACancelEndsTheGeneration) {
  TransformerConfig c = Config(19, 24, 16, 2, 2, 16);
  auto m = Model(c, 8);
  const std::vector<int32_t> prompt = Prompt(1, 4, c.vocab_size, 1);
  GenerateOptions o;
  o.max_new_tokens = 12;
  GenerateResult whole, g, other;
  ASSERT_TRUE(m->Generate({prompt.data(), 1, 4}, o, &whole).ok());
  bool done = false;
  EXPECT_EQ(m->GenerateContinue(1, &g, &done).code(), StatusCode::kInvalidArgument);
  for (const char* change : {"unembed.bias", "blocks.1.attn.out_proj.bias"}) {
    SCOPED_TRACE(change);
    ASSERT_TRUE(m->GenerateBegin({prompt.data(), 1, 4}, o, &g).ok());
    ASSERT_TRUE(m->GenerateContinue(3, &g, &done).ok());
    EXPECT_EQ(m->GenerateContinue(1, &other, &done).code(), StatusCode::kInvalidArgument);
    TensorView v;
    ASSERT_TRUE(m->GetParameter(change, &v).ok());
    const std::vector<float> same(v.data, v.data + v.size);  // the same values, set again
    ASSERT_TRUE(m->SetParameter(change, {same.data(), v.shape, same.size()}).ok());
    const Status s = m->GenerateContinue(1, &g, &done);
    EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
    EXPECT_NE(s.message().find("weights changed"), std::string::npos) << s.message();
    EXPECT_FALSE(m->generating());
    EXPECT_TRUE(g.tokens.empty());
  }
  ASSERT_TRUE(m->GenerateBegin({prompt.data(), 1, 4}, o, &g).ok());
  ASSERT_TRUE(m->GenerateContinue(5, &g, &done).ok());
  m->GenerateCancel();
  EXPECT_FALSE(m->generating());
  EXPECT_EQ(m->GenerateContinue(1, &g, &done).code(), StatusCode::kInvalidArgument);
  GenerateResult again;
  ASSERT_TRUE(m->Generate({prompt.data(), 1, 4}, o, &again).ok());
  EXPECT_EQ(again.tokens, whole.tokens);
}

// Sinusoidal positions: the table grows geometrically and keeps its rows, so generating to
// max_len computes each row once (it used to regrow by one row per step and compute the whole
// table again: sum over the steps of the context, 8.4 million rows here, and 1 ms per token at
// context 4000). The rows are Sinusoid's whichever call computed them: the positions a fresh
// model's forward gives, bit for bit.
TEST(TransformerGenerate, SinusoidalGenerationComputesEachTableRowOnce) {
  TransformerConfig c = Config(11, 4096, 8, 1, 1);
  c.positions = PositionKind::kSinusoidal;
  auto m = Model(c, 2);
  const std::vector<int32_t> prompt = {1, 2, 3};
  GenerateOptions o;
  o.max_new_tokens = c.max_len - 3;
  GenerateResult g;
  ASSERT_TRUE(m->Generate({prompt.data(), 1, 3}, o, &g).ok());
  EXPECT_EQ(m->sinusoid_rows_computed(), c.max_len);  // 3, 6, 12, ..., 3072, 4096: each once
  TransformerOptions pos;
  pos.hooks = {"hook_pos_embed"};
  TransformerResult grown, fresh;
  ASSERT_TRUE(m->Forward({g.tokens.data(), 1, c.max_len}, pos, &grown).ok());
  auto other = Model(c, 2);
  ASSERT_TRUE(other->Forward({g.tokens.data(), 1, c.max_len}, pos, &fresh).ok());
  EXPECT_EQ(other->sinusoid_rows_computed(), c.max_len);
  ASSERT_EQ(grown.hooks[0].second.data.size(), fresh.hooks[0].second.data.size());
  EXPECT_EQ(0, std::memcmp(grown.hooks[0].second.data.data(), fresh.hooks[0].second.data.data(),
                           fresh.hooks[0].second.data.size() * sizeof(float)));
}

TEST(TransformerGenerate, BadOptionsAreRefusedNamingThem) {
  TransformerConfig c = Config(10, 8, 8, 2, 1);
  auto m = Model(c, 1);
  const std::vector<int32_t> p = {1, 2, 3};
  const std::vector<int32_t> bad = {1, 10, 3};
  const auto refuse = [&](const std::vector<int32_t>& tokens, GenerateOptions o, Arg arg,
                          const std::string& needle) {
    GenerateResult g;
    const Status s = m->Generate({tokens.data(), 1, 3}, o, &g);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.argument(), arg) << s.ToString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  };
  GenerateOptions o;
  refuse(bad, o, Arg::kPrompt, "token [0, 1] is 10");
  o.max_new_tokens = 6;
  refuse(p, o, Arg::kMaxNewTokens, "[0, 5]");
  o.max_new_tokens = -1;
  refuse(p, o, Arg::kMaxNewTokens, "got -1");
  o = GenerateOptions();
  o.temperature = -0.5;
  refuse(p, o, Arg::kTemperature, ">= 0");
  o.temperature = std::nan("");
  refuse(p, o, Arg::kTemperature, ">= 0");
  o = GenerateOptions();
  o.top_k = -2;
  refuse(p, o, Arg::kTopK, "got -2");
  o = GenerateOptions();
  o.top_p = 0.0;
  refuse(p, o, Arg::kTopP, "(0, 1]");
  o.top_p = 1.5;
  refuse(p, o, Arg::kTopP, "(0, 1]");
  o = GenerateOptions();
  const float gates[] = {1, 1, 1};
  o.head_gates = TensorView(gates, Shape{3}, 3);
  refuse(p, o, Arg::kHeadGates, "[1, 2]");
  // The model still works after every refusal.
  GenerateResult g;
  GenerateOptions ok;
  ok.max_new_tokens = 5;
  ASSERT_TRUE(m->Generate({p.data(), 1, 3}, ok, &g).ok());
  EXPECT_EQ(g.tokens.size(), 8u);
}

// tests/golden/generate: the reference module's greedy tokens with PyTorch (the whole sequence
// recomputed in float64 at every step; every step's margin >= 1e-3, so float32 with a KV cache
// must choose the same), for grouped-query / multi-query attention, both RoPE layouts, ALiBi,
// windows shorter than the sequence and attention sinks.
TEST(TransformerGenerate, GreedyTokensArePyTorchsOnEveryVariant) {
  const std::string dir = std::string(HEADSCOPE_GOLDEN_DIR) + "/generate";
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 9u) << dir << " (tools/make_generate_golden.py)";
  size_t tokens_checked = 0;
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json doc = nlohmann::json::parse(text.str());
    ASSERT_EQ(doc.at("kind"), "generate");
    std::unique_ptr<Transformer> m;
    const Status s = test::TransformerFromJson(doc, &m);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<int32_t> prompt, want;
    std::vector<int64_t> prompt_shape, want_shape;
    test::FlattenJson(doc.at("prompt"), &prompt, &prompt_shape);
    test::FlattenJson(doc.at("expected").at("tokens"), &want, &want_shape);
    GenerateOptions o;
    o.max_new_tokens = doc.at("max_new_tokens").get<int64_t>();
    GenerateResult g;
    ASSERT_TRUE(m->Generate({prompt.data(), prompt_shape[0], prompt_shape[1]}, o, &g).ok());
    ASSERT_EQ(g.tokens_shape, (Shape{want_shape[0], want_shape[1]}));
    EXPECT_EQ(g.tokens, want);
    tokens_checked += static_cast<size_t>(want_shape[0] * o.max_new_tokens);
  }
  std::printf("[ generate goldens ] %zu files, %zu generated tokens equal PyTorch's\n",
              files.size(), tokens_checked);
}

}  // namespace
}  // namespace headscope
