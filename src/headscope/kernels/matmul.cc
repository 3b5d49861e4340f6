// Target dispatch for the packed matmul, and its scalar helpers (packing, the test reference).
#include "headscope/kernels/matmul.h"

#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "headscope/kernels/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "headscope/kernels/dispatch.h"
#include "headscope/kernels/matmul-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace headscope {
namespace HWY_NAMESPACE {

void MatMulPackedTarget(const float* a, size_t lda, const float* packed_b, const float* bias,
                        size_t m, size_t n, size_t k, float alpha, float* c, size_t ldc) {
  MatMulPackedImpl(a, lda, packed_b, bias, m, n, k, alpha, c, ldc);
}

}  // namespace HWY_NAMESPACE
}  // namespace headscope
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace headscope {

HEADSCOPE_EXPORT(MatMulPackedTarget);

void MatMulPacked(const float* a, size_t lda, const float* packed_b, const float* bias, size_t m,
                  size_t n, size_t k, float alpha, float* c, size_t ldc) {
  HEADSCOPE_DISPATCH(MatMulPackedTarget)(a, lda, packed_b, bias, m, n, k, alpha, c, ldc);
}

void PackB(const float* b, size_t n, size_t k, size_t row_stride, size_t col_stride,
           float* packed) {
  for (size_t j0 = 0; j0 < n; j0 += kPanel) {
    float* panel = packed + (j0 / kPanel) * kPanel * k;
    const size_t cols = (n - j0 < kPanel) ? n - j0 : kPanel;
    for (size_t p = 0; p < k; ++p) {
      float* dst = panel + p * kPanel;
      for (size_t j = 0; j < cols; ++j) dst[j] = b[(j0 + j) * row_stride + p * col_stride];
      // Zero padding keeps the micro-kernel's full-width loads finite (never NaN garbage).
      for (size_t j = cols; j < kPanel; ++j) dst[j] = 0.0f;
    }
  }
}

void MatMulScalar(const float* a, size_t lda, const float* b, size_t row_stride,
                  size_t col_stride, const float* bias, size_t m, size_t n, size_t k, float alpha,
                  float* c, size_t ldc) {
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (size_t p = 0; p < k; ++p) sum += a[i * lda + p] * b[j * row_stride + p * col_stride];
      c[i * ldc + j] = sum * alpha + (bias != nullptr ? bias[j] : 0.0f);
    }
  }
}

}  // namespace headscope
#endif  // HWY_ONCE
