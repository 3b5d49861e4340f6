// Per-target code and dispatch of the row-wise stages (see rowwise.h).
#include "headscope/kernels/rowwise.h"

#include <cmath>
#include <cstring>

#ifndef HEADSCOPE_KERNELS_ROWWISE_ONCE_
#define HEADSCOPE_KERNELS_ROWWISE_ONCE_
namespace headscope {
// CrossEntropyRows' row whose max is NaN or infinite, in double, as the loss was computed before
// the kernel: exp(NaN) and exp(inf - inf) make the row's loss (and gradient) NaN, as PyTorch's.
inline double CrossEntropyRowScalar(const float* row, size_t vocab, int32_t t, double inv,
                                    float* g) {
  double max = row[0];
  for (size_t j = 1; j < vocab; ++j) max = row[j] > max ? row[j] : max;
  double sum = 0;
  for (size_t j = 0; j < vocab; ++j) {
    const double e = std::exp(row[j] - max);
    if (g != nullptr) g[j] = static_cast<float>(e);
    sum += e;
  }
  if (g != nullptr) {
    const double scale = inv / sum;
    for (size_t j = 0; j < vocab; ++j) g[j] = static_cast<float>(g[j] * scale);
    g[t] = static_cast<float>(static_cast<double>(g[t]) - inv);
  }
  // log(sum) - (x[t] - max), not max + log(sum) - x[t]: at |max| above about 2^53 log(sum) is
  // below half an ulp of max and max + log(sum) rounds back to max (ten equal logits of 7.6e22
  // gave 0, not ln 10). Here a NaN or infinite max makes it NaN either way; the vector path
  // below shares the order so that the two read alike.
  return std::log(sum) - (static_cast<double>(row[t]) - max);
}
}  // namespace headscope
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "headscope/kernels/rowwise.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "headscope/kernels/dispatch.h"
#include "headscope/kernels/softmax-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace headscope {
namespace HWY_NAMESPACE {

// The last d % Lanes entries of a row as one vector, padded with `fill` (softmax-inl.h's
// LoadTail, without its variable-length memcpy: Emscripten calls out for those).
template <class D>
HWY_INLINE hn::Vec<D> LoadRowTail(D d, const float* HWY_RESTRICT p, size_t count, float fill) {
  HWY_ALIGN float buf[hn::MaxLanes(D())];
  for (size_t i = 0; i < hn::MaxLanes(d); ++i) buf[i] = i < count ? p[i] : fill;
  return hn::Load(d, buf);
}

void LayerNormRowsTarget(const float* in, size_t rows, size_t d, const float* w, const float* b,
                         float eps, float* out) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df), full = d - d % N, rem = d - full;
  const float inv_d = 1.0f / static_cast<float>(d);
  for (size_t r = 0; r < rows; ++r) {
    const float* HWY_RESTRICT x = in + r * d;
    float* y = out + r * d;  // may be x
    auto sum = hn::Zero(df);
    for (size_t j = 0; j < full; j += N) sum = hn::Add(sum, hn::LoadU(df, x + j));
    if (rem != 0) sum = hn::Add(sum, LoadRowTail(df, x + full, rem, 0.0f));
    const float mean = hn::GetLane(hn::SumOfLanes(df, sum)) * inv_d;
    const auto vmean = hn::Set(df, mean);
    auto sq = hn::Zero(df);
    for (size_t j = 0; j < full; j += N) {
      const auto t = hn::Sub(hn::LoadU(df, x + j), vmean);
      sq = hn::MulAdd(t, t, sq);
    }
    if (rem != 0) {
      const auto t = hn::Sub(LoadRowTail(df, x + full, rem, mean), vmean);  // padding: 0
      sq = hn::MulAdd(t, t, sq);
    }
    const float var = hn::GetLane(hn::SumOfLanes(df, sq)) * inv_d;
    const auto vinv = hn::Set(df, 1.0f / std::sqrt(var + eps));
    for (size_t j = 0; j < full; j += N) {
      const auto t = hn::Mul(hn::Sub(hn::LoadU(df, x + j), vmean), vinv);
      hn::StoreU(hn::MulAdd(t, hn::LoadU(df, w + j), hn::LoadU(df, b + j)), df, y + j);
    }
    if (rem != 0) {
      const hn::CappedTag<float, 1> d1;  // the tail with the same operations, one lane at a time
      const auto vmean1 = hn::Set(d1, mean), vinv1 = hn::Set(d1, hn::GetLane(vinv));
      for (size_t j = full; j < d; ++j) {
        const auto t = hn::Mul(hn::Sub(hn::LoadU(d1, x + j), vmean1), vinv1);
        hn::StoreU(hn::MulAdd(t, hn::LoadU(d1, w + j), hn::LoadU(d1, b + j)), d1, y + j);
      }
    }
  }
}

