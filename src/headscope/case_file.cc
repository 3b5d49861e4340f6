#include "headscope/case_file.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "headscope/reference.h"
#include "nlohmann/json.hpp"

namespace headscope {
namespace {

// Parsed without exceptions (allow_exceptions = false) and read only through checked accessors,
// so a malformed document is a Status, never a throw (WebAssembly builds have no exceptions).
using Json = nlohmann::json;

Status ParseError(const std::string& path, const std::string& what) {
  return Status(StatusCode::kParseError, path + ": " + what);
}

std::string Describe(const Json& j) {
  std::string text = j.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(j.type_name()) + " " + text;
}

// A float leaf: a JSON number, or one of the strings the format uses for non-finite values.
bool LeafToFloat(const Json& j, float* out) {
  if (j.is_number()) {
    *out = static_cast<float>(j.get<double>());
    return true;
  }
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    constexpr float kInf = std::numeric_limits<float>::infinity();
    if (s == "inf" || s == "Infinity" || s == "+inf") *out = kInf;
    else if (s == "-inf" || s == "-Infinity") *out = -kInf;
    else if (s == "nan" || s == "NaN") *out = std::numeric_limits<float>::quiet_NaN();
    else return false;
    return true;
  }
  return false;
}

// Walks a nested array, fixing the shape from the first path down and checking that every
// sibling agrees (a ragged array is an error naming where). Leaves are collected in order.
class ArrayWalker {
 public:
  Status Walk(const Json& j, const std::string& path) {
    HEADSCOPE_RETURN_IF_ERROR(Visit(j, path, 0));
    if (leaf_depth_ < 0) shape_.rank = max_depth_;  // only empty arrays: e.g. [[], []] is [2, 0]
    return Status::Ok();
  }
  const Shape& shape() const { return shape_; }
  const std::vector<const Json*>& leaves() const { return leaves_; }

 private:
  Status Visit(const Json& j, const std::string& path, int depth) {
    if (!j.is_array()) {
      if (leaf_depth_ < 0) {
        // An earlier sibling was an array reaching this depth (e.g. the [] of [[], 1]).
        if (max_depth_ > depth)
          return ParseError(path, "expected an array like its siblings, got " + Describe(j));
        leaf_depth_ = depth;
        shape_.rank = depth;
      } else if (leaf_depth_ != depth) {
        return ParseError(path, "expected a nested array of depth " +
                                    std::to_string(leaf_depth_) + " like its siblings, got " +
                                    Describe(j));
      }
      leaves_.push_back(&j);
      return Status::Ok();
    }
    if (leaf_depth_ >= 0 && depth >= leaf_depth_) {
      return ParseError(path, "expected a value like its siblings, got " + Describe(j));
    }
    if (depth >= Shape::kMaxRank) {
      return ParseError(path, "arrays nested deeper than " + std::to_string(Shape::kMaxRank) +
                                  " levels");
    }
    const int64_t size = static_cast<int64_t>(j.size());
    if (depth >= max_depth_) {
      max_depth_ = depth + 1;
      shape_.dims[depth] = size;
    } else if (shape_.dims[depth] != size) {
      return ParseError(path, "expected " + std::to_string(shape_.dims[depth]) +
                                  " elements like its siblings, got " + std::to_string(size));
    }
    for (size_t i = 0; i < j.size(); ++i) {
      HEADSCOPE_RETURN_IF_ERROR(Visit(j[i], path + "[" + std::to_string(i) + "]", depth + 1));
    }
    return Status::Ok();
  }

