// Per-target SIMD code of the packed matmul (see matmul.h for the contract). Included once per
// target by matmul.cc (foreach_target.h) and by other kernel families that call it inline.

// Per-target include guard: lets foreach_target.h include this file once for every target.
#if defined(HEADSCOPE_KERNELS_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef HEADSCOPE_KERNELS_MATMUL_INL_H_
#undef HEADSCOPE_KERNELS_MATMUL_INL_H_
#else
#define HEADSCOPE_KERNELS_MATMUL_INL_H_
#endif

#include <cstddef>
#include <cstring>

#include "headscope/kernels/matmul.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace headscope {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Register blocking for this target: a micro-kernel keeps kRows x kVecs accumulators, plus kVecs
// loads of B and one broadcast of A, in registers. Natively (GCC/Clang allocate 16 vector
// registers on SSE4/AVX2) 6 rows x 2 vectors uses 15. V8 compiles WASM SIMD128 with fewer free
// registers (it reserves scratch registers), and an inlined 6 x 2 spills there: 4 x 2 measured
// ~1.8x faster in Node and Chromium (tools/bench). AVX-512 has 32 registers and 16 lanes: one
// vector spans a whole panel and more rows fit.
//
// In WebAssembly the products with k >= kOutlineMinK run outlined kernels (kWasmOutline) with
// more rows, kRowsOutlined. Their k loop is the only loop of its function, which V8 does not
// unroll (see kOutlineMinK), and there the relaxed build's f32x4.relaxed_madd, one vfmadd231ps
// into the accumulator with no product temporary, fits 6 x 2 (12 accumulators, 2 of B, 1
// broadcast: V8's 15 registers); SIMD128's multiply then add needs a temporary and fits 5 x 2.
// The relaxed build's row-major A (the unpacked products: weights x V) runs 5 x 2, which Node
// ran faster than 6 x 2 (BERT-base L=512 ~4%) and Chromium the same.
#ifndef HEADSCOPE_MM_ROWS
#if HWY_TARGET == HWY_WASM
#define HEADSCOPE_MM_ROWS 4
#else
#define HEADSCOPE_MM_ROWS 6
#endif
#endif
#if HWY_TARGET == HWY_WASM
inline constexpr bool kWasmOutline = true;
#else
inline constexpr bool kWasmOutline = false;
#endif
#if HWY_TARGET == HWY_WASM && defined(__wasm_relaxed_simd__)
inline constexpr size_t kRowsOutlined = 6;          // A packed or stored transposed
inline constexpr size_t kRowsOutlinedRowMajor = 5;  // A row-major
#else
inline constexpr size_t kRowsOutlined = 5;
inline constexpr size_t kRowsOutlinedRowMajor = 5;
#endif

template <class D>
struct MatMulGeometry {
  static constexpr size_t kLanes = hn::MaxLanes(D());
  static constexpr size_t kVecs = (2 * kLanes <= kPanel) ? 2 : 1;
  static constexpr size_t kGroupCols = kVecs * kLanes;  // columns one micro-kernel call covers
  static constexpr size_t kRows = (kLanes >= 16) ? 8 : HEADSCOPE_MM_ROWS;
  static_assert(kPanel % kGroupCols == 0, "a panel must split into whole column groups");
};

