// A config struct from a JSON object of PyTorch-named keys (a golden file's "config"), read
// through the schema (schema.h): each row by its PyTorch name, the struct's default (which is the
// schema's: schema_test) where the key is absent or null. So a field added to the schema reaches
// the tests that read golden configs with no code here. Not a validator: a wrong type throws
// (nlohmann), an unknown choice or an out-of-range size is left for CheckFields to refuse.
#ifndef HEADSCOPE_TESTS_CPP_JSON_CONFIG_H_
#define HEADSCOPE_TESTS_CPP_JSON_CONFIG_H_

#include <memory>
#include <string>
#include <vector>

#include "headscope/schema.h"
#include "headscope/transformer.h"
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

// The numbers of a nested JSON array, row-major, and (shape non-null) its dims.
template <class T>
void FlattenJson(const nlohmann::json& j, std::vector<T>* out, std::vector<int64_t>* shape = nullptr,
                 size_t depth = 0) {
  if (j.is_array()) {
    if (shape != nullptr && shape->size() == depth) shape->push_back(static_cast<int64_t>(j.size()));
    for (const nlohmann::json& e : j) FlattenJson(e, out, shape, depth + 1);
  } else {
    out->push_back(static_cast<T>(j.get<double>()));
  }
}

// A Transformer of a golden file's "config" (PyTorch names) with its "state_dict" loaded; the
// first failing Status, if any.
inline Status TransformerFromJson(const nlohmann::json& doc, std::unique_ptr<Transformer>* model) {
  HEADSCOPE_RETURN_IF_ERROR(Transformer::Create(
      ConfigFromJson<TransformerConfig>(TransformerConfigSchema(), doc.at("config")), model));
  for (const auto& [name, value] : doc.at("state_dict").items()) {
    std::vector<float> data;
    std::vector<int64_t> dims;
    FlattenJson(value, &data, &dims);
    Shape shape;
    for (int64_t d : dims) shape.dims[shape.rank++] = d;
    HEADSCOPE_RETURN_IF_ERROR((*model)->SetParameter(name, {data.data(), shape, data.size()}));
  }
  return Status::Ok();
}

}  // namespace headscope::test

#endif  // HEADSCOPE_TESTS_CPP_JSON_CONFIG_H_
