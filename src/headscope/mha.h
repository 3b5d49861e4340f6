// MultiheadAttention: the forward pass of torch.nn.MultiheadAttention, with PyTorch's numbers,
// on the Highway fast path; Trace() keeps every intermediate of one pass for teaching.
//
//   std::unique_ptr<headscope::MultiheadAttention> mha;
//   HEADSCOPE_RETURN_IF_ERROR(headscope::MultiheadAttention::Create({.embed_dim = 4, ...}, &mha));
//   HEADSCOPE_RETURN_IF_ERROR(mha->SetParameter("in_proj_weight", {w, {12, 4}, 48}));
//   ...
//   headscope::ForwardResult result;
//   HEADSCOPE_RETURN_IF_ERROR(mha->Forward(query, key, value, options, &result));
//   // result.output: query's layout; result.weights: (N, L, S') or (N, H, L, S')
#ifndef HEADSCOPE_MHA_H_
#define HEADSCOPE_MHA_H_

#include <memory>
#include <string_view>

#include "headscope/activations.h"
#include "headscope/config.h"
#include "headscope/plan.h"
#include "headscope/status.h"
#include "headscope/tensor.h"
#include "headscope/weights.h"

namespace headscope {

struct PackedWeights;  // mha.cc: the weights packed for the matmul kernel

// Output of one forward call. Reuse one ForwardResult across calls of a shape: its buffers keep
// their capacity, so the steady state allocates nothing.
struct ForwardResult {
  AlignedBuffer output;
  Shape output_shape;
  AlignedBuffer weights;  // empty when need_weights is false
  Shape weights_shape;    // rank 0 when need_weights is false
  bool has_weights() const { return weights_shape.rank > 0; }
};

struct TraceTensor {
  Shape shape;
  AlignedBuffer data;
};

// Every intermediate of one forward pass. Shapes carry a leading batch axis N only for batched
// input. S' counts the extra keys of add_bias_kv and add_zero_attn.
struct AttentionTrace {
  TraceTensor q;             // [N, H, L, hd]   query projection, split into heads
  TraceTensor k;             // [N, H, S', hd]  key projection (+ bias_k row, + zero row)
  TraceTensor v;             // [N, H, S', hd]
  TraceTensor scores;        // [N, H, L, S']   QK^T / sqrt(hd) + masks; -inf where blocked
  TraceTensor weights;       // [N, H, L, S']   softmax(scores); zero rows where fully masked
  TraceTensor head_outputs;  // [N, H, L, hd]   weights x V, times head_gates[h] if given
  TraceTensor concat;        // [N, L, E]       heads side by side (gated: what out_proj sees)
  TraceTensor output;        // query's layout  concat x W_O^T + b_O
};

class MultiheadAttention {
 public:
  static Status Create(const MhaConfig& config, std::unique_ptr<MultiheadAttention>* out);
  ~MultiheadAttention();

  const MhaConfig& config() const { return weights_.config(); }
  const MhaWeights& weights() const { return weights_; }

  // Loads one state_dict entry by PyTorch's key name and packs it for the kernels.
  Status SetParameter(std::string_view name, const TensorView& value);

  // Runs in this object's own CallContext, with the process's thread count and byte limit.
  Status Forward(const TensorView& query, const TensorView& key, const TensorView& value,
                 const ForwardOptions& options, ForwardResult* result);
  // The same in a caller's context: its activations, thread pool and byte limit (e.g. one
  // context shared by the layers of a model). Results are the same bits either way.
  Status Forward(const TensorView& query, const TensorView& key, const TensorView& value,
                 const ForwardOptions& options, ForwardResult* result, CallContext* context);

  // Same semantics as Forward; fills every stage. The returned output and per-head weights are
  // the ones Forward computes (the trace shares its kernels and only keeps what they produce).
  Status Trace(const TensorView& query, const TensorView& key, const TensorView& value,
               const ForwardOptions& options, AttentionTrace* trace);
  Status Trace(const TensorView& query, const TensorView& key, const TensorView& value,
               const ForwardOptions& options, AttentionTrace* trace, CallContext* context);

  // Releases the own context's activations (they regrow on the next call).
  void ReleaseWorkspace();
  size_t workspace_bytes() const;

 private:
  explicit MultiheadAttention(const MhaConfig& config);
  // Where a pass writes: Forward's result buffers, or the trace's (which also keeps the stages).
  struct PassOutputs {
    float* output = nullptr;   // query's layout
    float* weights = nullptr;  // optional
    bool average_weights = false;
    AttentionTrace* trace = nullptr;  // optional
  };
  // The stages of one pass, in order (mha.cc).
  Status Run(const CallPlan& plan, const TensorView& query, const TensorView& key,
             const TensorView& value, const ForwardOptions& options, const PassOutputs& out,
             CallContext* context);

  MhaWeights weights_;
  std::unique_ptr<PackedWeights> packed_;
  CallContext own_context_;  // Forward/Trace without a context of the caller's
};

}  // namespace headscope

#endif  // HEADSCOPE_MHA_H_
