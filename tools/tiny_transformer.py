# The reference module of headscope's Transformer. It began as a verbatim copy of the project's
# first specification (kept outside this repository); this copy is the contract now and
# extends it without changing any of its numbers: the LayerNorm hooks blocks.{l}.ln1.hook_normalized
# and blocks.{l}.ln2.hook_normalized (TransformerLens's names) are added. State_dict names, hooks,
# forward numbers, loss and training rules here are what headscope's Transformer is tested
# against (tools/make_transformer_golden.py imports this file). Also added: the config key
# tie_embeddings (default False, so every other config's numbers are the spec's): the unembedding
# shares tok_embed.weight, as GPT-2 does. And n_kv_heads (default None = n_heads, the spec's module
# and numbers): grouped-query / multi-query attention, K and V of n_kv_heads heads, each shared by
# n_heads / n_kv_heads query heads (LLaMA 2/3, Mistral; 1 head: multi-query, PaLM, Falcon).
# And positions "alibi" (Press et al.'s linear biases, as BLOOM and MPT use them, instead of a
# position embedding) and attn_window (default 0 = full attention: sliding-window attention,
# Mistral's / Longformer's): both change only the attention scores, and every other config's
# numbers stay the spec's (attention() adds nothing and masks as before when neither is set).
# And positions "rope" with rope_layout, rope_base, rope_fraction (defaults "half", 10000.0, 1.0,
# refused with any other positions): rotary position embeddings (Su et al. 2021) on q and k in
# every attention layer, no position added to the stream (LLaMA); apply_rope below writes out
# each layout. Every other config's numbers are unchanged. And attn_sinks (default False):
# gpt-oss's attention sinks, a learned logit per head in every softmax row's denominator
# (the parameter blocks.{l}.attn.sinks); without it nothing changes.
# And forward(..., patches=...): activation patching (TransformerLens's hook functions that return
# a value), {hook name: function(activation) -> activation} for the residual-stream hooks and
# attn.hook_z; the rest of the pass runs on what the function returns. Without patches (the
# default) every number is the spec's.

