// libFuzzer harness for the case-file format: ParseCase on arbitrary bytes; documents that parse
// are built and run on both paths (RunCase: the Highway fast path and the Eigen reference).
//
// Invariants (a violation aborts, so libFuzzer reports it with the input):
//   - nothing crashes, leaks or hits undefined behaviour (ASan, LSan, UBSan), whatever the bytes;
//   - a document that does not parse gets PARSE_ERROR with a message naming where ("CODE: path:
//     what");
//   - a parsed document is consistent: every tensor and mask holds exactly as many values as its
//     shape says (a ragged array is a parse error, not a tensor with a wrong shape);
//   - both paths return the same status code, every error is "CODE: message";
//   - when both succeed: the same shapes, NaN/inf at the same places and values within
//     fuzz::kTolerance when the document's values are moderate (fuzz_util.h);
//   - a parse error's message is one line of bounded length;
//   - ResultToJson's text is JSON whose "output" (and "weights", or null) nest like the shapes,
//     and no longer than ResultJsonBytesBound says;
//   - CompareWithExpected runs on whatever "expected" holds;
//   - after a failed run, the module BuildModule made still runs a valid call.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "headscope/case_file.h"
#include "headscope/mha.h"
#include "headscope/reference.h"
#include "headscope/status.h"
#include "headscope/tensor.h"
#include "headscope/weights.h"
#include "nlohmann/json.hpp"