  Shape shape_;
  int leaf_depth_ = -1;
  int max_depth_ = 0;
  std::vector<const Json*> leaves_;
};

// "inputs.query[1][2]": where the flat element `index` of a tensor of `shape` sits.
std::string ElementPath(const std::string& path, const Shape& shape, size_t index) {
  std::string suffix;
  for (int axis = shape.rank - 1; axis >= 0 && axis < Shape::kMaxRank; --axis) {
    const size_t dim = static_cast<size_t>(shape.dims[axis]);
    suffix = "[" + std::to_string(dim ? index % dim : 0) + "]" + suffix;
    index = dim ? index / dim : 0;
  }
  return path + suffix;
}

Status ParseFloatTensor(const Json& j, const std::string& path, CaseTensor* out) {
  if (!j.is_array()) return ParseError(path, "expected a nested array of numbers, got " + Describe(j));
  ArrayWalker walker;
  HEADSCOPE_RETURN_IF_ERROR(walker.Walk(j, path));
  out->present = true;
  out->shape = walker.shape();
  out->data.resize(walker.leaves().size());
  for (size_t i = 0; i < walker.leaves().size(); ++i) {
    if (!LeafToFloat(*walker.leaves()[i], &out->data[i])) {
      return ParseError(ElementPath(path, out->shape, i),
                        "expected a number (or \"inf\", \"-inf\", \"nan\"), got " +
                            Describe(*walker.leaves()[i]));
    }
  }
  return Status::Ok();
}

Status ParseMask(const Json& j, const std::string& path, CaseMask* out) {
  if (j.is_null()) return Status::Ok();
  if (!j.is_array()) {
    return ParseError(path, "expected null or a nested array of booleans or numbers, got " +
                                Describe(j));
  }
  ArrayWalker walker;
  HEADSCOPE_RETURN_IF_ERROR(walker.Walk(j, path));
  const auto& leaves = walker.leaves();
  const bool is_bool = !leaves.empty() && leaves[0]->is_boolean();
  out->type = is_bool ? MaskType::kBool : MaskType::kFloat;
  out->shape = walker.shape();
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Json& leaf = *leaves[i];
    if (is_bool) {
      if (!leaf.is_boolean()) {
        return ParseError(ElementPath(path, out->shape, i),
                          "expected a boolean like the first element, got " + Describe(leaf));
      }
      out->bools.push_back(leaf.get<bool>() ? 1 : 0);
    } else {
      float v;
      if (!LeafToFloat(leaf, &v)) {
        return ParseError(ElementPath(path, out->shape, i),
                          "expected a number like the first element, got " + Describe(leaf));
      }
      out->floats.push_back(v);
    }
  }
  return Status::Ok();
}

Status GetBool(const Json& obj, const char* key, const std::string& path, bool* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();  // keeps the default
  if (!it->is_boolean()) {
    return ParseError(path + "." + key, "expected true or false, got " + Describe(*it));
  }
  *out = it->get<bool>();
  return Status::Ok();
}

// Sizes: positive integers (an integral float such as 4.0 is accepted; 4.5 is not).
Status GetSize(const Json& obj, const char* key, const std::string& path, bool nullable,
               int64_t* out) {
  auto it = obj.find(key);
  const std::string where = path + "." + key;
  if (it == obj.end() || it->is_null()) {
    if (nullable) return Status::Ok();
    return ParseError(where, "required, expected a positive integer");
  }
  const double v = it->is_number() ? it->get<double>() : std::nan("");
  if (!it->is_number() || !(v >= 1) || v > static_cast<double>(kMaxDim) || v != std::floor(v)) {
    return ParseError(where, std::string("expected ") + (nullable ? "null or " : "") +
                                 "an integer in [1, " + std::to_string(kMaxDim) + "], got " +
                                 Describe(*it));
  }
  *out = static_cast<int64_t>(v);
  return Status::Ok();
}

Status CheckKeys(const Json& obj, const std::string& path,
                 std::initializer_list<const char*> allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    std::string list;
    for (const char* a : allowed) {
      known |= it.key() == a;
      list += list.empty() ? a : std::string(", ") + a;
    }
    if (!known) return ParseError(path + "." + it.key(), "unknown key (expected one of " + list + ")");
  }
  return Status::Ok();
}

const Json* Member(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return (it == obj.end() || it->is_null()) ? nullptr : &*it;
}

void AppendNumber(float v, std::string* out) {
  if (std::isnan(v)) {
    *out += "\"nan\"";
  } else if (std::isinf(v)) {
    *out += v > 0 ? "\"inf\"" : "\"-inf\"";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(v));  // round-trips a float
    *out += buf;
  }
}

void AppendNested(const float* data, const Shape& shape, int axis, size_t* index,
                  std::string* out) {
  if (axis >= shape.rank || axis >= Shape::kMaxRank) {
    AppendNumber(data[(*index)++], out);
    return;
  }
  *out += '[';
  for (int64_t i = 0; i < shape.dims[axis]; ++i) {
    if (i) *out += ", ";
    AppendNested(data, shape, axis + 1, index, out);
  }
  *out += ']';
}

