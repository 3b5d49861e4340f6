// Bad input, class by class: every rejection carries the right StatusCode and a message naming the
// argument and what was received / expected, and the module that refused a call still computes
// the right result afterwards (Forward against ReferenceForward). Also the valid corner cases
// that look like errors: empty sequences, an empty batch, the causal mask given explicitly.
//
// Everything here is small (the suite also runs in WebAssembly under Node with a 4 GB cap) and
// nothing is timing-based.
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "headscope/config.h"
#include "headscope/mha.h"
#include "headscope/plan.h"
#include "headscope/reference.h"
#include "headscope/status.h"
#include "headscope/tensor.h"
#include "headscope/weights.h"
#include "test_util.h"

namespace headscope {
namespace {

// gmock is not built for WebAssembly, so substring checks use gtest's own IsSubstring, which
// prints both strings when it fails.
#define EXPECT_MSG_HAS(status, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, (status).message())

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kUnbatched = -1;

// The default module of these tests: E = 4, H = 2, with bias.
MhaConfig BaseConfig() {
  MhaConfig c;
  c.embed_dim = 4;
  c.num_heads = 2;
  return c;
}

// Shape of a query-like input: (len, dim) unbatched, else (len, N, dim) or (N, len, dim).
Shape InputShape(const MhaConfig& c, int64_t n, int64_t len, int64_t dim) {
  if (n == kUnbatched) return {len, dim};
  return c.batch_first ? Shape{n, len, dim} : Shape{len, n, dim};
}

// Owned query/key/value of one call, filled with seeded random values.
struct Call {
  std::vector<float> q, k, v;
  Shape qs, ks, vs;
  TensorView query() const { return {q.empty() ? nullptr : q.data(), qs, q.size()}; }
  TensorView key() const { return {k.empty() ? nullptr : k.data(), ks, k.size()}; }
  TensorView value() const { return {v.empty() ? nullptr : v.data(), vs, v.size()}; }
};

Call MakeCall(const MhaConfig& c, std::mt19937* rng, int64_t n, int64_t L, int64_t S) {
  Call call;
  call.qs = InputShape(c, n, L, c.embed_dim);
  call.ks = InputShape(c, n, S, c.key_dim());
  call.vs = InputShape(c, n, S, c.value_dim());
  call.q = test::RandomVector(rng, static_cast<size_t>(call.qs.NumElements()));
  call.k = test::RandomVector(rng, static_cast<size_t>(call.ks.NumElements()));
  call.v = test::RandomVector(rng, static_cast<size_t>(call.vs.NumElements()));
  return call;
}

// Forward (fast path) and ReferenceForward both succeed and agree (shapes and values).
void ExpectMatchesReference(MultiheadAttention* mha, const TensorView& q, const TensorView& k,
                            const TensorView& v, const ForwardOptions& opt,
                            ForwardResult* fast_out = nullptr) {
  ForwardResult fast, ref;
  const Status fs = mha->Forward(q, k, v, opt, &fast);
  ASSERT_TRUE(fs.ok()) << fs.ToString();
  const Status rs = ReferenceForward(mha->weights(), q, k, v, opt, &ref);
  ASSERT_TRUE(rs.ok()) << rs.ToString();
  ASSERT_EQ(fast.output_shape, ref.output_shape)
      << fast.output_shape.ToString() << " vs " << ref.output_shape.ToString();
  ASSERT_EQ(fast.output.size(), ref.output.size());
  EXPECT_LT(test::RelativeError(fast.output.data(), ref.output.data(), fast.output.size()), 1e-5);
  ASSERT_EQ(fast.weights_shape, ref.weights_shape)
      << fast.weights_shape.ToString() << " vs " << ref.weights_shape.ToString();
  if (fast.has_weights()) {
    ASSERT_EQ(fast.weights.size(), ref.weights.size());
    EXPECT_LT(test::RelativeError(fast.weights.data(), ref.weights.data(), fast.weights.size()),
              1e-5);
  }
  if (fast_out != nullptr) *fast_out = std::move(fast);
}

// The module still works: a good batched cross-attention call (N=2, L=3, S=5) with per-head
// weights, and an unbatched one, both match the reference.
void ExpectStillWorks(MultiheadAttention* mha) {
  SCOPED_TRACE("the module after the rejected call");
  std::mt19937 rng(777);
  const Call batched = MakeCall(mha->config(), &rng, 2, 3, 5);
  ForwardOptions opt;
  opt.average_attn_weights = false;
  ExpectMatchesReference(mha, batched.query(), batched.key(), batched.value(), opt);
  const Call single = MakeCall(mha->config(), &rng, kUnbatched, 2, 4);
  ExpectMatchesReference(mha, single.query(), single.key(), single.value(), ForwardOptions());
}

class ErrorsTest : public ::testing::Test {
 protected:
  std::unique_ptr<MultiheadAttention> NewModule(const MhaConfig& c) {
    std::unique_ptr<MultiheadAttention> mha;
    const Status s = MultiheadAttention::Create(c, &mha);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (mha != nullptr) test::LoadRandomWeights(mha.get(), &rng_);
    return mha;
  }

  // Forward on a good module with a call that must be refused: returns the status after checking
  // that ReferenceForward (same validation) refuses it the same way.
  Status Refuse(MultiheadAttention* mha, const TensorView& q, const TensorView& k,
                const TensorView& v, const ForwardOptions& opt = ForwardOptions()) {
    ForwardResult result, ref;
    const Status s = mha->Forward(q, k, v, opt, &result);
    const Status r = ReferenceForward(mha->weights(), q, k, v, opt, &ref);
    EXPECT_EQ(s.code(), r.code()) << s.ToString() << " vs reference " << r.ToString();
    EXPECT_EQ(s.message(), r.message());
    return s;
  }

  std::mt19937 rng_{20240607};
};

// Restores the global call limit however the test ends.
class MaxCallBytesGuard {
 public:
  explicit MaxCallBytesGuard(size_t bytes) : saved_(MaxCallBytes()) { SetMaxCallBytes(bytes); }
  ~MaxCallBytesGuard() { SetMaxCallBytes(saved_); }
  MaxCallBytesGuard(const MaxCallBytesGuard&) = delete;
  MaxCallBytesGuard& operator=(const MaxCallBytesGuard&) = delete;
  size_t saved() const { return saved_; }

