#include "headscope/mha.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "headscope/kernels/attention.h"
#include "headscope/kernels/matmul.h"
#include "headscope/parallel.h"

namespace headscope {

// Weights packed for MatMulPacked (once, when loaded) and the workspace every call reuses.
struct MultiheadAttention::Packed {
  AlignedBuffer wq, wk, wv, wo;  // each [ceil(E/16)][in_dim][16]
  AlignedBuffer workspace;
};

namespace {

Status OutOfMemory(const std::string& what, size_t bytes) {
  return Status(StatusCode::kResourceExhausted,
                what + ": could not allocate " + std::to_string(bytes) + " bytes");
}

Status TooLarge(const CallPlan& p) {
  return Status(StatusCode::kResourceExhausted,
                "query/key/value: buffers for this call (N=" + std::to_string(p.batch) +
                    ", L=" + std::to_string(p.q_len) + ", S=" + std::to_string(p.kv_len) +
                    ", embed_dim=" + std::to_string(p.embed) + ") would exceed the limit of " +
                    std::to_string(MaxCallBytes()) + " bytes");
}

Status Pack(const float* w, size_t rows, size_t cols, AlignedBuffer* dst, const char* name) {
  const size_t floats = PackedFloats(rows, cols);
  if (!dst->Resize(floats)) return OutOfMemory(std::string("state_dict['") + name + "']",
                                               floats * sizeof(float));
  PackB(w, rows, cols, cols, 1, dst->data());
  return Status::Ok();
}

// [N, T, H*hd] -> [N, H, T, hd]: the per-head view a learner reads.
void SplitHeads(const float* src, size_t N, size_t T, size_t H, size_t hd, float* dst) {
  if (T == 0 || hd == 0) return;
  for (size_t n = 0; n < N; ++n) {
    for (size_t h = 0; h < H; ++h) {
      for (size_t t = 0; t < T; ++t) {
        std::memcpy(dst + ((n * H + h) * T + t) * hd, src + (n * T + t) * H * hd + h * hd,
                    hd * sizeof(float));
      }
    }
  }
}

// Prepends N to `tail` for batched calls: the trace's shapes follow the input's batching.
Shape TraceShape(const CallPlan& p, std::initializer_list<int64_t> tail) {
  Shape s;
  if (p.batched) s.dims[s.rank++] = static_cast<int64_t>(p.batch);
  for (int64_t d : tail) s.dims[s.rank++] = d;
  return s;
}

bool Allocate(TraceTensor* t, Shape shape) {
  t->shape = shape;
  return t->data.Resize(static_cast<size_t>(shape.NumElements()));
}

}  // namespace

MultiheadAttention::MultiheadAttention(const MhaConfig& config)
    : weights_(config), packed_(new (std::nothrow) Packed) {}

MultiheadAttention::~MultiheadAttention() = default;

Status MultiheadAttention::Create(const MhaConfig& config,
                                  std::unique_ptr<MultiheadAttention>* out) {
  HEADSCOPE_RETURN_IF_ERROR(ValidateConfig(config));
  std::unique_ptr<MultiheadAttention> mha(new (std::nothrow) MultiheadAttention(config));
  if (mha == nullptr || mha->packed_ == nullptr) {
    return OutOfMemory("MultiheadAttention", sizeof(MultiheadAttention) + sizeof(Packed));
  }
  *out = std::move(mha);
  return Status::Ok();
}

Status MultiheadAttention::SetParameter(std::string_view name, const TensorView& value) {
  Param which;
  HEADSCOPE_RETURN_IF_ERROR(weights_.Set(name, value, &which));
  const MhaConfig& c = config();
  const size_t E = static_cast<size_t>(c.embed_dim);
  switch (which) {
    case Param::kInProjWeight:
      HEADSCOPE_RETURN_IF_ERROR(Pack(weights_.q_weight(), E, E, &packed_->wq, "in_proj_weight"));
      HEADSCOPE_RETURN_IF_ERROR(Pack(weights_.k_weight(), E, E, &packed_->wk, "in_proj_weight"));
      return Pack(weights_.v_weight(), E, E, &packed_->wv, "in_proj_weight");
    case Param::kQProjWeight:
      return Pack(weights_.q_weight(), E, E, &packed_->wq, "q_proj_weight");
    case Param::kKProjWeight:
      return Pack(weights_.k_weight(), E, static_cast<size_t>(c.key_dim()), &packed_->wk,
                  "k_proj_weight");
    case Param::kVProjWeight:
      return Pack(weights_.v_weight(), E, static_cast<size_t>(c.value_dim()), &packed_->wv,
                  "v_proj_weight");
    case Param::kOutProjWeight:
      return Pack(weights_.out_weight(), E, E, &packed_->wo, "out_proj.weight");
    default:
      return Status::Ok();  // biases are used as loaded
  }
}

void MultiheadAttention::ReleaseWorkspace() { packed_->workspace.Release(); }

size_t MultiheadAttention::workspace_bytes() const {
  return packed_->workspace.capacity() * sizeof(float);
}

Status MultiheadAttention::Forward(const TensorView& query, const TensorView& key,
                                   const TensorView& value, const ForwardOptions& options,
                                   ForwardResult* result) {
  CallPlan plan;
  HEADSCOPE_RETURN_IF_ERROR(PlanCall(config(), query, key, value, options, &plan));
  size_t bytes = 0;
  const uint64_t output_floats = plan.output_floats();
  const uint64_t weights_floats =
      options.need_weights ? plan.weights_floats(options.average_attn_weights) : 0;
  if (!AddBytes(&bytes, output_floats, MaxCallBytes()) ||
      !AddBytes(&bytes, weights_floats, MaxCallBytes())) {
    return TooLarge(plan);
  }
  // Both counts are now known to fit the limit, hence size_t.
  if (!result->output.Resize(static_cast<size_t>(output_floats)) ||
      !result->weights.Resize(static_cast<size_t>(weights_floats))) {
    return OutOfMemory("forward result", bytes);
  }
  result->output_shape = plan.output_shape;
  result->weights_shape = plan.weights_shape;
  return Run(plan, query, key, value, options, result->output.data(),
             options.need_weights ? result->weights.data() : nullptr,
             options.average_attn_weights, nullptr);
}

Status MultiheadAttention::Trace(const TensorView& query, const TensorView& key,
                                 const TensorView& value, const ForwardOptions& options,
                                 AttentionTrace* trace) {
  CallPlan plan;
  HEADSCOPE_RETURN_IF_ERROR(PlanCall(config(), query, key, value, options, &plan));
  const int64_t H = static_cast<int64_t>(plan.heads), hd = static_cast<int64_t>(plan.head_dim);
  const int64_t L = static_cast<int64_t>(plan.q_len), Sp = static_cast<int64_t>(plan.kv_total);
  const int64_t E = static_cast<int64_t>(plan.embed);
  size_t bytes = 0;
  const uint64_t qfloats = plan.output_floats();
  const uint64_t kvfloats = SaturatingProduct({plan.batch, plan.kv_total, plan.embed});
  const uint64_t wfloats = plan.weights_floats(/*average=*/false);
  // q, head_outputs, concat, output: L x E each; k, v: S' x E; scores, weights: H x L x S'.
  for (uint64_t f : {qfloats, qfloats, qfloats, qfloats, kvfloats, kvfloats, wfloats, wfloats}) {
    if (!AddBytes(&bytes, f, MaxCallBytes())) return TooLarge(plan);
  }
  const bool ok = Allocate(&trace->q, TraceShape(plan, {H, L, hd})) &&
                  Allocate(&trace->k, TraceShape(plan, {H, Sp, hd})) &&
                  Allocate(&trace->v, TraceShape(plan, {H, Sp, hd})) &&
                  Allocate(&trace->scores, TraceShape(plan, {H, L, Sp})) &&
                  Allocate(&trace->weights, TraceShape(plan, {H, L, Sp})) &&
                  Allocate(&trace->head_outputs, TraceShape(plan, {H, L, hd})) &&
                  Allocate(&trace->concat, TraceShape(plan, {L, E})) &&
                  Allocate(&trace->output, plan.output_shape);
  if (!ok) return OutOfMemory("trace", bytes);
  return Run(plan, query, key, value, options, trace->output.data.data(),
             trace->weights.data.data(), /*average_weights=*/false, trace);
}

Status MultiheadAttention::Run(const CallPlan& p, const TensorView& query, const TensorView& key,
                               const TensorView& value, const ForwardOptions& options,
                               float* output, float* weights, bool average_weights,
                               AttentionTrace* trace) {
  HEADSCOPE_RETURN_IF_ERROR(weights_.CheckComplete());
  const size_t N = p.batch, L = p.q_len, S = p.kv_len, Sp = p.kv_total, E = p.embed;
  const bool bool_attn = p.attn_mask_type == MaskType::kBool;
  const bool bool_kpm = p.key_padding_type == MaskType::kBool;
  const uint64_t attn_floats =
      bool_attn ? SaturatingProduct({p.attn_mask_per_head ? N * p.heads : 1, L, S}) : 0;
  const uint64_t kpm_floats = bool_kpm ? SaturatingProduct({N, S}) : 0;

  AttentionArgs args;
  args.batch = N;
  args.heads = p.heads;
  args.q_len = L;
  args.kv_len = S;
  args.kv_total = Sp;
  args.head_dim = p.head_dim;
  args.embed = E;
  args.sqrt_head_dim = std::sqrt(static_cast<float>(p.head_dim));
  args.workers = static_cast<size_t>(ThreadCount());  // a scratch slice per thread
  const uint64_t qfloats = SaturatingProduct({N, L, E});
  const uint64_t kvfloats = SaturatingProduct({N, Sp, E});

  // Workspace: [N, L, E] q | [N, S', E] k | [N, S', E] v | [N, L, E] concat | bool masks as
  // additive floats | attention scratch. Sized per call shape, kept across calls.
  const uint64_t parts[] = {qfloats, kvfloats, kvfloats, qfloats,
                            attn_floats, kpm_floats, AttentionWorkspaceFloats(args)};
  size_t offsets[7];
  size_t total = 0, bytes = 0;
  for (int i = 0; i < 7; ++i) {
    offsets[i] = total;
    // Each part starts on a 64-byte boundary (16 floats) so kernels see aligned rows.
    if (!AddBytes(&bytes, parts[i] + 16, MaxCallBytes())) return TooLarge(p);
    total += static_cast<size_t>((parts[i] + 15) / 16 * 16);
  }
  AlignedBuffer& ws = packed_->workspace;
  if (!ws.Resize(total + 16)) return OutOfMemory("workspace", bytes);
  float* qp = ws.data() + offsets[0];
  float* kp = ws.data() + offsets[1];
  float* vp = ws.data() + offsets[2];
  float* concat = ws.data() + offsets[3];

  // Input projections, one matmul per batch element (rows of an element are strided in the
  // (L, N, E) layout). K and V get room for the extra keys at rows S, S+1 of each element.
  // Loops below run over N (x heads) only where each iteration has rows to compute, so an empty
  // sequence with a huge batch returns at once instead of spinning.
  for (size_t n = 0; n < N && (L > 0 || Sp > 0); ++n) {
    // (Empty sequences skip the call: their data pointer may be null, even offset by 0.)
    if (L > 0) {
      MatMulPacked(query.data + p.query.Row(n, 0), p.query.seq, packed_->wq.data(),
                   weights_.q_bias(), L, E, E, 1.0f, qp + n * L * E, E);
    }
    if (S > 0) {
      MatMulPacked(key.data + p.key.Row(n, 0), p.key.seq, packed_->wk.data(), weights_.k_bias(),
                   S, E, p.kdim, 1.0f, kp + n * Sp * E, E);
      MatMulPacked(value.data + p.value.Row(n, 0), p.value.seq, packed_->wv.data(),
                   weights_.v_bias(), S, E, p.vdim, 1.0f, vp + n * Sp * E, E);
    }
    size_t row = S;
    if (config().add_bias_kv) {  // torch appends bias_k / bias_v after the projection
      std::memcpy(kp + (n * Sp + row) * E, weights_.bias_k(), E * sizeof(float));
      std::memcpy(vp + (n * Sp + row) * E, weights_.bias_v(), E * sizeof(float));
      ++row;
    }
    if (config().add_zero_attn) {  // then a zero key and value
      std::memset(kp + (n * Sp + row) * E, 0, E * sizeof(float));
      std::memset(vp + (n * Sp + row) * E, 0, E * sizeof(float));
    }
  }

  // Masks become additive floats: bool true -> -inf, as torch converts them.
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (bool_attn) {
    float* dst = ws.data() + offsets[4];
    const uint8_t* src = static_cast<const uint8_t*>(options.attn_mask.data);
    for (size_t i = 0; i < attn_floats; ++i) dst[i] = src[i] ? kNegInf : 0.0f;
    args.attn_mask = dst;
  } else if (p.attn_mask_type == MaskType::kFloat) {
    args.attn_mask = static_cast<const float*>(options.attn_mask.data);
  }
  args.attn_mask_per_head = p.attn_mask_per_head;
  if (bool_kpm) {
    float* dst = ws.data() + offsets[5];
    const uint8_t* src = static_cast<const uint8_t*>(options.key_padding_mask.data);
    for (size_t i = 0; i < kpm_floats; ++i) dst[i] = src[i] ? kNegInf : 0.0f;
    args.key_padding_mask = dst;
  } else if (p.key_padding_type == MaskType::kFloat) {
    args.key_padding_mask = static_cast<const float*>(options.key_padding_mask.data);
  }
  args.causal = p.causal;
  args.q = qp;
  args.k = kp;
  args.v = vp;
  args.concat = concat;
  args.weights = weights;
  args.average_weights = average_weights;
  args.scores = trace != nullptr ? trace->scores.data.data() : nullptr;
  if (L > 0) Attention(args, ws.data() + offsets[6]);

  for (size_t n = 0; n < N && L > 0; ++n) {
    MatMulPacked(concat + n * L * E, E, packed_->wo.data(), weights_.out_bias(), L, E, E, 1.0f,
                 output + p.output.Row(n, 0), p.output.seq);
  }

  if (trace != nullptr) {
    SplitHeads(qp, N, L, p.heads, p.head_dim, trace->q.data.data());
    SplitHeads(kp, N, Sp, p.heads, p.head_dim, trace->k.data.data());
    SplitHeads(vp, N, Sp, p.heads, p.head_dim, trace->v.data.data());
    SplitHeads(concat, N, L, p.heads, p.head_dim, trace->head_outputs.data.data());
    if (N * L * E > 0) std::memcpy(trace->concat.data.data(), concat, N * L * E * sizeof(float));
  }
  return Status::Ok();
}

}  // namespace headscope
