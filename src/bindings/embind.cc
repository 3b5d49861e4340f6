// Embind glue: the only file that includes emscripten/bind.h. Errors cross as status codes (a C++
// exception would reach JS as a bare number); web/lib/index.js turns them into HeadscopeError.
//
// Data never crosses as JS arrays. The JS wrapper copies inputs once into an arena in wasm memory
// (reserve()), describes them in a call block of 32-bit words (callBlock()), and reads results
// through a result block of the same layout, copying each output once. One call block write and
// one embind call per forward keep the per-call overhead of tutorial-sized shapes small.
#include <emscripten/bind.h>
#include <emscripten/emscripten.h>
#include <emscripten/val.h>
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "headscope/kernels/attention.h"
#include "headscope/kernels/dispatch.h"
#include "headscope/mha.h"
#include "headscope/parallel.h"
#include "headscope/schema.h"
#include "headscope/experiments.h"
#include "headscope/transformer.h"

namespace headscope {
namespace {

// The protocol between this file and web/lib/index.js is defined here, once: index.js reads it
// from protocol() when it loads the module and builds every read and write from it (and refuses
// a module whose protocol it does not know); tests/js/protocol.test.js round-trips every slot.
//
// One tensor in a call or result block: 8 words.
//   [0] byte address in wasm memory   [1] element type (0 none, 1 bool/uint8, 2 float32)
//   [2] rank   [3..6] dims   [7] element count
constexpr int kWordsPerTensor = 8;
enum TensorWord : int { kAddressWord = 0, kTypeWord = 1, kRankWord = 2, kDimsWord = 3, kCountWord = 7 };
enum : uint32_t { kNone = 0, kBool = 1, kFloat = 2, kInt32 = 3 };  // int32: token ids

// Call block: these tensors in this order, then one word of flags, then the window's word
// (ForwardOptions::window: 0 none, else a key count; JS checks it is an integer in [0, 2^24] and
// the core checks it again).
constexpr const char* kCallSlots[] = {"query",    "key",      "value",
                                      "keyPaddingMask", "attnMask", "headGates"};
enum CallSlot : int { kQuery, kKey, kValue, kKeyPaddingMask, kAttnMask, kHeadGates, kCallTensors };
static_assert(sizeof(kCallSlots) / sizeof(kCallSlots[0]) == kCallTensors);
// setParameter() reads its tensor from this slot.
constexpr int kParameterSlot = kQuery;
enum CallFlag : uint32_t {
  kNeedWeights = 1,
  kAverageWeights = 2,
  kIsCausal = 4,
  kHeadStats = 8,
  kAlibi = 16,
};
constexpr int kFlagsWord = kCallTensors * kWordsPerTensor;
constexpr int kWindowWord = kFlagsWord + 1;
constexpr int kCallWords = kWindowWord + 1;
// Result block: what forward() and trace() return, in this order; with the kHeadStats flag the
// three HeadStats tensors follow (forward: slots 2..4, trace: 8..10). A call without it writes
// only its own slots (forward leaves slots 2..4 as they were): the wrapper reads what it asked for.
constexpr const char* kForwardResults[] = {"output", "weights"};
// (rotQ, rotK: rotary position embeddings' turned q and k, empty when rope_dims is 0.)
constexpr const char* kTraceResults[] = {"q",       "k",           "v",      "scores",
                                         "weights", "headOutputs", "concat", "output",
                                         "rotQ",    "rotK"};
constexpr const char* kHeadStatsResults[] = {"entropy", "distance", "maxWeight"};
constexpr int kForwardTensors = 2, kTraceTensors = 10, kHeadStatsTensors = 3;
static_assert(sizeof(kForwardResults) / sizeof(kForwardResults[0]) == kForwardTensors);
static_assert(sizeof(kTraceResults) / sizeof(kTraceResults[0]) == kTraceTensors);
static_assert(sizeof(kHeadStatsResults) / sizeof(kHeadStatsResults[0]) == kHeadStatsTensors);
constexpr int kResultTensors = kTraceTensors + kHeadStatsTensors;
constexpr int kResultWords = kResultTensors * kWordsPerTensor;

// The Transformer's call block: these tensors, named as MultiheadAttention's are (no flags word:
// its options are arguments). setParameter reads a state_dict entry from the parameter slot.
// (corrupted: activationPatching's corrupted tokens, int32 of the tokens' shape.)
constexpr const char* kModelCallSlots[] = {"tokens", "headGates", "targets", "corrupted"};
enum ModelSlot : int { kTokensSlot, kGatesSlot, kTargetsSlot, kCorruptedSlot, kModelCallTensors };
static_assert(sizeof(kModelCallSlots) / sizeof(kModelCallSlots[0]) == kModelCallTensors);
constexpr int kModelParameterSlot = kTokensSlot;
// Its results, in this order; "*name" is a run of tensors of the call's own length (forward's
// hooks in the order asked for, backward's gradients in stateDict() order).
constexpr const char* kModelForwardResults[] = {"logits", "*hooks"};
constexpr const char* kModelGenerateResults[] = {"tokens", "logits"};
constexpr const char* kModelBackwardResults[] = {"*grads", "headGates"};
constexpr const char* kModelParameterResults[] = {"parameter"};

// Appends `"key":` and a value to a JSON object under construction (kept out of line: a long
// chain of std::string operator+ costs several KB of wasm).
[[gnu::noinline]] void JsonKey(std::string* out, const char* key) {
  if (out->back() != '{') *out += ',';
  *out += '"';
  *out += key;
  *out += "\":";
}
[[gnu::noinline]] void JsonNumber(std::string* out, const char* key, int value) {
  JsonKey(out, key);
  *out += std::to_string(value);
}
[[gnu::noinline]] void JsonNames(std::string* out, const char* key, const char* const* names,
                                 size_t n) {
  JsonKey(out, key);
  *out += '[';
  for (size_t i = 0; i < n; ++i) {
    if (i) *out += ',';
    *out += '"';
    *out += names[i];
    *out += '"';
  }
  *out += ']';
}
template <size_t n>
void JsonNames(std::string* out, const char* key, const char* const (&names)[n]) {
  JsonNames(out, key, names, n);
}
// `"key":{"name":value,...}`: an object of numbers.
struct JsonField {
  const char* name;
  int value;
};
[[gnu::noinline]] void JsonNumbers(std::string* out, const char* key,
                                   std::initializer_list<JsonField> fields) {
  JsonKey(out, key);
  *out += '{';
  for (const JsonField& f : fields) JsonNumber(out, f.name, f.value);
  *out += '}';
}

// The layout above as JSON, for index.js.
std::string protocol() {
  std::string out = "{";
  JsonNumber(&out, "version", 1);
  JsonNumber(&out, "wordsPerTensor", kWordsPerTensor);
  JsonNumbers(&out, "tensorWords",
              {{"address", kAddressWord}, {"type", kTypeWord}, {"rank", kRankWord},
               {"dims", kDimsWord}, {"count", kCountWord}});
  JsonNumber(&out, "maxRank", Shape::kMaxRank);
  JsonNumbers(&out, "types", {{"none", kNone}, {"bool", kBool}, {"float", kFloat}, {"int32", kInt32}});
  JsonNames(&out, "callSlots", kCallSlots);
  JsonKey(&out, "parameterSlot");
  out += std::string("\"") + kCallSlots[kParameterSlot] + "\"";
  JsonNumber(&out, "flagsWord", kFlagsWord);
  JsonNumbers(&out, "flags",
              {{"needWeights", kNeedWeights}, {"averageWeights", kAverageWeights},
               {"isCausal", kIsCausal}, {"headStats", kHeadStats}, {"alibi", kAlibi}});
  JsonNumber(&out, "windowWord", kWindowWord);
  JsonNames(&out, "forwardResults", kForwardResults);
  JsonNames(&out, "traceResults", kTraceResults);
  JsonNames(&out, "headStatsResults", kHeadStatsResults);
  JsonKey(&out, "transformer");
  out += '{';
  JsonNames(&out, "callSlots", kModelCallSlots);
  JsonKey(&out, "parameterSlot");
  out += std::string("\"") + kModelCallSlots[kModelParameterSlot] + "\"";
  JsonNames(&out, "forwardResults", kModelForwardResults);
  JsonNames(&out, "generateResults", kModelGenerateResults);
  JsonNames(&out, "backwardResults", kModelBackwardResults);
  JsonNames(&out, "parameterResults", kModelParameterResults);
  out += '}';
  return out + "}";
}

Shape ReadShape(const uint32_t* t) {
  Shape s;
  const int rank = static_cast<int>(t[kRankWord]);
  s.rank = rank > Shape::kMaxRank ? Shape::kMaxRank : rank;
  for (int i = 0; i < s.rank; ++i) s.dims[i] = static_cast<int32_t>(t[kDimsWord + i]);
  return s;
}

TensorView ReadTensor(const uint32_t* t) {
  return {reinterpret_cast<const float*>(static_cast<uintptr_t>(t[kAddressWord])), ReadShape(t),
          t[kCountWord]};
}

MaskView ReadMask(const uint32_t* t) {
  const void* data = reinterpret_cast<const void*>(static_cast<uintptr_t>(t[kAddressWord]));
  switch (t[kTypeWord]) {
    case kBool: return MaskView::Bool(static_cast<const uint8_t*>(data), ReadShape(t), t[kCountWord]);
    case kFloat: return MaskView::Float(static_cast<const float*>(data), ReadShape(t), t[kCountWord]);
    default: return MaskView();
  }
}

void WriteTensor(uint32_t* t, const float* data, const Shape& shape, size_t size, uint32_t type) {
  t[kAddressWord] = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(data));
  t[kTypeWord] = shape.rank > 0 ? type : kNone;
  t[kRankWord] = static_cast<uint32_t>(shape.rank);
  for (int i = 0; i < Shape::kMaxRank; ++i) {
    t[kDimsWord + i] = i < shape.rank ? static_cast<uint32_t>(shape.dims[i]) : 0;
  }
  t[kCountWord] = static_cast<uint32_t>(size);
}

void WriteTensor(uint32_t* t, const float* data, const Shape& shape, size_t size) {
  WriteTensor(t, data, shape, size, kFloat);
}

// A number as JS prints the ones a config size can be given as (3, -1, 2.5, 0.1, NaN, Infinity),
// for the message refusing it. Written out rather than with printf/strtod, which would add about
// 35 KB to the module for this one message: integers below 2^63 exactly, fractions to 9 decimals
// (trailing zeros cut), larger magnitudes as such.
std::string JsNumber(double x) {
  if (x != x) return "NaN";
  if (x == std::numeric_limits<double>::infinity()) return "Infinity";
  if (x == -std::numeric_limits<double>::infinity()) return "-Infinity";
  const double magnitude = x < 0 ? -x : x;
  if (magnitude >= 9.2e18) return x < 0 ? "a negative number beyond -9.2e18" : "beyond 9.2e18";
  const int64_t whole = static_cast<int64_t>(x);  // toward zero
  std::string out = (x < 0 && whole == 0) ? "-0" : std::to_string(whole);
  double fraction = magnitude - static_cast<double>(whole < 0 ? -whole : whole);
  if (fraction > 0 && magnitude < 1e15) {
    int64_t digits = static_cast<int64_t>(std::llround(fraction * 1e9));
    if (digits > 0 && digits < 1000000000) {
      std::string text = std::to_string(digits);
      text.insert(0, 9 - text.size(), '0');
      while (!text.empty() && text.back() == '0') text.pop_back();
      out += "." + text;
    }
  }
  return out;
}

// A config size from JS, any number: C++ owns the rule (an integer in [1, kMaxDim], ValidateConfig),
// so JS checks only that it is a number. Values ValidateConfig cannot see as int64 (fractions,
// NaN, infinities, beyond kMaxDim) are refused here with the same words.
// A config object from JS, read field by field through the schema (schema.h), by the JS names:
// every field present (JS fills the defaults from web/lib/schema.js, the same table), each of the
// type JS checked (a number, a boolean, a choice's string, a pair of numbers; null for a nullable
// size). Sizes and numbers are checked here against their field's range as numbers (1.5 and 2^60
// are refused, never truncated); the rest of the rules are the config's Validate, in Create.
// An object with variants (the optimizer: its `type`) reads its variant's fields only, the
// others left at their defaults.
Status ReadConfig(const ObjectSchema& schema, const emscripten::val& config, void* out) {
  unsigned variant = ~0u;
  for (size_t i = 0; schema.variants != nullptr && i < schema.num_fields; ++i) {
    if (schema.fields[i].choices != schema.variants) continue;
    const std::string type = config[std::string(schema.fields[i].js)].as<std::string>();
    for (int b = 0; schema.variants[b] != nullptr; ++b) {
      if (type == schema.variants[b]) variant = 1u << b;
    }
  }
  for (size_t i = 0; i < schema.num_fields; ++i) {
    const FieldSpec& f = schema.fields[i];
    if (f.variants != 0 && !(f.variants & variant)) continue;
    const emscripten::val v = config[std::string(f.js)];
    FieldValue value;
    switch (f.type) {
      case FieldType::kSize: {
        if (v.isNull() && f.null_means != nullptr) break;  // null: 0 in the struct
        // Checked as a number before it becomes an integer (1.5 and 2^60 never truncate).
        const double x = v.as<double>();
        HEADSCOPE_RETURN_IF_ERROR(CheckFieldNumber(schema, f, x, "number " + JsNumber(x)));
        value.v[0] = x;
        break;
      }
      case FieldType::kNumber:  // (its range is the config's Validate, in Create)
        value.v[0] = v.as<double>();
        break;
      case FieldType::kBool:
        value.v[0] = v.as<bool>() ? 1 : 0;
        break;
      case FieldType::kChoice: {
        const std::string s = v.as<std::string>();
        int index = 0;
        while (f.choices[index] != nullptr && s != f.choices[index]) ++index;
        if (f.choices[index] == nullptr) {
          return ArgError(StatusCode::kInvalidArgument, f.arg,
                          "expected " + Expectation(schema, f) + ", got string \"" +
                              QuoteInput(s) + "\"");
        }
        value.v[0] = index;
        break;
      }
      case FieldType::kPair:
        value.v[0] = v[0].as<double>();
        value.v[1] = v[1].as<double>();
        break;
    }
    f.set(out, value);
  }
  return Status::Ok();
}

// The last call's status as both handles report it: code, argument id and message, kept so JS
// can ask for all three in one call (lastStatus: "CODE\nargument\nmessage").
struct LastStatus {
  StatusCode code = StatusCode::kOk;
  Arg argument = Arg::kNone;
  std::string message;

