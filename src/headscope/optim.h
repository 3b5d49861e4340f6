// Optimizers: torch 1.13's AdamW and SGD (momentum 0, no weight decay) with optional global-norm
// gradient clipping as torch.nn.utils.clip_grad_norm_, giving torch's float32 numbers (issue 14;
// the contract is tools/tiny_transformer.py's docstring).
//
//   headscope::OptimizerConfig config;         // AdamW with torch's defaults
//   config.lr = 1e-2;
//   config.beta2 = 0.98;
//   config.clip_grad_norm = 1.0;
//   std::unique_ptr<headscope::Optimizer> opt;
//   HEADSCOPE_RETURN_IF_ERROR(headscope::Optimizer::Create(config, &opt));
//   std::vector<headscope::OptimizerParam> params = {{w, dw, n_w, "w"}, {b, db, n_b, "b"}};
//   headscope::OptimizerStepResult step;
//   HEADSCOPE_RETURN_IF_ERROR(opt->Step(params, &step));  // step.grad_norm: before clipping
//
// Where the state lives. The Optimizer owns it: per parameter slot (the k-th entry of the list
// Step is given) exp_avg and exp_avg_sq, and one step count, created at the first step (zeros, as
// torch creates its state lazily) and kept until Reset() or the Optimizer is destroyed. The
// parameters and their gradients stay wherever their owner keeps them; Step reads and writes them
// through the list. Why not in ParameterStore, beside the weights:
//   - Lifetime is the optimizer's, as in torch: setOptimizer() makes a new optimizer, whose state
//     starts at zero whatever the old one held (torch.optim.AdamW(model.parameters()) again);
//     SGD has no state; a model that only runs forward (every page but the training one) carries
//     none; loading a state_dict changes weights and keeps the moments (torch keeps
//     optimizer.state across model.load_state_dict too). The store's staged loads
//     (CopyLoadedFrom) copy weights only and need not know about moments.
//   - The slot list is the model's to make: a Transformer passes one slot per owned entry of its
//     one store, in torch's named_parameters() order (in_proj_weight, not its q/k/v_proj_weight
//     aliases), and the global gradient norm runs across them in that order.
//   - Writes to a store's weights must bump its versions (packed panels are stamped with them):
//     a model takes each slot's `param` from ParameterStore::MutableData, which does that.
// Gradients are the backward pass's; Step only reads them, from wherever they live (a
// Transformer's: one buffer laid out as its store, each slot's gradient at its entry's offset).
// Slots must not overlap.
//
// Arithmetic, per element, exactly torch 1.13's _single_tensor_adamw / _single_tensor_sgd on
// float32 tensors as its AVX2 CPU kernels compute them (what Debian's torch runs on an x86 CPU
// with AVX2): float where torch uses tensor ops, double where it uses Python floats, and fused
// multiply-adds where its kernels fuse (add with alpha is Vectorized fmadd, addcmul contracts to
// one):
//   double: bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (t = the step, from 1), step_size = lr / bc1
//   float:  p  = p * float(1 - lr * weight_decay)
//           m  = fma(g, float(1 - beta1), m * float(beta1))
//           v  = fma(float(1 - beta2) * g, g, v * float(beta2))
//           p  = p + (float(-step_size) * m) / (sqrt(v) / float(sqrt(bc2)) + float(eps))
//   SGD:    p  = fma(g, float(-lr), p)
// (torch's non-AVX2 DEFAULT kernels round those two products separately: against them an element
// can differ by an ulp per operation.) The step count is an int64; torch's float32 step tensor
// stops counting at 2^24 steps.
// Clipping (before the step, when clip_grad_norm > 0): the norm is GlobalGradNorm's (double);
// as torch, in float, c = (1 / (float(norm) + float(1e-6))) * float(max_norm), and when c < 1
// every gradient is used as float(g * c) (the caller's gradients are not modified). torch's own
// norm is accumulated in float (8 lanes per tensor, then the norm of the tensors' norms), so it
// can differ from float(our norm) in the last bit; where its float sum of squares overflows (a
// gradient above ~1.8e19) its coefficient is 0, while here the norm stays finite and clipping
// works (for a norm beyond float's range c = float(max_norm / norm) in double).
// Apart from std::pow (bc1, bc2: the C library's, glibc and musl agree to an ulp of the double),
// every operation is one correctly rounded IEEE operation, so native and WebAssembly builds give
// the same bits; the file is compiled with -ffp-contract=off so no other operation is fused.
//
// Non-finite steps. Step is all or nothing: it computes every new weight and moment first (a
// pass that writes nothing, then the same arithmetic again writing; 2^20 AdamW floats take about
// 7 ms natively and 14 ms in WebAssembly here, norm included) and writes nothing (weights,
// moments, step count) unless all of them are finite; otherwise it
// returns kInvalidArgument and the call is as if it had not happened (the norm is still reported
// in result->grad_norm, result->stepped is false). The status names the cause:
//   - a NaN or infinite gradient element (the norm is then non-finite): Arg::kGrads,
//     "grads['<name>']: element i is nan ...";
//   - a finite gradient whose square overflows exp_avg_sq (|g| above 1.8e19 / sqrt(1 - beta2),
//     unclipped; torch would keep an infinite moment and freeze that weight for good):
//     Arg::kGrads;
//   - a weight that was already non-finite: Arg::kStateDict, "state_dict['<name>']: element i";
//   - otherwise a finite step that overflows (lr or lr * weight_decay too large for float32):
//     Arg::kLr, with the element and its values.
#ifndef HEADSCOPE_OPTIM_H_
#define HEADSCOPE_OPTIM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "headscope/status.h"
#include "headscope/tensor.h"

