// The thread pool behind ParallelFor (see parallel.h); empty unless HEADSCOPE_THREADS.
#include "headscope/parallel.h"

#if defined(HEADSCOPE_THREADS)

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace headscope {
namespace {

// One job at a time: the caller publishes it under the mutex, bumps `generation` and wakes the
// workers; everyone (caller included) takes indices from `next` until they run out. Workers block
// on a condition variable between jobs: on the browser's main thread Emscripten turns the caller's
// own waits into busy-waits (blocking Atomics.wait is not allowed there), and workers idle
// without spinning, which matters on machines with few cores.
struct Pool {
  std::mutex mu;
  std::condition_variable wake;  // workers: a new job or stop
  std::condition_variable done;  // caller: the last worker finished
  std::vector<std::thread> threads;
  uint64_t generation = 0;
  bool stop = false;
  int busy = 0;  // workers still inside the current job

  ParallelTask task = nullptr;
  void* context = nullptr;
  size_t n = 0;
  std::atomic<size_t> next{0};

  void RunIndices(size_t worker) {
    for (size_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      task(context, i, worker);
    }
  }

  void WorkerLoop(size_t worker) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu);
        wake.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
      }
      RunIndices(worker);
      std::lock_guard<std::mutex> lock(mu);
      if (--busy == 0) done.notify_one();
    }
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    wake.notify_all();
    for (std::thread& t : threads) t.join();
    threads.clear();
    stop = false;
  }
};

Pool& ThePool() {
  static Pool* pool = new Pool;  // never destroyed: workers may outlive static destructors
  return *pool;
}

int g_threads = 1;

}  // namespace

void SetThreadCount(int threads) {
  if (threads < 1) threads = 1;
  if (threads > kMaxThreads) threads = kMaxThreads;
  Pool& p = ThePool();
  if (static_cast<size_t>(threads) == p.threads.size() + 1) return;
  p.Stop();
  for (int w = 1; w < threads; ++w) p.threads.emplace_back([&p, w] { p.WorkerLoop(w); });
  g_threads = threads;
}

int ThreadCount() { return g_threads; }

void ParallelForImpl(size_t n, ParallelTask task, void* context) {
  Pool& p = ThePool();
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.task = task;
    p.context = context;
    p.n = n;
    p.next.store(0, std::memory_order_relaxed);
    p.busy = static_cast<int>(p.threads.size());
    ++p.generation;
  }
  p.wake.notify_all();
  p.RunIndices(0);
  // Every index is taken once `next` passes n, but workers may still be running theirs.
  std::unique_lock<std::mutex> lock(p.mu);
  p.done.wait(lock, [&] { return p.busy == 0; });
}

}  // namespace headscope

#endif  // HEADSCOPE_THREADS
