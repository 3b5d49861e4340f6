// Transformer::Forward with the thread pool (built against headscope_threaded): 2 and 3 threads
// give the logits and hooks of 1 thread bit for bit, on a model large enough that its Linears
// and attention layers take the threaded paths (every MatMul is far above kParallelMinMacs).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "headscope/parallel.h"
#include "headscope/transformer.h"

namespace headscope {
namespace {

#if !defined(HEADSCOPE_THREADS)
#error "transformer_threads_test.cc must be built against headscope_threaded (HEADSCOPE_THREADS)"
#endif

class TransformerThreads : public ::testing::Test {
 protected:
  void TearDown() override { SetThreadCount(1); }
};

// A model large enough that its Linears and attention take the threaded paths.
std::unique_ptr<Transformer> LargeModel(int64_t max_len, uint64_t seed) {
  TransformerConfig c;
  c.vocab_size = 96;
  c.max_len = max_len;
  c.d_model = 128;
  c.n_layers = 2;
  c.n_heads = 4;
  c.d_mlp = 512;
  std::unique_ptr<Transformer> m;
  EXPECT_TRUE(Transformer::Create(c, &m).ok());
  EXPECT_TRUE(m->InitializeFromSeed(seed).ok());
  return m;
}

TEST_F(TransformerThreads, LogitsAndHooksAreBitIdenticalForAnyThreadCount) {
  std::unique_ptr<Transformer> m = LargeModel(64, 42);
  const int64_t B = 8, T = 64;
  std::vector<int32_t> tokens(static_cast<size_t>(B * T));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % 96);
  const TokenView tv{tokens.data(), B, T};
  TransformerOptions hooked;
  hooked.hooks = {"blocks.0.attn.hook_pattern", "blocks.1.hook_mlp_out", "blocks.1.attn.hook_z"};

