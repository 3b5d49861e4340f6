// The causal experiments (experiments.h) and the activation patches under them
// (TransformerOptions::patches): PyTorch's float64 numbers for every experiment
// (tests/golden/experiments/, tools/make_experiments_golden.py), within 1e-5; the identities the
// definitions give (the lens' last stage is Forward's logits bit for bit; a patch with the run's
// own activation changes nothing; a z patch of every head is the clean run; a score's terms sum
// to it); and every bad argument refused by name, leaving the model working.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "headscope/experiments.h"
#include "headscope/transformer.h"
#include "json_config.h"
#include "nlohmann/json.hpp"

namespace headscope {
namespace {

constexpr double kTol = 1e-5;  // relative to max(1, |expected|)

// Numbers of a nested array, row-major; the golden writes non-finite values as strings.
void Numbers(const nlohmann::json& j, std::vector<double>* out) {
  if (j.is_array()) {
    for (const auto& e : j) Numbers(e, out);
  } else if (j.is_string()) {
    const std::string s = j.get<std::string>();
    out->push_back(s == "nan"   ? std::numeric_limits<double>::quiet_NaN()
                   : s == "inf" ? std::numeric_limits<double>::infinity()
                                : -std::numeric_limits<double>::infinity());
  } else {
    out->push_back(j.get<double>());
  }
}

// The largest error of `got` against the golden array, relative to max(1, |want|); infinities
// must match exactly. Fails the test above kTol.
double ExpectClose(const float* got, size_t n, const nlohmann::json& want_json, const char* what) {
  std::vector<double> want;
  Numbers(want_json, &want);
  EXPECT_EQ(n, want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < std::min(n, want.size()); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(static_cast<double>(got[i]), want[i]) << what << "[" << i << "]";
      continue;
    }
    const double err = std::fabs(got[i] - want[i]) / std::max(1.0, std::fabs(want[i]));
    worst = std::max(worst, err);
  }
  EXPECT_LE(worst, kTol) << what;
  return worst;
}

struct Golden {
  std::string file;
  nlohmann::json doc;
  std::vector<int32_t> clean, corrupted, targets;
  int64_t B = 0, T = 0;
};

std::vector<Golden> LoadGoldens() {
  const std::string dir = std::string(HEADSCOPE_GOLDEN_DIR) + "/experiments";
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<Golden> out;
  for (const std::string& file : files) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    Golden g;
    g.file = file;
    g.doc = nlohmann::json::parse(text.str());
    std::vector<int64_t> shape;
    test::FlattenJson(g.doc.at("clean"), &g.clean, &shape);
    test::FlattenJson(g.doc.at("corrupted"), &g.corrupted);
    test::FlattenJson(g.doc.at("targets"), &g.targets);
    g.B = shape.at(0);
    g.T = shape.at(1);
    out.push_back(std::move(g));
  }
  return out;
}

