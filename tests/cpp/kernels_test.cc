// Every Highway kernel against its scalar reference, on every compiled SIMD target, over sizes
// 0..2N around the vector and panel widths and with misaligned pointers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "headscope/kernels/dispatch.h"
#include "headscope/kernels/matmul.h"
#include "headscope/kernels/rowwise.h"
#include "headscope/kernels/softmax.h"
#include "test_util.h"

namespace headscope {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Widest vector: 16 float lanes (AVX-512). Sizes run to 2N + 1 so every target sees empty,
// partial, exactly full and multi-vector rows.
constexpr size_t kMaxLanes = 16;

TEST(MatMulKernel, MatchesScalarOverSizesAndMisalignment) {
  std::mt19937 rng(1);
  test::ForEachTarget([&](const char*) {
    for (size_t m : {0, 1, 2, 5, 6, 7, 13}) {
      for (size_t n = 0; n <= 2 * kPanel + 1; ++n) {
        for (size_t k : {0, 1, 3, 8, 17}) {
          for (size_t misalign : {0, 1, 3}) {
            const size_t lda = k + 2, ldc = n + 3;  // rows padded: strides are honoured
            std::vector<float> a_buf = test::RandomVector(&rng, misalign + m * lda + 1);
            std::vector<float> b = test::RandomVector(&rng, n * k + 1);
            std::vector<float> bias = test::RandomVector(&rng, n + 1);
            std::vector<float> packed(PackedFloats(n, k) + 1);
            PackB(b.data(), n, k, k, 1, packed.data());
            const float* a = a_buf.data() + misalign;
            // Sentinels around C catch writes past column n or outside the rows.
            std::vector<float> c(misalign + m * ldc + 1, 12345.0f);
            std::vector<float> want(m * ldc + 1, 12345.0f);
            const bool use_bias = (n + k) % 2 == 0;
            MatMulPacked(a, lda, packed.data(), use_bias ? bias.data() : nullptr, m, n, k, 0.75f,
                         c.data() + misalign, ldc);
            MatMulScalar(a, lda, b.data(), k, 1, use_bias ? bias.data() : nullptr, m, n, k,
                         0.75f, want.data(), ldc);
            for (size_t i = 0; i < m; ++i) {
              for (size_t j = 0; j < ldc; ++j) {
                const float got = c[misalign + i * ldc + j];
                if (j < n) {
                  ASSERT_NEAR(got, want[i * ldc + j], 1e-5f * (1 + k))
                      << "m=" << m << " n=" << n << " k=" << k << " at " << i << "," << j;
                } else {
                  ASSERT_EQ(got, 12345.0f) << "wrote past column n=" << n;
                }
              }
            }
            ASSERT_EQ(c[misalign + m * ldc], 12345.0f) << "wrote past the last row";
          }
        }
      }
    }
  });
}

TEST(MatMulKernel, TransposedPackingReadsColumns) {
  // PackB with strides (1, ld) multiplies by the transpose: how weights x V reads V.
  std::mt19937 rng(2);
  test::ForEachTarget([&](const char*) {
    for (size_t n : {1, 3, 16, 20}) {
      for (size_t k : {1, 5, 33}) {
        const size_t m = 4, ld = n + 2;
        std::vector<float> a = test::RandomVector(&rng, m * k);
        std::vector<float> v = test::RandomVector(&rng, k * ld);  // (k, n) rows of stride ld
        std::vector<float> packed(PackedFloats(n, k));
        PackB(v.data(), n, k, 1, ld, packed.data());
        std::vector<float> c(m * n), want(m * n);
        MatMulPacked(a.data(), k, packed.data(), nullptr, m, n, k, 1.0f, c.data(), n);
        MatMulScalar(a.data(), k, v.data(), 1, ld, nullptr, m, n, k, 1.0f, want.data(), n);
        EXPECT_LT(test::RelativeError(c.data(), want.data(), m * n), 1e-5) << n << "x" << k;
      }
    }
  });
}

TEST(MatMulKernel, TransposedLeftOperandGivesTheSameBitsAsItsCopy) {
  // MatMulPackedTransA reads A (m, k) from its transpose (k, m); against MatMulPacked on an
  // explicit row-major copy: bit for bit, over the micro-kernel's row tails, the 64-row cache
  // block, every edge of the last panel and the k blocks of a long k.
  std::mt19937 rng(7);
  test::ForEachTarget([&](const char* target) {
    for (size_t m : {1, 3, 5, 8, 13, 64, 70}) {
      for (size_t n : {1, 7, 16, 33}) {
        // k past kKBlock (256): the product runs in k blocks, first / middle / last.
        for (size_t k : {1, 9, 40, 256, 257, 600}) {
          const size_t lda = m + 3;  // (k, m) rows of stride lda
          std::vector<float> at = test::RandomVector(&rng, k * lda), a(m * k);
          for (size_t i = 0; i < m; ++i) {
            for (size_t p = 0; p < k; ++p) a[i * k + p] = at[p * lda + i];
          }
          std::vector<float> b = test::RandomVector(&rng, n * k), bias = test::RandomVector(&rng, n);
          std::vector<float> packed(PackedFloats(n, k));
          PackB(b.data(), n, k, k, 1, packed.data());
          std::vector<float> got(m * n), want(m * n);
          MatMulPackedTransA(at.data(), lda, packed.data(), bias.data(), m, n, k, 0.5f, got.data(), n);
          MatMulPacked(a.data(), k, packed.data(), bias.data(), m, n, k, 0.5f, want.data(), n);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
              << target << " " << m << "x" << n << "x" << k;
        }
      }
    }
  });
}

// The in-place kernel (B's rows read where they are) computes each element with the packed
// product's chain: the same bits, for A as stored and transposed, over row tails, row blocks,
// column groups, k from 0 past the outlined kernels' 128 and the transposed product's runs of
// 256 (a weight gradient's k is B * T), with B's row stride wider than n; column counts it does
// not take are refused, not computed. B is allocated to its last row's last column, so a read
// past it is the sanitizer build's failure.
TEST(MatMulKernel, RowMajorBGivesThePackedBits) {
  std::mt19937 rng(13);
  test::ForEachTarget([&](const char* target) {
    size_t computed = 0;
    for (size_t n : {8, 16, 32, 48}) {
      for (size_t k : {0, 1, 5, 16, 33, 127, 128, 200, 256, 257, 600}) {
        for (size_t m : {1, 3, 4, 5, 7, 9, 17, 70}) {
          if (k > 127 && m % 2 == 1 && m > 5) continue;  // fewer long products, same coverage
          for (bool trans_a : {false, true}) {
            const size_t ldb = n + 3, lda = trans_a ? m + 2 : k + 2, ldc = n + 1;
            // (At least one float: k = 0 must not make the pointers null, whose offsets are UB.)
            std::vector<float> b = test::RandomVector(&rng, k == 0 ? 1 : (k - 1) * ldb + n);
            std::vector<float> a =
                test::RandomVector(&rng, std::max<size_t>(1, trans_a ? k * lda : m * lda));
            std::vector<float> packed(std::max<size_t>(1, PackedFloats(n, k)));
            PackB(b.data(), n, k, 1, ldb, packed.data());
            std::vector<float> want(m * ldc, -7.0f), got(m * ldc, -7.0f);
            if (trans_a) {
              MatMulPackedTransA(a.data(), lda, packed.data(), nullptr, m, n, k, 0.5f, want.data(),
                                 ldc);
            } else {
              MatMulPacked(a.data(), lda, packed.data(), nullptr, m, n, k, 0.5f, want.data(), ldc);
            }
            if (!MatMulRowMajorB(trans_a, a.data(), lda, b.data(), ldb, m, n, k, 0.5f, got.data(),
                                 ldc)) {
              for (float v : got) ASSERT_EQ(v, -7.0f) << target << ": refused, yet wrote";
              continue;
            }
            ++computed;
            for (size_t i = 0; i < want.size(); ++i) {
              ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
                  << target << " m=" << m << " n=" << n << " k=" << k << " trans_a=" << trans_a
                  << " at " << i << ": " << got[i] << " vs " << want[i];
            }
          }
        }
      }
    }
    EXPECT_GT(computed, 0u) << target << ": the kernel took none of the sizes";
    std::vector<float> x(256 * 16, 1.0f), y(16 * 16, -7.0f);
    EXPECT_FALSE(MatMulRowMajorB(false, x.data(), 4, x.data(), 7, 1, 7, 4, 1.0f, y.data(), 7))
        << target << ": 7 columns are not whole column groups on any target";
    EXPECT_EQ(y[0], -7.0f) << target << ": refused, yet wrote";
  });
}

TEST(MatMulKernel, KZeroGivesBias) {
  test::ForEachTarget([&](const char*) {
    const float bias[3] = {1, -2, 3};
    float c[6] = {9, 9, 9, 9, 9, 9};
    MatMulPacked(nullptr, 0, nullptr, bias, 2, 3, 0, 1.0f, c, 3);
    const float want[6] = {1, -2, 3, 1, -2, 3};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(c[i], want[i]);
  });
}

void ExpectSoftmaxMatches(std::vector<float> row, size_t misalign, const char* what) {
  std::vector<float> buf(misalign + row.size() + 1, 777.0f);
  std::copy(row.begin(), row.end(), buf.begin() + misalign);
  std::vector<float> want = row;
  const bool want_masked = SoftmaxScalar(want.data(), want.size());
  const bool got_masked = Softmax(buf.data() + misalign, row.size());
  EXPECT_EQ(got_masked, want_masked) << what << " n=" << row.size();
  for (size_t i = 0; i < row.size(); ++i) {
    const float got = buf[misalign + i];
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got)) << what << " n=" << row.size() << " i=" << i;
    } else {
      EXPECT_NEAR(got, want[i], 2e-6f) << what << " n=" << row.size() << " i=" << i;
    }
  }
  EXPECT_EQ(buf[misalign + row.size()], 777.0f) << what << ": wrote past the row";
}

