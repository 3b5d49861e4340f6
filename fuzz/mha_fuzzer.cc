// libFuzzer harness for the C++ API: MultiheadAttention::Create / SetParameter / Forward / Trace
// against ReferenceForward (Eigen) on configs, state_dicts, shapes, masks and options (head_gates
// included) decoded from the fuzzer's bytes, valid and invalid alike.
//
// Position options (ALiBi, sliding windows) are drawn too, so the kernels' window paths (tiles
// that skip the keys before a window, softmax rows from a 16-key panel) meet the reference.
//
// Invariants (a violation aborts, so libFuzzer reports it with the input):
//   - nothing crashes, leaks or hits undefined behaviour (ASan, LSan, UBSan);
//   - an invalid config is refused by Create with INVALID_ARGUMENT, and by ReferenceForward too;
//   - every bad state_dict entry is refused with a clear Status of the expected code, and a
//     refused entry leaves what was loaded before intact;
//   - Forward and ReferenceForward return the same status code (Forward may also refuse a call
//     over its byte limit, which the reference does not enforce); valid calls succeed; calls
//     with a definitely invalid argument fail; every error is "CODE: message";
//   - when both succeed: the same shapes, NaN/inf at the same places, and finite values within
//     fuzz::kTolerance (relative to max(1, max |reference|)) when the values were moderate;
//   - Trace returns Forward's status, output and per-head weights (bit for bit: it shares the
//     kernels);
//   - after all that, the module still works: missing weights load and a valid call succeeds
//     and matches the reference.
//
// Sizes stay small (dims <= 72, sequences <= 12, sometimes up to 35 keys or ~70 queries to cross
// the small-head and 64-row query tile bounds)
// so an iteration takes well under a millisecond, except "absurd" shapes: huge declared
// dimensions with an empty dimension elsewhere, which exercise size validation and the byte
// limit (lowered to 64 MiB here, sometimes to a few KiB).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "headscope/case_file.h"
#include "headscope/config.h"
#include "headscope/mha.h"
#include "headscope/plan.h"
#include "headscope/reference.h"
#include "headscope/status.h"
#include "headscope/tensor.h"
#include "headscope/weights.h"
#include "hwy/targets.h"

namespace headscope {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr size_t kFuzzCallBytes = size_t{64} << 20;
// Largest tensor the harness fills with values; larger declared shapes get no data.
constexpr int64_t kMaxFilled = int64_t{1} << 16;

std::vector<int64_t> g_targets;  // SIMD targets of this build on this CPU
int64_t g_target = 0;            // the one this input runs on
fuzz::Worst g_worst;
// Successful calls compared with the reference: with ALiBi, with a window, and with a window
// over more than 16 query rows (the packed path's windowed tiles, which skip keys).
long g_alibi_calls = 0, g_window_calls = 0, g_window_tiled_calls = 0;

struct WorstReport {
  ~WorstReport() {
    if (g_worst.compared > 0) {
      std::fprintf(stderr, "mha_fuzzer: worst fast-vs-reference relative error %.3g over %ld "
                   "value comparisons (tolerance %g); calls compared with alibi %ld, with a "
                   "window %ld, with a window and L > 16 %ld\n", g_worst.error, g_worst.compared,
                   fuzz::kTolerance, g_alibi_calls, g_window_calls, g_window_tiled_calls);
    }
  }
} g_worst_report;

// Values from the input. One byte per value: k * step for k in [-128, 127]; with specials
// enabled for this call, the byte 0x80 is followed by one choosing a special value.
class Values {
 public:
  Values(FuzzedDataProvider* fdp, bool specials, fuzz::Magnitudes* mag)
      : fdp_(fdp), specials_(specials), mag_(mag) {}

  float Data() {
    const float x = Draw(1.0f / 64);  // [-2, 2)
    mag_->Input(x);
    return x;
  }
  float Weight() {
    const float x = Draw(1.0f / 256);  // [-0.5, 0.5)
    mag_->Weight(x);
    return x;
  }
  float Bias() {
    const float x = Draw(1.0f / 256);
    mag_->Bias(x);
    return x;
  }
  float Mask() {
    const uint8_t b = fdp_->ConsumeIntegral<uint8_t>();
    float x;
    if (b == 0x80 && specials_) {
      x = Special();
    } else if ((b & 3) == 3) {
      x = -kInf;  // a quarter of float mask entries block
    } else {
      x = static_cast<float>(static_cast<int8_t>(b) >> 2) * 0.25f;  // [-8, 8)
    }
    mag_->Mask(x);
    return x;
  }
  // A head gate: a multiple of 1/64 in [-2, 2), or 0, 0.5, 1 (and NaN, +-inf with specials).
  // Noted like a bias (a mask entry's -inf would not count): a non-finite gate makes non-finite
  // outputs legitimate, and a gate's size enters the bound on the output like a bias's.
  float Gate() {
    const uint8_t b = fdp_->ConsumeIntegral<uint8_t>();
    static const float kGates[] = {0.0f, 0.5f, 1.0f, kNaN, kInf, -kInf};
    const float x = b >= 250 ? kGates[(b - 250) % (specials_ ? 6 : 3)]
                             : static_cast<float>(static_cast<int8_t>(b)) / 64.0f;
    mag_->Bias(x);
    return x;
  }
  uint8_t BoolMask() {  // odd bytes block, with their own value (nonzero = true, not just 1)
    const uint8_t b = fdp_->ConsumeIntegral<uint8_t>();
    return (b & 1) ? b : 0;
  }
  bool specials() const { return specials_; }

 private:
  float Draw(float step) {
    const int8_t b = fdp_->ConsumeIntegral<int8_t>();
    if (b == -128 && specials_) return Special();
    return static_cast<float>(b) * step;
  }
  float Special() {
    static const float kSpecials[] = {kNaN,   kInf,     -kInf,     -0.0f,        1e30f,
                                      -1e30f, FLT_MAX,  -FLT_MAX,  FLT_MIN / 8,  1e5f,
                                      65504.0f, -3.0e38f};
    return kSpecials[fdp_->ConsumeIntegralInRange<size_t>(0, std::size(kSpecials) - 1)];
  }

