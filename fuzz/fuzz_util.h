// Helpers shared by the libFuzzer harnesses: invariant failures that libFuzzer reports as
// crashes, and the comparison of the fast path's results with the Eigen reference's.
#ifndef HEADSCOPE_FUZZ_FUZZ_UTIL_H_
#define HEADSCOPE_FUZZ_FUZZ_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "headscope/mha.h"
#include "headscope/status.h"
#include "headscope/tensor.h"

namespace headscope::fuzz {

// Relative error allowed between the fast path and the reference when the call's values are
// moderate (see Tier): max |fast - ref| / max(1, max |ref|) per tensor. Both compute in float32
// with different summation orders (SIMD FMA panels vs Eigen), so exact equality is not expected;
// 1e-3 is ~10^4 float32 ulps of slack, far above rounding noise on moderate inputs (the worst
// seen is printed at exit) and far below any indexing or masking mistake, which moves results by
// O(1).
inline constexpr double kTolerance = 1e-3;

// How strictly a call's results can be compared, decided by the values it was given.
enum class Tier {
  kModerate,   // every value finite and scores provably small: NaN/inf at the same places, the
               // tolerance above, and no NaN/inf in the results at all
  kNonFinite,  // NaN or +-inf in data, weights or masks (beyond -inf mask entries), other values
               // moderate: NaN/inf must still sit at the same places (their propagation does not
               // depend on summation order), finite values within the tolerance
  kExtreme,    // huge finite values (or scores that may be huge): float32 overflow and
               // cancellation depend on the order of operations, so only statuses and shapes
};

// Tracks the values a call was given and picks its Tier. A bound on |score| is kept from the
// largest input, weight and bias magnitudes: scores beyond ~2000 make softmax's result depend on
// float32 rounding of the scores themselves (a near tie of two huge scores flips), which is
// ill-conditioning rather than a bug.
class Magnitudes {
 public:
  void Input(float x) { Note(x, &max_input_); }
  void Weight(float x) { Note(x, &max_weight_); }
  void Bias(float x) { Note(x, &max_bias_); }
  // Float mask entries: -inf is how masks block, not an unusual value; other non-finite values
  // (NaN, +inf) are.
  void Mask(float x) {
    if (x == -INFINITY) return;
    Note(x, &max_mask_);
  }
  void NoteNonFinite() { nonfinite_ = true; }
  void NoteExtreme() { extreme_ = true; }

  Tier tier(double max_in_dim, double head_dim) const {
    if (extreme_) return Tier::kExtreme;
    const double proj = max_input_ * max_weight_ * max_in_dim + max_bias_;
    const double score_bound = proj * proj * std::sqrt(std::max(1.0, head_dim)) + max_mask_;
    if (!(score_bound <= 2000)) return Tier::kExtreme;
    return nonfinite_ ? Tier::kNonFinite : Tier::kModerate;
  }

 private:
  void Note(float x, double* max) {
    if (!std::isfinite(x)) {
      nonfinite_ = true;
    } else {
      *max = std::max(*max, std::fabs(static_cast<double>(x)));
      if (std::fabs(x) > 1e4f) extreme_ = true;
    }
  }
  double max_input_ = 0, max_weight_ = 0, max_bias_ = 0, max_mask_ = 0;
  bool nonfinite_ = false, extreme_ = false;
};

// Prints the failed invariant (libFuzzer then prints the input that caused it) and aborts.
[[noreturn]] inline void Fail(const char* fuzzer, const std::string& what,
                              const std::string& context) {
  std::fprintf(stderr, "\n%s: INVARIANT VIOLATED: %s\n  while: %s\n", fuzzer, what.c_str(),
               context.c_str());
  std::fflush(stderr);
  std::abort();
}

// A non-OK status must carry a message naming what is wrong, in "CODE: message" form.
inline bool IsClearError(const Status& s) {
  if (s.ok() || s.message().empty()) return false;
  const std::string text = s.ToString();
  const std::string code = StatusCodeName(s.code());
  return text.compare(0, code.size(), code) == 0 && text.size() > code.size() + 2;
}

inline bool SameClass(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return true;
}

struct Worst {
  double error = 0;
  long compared = 0;
};

// Compares n values of `got` (fast path) with `want` (reference) under `tier`. Returns an empty
// string if they agree, else what differs.
inline std::string CompareValues(const char* name, const float* got, const float* want, size_t n,
                                 Tier tier, Worst* worst) {
  if (tier == Tier::kExtreme) return "";
  double scale = 1.0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isfinite(want[i])) scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  double err = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    if (tier == Tier::kModerate && (!std::isfinite(got[i]) || !std::isfinite(want[i]))) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "%s[%zu]: fast %g, reference %g: non-finite result from "
                    "finite, moderate inputs", name, i, got[i], want[i]);
      return buf;
    }
    if (!SameClass(got[i], want[i])) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "%s[%zu]: fast %g, reference %g: NaN/inf differ", name, i,
                    got[i], want[i]);
      return buf;
    }
    if (!std::isfinite(got[i])) continue;
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]) / scale;
    if (e > err) {
      err = e;
      at = i;
    }
  }
  if (worst != nullptr) {
    worst->error = std::max(worst->error, err);
    ++worst->compared;
  }
  if (err > kTolerance) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "%s[%zu]: fast %.9g, reference %.9g: relative error %.3g > %g",
                  name, at, got[at], want[at], err, kTolerance);
    return buf;
  }
  return "";
}

// Output and weights of two results: same shapes, buffers as large as their shapes, values as
// CompareValues says.
inline std::string CompareResults(const ForwardResult& fast, const ForwardResult& ref, Tier tier,
                                  Worst* worst) {
  if (fast.output_shape != ref.output_shape) {
    return "output shape: fast " + fast.output_shape.ToString() + ", reference " +
           ref.output_shape.ToString();
  }
  if (fast.weights_shape != ref.weights_shape) {
    return "weights shape: fast " + fast.weights_shape.ToString() + ", reference " +
           ref.weights_shape.ToString();
  }
  const size_t out_n = static_cast<size_t>(fast.output_shape.NumElements());
  if (fast.output.size() != out_n || ref.output.size() != out_n) {
    return "output buffer sizes " + std::to_string(fast.output.size()) + " / " +
           std::to_string(ref.output.size()) + " for shape " + fast.output_shape.ToString();
  }
  std::string why = CompareValues("output", fast.output.data(), ref.output.data(), out_n, tier,
                                  worst);
  if (!why.empty() || !fast.has_weights()) return why;
  const size_t w_n = static_cast<size_t>(fast.weights_shape.NumElements());
  if (fast.weights.size() != w_n || ref.weights.size() != w_n) {
    return "weights buffer sizes " + std::to_string(fast.weights.size()) + " / " +
           std::to_string(ref.weights.size()) + " for shape " + fast.weights_shape.ToString();
  }
  return CompareValues("weights", fast.weights.data(), ref.weights.data(), w_n, tier, worst);
}

}  // namespace headscope::fuzz

#endif  // HEADSCOPE_FUZZ_FUZZ_UTIL_H_