namespace headscope {

// torch.optim.AdamW's defaults (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01).
// SGD reads lr and clip_grad_norm only (momentum 0, no weight decay); the other fields must still
// be valid (their defaults are).
struct OptimizerConfig {
  enum Kind : int { kAdamW, kSgd };  // int: a binding may pass any value, which is refused
  Kind kind = kAdamW;
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  double clip_grad_norm = 0;  // max_norm of clip_grad_norm_; 0: no clipping
};

// lr finite and >= 0; betas in [0, 1); eps finite and > 0 in float32 (a smaller eps rounds to 0
// and divides by it); weight_decay finite and >= 0; clip_grad_norm finite and >= 0. Errors name
// the option (Arg::kLr, kBetas, kEps, kWeightDecay, kClipGradNorm; kOptimizer for a bad kind).
Status ValidateOptimizerConfig(const OptimizerConfig& config);

// One parameter slot: `n` floats of weights updated in place and their gradient (read only).
// `name` appears in messages ("grads['w']"); empty: "#k", its index in the list.
struct OptimizerParam {
  float* param = nullptr;
  const float* grad = nullptr;
  size_t n = 0;
  std::string_view name;
};

// The L2 norm of all gradients as one vector: sqrt of the sum of double(g)^2 over the slots in
// order, each slot's elements in order, in double. Each square is exact, so the result depends
// only on the concatenated gradient: how it is split into slots does not change a bit. Non-finite
// iff a gradient element is (float squares cannot overflow double).
double GlobalGradNorm(const std::vector<OptimizerParam>& params);

struct OptimizerStepResult {
  double grad_norm = 0;   // GlobalGradNorm before clipping (what trainStep reports)
  float clip_coef = 1;    // the gradients' factor: 1 unless clipping applied
  bool stepped = false;   // false when the step was refused
};

class Optimizer {
 public:
  // ValidateOptimizerConfig's errors.
  static Status Create(const OptimizerConfig& config, std::unique_ptr<Optimizer>* out);

  const OptimizerConfig& config() const { return config_; }
  // Steps taken (torch's state['step']).
  int64_t steps() const { return steps_; }

  // One step over every slot (see the header comment for the arithmetic and the non-finite
  // rule). The first step fixes the list's length and sizes; later steps must pass the same
  // (kShapeMismatch otherwise, changing nothing). kResourceExhausted when the first AdamW step
  // cannot allocate the moments. `result` may be null.
  Status Step(const std::vector<OptimizerParam>& params, OptimizerStepResult* result);

  // AdamW's moments of slot k (null before the first step, for SGD and for an empty slot).
  const float* exp_avg(size_t k) const;
  const float* exp_avg_sq(size_t k) const;
  // Forgets the moments and the step count (the next Step starts as the first).
  void Reset();

 private:
  explicit Optimizer(const OptimizerConfig& config) : config_(config) {}
  struct Slot {
    AlignedBuffer exp_avg, exp_avg_sq;
    size_t n = 0;
  };
  Status CheckList(const std::vector<OptimizerParam>& params) const;
  Status InitState(const std::vector<OptimizerParam>& params);

  OptimizerConfig config_;
  int64_t steps_ = 0;
  std::vector<Slot> slots_;  // empty until the first step
  bool initialized_ = false;
};

}  // namespace headscope

#endif  // HEADSCOPE_OPTIM_H_
