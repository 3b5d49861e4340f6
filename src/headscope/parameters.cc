#include "headscope/parameters.h"

#include <cstring>

namespace headscope {

int ParameterStore::Add(std::string_view name, const Shape& shape) {
  Entry e;
  e.name = std::string(name);
  e.shape = shape;
  entries_.push_back(std::move(e));
  return static_cast<int>(entries_.size()) - 1;
}

int ParameterStore::AddAlias(std::string_view name, int target, size_t offset,
                             const Shape& shape) {
  Entry e;
  e.name = std::string(name);
  e.shape = shape;
  e.target = target;
  e.offset = offset;
  entries_.push_back(std::move(e));
  const int index = static_cast<int>(entries_.size()) - 1;
  entries_[target].aliases.push_back(index);
  return index;
}

int ParameterStore::Find(std::string_view name) const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

Status ParameterStore::Allocate(Entry* owned, const std::string& arg) {
  const size_t n = static_cast<size_t>(owned->shape.NumElements());
  if (owned->data.size() == n && (n == 0 || owned->data.data() != nullptr)) return Status::Ok();
  if (!owned->data.Resize(n)) {
    return Status(StatusCode::kResourceExhausted,
                  arg + ": out of memory copying " + std::to_string(n) + " floats");
  }
  // Parts not loaded yet read as 0, never as garbage (the entry is not loaded until all are).
  if (n > 0) std::memset(owned->data.data(), 0, n * sizeof(float));
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
  Entry& owned = e.target >= 0 ? entries_[e.target] : e;
  HEADSCOPE_RETURN_IF_ERROR(Allocate(&owned, arg));
  if (n > 0) std::memcpy(owned.data.data() + e.offset, value.data, n * sizeof(float));
  e.set = true;
  if (e.target < 0) {
    for (int a : e.aliases) entries_[a].set = true;  // the whole tensor covers every part
  }
  owned.version = ++version_;
  return Status::Ok();
}

Status ParameterStore::CopyLoadedFrom(const ParameterStore& other) {
  for (size_t i = 0; i < entries_.size() && i < other.entries_.size(); ++i) {
    const Entry& from = other.entries_[i];
    Entry& to = entries_[i];
    if (from.target >= 0 || !from.data.data()) continue;  // aliases live in their targets
    HEADSCOPE_RETURN_IF_ERROR(Allocate(&to, "state_dict['" + to.name + "']"));
    if (from.data.size() > 0) {
      std::memcpy(to.data.data(), from.data.data(), from.data.size() * sizeof(float));
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
  const Entry& e = entries_[i];
  const Entry& owned = e.target >= 0 ? entries_[e.target] : e;
  return owned.data.data() != nullptr ? owned.data.data() + e.offset : nullptr;
}

float* ParameterStore::MutableData(int i) {
  if (!loaded(i)) return nullptr;
  Entry& e = entries_[i];
  Entry& owned = e.target >= 0 ? entries_[e.target] : e;
  owned.version = ++version_;
  return owned.data.data() + e.offset;
}

uint64_t ParameterStore::version(int i) const {
  const Entry& e = entries_[i];
  return e.target >= 0 ? entries_[e.target].version : e.version;
}

}  // namespace headscope
