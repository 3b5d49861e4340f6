// Per-target SIMD code of the row softmax (see softmax.h for the contract).

#if defined(HEADSCOPE_KERNELS_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HEADSCOPE_KERNELS_SOFTMAX_INL_H_
#undef HEADSCOPE_KERNELS_SOFTMAX_INL_H_
#else
#define HEADSCOPE_KERNELS_SOFTMAX_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace headscope {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The last n % Lanes entries of a row go through one full vector padded with `fill`, so every
// stage stays vectorized and nothing past the row is read or written.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const float* HWY_RESTRICT p, size_t count, float fill) {
  HWY_ALIGN float buf[hn::MaxLanes(D())];
  for (size_t i = 0; i < hn::MaxLanes(d); ++i) buf[i] = fill;
  std::memcpy(buf, p, count * sizeof(float));
  return hn::Load(d, buf);
}

template <class D>
HWY_INLINE void StoreTail(hn::Vec<D> v, D d, float* HWY_RESTRICT p, size_t count) {
  HWY_ALIGN float buf[hn::MaxLanes(D())];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, count * sizeof(float));
}

// ExpNonPositive<true>'s domain: inputs >= this give 2^n >= 2^-126, a normal float (below).
inline constexpr float kExpNoUnderflow = -87.0f;

// exp(x) for x <= 0 or -inf: what softmax exponentiates once the row max is subtracted (NaN rows
// never get here). Highway's Exp with the same range reduction and polynomial, but the rounding
// of x / ln 2 to an integer done with the 1.5 * 2^23 trick instead of a float -> int conversion,
// and 2^n built from the rounded value's own bits: V8 lowers WebAssembly's saturating
// i32x4.trunc_sat_f32x4_s to about six x86 instructions, and tutorial shapes spend a fifth of a
// call in exp. Within 1 ulp of std::exp in float over the whole range float's exp covers,
// subnormal results included: PyTorch's weights are subnormal from x < -87.34 (ln FLT_MIN) down
// to -103.97 (ln of half the smallest subnormal, below which float's exp rounds to 0), and a
// subnormal weight times a huge or infinite value is not 0 (e^-90 * 3e38 = 0.25, e^-90 * inf =
// inf, where 0 * inf would be NaN).
//
// kInRange: the caller knows every lane is >= kExpNoUnderflow (a softmax row whose smallest score
// is within 87 of its largest: nearly every row). Then n >= -126 and 2^n is normal, so the
// underflow lanes' compare and two selects and the 2^-64 step go (4 of about 30 operations; the
// softmax of a 32 x 32 score tile 1.6 -> 1.3 us in Node 20), and the result is the same float:
// p 2^(n + 64) is exact, and its product with 2^-64 rounds p 2^n once, as the single product
// p 2^n does.
template <bool kInRange = false, class D>
HWY_INLINE hn::Vec<D> ExpNonPositive(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  const auto kMagic = hn::Set(d, 12582912.0f);  // 1.5 * 2^23: t = y + kMagic rounds y
  // Lanes below kMin (-inf: masked keys) are 0 in the end; computing them as exp(0) meanwhile
  // keeps them out of the subnormal range, whose products cost a microcode assist on x86 (a
  // clamp to kMin would pay it on every masked key).
  hn::Mask<D> underflow;
  hn::Vec<D> xc = x;
  if constexpr (!kInRange) {
    const auto kMin = hn::Set(d, -103.972076f);  // the float nearest -150 ln 2, above it
    underflow = hn::Lt(x, kMin);
    xc = hn::IfThenZeroElse(underflow, x);
  }
  const auto t = hn::MulAdd(xc, hn::Set(d, 1.442695040888963407359924681f), kMagic);
  const auto n = hn::Sub(t, kMagic);  // round(x / ln 2), in [-150, 0]
  // r = x - n ln 2 in two parts, as Highway's ExpReduce.
  auto r = hn::MulAdd(n, hn::Set(d, -0.693145751953125f), xc);
  r = hn::MulAdd(n, hn::Set(d, -1.428606765330187045e-6f), r);
  hn::impl::ExpImpl<float> impl;
  const auto p = hn::Add(impl.ExpPoly(d, r), hn::Set(d, 1.0f));
  // t's bits are 0x4B400000 + n, so the exponent field of 2^(n + c) is those bits minus
  // 0x4B400000, plus 127 + c.
  const auto pow2 = [&](int c) HWY_ATTR {
    return hn::BitCast(
        d, hn::ShiftLeft<23>(hn::Add(hn::BitCast(di, t), hn::Set(di, 127 + c - 0x4B400000))));
  };
  if constexpr (kInRange) {
    return hn::Mul(p, pow2(0));
  } else {
    // 2^n is subnormal (or 0) for n < -126 and has no exponent field of its own, so it is
    // applied as 2^(n + 64), always normal (n + 64 in [-86, 64]), then 2^-64: the first product
    // is exact, the second rounds once, only where the result is subnormal. One multiply more
    // than a single 2^n; no compare or select.
    const auto e = hn::Mul(hn::Mul(p, pow2(64)), hn::Set(d, 5.42101086242752217e-20f));  // 2^-64
    return hn::IfThenZeroElse(underflow, e);
  }
}

