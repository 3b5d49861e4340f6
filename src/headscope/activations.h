// AttentionActivations: the buffers one attention layer's forward pass works in; CallContext:
// what a call runs with (those activations, the thread pool, the byte limit).
//
// Both belong to whoever runs the pass, not to the weights: MultiheadAttention keeps one
// CallContext for its own Forward and Trace (filled from the process-wide SetThreadCount and
// SetMaxCallBytes at each call), and a model of several layers can hand one context to every
// layer's call in turn, so they share one set of buffers sized for the largest of them and one
// limit. A context serves one call at a time.
#ifndef HEADSCOPE_ACTIVATIONS_H_
#define HEADSCOPE_ACTIVATIONS_H_

#include <cstddef>

#include "headscope/parallel.h"
#include "headscope/plan.h"
#include "headscope/tensor.h"

namespace headscope {

// One call's intermediates between the input and the output projection. S' = S + the extra
// keys of add_bias_kv / add_zero_attn; E = H * hd. The pointers are set by MultiheadAttention's
// ReserveActivations for the call's shape and are valid until the next call reserves again.
struct AttentionActivations {
  // One allocation carved into the buffers below, each on a 64-byte boundary, kept at the largest
  // size a call needed: calls of shapes seen before allocate nothing.
  AlignedBuffer storage;

  float* q = nullptr;                  // [N, L, E]   projected queries
  float* k = nullptr;                  // [N, S', E]  projected keys, extra keys in rows S..S'-1
  float* v = nullptr;                  // [N, S', E]  projected values, likewise
  float* concat = nullptr;             // [N, L, E]   the heads' outputs side by side
  float* attn_mask = nullptr;          // [N*H or 1, L, S] a bool attn_mask as 0 / -inf
  float* key_padding_mask = nullptr;   // [N, S]      a bool key_padding_mask as 0 / -inf
  float* attention_scratch = nullptr;  // AttentionWorkspaceFloats: per-thread packed K/V, tiles
  // Per-row statistics of the softmax rows (RowSinks), [N, H, L] each; only for head_stats calls.
  float* row_max_weight = nullptr;
  float* row_entropy = nullptr;
  float* row_distance = nullptr;

  void Release() {
    storage.Release();
    q = k = v = concat = attn_mask = key_padding_mask = attention_scratch = nullptr;
    row_max_weight = row_entropy = row_distance = nullptr;
  }
  size_t bytes() const { return storage.capacity() * sizeof(float); }
};

struct CallContext {
  AttentionActivations activations;
  ThreadPoolHandle pool;      // threads the call may use (its scratch is sized for them)
  size_t max_call_bytes = 0;  // calls whose buffers would exceed it are refused (plan.h)

  CallContext() { UseProcessDefaults(); }
  // The process-wide settings (SetThreadCount, SetMaxCallBytes), which embind.cc and the tests
  // change between calls.
  void UseProcessDefaults() {
    pool = ThreadPoolHandle::Process();
    max_call_bytes = MaxCallBytes();
  }
};

}  // namespace headscope

#endif  // HEADSCOPE_ACTIVATIONS_H_
