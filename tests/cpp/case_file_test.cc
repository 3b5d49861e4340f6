// The JSON case format (docs/case-format.md): ParseCase errors name the JSON path, the
// non-finite strings, self-attention defaults, `expected` handling, ResultToJson / TensorToJson
// output and a round trip through them, and CompareWithExpected; "kind": "transformer" documents
// through ParseCaseDocument, RunTransformerCase and their comparison.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "headscope/case_file.h"
#include "headscope/mha.h"
#include "headscope/status.h"
#include "headscope/tensor.h"
#include "nlohmann/json.hpp"

namespace headscope {
namespace {

using Json = nlohmann::json;

// gmock is not built for WebAssembly: substring checks use gtest's IsSubstring.
#define EXPECT_MSG_HAS(status, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, (status).message())

constexpr float kInf = std::numeric_limits<float>::infinity();

std::string ReadOrDie(const std::string& path) {
  std::string text;
  const Status s = ReadTextFile(path, &text);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return text;
}

std::string GoldenPath(const std::string& name) { return HEADSCOPE_GOLDEN_DIR "/" + name; }

// The seed worked example as a mutable JSON document.
Json Seed() { return Json::parse(ReadOrDie(HEADSCOPE_GOLDEN_DIR "/seed-worked-example.json")); }

Status Parse(const Json& doc, AttentionCase* c) { return ParseCase(doc.dump(), c); }

// ParseCase refuses `doc` with kParseError, the message starting with "<path>: " or, for an
// element of an array, "<path>[i][j]: ".
Status ExpectParseError(const Json& doc, const std::string& path) {
  AttentionCase c;
  const Status s = Parse(doc, &c);
  EXPECT_EQ(s.code(), StatusCode::kParseError) << s.ToString();
  const std::string& m = s.message();
  const bool starts = m.rfind(path, 0) == 0 && m.size() > path.size() &&
                      (m.compare(path.size(), 2, ": ") == 0 || m[path.size()] == '[');
  EXPECT_TRUE(starts) << "message should start with '" << path << ": ': " << m;
  return s;
}

// --- parse errors name the JSON path ------------------------------------------------------------

TEST(ParseCaseErrors, InvalidJsonIsTheRoot) {
  AttentionCase c;
  // Each with the byte offset where the error is detected (the length at an unexpected end).
  const std::pair<const char*, int> bad[] = {
      {"", 0}, {"{", 1}, {"{\"config\": }", 11}, {"not json", 1}, {"{\"a\": 1,}", 8}};
  for (const auto& [text, offset] : bad) {
    const Status s = ParseCase(text, &c);
    EXPECT_EQ(s.code(), StatusCode::kParseError) << "'" << text << "': " << s.ToString();
    const std::string prefix = "$: not valid JSON (at byte " + std::to_string(offset) + ": ";
    EXPECT_EQ(s.message().rfind(prefix, 0), 0u) << "'" << text << "': " << s.message();
  }
  const Status s = ParseCase("[1, 2]", &c);
  EXPECT_EQ(s.code(), StatusCode::kParseError) << s.ToString();
  EXPECT_EQ(s.message(), "$: expected an object, got array [1,2]");
}

TEST(ParseCaseErrors, MissingOrMistypedSections) {
  Json doc = Seed();
  doc.erase("config");
  Status s = ExpectParseError(doc, "config");
  EXPECT_MSG_HAS(s, "expected an object");

  doc = Seed();
  doc["config"] = Json::array({4, 2});
  (void)ExpectParseError(doc, "config");

  doc = Seed();
  doc.erase("state_dict");
  (void)ExpectParseError(doc, "state_dict");

  doc = Seed();
  doc.erase("inputs");
  (void)ExpectParseError(doc, "inputs");

  doc = Seed();
  doc["inputs"].erase("query");
  s = ExpectParseError(doc, "inputs.query");
  EXPECT_MSG_HAS(s, "required");

  doc = Seed();
  doc["name"] = 7;
  s = ExpectParseError(doc, "name");
  EXPECT_MSG_HAS(s, "got number 7");
}

TEST(ParseCaseErrors, EmbedDimNotAPositiveInteger) {
  const std::string range = "an integer in [1, " + std::to_string(kMaxDim) + "]";
  struct Bad {
    Json value;
    std::string got;
  };
  const Bad bad[] = {
      {4.5, "got number 4.5"},
      {"4", "got string \"4\""},
      {0, "got number 0"},
      {-4, "got number -4"},
      {kMaxDim + 1, "got number " + std::to_string(kMaxDim + 1)},
      {true, "got boolean true"},
      {Json::array({4}), "got array [4]"},
  };
  for (const Bad& b : bad) {
    Json doc = Seed();
    doc["config"]["embed_dim"] = b.value;
    SCOPED_TRACE(b.value.dump());
    const Status s = ExpectParseError(doc, "config.embed_dim");
    EXPECT_MSG_HAS(s, range);
    EXPECT_MSG_HAS(s, b.got);
  }
  Json doc = Seed();
  doc["config"].erase("embed_dim");
  Status s = ExpectParseError(doc, "config.embed_dim");
  EXPECT_MSG_HAS(s, "required");
  doc["config"]["embed_dim"] = nullptr;
  (void)ExpectParseError(doc, "config.embed_dim");

  // An integral float is an integer.
  doc = Seed();
  doc["config"]["embed_dim"] = 4.0;
  AttentionCase c;
  s = Parse(doc, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.config.embed_dim, 4);
}

TEST(ParseCaseErrors, NumHeadsAndKdimVdim) {
  Json doc = Seed();
  doc["config"]["num_heads"] = 3;
  Status s = ExpectParseError(doc, "config.num_heads");
  EXPECT_MSG_HAS(s, "embed_dim (4) must be divisible by num_heads (3)");

  doc["config"]["num_heads"] = 0;
  s = ExpectParseError(doc, "config.num_heads");
  EXPECT_MSG_HAS(s, "got number 0");

  doc = Seed();
  doc["config"]["kdim"] = -1;
  s = ExpectParseError(doc, "config.kdim");
  EXPECT_MSG_HAS(s, "expected null (= embed_dim) or an integer");
  EXPECT_MSG_HAS(s, "got number -1");

  doc = Seed();
  doc["config"]["vdim"] = 2.5;
  s = ExpectParseError(doc, "config.vdim");
  EXPECT_MSG_HAS(s, "got number 2.5");

  doc = Seed();
  doc["config"]["bias"] = "false";
  s = ExpectParseError(doc, "config.bias");
  EXPECT_MSG_HAS(s, "expected true or false, got string \"false\"");
}

TEST(ParseCaseErrors, UnknownKeyIsNamed) {
  Json doc = Seed();
  doc["config"].erase("num_heads");
  doc["config"]["num_head"] = 2;
  Status s = ExpectParseError(doc, "config.num_head");
  EXPECT_MSG_HAS(s, "unknown key");
  EXPECT_MSG_HAS(s, "num_heads");  // the list of allowed keys shows the right spelling

  doc = Seed();
  doc["inputs"]["querry"] = doc["inputs"]["query"];
  s = ExpectParseError(doc, "inputs.querry");
  EXPECT_MSG_HAS(s, "unknown key");
  EXPECT_MSG_HAS(s, "key_padding_mask");
}

TEST(ParseCaseErrors, DropoutMustBeZero) {
  Json doc = Seed();
  doc["config"]["dropout"] = 0.1;
  Status s = ExpectParseError(doc, "config.dropout");
  EXPECT_MSG_HAS(s, "without dropout");
  EXPECT_MSG_HAS(s, "got number 0.1");

  doc["config"]["dropout"] = "0";
  s = ExpectParseError(doc, "config.dropout");
  EXPECT_MSG_HAS(s, "got string \"0\"");

  for (const Json& zero : {Json(0), Json(0.0), Json(nullptr)}) {
    doc["config"]["dropout"] = zero;
    AttentionCase c;
    s = Parse(doc, &c);
    EXPECT_TRUE(s.ok()) << zero.dump() << ": " << s.ToString();
  }
}

TEST(ParseCaseErrors, StateDictEntryNotAnArray) {
  Json doc = Seed();
  doc["state_dict"]["in_proj_weight"] = 1;
  Status s = ExpectParseError(doc, "state_dict.in_proj_weight");
  EXPECT_MSG_HAS(s, "expected a nested array of numbers, got number 1");

  doc["state_dict"]["in_proj_weight"] = Json::object({{"a", 1}});
  s = ExpectParseError(doc, "state_dict.in_proj_weight");
  EXPECT_MSG_HAS(s, "got object");

  doc = Seed();
  doc["state_dict"]["out_proj.weight"] = nullptr;
  s = ExpectParseError(doc, "state_dict.out_proj.weight");
  EXPECT_MSG_HAS(s, "got null");

  doc = Seed();
  doc["state_dict"] = Json::array();
  (void)ExpectParseError(doc, "state_dict");
}

TEST(ParseCaseErrors, RaggedArrayNamesTheElement) {
  // Row 1 of in_proj_weight with 3 instead of 4 numbers.
  Json doc = Seed();
  doc["state_dict"]["in_proj_weight"][1].erase(3);
  Status s = ExpectParseError(doc, "state_dict.in_proj_weight[1]");
  EXPECT_MSG_HAS(s, "expected 4 elements like its siblings, got 3");

  // A value after an empty array sibling (found by fuzz/case_fuzzer: it used to parse as a mask
  // of shape [2] holding one value).
  doc = Seed();
  doc["inputs"]["key_padding_mask"] = Json::array({Json::array(), true, false});
  s = ExpectParseError(doc, "inputs.key_padding_mask[1]");
  EXPECT_MSG_HAS(s, "expected an array like its siblings, got boolean true");

  // A number where its siblings are rows.
  doc = Seed();
  doc["state_dict"]["in_proj_weight"][2] = 5;
  s = ExpectParseError(doc, "state_dict.in_proj_weight[2]");
  EXPECT_MSG_HAS(s, "expected a nested array of depth 2 like its siblings, got number 5");

  // An array where its siblings are numbers.
  doc = Seed();
  doc["inputs"]["query"][1][0] = Json::array({1});
  s = ExpectParseError(doc, "inputs.query[1][0]");
  EXPECT_MSG_HAS(s, "expected a value like its siblings, got array [1]");

  // Deeper than the rank-4 limit.
  doc = Seed();
  doc["inputs"]["query"] = Json::array({Json::array({Json::array({Json::array({Json::array(
      {1.0})})})})});
  // Named by the tensor, as the JS parser names it.
  s = ExpectParseError(doc, "inputs.query");
  EXPECT_EQ(s.message(), "inputs.query: arrays nested deeper than 4 levels");

  // Empty siblings fix the size too: [[], [1]] is ragged.
  doc = Seed();
  doc["inputs"]["attn_mask"] = Json::array({Json::array(), Json::array({true})});
  s = ExpectParseError(doc, "inputs.attn_mask[1]");
  EXPECT_MSG_HAS(s, "expected 0 elements like its siblings, got 1");
}

TEST(ParseCaseErrors, StringThatIsNotInfOrNanInATensor) {
  for (const char* bad : {"x", "1.0", "infinity", ""}) {
    SCOPED_TRACE(bad);
    Json doc = Seed();
    doc["inputs"]["query"][1][2] = bad;
    const Status s = ExpectParseError(doc, "inputs.query");
    EXPECT_MSG_HAS(s, "got string \"" + std::string(bad) + "\"");
    EXPECT_MSG_HAS(s, "\"inf\", \"-inf\", \"nan\"");
    EXPECT_MSG_HAS(s, "inputs.query[1][2]: expected a number");
  }
  Json doc = Seed();
  doc["state_dict"]["out_proj.weight"][0][0] = nullptr;
  Status s = ExpectParseError(doc, "state_dict.out_proj.weight");
  EXPECT_MSG_HAS(s, "got null");

  doc = Seed();
  doc["inputs"]["key"][0][0] = false;
  s = ExpectParseError(doc, "inputs.key");
  EXPECT_MSG_HAS(s, "got boolean false");
}

TEST(ParseCaseErrors, MaskMixingBoolsAndNumbers) {
  Json doc = Seed();
  doc["inputs"]["attn_mask"] = Json::array({Json::array({false, 1, false}),
                                            Json::array({false, false, false}),
                                            Json::array({false, false, false})});
  Status s = ExpectParseError(doc, "inputs.attn_mask");
  EXPECT_MSG_HAS(s, "inputs.attn_mask[0][1]: expected a boolean like the first element, got number 1");

  doc["inputs"]["attn_mask"] = Json::array({Json::array({0, 0, 0}), Json::array({0, true, 0}),
                                            Json::array({0, 0, 0})});
  s = ExpectParseError(doc, "inputs.attn_mask");
  EXPECT_MSG_HAS(s, "inputs.attn_mask[1][1]: expected a number like the first element, got boolean true");

  doc = Seed();
  doc["inputs"]["key_padding_mask"] = Json::array({true, "-inf", false});
  s = ExpectParseError(doc, "inputs.key_padding_mask");
  EXPECT_MSG_HAS(s, "inputs.key_padding_mask[1]: ");
  EXPECT_MSG_HAS(s, "got string \"-inf\"");

  doc = Seed();
  doc["inputs"]["key_padding_mask"] = "none";
  s = ExpectParseError(doc, "inputs.key_padding_mask");
  EXPECT_MSG_HAS(s, "got string \"none\"");

  // A float mask may hold "-inf"; a bool mask of the right shape is kept as bytes.
  doc = Seed();
  doc["inputs"]["key_padding_mask"] = Json::array({0.0, "-inf", -0.5});
  doc["inputs"]["attn_mask"] = Json::array({Json::array({false, true, true}),
                                            Json::array({false, false, true}),
                                            Json::array({false, false, false})});
  AttentionCase c;
  s = Parse(doc, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.key_padding_mask.type, MaskType::kFloat);
  ASSERT_EQ(c.key_padding_mask.floats.size(), 3u);
  EXPECT_EQ(c.key_padding_mask.floats[1], -kInf);
  EXPECT_EQ(c.attn_mask.type, MaskType::kBool);
  EXPECT_EQ(c.attn_mask.shape, Shape({3, 3}));
  EXPECT_EQ(c.attn_mask.bools, (std::vector<uint8_t>{0, 1, 1, 0, 0, 1, 0, 0, 0}));
  // And the case runs with them.
  ForwardResult result;
  s = RunCase(c, CasePath::kFast, &result);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(ParseCase, NonFiniteStringsAreFloats) {
  Json doc = Seed();
  doc["inputs"]["query"][0][0] = "inf";
  doc["inputs"]["query"][0][1] = "-inf";
  doc["inputs"]["query"][0][2] = "nan";
  doc["state_dict"]["out_proj.weight"][3][3] = "nan";
  AttentionCase c;
  const Status s = Parse(doc, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(c.query.data.size(), 12u);
  EXPECT_EQ(c.query.data[0], kInf);
  EXPECT_EQ(c.query.data[1], -kInf);
  EXPECT_TRUE(std::isnan(c.query.data[2]));
  EXPECT_EQ(c.query.data[3], 2.0f);
  ASSERT_EQ(c.state_dict.size(), 2u);
  EXPECT_EQ(c.state_dict[1].first, "out_proj.weight");
  EXPECT_TRUE(std::isnan(c.state_dict[1].second.data[15]));
  // The key given explicitly in the file keeps its own (finite) values.
  EXPECT_EQ(c.key.data[0], 1.0f);
}

TEST(ParseCase, KeyAndValueDefaultToTheQuery) {
  for (bool as_null : {false, true}) {
    SCOPED_TRACE(as_null ? "null" : "absent");
    Json doc = Seed();
    if (as_null) {
      doc["inputs"]["key"] = nullptr;
      doc["inputs"]["value"] = nullptr;
    } else {
      doc["inputs"].erase("key");
      doc["inputs"].erase("value");
    }
    AttentionCase c;
    Status s = Parse(doc, &c);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(c.key.present);
    ASSERT_TRUE(c.value.present);
    EXPECT_EQ(c.key.shape, c.query.shape);
    EXPECT_EQ(c.value.shape, c.query.shape);
    EXPECT_EQ(c.key.data, c.query.data);
    EXPECT_EQ(c.value.data, c.query.data);
    // The seed is self-attention, so its expected values still hold.
    ForwardResult result;
    s = RunCase(c, CasePath::kFast, &result);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const CaseComparison cmp = CompareWithExpected(c, result, 1e-5);
    EXPECT_TRUE(cmp.ok) << cmp.detail;
  }
  // Only the value absent: it is the query, not the key.
  Json doc = Seed();
  doc["inputs"]["key"][0][0] = 9.0;
  doc["inputs"].erase("value");
  AttentionCase c;
  ASSERT_TRUE(Parse(doc, &c).ok());
  EXPECT_EQ(c.value.data, c.query.data);
  EXPECT_EQ(c.key.data[0], 9.0f);
}

TEST(ParseCase, ExpectedWeightsNullOrArray) {
  Json doc = Seed();
  AttentionCase c;
  ASSERT_TRUE(Parse(doc, &c).ok());
  EXPECT_TRUE(c.has_expected);
  EXPECT_TRUE(c.expected_output.present);
  EXPECT_EQ(c.expected_output.shape, Shape({3, 4}));
  EXPECT_TRUE(c.expected_weights.present);
  EXPECT_EQ(c.expected_weights.shape, Shape({2, 3, 3}));
  EXPECT_FALSE(c.average_attn_weights);
  EXPECT_TRUE(c.need_weights);

  ForwardResult result;
  ASSERT_TRUE(RunCase(c, CasePath::kFast, &result).ok());

  doc["expected"]["weights"] = nullptr;
  ASSERT_TRUE(Parse(doc, &c).ok());
  EXPECT_TRUE(c.has_expected);
  EXPECT_FALSE(c.expected_weights.present);
  // The run returns weights, the file says null: a mismatch, named.
  CaseComparison cmp = CompareWithExpected(c, result, 1e-4);
  EXPECT_FALSE(cmp.ok);
  EXPECT_EQ(cmp.detail, "weights: returned, expected null");

  // With need_weights false the run returns none, and null matches.
  doc["inputs"]["need_weights"] = false;
  ASSERT_TRUE(Parse(doc, &c).ok());
  ForwardResult no_weights;
  ASSERT_TRUE(RunCase(c, CasePath::kFast, &no_weights).ok());
  EXPECT_FALSE(no_weights.has_weights());
  cmp = CompareWithExpected(c, no_weights, 1e-4);
  EXPECT_TRUE(cmp.ok) << cmp.detail;

  // ... but not an array.
  doc = Seed();
  doc["inputs"]["need_weights"] = false;
  ASSERT_TRUE(Parse(doc, &c).ok());
  cmp = CompareWithExpected(c, no_weights, 1e-4);
  EXPECT_FALSE(cmp.ok);
  EXPECT_EQ(cmp.detail, "weights: null, expected an array");

  // Absent "expected": nothing to compare.
  doc = Seed();
  doc.erase("expected");
  ASSERT_TRUE(Parse(doc, &c).ok());
  EXPECT_FALSE(c.has_expected);
  cmp = CompareWithExpected(c, result, 1e-4);
  EXPECT_FALSE(cmp.ok);
  EXPECT_EQ(cmp.detail, "the case has no expected values");

  // "expected" without "output", or not an object.
  doc = Seed();
  doc["expected"].erase("output");
  Status s = ExpectParseError(doc, "expected.output");
  EXPECT_MSG_HAS(s, "required");
  doc["expected"] = Json::array();
  (void)ExpectParseError(doc, "expected");
  doc = Seed();
  doc["expected"]["weights"] = "none";
  (void)ExpectParseError(doc, "expected.weights");
}

// --- building and running ----------------------------------------------------------------------

TEST(CaseFile, ReadTextFileMissingFile) {
  std::string text;
  const std::string path = HEADSCOPE_GOLDEN_DIR "/no-such-case.json";
  const Status s = ReadTextFile(path, &text);
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_MSG_HAS(s, path);
}

TEST(CaseFile, StateDictProblemsSurfaceAtBuild) {
  Json doc = Seed();
  doc["state_dict"]["foo"] = Json::array({1.0});
  AttentionCase c;
  ASSERT_TRUE(Parse(doc, &c).ok());  // keys are checked against the config when loading
  std::unique_ptr<MultiheadAttention> mha;
  Status s = BuildModule(c, &mha);
  EXPECT_EQ(s.code(), StatusCode::kUnknownParameter) << s.ToString();
  EXPECT_MSG_HAS(s, "'foo'");
  EXPECT_EQ(mha, nullptr);

  doc = Seed();
  doc["state_dict"].erase("out_proj.weight");
  ASSERT_TRUE(Parse(doc, &c).ok());
  ForwardResult result;
  s = RunCase(c, CasePath::kFast, &result);
  EXPECT_EQ(s.code(), StatusCode::kMissingParameter) << s.ToString();
  EXPECT_MSG_HAS(s, "out_proj.weight [4, 4]");

  doc = Seed();
  doc["state_dict"]["out_proj.weight"].erase(0);  // (3, 4)
  ASSERT_TRUE(Parse(doc, &c).ok());
  s = RunCase(c, CasePath::kReference, &result);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "state_dict['out_proj.weight']: expected shape [4, 4], got [3, 4]");

  // Input shapes are checked at the call.
  doc = Seed();
  doc["inputs"]["value"].erase(0);
  ASSERT_TRUE(Parse(doc, &c).ok());
  s = RunCase(c, CasePath::kFast, &result);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "value: sequence length 2 does not match key's 3");
}

// --- writing results ---------------------------------------------------------------------------

TEST(CaseFile, TensorToJsonNestsByShape) {
  const float d[] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  EXPECT_EQ(TensorToJson(d, {2, 3}), "[[1, 2, 3], [4, 5, 6]]");
  EXPECT_EQ(TensorToJson(d, {3, 2}), "[[1, 2], [3, 4], [5, 6]]");
  EXPECT_EQ(TensorToJson(d, {1, 2, 1, 3}), "[[[[1, 2, 3]], [[4, 5, 6]]]]");
  EXPECT_EQ(TensorToJson(d, {6}), "[1, 2, 3, 4, 5, 6]");
  EXPECT_EQ(TensorToJson(d, {0}), "[]");
  EXPECT_EQ(TensorToJson(d, {2, 0}), "[[], []]");
  EXPECT_EQ(TensorToJson(d, {0, 3}), "[]");

  const float nf[] = {kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), -0.5f};
  EXPECT_EQ(TensorToJson(nf, {2, 2}), "[[\"inf\", \"-inf\"], [\"nan\", -0.5]]");