  FuzzedDataProvider* fdp_;
  bool specials_;
  fuzz::Magnitudes* mag_;
};

std::string Str(int64_t v) { return std::to_string(v); }

std::string ConfigString(const MhaConfig& c) {
  return "E=" + Str(c.embed_dim) + " H=" + Str(c.num_heads) + " kdim=" + Str(c.kdim) +
         " vdim=" + Str(c.vdim) + " bias=" + Str(c.bias) + " bias_kv=" + Str(c.add_bias_kv) +
         " zero_attn=" + Str(c.add_zero_attn) + " batch_first=" + Str(c.batch_first) +
         " kv_heads=" + Str(c.num_kv_heads) + " sinks=" + Str(c.attn_sinks) +
         " rope_dims=" + Str(c.rope_dims);
}

// --- Config ------------------------------------------------------------------------------------

struct ConfigDraw {
  MhaConfig config;
  bool invalid = false;  // the harness broke it on purpose: Create must refuse it
  bool huge = false;     // valid, but its weights are too large to fill
};

ConfigDraw DrawConfig(FuzzedDataProvider& fdp) {
  ConfigDraw d;
  MhaConfig& c = d.config;
  const int64_t heads = fdp.ConsumeIntegralInRange<int64_t>(1, 4);
  // Mostly tiny heads; sometimes past kSmallMaxHeadDim (16), onto the packed attention path.
  const int64_t head_dim = fdp.ConsumeIntegralInRange<int>(0, 7) == 0
                               ? fdp.ConsumeIntegralInRange<int64_t>(15, 18)
                               : fdp.ConsumeIntegralInRange<int64_t>(1, 6);
  c.num_heads = heads;
  c.embed_dim = heads * head_dim;
  c.bias = fdp.ConsumeBool();
  c.add_bias_kv = fdp.ConsumeBool();
  c.add_zero_attn = fdp.ConsumeBool();
  c.kdim = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<int64_t>(1, 24) : 0;
  c.vdim = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<int64_t>(1, 24) : 0;
  c.batch_first = fdp.ConsumeBool();
  // Grouped-query attention a third of the time: G a divisor of the heads (1: multi-query).
  if (fdp.ConsumeIntegralInRange<int>(0, 2) == 0) {
    int64_t g = fdp.ConsumeIntegralInRange<int64_t>(1, heads);
    while (heads % g != 0) --g;
    c.num_kv_heads = g;
  }
  // Attention sinks a quarter of the time: their logits are loaded (and drawn) as every weight.
  c.attn_sinks = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;
  switch (fdp.ConsumeIntegralInRange<int>(0, 39)) {
    case 0: c.embed_dim = 0; d.invalid = true; break;
    case 1: c.embed_dim = -c.embed_dim; d.invalid = true; break;
    case 2: c.num_heads = 0; d.invalid = true; break;
    case 3: c.num_heads = -heads; d.invalid = true; break;
    case 4: c.num_heads = c.embed_dim + 1; d.invalid = true; break;  // not a divisor
    case 5: c.embed_dim = 4; c.num_heads = 3; d.invalid = true; break;
    case 6: c.embed_dim = kMaxDim + 1; c.num_heads = 1; d.invalid = true; break;
    case 7: c.embed_dim = std::numeric_limits<int64_t>::max(); d.invalid = true; break;
    case 8: c.num_heads = std::numeric_limits<int64_t>::min(); d.invalid = true; break;
    case 9: c.kdim = -1; d.invalid = true; break;
    case 10: c.vdim = kMaxDim + 1; d.invalid = true; break;
    case 11: c.kdim = std::numeric_limits<int64_t>::min(); d.invalid = true; break;
    case 12: c.num_heads = kMaxDim * 2; c.embed_dim = kMaxDim * 2; d.invalid = true; break;
    case 13:  // valid and huge: weights cannot be loaded, every call is MISSING_PARAMETER
      c.embed_dim = kMaxDim;
      c.num_heads = int64_t{1} << fdp.ConsumeIntegralInRange<int>(0, 24);
      if (c.num_heads % c.kv_heads() != 0) c.num_kv_heads = 0;  // (3 K/V heads of 2^k heads)
      d.huge = true;
      break;
    case 14: c.kdim = kMaxDim; d.huge = true; break;
    case 15: c.vdim = kMaxDim - 1; d.huge = true; break;
    case 16: c.kdim = c.embed_dim; break;  // explicit kdim = vdim = E: the packed layout
    case 17: c.num_kv_heads = heads + 1; d.invalid = true; break;  // not a divisor of the heads
    case 18: c.num_kv_heads = -1; d.invalid = true; break;
    case 19: c.num_kv_heads = std::numeric_limits<int64_t>::max(); d.invalid = true; break;
    default: break;
  }
  if (!d.invalid && !d.huge && c.kdim == c.embed_dim && fdp.ConsumeBool()) c.vdim = c.embed_dim;
  // Rotary positions a quarter of the time on a valid config: r even and at most the head dim,
  // either layout, the usual base or a fast one.
  if (!d.invalid && !d.huge && c.head_dim() >= 2 && fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
    c.rope_dims = 2 * fdp.ConsumeIntegralInRange<int64_t>(1, c.head_dim() / 2);
    c.rope_layout = fdp.ConsumeBool() ? RopeLayout::kInterleaved : RopeLayout::kHalf;
    c.rope_base = fdp.ConsumeBool() ? 100.0 : 10000.0;
  }
  return d;
}

// --- state_dict ----------------------------------------------------------------------------

// The harness's own copy of what should be loaded; the reference runs on it, so a module whose
// storage or packed weights a refused entry had damaged disagrees with the reference.
struct Loader {
  MultiheadAttention* mha;
  MhaWeights* ref_weights;
  const std::string* context;

