// The "Eigen in WASM" row of the benchmark: headscope's Eigen reference path (ReferenceForward,
// src/headscope/reference.cc) behind a tiny Embind class. The JS side copies query, key and value
// into inputs(), calls forward() and copies the output out, as it does for every engine.
// Errors cross as a null pointer and lastError(), never as a C++ exception.
//
// Also the training matmul probe (matmulProbe): the products of the Transformer's training step
// timed one at a time on the kernels the npm module runs (this module links the same core), for
// the benchmark's "training matmuls: fraction of the peak" rows.
#include <emscripten/bind.h>
#include <emscripten/emscripten.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "headscope/kernels/matmul.h"

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

// Milliseconds per call of C (m, n) = A B^T over k, as the training step runs it: B packed
// (PackB, from a row-major (n, k) weight; packing is not timed: the step packs once per product,
// O(n k) against the product's O(m n k)), A row-major (m, k) or, with trans_a, stored as its
// transpose (k, m) (MatMulPackedTransA: dW = dY^T X). The best of 5 rounds of `reps` calls.
double matmulProbe(int m, int n, int k, bool trans_a, int reps) {
  if (m < 1 || n < 1 || k < 1 || reps < 1) return -1;
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(n) * k);
  std::vector<float> c(static_cast<size_t>(m) * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 53) % 97) / 97.0f - 0.5f;
  AlignedBuffer packed;
  if (!packed.Resize(PackedFloats(static_cast<size_t>(n), static_cast<size_t>(k)))) return -1;
  PackB(b.data(), static_cast<size_t>(n), static_cast<size_t>(k), static_cast<size_t>(k), 1,
        packed.data());
  double best = 1e300;
  for (int round = 0; round < 5; ++round) {
    const double t0 = emscripten_get_now();
    for (int r = 0; r < reps; ++r) {
      if (trans_a) {
        MatMulPackedTransA(a.data(), static_cast<size_t>(m), packed.data(), nullptr,
                           static_cast<size_t>(m), static_cast<size_t>(n), static_cast<size_t>(k),
                           1.0f, c.data(), static_cast<size_t>(n));
      } else {
        MatMulPacked(a.data(), static_cast<size_t>(k), packed.data(), nullptr,
                     static_cast<size_t>(m), static_cast<size_t>(n), static_cast<size_t>(k), 1.0f,
                     c.data(), static_cast<size_t>(n));
      }
    }
    best = std::min(best, (emscripten_get_now() - t0) / reps);
  }
  return c[0] == c[0] ? best : -1;  // (reads the result: nothing elided)
}

}  // namespace
}  // namespace headscope

EMSCRIPTEN_BINDINGS(headscope_eigen_bench) {
  emscripten::class_<headscope::EigenMha>("EigenMha")
      .constructor<int, int>()
      .function("scratch", &headscope::EigenMha::scratch)
      .function("setParameter", &headscope::EigenMha::setParameter)
      .function("forward", &headscope::EigenMha::forward)
      .function("lastError", &headscope::EigenMha::lastError);
  emscripten::function("matmulProbe", &headscope::matmulProbe);
}