 private:
  size_t saved_;
};

// Both ValidateConfig and Create refuse `c` with kInvalidArgument naming `arg` and the value;
// Create leaves its output untouched.
void ExpectBadConfig(const MhaConfig& c, const std::string& arg, const std::string& got) {
  SCOPED_TRACE(arg + " " + got);
  const Status v = ValidateConfig(c);
  EXPECT_EQ(v.code(), StatusCode::kInvalidArgument) << v.ToString();
  EXPECT_MSG_HAS(v, arg + ":");
  EXPECT_MSG_HAS(v, got);
  std::unique_ptr<MultiheadAttention> mha;
  const Status s = MultiheadAttention::Create(c, &mha);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.message(), v.message());
  EXPECT_EQ(mha, nullptr);
}

// --- config ------------------------------------------------------------------------------------

TEST_F(ErrorsTest, ConfigEmbedDimOutOfRange) {
  const std::string range = "[1, " + std::to_string(kMaxDim) + "]";
  for (int64_t e : {int64_t{0}, int64_t{-4}, kMaxDim + 1, std::numeric_limits<int64_t>::min()}) {
    MhaConfig c = BaseConfig();
    c.embed_dim = e;
    c.num_heads = 1;
    ExpectBadConfig(c, "embed_dim", "got " + std::to_string(e));
    EXPECT_PRED_FORMAT2(::testing::IsSubstring, range, ValidateConfig(c).message());
  }
  // The bound itself is allowed (nothing is allocated before weights are loaded).
  MhaConfig top = BaseConfig();
  top.embed_dim = kMaxDim;
  top.num_heads = 1;
  EXPECT_TRUE(ValidateConfig(top).ok());
  ExpectStillWorks(NewModule(BaseConfig()).get());
}

TEST_F(ErrorsTest, ConfigNumHeadsOutOfRange) {
  for (int64_t h : {int64_t{0}, int64_t{-2}, kMaxDim + 1}) {
    MhaConfig c = BaseConfig();
    c.num_heads = h;
    ExpectBadConfig(c, "num_heads", "got " + std::to_string(h));
  }
  ExpectStillWorks(NewModule(BaseConfig()).get());
}

TEST_F(ErrorsTest, ConfigEmbedDimNotDivisibleByNumHeads) {
  MhaConfig c = BaseConfig();
  c.embed_dim = 6;
  c.num_heads = 4;
  ExpectBadConfig(c, "num_heads", "divisible");
  const Status s = ValidateConfig(c);
  EXPECT_MSG_HAS(s, "embed_dim (6)");
  EXPECT_MSG_HAS(s, "num_heads (4)");
  // More heads than embed_dim: also not divisible (head_dim would be 0).
  c.embed_dim = 4;
  c.num_heads = 8;
  ExpectBadConfig(c, "num_heads", "num_heads (8)");
  ExpectStillWorks(NewModule(BaseConfig()).get());
}

TEST_F(ErrorsTest, ConfigKdimVdimOutOfRange) {
  for (int64_t d : {int64_t{-1}, int64_t{-100}, kMaxDim + 1}) {
    MhaConfig c = BaseConfig();
    c.kdim = d;
    ExpectBadConfig(c, "kdim", "got " + std::to_string(d));
    c = BaseConfig();
    c.vdim = d;
    ExpectBadConfig(c, "vdim", "got " + std::to_string(d));
  }
  // 0 means "embed_dim" (PyTorch's None), kMaxDim is the largest allowed.
  MhaConfig ok = BaseConfig();
  ok.kdim = 0;
  ok.vdim = kMaxDim;
  EXPECT_TRUE(ValidateConfig(ok).ok());
  MhaConfig cross = BaseConfig();
  cross.kdim = 6;
  cross.vdim = 3;
  ExpectStillWorks(NewModule(cross).get());
}

// --- query / key / value -----------------------------------------------------------------------

TEST_F(ErrorsTest, QueryWrongRank) {
  auto mha = NewModule(BaseConfig());
  const std::vector<float> data(24, 0.5f);
  const TensorView one_d(data.data(), {4}, 4);
  Status s = Refuse(mha.get(), one_d, one_d, one_d);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "query:");
  EXPECT_MSG_HAS(s, "2-D (L, E) unbatched or 3-D (L, N, E) batched");
  EXPECT_MSG_HAS(s, "got shape [4]");

