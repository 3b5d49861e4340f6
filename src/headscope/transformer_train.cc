// Training of the Transformer: the backward of every stage of the reference module
// (tools/tiny_transformer.py) and the optimizer step over its parameters.
//
// The forward is RunBlocks with a Saved (transformer.cc): the same kernels as Forward, keeping
// each stage's numbers the backward reads. The backward then runs the stages in reverse, on the
// residual stream's gradient dx [M, D] (M = B * T rows):
//   logits = xf Wu^T + bu          dWu = dlogits^T xf, dbu = colsum, dxf = dlogits Wu
//   ln_final, ln1, ln2             LayerNorm's backward (kernels/rowwise.h)
//   MLP: h = act(h_pre)            dW = dy^T x, dx = dy W for fc_out and fc_in; act' on h_pre
//   attention (per batch element n, head h, with P the softmax weights, g the head's gate):
//     concat = g P V, out = concat Wo^T + bo
//     dWo = dout^T concat, dconcat = dout Wo
//     M = dZ V^T (dZ: head h's columns of dconcat), d gate = sum(P * M), dP = g M
//     dV = g P^T dZ,  dS = P * (dP - rowsum(P * dP)),  dQ = dS K / sqrt(hd),  dK = dS^T Q / sqrt(hd)
//     rotary positions (positions rope): the scores read q_rot = R q and k_rot = R k, R a rotation
//     per position, so dq = R^T dq_rot and dk = R^T dk_rot (RotateHeads inverse); dv unchanged
//     attention sinks (attn_sinks): d sink_h = -sum over rows of p_sink sum_j P_ij dP_ij, with
//     p_sink = 1 - sum_j P_ij (AttentionBackwardArgs::sink_grads); dS over the keys unchanged
//     dWin = dqkv^T a_in, da_in = dqkv Win
//   embeddings                     scatter-add of dx's rows into the token and position rows
//   tied (tie_embeddings: Wu is tok_embed.weight)   d tok_embed = dWu + the scatter-add, summed
//                                  once per element as torch's autograd sums the two uses
// (The per-head part is kernels/attention.h AttentionBackward, every (n, h) addressed through
// the forward's AttentionShape and visibility rule, on the forward's q, k, v when they were kept,
// Saved::keep_qkv, else on the same products computed again.)
// Every product is MatMulPacked (the forward's kernel: its bits do not depend on the thread
// count), with the right-hand operand packed by PackB through strides (a transposed operand costs
// no copy), or MatMulPackedTransA where the left-hand operand is a transpose (dY^T, P^T, dS^T:
// read in place, the same bits as on a copy); every other reduction (column sums, LayerNorm's,
// the gate gradients) is a loop in a fixed order. So the gradients are the same bits with 1 or N
// threads, and in every engine running one build (Node and browsers run the same WebAssembly).
// Builds differ where the kernels' targets do: native AVX2 / AVX-512 MulAdd is a fused
// multiply-add, WASM SIMD128's a multiply then an add, the relaxed-SIMD build's matmul chains
// relaxed_madd (an FMA on x86 and Arm; matmul-inl.h ChainMulAdd).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "headscope/kernels/attention.h"
#include "headscope/kernels/matmul.h"
#include "headscope/kernels/rowwise.h"
#include "headscope/kernels/softmax.h"
#include "headscope/plan.h"
#include "headscope/transformer.h"
#include "headscope/transformer_internal.h"

