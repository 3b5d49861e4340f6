// Status: how every headscope entry point reports failure. No exceptions cross the API (and none
// may cross Embind, where a C++ exception arrives in JS as a bare number), so each fallible call
// returns a Status whose message names the argument, what was received and what was expected.
#ifndef HEADSCOPE_STATUS_H_
#define HEADSCOPE_STATUS_H_

#include <string>
#include <string_view>
#include <utility>

namespace headscope {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // a value or option is not allowed (sizes, types, flags)
  kShapeMismatch,      // a tensor's rank or shape does not fit the config or the other inputs
  kMissingParameter,   // a state_dict entry the config needs has not been loaded
  kUnknownParameter,   // a state_dict key this config does not have
  kResourceExhausted,  // buffers for the call would exceed the limit, or allocation failed
  kParseError,         // a case document is not valid JSON or not in the case format
  kIoError,            // a file could not be read
  kCancelled,          // the caller cancelled the request, or changed what it ran on (the
                       // model's weights during a generation) before it finished
  kLast = kCancelled,  // (the last code: the schema lists them all for JS)
};

// Stable upper-case name of a code ("SHAPE_MISMATCH"); the JS wrapper uses it as error.code.
const char* StatusCodeName(StatusCode code);

// The argument a Status is about, as a stable id. Messages spell arguments through ArgName and
// ArgPath in the process's naming: PyTorch's (key_padding_mask, embed_dim; the C++ API, the CLI)
// or the JS API's (options.keyPaddingMask, config.embedDim; set once by the WebAssembly binding),
// so each message is written once, in C++, and reaches JS already in JS's words, with the id
// beside it (error.argument) instead of being renamed by patterns in JS.
enum class Arg {
  kNone,
  kQuery, kKey, kValue,
  kKeyPaddingMask, kAttnMask, kIsCausal, kNeedWeights, kHeadGates,
  kEmbedDim, kNumHeads, kKdim, kVdim,
  kStateDict,
  kTokens, kTargets, kHooks,  // the Transformer's forward arguments
  kVocabSize, kMaxLen, kDModel, kNLayers, kNHeads, kDMlp, kLnEps, kSeed,  // and its config
  kPrompt, kMaxNewTokens, kTemperature, kTopK, kTopP, kSampleSeed,  // its generate's
  kOptimizer, kLr, kBetas, kEps, kWeightDecay, kClipGradNorm,  // its optimizer's options
  kGrads,  // the gradients an optimizer step applies
  kConfig,  // a whole config (its weights' size)
  kNorm, kPositions, kCausal, kAct, kBias, kTieEmbeddings,  // the rest of the Transformer's config
  kNumKvHeads, kNKvHeads,  // grouped-query attention: MultiheadAttention's and the Transformer's
  kWindow, kAttnWindow,  // the sliding window: MultiheadAttention's forward option, the config's
  kRopeLayout, kRopeBase, kRopeFraction,  // rotary position embeddings (both objects' layout and
  kRopeDims,                               // base, the Transformer's fraction, MHA's dims)
  kPatches,  // the Transformer's activation patches (TransformerOptions::patches)
  kLayer, kHead, kPosition, kBatch, kCorrupted, kSite,  // the causal experiments' (experiments.h)
};
enum class Naming { kTorch, kJs };
void SetNaming(Naming naming);
Naming CurrentNaming();
// How a message refers to the argument inside a sentence ("embedDim", "options.attnMask").
const char* ArgName(Arg arg);
// How a message names the argument it is about, as its first word ("config.embedDim").
const char* ArgPath(Arg arg);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  Status(StatusCode code, Arg argument, std::string message)
      : code_(code), argument_(argument), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // The argument the message is about (Arg::kNone for failures that are not one argument's:
  // memory, I/O, a case document's JSON path).
  Arg argument() const { return argument_; }
  const std::string& message() const { return message_; }
  // "SHAPE_MISMATCH: query: ..." for logs and the CLI.
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  Arg argument_ = Arg::kNone;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status ShapeMismatch(std::string m) { return {StatusCode::kShapeMismatch, std::move(m)}; }
// A caller's text (a state_dict key, a JSON key) as a message quotes it: at most 64 code points
// (then "..."), and control characters (C0, DEL, C1), the line and paragraph separators and the
// bidirectional controls (U+2028-202E, U+2066-2069) written as \uXXXX, so that a hostile name can neither make a message huge nor break
// it over lines, clear a terminal or reorder what is shown. web/lib/tensor.js quoteInput is the
// same rule.
std::string QuoteInput(std::string_view text);

// "<ArgPath(arg)>: <detail>", carrying the id.
inline Status ArgError(StatusCode code, Arg arg, const std::string& detail) {
  return {code, arg, std::string(ArgPath(arg)) + ": " + detail};
}

#define HEADSCOPE_RETURN_IF_ERROR(expr)           \
  do {                                            \
    ::headscope::Status status_ = (expr);         \
    if (!status_.ok()) return status_;            \
  } while (0)

}  // namespace headscope

#endif  // HEADSCOPE_STATUS_H_