  const TensorView four_d(data.data(), {1, 3, 2, 4}, 24);
  s = Refuse(mha.get(), four_d, four_d, four_d);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "query:");
  EXPECT_MSG_HAS(s, "got shape [1, 3, 2, 4]");

  // Rank 0 (a default TensorView): also refused, naming the query.
  s = Refuse(mha.get(), TensorView(), TensorView(), TensorView());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "query:");
  EXPECT_MSG_HAS(s, "got shape []");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, QueryWrongRankBatchFirstNamesItsLayout) {
  MhaConfig c = BaseConfig();
  c.batch_first = true;
  auto mha = NewModule(c);
  const std::vector<float> data(4, 0.5f);
  const TensorView one_d(data.data(), {4}, 4);
  const Status s = Refuse(mha.get(), one_d, one_d, one_d);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "3-D (N, L, E) batched");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, KeyOrValueRankDiffersFromQuery) {
  auto mha = NewModule(BaseConfig());
  const Call batched = MakeCall(mha->config(), &rng_, 2, 3, 5);
  const Call single = MakeCall(mha->config(), &rng_, kUnbatched, 3, 5);

  Status s = Refuse(mha.get(), batched.query(), single.key(), batched.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key:");
  EXPECT_MSG_HAS(s, "3-D (batched, like query)");
  EXPECT_MSG_HAS(s, "got shape [5, 4]");

  s = Refuse(mha.get(), single.query(), batched.key(), single.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key:");
  EXPECT_MSG_HAS(s, "2-D (unbatched, like query)");
  EXPECT_MSG_HAS(s, "got shape [5, 2, 4]");

  s = Refuse(mha.get(), batched.query(), batched.key(), single.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "value:");
  EXPECT_MSG_HAS(s, "got shape [5, 4]");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, LastDimensionMismatch) {
  MhaConfig c = BaseConfig();
  c.kdim = 6;
  c.vdim = 3;
  auto mha = NewModule(c);
  const Call good = MakeCall(c, &rng_, kUnbatched, 3, 5);
  const std::vector<float> data(64, 0.25f);

  Status s = Refuse(mha.get(), {data.data(), {3, 5}, 15}, good.key(), good.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "query:");
  EXPECT_MSG_HAS(s, "embed_dim = 4");
  EXPECT_MSG_HAS(s, "got shape [3, 5]");

  // A key of embed_dim columns where kdim = 6 is expected.
  s = Refuse(mha.get(), good.query(), {data.data(), {5, 4}, 20}, good.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key:");
  EXPECT_MSG_HAS(s, "kdim = 6");
  EXPECT_MSG_HAS(s, "got shape [5, 4]");

  s = Refuse(mha.get(), good.query(), good.key(), {data.data(), {5, 4}, 20});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "value:");
  EXPECT_MSG_HAS(s, "vdim = 3");
  EXPECT_MSG_HAS(s, "got shape [5, 4]");

  // Batched: the last axis is checked the same way.
  const Call bgood = MakeCall(c, &rng_, 2, 3, 5);
  s = Refuse(mha.get(), bgood.query(), {data.data(), {5, 2, 3}, 30}, bgood.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "kdim = 6");
  EXPECT_MSG_HAS(s, "got shape [5, 2, 3]");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, BatchSizeMismatchSequenceFirst) {
  auto mha = NewModule(BaseConfig());
  const Call good = MakeCall(mha->config(), &rng_, 2, 3, 5);  // query (3, 2, 4)
  const Call other = MakeCall(mha->config(), &rng_, 1, 3, 5);  // key/value (5, 1, 4)

  Status s = Refuse(mha.get(), good.query(), other.key(), good.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key: batch size 1 does not match query's 2");
  EXPECT_MSG_HAS(s, "[5, 1, 4]");
  EXPECT_MSG_HAS(s, "[3, 2, 4]");

  s = Refuse(mha.get(), good.query(), good.key(), other.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "value: batch size 1 does not match query's 2");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, BatchSizeMismatchBatchFirst) {
  MhaConfig c = BaseConfig();
  c.batch_first = true;
  auto mha = NewModule(c);
  const Call good = MakeCall(c, &rng_, 2, 3, 5);   // query (2, 3, 4)
  const Call other = MakeCall(c, &rng_, 3, 3, 5);  // key/value (3, 5, 4)

  Status s = Refuse(mha.get(), good.query(), other.key(), good.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key: batch size 3 does not match query's 2");
  EXPECT_MSG_HAS(s, "[3, 5, 4]");
  EXPECT_MSG_HAS(s, "[2, 3, 4]");

  s = Refuse(mha.get(), good.query(), good.key(), other.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "value: batch size 3 does not match query's 2");

  // A sequence-first tensor given to a batch_first module: (5, 2, 4) reads as N = 5.
  const std::vector<float> data(40, 0.5f);
  s = Refuse(mha.get(), good.query(), {data.data(), {5, 2, 4}, 40}, good.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key: batch size 5 does not match query's 2");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, KeyValueSequenceLengthMismatch) {
  auto mha = NewModule(BaseConfig());
  const Call s5 = MakeCall(mha->config(), &rng_, 2, 3, 5);
  const Call s4 = MakeCall(mha->config(), &rng_, 2, 3, 4);
  Status s = Refuse(mha.get(), s5.query(), s5.key(), s4.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "value: sequence length 4 does not match key's 5");
  EXPECT_MSG_HAS(s, "[4, 2, 4]");
  EXPECT_MSG_HAS(s, "[5, 2, 4]");

  const Call u5 = MakeCall(mha->config(), &rng_, kUnbatched, 3, 5);
  const Call u4 = MakeCall(mha->config(), &rng_, kUnbatched, 3, 4);
  s = Refuse(mha.get(), u5.query(), u4.key(), u5.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "value: sequence length 5 does not match key's 4");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, NegativeDimension) {
  auto mha = NewModule(BaseConfig());
  const Call good = MakeCall(mha->config(), &rng_, 2, 3, 5);
  Status s = Refuse(mha.get(), {nullptr, {-1, 4}, 0}, {nullptr, {-1, 4}, 0}, {nullptr, {-1, 4}, 0});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "query: shape [-1, 4] has a negative dimension");

  // Negative batch in the key only (with the right element count for |dims|, just in case).
  s = Refuse(mha.get(), good.query(), {good.k.data(), {5, -2, 4}, good.k.size()}, good.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key: shape [5, -2, 4] has a negative dimension");

  s = Refuse(mha.get(), good.query(), good.key(), {nullptr, {0, 2, -4}, 0});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "value: shape [0, 2, -4] has a negative dimension");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, DataSizeDoesNotMatchShape) {
  auto mha = NewModule(BaseConfig());
  const Call good = MakeCall(mha->config(), &rng_, 2, 3, 5);  // query 24, key/value 40 floats
  Status s = Refuse(mha.get(), {good.q.data(), good.qs, good.q.size() - 1}, good.key(),
                    good.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "query: shape [3, 2, 4] needs 24 values, got 23");

  s = Refuse(mha.get(), good.query(), {good.k.data(), good.ks, good.k.size() + 1}, good.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key: shape [5, 2, 4] needs 40 values, got 41");

  s = Refuse(mha.get(), good.query(), good.key(), {good.v.data(), good.vs, 0});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "value: shape [5, 2, 4] needs 40 values, got 0");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, NullDataWithNonzeroSize) {
  auto mha = NewModule(BaseConfig());
  const Call good = MakeCall(mha->config(), &rng_, kUnbatched, 3, 5);
  // The size matches the shape but there is no data: refused, and the message must say that the
  // data is null (not "needs 12 values, got 12", which contradicts itself).
  Status s = Refuse(mha.get(), {nullptr, good.qs, good.q.size()}, good.key(), good.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "query:");
  EXPECT_MSG_HAS(s, "null");

  s = Refuse(mha.get(), good.query(), {nullptr, good.ks, good.k.size()}, good.value());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key:");
  EXPECT_MSG_HAS(s, "null");

  ForwardOptions opt;
  opt.key_padding_mask = MaskView::Bool(nullptr, {5}, 5);
  s = Refuse(mha.get(), good.query(), good.key(), good.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key_padding_mask:");
  EXPECT_MSG_HAS(s, "null");

  // Null data and a size that does not match either: the null pointer is what is reported.
  s = Refuse(mha.get(), good.query(), good.key(), {nullptr, good.vs, 7});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "value: data is null, but shape [5, 4] needs 20 values");
  ExpectStillWorks(mha.get());
}

// --- masks -------------------------------------------------------------------------------------

TEST_F(ErrorsTest, KeyPaddingMaskWrongShape) {
  auto mha = NewModule(BaseConfig());
  const Call batched = MakeCall(mha->config(), &rng_, 2, 3, 5);
  const std::vector<uint8_t> bools(64, 0);
  ForwardOptions opt;
  opt.key_padding_mask = MaskView::Bool(bools.data(), {2, 6}, 12);
  Status s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key_padding_mask: expected shape (N, S) = [2, 5], got [2, 6]");

  // (S) alone is the unbatched form, not accepted for a batched call.
  opt.key_padding_mask = MaskView::Bool(bools.data(), {5}, 5);
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "(N, S) = [2, 5], got [5]");

  // Unbatched: (S), not (1, S).
  const Call single = MakeCall(mha->config(), &rng_, kUnbatched, 3, 5);
  opt.key_padding_mask = MaskView::Bool(bools.data(), {1, 5}, 5);
  s = Refuse(mha.get(), single.query(), single.key(), single.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key_padding_mask: expected shape (S) = [5], got [1, 5]");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, HeadGatesWrongShape) {
  auto mha = NewModule(BaseConfig());
  const int64_t H = mha->config().num_heads;
  const Call batched = MakeCall(mha->config(), &rng_, 2, 3, 5);
  const std::vector<float> gates(64, 1.0f);
  ForwardOptions opt;
  // One too many: the count is what a caller gets wrong, so the message says "one per head".
  opt.head_gates = {gates.data(), {H + 1}, static_cast<size_t>(H + 1)};
  Status s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_EQ(s.message(), "head_gates: expected " + std::to_string(H) +
                             " numbers (one per head), got " + std::to_string(H + 1));

  // (N, H) is not a form headscope takes: one gate per head for every batch element.
  opt.head_gates = {gates.data(), {2, H}, static_cast<size_t>(2 * H)};
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "head_gates: expected a 1-D tensor of " + std::to_string(H) +
                        " numbers (one per head, shape (num_heads) = [" + std::to_string(H) +
                        "]), got shape [2, " + std::to_string(H) + "]");

  // A shape without its data, and data of the wrong size, are refused before anything is read.
  opt.head_gates = {nullptr, {H}, static_cast<size_t>(H)};
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "head_gates: data is null");
  opt.head_gates = {gates.data(), {H}, static_cast<size_t>(H - 1)};
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "head_gates: shape");

  // The trace validates the same way.
  AttentionTrace trace;
  opt.head_gates = {gates.data(), {H + 1}, static_cast<size_t>(H + 1)};
  s = mha->Trace(batched.query(), batched.key(), batched.value(), opt, &trace);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "head_gates: expected");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, AttnMaskWrongShape) {
  auto mha = NewModule(BaseConfig());  // H = 2
  const Call batched = MakeCall(mha->config(), &rng_, 2, 3, 5);
  const std::vector<float> floats(128, 0.0f);
  ForwardOptions opt;
  opt.attn_mask = MaskView::Float(floats.data(), {3, 6}, 18);
  Status s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "attn_mask: expected shape (L, S) = [3, 5] or (N * num_heads, L, S) = "
                    "[4, 3, 5], got [3, 6]");

  // (S, L) instead of (L, S).
  opt.attn_mask = MaskView::Float(floats.data(), {5, 3}, 15);
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "got [5, 3]");

  opt.attn_mask = MaskView::Float(floats.data(), {4, 4, 5}, 80);
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "got [4, 4, 5]");

  // Unbatched: the 3-D form is (num_heads, L, S).
  const Call single = MakeCall(mha->config(), &rng_, kUnbatched, 3, 5);
  opt.attn_mask = MaskView::Float(floats.data(), {1, 3, 5}, 15);
  s = Refuse(mha.get(), single.query(), single.key(), single.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "(num_heads, L, S) = [2, 3, 5], got [1, 3, 5]");

  // A 4-D mask.
  opt.attn_mask = MaskView::Float(floats.data(), {2, 2, 3, 5}, 60);
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "got [2, 2, 3, 5]");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, AttnMask3DWithBatchInsteadOfBatchTimesHeads) {
  auto mha = NewModule(BaseConfig());  // N = 2, H = 2: 4 slices expected
  const Call batched = MakeCall(mha->config(), &rng_, 2, 3, 5);
  const std::vector<uint8_t> bools(30, 0);
  ForwardOptions opt;
  opt.attn_mask = MaskView::Bool(bools.data(), {2, 3, 5}, 30);
  const Status s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "attn_mask:");
  EXPECT_MSG_HAS(s, "(N * num_heads, L, S) = [4, 3, 5]");
  EXPECT_MSG_HAS(s, "got [2, 3, 5]");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, MaskDataSizeMismatch) {
  auto mha = NewModule(BaseConfig());
  const Call batched = MakeCall(mha->config(), &rng_, 2, 3, 5);
  const std::vector<uint8_t> bools(64, 0);
  const std::vector<float> floats(64, 0.0f);
  ForwardOptions opt;
  opt.key_padding_mask = MaskView::Bool(bools.data(), {2, 5}, 9);
  Status s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "key_padding_mask: shape [2, 5] needs 10 values, got 9");

  opt.key_padding_mask = MaskView();
  opt.attn_mask = MaskView::Float(floats.data(), {3, 5}, 16);
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "attn_mask: shape [3, 5] needs 15 values, got 16");

  opt.attn_mask = MaskView::Bool(bools.data(), {4, 3, 5}, 59);
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "attn_mask: shape [4, 3, 5] needs 60 values, got 59");

  // No data at all for a non-empty mask.
  opt.attn_mask = MaskView::Float(nullptr, {3, 5}, 0);
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "attn_mask: data is null, but shape [3, 5] needs 15 values");
  ExpectStillWorks(mha.get());
}

