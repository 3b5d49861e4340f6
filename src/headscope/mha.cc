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

// Weights packed for MatMulPacked, once, when loaded. Only weights: a call's buffers live in its
// CallContext (activations.h).
struct PackedWeights {
  AlignedBuffer wq, wk, wv, wo;  // each [ceil(E/16)][in_dim][16]
};

namespace {

Status OutOfMemory(const std::string& what, size_t bytes) {
  return Status(StatusCode::kResourceExhausted,
                what + ": could not allocate " + std::to_string(bytes) + " bytes");
}

Status TooLarge(const CallPlan& p, size_t limit) {
  return Status(StatusCode::kResourceExhausted,
                "query/key/value: buffers for this call (N=" + std::to_string(p.batch) +
                    ", L=" + std::to_string(p.q_len) + ", S=" + std::to_string(p.kv_len) +
                    ", embed_dim=" + std::to_string(p.embed) + ") would exceed the limit of " +
                    std::to_string(limit) + " bytes");
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

// ---- The stages of one pass. Each reads and writes the call's activations; none allocates. ----

// The attention stage's geometry and scale for this call, before any buffer exists (its scratch
// size depends on them): MultiheadAttention's activations are dense [N, T, E] with one K/V head
// per query head.
AttentionArgs DescribeAttention(const CallPlan& p, const CallContext& context) {
  AttentionArgs args;
  args.shape = AttentionShape::Dense(p.batch, p.heads, p.q_len, p.kv_len, p.kv_total, p.head_dim);
  args.sqrt_head_dim = std::sqrt(static_cast<float>(p.head_dim));
  args.workers = static_cast<size_t>(context.pool.threads);  // a scratch slice per thread
  return args;
}

// Sizes the context's activations for this call (AttentionActivations' buffers), refusing calls
// over the context's byte limit before allocating. Keeps the storage's capacity across calls.
Status ReserveActivations(const CallPlan& p, const AttentionArgs& args, CallContext* context) {
  const size_t N = p.batch, L = p.q_len, S = p.kv_len, Sp = p.kv_total, E = p.embed;
  const uint64_t attn_floats =
      p.attn_mask_type == MaskType::kBool
          ? SaturatingProduct({p.attn_mask_per_head ? N * p.heads : 1, L, S})
          : 0;
  const uint64_t kpm_floats =
      p.key_padding_type == MaskType::kBool ? SaturatingProduct({N, S}) : 0;
  const uint64_t qfloats = SaturatingProduct({N, L, E});
  const uint64_t kvfloats = SaturatingProduct({N, Sp, E});
  // In AttentionActivations' order: q, k, v, concat, the two converted masks, the scratch.
  const uint64_t parts[] = {qfloats, kvfloats, kvfloats, qfloats,
                            attn_floats, kpm_floats, AttentionWorkspaceFloats(args)};
  constexpr int kParts = sizeof(parts) / sizeof(parts[0]);
  size_t offsets[kParts];
  size_t total = 0, bytes = 0;
  for (int i = 0; i < kParts; ++i) {
    offsets[i] = total;
    // Each part starts on a 64-byte boundary (16 floats) so kernels see aligned rows.
    if (!AddBytes(&bytes, parts[i] + 16, context->max_call_bytes)) {
      return TooLarge(p, context->max_call_bytes);
    }
    total += static_cast<size_t>((parts[i] + 15) / 16 * 16);
  }
  AttentionActivations& a = context->activations;
  if (!a.storage.Resize(total + 16)) return OutOfMemory("workspace", bytes);
  float* base = a.storage.data();
  a.q = base + offsets[0];
  a.k = base + offsets[1];
  a.v = base + offsets[2];
  a.concat = base + offsets[3];
  a.attn_mask = base + offsets[4];
  a.key_padding_mask = base + offsets[5];
  a.attention_scratch = base + offsets[6];
  return Status::Ok();
}

// q = query W_q^T + b_q, k and v likewise: one matmul per batch element (rows of an element are
// strided in the (L, N, E) layout), into rows 0..S-1 of k and v. The loop runs over N only where
// an element has rows, so an empty sequence with a huge batch returns at once.
void ProjectQkv(const CallPlan& p, const PackedWeights& packed, const MhaWeights& w,
                const TensorView& query, const TensorView& key, const TensorView& value,
                AttentionActivations* a) {
  const size_t N = p.batch, L = p.q_len, S = p.kv_len, Sp = p.kv_total, E = p.embed;
  for (size_t n = 0; n < N && (L > 0 || S > 0); ++n) {
    // (Empty sequences skip the call: their data pointer may be null, even offset by 0.)
    if (L > 0) {
      MatMulPacked(query.data + p.query.Row(n, 0), p.query.seq, packed.wq.data(), w.q_bias(), L,
                   E, E, 1.0f, a->q + n * L * E, E);
    }
    if (S > 0) {
      MatMulPacked(key.data + p.key.Row(n, 0), p.key.seq, packed.wk.data(), w.k_bias(), S, E,
                   p.kdim, 1.0f, a->k + n * Sp * E, E);
      MatMulPacked(value.data + p.value.Row(n, 0), p.value.seq, packed.wv.data(), w.v_bias(), S,
                   E, p.vdim, 1.0f, a->v + n * Sp * E, E);
    }
  }
}

// The extra keys after the projected ones, as torch appends them after the projection: bias_k /
// bias_v (add_bias_kv) at row S, then a zero key and value (add_zero_attn). They have no
// position, which is why a positional stage runs on rows 0..S-1 only.
void AppendExtraKeys(const CallPlan& p, const MhaConfig& config, const MhaWeights& w,
                     AttentionActivations* a) {
  const size_t N = p.batch, S = p.kv_len, Sp = p.kv_total, E = p.embed;
  for (size_t n = 0; n < N && Sp > S; ++n) {
    size_t row = S;
    if (config.add_bias_kv) {
      std::memcpy(a->k + (n * Sp + row) * E, w.bias_k(), E * sizeof(float));
      std::memcpy(a->v + (n * Sp + row) * E, w.bias_v(), E * sizeof(float));
      ++row;
    }
    if (config.add_zero_attn) {
      std::memset(a->k + (n * Sp + row) * E, 0, E * sizeof(float));
      std::memset(a->v + (n * Sp + row) * E, 0, E * sizeof(float));
    }
  }
}

// The call's masks as the attention stage's ScoreModifiers: float masks are used as given, bool
// masks become additive floats in the activations (true -> -inf, as torch converts them).
void PrepareMasks(const CallPlan& p, const ForwardOptions& options, AttentionActivations* a,
                  ScoreModifiers* mods) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t N = p.batch, L = p.q_len, S = p.kv_len;
  if (p.attn_mask_type == MaskType::kBool) {
    const size_t count = (p.attn_mask_per_head ? N * p.heads : 1) * L * S;
    const uint8_t* src = static_cast<const uint8_t*>(options.attn_mask.data);
    for (size_t i = 0; i < count; ++i) a->attn_mask[i] = src[i] ? kNegInf : 0.0f;
    mods->attn_mask = a->attn_mask;
  } else if (p.attn_mask_type == MaskType::kFloat) {
    mods->attn_mask = static_cast<const float*>(options.attn_mask.data);
  }
  mods->attn_mask_per_head = p.attn_mask_per_head;
  if (p.key_padding_type == MaskType::kBool) {
    const uint8_t* src = static_cast<const uint8_t*>(options.key_padding_mask.data);
    for (size_t i = 0; i < N * S; ++i) a->key_padding_mask[i] = src[i] ? kNegInf : 0.0f;
    mods->key_padding_mask = a->key_padding_mask;
  } else if (p.key_padding_type == MaskType::kFloat) {
    mods->key_padding_mask = static_cast<const float*>(options.key_padding_mask.data);
  }
  mods->causal = p.causal;
}

// Every head's scores, softmax and weights x V into the concatenation (kernels/attention.h),
// times the head's gate when gates were given; per-head or averaged weights and the trace's
// scores where asked for.
void AttendHeads(const CallPlan& p, const AttentionActivations& a, float* weights,
                 bool average_weights, float* trace_scores, AttentionArgs* args) {
  args->q = a.q;
  args->k = a.k;
  args->v = a.v;
  args->out.concat = a.concat;
  args->out.weights = weights;
  args->out.average_weights = average_weights;
  args->out.scores = trace_scores;
  args->out.head_gates = p.head_gates;
  if (p.q_len > 0) Attention(*args, a.attention_scratch);
}

// output = concat W_O^T + b_O, written in the query's layout.
void ProjectOutput(const CallPlan& p, const PackedWeights& packed, const MhaWeights& w,
                   const AttentionActivations& a, float* output) {
  const size_t N = p.batch, L = p.q_len, E = p.embed;
  for (size_t n = 0; n < N && L > 0; ++n) {
    MatMulPacked(a.concat + n * L * E, E, packed.wo.data(), w.out_bias(), L, E, E, 1.0f,
                 output + p.output.Row(n, 0), p.output.seq);
  }
}

// The trace keeps what the stages left in the activations, split into heads for a reader (its
// scores and weights were written by AttendHeads, its output by ProjectOutput).
void FillTrace(const CallPlan& p, const AttentionActivations& a, AttentionTrace* trace) {
  const size_t N = p.batch, L = p.q_len, Sp = p.kv_total, E = p.embed;
  SplitHeads(a.q, N, L, p.heads, p.head_dim, trace->q.data.data());
  SplitHeads(a.k, N, Sp, p.heads, p.head_dim, trace->k.data.data());
  SplitHeads(a.v, N, Sp, p.heads, p.head_dim, trace->v.data.data());
  SplitHeads(a.concat, N, L, p.heads, p.head_dim, trace->head_outputs.data.data());
  if (N * L * E > 0) std::memcpy(trace->concat.data.data(), a.concat, N * L * E * sizeof(float));
}

}  // namespace