  int Report(const Status& s) {
    code = s.code();
    argument = s.argument();
    // Success leaves the message empty without copying a string: this runs on every call.
    if (code == StatusCode::kOk) {
      message.clear();
    } else {
      message = s.message();
    }
    return static_cast<int>(code);
  }
  std::string Text() const {
    return std::string(StatusCodeName(code)) + "\n" + ArgPath(argument) + "\n" + message;
  }
};

// The key whose tensor a state_dict key names too (tie_embeddings' unembed.weight), or "".
inline const std::string& TiedTo(const TransformerParamSpec& p) { return p.tied_to; }
template <class Spec>
const std::string& TiedTo(const Spec&) {
  static const std::string kNone;
  return kNone;
}

// '[["name",[d0,d1]],...]': state_dict keys and shapes (ParamSpec, TransformerParamSpec), for JS;
// a key naming an earlier key's tensor (tie_embeddings) has that key third:
// ["unembed.weight",[28,32],"tok_embed.weight"].
template <class Spec>
std::string ParametersJson(const std::vector<Spec>& params) {
  std::string out = "[";
  for (const Spec& p : params) {
    if (out.size() > 1) out += ",";
    out += "[\"" + std::string(p.name) + "\",[";
    for (int i = 0; i < p.shape.rank; ++i) out += (i ? "," : "") + std::to_string(p.shape.dims[i]);
    const std::string& tied = TiedTo(p);
    out += tied.empty() ? "]]" : "],\"" + tied + "\"]";
  }
  return out + "]";
}

// Protocol test (tests/js/protocol.test.js): the call block's first `tensors` tensors, as a handle
// reads them, described in the result block in slot order, so JS can check that both sides agree
// on every slot.
void EchoCall(const uint32_t* call, int tensors, uint32_t* result) {
  for (int i = 0; i < tensors; ++i) {
    const uint32_t* t = call + i * kWordsPerTensor;
    const TensorView v = ReadTensor(t);
    WriteTensor(result + i * kWordsPerTensor, v.data, v.shape, v.size, t[kTypeWord]);
  }
}

// What both handles are (issue 29: one base for the handle, its disposal and the staging load):
// the live model, created from a JS config, and the all-or-nothing load into a staging model; the
// call block of `kCallBlockWords` words and the arena holding a call's inputs; the last call's
// status. JS disposes of a handle by deleting it (embind's delete()), which frees all of these.
// setParameter reads the state_dict entry from slot 0, both protocols' parameter slot:
static_assert(kParameterSlot == 0 && kModelParameterSlot == 0);
template <class Model, int kCallBlockWords>
class ModelHandle {
 public:
  virtual ~ModelHandle() = default;