  // Nine significant digits: every float reads back exactly.
  const float odd[] = {0.1f, 1.0f / 3.0f, -1e-30f, 3.4028235e38f, 1.17549435e-38f};
  const std::string text = TensorToJson(odd, {5});
  const Json parsed = Json::parse(text);
  ASSERT_TRUE(parsed.is_array());
  ASSERT_EQ(parsed.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(static_cast<float>(parsed[i].get<double>()), odd[i]) << text;
  }
}

TEST(CaseFile, ResultToJsonWritesOutputAndWeights) {
  ForwardResult r;
  ASSERT_TRUE(r.output.Resize(4));
  r.output_shape = {2, 2};
  for (int i = 0; i < 4; ++i) r.output[i] = 0.5f * static_cast<float>(i);
  r.output[3] = -kInf;
  EXPECT_EQ(ResultToJson(r), "{\"output\": [[0, 0.5], [1, \"-inf\"]], \"weights\": null}");

  ASSERT_TRUE(r.weights.Resize(2));
  r.weights_shape = {1, 1, 2};
  r.weights[0] = 0.25f;
  r.weights[1] = std::numeric_limits<float>::quiet_NaN();
  const std::string text = ResultToJson(r);
  EXPECT_EQ(text,
            "{\"output\": [[0, 0.5], [1, \"-inf\"]], \"weights\": [[[0.25, \"nan\"]]]}");
  const Json j = Json::parse(text);
  EXPECT_EQ(j["weights"][0][0][1], "nan");
}

// Parses golden `name`, runs it on both paths, checks both against `expected`, then writes the
// fast result with ResultToJson, puts that in place of `expected` and parses the document again:
// the numbers read back are exactly the result's.
void RoundTrip(const std::string& name) {
  SCOPED_TRACE(name);
  const std::string text = ReadOrDie(GoldenPath(name));
  AttentionCase c;
  Status s = ParseCase(text, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(c.has_expected);
  EXPECT_EQ(c.name + ".json", name);

  ForwardResult fast, ref;
  s = RunCase(c, CasePath::kFast, &fast);
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = RunCase(c, CasePath::kReference, &ref);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (const ForwardResult* r : {&fast, &ref}) {
    const CaseComparison cmp = CompareWithExpected(c, *r, 1e-4);
    EXPECT_TRUE(cmp.ok) << (r == &fast ? "fast: " : "reference: ") << cmp.detail;
    EXPECT_GE(cmp.max_relative_error, 0.0);
    EXPECT_LE(cmp.max_relative_error, 1e-4);
  }

  const std::string written = ResultToJson(fast);
  Json doc = Json::parse(text);
  const Json result_json = Json::parse(written, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(result_json.is_discarded()) << written;
  ASSERT_TRUE(result_json.is_object());
  EXPECT_EQ(result_json.size(), 2u);
  // Nesting follows the shape: the outer array has the first dimension.
  ASSERT_TRUE(result_json["output"].is_array());
  EXPECT_EQ(static_cast<int64_t>(result_json["output"].size()), fast.output_shape[0]);
  EXPECT_EQ(result_json["weights"].is_null(), !fast.has_weights());

  doc["expected"] = result_json;
  AttentionCase again;
  s = ParseCase(doc.dump(), &again);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(again.expected_output.shape, fast.output_shape);
  EXPECT_EQ(again.expected_weights.present, fast.has_weights());
  if (fast.has_weights()) {
    EXPECT_EQ(again.expected_weights.shape, fast.weights_shape);
  }
  const CaseComparison exact = CompareWithExpected(again, fast, 0.0);
  EXPECT_TRUE(exact.ok) << exact.detail;
  EXPECT_EQ(exact.max_relative_error, 0.0);
  // And the reference result compares against the written fast one within tolerance.
  const CaseComparison cross = CompareWithExpected(again, ref, 1e-5);
  EXPECT_TRUE(cross.ok) << cross.detail;
}

TEST(CaseFile, RoundTripThroughResultToJson) {
  RoundTrip("seed-worked-example.json");
  RoundTrip("need-weights-false-batched.json");             // weights null
  RoundTrip("full-rows-float-2d-unbatched.json");           // fully masked rows, "-inf" masks
  RoundTrip("bias-kv-zero-attn-batched-bool-3d.json");      // extra keys, per-head bool mask
  RoundTrip("mask-float-3d-batch-first.json");              // batch_first layout
  RoundTrip("kdim-vdim-no-bias-unbatched-bool-2d.json");    // separate projections
}

// --- comparing ---------------------------------------------------------------------------------

TEST(CaseFile, CompareWithExpectedDetectsDifferences) {
  AttentionCase c;
  ASSERT_TRUE(ParseCase(ReadOrDie(GoldenPath("seed-worked-example.json")), &c).ok());
  ForwardResult result;
  ASSERT_TRUE(RunCase(c, CasePath::kFast, &result).ok());

  CaseComparison cmp = CompareWithExpected(c, result, 1e-5);
  ASSERT_TRUE(cmp.ok) << cmp.detail;
  EXPECT_LT(cmp.max_relative_error, 1e-5);
  EXPECT_TRUE(cmp.detail.empty()) << cmp.detail;

  {
    // One output value off by 0.01: relative to max |expected| (2.72...), about 3.7e-3.
    AttentionCase p = c;
    p.expected_output.data[5] += 0.01f;
    cmp = CompareWithExpected(p, result, 1e-4);
    EXPECT_FALSE(cmp.ok);
    EXPECT_NEAR(cmp.max_relative_error, 0.01 / 2.722529573224908, 2e-4);
    EXPECT_PRED_FORMAT2(::testing::IsSubstring, "output[5]: got", cmp.detail);
    EXPECT_PRED_FORMAT2(::testing::IsSubstring, "relative error", cmp.detail);
    // ... which a loose enough tolerance accepts, still reporting the error.
    cmp = CompareWithExpected(p, result, 1e-2);
    EXPECT_TRUE(cmp.ok) << cmp.detail;
    EXPECT_GT(cmp.max_relative_error, 1e-3);
  }
  {
    AttentionCase p = c;
    p.expected_weights.data[17] -= 0.05f;
    cmp = CompareWithExpected(p, result, 1e-4);
    EXPECT_FALSE(cmp.ok);
    EXPECT_PRED_FORMAT2(::testing::IsSubstring, "weights[17]", cmp.detail);
    EXPECT_GT(cmp.max_relative_error, 1e-2);
  }
  {
    AttentionCase p = c;
    p.expected_output.shape = {4, 3};
    cmp = CompareWithExpected(p, result, 1e-4);
    EXPECT_FALSE(cmp.ok);
    EXPECT_EQ(cmp.detail, "output: shape [3, 4], expected [4, 3]");
  }
  {
    AttentionCase p = c;
    p.expected_weights.shape = {3, 2, 3};
    cmp = CompareWithExpected(p, result, 1e-4);
    EXPECT_FALSE(cmp.ok);
    EXPECT_EQ(cmp.detail, "weights: shape [2, 3, 3], expected [3, 2, 3]");
  }
  {
    // A NaN expected where the result is finite is a difference whatever the tolerance.
    AttentionCase p = c;
    p.expected_output.data[0] = std::numeric_limits<float>::quiet_NaN();
    cmp = CompareWithExpected(p, result, 1e9);
    EXPECT_FALSE(cmp.ok);
    EXPECT_PRED_FORMAT2(::testing::IsSubstring, "output[0]", cmp.detail);
    EXPECT_PRED_FORMAT2(::testing::IsSubstring, "nan", cmp.detail);
  }
}

// The data files the CLI tests use are what they claim to be.
TEST(CaseFile, CliDataFiles) {
  AttentionCase c;
  Status s = ParseCase(ReadOrDie(HEADSCOPE_TEST_DATA_DIR "/wrong-expected.json"), &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ForwardResult result;
  ASSERT_TRUE(RunCase(c, CasePath::kFast, &result).ok());
  const CaseComparison cmp = CompareWithExpected(c, result, 1e-4);
  EXPECT_FALSE(cmp.ok);
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "output[0]", cmp.detail);

  s = ParseCase(ReadOrDie(HEADSCOPE_TEST_DATA_DIR "/bad-num-heads.json"), &c);
  EXPECT_EQ(s.code(), StatusCode::kParseError) << s.ToString();
  EXPECT_EQ(s.message(), "config.num_heads: embed_dim (4) must be divisible by num_heads (3)");
}

// --- limits on hostile input ------------------------------------------------------------------

// "[[[[...]]]]" nested `depth` levels.
std::string Nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(ParseCaseLimits, DeepNestingIsRefusedAtTheDepthLimitWithoutRecursion) {
  // A 100,000-level case used to crash the CLI (a recursive dump() describing the value); a
  // million levels is 2 MB of text. Refused where level 65 opens, naming the path (abbreviated).
  for (size_t depth : {size_t{65}, size_t{100000}, size_t{1000000}}) {
    SCOPED_TRACE(depth);
    AttentionCase c;
    Status s = ParseCase(Nested(depth), &c);
    EXPECT_EQ(s.code(), StatusCode::kParseError) << s.ToString();
    EXPECT_EQ(s.message(), "$[0][0][0][0][0][0][0][0]...: nested deeper than 64 levels");
    // Where an error message would describe the value (a flag that is not a boolean).
    const std::string doc = "{\"config\": {\"embed_dim\": 4, \"num_heads\": 2, \"bias\": " +
                            Nested(depth) + "}}";
    s = ParseCase(doc, &c);
    EXPECT_EQ(s.code(), StatusCode::kParseError) << s.ToString();
    EXPECT_EQ(s.message(), "config.bias[0][0][0][0][0][0]...: nested deeper than 64 levels");
    std::string objects;
    for (size_t i = 0; i < depth; ++i) objects += "{\"a\":";
    objects += "1" + std::string(depth, '}');
    s = ParseCase(objects, &c);
    EXPECT_EQ(s.message(), "a.a.a.a.a.a.a.a...: nested deeper than 64 levels") << s.ToString();
  }
  // 64 levels are allowed: here in "meta", which both parsers ignore, so the seed still runs.
  std::string text = Seed().dump();
  text.insert(text.size() - 1, ",\"meta\":" + Nested(63));
  AttentionCase c;
  const Status s = ParseCase(text, &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// 50 MB of text and 16 million arrays: 4 s in the native Release build, over a minute under
// AddressSanitizer and far more in WebAssembly, for code that is the same everywhere; so only in
// the plain native build.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEADSCOPE_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define HEADSCOPE_UNDER_ASAN 1
#endif
#if !defined(__EMSCRIPTEN__) && !defined(HEADSCOPE_UNDER_ASAN)
TEST(ParseCaseLimits, TooManyArraysAndObjects) {
  // kMaxJsonContainers empty arrays inside the root object and "meta": the next one is refused.
  std::string text = "{\"meta\": [";
  text.reserve(text.size() + 3 * kMaxJsonContainers + 8);
  for (uint64_t i = 0; i + 3 < kMaxJsonContainers; ++i) text += "[],";
  text += "[]]}";
  AttentionCase c;
  Status s = ParseCase(text, &c);
  EXPECT_EQ(s.message(), "config: expected an object") << "exactly at the limit: parsed";
  text.insert(text.size() - 2, ",[]");
  s = ParseCase(text, &c);
  EXPECT_EQ(s.code(), StatusCode::kParseError) << s.ToString();
  EXPECT_EQ(s.message(), "meta[" + std::to_string(kMaxJsonContainers - 2) + "]: more than " +
                             std::to_string(kMaxJsonContainers) +
                             " arrays and objects in the document");
}
#endif  // !__EMSCRIPTEN__ && !HEADSCOPE_UNDER_ASAN

TEST(ParseCaseLimits, InputBytes) {
  const std::string text = Seed().dump();
  AttentionCase c;
  Status s = ParseCase(text, &c, text.size());
  EXPECT_TRUE(s.ok()) << s.ToString();
  s = ParseCase(text, &c, text.size() - 1);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(s.message(), "$: the document is " + std::to_string(text.size()) +
                             " bytes, more than the limit of " + std::to_string(text.size() - 1) +
                             " bytes");
  EXPECT_EQ(kMaxCaseBytes, uint64_t{256} << 20);
}

TEST(ParseCaseLimits, MessagesDescribeHugeValuesBriefly) {
  // A value named in an error is shown by its first 40 characters, without serializing it all.
  Json doc = Seed();
  doc["config"]["bias"] = std::string(1 << 22, 'x');
  AttentionCase c;
  Status s = ExpectParseError(doc, "config.bias");
  EXPECT_LT(s.message().size(), 120u) << s.message().substr(0, 200);
  EXPECT_MSG_HAS(s, "got string \"xxxxxxxx");
  doc["config"]["bias"] = Json::array();
  for (int i = 0; i < 1000000; ++i) doc["config"]["bias"].push_back(i);
  s = ExpectParseError(doc, "config.bias");
  EXPECT_EQ(s.message(),
            "config.bias: expected true or false, got array [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,1...");
  // Multi-byte characters are never cut in two (the message stays valid UTF-8).
  doc["config"]["bias"] = std::string(35, 'a') + "\xE2\x82\xAC\xE2\x82\xAC\xE2\x82\xAC";
  s = ExpectParseError(doc, "config.bias");
  const std::string& m = s.message();
  EXPECT_EQ(m.substr(m.size() - 3), "...");
  const size_t quote = m.find('"');
  ASSERT_NE(quote, std::string::npos);
  EXPECT_TRUE(Json::parse(m.substr(quote, m.size() - 3 - quote) + "\"", nullptr, false)
                  .is_string()) << m;
}

TEST(ParseCaseNumbers, FollowTorchTensorFloat32) {
  Json doc = Seed();
  doc.erase("expected");
  std::string text = doc.dump();
  auto with_query_row = [&](const std::string& row) {
    std::string t = text;
    const size_t at = t.find("\"query\":[[") + 9;
    const size_t end = t.find(']', at);
    return t.replace(at, end - at + 1, row);
  };
  AttentionCase c;
  // "-0" is the integer zero (Python's json and torch make +0.0 of it); "-0.0" is negative zero;
  // 1e-400 underflows to 0; finite doubles beyond float32 are +-inf; 1e400 is refused.
  Status s = ParseCase(with_query_row("[-0, -0.0, 1e-400, 1e39]"), &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(std::signbit(c.query.data[0]));
  EXPECT_TRUE(std::signbit(c.query.data[1]) && c.query.data[1] == 0.0f);
  EXPECT_EQ(c.query.data[2], 0.0f);
  EXPECT_EQ(c.query.data[3], kInf);
  for (const char* big : {"1e400", "-1e400", "1.8e308"}) {
    s = ParseCase(with_query_row(std::string("[1, 2, 3, ") + big + "]"), &c);
    EXPECT_EQ(s.code(), StatusCode::kParseError) << s.ToString();
    EXPECT_EQ(s.message(), std::string("inputs.query[0][3]: the number ") + big +
                               " is out of range (beyond +-1.8e308); write \"inf\" or \"-inf\"");
  }
}

TEST(ParseCaseText, ByteOrderMarkNulAndTrailingBytes) {
  const std::string text = Seed().dump();
  AttentionCase c;
  EXPECT_TRUE(ParseCase("\xEF\xBB\xBF" + text, &c).ok());
  for (const std::string& tail : {std::string(1, '\0'), std::string(" x"), std::string("\n{}")}) {
    const Status s = ParseCase(text + tail, &c);
    EXPECT_EQ(s.code(), StatusCode::kParseError);
    const size_t at = text.size() + (tail[0] == '\0' ? 0 : 1);
    EXPECT_EQ(s.message().rfind("$: not valid JSON (at byte " + std::to_string(at) + ": ", 0), 0u)
        << s.message();
  }
  const Status s = ParseCase(text + std::string(1, '\0'), &c);
  EXPECT_MSG_HAS(s, "unexpected NUL byte");
}

std::string ReadBytes(const std::string& path) {
  std::string text;
  const Status s = ReadTextFile(path, &text);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return text;
}

// tests/cases/: the corpus the JS parser is held to as well (tests/js/case-conformance.test.js).
TEST(Conformance, GoodCasesParseAndRun) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(HEADSCOPE_CASES_DIR "/good")) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    AttentionCase c;
    Status s = ParseCase(ReadBytes(entry.path().string()), &c);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (CasePath path : {CasePath::kFast, CasePath::kReference}) {
      ForwardResult result;
      s = RunCase(c, path, &result);
      ASSERT_TRUE(s.ok()) << s.ToString();
      if (c.has_expected) {
        const CaseComparison cmp = CompareWithExpected(c, result, 1e-4);
        EXPECT_TRUE(cmp.ok) << cmp.detail;
      }
    }
    ++count;
  }
  EXPECT_GE(count, 9);
}

TEST(Conformance, BadCasesFailWithTheirCodePathAndOffset) {
  const Json expect = Json::parse(ReadBytes(HEADSCOPE_CASES_DIR "/bad/expect.json"), nullptr, false);
  ASSERT_TRUE(expect.is_object());
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(HEADSCOPE_CASES_DIR "/bad")) {
    const std::string name = entry.path().filename().string();
    if (name == "expect.json") continue;
    SCOPED_TRACE(name);
    ASSERT_TRUE(expect.contains(name)) << "bad/expect.json has no entry for it";
    const Json& e = expect[name];
    AttentionCase c;
    const Status s = ParseCase(ReadBytes(entry.path().string()), &c);
    EXPECT_EQ(StatusCodeName(s.code()), e["code"].get<std::string>()) << s.ToString();
    const std::string prefix = e["path"].get<std::string>() + ": ";
    EXPECT_EQ(s.message().rfind(prefix, 0), 0u) << s.message().substr(0, 300);
    if (e.contains("offset")) {
      EXPECT_MSG_HAS(s, "(at byte " + std::to_string(e["offset"].get<int>()) + ": ");
    }
    if (e.contains("message")) {
      EXPECT_MSG_HAS(s, e["message"].get<std::string>());
    }
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << "one line";
    ++count;
  }
  EXPECT_EQ(count, static_cast<int>(expect.size())) << "every entry of expect.json has its file";
}

// --- reading files -----------------------------------------------------------------------------

TEST(CaseFile, ReadTextFileDirectoryAndLimits) {
  std::string text;
  Status s = ReadTextFile(HEADSCOPE_CASES_DIR, &text);
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_EQ(s.message(), std::string(HEADSCOPE_CASES_DIR) + ": cannot read (Is a directory)");
  // A regular file over the limit is refused from its size, before it is read.
  const std::string seed = GoldenPath("seed-worked-example.json");
  const size_t size = ReadBytes(seed).size();
  s = ReadTextFile(seed, &text, size - 1);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(s.message(), seed + ": " + std::to_string(size) + " bytes, more than the limit of " +
                             std::to_string(size - 1) + " bytes");
  EXPECT_TRUE(ReadTextFile(seed, &text, size).ok());
#ifndef __EMSCRIPTEN__
  // An endless source is read only up to the limit.
  s = ReadTextFile("/dev/zero", &text, 1 << 20);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(s.message(), "/dev/zero: more than the limit of 1048576 bytes");
#endif
}

// --- the size of a printed result ----------------------------------------------------------------

TEST(CaseFile, ResultJsonBytesBoundHoldsAndRefusesHugeResults) {
  // The bound is never below what ResultToJson writes, on every golden case.
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(HEADSCOPE_GOLDEN_DIR)) {
    if (entry.path().extension() != ".json") continue;
    AttentionCase c;
    ASSERT_TRUE(ParseCase(ReadBytes(entry.path().string()), &c).ok());
    ForwardResult result;
    ASSERT_TRUE(RunCase(c, CasePath::kFast, &result).ok());
    EXPECT_LE(ResultToJson(result).size() + 1, ResultJsonBytesBound(c)) << entry.path();
    EXPECT_EQ(ResultWeightsShape(c), result.has_weights() ? result.weights_shape : Shape());
    ++count;
  }
  EXPECT_GE(count, 70);
  // 65 KB of case asking for 16384 x 16384 weights: refused from the shapes.
  Json doc = Json::parse(R"({"config": {"embed_dim": 1, "num_heads": 1, "bias": false},
      "state_dict": {"in_proj_weight": [[1], [1], [1]], "out_proj.weight": [[1]]}})");
  doc["inputs"]["query"] = Json::array();
  for (int i = 0; i < 16384; ++i) doc["inputs"]["query"].push_back(Json::array({0}));
  AttentionCase c;
  ASSERT_TRUE(Parse(doc, &c).ok());
  const Status s = CheckResultJsonSize(c);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "result: its JSON text could take 4563812392 bytes (output [16384, 1], "
                         "weights [16384, 16384]), more than the limit of 268435456 bytes");
  c.need_weights = false;
  EXPECT_TRUE(CheckResultJsonSize(c).ok());
}