  void ExpectRefused(const Status& s, StatusCode code, const std::string& what) const {
    if (s.ok()) fuzz::Fail("mha_fuzzer", "SetParameter accepted " + what, *context);
    if (s.code() != code || !fuzz::IsClearError(s)) {
      fuzz::Fail("mha_fuzzer", "SetParameter(" + what + ") returned " + s.ToString() +
                 ", expected " + StatusCodeName(code), *context);
    }
  }
  void Load(const ParamSpec& spec, const std::vector<float>& v) const {
    const size_t n = v.size();
    const Status s = mha->SetParameter(spec.name, {v.data(), spec.shape, n});
    if (!s.ok()) {
      fuzz::Fail("mha_fuzzer", std::string("valid SetParameter(") + spec.name + ") failed: " +
                 s.ToString(), *context);
    }
    const Status r = ref_weights->Set(spec.name, {v.data(), spec.shape, n});
    if (!r.ok()) fuzz::Fail("mha_fuzzer", "reference weights: " + r.ToString(), *context);
  }
};

Shape MutateShape(FuzzedDataProvider& fdp, const Shape& s) {
  Shape m = s;
  switch (fdp.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
      if (m.rank < Shape::kMaxRank) {
        m.dims[m.rank++] = 1;
        return m;
      }
      [[fallthrough]];
    case 1:
      if (m.rank > 0) {
        --m.rank;
        return m;
      }
      [[fallthrough]];
    case 2:
      if (m.rank > 0) {
        m.dims[fdp.ConsumeIntegralInRange<int>(0, m.rank - 1)] += 1;
        return m;
      }
      [[fallthrough]];
    case 3:
      if (m.rank > 0) {
        m.dims[fdp.ConsumeIntegralInRange<int>(0, m.rank - 1)] = -1;
        return m;
      }
      [[fallthrough]];
    default:
      if (m.rank > 0) {
        m.dims[0] = (m.dims[0] == kMaxDim) ? kMaxDim + 1 : kMaxDim;
      } else {
        m = Shape{1};
      }
      return m;
  }
}

std::vector<float> ParamValues(Values& values, const ParamSpec& spec) {
  const size_t n = static_cast<size_t>(spec.shape.NumElements());
  std::vector<float> v(n);
  const bool is_bias = spec.param == Param::kInProjBias || spec.param == Param::kOutProjBias ||
                       spec.param == Param::kBiasK || spec.param == Param::kBiasV;
  for (float& x : v) x = is_bias ? values.Bias() : values.Weight();
  return v;
}

// Loads the state_dict with some entries missing, refused (wrong shape, size, null data, unknown
// key) or loaded twice. Returns true if every entry the config needs ended up loaded.
bool LoadStateDict(FuzzedDataProvider& fdp, Values& values, const Loader& loader, bool huge,
                   std::vector<bool>* loaded) {
  const MhaConfig& c = loader.mha->config();
  const std::vector<ParamSpec> specs = ExpectedParams(c);
  loaded->assign(static_cast<size_t>(Param::kCount), false);
  bool complete = true;
  for (const ParamSpec& spec : specs) {
    if (huge) {
      // Some entry is too large to fill, and the weights are one store (parameters.h): loading
      // even a small entry would allocate all of it, gigabytes. So every entry only gets a null
      // view of its shape, which must be refused without reading or allocating anything.
      loader.ExpectRefused(loader.mha->SetParameter(spec.name, {nullptr, spec.shape, 0}),
                           StatusCode::kShapeMismatch, std::string(spec.name) + " null");
      complete = false;
      continue;
    }
    const std::vector<float> good = ParamValues(values, spec);
    const size_t n = good.size();
    bool load = true;
    switch (fdp.ConsumeIntegralInRange<int>(0, 15)) {
      case 0:
        load = false;  // missing
        break;
      case 1: {  // wrong shape, with data of that shape when it is small
        const Shape bad = MutateShape(fdp, spec.shape);
        const int64_t bad_n = bad.NumElements();
        std::vector<float> data(bad_n >= 0 && bad_n <= kMaxFilled ? bad_n : 0, 0.25f);
        loader.ExpectRefused(
            loader.mha->SetParameter(spec.name, {data.data(), bad, data.size()}),
            StatusCode::kShapeMismatch, std::string(spec.name) + " shape " + bad.ToString());
        load = fdp.ConsumeBool();
        break;
      }
      case 2: {  // right shape, one value too many or too few
        const size_t bad_n = fdp.ConsumeBool() ? n + 1 : n - 1;
        std::vector<float> data(bad_n, 0.5f);
        loader.ExpectRefused(
            loader.mha->SetParameter(spec.name, {data.data(), spec.shape, bad_n}),
            StatusCode::kShapeMismatch, std::string(spec.name) + " size " + Str(bad_n));
        load = fdp.ConsumeBool();
        break;
      }
      case 3:  // null data
        loader.ExpectRefused(loader.mha->SetParameter(spec.name, {nullptr, spec.shape, n}),
                             StatusCode::kShapeMismatch, std::string(spec.name) + " null");
        load = fdp.ConsumeBool();
        break;
      case 4: {  // loaded, then a refused entry for the same key must leave it as it was
        loader.Load(spec, good);
        std::vector<float> other(n, 1.0f);
        const Shape bad = MutateShape(fdp, spec.shape);
        loader.ExpectRefused(
            loader.mha->SetParameter(spec.name, {other.data(), bad, n}),
            StatusCode::kShapeMismatch, std::string(spec.name) + " after load, shape " +
            bad.ToString());
        break;
      }
      case 5: {  // loaded twice: the second value wins
        std::vector<float> first(n, -0.25f);
        loader.Load(spec, first);
        break;
      }
      default:
        break;
    }
    if (load) {
      loader.Load(spec, good);
      (*loaded)[static_cast<size_t>(spec.param)] = true;
    } else {
      complete = false;
    }
    if (fdp.ConsumeIntegralInRange<int>(0, 15) == 0) {
      // A key this config does not have (or no key at all), which must change nothing.
      static const std::string_view kNames[] = {
          "in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
          "in_proj_bias", "out_proj.weight", "out_proj.bias", "bias_k", "bias_v", "",
          "out_proj", "IN_PROJ_WEIGHT", "out_proj.weight.", "module.in_proj_weight",
          std::string_view("in_proj_weight\0x", 16), "bias_k ",
      };
      const std::string_view name =
          kNames[fdp.ConsumeIntegralInRange<size_t>(0, std::size(kNames) - 1)];
      bool expected = false;
      for (const ParamSpec& s : specs) expected |= name == s.name;
      // q/k/v_proj_weight are aliases of in_proj_weight's blocks where that exists (loaded
      // through them, they would change the weights this harness compares with).
      for (const ParamSpec& s : AliasParams(loader.mha->config())) expected |= name == s.name;
      if (!expected) {
        std::vector<float> data(n, 0.125f);
        loader.ExpectRefused(loader.mha->SetParameter(name, {data.data(), spec.shape, n}),
                             StatusCode::kUnknownParameter,
                             "['" + std::string(name) + "']: unknown key for this config");
      }
    }
  }
  return complete;
}

// --- One forward call --------------------------------------------------------------------------

struct Call {
  std::vector<float> q, k, v, kpm_f, attn_f;
  std::vector<uint8_t> kpm_b, attn_b;
  std::vector<float> gates;  // head_gates (not in the case format: CaseJson leaves them out)
  TensorView query, key, value;
  ForwardOptions options;
  bool valid = true;          // every argument valid by construction
  bool definitely_invalid = false;
  bool absurd = false;        // huge declared dims (empty data): may exceed the byte limit
  std::string description;
};

Shape InputShape(bool batched, bool batch_first, int64_t n, int64_t len, int64_t dim) {
  if (!batched) return {len, dim};
  return batch_first ? Shape{n, len, dim} : Shape{len, n, dim};
}

// Owned data for a view of `shape` (size = its element count), filled when small.
void Fill(Values& values, const Shape& shape, std::vector<float>* buf, TensorView* view) {
  const int64_t n = shape.NumElements();
  buf->clear();
  if (n > 0 && n <= kMaxFilled) {
    buf->resize(static_cast<size_t>(n));
    for (float& x : *buf) x = values.Data();
  }
  *view = {buf->empty() ? nullptr : buf->data(), shape, buf->size()};
}

// One of the three inputs broken on purpose (`how` in 0..6). Returns true if the call is
// certainly invalid afterwards.
bool BreakInput(FuzzedDataProvider& fdp, Values& values, int how, std::vector<float>* buf,
                TensorView* view) {
  Shape s = view->shape;
  switch (how) {
    case 0:  // rank 1, 4 or 0
      s = (fdp.ConsumeBool() ? Shape{s[0]} : fdp.ConsumeBool() ? Shape{1, 1, 1, 1} : Shape{});
      Fill(values, s, buf, view);
      return true;
    case 1:  // last dimension off by one (query: embed_dim, key: kdim, value: vdim)
      s.dims[s.rank - 1] += fdp.ConsumeBool() ? 1 : -1;
      Fill(values, s, buf, view);
      return true;
    case 2:  // a negative dimension
      s.dims[fdp.ConsumeIntegralInRange<int>(0, s.rank - 1)] =
          -fdp.ConsumeIntegralInRange<int64_t>(1, 3);
      *view = {view->data, s, view->size};
      return true;
    case 3:  // a dimension over kMaxDim
      s.dims[fdp.ConsumeIntegralInRange<int>(0, s.rank - 1)] =
          fdp.ConsumeBool() ? kMaxDim + 1 : std::numeric_limits<int64_t>::max();
      *view = {view->data, s, view->size};
      return true;
    case 4:  // every dim kMaxDim: 2^48 elements (2-D) or an int64 overflow (3-D)
      for (int i = 0; i < s.rank; ++i) s.dims[i] = kMaxDim;
      *view = {view->data, s, view->size};
      return true;
    case 5: {  // data holding one value more or less than the shape needs
      const size_t n = view->size;
      const size_t bad = (n == 0 || fdp.ConsumeBool()) ? n + 1 : n - 1;
      buf->resize(bad, 0.5f);
      *view = {buf->empty() ? nullptr : buf->data(), s, bad};
      return true;
    }
    default:  // null data with a non-empty shape
      if (view->size == 0) return false;
      *view = {nullptr, s, view->size};
      return true;
  }
}

float CausalValue(bool blocked, bool neg_zero) {
  return blocked ? -kInf : (neg_zero ? -0.0f : 0.0f);
}

// Shapes the library must refuse whatever their data: a dimension negative or over kMaxDim.
bool DimsInRange(const Shape& s) {
  for (int i = 0; i < s.rank; ++i) {
    if (s.dims[i] < 0 || s.dims[i] > kMaxDim) return false;
  }
  return true;
}

void DrawCall(FuzzedDataProvider& fdp, Values& values, const MhaConfig& c, Call* call) {
  const bool batched = fdp.ConsumeIntegralInRange<int>(0, 9) < 7;
  int64_t N = batched ? fdp.ConsumeIntegralInRange<int64_t>(1, 3) : 1;
  int64_t L = fdp.ConsumeIntegralInRange<int>(0, 31) == 0
                  ? fdp.ConsumeIntegralInRange<int64_t>(60, 72)  // across the 64-row tile
                  : fdp.ConsumeIntegralInRange<int64_t>(0, 12);
  const bool self = c.same_qkv_dim() && fdp.ConsumeBool();
  // Keys: across kSmallMaxKeys (12, counting bias_k and the zero key), where the attention
  // stage switches from direct dot products to packed matmuls, and sometimes well past it.
  int64_t S = self ? L
              : fdp.ConsumeIntegralInRange<int>(0, 7) == 0 ? fdp.ConsumeIntegralInRange<int64_t>(13, 35)
                                                            : fdp.ConsumeIntegralInRange<int64_t>(0, 12);
  const int64_t H = c.num_heads, E = c.embed_dim, kd = c.key_dim(), vd = c.value_dim();

  // Absurd shapes: declared sizes far beyond memory, always with an empty dimension, so they
  // carry no data and the call is valid (and must be refused or computed without a huge
  // allocation).
  if (batched && fdp.ConsumeIntegralInRange<int>(0, 23) == 0) {
    static const int64_t kBig[] = {1000, int64_t{1} << 20, kMaxDim - 1, kMaxDim};
    const int64_t big = kBig[fdp.ConsumeIntegralInRange<size_t>(0, std::size(kBig) - 1)];
    switch (fdp.ConsumeIntegralInRange<int>(0, 2)) {
      case 0: N = big; L = 0; S = 0; break;   // huge batch of empty sequences
      case 1: N = 0; L = big; S = big; break;  // empty batch of huge sequences
      default: N = 0; L = big; S = 1; break;
    }
    call->absurd = true;
  }
  // Valid configs with huge dims: no data either.
  if (SaturatingProduct({static_cast<uint64_t>(N), static_cast<uint64_t>(L),
                         static_cast<uint64_t>(E)}) > static_cast<uint64_t>(kMaxFilled)) {
    L = 0;
  }
  if (SaturatingProduct({static_cast<uint64_t>(N), static_cast<uint64_t>(S),
                         static_cast<uint64_t>(std::max(kd, vd))}) >
      static_cast<uint64_t>(kMaxFilled)) {
    S = 0;
  }
  if (self && S != L) {
    S = L;
  }

  Fill(values, InputShape(batched, c.batch_first, N, L, E), &call->q, &call->query);
  if (self) {
    call->key = call->value = call->query;  // the same buffer, as in PyTorch self-attention
  } else {
    Fill(values, InputShape(batched, c.batch_first, N, S, kd), &call->k, &call->key);
    Fill(values, InputShape(batched, c.batch_first, N, S, vd), &call->v, &call->value);
  }

  // Break at most one input.
  const int which = fdp.ConsumeIntegralInRange<int>(0, 2);
  const int how = fdp.ConsumeIntegralInRange<int>(0, 29);
  if (how <= 9 && self) {
    // Self-attention inputs share the query's buffer: give key and value their own copies
    // before any of the three changes.
    call->k = call->v = call->q;
    call->key = {call->k.empty() ? nullptr : call->k.data(), call->query.shape, call->k.size()};
    call->value = {call->v.empty() ? nullptr : call->v.data(), call->query.shape,
                   call->v.size()};
  }
  std::vector<float>* buf = which == 0 ? &call->q : which == 1 ? &call->k : &call->v;
  TensorView* view = which == 0 ? &call->query : which == 1 ? &call->key : &call->value;
  std::string broken;
  if (how <= 6) {
    const bool certain = BreakInput(fdp, values, how, buf, view);
    if (certain) {
      call->valid = false;
      call->definitely_invalid = true;
      broken = " broken input " + Str(which) + " how " + Str(how);
    }
  } else if (how == 7 && batched) {  // batch size off by one
    Shape s = view->shape;
    s.dims[c.batch_first ? 0 : 1] += 1;
    Fill(values, s, buf, view);
    call->valid = false;
    call->definitely_invalid = true;
    broken = " batch of input " + Str(which) + " off by one";
  } else if (how == 8) {  // key and value sequence lengths differ
    Fill(values, InputShape(batched, c.batch_first, N, S + 1, vd), &call->v, &call->value);
    call->valid = false;
    call->definitely_invalid = true;
    broken = " value S+1";
  } else if (how == 9 && batched) {  // key 2-D while the query is 3-D
    Fill(values, Shape{S, kd}, &call->k, &call->key);
    call->valid = false;
    call->definitely_invalid = true;
    broken = " key 2-D";
  } else if (how == 10) {
    // Empty tensors with a non-null pointer (Fill gives them null): valid, never read.
    static const float kDummy[1] = {0.0f};
    for (TensorView* t : {&call->query, &call->key, &call->value}) {
      if (t->size == 0) t->data = kDummy;
    }
  }

  ForwardOptions& o = call->options;
  o.need_weights = fdp.ConsumeBool();
  o.average_attn_weights = fdp.ConsumeBool();
  o.head_stats = fdp.ConsumeIntegralInRange<int>(0, 2) == 0;
  // Head statistics are (N, H) x 3 floats, whatever L and S: with a huge batch or head count they
  // can exceed the byte limit on their own (refused before the weights are checked, as outputs).
  if (o.head_stats && SaturatingProduct({static_cast<uint64_t>(N), static_cast<uint64_t>(H)}) >
                          static_cast<uint64_t>(kMaxFilled)) {
    call->absurd = true;
  }
  o.is_causal = fdp.ConsumeIntegralInRange<int>(0, 4) == 0;

  // key_padding_mask: none, bool or float, (N, S) or (S); sometimes broken.
  const int kpm_kind = fdp.ConsumeIntegralInRange<int>(0, 2);
  if (kpm_kind != 0) {
    Shape shape = batched ? Shape{N, S} : Shape{S};
    const int breaks = fdp.ConsumeIntegralInRange<int>(0, 15);
    if (breaks == 0) {
      shape.dims[shape.rank - 1] += 1;
    } else if (breaks == 1) {
      shape = batched ? Shape{S} : Shape{1, S};
    }
    const int64_t n = shape.NumElements();
    const size_t count = (n > 0 && n <= kMaxFilled) ? static_cast<size_t>(n) : 0;
    if (n > kMaxFilled) call->valid = false;
    size_t size = count;
    if (breaks == 2) size = count + 1;
    const bool null_data = breaks == 3 && count > 0;
    if (kpm_kind == 1) {
      call->kpm_b.resize(size);
      for (uint8_t& x : call->kpm_b) x = values.BoolMask();
      o.key_padding_mask = MaskView::Bool(null_data ? nullptr : call->kpm_b.data(), shape, size);
    } else {
      call->kpm_f.resize(size);
      for (float& x : call->kpm_f) x = values.Mask();
      o.key_padding_mask = MaskView::Float(null_data ? nullptr : call->kpm_f.data(), shape, size);
    }
    if (breaks <= 3 && (breaks != 3 || null_data)) {
      call->valid = false;
      call->definitely_invalid = true;
      call->description += " kpm broken " + Str(breaks);
    }
  }

  // attn_mask: none, bool or float, (L, S) or (N*H, L, S) / (H, L, S); with is_causal, usually
  // the causal mask itself, sometimes with one entry changed; sometimes broken.
  const int attn_kind = fdp.ConsumeIntegralInRange<int>(0, 4);
  if (attn_kind != 0) {
    const bool three = attn_kind == 2 || attn_kind == 4;
    const bool as_bool = attn_kind <= 2;
    Shape shape = three ? Shape{N * H, L, S} : Shape{L, S};
    const int breaks = fdp.ConsumeIntegralInRange<int>(0, 15);
    if (breaks == 0) {
      shape.dims[0] += 1;
    } else if (breaks == 1) {
      shape = three ? Shape{N * H, L, S, 1} : Shape{S};
    }
    const int64_t n = shape.NumElements();
    const size_t count = (n > 0 && n <= kMaxFilled) ? static_cast<size_t>(n) : 0;
    if (n > kMaxFilled) call->valid = false;
    size_t size = count;
    if (breaks == 2) size = count + 1;
    const bool null_data = breaks == 3 && count > 0;
    const bool causal_mask =
        o.is_causal && breaks > 3 && fdp.ConsumeIntegralInRange<int>(0, 3) != 0;
    const bool neg_zero = fdp.ConsumeBool();
    if (as_bool) {
      call->attn_b.resize(size);
      for (uint8_t& x : call->attn_b) x = values.BoolMask();
    } else {
      call->attn_f.resize(size);
      for (float& x : call->attn_f) x = values.Mask();
    }
    bool flipped = false;
    if (causal_mask && size > 0) {
      const size_t slices = three ? static_cast<size_t>(N * H) : 1;
      for (size_t b = 0; b < slices; ++b) {
        for (int64_t i = 0; i < L; ++i) {
          for (int64_t j = 0; j < S; ++j) {
            const size_t idx = (b * L + i) * S + j;
            if (as_bool) {
              call->attn_b[idx] = j > i ? (call->attn_b[idx] | 1) : 0;
            } else {
              call->attn_f[idx] = CausalValue(j > i, neg_zero);
            }
          }
        }
      }
      if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {  // one entry that is not causal
        const size_t idx = fdp.ConsumeIntegralInRange<size_t>(0, size - 1);
        if (as_bool) {
          call->attn_b[idx] = call->attn_b[idx] ? 0 : 2;
        } else {
          call->attn_f[idx] = std::isinf(call->attn_f[idx]) ? kNaN : -1.0f;
        }
        flipped = true;
      }
    }
    o.attn_mask = as_bool
                      ? MaskView::Bool(null_data ? nullptr : call->attn_b.data(), shape, size)
                      : MaskView::Float(null_data ? nullptr : call->attn_f.data(), shape, size);
    // The 3-D (N*H, L, S) shape broken in dim 0 can only be confused with (L, S) by rank.
    if (breaks <= 3 && (breaks != 3 || null_data)) {
      call->valid = false;
      call->definitely_invalid = true;
      call->description += " attn_mask broken " + Str(breaks);
    } else if (o.is_causal && !causal_mask) {
      call->valid = false;  // random entries: valid only if they happen to be the causal mask
      call->description += " attn_mask not causal";
    } else if (flipped) {
      call->valid = false;
      call->definitely_invalid = true;
      call->description += " attn_mask one entry not causal";
    }
  }

  // head_gates: mostly none; else one per head (Values::Gate), or a wrong count, a wrong rank or
  // null data (refused by both paths).
  const int gates_kind = fdp.ConsumeIntegralInRange<int>(0, 11);
  if (gates_kind >= 8) {
    const bool fits = H <= kMaxFilled;
    const int broken = gates_kind == 11 ? fdp.ConsumeIntegralInRange<int>(0, 2) : -1;
    Shape shape{H};
    if (broken == 0) shape = Shape{H + (fdp.ConsumeBool() ? 1 : -1)};
    if (broken == 1) shape = Shape{1, H};
    const int64_t n = shape.NumElements();
    call->gates.resize(fits && n > 0 ? static_cast<size_t>(n) : 0);
    for (float& g : call->gates) g = values.Gate();
    const bool null_data = broken == 2 && !call->gates.empty();
    o.head_gates = {null_data ? nullptr : call->gates.data(), shape, call->gates.size()};
    if (broken >= 0 || !fits) {
      call->valid = false;
      call->definitely_invalid = true;
      call->description += " head_gates broken " + Str(broken);
    } else {
      call->description += " head_gates";
    }
  }

  // Position options (headscope's, not torch's): ALiBi a quarter of the time; a window half of
  // the time, mostly small against the sequences (1, a few keys, up to past max(L, S)) so that
  // the packed path's 16-row tiles skip keys, sometimes 2^24 (valid, nothing skipped) and
  // sometimes out of range (both paths refuse it, naming options.window).
  o.alibi = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;
  const int64_t longest = std::max<int64_t>({L, S, 1});
  switch (fdp.ConsumeIntegralInRange<int>(0, 15)) {
    case 8: o.window = 1; break;
    case 9: case 10: o.window = fdp.ConsumeIntegralInRange<int64_t>(1, 4); break;
    case 11: case 12: case 13: o.window = fdp.ConsumeIntegralInRange<int64_t>(1, longest + 2); break;
    case 14: o.window = kMaxDim; break;
    case 15:
      o.window = fdp.ConsumeBool() ? -fdp.ConsumeIntegralInRange<int64_t>(1, 3) : kMaxDim + 1;
      call->valid = false;
      call->definitely_invalid = true;
      call->description += " window out of range";
      break;
    default: break;
  }

  for (const MaskView* m : {&o.key_padding_mask, &o.attn_mask}) {
    if (m->present() && !DimsInRange(m->shape)) {
      call->valid = false;
      call->definitely_invalid = true;
      call->description += " mask dims over kMaxDim";
    }
  }

  call->description = ConfigString(c) + " q" + call->query.shape.ToString() + " k" +
                      call->key.shape.ToString() + " v" + call->value.shape.ToString() +
                      (self ? " self" : "") + " kpm=" + Str(kpm_kind) + " attn=" +
                      Str(attn_kind) + " causal=" + Str(o.is_causal) + " need_weights=" +
                      Str(o.need_weights) + " avg=" + Str(o.average_attn_weights) +
                      (o.head_stats ? " head_stats" : "") + (o.alibi ? " alibi" : "") +
                      (o.window != 0 ? " window=" + Str(o.window) : "") +
                      (call->absurd ? " absurd" : "") + broken + call->description;
}

// Head statistics of a fast-path call that also returned per-head weights: they must be the
// statistics of those very weights (mha.h's definitions) computed here in double, to 1e-6 relative
// plus float32's absolute resolution; with attention sinks the entropy also counts the sink's
// mass, 1 - the row's sum (kernels/attention.h). Returns what differs, or "".
std::string HeadStatsMismatch(const ForwardResult& r, const MhaConfig& c) {
  const HeadStats& s = r.head_stats;
  const Shape& ws = r.weights_shape;
  if (!s.present() || ws.rank < 3) return "";
  const size_t Sp = static_cast<size_t>(ws[ws.rank - 1]), L = static_cast<size_t>(ws[ws.rank - 2]);
  const size_t S = Sp - (c.add_bias_kv ? 1 : 0) - (c.add_zero_attn ? 1 : 0);
  const size_t heads = static_cast<size_t>(s.shape.NumElements());
  if (s.entropy.size() != heads || heads * L * Sp != r.weights.size()) return "head_stats sizes";
  for (size_t nh = 0; nh < heads; ++nh) {
    double e = 0, d = 0, m = 0;
    size_t rows = 0;
    for (size_t i = 0; i < L; ++i) {
      const float* w = r.weights.data() + (nh * L + i) * Sp;
      bool zero = true, nan = false;
      double re = 0, rd = 0, rm = 0, mass = 0;
      for (size_t j = 0; j < Sp; ++j) {
        zero = zero && w[j] == 0.0f;
        nan = nan || std::isnan(w[j]);
        if (w[j] > 0) mass += static_cast<double>(w[j]);
        if (w[j] > 0) re -= static_cast<double>(w[j]) * std::log(static_cast<double>(w[j]));
        if (j < S) rd += static_cast<double>(w[j]) * (i > j ? i - j : j - i);
        rm = std::max(rm, static_cast<double>(w[j]));
      }
      if (zero) continue;
      if (c.attn_sinks && 1.0 - mass > 0.0) re -= (1.0 - mass) * std::log(1.0 - mass);
      if (nan) re = rd = rm = std::numeric_limits<double>::quiet_NaN();
      e += re;
      d += rd;
      m += rm;
      ++rows;
    }
    const double want[3] = {rows ? e / rows : NAN, rows ? d / rows : NAN, rows ? m / rows : NAN};
    const float got[3] = {s.entropy.data()[nh], s.distance.data()[nh], s.max_weight.data()[nh]};
    const char* names[3] = {"entropy", "distance", "max_weight"};
    for (int k = 0; k < 3; ++k) {
      const bool ok = std::isnan(want[k])
                          ? std::isnan(got[k])
                          : std::fabs(got[k] - want[k]) <= 1e-6 * std::fabs(want[k]) + 0x1p-147;
      if (!ok) {
        return std::string("head_stats.") + names[k] + "[" + std::to_string(nh) + "]: " +
               std::to_string(got[k]) + " vs float64 " + std::to_string(want[k]);
      }
    }
  }
  return "";
}

std::string MaskJson(const MaskView& m) {
  if (!m.present()) return "null";
  if (m.type == MaskType::kFloat) return TensorToJson(static_cast<const float*>(m.data), m.shape);
  // Bool: as TensorToJson nests, with true/false leaves.
  std::vector<float> as_float(m.size);
  const uint8_t* b = static_cast<const uint8_t*>(m.data);
  for (size_t i = 0; i < m.size; ++i) as_float[i] = b[i] ? 1.0f : 0.0f;
  std::string text = TensorToJson(as_float.data(), m.shape), out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '1') out += "true";
    else if (text[i] == '0') out += "false";
    else out += text[i];
  }
  return out;
}