TEST(SoftmaxKernel, MatchesScalarOverSizesAndMisalignment) {
  std::mt19937 rng(3);
  test::ForEachTarget([&](const char*) {
    for (size_t n = 0; n <= 2 * kMaxLanes + 1; ++n) {
      for (size_t misalign : {0, 1, 2, 3}) {
        std::vector<float> row = test::RandomVector(&rng, n, 8.0f);
        ExpectSoftmaxMatches(row, misalign, "random");
        // Some keys masked (-inf) but not all.
        for (size_t i = 0; i < n; i += 3) row[i] = -kInf;
        if (n > 1) row[n - 1] = 1.5f;
        ExpectSoftmaxMatches(row, misalign, "partly masked");
      }
    }
  });
}

TEST(SoftmaxKernel, PolicyRows) {
  test::ForEachTarget([&](const char*) {
    for (size_t n : {1, 4, 7, 16, 33}) {
      // Fully masked: zero row, reported.
      std::vector<float> row(n, -kInf);
      ASSERT_TRUE(Softmax(row.data(), n));
      for (float x : row) EXPECT_EQ(x, 0.0f);
      // NaN anywhere: the whole row NaN, as torch.softmax.
      row.assign(n, 0.5f);
      row[n / 2] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_FALSE(Softmax(row.data(), n));
      for (float x : row) EXPECT_TRUE(std::isnan(x));
      // +inf anywhere: exp(inf - inf) is NaN for torch too.
      row.assign(n, -kInf);
      row[n - 1] = kInf;
      EXPECT_FALSE(Softmax(row.data(), n));
      for (float x : row) EXPECT_TRUE(std::isnan(x));
      // Large scores stay finite and sum to 1 (the max is subtracted first).
      row.assign(n, 0.0f);
      for (size_t i = 0; i < n; ++i) row[i] = 80.0f + static_cast<float>(i);
      EXPECT_FALSE(Softmax(row.data(), n));
      double sum = 0;
      for (float x : row) sum += x;
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
    EXPECT_TRUE(Softmax(nullptr, 0));  // no keys at all: nothing to attend to
  });
}

// Distance in units in the last place between two non-negative floats (subnormals included:
// the bit patterns of non-negative floats are ordered as their values).
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, sizeof(ia));
  std::memcpy(&ib, &b, sizeof(ib));
  return std::abs(static_cast<int64_t>(ia) - ib);
}

float FloatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

TEST(SoftmaxKernel, ExpNonPositiveIsAccurateOverItsDomain) {
  // Every softmax input after the max is subtracted: [-inf, 0]. Float's exp is subnormal below
  // ln(FLT_MIN) = -87.34 and 0 only below -150 ln 2 = -103.97: every float in [-104, -87] (where
  // the output is subnormal or about to be), and a sweep of [-87, 0], against std::exp in float.
  std::vector<float> x;
  const uint32_t kBits87 = 0xC2AE0000u, kBits104 = 0xC2D00000u;  // -87.0f, -104.0f
  for (uint32_t b = kBits87; b <= kBits104; ++b) x.push_back(FloatFromBits(b));
  for (uint32_t b = 0x80000000u; b < kBits87; b += 1021) x.push_back(FloatFromBits(b));
  std::vector<float> y(x.size());
  test::ForEachTarget([&](const char* target) {
    ExpNonPositive(x.data(), y.data(), x.size());
    int64_t worst = 0, subnormal = 0;
    float worst_x = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = std::exp(x[i]);
      const int64_t ulp = UlpDistance(y[i], want);
      if (ulp > worst) {
        worst = ulp;
        worst_x = x[i];
      }
      subnormal += want > 0.0f && want < std::numeric_limits<float>::min();
    }
    EXPECT_LE(worst, 1) << target << " at x=" << worst_x;  // 1 on every target, WASM too
    EXPECT_GT(subnormal, 2000000) << target;  // the subnormal range really was covered
    const float kMinX = FloatFromBits(0xC2CFF1B4u);      // -103.972076, nearest above -150 ln 2
    const float below_min = FloatFromBits(0xC2CFF1B5u);  // the next float below it
    const float edges[] = {-kInf, -1000.0f, -104.0f, below_min, kMinX, -90.0f,
                           -87.34f, 0.0f,     -0.0f,   -1e-30f};
    float out[10];
    ExpNonPositive(edges, out, 10);
    for (int i = 0; i < 10; ++i) {
      EXPECT_LE(UlpDistance(out[i], std::exp(edges[i])), 1) << target << " x=" << edges[i];
    }
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 0.0f) << target << " x=" << edges[i];
    EXPECT_EQ(out[4], std::numeric_limits<float>::denorm_min()) << target;
    EXPECT_GT(out[5], 0.0f) << target;  // e^-90 = 8.2e-40: subnormal, not 0
    EXPECT_EQ(out[7], 1.0f) << target;
  });
}

