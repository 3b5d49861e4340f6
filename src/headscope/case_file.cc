#include "headscope/case_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>

#include "headscope/reference.h"
#include "headscope/schema.h"
#include "nlohmann/json.hpp"

namespace headscope {
namespace {

// Built by our own SAX handler (BoundedDomBuilder below) and read only through checked accessors,
// so a malformed document is a Status, never a throw (WebAssembly builds have no exceptions).
using Json = nlohmann::json;

Status ParseError(const std::string& path, const std::string& what) {
  return Status(StatusCode::kParseError, path + ": " + what);
}

// The first `max_bytes` bytes of UTF-8 `s`, never cutting a code point in two (a cut one would
// make the message invalid UTF-8, and nlohmann's dump() throw).
std::string CutUtf8(const std::string& s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end);
}

// Compact JSON of `j`, stopping soon after `budget` characters: error messages show the start
// of a value without serializing all of it (a state_dict can be hundreds of megabytes). The
// recursion is bounded by kMaxJsonDepth, which the parser enforces.
void AppendBrief(const Json& j, size_t budget, std::string* out) {
  if (out->size() > budget) return;
  if (j.is_array() || j.is_object()) {
    *out += j.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) *out += ',';
      first = false;
      if (j.is_object()) {
        AppendBrief(Json(CutUtf8(it.key(), budget)), budget, out);
        *out += ':';
      }
      AppendBrief(*it, budget, out);
      if (out->size() > budget) return;
    }
    *out += j.is_array() ? ']' : '}';
  } else if (j.is_string()) {
    const Json cut(CutUtf8(j.get_ref<const std::string&>(), budget + 1));
    *out += cut.dump(-1, ' ', false, Json::error_handler_t::replace);
  } else {
    *out += j.dump();
  }
}

std::string Describe(const Json& j) {
  std::string text;
  AppendBrief(j, 40, &text);
  if (text.size() > 40) text = CutUtf8(text, 37) + "...";
  return std::string(j.type_name()) + " " + text;
}

// A key as it appears in a JSON path: QuoteInput's (at most 64 code points, then "...", control
// and bidirectional characters written as \uXXXX), so that a hostile key cannot make a message
// huge or break it over lines. web/lib/case.js writes keys the same way.
std::string KeyInPath(const std::string& key) { return QuoteInput(key); }

std::string MemberPath(const std::string& parent, const std::string& key) {
  return parent + "." + KeyInPath(key);
}