// The causal mask of (slices, L, S): key j > query i blocked.
std::vector<uint8_t> CausalBool(size_t slices, size_t L, size_t S) {
  std::vector<uint8_t> m(slices * L * S);
  for (size_t b = 0; b < slices; ++b)
    for (size_t i = 0; i < L; ++i)
      for (size_t j = 0; j < S; ++j) m[(b * L + i) * S + j] = j > i ? 1 : 0;
  return m;
}
std::vector<float> CausalFloat(size_t slices, size_t L, size_t S) {
  std::vector<float> m(slices * L * S);
  for (size_t b = 0; b < slices; ++b)
    for (size_t i = 0; i < L; ++i)
      for (size_t j = 0; j < S; ++j) m[(b * L + i) * S + j] = j > i ? -kInf : 0.0f;
  return m;
}

TEST_F(ErrorsTest, IsCausalWithNonCausalMask) {
  auto mha = NewModule(BaseConfig());
  const Call batched = MakeCall(mha->config(), &rng_, 2, 3, 5);
  ForwardOptions opt;
  opt.is_causal = true;

  // Bool 2-D: unblock one entry above the diagonal.
  std::vector<uint8_t> bools = CausalBool(1, 3, 5);
  bools[1 * 5 + 2] = 0;
  opt.attn_mask = MaskView::Bool(bools.data(), {3, 5}, bools.size());
  Status s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_MSG_HAS(s, "attn_mask:");
  EXPECT_MSG_HAS(s, "is_causal=true");
  EXPECT_MSG_HAS(s, "entry [1, 2] differs");

  // Float 2-D: a finite value where 0 is expected (a soft mask is not the causal mask).
  std::vector<float> floats = CausalFloat(1, 3, 5);
  floats[2 * 5 + 0] = -1.0f;
  opt.attn_mask = MaskView::Float(floats.data(), {3, 5}, floats.size());
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_MSG_HAS(s, "entry [2, 0] differs");

  // Float: a large negative number instead of -inf above the diagonal.
  floats = CausalFloat(1, 3, 5);
  floats[0 * 5 + 4] = -1e30f;
  opt.attn_mask = MaskView::Float(floats.data(), {3, 5}, floats.size());
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_MSG_HAS(s, "entry [0, 4] differs");

  // 3-D: one slice (n * H + h = 2) differs; the entry names its slice.
  bools = CausalBool(4, 3, 5);
  bools[(2 * 3 + 1) * 5 + 0] = 1;
  opt.attn_mask = MaskView::Bool(bools.data(), {4, 3, 5}, bools.size());
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_MSG_HAS(s, "entry [2, 1, 0] differs");

  // An all-false mask is not the causal mask either.
  const std::vector<uint8_t> none(15, 0);
  opt.attn_mask = MaskView::Bool(none.data(), {3, 5}, none.size());
  s = Refuse(mha.get(), batched.query(), batched.key(), batched.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_MSG_HAS(s, "entry [0, 1] differs");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, IsCausalWithTheCausalMaskIsAccepted) {
  auto mha = NewModule(BaseConfig());
  const Call batched = MakeCall(mha->config(), &rng_, 2, 3, 5);
  ForwardOptions causal;
  causal.is_causal = true;
  causal.average_attn_weights = false;
  ForwardResult plain;
  ExpectMatchesReference(mha.get(), batched.query(), batched.key(), batched.value(), causal,
                         &plain);
  ASSERT_TRUE(plain.has_weights());
  // Causality took effect: query 0 gives key 1.. no weight.
  for (int j = 1; j < 5; ++j) EXPECT_EQ(plain.weights[j], 0.0f) << j;

  const std::vector<uint8_t> b2 = CausalBool(1, 3, 5);
  const std::vector<float> f2 = CausalFloat(1, 3, 5);
  const std::vector<uint8_t> b3 = CausalBool(4, 3, 5);
  const std::vector<float> f3 = CausalFloat(4, 3, 5);
  const MaskView masks[] = {
      MaskView::Bool(b2.data(), {3, 5}, b2.size()),
      MaskView::Float(f2.data(), {3, 5}, f2.size()),
      MaskView::Bool(b3.data(), {4, 3, 5}, b3.size()),
      MaskView::Float(f3.data(), {4, 3, 5}, f3.size()),
  };
  for (const MaskView& m : masks) {
    SCOPED_TRACE(m.shape.ToString() + (m.type == MaskType::kBool ? " bool" : " float"));
    ForwardOptions opt = causal;
    opt.attn_mask = m;
    ForwardResult with_mask;
    ExpectMatchesReference(mha.get(), batched.query(), batched.key(), batched.value(), opt,
                           &with_mask);
    ASSERT_EQ(with_mask.output.size(), plain.output.size());
    EXPECT_LT(test::RelativeError(with_mask.output.data(), plain.output.data(),
                                  plain.output.size()),
              1e-6);
  }
}

// --- state_dict --------------------------------------------------------------------------------

TEST_F(ErrorsTest, StateDictUnknownKey) {
  auto mha = NewModule(BaseConfig());
  const std::vector<float> w(16, 0.5f);
  const Status s = mha->SetParameter("foo", {w.data(), {4, 4}, 16});
  EXPECT_EQ(s.code(), StatusCode::kUnknownParameter) << s.ToString();
  EXPECT_MSG_HAS(s, "'foo'");
  EXPECT_MSG_HAS(s, "expected keys: in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias");
  // Near misses are unknown too (torch's keys are exact).
  for (const char* key : {"out_proj_weight", "in_proj_weight ", "IN_PROJ_WEIGHT", ""}) {
    const Status k = mha->SetParameter(key, {w.data(), {4, 4}, 16});
    EXPECT_EQ(k.code(), StatusCode::kUnknownParameter) << "'" << key << "': " << k.ToString();
    EXPECT_MSG_HAS(k, "'" + std::string(key) + "'");
  }
  ExpectStillWorks(mha.get());
}

// A caller's key is quoted bounded and escaped (QuoteInput): a megabyte of name, control
// characters and bidirectional controls never reach a message raw.
TEST_F(ErrorsTest, StateDictKeysAreQuotedBoundedAndEscaped) {
  EXPECT_EQ(QuoteInput("in_proj_weight"), "in_proj_weight");
  EXPECT_EQ(QuoteInput(std::string("a\0b\x1b[2J\x07" "c\nok d\xE2\x80\xAE" "e\xC2\x85" "f", 21)),
            "a\\u0000b\\u001b[2J\\u0007c\\u000aok d\\u202ee\\u0085f");
  EXPECT_EQ(QuoteInput(std::string(64, 'y')), std::string(64, 'y'));
  EXPECT_EQ(QuoteInput(std::string(65, 'y')), std::string(61, 'y') + "...");
  std::string smileys;
  for (int i = 0; i < 70; ++i) smileys += "\xF0\x9F\x98\x80";
  EXPECT_EQ(QuoteInput(smileys), smileys.substr(0, 61 * 4) + "...") << "code points, not bytes";

  auto mha = NewModule(BaseConfig());
  const std::vector<float> w(16, 0.5f);
  const std::string huge = std::string(1 << 20, 'x') + "\n\x1b[2J";
  const Status s = mha->SetParameter(huge, {w.data(), {4, 4}, 16});
  EXPECT_EQ(s.code(), StatusCode::kUnknownParameter) << s.ToString();
  EXPECT_LT(s.message().size(), 400u);
  EXPECT_MSG_HAS(s, "['" + std::string(61, 'x') + "...']");
  const Status c = mha->SetParameter(std::string("in\nproj\x1b", 8), {w.data(), {4, 4}, 16});
  EXPECT_MSG_HAS(c, "['in\\u000aproj\\u001b']");
  EXPECT_EQ(c.message().find('\n'), std::string::npos);
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, StateDictKeyThisConfigDoesNotHave) {
  const std::vector<float> w(64, 0.5f);
  {
    SCOPED_TRACE("kdim != embed_dim: separate projections, no in_proj_weight");
    MhaConfig c = BaseConfig();
    c.kdim = 6;
    auto mha = NewModule(c);
    const Status s = mha->SetParameter("in_proj_weight", {w.data(), {12, 4}, 48});
    EXPECT_EQ(s.code(), StatusCode::kUnknownParameter) << s.ToString();
    EXPECT_MSG_HAS(s, "'in_proj_weight'");
    EXPECT_MSG_HAS(s, "q_proj_weight, k_proj_weight, v_proj_weight");
    ExpectStillWorks(mha.get());
  }
  {
    // q_proj_weight is an alias of in_proj_weight's first row block there (AliasParams): a
    // key of that config, but only in its (E, E) shape.
    SCOPED_TRACE("same dims: q_proj_weight is a block of in_proj_weight");
    auto mha = NewModule(BaseConfig());
    const Status s = mha->SetParameter("q_proj_weight", {w.data(), {4, 3}, 12});
    EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
    EXPECT_MSG_HAS(s, "state_dict['q_proj_weight']: expected shape [4, 4], got [4, 3]");
    ExpectStillWorks(mha.get());
  }
  {
    SCOPED_TRACE("bias_k without add_bias_kv");
    auto mha = NewModule(BaseConfig());
    const Status s = mha->SetParameter("bias_k", {w.data(), {1, 1, 4}, 4});
    EXPECT_EQ(s.code(), StatusCode::kUnknownParameter) << s.ToString();
    EXPECT_MSG_HAS(s, "'bias_k'");
    EXPECT_MSG_HAS(s, "expected keys: in_proj_weight, in_proj_bias, out_proj.weight");
    ExpectStillWorks(mha.get());
  }
  {
    SCOPED_TRACE("in_proj_bias / out_proj.bias with bias=false");
    MhaConfig c = BaseConfig();
    c.bias = false;
    auto mha = NewModule(c);
    Status s = mha->SetParameter("in_proj_bias", {w.data(), {12}, 12});
    EXPECT_EQ(s.code(), StatusCode::kUnknownParameter) << s.ToString();
    EXPECT_MSG_HAS(s, "'in_proj_bias'");
    EXPECT_MSG_HAS(s, "expected keys: in_proj_weight, out_proj.weight; or, for in_proj_weight, "
                   "q_proj_weight, k_proj_weight, v_proj_weight)");
    s = mha->SetParameter("out_proj.bias", {w.data(), {4}, 4});
    EXPECT_EQ(s.code(), StatusCode::kUnknownParameter) << s.ToString();
    EXPECT_MSG_HAS(s, "'out_proj.bias'");
    ExpectStillWorks(mha.get());
  }
}

TEST_F(ErrorsTest, StateDictWrongShape) {
  MhaConfig c = BaseConfig();
  c.kdim = 6;
  auto mha = NewModule(c);
  ForwardResult before;
  const Call call = MakeCall(c, &rng_, 2, 3, 5);
  ASSERT_TRUE(mha->Forward(call.query(), call.key(), call.value(), {}, &before).ok());

  const std::vector<float> w(64, 9.0f);
  Status s = mha->SetParameter("out_proj.weight", {w.data(), {4, 5}, 20});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "state_dict['out_proj.weight']: expected shape [4, 4], got [4, 5]");

  // Transposed (kdim, E) instead of (E, kdim).
  s = mha->SetParameter("k_proj_weight", {w.data(), {6, 4}, 24});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "state_dict['k_proj_weight']: expected shape [4, 6], got [6, 4]");

  // Right element count, wrong rank.
  s = mha->SetParameter("in_proj_bias", {w.data(), {1, 12}, 12});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "state_dict['in_proj_bias']: expected shape [12], got [1, 12]");

  // The loaded values were not touched by the refused ones.
  ForwardResult after;
  ASSERT_TRUE(mha->Forward(call.query(), call.key(), call.value(), {}, &after).ok());
  ASSERT_EQ(after.output.size(), before.output.size());
  EXPECT_EQ(test::RelativeError(after.output.data(), before.output.data(), after.output.size()),
            0.0);
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, StateDictSizeMismatch) {
  auto mha = NewModule(BaseConfig());
  const std::vector<float> w(64, 9.0f);
  Status s = mha->SetParameter("out_proj.weight", {w.data(), {4, 4}, 15});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "state_dict['out_proj.weight']: shape [4, 4] needs 16 values, got 15");

  s = mha->SetParameter("in_proj_weight", {w.data(), {12, 4}, 49});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "state_dict['in_proj_weight']: shape [12, 4] needs 48 values, got 49");

  s = mha->SetParameter("in_proj_bias", {nullptr, {12}, 0});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "state_dict['in_proj_bias']: data is null, but shape [12] needs 12 values");
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, StateDictNullDataWithNonzeroSize) {
  auto mha = NewModule(BaseConfig());
  const Status s = mha->SetParameter("out_proj.weight", {nullptr, {4, 4}, 16});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "state_dict['out_proj.weight']");
  EXPECT_MSG_HAS(s, "null");  // not "needs 16 values, got 16"
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, ForwardBeforeAllWeightsAreLoaded) {
  std::unique_ptr<MultiheadAttention> mha;
  ASSERT_TRUE(MultiheadAttention::Create(BaseConfig(), &mha).ok());
  const Call call = MakeCall(mha->config(), &rng_, 2, 3, 5);
  ForwardResult result;

  Status s = mha->Forward(call.query(), call.key(), call.value(), {}, &result);
  EXPECT_EQ(s.code(), StatusCode::kMissingParameter) << s.ToString();
  EXPECT_MSG_HAS(s, "state_dict: missing in_proj_weight [12, 4], in_proj_bias [12], "
                    "out_proj.weight [4, 4], out_proj.bias [4]");

  const std::vector<float> w = test::RandomVector(&rng_, 48);
  ASSERT_TRUE(mha->SetParameter("in_proj_weight", {w.data(), {12, 4}, 48}).ok());
  ASSERT_TRUE(mha->SetParameter("out_proj.bias", {w.data(), {4}, 4}).ok());
  s = mha->Forward(call.query(), call.key(), call.value(), {}, &result);
  EXPECT_EQ(s.code(), StatusCode::kMissingParameter) << s.ToString();
  EXPECT_MSG_HAS(s, "missing in_proj_bias [12], out_proj.weight [4, 4]");
  EXPECT_EQ(s.message().find("in_proj_weight"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("out_proj.bias"), std::string::npos) << s.message();

  // The reference and the trace refuse the same way.
  ForwardResult ref;
  const Status r = ReferenceForward(mha->weights(), call.query(), call.key(), call.value(), {},
                                    &ref);
  EXPECT_EQ(r.code(), StatusCode::kMissingParameter) << r.ToString();
  EXPECT_EQ(r.message(), s.message());
  AttentionTrace trace;
  const Status t = mha->Trace(call.query(), call.key(), call.value(), {}, &trace);
  EXPECT_EQ(t.code(), StatusCode::kMissingParameter) << t.ToString();

  // add_bias_kv: bias_k / bias_v are required too.
  MhaConfig kv = BaseConfig();
  kv.add_bias_kv = true;
  std::unique_ptr<MultiheadAttention> kv_mha;
  ASSERT_TRUE(MultiheadAttention::Create(kv, &kv_mha).ok());
  s = kv_mha->Forward(call.query(), call.key(), call.value(), {}, &result);
  EXPECT_EQ(s.code(), StatusCode::kMissingParameter) << s.ToString();
  EXPECT_MSG_HAS(s, "bias_k [1, 1, 4], bias_v [1, 1, 4]");

  // Loading the rest makes the same module work.
  test::LoadRandomWeights(mha.get(), &rng_);
  ExpectStillWorks(mha.get());
}

// --- sizes -------------------------------------------------------------------------------------

TEST_F(ErrorsTest, CallOverTheByteLimitIsRefused) {
  auto mha = NewModule(BaseConfig());
  const Call call = MakeCall(mha->config(), &rng_, 2, 3, 5);
  ForwardOptions opt;
  opt.average_attn_weights = false;
  const size_t saved = MaxCallBytes();
  {
    // Output (24 floats) alone exceeds 64 bytes.
    MaxCallBytesGuard guard(64);
    ForwardResult result;
    Status s = mha->Forward(call.query(), call.key(), call.value(), opt, &result);
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_MSG_HAS(s, "N=2, L=3, S=5, embed_dim=4");
    EXPECT_MSG_HAS(s, "limit of 64 bytes");

    AttentionTrace trace;
    s = mha->Trace(call.query(), call.key(), call.value(), opt, &trace);
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_MSG_HAS(s, "limit of 64 bytes");
  }
  EXPECT_EQ(MaxCallBytes(), saved);
  {
    // Output and per-head weights fit (24 + 60 floats = 336 bytes), the workspace does not.
    MaxCallBytesGuard guard(512);
    ForwardResult result;
    const Status s = mha->Forward(call.query(), call.key(), call.value(), opt, &result);
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
    EXPECT_MSG_HAS(s, "limit of 512 bytes");
  }
  EXPECT_EQ(MaxCallBytes(), saved);
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, ElementCountOverflowIsRefused) {
  auto mha = NewModule(BaseConfig());
  const int64_t big = int64_t{1} << 40;
  const Call good = MakeCall(mha->config(), &rng_, 2, 3, 5);
  // Dimensions beyond kMaxDim (2^24) are refused before anything is read or multiplied.
  Status s = Refuse(mha.get(), {nullptr, {big, big, 4}, 0}, good.key(), good.value());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_MSG_HAS(s, "query: dimension 0 of shape [1099511627776, 1099511627776, 4] exceeds the "
                    "maximum size 16777216");

  s = Refuse(mha.get(), good.query(), {nullptr, {big, big, 4}, 0}, good.value());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_MSG_HAS(s, "key:");
  EXPECT_MSG_HAS(s, "exceeds the maximum size");

  // INT64_MAX-sized dims, unbatched.
  const int64_t max = std::numeric_limits<int64_t>::max();
  s = Refuse(mha.get(), {nullptr, {max, 4}, 0}, {nullptr, {max, 4}, 0}, {nullptr, {max, 4}, 0});
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_MSG_HAS(s, "query:");
  EXPECT_MSG_HAS(s, "exceeds the maximum size");

  // A mask whose element count overflows is refused by its shape.
  ForwardOptions opt;
  opt.attn_mask = MaskView::Float(nullptr, {big, big, big}, 0);
  s = Refuse(mha.get(), good.query(), good.key(), good.value(), opt);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "attn_mask:");

  // A state_dict entry of a huge shape is refused by its shape, not allocated.
  s = mha->SetParameter("in_proj_weight", {nullptr, {big, big}, 0});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch) << s.ToString();
  EXPECT_MSG_HAS(s, "got [1099511627776, 1099511627776]");
  ExpectStillWorks(mha.get());
}