// The multiply-add of every product chain: acc + a * b, lane by lane. It is Highway's MulAdd
// (a fused multiply-add natively where the target has one; in WebAssembly SIMD128, which has
// none, a multiply then an add), except in the relaxed-SIMD WebAssembly build (-mrelaxed-simd,
// compiled by clang 19: tools/build-wasm.sh), where it is f32x4.relaxed_madd, which the engine
// lowers to one FMA instruction where the CPU has one (x86 with FMA3, Arm) and to a multiply and
// an add elsewhere: one rounding instead of two, so that build's bits differ from SIMD128's, and
// can differ between CPUs. Highway 1.0.3's WASM MulAdd knows nothing of relaxed SIMD, hence the
// intrinsic. Every chain that must give the packed product's bits (the small-head attention
// path, attention-inl.h) calls this too, so the promises "same bits whatever the path, the
// thread split or the k blocks" hold within each build.
//
// One-lane vectors (the small-head path's tails) compute lane 0 from splats of lane 0: Highway's
// partial LoadU leaves the other lanes undefined (whatever the register held), and relaxed_madd,
// opaque to the compiler, computes them all, where a mul and an add on a partial vector become
// scalar ops. With the garbage lanes the L=3 E=4 tutorial call took 2.8 us instead of 1.4 us
// (in Node; subnormal operands, for one, cost x86 a microcode assist each). Lane 0 is the same
// operation on the same floats either way, so the bits are the full vectors' lanes'.
template <class V>
HWY_INLINE V ChainMulAdd(V a, V b, V acc) {
#if HWY_TARGET == HWY_WASM && defined(__wasm_relaxed_simd__)
  constexpr size_t kLanes = hn::MaxLanes(hn::DFromV<V>());
  if constexpr (kLanes == 1) {
    const auto lane0 = [](V v) { return wasm_f32x4_splat(wasm_f32x4_extract_lane(v.raw, 0)); };
    return V{wasm_f32x4_relaxed_madd(lane0(a), lane0(b), lane0(acc))};
  } else {
    static_assert(kLanes * sizeof(float) == 16, "ChainMulAdd: full vectors or one lane");
    return V{wasm_f32x4_relaxed_madd(a.raw, b.raw, acc.raw)};
  }
#else
  return hn::MulAdd(a, b, acc);
#endif
}

// Rows of A per cache block: the block (kRowBlock x k floats; 192 KiB at k = 768) stays in L2
// while every column group of B passes over it, instead of all of A streaming from L3 once per
// column group (measured: GEMM at M = 512 fell to ~60% of its M = 128 rate without this).
inline constexpr size_t kRowBlock = 64;

// C[kRows, cols] = alpha * A[kRows, k] * Bgroup + bias, where Bgroup is kGroupCols columns of a
// packed panel (row p of it at b + p * kPanel). `cols` < kGroupCols only on the last panel.
// A(r, p) is a[r * lda + p], or with kTransA a[p * lda + r] (A stored as its transpose, (k, m):
// the backward's dW = dY^T X reads dY so, without a transposed copy). Either way each element of
// C is the same multiply-add chain over p, so the two give the same bits for the same A.
//
// kPart splits k into runs (MatMulPackedImpl's k blocks, for a long k): kWhole computes C from 0
// and finishes it (alpha, bias); kFirst starts from 0 and stores the raw sums in C; kMiddle and
// kLast continue from the sums in C, kLast finishing. A float accumulator stored and loaded back
// is the same float, so a split chain is the whole chain, bit for bit.
//
// In WebAssembly the kTransA loop walks pointers, A's broadcasts at fixed offsets from one and
// B's loads from another: Emscripten runs clang without loop strength reduction (-mllvm
// -disable-lsr), and V8 turns the indexed form into a shift, an add and a lea per row on every
// step, which the issue width of the FMA-bound loop cannot hide. Row-major A keeps the indexed
// form (walked it was no faster, and slower in Node where the smaller loop got unrolled, see
// kOutlineMinK); MatMulPackedPackA hands the big products a packed, transposed A.
enum KPart { kWhole, kFirst, kMiddle, kLast };
//
// kRowMajorB: B is not packed but row-major, its row p at b + p * ldb (the group's kGroupCols
// columns of it all inside the row: MatMulRowMajorBImpl), for small operands that are already
// laid out so (the attention backward's K, Q and dZ rows). The same chains again.
template <size_t kRows, bool kTransA = false, KPart kPart = kWhole, bool kRowMajorB = false,
          class D>