HWY_INLINE void AddInPlaceImpl(float* HWY_RESTRICT row, const float* HWY_RESTRICT add,
                               size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::Add(hn::LoadU(d, row + i), hn::LoadU(d, add + i)), d, row + i);
  }
  for (; i < n; ++i) row[i] += add[i];
}

// The max of row[0, n) (-inf for n = 0) and whether any entry is NaN (Max alone would hide it):
// whole vectors, then the last n % Lanes entries one by one (rows of 3 keys pay no padded vector).
// With `min` non-null also the smallest entry (meaningless where there is a NaN), one Min per
// vector more, for the softmaxes' in-range test (ExpNonPositive's kInRange).
// On EMU128, Highway 1.0.3's MaxOfLanes starts from -FLT_MAX rather than -inf, so a row of -inf
// can come back as -FLT_MAX; the softmaxes catch that by their sum.
HWY_INLINE float RowMax(const float* HWY_RESTRICT row, size_t n, bool* nan, float* min = nullptr) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t full = n - n % N;
  float max = -std::numeric_limits<float>::infinity();
  float lo = std::numeric_limits<float>::infinity();
  *nan = false;
  if (full != 0) {
    auto vmax = hn::LoadU(d, row);
    auto vmin = vmax;
    auto nan_seen = hn::IsNaN(vmax);
    for (size_t j = N; j < full; j += N) {
      const auto x = hn::LoadU(d, row + j);
      vmax = hn::Max(vmax, x);
      if (min != nullptr) vmin = hn::Min(vmin, x);
      nan_seen = hn::Or(nan_seen, hn::IsNaN(x));
    }
    max = hn::GetLane(hn::MaxOfLanes(d, vmax));
    if (min != nullptr) lo = hn::GetLane(hn::MinOfLanes(d, vmin));
    *nan = !hn::AllFalse(d, nan_seen);
  }
  for (size_t j = full; j < n; ++j) {
    max = row[j] > max ? row[j] : max;
    lo = row[j] < lo ? row[j] : lo;
    *nan |= row[j] != row[j];
  }
  if (min != nullptr) *min = lo;
  return max;
}

// True if exp's every input row[j] - max (as the softmax computes it, in float) is >= -87, so
// ExpNonPositive<kInRange> applies: float subtraction is monotonic, so the smallest input is
// min - max.
HWY_INLINE bool ExpInRange(float min, float max) {
  return min - max >= kExpNoUnderflow;
}

// row[0, n) *= factor.
HWY_INLINE void ScaleInPlaceImpl(float* HWY_RESTRICT row, size_t n, float factor) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto vf = hn::Set(d, factor);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, row + i), vf), d, row + i);
  for (; i < n; ++i) row[i] *= factor;
}

// An attention sink's part of a row's softmax (ScoreModifiers::sinks): the sink logit joins the
// max, and exp(sink - max) the sum, after the row's own entries (one float exp, the same
// expression on every path, so a row's bits do not depend on the path). No sink: nothing.
struct SinkTerm {
  const float* logit = nullptr;
  // True if the sink makes the whole row NaN: NaN, or +inf (exp(inf - inf)), as torch.softmax
  // over the row and the sink gives; but a row with no visible key keeps the zero-row policy, so
  // the softmaxes decide it after the row's sum (which finds such rows on every target).
  bool Poisons() const { return logit != nullptr && !(*logit < std::numeric_limits<float>::infinity()); }
  // The row's max with the sink's (a poisoning sink is left out: its row becomes NaN anyway).
  float Max(float row_max) const {
    return logit != nullptr && *logit > row_max && !Poisons() ? *logit : row_max;
  }
  float Exp(float max) const { return logit != nullptr ? std::exp(*logit - max) : 0.0f; }
};

