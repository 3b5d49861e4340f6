// The thread pool behind ParallelFor (see parallel.h); empty unless HEADSCOPE_THREADS.
#include "headscope/parallel.h"

#if defined(HEADSCOPE_THREADS)

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace headscope {
namespace {

// One job at a time. The caller publishes it (under mu) and bumps `generation`; workers that
// notice join it (under mu, counted in `inside`), and everyone, caller included, claims indices
// from `next` until they run out. The caller waits for the job's tasks (`completed` == n), never
// for the workers themselves: a worker that is slow to wake (descheduled on a busy machine) and
// finds nothing left costs the caller nothing, and the caller can end up running every task.
// Before the next job overwrites the shared fields the caller waits for `inside` to reach 0,
// which only covers workers that joined, and they leave right after their last claim.
//
// Waiting spins first, then blocks. Waking a blocked thread costs tens of microseconds in
// WebAssembly (measured: ~50 us per ParallelFor with blocking waits only, which made a
// 32 x 64 forward 7x slower), while one forward issues up to five ParallelFor calls in a row and a
// loop of forwards follows at once: a worker that keeps polling for kSpin after its last task
// catches the next job at once. Then it blocks on a condition variable, so an idle pool costs no
// CPU (on a 2-core machine, spinning forever would take a core from everything else). On the
// browser's main thread Emscripten turns the caller's blocking wait into a busy-wait itself
// (blocking Atomics.wait is not allowed there).
constexpr auto kSpin = std::chrono::microseconds(200);

// Polls `ready()` for about kSpin; true if it became true.
template <class F>
bool SpinUntil(const F& ready) {
  const auto start = std::chrono::steady_clock::now();
  for (unsigned i = 1;; ++i) {
    if (ready()) return true;
    // Reading the clock is a call out of WebAssembly: only every 64 polls.
    if (i % 64 == 0 && std::chrono::steady_clock::now() - start > kSpin) return ready();
  }
}

struct Pool {
  std::mutex mu;
  std::condition_variable wake;   // workers: a new job, or stop
  std::condition_variable done;   // caller: the job's last task finished
  std::condition_variable empty;  // caller: the last worker left the job
  std::vector<std::thread> threads;
  std::atomic<uint64_t> generation{0};  // bumped under mu for each job
  std::atomic<bool> stop{false};
  int inside = 0;  // under mu: workers that joined the current job and have not left it

  // The current job: written by the caller under mu while inside == 0, read by workers that
  // joined it (under mu) until they leave.
  ParallelTask task = nullptr;
  void* context = nullptr;
  size_t n = 0;
  std::atomic<size_t> next{0};       // next index to claim
  std::atomic<size_t> completed{0};  // tasks finished

  // Runs claimed tasks until none are left. A worker leaves the job (`leave`) right after its
  // last claim, before counting its last task, so no joined worker is ever waiting to be
  // scheduled just to say it found nothing.
  template <class Leave>
  void Work(size_t worker, const Leave& leave) {
    // After leaving, the caller may publish the next job once the last task is counted: from
    // then on only these copies are read.
    const size_t count = n;
    const ParallelTask run = task;
    void* const ctx = context;
    size_t i = next.fetch_add(1, std::memory_order_relaxed);
    if (i >= count) return leave();
    for (;;) {
      run(ctx, i, worker);
      const size_t following = next.fetch_add(1, std::memory_order_relaxed);
      if (following >= count) leave();
      if (completed.fetch_add(1, std::memory_order_acq_rel) + 1 == count) {
        std::lock_guard<std::mutex> lock(mu);  // the caller is before its check or waiting
        done.notify_one();
      }
      if (following >= count) return;
      i = following;
    }
  }

  void WorkerLoop(size_t worker) {
    uint64_t seen = 0;
    const auto has_news = [&] {
      return stop.load(std::memory_order_acquire) ||
             generation.load(std::memory_order_acquire) != seen;
    };
    for (;;) {
      std::unique_lock<std::mutex> lock(mu, std::defer_lock);
      if (SpinUntil(has_news)) {
        lock.lock();
      } else {
        lock.lock();
        wake.wait(lock, has_news);
      }
      if (stop.load(std::memory_order_acquire)) return;
      // Join the job that is current now (it may be newer than the one that woke this thread).
      seen = generation.load(std::memory_order_acquire);
      ++inside;
      lock.unlock();
      Work(worker, [&] {
        std::lock_guard<std::mutex> guard(mu);
        if (--inside == 0) empty.notify_one();
      });
    }
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop.store(true, std::memory_order_release);
    }
    wake.notify_all();
    for (std::thread& t : threads) t.join();
    threads.clear();
    stop.store(false, std::memory_order_release);
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
    std::unique_lock<std::mutex> lock(p.mu);
    // Workers still inside the previous job are past their last claim: they leave at once.
    p.empty.wait(lock, [&] { return p.inside == 0; });
    p.task = task;
    p.context = context;
    p.n = n;
    p.next.store(0, std::memory_order_relaxed);
    p.completed.store(0, std::memory_order_relaxed);
    p.generation.fetch_add(1, std::memory_order_release);
  }
  p.wake.notify_all();
  p.Work(0, [] {});
  const auto finished = [&] { return p.completed.load(std::memory_order_acquire) == n; };
  if (SpinUntil(finished)) return;
  std::unique_lock<std::mutex> lock(p.mu);
  p.done.wait(lock, finished);
}

}  // namespace headscope

#endif  // HEADSCOPE_THREADS
