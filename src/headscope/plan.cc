#include "headscope/plan.h"

#include <cmath>
#include <limits>
#include <string>

namespace headscope {
namespace {

#if defined(__EMSCRIPTEN__)
size_t g_max_call_bytes = size_t{2} << 30;
#else
size_t g_max_call_bytes = size_t{16} << 30;
#endif

std::string Str(int64_t v) { return std::to_string(v); }

// Checks that a tensor's data holds exactly the values its shape needs.
// (Runs for every input of every call: the argument's name is only spelled out on failure.)
Status CheckData(Arg arg, const Shape& shape, const void* data, size_t size) {
  const char* name = ArgPath(arg);
  for (int i = 0; i < shape.rank; ++i) {
    if (shape.dims[i] < 0) {
      return {StatusCode::kShapeMismatch, arg,
              std::string(name) + ": shape " + shape.ToString() + " has a negative dimension"};
    }
  }
  for (int i = 0; i < shape.rank; ++i) {
    if (shape.dims[i] > kMaxDim) {
      return Status(StatusCode::kResourceExhausted, arg,
                    std::string(name) + ": dimension " + std::to_string(i) + " of shape " +
                        shape.ToString() + " exceeds the maximum size " + Str(kMaxDim));
    }
  }
  const int64_t n = shape.NumElements();
  if (n < 0) {
    return Status(StatusCode::kResourceExhausted, arg,
                  std::string(name) + ": shape " + shape.ToString() + " has too many elements");
  }
  if (n > 0 && data == nullptr) {
    return {StatusCode::kShapeMismatch, arg,
            std::string(name) + ": data is null, but shape " + shape.ToString() + " needs " + Str(n) +
                " values"};
  }
  if (static_cast<uint64_t>(n) != size) {
    return {StatusCode::kShapeMismatch, arg,
            std::string(name) + ": shape " + shape.ToString() + " needs " + Str(n) + " values, got " +
                std::to_string(size)};
  }
  return Status::Ok();
}

// "(L, N, E) = [3, 2, 4]": names the dims of an expected shape as PyTorch's docs do.
std::string Expect(const char* names, const Shape& s) {
  return std::string(names) + " = " + s.ToString();
}

Status CheckCausalMask(const MaskView& m, size_t slices, size_t L, size_t S) {
  for (size_t b = 0; b < slices; ++b) {
    for (size_t i = 0; i < L; ++i) {
      for (size_t j = 0; j < S; ++j) {
        const size_t idx = (b * L + i) * S + j;
        const bool blocked = j > i;
        const bool ok = (m.type == MaskType::kBool)
                            ? ((static_cast<const uint8_t*>(m.data)[idx] != 0) == blocked)
                            : (static_cast<const float*>(m.data)[idx] ==
                               (blocked ? -std::numeric_limits<float>::infinity() : 0.0f));
        if (!ok) {
          std::string where = m.shape.rank == 3 ? "[" + std::to_string(b) + ", " : "[";
          where += std::to_string(i) + ", " + std::to_string(j) + "]";
          return ArgError(
              StatusCode::kInvalidArgument, Arg::kAttnMask,
              std::string("with ") + ArgName(Arg::kIsCausal) +
                  "=true it must be null or the causal mask (blocked exactly where key > query: "
                  "true / -inf above the diagonal, false / 0 elsewhere); entry " + where +
                  " differs");
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace

size_t MaxCallBytes() { return g_max_call_bytes; }
void SetMaxCallBytes(size_t bytes) { g_max_call_bytes = bytes; }

uint64_t SaturatingProduct(std::initializer_list<uint64_t> factors) {
  uint64_t product = 1;
  for (uint64_t f : factors) {
    if (f == 0) return 0;
  }
  for (uint64_t f : factors) {
    // Factors below 2^32 cannot overflow (the usual case: no test at all); otherwise a division,
    // not __builtin_mul_overflow, which in 32-bit WebAssembly is a call to a 128-bit multiply.
    // Both are a visible share of a tiny forward call, which computes a dozen of these.
    if (((product | f) >> 32) != 0 && product > UINT64_MAX / f) return UINT64_MAX;
    product *= f;
  }
  return product;
}

uint64_t CallPlan::output_floats() const { return SaturatingProduct({batch, q_len, embed}); }

uint64_t CallPlan::weights_floats(bool average) const {
  return SaturatingProduct({batch, average ? 1 : heads, q_len, kv_total});
}

bool AddBytes(size_t* total, uint64_t floats, size_t limit) {
  if (floats > limit / sizeof(float)) return false;
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  if (*total > limit - bytes) return false;
  *total += bytes;
  return true;
}


Status PlanCall(const MhaConfig& c, const TensorView& query, const TensorView& key,
                const TensorView& value, const ForwardOptions& opt, CallPlan* plan) {
  HEADSCOPE_RETURN_IF_ERROR(ValidateConfig(c));
  CallPlan p;
  const char* const q_names = c.batch_first ? "(N, L, E)" : "(L, N, E)";

  // Ranks: 2-D unbatched or 3-D batched, the same for all three.
  if (query.shape.rank != 2 && query.shape.rank != 3) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kQuery,
                    std::string("expected a 2-D (L, E) unbatched or 3-D ") + q_names +
                        " batched tensor, got shape " + query.shape.ToString());
  }
  p.batched = query.shape.rank == 3;
  const char* kind = p.batched ? "3-D (batched" : "2-D (unbatched";
  if (key.shape.rank != query.shape.rank) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kKey,
                    std::string("expected a ") + kind + ", like query), got shape " +
                        key.shape.ToString());
  }
  if (value.shape.rank != query.shape.rank) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kValue,
                    std::string("expected a ") + kind + ", like query), got shape " +
                        value.shape.ToString());
  }
  HEADSCOPE_RETURN_IF_ERROR(CheckData(Arg::kQuery, query.shape, query.data, query.size));
  HEADSCOPE_RETURN_IF_ERROR(CheckData(Arg::kKey, key.shape, key.data, key.size));
  HEADSCOPE_RETURN_IF_ERROR(CheckData(Arg::kValue, value.shape, value.data, value.size));

