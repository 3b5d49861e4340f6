// Target dispatch for the packed matmul, and its scalar helpers (packing, the test reference).
#include "headscope/kernels/matmul.h"

#include <cstring>

#include "headscope/parallel.h"
#include "headscope/tensor.h"

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
  if constexpr (kWasmOutline) {
    // The copy's scratch through AlignedBuffer, which reports a failed allocation instead of
    // throwing (operator new would abort the module, which is built without exceptions); without
    // it the unpacked path computes the same bits.
    AlignedBuffer scratch;
    if (WorthPackingA(m, n, k) && scratch.Resize(PackAFloats(k))) {
      MatMulPackedPackA(a, lda, packed_b, bias, m, n, k, alpha, c, ldc, scratch.data());
      return;
    }
  }
  MatMulPackedImpl(a, lda, packed_b, bias, m, n, k, alpha, c, ldc);
}

void MatMulPackedTransATarget(const float* a, size_t lda, const float* packed_b, const float* bias,
                              size_t m, size_t n, size_t k, float alpha, float* c, size_t ldc) {
  MatMulPackedImpl<true>(a, lda, packed_b, bias, m, n, k, alpha, c, ldc);
}

bool MatMulRowMajorBTarget(bool trans_a, const float* a, size_t lda, const float* b, size_t ldb,
                           size_t m, size_t n, size_t k, float alpha, float* c, size_t ldc) {
  if (!RowMajorBTakes(n)) return false;
  if (trans_a) {
    MatMulRowMajorBImpl<true>(a, lda, b, ldb, m, n, k, alpha, c, ldc);
  } else {
    MatMulRowMajorBImpl<false>(a, lda, b, ldb, m, n, k, alpha, c, ldc);
  }
  return true;
}

}  // namespace HWY_NAMESPACE
}  // namespace headscope
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace headscope {

HEADSCOPE_EXPORT(MatMulPackedTarget);
HEADSCOPE_EXPORT(MatMulPackedTransATarget);
HEADSCOPE_EXPORT(MatMulRowMajorBTarget);

namespace {
// One product, on the pool when it is worth it: `kernel(i0, rows, j0, cols)` computes C's block
// of rows [i0, i0 + rows) and columns [j0, j0 + cols) (a block of A's rows starts at a + i0 *
// lda, or at a + i0 when A is stored transposed).
template <class Kernel>
void SplitProduct(size_t m, size_t n, size_t k, int threads, const Kernel& kernel) {
  if (ThreadCount() == 1 || threads < ThreadCount() ||
      static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <
          kParallelMinMacs) {
    kernel(0, m, 0, n);
    return;
  }
  // Tasks are blocks of kRowBlock rows x a run of whole panels: each is the same kernel on a
  // sub-matrix (a run of panels is itself a packed B, and its last panel keeps its edge handling),
  // and every element of C is still one kernel's dot product over k in the same order, so the
  // result is bit-identical to one call. Rows first (each block reuses its rows of A from cache),
  // then as many panel runs as it takes for about 4 tasks per thread (decode's m = 1 has one row
  // block) so uneven tasks still balance.
  constexpr size_t kRowBlockRows = 64;  // matmul-inl.h's kRowBlock
  const size_t row_blocks = (m + kRowBlockRows - 1) / kRowBlockRows;
  const size_t panels = (n + kPanel - 1) / kPanel;
  const size_t want = 4 * static_cast<size_t>(ThreadCount());
  size_t col_runs = row_blocks >= want ? 1 : (want + row_blocks - 1) / row_blocks;
  if (col_runs > panels) col_runs = panels;
  const size_t panels_per_run = (panels + col_runs - 1) / col_runs;
  col_runs = (panels + panels_per_run - 1) / panels_per_run;
  ParallelFor(row_blocks * col_runs, [&](size_t task, size_t) {
    const size_t i0 = (task / col_runs) * kRowBlockRows;
    const size_t j0 = (task % col_runs) * panels_per_run * kPanel;
    const size_t rows = m - i0 < kRowBlockRows ? m - i0 : kRowBlockRows;
    const size_t cols = n - j0 < panels_per_run * kPanel ? n - j0 : panels_per_run * kPanel;
    kernel(i0, rows, j0, cols);
  });
}

void MatMulPackedAny(bool trans_a, const float* a, size_t lda, const float* packed_b,
                     const float* bias, size_t m, size_t n, size_t k, float alpha, float* c,
                     size_t ldc, int threads) {
  const auto kernel = trans_a ? HEADSCOPE_DISPATCH(MatMulPackedTransATarget)
                              : HEADSCOPE_DISPATCH(MatMulPackedTarget);
  SplitProduct(m, n, k, threads, [&](size_t i0, size_t rows, size_t j0, size_t cols) {
    kernel(trans_a ? a + i0 : a + i0 * lda, lda, packed_b + j0 * k,
           bias != nullptr ? bias + j0 : nullptr, rows, cols, k, alpha, c + i0 * ldc + j0, ldc);
  });
}
}  // namespace

void MatMulPacked(const float* a, size_t lda, const float* packed_b, const float* bias, size_t m,
                  size_t n, size_t k, float alpha, float* c, size_t ldc, int threads) {
  MatMulPackedAny(false, a, lda, packed_b, bias, m, n, k, alpha, c, ldc, threads);
}

void MatMulPackedTransA(const float* a, size_t lda, const float* packed_b, const float* bias,
                        size_t m, size_t n, size_t k, float alpha, float* c, size_t ldc,
                        int threads) {
  MatMulPackedAny(true, a, lda, packed_b, bias, m, n, k, alpha, c, ldc, threads);
}

bool MatMulRowMajorB(bool trans_a, const float* a, size_t lda, const float* b, size_t ldb,
                     size_t m, size_t n, size_t k, float alpha, float* c, size_t ldc,
                     int threads) {
  const auto kernel = HEADSCOPE_DISPATCH(MatMulRowMajorBTarget);
  // An empty product asks whether this target takes n. Then every block is taken too: its
  // column count is a run of whole panels (whole column groups on every target) or ends at n.
  if (!kernel(trans_a, a, lda, b, ldb, 0, n, k, alpha, c, ldc)) return false;
  SplitProduct(m, n, k, threads, [&](size_t i0, size_t rows, size_t j0, size_t cols) {
    kernel(trans_a, trans_a ? a + i0 : a + i0 * lda, lda, b + j0, ldb, rows, cols, k, alpha,
           c + i0 * ldc + j0, ldc);
  });
  return true;
}

// Here, beside the kernel whose multiply-add it names: this file is compiled with the flags that
// decide ChainMulAdd.
const char* WasmSimdBuild() {
#if defined(__wasm_relaxed_simd__)
  return "relaxed";
#elif defined(__wasm_simd128__)
  return "simd128";
#else
  return "native";
#endif
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
