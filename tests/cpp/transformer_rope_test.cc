// Rotary position embeddings in the Transformer (positions rope: TransformerConfig::rope_layout,
// rope_base, rope_fraction; each layer's MultiheadAttention turns q and k, MhaConfig::rope_dims),
// and MultiheadAttention's own rope_dims option (the last test).
// The goldens (tests/golden/transformer/*-rope-*, tests/golden/train/*-rope-*) hold the numbers
// against PyTorch; here what they cannot show: the config's rules and messages; the hooks are
// the projections and exactly their turn; the two layouts are one model up to a permutation of
// W_q's and W_k's rows (and differ without it); the scores depend on the relative position only;
// generation through the KV cache continues the positions (a full recomputation's bits, the
// float64 reference's greedy tokens); the backward that recomputes q and k gives the kept one's
// gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <random>
#include <tuple>
#include <vector>

#include "headscope/reference_transformer.h"
#include "headscope/transformer.h"
#include "test_util.h"

namespace headscope {
namespace {

using test::EntryValues;
using test::MakeTransformer;

// Vocabulary 11, max_len 12, d_model 16, 2 layers of 2 heads (dim 8), rotary positions.
TransformerConfig Config(RopeLayout layout, double fraction = 1.0, int64_t kv_heads = 0,
                         bool causal = true) {
  TransformerConfig c;
  std::tie(c.vocab_size, c.max_len, c.d_model, c.n_layers, c.n_heads, c.d_mlp) =
      std::make_tuple(11, 12, 16, 2, 2, 16);
  c.positions = PositionKind::kRope;
  c.rope_layout = layout;
  c.rope_fraction = fraction;
  c.n_kv_heads = kv_heads;
  c.causal = causal;
  return c;
}

double RelativeError(const float* got, const float* want, size_t n) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return scale > 0 ? err / scale : err;
}

const TraceTensor& Hook(const TransformerResult& r, const std::string& name) {
  for (const auto& h : r.hooks) {
    if (h.first == name) return h.second;
  }
  ADD_FAILURE() << "no hook " << name;
  static const TraceTensor none;
  return none;
}

TEST(TransformerRope, ConfigRulesAndTheirMessages) {
  // The rotary dims: the largest even number <= fraction * head dim, in double.
  TransformerConfig c = Config(RopeLayout::kHalf);
  EXPECT_EQ(RopeDims(c), 8);
  c.rope_fraction = 0.5;
  EXPECT_EQ(RopeDims(c), 4);
  c.rope_fraction = 0.75;
  EXPECT_EQ(RopeDims(c), 6);
  c.rope_fraction = 0.3;  // 2.4 -> 2
  EXPECT_EQ(RopeDims(c), 2);
  c.d_model = 20;  // head dim 10: 0.3 * 10 = 3.0000000000000004 -> 2
  EXPECT_EQ(RopeDims(c), 2);
  c.positions = PositionKind::kLearned;
  EXPECT_EQ(RopeDims(c), 0);
  // No position table: no pos_embed.weight, no hook_pos_embed; the turned q and k after hook_v.
  const TransformerConfig r = Config(RopeLayout::kInterleaved, 1.0, 1);
  for (const TransformerParamSpec& p : TransformerParams(r)) EXPECT_NE(p.name, "pos_embed.weight");
  const std::vector<std::string> hooks = TransformerHookNames(r);
  EXPECT_EQ(std::count(hooks.begin(), hooks.end(), "hook_pos_embed"), 0);
  const auto at = [&](const std::string& h) {
    return std::find(hooks.begin(), hooks.end(), h) - hooks.begin();
  };
  EXPECT_EQ(at("blocks.1.attn.hook_rot_q"), at("blocks.1.attn.hook_v") + 1);
  EXPECT_EQ(at("blocks.1.attn.hook_rot_k"), at("blocks.1.attn.hook_v") + 2);
  EXPECT_EQ(at("blocks.1.attn.hook_attn_scores"), at("blocks.1.attn.hook_v") + 3);
  TransformerConfig learned = r;
  learned.positions = PositionKind::kLearned;
  for (const std::string& h : TransformerHookNames(learned)) {
    EXPECT_EQ(h.find("hook_rot_"), std::string::npos) << h;
  }
  // The rope fields with other positions: refused, naming the field (the schema's rule).
  std::unique_ptr<Transformer> m;
  learned.rope_layout = RopeLayout::kHalf;
  EXPECT_TRUE(Transformer::Create(learned, &m).ok());
  learned.rope_layout = RopeLayout::kInterleaved;
  Status s = Transformer::Create(learned, &m);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.argument(), Arg::kRopeLayout);
  EXPECT_EQ(s.message(), "rope_layout: applies only with positions \"rope\" (positions is "
                         "\"learned\"): leave it at its default, \"half\", got \"interleaved\"");
  learned.rope_layout = RopeLayout::kHalf;
  learned.rope_base = 500000;
  s = Transformer::Create(learned, &m);
  EXPECT_EQ(s.argument(), Arg::kRopeBase);
  EXPECT_EQ(s.message(), "rope_base: applies only with positions \"rope\" (positions is "
                         "\"learned\"): leave it at its default, 10000, got 500000");
  learned.rope_base = 10000;
  learned.positions = PositionKind::kNone;
  learned.rope_fraction = 0.5;
  s = Transformer::Create(learned, &m);
  EXPECT_EQ(s.argument(), Arg::kRopeFraction);
  EXPECT_NE(s.message().find("(positions is \"none\")"), std::string::npos) << s.message();
  // Ranges: fraction in (0, 1], base finite and > 0.
  for (const double f : {0.0, -0.5, 1.5, std::nan("")}) {
    TransformerConfig bad = Config(RopeLayout::kHalf, f);
    s = Transformer::Create(bad, &m);
    EXPECT_EQ(s.argument(), Arg::kRopeFraction) << f;
    EXPECT_NE(s.message().find("expected in (0, 1]"), std::string::npos) << s.message();
  }
  for (const double b : {0.0, -2.0, std::numeric_limits<double>::infinity()}) {
    TransformerConfig bad = Config(RopeLayout::kHalf);
    bad.rope_base = b;
    s = Transformer::Create(bad, &m);
    EXPECT_EQ(s.argument(), Arg::kRopeBase) << b;
    EXPECT_NE(s.message().find("expected a finite number > 0"), std::string::npos) << s.message();
  }
  // A fraction that leaves no pair: 0.2 of 8 dims is 1.6.
  s = Transformer::Create(Config(RopeLayout::kHalf, 0.2), &m);
  EXPECT_EQ(s.argument(), Arg::kRopeFraction);
  EXPECT_EQ(s.message(), "rope_fraction: 0.2 of the head dim d_model / n_heads = 8 gives no pair "
                         "of dims to rotate: at least 2 rotary dims are needed (rope_fraction >= "
                         "2 / 8)");
  TransformerConfig one = Config(RopeLayout::kHalf);
  one.n_heads = 16;  // head dim 1
  s = Transformer::Create(one, &m);
  EXPECT_EQ(s.argument(), Arg::kRopeFraction);
  EXPECT_NE(s.message().find("a head of 1 dim has none"), std::string::npos) << s.message();
  EXPECT_TRUE(Transformer::Create(Config(RopeLayout::kHalf, 0.25), &m).ok());  // 2 of 8
}

