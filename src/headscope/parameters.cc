#include "headscope/parameters.h"

#include <cstring>
#include <limits>

namespace headscope {

int ParameterStore::Add(std::string_view name, const Shape& shape) {
  Entry e;
  e.name = std::string(name);
  e.shape = shape;
  e.start = floats_;
  // Each owned entry on a 64-byte boundary (16 floats), as its own buffer used to be.
  floats_ += (static_cast<uint64_t>(shape.NumElements()) + 15) / 16 * 16;
  entries_.push_back(std::move(e));
  by_name_.emplace(std::string(name), static_cast<int>(entries_.size()) - 1);
  return static_cast<int>(entries_.size()) - 1;
}

int ParameterStore::AddAlias(std::string_view name, int target, size_t offset,
                             const Shape& shape) {
  Entry e;
  e.name = std::string(name);
  e.shape = shape;
  e.target = target;
  e.start = entries_[target].start + offset;
  entries_.push_back(std::move(e));
  const int index = static_cast<int>(entries_.size()) - 1;
  entries_[target].aliases.push_back(index);
  by_name_.emplace(std::string(name), index);
  return index;
}

int ParameterStore::Find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it != by_name_.end() ? it->second : -1;
}

Status ParameterStore::Allocate(const std::string& arg) {
  if (data_.size() == floats_ && (floats_ == 0 || data_.data() != nullptr)) return Status::Ok();
  if (floats_ > std::numeric_limits<size_t>::max() / sizeof(float) ||
      !data_.Resize(static_cast<size_t>(floats_))) {
    return Status(StatusCode::kResourceExhausted,
                  arg + ": out of memory allocating the " + std::to_string(floats_) +
                      " floats of the weights");
  }
  // Parts not loaded yet read as 0, never as garbage (an entry is not loaded until all are).
  if (floats_ > 0) std::memset(data_.data(), 0, static_cast<size_t>(floats_) * sizeof(float));
  return Status::Ok();
}

Status ParameterStore::Set(int i, const TensorView& value, const std::string& arg) {
  Entry& e = entries_[i];
  if (value.shape != e.shape) {
    return ShapeMismatch(arg + ": expected shape " + e.shape.ToString() + ", got " +
                         value.shape.ToString());
  }
  const size_t n = static_cast<size_t>(e.shape.NumElements());
  if (n > 0 && value.data == nullptr) {
    return ShapeMismatch(arg + ": data is null, but shape " + value.shape.ToString() + " needs " +
                         std::to_string(n) + " values");
  }
  if (value.size != n) {
    return ShapeMismatch(arg + ": shape " + value.shape.ToString() + " needs " +
                         std::to_string(n) + " values, got " + std::to_string(value.size));
  }
  HEADSCOPE_RETURN_IF_ERROR(Allocate(arg));
  if (n > 0) std::memcpy(data_.data() + offset(i), value.data, n * sizeof(float));
  e.set = true;
  if (e.target < 0) {
    for (int a : e.aliases) entries_[a].set = true;  // the whole tensor covers every part
  }
  Entry& owned = e.target >= 0 ? entries_[e.target] : e;
  owned.version = ++version_;
  return Status::Ok();
}

bool ParameterStore::touched(const Entry& owned) const {
  if (owned.set) return true;
  for (int a : owned.aliases) {
    if (entries_[a].set) return true;
  }
  return false;
}

Status ParameterStore::CopyLoadedFrom(const ParameterStore& other) {
  for (size_t i = 0; i < entries_.size() && i < other.entries_.size(); ++i) {
    const Entry& from = other.entries_[i];
    if (from.target >= 0 || !other.touched(from)) continue;  // aliases live in their targets
    Entry& to = entries_[i];
    HEADSCOPE_RETURN_IF_ERROR(Allocate("state_dict['" + to.name + "']"));
    const size_t n = static_cast<size_t>(to.shape.NumElements());
    if (n > 0) {
      std::memcpy(data_.data() + to.start, other.data_.data() + from.start, n * sizeof(float));
    }
    to.set = from.set;
    for (size_t k = 0; k < to.aliases.size(); ++k) {
      entries_[to.aliases[k]].set = other.entries_[from.aliases[k]].set;
    }
    to.version = ++version_;
  }
  return Status::Ok();
}

bool ParameterStore::loaded(int i) const {
  const Entry& e = entries_[i];
  if (e.set) return true;
  if (e.target >= 0 || e.aliases.empty()) return false;
  for (int a : e.aliases) {
    if (!entries_[a].set) return false;
  }
  return true;
}

const float* ParameterStore::data(int i) const {
  return data_.data() != nullptr ? data_.data() + offset(i) : nullptr;
}

float* ParameterStore::MutableData(int i) {
  if (!loaded(i)) return nullptr;
  Entry& e = entries_[i];
  Entry& owned = e.target >= 0 ? entries_[e.target] : e;
  owned.version = ++version_;
  return data_.data() + offset(i);
}

uint64_t ParameterStore::version(int i) const {
  const Entry& e = entries_[i];
  return e.target >= 0 ? entries_[e.target].version : e.version;
}

}  // namespace headscope
