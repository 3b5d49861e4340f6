// Grouped-query and multi-query attention in MultiheadAttention (MhaConfig::num_kv_heads = G):
// the K/V projections have G * head_dim rows and query head h reads K/V head h / (H / G).
//
// The definition checked here is the one the goldens check against PyTorch (tools/make_golden.py:
// K and V repeated with repeat_interleave on the head axis): a module with G < H computes what
// the plain module (G = H) computes when its K/V rows are the grouped module's repeated per head,
// and here bit for bit (each projected K/V number is one matmul chain whatever the projection's
// width, and the attention stage then reads the same numbers). Every option takes part: masks,
// causality, extra keys, kdim/vdim, layouts, per-head and averaged weights, gates, head
// statistics, the trace, and generation's KV cache, which is H / G times smaller.
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "headscope/mha.h"
#include "headscope/reference.h"
#include "headscope/schema.h"
#include "test_util.h"

namespace headscope {
namespace {

// The plain module (num_kv_heads null) whose K/V rows, biases and bias_k / bias_v are `gqa`'s
// repeated per query head (head h gets K/V head h / (H / G)), everything else the same.
std::unique_ptr<MultiheadAttention> RepeatedTwin(const MultiheadAttention& gqa) {
  const MhaConfig& c = gqa.config();
  MhaConfig tc = c;
  tc.num_kv_heads = 0;
  std::unique_ptr<MultiheadAttention> twin;
  EXPECT_TRUE(MultiheadAttention::Create(tc, &twin).ok());
  const MhaWeights& w = gqa.weights();
  const int64_t E = c.embed_dim, H = c.num_heads, hd = c.head_dim(), group = H / c.kv_heads();
  // Rows [E, in] of a projection whose head h is `src`'s head h / group.
  const auto repeat_rows = [&](const float* src, int64_t in) {
    std::vector<float> out(static_cast<size_t>(E * in));
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(out.data() + h * hd * in, src + (h / group) * hd * in,
                  static_cast<size_t>(hd * in) * sizeof(float));
    }
    return out;
  };
  const auto set = [&](const char* name, const std::vector<float>& v, const Shape& shape) {
    const Status s = twin->SetParameter(name, {v.data(), shape, v.size()});
    EXPECT_TRUE(s.ok()) << name << ": " << s.ToString();
  };
  const int64_t kdim = c.key_dim(), vdim = c.value_dim();
  set("q_proj_weight", std::vector<float>(w.q_weight(), w.q_weight() + E * E), {E, E});
  set("k_proj_weight", repeat_rows(w.k_weight(), kdim), {E, kdim});
  set("v_proj_weight", repeat_rows(w.v_weight(), vdim), {E, vdim});
  if (c.bias) {
    std::vector<float> b(w.q_bias(), w.q_bias() + E);
    for (const float* kv : {w.k_bias(), w.v_bias()}) {
      const std::vector<float> r = repeat_rows(kv, 1);
      b.insert(b.end(), r.begin(), r.end());
    }
    set("in_proj_bias", b, {3 * E});
    set("out_proj.bias", std::vector<float>(w.out_bias(), w.out_bias() + E), {E});
  }
  set("out_proj.weight", std::vector<float>(w.out_weight(), w.out_weight() + E * E), {E, E});
  if (c.add_bias_kv) {
    set("bias_k", repeat_rows(w.bias_k(), 1), {1, 1, E});
    set("bias_v", repeat_rows(w.bias_v(), 1), {1, 1, E});
  }
  return twin;
}

bool SameBits(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

Shape InputShape(const MhaConfig& c, bool batched, int64_t n, int64_t len, int64_t dim) {
  if (!batched) return {len, dim};
  return c.batch_first ? Shape{n, len, dim} : Shape{len, n, dim};
}

struct Call {
  std::vector<float> query, key, value, gates, attn_f;
  std::vector<uint8_t> kpm;
  Shape q_shape, k_shape, v_shape;
  ForwardOptions options;
  TensorView q() const { return {query.data(), q_shape, query.size()}; }
  TensorView k() const { return {key.data(), k_shape, key.size()}; }
  TensorView v() const { return {value.data(), v_shape, value.size()}; }
};

// A call of `c` with L queries over S keys (self-attention when `self` and the dims allow), the
// options as asked.
void MakeCall(const MhaConfig& c, std::mt19937& rng, bool batched, int64_t N, int64_t L, int64_t S,
              bool self, int mask_kind, bool causal, bool per_head, bool gates, Call* call) {
  self = self && c.same_qkv_dim() && L == S;
  call->q_shape = InputShape(c, batched, N, L, c.embed_dim);
  call->k_shape = InputShape(c, batched, N, S, c.key_dim());
  call->v_shape = InputShape(c, batched, N, S, c.value_dim());
  call->query = test::RandomVector(&rng, static_cast<size_t>(call->q_shape.NumElements()), 2.0f);
  const auto draw = [&](const Shape& s) {
    return test::RandomVector(&rng, static_cast<size_t>(s.NumElements()), 2.0f);
  };
  call->key = self ? call->query : draw(call->k_shape);
  call->value = self ? call->query : draw(call->v_shape);
  ForwardOptions& o = call->options;
  o.need_weights = true;
  o.average_attn_weights = !per_head;
  o.is_causal = causal;
  o.head_stats = true;
  const int64_t H = c.num_heads;
  if (mask_kind == 1) {  // bool key_padding_mask, key 0 never masked
    const Shape shape = batched ? Shape{N, S} : Shape{S};
    call->kpm.resize(static_cast<size_t>(N * S));
    std::bernoulli_distribution coin(0.3);
    for (size_t i = 0; i < call->kpm.size(); ++i) call->kpm[i] = i % S != 0 && coin(rng);
    o.key_padding_mask = MaskView::Bool(call->kpm.data(), shape, call->kpm.size());
  } else if (mask_kind == 2 && !causal) {  // a float (N*H, L, S) mask: per query head
    const Shape shape = batched ? Shape{N * H, L, S} : Shape{H, L, S};
    call->attn_f = test::RandomVector(&rng, static_cast<size_t>(shape.NumElements()), 1.5f);
    o.attn_mask = MaskView::Float(call->attn_f.data(), shape, call->attn_f.size());
  }
  if (gates) {
    call->gates = test::RandomVector(&rng, static_cast<size_t>(H), 1.0f);
    call->gates[0] = 0.0f;
    o.head_gates = {call->gates.data(), {H}, call->gates.size()};
  }
}

// Forward of one call on `a` and on `b`: the same output, weights and head statistics, bit for
// bit. Returns a's result.
ForwardResult ExpectSameForward(MultiheadAttention& a, MultiheadAttention& b, const Call& call) {
  ForwardResult got, want;
  Status s = a.Forward(call.q(), call.k(), call.v(), call.options, &got);
  EXPECT_TRUE(s.ok()) << s.ToString();
  s = b.Forward(call.q(), call.k(), call.v(), call.options, &want);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(got.output_shape, want.output_shape);
  EXPECT_EQ(got.weights_shape, want.weights_shape);
  if (!s.ok() || got.output.size() != want.output.size()) return got;
  EXPECT_TRUE(SameBits(got.output.data(), want.output.data(), want.output.size()));
  EXPECT_TRUE(SameBits(got.weights.data(), want.weights.data(),
                       static_cast<size_t>(want.weights_shape.NumElements())));
  const size_t nh = static_cast<size_t>(want.head_stats.shape.NumElements());
  EXPECT_TRUE(SameBits(got.head_stats.entropy.data(), want.head_stats.entropy.data(), nh));
  EXPECT_TRUE(SameBits(got.head_stats.distance.data(), want.head_stats.distance.data(), nh));
  EXPECT_TRUE(SameBits(got.head_stats.max_weight.data(), want.head_stats.max_weight.data(), nh));
  return got;
}

struct GqaConfig {
  int64_t E, H, G, kdim, vdim;
  bool bias, bias_kv, zero_attn, batch_first;
};

// (E, H, G): G in {1, 2, H / 2}; head dims 1 to 12 (the small-head path and the packed one).
const GqaConfig kConfigs[] = {
    {8, 4, 2, 0, 0, true, false, false, false},  {8, 4, 1, 0, 0, true, false, false, true},
    {12, 6, 3, 5, 7, true, false, false, false}, {12, 6, 2, 0, 0, false, true, true, true},
    {32, 8, 4, 0, 0, true, false, false, true},  {48, 4, 2, 9, 0, true, true, false, false},
    {6, 6, 1, 0, 0, true, false, true, false},   {24, 2, 1, 0, 0, false, false, false, true},
};

MhaConfig ToConfig(const GqaConfig& g);

// A module of `g` with random weights and its repeated twin.
struct Pair {
  std::unique_ptr<MultiheadAttention> gqa, twin;
};
Pair MakePair(const GqaConfig& g, std::mt19937& rng) {
  Pair p;
  EXPECT_TRUE(MultiheadAttention::Create(ToConfig(g), &p.gqa).ok());
  test::LoadRandomWeights(p.gqa.get(), &rng);
  p.twin = RepeatedTwin(*p.gqa);
  return p;
}

MhaConfig ToConfig(const GqaConfig& g) {
  MhaConfig c;
  c.embed_dim = g.E;
  c.num_heads = g.H;
  c.num_kv_heads = g.G;
  c.kdim = g.kdim;
  c.vdim = g.vdim;
  c.bias = g.bias;
  c.add_bias_kv = g.bias_kv;
  c.add_zero_attn = g.zero_attn;
  c.batch_first = g.batch_first;
  return c;
}

TEST(GroupedQuery, StateDictShapes) {
  MhaConfig c;
  c.embed_dim = 12;
  c.num_heads = 6;
  c.num_kv_heads = 2;  // hd 2, Ekv 4
  c.add_bias_kv = true;
  EXPECT_EQ(c.kv_heads(), 2);
  EXPECT_EQ(c.kv_dim(), 4);
  std::vector<std::string> got;
  for (const ParamSpec& p : ExpectedParams(c)) got.push_back(p.name + p.shape.ToString());
  const std::vector<std::string> want = {"in_proj_weight[20, 12]", "in_proj_bias[20]",
                                         "bias_k[1, 1, 4]", "bias_v[1, 1, 4]",
                                         "out_proj.weight[12, 12]", "out_proj.bias[12]"};
  EXPECT_EQ(got, want);
  got.clear();
  for (const ParamSpec& p : AliasParams(c)) got.push_back(p.name + p.shape.ToString());
  EXPECT_EQ(got, (std::vector<std::string>{"q_proj_weight[12, 12]", "k_proj_weight[4, 12]",
                                          "v_proj_weight[4, 12]"}));
  c.kdim = 5;
  c.vdim = 7;
  got.clear();
  for (const ParamSpec& p : ExpectedParams(c)) got.push_back(p.name + p.shape.ToString());
  EXPECT_EQ(got[0], "q_proj_weight[12, 12]");
  EXPECT_EQ(got[1], "k_proj_weight[4, 5]");
  EXPECT_EQ(got[2], "v_proj_weight[4, 7]");
  // G = H or null: torch's shapes.
  c.num_kv_heads = 6;
  EXPECT_EQ(ExpectedParams(c)[1].shape, (Shape{12, 5}));
  c.num_kv_heads = 0;
  EXPECT_EQ(c.kv_dim(), 12);
}

TEST(GroupedQuery, ConfigRules) {
  MhaConfig c;
  c.embed_dim = 12;
  c.num_heads = 4;
  c.num_kv_heads = 3;
  Status s = ValidateConfig(c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.argument(), Arg::kNumKvHeads);
  EXPECT_NE(s.message().find("num_heads (4) must be divisible by num_kv_heads (3)"),
            std::string::npos)
      << s.message();
  c.num_kv_heads = 8;  // more K/V heads than heads: not a divisor either
  EXPECT_FALSE(ValidateConfig(c).ok());
  c.num_kv_heads = -1;
  s = ValidateConfig(c);
  EXPECT_NE(s.message().find("expected null (= num_heads) or an integer in [1, 16777216]"),
            std::string::npos)
      << s.message();
  for (int64_t g : {0, 1, 2, 4}) {
    c.num_kv_heads = g;
    EXPECT_TRUE(ValidateConfig(c).ok()) << g;
  }
  const FieldSpec* f = FindField(MhaConfigSchema(), "numKvHeads");
  ASSERT_NE(f, nullptr);
  EXPECT_STREQ(f->torch, "num_kv_heads");
  EXPECT_STREQ(f->null_means, "num_heads");
}

// Forward, with every option, is the repeated-K/V module's result bit for bit: the output, the
// per-head and averaged weights and the head statistics; and the fast path is the reference's.
TEST(GroupedQuery, ForwardIsTheRepeatedKvModuleBitForBit) {
  std::mt19937 rng(30);
  int calls = 0;
  for (const GqaConfig& g : kConfigs) {
    const MhaConfig c = ToConfig(g);
    const auto [gqa, twin] = MakePair(g, rng);
    for (int variant = 0; variant < 12; ++variant) {
      const bool batched = variant % 3 != 2;
      const int64_t N = batched ? 1 + variant % 3 : 1;
      const int64_t L = variant < 6 ? 5 : 17, S = variant % 2 == 0 ? L : (variant < 6 ? 7 : 20);
      Call call;
      MakeCall(c, rng, batched, N, L, S, /*self=*/variant % 4 == 0, variant % 3,
               /*causal=*/variant % 5 == 1, /*per_head=*/variant % 2 == 0,
               /*gates=*/variant % 4 == 3, &call);
      SCOPED_TRACE("E=" + std::to_string(g.E) + " H=" + std::to_string(g.H) + " G=" +
                   std::to_string(g.G) + " variant " + std::to_string(variant));
      const ForwardResult got = ExpectSameForward(*gqa, *twin, call);
      const size_t nh = static_cast<size_t>(got.head_stats.shape.NumElements());
      ForwardResult ref;
      const Status s =
          ReferenceForward(gqa->weights(), call.q(), call.k(), call.v(), call.options, &ref);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_LE(test::RelativeError(got.output.data(), ref.output.data(), ref.output.size()),
                2e-5);
      EXPECT_LE(test::RelativeError(got.weights.data(), ref.weights.data(), ref.weights.size()),
                2e-5);
      EXPECT_LE(test::RelativeError(got.head_stats.entropy.data(),
                                    ref.head_stats.entropy.data(), nh),
                1e-4);
      ++calls;
    }
  }
  EXPECT_EQ(calls, 96);
}

// The same on every SIMD target this build has (one config per path).
TEST(GroupedQuery, EveryTarget) {
  test::ForEachTarget([](const char*) {
    std::mt19937 rng(31);
    for (const GqaConfig& g : {kConfigs[0], kConfigs[4]}) {
      const MhaConfig c = ToConfig(g);
      const auto [gqa, twin] = MakePair(g, rng);
      Call call;
      MakeCall(c, rng, true, 2, 20, 20, true, 0, true, true, true, &call);
      ExpectSameForward(*gqa, *twin, call);
    }
  });
}

// The trace keeps G K/V heads, [N, G, S', hd]: K/V head g is the twin's head g * (H / G); every
// other stage is the twin's bit for bit, and its output is Forward's.
TEST(GroupedQuery, TraceKeepsTheKvHeads) {
  std::mt19937 rng(32);
  for (const GqaConfig& g : kConfigs) {
    const MhaConfig c = ToConfig(g);
    const auto [gqa, twin] = MakePair(g, rng);
    Call call;
    const bool batched = g.H % 2 == 0;
    MakeCall(c, rng, batched, 2, 4, 6, false, 1, false, true, true, &call);
    AttentionTrace got, want;
    ASSERT_TRUE(gqa->Trace(call.q(), call.k(), call.v(), call.options, &got).ok());
    ASSERT_TRUE(twin->Trace(call.q(), call.k(), call.v(), call.options, &want).ok());
    const int64_t H = g.H, G = g.G, hd = g.E / g.H, group = H / G;
    const int64_t Sp = 6 + g.bias_kv + g.zero_attn, N = batched ? 2 : 1;
    const Shape kv = batched ? Shape{2, G, Sp, hd} : Shape{G, Sp, hd};
    EXPECT_EQ(got.k.shape, kv);
    EXPECT_EQ(got.v.shape, kv);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t kvh = 0; kvh < G; ++kvh) {
        const size_t floats = static_cast<size_t>(Sp * hd);
        const size_t at = static_cast<size_t>((n * G + kvh) * Sp * hd);
        const size_t twin_at = static_cast<size_t>((n * H + kvh * group) * Sp * hd);
        EXPECT_TRUE(SameBits(got.k.data.data() + at, want.k.data.data() + twin_at, floats));
        EXPECT_TRUE(SameBits(got.v.data.data() + at, want.v.data.data() + twin_at, floats));
      }
    }
    for (const auto& [a, b] : {std::pair{&got.q, &want.q}, {&got.scores, &want.scores},
                               {&got.weights, &want.weights}, {&got.head_outputs,
                                                               &want.head_outputs},
                               {&got.concat, &want.concat}, {&got.output, &want.output}}) {
      ASSERT_EQ(a->shape, b->shape);
      EXPECT_TRUE(SameBits(a->data.data(), b->data.data(),
                           static_cast<size_t>(b->shape.NumElements())));
    }
    ForwardResult forward;
    ASSERT_TRUE(gqa->Forward(call.q(), call.k(), call.v(), call.options, &forward).ok());
    EXPECT_TRUE(SameBits(forward.output.data(), got.output.data.data(), forward.output.size()));
  }
}

