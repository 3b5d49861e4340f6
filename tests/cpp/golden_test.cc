// Golden cases written by real PyTorch (tools/make_golden.py, float64): both paths must match
// every case within a relative error of 1e-4. The set must stay complete: at least 40 cases that
// together cover every constructor and forward option.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "headscope/case_file.h"
#include "headscope/reference.h"

namespace headscope {
namespace {

constexpr double kTolerance = 1e-4;

std::vector<std::string> GoldenFiles() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(HEADSCOPE_GOLDEN_DIR)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<AttentionCase> LoadAll() {
  std::vector<AttentionCase> cases;
  for (const std::string& file : GoldenFiles()) {
    std::string text;
    AttentionCase c;
    Status s = ReadTextFile(file, &text);
    if (s.ok()) s = ParseCase(text, &c);
    EXPECT_TRUE(s.ok()) << file << ": " << s.ToString();
    EXPECT_TRUE(c.has_expected) << file;
    cases.push_back(std::move(c));
  }
  return cases;
}

void CheckPath(CasePath path, const char* name) {
  const std::vector<AttentionCase> cases = LoadAll();
  ASSERT_GE(cases.size(), 40u);
  double worst = 0;
  std::string worst_case;
  for (const AttentionCase& c : cases) {
    ForwardResult result;
    const Status s = RunCase(c, path, &result);
    ASSERT_TRUE(s.ok()) << c.name << ": " << s.ToString();
    const CaseComparison cmp = CompareWithExpected(c, result, kTolerance);
    EXPECT_TRUE(cmp.ok) << c.name << ": " << cmp.detail;
    if (cmp.max_relative_error >= worst) {
      worst = cmp.max_relative_error;
      worst_case = c.name;
    }
  }
  std::printf("[ golden   ] %s path: %zu cases, worst relative error %.3g (%s)\n", name,
              cases.size(), worst, worst_case.c_str());
}

TEST(Golden, FastPathMatchesPyTorch) { CheckPath(CasePath::kFast, "fast"); }
TEST(Golden, ReferencePathMatchesPyTorch) { CheckPath(CasePath::kReference, "reference"); }

TEST(Golden, CoverEveryOption) {
  const std::vector<AttentionCase> cases = LoadAll();
  auto count = [&](auto pred) { return std::count_if(cases.begin(), cases.end(), pred); };
  using C = const AttentionCase&;
  EXPECT_GT(count([](C c) { return c.name == "seed-worked-example"; }), 0);
  EXPECT_GT(count([](C c) { return !c.config.bias; }), 0) << "bias=false";
  EXPECT_GT(count([](C c) { return c.config.add_bias_kv; }), 0) << "add_bias_kv";
  EXPECT_GT(count([](C c) { return c.config.add_zero_attn; }), 0) << "add_zero_attn";
  EXPECT_GT(count([](C c) { return !c.config.same_qkv_dim(); }), 0) << "kdim/vdim";
  EXPECT_GT(count([](C c) { return c.config.batch_first; }), 0) << "batch_first";
  // Rotary position embeddings (rope_dims): both layouts, partial, with the extra keys.
  EXPECT_GT(count([](C c) { return c.config.rope_dims > 0 && c.config.rope_layout == RopeLayout::kHalf; }), 0);
  EXPECT_GT(count([](C c) { return c.config.rope_dims > 0 && c.config.rope_layout == RopeLayout::kInterleaved; }), 0);
  EXPECT_GT(count([](C c) { return c.config.rope_dims > 0 && c.config.rope_dims < c.config.head_dim(); }), 0);
  EXPECT_GT(count([](C c) { return c.config.rope_dims > 0 && c.config.add_bias_kv && c.config.add_zero_attn; }), 0);
  EXPECT_GT(count([](C c) { return c.query.shape.rank == 2; }), 0) << "unbatched";
  EXPECT_GT(count([](C c) { return c.query.shape.rank == 3; }), 0) << "batched";
  EXPECT_GT(count([](C c) { return c.key.shape != c.query.shape; }), 0) << "cross-attention";
  EXPECT_GT(count([](C c) { return c.key_padding_mask.type == MaskType::kBool; }), 0);
  EXPECT_GT(count([](C c) { return c.key_padding_mask.type == MaskType::kFloat; }), 0);
  EXPECT_GT(count([](C c) { return c.attn_mask.type == MaskType::kBool; }), 0);
  EXPECT_GT(count([](C c) { return c.attn_mask.type == MaskType::kFloat; }), 0);
  EXPECT_GT(count([](C c) { return c.attn_mask.shape.rank == 2; }), 0) << "2-D attn_mask";
  EXPECT_GT(count([](C c) { return c.attn_mask.shape.rank == 3; }), 0) << "3-D attn_mask";
  EXPECT_GT(count([](C c) { return c.is_causal; }), 0) << "is_causal";
  EXPECT_GT(count([](C c) { return !c.need_weights; }), 0) << "need_weights=false";
  EXPECT_GT(count([](C c) { return c.need_weights && c.average_attn_weights; }), 0);
  EXPECT_GT(count([](C c) { return c.need_weights && !c.average_attn_weights; }), 0);
  // Numerics (docs/errors.md): weights that are float subnormals, an infinite value reaching the
  // output through one, and queries whose unscaled q . k would overflow (divided first, as torch).
  EXPECT_GT(count([](C c) {
              return std::any_of(c.expected_weights.data.begin(), c.expected_weights.data.end(),
                                 [](float w) { return w > 0 && w < FLT_MIN; });
            }),
            0)
      << "a subnormal weight";
  EXPECT_GT(count([](C c) {
              return std::any_of(c.expected_output.data.begin(), c.expected_output.data.end(),
                                 [](float y) { return std::isinf(y); });
            }),
            0)
      << "an infinite output";
  // Grouped-query attention (num_kv_heads G < H): multi-query (G = 1), G = 2, G = H / 2 > 2, with
  // separate k/v_proj_weight, with the extra keys, causal and masked.
  const auto grouped = [](C c) { return c.config.kv_heads() < c.config.num_heads; };
  EXPECT_GT(count([](C c) { return c.config.kv_heads() == 1 && c.config.num_heads > 1; }), 0);
  EXPECT_GT(count([](C c) { return c.config.kv_heads() == 2 && c.config.num_heads > 2; }), 0);
  EXPECT_GT(count([](C c) {
              return c.config.kv_heads() > 2 && 2 * c.config.kv_heads() == c.config.num_heads;
            }),
            0);
  EXPECT_GT(count([&](C c) { return grouped(c) && !c.config.same_qkv_dim(); }), 0);
  EXPECT_GT(count([&](C c) { return grouped(c) && c.config.add_bias_kv; }), 0);
  EXPECT_GT(count([&](C c) { return grouped(c) && c.is_causal; }), 0);
  EXPECT_GT(count([&](C c) { return grouped(c) && c.attn_mask.shape.rank == 3; }), 0);
  EXPECT_GT(count([&](C c) { return grouped(c) && c.config.batch_first; }), 0);
  EXPECT_GT(count([&](C c) { return grouped(c) && c.need_weights && !c.average_attn_weights; }), 0);
  EXPECT_GE(count(grouped), 8);
  // ALiBi and sliding windows (headscope's forward options alibi / window): causal and not, with
  // the extra keys, a float key_padding_mask, grouped-query attention, unbatched, the packed path
  // (L > 16: tiles that skip the keys before the window) and rows the window leaves without keys.
  const auto positional = [](C c) { return c.alibi || c.window > 0; };
  EXPECT_GT(count([](C c) { return c.alibi && c.window == 0 && c.is_causal; }), 0);
  EXPECT_GT(count([](C c) { return c.alibi && c.window == 0 && !c.is_causal; }), 0);
  EXPECT_GT(count([](C c) { return c.window > 0 && c.is_causal; }), 0) << "causal window";
  EXPECT_GT(count([](C c) { return c.window > 0 && !c.is_causal; }), 0) << "bidirectional window";
  EXPECT_GT(count([](C c) {
              return c.alibi && c.window > 0 && c.config.add_bias_kv && c.config.add_zero_attn;
            }),
            0);
  EXPECT_GT(count([&](C c) {
              return positional(c) && c.key_padding_mask.type == MaskType::kFloat;
            }),
            0);
  EXPECT_GT(count([&](C c) { return positional(c) && c.config.kv_heads() < c.config.num_heads; }), 1);
  EXPECT_GT(count([&](C c) { return positional(c) && c.query.shape.rank == 2; }), 0);
  const auto q_len = [](C c) {
    return c.query.shape[c.query.shape.rank == 3 && c.config.batch_first ? 1 : 0];
  };
  EXPECT_GE(count([&](C c) { return c.window > 0 && q_len(c) > 32; }), 2)
      << "windows on the packed path (L > 2 tiles of 16 rows)";
  EXPECT_GE(count(positional), 8);
  EXPECT_GT(count([](C c) { return c.name == "scale-before-dot-large-query"; }), 0);
  EXPECT_GT(count([](C c) { return c.name == "scale-before-dot-large-query-short-row"; }), 0);
  // Fully masked rows: the zero-row policy shows as an all-zero weights row.
  EXPECT_GT(count([](C c) {
              if (!c.expected_weights.present) return false;
              const int64_t s = c.expected_weights.shape[c.expected_weights.shape.rank - 1];
              for (size_t r = 0; s > 0 && r < c.expected_weights.data.size(); r += s) {
                if (std::all_of(c.expected_weights.data.begin() + r,
                                c.expected_weights.data.begin() + r + s,
                                [](float x) { return x == 0.0f; })) {
                  return true;
                }
              }
              return false;
            }),
            0)
      << "a fully masked row";
}

// Per-head gates (tests/golden/README.md, "Per-head gates"): the case format has no field for
// them, so gates/ holds plain case documents (the module's own state_dict, expected values from
// PyTorch with the heads' out_proj columns scaled) and gates/head_gates.txt their gates. Loading
// the list here keeps both case parsers unaware of an option that is not torch's.
struct GatedCase {
  AttentionCase c;
  std::vector<float> gates;
};

std::vector<GatedCase> LoadGated() {
  const std::string dir = std::string(HEADSCOPE_GOLDEN_DIR) + "/gates/";
  std::ifstream list(dir + "head_gates.txt");
  EXPECT_TRUE(list.good()) << dir << "head_gates.txt";
  std::vector<GatedCase> cases;
  for (std::string line; std::getline(list, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string file;
    fields >> file;
    GatedCase g;
    for (float x; fields >> x;) g.gates.push_back(x);
    std::string text;
    Status s = ReadTextFile(dir + file, &text);
    if (s.ok()) s = ParseCase(text, &g.c);
    EXPECT_TRUE(s.ok()) << file << ": " << s.ToString();
    EXPECT_EQ(g.gates.size(), static_cast<size_t>(g.c.config.num_heads)) << file;
    cases.push_back(std::move(g));
  }
  return cases;
}

TEST(Golden, HeadGatesEqualPyTorchWithScaledOutProjColumns) {
  const std::vector<GatedCase> cases = LoadGated();
  ASSERT_GE(cases.size(), 5u);
  bool zero = false, half = false, batched = false, unbatched = false, bias = false,
       no_bias = false;
  for (const GatedCase& g : cases) {
    SCOPED_TRACE(g.c.name);
    std::unique_ptr<MultiheadAttention> mha;
    ASSERT_TRUE(BuildModule(g.c, &mha).ok());
    ForwardOptions opt = g.c.options();
    opt.head_gates = {g.gates.data(), {g.c.config.num_heads}, g.gates.size()};
    ForwardResult fast, ref, ungated;
    ASSERT_TRUE(mha->Forward(g.c.query.view(), g.c.key.view(), g.c.value.view(), opt, &fast).ok());
    ASSERT_TRUE(ReferenceForward(mha->weights(), g.c.query.view(), g.c.key.view(),
                                 g.c.value.view(), opt, &ref).ok());
    for (const ForwardResult* r : {&fast, &ref}) {
      const CaseComparison cmp = CompareWithExpected(g.c, *r, kTolerance);
      EXPECT_TRUE(cmp.ok) << (r == &fast ? "fast: " : "reference: ") << cmp.detail;
    }
    // Without the gates the case must not match: otherwise it would not test them.
    ASSERT_TRUE(RunCase(g.c, CasePath::kFast, &ungated).ok());
    EXPECT_FALSE(CompareWithExpected(g.c, ungated, kTolerance).ok) << "gates change nothing";
    for (float x : g.gates) {
      zero |= x == 0.0f;
      half |= x == 0.5f;
    }
    (g.c.query.shape.rank == 3 ? batched : unbatched) = true;
    (g.c.config.bias ? bias : no_bias) = true;
  }
  EXPECT_TRUE(zero && half && batched && unbatched && bias && no_bias)
      << "the gated cases cover gate 0, gate 0.5, batched, unbatched, with and without bias";
}

}  // namespace
}  // namespace headscope
