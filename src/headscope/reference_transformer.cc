#include "headscope/reference_transformer.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <new>
#include <string>

#include "headscope/config.h"
#include "headscope/kernels/attention.h"  // AlibiSlope

namespace headscope {
namespace {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowVector = Eigen::Matrix<double, 1, Eigen::Dynamic>;
using ConstMap = Eigen::Map<const Matrix>;
using MutableMap = Eigen::Map<Matrix>;
using ConstRowMap = Eigen::Map<const RowVector>;
using MutableRowMap = Eigen::Map<RowVector>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int32_t kIgnoreIndex = -100;

std::string Str(int64_t v) { return std::to_string(v); }
std::string Block(int64_t l) { return "blocks." + Str(l) + "."; }

// ---- Parameters ---------------------------------------------------------------------------------

// One state_dict entry: its values and, in a pass with targets, where d loss / d entry
// accumulates (same shape; null in a forward-only pass).
struct Entry {
  const double* value = nullptr;
  double* grad = nullptr;
};

// A torch Linear, or the attention's in_proj / out_proj: weight [out, in], bias [out] (value
// null when config.bias is false).
struct Linear {
  Entry weight, bias;
  int64_t out = 0, in = 0;
};

struct LayerNorm {
  Entry weight, bias;  // [D] each
};

struct BlockParams {
  LayerNorm ln1, ln2;  // absent (null) as the config says: norm 'none', no MLP
  Linear in_proj;      // [D + 2 Dkv, D]: the rows of q (D), then k, then v (Dkv = G dh each)
  Linear out_proj, fc_in, fc_out;
  Entry sinks;  // [H], attn_sinks only
};

struct Params {
  Entry tok_embed;  // [V, D]
  Entry pos_embed;  // [max_len, D], learned positions only
  std::vector<BlockParams> blocks;
  LayerNorm ln_final;  // norm 'pre' only
  Linear unembed;      // [V, D]
};

// ---- The hooks ----------------------------------------------------------------------------------

// Appends each stage's values to its hook. The sequences of the batch run one after the other
// and a sequence's heads in order, so appending gives the hooks' [B, ...] and [B, H, ...] layouts.
class HookSink {
 public:
  explicit HookSink(std::vector<std::pair<std::string, std::vector<double>>>* hooks)
      : hooks_(hooks) {
    for (size_t i = 0; i < hooks->size(); ++i) index_[(*hooks)[i].first] = i;
  }
  void Add(const std::string& name, const Matrix& m) {
    const auto it = index_.find(name);
    if (it == index_.end()) return;  // (never: the names come from TransformerHookNames)
    std::vector<double>& dst = (*hooks_)[it->second].second;
    dst.insert(dst.end(), m.data(), m.data() + m.size());
  }

