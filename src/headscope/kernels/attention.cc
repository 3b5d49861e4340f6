// Target dispatch for the attention stage.
#include "headscope/kernels/attention.h"

#include "headscope/kernels/matmul.h"
#include "headscope/plan.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "headscope/kernels/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "headscope/kernels/attention-inl.h"
#include "headscope/kernels/dispatch.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace headscope {
namespace HWY_NAMESPACE {

void AttentionTarget(const AttentionArgs& args, float* workspace) {
  AttentionImpl(args, workspace);
}
const char* TargetNameTarget() { return hwy::TargetName(HWY_TARGET); }
void AttentionBackwardTarget(const AttentionBackwardArgs& args, float* scratch) {
  AttentionBackwardImpl(args, scratch);
}

}  // namespace HWY_NAMESPACE
}  // namespace headscope
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace headscope {

HEADSCOPE_EXPORT(AttentionTarget);
HEADSCOPE_EXPORT(TargetNameTarget);
HEADSCOPE_EXPORT(AttentionBackwardTarget);

void AttentionBackward(const AttentionBackwardArgs& args, float* scratch) {
  HEADSCOPE_DISPATCH(AttentionBackwardTarget)(args, scratch);
}

// One worker's scratch.
static uint64_t WorkerFloats(const AttentionArgs& args) {
  const AttentionShape& a = args.shape;
  const uint64_t tile = a.q_len < kAttentionQueryTile ? a.q_len : kAttentionQueryTile;
  const uint64_t parts[] = {
      SaturatingProduct({(a.kv_total + kPanel - 1) / kPanel * kPanel, a.head_dim}),  // K_h
      SaturatingProduct({(a.head_dim + kPanel - 1) / kPanel * kPanel, a.kv_total}),  // V_h^T
      SaturatingProduct({tile, a.kv_total}),  // score tile
      SaturatingProduct({tile, a.head_dim}),  // the tile's queries divided by sqrt(hd)
      tile,                                   // fully-masked flags (bytes; a float each)
  };
  uint64_t total = 0;
  for (uint64_t p : parts) {
    if (p > UINT64_MAX - total) return UINT64_MAX;
    total += p;
  }
  return total;
}
uint64_t AttentionWorkspaceFloats(const AttentionArgs& a) {
  const uint64_t one = WorkerFloats(a);
  if (a.workers <= 1) return one;
  // Each worker's slice starts on a 64-byte boundary, like the single scratch does.
  return SaturatingProduct({(one + 15) / 16 * 16, a.workers});
}
void Attention(const AttentionArgs& args, float* workspace) {
  HEADSCOPE_DISPATCH(AttentionTarget)(args, workspace);
}
const char* KernelTargetName() { return HEADSCOPE_DISPATCH(TargetNameTarget)(); }

}  // namespace headscope
#endif  // HWY_ONCE
