// Transformer::Forward allocates nothing once warm: a second call of the same shape (with no
// hooks, or with every hook) makes no operator new call and, natively with glibc, no
// aligned_alloc call either (AlignedBuffer's allocator: the activation, logits and hook
// buffers). A program of its own because it replaces the global allocation functions.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace headscope