// hook_q and hook_k are the projections (what a model without rope computes: the same weights
// under positions none give their bits), hook_rot_q and hook_rot_k exactly their turn by
// RotateHeads, and within 1e-6 of the turn computed in double.
TEST(TransformerRope, HooksAreTheProjectionsAndTheirTurn) {
  for (const RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    const TransformerConfig c = Config(layout, 0.75, 1);  // 6 of 8 dims, multi-query
    std::unique_ptr<Transformer> m = MakeTransformer(c, 7);
    TransformerConfig plain_c = c;
    plain_c.positions = PositionKind::kNone;
    plain_c.rope_layout = RopeLayout::kHalf;
    plain_c.rope_fraction = 1.0;
    std::unique_ptr<Transformer> plain = MakeTransformer(plain_c, 7);  // the same weights (no pos_embed)
    const int32_t tokens[2 * 9] = {1, 5, 2, 8, 8, 3, 0, 10, 4, 9, 9, 1, 2, 7, 3, 3, 6, 5};
    TransformerOptions o;
    o.hooks = {"blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_rot_q",
               "blocks.0.attn.hook_rot_k"};
    TransformerResult r, p;
    ASSERT_TRUE(m->Forward({tokens, 2, 9}, o, &r).ok());
    TransformerOptions po;
    po.hooks = {"blocks.0.attn.hook_q", "blocks.0.attn.hook_k"};
    ASSERT_TRUE(plain->Forward({tokens, 2, 9}, po, &p).ok());
    for (const char* x : {"q", "k"}) {
      SCOPED_TRACE(std::string(x) + (layout == RopeLayout::kHalf ? " half" : " interleaved"));
      const TraceTensor& pre = Hook(r, std::string("blocks.0.attn.hook_") + x);
      const TraceTensor& rot = Hook(r, std::string("blocks.0.attn.hook_rot_") + x);
      const TraceTensor& ref = Hook(p, std::string("blocks.0.attn.hook_") + x);
      ASSERT_EQ(pre.shape, rot.shape);
      ASSERT_EQ(pre.shape, ref.shape);
      EXPECT_EQ(pre.shape[1], *x == 'q' ? 2 : 1);  // [B, H or G, T, dh]
      EXPECT_EQ(std::memcmp(pre.data.data(), ref.data.data(), pre.data.size() * 4), 0);
      // The turn: RotateHeads over [B * heads] sequences of T rows of one head.
      MhaConfig mc;
      mc.embed_dim = 16;
      mc.num_heads = 2;
      mc.rope_dims = 6;
      mc.rope_layout = layout;
      RopeTable table;
      ASSERT_TRUE(table.Reserve(mc, 9));
      std::vector<float> turned(pre.data.data(), pre.data.data() + pre.data.size());
      const size_t seqs = static_cast<size_t>(pre.shape[0] * pre.shape[1]);
      RotateHeads(mc, table, turned.data(), seqs, 9, 9 * 8, 8, 1, 0, false);
      EXPECT_EQ(std::memcmp(turned.data(), rot.data.data(), turned.size() * 4), 0);
      // In double, pair by pair.
      std::vector<float> want(turned.size());
      for (size_t s = 0; s < seqs; ++s) {
        for (size_t t = 0; t < 9; ++t) {
          const float* v = pre.data.data() + (s * 9 + t) * 8;
          float* w = want.data() + (s * 9 + t) * 8;
          std::copy(v, v + 8, w);
          for (size_t i = 0; i < 3; ++i) {
            const size_t a = layout == RopeLayout::kHalf ? i : 2 * i;
            const size_t b = layout == RopeLayout::kHalf ? i + 3 : 2 * i + 1;
            const double angle = static_cast<double>(t) / std::pow(10000.0, (2.0 * i) / 6.0);
            w[a] = static_cast<float>(v[a] * std::cos(angle) - v[b] * std::sin(angle));
            w[b] = static_cast<float>(v[a] * std::sin(angle) + v[b] * std::cos(angle));
          }
        }
      }
      EXPECT_LE(RelativeError(rot.data.data(), want.data(), want.size()), 1e-6);
      // And inverse turns it back (to rounding).
      RotateHeads(mc, table, turned.data(), seqs, 9, 9 * 8, 8, 1, 0, true);
      EXPECT_LE(RelativeError(turned.data(), pre.data.data(), turned.size()), 1e-6);
    }
  }
}

