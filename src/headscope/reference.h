// The Eigen reference: the same semantics as MultiheadAttention::Forward written as directly as
// the math reads, stage by stage. It is the oracle the fast path is tested against inside C++,
// and the "Eigen in WASM" row of the benchmarks. Not optimized on purpose.
#ifndef HEADSCOPE_REFERENCE_H_
#define HEADSCOPE_REFERENCE_H_

#include "headscope/config.h"
#include "headscope/mha.h"
#include "headscope/status.h"
#include "headscope/tensor.h"
#include "headscope/weights.h"

namespace headscope {

// Validates exactly as Forward does (PlanCall), then computes in float32 with Eigen.
Status ReferenceForward(const MhaWeights& weights, const TensorView& query,
                        const TensorView& key, const TensorView& value,
                        const ForwardOptions& options, ForwardResult* result);

}  // namespace headscope

#endif  // HEADSCOPE_REFERENCE_H_