"""The reference model for headscope's trainable transformer: a small decoder/encoder stack built
from torch.nn.MultiheadAttention, written so that every name in its state_dict, every hook and
every training rule is defined by real PyTorch. headscope's C++ Transformer must reproduce it:
same state_dict keys and shapes, same forward numbers, same gradients, same AdamW steps.

Run with Debian's /usr/bin/python3 (python3-torch 1.13). This file is a specification, not part
of the package: the project writes its own golden generator on top of it (import or copy it).

Config (JSON/JS names in brackets; defaults after '='):
  vocab_size [vocabSize], max_len [maxLen], d_model [dModel], n_layers [nLayers] = 1,
  n_heads [nHeads] = 1, d_mlp [dMlp] = 0 (0: attention-only, no MLP and no ln2),
  norm [norm] = "pre" ("pre" | "post" | "none"), positions [positions] = "learned"
  ("learned" | "sinusoidal" | "none" | "alibi" | "rope"; "rope": see rope_layout below;
  "alibi": no position embedding and no hook_pos_embed, as "none", but every layer's head h adds the ALiBi bias -(m_h |i - j|) to its
  score (i, j) before the masks, m_h = alibi_slopes(n_heads)[h]: Press et al. 2022's slopes
  (their repository's get_slopes, which BLOOM's build_alibi_tensor also computes; n_heads not a
  power of two included), rounded to float32 once. Causal, every visible key has j <= i and the
  bias is Press et al.'s -m (i - j); non-causal the symmetric distance |i - j| (the usual
  bidirectional use; Press et al. define only the causal case). causal [causal] = True, act [act] = "gelu" ("gelu" exact
  erf form | "relu"), bias [bias] = True, ln_eps [lnEps] = 1e-5,
  tie_embeddings [tieEmbeddings] = False (True: unembed.weight IS tok_embed.weight, one
  Parameter: logits = x @ tok_embed.weight.T (+ unembed.bias). As in torch for any tied module,
  state_dict() holds the tensor under both keys, named_parameters() / parameters() list it once,
  as tok_embed.weight (so AdamW steps and decays it once), and its .grad is the sum of the
  gradients of both uses. Its initial values are tok_embed's, N(0, 1).),
  n_kv_heads [nKvHeads] = None (= n_heads; G, dividing n_heads: grouped-query attention, G < H;
  multi-query, G = 1. Each block's attention is then GroupedQueryAttention below: the same
  state_dict keys as nn.MultiheadAttention's, in_proj_weight [(H + 2 G) dh, D] = [W_q; W_k; W_v]
  fused (D, G dh and G dh rows; LLaMA-style checkpoints with separate q/k/v_proj stack them in
  that order), in_proj_bias [(H + 2 G) dh], out_proj; query head h reads K/V head h // (H / G),
  i.e. k and v are repeat_interleave'd (H / G times, on the head axis) before the scores, which
  is F.scaled_dot_product_attention on repeated K/V. G = H is nn.MultiheadAttention itself.),
  attn_window [attnWindow] = 0 (0: full attention; w >= 1: sliding-window attention, token i
  attends to token j only if i - w < j, i.e. the w tokens i - w + 1 .. i with causal (Mistral,
  Longformer's causal window; w >= T is full causal attention); without causal the
  bidirectional window |i - j| < w (2 w - 1 tokens). The blocked keys are masked to -inf with the
  causal mask: window_mask() below.)
  rope_layout [ropeLayout] = "half" ("half" | "interleaved"), rope_base [ropeBase] = 10000.0,
  rope_fraction [ropeFraction] = 1.0 (positions "rope" only; any other value with other positions
  is an error). positions "rope": no pos_embed, no hook_pos_embed; in every layer q and k (after
  in_proj and its bias, per head, before the 1 / sqrt(dh) scaling) are rotated by position:
  apply_rope(x, positions, layout, base, r) with r = rope_dims(config) = 2 * floor(rope_fraction
  * dh / 2) (the largest even number <= rope_fraction * dh, in float64; at least 2, else an
  error) rotary dims, the first r of each head; the other dh - r pass through (GPT-NeoX's
  rotary_pct). Pair i in [0, r/2) turns by the angle t * theta_i, theta_i = 1 / base^(2i / r),
  t the token's position (0 .. T-1): (a, b) -> (a cos - b sin, a sin + b cos), the pair being
  dims (i, i + r/2) with "half" (GPT-NeoX, LLaMA: rotate_half) or (2i, 2i + 1) with
  "interleaved" (RoFormer, GPT-J: rotate_every_two). cos and sin are computed in float64 (Python's
  math, i.e. the C library's pow, cos and sin) and cast to the model's dtype, as the sinusoidal
  table is. The two layouts are the same model up to a permutation of each head's rows of W_q
  and W_k (and their biases): interleaved dim 2i <-> half dim i, 2i + 1 <-> i + r/2.
  attn_sinks [attnSinks] = False (True: attention sinks, as gpt-oss has them. Every layer's
  attention module gets a Parameter sinks [n_heads] (state_dict key blocks.{l}.attn.sinks;
  registered on the module after its construction, so it comes after in_proj_bias and before
  out_proj.weight in state_dict() and named_parameters()), initialised to 0. Head h's sink s_h
  joins each softmax row of its scores (after the scaling, ALiBi's bias and the masks; the sink
  itself is never masked) as one more column whose weight is then dropped: pattern =
  softmax(cat([scores, s_h]))[..., :T] = exp(x_j - m) / (sum_k exp(x_k - m) + exp(s_h - m)), m
  the max of the row and s_h, so a row sums to 1 - p_sink and a head can attend to nothing.
  hook_attn_scores and hook_pattern keep the T key columns. AdamW decays it as every parameter.)

Hooks (TransformerLens names; B batch, T tokens, H heads, dh = d_model / n_heads, D d_model):
  hook_embed [B,T,D], hook_pos_embed [B,T,D] (absent when positions == "none" or "rope"),
  blocks.{l}.hook_resid_pre [B,T,D], blocks.{l}.ln1.hook_normalized [B,T,D] (ln1's output:
  the attention's input with norm == "pre", the stream after the residual add with "post";
  absent with "none"), blocks.{l}.attn.hook_q [B,H,T,dh], hook_k / hook_v [B,G,T,dh] (the G
  K/V heads before they are repeated, as TransformerLens keeps them; G = H without n_kv_heads;
  with "rope", before the rotation), blocks.{l}.attn.hook_rot_q [B,H,T,dh], hook_rot_k [B,G,T,dh]
  (positions "rope" only: q and k after the rotation, what the scores use),
  blocks.{l}.attn.hook_attn_scores [B,H,T,T] (scaled, plus ALiBi's bias with positions "alibi",
  masked: -inf where blocked, by causality or the window),
  blocks.{l}.attn.hook_pattern [B,H,T,T], blocks.{l}.attn.hook_z [B,H,T,dh],
  blocks.{l}.hook_attn_out [B,T,D], blocks.{l}.hook_resid_mid [B,T,D] (when d_mlp > 0),
  blocks.{l}.ln2.hook_normalized [B,T,D] (ln2's output, when d_mlp > 0 and norm != "none"),
  blocks.{l}.hook_mlp_out [B,T,D] (when d_mlp > 0), blocks.{l}.hook_resid_post [B,T,D],
  ln_final.hook_normalized [B,T,D] (norm == "pre" only), logits [B,T,vocab_size].

Loss: mean cross-entropy over the positions whose target is not -100 (F.cross_entropy with
ignore_index=-100). Optimizer: torch.optim.AdamW over model.parameters() in the order of
named_parameters(), with lr, betas, eps, weight_decay as given (torch 1.13 semantics:
p *= 1 - lr*wd, then the bias-corrected Adam step); optional clip_grad_norm_ (global L2 norm over
all parameters, before the step). SGD: torch.optim.SGD with momentum 0 and no weight decay.

Settled details (where PyTorch leaves a choice):
- bias=False removes the Linear and attention biases only; LayerNorm keeps its weight and bias.
- Weight decay applies to every parameter (embeddings and LayerNorm included), as AdamW over
  model.parameters() does. Clipping uses torch's rule: scale = max_norm / (total_norm + 1e-6),
  applied when it is below 1.
- trainStep returns the loss (and gradient norm) of the batch before its update.
- A batch whose targets are all -100 has no loss (torch's mean over nothing is NaN): refuse it with
  an error naming the targets, rather than returning NaN and stepping.
- Initial weights from a seed are headscope's own, documented, deterministic; PyTorch's default
  initialisation (nn.Linear / MultiheadAttention / Embedding / LayerNorm defaults) is a good choice
  because small models train well from it (0.02-std weights learned nothing in 1,200 steps on the
  induction task here). It need not reproduce torch's random stream.
- generate(prompt): greedy (temperature 0) takes the argmax of the last position's logits, the
  lowest index on ties; prompt length + maxNewTokens beyond max_len is an error.
- The AdamW update of an entry whose gradient is zero in exact arithmetic (e.g. the key part of
  in_proj_bias: softmax is invariant to it) is rounding noise amplified by Adam; tests hold such
  entries to about lr, not to 1e-4.
"""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc_in = nn.Linear(c["d_model"], c["d_mlp"], bias=c["bias"])
        self.fc_out = nn.Linear(c["d_mlp"], c["d_model"], bias=c["bias"])
        self.act = c["act"]

    def forward(self, x):
        h = self.fc_in(x)
        h = F.gelu(h) if self.act == "gelu" else F.relu(h)
        return self.fc_out(h)


