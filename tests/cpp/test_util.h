// Helpers shared by the C++ tests: seeded random data, tolerant comparison, and running a check
// on every SIMD target this build compiled.
#ifndef HEADSCOPE_TESTS_CPP_TEST_UTIL_H_
#define HEADSCOPE_TESTS_CPP_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "headscope/mha.h"
#include "headscope/tensor.h"
#include "headscope/transformer.h"

namespace headscope::test {

std::vector<float> RandomVector(std::mt19937* rng, size_t n, float scale = 1.0f);

// Runs `body` once per SIMD target compiled into the kernels (natively: every x86 target the CPU
// supports; WebAssembly: the static WASM target), with the target's name.
void ForEachTarget(const std::function<void(const char* target)>& body);

// Max |a - b| / max(1, max |b|) over finite entries; NaN/inf must sit at the same places
// (returns +inf otherwise). a and b have n entries.
double RelativeError(const float* a, const float* b, size_t n);

// Loads a state_dict for `config` with seeded random values (weights ~ U(-scale, scale)).
void LoadRandomWeights(MultiheadAttention* mha, std::mt19937* rng, float scale = 0.5f);

// A Transformer of `config` (its creation EXPECTed to succeed), initialised from `seed` unless
// seed is 0 (then no weights are loaded).
std::unique_ptr<Transformer> MakeTransformer(const TransformerConfig& config, uint64_t seed);

// A copy of a model's loaded entry `name` (grad: of its last gradient); empty, with a failure,
// when there is none.
std::vector<float> EntryValues(const Transformer& model, const std::string& name,
                               bool grad = false);

}  // namespace headscope::test

#endif  // HEADSCOPE_TESTS_CPP_TEST_UTIL_H_
