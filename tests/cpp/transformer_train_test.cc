// Training of the Transformer (transformer.h: Backward, TrainStep) against PyTorch: the golden
// cases of tests/golden/train/, written by tools/make_train_golden.py from the reference module
// with float64 autograd: the loss, the gradient of every parameter and of every head gate within
// 1e-4 relative per tensor, and the parameters after 5 AdamW / SGD steps (with and without
// clipping and weight decay) within 1e-4; against the float64 reference backward
// (reference_transformer.h, itself checked against finite differences) on 200 random configs;
// the backward's forward is Forward's bits; the gradients do not depend on what ran before; bad
// input is refused naming the argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "headscope/kernels/rowwise.h"
#include "headscope/reference_transformer.h"
#include "headscope/transformer.h"
#include "json_config.h"
#include "nlohmann/json.hpp"

namespace headscope {
namespace {

using nlohmann::json;
constexpr double kTolerance = 1e-4;

std::string GoldenDir() {
  const char* dir = std::getenv("HEADSCOPE_TRAIN_GOLDEN_DIR");  // a regenerated set, elsewhere
  return dir != nullptr ? dir : std::string(HEADSCOPE_GOLDEN_DIR) + "/train";
}

std::vector<std::string> GoldenFiles() {
  std::vector<std::string> files;
  if (!std::filesystem::exists(GoldenDir())) return files;
  for (const auto& entry : std::filesystem::directory_iterator(GoldenDir())) {
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

// (Through the schema: tests/cpp/json_config.h.)
TransformerConfig ConfigOf(const json& j) {
  return test::ConfigFromJson<TransformerConfig>(TransformerConfigSchema(), j);
}

struct Batch {
  std::vector<int32_t> tokens, targets;
  int64_t batch = 0, length = 0;
  TokenView view() const { return {tokens.data(), batch, length}; }
};

Batch BatchOf(const json& tokens, const json& targets) {
  Batch b;
  b.batch = static_cast<int64_t>(tokens.size());
  b.length = static_cast<int64_t>(tokens.at(0).size());
  test::FlattenJson(tokens, &b.tokens);
  test::FlattenJson(targets, &b.targets);
  return b;
}

std::unique_ptr<Transformer> ModelOf(const json& doc) {
  std::unique_ptr<Transformer> model;
  const Status s = test::TransformerFromJson(doc, &model);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return s.ok() ? std::move(model) : nullptr;
}

// max |got - want| / max(max |want|, floor).
double Error(const float* got, const std::vector<double>& want, double floor) {
  double diff = 0, scale = floor;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return diff / scale;
}

struct Worst {
  double error = 0;
  std::string where;
  void Note(double e, const std::string& w) {
    if (e > error) {
      error = e;
      where = w;
    }
  }
};

TEST(TransformerTrainGolden, TheSetCoversEveryStageAndOptimizer) {
  const std::vector<std::string> files = GoldenFiles();
  ASSERT_GE(files.size(), 30u) << GoldenDir() << " (tools/make_train_golden.py)";
  bool norm[3] = {}, pos[5] = {}, causal[2] = {}, act[2] = {}, bias[2] = {}, mlp[2] = {};
  bool window = false;  // attn_window (pos[3]: ALiBi)
  bool rope_layout[2] = {};  // positions rope, both layouts
  bool gates = false, adamw = false, adamw_clip = false, sgd = false, sgd_clip = false;
  bool tied_decay = false;  // tie_embeddings under AdamW with weight decay
  bool mqa = false, gqa = false;  // n_kv_heads 1 and 1 < n_kv_heads < n_heads
  bool sinks[2] = {};  // attn_sinks, causal and bidirectional
  for (const std::string& f : files) {
    const json doc = ReadJson(f);
    const TransformerConfig c = ConfigOf(doc.at("config"));
    norm[static_cast<int>(c.norm)] = pos[static_cast<int>(c.positions)] = true;
    causal[c.causal] = act[static_cast<int>(c.act)] = bias[c.bias] = mlp[c.d_mlp > 0] = true;
    gates = gates || !doc.at("head_gates").is_null();
    window = window || c.attn_window > 0;
    mqa = mqa || (c.n_kv_heads == 1 && c.n_heads > 1);
    gqa = gqa || (c.n_kv_heads > 1 && c.n_kv_heads < c.n_heads);
    if (c.attn_sinks) sinks[c.causal] = true;
    if (c.positions == PositionKind::kRope) rope_layout[static_cast<int>(c.rope_layout)] = true;
    for (const json& run : doc.at("runs")) {
      const json& o = run.at("optimizer");
      const bool clip = o.at("clip_grad_norm").get<double>() > 0;
      (o.at("type") == "adamw" ? (clip ? adamw_clip : adamw) : (clip ? sgd_clip : sgd)) = true;
      tied_decay = tied_decay || (c.tie_embeddings && o.at("type") == "adamw" &&
                                  o.at("weight_decay").get<double>() > 0);
    }
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(norm[i] && pos[i]) << i;
  EXPECT_TRUE(pos[3] && window) << "ALiBi and sliding-window cases";
  EXPECT_TRUE(pos[static_cast<int>(PositionKind::kRope)] && rope_layout[0] && rope_layout[1])
      << "positions rope, both layouts";
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(causal[i] && act[i] && bias[i] && mlp[i]) << i;
  EXPECT_TRUE(gates && adamw && adamw_clip && sgd && sgd_clip);
  EXPECT_TRUE(tied_decay) << "a tie_embeddings case with AdamW weight decay";
  EXPECT_TRUE(mqa && gqa) << "multi-query and grouped-query cases (n_kv_heads)";
  EXPECT_TRUE(sinks[0] && sinks[1]) << "attention sinks, causal and bidirectional";
}

TEST(TransformerTrainGolden, LossGradientsAndGateGradientsMatchPyTorch) {
  const std::vector<std::string> files = GoldenFiles();
  ASSERT_FALSE(files.empty());
  Worst worst, worst_gate;
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    const json doc = ReadJson(f);
    std::unique_ptr<Transformer> model = ModelOf(doc);
    ASSERT_NE(model, nullptr);
    const Batch b = BatchOf(doc.at("tokens"), doc.at("targets"));
    std::vector<float> gates;
    if (!doc.at("head_gates").is_null()) test::FlattenJson(doc.at("head_gates"), &gates);
    BackwardOptions o;
    o.head_gate_grads = true;
    const TransformerConfig& c = model->config();
    if (!gates.empty()) o.head_gates = {gates.data(), {c.n_layers, c.n_heads}, gates.size()};
    BackwardResult r;
    const Status s = model->Backward(b.view(), b.targets.data(), o, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const double loss = doc.at("loss").get<double>();
    EXPECT_NEAR(r.loss, loss, 1e-5 * std::max(1.0, std::abs(loss)));
    // The floor: a tensor whose gradient is zero in exact arithmetic (the key bias, softmax
    // being invariant to it) is judged on the scale of the model's gradients, where float32
    // leaves rounding noise.
    double scale = 0;
    for (const auto& [name, value] : doc.at("grads").items()) {
      std::vector<double> want;
      test::FlattenJson(value, &want);
      for (double v : want) scale = std::max(scale, std::abs(v));
    }
    for (const auto& [name, value] : doc.at("grads").items()) {
      std::vector<double> want;
      test::FlattenJson(value, &want);
      TensorView got;
      const Status g = model->Gradient(name, &got);
      ASSERT_TRUE(g.ok()) << g.ToString();
      ASSERT_EQ(got.size, want.size()) << name;
      const double e = Error(got.data, want, 1e-3 * scale);
      EXPECT_LE(e, kTolerance) << name;
      worst.Note(e, f + " " + name);
    }
    std::vector<double> want_gates;
    test::FlattenJson(doc.at("head_gate_grads"), &want_gates);
    ASSERT_EQ(r.head_gate_grads.size(), want_gates.size());
    std::vector<float> got_gates(r.head_gate_grads.begin(), r.head_gate_grads.end());
    double gscale = 0;
    for (double v : want_gates) gscale = std::max(gscale, std::abs(v));
    const double e = Error(got_gates.data(), want_gates, std::max(1e-3 * gscale, 1e-12));
    EXPECT_LE(e, kTolerance) << "head gates";
    worst_gate.Note(e, f);
  }
  std::printf("train goldens: %zu cases; worst gradient error %.3g (%s); worst gate-gradient "
              "error %.3g (%s)\n",
              files.size(), worst.error, worst.where.c_str(), worst_gate.error,
              worst_gate.where.c_str());
}

OptimizerConfig OptimizerOf(const json& o) {
  OptimizerConfig c;
  c.kind = o.at("type") == "adamw" ? OptimizerConfig::kAdamW : OptimizerConfig::kSgd;
  c.lr = o.at("lr");
  c.clip_grad_norm = o.at("clip_grad_norm");
  if (c.kind == OptimizerConfig::kAdamW) {
    c.beta1 = o.at("betas")[0];
    c.beta2 = o.at("betas")[1];
    c.eps = o.at("eps");
    c.weight_decay = o.at("weight_decay");
  }
  return c;
}

// tests/golden/train/loss/cross-entropy-rows.json (tools/make_train_golden.py): rows of logits
// given directly, where the loss's order of operations shows (ten equal logits of 7.6e22 gave 0
// as max + log(sum) - x[t]; torch ln 10), against F.cross_entropy in float64: Loss, and the
// backward's CrossEntropyRows with its gradient. The bound is the float sum's rounding of
// log(sum), (V + 2) 2^-24 (train.test.js's), plus two roundings of the double loss.
TEST(TransformerTrainGolden, CrossEntropyOfGivenLogitsMatchesPyTorch) {
  const std::string file = GoldenDir() + "/loss/cross-entropy-rows.json";
  ASSERT_TRUE(std::filesystem::exists(file)) << file << ": tools/make_train_golden.py writes it";
  const json doc = ReadJson(file);
  ASSERT_GE(doc.at("cases").size(), 8u);
  for (const json& c : doc.at("cases")) {
    const std::string name = c.at("name");
    std::vector<float> logits;
    std::vector<int64_t> shape;
    test::FlattenJson(c.at("logits"), &logits, &shape);
    ASSERT_EQ(shape.size(), 2u) << name;
    const int64_t P = shape[0], V = shape[1];
    const std::vector<int32_t> targets = c.at("targets").get<std::vector<int32_t>>();
    ASSERT_EQ(targets.size(), static_cast<size_t>(P)) << name;
    const size_t counted = static_cast<size_t>(std::count_if(
        targets.begin(), targets.end(), [](int32_t t) { return t != -100; }));
    const double want = c.at("loss");
    const double bound = static_cast<double>(V + 2) * 0x1p-24 + 0x1p-51 * std::abs(want);
    double loss = 0;
    ASSERT_TRUE(Transformer::Loss(logits.data(), P, V, targets.data(), &loss).ok()) << name;
    EXPECT_NEAR(loss, want, bound) << name;
    std::vector<float> grad(logits.size(), 99.0f);
    EXPECT_EQ(CrossEntropyRows(logits.data(), static_cast<size_t>(P), static_cast<size_t>(V),
                               targets.data(), counted, grad.data()),
              loss)
        << name << ": the backward's loss is Loss's bits";
    std::vector<double> want_grad;
    test::FlattenJson(c.at("grad"), &want_grad);
    ASSERT_EQ(want_grad.size(), grad.size()) << name;
    for (size_t i = 0; i < grad.size(); ++i) {
      EXPECT_NEAR(grad[i], want_grad[i], 1e-6) << name << " d loss / d logits[" << i << "]";
    }
  }
}

TEST(TransformerTrainGolden, FiveOptimizerStepsMatchPyTorch) {
  const std::vector<std::string> files = GoldenFiles();
  ASSERT_FALSE(files.empty());
  Worst worst;
  int runs = 0;
  for (const std::string& f : files) {
    const json doc = ReadJson(f);
    for (const json& run : doc.at("runs")) {
      SCOPED_TRACE(f + " " + run.at("optimizer").dump());
      std::unique_ptr<Transformer> model = ModelOf(doc);
      ASSERT_NE(model, nullptr);
      const OptimizerConfig oc = OptimizerOf(run.at("optimizer"));
      ASSERT_TRUE(model->SetOptimizer(oc).ok());
      bool all_t1 = true;
      for (size_t s = 0; s < run.at("batches").size(); ++s) {
        const json& bj = run.at("batches")[s];
        const Batch b = BatchOf(bj.at("tokens"), bj.at("targets"));
        all_t1 = all_t1 && b.length == 1;
        TrainStepResult r;
        const Status st = model->TrainStep(b.view(), b.targets.data(), &r);
        ASSERT_TRUE(st.ok()) << st.ToString();
        ASSERT_TRUE(r.stepped) << r.refused;
        const double loss = run.at("losses")[s], norm = run.at("grad_norms")[s];
        EXPECT_NEAR(r.loss, loss, 1e-5 * std::max(1.0, std::abs(loss))) << "step " << s;
        EXPECT_NEAR(r.grad_norm, norm, kTolerance * std::max(1e-3, norm)) << "step " << s;
        if (run.contains("clipped")) {
          EXPECT_EQ(r.clipped, run.at("clipped")[s].get<bool>()) << "step " << s;
        }
      }
      const TransformerConfig& c = model->config();
      const size_t D = static_cast<size_t>(c.d_model);
      for (const auto& [name, value] : run.at("state_dict_after").items()) {
        std::vector<double> want;
        test::FlattenJson(value, &want);
        TensorView got;
        ASSERT_TRUE(model->GetParameter(name, &got).ok()) << name;
        // Entries whose gradient is zero in exact arithmetic get float32 rounding noise, which
        // Adam's normalisation turns into steps of up to lr (the contract's rule): the key part
        // of in_proj_bias always, and the query and key parts of the projections when every
        // batch has one position (one key: softmax is constant). Not with attention sinks: the
        // sink's logit does not move with q . b_k, nor is one key's weight constant beside it.
        std::vector<bool> noise(want.size(), false);
        const bool in_w = name.find("in_proj_weight") != std::string::npos;
        const bool in_b = name.find("in_proj_bias") != std::string::npos;
        for (size_t i = 0; i < want.size(); ++i) {
          const size_t row = in_w ? i / D : i;
          if (c.attn_sinks) break;
          if (in_b && row >= D && row < 2 * D) noise[i] = true;
          if (all_t1 && (in_w || in_b) && row < 2 * D) noise[i] = true;
        }
        std::vector<double> kept;
        std::vector<float> kept_got;
        const double steps = static_cast<double>(run.at("batches").size());
        for (size_t i = 0; i < want.size(); ++i) {
          if (noise[i]) {
            EXPECT_LE(std::abs(got.data[i] - want[i]), steps * oc.lr + 1e-6) << name << "[" << i
                                                                              << "]";
          } else {
            kept.push_back(want[i]);
            kept_got.push_back(got.data[i]);
          }
        }
        if (kept.empty()) continue;
        const double e = Error(kept_got.data(), kept, 1e-3);
        EXPECT_LE(e, kTolerance) << name;
        worst.Note(e, f + " " + name);
      }
      ++runs;
    }
  }
  std::printf("train goldens: %d optimizer runs of 5 steps; worst parameter error %.3g (%s)\n",
              runs, worst.error, worst.where.c_str());
}

// The fast float32 backward against the float64 reference on random configs: every option
// combination drawn, sizes across the kernels' paths (head dims 1-16, T up to 20, 1-3 layers),
// seeded weights with random biases, and gates with 0, negative and > 1 values.
TEST(TransformerTrain, GradientsMatchTheFloat64ReferenceOnRandomConfigs) {
  std::mt19937 rng(2024);
  Worst worst, worst_gate;
  for (int trial = 0; trial < 200; ++trial) {
    const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    TransformerConfig c;
    c.n_heads = std::vector<int64_t>{1, 2, 4}[pick(3)];
    const int64_t hd = std::vector<int64_t>{1, 2, 3, 8, 16}[pick(5)];
    c.d_model = c.n_heads * hd;
    c.vocab_size = 3 + pick(20);
    c.max_len = 1 + pick(20);
    c.n_layers = 1 + pick(3);
    c.d_mlp = pick(2) == 0 ? 0 : 1 + pick(24);
    c.norm = static_cast<NormPlacement>(pick(3));
    c.positions = static_cast<PositionKind>(pick(3));
    c.causal = pick(2) == 0;
    c.act = static_cast<Activation>(pick(2));
    c.bias = pick(3) != 0;
    c.ln_eps = pick(2) == 0 ? 1e-5 : 1e-3;
    c.tie_embeddings = trial % 4 == 3;  // (drawing nothing: the other trials are as they were)
    // Grouped-query attention in every third trial with more than one head (drawing nothing
    // either): one K/V head (multi-query) or H / 2.
    if (trial % 3 == 1 && c.n_heads > 1) c.n_kv_heads = trial % 2 == 0 ? 1 : c.n_heads / 2;
    // Rotary positions in every fifth trial with a head dim of 2 or more (drawing nothing):
    // either layout, all or half of the dims, base 10000 or 100.
    if (trial % 5 == 2 && c.d_model / c.n_heads >= 2) {
      c.positions = PositionKind::kRope;
      c.rope_layout = trial % 2 == 0 ? RopeLayout::kHalf : RopeLayout::kInterleaved;
      c.rope_fraction = trial % 4 < 2 || c.d_model / c.n_heads < 4 ? 1.0 : 0.5;
      c.rope_base = trial % 3 == 0 ? 100.0 : 10000.0;
    }
    c.attn_sinks = trial % 7 == 3;  // attention sinks (drawing nothing)
    const int64_t B = 1 + pick(3), T = 1 + pick(static_cast<int>(c.max_len));
    std::unique_ptr<Transformer> model;
    ASSERT_TRUE(Transformer::Create(c, &model).ok());
    // The weights training starts from (PyTorch's default initialisation, from the seed), with
    // biases and LayerNorm parameters moved off their initial 0 and 1 as training moves them.
    // (Weights of scale 1 without LayerNorm saturate the softmax, where float32's rounding of
    // the weights near 1 leaves ~1e-4 of the gradient: torch's float32 does no better there.)
    ASSERT_TRUE(model->InitializeFromSeed(static_cast<uint64_t>(trial)).ok());
    std::uniform_real_distribution<float> u(-0.3f, 0.3f);
    std::vector<std::pair<std::string, std::vector<double>>> sd;
    for (const TransformerParamSpec& p : TransformerParams(c)) {
      TensorView w;
      ASSERT_TRUE(model->GetParameter(p.name, &w).ok());
      std::vector<float> v(w.data, w.data + w.size);
      const bool ln = p.name.find("ln") != std::string::npos;
      const bool sinks = p.name.find("attn.sinks") != std::string::npos;  // (0 at first)
      if (ln || sinks || p.name.find("bias") != std::string::npos) {
        if (sinks) {  // from their own generator, so the other trials keep their draws
        std::mt19937 sink_rng(static_cast<uint32_t>(trial));
        for (float& x : v) x = 5.0f * u(sink_rng);
      } else {
        for (float& x : v) x += u(rng);
      }
        ASSERT_TRUE(model->SetParameter(p.name, {v.data(), p.shape, v.size()}).ok());
      }
      sd.emplace_back(p.name, std::vector<double>(v.begin(), v.end()));
    }
    std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = pick(static_cast<int>(c.vocab_size));
      targets[i] = pick(4) == 0 ? -100 : pick(static_cast<int>(c.vocab_size));
    }
    targets[0] = pick(static_cast<int>(c.vocab_size));  // at least one counted
    std::vector<float> gates(static_cast<size_t>(c.n_layers * c.n_heads));
    for (float& g : gates) g = std::vector<float>{1.0f, 0.0f, -0.5f, 1.7f}[pick(4)];
    const bool gated = pick(2) == 0;
    std::vector<double> gates64(gates.begin(), gates.end());
    ReferenceTransformerResult ref;
    ASSERT_TRUE(ReferenceTransformer(c, sd, tokens.data(), B, T, targets.data(),
                                     gated ? gates64.data() : nullptr, &ref).ok());
    BackwardOptions o;
    o.head_gate_grads = true;
    if (gated) o.head_gates = {gates.data(), {c.n_layers, c.n_heads}, gates.size()};
    BackwardResult r;
    ASSERT_TRUE(model->Backward({tokens.data(), B, T}, targets.data(), o, &r).ok());
    // (Which config, and how far the float32 forward is from float64 already: the gradients
    // can be no closer than the forward's conditioning allows.)
    TransformerResult fr;
    ASSERT_TRUE(model->Forward({tokens.data(), B, T}, TransformerOptions{o.head_gates.present()
        ? TransformerOptions{{}, o.head_gates, {}} : TransformerOptions{}}, &fr).ok());
    const double logit_error = Error(fr.logits.data(), ref.logits, 0);
    const std::string what = "trial " + std::to_string(trial) + " (norm " +
                             std::to_string(static_cast<int>(c.norm)) + " pos " +
                             std::to_string(static_cast<int>(c.positions)) + " causal " +
                             std::to_string(c.causal) + " act " +
                             std::to_string(static_cast<int>(c.act)) + " bias " +
                             std::to_string(c.bias) + (c.tie_embeddings ? " tied" : "") +
                             (RopeDims(c) > 0 ? " rope" + std::to_string(RopeDims(c)) : "") +
                             (c.n_kv_heads > 0 ? " kv" + std::to_string(c.n_kv_heads) : "") +
                             (c.attn_sinks ? " sinks" : "") + " L" +
                             std::to_string(c.n_layers) + " H" +
                             std::to_string(c.n_heads) + " D" + std::to_string(c.d_model) + " mlp" +
                             std::to_string(c.d_mlp) + " B" + std::to_string(B) + " T" +
                             std::to_string(T) + (gated ? " gated" : "") + "; logits " +
                             std::to_string(logit_error) + ")";
    EXPECT_NEAR(r.loss, ref.loss, 1e-5 * std::max(1.0, std::abs(ref.loss))) << what;
    double scale = 0;
    for (const auto& [name, g] : ref.grads) {
      for (double v : g) scale = std::max(scale, std::abs(v));
    }
    for (const auto& [name, want] : ref.grads) {
      TensorView got;
      ASSERT_TRUE(model->Gradient(name, &got).ok());
      const double e = Error(got.data, want, 1e-3 * scale);
      EXPECT_LE(e, kTolerance) << what << " " << name;
      worst.Note(e, what + " " + name);
    }
    std::vector<float> got_gates(r.head_gate_grads.begin(), r.head_gate_grads.end());
    double gscale = 1e-12;
    for (double v : ref.head_gate_grads) gscale = std::max(gscale, 1e-3 * std::abs(v));
    const double e = Error(got_gates.data(), ref.head_gate_grads, gscale);
    EXPECT_LE(e, kTolerance) << what << " gates";
    worst_gate.Note(e, what);
  }
  std::printf("against the float64 reference: 200 random configs; worst gradient error %.3g (%s), "
              "worst gate-gradient error %.3g (%s)\n",
              worst.error, worst.where.c_str(), worst_gate.error, worst_gate.where.c_str());
}

// A small model of every stage, weights from a seed.
std::unique_ptr<Transformer> SeededModel(NormPlacement norm, int64_t d_mlp, uint64_t seed = 3) {
  TransformerConfig c;
  c.vocab_size = 11;
  c.max_len = 9;
  c.d_model = 12;
  c.n_layers = 2;
  c.n_heads = 3;
  c.d_mlp = d_mlp;
  c.norm = norm;
  std::unique_ptr<Transformer> model;
  EXPECT_TRUE(Transformer::Create(c, &model).ok());
  EXPECT_TRUE(model->InitializeFromSeed(seed).ok());
  return model;
}

Batch SeededBatch(int64_t B, int64_t T, int64_t V, uint32_t seed) {
  Batch b;
  b.batch = B;
  b.length = T;
  uint32_t x = seed;
  const auto next = [&] {
    x = x * 1664525u + 1013904223u;
    return static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(V));
  };
  for (int64_t i = 0; i < B * T; ++i) b.tokens.push_back(next());
  for (int64_t i = 0; i < B * T; ++i) b.targets.push_back(i % 5 == 4 ? -100 : next());
  return b;
}

TEST(TransformerTrain, TheBackwardsForwardIsForwardsBitsAndGradientsDependOnNothingElse) {
  for (NormPlacement norm : {NormPlacement::kPre, NormPlacement::kPost, NormPlacement::kNone}) {
    std::unique_ptr<Transformer> model = SeededModel(norm, 20);
    const Batch b = SeededBatch(3, 7, 11, 5);
    TransformerResult fr;
    ASSERT_TRUE(model->Forward(b.view(), {}, &fr).ok());
    double loss = 0;
    ASSERT_TRUE(Transformer::Loss(fr.logits.data(), 21, 11, b.targets.data(), &loss).ok());
    BackwardResult r1;
    ASSERT_TRUE(model->Backward(b.view(), b.targets.data(), {}, &r1).ok());
    EXPECT_EQ(r1.loss, loss);  // bit for bit
    std::vector<std::vector<float>> first;
    for (const TransformerParamSpec& p : TransformerParams(model->config())) {
      TensorView g;
      ASSERT_TRUE(model->Gradient(p.name, &g).ok());
      first.emplace_back(g.data, g.data + g.size);
    }
    // Another shape in between (buffers resized), then the first batch again: the same bits.
    const Batch other = SeededBatch(1, 9, 11, 8);
    BackwardResult r2;
    ASSERT_TRUE(model->Backward(other.view(), other.targets.data(), {}, &r2).ok());
    ASSERT_TRUE(model->Backward(b.view(), b.targets.data(), {}, &r2).ok());
    EXPECT_EQ(r2.loss, r1.loss);
    size_t k = 0;
    for (const TransformerParamSpec& p : TransformerParams(model->config())) {
      TensorView g;
      ASSERT_TRUE(model->Gradient(p.name, &g).ok());
      EXPECT_EQ(0, std::memcmp(g.data, first[k++].data(), g.size * sizeof(float))) << p.name;
    }
    // And Forward still gives what it gave (the training pass shares its buffers).
    TransformerResult again;
    ASSERT_TRUE(model->Forward(b.view(), {}, &again).ok());
    EXPECT_EQ(0, std::memcmp(again.logits.data(), fr.logits.data(),
                             fr.logits.size() * sizeof(float)));
  }
}

// One store per model, the attention layers' entries in it, and the gradients a parallel store of
// the same layout: every key's gradient lies at the offset its weights lie at (in_proj_weight's
// q/k/v_proj_weight aliases among the weights, inside it).
TEST(TransformerTrain, GradientsLieAsTheWeightsDo) {
  for (NormPlacement norm : {NormPlacement::kPre, NormPlacement::kPost, NormPlacement::kNone}) {
    std::unique_ptr<Transformer> model = SeededModel(norm, norm == NormPlacement::kPost ? 0 : 20);
    const Batch b = SeededBatch(2, 5, 11, 9);
    BackwardResult r;
    ASSERT_TRUE(model->Backward(b.view(), b.targets.data(), {}, &r).ok());
    TensorView w0, g0;
    ASSERT_TRUE(model->GetParameter("tok_embed.weight", &w0).ok());
    ASSERT_TRUE(model->Gradient("tok_embed.weight", &g0).ok());
    const float* last = nullptr;
    for (const TransformerParamSpec& p : TransformerParams(model->config())) {
      TensorView w, g;
      ASSERT_TRUE(model->GetParameter(p.name, &w).ok());
      ASSERT_TRUE(model->Gradient(p.name, &g).ok());
      EXPECT_EQ(w.data - w0.data, g.data - g0.data) << p.name;
      EXPECT_EQ(g.shape, p.shape);
      EXPECT_TRUE(last == nullptr || w.data > last) << p.name << ": in named_parameters order";
      last = w.data;
    }
    TensorView in_proj, v_proj;
    ASSERT_TRUE(model->GetParameter("blocks.1.attn.in_proj_weight", &in_proj).ok());
    ASSERT_TRUE(model->GetParameter("blocks.1.attn.v_proj_weight", &v_proj).ok());
    EXPECT_EQ(v_proj.data, in_proj.data + 2 * 12 * 12);
    TensorView none;
    EXPECT_EQ(model->Gradient("blocks.1.attn.v_proj_weight", &none).code(),
              StatusCode::kUnknownParameter);  // gradients by state_dict key only
  }
}

TEST(TransformerTrain, TrainingLowersTheLossAndForwardSeesTheNewWeights) {
  std::unique_ptr<Transformer> model = SeededModel(NormPlacement::kPre, 16);
  OptimizerConfig oc;
  oc.lr = 1e-2;
  ASSERT_TRUE(model->SetOptimizer(oc).ok());
  const Batch b = SeededBatch(4, 8, 11, 2);
  TrainStepResult first, r;
  ASSERT_TRUE(model->TrainStep(b.view(), b.targets.data(), &first).ok());
  for (int s = 0; s < 30; ++s) ASSERT_TRUE(model->TrainStep(b.view(), b.targets.data(), &r).ok());
  EXPECT_TRUE(r.stepped);
  EXPECT_LT(r.loss, 0.5 * first.loss) << first.loss << " -> " << r.loss;
  EXPECT_EQ(model->optimizer()->steps(), 31);
  // Forward after the steps: its loss is the one the next step reports (the packed panels
  // followed the in-place updates).
  TransformerResult fr;
  ASSERT_TRUE(model->Forward(b.view(), {}, &fr).ok());
  double loss = 0;
  ASSERT_TRUE(Transformer::Loss(fr.logits.data(), 32, 11, b.targets.data(), &loss).ok());
  TrainStepResult next;
  ASSERT_TRUE(model->TrainStep(b.view(), b.targets.data(), &next).ok());
  EXPECT_EQ(next.loss, loss);
}

TEST(TransformerTrain, BadInputIsRefusedNamingTheArgumentAndChangesNothing) {
  std::unique_ptr<Transformer> model = SeededModel(NormPlacement::kPre, 0);
  Batch b = SeededBatch(2, 5, 11, 1);
  TensorView g;
  EXPECT_EQ(model->Gradient("unembed.weight", &g).code(), StatusCode::kInvalidArgument);
  TrainStepResult r;
  Status s = model->TrainStep(b.view(), b.targets.data(), &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("setOptimizer"), std::string::npos) << s.ToString();
  OptimizerConfig bad;
  bad.lr = std::nan("");
  EXPECT_EQ(model->SetOptimizer(bad).argument(), Arg::kLr);
  ASSERT_TRUE(model->SetOptimizer(OptimizerConfig{}).ok());
  TensorView before;
  ASSERT_TRUE(model->GetParameter("unembed.weight", &before).ok());
  const std::vector<float> w0(before.data, before.data + before.size);
  for (int32_t t : {-1, 11, -99}) {
    Batch bad_t = b;
    bad_t.targets[3] = t;
    s = model->TrainStep(bad_t.view(), bad_t.targets.data(), &r);
    EXPECT_EQ(s.argument(), Arg::kTargets) << s.ToString();
    EXPECT_NE(s.message().find("[0, 3]"), std::string::npos) << s.message();
  }
  Batch none = b;
  std::fill(none.targets.begin(), none.targets.end(), -100);
  s = model->TrainStep(none.view(), none.targets.data(), &r);
  EXPECT_EQ(s.argument(), Arg::kTargets);
  EXPECT_NE(s.message().find("-100"), std::string::npos);
  Batch bad_tok = b;
  bad_tok.tokens[0] = 11;
  EXPECT_EQ(model->TrainStep(bad_tok.view(), b.targets.data(), &r).argument(), Arg::kTokens);
  EXPECT_EQ(model->Backward(b.view(), nullptr, {}, &*std::make_unique<BackwardResult>()).argument(),
            Arg::kTargets);
  EXPECT_EQ(model->Gradient("nope", &g).code(), StatusCode::kUnknownParameter);
  EXPECT_EQ(model->optimizer()->steps(), 0);
  ASSERT_TRUE(model->GetParameter("unembed.weight", &before).ok());
  EXPECT_EQ(0, std::memcmp(before.data, w0.data(), w0.size() * sizeof(float)));
  // And it still trains.
  s = model->TrainStep(b.view(), b.targets.data(), &r);
  EXPECT_TRUE(s.ok() && r.stepped) << s.ToString();
}

TEST(TransformerTrain, ANonFiniteStepIsRefusedAndLeavesTheWeights) {
  std::unique_ptr<Transformer> model = SeededModel(NormPlacement::kNone, 0);
  // An infinite weight makes the loss and gradients non-finite.
  TensorView w;
  ASSERT_TRUE(model->GetParameter("unembed.weight", &w).ok());
  std::vector<float> bad(w.data, w.data + w.size);
  bad[0] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(model->SetParameter("unembed.weight", {bad.data(), w.shape, bad.size()}).ok());
  ASSERT_TRUE(model->SetOptimizer(OptimizerConfig{}).ok());
  TensorView before;
  ASSERT_TRUE(model->GetParameter("blocks.0.attn.in_proj_weight", &before).ok());
  const std::vector<float> w0(before.data, before.data + before.size);
  const Batch b = SeededBatch(2, 4, 11, 3);
  TrainStepResult r;
  ASSERT_TRUE(model->TrainStep(b.view(), b.targets.data(), &r).ok());
  EXPECT_FALSE(r.stepped);
  EXPECT_FALSE(r.refused.empty());
  EXPECT_FALSE(std::isfinite(r.loss) && std::isfinite(r.grad_norm)) << r.loss << " " << r.grad_norm;
  EXPECT_EQ(model->optimizer()->steps(), 0);
  ASSERT_TRUE(model->GetParameter("blocks.0.attn.in_proj_weight", &before).ok());
  EXPECT_EQ(0, std::memcmp(before.data, w0.data(), w0.size() * sizeof(float)));
}

}  // namespace
}  // namespace headscope