// The layouts are one model up to a permutation of each head's rows of W_q and W_k (and their
// biases): interleaved dim 2i <-> half dim i, 2i + 1 <-> i + r/2 (the pass-through dims stay).
// With the rows permuted the logits agree (to the summation order of the scores, 1e-5); as they
// are, they differ.
TEST(TransformerRope, TheLayoutsAreOnePermutationOfWqWkApart) {
  for (const double fraction : {1.0, 0.5}) {
    for (const int64_t kv : {0, 1}) {
      SCOPED_TRACE("fraction " + std::to_string(fraction) + " kv " + std::to_string(kv));
      const TransformerConfig ci = Config(RopeLayout::kInterleaved, fraction, kv);
      const TransformerConfig ch = Config(RopeLayout::kHalf, fraction, kv);
      std::unique_ptr<Transformer> inter = MakeTransformer(ci, 11);
      std::unique_ptr<Transformer> half = MakeTransformer(ch, 0), same = MakeTransformer(ch, 0);
      const int64_t D = 16, dh = 8, r = RopeDims(ci), G = kv > 0 ? kv : 2;
      // Half's dim j of a head reads interleaved's dim src[j].
      std::vector<int64_t> src(static_cast<size_t>(dh));
      for (int64_t j = 0; j < dh; ++j) {
        src[static_cast<size_t>(j)] = j >= r ? j : (j < r / 2 ? 2 * j : 2 * (j - r / 2) + 1);
      }
      for (const TransformerParamSpec& p : TransformerParams(ci)) {
        std::vector<float> v = EntryValues(*inter, p.name);
        std::vector<float> permuted = v;
        if (p.name.find("attn.in_proj_") != std::string::npos) {
          const int64_t cols = p.shape.rank == 2 ? p.shape[1] : 1;
          // q rows [0, D) and k rows [D, D + G dh): each head's rows by src.
          for (int64_t row = 0; row < D + G * dh; ++row) {
            const int64_t base = row < D ? row / dh * dh : D + (row - D) / dh * dh;
            const int64_t from = base + src[static_cast<size_t>(row - base)];
            std::copy(v.begin() + from * cols, v.begin() + (from + 1) * cols,
                      permuted.begin() + row * cols);
          }
        }
        ASSERT_TRUE(half->SetParameter(p.name, {permuted.data(), p.shape, permuted.size()}).ok());
        ASSERT_TRUE(same->SetParameter(p.name, {v.data(), p.shape, v.size()}).ok());
      }
      const int32_t tokens[2 * 12] = {1, 5, 2, 8, 8, 3, 0, 10, 4, 9, 9, 1,
                                      2, 7, 3, 3, 6, 5, 4, 4, 1, 0, 10, 2};
      TransformerResult a, b, c;
      ASSERT_TRUE(inter->Forward({tokens, 2, 12}, {}, &a).ok());
      ASSERT_TRUE(half->Forward({tokens, 2, 12}, {}, &b).ok());
      ASSERT_TRUE(same->Forward({tokens, 2, 12}, {}, &c).ok());
      EXPECT_LE(RelativeError(b.logits.data(), a.logits.data(), a.logits.size()), 1e-5);
      EXPECT_GE(RelativeError(c.logits.data(), a.logits.data(), a.logits.size()), 1e-2);
    }
  }
}