// Empty sequences (L = S = 0) have 0 elements whatever the batch N, so no data bounds N. Guards
// three past bugs: workspace sizes N * S' * E wrapping around (a heap overflow when add_bias_kv
// wrote its rows), loops over every n and head with nothing to compute (hours for N = 2^40), and
// N * num_heads overflowing int64 in the 3-D mask shape. Now: dims beyond kMaxDim are refused,
// sizes saturate, and loops only run where there are rows.
TEST_F(ErrorsTest, HugeBatchWithEmptySequencesIsRefusedOrEmpty) {
  for (bool bias_kv : {true, false}) {
    for (int64_t n : {int64_t{1} << 24, int64_t{1} << 40, int64_t{1} << 62}) {
      SCOPED_TRACE("add_bias_kv=" + std::to_string(bias_kv) + " N=" + std::to_string(n));
      MhaConfig c = BaseConfig();
      c.add_bias_kv = bias_kv;
      auto mha = NewModule(c);
      const TensorView empty(nullptr, {0, n, 4}, 0);
      for (bool with_mask : {false, true}) {
        ForwardOptions opt;
        if (with_mask) opt.attn_mask = MaskView::Float(nullptr, {0, 0}, 0);
        ForwardResult result;
        const Status s = mha->Forward(empty, empty, empty, opt, &result);
        if (s.ok()) {
          EXPECT_EQ(result.output.size(), 0u);
          EXPECT_EQ(result.weights.size(), 0u);
        } else {
          EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
        }
        const Status r = ReferenceForward(mha->weights(), empty, empty, empty, opt, &result);
        EXPECT_TRUE(r.ok() || r.code() == StatusCode::kResourceExhausted) << r.ToString();
      }
      ExpectStillWorks(mha.get());
    }
  }
}