// Compares one tensor; updates the worst relative error, returns false with `detail` on failure.
bool CompareTensor(const char* name, const float* got, const Shape& got_shape,
                   const CaseTensor& want, double tolerance, CaseComparison* cmp) {
  if (got_shape != want.shape) {
    cmp->detail = std::string(name) + ": shape " + got_shape.ToString() + ", expected " +
                  want.shape.ToString();
    return false;
  }
  double scale = 0;
  for (float e : want.data) {
    if (std::isfinite(e)) scale = std::max(scale, std::fabs(static_cast<double>(e)));
  }
  if (scale == 0) scale = 1;  // all zeros: the error is absolute
  double worst = 0;
  size_t worst_index = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    const double g = got[i], e = want.data[i];
    if (!std::isfinite(e) || !std::isfinite(g)) {
      const bool same = (std::isnan(e) && std::isnan(g)) || (g == e);
      if (!same) {
        cmp->detail = std::string(name) + "[" + std::to_string(i) + "]: got " +
                      std::to_string(g) + ", expected " + std::to_string(e);
        return false;
      }
      continue;
    }
    const double err = std::fabs(g - e) / scale;
    if (err > worst) {
      worst = err;
      worst_index = i;
    }
  }
  cmp->max_relative_error = std::max(cmp->max_relative_error, worst);
  if (worst > tolerance) {
    char buf[200];
    std::snprintf(buf, sizeof(buf), "%s[%zu]: got %.9g, expected %.9g (relative error %.3g > %.3g)",
                  name, worst_index, static_cast<double>(got[worst_index]),
                  static_cast<double>(want.data[worst_index]), worst, tolerance);
    cmp->detail = buf;
    return false;
  }
  return true;
}

}  // namespace

MaskView CaseMask::view() const {
  switch (type) {
    case MaskType::kBool: return MaskView::Bool(bools.data(), shape, bools.size());
    case MaskType::kFloat: return MaskView::Float(floats.data(), shape, floats.size());
    case MaskType::kNone: break;
  }
  return MaskView();
}

ForwardOptions AttentionCase::options() const {
  ForwardOptions o;
  o.key_padding_mask = key_padding_mask.view();
  o.attn_mask = attn_mask.view();
  o.is_causal = is_causal;
  o.need_weights = need_weights;
  o.average_attn_weights = average_attn_weights;
  return o;
}

Status ParseCase(std::string_view text, AttentionCase* out) {
  const Json doc = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return ParseError("$", "not valid JSON");
  if (!doc.is_object()) return ParseError("$", "expected an object, got " + Describe(doc));
  AttentionCase c;
  if (const Json* name = Member(doc, "name")) {
    if (!name->is_string()) return ParseError("name", "expected a string, got " + Describe(*name));
    c.name = name->get<std::string>();
  }

  const Json* config = Member(doc, "config");
  if (config == nullptr || !config->is_object()) return ParseError("config", "expected an object");
  HEADSCOPE_RETURN_IF_ERROR(CheckKeys(*config, "config",
                                      {"embed_dim", "num_heads", "bias", "add_bias_kv",
                                       "add_zero_attn", "kdim", "vdim", "batch_first", "dropout"}));
  if (const Json* dropout = Member(*config, "dropout")) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      return ParseError("config.dropout", "headscope computes the forward pass without dropout; "
                                          "expected 0 or null, got " + Describe(*dropout));
    }
  }
  HEADSCOPE_RETURN_IF_ERROR(GetSize(*config, "embed_dim", "config", false, &c.config.embed_dim));
  HEADSCOPE_RETURN_IF_ERROR(GetSize(*config, "num_heads", "config", false, &c.config.num_heads));
  HEADSCOPE_RETURN_IF_ERROR(GetSize(*config, "kdim", "config", true, &c.config.kdim));
  HEADSCOPE_RETURN_IF_ERROR(GetSize(*config, "vdim", "config", true, &c.config.vdim));
  HEADSCOPE_RETURN_IF_ERROR(GetBool(*config, "bias", "config", &c.config.bias));
  HEADSCOPE_RETURN_IF_ERROR(GetBool(*config, "add_bias_kv", "config", &c.config.add_bias_kv));
  HEADSCOPE_RETURN_IF_ERROR(GetBool(*config, "add_zero_attn", "config", &c.config.add_zero_attn));
  HEADSCOPE_RETURN_IF_ERROR(GetBool(*config, "batch_first", "config", &c.config.batch_first));
  if (Status s = ValidateConfig(c.config); !s.ok()) {
    return Status(StatusCode::kParseError, "config." + s.message());
  }

  const Json* sd = Member(doc, "state_dict");
  if (sd == nullptr || !sd->is_object()) return ParseError("state_dict", "expected an object");
  for (auto it = sd->begin(); it != sd->end(); ++it) {
    CaseTensor t;
    HEADSCOPE_RETURN_IF_ERROR(ParseFloatTensor(*it, "state_dict." + it.key(), &t));
    c.state_dict.emplace_back(it.key(), std::move(t));
  }

  const Json* inputs = Member(doc, "inputs");
  if (inputs == nullptr || !inputs->is_object()) return ParseError("inputs", "expected an object");
  HEADSCOPE_RETURN_IF_ERROR(CheckKeys(*inputs, "inputs",
                                      {"query", "key", "value", "key_padding_mask", "attn_mask",
                                       "need_weights", "average_attn_weights", "is_causal"}));
  const Json* query = Member(*inputs, "query");
  if (query == nullptr) return ParseError("inputs.query", "required");
  HEADSCOPE_RETURN_IF_ERROR(ParseFloatTensor(*query, "inputs.query", &c.query));
  const Json* key = Member(*inputs, "key");
  const Json* value = Member(*inputs, "value");
  HEADSCOPE_RETURN_IF_ERROR(ParseFloatTensor(key ? *key : *query, "inputs.key", &c.key));
  HEADSCOPE_RETURN_IF_ERROR(ParseFloatTensor(value ? *value : *query, "inputs.value", &c.value));
  if (const Json* m = Member(*inputs, "key_padding_mask")) {
    HEADSCOPE_RETURN_IF_ERROR(ParseMask(*m, "inputs.key_padding_mask", &c.key_padding_mask));
  }
  if (const Json* m = Member(*inputs, "attn_mask")) {
    HEADSCOPE_RETURN_IF_ERROR(ParseMask(*m, "inputs.attn_mask", &c.attn_mask));
  }
  HEADSCOPE_RETURN_IF_ERROR(GetBool(*inputs, "need_weights", "inputs", &c.need_weights));
  HEADSCOPE_RETURN_IF_ERROR(
      GetBool(*inputs, "average_attn_weights", "inputs", &c.average_attn_weights));
  HEADSCOPE_RETURN_IF_ERROR(GetBool(*inputs, "is_causal", "inputs", &c.is_causal));

  if (const Json* expected = Member(doc, "expected")) {
    if (!expected->is_object()) {
      return ParseError("expected", "expected an object, got " + Describe(*expected));
    }
    const Json* output = Member(*expected, "output");
    if (output == nullptr) return ParseError("expected.output", "required when expected is given");
    HEADSCOPE_RETURN_IF_ERROR(ParseFloatTensor(*output, "expected.output", &c.expected_output));
    if (const Json* w = Member(*expected, "weights")) {
      HEADSCOPE_RETURN_IF_ERROR(ParseFloatTensor(*w, "expected.weights", &c.expected_weights));
    }
    c.has_expected = true;
  }
  *out = std::move(c);
  return Status::Ok();
}

