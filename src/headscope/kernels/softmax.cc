// Target dispatch for the row softmax, and its scalar reference.
#include "headscope/kernels/softmax.h"

#include <cmath>
#include <cstdint>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "headscope/kernels/softmax.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "headscope/kernels/dispatch.h"
#include "headscope/kernels/softmax-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace headscope {
namespace HWY_NAMESPACE {

bool SoftmaxTarget(float* row, size_t n) { return SoftmaxImpl(row, n); }
void SoftmaxRowsTarget(float* tile, size_t rows, size_t n, uint8_t* state) {
  SoftmaxRowsImpl(tile, rows, n, state);
}
void ExpNonPositiveTarget(const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(ExpNonPositive(d, hn::LoadU(d, x + i)), d, y + i);
  if (i < n) StoreTail(ExpNonPositive(d, LoadTail(d, x + i, n - i, 0.0f)), d, y + i, n - i);
}
void AddInPlaceTarget(float* row, const float* add, size_t n) { AddInPlaceImpl(row, add, n); }

}  // namespace HWY_NAMESPACE
}  // namespace headscope
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace headscope {

HEADSCOPE_EXPORT(SoftmaxTarget);
HEADSCOPE_EXPORT(AddInPlaceTarget);
HEADSCOPE_EXPORT(SoftmaxRowsTarget);
HEADSCOPE_EXPORT(ExpNonPositiveTarget);

bool Softmax(float* row, size_t n) { return HEADSCOPE_DISPATCH(SoftmaxTarget)(row, n); }

void SoftmaxRows(float* tile, size_t rows, size_t n, uint8_t* state) {
  HEADSCOPE_DISPATCH(SoftmaxRowsTarget)(tile, rows, n, state);
}

void ExpNonPositive(const float* x, float* y, size_t n) {
  HEADSCOPE_DISPATCH(ExpNonPositiveTarget)(x, y, n);
}

void AddInPlace(float* row, const float* add, size_t n) {
  HEADSCOPE_DISPATCH(AddInPlaceTarget)(row, add, n);
}

bool SoftmaxScalar(float* row, size_t n) {
  double max = -std::numeric_limits<double>::infinity();
  bool nan = false;
  for (size_t i = 0; i < n; ++i) {
    nan |= std::isnan(row[i]);
    if (row[i] > max) max = row[i];
  }
  if (nan || max == std::numeric_limits<double>::infinity()) {
    for (size_t i = 0; i < n; ++i) row[i] = std::numeric_limits<float>::quiet_NaN();
    return false;
  }
  if (n == 0 || max == -std::numeric_limits<double>::infinity()) {
    for (size_t i = 0; i < n; ++i) row[i] = 0.0f;
    return true;
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - max);
  for (size_t i = 0; i < n; ++i) {
    row[i] = static_cast<float>(std::exp(static_cast<double>(row[i]) - max) / sum);
  }
  return false;
}

}  // namespace headscope
#endif  // HWY_ONCE
