// The seed article's worked example (web/lib/examples.js, seedWorkedExample), built by hand (no
// case file): 3 tokens of 4 dims, two heads whose projections pick dims 0-1 and 2-3, the seed's
// W_O, no biases.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "headscope/mha.h"

namespace headscope {
namespace {

class SeedExample : public ::testing::Test {
 protected:
  void SetUp() override {
    MhaConfig cfg;
    cfg.embed_dim = 4;
    cfg.num_heads = 2;
    cfg.bias = false;
    ASSERT_TRUE(MultiheadAttention::Create(cfg, &mha_).ok());
    // torch computes x @ W.T: row r of a projection is output dim r. Head 1 reads dims 0-1,
    // head 2 dims 2-3, so each of Wq, Wk, Wv is the identity, stacked [Wq; Wk; Wv].
    std::vector<float> in_proj(12 * 4, 0.0f);
    for (int block = 0; block < 3; ++block) {
      for (int r = 0; r < 4; ++r) in_proj[(block * 4 + r) * 4 + r] = 1.0f;
    }
    ASSERT_TRUE(mha_->SetParameter("in_proj_weight", {in_proj.data(), {12, 4}, 48}).ok());
    // The seed writes Y = Concat x W_O; torch's out_proj.weight is W_O transposed.
    const float w_o[4][4] = {{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 0, 0, 1}, {0, 1, 1, 0}};
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 4; ++c) out_proj_[r * 4 + c] = w_o[c][r];
    }
    ASSERT_TRUE(mha_->SetParameter("out_proj.weight", {out_proj_, {4, 4}, 16}).ok());
  }

  TensorView X() const { return {x_, {3, 4}, 12}; }

  std::unique_ptr<MultiheadAttention> mha_;
  float out_proj_[16];
  const float x_[12] = {1, 0, 1, 2, 0, 2, 1, 0, 1, 1, 0, 1};
};

// The seed's Y. It prints 1.700 for Y[0][0] because it rounds intermediates to 3 decimals;
// exactly, 0.8022 + 0.8983 = 1.7005, which rounds to 1.701.
constexpr float kY[3][4] = {{1.701f, 2.595f, 2.600f, 1.695f},
                            {1.034f, 2.723f, 1.232f, 2.525f},
                            {1.315f, 2.639f, 2.035f, 1.919f}};

TEST_F(SeedExample, OutputMatchesTheSeedToThreeDecimals) {
  ForwardOptions opt;
  opt.average_attn_weights = false;
  ForwardResult r;
  ASSERT_TRUE(mha_->Forward(X(), X(), X(), opt, &r).ok());
  ASSERT_EQ(r.output_shape, (Shape{3, 4}));
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(r.output[i * 4 + j], kY[i][j], 5e-4) << i << "," << j;
  }
  ASSERT_EQ(r.weights_shape, (Shape{2, 3, 3}));
  // Head 1, token 2's row: 0.045 0.768 0.187.
  EXPECT_NEAR(r.weights[(0 * 3 + 1) * 3 + 0], 0.045f, 5e-4);
  EXPECT_NEAR(r.weights[(0 * 3 + 1) * 3 + 1], 0.768f, 5e-4);
  EXPECT_NEAR(r.weights[(0 * 3 + 1) * 3 + 2], 0.187f, 5e-4);
}

TEST_F(SeedExample, EveryIntermediateMatchesTheSeed) {
  AttentionTrace t;
  ASSERT_TRUE(mha_->Trace(X(), X(), X(), ForwardOptions(), &t).ok());
  ASSERT_EQ(t.q.shape, (Shape{2, 3, 2}));
  // Q1 = K1 = V1 = X[:, 0:2]; Q2 = X[:, 2:4].
  const float q1[6] = {1, 0, 0, 2, 1, 1};
  const float q2[6] = {1, 2, 1, 0, 0, 1};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(t.q.data[i], q1[i]);
    EXPECT_EQ(t.k.data[i], q1[i]);
    EXPECT_EQ(t.v.data[i], q1[i]);
    EXPECT_EQ(t.q.data[6 + i], q2[i]);
  }
  // scores1 = Q1 K1^T / sqrt(2).
  const float scores1[9] = {0.707f, 0, 0.707f, 0, 2.828f, 1.414f, 0.707f, 1.414f, 1.414f};
  const float a1[9] = {0.401f, 0.198f, 0.401f, 0.045f, 0.768f, 0.187f, 0.198f, 0.401f, 0.401f};
  for (int i = 0; i < 9; ++i) {
    EXPECT_NEAR(t.scores.data[i], scores1[i], 5e-4) << i;
    EXPECT_NEAR(t.weights.data[i], a1[i], 5e-4) << i;
  }
  // head1 = A1 V1, head2 as the seed gives it, side by side in the concatenation.
  const float concat[12] = {0.802f, 0.797f, 0.898f, 1.798f, 0.232f, 1.723f,
                            0.802f, 1.000f, 0.599f, 1.203f, 0.716f, 1.436f};
  ASSERT_EQ(t.concat.shape, (Shape{3, 4}));
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(t.concat.data[i], concat[i], 5e-4) << i;
  // Y[0][0] = 0.802*1 + 0.797*0 + 0.898*1 + 1.798*0.
  EXPECT_NEAR(t.output.data[0], t.concat.data[0] + t.concat.data[2], 1e-6);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(t.output.data[i * 4 + j], kY[i][j], 5e-4);
  }
}

}  // namespace
}  // namespace headscope
