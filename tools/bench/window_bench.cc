// Sliding-window attention's cost, natively, one process, one thread: the attention stage
// (kernels/attention.h Attention: QK^T, masks, softmax, weights x V) and a whole
// MultiheadAttention forward (with its projections), causal, L = S = 4096, against the same call
// with a window of w keys (ScoreModifiers::window / ForwardOptions::window). Prints the medians,
// their ratio and the CPU; docs/bench/README.md ("Sliding-window attention") records a run. Times
// are the thread's CPU time (clock_gettime(CLOCK_THREAD_CPUTIME_ID)), not wall time.
//
//   cmake --build --preset native --target headscope_window_bench
//   build/native/headscope_window_bench [L] [w] [reps]
//
// Also the stage at w = 128 for L = 1024 .. 8192 (time per query row should stay flat: linear in
// L) and at L = 4096 for w = 32 .. 1024 (time should grow with w).
#include <algorithm>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "headscope/kernels/attention.h"
#include "headscope/kernels/dispatch.h"
#include "headscope/mha.h"
#include "headscope/tensor.h"

namespace {

using headscope::AlignedBuffer;

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

// The calling thread's CPU time, in seconds: on a shared machine (other builds running) wall
// time measures the scheduler; the thread's CPU time is the work (cache sharing remains).
double ThreadSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

template <class F>
double MedianSeconds(int reps, const F& f) {
  f();  // warm-up: buffers sized, pages touched
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double start = ThreadSeconds();
    f();
    t.push_back(ThreadSeconds() - start);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<float> Random(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// The attention stage alone: one batch element, H heads of hd, causal, L = S.
double StageSeconds(size_t L, size_t H, size_t hd, size_t window, int reps, std::mt19937& rng) {
  const size_t E = H * hd;
  const std::vector<float> q = Random(L * E, rng), k = Random(L * E, rng), v = Random(L * E, rng);
  std::vector<float> concat(L * E);
  headscope::AttentionArgs a;
  a.shape = headscope::AttentionShape::Dense(1, H, L, L, L, hd);
  a.sqrt_head_dim = std::sqrt(static_cast<float>(hd));
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.modifiers.causal = true;
  a.modifiers.window = window;
  a.out.concat = concat.data();
  AlignedBuffer workspace;
  if (!workspace.Resize(static_cast<size_t>(headscope::AttentionWorkspaceFloats(a)))) std::abort();
  return MedianSeconds(reps, [&] { headscope::Attention(a, workspace.data()); });
}

// A whole forward: batch_first (1, L, E) self-attention, causal, no weights returned.
double ForwardSeconds(size_t L, size_t H, size_t hd, size_t window, int reps, std::mt19937& rng) {
  const int64_t E = static_cast<int64_t>(H * hd);
  headscope::MhaConfig c;
  c.embed_dim = E;
  c.num_heads = static_cast<int64_t>(H);
  c.batch_first = true;
  std::unique_ptr<headscope::MultiheadAttention> mha;
  if (!headscope::MultiheadAttention::Create(c, &mha).ok()) std::abort();
  const std::vector<float> w_in = Random(static_cast<size_t>(3 * E * E), rng);
  const std::vector<float> w_out = Random(static_cast<size_t>(E * E), rng);
  const std::vector<float> b_in(static_cast<size_t>(3 * E)), b_out(static_cast<size_t>(E));
  if (!mha->SetParameter("in_proj_weight", {w_in.data(), {3 * E, E}, w_in.size()}).ok() ||
      !mha->SetParameter("in_proj_bias", {b_in.data(), {3 * E}, b_in.size()}).ok() ||
      !mha->SetParameter("out_proj.weight", {w_out.data(), {E, E}, w_out.size()}).ok() ||
      !mha->SetParameter("out_proj.bias", {b_out.data(), {E}, b_out.size()}).ok()) {
    std::abort();
  }
  const std::vector<float> x = Random(L * static_cast<size_t>(E), rng);
  const headscope::TensorView in{x.data(), {1, static_cast<int64_t>(L), E}, x.size()};
  headscope::ForwardOptions o;
  o.is_causal = true;
  o.need_weights = false;
  o.window = static_cast<int64_t>(window);
  headscope::ForwardResult result;
  return MedianSeconds(reps, [&] {
    if (!mha->Forward(in, in, in, o, &result).ok()) std::abort();
  });
}

}  // namespace

int main(int argc, char** argv) {
  const size_t L = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 4096;
  const size_t w = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 128;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 7;
  const size_t H = 4, hd = 64;  // E = 256
  std::mt19937 rng(1);
  std::printf("CPU: %s; kernels: %s; one thread; median thread CPU time of %d runs\n",
              CpuModel().c_str(),
              headscope::KernelTargetName(), reps);
  std::printf("causal self-attention, 1 x %zu tokens, %zu heads of %zu (E = %zu)\n", L, H, hd,
              H * hd);
  const double stage_full = StageSeconds(L, H, hd, 0, reps, rng);
  const double stage_win = StageSeconds(L, H, hd, w, reps, rng);
  std::printf("attention stage: full causal %.2f ms, window %zu %.2f ms: ratio %.1fx\n",
              stage_full * 1e3, w, stage_win * 1e3, stage_full / stage_win);
  const double fwd_full = ForwardSeconds(L, H, hd, 0, reps, rng);
  const double fwd_win = ForwardSeconds(L, H, hd, w, reps, rng);
  std::printf("MultiheadAttention forward: full causal %.2f ms, window %zu %.2f ms: ratio %.1fx\n",
              fwd_full * 1e3, w, fwd_win * 1e3, fwd_full / fwd_win);
  std::printf("stage, window %zu, by L (us per query row):", w);
  for (size_t l : {1024, 2048, 4096, 8192}) {
    std::printf(" L=%zu %.2f", l, StageSeconds(l, H, hd, w, reps, rng) * 1e6 / l);
  }
  std::printf("\nstage, L = %zu, by window (ms):", L);
  for (size_t win : {32, 64, 128, 256, 512, 1024}) {
    std::printf(" w=%zu %.2f", win, StageSeconds(L, H, hd, win, reps, rng) * 1e3);
  }
  std::printf("\n");
  return 0;
}
