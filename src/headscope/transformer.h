// Transformer: a small stack of torch.nn.MultiheadAttention blocks with token and position
// embeddings, LayerNorm (pre, post or none), an optional MLP and an unembedding, computing the
// numbers of the reference module tools/tiny_transformer.py (the project's contract): same
// state_dict keys and shapes, same hooks, same logits.
//
//   headscope::TransformerConfig config;   // vocab_size, max_len, d_model, n_layers, n_heads, ...
//   std::unique_ptr<headscope::Transformer> model;
//   HEADSCOPE_RETURN_IF_ERROR(headscope::Transformer::Create(config, &model));
//   for (each state_dict entry) HEADSCOPE_RETURN_IF_ERROR(model->SetParameter(name, view));
//   headscope::TransformerResult result;
//   HEADSCOPE_RETURN_IF_ERROR(model->Forward({tokens, B, T}, options, &result));
//   // result.logits [B, T, vocab_size]; result.hooks: the hooks options.hooks asked for
//
// Each block's attention is a MultiheadAttention (batch_first, causal through is_causal, no
// weights returned), run in the model's one CallContext, so the layers share one set of
// activation buffers; a hooked layer runs its Trace instead (the same kernels, the same bits).
// Every weight, the attention layers' included, is an entry of the model's one ParameterStore;
// the gradients are a parallel buffer of the same layout.
#ifndef HEADSCOPE_TRANSFORMER_H_
#define HEADSCOPE_TRANSFORMER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "headscope/activations.h"
#include "headscope/mha.h"
#include "headscope/optim.h"
#include "headscope/parameters.h"
#include "headscope/status.h"
#include "headscope/tensor.h"