// Builds the DOM as nlohmann's own dom parser does, and enforces what the format needs on the
// way, stopping the parse at the first violation:
//   - at most kMaxJsonDepth nested arrays/objects: deeper documents used to reach recursive code
//     (a 100,000-level case crashed the CLI with a stack overflow) and the format needs 7;
//   - at most kMaxJsonContainers arrays/objects in all: each costs far more memory than its 3
//     bytes of text ("[],"), above all in JavaScript, whose parser follows the same rules;
//   - unique keys in every object (RFC 8259 leaves duplicates to the parser; we refuse them);
//   - number literals within float64 (1e400 would silently become inf);
//   - syntax errors name the byte offset where they were detected.
// It tracks the JSON path of the value being read, so that its errors name it like the rest of
// the parser does ("state_dict.in_proj_weight[0][3]").
class BoundedDomBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  explicit BoundedDomBuilder(Json* root) : root_(root) {}

  const Status& error() const { return error_; }
  // A syntax error: where nlohmann stopped and what it said.
  bool syntax_error() const { return syntax_error_; }
  size_t error_offset() const { return error_offset_; }
  const std::string& error_detail() const { return error_detail_; }

  bool null() { return Put(Json(nullptr)) != nullptr; }
  bool boolean(bool v) { return Put(Json(v)) != nullptr; }
  bool number_integer(number_integer_t v) { return Put(Json(v)) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return Put(Json(v)) != nullptr; }
  bool number_float(number_float_t v, const string_t& literal) {
    if (!std::isfinite(v)) return Fail(ValuePath(), OutOfRange(literal));
    return Put(Json(v)) != nullptr;
  }
  bool string(string_t& v) { return Put(Json(std::move(v))) != nullptr; }
  bool binary(binary_t&) { return false; }  // not produced by the JSON parser

  bool start_object(std::size_t) { return Open(Json::value_t::object); }
  bool start_array(std::size_t) { return Open(Json::value_t::array); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(string_t& k) {
    Frame& f = frames_.back();
    auto [it, inserted] = f.value->get_ref<Json::object_t&>().emplace(std::move(k), nullptr);
    f.key = &it->first;
    if (!inserted) {
      return Fail(ValuePath(), "duplicate key (the keys of a JSON object must be unique)");
    }
    pending_ = &it->second;
    return true;
  }

  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) {
    // nlohmann reports a number literal beyond float64 (1e400) as out_of_range.406.
    if (e.id == 406) return Fail(ValuePath(), OutOfRange(token));
    // nlohmann's position counts the bytes read, including the one that failed (or the end of
    // the input), so the failing byte is at position - 1.
    std::string what = e.what();
    const size_t column = what.find(", column ");
    if (column != std::string::npos) {
      const size_t colon = what.find(": ", column);
      if (colon != std::string::npos) what = what.substr(colon + 2);
    }
    error_offset_ = position > 0 ? position - 1 : 0;
    error_detail_.clear();  // one line of printable ASCII, whatever bytes the token held
    for (char ch : what.size() > 160 ? what.substr(0, 157) : what) {
      const unsigned char b = static_cast<unsigned char>(ch);
      if (b < 0x20 || b >= 0x7F) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\x%02X", b);
        error_detail_ += buf;
      } else {
        error_detail_ += ch;
      }
    }
    if (what.size() > 160) error_detail_ += "...";
    syntax_error_ = true;
    return false;
  }

 private:
  struct Frame {
    Json* value;
    const std::string* key = nullptr;  // the member being read, in an object
  };

  // The path of the value about to be read: "$" for the root, then members and indices. Paths of
  // more than 8 steps keep the first 8 and end in "..." (only a document nested far deeper than
  // the format allows has them).
  std::string ValuePath() const {
    constexpr size_t kMaxSteps = 8;
    std::string path;
    size_t steps = 0;
    for (const Frame& f : frames_) {
      if (++steps > kMaxSteps) return path + "...";
      if (f.value->is_array()) {
        // An enclosing array already holds the value being read; the innermost one not yet.
        const size_t index = f.value->size() - (&f == &frames_.back() ? 0 : 1);
        path += (path.empty() ? "$[" : "[") + std::to_string(index) + "]";
      } else {
        const std::string key = f.key ? KeyInPath(*f.key) : std::string();
        path += path.empty() ? key : "." + key;
      }
    }
    return path.empty() ? "$" : path;
  }

  static std::string OutOfRange(const std::string& literal) {
    const std::string shown = literal.size() > 40 ? literal.substr(0, 37) + "..." : literal;
    return "the number " + shown + " is out of range (beyond +-1.8e308); write \"inf\" or " +
           "\"-inf\"";
  }

  bool Fail(const std::string& path, const std::string& what) {
    error_ = ParseError(path, what);
    return false;
  }

  Json* Put(Json&& v) {
    if (frames_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    Json& parent = *frames_.back().value;
    if (parent.is_array()) {
      auto& array = parent.get_ref<Json::array_t&>();
      array.push_back(std::move(v));
      return &array.back();
    }
    *pending_ = std::move(v);
    return pending_;
  }

  bool Open(Json::value_t type) {
    if (frames_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      return Fail(ValuePath(), "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
    if (++containers_ > kMaxJsonContainers) {
      return Fail(ValuePath(), "more than " + std::to_string(kMaxJsonContainers) +
                                   " arrays and objects in the document");
    }
    Json* v = Put(Json(type));
    frames_.push_back({v});
    return true;
  }

  bool Close() {
    frames_.pop_back();
    return true;
  }

  Json* root_;
  Json* pending_ = nullptr;
  std::vector<Frame> frames_;
  uint64_t containers_ = 0;
  Status error_;
  bool syntax_error_ = false;
  size_t error_offset_ = 0;
  std::string error_detail_;
};

Status NotValidJson(size_t offset, const std::string& detail) {
  return ParseError("$", "not valid JSON (at byte " + std::to_string(offset) + ": " + detail + ")");
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
// sibling agrees (a ragged array is an error naming where). Each leaf goes to `leaf` as it is
// reached, so that the first problem in document order is the one
// reported, as web/lib/tensor.js reports it.
class ArrayWalker {
 public:
  using LeafCheck = std::function<Status(const Json& leaf, const std::string& path)>;
  explicit ArrayWalker(LeafCheck leaf) : leaf_(std::move(leaf)) {}

  Status Walk(const Json& j, const std::string& path) {
    root_path_ = path;
    std::string element_path = path;
    HEADSCOPE_RETURN_IF_ERROR(Visit(j, &element_path, 0));
    if (leaf_depth_ < 0) shape_.rank = max_depth_;  // only empty arrays: e.g. [[], []] is [2, 0]
    return Status::Ok();
  }
  const Shape& shape() const { return shape_; }

 private:
  // `path` is the element's JSON path; children append their index to it and take it off again
  // (one string per walk, not one per element).
  Status Visit(const Json& j, std::string* element_path, int depth) {
    const std::string& path = *element_path;
    if (!j.is_array()) {
      if (leaf_depth_ < 0) {
        // An earlier sibling was an array reaching this depth (e.g. the [] of [[], 1]).
        if (max_depth_ > depth)
          return ParseError(path, "expected an array like its siblings, got " + Describe(j));
        leaf_depth_ = depth;
        shape_.rank = depth;
        // A shape fixed by the first row of each level can claim far more elements than the
        // document holds ([[... 30000 rows], ...] of 30000 each); refused before the walk,
        // with the bound web/lib/tensor.js uses (2^32 - 1 bytes of float32).
        constexpr double kMaxNestedElements = 1073741823;
        double count = 1;
        for (int a = 0; a < depth; ++a) count *= static_cast<double>(shape_.dims[a]);
        if (count > kMaxNestedElements) {
          return ParseError(root_path_, "shape " + shape_.ToString() + " has " +
                                            std::to_string(static_cast<uint64_t>(count)) +
                                            " elements, more than a call can hold (1073741823)");
        }
      } else if (leaf_depth_ != depth) {
        return ParseError(path, "expected a nested array of depth " +
                                    std::to_string(leaf_depth_) + " like its siblings, got " +
                                    Describe(j));
      }
      return leaf_(j, path);
    }
    if (leaf_depth_ >= 0 && depth >= leaf_depth_) {
      return ParseError(path, "expected a value like its siblings, got " + Describe(j));
    }
    if (depth >= Shape::kMaxRank) {
      // Named by the tensor, as web/lib/tensor.js does.
      return ParseError(root_path_, "arrays nested deeper than " +
                                        std::to_string(Shape::kMaxRank) + " levels");
    }
    const int64_t size = static_cast<int64_t>(j.size());
    if (size > kMaxDim) {
      return ParseError(path, "expected an array of at most " + std::to_string(kMaxDim) +
                                  " elements, got length " + std::to_string(size));
    }
    if (depth >= max_depth_) {
      max_depth_ = depth + 1;
      shape_.dims[depth] = size;
    } else if (shape_.dims[depth] != size) {
      return ParseError(path, "expected " + std::to_string(shape_.dims[depth]) +
                                  " elements like its siblings, got " + std::to_string(size));
    }
    for (size_t i = 0; i < j.size(); ++i) {
      const size_t mark = element_path->size();
      *element_path += "[" + std::to_string(i) + "]";
      HEADSCOPE_RETURN_IF_ERROR(Visit(j[i], element_path, depth + 1));
      element_path->resize(mark);
    }
    return Status::Ok();
  }

  LeafCheck leaf_;
  std::string root_path_;
  Shape shape_;
  int leaf_depth_ = -1;
  int max_depth_ = 0;
};

Status ParseFloatTensor(const Json& j, const std::string& path, CaseTensor* out) {
  if (!j.is_array()) return ParseError(path, "expected a nested array of numbers, got " + Describe(j));
  std::vector<float> data;
  ArrayWalker walker([&data](const Json& leaf, const std::string& where) {
    float v;
    if (!LeafToFloat(leaf, &v)) {
      return ParseError(where, "expected a number (or \"inf\", \"-inf\", \"nan\"), got " +
                                   Describe(leaf));
    }
    data.push_back(v);
    return Status::Ok();
  });
  HEADSCOPE_RETURN_IF_ERROR(walker.Walk(j, path));
  out->present = true;
  out->shape = walker.shape();
  out->data = std::move(data);
  return Status::Ok();
}

// Booleans (true = blocked) or numbers, as the first leaf says; every leaf must be like it.
Status ParseMask(const Json& j, const std::string& path, CaseMask* out) {
  if (j.is_null()) return Status::Ok();
  if (!j.is_array()) {
    return ParseError(path, "expected null or a nested array of booleans or numbers, got " +
                                Describe(j));
  }
  MaskType type = MaskType::kNone;
  std::vector<uint8_t> bools;
  std::vector<float> floats;
  ArrayWalker walker([&](const Json& leaf, const std::string& where) {
    float v = 0;
    const bool is_bool = leaf.is_boolean();
    if (!is_bool && !LeafToFloat(leaf, &v)) {
      return ParseError(where, "expected a boolean or a number, got " + Describe(leaf));
    }
    if (type == MaskType::kNone) type = is_bool ? MaskType::kBool : MaskType::kFloat;
    if (is_bool != (type == MaskType::kBool)) {
      return ParseError(where, std::string("expected a ") + (is_bool ? "number" : "boolean") +
                                   " like the first element, got " + Describe(leaf));
    }
    if (is_bool) {
      bools.push_back(leaf.get<bool>() ? 1 : 0);
    } else {
      floats.push_back(v);
    }
    return Status::Ok();
  });
  HEADSCOPE_RETURN_IF_ERROR(walker.Walk(j, path));
  out->type = type == MaskType::kNone ? MaskType::kFloat : type;  // [] is an empty float mask
  out->shape = walker.shape();
  out->bools = std::move(bools);
  out->floats = std::move(floats);
  return Status::Ok();
}

Status GetBool(const Json& obj, const char* key, const std::string& path, bool* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();  // keeps the default
  if (!it->is_boolean()) {
    return ParseError(MemberPath(path, key), "expected true or false, got " + Describe(*it));
  }
  *out = it->get<bool>();
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
    if (!known) {
      // An empty path: the document's own keys, whose paths are the bare key.
      return ParseError(path.empty() ? KeyInPath(it.key()) : MemberPath(path, it.key()),
                        "unknown key (expected one of " + list + ")");
    }
  }
  return Status::Ok();
}

// A config section's keys: the schema's fields by their PyTorch names, and `extra` (the MHA
// case's dropout); the first other key (in key order) is refused, naming it.
Status CheckSchemaKeys(const Json& cfg, const ObjectSchema& schema, const char* extra = nullptr) {
  std::string list;
  for (size_t i = 0; i < schema.num_fields; ++i) list += (i ? ", " : "") + std::string(schema.fields[i].torch);
  if (extra != nullptr) list += std::string(", ") + extra;
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    bool known = extra != nullptr && it.key() == extra;
    for (size_t i = 0; i < schema.num_fields && !known; ++i) known = it.key() == schema.fields[i].torch;
    if (!known) {
      return ParseError(MemberPath("config", it.key()), "unknown key (expected one of " + list + ")");
    }
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

// Writes nested arrays into `out`; with a file, hands `out` to it whenever it passes a megabyte,
// so that a large result is never held as one string.
void AppendNested(const float* data, const Shape& shape, int axis, size_t* index,
                  std::string* out, std::FILE* file) {
  if (axis >= shape.rank || axis >= Shape::kMaxRank) {
    AppendNumber(data[(*index)++], out);
    if (file != nullptr && out->size() >= (size_t{1} << 20)) {
      std::fwrite(out->data(), 1, out->size(), file);
      out->clear();
    }
    return;
  }
  *out += '[';
  for (int64_t i = 0; i < shape.dims[axis]; ++i) {
    if (i) *out += ", ";
    AppendNested(data, shape, axis + 1, index, out, file);
  }
  *out += ']';
}

void AppendResult(const ForwardResult& result, std::string* out, std::FILE* file) {
  size_t index = 0;
  *out += "{\"output\": ";
  AppendNested(result.output.data(), result.output_shape, 0, &index, out, file);
  *out += ", \"weights\": ";
  index = 0;
  if (result.has_weights()) {
    AppendNested(result.weights.data(), result.weights_shape, 0, &index, out, file);
  } else {
    *out += "null";
  }
  // Only a call that asked for them (the CLIs' --head-stats) has statistics: other results are
  // written byte for byte as before.
  const HeadStats& s = result.head_stats;
  if (s.present()) {
    *out += ", \"head_stats\": {\"entropy\": ";
    index = 0;
    AppendNested(s.entropy.data(), s.shape, 0, &index, out, file);
    *out += ", \"distance\": ";
    index = 0;
    AppendNested(s.distance.data(), s.shape, 0, &index, out, file);
    *out += ", \"max_weight\": ";
    index = 0;
    AppendNested(s.max_weight.data(), s.shape, 0, &index, out, file);
    *out += '}';
  }
  *out += '}';
}

// Most bytes TensorToJson can write for `shape`: a float is at most 15 characters
// ("-1.17549435e-38"; "\"-inf\"" is 6) plus ", ", an array 2 brackets plus ", ". In double, so
// that absurd shapes saturate instead of overflowing.
double TensorJsonBytesBound(const Shape& shape) {
  double elements = 1, arrays = 0;
  for (int a = 0; a < shape.rank && a < Shape::kMaxRank; ++a) {
    arrays += elements;
    elements *= static_cast<double>(std::max<int64_t>(shape.dims[a], 0));
  }
  return elements * 17 + arrays * 4;
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
  o.alibi = alibi;
  o.window = window;
  o.need_weights = need_weights;
  o.average_attn_weights = average_attn_weights;
  return o;
}

namespace {

// The document's JSON, under the format's limits (ParseCase's comment).
Status ParseJsonText(std::string_view text, uint64_t max_bytes, Json* out) {
  if (text.size() > max_bytes) {
    return Status(StatusCode::kResourceExhausted,
                  "$: the document is " + std::to_string(text.size()) +
                      " bytes, more than the limit of " + std::to_string(max_bytes) + " bytes");
  }
  Json doc;
  {
    BoundedDomBuilder builder(&doc);
    // strict: nothing but whitespace may follow the value. A leading UTF-8 byte order mark is
    // skipped by nlohmann's lexer (RFC 8259 allows parsers to; editors write one).
    const bool parsed = Json::sax_parse(text.begin(), text.end(), &builder,
                                        nlohmann::detail::input_format_t::json, /*strict=*/true);
    // nlohmann's lexer takes a NUL byte outside a string for the end of the input, so "{...}\0"
    // would parse and "{\0" would be an "unexpected end": either way the NUL is what is wrong.
    if (!parsed && builder.syntax_error()) {
      const size_t at = builder.error_offset();
      if (at < text.size() && text[at] == '\0' &&
          builder.error_detail().find("end of input") != std::string::npos) {
        return NotValidJson(at, "unexpected NUL byte");
      }
      return NotValidJson(at, builder.error_detail());
    }
    if (!parsed) return builder.error();
    const size_t nul = text.find('\0');
    if (nul != std::string_view::npos) return NotValidJson(nul, "unexpected NUL byte");
  }
  if (!doc.is_object()) return ParseError("$", "expected an object, got " + Describe(doc));
  *out = std::move(doc);
  return Status::Ok();
}

// A case document's config section through the schema (schema.h): the schema's fields by their
// PyTorch names (CheckKeys has refused any other), each of its type and in its range, in the
// schema's order, then the divisibility rules, named by their JSON path; web/lib/case.js's
// caseConfig reads the same table (web/lib/schema.js) and gives the same first problem. An
// absent or null field keeps the struct's default (a required one is refused); a null nullable
// size is 0 (null).
Status ParseConfigSection(const ObjectSchema& schema, const Json& cfg, void* out) {
  const auto integral = [](double v) { return v == std::floor(v); };
  for (size_t i = 0; i < schema.num_fields; ++i) {
    const FieldSpec& f = schema.fields[i];
    const std::string where = MemberPath("config", f.torch);
    auto it = cfg.find(f.torch);
    if (it == cfg.end() || it->is_null()) {
      if (f.default_json == nullptr) {
        return ParseError(where, "required, expected " + Expectation(schema, f));
      }
      continue;
    }
    const Json& v = *it;
    FieldValue value;
    bool ok = false;
    switch (f.type) {
      case FieldType::kSize:
      case FieldType::kNumber: {
        const double x = v.is_number() ? v.get<double>() : std::nan("");
        ok = v.is_number() && (f.type == FieldType::kNumber || integral(x)) &&
             CheckFieldNumber(schema, f, x, "").ok();
        value.v[0] = x;
        break;
      }
      case FieldType::kBool:
        ok = v.is_boolean();
        value.v[0] = ok && v.get<bool>() ? 1 : 0;
        break;
      case FieldType::kChoice:
        for (int c = 0; v.is_string() && f.choices[c] != nullptr; ++c) {
          if (v.get_ref<const std::string&>() == f.choices[c]) {
            ok = true;
            value.v[0] = c;
          }
        }
        break;
      case FieldType::kPair:
        ok = false;  // (no case file has a pair: the optimizer is not in the format)
        break;
    }
    if (!ok) return ParseError(where, "expected " + Expectation(schema, f) + ", got " + Describe(v));
    f.set(out, value);
  }
  // The rules (divisibility) are CheckFields', named in the document ("config.n_heads: ...").
  if (Status s = CheckFields(schema, out); !s.ok()) {
    return Status(StatusCode::kParseError, "config." + s.message());
  }
  return Status::Ok();
}

// "kind" (absent or null: "mha"), then "name".
Status ParseKindAndName(const Json& doc, CaseKind* kind, std::string* name_out) {
  *kind = CaseKind::kMha;
  if (const Json* k = Member(doc, "kind")) {
    if (k->is_string() && k->get_ref<const std::string&>() == "transformer") {
      *kind = CaseKind::kTransformer;
    } else if (!k->is_string() || k->get_ref<const std::string&>() != "mha") {
      return ParseError("kind", "expected one of \"mha\", \"transformer\" (absent or null: "
                                "\"mha\"), got " + Describe(*k));
    }
  }
  // Either kind has these keys; "meta" is free-form (any value, ignored).
  HEADSCOPE_RETURN_IF_ERROR(CheckKeys(
      doc, "", {"config", "expected", "inputs", "kind", "meta", "name", "state_dict"}));
  if (const Json* name = Member(doc, "name")) {
    if (!name->is_string()) return ParseError("name", "expected a string, got " + Describe(*name));
    *name_out = name->get<std::string>();
  }
  return Status::Ok();
}

// The "state_dict" object's entries, each a float tensor (of either kind).
Status ParseStateDict(const Json& doc, std::vector<std::pair<std::string, CaseTensor>>* out) {
  const Json* sd = Member(doc, "state_dict");
  if (sd == nullptr || !sd->is_object()) return ParseError("state_dict", "expected an object");
  for (auto it = sd->begin(); it != sd->end(); ++it) {
    CaseTensor t;
    HEADSCOPE_RETURN_IF_ERROR(ParseFloatTensor(*it, MemberPath("state_dict", it.key()), &t));
    out->emplace_back(it.key(), std::move(t));
  }
  return Status::Ok();
}

Status ParseAttentionCase(const Json& doc, AttentionCase* out) {
  AttentionCase c;
  CaseKind kind;
  HEADSCOPE_RETURN_IF_ERROR(ParseKindAndName(doc, &kind, &c.name));
  if (kind != CaseKind::kMha) {
    return ParseError("kind", "a \"transformer\" case, not an attention case (ParseCaseDocument "
                              "reads both kinds)");
  }

  const Json* config = Member(doc, "config");
  if (config == nullptr || !config->is_object()) return ParseError("config", "expected an object");
  HEADSCOPE_RETURN_IF_ERROR(CheckSchemaKeys(*config, MhaConfigSchema(), "dropout"));
  if (const Json* dropout = Member(*config, "dropout")) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      return ParseError("config.dropout", "headscope computes the forward pass without dropout; "
                                          "expected 0 or null, got " + Describe(*dropout));
    }
  }
  HEADSCOPE_RETURN_IF_ERROR(ParseConfigSection(MhaConfigSchema(), *config, &c.config));
  if (Status s = ValidateConfig(c.config); !s.ok()) {
    return Status(StatusCode::kParseError, "config." + s.message());
  }

  HEADSCOPE_RETURN_IF_ERROR(ParseStateDict(doc, &c.state_dict));

  const Json* inputs = Member(doc, "inputs");
  if (inputs == nullptr || !inputs->is_object()) return ParseError("inputs", "expected an object");
  HEADSCOPE_RETURN_IF_ERROR(CheckKeys(*inputs, "inputs",
                                      {"query", "key", "value", "key_padding_mask", "attn_mask",
                                       "need_weights", "average_attn_weights", "is_causal",
                                       "alibi", "window"}));
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
  HEADSCOPE_RETURN_IF_ERROR(GetBool(*inputs, "alibi", "inputs", &c.alibi));
  // window: null or absent 0 (none); else an integer (4.0 too, as JS reads it) in [0, kMaxDim].
  if (const Json* w = Member(*inputs, "window"); w != nullptr && !w->is_null()) {
    const double x = w->is_number() ? w->get<double>() : std::nan("");
    if (!(x >= 0 && x <= static_cast<double>(kMaxDim) && x == std::floor(x))) {
      return ParseError("inputs.window", "expected 0 (no window) or an integer in [1, " +
                                             std::to_string(kMaxDim) + "], got " + Describe(*w));
    }
    c.window = static_cast<int64_t>(x);
  }

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

// ---------------------------------------------------------------------------------------------
// "kind": "transformer". The checks and messages of web/lib/case.js's parseTransformerCase, in
// its order, so that both parsers report the same first problem.



Status ParseTransformerConfig(const Json& cfg, TransformerConfig* c) {
  HEADSCOPE_RETURN_IF_ERROR(CheckSchemaKeys(cfg, TransformerConfigSchema()));
  HEADSCOPE_RETURN_IF_ERROR(ParseConfigSection(TransformerConfigSchema(), cfg, c));
  // Whatever else the model requires (its weights must fit the build), named in the config.
  if (Status s = ValidateTransformerConfig(*c); !s.ok()) {
    return Status(StatusCode::kParseError, "config." + s.message());
  }
  return Status::Ok();
}

// Token ids (or targets): nested arrays of integers that fit int32, as web/lib/tensor.js's
// toTokens reads them.
Status ParseIds(const Json& j, const std::string& path, std::vector<int32_t>* out, Shape* shape) {
  if (!j.is_array()) {
    return ParseError(path, "expected token ids (nested arrays of integers, (T) or (B, T)), got " +
                                Describe(j));
  }
  std::vector<int32_t> ids;
  ArrayWalker walker([&ids](const Json& leaf, const std::string& where) {
    const double v = leaf.is_number() ? leaf.get<double>() : std::nan("");
    if (!leaf.is_number() || v != std::floor(v) || v < -2147483648.0 || v > 2147483647.0) {
      return ParseError(where, "expected an integer token id, got " + Describe(leaf));
    }
    ids.push_back(static_cast<int32_t>(v));
    return Status::Ok();
  });
  HEADSCOPE_RETURN_IF_ERROR(walker.Walk(j, path));
  *shape = walker.shape();
  *out = std::move(ids);
  return Status::Ok();
}

// The path of element i of a (T) or (B, T) tensor.
std::string ElementPath(const std::string& path, const Shape& shape, size_t i) {
  if (shape.rank == 1) return path + "[" + std::to_string(i) + "]";
  const size_t t = static_cast<size_t>(shape.dims[1]);
  return path + "[" + std::to_string(i / t) + "][" + std::to_string(i % t) + "]";
}

Status ParseTransformerInputs(const Json& inputs, TransformerCase* c) {
  HEADSCOPE_RETURN_IF_ERROR(CheckKeys(inputs, "inputs", {"tokens", "targets", "head_gates"}));
  const Json* tokens = Member(inputs, "tokens");
  if (tokens == nullptr) return ParseError("inputs.tokens", "required");
  Shape shape;
  HEADSCOPE_RETURN_IF_ERROR(ParseIds(*tokens, "inputs.tokens", &c->tokens, &shape));
  if (shape.rank != 1 && shape.rank != 2) {
    return ParseError("inputs.tokens",
                      "expected (T) or (B, T) token ids, got shape " + shape.ToString());
  }
  c->batched = shape.rank == 2;
  c->batch = c->batched ? shape.dims[0] : 1;
  c->length = shape.dims[shape.rank - 1];
  if (shape.dims[0] < 1 || c->length < 1) {
    return ParseError("inputs.tokens", "expected at least one row of at least one token, got shape " +
                                           shape.ToString());
  }
  const TransformerConfig& config = c->config;
  if (c->length > config.max_len) {
    return ParseError("inputs.tokens", "T = " + std::to_string(c->length) +
                                           " tokens, more than config.max_len = " +
                                           std::to_string(config.max_len));
  }
  const int64_t V = config.vocab_size;
  const std::string ids = "a token id in [0, " + std::to_string(V - 1) + "] (config.vocab_size " +
                          std::to_string(V) + ")";
  for (size_t i = 0; i < c->tokens.size(); ++i) {
    const int32_t t = c->tokens[i];
    if (t < 0 || t >= V) {
      return ParseError(ElementPath("inputs.tokens", shape, i),
                        "expected " + ids + ", got " + std::to_string(t));
    }
  }
  if (const Json* targets = Member(inputs, "targets")) {
    Shape target_shape;
    HEADSCOPE_RETURN_IF_ERROR(ParseIds(*targets, "inputs.targets", &c->targets, &target_shape));
    if (target_shape != shape) {
      return ParseError("inputs.targets", "expected the shape of inputs.tokens, " + shape.ToString() +
                                              ", got " + target_shape.ToString());
    }
    size_t counted = 0;
    for (size_t i = 0; i < c->targets.size(); ++i) {
      const int32_t t = c->targets[i];
      if (t == -100) continue;
      if (t < 0 || t >= V) {
        return ParseError(ElementPath("inputs.targets", shape, i),
                          "expected -100 (not counted) or " + ids + ", got " + std::to_string(t));
      }
      ++counted;
    }
    if (counted == 0) {
      return ParseError("inputs.targets", "every target is -100: there is no loss to compute (at "
                                          "least one position must be counted)");
    }
  }
  if (const Json* gates = Member(inputs, "head_gates")) {
    HEADSCOPE_RETURN_IF_ERROR(ParseFloatTensor(*gates, "inputs.head_gates", &c->head_gates));
    const Shape want{config.n_layers, config.n_heads};
    if (c->head_gates.shape != want) {
      return ParseError("inputs.head_gates", "expected shape (n_layers, n_heads) = " +
                                                 want.ToString() + ", got " +
                                                 c->head_gates.shape.ToString());
    }
  }
  return Status::Ok();
}

Status ParseTransformerExpected(const Json& e, TransformerCase* c) {
  if (!e.is_object()) return ParseError("expected", "expected an object, got " + Describe(e));
  HEADSCOPE_RETURN_IF_ERROR(CheckKeys(e, "expected", {"logits", "loss", "hooks"}));
  const Json* logits = Member(e, "logits");
  if (logits == nullptr) return ParseError("expected.logits", "required when expected is given");
  HEADSCOPE_RETURN_IF_ERROR(ParseFloatTensor(*logits, "expected.logits", &c->expected_logits));
  if (const Json* loss = Member(e, "loss")) {
    if (!c->has_targets()) {
      return ParseError("expected.loss", "given without inputs.targets (the loss is of the targets)");
    }
    if (!loss->is_number()) {
      return ParseError("expected.loss", "expected a number, got " + Describe(*loss));
    }
    c->expected_loss = loss->get<double>();
    c->has_expected_loss = true;
  } else if (c->has_targets()) {
    return ParseError("expected.loss", "required when inputs.targets is given");
  }
  if (const Json* hooks = Member(e, "hooks")) {
    if (!hooks->is_object()) {
      return ParseError("expected.hooks", "expected an object, got " + Describe(*hooks));
    }
    std::vector<std::pair<std::string, CaseTensor>> parsed;
    for (auto it = hooks->begin(); it != hooks->end(); ++it) {
      CaseTensor t;
      HEADSCOPE_RETURN_IF_ERROR(
          ParseFloatTensor(*it, MemberPath("expected.hooks", it.key()), &t));
      parsed.emplace_back(it.key(), std::move(t));
    }
    // Every name a hook of the config; kept in the model's order.
    const std::vector<std::string> names = TransformerHookNames(c->config);
    for (const auto& [name, t] : parsed) {
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        std::string list;
        for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
        return ParseError(MemberPath("expected.hooks", name),
                          "not a hook of this config (its hooks: " + list + ")");
      }
    }
    for (const std::string& n : names) {
      for (auto& [name, t] : parsed) {
        if (name == n) c->expected_hooks.emplace_back(name, std::move(t));
      }
    }
  }
  c->has_expected = true;
  return Status::Ok();
}

Status ParseTransformerCase(const Json& doc, TransformerCase* out) {
  TransformerCase c;
  CaseKind kind;
  HEADSCOPE_RETURN_IF_ERROR(ParseKindAndName(doc, &kind, &c.name));
  const Json* config = Member(doc, "config");
  if (config == nullptr || !config->is_object()) {
    return ParseError("config", "expected an object" +
                                    (config ? ", got " + Describe(*config) : std::string()));
  }
  HEADSCOPE_RETURN_IF_ERROR(ParseTransformerConfig(*config, &c.config));
  HEADSCOPE_RETURN_IF_ERROR(ParseStateDict(doc, &c.state_dict));
  const Json* inputs = Member(doc, "inputs");
  if (inputs == nullptr || !inputs->is_object()) return ParseError("inputs", "expected an object");
  HEADSCOPE_RETURN_IF_ERROR(ParseTransformerInputs(*inputs, &c));
  if (const Json* expected = Member(doc, "expected")) {
    HEADSCOPE_RETURN_IF_ERROR(ParseTransformerExpected(*expected, &c));
  }
  *out = std::move(c);
  return Status::Ok();
}

}  // namespace

Status ParseCase(std::string_view text, AttentionCase* out, uint64_t max_bytes) {
  Json doc;
  HEADSCOPE_RETURN_IF_ERROR(ParseJsonText(text, max_bytes, &doc));
  return ParseAttentionCase(doc, out);
}

Status ParseCaseDocument(std::string_view text, CaseDocument* out, uint64_t max_bytes) {
  Json doc;
  HEADSCOPE_RETURN_IF_ERROR(ParseJsonText(text, max_bytes, &doc));
  CaseKind kind;
  std::string name;
  HEADSCOPE_RETURN_IF_ERROR(ParseKindAndName(doc, &kind, &name));
  out->kind = kind;
  if (kind == CaseKind::kTransformer) return ParseTransformerCase(doc, &out->transformer);
  return ParseAttentionCase(doc, &out->mha);
}

Status ReadTextFile(const std::string& path, std::string* out, uint64_t max_bytes) {
  // Read in chunks up to the limit, whatever the source: a regular file, a pipe that never ends,
  // /dev/zero. A directory opens fine with fopen on Linux and then fails to read, so it is
  // named as such first.
  const bool is_stdin = path == "-";
  struct stat st;
  if (!is_stdin && stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return Status(StatusCode::kIoError, path + ": cannot read (Is a directory)");
    }
    if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes) {
      return Status(StatusCode::kResourceExhausted,
                    path + ": " + std::to_string(st.st_size) + " bytes, more than the limit of " +
                        std::to_string(max_bytes) + " bytes");
    }
  }
  std::FILE* f = is_stdin ? stdin : std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return Status(StatusCode::kIoError, path + ": cannot read (" + std::strerror(errno) + ")");
  }
  std::string text;
  std::vector<char> chunk(1 << 16);
  Status status;
  for (;;) {
    const size_t n = std::fread(chunk.data(), 1, chunk.size(), f);
    if (n > 0 && text.size() + n > max_bytes) {
      status = Status(StatusCode::kResourceExhausted,
                      path + ": more than the limit of " + std::to_string(max_bytes) + " bytes");
      break;
    }
    text.append(chunk.data(), n);
    if (n < chunk.size()) {
      if (std::ferror(f)) {
        status =
            Status(StatusCode::kIoError, path + ": cannot read (" + std::strerror(errno) + ")");
      }
      break;
    }
  }
  if (!is_stdin) std::fclose(f);
  if (!status.ok()) return status;
  *out = std::move(text);
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