// --- empty sequences and batches (valid) -------------------------------------------------------

TEST_F(ErrorsTest, EmptyQuerySequenceGivesEmptyOutput) {
  for (bool batch_first : {false, true}) {
    SCOPED_TRACE(batch_first ? "batch_first" : "sequence first");
    MhaConfig c = BaseConfig();
    c.batch_first = batch_first;
    auto mha = NewModule(c);
    for (int64_t n : {kUnbatched, int64_t{2}}) {
      const Call call = MakeCall(c, &rng_, n, 0, 5);
      ASSERT_EQ(call.q.size(), 0u);
      for (bool average : {true, false}) {
        ForwardOptions opt;
        opt.average_attn_weights = average;
        ForwardResult result;
        ExpectMatchesReference(mha.get(), call.query(), call.key(), call.value(), opt, &result);
        EXPECT_EQ(result.output_shape, call.qs) << result.output_shape.ToString();
        EXPECT_EQ(result.output.size(), 0u);
        EXPECT_EQ(result.weights.size(), 0u);
        const Shape want = n == kUnbatched
                               ? (average ? Shape{0, 5} : Shape{2, 0, 5})
                               : (average ? Shape{2, 0, 5} : Shape{2, 2, 0, 5});
        EXPECT_EQ(result.weights_shape, want) << result.weights_shape.ToString();
      }
    }
    ExpectStillWorks(mha.get());
  }
}

