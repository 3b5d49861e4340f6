// A config struct from a JSON object of PyTorch-named keys (a golden file's "config"), read
// through the schema (schema.h): each row by its PyTorch name, the struct's default (which is the
// schema's: schema_test) where the key is absent or null. So a field added to the schema reaches
// the tests that read golden configs with no code here. Not a validator: a wrong type throws
// (nlohmann), an unknown choice or an out-of-range size is left for CheckFields to refuse.
#ifndef HEADSCOPE_TESTS_CPP_JSON_CONFIG_H_
#define HEADSCOPE_TESTS_CPP_JSON_CONFIG_H_

#include <string>

#include "headscope/schema.h"
#include "nlohmann/json.hpp"

namespace headscope::test {

template <class Config>
Config ConfigFromJson(const ObjectSchema& schema, const nlohmann::json& j) {
  Config c;
  for (size_t i = 0; i < schema.num_fields; ++i) {
    const FieldSpec& f = schema.fields[i];
    if (!j.contains(f.torch) || j.at(f.torch).is_null()) continue;
    const nlohmann::json& v = j.at(f.torch);
    FieldValue value;
    switch (f.type) {
      case FieldType::kBool:
        value.v[0] = v.get<bool>() ? 1 : 0;
        break;
      case FieldType::kChoice: {
        int k = 0;
        while (f.choices[k] != nullptr && v.get<std::string>() != f.choices[k]) ++k;
        value.v[0] = k;  // (past the last choice when unknown)
        break;
      }
      case FieldType::kPair:
        value.v[0] = v.at(0).get<double>();
        value.v[1] = v.at(1).get<double>();
        break;
      case FieldType::kSize:
      case FieldType::kNumber:
        value.v[0] = v.get<double>();
        break;
    }
    f.set(&c, value);
  }
  return c;
}

}  // namespace headscope::test

#endif  // HEADSCOPE_TESTS_CPP_JSON_CONFIG_H_
