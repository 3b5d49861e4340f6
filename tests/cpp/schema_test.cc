// The schema (schema.h): the one description of each config. Its rows name the argument ids
// whose names status.cc spells (checked here against the rows, in both namings), SchemaJson is
// valid JSON listing every row, and CheckFields accepts and refuses each field at its bounds with
// the messages the project gives (tests/js/schema.test.js checks the JS copies against the same).
#include "headscope/schema.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "headscope/config.h"
#include "headscope/optim.h"
#include "headscope/transformer.h"
#include "nlohmann/json.hpp"

namespace headscope {
namespace {

const ObjectSchema* const kAll[] = {&MhaConfigSchema(), &TransformerConfigSchema(), &OptimizerSchema()};

TEST(Schema, ArgumentNamesAreTheRowsNames) {
  for (const ObjectSchema* s : kAll) {
    for (size_t i = 0; i < s->num_fields; ++i) {
      const FieldSpec& f = s->fields[i];
      if (f.arg == Arg::kNone) continue;  // (MultiheadAttention's flags: no message names them)
      SetNaming(Naming::kTorch);
      EXPECT_STREQ(ArgName(f.arg), f.torch) << s->name;
      SetNaming(Naming::kJs);
      const std::string prefix = std::string(s->name) == "optimizer" ? "options." : "config.";
      EXPECT_EQ(std::string(ArgPath(f.arg)), prefix + f.js) << s->name;
      SetNaming(Naming::kTorch);
    }
  }
}

TEST(Schema, JsonListsEveryRowAndTheErrorCodes) {
  const nlohmann::json j = nlohmann::json::parse(SchemaJson());
  ASSERT_EQ(j["objects"].size(), 3u);
  for (size_t o = 0; o < 3; ++o) {
    const ObjectSchema& s = *kAll[o];
    const auto& fields = j["objects"][o]["fields"];
    ASSERT_EQ(fields.size(), s.num_fields) << s.name;
    for (size_t i = 0; i < s.num_fields; ++i) {
      EXPECT_EQ(fields[i]["torch"], s.fields[i].torch);
      EXPECT_EQ(fields[i]["js"], s.fields[i].js);
      if (s.fields[i].default_json != nullptr) {
        // The default parses as JSON and is what the struct holds by default.
        EXPECT_TRUE(nlohmann::json::accept(s.fields[i].default_json)) << s.fields[i].torch;
      }
    }
  }
  EXPECT_EQ(j["errorCodes"].front(), "INVALID_ARGUMENT");
  EXPECT_EQ(j["errorCodes"].back(), StatusCodeName(StatusCode::kLast));
  EXPECT_EQ(j["maxDim"], kMaxDim);
}

// A default-constructed struct holds the schema's defaults.
TEST(Schema, StructDefaultsAreTheSchemaDefaults) {
  TransformerConfig t;
  OptimizerConfig o;
  MhaConfig m;
  const void* objects[] = {&m, &t, &o};
  for (size_t k = 0; k < 3; ++k) {
    const ObjectSchema& s = *kAll[k];
    for (size_t i = 0; i < s.num_fields; ++i) {
      const FieldSpec& f = s.fields[i];
      if (f.default_json == nullptr) continue;
      const nlohmann::json d = nlohmann::json::parse(f.default_json);
      const FieldValue v = f.get(objects[k]);
      if (d.is_null()) {
        EXPECT_EQ(v.v[0], 0) << f.torch;
      } else if (d.is_boolean()) {
        EXPECT_EQ(v.v[0], d.get<bool>() ? 1 : 0) << f.torch;
      } else if (d.is_string()) {
        EXPECT_STREQ(f.choices[static_cast<int>(v.v[0])], d.get<std::string>().c_str()) << f.torch;
      } else if (d.is_array()) {
        EXPECT_EQ(v.v[0], d[0].get<double>()) << f.torch;
        EXPECT_EQ(v.v[1], d[1].get<double>()) << f.torch;
      } else {
        EXPECT_EQ(v.v[0], d.get<double>()) << f.torch;
      }
    }
  }
}

TEST(Schema, CheckFieldsAtTheBounds) {
  SetNaming(Naming::kTorch);
  TransformerConfig c;
  c.vocab_size = 7;
  c.max_len = 8;
  c.d_model = 4;
  EXPECT_TRUE(CheckFields(TransformerConfigSchema(), &c).ok());
  c.n_layers = 256;
  EXPECT_TRUE(CheckFields(TransformerConfigSchema(), &c).ok());
  c.n_layers = 257;
  EXPECT_EQ(CheckFields(TransformerConfigSchema(), &c).message(),
            "n_layers: expected an integer in [1, 256], got 257");
  c.n_layers = 1;
  c.d_mlp = -1;
  EXPECT_EQ(CheckFields(TransformerConfigSchema(), &c).message(),
            "d_mlp: expected 0 (no MLP) or an integer in [1, 16777216], got -1");
  c.d_mlp = 0;
  c.ln_eps = 0;
  EXPECT_EQ(CheckFields(TransformerConfigSchema(), &c).message(),
            "ln_eps: expected a finite number > 0, got 0");
  c.ln_eps = 1e-5;
  c.n_heads = 3;
  EXPECT_EQ(CheckFields(TransformerConfigSchema(), &c).message(),
            "n_heads: d_model (4) must be divisible by n_heads (3)");
  c.n_heads = 1;
  c.norm = static_cast<NormPlacement>(3);
  EXPECT_EQ(CheckFields(TransformerConfigSchema(), &c).message(),
            "norm: expected one of \"pre\", \"post\", \"none\", got index 3");

  MhaConfig m;
  m.embed_dim = 4;
  m.num_heads = 2;
  m.kdim = 0;  // null
  EXPECT_TRUE(ValidateConfig(m).ok());
  m.kdim = -1;
  EXPECT_EQ(ValidateConfig(m).message(),
            "kdim: expected null (= embed_dim) or an integer in [1, 16777216], got -1");
  // Sizes at int64's ends are compared and printed exactly (as a double, INT64_MAX is 2^63, which
  // no int64 holds: the fuzzer's UBSan found the conversion).
  m.kdim = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(ValidateConfig(m).message(),
            "kdim: expected null (= embed_dim) or an integer in [1, 16777216], got 9223372036854775807");
  m.kdim = 0;
  m.embed_dim = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(ValidateConfig(m).message(),
            "embed_dim: expected an integer in [1, 16777216], got -9223372036854775808");
  m.embed_dim = 4;

  OptimizerConfig o;
  o.beta2 = 1;
  EXPECT_EQ(ValidateOptimizerConfig(o).message(), "betas: expected betas[1] in [0, 1), got 1");
  o.beta2 = 0.999;
  o.clip_grad_norm = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(ValidateOptimizerConfig(o).message(),
            "max_norm: expected a finite number > 0 (or 0: no clipping), got nan");
  // The same rows in the JS API's words.
  SetNaming(Naming::kJs);
  EXPECT_EQ(ValidateOptimizerConfig(o).message(),
            "options.clipGradNorm: expected a finite number > 0 (or 0: no clipping), got nan");
  SetNaming(Naming::kTorch);
}

}  // namespace
}  // namespace headscope
