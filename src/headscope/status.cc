#include "headscope/status.h"

#include <cstdint>
#include <cstdio>

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
    {"type", "options.type", "options.type"},
    {"lr", "options.lr", "options.lr"},
    {"betas", "options.betas", "options.betas"},
    {"eps", "options.eps", "options.eps"},
    {"weight_decay", "options.weightDecay", "options.weightDecay"},
    {"max_norm", "options.clipGradNorm", "options.clipGradNorm"},
    {"grads", "grads", "grads"},
    {"config", "config", "config"},
    {"norm", "norm", "config.norm"},
    {"positions", "positions", "config.positions"},
    {"causal", "causal", "config.causal"},
    {"act", "act", "config.act"},
    {"bias", "bias", "config.bias"},
    {"tie_embeddings", "tieEmbeddings", "config.tieEmbeddings"},
    {"num_kv_heads", "numKvHeads", "config.numKvHeads"},
    {"n_kv_heads", "nKvHeads", "config.nKvHeads"},
    {"window", "options.window", "options.window"},
    {"attn_window", "attnWindow", "config.attnWindow"},
    {"rope_layout", "ropeLayout", "config.ropeLayout"},
    {"rope_base", "ropeBase", "config.ropeBase"},
    {"rope_fraction", "ropeFraction", "config.ropeFraction"},
    {"rope_dims", "ropeDims", "config.ropeDims"},
    {"patches", "options.patches", "options.patches"},
    {"layer", "options.layer", "options.layer"},
    {"head", "options.head", "options.head"},
    {"position", "options.position", "options.position"},
    {"batch", "options.batch", "options.batch"},
    {"corrupted", "corrupted", "corrupted"},
    {"site", "options.site", "options.site"},
};
static_assert(sizeof(kArgNames) / sizeof(kArgNames[0]) == static_cast<int>(Arg::kSite) + 1);

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

std::string QuoteInput(std::string_view text) {
  constexpr size_t kMaxCodePoints = 64;
  const auto is_lead = [](char ch) { return (static_cast<unsigned char>(ch) & 0xC0) != 0x80; };
  size_t total = 0;
  for (char ch : text) total += is_lead(ch);
  const size_t keep = total > kMaxCodePoints ? kMaxCodePoints - 3 : total;
  std::string out;
  size_t code_points = 0;
  for (size_t i = 0; i < text.size();) {
    if (is_lead(text[i]) && ++code_points > keep) break;
    // One code point: its bytes (a stray continuation byte counts as one of its own).
    const unsigned char b = static_cast<unsigned char>(text[i]);
    size_t n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    if (i + n > text.size()) n = text.size() - i;
    uint32_t cp = b;
    if (n > 1) {
      cp = b & (0xFF >> (n + 1));
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    }
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || (cp >= 0x2028 && cp <= 0x202E) ||
        (cp >= 0x2066 && cp <= 0x2069)) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(text.data() + i, n);
    }
    i += n;
  }
  return total > kMaxCodePoints ? out + "..." : out;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace headscope