// The failing call as a case document (docs/case-format.md), so that it can be replayed
// with `headscope run` or added to the case corpus. Only for calls whose views match their shapes.
std::string CaseJson(const MhaWeights& w, const Call& call) {
  const MhaConfig& c = w.config();
  auto dim = [](int64_t d) { return d > 0 ? std::to_string(d) : std::string("null"); };
  std::string j = "{\"name\": \"mha_fuzzer\", \"config\": {\"embed_dim\": " + Str(c.embed_dim) +
                  ", \"num_heads\": " + Str(c.num_heads) + ", \"num_kv_heads\": " +
                  dim(c.num_kv_heads) + ", \"bias\": " +
                  (c.bias ? "true" : "false") + ", \"add_bias_kv\": " +
                  (c.add_bias_kv ? "true" : "false") + ", \"add_zero_attn\": " +
                  (c.add_zero_attn ? "true" : "false") + ", \"kdim\": " + dim(c.kdim) +
                  ", \"vdim\": " + dim(c.vdim) + ", \"batch_first\": " +
                  (c.batch_first ? "true" : "false") + "},\n\"state_dict\": {";
  bool first = true;
  for (const ParamSpec& s : ExpectedParams(c)) {
    if (!w.Has(s.param)) continue;
    j += std::string(first ? "" : ",") + "\n  \"" + s.name +
         "\": " + TensorToJson(w.Get(s.param), s.shape);
    first = false;
  }
  j += "},\n\"inputs\": {\"query\": " + TensorToJson(call.query.data, call.query.shape) +
       ",\n  \"key\": " + TensorToJson(call.key.data, call.key.shape) +
       ",\n  \"value\": " + TensorToJson(call.value.data, call.value.shape) +
       ",\n  \"key_padding_mask\": " + MaskJson(call.options.key_padding_mask) +
       ",\n  \"attn_mask\": " + MaskJson(call.options.attn_mask) +
       ",\n  \"need_weights\": " + (call.options.need_weights ? "true" : "false") +
       ", \"average_attn_weights\": " + (call.options.average_attn_weights ? "true" : "false") +
       ", \"is_causal\": " + (call.options.is_causal ? "true" : "false") +
       ", \"alibi\": " + (call.options.alibi ? "true" : "false") +
       ", \"window\": " + Str(call.options.window) + "}}";
  return j;
}

