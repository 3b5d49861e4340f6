#include "headscope/transformer.h"

#include "headscope/schema.h"

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "headscope/kernels/matmul.h"
#include "headscope/kernels/rowwise.h"
#include "headscope/kernels/softmax.h"
#include "headscope/plan.h"
#include "headscope/transformer_internal.h"

namespace headscope {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }
std::string Block(int64_t l) { return "blocks." + Str(l) + "."; }

bool HasLn1(const TransformerConfig& c) { return c.norm != NormPlacement::kNone; }
bool HasLn2(const TransformerConfig& c) { return c.norm != NormPlacement::kNone && c.d_mlp > 0; }

void LayerNorm(const float* in, size_t rows, size_t d, const float* w, const float* b, double eps,
               float* out) {
  LayerNormRows(in, rows, d, w, b, static_cast<float>(eps), out);  // kernels/rowwise.h
}

void Activate(Activation act, float* x, size_t n) {
  if (act == Activation::kRelu) {
    ReluInPlace(x, n);
  } else {
    GeluInPlace(x, n);
  }
}

// Vaswani et al.'s PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i + 1] = cos(...), in double as the
// reference's buffer, then rounded to float as its `.to(x.dtype)`.
float Sinusoid(int64_t p, int64_t j, int64_t d) {
  const double div = std::pow(10000.0, static_cast<double>(j - j % 2) / static_cast<double>(d));
  const double a = static_cast<double>(p) / div;
  return static_cast<float>(j % 2 == 0 ? std::sin(a) : std::cos(a));
}

bool Resize(AlignedBuffer* b, uint64_t floats, size_t* bytes, size_t limit) {
  return AddBytes(bytes, floats, limit) && b->Resize(static_cast<size_t>(floats));
}

// "blocks.<l>.attn.<key>" with <l> a layer of this model (decimal digits without a leading zero:
// "blocks.01." is no key): the layer and the MultiheadAttention key. False for any other name.
bool SplitAttnKey(std::string_view name, int64_t n_layers, size_t* layer, std::string_view* key) {
  if (name.rfind("blocks.", 0) != 0) return false;
  const size_t dot = name.find('.', 7);
  if (dot == std::string_view::npos || dot <= 7 || dot > 11 || (name[7] == '0' && dot != 8)) {
    return false;
  }
  int64_t l = 0;
  for (size_t i = 7; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    l = l * 10 + (name[i] - '0');
  }
  const std::string_view rest = name.substr(dot + 1);
  if (l >= n_layers || rest.rfind("attn.", 0) != 0) return false;
  *layer = static_cast<size_t>(l);
  *key = rest.substr(5);
  return true;
}

}  // namespace

Status UnknownKey(const TransformerConfig& c, const std::string& arg) {
  // The first keys only for a deep model (256 layers have 3,000 and more): a message stays short.
  constexpr size_t kListed = 24;
  const std::vector<TransformerParamSpec> params = TransformerParams(c);
  std::string keys;
  for (size_t i = 0; i < params.size() && i < kListed; ++i) {
    keys += (keys.empty() ? "" : ", ") + params[i].name;
  }
  if (params.size() > kListed) {
    keys += ", ... (" + std::to_string(params.size()) + " keys in all: parameterShapes() lists them)";
  }
  return Status(StatusCode::kUnknownParameter, Arg::kStateDict,
                arg + ": unknown key for this config (expected keys: " + keys + ")");
}

namespace {

// Hook names, compared in place: `name` is "<suffix>" (layer < 0) or "blocks.<layer>.<suffix>".
// Forward matches the asked-for hooks this way instead of building each candidate name, so a
// call allocates nothing once its buffers are sized (no std::string per layer and hook).
bool IsHook(std::string_view name, int64_t layer, std::string_view suffix) {
  if (layer < 0) return name == suffix;
  if (name.rfind("blocks.", 0) != 0) return false;
  name.remove_prefix(7);
  char digits[20];
  size_t n = 0;
  do {
    digits[n++] = static_cast<char>('0' + layer % 10);
    layer /= 10;
  } while (layer > 0);
  if (name.size() < n + 1) return false;
  for (size_t i = 0; i < n; ++i) {
    if (name[i] != digits[n - 1 - i]) return false;
  }
  return name[n] == '.' && name.substr(n + 1) == suffix;
}

// (hook_rot_q and hook_rot_k, the rotated q and k, only with positions rope: IsRotHook.)
constexpr const char* kAttnHooks[] = {"attn.hook_q",          "attn.hook_k",
                                      "attn.hook_v",          "attn.hook_rot_q",
                                      "attn.hook_rot_k",      "attn.hook_attn_scores",
                                      "attn.hook_pattern",    "attn.hook_z"};
bool IsRotHook(const char* suffix) { return std::strncmp(suffix, "attn.hook_rot_", 14) == 0; }

// Calls f(layer, suffix) for every hook of `c` in the order the reference computes them (layer
// -1: a model-level hook). The one list behind TransformerHookNames and Forward's checks.
// A LayerNorm's hook (ln1, ln2) comes where it runs: before its sub-block with "pre", after the
// residual add with "post".
template <class F>
void ForEachHook(const TransformerConfig& c, const F& f) {
  const bool pre = c.norm == NormPlacement::kPre, post = c.norm == NormPlacement::kPost;
  f(int64_t{-1}, "hook_embed");
  if (HasPositionEmbedding(c)) f(int64_t{-1}, "hook_pos_embed");
  for (int64_t l = 0; l < c.n_layers; ++l) {
    f(l, "hook_resid_pre");
    if (pre) f(l, "ln1.hook_normalized");
    for (const char* a : kAttnHooks) {
      if (c.positions == PositionKind::kRope || !IsRotHook(a)) f(l, a);
    }
    f(l, "hook_attn_out");
    if (post) f(l, "ln1.hook_normalized");
    if (c.d_mlp > 0) {
      f(l, "hook_resid_mid");
      if (pre) f(l, "ln2.hook_normalized");
      f(l, "hook_mlp_out");
      if (post) f(l, "ln2.hook_normalized");
    }
    f(l, "hook_resid_post");
  }
  if (c.norm == NormPlacement::kPre) f(int64_t{-1}, "ln_final.hook_normalized");
  f(int64_t{-1}, "logits");
}

// ---- Initial weights from a seed: the generator documented in transformer.h ----
// Counter-based (splitmix64's output at a position is one mix of the seed plus the position), so
// every value is computed from (seed, key, index) alone: no state carried from entry to entry
// or element to element, hence no dependence on the config's other entries, nor on the order
// or the thread the values are computed in. No std:: distribution: their algorithms differ
// between standard libraries (libstdc++ natively, libc++ in Emscripten).

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const char ch : s) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001B3ull;
  return h;
}

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;  // splitmix64's increment
uint64_t Word(uint64_t key, uint64_t c) { return Mix64(key + (c + 1) * kGamma); }

struct InitRule {
  enum Kind { kNormal, kUniform, kConstant } kind;
  double value;  // kUniform: the bound a of U(-a, a); kConstant: the value
};

// PyTorch's default initialisation of the reference module's part that owns entry `name`.
InitRule InitRuleOf(const TransformerConfig& c, std::string_view name) {
  const auto ends = [&](std::string_view s) {
    return name.size() >= s.size() && name.substr(name.size() - s.size()) == s;
  };
  const double D = static_cast<double>(c.d_model), M = static_cast<double>(c.d_mlp);
  // The K and V rows of in_proj_weight: D, or G d_head with grouped-query attention.
  const double Dkv = static_cast<double>(KvDim(c));
  // nn.Linear(in, out): kaiming_uniform_(a=sqrt(5)) for the weight and U(+-1/sqrt(fan_in)) for
  // the bias have the same bound, 1/sqrt(in).
  const InitRule linear_in_d{InitRule::kUniform, 1.0 / std::sqrt(D)};
  if (name == "tok_embed.weight" || name == "pos_embed.weight") return {InitRule::kNormal, 0.0};
  // xavier_uniform_ of a (D + 2 Dkv, D) tensor: torch's fan_in is D (columns), fan_out D + 2 Dkv
  // (rows): the bound sqrt(6 / (4 D)) when Dkv = D (2 D + 2 D is 4 D exactly in double).
  if (ends(".attn.in_proj_weight")) {
    return {InitRule::kUniform, std::sqrt(6.0 / (2.0 * D + 2.0 * Dkv))};
  }
  // MultiheadAttention._reset_parameters zeroes both biases; out_proj.weight keeps the
  // nn.Linear initialisation its NonDynamicallyQuantizableLinear got when it was built.
  if (ends(".attn.in_proj_bias") || ends(".attn.out_proj.bias")) return {InitRule::kConstant, 0.0};
  // Attention sinks start at 0: each row's sink is then one more key of score 0 and no value (as
  // add_zero_attn's zero key, at first), which small models train from; gpt-oss's are learned.
  if (ends(".attn.sinks")) return {InitRule::kConstant, 0.0};
  if (ends(".attn.out_proj.weight")) return linear_in_d;
  if (ends(".mlp.fc_in.weight") || ends(".mlp.fc_in.bias")) return linear_in_d;
  if (ends(".mlp.fc_out.weight") || ends(".mlp.fc_out.bias")) {
    return {InitRule::kUniform, 1.0 / std::sqrt(M)};
  }
  if (name == "unembed.weight" || name == "unembed.bias") return linear_in_d;
  // What is left are the LayerNorms (ln1, ln2, ln_final): weight 1, bias 0.
  return {InitRule::kConstant, ends(".weight") ? 1.0 : 0.0};
}