TEST(Experiments, AgreeWithPyTorchInFloat64) {
  const std::vector<Golden> goldens = LoadGoldens();
  ASSERT_GE(goldens.size(), 4u) << "tests/golden/experiments (tools/make_experiments_golden.py)";
  double worst_lens = 0, worst_rollout = 0, worst_terms = 0, worst_patch = 0;
  for (const Golden& g : goldens) {
    SCOPED_TRACE(g.file);
    ASSERT_EQ(g.doc.at("kind"), "experiments");
    std::unique_ptr<Transformer> m;
    const Status s = test::TransformerFromJson(g.doc, &m);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const nlohmann::json& want = g.doc.at("expected");
    const TokenView clean{g.clean.data(), g.B, g.T};

    LogitLensResult lens;
    ASSERT_TRUE(LogitLens(m.get(), clean, {}, &lens).ok());
    worst_lens = std::max(worst_lens, ExpectClose(lens.logits.data(), lens.logits.size(),
                                                  want.at("logit_lens"), "logit_lens"));
    RolloutResult rollout;
    ASSERT_TRUE(AttentionRollout(m.get(), clean, {}, &rollout).ok());
    worst_rollout = std::max(worst_rollout, ExpectClose(rollout.rollout.data(),
                                                        rollout.rollout.size(),
                                                        want.at("rollout"), "rollout"));
    for (const nlohmann::json& q : want.at("scores")) {
      ScoreQuery query{q.at("layer").get<int64_t>(), q.at("head").get<int64_t>(),
                       q.at("batch").get<int64_t>(), q.at("position").get<int64_t>()};
      ScoreContributionsResult r;
      const Status sc = ScoreContributions(m.get(), clean, {}, query, &r);
      ASSERT_TRUE(sc.ok()) << sc.ToString();
      worst_terms = std::max(worst_terms, ExpectClose(r.terms.data(), r.terms.size(),
                                                      q.at("terms"), "terms"));
      ExpectClose(r.dot.data(), r.dot.size(), q.at("dot"), "dot");
      ExpectClose(r.bias.data(), r.bias.size(), q.at("bias"), "bias");
      ExpectClose(r.score.data(), r.score.size(), q.at("score"), "score");
    }
    const nlohmann::json& p = want.at("patching");
    for (const char* site : {"heads", "positions"}) {
      PatchingOptions o;
      o.corrupted = {g.corrupted.data(), g.B, g.T};
      o.targets = g.targets.data();
      o.site = std::strcmp(site, "heads") == 0 ? PatchingSite::kHeads : PatchingSite::kPositions;
      PatchingResult r;
      const Status sp = ActivationPatching(m.get(), clean, o, &r);
      ASSERT_TRUE(sp.ok()) << sp.ToString();
      worst_patch = std::max(worst_patch, ExpectClose(r.loss.data(), r.loss.size(),
                                                      p.at(site).at("loss"), "patching loss"));
      worst_patch = std::max(worst_patch, ExpectClose(r.logit.data(), r.logit.size(),
                                                      p.at(site).at("logit"), "patching logit"));
      const float base[4] = {static_cast<float>(r.clean_loss), static_cast<float>(r.clean_logit),
                             static_cast<float>(r.corrupted_loss),
                             static_cast<float>(r.corrupted_logit)};
      const nlohmann::json want_base = {p.at("clean").at("loss"), p.at("clean").at("logit"),
                                        p.at("corrupted").at("loss"),
                                        p.at("corrupted").at("logit")};
      ExpectClose(base, 4, want_base, "clean / corrupted metrics");
    }
  }
  std::printf("[ experiments goldens ] %zu models; worst relative errors: lens %.2g, rollout "
              "%.2g, score terms %.2g, patching %.2g\n",
              goldens.size(), worst_lens, worst_rollout, worst_terms, worst_patch);
}

TransformerConfig SmallConfig() {
  TransformerConfig c;
  c.vocab_size = 11;
  c.max_len = 12;
  c.d_model = 12;
  c.n_layers = 2;
  c.n_heads = 3;
  c.d_mlp = 8;
  return c;
}

std::unique_ptr<Transformer> Seeded(const TransformerConfig& c, uint64_t seed = 7) {
  std::unique_ptr<Transformer> m;
  EXPECT_TRUE(Transformer::Create(c, &m).ok());
  EXPECT_TRUE(m->InitializeFromSeed(seed).ok());
  return m;
}

const TraceTensor& HookOf(const TransformerResult& r, const std::string& name) {
  for (const auto& h : r.hooks) {
    if (h.first == name) return h.second;
  }
  static TraceTensor none;
  ADD_FAILURE() << "no hook " << name;
  return none;
}

TEST(Experiments, LensLastStageIsForwardBitForBit) {
  for (NormPlacement norm : {NormPlacement::kPre, NormPlacement::kPost, NormPlacement::kNone}) {
    TransformerConfig c = SmallConfig();
    c.norm = norm;
    auto m = Seeded(c);
    const std::vector<int32_t> tokens = {1, 4, 2, 9, 0, 3, 3, 7, 5, 10};
    const TokenView t{tokens.data(), 2, 5};
    TransformerResult f;
    ASSERT_TRUE(m->Forward(t, {}, &f).ok());
    LogitLensResult lens;
    ASSERT_TRUE(LogitLens(m.get(), t, {}, &lens).ok());
    ASSERT_EQ(lens.shape, (Shape{3, 2, 5, 11}));
    const size_t n = f.logits.size();
    EXPECT_EQ(std::memcmp(lens.logits.data() + 2 * n, f.logits.data(), n * sizeof(float)), 0);
  }
}