TEST(SoftmaxKernel, SubnormalWeightsAreKept) {
  // torch.softmax([0, -90]) = [1, 8.2e-40]: the second weight is subnormal, not 0, and it counts
  // when its value is large (8.2e-40 * 3e38 = 0.25) or infinite (inf, where 0 * inf is NaN).
  test::ForEachTarget([&](const char* target) {
    for (size_t n : {2, 5, 16, 17, 33}) {
      std::vector<float> row(n, -kInf), tile;
      row[0] = 0.0f;
      row[n - 1] = -90.0f;
      if (n > 2) row[1] = -100.0f;
      tile = row;
      ASSERT_FALSE(Softmax(row.data(), n));
      uint8_t state = 99;
      SoftmaxRows(tile.data(), 1, n, &state);
      EXPECT_EQ(state, 0) << target;
      for (const std::vector<float>* r : {&row, &tile}) {
        EXPECT_EQ((*r)[0], 1.0f) << target << " n=" << n;
        EXPECT_LE(UlpDistance((*r)[n - 1], std::exp(-90.0f)), 2) << target << " n=" << n;
        if (n > 2) {
          EXPECT_LE(UlpDistance((*r)[1], std::exp(-100.0f)), 2) << target << " n=" << n;
        }
        for (size_t j = 2; j + 1 < n; ++j) EXPECT_EQ((*r)[j], 0.0f) << target << " n=" << n;
      }
    }
  });
}