 private:
  std::vector<std::pair<std::string, std::vector<double>>>* hooks_;
  std::map<std::string, size_t> index_;
};

// ---- Stages, each with its backward -----------------------------------------------------------

// F.linear: y = x W^T + b.
Matrix LinearForward(const Linear& p, const Matrix& x) {
  Matrix y = x * ConstMap(p.weight.value, p.out, p.in).transpose();
  if (p.bias.value != nullptr) y.rowwise() += ConstRowMap(p.bias.value, p.out);
  return y;
}

// Given dy = d loss / d y: dW += dy^T x, db += the sum of dy's rows (the bias is added to every
// row); returns dx = dy W.
Matrix LinearBackward(const Linear& p, const Matrix& x, const Matrix& dy) {
  MutableMap(p.weight.grad, p.out, p.in).noalias() += dy.transpose() * x;
  if (p.bias.grad != nullptr) MutableRowMap(p.bias.grad, p.out) += dy.colwise().sum();
  return dy * ConstMap(p.weight.value, p.out, p.in);
}

// What LayerNorm's backward needs of its forward.
struct LayerNormSaved {
  Matrix normalized;        // [T, D] x_hat = (x - mean) / sqrt(var + eps)
  Eigen::VectorXd inv_std;  // [T]    1 / sqrt(var + eps)
};

// torch's LayerNorm over the last axis: the biased variance (divided by D, not D - 1), eps inside
// the square root, then weight * x_hat + bias.
Matrix LayerNormForward(const LayerNorm& p, double eps, const Matrix& x, LayerNormSaved* saved) {
  const Eigen::Index T = x.rows(), D = x.cols();
  saved->normalized.resize(T, D);
  saved->inv_std.resize(T);
  for (Eigen::Index i = 0; i < T; ++i) {
    const RowVector centered = x.row(i).array() - x.row(i).mean();
    const double var = centered.squaredNorm() / static_cast<double>(D);
    saved->inv_std(i) = 1.0 / std::sqrt(var + eps);
    saved->normalized.row(i) = centered * saved->inv_std(i);
  }
  Matrix y = saved->normalized.array().rowwise() * ConstRowMap(p.weight.value, D).array();
  y.rowwise() += ConstRowMap(p.bias.value, D);
  return y;
}

// y = w * x_hat + b. dw += sum over rows of dy * x_hat, db += sum of dy. For x, with
// g = dy * w = d loss / d x_hat: x_hat depends on x directly and through the row's mean and
// variance, which gives, per row,
//   dx = inv_std * (g - mean(g) - x_hat * mean(g * x_hat)).
Matrix LayerNormBackward(const LayerNorm& p, const LayerNormSaved& saved, const Matrix& dy) {
  const Eigen::Index T = dy.rows(), D = dy.cols();
  MutableRowMap(p.weight.grad, D) +=
      (dy.array() * saved.normalized.array()).colwise().sum().matrix();
  MutableRowMap(p.bias.grad, D) += dy.colwise().sum();
  const Matrix g = dy.array().rowwise() * ConstRowMap(p.weight.value, D).array();
  Matrix dx(T, D);
  for (Eigen::Index i = 0; i < T; ++i) {
    const double mean_g = g.row(i).mean();
    const double mean_g_xhat = g.row(i).dot(saved.normalized.row(i)) / static_cast<double>(D);
    dx.row(i) =
        saved.inv_std(i) *
        (g.row(i).array() - mean_g - saved.normalized.row(i).array() * mean_g_xhat).matrix();
  }
  return dx;
}

// Exact GELU, x Phi(x) with Phi the standard normal CDF (F.gelu's default, not the tanh form).
double Phi(double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); }
double Gelu(double x) { return x * Phi(x); }
// d/dx x Phi(x) = Phi(x) + x phi(x), phi the standard normal density.
double GeluGrad(double x) {
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
  return Phi(x) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
}

// Rotary position embeddings in double (positions rope): row t of x (heads of dh side by side)
// at position t, the first RopeDims(c) dims of each head turned pair by pair, (a, b) ->
// (a cos - b sin, a sin + b cos) with the angle t / base^(2i / r) in double (the float64
// module's table); `inverse`: by the opposite angle (R^T, the backward's). x as it is without
// rope.
Matrix Rope(const TransformerConfig& c, const Matrix& x, bool inverse) {
  const int64_t r = RopeDims(c), dh = c.d_model / c.n_heads, pairs = r / 2;
  if (r == 0) return x;
  const bool interleaved = c.rope_layout == RopeLayout::kInterleaved;
  Matrix y = x;
  for (int64_t i = 0; i < pairs; ++i) {
    const double theta = 1.0 / std::pow(c.rope_base, static_cast<double>(2 * i) /
                                                         static_cast<double>(r));
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + pairs;
    for (Eigen::Index t = 0; t < x.rows(); ++t) {
      const double angle = static_cast<double>(t) * theta;
      const double co = std::cos(angle), si = inverse ? -std::sin(angle) : std::sin(angle);
      for (Eigen::Index h = 0; h < x.cols() / dh; ++h) {
        const double x0 = x(t, h * dh + a), x1 = x(t, h * dh + b);
        y(t, h * dh + a) = x0 * co - x1 * si;
        y(t, h * dh + b) = x0 * si + x1 * co;
      }
    }
  }
  return y;
}

// What the attention's backward needs of its forward.
struct AttentionSaved {
  Matrix input;                  // [T, D]  what in_proj saw
  Matrix q, k, v;                // [T, D], [T, Dkv], [T, Dkv]: the heads side by side (head h:
                                 // columns h dh ..; K/V head g: g dh ..); q and k as the scores
                                 // read them (turned, with rotary positions)
  std::vector<Matrix> pattern;   // H x [T, T]  softmax(scores)
  std::vector<std::vector<double>> sink_weight;  // H x [T]: each row's sink weight (attn_sinks)
  std::vector<Matrix> head_out;  // H x [T, dh] pattern v, before the gate
  Matrix concat;                 // [T, D]  the gated z of every head, side by side
};

// The reference's attention(): in_proj, per head scores = (q / sqrt(dh)) k^T masked to -inf
// above the diagonal (causal), softmax, z = pattern v times the head's gate, out_proj. With
// grouped-query attention (n_kv_heads = G < H) head h's k and v are K/V head h / (H / G): the
// reference's k.repeat_interleave(H / G, dim=1); hook_k and hook_v hold the G heads.
Matrix AttentionForward(const TransformerConfig& c, const BlockParams& p, const Matrix& x,
                        const double* gates, const std::string& prefix, AttentionSaved* s,
                        HookSink* hooks) {
  const Eigen::Index T = x.rows(), D = c.d_model, H = c.n_heads, dh = D / H;
  const Eigen::Index Dkv = KvDim(c), group = H / (Dkv / dh);
  const double sqrt_dh = std::sqrt(static_cast<double>(dh));
  s->input = x;
  const Matrix qkv = LinearForward(p.in_proj, x);  // [T, D + 2 Dkv]
  const Matrix q_proj = qkv.leftCols(D), k_proj = qkv.middleCols(D, Dkv);
  const bool rope = RopeDims(c) > 0;
  s->q = Rope(c, q_proj, false);
  s->k = Rope(c, k_proj, false);
  s->v = qkv.rightCols(Dkv);
  s->pattern.assign(static_cast<size_t>(H), Matrix());
  s->sink_weight.assign(static_cast<size_t>(H), std::vector<double>(static_cast<size_t>(T), 0.0));
  s->head_out.assign(static_cast<size_t>(H), Matrix());
  s->concat.resize(T, D);
  for (Eigen::Index h = 0; h < H; ++h) {
    const Eigen::Index g = h / group;
    const Matrix qh = s->q.middleCols(h * dh, dh), kh = s->k.middleCols(g * dh, dh);
    const Matrix vh = s->v.middleCols(g * dh, dh);
    Matrix scores = (qh / sqrt_dh) * kh.transpose();  // [T, T]
    // positions "alibi": + -(slope_h |i - j|), the float slope (AlibiSlope) in double.
    if (c.positions == PositionKind::kAlibi) {
      const double slope = AlibiSlope(static_cast<size_t>(h), static_cast<size_t>(H));
      for (Eigen::Index i = 0; i < T; ++i) {
        for (Eigen::Index j = 0; j < T; ++j) {
          scores(i, j) -= slope * static_cast<double>(i > j ? i - j : j - i);
        }
      }
    }
    // Causal: j > i blocked; a window w: j <= i - w blocked, and j >= i + w without causal.
    const Eigen::Index w = c.attn_window;
    for (Eigen::Index i = 0; i < T; ++i) {
      for (Eigen::Index j = 0; j < T; ++j) {
        if ((c.causal && j > i) || (w > 0 && (j <= i - w || (!c.causal && j >= i + w)))) {
          scores(i, j) = -kInf;
        }
      }
    }
    Matrix& pattern = s->pattern[static_cast<size_t>(h)];
    pattern.resize(T, T);
    for (Eigen::Index i = 0; i < T; ++i) {
      // Key i (the query's own) is never masked, so every row has a finite maximum; exp(-inf)
      // is exactly 0. Attention sinks: the head's sink logit joins the max and the sum, its
      // weight kept apart (the reference's cat of the sink column, softmax, and [..., :-1]).
      double max = scores.row(i).maxCoeff();
      const bool sink = c.attn_sinks;
      const double logit = sink ? p.sinks.value[h] : 0.0;
      if (sink) max = std::max(max, logit);
      for (Eigen::Index j = 0; j < T; ++j) pattern(i, j) = std::exp(scores(i, j) - max);
      const double e_sink = sink ? std::exp(logit - max) : 0.0;
      const double sum = pattern.row(i).sum() + e_sink;
      pattern.row(i) /= sum;
      s->sink_weight[static_cast<size_t>(h)][static_cast<size_t>(i)] = e_sink / sum;
    }
    Matrix& out = s->head_out[static_cast<size_t>(h)];
    out = pattern * vh;  // [T, dh]
    const double gate = gates != nullptr ? gates[h] : 1.0;
    s->concat.middleCols(h * dh, dh) = gate * out;
    hooks->Add(prefix + "hook_q", q_proj.middleCols(h * dh, dh));  // (before the rotation)
    if (h % group == 0) {  // each K/V head once, in order
      hooks->Add(prefix + "hook_k", k_proj.middleCols(g * dh, dh));
      hooks->Add(prefix + "hook_v", vh);
    }
    if (rope) {
      hooks->Add(prefix + "hook_rot_q", qh);
      if (h % group == 0) hooks->Add(prefix + "hook_rot_k", kh);
    }
    hooks->Add(prefix + "hook_attn_scores", scores);
    hooks->Add(prefix + "hook_pattern", pattern);
    hooks->Add(prefix + "hook_z", s->concat.middleCols(h * dh, dh));
  }
  return LinearForward(p.out_proj, s->concat);
}

// The attention's backward from d_out = d loss / d (its output): returns d loss / d (its input)
// and adds each head's d loss / d gate to gate_grads[h]. Grouped-query attention: a K/V head's
// dk and dv are the sums over the H / G query heads that read it.
Matrix AttentionBackward(const TransformerConfig& c, const BlockParams& p, const AttentionSaved& s,
                         const Matrix& d_out, const double* gates, double* gate_grads) {
  const Eigen::Index T = d_out.rows(), D = c.d_model, H = c.n_heads, dh = D / H;
  const Eigen::Index Dkv = KvDim(c), group = H / (Dkv / dh);
  const double sqrt_dh = std::sqrt(static_cast<double>(dh));
  const Matrix d_concat = LinearBackward(p.out_proj, s.concat, d_out);  // [T, D]
  Matrix d_qkv = Matrix::Zero(T, D + 2 * Dkv);
  for (Eigen::Index h = 0; h < H; ++h) {
    const size_t hs = static_cast<size_t>(h);
    const Eigen::Index g = h / group;
    const Matrix dz = d_concat.middleCols(h * dh, dh);  // d loss / d (gate * out)
    const double gate = gates != nullptr ? gates[h] : 1.0;
    // z = gate * out: the gate's gradient sums dz * out over the head's entries.
    gate_grads[h] += (dz.array() * s.head_out[hs].array()).sum();
    const Matrix d_out_h = gate * dz;  // [T, dh]
    // out = pattern v.
    const Matrix& pattern = s.pattern[hs];
    const Matrix d_pattern = d_out_h * s.v.middleCols(g * dh, dh).transpose();  // [T, T]
    d_qkv.middleCols(D + Dkv + g * dh, dh) += pattern.transpose() * d_out_h;
    // Softmax per row: d scores_j = P_j (dP_j - sum_k P_k dP_k). A masked entry has P = 0 exactly,
    // so its gradient is 0: the -inf it was set to does not depend on q or k.
    // An attention sink is one more entry of the row, with dP = 0: d sink_h = sum over rows of
    // p_sink (0 - sum_k P_k dP_k), and the keys' formula is unchanged.
    Matrix d_scores(T, T);
    for (Eigen::Index i = 0; i < T; ++i) {
      const double dot = pattern.row(i).dot(d_pattern.row(i));
      d_scores.row(i) = pattern.row(i).array() * (d_pattern.row(i).array() - dot);
      if (c.attn_sinks) p.sinks.grad[h] -= s.sink_weight[hs][static_cast<size_t>(i)] * dot;
    }
    // scores = (q / sqrt(dh)) k^T.
    d_qkv.middleCols(h * dh, dh) = d_scores * s.k.middleCols(g * dh, dh) / sqrt_dh;
    d_qkv.middleCols(D + g * dh, dh) +=
        d_scores.transpose() * (s.q.middleCols(h * dh, dh) / sqrt_dh);
  }
  // Rotary positions: the scores read R q and R k, so d q = R^T d (R q), the same for k.
  d_qkv.leftCols(D) = Rope(c, d_qkv.leftCols(D), true);
  d_qkv.middleCols(D, Dkv) = Rope(c, d_qkv.middleCols(D, Dkv), true);
  return LinearBackward(p.in_proj, s.input, d_qkv);
}

// ---- The model ---------------------------------------------------------------------------------

struct BlockSaved {
  LayerNormSaved ln1, ln2;
  AttentionSaved attn;
  Matrix mlp_in;   // [T, D]      what fc_in saw
  Matrix pre_act;  // [T, d_mlp]  fc_in's output
  Matrix act;      // [T, d_mlp]  GELU / ReLU of it
};

struct SequenceSaved {
  std::vector<BlockSaved> blocks;
  LayerNormSaved ln_final;
  Matrix unembed_in;  // [T, D]
};

// PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i + 1] = cos(p / 10000^(2i/D)), in double: the
// reference's sinusoidal() buffer, whose rows the module adds as they are (a float64 model).
Matrix Sinusoidal(int64_t T, int64_t D) {
  Matrix pe(T, D);
  for (int64_t pos = 0; pos < T; ++pos) {
    for (int64_t j = 0; j < D; ++j) {
      const double div = std::pow(10000.0, static_cast<double>(j - j % 2) / static_cast<double>(D));
      const double a = static_cast<double>(pos) / div;
      pe(pos, j) = j % 2 == 0 ? std::sin(a) : std::cos(a);
    }
  }
  return pe;
}

// One sequence (T tokens) through the module: returns its logits [T, V], keeps what the backward
// needs in `s`, and appends every hook.
Matrix SequenceForward(const TransformerConfig& c, const Params& p, const int32_t* tokens,
                       int64_t T, const double* head_gates, SequenceSaved* s, HookSink* hooks) {
  const int64_t D = c.d_model;
  const ConstMap tok_embed(p.tok_embed.value, c.vocab_size, D);
  Matrix x(T, D);
  for (int64_t t = 0; t < T; ++t) x.row(t) = tok_embed.row(tokens[t]);
  hooks->Add("hook_embed", x);
  if (HasPositionEmbedding(c)) {
    const Matrix pos = c.positions == PositionKind::kLearned
                           ? Matrix(ConstMap(p.pos_embed.value, c.max_len, D).topRows(T))
                           : Sinusoidal(T, D);
    hooks->Add("hook_pos_embed", pos);
    x += pos;
  }
  const bool pre = c.norm == NormPlacement::kPre, post = c.norm == NormPlacement::kPost;
  s->blocks.assign(static_cast<size_t>(c.n_layers), BlockSaved());
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const BlockParams& bp = p.blocks[static_cast<size_t>(l)];
    BlockSaved& bs = s->blocks[static_cast<size_t>(l)];
    const std::string b = Block(l);
    hooks->Add(b + "hook_resid_pre", x);
    const Matrix a_in = pre ? LayerNormForward(bp.ln1, c.ln_eps, x, &bs.ln1) : x;
    if (pre) hooks->Add(b + "ln1.hook_normalized", a_in);
    const double* gates = head_gates != nullptr ? head_gates + l * c.n_heads : nullptr;
    const Matrix a = AttentionForward(c, bp, a_in, gates, b + "attn.", &bs.attn, hooks);
    hooks->Add(b + "hook_attn_out", a);
    x += a;
    if (post) {
      x = LayerNormForward(bp.ln1, c.ln_eps, x, &bs.ln1);
      hooks->Add(b + "ln1.hook_normalized", x);
    }
    if (c.d_mlp > 0) {
      hooks->Add(b + "hook_resid_mid", x);
      bs.mlp_in = pre ? LayerNormForward(bp.ln2, c.ln_eps, x, &bs.ln2) : x;
      if (pre) hooks->Add(b + "ln2.hook_normalized", bs.mlp_in);
      bs.pre_act = LinearForward(bp.fc_in, bs.mlp_in);
      if (c.act == Activation::kGelu) {
        bs.act = bs.pre_act.unaryExpr([](double z) { return Gelu(z); });
      } else {
        bs.act = bs.pre_act.cwiseMax(0.0);
      }
      const Matrix m = LinearForward(bp.fc_out, bs.act);
      hooks->Add(b + "hook_mlp_out", m);
      x += m;
      if (post) {
        x = LayerNormForward(bp.ln2, c.ln_eps, x, &bs.ln2);
        hooks->Add(b + "ln2.hook_normalized", x);
      }
    }
    hooks->Add(b + "hook_resid_post", x);
  }
  if (pre) {
    x = LayerNormForward(p.ln_final, c.ln_eps, x, &s->ln_final);
    hooks->Add("ln_final.hook_normalized", x);
  }
  s->unembed_in = x;
  const Matrix logits = LinearForward(p.unembed, x);
  hooks->Add("logits", logits);
  return logits;
}

