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

#include <cstdint>
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

// Per-head statistics of one call's attention (ForwardOptions::head_stats), each of `shape`
// (N, H), or (H) unbatched: for batch element n and head h, the mean over its query rows of
//   entropy     -sum_j w_ij ln w_ij over all S' keys, in nats (0: one key; ln S': uniform)
//   distance    sum_j w_ij |i - j| over the first S keys, in positions (extra keys add none)
//   max_weight  max_j w_ij, the head's confidence (1: one key; 1/S': uniform)
// Fully masked rows (all weights 0, the zero-row policy) have no distribution and are left out
// of the means; a head whose rows are all fully masked (or L = 0) gets NaN, and so does a head
// with a NaN row. The row statistics are summed in double and the means taken in double in row
// order, so a float64 computation over the returned weights agrees to about 1e-7 relative (to
// float32's absolute resolution, 2^-149, for statistics below its normal range, ~1.2e-38).
struct HeadStats {
  AlignedBuffer entropy, distance, max_weight;
  Shape shape;  // rank 0 when not asked for
  bool present() const { return shape.rank > 0; }
};

// Output of one forward call. Reuse one ForwardResult across calls of a shape: its buffers keep
// their capacity, so the steady state allocates nothing.
struct ForwardResult {
  AlignedBuffer output;
  Shape output_shape;
  AlignedBuffer weights;  // empty when need_weights is false
  Shape weights_shape;    // rank 0 when need_weights is false
  HeadStats head_stats;   // present only when ForwardOptions::head_stats
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
  TraceTensor k;             // [N, G, S', hd]  key projection (+ bias_k row, + zero row); G
                             //                 K/V heads (= H unless grouped-query)
  TraceTensor v;             // [N, G, S', hd]
  TraceTensor rot_q;         // [N, H, L, hd]   rotary embeddings (rope_dims > 0): q and k as
  TraceTensor rot_k;         // [N, G, S', hd]  the scores use them; rank 0 otherwise
  TraceTensor scores;        // [N, H, L, S']   QK^T / sqrt(hd) + masks; -inf where blocked
  TraceTensor weights;       // [N, H, L, S']   softmax(scores); zero rows where fully masked
  TraceTensor head_outputs;  // [N, H, L, hd]   weights x V, times head_gates[h] if given
  TraceTensor concat;        // [N, L, E]       heads side by side (gated: what out_proj sees)
  TraceTensor output;        // query's layout  concat x W_O^T + b_O
  HeadStats head_stats;      // [N, H] each, when ForwardOptions::head_stats
};

// The keys and values a self-attention layer computed for earlier positions, kept for generation
// (MultiheadAttention::ForwardCached): k and v are [batch, capacity, width] each, width the
// layer's MhaConfig::kv_dim() (G * head_dim: embed_dim, or H / G times less with grouped-query
// attention), rows [0, length) of every batch element filled. Reset sizes it; its buffers keep
// their capacity across Resets.
struct KvCache {
  AlignedBuffer k, v;
  size_t batch = 0, capacity = 0, width = 0, length = 0;
  // Empty, for `batch` sequences of up to `capacity` positions of `width` floats; false if out
  // of memory.
  bool Reset(size_t batch, size_t capacity, size_t width);
  size_t floats() const { return 2 * batch * capacity * width; }
};

// Rotary position embeddings' angles (MhaConfig::rope_dims = r > 0): for position p and pair i
// in [0, r/2), cos and sin of p * theta_i, theta_i = 1 / rope_base^(2i / r), each computed in
// double and rounded to float. Rows are computed when a call first reaches them (the table
// grows to twice its rows, at most to what is asked when that does not fit) and kept: a
// generation step costs no new angles but once per doubling.
class RopeTable {
 public:
  // Rows 0 .. positions - 1 present for config `c` (r / 2 pairs a row); false when out of memory.
  bool Reserve(const MhaConfig& c, size_t positions);
  const float* cos(size_t pos) const { return data_.data() + pos * 2 * pairs_; }
  const float* sin(size_t pos) const { return cos(pos) + pairs_; }
  size_t rows() const { return rows_; }
  size_t pairs() const { return pairs_; }

 private:
  AlignedBuffer data_;  // per row: r/2 cosines, then r/2 sines
  size_t rows_ = 0, pairs_ = 0;
};

// RoPE in place on rows of heads: row t of sequence n at x + n * batch_stride + t * row_stride
// holds `heads` heads of c.head_dim() floats and has position pos0 + t; each head's first
// c.rope_dims dims turn pair by pair (c.rope_layout), (a, b) -> (a cos - b sin, a sin + b cos),
// in float; the rest are left as they are. `inverse`: by the opposite angles (the rotation's
// transpose: the backward's dq = R^T dq_rot). `table` must hold rows up to pos0 + len.
void RotateHeads(const MhaConfig& c, const RopeTable& table, float* x, size_t batch, size_t len,
                 size_t batch_stride, size_t row_stride, size_t heads, size_t pos0, bool inverse);

class MultiheadAttention {
 public:
  static Status Create(const MhaConfig& config, std::unique_ptr<MultiheadAttention>* out);
  // A module whose weights are entries of a model's store (`shared`, which must outlive it),
  // named `prefix` + torch's key: a Transformer's layers ("blocks.{l}.attn."). The model loads
  // and writes them through its store; the module reads them from there.
  static Status Create(const MhaConfig& config, ParameterStore* shared, std::string_view prefix,
                       std::unique_ptr<MultiheadAttention>* out);
  ~MultiheadAttention();

