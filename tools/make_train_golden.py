#!/usr/bin/python3
"""Generate headscope's golden training cases (tests/golden/train/*.json and its README.md).

Run from the repository root with Debian's interpreter (the only one that has PyTorch):

    /usr/bin/python3 tools/make_train_golden.py [--out DIR]

(`tools/setup.sh --golden` installs python3-torch and python3-numpy.)

Each case is one config of the reference module tools/tiny_transformer.py (the
project's contract) with its initial weights, one batch and PyTorch autograd's
loss, gradient of every parameter and gradient of the head gates on it, and one or more
optimizer runs from the same weights: 5 steps of torch.optim.AdamW or SGD (foreach=False,
clip_grad_norm_ before each step when asked) on 5 batches, with each step's loss and gradient
norm, whether it clipped, and the parameters after the 5 steps. The format is in the README
this script writes (write_readme below).

How the numbers are made:
  * Weights are float32, made as tools/make_transformer_golden.py makes them: each case seeds
    torch with the crc32 of its name and builds the module with PyTorch's default
    initialisation; the entries that initialisation leaves constant are redrawn from a
    generator seeded with crc32 + 1 (in_proj_bias and out_proj.bias U(-0.5, 0.5), attention
    sinks U(-1, 2.5), LayerNorm weights U(0.5, 1.5), LayerNorm biases U(-0.25, 0.25)) so that
    every parameter matters.
    Tokens, targets and the runs' batches come from that generator, in that order.
  * Expected values: the same float32 weights in a float64 module (`model.double()` of a fresh
    module, so the sinusoidal table is the module's own float64 buffer), float64 autograd and
    float64 optimizer steps. With head_gates null the gradient of the gates is taken at gates
    all ones (torch.ones(n_layers, n_heads, requires_grad=True)), whose forward is identical.
  * Floats are written with repr (the shortest decimal that reads back as the same float64);
    the state_dict's float32 values are written as their float64 (exact), so they read back
    exactly as a double and as a float.
  * Clipping norms are chosen from the step norms of an unclipped run of the same optimizer:
    "some" is a round number between two step norms (the run must clip at some steps and not at
    others), "always" half the smallest; every step's norm is at least 1% away from max_norm
    (asserted) so that a float32 engine makes the same clipping decisions.

Checks, for every case: the float64 forward with head_gates None equals the forward with gates
all ones exactly (logits, loss and parameter gradients); each written file is read back, its
state_dict loaded into a fresh float64 module, and its loss, gradients, gate gradients and every
run (losses, grad norms, clipping decisions, state_dict_after) must replay bit for bit; the
float32 module on the same weights must give every gradient tensor to 1e-3 relative (max |g32 -
g64| / max |g64| per tensor, skipping tensors whose float64 max |g| is below 1e-12), and its
loss to 1e-5 relative; the float32 run of every optimizer run must clip at the same steps and
end within 5 lr of state_dict_after on the entries whose gradient is zero in exact arithmetic
(the README's note) and within 0.01 lr elsewhere; the cases must cover what the README lists
(check_coverage). Re-running the script rewrites byte-identical files.

It also writes loss/cross-entropy-rows.json: no model, rows of logits given directly (large equal
logits, spreads across float32's range, ordinary rows) with F.cross_entropy's float64 loss, per
row losses and d loss / d logits, for the loss's order of operations (LOSS_CASES below).
"""

import argparse
import json
import math
import os
import sys
import zlib

sys.dont_write_bytecode = True  # no __pycache__ in tools/

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import tiny_transformer as tt  # noqa: E402
# The helpers the forward goldens' generator has already: case names, seeds, the seeded float32
# module, number formatting.
from make_transformer_golden import (build_model32, config_keys, config_name, dumps,  # noqa: E402
                                     rope_config, seed_of)

STEPS = 5
IGNORE = -100
GRAD32_TOL = 1e-3         # float32 gradients vs float64, relative to the tensor's max |g64|
GRAD32_SKIP = 1e-12       # tensors whose float64 max |g| is below this are not compared
LOSS32_TOL = 1e-5
RUN32_OTHER_TOL = 1e-2    # float32 run vs float64, other than zero-gradient entries, in lr
CLIP_MARGIN = 0.01        # every step norm at least 1% away from max_norm
MAX_FILE_BYTES = 1_500_000
# (4 MB until the variants: their 19 cases took the directory to 4.16 MB, the sinks to 4.34.)
MAX_TOTAL_BYTES = 4_500_000

CONFIG_KEYS = ["vocab_size", "max_len", "d_model", "n_layers", "n_heads", "d_mlp", "norm",
               "positions", "causal", "act", "bias", "ln_eps"]
DOC_KEYS = ["name", "config", "state_dict", "tokens", "targets", "head_gates", "loss", "grads",
            "head_gate_grads", "runs"]
RUN_KEYS = ["optimizer", "batches", "losses", "grad_norms", "clipped", "state_dict_after"]


# ----------------------------------------------------------------------------------------------
# Optimizer runs
# ----------------------------------------------------------------------------------------------

SOME, ALWAYS = "some", "always"  # clip_grad_norm filled in from the unclipped run's norms


def adamw(lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, clip=0):
    return {"type": "adamw", "lr": lr, "betas": list(betas), "eps": eps,
            "weight_decay": weight_decay, "clip_grad_norm": clip}


def sgd(lr, clip=0):
    return {"type": "sgd", "lr": lr, "clip_grad_norm": clip}


# The run kinds the cases draw from.
ADAMW_WD = adamw(1e-3)                                                   # wd 0.01, no clip
ADAMW_WD_98 = adamw(1e-2, betas=(0.9, 0.98), weight_decay=0.1)           # wd 0.1, no clip
ADAMW_NO_WD = adamw(5e-2, betas=(0.9, 0.98), weight_decay=0.0)           # wd 0
ADAMW_NO_WD_999 = adamw(3e-3, eps=1e-6, weight_decay=0.0)                # wd 0, eps 1e-6
ADAMW_CLIP_SOME = adamw(1e-2, betas=(0.9, 0.98), weight_decay=0.05, clip=SOME)
ADAMW_CLIP_SOME_999 = adamw(2e-2, weight_decay=0.01, clip=SOME)
ADAMW_CLIP_ALWAYS = adamw(5e-3, weight_decay=0.01, clip=ALWAYS)
SGD = sgd(5e-2)
SGD_SLOW = sgd(1e-2)
SGD_CLIP_SOME = sgd(3e-2, clip=SOME)
SGD_CLIP_ALWAYS = sgd(5e-2, clip=ALWAYS)


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------


def case(*, V, L, D, layers, heads, mlp, norm, pos, causal=True, act="gelu", bias=True,
         eps=1e-5, tie=False, kv=None, window=0, rope=None, base=10000.0, fraction=1.0,
         sinks=False, B, T, targets, gates=None, runs, prefix="", suffix="", covers=""):
    """targets: "next" (next token, last position -100) | "some" (random, about a quarter -100,
    at least one counted and, with B*T > 1, one ignored) | "all" (random, none ignored) | "one"
    (all -100 but one position) | "induction" (a random half, then its repeat; next token)."""
    config = dict(vocab_size=V, max_len=L, d_model=D, n_layers=layers, n_heads=heads, d_mlp=mlp,
                  norm=norm, positions=pos, causal=causal, act=act, bias=bias, ln_eps=eps)
    if tie:
        config["tie_embeddings"] = True
    if kv is not None:
        config["n_kv_heads"] = kv
    if window:
        config["attn_window"] = window
    if sinks:
        config["attn_sinks"] = True
    config.update(rope_config(pos, rope, base, fraction))
    name = "-".join(p for p in (prefix, config_name(config), suffix, f"b{B}-t{T}") if p)
    return dict(name=name, config=config, B=B, T=T, targets=targets, gates=gates,
                runs=[dict(r) for r in runs], covers=covers)