// The n values of entry `name` for `seed` under `rule`.
void FillInitial(uint64_t seed, std::string_view name, const InitRule& rule, float* out,
                 size_t n) {
  const uint64_t key = Mix64(seed ^ Fnv1a64(name));
  switch (rule.kind) {
    case InitRule::kConstant:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(rule.value);
      return;
    case InitRule::kUniform:
      for (size_t i = 0; i < n; ++i) {
        // 2b + 1 - 2^24 is an odd integer in (-2^24, 2^24): exact in double, as is the scaling
        // by 2^-24, so the only rounding is of a * t (one multiply, nothing for FMA to fuse).
        const int64_t b = static_cast<int64_t>(Word(key, i) >> 40);
        const double t = static_cast<double>(2 * b + 1 - (int64_t{1} << 24)) * 0x1p-24;
        out[i] = static_cast<float>(rule.value * t);
      }
      return;
    case InitRule::kNormal:
      for (size_t p = 0; 2 * p < n; ++p) {
        // u1 in (0, 1): log never sees 0 (the largest |value| is sqrt(-2 log 2^-53) ~ 8.57).
        const double u1 = static_cast<double>(2 * (Word(key, 2 * p) >> 12) + 1) * 0x1p-53;
        const double u2 = static_cast<double>(Word(key, 2 * p + 1) >> 11) * 0x1p-53;
        const double r = std::sqrt(-2.0 * std::log(u1));
        const double theta = 6.283185307179586 * u2;
        out[2 * p] = static_cast<float>(r * std::cos(theta));
        if (2 * p + 1 < n) out[2 * p + 1] = static_cast<float>(r * std::sin(theta));
      }
      return;
  }
}

}  // namespace

Status ValidateTransformerConfig(const TransformerConfig& c) {
  // The schema's field checks and rule (schema.cc): sizes in range (n_layers at most 256, d_mlp 0
  // for no MLP), the choices, ln_eps finite and > 0, d_model divisible by n_heads.
  HEADSCOPE_RETURN_IF_ERROR(CheckFields(TransformerConfigSchema(), &c));
  // Rotary positions need a pair of dims to turn: rope_fraction of the head dim must reach 2
  // (RopeDims), which no single row can say (web/lib/case.js's rotaryDimsRule says it too).
  if (c.positions == PositionKind::kRope && RopeDims(c) < 2) {
    const int64_t dh = c.d_model / c.n_heads;
    char fraction[32];
    for (int precision = 1; precision <= 17; ++precision) {  // the shortest round trip
      std::snprintf(fraction, sizeof(fraction), "%.*g", precision, c.rope_fraction);
      if (std::strtod(fraction, nullptr) == c.rope_fraction) break;
    }
    return ArgError(StatusCode::kInvalidArgument, Arg::kRopeFraction,
                    std::string(fraction) + " of the head dim " + ArgName(Arg::kDModel) + " / " +
                        ArgName(Arg::kNHeads) + " = " + Str(dh) + " gives no pair of dims to " +
                        "rotate: at least 2 rotary dims are needed" +
                        (dh >= 2 ? " (" + std::string(ArgName(Arg::kRopeFraction)) + " >= 2 / " +
                                       Str(dh) + ")"
                                 : " (a head of 1 dim has none)"));
  }
  // Every size is within kMaxDim, but their products need not fit the build's address space
  // (size_t is 32 bits in WebAssembly: 2^24 x 2^24 embeddings would wrap to 0 floats). The weights,
  // counted in 64 bits, must fit half of it (the Linear weights have packed copies too).
  uint64_t floats = 0;  // (each entry is at most 2^48 floats, and there are a few thousand)
  for (const TransformerParamSpec& p : TransformerParams(c)) {
    if (p.tied_to.empty()) floats += static_cast<uint64_t>(p.shape.NumElements());
  }
  const uint64_t limit = std::numeric_limits<size_t>::max() / sizeof(float) / 2;
  if (floats > limit) {
    return ArgError(StatusCode::kResourceExhausted, Arg::kConfig,
                    "its weights are " + std::to_string(floats) + " floats, more than this build "
                    "can hold (" + std::to_string(limit) + " floats: the Linear weights are also "
                    "kept packed, and WebAssembly addresses 4 GiB)");
  }
  return Status::Ok();
}

Status KvCacheBytesFor(const TransformerConfig& c, int64_t batch, int64_t positions,
                       uint64_t* bytes) {
  *bytes = 0;
  HEADSCOPE_RETURN_IF_ERROR(ValidateTransformerConfig(c));
  const auto check = [](const char* name, int64_t v) {
    return v >= 1 && v <= kMaxDim
               ? Status::Ok()
               : InvalidArgument(std::string(name) + ": expected an integer in [1, 16777216], got " +
                                 std::to_string(v));
  };
  HEADSCOPE_RETURN_IF_ERROR(check("batch", batch));
  HEADSCOPE_RETURN_IF_ERROR(check("positions", positions));
  if (!c.causal) return Status::Ok();
  // At most 2^8 layers x 2 x 2^24 x 2^24 x 2^24 x 4 bytes would overflow: in double first.
  const double exact = 2.0 * static_cast<double>(c.n_layers) * static_cast<double>(batch) *
                       static_cast<double>(positions) * static_cast<double>(KvDim(c)) *
                       sizeof(float);
  if (exact > 9007199254740992.0) {
    return InvalidArgument("batch x positions: the KV caches would be " + std::to_string(exact) +
                           " bytes, more than 2^53");
  }
  *bytes = 2 * static_cast<uint64_t>(c.n_layers) * static_cast<uint64_t>(batch) *
           static_cast<uint64_t>(positions) * static_cast<uint64_t>(KvDim(c)) * sizeof(float);
  return Status::Ok();
}

std::vector<TransformerParamSpec> TransformerParams(const TransformerConfig& c) {
  const int64_t V = c.vocab_size, D = c.d_model, M = c.d_mlp, Dkv = KvDim(c);
  std::vector<TransformerParamSpec> p;
  const auto add = [&](std::string name, const Shape& shape, const char* tied_to = "") {
    p.push_back({std::move(name), shape, tied_to});
  };
  add("tok_embed.weight", {V, D});
  if (c.positions == PositionKind::kLearned) add("pos_embed.weight", {c.max_len, D});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = Block(l);
    if (HasLn1(c)) {
      add(b + "ln1.weight", {D});
      add(b + "ln1.bias", {D});
    }
    add(b + "attn.in_proj_weight", {D + 2 * Dkv, D});  // [Wq; Wk; Wv]: D, Dkv, Dkv rows
    if (c.bias) add(b + "attn.in_proj_bias", {D + 2 * Dkv});
    if (c.attn_sinks) add(b + "attn.sinks", {c.n_heads});  // (MhaWeights' order: ExpectedParams)
    add(b + "attn.out_proj.weight", {D, D});
    if (c.bias) add(b + "attn.out_proj.bias", {D});
    if (HasLn2(c)) {
      add(b + "ln2.weight", {D});
      add(b + "ln2.bias", {D});
    }
    if (M > 0) {
      add(b + "mlp.fc_in.weight", {M, D});
      if (c.bias) add(b + "mlp.fc_in.bias", {M});
      add(b + "mlp.fc_out.weight", {D, M});
      if (c.bias) add(b + "mlp.fc_out.bias", {D});
    }
  }
  if (c.norm == NormPlacement::kPre) {
    add("ln_final.weight", {D});
    add("ln_final.bias", {D});
  }
  add("unembed.weight", {V, D}, c.tie_embeddings ? "tok_embed.weight" : "");
  if (c.bias) add("unembed.bias", {V});
  return p;
}

std::vector<std::string> TransformerHookNames(const TransformerConfig& c) {
  std::vector<std::string> h;
  ForEachHook(c, [&](int64_t l, const char* suffix) {
    h.push_back(l < 0 ? std::string(suffix) : Block(l) + suffix);
  });
  return h;
}

Transformer::Transformer(const TransformerConfig& config) : config_(config) {}
Transformer::~Transformer() = default;