// The backward of SequenceForward from d_logits [T, V]: adds to every entry's grad and to
// gate_grads [n_layers * n_heads].
void SequenceBackward(const TransformerConfig& c, const Params& p, const int32_t* tokens, int64_t T,
                      const double* head_gates, const SequenceSaved& s, const Matrix& d_logits,
                      double* gate_grads) {
  const int64_t D = c.d_model;
  const bool pre = c.norm == NormPlacement::kPre, post = c.norm == NormPlacement::kPost;
  // dx: d loss / d (the residual stream) at the point the backward has reached.
  Matrix dx = LinearBackward(p.unembed, s.unembed_in, d_logits);
  if (pre) dx = LayerNormBackward(p.ln_final, s.ln_final, dx);
  for (int64_t l = c.n_layers - 1; l >= 0; --l) {
    const BlockParams& bp = p.blocks[static_cast<size_t>(l)];
    const BlockSaved& bs = s.blocks[static_cast<size_t>(l)];
    if (c.d_mlp > 0) {
      // x_out = [ln2](x_mid + mlp([ln2](x_mid))): the residual passes dx to x_mid unchanged, and
      // the MLP branch adds its own.
      if (post) dx = LayerNormBackward(bp.ln2, bs.ln2, dx);
      const Matrix d_act = LinearBackward(bp.fc_out, bs.act, dx);
      Matrix d_pre_act(d_act.rows(), d_act.cols());
      for (Eigen::Index i = 0; i < d_act.size(); ++i) {
        const double z = bs.pre_act.data()[i];
        // ReLU's derivative at exactly 0 is 0, as torch's threshold_backward takes it.
        const double slope = c.act == Activation::kGelu ? GeluGrad(z) : (z > 0.0 ? 1.0 : 0.0);
        d_pre_act.data()[i] = d_act.data()[i] * slope;
      }
      const Matrix d_mlp_in = LinearBackward(bp.fc_in, bs.mlp_in, d_pre_act);
      dx += pre ? LayerNormBackward(bp.ln2, bs.ln2, d_mlp_in) : d_mlp_in;
    }
    // x_mid = [ln1](x_pre + attn([ln1](x_pre))), the same way.
    if (post) dx = LayerNormBackward(bp.ln1, bs.ln1, dx);
    const double* gates = head_gates != nullptr ? head_gates + l * c.n_heads : nullptr;
    const Matrix d_a_in = AttentionBackward(c, bp, bs.attn, dx, gates, gate_grads + l * c.n_heads);
    dx += pre ? LayerNormBackward(bp.ln1, bs.ln1, d_a_in) : d_a_in;
  }
  // x_0 = tok_embed[tokens] + pos: a token repeated in the sequence collects every one of its
  // rows' gradients; position t's row gets row t's (rows t >= T were not used: 0).
  MutableMap tok_grad(p.tok_embed.grad, c.vocab_size, D);
  for (int64_t t = 0; t < T; ++t) tok_grad.row(tokens[t]) += dx.row(t);
  if (c.positions == PositionKind::kLearned) {
    MutableMap(p.pos_embed.grad, c.max_len, D).topRows(T) += dx;
  }
}