namespace headscope {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

bool Grow(AlignedBuffer* b, uint64_t floats, size_t* bytes, size_t limit) {
  return AddBytes(bytes, floats, limit) && b->Resize(static_cast<size_t>(floats));
}

// c [m, n] = alpha * a [m, k] (lda) B^T, B(j, p) = b[j * rs + p * cs]: PackB into `pack`, then
// the forward's kernel.
void Product(const float* a, size_t lda, const float* b, size_t rs, size_t cs, size_t m, size_t n,
             size_t k, float alpha, float* c, size_t ldc, float* pack, int threads) {
  PackB(b, n, k, rs, cs, pack);
  MatMulPacked(a, lda, pack, nullptr, m, n, k, alpha, c, ldc, threads);
}

// dW [out, in] = dy^T x over M rows (dy [M, out], x [M, in], both row-major): x read in place
// where the kernel takes `in` (MatMulRowMajorB), else packed into `pack` (PackedFloats(in, M)).
// The same chains, so the same bits, either way. In WebAssembly packing x, a transposing copy,
// cost 5% of the small model's step.
void WeightGradient(const float* dy, size_t out, const float* x, size_t in, size_t M, float* dw,
                    float* pack, int threads) {
  if (MatMulRowMajorB(/*trans_a=*/true, dy, out, x, in, out, in, M, 1.0f, dw, in, threads)) {
    return;
  }
  PackB(x, in, M, 1, in, pack);  // B(j, i) = x[i, j]
  MatMulPackedTransA(dy, out, pack, nullptr, out, in, M, 1.0f, dw, in, threads);
}

// out[j] = sum over rows of a[i, j], in row order, in float (a bias gradient: rows of M
// values; the compiler vectorizes across j, which changes no order within a column).
void ColumnSums(const float* a, size_t rows, size_t cols, size_t lda, float* out) {
  std::memset(out, 0, cols * sizeof(float));
  for (size_t i = 0; i < rows; ++i) {
    const float* r = a + i * lda;
    for (size_t j = 0; j < cols; ++j) out[j] += r[j];
  }
}

// Targets [positions]: -100 or in [0, vocab); the count of the counted ones, at least one.
Status CheckTargets(const int32_t* targets, int64_t positions, int64_t length, int64_t vocab,
                    size_t* counted) {
  *counted = 0;
  for (int64_t p = 0; p < positions; ++p) {
    const int32_t t = targets[p];
    if (t == -100) continue;
    if (t < 0 || t >= vocab) {
      const std::string at = length > 0 ? "[" + Str(p / length) + ", " + Str(p % length) + "]"
                                        : Str(p);
      return ArgError(StatusCode::kInvalidArgument, Arg::kTargets,
                      "target " + at + " is " + Str(t) + ", expected -100 (ignored) or an " +
                          "integer in [0, " + Str(vocab - 1) + "] (" + ArgName(Arg::kVocabSize) +
                          " " + Str(vocab) + ")");
    }
    ++*counted;
  }
  if (*counted == 0) {
    return ArgError(StatusCode::kInvalidArgument, Arg::kTargets,
                    "every target is -100 (ignored): there is no loss to compute");
  }
  return Status::Ok();
}

// dh *= act'(h_pre), elementwise: GELU (erf form) Phi(x) + x phi(x); ReLU 1 where x > 0, else 0
// (torch's threshold_backward: 0 at x = 0).
void ActivationBackward(Activation act, const float* h_pre, float* dh, size_t n) {
  if (act == Activation::kRelu) {
    for (size_t i = 0; i < n; ++i) dh[i] = h_pre[i] > 0 ? dh[i] : 0.0f;
    return;
  }
  GeluBackward(h_pre, dh, n);  // kernels/rowwise.h
}

// h = act(h_pre) as the forward computes it (GeluInPlace / ReluInPlace on a copy).
void Activated(Activation act, const float* h_pre, float* h, size_t n) {
  std::memcpy(h, h_pre, n * sizeof(float));
  if (act == Activation::kRelu) {
    ReluInPlace(h, n);
  } else {
    GeluInPlace(h, n);
  }
}
}  // namespace

Status Transformer::Loss(const float* logits, int64_t positions, int64_t vocab,
                         const int32_t* targets, double* loss) {
  size_t counted = 0;
  HEADSCOPE_RETURN_IF_ERROR(CheckTargets(targets, positions, 0, vocab, &counted));
  *loss = CrossEntropyRows(logits, static_cast<size_t>(positions), static_cast<size_t>(vocab), targets,
                       counted, nullptr);
  return Status::Ok();
}

Status Transformer::SetOptimizer(const OptimizerConfig& config) {
  std::unique_ptr<Optimizer> opt;
  HEADSCOPE_RETURN_IF_ERROR(Optimizer::Create(config, &opt));
  optimizer_ = std::move(opt);
  return Status::Ok();
}