  // Returns 0 or a StatusCode; the message is in lastStatus(). `config`: createMultiheadAttention's
  // or createTransformer's config by its JS names (MhaConfigSchema: kdim / vdim null mean
  // embed_dim; TransformerConfigSchema); its fields' numbers are checked as numbers here, the
  // rest is the config's Validate, in Create.
  int init(const emscripten::val& config) {
    std::decay_t<decltype(std::declval<const Model&>().config())> c;
    const int code = Report(ReadConfig(schema_, config, &c));
    if (code != 0) return code;
    return Report(Model::Create(c, &model_));
  }

  uintptr_t callBlock() { return reinterpret_cast<uintptr_t>(call_); }
  // A buffer of at least `bytes` bytes in wasm memory for the caller's inputs, reused across
  // calls; 0 if it cannot be allocated. May grow memory: JS re-reads its heap views after it.
  uintptr_t reserve(double bytes) {
    if (!(bytes >= 0) || bytes > static_cast<double>(MaxCallBytes())) return 0;
    if (!arena_.Resize((static_cast<size_t>(bytes) + 3) / 4)) return 0;
    return reinterpret_cast<uintptr_t>(arena_.data());
  }
  // Frees the arena holding the last call's inputs; JS calls it after a refused call (and then
  // reserves again), so that a refused call keeps no copy of its inputs.
  void releaseArena() { arena_.Release(); }

  // loadStateDict is all or nothing. loadBegin() makes a staging model (with the entries the live
  // one has loaded when `keep_loaded`); setParameter() fills it; loadCommit() makes it the live
  // model, loadAbort() drops it. Whatever fails in between (an allocation, a refused entry)
  // leaves the live model exactly as it was.
  int loadBegin(bool keep_loaded) {
    if (model_ == nullptr) return NotInitialized();
    staging_.reset();
    std::unique_ptr<Model> stage;
    int code = Report(Model::Create(model_->config(), &stage));
    if (code != 0) return code;
    if (keep_loaded) {
      code = Report(stage->CopyLoadedFrom(*model_));
      if (code != 0) return code;
    }
    staging_ = std::move(stage);
    return 0;
  }

  // A state_dict entry from the arena (its descriptor in call block slot 0): into the staging
  // model between loadBegin() and loadCommit(), else into the live one.
  int setParameter(const std::string& name) {
    Model* target = staging_ != nullptr ? staging_.get() : model_.get();
    if (target == nullptr) return NotInitialized();
    return Report(target->SetParameter(name, ReadTensor(Slot(0))));
  }

  // strict: every key of the config must be loaded (as torch's load_state_dict(strict=True)).
  // Then the handle's Adopt (which may still refuse), then the staging model is the live one.
  int loadCommit(bool strict) {
    if (staging_ == nullptr) {
      return Report(Status(StatusCode::kInvalidArgument, "loadCommit: no load in progress"));
    }
    int code = strict ? Report(staging_->CheckComplete()) : 0;
    if (code == 0) code = Report(Adopt(staging_.get()));
    if (code != 0) {
      staging_.reset();
      return code;
    }
    model_ = std::move(staging_);
    return Report(Status::Ok());
  }

  void loadAbort() { staging_.reset(); }

  // All of the last call's status in one call: "CODE\nargument\nmessage", the argument as the JS
  // API names it (ArgPath; empty when the failure is not one argument's).
  std::string lastStatus() const { return status_.Text(); }

 protected:
  // `schema`: the config's, which init() reads; `not_created`: the message of a call before it.
  ModelHandle(const ObjectSchema& schema, const char* not_created)
      : schema_(schema), not_created_(not_created) {}

  // What the handle's model does differently: loadCommit's last step, before the staging model
  // replaces the live one, is Adopt (an error refuses the load: the live model stays).
  virtual Status Adopt(Model* staging) = 0;