// Cross-entropy of one row of logits against target t, and its gradient softmax(row) - onehot(t)
// (both before the mean's 1 / count).
double CrossEntropy(const Eigen::Ref<const RowVector>& logits, int32_t t, Eigen::Ref<RowVector> d) {
  const double max = logits.maxCoeff();
  d = (logits.array() - max).exp().matrix();
  const double sum = d.sum();
  d /= sum;
  d(t) -= 1.0;
  // log(sum) - (x[t] - max): max + log(sum) - x[t] loses log(sum) to rounding once |max| is
  // large (ten equal logits of 7.6e22 gave 0, not ln 10), as kernels/rowwise.cc says.
  return std::log(sum) - (logits(t) - max);
}

// ---- Validation ---------------------------------------------------------------------------------

// Tokens [B, T] as Transformer::Forward checks them, and a result this build can hold.
Status CheckTokens(const TransformerConfig& c, const int32_t* tokens, int64_t B, int64_t T) {
  if (B < 1 || T < 1 || T > c.max_len) {
    return ArgError(
        StatusCode::kShapeMismatch, Arg::kTokens,
        "expected (B, T) with B >= 1 and 1 <= T <= " + std::string(ArgName(Arg::kMaxLen)) + " = " +
            Str(c.max_len) + ", got (" + Str(B) + ", " + Str(T) + ")");
  }
  if (B > kMaxDim || tokens == nullptr) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kTokens,
                    "no data for (" + Str(B) + ", " + Str(T) + ") tokens");
  }
  // The result's logits and hooks (a sequence's activations are a fraction of them), counted in
  // double so that no product of the sizes can overflow: a reference for test-sized models.
  const double Bd = static_cast<double>(B), Td = static_cast<double>(T);
  const double doubles =
      Bd * Td *
      (static_cast<double>(c.vocab_size) +
       static_cast<double>(c.n_layers) * (10.0 * static_cast<double>(c.d_model + c.d_mlp) +
                                          2.0 * static_cast<double>(c.n_heads) * Td));
  if (doubles > static_cast<double>(std::numeric_limits<size_t>::max() / sizeof(double) / 4)) {
    char amount[32];
    std::snprintf(amount, sizeof(amount), "%.3g", doubles);
    return ArgError(StatusCode::kResourceExhausted, Arg::kTokens,
                    "the reference's logits and hooks for (" + Str(B) + ", " + Str(T) +
                        ") tokens would take about " + amount +
                        " doubles, more than this build holds");
  }
  for (int64_t i = 0; i < B * T; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      return ArgError(StatusCode::kInvalidArgument, Arg::kTokens,
                      "token [" + Str(i / T) + ", " + Str(i % T) + "] is " + Str(tokens[i]) +
                          ", expected an integer in [0, " + Str(c.vocab_size - 1) + "] (" +
                          ArgName(Arg::kVocabSize) + " " + Str(c.vocab_size) + ")");
    }
  }
  return Status::Ok();
}

