#include "headscope/experiments.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "headscope/kernels/attention.h"

namespace headscope {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }
std::string Hook(int64_t l, const char* suffix) { return "blocks." + Str(l) + "." + suffix; }

Status OutOfMemory(const char* what) {
  return Status(StatusCode::kResourceExhausted, std::string(what) + ": out of memory");
}

// Sizes `out` for `shape`; false when it cannot be allocated.
bool Allocate(AlignedBuffer* out, const Shape& shape) {
  return out->Resize(static_cast<size_t>(shape.NumElements()));
}

// A forward of `tokens` keeping `hooks`, with the gates.
Status Run(Transformer* model, const TokenView& tokens, const TensorView& gates,
           std::vector<std::string> hooks, TransformerResult* result) {
  TransformerOptions o;
  o.hooks = std::move(hooks);
  o.head_gates = gates;
  return model->Forward(tokens, o, result);
}

// An integer option in [0, n): kInvalidArgument naming it otherwise.
Status CheckIndex(Arg arg, int64_t value, int64_t n, const char* what) {
  if (value >= 0 && value < n) return Status::Ok();
  return ArgError(StatusCode::kInvalidArgument, arg,
                  std::string("expected ") + what + " in [0, " + Str(n) + "), got " + Str(value));
}

}  // namespace

Status LogitLens(Transformer* model, const TokenView& tokens, const TensorView& head_gates,
                 LogitLensResult* result) {
  const TransformerConfig& c = model->config();
  const int64_t L = c.n_layers;
  std::vector<std::string> hooks{Hook(0, "hook_resid_pre")};
  for (int64_t l = 0; l < L; ++l) hooks.push_back(Hook(l, "hook_resid_post"));
  TransformerResult run;
  HEADSCOPE_RETURN_IF_ERROR(Run(model, tokens, head_gates, hooks, &run));
  const int64_t M = tokens.batch * tokens.length, V = c.vocab_size;
  result->shape = Shape{L + 1, tokens.batch, tokens.length, V};
  if (!Allocate(&result->logits, result->shape)) return OutOfMemory("logit lens");
  for (int64_t s = 0; s <= L; ++s) {
    HEADSCOPE_RETURN_IF_ERROR(model->ReadOut(run.hooks[static_cast<size_t>(s)].second.data.data(),
                                             M, result->logits.data() + s * M * V));
  }
  return Status::Ok();
}

Status AttentionRollout(Transformer* model, const TokenView& tokens, const TensorView& head_gates,
                        RolloutResult* result) {
  const TransformerConfig& c = model->config();
  const int64_t L = c.n_layers, H = c.n_heads, B = tokens.batch, T = tokens.length;
  std::vector<std::string> hooks;
  for (int64_t l = 0; l < L; ++l) hooks.push_back(Hook(l, "attn.hook_pattern"));
  TransformerResult run;
  HEADSCOPE_RETURN_IF_ERROR(Run(model, tokens, head_gates, hooks, &run));
  result->shape = Shape{L, B, T, T};
  if (!Allocate(&result->rollout, result->shape)) return OutOfMemory("attention rollout");
  const size_t TT = static_cast<size_t>(T * T);
  std::vector<double> rollout(TT), a(TT), next(TT);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t j = 0; j < T; ++j) rollout[static_cast<size_t>(i * T + j)] = i == j ? 1.0 : 0.0;
    }
    for (int64_t l = 0; l < L; ++l) {
      const float* pattern = run.hooks[static_cast<size_t>(l)].second.data.data() +
                             static_cast<size_t>(b * H) * TT;  // [B, H, T, T]
      for (int64_t i = 0; i < T; ++i) {
        double row = 0;
        for (int64_t j = 0; j < T; ++j) {
          double mean = 0;
          for (int64_t h = 0; h < H; ++h) mean += pattern[h * T * T + i * T + j];
          const double v = 0.5 * mean / static_cast<double>(H) + (i == j ? 0.5 : 0.0);
          a[static_cast<size_t>(i * T + j)] = v;
          row += v;
        }
        for (int64_t j = 0; j < T; ++j) a[static_cast<size_t>(i * T + j)] /= row;
      }
      for (int64_t i = 0; i < T; ++i) {
        for (int64_t j = 0; j < T; ++j) {
          double sum = 0;
          for (int64_t k = 0; k < T; ++k) {
            sum += a[static_cast<size_t>(i * T + k)] * rollout[static_cast<size_t>(k * T + j)];
          }
          next[static_cast<size_t>(i * T + j)] = sum;
        }
      }
      rollout.swap(next);
      float* out = result->rollout.data() + static_cast<size_t>(l * B + b) * TT;
      for (size_t k = 0; k < TT; ++k) out[k] = static_cast<float>(rollout[k]);
    }
  }
  return Status::Ok();
}

