// The Transformer (transformer.h) against the golden cases of tests/golden/transformer/, written by
// tools/make_transformer_golden.py from the reference module in float64: logits, loss and every
// hook within 1e-4 relative, for every config of the set; the hooked attention patterns are the
// layer's MultiheadAttention trace; repeated calls of a shape allocate nothing new; bad input is
// refused naming the argument and leaves the model working.
#include "headscope/transformer.h"

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

#include "json_config.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace headscope {
namespace {

using nlohmann::json;
constexpr double kTolerance = 1e-4;

std::vector<std::string> TransformerGoldenFiles() {
  std::vector<std::string> files;
  const std::string dir = std::string(HEADSCOPE_GOLDEN_DIR) + "/transformer";
  if (!std::filesystem::exists(dir)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

json ReadJson(const std::string& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

// Nested arrays of numbers (or "inf", "-inf", "nan") flattened, with their shape.
void Flatten(const json& j, std::vector<float>* out, std::vector<int64_t>* shape, size_t depth = 0) {
  if (j.is_array()) {
    if (shape->size() == depth) shape->push_back(static_cast<int64_t>(j.size()));
    for (const json& e : j) Flatten(e, out, shape, depth + 1);
  } else if (j.is_string()) {
    const std::string s = j.get<std::string>();
    out->push_back(s == "nan" ? std::numeric_limits<float>::quiet_NaN()
                              : s == "inf" ? std::numeric_limits<float>::infinity()
                                           : -std::numeric_limits<float>::infinity());
  } else {
    out->push_back(static_cast<float>(j.get<double>()));
  }
}

// (Through the schema: tests/cpp/json_config.h.)
TransformerConfig ConfigOf(const json& j) {
  return test::ConfigFromJson<TransformerConfig>(TransformerConfigSchema(), j);
}

struct GoldenCase {
  std::string file;
  json doc;
  TransformerConfig config;
  std::unique_ptr<Transformer> model;
  std::vector<int32_t> tokens;
  int64_t batch = 1, length = 0;
  std::vector<float> gates;
};

void Load(const std::string& file, GoldenCase* g) {
  g->file = file;
  g->doc = ReadJson(file);
  ASSERT_EQ(g->doc.at("kind"), "transformer") << file;
  g->config = ConfigOf(g->doc.at("config"));
  const Status s = test::TransformerFromJson(g->doc, &g->model);  // (config, state_dict)
  ASSERT_TRUE(s.ok()) << file << ": " << s.ToString();
  const json& tokens = g->doc.at("inputs").at("tokens");
  const bool batched = tokens.size() > 0 && tokens[0].is_array();
  g->batch = batched ? static_cast<int64_t>(tokens.size()) : 1;
  for (const json& row : batched ? tokens : json::array({tokens})) {
    g->length = static_cast<int64_t>(row.size());
    for (const json& t : row) g->tokens.push_back(t.get<int32_t>());
  }
  const json& inputs = g->doc.at("inputs");
  if (inputs.contains("head_gates") && !inputs.at("head_gates").is_null()) {
    std::vector<int64_t> dims;
    Flatten(inputs.at("head_gates"), &g->gates, &dims);
  }
}

TEST(TransformerGolden, TheSetCoversEveryOption) {
  const std::vector<std::string> files = TransformerGoldenFiles();
  ASSERT_GE(files.size(), 30u) << "tests/golden/transformer/ (tools/make_transformer_golden.py)";
  bool norm[3] = {}, pos[5] = {}, causal[2] = {}, act[2] = {}, bias[2] = {}, mlp[2] = {};
  bool tied[2] = {};  // tie_embeddings with and without an MLP
  bool kv[3] = {};    // n_kv_heads 1 (multi-query), 2, n_heads / 2 > 2
  // positions rope: both layouts, causal and not; partial rotary; grouped-query and multi-query;
  // T = 1 and T = max_len; unbatched.
  bool rope_layout[2] = {}, rope_causal[2] = {}, rope_partial = false, rope_gqa = false;
  bool rope_mqa = false, rope_t1 = false, rope_tmax = false, rope_unbatched = false;
  bool gates = false, targets = false, t1 = false, t_max = false;
  // ALiBi with 3, 6, 8 and 12 heads; windows 1, 2, T - 1, T (causal), bidirectional; ALiBi with
  // a window, with grouped-query attention, with T = 1.
  bool alibi_heads[4] = {}, window[4] = {}, bidirectional = false, alibi_window = false;
  bool alibi_gqa = false, alibi_t1 = false;
  int64_t max_layers = 0, max_heads = 0;
  for (const std::string& f : files) {
    const json doc = ReadJson(f);
    const TransformerConfig c = ConfigOf(doc.at("config"));
    norm[static_cast<int>(c.norm)] = pos[static_cast<int>(c.positions)] = true;
    causal[c.causal] = act[static_cast<int>(c.act)] = bias[c.bias] = mlp[c.d_mlp > 0] = true;
    if (c.tie_embeddings) tied[c.d_mlp > 0] = true;
    if (c.n_kv_heads > 0 && c.n_kv_heads < c.n_heads) {
      kv[0] |= c.n_kv_heads == 1;
      kv[1] |= c.n_kv_heads == 2;
      kv[2] |= c.n_kv_heads > 2 && 2 * c.n_kv_heads == c.n_heads;
    }
    max_layers = std::max(max_layers, c.n_layers);
    max_heads = std::max(max_heads, c.n_heads);
    const json& in = doc.at("inputs");
    gates = gates || (in.contains("head_gates") && !in.at("head_gates").is_null());
    targets = targets || (in.contains("targets") && !in.at("targets").is_null());
    const json& tok = in.at("tokens");
    const size_t T = tok.size() > 0 && tok[0].is_array() ? tok[0].size() : tok.size();
    t1 = t1 || T == 1;
    t_max = t_max || static_cast<int64_t>(T) == c.max_len;
    const bool alibi = c.positions == PositionKind::kAlibi;
    const int64_t w = c.attn_window, Tn = static_cast<int64_t>(T);
    if (alibi) {
      const int64_t counts[4] = {3, 6, 8, 12};
      for (int i = 0; i < 4; ++i) alibi_heads[i] |= c.n_heads == counts[i];
      alibi_window |= w > 0;
      alibi_gqa |= c.n_kv_heads > 0 && c.n_kv_heads < c.n_heads;
      alibi_t1 |= T == 1;
    }
    if (w > 0 && c.causal && Tn > 2) {
      window[0] |= w == 1;
      window[1] |= w == 2;
      window[2] |= w == Tn - 1;
      window[3] |= w == Tn;
    }
    bidirectional |= w > 0 && !c.causal;
    if (c.positions == PositionKind::kRope) {
      rope_layout[static_cast<int>(c.rope_layout)] = rope_causal[c.causal] = true;
      rope_partial = rope_partial || RopeDims(c) < c.d_model / c.n_heads;
      rope_gqa = rope_gqa || (c.n_kv_heads > 1 && c.n_kv_heads < c.n_heads);
      rope_mqa = rope_mqa || (c.n_kv_heads == 1 && c.n_heads > 1);
      rope_t1 = rope_t1 || T == 1;
      rope_tmax = rope_tmax || static_cast<int64_t>(T) == c.max_len;
      rope_unbatched = rope_unbatched || !(tok.size() > 0 && tok[0].is_array());
    }
  }
  for (bool b : alibi_heads) EXPECT_TRUE(b) << "ALiBi with 3, 6, 8 and 12 heads";
  for (bool b : window) EXPECT_TRUE(b) << "windows 1, 2, T - 1 and T";
  EXPECT_TRUE(bidirectional && alibi_window && alibi_gqa && alibi_t1);
  for (bool b : rope_layout) EXPECT_TRUE(b) << "rope: half and interleaved";
  for (bool b : rope_causal) EXPECT_TRUE(b) << "rope: causal and not";
  EXPECT_TRUE(rope_partial && rope_gqa && rope_mqa && rope_t1 && rope_tmax && rope_unbatched)
      << "rope: partial rotary, GQA, MQA, T = 1, T = max_len, unbatched";
  for (bool b : norm) EXPECT_TRUE(b) << "norm pre / post / none";
  for (bool b : pos) EXPECT_TRUE(b) << "positions learned / sinusoidal / none / alibi / rope";
  for (bool b : causal) EXPECT_TRUE(b) << "causal";
  for (bool b : act) EXPECT_TRUE(b) << "gelu / relu";
  for (bool b : bias) EXPECT_TRUE(b) << "bias";
  for (bool b : mlp) EXPECT_TRUE(b) << "d_mlp 0 and > 0";
  for (bool b : tied) EXPECT_TRUE(b) << "tie_embeddings with d_mlp 0 and > 0";
  for (bool b : kv) EXPECT_TRUE(b) << "n_kv_heads 1, 2 and n_heads / 2";
  EXPECT_TRUE(gates && targets && t1 && t_max);
  EXPECT_GE(max_layers, 4);
  EXPECT_GE(max_heads, 8);
}

TEST(TransformerGolden, LogitsLossAndEveryHookMatchPyTorch) {
  double worst = 0;
  std::string worst_at;
  for (const std::string& file : TransformerGoldenFiles()) {
    SCOPED_TRACE(file);
    GoldenCase g;
    ASSERT_NO_FATAL_FAILURE(Load(file, &g));
    const json& expected = g.doc.at("expected");
    TransformerOptions options;
    if (expected.contains("hooks")) {
      for (const auto& [name, value] : expected.at("hooks").items()) options.hooks.push_back(name);
    }
    if (!g.gates.empty()) {
      options.head_gates = {g.gates.data(), {g.config.n_layers, g.config.n_heads}, g.gates.size()};
    }
    TransformerResult r;
    const Status s = g.model->Forward({g.tokens.data(), g.batch, g.length}, options, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    auto compare = [&](const std::string& what, const float* got, size_t n, const json& want) {
      std::vector<float> w;
      std::vector<int64_t> dims;
      Flatten(want, &w, &dims);
      ASSERT_EQ(n, w.size()) << what;
      const double e = test::RelativeError(got, w.data(), n);
      EXPECT_LE(e, kTolerance) << what;
      if (e > worst) {
        worst = e;
        worst_at = file + " " + what;
      }
    };
    compare("logits", r.logits.data(), r.logits.size(), expected.at("logits"));
    for (const auto& [name, hook] : r.hooks) {
      compare(name, hook.data.data(), hook.data.size(), expected.at("hooks").at(name));
    }
    const json& inputs = g.doc.at("inputs");
    if (inputs.contains("targets") && !inputs.at("targets").is_null()) {
      std::vector<float> t;
      std::vector<int64_t> dims;
      Flatten(inputs.at("targets"), &t, &dims);
      std::vector<int32_t> targets(t.begin(), t.end());
      double loss = 0;
      const Status ls = Transformer::Loss(r.logits.data(), g.batch * g.length,
                                          g.config.vocab_size, targets.data(), &loss);
      if (expected.contains("loss") && !expected.at("loss").is_null()) {
        ASSERT_TRUE(ls.ok()) << ls.ToString();
        const double want = expected.at("loss").get<double>();
        EXPECT_LE(std::fabs(loss - want), kTolerance * std::max(1.0, std::fabs(want)));
      }
    }
  }
  std::printf("transformer goldens: worst relative error %.3g (%s)\n", worst, worst_at.c_str());
}

// A pattern hook is what that layer's MultiheadAttention trace computes; a forward without hooks
// gives the same logits as one with every hook, bit for bit; a second call allocates nothing.
TEST(Transformer, HooksCostNothingWhenNotAskedAndChangeNoNumber) {
  const std::vector<std::string> files = TransformerGoldenFiles();
  ASSERT_FALSE(files.empty());
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    GoldenCase g;
    ASSERT_NO_FATAL_FAILURE(Load(file, &g));
    TransformerOptions all;
    all.hooks = TransformerHookNames(g.config);
    TransformerResult plain, hooked;
    const TokenView tv{g.tokens.data(), g.batch, g.length};
    ASSERT_TRUE(g.model->Forward(tv, TransformerOptions(), &plain).ok());
    ASSERT_TRUE(g.model->Forward(tv, all, &hooked).ok());
    EXPECT_TRUE(plain.hooks.empty());
    ASSERT_EQ(plain.logits.size(), hooked.logits.size());
    EXPECT_EQ(0, std::memcmp(plain.logits.data(), hooked.logits.data(),
                             plain.logits.size() * sizeof(float)));
    ASSERT_EQ(hooked.hooks.size(), all.hooks.size());
    const float* before = plain.logits.data();
    ASSERT_TRUE(g.model->Forward(tv, TransformerOptions(), &plain).ok());
    EXPECT_EQ(before, plain.logits.data()) << "a repeated call reuses its buffers";
  }
}

// The hooked pattern of layer l is, bit for bit, what a standalone MultiheadAttention with that
// layer's weights computes (Trace, batch_first, is_causal, alibi and window as the model, the
// layer's gates) on the layer's input. The input is hook_resid_pre where the block has no ln1 before its attention
// (norm post or none); with norm pre it is ln1(hook_resid_pre), which the model does not hook.
TEST(Transformer, HookedPatternsAreTheLayersMultiheadAttentionTrace) {
  int checked = 0;
  for (const std::string& file : TransformerGoldenFiles()) {
    GoldenCase g;
    ASSERT_NO_FATAL_FAILURE(Load(file, &g));
    if (g.config.norm == NormPlacement::kPre) continue;
    SCOPED_TRACE(file);
    const int64_t L = g.config.n_layers, H = g.config.n_heads, D = g.config.d_model;
    TransformerOptions o;
    for (int64_t l = 0; l < L; ++l) {
      o.hooks.push_back("blocks." + std::to_string(l) + ".hook_resid_pre");
      o.hooks.push_back("blocks." + std::to_string(l) + ".attn.hook_pattern");
    }
    if (!g.gates.empty()) o.head_gates = {g.gates.data(), {L, H}, g.gates.size()};
    TransformerResult r;
    ASSERT_TRUE(g.model->Forward({g.tokens.data(), g.batch, g.length}, o, &r).ok());
    for (int64_t l = 0; l < L; ++l) {
      MhaConfig mc;
      mc.embed_dim = D;
      mc.num_heads = H;
      mc.num_kv_heads = g.config.n_kv_heads;
      mc.rope_dims = RopeDims(g.config);  // (positions rope: the layer turns q and k)
      mc.rope_layout = g.config.rope_layout;
      mc.rope_base = g.config.rope_base;
      mc.attn_sinks = g.config.attn_sinks;  // (the layer's sinks are the module's parameter)
      mc.bias = g.config.bias;
      mc.batch_first = true;
      std::unique_ptr<MultiheadAttention> mha;
      ASSERT_TRUE(MultiheadAttention::Create(mc, &mha).ok());
      const std::string b = "blocks." + std::to_string(l) + ".attn.";
      for (const char* key :
           {"in_proj_weight", "in_proj_bias", "sinks", "out_proj.weight", "out_proj.bias"}) {
        TensorView v;
        if (g.model->GetParameter(b + key, &v).ok()) {
          ASSERT_TRUE(mha->SetParameter(key, v).ok());
        }
      }
      const TraceTensor& x = r.hooks[static_cast<size_t>(2 * l)].second;
      const TensorView in{x.data.data(), x.shape, x.data.size()};
      ForwardOptions fo;
      fo.is_causal = g.config.causal;
      fo.alibi = g.config.positions == PositionKind::kAlibi;  // the model's position options
      fo.window = g.config.attn_window;
      if (!g.gates.empty()) fo.head_gates = {g.gates.data() + l * H, {H}, static_cast<size_t>(H)};
      AttentionTrace t;
      ASSERT_TRUE(mha->Trace(in, in, in, fo, &t).ok());
      const TraceTensor& pattern = r.hooks[static_cast<size_t>(2 * l + 1)].second;
      ASSERT_EQ(pattern.shape, t.weights.shape) << "layer " << l;
      EXPECT_EQ(0, std::memcmp(pattern.data.data(), t.weights.data.data(),
                               pattern.data.size() * sizeof(float)))
          << "layer " << l;
      ++checked;
    }
  }
  EXPECT_GE(checked, 10) << "too few layers without ln1 before attention among the goldens";
}

// GetParameter (the stateDict() export) gives back every loaded entry, bit for bit, under the
// golden's keys, which are TransformerParams' (in the reference's state_dict order); unknown keys
// and keys not loaded yet are refused, naming the key.
TEST(Transformer, GetParameterReturnsEveryLoadedEntryBitForBit) {
  const std::vector<std::string> files = TransformerGoldenFiles();
  ASSERT_FALSE(files.empty());
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    GoldenCase g;
    ASSERT_NO_FATAL_FAILURE(Load(file, &g));
    const json& sd = g.doc.at("state_dict");
    const std::vector<TransformerParamSpec> specs = TransformerParams(g.config);
    ASSERT_EQ(specs.size(), sd.size());
    for (const TransformerParamSpec& p : specs) {
      ASSERT_TRUE(sd.contains(p.name)) << p.name;
      std::vector<float> want;
      std::vector<int64_t> dims;
      Flatten(sd.at(p.name), &want, &dims);
      TensorView got;
      const Status s = g.model->GetParameter(p.name, &got);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(got.shape, p.shape) << p.name;
      ASSERT_EQ(got.size, want.size()) << p.name;
      EXPECT_EQ(0, std::memcmp(got.data, want.data(), want.size() * sizeof(float))) << p.name;
      // Written back, it is the same model: SetParameter(GetParameter(k)) changes no bit.
      const std::vector<float> copy(got.data, got.data + got.size);
      ASSERT_TRUE(g.model->SetParameter(p.name, {copy.data(), p.shape, copy.size()}).ok());
    }
    // The file lists the keys in the reference's state_dict() order (make_transformer_golden.py
    // asserts it); json sorts them, ordered_json keeps them: TransformerParams has that order.
    std::ifstream in(file);
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(in);
    size_t i = 0;
    for (const auto& [name, value] : ordered.at("state_dict").items()) {
      ASSERT_LT(i, specs.size());
      EXPECT_EQ(name, specs[i++].name);
    }
  }

  GoldenCase g;
  ASSERT_NO_FATAL_FAILURE(Load(files[0], &g));
  TensorView v;
  for (const char* bad : {"bogus", "tok_embed", "blocks.99.attn.in_proj_weight",
                          "blocks.0.attn.bogus", "blocks.01.attn.in_proj_weight",
                          "blocks.0.attn.bias_k", "attn.in_proj_weight", ""}) {
    const Status s = g.model->GetParameter(bad, &v);
    EXPECT_EQ(s.code(), StatusCode::kUnknownParameter) << bad;
    EXPECT_EQ(s.argument(), Arg::kStateDict) << bad;
    EXPECT_NE(s.message().find("state_dict['" + std::string(bad) + "']: unknown key"),
              std::string::npos)
        << s.message();
  }
  // A fresh model has nothing to give; a split projection loads its rows of in_proj_weight only.
  std::unique_ptr<Transformer> fresh;
  ASSERT_TRUE(Transformer::Create(g.config, &fresh).ok());
  for (const TransformerParamSpec& p : TransformerParams(g.config)) {
    const Status s = fresh->GetParameter(p.name, &v);
    EXPECT_EQ(s.code(), StatusCode::kMissingParameter) << p.name;
    EXPECT_NE(s.message().find("state_dict['" + p.name + "']: not loaded"), std::string::npos)
        << s.message();
  }
  const int64_t D = g.config.d_model;
  std::vector<float> q(static_cast<size_t>(D * D));
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i) * 0.25f;
  const TensorView qv{q.data(), {D, D}, q.size()};
  ASSERT_TRUE(fresh->SetParameter("blocks.0.attn.q_proj_weight", qv).ok());
  ASSERT_TRUE(fresh->GetParameter("blocks.0.attn.q_proj_weight", &v).ok());
  EXPECT_EQ(v.shape, (Shape{D, D}));
  EXPECT_EQ(0, std::memcmp(v.data, q.data(), q.size() * sizeof(float)));
  EXPECT_EQ(fresh->GetParameter("blocks.0.attn.in_proj_weight", &v).code(),
            StatusCode::kMissingParameter);
  EXPECT_EQ(fresh->GetParameter("blocks.0.attn.k_proj_weight", &v).code(),
            StatusCode::kMissingParameter);
}

TEST(Transformer, BadInputIsRefusedNamingTheArgumentAndTheModelKeepsWorking) {
  const std::vector<std::string> files = TransformerGoldenFiles();
  ASSERT_FALSE(files.empty());
  GoldenCase g;
  ASSERT_NO_FATAL_FAILURE(Load(files[0], &g));
  TransformerResult want;
  const TokenView tv{g.tokens.data(), g.batch, g.length};
  ASSERT_TRUE(g.model->Forward(tv, TransformerOptions(), &want).ok());
  const auto still_works = [&] {
    TransformerResult r;
    ASSERT_TRUE(g.model->Forward(tv, TransformerOptions(), &r).ok());
    EXPECT_EQ(0, std::memcmp(r.logits.data(), want.logits.data(), r.logits.size() * sizeof(float)));
  };
  TransformerResult scratch;  // what the refused calls write into (the model is checked after)
  std::vector<int32_t> bad = g.tokens;
  bad.back() = static_cast<int32_t>(g.config.vocab_size);
  Status s = g.model->Forward({bad.data(), g.batch, g.length}, TransformerOptions(), &scratch);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.argument(), Arg::kTokens);
  EXPECT_NE(s.message().find("expected an integer in [0, "), std::string::npos) << s.message();
  bad.back() = -1;
  EXPECT_EQ(g.model->Forward({bad.data(), g.batch, g.length}, TransformerOptions(), &scratch).code(),
            StatusCode::kInvalidArgument);
  std::vector<int32_t> long_tokens(static_cast<size_t>(g.config.max_len + 1), 0);
  s = g.model->Forward({long_tokens.data(), 1, g.config.max_len + 1}, TransformerOptions(), &scratch);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
  EXPECT_NE(s.message().find("max_len"), std::string::npos) << s.message();
  TransformerOptions hooks;
  hooks.hooks = {"blocks.0.hook_resid_pre", "blocks.99.hook_resid_pre"};
  s = g.model->Forward(tv, hooks, &scratch);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[1]: unknown hook 'blocks.99.hook_resid_pre'"), std::string::npos)
      << s.message();
  const std::vector<float> w(4, 0.5f);
  s = g.model->SetParameter("blocks.0.attn.bogus", {w.data(), {4}, 4});
  EXPECT_EQ(s.code(), StatusCode::kUnknownParameter);
  s = g.model->SetParameter("tok_embed.weight", {w.data(), {4}, 4});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
  EXPECT_NE(s.message().find("state_dict['tok_embed.weight']: expected shape"), std::string::npos)
      << s.message();
  s = g.model->SetParameter("blocks.0.attn.out_proj.weight", {w.data(), {4}, 4});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
  EXPECT_NE(s.message().find("state_dict['blocks.0.attn.out_proj.weight']: expected shape"),
            std::string::npos)
      << s.message();
  still_works();

  TransformerConfig bad_config = g.config;
  bad_config.n_heads = bad_config.d_model + 1;
  std::unique_ptr<Transformer> none;
  EXPECT_EQ(Transformer::Create(bad_config, &none).code(), StatusCode::kInvalidArgument);
  // A fresh model refuses to compute until every entry is loaded, naming what is missing.
  std::unique_ptr<Transformer> fresh;
  ASSERT_TRUE(Transformer::Create(g.config, &fresh).ok());
  s = fresh->Forward(tv, TransformerOptions(), &scratch);
  EXPECT_EQ(s.code(), StatusCode::kMissingParameter);
  EXPECT_NE(s.message().find("tok_embed.weight"), std::string::npos) << s.message();
  // Targets: all ignored, or out of range.
  std::vector<int32_t> ignored(g.tokens.size(), -100);
  double loss = 0;
  EXPECT_EQ(Transformer::Loss(want.logits.data(), g.batch * g.length, g.config.vocab_size,
                              ignored.data(), &loss)
                .argument(),
            Arg::kTargets);
}

}  // namespace
}  // namespace headscope