// RoPE's relative-position property: with the layer's input at a position depending on its
// token alone (layer 0's, pre-norm: ln1 of the token's embedding, no position added), query m's
// score for key n is the score of query m + k for key n + k when those hold the same tokens, for
// every head and both layouts (within 1e-5 of the largest score); with learned positions it is
// not.
TEST(TransformerRope, ScoresDependOnTheRelativePositionOnly) {
  const int32_t tokens[12] = {4, 9, 1, 7, 4, 9, 1, 7, 4, 9, 1, 7};  // period 4
  for (const RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    for (const bool causal : {true, false}) {
      TransformerConfig c = Config(layout, 1.0, 0, causal);
      c.rope_base = 100;  // turns fast enough to matter over 12 positions
      std::unique_ptr<Transformer> m = MakeTransformer(c, 5);
      TransformerOptions o;
      o.hooks = {"blocks.0.attn.hook_attn_scores"};
      TransformerResult r;
      ASSERT_TRUE(m->Forward({tokens, 1, 12}, o, &r).ok());
      const std::vector<float> s(Hook(r, o.hooks[0]).data.data(),
                                 Hook(r, o.hooks[0]).data.data() + 2 * 12 * 12);
      double scale = 0, err = 0, spread = 0;
      for (float x : s) {
        if (std::isfinite(x)) scale = std::max(scale, std::fabs(static_cast<double>(x)));
      }
      for (int h = 0; h < 2; ++h) {
        for (int mq = 0; mq < 12; ++mq) {
          for (int n = 0; n < 12; ++n) {
            const float x = s[static_cast<size_t>((h * 12 + mq) * 12 + n)];
            if (!std::isfinite(x)) continue;
            // (n visible from mq; the shifted pair is then visible too)
            for (int k = 4; mq + k < 12 && n + k < 12; k += 4) {
              const float y = s[static_cast<size_t>((h * 12 + mq + k) * 12 + n + k)];
              err = std::max(err, std::fabs(static_cast<double>(x) - y));
            }
            // The same tokens at another distance score differently.
            if (n + 4 < 12 && (!causal || n + 4 <= mq)) {
              spread = std::max(spread, std::fabs(static_cast<double>(x) -
                                                  s[static_cast<size_t>((h * 12 + mq) * 12 + n + 4)]));
            }
          }
        }
      }
      EXPECT_LE(err / scale, 1e-5);
      EXPECT_GE(spread / scale, 1e-2);
      // Learned positions break it (the property is RoPE's, not the test's).
      TransformerConfig lc = c;
      lc.positions = PositionKind::kLearned;
      lc.rope_layout = RopeLayout::kHalf;  // (the rope fields at their defaults)
      lc.rope_base = 10000;
      std::unique_ptr<Transformer> lm = MakeTransformer(lc, 5);
      ASSERT_TRUE(lm->Forward({tokens, 1, 12}, o, &r).ok());
      const float* ls = Hook(r, o.hooks[0]).data.data();
      double lerr = 0;
      for (int mq = 0; mq + 4 < 12; ++mq) {
        for (int n = 0; n <= (causal ? mq : 7); ++n) {
          lerr = std::max(lerr, std::fabs(static_cast<double>(ls[mq * 12 + n]) -
                                          ls[(mq + 4) * 12 + n + 4]));
        }
      }
      EXPECT_GE(lerr / scale, 1e-3);
    }
  }
}

