// The float64 reference Transformer (reference_transformer.h), the oracle of the gradients:
//   - its hand-written backward against central finite differences of its own loss, on every
//     element of every state_dict entry and on every head gate, over a table of tiny configs
//     spanning every option;
//   - its forward (logits, every hook) and loss against the fast float32 Transformer's;
//   - bad input refused with a Status naming the argument.
#include "headscope/reference_transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "headscope/transformer.h"
#include "test_util.h"

namespace headscope {
namespace {

using StateDict = std::vector<std::pair<std::string, std::vector<double>>>;

// Central differences (L(w + h) - L(w - h)) / 2h: truncation error ~h^2 L''' / 6 ~ 1e-13, and
// rounding error ~ (a few ulps of L) / 2h ~ 1e-9 at worst, both far below the tolerance.
constexpr double kStep = 1e-6;
// Per tensor: max |analytic - fd| / max(max |fd|, kFloor) <= kFdTolerance. The floor stands in
// for the scale of a tensor whose gradient is 0 in exact arithmetic (a ReLU unit that never fires,
// a head gated to 0): there fd is rounding noise and the analytic gradient 0.
constexpr double kFdTolerance = 1e-6;
constexpr double kFloor = 1e-3;
// Every element natively in Release and in WebAssembly. An unoptimized build (the sanitize
// preset's Debug) runs Eigen about 100 times slower, and the sanitizers need every code path of
// every config rather than every element: there every 16th element of each entry, and its last.
#if defined(__OPTIMIZE__)
constexpr size_t kElementStride = 1;
#else
constexpr size_t kElementStride = 16;
#endif

// A config and its inputs, written as words so the table reads at a glance:
//   pre|post|none  learned|sinusoidal|nopos  causal|bidir  gelu|relu  bias|nobias
//   mlp=<d_mlp> L=<n_layers> H=<n_heads> D=<d_model> V=<vocab> max=<max_len> B=<batch> T=<len>
//   gates (head gates with a 0 and a value > 1; else none, all 1)  ignore (some targets -100)
//   eps=<ln_eps>  tied (tie_embeddings)  kv=<n_kv_heads> (grouped-query attention)
//   rope|rope-interleaved (positions rope, its layout)  frac=<rope_fraction>  base=<rope_base>
//   sinks (attn_sinks)
struct Case {
  std::string spec;
  TransformerConfig config;
  int64_t batch = 1, length = 1;
  bool gates = false, ignore = false;
};

Case Parse(const std::string& spec) {
  Case k;
  k.spec = spec;
  TransformerConfig& c = k.config;
  const std::map<std::string, int64_t*> sizes = {
      {"mlp", &c.d_mlp},    {"L", &c.n_layers},  {"H", &c.n_heads}, {"D", &c.d_model},
      {"V", &c.vocab_size}, {"max", &c.max_len}, {"B", &k.batch},   {"T", &k.length},
      {"kv", &c.n_kv_heads}, {"w", &c.attn_window}};
  std::istringstream words(spec);
  std::string w;
  while (words >> w) {
    const size_t eq = w.find('=');
    if (eq != std::string::npos) {
      const std::string key = w.substr(0, eq), value = w.substr(eq + 1);
      if (key == "eps") {
        c.ln_eps = std::stod(value);
      } else if (key == "frac" || key == "base") {
        (key == "frac" ? c.rope_fraction : c.rope_base) = std::stod(value);
      } else if (sizes.count(key) != 0) {
        *sizes.at(key) = std::stoll(value);
      } else {
        ADD_FAILURE() << "unknown word '" << w << "' in '" << spec << "'";
      }
    } else if (w == "pre" || w == "post" || w == "none") {
      c.norm = w == "pre"    ? NormPlacement::kPre
               : w == "post" ? NormPlacement::kPost
                             : NormPlacement::kNone;
    } else if (w == "learned" || w == "sinusoidal" || w == "nopos" || w == "alibi") {
      c.positions = w == "learned"      ? PositionKind::kLearned
                    : w == "sinusoidal" ? PositionKind::kSinusoidal
                    : w == "alibi"      ? PositionKind::kAlibi
                                        : PositionKind::kNone;
    } else if (w == "causal" || w == "bidir") {
      c.causal = w == "causal";
    } else if (w == "gelu" || w == "relu") {
      c.act = w == "gelu" ? Activation::kGelu : Activation::kRelu;
    } else if (w == "bias" || w == "nobias") {
      c.bias = w == "bias";
    } else if (w == "gates" || w == "ignore") {
      (w == "gates" ? k.gates : k.ignore) = true;
    } else if (w == "tied") {
      c.tie_embeddings = true;
    } else if (w == "sinks") {
      c.attn_sinks = true;
    } else if (w == "rope" || w == "rope-interleaved") {
      c.positions = PositionKind::kRope;
      c.rope_layout = w == "rope" ? RopeLayout::kHalf : RopeLayout::kInterleaved;
    } else {
      ADD_FAILURE() << "unknown word '" << w << "' in '" << spec << "'";
    }
  }
  return k;
}

// The finite-difference table: tiny models (d_model <= 8), every option, T = 1 and T = max_len,
// n_heads == d_model, odd d_model (sinusoidal's last column is a sine), 1 to 3 layers.
const char* const kFdCases[] = {
    "pre learned causal gelu bias mlp=8 L=1 H=1 D=4 V=5 max=6 B=1 T=4",
    "pre learned causal gelu bias mlp=0 L=2 H=2 D=8 V=7 max=5 B=2 T=5 gates ignore",
    "pre sinusoidal causal relu bias mlp=6 L=2 H=4 D=8 V=6 max=8 B=3 T=3 ignore",
    "pre sinusoidal bidir gelu nobias mlp=0 L=1 H=2 D=6 V=5 max=4 B=2 T=4 gates",
    "pre nopos causal gelu nobias mlp=5 L=3 H=1 D=4 V=6 max=5 B=1 T=5",
    "pre nopos bidir relu bias mlp=8 L=1 H=8 D=8 V=4 max=3 B=2 T=3 gates",
    "post learned causal gelu bias mlp=8 L=2 H=2 D=8 V=6 max=6 B=2 T=4 ignore",
    "post learned bidir relu nobias mlp=0 L=1 H=4 D=4 V=5 max=3 B=3 T=1",
    "post sinusoidal causal gelu bias mlp=4 L=3 H=2 D=4 V=5 max=4 B=1 T=3 gates",
    "post sinusoidal bidir gelu bias mlp=0 L=2 H=1 D=5 V=6 max=5 B=2 T=5 eps=1e-3",
    "post nopos causal relu bias mlp=6 L=1 H=2 D=6 V=5 max=6 B=2 T=5 gates ignore",
    "post nopos bidir gelu nobias mlp=4 L=2 H=3 D=6 V=4 max=3 B=1 T=2",
    "none learned causal gelu bias mlp=8 L=1 H=2 D=8 V=6 max=4 B=2 T=3",
    "none learned bidir gelu nobias mlp=0 L=3 H=1 D=4 V=5 max=6 B=1 T=4 ignore",
    "none sinusoidal causal relu nobias mlp=8 L=2 H=4 D=8 V=5 max=5 B=2 T=4 gates",
    "none sinusoidal bidir relu bias mlp=4 L=1 H=4 D=4 V=6 max=2 B=2 T=1",
    "none nopos causal gelu bias mlp=0 L=2 H=2 D=4 V=4 max=4 B=3 T=3 gates ignore",
    "none nopos bidir gelu bias mlp=6 L=1 H=1 D=3 V=5 max=4 B=1 T=4",
    "pre learned causal gelu bias mlp=4 L=2 H=2 D=4 V=5 max=3 B=2 T=1 gates",
    "pre learned causal relu nobias mlp=8 L=3 H=4 D=8 V=6 max=6 B=2 T=6",
    "post learned causal gelu bias mlp=8 L=3 H=8 D=8 V=5 max=4 B=1 T=4 gates",
    "pre sinusoidal causal gelu bias mlp=4 L=1 H=1 D=5 V=4 max=7 B=3 T=2 ignore",
    "none learned causal relu bias mlp=4 L=2 H=2 D=6 V=9 max=5 B=1 T=5 ignore",
    "post nopos causal gelu nobias mlp=0 L=1 H=2 D=8 V=3 max=8 B=2 T=8",
    "pre learned bidir gelu bias mlp=8 L=2 H=4 D=8 V=6 max=5 B=3 T=4 gates ignore",
    "post sinusoidal causal relu bias mlp=8 L=2 H=8 D=8 V=5 max=3 B=1 T=1",
    "none nopos causal gelu nobias mlp=8 L=3 H=2 D=8 V=4 max=4 B=2 T=4 gates",
    "pre learned causal gelu bias mlp=6 L=2 H=2 D=4 V=6 max=5 B=2 T=4 tied ignore",
    "post sinusoidal causal relu nobias mlp=0 L=1 H=2 D=6 V=5 max=4 B=2 T=4 tied gates",
    // Grouped-query attention: G = 1 (multi-query), 2 and H / 2 K/V heads.
    "pre learned causal gelu bias mlp=6 L=2 H=4 D=8 V=6 max=5 B=2 T=4 kv=2 gates ignore",
    "post sinusoidal bidir relu nobias mlp=0 L=1 H=4 D=8 V=5 max=4 B=2 T=3 kv=1",
    "none nopos causal gelu bias mlp=4 L=2 H=2 D=4 V=5 max=4 B=1 T=4 kv=1 gates",
    "pre learned causal relu bias mlp=0 L=1 H=6 D=6 V=5 max=4 B=2 T=4 kv=3 tied",
    // ALiBi (3 heads: not a power of two) and sliding windows (causal w = 1, 2; bidirectional).
    "pre alibi causal gelu bias mlp=6 L=2 H=3 D=6 V=5 max=5 B=2 T=5 gates ignore",
    "post alibi bidir relu nobias mlp=0 L=1 H=2 D=4 V=5 max=4 B=2 T=4",
    "pre learned causal gelu bias mlp=4 L=2 H=2 D=4 V=5 max=6 B=2 T=6 w=2 ignore",
    "none sinusoidal bidir gelu bias mlp=0 L=2 H=2 D=4 V=5 max=5 B=1 T=5 w=2 gates",
    "pre alibi causal relu bias mlp=4 L=2 H=4 D=8 V=6 max=6 B=2 T=6 w=3 kv=2",
    "post alibi causal gelu bias mlp=0 L=1 H=2 D=4 V=4 max=5 B=2 T=5 w=1",
    // Rotary positions: both layouts, partial rotary, another base, grouped-query, T = 1.
    "pre rope causal gelu bias mlp=6 L=2 H=2 D=8 V=6 max=5 B=2 T=5 gates ignore",
    "post rope-interleaved bidir relu nobias mlp=0 L=1 H=1 D=8 V=5 max=4 B=2 T=4 frac=0.5",
    "none rope causal gelu bias mlp=4 L=2 H=2 D=8 V=5 max=6 B=1 T=6 kv=1 base=100 frac=0.5",
    "pre rope-interleaved causal gelu bias mlp=0 L=1 H=2 D=6 V=5 max=3 B=2 T=1 kv=1",
    // Attention sinks: alone, with every other variant, bidirectional, T = 1.
    "pre learned causal gelu bias mlp=6 L=2 H=2 D=4 V=6 max=5 B=2 T=5 sinks gates ignore",
    "post alibi bidir relu nobias mlp=0 L=1 H=3 D=6 V=5 max=4 B=2 T=4 w=2 sinks",
    "none rope causal gelu bias mlp=4 L=2 H=4 D=8 V=5 max=5 B=1 T=5 kv=2 sinks gates",
    "pre sinusoidal causal gelu bias mlp=0 L=1 H=2 D=4 V=4 max=3 B=3 T=1 sinks",
};

// Larger models, for the forward against the fast path only (its SIMD tiles and loops beyond a
// vector's width).
const char* const kForwardOnlyCases[] = {
    "pre learned causal gelu bias mlp=64 L=2 H=4 D=32 V=50 max=20 B=3 T=17 gates ignore",
    "post sinusoidal bidir relu nobias mlp=48 L=2 H=2 D=24 V=31 max=16 B=2 T=16",
    "none nopos causal gelu bias mlp=0 L=3 H=8 D=64 V=40 max=12 B=2 T=9 gates",
    "pre sinusoidal bidir relu bias mlp=20 L=1 H=5 D=20 V=13 max=33 B=1 T=33",
    "pre learned causal gelu bias mlp=64 L=2 H=4 D=32 V=50 max=20 B=2 T=20 tied",
    "pre learned causal gelu bias mlp=64 L=2 H=8 D=32 V=50 max=20 B=2 T=20 kv=2 gates",
    "pre alibi causal gelu bias mlp=32 L=2 H=6 D=24 V=30 max=40 B=2 T=40 w=9 gates",
    "post alibi bidir relu bias mlp=0 L=1 H=12 D=24 V=20 max=33 B=1 T=33 w=5",
    "pre rope causal gelu bias mlp=64 L=2 H=4 D=32 V=50 max=20 B=2 T=20 kv=2 frac=0.5",
    "post rope-interleaved bidir relu nobias mlp=0 L=2 H=2 D=24 V=31 max=16 B=2 T=16 base=500",
    "pre alibi causal gelu bias mlp=32 L=2 H=4 D=32 V=30 max=40 B=2 T=40 w=17 kv=2 sinks gates",
};

// Inputs of a case, all drawn from one seed. Weights are floats widened to double, so the fast
// model can load exactly the same ones.
struct Inputs {
  StateDict state_dict;
  std::vector<int32_t> tokens, targets;
  std::vector<double> gates;  // [L * H]: the case's gates, or all 1
};

Inputs Draw(const Case& k, uint32_t seed) {
  const TransformerConfig& c = k.config;
  std::mt19937 rng(seed);
  const auto uniform = [&](double a) {
    return static_cast<double>(
        static_cast<float>(std::uniform_real_distribution<double>(-a, a)(rng)));
  };
  Inputs in;
  for (const TransformerParamSpec& p : TransformerParams(c)) {
    const bool ln = p.name.find("ln") != std::string::npos;  // ln1, ln2, ln_final
    const bool embed = p.name == "tok_embed.weight" || p.name == "pos_embed.weight";
    const bool bias = p.name.size() > 4 && p.name.compare(p.name.size() - 4, 4, "bias") == 0;
    const double fan_in = static_cast<double>(p.shape[p.shape.rank - 1]);
    std::vector<double> v(static_cast<size_t>(p.shape.NumElements()));
    // LayerNorm weights near 1; the Linear weights scaled by fan-in, so the residual stream of a
    // model without norms stays O(1) through its layers.
    const double linear = 1.5 / std::sqrt(fan_in);
    for (double& x : v) {
      if (ln) {
        x = bias ? uniform(0.2) : 1.0 + uniform(0.3);
      } else {
        x = uniform(embed ? 1.0 : bias ? 0.2 : linear);
      }
    }
    if (!p.tied_to.empty()) {  // tie_embeddings: the same tensor, so the same values
      for (const auto& [name, values] : in.state_dict) {
        if (name == p.tied_to) v = values;
      }
    }
    in.state_dict.push_back({p.name, std::move(v)});
  }
  const int64_t n = k.batch * k.length;
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab_size - 1));
  for (int64_t i = 0; i < n; ++i) in.tokens.push_back(token(rng));
  // A token repeated in every sequence: its embedding row gathers two rows' gradients.
  for (int64_t b = 0; b < k.batch && k.length > 1; ++b) {
    in.tokens[b * k.length + k.length - 1] = in.tokens[b * k.length];
  }
  for (int64_t i = 0; i < n; ++i) in.targets.push_back(token(rng));
  if (k.ignore) {
    // Every third position ignored (so at least one is, and at least one is counted).
    for (int64_t i = 0; i < n; i += 3) in.targets[i] = -100;
    if (n == 1) in.targets[0] = 0;
  }
  in.gates.assign(static_cast<size_t>(c.n_layers * c.n_heads), 1.0);
  if (k.gates) {
    const double cycle[] = {1.5, 0.0, 0.75, 2.0, -0.5};
    for (size_t i = 0; i < in.gates.size(); ++i) in.gates[i] = cycle[i % 5];
  }
  return in;
}

