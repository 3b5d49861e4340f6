// Compiled with -ffp-contract=off (CMakeLists.txt): the only fused multiply-adds are the std::fma
// calls, where torch's kernels fuse (see optim.h).
#include "headscope/optim.h"

#include "headscope/schema.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#if defined(__wasm_simd128__)
#include <wasm_simd128.h>
#endif

namespace headscope {
namespace {

// The shortest %g text that reads back as the same double ("0.1", "1e+39", "nan").
std::string Num(double v) {
  if (std::isnan(v)) return "nan";  // (printf writes "-nan" for a NaN with its sign bit set)
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (!std::isfinite(v) || std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}
// The same for a float32 value: the shortest text that reads back as the same float.
std::string Num(float v) {
  if (std::isnan(v)) return "nan";
  char buf[40];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(v));
    if (!std::isfinite(v) || std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

// "grads['w']" / "state_dict['w']"; an unnamed slot by its index: "grads[2]".
std::string Entry(Arg arg, const std::vector<OptimizerParam>& params, size_t k) {
  const std::string_view name = params[k].name;
  return std::string(ArgName(arg)) +
         (name.empty() ? "[" + std::to_string(k) + "]" : "['" + std::string(name) + "']");
}

constexpr char kRefused[] = "; the step was refused and changed nothing (weights, moments, steps)";

// AdamW's per-step constants, rounded as torch rounds them (see optim.h).
struct AdamW {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bc2_sqrt, eps;

  AdamW(const OptimizerConfig& c, int64_t step) {
    const double t = static_cast<double>(step);
    const double lr_wd = c.lr * c.weight_decay;
    const double bc1 = 1.0 - std::pow(c.beta1, t);
    const double bc2 = 1.0 - std::pow(c.beta2, t);
    const double step_size = c.lr / bc1;
    decay = static_cast<float>(1.0 - lr_wd);
    beta1 = static_cast<float>(c.beta1);
    one_minus_beta1 = static_cast<float>(1.0 - c.beta1);
    beta2 = static_cast<float>(c.beta2);
    one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
    neg_step_size = static_cast<float>(-step_size);
    bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    eps = static_cast<float>(c.eps);
  }

  // torch's sequence on one element: p.mul_(1 - lr*wd); exp_avg.mul_(beta1).add_(g, alpha=1 -
  // beta1); exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2); denom = (exp_avg_sq.sqrt() /
  // bc2_sqrt).add_(eps); p.addcdiv_(exp_avg, denom, value=-step_size).
  void Element(float p, float g, float m, float v, float* p_out, float* m_out, float* v_out) const {
    const float decayed = p * decay;
    const float m1 = std::fma(g, one_minus_beta1, m * beta1);
    const float v1 = std::fma(one_minus_beta2 * g, g, v * beta2);
    const float denom = std::sqrt(v1) / bc2_sqrt + eps;
    *p_out = decayed + (neg_step_size * m1) / denom;
    *m_out = m1;
    *v_out = v1;
  }
};

struct Failure {
  size_t k = 0, i = 0;
};

#if defined(__wasm_simd128__)
// AdamW::Element on 4 lanes, the same bits (every operation but the fused multiply-adds is one
// IEEE operation, as in the scalar code; WebAssembly contracts nothing). std::fma is musl's
// fmaf there, in software: the exact product a * b in double plus c, rounded to double and
// then to float, which is the correctly rounded fma unless the double lands exactly halfway
// between two floats (its low 29 bits 0x10000000), where musl corrects the last bit. So: the
// lanes in double, and a group with such a lane (about 1 in 2^28) goes to the scalar code.
// Returns false for such a group (nothing written).
inline bool FmaLanes(v128_t a, v128_t b, v128_t c, v128_t* out) {
  const v128_t halfway = wasm_i64x2_splat(0x10000000), low = wasm_i64x2_splat(0x1fffffff);
  const auto half = [&](v128_t x) { return wasm_i32x4_shuffle(x, x, 2, 3, 0, 1); };
  const v128_t lo = wasm_f64x2_add(
      wasm_f64x2_mul(wasm_f64x2_promote_low_f32x4(a), wasm_f64x2_promote_low_f32x4(b)),
      wasm_f64x2_promote_low_f32x4(c));
  const v128_t hi = wasm_f64x2_add(
      wasm_f64x2_mul(wasm_f64x2_promote_low_f32x4(half(a)), wasm_f64x2_promote_low_f32x4(half(b))),
      wasm_f64x2_promote_low_f32x4(half(c)));
  const v128_t tie = wasm_v128_or(wasm_i64x2_eq(wasm_v128_and(lo, low), halfway),
                                  wasm_i64x2_eq(wasm_v128_and(hi, low), halfway));
  if (wasm_v128_any_true(tie)) return false;
  *out = wasm_i32x4_shuffle(wasm_f32x4_demote_f64x2_zero(lo), wasm_f32x4_demote_f64x2_zero(hi), 0,
                            1, 4, 5);
  return true;
}

// Elements [i, i + 4) of one slot: false if a lane needs the scalar code (an fma tie, or, when
// checking, a value that is not finite).
template <bool kWrite>
inline bool AdamWLanes(const AdamW& a, float* p, const float* g, float* m, float* v, bool clip,
                       float coef) {
  v128_t gi = wasm_v128_load(g);
  if (clip) gi = wasm_f32x4_mul(gi, wasm_f32x4_splat(coef));
  const v128_t pv = wasm_v128_load(p), mv = wasm_v128_load(m), vv = wasm_v128_load(v);
  const v128_t decayed = wasm_f32x4_mul(pv, wasm_f32x4_splat(a.decay));
  v128_t m1, v1;
  if (!FmaLanes(gi, wasm_f32x4_splat(a.one_minus_beta1), wasm_f32x4_mul(mv, wasm_f32x4_splat(a.beta1)),
                &m1) ||
      !FmaLanes(wasm_f32x4_mul(wasm_f32x4_splat(a.one_minus_beta2), gi), gi,
                wasm_f32x4_mul(vv, wasm_f32x4_splat(a.beta2)), &v1)) {
    return false;
  }
  const v128_t denom = wasm_f32x4_add(
      wasm_f32x4_div(wasm_f32x4_sqrt(v1), wasm_f32x4_splat(a.bc2_sqrt)), wasm_f32x4_splat(a.eps));
  const v128_t np = wasm_f32x4_add(
      decayed, wasm_f32x4_div(wasm_f32x4_mul(wasm_f32x4_splat(a.neg_step_size), m1), denom));
  if (kWrite) {
    wasm_v128_store(p, np);
    wasm_v128_store(m, m1);
    wasm_v128_store(v, v1);
    return true;
  }
  const v128_t inf = wasm_f32x4_splat(std::numeric_limits<float>::infinity());
  const v128_t finite = wasm_v128_and(
      wasm_v128_and(wasm_f32x4_lt(wasm_f32x4_abs(np), inf), wasm_f32x4_lt(wasm_f32x4_abs(m1), inf)),
      wasm_f32x4_lt(wasm_f32x4_abs(v1), inf));
  return wasm_i32x4_all_true(finite);
}
#endif

// One AdamW pass over every slot with gradients times `coef` (clip: coef < 1). kWrite false:
// computes and writes nothing, returning false at the first element whose new weight or moments
// are not finite (its place in *failure); kWrite true: writes every element.
template <bool kWrite>
bool AdamWPass(const AdamW& a, const std::vector<OptimizerParam>& params, float* const* m,
               float* const* v, bool clip, float coef, Failure* failure) {
  for (size_t k = 0; k < params.size(); ++k) {
    float* p = params[k].param;
    const float* g = params[k].grad;
    float* mk = m[k];
    float* vk = v[k];
    const size_t n = params[k].n;
    // Elements [from, to) one by one; false at the first that is not finite (when checking).
    const auto scalar = [&](size_t from, size_t to) {
      for (size_t i = from; i < to; ++i) {
        const float gi = clip ? g[i] * coef : g[i];
        float np, nm, nv;
        a.Element(p[i], gi, mk[i], vk[i], &np, &nm, &nv);
        if (kWrite) {
          p[i] = np;
          mk[i] = nm;
          vk[i] = nv;
        } else if (!(std::isfinite(np) && std::isfinite(nm) && std::isfinite(nv))) {
          *failure = {k, i};
          return false;
        }
      }
      return true;
    };
    size_t i = 0;
#if defined(__wasm_simd128__)
    // (wasm_v128_load / store are unaligned accesses.) A group a lane of which needs the scalar
    // code runs through it, in order, so a failure is still the first element's.
    for (; i + 4 <= n; i += 4) {
      if (!AdamWLanes<kWrite>(a, p + i, g + i, mk + i, vk + i, clip, coef) && !scalar(i, i + 4)) {
        return false;
      }
    }
#endif
    if (!scalar(i, n)) return false;
  }
  return true;
}

// SGD, momentum 0, no weight decay: p.add_(g, alpha=-lr), one fused multiply-add.
template <bool kWrite>
bool SgdPass(float neg_lr, const std::vector<OptimizerParam>& params, bool clip, float coef,
             Failure* failure) {
  for (size_t k = 0; k < params.size(); ++k) {
    float* p = params[k].param;
    const float* g = params[k].grad;
    for (size_t i = 0; i < params[k].n; ++i) {
      const float gi = clip ? g[i] * coef : g[i];
      const float np = std::fma(gi, neg_lr, p[i]);
      if (kWrite) {
        p[i] = np;
      } else if (!std::isfinite(np)) {
        *failure = {k, i};
        return false;
      }
    }
  }
  return true;
}

}  // namespace

Status ValidateOptimizerConfig(const OptimizerConfig& c) {
  // The schema's field checks (schema.cc): the kind, lr, betas, eps, weight_decay and
  // clip_grad_norm in their ranges (every field, whatever the kind: SGD's unused ones keep
  // valid defaults); then eps as a float32, which the table does not say.
  HEADSCOPE_RETURN_IF_ERROR(CheckFields(OptimizerSchema(), &c));
  if (!(static_cast<float>(c.eps) > 0)) {
    return ArgError(StatusCode::kInvalidArgument, Arg::kEps,
                    Num(c.eps) + " is 0 in float32 (the smallest positive float32 is " +
                        Num(std::numeric_limits<float>::denorm_min()) + ")");
  }
  return Status::Ok();
}

double GlobalGradNorm(const std::vector<OptimizerParam>& params) {
  double sum = 0;
  for (const OptimizerParam& p : params) {
    if (p.grad == nullptr) continue;
    for (size_t i = 0; i < p.n; ++i) {
      const double g = p.grad[i];
      sum += g * g;
    }
  }
  return std::sqrt(sum);
}

Status Optimizer::Create(const OptimizerConfig& config, std::unique_ptr<Optimizer>* out) {
  HEADSCOPE_RETURN_IF_ERROR(ValidateOptimizerConfig(config));
  out->reset(new Optimizer(config));
  return Status::Ok();
}

const float* Optimizer::exp_avg(size_t k) const {
  return k < slots_.size() ? slots_[k].exp_avg.data() : nullptr;
}

const float* Optimizer::exp_avg_sq(size_t k) const {
  return k < slots_.size() ? slots_[k].exp_avg_sq.data() : nullptr;
}

void Optimizer::Reset() {
  slots_.clear();
  steps_ = 0;
  initialized_ = false;
}

Status Optimizer::CheckList(const std::vector<OptimizerParam>& params) const {
  if (initialized_ && params.size() != slots_.size()) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kGrads,
                    "expected the " + std::to_string(slots_.size()) +
                        " parameters of the optimizer's first step, got " +
                        std::to_string(params.size()) + " (step the same list every time)");
  }
  for (size_t k = 0; k < params.size(); ++k) {
    const OptimizerParam& p = params[k];
    if (initialized_ && p.n != slots_[k].n) {
      return Status(StatusCode::kShapeMismatch, Arg::kGrads,
                    Entry(Arg::kGrads, params, k) + ": expected " + std::to_string(slots_[k].n) +
                        " floats (its size at the optimizer's first step), got " +
                        std::to_string(p.n));
    }
    if (p.n > 0 && (p.param == nullptr || p.grad == nullptr)) {
      return Status(StatusCode::kInvalidArgument, Arg::kGrads,
                    Entry(Arg::kGrads, params, k) + ": " +
                        (p.param == nullptr ? "the weights are" : "the gradient is") +
                        " null for " + std::to_string(p.n) + " floats");
    }
  }
  return Status::Ok();
}

Status Optimizer::Step(const std::vector<OptimizerParam>& params, OptimizerStepResult* result) {
  OptimizerStepResult local;
  OptimizerStepResult& r = result != nullptr ? *result : local;
  r = OptimizerStepResult();
  HEADSCOPE_RETURN_IF_ERROR(CheckList(params));

  // The norm first: clipping needs it before any gradient is used, and a non-finite norm means a
  // non-finite gradient element.
  r.grad_norm = GlobalGradNorm(params);
  if (!std::isfinite(r.grad_norm)) {
    for (size_t k = 0; k < params.size(); ++k) {
      for (size_t i = 0; i < params[k].n; ++i) {
        const float g = params[k].grad[i];
        if (!std::isfinite(g)) {
          return Status(StatusCode::kInvalidArgument, Arg::kGrads,
                        Entry(Arg::kGrads, params, k) + ": element " + std::to_string(i) +
                            " is " + Num(g) + " (the gradient norm is " + Num(r.grad_norm) +
                            ")" + kRefused);
        }
      }
    }
  }
  // torch: clip_coef = max_norm / (total_norm + 1e-6) on the float32 norm (the division is
  // Tensor.__rdiv__: reciprocal, then times max_norm), clamped to 1.
  const double max_norm = config_.clip_grad_norm;
  if (max_norm > 0) {
    const float norm = static_cast<float>(r.grad_norm);
    const float c = std::isfinite(norm)
                        ? (1.0f / (norm + static_cast<float>(1e-6))) * static_cast<float>(max_norm)
                        : static_cast<float>(max_norm / r.grad_norm);
    r.clip_coef = std::min(c, 1.0f);
  }
  const bool clip = r.clip_coef < 1.0f;

  // The first step's state: zeros, kept only if the step is taken.
  std::vector<Slot> fresh;
  std::vector<Slot>* slots = &slots_;
  if (!initialized_) {
    fresh.resize(params.size());
    for (size_t k = 0; k < params.size(); ++k) {
      Slot& s = fresh[k];
      s.n = params[k].n;
      if (config_.kind != OptimizerConfig::kAdamW || s.n == 0) continue;
      if (!s.exp_avg.Resize(s.n) || !s.exp_avg_sq.Resize(s.n)) {
        return Status(StatusCode::kResourceExhausted,
                      "optimizer state: out of memory allocating the moments of " +
                          Entry(Arg::kStateDict, params, k) + " (2 x " + std::to_string(s.n) +
                          " floats)");
      }
      std::memset(s.exp_avg.data(), 0, s.n * sizeof(float));
      std::memset(s.exp_avg_sq.data(), 0, s.n * sizeof(float));
    }
    slots = &fresh;
  }

  Failure bad;
  bool ok;
  const int64_t step = steps_ + 1;
  const AdamW adamw(config_, step);
  const float neg_lr = static_cast<float>(-config_.lr);
  std::vector<float*> m, v;
  if (config_.kind == OptimizerConfig::kAdamW) {
    m.resize(params.size());
    v.resize(params.size());
    for (size_t k = 0; k < params.size(); ++k) {
      m[k] = (*slots)[k].exp_avg.data();
      v[k] = (*slots)[k].exp_avg_sq.data();
    }
    ok = AdamWPass<false>(adamw, params, m.data(), v.data(), clip, r.clip_coef, &bad);
  } else {
    ok = SgdPass<false>(neg_lr, params, clip, r.clip_coef, &bad);
  }

  if (!ok) {
    const OptimizerParam& p = params[bad.k];
    const float w = p.param[bad.i];
    const float g = clip ? p.grad[bad.i] * r.clip_coef : p.grad[bad.i];
    const std::string at = "element " + std::to_string(bad.i);
    if (!std::isfinite(w)) {
      return Status(StatusCode::kInvalidArgument, Arg::kStateDict,
                    Entry(Arg::kStateDict, params, bad.k) + ": " + at + " is already " + Num(w) +
                        " before the step" + kRefused);
    }
    float nw = 0, nm = 0, nv = 0;
    if (config_.kind == OptimizerConfig::kAdamW) {
      adamw.Element(w, g, m[bad.k][bad.i], v[bad.k][bad.i], &nw, &nm, &nv);
      if (!std::isfinite(nv)) {
        return Status(StatusCode::kInvalidArgument, Arg::kGrads,
                      Entry(Arg::kGrads, params, bad.k) + ": " + at + " is " + Num(g) +
                          ", whose square overflows exp_avg_sq in float32 (" +
                          ArgName(Arg::kClipGradNorm) + " bounds the gradients)" + kRefused);
      }
    } else {
      nw = std::fma(g, neg_lr, w);
    }
    std::string detail = Num(config_.lr) + " is too large for float32: " +
                         Entry(Arg::kStateDict, params, bad.k) + " " + at + " would become " +
                         Num(nw) + " (it is " + Num(w) + ", its gradient " + Num(g);
    if (config_.kind == OptimizerConfig::kAdamW && config_.weight_decay > 0) {
      detail += std::string(", the decay factor 1 - ") + ArgName(Arg::kLr) + " * " +
                ArgName(Arg::kWeightDecay) + " is " + Num(adamw.decay);
    }
    return ArgError(StatusCode::kInvalidArgument, Arg::kLr, detail + ")" + kRefused);
  }

  if (!initialized_) {
    slots_ = std::move(fresh);  // the vector's storage moves: m and v still point at the moments
    initialized_ = true;
  }
  if (config_.kind == OptimizerConfig::kAdamW) {
    AdamWPass<true>(adamw, params, m.data(), v.data(), clip, r.clip_coef, &bad);
  } else {
    SgdPass<true>(neg_lr, params, clip, r.clip_coef, &bad);
  }
  steps_ = step;
  r.stepped = true;
  return Status::Ok();
}

}  // namespace headscope
