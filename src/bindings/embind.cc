// Embind glue: the only file that includes emscripten/bind.h. Errors cross as status codes (a C++
// exception would reach JS as a bare number); web/lib/index.js turns them into HeadscopeError.
//
// Data never crosses as JS arrays. The JS wrapper copies inputs once into an arena in wasm memory
// (reserve()), describes them in a call block of 32-bit words (callBlock()), and reads results
// through a result block of the same layout, copying each output once. One call block write and
// one embind call per forward keep the per-call overhead of tutorial-sized shapes small.
#include <emscripten/bind.h>
#include <emscripten/emscripten.h>
#include <malloc.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "headscope/kernels/dispatch.h"
#include "headscope/mha.h"
#include "headscope/parallel.h"

namespace headscope {
namespace {

// One tensor in a call or result block: 8 words.
//   [0] byte address in wasm memory   [1] element type (0 none, 1 bool/uint8, 2 float32)
//   [2] rank   [3..6] dims   [7] element count
constexpr int kWordsPerTensor = 8;
enum : uint32_t { kNone = 0, kBool = 1, kFloat = 2 };

// Call block: query, key, value, key_padding_mask, attn_mask, then one word of flags.
enum CallFlag : uint32_t {
  kNeedWeights = 1,
  kAverageWeights = 2,
  kIsCausal = 4,
};
constexpr int kCallTensors = 5;
constexpr int kCallWords = kCallTensors * kWordsPerTensor + 1;
// Result block: forward -> output, weights; trace -> q, k, v, scores, weights, head_outputs,
// concat, output.
constexpr int kResultTensors = 8;
constexpr int kResultWords = kResultTensors * kWordsPerTensor;

Shape ReadShape(const uint32_t* t) {
  Shape s;
  s.rank = static_cast<int>(t[2]) > Shape::kMaxRank ? Shape::kMaxRank : static_cast<int>(t[2]);
  for (int i = 0; i < s.rank; ++i) s.dims[i] = static_cast<int32_t>(t[3 + i]);
  return s;
}

TensorView ReadTensor(const uint32_t* t) {
  return {reinterpret_cast<const float*>(static_cast<uintptr_t>(t[0])), ReadShape(t), t[7]};
}

MaskView ReadMask(const uint32_t* t) {
  const void* data = reinterpret_cast<const void*>(static_cast<uintptr_t>(t[0]));
  switch (t[1]) {
    case kBool: return MaskView::Bool(static_cast<const uint8_t*>(data), ReadShape(t), t[7]);
    case kFloat: return MaskView::Float(static_cast<const float*>(data), ReadShape(t), t[7]);
    default: return MaskView();
  }
}

void WriteTensor(uint32_t* t, const float* data, const Shape& shape, size_t size) {
  t[0] = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(data));
  t[1] = shape.rank > 0 ? kFloat : kNone;
  t[2] = static_cast<uint32_t>(shape.rank);
  for (int i = 0; i < 4; ++i) t[3 + i] = i < shape.rank ? static_cast<uint32_t>(shape.dims[i]) : 0;
  t[7] = static_cast<uint32_t>(size);
}

class Handle {
 public:
  // Returns 0 or a StatusCode; the message is in lastError().
  int init(int embed_dim, int num_heads, bool bias, bool add_bias_kv, bool add_zero_attn,
           int kdim, int vdim, bool batch_first) {
    MhaConfig c;
    c.embed_dim = embed_dim;
    c.num_heads = num_heads;
    c.bias = bias;
    c.add_bias_kv = add_bias_kv;
    c.add_zero_attn = add_zero_attn;
    c.kdim = kdim;
    c.vdim = vdim;
    c.batch_first = batch_first;
    return Report(MultiheadAttention::Create(c, &mha_));
  }

  // A buffer of at least `bytes` bytes in wasm memory for the caller's inputs, reused across
  // calls; 0 if it cannot be allocated. May grow memory: JS re-reads its heap views after it.
  uintptr_t reserve(double bytes) {
    if (!(bytes >= 0) || bytes > static_cast<double>(MaxCallBytes())) return 0;
    if (!arena_.Resize((static_cast<size_t>(bytes) + 3) / 4)) return 0;
    return reinterpret_cast<uintptr_t>(arena_.data());
  }