MultiheadAttention::MultiheadAttention(const MhaConfig& config)
    : weights_(config), packed_(new (std::nothrow) PackedWeights) {}

MultiheadAttention::~MultiheadAttention() = default;

Status MultiheadAttention::Create(const MhaConfig& config,
                                  std::unique_ptr<MultiheadAttention>* out) {
  HEADSCOPE_RETURN_IF_ERROR(ValidateConfig(config));
  std::unique_ptr<MultiheadAttention> mha(new (std::nothrow) MultiheadAttention(config));
  if (mha == nullptr || mha->packed_ == nullptr) {
    return OutOfMemory("MultiheadAttention", sizeof(MultiheadAttention) + sizeof(PackedWeights));
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

void MultiheadAttention::ReleaseWorkspace() { own_context_.activations.Release(); }

size_t MultiheadAttention::workspace_bytes() const { return own_context_.activations.bytes(); }

Status MultiheadAttention::Forward(const TensorView& query, const TensorView& key,
                                   const TensorView& value, const ForwardOptions& options,
                                   ForwardResult* result) {
  own_context_.UseProcessDefaults();
  return Forward(query, key, value, options, result, &own_context_);
}

Status MultiheadAttention::Forward(const TensorView& query, const TensorView& key,
                                   const TensorView& value, const ForwardOptions& options,
                                   ForwardResult* result, CallContext* context) {
  CallPlan plan;
  HEADSCOPE_RETURN_IF_ERROR(PlanCall(config(), query, key, value, options, &plan));
  const size_t limit = context->max_call_bytes;
  size_t bytes = 0;
  const uint64_t output_floats = plan.output_floats();
  const uint64_t weights_floats =
      options.need_weights ? plan.weights_floats(options.average_attn_weights) : 0;
  if (!AddBytes(&bytes, output_floats, limit) || !AddBytes(&bytes, weights_floats, limit)) {
    return TooLarge(plan, limit);
  }
  // Both counts are now known to fit the limit, hence size_t.
  if (!result->output.Resize(static_cast<size_t>(output_floats)) ||
      !result->weights.Resize(static_cast<size_t>(weights_floats))) {
    return OutOfMemory("forward result", bytes);
  }
  result->output_shape = plan.output_shape;
  result->weights_shape = plan.weights_shape;
  PassOutputs out;
  out.output = result->output.data();
  out.weights = options.need_weights ? result->weights.data() : nullptr;
  out.average_weights = options.average_attn_weights;
  return Run(plan, query, key, value, options, out, context);
}

Status MultiheadAttention::Trace(const TensorView& query, const TensorView& key,
                                 const TensorView& value, const ForwardOptions& options,
                                 AttentionTrace* trace) {
  own_context_.UseProcessDefaults();
  return Trace(query, key, value, options, trace, &own_context_);
}

Status MultiheadAttention::Trace(const TensorView& query, const TensorView& key,
                                 const TensorView& value, const ForwardOptions& options,
                                 AttentionTrace* trace, CallContext* context) {
  CallPlan plan;
  HEADSCOPE_RETURN_IF_ERROR(PlanCall(config(), query, key, value, options, &plan));
  const int64_t H = static_cast<int64_t>(plan.heads), hd = static_cast<int64_t>(plan.head_dim);
  const int64_t L = static_cast<int64_t>(plan.q_len), Sp = static_cast<int64_t>(plan.kv_total);
  const int64_t E = static_cast<int64_t>(plan.embed);
  const size_t limit = context->max_call_bytes;
  size_t bytes = 0;
  const uint64_t qfloats = plan.output_floats();
  const uint64_t kvfloats = SaturatingProduct({plan.batch, plan.kv_total, plan.embed});
  const uint64_t wfloats = plan.weights_floats(/*average=*/false);
  // q, head_outputs, concat, output: L x E each; k, v: S' x E; scores, weights: H x L x S'.
  for (uint64_t f : {qfloats, qfloats, qfloats, qfloats, kvfloats, kvfloats, wfloats, wfloats}) {
    if (!AddBytes(&bytes, f, limit)) return TooLarge(plan, limit);
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
  PassOutputs out;
  out.output = trace->output.data.data();
  out.weights = trace->weights.data.data();
  out.average_weights = false;
  out.trace = trace;
  return Run(plan, query, key, value, options, out, context);
}

// One pass: the same stages for Forward and Trace, fast and small-head paths, one thread or many
// (the kernels choose; every choice gives the same bits).
Status MultiheadAttention::Run(const CallPlan& p, const TensorView& query, const TensorView& key,
                               const TensorView& value, const ForwardOptions& options,
                               const PassOutputs& out, CallContext* context) {
  HEADSCOPE_RETURN_IF_ERROR(weights_.CheckComplete());
  AttentionArgs args = DescribeAttention(p, *context);
  HEADSCOPE_RETURN_IF_ERROR(ReserveActivations(p, args, context));
  AttentionActivations& a = context->activations;

  ProjectQkv(p, *packed_, weights_, query, key, value, &a);
  // Positional stage (not built): rotary embeddings would rotate rows 0..L-1 of a.q and 0..S-1 of
  // a.k here, per head, by position; additive position biases (ALiBi) belong in ScoreModifiers.
  AppendExtraKeys(p, config(), weights_, &a);
  PrepareMasks(p, options, &a, &args.modifiers);
  AttendHeads(p, a, out.weights, out.average_weights,
              out.trace != nullptr ? out.trace->scores.data.data() : nullptr, &args);
  ProjectOutput(p, *packed_, weights_, a, out.output);
  if (out.trace != nullptr) FillTrace(p, a, out.trace);
  return Status::Ok();
}

}  // namespace headscope