// Patching an activation with the run's own values changes nothing; patching every head's z of
// every layer with the clean run's gives the clean run (to the rounding of the z difference,
// which is exactly 0 there: the same bits); one head's z patch equals gating the head off and
// adding its clean contribution by hand.
TEST(Experiments, PatchIdentities) {
  TransformerConfig c = SmallConfig();
  auto m = Seeded(c);
  const std::vector<int32_t> clean = {1, 4, 2, 9, 0, 3, 3, 7}, bad = {1, 5, 2, 9, 8, 3, 6, 7};
  const TokenView tc{clean.data(), 1, 8}, tb{bad.data(), 1, 8};
  TransformerOptions hooked;
  for (int l = 0; l < 2; ++l) {
    for (const char* h : {"hook_resid_pre", "attn.hook_z", "hook_attn_out", "hook_resid_mid",
                          "hook_mlp_out", "hook_resid_post"}) {
      hooked.hooks.push_back("blocks." + std::to_string(l) + "." + h);
    }
  }
  TransformerResult rc, rb;
  ASSERT_TRUE(m->Forward(tc, hooked, &rc).ok());
  ASSERT_TRUE(m->Forward(tb, hooked, &rb).ok());
  // Own values: the same logits, bit for bit, for every patchable hook (traced and fast paths).
  for (const std::string& name : hooked.hooks) {
    for (bool traced : {false, true}) {
      SCOPED_TRACE(name + (traced ? " traced" : ""));
      const TraceTensor& own = HookOf(rb, name);
      TransformerOptions o;
      if (traced) o.hooks = {"blocks.1.attn.hook_pattern", "blocks.0.attn.hook_pattern"};
      o.patches.push_back({name, -1, -1, {own.data.data(), own.shape, own.data.size()}});
      TransformerResult r;
      const Status s = m->Forward(tb, o, &r);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(std::memcmp(r.logits.data(), rb.logits.data(), r.logits.size() * sizeof(float)), 0);
    }
  }
  // The clean residual stream before layer 0 patched into the corrupted run: the clean run.
  {
    const TraceTensor& from = HookOf(rc, "blocks.0.hook_resid_pre");
    TransformerOptions o;
    o.patches.push_back({"blocks.0.hook_resid_pre", -1, -1, {from.data.data(), from.shape, from.data.size()}});
    TransformerResult r;
    ASSERT_TRUE(m->Forward(tb, o, &r).ok());
    EXPECT_EQ(std::memcmp(r.logits.data(), rc.logits.data(), r.logits.size() * sizeof(float)), 0);
  }
  // One position of hook_resid_post of the last layer: only that position's logits change, to
  // the clean run's.
  {
    const TraceTensor& from = HookOf(rc, "blocks.1.hook_resid_post");
    TransformerOptions o;
    o.patches.push_back({"blocks.1.hook_resid_post", -1, 4, {from.data.data(), from.shape, from.data.size()}});
    TransformerResult r;
    ASSERT_TRUE(m->Forward(tb, o, &r).ok());
    for (int64_t t = 0; t < 8; ++t) {
      const TransformerResult& want = t == 4 ? rc : rb;
      EXPECT_EQ(std::memcmp(r.logits.data() + t * 11, want.logits.data() + t * 11, 11 * sizeof(float)), 0) << t;
    }
  }
  // A z patch shows in hook_z (the trace) and in hook_attn_out: head 1 of layer 0 at position 2.
  {
    const TraceTensor& from = HookOf(rc, "blocks.0.attn.hook_z");
    TransformerOptions o;
    o.hooks = {"blocks.0.attn.hook_z", "blocks.0.hook_attn_out"};
    o.patches.push_back({"blocks.0.attn.hook_z", 1, 2, {from.data.data(), from.shape, from.data.size()}});
    TransformerResult r;
    ASSERT_TRUE(m->Forward(tb, o, &r).ok());
    const TraceTensor& z = r.hooks[0].second;
    const TraceTensor& zb = HookOf(rb, "blocks.0.attn.hook_z");
    const int64_t dh = 4;
    for (int64_t h = 0; h < 3; ++h) {
      for (int64_t t = 0; t < 8; ++t) {
        const TraceTensor& want = h == 1 && t == 2 ? from : zb;
        EXPECT_EQ(std::memcmp(z.data.data() + (h * 8 + t) * dh, want.data.data() + (h * 8 + t) * dh,
                              dh * sizeof(float)), 0) << h << " " << t;
      }
    }
    // attn_out's row 2 moved by W_O's head-1 columns times the difference; the others did not.
    TensorView wo;
    ASSERT_TRUE(m->GetParameter("blocks.0.attn.out_proj.weight", &wo).ok());
    const TraceTensor& out = r.hooks[1].second;
    const TraceTensor& outb = HookOf(rb, "blocks.0.hook_attn_out");
    for (int64_t e = 0; e < 12; ++e) {
      double delta = 0;
      for (int64_t k = 0; k < dh; ++k) {
        delta += static_cast<double>(wo.data[e * 12 + dh + k]) *
                 (from.data[(8 + 2) * dh + k] - static_cast<double>(zb.data[(8 + 2) * dh + k]));
      }
      EXPECT_NEAR(out.data[2 * 12 + e], outb.data[2 * 12 + e] + delta, 1e-6);
      EXPECT_EQ(out.data[3 * 12 + e], outb.data[3 * 12 + e]);
    }
  }
}