Status Transformer::Create(const TransformerConfig& config, std::unique_ptr<Transformer>* out) {
  HEADSCOPE_RETURN_IF_ERROR(ValidateTransformerConfig(config));
  std::unique_ptr<Transformer> t(new (std::nothrow) Transformer(config));
  if (t == nullptr) return Status(StatusCode::kResourceExhausted, "Transformer: out of memory");
  t->packed_.reset(new (std::nothrow) Packed);
  if (t->packed_ == nullptr) return Status(StatusCode::kResourceExhausted, "Transformer: out of memory");
  for (int64_t l = 0; l < config.n_layers; ++l) {
    std::unique_ptr<Layer> layer(new (std::nothrow) Layer);
    if (layer == nullptr) return Status(StatusCode::kResourceExhausted, "Transformer: out of memory");
    t->layers_.push_back(std::move(layer));
  }
  MhaConfig mc;
  mc.embed_dim = config.d_model;
  mc.num_heads = config.n_heads;
  mc.num_kv_heads = config.n_kv_heads;
  mc.rope_dims = RopeDims(config);
  mc.rope_layout = config.rope_layout;
  mc.rope_base = config.rope_base;
  mc.attn_sinks = config.attn_sinks;
  mc.bias = config.bias;
  mc.batch_first = true;
  // One store, its owned entries in TransformerParams' order. A layer's attention entries are
  // declared by its MultiheadAttention (torch's order, which is TransformerParams', then the
  // q/k/v_proj_weight aliases of in_proj_weight) when the first of them comes.
  for (const TransformerParamSpec& p : TransformerParams(config)) {
    size_t l = 0;
    std::string_view key;
    if (SplitAttnKey(p.name, config.n_layers, &l, &key)) {
      Layer& layer = *t->layers_[l];
      if (layer.attn != nullptr) continue;
      HEADSCOPE_RETURN_IF_ERROR(
          MultiheadAttention::Create(mc, &t->store_, Block(static_cast<int64_t>(l)) + "attn.",
                                     &layer.attn));
      const MhaWeights& w = layer.attn->weights();
      layer.in_proj_w = w.entry(Param::kInProjWeight);
      layer.in_proj_b = w.entry(Param::kInProjBias);
      layer.out_proj_w = w.entry(Param::kOutProjWeight);
      layer.out_proj_b = w.entry(Param::kOutProjBias);
      layer.sinks = w.entry(Param::kSinks);
      continue;
    }
    if (!p.tied_to.empty()) {  // tie_embeddings: a name for the whole of an earlier entry
      t->store_.AddAlias(p.name, t->store_.Find(p.tied_to), 0, p.shape);
      continue;
    }
    t->store_.Add(p.name, p.shape);
  }
  for (int i = 0; i < static_cast<int>(t->store_.size()); ++i) {
    if (!t->store_.is_alias(i)) t->param_entries_.push_back(i);
  }
  for (int64_t l = 0; l < config.n_layers; ++l) {
    Layer& layer = *t->layers_[static_cast<size_t>(l)];
    const std::string b = Block(l);
    layer.ln1_w = t->store_.Find(b + "ln1.weight");
    layer.ln1_b = t->store_.Find(b + "ln1.bias");
    layer.ln2_w = t->store_.Find(b + "ln2.weight");
    layer.ln2_b = t->store_.Find(b + "ln2.bias");
    layer.fc_in_w = t->store_.Find(b + "mlp.fc_in.weight");
    layer.fc_in_b = t->store_.Find(b + "mlp.fc_in.bias");
    layer.fc_out_w = t->store_.Find(b + "mlp.fc_out.weight");
    layer.fc_out_b = t->store_.Find(b + "mlp.fc_out.bias");
  }
  t->tok_embed_ = t->store_.Find("tok_embed.weight");
  t->pos_embed_ = t->store_.Find("pos_embed.weight");
  t->ln_final_w_ = t->store_.Find("ln_final.weight");
  t->ln_final_b_ = t->store_.Find("ln_final.bias");
  t->unembed_w_ = t->store_.Find("unembed.weight");
  t->unembed_b_ = t->store_.Find("unembed.bias");
  t->packed_->fc_in.resize(static_cast<size_t>(config.n_layers));
  t->packed_->fc_out.resize(static_cast<size_t>(config.n_layers));
  *out = std::move(t);
  return Status::Ok();
}

Status Transformer::SetParameter(std::string_view name, const TensorView& value) {
  const std::string arg = std::string(ArgName(Arg::kStateDict)) + "['" + QuoteInput(name) + "']";
  const int i = store_.Find(name);
  if (i < 0) return UnknownKey(config_, arg);
  if (config_.tie_embeddings) HEADSCOPE_RETURN_IF_ERROR(CheckTiedKey(i, value, arg));
  const Status s = store_.Set(i, value, arg);
  if (!s.ok()) return Status(s.code(), Arg::kStateDict, s.message());
  if (config_.tie_embeddings && (i == tok_embed_ || i == unembed_w_)) {
    tied_keys_set_ |= i == tok_embed_ ? 1u : 2u;
  }
  return s;
}

// SetParameter's tied check: `value` for tok_embed.weight or unembed.weight (entry), when the
// other key was set since the weights were last used, must be the tensor's values bit for bit
// (one state_dict holds one tensor under both keys). Values the store would refuse anyway (a
// shape or size that does not fit) are left to its message.
Status Transformer::CheckTiedKey(int entry, const TensorView& value, const std::string& arg) {
  if (entry != tok_embed_ && entry != unembed_w_) return Status::Ok();
  const unsigned other = entry == tok_embed_ ? 2u : 1u;
  const Shape& shape = store_.shape(entry);
  const size_t n = static_cast<size_t>(shape.NumElements());
  if ((tied_keys_set_ & other) == 0 || value.shape != shape || value.size != n ||
      value.data == nullptr) {
    return Status::Ok();
  }
  const float* have = store_.data(entry);
  for (size_t k = 0; k < n; ++k) {
    if (std::memcmp(value.data + k, have + k, sizeof(float)) == 0) continue;
    const int other_entry = entry == tok_embed_ ? unembed_w_ : tok_embed_;
    char values[64];
    std::snprintf(values, sizeof(values), "%.9g against %.9g", static_cast<double>(value.data[k]),
                  static_cast<double>(have[k]));
    const int64_t D = shape[1];
    return Status(StatusCode::kInvalidArgument, Arg::kStateDict,
                  arg + ": differs from " + ArgName(Arg::kStateDict) + "['" +
                      store_.name(other_entry) + "'] at [" + Str(static_cast<int64_t>(k) / D) +
                      ", " + Str(static_cast<int64_t>(k) % D) + "]: " + values + "; with " +
                      ArgName(Arg::kTieEmbeddings) + " the two keys name one tensor and must "
                      "hold the same values");
  }
  return Status::Ok();
}

Status Transformer::GetParameter(std::string_view name, TensorView* out) const {
  const std::string arg = std::string(ArgName(Arg::kStateDict)) + "['" + QuoteInput(name) + "']";
  // Every key and an attention layer's q/k/v_proj_weight (aliases of its in_proj_weight's rows).
  const int i = store_.Find(name);
  if (i < 0) return UnknownKey(config_, arg);
  if (!store_.loaded(i)) {
    return Status(StatusCode::kMissingParameter, Arg::kStateDict,
                  arg + ": not loaded yet (expected shape " + store_.shape(i).ToString() + ")");
  }
  const Shape& shape = store_.shape(i);
  *out = TensorView(store_.data(i), shape, static_cast<size_t>(shape.NumElements()));
  return Status::Ok();
}

Status Transformer::InitializeFromSeed(uint64_t seed) {
  // Through SetParameter, so the attention layers' and the packed panels' versions move on and
  // the next Forward repacks: one temporary buffer, grown to the largest entry. (Not a state_dict
  // after the keys set before: no tied check against them.)
  tied_keys_set_ = 0;
  AlignedBuffer values;
  for (const TransformerParamSpec& p : TransformerParams(config_)) {
    const size_t n = static_cast<size_t>(p.shape.NumElements());
    if (!values.Resize(n)) {
      return ArgError(StatusCode::kResourceExhausted, Arg::kConfig,
                      "out of memory initialising " + std::string(ArgName(Arg::kStateDict)) +
                          "['" + p.name + "'] (" + std::to_string(n) + " floats)");
    }
    if (!p.tied_to.empty()) continue;  // (the tensor of an earlier key: tok_embed's values)
    FillInitial(seed, p.name, InitRuleOf(config_, p.name), values.data(), n);
    HEADSCOPE_RETURN_IF_ERROR(SetParameter(p.name, {values.data(), p.shape, n}));
  }
  tied_keys_set_ = 0;  // a state_dict set after this is a new one
  return Status::Ok();
}

Status Transformer::CheckComplete() const {
  std::string missing;
  for (const int i : param_entries_) {
    if (!store_.loaded(i)) {
      missing += (missing.empty() ? "" : ", ") + store_.name(i) + " " + store_.shape(i).ToString();
    }
  }
  if (missing.empty()) return Status::Ok();
  return Status(StatusCode::kMissingParameter, Arg::kStateDict,
                std::string(ArgName(Arg::kStateDict)) + ": missing " + missing);
}

// The Linear weights packed, each repacked only if its entry changed since. A failure (memory
// for a panel) frees the panels, so the refused call leaves none it packed (the next call packs
// them all again).
Status Transformer::Prepare() {
  tied_keys_set_ = 0;  // the weights are used: a state_dict set after this is a new one
  if (packed_->version == store_.version() && packed_->version != 0) return Status::Ok();
  HEADSCOPE_RETURN_IF_ERROR(CheckComplete());
  const Status s = PackLinears();
  if (!s.ok()) {
    for (auto* group : {&packed_->fc_in, &packed_->fc_out}) {
      for (PackedLinear& p : *group) p = PackedLinear();
    }
    packed_->unembed = PackedLinear();
    packed_->version = 0;
  }
  return s;
}

