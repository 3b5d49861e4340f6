// The optimizers (optim.h) against torch 1.13: the golden cases of tests/golden/optim/, written by
// tools/make_optim_golden.py (AdamW with and without weight decay and clipping, several lr /
// betas / eps; SGD with and without clipping; 5 steps each), every tensor after every step within
// 1e-6 relative (max |a - b| / max |b| over the tensor) and bit for bit until a step clips with
// another coefficient than torch's float32 norm gives, and the gradient norms; bad options
// refused naming them, in both namings; the non-finite rule (a refused step changes nothing and
// names its cause); determinism (same inputs, same bits; the norm and the steps do not depend on
// how the parameters are split into slots); optimizer steps through a ParameterStore bump its
// versions.
#include "headscope/optim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "headscope/parameters.h"
#include "nlohmann/json.hpp"
#include "test_util.h"

namespace headscope {
namespace {

using nlohmann::json;
constexpr double kTolerance = 1e-6;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

#define EXPECT_MSG_HAS(status, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, (status).message())

using Tensors = std::vector<std::vector<float>>;

// max |a - b| / max |b| over a tensor (an all-zero b must be matched exactly).
double TensorError(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0, worst = 0;
  for (float x : b) scale = std::max(scale, std::fabs(static_cast<double>(x)));
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d == 0)) worst = std::max(worst, scale > 0 ? d / scale : HUGE_VAL);
  }
  return worst;
}

bool SameBits(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].size() != b[k].size() ||
        (!a[k].empty() && std::memcmp(a[k].data(), b[k].data(), a[k].size() * 4) != 0)) {
      return false;
    }
  }
  return true;
}

std::vector<OptimizerParam> Slots(Tensors* w, const Tensors& g,
                                  const std::vector<std::string>* names = nullptr) {
  std::vector<OptimizerParam> p;
  for (size_t k = 0; k < w->size(); ++k) {
    p.push_back({(*w)[k].data(), g[k].data(), (*w)[k].size(),
                 names ? std::string_view((*names)[k]) : std::string_view()});
  }
  return p;
}

std::unique_ptr<Optimizer> Make(const OptimizerConfig& c) {
  std::unique_ptr<Optimizer> opt;
  const Status s = Optimizer::Create(c, &opt);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return opt;
}

// ---------------------------------------------------------------------------------------------
// The golden cases
// ---------------------------------------------------------------------------------------------

struct GoldenSet {
  std::string file;
  std::vector<std::string> names;
  Tensors init;
  std::vector<Tensors> grads;  // [step][param]
  std::vector<double> norm32, norm64;
  json cases;
};

std::vector<float> Floats(const json& j) {
  std::vector<float> v;
  for (const json& x : j) v.push_back(static_cast<float>(x.get<double>()));
  return v;
}

GoldenSet LoadSet(const std::string& name) {
  GoldenSet g;
  g.file = std::string(HEADSCOPE_GOLDEN_DIR) + "/optim/" + name + ".json";
  std::ifstream in(g.file);
  std::stringstream text;
  text << in.rdbuf();
  const json doc = json::parse(text.str());
  for (const json& p : doc.at("params")) {
    g.names.push_back(p.at("name").get<std::string>());
    g.init.push_back(Floats(p.at("init")));
  }
  for (const json& step : doc.at("grads")) {
    Tensors t;
    for (const json& gk : step) t.push_back(Floats(gk));
    g.grads.push_back(t);
  }
  for (const json& n : doc.at("grad_norm")) g.norm32.push_back(n.get<double>());
  for (const json& n : doc.at("grad_norm_f64")) g.norm64.push_back(n.get<double>());
  g.cases = doc.at("cases");
  return g;
}

OptimizerConfig ConfigOf(const json& o) {
  OptimizerConfig c;
  c.kind = o.at("type") == "adamw" ? OptimizerConfig::kAdamW : OptimizerConfig::kSgd;
  c.lr = o.at("lr").get<double>();
  if (c.kind == OptimizerConfig::kAdamW) {
    c.beta1 = o.at("betas")[0].get<double>();
    c.beta2 = o.at("betas")[1].get<double>();
    c.eps = o.at("eps").get<double>();
    c.weight_decay = o.at("weight_decay").get<double>();
  }
  c.clip_grad_norm = o.at("clip_grad_norm").get<double>();
  return c;
}