  const MhaConfig& config() const { return weights_.config(); }
  const MhaWeights& weights() const { return weights_; }
  // State_dict entry `name` for writing in place (MhaWeights::MutableData): the next pass
  // repacks it.
  float* MutableParameter(std::string_view name) { return weights_.MutableData(name); }

  // Loads one state_dict entry by PyTorch's key name (or an alias, AliasParams) into the
  // parameter store. The kernels' packed copies follow on the next pass (or Prepare()).
  Status SetParameter(std::string_view name, const TensorView& value);
  // Copies every entry `other` (same config) has loaded.
  Status CopyLoadedFrom(const MultiheadAttention& other);
  // OK once every parameter is loaded, else kMissingParameter naming the missing entries (as
  // Transformer::CheckComplete).
  Status CheckComplete() const { return weights_.CheckComplete(); }
  // Checks that every parameter is loaded and brings the packed panels up to date with the store
  // (each repacked only if its tensor changed since). Every pass calls it; call it after loading
  // to get allocation failures there rather than at the first forward.
  Status Prepare();

  // Runs in a caller's context: its activations, thread pool and byte limit (e.g. one context
  // shared by the layers of a model); without one, in this object's own CallContext, with the
  // process's thread count and byte limit. Results are the same bits either way.
  Status Forward(const TensorView& query, const TensorView& key, const TensorView& value,
                 const ForwardOptions& options, ForwardResult* result,
                 CallContext* context = nullptr);

  // Same semantics as Forward; fills every stage. The returned output and per-head weights are
  // the ones Forward computes (the trace shares its kernels and only keeps what they produce).
  Status Trace(const TensorView& query, const TensorView& key, const TensorView& value,
               const ForwardOptions& options, AttentionTrace* trace,
               CallContext* context = nullptr);

  // Causal self-attention of x ([N, T, E], the positions cache->length .. + T - 1 of N sequences)
  // over the cached keys and x's own, appending x's keys and values to the cache: generation's
  // step. Each row's output is the bits Forward(query = key = value = the whole sequence,
  // is_causal) gives that row, whatever T and the cache's length (a row's attention depends
  // neither on the keys after it nor on the kernel path, kernels/attention.h), and the same with
  // any thread count. For batch_first self-attention layers (kdim = vdim = embed_dim, no
  // add_bias_kv / add_zero_attn); options: head_gates ([H]), alibi and window are read.
  // result->output is [N, T, E]; no weights, no statistics. It runs Forward's stages (mha.cc Run), the cache being
  // where the keys and values go and come from.
  Status ForwardCached(const TensorView& x, const ForwardOptions& options, KvCache* cache,
                       ForwardResult* result, CallContext* context);

  // The rotary angles the passes used (rope_dims > 0): rows up to the largest position a pass
  // reached. (The Transformer's backward rotates its gradients with them.)
  const RopeTable& rope_table() const { return rope_; }

  // Releases the own context's activations (they regrow on the next call).
  void ReleaseWorkspace();
  size_t workspace_bytes() const;

 private:
  explicit MultiheadAttention(const MhaConfig& config);
  MultiheadAttention(const MhaConfig& config, ParameterStore* shared, std::string_view prefix);
  // Where a pass writes: Forward's result buffers, or the trace's (which also keeps the stages).
  struct PassOutputs {
    float* output = nullptr;   // query's layout
    float* weights = nullptr;  // optional
    bool average_weights = false;
    AttentionTrace* trace = nullptr;  // optional
    HeadStats* head_stats = nullptr;  // optional, sized by the caller
    // Bytes the call's results already count against the context's limit: the activations add
    // to them, so a call's result and workspace together stay within max_call_bytes.
    size_t counted = 0;
  };
  // Forward's body: the result sized and counted, then Run. With a cache (ForwardCached), the
  // keys and values go to and come from it.
  Status ForwardPass(const TensorView& query, const TensorView& key, const TensorView& value,
                     const ForwardOptions& options, ForwardResult* result, CallContext* context,
                     KvCache* cache);
  // Forward's or Trace's call (`pass`) without a context of the caller's: in own_context_, with
  // the process's thread count and byte limit; a refused one leaves *result empty (mha.cc).
  template <class Pass, class Result>
  Status InOwnContext(Pass pass, const TensorView& query, const TensorView& key,
                      const TensorView& value, const ForwardOptions& options, Result* result);
  // The stages of one pass, in order (mha.cc); `cache` null: keys and values in the context's
  // activations.
  Status Run(const CallPlan& plan, const TensorView& query, const TensorView& key,
             const TensorView& value, const ForwardOptions& options, const PassOutputs& out,
             CallContext* context, KvCache* cache = nullptr);

  MhaWeights weights_;
  std::unique_ptr<PackedWeights> packed_;
  uint64_t prepared_version_ = 0;  // the store's version Prepare() last found complete and packed
  RopeTable rope_;                 // rope_dims > 0: the angles of the positions reached so far
  CallContext own_context_;  // Forward/Trace without a context of the caller's
  // ALiBi's slopes for num_heads (AlibiSlope), filled by the first call with options.alibi: [H].
  AlignedBuffer alibi_slopes_;
};

}  // namespace headscope

#endif  // HEADSCOPE_MHA_H_