  int Report(const Status& s) { return status_.Report(s); }
  int NotInitialized() { return Report(Status(StatusCode::kInvalidArgument, not_created_)); }
  const uint32_t* Slot(int i) const { return call_ + i * kWordsPerTensor; }

  const ObjectSchema& schema_;
  const char* not_created_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Model> staging_;  // between loadBegin() and loadCommit()
  AlignedBuffer arena_;
  uint32_t call_[kCallBlockWords] = {};
  LastStatus status_;
};

// torch.nn.MultiheadAttention for JS (createMultiheadAttention).
class Handle : public ModelHandle<MultiheadAttention, kCallWords> {
 public:
  Handle() : ModelHandle(MhaConfigSchema(), "the module was not created") {}

  // This object's address, for headscope_forward below.
  uintptr_t address() { return reinterpret_cast<uintptr_t>(this); }
  uintptr_t resultBlock() { return reinterpret_cast<uintptr_t>(result_); }

  int forward() {
    if (model_ == nullptr) return NotInitialized();
    ForwardOptions o = Options();
    const int code =
        Report(model_->Forward(ReadTensor(Slot(kQuery)), ReadTensor(Slot(kKey)),
                               ReadTensor(Slot(kValue)), o, &result_store_));
    // forward() returns two tensors, and three more with head statistics: only their slots
    // are written (and read by the wrapper).
    // (A constant-size clear: inline stores, not a call to memset, on every forward.)
    std::memset(result_, 0, kForwardTensors * kWordsPerTensor * sizeof(uint32_t));
    if (o.head_stats) {
      std::memset(result_ + kForwardTensors * kWordsPerTensor, 0,
                  kHeadStatsTensors * kWordsPerTensor * sizeof(uint32_t));
    }
    if (code == 0) {
      WriteTensor(result_, result_store_.output.data(), result_store_.output_shape,
                  result_store_.output.size());
      if (result_store_.has_weights()) {
        WriteTensor(result_ + kWordsPerTensor, result_store_.weights.data(),
                    result_store_.weights_shape, result_store_.weights.size());
      }
      WriteHeadStats(result_store_.head_stats, result_ + kForwardTensors * kWordsPerTensor);
    }
    return code;
  }

  int trace() {
    if (model_ == nullptr) return NotInitialized();
    const int code =
        Report(model_->Trace(ReadTensor(Slot(kQuery)), ReadTensor(Slot(kKey)),
                             ReadTensor(Slot(kValue)), Options(), &trace_));
    std::memset(result_, 0, sizeof(result_));
    if (code == 0) {
      TraceTensor* stages[kTraceTensors] = {&trace_.q,       &trace_.k,
                                             &trace_.v,       &trace_.scores,
                                             &trace_.weights, &trace_.head_outputs,
                                             &trace_.concat,  &trace_.output,
                                             &trace_.rot_q,   &trace_.rot_k};
      for (int i = 0; i < kTraceTensors; ++i) {
        WriteTensor(result_ + i * kWordsPerTensor, stages[i]->data.data(), stages[i]->shape,
                    stages[i]->data.size());
      }
      WriteHeadStats(trace_.head_stats, result_ + kTraceTensors * kWordsPerTensor);
    }
    return code;
  }

  // The trace's buffers, once JS has copied them out: a trace holds every intermediate of a call
  // (L x S per head twice), which a module must not keep between calls.
  void releaseTrace() {
    trace_ = AttentionTrace();
    std::memset(result_, 0, sizeof(result_));
  }

  // Protocol test: the call block's tensors in the result block (EchoCall), and the flags word.
  uint32_t echoCall() {
    std::memset(result_, 0, sizeof(result_));
    EchoCall(call_, kCallTensors, result_);
    return call_[kFlagsWord];
  }
  // Protocol test: the options as a call reads them from the flags and window words, as
  // "needWeights averageWeights isCausal headStats alibi window" (0/1 each, then the window).
  std::string echoOptions() const {
    const ForwardOptions o = Options();
    std::string out;
    for (bool b : {o.need_weights, o.average_attn_weights, o.is_causal, o.head_stats, o.alibi}) {
      out += b ? "1 " : "0 ";
    }
    return out + std::to_string(o.window);
  }

  // Frees what the last calls kept (workspace, arena, results, trace); they regrow on demand.
  void trim() {
    if (model_ != nullptr) model_->ReleaseWorkspace();
    arena_.Release();
    result_store_ = ForwardResult();
    trace_ = AttentionTrace();
  }

  int checkParameters() {
    if (model_ == nullptr) return NotInitialized();
    return Report(model_->CheckComplete());
  }

  std::string lastError() const { return status_.message; }
  std::string lastErrorCode() const { return StatusCodeName(status_.code); }

  // '[["in_proj_weight",[12,4]],...]': the state_dict keys and shapes of this config, in
  // PyTorch's order, so the wrapper can check a whole state_dict before loading any of it.
  std::string expectedParameters() const {
    return model_ == nullptr ? "[]" : ParametersJson(ExpectedParams(model_->config()));
  }

 private:
  // A complete module packs its weights here, so an allocation failure refuses the load (the
  // live module stays) instead of surfacing at the next forward.
  Status Adopt(MultiheadAttention* staging) override {
    return staging->weights().complete() ? staging->Prepare() : Status::Ok();
  }
  // The three HeadStats tensors into consecutive result slots (left empty when not asked for).
  static void WriteHeadStats(const HeadStats& s, uint32_t* slots) {
    if (!s.present()) return;
    const AlignedBuffer* parts[kHeadStatsTensors] = {&s.entropy, &s.distance, &s.max_weight};
    for (int i = 0; i < kHeadStatsTensors; ++i) {
      WriteTensor(slots + i * kWordsPerTensor, parts[i]->data(), s.shape, parts[i]->size());
    }
  }
  ForwardOptions Options() const {
    ForwardOptions o;
    o.key_padding_mask = ReadMask(Slot(kKeyPaddingMask));
    o.attn_mask = ReadMask(Slot(kAttnMask));
    // An empty slot reads as an empty view: no gates, no multiply.
    if (Slot(kHeadGates)[kTypeWord] != kNone) o.head_gates = ReadTensor(Slot(kHeadGates));
    const uint32_t flags = call_[kFlagsWord];
    o.need_weights = flags & kNeedWeights;
    o.average_attn_weights = flags & kAverageWeights;
    o.is_causal = flags & kIsCausal;
    o.head_stats = flags & kHeadStats;
    o.alibi = flags & kAlibi;
    o.window = call_[kWindowWord];
    return o;
  }

  ForwardResult result_store_;
  AttentionTrace trace_;
  uint32_t result_[kResultWords] = {};
};

// The Transformer for JS (createTransformer). The same tensor descriptors as Handle's: a call
// block of two slots (0: a state_dict entry or the tokens, int32 (B, T); 1: head gates
// (n_layers, n_heads)), data in an arena the handle owns; results in a result block that grows
// with the number of hooks (slot 0 the logits, then one slot per hook asked for).
class TransformerHandle : public ModelHandle<Transformer, kModelCallTensors * kWordsPerTensor> {
 public:
  TransformerHandle() : ModelHandle(TransformerConfigSchema(), "the model was not created") {}

