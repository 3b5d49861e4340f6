// The JSON case format of ../shared/spec/case-format.md (a PyTorch state_dict plus the forward
// arguments and, optionally, what the call must return): parsing with errors that name the JSON
// path, running a case, comparing with `expected`, and writing results back as JSON.
#ifndef HEADSCOPE_CASE_FILE_H_
#define HEADSCOPE_CASE_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headscope/config.h"
#include "headscope/mha.h"
#include "headscope/status.h"
#include "headscope/tensor.h"

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
  bool has_expected = false;
  CaseTensor expected_output;
  CaseTensor expected_weights;  // present = false when expected.weights is null

  ForwardOptions options() const;  // mask views point into this case
};

// Parses a case document. Errors are kParseError naming the JSON path ("inputs.query[1][2]:
// expected a number, got string \"x\"").
Status ParseCase(std::string_view json_text, AttentionCase* out);

Status ReadTextFile(const std::string& path, std::string* out);

// Creates the module of the case's config and loads its state_dict.
Status BuildModule(const AttentionCase& c, std::unique_ptr<MultiheadAttention>* out);

enum class CasePath { kFast, kReference };
Status RunCase(const AttentionCase& c, CasePath path, ForwardResult* result);

// got vs expected, per tensor: shapes equal, NaN and infinities at the same places, and
// relative error = max |got - expected| / max |expected| (finite entries) within `tolerance`.
struct CaseComparison {
  bool ok = false;
  double max_relative_error = 0;  // worst of output and weights
  std::string detail;             // why it failed: which tensor, index, values
};
CaseComparison CompareWithExpected(const AttentionCase& c, const ForwardResult& result,
                                   double tolerance);

// {"output": [...], "weights": [...] | null} with PyTorch's shapes as nested arrays; non-finite
// numbers as the strings "inf", "-inf", "nan", as the case format writes them.
std::string ResultToJson(const ForwardResult& result);
std::string TensorToJson(const float* data, const Shape& shape);

}  // namespace headscope

#endif  // HEADSCOPE_CASE_FILE_H_
