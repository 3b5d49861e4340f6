#include "headscope/tensor.h"

#include <cstdlib>
#include <limits>
#include <new>
#include <utility>

namespace headscope {

Shape::Shape(std::initializer_list<int64_t> d) {
  for (int64_t x : d) {
    if (rank == kMaxRank) break;
    dims[rank++] = x;
  }
}

int64_t Shape::NumElements() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] < 0) return -1;
    if (dims[i] != 0 && n > std::numeric_limits<int64_t>::max() / dims[i]) return -1;
    n *= dims[i];
  }
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] != o.dims[i]) return false;
  }
  return true;
}

std::string Shape::ToString() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

AlignedBuffer::~AlignedBuffer() { Release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      capacity_(std::exchange(o.capacity_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
  }
  return *this;
}

bool AlignedBuffer::Resize(size_t n) {
  if (n <= capacity_) {
    size_ = n;
    return true;
  }
  constexpr size_t kAlign = 64;
  if (n > (std::numeric_limits<size_t>::max() - kAlign) / sizeof(float)) return false;
  const size_t bytes = (n * sizeof(float) + kAlign - 1) / kAlign * kAlign;
  // aligned_alloc returns null on failure (also in WebAssembly, built with ABORTING_MALLOC=0).
  void* p = std::aligned_alloc(kAlign, bytes);
  if (p == nullptr) return false;
  Release();
  data_ = static_cast<float*>(p);
  size_ = n;
  capacity_ = bytes / sizeof(float);
  return true;
}

void AlignedBuffer::Release() {
  std::free(data_);
  data_ = nullptr;
  size_ = 0;
  capacity_ = 0;
}

}  // namespace headscope