bool BitEqual(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  }
  return true;
}

// `big`: the call may exceed the byte limit (lowered limit, absurd shapes, huge config).
void CheckTrace(MultiheadAttention& mha, const Call& call, const Status& fs,
                const ForwardResult& fast, bool big) {
  AttentionTrace trace;
  const Status ts = mha.Trace(call.query, call.key, call.value, call.options, &trace);
  const std::string& ctx = call.description;
  if (ts.code() != fs.code()) {
    // Trace keeps every stage, so it needs more bytes than Forward, and checks them before the
    // weights are known complete: only the limit may differ.
    const bool limit = ts.code() == StatusCode::kResourceExhausted && big &&
                       (fs.ok() || fs.code() == StatusCode::kMissingParameter);
    if (!limit) {
      fuzz::Fail("mha_fuzzer", "Trace returned " + ts.ToString() + ", Forward " + fs.ToString(),
                 ctx);
    }
    return;
  }
  if (!ts.ok()) return;
  if (trace.output.shape != fast.output_shape ||
      trace.output.data.size() != fast.output.size() ||
      !BitEqual(trace.output.data.data(), fast.output.data(), fast.output.size())) {
    fuzz::Fail("mha_fuzzer", "Trace's output differs from Forward's", ctx);
  }
  const TraceTensor* all[] = {&trace.q, &trace.k, &trace.v, &trace.scores, &trace.weights,
                              &trace.head_outputs, &trace.concat, &trace.output};
  for (const TraceTensor* t : all) {
    if (t->shape.NumElements() < 0 ||
        static_cast<uint64_t>(t->shape.NumElements()) != t->data.size()) {
      fuzz::Fail("mha_fuzzer", "trace tensor of shape " + t->shape.ToString() + " holds " +
                 Str(static_cast<int64_t>(t->data.size())) + " floats", ctx);
    }
  }
  if (call.options.need_weights && !call.options.average_attn_weights) {
    if (trace.weights.shape != fast.weights_shape ||
        !BitEqual(trace.weights.data.data(), fast.weights.data(), fast.weights.size())) {
      fuzz::Fail("mha_fuzzer", "Trace's per-head weights differ from Forward's", ctx);
    }
  }
}

