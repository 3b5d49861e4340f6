// The schema: every configurable object described once. A config's fields (name in PyTorch and
// in JS, type, range, default, doc), its cross-field rules and the error codes live here and
// nowhere else by hand:
//
//   - the C++ checks of a field (range, choices) run over this table (CheckFields), and a config
//     struct is read and written through its accessors (the binding's init takes a config by
//     name, the native case parser reads one by name);
//   - SchemaJson() is this table as JSON; tools/gen-schema.mjs writes it into web/lib/schema.js,
//     from which the JS option reading, the JS case parser, the views' choices and the docs'
//     tables are derived (tests/js/schema.test.js fails when schema.js, index.d.ts or a doc table
//     drifts from it).
//
// Adding a config field is a row here plus the code that uses it (docs/architecture.md, "One
// schema per object").
#ifndef HEADSCOPE_SCHEMA_H_
#define HEADSCOPE_SCHEMA_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "headscope/status.h"

namespace headscope {

enum class FieldType {
  kSize,     // an integer in [min, max]; `zero` (if set) is what 0 means, and 0 is then allowed
  kBool,
  kChoice,   // one of `choices` (stored as its index)
  kNumber,   // a finite number in the range lo..hi, each end open or closed
  kPair,     // two numbers, each in the range lo..hi (the optimizer's betas)
};

// A field's value as the accessors pass it: sizes, bools (0/1), choice indices and numbers as a
// double (every size the readers accept is within 2^24, so exactly); a pair in v[0], v[1]. A
// size read from a config struct (CheckFields) is in `n` too, exactly: a C++ caller's int64 may
// be any value, which a double may round out of int64's range.
struct FieldValue {
  double v[2] = {0, 0};
  int64_t n = 0;
};

struct FieldSpec {
  const char* torch;  // snake_case: PyTorch's name, the case file's and the CLI's
  const char* js;     // camelCase of the same words: the JS API's
  FieldType type;
  Arg arg;            // the argument id a Status about this field carries
  int64_t min;        // kSize
  int64_t max;
  // kSize, kNumber: what 0 means when 0 is allowed outside the range ("no MLP"), or null.
  const char* zero;
  // kSize: the field a null (stored as 0) stands for ("embed_dim" for kdim), or null.
  const char* null_means;
  double lo, hi;      // kNumber, kPair
  bool lo_open, hi_open;
  const char* const* choices;  // kChoice: null-terminated
  // The default as JSON ("1", "true", "\"pre\"", "[0.9, 0.999]", "null"); null: required.
  const char* default_json;
  const char* doc;    // one line, for d.ts and docs
  // Which variants of the object have the field (a bitmask; 0: all): the optimizer's type.
  unsigned variants;
  FieldValue (*get)(const void* object);
  void (*set)(void* object, const FieldValue& value);
};

// "d_model must be divisible by n_heads": field `dividend` % field `divisor` == 0.
struct DivisibleRule {
  const char* dividend;  // torch names
  const char* divisor;
};

// "rope_layout applies only with positions \"rope\"": field `field` must be at its default
// unless the choice field `when` is `value`, or, with `value` null, unless the size `when` is not
// 0 ("rope_base applies only with rope_dims > 0"): a setting that would otherwise be ignored is
// refused, naming it.
struct OnlyWithRule {
  const char* field;  // torch names
  const char* when;
  const char* value;  // null: `when` > 0
};

struct ObjectSchema {
  const char* name;          // "mha", "transformer", "optimizer"
  const FieldSpec* fields;
  size_t num_fields;
  const DivisibleRule* rules;
  size_t num_rules;
  const char* const* variants;  // the optimizer's types by bit (null-terminated), or null
  const OnlyWithRule* only_with = nullptr;
  size_t num_only_with = 0;
};

const ObjectSchema& MhaConfigSchema();
const ObjectSchema& TransformerConfigSchema();
const ObjectSchema& OptimizerSchema();

// The field named `torch` (snake_case) or `js` (camelCase), or null.
const FieldSpec* FindField(const ObjectSchema& schema, const char* name);

// What a field accepts, as the messages say it: "an integer in [1, 16777216]", "0 (no MLP) or an
// integer in [1, 16777216]", "null (= embedDim) or an integer in [1, 16777216]", "true or
// false", "one of \"pre\", \"post\", \"none\"", "a finite number > 0", "[beta1, beta2], each in [0, 1)".
std::string Expectation(const ObjectSchema& schema, const FieldSpec& field);

// `field` given as the number x (a size or a number): INVALID_ARGUMENT "expected <Expectation>,
// got <got>" unless x is one of its values, `got` being how the caller's layer shows x ("number
// NaN" from JS, "number 1.5" from a case file). Sizes must be integers (1.5 is refused, not
// truncated); null (0) for a nullable size is accepted.
Status CheckFieldNumber(const ObjectSchema& schema, const FieldSpec& field, double x,
                        const std::string& got);

// The field checks of the table, in its order, then its divisibility rules, then its only-with
// rules: the first failure,
// naming the field (ArgPath of its Arg) with the messages the project has always given:
// "expected an integer in [1, 16777216], got 0", "d_model (8) must be divisible by n_heads (3)".
// `variant`: the optimizer's type bit (fields of other types are not checked), 0 otherwise.
Status CheckFields(const ObjectSchema& schema, const void* object, unsigned variant = 0);

// Every schema, and the error codes, as JSON (tools/gen-schema.mjs writes web/lib/schema.js).
std::string SchemaJson();

}  // namespace headscope

#endif  // HEADSCOPE_SCHEMA_H_