Status Transformer::Gradient(std::string_view name, TensorView* out) const {
  // A TransformerParams key: an owned entry of the store, or the tied unembed.weight (an alias
  // of the whole of tok_embed.weight, whose gradient it reads); not q/k/v_proj_weight.
  const int i = store_.Find(name);
  if (i < 0 || (store_.is_alias(i) && i != unembed_w_)) {
    return UnknownKey(config_, "grads['" + QuoteInput(name) + "']");
  }
  if (!have_grads_) {
    return Status(StatusCode::kInvalidArgument, Arg::kStateDict,
                  "grads['" + QuoteInput(name) + "']: no gradients yet (run backward first)");
  }
  const Shape& shape = store_.shape(i);
  *out = TensorView(grads_.data() + store_.offset(i), shape,
                    static_cast<size_t>(shape.NumElements()));
  return Status::Ok();
}

Status Transformer::Backward(const TokenView& tokens, const int32_t* targets,
                             const BackwardOptions& options, BackwardResult* result) {
  const Status s = BackwardPass(tokens, targets, options, result);
  if (!s.ok()) {
    have_grads_ = false;  // a failed pass may have written some gradients
    // A refused pass frees what it grew (the saved stages, the backward's scratch, the
    // gradients, the activations): nothing more is held after it than before.
    ReleaseWorkspace();
  }
  return s;
}

Status Transformer::CheckBatch(const TokenView& tokens, const int32_t* targets) const {
  const TransformerConfig& c = config_;
  const int64_t B = tokens.batch, T = tokens.length;
  HEADSCOPE_RETURN_IF_ERROR(CheckTokens(tokens, Arg::kTokens, c.max_len, ArgName(Arg::kMaxLen)));
  if (targets == nullptr) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kTargets,
                    "expected (B, T) = (" + Str(B) + ", " + Str(T) + ") targets, got none");
  }
  // Loss's check, naming (b, t).
  size_t counted = 0;
  return CheckTargets(targets, B * T, T, c.vocab_size, &counted);
}

