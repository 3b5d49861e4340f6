// Roofline probe: the WASM SIMD128 multiply+add peak of this machine and engine, in GFLOP/s.
//
// roofline_run(accumulators, iterations, x0, mul, add) runs `iterations` rounds of, for each of `accumulators`
// independent f32x4 registers, acc = acc * m + a (one f32x4.mul and one f32x4.add: 8 flops).
// Independent chains hide the mul and add latencies; baseline SIMD128 has no fused multiply-add,
// so mul + add is the most a matmul kernel's inner loop can issue per pair of instructions.
// Compiled as the relaxed-SIMD build (hs_roofline_relaxed, -mrelaxed-simd), the same round is one
// f32x4.relaxed_madd (still 8 flops; an FMA where the CPU has one): the peak of the relaxed
// module's micro-kernel, which issues exactly that (kernels/matmul-inl.h ChainMulAdd). The
// JS side times calls with performance.now() and keeps the best over accumulator counts (too few
// chains are latency-bound, too many spill registers). Returns a lane sum so nothing is elided.
#include <emscripten/emscripten.h>
#include <wasm_simd128.h>

namespace {

template <int N>
float Run(int iterations, float x0, float mul, float add) {
  // Every value comes from the caller, so the compiler can fold nothing (with constants it proves
  // a chain that starts at its fixed point constant and drops it). The caller passes 0 < mul < 1
  // and add > 0, which keep every accumulator finite and normal for any iteration count.
  v128_t acc[N];
  for (int i = 0; i < N; ++i) acc[i] = wasm_f32x4_splat(x0 + add * static_cast<float>(i));
  const v128_t m = wasm_f32x4_splat(mul);
  const v128_t a = wasm_f32x4_splat(add);
  for (int it = 0; it < iterations; ++it) {
#pragma clang loop unroll(full)
#if defined(__wasm_relaxed_simd__)
    for (int i = 0; i < N; ++i) acc[i] = wasm_f32x4_relaxed_madd(acc[i], m, a);
#else
    for (int i = 0; i < N; ++i) acc[i] = wasm_f32x4_add(wasm_f32x4_mul(acc[i], m), a);
#endif
  }
  v128_t sum = acc[0];
  for (int i = 1; i < N; ++i) sum = wasm_f32x4_add(sum, acc[i]);
  return wasm_f32x4_extract_lane(sum, 0) + wasm_f32x4_extract_lane(sum, 1) +
         wasm_f32x4_extract_lane(sum, 2) + wasm_f32x4_extract_lane(sum, 3);
}

}  // namespace

extern "C" EMSCRIPTEN_KEEPALIVE float roofline_run(int accumulators, int iterations, float x0,
                                                   float mul, float add) {
  switch (accumulators) {
    case 1: return Run<1>(iterations, x0, mul, add);
    case 2: return Run<2>(iterations, x0, mul, add);
    case 4: return Run<4>(iterations, x0, mul, add);
    case 6: return Run<6>(iterations, x0, mul, add);
    case 8: return Run<8>(iterations, x0, mul, add);
    case 10: return Run<10>(iterations, x0, mul, add);
    case 12: return Run<12>(iterations, x0, mul, add);
    case 13: return Run<13>(iterations, x0, mul, add);
    case 14: return Run<14>(iterations, x0, mul, add);
    case 16: return Run<16>(iterations, x0, mul, add);
    default: return -1.0f;
  }
}