const char* const kSets[] = {"mixed", "clip-rounding", "with-empty"};

// torch's clipping coefficient from its float32 norm (clip_grad_norm_).
float TorchClipCoef(double norm32, double max_norm) {
  const float c = (1.0f / (static_cast<float>(norm32) + static_cast<float>(1e-6))) *
                  static_cast<float>(max_norm);
  return std::min(c, 1.0f);
}

TEST(OptimGolden, EveryCaseMatchesTorch) {
  double worst = 0, worst_norm32 = 0, worst_norm64 = 0;
  std::string worst_at;
  int tensors = 0, exact = 0, cases = 0, clip_cases = 0, clip_exact = 0, clip_tensors = 0;
  int steps = 0, same_norms = 0, other_coefs = 0;
  for (const char* set_name : kSets) {
    const GoldenSet g = LoadSet(set_name);
    ASSERT_EQ(g.grads.size(), 5u) << g.file;
    for (const json& c : g.cases) {
      const std::string name = c.at("name");
      SCOPED_TRACE(name);
      const OptimizerConfig config = ConfigOf(c.at("optimizer"));
      std::unique_ptr<Optimizer> opt = Make(config);
      Tensors w = g.init;
      const bool clipping = config.clip_grad_norm > 0;
      // Every operation is torch's, rounded as torch rounds it, except the norm: torch sums in
      // float32. Bits are expected until a step clips with another coefficient than torch's
      // (the clip-rounding set has such steps).
      bool bits_expected = true;
      ++cases;
      clip_cases += clipping;
      for (size_t s = 0; s < g.grads.size(); ++s) {
        OptimizerStepResult r;
        const Status st = opt->Step(Slots(&w, g.grads[s], &g.names), &r);
        ASSERT_TRUE(st.ok()) << st.ToString();
        EXPECT_TRUE(r.stepped);
        EXPECT_EQ(opt->steps(), static_cast<int64_t>(s + 1));
        // Our norm is the float64 one (summation order aside); torch's is float32.
        const double e64 = std::fabs(r.grad_norm - g.norm64[s]) / g.norm64[s];
        const double e32 = std::fabs(r.grad_norm - g.norm32[s]) / g.norm32[s];
        EXPECT_LE(e64, 1e-12) << "step " << s;
        EXPECT_LE(e32, kTolerance) << "step " << s;
        worst_norm64 = std::max(worst_norm64, e64);
        worst_norm32 = std::max(worst_norm32, e32);
        steps += 1;
        same_norms += static_cast<float>(r.grad_norm) == static_cast<float>(g.norm32[s]);
        if (clipping) {
          EXPECT_EQ(r.clip_coef < 1.0f, c.at("clipped")[s].get<bool>()) << "step " << s;
          const float torch_coef = TorchClipCoef(g.norm32[s], config.clip_grad_norm);
          EXPECT_LE(std::fabs(r.clip_coef - torch_coef), 1e-6 * torch_coef) << "step " << s;
          if (r.clip_coef != torch_coef) {
            bits_expected = false;
            ++other_coefs;
          }
        } else {
          EXPECT_EQ(r.clip_coef, 1.0f);
        }
        const json& after = c.at("after")[s];
        for (size_t k = 0; k < w.size(); ++k) {
          const std::vector<float> want = Floats(after[k]);
          ASSERT_EQ(want.size(), w[k].size());
          const double e = TensorError(w[k], want);
          EXPECT_LE(e, kTolerance) << "step " << s << " " << g.names[k];
          const bool bits = want.empty() || std::memcmp(want.data(), w[k].data(),
                                                        want.size() * sizeof(float)) == 0;
          ++tensors;
          exact += bits;
          clip_tensors += clipping;
          clip_exact += clipping && bits;
          if (e > worst) {
            worst = e;
            worst_at = name + " step " + std::to_string(s + 1) + " " + g.names[k];
          }
          if (bits_expected) {
            EXPECT_TRUE(bits) << "step " << s << " " << g.names[k];
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 15);
  EXPECT_GT(other_coefs, 0);  // the set covers a clipping coefficient unlike torch's
  std::printf("optimizer goldens: %d cases (%d clipping), worst relative error %.3g (%s); %d of %d "
              "tensors bit-identical to torch (%d of %d in the clipping cases); gradient norm vs "
              "torch's float32 %.3g (the same float32 at %d of %d steps; another clipping "
              "coefficient at %d steps), vs float64 %.3g\n",
              cases, clip_cases, worst, worst_at.empty() ? "-" : worst_at.c_str(), exact, tensors,
              clip_exact, clip_tensors, worst_norm32, same_norms, steps, other_coefs, worst_norm64);
}

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

struct BadOption {
  const char* what;
  std::function<void(OptimizerConfig*)> set;
  Arg arg;
  const char* torch_message;  // substring, PyTorch naming
  const char* js_message;     // substring, JS naming
};

TEST(OptimOptions, DefaultsAreTorchsAdamW) {
  const OptimizerConfig c;
  EXPECT_EQ(c.kind, OptimizerConfig::kAdamW);
  EXPECT_EQ(c.lr, 1e-3);
  EXPECT_EQ(c.beta1, 0.9);
  EXPECT_EQ(c.beta2, 0.999);
  EXPECT_EQ(c.eps, 1e-8);
  EXPECT_EQ(c.weight_decay, 0.01);
  EXPECT_EQ(c.clip_grad_norm, 0);
  EXPECT_TRUE(ValidateOptimizerConfig(c).ok());
  OptimizerConfig edge;  // the limits that are allowed
  edge.lr = 0;
  edge.beta1 = 0;
  edge.beta2 = 0;
  edge.eps = 1e-45;  // rounds to the smallest float32 subnormal
  edge.weight_decay = 0;
  edge.clip_grad_norm = 1e300;
  EXPECT_TRUE(ValidateOptimizerConfig(edge).ok());
}

TEST(OptimOptions, BadOptionsAreRefusedNamingThem) {
  const double nan = std::nan("");
  const double inf = HUGE_VAL;
  const std::vector<BadOption> bad = {
      {"kind", [](OptimizerConfig* c) { c->kind = static_cast<OptimizerConfig::Kind>(7); },
       Arg::kOptimizer, "type: expected one of \"adamw\", \"sgd\", got index 7", "options.type: expected"},
      {"lr nan", [&](OptimizerConfig* c) { c->lr = nan; }, Arg::kLr,
       "lr: expected a finite number >= 0, got nan", "options.lr: expected a finite number"},
      {"lr inf", [&](OptimizerConfig* c) { c->lr = inf; }, Arg::kLr, "got inf", "options.lr:"},
      {"lr negative", [](OptimizerConfig* c) { c->lr = -0.1; }, Arg::kLr, "got -0.1",
       "options.lr:"},
      {"beta1 1", [](OptimizerConfig* c) { c->beta1 = 1; }, Arg::kBetas,
       "betas: expected betas[0] in [0, 1), got 1",
       "options.betas: expected options.betas[0] in [0, 1), got 1"},
      {"beta1 negative", [](OptimizerConfig* c) { c->beta1 = -0.5; }, Arg::kBetas,
       "betas[0] in [0, 1), got -0.5", "options.betas:"},
      {"beta2 nan", [&](OptimizerConfig* c) { c->beta2 = nan; }, Arg::kBetas,
       "betas[1] in [0, 1), got nan", "options.betas[1]"},
      {"beta2 above 1", [](OptimizerConfig* c) { c->beta2 = 1.5; }, Arg::kBetas, "got 1.5",
       "options.betas:"},
      {"eps 0", [](OptimizerConfig* c) { c->eps = 0; }, Arg::kEps,
       "eps: expected a finite number > 0, got 0", "options.eps:"},
      {"eps negative", [](OptimizerConfig* c) { c->eps = -1e-8; }, Arg::kEps, "got -1e-08",
       "options.eps:"},
      {"eps nan", [&](OptimizerConfig* c) { c->eps = nan; }, Arg::kEps, "got nan",
       "options.eps:"},
      {"eps inf", [&](OptimizerConfig* c) { c->eps = inf; }, Arg::kEps, "got inf",
       "options.eps:"},
      {"eps 0 in float32", [](OptimizerConfig* c) { c->eps = 1e-50; }, Arg::kEps,
       "eps: 1e-50 is 0 in float32", "options.eps: 1e-50 is 0 in float32"},
      {"weight decay negative", [](OptimizerConfig* c) { c->weight_decay = -0.01; },
       Arg::kWeightDecay, "weight_decay: expected a finite number >= 0, got -0.01",
       "options.weightDecay: expected"},
      {"weight decay inf", [&](OptimizerConfig* c) { c->weight_decay = inf; }, Arg::kWeightDecay,
       "got inf", "options.weightDecay:"},
      {"weight decay nan", [&](OptimizerConfig* c) { c->weight_decay = nan; },
       Arg::kWeightDecay, "got nan", "options.weightDecay:"},
      {"clip negative", [](OptimizerConfig* c) { c->clip_grad_norm = -1; }, Arg::kClipGradNorm,
       "max_norm: expected a finite number > 0 (or 0: no clipping), got -1",
       "options.clipGradNorm: expected"},
      {"clip nan", [&](OptimizerConfig* c) { c->clip_grad_norm = nan; }, Arg::kClipGradNorm,
       "got nan", "options.clipGradNorm:"},
      {"clip inf", [&](OptimizerConfig* c) { c->clip_grad_norm = inf; }, Arg::kClipGradNorm,
       "got inf", "options.clipGradNorm:"},
  };
  for (const OptimizerConfig::Kind kind : {OptimizerConfig::kAdamW, OptimizerConfig::kSgd}) {
    for (const BadOption& b : bad) {
      SCOPED_TRACE(b.what);
      OptimizerConfig c;
      c.kind = kind;
      b.set(&c);
      for (const Naming naming : {Naming::kTorch, Naming::kJs}) {
        SetNaming(naming);
        const Status s = ValidateOptimizerConfig(c);
        std::unique_ptr<Optimizer> opt;
        const Status created = Optimizer::Create(c, &opt);
        SetNaming(Naming::kTorch);
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
        EXPECT_EQ(s.argument(), b.arg);
        EXPECT_MSG_HAS(s, naming == Naming::kTorch ? b.torch_message : b.js_message);
        EXPECT_EQ(created.message(), s.message());
        EXPECT_EQ(opt, nullptr);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Non-finite steps: refused, nothing changes, the cause is named
// ---------------------------------------------------------------------------------------------

// Two small parameters with a few steps of history, and a snapshot of everything a step changes.
struct Model {
  std::vector<std::string> names = {"w", "b"};
  Tensors w = {{0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f}, {0.1f, -0.2f, 0.3f}};
  Tensors g = {{0.1f, 0.2f, -0.3f, 0.4f, -0.5f, 0.6f}, {-0.05f, 0.01f, 0.02f}};
  std::vector<OptimizerParam> slots() { return Slots(&w, g, &names); }
};

Tensors Moments(const Optimizer& opt, const Tensors& like, bool sq) {
  Tensors m;
  for (size_t k = 0; k < like.size(); ++k) {
    const float* p = sq ? opt.exp_avg_sq(k) : opt.exp_avg(k);
    m.emplace_back(p, p + like[k].size());
  }
  return m;
}

// One refused step of `opt` on `bad`: the status, and nothing changed (weights, moments, steps).
void ExpectRefusedStep(Optimizer* opt, Model* bad, Arg arg, const std::string& message) {
  const bool moments = opt->exp_avg(0) != nullptr;
  const Tensors w_before = bad->w;
  const Tensors m_before = moments ? Moments(*opt, bad->w, false) : Tensors();
  const Tensors v_before = moments ? Moments(*opt, bad->w, true) : Tensors();
  const int64_t steps = opt->steps();
  OptimizerStepResult r;
  const Status s = opt->Step(bad->slots(), &r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.argument(), arg);
  EXPECT_MSG_HAS(s, message);
  EXPECT_MSG_HAS(s, "; the step was refused and changed nothing");
  EXPECT_FALSE(r.stepped);
  EXPECT_TRUE(SameBits(bad->w, w_before));
  EXPECT_EQ(opt->steps(), steps);
  if (moments) {
    EXPECT_TRUE(SameBits(Moments(*opt, bad->w, false), m_before));
    EXPECT_TRUE(SameBits(Moments(*opt, bad->w, true), v_before));
  } else {
    EXPECT_EQ(opt->exp_avg(0), nullptr);  // a refused first step keeps no state either
  }
}

// For AdamW and SGD, after `warm_steps` good steps: a step on the poisoned model is refused and
// changes nothing, and is as if it never happened (the next good step gives a twin's bits).
void ExpectRefused(OptimizerConfig config, int warm_steps,
                   const std::function<void(Model*)>& poison, Arg arg,
                   const std::string& message) {
  for (const OptimizerConfig::Kind kind : {OptimizerConfig::kAdamW, OptimizerConfig::kSgd}) {
    SCOPED_TRACE(kind == OptimizerConfig::kAdamW ? "AdamW" : "SGD");
    config.kind = kind;
    Model m, twin;
    std::unique_ptr<Optimizer> opt = Make(config), twin_opt = Make(config);
    for (int s = 0; s < warm_steps; ++s) {
      ASSERT_TRUE(opt->Step(m.slots(), nullptr).ok());
      ASSERT_TRUE(twin_opt->Step(twin.slots(), nullptr).ok());
    }
    Model bad = m;
    poison(&bad);
    ExpectRefusedStep(opt.get(), &bad, arg, message);
    ASSERT_TRUE(opt->Step(m.slots(), nullptr).ok());
    ASSERT_TRUE(twin_opt->Step(twin.slots(), nullptr).ok());
    EXPECT_TRUE(SameBits(m.w, twin.w));
    if (kind == OptimizerConfig::kAdamW) {
      EXPECT_TRUE(SameBits(Moments(*opt, m.w, true), Moments(*twin_opt, twin.w, true)));
    }
  }
}

TEST(OptimNonFinite, NaNOrInfiniteGradientIsRefusedNamingIt) {
  for (const int warm : {0, 2}) {
    for (const bool clip : {false, true}) {
      OptimizerConfig c;
      c.clip_grad_norm = clip ? 0.5 : 0;
      ExpectRefused(c, warm, [](Model* m) { m->g[1][2] = kNaN; }, Arg::kGrads,
                    "grads['b']: element 2 is nan (the gradient norm is nan)");
      ExpectRefused(c, warm, [](Model* m) { m->g[0][4] = -kInf; }, Arg::kGrads,
                    "grads['w']: element 4 is -inf (the gradient norm is inf)");
    }
  }
  // Also reported: the norm, for trainStep to return.
  Model m;
  m.g[0][0] = kNaN;
  std::unique_ptr<Optimizer> opt = Make(OptimizerConfig());
  OptimizerStepResult r;
  EXPECT_FALSE(opt->Step(m.slots(), &r).ok());
  EXPECT_TRUE(std::isnan(r.grad_norm));
}

TEST(OptimNonFinite, UnnamedSlotsAreNamedByIndex) {
  Model m;
  m.g[1][0] = kNaN;
  std::vector<OptimizerParam> slots = Slots(&m.w, m.g);
  std::unique_ptr<Optimizer> opt = Make(OptimizerConfig());
  const Status s = opt->Step(slots, nullptr);
  EXPECT_MSG_HAS(s, "grads[1]: element 0 is nan");
}

TEST(OptimNonFinite, LearningRateThatOverflowsIsRefusedNamingIt) {
  // lr = 1e39 is finite but beyond float32: AdamW's step size and SGD's -lr become -inf.
  for (const OptimizerConfig::Kind kind : {OptimizerConfig::kAdamW, OptimizerConfig::kSgd}) {
    OptimizerConfig big;
    big.kind = kind;
    big.lr = 1e39;
    std::unique_ptr<Optimizer> opt = Make(big);
    Model m;
    ExpectRefusedStep(opt.get(), &m, Arg::kLr,
                      "lr: 1e+39 is too large for float32: state_dict['w'] element 0 would become");
  }
  // AdamW: lr * weight_decay so large that the decay factor overflows the weights.
  OptimizerConfig decay;
  decay.lr = 1e30;
  decay.weight_decay = 1e10;
  Model m;
  std::unique_ptr<Optimizer> opt = Make(decay);
  ExpectRefusedStep(opt.get(), &m, Arg::kLr, "the decay factor 1 - lr * weight_decay is -inf");
  SetNaming(Naming::kJs);
  const Status js = opt->Step(m.slots(), nullptr);
  SetNaming(Naming::kTorch);
  EXPECT_MSG_HAS(js, "options.lr: 1e+30 is too large for float32: stateDict['w'] element 0");
  EXPECT_MSG_HAS(js, "1 - options.lr * options.weightDecay is -inf");
}

TEST(OptimNonFinite, GradientWhoseSquareOverflowsIsRefusedUnlessClipped) {
  // 1e22 is finite, but (1 - beta2) * g * g overflows float32: torch would keep exp_avg_sq = inf
  // (that weight would never move again).
  OptimizerConfig c;
  Model m;
  m.g[0][3] = 1e22f;
  std::unique_ptr<Optimizer> opt = Make(c);
  const Tensors before = m.w;
  const Status s = opt->Step(m.slots(), nullptr);
  EXPECT_EQ(s.argument(), Arg::kGrads);
  EXPECT_MSG_HAS(s, "grads['w']: element 3 is 1e+22, whose square overflows exp_avg_sq");
  EXPECT_MSG_HAS(s, "(max_norm bounds the gradients)");
  EXPECT_TRUE(SameBits(m.w, before));
  // SGD has no square: the step is finite and taken.
  c.kind = OptimizerConfig::kSgd;
  c.lr = 1e-30;
  EXPECT_TRUE(Make(c)->Step(m.slots(), nullptr).ok());
  // Clipped, the same gradient is fine for AdamW (torch's float32 norm would overflow here and
  // zero every gradient; the float64 norm clips it).
  OptimizerConfig clipped;
  clipped.clip_grad_norm = 1.0;
  Model m2;
  m2.g[0][3] = 1e22f;
  OptimizerStepResult r;
  ASSERT_TRUE(Make(clipped)->Step(m2.slots(), &r).ok());
  EXPECT_NEAR(r.grad_norm, 1e22, 1e16);
  EXPECT_GT(r.clip_coef, 0.0f);
  EXPECT_LT(r.clip_coef, 1e-20f);
  for (const auto& t : m2.w) {
    for (float x : t) EXPECT_TRUE(std::isfinite(x));
  }
}

TEST(OptimNonFinite, NormBeyondFloatRangeStillClips) {
  // Two gradients of 3e38: the norm (4.2e38) is finite in double, not in float32.
  std::vector<float> w = {1.0f, 2.0f}, g = {3e38f, -3e38f};
  OptimizerConfig c;
  c.kind = OptimizerConfig::kSgd;
  c.lr = 0.5;
  c.clip_grad_norm = 2.0;
  OptimizerStepResult r;
  ASSERT_TRUE(Make(c)->Step({{w.data(), g.data(), 2, "w"}}, &r).ok());
  EXPECT_GT(r.grad_norm, 4e38);
  const float coef = static_cast<float>(2.0 / r.grad_norm);
  EXPECT_EQ(r.clip_coef, coef);
  EXPECT_EQ(w[0], std::fma(3e38f * coef, -0.5f, 1.0f));
  EXPECT_NEAR(w[0], 1.0 - 0.5 * std::sqrt(2.0), 1e-6);
}

TEST(OptimNonFinite, NonFiniteWeightIsRefusedNamingTheWeights) {
  ExpectRefused(OptimizerConfig(), 1, [](Model* m) { m->w[1][1] = kInf; }, Arg::kStateDict,
                "state_dict['b']: element 1 is already inf before the step");
}

TEST(OptimSlots, TheListMustStayTheSame) {
  Model m;
  std::unique_ptr<Optimizer> opt = Make(OptimizerConfig());
  ASSERT_TRUE(opt->Step(m.slots(), nullptr).ok());
  const Tensors before = m.w;
  std::vector<OptimizerParam> fewer = m.slots();
  fewer.pop_back();
  Status s = opt->Step(fewer, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
  EXPECT_MSG_HAS(s, "grads: expected the 2 parameters of the optimizer's first step, got 1");
  std::vector<OptimizerParam> shorter = m.slots();
  shorter[1].n = 2;
  s = opt->Step(shorter, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
  EXPECT_MSG_HAS(s, "grads['b']: expected 3 floats (its size at the optimizer's first step), got 2");
  std::vector<OptimizerParam> null_grad = m.slots();
  null_grad[0].grad = nullptr;
  s = opt->Step(null_grad, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_MSG_HAS(s, "grads['w']: the gradient is null for 6 floats");
  EXPECT_TRUE(SameBits(m.w, before));
  EXPECT_EQ(opt->steps(), 1);
  // Reset forgets the list and the moments: the next step is a first step again.
  opt->Reset();
  EXPECT_EQ(opt->steps(), 0);
  EXPECT_EQ(opt->exp_avg(0), nullptr);
  EXPECT_TRUE(opt->Step(fewer, nullptr).ok());
  // An empty list is a step over nothing.
  std::unique_ptr<Optimizer> empty = Make(OptimizerConfig());
  OptimizerStepResult r;
  EXPECT_TRUE(empty->Step({}, &r).ok());
  EXPECT_EQ(r.grad_norm, 0.0);
  EXPECT_EQ(empty->steps(), 1);
}

// ---------------------------------------------------------------------------------------------
// Determinism
// ---------------------------------------------------------------------------------------------

TEST(OptimDeterminism, SameInputsSameBits) {
  const GoldenSet g = LoadSet("mixed");
  for (const json& c : g.cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const OptimizerConfig config = ConfigOf(c.at("optimizer"));
    Tensors runs[2], m[2], v[2];
    for (int run = 0; run < 2; ++run) {
      std::unique_ptr<Optimizer> opt = Make(config);
      runs[run] = g.init;
      for (const Tensors& grads : g.grads) {
        ASSERT_TRUE(opt->Step(Slots(&runs[run], grads), nullptr).ok());
      }
      if (config.kind == OptimizerConfig::kAdamW) {
        m[run] = Moments(*opt, runs[run], false);
        v[run] = Moments(*opt, runs[run], true);
      }
    }
    EXPECT_TRUE(SameBits(runs[0], runs[1]));
    EXPECT_TRUE(SameBits(m[0], m[1]));
    EXPECT_TRUE(SameBits(v[0], v[1]));
  }
}

TEST(OptimDeterminism, SplittingTheParametersChangesNoBit) {
  // One tensor of 1000 floats with magnitudes over 10 decades, as one slot and cut into 2 and 7.
  std::mt19937 rng(14);
  std::vector<float> w0 = test::RandomVector(&rng, 1000), g(1000);
  std::uniform_real_distribution<float> exponent(-6, 4);
  for (size_t i = 0; i < g.size(); ++i) g[i] = (i % 3 ? 1.0f : -1.0f) * std::pow(10.0f, exponent(rng));
  const std::vector<std::vector<size_t>> cuts = {{}, {500}, {1, 2, 100, 333, 334, 998}};
  for (const OptimizerConfig::Kind kind : {OptimizerConfig::kAdamW, OptimizerConfig::kSgd}) {
    std::vector<float> results[3];
    double norms[3];
    for (size_t c = 0; c < cuts.size(); ++c) {
      OptimizerConfig config;
      config.kind = kind;
      config.clip_grad_norm = 100.0;  // the norm is ~1e4: clipping applies
      std::unique_ptr<Optimizer> opt = Make(config);
      results[c] = w0;
      std::vector<OptimizerParam> slots;
      size_t start = 0;
      std::vector<size_t> ends = cuts[c];
      ends.push_back(1000);
      for (size_t end : ends) {
        slots.push_back({results[c].data() + start, g.data() + start, end - start, {}});
        start = end;
      }
      norms[c] = GlobalGradNorm(slots);
      for (int s = 0; s < 5; ++s) {
        OptimizerStepResult r;
        ASSERT_TRUE(opt->Step(slots, &r).ok());
        EXPECT_LT(r.clip_coef, 1.0f);
        EXPECT_EQ(std::memcmp(&r.grad_norm, &norms[c], sizeof(double)), 0);
      }
    }
    for (size_t c = 1; c < cuts.size(); ++c) {
      EXPECT_EQ(std::memcmp(&norms[c], &norms[0], sizeof(double)), 0) << c;
      EXPECT_EQ(std::memcmp(results[c].data(), results[0].data(), 4000), 0) << c;
    }
  }
}

TEST(OptimDeterminism, NormIsTheFloat64SumInOrder) {
  // Exact squares summed in double: 3-4-5 and values whose float32 sum of squares would round.
  std::vector<float> a = {3.0f, 0.0f}, b = {4.0f};
  EXPECT_EQ(GlobalGradNorm({{nullptr, a.data(), 2, {}}, {nullptr, b.data(), 1, {}}}), 5.0);
  std::vector<float> c = {1.0f, 1e-4f, 1e-4f};
  const double want = std::sqrt((1.0 + double(1e-4f) * double(1e-4f)) + double(1e-4f) * double(1e-4f));
  EXPECT_EQ(GlobalGradNorm({{nullptr, c.data(), 3, {}}}), want);
  EXPECT_EQ(GlobalGradNorm({}), 0.0);
}

// ---------------------------------------------------------------------------------------------
// Through a ParameterStore
// ---------------------------------------------------------------------------------------------

TEST(OptimStore, StepsThroughMutableDataBumpTheVersions) {
  ParameterStore store;
  const int w = store.Add("w", {2, 3});
  const int b = store.Add("b", {3});
  EXPECT_EQ(store.MutableData(w), nullptr);  // not loaded: nothing to write
  const float w0[] = {1, 2, 3, 4, 5, 6}, b0[] = {-1, 0, 1};
  ASSERT_TRUE(store.Set(w, {w0, {2, 3}, 6}, "w").ok());
  ASSERT_TRUE(store.Set(b, {b0, {3}, 3}, "b").ok());
  const std::vector<float> gw = {0.1f, -0.2f, 0.3f, -0.4f, 0.5f, -0.6f}, gb = {1, 2, 3};
  std::unique_ptr<Optimizer> opt = Make(OptimizerConfig());
  const uint64_t v0 = store.version(), vw = store.version(w), vb = store.version(b);
  const std::vector<OptimizerParam> slots = {
      {store.MutableData(w), gw.data(), 6, store.name(w)},
      {store.MutableData(b), gb.data(), 3, store.name(b)}};
  EXPECT_GT(store.version(), v0);
  EXPECT_GT(store.version(w), vw);
  EXPECT_GT(store.version(b), vb);
  ASSERT_TRUE(opt->Step(slots, nullptr).ok());
  // The same step on plain vectors: the same bits.
  Tensors plain = {std::vector<float>(w0, w0 + 6), std::vector<float>(b0, b0 + 3)};
  ASSERT_TRUE(Make(OptimizerConfig())->Step(Slots(&plain, {gw, gb}), nullptr).ok());
  EXPECT_EQ(std::memcmp(store.data(w), plain[0].data(), 24), 0);
  EXPECT_EQ(std::memcmp(store.data(b), plain[1].data(), 12), 0);
}

}  // namespace
}  // namespace headscope
