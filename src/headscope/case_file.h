// The JSON case format of docs/case-format.md (a PyTorch state_dict plus the forward arguments
// and, optionally, what the call must return), of both kinds ("mha": one MultiheadAttention call;
// "transformer": one Transformer forward): parsing with errors that name the JSON path, running a
// case, comparing with `expected`, and writing results back as JSON.
#ifndef HEADSCOPE_CASE_FILE_H_
#define HEADSCOPE_CASE_FILE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headscope/config.h"
#include "headscope/mha.h"
#include "headscope/status.h"
#include "headscope/tensor.h"
#include "headscope/transformer.h"

namespace headscope {

struct CaseTensor {
  bool present = false;
  Shape shape;
  std::vector<float> data;
  TensorView view() const { return {data.data(), shape, data.size()}; }
};

struct CaseMask {
  MaskType type = MaskType::kNone;
  Shape shape;
  std::vector<float> floats;
  std::vector<uint8_t> bools;
  MaskView view() const;
};

struct AttentionCase {
  std::string name;
  MhaConfig config;
  std::vector<std::pair<std::string, CaseTensor>> state_dict;
  CaseTensor query, key, value;  // key/value null or absent in the file: the query (self-attention)
  CaseMask key_padding_mask, attn_mask;
  bool need_weights = true;
  bool average_attn_weights = true;
  bool is_causal = false;
  bool alibi = false;   // headscope's forward options (not torch's): ForwardOptions::alibi, window
  int64_t window = 0;
  bool has_expected = false;
  CaseTensor expected_output;
  CaseTensor expected_weights;  // present = false when expected.weights is null

  ForwardOptions options() const;  // mask views point into this case
};

// "kind": "transformer" (docs/case-format.md): one forward pass of the small transformer, its
// weights, and optionally its expected logits, loss and hooks.
struct TransformerCase {
  std::string name;
  TransformerConfig config;
  std::vector<std::pair<std::string, CaseTensor>> state_dict;
  std::vector<int32_t> tokens;  // (batch, length) row-major; batch 1 for unbatched tokens
  int64_t batch = 0;
  int64_t length = 0;
  bool batched = true;          // inputs.tokens was (B, T), not (T)
  std::vector<int32_t> targets;  // the shape of tokens, or empty without inputs.targets
  CaseTensor head_gates;         // [n_layers, n_heads]; present = false: every gate 1
  bool has_expected = false;
  CaseTensor expected_logits;    // [B, T, V], or [T, V] unbatched
  bool has_expected_loss = false;  // exactly when there are targets and an expected section
  double expected_loss = 0;
  // expected.hooks in the model's hook order (TransformerHookNames); every name is a hook of
  // the config (checked when parsing).
  std::vector<std::pair<std::string, CaseTensor>> expected_hooks;