// Generation continues the positions through the KV cache (whose keys are stored turned): each
// step's logits are the bits of a full Forward over the sequence so far, however the steps are
// split, and the greedy tokens are the float64 reference's argmax over the whole sequence at
// every step (torch's greedy generation, the reference module having no cache).
TEST(TransformerRope, GenerationThroughTheCacheIsAFullRecomputation) {
  for (const RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    for (const int64_t kv : {0, 1}) {
      SCOPED_TRACE(std::string(layout == RopeLayout::kHalf ? "half" : "interleaved") + " kv " +
                   std::to_string(kv));
      const TransformerConfig c = Config(layout, 0.5, kv);
      std::unique_ptr<Transformer> m = MakeTransformer(c, 23);
      const int64_t B = 2, T = 3, n = 9, W = T + n, V = 11;
      const int32_t prompt[B * T] = {1, 5, 2, 8, 0, 3};
      GenerateOptions o;
      o.max_new_tokens = n;
      o.keep_logits = true;
      GenerateResult g;
      ASSERT_TRUE(m->Generate({prompt, B, T}, o, &g).ok());
      // In steps of 2, then 3, ...: the same bits.
      GenerateResult split;
      ASSERT_TRUE(m->GenerateBegin({prompt, B, T}, o, &split).ok());
      bool done = false;
      for (int64_t k = 2; !done; ++k) ASSERT_TRUE(m->GenerateContinue(k, &split, &done).ok());
      EXPECT_EQ(split.tokens, g.tokens);
      EXPECT_EQ(std::memcmp(split.logits.data(), g.logits.data(), g.logits.size() * 4), 0);
      std::vector<std::pair<std::string, std::vector<double>>> sd;
      for (const TransformerParamSpec& p : TransformerParams(c)) {
        const std::vector<float> v = EntryValues(*m, p.name);
        sd.emplace_back(p.name, std::vector<double>(v.begin(), v.end()));
      }
      for (int64_t s = 0; s < n; ++s) {
        std::vector<int32_t> prefix;
        for (int64_t b = 0; b < B; ++b) {
          prefix.insert(prefix.end(), g.tokens.begin() + b * W, g.tokens.begin() + b * W + T + s);
        }
        TransformerResult r;
        ASSERT_TRUE(m->Forward({prefix.data(), B, T + s}, {}, &r).ok());
        ReferenceTransformerResult ref;
        ASSERT_TRUE(ReferenceTransformer(c, sd, prefix.data(), B, T + s, nullptr, nullptr, &ref)
                        .ok());
        for (int64_t b = 0; b < B; ++b) {
          const float* row = r.logits.data() + (b * (T + s) + T + s - 1) * V;
          EXPECT_EQ(std::memcmp(g.logits.data() + (b * n + s) * V, row, V * 4), 0)
              << "step " << s << " sequence " << b;
          const double* want = ref.logits.data() + (b * (T + s) + T + s - 1) * V;
          EXPECT_EQ(g.tokens[static_cast<size_t>(b * W + T + s)],
                    std::max_element(want, want + V) - want)
              << "step " << s << " sequence " << b;
          std::vector<float> w32(want, want + V);
          EXPECT_LE(RelativeError(row, w32.data(), static_cast<size_t>(V)), 1e-5);
        }
      }
    }
  }
}

