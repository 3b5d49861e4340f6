// Packed, register-blocked matrix multiply: the one GEMM behind the projections, QK^T and
// weights x V.
//
// The right-hand operand is always "a matrix with n rows of length k", as torch stores a Linear
// weight (out_features, in_features). It is packed once into panels of kPanel columns,
// [ceil(n / kPanel)][k][kPanel], zero-padded, so the micro-kernel streams it contiguously. The
// panel width does not depend on the SIMD target, so packed weights are valid for every target.
#ifndef HEADSCOPE_KERNELS_MATMUL_H_
#define HEADSCOPE_KERNELS_MATMUL_H_

#include <cstddef>

namespace headscope {

inline constexpr size_t kPanel = 16;

inline size_t PackedFloats(size_t n, size_t k) { return (n + kPanel - 1) / kPanel * kPanel * k; }

// Packs B where B(j, p) = b[j * row_stride + p * col_stride], j < n, p < k. With strides (k, 1)
// that is a torch Linear weight; with (1, ld) it is the transpose of a row-major (k, n) block,
// which is how weights x V reads V.
void PackB(const float* b, size_t n, size_t k, size_t row_stride, size_t col_stride,
           float* packed);

// C = alpha * A * B^T + bias, with A (m, k) row-major with leading dimension lda, B packed by
// PackB with the same n and k, bias (n) or null, C (m, n) with leading dimension ldc.
// m, n or k may be 0 (k = 0 gives C = bias or 0). `threads` is how many threads the caller's
// CallContext planned for (its ThreadPoolHandle): the product is split across the pool only when
// that covers every pool thread and the product is large enough; the bits are the same either way.
void MatMulPacked(const float* a, size_t lda, const float* packed_b, const float* bias, size_t m,
                  size_t n, size_t k, float alpha, float* c, size_t ldc, int threads = 1);

// The same with A stored transposed: A (m, k) is A(i, p) = a[p * lda + i] (a row-major (k, m)
// block with leading dimension lda >= m). The backward's dW = dY^T X and P^T dZ read their
// left-hand operand so instead of copying its transpose. Each element of C is the chain of
// MatMulPacked's for the same A: the same bits.
void MatMulPackedTransA(const float* a, size_t lda, const float* packed_b, const float* bias,
                        size_t m, size_t n, size_t k, float alpha, float* c, size_t ldc,
                        int threads = 1);

// C = alpha * A * B with B row-major (k, n), row p at b + p * ldb, read in place instead of
// packed: for operands whose B is already rows in memory (the attention backward's dZ, K and Q;
// the weight gradients' layer inputs, dW = dY^T X). trans_a as in MatMulPackedTransA, threads as
// in MatMulPacked. Returns false, computing nothing, where this target's kernel does not take n
// (not a whole number of its column groups, of 16 floats at most): the caller packs B then. Each
// element of C is MatMulPacked's chain for the same A and B (with B packed by
// PackB(b, n, k, 1, ldb)), whatever k and the thread count: the same bits.
bool MatMulRowMajorB(bool trans_a, const float* a, size_t lda, const float* b, size_t ldb,
                     size_t m, size_t n, size_t k, float alpha, float* c, size_t ldc,
                     int threads = 1);

// Plain triple loop with the same contract (B unpacked, as given to PackB): the scalar reference
// the kernel tests compare against.
void MatMulScalar(const float* a, size_t lda, const float* b, size_t row_stride,
                  size_t col_stride, const float* bias, size_t m, size_t n, size_t k, float alpha,
                  float* c, size_t ldc);

}  // namespace headscope

#endif  // HEADSCOPE_KERNELS_MATMUL_H_