namespace {

// False, with the comparison's detail saying so, for a case without expected values.
bool HasExpected(bool has_expected, CaseComparison* cmp) {
  if (!has_expected) cmp->detail = "the case has no expected values";
  return has_expected;
}

}  // namespace

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
  if (!HasExpected(c.has_expected, &cmp)) return cmp;
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
  AppendNested(data, shape, 0, &index, &out, nullptr);
  return out;
}

Shape ResultWeightsShape(const AttentionCase& c) {
  const Shape& q = c.query.shape;
  const Shape& k = c.key.shape;
  // Only where the call can succeed (query and key both unbatched or both batched); any other
  // case fails in Forward before it has a result.
  if (!c.need_weights || (q.rank != 2 && q.rank != 3) || k.rank != q.rank) return Shape();
  const bool batched = q.rank == 3;
  const bool batch_first = batched && c.config.batch_first;
  const int64_t n = batched ? q.dims[batch_first ? 0 : 1] : 1;
  const int64_t l = q.dims[batch_first ? 1 : 0];
  const int64_t s = k.dims[batch_first ? 1 : 0] + (c.config.add_bias_kv ? 1 : 0) +
                    (c.config.add_zero_attn ? 1 : 0);
  const int64_t h = c.config.num_heads;
  if (batched) return c.average_attn_weights ? Shape({n, l, s}) : Shape({n, h, l, s});
  return c.average_attn_weights ? Shape({l, s}) : Shape({h, l, s});
}

