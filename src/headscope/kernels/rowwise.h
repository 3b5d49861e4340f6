// Row-wise stages of the transformer (transformer.cc): LayerNorm over the last dimension and the
// MLP's activations, SIMD-vectorized. Each row (each element, for the activations) is computed
// with the same operations in the same order whatever the number of rows, so a row's result does
// not depend on the rows around it (what generation with a KV cache relies on, transformer.h).
#ifndef HEADSCOPE_KERNELS_ROWWISE_H_
#define HEADSCOPE_KERNELS_ROWWISE_H_

#include <cstddef>
#include <cstdint>

namespace headscope {

// torch.nn.LayerNorm over rows of d floats: out = (x - mean) / sqrt(var + eps) * w + b, with
// the biased variance, in float as torch's CPU kernel accumulates (two passes: the mean, then
// the squared deviations from it, so no cancellation). `out` may be `in`.
void LayerNormRows(const float* in, size_t rows, size_t d, const float* w, const float* b,
                   float eps, float* out);

// The backward of LayerNormRows (the training pass, transformer_train.cc): for rows of d floats
// with input `in` and output gradient `dy`, dx = rstd (dy w - mean(dy w) - xhat mean(dy w xhat))
// (written, or added to dx when `add`), dw = sum over rows of dy xhat and db = sum of dy
// (written), with xhat and rstd the forward's statistics. In float, the sums in a fixed order.
void LayerNormBackwardRows(const float* in, const float* dy, size_t rows, size_t d,
                           const float* w, float eps, float* dx, bool add, float* dw, float* db);

// The mean cross-entropy of logits [positions, vocab] against targets (-100: not counted; the
// others in [0, vocab), checked by the caller), `counted` of them (at least one): per counted row
// log(sum exp(x - max)) - (x[target] - max), as F.cross_entropy with ignore_index -100 (in that
// order, so that a large max does not absorb the log: see CrossEntropyRowsTarget). With
// `grad` (positions x vocab), also the gradient (softmax(row) - onehot(target)) / counted, 0 on
// the rows not counted, from the same exponentials. The exponentials and their sum are float, as
// torch's float log_softmax computes them (softmax-inl.h's ExpNonPositive, within 1 ulp of exp),
// each row's loss and the mean are double. A row with a NaN or an infinite max goes the scalar
// double way, whose NaN/inf is the loss PyTorch reports for it.
double CrossEntropyRows(const float* logits, size_t positions, size_t vocab,
                        const int32_t* targets, size_t counted, float* grad);

// F.gelu, the erf form, in place: 0.5 x (1 + erf(x / sqrt(2))), with erf as PyTorch's vectorized
// CPU kernel computes it (Abramowitz and Stegun 7.1.26, |error| < 1.5e-7: torch's
// Vectorized<float>::erf), so the numbers are those torch's float GELU gives.
void GeluInPlace(float* x, size_t n);

// F.relu in place (NaN stays NaN).
void ReluInPlace(float* x, size_t n);

// The backward of GeluInPlace: dy[i] *= Phi(x[i]) + x[i] phi(x[i]) (torch's GeluBackward for
// approximate='none'), with Phi from the forward's erf and phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
void GeluBackward(const float* x, float* dy, size_t n);

}  // namespace headscope

#endif  // HEADSCOPE_KERNELS_ROWWISE_H_