TEST(CaseFile, WriteResultJsonWritesResultToJson) {
  AttentionCase c;
  ASSERT_TRUE(ParseCase(ReadBytes(GoldenPath("seed-worked-example.json")), &c).ok());
  ForwardResult result;
  ASSERT_TRUE(RunCase(c, CasePath::kFast, &result).ok());
  // A named file rather than tmpfile(): the WebAssembly build reaches the real file system
  // through NODERAWFS, where tmpfile() has no folder to use.
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("headscope-write-result-" + std::to_string(std::rand()) + ".json"))
                               .string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  EXPECT_TRUE(WriteResultJson(result, f));
  std::fclose(f);
  EXPECT_EQ(ReadBytes(path), ResultToJson(result) + "\n");
  std::remove(path.c_str());
}

// --- "kind": "transformer" ----------------------------------------------------------------------

Json TransformerGolden(const std::string& name) {
  return Json::parse(ReadOrDie(GoldenPath("transformer/" + name + ".json")));
}

// ParseCaseDocument refuses `doc` with kParseError whose message starts with "<prefix>".
void ExpectTransformerError(const Json& doc, const std::string& prefix) {
  CaseDocument d;
  const Status s = ParseCaseDocument(doc.dump(), &d);
  EXPECT_EQ(s.code(), StatusCode::kParseError) << s.ToString();
  EXPECT_EQ(s.message().rfind(prefix, 0), 0u) << "want '" << prefix << "': " << s.message();
}