uint64_t ResultJsonBytesBound(const AttentionCase& c) {
  const Shape weights = ResultWeightsShape(c);
  // The output has the query's shape; 32 bytes: {"output": , "weights": null} and a newline.
  const double bytes = 32 + TensorJsonBytesBound(c.query.shape) +
                       (weights.rank > 0 ? TensorJsonBytesBound(weights) : 0);
  return bytes >= 1.8e19 ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(bytes);
}

Status CheckResultJsonSize(const AttentionCase& c, uint64_t max_bytes) {
  const uint64_t bound = ResultJsonBytesBound(c);
  if (bound <= max_bytes) return Status::Ok();
  const Shape weights = ResultWeightsShape(c);
  return Status(StatusCode::kResourceExhausted,
                "result: its JSON text could take " + std::to_string(bound) + " bytes (output " +
                    c.query.shape.ToString() + ", weights " +
                    (weights.rank > 0 ? weights.ToString() : std::string("null")) +
                    "), more than the limit of " + std::to_string(max_bytes) + " bytes");
}


// ---------------------------------------------------------------------------------------------
// "kind": "transformer": running, comparing, printing.

TransformerOptions TransformerCase::options() const {
  TransformerOptions o;
  for (const auto& [name, t] : expected_hooks) o.hooks.push_back(name);
  if (head_gates.present) o.head_gates = head_gates.view();
  return o;
}