Status Transformer::BackwardPass(const TokenView& tokens, const int32_t* targets,
                                 const BackwardOptions& options, BackwardResult* result) {
  const TransformerConfig& c = config_;
  const int64_t B = tokens.batch, T = tokens.length, V = c.vocab_size;
  HEADSCOPE_RETURN_IF_ERROR(CheckBatch(tokens, targets));
  HEADSCOPE_RETURN_IF_ERROR(CheckGates(options.head_gates));
  size_t counted = 0;
  HEADSCOPE_RETURN_IF_ERROR(CheckTargets(targets, B * T, T, V, &counted));
  HEADSCOPE_RETURN_IF_ERROR(Prepare());
  if (saved_ == nullptr) {
    saved_.reset(new (std::nothrow) Saved);
    if (saved_ == nullptr) return TooLarge(B, T, context_.max_call_bytes);
  }
  Saved& sv = *saved_;

  // ---- Forward, keeping the stages ----
  context_.UseProcessDefaults();
  const size_t limit = context_.max_call_bytes;
  const uint64_t rows = static_cast<uint64_t>(B * T);
  const size_t M = static_cast<size_t>(rows), D = static_cast<size_t>(c.d_model);
  const size_t Vz = static_cast<size_t>(V), Mlp = static_cast<size_t>(c.d_mlp);
  const size_t H = static_cast<size_t>(c.n_heads), hd = D / H, Tz = static_cast<size_t>(T);
  const size_t Bz = static_cast<size_t>(B);
  // Grouped-query attention: G K/V heads of Dkv = G hd columns; in_proj's rows Dqkv = D + 2 Dkv
  // (3 D when G = H).
  const size_t Dkv = static_cast<size_t>(KvDim(c)), G = Dkv / hd, Dqkv = D + 2 * Dkv;
  const size_t L = static_cast<size_t>(c.n_layers);
  size_t bytes = 0;
  const uint64_t MD = SaturatingProduct({rows, static_cast<uint64_t>(D)});
  if (!Grow(&sv.logits, SaturatingProduct({rows, static_cast<uint64_t>(V)}), &bytes, limit)) {
    return TooLarge(B, T, limit);
  }
  // The backward's buffers are counted first, so RunBlocks's own accounting adds to them.
  const uint64_t wide = std::max<uint64_t>(Dqkv, Mlp);
  uint64_t pack = 0, trans = 0;
  const auto need = [&](uint64_t n, uint64_t k) {  // PackedFloats(n, k), in 64 bits
    pack = std::max<uint64_t>(pack, SaturatingProduct({(n + kPanel - 1) / kPanel * kPanel, k}));
  };
  for (uint64_t in : {static_cast<uint64_t>(D), static_cast<uint64_t>(Mlp)}) {
    need(in, rows);  // dW = dy^T x: x packed as (in, M)
  }
  need(D, Dqkv);    // da_in = dqkv Win
  need(D, D);       // dconcat = dout Wo; q, k or v = a_in W^T + b, recomputed
  need(D, V);       // dxf = dlogits Wu
  need(D, Mlp);     // dm_in = dh Wfc_in
  need(Mlp, D);     // dh = dm Wfc_out
  // The forward's q | k | v, kept (SavedLayer::qkv, counted by RunBlocks) or recomputed here.
  sv.keep_qkv = SaturatingProduct({rows, static_cast<uint64_t>(Dqkv), L, sizeof(float)}) <=
                Saved::kKeepQkvBytes;
  trans = sv.keep_qkv ? 0 : SaturatingProduct({rows, static_cast<uint64_t>(Dqkv)});
  const uint64_t tile = AttentionBackwardFloats(Tz, hd, H / G);  // kernels/attention.h
  if (!Grow(&sv.dx, MD, &bytes, limit) || !Grow(&sv.dtmp, MD, &bytes, limit) ||
      !Grow(&sv.dnorm, MD, &bytes, limit) ||
      !Grow(&sv.dwide, SaturatingProduct({rows, wide}), &bytes, limit) ||
      !Grow(&sv.dlogits, SaturatingProduct({rows, static_cast<uint64_t>(V)}), &bytes, limit) ||
      !Grow(&sv.pack, pack, &bytes, limit) ||
      (trans > 0 && !Grow(&sv.qkv, trans, &bytes, limit)) ||
      !Grow(&sv.head, tile, &bytes, limit)) {
    return TooLarge(B, T, limit);
  }
  if (c.norm == NormPlacement::kPre && !Grow(&sv.final_in, MD, &bytes, limit)) {
    return TooLarge(B, T, limit);  // ln_final's input, kept
  }
  if (c.tie_embeddings && !Grow(&sv.dembed, SaturatingProduct({static_cast<uint64_t>(V), D}),
                                &bytes, limit)) {
    return TooLarge(B, T, limit);  // the embedding's share of the tied gradient
  }
  // The gradients: one buffer laid out as the store (entry i's at store_.offset(i)).
  if (!Grow(&grads_, store_.floats(), &bytes, limit)) return TooLarge(B, T, limit);
  HEADSCOPE_RETURN_IF_ERROR(RunBlocks(tokens, 0, options.head_gates, /*cached=*/false, bytes,
                                      nullptr, nullptr, &sv));
  const bool pre = c.norm == NormPlacement::kPre, post = c.norm == NormPlacement::kPost;
  const float eps = static_cast<float>(c.ln_eps);  // as the forward's LayerNorm takes it
  if (pre) {
    std::memcpy(sv.final_in.data(), x_.data(), M * D * sizeof(float));
    LayerNormRows(x_.data(), M, D, store_.data(ln_final_w_), store_.data(ln_final_b_),
                  eps, x_.data());
  }
  Unembed(x_.data(), M, sv.logits.data());  // x_: the unembedding's input xf

  // ---- Backward ----
  const int threads = context_.pool.threads;
  // A store entry's weights and its gradient, by index (null for an entry the config lacks, -1).
  const auto weight = [&](int entry) { return entry >= 0 ? store_.data(entry) : nullptr; };
  const auto grad = [&](int entry) {
    return entry >= 0 ? grads_.data() + store_.offset(entry) : nullptr;
  };
  // dW [out, in] = dy^T x, db = colsum(dy), and (dx != null) dx [M, in] = dy W: the backward
  // of y = x W^T + b over M rows.
  const auto linear = [&](const float* x, const float* w, const float* dy, size_t in, size_t out,
                          float* dw, float* db, float* dx) {
    WeightGradient(dy, out, x, in, M, dw, sv.pack.data(), threads);
    if (db != nullptr) ColumnSums(dy, M, out, out, db);
    if (dx != nullptr) {
      Product(dy, out, w, 1, in, M, in, out, 1.0f, dx, in, sv.pack.data(), threads);
    }
  };

  // The loss (Loss's bits) and dlogits = (softmax(row) - onehot(target)) / counted.
  float* dlogits = sv.dlogits.data();
  result->loss = CrossEntropyRows(sv.logits.data(), M, Vz, targets, counted, dlogits);
  float* dx = sv.dx.data();
  linear(x_.data(), weight(unembed_w_), dlogits, D, Vz, grad(unembed_w_), grad(unembed_b_), dx);
  if (pre) {
    LayerNormBackwardRows(sv.final_in.data(), dx, M, D, weight(ln_final_w_), eps, sv.dtmp.data(),
                          false, grad(ln_final_w_), grad(ln_final_b_));
    std::memcpy(dx, sv.dtmp.data(), M * D * sizeof(float));
  }

  if (options.head_gate_grads) result->head_gate_grads.assign(L * H, 0.0);
  for (size_t li = L; li-- > 0;) {
    const Layer& layer = *layers_[li];
    const SavedLayer& sl = sv.layers[li];
    const MhaConfig& mc = layer.attn->config();
    const bool rope = mc.rope_dims > 0;
    // dx: the gradient of the block's output.
    if (c.d_mlp > 0) {
      if (post) {  // x_out = ln2(sum2)
        LayerNormBackwardRows(sl.sum2.data(), dx, M, D, weight(layer.ln2_w), eps, sv.dtmp.data(),
                              false, grad(layer.ln2_w), grad(layer.ln2_b));
        std::memcpy(dx, sv.dtmp.data(), M * D * sizeof(float));
      }
      // sum2 = resid_mid + mlp(m_in): dx is d mlp_out and (the residual) part of d resid_mid.
      // Pre-norm: m_in = ln2(resid_mid) again, the forward's bits (kept would cost [M, D]).
      const float* m_in = sl.resid_mid.data();
      if (pre) {
        LayerNormRows(sl.resid_mid.data(), M, D, weight(layer.ln2_w), weight(layer.ln2_b), eps,
                      sv.dnorm.data());
        m_in = sv.dnorm.data();
      }
      float* h = sv.dwide.data();  // h = act(h_pre), recomputed rather than kept
      Activated(c.act, sl.h_pre.data(), h, M * Mlp);
      // fc_out: dW = dm^T h (after which dwide, h's room, is free again), dh = dm Wfc_out.
      WeightGradient(dx, D, h, Mlp, M, grad(layer.fc_out_w), sv.pack.data(), threads);
      if (layer.fc_out_b >= 0) ColumnSums(dx, M, D, D, grad(layer.fc_out_b));
      float* dhid = sv.dwide.data();
      Product(dx, D, weight(layer.fc_out_w), 1, Mlp, M, Mlp, D, 1.0f, dhid, Mlp, sv.pack.data(),
              threads);
      ActivationBackward(c.act, sl.h_pre.data(), dhid, M * Mlp);
      // fc_in: dW = dh^T m_in, dm_in = dh Wfc_in.
      float* dm_in = sv.dtmp.data();
      linear(m_in, weight(layer.fc_in_w), dhid, D, Mlp, grad(layer.fc_in_w), grad(layer.fc_in_b),
             dm_in);
      if (pre) {  // m_in = ln2(resid_mid)
        LayerNormBackwardRows(sl.resid_mid.data(), dm_in, M, D, weight(layer.ln2_w), eps, dx,
                              /*add=*/true, grad(layer.ln2_w), grad(layer.ln2_b));
      } else {
        AddInPlace(dx, dm_in, M * D);
      }
    }
    // dx: the gradient of resid_mid (post-norm: of ln1's output).
    if (post) {  // resid_mid = ln1(sum1)
      LayerNormBackwardRows(sl.sum1.data(), dx, M, D, weight(layer.ln1_w), eps, sv.dtmp.data(),
                            false, grad(layer.ln1_w), grad(layer.ln1_b));
      std::memcpy(dx, sv.dtmp.data(), M * D * sizeof(float));
    }
    // sum1 = resid_pre + attn(a_in): dx is d attn_out and part of d resid_pre.
    // out_proj: dWo = dout^T concat, dconcat = dout Wo.
    float* dconcat = sv.dtmp.data();
    linear(sl.concat.data(), weight(layer.out_proj_w), dx, D, D, grad(layer.out_proj_w),
           grad(layer.out_proj_b), dconcat);
    // The attention's input and its projections again rather than kept ([M, D] and [M, Dqkv] a
    // layer: what keeps the 1M model's training within 64 MB): a_in = ln1(resid_pre) under
    // pre-norm, and q [M, D], k and v [M, Dkv] = a_in W^T + b, the products the forward's
    // projections compute (ProjectQkv: one per row block of in_proj_weight, the same kernel and
    // operands, so the same bits), in trans, free until in_proj's backward below.
    // (Kept: sl.qkv holds the forward's own q, k and v.)
    const float* a_in = sl.resid_pre.data();
    if (pre) {
      LayerNormRows(sl.resid_pre.data(), M, D, weight(layer.ln1_w), weight(layer.ln1_b), eps,
                    sv.dnorm.data());
      a_in = sv.dnorm.data();
    }
    const float* qkv = sl.qkv.data();  // q [M, D], k [M, Dkv], v [M, Dkv]: the activations'
    if (!sv.keep_qkv) {
      const float* win = weight(layer.in_proj_w);
      const float* bin = weight(layer.in_proj_b);
      // Part p: in_proj's rows [first, first + n), into qkv at M * first.
      const size_t first[3] = {0, D, D + Dkv}, width[3] = {D, Dkv, Dkv};
      for (size_t part = 0; part < 3; ++part) {
        const size_t r0 = first[part], n = width[part];
        PackB(win + r0 * D, n, D, D, 1, sv.pack.data());
        MatMulPacked(a_in, D, sv.pack.data(), bin != nullptr ? bin + r0 : nullptr, M, n, D,
                     1.0f, sv.qkv.data() + M * r0, n, threads);
      }
      // Rotary positions: q and k turned as the forward's positional stage turned them (the
      // same function and angles, so the same bits); the kept ones are the turned ones already.
      if (rope) {
        const RopeTable& angles = layer.attn->rope_table();
        RotateHeads(mc, angles, sv.qkv.data(), Bz, Tz, Tz * D, D, H, 0, false);
        RotateHeads(mc, angles, sv.qkv.data() + M * D, Bz, Tz, Tz * Dkv, Dkv, G, 0, false);
      }
      qkv = sv.qkv.data();
    }
    // The heads' backward over the forward's activations (q [B, T, D], k and v [B, T, Dkv], as
    // its AttentionShape describes them, G K/V heads) and the rule of which keys each row saw;
    // the gradients dq | dk | dv go to the rows of dqkv [M, Dqkv], in_proj's dy (dk and dv summed
    // over each group of H / G heads).
    float* dqkv = sv.dwide.data();
    AttentionBackwardArgs ab;
    ab.shape = AttentionShape::Dense(static_cast<size_t>(B), H, Tz, Tz, Tz, hd, G);
    ab.modifiers.causal = c.causal;
    ab.modifiers.window = static_cast<size_t>(c.attn_window);  // (ALiBi's bias: a constant here)
    ab.sqrt_head_dim = std::sqrt(static_cast<float>(hd));
    ab.q = qkv;
    ab.k = qkv + M * D;
    ab.v = qkv + M * (D + Dkv);
    ab.weights = sl.pattern.data();
    ab.head_gates = options.head_gates.present() ? options.head_gates.data + li * H : nullptr;
    ab.dz = dconcat;
    ab.grads = ab.shape;
    ab.grads.q_row_stride = ab.grads.kv_row_stride = Dqkv;
    ab.grads.q_batch_stride = ab.grads.kv_batch_stride = Tz * Dqkv;
    ab.dq = dqkv;
    ab.dk = dqkv + D;
    ab.dv = dqkv + D + Dkv;
    ab.gate_grads = options.head_gate_grads ? &result->head_gate_grads[li * H] : nullptr;
    // Attention sinks: their logits in the softmax (as the forward had them) and their gradient,
    // summed in double over the batch's rows, then stored as the entry's float gradient.
    std::vector<double> sink_grads(layer.sinks >= 0 ? H : 0, 0.0);
    if (layer.sinks >= 0) {
      ab.modifiers.sinks = weight(layer.sinks);
      ab.sink_grads = sink_grads.data();
    }
    AttentionBackward(ab, sv.head.data());
    for (size_t h = 0; h < sink_grads.size(); ++h) {
      grad(layer.sinks)[h] = static_cast<float>(sink_grads[h]);
    }
    if (rope) {  // dq = R^T dq_rot, dk = R^T dk_rot, in place in dqkv's rows
      RotateHeads(mc, layer.attn->rope_table(), dqkv, Bz, Tz, Tz * Dqkv, Dqkv, H, 0, true);
      RotateHeads(mc, layer.attn->rope_table(), dqkv + D, Bz, Tz, Tz * Dqkv, Dqkv, G, 0, true);
    }
    // in_proj: dWin = dqkv^T a_in, da_in = dqkv Win (dconcat's room is free again).
    float* da_in = sv.dtmp.data();
    linear(a_in, weight(layer.in_proj_w), dqkv, D, Dqkv, grad(layer.in_proj_w),
           grad(layer.in_proj_b), da_in);
    if (pre) {  // a_in = ln1(resid_pre)
      LayerNormBackwardRows(sl.resid_pre.data(), da_in, M, D, weight(layer.ln1_w), eps, dx,
                            /*add=*/true, grad(layer.ln1_w), grad(layer.ln1_b));
    } else {
      AddInPlace(dx, da_in, M * D);
    }
  }
  // Embeddings: x0 = tok_embed[tokens] (+ pos_embed[t]). Tied, tok_embed's gradient holds the
  // unembedding's dWu already (unembed_w_ is its alias): the embedding's part is summed apart and
  // added once, dWu + dE per element, as torch's autograd adds the two uses' gradients.
  float* dtok = c.tie_embeddings ? sv.dembed.data() : grad(tok_embed_);
  std::memset(dtok, 0, Vz * D * sizeof(float));
  for (size_t r = 0; r < M; ++r) {
    AddInPlace(dtok + static_cast<size_t>(tokens.data[r]) * D, dx + r * D, D);
  }
  if (c.tie_embeddings) AddInPlace(grad(tok_embed_), dtok, Vz * D);
  if (c.positions == PositionKind::kLearned) {  // (rope, sinusoidal and none have no table)
    float* dpos = grad(pos_embed_);
    std::memset(dpos, 0, static_cast<size_t>(c.max_len) * D * sizeof(float));
    for (size_t r = 0; r < M; ++r) AddInPlace(dpos + (r % Tz) * D, dx + r * D, D);
  }
  have_grads_ = true;
  return Status::Ok();
}

