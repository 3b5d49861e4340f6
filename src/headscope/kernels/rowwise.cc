// Per-target code and dispatch of the row-wise stages (see rowwise.h).
#include "headscope/kernels/rowwise.h"

#include <cmath>

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

// erf(x) for a vector, as torch's Vectorized<float>::erf: t = 1 / (1 + p |x|), r = a polynomial
// in t, erf = sign(x) (1 - r t exp(-x^2)).
template <class D, class V>
HWY_INLINE V Erf(D d, V x) {
  const auto ax = hn::Abs(x);
  const auto one = hn::Set(d, 1.0f);
  const auto t = hn::Div(one, hn::MulAdd(hn::Set(d, 0.3275911f), ax, one));
  auto r = hn::MulAdd(hn::Set(d, 1.061405429f), t, hn::Set(d, -1.453152027f));
  r = hn::MulAdd(r, t, hn::Set(d, 1.421413741f));
  r = hn::MulAdd(r, t, hn::Set(d, -0.284496736f));
  r = hn::MulAdd(r, t, hn::Set(d, 0.254829592f));
  const auto e = ExpNonPositive(d, hn::Neg(hn::Mul(ax, ax)));  // -x^2 <= 0 (or NaN)
  const auto y = hn::NegMulAdd(hn::Mul(t, e), r, one);         // 1 - r t e
  return hn::CopySign(y, x);
}

template <class D>
HWY_INLINE hn::Vec<D> Gelu(D d, hn::Vec<D> x) {
  const auto half_x = hn::Mul(x, hn::Set(d, 0.5f));
  const auto erf = Erf(d, hn::Mul(x, hn::Set(d, 0.70710678118654752440f)));
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

void LayerNormRows(const float* in, size_t rows, size_t d, const float* w, const float* b,
                   float eps, float* out) {
  HEADSCOPE_DISPATCH(LayerNormRowsTarget)(in, rows, d, w, b, eps, out);
}

void GeluInPlace(float* x, size_t n) { HEADSCOPE_DISPATCH(GeluInPlaceTarget)(x, n); }

void ReluInPlace(float* x, size_t n) { HEADSCOPE_DISPATCH(ReluInPlaceTarget)(x, n); }

}  // namespace headscope
#endif  // HWY_ONCE