TEST(SoftmaxKernel, AKeyOfWeightZeroChangesNoOtherWeight) {
  // A row whose scores all lie within 87 of its max takes the exp without underflow handling
  // (ExpNonPositive<kInRange>, softmax-inl.h); the same row with one more key at -inf or far
  // below takes the general exp. The extra key's weight is 0 and adds +0 to its lane's sum, so
  // every other weight must keep its bits: what causal rows, KV-cache steps and the small-head
  // path rely on (a row's numbers do not depend on keys that get no weight). Spreads just inside
  // and outside the in-range bound (min - max >= -87) included.
  std::mt19937 rng(11);
  test::ForEachTarget([&](const char* target) {
    for (size_t n = 1; n <= 2 * kMaxLanes + 1; ++n) {
      for (float spread : {8.0f, 86.99f, 87.0f, 87.01f, 120.0f}) {
        for (float extra : {-kInf, -300.0f}) {
          std::vector<float> row = test::RandomVector(&rng, n, 4.0f);
          row[0] = 2.0f;  // the max, and the smallest score exactly `spread` below it
          for (size_t j = 1; j < n; ++j) row[j] = std::min(row[j], 1.0f);
          if (n > 1) row[n - 1] = 2.0f - spread;
          const std::vector<float> scores = row;
          std::vector<float> longer = row;
          longer.push_back(extra);
          ASSERT_FALSE(Softmax(row.data(), n));
          ASSERT_FALSE(Softmax(longer.data(), n + 1));
          EXPECT_EQ(longer[n], 0.0f) << target;
          EXPECT_EQ(std::memcmp(row.data(), longer.data(), n * sizeof(float)), 0)
              << target << " n=" << n << " spread=" << spread << " extra=" << extra;
          // A tile of two rows (one exp over the whole tile), the second with its last key at
          // `extra`: for n > 1 (or extra = -inf) the tile takes the general exp, and its first
          // row must keep the bits.
          std::vector<float> tile = scores;
          tile.insert(tile.end(), scores.begin(), scores.end());
          tile[2 * n - 1] = extra;
          std::vector<uint8_t> state(2, 99);
          SoftmaxRows(tile.data(), 2, n, state.data());
          EXPECT_EQ(std::memcmp(tile.data(), longer.data(), n * sizeof(float)), 0)
              << target << " n=" << n << " spread=" << spread << " (tile)";
        }
      }
    }
  });
}

TEST(SoftmaxKernel, RowsOfATileMatchSoftmaxRowByRow) {
  std::mt19937 rng(5);
  test::ForEachTarget([&](const char* target) {
    for (size_t n : {1, 2, 3, 4, 5, 8, 13, 16, 17, 32}) {
      for (size_t rows : {1, 2, 3, 7}) {
        std::vector<float> tile = test::RandomVector(&rng, rows * n, 8.0f);
        // Row 1 partly masked, row 2 fully masked, row 3 has a NaN, row 4 a +inf.
        if (rows > 1) for (size_t j = 0; j < n; j += 2) tile[n + j] = -kInf;
        if (rows > 2) std::fill(tile.begin() + 2 * n, tile.begin() + 3 * n, -kInf);
        if (rows > 3) tile[3 * n + n / 2] = std::numeric_limits<float>::quiet_NaN();
        if (rows > 4) tile[4 * n] = kInf;
        std::vector<float> want = tile;
        std::vector<uint8_t> state(rows, 99);
        SoftmaxRows(tile.data(), rows, n, state.data());
        for (size_t r = 0; r < rows; ++r) {
          const bool masked = SoftmaxScalar(want.data() + r * n, n);
          const bool nan = std::isnan(want[r * n]);
          EXPECT_EQ(state[r], masked ? 1 : nan ? 2 : 0) << target << " n=" << n << " r=" << r;
          for (size_t j = 0; j < n; ++j) {
            const float got = tile[r * n + j], w = want[r * n + j];
            if (std::isnan(w)) {
              EXPECT_TRUE(std::isnan(got)) << target << " n=" << n << " r=" << r;
            } else {
              EXPECT_NEAR(got, w, 2e-6f) << target << " n=" << n << " r=" << r << " j=" << j;
            }
          }
        }
      }
    }
  });
}

