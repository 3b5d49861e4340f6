#include "headscope/schema.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "headscope/config.h"
#include "headscope/optim.h"
#include "headscope/transformer.h"

namespace headscope {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Accessors of a config struct's members, as FieldValue.
template <typename T, typename M, M T::*P>
FieldValue Get(const void* o) {
  FieldValue f;
  f.v[0] = static_cast<double>(static_cast<const T*>(o)->*P);
  if constexpr (std::is_integral_v<M> && !std::is_same_v<M, bool>) f.n = static_cast<const T*>(o)->*P;
  return f;
}
template <typename T, typename M, M T::*P>
void Set(void* o, const FieldValue& f) {
  static_cast<T*>(o)->*P = static_cast<M>(f.v[0]);
}
template <typename T, typename E, E T::*P>
FieldValue GetEnum(const void* o) {
  FieldValue f;
  f.v[0] = static_cast<double>(static_cast<int>(static_cast<const T*>(o)->*P));
  return f;
}
template <typename T, typename E, E T::*P>
void SetEnum(void* o, const FieldValue& f) {
  static_cast<T*>(o)->*P = static_cast<E>(static_cast<int>(f.v[0]));
}

// One row of a table: the field's type and names; the rest filled by the helpers below.
constexpr FieldSpec Row(const char* torch, const char* js, FieldType type, Arg arg,
                        const char* default_json, const char* doc) {
  return FieldSpec{torch,   js,      type,    arg,          0,   0,
                   nullptr, nullptr, 0,       0,            false, false,
                   nullptr, default_json, doc, 0,         nullptr, nullptr};
}
constexpr FieldSpec SizeRow(FieldSpec f, int64_t min, int64_t max, const char* null_means = nullptr,
                            const char* zero = nullptr) {
  f.min = min;
  f.max = max;
  f.null_means = null_means;
  f.zero = zero;
  return f;
}
constexpr FieldSpec NumberRow(FieldSpec f, double lo, bool lo_open, double hi, bool hi_open,
                              const char* zero = nullptr) {
  f.lo = lo;
  f.lo_open = lo_open;
  f.hi = hi;
  f.hi_open = hi_open;
  f.zero = zero;
  return f;
}
template <typename T>
constexpr FieldSpec Access(FieldSpec f, FieldValue (*get)(const void*),
                           void (*set)(void*, const FieldValue&), unsigned variants = 0) {
  f.get = get;
  f.set = set;
  f.variants = variants;
  return f;
}

// ---- torch.nn.MultiheadAttention's constructor ---------------------------------------------------
const char* const kRopeLayouts[] = {"half", "interleaved", nullptr};
using M = MhaConfig;
const FieldSpec kMhaFields[] = {
    Access<M>(SizeRow(Row("embed_dim", "embedDim", FieldType::kSize, Arg::kEmbedDim, nullptr,
                          "E, the model width (query's last dimension)"),
                      1, kMaxDim),
              Get<M, int64_t, &M::embed_dim>, Set<M, int64_t, &M::embed_dim>),
    Access<M>(SizeRow(Row("num_heads", "numHeads", FieldType::kSize, Arg::kNumHeads, nullptr,
                          "H; embed_dim must be divisible by it"),
                      1, kMaxDim),
              Get<M, int64_t, &M::num_heads>, Set<M, int64_t, &M::num_heads>),
    Access<M>(SizeRow(Row("num_kv_heads", "numKvHeads", FieldType::kSize, Arg::kNumKvHeads, "null",
                          "G, the key/value heads (grouped-query attention; 1: multi-query); "
                          "num_heads must be divisible by it, head h reads K/V head "
                          "h / (num_heads / G) (null: num_heads)"),
                      1, kMaxDim, "num_heads"),
              Get<M, int64_t, &M::num_kv_heads>, Set<M, int64_t, &M::num_kv_heads>),
    Access<M>(Row("bias", "bias", FieldType::kBool, Arg::kNone, "true",
                  "in_proj_bias and out_proj.bias"),
              Get<M, bool, &M::bias>, Set<M, bool, &M::bias>),
    Access<M>(Row("add_bias_kv", "addBiasKV", FieldType::kBool, Arg::kNone, "false",
                  "a learned key and value row (bias_k, bias_v) after the keys"),
              Get<M, bool, &M::add_bias_kv>, Set<M, bool, &M::add_bias_kv>),
    Access<M>(Row("add_zero_attn", "addZeroAttn", FieldType::kBool, Arg::kNone, "false",
                  "a zero key and value row after the keys"),
              Get<M, bool, &M::add_zero_attn>, Set<M, bool, &M::add_zero_attn>),
    Access<M>(SizeRow(Row("kdim", "kdim", FieldType::kSize, Arg::kKdim, "null",
                          "the key's last dimension (null: embed_dim)"),
                      1, kMaxDim, "embed_dim"),
              Get<M, int64_t, &M::kdim>, Set<M, int64_t, &M::kdim>),
    Access<M>(SizeRow(Row("vdim", "vdim", FieldType::kSize, Arg::kVdim, "null",
                          "the value's last dimension (null: embed_dim)"),
                      1, kMaxDim, "embed_dim"),
              Get<M, int64_t, &M::vdim>, Set<M, int64_t, &M::vdim>),
    Access<M>(Row("batch_first", "batchFirst", FieldType::kBool, Arg::kNone, "false",
                  "inputs (N, L, E) instead of (L, N, E)"),
              Get<M, bool, &M::batch_first>, Set<M, bool, &M::batch_first>),
    Access<M>(SizeRow(Row("rope_dims", "ropeDims", FieldType::kSize, Arg::kRopeDims, "0",
                          "rotary position embeddings: the first r dims of each head of q and k "
                          "turn by position (even, at most the head dim); 0: none"),
                      2, kMaxDim, nullptr, "no rotation"),
              Get<M, int64_t, &M::rope_dims>, Set<M, int64_t, &M::rope_dims>),
    [] {
      FieldSpec f = Access<M>(Row("rope_layout", "ropeLayout", FieldType::kChoice,
                                  Arg::kRopeLayout, "\"half\"",
                                  "rope_dims > 0: dim i pairs with i + r/2 (half: GPT-NeoX, "
                                  "LLaMA) or 2i with 2i + 1 (interleaved: RoFormer, GPT-J)"),
                              GetEnum<M, RopeLayout, &M::rope_layout>,
                              SetEnum<M, RopeLayout, &M::rope_layout>);
      f.choices = kRopeLayouts;
      return f;
    }(),
    Access<M>(NumberRow(Row("rope_base", "ropeBase", FieldType::kNumber, Arg::kRopeBase, "10000",
                            "rope_dims > 0: pair i of r turns by pos / rope_base^(2i / r)"),
                        0, true, kInf, true),
              Get<M, double, &M::rope_base>, Set<M, double, &M::rope_base>),
    Access<M>(Row("attn_sinks", "attnSinks", FieldType::kBool, Arg::kNone, "false",
                  "attention sinks (gpt-oss): a learned logit per head (the parameter sinks [H]) "
                  "joins each softmax row's denominator; rows sum to less than 1"),
              Get<M, bool, &M::attn_sinks>, Set<M, bool, &M::attn_sinks>),
};
const DivisibleRule kMhaRules[] = {{"embed_dim", "num_heads"}, {"num_heads", "num_kv_heads"}};
const OnlyWithRule kMhaOnlyWith[] = {{"rope_layout", "rope_dims", nullptr},
                                     {"rope_base", "rope_dims", nullptr}};

// ---- The reference transformer (tools/tiny_transformer.py) ---------------------------------------
using T = TransformerConfig;
const char* const kNorms[] = {"pre", "post", "none", nullptr};
const char* const kPositions[] = {"learned", "sinusoidal", "none", "alibi", "rope", nullptr};
const char* const kActivations[] = {"gelu", "relu", nullptr};
const FieldSpec kTransformerFields[] = {
    Access<T>(SizeRow(Row("vocab_size", "vocabSize", FieldType::kSize, Arg::kVocabSize, nullptr,
                          "V, the number of token ids"),
                      1, kMaxDim),
              Get<T, int64_t, &T::vocab_size>, Set<T, int64_t, &T::vocab_size>),
    Access<T>(SizeRow(Row("max_len", "maxLen", FieldType::kSize, Arg::kMaxLen, nullptr,
                          "the longest sequence; rows of the position tables"),
                      1, kMaxDim),
              Get<T, int64_t, &T::max_len>, Set<T, int64_t, &T::max_len>),
    Access<T>(SizeRow(Row("d_model", "dModel", FieldType::kSize, Arg::kDModel, nullptr,
                          "D, the residual stream's width"),
                      1, kMaxDim),
              Get<T, int64_t, &T::d_model>, Set<T, int64_t, &T::d_model>),
    Access<T>(SizeRow(Row("n_layers", "nLayers", FieldType::kSize, Arg::kNLayers, "1",
                          "the number of blocks"),
                      1, 256),
              Get<T, int64_t, &T::n_layers>, Set<T, int64_t, &T::n_layers>),
    Access<T>(SizeRow(Row("n_heads", "nHeads", FieldType::kSize, Arg::kNHeads, "1",
                          "H; d_model must be divisible by it (head dim D / H)"),
                      1, kMaxDim),
              Get<T, int64_t, &T::n_heads>, Set<T, int64_t, &T::n_heads>),
    Access<T>(SizeRow(Row("n_kv_heads", "nKvHeads", FieldType::kSize, Arg::kNKvHeads, "null",
                          "G, the key/value heads (grouped-query attention; 1: multi-query); "
                          "n_heads must be divisible by it, head h reads K/V head h / (n_heads / G) "
                          "(null: n_heads)"),
                      1, kMaxDim, "n_heads"),
              Get<T, int64_t, &T::n_kv_heads>, Set<T, int64_t, &T::n_kv_heads>),
    Access<T>(SizeRow(Row("attn_window", "attnWindow", FieldType::kSize, Arg::kAttnWindow, "0",
                          "sliding-window attention: with causal, token t sees the w tokens "
                          "t - w < s <= t; without, |t - s| < w; 0: full attention"),
                      0, kMaxDim, nullptr, "full attention"),
              Get<T, int64_t, &T::attn_window>, Set<T, int64_t, &T::attn_window>),
    Access<T>(Row("attn_sinks", "attnSinks", FieldType::kBool, Arg::kNone, "false",
                  "attention sinks (gpt-oss): every layer's blocks.{l}.attn.sinks [n_heads], a "
                  "learned logit per head, joins each softmax row's denominator"),
              Get<T, bool, &T::attn_sinks>, Set<T, bool, &T::attn_sinks>),
    Access<T>(SizeRow(Row("d_mlp", "dMlp", FieldType::kSize, Arg::kDMlp, "0",
                          "the MLP's hidden width; 0: attention only (no MLP, no ln2)"),
                      0, kMaxDim, nullptr, "no MLP"),
              Get<T, int64_t, &T::d_mlp>, Set<T, int64_t, &T::d_mlp>),
    [] {
      FieldSpec f = Access<T>(Row("norm", "norm", FieldType::kChoice, Arg::kNorm, "\"pre\"",
                                  "where the LayerNorms sit: pre, post or none"),
                              GetEnum<T, NormPlacement, &T::norm>,
                              SetEnum<T, NormPlacement, &T::norm>);
      f.choices = kNorms;
      return f;
    }(),
    [] {
      FieldSpec f = Access<T>(Row("positions", "positions", FieldType::kChoice, Arg::kPositions,
                                  "\"learned\"",
                                  "the position embedding; alibi: none, ALiBi's bias on the "
                                  "attention scores instead (Press et al.); rope: none added, q "
                                  "and k rotated by position"),
                              GetEnum<T, PositionKind, &T::positions>,
                              SetEnum<T, PositionKind, &T::positions>);
      f.choices = kPositions;
      return f;
    }(),
    Access<T>(Row("causal", "causal", FieldType::kBool, Arg::kCausal, "true",
                  "token t attends only to tokens <= t"),
              Get<T, bool, &T::causal>, Set<T, bool, &T::causal>),
    [] {
      FieldSpec f = Access<T>(Row("act", "act", FieldType::kChoice, Arg::kAct, "\"gelu\"",
                                  "the MLP's activation (GELU: the exact erf form)"),
                              GetEnum<T, Activation, &T::act>, SetEnum<T, Activation, &T::act>);
      f.choices = kActivations;
      return f;
    }(),
    Access<T>(Row("bias", "bias", FieldType::kBool, Arg::kBias, "true",
                  "the Linear and attention biases (LayerNorms keep theirs)"),
              Get<T, bool, &T::bias>, Set<T, bool, &T::bias>),
    Access<T>(NumberRow(Row("ln_eps", "lnEps", FieldType::kNumber, Arg::kLnEps, "1e-05",
                            "the LayerNorms' epsilon"),
                        0, true, kInf, true),
              Get<T, double, &T::ln_eps>, Set<T, double, &T::ln_eps>),
    Access<T>(Row("tie_embeddings", "tieEmbeddings", FieldType::kBool, Arg::kTieEmbeddings,
                  "false",
                  "unembed.weight is tok_embed.weight, one tensor (as GPT-2's): logits = x "
                  "tok_embed.weight^T (+ unembed.bias)"),
              Get<T, bool, &T::tie_embeddings>, Set<T, bool, &T::tie_embeddings>),
    [] {
      FieldSpec f = Access<T>(Row("rope_layout", "ropeLayout", FieldType::kChoice,
                                  Arg::kRopeLayout, "\"half\"",
                                  "positions rope: dim i pairs with i + r/2 (half: GPT-NeoX, "
                                  "LLaMA) or 2i with 2i + 1 (interleaved: RoFormer, GPT-J)"),
                              GetEnum<T, RopeLayout, &T::rope_layout>,
                              SetEnum<T, RopeLayout, &T::rope_layout>);
      f.choices = kRopeLayouts;
      return f;
    }(),
    Access<T>(NumberRow(Row("rope_base", "ropeBase", FieldType::kNumber, Arg::kRopeBase, "10000",
                            "positions rope: pair i of r turns by pos / rope_base^(2i / r)"),
                        0, true, kInf, true),
              Get<T, double, &T::rope_base>, Set<T, double, &T::rope_base>),
    Access<T>(NumberRow(Row("rope_fraction", "ropeFraction", FieldType::kNumber,
                            Arg::kRopeFraction, "1",
                            "positions rope: the rotary dims r of a head are the largest even "
                            "number <= rope_fraction * head dim (at least 2); the rest pass "
                            "through"),
                        0, true, 1, false),
              Get<T, double, &T::rope_fraction>, Set<T, double, &T::rope_fraction>),
};
const DivisibleRule kTransformerRules[] = {{"d_model", "n_heads"}, {"n_heads", "n_kv_heads"}};
const OnlyWithRule kTransformerOnlyWith[] = {{"rope_layout", "positions", "rope"},
                                             {"rope_base", "positions", "rope"},
                                             {"rope_fraction", "positions", "rope"}};

// ---- The optimizer (torch.optim.AdamW / SGD with clip_grad_norm_) --------------------------------
using O = OptimizerConfig;
const char* const kOptimizerTypes[] = {"adamw", "sgd", nullptr};
constexpr unsigned kAdamWOnly = 1u << OptimizerConfig::kAdamW;
FieldValue GetBetas(const void* o) {
  FieldValue f;
  f.v[0] = static_cast<const O*>(o)->beta1;
  f.v[1] = static_cast<const O*>(o)->beta2;
  return f;
}
void SetBetas(void* o, const FieldValue& f) {
  static_cast<O*>(o)->beta1 = f.v[0];
  static_cast<O*>(o)->beta2 = f.v[1];
}
const FieldSpec kOptimizerFields[] = {
    [] {
      FieldSpec f = Access<O>(Row("type", "type", FieldType::kChoice, Arg::kOptimizer, nullptr,
                                  "adamw (torch.optim.AdamW) or sgd (torch.optim.SGD, momentum 0)"),
                              GetEnum<O, O::Kind, &O::kind>, SetEnum<O, O::Kind, &O::kind>);
      f.choices = kOptimizerTypes;
      return f;
    }(),
    Access<O>(NumberRow(Row("lr", "lr", FieldType::kNumber, Arg::kLr, "0.001", "the learning rate"),
                        0, false, kInf, true),
              Get<O, double, &O::lr>, Set<O, double, &O::lr>),
    Access<O>(NumberRow(Row("betas", "betas", FieldType::kPair, Arg::kBetas, "[0.9, 0.999]",
                            "AdamW's moment decays (beta1, beta2)"),
                        0, false, 1, true),
              GetBetas, SetBetas, kAdamWOnly),
    Access<O>(NumberRow(Row("eps", "eps", FieldType::kNumber, Arg::kEps, "1e-08",
                            "AdamW's denominator term (and > 0 in float32)"),
                        0, true, kInf, true),
              Get<O, double, &O::eps>, Set<O, double, &O::eps>, kAdamWOnly),
    Access<O>(NumberRow(Row("weight_decay", "weightDecay", FieldType::kNumber, Arg::kWeightDecay,
                            "0.01", "AdamW's decoupled weight decay"),
                        0, false, kInf, true),
              Get<O, double, &O::weight_decay>, Set<O, double, &O::weight_decay>, kAdamWOnly),
    Access<O>(NumberRow(Row("max_norm", "clipGradNorm", FieldType::kNumber, Arg::kClipGradNorm,
                            "0", "clip_grad_norm_'s max_norm before each step; 0: no clipping"),
                        0, false, kInf, true, "no clipping"),
              Get<O, double, &O::clip_grad_norm>, Set<O, double, &O::clip_grad_norm>),
};

template <size_t N>
constexpr size_t Count(const FieldSpec (&)[N]) {
  return N;
}
template <size_t N>
constexpr size_t Count(const DivisibleRule (&)[N]) {
  return N;
}
template <size_t N>
constexpr size_t Count(const OnlyWithRule (&)[N]) {
  return N;
}

const ObjectSchema kMha{"mha",        kMhaFields,   Count(kMhaFields), kMhaRules, Count(kMhaRules),
                        nullptr,      kMhaOnlyWith, Count(kMhaOnlyWith)};
const ObjectSchema kTransformer{"transformer",        kTransformerFields,
                                Count(kTransformerFields), kTransformerRules,
                                Count(kTransformerRules),  nullptr,
                                kTransformerOnlyWith,      Count(kTransformerOnlyWith)};
const ObjectSchema kOptimizer{"optimizer", kOptimizerFields, Count(kOptimizerFields), nullptr, 0,
                              kOptimizerTypes};

std::string Int(int64_t v) { return std::to_string(v); }

// The shortest text that reads back as the same double ("nan" for any NaN).
std::string Number(double v) {
  if (std::isnan(v)) return "nan";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (!std::isfinite(v) || std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// What a number must be, as the messages say it: "a finite number > 0", "in [0, 1)".
std::string NumberExpectation(const FieldSpec& f) {
  if (f.hi == kInf) {
    std::string s = std::string("a finite number ") + (f.lo_open ? "> " : ">= ") + Number(f.lo);
    if (f.zero != nullptr) s = "a finite number > 0 (or 0: " + std::string(f.zero) + ")";
    return s;
  }
  return std::string("in ") + (f.lo_open ? "(" : "[") + Number(f.lo) + ", " + Number(f.hi) +
         (f.hi_open ? ")" : "]");
}

bool InNumberRange(const FieldSpec& f, double v) {
  return std::isfinite(v) && (f.lo_open ? v > f.lo : v >= f.lo) &&
         (f.hi_open ? v < f.hi : v <= f.hi);
}

Status FieldError(const FieldSpec& f, const std::string& detail) {
  return ArgError(StatusCode::kInvalidArgument, f.arg, detail);
}

void AppendJsonString(std::string* out, const char* s) {
  *out += '"';
  for (const char* p = s; *p != '\0'; ++p) {
    if (*p == '"' || *p == '\\') *out += '\\';
    *out += *p;
  }
  *out += '"';
}

const char* TypeName(FieldType t) {
  switch (t) {
    case FieldType::kSize: return "size";
    case FieldType::kBool: return "bool";
    case FieldType::kChoice: return "choice";
    case FieldType::kNumber: return "number";
    case FieldType::kPair: return "pair";
  }
  return "";
}

void AppendNumberJson(std::string* out, double v) {
  *out += v == kInf ? "null" : Number(v);
}

void AppendSchemaJson(std::string* out, const ObjectSchema& s) {
  *out += "{\"name\":";
  AppendJsonString(out, s.name);
  *out += ",\"fields\":[";
  for (size_t i = 0; i < s.num_fields; ++i) {
    const FieldSpec& f = s.fields[i];
    if (i) *out += ",";
    *out += "{\"torch\":";
    AppendJsonString(out, f.torch);
    *out += ",\"js\":";
    AppendJsonString(out, f.js);
    *out += ",\"type\":";
    AppendJsonString(out, TypeName(f.type));
    if (f.type == FieldType::kSize) {
      *out += ",\"min\":" + Int(f.min) + ",\"max\":" + Int(f.max);
    }
    if (f.type == FieldType::kNumber || f.type == FieldType::kPair) {
      *out += ",\"lo\":";
      AppendNumberJson(out, f.lo);
      *out += std::string(",\"loOpen\":") + (f.lo_open ? "true" : "false") + ",\"hi\":";
      AppendNumberJson(out, f.hi);  // null: no upper bound (infinity is not JSON)
      *out += std::string(",\"hiOpen\":") + (f.hi_open ? "true" : "false");
    }
    if (f.null_means != nullptr) {
      *out += ",\"nullMeans\":";
      AppendJsonString(out, f.null_means);
    }
    if (f.zero != nullptr) {
      *out += ",\"zero\":";
      AppendJsonString(out, f.zero);
    }
    if (f.choices != nullptr) {
      *out += ",\"choices\":[";
      for (const char* const* c = f.choices; *c != nullptr; ++c) {
        if (c != f.choices) *out += ",";
        AppendJsonString(out, *c);
      }
      *out += "]";
    }
    *out += ",\"default\":";
    *out += f.default_json == nullptr ? "\"required\"" : "";
    if (f.default_json != nullptr) {
      *out += "{\"value\":";
      *out += f.default_json;
      *out += "}";
    }
    if (f.variants != 0 && s.variants != nullptr) {
      *out += ",\"variants\":[";
      bool first = true;
      for (int b = 0; s.variants[b] != nullptr; ++b) {
        if (!(f.variants & (1u << b))) continue;
        if (!first) *out += ",";
        first = false;
        AppendJsonString(out, s.variants[b]);
      }
      *out += "]";
    }
    *out += ",\"doc\":";
    AppendJsonString(out, f.doc);
    *out += "}";
  }
  *out += "],\"divisible\":[";
  for (size_t i = 0; i < s.num_rules; ++i) {
    if (i) *out += ",";
    *out += "[";
    AppendJsonString(out, s.rules[i].dividend);
    *out += ",";
    AppendJsonString(out, s.rules[i].divisor);
    *out += "]";
  }
  *out += "]";
  if (s.num_only_with > 0) {
    *out += ",\"onlyWith\":[";
    for (size_t i = 0; i < s.num_only_with; ++i) {
      if (i) *out += ",";
      *out += "[";
      AppendJsonString(out, s.only_with[i].field);
      *out += ",";
      AppendJsonString(out, s.only_with[i].when);
      *out += ",";
      if (s.only_with[i].value != nullptr) {
        AppendJsonString(out, s.only_with[i].value);
      } else {
        *out += "null";  // (the size `when` > 0)
      }
      *out += "]";
    }
    *out += "]";
  }
  *out += "}";
}

// A choice's index, or -1.
int ChoiceIndex(const FieldSpec& f, const char* name) {
  for (int c = 0; f.choices[c] != nullptr; ++c) {
    if (std::strcmp(f.choices[c], name) == 0) return c;
  }
  return -1;
}

// A field's value as a message shows it: a choice quoted, a number in its shortest form.
std::string ValueText(const FieldSpec& f, double v) {
  if (f.type == FieldType::kChoice) return std::string("\"") + f.choices[static_cast<int>(v)] + "\"";
  if (f.type == FieldType::kBool) return v != 0 ? "true" : "false";
  // An integral number as JS writes it (10000, not Number's shortest 1e+04).
  if (v == std::floor(v) && std::fabs(v) < 1e21) return std::to_string(static_cast<int64_t>(v));
  return Number(v);
}

// The default of a choice or number field as its FieldValue's v[0] (a choice's index).
double DefaultValue(const FieldSpec& f) {
  if (f.type == FieldType::kChoice) {
    const std::string quoted = f.default_json;  // "\"half\""
    return ChoiceIndex(f, quoted.substr(1, quoted.size() - 2).c_str());
  }
  if (f.type == FieldType::kBool) return std::strcmp(f.default_json, "true") == 0 ? 1 : 0;
  return std::strtod(f.default_json, nullptr);
}

}  // namespace

const ObjectSchema& MhaConfigSchema() { return kMha; }

// (config.h) The schema's field checks and rule: sizes in range, kdim / vdim null or in range,
// embed_dim divisible by num_heads; and the rotary fields, which are not in the schema (not a
// torch.nn.MultiheadAttention argument: the Transformer sets them from its validated config).
Status ValidateConfig(const MhaConfig& c) {
  HEADSCOPE_RETURN_IF_ERROR(CheckFields(kMha, &c));
  // rope_dims: even and within a head, which involves embed_dim / num_heads (no row can say it;
  // web/lib/case.js's mhaRopeRule says it too, with this message).
  if (c.rope_dims % 2 != 0 || c.rope_dims > c.head_dim()) {
    return ArgError(StatusCode::kInvalidArgument, Arg::kRopeDims,
                    "expected 0 (no rotation) or an even number of dims up to the head dim " +
                        std::string(ArgName(Arg::kEmbedDim)) + " / " + ArgName(Arg::kNumHeads) +
                        " = " + Int(c.head_dim()) + ", got " + Int(c.rope_dims));
  }
  return Status::Ok();
}
const ObjectSchema& TransformerConfigSchema() { return kTransformer; }
const ObjectSchema& OptimizerSchema() { return kOptimizer; }

const FieldSpec* FindField(const ObjectSchema& schema, const char* name) {
  for (size_t i = 0; i < schema.num_fields; ++i) {
    const FieldSpec& f = schema.fields[i];
    if (std::strcmp(f.torch, name) == 0 || std::strcmp(f.js, name) == 0) return &f;
  }
  return nullptr;
}

std::string Expectation(const ObjectSchema& schema, const FieldSpec& f) {
  switch (f.type) {
    case FieldType::kSize: {
      std::string e = "an integer in [" + Int(f.zero ? std::max<int64_t>(1, f.min) : f.min) + ", " +
                      Int(f.max) + "]";
      const FieldSpec* other = f.null_means ? FindField(schema, f.null_means) : nullptr;
      if (other != nullptr) e = "null (= " + std::string(ArgName(other->arg)) + ") or " + e;
      if (f.zero != nullptr) e = "0 (" + std::string(f.zero) + ") or " + e;
      return e;
    }
    case FieldType::kBool:
      return "true or false";
    case FieldType::kChoice: {
      std::string list;
      for (const char* const* c = f.choices; *c != nullptr; ++c) {
        list += std::string(c == f.choices ? "\"" : ", \"") + *c + "\"";
      }
      return "one of " + list;
    }
    case FieldType::kNumber:
      return NumberExpectation(f);
    case FieldType::kPair:
      return "[" + std::string(ArgName(f.arg)) + "[0], " + ArgName(f.arg) + "[1]], each " +
             NumberExpectation(f);
  }
  return "";
}

Status CheckFieldNumber(const ObjectSchema& schema, const FieldSpec& f, double x,
                        const std::string& got) {
  bool ok = false;
  if (f.type == FieldType::kSize) {
    // (A nullable size's null is not the number 0: the caller says null.)
    ok = x == std::floor(x) && ((x >= static_cast<double>(f.min) && x <= static_cast<double>(f.max)) ||
                                (x == 0 && f.zero != nullptr));
  } else if (f.type == FieldType::kNumber) {
    ok = InNumberRange(f, x) || (x == 0 && f.zero != nullptr);
  }
  if (ok) return Status::Ok();
  return FieldError(f, "expected " + Expectation(schema, f) + ", got " + got);
}

Status CheckFields(const ObjectSchema& schema, const void* object, unsigned variant) {
  for (size_t i = 0; i < schema.num_fields; ++i) {
    const FieldSpec& f = schema.fields[i];
    if (f.variants != 0 && variant != 0 && !(f.variants & variant)) continue;
    const FieldValue value = f.get(object);
    const double v = value.v[0];
    switch (f.type) {
      case FieldType::kSize: {
        // (Compared and printed as the exact integer: INT64_MAX as a double is 2^63.)
        const int64_t n = value.n;
        if (f.null_means != nullptr && n == 0) break;  // null: the other field's value
        if (f.zero != nullptr && n == 0) break;
        if (n >= f.min && n <= f.max) break;
        return FieldError(f, "expected " + Expectation(schema, f) + ", got " + Int(n));
      }
      case FieldType::kBool:
        break;
      case FieldType::kChoice: {
        int n = 0;
        while (f.choices[n] != nullptr) ++n;
        if (v >= 0 && v < n && v == std::floor(v)) break;
        return FieldError(f, "expected " + Expectation(schema, f) + ", got index " + Number(v));
      }
      case FieldType::kNumber:
        if (InNumberRange(f, v) || (v == 0 && f.zero != nullptr)) break;
        return FieldError(f, "expected " + NumberExpectation(f) + ", got " + Number(v));
      case FieldType::kPair:
        for (int k = 0; k < 2; ++k) {
          if (InNumberRange(f, value.v[k])) continue;
          return FieldError(f, "expected " + std::string(ArgName(f.arg)) + "[" + Int(k) + "] " +
                                   NumberExpectation(f) + ", got " + Number(value.v[k]));
        }
        break;
    }
  }
  for (size_t i = 0; i < schema.num_rules; ++i) {
    const FieldSpec* a = FindField(schema, schema.rules[i].dividend);
    const FieldSpec* b = FindField(schema, schema.rules[i].divisor);
    const int64_t x = static_cast<int64_t>(a->get(object).v[0]);
    const int64_t y = static_cast<int64_t>(b->get(object).v[0]);
    if (y != 0 && x % y != 0) {
      return ArgError(StatusCode::kInvalidArgument, b->arg,
                      std::string(ArgName(a->arg)) + " (" + Int(x) + ") must be divisible by " +
                          ArgName(b->arg) + " (" + Int(y) + ")");
    }
  }
  for (size_t i = 0; i < schema.num_only_with; ++i) {
    const OnlyWithRule& r = schema.only_with[i];
    const FieldSpec* f = FindField(schema, r.field);
    const FieldSpec* when = FindField(schema, r.when);
    const double v = f->get(object).v[0], w = when->get(object).v[0];
    const bool on = r.value != nullptr ? w == ChoiceIndex(*when, r.value) : w != 0;
    if (on || v == DefaultValue(*f)) continue;
    const std::string condition =
        r.value != nullptr ? std::string(" \"") + r.value + "\"" : std::string(" > 0");
    return ArgError(StatusCode::kInvalidArgument, f->arg,
                    std::string("applies only with ") + ArgName(when->arg) + condition + " (" +
                        ArgName(when->arg) + " is " + ValueText(*when, w) +
                        "): leave it at its default, " + ValueText(*f, DefaultValue(*f)) +
                        ", got " + ValueText(*f, v));
  }
  return Status::Ok();
}

std::string SchemaJson() {
  std::string out = "{\"objects\":[";
  AppendSchemaJson(&out, kMha);
  out += ",";
  AppendSchemaJson(&out, kTransformer);
  out += ",";
  AppendSchemaJson(&out, kOptimizer);
  out += "],\"errorCodes\":[";
  for (int c = 1; c <= static_cast<int>(StatusCode::kLast); ++c) {
    if (c > 1) out += ",";
    AppendJsonString(&out, StatusCodeName(static_cast<StatusCode>(c)));
  }
  out += "],\"maxDim\":" + Int(kMaxDim) + "}";
  return out;
}

}  // namespace headscope