  bool has_targets() const { return !targets.empty(); }
  TokenView token_view() const { return {tokens.data(), batch, length}; }
  // The expected hooks and the head gates (views into this case).
  TransformerOptions options() const;
};

enum class CaseKind { kMha, kTransformer };

// A case document of either kind: `kind` says which of the two members was filled.
struct CaseDocument {
  CaseKind kind = CaseKind::kMha;
  AttentionCase mha;
  TransformerCase transformer;
};

// Limits on hostile or mistaken input, the same in web/lib/case.js (MAX_CASE_BYTES,
// MAX_JSON_DEPTH, MAX_JSON_CONTAINERS, MAX_RESULT_JSON_BYTES). A BERT-base layer's case is about
// 30 MB, nests 7 levels deep and holds about 10,000 arrays, so the input limits are far above
// what the format needs.
constexpr uint64_t kMaxCaseBytes = uint64_t{256} << 20;        // bytes of a case document
constexpr int kMaxJsonDepth = 64;                              // nested arrays/objects
constexpr uint64_t kMaxJsonContainers = uint64_t{1} << 24;     // arrays/objects in a document
constexpr uint64_t kMaxResultJsonBytes = uint64_t{256} << 20;  // the CLIs' printed result

// Parses a case document. Errors are kParseError naming the JSON path ("inputs.query[1][2]:
// expected a number, got string \"x\""); JSON that is not well formed is "$: not valid JSON
// (... at byte N)". On top of RFC 8259, documents must nest at most kMaxJsonDepth levels, hold
// at most kMaxJsonContainers arrays and objects, have
// unique keys in every object and no number literal beyond float64 (1e400: "out of range"; a
// finite number beyond float32 becomes +-inf, as torch.tensor(..., dtype=torch.float32) does).
// A leading UTF-8 byte order mark is skipped. More than `max_bytes` is kResourceExhausted.
// An attention case ("kind" absent, null or "mha"); a "transformer" case is a kParseError at
// "kind" (ParseCaseDocument reads both).
Status ParseCase(std::string_view json_text, AttentionCase* out,
                 uint64_t max_bytes = kMaxCaseBytes);
// A case of either kind, with the same rules and limits. For "kind": "transformer" the config is
// validated (the message names it: "config.n_heads: d_model (8) must be divisible by n_heads
// (3)"), tokens are integers in [0, vocab_size) with 1 <= T <= max_len ("inputs.tokens[1][3]:
// ..."), targets of their shape are -100 or token ids with at least one counted, head_gates are
// [n_layers, n_heads], and every expected hook name is a hook of the config; the state_dict's
// keys and shapes are checked when the model is built (BuildTransformer).
Status ParseCaseDocument(std::string_view json_text, CaseDocument* out,
                         uint64_t max_bytes = kMaxCaseBytes);

// Reads a file ("-": standard input) in chunks, refusing with kResourceExhausted as soon as it
// passes `max_bytes` (an endless pipe or /dev/zero is never read whole). A missing file, a
// directory or a read error is kIoError.
Status ReadTextFile(const std::string& path, std::string* out,
                    uint64_t max_bytes = kMaxCaseBytes);

// Creates the module of the case's config and loads its state_dict.
Status BuildModule(const AttentionCase& c, std::unique_ptr<MultiheadAttention>* out);

enum class CasePath { kFast, kReference };
Status RunCase(const AttentionCase& c, CasePath path, ForwardResult* result);

// got vs expected, per tensor: shapes equal, NaN and infinities at the same places, and
// relative error = max |got - expected| / max |expected| (finite entries) within `tolerance`.
struct TensorCheck {
  std::string name;
  bool ok = false;
  double max_relative_error = 0;
  std::string detail;
};
struct CaseComparison {
  bool ok = false;
  double max_relative_error = 0;  // worst of output and weights (transformer: of its tensors)
  std::string detail;             // why it failed: which tensor, index, values (the first)
  // A transformer case: each tensor's own check (logits, then "hooks.<name>" for the expected
  // hooks), and the loss's |got - expected| / max(1, |expected|) when the case expects one.
  std::vector<TensorCheck> tensors;
  bool has_loss = false;
  double loss_error = 0;
};
CaseComparison CompareWithExpected(const AttentionCase& c, const ForwardResult& result,
                                   double tolerance);

// A transformer case's result: the forward pass (logits and the expected hooks, without the
// batch axis for unbatched tokens) and, with targets, the loss (Transformer::Loss).
struct TransformerCaseResult {
  TransformerResult forward;
  bool has_loss = false;
  double loss = 0;
};
// Creates the model of the case's config and loads its state_dict (every key of the config).
Status BuildTransformer(const TransformerCase& c, std::unique_ptr<Transformer>* out);
Status RunTransformerCase(const TransformerCase& c, TransformerCaseResult* result);
// logits and every expected hook within `tolerance` (CompareWithExpected's rule per tensor), and
// the loss within tolerance x max(1, |expected|).
CaseComparison CompareWithExpected(const TransformerCase& c, const TransformerCaseResult& result,
                                   double tolerance);

// {"output": [...], "weights": [...] | null} with PyTorch's shapes as nested arrays; non-finite
// numbers as the strings "inf", "-inf", "nan", as the case format writes them.
std::string ResultToJson(const ForwardResult& result);
std::string TensorToJson(const float* data, const Shape& shape);
// ResultToJson's text and a newline, written to `file` a megabyte at a time. False on a write
// error.
bool WriteResultJson(const ForwardResult& result, std::FILE* file);
// {"logits": [...], "loss": x (with targets), "hooks": {"name": [...], ...} (when the case
// names any)}: the shape of a transformer case's expected section.
std::string ResultToJson(const TransformerCaseResult& result);
bool WriteResultJson(const TransformerCaseResult& result, std::FILE* file);

// The shape of the weights a run of `c` returns (rank 0 when it returns none), and an upper
// bound of the bytes ResultToJson writes for it, from the shapes alone: the CLIs refuse a case
// whose result would be too large to print before computing it (kResourceExhausted, naming the
// shapes and the limit).
Shape ResultWeightsShape(const AttentionCase& c);
uint64_t ResultJsonBytesBound(const AttentionCase& c);
Status CheckResultJsonSize(const AttentionCase& c, uint64_t max_bytes = kMaxResultJsonBytes);
// The same for a transformer case (logits, the loss and the expected hooks; each hook bounded by
// the config's largest hook shape), the bound web/lib/case.js computes.
uint64_t ResultJsonBytesBound(const TransformerCase& c);
Status CheckResultJsonSize(const TransformerCase& c, uint64_t max_bytes = kMaxResultJsonBytes);

}  // namespace headscope

#endif  // HEADSCOPE_CASE_FILE_H_