  // '[["tok_embed.weight",[28,32]],...]', in the reference module's order; a key naming an
  // earlier key's tensor (tie_embeddings) has that key third: ["unembed.weight",[28,32],
  // "tok_embed.weight"].
  std::string expectedParameters() const {
    return model_ == nullptr ? "[]" : ParametersJson(TransformerParams(model_->config()));
  }
  // '["hook_embed",...]': the hook names of this config.
  std::string hookNames() const {
    if (model_ == nullptr) return "[]";
    std::string out = "[";
    for (const std::string& h : TransformerHookNames(model_->config())) {
      out += (out.size() > 1 ? ",\"" : "\"") + h + "\"";
    }
    return out + "]";
  }

  uintptr_t resultBlock() { return reinterpret_cast<uintptr_t>(result_.data()); }

  int initFromSeed(double seed) {
    if (model_ == nullptr) return NotInitialized();
    if (!(seed >= 0 && seed <= 9007199254740991.0 && seed == std::floor(seed))) {
      return Report(ArgError(StatusCode::kInvalidArgument, Arg::kSeed,
                             "expected an integer in [0, 2^53 - 1], got number " + JsNumber(seed)));
    }
    return Report(model_->InitializeFromSeed(static_cast<uint64_t>(seed)));
  }

  // Protocol test: the call block's tensors in the result block (EchoCall).
  void echoCall() {
    GrowResult(kModelCallTensors);
    EchoCall(call_, kModelCallTensors, result_.data());
  }

  // One entry into result slot 0 (a view of the model's copy), for stateDict().
  int parameter(const std::string& name) {
    if (model_ == nullptr) return NotInitialized();
    TensorView v;
    const int code = Report(model_->GetParameter(name, &v));
    if (code == 0) {
      if (!GrowResult(1)) return OutOfMemory();
      WriteTensor(result_.data(), v.data, v.shape, v.size);
    }
    return code;
  }

  // Tokens in slot 0 (int32 (B, T)), optional gates in slot 1, hooks as names joined by '\n'.
  int forward(const std::string& hooks) {
    if (model_ == nullptr) return NotInitialized();
    TokenView tokens;
    if (!CallTokens(&tokens)) {
      return Report(ArgError(StatusCode::kInvalidArgument, Arg::kTokens, "expected int32 (B, T)"));
    }
    // n names joined by '\n' are n names, empty ones included (the core refuses those as
    // unknown hooks): "" alone is none.
    options_.hooks.clear();
    for (size_t start = 0; !hooks.empty();) {
      size_t end = hooks.find('\n', start);
      if (end == std::string::npos) end = hooks.size();
      options_.hooks.push_back(hooks.substr(start, end - start));
      if (end == hooks.size()) break;
      start = end + 1;
    }
    options_.head_gates = Gates();
    const int code = Report(model_->Forward(tokens, options_, &result_store_));
    if (code != 0) return code;
    if (!GrowResult(1 + result_store_.hooks.size())) return OutOfMemory();
    WriteTensor(result_.data(), result_store_.logits.data(), result_store_.logits_shape,
                result_store_.logits.size());
    for (size_t i = 0; i < result_store_.hooks.size(); ++i) {
      const TraceTensor& h = result_store_.hooks[i].second;
      WriteTensor(result_.data() + (i + 1) * kWordsPerTensor, h.data.data(), h.shape,
                  h.data.size());
    }
    return code;
  }
  // Prompt in slot 0 (int32 (B, T)), optional gates in slot 1; the options as numbers (the core
  // checks their ranges). Result slot 0: the tokens (int32 (B, T + n)); slot 1 the step logits
  // (B, n, V) when keep_logits.
  int generate(double max_new_tokens, double temperature, double top_k, double top_p,
               double seed, bool keep_logits) {
    TokenView prompt;
    GenerateOptions o;
    int code = GenerateArguments(max_new_tokens, temperature, top_k, top_p, seed, keep_logits,
                                 &prompt, &o);
    if (code != 0) return code;
    generation_replaced_ = false;
    code = Report(model_->Generate(prompt, o, &generated_));
    if (code != 0) return code;
    return WriteGenerated();
  }

  // Generation in chunks (Transformer::GenerateBegin / GenerateContinue), for the worker, which
  // serves other requests between them: generateBegin takes generate()'s arguments and runs the
  // prompt; generateContinue(steps) draws up to `steps` more tokens per sequence, and once they
  // are all there (generateDone()) writes generate()'s result slots. The same bits as generate().
  int generateBegin(double max_new_tokens, double temperature, double top_k, double top_p,
                    double seed, bool keep_logits) {
    TokenView prompt;
    GenerateOptions o;
    const int code = GenerateArguments(max_new_tokens, temperature, top_k, top_p, seed,
                                       keep_logits, &prompt, &o);
    if (code != 0) return code;
    generation_replaced_ = false;
    generation_done_ = false;
    return Report(model_->GenerateBegin(prompt, o, &generated_));
  }
  int generateContinue(double steps) {
    if (model_ == nullptr) return NotInitialized();
    if (!model_->generating() && generation_replaced_) {
      // loadStateDict swapped in another model while this one was generating.
      generation_replaced_ = false;
      generated_ = GenerateResult();
      return Report(Status(StatusCode::kCancelled,
                           "generate: the model's weights were replaced (loadStateDict) while it "
                           "was generating, so it was ended; generate again"));
    }
    if (!(steps >= 0 && steps <= 9007199254740991.0 && steps == std::floor(steps))) {
      return Report(Status(StatusCode::kInvalidArgument,
                           "generate: expected a number of steps >= 0, got " + JsNumber(steps)));
    }
    bool done = false;
    const int code = Report(model_->GenerateContinue(static_cast<int64_t>(steps), &generated_, &done));
    if (code != 0) return code;
    generation_done_ = done;
    return done ? WriteGenerated() : 0;
  }
  bool generateDone() const { return generation_done_; }
  // Ends the generation in progress (freeing its caches) and drops its result.
  void generateCancel() {
    if (model_ != nullptr) model_->GenerateCancel();
    generation_replaced_ = generation_done_ = false;
    generated_ = GenerateResult();
  }
 private:
  // generate()'s and generateBegin()'s arguments: the prompt from slot 0, the options from the
  // numbers and slot 1.
  int GenerateArguments(double max_new_tokens, double temperature, double top_k, double top_p,
                        double seed, bool keep_logits, TokenView* prompt, GenerateOptions* out) {
    if (model_ == nullptr) return NotInitialized();
    if (!CallTokens(prompt)) {
      return Report(ArgError(StatusCode::kInvalidArgument, Arg::kPrompt, "expected int32 (B, T)"));
    }
    // Integers crossed as numbers: refused here if they are not integers at all (their ranges
    // are Generate's); beyond 2^53 a double is no exact integer.
    // `range`: what the message says is allowed (the seed's whole range; the others' ranges are
    // the core's checks, which need an integer first).
    const auto integer = [&](double v, Arg arg, int64_t* out, const char* range) {
      if (!(v == std::floor(v)) || !(v >= -9007199254740991.0 && v <= 9007199254740991.0)) {
        return Report(ArgError(StatusCode::kInvalidArgument, arg,
                               std::string("expected an integer") + range + ", got number " +
                                   JsNumber(v)));
      }
      *out = static_cast<int64_t>(v);
      return 0;
    };
    GenerateOptions& o = *out;
    int64_t seed_int = 0;
    int code = integer(max_new_tokens, Arg::kMaxNewTokens, &o.max_new_tokens, "");
    if (code == 0) code = integer(top_k, Arg::kTopK, &o.top_k, " >= 0");
    if (code == 0) code = integer(seed, Arg::kSampleSeed, &seed_int, " in [0, 2^53 - 1]");
    if (code != 0) return code;
    if (seed_int < 0) {
      return Report(ArgError(StatusCode::kInvalidArgument, Arg::kSampleSeed,
                             "expected an integer in [0, 2^53 - 1], got number " + JsNumber(seed)));
    }
    o.seed = static_cast<uint64_t>(seed_int);
    o.temperature = temperature;
    o.top_p = top_p;
    o.keep_logits = keep_logits;
    o.head_gates = Gates();
    return 0;
  }
  // The finished generation's tokens and logits into result slots 0 and 1.
  int WriteGenerated() {
    if (!GrowResult(2)) return OutOfMemory();
    WriteTensor(result_.data(), reinterpret_cast<const float*>(generated_.tokens.data()),
                generated_.tokens_shape, generated_.tokens.size(), kInt32);
    WriteTensor(result_.data() + kWordsPerTensor, generated_.logits.data(),
                generated_.logits_shape, generated_.logits.size());
    return 0;
  }

