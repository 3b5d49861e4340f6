#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "headscope/kernels/dispatch.h"
#include "headscope/weights.h"

namespace headscope::test {

std::vector<float> RandomVector(std::mt19937* rng, size_t n, float scale) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

void ForEachTarget(const std::function<void(const char* target)>& body) {
#if defined(HWY_COMPILE_ONLY_STATIC)
  body(KernelTargetName());
#else
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    body(hwy::TargetName(target));
  }
  hwy::SetSupportedTargetsForTest(0);  // back to the best target
#endif
}

double RelativeError(const float* a, const float* b, size_t n) {
  double scale = 1.0, worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isfinite(b[i])) scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];
      if (!same) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) / scale);
  }
  return worst;
}

void LoadRandomWeights(MultiheadAttention* mha, std::mt19937* rng, float scale) {
  for (const ParamSpec& spec : ExpectedParams(mha->config())) {
    const size_t n = static_cast<size_t>(spec.shape.NumElements());
    const std::vector<float> values = RandomVector(rng, n, scale);
    const Status s = mha->SetParameter(spec.name, {values.data(), spec.shape, n});
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
}

std::unique_ptr<Transformer> MakeTransformer(const TransformerConfig& config, uint64_t seed) {
  std::unique_ptr<Transformer> m;
  const Status s = Transformer::Create(config, &m);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (m != nullptr && seed != 0) {
    EXPECT_TRUE(m->InitializeFromSeed(seed).ok());
  }
  return m;
}

std::vector<float> EntryValues(const Transformer& model, const std::string& name, bool grad) {
  TensorView v;
  const Status s = grad ? model.Gradient(name, &v) : model.GetParameter(name, &v);
  EXPECT_TRUE(s.ok()) << name << ": " << s.ToString();
  return s.ok() ? std::vector<float>(v.data, v.data + v.size) : std::vector<float>();
}

}  // namespace headscope::test
