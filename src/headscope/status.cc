#include "headscope/status.h"

namespace headscope {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kShapeMismatch: return "SHAPE_MISMATCH";
    case StatusCode::kMissingParameter: return "MISSING_PARAMETER";
    case StatusCode::kUnknownParameter: return "UNKNOWN_PARAMETER";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kParseError: return "PARSE_ERROR";
    case StatusCode::kIoError: return "IO_ERROR";
    case StatusCode::kCancelled: return "CANCELLED";
  }
  return "UNKNOWN";
}

namespace {

Naming g_naming = Naming::kTorch;

struct ArgNames {
  const char* torch;
  const char* js_name;  // inside a sentence
  const char* js_path;  // as the argument a message is about
};
// In Arg's order.
constexpr ArgNames kArgNames[] = {
    {"", "", ""},
    {"query", "query", "query"},
    {"key", "key", "key"},
    {"value", "value", "value"},
    {"key_padding_mask", "options.keyPaddingMask", "options.keyPaddingMask"},
    {"attn_mask", "options.attnMask", "options.attnMask"},
    {"is_causal", "options.isCausal", "options.isCausal"},
    {"need_weights", "options.needWeights", "options.needWeights"},
    {"head_gates", "options.headGates", "options.headGates"},
    {"embed_dim", "embedDim", "config.embedDim"},
    {"num_heads", "numHeads", "config.numHeads"},
    {"kdim", "kdim", "config.kdim"},
    {"vdim", "vdim", "config.vdim"},
    {"state_dict", "stateDict", "stateDict"},
    {"tokens", "tokens", "tokens"},
    {"targets", "targets", "targets"},
    {"hooks", "options.hooks", "options.hooks"},
    {"vocab_size", "vocabSize", "config.vocabSize"},
    {"max_len", "maxLen", "config.maxLen"},
    {"d_model", "dModel", "config.dModel"},
    {"n_layers", "nLayers", "config.nLayers"},
    {"n_heads", "nHeads", "config.nHeads"},
    {"d_mlp", "dMlp", "config.dMlp"},
    {"ln_eps", "lnEps", "config.lnEps"},
    {"seed", "seed", "config.seed"},
    {"prompt", "prompt", "prompt"},
    {"max_new_tokens", "options.maxNewTokens", "options.maxNewTokens"},
    {"temperature", "options.temperature", "options.temperature"},
    {"top_k", "options.topK", "options.topK"},
    {"top_p", "options.topP", "options.topP"},
    {"seed", "options.seed", "options.seed"},
    {"optimizer", "options.type", "options.type"},
    {"lr", "options.lr", "options.lr"},
    {"betas", "options.betas", "options.betas"},
    {"eps", "options.eps", "options.eps"},
    {"weight_decay", "options.weightDecay", "options.weightDecay"},
    {"max_norm", "options.clipGradNorm", "options.clipGradNorm"},
    {"grads", "grads", "grads"},
    {"config", "config", "config"},
};
static_assert(sizeof(kArgNames) / sizeof(kArgNames[0]) == static_cast<int>(Arg::kConfig) + 1);

}  // namespace

void SetNaming(Naming naming) { g_naming = naming; }
Naming CurrentNaming() { return g_naming; }

const char* ArgName(Arg arg) {
  const ArgNames& n = kArgNames[static_cast<int>(arg)];
  return g_naming == Naming::kJs ? n.js_name : n.torch;
}

const char* ArgPath(Arg arg) {
  const ArgNames& n = kArgNames[static_cast<int>(arg)];
  return g_naming == Naming::kJs ? n.js_path : n.torch;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace headscope
