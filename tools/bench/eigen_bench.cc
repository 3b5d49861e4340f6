// The "Eigen in WASM" row of the benchmark: headscope's Eigen reference path (ReferenceForward,
// src/headscope/reference.cc) behind a tiny Embind class. The JS side copies query, key and value
// into inputs(), calls forward() and copies the output out, as it does for every engine.
// Errors cross as a null pointer and lastError(), never as a C++ exception.
#include <emscripten/bind.h>

#include <cstdint>
#include <string>

#include "headscope/config.h"
#include "headscope/reference.h"
#include "headscope/weights.h"

namespace headscope {
namespace {

class EigenMha {
 public:
  EigenMha(int embed_dim, int num_heads) : weights_(MakeConfig(embed_dim, num_heads)) {}

  // A scratch area of `floats` floats in wasm memory (reused; may grow memory).
  uintptr_t scratch(double floats) {
    if (!(floats >= 0) || !scratch_.Resize(static_cast<size_t>(floats))) return 0;
    return reinterpret_cast<uintptr_t>(scratch_.data());
  }

  // state_dict entry `name` of shape (rows, cols), or (rows) when cols is 0, from the scratch area.
  bool setParameter(const std::string& name, int rows, int cols) {
    const Shape shape = cols > 0 ? Shape{rows, cols} : Shape{rows};
    const size_t n = static_cast<size_t>(rows) * (cols > 0 ? cols : 1);
    return Report(weights_.Set(name, TensorView(scratch_.data(), shape, n)));
  }

  // Unbatched self/cross attention from the scratch area: query (L, E) at 0, key (S, E) at L*E,
  // value (S, E) after it. Returns the output's address ((L, E) floats) or 0 (see lastError()).
  uintptr_t forward(int L, int S, bool is_causal) {
    const int64_t E = weights_.config().embed_dim;
    const float* base = scratch_.data();
    const size_t need = static_cast<size_t>((L + 2 * static_cast<int64_t>(S)) * E);
    if (scratch_.size() < need) {
      error_ = "forward: scratch holds fewer than (L + 2 S) E floats";
      return 0;
    }
    ForwardOptions options;
    options.need_weights = false;
    options.is_causal = is_causal;
    const TensorView q(base, Shape{L, E}, static_cast<size_t>(L * E));
    const TensorView k(base + L * E, Shape{S, E}, static_cast<size_t>(S * E));
    const TensorView v(base + (L + S) * E, Shape{S, E}, static_cast<size_t>(S * E));
    if (!Report(ReferenceForward(weights_, q, k, v, options, &result_))) return 0;
    return reinterpret_cast<uintptr_t>(result_.output.data());
  }

  std::string lastError() const { return error_; }

 private:
  static MhaConfig MakeConfig(int embed_dim, int num_heads) {
    MhaConfig c;
    c.embed_dim = embed_dim;
    c.num_heads = num_heads;
    return c;
  }
  bool Report(const Status& s) {
    error_ = s.message();
    return s.ok();
  }

  MhaWeights weights_;
  AlignedBuffer scratch_;
  ForwardResult result_;
  std::string error_;
};

}  // namespace
}  // namespace headscope

EMSCRIPTEN_BINDINGS(headscope_eigen_bench) {
  emscripten::class_<headscope::EigenMha>("EigenMha")
      .constructor<int, int>()
      .function("scratch", &headscope::EigenMha::scratch)
      .function("setParameter", &headscope::EigenMha::setParameter)
      .function("forward", &headscope::EigenMha::forward)
      .function("lastError", &headscope::EigenMha::lastError);
}