namespace headscope {
namespace {

constexpr const char* kName = "case_fuzzer";
fuzz::Worst g_worst;

struct WorstReport {
  ~WorstReport() {
    if (g_worst.compared > 0) {
      std::fprintf(stderr, "case_fuzzer: worst fast-vs-reference relative error %.3g over %ld "
                   "value comparisons (tolerance %g)\n", g_worst.error, g_worst.compared,
                   fuzz::kTolerance);
    }
  }
} g_worst_report;

void CheckTensor(const char* what, const CaseTensor& t, const std::string& ctx) {
  if (!t.present) return;
  const int64_t n = t.shape.NumElements();
  if (n < 0 || static_cast<uint64_t>(n) != t.data.size()) {
    fuzz::Fail(kName, std::string("parsed ") + what + " has shape " + t.shape.ToString() +
               " but " + std::to_string(t.data.size()) + " values", ctx);
  }
}

void CheckMask(const char* what, const CaseMask& m, const std::string& ctx) {
  if (m.type == MaskType::kNone) return;
  const int64_t n = m.shape.NumElements();
  const size_t size = m.type == MaskType::kBool ? m.bools.size() : m.floats.size();
  if (n < 0 || static_cast<uint64_t>(n) != size) {
    fuzz::Fail(kName, std::string("parsed ") + what + " has shape " + m.shape.ToString() +
               " but " + std::to_string(size) + " values", ctx);
  }
}

// True if `j` nests as `shape` (only checked where no dimension is 0: "[]" does not say how
// deep an empty array is).
bool NestsAs(const nlohmann::json& j, const Shape& shape, int axis) {
  if (axis == shape.rank) return j.is_number() || j.is_string();
  if (!j.is_array() || static_cast<int64_t>(j.size()) != shape.dims[axis]) return false;
  for (const auto& e : j) {
    if (!NestsAs(e, shape, axis + 1)) return false;
  }
  return true;
}

bool HasZeroDim(const Shape& s) {
  for (int i = 0; i < s.rank; ++i) {
    if (s.dims[i] == 0) return true;
  }
  return false;
}

void CheckJson(const ForwardResult& r, const std::string& ctx) {
  const std::string text = ResultToJson(r);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("output") || !j.contains("weights")) {
    fuzz::Fail(kName, "ResultToJson is not the expected JSON: " + text.substr(0, 200), ctx);
  }
  if (!HasZeroDim(r.output_shape) && !NestsAs(j["output"], r.output_shape, 0)) {
    fuzz::Fail(kName, "ResultToJson's output does not nest as " + r.output_shape.ToString(), ctx);
  }
  if (r.has_weights() != !j["weights"].is_null()) {
    fuzz::Fail(kName, "ResultToJson's weights null iff the result has none", ctx);
  }
  if (r.has_weights() && !HasZeroDim(r.weights_shape) &&
      !NestsAs(j["weights"], r.weights_shape, 0)) {
    fuzz::Fail(kName, "ResultToJson's weights do not nest as " + r.weights_shape.ToString(), ctx);
  }
}

fuzz::Tier TierOf(const AttentionCase& c) {
  fuzz::Magnitudes mag;
  for (const auto& [name, t] : c.state_dict) {
    const bool bias = name.find("bias") != std::string::npos;
    for (float x : t.data) bias ? mag.Bias(x) : mag.Weight(x);
  }
  for (const CaseTensor* t : {&c.query, &c.key, &c.value}) {
    for (float x : t->data) mag.Input(x);
  }
  for (const CaseMask* m : {&c.key_padding_mask, &c.attn_mask}) {
    for (float x : m->floats) mag.Mask(x);
  }
  const MhaConfig& k = c.config;
  const double in_dim = static_cast<double>(std::max({k.embed_dim, k.key_dim(), k.value_dim()}));
  return mag.tier(in_dim, static_cast<double>(k.head_dim()));
}

void CheckStillWorks(MultiheadAttention& mha, const std::string& ctx) {
  const MhaConfig& c = mha.config();
  const size_t E = static_cast<size_t>(c.embed_dim), kd = static_cast<size_t>(c.key_dim()),
               vd = static_cast<size_t>(c.value_dim());
  std::vector<float> q(2 * E, 0.5f), k(kd, -0.25f), v(vd, 1.0f);
  ForwardResult r;
  const Status s =
      mha.Forward({q.data(), {2, c.embed_dim}, q.size()}, {k.data(), {1, c.key_dim()}, k.size()},
                  {v.data(), {1, c.value_dim()}, v.size()}, ForwardOptions(), &r);
  if (!s.ok()) fuzz::Fail(kName, "a valid call after a failed run failed: " + s.ToString(), ctx);
}

void Run(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  AttentionCase c;
  const Status ps = ParseCase(text, &c);
  if (!ps.ok()) {
    if (ps.code() != StatusCode::kParseError || !fuzz::IsClearError(ps)) {
      fuzz::Fail(kName, "ParseCase returned " + ps.ToString(), "parsing");
    }
    // One line of bounded length, whatever the bytes (keys, strings and tokens are abbreviated).
    if (ps.message().find('\n') != std::string::npos || ps.message().size() > 2000) {
      fuzz::Fail(kName, "ParseCase's message is not one short line: " +
                            ps.message().substr(0, 300), "parsing");
    }
    return;
  }
  const std::string ctx = "case '" + c.name.substr(0, 40) + "'";
  CheckTensor("query", c.query, ctx);
  CheckTensor("key", c.key, ctx);
  CheckTensor("value", c.value, ctx);
  CheckTensor("expected.output", c.expected_output, ctx);
  CheckTensor("expected.weights", c.expected_weights, ctx);
  for (const auto& [name, t] : c.state_dict) CheckTensor(name.c_str(), t, ctx);
  CheckMask("key_padding_mask", c.key_padding_mask, ctx);
  CheckMask("attn_mask", c.attn_mask, ctx);

  ForwardResult fast, ref;
  const Status fs = RunCase(c, CasePath::kFast, &fast);
  const Status rs = RunCase(c, CasePath::kReference, &ref);
  if (!fs.ok() && !fuzz::IsClearError(fs)) fuzz::Fail(kName, "unclear error " + fs.ToString(), ctx);
  if (!rs.ok() && !fuzz::IsClearError(rs)) fuzz::Fail(kName, "unclear error " + rs.ToString(), ctx);
  if (fs.code() != rs.code()) {
    fuzz::Fail(kName, "status differs: fast " + fs.ToString() + ", reference " + rs.ToString(),
               ctx);
  }
  if (fs.ok()) {
    const std::string why = fuzz::CompareResults(fast, ref, TierOf(c), &g_worst);
    if (!why.empty()) fuzz::Fail(kName, "fast path and reference disagree: " + why, ctx);
    CheckJson(fast, ctx);
    // The CLIs refuse a result from this bound before computing it: it must never be too low.
    if (ResultToJson(fast).size() + 1 > ResultJsonBytesBound(c)) {
      fuzz::Fail(kName, "ResultJsonBytesBound " + std::to_string(ResultJsonBytesBound(c)) +
                            " is below the JSON's " + std::to_string(ResultToJson(fast).size() + 1) +
                            " bytes", ctx);
    }
    if (c.has_expected) {
      (void)CompareWithExpected(c, fast, 1e-4);
      (void)CompareWithExpected(c, ref, 1e-4);
    }
    return;
  }
  // The run failed: if the module itself was built, it must still work.
  std::unique_ptr<MultiheadAttention> mha;
  if (BuildModule(c, &mha).ok()) CheckStillWorks(*mha, ctx);
}

}  // namespace
}  // namespace headscope

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  headscope::Run(data, size);
  return 0;
}