// Rows shorter than this take the double-precision scalar backward: with a handful of entries the
// LayerNorm output hardly depends on x (d = 1: not at all), dx is the difference of nearly equal
// terms times a large rstd, and float's rounding of them would be most of it.
inline constexpr size_t kLayerNormBackwardMinVector = 16;

// dx, dw, db as LayerNormBackwardRowsTarget's contract, in double (dw, db zeroed by the caller).
HWY_INLINE void LayerNormBackwardRowsDouble(const float* in, const float* dy, size_t rows,
                                            size_t d, const float* w, float eps, float* dx,
                                            bool add, float* dw, float* db) {
  for (size_t r = 0; r < rows; ++r) {
    const float* x = in + r * d;
    const float* g = dy + r * d;
    double mean = 0, var = 0, mg = 0, mgx = 0;
    for (size_t j = 0; j < d; ++j) mean += x[j];
    mean /= static_cast<double>(d);
    for (size_t j = 0; j < d; ++j) var += (x[j] - mean) * (x[j] - mean);
    var /= static_cast<double>(d);
    const double rstd = 1.0 / std::sqrt(var + static_cast<double>(eps));
    for (size_t j = 0; j < d; ++j) {
      const double xhat = (x[j] - mean) * rstd, gw = static_cast<double>(g[j]) * w[j];
      mg += gw;
      mgx += gw * xhat;
      dw[j] = static_cast<float>(dw[j] + g[j] * xhat);
      db[j] += g[j];
    }
    mg /= static_cast<double>(d);
    mgx /= static_cast<double>(d);
    for (size_t j = 0; j < d; ++j) {
      const double xhat = (x[j] - mean) * rstd;
      const double v = rstd * (static_cast<double>(g[j]) * w[j] - mg - xhat * mgx);
      dx[r * d + j] = add ? static_cast<float>(dx[r * d + j] + v) : static_cast<float>(v);
    }
  }
}

// The backward of LayerNormRowsTarget (rowwise.h: LayerNormBackwardRows). The row statistics are
// the forward's (the same two passes); the sums over a row are lane-wise, then SumOfLanes, and
// dw / db accumulate row after row, so the order is fixed for a target whatever the thread count.
void LayerNormBackwardRowsTarget(const float* in, const float* dy, size_t rows, size_t d,
                                 const float* w, float eps, float* dx, bool add, float* dw,
                                 float* db) {
  for (size_t j = 0; j < d; ++j) dw[j] = db[j] = 0.0f;
  if (d < kLayerNormBackwardMinVector) {
    LayerNormBackwardRowsDouble(in, dy, rows, d, w, eps, dx, add, dw, db);
    return;
  }
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df), full = d - d % N;
  const float inv_d = 1.0f / static_cast<float>(d);
  for (size_t r = 0; r < rows; ++r) {
    const float* HWY_RESTRICT x = in + r * d;
    const float* HWY_RESTRICT g = dy + r * d;
    float* HWY_RESTRICT out = dx + r * d;
    auto sum = hn::Zero(df);
    size_t j = 0;
    for (; j < full; j += N) sum = hn::Add(sum, hn::LoadU(df, x + j));
    float mean = hn::GetLane(hn::SumOfLanes(df, sum));
    for (; j < d; ++j) mean += x[j];
    mean *= inv_d;
    const auto vmean = hn::Set(df, mean);
    auto sq = hn::Zero(df);
    for (j = 0; j < full; j += N) {
      const auto t = hn::Sub(hn::LoadU(df, x + j), vmean);
      sq = hn::MulAdd(t, t, sq);
    }
    float var = hn::GetLane(hn::SumOfLanes(df, sq));
    for (; j < d; ++j) var += (x[j] - mean) * (x[j] - mean);
    var *= inv_d;
    const float rstd = 1.0f / std::sqrt(var + eps);
    const auto vrstd = hn::Set(df, rstd);
    // mean of g = dy * w and of g * xhat
    auto sg = hn::Zero(df), sgx = hn::Zero(df);
    for (j = 0; j < full; j += N) {
      const auto xhat = hn::Mul(hn::Sub(hn::LoadU(df, x + j), vmean), vrstd);
      const auto dyv = hn::LoadU(df, g + j);
      const auto gv = hn::Mul(dyv, hn::LoadU(df, w + j));
      sg = hn::Add(sg, gv);
      sgx = hn::MulAdd(gv, xhat, sgx);
      hn::StoreU(hn::MulAdd(dyv, xhat, hn::LoadU(df, dw + j)), df, dw + j);
      hn::StoreU(hn::Add(dyv, hn::LoadU(df, db + j)), df, db + j);
    }
    float mg = hn::GetLane(hn::SumOfLanes(df, sg)), mgx = hn::GetLane(hn::SumOfLanes(df, sgx));
    for (; j < d; ++j) {
      const float xhat = (x[j] - mean) * rstd;
      const float gv = g[j] * w[j];
      mg += gv;
      mgx += gv * xhat;
      dw[j] += g[j] * xhat;
      db[j] += g[j];
    }
    mg *= inv_d;
    mgx *= inv_d;
    const auto vmg = hn::Set(df, mg), vmgx = hn::Set(df, mgx);
    for (j = 0; j < full; j += N) {
      const auto xhat = hn::Mul(hn::Sub(hn::LoadU(df, x + j), vmean), vrstd);
      const auto gv = hn::Mul(hn::LoadU(df, g + j), hn::LoadU(df, w + j));
      auto v = hn::Mul(vrstd, hn::NegMulAdd(xhat, vmgx, hn::Sub(gv, vmg)));
      if (add) v = hn::Add(v, hn::LoadU(df, out + j));
      hn::StoreU(v, df, out + j);
    }
    for (; j < d; ++j) {
      const float xhat = (x[j] - mean) * rstd;
      const float v = rstd * ((g[j] * w[j] - mg) - xhat * mgx);
      out[j] = add ? out[j] + v : v;
    }
  }
}