 public:

  // Training. Tokens in slot 0 (int32 (B, T)), optional gates in slot 1, targets in slot 2
  // (int32, the tokens' shape). Result slots 0 .. P-1: the gradients (views of the model's
  // buffers) of the P parameters (named_parameters: TransformerParams but a tied key, whose
  // tensor is an earlier key's), in that order; slot P: the gate gradients (nLayers, nHeads)
  // when asked.
  int backward(bool gate_grads) {
    if (model_ == nullptr) return NotInitialized();
    TokenView tokens;
    const int32_t* targets = nullptr;
    int code = TrainingInputs(&tokens, &targets);
    if (code != 0) return code;
    BackwardOptions o;
    o.head_gate_grads = gate_grads;
    o.head_gates = Gates();
    BackwardResult r;
    code = Report(model_->Backward(tokens, targets, o, &r));
    if (code != 0) return code;
    last_loss_ = r.loss;
    std::vector<TransformerParamSpec> params = TransformerParams(model_->config());
    params.erase(std::remove_if(params.begin(), params.end(),
                                [](const TransformerParamSpec& p) { return !p.tied_to.empty(); }),
                 params.end());
    if (!GrowResult(params.size() + 1)) return OutOfMemory();
    for (size_t i = 0; i < params.size(); ++i) {
      TensorView v;
      code = Report(model_->Gradient(params[i].name, &v));
      if (code != 0) return code;
      WriteTensor(result_.data() + i * kWordsPerTensor, v.data, v.shape, v.size);
    }
    const TransformerConfig& c = model_->config();
    gate_grads_.assign(r.head_gate_grads.begin(), r.head_gate_grads.end());
    WriteTensor(result_.data() + params.size() * kWordsPerTensor, gate_grads_.data(),
                gate_grads ? Shape{c.n_layers, c.n_heads} : Shape{}, gate_grads_.size());
    return 0;
  }
  // Tokens in slot 0, targets in slot 2: Backward's and TrainStep's checks of a batch, nothing
  // computed.
  int checkBatch() {
    if (model_ == nullptr) return NotInitialized();
    TokenView tokens;
    const int32_t* targets = nullptr;
    const int code = TrainingInputs(&tokens, &targets);
    if (code != 0) return code;
    return Report(model_->CheckBatch(tokens, targets));
  }
  // kind: 0 AdamW, 1 SGD (JS maps the names; any other number is the core's error).
  // `options`: setOptimizer's options by their JS names (OptimizerSchema), defaults filled in;
  // fields of the other type are not read (SGD has no betas, eps or weight decay).
  int setOptimizer(const emscripten::val& options) {
    if (model_ == nullptr) return NotInitialized();
    OptimizerConfig o;
    const int code = Report(ReadConfig(OptimizerSchema(), options, &o));
    if (code != 0) return code;
    return Report(model_->SetOptimizer(o));
  }
  // Tokens in slot 0, targets in slot 2 (slot 1 empty). The step's numbers: lastLoss,
  // lastGradNorm, lastClipped, lastStepped, lastRefused.
  int trainStep() {
    if (model_ == nullptr) return NotInitialized();
    TokenView tokens;
    const int32_t* targets = nullptr;
    int code = TrainingInputs(&tokens, &targets);
    if (code != 0) return code;
    code = Report(model_->TrainStep(tokens, targets, &step_));
    if (code == 0) last_loss_ = step_.loss;
    return code;
  }
  // Bytes a generation's KV caches hold for `config` (createTransformer's, by its JS names):
  // `batch` sequences of `positions` positions each (KvCacheBytesFor); needs no model. 0 or a
  // StatusCode; the bytes in lastKvCacheBytes().
  int kvCacheBytesFor(const emscripten::val& config, double batch, double positions) {
    kv_cache_bytes_ = 0;
    TransformerConfig c;
    const int code = Report(ReadConfig(TransformerConfigSchema(), config, &c));
    if (code != 0) return code;
    // Integers in [1, 2^24] here; anything else becomes 0, which the core refuses by its range.
    const auto size = [](double v) {
      return v >= 1 && v <= 16777216.0 && v == std::floor(v) ? static_cast<int64_t>(v) : int64_t{0};
    };
    uint64_t bytes = 0;
    const int checked = Report(KvCacheBytesFor(c, size(batch), size(positions), &bytes));
    if (checked == 0) kv_cache_bytes_ = static_cast<double>(bytes);
    return checked;
  }
  double lastKvCacheBytes() const { return kv_cache_bytes_; }
  // Bytes the KV caches of the generation in progress (or the last one) hold
  // (Transformer::kv_cache_bytes()); 0 without a model.
  double kvCacheBytes() const {
    return model_ == nullptr ? 0 : static_cast<double>(model_->kv_cache_bytes());
  }
  double lastLoss() const { return last_loss_; }
  double lastGradNorm() const { return step_.grad_norm; }
  bool lastClipped() const { return step_.clipped; }
  bool lastStepped() const { return step_.stepped; }
  std::string lastRefused() const { return step_.refused; }
  double optimizerSteps() const {
    return model_ != nullptr && model_->optimizer() != nullptr
               ? static_cast<double>(model_->optimizer()->steps())
               : 0;
  }