CASES = [
    # Every norm x positions combination.
    case(V=7, L=8, D=4, layers=1, heads=1, mlp=0, norm="pre", pos="learned", B=2, T=5,
         targets="next", runs=[ADAMW_WD, SGD],
         covers="the smallest default model: 1 layer, 1 head, attention only"),
    case(V=11, L=8, D=8, layers=2, heads=2, mlp=16, norm="pre", pos="learned", B=1, T=8,
         targets="some", runs=[ADAMW_CLIP_SOME, SGD_CLIP_SOME],
         covers="B = 1, T = max_len; clipping at some steps (AdamW and SGD)"),
    case(V=9, L=10, D=8, layers=1, heads=2, mlp=12, norm="pre", pos="sinusoidal", causal=False,
         act="relu", B=2, T=6, targets="some", runs=[ADAMW_NO_WD],
         covers="pre-norm, sinusoidal, non-causal, relu"),
    case(V=10, L=6, D=8, layers=2, heads=4, mlp=8, norm="pre", pos="none", bias=False, B=3,
         T=4, targets="next", runs=[ADAMW_WD_98],
         covers="pre-norm without positions, no bias (LayerNorms keep theirs), B = 3"),
    case(V=10, L=8, D=8, layers=2, heads=2, mlp=0, norm="post", pos="learned", B=2, T=8,
         targets="some", runs=[ADAMW_CLIP_SOME_999],
         covers="post-norm attention only (ln1, no ln2), T = max_len"),
    case(V=9, L=10, D=12, layers=3, heads=3, mlp=16, norm="post", pos="sinusoidal", act="relu",
         bias=False, B=2, T=7, targets="next", runs=[ADAMW_WD, SGD],
         covers="post-norm with MLP, 3 layers of 3 heads, relu, no bias"),
    case(V=9, L=8, D=6, layers=2, heads=1, mlp=0, norm="post", pos="none", causal=False, B=1,
         T=8, targets="some", runs=[ADAMW_NO_WD],
         covers="post-norm without positions, non-causal, B = 1, T = max_len"),
    case(V=10, L=8, D=8, layers=2, heads=2, mlp=16, norm="none", pos="learned", B=2, T=6,
         targets="some", runs=[ADAMW_NO_WD_999, SGD_SLOW],
         covers="no LayerNorm, learned positions"),
    case(V=7, L=8, D=8, layers=1, heads=4, mlp=8, norm="none", pos="sinusoidal", causal=False,
         act="relu", B=1, T=6, targets="next", runs=[ADAMW_WD],
         covers="no LayerNorm, sinusoidal, non-causal, relu, 4 heads"),
    case(V=10, L=6, D=8, layers=2, heads=2, mlp=12, norm="none", pos="none", B=3, T=4,
         targets="some", runs=[ADAMW_CLIP_SOME],
         covers="no LayerNorm and no positions at all"),
    # Head dim 1 (n_heads == d_model).
    case(V=10, L=6, D=8, layers=1, heads=8, mlp=0, norm="pre", pos="learned", bias=False, B=2,
         T=6, targets="next", runs=[ADAMW_WD, SGD_CLIP_SOME], prefix="head-dim1",
         covers="8 heads of dim 1, T = max_len"),
    case(V=6, L=6, D=4, layers=2, heads=4, mlp=6, norm="post", pos="sinusoidal", act="relu",
         B=1, T=5, targets="some", runs=[ADAMW_NO_WD], prefix="head-dim1",
         covers="4 heads of dim 1, post-norm with MLP"),
    # T = 1 (one key: softmax's backward gives the query/key parameters exactly 0 gradient).
    case(V=8, L=6, D=4, layers=1, heads=2, mlp=8, norm="pre", pos="learned", B=3, T=1,
         targets="some", runs=[ADAMW_WD], covers="T = 1, causal, B = 3"),
    case(V=8, L=5, D=6, layers=2, heads=2, mlp=0, norm="none", pos="learned", causal=False,
         B=2, T=1, targets="all", runs=[ADAMW_WD_98, SGD],
         covers="T = 1, non-causal, attention only"),
    case(V=5, L=4, D=4, layers=1, heads=1, mlp=4, norm="pre", pos="sinusoidal", causal=False,
         B=1, T=1, targets="all", runs=[ADAMW_NO_WD],
         covers="T = 1 and B = 1: a single position and target, vocab 5"),
    case(V=8, L=1, D=4, layers=1, heads=2, mlp=4, norm="post", pos="learned", act="relu",
         B=2, T=1, targets="all", runs=[SGD_CLIP_ALWAYS], prefix="max-len1",
         covers="max_len 1 = T; SGD clipping at every step"),
    # Depth.
    case(V=12, L=10, D=8, layers=3, heads=4, mlp=12, norm="pre", pos="learned", B=2, T=10,
         targets="next", runs=[ADAMW_CLIP_SOME], covers="3 layers, pre-norm, T = max_len"),
    case(V=9, L=6, D=6, layers=3, heads=2, mlp=0, norm="none", pos="none", causal=False,
         bias=False, B=2, T=5, targets="some", runs=[ADAMW_NO_WD_999],
         covers="3 layers, no LayerNorm, no positions, non-causal, no bias"),
    # ln_eps.
    case(V=8, L=6, D=8, layers=1, heads=2, mlp=8, norm="pre", pos="learned", eps=1e-3, B=2,
         T=6, targets="some", runs=[ADAMW_WD], prefix="ln-eps-1e-3",
         covers="ln_eps 1e-3 (ln1, ln2, ln_final)"),
    case(V=7, L=8, D=6, layers=2, heads=2, mlp=6, norm="post", pos="learned", act="relu",
         eps=0.1, B=1, T=7, targets="next", runs=[SGD], prefix="ln-eps-0.1",
         covers="ln_eps 0.1, post-norm"),
    case(V=9, L=8, D=8, layers=1, heads=2, mlp=0, norm="post", pos="sinusoidal", bias=False,
         eps=1e-6, B=2, T=5, targets="some", runs=[ADAMW_CLIP_ALWAYS], prefix="ln-eps-1e-6",
         covers="ln_eps 1e-6, post-norm attention only, no bias; AdamW clipping at every step"),
    # Head gates.
    case(V=10, L=8, D=8, layers=2, heads=4, mlp=8, norm="pre", pos="learned", B=2, T=6,
         targets="next", gates=[[0.0, 0.5, 1.0, 2.0], [2.0, 1.0, 0.5, 0.0]], runs=[ADAMW_WD],
         suffix="gates", covers="head gates 0, 0.5, 1, 2 in both layers"),
    case(V=9, L=7, D=6, layers=3, heads=2, mlp=6, norm="post", pos="sinusoidal", act="relu",
         bias=False, B=1, T=5, targets="some", gates=[[1.0, 0.0], [2.5, 0.5], [0.0, 0.0]],
         runs=[SGD], suffix="gates",
         covers="gates with a layer switched off entirely (no bias: its attn_out is 0)"),
    case(V=8, L=6, D=8, layers=1, heads=2, mlp=0, norm="none", pos="none", causal=False,
         B=3, T=5, targets="some", gates=[[0.0, 2.0]], runs=[ADAMW_NO_WD], suffix="gates",
         covers="gates 0 and 2, non-causal"),
    case(V=7, L=6, D=6, layers=2, heads=3, mlp=6, norm="pre", pos="sinusoidal", B=2, T=4,
         targets="some", gates=[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], runs=[ADAMW_WD_98],
         suffix="gates-all-one", covers="gates all 1: the numbers of no gates"),
    # Targets.
    case(V=12, L=10, D=8, layers=2, heads=2, mlp=8, norm="pre", pos="sinusoidal", B=3, T=10,
         targets="one", runs=[ADAMW_WD, SGD_SLOW], suffix="one-target",
         covers="every target -100 but one (in every batch), T = max_len"),
    case(V=6, L=6, D=4, layers=1, heads=1, mlp=0, norm="none", pos="learned", B=1, T=6,
         targets="one", runs=[SGD], suffix="one-target",
         covers="one counted target, B = 1, T = max_len"),
    case(V=5, L=7, D=6, layers=1, heads=2, mlp=6, norm="post", pos="learned", B=2, T=7,
         targets="all", runs=[ADAMW_CLIP_SOME_999], suffix="all-targets",
         covers="no -100 targets, vocab 5, T = max_len"),
    # Sizes.
    case(V=16, L=12, D=16, layers=1, heads=4, mlp=8, norm="pre", pos="learned", B=2, T=12,
         targets="next", runs=[ADAMW_WD, ADAMW_NO_WD], prefix="wide",
         covers="the largest small model: vocab 16, max_len 12 = T, d_model 16"),
    case(V=6, L=9, D=5, layers=1, heads=1, mlp=7, norm="pre", pos="sinusoidal", B=2, T=9,
         targets="next", runs=[ADAMW_NO_WD_999], prefix="odd-d5",
         covers="odd d_model 5 (sinusoidal's last column a sin without a cos), T = max_len"),
    case(V=6, L=5, D=4, layers=1, heads=2, mlp=1, norm="post", pos="sinusoidal", act="relu",
         B=2, T=5, targets="next", runs=[SGD_CLIP_SOME], prefix="mlp-width1",
         covers="d_mlp 1, T = max_len"),
    case(V=13, L=12, D=12, layers=2, heads=3, mlp=0, norm="none", pos="sinusoidal",
         causal=False, bias=False, B=1, T=11, targets="some", runs=[ADAMW_CLIP_SOME],
         covers="no LayerNorm, sinusoidal, non-causal, no bias, 3 heads of dim 4"),
    case(V=11, L=9, D=8, layers=2, heads=2, mlp=8, norm="none", pos="learned", act="relu",
         bias=False, B=3, T=7, targets="some", runs=[SGD_CLIP_ALWAYS, ADAMW_CLIP_ALWAYS],
         covers="no LayerNorm, relu, no bias; clipping at every step (SGD and AdamW)"),
    case(V=8, L=8, D=16, layers=1, heads=16, mlp=0, norm="pre", pos="learned", B=1, T=8,
         targets="next", runs=[ADAMW_WD_98], prefix="head-dim1",
         covers="16 heads of dim 1, d_model 16"),
    # The induction-head lab's shape (tiny_transformer.py's smoke run).
    case(V=28, L=32, D=32, layers=2, heads=2, mlp=0, norm="pre", pos="learned", B=2, T=32,
         targets="induction", runs=[ADAMW_CLIP_SOME, SGD], prefix="induction-lab",
         covers="the induction lab: vocab 28, max_len 32 = T, d_model 32, 2 layers, 2 heads, "
         "attention only; a random half then its repeat, next-token targets"),
    # Tied embeddings: one Parameter for tok_embed.weight and unembed.weight, its gradient the sum
    # of both uses, stepped (and decayed) once.
    case(V=10, L=8, D=8, layers=2, heads=2, mlp=8, norm="pre", pos="learned", tie=True, B=2,
         T=6, targets="next", runs=[ADAMW_WD_98, SGD], covers="tie_embeddings, pre-norm with "
         "MLP: AdamW with weight decay 0.1 and SGD on the one tied tensor"),
    case(V=9, L=7, D=6, layers=1, heads=2, mlp=0, norm="post", pos="sinusoidal", bias=False,
         tie=True, B=3, T=5, targets="some", runs=[ADAMW_CLIP_SOME], covers="tie_embeddings, "
         "post-norm attention only, no bias; AdamW (weight decay 0.05) clipping at some steps"),
    # Grouped-query and multi-query attention (n_kv_heads): a K/V head's gradient is the sum over
    # the heads of its group (torch's autograd through repeat_interleave).
    case(V=10, L=8, D=8, layers=2, heads=4, kv=2, mlp=8, norm="pre", pos="learned", B=2, T=6,
         targets="next", runs=[ADAMW_WD_98, SGD], covers="grouped-query (2 K/V heads for 4), "
         "pre-norm with MLP; AdamW with weight decay 0.1 and SGD"),
    case(V=9, L=5, D=6, layers=2, heads=3, kv=1, mlp=0, norm="post", pos="sinusoidal",
         bias=False, B=3, T=5, targets="some", gates=[[0.0, 1.0, 2.0], [1.0, 0.5, 1.0]],
         runs=[ADAMW_CLIP_SOME], covers="multi-query (one K/V head for 3), post-norm attention "
         "only, no bias, head gates, T = max_len; AdamW clipping at some steps"),
    case(V=8, L=6, D=12, layers=1, heads=6, kv=3, mlp=12, norm="none", pos="learned",
         causal=False, act="relu", B=2, T=4, targets="all", runs=[SGD_CLIP_SOME, ADAMW_NO_WD],
         covers="grouped-query, G = H/2 = 3 of 6 heads, non-causal, no LayerNorm, relu"),
    # ALiBi (a constant of the scores: the gradients flow as without it) and sliding windows
    # (the blocked keys' weights are 0, so their gradients are too).
    case(V=10, L=8, D=12, layers=2, heads=3, mlp=8, norm="pre", pos="alibi", B=2, T=8,
         targets="next", runs=[ADAMW_WD_98, SGD], covers="ALiBi with 3 heads, pre-norm with MLP, "
         "T = max_len; AdamW with weight decay 0.1 and SGD"),
    case(V=9, L=8, D=8, layers=2, heads=2, mlp=0, norm="post", pos="learned", window=2, B=2,
         T=7, targets="some", gates=[[1.0, 0.5], [2.0, 0.0]], runs=[ADAMW_CLIP_SOME],
         covers="sliding window 2, post-norm attention only, head gates; AdamW clipping at some "
         "steps"),
    case(V=8, L=7, D=8, layers=1, heads=4, kv=2, mlp=8, norm="pre", pos="alibi", causal=False,
         window=2, act="relu", B=2, T=7, targets="all", runs=[SGD_CLIP_SOME, ADAMW_NO_WD],
         covers="ALiBi non-causal with a bidirectional window 2 and grouped-query attention"),
    # Rotary position embeddings (positions "rope"): dq = R^T dq_rot and dk = R^T dk_rot, the
    # transpose of each position's rotation (torch's autograd through apply_rope).
    case(V=10, L=8, D=8, layers=2, heads=2, mlp=8, norm="pre", pos="rope", rope="half", B=2,
         T=6, targets="next", runs=[ADAMW_WD_98, SGD], covers="rope, rotate-half layout, "
         "pre-norm with MLP; AdamW with weight decay 0.1 and SGD"),
    case(V=9, L=6, D=8, layers=2, heads=2, mlp=0, norm="post", pos="rope", rope="interleaved",
         bias=False, B=3, T=6, targets="some", gates=[[0.0, 1.0], [2.0, 0.5]],
         runs=[ADAMW_CLIP_SOME], covers="rope, interleaved layout, post-norm attention only, "
         "no bias, head gates, T = max_len; AdamW clipping at some steps"),
    case(V=8, L=6, D=16, layers=1, heads=4, kv=2, mlp=12, norm="none", pos="rope", rope="half",
         fraction=0.5, causal=False, act="relu", B=2, T=5, targets="all",
         runs=[SGD_CLIP_SOME, ADAMW_NO_WD], covers="rope with grouped-query attention, partial "
         "rotary (2 of 4 dims), non-causal, no LayerNorm, relu"),
    case(V=9, L=8, D=16, layers=1, heads=2, mlp=0, norm="pre", pos="rope", rope="interleaved",
         fraction=0.75, base=100.0, B=2, T=8, targets="next", runs=[ADAMW_WD],
         covers="rope, interleaved, 6 of 8 dims turn, rope_base 100, T = max_len"),
    case(V=9, L=8, D=16, layers=2, heads=4, kv=2, mlp=0, norm="pre", pos="rope", rope="half",
         window=3, B=2, T=8, targets="next", runs=[ADAMW_WD], covers="rope with a window of 3 and "
         "grouped-query attention, T = max_len"),
    # Attention sinks (gpt-oss): d sink_h = -sum over rows of p_sink (sum_j P_ij dP_ij), and AdamW
    # steps and decays the sinks as every parameter.
    case(V=8, L=6, D=6, layers=2, heads=3, mlp=6, norm="pre", pos="learned", sinks=True, B=2,
         T=6, targets="next", runs=[ADAMW_WD_98, SGD], covers="attention sinks, pre-norm with MLP, "
         "T = max_len; AdamW with weight decay 0.1 and SGD"),
    case(V=8, L=6, D=8, layers=2, heads=4, kv=2, mlp=0, norm="pre", pos="alibi", window=3,
         sinks=True, B=2, T=6, targets="some", gates=[[1.0, 0.0, 2.0, 0.5], [0.5, 1.0, 1.0, 1.0]],
         runs=[ADAMW_CLIP_SOME], covers="sinks with ALiBi, a window of 3, grouped-query attention "
         "and head gates; AdamW clipping at some steps"),
    case(V=8, L=6, D=8, layers=1, heads=2, mlp=8, norm="none", pos="rope", rope="interleaved",
         sinks=True, causal=False, bias=False, act="relu", B=3, T=6, targets="all",
         runs=[SGD_CLIP_SOME, ADAMW_NO_WD], covers="sinks with rotary positions, non-causal, no "
         "bias, no LayerNorm, T = max_len"),
    case(V=8, L=6, D=8, layers=1, heads=2, mlp=0, norm="post", pos="learned", sinks=True, B=2,
         T=1, targets="all", runs=[ADAMW_WD], covers="sinks with T = 1: each row one key and the "
         "sink"),
]


