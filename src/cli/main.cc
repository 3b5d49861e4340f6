// headscope (native): runs one case file of the JSON case format.
//
//   headscope run FILE.json|- [--check] [--reference] [--tolerance T]
//                 [--max-input-bytes N] [--max-output-bytes N]
//
// Prints {"output": ..., "weights": ...} as JSON. --check compares with the file's `expected`
// (relative error <= T, default 1e-4) and exits 1 on mismatch. Bad input exits 2 with one line
// on stderr naming what is wrong: a file that cannot be read (IO_ERROR), a document that is not a
// case (PARSE_ERROR, ...), a file over --max-input-bytes or a result over --max-output-bytes
// (RESOURCE_EXHAUSTED; checked from the shapes before anything is computed). The same codes and
// limits as the npm package's CLI (web/lib/cli.js).
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "headscope/case_file.h"
#include "headscope/kernels/dispatch.h"

namespace {

int Usage(const char* why) {
  if (why != nullptr) std::fprintf(stderr, "headscope: %s\n", why);
  std::fprintf(stderr,
               "usage: headscope run FILE.json|- [--check] [--reference] [--tolerance T]\n"
               "                     [--max-input-bytes N] [--max-output-bytes N]\n"
               "  --check              compare with the file's expected values, exit 1 on\n"
               "                       mismatch\n"
               "  --reference          use the Eigen reference path, not the Highway kernels\n"
               "  --tolerance T        relative error allowed by --check (default 1e-4)\n"
               "  --max-input-bytes N  refuse a case file larger than N bytes (default %llu)\n"
               "  --max-output-bytes N refuse a case whose printed result could exceed N bytes\n"
               "                       (default %llu)\n"
               "  FILE '-' reads standard input.\n"
               "Exit codes: 0 ok, 1 --check mismatch, 2 bad input.\n",
               static_cast<unsigned long long>(headscope::kMaxCaseBytes),
               static_cast<unsigned long long>(headscope::kMaxResultJsonBytes));
  return 2;
}

// A byte count: decimal digits only (no sign, no exponent), at most 2^63.
bool ParseByteCount(const char* text, uint64_t* out) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || v > (uint64_t{1} << 63)) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    Usage(nullptr);
    return 0;
  }
  if (argc < 3 || std::strcmp(argv[1], "run") != 0) return Usage("expected: run FILE.json");
  std::string file;
  bool check = false, reference = false;
  double tolerance = 1e-4;
  uint64_t max_input = headscope::kMaxCaseBytes, max_output = headscope::kMaxResultJsonBytes;
  for (int i = 2; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "--check")) {
      check = true;
    } else if (!std::strcmp(a, "--reference")) {
      reference = true;
    } else if (!std::strcmp(a, "--tolerance")) {
      char* end = nullptr;
      tolerance = i + 1 < argc ? std::strtod(argv[++i], &end) : -1;
      if (end == nullptr || *end != '\0' || !(tolerance >= 0)) {
        return Usage("--tolerance: expected a non-negative number");
      }
    } else if (!std::strcmp(a, "--max-input-bytes") || !std::strcmp(a, "--max-output-bytes")) {
      uint64_t* limit = a[6] == 'i' ? &max_input : &max_output;
      if (!ParseByteCount(i + 1 < argc ? argv[++i] : nullptr, limit)) {
        return Usage((std::string(a) + ": expected a number of bytes (0 to 2^63)").c_str());
      }
    } else if ((a[0] == '-' && a[1] != '\0') || !file.empty()) {
      return Usage((std::string("unexpected argument '") + a + "'").c_str());
    } else {
      file = a;
    }
  }
  if (file.empty()) return Usage("expected a case file");

  std::string text;
  headscope::Status s = headscope::ReadTextFile(file, &text, max_input);
  if (!s.ok()) {
    // The message names the file already.
    std::fprintf(stderr, "headscope: %s%s\n", s.ToString().c_str(),
                 s.code() == headscope::StatusCode::kResourceExhausted
                     ? " (--max-input-bytes raises it)" : "");
    return 2;
  }
  headscope::AttentionCase c;
  headscope::ForwardResult result;
  s = headscope::ParseCase(text, &c, max_input);
  std::string().swap(text);  // the document is parsed; its text can go
  const char* hint = "";
  if (s.ok()) {
    s = headscope::CheckResultJsonSize(c, max_output);
    if (!s.ok()) hint = " (--max-output-bytes raises it)";
  }
  if (s.ok()) {
    s = headscope::RunCase(c, reference ? headscope::CasePath::kReference
                                        : headscope::CasePath::kFast, &result);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "headscope: %s: %s%s\n", file.c_str(), s.ToString().c_str(), hint);
    return 2;
  }
  if (!headscope::WriteResultJson(result, stdout)) {
    std::fprintf(stderr, "headscope: cannot write the output (%s)\n", std::strerror(errno));
    return 2;
  }
  if (!check) return 0;
  if (!c.has_expected) {
    std::fprintf(stderr, "headscope: %s: --check needs an \"expected\" member\n", file.c_str());
    return 2;
  }
  const headscope::CaseComparison cmp = headscope::CompareWithExpected(c, result, tolerance);
  std::fprintf(stderr, "headscope: %s: %s (max relative error %.3g, %s path, %s)%s%s\n",
               file.c_str(), cmp.ok ? "matches expected" : "MISMATCH", cmp.max_relative_error,
               reference ? "reference" : "fast", headscope::KernelTargetName(),
               cmp.ok ? "" : ": ", cmp.detail.c_str());
  return cmp.ok ? 0 : 1;
}