namespace headscope {

enum class NormPlacement { kPre, kPost, kNone };
// kAlibi: no position embedding (as "none"); each layer's attention adds ALiBi's bias instead
// (Press et al.; BLOOM, MPT): -(slope_h |i - j|) on head h's score (i, j), kernels/attention.h.
// kRope: rotary position embeddings, no position added to the stream (like LLaMA): each layer's
// attention rotates q and k by position (MhaConfig::rope_dims; the rope_* fields below).
enum class PositionKind { kLearned, kSinusoidal, kNone, kAlibi, kRope };
enum class Activation { kGelu, kRelu };

struct TransformerConfig {
  int64_t vocab_size = 0;
  int64_t max_len = 0;
  int64_t d_model = 0;
  int64_t n_layers = 1;
  int64_t n_heads = 1;
  // G key/value heads (grouped-query attention; 1: multi-query), dividing n_heads: each layer's
  // attention is a MultiheadAttention with num_kv_heads = G, its in_proj_weight
  // [(n_heads + 2 G) d_head, d_model]. 0 means n_heads (null): the reference module's
  // nn.MultiheadAttention, unchanged.
  int64_t n_kv_heads = 0;
  // Sliding-window attention: 0 = full attention; w >= 1: with causal, token t attends to the
  // tokens t - w < s <= t (Mistral, Longformer's causal window); without, |t - s| < w. Every
  // layer's MultiheadAttention gets it as ForwardOptions::window.
  int64_t attn_window = 0;
  // Attention sinks (gpt-oss): every layer has blocks.{l}.attn.sinks [n_heads], a learned logit
  // per head in each softmax row's denominator (MhaConfig::attn_sinks), initialised to 0.
  bool attn_sinks = false;
  int64_t d_mlp = 0;  // 0: attention-only (no MLP, no ln2)
  NormPlacement norm = NormPlacement::kPre;
  PositionKind positions = PositionKind::kLearned;
  bool causal = true;
  Activation act = Activation::kGelu;  // GELU: the exact erf form
  bool bias = true;                    // Linear and attention biases (LayerNorm keeps its own)
  double ln_eps = 1e-5;
  // unembed.weight is tok_embed.weight: one tensor, as the reference module's
  // `self.unembed.weight = self.tok_embed.weight` (GPT-2's tied embeddings). See "Tied embeddings"
  // at Transformer.
  bool tie_embeddings = false;
  // positions kRope only (the schema refuses another value with other positions): how a head's
  // rotary dims pair up, the base of the angles, and the fraction of each head that rotates
  // (RopeDims; GPT-NeoX's rotary_pct). See MhaConfig::rope_dims.
  RopeLayout rope_layout = RopeLayout::kHalf;
  double rope_base = 10000.0;
  double rope_fraction = 1.0;
};

// Whether positions add an embedding to the residual stream (learned, sinusoidal), with its hook
// hook_pos_embed; "none", "alibi" and "rope" add none.
inline bool HasPositionEmbedding(const TransformerConfig& c) {
  return c.positions == PositionKind::kLearned || c.positions == PositionKind::kSinusoidal;
}

// Positive sizes within kMaxDim, d_model divisible by n_heads, n_heads by n_kv_heads, ln_eps
// finite and > 0; the rope_* fields at their defaults unless positions is rope, and then at
// least 2 rotary dims (RopeDims).
Status ValidateTransformerConfig(const TransformerConfig& config);

// The rotary dims of each head: with positions rope, the largest even number <= rope_fraction *
// d_head, computed in double as 2 * floor(rope_fraction * d_head / 2) (0.5 of 8 dims: 4; 0.3 of
// 10: 2); 0 for any other positions.
inline int64_t RopeDims(const TransformerConfig& c) {
  if (c.positions != PositionKind::kRope || c.n_heads <= 0) return 0;
  const double half = c.rope_fraction * static_cast<double>(c.d_model / c.n_heads) / 2.0;
  return half >= 1.0 && half < 1e18 ? 2 * static_cast<int64_t>(half) : 0;
}

// The width of a layer's keys and values: n_kv_heads * d_head (d_model unless grouped-query), the
// K and V row blocks of in_proj_weight and a KV cache row.
inline int64_t KvDim(const TransformerConfig& c) {
  const int64_t H = c.n_heads > 0 ? c.n_heads : 1;
  return (c.n_kv_heads > 0 ? c.n_kv_heads : H) * (c.d_model / H);
}

// Bytes the KV caches of a generation hold for `config` (checked: ValidateTransformerConfig), for
// `batch` sequences of `positions` positions each (a prompt of T and max_new_tokens n: T + n):
// per layer keys and values of batch x positions x KvDim floats, so grouped-query attention's
// are n_heads / n_kv_heads times smaller and multi-query's (n_kv_heads 1) n_heads times. 0 for a
// non-causal model (nothing is cached). Equal to Transformer::kv_cache_bytes() after such a
// GenerateBegin; counted in 64 bits (a size the build cannot allocate is still a number).
// batch and positions: integers in [1, kMaxDim].
Status KvCacheBytesFor(const TransformerConfig& config, int64_t batch, int64_t positions,
                       uint64_t* bytes);

struct TransformerParamSpec {
  std::string name;
  Shape shape;
  // Non-empty: this key names the same tensor as that earlier key (tie_embeddings:
  // "unembed.weight" -> "tok_embed.weight"). torch's state_dict() lists such a tensor under both
  // keys, its named_parameters() once, under the first.
  std::string tied_to;
};
// The reference module's state_dict keys and shapes for `config`, in its order (a tied tensor
// under both its keys: the entries with an empty tied_to are its named_parameters()).
std::vector<TransformerParamSpec> TransformerParams(const TransformerConfig& config);

// The hook names the reference module produces for `config` (TransformerLens names), in the
// order they are computed.
std::vector<std::string> TransformerHookNames(const TransformerConfig& config);

// Tokens (B, T), row-major: integers in [0, vocab_size), 1 <= T <= max_len.
struct TokenView {
  const int32_t* data = nullptr;
  int64_t batch = 0;
  int64_t length = 0;
};

// Activation patching (TransformerLens's hook functions that return a value): Forward replaces
// part of one hook's activation with the caller's numbers, and everything after it in the pass
// (the rest of the layer, the later layers, the logits, the hooks kept after that point) is
// computed from the patched activation. The patchable hooks are the residual stream's and the
// heads' outputs:
//   blocks.{l}.hook_resid_pre, hook_attn_out, hook_resid_mid (d_mlp > 0), hook_mlp_out
//   (d_mlp > 0), hook_resid_post  [B, T, D]: `position` selects one position (-1: all); `head`
//   must be -1;
//   blocks.{l}.attn.hook_z  [B, H, T, d_head]: `head` selects one head, `position` one position
//   (-1: all). The patched z replaces the (gated) z that out_proj reads; the layer's output
//   changes by out_proj.weight's columns of that head times the change of z, summed in double
//   (the unpatched part of the product is the layer's own bits).
// `values` has the whole hook's shape (the hook of another run, typically: a clean prompt's
// activation patched into a corrupted run); only the selected slice is read. Patches apply in
// their order; a hook asked for in `hooks` shows its patched values.
struct ActivationPatch {
  std::string hook;
  int64_t head = -1;
  int64_t position = -1;
  TensorView values;
};

struct TransformerOptions {
  // Hooks to return, by name (TransformerHookNames); unknown names are refused. None: no hook is
  // kept and no layer runs its trace.
  std::vector<std::string> hooks;
  // [n_layers * n_heads] or empty: head h of layer l's output times head_gates[l * n_heads + h]
  // before its out_proj (MultiheadAttention's head_gates).
  TensorView head_gates;
  // Activation patches (ActivationPatch), checked before any work: a hook that is not patchable
  // for this config, a head or position out of range, or values of another shape are refused
  // naming patches[i].
  std::vector<ActivationPatch> patches;
};

struct TransformerResult {
  AlignedBuffer logits;  // [B, T, vocab_size]
  Shape logits_shape;
  // The asked-for hooks, in options.hooks' order; each with the batch axis.
  std::vector<std::pair<std::string, TraceTensor>> hooks;
};

// Generation (Transformer::Generate). Each step appends one token to each of the B sequences:
//   temperature 0 (greedy): the argmax of the last position's logits, the lowest index on ties
//     (a NaN counts as the largest, as torch.argmax takes it);
//   temperature > 0: the logits divided by it, in double; the top_k largest kept (0: all; ties:
//     lower index first); softmax over them; then the smallest prefix of them, largest first,
//     whose probability reaches top_p (1: all); one token drawn from what is left with
//     u = (word(s * B + b) >> 11) / 2^53, the (s * B + b)-th output of the generator of "Initial
//     weights from a seed" for key mix64(seed ^ fnv1a64("generate")) (step s, sequence b). A row
//     with a NaN or infinite logit has no distribution: it takes the greedy choice.
//   The temperature rule: a temperature > 0 so small that the row's logits divided by it leave
//     double's range (max / T, min / T or (max - min) / T infinite: T = 1e-320 or 5e-324 for any
//     logits, the smallest normal double 2.2e-308 for logits beyond about 4) takes the greedy
//     choice too, the limit of the distribution as the temperature goes to 0 (ties: the lowest
//     index, where the limit would share among them). Larger temperatures sample as above; as
//     they shrink, the other logits' weights underflow to 0 well before the rule takes over, so
//     the draws reach the greedy choice continuously.
// The same seed gives the same tokens on every platform up to libm's exp (glibc natively,
// musl in WebAssembly; a last-bit difference moves a draw only at a boundary).
struct GenerateOptions {
  int64_t max_new_tokens = 1;  // 0 .. max_len - T
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;  // (0, 1]
  uint64_t seed = 0;
  TensorView head_gates;     // [n_layers, n_heads] or empty, as TransformerOptions'
  bool keep_logits = false;  // also return each step's logits
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // [B, T + max_new_tokens]: the prompt, then the new tokens
  Shape tokens_shape;
  AlignedBuffer logits;  // [B, max_new_tokens, V]: the logits each new token was chosen from
  Shape logits_shape;    // rank 0 unless keep_logits
};

// Training (transformer_train.cc): Backward and TrainStep.
struct BackwardOptions {
  TensorView head_gates;         // [n_layers, n_heads] or empty, as TransformerOptions'
  bool head_gate_grads = false;  // also d loss / d gate[l][h] (at gates 1 when none are given)
};

struct BackwardResult {
  double loss = 0;  // Loss() of the pass's logits: the bits Forward + Loss give
  // d loss / d gate, [n_layers * n_heads], when asked for: Michel et al. 2019's head importance
  // is its absolute value (summed over batches).
  std::vector<double> head_gate_grads;
};

struct TrainStepResult {
  double loss = 0;       // the batch's loss before the update
  double grad_norm = 0;  // the global L2 norm of the gradients, before clipping
  bool clipped = false;  // clipping scaled the gradients
  // False when the optimizer refused the step because it would have made a weight or a moment
  // non-finite (a NaN or infinite loss or gradient, an overflowing step): the weights, the
  // moments and the step count are unchanged, and `refused` says why (the optimizer's message,
  // optim.h "Non-finite steps").
  bool stepped = false;
  std::string refused;
};

// Initial weights from a seed (Transformer::InitializeFromSeed). Part of the public contract: the
// same seed gives bit-identical weights on every platform (natively and in WebAssembly, any
// thread count), and each value is a pure function of (seed, state_dict key, element index), so
// an entry does not depend on which other entries the config has (blocks.0's weights are the
// same with 1 or 4 layers; the first rows of tok_embed.weight the same for any vocab_size of the
// same d_model). It is not PyTorch's random stream (torch.manual_seed gives other numbers); its
// distributions are those of PyTorch's default initialisation of the reference module's parts:
//
//   tok_embed.weight, pos_embed.weight      N(0, 1)                        nn.Embedding
//   blocks.l.attn.in_proj_weight [3D, D]    U(-a, a), a = sqrt(6 / (4 D))  xavier_uniform_:
//                                                      fan_in D + fan_out 3D, as torch counts them
//     (grouped-query, [D + 2 Dkv, D], Dkv = n_kv_heads d_head: a = sqrt(6 / (2 D + 2 Dkv)))
//   blocks.l.attn.in_proj_bias, out_proj.bias   0                           MultiheadAttention
//   blocks.l.attn.out_proj.weight [D, D]    U(-a, a), a = 1 / sqrt(D)      nn.Linear (its
//                                                      NonDynamicallyQuantizableLinear)
//   nn.Linear weight [out, in] and bias     U(-a, a), a = 1 / sqrt(in)     kaiming_uniform_(a=
//     (mlp.fc_in: in = D; mlp.fc_out: in = d_mlp; unembed: in = D)         sqrt(5)) has that bound
//   ln1 / ln2 / ln_final weight, bias       1, 0                           nn.LayerNorm
//
// The generator, with all arithmetic on uint64 modulo 2^64 and in IEEE double:
//   mix64(z):  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//              return z ^ (z >> 31)                              (splitmix64's output function)
//   fnv1a64(name): FNV-1a over the key's bytes: h = 0xCBF29CE484222325; per byte
//              h = (h ^ byte) * 0x100000001B3
//   key      = mix64(seed ^ fnv1a64(name))                       one stream per entry
//   word(c)  = mix64(key + (c + 1) * 0x9E3779B97F4A7C15)         splitmix64's c-th output (c >= 0)
//   U(-a, a), element i:  b = word(i) >> 40 (24 bits); t = (2 b + 1 - 2^24) / 2^24, in (-1, 1)
//              and exact in double (the 2^24 values are symmetric about 0);
//              value = float(a * t), with a = 1.0 / sqrt(in) or sqrt(6.0 / (2.0 * D + 2.0 * Dkv))
//              in double (Dkv = D: sqrt(6.0 / (4.0 * D)), the same double)
//   N(0, 1), element i, of the pair p = floor(i / 2) (Box-Muller, in double):
//              u1 = (2 (word(2p) >> 12) + 1) / 2^53, in (0, 1); u2 = (word(2p + 1) >> 11) / 2^53,
//              in [0, 1); r = sqrt(-2 log(u1)); theta = 6.283185307179586 * u2;
//              value = float(r * cos(theta)) for even i, float(r * sin(theta)) for odd i
//   tie_embeddings: unembed.weight has no values of its own; the tensor is tok_embed.weight's,
//   N(0, 1), as the reference module's tying after construction leaves it.
//   float(x): IEEE round to nearest even. Every step is an exactly rounded IEEE operation (no
//   step adds a product, so FMA contraction cannot change it) except log, cos and sin, which
//   come from the C library: glibc and Emscripten's musl agree on them to within an ulp of the
//   double, and a one-ulp difference changes the float only when the double lies within an ulp
//   of a float rounding boundary (odds about 2^-29 per value). The tests pin values and a hash
//   of whole models natively and in WebAssembly so that such a difference would show.
//
// Tied embeddings (TransformerConfig::tie_embeddings), as torch ties modules: unembed.weight is an
// alias of tok_embed.weight in the store (the whole tensor, as q/k/v_proj_weight are parts of
// in_proj_weight), so the logits are x tok_embed.weight^T (+ unembed.bias). TransformerParams
// (the state_dict) lists both keys, as torch's state_dict does; setting either sets the one
// tensor, and GetParameter of either reads it. It is one parameter: the optimizer steps it once
// (weight decay once), in tok_embed.weight's place of named_parameters(), and its gradient is
// the sum of the unembedding's and the embedding's (torch's autograd accumulates both uses into
// the one .grad). A state_dict whose two keys hold different values is refused: see
// SetParameter. Loading either key alone loads the tensor (where torch's strict load would also
// ask for the other key), as either spelling of in_proj_weight does.
class Transformer {
 public:
  static Status Create(const TransformerConfig& config, std::unique_ptr<Transformer>* out);
  ~Transformer();