// The backward turns the gradients of the turned q and k back (dq = R^T dq_rot): a batch of one
// sequence repeated 24 times (q, k and v recomputed in the backward: Saved::keep_qkv is off above
// 2 MiB of projections) has the gradients of the sequence alone (kept), to float rounding; and
// both match the float64 reference.
TEST(TransformerRope, RecomputedAndKeptProjectionsGiveTheSameGradients) {
  TransformerConfig c;
  std::tie(c.vocab_size, c.max_len, c.d_model, c.n_layers, c.n_heads, c.d_mlp) =
      std::make_tuple(13, 96, 64, 3, 4, 0);
  c.positions = PositionKind::kRope;
  c.rope_layout = RopeLayout::kInterleaved;
  c.rope_fraction = 0.5;
  c.n_kv_heads = 2;
  std::unique_ptr<Transformer> m = MakeTransformer(c, 3);
  const int64_t T = 96, many = 24;  // 24 * 96 rows * 128 floats * 3 layers * 4 bytes > 2 MiB
  std::vector<int32_t> tokens(static_cast<size_t>(T)), targets(tokens.size());
  for (int64_t t = 0; t < T; ++t) {
    tokens[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7 + 3) % 13);
    targets[static_cast<size_t>(t)] = static_cast<int32_t>((t * 5 + 1) % 13);
  }
  std::vector<int32_t> rep_tokens, rep_targets;
  for (int64_t b = 0; b < many; ++b) {
    rep_tokens.insert(rep_tokens.end(), tokens.begin(), tokens.end());
    rep_targets.insert(rep_targets.end(), targets.begin(), targets.end());
  }
  BackwardResult one, all;
  ASSERT_TRUE(m->Backward({tokens.data(), 1, T}, targets.data(), {}, &one).ok());
  std::vector<std::vector<float>> g1;
  for (const TransformerParamSpec& p : TransformerParams(c)) g1.push_back(EntryValues(*m, p.name, true));
  ASSERT_TRUE(m->Backward({rep_tokens.data(), many, T}, rep_targets.data(), {}, &all).ok());
  EXPECT_NEAR(one.loss, all.loss, 1e-6 * std::fabs(one.loss));
  std::vector<std::pair<std::string, std::vector<double>>> sd;
  for (const TransformerParamSpec& p : TransformerParams(c)) {
    const std::vector<float> v = EntryValues(*m, p.name);
    sd.emplace_back(p.name, std::vector<double>(v.begin(), v.end()));
  }
  ReferenceTransformerResult ref;
  ASSERT_TRUE(ReferenceTransformer(c, sd, tokens.data(), 1, T, targets.data(), nullptr, &ref).ok());
  size_t i = 0;
  for (const TransformerParamSpec& p : TransformerParams(c)) {
    const std::vector<float> ga = EntryValues(*m, p.name, true);
    EXPECT_LE(RelativeError(ga.data(), g1[i].data(), ga.size()), 1e-5) << p.name;
    const std::vector<double>& want = ref.grads.at(i).second;
    ASSERT_EQ(ref.grads.at(i).first, p.name);
    std::vector<float> w32(want.begin(), want.end());
    EXPECT_LE(RelativeError(g1[i].data(), w32.data(), w32.size()), 1e-4) << p.name;
    ++i;
  }
}

}  // namespace
}  // namespace headscope