Status Transformer::PackLinears() {
  const auto pack = [&](int entry, PackedLinear* dst) -> Status {
    if (dst->version == store_.version(entry)) return Status::Ok();
    const Shape& s = store_.shape(entry);
    const size_t n = static_cast<size_t>(s[0]), k = static_cast<size_t>(s[1]);
    if (!dst->panels.Resize(PackedFloats(n, k))) {
      return Status(StatusCode::kResourceExhausted, "state_dict['" + store_.name(entry) +
                                                        "']: out of memory packing it");
    }
    PackB(store_.data(entry), n, k, k, 1, dst->panels.data());
    dst->version = store_.version(entry);
    return Status::Ok();
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (layers_[l]->fc_in_w >= 0) {
      HEADSCOPE_RETURN_IF_ERROR(pack(layers_[l]->fc_in_w, &packed_->fc_in[l]));
      HEADSCOPE_RETURN_IF_ERROR(pack(layers_[l]->fc_out_w, &packed_->fc_out[l]));
    }
  }
  HEADSCOPE_RETURN_IF_ERROR(pack(unembed_w_, &packed_->unembed));
  packed_->version = store_.version();
  return Status::Ok();
}

// Tokens (B, T) with B, T >= 1, T <= max_positions, each in [0, vocab_size); `arg` names them.
Status Transformer::CheckTokens(const TokenView& tokens, Arg arg, int64_t max_positions,
                                const char* limit) const {
  const int64_t B = tokens.batch, T = tokens.length, V = config_.vocab_size;
  if (B < 1 || T < 1 || T > max_positions) {
    return ArgError(StatusCode::kShapeMismatch, arg,
                    "expected (B, T) with B >= 1 and 1 <= T <= " + std::string(limit) + " = " +
                        Str(max_positions) + ", got (" + Str(B) + ", " + Str(T) + ")");
  }
  if (B > kMaxDim || tokens.data == nullptr) {
    return ArgError(StatusCode::kShapeMismatch, arg,
                    "no data for (" + Str(B) + ", " + Str(T) + ") tokens");
  }
  for (int64_t i = 0; i < B * T; ++i) {
    const int32_t t = tokens.data[i];
    if (t < 0 || t >= V) {
      return ArgError(StatusCode::kInvalidArgument, arg,
                      "token [" + Str(i / T) + ", " + Str(i % T) + "] is " + Str(t) +
                          ", expected an integer in [0, " + Str(V - 1) + "] (" +
                          ArgName(Arg::kVocabSize) + " " + Str(V) + ")");
    }
  }
  return Status::Ok();
}

Status Transformer::CheckGates(const TensorView& gates) const {
  const int64_t L = config_.n_layers, H = config_.n_heads;
  if (gates.present() && (gates.shape != Shape{L, H} || gates.data == nullptr ||
                          gates.size != static_cast<size_t>(L * H))) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kHeadGates,
                    "expected (" + std::string(ArgName(Arg::kNLayers)) + ", " +
                        ArgName(Arg::kNHeads) + ") = [" + Str(L) + ", " + Str(H) +
                        "] gates, got " + gates.shape.ToString());
  }
  return Status::Ok();
}

namespace {

// Where an ActivationPatch lands: a residual-stream hook ([B, T, D]) or the heads' z.
enum class PatchSite { kResidPre, kAttnOut, kResidMid, kMlpOut, kResidPost, kZ };
struct PatchableHook {
  const char* suffix;
  PatchSite site;
};
constexpr PatchableHook kPatchable[] = {
    {"hook_resid_pre", PatchSite::kResidPre}, {"hook_attn_out", PatchSite::kAttnOut},
    {"hook_resid_mid", PatchSite::kResidMid}, {"hook_mlp_out", PatchSite::kMlpOut},
    {"hook_resid_post", PatchSite::kResidPost}, {"attn.hook_z", PatchSite::kZ}};

}  // namespace

// An ActivationPatch checked against the config and the call's tokens (ResolvePatches).
struct Transformer::Patch {
  int64_t layer = -1;
  PatchSite site = PatchSite::kResidPre;
  int64_t head = -1, position = -1;
  const float* values = nullptr;
};

Status Transformer::ResolvePatches(const TokenView& tokens,
                                   const std::vector<ActivationPatch>& patches,
                                   std::vector<Patch>* out) const {
  const TransformerConfig& c = config_;
  const int64_t B = tokens.batch, T = tokens.length, D = c.d_model, H = c.n_heads;
  out->clear();
  for (size_t i = 0; i < patches.size(); ++i) {
    const ActivationPatch& p = patches[i];
    const std::string at = std::string(ArgPath(Arg::kPatches)) + "[" + std::to_string(i) + "]";
    Patch r;
    for (int64_t l = 0; l < c.n_layers && r.layer < 0; ++l) {
      for (const PatchableHook& h : kPatchable) {
        const bool mlp = h.site == PatchSite::kResidMid || h.site == PatchSite::kMlpOut;
        if ((!mlp || c.d_mlp > 0) && IsHook(p.hook, l, h.suffix)) {
          r.layer = l;
          r.site = h.site;
          break;
        }
      }
    }
    if (r.layer < 0) {
      return Status(StatusCode::kInvalidArgument, Arg::kPatches,
                    at + ".hook: '" + QuoteInput(p.hook) +
                        "' is not a patchable hook of this model (patchable: blocks.{l}." +
                        "hook_resid_pre, hook_attn_out, " +
                        (c.d_mlp > 0 ? "hook_resid_mid, hook_mlp_out, " : "") +
                        "hook_resid_post and attn.hook_z, l in [0, " + Str(c.n_layers) + "))");
    }
    const bool z = r.site == PatchSite::kZ;
    if (p.head != -1 && (!z || p.head < 0 || p.head >= H)) {
      return Status(StatusCode::kInvalidArgument, Arg::kPatches,
                    at + ".head: expected " +
                        (z ? "-1 (every head) or a head in [0, " + Str(H) + ")"
                           : std::string("-1 (only attn.hook_z patches one head)")) +
                        ", got " + Str(p.head));
    }
    if (p.position < -1 || p.position >= T) {
      return Status(StatusCode::kInvalidArgument, Arg::kPatches,
                    at + ".position: expected -1 (every position) or a position in [0, " + Str(T) +
                        "), got " + Str(p.position));
    }
    const Shape want = z ? Shape{B, H, T, D / H} : Shape{B, T, D};
    if (p.values.data == nullptr || !(p.values.shape == want) ||
        static_cast<int64_t>(p.values.size) != want.NumElements()) {
      return Status(StatusCode::kShapeMismatch, Arg::kPatches,
                    at + ".values: expected the hook's shape " + want.ToString() + ", got " +
                        (p.values.data == nullptr ? std::string("no data")
                                                  : p.values.shape.ToString()));
    }
    r.head = p.head;
    r.position = p.position;
    r.values = p.values.data;
    out->push_back(r);
  }
  return Status::Ok();
}

namespace {

// Copies the selected positions of a [B, T, D] patch into `x` ([B*T, D] rows).
void ApplyRowPatch(int64_t position, const float* values, int64_t B, int64_t T, int64_t D,
                   float* x) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = position < 0 ? 0 : position; t < (position < 0 ? T : position + 1); ++t) {
      const size_t row = static_cast<size_t>((b * T + t) * D);
      std::memcpy(x + row, values + row, static_cast<size_t>(D) * sizeof(float));
    }
  }
}

}  // namespace

// Layer l's attn.hook_z patches: `concat` [B, T, D] holds the (gated) heads side by side, `out`
// [B, T, D] the layer's output concat W_O^T + b_O. For each selected (b, t, h) the patched z
// replaces the head's slice of concat, and out's row changes by W_O[:, h dh .. (h + 1) dh] times
// (z_new - z_old), summed in double: the product with the other heads keeps its own bits.
void Transformer::ApplyZPatches(int64_t l, int64_t B, int64_t T, const std::vector<Patch>& patches,
                                float* concat, float* out) {
  const int64_t D = config_.d_model, H = config_.n_heads, dh = D / H;
  const float* wo = store_.data(layers_[static_cast<size_t>(l)]->out_proj_w);  // [D, D]
  std::vector<double> diff(static_cast<size_t>(dh));
  for (const Patch& p : patches) {
    if (p.layer != l || p.site != PatchSite::kZ) continue;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = p.position < 0 ? 0 : p.position; t < (p.position < 0 ? T : p.position + 1);
           ++t) {
        float* row = concat + (b * T + t) * D;
        float* o = out + (b * T + t) * D;
        for (int64_t h = p.head < 0 ? 0 : p.head; h < (p.head < 0 ? H : p.head + 1); ++h) {
          const float* z = p.values + ((b * H + h) * T + t) * dh;  // [B, H, T, dh]
          for (int64_t k = 0; k < dh; ++k) {
            diff[static_cast<size_t>(k)] =
                static_cast<double>(z[k]) - static_cast<double>(row[h * dh + k]);
            row[h * dh + k] = z[k];
          }
          for (int64_t e = 0; e < D; ++e) {
            double sum = 0;
            for (int64_t k = 0; k < dh; ++k) {
              sum += static_cast<double>(wo[e * D + h * dh + k]) * diff[static_cast<size_t>(k)];
            }
            o[e] = static_cast<float>(static_cast<double>(o[e]) + sum);
          }
        }
      }
    }
  }
}