TEST(Experiments, ScoreTermsSumToTheScoreOnEveryVariant) {
  struct Variant {
    const char* name;
    PositionKind positions;
    int64_t kv, window;
    bool causal;
  };
  for (const Variant& v : {Variant{"learned", PositionKind::kLearned, 0, 0, true},
                           Variant{"rope gqa", PositionKind::kRope, 1, 0, true},
                           Variant{"alibi window", PositionKind::kAlibi, 0, 3, true},
                           Variant{"alibi noncausal window", PositionKind::kAlibi, 0, 2, false}}) {
    SCOPED_TRACE(v.name);
    TransformerConfig c = SmallConfig();
    c.positions = v.positions;
    c.n_kv_heads = v.kv;
    c.attn_window = v.window;
    c.causal = v.causal;
    auto m = Seeded(c, 3);
    const std::vector<int32_t> tokens = {1, 4, 2, 9, 0, 3, 3, 7};
    for (int64_t i : {0, 3, 7}) {
      ScoreContributionsResult r;
      const Status s = ScoreContributions(m.get(), {tokens.data(), 1, 8}, {}, {1, 2, 0, i}, &r);
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (int64_t j = 0; j < 8; ++j) {
        const double dot = r.dot[static_cast<size_t>(j)], bias = r.bias[static_cast<size_t>(j)];
        const double score = r.score[static_cast<size_t>(j)];
        if (std::isinf(bias)) {
          EXPECT_EQ(score, bias) << i << " " << j;  // masked: -inf in the model's scores too
        } else {
          EXPECT_NEAR(dot + bias, score, 1e-5 * std::max(1.0, std::fabs(score))) << i << " " << j;
        }
      }
    }
  }
}