  const TransformerConfig& config() const { return config_; }

  // One state_dict entry by the reference module's key ("blocks.0.attn.in_proj_weight", ...).
  // Tied keys (tie_embeddings): one state_dict holds the tensor under both, so setting one of
  // them with values that differ from the other's, when the other was set since the weights were
  // last used or initialised (Forward, Backward, TrainStep, GenerateBegin, InitializeFromSeed,
  // Create), is kInvalidArgument naming the key and the first element that differs (torch's
  // load_state_dict copies both into the one tensor, so the later key would silently win).
  // Setting one key alone, or both with the same values, is a load of the tensor.
  Status SetParameter(std::string_view name, const TensorView& value);
  // Copies every loaded entry of `other`, a model of the same config, into this one: not a
  // state_dict (no tied check); how the binding's staging model starts from the live weights.
  Status CopyLoadedFrom(const Transformer& other) { return store_.CopyLoadedFrom(other.store_); }
  // A view of one loaded entry by the same keys (an attention layer's q/k/v_proj_weight, the row
  // blocks of its in_proj_weight, too): kUnknownParameter for a key this config does not have,
  // kMissingParameter for one not loaded yet. The view reads the model's own storage: valid
  // until the model is destroyed, and it shows later SetParameter / InitializeFromSeed writes.
  // TransformerParams(config()) lists the keys in state_dict order, for exporting them.
  Status GetParameter(std::string_view name, TensorView* out) const;

