// ParameterStore: a model's named float tensors (its weights), each with a fixed shape, addressed
// by name. Optimizer state is not here but in the Optimizer (optim.h says why); an optimizer step
// writes the weights in place through MutableData.
//
// An entry is either a tensor the store owns, or an alias: a name for a contiguous part of
// another entry (torch's packed in_proj_weight (3E, E) is also reachable as q_proj_weight,
// k_proj_weight and v_proj_weight, its three (E, E) row blocks). Loading an alias writes into its
// target's storage, so a state_dict in either spelling ends in one buffer without a copy per
// spelling, and an entry counts as loaded once it was set whole or every alias of it was set.
//
// Every change bumps the store's version and the changed entry's: derived data (the packed
// matmul panels of MultiheadAttention) is stamped with the version it was built from and rebuilt
// when it differs, so no path can read panels older than the weights.
//
// The entries are laid out in one buffer: each owned entry at a fixed offset (64-byte aligned),
// each alias inside its target. The buffer is allocated whole (zeros) by the first write, so a
// model declared but never loaded holds no weights. A buffer of floats() floats indexed by the
// same offsets is a parallel store of the same layout: a Transformer's gradients are one, entry
// i's gradient at offset(i), found by index, never by name.
#ifndef HEADSCOPE_PARAMETERS_H_
#define HEADSCOPE_PARAMETERS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "headscope/status.h"
#include "headscope/tensor.h"

namespace headscope {

class ParameterStore {
 public:
  ParameterStore() = default;
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;
  ParameterStore(ParameterStore&&) = default;
  ParameterStore& operator=(ParameterStore&&) = default;

  // Declares an owned entry (absent until set) at the layout's next 64-byte boundary; returns its
  // index. Names are unique. Entries are declared before anything is set.
  int Add(std::string_view name, const Shape& shape);
  // Declares `name` as the `shape`-sized run of floats of entry `target` (an owned entry)
  // starting at float `offset`.
  int AddAlias(std::string_view name, int target, size_t offset, const Shape& shape);

  // The entry's index, or -1 for a name the store does not have.
  int Find(std::string_view name) const;
  size_t size() const { return entries_.size(); }
  const std::string& name(int i) const { return entries_[i].name; }
  const Shape& shape(int i) const { return entries_[i].shape; }
  bool is_alias(int i) const { return entries_[i].target >= 0; }
  // Where entry i's floats start in the layout (an alias: within its target's), and the
  // layout's size in floats (padding included).
  size_t offset(int i) const { return static_cast<size_t>(entries_[i].start); }
  uint64_t floats() const { return floats_; }

  // Copies `value` into entry i. `arg` names it in errors ("state_dict['in_proj_weight']"):
  // shape mismatch, data that does not hold the shape, or the store's first allocation that
  // failed (nothing changes then).
  Status Set(int i, const TensorView& value, const std::string& arg);
  // Copies every loaded entry of `other` (a store declared the same way) into this one.
  Status CopyLoadedFrom(const ParameterStore& other);

  // Loaded: set whole, or (an owned entry with aliases) every alias set.
  bool loaded(int i) const;
  // The entry's floats (an alias: its part of the target's), null while nothing of the store is
  // loaded (entries not loaded yet read as 0).
  const float* data(int i) const;
  // The same floats for writing in place (an optimizer step): bumps the store's version and the
  // entry's (an alias: its target's) before returning, so data derived from the old values is
  // rebuilt. The caller writes before anything reads derived data again. Null, changing
  // nothing, while the entry is not loaded.
  float* MutableData(int i);

  // Bumped by every Set; an entry's version changes when it or a part of it (or, for an alias,
  // its target) changes.
  uint64_t version() const { return version_; }
  uint64_t version(int i) const;

 private:
  struct Entry {
    std::string name;
    Shape shape;
    int target = -1;      // alias: the owned entry it views; -1 for an owned entry
    uint64_t start = 0;   // first float in the layout (an alias: inside its target's)
    bool set = false;     // set whole (an owned entry), or this alias set
    uint64_t version = 0; // owned entries only
    std::vector<int> aliases;  // owned entries: the aliases that view it
  };
  // The whole layout, zeros, at the first write; `arg` names the write in the error.
  Status Allocate(const std::string& arg);
  // Set whole or in part: what a copy of the store carries.
  bool touched(const Entry& owned) const;

  std::vector<Entry> entries_;
  std::map<std::string, int, std::less<>> by_name_;  // Find without a string copy
  uint64_t floats_ = 0;  // the layout's size
  AlignedBuffer data_;   // every entry's floats at its start; empty until the first write
  uint64_t version_ = 0;
};

}  // namespace headscope

#endif  // HEADSCOPE_PARAMETERS_H_