  SetThreadCount(1);
  TransformerResult want, want_hooked;
  ASSERT_TRUE(m->Forward(tv, TransformerOptions(), &want).ok());
  ASSERT_TRUE(m->Forward(tv, hooked, &want_hooked).ok());
  EXPECT_EQ(0, std::memcmp(want.logits.data(), want_hooked.logits.data(),
                           want.logits.size() * sizeof(float)));
  for (int threads : {2, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    SetThreadCount(threads);
    ASSERT_EQ(ThreadCount(), threads);
    TransformerResult got, got_hooked;
    ASSERT_TRUE(m->Forward(tv, TransformerOptions(), &got).ok());
    ASSERT_TRUE(m->Forward(tv, hooked, &got_hooked).ok());
    ASSERT_EQ(got.logits.size(), want.logits.size());
    EXPECT_EQ(0, std::memcmp(got.logits.data(), want.logits.data(),
                             want.logits.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(got_hooked.logits.data(), want.logits.data(),
                             want.logits.size() * sizeof(float)));
    ASSERT_EQ(got_hooked.hooks.size(), want_hooked.hooks.size());
    for (size_t h = 0; h < want_hooked.hooks.size(); ++h) {
      const TraceTensor& a = got_hooked.hooks[h].second;
      const TraceTensor& b = want_hooked.hooks[h].second;
      ASSERT_EQ(a.data.size(), b.data.size()) << want_hooked.hooks[h].first;
      EXPECT_EQ(0, std::memcmp(a.data.data(), b.data.data(), b.data.size() * sizeof(float)))
          << want_hooked.hooks[h].first;
    }
  }
}

// Generation through the KV cache: the prompt's pass and each step's one-row pass take the
// threaded matmuls and attention at this size, and give 1 thread's tokens and logits.
TEST_F(TransformerThreads, GenerationIsBitIdenticalForAnyThreadCount) {
  std::unique_ptr<Transformer> m = LargeModel(96, 4);
  const int64_t B = 4, T = 40;
  std::vector<int32_t> prompt(static_cast<size_t>(B * T));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 29 + 5) % 96);
  GenerateOptions o;
  o.max_new_tokens = 56;
  o.temperature = 0.7;
  o.top_k = 20;
  o.seed = 3;
  o.keep_logits = true;
  SetThreadCount(1);
  GenerateResult want;
  ASSERT_TRUE(m->Generate({prompt.data(), B, T}, o, &want).ok());
  for (int threads : {2, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    SetThreadCount(threads);
    GenerateResult got;
    ASSERT_TRUE(m->Generate({prompt.data(), B, T}, o, &got).ok());
    EXPECT_EQ(got.tokens, want.tokens);
    ASSERT_EQ(got.logits.size(), want.logits.size());
    EXPECT_EQ(0, std::memcmp(got.logits.data(), want.logits.data(),
                             want.logits.size() * sizeof(float)));
  }
}

// Training: the backward's products take the threaded matmuls at this size; gradients, gate
// gradients and the weights after three AdamW steps are 1 thread's bits.
TEST_F(TransformerThreads, TrainingIsBitIdenticalForAnyThreadCount) {
  const int64_t B = 4, T = 48;
  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 37 + 11) % 96);
    targets[i] = i % 7 == 3 ? -100 : static_cast<int32_t>((i * 13 + 2) % 96);
  }
  const TokenView tv{tokens.data(), B, T};
  // Three steps, then a backward with gate gradients: every buffer and gradient compared.
  const auto run = [&](int threads, std::vector<float>* out) {
    SetThreadCount(threads);
    std::unique_ptr<Transformer> m = LargeModel(64, 7);
    OptimizerConfig oc;
    oc.lr = 3e-3;
    oc.clip_grad_norm = 0.5;
    ASSERT_TRUE(m->SetOptimizer(oc).ok());
    for (int s = 0; s < 3; ++s) {
      TrainStepResult r;
      ASSERT_TRUE(m->TrainStep(tv, targets.data(), &r).ok());
      ASSERT_TRUE(r.stepped);
      out->push_back(static_cast<float>(r.loss));
      out->push_back(static_cast<float>(r.grad_norm));
    }
    BackwardOptions bo;
    bo.head_gate_grads = true;
    BackwardResult br;
    ASSERT_TRUE(m->Backward(tv, targets.data(), bo, &br).ok());
    for (double g : br.head_gate_grads) out->push_back(static_cast<float>(g));
    for (const TransformerParamSpec& p : TransformerParams(m->config())) {
      TensorView w, g;
      ASSERT_TRUE(m->GetParameter(p.name, &w).ok());
      ASSERT_TRUE(m->Gradient(p.name, &g).ok());
      out->insert(out->end(), w.data, w.data + w.size);
      out->insert(out->end(), g.data, g.data + g.size);
    }
  };
  std::vector<float> want;
  run(1, &want);
  for (int threads : {2, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    std::vector<float> got;
    run(threads, &got);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
  }
}

// InitializeFromSeed itself does not depend on the thread count (it is serial; this pins it).
TEST_F(TransformerThreads, SeededWeightsDoNotDependOnTheThreadCount) {
  TransformerConfig c;
  c.vocab_size = 64;
  c.max_len = 32;
  c.d_model = 64;
  c.n_heads = 4;
  c.d_mlp = 128;
  std::unique_ptr<Transformer> a, b;
  ASSERT_TRUE(Transformer::Create(c, &a).ok());
  ASSERT_TRUE(Transformer::Create(c, &b).ok());
  SetThreadCount(1);
  ASSERT_TRUE(a->InitializeFromSeed(9).ok());
  SetThreadCount(3);
  ASSERT_TRUE(b->InitializeFromSeed(9).ok());
  for (const TransformerParamSpec& p : TransformerParams(c)) {
    TensorView va, vb;
    ASSERT_TRUE(a->GetParameter(p.name, &va).ok());
    ASSERT_TRUE(b->GetParameter(p.name, &vb).ok());
    EXPECT_EQ(0, std::memcmp(va.data, vb.data, va.size * sizeof(float))) << p.name;
  }
}

}  // namespace
}  // namespace headscope