  // Loads every entry with headscope's initial weights for `seed` (see "Initial weights from a
  // seed" below): the distributions of PyTorch's default initialisation of the reference module,
  // from headscope's own generator, the same bits on every platform. Replaces whatever was
  // loaded. Fails only when a temporary buffer cannot be allocated (kResourceExhausted); the
  // entries before the failing one are initialised then, the others keep their values.
  Status InitializeFromSeed(uint64_t seed);
  // kMissingParameter naming every entry not loaded yet.
  Status CheckComplete() const;

  Status Forward(const TokenView& tokens, const TransformerOptions& options,
                 TransformerResult* result);

  // Appends max_new_tokens tokens to each prompt sequence (B, T) (see GenerateOptions). A causal
  // model keeps a KV cache per layer (KvCache): the prompt runs once, then each step runs one new
  // position per sequence through every block against the cached keys and values, so a step
  // costs O(layers * (d_model^2 + context * d_model) + vocab_size * d_model): linear in the
  // context. Its logits are the bits the last row of Forward over the whole sequence so far gives
  // (every stage works row by row and a row's attention does not depend on the keys after it),
  // so greedy generation is the argmax of a full recomputation at every step, bit for bit. The
  // sequences of a batch all have the prompt's length, so they share the cache's positions. A
  // non-causal model has nothing to cache (every position sees the new token): each step runs
  // the whole sequence again. Generate is GenerateBegin, then GenerateContinue for every token.
  Status Generate(const TokenView& prompt, const GenerateOptions& options,
                  GenerateResult* result);