class GroupedQueryAttention(nn.Module):
    """nn.MultiheadAttention(D, H, bias=bias, batch_first=True)'s parameters for G key/value heads
    (grouped-query attention): in_proj_weight [D + 2 G dh, D] = [W_q; W_k; W_v], in_proj_bias
    [D + 2 G dh] (absent without bias), out_proj a Linear(D, D), under nn.MultiheadAttention's
    names and in its order, initialised as it initialises them: out_proj built first (a Linear's
    default), then xavier_uniform_ of in_proj_weight and zeros for both biases. Only its
    parameters are used: attention() below computes with them."""

    def __init__(self, D, H, G, bias):
        super().__init__()
        assert H % G == 0 and D % H == 0
        self.num_heads, self.num_kv_heads = H, G
        rows = D + 2 * G * (D // H)
        self.in_proj_weight = nn.Parameter(torch.empty(rows, D))
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(rows))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(D, D, bias=bias)
        nn.init.xavier_uniform_(self.in_proj_weight)
        if bias:
            nn.init.constant_(self.in_proj_bias, 0.0)
            nn.init.constant_(self.out_proj.bias, 0.0)


def rope_dims(c):
    """The rotary dims r of each head for config c (0 unless positions == "rope"): the largest
    even number <= rope_fraction * d_head, 2 * floor(rope_fraction * d_head / 2) in float64."""
    if c["positions"] != "rope":
        return 0
    return 2 * int(c["rope_fraction"] * (c["d_model"] // c["n_heads"]) / 2)


def rope_cos_sin(positions, rot_dims, base, dtype):
    """cos and sin [T, rot_dims / 2] of positions[t] * theta_i, theta_i = 1 / base^(2i / r): each
    value computed in float64 with Python's math (the C library's pow, cos, sin), then cast to
    dtype (as the sinusoidal buffer is cast with .to(x.dtype))."""
    theta = [1.0 / math.pow(base, (2 * i) / rot_dims) for i in range(rot_dims // 2)]
    angles = [[float(p) * th for th in theta] for p in positions.tolist()]
    cos = torch.tensor([[math.cos(a) for a in row] for row in angles], dtype=torch.float64)
    sin = torch.tensor([[math.sin(a) for a in row] for row in angles], dtype=torch.float64)
    return cos.to(dtype), sin.to(dtype)


def apply_rope(x, positions, layout, base, rot_dims):
    """Rotary position embeddings of x [B, n, T, dh] (n heads; token t at positions[t]): the
    first rot_dims dims of each head turn pair by pair, (a, b) -> (a cos - b sin, a sin + b cos);
    the rest pass through. The pairs, written out per layout:
      "interleaved" (RoFormer, GPT-J's rotate_every_two): dims (2i, 2i + 1);
      "half" (GPT-NeoX, LLaMA's rotate_half): dims (i, i + rot_dims / 2)."""
    cos, sin = rope_cos_sin(positions, rot_dims, base, x.dtype)  # [T, r/2], broadcast over B, n
    rot, rest = x[..., :rot_dims], x[..., rot_dims:]
    if layout == "interleaved":
        a, b = rot[..., 0::2], rot[..., 1::2]
        turned = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    elif layout == "half":
        h = rot_dims // 2
        a, b = rot[..., :h], rot[..., h:]
        turned = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    else:
        raise ValueError(f"rope_layout: {layout!r}")
    return torch.cat([turned, rest], dim=-1)


class Hooks(dict):
    """The hooks of one forward (name -> tensor), and its activation patches: put() keeps a
    patchable hook's value after its patch, which the pass then continues with."""

    def __init__(self, patches=None):
        super().__init__()
        self.patches = patches or {}

    def put(self, name, x):
        if name in self.patches:
            x = self.patches[name](x)
        self[name] = x
        return x


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm, D = c["norm"], c["d_model"]
        self.rope = None if c["positions"] != "rope" else (c["rope_layout"], c["rope_base"],
                                                           rope_dims(c))
        self.ln1 = nn.LayerNorm(D, eps=c["ln_eps"]) if self.norm != "none" else None
        G = c["n_kv_heads"] or c["n_heads"]
        if G == c["n_heads"]:
            self.attn = nn.MultiheadAttention(D, c["n_heads"], bias=c["bias"], batch_first=True)
        else:
            self.attn = GroupedQueryAttention(D, c["n_heads"], G, c["bias"])
        if c["attn_sinks"]:  # after the module's own parameters, before out_proj's (see above)
            self.attn.sinks = nn.Parameter(torch.zeros(c["n_heads"]))
        self.has_mlp = c["d_mlp"] > 0
        self.ln2 = nn.LayerNorm(D, eps=c["ln_eps"]) if self.norm != "none" and self.has_mlp else None
        self.mlp = MLP(c) if self.has_mlp else None

    def forward(self, x, mask, hooks, l, head_gates=None, bias=None):
        def ln(norm, x, name):  # a LayerNorm and its hook, hook_normalized: its output
            y = norm(x)
            hooks[f"blocks.{l}.{name}.hook_normalized"] = y
            return y

        x = hooks.put(f"blocks.{l}.hook_resid_pre", x)
        a_in = ln(self.ln1, x, "ln1") if self.norm == "pre" else x
        a = attention(self.attn, a_in, mask, hooks, f"blocks.{l}.attn", head_gates, bias,
                      self.rope)
        a = hooks.put(f"blocks.{l}.hook_attn_out", a)
        x = x + a
        if self.norm == "post":
            x = ln(self.ln1, x, "ln1")
        if self.has_mlp:
            x = hooks.put(f"blocks.{l}.hook_resid_mid", x)
            m = self.mlp(ln(self.ln2, x, "ln2") if self.norm == "pre" else x)
            m = hooks.put(f"blocks.{l}.hook_mlp_out", m)
            x = x + m
            if self.norm == "post":
                x = ln(self.ln2, x, "ln2")
        return hooks.put(f"blocks.{l}.hook_resid_post", x)


def alibi_slopes(n):
    """Press et al.'s ALiBi slopes for n heads, as a float32 tensor [n]: their repository's
    get_slopes (in double; for n a power of two the geometric sequence 2^(-8/n), 2^(-16/n), ...,
    2^-8; otherwise those of the largest power of two p below n, then every other slope of 2p
    heads, 2^(-8/(2p)), 2^(-24/(2p)), ..., until n), rounded to float32 once."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    def get_slopes(n):
        if math.log2(n).is_integer():
            return power_of_2(n)
        p = 2 ** math.floor(math.log2(n))
        return power_of_2(p) + get_slopes(2 * p)[0::2][: n - p]
    return torch.tensor(get_slopes(n), dtype=torch.float32)


def alibi_bias(n_heads, T, dtype):
    """ALiBi's bias [H, T, T]: -(m_h |i - j|) in `dtype` (the float32 slopes converted exactly)."""
    i = torch.arange(T).view(T, 1)
    distance = (i - i.view(1, T)).abs().to(dtype)
    return -(alibi_slopes(n_heads).to(dtype).view(n_heads, 1, 1) * distance)


def window_mask(T, causal, window):
    """The blocked keys [T, T] (True: -inf), or None when nothing is: causal blocks j > i; a
    window w >= 1 blocks j <= i - w, and without causal also j >= i + w. Without a window it is
    the spec's triu mask itself, and it uses no in-place ops (torch.onnx cannot export |=, and
    tools/bench/make_transformer_onnx.py exports this module)."""
    if not window:
        return torch.triu(torch.ones(T, T, dtype=torch.bool), 1) if causal else None
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    return (j <= i - window) | ((j > i) if causal else (j >= i + window))


def attention(mha, x, mask, hooks, name, head_gates=None, bias=None, rope=None):
    """The arithmetic of mha(x, x, x, attn_mask=mask, need_weights=False)[0], written out so
    that every intermediate is a hook. head_gates (H floats, default all 1) scale each head's z
    before out_proj: gate 0 switches a head off exactly as zeroing its out_proj columns would.
    With G = num_kv_heads < H (GroupedQueryAttention), k and v have G heads, each read by H / G
    consecutive query heads: repeat_interleave on the head axis (hook_k, hook_v keep the G).
    bias: ALiBi's [H, T, T] (alibi_bias), added to the scaled scores before the mask.
    mha.sinks (attn_sinks): [H] logits, one more softmax column per row whose weight is dropped.
    rope = (layout, base, rot_dims): q and k rotated by position (apply_rope) before the scores;
    hook_q / hook_k keep them as projected, hook_rot_q / hook_rot_k as rotated."""
    B, T, D = x.shape
    H = mha.num_heads
    G = getattr(mha, "num_kv_heads", H)
    dh = D // H
    qkv = F.linear(x, mha.in_proj_weight, mha.in_proj_bias)
    q, k, v = qkv.split([D, G * dh, G * dh], dim=-1)
    split = lambda t, n: t.view(B, T, n, dh).transpose(1, 2)       # [B,n,T,dh]
    q, k, v = split(q, H), split(k, G), split(v, G)
    hooks.update({f"{name}.hook_q": q, f"{name}.hook_k": k, f"{name}.hook_v": v})
    if rope is not None:
        positions = torch.arange(T)
        q, k = (apply_rope(t, positions, *rope) for t in (q, k))
        hooks.update({f"{name}.hook_rot_q": q, f"{name}.hook_rot_k": k})
    k_h, v_h = k, v                                                  # [B,H,T,dh]: K/V per query head
    if G != H:
        k_h, v_h = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
    scores = (q / math.sqrt(dh)) @ k_h.transpose(-2, -1)            # [B,H,T,T]
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    sinks = getattr(mha, "sinks", None)
    if sinks is None:
        pattern = torch.softmax(scores, dim=-1)
    else:  # gpt-oss's attention sinks: the sink column joins the softmax, then is dropped
        column = sinks.view(1, H, 1, 1).expand(B, H, T, 1)
        pattern = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :T]
    z = pattern @ v_h                                                # [B,H,T,dh]
    if head_gates is not None:
        z = z * head_gates.view(1, H, 1, 1)
    hooks.update({f"{name}.hook_attn_scores": scores, f"{name}.hook_pattern": pattern})
    z = hooks.put(f"{name}.hook_z", z)
    concat = z.transpose(1, 2).reshape(B, T, D)
    return F.linear(concat, mha.out_proj.weight, mha.out_proj.bias)


def sinusoidal(max_len, d_model):
    """Vaswani et al. 2017: PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(...)."""
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    div = torch.pow(10000.0, i / d_model)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos / div)
    pe[:, 1::2] = torch.cos(pos / div)[:, : d_model // 2]
    return pe


class TinyTransformer(nn.Module):
    DEFAULTS = dict(n_layers=1, n_heads=1, d_mlp=0, norm="pre", positions="learned",
                    causal=True, act="gelu", bias=True, ln_eps=1e-5, tie_embeddings=False,
                    n_kv_heads=None, attn_window=0, rope_layout="half", rope_base=10000.0,
                    rope_fraction=1.0, attn_sinks=False)
    ROPE_KEYS = ("rope_layout", "rope_base", "rope_fraction")

    def __init__(self, **config):
        super().__init__()
        c = {**self.DEFAULTS, **config}
        assert c["d_model"] % c["n_heads"] == 0
        assert c["n_kv_heads"] is None or c["n_heads"] % c["n_kv_heads"] == 0
        assert c["positions"] in ("learned", "sinusoidal", "none", "alibi", "rope")
        assert c["attn_window"] >= 0
        if c["positions"] == "rope":
            assert c["rope_layout"] in ("half", "interleaved") and c["rope_base"] > 0
            assert 0 < c["rope_fraction"] <= 1 and rope_dims(c) >= 2, "no pair of dims to rotate"
        else:
            assert all(c[k] == self.DEFAULTS[k] for k in self.ROPE_KEYS), "rope_* without rope"
        self.c = c
        self.tok_embed = nn.Embedding(c["vocab_size"], c["d_model"])
        if c["positions"] == "learned":
            self.pos_embed = nn.Embedding(c["max_len"], c["d_model"])
        elif c["positions"] == "sinusoidal":
            self.register_buffer("pe", sinusoidal(c["max_len"], c["d_model"]), persistent=False)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["n_layers"]))
        self.ln_final = nn.LayerNorm(c["d_model"], eps=c["ln_eps"]) if c["norm"] == "pre" else None
        self.unembed = nn.Linear(c["d_model"], c["vocab_size"], bias=c["bias"])
        if c["tie_embeddings"]:
            self.unembed.weight = self.tok_embed.weight  # one Parameter, (V, D) as both need

    def forward(self, tokens, head_gates=None, patches=None):
        """tokens: LongTensor [B, T] with T <= max_len. head_gates: optional [n_layers, n_heads].
        patches: optional {hook name: function(tensor) -> tensor} (see Hooks).
        Returns (logits [B, T, vocab_size], hooks: dict name -> tensor)."""
        B, T = tokens.shape
        hooks = Hooks(patches)
        x = self.tok_embed(tokens)
        hooks["hook_embed"] = x
        if self.c["positions"] == "learned":
            p = self.pos_embed(torch.arange(T)).unsqueeze(0).expand(B, T, -1)
        elif self.c["positions"] == "sinusoidal":
            p = self.pe[:T].to(x.dtype).unsqueeze(0).expand(B, T, -1)
        else:
            p = None
        if p is not None:
            hooks["hook_pos_embed"] = p
            x = x + p
        mask = window_mask(T, self.c["causal"], self.c["attn_window"])
        bias = (alibi_bias(self.c["n_heads"], T, x.dtype) if self.c["positions"] == "alibi"
                else None)
        for l, block in enumerate(self.blocks):
            g = None if head_gates is None else head_gates[l]
            x = block(x, mask, hooks, l, g, bias)
        if self.ln_final is not None:
            x = self.ln_final(x)
            hooks["ln_final.hook_normalized"] = x
        logits = self.unembed(x)
        hooks["logits"] = logits
        return logits, hooks


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=-100)


if __name__ == "__main__":
    # A smoke run: the 2-layer attention-only shape of an induction-head lab.
    torch.manual_seed(0)
    m = TinyTransformer(vocab_size=28, max_len=32, d_model=32, n_layers=2, n_heads=2).double()
    tokens = torch.randint(0, 28, (4, 32))
    targets = torch.roll(tokens, -1, dims=1)
    targets[:, -1] = -100
    logits, hooks = m(tokens)
    loss = loss_fn(logits, targets)
    loss.backward()
    print("state_dict:", {k: tuple(v.shape) for k, v in m.state_dict().items()})
    print("hooks:", sorted(hooks))
    print("loss:", float(loss))
