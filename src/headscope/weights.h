// MhaWeights: the state_dict of one torch.nn.MultiheadAttention, addressed by PyTorch's key names
// and checked against the config's shapes as each entry is loaded, held in a ParameterStore.
//
// With kdim = vdim = embed_dim, torch stores one packed in_proj_weight (3E, E); the store also
// answers to q_proj_weight / k_proj_weight / v_proj_weight there, as aliases of its three row
// blocks (with grouped-query attention, (E + 2 Ekv, E) in blocks of E, Ekv and Ekv rows), so a state_dict with split projections (as many exported models have) loads too, and
// the computation reads the three projections by the same names under every config.
//
// The store is the module's own (a standalone MultiheadAttention), or a model's: a Transformer's
// layers declare their entries in the model's one store, as "blocks.{l}.attn." + torch's key.
#ifndef HEADSCOPE_WEIGHTS_H_
#define HEADSCOPE_WEIGHTS_H_

#include <string>
#include <string_view>
#include <vector>

#include "headscope/config.h"
#include "headscope/parameters.h"
#include "headscope/status.h"
#include "headscope/tensor.h"

namespace headscope {

// Shapes with Ekv = num_kv_heads * head_dim (MhaConfig::kv_dim: E unless grouped-query).
enum class Param {
  kInProjWeight,   // "in_proj_weight"  (E + 2 Ekv, E) = [Wq; Wk; Wv]   when kdim = vdim = E
  kQProjWeight,    // "q_proj_weight"   (E, E)                    otherwise
  kKProjWeight,    // "k_proj_weight"   (Ekv, kdim)
  kVProjWeight,    // "v_proj_weight"   (Ekv, vdim)
  kInProjBias,     // "in_proj_bias"    (E + 2 Ekv)               when bias
  kOutProjWeight,  // "out_proj.weight" (E, E)
  kOutProjBias,    // "out_proj.bias"   (E)                       when bias
  kBiasK,          // "bias_k"          (1, 1, Ekv)               when add_bias_kv
  kBiasV,          // "bias_v"          (1, 1, Ekv)
  kSinks,          // "sinks"           (H)                       when attn_sinks (after torch's
                   //                                              own, before out_proj's)
  kCount,
};

const char* ParamName(Param p);

struct ParamSpec {
  Param param;
  const char* name;
  Shape shape;
};

// The keys module.state_dict() yields for `config`, in PyTorch's order, with their shapes.
std::vector<ParamSpec> ExpectedParams(const MhaConfig& config);

// Keys a config also accepts beyond ExpectedParams: q/k/v_proj_weight as parts of in_proj_weight
// when kdim = vdim = embed_dim; none otherwise.
std::vector<ParamSpec> AliasParams(const MhaConfig& config);

class MhaWeights {
 public:
  // Its entries in a store of its own.
  explicit MhaWeights(const MhaConfig& config);
  // Its entries declared in `shared` (which must outlive it), each named `prefix` + torch's key.
  MhaWeights(const MhaConfig& config, ParameterStore* shared, std::string_view prefix);
  MhaWeights(const MhaWeights&) = delete;
  MhaWeights& operator=(const MhaWeights&) = delete;

  // Copies one state_dict entry (or an alias of one). Rejects unknown keys, keys this config does
  // not use and wrong shapes. NaN and infinity inside weights are accepted: they propagate as in
  // PyTorch.
  Status Set(std::string_view name, const TensorView& value);
  // Copies every entry `other` (same config) has loaded (standalone: both stores their own).
  Status CopyLoadedFrom(const MhaWeights& other) { return store_->CopyLoadedFrom(*other.store_); }
  bool Has(Param p) const {
    const int i = index_[static_cast<int>(p)];
    return i >= 0 && store_->loaded(i);
  }
  // kMissingParameter naming every key still missing. Cheap once complete (called per forward).
  Status CheckComplete() const;
  bool complete() const;

  // Views the computation uses, independent of how the weights arrived: the three input
  // projections as separate (E or Ekv, in_dim) matrices and their (E or Ekv) biases (null without
  // bias).
  const float* q_weight() const;
  const float* k_weight() const;
  const float* v_weight() const;
  const float* q_bias() const;
  const float* k_bias() const;
  const float* v_bias() const;
  const float* out_weight() const { return Get(Param::kOutProjWeight); }
  const float* out_bias() const { return config_.bias ? Get(Param::kOutProjBias) : nullptr; }
  const float* bias_k() const { return config_.add_bias_kv ? Get(Param::kBiasK) : nullptr; }
  const float* bias_v() const { return config_.add_bias_kv ? Get(Param::kBiasV) : nullptr; }
  const float* sinks() const { return config_.attn_sinks ? Get(Param::kSinks) : nullptr; }
  const float* Get(Param p) const {
    const int i = index_[static_cast<int>(p)];
    return i >= 0 ? store_->data(i) : nullptr;
  }
  // The store entry of parameter p (-1 if the config has none).
  int entry(Param p) const { return index_[static_cast<int>(p)]; }
  const MhaConfig& config() const { return config_; }
  // The floats of entry `name` (a key or an alias, as Set takes them) for writing in place (an
  // optimizer step): ParameterStore::MutableData, which bumps the versions so the packed panels
  // are rebuilt before the next pass reads them. Null for an unknown or unloaded entry.
  float* MutableData(std::string_view name) {
    const int i = Find(name);
    return i >= 0 ? store_->MutableData(i) : nullptr;
  }

  // The store's version, and the version of the tensor behind parameter p (packed caches are
  // stamped with it; an alias reports its target's).
  uint64_t version() const { return store_->version(); }
  uint64_t version(Param p) const {
    const int i = index_[static_cast<int>(p)];
    return i >= 0 ? store_->version(i) : 0;
  }
  const ParameterStore& store() const { return *store_; }

 private:
  // Declares the config's entries (and aliases) in *store_.
  void Declare();
  // The entry of torch's key `name` (with the prefix), -1 if none.
  int Find(std::string_view name) const;

  MhaConfig config_;
  ParameterStore own_;     // the standalone module's store (empty when shared)
  ParameterStore* store_;  // &own_, or the model's
  std::string prefix_;     // "" standalone; "blocks.{l}.attn." in a model's store
  int index_[static_cast<int>(Param::kCount)];  // store entry per Param; -1 if not in the config
};

}  // namespace headscope

#endif  // HEADSCOPE_WEIGHTS_H_
