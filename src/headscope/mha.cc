#include "headscope/mha.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "headscope/kernels/attention.h"
#include "headscope/kernels/matmul.h"
#include "headscope/parallel.h"

namespace headscope {

// The weights packed for MatMulPacked: a cache of the parameter store, each matrix stamped with
// the version of the tensor it was packed from (MhaWeights::version) and repacked before a pass
// when that changed. Only weights: a call's buffers live in its CallContext (activations.h).
struct PackedWeights {
  struct Matrix {
    AlignedBuffer panels;   // [ceil(E/16)][in_dim][16]
    uint64_t version = 0;   // of the source tensor when packed; 0: never packed
  };
  Matrix wq, wk, wv, wo;
  // The vectors the stages read as loaded, looked up in the store once per Prepare() rather than
  // per call (null where the config has none).
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
  const float *bias_k = nullptr, *bias_v = nullptr;
  const float* sinks = nullptr;  // attn_sinks: [H], the softmax's extra logit per head
};

namespace {

Status OutOfMemory(const std::string& what, size_t bytes) {
  return Status(StatusCode::kResourceExhausted,
                what + ": could not allocate " + std::to_string(bytes) + " bytes");
}

// A call over the limit; with a KV cache, counting the keys before it (ForwardCached's query).
Status TooLarge(const CallPlan& p, size_t limit, const KvCache* cache = nullptr) {
  if (cache != nullptr) {
    return Status(StatusCode::kResourceExhausted, Arg::kQuery,
                  std::string(ArgPath(Arg::kQuery)) + ": buffers for (" +
                      std::to_string(p.batch) + ", " + std::to_string(p.q_len) +
                      ") new positions over " + std::to_string(cache->length + p.kv_len) +
                      " keys would exceed the limit of " + std::to_string(limit) + " bytes");
  }
  return Status(StatusCode::kResourceExhausted,
                "query/key/value: buffers for this call (N=" + std::to_string(p.batch) +
                    ", L=" + std::to_string(p.q_len) + ", S=" + std::to_string(p.kv_len) +
                    ", embed_dim=" + std::to_string(p.embed) + ") would exceed the limit of " +
                    std::to_string(limit) + " bytes");
}

// Repacks one matrix if its source tensor changed since it was packed (a no-op per call once
// packed: one comparison).
Status Pack(const MhaWeights& w, Param source, const float* data, size_t rows, size_t cols,
            PackedWeights::Matrix* dst) {
  const uint64_t version = w.version(source);
  if (dst->version == version) return Status::Ok();
  const size_t floats = PackedFloats(rows, cols);
  if (!dst->panels.Resize(floats)) {
    return OutOfMemory(std::string(ArgName(Arg::kStateDict)) + "['" + ParamName(source) + "']",
                       floats * sizeof(float));
  }
  PackB(data, rows, cols, cols, 1, dst->panels.data());
  dst->version = version;
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
//
// Keys and values live in one of two places: the context's activations (k and v [N, S', Ekv],
// the call's own rows only; Ekv = G * hd, E unless grouped-query), or a KV cache (KvCache:
// [N, capacity, Ekv], rows 0 .. length - 1 from
// earlier calls of the sequence, this call's S rows appended after them: generation). Every stage
// takes that place as a parameter rather than knowing which it is.

// Where this call's keys and values go, and where the attention stage reads them from.
struct KeyValueRows {
  float* k = nullptr;
  float* v = nullptr;
  size_t batch_stride = 0;  // floats from a batch element's row 0 to the next element's
  size_t first = 0;         // the row the call's first key goes to (the cache's length, or 0)
};

// The rows the attention stage was described with (DescribeAttention's kv geometry).
KeyValueRows KeysAndValues(const AttentionArgs& args, const AttentionActivations& a,
                           KvCache* cache) {
  if (cache != nullptr) {
    return {cache->k.data(), cache->v.data(), args.shape.kv_batch_stride, cache->length};
  }
  return {a.k, a.v, args.shape.kv_batch_stride, 0};
}

// The attention stage's geometry and scale for this call, before any buffer exists (its scratch
// size depends on them): MultiheadAttention's activations are dense, q [N, L, E] and k, v
// [N, S', Ekv] with G = E / Ekv K/V heads (one per query head unless grouped-query). With a cache, the stage reads the cached keys and the call's own, and the
// queries are the positions after the cached ones (ScoreModifiers::q_offset: the causal rule and
// the distances count from there).
AttentionArgs DescribeAttention(const CallPlan& p, const CallContext& context,
                                const KvCache* cache) {
  AttentionArgs args;
  const size_t before = cache != nullptr ? cache->length : 0;
  args.shape = AttentionShape::Dense(p.batch, p.heads, p.q_len, before + p.kv_len,
                                     before + p.kv_total, p.head_dim, p.kv_heads);
  if (cache != nullptr) args.shape.kv_batch_stride = cache->capacity * p.kv_embed;
  args.modifiers.q_offset = before;
  args.sqrt_head_dim = std::sqrt(static_cast<float>(p.head_dim));
  args.workers = static_cast<size_t>(context.pool.threads);  // a scratch slice per thread
  return args;
}

// Sizes the context's activations for this call (AttentionActivations' buffers), refusing calls
// over the context's byte limit before allocating, counting from `counted` (the bytes of the
// call's results). Keeps the storage's capacity across calls. With a cache, k and v are the
// cache's and take no room here.
Status ReserveActivations(const CallPlan& p, const AttentionArgs& args, CallContext* context,
                          size_t counted, const KvCache* cache) {
  const size_t N = p.batch, L = p.q_len, S = p.kv_len, Sp = p.kv_total, E = p.embed;
  const uint64_t attn_floats =
      p.attn_mask_type == MaskType::kBool
          ? SaturatingProduct({p.attn_mask_per_head ? N * p.heads : 1, L, S})
          : 0;
  const uint64_t kpm_floats =
      p.key_padding_type == MaskType::kBool ? SaturatingProduct({N, S}) : 0;
  const uint64_t qfloats = SaturatingProduct({N, L, E});
  const uint64_t kvfloats = cache != nullptr ? 0 : SaturatingProduct({N, Sp, p.kv_embed});
  const uint64_t row_floats = p.head_stats ? SaturatingProduct({N, p.heads, L}) : 0;
  // In AttentionActivations' order: q, k, v, concat, the two converted masks, the scratch, the
  // three row statistics.
  const uint64_t parts[] = {qfloats,    kvfloats,   kvfloats,  qfloats,
                            attn_floats, kpm_floats, AttentionWorkspaceFloats(args),
                            row_floats, row_floats, row_floats};
  // Calls without statistics stop before the three row buffers.
  const int kParts = p.head_stats ? 10 : 7;
  size_t offsets[10] = {};
  size_t total = 0, bytes = counted;
  for (int i = 0; i < kParts; ++i) {
    offsets[i] = total;
    // Each part starts on a 64-byte boundary (16 floats) so kernels see aligned rows.
    if (!AddBytes(&bytes, parts[i] + 16, context->max_call_bytes)) {
      return TooLarge(p, context->max_call_bytes, cache);
    }
    total += static_cast<size_t>((parts[i] + 15) / 16 * 16);
  }
  AttentionActivations& a = context->activations;
  if (!a.storage.Resize(total + 16)) return OutOfMemory("workspace", bytes);
  float* base = a.storage.data();
  a.q = base + offsets[0];
  a.k = cache != nullptr ? nullptr : base + offsets[1];
  a.v = cache != nullptr ? nullptr : base + offsets[2];
  a.concat = base + offsets[3];
  a.attn_mask = base + offsets[4];
  a.key_padding_mask = base + offsets[5];
  a.attention_scratch = base + offsets[6];
  a.row_max_weight = p.head_stats ? base + offsets[7] : nullptr;
  a.row_entropy = p.head_stats ? base + offsets[8] : nullptr;
  a.row_distance = p.head_stats ? base + offsets[9] : nullptr;
  return Status::Ok();
}

// q = query W_q^T + b_q, k and v likewise: one matmul per batch element (rows of an element are
// strided in the (L, N, E) layout), into rows first..first+S-1 of k and v. The loop runs over N
// only where an element has rows, so an empty sequence with a huge batch returns at once.
// (A layout whose batch elements follow one another, batch = len * seq: one product over all
// N * len rows instead of one per element, the same bits, each row's chain being the same.)
bool Contiguous(const RowLayout& r, size_t len) { return r.batch == len * r.seq; }

void ProjectQkv(const CallPlan& p, const PackedWeights& packed, const TensorView& query,
                const TensorView& key, const TensorView& value, int threads,
                AttentionActivations* a, const KeyValueRows& kv) {
  const size_t N = p.batch, L = p.q_len, S = p.kv_len, E = p.embed, Ekv = p.kv_embed;
  // k and v are written with row stride Ekv and batch stride kv.batch_stride: whole only where
  // the elements' rows follow one another (no extra keys, no cache room after them).
  const bool whole = N > 1 && L > 0 && S > 0 && kv.batch_stride == S * Ekv &&
                     Contiguous(p.query, L) && Contiguous(p.key, S) && Contiguous(p.value, S);
  const size_t calls = whole ? 1 : N, q_rows = whole ? N * L : L, kv_rows = whole ? N * S : S;
  for (size_t n = 0; n < calls && (L > 0 || S > 0); ++n) {
    // (Empty sequences skip the call: their data pointer may be null, even offset by 0.)
    if (L > 0) {
      MatMulPacked(query.data + p.query.Row(n, 0), p.query.seq, packed.wq.panels.data(), packed.bq,
                   q_rows, E, E, 1.0f, a->q + n * L * E, E, threads);
    }
    if (S > 0) {
      const size_t at = n * kv.batch_stride + kv.first * Ekv;
      MatMulPacked(key.data + p.key.Row(n, 0), p.key.seq, packed.wk.panels.data(), packed.bk,
                   kv_rows, Ekv, p.kdim, 1.0f, kv.k + at, Ekv, threads);
      MatMulPacked(value.data + p.value.Row(n, 0), p.value.seq, packed.wv.panels.data(), packed.bv,
                   kv_rows, Ekv, p.vdim, 1.0f, kv.v + at, Ekv, threads);
    }
  }
}

// The extra keys after the projected ones, as torch appends them after the projection: bias_k /
// bias_v (add_bias_kv) at row S, then a zero key and value (add_zero_attn). They have no
// position, which is why a positional stage runs on rows 0..S-1 only.
void AppendExtraKeys(const CallPlan& p, const MhaConfig& config, const PackedWeights& packed,
                     const KeyValueRows& kv) {
  const size_t N = p.batch, S = p.kv_len, Sp = p.kv_total, Ekv = p.kv_embed;
  for (size_t n = 0; n < N && Sp > S; ++n) {
    size_t at = n * kv.batch_stride + (kv.first + S) * Ekv;
    if (config.add_bias_kv) {
      std::memcpy(kv.k + at, packed.bias_k, Ekv * sizeof(float));
      std::memcpy(kv.v + at, packed.bias_v, Ekv * sizeof(float));
      at += Ekv;
    }
    if (config.add_zero_attn) {
      std::memset(kv.k + at, 0, Ekv * sizeof(float));
      std::memset(kv.v + at, 0, Ekv * sizeof(float));
    }
  }
}

// Rotary position embeddings (MhaConfig::rope_dims > 0), between the projections and the
// scores: the queries turn by their positions q_offset + i, the call's own keys (rows first ..
// first + S - 1 of kv, a cache's rows after the cached ones) by first + j; the cached keys were
// turned when they were computed and keep their positions, the extra keys (bias_k, the zero key)
// have none. A trace keeps q and k as projected (its q, k), then the turned ones (rot_q, rot_k).
Status RotatePositions(const CallPlan& p, const MhaConfig& c, const AttentionArgs& args,
                       RopeTable* table, AttentionActivations* a, const KeyValueRows& kv,
                       AttentionTrace* trace) {
  const size_t N = p.batch, L = p.q_len, S = p.kv_len, hd = p.head_dim;
  const size_t q0 = args.modifiers.q_offset;
  if (!table->Reserve(c, std::max(q0 + L, kv.first + S))) {
    return OutOfMemory("rotary position table", (std::max(q0 + L, kv.first + S) * 2) *
                                                    static_cast<size_t>(c.rope_dims) *
                                                    sizeof(float));
  }
  if (trace != nullptr) {
    SplitHeads(a->q, N, L, p.heads, hd, trace->q.data.data());
    SplitHeads(kv.k, N, p.kv_total, p.kv_heads, hd, trace->k.data.data());
  }
  if (N * L > 0) RotateHeads(c, *table, a->q, N, L, L * p.embed, p.embed, p.heads, q0, false);
  if (N * S > 0) {
    RotateHeads(c, *table, kv.k + kv.first * p.kv_embed, N, S, kv.batch_stride, p.kv_embed,
                p.kv_heads, kv.first, false);
  }
  return Status::Ok();
}

// The call's masks as the attention stage's ScoreModifiers: float masks are used as given, bool
// masks become additive floats in the activations (true -> -inf, as torch converts them).
void PrepareMasks(const CallPlan& p, const ForwardOptions& options, AttentionActivations* a,
                  const float* alibi_slopes, ScoreModifiers* mods) {
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
  // Position options: ALiBi's slopes ([H], or null) and the window (0: none).
  mods->alibi_slopes = p.alibi ? alibi_slopes : nullptr;
  mods->window = p.window;
}

// Every head's scores, softmax and weights x V into the concatenation (kernels/attention.h),
// times the head's gate when gates were given; per-head or averaged weights and the trace's
// scores where asked for.
void AttendHeads(const CallPlan& p, const AttentionActivations& a, const KeyValueRows& kv,
                 float* weights, bool average_weights, float* trace_scores, AttentionArgs* args) {
  args->q = a.q;
  args->k = kv.k;
  args->v = kv.v;
  args->out.concat = a.concat;
  args->out.weights = weights;
  args->out.average_weights = average_weights;
  args->out.scores = trace_scores;
  args->out.head_gates = p.head_gates;
  args->out.sinks.max_weight = a.row_max_weight;
  args->out.sinks.entropy = a.row_entropy;
  args->out.sinks.distance = a.row_distance;
  if (p.q_len > 0) Attention(*args, a.attention_scratch);
}

// HeadStats from the row statistics AttendHeads left in the activations: per (batch element,
// head), the mean over the query rows that have a distribution (a fully masked row's max weight
// is 0, every other row's at least 1/S' or NaN), in double, in row order.
void SummarizeHeads(const CallPlan& p, const AttentionActivations& a, HeadStats* stats) {
  const size_t L = p.q_len;
  for (size_t nh = 0; nh < p.batch * p.heads; ++nh) {
    double entropy = 0.0, distance = 0.0, max_weight = 0.0;
    size_t rows = 0;
    for (size_t i = nh * L; i < (nh + 1) * L; ++i) {
      if (a.row_max_weight[i] == 0.0f) continue;  // fully masked
      entropy += a.row_entropy[i];
      distance += a.row_distance[i];
      max_weight += a.row_max_weight[i];
      ++rows;
    }
    const double inv = rows > 0 ? 1.0 / static_cast<double>(rows)
                                : std::numeric_limits<double>::quiet_NaN();
    stats->entropy.data()[nh] = static_cast<float>(entropy * inv);
    stats->distance.data()[nh] = static_cast<float>(distance * inv);
    stats->max_weight.data()[nh] = static_cast<float>(max_weight * inv);
  }
}

// Sizes `stats` for the plan (nothing when head_stats is false), counting its bytes.
Status AllocateHeadStats(const CallPlan& p, size_t* bytes, size_t limit, HeadStats* stats) {
  stats->shape = p.head_stats_shape;
  if (!p.head_stats) return Status::Ok();  // (the buffers keep their capacity for the next call)
  const uint64_t floats = p.head_stats ? SaturatingProduct({p.batch, p.heads}) : 0;
  for (int i = 0; i < 3; ++i) {
    if (!AddBytes(bytes, floats, limit)) return TooLarge(p, limit);
  }
  if (!stats->entropy.Resize(static_cast<size_t>(floats)) ||
      !stats->distance.Resize(static_cast<size_t>(floats)) ||
      !stats->max_weight.Resize(static_cast<size_t>(floats))) {
    return OutOfMemory("head statistics", *bytes);
  }
  return Status::Ok();
}

// output = concat W_O^T + b_O, written in the query's layout.
void ProjectOutput(const CallPlan& p, const PackedWeights& packed, const AttentionActivations& a, int threads, float* output) {
  const size_t N = p.batch, L = p.q_len, E = p.embed;
  const bool whole = N > 1 && L > 0 && Contiguous(p.output, L);  // as in ProjectQkv
  const size_t calls = whole ? 1 : N, rows = whole ? N * L : L;
  for (size_t n = 0; n < calls && L > 0; ++n) {
    MatMulPacked(a.concat + n * L * E, E, packed.wo.panels.data(), packed.bo, rows, E, E, 1.0f,
                 output + p.output.Row(n, 0), p.output.seq, threads);
  }
}

// The trace keeps what the stages left in the activations, split into heads for a reader (its
// scores and weights were written by AttendHeads, its output by ProjectOutput).
// (With rotary embeddings the q and k the scores used are the turned ones, rot_q and rot_k;
// RotatePositions kept the projections in q and k.)
void FillTrace(const CallPlan& p, const AttentionActivations& a, bool rotated,
               AttentionTrace* trace) {
  const size_t N = p.batch, L = p.q_len, Sp = p.kv_total, E = p.embed;
  SplitHeads(a.q, N, L, p.heads, p.head_dim, (rotated ? trace->rot_q : trace->q).data.data());
  SplitHeads(a.k, N, Sp, p.kv_heads, p.head_dim,  // G K/V heads
             (rotated ? trace->rot_k : trace->k).data.data());
  SplitHeads(a.v, N, Sp, p.kv_heads, p.head_dim, trace->v.data.data());
  SplitHeads(a.concat, N, L, p.heads, p.head_dim, trace->head_outputs.data.data());
  if (N * L * E > 0) std::memcpy(trace->concat.data.data(), a.concat, N * L * E * sizeof(float));
}

}  // namespace

bool RopeTable::Reserve(const MhaConfig& c, size_t positions) {
  const size_t pairs = static_cast<size_t>(c.rope_dims / 2);
  if (pairs != pairs_) {  // (a table is for one config: a module's never changes)
    data_.Release();
    rows_ = 0;
    pairs_ = pairs;
  }
  if (positions <= rows_ || pairs == 0) return true;
  size_t rows = std::max(positions, 2 * rows_);
  AlignedBuffer grown;
  if (!grown.Resize(rows * 2 * pairs)) {
    rows = positions;  // the doubled table did not fit: the rows asked for, if they do
    if (!grown.Resize(rows * 2 * pairs)) return false;
  }
  if (rows_ > 0) std::memcpy(grown.data(), data_.data(), rows_ * 2 * pairs * sizeof(float));
  const double r = static_cast<double>(c.rope_dims);
  for (size_t i = 0; i < pairs; ++i) {
    // theta_i = 1 / base^(2i / r), as GPT-NeoX and LLaMA write their inv_freq (in double here).
    const double theta = 1.0 / std::pow(c.rope_base, static_cast<double>(2 * i) / r);
    for (size_t pos = rows_; pos < rows; ++pos) {
      const double angle = static_cast<double>(pos) * theta;
      grown[pos * 2 * pairs + i] = static_cast<float>(std::cos(angle));
      grown[pos * 2 * pairs + pairs + i] = static_cast<float>(std::sin(angle));
    }
  }
  data_ = std::move(grown);
  rows_ = rows;
  return true;
}

void RotateHeads(const MhaConfig& c, const RopeTable& table, float* x, size_t batch, size_t len,
                 size_t batch_stride, size_t row_stride, size_t heads, size_t pos0,
                 bool inverse) {
  const size_t pairs = static_cast<size_t>(c.rope_dims / 2), hd = static_cast<size_t>(c.head_dim());
  const bool interleaved = c.rope_layout == RopeLayout::kInterleaved;
  for (size_t n = 0; n < batch; ++n) {
    for (size_t t = 0; t < len; ++t) {
      const float* cs = table.cos(pos0 + t);
      const float* sn = table.sin(pos0 + t);
      float* row = x + n * batch_stride + t * row_stride;
      for (size_t h = 0; h < heads; ++h) {
        float* v = row + h * hd;
        for (size_t i = 0; i < pairs; ++i) {
          // Pair i: dims (2i, 2i + 1) interleaved, (i, i + r/2) rotate-half.
          float* a = v + (interleaved ? 2 * i : i);
          float* b = v + (interleaved ? 2 * i + 1 : i + pairs);
          const float co = cs[i], si = inverse ? -sn[i] : sn[i];
          const float x0 = *a, x1 = *b;
          *a = x0 * co - x1 * si;
          *b = x0 * si + x1 * co;
        }
      }
    }
  }
}

MultiheadAttention::MultiheadAttention(const MhaConfig& config)
    : weights_(config), packed_(new (std::nothrow) PackedWeights) {}

MultiheadAttention::MultiheadAttention(const MhaConfig& config, ParameterStore* shared,
                                       std::string_view prefix)
    : weights_(config, shared, prefix), packed_(new (std::nothrow) PackedWeights) {}

MultiheadAttention::~MultiheadAttention() = default;

Status MultiheadAttention::Create(const MhaConfig& config,
                                  std::unique_ptr<MultiheadAttention>* out) {
  return Create(config, nullptr, "", out);
}

Status MultiheadAttention::Create(const MhaConfig& config, ParameterStore* shared,
                                  std::string_view prefix,
                                  std::unique_ptr<MultiheadAttention>* out) {
  HEADSCOPE_RETURN_IF_ERROR(ValidateConfig(config));
  std::unique_ptr<MultiheadAttention> mha(
      shared != nullptr ? new (std::nothrow) MultiheadAttention(config, shared, prefix)
                        : new (std::nothrow) MultiheadAttention(config));
  if (mha == nullptr || mha->packed_ == nullptr) {
    return OutOfMemory("MultiheadAttention", sizeof(MultiheadAttention) + sizeof(PackedWeights));
  }
  *out = std::move(mha);
  return Status::Ok();
}

Status MultiheadAttention::SetParameter(std::string_view name, const TensorView& value) {
  return weights_.Set(name, value);
}

Status MultiheadAttention::CopyLoadedFrom(const MultiheadAttention& other) {
  return weights_.CopyLoadedFrom(other.weights_);
}

Status MultiheadAttention::Prepare() {
  // The per-call cost once prepared: one comparison (the store's version moves on every write).
  if (prepared_version_ == weights_.version() && prepared_version_ != 0) return Status::Ok();
  HEADSCOPE_RETURN_IF_ERROR(weights_.CheckComplete());
  const MhaConfig& c = config();
  const size_t E = static_cast<size_t>(c.embed_dim), Ekv = static_cast<size_t>(c.kv_dim());
  // The projections by their split names (aliases of in_proj_weight's row blocks when packed):
  // the store's version of in_proj_weight stamps all three then. K and V have Ekv rows.
  const Param q = c.same_qkv_dim() ? Param::kInProjWeight : Param::kQProjWeight;
  const Param k = c.same_qkv_dim() ? Param::kInProjWeight : Param::kKProjWeight;
  const Param v = c.same_qkv_dim() ? Param::kInProjWeight : Param::kVProjWeight;
  Status s = Pack(weights_, q, weights_.q_weight(), E, E, &packed_->wq);
  if (s.ok()) {
    s = Pack(weights_, k, weights_.k_weight(), Ekv, static_cast<size_t>(c.key_dim()),
             &packed_->wk);
  }
  if (s.ok()) {
    s = Pack(weights_, v, weights_.v_weight(), Ekv, static_cast<size_t>(c.value_dim()),
             &packed_->wv);
  }
  if (s.ok()) s = Pack(weights_, Param::kOutProjWeight, weights_.out_weight(), E, E, &packed_->wo);
  if (!s.ok()) {
    // Out of memory for a panel: the ones packed before it go too, so the refused call leaves
    // no panel it packed (the next call packs them all).
    for (PackedWeights::Matrix* m : {&packed_->wq, &packed_->wk, &packed_->wv, &packed_->wo}) {
      *m = PackedWeights::Matrix();
    }
    return s;
  }
  packed_->bq = weights_.q_bias();
  packed_->bk = weights_.k_bias();
  packed_->bv = weights_.v_bias();
  packed_->bo = weights_.out_bias();
  packed_->bias_k = weights_.bias_k();
  packed_->bias_v = weights_.bias_v();
  packed_->sinks = weights_.sinks();
  prepared_version_ = weights_.version();
  return Status::Ok();
}

void MultiheadAttention::ReleaseWorkspace() { own_context_.activations.Release(); }

size_t MultiheadAttention::workspace_bytes() const { return own_context_.activations.bytes(); }

// The calls on the module's own context: a refused one frees the workspace and the result it
// may have grown before failing (an output that fit the limit, then activations that did not),
// so it holds nothing more than before it. (Calls on a caller's context leave that to the
// caller: the Transformer releases its own.)
template <class Pass, class Result>
Status MultiheadAttention::InOwnContext(Pass pass, const TensorView& query, const TensorView& key,
                                        const TensorView& value, const ForwardOptions& options,
                                        Result* result) {
  own_context_.UseProcessDefaults();
  const Status s = (this->*pass)(query, key, value, options, result, &own_context_);
  if (!s.ok()) {
    ReleaseWorkspace();
    *result = Result();
  }
  return s;
}

Status MultiheadAttention::Forward(const TensorView& query, const TensorView& key,
                                   const TensorView& value, const ForwardOptions& options,
                                   ForwardResult* result, CallContext* context) {
  if (context == nullptr) {
    return InOwnContext(&MultiheadAttention::Forward, query, key, value, options, result);
  }
  return ForwardPass(query, key, value, options, result, context, nullptr);
}

Status MultiheadAttention::ForwardPass(const TensorView& query, const TensorView& key,
                                       const TensorView& value, const ForwardOptions& options,
                                       ForwardResult* result, CallContext* context,
                                       KvCache* cache) {
  CallPlan plan;
  HEADSCOPE_RETURN_IF_ERROR(PlanCall(config(), query, key, value, options, &plan));
  const size_t limit = context->max_call_bytes;
  size_t bytes = 0;
  const uint64_t output_floats = plan.output_floats();
  const uint64_t weights_floats =
      options.need_weights ? plan.weights_floats(options.average_attn_weights) : 0;
  if (!AddBytes(&bytes, output_floats, limit) || !AddBytes(&bytes, weights_floats, limit)) {
    return TooLarge(plan, limit, cache);
  }
  // Both counts are now known to fit the limit, hence size_t.
  if (!result->output.Resize(static_cast<size_t>(output_floats)) ||
      !result->weights.Resize(static_cast<size_t>(weights_floats))) {
    return OutOfMemory("forward result", bytes);
  }
  result->output_shape = plan.output_shape;
  result->weights_shape = plan.weights_shape;
  HEADSCOPE_RETURN_IF_ERROR(AllocateHeadStats(plan, &bytes, limit, &result->head_stats));
  PassOutputs out;
  out.head_stats = plan.head_stats ? &result->head_stats : nullptr;
  out.output = result->output.data();
  out.weights = options.need_weights ? result->weights.data() : nullptr;
  out.average_weights = options.average_attn_weights;
  out.counted = bytes;
  return Run(plan, query, key, value, options, out, context, cache);
}

Status MultiheadAttention::Trace(const TensorView& query, const TensorView& key,
                                 const TensorView& value, const ForwardOptions& options,
                                 AttentionTrace* trace, CallContext* context) {
  if (context == nullptr) {
    return InOwnContext(&MultiheadAttention::Trace, query, key, value, options, trace);
  }
  CallPlan plan;
  HEADSCOPE_RETURN_IF_ERROR(PlanCall(config(), query, key, value, options, &plan));
  const int64_t H = static_cast<int64_t>(plan.heads), hd = static_cast<int64_t>(plan.head_dim);
  const int64_t L = static_cast<int64_t>(plan.q_len), Sp = static_cast<int64_t>(plan.kv_total);
  const int64_t E = static_cast<int64_t>(plan.embed), G = static_cast<int64_t>(plan.kv_heads);
  const size_t limit = context->max_call_bytes;
  size_t bytes = 0;
  const uint64_t qfloats = plan.output_floats();
  const uint64_t kvfloats = SaturatingProduct({plan.batch, plan.kv_total, plan.kv_embed});
  const uint64_t wfloats = plan.weights_floats(/*average=*/false);
  // q, head_outputs, concat, output: L x E each; k, v: S' x Ekv; scores, weights: H x L x S';
  // with rotary embeddings rot_q (L x E) and rot_k (S' x Ekv) too.
  const bool rope = config().rope_dims > 0;
  for (uint64_t f : {qfloats, qfloats, qfloats, qfloats, kvfloats, kvfloats, wfloats, wfloats,
                     rope ? qfloats : 0, rope ? kvfloats : 0}) {
    if (!AddBytes(&bytes, f, limit)) return TooLarge(plan, limit);
  }
  const bool ok = Allocate(&trace->q, TraceShape(plan, {H, L, hd})) &&
                  Allocate(&trace->k, TraceShape(plan, {G, Sp, hd})) &&
                  Allocate(&trace->v, TraceShape(plan, {G, Sp, hd})) &&
                  Allocate(&trace->scores, TraceShape(plan, {H, L, Sp})) &&
                  Allocate(&trace->weights, TraceShape(plan, {H, L, Sp})) &&
                  Allocate(&trace->head_outputs, TraceShape(plan, {H, L, hd})) &&
                  Allocate(&trace->concat, TraceShape(plan, {L, E})) &&
                  Allocate(&trace->output, plan.output_shape) &&
                  Allocate(&trace->rot_q, rope ? TraceShape(plan, {H, L, hd}) : Shape()) &&
                  Allocate(&trace->rot_k, rope ? TraceShape(plan, {G, Sp, hd}) : Shape());
  if (!ok) return OutOfMemory("trace", bytes);
  HEADSCOPE_RETURN_IF_ERROR(AllocateHeadStats(plan, &bytes, limit, &trace->head_stats));
  PassOutputs out;
  out.head_stats = plan.head_stats ? &trace->head_stats : nullptr;
  out.output = trace->output.data.data();
  out.weights = trace->weights.data.data();
  out.average_weights = false;
  out.trace = trace;
  out.counted = bytes;
  return Run(plan, query, key, value, options, out, context);
}

bool KvCache::Reset(size_t n, size_t cap, size_t w) {
  batch = n;
  capacity = cap;
  width = w;
  length = 0;
  return k.Resize(n * cap * w) && v.Resize(n * cap * w);
}

Status MultiheadAttention::ForwardCached(const TensorView& x, const ForwardOptions& options,
                                         KvCache* cache, ForwardResult* result,
                                         CallContext* context) {
  const MhaConfig& c = config();
  if (!c.batch_first || !c.same_qkv_dim() || c.add_bias_kv || c.add_zero_attn) {
    return Status(StatusCode::kInvalidArgument,
                  "ForwardCached: needs a batch_first self-attention layer (kdim = vdim = "
                  "embed_dim, no add_bias_kv or add_zero_attn)");
  }
  const size_t E = static_cast<size_t>(c.embed_dim), H = static_cast<size_t>(c.num_heads);
  const size_t Ekv = static_cast<size_t>(c.kv_dim());
  if (x.shape.rank != 3 || x.shape[2] != c.embed_dim || x.shape[0] < 1 || x.shape[1] < 1 ||
      x.data == nullptr || x.size != static_cast<size_t>(x.shape.NumElements())) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kQuery,
                    "expected (N, T, " + std::to_string(E) + ") rows with N, T >= 1, got " +
                        x.shape.ToString());
  }
  const size_t N = static_cast<size_t>(x.shape[0]), T = static_cast<size_t>(x.shape[1]);
  if (N != cache->batch || cache->width != Ekv || cache->length + T > cache->capacity) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kQuery,
                    "the KV cache holds " + std::to_string(cache->batch) + " sequences of " +
                        std::to_string(cache->length) + " of at most " +
                        std::to_string(cache->capacity) + " positions: no room for (" +
                        std::to_string(N) + ", " + std::to_string(T) + ") more");
  }
  const TensorView& gates = options.head_gates;
  if (gates.present() && (gates.shape != Shape{static_cast<int64_t>(H)} || gates.data == nullptr ||
                          gates.size != H)) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kHeadGates,
                    "expected " + std::to_string(H) + " numbers (one per head), got shape " +
                        gates.shape.ToString());
  }
  // Forward's stages (Run), with the cache as where the keys and values go and come from. The
  // one query of a step sees every key: no causal rule to apply (LimitsKeys() would have the
  // packed path look for V rows that stop it skipping keys, for nothing); a longer run of new
  // positions is causal from its offset (the rows before it are all visible).
  // A window needs the rule at every step (it moves the first visible key), and with it
  // LimitsKeys() holds anyway. ALiBi counts distances from the queries' positions (q_offset).
  ForwardOptions o;
  o.need_weights = false;
  o.is_causal = T > 1 || options.window > 0;
  o.head_gates = gates;
  o.alibi = options.alibi;
  o.window = options.window;
  return ForwardPass(x, x, x, o, result, context, cache);
}