HWY_INLINE void MicroKernelBody(D d, const float* HWY_RESTRICT a, size_t lda,
                                const float* HWY_RESTRICT b, size_t k,
                                const float* HWY_RESTRICT bias_group, float alpha,
                                float* HWY_RESTRICT c, size_t ldc, size_t cols,
                                size_t ldb = kPanel) {
  using G = MatMulGeometry<D>;
  using V = hn::Vec<D>;
  // B's row stride: the panel's constant unless B is row-major (the packed path's code unchanged).
  const size_t b_stride = kRowMajorB ? ldb : kPanel;
  V acc[kRows][G::kVecs];
  for (size_t r = 0; r < kRows; ++r) {
    if constexpr (kPart == kMiddle || kPart == kLast) {
      HWY_ALIGN float tail[G::kGroupCols] = {};
      const float* src = c + r * ldc;
      if (cols != G::kGroupCols) {
        for (size_t j = 0; j < cols; ++j) tail[j] = src[j];
        src = tail;
      }
      for (size_t v = 0; v < G::kVecs; ++v) acc[r][v] = hn::LoadU(d, src + v * G::kLanes);
    } else {
      for (size_t v = 0; v < G::kVecs; ++v) acc[r][v] = hn::Zero(d);
    }
  }
  if constexpr (kTransA && kWasmOutline) {
    const float* HWY_RESTRICT ap = a;
    const float* HWY_RESTRICT bp = b;
    const float* const b_end = b + k * b_stride;
    for (; bp != b_end; bp += b_stride, ap += lda) {
      V bv[G::kVecs];
      for (size_t v = 0; v < G::kVecs; ++v) bv[v] = hn::LoadU(d, bp + v * G::kLanes);
      for (size_t r = 0; r < kRows; ++r) {
        const V av = hn::Set(d, ap[r]);
        for (size_t v = 0; v < G::kVecs; ++v) acc[r][v] = ChainMulAdd(av, bv[v], acc[r][v]);
      }
    }
  } else {
    for (size_t p = 0; p < k; ++p) {
      const float* HWY_RESTRICT bp = b + p * b_stride;
      V bv[G::kVecs];
      for (size_t v = 0; v < G::kVecs; ++v) bv[v] = hn::LoadU(d, bp + v * G::kLanes);
      for (size_t r = 0; r < kRows; ++r) {
        const V av = hn::Set(d, kTransA ? a[p * lda + r] : a[r * lda + p]);
        for (size_t v = 0; v < G::kVecs; ++v) acc[r][v] = ChainMulAdd(av, bv[v], acc[r][v]);
      }
    }
  }
  const V valpha = hn::Set(d, alpha);
  for (size_t r = 0; r < kRows; ++r) {
    float* HWY_RESTRICT crow = c + r * ldc;
    HWY_ALIGN float tail[G::kGroupCols];
    float* dst = (cols == G::kGroupCols) ? crow : tail;
    for (size_t v = 0; v < G::kVecs; ++v) {
      V out = acc[r][v];
      if constexpr (kPart == kWhole || kPart == kLast) {
        out = hn::Mul(out, valpha);
        if (bias_group != nullptr) out = hn::Add(out, hn::LoadU(d, bias_group + v * G::kLanes));
      }
      hn::StoreU(out, d, dst + v * G::kLanes);
    }
    // Edge of the last panel: never write past column n, the caller's buffer may end there.
    // (A loop, not memcpy: Emscripten calls out to memcpy for a variable length, and for 1-7
    // floats the call costs more than the copy; tiny shapes hit this on every row.)
    if (dst == tail) {
      for (size_t j = 0; j < cols; ++j) crow[j] = tail[j];
    }
  }
}

// k from which WebAssembly runs each micro-kernel as a function of its own (kOutline, with
// kRowsOutlined rows), whose k loop is then the only loop of its function. Node 20's TurboFan
// unrolls an innermost wasm loop of up to 50 x (nesting depth + 1) nodes: inlined four loops
// deep the 5 x 2 and 6 x 2 loops qualify, and in the unrolled copies every broadcast of A is
// scheduled ahead of the multiply-adds, which spills (relaxed build, E=768 projections: inlined
// 5 x 2 33 GFLOP/s, 6 x 2 34, against 41 for 4 x 2; --no-wasm-loop-unrolling gave 5 x 2 48). In
// a function of its own the loop is too big to unroll. Chromium 156 ran the inlined 6 x 2 as
// fast as the outlined one. Below kOutlineMinK the call costs more than the rows gain (the
// tutorial shapes), so short products keep the inlined 4 x 2: the same chains, the same bits.
inline constexpr size_t kOutlineMinK = 128;

template <size_t kRows, bool kTransA, KPart kPart, bool kRowMajorB, class D>
HWY_NOINLINE void MicroKernelOutlined(D d, const float* HWY_RESTRICT a, size_t lda,
                                      const float* HWY_RESTRICT b, size_t k,
                                      const float* HWY_RESTRICT bias_group, float alpha,
                                      float* HWY_RESTRICT c, size_t ldc, size_t cols,
                                      size_t ldb) {
  MicroKernelBody<kRows, kTransA, kPart, kRowMajorB>(d, a, lda, b, k, bias_group, alpha, c, ldc,
                                                     cols, ldb);
}

template <size_t kRows, bool kTransA = false, KPart kPart = kWhole, bool kOutline = false,
          bool kRowMajorB = false, class D>