Status Transformer::ReadOut(const float* rows, int64_t M, float* logits) {
  HEADSCOPE_RETURN_IF_ERROR(Prepare());
  const size_t D = static_cast<size_t>(config_.d_model), m = static_cast<size_t>(M);
  if (config_.norm != NormPlacement::kPre) {
    Unembed(rows, m, logits);
    return Status::Ok();
  }
  AlignedBuffer normed;
  if (!normed.Resize(m * D)) {
    return Status(StatusCode::kResourceExhausted, "ReadOut: out of memory for " + Str(M) + " rows");
  }
  LayerNorm(rows, m, D, store_.data(ln_final_w_), store_.data(ln_final_b_), config_.ln_eps,
            normed.data());
  Unembed(normed.data(), m, logits);
  return Status::Ok();
}

// What a refused call leaves (transformer.h ReleaseWorkspace): a forward that fails part way (the
// logits of (2^20, 16) tokens, 1.81 GiB, grown before its activations did not fit) frees what it
// grew, and its result.
Status Transformer::Forward(const TokenView& tokens, const TransformerOptions& options,
                            TransformerResult* result) {
  const Status s = ForwardPass(tokens, options, result);
  if (!s.ok()) {
    ReleaseWorkspace();
    *result = TransformerResult();
  }
  return s;
}

void Transformer::ReleaseWorkspace() {
  x_.Release();
  normed_.Release();
  attn_out_.Release();
  hidden_.Release();
  mlp_out_.Release();
  attn_result_ = ForwardResult();
  attn_trace_ = AttentionTrace();
  context_.activations.Release();
  sinusoid_.Release();
  sinusoid_rows_ = 0;
  saved_.reset();
  if (!have_grads_) grads_.Release();
}

Status Transformer::ForwardPass(const TokenView& tokens, const TransformerOptions& options,
                                TransformerResult* result) {
  const TransformerConfig& c = config_;
  const int64_t B = tokens.batch, T = tokens.length, V = c.vocab_size;
  HEADSCOPE_RETURN_IF_ERROR(CheckTokens(tokens, Arg::kTokens, c.max_len, ArgName(Arg::kMaxLen)));
  HEADSCOPE_RETURN_IF_ERROR(CheckGates(options.head_gates));
  // The hooks asked for, validated, in the caller's order (matched in place: the list of names
  // is only built for the error).
  result->hooks.resize(options.hooks.size());
  for (size_t i = 0; i < options.hooks.size(); ++i) {
    bool known = false;
    ForEachHook(c, [&](int64_t l, const char* suffix) {
      known = known || IsHook(options.hooks[i], l, suffix);
    });
    if (!known) {
      std::string list;
      for (const std::string& n : TransformerHookNames(c)) list += (list.empty() ? "" : ", ") + n;
      return Status(StatusCode::kInvalidArgument, Arg::kHooks,
                    std::string(ArgPath(Arg::kHooks)) + "[" + std::to_string(i) +
                        "]: unknown hook '" + options.hooks[i] + "' for this config (hooks: " +
                        list + ")");
    }
    for (size_t j = 0; j < i; ++j) {
      if (options.hooks[j] == options.hooks[i]) {
        return Status(StatusCode::kInvalidArgument, Arg::kHooks,
                      std::string(ArgPath(Arg::kHooks)) + "[" + std::to_string(i) + "]: '" +
                          options.hooks[i] + "' is listed twice");
      }
    }
    result->hooks[i].first = options.hooks[i];
  }
  std::vector<Patch> patches;
  HEADSCOPE_RETURN_IF_ERROR(ResolvePatches(tokens, options.patches, &patches));
  HEADSCOPE_RETURN_IF_ERROR(Prepare());
  const uint64_t rows = static_cast<uint64_t>(B * T);
  size_t bytes = 0;
  if (!Resize(&result->logits, SaturatingProduct({rows, static_cast<uint64_t>(V)}), &bytes,
              context_.max_call_bytes)) {
    return TooLarge(B, T, context_.max_call_bytes);
  }
  result->logits_shape = Shape{B, T, V};
  bool hooks_failed = false;
  HEADSCOPE_RETURN_IF_ERROR(
      RunBlocks(tokens, /*pos0=*/0, options.head_gates, /*cached=*/false, bytes, &result->hooks,
                &hooks_failed, /*saved=*/nullptr, &patches));
  const size_t M = static_cast<size_t>(rows);
  const auto keep = [&](const char* suffix, const float* data, const Shape& shape) {
    KeepHook(-1, suffix, data, shape, &result->hooks, &hooks_failed);
  };
  if (c.norm == NormPlacement::kPre) {
    LayerNorm(x_.data(), M, static_cast<size_t>(c.d_model), store_.data(ln_final_w_),
              store_.data(ln_final_b_), c.ln_eps, x_.data());
    keep("ln_final.hook_normalized", x_.data(), Shape{B, T, c.d_model});
  }
  Unembed(x_.data(), M, result->logits.data());
  keep("logits", result->logits.data(), result->logits_shape);
  if (hooks_failed) {
    return Status(StatusCode::kResourceExhausted, Arg::kHooks,
                  std::string(ArgPath(Arg::kHooks)) + ": out of memory keeping the hooks");
  }
  return Status::Ok();
}

Status Transformer::TooLarge(int64_t B, int64_t T, size_t limit) const {
  return Status(StatusCode::kResourceExhausted, Arg::kTokens,
                std::string(ArgPath(Arg::kTokens)) + ": buffers for (" + Str(B) + ", " + Str(T) +
                    ") tokens would exceed the limit of " + std::to_string(limit) +
                    " bytes, or could not be allocated");
}

// Hook `suffix` of layer `l` (-1: of the model), if it is in `hooks` (null: none): a copy of
// `data`, shaped `shape` (an allocation failure sets *failed, reported once the pass is done).
void Transformer::KeepHook(int64_t l, const char* suffix, const float* data, const Shape& shape,
                           std::vector<std::pair<std::string, TraceTensor>>* hooks,
                           bool* failed) {
  if (hooks == nullptr) return;
  for (auto& h : *hooks) {
    if (!IsHook(h.first, l, suffix)) continue;
    h.second.shape = shape;
    if (!h.second.data.Resize(static_cast<size_t>(shape.NumElements()))) {
      *failed = true;
      return;
    }
    std::memcpy(h.second.data.data(), data, h.second.data.size() * sizeof(float));
    return;
  }
}

// logits[M, V] = rows[M, D] unembed.weight^T + unembed.bias (tied: tok_embed.weight's panels,
// packed from the alias, which has the tensor's data and version).
void Transformer::Unembed(const float* rows, size_t M, float* logits) {
  const size_t D = static_cast<size_t>(config_.d_model), V = static_cast<size_t>(config_.vocab_size);
  MatMulPacked(rows, D, packed_->unembed.panels.data(),
               unembed_b_ >= 0 ? store_.data(unembed_b_) : nullptr, M, V, D, 1.0f, logits, V,
               context_.pool.threads);
}

