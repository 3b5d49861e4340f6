// The parameter store (parameters.h) and MultiheadAttention's use of it: aliases write into their
// target, an entry counts as loaded when set whole or in all its parts, versions change with every
// write, and the packed panels follow the store (a weight changed after a forward is used by the
// next one, bit for bit as a fresh module loaded with it).
#include "headscope/parameters.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "headscope/mha.h"
#include "headscope/weights.h"
#include "test_util.h"

namespace headscope {
namespace {

TEST(ParameterStore, AliasesWriteIntoTheirTargetAndCountAsParts) {
  ParameterStore store;
  const int whole = store.Add("w", {4, 2});
  const int top = store.AddAlias("top", whole, 0, {2, 2});
  const int bottom = store.AddAlias("bottom", whole, 4, {2, 2});
  EXPECT_EQ(store.Find("bottom"), bottom);
  EXPECT_EQ(store.Find("nope"), -1);
  EXPECT_FALSE(store.loaded(whole));
  EXPECT_EQ(store.data(whole), nullptr);
  const uint64_t v0 = store.version();

  const float a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};
  ASSERT_TRUE(store.Set(top, {a, {2, 2}, 4}, "top").ok());
  EXPECT_TRUE(store.loaded(top));
  EXPECT_FALSE(store.loaded(whole));  // half of it
  EXPECT_GT(store.version(), v0);
  const uint64_t v1 = store.version(whole);
  EXPECT_EQ(store.version(top), v1);
  ASSERT_TRUE(store.Set(bottom, {b, {2, 2}, 4}, "bottom").ok());
  EXPECT_TRUE(store.loaded(whole));
  EXPECT_GT(store.version(whole), v1);
  const float want[] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(std::memcmp(store.data(whole), want, sizeof(want)), 0);
  EXPECT_EQ(store.data(bottom), store.data(whole) + 4);  // a view, not a copy