TEST(TransformerCase, EveryGoldenCaseParsesRunsAndMatches) {
  int cases = 0;
  double worst = 0;
  for (const auto& entry : std::filesystem::directory_iterator(GoldenPath("transformer"))) {
    if (entry.path().extension() != ".json") continue;
    const std::string text = ReadOrDie(entry.path().string());
    CaseDocument doc;
    const Status s = ParseCaseDocument(text, &doc);
    ASSERT_TRUE(s.ok()) << entry.path() << ": " << s.ToString();
    ASSERT_EQ(doc.kind, CaseKind::kTransformer) << entry.path();
    const TransformerCase& c = doc.transformer;
    ASSERT_TRUE(c.has_expected);
    EXPECT_FALSE(c.expected_hooks.empty()) << entry.path();
    EXPECT_EQ(c.has_expected_loss, c.has_targets()) << entry.path();
    TransformerCaseResult result;
    const Status r = RunTransformerCase(c, &result);
    ASSERT_TRUE(r.ok()) << entry.path() << ": " << r.ToString();
    EXPECT_EQ(result.forward.hooks.size(), c.expected_hooks.size());
    const CaseComparison cmp = CompareWithExpected(c, result, 1e-4);
    EXPECT_TRUE(cmp.ok) << entry.path() << ": " << cmp.detail;
    EXPECT_EQ(cmp.tensors.size(), 1 + c.expected_hooks.size());
    EXPECT_EQ(cmp.has_loss, c.has_targets());
    worst = std::max(worst, cmp.max_relative_error);
    // An attention-case reader refuses it at "kind".
    AttentionCase mha;
    const Status m = ParseCase(text, &mha);
    EXPECT_EQ(m.code(), StatusCode::kParseError);
    EXPECT_EQ(m.message().rfind("kind: ", 0), 0u) << m.message();
    ++cases;
  }
  EXPECT_GE(cases, 30);
  std::printf("transformer goldens through the case format: %d cases, worst %.2e\n", cases, worst);
}