TEST(AddInPlaceKernel, MatchesScalar) {
  std::mt19937 rng(4);
  test::ForEachTarget([&](const char*) {
    for (size_t n = 0; n <= 2 * kMaxLanes + 1; ++n) {
      for (size_t misalign : {0, 1, 3}) {
        std::vector<float> row = test::RandomVector(&rng, misalign + n + 1);
        std::vector<float> add = test::RandomVector(&rng, misalign + n);
        if (n > 0) add[misalign] = -kInf;
        std::vector<float> want = row;
        for (size_t i = 0; i < n; ++i) want[misalign + i] += add[misalign + i];
        AddInPlace(row.data() + misalign, add.data() + misalign, n);
        for (size_t i = 0; i < row.size(); ++i) ASSERT_EQ(row[i], want[i]) << n << " " << i;
      }
    }
  });
}

}  // namespace
}  // namespace headscope

namespace headscope {
namespace {

#if defined(__EMSCRIPTEN__)
// Without -msimd128 Highway silently falls back to the scalar EMU128 target.
TEST(Targets, WebAssemblyBuildRunsSimd128) { EXPECT_STREQ(KernelTargetName(), "WASM"); }
#else
TEST(Targets, NativeBuildDispatchesToASimdTarget) {
  const std::string name = KernelTargetName();
  EXPECT_NE(name, "EMU128");
  EXPECT_NE(name, "SCALAR");
}
#endif

}  // namespace
}  // namespace headscope