Status BuildTransformer(const TransformerCase& c, std::unique_ptr<Transformer>* out) {
  std::unique_ptr<Transformer> model;
  HEADSCOPE_RETURN_IF_ERROR(Transformer::Create(c.config, &model));
  for (const auto& [name, tensor] : c.state_dict) {
    HEADSCOPE_RETURN_IF_ERROR(model->SetParameter(name, tensor.view()));
  }
  HEADSCOPE_RETURN_IF_ERROR(model->CheckComplete());
  *out = std::move(model);
  return Status::Ok();
}

namespace {

// Unbatched tokens: the result's shapes without their batch axis of 1.
void DropBatchAxis(Shape* shape) {
  for (int a = 1; a < shape->rank; ++a) shape->dims[a - 1] = shape->dims[a];
  shape->dims[--shape->rank] = 0;
}

}  // namespace

Status RunTransformerCase(const TransformerCase& c, TransformerCaseResult* result) {
  std::unique_ptr<Transformer> model;
  HEADSCOPE_RETURN_IF_ERROR(BuildTransformer(c, &model));
  HEADSCOPE_RETURN_IF_ERROR(model->Forward(c.token_view(), c.options(), &result->forward));
  if (!c.batched) {
    DropBatchAxis(&result->forward.logits_shape);
    for (auto& [name, hook] : result->forward.hooks) DropBatchAxis(&hook.shape);
  }
  result->has_loss = c.has_targets();
  if (result->has_loss) {
    HEADSCOPE_RETURN_IF_ERROR(Transformer::Loss(result->forward.logits.data(), c.batch * c.length,
                                                c.config.vocab_size, c.targets.data(),
                                                &result->loss));
  }
  return Status::Ok();
}