Status ScoreContributions(Transformer* model, const TokenView& tokens,
                          const TensorView& head_gates, const ScoreQuery& q,
                          ScoreContributionsResult* result) {
  const TransformerConfig& c = model->config();
  const int64_t H = c.n_heads, T = tokens.length, dh = c.d_model / c.n_heads;
  const int64_t G = c.n_kv_heads > 0 ? c.n_kv_heads : H;
  HEADSCOPE_RETURN_IF_ERROR(CheckIndex(Arg::kLayer, q.layer, c.n_layers, "a layer"));
  HEADSCOPE_RETURN_IF_ERROR(CheckIndex(Arg::kHead, q.head, H, "a head"));
  const bool rope = c.positions == PositionKind::kRope;
  TransformerResult run;
  HEADSCOPE_RETURN_IF_ERROR(Run(model, tokens, head_gates,
                                {Hook(q.layer, rope ? "attn.hook_rot_q" : "attn.hook_q"),
                                 Hook(q.layer, rope ? "attn.hook_rot_k" : "attn.hook_k"),
                                 Hook(q.layer, "attn.hook_attn_scores")},
                                &run));
  // (The tokens are checked by the run.)
  HEADSCOPE_RETURN_IF_ERROR(CheckIndex(Arg::kBatch, q.batch, tokens.batch, "a batch row"));
  HEADSCOPE_RETURN_IF_ERROR(CheckIndex(Arg::kPosition, q.position, T, "a query position"));
  const int64_t S = T, g = q.head / (H / G), i = q.position;
  // q [B, H, T, dh], k [B, G, T, dh], scores [B, H, T, S].
  const float* qrow = run.hooks[0].second.data.data() + ((q.batch * H + q.head) * T + i) * dh;
  const float* keys = run.hooks[1].second.data.data() + (q.batch * G + g) * T * dh;
  const float* scores = run.hooks[2].second.data.data() + ((q.batch * H + q.head) * T + i) * S;
  result->terms_shape = Shape{S, dh};
  result->row_shape = Shape{S};
  if (!Allocate(&result->terms, result->terms_shape) || !Allocate(&result->dot, result->row_shape) ||
      !Allocate(&result->bias, result->row_shape) || !Allocate(&result->score, result->row_shape)) {
    return OutOfMemory("score contributions");
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  const float slope = c.positions == PositionKind::kAlibi
                          ? AlibiSlope(static_cast<size_t>(q.head), static_cast<size_t>(H))
                          : 0.0f;
  const int64_t w = c.attn_window;
  for (int64_t j = 0; j < S; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < dh; ++d) {
      const double term = static_cast<double>(qrow[d]) * keys[j * dh + d] * scale;
      result->terms[static_cast<size_t>(j * dh + d)] = static_cast<float>(term);
      dot += term;
    }
    const int64_t dist = i >= j ? i - j : j - i;
    const bool masked = (c.causal && j > i) || (w > 0 && dist >= w);
    result->dot[static_cast<size_t>(j)] = static_cast<float>(dot);
    // The kernels' float: the slope times the exact distance, negated (kernels/attention.h).
    result->bias[static_cast<size_t>(j)] =
        masked ? -std::numeric_limits<float>::infinity()
               : (slope != 0.0f ? -(slope * static_cast<float>(dist)) : 0.0f);
    result->score[static_cast<size_t>(j)] = scores[j];
  }
  return Status::Ok();
}