  // Generation in steps, for a caller that does other work between them (the npm package's
  // worker serves other requests between chunks of steps, and can cancel a generation), with the
  // bits of Generate however the steps are split:
  //   GenerateBegin checks the prompt and options as Generate does, allocates, runs the prompt
  //     through every block (filling the KV caches) and leaves `result` holding the prompt, at
  //     its final shape; no token is drawn yet. It ends any generation in progress. The
  //     options are kept, options.head_gates copied (the caller's view need not outlive the call).
  //   GenerateContinue draws up to max_steps more tokens per sequence into `result` (the one
  //     GenerateBegin filled), keeping the KV caches, the position and the sampler's stream;
  //     *done once all max_new_tokens are there, which ends the generation.
  //   GenerateCancel ends the generation in progress and frees its KV caches.
  // Other calls may run between the steps: Forward and Backward leave the generation alone (they
  // share only scratch with it). A change of the weights (SetParameter, InitializeFromSeed,
  // TrainStep) ends it: the next GenerateContinue returns kCancelled, since the caches hold keys
  // and values of the old weights. A refused GenerateBegin or GenerateContinue ends the
  // generation, frees its buffers and empties `result`.
  Status GenerateBegin(const TokenView& prompt, const GenerateOptions& options,
                       GenerateResult* result);
  Status GenerateContinue(int64_t max_steps, GenerateResult* result, bool* done);
  void GenerateCancel();
  // A generation begun and neither done nor ended.
  bool generating() const { return gen_.active; }
  // Tokens drawn per sequence so far by the generation in progress (or the last one).
  int64_t generated() const { return gen_.step; }
  // Bytes the KV caches of the generation in progress (or the last one) hold: per layer keys and
  // values of B x (T + max_new_tokens) positions x KvDim floats, KvDim = n_kv_heads * d_head, so
  // grouped-query attention's caches are n_heads / n_kv_heads times smaller. 0 for a non-causal
  // model (nothing is cached) and once GenerateCancel or a refused step freed them.
  size_t kv_cache_bytes() const;
  // Rows of the sinusoidal position table computed since the model was created (the table grows
  // geometrically and keeps its rows): for tests and benchmarks that hold generation to a cost
  // linear in its length.
  int64_t sinusoid_rows_computed() const { return sinusoid_rows_computed_; }