namespace headscope {
namespace {

// LayerNormBackwardRows against the backward written in double from the definitions, on every
// target, for row lengths across the vector width (1 .. 3 vectors and tails) and several rows;
// `add` adds to what dx held.
TEST(RowwiseKernels, LayerNormBackwardMatchesDouble) {
  std::mt19937 rng(11);
  test::ForEachTarget([&](const char* target) {
    for (size_t d : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33, 64}) {
      for (bool add : {false, true}) {
        const size_t rows = 5;
        const float eps = 1e-5f;
        std::vector<float> x = test::RandomVector(&rng, rows * d, 2.0f);
        std::vector<float> dy = test::RandomVector(&rng, rows * d);
        std::vector<float> w = test::RandomVector(&rng, d);
        std::vector<float> dx0 = test::RandomVector(&rng, rows * d), dx = dx0;
        std::vector<float> dw(d, 99.0f), db(d, 99.0f);
        LayerNormBackwardRows(x.data(), dy.data(), rows, d, w.data(), eps, dx.data(), add,
                              dw.data(), db.data());
        std::vector<double> want_dx(rows * d), want_dw(d, 0.0), want_db(d, 0.0);
        for (size_t r = 0; r < rows; ++r) {
          double mean = 0, var = 0, mg = 0, mgx = 0;
          for (size_t j = 0; j < d; ++j) mean += x[r * d + j];
          mean /= static_cast<double>(d);
          for (size_t j = 0; j < d; ++j) var += (x[r * d + j] - mean) * (x[r * d + j] - mean);
          var /= static_cast<double>(d);
          const double rstd = 1.0 / std::sqrt(var + eps);
          for (size_t j = 0; j < d; ++j) {
            const double xhat = (x[r * d + j] - mean) * rstd, g = double(dy[r * d + j]) * w[j];
            mg += g / static_cast<double>(d);
            mgx += g * xhat / static_cast<double>(d);
            want_dw[j] += dy[r * d + j] * xhat;
            want_db[j] += dy[r * d + j];
          }
          for (size_t j = 0; j < d; ++j) {
            const double xhat = (x[r * d + j] - mean) * rstd, g = double(dy[r * d + j]) * w[j];
            want_dx[r * d + j] = rstd * (g - mg - xhat * mgx) + (add ? dx0[r * d + j] : 0.0);
          }
        }
        const auto check = [&](const std::vector<float>& got, const std::vector<double>& want,
                               const char* what) {
          double diff = 0, scale = 1e-6;
          for (size_t i = 0; i < want.size(); ++i) {
            diff = std::max(diff, std::abs(got[i] - want[i]));
            scale = std::max(scale, std::abs(want[i]));
          }
          EXPECT_LE(diff / scale, 1e-5) << target << " d=" << d << " add=" << add << " " << what;
        };
        check(dx, want_dx, "dx");
        check(dw, want_dw, "dw");
        check(db, want_db, "db");
      }
    }
  });
}

// The training's loss: float exponentials against a double reference, over vocabularies around
// the vector width (the -inf-padded tail), ignored rows, masked (-inf) logits beside a finite max
// and large logits; a row whose max is NaN or +inf makes the loss NaN, as PyTorch's.
TEST(RowwiseKernels, CrossEntropyMatchesDouble) {
  std::mt19937 rng(12);
  test::ForEachTarget([&](const char* target) {
    for (size_t vocab : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 28, 31, 33, 100}) {
      const size_t rows = 6;
      std::vector<float> logits = test::RandomVector(&rng, rows * vocab, 8.0f);
      std::vector<int32_t> targets(rows);
      for (size_t r = 0; r < rows; ++r) targets[r] = static_cast<int32_t>((r * 7 + 3) % vocab);
      targets[2] = -100;
      logits[4 * vocab] = 80.0f;  // exp(x - max) spans float's range
      // A masked logit, not the target's.
      if (vocab > 1) logits[5 * vocab + (targets[5] + 1) % vocab] = -kInf;
      const size_t counted = rows - 1;
      std::vector<float> grad(rows * vocab, 99.0f);
      const double loss = CrossEntropyRows(logits.data(), rows, vocab, targets.data(), counted,
                                           grad.data());
      EXPECT_EQ(CrossEntropyRows(logits.data(), rows, vocab, targets.data(), counted, nullptr),
                loss) << target << " vocab=" << vocab << ": the loss without the gradient";
      double want = 0;
      for (size_t r = 0; r < rows; ++r) {
        const float* x = logits.data() + r * vocab;
        if (targets[r] == -100) {
          for (size_t j = 0; j < vocab; ++j) EXPECT_EQ(grad[r * vocab + j], 0.0f) << target;
          continue;
        }
        double max = -kInf, sum = 0;
        for (size_t j = 0; j < vocab; ++j) max = std::max(max, double(x[j]));
        for (size_t j = 0; j < vocab; ++j) sum += std::exp(x[j] - max);
        want += std::log(sum) - (x[targets[r]] - max);
        for (size_t j = 0; j < vocab; ++j) {
          const double g = (std::exp(x[j] - max) / sum - (int32_t(j) == targets[r])) / counted;
          EXPECT_NEAR(grad[r * vocab + j], g, 1e-6 * std::max(1.0, std::abs(g)) + 1e-12)
              << target << " vocab=" << vocab << " row " << r << " key " << j;
        }
      }
      want /= static_cast<double>(counted);
      EXPECT_NEAR(loss, want, 1e-6 * std::max(1.0, std::abs(want))) << target << " vocab=" << vocab;
      for (float bad : {std::nanf(""), kInf}) {
        std::vector<float> poisoned = logits;
        poisoned[1 * vocab + vocab / 2] = bad;
        EXPECT_TRUE(std::isnan(CrossEntropyRows(poisoned.data(), rows, vocab, targets.data(),
                                                counted, grad.data())))
            << target << " vocab=" << vocab << " logit " << bad;
      }
    }
  });
}