// A small valid call; the module must run it (and match the reference) whatever came before.
void CheckStillWorks(MultiheadAttention& mha, const MhaWeights& ref_weights,
                     const std::string& ctx) {
  const MhaConfig& c = mha.config();
  const int64_t E = c.embed_dim, kd = c.key_dim(), vd = c.value_dim();
  std::vector<float> q(static_cast<size_t>(3 * E)), k(static_cast<size_t>(2 * kd)),
      v(static_cast<size_t>(2 * vd));
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 3) * 0.5f - 0.5f;
  const TensorView qv{q.data(), {3, E}, q.size()}, kv{k.data(), {2, kd}, k.size()},
      vv{v.data(), {2, vd}, v.size()};
  ForwardOptions o;
  o.average_attn_weights = false;
  ForwardResult fast, ref;
  const Status fs = mha.Forward(qv, kv, vv, o, &fast);
  const Status rs = ReferenceForward(ref_weights, qv, kv, vv, o, &ref);
  if (!fs.ok() || !rs.ok()) {
    fuzz::Fail("mha_fuzzer", "a valid call after the fuzzed ones failed: fast " + fs.ToString() +
               ", reference " + rs.ToString(), ctx);
  }
  // Weights are from the input and may be NaN/inf; only shapes and NaN/inf placement then.
  fuzz::Magnitudes mag;
  for (const ParamSpec& s : ExpectedParams(c)) {
    const float* w = ref_weights.Get(s.param);
    for (int64_t i = 0; i < s.shape.NumElements(); ++i) mag.Weight(w[i]);
  }
  for (float x : q) mag.Input(x);
  const std::string why = fuzz::CompareResults(
      fast, ref, mag.tier(static_cast<double>(std::max({E, kd, vd})),
                          static_cast<double>(c.head_dim())),
      nullptr);
  if (!why.empty()) fuzz::Fail("mha_fuzzer", "valid call after the fuzzed ones: " + why, ctx);
}