  // Frees the buffers every call regrows on demand: the activations, the attention's workspace,
  // hook and trace copies, the sinusoidal table, the training pass's saved stages and scratch
  // (and its gradients, unless the last Backward succeeded). Not the weights, their packed
  // copies, the optimizer's state, nor a generation in progress. Every refused Forward,
  // Backward and TrainStep calls it, so a call that fails part way (after growing buffers for
  // its shape) holds nothing more than before it.
  void ReleaseWorkspace();

  // Mean cross-entropy of logits [B, T, V] against targets [B, T] (PyTorch's
  // F.cross_entropy(ignore_index=-100)): over the positions whose target is not -100, in double.
  // Targets outside [0, V) other than -100, or none counted, are refused naming the targets.
  static Status Loss(const float* logits, int64_t positions, int64_t vocab, const int32_t* targets,
                     double* loss);

  // The model's read-out of residual-stream rows [M, d_model]: ln_final (pre-norm only) and the
  // unembedding, into logits [M, vocab_size]; the kernels Forward ends with, so Forward's own
  // final rows give its logits bit for bit. The logit lens (experiments.h) reads every layer's
  // stream through it. kResourceExhausted if its scratch cannot be allocated.
  Status ReadOut(const float* rows, int64_t M, float* logits);

  // ---- Training (transformer_train.cc) ----
  // The gradient of Loss(Forward(tokens).logits, targets) with respect to every parameter (and,
  // when asked, every head gate), by the backward of each stage of the reference module: the
  // forward pass keeps each layer's activations, then the stages run in reverse. Targets [B, T]
  // as Loss takes them (-100: not counted). The forward is Forward's own (the same kernels, so
  // result->loss is the bits Forward + Loss give); the gradients are float32 with reductions in
  // a fixed order, so they are the same bits with any thread count and in every build of one
  // SIMD target set. Gradient(name) reads them afterwards.
  Status Backward(const TokenView& tokens, const int32_t* targets, const BackwardOptions& options,
                  BackwardResult* result);
  // The checks Backward and TrainStep make of their batch before any work (tokens (B, T) with
  // 1 <= T <= max_len and ids in [0, vocab_size), targets present, -100 or ids, at least one
  // counted), without computing anything: so that a caller holding many batches (the worker's
  // train run) can refuse a bad one before the first step changes a weight.
  Status CheckBatch(const TokenView& tokens, const int32_t* targets) const;
  // The last Backward's (or TrainStep's) gradient of a TransformerParams key, [shape of the key]:
  // kUnknownParameter for another key, kInvalidArgument before any Backward. The view reads
  // the model's buffer, overwritten by the next Backward. Both keys of a tied tensor read its one
  // gradient (the sum over both uses), as torch's .grad of the shared Parameter.
  Status Gradient(std::string_view name, TensorView* out) const;