Status ReadTextFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kIoError, path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status(StatusCode::kIoError, path + ": read error");
  *out = ss.str();
  return Status::Ok();
}

Status BuildModule(const AttentionCase& c, std::unique_ptr<MultiheadAttention>* out) {
  std::unique_ptr<MultiheadAttention> mha;
  HEADSCOPE_RETURN_IF_ERROR(MultiheadAttention::Create(c.config, &mha));
  for (const auto& [name, tensor] : c.state_dict) {
    HEADSCOPE_RETURN_IF_ERROR(mha->SetParameter(name, tensor.view()));
  }
  HEADSCOPE_RETURN_IF_ERROR(mha->weights().CheckComplete());
  *out = std::move(mha);
  return Status::Ok();
}

Status RunCase(const AttentionCase& c, CasePath path, ForwardResult* result) {
  std::unique_ptr<MultiheadAttention> mha;
  HEADSCOPE_RETURN_IF_ERROR(BuildModule(c, &mha));
  if (path == CasePath::kReference) {
    return ReferenceForward(mha->weights(), c.query.view(), c.key.view(), c.value.view(),
                            c.options(), result);
  }
  return mha->Forward(c.query.view(), c.key.view(), c.value.view(), c.options(), result);
}

CaseComparison CompareWithExpected(const AttentionCase& c, const ForwardResult& result,
                                   double tolerance) {
  CaseComparison cmp;
  if (!c.has_expected) {
    cmp.detail = "the case has no expected values";
    return cmp;
  }
  if (!CompareTensor("output", result.output.data(), result.output_shape, c.expected_output,
                     tolerance, &cmp)) {
    return cmp;
  }
  if (c.expected_weights.present != result.has_weights()) {
    cmp.detail = std::string("weights: ") + (result.has_weights() ? "returned" : "null") +
                 ", expected " + (c.expected_weights.present ? "an array" : "null");
    return cmp;
  }
  if (result.has_weights() && !CompareTensor("weights", result.weights.data(),
                                             result.weights_shape, c.expected_weights,
                                             tolerance, &cmp)) {
    return cmp;
  }
  cmp.ok = true;
  return cmp;
}

std::string TensorToJson(const float* data, const Shape& shape) {
  std::string out;
  size_t index = 0;
  AppendNested(data, shape, 0, &index, &out);
  return out;
}

std::string ResultToJson(const ForwardResult& result) {
  std::string out = "{\"output\": " + TensorToJson(result.output.data(), result.output_shape);
  out += ", \"weights\": ";
  out += result.has_weights() ? TensorToJson(result.weights.data(), result.weights_shape)
                              : std::string("null");
  return out + "}";
}

}  // namespace headscope