// The embeddings and every block for tokens (B, T) at positions pos0 .. pos0 + T - 1, leaving the
// residual stream [B*T, D] in x_ (before ln_final). cached: each block's attention runs through
// its KV cache (ForwardCached: the cache holds positions 0 .. pos0 - 1 and takes these), else
// through Forward / Trace over these tokens alone (pos0 is 0 then). `hooks`: the hooks to keep
// (null: none, as in generation's passes; `hooks_failed` may be null then). Sizes the
// activations, counting from `bytes` already planned.
Status Transformer::RunBlocks(const TokenView& tokens, int64_t pos0, const TensorView& gates,
                              bool cached, size_t bytes,
                              std::vector<std::pair<std::string, TraceTensor>>* hooks,
                              bool* hooks_failed, Saved* saved,
                              const std::vector<Patch>* patches) {
  const TransformerConfig& c = config_;
  const int64_t B = tokens.batch, T = tokens.length, D = c.d_model;
  const int64_t H = c.n_heads, L = c.n_layers;
  for (const auto& layer : layers_) HEADSCOPE_RETURN_IF_ERROR(layer->attn->Prepare());

  context_.UseProcessDefaults();
  const size_t limit = context_.max_call_bytes;
  const uint64_t rows = static_cast<uint64_t>(B * T);
  const uint64_t MD = SaturatingProduct({rows, static_cast<uint64_t>(D)});
  if (!Resize(&x_, MD, &bytes, limit) || !Resize(&normed_, MD, &bytes, limit) ||
      !Resize(&hidden_, SaturatingProduct({rows, static_cast<uint64_t>(c.d_mlp)}), &bytes, limit) ||
      !Resize(&mlp_out_, MD, &bytes, limit)) {
    return TooLarge(B, T, limit);
  }
  const size_t M = static_cast<size_t>(rows), Dz = static_cast<size_t>(D);
  const int threads = context_.pool.threads;
  const auto keep = [&](int64_t l, const char* suffix, const float* data, const Shape& shape) {
    KeepHook(l, suffix, data, shape, hooks, hooks_failed);
  };
  const Shape btd{B, T, D};
  // Forward's activation patches (none in training and generation): the [B, T, D] ones of
  // layer l at `site` overwrite `x` before the hook there is kept.
  const bool patching = patches != nullptr && !patches->empty();
  const auto patch_rows = [&](int64_t l, PatchSite site, float* x) {
    if (!patching) return;
    for (const Patch& p : *patches) {
      if (p.layer == l && p.site == site) ApplyRowPatch(p.position, p.values, B, T, D, x);
    }
  };
  bool z_patched = false;  // this layer has an attn.hook_z patch
  // A training forward (saved): each stage's numbers the backward reads, copied as they appear.
  bool save_failed = false;
  const auto save = [&](AlignedBuffer* dst, const float* src, uint64_t n) {
    if (save_failed) return;
    if (!Resize(dst, n, &bytes, limit)) {
      save_failed = true;
      return;
    }
    std::memcpy(dst->data(), src, static_cast<size_t>(n) * sizeof(float));
  };
  // LayerNorm (w, b) of the residual stream into `out`, kept as block l's hook `hook`: into
  // normed_ before a sublayer (pre-norm), in place after it (post-norm).
  const auto layer_norm = [&](int64_t l, int w, int b, float* out, const char* hook) {
    LayerNorm(x_.data(), M, Dz, store_.data(w), store_.data(b), c.ln_eps, out);
    keep(l, hook, out, btd);
    return out;
  };
  if (saved != nullptr && saved->layers.size() != static_cast<size_t>(L)) {
    saved->layers.clear();
    saved->layers.resize(static_cast<size_t>(L));
  }

  // Embeddings: x = tok_embed[tokens] (+ positions).
  const float* tok_embed = store_.data(tok_embed_);
  for (size_t r = 0; r < M; ++r) {
    std::memcpy(x_.data() + r * Dz, tok_embed + static_cast<size_t>(tokens.data[r]) * Dz,
                Dz * sizeof(float));
  }
  keep(-1, "hook_embed", x_.data(), btd);
  if (HasPositionEmbedding(c)) {
    float* pos = normed_.data();  // [B, T, D], the positions of every row (scratch until ln1)
    // [max_len, D]: the learned entry, or the sinusoidal table's first pos0 + T rows.
    const float* table = pos_embed_ >= 0 ? store_.data(pos_embed_) : nullptr;
    if (c.positions == PositionKind::kSinusoidal) {
      if (!GrowSinusoids(pos0 + T)) return TooLarge(B, T, limit);
      table = sinusoid_.data();
    }
    for (size_t r = 0; r < M; ++r) {
      const int64_t p = pos0 + static_cast<int64_t>(r) % T;
      std::memcpy(pos + r * Dz, table + p * D, Dz * sizeof(float));
    }
    keep(-1, "hook_pos_embed", pos, btd);
    AddInPlace(x_.data(), pos, M * Dz);
  }

  const bool pre = c.norm == NormPlacement::kPre, post = c.norm == NormPlacement::kPost;
  for (int64_t l = 0; l < L; ++l) {
    Layer& layer = *layers_[static_cast<size_t>(l)];
    SavedLayer* sl = saved != nullptr ? &saved->layers[static_cast<size_t>(l)] : nullptr;
    patch_rows(l, PatchSite::kResidPre, x_.data());
    keep(l, "hook_resid_pre", x_.data(), btd);
    z_patched = false;
    for (size_t i = 0; patching && i < patches->size(); ++i) {
      z_patched = z_patched || ((*patches)[i].layer == l && (*patches)[i].site == PatchSite::kZ);
    }
    if (sl != nullptr) save(&sl->resid_pre, x_.data(), MD);
    const float* a_in = x_.data();
    if (pre) {
      a_in = layer_norm(l, layer.ln1_w, layer.ln1_b, normed_.data(), "ln1.hook_normalized");
    }
    ForwardOptions o;
    o.is_causal = c.causal;
    o.alibi = c.positions == PositionKind::kAlibi;  // positions "alibi": the scores' bias
    o.window = c.attn_window;
    o.need_weights = false;
    if (gates.present()) o.head_gates = {gates.data + l * H, {H}, static_cast<size_t>(H)};
    const TensorView in{a_in, btd, M * Dz};
    bool traced = false;
    for (const char* a : kAttnHooks) {
      for (size_t i = 0; hooks != nullptr && i < hooks->size(); ++i) {
        traced = traced || IsHook((*hooks)[i].first, l, a);
      }
    }
    float* attn_out;
    if (sl != nullptr) {
      // Forward with the per-head weights: the same kernels and bits as without them (mha.h).
      // The gated concatenation (in the context's activations until the next layer's call) and
      // the weights are what the attention's backward reads; it recomputes the projections.
      o.need_weights = true;
      o.average_attn_weights = false;
      // The layer's call gets what is left of the limit (the saved stages and the backward's
      // buffers are counted already), so one training call stays within max_call_bytes.
      context_.max_call_bytes = bytes < limit ? limit - bytes : 0;
      const Status attn = layer.attn->Forward(in, in, in, o, &attn_result_, &context_);
      context_.max_call_bytes = limit;
      HEADSCOPE_RETURN_IF_ERROR(attn);
      // What that call keeps (its result and the context's activations, reused by the next
      // layers) stays allocated for the rest of this one: counted once, from the first layer.
      if (l == 0 &&
          !AddBytes(&bytes, static_cast<uint64_t>(attn_result_.output.capacity()) +
                                attn_result_.weights.capacity() +
                                context_.activations.storage.capacity(),
                    limit)) {
        return TooLarge(B, T, limit);
      }
      save(&sl->concat, context_.activations.concat, MD);
      if (saved->keep_qkv && !save_failed) {  // (batch-first, q [B, T, D], k and v [B, T, Dkv])
        const size_t n = static_cast<size_t>(MD), nkv = M * static_cast<size_t>(KvDim(c));
        if (!Resize(&sl->qkv, n + 2 * static_cast<uint64_t>(nkv), &bytes, limit)) {
          save_failed = true;
        } else {
          std::memcpy(sl->qkv.data(), context_.activations.q, n * sizeof(float));
          std::memcpy(sl->qkv.data() + n, context_.activations.k, nkv * sizeof(float));
          std::memcpy(sl->qkv.data() + n + nkv, context_.activations.v, nkv * sizeof(float));
        }
      }
      save(&sl->pattern, attn_result_.weights.data(),
           SaturatingProduct({static_cast<uint64_t>(B * H), static_cast<uint64_t>(T),
                              static_cast<uint64_t>(T)}));
      attn_out = attn_result_.output.data();
    } else if (cached) {
      HEADSCOPE_RETURN_IF_ERROR(
          layer.attn->ForwardCached(in, o, &layer.cache, &attn_result_, &context_));
      attn_out = attn_result_.output.data();
    } else if (traced) {
      HEADSCOPE_RETURN_IF_ERROR(layer.attn->Trace(in, in, in, o, &attn_trace_, &context_));
      if (z_patched) {
        // The trace's concat and output take the patch; its head_outputs (hook_z) are the same
        // numbers split by head, copied back from the patched concat.
        ApplyZPatches(l, B, T, *patches, attn_trace_.concat.data.data(),
                      attn_trace_.output.data.data());
        const int64_t dh = D / H;
        float* z = attn_trace_.head_outputs.data.data();  // [B, H, T, dh]
        const float* cat = attn_trace_.concat.data.data();
        for (int64_t b = 0; b < B; ++b) {
          for (int64_t h = 0; h < H; ++h) {
            for (int64_t t = 0; t < T; ++t) {
              std::memcpy(z + ((b * H + h) * T + t) * dh, cat + (b * T + t) * D + h * dh,
                          static_cast<size_t>(dh) * sizeof(float));
            }
          }
        }
      }
      keep(l, "attn.hook_q", attn_trace_.q.data.data(), attn_trace_.q.shape);
      keep(l, "attn.hook_k", attn_trace_.k.data.data(), attn_trace_.k.shape);
      keep(l, "attn.hook_v", attn_trace_.v.data.data(), attn_trace_.v.shape);
      if (c.positions == PositionKind::kRope) {
        keep(l, "attn.hook_rot_q", attn_trace_.rot_q.data.data(), attn_trace_.rot_q.shape);
        keep(l, "attn.hook_rot_k", attn_trace_.rot_k.data.data(), attn_trace_.rot_k.shape);
      }
      keep(l, "attn.hook_attn_scores", attn_trace_.scores.data.data(), attn_trace_.scores.shape);
      keep(l, "attn.hook_pattern", attn_trace_.weights.data.data(), attn_trace_.weights.shape);
      keep(l, "attn.hook_z", attn_trace_.head_outputs.data.data(),
           attn_trace_.head_outputs.shape);
      attn_out = attn_trace_.output.data.data();
    } else {
      HEADSCOPE_RETURN_IF_ERROR(layer.attn->Forward(in, in, in, o, &attn_result_, &context_));
      attn_out = attn_result_.output.data();
      // The call leaves the gated concatenation in the context's activations (mha.cc).
      if (z_patched) ApplyZPatches(l, B, T, *patches, context_.activations.concat, attn_out);
    }
    patch_rows(l, PatchSite::kAttnOut, attn_out);
    keep(l, "hook_attn_out", attn_out, btd);
    AddInPlace(x_.data(), attn_out, M * Dz);
    if (post && sl != nullptr) save(&sl->sum1, x_.data(), MD);
    if (post) layer_norm(l, layer.ln1_w, layer.ln1_b, x_.data(), "ln1.hook_normalized");
    if (c.d_mlp > 0) {
      patch_rows(l, PatchSite::kResidMid, x_.data());
      keep(l, "hook_resid_mid", x_.data(), btd);
      if (sl != nullptr) save(&sl->resid_mid, x_.data(), MD);
      const float* m_in = x_.data();
      if (pre) {
        m_in = layer_norm(l, layer.ln2_w, layer.ln2_b, normed_.data(), "ln2.hook_normalized");
      }
      const size_t Mlp = static_cast<size_t>(c.d_mlp);
      const float* fc_in_b = layer.fc_in_b >= 0 ? store_.data(layer.fc_in_b) : nullptr;
      const float* fc_out_b = layer.fc_out_b >= 0 ? store_.data(layer.fc_out_b) : nullptr;
      MatMulPacked(m_in, Dz, packed_->fc_in[static_cast<size_t>(l)].panels.data(), fc_in_b, M,
                   Mlp, Dz, 1.0f, hidden_.data(), Mlp, threads);
      if (sl != nullptr) save(&sl->h_pre, hidden_.data(), SaturatingProduct({rows, static_cast<uint64_t>(Mlp)}));
      Activate(c.act, hidden_.data(), M * Mlp);
      MatMulPacked(hidden_.data(), Mlp, packed_->fc_out[static_cast<size_t>(l)].panels.data(),
                   fc_out_b, M, Dz, Mlp, 1.0f, mlp_out_.data(), Dz, threads);
      patch_rows(l, PatchSite::kMlpOut, mlp_out_.data());
      keep(l, "hook_mlp_out", mlp_out_.data(), btd);
      AddInPlace(x_.data(), mlp_out_.data(), M * Dz);
      if (post && sl != nullptr) save(&sl->sum2, x_.data(), MD);
      if (post) layer_norm(l, layer.ln2_w, layer.ln2_b, x_.data(), "ln2.hook_normalized");
    }
    patch_rows(l, PatchSite::kResidPost, x_.data());
    keep(l, "hook_resid_post", x_.data(), btd);
  }
  if (save_failed) return TooLarge(B, T, limit);
  return Status::Ok();
}