TEST_F(ErrorsTest, EmptyKeySequenceGivesOutProjBias) {
  auto mha = NewModule(BaseConfig());
  const float* bias = mha->weights().out_bias();
  ASSERT_NE(bias, nullptr);
  for (int64_t n : {kUnbatched, int64_t{2}}) {
    const Call call = MakeCall(mha->config(), &rng_, n, 3, 0);
    ASSERT_EQ(call.k.size(), 0u);
    ForwardResult result;
    ExpectMatchesReference(mha.get(), call.query(), call.key(), call.value(), ForwardOptions(),
                           &result);
    ASSERT_EQ(result.output.size(), call.q.size());
    // Zero-row policy: no key at all is a fully masked row, its attention output is 0.
    for (size_t i = 0; i < result.output.size(); ++i) {
      EXPECT_EQ(result.output[i], bias[i % 4]) << i;
    }
    EXPECT_EQ(result.weights_shape, n == kUnbatched ? Shape({3, 0}) : Shape({2, 3, 0}))
        << result.weights_shape.ToString();

    // An empty key_padding_mask of shape (S) = (0) / (N, 0) is the matching mask.
    ForwardOptions opt;
    opt.key_padding_mask =
        MaskView::Bool(nullptr, n == kUnbatched ? Shape{0} : Shape{2, 0}, 0);
    ExpectMatchesReference(mha.get(), call.query(), call.key(), call.value(), opt);
  }

  // Without bias the rows are 0.
  MhaConfig nb = BaseConfig();
  nb.bias = false;
  auto no_bias = NewModule(nb);
  const Call call = MakeCall(nb, &rng_, kUnbatched, 2, 0);
  ForwardResult result;
  ExpectMatchesReference(no_bias.get(), call.query(), call.key(), call.value(), {}, &result);
  for (size_t i = 0; i < result.output.size(); ++i) EXPECT_EQ(result.output[i], 0.0f) << i;
  ExpectStillWorks(mha.get());
}