// Every key of `specs` exactly once, with its number of values; no other key. Fills `values`
// (in the order of specs).
Status CheckStateDict(const std::vector<TransformerParamSpec>& specs,
                      const std::vector<std::pair<std::string, std::vector<double>>>& state_dict,
                      std::vector<const double*>* values) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < specs.size(); ++i) index[specs[i].name] = i;
  values->assign(specs.size(), nullptr);
  for (const auto& [name, data] : state_dict) {
    const std::string arg = std::string(ArgName(Arg::kStateDict)) + "['" + QuoteInput(name) + "']";
    const auto it = index.find(name);
    if (it == index.end()) {
      std::string keys;
      for (const TransformerParamSpec& s : specs) keys += (keys.empty() ? "" : ", ") + s.name;
      return Status(StatusCode::kUnknownParameter, Arg::kStateDict,
                    arg + ": unknown key for this config (expected keys: " + keys + ")");
    }
    const TransformerParamSpec& spec = specs[it->second];
    if ((*values)[it->second] != nullptr) {
      return Status(StatusCode::kInvalidArgument, Arg::kStateDict, arg + ": given twice");
    }
    const size_t n = static_cast<size_t>(spec.shape.NumElements());
    if (data.size() != n) {
      return Status(StatusCode::kShapeMismatch, Arg::kStateDict,
                    arg + ": shape " + spec.shape.ToString() + " needs " + std::to_string(n) +
                        " values, got " + std::to_string(data.size()));
    }
    // (A zero-element entry cannot occur: every size of a valid config is >= 1.)
    (*values)[it->second] = data.data();
  }
  std::string missing;
  for (size_t i = 0; i < specs.size(); ++i) {
    if ((*values)[i] == nullptr) {
      missing += (missing.empty() ? "" : ", ") + specs[i].name + " " + specs[i].shape.ToString();
    }
  }
  if (!missing.empty()) {
    return Status(StatusCode::kMissingParameter, Arg::kStateDict,
                  std::string(ArgName(Arg::kStateDict)) + ": missing " + missing);
  }
  return Status::Ok();
}

