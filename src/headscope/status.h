// Status: how every headscope entry point reports failure. No exceptions cross the API (and none
// may cross Embind, where a C++ exception arrives in JS as a bare number), so each fallible call
// returns a Status whose message names the argument, what was received and what was expected.
#ifndef HEADSCOPE_STATUS_H_
#define HEADSCOPE_STATUS_H_

#include <string>
#include <utility>

namespace headscope {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // a value or option is not allowed (sizes, types, flags)
  kShapeMismatch,      // a tensor's rank or shape does not fit the config or the other inputs
  kMissingParameter,   // a state_dict entry the config needs has not been loaded
  kUnknownParameter,   // a state_dict key this config does not have
  kResourceExhausted,  // buffers for the call would exceed the limit, or allocation failed
  kParseError,         // a case document is not valid JSON or not in the case format
  kIoError,            // a file could not be read
};

// Stable upper-case name of a code ("SHAPE_MISMATCH"); the JS wrapper uses it as error.code.
const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "SHAPE_MISMATCH: query: ..." for logs and the CLI.
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status ShapeMismatch(std::string m) { return {StatusCode::kShapeMismatch, std::move(m)}; }

#define HEADSCOPE_RETURN_IF_ERROR(expr)           \
  do {                                            \
    ::headscope::Status status_ = (expr);         \
    if (!status_.ok()) return status_;            \
  } while (0)

}  // namespace headscope

#endif  // HEADSCOPE_STATUS_H_