// The sinusoidal table's rows 0 .. need - 1 (need <= max_len). It grows geometrically, to twice
// its rows (at most max_len), and keeps the rows it has: generation asks for one more row per
// step, and regrowing by that row while computing the whole table again (pow, sin and cos per
// element) made each step cost O(context * d_model): 1 ms per token at context 4000, quadratic
// in all. Now the rows computed over a whole generation are at most twice its final length. The
// values are Sinusoid's whichever call computes them, so the bits do not depend on the growth.
bool Transformer::GrowSinusoids(int64_t need) {
  if (sinusoid_rows_ >= need) return true;
  const int64_t D = config_.d_model;
  int64_t rows = std::min(config_.max_len, std::max(need, 2 * sinusoid_rows_));
  AlignedBuffer grown;
  if (!grown.Resize(static_cast<size_t>(rows * D))) {
    rows = need;  // the doubled table did not fit: the rows asked for, if they do
    if (!grown.Resize(static_cast<size_t>(rows * D))) return false;
  }
  if (sinusoid_rows_ > 0) {
    std::memcpy(grown.data(), sinusoid_.data(), static_cast<size_t>(sinusoid_rows_ * D) * sizeof(float));
  }
  for (int64_t p = sinusoid_rows_; p < rows; ++p) {
    for (int64_t j = 0; j < D; ++j) grown[static_cast<size_t>(p * D + j)] = Sinusoid(p, j, D);
  }
  sinusoid_rows_computed_ += rows - sinusoid_rows_;
  sinusoid_ = std::move(grown);
  sinusoid_rows_ = rows;
  return true;
}

// Logits [B, V] of the last position of each of the B sequences the pass left in x_ ([B*T, D]):
// those rows through ln_final and the unembedding only (every stage works row by row, so these
// are the bits the full pass gives them).
void Transformer::LastLogits(int64_t B, int64_t T) {
  const size_t D = static_cast<size_t>(config_.d_model);
  for (int64_t b = 0; b < B; ++b) {
    std::memcpy(last_.data() + static_cast<size_t>(b) * D,
                x_.data() + static_cast<size_t>(b * T + T - 1) * D, D * sizeof(float));
  }
  if (config_.norm == NormPlacement::kPre) {
    LayerNorm(last_.data(), static_cast<size_t>(B), D, store_.data(ln_final_w_),
              store_.data(ln_final_b_), config_.ln_eps, last_.data());
  }
  Unembed(last_.data(), static_cast<size_t>(B), step_logits_.data());
}

namespace {

// The greedy choice: the first largest logit, a NaN counting as larger than any number (as
// torch.argmax takes it).
int32_t Argmax(const float* row, int64_t V) {
  int64_t best = 0;
  for (int64_t j = 0; j < V; ++j) {
    if (row[j] != row[j]) return static_cast<int32_t>(j);
    if (row[j] > row[best]) best = j;
  }
  return static_cast<int32_t>(best);
}

}  // namespace

// One token from a row of logits under the options (see GenerateOptions): greedy at temperature
// 0; otherwise softmax(logits / temperature) in double over the top_k largest (ties: lower index
// first), cut to the smallest prefix whose probability reaches top_p, sampled with u, a uniform
// number in [0, 1).
int32_t Transformer::Sample(const float* row, const GenerateOptions& o, double u) {
  const int64_t V = config_.vocab_size;
  if (o.temperature == 0.0) return Argmax(row, V);
  float lo = row[0], hi = row[0];
  for (int64_t j = 0; j < V; ++j) {
    if (!std::isfinite(row[j])) return Argmax(row, V);  // no distribution: the greedy choice
    lo = std::min(lo, row[j]);
    hi = std::max(hi, row[j]);
  }
  // The temperature rule (GenerateOptions): a positive temperature so small that the logits
  // divided by it leave double's range takes the greedy choice, the limit of the distribution as
  // the temperature goes to 0. Without it, at 1e-320 hi / T was inf, exp(inf - inf) NaN, and the
  // walk below fell through to its last token: the least likely one (20 seeds of 20).
  const double top = static_cast<double>(hi) / o.temperature;
  const double bottom = static_cast<double>(lo) / o.temperature;
  if (!std::isfinite(top) || !std::isfinite(bottom) || !std::isfinite(top - bottom)) {
    return Argmax(row, V);
  }
  order_.resize(static_cast<size_t>(V));
  for (int64_t j = 0; j < V; ++j) order_[static_cast<size_t>(j)] = static_cast<int32_t>(j);
  // A strict total order (value, then index), so every sort algorithm gives the same list.
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    return row[a] != row[b] ? row[a] > row[b] : a < b;
  });
  size_t keep = static_cast<size_t>(V);
  if (o.top_k > 0 && o.top_k < V) keep = static_cast<size_t>(o.top_k);
  probs_.resize(keep);
  double total = 0.0;  // (top is hi / T: hi is row[order_[0]], the first of the sorted order)
  for (size_t i = 0; i < keep; ++i) {
    probs_[i] = std::exp(static_cast<double>(row[order_[i]]) / o.temperature - top);
    total += probs_[i];
  }
  if (o.top_p < 1.0) {
    // The smallest prefix whose probability reaches top_p (at least one token).
    double mass = 0.0;
    size_t n = 0;
    while (n < keep && (n == 0 || mass < o.top_p * total)) mass += probs_[n++];
    keep = n;
    total = mass;
  }
  const double target = u * total;
  double run = 0.0;
  for (size_t i = 0; i + 1 < keep; ++i) {
    run += probs_[i];
    if (target < run) return order_[i];
  }
  return order_[keep - 1];
}

Status Transformer::Generate(const TokenView& prompt, const GenerateOptions& o,
                             GenerateResult* result) {
  HEADSCOPE_RETURN_IF_ERROR(GenerateBegin(prompt, o, result));
  bool done = false;
  return GenerateContinue(o.max_new_tokens, result, &done);
}

uint64_t Transformer::WeightsVersion() const {
  // The store's version only grows, and every change of an entry bumps it.
  return store_.version();
}

Status Transformer::GenerateBegin(const TokenView& prompt, const GenerateOptions& o,
                                  GenerateResult* result) {
  EndGeneration(/*release=*/false);  // a new generation replaces the one in progress
  const Status s = BeginGeneration(prompt, o, result);
  if (!s.ok()) {
    EndGeneration(/*release=*/true);
    ReleaseResult(result);
  }
  return s;
}