  uintptr_t callBlock() { return reinterpret_cast<uintptr_t>(call_); }
  // This object's address, for headscope_forward below.
  uintptr_t address() { return reinterpret_cast<uintptr_t>(this); }
  uintptr_t resultBlock() { return reinterpret_cast<uintptr_t>(result_); }

  // loadStateDict is all or nothing. loadBegin() makes a staging module (with the entries the
  // live one has loaded when `keep_loaded`); setParameter() fills it; loadCommit() makes it the
  // live module, loadAbort() drops it. Whatever fails in between (an allocation, a refused
  // entry) leaves the live module exactly as it was.
  int loadBegin(bool keep_loaded) {
    if (mha_ == nullptr) return NotInitialized();
    staging_.reset();
    std::unique_ptr<MultiheadAttention> stage;
    int code = Report(MultiheadAttention::Create(mha_->config(), &stage));
    if (code != 0) return code;
    if (keep_loaded) {
      for (const ParamSpec& p : ExpectedParams(mha_->config())) {
        if (!mha_->weights().Has(p.param)) continue;
        const TensorView loaded{mha_->weights().Get(p.param), p.shape,
                                static_cast<size_t>(p.shape.NumElements())};
        code = Report(stage->SetParameter(p.name, loaded));
        if (code != 0) return code;
      }
    }
    staging_ = std::move(stage);
    return 0;
  }

  // state_dict entry from the arena: data at byte address `ptr`, shape in call block slot 0; into
  // the staging module between loadBegin() and loadCommit().
  int setParameter(const std::string& name) {
    MultiheadAttention* target = staging_ != nullptr ? staging_.get() : mha_.get();
    if (target == nullptr) return NotInitialized();
    return Report(target->SetParameter(name, ReadTensor(call_)));
  }

  int loadCommit() {
    if (staging_ == nullptr) {
      return Report(Status(StatusCode::kInvalidArgument, "loadCommit: no load in progress"));
    }
    mha_ = std::move(staging_);
    return Report(Status::Ok());
  }

  void loadAbort() { staging_.reset(); }

  int forward() {
    if (mha_ == nullptr) return NotInitialized();
    ForwardOptions o = Options();
    const int code =
        Report(mha_->Forward(ReadTensor(call_), ReadTensor(call_ + kWordsPerTensor),
                             ReadTensor(call_ + 2 * kWordsPerTensor), o, &result_store_));
    // forward() returns two tensors: only their slots are written (and read by the wrapper).
    std::memset(result_, 0, 2 * kWordsPerTensor * sizeof(uint32_t));
    if (code == 0) {
      WriteTensor(result_, result_store_.output.data(), result_store_.output_shape,
                  result_store_.output.size());
      if (result_store_.has_weights()) {
        WriteTensor(result_ + kWordsPerTensor, result_store_.weights.data(),
                    result_store_.weights_shape, result_store_.weights.size());
      }
    }
    return code;
  }

  int trace() {
    if (mha_ == nullptr) return NotInitialized();
    const int code =
        Report(mha_->Trace(ReadTensor(call_), ReadTensor(call_ + kWordsPerTensor),
                           ReadTensor(call_ + 2 * kWordsPerTensor), Options(), &trace_));
    std::memset(result_, 0, sizeof(result_));
    if (code == 0) {
      TraceTensor* stages[kResultTensors] = {&trace_.q,       &trace_.k,
                                             &trace_.v,       &trace_.scores,
                                             &trace_.weights, &trace_.head_outputs,
                                             &trace_.concat,  &trace_.output};
      for (int i = 0; i < kResultTensors; ++i) {
        WriteTensor(result_ + i * kWordsPerTensor, stages[i]->data.data(), stages[i]->shape,
                    stages[i]->data.size());
      }
    }
    return code;
  }

  // Frees what the last calls kept (workspace, arena, results, trace); they regrow on demand.
  void trim() {
    if (mha_ != nullptr) mha_->ReleaseWorkspace();
    arena_.Release();
    result_store_ = ForwardResult();
    trace_ = AttentionTrace();
  }

