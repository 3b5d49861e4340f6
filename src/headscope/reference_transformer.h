// The float64 reference of the whole Transformer, forward and backward: the reference module's
// arithmetic (tools/tiny_transformer.py) written with Eigen as directly as the math reads,
// stage by stage, and every stage's gradient derived by hand (no autodiff). It is the oracle the
// fast float32 paths are tested against inside C++ (tests/cpp/reference_transformer_test.cc
// checks it against finite differences and against Transformer::Forward). Not optimized on
// purpose: it keeps every activation of the pass and allocates freely.
#ifndef HEADSCOPE_REFERENCE_TRANSFORMER_H_
#define HEADSCOPE_REFERENCE_TRANSFORMER_H_

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "headscope/status.h"
#include "headscope/transformer.h"

namespace headscope {

struct ReferenceTransformerResult {
  std::vector<double> logits;  // [B, T, V]
  // Mean cross-entropy over the targets that are not -100, when targets are given (else NaN).
  double loss = std::numeric_limits<double>::quiet_NaN();
  // d loss / d entry for every entry of TransformerParams(config), in that order and with those
  // names, row-major; when targets are given (else empty). Both keys of a tied tensor
  // (tie_embeddings) hold its one gradient, the sum over both uses.
  std::vector<std::pair<std::string, std::vector<double>>> grads;
  // [n_layers * n_heads]: d loss / d head_gates[l * n_heads + h] at the given gates (all 1 when
  // none are given); when targets are given (else empty).
  std::vector<double> head_gate_grads;
  // Every hook of TransformerHookNames(config), in that order, with the batch axis, flattened
  // row-major ([B, T, D], [B, H, T, dh], [B, H, T, T], [B, T, V]).
  std::vector<std::pair<std::string, std::vector<double>>> hooks;
};

// One pass of the reference module in float64.
//   state_dict: every TransformerParams(config) entry by name (any order), row-major values;
//               unknown or repeated keys are refused, and so are the two keys of a tied tensor
//               (tie_embeddings) holding different values.
//   tokens:     [batch, length] row-major, each in [0, vocab_size), 1 <= length <= max_len.
//   targets:    [batch, length] or null (forward only): each in [0, vocab_size) or -100
//               (ignored), at least one not ignored.
//   head_gates: [n_layers * n_heads] or null (all 1): head h of layer l's z times its gate.
// Failures are Statuses naming the argument (config.*, state_dict['...'], tokens, targets), as
// Transformer's are.
Status ReferenceTransformer(
    const TransformerConfig& config,
    const std::vector<std::pair<std::string, std::vector<double>>>& state_dict,
    const int32_t* tokens, int64_t batch, int64_t length, const int32_t* targets,
    const double* head_gates, ReferenceTransformerResult* result);

}  // namespace headscope

#endif  // HEADSCOPE_REFERENCE_TRANSFORMER_H_
