#include "headscope/transformer.h"

#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include "headscope/kernels/matmul.h"
#include "headscope/plan.h"

namespace headscope {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }
std::string Block(int64_t l) { return "blocks." + Str(l) + "."; }

bool HasLn1(const TransformerConfig& c) { return c.norm != NormPlacement::kNone; }
bool HasLn2(const TransformerConfig& c) { return c.norm != NormPlacement::kNone && c.d_mlp > 0; }

// torch's nn.LayerNorm over the last dimension (biased variance), one row at a time, in double;
// `out` may be `in`.
void LayerNorm(const float* in, size_t rows, size_t d, const float* w, const float* b, double eps,
               float* out) {
  for (size_t r = 0; r < rows; ++r) {
    const float* x = in + r * d;
    double mean = 0;
    for (size_t j = 0; j < d; ++j) mean += x[j];
    mean /= static_cast<double>(d);
    double var = 0;
    for (size_t j = 0; j < d; ++j) var += (x[j] - mean) * (x[j] - mean);
    var /= static_cast<double>(d);
    const double inv = 1.0 / std::sqrt(var + eps);
    float* y = out + r * d;
    for (size_t j = 0; j < d; ++j) {
      y[j] = static_cast<float>((x[j] - mean) * inv * w[j] + b[j]);
    }
  }
}

