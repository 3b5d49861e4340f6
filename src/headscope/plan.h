// CallPlan: one forward call's arguments validated and resolved into sizes and strides. Every
// check of user input happens here, once, so kernels can assume valid input; the fast path and
// the Eigen reference both start from the same plan.
#ifndef HEADSCOPE_PLAN_H_
#define HEADSCOPE_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "headscope/config.h"
#include "headscope/status.h"
#include "headscope/tensor.h"

namespace headscope {

// Where row (batch n, position i) of a (L, E)-like input starts: data + n * batch + i * seq.
struct RowLayout {
  size_t seq = 0;
  size_t batch = 0;
  size_t Row(size_t n, size_t i) const { return n * batch + i * seq; }
};

struct CallPlan {
  bool batched = false;
  size_t batch = 0;        // N (1 when unbatched)
  size_t q_len = 0;        // L
  size_t kv_len = 0;       // S, keys given by the caller
  size_t kv_total = 0;     // S' = S + add_bias_kv + add_zero_attn
  size_t embed = 0;        // E
  size_t kdim = 0, vdim = 0;
  size_t heads = 0, head_dim = 0;
  size_t kv_heads = 0;  // G: key/value heads (= heads unless grouped-query)
  size_t kv_embed = 0;  // G * head_dim: the width of the projected keys and values (E when G = H)
  RowLayout query, key, value, output;  // strides in floats; output uses the query's layout
  Shape output_shape;
  Shape weights_shape;  // rank 0 when need_weights is false

  // Masks after validation. attn_mask_per_head: 3-D, slice n * heads + h (unbatched: h).
  MaskType attn_mask_type = MaskType::kNone;
  bool attn_mask_per_head = false;
  MaskType key_padding_type = MaskType::kNone;
  bool causal = false;
  bool alibi = false;  // ForwardOptions::alibi and window, after validation
  size_t window = 0;
  const float* head_gates = nullptr;  // [H] after validation; null when not given (all 1)
  bool head_stats = false;
  Shape head_stats_shape;  // (N, H), or (H) unbatched; rank 0 when head_stats is false

  // Buffer sizes in floats, saturating at UINT64_MAX: pass them through AddBytes (which refuses
  // anything over the call limit) before using them as size_t.
  uint64_t output_floats() const;
  uint64_t weights_floats(bool average) const;
};

// Validates the query/key/value shapes, masks and options against the config and fills `plan`.
// Errors name the argument, the shape received and the shape expected.
Status PlanCall(const MhaConfig& config, const TensorView& query, const TensorView& key,
                const TensorView& value, const ForwardOptions& options, CallPlan* plan);

// Upper bound on the bytes one call may allocate (workspace and results). Calls that would need
// more are refused with kResourceExhausted before anything is allocated. Defaults to 2 GiB in
// WebAssembly (its 32-bit address space holds 4 GiB in all) and 16 GiB natively.
size_t MaxCallBytes();
void SetMaxCallBytes(size_t bytes);

// Product of sizes, UINT64_MAX if it overflows: huge shapes with an empty dimension elsewhere
// must not wrap around to a small buffer.
uint64_t SaturatingProduct(std::initializer_list<uint64_t> factors);

// Adds `floats` floats to a byte count: false if the total would exceed `limit`.
bool AddBytes(size_t* total, uint64_t floats, size_t limit);

}  // namespace headscope

#endif  // HEADSCOPE_PLAN_H_