CaseComparison CompareWithExpected(const TransformerCase& c, const TransformerCaseResult& result,
                                   double tolerance) {
  CaseComparison cmp;
  if (!HasExpected(c.has_expected, &cmp)) return cmp;
  const auto check = [&](const std::string& name, const float* got, const Shape* got_shape,
                         const CaseTensor& want) {
    CaseComparison one;
    const bool ok = got != nullptr &&
                    CompareTensor(name.c_str(), got, *got_shape, want, tolerance, &one);
    if (got == nullptr) one.detail = name + ": not in the result";
    cmp.tensors.push_back({name, ok, one.max_relative_error, one.detail});
    cmp.max_relative_error = std::max(cmp.max_relative_error, one.max_relative_error);
    if (!ok && cmp.detail.empty()) cmp.detail = one.detail;
  };
  check("logits", result.forward.logits.data(), &result.forward.logits_shape, c.expected_logits);
  for (const auto& [name, want] : c.expected_hooks) {
    const TraceTensor* got = nullptr;
    for (const auto& [n, t] : result.forward.hooks) {
      if (n == name) got = &t;
    }
    check("hooks." + name, got ? got->data.data() : nullptr, got ? &got->shape : nullptr, want);
  }
  if (c.has_expected_loss) {
    cmp.has_loss = true;
    cmp.loss_error = result.has_loss ? std::fabs(result.loss - c.expected_loss) /
                                           std::max(1.0, std::fabs(c.expected_loss))
                                     : std::nan("");
    if (!(cmp.loss_error <= tolerance) && cmp.detail.empty()) {
      char buf[200];
      std::snprintf(buf, sizeof(buf), "loss: got %.17g, expected %.17g (error %.3g > %.3g)",
                    result.loss, c.expected_loss, cmp.loss_error, tolerance);
      cmp.detail = result.has_loss ? buf : "loss: not in the result";
    }
  }
  cmp.ok = cmp.detail.empty();
  return cmp;
}