// erf(x) for a vector, as torch's Vectorized<float>::erf: t = 1 / (1 + p |x|), r = a polynomial
// in t, erf = sign(x) (1 - r t exp(-x^2)); with that exp(-x^2), which GELU's derivative reuses.
template <class V>
struct ErfAndExp {
  V erf;
  V exp_neg_sq;  // exp(-x^2)
};
template <class D, class V>
HWY_INLINE ErfAndExp<V> Erf(D d, V x) {
  const auto ax = hn::Abs(x);
  const auto one = hn::Set(d, 1.0f);
  const auto t = hn::Div(one, hn::MulAdd(hn::Set(d, 0.3275911f), ax, one));
  auto r = hn::MulAdd(hn::Set(d, 1.061405429f), t, hn::Set(d, -1.453152027f));
  r = hn::MulAdd(r, t, hn::Set(d, 1.421413741f));
  r = hn::MulAdd(r, t, hn::Set(d, -0.284496736f));
  r = hn::MulAdd(r, t, hn::Set(d, 0.254829592f));
  const auto e = ExpNonPositive(d, hn::Neg(hn::Mul(ax, ax)));  // -x^2 <= 0 (or NaN)
  const auto y = hn::NegMulAdd(hn::Mul(t, e), r, one);         // 1 - r t e
  return {hn::CopySign(y, x), e};
}

template <class D>
HWY_INLINE hn::Vec<D> Gelu(D d, hn::Vec<D> x) {
  const auto half_x = hn::Mul(x, hn::Set(d, 0.5f));
  const auto erf = Erf(d, hn::Mul(x, hn::Set(d, 0.70710678118654752440f))).erf;
  return hn::MulAdd(half_x, erf, half_x);  // 0.5 x (1 + erf)
}

void GeluInPlaceTarget(float* x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(Gelu(d, hn::LoadU(d, x + i)), d, x + i);
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) hn::StoreU(Gelu(d1, hn::LoadU(d1, x + i)), d1, x + i);
}

// GELU's derivative times dy: Phi(x) + x phi(x), with Phi from the same erf as the forward and
// phi(x) = exp(-x^2 / 2) / sqrt(2 pi), the exponential erf(x / sqrt(2)) computes anyway.
template <class D>
HWY_INLINE hn::Vec<D> GeluGrad(D d, hn::Vec<D> x, hn::Vec<D> dy) {
  const auto erf_exp = Erf(d, hn::Mul(x, hn::Set(d, 0.70710678118654752440f)));
  const auto erf = erf_exp.erf;
  const auto e = erf_exp.exp_neg_sq;  // exp(-x^2 / 2)
  const auto half = hn::Set(d, 0.5f);
  const auto cdf = hn::MulAdd(half, erf, half);
  const auto pdf = hn::Mul(e, hn::Set(d, 0.39894228040143267794f));
  return hn::Mul(dy, hn::MulAdd(x, pdf, cdf));
}

void GeluBackwardTarget(const float* x, float* dy, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(GeluGrad(d, hn::LoadU(d, x + i), hn::LoadU(d, dy + i)), d, dy + i);
  }
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) {
    hn::StoreU(GeluGrad(d1, hn::LoadU(d1, x + i), hn::LoadU(d1, dy + i)), d1, dy + i);
  }
}