def zero_gradient_bias(c):
    """The entries of a layer's in_proj_bias whose gradient is zero in exact arithmetic (the
    README's note): the key bias, k = W_k x + b_k adding q . b_k to every score of a row, which
    softmax ignores. With rotary positions that holds only for the key dims that do not turn (a
    turned b_k differs from key to key); the turned ones have a real gradient. With attention
    sinks none is zero: the sink's logit does not move with q . b_k."""
    D = c["d_model"]
    if c.get("attn_sinks"):
        return torch.zeros(3 * D, dtype=torch.bool)
    zero = torch.zeros(3 * D, dtype=torch.bool)
    if c["positions"] != "rope":
        zero[D:2 * D] = True
        return zero
    dh, r = D // c["n_heads"], tt.rope_dims(c)
    Dkv = (c.get("n_kv_heads") or c["n_heads"]) * dh
    zero = torch.zeros(D + 2 * Dkv, dtype=torch.bool)
    for g in range(Dkv // dh):
        zero[D + g * dh + r:D + (g + 1) * dh] = True
    return zero


# ----------------------------------------------------------------------------------------------
# Weights and batches
# ----------------------------------------------------------------------------------------------


def make_batch(spec, gen):
    c = spec["config"]
    V, B, T, mode = c["vocab_size"], spec["B"], spec["T"], spec["targets"]
    assert 1 <= B <= 3 and 1 <= T <= c["max_len"]
    if mode == "induction":
        half = T // 2
        first = torch.randint(0, V, (B, half), generator=gen)
        tokens = torch.cat([first, first, first[:, : T - 2 * half]], dim=1)
    else:
        tokens = torch.randint(0, V, (B, T), generator=gen)
    if mode in ("next", "induction"):
        targets = torch.roll(tokens, -1, dims=1)
        targets[:, -1] = IGNORE
    else:
        targets = torch.randint(0, V, (B, T), generator=gen)
        if mode == "some":
            targets[torch.rand((B, T), generator=gen) < 0.25] = IGNORE
            flat = targets.view(-1)
            if B * T > 1 and not (flat == IGNORE).any():
                flat[int(torch.randint(0, B * T, (1,), generator=gen))] = IGNORE
            if not (flat != IGNORE).any():
                flat[-1] = int(torch.randint(0, V, (1,), generator=gen))
        elif mode == "one":
            keep = int(torch.randint(0, B * T, (1,), generator=gen))
            kept = int(targets.view(-1)[keep])
            targets.fill_(IGNORE)
            targets.view(-1)[keep] = kept
        else:
            assert mode == "all", mode
    assert (targets != IGNORE).any(), spec["name"] + ": every target is -100"
    return tokens, targets


def make_batches(spec, gen, first):
    """STEPS batches: the case's batch first, then distinct new draws of the same kind."""
    batches = [first]
    while len(batches) < STEPS:
        b = make_batch(spec, gen)
        if all(not (torch.equal(b[0], o[0]) and torch.equal(b[1], o[1])) for o in batches):
            batches.append(b)
    return batches


# ----------------------------------------------------------------------------------------------
# Gradients and optimizer runs
# ----------------------------------------------------------------------------------------------

def model_from(c, sd, dtype):
    """A fresh module of the config holding sd's values in dtype (the float64 module is built
    as float64: its sinusoidal table is the float64 buffer, never rounded to float32)."""
    m = tt.TinyTransformer(**c)
    m = m.double() if dtype == torch.float64 else m.float()
    m.load_state_dict({k: torch.as_tensor(v).to(dtype) for k, v in sd.items()})
    if c["positions"] == "sinusoidal" and dtype == torch.float64:
        assert m.pe.dtype == torch.float64 and torch.equal(m.pe, tt.sinusoidal(c["max_len"],
                                                                              c["d_model"]))
    names = [n for n, _ in m.named_parameters()]
    # Tied, the state_dict also holds unembed.weight: the same Parameter as tok_embed.weight, which
    # named_parameters() lists once.
    tied = c.get("tie_embeddings", False)
    assert (m.unembed.weight is m.tok_embed.weight) == tied
    assert [k for k in m.state_dict() if not (tied and k == "unembed.weight")] == names, \
        "state_dict holds more than the parameters"
    for p in m.parameters():
        assert p.dtype == dtype
    return m


def gradients(model, tokens, targets, gates, dtype):
    """(loss, {name: grad}, gate grads, logits) of one forward and backward. gates None: the
    gradient of the gates is taken at all ones."""
    c = model.c
    g = (torch.ones(c["n_layers"], c["n_heads"], dtype=dtype) if gates is None
         else torch.tensor(gates, dtype=dtype)).requires_grad_(True)
    model.zero_grad(set_to_none=True)
    logits, _ = model(tokens, g)
    loss = tt.loss_fn(logits, targets)
    loss.backward()
    grads = {}
    for n, p in model.named_parameters():
        assert p.grad is not None and p.grad.dtype == dtype, n
        grads[n] = p.grad.detach().clone()
    assert g.grad is not None
    return loss.detach(), grads, g.grad.detach().clone(), logits.detach()


def total_norm(params):
    """clip_grad_norm_'s total norm (torch 1.13, norm_type 2), without modifying anything."""
    return torch.norm(torch.stack([torch.norm(p.grad.detach(), 2.0) for p in params]), 2.0)


def run_optimizer(c, sd, opt_cfg, batches, dtype):
    """STEPS steps from sd: (losses, grad norms, clipped, state_dict after)."""
    model = model_from(c, sd, dtype).train()
    params = list(model.parameters())
    if opt_cfg["type"] == "adamw":
        opt = torch.optim.AdamW(params, lr=opt_cfg["lr"], betas=tuple(opt_cfg["betas"]),
                                eps=opt_cfg["eps"], weight_decay=opt_cfg["weight_decay"],
                                foreach=False)
    else:
        assert opt_cfg["type"] == "sgd"
        opt = torch.optim.SGD(params, lr=opt_cfg["lr"], momentum=0, weight_decay=0,
                              foreach=False)
    clip = opt_cfg["clip_grad_norm"]
    losses, norms, clipped = [], [], []
    for tokens, targets in batches:
        opt.zero_grad(set_to_none=True)
        logits, _ = model(tokens)
        loss = tt.loss_fn(logits, targets)
        loss.backward()
        norm = total_norm(params)
        if clip > 0:
            got = torch.nn.utils.clip_grad_norm_(params, clip)
            assert torch.equal(got, norm)
            clipped.append(bool(clip / (float(norm) + 1e-6) < 1))
        else:
            clipped.append(False)
        opt.step()
        losses.append(float(loss))
        norms.append(float(norm))
    after = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return losses, norms, clipped, after


def resolve_clip(c, sd, opt_cfg, batches, what):
    """Fills in a "some" or "always" clipping norm from an unclipped float64 run's step norms."""
    mode = opt_cfg["clip_grad_norm"]
    if mode not in (SOME, ALWAYS):
        return opt_cfg
    _, norms, _, _ = run_optimizer(c, sd, {**opt_cfg, "clip_grad_norm": 0}, batches,
                                   torch.float64)
    s = sorted(norms)
    if mode == ALWAYS:
        candidates = [0.5 * s[0]]
    else:
        # Between two neighbouring step norms, the widest gaps first.
        gaps = sorted(range(STEPS - 1), key=lambda i: (-(s[i + 1] / s[i]), i))
        candidates = [math.sqrt(s[i] * s[i + 1]) for i in gaps]
    for cand in candidates:
        for digits in (2, 3):
            clip = float(f"{cand:.{digits}g}")
            cfg = {**opt_cfg, "clip_grad_norm": clip}
            _, n2, clipped, _ = run_optimizer(c, sd, cfg, batches, torch.float64)
            ok = min(abs(n - clip) / clip for n in n2) >= CLIP_MARGIN
            ok = ok and (all(clipped) if mode == ALWAYS else any(clipped) and not all(clipped))
            if ok:
                return cfg
    raise AssertionError(f"{what}: no clipping norm for {mode!r} from step norms {norms}")


# ----------------------------------------------------------------------------------------------
# JSON
# ----------------------------------------------------------------------------------------------

def nested(t):
    """Nested lists of Python floats (written with repr: the float64's shortest round trip)."""
    a = np.asarray(t.detach().double().numpy() if torch.is_tensor(t) else t, dtype=np.float64)
    assert np.isfinite(a).all()
    return a.tolist()


def render(doc):
    """Top-level keys one per line; state_dict, grads, runs, batches and state_dict_after
    entries one per line."""
    lines = ["{"]

    def entries(d, indent):
        items = list(d.items())
        for i, (k, v) in enumerate(items):
            lines.append(f"{indent}{dumps(k)}: {dumps(v)}" + ("," if i + 1 < len(items) else ""))

    for key in DOC_KEYS:
        v = doc[key]
        comma = "," if key != DOC_KEYS[-1] else ""
        if key == "config":
            lines.append(f'"config": {json.dumps(v, allow_nan=False)},')
        elif key in ("state_dict", "grads"):
            lines.append(f'"{key}": {{')
            entries(v, "  ")
            lines.append("}" + comma)
        elif key == "runs":
            lines.append('"runs": [')
            for r, run in enumerate(v):
                lines.append(f'  {{"optimizer": {json.dumps(run["optimizer"], allow_nan=False)},')
                lines.append('   "batches": [')
                for b, batch in enumerate(run["batches"]):
                    lines.append(f'     {{"tokens": {dumps(batch["tokens"])}, '
                                 f'"targets": {dumps(batch["targets"])}}}'
                                 + ("," if b + 1 < len(run["batches"]) else ""))
                lines.append("   ],")
                for k in ("losses", "grad_norms", "clipped"):
                    lines.append(f'   "{k}": {dumps(run[k])},')
                lines.append('   "state_dict_after": {')
                entries(run["state_dict_after"], "     ")
                lines.append("   }}" + ("," if r + 1 < len(v) else ""))
            lines.append("]" + comma)
        else:
            lines.append(f"{dumps(key)}: {dumps(v)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def build_doc(spec):
    c = spec["config"]
    model32, gen = build_model32(spec)
    sd32 = {k: v.detach().clone() for k, v in model32.state_dict().items()}
    tokens, targets = make_batch(spec, gen)
    batches = make_batches(spec, gen, (tokens, targets))
    gates = spec["gates"]
    if gates is not None:
        assert len(gates) == c["n_layers"] and all(len(g) == c["n_heads"] for g in gates)

    model64 = model_from(c, sd32, torch.float64)
    for k, v in model64.state_dict().items():  # float32 -> float64 is exact
        assert torch.equal(v, sd32[k].double()), k
    loss, grads, gate_grads, logits = gradients(model64, tokens, targets, gates, torch.float64)
    assert math.isfinite(float(loss))

    # No gates is the forward of gates all ones, exactly (logits, loss, parameter gradients).
    with torch.no_grad():
        plain, _ = model64(tokens)
        ones, _ = model64(tokens, torch.ones(c["n_layers"], c["n_heads"], dtype=torch.float64))
    assert torch.equal(plain, ones), spec["name"] + ": no gates != gates all ones"
    if gates is None:
        assert torch.equal(plain, logits)
        model64.zero_grad(set_to_none=True)
        l2 = tt.loss_fn(model64(tokens)[0], targets)
        l2.backward()
        assert torch.equal(l2.detach(), loss)
        for n, p in model64.named_parameters():
            assert torch.equal(p.grad, grads[n]), (spec["name"], n)

    runs = []
    for r, opt_cfg in enumerate(spec["runs"]):
        opt_cfg = resolve_clip(c, sd32, dict(opt_cfg), batches, f"{spec['name']} run {r}")
        losses, norms, clipped, after = run_optimizer(c, sd32, opt_cfg, batches, torch.float64)
        mode = spec["runs"][r]["clip_grad_norm"]
        if mode == SOME:
            assert any(clipped) and not all(clipped), (spec["name"], r, clipped)
        elif mode == ALWAYS:
            assert all(clipped), (spec["name"], r, clipped)
        else:
            assert not any(clipped)
        assert all(math.isfinite(x) for x in losses + norms)
        runs.append({"optimizer": opt_cfg,
                     "batches": [{"tokens": t.tolist(), "targets": y.tolist()} for t, y in batches],
                     "losses": losses, "grad_norms": norms, "clipped": clipped,
                     "state_dict_after": {k: nested(v) for k, v in after.items()}})

    doc = {"name": spec["name"], "config": {k: c[k] for k in config_keys(c)},
           "state_dict": {k: nested(v) for k, v in sd32.items()},
           "tokens": tokens.tolist(), "targets": targets.tolist(),
           "head_gates": None if gates is None else [[float(g) for g in row] for row in gates],
           "loss": float(loss), "grads": {k: nested(v) for k, v in grads.items()},
           "head_gate_grads": nested(gate_grads), "runs": runs}
    return doc


# ----------------------------------------------------------------------------------------------
# Checking a written file
# ----------------------------------------------------------------------------------------------

def refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


def as_array(x):
    a = np.asarray(x, dtype=np.float64)
    assert np.isfinite(a).all()
    return a


def read_tokens(x, c, what, targets=False):
    a = np.asarray(x)
    assert a.dtype.kind == "i" and a.ndim == 2, what
    B, T = a.shape
    assert 1 <= B and 1 <= T <= c["max_len"], what
    if targets:
        assert ((a == IGNORE) | ((a >= 0) & (a < c["vocab_size"]))).all(), what
        assert (a != IGNORE).any(), what + ": every target is -100"
    else:
        assert a.min() >= 0 and a.max() < c["vocab_size"], what
    return torch.tensor(a, dtype=torch.long)


def same_tensors(got, want, what):
    """got: {name: tensor}; want: {name: nested lists}: same keys, order and bits."""
    assert list(got) == list(want), what
    for k, v in got.items():
        w = as_array(want[k])
        assert w.shape == tuple(v.shape), (what, k, w.shape, tuple(v.shape))
        assert np.array_equal(v.double().numpy(), w), f"{what}: {k} does not replay"


def relative_error(got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    scale = float(np.abs(want).max()) if want.size else 0.0
    if scale < GRAD32_SKIP:
        return None
    return float(np.abs(got - want).max()) / scale


def check_file(path, spec):
    """Re-reads the file and replays it; returns facts for the README."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    size = len(text.encode("utf-8"))
    assert size <= MAX_FILE_BYTES, f"{path}: {size} bytes > {MAX_FILE_BYTES}"
    doc = json.loads(text, parse_constant=refuse_constant)
    assert list(doc) == DOC_KEYS, list(doc)
    assert render(doc) == text, f"{path}: reading and rewriting the file changes it"
    assert doc["name"] == spec["name"] == os.path.basename(path)[:-5]
    c = doc["config"]
    assert list(c) == config_keys(c) and c == spec["config"], c
    name = spec["name"]

    # The state_dict: the module's state_dict() keys in order (its parameters, in
    # named_parameters() order, and a tied unembed.weight), float32 values.
    ref = tt.TinyTransformer(**c)
    names = list(ref.state_dict())
    assert list(doc["state_dict"]) == names, (list(doc["state_dict"]), names)
    if c.get("tie_embeddings"):
        assert doc["state_dict"]["unembed.weight"] == doc["state_dict"]["tok_embed.weight"]
        assert "unembed.weight" not in doc["grads"]
    sd = {}
    for k, v in doc["state_dict"].items():
        a = as_array(v)
        assert a.shape == tuple(ref.state_dict()[k].shape), k
        assert np.array_equal(a.astype(np.float32).astype(np.float64), a), k + ": not float32"
        sd[k] = torch.tensor(a, dtype=torch.float64)

    tokens = read_tokens(doc["tokens"], c, "tokens")
    targets = read_tokens(doc["targets"], c, "targets", targets=True)
    assert tokens.shape == targets.shape
    gates = doc["head_gates"]
    if gates is not None:
        assert as_array(gates).shape == (c["n_layers"], c["n_heads"])
    assert as_array(doc["head_gate_grads"]).shape == (c["n_layers"], c["n_heads"])

    # Loss and gradients replay bit for bit in float64.
    m64 = model_from(c, sd, torch.float64)
    loss, grads, gate_grads, _ = gradients(m64, tokens, targets, gates, torch.float64)
    assert float(loss) == doc["loss"], f"{name}: loss does not replay"
    same_tensors(grads, doc["grads"], f"{name} grads")
    assert np.array_equal(gate_grads.numpy(), as_array(doc["head_gate_grads"])), name

    # The float32 module agrees within GRAD32_TOL per tensor.
    m32 = model_from(c, sd, torch.float32)
    loss32, grads32, gate_grads32, _ = gradients(m32, tokens, targets, gates, torch.float32)
    e = abs(float(loss32) - doc["loss"]) / abs(doc["loss"])
    assert e <= LOSS32_TOL, f"{name}: float32 loss off by {e}"
    worst, worst_at = 0.0, ""
    pairs = [(k, grads32[k], doc["grads"][k]) for k in grads32]
    pairs.append(("head_gate_grads", gate_grads32, doc["head_gate_grads"]))
    for k, got, want in pairs:
        e = relative_error(got.double().numpy(), as_array(want))
        if e is None:
            continue
        assert e <= GRAD32_TOL, f"{name}: float32 gradient of {k} off by {e:.2e}"
        if e > worst:
            worst, worst_at = e, k

    # The key-bias gradient (zero in exact arithmetic) in both precisions, for the README.
    noise = None
    if c["bias"]:
        D = c["d_model"]
        keys = [f"blocks.{l}.attn.in_proj_bias" for l in range(c["n_layers"])]
        zb = zero_gradient_bias(c)[:grads[keys[0]].numel()]  # (as [D:2 D] clips it)
        if zb.any():
            noise = (max(float(grads[k][zb].abs().max()) for k in keys),
                     max(float(grads32[k][zb].abs().max()) for k in keys),
                     max(float(grads32[k][zb].abs().max() / grads[k].abs().max()) for k in keys))

    # Every run replays bit for bit.
    assert len(doc["runs"]) >= 1
    runs = []
    for r, run in enumerate(doc["runs"]):
        what = f"{name} run {r}"
        assert list(run) == RUN_KEYS, list(run)
        o = run["optimizer"]
        if o["type"] == "adamw":
            assert list(o) == ["type", "lr", "betas", "eps", "weight_decay", "clip_grad_norm"]
        else:
            assert list(o) == ["type", "lr", "clip_grad_norm"] and o["type"] == "sgd"
        assert len(run["batches"]) == STEPS
        batches = []
        for b in run["batches"]:
            assert list(b) == ["tokens", "targets"]
            t = read_tokens(b["tokens"], c, what + " tokens")
            y = read_tokens(b["targets"], c, what + " targets", targets=True)
            assert t.shape == y.shape
            assert all(not (torch.equal(t, t2) and torch.equal(y, y2)) for t2, y2 in batches), \
                what + ": two batches are the same"
            batches.append((t, y))
        losses, norms, clipped, after = run_optimizer(c, sd, o, batches, torch.float64)
        assert losses == run["losses"] and norms == run["grad_norms"], what
        assert clipped == run["clipped"], what
        if o["clip_grad_norm"] == 0:
            assert not any(clipped)
        same_tensors(after, run["state_dict_after"], what + " state_dict_after")
        # The float32 run: the same clipping decisions; its distance from the float64 run, in
        # units of lr, on the entries whose gradient is zero in exact arithmetic (the README's
        # note) and on the others.
        _, _, clipped32, after32 = run_optimizer(c, sd, o, batches, torch.float32)
        assert clipped32 == clipped, what + ": float32 clips at other steps"
        T = batches[0][0].shape[1]
        assert all(t.shape[1] == T for t, _ in batches)
        zero_dev, other_dev = 0.0, 0.0
        for k in after:
            d = (after32[k].double() - after[k]).abs()
            zero = torch.zeros(d.shape, dtype=torch.bool)
            D = c["d_model"]
            if k.endswith(".attn.in_proj_bias"):
                zero[zero_gradient_bias(c)[:zero.numel()]] = True
            if T == 1 and not c.get("attn_sinks") and k.endswith((".attn.in_proj_bias",
                                                                   ".attn.in_proj_weight")):
                zero[:2 * D] = True  # (one key: softmax is constant, unless a sink is beside it)
            if zero.any():
                zero_dev = max(zero_dev, float(d[zero].max()))
            if (~zero).any():
                other_dev = max(other_dev, float(d[~zero].max()))
        zero_dev, other_dev = zero_dev / o["lr"], other_dev / o["lr"]
        assert zero_dev <= STEPS, f"{what}: float32 zero-gradient entries off by {zero_dev} lr"
        assert other_dev <= RUN32_OTHER_TOL, f"{what}: float32 run off by {other_dev} lr"
        runs.append(dict(optimizer=o, clipped=clipped, zero_dev=zero_dev, other_dev=other_dev))
    return dict(size=size, worst=worst, worst_at=worst_at, runs=runs, noise=noise, T=T,
                counted=int((targets != IGNORE).sum()), total=targets.numel())


# ----------------------------------------------------------------------------------------------
# Cross-entropy of given logits (loss/cross-entropy-rows.json)
# ----------------------------------------------------------------------------------------------
# Rows of logits where the loss's order of operations matters: max + log(sum exp(x - max)) - x[t]
# loses log(sum) to rounding once |max| is large (ten equal logits of 7.6e22 gave 0, not ln 10),
# log(sum) - (x[t] - max) does not. No model: the logits are given, so an engine's loss can be
# held to torch's on exactly these rows (a model with unembed.weight 0 and unembed.bias a row
# gives that row at every position).

LOSS_DIR = "loss"
LOSS_FILE = "cross-entropy-rows.json"
LOSS_KEYS = ["name", "logits", "targets", "loss", "row_losses", "grad"]


def f32(x):
    """x rounded to float32, as a Python float (exact in float64)."""
    return float(np.float32(x))


def f32_next(x, toward):
    return float(np.nextafter(np.float32(x), np.float32(toward)))


BIG = f32(7.6e22)
FLOAT_MAX = float(np.finfo(np.float32).max)


def loss_case(name, rows, targets, covers):
    return dict(name=name, logits=[[f32(x) for x in r] for r in rows], targets=targets,
                covers=covers)


def ordinary_rows():
    gen = torch.Generator().manual_seed(zlib.crc32(b"cross-entropy-ordinary"))
    rows = (torch.randn(4, 28, generator=gen, dtype=torch.float64) * 3).tolist()
    return rows, [int(torch.randint(0, 28, (1,), generator=gen)) for _ in range(3)] + [IGNORE]


LOSS_CASES = [
    loss_case("equal-7.6e22-v10", [[7.6e22] * 10], [3],
              "ten equal logits of 7.6e22: ln 10 (the old order of operations gave 0)"),
    loss_case("equal-float-max-v10", [[FLOAT_MAX] * 10], [0],
              "ten equal logits at float32's largest value: ln 10"),
    loss_case("equal-minus-7.6e22-v7", [[-7.6e22] * 7], [6], "seven equal logits of -7.6e22: ln 7"),
    loss_case("equal-1e16-v28", [[1e16] * 28], [27],
              "28 equal logits of 1e16: ln 28 (the old order gave 4: 1e16's ulp in float64 is 2)"),
    loss_case("spread-1e30-v5", [[1e30, -1e30, 0.0, 1e30, 5e29]] * 3, [1, 0, IGNORE],
              "logits 2e30 apart: a target 2e30 below the max (loss 2e30 + ln 2), one at a "
              "tied max (ln 2), an ignored row"),
    loss_case("spread-float-max-v3", [[FLOAT_MAX, -FLOAT_MAX, 0.0]] * 3, [0, 2, 1],
              "float32's whole range: targets at the max (0), 3.4e38 below it and 6.8e38 below "
              "it (beyond float32: torch's float32 loss is inf there; the float64 loss, and "
              "headscope's double one, is 6.8e38)"),
    loss_case("ulp-apart-7.6e22-v4",
              [[BIG, f32_next(BIG, math.inf), f32_next(BIG, -math.inf), BIG]] * 3, [1, 0, 2],
              "logits one float32 ulp apart at 7.6e22 (2^53): exp of the differences is 0, "
              "the losses are the differences"),
    loss_case("ordinary-v28", *ordinary_rows(),
              "ordinary logits (N(0, 9)), one ignored row: the numbers the reordering keeps"),
]


def build_loss_doc():
    cases = []
    for spec in LOSS_CASES:
        logits = torch.tensor(spec["logits"], dtype=torch.float64, requires_grad=True)
        targets = torch.tensor(spec["targets"], dtype=torch.int64)
        assert all(math.isfinite(x) and f32(x) == x for r in spec["logits"] for x in r)
        assert (targets != IGNORE).any()
        loss = F.cross_entropy(logits, targets, ignore_index=IGNORE)
        loss.backward()
        row_losses = F.cross_entropy(logits.detach(), targets, ignore_index=IGNORE,
                                     reduction="none")
        cases.append({"name": spec["name"], "logits": spec["logits"], "targets": spec["targets"],
                      "loss": float(loss), "row_losses": nested(row_losses),
                      "grad": nested(logits.grad)})
    return {"name": "cross-entropy-rows", "cases": cases}


def render_loss(doc):
    """One case per line."""
    lines = ["{", f'"name": {dumps(doc["name"])},', '"cases": [']
    for i, c in enumerate(doc["cases"]):
        assert list(c) == LOSS_KEYS
        lines.append("  " + dumps(c) + ("," if i + 1 < len(doc["cases"]) else ""))
    lines += ["]", "}"]
    return "\n".join(lines) + "\n"


def check_loss_file(path):
    """Re-reads the file and replays it bit for bit in float64; torch's float32 loss must agree
    within 1e-6 relative, or be inf where a row's float64 loss is beyond float32's range. Returns
    the README rows."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    assert [c["name"] for c in doc["cases"]] == [s["name"] for s in LOSS_CASES]
    rows = []
    for c, spec in zip(doc["cases"], LOSS_CASES):
        logits = torch.tensor(c["logits"], dtype=torch.float64, requires_grad=True)
        targets = torch.tensor(c["targets"], dtype=torch.int64)
        loss = F.cross_entropy(logits, targets, ignore_index=IGNORE)
        loss.backward()
        assert float(loss) == c["loss"], c["name"]
        assert logits.grad.tolist() == c["grad"], c["name"]
        loss32 = float(F.cross_entropy(logits.detach().float(), targets, ignore_index=IGNORE))
        if max(abs(x) for x in c["row_losses"]) > FLOAT_MAX:  # a row's loss beyond float32
            assert loss32 == math.inf, c["name"]
        else:
            assert abs(loss32 - c["loss"]) <= 1e-6 * max(1.0, abs(c["loss"])), c["name"]
        rows.append((c, spec["covers"], loss32))
    return rows


def write_loss_file(out):
    os.makedirs(os.path.join(out, LOSS_DIR), exist_ok=True)
    path = os.path.join(out, LOSS_DIR, LOSS_FILE)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(render_loss(build_loss_doc()))
    return check_loss_file(path)


LOSS_README = """
## Cross-entropy of given logits: `loss/cross-entropy-rows.json`

No model: rows of logits given directly, where the loss's order of operations shows.
`max + log(sum(exp(x - max))) - x[t]` rounds `log(sum)` away once `|max|` is large (ten equal
logits of 7.6e22 gave a loss of 0, torch ln 10); `log(sum) - (x[t] - max)` does not. The file
is `{{"name", "cases": [...]}}`, one case per line, each with exactly these keys in this order:

| key | value |
| --- | --- |
| `name` | the case name |
| `logits` | `[[float]]`, (P, V): float32 values, written as their exact float64 |
| `targets` | `[int]`, (P): in [0, V), or `-100` (ignore_index); never all `-100` |
| `loss` | `F.cross_entropy(logits, targets, ignore_index=-100)` in float64 (the mean) |
| `row_losses` | the same with `reduction='none'`, (P): 0 for ignored rows |
| `grad` | d loss / d logits in float64, (P, V) |

The script replays each case bit for bit and checks torch's float32 loss on the same logits:
within 1e-6 relative, or inf where a row's float64 loss is beyond float32's range (torch's
float32 cross_entropy overflows there; a loss computed in double, as headscope's is, need not).
A model gives a case's row at every position with `unembed.weight` 0 and `unembed.bias` the row.

| case | P x V | float64 loss | torch float32 loss | covers |
| --- | --- | --- | --- | --- |
"""


def loss_readme(rows):
    body = "".join(f"| `{c['name']}` | {len(c['logits'])} x {len(c['logits'][0])} | "
                   f"{c['loss']!r} | {loss32!r} | {covers} |\n" for c, covers, loss32 in rows)
    return LOSS_README.format() + body


# ----------------------------------------------------------------------------------------------
# README
# ----------------------------------------------------------------------------------------------

def config_summary(c):
    parts = [f"V={c['vocab_size']}", f"max_len={c['max_len']}", f"D={c['d_model']}",
             f"layers={c['n_layers']}", f"heads={c['n_heads']}", f"d_mlp={c['d_mlp']}",
             c["norm"], c["positions"], "causal" if c["causal"] else "non-causal"]
    if c["d_mlp"] > 0:
        parts.append(c["act"])
    parts.append("bias" if c["bias"] else "no bias")
    if c["ln_eps"] != 1e-5:
        parts.append(f"ln_eps={c['ln_eps']:g}")
    if c.get("tie_embeddings"):
        parts.append("tied embeddings")
    if c.get("n_kv_heads") is not None:
        parts.append(f"n_kv_heads={c['n_kv_heads']}")
    if c.get("attn_window"):
        parts.append(f"attn_window={c['attn_window']}")
    if c.get("attn_sinks"):
        parts.append("attn_sinks")
    return " ".join(parts)


def inputs_summary(spec, info):
    s = f"B={spec['B']} T={spec['T']}, {info['counted']} of {info['total']} targets counted"
    if spec["gates"] is not None:
        s += ", gates " + " / ".join(", ".join(f"{g:g}" for g in row) for row in spec["gates"])
    return s


def run_summary(run):
    o = run["optimizer"]
    if o["type"] == "adamw":
        s = (f"AdamW lr {o['lr']:g} betas ({o['betas'][0]:g}, {o['betas'][1]:g}) "
             f"eps {o['eps']:g} wd {o['weight_decay']:g}")
    else:
        s = f"SGD lr {o['lr']:g}"
    if o["clip_grad_norm"] > 0:
        at = ",".join(str(i + 1) for i, x in enumerate(run["clipped"]) if x) or "none"
        s += f", clip {o['clip_grad_norm']:g} (clips steps {at})"
    return s


README_HEAD = """\
# Golden training cases

Each `*.json` here is one config of the reference module `tools/tiny_transformer.py` (the
project's contract) with PyTorch autograd's loss and gradients on one batch and
one or more 5-step optimizer runs (torch 1.13 AdamW or SGD, optionally with `clip_grad_norm_`)
from the same initial weights. This README and the cases are generated by
`tools/make_train_golden.py`; do not edit them by hand. Regenerate with

```sh
tools/setup.sh --golden                          # python3-torch, python3-numpy (Debian)
/usr/bin/python3 tools/make_train_golden.py      # from the repo root; --out DIR writes elsewhere
```

The script is deterministic (one seed per case, the crc32 of its name; one thread,
`torch.use_deterministic_algorithms(True)`): re-running it rewrites byte-identical files.

## File format

One JSON object per file, named `<name>.json`, with exactly these keys in this order:

| key | value |
| --- | --- |
| `name` | the case name (the file name without `.json`) |
| `config` | `vocab_size`, `max_len`, `d_model`, `n_layers`, `n_heads`, `d_mlp`, `norm`, `positions`, `causal`, `act`, `bias`, `ln_eps`: every key explicit, names as in `tests/golden/transformer`; then `tie_embeddings`, written only where it is true, `n_kv_heads` (grouped-query attention: `attn.in_proj_weight` [(H + 2 G) dh, D]) `attn_window` (sliding-window attention) and `attn_sinks` (attention sinks: `attn.sinks` [H] after `attn.in_proj_bias`), written only where given; `positions` may be `"alibi"` (ALiBi's bias, no position embedding) |
| `state_dict` | the initial weights: `{{key: nested lists}}`, keys in `state_dict()` order: `named_parameters()` order (the sinusoidal table is a non-persistent buffer and is not in it), and with `tie_embeddings` also `unembed.weight` (the same Parameter as `tok_embed.weight`: the same values, listed where torch's `state_dict()` lists it); shapes as PyTorch's; every value exactly a float32 |
| `tokens` | `[[int]]`, shape (B, T) |
| `targets` | `[[int]]`, shape (B, T); `-100` is ignore_index; never all `-100` |
| `head_gates` | `[[float]]` (n_layers, n_heads), or `null` for no gates |
| `loss` | the mean cross-entropy of `tokens`/`targets` under `state_dict` (with `head_gates`) |
| `grads` | d loss / d parameter for every parameter of `named_parameters()`: the keys, order and shapes of `state_dict` but a tied `unembed.weight`, whose Parameter is `tok_embed.weight` (its gradient, the sum over both uses, is listed once, there) |
| `head_gate_grads` | d loss / d head_gates, (n_layers, n_heads); with `head_gates` null, taken at gates all ones (whose forward is identical to no gates) |
| `runs` | a list of 1 or more optimizer runs, each from the initial `state_dict` (below) |

Each run has exactly these keys in this order:

| key | value |
| --- | --- |
| `optimizer` | `{{"type": "adamw", "lr", "betas": [b1, b2], "eps", "weight_decay", "clip_grad_norm"}}` or `{{"type": "sgd", "lr", "clip_grad_norm"}}`; `clip_grad_norm` is `0` for no clipping, else max_norm |
| `batches` | 5 × `{{"tokens": [[int]], "targets": [[int]]}}`: step s trains on `batches[s]`. The first batch is the case's `tokens`/`targets`; the other 4 are new draws of the same shape and kind, all 5 distinct. Runs of one case share the same batches. |
| `losses` | 5 floats: the loss of each step's batch before its update |
| `grad_norms` | 5 floats: the global L2 norm of all gradients before clipping (torch 1.13's `clip_grad_norm_` total norm: the norm of the per-tensor norms) |
| `clipped` | 5 bools: whether `clip_grad_norm_` scaled that step (`max_norm / (norm + 1e-6) < 1`); always present, all false when `clip_grad_norm` is 0 |
| `state_dict_after` | the parameters after the 5 steps: same keys, order and shapes as `state_dict` (a tied tensor is stepped once, as `model.parameters()` lists it once) |

Runs train without head gates. A step is `zero_grad`, forward, `loss_fn`, `backward`,
`clip_grad_norm_(model.parameters(), max_norm)` when `clip_grad_norm` > 0, `optimizer.step()`;
the optimizer is `torch.optim.AdamW(model.parameters(), lr, betas, eps, weight_decay,
foreach=False)` or `torch.optim.SGD(model.parameters(), lr, momentum=0, weight_decay=0,
foreach=False)`. Weight decay applies to every parameter (embeddings and LayerNorms included).

## How the numbers were made

- Initial weights are float32, made as `tools/make_transformer_golden.py` makes them: torch's
  default initialisation of the module under `torch.manual_seed(crc32(name))`, with the entries
  it leaves constant redrawn from a generator seeded with crc32 + 1 so that every parameter
  matters: `in_proj_bias` and `out_proj.bias` U(-0.5, 0.5) (torch: 0), LayerNorm weights
  U(0.5, 1.5) (torch: 1) and biases U(-0.25, 0.25) (torch: 0). Tokens, targets and the runs'
  batches come from the same generator.
- Everything else is float64: the float32-valued weights in a float64 module
  (`model.double()`; the sinusoidal table is its own float64 buffer), float64 autograd, and
  float64 optimizer runs. `loss`, `grads`, `head_gate_grads`, `losses`, `grad_norms` and
  `state_dict_after` are float64 values.
- Numbers are written with Python's `repr`, the shortest decimal that reads back as the same
  float64 (the state_dict's float32 values as their exact float64, so they read back exactly as
  a double and as a float). There are no non-finite numbers.
- Clipping norms are round numbers chosen from the step norms of an unclipped run: a run that
  clips "at some steps" has a max_norm between two of its step norms (the script asserts it
  clips at some steps and not at others), one that clips at every step half the smallest. Every
  step's norm is at least 1% away from max_norm, so a float32 engine clips at the same steps
  (the script checks that the float32 run does).

## Checks the script made

- The float64 forward with `head_gates` None equals the forward with gates all ones exactly
  (logits, loss and every parameter gradient).
- Each written file was read back, its `state_dict` loaded into a fresh float64 module, and its
  `loss`, `grads`, `head_gate_grads` and every run (`losses`, `grad_norms`, `clipped`,
  `state_dict_after`) replayed bit for bit.
- The float32 module on the same weights gives every gradient tensor (and `head_gate_grads`)
  within 1e-3 relative: max |g32 - g64| / max |g64| per tensor, skipping tensors whose float64
  max |g| is below 1e-12 (the worst per case is in the table); its loss within 1e-5 relative.
- The whole directory stays under 4 MB; each file under 1.5 MB.

## Note for test writers: entries whose gradient is zero in exact arithmetic

Some entries have a gradient that is exactly zero in exact arithmetic. Their float64
gradient is rounding noise (at most {n64:.0e} on the key bias here); float32's is larger
rounding noise ({n32lo:.0e} .. {n32hi:.0e}, {rello:.0e} .. {relhi:.0e} of the tensor's largest
gradient, in torch's float32 module on the cases here with T > 1 and bias). AdamW divides by
sqrt(v) + eps, so with eps 1e-8 the float32 noise becomes a step of up to about lr per step and
the float64 noise a step of about lr * 1e-9: after the 5 steps of a run the float32 entry can
be off from `state_dict_after` by more than lr (up to {zero:.1f} lr measured here), with no
effect on any loss. Tests should hold those entries of an AdamW run's `state_dict_after` to lr
per step (5 lr after the 5 steps), not to the float32 tolerance of the rest; their `grads`
entries are tiny in both precisions and pass any tolerance relative to the tensor's largest
gradient. SGD steps by lr * gradient, so for SGD the noise is negligible. The entries are:

- the key part of every `in_proj_bias`, rows [D, 2D): softmax is invariant to adding the same
  q·b_k to every score of a row;
- with T = 1 (one key per query, causal or not), the query and key rows of `in_proj_weight` and
  `in_proj_bias`, rows [0, 2D): softmax over one key is 1 whatever the score. PyTorch's softmax
  backward, y * (g - sum(y * g)), gives exactly 0 there in both precisions (so do the key-bias
  gradients with T = 1), but an engine that computes it another way may get noise.

Entries whose gradient is zero because they are not used at all (embedding rows of tokens or
positions a batch does not contain, heads gated 0) get exactly 0 in both precisions; AdamW
moves them by weight decay only.

The script checks the rule on its own float32 torch run of every optimizer run (same
clipping decisions asserted): the last column of the table gives max |float32 - float64| after
the 5 steps in units of lr, first over the entries above (asserted at most 5 lr) and then over
all other entries (asserted at most 0.01 lr; measured at most {other:.0e} lr). These are this
script's measurements, not bounds for another engine.

## Cases

| case | config | batch | runs | float32 grad rel. err. | float32 run off by (lr): zero-gradient entries / others |
| --- | --- | --- | --- | --- | --- |
"""


def check_coverage(rows):
    """The configs, batches and runs the brief of this directory asks for are all here."""
    cs = [spec["config"] for spec, _ in rows]
    have = lambda f: any(f(spec, info) for spec, info in rows)  # noqa: E731
    for norm in ("pre", "post", "none"):
        for pos in ("learned", "sinusoidal", "none"):
            assert any(c["norm"] == norm and c["positions"] == pos for c in cs), (norm, pos)
    assert {c["causal"] for c in cs} == {True, False} and {c["bias"] for c in cs} == {True, False}
    assert {c["act"] for c in cs if c["d_mlp"] > 0} == {"gelu", "relu"}
    assert any(c["d_mlp"] == 0 for c in cs) and any(c["d_mlp"] > 0 for c in cs)
    assert {1, 2, 3} <= {c["n_layers"] for c in cs} and {1, 2, 4} <= {c["n_heads"] for c in cs}
    assert any(c["n_heads"] == c["d_model"] for c in cs)
    assert any(c["ln_eps"] != 1e-5 for c in cs)
    tied = [(s, i) for s, i in rows if s["config"].get("tie_embeddings")]
    assert any(r["optimizer"]["type"] == "adamw" and r["optimizer"]["weight_decay"] > 0
               for _, i in tied for r in i["runs"]), "a tied case with AdamW weight decay"
    assert have(lambda s, i: s["T"] == 1) and have(lambda s, i: s["T"] == s["config"]["max_len"])
    assert have(lambda s, i: s["B"] == 1)
    kv = lambda c: c.get("n_kv_heads") or c["n_heads"]  # noqa: E731
    assert any(kv(c) == 1 < c["n_heads"] for c in cs), "multi-query"
    assert any(kv(c) == 2 < c["n_heads"] for c in cs), "grouped-query, 2 K/V heads"
    assert any(2 < kv(c) and 2 * kv(c) == c["n_heads"] for c in cs), "grouped-query, G = H/2"
    assert any(c["positions"] == "alibi" for c in cs), "ALiBi"
    assert any(c.get("attn_window") and c["causal"] for c in cs), "a causal window"
    assert any(c.get("attn_window") and not c["causal"] for c in cs), "a bidirectional window"
    assert any(c.get("attn_sinks") and c["causal"] for c in cs), "attention sinks, causal"
    assert any(c.get("attn_sinks") and not c["causal"] for c in cs), "attention sinks, non-causal"
    assert have(lambda s, i: s["gates"] is not None and min(map(min, s["gates"])) == 0
                and max(map(max, s["gates"])) > 1)
    assert sum(i["counted"] < i["total"] for _, i in rows) > len(rows) / 2, "-100 in most cases"
    assert have(lambda s, i: i["counted"] == 1 and i["total"] > 1)
    runs = [r["optimizer"] for _, i in rows for r in i["runs"]]
    adam = [o for o in runs if o["type"] == "adamw"]
    assert any(o["weight_decay"] > 0 and o["clip_grad_norm"] == 0 for o in adam)
    assert any(o["weight_decay"] == 0 for o in adam)
    assert any(o["clip_grad_norm"] > 0 for o in adam)
    assert {(0.9, 0.98), (0.9, 0.999)} <= {tuple(o["betas"]) for o in adam}
    sgds = [o for o in runs if o["type"] == "sgd"]
    assert any(o["clip_grad_norm"] == 0 for o in sgds)
    assert any(o["clip_grad_norm"] > 0 for o in sgds)
    assert all(1e-3 <= o["lr"] <= 5e-2 for o in runs) and len({o["lr"] for o in runs}) >= 4
    some = [r for _, i in rows for r in i["runs"] if any(r["clipped"]) and not all(r["clipped"])]
    assert any(r["optimizer"]["type"] == "adamw" for r in some)
    lab = [(s, i) for s, i in rows if s["name"].startswith("induction-lab")]
    assert len(lab) == 1 and lab[0][0]["config"] == dict(
        vocab_size=28, max_len=32, d_model=32, n_layers=2, n_heads=2, d_mlp=0, norm="pre",
        positions="learned", causal=True, act="gelu", bias=True, ln_eps=1e-5)
    assert lab[0][0]["B"] == 2 and lab[0][0]["T"] == 32
    lab_runs = [r["optimizer"] for r in lab[0][1]["runs"]]
    assert any(o["type"] == "adamw" and o["clip_grad_norm"] > 0 for o in lab_runs)
    assert any(o["type"] == "sgd" for o in lab_runs)
    for spec, _ in rows:
        if spec["name"].startswith("induction-lab"):
            continue
        c = spec["config"]
        assert 4 <= c["d_model"] <= 16 and 5 <= c["vocab_size"] <= 16 and c["max_len"] <= 12
        assert 1 <= spec["B"] <= 3 and 1 <= spec["T"] <= c["max_len"]


def write_readme(out, rows, loss_rows):
    body = []
    for spec, info in rows:
        runs = "; ".join(run_summary(r) for r in info["runs"])
        devs = "; ".join(f"{r['zero_dev']:.1e} / {r['other_dev']:.1e}" for r in info["runs"])
        body.append(f"| `{spec['name']}` | {config_summary(spec['config'])} | "
                    f"{inputs_summary(spec, info)} | {runs} | {info['worst']:.1e} | {devs} |\n")
    noise = [i["noise"] for _, i in rows if i["noise"] is not None and i["T"] > 1]
    zero = [r["zero_dev"] for _, i in rows for r in i["runs"] if r["optimizer"]["type"] == "adamw"]
    other = [r["other_dev"] for _, i in rows for r in i["runs"]]
    text = README_HEAD.format(
        n64=max(n[0] for n in noise), n32lo=min(n[1] for n in noise),
        n32hi=max(n[1] for n in noise), rello=min(n[2] for n in noise),
        relhi=max(n[2] for n in noise), zero=max(zero), other=max(other)) + "".join(body)
    text += loss_readme(loss_rows)
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


# ----------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden", "train"))
    args = ap.parse_args()
    torch.set_num_threads(1)  # one summation order, whatever the machine
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    names = [s["name"] for s in CASES]
    assert len(set(names)) == len(names), "duplicate case names"
    rows, total = [], 0
    for spec in CASES:
        doc = build_doc(spec)
        path = os.path.join(args.out, spec["name"] + ".json")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(render(doc))
        info = check_file(path, spec)
        rows.append((spec, info))
        total += info["size"]
        print(f"{spec['name']}: {info['size']} bytes; float32 grad rel. err. {info['worst']:.2e} "
              f"({info['worst_at']}); runs: "
              + "; ".join(f"{run_summary(r)} [float32 off by {r['zero_dev']:.1e} lr on "
                          f"zero-gradient entries, {r['other_dev']:.1e} lr elsewhere]"
                          for r in info["runs"]))
    assert total <= MAX_TOTAL_BYTES, f"{total} bytes: keep the training goldens small"
    check_coverage(rows)
    loss_rows = write_loss_file(args.out)
    write_readme(args.out, rows, loss_rows)
    stale = sorted(f for f in os.listdir(args.out)
                   if f.endswith(".json") and f[:-5] not in set(names))
    for f in stale:
        print(f"warning: {os.path.join(args.out, f)} is not a case of this script", file=sys.stderr)
    print(f"{len(CASES)} cases, {total} bytes")


if __name__ == "__main__":
    main()