  // '[["in_proj_weight",[12,4]],...]': the state_dict keys and shapes of this config, in
  // PyTorch's order, so the wrapper can check a whole state_dict before loading any of it.
  std::string expectedParameters() const {
    if (mha_ == nullptr) return "[]";
    std::string out = "[";
    for (const ParamSpec& p : ExpectedParams(mha_->config())) {
      if (out.size() > 1) out += ",";
      out += "[\"" + std::string(p.name) + "\",[";
      for (int i = 0; i < p.shape.rank; ++i) {
        out += (i ? "," : "") + std::to_string(p.shape.dims[i]);
      }
      out += "]]";
    }
    return out + "]";
  }

  int checkParameters() {
    if (mha_ == nullptr) return NotInitialized();
    return Report(mha_->weights().CheckComplete());
  }

  std::string lastError() const { return error_; }
  std::string lastErrorCode() const { return StatusCodeName(code_); }

 private:
  int Report(const Status& s) {
    code_ = s.code();
    // Success leaves the message empty without copying a string: this runs on every call.
    if (code_ == StatusCode::kOk) {
      error_.clear();
    } else {
      error_ = s.message();
    }
    return static_cast<int>(code_);
  }
  int NotInitialized() {
    return Report(Status(StatusCode::kInvalidArgument, "the module was not created"));
  }
  ForwardOptions Options() const {
    ForwardOptions o;
    o.key_padding_mask = ReadMask(call_ + 3 * kWordsPerTensor);
    o.attn_mask = ReadMask(call_ + 4 * kWordsPerTensor);
    const uint32_t flags = call_[kCallTensors * kWordsPerTensor];
    o.need_weights = flags & kNeedWeights;
    o.average_attn_weights = flags & kAverageWeights;
    o.is_causal = flags & kIsCausal;
    return o;
  }

  std::unique_ptr<MultiheadAttention> mha_;
  std::unique_ptr<MultiheadAttention> staging_;  // between loadBegin() and loadCommit()
  AlignedBuffer arena_;
  ForwardResult result_store_;
  AttentionTrace trace_;
  uint32_t call_[kCallWords] = {};
  uint32_t result_[kResultWords] = {};
  std::string error_;
  StatusCode code_ = StatusCode::kOk;
};

// Bytes of the wasm heap in use by malloc: lets tests show that dispose() returns memory.
double heapInUse() { return static_cast<double>(mallinfo().uordblks); }
std::string kernelTarget() { return KernelTargetName(); }
double maxCallBytes() { return static_cast<double>(MaxCallBytes()); }
void setMaxCallBytes(double bytes) { SetMaxCallBytes(static_cast<size_t>(bytes)); }
// Threads of the multi-threaded module (HEADSCOPE_THREADS); the single-threaded module stays at 1.
int threadCount() { return ThreadCount(); }
void setThreadCount(int threads) { SetThreadCount(threads); }

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
  emscripten::class_<Handle>("Handle")
      .constructor<>()
      .function("init", &Handle::init)
      .function("reserve", &Handle::reserve)
      .function("callBlock", &Handle::callBlock)
      .function("address", &Handle::address)
      .function("resultBlock", &Handle::resultBlock)
      .function("loadBegin", &Handle::loadBegin)
      .function("setParameter", &Handle::setParameter)
      .function("loadCommit", &Handle::loadCommit)
      .function("loadAbort", &Handle::loadAbort)
      .function("forward", &Handle::forward)
      .function("trace", &Handle::trace)
      .function("trim", &Handle::trim)
      .function("expectedParameters", &Handle::expectedParameters)
      .function("checkParameters", &Handle::checkParameters)
      .function("lastError", &Handle::lastError)
      .function("lastErrorCode", &Handle::lastErrorCode);
  emscripten::function("heapInUse", &headscope::heapInUse);
  emscripten::function("kernelTarget", &headscope::kernelTarget);
  emscripten::function("maxCallBytes", &headscope::maxCallBytes);
  emscripten::function("setMaxCallBytes", &headscope::setMaxCallBytes);
  emscripten::function("threadCount", &headscope::threadCount);
  emscripten::function("setThreadCount", &headscope::setThreadCount);
}