// Targets [B*T]: each -100 or in [0, V); returns how many are counted (at least one).
Status CheckTargets(const TransformerConfig& c, const int32_t* targets, int64_t B, int64_t T,
                    int64_t* counted) {
  *counted = 0;
  for (int64_t i = 0; i < B * T; ++i) {
    if (targets[i] == kIgnoreIndex) continue;
    if (targets[i] < 0 || targets[i] >= c.vocab_size) {
      return ArgError(StatusCode::kInvalidArgument, Arg::kTargets,
                      "target [" + Str(i / T) + ", " + Str(i % T) + "] is " + Str(targets[i]) +
                          ", expected -100 (ignored) or an integer in [0, " +
                          Str(c.vocab_size - 1) + "]");
    }
    ++*counted;
  }
  if (*counted == 0) {
    return ArgError(StatusCode::kInvalidArgument, Arg::kTargets,
                    "every target is -100 (ignored): there is no loss to compute");
  }
  return Status::Ok();
}

// Each entry's place in `params`, by the state_dict key it has in TransformerParams.
Entry* Slot(const TransformerConfig& c, Params* p, const std::string& name) {
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = Block(l);
    if (name.rfind(b, 0) != 0) continue;
    BlockParams& bp = p->blocks[static_cast<size_t>(l)];
    const std::string key = name.substr(b.size());
    if (key == "ln1.weight") return &bp.ln1.weight;
    if (key == "ln1.bias") return &bp.ln1.bias;
    if (key == "ln2.weight") return &bp.ln2.weight;
    if (key == "ln2.bias") return &bp.ln2.bias;
    if (key == "attn.in_proj_weight") return &bp.in_proj.weight;
    if (key == "attn.in_proj_bias") return &bp.in_proj.bias;
    if (key == "attn.out_proj.weight") return &bp.out_proj.weight;
    if (key == "attn.out_proj.bias") return &bp.out_proj.bias;
    if (key == "attn.sinks") return &bp.sinks;
    if (key == "mlp.fc_in.weight") return &bp.fc_in.weight;
    if (key == "mlp.fc_in.bias") return &bp.fc_in.bias;
    if (key == "mlp.fc_out.weight") return &bp.fc_out.weight;
    if (key == "mlp.fc_out.bias") return &bp.fc_out.bias;
  }
  if (name == "tok_embed.weight") return &p->tok_embed;
  if (name == "pos_embed.weight") return &p->pos_embed;
  if (name == "ln_final.weight") return &p->ln_final.weight;
  if (name == "ln_final.bias") return &p->ln_final.bias;
  if (name == "unembed.weight") return &p->unembed.weight;
  if (name == "unembed.bias") return &p->unembed.bias;
  return nullptr;  // (never: TransformerParams has no other key)
}

