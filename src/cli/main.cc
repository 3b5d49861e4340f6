// headscope (native): runs one case file of the JSON case format.
//
//   headscope run FILE.json|- [--check] [--reference] [--tolerance T] [--head-gates G0,G1,...]
//                 [--head-stats] [--max-input-bytes N] [--max-output-bytes N]
//
// Prints {"output": ..., "weights": ...} as JSON (and "head_stats" with --head-stats); a "kind":
// "transformer" case prints {"logits": ..., "loss": ..., "hooks": {...}} (loss with targets,
// hooks those its expected section names; --head-gates, --head-stats and --reference are for
// attention cases only).
// --head-gates scales each head's output before out_proj (ForwardOptions::head_gates).
// --check compares with the file's `expected` (relative error <= T, default 1e-4; with gates, the
// gated result) and exits 1 on mismatch. Bad input exits 2 with one line on stderr naming what is
// wrong: a file that cannot be read (IO_ERROR), a document that is not a case (PARSE_ERROR, ...),
// a file over --max-input-bytes or a result over --max-output-bytes (RESOURCE_EXHAUSTED; checked
// from the shapes before anything is computed). The same codes and limits as the npm package's
// CLI (web/lib/cli.js). A message on stderr is always one line: characters that could end it or
// act on a terminal are written as escapes (Printable).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "headscope/case_file.h"
#include "headscope/kernels/dispatch.h"
#include "headscope/reference.h"

namespace {

// A message made printable on one line: the characters that could end the line or drive the
// terminal (a file name or a state_dict key from a case file is in many messages) written as
// escapes, exactly as web/lib/cli.js's printable writes them: the C0 controls (\n, \r, \t, else
// \u00XX), DEL, the C1 controls, the bidirectional marks, embeddings, overrides and isolates
// (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) and U+2028/U+2029 as \uXXXX. A byte that
// is not part of well-formed UTF-8 is written \xNN.
std::string Printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const auto escape = [&out](uint32_t cp) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
    out += buf;
  };
  const auto byte = [&text](size_t i) { return static_cast<unsigned char>(text[i]); };
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = byte(i);
    if (c < 0x80) {
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c < 0x20 || c == 0x7f) {
        escape(c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length, its smallest code point (no overlong forms), its value.
    const int length = c >= 0xc2 && c <= 0xdf   ? 2
                       : c >= 0xe0 && c <= 0xef ? 3
                       : c >= 0xf0 && c <= 0xf4 ? 4
                                                : 0;
    uint32_t cp = length == 2 ? c & 0x1f : length == 3 ? c & 0x0f : c & 0x07;
    bool ok = length > 0 && i + length <= text.size();
    for (int k = 1; ok && k < length; ++k) {
      ok = (byte(i + k) & 0xc0) == 0x80;
      cp = (cp << 6) | (byte(i + k) & 0x3f);
    }
    ok = ok && !(length == 3 && cp < 0x800) && !(length == 4 && (cp < 0x10000 || cp > 0x10ffff)) &&
         !(cp >= 0xd800 && cp <= 0xdfff);
    if (!ok) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
      ++i;
      continue;
    }
    if ((cp >= 0x80 && cp <= 0x9f) || cp == 0x61c || cp == 0x200e || cp == 0x200f || cp == 0x2028 ||
        cp == 0x2029 || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069)) {
      escape(cp);
    } else {
      out.append(text, i, length);
    }
    i += length;
  }
  return out;
}

// One line on stderr: "headscope: " and the message, made printable.
void Report(const std::string& message) {
  std::fprintf(stderr, "headscope: %s\n", Printable(message).c_str());
}

