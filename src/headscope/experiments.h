// Causal and attribution experiments on a Transformer, computed by the engine: what
// interpretability work runs on a model's hooks (TransformerLens, Abnar & Zuidema), as one call
// each, on the model's own kernels. The JS API (web/lib/index.js: Transformer.logitLens,
// attentionRollout, scoreContributions, activationPatching) and the Train view's "Inside the
// model" panel call these; tests/cpp/experiments_test.cc checks each against a float64
// computation from ReferenceTransformer.
//
//   LogitLens           the residual stream before the first block and after every block,
//                       read out as the model reads its last (nostalgebraist's logit lens).
//   AttentionRollout    Abnar & Zuidema (2020): per layer the heads' mean pattern with the
//                       residual connection as 0.5 A + 0.5 I, rows renormalised, multiplied
//                       through the layers.
//   ScoreContributions  one head's score of query i for every key j, q . k / sqrt(d_head),
//                       split into its d_head terms q_d k_d / sqrt(d_head), plus the position
//                       bias and mask the kernels add: "why is this weight high".
//   ActivationPatching  Meng et al. / Wang et al.'s causal tracing: the clean prompt's
//                       activation of one head (attn.hook_z) or one residual position
//                       (hook_resid_pre) patched into a run on the corrupted prompt, one at a
//                       time, and the loss and the correct tokens' logit measured.
#ifndef HEADSCOPE_EXPERIMENTS_H_
#define HEADSCOPE_EXPERIMENTS_H_

#include <cstdint>

#include "headscope/status.h"
#include "headscope/tensor.h"
#include "headscope/transformer.h"

namespace headscope {

// logits [L + 1, B, T, V]: stage 0 the embeddings (blocks.0.hook_resid_pre), stage l + 1 the
// stream after block l (blocks.{l}.hook_resid_post), each through Transformer::ReadOut
// (ln_final under pre-norm, then the unembedding). The last stage is Forward's logits bit for
// bit. Under post-norm every stage is read without a final LayerNorm, as the model reads its
// last (the stream is already normalised there).
struct LogitLensResult {
  AlignedBuffer logits;
  Shape shape;
};
Status LogitLens(Transformer* model, const TokenView& tokens, const TensorView& head_gates,
                 LogitLensResult* result);

// rollout [L, B, T, T]: entry (l, b) is the rollout through blocks 0..l, R_l = A'_l R_{l-1}
// (R_{-1} = I), A'_l = rownorm(0.5 mean_h(pattern_l) + 0.5 I), in double, rounded once. A row
// of R says how much each input position flows into that position's stream after block l. The
// head gates scale the heads' outputs, not their patterns: the rollout reads the patterns (a
// gated-off head still counts), as the method defines it. With attention sinks a pattern row
// sums to less than 1; the renormalisation divides by the row's sum.
struct RolloutResult {
  AlignedBuffer rollout;
  Shape shape;
};
Status AttentionRollout(Transformer* model, const TokenView& tokens, const TensorView& head_gates,
                        RolloutResult* result);

// Which score: layer, query head, batch row and query position.
struct ScoreQuery {
  int64_t layer = 0;
  int64_t head = 0;
  int64_t batch = 0;
  int64_t position = 0;
};
// For every key j of the query (S = T keys):
//   terms [S, d_head]  q_d k_d / sqrt(d_head) in double (rounded once), with q and k as the
//                      scores use them (rotated under RoPE; grouped-query heads read their
//                      group's key head);
//   dot   [S]          the sum of the row's terms in double (rounded once);
//   bias  [S]          what the kernels add to the product: ALiBi's -(slope_h |i - j|), -inf
//                      where the key is masked (causal, window), else 0;
//   score [S]          the model's own score (attn.hook_attn_scores): dot + bias up to float
//                      rounding (tests hold them within 1e-5 relative).
// Attention sinks are not a score: they join the softmax (kernels/attention.h).
struct ScoreContributionsResult {
  AlignedBuffer terms, dot, bias, score;
  Shape terms_shape;  // [S, d_head]
  Shape row_shape;    // [S]
};
Status ScoreContributions(Transformer* model, const TokenView& tokens,
                          const TensorView& head_gates, const ScoreQuery& query,
                          ScoreContributionsResult* result);

// Activation patching.
enum class PatchingSite {
  kHeads,      // cell (l, h): blocks.{l}.attn.hook_z of head h, every position; grid [L, H]
  kPositions,  // cell (l, t): blocks.{l}.hook_resid_pre at position t; grid [L, T]
};
struct PatchingOptions {
  TokenView corrupted;              // the clean tokens' shape
  const int32_t* targets = nullptr;  // [B, T], as Transformer::Loss takes them (-100: not counted)
  PatchingSite site = PatchingSite::kHeads;
  TensorView head_gates;  // as Forward's, in every run
};
// The metrics of a run against the targets: loss, their mean cross-entropy (Transformer::Loss);
// logit, the mean over the counted positions of the logit of the target token (the "correct
// token's logit"), in double.
struct PatchingResult {
  AlignedBuffer loss, logit;  // the grid: [L, H] or [L, T], each cell one patched run
  Shape shape;
  double clean_loss = 0, clean_logit = 0, corrupted_loss = 0, corrupted_logit = 0;
};
// Runs the clean tokens (keeping the site's hooks), the corrupted tokens, then one corrupted run
// per cell with that cell's clean activation patched in (TransformerOptions::patches): L * H or
// L * T + 2 forward passes.
Status ActivationPatching(Transformer* model, const TokenView& clean,
                          const PatchingOptions& options, PatchingResult* result);

}  // namespace headscope

#endif  // HEADSCOPE_EXPERIMENTS_H_