// sink: an attention sink's logit, or null (see SinkTerm; null gives the bits of the plain
// softmax: no operation is added). With a sink a row whose every entry is -inf has weights 0 and
// returns true (the zero-row policy), and n == 0 returns true as before.
HWY_INLINE bool SoftmaxImpl(float* HWY_RESTRICT row, size_t n, SinkTerm sink = SinkTerm()) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (n == 0) return true;
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  const size_t full = n - n % N;
  const size_t rem = n - full;

  // Pass 1: the row max, its min, and whether any entry is NaN.
  bool nan;
  float min;
  const float row_max = RowMax(row, n, &nan, &min);
  if (nan || row_max == kInf) {
    // exp(inf - inf) and exp(NaN) are NaN, so PyTorch's whole row is NaN.
    for (size_t i = 0; i < n; ++i) row[i] = std::numeric_limits<float>::quiet_NaN();
    return false;
  }
  if (row_max == -kInf) {  // every key masked: the zero-row policy, with or without a sink
    std::memset(row, 0, n * sizeof(float));
    return true;
  }
  const float max = sink.Max(row_max);

  // Pass 2: e = exp(x - max) in place, and its sum. Exp maps -inf (masked keys) to 0. The padding
  // lanes of the tail are -inf, outside kInRange: that vector takes the general exp.
  const V vmax_b = hn::Set(d, max);
  V vsum = hn::Zero(d);
  const auto exp_full = [&](auto in_range) HWY_ATTR {
    constexpr bool kInRange = decltype(in_range)::value;
    for (size_t i = 0; i < full; i += N) {
      const V e = ExpNonPositive<kInRange>(d, hn::Sub(hn::LoadU(d, row + i), vmax_b));
      hn::StoreU(e, d, row + i);
      vsum = hn::Add(vsum, e);
    }
  };
  if (ExpInRange(min, max)) {
    exp_full(std::true_type());
  } else {
    exp_full(std::false_type());
  }
  if (rem != 0) {
    const V e = ExpNonPositive(d, hn::Sub(LoadTail(d, row + full, rem, -kInf), vmax_b));
    StoreTail(e, d, row + full, rem);
    vsum = hn::Add(vsum, e);  // padding lanes are exp(-inf) = 0
  }
  const float row_sum = hn::GetLane(hn::SumOfLanes(d, vsum));
  if (!(row_sum > 0.0f)) {
    // Every entry was -inf after all: Highway 1.0.3's EMU128 MaxOfLanes starts from -FLT_MAX
    // rather than -inf, so a fully masked row can get past the check above on that target.
    // With a sink, also a row whose every weight underflowed under a far larger sink: weights 0
    // either way.
    std::memset(row, 0, n * sizeof(float));
    return true;
  }
  if (sink.Poisons()) {  // a row with a visible key beside a NaN or +inf sink: NaN, as torch's
    for (size_t i = 0; i < n; ++i) row[i] = std::numeric_limits<float>::quiet_NaN();
    return false;
  }
  const float sum = sink.logit != nullptr ? row_sum + sink.Exp(max) : row_sum;

  // Pass 3: normalize. sum >= 1 (the max entry, or the sink, contributes exp(0)), so 1/sum is
  // finite.
  ScaleInPlaceImpl(row, n, 1.0f / sum);
  return false;
}

// Row states of SoftmaxRowsImpl.
enum : uint8_t { kRowNormal = 0, kRowMasked = 1, kRowNaN = 2 };

