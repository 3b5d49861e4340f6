#include "headscope/weights.h"

#include <cstring>
#include <string>

namespace headscope {
namespace {

constexpr const char* kNames[] = {
    "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
    "out_proj.weight", "out_proj.bias", "bias_k", "bias_v",
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

std::vector<ParamSpec> ExpectedParams(const MhaConfig& c) {
  const int64_t E = c.embed_dim;
  std::vector<ParamSpec> specs;
  auto add = [&](Param p, Shape s) { specs.push_back({p, ParamName(p), s}); };
  // Same order as torch's module.state_dict().
  if (c.same_qkv_dim()) {
    add(Param::kInProjWeight, {3 * E, E});
  } else {
    add(Param::kQProjWeight, {E, E});
    add(Param::kKProjWeight, {E, c.key_dim()});
    add(Param::kVProjWeight, {E, c.value_dim()});
  }
  if (c.bias) add(Param::kInProjBias, {3 * E});
  if (c.add_bias_kv) {
    add(Param::kBiasK, {1, 1, E});
    add(Param::kBiasV, {1, 1, E});
  }
  add(Param::kOutProjWeight, {E, E});
  if (c.bias) add(Param::kOutProjBias, {E});
  return specs;
}

Status MhaWeights::Set(std::string_view name, const TensorView& value, Param* which) {
  const std::vector<ParamSpec> specs = ExpectedParams(config_);
  const ParamSpec* spec = nullptr;
  for (const ParamSpec& s : specs) {
    if (name == s.name) spec = &s;
  }
  if (spec == nullptr) {
    return Status(StatusCode::kUnknownParameter,
                  "state_dict: unexpected key '" + std::string(name) +
                      "' for this config (expected keys: " + KeyList(specs) + ")");
  }
  const std::string arg = "state_dict['" + std::string(name) + "']";
  if (value.shape != spec->shape) {
    return ShapeMismatch(arg + ": expected shape " + spec->shape.ToString() + ", got " +
                         value.shape.ToString());
  }
  const size_t n = static_cast<size_t>(spec->shape.NumElements());
  if (n > 0 && value.data == nullptr) {
    return ShapeMismatch(arg + ": data is null, but shape " + value.shape.ToString() +
                         " needs " + std::to_string(n) + " values");
  }
  if (value.size != n) {
    return ShapeMismatch(arg + ": shape " + value.shape.ToString() + " needs " +
                         std::to_string(n) + " values, got " + std::to_string(value.size));
  }
  AlignedBuffer& dst = values_[static_cast<int>(spec->param)];
  if (!dst.Resize(n)) {
    return Status(StatusCode::kResourceExhausted,
                  arg + ": out of memory copying " + std::to_string(n) + " floats");
  }
  if (n > 0) std::memcpy(dst.data(), value.data, n * sizeof(float));
  present_[static_cast<int>(spec->param)] = true;
  complete_ = true;
  for (const ParamSpec& s : specs) complete_ = complete_ && Has(s.param);
  if (which != nullptr) *which = spec->param;
  return Status::Ok();
}

Status MhaWeights::CheckComplete() const {
  if (complete_) return Status::Ok();
  std::string missing;
  for (const ParamSpec& s : ExpectedParams(config_)) {
    if (Has(s.param)) continue;
    if (!missing.empty()) missing += ", ";
    missing += std::string(s.name) + " " + s.shape.ToString();
  }
  if (missing.empty()) return Status::Ok();
  return Status(StatusCode::kMissingParameter, "state_dict: missing " + missing);
}

const float* MhaWeights::q_weight() const {
  return config_.same_qkv_dim() ? Get(Param::kInProjWeight) : Get(Param::kQProjWeight);
}
const float* MhaWeights::k_weight() const {
  const size_t E = static_cast<size_t>(config_.embed_dim);
  return config_.same_qkv_dim() ? Get(Param::kInProjWeight) + E * E : Get(Param::kKProjWeight);
}
const float* MhaWeights::v_weight() const {
  const size_t E = static_cast<size_t>(config_.embed_dim);
  return config_.same_qkv_dim() ? Get(Param::kInProjWeight) + 2 * E * E
                                : Get(Param::kVProjWeight);
}
const float* MhaWeights::q_bias() const {
  return config_.bias ? Get(Param::kInProjBias) : nullptr;
}
const float* MhaWeights::k_bias() const {
  return config_.bias ? Get(Param::kInProjBias) + config_.embed_dim : nullptr;
}
const float* MhaWeights::v_bias() const {
  return config_.bias ? Get(Param::kInProjBias) + 2 * config_.embed_dim : nullptr;
}

}  // namespace headscope