Status Transformer::TrainStep(const TokenView& tokens, const int32_t* targets,
                              TrainStepResult* result) {
  const Status s = TrainStepPass(tokens, targets, result);
  // Refused (not a step the optimizer declined, which is a result): the pass's buffers go, as
  // Backward's do. (The optimizer keeps no moments from a step it did not take.)
  if (!s.ok()) ReleaseWorkspace();
  return s;
}

Status Transformer::TrainStepPass(const TokenView& tokens, const int32_t* targets,
                                  TrainStepResult* result) {
  if (optimizer_ == nullptr) {
    // (No argument id: the call's arguments are fine, the model lacks an optimizer.)
    return Status(StatusCode::kInvalidArgument,
                  "trainStep: no optimizer set (call setOptimizer first)");
  }
  BackwardResult br;
  HEADSCOPE_RETURN_IF_ERROR(Backward(tokens, targets, BackwardOptions{}, &br));
  // The slots in named_parameters order, each an owned entry of the store (in_proj_weight, not
  // its q/k/v_proj_weight aliases) and its gradient at the same offset. MutableData bumps the
  // versions, so the next pass repacks.
  slots_.resize(param_entries_.size());
  for (size_t k = 0; k < param_entries_.size(); ++k) {
    const int i = param_entries_[k];
    slots_[k] = {store_.MutableData(i), grads_.data() + store_.offset(i),
                 static_cast<size_t>(store_.shape(i).NumElements()), store_.name(i)};
  }
  OptimizerStepResult step;
  const Status s = optimizer_->Step(slots_, &step);
  result->loss = br.loss;
  result->grad_norm = step.grad_norm;
  result->clipped = step.clip_coef < 1.0f;
  result->stepped = step.stepped;
  result->refused.clear();
  if (!s.ok()) {
    // Non-finite values refuse the step and leave everything as it was: reported in the result
    // (a training loop sees loss / gradNorm and stops); any other failure is an error.
    if (s.code() != StatusCode::kInvalidArgument) return s;
    result->refused = s.message();
  }
  return Status::Ok();
}

}  // namespace headscope
