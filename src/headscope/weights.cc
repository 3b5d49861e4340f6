#include "headscope/weights.h"

#include <cstring>
#include <string>

namespace headscope {
namespace {

constexpr const char* kNames[] = {
    "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
    "out_proj.weight", "out_proj.bias", "bias_k", "bias_v", "sinks",
};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<int>(Param::kCount));

std::string KeyList(const std::vector<ParamSpec>& specs) {
  std::string s;
  for (const ParamSpec& p : specs) {
    if (!s.empty()) s += ", ";
    s += p.name;
  }
  return s;
}

}  // namespace

const char* ParamName(Param p) { return kNames[static_cast<int>(p)]; }

// With grouped-query attention (num_kv_heads = G < num_heads) the K and V rows are G * head_dim
// (Ekv = kv_dim()) instead of E, wherever torch's layout has them: in_proj_weight
// (E + 2 Ekv, E) = [Wq; Wk; Wv], in_proj_bias (E + 2 Ekv), k/v_proj_weight (Ekv, kdim / vdim),
// bias_k / bias_v (1, 1, Ekv). With G = num_heads every shape is torch's (Ekv = E).
std::vector<ParamSpec> ExpectedParams(const MhaConfig& c) {
  const int64_t E = c.embed_dim, Ekv = c.kv_dim();
  std::vector<ParamSpec> specs;
  auto add = [&](Param p, Shape s) { specs.push_back({p, ParamName(p), s}); };
  // Same order as torch's module.state_dict().
  if (c.same_qkv_dim()) {
    add(Param::kInProjWeight, {E + 2 * Ekv, E});
  } else {
    add(Param::kQProjWeight, {E, E});
    add(Param::kKProjWeight, {Ekv, c.key_dim()});
    add(Param::kVProjWeight, {Ekv, c.value_dim()});
  }
  if (c.bias) add(Param::kInProjBias, {E + 2 * Ekv});
  if (c.add_bias_kv) {
    add(Param::kBiasK, {1, 1, Ekv});
    add(Param::kBiasV, {1, 1, Ekv});
  }
  // A parameter registered on the module after its construction (the reference module's
  // `attn.sinks = nn.Parameter(...)`) comes after torch's own and before the submodule out_proj.
  if (c.attn_sinks) add(Param::kSinks, {c.num_heads});
  add(Param::kOutProjWeight, {E, E});
  if (c.bias) add(Param::kOutProjBias, {E});
  return specs;
}

std::vector<ParamSpec> AliasParams(const MhaConfig& c) {
  if (!c.same_qkv_dim()) return {};
  const int64_t E = c.embed_dim, Ekv = c.kv_dim();
  return {{Param::kQProjWeight, ParamName(Param::kQProjWeight), {E, E}},
          {Param::kKProjWeight, ParamName(Param::kKProjWeight), {Ekv, E}},
          {Param::kVProjWeight, ParamName(Param::kVProjWeight), {Ekv, E}}};
}

MhaWeights::MhaWeights(const MhaConfig& config) : config_(config), store_(&own_) { Declare(); }

MhaWeights::MhaWeights(const MhaConfig& config, ParameterStore* shared, std::string_view prefix)
    : config_(config), store_(shared), prefix_(prefix) {
  Declare();
}

void MhaWeights::Declare() {
  for (int& i : index_) i = -1;
  // An invalid config (which Create refuses; the reference and tests may still hold one) has no
  // entries: its sizes need not even be representable.
  if (!ValidateConfig(config_).ok()) return;
  for (const ParamSpec& p : ExpectedParams(config_)) {
    index_[static_cast<int>(p.param)] = store_->Add(prefix_ + p.name, p.shape);
  }
  // The three row blocks of in_proj_weight, in the order [Wq; Wk; Wv].
  const int packed = index_[static_cast<int>(Param::kInProjWeight)];
  size_t offset = 0;
  for (const ParamSpec& p : AliasParams(config_)) {
    index_[static_cast<int>(p.param)] = store_->AddAlias(prefix_ + p.name, packed, offset, p.shape);
    offset += static_cast<size_t>(p.shape.NumElements());
  }
}

int MhaWeights::Find(std::string_view name) const {
  return prefix_.empty() ? store_->Find(name) : store_->Find(prefix_ + std::string(name));
}

Status MhaWeights::Set(std::string_view name, const TensorView& value) {
  const std::string arg = std::string(ArgName(Arg::kStateDict)) + "['" + QuoteInput(name) + "']";
  const int i = Find(name);
  if (i < 0) {
    const std::vector<ParamSpec> aliases = AliasParams(config_);
    return Status(StatusCode::kUnknownParameter, Arg::kStateDict,
                  arg + ": unknown key for this config (expected keys: " +
                      KeyList(ExpectedParams(config_)) +
                      (aliases.empty() ? "" : "; or, for in_proj_weight, " + KeyList(aliases)) +
                      ")");
  }
  const Status s = store_->Set(i, value, arg);
  return s.ok() ? s : Status(s.code(), Arg::kStateDict, s.message());
}

// Called by every forward: no allocation, a pass over the entries of the config.
bool MhaWeights::complete() const {
  for (const int i : index_) {
    if (i >= 0 && !store_->is_alias(i) && !store_->loaded(i)) return false;
  }
  return true;
}

Status MhaWeights::CheckComplete() const {
  if (complete()) return Status::Ok();
  std::string missing;
  for (const ParamSpec& s : ExpectedParams(config_)) {
    if (Has(s.param)) continue;
    if (!missing.empty()) missing += ", ";
    missing += std::string(s.name) + " " + s.shape.ToString();
  }
  return Status(StatusCode::kMissingParameter, Arg::kStateDict,
                std::string(ArgName(Arg::kStateDict)) + ": missing " + missing);
}

// The projections by their split names under every config: with in_proj_weight those are
// aliases of its row blocks (AliasParams).
const float* MhaWeights::q_weight() const { return Get(Param::kQProjWeight); }
const float* MhaWeights::k_weight() const { return Get(Param::kKProjWeight); }
const float* MhaWeights::v_weight() const { return Get(Param::kVProjWeight); }
const float* MhaWeights::q_bias() const {
  return config_.bias ? Get(Param::kInProjBias) : nullptr;
}
const float* MhaWeights::k_bias() const {
  return config_.bias ? Get(Param::kInProjBias) + config_.embed_dim : nullptr;
}
const float* MhaWeights::v_bias() const {
  return config_.bias ? Get(Param::kInProjBias) + config_.embed_dim + config_.kv_dim() : nullptr;
}

}  // namespace headscope
