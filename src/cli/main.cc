// headscope (native): runs one case file of the JSON case format.
//
//   headscope run FILE.json [--check] [--reference] [--tolerance T]
//
// Prints {"output": ..., "weights": ...} as JSON. --check compares with the file's `expected`
// (relative error <= T, default 1e-4) and exits 1 on mismatch. Bad input exits 2 with one line
// on stderr naming what is wrong.
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
               "usage: headscope run FILE.json [--check] [--reference] [--tolerance T]\n"
               "  --check       compare with the file's expected values, exit 1 on mismatch\n"
               "  --reference   use the Eigen reference path instead of the Highway kernels\n"
               "  --tolerance T relative error allowed by --check (default 1e-4)\n");
  return 2;
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
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--check")) {
      check = true;
    } else if (!std::strcmp(argv[i], "--reference")) {
      reference = true;
    } else if (!std::strcmp(argv[i], "--tolerance")) {
      char* end = nullptr;
      tolerance = i + 1 < argc ? std::strtod(argv[++i], &end) : -1;
      if (end == nullptr || *end != '\0' || !(tolerance >= 0)) {
        return Usage("--tolerance: expected a non-negative number");
      }
    } else if (argv[i][0] == '-' || !file.empty()) {
      return Usage((std::string("unexpected argument '") + argv[i] + "'").c_str());
    } else {
      file = argv[i];
    }
  }
  if (file.empty()) return Usage("expected a case file");

  std::string text;
  headscope::AttentionCase c;
  headscope::ForwardResult result;
  headscope::Status s = headscope::ReadTextFile(file, &text);
  if (s.ok()) s = headscope::ParseCase(text, &c);
  if (s.ok()) {
    s = headscope::RunCase(c, reference ? headscope::CasePath::kReference
                                        : headscope::CasePath::kFast, &result);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "headscope: %s: %s\n", file.c_str(), s.ToString().c_str());
    return 2;
  }
  std::printf("%s\n", headscope::ResultToJson(result).c_str());
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
