// One place that hides how a kernel's SIMD target is chosen. Natively every kernel is compiled
// for several x86 targets (foreach_target.h) and the best one the CPU supports is picked at run
// time through libhwy. WebAssembly has no runtime dispatch (and no libhwy): the build defines
// HWY_COMPILE_ONLY_STATIC, compiles the single WASM SIMD128 target and calls it directly.
#ifndef HEADSCOPE_KERNELS_DISPATCH_H_
#define HEADSCOPE_KERNELS_DISPATCH_H_

#include "hwy/highway.h"

#if defined(HWY_COMPILE_ONLY_STATIC)
#define HEADSCOPE_EXPORT(fn) static_assert(true, "static dispatch: nothing to export")
#define HEADSCOPE_DISPATCH(fn) HWY_STATIC_DISPATCH(fn)
#else
#define HEADSCOPE_EXPORT(fn) HWY_EXPORT(fn)
#define HEADSCOPE_DISPATCH(fn) HWY_DYNAMIC_DISPATCH(fn)
#endif

namespace headscope {
// Name of the SIMD target the kernels run on ("AVX2", "WASM", ...), for logs and benchmarks.
const char* KernelTargetName();
// Which WebAssembly build this is: "relaxed" (compiled with -mrelaxed-simd: the matmul chains
// use f32x4.relaxed_madd, matmul-inl.h ChainMulAdd), "simd128" (baseline WASM SIMD128), or
// "native" outside WebAssembly. The JS API reports it as hs.simd.
const char* WasmSimdBuild();
}  // namespace headscope

#endif  // HEADSCOPE_KERNELS_DISPATCH_H_