namespace {

void AppendResult(const TransformerCaseResult& result, std::string* out, std::FILE* file) {
  size_t index = 0;
  *out += "{\"logits\": ";
  AppendNested(result.forward.logits.data(), result.forward.logits_shape, 0, &index, out, file);
  if (result.has_loss) {
    *out += ", \"loss\": ";
    if (std::isfinite(result.loss)) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.17g", result.loss);  // round-trips a double
      *out += buf;
    } else {
      AppendNumber(static_cast<float>(result.loss), out);
    }
  }
  if (!result.forward.hooks.empty()) {
    *out += ", \"hooks\": {";
    bool first = true;
    for (const auto& [name, hook] : result.forward.hooks) {
      if (!first) *out += ", ";
      first = false;
      *out += Json(name).dump() + ": ";
      index = 0;
      AppendNested(hook.data.data(), hook.shape, 0, &index, out, file);
    }
    *out += '}';
  }
  *out += '}';
}

// ResultToJson and WriteResultJson of either kind.
template <typename Result>
std::string ResultText(const Result& result) {
  std::string out;
  AppendResult(result, &out, nullptr);
  return out;
}

template <typename Result>
bool WriteResultText(const Result& result, std::FILE* file) {
  std::string out;
  AppendResult(result, &out, file);
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), file);
  return std::fflush(file) == 0 && !std::ferror(file);
}

}  // namespace