// Softmax of `rows` contiguous rows of n floats each (a score tile of short rows, as tutorial
// shapes have), with SoftmaxImpl's results and policy per row; state[r] says which applied
// (kRowMasked: SoftmaxImpl's true). The exponentials run over the tile as one array, so rows
// shorter than a vector (n = 3) do not each pay a padded vector and tail handling.
// sink: one attention sink for every row (one head's tile), as SoftmaxImpl's; each row's max is
// kept for its exp(sink - max), at most kSinkRows rows at a time.
inline constexpr size_t kSinkRows = 64;
HWY_INLINE void SoftmaxRowsImpl(float* HWY_RESTRICT tile, size_t rows, size_t n,
                                uint8_t* HWY_RESTRICT state, SinkTerm sink = SinkTerm()) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (sink.logit != nullptr && rows > kSinkRows) {  // rows are independent: the same bits
    for (size_t r = 0; r < rows; r += kSinkRows) {
      SoftmaxRowsImpl(tile + r * n, rows - r < kSinkRows ? rows - r : kSinkRows, n, state + r,
                      sink);
    }
    return;
  }
  float sink_max[kSinkRows];  // with a sink: row r's max, the sink's included
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t full = n - n % N;  // whole vectors of a row; the rest is scalar
  bool in_range = true;           // every row's every input (ExpNonPositive's kInRange)
  for (size_t r = 0; r < rows; ++r) {
    float* HWY_RESTRICT row = tile + r * n;
    bool nan;
    float min;
    const float row_max = RowMax(row, n, &nan, &min);
    const float max = sink.Max(row_max);
    if (sink.logit != nullptr) sink_max[r] = max;
    if (nan || row_max == kInf) {
      // PyTorch's whole row is NaN (exp(NaN), exp(inf - inf)). Exp is not asked about NaN (it
      // need not return NaN): the row goes through it as -inf and is filled with NaN after.
      state[r] = kRowNaN;
      in_range = false;
      for (size_t j = 0; j < n; ++j) row[j] = -kInf;
    } else if (row_max == -kInf) {
      state[r] = kRowMasked;  // all -inf: exp gives 0 everywhere, the zero-row policy
      in_range = false;
    } else {
      state[r] = kRowNormal;
      in_range = in_range && ExpInRange(min, max);
      const auto vm = hn::Set(d, max);
      for (size_t j = 0; j < full; j += N) hn::StoreU(hn::Sub(hn::LoadU(d, row + j), vm), d, row + j);
      for (size_t j = full; j < n; ++j) row[j] -= max;
    }
  }
  const size_t total = rows * n;
  size_t i = 0;
  if (in_range) {
    for (; i + N <= total; i += N) {
      hn::StoreU(ExpNonPositive<true>(d, hn::LoadU(d, tile + i)), d, tile + i);
    }
  } else {
    for (; i + N <= total; i += N) {
      hn::StoreU(ExpNonPositive(d, hn::LoadU(d, tile + i)), d, tile + i);
    }
  }
  if (i < total) {  // padded with -inf: the general exp
    StoreTail(ExpNonPositive(d, LoadTail(d, tile + i, total - i, -kInf)), d, tile + i, total - i);
  }
  for (size_t r = 0; r < rows; ++r) {
    float* HWY_RESTRICT row = tile + r * n;
    if (state[r] == kRowNaN) {
      for (size_t j = 0; j < n; ++j) row[j] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    // SoftmaxImpl's sum, operation for operation: lane l adds the entries j = l (mod Lanes) in
    // order, the last n % Lanes through one vector padded with 0, then one SumOfLanes. So a row's
    // weights are the packed path's bits, and do not depend on how many (masked) keys follow it.
    auto vsum = hn::Zero(d);
    for (size_t j = 0; j < full; j += N) vsum = hn::Add(vsum, hn::LoadU(d, row + j));
    if (full < n) {
      HWY_ALIGN float tail[hn::MaxLanes(d)] = {};
      for (size_t j = full; j < n; ++j) tail[j - full] = row[j];
      vsum = hn::Add(vsum, hn::Load(d, tail));
    }
    const float row_sum = hn::GetLane(hn::SumOfLanes(d, vsum));
    if (!(row_sum > 0.0f)) {
      // All -inf (masked), including rows Highway 1.0.3's EMU128 MaxOfLanes let through (it
      // starts from -FLT_MAX rather than -inf, see RowMax), or with a sink every weight
      // underflowed: the zero-row policy, as SoftmaxImpl's.
      for (size_t j = 0; j < n; ++j) row[j] = 0.0f;
      state[r] = kRowMasked;
      continue;
    }
    if (sink.Poisons()) {  // as SoftmaxImpl: NaN where the row has a visible key
      for (size_t j = 0; j < n; ++j) row[j] = std::numeric_limits<float>::quiet_NaN();
      state[r] = kRowNaN;
      continue;
    }
    const float sum = sink.logit != nullptr ? row_sum + sink.Exp(sink_max[r]) : row_sum;
    ScaleInPlaceImpl(row, n, 1.0f / sum);  // sum >= 1: the max entry (or sink) contributes exp(0)
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace headscope
HWY_AFTER_NAMESPACE();

#endif  // HEADSCOPE_KERNELS_SOFTMAX_INL_H_