Status Run(const TransformerConfig& c,
           const std::vector<std::pair<std::string, std::vector<double>>>& state_dict,
           const int32_t* tokens, int64_t B, int64_t T, const int32_t* targets,
           const double* head_gates, ReferenceTransformerResult* result) {
  HEADSCOPE_RETURN_IF_ERROR(ValidateTransformerConfig(c));
  HEADSCOPE_RETURN_IF_ERROR(CheckTokens(c, tokens, B, T));
  const std::vector<TransformerParamSpec> specs = TransformerParams(c);
  std::vector<const double*> values;
  HEADSCOPE_RETURN_IF_ERROR(CheckStateDict(specs, state_dict, &values));
  int64_t counted = 0;
  if (targets != nullptr) HEADSCOPE_RETURN_IF_ERROR(CheckTargets(c, targets, B, T, &counted));
  const int64_t D = c.d_model, V = c.vocab_size, L = c.n_layers, H = c.n_heads;
  *result = ReferenceTransformerResult();
  result->logits.resize(static_cast<size_t>(B * T * V));
  for (const std::string& name : TransformerHookNames(c)) result->hooks.push_back({name, {}});
  if (targets != nullptr) {
    for (const TransformerParamSpec& spec : specs) {
      result->grads.push_back(
          {spec.name, std::vector<double>(static_cast<size_t>(spec.shape.NumElements()), 0.0)});
    }
    result->head_gate_grads.assign(static_cast<size_t>(L * H), 0.0);
  }

  Params p;
  p.blocks.resize(static_cast<size_t>(L));
  for (BlockParams& bp : p.blocks) {
    bp.in_proj.out = D + 2 * KvDim(c);  // [Wq; Wk; Wv]
    bp.in_proj.in = D;
    bp.out_proj.out = bp.out_proj.in = D;
    bp.fc_in.out = bp.fc_out.in = c.d_mlp;
    bp.fc_in.in = bp.fc_out.out = D;
  }
  p.unembed.out = V;
  p.unembed.in = D;
  std::vector<std::pair<size_t, size_t>> tied;  // (key, the earlier key whose tensor it names)
  for (size_t i = 0; i < specs.size(); ++i) {
    Entry* e = Slot(c, &p, specs[i].name);
    if (e == nullptr) {
      return Status(StatusCode::kUnknownParameter, Arg::kStateDict,
                    "reference: no place for '" + specs[i].name + "'");
    }
    e->value = values[i];
    if (targets != nullptr) e->grad = result->grads[i].second.data();
    if (specs[i].tied_to.empty()) continue;
    // tie_embeddings: one tensor under two keys. Their values must be the same; both uses read
    // the earlier key's and add to its gradient, which the later key's then copies.
    size_t j = 0;
    while (specs[j].name != specs[i].tied_to) ++j;
    const size_t n = static_cast<size_t>(specs[i].shape.NumElements());
    if (!std::equal(values[i], values[i] + n, values[j])) {
      return Status(StatusCode::kInvalidArgument, Arg::kStateDict,
                    std::string(ArgName(Arg::kStateDict)) + "['" + specs[i].name +
                        "']: differs from " + ArgName(Arg::kStateDict) + "['" + specs[j].name +
                        "'], the tensor it names (" + ArgName(Arg::kTieEmbeddings) + ")");
    }
    *e = *Slot(c, &p, specs[j].name);
    tied.emplace_back(i, j);
  }

  HookSink hooks(&result->hooks);
  SequenceSaved saved;
  double total = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* seq = tokens + b * T;
    const Matrix logits = SequenceForward(c, p, seq, T, head_gates, &saved, &hooks);
    std::copy(logits.data(), logits.data() + logits.size(), result->logits.data() + b * T * V);
    if (targets == nullptr) continue;
    // loss = (1 / counted) sum over counted positions of CE: an ignored row has no gradient.
    Matrix d_logits = Matrix::Zero(T, V);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t target = targets[b * T + t];
      if (target == kIgnoreIndex) continue;
      total += CrossEntropy(logits.row(t), target, d_logits.row(t));
    }
    d_logits /= static_cast<double>(counted);
    SequenceBackward(c, p, seq, T, head_gates, saved, d_logits, result->head_gate_grads.data());
  }
  if (targets != nullptr) {
    result->loss = total / static_cast<double>(counted);
    for (const auto& [i, j] : tied) result->grads[i].second = result->grads[j].second;
  }
  return Status::Ok();
}

}  // namespace

Status ReferenceTransformer(
    const TransformerConfig& config,
    const std::vector<std::pair<std::string, std::vector<double>>>& state_dict,
    const int32_t* tokens, int64_t batch, int64_t length, const int32_t* targets,
    const double* head_gates, ReferenceTransformerResult* result) {
  // std::vector and Eigen report allocation failure by throwing; no exception leaves headscope.
  // (In WebAssembly, built without exception catching, such a failure aborts instead.)
  try {
    return Run(config, state_dict, tokens, batch, length, targets, head_gates, result);
  } catch (const std::bad_alloc&) {
    *result = ReferenceTransformerResult();
    return Status(StatusCode::kResourceExhausted, Arg::kTokens,
                  std::string(ArgPath(Arg::kTokens)) + ": reference: out of memory for (" +
                      Str(batch) + ", " + Str(length) + ") tokens");
  }
}

}  // namespace headscope