  const int last = query.shape.rank - 1;
  const int seq_axis = (p.batched && c.batch_first) ? 1 : 0;
  const int batch_axis = p.batched ? (c.batch_first ? 0 : 1) : -1;
  if (query.shape[last] != c.embed_dim) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kQuery,
                    std::string("expected last dimension ") + ArgName(Arg::kEmbedDim) + " = " +
                        Str(c.embed_dim) + ", got shape " + query.shape.ToString());
  }
  if (key.shape[last] != c.key_dim()) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kKey,
                    std::string("expected last dimension ") + ArgName(Arg::kKdim) + " = " +
                        Str(c.key_dim()) + ", got shape " + key.shape.ToString());
  }
  if (value.shape[last] != c.value_dim()) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kValue,
                    std::string("expected last dimension ") + ArgName(Arg::kVdim) + " = " +
                        Str(c.value_dim()) + ", got shape " + value.shape.ToString());
  }
  const int64_t N = p.batched ? query.shape[batch_axis] : 1;
  if (p.batched && key.shape[batch_axis] != N) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kKey, "batch size " + Str(key.shape[batch_axis]) +
                         " does not match query's " + Str(N) + " (key shape " +
                         key.shape.ToString() + ", query shape " + query.shape.ToString() + ")");
  }
  if (p.batched && value.shape[batch_axis] != N) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kValue, "batch size " + Str(value.shape[batch_axis]) +
                         " does not match query's " + Str(N) + " (value shape " +
                         value.shape.ToString() + ", query shape " + query.shape.ToString() +
                         ")");
  }
  if (value.shape[seq_axis] != key.shape[seq_axis]) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kValue, "sequence length " + Str(value.shape[seq_axis]) +
                         " does not match key's " + Str(key.shape[seq_axis]) + " (value shape " +
                         value.shape.ToString() + ", key shape " + key.shape.ToString() + ")");
  }

  p.batch = static_cast<size_t>(N);
  p.q_len = static_cast<size_t>(query.shape[seq_axis]);
  p.kv_len = static_cast<size_t>(key.shape[seq_axis]);
  p.kv_total = p.kv_len + (c.add_bias_kv ? 1 : 0) + (c.add_zero_attn ? 1 : 0);
  p.embed = static_cast<size_t>(c.embed_dim);
  p.kdim = static_cast<size_t>(c.key_dim());
  p.vdim = static_cast<size_t>(c.value_dim());
  p.heads = static_cast<size_t>(c.num_heads);
  p.head_dim = p.embed / p.heads;
  p.kv_heads = static_cast<size_t>(c.kv_heads());
  p.kv_embed = p.kv_heads * p.head_dim;
  auto layout = [&](size_t len, size_t dim) {
    RowLayout r;
    if (!p.batched) {
      r.seq = dim;
    } else if (c.batch_first) {
      r.seq = dim;
      r.batch = len * dim;
    } else {
      r.seq = p.batch * dim;
      r.batch = dim;
    }
    return r;
  };
  p.query = layout(p.q_len, p.embed);
  p.key = layout(p.kv_len, p.kdim);
  p.value = layout(p.kv_len, p.vdim);
  p.output = p.query;
  p.output_shape = query.shape;

  const int64_t L = static_cast<int64_t>(p.q_len), S = static_cast<int64_t>(p.kv_len);
  const int64_t H = c.num_heads;

  // key_padding_mask: (N, S), or (S) unbatched.
  const MaskView& kpm = opt.key_padding_mask;
  if (kpm.present()) {
    const Shape want = p.batched ? Shape{N, S} : Shape{S};
    if (kpm.shape != want) {
      return ArgError(StatusCode::kShapeMismatch, Arg::kKeyPaddingMask, "expected shape " +
                           Expect(p.batched ? "(N, S)" : "(S)", want) + ", got " +
                           kpm.shape.ToString());
    }
    HEADSCOPE_RETURN_IF_ERROR(CheckData(Arg::kKeyPaddingMask, kpm.shape, kpm.data, kpm.size));
    p.key_padding_type = kpm.type;
  }

  // attn_mask: (L, S), or (N * num_heads, L, S) / (num_heads, L, S) unbatched.
  const MaskView& am = opt.attn_mask;
  if (am.present()) {
    const Shape two{L, S};
    const Shape three{N * H, L, S};
    const std::string three_names = p.batched
                                        ? std::string("(N * ") + ArgName(Arg::kNumHeads) + ", L, S)"
                                        : std::string("(") + ArgName(Arg::kNumHeads) + ", L, S)";
    if (am.shape != two && am.shape != three) {
      return ArgError(StatusCode::kShapeMismatch, Arg::kAttnMask,
                      "expected shape " + Expect("(L, S)", two) + " or " +
                          Expect(three_names.c_str(), three) + ", got " + am.shape.ToString());
    }
    HEADSCOPE_RETURN_IF_ERROR(CheckData(Arg::kAttnMask, am.shape, am.data, am.size));
    p.attn_mask_type = am.type;
    p.attn_mask_per_head = am.shape.rank == 3;
    if (opt.is_causal) {
      const size_t slices = p.attn_mask_per_head ? static_cast<size_t>(N * H) : 1;
      HEADSCOPE_RETURN_IF_ERROR(CheckCausalMask(am, slices, p.q_len, p.kv_len));
    }
  }
  p.causal = opt.is_causal;
  // The position options (not torch's): window 0 (none) or a key count.
  if (opt.window < 0 || opt.window > kMaxDim) {
    return ArgError(StatusCode::kInvalidArgument, Arg::kWindow,
                    "expected 0 (no window) or an integer in [1, " + Str(kMaxDim) + "], got " +
                        Str(opt.window));
  }
  p.window = static_cast<size_t>(opt.window);
  p.alibi = opt.alibi;

  // head_gates: (num_heads), one per head, the same for every batch element.
  const TensorView& gates = opt.head_gates;
  if (gates.present()) {
    if (gates.shape.rank != 1) {
      return ArgError(StatusCode::kShapeMismatch, Arg::kHeadGates,
                      "expected a 1-D tensor of " + Str(H) + " numbers (one per head, shape (" +
                          ArgName(Arg::kNumHeads) + ") = [" + Str(H) + "]), got shape " +
                          gates.shape.ToString());
    }
    HEADSCOPE_RETURN_IF_ERROR(CheckData(Arg::kHeadGates, gates.shape, gates.data, gates.size));
    if (gates.shape[0] != H) {
      return ArgError(StatusCode::kShapeMismatch, Arg::kHeadGates, "expected " + Str(H) + " numbers (one per head), got " +
                           Str(gates.shape[0]));
    }
    p.head_gates = gates.data;
  }

  p.head_stats = opt.head_stats;
  if (opt.head_stats) p.head_stats_shape = p.batched ? Shape{N, H} : Shape{H};

  if (opt.need_weights) {
    const int64_t Sp = static_cast<int64_t>(p.kv_total);
    if (opt.average_attn_weights) {
      p.weights_shape = p.batched ? Shape{N, L, Sp} : Shape{L, Sp};
    } else {
      p.weights_shape = p.batched ? Shape{N, H, L, Sp} : Shape{H, L, Sp};
    }
  }
  *plan = p;
  return Status::Ok();
}

}  // namespace headscope