std::string ResultToJson(const ForwardResult& result) { return ResultText(result); }
bool WriteResultJson(const ForwardResult& result, std::FILE* file) {
  return WriteResultText(result, file);
}
std::string ResultToJson(const TransformerCaseResult& result) { return ResultText(result); }
bool WriteResultJson(const TransformerCaseResult& result, std::FILE* file) {
  return WriteResultText(result, file);
}

uint64_t ResultJsonBytesBound(const TransformerCase& c) {
  // 64 bytes: {"logits": , "loss": <at most 24 characters>, "hooks": {}} and a newline. Each hook
  // at most the config's largest hook shape ([B,T,D], [B,H,T,dh], [B,H,T,T], [B,T,V]; no B
  // unbatched) and its quoted name with ": " and ", ". web/lib/case.js computes the same.
  const int64_t T = c.length, D = c.config.d_model, H = c.config.n_heads, V = c.config.vocab_size;
  const auto shape = [&](std::initializer_list<int64_t> dims) {
    Shape s;
    if (c.batched) s.dims[s.rank++] = c.batch;
    for (int64_t d : dims) s.dims[s.rank++] = d;
    return s;
  };
  const double hook = std::max({TensorJsonBytesBound(shape({T, D})),
                                TensorJsonBytesBound(shape({H, T, D / H})),
                                TensorJsonBytesBound(shape({H, T, T})),
                                TensorJsonBytesBound(shape({T, V}))});
  double bytes = 64 + TensorJsonBytesBound(shape({T, V}));
  for (const auto& [name, t] : c.expected_hooks) bytes += hook + static_cast<double>(name.size()) + 6;
  return bytes >= 1.8e19 ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(bytes);
}

Status CheckResultJsonSize(const TransformerCase& c, uint64_t max_bytes) {
  const uint64_t bound = ResultJsonBytesBound(c);
  if (bound <= max_bytes) return Status::Ok();
  const size_t hooks = c.expected_hooks.size();
  const Shape logits = c.batched ? Shape({c.batch, c.length, c.config.vocab_size})
                                 : Shape({c.length, c.config.vocab_size});
  return Status(StatusCode::kResourceExhausted,
                "result: its JSON text could take " + std::to_string(bound) + " bytes (logits " +
                    logits.ToString() + ", " + std::to_string(hooks) +
                    (hooks == 1 ? " hook" : " hooks") + "), more than the limit of " +
                    std::to_string(max_bytes) + " bytes");
}

}  // namespace headscope