double CrossEntropyRowsTarget(const float* logits, size_t positions, size_t vocab,
                              const int32_t* targets, size_t counted, float* grad) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), full = vocab - vocab % N, rem = vocab - full;
  const double inv = 1.0 / static_cast<double>(counted);
  double total = 0;
  for (size_t p = 0; p < positions; ++p) {
    const int32_t t = targets[p];
    float* HWY_RESTRICT g = grad != nullptr ? grad + p * vocab : nullptr;
    if (t == -100) {
      if (g != nullptr) std::memset(g, 0, vocab * sizeof(float));
      continue;
    }
    const float* HWY_RESTRICT row = logits + p * vocab;
    bool nan;
    const float max = RowMax(row, vocab, &nan);
    if (nan || !std::isfinite(max)) {
      total += CrossEntropyRowScalar(row, vocab, t, inv, g);
      continue;
    }
    // exp(x - max) <= 1 (kept in g for the gradient), and its sum: lanes, then across them.
    const auto vmax = hn::Set(d, max);
    auto vsum = hn::Zero(d);
    for (size_t j = 0; j < full; j += N) {
      const auto e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, row + j), vmax));
      if (g != nullptr) hn::StoreU(e, d, g + j);
      vsum = hn::Add(vsum, e);
    }
    if (rem != 0) {  // padded with -inf: exp gives 0
      constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
      const auto e = ExpNonPositive(d, hn::Sub(LoadRowTail(d, row + full, rem, kMinusInf), vmax));
      HWY_ALIGN float tail[hn::MaxLanes(d)];
      hn::Store(e, d, tail);
      if (g != nullptr) {
        for (size_t j = 0; j < rem; ++j) g[full + j] = tail[j];
      }
      vsum = hn::Add(vsum, e);
    }
    const float sum = hn::GetLane(hn::SumOfLanes(d, vsum));  // >= 1: the max's exp(0)
    // log(sum) - (x[t] - max) rather than max + log(sum) - x[t]: once |max| passes about 2^53
    // the addition rounds log(sum) away (ten equal logits of 7.6e22 gave a loss of 0, torch
    // ln 10). x[t] - max, a difference of two floats, is exact in double unless their exponents
    // are more than 28 apart (then it is rounded once and dwarfs log(sum) anyway).
    total += std::log(static_cast<double>(sum)) -
             (static_cast<double>(row[t]) - static_cast<double>(max));
    if (g != nullptr) {
      const auto vscale = hn::Set(d, static_cast<float>(inv / static_cast<double>(sum)));
      size_t j = 0;
      for (; j + N <= vocab; j += N) hn::StoreU(hn::Mul(hn::LoadU(d, g + j), vscale), d, g + j);
      for (; j < vocab; ++j) g[j] *= hn::GetLane(vscale);
      g[t] = static_cast<float>(static_cast<double>(g[t]) - inv);
    }
  }
  return total / static_cast<double>(counted);
}

void ReluInPlaceTarget(float* x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto zero = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    // max(v, 0) but NaN kept: select 0 only where v < 0 or v is -0 (v > 0 false and not NaN).
    hn::StoreU(hn::IfThenElse(hn::Or(hn::Gt(v, zero), hn::IsNaN(v)), v, zero), d, x + i);
  }
  for (; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : (x[i] != x[i] ? x[i] : 0.0f);
}

}  // namespace HWY_NAMESPACE
}  // namespace headscope
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace headscope {

HEADSCOPE_EXPORT(LayerNormRowsTarget);
HEADSCOPE_EXPORT(GeluInPlaceTarget);
HEADSCOPE_EXPORT(ReluInPlaceTarget);
HEADSCOPE_EXPORT(GeluBackwardTarget);
HEADSCOPE_EXPORT(LayerNormBackwardRowsTarget);
HEADSCOPE_EXPORT(CrossEntropyRowsTarget);

void LayerNormRows(const float* in, size_t rows, size_t d, const float* w, const float* b,
                   float eps, float* out) {
  HEADSCOPE_DISPATCH(LayerNormRowsTarget)(in, rows, d, w, b, eps, out);
}

void GeluInPlace(float* x, size_t n) { HEADSCOPE_DISPATCH(GeluInPlaceTarget)(x, n); }

void ReluInPlace(float* x, size_t n) { HEADSCOPE_DISPATCH(ReluInPlaceTarget)(x, n); }

void LayerNormBackwardRows(const float* in, const float* dy, size_t rows, size_t d,
                           const float* w, float eps, float* dx, bool add, float* dw, float* db) {
  HEADSCOPE_DISPATCH(LayerNormBackwardRowsTarget)(in, dy, rows, d, w, eps, dx, add, dw, db);
}

void GeluBackward(const float* x, float* dy, size_t n) {
  HEADSCOPE_DISPATCH(GeluBackwardTarget)(x, dy, n);
}

double CrossEntropyRows(const float* logits, size_t positions, size_t vocab,
                        const int32_t* targets, size_t counted, float* grad) {
  return HEADSCOPE_DISPATCH(CrossEntropyRowsTarget)(logits, positions, vocab, targets, counted,
                                                    grad);
}

}  // namespace headscope
#endif  // HWY_ONCE