HWY_INLINE void MicroKernel(D d, const float* HWY_RESTRICT a, size_t lda,
                            const float* HWY_RESTRICT b, size_t k,
                            const float* HWY_RESTRICT bias_group, float alpha,
                            float* HWY_RESTRICT c, size_t ldc, size_t cols, size_t ldb = kPanel) {
  if constexpr (kOutline) {
    MicroKernelOutlined<kRows, kTransA, kPart, kRowMajorB>(d, a, lda, b, k, bias_group, alpha, c,
                                                           ldc, cols, ldb);
  } else {
    MicroKernelBody<kRows, kTransA, kPart, kRowMajorB>(d, a, lda, b, k, bias_group, alpha, c, ldc,
                                                       cols, ldb);
  }
}

// Runs MicroKernel<rows> for 1 <= rows < kRows (the last block of rows) without a runtime loop
// inside the kernel: each count gets its own fully unrolled instance.
template <size_t kRows, bool kTransA = false, KPart kPart = kWhole, bool kOutline = false,
          bool kRowMajorB = false, class D>
HWY_INLINE void MicroKernelTail(size_t rows, D d, const float* a, size_t lda, const float* b,
                                size_t k, const float* bias_group, float alpha, float* c,
                                size_t ldc, size_t cols, size_t ldb = kPanel) {
  if constexpr (kRows > 0) {
    if (rows == kRows) {
      MicroKernel<kRows, kTransA, kPart, kOutline, kRowMajorB>(d, a, lda, b, k, bias_group, alpha,
                                                               c, ldc, cols, ldb);
    } else {
      MicroKernelTail<kRows - 1, kTransA, kPart, kOutline, kRowMajorB>(
          rows, d, a, lda, b, k, bias_group, alpha, c, ldc, cols, ldb);
    }
  }
}

// k per run of the k blocks of a transposed-A product (MatMulPackedImpl<true>): a column group's
// run of its packed panel (kKBlock x kGroupCols floats, 16 KiB at 8 lanes) stays in L1 while the
// row block's rows pass over it. The backward's weight gradients have k = B * T (1,024 for the
// 1M model's batch): their whole panel (64 KiB) streamed from L2 once per micro-kernel row group.
inline constexpr size_t kKBlock = 256;

// packed_k: the k that packed_b was packed with, when only its first k rows are used (a causal
// tile needs only the keys up to its last query); 0 means k. kTransA: A stored as (k, m), see
// MicroKernel.
template <bool kTransA, KPart kPart, bool kPackedA = false>
HWY_INLINE void MatMulRowBlock(const float* HWY_RESTRICT a, size_t lda,
                               const float* HWY_RESTRICT packed_b, size_t panel_floats,
                               const float* HWY_RESTRICT bias, size_t i0, size_t i_end, size_t n,
                               size_t k, float alpha, float* HWY_RESTRICT c, size_t ldc);

template <bool kTransA = false>
HWY_INLINE void MatMulPackedImpl(const float* HWY_RESTRICT a, size_t lda,
                                 const float* HWY_RESTRICT packed_b,
                                 const float* HWY_RESTRICT bias, size_t m, size_t n, size_t k,
                                 float alpha, float* HWY_RESTRICT c, size_t ldc,
                                 size_t packed_k = 0) {
  const size_t panel_floats = kPanel * (packed_k != 0 ? packed_k : k);
  if constexpr (kTransA) {
    if (k > kKBlock) {
      // Runs of kKBlock over k, each over the whole row block: A's run p0.. is the rows p0.. of
      // its stored transpose, B's the rows p0.. of each panel (panel stride unchanged).
      for (size_t i0 = 0; i0 < m; i0 += kRowBlock) {
        const size_t i_end = (m - i0 < kRowBlock) ? m : i0 + kRowBlock;
        for (size_t p0 = 0; p0 < k; p0 += kKBlock) {
          const size_t kk = (k - p0 < kKBlock) ? k - p0 : kKBlock;
          const float* ap = a + p0 * lda;
          const float* bp = packed_b + p0 * kPanel;
          if (p0 == 0) {
            MatMulRowBlock<true, kFirst>(ap, lda, bp, panel_floats, bias, i0, i_end, n, kk, alpha,
                                         c, ldc);
          } else if (p0 + kk < k) {
            MatMulRowBlock<true, kMiddle>(ap, lda, bp, panel_floats, bias, i0, i_end, n, kk,
                                          alpha, c, ldc);
          } else {
            MatMulRowBlock<true, kLast>(ap, lda, bp, panel_floats, bias, i0, i_end, n, kk, alpha,
                                        c, ldc);
          }
        }
      }
      return;
    }
  }
  for (size_t i0 = 0; i0 < m; i0 += kRowBlock) {
    const size_t i_end = (m - i0 < kRowBlock) ? m : i0 + kRowBlock;
    MatMulRowBlock<kTransA, kWhole>(a, lda, packed_b, panel_floats, bias, i0, i_end, n, k, alpha,
                                    c, ldc);
  }
}