// num_kv_heads given as num_heads is the module without it: the same state_dict and bits.
TEST(GroupedQuery, ExplicitKvHeadsEqualToHeadsIsThePlainModule) {
  std::mt19937 rng(33);
  MhaConfig plain;
  plain.embed_dim = 16;
  plain.num_heads = 4;
  MhaConfig explicit_heads = plain;
  explicit_heads.num_kv_heads = 4;
  std::unique_ptr<MultiheadAttention> a, b;
  ASSERT_TRUE(MultiheadAttention::Create(plain, &a).ok());
  ASSERT_TRUE(MultiheadAttention::Create(explicit_heads, &b).ok());
  std::mt19937 rng_b = rng;
  test::LoadRandomWeights(a.get(), &rng);
  test::LoadRandomWeights(b.get(), &rng_b);
  Call call;
  MakeCall(plain, rng, true, 2, 14, 14, true, 1, true, true, false, &call);
  ExpectSameForward(*a, *b, call);
}

// Generation's step over a KV cache of G heads: each row is Forward's (is_causal over the whole
// sequence) bit for bit, and the cache holds H / G times fewer floats.
TEST(GroupedQuery, KvCacheHoldsTheKvHeadsOnly) {
  std::mt19937 rng(34);
  for (const int64_t G : {1, 2, 4, 8}) {
    MhaConfig c;
    c.embed_dim = 32;
    c.num_heads = 8;
    c.num_kv_heads = G;
    c.batch_first = true;
    std::unique_ptr<MultiheadAttention> mha;
    ASSERT_TRUE(MultiheadAttention::Create(c, &mha).ok());
    test::LoadRandomWeights(mha.get(), &rng);
    const int64_t N = 2, T = 15;
    const std::vector<float> x = test::RandomVector(&rng, static_cast<size_t>(N * T * 32), 2.0f);
    ForwardOptions full;
    full.is_causal = true;
    full.need_weights = false;
    ForwardResult whole;
    const TensorView all{x.data(), {N, T, 32}, x.size()};
    ASSERT_TRUE(mha->Forward(all, all, all, full, &whole).ok());
    KvCache cache;
    ASSERT_TRUE(cache.Reset(N, T, static_cast<size_t>(c.kv_dim())));
    EXPECT_EQ(cache.floats(), static_cast<size_t>(2 * N * T * 4 * G));  // 2 N T G hd
    CallContext context;
    // A prompt of 6 positions, then one at a time.
    for (int64_t t0 = 0; t0 < T;) {
      const int64_t len = t0 == 0 ? 6 : 1;
      std::vector<float> rows(static_cast<size_t>(N * len * 32));
      for (int64_t n = 0; n < N; ++n) {
        std::memcpy(rows.data() + n * len * 32, x.data() + (n * T + t0) * 32,
                    static_cast<size_t>(len * 32) * sizeof(float));
      }
      ForwardResult step;
      ForwardOptions o;
      const Status s = mha->ForwardCached({rows.data(), {N, len, 32}, rows.size()}, o, &cache,
                                          &step, &context);
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (int64_t n = 0; n < N; ++n) {
        EXPECT_TRUE(SameBits(step.output.data() + n * len * 32,
                             whole.output.data() + (n * T + t0) * 32,
                             static_cast<size_t>(len * 32)))
            << "G=" << G << " t0=" << t0;
      }
      t0 += len;
    }
    // A cache sized for another width is refused.
    KvCache wrong;
    ASSERT_TRUE(wrong.Reset(N, T, 32 + (G == 8 ? 4 : 0)));
    ForwardResult step;
    const TensorView one{x.data(), {N, 1, 32}, static_cast<size_t>(N * 32)};
    EXPECT_FALSE(mha->ForwardCached(one, ForwardOptions(), &wrong, &step, &context).ok());
  }
}

}  // namespace
}  // namespace headscope