// One pass: the same stages for Forward and Trace, fast and small-head paths, one thread or many
// (the kernels choose; every choice gives the same bits).
Status MultiheadAttention::Run(const CallPlan& p, const TensorView& query, const TensorView& key,
                               const TensorView& value, const ForwardOptions& options,
                               const PassOutputs& out, CallContext* context, KvCache* cache) {
  // Complete, and the packed panels current (Prepare itself; skipped while nothing changed).
  if (prepared_version_ == 0 || prepared_version_ != weights_.version()) {
    HEADSCOPE_RETURN_IF_ERROR(Prepare());
  }
  AttentionArgs args = DescribeAttention(p, *context, cache);
  HEADSCOPE_RETURN_IF_ERROR(ReserveActivations(p, args, context, out.counted, cache));
  AttentionActivations& a = context->activations;
  const KeyValueRows kv = KeysAndValues(args, a, cache);

  ProjectQkv(p, *packed_, query, key, value, context->pool.threads, &a, kv);
  AppendExtraKeys(p, config(), *packed_, kv);
  // The positional stage: rotary embeddings turn q and the call's keys by position; ALiBi's
  // position bias is a ScoreModifiers field (its slopes, computed once per head count).
  const bool rotated = config().rope_dims > 0;
  if (rotated) {
    HEADSCOPE_RETURN_IF_ERROR(RotatePositions(p, config(), args, &rope_, &a, kv, out.trace));
  }
  if (p.alibi && alibi_slopes_.size() != p.heads) {
    if (!alibi_slopes_.Resize(p.heads)) return OutOfMemory("ALiBi slopes", p.heads * sizeof(float));
    for (size_t h = 0; h < p.heads; ++h) alibi_slopes_.data()[h] = AlibiSlope(h, p.heads);
  }
  PrepareMasks(p, options, &a, alibi_slopes_.data(), &args.modifiers);
  args.modifiers.sinks = packed_->sinks;  // (read by the softmax, not by the masks)
  AttendHeads(p, a, kv, out.weights, out.average_weights,
              out.trace != nullptr ? out.trace->scores.data.data() : nullptr, &args);
  ProjectOutput(p, *packed_, a, context->pool.threads, out.output);
  if (out.head_stats != nullptr) SummarizeHeads(p, a, out.head_stats);
  if (out.trace != nullptr) FillTrace(p, a, rotated, out.trace);
  if (cache != nullptr) cache->length += p.kv_len;  // the call's keys and values are kept
  return Status::Ok();
}

}  // namespace headscope