Status RunCase(const Case& k, const Inputs& in, const StateDict& sd, const double* gates,
               ReferenceTransformerResult* r, bool with_targets = true) {
  return ReferenceTransformer(k.config, sd, in.tokens.data(), k.batch, k.length,
                              with_targets ? in.targets.data() : nullptr, gates, r);
}

// Mean cross-entropy over the targets that are not -100, from a forward-only pass's logits: the
// finite differences need the loss alone, and a pass without targets skips the backward (half the
// time of the 32 000 passes). The reference's own loss is checked against it.
double Loss(const Case& k, const Inputs& in, const StateDict& sd, const double* gates) {
  ReferenceTransformerResult r;
  const Status s = RunCase(k, in, sd, gates, &r, /*with_targets=*/false);
  EXPECT_TRUE(s.ok()) << s.ToString();
  const int64_t V = k.config.vocab_size;
  double total = 0;
  int64_t counted = 0;
  for (int64_t p = 0; p < k.batch * k.length; ++p) {
    const int32_t t = in.targets[p];
    if (t == -100) continue;
    const double* row = r.logits.data() + p * V;
    const double max = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(row[j] - max);
    total += std::log(sum) - (row[t] - max);
    ++counted;
  }
  return total / static_cast<double>(counted);
}

// max |a - fd| / max(max |fd|, kFloor) over one tensor. `scale` raises the floor: a sample of an
// entry's elements may hold only its small ones (the key part of in_proj_bias, whose gradient is
// 0), and the entry's scale is then the largest analytic value of all its elements.
double TensorError(const std::vector<double>& analytic, const std::vector<double>& fd,
                   double scale = kFloor) {
  double worst = 0;
  for (double v : fd) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < fd.size(); ++i) worst = std::max(worst, std::fabs(analytic[i] - fd[i]));
  return worst / scale;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