int Run(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  SetMaxCallBytes(kFuzzCallBytes);
  g_target = g_targets[0];
  if (g_targets.size() > 1) {
    g_target = g_targets[fdp.ConsumeIntegralInRange<size_t>(0, g_targets.size() - 1)];
    hwy::SetSupportedTargetsForTest(g_target);
  }

  const ConfigDraw cd = DrawConfig(fdp);
  const MhaConfig& c = cd.config;
  std::string context = ConfigString(c);
  std::unique_ptr<MultiheadAttention> mha;
  const Status cs = MultiheadAttention::Create(c, &mha);
  if (cd.invalid) {
    if (cs.ok() || cs.code() != StatusCode::kInvalidArgument || !fuzz::IsClearError(cs)) {
      fuzz::Fail("mha_fuzzer", "Create of an invalid config returned " + cs.ToString(), context);
    }
    if (ValidateConfig(c).ok()) fuzz::Fail("mha_fuzzer", "ValidateConfig accepted it", context);
    // The reference validates the config itself (through PlanCall).
    const MhaWeights w(c);
    const float x[4] = {1, 2, 3, 4};
    const TensorView t{x, {1, 4}, 4};
    ForwardResult r;
    const Status rs = ReferenceForward(w, t, t, t, ForwardOptions(), &r);
    if (rs.code() != StatusCode::kInvalidArgument) {
      fuzz::Fail("mha_fuzzer", "ReferenceForward of an invalid config returned " + rs.ToString(),
                 context);
    }
    return 0;
  }
  if (!cs.ok()) fuzz::Fail("mha_fuzzer", "Create of a valid config failed: " + cs.ToString(),
                           context);

  fuzz::Magnitudes mag;
  Values values(&fdp, fdp.ConsumeIntegralInRange<int>(0, 3) == 0, &mag);
  MhaWeights ref_weights(c);
  const Loader loader{mha.get(), &ref_weights, &context};
  std::vector<bool> loaded;
  const bool complete = LoadStateDict(fdp, values, loader, cd.huge, &loaded);
  if (mha->weights().complete() != complete || ref_weights.complete() != complete) {
    fuzz::Fail("mha_fuzzer", "complete() disagrees with what was loaded", context);
  }

  ForwardResult fast, ref;  // reused across calls, as callers are told to
  const int calls = fdp.ConsumeIntegralInRange<int>(1, 3);
  for (int i = 0; i < calls; ++i) {
    Call call;
    DrawCall(fdp, values, c, &call);
    bool limit_lowered = false;
    if (fdp.ConsumeIntegralInRange<int>(0, 15) == 0) {
      SetMaxCallBytes(fdp.ConsumeIntegralInRange<size_t>(0, 1 << 16));
      limit_lowered = true;
      call.description += " limit " + Str(static_cast<int64_t>(MaxCallBytes()));
    }
    if (fdp.ConsumeIntegralInRange<int>(0, 15) == 0) {
      mha->ReleaseWorkspace();  // regrows on the next call
      if (mha->workspace_bytes() != 0) fuzz::Fail("mha_fuzzer", "workspace kept", call.description);
    }
    const std::string& ctx = call.description;
    const Status fs = mha->Forward(call.query, call.key, call.value, call.options, &fast);
    const Status rs =
        ReferenceForward(ref_weights, call.query, call.key, call.value, call.options, &ref);

    if (!fs.ok() && !fuzz::IsClearError(fs)) {
      fuzz::Fail("mha_fuzzer", "unclear error: " + fs.ToString(), ctx);
    }
    if (!rs.ok() && !fuzz::IsClearError(rs)) {
      fuzz::Fail("mha_fuzzer", "unclear reference error: " + rs.ToString(), ctx);
    }
    if (fs.code() != rs.code()) {
      // Forward enforces the call byte limit (before checking the weights are complete); the
      // reference has none.
      const bool big = limit_lowered || call.absurd || cd.huge;
      const bool limit = fs.code() == StatusCode::kResourceExhausted && big &&
                         (rs.ok() || rs.code() == StatusCode::kMissingParameter);
      if (!limit) {
        fuzz::Fail("mha_fuzzer", "status differs: fast " + fs.ToString() + ", reference " +
                   rs.ToString(), ctx);
      }
    }
    if (call.valid && complete && !limit_lowered && !call.absurd && !fs.ok()) {
      fuzz::Fail("mha_fuzzer", "a valid call failed: " + fs.ToString(), ctx);
    }
    if (call.valid && !complete && !limit_lowered && !call.absurd &&
        fs.code() != StatusCode::kMissingParameter) {
      fuzz::Fail("mha_fuzzer", "a valid call with missing weights returned " + fs.ToString(),
                 ctx);
    }
    if (call.definitely_invalid && (fs.ok() || rs.ok())) {
      fuzz::Fail("mha_fuzzer", "an invalid call succeeded (fast " + fs.ToString() +
                 ", reference " + rs.ToString() + ")", ctx);
    }
    if (fs.ok() && rs.ok()) {
      const double in_dim =
          static_cast<double>(std::max({c.embed_dim, c.key_dim(), c.value_dim()}));
      const fuzz::Tier tier = mag.tier(in_dim, static_cast<double>(c.head_dim()));
      const std::string why = fuzz::CompareResults(fast, ref, tier, &g_worst);
      if (tier != fuzz::Tier::kExtreme) {
        const int64_t L = call.query.shape.rank == 3 && !c.batch_first ? call.query.shape[0]
                          : call.query.shape[call.query.shape.rank - 2];
        g_alibi_calls += call.options.alibi;
        g_window_calls += call.options.window > 0;
        g_window_tiled_calls += call.options.window > 0 && L > 16;
      }
      if (!why.empty()) {
        std::fprintf(stderr, "mha_fuzzer: SIMD target %s; the call as a case document:\n%s\n",
                     hwy::TargetName(g_target),
                     CaseJson(ref_weights, call).c_str());
        fuzz::Fail("mha_fuzzer", "fast path and reference disagree: " + why +
                   (values.specials() ? " (specials on)" : ""), ctx);
      }
      if (fast.output_shape != call.query.shape) {
        fuzz::Fail("mha_fuzzer", "output shape " + fast.output_shape.ToString() +
                   " is not the query's", ctx);
      }
      if (fast.has_weights() != call.options.need_weights) {
        fuzz::Fail("mha_fuzzer", "weights returned iff need_weights", ctx);
      }
      if (fast.head_stats.present() != call.options.head_stats ||
          ref.head_stats.shape != fast.head_stats.shape) {
        fuzz::Fail("mha_fuzzer", "head_stats returned iff asked, in the reference's shape", ctx);
      }
      if (call.options.need_weights && !call.options.average_attn_weights) {
        const std::string stats = HeadStatsMismatch(fast, c);
        if (!stats.empty()) fuzz::Fail("mha_fuzzer", stats, ctx);
      }
    }
    if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) {
      CheckTrace(*mha, call, fs, fast, limit_lowered || call.absurd || cd.huge);
    }
    SetMaxCallBytes(kFuzzCallBytes);
  }

  // The module keeps working: load what is missing, then a valid call must succeed.
  if (!cd.huge) {
    fuzz::Magnitudes unused;
    Values fill(&fdp, false, &unused);
    for (const ParamSpec& spec : ExpectedParams(c)) {
      if (!loaded[static_cast<size_t>(spec.param)]) loader.Load(spec, ParamValues(fill, spec));
    }
    CheckStillWorks(*mha, ref_weights, context);
  }
  return 0;
}

}  // namespace
}  // namespace headscope

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  headscope::g_targets = hwy::SupportedAndGeneratedTargets();
  std::fprintf(stderr, "mha_fuzzer: each input picks one of the SIMD targets:");
  for (int64_t t : headscope::g_targets) std::fprintf(stderr, " %s", hwy::TargetName(t));
  std::fprintf(stderr, "\n");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  headscope::Run(data, size);
  hwy::SetSupportedTargetsForTest(0);  // back to the best target
  return 0;
}
