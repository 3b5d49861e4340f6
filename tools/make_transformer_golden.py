#!/usr/bin/python3
"""Generate headscope's golden transformer cases (tests/golden/transformer/*.json).

Run from the repository root with Debian's interpreter (the only one that has PyTorch):

    /usr/bin/python3 tools/make_transformer_golden.py [--out DIR]

(`tools/setup.sh --golden` installs python3-torch and python3-numpy.)

Each case is one forward pass of the reference module tools/tiny_transformer.py (the
project's contract) in the `"kind": "transformer"` format of docs/case-format.md:
config, the module's state_dict, tokens (and optionally targets and head gates), and the
expected logits, loss and every hook the module produces for that config.

How the numbers are made:
  * Weights are float32. Each case seeds torch with a number derived from its name
    (crc32) and builds the module with PyTorch's default initialisation, which leaves some
    entries constant: in_proj_bias and out_proj.bias are 0, LayerNorm weights 1 and biases 0.
    Those are then redrawn from a seeded generator (biases U(-0.5, 0.5), LayerNorm weights
    U(0.5, 1.5), LayerNorm biases U(-0.25, 0.25)) so that a test notices an engine that
    ignores them. Tokens, targets and the induction lab's repeated sequence come from the same
    seeded generator.
  * Expected values: the same float32 weights in a float64 module (`model.double()`, exact),
    run in float64. The sinusoidal table is the module's own float64 buffer.
  * Floats are written with repr (shortest round trip of the float64 value); -inf (the masked
    entries of hook_attn_scores) as the string "-inf". Unbatched cases ran with B = 1 and the
    file drops the batch axis of the logits and of every hook.

Each written file is checked before the next case: it is read back as JSON, its state_dict
loaded into a fresh float64 module, and that module's logits, loss and hooks must match the
file's to 1e-12 relative (max |a - b| / max |b| per tensor); the float32 module on the same
weights must match them to 1e-4 relative (the tolerance docs/case-format.md states), and the
file must stay under 1.5 MB. Re-running the script rewrites byte-identical files.
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

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import tiny_transformer as tt  # noqa: E402

SELF_CHECK_TOL = 1e-12  # the float64 module re-run from the written file
FLOAT32_TOL = 1e-4      # the float32 module vs the float64 expected values
MAX_FILE_BYTES = 1_500_000
IGNORE = -100

CONFIG_KEYS = ["vocab_size", "max_len", "d_model", "n_layers", "n_heads", "d_mlp", "norm",
               "positions", "causal", "act", "bias", "ln_eps"]
# Keys written only when they are not the default (so the files of the configs before them did not
# change when they were added).
OPTIONAL_KEYS = {"tie_embeddings": False, "n_kv_heads": None, "attn_window": 0,
                 "attn_sinks": False}


# positions "rope": its three keys, written (all three, defaults too) exactly when positions is
# "rope" (they must be at their defaults otherwise).
ROPE_KEYS = ["rope_layout", "rope_base", "rope_fraction"]


def config_keys(c):
    """The config's keys as a file writes them: CONFIG_KEYS, then each optional key not at its
    default, then the rope keys with positions "rope"."""
    keys = CONFIG_KEYS + [k for k, d in OPTIONAL_KEYS.items() if c.get(k, d) != d]
    return keys + (ROPE_KEYS if c["positions"] == "rope" else [])


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------

def config_name(c):
    """norm-positions[-layout[-fracF][-baseB]][-act][-nobias][-tied]-mlp|attn-only[-noncausal]
    -lL-hH[-kvG] (act only with an MLP; the rope parts with positions "rope")."""
    parts = [c["norm"], c["positions"]]
    if c["positions"] == "rope":
        parts.append(c["rope_layout"])
        if c["rope_fraction"] != 1.0:
            parts.append(f"frac{c['rope_fraction']:g}")
        if c["rope_base"] != 10000.0:
            parts.append(f"base{c['rope_base']:g}")
    if c["d_mlp"] > 0:
        parts.append(c["act"])
    if not c["bias"]:
        parts.append("nobias")
    if c.get("tie_embeddings"):
        parts.append("tied")
    parts.append("mlp" if c["d_mlp"] > 0 else "attn-only")
    if not c["causal"]:
        parts.append("noncausal")
    parts += [f"l{c['n_layers']}", f"h{c['n_heads']}"]
    if c.get("n_kv_heads") is not None:
        parts.append(f"kv{c['n_kv_heads']}")
    if c.get("attn_window"):
        parts.append(f"w{c['attn_window']}")
    if c.get("attn_sinks"):
        parts.append("sinks")
    return "-".join(parts)


def rope_config(pos, rope, base, fraction):
    """The rope keys of a case's config: rope = "half" | "interleaved" with pos "rope", else
    None (and no keys)."""
    assert (pos == "rope") == (rope is not None)
    return {} if rope is None else dict(rope_layout=rope, rope_base=base, rope_fraction=fraction)


def case(*, V, L, D, layers, heads, mlp, norm, pos, causal=True, act="gelu", bias=True,
         eps=1e-5, tie=False, kv=None, window=0, rope=None, base=10000.0, fraction=1.0,
         sinks=False, B, T,
         targets=None, gates=None, prefix="", suffix="", covers=""):
    """B None: unbatched tokens (T). targets: None | "next" (next token, last -100) | "some"
    (random, about a quarter -100) | "all" (random, none ignored) | "most" (all -100 but two) |
    "induction" (first half random, second half repeats it; next-token targets)."""
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
    shape = "unbatched" if B is None else f"b{B}"
    name = "-".join(p for p in (prefix, config_name(config), suffix, shape) if p)
    return dict(name=name, config=config, B=B, T=T, targets=targets, gates=gates, covers=covers)


CASES = [
    # Norm placements, position kinds, causal or not, activations, bias, MLP or attention only.
    case(V=7, L=8, D=4, layers=1, heads=1, mlp=0, norm="pre", pos="learned", B=2, T=5,
         targets="next", covers="the smallest default model: 1 layer, 1 head, attention only"),
    case(V=11, L=8, D=8, layers=1, heads=2, mlp=16, norm="pre", pos="learned", B=1, T=8,
         targets="some", suffix="t-max-len", covers="T = max_len, batched B = 1"),
    case(V=9, L=10, D=12, layers=3, heads=3, mlp=20, norm="post", pos="sinusoidal", act="relu",
         bias=False, B=2, T=7, targets="next", covers="post-norm with MLP (ln1 and ln2 after "
         "each residual add), sinusoidal, relu, no bias"),
    case(V=10, L=6, D=8, layers=2, heads=2, mlp=12, norm="none", pos="none", B=3, T=4,
         covers="no LayerNorm and no positions at all, B = 3, no targets"),
    case(V=7, L=6, D=8, layers=2, heads=2, mlp=8, norm="pre", pos="none", act="relu", B=2, T=6,
         targets="some", covers="pre-norm without positions"),
    case(V=10, L=8, D=8, layers=2, heads=2, mlp=16, norm="none", pos="learned", B=None, T=6,
         targets="some", covers="no LayerNorm, learned positions, unbatched with targets"),
    case(V=10, L=8, D=8, layers=2, heads=2, mlp=16, norm="pre", pos="learned", bias=False,
         B=2, T=7, targets="some", covers="bias=False in a pre-norm MLP model (LayerNorms keep "
         "their bias)"),
    case(V=10, L=8, D=8, layers=2, heads=4, mlp=8, norm="pre", pos="learned", act="relu",
         B=None, T=8, targets="next", covers="relu, unbatched, T = max_len"),
    case(V=10, L=8, D=8, layers=2, heads=2, mlp=0, norm="post", pos="learned", B=2, T=8,
         targets="some", covers="post-norm attention only (ln1 only, no ln2)"),
    case(V=8, L=6, D=4, layers=3, heads=1, mlp=8, norm="post", pos="learned", causal=False,
         bias=False, B=None, T=6, targets="some", covers="post-norm, non-causal, no bias, "
         "unbatched"),
    case(V=9, L=9, D=6, layers=3, heads=1, mlp=0, norm="pre", pos="sinusoidal", causal=False,
         bias=False, B=1, T=9, covers="pre-norm attention only, non-causal, sinusoidal, "
         "T = max_len"),
    # Non-causal.
    case(V=12, L=10, D=16, layers=2, heads=4, mlp=32, norm="pre", pos="learned", causal=False,
         B=2, T=10, targets="next", covers="non-causal (no -inf scores), T = max_len"),
    case(V=7, L=8, D=10, layers=1, heads=5, mlp=16, norm="none", pos="sinusoidal", causal=False,
         act="relu", B=1, T=6, covers="5 heads of dim 2, no LayerNorm, non-causal"),
    case(V=9, L=8, D=6, layers=2, heads=1, mlp=0, norm="post", pos="none", causal=False,
         bias=False, B=None, T=8, covers="post-norm without positions, non-causal, no bias"),
    # Odd sizes; sinusoidal tables with an odd d_model (the last column is a sin without a cos).
    case(V=5, L=7, D=6, layers=1, heads=3, mlp=10, norm="pre", pos="sinusoidal", B=None, T=7,
         targets="some", prefix="odd-v5-len7-d6", covers="odd sizes: d_model 6 with 3 heads "
         "of dim 2, vocab 5, max_len 7 = T, unbatched"),
    case(V=5, L=7, D=6, layers=2, heads=3, mlp=9, norm="post", pos="learned", causal=False,
         act="relu", B=2, T=6, targets="all", prefix="odd-v5-len7-d6",
         covers="odd sizes, post-norm, d_mlp 9, targets with no -100"),
    case(V=6, L=9, D=5, layers=1, heads=1, mlp=7, norm="pre", pos="sinusoidal", B=2, T=9,
         targets="next", prefix="odd-d5", covers="sinusoidal with odd d_model 5, T = max_len"),
    case(V=13, L=12, D=9, layers=2, heads=3, mlp=0, norm="none", pos="sinusoidal", causal=False,
         B=None, T=11, prefix="odd-d9", covers="sinusoidal with odd d_model 9, 3 heads of dim 3"),
    case(V=6, L=5, D=4, layers=1, heads=2, mlp=1, norm="post", pos="sinusoidal", act="relu",
         B=2, T=5, targets="next", prefix="mlp-width1", covers="d_mlp 1, T = max_len"),
    # T = 1, max_len = 1, vocab 2.
    case(V=8, L=6, D=4, layers=1, heads=2, mlp=8, norm="pre", pos="learned", B=None, T=1,
         targets="all", suffix="t1", covers="T = 1 unbatched: one position, one target"),
    case(V=8, L=5, D=6, layers=2, heads=2, mlp=0, norm="post", pos="sinusoidal", B=3, T=1,
         targets="some", suffix="t1", covers="T = 1 with B = 3"),
    case(V=4, L=1, D=4, layers=1, heads=2, mlp=4, norm="pre", pos="sinusoidal", B=2, T=1,
         targets="all", prefix="max-len1", covers="max_len 1 (sinusoidal row 0 only)"),
    case(V=2, L=6, D=4, layers=2, heads=1, mlp=4, norm="post", pos="learned", B=2, T=6,
         targets="all", prefix="vocab2", covers="vocab 2, T = max_len"),
    # Depth and heads.
    case(V=16, L=12, D=16, layers=1, heads=8, mlp=24, norm="pre", pos="learned", B=2, T=12,
         targets="next", covers="8 heads of dim 2, T = max_len"),
    case(V=10, L=6, D=8, layers=1, heads=8, mlp=0, norm="none", pos="learned", bias=False,
         B=1, T=6, covers="8 heads of dim 1, T = max_len"),
    case(V=11, L=8, D=8, layers=4, heads=2, mlp=16, norm="pre", pos="learned", B=2, T=8,
         targets="some", covers="4 layers, pre-norm"),
    case(V=9, L=7, D=12, layers=4, heads=4, mlp=0, norm="post", pos="sinusoidal", bias=False,
         B=None, T=7, covers="4 layers, post-norm attention only, unbatched"),
    case(V=10, L=6, D=8, layers=4, heads=1, mlp=6, norm="none", pos="none", causal=False,
         act="relu", B=1, T=5, covers="4 layers, no LayerNorm, no positions, non-causal"),
    case(V=24, L=16, D=48, layers=2, heads=6, mlp=64, norm="pre", pos="learned", B=1, T=12,
         targets="next", prefix="wide-d48", covers="a wider model: d_model 48, 6 heads of dim 8"),
    # Head gates (0, 0.5, 1, 2).
    case(V=10, L=8, D=16, layers=2, heads=4, mlp=16, norm="pre", pos="learned", B=2, T=6,
         targets="next", gates=[[0.0, 0.5, 1.0, 2.0], [2.0, 1.0, 0.5, 0.0]], suffix="gates",
         covers="head gates 0, 0.5, 1, 2 in both layers"),
    case(V=9, L=7, D=9, layers=3, heads=3, mlp=12, norm="post", pos="sinusoidal", act="relu",
         bias=False, B=None, T=7, gates=[[1.0, 0.0, 2.0], [0.5, 0.5, 1.0], [0.0, 0.0, 0.0]],
         suffix="gates", covers="gates unbatched; layer 2 switched off entirely (no bias: its "
         "attn_out is 0)"),
    case(V=8, L=6, D=8, layers=1, heads=2, mlp=0, norm="none", pos="none", causal=False,
         bias=False, B=3, T=5, gates=[[0.0, 2.0]], suffix="gates",
         covers="gates 0 and 2, non-causal, B = 3"),
    case(V=7, L=6, D=6, layers=2, heads=3, mlp=6, norm="pre", pos="sinusoidal", B=2, T=4,
         targets="some", gates=[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], suffix="gates-all-one",
         covers="gates all 1: the same numbers as no gates"),
    # Targets.
    case(V=12, L=10, D=8, layers=2, heads=2, mlp=16, norm="pre", pos="sinusoidal", B=3, T=10,
         targets="most", suffix="targets-mostly-ignored",
         covers="all targets -100 but two (the mean counts only those two)"),
    case(V=8, L=6, D=8, layers=1, heads=2, mlp=8, norm="pre", pos="learned", eps=0.01, B=1, T=6,
         targets="some", prefix="ln-eps-0.01", covers="ln_eps 0.01 (ln1, ln2, ln_final)"),
    # The induction-head lab's shape (tiny_transformer.py's smoke run).
    case(V=28, L=32, D=32, layers=2, heads=2, mlp=0, norm="pre", pos="learned", B=2, T=32,
         targets="induction", prefix="induction-lab",
         covers="the induction lab: vocab 28, max_len 32 = T, d_model 32, 2 layers, 2 heads, "
         "attention only; a random half then its repeat, next-token targets"),
    # Tied embeddings: unembed.weight is tok_embed.weight (the state_dict holds it under both).
    case(V=11, L=8, D=8, layers=2, heads=2, mlp=16, norm="pre", pos="learned", tie=True, B=2,
         T=7, targets="some", covers="tie_embeddings, pre-norm with MLP: logits = x "
         "tok_embed.weight^T + unembed.bias"),
    case(V=9, L=7, D=6, layers=2, heads=3, mlp=0, norm="post", pos="sinusoidal", bias=False,
         tie=True, B=None, T=7, targets="next", covers="tie_embeddings, post-norm attention only, "
         "no bias (logits = x tok_embed.weight^T), unbatched, T = max_len"),
    # Grouped-query and multi-query attention (n_kv_heads G < n_heads: in_proj_weight
    # [(H + 2 G) dh, D], hook_k / hook_v [B, G, T, dh]).
    case(V=11, L=8, D=16, layers=2, heads=4, kv=2, mlp=16, norm="pre", pos="learned", B=2, T=8,
         targets="next", covers="grouped-query, 2 K/V heads for 4 heads, pre-norm with MLP, "
         "T = max_len"),
    case(V=10, L=8, D=12, layers=2, heads=6, kv=3, mlp=0, norm="post", pos="sinusoidal",
         bias=False, B=None, T=7, targets="some", covers="grouped-query, G = H/2 = 3 of 6 heads "
         "(dim 2), post-norm attention only, no bias, unbatched"),
    case(V=9, L=6, D=8, layers=2, heads=4, kv=1, mlp=8, norm="none", pos="none", causal=False,
         act="relu", B=3, T=5, gates=[[0.0, 0.5, 1.0, 2.0], [1.0, 1.0, 0.0, 1.0]],
         suffix="gates", covers="multi-query (one K/V head), non-causal, no LayerNorm or "
         "positions, head gates"),
    case(V=8, L=6, D=8, layers=1, heads=2, kv=1, mlp=8, norm="pre", pos="learned", B=2, T=1,
         targets="all", suffix="t1", covers="multi-query with T = 1"),
    case(V=28, L=16, D=32, layers=2, heads=8, kv=2, mlp=0, norm="pre", pos="learned", B=1, T=16,
         targets="induction", prefix="induction-lab", covers="the induction lab's model with "
         "8 heads over 2 K/V heads (G = H/4: a KV cache 4x smaller), T = max_len = 16"),
    # ALiBi (positions "alibi": no position embedding, -(m_h |i - j|) on the scores; Press et
    # al.'s slopes, head counts that are not powers of two included) and sliding windows
    # (attn_window w: i - w < j <= i causal, |i - j| < w bidirectional).
    case(V=9, L=8, D=12, layers=2, heads=3, mlp=16, norm="pre", pos="alibi", B=2, T=7,
         targets="next", covers="ALiBi with 3 heads (slopes 2^-4, 2^-8, then 2^-2 of 4 heads)"),
    case(V=10, L=8, D=12, layers=2, heads=6, mlp=0, norm="post", pos="alibi", bias=False,
         B=None, T=8, targets="some", covers="ALiBi with 6 heads (4 + 2 of 8), post-norm "
         "attention only, unbatched, T = max_len"),
    case(V=12, L=10, D=16, layers=1, heads=8, mlp=16, norm="pre", pos="alibi", act="relu",
         B=2, T=10, targets="next", covers="ALiBi with 8 heads (2^-1 .. 2^-8), T = max_len"),
    case(V=9, L=9, D=24, layers=1, heads=12, mlp=0, norm="none", pos="alibi", B=1, T=9,
         gates=[[1.0, 0.0, 2.0, 1.0, 0.5, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 2.0]], suffix="gates",
         covers="ALiBi with 12 heads (8 + 4 of 16) of dim 2, no LayerNorm, head gates"),
    case(V=8, L=8, D=8, layers=2, heads=2, mlp=8, norm="pre", pos="alibi", causal=False,
         B=2, T=6, targets="some", covers="ALiBi non-causal: the symmetric -(m |i - j|)"),
    case(V=8, L=6, D=8, layers=2, heads=2, mlp=0, norm="pre", pos="alibi", B=None, T=1,
         targets="all", suffix="t1", covers="ALiBi with T = 1 (a bias of 0)"),
    case(V=9, L=8, D=8, layers=2, heads=2, mlp=8, norm="pre", pos="learned", window=1, B=2,
         T=7, targets="next", covers="window 1: each token sees only itself"),
    case(V=9, L=8, D=8, layers=2, heads=2, mlp=0, norm="post", pos="sinusoidal", window=2,
         B=None, T=8, targets="some", covers="window 2 (the token and the one before), "
         "sinusoidal, unbatched, T = max_len"),
    case(V=10, L=8, D=12, layers=2, heads=3, mlp=12, norm="pre", pos="learned", window=6, B=2,
         T=7, targets="next", covers="window T - 1 = 6: only the last token loses the first"),
    case(V=10, L=8, D=12, layers=2, heads=3, mlp=12, norm="pre", pos="learned", window=7, B=2,
         T=7, targets="next", covers="window T = 7: full causal attention (the numbers of the "
         "same model without a window)"),
    case(V=9, L=8, D=8, layers=2, heads=2, mlp=8, norm="pre", pos="learned", causal=False,
         window=2, B=2, T=8, targets="some", covers="bidirectional window 2: |i - j| < 2, "
         "three keys, T = max_len"),
    case(V=11, L=10, D=16, layers=2, heads=4, mlp=16, norm="pre", pos="alibi", window=3, B=2,
         T=10, targets="next", covers="ALiBi with window 3, T = max_len"),
    case(V=11, L=10, D=16, layers=2, heads=4, kv=2, mlp=0, norm="pre", pos="alibi", window=4,
         B=2, T=9, targets="next", covers="ALiBi, window 4 and grouped-query attention (2 K/V "
         "heads)"),
    case(V=9, L=8, D=12, layers=1, heads=6, kv=3, mlp=8, norm="none", pos="alibi",
         causal=False, window=3, B=None, T=8, covers="ALiBi non-causal with a bidirectional "
         "window 3, grouped-query (G = 3 of 6), unbatched, T = max_len"),
    case(V=8, L=6, D=8, layers=1, heads=2, mlp=8, norm="pre", pos="alibi", window=2, B=3, T=1,
         targets="all", suffix="t1", covers="ALiBi and a window with T = 1"),
    case(V=28, L=24, D=32, layers=2, heads=4, mlp=0, norm="pre", pos="alibi", window=8, B=1,
         T=24, targets="induction", prefix="induction-lab", covers="the induction lab's shape "
         "with ALiBi and window 8, T = max_len = 24 (a window shorter than the repeat's lag)"),
    # Rotary position embeddings (positions "rope": q and k turned by position in every layer,
    # no pos_embed; hook_rot_q / hook_rot_k), both layouts.
    case(V=9, L=8, D=8, layers=1, heads=2, mlp=0, norm="pre", pos="rope", rope="half", B=2, T=5,
         targets="next", covers="rope, rotate-half layout (GPT-NeoX, LLaMA), attention only"),
    case(V=9, L=8, D=8, layers=1, heads=2, mlp=0, norm="pre", pos="rope", rope="interleaved",
         B=2, T=5, targets="next", covers="rope, interleaved layout (RoFormer, GPT-J), the "
         "previous case's shape"),
    case(V=11, L=8, D=16, layers=2, heads=2, mlp=16, norm="pre", pos="rope", rope="half",
         fraction=0.5, B=2, T=8, targets="some", covers="partial rotary: 4 of 8 head dims turn "
         "(rope_fraction 0.5), pre-norm with MLP, T = max_len"),
    case(V=10, L=7, D=16, layers=2, heads=2, mlp=0, norm="post", pos="rope", rope="interleaved",
         fraction=0.5, B=None, T=7, targets="next", covers="partial rotary, interleaved, "
         "post-norm, unbatched, T = max_len"),
    case(V=11, L=8, D=16, layers=2, heads=4, kv=2, mlp=16, norm="pre", pos="rope", rope="half",
         B=2, T=6, targets="next", covers="rope with grouped-query attention (2 K/V heads for 4: "
         "hook_rot_k has the 2)"),
    case(V=9, L=6, D=8, layers=2, heads=4, kv=1, mlp=8, norm="none", pos="rope",
         rope="interleaved", causal=False, act="relu", B=3, T=5,
         gates=[[0.0, 0.5, 1.0, 2.0], [1.0, 1.0, 0.0, 1.0]], suffix="gates",
         covers="rope with multi-query attention (head dim 2: one pair), non-causal, head gates"),
    case(V=8, L=6, D=8, layers=1, heads=2, mlp=8, norm="pre", pos="rope", rope="half", B=2, T=1,
         targets="all", suffix="t1", covers="rope with T = 1 (position 0: no turn)"),
    case(V=8, L=6, D=8, layers=2, heads=1, mlp=0, norm="post", pos="rope", rope="interleaved",
         B=None, T=1, targets="all", suffix="t1", covers="rope, T = 1, unbatched"),
    case(V=10, L=8, D=12, layers=2, heads=3, mlp=12, norm="none", pos="rope", rope="half",
         causal=False, act="relu", bias=False, B=2, T=8, targets="some", covers="rope, "
         "non-causal, no LayerNorm, no bias (q and k turned without their biases), T = max_len"),
    case(V=9, L=9, D=16, layers=2, heads=2, mlp=8, norm="pre", pos="rope", rope="interleaved",
         base=100.0, fraction=0.75, B=2, T=9, targets="next", covers="rope_base 100 (fast "
         "turns), 6 of 8 dims turn (rope_fraction 0.75), T = max_len"),
    case(V=9, L=8, D=20, layers=1, heads=2, mlp=0, norm="pre", pos="rope", rope="half",
         fraction=0.3, B=1, T=7, targets="some", covers="the rounding rule: 0.3 of 10 dims is "
         "3.0000000000000004, rounded down to an even 2 rotary dims"),
    case(V=8, L=6, D=6, layers=2, heads=2, mlp=6, norm="pre", pos="rope", rope="half", B=2, T=6,
         targets="next", covers="an odd head dim (3): 2 dims turn, 1 passes through"),
    case(V=9, L=7, D=8, layers=2, heads=4, kv=2, mlp=0, norm="post", pos="rope",
         rope="interleaved", bias=False, tie=True, B=2, T=7, targets="next", covers="rope, "
         "grouped-query, tied embeddings, no bias, post-norm, T = max_len"),
    case(V=12, L=8, D=8, layers=1, heads=1, mlp=8, norm="pre", pos="rope", rope="half",
         base=500000.0, B=2, T=8, targets="next", covers="rope_base 500000 (LLaMA 3's), one "
         "head, T = max_len"),
    case(V=28, L=16, D=32, layers=2, heads=2, mlp=0, norm="pre", pos="rope", rope="half", B=1,
         T=16, targets="induction", prefix="induction-lab", covers="the induction lab's model "
         "with rotary positions, T = max_len = 16"),
    # Rotary positions with the other variants.
    case(V=11, L=10, D=16, layers=2, heads=4, kv=2, mlp=16, norm="pre", pos="rope", rope="half",
         window=3, B=2, T=10, targets="next", covers="rope with a window of 3 and grouped-query "
         "attention (2 K/V heads), T = max_len"),
    case(V=9, L=8, D=12, layers=1, heads=3, kv=1, mlp=0, norm="pre", pos="rope",
         rope="interleaved", fraction=0.5, causal=False, window=2, B=None, T=8,
         covers="rope interleaved, partial, multi-query, non-causal with a bidirectional window "
         "2, unbatched, T = max_len"),
    # Attention sinks (gpt-oss: a learned logit per head in each softmax row's denominator), alone
    # and with every other variant.
    case(V=9, L=8, D=12, layers=2, heads=3, mlp=16, norm="pre", pos="learned", sinks=True, B=2,
         T=6, targets="next", covers="attention sinks, pre-norm with MLP, learned positions"),
    case(V=8, L=6, D=8, layers=1, heads=2, mlp=0, norm="post", pos="sinusoidal", sinks=True,
         causal=False, bias=False, B=None, T=6, targets="some", covers="sinks, non-causal, no "
         "bias (sinks sit after in_proj_weight), post-norm, unbatched, T = max_len"),
    case(V=10, L=8, D=16, layers=2, heads=4, kv=2, mlp=8, norm="pre", pos="learned", sinks=True,
         B=2, T=8, targets="next", gates=[[1.0, 0.0, 0.5, 2.0], [1.0, 1.0, 1.0, 0.25]],
         suffix="gates", covers="sinks with grouped-query attention (2 K/V heads) and head gates, "
         "T = max_len"),
    case(V=11, L=10, D=16, layers=2, heads=4, mlp=16, norm="pre", pos="alibi", window=3,
         sinks=True, B=2, T=10, targets="next", covers="sinks with ALiBi and a window of 3 (a "
         "row's few keys against its sink), T = max_len"),
    case(V=9, L=8, D=16, layers=2, heads=2, mlp=0, norm="pre", pos="rope", rope="half",
         sinks=True, B=2, T=7, targets="next", covers="sinks with rotary positions (rotate-half)"),
    case(V=9, L=8, D=12, layers=1, heads=3, kv=1, mlp=0, norm="none", pos="rope",
         rope="interleaved", fraction=0.5, sinks=True, B=2, T=5, targets="all", covers="sinks "
         "with multi-query attention and partial interleaved rotary positions, no LayerNorm"),
    case(V=8, L=6, D=8, layers=1, heads=2, mlp=8, norm="pre", pos="learned", sinks=True, B=3,
         T=1, targets="all", suffix="t1", covers="sinks with T = 1: one key against the sink"),
    case(V=28, L=16, D=32, layers=2, heads=2, mlp=0, norm="pre", pos="learned", sinks=True, B=1,
         T=16, targets="induction", prefix="induction-lab", covers="the induction lab's model "
         "with attention sinks, T = max_len = 16"),
]


# ----------------------------------------------------------------------------------------------
# Building one case
# ----------------------------------------------------------------------------------------------

def seed_of(name):
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


def build_model32(spec):
    """The float32 module: torch's default initialisation from the case's seed, with the entries
    that initialisation leaves constant redrawn (see the module docstring). Returns (model, gen)."""
    seed = seed_of(spec["name"])
    torch.manual_seed(seed)
    model = tt.TinyTransformer(**spec["config"])
    gen = torch.Generator().manual_seed(seed + 1)

    def uniform(t, lo, hi):
        t.copy_(torch.rand(t.shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo)

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("attn.in_proj_bias") or name.endswith("attn.out_proj.bias"):
                uniform(p, -0.5, 0.5)
            elif name.endswith("attn.sinks"):  # (0 at first): sinks from weak to dominant
                uniform(p, -1.0, 2.5)
            elif ".ln" in name or name.startswith("ln_final."):
                if name.endswith(".weight"):
                    uniform(p, 0.5, 1.5)
                else:
                    uniform(p, -0.25, 0.25)
    for p in model.parameters():
        assert p.dtype == torch.float32
    assert (model.unembed.weight is model.tok_embed.weight) == spec["config"].get("tie_embeddings",
                                                                                   False)
    return model.eval(), gen


def make_inputs(spec, gen):
    c = spec["config"]
    V, B, T = c["vocab_size"], spec["B"] or 1, spec["T"]
    assert 1 <= T <= c["max_len"]
    mode = spec["targets"]
    if mode == "induction":
        half = T // 2
        first = torch.randint(0, V, (B, half), generator=gen)
        tokens = torch.cat([first, first, first[:, : T - 2 * half]], dim=1)
    else:
        tokens = torch.randint(0, V, (B, T), generator=gen)
    targets = None
    if mode in ("next", "induction"):
        targets = torch.roll(tokens, -1, dims=1)
        targets[:, -1] = IGNORE
    elif mode in ("some", "all", "most"):
        targets = torch.randint(0, V, (B, T), generator=gen)
        if mode == "some":
            targets[torch.rand((B, T), generator=gen) < 0.25] = IGNORE
        elif mode == "most":
            keep = targets.clone()
            targets.fill_(IGNORE)
            flat, kept = targets.view(-1), keep.view(-1)
            for i in (1, B * T - 3):
                flat[i] = kept[i]
    else:
        assert mode is None, mode
    if targets is not None:
        assert (targets != IGNORE).any(), spec["name"] + ": every target is -100"
        if mode == "some" and B * T > 1:
            # "some": at least one ignored and at least one counted position.
            if not (targets == IGNORE).any():
                targets.view(-1)[0] = IGNORE
            if not (targets != IGNORE).any():
                targets.view(-1)[-1] = 0
    gates = None
    if spec["gates"] is not None:
        gates = spec["gates"]
        assert len(gates) == c["n_layers"] and all(len(g) == c["n_heads"] for g in gates)
    return tokens, targets, gates


def run(model, tokens, targets, gates, dtype):
    g = None if gates is None else torch.tensor(gates, dtype=dtype)
    with torch.no_grad():
        logits, hooks = model(tokens, g)
        loss = None if targets is None else tt.loss_fn(logits, targets)
    assert logits.dtype == dtype and all(h.dtype == dtype for h in hooks.values())
    return logits, hooks, loss


# ----------------------------------------------------------------------------------------------
# JSON
# ----------------------------------------------------------------------------------------------

def nested(a):
    """Nested lists of Python floats (repr: the float64's shortest round trip); non-finite
    values as the strings "inf", "-inf", "nan"."""
    def conv(x):
        if isinstance(x, list):
            return [conv(y) for y in x]
        x = float(x)
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    return conv(np.asarray(a, dtype=np.float64).tolist())


def dumps(x):
    return json.dumps(x, separators=(",", ":"), allow_nan=False)


def render(doc):
    """Top-level keys one per line; state_dict, inputs, expected and hooks entries one per line."""
    lines = ["{", f'"kind": {dumps(doc["kind"])},', f'"name": {dumps(doc["name"])},',
             f'"config": {json.dumps(doc["config"], allow_nan=False)},']

    def section(key, items, indent, last):
        lines.append(f'{indent}{dumps(key)}: {{')
        for i, (k, v) in enumerate(items):
            comma = "," if i + 1 < len(items) else ""
            if isinstance(v, dict):
                section(k, list(v.items()), indent + "  ", last=not comma)
            else:
                lines.append(f'{indent}  {dumps(k)}: {dumps(v)}{comma}')
        lines.append(indent + "}" + ("" if last else ","))

    section("state_dict", list(doc["state_dict"].items()), "", False)
    section("inputs", list(doc["inputs"].items()), "", False)
    section("expected", list(doc["expected"].items()), "", True)
    lines.append("}")
    return "\n".join(lines) + "\n"


def build_doc(spec):
    c = spec["config"]
    model32, gen = build_model32(spec)
    tokens, targets, gates = make_inputs(spec, gen)
    sd32 = model32.state_dict()
    model64 = tt.TinyTransformer(**c)
    model64.load_state_dict(sd32)
    model64 = model64.double().eval()
    for k, v in model64.state_dict().items():  # float32 -> float64 is exact
        assert torch.equal(v, sd32[k].double()), k
    # .double() keeps a tied Parameter one tensor (it converts each Parameter in place).
    assert (model64.unembed.weight is model64.tok_embed.weight) == c.get("tie_embeddings", False)
    logits, hooks, loss = run(model64, tokens, targets, gates, torch.float64)

    unbatched = spec["B"] is None
    drop = (lambda t: t[0]) if unbatched else (lambda t: t)
    inputs = {"tokens": drop(tokens).tolist()}
    if targets is not None:
        inputs["targets"] = drop(targets).tolist()
    if gates is not None:
        inputs["head_gates"] = [[float(g) for g in row] for row in gates]
    expected = {"logits": nested(drop(logits))}
    if loss is not None:
        assert math.isfinite(float(loss))
        expected["loss"] = float(loss)
    expected["hooks"] = {k: nested(drop(v)) for k, v in hooks.items()}
    doc = {"kind": "transformer", "name": spec["name"], "config": {k: c[k] for k in config_keys(c)},
           "state_dict": {k: nested(v) for k, v in sd32.items()},
           "inputs": inputs, "expected": expected}
    return doc


# ----------------------------------------------------------------------------------------------
# Checking a written file
# ----------------------------------------------------------------------------------------------

def rope_check(x, c):
    """x [B, n, T, dh] turned by rotary positions as the usual code writes each layout, apart
    from tiny_transformer.apply_rope: GPT-NeoX / LLaMA's x * cos + rotate_half(x) * sin over the
    rotary dims (cos and sin repeated: cat(freqs, freqs)), GPT-J's x * cos + rotate_every_two(x) *
    sin (cos and sin repeat_interleave'd); angles from torch's own float64 pow, cos and sin."""
    r, T = tt.rope_dims(c), x.shape[2]
    inv_freq = 1.0 / (c["rope_base"] ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)       # [T, r/2]
    rot, rest = x[..., :r], x[..., r:]
    if c["rope_layout"] == "half":
        emb = torch.cat([freqs, freqs], dim=-1)
        x1, x2 = rot[..., : r // 2], rot[..., r // 2:]
        turned = rot * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()
    else:
        emb = freqs.repeat_interleave(2, dim=-1)
        every_two = torch.stack([-rot[..., 1::2], rot[..., 0::2]], dim=-1).flatten(-2)
        turned = rot * emb.cos() + every_two * emb.sin()
    return torch.cat([turned, rest], dim=-1)


def as_array(x):
    """Nested JSON values (numbers or "inf"/"-inf"/"nan") -> float64 numpy array."""
    def conv(v):
        if isinstance(v, list):
            return [conv(y) for y in v]
        if isinstance(v, str):
            return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[v]
        return float(v)
    return np.asarray(conv(x), dtype=np.float64)


def relative_error(got, want, what):
    """max |got - want| / max |want| over finite entries (absolute when want is all 0); the
    non-finite entries must be the same."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    fin = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), fin), f"{what}: non-finite entries differ"
    assert np.array_equal(got[~fin], want[~fin], equal_nan=True), f"{what}: non-finite values"
    if not fin.any():
        return 0.0
    scale = float(np.abs(want[fin]).max()) or 1.0
    return float(np.abs(got[fin] - want[fin]).max()) / scale


def refuse_constant(name):
    raise ValueError(f"{name} is not JSON: non-finite numbers are written as strings")


def check_file(path, spec):
    """Re-reads the file and recomputes it: returns the worst float32 relative error and where."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    size = len(text.encode("utf-8"))
    assert size <= MAX_FILE_BYTES, f"{path}: {size} bytes > {MAX_FILE_BYTES}"
    doc = json.loads(text, parse_constant=refuse_constant)
    assert list(doc) == ["kind", "name", "config", "state_dict", "inputs", "expected"]
    assert doc["kind"] == "transformer" and doc["name"] == spec["name"]
    c = doc["config"]
    assert list(c) == config_keys(c) and c == spec["config"], c
    V, T_max, H = c["vocab_size"], c["max_len"], c["n_heads"]

    # The state_dict: exactly the module's keys in its order, shapes, float32 values.
    fresh = tt.TinyTransformer(**c).double().eval()
    ref_sd = fresh.state_dict()
    assert list(doc["state_dict"]) == list(ref_sd), (list(doc["state_dict"]), list(ref_sd))
    sd = {}
    for k, v in doc["state_dict"].items():
        a = as_array(v)
        assert a.shape == tuple(ref_sd[k].shape), (k, a.shape, tuple(ref_sd[k].shape))
        assert np.isfinite(a).all() and np.array_equal(a.astype(np.float32).astype(np.float64), a), k
        sd[k] = torch.tensor(a, dtype=torch.float64)
    if c.get("tie_embeddings"):  # one tensor under two keys: the same values
        assert torch.equal(sd["unembed.weight"], sd["tok_embed.weight"])
    fresh.load_state_dict(sd)

    # Inputs.
    inp = doc["inputs"]
    assert set(inp) <= {"tokens", "targets", "head_gates"}
    tokens = np.asarray(inp["tokens"])
    assert tokens.dtype.kind == "i", "tokens must be integers"
    unbatched = tokens.ndim == 1
    assert unbatched == (spec["B"] is None) and tokens.ndim in (1, 2)
    if unbatched:
        tokens = tokens[None]
    B, T = tokens.shape
    assert B >= 1 and 1 <= T <= T_max and tokens.min() >= 0 and tokens.max() < V
    tokens = torch.tensor(tokens, dtype=torch.long)
    targets = None
    if "targets" in inp:
        t = np.asarray(inp["targets"])
        assert t.dtype.kind == "i" and t.shape == (tuple(tokens.shape[1:]) if unbatched
                                                   else tuple(tokens.shape))
        t = t.reshape(B, T)
        assert ((t == IGNORE) | ((t >= 0) & (t < V))).all() and (t != IGNORE).any()
        targets = torch.tensor(t, dtype=torch.long)
    gates = inp.get("head_gates")
    if gates is not None:
        assert np.asarray(gates).shape == (c["n_layers"], H)
        gates = as_array(gates).tolist()

    exp = doc["expected"]
    assert list(exp) == (["logits", "loss", "hooks"] if targets is not None else ["logits", "hooks"])
    add_batch = (lambda a: a[None]) if unbatched else (lambda a: a)

    # The float64 module from the written numbers reproduces the written numbers.
    logits, hooks, loss = run(fresh, tokens, targets, gates, torch.float64)
    assert list(exp["hooks"]) == list(hooks), (list(exp["hooks"]), list(hooks))
    e = relative_error(logits.numpy(), add_batch(as_array(exp["logits"])), "logits")
    assert e <= SELF_CHECK_TOL, f"{spec['name']}: float64 logits re-run off by {e}"
    for k, v in hooks.items():
        e = relative_error(v.numpy(), add_batch(as_array(exp["hooks"][k])), k)
        assert e <= SELF_CHECK_TOL, f"{spec['name']}: float64 {k} re-run off by {e}"
    if targets is not None:
        e = abs(float(loss) - exp["loss"]) / abs(exp["loss"])
        assert e <= SELF_CHECK_TOL, f"{spec['name']}: float64 loss re-run off by {e}"
    assert torch.equal(hooks["logits"], logits)

    # Shapes of the hooks, as the reference's docstring gives them.
    D = c["d_model"]
    dh = D // H
    G = c.get("n_kv_heads") or H
    for k, v in hooks.items():
        if k.endswith((".hook_k", ".hook_v", ".hook_rot_k")):
            want = (B, G, T, dh)
        elif k.endswith((".hook_q", ".hook_z", ".hook_rot_q")):
            want = (B, H, T, dh)
        elif k.endswith((".hook_attn_scores", ".hook_pattern")):
            want = (B, H, T, T)
        elif k == "logits":
            want = (B, T, V)
        else:
            want = (B, T, D)
        assert tuple(v.shape) == want, (k, tuple(v.shape), want)

    # Grouped-query: each layer's heads are F.scaled_dot_product_attention (torch 1.13's
    # F._scaled_dot_product_attention) of q and the K/V heads repeated with repeat_interleave.
    if G != H:
        # (ALiBi's bias and the window's blocked keys as SDPA's float attn_mask.)
        mask = None
        blocked = tt.window_mask(T, c["causal"], c.get("attn_window", 0))
        if c["positions"] == "alibi":
            mask = tt.alibi_bias(H, T, torch.float64)
        if blocked is not None:
            mask = (mask if mask is not None else torch.zeros(T, T, dtype=torch.float64))
            mask = mask.masked_fill(blocked, float("-inf"))
        for l in range(c["n_layers"]):
            q, k, v = (hooks[f"blocks.{l}.attn.hook_{x}"] for x in "qkv")
            if c["positions"] == "rope":  # (the scores read the turned q and k)
                q, k = (hooks[f"blocks.{l}.attn.hook_rot_{x}"] for x in "qk")
            k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)
            m = mask
            if c.get("attn_sinks"):
                # The sink as one more key: k = 0 and v = 0, its score the sink through the
                # float mask (q . 0 = 0), the weight on it dropped after.
                zero = torch.zeros(B, H, 1, dh, dtype=torch.float64)
                k, v = torch.cat([k, zero], dim=2), torch.cat([v, zero], dim=2)
                m = torch.zeros(B, H, T, T + 1, dtype=torch.float64)
                if mask is not None:
                    m[..., :T] = mask
                m[..., T] = sd[f"blocks.{l}.attn.sinks"].view(1, H, 1)
            z, w = torch.nn.functional._scaled_dot_product_attention(q, k, v, m, 0.0, True, False)
            w = w[..., :T]
            if gates is not None:
                z = z * torch.tensor(gates[l], dtype=torch.float64).view(1, H, 1, 1)
            for name, got in (("hook_z", z), ("hook_pattern", w)):
                e = relative_error(got.numpy(), hooks[f"blocks.{l}.attn.{name}"].numpy(), name)
                assert e <= SELF_CHECK_TOL, f"{spec['name']}: layer {l} {name} vs SDPA off by {e}"

    # ALiBi and windows: each layer's scores recomputed from hook_q and hook_k, apart from the
    # module's code: Press et al.'s slopes written out (2^(-8 (h + 1) / p) for h < p, the largest
    # power of two <= H, then 2^(-8 (2 (h - p) + 1) / (2 p))), checked against the module's
    # get_slopes, the bias -(m |i - j|) and the blocked keys from their definitions.
    w = c.get("attn_window", 0)
    if c["positions"] == "alibi" or w:
        assert "hook_pos_embed" not in hooks or c["positions"] != "alibi"
        p2 = 1 << (H.bit_length() - 1)
        slopes = [2.0 ** (-8.0 * (h + 1) / p2) if h < p2 else
                  2.0 ** (-8.0 * (2 * (h - p2) + 1) / (2 * p2)) for h in range(H)]
        slopes = np.asarray(slopes, dtype=np.float32)
        assert np.array_equal(slopes, tt.alibi_slopes(H).numpy()), (slopes, tt.alibi_slopes(H))
        ii, jj = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
        blocked = np.zeros((T, T), dtype=bool)
        if c["causal"]:
            blocked |= jj > ii
        if w:
            blocked |= jj <= ii - w
            if not c["causal"]:
                blocked |= jj >= ii + w
        for l in range(c["n_layers"]):
            rot = "rot_" if c["positions"] == "rope" else ""  # the scores use the turned q and k
            q = hooks[f"blocks.{l}.attn.hook_{rot}q"].numpy()
            k = hooks[f"blocks.{l}.attn.hook_{rot}k"].numpy().repeat(H // G, axis=1)
            want = (q / math.sqrt(dh)) @ k.transpose(0, 1, 3, 2)
            if c["positions"] == "alibi":
                want = want - slopes.astype(np.float64)[None, :, None, None] * np.abs(ii - jj)
            want[:, :, blocked] = -np.inf
            e = relative_error(hooks[f"blocks.{l}.attn.hook_attn_scores"].numpy(), want,
                               "hook_attn_scores")
            assert e <= SELF_CHECK_TOL, f"{spec['name']}: layer {l} scores off by {e}"
        if w >= T and c["causal"]:  # a window of every key: the same numbers as none
            full = tt.TinyTransformer(**{**c, "attn_window": 0}).double().eval()
            full.load_state_dict(sd)
            l_full, _, _ = run(full, tokens, targets, gates, torch.float64)
            assert torch.equal(l_full, logits), spec["name"] + ": window >= T differs from none"
    # Attention sinks: each layer's hook_pattern is the softmax with the sink in the denominator,
    # written out from hook_attn_scores and the layer's sinks (not the module's cat-and-slice).
    if c.get("attn_sinks"):
        for l in range(c["n_layers"]):
            s = hooks[f"blocks.{l}.attn.hook_attn_scores"].numpy()
            sink = sd[f"blocks.{l}.attn.sinks"].numpy()[None, :, None, None]
            m = np.maximum(s.max(axis=-1, keepdims=True), sink)
            e = np.exp(s - m)
            want = e / (e.sum(axis=-1, keepdims=True) + np.exp(sink - m))
            err = relative_error(hooks[f"blocks.{l}.attn.hook_pattern"].numpy(), want,
                                 "hook_pattern")
            assert err <= SELF_CHECK_TOL, f"{spec['name']}: layer {l} sink pattern off by {err}"
            assert (want.sum(axis=-1) < 1).all()
    # Rotary positions: each layer's hook_rot_q / hook_rot_k are its hook_q / hook_k turned as
    # the other formulations of each layout compute it (rope_check), to 1e-12.
    if c["positions"] == "rope":
        for l in range(c["n_layers"]):
            for x in "qk":
                want = rope_check(hooks[f"blocks.{l}.attn.hook_{x}"], c)
                e = relative_error(hooks[f"blocks.{l}.attn.hook_rot_{x}"].numpy(), want.numpy(),
                                   f"hook_rot_{x}")
                assert e <= SELF_CHECK_TOL, f"{spec['name']}: layer {l} hook_rot_{x} off by {e}"

    # The float32 module on the same (float32) weights agrees within the stated tolerance.
    m32 = tt.TinyTransformer(**c).eval()
    m32.load_state_dict({k: v.float() for k, v in sd.items()})
    l32, h32, loss32 = run(m32, tokens, targets, gates, torch.float32)
    worst, worst_at = 0.0, ""
    pairs = [("logits", l32, add_batch(as_array(exp["logits"])))]
    pairs += [(k, h32[k], add_batch(as_array(exp["hooks"][k]))) for k in hooks]
    for k, got, want in pairs:
        e = relative_error(got.double().numpy(), want, k)
        assert e <= FLOAT32_TOL, f"{spec['name']}: float32 {k} off by {e}"
        if e > worst:
            worst, worst_at = e, k
    if targets is not None:
        e = abs(float(loss32) - exp["loss"]) / abs(exp["loss"])
        assert e <= FLOAT32_TOL, f"{spec['name']}: float32 loss off by {e}"
        if e > worst:
            worst, worst_at = e, "loss"
    logits_err = relative_error(l32.double().numpy(), pairs[0][2], "logits")
    return dict(size=size, worst=worst, worst_at=worst_at, logits_err=logits_err,
                counted=None if targets is None else int((targets != IGNORE).sum()),
                total=B * T)


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
        parts.append(f"ln_eps={c['ln_eps']}")
    if c.get("tie_embeddings"):
        parts.append("tied embeddings")
    if c.get("n_kv_heads") is not None:
        parts.append(f"n_kv_heads={c['n_kv_heads']}")
    if c.get("attn_window"):
        parts.append(f"attn_window={c['attn_window']}")
    if c.get("attn_sinks"):
        parts.append("attn_sinks")
    if c["positions"] == "rope":
        parts.append(f"rope_layout={c['rope_layout']} rope_base={c['rope_base']:g} "
                     f"rope_fraction={c['rope_fraction']:g} ({tt.rope_dims(c)} of "
                     f"{c['d_model'] // c['n_heads']} dims turn)")
    return " ".join(parts)


def inputs_summary(spec, info):
    s = "unbatched" if spec["B"] is None else f"B={spec['B']}"
    s += f" T={spec['T']}"
    if info["counted"] is not None:
        s += f", targets ({info['counted']} of {info['total']} counted)"
    if spec["gates"] is not None:
        s += ", gates " + " / ".join(", ".join(f"{g:g}" for g in row) for row in spec["gates"])
    return s


README_HEAD = """\
# Golden transformer cases

Each `*.json` here is one forward pass of the reference module `tools/tiny_transformer.py` (the
project's contract) in the `"kind": "transformer"` case format of
`docs/case-format.md`: config, the module's `state_dict`, tokens (optionally targets and head
gates), and the expected logits, loss (with targets) and every hook the module produces for
that config. This README and the cases are generated; do not edit them by hand. Regenerate with

```sh
tools/setup.sh --golden                               # python3-torch, python3-numpy (Debian)
/usr/bin/python3 tools/make_transformer_golden.py     # from the repo root; --out DIR elsewhere
```

The script is deterministic (one fixed seed per case, derived from its name): re-running it
rewrites byte-identical files.

## How the expected values were made

- Weights are float32: torch's default initialisation of the module (seeded per case), with the
  entries it leaves constant redrawn from a seeded generator so that every parameter matters:
  `in_proj_bias` and `out_proj.bias` U(-0.5, 0.5) (torch: 0), LayerNorm weights U(0.5, 1.5)
  (torch: 1) and biases U(-0.25, 0.25) (torch: 0). Tokens and targets come from the same seed.
- Expected values are float64: the same float32 weights in `model.double()`, run in float64
  (PyTorch 1.13, `torch.no_grad()`), written with `repr` (the shortest round trip of the
  float64 value). The masked entries of `hook_attn_scores` are the string `"-inf"`; there is
  no other non-finite number.
- Unbatched cases ran with B = 1; the file drops the batch axis of `logits` and of every hook.
- `config` has every key but `tie_embeddings`, `n_kv_heads`, `attn_window` and `attn_sinks`, which are written
  only where they are given (so the files of the configs before them did not change when they
  were added). With
  `tie_embeddings`, `unembed.weight` is `tok_embed.weight` (one Parameter) and the `state_dict`
  holds that tensor under both keys, as torch's `state_dict()` does: the same values twice.
- `n_kv_heads` (G < n_heads, the `-kv{G}` cases): grouped-query attention, each layer's
  `attn.in_proj_weight` is [(H + 2 G) dh, D] (the rows of q, then of the G K heads and the G V
  heads), `attn.in_proj_bias` [(H + 2 G) dh], and `hook_k` / `hook_v` are [B, G, T, dh]. The
  script also checks each such layer's `hook_z` and `hook_pattern` against
  `F._scaled_dot_product_attention` (torch 1.13's name of `scaled_dot_product_attention`) of
  `hook_q` and `hook_k` / `hook_v` repeated with `repeat_interleave(H // G, dim=1)`, to 1e-12.
- `positions` "alibi" (ALiBi) and `attn_window` (the `-w{w}` cases): the script also checks each
  such layer's `hook_attn_scores` against its own recomputation from `hook_q` and `hook_k`:
  (q / sqrt(dh)) k^T - m_h |i - j| with Press et al.'s slopes (`get_slopes` of the ALiBi
  repository, rounded to float32), -inf where j > i (causal), j <= i - w or (non-causal)
  j >= i + w, to 1e-12; and a window of T keys (causal) gives the numbers of the same weights
  without a window.
- `positions` "rope" (the `-rope-` cases): rotary position embeddings; the config then has
  `rope_layout`, `rope_base` and `rope_fraction`, all three (written exactly when `positions` is
  `"rope"`), there is no `pos_embed.weight` and no `hook_pos_embed`, and each layer has
  `hook_rot_q` [B, H, T, dh] and `hook_rot_k` [B, G, T, dh] after `hook_v`: q and k turned by
  position (`hook_q` / `hook_k` are before the turn). The script also checks each layer's
  `hook_rot_q` / `hook_rot_k` against its `hook_q` / `hook_k` turned by the usual code of each
  layout (GPT-NeoX's `rotate_half`, GPT-J's `rotate_every_two`, torch's own float64 angles), to
  1e-12.
- `attn_sinks` (the `-sinks` cases): attention sinks (gpt-oss), each layer's
  `attn.sinks` [H] after `attn.in_proj_bias` in the `state_dict`, drawn from U(-1, 2.5) (the
  module starts them at 0). The script also checks each layer's `hook_pattern` against
  exp(x_j - m) / (sum_k exp(x_k - m) + exp(s_h - m)) computed from `hook_attn_scores` and the
  sinks, m the max of the row and the sink, to 1e-12, and that every row sums to less than 1.
- Every hook the reference returns is in `expected.hooks`, `logits` included (equal to
  `expected.logits`).
- The script checks every file it writes: read back as JSON, its `state_dict` loaded into a
  fresh float64 module must reproduce its logits, loss and hooks to 1e-12 relative, and the
  float32 module on the same weights must match them to 1e-4 relative (max |got - expected| /
  max |expected| per tensor). The worst float32 error of each case is in the last column.
- `wide-d48-*` and `induction-lab-*` are the largest cases; every file is under 1.5 MB.

## Cases

| case | config | inputs | covers | float32 rel. err. |
| --- | --- | --- | --- | --- |
"""


def write_readme(out, rows):
    text = README_HEAD + "".join(
        f"| `{spec['name']}` | {config_summary(spec['config'])} | {inputs_summary(spec, info)} | "
        f"{spec['covers']} | {info['worst']:.1e} |\n" for spec, info in rows)
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


# ----------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden", "transformer"))
    args = ap.parse_args()
    torch.set_num_threads(1)  # one summation order, whatever the machine
    os.makedirs(args.out, exist_ok=True)
    names = [s["name"] for s in CASES]
    assert len(set(names)) == len(names), "duplicate case names"
    rows, total, worst, worst_at = [], 0, 0.0, ""
    for spec in CASES:
        doc = build_doc(spec)
        path = os.path.join(args.out, spec["name"] + ".json")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(render(doc))
        info = check_file(path, spec)
        rows.append((spec, info))
        total += info["size"]
        if info["worst"] > worst:
            worst, worst_at = info["worst"], f"{spec['name']} {info['worst_at']}"
        print(f"{spec['name']}: {config_summary(spec['config'])}; {inputs_summary(spec, info)}; "
              f"{info['size']} bytes; float32 rel. err. logits {info['logits_err']:.2e}, "
              f"worst {info['worst']:.2e} ({info['worst_at']})")
    write_readme(args.out, rows)
    stale = sorted(f for f in os.listdir(args.out)
                   if f.endswith(".json") and f[:-5] not in set(names))
    for f in stale:
        print(f"warning: {os.path.join(args.out, f)} is not a case of this script", file=sys.stderr)
    print(f"{len(CASES)} cases, {total} bytes; worst float32 relative error {worst:.2e} "
          f"({worst_at})")


if __name__ == "__main__":
    main()