  // A refused write changes nothing, not even the version.
  const uint64_t before = store.version();
  const Status s = store.Set(whole, {a, {2, 2}, 4}, "state_dict['w']");
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
  EXPECT_NE(s.message().find("state_dict['w']: expected shape [4, 2], got [2, 2]"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(store.version(), before);
  EXPECT_EQ(std::memcmp(store.data(whole), want, sizeof(want)), 0);

  // Copies carry values and what was loaded.
  ParameterStore copy;
  copy.Add("w", {4, 2});
  copy.AddAlias("top", 0, 0, {2, 2});
  copy.AddAlias("bottom", 0, 4, {2, 2});
  ASSERT_TRUE(copy.CopyLoadedFrom(store).ok());
  EXPECT_TRUE(copy.loaded(0));
  EXPECT_EQ(std::memcmp(copy.data(0), want, sizeof(want)), 0);
  EXPECT_NE(copy.data(0), store.data(whole));
}

// Writing in place (an optimizer step) goes through MutableData, which bumps the versions first;
// nothing of an entry that is not loaded can be written.
TEST(ParameterStore, MutableDataBumpsTheVersions) {
  ParameterStore store;
  const int whole = store.Add("w", {4, 2});
  const int top = store.AddAlias("top", whole, 0, {2, 2});
  const int bottom = store.AddAlias("bottom", whole, 4, {2, 2});
  const uint64_t v0 = store.version();
  EXPECT_EQ(store.MutableData(whole), nullptr);
  EXPECT_EQ(store.MutableData(top), nullptr);
  EXPECT_EQ(store.version(), v0);  // nothing to write: nothing changed

  const float a[] = {1, 2, 3, 4};
  ASSERT_TRUE(store.Set(top, {a, {2, 2}, 4}, "top").ok());
  EXPECT_EQ(store.MutableData(whole), nullptr);   // half loaded
  EXPECT_EQ(store.MutableData(bottom), nullptr);  // not loaded
  const uint64_t v1 = store.version(), vw = store.version(whole);
  float* p = store.MutableData(top);
  EXPECT_EQ(p, store.data(top));
  EXPECT_GT(store.version(), v1);
  EXPECT_GT(store.version(whole), vw);  // an alias's write is its target's change
  EXPECT_EQ(store.version(top), store.version(whole));
  p[0] = 10;
  EXPECT_EQ(store.data(whole)[0], 10);

  ASSERT_TRUE(store.Set(bottom, {a, {2, 2}, 4}, "bottom").ok());
  const uint64_t v2 = store.version(whole);
  float* q = store.MutableData(whole);
  EXPECT_EQ(q, store.data(whole));
  EXPECT_GT(store.version(whole), v2);
  EXPECT_TRUE(store.loaded(whole));
}

// One buffer, fixed offsets: owned entries on 64-byte boundaries, aliases inside their target,
// the whole layout allocated (zeros) by the first write, so a parallel buffer of floats() floats
// indexed by offset(i) (a model's gradients) has a slot for every entry.
TEST(ParameterStore, EntriesLieAtFixedOffsetsOfOneBuffer) {
  ParameterStore store;
  const int a = store.Add("a", {3});
  const int b = store.Add("b", {2, 8});
  const int c = store.Add("c", {17});
  const int c_tail = store.AddAlias("c_tail", c, 9, {8});
  EXPECT_EQ(store.offset(a), 0u);
  EXPECT_EQ(store.offset(b), 16u);
  EXPECT_EQ(store.offset(c), 32u);
  EXPECT_EQ(store.offset(c_tail), 41u);
  EXPECT_EQ(store.floats(), 64u);
  EXPECT_EQ(store.data(b), nullptr);  // nothing written: nothing allocated

  const float v[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  ASSERT_TRUE(store.Set(b, {v, {2, 8}, 16}, "b").ok());
  ASSERT_NE(store.data(a), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(store.data(a)) % 64, 0u);
  for (int i : {b, c, c_tail}) EXPECT_EQ(store.data(i), store.data(a) + store.offset(i));
  EXPECT_EQ(std::memcmp(store.data(b), v, sizeof(v)), 0);
  for (size_t i = 0; i < 17; ++i) EXPECT_EQ(store.data(c)[i], 0.0f);  // not loaded: zeros
  EXPECT_FALSE(store.loaded(a));
  EXPECT_FALSE(store.loaded(c));
  ASSERT_TRUE(store.Set(c_tail, {v, {8}, 8}, "c_tail").ok());
  EXPECT_EQ(store.data(c)[9], 1.0f);
}

std::unique_ptr<MultiheadAttention> Module(const MhaConfig& c) {
  std::unique_ptr<MultiheadAttention> mha;
  EXPECT_TRUE(MultiheadAttention::Create(c, &mha).ok());
  return mha;
}

std::vector<float> Output(MultiheadAttention* mha, const std::vector<float>& x, int64_t L,
                          int64_t E) {
  ForwardResult r;
  const TensorView v{x.data(), {L, E}, x.size()};
  const Status s = mha->Forward(v, v, v, ForwardOptions(), &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return std::vector<float>(r.output.data(), r.output.data() + r.output.size());
}

// in_proj_weight loaded whole or as q/k/v_proj_weight gives the same module, bit for bit.
TEST(MhaParameters, SplitProjectionsLoadIntoThePackedOne) {
  std::mt19937 rng(5);
  MhaConfig c;
  c.embed_dim = 8;
  c.num_heads = 2;
  const int64_t E = 8;
  const std::vector<float> in_proj = test::RandomVector(&rng, 3 * E * E);
  const std::vector<float> bias = test::RandomVector(&rng, 3 * E);
  const std::vector<float> out = test::RandomVector(&rng, E * E);
  const std::vector<float> out_bias = test::RandomVector(&rng, E);
  auto packed = Module(c), split = Module(c);
  ASSERT_TRUE(packed->SetParameter("in_proj_weight", {in_proj.data(), {3 * E, E}, in_proj.size()}).ok());
  const char* names[] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(split->weights().Has(Param::kInProjWeight));
    ASSERT_TRUE(split->SetParameter(names[i], {in_proj.data() + i * E * E, {E, E},
                                               static_cast<size_t>(E * E)}).ok());
  }
  EXPECT_TRUE(split->weights().Has(Param::kInProjWeight));
  for (auto* m : {packed.get(), split.get()}) {
    ASSERT_TRUE(m->SetParameter("in_proj_bias", {bias.data(), {3 * E}, bias.size()}).ok());
    ASSERT_TRUE(m->SetParameter("out_proj.weight", {out.data(), {E, E}, out.size()}).ok());
    ASSERT_TRUE(m->SetParameter("out_proj.bias", {out_bias.data(), {E}, out_bias.size()}).ok());
  }
  EXPECT_EQ(std::memcmp(split->weights().Get(Param::kInProjWeight), in_proj.data(),
                        in_proj.size() * sizeof(float)), 0);
  const std::vector<float> x = test::RandomVector(&rng, 5 * E);
  EXPECT_EQ(Output(packed.get(), x, 5, E), Output(split.get(), x, 5, E));
}

// The packed panels are a cache of the store: changing a weight after a forward (the whole
// tensor, or one alias block of it) is what the next forward uses.
TEST(MhaParameters, PackedPanelsFollowTheStore) {
  std::mt19937 rng(6);
  for (bool same_dims : {true, false}) {
    MhaConfig c;
    c.embed_dim = 32;  // hd 16 and S > 12: the packed attention path too
    c.num_heads = 2;
    c.kdim = same_dims ? 0 : 32;  // kdim given but equal: still in_proj_weight
    c.vdim = same_dims ? 0 : 24;
    SCOPED_TRACE(same_dims ? "in_proj_weight" : "split projections");
    auto live = Module(c);
    test::LoadRandomWeights(live.get(), &rng);
    const int64_t E = 32;
    const std::vector<float> x = test::RandomVector(&rng, 20 * E);
    ForwardResult first;
    // (self-attention needs vdim = E; the split config runs cross-attention with its own value)
    const std::vector<float> value = test::RandomVector(&rng, 20 * c.value_dim());
    auto run = [&](MultiheadAttention* m) {
      ForwardResult r;
      const TensorView q{x.data(), {20, E}, x.size()};
      const TensorView v{value.data(), {20, c.value_dim()}, value.size()};
      EXPECT_TRUE(m->Forward(q, q, v, ForwardOptions(), &r).ok());
      return std::vector<float>(r.output.data(), r.output.data() + r.output.size());
    };
    const std::vector<float> before = run(live.get());
    // New values for every matrix the kernels pack, one at a time.
    for (const ParamSpec& spec : ExpectedParams(c)) {
      const std::vector<float> w = test::RandomVector(&rng, spec.shape.NumElements());
      ASSERT_TRUE(live->SetParameter(spec.name, {w.data(), spec.shape, w.size()}).ok());
      // A fresh module with the same values: the reference for the live one's next forward.
      auto fresh = Module(c);
      ASSERT_TRUE(fresh->CopyLoadedFrom(*live).ok());
      EXPECT_EQ(run(live.get()), run(fresh.get())) << spec.name;
    }
    EXPECT_NE(run(live.get()), before);
    if (same_dims) {
      // One block through its alias: only that block changes in the store.
      const std::vector<float> wv = test::RandomVector(&rng, E * E);
      ASSERT_TRUE(live->SetParameter("v_proj_weight", {wv.data(), {E, E}, wv.size()}).ok());
      EXPECT_EQ(std::memcmp(live->weights().v_weight(), wv.data(), wv.size() * sizeof(float)), 0);
      auto fresh = Module(c);
      ASSERT_TRUE(fresh->CopyLoadedFrom(*live).ok());
      EXPECT_EQ(run(live.get()), run(fresh.get())) << "v_proj_weight";
    }
  }
}

}  // namespace
}  // namespace headscope