TEST(TransformerCase, UnbatchedResultsDropTheBatchAxisAndPrintAsTheExpectedSection) {
  CaseDocument doc;
  ASSERT_TRUE(ParseCaseDocument(TransformerGolden("none-learned-gelu-mlp-l2-h2-unbatched").dump(),
                                &doc).ok());
  const TransformerCase& c = doc.transformer;
  EXPECT_FALSE(c.batched);
  TransformerCaseResult result;
  ASSERT_TRUE(RunTransformerCase(c, &result).ok());
  EXPECT_EQ(result.forward.logits_shape, Shape({6, 10}));
  const Json printed = Json::parse(ResultToJson(result));
  ASSERT_TRUE(printed.contains("logits") && printed.contains("loss") && printed.contains("hooks"));
  EXPECT_EQ(printed["logits"].size(), 6u);
  EXPECT_NEAR(printed["loss"].get<double>(), c.expected_loss, 1e-4);
  EXPECT_EQ(printed["hooks"].size(), c.expected_hooks.size());
  EXPECT_LE(ResultToJson(result).size() + 1, ResultJsonBytesBound(c));
  // A wrong expected loss and a wrong hook value are mismatches naming them.
  TransformerCase wrong = c;
  wrong.expected_loss += 0.01;
  CaseComparison cmp = CompareWithExpected(wrong, result, 1e-4);
  EXPECT_FALSE(cmp.ok);
  EXPECT_EQ(cmp.detail.rfind("loss: got ", 0), 0u) << cmp.detail;
  wrong = c;
  wrong.expected_hooks.back().second.data[3] += 1;
  cmp = CompareWithExpected(wrong, result, 1e-4);
  EXPECT_FALSE(cmp.ok);
  EXPECT_EQ(cmp.detail.rfind("hooks." + wrong.expected_hooks.back().first + "[3]: got ", 0), 0u)
      << cmp.detail;
  EXPECT_FALSE(cmp.tensors.back().ok);
  EXPECT_TRUE(cmp.tensors.front().ok);
}