// Rows [i0, i_end) of C for one run of k (kPart): every column group of every panel.
// kPackedA: `a` is PackARows' copy of rows [i0, i_end), read by the kTransA micro-kernels.
template <bool kTransA, KPart kPart, bool kPackedA, bool kOutline>
HWY_INLINE void MatMulRowBlockImpl(const float* HWY_RESTRICT a, size_t lda,
                                   const float* HWY_RESTRICT packed_b, size_t panel_floats,
                                   const float* HWY_RESTRICT bias, size_t i0, size_t i_end,
                                   size_t n, size_t k, float alpha, float* HWY_RESTRICT c,
                                   size_t ldc) {
  const hn::ScalableTag<float> d;
  using G = MatMulGeometry<decltype(d)>;
  // PackARows lays A out in groups of kRowsOutlined rows.
  constexpr size_t kRows = kPackedA   ? kRowsOutlined
                           : !kOutline ? G::kRows
                           : kTransA   ? kRowsOutlined
                                       : kRowsOutlinedRowMajor;
  // Loop order: the row block (kRowBlock rows of A) stays in L2; within it, a column group of
  // one panel (k * kGroupCols floats) stays in L1 while the block's rows pass over it.
  for (size_t j0 = 0; j0 < n; j0 += kPanel) {
    const float* panel = packed_b + (j0 / kPanel) * panel_floats;
    for (size_t g = 0; g < kPanel && j0 + g < n; g += G::kGroupCols) {
      const size_t col = j0 + g;
      const size_t cols = (n - col < G::kGroupCols) ? n - col : G::kGroupCols;
      HWY_ALIGN float bias_tail[G::kGroupCols] = {};
      const float* bias_group = nullptr;
      if (bias != nullptr) {
        if (cols == G::kGroupCols) {
          bias_group = bias + col;
        } else {
          for (size_t j = 0; j < cols; ++j) bias_tail[j] = bias[col + j];
          bias_group = bias_tail;
        }
      }
      // Row group i.. of A: in the packed copy (k, rows) row-major at a + (i - i0) * k, read
      // as a transposed A of leading dimension `rows`; else A itself.
      constexpr bool kTransGroup = kPackedA || kTransA;
      const auto a_group = [&](size_t i) {
        return kPackedA ? a + (i - i0) * k : kTransA ? a + i : a + i * lda;
      };
      const auto lda_group = [&](size_t rows) { return kPackedA ? rows : lda; };
      size_t i = i0;
      for (; i + kRows <= i_end; i += kRows) {
        MicroKernel<kRows, kTransGroup, kPart, kOutline>(d, a_group(i), lda_group(kRows),
                                                         panel + g, k, bias_group, alpha,
                                                         c + i * ldc + col, ldc, cols);
      }
      if (i < i_end) {
        MicroKernelTail<kRows - 1, kTransGroup, kPart, kOutline>(
            i_end - i, d, a_group(i), lda_group(i_end - i), panel + g, k, bias_group, alpha,
            c + i * ldc + col, ldc, cols);
      }
    }
  }
}

template <bool kTransA, KPart kPart, bool kPackedA>
HWY_INLINE void MatMulRowBlock(const float* HWY_RESTRICT a, size_t lda,
                               const float* HWY_RESTRICT packed_b, size_t panel_floats,
                               const float* HWY_RESTRICT bias, size_t i0, size_t i_end, size_t n,
                               size_t k, float alpha, float* HWY_RESTRICT c, size_t ldc) {
  if constexpr (kWasmOutline) {
    if (k >= kOutlineMinK) {
      MatMulRowBlockImpl<kTransA, kPart, kPackedA, true>(a, lda, packed_b, panel_floats, bias, i0,
                                                         i_end, n, k, alpha, c, ldc);
      return;
    }
  }
  MatMulRowBlockImpl<kTransA, kPart, kPackedA, false>(a, lda, packed_b, panel_floats, bias, i0,
                                                      i_end, n, k, alpha, c, ldc);
}

