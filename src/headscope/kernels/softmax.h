// Row softmax with PyTorch's semantics and headscope's zero-row policy.
#ifndef HEADSCOPE_KERNELS_SOFTMAX_H_
#define HEADSCOPE_KERNELS_SOFTMAX_H_

#include <cstddef>
#include <cstdint>

namespace headscope {

// In place: row[j] = exp(row[j] - max) / sum. Masked entries are -inf and get 0.
// - Every entry -inf (a fully masked query row), or n == 0: the row becomes 0 and the function
//   returns true, so the caller can zero that row's attention output (PyTorch would give NaN).
// - Any NaN or +inf in the row: the row becomes NaN, as torch.softmax gives.
bool Softmax(float* row, size_t n);

// Softmax of `rows` contiguous rows of n floats, each as Softmax does it; state[r] is 1 where
// Softmax would return true (fully masked), 2 for a NaN row, 0 otherwise. The attention stage
// uses it for tiles of short rows (tutorial shapes).
void SoftmaxRows(float* tile, size_t rows, size_t n, uint8_t* state);

// y[i] = exp(x[i]) for x[i] <= 0 or -inf, the softmax's exponential: within 1 ulp of float's
// exp, subnormal results included, and 0 below -103.972 (-150 ln 2), where float's exp is 0.
// Exposed for the kernel tests.
void ExpNonPositive(const float* x, float* y, size_t n);

// row[j] += add[j], vectorized; how float masks and converted bool masks reach the scores.
void AddInPlace(float* row, const float* add, size_t n);

// Scalar reference of Softmax (double accumulation) for the kernel tests.
bool SoftmaxScalar(float* row, size_t n);

}  // namespace headscope

#endif  // HEADSCOPE_KERNELS_SOFTMAX_H_