// F.gelu (the exact erf form) or F.relu, in place.
void Activate(Activation act, float* x, size_t n) {
  if (act == Activation::kRelu) {
    for (size_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : (x[i] != x[i] ? x[i] : 0.0f);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    x[i] = static_cast<float>(0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440)));
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

Status UnknownKey(const TransformerConfig& c, const std::string& arg) {
  std::string keys;
  for (const TransformerParamSpec& p : TransformerParams(c)) {
    keys += (keys.empty() ? "" : ", ") + p.name;
  }
  return Status(StatusCode::kUnknownParameter, Arg::kStateDict,
                arg + ": unknown key for this config (expected keys: " + keys + ")");
}

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

constexpr const char* kAttnHooks[] = {"attn.hook_q", "attn.hook_k", "attn.hook_v",
                                      "attn.hook_attn_scores", "attn.hook_pattern", "attn.hook_z"};

// Calls f(layer, suffix) for every hook of `c` in the order the reference computes them (layer
// -1: a model-level hook). The one list behind TransformerHookNames and Forward's checks.
template <class F>
void ForEachHook(const TransformerConfig& c, const F& f) {
  f(int64_t{-1}, "hook_embed");
  if (c.positions != PositionKind::kNone) f(int64_t{-1}, "hook_pos_embed");
  for (int64_t l = 0; l < c.n_layers; ++l) {
    f(l, "hook_resid_pre");
    for (const char* a : kAttnHooks) f(l, a);
    f(l, "hook_attn_out");
    if (c.d_mlp > 0) {
      f(l, "hook_resid_mid");
      f(l, "hook_mlp_out");
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
  // nn.Linear(in, out): kaiming_uniform_(a=sqrt(5)) for the weight and U(+-1/sqrt(fan_in)) for
  // the bias have the same bound, 1/sqrt(in).
  const InitRule linear_in_d{InitRule::kUniform, 1.0 / std::sqrt(D)};
  if (name == "tok_embed.weight" || name == "pos_embed.weight") return {InitRule::kNormal, 0.0};
  // xavier_uniform_ of a (3D, D) tensor: torch's fan_in is D (columns), fan_out 3D (rows).
  if (ends(".attn.in_proj_weight")) return {InitRule::kUniform, std::sqrt(6.0 / (4.0 * D))};
  // MultiheadAttention._reset_parameters zeroes both biases; out_proj.weight keeps the
  // nn.Linear initialisation its NonDynamicallyQuantizableLinear got when it was built.
  if (ends(".attn.in_proj_bias") || ends(".attn.out_proj.bias")) return {InitRule::kConstant, 0.0};
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
  const auto size = [](int64_t v, const char* name, bool zero_ok) -> Status {
    if ((zero_ok ? v < 0 : v < 1) || v > kMaxDim) {
      return InvalidArgument(std::string(name) + ": expected an integer in [" +
                             (zero_ok ? "0" : "1") + ", " + Str(kMaxDim) + "], got " + Str(v));
    }
    return Status::Ok();
  };
  HEADSCOPE_RETURN_IF_ERROR(size(c.vocab_size, "vocab_size", false));
  HEADSCOPE_RETURN_IF_ERROR(size(c.max_len, "max_len", false));
  HEADSCOPE_RETURN_IF_ERROR(size(c.d_model, "d_model", false));
  HEADSCOPE_RETURN_IF_ERROR(size(c.n_layers, "n_layers", false));
  HEADSCOPE_RETURN_IF_ERROR(size(c.n_heads, "n_heads", false));
  HEADSCOPE_RETURN_IF_ERROR(size(c.d_mlp, "d_mlp", true));
  if (c.n_layers > 256) {
    return InvalidArgument("n_layers: expected at most 256 layers, got " + Str(c.n_layers));
  }
  if (c.d_model % c.n_heads != 0) {
    return InvalidArgument("n_heads: d_model (" + Str(c.d_model) + ") must be divisible by n_heads (" +
                           Str(c.n_heads) + ")");
  }
  if (!(c.ln_eps > 0) || !std::isfinite(c.ln_eps)) {
    return InvalidArgument("ln_eps: expected a finite number > 0");
  }
  return Status::Ok();
}

std::vector<TransformerParamSpec> TransformerParams(const TransformerConfig& c) {
  const int64_t V = c.vocab_size, D = c.d_model, M = c.d_mlp;
  std::vector<TransformerParamSpec> p;
  p.push_back({"tok_embed.weight", {V, D}});
  if (c.positions == PositionKind::kLearned) p.push_back({"pos_embed.weight", {c.max_len, D}});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = Block(l);
    if (HasLn1(c)) {
      p.push_back({b + "ln1.weight", {D}});
      p.push_back({b + "ln1.bias", {D}});
    }
    p.push_back({b + "attn.in_proj_weight", {3 * D, D}});
    if (c.bias) p.push_back({b + "attn.in_proj_bias", {3 * D}});
    p.push_back({b + "attn.out_proj.weight", {D, D}});
    if (c.bias) p.push_back({b + "attn.out_proj.bias", {D}});
    if (HasLn2(c)) {
      p.push_back({b + "ln2.weight", {D}});
      p.push_back({b + "ln2.bias", {D}});
    }
    if (M > 0) {
      p.push_back({b + "mlp.fc_in.weight", {M, D}});
      if (c.bias) p.push_back({b + "mlp.fc_in.bias", {M}});
      p.push_back({b + "mlp.fc_out.weight", {D, M}});
      if (c.bias) p.push_back({b + "mlp.fc_out.bias", {D}});
    }
  }
  if (c.norm == NormPlacement::kPre) {
    p.push_back({"ln_final.weight", {D}});
    p.push_back({"ln_final.bias", {D}});
  }
  p.push_back({"unembed.weight", {V, D}});
  if (c.bias) p.push_back({"unembed.bias", {V}});
  return p;
}

std::vector<std::string> TransformerHookNames(const TransformerConfig& c) {
  std::vector<std::string> h;
  ForEachHook(c, [&](int64_t l, const char* suffix) {
    h.push_back(l < 0 ? std::string(suffix) : Block(l) + suffix);
  });
  return h;
}

// One block: its attention module and the store entries of its LayerNorms and MLP (-1: absent).
struct Transformer::Layer {
  std::unique_ptr<MultiheadAttention> attn;
  int ln1_w = -1, ln1_b = -1, ln2_w = -1, ln2_b = -1;
  int fc_in_w = -1, fc_in_b = -1, fc_out_w = -1, fc_out_b = -1;
};

// A Linear weight packed for MatMulPacked, stamped with the store version it was packed from.
struct PackedLinear {
  AlignedBuffer panels;
  uint64_t version = 0;
};
struct Transformer::Packed {
  std::vector<PackedLinear> fc_in, fc_out;  // per layer
  PackedLinear unembed;
  uint64_t version = 0;  // the store version all of them were brought up to
};

Transformer::Transformer(const TransformerConfig& config) : config_(config) {}
Transformer::~Transformer() = default;

Status Transformer::Create(const TransformerConfig& config, std::unique_ptr<Transformer>* out) {
  HEADSCOPE_RETURN_IF_ERROR(ValidateTransformerConfig(config));
  std::unique_ptr<Transformer> t(new (std::nothrow) Transformer(config));
  if (t == nullptr) return Status(StatusCode::kResourceExhausted, "Transformer: out of memory");
  t->packed_.reset(new (std::nothrow) Packed);
  if (t->packed_ == nullptr) return Status(StatusCode::kResourceExhausted, "Transformer: out of memory");
  // Every entry but the attention layers' own, which their MultiheadAttention holds.
  for (const TransformerParamSpec& p : TransformerParams(config)) {
    if (p.name.find(".attn.") == std::string::npos) t->store_.Add(p.name, p.shape);
  }
  MhaConfig mc;
  mc.embed_dim = config.d_model;
  mc.num_heads = config.n_heads;
  mc.bias = config.bias;
  mc.batch_first = true;
  for (int64_t l = 0; l < config.n_layers; ++l) {
    std::unique_ptr<Layer> layer(new (std::nothrow) Layer);
    if (layer == nullptr) return Status(StatusCode::kResourceExhausted, "Transformer: out of memory");
    HEADSCOPE_RETURN_IF_ERROR(MultiheadAttention::Create(mc, &layer->attn));
    const std::string b = Block(l);
    layer->ln1_w = t->store_.Find(b + "ln1.weight");
    layer->ln1_b = t->store_.Find(b + "ln1.bias");
    layer->ln2_w = t->store_.Find(b + "ln2.weight");
    layer->ln2_b = t->store_.Find(b + "ln2.bias");
    layer->fc_in_w = t->store_.Find(b + "mlp.fc_in.weight");
    layer->fc_in_b = t->store_.Find(b + "mlp.fc_in.bias");
    layer->fc_out_w = t->store_.Find(b + "mlp.fc_out.weight");
    layer->fc_out_b = t->store_.Find(b + "mlp.fc_out.bias");
    t->layers_.push_back(std::move(layer));
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
  const std::string arg = std::string(ArgName(Arg::kStateDict)) + "['" + std::string(name) + "']";
  // "blocks.<l>.attn.<key>": the layer's MultiheadAttention, by torch's MHA key.
  size_t l = 0;
  std::string_view key;
  if (SplitAttnKey(name, config_.n_layers, &l, &key)) {
    const Status s = layers_[l]->attn->SetParameter(key, value);
    if (s.ok()) return s;
    if (s.code() != StatusCode::kUnknownParameter) {
      // The layer names the entry by its own key: name it by the model's.
      const std::string inner = "['" + std::string(key) + "']";
      std::string m = s.message();
      const size_t at = m.find(inner);
      if (at != std::string::npos) m = arg + m.substr(at + inner.size());
      return Status(s.code(), Arg::kStateDict, m);
    }
  }
  const int i = store_.Find(name);
  if (i < 0) return UnknownKey(config_, arg);
  const Status s = store_.Set(i, value, arg);
  return s.ok() ? s : Status(s.code(), Arg::kStateDict, s.message());
}

Status Transformer::GetParameter(std::string_view name, TensorView* out) const {
  const std::string arg = std::string(ArgName(Arg::kStateDict)) + "['" + std::string(name) + "']";
  // The attention entries live in their layer's MhaWeights (with its q/k/v_proj_weight aliases),
  // the others in the model's store: the same two places SetParameter writes.
  const ParameterStore* store = &store_;
  size_t l = 0;
  std::string_view key = name;
  if (SplitAttnKey(name, config_.n_layers, &l, &key)) store = &layers_[l]->attn->weights().store();
  const int i = store->Find(key);
  if (i < 0) return UnknownKey(config_, arg);
  if (!store->loaded(i)) {
    return Status(StatusCode::kMissingParameter, Arg::kStateDict,
                  arg + ": not loaded yet (expected shape " + store->shape(i).ToString() + ")");
  }
  const Shape& shape = store->shape(i);
  *out = TensorView(store->data(i), shape, static_cast<size_t>(shape.NumElements()));
  return Status::Ok();
}

Status Transformer::InitializeFromSeed(uint64_t seed) {
  // Through SetParameter, so the attention layers' and the packed panels' versions move on and
  // the next Forward repacks: one temporary buffer, grown to the largest entry.
  AlignedBuffer values;
  for (const TransformerParamSpec& p : TransformerParams(config_)) {
    const size_t n = static_cast<size_t>(p.shape.NumElements());
    if (!values.Resize(n)) {
      return Status(StatusCode::kResourceExhausted, Arg::kStateDict,
                    std::string(ArgName(Arg::kStateDict)) + "['" + p.name +
                        "']: out of memory initialising " + std::to_string(n) + " floats");
    }
    FillInitial(seed, p.name, InitRuleOf(config_, p.name), values.data(), n);
    HEADSCOPE_RETURN_IF_ERROR(SetParameter(p.name, {values.data(), p.shape, n}));
  }
  return Status::Ok();
}

Status Transformer::CheckComplete() const {
  std::string missing;
  for (const TransformerParamSpec& p : TransformerParams(config_)) {
    bool have;
    const size_t attn = p.name.find(".attn.");
    if (attn != std::string::npos) {
      const int64_t l = std::stoll(p.name.substr(7, attn - 7));
      const std::string key = p.name.substr(attn + 6);
      const MhaWeights& w = layers_[static_cast<size_t>(l)]->attn->weights();
      have = (key == "in_proj_weight" && w.Has(Param::kInProjWeight)) ||
             (key == "in_proj_bias" && w.Has(Param::kInProjBias)) ||
             (key == "out_proj.weight" && w.Has(Param::kOutProjWeight)) ||
             (key == "out_proj.bias" && w.Has(Param::kOutProjBias));
    } else {
      have = store_.loaded(store_.Find(p.name));
    }
    if (!have) missing += (missing.empty() ? "" : ", ") + p.name + " " + p.shape.ToString();
  }
  if (missing.empty()) return Status::Ok();
  return Status(StatusCode::kMissingParameter, Arg::kStateDict,
                std::string(ArgName(Arg::kStateDict)) + ": missing " + missing);
}

// The Linear weights packed, each repacked only if its entry changed since.
Status Transformer::Prepare() {
  if (packed_->version == store_.version() && packed_->version != 0) return Status::Ok();
  HEADSCOPE_RETURN_IF_ERROR(CheckComplete());
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

Status Transformer::Forward(const TokenView& tokens, const TransformerOptions& options,
                            TransformerResult* result) {
  const TransformerConfig& c = config_;
  const int64_t B = tokens.batch, T = tokens.length, D = c.d_model, V = c.vocab_size;
  const int64_t H = c.n_heads, L = c.n_layers;
  if (B < 1 || T < 1 || T > c.max_len) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kTokens,
                    "expected (B, T) with B >= 1 and 1 <= T <= max_len = " + Str(c.max_len) +
                        ", got (" + Str(B) + ", " + Str(T) + ")");
  }
  if (B > kMaxDim || tokens.data == nullptr) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kTokens, "no data for (" + Str(B) + ", " +
                                                                  Str(T) + ") tokens");
  }
  for (int64_t i = 0; i < B * T; ++i) {
    const int32_t t = tokens.data[i];
    if (t < 0 || t >= V) {
      return ArgError(StatusCode::kInvalidArgument, Arg::kTokens,
                      "token [" + Str(i / T) + ", " + Str(i % T) + "] is " + Str(t) +
                          ", expected an integer in [0, " + Str(V - 1) + "] (vocab_size " +
                          Str(V) + ")");
    }
  }
  const TensorView& gates = options.head_gates;
  if (gates.present() && (gates.shape != Shape{L, H} || gates.data == nullptr ||
                          gates.size != static_cast<size_t>(L * H))) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kHeadGates,
                    "expected (n_layers, n_heads) = [" + Str(L) + ", " + Str(H) + "] gates, got " +
                        gates.shape.ToString());
  }
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
  HEADSCOPE_RETURN_IF_ERROR(Prepare());
  for (const auto& layer : layers_) HEADSCOPE_RETURN_IF_ERROR(layer->attn->Prepare());

  context_.UseProcessDefaults();
  const size_t limit = context_.max_call_bytes;
  size_t bytes = 0;
  const uint64_t rows = static_cast<uint64_t>(B * T);
  const uint64_t MD = SaturatingProduct({rows, static_cast<uint64_t>(D)});
  if (!Resize(&x_, MD, &bytes, limit) || !Resize(&normed_, MD, &bytes, limit) ||
      !Resize(&hidden_, SaturatingProduct({rows, static_cast<uint64_t>(c.d_mlp)}), &bytes, limit) ||
      !Resize(&mlp_out_, MD, &bytes, limit) ||
      !Resize(&result->logits, SaturatingProduct({rows, static_cast<uint64_t>(V)}), &bytes, limit)) {
    return Status(StatusCode::kResourceExhausted, Arg::kTokens,
                  std::string(ArgPath(Arg::kTokens)) + ": buffers for (" + Str(B) + ", " + Str(T) +
                      ") tokens would exceed the limit of " + std::to_string(limit) +
                      " bytes, or could not be allocated");
  }
  result->logits_shape = Shape{B, T, V};
  const size_t M = static_cast<size_t>(rows), Dz = static_cast<size_t>(D);
  const int threads = context_.pool.threads;

  // The hook slot of hook `suffix` of layer `l` (-1: of the model) if it was asked for, shaped
  // `shape`; null otherwise (or if it could not be allocated: reported once the pass is done).
  bool hooks_failed = false;
  const auto want = [&](int64_t l, const char* suffix, const Shape& shape) -> TraceTensor* {
    for (auto& h : result->hooks) {
      if (IsHook(h.first, l, suffix)) {
        h.second.shape = shape;
        if (h.second.data.Resize(static_cast<size_t>(shape.NumElements()))) return &h.second;
        hooks_failed = true;
        return nullptr;
      }
    }
    return nullptr;
  };
  const auto keep = [&](int64_t l, const char* suffix, const float* data, const Shape& shape) {
    if (TraceTensor* t = want(l, suffix, shape)) {
      std::memcpy(t->data.data(), data, t->data.size() * sizeof(float));
    }
  };
  const Shape btd{B, T, D};

  // Embeddings: x = tok_embed[tokens] (+ positions).
  const float* tok_embed = store_.data(tok_embed_);
  for (size_t r = 0; r < M; ++r) {
    std::memcpy(x_.data() + r * Dz, tok_embed + static_cast<size_t>(tokens.data[r]) * Dz,
                Dz * sizeof(float));
  }
  keep(-1, "hook_embed", x_.data(), btd);
  if (c.positions != PositionKind::kNone) {
    float* pos = normed_.data();  // [B, T, D], the positions of every row (scratch until ln1)
    // [max_len, D]: the learned entry, or the sinusoidal table's first T rows.
    const float* table = pos_embed_ >= 0 ? store_.data(pos_embed_) : nullptr;
    if (c.positions == PositionKind::kSinusoidal) {
      if (sinusoid_rows_ < T) {
        if (!sinusoid_.Resize(static_cast<size_t>(T * D))) {
          return Status(StatusCode::kResourceExhausted, Arg::kTokens,
                        std::string(ArgPath(Arg::kTokens)) + ": out of memory for the positions of " +
                            Str(T) + " tokens");
        }
        for (int64_t p = 0; p < T; ++p) {
          for (int64_t j = 0; j < D; ++j) {
            sinusoid_[static_cast<size_t>(p * D + j)] = Sinusoid(p, j, D);
          }
        }
        sinusoid_rows_ = T;
      }
      table = sinusoid_.data();
    }
    for (size_t r = 0; r < M; ++r) {
      const int64_t p = static_cast<int64_t>(r) % T;
      std::memcpy(pos + r * Dz, table + p * D, Dz * sizeof(float));
    }
    keep(-1, "hook_pos_embed", pos, btd);
    for (size_t i = 0; i < M * Dz; ++i) x_[i] += pos[i];
  }

  const bool pre = c.norm == NormPlacement::kPre, post = c.norm == NormPlacement::kPost;
  for (int64_t l = 0; l < L; ++l) {
    Layer& layer = *layers_[static_cast<size_t>(l)];
    keep(l, "hook_resid_pre", x_.data(), btd);
    const float* a_in = x_.data();
    if (pre) {
      LayerNorm(x_.data(), M, Dz, store_.data(layer.ln1_w), store_.data(layer.ln1_b), c.ln_eps,
                normed_.data());
      a_in = normed_.data();
    }
    ForwardOptions o;
    o.is_causal = c.causal;
    o.need_weights = false;
    if (gates.present()) o.head_gates = {gates.data + l * H, {H}, static_cast<size_t>(H)};
    const TensorView in{a_in, btd, M * Dz};
    bool traced = false;
    for (const char* a : kAttnHooks) {
      for (const auto& h : result->hooks) traced = traced || IsHook(h.first, l, a);
    }
    const float* attn_out;
    if (traced) {
      HEADSCOPE_RETURN_IF_ERROR(layer.attn->Trace(in, in, in, o, &attn_trace_, &context_));
      keep(l, "attn.hook_q", attn_trace_.q.data.data(), attn_trace_.q.shape);
      keep(l, "attn.hook_k", attn_trace_.k.data.data(), attn_trace_.k.shape);
      keep(l, "attn.hook_v", attn_trace_.v.data.data(), attn_trace_.v.shape);
      keep(l, "attn.hook_attn_scores", attn_trace_.scores.data.data(), attn_trace_.scores.shape);
      keep(l, "attn.hook_pattern", attn_trace_.weights.data.data(), attn_trace_.weights.shape);
      keep(l, "attn.hook_z", attn_trace_.head_outputs.data.data(),
           attn_trace_.head_outputs.shape);
      attn_out = attn_trace_.output.data.data();
    } else {
      HEADSCOPE_RETURN_IF_ERROR(layer.attn->Forward(in, in, in, o, &attn_result_, &context_));
      attn_out = attn_result_.output.data();
    }
    keep(l, "hook_attn_out", attn_out, btd);
    for (size_t i = 0; i < M * Dz; ++i) x_[i] += attn_out[i];
    if (post) {
      LayerNorm(x_.data(), M, Dz, store_.data(layer.ln1_w), store_.data(layer.ln1_b), c.ln_eps,
                x_.data());
    }
    if (c.d_mlp > 0) {
      keep(l, "hook_resid_mid", x_.data(), btd);
      const float* m_in = x_.data();
      if (pre) {
        LayerNorm(x_.data(), M, Dz, store_.data(layer.ln2_w), store_.data(layer.ln2_b), c.ln_eps,
                  normed_.data());
        m_in = normed_.data();
      }
      const size_t Mlp = static_cast<size_t>(c.d_mlp);
      const float* fc_in_b = layer.fc_in_b >= 0 ? store_.data(layer.fc_in_b) : nullptr;
      const float* fc_out_b = layer.fc_out_b >= 0 ? store_.data(layer.fc_out_b) : nullptr;
      MatMulPacked(m_in, Dz, packed_->fc_in[static_cast<size_t>(l)].panels.data(), fc_in_b, M,
                   Mlp, Dz, 1.0f, hidden_.data(), Mlp, threads);
      Activate(c.act, hidden_.data(), M * Mlp);
      MatMulPacked(hidden_.data(), Mlp, packed_->fc_out[static_cast<size_t>(l)].panels.data(),
                   fc_out_b, M, Dz, Mlp, 1.0f, mlp_out_.data(), Dz, threads);
      keep(l, "hook_mlp_out", mlp_out_.data(), btd);
      for (size_t i = 0; i < M * Dz; ++i) x_[i] += mlp_out_[i];
      if (post) {
        LayerNorm(x_.data(), M, Dz, store_.data(layer.ln2_w), store_.data(layer.ln2_b), c.ln_eps,
                  x_.data());
      }
    }
    keep(l, "hook_resid_post", x_.data(), btd);
  }
  if (pre) {
    LayerNorm(x_.data(), M, Dz, store_.data(ln_final_w_), store_.data(ln_final_b_), c.ln_eps,
              x_.data());
    keep(-1, "ln_final.hook_normalized", x_.data(), btd);
  }
  MatMulPacked(x_.data(), Dz, packed_->unembed.panels.data(),
               unembed_b_ >= 0 ? store_.data(unembed_b_) : nullptr,
               M, static_cast<size_t>(V), Dz, 1.0f, result->logits.data(), static_cast<size_t>(V),
               threads);
  keep(-1, "logits", result->logits.data(), result->logits_shape);
  if (hooks_failed) {
    return Status(StatusCode::kResourceExhausted, Arg::kHooks,
                  std::string(ArgPath(Arg::kHooks)) + ": out of memory keeping the hooks");
  }
  return Status::Ok();
}

Status Transformer::Loss(const float* logits, int64_t positions, int64_t vocab,
                         const int32_t* targets, double* loss) {
  double total = 0;
  int64_t counted = 0;
  for (int64_t p = 0; p < positions; ++p) {
    const int32_t t = targets[p];
    if (t == -100) continue;
    if (t < 0 || t >= vocab) {
      return ArgError(StatusCode::kInvalidArgument, Arg::kTargets,
                      "target " + Str(p) + " is " + Str(t) + ", expected -100 (ignored) or an "
                      "integer in [0, " + Str(vocab - 1) + "]");
    }
    const float* row = logits + p * vocab;
    double max = row[0];
    for (int64_t j = 1; j < vocab; ++j) max = row[j] > max ? row[j] : max;
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(row[j] - max);
    total += max + std::log(sum) - row[t];
    ++counted;
  }
  if (counted == 0) {
    return ArgError(StatusCode::kInvalidArgument, Arg::kTargets,
                    "every target is -100 (ignored): there is no loss to compute");
  }
  *loss = total / static_cast<double>(counted);
  return Status::Ok();
}

}  // namespace headscope