TEST_F(ErrorsTest, EmptyKeySequenceWithExtraKeys) {
  for (int extra = 0; extra < 3; ++extra) {
    MhaConfig c = BaseConfig();
    c.add_zero_attn = extra != 1;  // 0: zero attn, 1: bias_kv, 2: both
    c.add_bias_kv = extra != 0;
    SCOPED_TRACE(std::string("add_zero_attn=") + (c.add_zero_attn ? "1" : "0") +
                 " add_bias_kv=" + (c.add_bias_kv ? "1" : "0"));
    auto mha = NewModule(c);
    const int64_t extra_keys = (c.add_zero_attn ? 1 : 0) + (c.add_bias_kv ? 1 : 0);
    for (int64_t n : {kUnbatched, int64_t{2}}) {
      const Call call = MakeCall(c, &rng_, n, 3, 0);
      ForwardOptions opt;
      ForwardResult result;
      ExpectMatchesReference(mha.get(), call.query(), call.key(), call.value(), opt, &result);
      const Shape want = n == kUnbatched ? Shape{3, extra_keys} : Shape{2, 3, extra_keys};
      EXPECT_EQ(result.weights_shape, want) << result.weights_shape.ToString();
      if (extra_keys == 1) {
        // A single key takes all the weight.
        for (size_t i = 0; i < result.weights.size(); ++i) EXPECT_EQ(result.weights[i], 1.0f);
      }
      if (!c.add_bias_kv) {
        // Only the zero key and value: the attention output is 0, the output is out_proj.bias.
        const float* bias = mha->weights().out_bias();
        for (size_t i = 0; i < result.output.size(); ++i) {
          EXPECT_NEAR(result.output[i], bias[i % 4], 1e-6f) << i;
        }
      }
    }
    ExpectStillWorks(mha.get());
  }
}

TEST_F(ErrorsTest, EmptyBatchIsValid) {
  for (bool batch_first : {false, true}) {
    MhaConfig c = BaseConfig();
    c.batch_first = batch_first;
    c.add_bias_kv = true;
    auto mha = NewModule(c);
    const Call call = MakeCall(c, &rng_, 0, 3, 5);
    ForwardOptions opt;
    const std::vector<uint8_t> none;
    opt.key_padding_mask = MaskView::Bool(none.data(), {0, 5}, 0);
    ForwardResult result;
    ExpectMatchesReference(mha.get(), call.query(), call.key(), call.value(), opt, &result);
    EXPECT_EQ(result.output_shape, call.qs);
    EXPECT_EQ(result.weights_shape, Shape({0, 3, 6})) << result.weights_shape.ToString();
    ExpectStillWorks(mha.get());
  }
}

}  // namespace
}  // namespace headscope