  // A new optimizer for the model's parameters (its state starts empty, as a new torch optimizer
  // does); ValidateOptimizerConfig's errors. Until it is called, TrainStep refuses.
  Status SetOptimizer(const OptimizerConfig& config);
  const Optimizer* optimizer() const { return optimizer_.get(); }
  // Moves `other`'s optimizer (state included) to this model, a model of the same config: how a
  // binding that loads weights into a staging model keeps the optimizer across the swap.
  void TakeOptimizerFrom(Transformer* other) { optimizer_ = std::move(other->optimizer_); }
  // Backward on the batch, then one optimizer step over every parameter in the reference's
  // named_parameters() order (TransformerParams), with the optimizer's clipping.
  Status TrainStep(const TokenView& tokens, const int32_t* targets, TrainStepResult* result);

 private:
  explicit Transformer(const TransformerConfig& config);
  struct Layer;
  struct Saved;  // what a training forward keeps for the backward (transformer_internal.h)
  Status Prepare();
  Status PackLinears();
  Status ForwardPass(const TokenView& tokens, const TransformerOptions& options,
                     TransformerResult* result);
  Status BeginGeneration(const TokenView& prompt, const GenerateOptions& options,
                         GenerateResult* result);
  Status ContinueGeneration(int64_t max_steps, GenerateResult* result);
  // Ends the generation in progress; `release` also frees its caches, rows and sampling scratch.
  void EndGeneration(bool release);
  static void ReleaseResult(GenerateResult* result);
  uint64_t WeightsVersion() const;
  Status TrainStepPass(const TokenView& tokens, const int32_t* targets, TrainStepResult* result);
  Status CheckTokens(const TokenView& tokens, Arg arg, int64_t max_positions,
                     const char* limit) const;
  Status CheckGates(const TensorView& gates) const;
  Status CheckTiedKey(int entry, const TensorView& value, const std::string& arg);
  Status TooLarge(int64_t B, int64_t T, size_t limit) const;
  static void KeepHook(int64_t l, const char* suffix, const float* data, const Shape& shape,
                       std::vector<std::pair<std::string, TraceTensor>>* hooks, bool* failed);
  void Unembed(const float* rows, size_t M, float* logits);
  struct Patch;  // an ActivationPatch checked and resolved (transformer.cc)
  Status ResolvePatches(const TokenView& tokens, const std::vector<ActivationPatch>& patches,
                        std::vector<Patch>* out) const;
  void ApplyZPatches(int64_t l, int64_t B, int64_t T, const std::vector<Patch>& patches,
                     float* concat, float* out);
  Status RunBlocks(const TokenView& tokens, int64_t pos0, const TensorView& gates, bool cached,
                   size_t bytes, std::vector<std::pair<std::string, TraceTensor>>* hooks,
                   bool* hooks_failed, Saved* saved = nullptr,
                   const std::vector<Patch>* patches = nullptr);
  bool GrowSinusoids(int64_t need);
  void LastLogits(int64_t B, int64_t T);
  int32_t Sample(const float* row, const GenerateOptions& options, double u);
  Status BackwardPass(const TokenView& tokens, const int32_t* targets,
                      const BackwardOptions& options, BackwardResult* result);