namespace {

// The patching metrics of logits [B, T, V] against the targets.
Status Metrics(const TransformerResult& run, const TokenView& tokens, int64_t V,
               const int32_t* targets, double* loss, double* logit) {
  const int64_t M = tokens.batch * tokens.length;
  HEADSCOPE_RETURN_IF_ERROR(Transformer::Loss(run.logits.data(), M, V, targets, loss));
  double sum = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < M; ++r) {
    if (targets[r] == -100) continue;
    sum += run.logits[static_cast<size_t>(r * V + targets[r])];
    ++counted;
  }
  *logit = sum / static_cast<double>(counted);  // (Loss refused targets with none counted)
  return Status::Ok();
}

}  // namespace

Status ActivationPatching(Transformer* model, const TokenView& clean,
                          const PatchingOptions& options, PatchingResult* result) {
  const TransformerConfig& c = model->config();
  const int64_t L = c.n_layers, H = c.n_heads, V = c.vocab_size;
  const TokenView& bad = options.corrupted;
  if (bad.data == nullptr || bad.batch != clean.batch || bad.length != clean.length) {
    return ArgError(StatusCode::kShapeMismatch, Arg::kCorrupted,
                    "expected the clean tokens' shape [" + Str(clean.batch) + ", " +
                        Str(clean.length) + "], got [" + Str(bad.batch) + ", " + Str(bad.length) +
                        "]");
  }
  if (options.targets == nullptr) {
    return ArgError(StatusCode::kInvalidArgument, Arg::kTargets,
                    "expected the clean tokens' shape of target ids (-100: not counted)");
  }
  const bool heads = options.site == PatchingSite::kHeads;
  const char* suffix = heads ? "attn.hook_z" : "hook_resid_pre";
  std::vector<std::string> hooks;
  for (int64_t l = 0; l < L; ++l) hooks.push_back(Hook(l, suffix));
  TransformerResult clean_run, run;
  HEADSCOPE_RETURN_IF_ERROR(Run(model, clean, options.head_gates, hooks, &clean_run));
  HEADSCOPE_RETURN_IF_ERROR(
      Metrics(clean_run, clean, V, options.targets, &result->clean_loss, &result->clean_logit));
  HEADSCOPE_RETURN_IF_ERROR(Run(model, bad, options.head_gates, {}, &run));
  HEADSCOPE_RETURN_IF_ERROR(
      Metrics(run, bad, V, options.targets, &result->corrupted_loss, &result->corrupted_logit));
  const int64_t cells = heads ? H : clean.length;
  result->shape = Shape{L, cells};
  if (!Allocate(&result->loss, result->shape) || !Allocate(&result->logit, result->shape)) {
    return OutOfMemory("activation patching");
  }
  TransformerOptions o;
  o.head_gates = options.head_gates;
  o.patches.resize(1);
  for (int64_t l = 0; l < L; ++l) {
    const TraceTensor& from = clean_run.hooks[static_cast<size_t>(l)].second;
    ActivationPatch& p = o.patches[0];
    p.hook = hooks[static_cast<size_t>(l)];
    p.values = TensorView{from.data.data(), from.shape, from.data.size()};
    for (int64_t k = 0; k < cells; ++k) {
      p.head = heads ? k : -1;
      p.position = heads ? -1 : k;
      HEADSCOPE_RETURN_IF_ERROR(model->Forward(bad, o, &run));
      double loss = 0, logit = 0;
      HEADSCOPE_RETURN_IF_ERROR(Metrics(run, bad, V, options.targets, &loss, &logit));
      result->loss[static_cast<size_t>(l * cells + k)] = static_cast<float>(loss);
      result->logit[static_cast<size_t>(l * cells + k)] = static_cast<float>(logit);
    }
  }
  return Status::Ok();
}

}  // namespace headscope
