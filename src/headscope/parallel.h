// A small persistent thread pool for the multi-threaded WebAssembly build (HEADSCOPE_THREADS).
//
// Without HEADSCOPE_THREADS (native builds and the default single-threaded WebAssembly module)
// ParallelFor is an inline serial loop and ThreadCount() is the constant 1, so those builds compile
// to exactly the code they had before the pool existed.
//
// Callers split work so that every output element is computed by exactly one task with the same
// arithmetic whatever the thread count: results are bit-identical to the serial build.
#ifndef HEADSCOPE_PARALLEL_H_
#define HEADSCOPE_PARALLEL_H_

#include <cstddef>

namespace headscope {

// Below this many multiply-adds a call stays on the calling thread: waking the workers and
// waiting for them (tens of microseconds in WebAssembly) costs more than the work saves.
inline constexpr double kParallelMinMacs = 100e3;

#if defined(HEADSCOPE_THREADS)

// Sets the number of threads ParallelFor uses, the caller included (clamped to [1, kMaxThreads]);
// starts or stops workers. Not thread-safe: call it while no ParallelFor runs (the JS wrapper calls
// it once, when the module loads). In the browser the workers must already be in Emscripten's
// pthread pool (-sPTHREAD_POOL_SIZE): a thread started later only runs once the main thread
// returns to the event loop, and a ParallelFor waiting for it would never finish.
void SetThreadCount(int threads);
int ThreadCount();
inline constexpr int kMaxThreads = 64;

using ParallelTask = void (*)(void* context, size_t index, size_t worker);
// Runs task(context, i, worker) for every i < n across the pool and returns when all are done;
// `worker` < ThreadCount() names the thread running it (0 = the caller), for per-thread scratch.
// One caller at a time, and not nested: a task must not call ParallelFor (the kernels inside
// tasks call the *Impl functions, which never dispatch).
void ParallelForImpl(size_t n, ParallelTask task, void* context);

template <class F>
void ParallelFor(size_t n, const F& f) {
  if (n == 0) return;
  if (n == 1 || ThreadCount() == 1) {
    for (size_t i = 0; i < n; ++i) f(i, size_t{0});
    return;
  }
  ParallelForImpl(
      n, [](void* c, size_t i, size_t w) { (*static_cast<const F*>(c))(i, w); },
      const_cast<F*>(&f));
}

#else

inline void SetThreadCount(int) {}
inline constexpr int ThreadCount() { return 1; }
inline constexpr int kMaxThreads = 1;

template <class F>
inline void ParallelFor(size_t n, const F& f) {
  for (size_t i = 0; i < n; ++i) f(i, size_t{0});
}

#endif  // HEADSCOPE_THREADS

// The thread pool as one call sees it, carried in its CallContext (activations.h) instead of
// read from ThreadCount() inside the stages. There is one pool per process (in the browser its
// threads are Emscripten's pthread workers, started with the module), so the handle says how
// many threads the call planned for: per-thread scratch is sized for `threads`, and a stage runs
// on the pool only when `threads` covers every pool thread (ParallelFor hands out worker
// indices < ThreadCount()); otherwise it stays on the calling thread, with the same results.
// The projections (MatMulPacked's `threads`) and the attention stage (AttentionArgs::workers)
// both take it from the call's context.
struct ThreadPoolHandle {
  int threads = 1;
  // The pool as SetThreadCount left it.
  static ThreadPoolHandle Process() { return ThreadPoolHandle{ThreadCount()}; }
};

}  // namespace headscope

#endif  // HEADSCOPE_PARALLEL_H_