namespace headscope {
namespace {

// MultiheadAttention's own option (rope_dims, rope_layout, rope_base): its rules and messages; the
// trace keeps q and k as projected and the turned ones in rot_q / rot_k, and Forward gives the
// trace's output bits; ForwardCached over a cache continues the positions (its rows are the
// bits of one Forward over the whole sequence, causal).
TEST(MultiheadAttentionRope, RulesTraceAndTheCache) {
  MhaConfig c;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.batch_first = true;
  c.rope_dims = 4;
  c.rope_layout = RopeLayout::kInterleaved;
  c.rope_base = 100;
  EXPECT_TRUE(ValidateConfig(c).ok());
  MhaConfig bad = c;
  bad.rope_dims = 3;
  Status s = ValidateConfig(bad);
  EXPECT_EQ(s.argument(), Arg::kRopeDims);
  EXPECT_EQ(s.message(), "rope_dims: expected 0 (no rotation) or an even number of dims up to the "
                         "head dim embed_dim / num_heads = 4, got 3");
  bad.rope_dims = 6;
  EXPECT_EQ(ValidateConfig(bad).argument(), Arg::kRopeDims);
  bad.rope_dims = 1;  // below the row's range [2, ...] (0: none)
  EXPECT_NE(ValidateConfig(bad).message().find("expected 0 (no rotation) or an integer in [2, "),
            std::string::npos);
  bad.rope_dims = 0;
  s = ValidateConfig(bad);
  EXPECT_EQ(s.argument(), Arg::kRopeLayout);
  EXPECT_EQ(s.message(), "rope_layout: applies only with rope_dims > 0 (rope_dims is 0): leave it "
                         "at its default, \"half\", got \"interleaved\"");
  bad.rope_layout = RopeLayout::kHalf;
  EXPECT_EQ(ValidateConfig(bad).argument(), Arg::kRopeBase);

  std::unique_ptr<MultiheadAttention> mha;
  ASSERT_TRUE(MultiheadAttention::Create(c, &mha).ok());
  std::mt19937 rng(5);
  test::LoadRandomWeights(mha.get(), &rng);
  const int64_t N = 2, T = 7;
  const std::vector<float> x = test::RandomVector(&rng, N * T * 8);
  const TensorView in{x.data(), {N, T, 8}, x.size()};
  ForwardOptions o;
  o.is_causal = true;
  o.need_weights = false;
  AttentionTrace trace;
  ForwardResult full;
  ASSERT_TRUE(mha->Trace(in, in, in, o, &trace).ok());
  ASSERT_TRUE(mha->Forward(in, in, in, o, &full).ok());
  EXPECT_EQ(std::memcmp(trace.output.data.data(), full.output.data(), full.output.size() * 4), 0);
  EXPECT_EQ(trace.rot_q.shape, trace.q.shape);
  EXPECT_EQ(trace.rot_k.shape, trace.k.shape);
  RopeTable table;
  ASSERT_TRUE(table.Reserve(c, T));
  std::vector<float> turned(trace.q.data.data(), trace.q.data.data() + trace.q.data.size());
  RotateHeads(c, table, turned.data(), N * 2, T, T * 4, 4, 1, 0, false);
  EXPECT_EQ(std::memcmp(turned.data(), trace.rot_q.data.data(), turned.size() * 4), 0);
  // Positions 0 .. 3 then 4 .. 6 through a cache: the full call's rows, bit for bit.
  KvCache cache;
  ASSERT_TRUE(cache.Reset(N, T, 8));
  CallContext context;
  std::vector<float> got(static_cast<size_t>(N * T * 8));
  for (const auto& [t0, len] : {std::pair<int64_t, int64_t>{0, 4}, {4, 3}}) {
    std::vector<float> part;
    for (int64_t n = 0; n < N; ++n) {
      part.insert(part.end(), x.begin() + (n * T + t0) * 8, x.begin() + (n * T + t0 + len) * 8);
    }
    ForwardResult r;
    ForwardOptions co;
    ASSERT_TRUE(mha->ForwardCached({part.data(), {N, len, 8}, part.size()}, co, &cache, &r,
                                   &context)
                    .ok());
    for (int64_t n = 0; n < N; ++n) {
      std::copy(r.output.data() + n * len * 8, r.output.data() + (n + 1) * len * 8,
                got.begin() + (n * T + t0) * 8);
    }
  }
  EXPECT_EQ(std::memcmp(got.data(), full.output.data(), got.size() * 4), 0);
}

}  // namespace
}  // namespace headscope