  // ---- The causal experiments (experiments.h) ----
  // Tokens in slot 0, optional gates in slot 1. Result slot 0: the lens' logits (L + 1, B, T, V).
  int logitLens() {
    TokenView tokens;
    const int code = ExperimentTokens(&tokens);
    if (code != 0) return code;
    return WriteExperiment(LogitLens(model_.get(), tokens, Gates(), &experiments_.lens),
                           {{&experiments_.lens.logits, experiments_.lens.shape}});
  }
  // As logitLens. Result slot 0: the rollout (L, B, T, T).
  int attentionRollout() {
    TokenView tokens;
    const int code = ExperimentTokens(&tokens);
    if (code != 0) return code;
    return WriteExperiment(AttentionRollout(model_.get(), tokens, Gates(), &experiments_.rollout),
                           {{&experiments_.rollout.rollout, experiments_.rollout.shape}});
  }
  // As logitLens, and the score's indices as numbers (JS checks they are integers; here anything
  // else becomes -1, which the core refuses by its range). Result slots 0..3: terms (S, d_head),
  // dot, bias, score (S).
  int scoreContributions(double layer, double head, double batch, double position) {
    TokenView tokens;
    const int code = ExperimentTokens(&tokens);
    if (code != 0) return code;
    const auto index = [](double v) {
      return v >= 0 && v <= 16777216.0 && v == std::floor(v) ? static_cast<int64_t>(v) : int64_t{-1};
    };
    ScoreContributionsResult& r = experiments_.score;
    return WriteExperiment(
        ScoreContributions(model_.get(), tokens, Gates(),
                           {index(layer), index(head), index(batch), index(position)}, &r),
        {{&r.terms, r.terms_shape}, {&r.dot, r.row_shape}, {&r.bias, r.row_shape},
         {&r.score, r.row_shape}});
  }
  // Clean tokens in slot 0, gates in slot 1, targets in slot 2, corrupted tokens in slot 3; site
  // 0 heads, 1 positions. Result slots 0, 1: the loss and logit grids; the clean and corrupted
  // runs' metrics in patchingBaseline(0..3) (clean loss, clean logit, corrupted loss, logit).
  int activationPatching(int site) {
    TokenView clean;
    const int32_t* targets = nullptr;
    int code = ExperimentTokens(&clean);
    if (code == 0) code = TrainingInputs(&clean, &targets);
    if (code != 0) return code;
    PatchingOptions o;
    o.targets = targets;
    o.head_gates = Gates();
    if (site != 0 && site != 1) {
      return Report(ArgError(StatusCode::kInvalidArgument, Arg::kSite,
                             "expected 'heads' or 'positions'"));
    }
    o.site = site == 0 ? PatchingSite::kHeads : PatchingSite::kPositions;
    const uint32_t* t = Slot(kCorruptedSlot);
    if (t[kTypeWord] == kInt32 && t[kRankWord] == 2) {
      o.corrupted = {reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(t[kAddressWord])),
                     static_cast<int64_t>(t[kDimsWord]), static_cast<int64_t>(t[kDimsWord + 1])};
    }
    PatchingResult& r = experiments_.patching;
    return WriteExperiment(ActivationPatching(model_.get(), clean, o, &r),
                           {{&r.loss, r.shape}, {&r.logit, r.shape}});
  }
  double patchingBaseline(int i) const {
    const PatchingResult& r = experiments_.patching;
    return i == 0 ? r.clean_loss : i == 1 ? r.clean_logit : i == 2 ? r.corrupted_loss : r.corrupted_logit;
  }

  // Frees what the last call kept (hooks, arena, generation, the model's workspace); they
  // regrow on demand. A generation in progress ends (it writes into generated_).
  void trim() {
    generateCancel();
    arena_.Release();
    result_store_ = TransformerResult();
    experiments_ = Experiments();
    if (model_ != nullptr) model_->ReleaseWorkspace();
  }

 private:
  // The optimizer (its moments and step count) stays with the model, as torch's optimizer state
  // survives model.load_state_dict. A generation in progress ends with the old model (its caches
  // hold the old weights' keys): generateContinue says so.
  Status Adopt(Transformer* staging) override {
    staging->TakeOptimizerFrom(model_.get());
    generation_replaced_ = generation_replaced_ || model_->generating();
    return Status::Ok();
  }
  // The head gates of call slot 1: an empty view when the slot is empty (no gates, no multiply).
  TensorView Gates() const {
    const uint32_t* g = Slot(kGatesSlot);
    return g[kTypeWord] != kNone ? ReadTensor(g) : TensorView();
  }
  // Call slot 0 as int32 token ids (B, T); false if it holds something else.
  bool CallTokens(TokenView* out) const {
    const uint32_t* t = Slot(kTokensSlot);
    if (t[kTypeWord] != kInt32 || t[kRankWord] != 2) return false;
    *out = {reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(t[kAddressWord])),
            static_cast<int64_t>(t[kDimsWord]), static_cast<int64_t>(t[kDimsWord + 1])};
    return true;
  }
  // Tokens (slot 0) and targets (slot 2, int32 of the tokens' shape) for backward / trainStep.
  int TrainingInputs(TokenView* tokens, const int32_t** targets) {
    if (!CallTokens(tokens)) {
      return Report(ArgError(StatusCode::kInvalidArgument, Arg::kTokens, "expected int32 (B, T)"));
    }
    const uint32_t* t = Slot(kTargetsSlot);
    if (t[kTypeWord] != kInt32 || t[kRankWord] != 2 ||
        t[kDimsWord] != static_cast<uint32_t>(tokens->batch) ||
        t[kDimsWord + 1] != static_cast<uint32_t>(tokens->length)) {
      return Report(ArgError(StatusCode::kShapeMismatch, Arg::kTargets,
                             "expected integers of the tokens' shape (" +
                                 std::to_string(tokens->batch) + ", " +
                                 std::to_string(tokens->length) + ")"));
    }
    *targets = reinterpret_cast<const int32_t*>(static_cast<uintptr_t>(t[kAddressWord]));
    return 0;
  }
  int ExperimentTokens(TokenView* tokens) {
    if (model_ == nullptr) return NotInitialized();
    if (!CallTokens(tokens)) {
      return Report(ArgError(StatusCode::kInvalidArgument, Arg::kTokens, "expected int32 (B, T)"));
    }
    return 0;
  }
  // An experiment's status; when it succeeded, its tensors into result slots 0, 1, ...
  struct Out {
    const AlignedBuffer* data;
    Shape shape;
  };
  int WriteExperiment(const Status& status, std::initializer_list<Out> outs) {
    const int code = Report(status);
    if (code != 0) return code;
    if (!GrowResult(outs.size())) return OutOfMemory();
    size_t i = 0;
    for (const Out& o : outs) {
      WriteTensor(result_.data() + (i++) * kWordsPerTensor, o.data->data(), o.shape, o.data->size());
    }
    return 0;
  }
  bool GrowResult(size_t tensors) {
    if (result_.size() >= tensors * kWordsPerTensor) return true;
    result_.resize(tensors * kWordsPerTensor);  // (a few words per hook: allocation cannot fail
    return true;                                //  short of an exhausted heap, which aborts)
  }
  int OutOfMemory() {
    return Report(Status(StatusCode::kResourceExhausted, "result: out of memory"));
  }

  TransformerOptions options_;
  TransformerResult result_store_;
  GenerateResult generated_;
  bool generation_done_ = false;      // generateContinue drew the last tokens
  bool generation_replaced_ = false;  // loadCommit replaced a model that was generating
  TrainStepResult step_;
  double last_loss_ = 0;
  double kv_cache_bytes_ = 0;  // the last kvCacheBytesFor
  std::vector<float> gate_grads_;
  // The last causal experiment's results (the result slots point into them).
  struct Experiments {
    LogitLensResult lens;
    RolloutResult rollout;
    ScoreContributionsResult score;
    PatchingResult patching;
  } experiments_;
  std::vector<uint32_t> result_ = std::vector<uint32_t>(kModelCallTensors * kWordsPerTensor);
};