// Large logits: max + log(sum) - x[t] in double loses log(sum) once |max| passes about
// 2^53 log(sum) (ten equal logits of 7.6e22 gave 0, torch ln 10); the kernel computes
// log(sum) - (x[t] - max). Rows of equal logits from 1e8 to float's largest, of both signs, give
// ln V (within the float sum's rounding); rows spread across float's range give the difference
// to the max (which double holds exactly), with an ignored row of NaN between them.
TEST(RowwiseKernels, CrossEntropyOfLargeLogitsKeepsTheLog) {
  const float kMax = std::numeric_limits<float>::max();
  test::ForEachTarget([&](const char* target) {
    for (size_t vocab : {1, 2, 3, 7, 8, 10, 17, 28, 33}) {
      for (float x : {1e8f, 1e16f, 7.6e22f, 1e30f, kMax, -1e16f, -7.6e22f, -kMax}) {
        std::vector<float> row(vocab, x);
        for (int32_t t : {0, static_cast<int32_t>(vocab - 1)}) {
          std::vector<float> grad(vocab, 99.0f);
          const double loss = CrossEntropyRows(row.data(), 1, vocab, &t, 1, grad.data());
          EXPECT_NEAR(loss, std::log(static_cast<double>(vocab)),
                      static_cast<double>(vocab + 2) * 0x1p-24)
              << target << " vocab=" << vocab << " logits " << x << " target " << t;
          for (size_t j = 0; j < vocab; ++j) {
            const double want = 1.0 / static_cast<double>(vocab) - (static_cast<int32_t>(j) == t);
            EXPECT_NEAR(grad[j], want, 1e-7) << target << " vocab=" << vocab << " logits " << x;
          }
        }
      }
    }
    // Spreads: (row, target, loss). x[t] - max is exact in double for these, and exp of every
    // other difference is 0, or 1 at a tie with the max, so the loss is log(ties) - (x[t] - max).
    const float up = std::nextafter(7.6e22f, kInf), down = std::nextafter(7.6e22f, -kInf);
    struct Spread {
      std::vector<float> row;
      int32_t t;
      double loss;
    };
    const std::vector<Spread> spreads = {
        {{1e30f, -1e30f, 0.0f, 1e30f, 5e29f}, 1, std::log(2.0) + 2.0 * double(1e30f)},
        {{1e30f, -1e30f, 0.0f, 1e30f, 5e29f}, 3, std::log(2.0)},
        {{kMax, -kMax, 0.0f}, 0, 0.0},
        {{kMax, -kMax, 0.0f}, 2, double(kMax)},
        {{kMax, -kMax, 0.0f}, 1, 2.0 * double(kMax)},  // beyond float: a double loss holds it
        {{7.6e22f, up, down, 7.6e22f}, 0, double(up) - double(7.6e22f)},
        {{7.6e22f, up, down, 7.6e22f}, 2, double(up) - double(down)},
        {{7.6e22f, up, down, 7.6e22f}, 1, 0.0},
        {{-7.6e22f, 1.0f, -kInf, 2.0f}, 0, std::log1p(std::exp(-1.0)) - (double(-7.6e22f) - 2.0)},
    };
    for (const Spread& s : spreads) {
      const size_t vocab = s.row.size();
      std::vector<float> logits = s.row;
      logits.insert(logits.end(), vocab, std::nanf(""));
      logits.insert(logits.end(), s.row.begin(), s.row.end());
      const int32_t targets[] = {s.t, -100, s.t};
      const double loss = CrossEntropyRows(logits.data(), 3, vocab, targets, 2, nullptr);
      EXPECT_NEAR(loss, s.loss, 1e-6 + 0x1p-52 * std::abs(s.loss))
          << target << " target " << s.t << " of " << s.row[0] << ", " << s.row[1] << ", ...";
    }
  });
}

}  // namespace
}  // namespace headscope