TEST(ReferenceTransformer, TheTablesCoverEveryOption) {
  bool norm[3] = {}, pos[5] = {}, causal[2] = {}, act[2] = {}, bias[2] = {}, mlp[2] = {};
  bool rope_layout[2] = {};  // positions rope's layouts
  bool heads[4] = {};  // 1, 2, 4, n_heads == d_model
  bool window[2] = {};  // a causal and a bidirectional window
  bool layers[4] = {}, batch[4] = {}, t1 = false, t_max = false, gates = false, ignore = false;
  bool tied[2] = {};  // tie_embeddings with and without bias
  bool kv[3] = {};    // n_kv_heads 1 (multi-query), 2, H / 2
  bool sinks[2] = {};  // attn_sinks, causal and bidirectional
  size_t n = 0;
  for (const char* spec : kFdCases) {
    const Case k = Parse(spec);
    const TransformerConfig& c = k.config;
    ASSERT_TRUE(ValidateTransformerConfig(c).ok()) << spec;
    EXPECT_LE(c.d_model, 8) << spec;
    EXPECT_LE(k.length, c.max_len) << spec;
    EXPECT_TRUE(!k.gates || c.n_layers * c.n_heads >= 2) << spec << ": a 0 and a gate > 1";
    norm[static_cast<int>(c.norm)] = pos[static_cast<int>(c.positions)] = true;
    causal[c.causal] = act[static_cast<int>(c.act)] = bias[c.bias] = mlp[c.d_mlp > 0] = true;
    heads[0] |= c.n_heads == 1;
    heads[1] |= c.n_heads == 2;
    heads[2] |= c.n_heads == 4;
    heads[3] |= c.n_heads == c.d_model && c.n_heads > 1;
    layers[std::min<int64_t>(c.n_layers, 3)] = batch[std::min<int64_t>(k.batch, 3)] = true;
    t1 |= k.length == 1;
    t_max |= k.length == c.max_len;
    gates |= k.gates;
    ignore |= k.ignore;
    if (c.tie_embeddings) tied[c.bias] = true;
    if (c.positions == PositionKind::kRope) rope_layout[static_cast<int>(c.rope_layout)] = true;
    if (c.n_kv_heads > 0 && c.n_kv_heads < c.n_heads) {
      kv[0] |= c.n_kv_heads == 1;
      kv[1] |= c.n_kv_heads == 2;
      kv[2] |= c.n_kv_heads > 2 && 2 * c.n_kv_heads == c.n_heads;
    }
    if (c.attn_window > 0) window[c.causal] = true;
    if (c.attn_sinks) sinks[c.causal] = true;
    ++n;
  }
  EXPECT_GE(n, 24u);
  for (bool b : norm) EXPECT_TRUE(b) << "norm pre / post / none";
  for (bool b : pos) EXPECT_TRUE(b) << "positions learned / sinusoidal / none / alibi / rope";
  for (bool b : window) EXPECT_TRUE(b) << "attn_window causal / bidirectional";
  for (bool b : rope_layout) EXPECT_TRUE(b) << "rope: half and interleaved";
  for (bool b : causal) EXPECT_TRUE(b) << "causal / bidirectional";
  for (bool b : act) EXPECT_TRUE(b) << "gelu / relu";
  for (bool b : bias) EXPECT_TRUE(b) << "bias / no bias";
  for (bool b : mlp) EXPECT_TRUE(b) << "d_mlp 0 / > 0";
  for (bool b : heads) EXPECT_TRUE(b) << "1, 2, 4 heads and n_heads == d_model";
  EXPECT_TRUE(layers[1] && layers[2] && layers[3]) << "1 to 3 layers";
  EXPECT_TRUE(batch[1] && batch[2] && batch[3]) << "B = 1 to 3";
  EXPECT_TRUE(t1 && t_max && gates && ignore);
  EXPECT_TRUE(tied[0] && tied[1]) << "tie_embeddings with and without unembed.bias";
  EXPECT_TRUE(kv[0] && kv[1] && kv[2]) << "n_kv_heads 1, 2 and n_heads / 2";
  EXPECT_TRUE(sinks[0] && sinks[1]) << "attn_sinks, causal and bidirectional";
}