// Bytes of the wasm heap in use by malloc: lets tests show that dispose() returns memory.
double heapInUse() { return static_cast<double>(mallinfo().uordblks); }
std::string kernelTarget() { return KernelTargetName(); }
// "relaxed" or "simd128" (kernels/dispatch.h WasmSimdBuild): hs.simd.
std::string simdBuild() { return WasmSimdBuild(); }
double maxCallBytes() { return static_cast<double>(MaxCallBytes()); }
void setMaxCallBytes(double bytes) { SetMaxCallBytes(static_cast<size_t>(bytes)); }
// ALiBi's slope of head h (0-based) of `heads` (kernels/attention.h AlibiSlope, the float every
// layer's bias uses): hs.alibiSlopes. JS checks that heads is an integer in [1, 2^24].
double alibiSlope(double h, double heads) {
  return AlibiSlope(static_cast<size_t>(h), static_cast<size_t>(heads));
}
// Threads of the multi-threaded module (HEADSCOPE_THREADS); the single-threaded module stays at 1.
int threadCount() { return ThreadCount(); }
void setThreadCount(int threads) { SetThreadCount(threads); }

// Registers a handle's base class (ModelHandle<...>) under `name` with its methods; each handle
// (class_<H, base<...>>) has them as its own.
template <class Base>
void BindModelHandle(const char* name) {
  emscripten::class_<Base>(name)
      .function("init", &Base::init)
      .function("callBlock", &Base::callBlock)
      .function("reserve", &Base::reserve)
      .function("releaseArena", &Base::releaseArena)
      .function("loadBegin", &Base::loadBegin)
      .function("setParameter", &Base::setParameter)
      .function("loadCommit", &Base::loadCommit)
      .function("loadAbort", &Base::loadAbort)
      .function("lastStatus", &Base::lastStatus);
}

}  // namespace
}  // namespace headscope

// Handle::forward as a plain WebAssembly export. An embind method call checks its `this` and
// arguments in generated JS (~70 ns); a tutorial-sized forward takes ~1 us in all, so the
// wrapper's hot path calls this directly with the address from Handle::address().
extern "C" EMSCRIPTEN_KEEPALIVE int headscope_forward(uintptr_t handle) {
  return reinterpret_cast<headscope::Handle*>(handle)->forward();
}

EMSCRIPTEN_BINDINGS(headscope) {
  using headscope::Handle;
  // This module serves the JS API: every message names arguments as that API does.
  headscope::SetNaming(headscope::Naming::kJs);
  using headscope::TransformerHandle;
  headscope::BindModelHandle<TransformerHandle::ModelHandle>("TransformerModelHandle");
  emscripten::class_<TransformerHandle, emscripten::base<TransformerHandle::ModelHandle>>(
      "TransformerHandle")
      .constructor<>()
      .function("expectedParameters", &TransformerHandle::expectedParameters)
      .function("resultBlock", &TransformerHandle::resultBlock)
      .function("echoCall", &TransformerHandle::echoCall)
      .function("trim", &TransformerHandle::trim)
      .function("hookNames", &TransformerHandle::hookNames)
      .function("initFromSeed", &TransformerHandle::initFromSeed)
      .function("parameter", &TransformerHandle::parameter)
      .function("forward", &TransformerHandle::forward)
      .function("generate", &TransformerHandle::generate)
      .function("generateBegin", &TransformerHandle::generateBegin)
      .function("generateContinue", &TransformerHandle::generateContinue)
      .function("generateDone", &TransformerHandle::generateDone)
      .function("generateCancel", &TransformerHandle::generateCancel)
      .function("backward", &TransformerHandle::backward)
      .function("setOptimizer", &TransformerHandle::setOptimizer)
      .function("trainStep", &TransformerHandle::trainStep)
      .function("checkBatch", &TransformerHandle::checkBatch)
      .function("lastLoss", &TransformerHandle::lastLoss)
      .function("lastGradNorm", &TransformerHandle::lastGradNorm)
      .function("lastClipped", &TransformerHandle::lastClipped)
      .function("lastStepped", &TransformerHandle::lastStepped)
      .function("lastRefused", &TransformerHandle::lastRefused)
      .function("optimizerSteps", &TransformerHandle::optimizerSteps)
      .function("kvCacheBytesFor", &TransformerHandle::kvCacheBytesFor)
      .function("lastKvCacheBytes", &TransformerHandle::lastKvCacheBytes)
      .function("kvCacheBytes", &TransformerHandle::kvCacheBytes)
      .function("logitLens", &TransformerHandle::logitLens)
      .function("attentionRollout", &TransformerHandle::attentionRollout)
      .function("scoreContributions", &TransformerHandle::scoreContributions)
      .function("activationPatching", &TransformerHandle::activationPatching)
      .function("patchingBaseline", &TransformerHandle::patchingBaseline);
  headscope::BindModelHandle<Handle::ModelHandle>("MultiheadAttentionModelHandle");
  emscripten::class_<Handle, emscripten::base<Handle::ModelHandle>>("Handle")
      .constructor<>()
      .function("expectedParameters", &Handle::expectedParameters)
      .function("resultBlock", &Handle::resultBlock)
      .function("echoCall", &Handle::echoCall)
      .function("echoOptions", &Handle::echoOptions)
      .function("trim", &Handle::trim)
      .function("address", &Handle::address)
      .function("forward", &Handle::forward)
      .function("trace", &Handle::trace)
      .function("releaseTrace", &Handle::releaseTrace)
      .function("checkParameters", &Handle::checkParameters)
      .function("lastError", &Handle::lastError)
      .function("lastErrorCode", &Handle::lastErrorCode);
  emscripten::function("protocol", &headscope::protocol);
  // The configs' schema (schema.h) as JSON: tools/gen-schema.mjs writes web/lib/schema.js from
  // it, and tests/js/schema.test.js checks that file against it.
  emscripten::function("schema", &headscope::SchemaJson);
  emscripten::function("heapInUse", &headscope::heapInUse);
  emscripten::function("kernelTarget", &headscope::kernelTarget);
  emscripten::function("simdBuild", &headscope::simdBuild);
  emscripten::function("maxCallBytes", &headscope::maxCallBytes);
  emscripten::function("setMaxCallBytes", &headscope::setMaxCallBytes);
  emscripten::function("alibiSlope", &headscope::alibiSlope);
  emscripten::function("threadCount", &headscope::threadCount);
  emscripten::function("setThreadCount", &headscope::setThreadCount);
}