// Whether MatMulRowMajorBImpl takes a product of n columns: whole column groups only (its
// micro-kernels load kGroupCols columns of every row of B, and past n they would read the next
// row, or past the buffer).
HWY_INLINE bool RowMajorBTakes(size_t n) {
  using G = MatMulGeometry<hn::ScalableTag<float>>;
  return n % G::kGroupCols == 0;
}

// Rows [i0, i_end) of C for one run of k (kPart) of MatMulRowMajorBImpl: MatMulRowBlockImpl's
// loop with B's column group at b + col (row stride ldb) in place of a panel's.
template <bool kTransA, KPart kPart, bool kOutline>
HWY_INLINE void RowMajorBRowBlock(const float* HWY_RESTRICT a, size_t lda,
                                  const float* HWY_RESTRICT b, size_t ldb, size_t i0,
                                  size_t i_end, size_t n, size_t k, float alpha,
                                  float* HWY_RESTRICT c, size_t ldc) {
  const hn::ScalableTag<float> d;
  using G = MatMulGeometry<decltype(d)>;
  constexpr size_t kRows = !kOutline ? G::kRows : kTransA ? kRowsOutlined : kRowsOutlinedRowMajor;
  const auto a_group = [&](size_t i) { return kTransA ? a + i : a + i * lda; };
  for (size_t col = 0; col < n; col += G::kGroupCols) {
    size_t i = i0;
    for (; i + kRows <= i_end; i += kRows) {
      MicroKernel<kRows, kTransA, kPart, kOutline, true>(d, a_group(i), lda, b + col, k, nullptr,
                                                         alpha, c + i * ldc + col, ldc,
                                                         G::kGroupCols, ldb);
    }
    if (i < i_end) {
      MicroKernelTail<kRows - 1, kTransA, kPart, kOutline, true>(
          i_end - i, d, a_group(i), lda, b + col, k, nullptr, alpha, c + i * ldc + col, ldc,
          G::kGroupCols, ldb);
    }
  }
}

template <bool kTransA, bool kOutline>
HWY_INLINE void RowMajorBBlocks(const float* HWY_RESTRICT a, size_t lda,
                                const float* HWY_RESTRICT b, size_t ldb, size_t m, size_t n,
                                size_t k, float alpha, float* HWY_RESTRICT c, size_t ldc) {
  // Runs of k where MatMulPackedImpl has them (A transposed, k > kKBlock). In WebAssembly only
  // the outlined kernels see such a k (kKBlock > kOutlineMinK), so the inlined ones are compiled
  // for whole products only (a smaller module).
  constexpr bool kRuns = kTransA && (kOutline || !kWasmOutline);
  for (size_t i0 = 0; i0 < m; i0 += kRowBlock) {
    const size_t i_end = (m - i0 < kRowBlock) ? m : i0 + kRowBlock;
    if constexpr (kRuns) {
      if (k > kKBlock) {
        // A's run p0.. is the rows p0.. of its stored transpose, B's the rows p0.. of B.
        for (size_t p0 = 0; p0 < k; p0 += kKBlock) {
          const size_t kk = (k - p0 < kKBlock) ? k - p0 : kKBlock;
          const float* ap = a + p0 * lda;
          const float* bp = b + p0 * ldb;
          if (p0 == 0) {
            RowMajorBRowBlock<kTransA, kFirst, kOutline>(ap, lda, bp, ldb, i0, i_end, n, kk,
                                                         alpha, c, ldc);
          } else if (p0 + kk < k) {
            RowMajorBRowBlock<kTransA, kMiddle, kOutline>(ap, lda, bp, ldb, i0, i_end, n, kk,
                                                          alpha, c, ldc);
          } else {
            RowMajorBRowBlock<kTransA, kLast, kOutline>(ap, lda, bp, ldb, i0, i_end, n, kk,
                                                        alpha, c, ldc);
          }
        }
        continue;
      }
    }
    RowMajorBRowBlock<kTransA, kWhole, kOutline>(a, lda, b, ldb, i0, i_end, n, k, alpha, c, ldc);
  }
}