Status Transformer::BeginGeneration(const TokenView& prompt, const GenerateOptions& o,
                                    GenerateResult* result) {
  const TransformerConfig& c = config_;
  const int64_t B = prompt.batch, T = prompt.length, V = c.vocab_size;
  HEADSCOPE_RETURN_IF_ERROR(CheckTokens(prompt, Arg::kPrompt, c.max_len, ArgName(Arg::kMaxLen)));
  if (o.max_new_tokens < 0 || o.max_new_tokens > c.max_len - T) {
    return ArgError(StatusCode::kInvalidArgument, Arg::kMaxNewTokens,
                    "expected an integer in [0, " + Str(c.max_len - T) + "]: the prompt's " +
                        Str(T) + " tokens plus the new ones must fit " + ArgName(Arg::kMaxLen) +
                        " = " + Str(c.max_len) + ", got " + Str(o.max_new_tokens));
  }
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature)) {
    return ArgError(StatusCode::kInvalidArgument, Arg::kTemperature,
                    "expected a finite number >= 0 (0: greedy)");
  }
  if (o.top_k < 0) {
    return ArgError(StatusCode::kInvalidArgument, Arg::kTopK,
                    "expected an integer >= 0 (0: every token), got " + Str(o.top_k));
  }
  if (!(o.top_p > 0.0 && o.top_p <= 1.0)) {
    return ArgError(StatusCode::kInvalidArgument, Arg::kTopP,
                    "expected a number in (0, 1] (1: every token)");
  }
  HEADSCOPE_RETURN_IF_ERROR(CheckGates(o.head_gates));
  HEADSCOPE_RETURN_IF_ERROR(Prepare());

  const int64_t n = o.max_new_tokens, W = T + n;
  const size_t limit = context_.max_call_bytes;
  size_t bytes = 0;
  const uint64_t D = static_cast<uint64_t>(c.d_model);
  // The KV caches (causal models), the last rows and their logits, the kept logits.
  // (A cache row is KvDim floats: D, or G d_head with grouped-query attention, n_heads / G times
  // fewer.)
  const uint64_t Dkv = static_cast<uint64_t>(KvDim(c));
  const uint64_t cache_floats =
      c.causal ? SaturatingProduct({2, static_cast<uint64_t>(c.n_layers), static_cast<uint64_t>(B),
                                    static_cast<uint64_t>(W), Dkv})
               : 0;
  if (!AddBytes(&bytes, cache_floats, limit) ||
      !Resize(&last_, SaturatingProduct({static_cast<uint64_t>(B), D}), &bytes, limit) ||
      !Resize(&step_logits_, SaturatingProduct({static_cast<uint64_t>(B), static_cast<uint64_t>(V)}),
              &bytes, limit) ||
      !Resize(&result->logits,
              o.keep_logits ? SaturatingProduct({static_cast<uint64_t>(B), static_cast<uint64_t>(n),
                                                 static_cast<uint64_t>(V)})
                            : 0,
              &bytes, limit)) {
    return ArgError(StatusCode::kResourceExhausted, Arg::kMaxNewTokens,
                    "generating " + Str(n) + " tokens after (" + Str(B) + ", " + Str(T) +
                        ") would exceed the limit of " + std::to_string(limit) +
                        " bytes, or could not be allocated");
  }
  result->tokens.resize(static_cast<size_t>(B * W));
  result->tokens_shape = Shape{B, W};
  result->logits_shape = o.keep_logits ? Shape{B, n, V} : Shape{};
  for (int64_t b = 0; b < B; ++b) {
    std::memcpy(result->tokens.data() + b * W, prompt.data + b * T,
                static_cast<size_t>(T) * sizeof(int32_t));
  }
  // What the steps need after this call, which may come from a caller whose own buffers (the
  // options' gates among them) are gone by then: the options, with the gates copied.
  gen_.options = o;
  if (o.head_gates.present()) {
    gen_.gates.assign(o.head_gates.data, o.head_gates.data + o.head_gates.size);
    gen_.options.head_gates.data = gen_.gates.data();
  }
  gen_.result = result;
  gen_.batch = B;
  gen_.prompt_length = T;
  gen_.step = 0;
  gen_.bytes = bytes;
  gen_.stream = Mix64(o.seed ^ Fnv1a64("generate"));
  gen_.weights_version = WeightsVersion();
  gen_.active = true;
  if (n == 0) return Status::Ok();
  for (auto& layer : layers_) {
    if (c.causal && !layer->cache.Reset(static_cast<size_t>(B), static_cast<size_t>(W),
                                        static_cast<size_t>(Dkv))) {
      return ArgError(StatusCode::kResourceExhausted, Arg::kMaxNewTokens,
                      "out of memory for the KV cache of " + Str(W) + " positions");
    }
  }
  // A step's tokens: one new position per sequence (causal), or every sequence so far.
  step_tokens_.resize(static_cast<size_t>(B * W));
  // The prompt through every block (filling the caches of a causal model).
  HEADSCOPE_RETURN_IF_ERROR(
      RunBlocks(prompt, 0, gen_.options.head_gates, c.causal, bytes, nullptr, nullptr));
  LastLogits(B, T);
  return Status::Ok();
}

size_t Transformer::kv_cache_bytes() const {
  size_t floats = 0;
  for (const auto& layer : layers_) floats += layer->cache.floats();
  return floats * sizeof(float);
}

Status Transformer::GenerateContinue(int64_t max_steps, GenerateResult* result, bool* done) {
  *done = false;
  if (!gen_.active || result != gen_.result) {
    return Status(StatusCode::kInvalidArgument,
                  "generate: no generation in progress for this result (one begins with "
                  "GenerateBegin and ends when it is done, cancelled or refused, or when another "
                  "begins)");
  }
  if (max_steps < 0) {
    return Status(StatusCode::kInvalidArgument,
                  "generate: expected a number of steps >= 0, got " + Str(max_steps));
  }
  const int64_t n = gen_.options.max_new_tokens;
  if (result->tokens.size() != static_cast<size_t>(gen_.batch * (gen_.prompt_length + n)) ||
      result->logits.size() != (gen_.options.keep_logits
                                    ? static_cast<size_t>(gen_.batch * n * config_.vocab_size)
                                    : 0)) {
    EndGeneration(/*release=*/true);
    return Status(StatusCode::kInvalidArgument,
                  "generate: the result was changed since GenerateBegin filled it; the "
                  "generation was ended");
  }
  if (WeightsVersion() != gen_.weights_version) {
    // The KV caches hold keys and values of the old weights: the tokens would follow neither.
    EndGeneration(/*release=*/true);
    ReleaseResult(result);
    return Status(StatusCode::kCancelled,
                  "generate: the model's weights changed while it was generating (a state_dict "
                  "entry was set, initialised or trained between its steps), so it was ended; "
                  "generate again");
  }
  const Status s = ContinueGeneration(max_steps, result);
  if (!s.ok()) {
    EndGeneration(/*release=*/true);
    ReleaseResult(result);
    return s;
  }
  *done = gen_.step == gen_.options.max_new_tokens;
  if (*done) EndGeneration(/*release=*/false);  // its buffers stay for the next generation
  return Status::Ok();
}

// Up to max_steps steps of the generation in progress: each samples one token per sequence from
// step_logits_ (the logits the previous step, or the prompt, left), then, unless it was the last,
// runs the new tokens through every block for the next step's logits. The order of Generate's
// single loop, so the same bits however the steps are split.
Status Transformer::ContinueGeneration(int64_t max_steps, GenerateResult* result) {
  const TransformerConfig& c = config_;
  const GenerateOptions& o = gen_.options;
  const int64_t B = gen_.batch, T = gen_.prompt_length, n = o.max_new_tokens, W = T + n;
  const int64_t V = c.vocab_size;
  for (int64_t k = 0; k < max_steps && gen_.step < n; ++k) {
    const int64_t s = gen_.step++;
    for (int64_t b = 0; b < B; ++b) {
      const float* row = step_logits_.data() + b * V;
      if (o.keep_logits) {
        std::memcpy(result->logits.data() + (b * n + s) * V, row, static_cast<size_t>(V) * sizeof(float));
      }
      // The (s, b)-th draw of the seed's stream: 53 bits, in [0, 1).
      const double u = static_cast<double>(Word(gen_.stream, static_cast<uint64_t>(s * B + b)) >> 11) *
                       0x1p-53;
      result->tokens[static_cast<size_t>(b * W + T + s)] = Sample(row, o, u);
    }
    if (s + 1 == n) break;
    const int64_t len = T + s + 1;  // tokens so far
    if (c.causal) {
      // One new position per sequence, through the caches.
      for (int64_t b = 0; b < B; ++b) step_tokens_[static_cast<size_t>(b)] = result->tokens[static_cast<size_t>(b * W + len - 1)];
      HEADSCOPE_RETURN_IF_ERROR(RunBlocks({step_tokens_.data(), B, 1}, len - 1, o.head_gates, true,
                                          gen_.bytes, nullptr, nullptr));
      LastLogits(B, 1);
    } else {
      // Bidirectional attention: every position sees the new token, so nothing computed before
      // holds; the whole sequence runs again.
      for (int64_t b = 0; b < B; ++b) {
        std::memcpy(step_tokens_.data() + b * len, result->tokens.data() + b * W,
                    static_cast<size_t>(len) * sizeof(int32_t));
      }
      HEADSCOPE_RETURN_IF_ERROR(RunBlocks({step_tokens_.data(), B, len}, 0, o.head_gates, false,
                                          gen_.bytes, nullptr, nullptr));
      LastLogits(B, len);
    }
  }
  return Status::Ok();
}

void Transformer::GenerateCancel() { EndGeneration(/*release=*/true); }

void Transformer::ReleaseResult(GenerateResult* result) { *result = GenerateResult(); }

void Transformer::EndGeneration(bool release) {
  gen_.active = false;
  gen_.result = nullptr;
  if (!release) return;
  for (auto& layer : layers_) {
    layer->cache.k.Release();
    layer->cache.v.Release();
    layer->cache.batch = layer->cache.capacity = layer->cache.length = 0;
  }
  last_.Release();
  step_logits_.Release();
  std::vector<int32_t>().swap(step_tokens_);
  std::vector<int32_t>().swap(order_);
  std::vector<double>().swap(probs_);
  std::vector<float>().swap(gen_.gates);
}

}  // namespace headscope
