// The thread pool (parallel.h) and the threaded paths, natively: built against headscope_threaded
// (the library compiled with HEADSCOPE_THREADS, as the multi-threaded WebAssembly module is), so
// the same code runs with real threads under the native and sanitizer presets. Every result must
// be bit-identical to the one-thread run: each output float is computed by one thread with the
// same operations whatever the thread count.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "headscope/kernels/matmul.h"
#include "headscope/mha.h"
#include "headscope/parallel.h"
#include "test_util.h"

namespace headscope {
namespace {

#if !defined(HEADSCOPE_THREADS)
#error "threads_test.cc must be built against headscope_threaded (HEADSCOPE_THREADS)"
#endif

class ThreadsTest : public ::testing::Test {
 protected:
  void TearDown() override { SetThreadCount(1); }
};

TEST_F(ThreadsTest, ParallelForRunsEveryIndexOnceOnValidWorkers) {
  for (int threads : {1, 2, 3, 4}) {
    SetThreadCount(threads);
    ASSERT_EQ(ThreadCount(), threads);
    for (size_t n : {0, 1, 2, 5, 100, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<bool> bad_worker{false};
      ParallelFor(n, [&](size_t i, size_t worker) {
        hits[i].fetch_add(1);
        if (worker >= static_cast<size_t>(threads)) bad_worker = true;
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      EXPECT_FALSE(bad_worker.load());
    }
  }
  // Many small jobs back to back: workers join late, join a newer job than the one that woke
  // them, or find nothing left; every index must still run exactly once per job.
  SetThreadCount(3);
  for (int job = 0; job < 20000; ++job) {
    const size_t n = 2 + job % 7;
    std::atomic<int> hits[8] = {};
    ParallelFor(n, [&](size_t i, size_t) { hits[i].fetch_add(1); });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "job " << job << " i=" << i;
  }
  SetThreadCount(0);  // clamped
  EXPECT_EQ(ThreadCount(), 1);
}

struct Shape3 {
  int64_t E, H, L, S, N;  // N = 0: unbatched
  bool bias_kv, zero_attn, masks, causal;
};

ForwardResult RunForward(MultiheadAttention* mha, const Shape3& s, const std::vector<float>& q,
                         const std::vector<float>& kv, const std::vector<uint8_t>& kpm,
                         const std::vector<float>& attn, bool need, bool average) {
  const Shape qs = s.N ? Shape{s.L, s.N, s.E} : Shape{s.L, s.E};
  const Shape ks = s.N ? Shape{s.S, s.N, s.E} : Shape{s.S, s.E};
  ForwardOptions o;
  o.need_weights = need;
  o.average_attn_weights = average;
  o.is_causal = s.causal;
  if (s.masks) {
    o.key_padding_mask = s.N ? MaskView::Bool(kpm.data(), Shape{s.N, s.S}, kpm.size())
                             : MaskView::Bool(kpm.data(), Shape{s.S}, kpm.size());
    o.attn_mask = MaskView::Float(attn.data(), Shape{s.L, s.S}, attn.size());
  }
  ForwardResult r;
  const Status st = mha->Forward({q.data(), qs, q.size()}, {kv.data(), ks, kv.size()},
                                 {kv.data(), ks, kv.size()}, o, &r);
  EXPECT_TRUE(st.ok()) << st.message();
  return r;
}

void ExpectSameBits(const AlignedBuffer& a, const AlignedBuffer& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  if (a.size() == 0) return;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

// The in-place product (MatMulRowMajorB: the weight gradients' dW = dY^T X) split over the
// pool by row blocks and column runs gives the packed one-thread product's bits.
TEST_F(ThreadsTest, RowMajorBIsBitIdenticalForAnyThreadCount) {
  std::mt19937 rng(5);
  const size_t m = 200, n = 48, k = 600, ldb = 50, ldc = 49;
  for (bool trans_a : {false, true}) {
    const size_t lda = trans_a ? m : k;
    const std::vector<float> a = test::RandomVector(&rng, trans_a ? k * lda : m * lda);
    const std::vector<float> b = test::RandomVector(&rng, (k - 1) * ldb + n);
    std::vector<float> packed(PackedFloats(n, k)), want(m * ldc, -7.0f);
    PackB(b.data(), n, k, 1, ldb, packed.data());
    SetThreadCount(1);
    if (trans_a) {
      MatMulPackedTransA(a.data(), lda, packed.data(), nullptr, m, n, k, 1.0f, want.data(), ldc);
    } else {
      MatMulPacked(a.data(), lda, packed.data(), nullptr, m, n, k, 1.0f, want.data(), ldc);
    }
    for (int threads : {1, 2, 3}) {
      SetThreadCount(threads);
      std::vector<float> got(m * ldc, -7.0f);
      ASSERT_TRUE(MatMulRowMajorB(trans_a, a.data(), lda, b.data(), ldb, m, n, k, 1.0f,
                                  got.data(), ldc, threads));
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << "trans_a=" << trans_a << " threads=" << threads;
    }
  }
}

TEST_F(ThreadsTest, ForwardIsBitIdenticalForAnyThreadCount) {
  // Shapes past every threshold (projections split by rows and panels, attention by
  // (batch, head) or (batch, query tile)), a partial last tile, decode's single row, and tiny
  // shapes that stay serial.
  const Shape3 shapes[] = {
      {96, 6, 70, 70, 2, false, false, true, false},
      {96, 6, 70, 45, 2, true, true, false, false},
      {64, 4, 130, 130, 0, false, false, false, true},
      {768, 12, 1, 300, 0, false, false, false, false},
      {128, 8, 65, 20, 3, false, false, true, false},
      {8, 2, 5, 5, 2, false, false, true, false},
  };
  std::mt19937 rng(5);
  for (const Shape3& s : shapes) {
    MhaConfig cfg;
    cfg.embed_dim = s.E;
    cfg.num_heads = s.H;
    cfg.add_bias_kv = s.bias_kv;
    cfg.add_zero_attn = s.zero_attn;
    std::unique_ptr<MultiheadAttention> mha;
    ASSERT_TRUE(MultiheadAttention::Create(cfg, &mha).ok());
    test::LoadRandomWeights(mha.get(), &rng, 0.2f);
    const int64_t n = s.N ? s.N : 1;
    const std::vector<float> q = test::RandomVector(&rng, static_cast<size_t>(s.L * n * s.E));
    const std::vector<float> kv = test::RandomVector(&rng, static_cast<size_t>(s.S * n * s.E));
    std::vector<uint8_t> kpm(static_cast<size_t>(n * s.S));
    for (size_t i = 0; i < kpm.size(); ++i) kpm[i] = (i % 5 == 2);
    const std::vector<float> attn = test::RandomVector(&rng, static_cast<size_t>(s.L * s.S));
    for (auto [need, average] : {std::pair{false, true}, {true, true}, {true, false}}) {
      SetThreadCount(1);
      const ForwardResult want = RunForward(mha.get(), s, q, kv, kpm, attn, need, average);
      for (int threads : {2, 3, 4}) {
        SetThreadCount(threads);
        const ForwardResult got = RunForward(mha.get(), s, q, kv, kpm, attn, need, average);
        SCOPED_TRACE(testing::Message() << "E=" << s.E << " L=" << s.L << " S=" << s.S
                                        << " N=" << s.N << " threads=" << threads
                                        << " need=" << need << " average=" << average);
        ExpectSameBits(got.output, want.output, "output");
        ExpectSameBits(got.weights, want.weights, "weights");
      }
    }
  }
}

}  // namespace
}  // namespace headscope