int Usage(const char* why) {
  if (why != nullptr) Report(why);
  std::fprintf(stderr,
               "usage: headscope run FILE.json|- [--check] [--reference] [--tolerance T]\n"
               "                     [--head-gates G0,G1,...] [--head-stats]\n"
               "                     [--max-input-bytes N] [--max-output-bytes N]\n"
               "  --check              compare with the file's expected values, exit 1 on\n"
               "                       mismatch (with --head-gates: the gated result)\n"
               "  --reference          use the Eigen reference path, not the Highway kernels\n"
               "  --tolerance T        relative error allowed by --check (default 1e-4): a\n"
               "                       decimal number such as 0.001 or 1e-4 (not hex, not inf)\n"
               "  --head-gates G0,G1,...\n"
               "                       scale head h's output by G_h before out_proj: one number\n"
               "                       per head, comma-separated (inf, -inf, nan allowed); 0\n"
               "                       switches a head off\n"
               "  --head-stats         also print \"head_stats\": {\"entropy\", \"distance\",\n"
               "                       \"max_weight\"}, each ([N,] H): per batch item and head,\n"
               "                       the mean over its query rows of the row's entropy (nats),\n"
               "                       attention distance (sum w |i - j|) and largest weight;\n"
               "                       fully masked rows left out, \"nan\" when none is left\n"
               "  --max-input-bytes N  refuse a case file larger than N bytes (default %llu)\n"
               "  --max-output-bytes N refuse a case whose printed result could exceed N bytes\n"
               "                       (default %llu)\n"
               "  FILE '-' reads standard input. A \"kind\": \"transformer\" case prints\n"
               "  {\"logits\": ..., \"loss\": ..., \"hooks\": {...}} (loss with inputs.targets,\n"
               "  hooks those its expected section names); the --head-* flags and --reference\n"
               "  are for attention cases only.\n"
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

// One number of --head-gates: a decimal (optional sign, digits with an optional fraction, or a
// fraction alone, optional exponent) or inf, +inf, -inf, nan; exactly what web/lib/cli.js accepts
// (strtod alone would also take hex, "infinity", "nan(...)" and leading spaces).
bool ParseGate(const std::string& item, float* out) {
  if (item == "inf" || item == "+inf") {
    *out = std::numeric_limits<float>::infinity();
    return true;
  }
  if (item == "-inf") {
    *out = -std::numeric_limits<float>::infinity();
    return true;
  }
  if (item == "nan") {
    *out = std::numeric_limits<float>::quiet_NaN();
    return true;
  }
  size_t i = 0;
  const auto digits = [&] {
    const size_t start = i;
    while (i < item.size() && item[i] >= '0' && item[i] <= '9') ++i;
    return i - start;
  };
  if (i < item.size() && (item[i] == '+' || item[i] == '-')) ++i;
  size_t mantissa = digits();
  if (i < item.size() && item[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (i < item.size() && (item[i] == 'e' || item[i] == 'E')) {
    ++i;
    if (i < item.size() && (item[i] == '+' || item[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  if (i != item.size()) return false;
  // Decimal to double to float, as JavaScript's Number() and Float32Array do (beyond float32 is
  // +-inf, below its smallest subnormal 0).
  *out = static_cast<float>(std::strtod(item.c_str(), nullptr));
  return true;
}

// --tolerance: a finite, non-negative decimal number, the grammar of ParseGate's numbers without a
// minus sign (exactly what web/lib/cli.js accepts; strtod alone would also take hex, "inf",
// "infinity", "nan" and leading spaces).
bool ParseTolerance(const char* text, double* out) {
  if (text == nullptr || *text == '-') return false;
  const std::string item = text;
  if (item == "inf" || item == "+inf" || item == "nan") return false;
  float unused = 0;
  if (!ParseGate(item, &unused)) return false;
  const double v = std::strtod(item.c_str(), nullptr);
  if (!std::isfinite(v)) return false;
  *out = v;
  return true;
}

// JSON text of a string, for messages: the characters a gate list can hold need no escapes
// except quotes and backslashes (control characters are shown as \u00XX).
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

// --head-gates' comma-separated list; false with the message naming the flag.
bool ParseGates(const char* text, std::vector<float>* gates, std::string* why) {
  const std::string got = text == nullptr ? "nothing" : Quoted(text);
  const std::string what =
      "--head-gates: expected comma-separated numbers, one per head (inf, -inf, nan allowed), "
      "got " + got;
  if (text == nullptr || *text == '\0') {
    *why = what;
    return false;
  }
  const std::string list = text;
  size_t start = 0;
  for (int index = 1;; ++index) {
    const size_t comma = list.find(',', start);
    const std::string item =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    float g = 0;
    if (!ParseGate(item, &g)) {
      *why = what + " (item " + std::to_string(index) + ", " + Quoted(item) + ", is not a number)";
      return false;
    }
    gates->push_back(g);
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

// The shape of each head statistic a run of `c` returns: (N, H), (H) unbatched, rank 0 where the
// call fails before it has a result (the ranks of the query and key).
headscope::Shape HeadStatsShape(const headscope::AttentionCase& c) {
  const headscope::Shape& q = c.query.shape;
  if ((q.rank != 2 && q.rank != 3) || c.key.shape.rank != q.rank) return headscope::Shape();
  const int64_t h = c.config.num_heads;
  if (q.rank == 2) return headscope::Shape({h});
  return headscope::Shape({q.dims[c.config.batch_first ? 0 : 1], h});
}

// CheckResultJsonSize with the head statistics counted (three ([N,] H) tensors and their keys,
// ', "head_stats": {"entropy": , "distance": , "max_weight": }' is 59 bytes): the bound and the
// message of web/lib/cli.js's checkPrintedSize.
headscope::Status CheckPrintedSize(const headscope::AttentionCase& c, uint64_t max_bytes,
                                   bool head_stats) {
  if (!head_stats) return headscope::CheckResultJsonSize(c, max_bytes);
  const headscope::Shape stats = HeadStatsShape(c);
  double bytes = static_cast<double>(headscope::ResultJsonBytesBound(c));
  if (stats.rank > 0) {
    double elements = 1, arrays = 0;  // case_file.cc's TensorJsonBytesBound
    for (int a = 0; a < stats.rank; ++a) {
      arrays += elements;
      elements *= static_cast<double>(std::max<int64_t>(stats.dims[a], 0));
    }
    bytes += 64 + 3 * (elements * 17 + arrays * 4);
  }
  const uint64_t bound =
      bytes >= 1.8e19 ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(bytes);
  if (bound <= max_bytes) return headscope::Status::Ok();
  const headscope::Shape weights = headscope::ResultWeightsShape(c);
  return headscope::Status(
      headscope::StatusCode::kResourceExhausted,
      "result: its JSON text could take " + std::to_string(bound) + " bytes (output " +
          c.query.shape.ToString() + ", weights " +
          (weights.rank > 0 ? weights.ToString() : std::string("null")) + ", head_stats " +
          (stats.rank > 0 ? "3 x " + stats.ToString() : std::string("null")) +
          "), more than the limit of " + std::to_string(max_bytes) + " bytes");
}

// RunCase with ForwardOptions::head_gates and head_stats (RunCase takes the case's options only).
headscope::Status RunCaseWith(const headscope::AttentionCase& c, bool reference,
                              const std::vector<float>* gates, bool head_stats,
                              headscope::ForwardResult* result) {
  const headscope::CasePath path =
      reference ? headscope::CasePath::kReference : headscope::CasePath::kFast;
  if (gates == nullptr && !head_stats) return headscope::RunCase(c, path, result);
  std::unique_ptr<headscope::MultiheadAttention> mha;
  HEADSCOPE_RETURN_IF_ERROR(headscope::BuildModule(c, &mha));
  headscope::ForwardOptions options = c.options();
  if (gates != nullptr) {
    options.head_gates = headscope::TensorView(
        gates->data(), headscope::Shape({static_cast<int64_t>(gates->size())}), gates->size());
  }
  options.head_stats = head_stats;
  if (reference) {
    return headscope::ReferenceForward(mha->weights(), c.query.view(), c.key.view(),
                                       c.value.view(), options, result);
  }
  return mha->Forward(c.query.view(), c.key.view(), c.value.view(), options, result);
}

// The end of a run of either kind: a failed run (`s`) exits 2 naming the file; otherwise the
// result is printed and, with --check, compared with the case's expected values, `path` telling
// how it was computed in the comparison's line.
template <typename Case, typename Result, typename Path>
int Finish(const std::string& file, const headscope::Status& s, const char* hint, const Case& c,
           const Result& result, bool check, double tolerance, Path path) {
  if (!s.ok()) {
    Report(file + ": " + s.ToString() + hint);
    return 2;
  }
  // WriteResultJson adds "head_stats" when the result has them (--head-stats).
  if (!headscope::WriteResultJson(result, stdout)) {
    Report(std::string("cannot write the output (") + std::strerror(errno) + ")");
    return 2;
  }
  if (!check) return 0;
  if (!c.has_expected) {
    Report(file + ": --check needs an \"expected\" member");
    return 2;
  }
  const headscope::CaseComparison cmp = headscope::CompareWithExpected(c, result, tolerance);
  char error[32];
  std::snprintf(error, sizeof(error), "%.3g", cmp.max_relative_error);
  Report(file + ": " + (cmp.ok ? "matches expected" : "MISMATCH") + " (max relative error " +
         error + path(cmp) + ", " + headscope::KernelTargetName() + ")" + (cmp.ok ? "" : ": ") +
         cmp.detail);
  return cmp.ok ? 0 : 1;
}

// Runs a "kind": "transformer" case: prints {"logits", "loss", "hooks"} (the shape of its
// expected section, as web/lib/cli.js prints it), and with --check compares.
int RunTransformer(const std::string& file, const headscope::TransformerCase& c, bool check,
                   double tolerance, uint64_t max_output) {
  headscope::TransformerCaseResult result;
  headscope::Status s = headscope::CheckResultJsonSize(c, max_output);
  const char* hint = s.ok() ? "" : " (--max-output-bytes raises it)";
  if (s.ok()) s = headscope::RunTransformerCase(c, &result);
  return Finish(file, s, hint, c, result, check, tolerance, [](const headscope::CaseComparison& cmp) {
    char text[96];
    std::snprintf(text, sizeof(text), " over %zu tensors", cmp.tensors.size());
    std::string out = text;
    if (cmp.has_loss) {
      std::snprintf(text, sizeof(text), ", loss error %.3g", cmp.loss_error);
      out += text;
    }
    return out;
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    Usage(nullptr);
    return 0;
  }
  if (argc < 3 || std::strcmp(argv[1], "run") != 0) return Usage("expected: run FILE.json");
  std::string file;
  bool check = false, reference = false, head_stats = false;
  std::vector<float> gates;
  bool has_gates = false;
  double tolerance = 1e-4;
  uint64_t max_input = headscope::kMaxCaseBytes, max_output = headscope::kMaxResultJsonBytes;
  for (int i = 2; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "--check")) {
      check = true;
    } else if (!std::strcmp(a, "--reference")) {
      reference = true;
    } else if (!std::strcmp(a, "--head-stats")) {
      head_stats = true;
    } else if (!std::strcmp(a, "--head-gates") || !std::strncmp(a, "--head-gates=", 13)) {
      // The list as the next argument or after '=' (as web/lib/cli.js takes it).
      const char* list = a[12] == '=' ? a + 13 : (i + 1 < argc ? argv[++i] : nullptr);
      std::string why;
      gates.clear();
      if (!ParseGates(list, &gates, &why)) return Usage(why.c_str());
      has_gates = true;
    } else if (!std::strcmp(a, "--tolerance") || !std::strncmp(a, "--tolerance=", 12)) {
      const char* text = a[11] == '=' ? a + 12 : (i + 1 < argc ? argv[++i] : nullptr);
      if (!ParseTolerance(text, &tolerance)) {
        return Usage(("--tolerance: expected a finite non-negative decimal number (such as 0.001 "
                      "or 1e-4), got " +
                      (text == nullptr ? std::string("nothing") : Quoted(text)))
                         .c_str());
      }
    } else if (!std::strcmp(a, "--max-input-bytes") || !std::strcmp(a, "--max-output-bytes") ||
               !std::strncmp(a, "--max-input-bytes=", 18) ||
               !std::strncmp(a, "--max-output-bytes=", 19)) {
      const char* eq = std::strchr(a, '=');
      const std::string flag = eq == nullptr ? std::string(a) : std::string(a, eq - a);
      const char* text = eq != nullptr ? eq + 1 : (i + 1 < argc ? argv[++i] : nullptr);
      uint64_t* limit = a[6] == 'i' ? &max_input : &max_output;
      if (!ParseByteCount(text, limit)) {
        return Usage((flag + ": expected a number of bytes (0 to 2^63), got " +
                      (text == nullptr ? std::string("nothing") : Quoted(text)))
                         .c_str());
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
    Report(s.ToString() + (s.code() == headscope::StatusCode::kResourceExhausted
                               ? " (--max-input-bytes raises it)"
                               : ""));
    return 2;
  }
  headscope::CaseDocument doc;
  s = headscope::ParseCaseDocument(text, &doc, max_input);
  std::string().swap(text);  // the document is parsed; its text can go
  if (s.ok() && doc.kind == headscope::CaseKind::kTransformer) {
    const char* flag = has_gates ? "--head-gates" : head_stats ? "--head-stats"
                                                  : reference ? "--reference" : nullptr;
    if (flag != nullptr) {
      Report(file + ": " + flag +
             " applies to attention cases only, and this is a \"kind\": \"transformer\" case" +
             (has_gates   ? " (its gates are inputs.head_gates)"
              : reference ? " (the transformer has no reference path)"
                          : ""));
      return 2;
    }
    return RunTransformer(file, doc.transformer, check, tolerance, max_output);
  }
  const headscope::AttentionCase& c = doc.mha;
  headscope::ForwardResult result;
  const char* hint = "";
  if (s.ok() && has_gates && gates.size() != static_cast<size_t>(c.config.num_heads)) {
    Report(file + ": --head-gates: expected " + std::to_string(c.config.num_heads) +
           " numbers (one per head), got " + std::to_string(gates.size()));
    return 2;
  }
  if (s.ok()) {
    s = CheckPrintedSize(c, max_output, head_stats);
    if (!s.ok()) hint = " (--max-output-bytes raises it)";
  }
  if (s.ok()) s = RunCaseWith(c, reference, has_gates ? &gates : nullptr, head_stats, &result);
  return Finish(file, s, hint, c, result, check, tolerance, [reference](const auto&) {
    return std::string(reference ? ", reference path" : ", fast path");
  });
}
