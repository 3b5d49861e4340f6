// Transformer::Forward allocates nothing once warm: a second call of the same shape (with no
// hooks, or with every hook) makes no operator new call and, natively with glibc, no
// aligned_alloc call either (AlignedBuffer's allocator: the activation, logits and hook
// buffers). A refused call holds nothing more than before it. A program of its own because it
// replaces the global allocation functions.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <functional>
#include <utility>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "headscope/mha.h"
#include "headscope/plan.h"
#include "headscope/transformer.h"

// Counts every operator new (and natively aligned_alloc) in this test binary. The replacements
// pair malloc with free; GCC 12 inlines the delete below into std::vector's destructor, still
// sees the standard operator new there, and warns about a mismatch that is not (mha_test.cc).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
static std::atomic<size_t> g_news{0};
static std::atomic<size_t> g_aligned{0};
void* operator new(size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  g_news.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

// glibc resolves aligned_alloc to the program's own definition; posix_memalign (a separate entry
// point of the same allocator) does the work, and free releases it. Emscripten's libc defines
// aligned_alloc in the same object as malloc, so there only operator new is counted.
#if defined(__GLIBC__) && !defined(__EMSCRIPTEN__)
#define HEADSCOPE_COUNTS_ALIGNED_ALLOC 1
extern "C" void* aligned_alloc(size_t alignment, size_t size) noexcept {
  g_aligned.fetch_add(1, std::memory_order_relaxed);
  void* p = nullptr;
  return posix_memalign(&p, alignment, size) == 0 ? p : nullptr;
}
#endif

namespace headscope {
namespace {

struct Counts {
  size_t news = g_news.load(), aligned = g_aligned.load();
};

TEST(TransformerAlloc, TheCountersSeeAllocations) {
  const Counts before;
  AlignedBuffer b;
  ASSERT_TRUE(b.Resize(1000));
  std::unique_ptr<int> p(new int(1));
  EXPECT_GT(g_news.load(), before.news);
#if defined(HEADSCOPE_COUNTS_ALIGNED_ALLOC)
  EXPECT_GT(g_aligned.load(), before.aligned);
#endif
}

TEST(TransformerAlloc, NoAllocationPerForwardOnceWarm) {
  TransformerConfig c;
  c.vocab_size = 40;
  c.max_len = 16;
  c.d_model = 32;
  c.n_layers = 3;
  c.n_heads = 4;
  c.d_mlp = 64;
  for (NormPlacement norm : {NormPlacement::kPre, NormPlacement::kPost}) {
    c.norm = norm;
    std::unique_ptr<Transformer> m;
    ASSERT_TRUE(Transformer::Create(c, &m).ok());
    ASSERT_TRUE(m->InitializeFromSeed(1).ok());
    std::vector<int32_t> tokens(3 * 16);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 5 % 40);
    const TokenView tv{tokens.data(), 3, 16};
    std::vector<float> gates(static_cast<size_t>(c.n_layers * c.n_heads), 0.5f);
    TransformerOptions plain, hooked;
    hooked.hooks = TransformerHookNames(c);
    hooked.head_gates = {gates.data(), {c.n_layers, c.n_heads}, gates.size()};
    for (const TransformerOptions* o : {&plain, &hooked}) {
      SCOPED_TRACE(o->hooks.empty() ? "no hooks" : "every hook, gated");
      TransformerResult r;
      ASSERT_TRUE(m->Forward(tv, *o, &r).ok());  // the first call sizes the buffers
      const float* logits = r.logits.data();
      const Counts before;
      for (int i = 0; i < 5; ++i) ASSERT_TRUE(m->Forward(tv, *o, &r).ok());
      EXPECT_EQ(g_news.load(), before.news) << "operator new during warm Forward calls";
      EXPECT_EQ(g_aligned.load(), before.aligned) << "aligned_alloc during warm Forward calls";
      EXPECT_EQ(r.logits.data(), logits);
      EXPECT_EQ(r.hooks.size(), o->hooks.size());
    }
  }
}

// Generation keeps its KV caches, last rows, logits and sampling scratch across calls: a warm
// generate of the same (B, T, maxNewTokens) allocates nothing, greedy or sampled, causal or not.
TEST(TransformerAlloc, NoAllocationPerGenerateOnceWarm) {
  TransformerConfig c;
  c.vocab_size = 40;
  c.max_len = 24;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.d_mlp = 64;
  for (bool causal : {true, false}) {
    c.causal = causal;
    std::unique_ptr<Transformer> m;
    ASSERT_TRUE(Transformer::Create(c, &m).ok());
    ASSERT_TRUE(m->InitializeFromSeed(1).ok());
    std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
    GenerateOptions greedy, sampled;
    greedy.max_new_tokens = sampled.max_new_tokens = 16;
    greedy.keep_logits = true;
    sampled.temperature = 0.9;
    sampled.top_k = 10;
    sampled.top_p = 0.9;
    for (const GenerateOptions* o : {&greedy, &sampled}) {
      SCOPED_TRACE(std::string(causal ? "causal, " : "bidirectional, ") +
                   (o == &greedy ? "greedy" : "sampled"));
      GenerateResult g;
      ASSERT_TRUE(m->Generate({prompt.data(), 2, 4}, *o, &g).ok());  // sizes the buffers
      const Counts before;
      for (int i = 0; i < 3; ++i) ASSERT_TRUE(m->Generate({prompt.data(), 2, 4}, *o, &g).ok());
      EXPECT_EQ(g_news.load(), before.news) << "operator new during warm Generate calls";
      EXPECT_EQ(g_aligned.load(), before.aligned) << "aligned_alloc during warm Generate calls";
    }
  }
}

// Bytes malloc holds (glibc: in use in the heap plus mmapped chunks; Emscripten's dlmalloc: in
// use), or 0 where the allocator does not say (under AddressSanitizer).
size_t HeldBytes() {
#if defined(__EMSCRIPTEN__)
  return static_cast<size_t>(mallinfo().uordblks);
#elif defined(__GLIBC__)
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
#else
  return 0;
#endif
}

// Restores the process's call limit when it goes.
struct LimitScope {
  size_t saved = MaxCallBytes();
  ~LimitScope() { SetMaxCallBytes(saved); }
};

// A refused call frees what it grew before the step that failed: under every byte limit from
// 4 KiB up to the one the call fits (so the refusal comes at every stage: the result, the
// activations, the hooks, the attention's buffers, the saved stages, the KV caches, the
// prompt's pass), the bytes held after the refusal are at most those held before it, a warm
// call of a small shape having run first. (A forward of (2^20, 16) tokens used to keep its
// 1.8 GB of logits.) Forward with and without hooks, Generate, Backward, TrainStep, and
// MultiheadAttention's Forward and Trace.
TEST(TransformerAlloc, ARefusedCallHoldsNothingMoreThanBefore) {
  {
    AlignedBuffer probe;
    const size_t before = HeldBytes();
    ASSERT_TRUE(probe.Resize(1 << 20));
    if (HeldBytes() <= before) GTEST_SKIP() << "this allocator does not report the bytes it holds";
  }
  LimitScope restore;
  constexpr size_t kSlack = 4096;  // a Status's message, and the like
  TransformerConfig c;
  c.vocab_size = 40;
  c.max_len = 64;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.d_mlp = 64;
  std::unique_ptr<Transformer> m;
  ASSERT_TRUE(Transformer::Create(c, &m).ok());
  ASSERT_TRUE(m->InitializeFromSeed(3).ok());
  ASSERT_TRUE(m->SetOptimizer(OptimizerConfig()).ok());
  const int64_t B = 16, T = 64;
  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(i * 7 % 40);
    targets[i] = static_cast<int32_t>(i * 3 % 40);
  }
  const TokenView big{tokens.data(), B, T}, small{tokens.data(), 1, 4};
  TransformerOptions hooked;
  hooked.hooks = TransformerHookNames(c);
  GenerateOptions gen;
  gen.max_new_tokens = 60;
  gen.keep_logits = true;
  GenerateResult generated;
  TransformerResult result;
  BackwardResult back;
  TrainStepResult step;
  const std::pair<const char*, std::function<Status()>> calls[] = {
      {"Forward", [&] { return m->Forward(big, {}, &result); }},
      {"Forward with every hook", [&] { return m->Forward(big, hooked, &result); }},
      {"Generate", [&] { return m->Generate({tokens.data(), B, 4}, gen, &generated); }},
      {"Backward", [&] { return m->Backward(big, targets.data(), {}, &back); }},
      {"TrainStep", [&] { return m->TrainStep(big, targets.data(), &step); }},
  };
  for (const auto& [name, call] : calls) {
    int refused = 0;
    bool fits = false;
    for (size_t limit = 4096; !fits && limit < (size_t{1} << 31); limit *= 2) {
      SetMaxCallBytes(restore.saved);
      ASSERT_TRUE(m->Forward(small, hooked, &result).ok());  // warm buffers of another shape
      const size_t before = HeldBytes();
      SetMaxCallBytes(limit);
      const Status s = call();
      fits = s.ok();
      if (fits) break;
      ++refused;
      EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << name << ": " << s.ToString();
      EXPECT_LE(HeldBytes(), before + kSlack)
          << name << " refused under a limit of " << limit << " bytes: " << s.ToString();
    }
    EXPECT_TRUE(fits) << name;
    EXPECT_GE(refused, 6) << name;
  }
  MhaConfig mc;
  mc.embed_dim = 32;
  mc.num_heads = 4;
  std::unique_ptr<MultiheadAttention> mha;
  ASSERT_TRUE(MultiheadAttention::Create(mc, &mha).ok());
  for (const ParamSpec& p : ExpectedParams(mc)) {
    std::vector<float> w(static_cast<size_t>(p.shape.NumElements()), 0.01f);
    ASSERT_TRUE(mha->SetParameter(p.name, {w.data(), p.shape, w.size()}).ok());
  }
  std::vector<float> x(64 * 8 * 32, 0.5f);
  const TensorView q{x.data(), {64, 8, 32}, x.size()};
  for (bool trace : {false, true}) {
    int refused = 0;
    bool fits = false;
    for (size_t limit = 4096; !fits && limit < (size_t{1} << 31); limit *= 2) {
      SetMaxCallBytes(restore.saved);
      ForwardResult fr;
      AttentionTrace tr;
      const TensorView one{x.data(), {2, 1, 32}, 64};
      ASSERT_TRUE(mha->Forward(one, one, one, {}, &fr).ok());
      const size_t before = HeldBytes();
      SetMaxCallBytes(limit);
      const Status s = trace ? mha->Trace(q, q, q, {}, &tr) : mha->Forward(q, q, q, {}, &fr);
      fits = s.ok();
      if (fits) break;
      ++refused;
      EXPECT_LE(HeldBytes(), before + kSlack)
          << (trace ? "Trace" : "Forward") << " refused under " << limit << ": " << s.ToString();
    }
    EXPECT_TRUE(fits);
    EXPECT_GE(refused, 4);
  }
}

}  // namespace
}  // namespace headscope