TEST(Experiments, BadArgumentsAreRefusedByNameAndTheModelKeepsWorking) {
  SetNaming(Naming::kTorch);
  TransformerConfig c = SmallConfig();
  auto m = Seeded(c);
  const std::vector<int32_t> tokens = {1, 4, 2, 9, 0, 3};
  const TokenView t{tokens.data(), 1, 6};
  std::vector<float> resid(6 * 12, 0.5f), z(3 * 6 * 4, 0.5f);
  const TensorView rv{resid.data(), {1, 6, 12}, resid.size()};
  const TensorView zv{z.data(), {1, 3, 6, 4}, z.size()};
  struct Bad {
    ActivationPatch patch;
    StatusCode code;
    const char* says;
  };
  const Bad bads[] = {
      {{"blocks.2.hook_resid_pre", -1, -1, rv}, StatusCode::kInvalidArgument, "patches[0].hook"},
      {{"blocks.0.attn.hook_pattern", -1, -1, rv}, StatusCode::kInvalidArgument, "not a patchable"},
      {{"hook_embed", -1, -1, rv}, StatusCode::kInvalidArgument, "patches[0].hook"},
      {{"blocks.0.hook_resid_pre", 0, -1, rv}, StatusCode::kInvalidArgument, "patches[0].head"},
      {{"blocks.0.attn.hook_z", 3, -1, zv}, StatusCode::kInvalidArgument, "[0, 3)"},
      {{"blocks.0.attn.hook_z", -2, -1, zv}, StatusCode::kInvalidArgument, "patches[0].head"},
      {{"blocks.0.hook_resid_pre", -1, 6, rv}, StatusCode::kInvalidArgument, "patches[0].position"},
      {{"blocks.0.hook_resid_pre", -1, -5, rv}, StatusCode::kInvalidArgument, "position"},
      {{"blocks.0.hook_resid_pre", -1, -1, zv}, StatusCode::kShapeMismatch, "[1, 6, 12]"},
      {{"blocks.0.attn.hook_z", -1, -1, rv}, StatusCode::kShapeMismatch, "[1, 3, 6, 4]"},
      {{"blocks.0.hook_resid_pre", -1, -1, {}}, StatusCode::kShapeMismatch, "no data"},
  };
  for (const Bad& b : bads) {
    SCOPED_TRACE(b.patch.hook);
    TransformerOptions o;
    o.patches = {b.patch};
    TransformerResult r;
    const Status s = m->Forward(t, o, &r);
    EXPECT_EQ(s.code(), b.code) << s.ToString();
    EXPECT_EQ(s.argument(), Arg::kPatches);
    EXPECT_NE(s.message().find(b.says), std::string::npos) << s.message();
  }
  // An attention-only model has no hook_resid_mid to patch.
  {
    TransformerConfig a = SmallConfig();
    a.d_mlp = 0;
    auto ma = Seeded(a);
    TransformerOptions o;
    o.patches = {{"blocks.0.hook_resid_mid", -1, -1, rv}};
    TransformerResult r;
    const Status s = ma->Forward(t, o, &r);
    EXPECT_EQ(s.argument(), Arg::kPatches) << s.ToString();
    EXPECT_EQ(s.message().find("hook_mlp_out"), std::string::npos) << s.message();
  }
  ScoreContributionsResult sr;
  EXPECT_EQ(ScoreContributions(m.get(), t, {}, {2, 0, 0, 0}, &sr).argument(), Arg::kLayer);
  EXPECT_EQ(ScoreContributions(m.get(), t, {}, {0, 3, 0, 0}, &sr).argument(), Arg::kHead);
  EXPECT_EQ(ScoreContributions(m.get(), t, {}, {0, 0, 1, 0}, &sr).argument(), Arg::kBatch);
  EXPECT_EQ(ScoreContributions(m.get(), t, {}, {0, 0, 0, 6}, &sr).argument(), Arg::kPosition);
  EXPECT_EQ(ScoreContributions(m.get(), t, {}, {0, 0, 0, -1}, &sr).argument(), Arg::kPosition);
  const std::vector<int32_t> bad_tokens = {1, 4, 99};
  EXPECT_EQ(ScoreContributions(m.get(), {bad_tokens.data(), 1, 3}, {}, {0, 0, 0, 0}, &sr).argument(),
            Arg::kTokens);
  const std::vector<int32_t> targets = {4, 2, 9, 0, 3, -100}, none(6, -100), short_bad = {1, 2};
  PatchingResult pr;
  PatchingOptions po;
  po.targets = targets.data();
  po.corrupted = {short_bad.data(), 1, 2};
  EXPECT_EQ(ActivationPatching(m.get(), t, po, &pr).argument(), Arg::kCorrupted);
  po.corrupted = {};
  EXPECT_EQ(ActivationPatching(m.get(), t, po, &pr).argument(), Arg::kCorrupted);
  po.corrupted = t;
  po.targets = nullptr;
  EXPECT_EQ(ActivationPatching(m.get(), t, po, &pr).argument(), Arg::kTargets);
  po.targets = none.data();
  EXPECT_EQ(ActivationPatching(m.get(), t, po, &pr).argument(), Arg::kTargets);
  LogitLensResult lr;
  EXPECT_EQ(LogitLens(m.get(), {bad_tokens.data(), 1, 3}, {}, &lr).argument(), Arg::kTokens);
  // Still working: a patching run of the same tokens gives every cell the clean metrics.
  po.targets = targets.data();
  for (PatchingSite site : {PatchingSite::kHeads, PatchingSite::kPositions}) {
    po.site = site;
    const Status s = ActivationPatching(m.get(), t, po, &pr);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(pr.clean_loss, pr.corrupted_loss);
    for (size_t i = 0; i < pr.loss.size(); ++i) {
      EXPECT_EQ(pr.loss[i], static_cast<float>(pr.clean_loss)) << i;
    }
  }
}

}  // namespace
}  // namespace headscope