// Every element of every entry and every head gate, by central differences of the reference's
// own loss. This shows the backward is the derivative of the forward; the forward is shown to be
// the module's by the next test (against the fast path, itself tested against PyTorch's goldens).
TEST(ReferenceTransformer, GradientsMatchFiniteDifferences) {
  const auto start = std::chrono::steady_clock::now();
  double worst = 0;
  std::string worst_at;
  size_t elements = 0;
  for (size_t ci = 0; ci < std::size(kFdCases); ++ci) {
    const Case k = Parse(kFdCases[ci]);
    SCOPED_TRACE(k.spec);
    Inputs in = Draw(k, 1000 + static_cast<uint32_t>(ci));
    const double* gates = k.gates ? in.gates.data() : nullptr;
    ReferenceTransformerResult r;
    const Status s = RunCase(k, in, in.state_dict, gates, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(std::isfinite(r.loss));
    EXPECT_NEAR(r.loss, Loss(k, in, in.state_dict, gates), 1e-14);
    const std::vector<TransformerParamSpec> specs = TransformerParams(k.config);
    ASSERT_EQ(r.grads.size(), specs.size());

    // `mirror`: the same values under a tied key (tie_embeddings), moved with them (one tensor).
    const auto check = [&](const std::string& what, const std::vector<double>& all,
                           std::vector<double>* values, const auto& loss, size_t stride,
                           std::vector<double>* mirror = nullptr) {
      std::vector<double> analytic, fd;
      const auto put = [&](size_t j, double x) {
        (*values)[j] = x;
        if (mirror != nullptr) (*mirror)[j] = x;
      };
      for (size_t j = 0; j < values->size(); ++j) {
        if (j % stride != 0 && j + 1 != values->size()) continue;
        const double v = (*values)[j];
        put(j, v + kStep);
        const double up = (*values)[j];
        const double loss_up = loss();
        put(j, v - kStep);
        const double down = (*values)[j];
        const double loss_down = loss();
        put(j, v);
        fd.push_back((loss_up - loss_down) / (up - down));  // the step as it was represented
        analytic.push_back(all[j]);
      }
      double scale = kFloor;
      for (size_t j = 0; j < all.size() && stride > 1; ++j) {
        scale = std::max(scale, std::fabs(all[j]));
      }
      const double e = TensorError(analytic, fd, scale);
      EXPECT_LE(e, kFdTolerance) << what;
      elements += fd.size();
      if (e > worst) {
        worst = e;
        worst_at = k.spec + ": " + what;
      }
    };
    for (size_t i = 0; i < specs.size(); ++i) {
      ASSERT_EQ(r.grads[i].first, specs[i].name);
      ASSERT_EQ(r.grads[i].second.size(), in.state_dict[i].second.size());
      // A tied key (tie_embeddings) names an earlier key's tensor: its gradient is that one's
      // (the sum over both uses), shown below by moving the tensor under both keys at once.
      std::vector<double>* mirror = nullptr;
      for (size_t t = 0; t < specs.size(); ++t) {
        if (specs[t].tied_to == specs[i].name) mirror = &in.state_dict[t].second;
      }
      if (!specs[i].tied_to.empty()) {
        for (size_t t = 0; t < i; ++t) {
          if (specs[t].name == specs[i].tied_to) {
            EXPECT_EQ(r.grads[i].second, r.grads[t].second);
          }
        }
        continue;
      }
      check(
          specs[i].name, r.grads[i].second, &in.state_dict[i].second,
          [&] { return Loss(k, in, in.state_dict, gates); }, kElementStride, mirror);
    }
    // The gates: around the case's gates, or around all 1 for a case without (the reference
    // gives d loss / d gate there too, and gates of 1 change no number).
    ReferenceTransformerResult ones;
    ASSERT_TRUE(RunCase(k, in, in.state_dict, in.gates.data(), &ones).ok());
    EXPECT_EQ(ones.loss, r.loss);
    EXPECT_EQ(ones.head_gate_grads, r.head_gate_grads);
    check(
        "head_gates", r.head_gate_grads, &in.gates,
        [&] { return Loss(k, in, in.state_dict, in.gates.data()); }, 1);

    // Exact structure the numbers must have: softmax is invariant to the key bias (its gradient
    // is rounding noise; with rotary positions only in the dims that do not turn, a turned bias
    // differing from key to key), and pos_embed rows at positions >= T are not used.
    for (const auto& [name, g] : r.grads) {
      const int64_t D = k.config.d_model, dh = D / k.config.n_heads, r = RopeDims(k.config);
      // (With attention sinks the key bias has a real gradient: the sink does not move with it.)
      if (!k.config.attn_sinks && name.find("attn.in_proj_bias") != std::string::npos) {
        for (int64_t j = D; j < D + KvDim(k.config); ++j) {
          if ((j - D) % dh < r) continue;  // (turned: a real gradient, checked above)
          EXPECT_LE(std::fabs(g[j]), 1e-14) << name << "[" << j << "]";
        }
      }
      if (name == "pos_embed.weight") {
        for (size_t j = static_cast<size_t>(k.length * D); j < g.size(); ++j) EXPECT_EQ(g[j], 0.0);
      }
    }
  }
  std::printf(
      "[ finite differences ] %zu configs, %zu elements: worst relative error %.3g (%s), "
      "%.2f s\n",
      std::size(kFdCases), elements, worst, worst_at.c_str(), Seconds(start));
}

// The reference's forward rounded to float against Transformer::Forward (the float32 fast path)
// with the same weights: logits and every hook within 1e-5 of max(1, max |x|), and its loss
// against Transformer::Loss of the fast logits within 1e-6.
TEST(ReferenceTransformer, ForwardMatchesTheFastModel) {
  const auto start = std::chrono::steady_clock::now();
  double worst = 0, worst_loss = 0;
  std::string worst_at;
  std::vector<std::string> specs(std::begin(kFdCases), std::end(kFdCases));
  specs.insert(specs.end(), std::begin(kForwardOnlyCases), std::end(kForwardOnlyCases));
  for (size_t ci = 0; ci < specs.size(); ++ci) {
    const Case k = Parse(specs[ci]);
    SCOPED_TRACE(k.spec);
    const TransformerConfig& c = k.config;
    const Inputs in = Draw(k, 2000 + static_cast<uint32_t>(ci));
    ReferenceTransformerResult ref;
    ASSERT_TRUE(RunCase(k, in, in.state_dict, k.gates ? in.gates.data() : nullptr, &ref).ok());

    std::unique_ptr<Transformer> model;
    ASSERT_TRUE(Transformer::Create(c, &model).ok());
    const std::vector<TransformerParamSpec> params = TransformerParams(c);
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<float> v(in.state_dict[i].second.begin(), in.state_dict[i].second.end());
      const Status s = model->SetParameter(params[i].name, {v.data(), params[i].shape, v.size()});
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    const std::vector<float> gates(in.gates.begin(), in.gates.end());
    TransformerOptions options;
    options.hooks = TransformerHookNames(c);
    if (k.gates) options.head_gates = {gates.data(), {c.n_layers, c.n_heads}, gates.size()};
    TransformerResult fast;
    const Status s = model->Forward({in.tokens.data(), k.batch, k.length}, options, &fast);
    ASSERT_TRUE(s.ok()) << s.ToString();

    const auto compare = [&](const std::string& what, const float* got, size_t n,
                             const std::vector<double>& want) {
      ASSERT_EQ(n, want.size()) << what;
      const std::vector<float> rounded(want.begin(), want.end());
      const double e = test::RelativeError(got, rounded.data(), n);
      EXPECT_LE(e, 1e-5) << what;
      if (e > worst) {
        worst = e;
        worst_at = k.spec + ": " + what;
      }
    };
    compare("logits", fast.logits.data(), fast.logits.size(), ref.logits);
    ASSERT_EQ(fast.hooks.size(), ref.hooks.size());
    for (size_t i = 0; i < ref.hooks.size(); ++i) {
      ASSERT_EQ(fast.hooks[i].first, ref.hooks[i].first);
      const TraceTensor& h = fast.hooks[i].second;
      ASSERT_EQ(static_cast<size_t>(h.shape.NumElements()), ref.hooks[i].second.size())
          << ref.hooks[i].first << " " << h.shape.ToString();
      compare(ref.hooks[i].first, h.data.data(), h.data.size(), ref.hooks[i].second);
    }
    double loss = 0;
    ASSERT_TRUE(Transformer::Loss(fast.logits.data(), k.batch * k.length, c.vocab_size,
                                  in.targets.data(), &loss)
                    .ok());
    const double e = std::fabs(loss - ref.loss) / std::max(1.0, std::fabs(ref.loss));
    EXPECT_LE(e, 1e-6) << "loss " << loss << " vs " << ref.loss;
    worst_loss = std::max(worst_loss, e);
  }
  std::printf(
      "[ forward vs fast ] %zu configs: worst relative error %.3g (%s), loss %.3g, %.2f s\n",
      specs.size(), worst, worst_at.c_str(), worst_loss, Seconds(start));
}

// Forward only (no targets): the same logits and hooks, no loss, no gradients; the state_dict in
// any order; every hook of TransformerHookNames in order with its [B, ...] size.
TEST(ReferenceTransformer, ForwardOnlyAndAnyKeyOrder) {
  const Case k = Parse("pre learned causal gelu bias mlp=6 L=2 H=2 D=4 V=5 max=6 B=2 T=3 gates");
  const Inputs in = Draw(k, 7);
  ReferenceTransformerResult full, forward, shuffled;
  ASSERT_TRUE(RunCase(k, in, in.state_dict, in.gates.data(), &full).ok());
  ASSERT_TRUE(
      RunCase(k, in, in.state_dict, in.gates.data(), &forward, /*with_targets=*/false).ok());
  EXPECT_EQ(forward.logits, full.logits);
  EXPECT_EQ(forward.hooks, full.hooks);
  EXPECT_TRUE(std::isnan(forward.loss));
  EXPECT_TRUE(forward.grads.empty());
  EXPECT_TRUE(forward.head_gate_grads.empty());

  StateDict reversed(in.state_dict.rbegin(), in.state_dict.rend());
  ASSERT_TRUE(RunCase(k, in, reversed, in.gates.data(), &shuffled).ok());
  EXPECT_EQ(shuffled.logits, full.logits);
  EXPECT_EQ(shuffled.loss, full.loss);
  EXPECT_EQ(shuffled.grads, full.grads);

  const TransformerConfig& c = k.config;
  const size_t B = 2, T = 3, D = 4, H = 2, V = 5;
  const std::vector<std::string> names = TransformerHookNames(c);
  ASSERT_EQ(full.hooks.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    EXPECT_EQ(full.hooks[i].first, n);
    const bool scores =
        n.find("attn_scores") != std::string::npos || n.find("hook_pattern") != std::string::npos;
    // ([B, H, T, dh] for q, k, v and z holds B T D values, as [B, T, D] does.)
    const size_t want = n == "logits" ? B * T * V : scores ? B * H * T * T : B * T * D;
    EXPECT_EQ(full.hooks[i].second.size(), want) << n;
  }
  // Causal scores are -inf above the diagonal ([0, 0, 0, 1]), the pattern exactly 0 there.
  const auto hook = [&](const std::string& name) -> const std::vector<double>& {
    for (const auto& h : full.hooks) {
      if (h.first == name) return h.second;
    }
    ADD_FAILURE() << "no hook " << name;
    return full.hooks[0].second;
  };
  EXPECT_EQ(hook("blocks.0.attn.hook_attn_scores")[1], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(hook("blocks.0.attn.hook_pattern")[1], 0.0);
}

TEST(ReferenceTransformer, BadInputIsRefusedNamingTheArgument) {
  const Case k = Parse("pre learned causal gelu bias mlp=4 L=1 H=2 D=4 V=5 max=4 B=2 T=3");
  const Inputs in = Draw(k, 9);
  ReferenceTransformerResult r;
  const auto expect = [&](const Status& s, Arg arg, const std::string& text) {
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.argument(), arg) << s.ToString();
    EXPECT_NE(s.message().find(text), std::string::npos) << s.ToString();
  };
  {
    StateDict sd = in.state_dict;
    sd.erase(sd.begin() + 3);
    const Status s = RunCase(k, in, sd, nullptr, &r);
    EXPECT_EQ(s.code(), StatusCode::kMissingParameter);
    expect(s, Arg::kStateDict, "state_dict: missing " + in.state_dict[3].first);
  }
  {
    StateDict sd = in.state_dict;
    sd[2].second.pop_back();
    const Status s = RunCase(k, in, sd, nullptr, &r);
    EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
    expect(s, Arg::kStateDict, "state_dict['" + sd[2].first + "']");
  }
  {
    StateDict sd = in.state_dict;
    sd.push_back({"blocks.1.ln1.weight", std::vector<double>(4, 1.0)});
    const Status s = RunCase(k, in, sd, nullptr, &r);
    EXPECT_EQ(s.code(), StatusCode::kUnknownParameter);
    expect(s, Arg::kStateDict, "state_dict['blocks.1.ln1.weight']: unknown key");
  }
  {
    StateDict sd = in.state_dict;
    sd.push_back(sd[0]);
    expect(RunCase(k, in, sd, nullptr, &r), Arg::kStateDict, "state_dict['tok_embed.weight']");
  }
  {
    Inputs bad = in;
    bad.tokens[4] = 5;
    const Status s = RunCase(k, bad, in.state_dict, nullptr, &r);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    expect(s, Arg::kTokens, "tokens: token [1, 1] is 5");
    bad.tokens[4] = -1;
    expect(RunCase(k, bad, in.state_dict, nullptr, &r), Arg::kTokens, "tokens: token [1, 1] is -1");
  }
  {
    Inputs bad = in;
    bad.tokens.resize(10);
    const Status s = ReferenceTransformer(k.config, in.state_dict, bad.tokens.data(), 2, 5, nullptr,
                                          nullptr, &r);  // T = 5 > max_len = 4
    expect(s, Arg::kTokens, "max_len = 4");
    expect(ReferenceTransformer(k.config, in.state_dict, nullptr, 2, 3, nullptr, nullptr, &r),
           Arg::kTokens, "tokens");
  }
  {
    Inputs bad = in;
    std::fill(bad.targets.begin(), bad.targets.end(), -100);
    const Status s = RunCase(k, bad, in.state_dict, nullptr, &r);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    expect(s, Arg::kTargets, "targets: every target is -100");
    bad.targets[2] = 5;
    expect(RunCase(k, bad, in.state_dict, nullptr, &r), Arg::kTargets,
           "targets: target [0, 2] is 5");
  }
  {
    // Sizes whose products would overflow int64 are refused from the shapes alone, before a
    // token is read.
    TransformerConfig c = k.config;
    const int64_t n = int64_t{1} << 24;
    c.vocab_size = c.max_len = n;
    const Status s = ReferenceTransformer(c, {}, in.tokens.data(), n, n, nullptr, nullptr, &r);
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
    expect(s, Arg::kTokens, "tokens: the reference's logits and hooks");
  }
  {
    TransformerConfig c = k.config;
    c.n_heads = 3;
    expect(ReferenceTransformer(c, in.state_dict, in.tokens.data(), 2, 3, nullptr, nullptr, &r),
           Arg::kNHeads, "n_heads");
  }
  {
    // tie_embeddings: the two keys of the one tensor must hold the same values.
    const Case tied = Parse("pre learned causal gelu bias mlp=4 L=1 H=2 D=4 V=5 max=4 B=2 T=3 tied");
    Inputs t = Draw(tied, 9);
    ASSERT_TRUE(RunCase(tied, t, t.state_dict, nullptr, &r).ok());
    for (auto& [name, values] : t.state_dict) {
      if (name == "unembed.weight") values[3] += 0.5;
    }
    const Status s = RunCase(tied, t, t.state_dict, nullptr, &r);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    expect(s, Arg::kStateDict,
           "state_dict['unembed.weight']: differs from state_dict['tok_embed.weight']");
  }
  // And a good call still works.
  EXPECT_TRUE(RunCase(k, in, in.state_dict, nullptr, &r).ok());
}

}  // namespace
}  // namespace headscope