TEST(TransformerCase, MalformedDocumentsNameTheirPath) {
  const Json good = TransformerGolden("pre-learned-attn-only-l1-h1-b2");
  Json d = good;
  d["kind"] = "Transformer";
  ExpectTransformerError(d, "kind: expected one of \"mha\", \"transformer\"");
  d = good;
  d["config"].erase("d_model");
  ExpectTransformerError(d, "config.d_model: required, expected an integer in [1, 16777216]");
  d = good;
  d["config"]["n_heads"] = 3;
  ExpectTransformerError(d, "config.n_heads: d_model (4) must be divisible by n_heads (3)");
  d = good;
  d["config"]["positions"] = "rotary";
  ExpectTransformerError(d, "config.positions: expected one of \"learned\", \"sinusoidal\", \"none\"");
  d = good;
  d["config"]["d_mlp"] = -1;
  ExpectTransformerError(d, "config.d_mlp: expected 0 (no MLP) or an integer in [1, 16777216], got number -1");
  d = good;
  d["inputs"]["tokens"][1][3] = 7;
  ExpectTransformerError(d, "inputs.tokens[1][3]: expected a token id in [0, 6] (config.vocab_size 7), got 7");
  d = good;
  d["inputs"]["tokens"][0][1] = 1.5;
  ExpectTransformerError(d, "inputs.tokens[0][1]: expected an integer token id, got number 1.5");
  d = good;
  d["inputs"]["tokens"] = Json::array({Json::array({Json::array({1})})});
  ExpectTransformerError(d, "inputs.tokens: expected (T) or (B, T) token ids, got shape [1, 1, 1]");
  d = good;
  d["config"]["max_len"] = 4;
  ExpectTransformerError(d, "inputs.tokens: T = 5 tokens, more than config.max_len = 4");
  d = good;
  d["inputs"]["targets"][0][0] = -1;
  ExpectTransformerError(d, "inputs.targets[0][0]: expected -100 (not counted) or a token id in [0, 6]");
  d = good;
  d["inputs"]["head_gates"] = Json::array({1, 1});
  ExpectTransformerError(d, "inputs.head_gates: expected shape (n_layers, n_heads) = [1, 1], got [2]");
  d = good;
  d["expected"].erase("loss");
  ExpectTransformerError(d, "expected.loss: required when inputs.targets is given");
  d = good;
  d["expected"]["hooks"]["blocks.0.hook_mlp_out"] = Json::array({1});
  ExpectTransformerError(d, "expected.hooks.blocks.0.hook_mlp_out: not a hook of this config");
  d = good;
  d["expected"].erase("logits");
  ExpectTransformerError(d, "expected.logits: required when expected is given");
  // The state_dict's keys and shapes are the model's: named when it is built.
  d = good;
  d["state_dict"]["unembed.bias"] = Json::array({1, 2});
  CaseDocument doc;
  ASSERT_TRUE(ParseCaseDocument(d.dump(), &doc).ok());
  TransformerCaseResult result;
  const Status s = RunTransformerCase(doc.transformer, &result);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "unembed.bias");
  // An attention case still reads as one, with or without "kind": "mha".
  Json seed = Seed();
  seed["kind"] = "mha";
  ASSERT_TRUE(ParseCaseDocument(seed.dump(), &doc).ok());
  EXPECT_EQ(doc.kind, CaseKind::kMha);
  seed["kind"] = nullptr;
  AttentionCase mha;
  EXPECT_TRUE(Parse(seed, &mha).ok());
}

}  // namespace
}  // namespace headscope
