#include "headscope/status.h"

namespace headscope {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kShapeMismatch: return "SHAPE_MISMATCH";
    case StatusCode::kMissingParameter: return "MISSING_PARAMETER";
    case StatusCode::kUnknownParameter: return "UNKNOWN_PARAMETER";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kParseError: return "PARSE_ERROR";
    case StatusCode::kIoError: return "IO_ERROR";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace headscope