  TransformerConfig config_;
  // The model's one store: every state_dict entry, the attention layers' too (their
  // MultiheadAttention reads them from here, with in_proj_weight's q/k/v_proj_weight aliases).
  ParameterStore store_;
  // Its owned entries in TransformerParams (named_parameters) order: the optimizer's slots.
  std::vector<int> param_entries_;
  // tie_embeddings: which of tok_embed.weight (1) and unembed.weight (2) SetParameter set since
  // the weights were last used or initialised (SetParameter's tied check).
  unsigned tied_keys_set_ = 0;
  // The model-level entries' indices in store_, found once at Create as Layer's are (-1: absent).
  int tok_embed_ = -1, pos_embed_ = -1, ln_final_w_ = -1, ln_final_b_ = -1;
  int unembed_w_ = -1, unembed_b_ = -1;  // (tie_embeddings: unembed_w_ an alias of tok_embed_)
  std::vector<std::unique_ptr<Layer>> layers_;
  // Sinusoidal positions: rows 0..sinusoid_rows_-1 of the table, computed on the first call that
  // reaches them rather than on every call (pow, sin and cos per element); GrowSinusoids.
  AlignedBuffer sinusoid_;
  int64_t sinusoid_rows_ = 0;
  int64_t sinusoid_rows_computed_ = 0;
  struct Packed;
  std::unique_ptr<Packed> packed_;  // fc_in, fc_out, unembed panels, stamped with versions
  CallContext context_;             // shared by the layers' attention calls
  // Activations between the stages, kept across calls of a shape: [B*T, D] residual stream, the
  // normalized input, the attention output, the MLP hidden [B*T, d_mlp].
  AlignedBuffer x_, normed_, attn_out_, hidden_, mlp_out_;
  ForwardResult attn_result_;
  AttentionTrace attn_trace_;
  // Generate's: the last rows [B, D] and their logits [B, V], one step's tokens, sampling scratch.
  AlignedBuffer last_, step_logits_;
  std::vector<int32_t> step_tokens_, order_;
  std::vector<double> probs_;
  // The generation in progress (GenerateBegin .. GenerateContinue's last step): its options (the
  // gates copied), the result it writes, the batch and prompt length, the tokens drawn so far,
  // the sampler's stream, the bytes its buffers count against the limit, and the weights'
  // version it began with (WeightsVersion: a change ends it).
  struct Generation {
    bool active = false;
    GenerateOptions options;
    std::vector<float> gates;
    const GenerateResult* result = nullptr;
    int64_t batch = 0, prompt_length = 0, step = 0;
    uint64_t stream = 0, weights_version = 0;
    size_t bytes = 0;
  } gen_;
  // Training: the saved activations and scratch; the gradients, a parallel store of store_'s
  // layout (entry i's gradient at store_.offset(i)); the optimizer and its slots (one per
  // param_entries_ entry, kept across steps).
  std::unique_ptr<Saved> saved_;
  AlignedBuffer grads_;
  bool have_grads_ = false;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<OptimizerParam> slots_;
};

}  // namespace headscope

#endif  // HEADSCOPE_TRANSFORMER_H_