// C = alpha * A * B for B row-major (k, n), row p at b + p * ldb, without packing it: for
// operands already laid out so, where PackB's copy would cost about as much as the product (the
// attention backward's K, Q and dZ, T x hd; the weight gradients' layer inputs, B*T x in).
// Each element of C is MatMulPackedImpl's chain for the same operands (MicroKernelBody,
// kRowMajorB) over the same runs of k: the same bits. (Outlined kernels for every run of a
// product with k >= kOutlineMinK, where MatMulPackedImpl decides per run: the rows per kernel
// differ, the chains do not.) Needs RowMajorBTakes(n). kTransA as in MatMulPackedImpl.
template <bool kTransA = false>
HWY_INLINE void MatMulRowMajorBImpl(const float* HWY_RESTRICT a, size_t lda,
                                    const float* HWY_RESTRICT b, size_t ldb, size_t m, size_t n,
                                    size_t k, float alpha, float* HWY_RESTRICT c, size_t ldc) {
  if constexpr (kWasmOutline) {
    if (k >= kOutlineMinK) {
      RowMajorBBlocks<kTransA, true>(a, lda, b, ldb, m, n, k, alpha, c, ldc);
      return;
    }
  }
  RowMajorBBlocks<kTransA, false>(a, lda, b, ldb, m, n, k, alpha, c, ldc);
}

// The packed copy of A (MatMulPackedPackA), WebAssembly's big row-major products (the
// projections, through MatMulPacked): each row block copied once (kRowBlock x k floats) and read
// by the outlined kTransA kernels loses the per-row address arithmetic of every step of every
// column group (96 of them at n = 768). Measured on the E=768 projections: relaxed build 47-49
// -> 54-55 GFLOP/s with the outlined 6 x 2 (Node, Chromium); SIMD128 35-37 -> 41-42. The same
// chains, so the same bits as MatMulPackedImpl.

// Whether MatMulPackedPackA pays for its copy: outlined kernels (k >= kOutlineMinK), enough
// column groups to reuse the copy, and enough work to hide its allocation.
inline bool WorthPackingA(size_t m, size_t n, size_t k) {
  using G = MatMulGeometry<hn::ScalableTag<float>>;
  return kWasmOutline && m >= 2 * kRowsOutlined && n >= 4 * G::kGroupCols &&
         k >= kOutlineMinK &&
         static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) >= 1048576.0;
}

// Floats of scratch MatMulPackedPackA needs for this k.
inline size_t PackAFloats(size_t k) { return kRowBlock * k; }

// Copies rows [i0, i_end) of A (m, k) row-major into `out` as the outlined micro-kernels' row
// groups: the group of rows i.. (kRowsOutlined of them, fewer for the last) is (k, rows)
// row-major at out + (i - i0) * k.
HWY_INLINE void PackARows(const float* HWY_RESTRICT a, size_t lda, size_t i0, size_t i_end,
                          size_t k, float* HWY_RESTRICT out) {
  for (size_t i = i0; i < i_end; i += kRowsOutlined) {
    const size_t rows = (i_end - i < kRowsOutlined) ? i_end - i : kRowsOutlined;
    float* HWY_RESTRICT dst = out + (i - i0) * k;
    for (size_t r = 0; r < rows; ++r) {
      const float* HWY_RESTRICT src = a + (i + r) * lda;
      for (size_t p = 0; p < k; ++p) dst[p * rows + r] = src[p];
    }
  }
}

// MatMulPackedImpl<false> through packed copies of A's row blocks; `scratch` holds
// PackAFloats(k) floats.
HWY_INLINE void MatMulPackedPackA(const float* HWY_RESTRICT a, size_t lda,
                                  const float* HWY_RESTRICT packed_b,
                                  const float* HWY_RESTRICT bias, size_t m, size_t n, size_t k,
                                  float alpha, float* HWY_RESTRICT c, size_t ldc,
                                  float* HWY_RESTRICT scratch) {
  for (size_t i0 = 0; i0 < m; i0 += kRowBlock) {
    const size_t i_end = (m - i0 < kRowBlock) ? m : i0 + kRowBlock;
    PackARows(a, lda, i0, i_end, k, scratch);
    MatMulRowBlock<false, kWhole, true>(scratch, k, packed_b, kPanel * k, bias, i0, i_end, n, k,
                                        alpha, c, ldc);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace headscope
HWY_AFTER_NAMESPACE();

#endif  // HEADSCOPE_KERNELS_MATMUL_INL_H_
