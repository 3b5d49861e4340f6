// Non-owning tensor views (what callers pass in) and AlignedBuffer (what headscope owns).
#ifndef HEADSCOPE_TENSOR_H_
#define HEADSCOPE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace headscope {

// A shape of rank 0..4; torch's MultiheadAttention never needs more.
struct Shape {
  static constexpr int kMaxRank = 4;
  int rank = 0;
  int64_t dims[kMaxRank] = {0, 0, 0, 0};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[i]; }
  // Product of the dims, or -1 if it overflows int64 or a dim is negative.
  int64_t NumElements() const;
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string ToString() const;  // "[3, 4]"
};

// Float tensor, row-major and contiguous. `size` is the number of floats that `data` holds, so a
// view whose data does not match its shape is rejected instead of being read out of bounds.
struct TensorView {
  const float* data = nullptr;
  Shape shape;
  size_t size = 0;

  TensorView() = default;
  TensorView(const float* d, Shape s, size_t n) : data(d), shape(s), size(n) {}
  bool present() const { return data != nullptr || shape.rank > 0; }
};

enum class MaskType { kNone, kBool, kFloat };

// A mask: booleans (one byte each, nonzero = true = blocked) or floats (added to the scores).
struct MaskView {
  MaskType type = MaskType::kNone;
  const void* data = nullptr;
  Shape shape;
  size_t size = 0;

  static MaskView Bool(const uint8_t* d, Shape s, size_t n) { return {MaskType::kBool, d, s, n}; }
  static MaskView Float(const float* d, Shape s, size_t n) { return {MaskType::kFloat, d, s, n}; }
  bool present() const { return type != MaskType::kNone; }
};

// Owned float storage, 64-byte aligned. Growth never throws: Resize reports failure so callers
// can return kResourceExhausted (in WebAssembly a failed allocation must not abort the module).
// Capacity is kept when shrinking, so a buffer reused across calls of one shape allocates once.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;

  // Contents are not preserved when the buffer grows.
  [[nodiscard]] bool Resize(size_t n);
  void Release();
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  float& operator[](size_t i) { return data_[i]; }
  float operator[](size_t i) const { return data_[i]; }

 private:
  float* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace headscope

#endif  // HEADSCOPE_TENSOR_H_
