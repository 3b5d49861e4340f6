#!/usr/bin/python3
"""Generate headscope's golden attention cases (tests/golden/*.json).

Run from the repository root with Debian's interpreter (the only one that has PyTorch):

    /usr/bin/python3 tools/make_golden.py [--out DIR]

(`tools/setup.sh --golden` installs python3-torch and python3-numpy.)

Each case is one call of torch.nn.MultiheadAttention in the format of docs/case-format.md.
Inputs, weights and float masks are drawn from fixed seeds (one seed per case, derived from its
name), so re-running the script rewrites byte-identical files. Drawn values are rounded to a
dyadic grid (multiples of 1/256; 1/64 for the realistic-size cases): exactly float32, with short
exact decimals, which keeps the directory small.

Expected values come from a small float64 implementation of the forward pass below
(`manual_forward`), which follows headscope's documented policy for fully masked query rows
(zero attention row instead of NaN). Every case is also run through the real
torch.nn.MultiheadAttention in float64, and the script asserts that both agree to 1e-10 wherever
torch is finite, and that torch is NaN exactly where the policy zeroes a row.

The float32 numerics cases (exp-*, scale-before-dot-*) take given inputs instead (`inputs`) and
are also run through torch's float32 module (check_torch_float32), so the float32 behaviour they
pin down (subnormal softmax weights, q / sqrt(hd) before q . k) is torch's own.

Grouped-query attention (`num_kv_heads` = G < num_heads; not a torch.nn.MultiheadAttention
argument, the `gqa-*` and `mqa-*` cases): the K and V projections have G * head_dim rows
(in_proj_weight (E + 2 G hd, E), or k_proj_weight (G hd, kdim) and v_proj_weight (G hd, vdim);
in_proj_bias (E + 2 G hd); bias_k / bias_v (1, 1, G hd)), and query head h reads K/V head
h // (H / G). `manual_forward` repeats K and V on the head axis (np.repeat, torch's
repeat_interleave); the torch check (`torch_gqa_forward`) projects with F.linear, repeats K and V
with `repeat_interleave(H // G, dim=1)` and runs torch 1.13's `F._scaled_dot_product_attention`
(the function 2.0 calls F.scaled_dot_product_attention) with the masks as one additive float mask,
then out_proj: the same 1e-10 agreement and NaN pattern are asserted. Their config holds
`num_kv_heads`; every other case leaves it out (null: num_heads), so their files are unchanged.

Torch 1.13 specifics handled here:
  * forward() has no `is_causal`: the causal bool mask (mask[i][j] = j > i) is passed to torch as
    attn_mask; the file says `"is_causal": true` (with `"attn_mask": null` unless the case gives
    the explicit causal mask too).
  * a float key_padding_mask alone is accepted and added to the scores, but combined with an
    attn_mask torch 1.13 mis-merges it (a bool attn_mask is OR-ed with the float mask's non-zero
    entries; a float attn_mask is `masked_fill`-ed with it, which does nothing). For those cases
    the two masks are folded into one additive float attn_mask of shape (N*num_heads, L, S)
    ((num_heads, L, S) unbatched) before calling torch; the file keeps the original masks.
  * torch's fast path (`_native_multi_head_attention`) is never taken: the module's parameters
    require grad and grad mode stays on, so the reference math path runs.
"""

import argparse
import hashlib
import json
import math
import os
import sys
import zlib

import numpy as np
import torch

from tiny_transformer import alibi_slopes  # the contract's slopes (the ALiBi repository's get_slopes)
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in tools/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_transformer as tt  # noqa: E402  (apply_rope: the rotary cases' torch run)

TOL = 1e-10
NEG_INF = float("-inf")


# ----------------------------------------------------------------------------------------------
# Random values (all float32-representable, stored as float64 numpy arrays)
# ----------------------------------------------------------------------------------------------

# Drawn values are rounded to multiples of 2**-bits: exactly float32 (and float64), and their
# exact decimals are short (at most `bits` digits after the point), which keeps the files small.
# 8 bits for the small cases; the realistic-size cases use 6 (set per case by build_case).
GRID_BITS = {"bits": 8}


def f32(a):
    """Rounds to the grid and returns float64 holding exactly float32-representable values."""
    step = 2.0 ** GRID_BITS["bits"]
    a = np.round(np.asarray(a, dtype=np.float64) * step) / step
    out = a.astype(np.float32).astype(np.float64) + 0.0  # + 0.0 turns -0.0 into 0.0
    assert np.array_equal(out, a)
    return out


def uniform(rng, shape, half_width):
    return f32(rng.uniform(-half_width, half_width, size=shape))


def normal(rng, shape, scale=1.0):
    return f32(rng.standard_normal(size=shape) * scale)


def causal_mask(L, S):
    """True above the diagonal: query i may not attend key j > i."""
    return np.triu(np.ones((L, S), dtype=bool), k=1)


def has_position_options(inp):
    return bool(inp.get("alibi", False)) or inp.get("window", 0) > 0


def position_bias(H, L, S, inp):
    """headscope's position options (forward's alibi and window; not torch arguments) as one
    additive float64 mask [H, L, S] over the S given keys (the extra keys of add_bias_kv and
    add_zero_attn get none: always visible, never biased). Query i is at position i, key j at j.
    ALiBi: -(m_h |i - j|), m_h the float32 slopes of tools/tiny_transformer.py (Press et al.'s
    get_slopes); the distance is symmetric, so without is_causal the keys after i are biased as
    those before. Window w >= 1: -inf where j <= i - w, and without is_causal also j >= i + w
    (with is_causal the causal mask blocks j > i already)."""
    i = np.arange(L)[:, None]
    j = np.arange(S)[None, :]
    bias = np.zeros((H, L, S))
    if inp.get("alibi", False):
        slopes = alibi_slopes(H).numpy().astype(np.float64)
        bias = bias - slopes[:, None, None] * np.abs(i - j)[None].astype(np.float64)
    w = inp.get("window", 0)
    if w > 0:
        outside = (j <= i - w) | ((j >= i + w) & (not inp["is_causal"]))
        bias = np.where(outside[None], NEG_INF, bias)
    return bias


# ----------------------------------------------------------------------------------------------
# The float64 reference forward with the zero-row policy
# ----------------------------------------------------------------------------------------------

def additive(mask):
    """Bool mask (True = masked) -> 0 / -inf; float mask -> itself."""
    if mask.dtype == bool:
        return np.where(mask, NEG_INF, 0.0)
    return mask.astype(np.float64)


def rope_numpy(x, cfg):
    """Rotary position embeddings (rope_dims = r > 0) of x [..., T, hd], token t at position t,
    in float64: pair i of the first r dims turns by t / base^(2i / r) (the angles as
    tools/tiny_transformer.py's rope_cos_sin computes them); "half" pairs (i, i + r/2),
    "interleaved" (2i, 2i + 1); the other dims pass through."""
    r, base, T = cfg["rope_dims"], cfg["rope_base"], x.shape[-2]
    theta = [1.0 / math.pow(base, (2 * i) / r) for i in range(r // 2)]
    cos = np.array([[math.cos(float(t) * th) for th in theta] for t in range(T)])
    sin = np.array([[math.sin(float(t) * th) for th in theta] for t in range(T)])
    half = cfg["rope_layout"] == "half"
    a = np.arange(r // 2) if half else 2 * np.arange(r // 2)
    b = a + r // 2 if half else a + 1
    y = x.copy()
    y[..., a] = x[..., a] * cos - x[..., b] * sin
    y[..., b] = x[..., a] * sin + x[..., b] * cos
    return y


def manual_forward(cfg, sd, inp):
    """Returns (output, weights_or_None, fully_masked[N, H, L], max_abs_finite_score)."""
    E, H = cfg["embed_dim"], cfg["num_heads"]
    hd = E // H
    G = cfg.get("num_kv_heads") or H  # K/V heads (grouped-query attention; absent: H)
    Ekv = G * hd
    q = np.asarray(inp["query"], dtype=np.float64)
    k = np.asarray(inp["key"], dtype=np.float64)
    v = np.asarray(inp["value"], dtype=np.float64)
    batched = q.ndim == 3
    if not batched:
        q, k, v = q[:, None, :], k[:, None, :], v[:, None, :]
    elif cfg["batch_first"]:
        q, k, v = (x.transpose(1, 0, 2) for x in (q, k, v))
    L, N, _ = q.shape
    S = k.shape[0]

    # In-projections: x @ W.T + b.
    # Row blocks [E, Ekv, Ekv] of in_proj_weight / in_proj_bias (three equal ones when G = H).
    if "in_proj_weight" in sd:
        Wq, Wk, Wv = np.split(np.asarray(sd["in_proj_weight"]), [E, E + Ekv])
    else:
        Wq, Wk, Wv = (np.asarray(sd[n]) for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight"))
    if "in_proj_bias" in sd:
        bq, bk, bv = np.split(np.asarray(sd["in_proj_bias"]), [E, E + Ekv])
    else:
        bq, bk, bv = np.zeros(E), np.zeros(Ekv), np.zeros(Ekv)
    Q = q @ Wq.T + bq  # [L, N, E]
    K = k @ Wk.T + bk  # [S, N, Ekv]
    V = v @ Wv.T + bv  # [S, N, Ekv]

    # One additive mask [N, H, L, S] from attn_mask / is_causal / key_padding_mask.
    add = np.zeros((N, H, L, S))
    am = inp["attn_mask"]
    if am is None and inp["is_causal"]:
        am = causal_mask(L, S)
    if am is not None:
        am = additive(np.asarray(am))
        if am.ndim == 2:
            add = add + am[None, None]
        elif batched:
            add = add + am.reshape(N, H, L, S)
        else:
            add = add + am[None]
    kpm = inp["key_padding_mask"]
    if kpm is not None:
        kpm = additive(np.asarray(kpm))
        if not batched:
            kpm = kpm[None]
        add = add + kpm[:, None, None, :]
    if has_position_options(inp):
        add = add + position_bias(H, L, S, inp)[None]

    # Extra keys are never masked.
    if cfg["add_bias_kv"]:
        K = np.concatenate([K, np.broadcast_to(np.asarray(sd["bias_k"]).reshape(1, 1, Ekv), (1, N, Ekv))])
        V = np.concatenate([V, np.broadcast_to(np.asarray(sd["bias_v"]).reshape(1, 1, Ekv), (1, N, Ekv))])
        add = np.concatenate([add, np.zeros((N, H, L, 1))], axis=3)
    Sx = K.shape[0]
    Qh = Q.reshape(L, N, H, hd).transpose(1, 2, 0, 3)  # [N, H, L, hd]
    Kh = K.reshape(Sx, N, G, hd).transpose(1, 2, 0, 3)  # [N, G, S', hd]
    Vh = V.reshape(Sx, N, G, hd).transpose(1, 2, 0, 3)  # [N, G, S', hd]
    if cfg.get("rope_dims"):  # query i at position i, key j at j; bias_k (row S) does not turn
        Qh = rope_numpy(Qh, cfg)
        Kh = np.concatenate([rope_numpy(Kh[:, :, :S], cfg), Kh[:, :, S:]], axis=2)
    # Head h reads K/V head h // (H / G): torch's repeat_interleave on the head axis. (Only when
    # G < H: a copy changes numpy's memory layout, and with it the matmul's last bits.)
    if G < H:
        Kh = np.repeat(Kh, H // G, axis=1)  # [N, H, S', hd]
        Vh = np.repeat(Vh, H // G, axis=1)
    if cfg["add_zero_attn"]:
        Kh = np.concatenate([Kh, np.zeros((N, H, 1, hd))], axis=2)
        Vh = np.concatenate([Vh, np.zeros((N, H, 1, hd))], axis=2)
        add = np.concatenate([add, np.zeros((N, H, L, 1))], axis=3)

    scores = (Qh / math.sqrt(hd)) @ Kh.transpose(0, 1, 3, 2) + add  # [N, H, L, S'']
    assert not np.isnan(scores).any() and not np.isposinf(scores).any()
    full = np.isneginf(add).all(axis=3)  # [N, H, L]: every key masked
    finite = scores[np.isfinite(scores)]
    max_score = float(np.abs(finite).max()) if finite.size else 0.0
    row_max = np.where(full, 0.0, scores.max(axis=3))
    e = np.exp(scores - row_max[..., None])  # exp(-inf) = 0; a full row becomes all 0
    total = e.sum(axis=3, keepdims=True)
    w = e / np.where(total == 0.0, 1.0, total)  # [N, H, L, S'']
    attn = (w @ Vh).transpose(2, 0, 1, 3).reshape(L, N, E)  # [L, N, E], heads concatenated
    out = attn @ np.asarray(sd["out_proj.weight"]).T
    if "out_proj.bias" in sd:
        out = out + np.asarray(sd["out_proj.bias"])

    weights = None
    if inp["need_weights"]:
        weights = w.sum(axis=1) / H if inp["average_attn_weights"] else w
    if not batched:
        out = out[:, 0]
        weights = None if weights is None else weights[0]
    elif cfg["batch_first"]:
        out = out.transpose(1, 0, 2)
    return out, weights, full, max_score


# ----------------------------------------------------------------------------------------------
# The same call through torch.nn.MultiheadAttention (float64)
# ----------------------------------------------------------------------------------------------

def make_module(cfg):
    """torch's module of `cfg` (its num_kv_heads ignored: torch has none; the state_dict's keys
    are the same, only the K/V shapes differ)."""
    torch.manual_seed(0)
    return torch.nn.MultiheadAttention(
        cfg["embed_dim"], cfg["num_heads"], dropout=0.0, bias=cfg["bias"],
        add_bias_kv=cfg["add_bias_kv"], add_zero_attn=cfg["add_zero_attn"],
        kdim=cfg["kdim"], vdim=cfg["vdim"], batch_first=cfg["batch_first"])


def torch_state_dict_keys(cfg):
    return list(make_module(cfg).state_dict().keys())


def torch_gqa_forward(cfg, sd, inp, dtype=torch.float64):
    """A grouped-query call (num_kv_heads = G < H) through torch, written as GQA models are: q, k,
    v = F.linear with the config's row blocks, K and V split into G heads and repeated with
    repeat_interleave(H // G, dim=1), F._scaled_dot_product_attention (torch 1.13's name of
    F.scaled_dot_product_attention) with the call's masks as one additive float mask (bool: -inf
    where True; extra keys never masked), then out_proj. Fully masked rows are NaN, as in torch's
    module. Returns what torch_forward returns: (output, weights or None, folded=False)."""
    E, H = cfg["embed_dim"], cfg["num_heads"]
    G = cfg.get("num_kv_heads") or H
    hd = E // H
    Ekv = G * hd
    d = lambda a: torch.tensor(np.asarray(a), dtype=dtype)
    expected_keys = set(torch_state_dict_keys(cfg))
    assert expected_keys == set(sd.keys()), (sorted(expected_keys), sorted(sd.keys()))
    if "in_proj_weight" in sd:
        assert np.asarray(sd["in_proj_weight"]).shape == (E + 2 * Ekv, E)
        Wq, Wk, Wv = d(sd["in_proj_weight"]).split([E, Ekv, Ekv])
    else:
        Wq, Wk, Wv = (d(sd[n]) for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight"))
        assert Wk.shape[0] == Ekv and Wv.shape[0] == Ekv
    if "in_proj_bias" in sd:
        bq, bk, bv = d(sd["in_proj_bias"]).split([E, Ekv, Ekv])
    else:
        bq = bk = bv = None
    q, k, v = d(inp["query"]), d(inp["key"]), d(inp["value"])
    batched = q.dim() == 3
    if not batched:
        q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
    elif cfg["batch_first"]:
        q, k, v = (x.transpose(0, 1) for x in (q, k, v))
    L, N, S = q.shape[0], q.shape[1], k.shape[0]
    Q, K, V = F.linear(q, Wq, bq), F.linear(k, Wk, bk), F.linear(v, Wv, bv)  # [T, N, .]
    if cfg["add_bias_kv"]:
        K = torch.cat([K, d(sd["bias_k"]).reshape(1, 1, Ekv).expand(1, N, Ekv)])
        V = torch.cat([V, d(sd["bias_v"]).reshape(1, 1, Ekv).expand(1, N, Ekv)])
    heads = lambda X, n: X.reshape(X.shape[0], N, n, hd).permute(1, 2, 0, 3)  # [N, n, T, hd]
    Qh, Kh, Vh = heads(Q, H), heads(K, G), heads(V, G)
    if cfg.get("rope_dims"):  # tools/tiny_transformer.py's apply_rope (each layout written out)
        rope = (cfg["rope_layout"], cfg["rope_base"], cfg["rope_dims"])
        Qh = tt.apply_rope(Qh, torch.arange(L), *rope)
        Kh = torch.cat([tt.apply_rope(Kh[:, :, :S], torch.arange(S), *rope), Kh[:, :, S:]], dim=2)
    if cfg["add_zero_attn"]:
        Kh = torch.cat([Kh, torch.zeros(N, G, 1, hd, dtype=dtype)], dim=2)
        Vh = torch.cat([Vh, torch.zeros(N, G, 1, hd, dtype=dtype)], dim=2)
    Kh = Kh.repeat_interleave(H // G, dim=1)  # [N, H, S', hd]
    Vh = Vh.repeat_interleave(H // G, dim=1)
    Sp = Kh.shape[2]
    add = torch.zeros(N, H, L, Sp, dtype=dtype)  # the masks over the first S keys
    am = inp["attn_mask"]
    if am is None and inp["is_causal"]:
        am = causal_mask(L, S)
    if am is not None:
        a = d(additive(np.asarray(am)))
        add[..., :S] += a if a.dim() == 2 else a.reshape(N, H, L, S)
    if inp["key_padding_mask"] is not None:
        add[..., :S] += d(additive(np.asarray(inp["key_padding_mask"]))).reshape(N, 1, 1, S)
    if has_position_options(inp):
        add[..., :S] += d(position_bias(H, L, S, inp))
    z, w = torch.nn.functional._scaled_dot_product_attention(Qh, Kh, Vh, add, 0.0, True, False)
    concat = z.permute(2, 0, 1, 3).reshape(L, N, E)
    out = F.linear(concat, d(sd["out_proj.weight"]),
                   d(sd["out_proj.bias"]) if "out_proj.bias" in sd else None)  # [L, N, E]
    if not batched:
        out = out[:, 0]
    elif cfg["batch_first"]:
        out = out.transpose(0, 1)
    weights = None
    if inp["need_weights"]:
        weights = w.mean(dim=1) if inp["average_attn_weights"] else w  # [N, (H,) L, S']
        if not batched:
            weights = weights[0]
        weights = weights.numpy().astype(np.float64)
    return out.numpy().astype(np.float64), weights, False


def torch_forward(cfg, sd, inp, dtype=torch.float64):
    """The call through torch in `dtype`: float64 for the expected values' check, float32 for the
    numerics cases' check of what torch's float32 module itself gives. Grouped-query configs go
    through torch_gqa_forward (torch's module has no num_kv_heads)."""
    if cfg.get("num_kv_heads") is not None or cfg.get("rope_dims"):
        out, w, folded = torch_gqa_forward(cfg, sd, inp, dtype)
        if cfg.get("num_kv_heads") == cfg["num_heads"] and not cfg.get("rope_dims"):
            # G = H: torch's own module agrees
            plain = {k: v for k, v in cfg.items() if k != "num_kv_heads"}
            t_out, t_w, _ = torch_forward(plain, sd, inp, dtype)
            assert np.allclose(out, t_out, atol=TOL, rtol=0, equal_nan=True)
            assert (w is None) == (t_w is None)
            assert w is None or np.allclose(w, t_w, atol=TOL, rtol=0, equal_nan=True)
        return out, w, folded
    m = make_module(cfg)
    expected_keys = set(m.state_dict().keys())
    assert expected_keys == set(sd.keys()), (sorted(expected_keys), sorted(sd.keys()))
    m.load_state_dict({k: torch.tensor(np.asarray(v), dtype=torch.float32) for k, v in sd.items()})
    m = m.to(dtype).eval()
    for k, p in m.state_dict().items():  # float32 -> float64 is exact
        assert np.array_equal(p.numpy(), np.asarray(sd[k])), k

    d = lambda a: torch.tensor(np.asarray(a), dtype=dtype)
    q = d(inp["query"])
    if inp["key"] is inp["query"] and inp["value"] is inp["query"]:
        k = v = q  # self-attention: the same tensor, as a model would pass it
    else:
        k, v = d(inp["key"]), d(inp["value"])

    def torch_mask(a):
        a = np.asarray(a)
        return torch.tensor(a) if a.dtype == bool else d(a)

    batched = q.dim() == 3
    L = q.shape[1] if batched and cfg["batch_first"] else q.shape[0]
    S = k.shape[1] if batched and cfg["batch_first"] else k.shape[0]
    am = inp["attn_mask"]
    if am is None and inp["is_causal"]:
        am = causal_mask(L, S)
    kpm = inp["key_padding_mask"]
    H = cfg["num_heads"]
    if has_position_options(inp):
        # ALiBi and the window as an additive float attn_mask (H, L, S), repeated for every batch
        # element ((N*H, L, S) batched), with the call's own attn_mask or causal mask added: the
        # module pads it with zeros for the extra keys, which so stay visible and unbiased.
        bias = position_bias(H, L, S, inp)
        if am is not None:
            a = additive(np.asarray(am))
            bias = bias + (a[None] if a.ndim == 2 else a.reshape(-1, H, L, S))
        if batched:
            N = q.shape[0] if cfg["batch_first"] else q.shape[1]
            bias = np.broadcast_to(bias, (N, H, L, S)).reshape(N * H, L, S)
        am = bias.reshape(-1, L, S) if batched else bias.reshape(H, L, S)
    folded = False
    if kpm is not None and am is not None and np.asarray(kpm).dtype != bool:
        # Torch 1.13 cannot merge a float key_padding_mask with an attn_mask: fold both into one
        # additive float 3-D attn_mask (N*H, L, S), or (H, L, S) unbatched.
        kp = additive(np.asarray(kpm))
        a = additive(np.asarray(am))
        if batched:
            N = kp.shape[0]
            a3 = a.reshape(-1, L, S) if a.ndim == 3 else np.broadcast_to(a, (N * H, L, S))
            a3 = a3.reshape(N, H, L, S) + kp[:, None, None, :]
            am, kpm = a3.reshape(N * H, L, S), None
        else:
            a3 = a if a.ndim == 3 else np.broadcast_to(a, (H, L, S))
            am, kpm = a3 + kp[None, None, :], None
        folded = True
    assert torch.is_grad_enabled()  # keeps torch off its fast path
    out, w = m(q, k, v,
               key_padding_mask=None if kpm is None else torch_mask(kpm),
               attn_mask=None if am is None else torch_mask(am),
               need_weights=inp["need_weights"],
               average_attn_weights=inp["average_attn_weights"])
    out = out.detach().numpy().astype(np.float64)
    w = None if w is None else w.detach().numpy().astype(np.float64)
    return out, w, folded


# ----------------------------------------------------------------------------------------------
# Checking manual vs torch
# ----------------------------------------------------------------------------------------------

def check_against_torch(case, full):
    cfg, sd, inp = case["config"], case["state_dict"], case["inputs"]
    out, weights = case["_out"], case["_weights"]
    t_out, t_w, folded = torch_forward(cfg, sd, inp)
    batched = np.asarray(inp["query"]).ndim == 3
    # full: [N, H, L]. Torch's NaN pattern: a fully masked (batch, head, query) row is NaN in
    # that head's weights, in the head-averaged weights and in the whole output row.
    any_head = full.any(axis=1)  # [N, L]
    if batched:
        out_nan = any_head.T[:, :, None] if not cfg["batch_first"] else any_head[:, :, None]
    else:
        out_nan = any_head[0][:, None]
    out_nan = np.broadcast_to(out_nan, out.shape)
    assert t_out.shape == out.shape, (t_out.shape, out.shape)
    assert np.array_equal(np.isnan(t_out), out_nan), f"{case['name']}: output NaN pattern"
    # Infinite outputs (an infinite value with a non-zero weight) must be torch's, sign included.
    assert np.array_equal(t_out[np.isinf(out)], out[np.isinf(out)]), f"{case['name']}: output inf"
    assert not np.isinf(t_out[~np.isinf(out)]).any(), f"{case['name']}: output inf"
    finite = ~out_nan & np.isfinite(out)
    diff = float(np.abs(t_out[finite] - out[finite]).max(initial=0.0))
    assert diff <= TOL, f"{case['name']}: output differs from torch by {diff}"
    wdiff = 0.0
    if inp["need_weights"]:
        assert t_w is not None and t_w.shape == weights.shape, (None if t_w is None else t_w.shape,
                                                                weights.shape)
        rows = any_head if inp["average_attn_weights"] else full
        if not batched:
            rows = rows[0]
        w_nan = np.broadcast_to(rows[..., None], weights.shape)
        assert np.array_equal(np.isnan(t_w), w_nan), f"{case['name']}: weights NaN pattern"
        wdiff = float(np.abs(t_w - weights)[~w_nan].max(initial=0.0))
        assert wdiff <= TOL, f"{case['name']}: weights differ from torch by {wdiff}"
        # Policy rows: all zero; other rows sum to 1.
        sums = weights.sum(axis=-1)
        if inp["average_attn_weights"]:
            heads_alive = (~full).sum(axis=1) / cfg["num_heads"]  # [N, L]
            want = heads_alive if batched else heads_alive[0]
        else:
            want = (~full).astype(np.float64) if batched else (~full[0]).astype(np.float64)
        assert np.allclose(sums, want, atol=1e-12, rtol=0), f"{case['name']}: weight row sums"
    else:
        assert t_w is None
    return diff, wdiff, folded


# ----------------------------------------------------------------------------------------------
# JSON
# ----------------------------------------------------------------------------------------------

def to_json_value(a):
    """Nested lists of Python floats / bools; non-finite floats as strings."""
    if a is None:
        return None
    a = np.asarray(a)
    if a.dtype == bool:
        return a.tolist()

    def conv(x):
        if isinstance(x, list):
            return [conv(y) for y in x]
        x = float(x)
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x

    return conv(a.astype(np.float64).tolist())


def dumps(x):
    return json.dumps(x, separators=(",", ":"), allow_nan=False)


def render_case(case):
    """Top-level keys one per line; state_dict / inputs / expected entries one per line."""
    lines = ["{", f'"name": {dumps(case["name"])},',
             f'"config": {json.dumps(case["config"], allow_nan=False)},']
    for section in ("state_dict", "inputs", "expected"):
        items = list(case[section].items())
        lines.append(f'"{section}": {{')
        for i, (k, v) in enumerate(items):
            if isinstance(v, (bool, type(None))):
                text = dumps(v)
            else:
                text = dumps(to_json_value(v))
            lines.append(f'  {dumps(k)}: {text}' + ("," if i + 1 < len(items) else ""))
        lines.append("}" + ("," if section != "expected" else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# Case construction
# ----------------------------------------------------------------------------------------------

def make_state_dict(rng, cfg, w_scale):
    E = cfg["embed_dim"]
    kdim = cfg["kdim"] or E
    vdim = cfg["vdim"] or E
    # K/V rows: G * head_dim with grouped-query attention, E otherwise (the same draws as before).
    Ekv = (cfg.get("num_kv_heads") or cfg["num_heads"]) * (E // cfg["num_heads"])
    sd = {}
    if kdim == E and vdim == E:
        sd["in_proj_weight"] = uniform(rng, (E + 2 * Ekv, E), w_scale)
    else:
        sd["q_proj_weight"] = uniform(rng, (E, E), w_scale)
        sd["k_proj_weight"] = uniform(rng, (Ekv, kdim), w_scale)
        sd["v_proj_weight"] = uniform(rng, (Ekv, vdim), w_scale)
    if cfg["bias"]:
        sd["in_proj_bias"] = uniform(rng, (E + 2 * Ekv,), 0.5)
    sd["out_proj.weight"] = uniform(rng, (E, E), w_scale)
    if cfg["bias"]:
        sd["out_proj.bias"] = uniform(rng, (E,), 0.5)
    if cfg["add_bias_kv"]:
        sd["bias_k"] = uniform(rng, (1, 1, Ekv), 0.5)
        sd["bias_v"] = uniform(rng, (1, 1, Ekv), 0.5)
    return sd


def random_bool(rng, shape, p=0.3):
    return rng.random(shape) < p


def random_float_mask(rng, shape, p_inf=0.2, scale=1.5):
    m = normal(rng, shape, scale)
    m[rng.random(shape) < p_inf] = NEG_INF
    return m


def mask_factory(kind):
    """kind -> function(rng, N, H, L, S, unbatched) building a random mask of that kind."""
    def build(rng, N, H, L, S, unbatched):
        if kind == "bool-kpm":
            return random_bool(rng, (S,) if unbatched else (N, S), 0.35)
        if kind == "float-kpm":
            return random_float_mask(rng, (S,) if unbatched else (N, S), 0.25, 1.0)
        lead = (H if unbatched else N * H,)
        if kind == "bool-2d":
            return random_bool(rng, (L, S))
        if kind == "float-2d":
            return random_float_mask(rng, (L, S))
        if kind == "bool-3d":
            return random_bool(rng, lead + (L, S))
        if kind == "float-3d":
            return random_float_mask(rng, lead + (L, S))
        raise ValueError(kind)
    return build


def build_case(spec):
    name = spec["name"]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    GRID_BITS["bits"] = spec.get("grid_bits", 8)
    E, H = spec.get("E", 6), spec.get("H", 2)
    kdim, vdim = spec.get("kdim"), spec.get("vdim")
    G = spec.get("G")  # num_kv_heads (grouped-query attention); written only when given
    rope = spec.get("rope")  # (rope_dims, rope_layout, rope_base); written only when given
    cfg = {
        "embed_dim": E, "num_heads": H, **({} if G is None else {"num_kv_heads": G}),
        "bias": spec.get("bias", True),
        "add_bias_kv": spec.get("bias_kv", False), "add_zero_attn": spec.get("zero_attn", False),
        "kdim": None if kdim in (None, E) else kdim, "vdim": None if vdim in (None, E) else vdim,
        "batch_first": spec.get("batch_first", False),
        **({} if rope is None else dict(zip(("rope_dims", "rope_layout", "rope_base"), rope))),
    }
    kd, vd = kdim or E, vdim or E
    N = spec.get("N", 2)  # None: unbatched
    unbatched = N is None
    L = spec.get("L", 4)
    S = spec.get("S")
    self_attn = S is None and not spec.get("cross", False)
    if S is None:
        S = L
    assert not self_attn or (kd == E and vd == E)
    sd = make_state_dict(rng, cfg, spec.get("w_scale", 0.5))
    if "state_dict" in spec:
        sd = spec["state_dict"]
    sd = {k: sd[k] for k in torch_state_dict_keys(cfg)}  # module.state_dict()'s order

    def seq(T, D):
        if unbatched:
            shape = (T, D)
        elif cfg["batch_first"]:
            shape = (N, T, D)
        else:
            shape = (T, N, D)
        return normal(rng, shape, spec.get("x_scale", 1.0))

    if "inputs" in spec:  # (query, key, value) built by the case from its rng
        query, key, value = spec["inputs"](rng)
    elif "query" in spec:
        query = key = value = spec["query"]
    else:
        query = seq(L, E)
        if self_attn:
            key = value = query
        else:
            key, value = seq(S, kd), seq(S, vd)

    def draw_masks():
        kpm = spec.get("kpm")
        am = spec.get("mask")
        if isinstance(kpm, str):
            kpm = mask_factory(kpm + "-kpm")
        if isinstance(am, str):
            am = mask_factory(am)
        kpm = None if kpm is None else kpm(rng, N, H, L, S, unbatched)
        am = None if am is None else am(rng, N, H, L, S, unbatched)
        return kpm, am

    explicit_causal = spec.get("explicit_causal", False)
    for _attempt in range(200):
        kpm, am = draw_masks()
        if explicit_causal:
            am = causal_mask(L, S)
        inp = {
            "query": query, "key": key, "value": value,
            "key_padding_mask": kpm, "attn_mask": am,
            "need_weights": spec.get("need_weights", True),
            "average_attn_weights": spec.get("average", True),
            "is_causal": spec.get("causal", False) or explicit_causal,
        }
        if "alibi" in spec or "window" in spec:  # headscope's options: only in these files
            inp["alibi"] = spec.get("alibi", False)
            inp["window"] = spec.get("window", 0)
        out, weights, full, max_score = manual_forward(cfg, sd, inp)
        # Random masks are redrawn until the case has fully masked rows exactly when it says so.
        if bool(full.any()) == spec.get("expect_full", False):
            break
    else:
        raise RuntimeError(f"{name}: could not draw masks with expect_full={spec.get('expect_full')}")

    clean = lambda a: None if a is None else a + 0.0  # no -0.0 in the files
    assert spec.get("infinite_output", False) or np.isfinite(out).all(), name
    assert weights is None or np.isfinite(weights).all(), name
    case = {"name": name, "config": cfg, "state_dict": sd, "inputs": inp,
            "expected": {"output": clean(out), "weights": clean(weights)},
            "_out": out, "_weights": weights, "_full": full, "_max_score": max_score}
    for check in spec.get("checks", []):
        check(case)
    return case


# ----------------------------------------------------------------------------------------------
# Special inputs
# ----------------------------------------------------------------------------------------------

def seed_state_dict():
    # Every head's Q/K/V projection picks its own two dims (head 1: dims 0-1, head 2: dims 2-3),
    # so each of Wq, Wk, Wv (rows = output dims, torch computes x @ W.T) is the identity.
    pick = np.eye(4)
    W_O = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0]], dtype=np.float64)
    # The seed computes Y = concat @ W_O; torch computes concat @ out_proj.weight.T.
    return {"in_proj_weight": np.concatenate([pick, pick, pick]), "out_proj.weight": W_O.T.copy()}


SEED_X = np.array([[1, 0, 1, 2], [0, 2, 1, 0], [1, 1, 0, 1]], dtype=np.float64)


def check_seed(case):
    y = np.round(case["_out"], 3)
    want = np.array([[1.701, 2.595, 2.600, 1.695],
                     [1.034, 2.723, 1.232, 2.525],
                     [1.315, 2.639, 2.035, 1.919]])
    assert np.array_equal(y, want), f"seed output {y}"
    head1_row2 = np.round(case["_weights"][0, 1], 3)
    assert np.array_equal(head1_row2, [0.045, 0.768, 0.187]), f"seed weights {head1_row2}"


def check_large_scores(case):
    assert 20.0 < case["_max_score"] < 60.0, f"{case['name']}: max |score| {case['_max_score']}"


FLT_MAX = float(np.finfo(np.float32).max)
FLT_MIN = float(np.finfo(np.float32).tiny)  # the smallest normal float32


def check_torch_float32(case):
    """The numerics cases are about float32 (torch's default): torch's float32 module must give
    the expected values too (relative error 1e-5 of the largest finite entry, non-finite entries
    identical), so what headscope's float32 paths are held to is what torch's float32 does."""
    cfg, sd, inp = case["config"], case["state_dict"], case["inputs"]
    t_out, t_w, _ = torch_forward(cfg, sd, inp, dtype=torch.float32)
    for name, got, want in (("output", t_out, case["_out"]), ("weights", t_w, case["_weights"])):
        if want is None:
            continue
        fin = np.isfinite(want)
        assert np.array_equal(np.isfinite(got), fin), f"{case['name']}: float32 torch {name} {got}"
        assert np.array_equal(got[~fin], want[~fin]), f"{case['name']}: float32 torch {name} {got}"
        scale = max(1e-300, float(np.abs(want[fin]).max(initial=0.0)))
        err = float(np.abs(got[fin] - want[fin]).max(initial=0.0)) / scale
        assert err <= 1e-5, f"{case['name']}: float32 torch {name} off by {err}"
    case["_f32_out"] = t_out


def check_subnormal_weights(case):
    """Some weights are float32 subnormals (exp of a score below ln FLT_MIN) and they matter."""
    w = case["_weights"]
    assert ((w > 0) & (w < FLT_MIN)).any(), f"{case['name']}: no subnormal weight"


def check_scores_near_flt_max(case):
    """The scaled scores fit float32, the unscaled products q . k would not: dividing q first
    (torch's order) is what keeps them finite."""
    hd = case["config"]["embed_dim"] // case["config"]["num_heads"]
    top = case["_max_score"]
    assert 1e38 < top < FLT_MAX < top * math.sqrt(hd), f"{case['name']}: max score {top}"


def exp_subnormal_inputs(keys, values):
    """E=1: query [[1]] and the given keys and values (rounded to float32), for exp's range."""
    def build(rng):
        f = lambda a: np.asarray(a, dtype=np.float32).astype(np.float64).reshape(-1, 1)
        return f([1.0]), f(keys), f(values)
    return build


# E=1, H=1, all weights 1 and biases 0: scores are the keys, the output is the weighted values.
ONES_E1 = {"in_proj_weight": np.ones((3, 1)), "in_proj_bias": np.zeros(3),
           "out_proj.weight": np.ones((1, 1)), "out_proj.bias": np.zeros(1)}

LARGE_Q = float(np.float32(7.9e18))  # 16 * LARGE_Q^2 overflows float32; divided by 4 first, not


def large_query_inputs(S):
    """E=16: queries LARGE_Q everywhere, key 0 equal to them, the other keys and all values
    small; with identity projections the score of key 0 is 16 LARGE_Q^2 / 4 = 2.5e38."""
    def build(rng):
        q = np.full((2, 16), LARGE_Q)
        k = normal(rng, (S, 16))
        k[0] = LARGE_Q
        return q, k, normal(rng, (S, 16))
    return build


def identity_state_dict(E):
    eye = np.eye(E)
    return {"in_proj_weight": np.concatenate([eye, eye, eye]), "out_proj.weight": eye.copy()}


def kpm_all_masked(batch, kind="bool"):
    """key_padding_mask with every key of one batch element masked."""
    def build(rng, N, H, L, S, unbatched):
        if kind == "bool":
            m = random_bool(rng, (N or 1, S), 0.3)
            m[batch] = True
        else:
            m = random_float_mask(rng, (N or 1, S), 0.2, 1.0)
            m[batch] = NEG_INF
        if unbatched:
            return m[0]
        return m
    return build


def lengths_kpm(lengths):
    """Bool key_padding_mask that pads each batch element after its length."""
    def build(rng, N, H, L, S, unbatched):
        m = np.arange(S)[None, :] >= np.asarray(lengths)[:, None]
        return m[0] if unbatched else m
    return build


def mask_with_full_head_row(kind, where):
    """3-D mask (N*H, L, S) or (H, L, S), random elsewhere, fully masking rows in `where`
    ([(batch*H + head, query)])."""
    def build(rng, N, H, L, S, unbatched):
        lead = H if unbatched else N * H
        if kind == "bool":
            m = random_bool(rng, (lead, L, S), 0.25)
            for bh, l in where:
                m[bh, l, :] = True
        else:
            m = random_float_mask(rng, (lead, L, S), 0.15)
            for bh, l in where:
                m[bh, l, :] = NEG_INF
        return m
    return build


def mask_with_full_row_2d(kind, rows):
    def build(rng, N, H, L, S, unbatched):
        if kind == "bool":
            m = random_bool(rng, (L, S), 0.25)
            m[list(rows), :] = True
        else:
            m = random_float_mask(rng, (L, S), 0.15)
            m[list(rows), :] = NEG_INF
        return m
    return build


def kpm_first_key(batch):
    """Bool key_padding_mask masking key 0 of one batch element (with is_causal, query 0 of that
    element then has no key left)."""
    def build(rng, N, H, L, S, unbatched):
        m = np.zeros((N, S), dtype=bool)
        m[batch, 0] = True
        m[batch, S - 1] = True
        return m
    return build


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------

CASES = [
    # --- the seed -----------------------------------------------------------------------------
    dict(name="seed-worked-example", E=4, H=2, bias=False, N=None, L=3,
         state_dict=seed_state_dict(), query=SEED_X, average=False, checks=[check_seed],
         note="the seed's worked example: 3 tokens x 4 dims, identity head projections, W_O"),

    # --- layouts, self / cross, bias ----------------------------------------------------------
    dict(name="unbatched-self", N=None, L=5,
         note="unbatched 2-D self-attention, bias, averaged weights"),
    dict(name="unbatched-cross-s-gt-l", N=None, L=3, S=6, average=False,
         note="unbatched cross-attention S>L, per-head weights"),
    dict(name="batched-seq-first-self", N=2, L=4,
         note="batched (L,N,E) self-attention, averaged weights"),
    dict(name="batched-seq-first-cross", N=3, L=3, S=5, average=False,
         note="batched (L,N,E) cross-attention S>L, per-head weights"),
    dict(name="batched-batch-first-self", N=3, L=5, batch_first=True, E=8, H=4,
         note="batch_first (N,L,E) self-attention, 4 heads"),
    dict(name="batched-batch-first-cross-s-lt-l", N=2, L=6, S=3, batch_first=True, average=False,
         note="batch_first cross-attention S<L, per-head weights"),
    dict(name="no-bias-batched-cross", bias=False, N=2, L=4, S=6, E=12, H=3,
         note="bias=false, cross-attention, 3 heads"),
    dict(name="no-bias-unbatched-self", bias=False, N=None, L=4, average=False,
         note="bias=false, unbatched self-attention"),
    dict(name="need-weights-false-batched", N=2, L=4, S=5, need_weights=False,
         note="need_weights=false (weights null), batched cross"),
    dict(name="need-weights-false-unbatched-kpm", N=None, L=4, kpm="bool", need_weights=False,
         note="need_weights=false, unbatched, bool key_padding_mask"),
    dict(name="single-head", E=8, H=1, N=2, L=4, S=5, average=False,
         note="num_heads=1 (head_dim = embed_dim)"),
    dict(name="single-head-batch-first-mask", E=6, H=1, N=2, L=3, batch_first=True, mask="float-2d",
         note="num_heads=1 with a float 2-D attn_mask"),
    dict(name="head-dim-one", E=6, H=6, N=2, L=4, S=5, average=False,
         note="num_heads=embed_dim (head_dim 1), per-head weights"),
    dict(name="head-dim-one-unbatched-bool-3d", E=4, H=4, N=None, L=3, mask="bool-3d",
         average=False, note="head_dim 1, unbatched, bool (num_heads,L,S) mask"),
    dict(name="decode-single-query-batch-first-kpm", N=3, L=1, S=7, batch_first=True, kpm="bool",
         average=False, note="L=1 (one decode step) over 7 keys, bool key_padding_mask"),
    dict(name="decode-single-query-unbatched", E=8, H=4, N=None, L=1, S=6,
         note="L=1, unbatched, 4 heads"),

    # --- add_bias_kv / add_zero_attn ----------------------------------------------------------
    dict(name="bias-kv-batched-self", bias_kv=True, N=2, L=4, average=False,
         note="add_bias_kv: S'=S+1, per-head weights"),
    dict(name="bias-kv-unbatched-cross-bool-2d", bias_kv=True, N=None, L=3, S=5, mask="bool-2d",
         note="add_bias_kv, unbatched cross, bool 2-D mask (padded unmasked)"),
    dict(name="bias-kv-no-bias-kpm-float", bias_kv=True, bias=False, N=2, L=3, S=4, kpm="float",
         average=False, note="add_bias_kv with bias=false and a float key_padding_mask"),
    dict(name="zero-attn-batched-kpm-bool", zero_attn=True, N=2, L=4, S=5, kpm="bool",
         average=False, note="add_zero_attn, bool key_padding_mask"),
    dict(name="zero-attn-unbatched-float-2d", zero_attn=True, N=None, L=4, mask="float-2d",
         note="add_zero_attn, unbatched, float 2-D mask"),
    dict(name="bias-kv-zero-attn-batched-bool-3d", bias_kv=True, zero_attn=True, N=2, L=3, S=4,
         mask="bool-3d", average=False,
         note="add_bias_kv + add_zero_attn (S'=S+2), bool (N*H,L,S) mask"),
    dict(name="bias-kv-zero-attn-unbatched-no-bias", bias_kv=True, zero_attn=True, bias=False,
         N=None, L=4, E=8, H=4, note="add_bias_kv + add_zero_attn, bias=false, unbatched"),
    dict(name="bias-kv-zero-attn-batch-first-kpm-mask", bias_kv=True, zero_attn=True, N=2, L=4,
         S=3, batch_first=True, kpm="bool", mask="float-2d", average=False,
         note="both extra keys, batch_first, bool kpm + float 2-D mask"),

    # --- kdim / vdim ----------------------------------------------------------------------------
    dict(name="kdim-vdim-batched-cross", kdim=6, vdim=10, N=2, L=3, S=5, average=False,
         note="kdim=6, vdim=10: separate q/k/v_proj_weight"),
    dict(name="kdim-only-unbatched", kdim=5, N=None, L=4, S=3,
         note="kdim=5, vdim=embed_dim (still separate weights), unbatched"),
    dict(name="vdim-only-batch-first-kpm-float", vdim=3, N=2, L=3, S=4, batch_first=True,
         kpm="float", note="vdim=3 only, batch_first, float key_padding_mask"),
    dict(name="kdim-vdim-bias-kv-zero-attn", kdim=4, vdim=6, bias_kv=True, zero_attn=True, N=2,
         L=3, S=4, mask="float-3d", average=False,
         note="kdim/vdim with add_bias_kv + add_zero_attn and a float 3-D mask"),
    dict(name="kdim-vdim-no-bias-unbatched-bool-2d", kdim=7, vdim=5, bias=False, N=None, L=4, S=6,
         mask="bool-2d", need_weights=False,
         note="kdim/vdim, bias=false, unbatched bool 2-D mask, need_weights=false"),

    # --- key_padding_mask / attn_mask -------------------------------------------------------
    dict(name="kpm-bool-batched-self", N=3, L=5, kpm="bool", average=False,
         note="bool key_padding_mask (N,S)"),
    dict(name="kpm-bool-unbatched-cross", N=None, L=3, S=5, kpm="bool",
         note="bool key_padding_mask (S), unbatched"),
    dict(name="kpm-float-batched-cross", N=2, L=4, S=5, kpm="float", average=False,
         note="float key_padding_mask (added; some -inf)"),
    dict(name="kpm-float-unbatched-self", N=None, L=5, kpm="float",
         note="float key_padding_mask (S), unbatched"),
    dict(name="mask-bool-2d-batched", N=2, L=5, mask="bool-2d", average=False,
         note="bool (L,S) attn_mask, batched self"),
    dict(name="mask-float-2d-batched-cross", N=2, L=4, S=6, mask="float-2d",
         note="float (L,S) attn_mask with -inf and finite +/- values"),
    dict(name="mask-bool-3d-batched", N=2, L=4, S=5, mask="bool-3d", average=False,
         note="bool (N*H,L,S) attn_mask"),
    dict(name="mask-float-3d-batch-first", N=2, L=4, mask="float-3d", batch_first=True,
         average=False, note="float (N*H,L,S) attn_mask, batch_first"),
    dict(name="mask-bool-2d-unbatched", N=None, L=4, S=5, mask="bool-2d", average=False,
         note="bool (L,S) attn_mask, unbatched"),
    dict(name="mask-float-3d-unbatched", N=None, L=4, E=8, H=4, mask="float-3d", average=False,
         note="float (num_heads,L,S) attn_mask, unbatched"),
    dict(name="mask-bool-3d-unbatched-kpm-bool", N=None, L=4, S=6, mask="bool-3d", kpm="bool",
         note="bool (num_heads,L,S) mask + bool kpm, unbatched"),
    dict(name="mask-bool-and-kpm-bool", N=2, L=4, S=5, mask="bool-2d", kpm="bool", average=False,
         note="bool 2-D attn_mask OR bool key_padding_mask"),
    dict(name="mask-float-and-kpm-bool", N=2, L=4, S=5, mask="float-3d", kpm="bool",
         average=False, note="float 3-D attn_mask + bool key_padding_mask"),
    dict(name="mask-bool-and-kpm-float", N=2, L=4, S=5, mask="bool-2d", kpm="float",
         average=False, note="bool 2-D attn_mask + float key_padding_mask (torch run folded)"),
    dict(name="mask-float-and-kpm-float-unbatched", N=None, L=4, S=5, mask="float-2d",
         kpm="float", note="float 2-D attn_mask + float kpm, unbatched (torch run folded)"),

    # --- is_causal ----------------------------------------------------------------------------
    dict(name="causal-batched-self", N=2, L=5, causal=True, average=False,
         note="is_causal, L=S, attn_mask null"),
    dict(name="causal-unbatched-self", N=None, L=6, causal=True, H=4, E=8,
         note="is_causal, unbatched, attn_mask null"),
    dict(name="causal-cross-l-lt-s", N=2, L=3, S=6, causal=True, batch_first=True, average=False,
         note="is_causal with L<S (mask[i][j] = j > i)"),
    dict(name="causal-cross-l-gt-s-unbatched", N=None, L=6, S=4, causal=True, average=False,
         note="is_causal with L>S, unbatched"),
    dict(name="causal-explicit-mask-batched", N=2, L=4, explicit_causal=True, average=False,
         note="is_causal with the explicit causal bool mask given too"),
    dict(name="causal-explicit-mask-unbatched-cross", N=None, L=3, S=5, explicit_causal=True,
         note="is_causal + explicit causal mask, unbatched, L<S"),
    dict(name="causal-kpm-bool-bias-kv-zero-attn", N=2, L=4, causal=True, kpm="bool",
         bias_kv=True, zero_attn=True, average=False,
         note="is_causal + bool kpm + add_bias_kv + add_zero_attn"),
    dict(name="causal-kpm-float-need-weights-false", N=2, L=4, causal=True, kpm="float",
         need_weights=False, note="is_causal + float kpm (torch run folded), need_weights=false"),

    # --- fully masked rows (zero-row policy) --------------------------------------------------
    dict(name="full-kpm-batch-element", N=3, L=3, S=4, kpm=kpm_all_masked(1), average=False,
         expect_full=True,
         note="kpm masks every key of batch 1: its weights 0, output rows = out_proj.bias"),
    dict(name="full-kpm-float-neg-inf-averaged", N=2, L=3, S=4, kpm=kpm_all_masked(0, "float"),
         batch_first=True, expect_full=True,
         note="float kpm all -inf for batch 0, averaged weights"),
    dict(name="full-kpm-unbatched-no-bias", N=None, L=3, S=4, bias=False,
         kpm=kpm_all_masked(0), expect_full=True,
         note="unbatched kpm masking all keys, bias=false: output all 0"),
    dict(name="full-head-row-bool-3d", N=2, L=4, S=5, mask=mask_with_full_head_row("bool", [(2, 1)]),
         average=False, expect_full=True,
         note="3-D bool mask fully masks one head's query row (batch 1, head 0, query 1)"),
    dict(name="full-head-row-float-3d-averaged", N=2, L=3, S=4, E=8, H=4,
         mask=mask_with_full_head_row("float", [(1, 0), (6, 2)]), expect_full=True,
         note="3-D float mask with all -inf rows in two heads, averaged weights"),
    dict(name="full-head-row-unbatched-3d", N=None, L=4, H=2,
         mask=mask_with_full_head_row("bool", [(1, 3)]), average=False, expect_full=True,
         note="unbatched (num_heads,L,S) bool mask fully masking head 1, query 3"),
    dict(name="full-rows-bool-2d-need-weights-false", N=2, L=4, S=5,
         mask=mask_with_full_row_2d("bool", [1, 3]), need_weights=False, expect_full=True,
         note="bool 2-D mask with two all-True rows, need_weights=false"),
    dict(name="full-rows-float-2d-unbatched", N=None, L=4,
         mask=mask_with_full_row_2d("float", [0]), average=False, expect_full=True,
         note="float 2-D mask with an all -inf row, unbatched"),
    dict(name="full-causal-kpm-first-key", N=2, L=4, causal=True, kpm=kpm_first_key(1),
         average=False, expect_full=True,
         note="is_causal + kpm masking key 0 of batch 1: its query 0 has no key"),
    dict(name="full-mask-bool-and-kpm-float", N=2, L=3, S=4,
         mask=mask_with_full_row_2d("bool", [2]), kpm="float", average=False, expect_full=True,
         note="bool 2-D mask with a full row + float kpm (torch run folded)"),
    dict(name="rescued-by-bias-kv", N=2, L=3, S=4, bias_kv=True, kpm=kpm_all_masked(0),
         average=False, note="kpm masks all keys of batch 0, but the bias_k key stays: no zero row"),
    dict(name="rescued-by-zero-attn", N=None, L=4, zero_attn=True,
         mask=mask_with_full_row_2d("bool", [1, 2]), average=False,
         note="all-True mask rows, but the zero key stays: weight 1 on it, no zero row"),
    dict(name="rescued-by-bias-kv-zero-attn-3d", N=2, L=3, S=3, bias_kv=True, zero_attn=True,
         mask=mask_with_full_head_row("float", [(1, 0), (2, 2)]),
         note="all -inf head rows in a 3-D float mask, rescued by both extra keys"),

    # --- numerics -----------------------------------------------------------------------------
    dict(name="large-scores-softmax-stability", N=2, L=4, S=5, x_scale=3.0, w_scale=1.0,
         average=False, checks=[check_large_scores],
         note="scores up to about +-30+: softmax must subtract the row max"),
    dict(name="large-scores-float-mask-unbatched", N=None, L=5, x_scale=3.0, w_scale=1.0,
         mask="float-2d", checks=[check_large_scores],
         note="large scores with a float mask, unbatched"),

    # exp down to float32's subnormals: e^-90 = 8.2e-40 is a weight torch keeps (x 3e38 = 0.25).
    dict(name="exp-subnormal-weight", E=1, H=1, N=None, L=1, S=2, state_dict=ONES_E1,
         inputs=exp_subnormal_inputs([0.0, -90.0], [1.0, 3e38]),
         checks=[check_subnormal_weights, check_torch_float32],
         note="E=1, scores [0, -90]: weight e^-90 (float32 subnormal) times value 3e38 adds 0.25"),
    dict(name="exp-subnormal-weight-inf-value", E=1, H=1, N=None, L=1, S=2, state_dict=ONES_E1,
         inputs=exp_subnormal_inputs([0.0, -90.0], [1.0, float("inf")]), infinite_output=True,
         checks=[check_subnormal_weights, check_torch_float32],
         note="as exp-subnormal-weight with value inf: output inf (a weight of 0 would give NaN)"),
    dict(name="exp-subnormal-weight-many-keys", E=1, H=1, N=None, L=1, S=16, state_dict=ONES_E1,
         inputs=exp_subnormal_inputs(
             [0.0, -0.5, -1.0, -2.0, -3.0, -87.0, -88.0, -90.0, -95.0, -100.0, -102.0, -103.0,
              -103.9, -104.0, -110.0, -1000.0],
             [1.0, 2.0, 3.0, 4.0, 5.0] + [3e38] * 11),
         checks=[check_subnormal_weights, check_torch_float32],
         note="16 keys (the packed path): scores 0 to -1000, subnormal weights x 3e38 values"),
    # q / sqrt(head_dim) before q . k, as torch: the unscaled products would overflow.
    dict(name="scale-before-dot-large-query", E=16, H=1, bias=False, N=None, L=2, S=13,
         state_dict=identity_state_dict(16), inputs=large_query_inputs(13),
         checks=[check_scores_near_flt_max, check_torch_float32],
         note="E=16, 1 head, 13 keys (the packed path): q = 7.9e18 everywhere, key 0 = q, "
              "scores 2.5e38 (q . k = 1e39 overflows)"),
    dict(name="scale-before-dot-large-query-short-row", E=16, H=1, bias=False, N=None, L=2, S=3,
         state_dict=identity_state_dict(16), inputs=large_query_inputs(3),
         checks=[check_scores_near_flt_max, check_torch_float32],
         note="as scale-before-dot-large-query with 3 keys (the short-row path)"),

    # --- realistic sizes ----------------------------------------------------------------------
    dict(name="realistic-e64-h4-self-kpm", E=64, H=4, N=1, L=16, kpm=lengths_kpm([11]),
         w_scale=0.2, grid_bits=6, note="E=64, 4 heads, L=S=16, padding mask, averaged weights"),
    dict(name="realistic-e48-h6-cross-kdim-vdim", E=48, H=6, kdim=16, vdim=24, N=None, L=8,
         S=12, mask="float-2d", w_scale=0.25, average=False, grid_bits=6,
         note="E=48, 6 heads, kdim=16, vdim=24, cross L=8 S=12, float mask, per-head weights"),
    dict(name="many-heads-causal-batch-first", E=16, H=8, N=2, L=6, batch_first=True,
         causal=True, need_weights=False,
         note="8 heads of dim 2, causal, batch_first, need_weights=false"),

    # --- grouped-query / multi-query attention (num_kv_heads; not a torch argument) ----------
    dict(name="gqa-g2-h4-batched-self", E=8, H=4, G=2, N=2, L=5, average=False,
         note="num_kv_heads=2 of 4 heads (pairs of heads share K/V), (L,N,E) self, per-head weights"),
    dict(name="mqa-g1-h4-causal-batch-first", E=8, H=4, G=1, N=2, L=6, batch_first=True,
         causal=True, average=False,
         note="multi-query (num_kv_heads=1), is_causal, batch_first, per-head weights"),
    dict(name="gqa-g3-h6-cross-kdim-vdim-bool-3d", E=12, H=6, G=3, kdim=5, vdim=7, N=2, L=3, S=5,
         mask="bool-3d", average=False,
         note="num_kv_heads=3 (H/2) of 6, kdim/vdim: k/v_proj_weight (6, 5) and (6, 7), bool "
              "(N*H,L,S) mask, per-head weights"),
    dict(name="gqa-g2-h4-unbatched-bias-kv-zero-attn-kpm-float", E=8, H=4, G=2, N=None, L=4, S=5,
         cross=True, bias_kv=True, zero_attn=True, kpm="float",
         note="num_kv_heads=2, unbatched cross, bias_k/bias_v (1,1,4), zero key, float kpm, "
              "averaged weights"),
    dict(name="mqa-g1-h2-no-bias-float-2d-need-weights-false", E=6, H=2, G=1, bias=False, N=2, L=4,
         mask="float-2d", need_weights=False,
         note="multi-query, 2 heads, bias=false, float 2-D mask, need_weights=false"),
    dict(name="gqa-g2-h4-full-kpm-batch-element", E=8, H=4, G=2, N=2, L=3, S=4, cross=True,
         kpm=kpm_all_masked(1), average=False, expect_full=True,
         note="num_kv_heads=2, every key of batch 1 masked: zero rows in every head"),
    dict(name="mqa-g1-h4-decode-single-query-kpm", E=8, H=4, G=1, N=3, L=1, S=7, cross=True,
         batch_first=True, kpm="bool", average=False,
         note="multi-query, L=1 (one decode step) over 7 keys, bool kpm"),
    dict(name="gqa-g4-h8-packed-causal", E=32, H=8, G=4, N=2, L=16, causal=True,
         batch_first=True, w_scale=0.3, grid_bits=6, average=False,
         note="E=32, 8 heads of dim 4 over 4 K/V heads (H/2), L=S=16 (the packed path), causal"),
    dict(name="gqa-explicit-kv-heads-equal-heads", E=8, H=4, G=4, N=2, L=4, S=5, cross=True,
         note="num_kv_heads=num_heads=4 given explicitly: plain multi-head attention"),

    # --- rotary position embeddings (rope_dims; not a torch argument) --------------------------
    dict(name="rope-half-self-causal-batched", E=8, H=2, N=2, L=6, causal=True, average=False,
         rope=(4, "half", 10000.0),
         note="rope_dims=4 (the whole head), rotate-half layout, (L,N,E) self, is_causal, per-head weights"),
    dict(name="rope-interleaved-cross-kdim-unbatched-kpm", E=8, H=2, kdim=5, vdim=3, N=None, L=3,
         S=5, kpm="bool", rope=(4, "interleaved", 100.0),
         note="rope_dims=4 interleaved, base 100, unbatched cross with kdim/vdim (L=3 queries at "
              "positions 0..2, S=5 keys at 0..4), bool kpm, averaged weights"),
    dict(name="rope-partial-gqa-g2-h4-batch-first-mask", E=16, H=4, G=2, N=2, L=5,
         batch_first=True, mask="bool-2d", average=False, rope=(2, "half", 10000.0),
         note="rope_dims=2 of 4 head dims (the rest pass through), 2 K/V heads for 4, batch_first, "
              "bool 2-D mask"),
    dict(name="rope-bias-kv-zero-attn-interleaved", E=8, H=2, N=2, L=4, bias_kv=True,
         zero_attn=True, average=False, rope=(2, "interleaved", 10000.0),
         note="rope_dims=2 interleaved with add_bias_kv and add_zero_attn: the extra keys do not turn"),
    dict(name="rope-half-packed-l16-causal", E=32, H=4, N=1, L=16, causal=True, w_scale=0.3,
         grid_bits=6, average=False, rope=(8, "half", 500000.0),
         note="E=32, 4 heads of dim 8, rope_dims=8, base 500000, L=S=16 (the packed path), causal"),
    # --- ALiBi and sliding windows (headscope's forward options alibi / window; not torch's) --
    dict(name="alibi-causal-batched-self", E=8, H=4, N=2, L=6, causal=True, alibi=True,
         average=False, note="ALiBi, 4 heads (slopes 1/4 ... 1/256), is_causal, per-head weights"),
    dict(name="alibi-noncausal-unbatched-cross-h3", E=6, H=3, N=None, L=4, S=7, cross=True,
         alibi=True, average=False,
         note="ALiBi with 3 heads (get_slopes' non-power-of-two rule), no causal (|i - j| both "
              "ways), unbatched cross S>L"),
    dict(name="window-causal-batch-first-kpm-bool", E=8, H=2, N=3, L=7, batch_first=True,
         causal=True, window=3, kpm="bool", average=False,
         note="causal window 3 (i - 3 < j <= i), bool key_padding_mask, batch_first"),
    dict(name="window-bidirectional-unbatched-self", N=None, L=6, window=2,
         note="bidirectional window 2 (|i - j| < 2), unbatched self, averaged weights"),
    dict(name="alibi-window-causal-bias-kv-zero-attn", N=2, L=5, causal=True, alibi=True,
         window=2, bias_kv=True, zero_attn=True, average=False,
         note="ALiBi + causal window 2 + add_bias_kv + add_zero_attn: the two extra keys stay "
              "visible and unbiased"),
    dict(name="alibi-window-noncausal-kpm-float", E=8, H=4, N=2, L=5, alibi=True, window=3,
         kpm="float", average=False,
         note="ALiBi + bidirectional window 3 + float key_padding_mask (torch run folded)"),
    dict(name="gqa-g2-h4-alibi-window-causal", E=8, H=4, G=2, N=2, L=6, causal=True, alibi=True,
         window=3, average=False,
         note="num_kv_heads=2 of 4, ALiBi (per query head) + causal window 3, per-head weights"),
    dict(name="mqa-g1-h4-alibi-unbatched-cross-need-weights-false", E=8, H=4, G=1, N=None, L=3,
         S=6, cross=True, alibi=True, need_weights=False,
         note="multi-query, ALiBi, unbatched cross (L<S, no causal), need_weights=false"),
    dict(name="alibi-window-causal-packed-l40", E=16, H=2, N=1, L=40, causal=True, alibi=True,
         window=9, w_scale=0.3, grid_bits=6, average=False,
         note="L=S=40 (the packed path: 16-row tiles that skip the keys before the window, "
              "softmax from 16-key panels), ALiBi + causal window 9, per-head weights"),
    dict(name="window-bidirectional-packed-gqa-batch-first", E=24, H=4, G=2, N=2, L=33,
         batch_first=True, window=5, w_scale=0.3, grid_bits=6,
         note="L=S=33 (packed path), 4 heads over 2 K/V heads, bidirectional window 5, "
              "batch_first, averaged weights"),
    dict(name="window-causal-l-gt-s-full-rows", N=None, L=6, S=3, cross=True, causal=True,
         window=2, average=False, expect_full=True,
         note="causal window 2 with L=6 > S=3: queries 4 and 5 see no key (zero rows)"),
    dict(name="alibi-window-l-gt-s-rescued-by-bias-kv", N=2, L=6, S=3, cross=True, causal=True,
         alibi=True, window=2, bias_kv=True, average=False,
         note="as window-causal-l-gt-s-full-rows, batched, with ALiBi: the bias_k key rescues the "
              "rows the window empties"),
    dict(name="window-one-zero-attn-alibi-false", N=2, L=4, window=1, alibi=False, zero_attn=True,
         average=False,
         note="bidirectional window 1 (each query sees only its own key) + the zero key; alibi "
              "false given explicitly"),
]


# ----------------------------------------------------------------------------------------------
# Per-head gates (headscope's ForwardOptions::head_gates / options.headGates; not a torch argument)
# ----------------------------------------------------------------------------------------------
# Each case is a plain case document (the parsers know no gates) with the module's own
# state_dict; its expected values are what real PyTorch gives for the SAME module with head h's
# columns of out_proj.weight multiplied by gate h (0: zeroed, 0.5: halved), which is what a gate
# means. The gates are listed in gates/head_gates.txt beside the files ("name g_0 ... g_H-1");
# golden_test.cc and tests/js/gates.test.js run each file with them. Finite data, no masks that
# fully mask a row (torch's NaN rows would hide what the gate does).

GATE_CASES = [
    dict(name="gates-zero-head1-batched-cross", E=6, H=2, N=2, L=4, S=5, cross=True,
         gates=[1.0, 0.0], note="gate 0 on head 1 = its out_proj columns zeroed; batched, bias"),
    dict(name="gates-half-head0-unbatched-no-bias", E=6, H=2, N=None, L=4, bias=False,
         average=False, gates=[0.5, 1.0],
         note="gate 0.5 on head 0 = its out_proj columns halved; unbatched, no bias, per-head weights"),
    dict(name="gates-zero-and-half-batch-first-no-bias", E=6, H=3, N=2, L=3, S=4, cross=True,
         batch_first=True, bias=False, gates=[0.0, 0.5, 1.0],
         note="3 heads gated 0, 0.5, 1; batched (batch_first), no bias"),
    dict(name="gates-half-head1-unbatched-cross", E=8, H=2, N=None, L=3, S=5, cross=True,
         gates=[1.0, 0.5], note="gate 0.5 on head 1; unbatched cross-attention, bias"),
    dict(name="gates-zero-head0-causal-kpm", E=8, H=4, N=2, L=5, causal=True, kpm="bool",
         gates=[0.0, 1.0, 1.0, 0.5], note="gates 0 and 0.5 with causal + padding masks; batched"),
    dict(name="gates-gqa-g2-h4-zero-and-half", E=8, H=4, G=2, N=2, L=4, S=5, cross=True,
         gates=[1.0, 0.0, 0.5, 1.0],
         note="grouped-query (num_kv_heads=2): gate 0 on head 1 and 0.5 on head 2, each in "
              "another K/V group's half"),
]


def build_gated_case(spec):
    gates = spec["gates"]
    case = build_case({k: v for k, v in spec.items() if k != "gates"})
    cfg, sd, inp = case["config"], case["state_dict"], case["inputs"]
    H, E = cfg["num_heads"], cfg["embed_dim"]
    hd = E // H
    assert len(gates) == H, case["name"]
    assert not case["_full"].any(), f"{case['name']}: a fully masked row (torch NaN)"
    edited = dict(sd)
    w = np.array(sd["out_proj.weight"], dtype=np.float64)
    for h, g in enumerate(gates):
        w[:, h * hd:(h + 1) * hd] *= g  # exact: gates are 0, 0.5 or 1
    edited["out_proj.weight"] = w
    t_out, t_w, _ = torch_forward(cfg, edited, inp)
    assert np.isfinite(t_out).all(), case["name"]
    # The manual forward of the edited module agrees; the gates changed the output but not the
    # weights (torch's weights of the edited module are the original case's).
    m_out, m_w, _, _ = manual_forward(cfg, edited, inp)
    assert np.abs(t_out - m_out).max() <= TOL, case["name"]
    assert np.abs(t_out - case["_out"]).max() > 1e-3, f"{case['name']}: gates changed nothing"
    if t_w is not None:
        assert np.abs(t_w - case["_weights"]).max() <= TOL, case["name"]
    clean = lambda a: None if a is None else a + 0.0
    case["expected"] = {"output": clean(t_out), "weights": clean(t_w)}
    return case, gates


def write_gated_cases(out, write=True):
    gdir = os.path.join(out, "gates")
    os.makedirs(gdir, exist_ok=True)
    lines = ["# Per-head gates of the cases in this folder (tools/make_golden.py): "
             "file name, then one gate per head."]
    rows = []
    for spec in GATE_CASES:
        case, gates = build_gated_case(spec)
        text = render_case(case)
        json.loads(text)
        if write:
            with open(os.path.join(gdir, case["name"] + ".json"), "w", encoding="utf-8",
                      newline="\n") as f:
                f.write(text)
        lines.append(" ".join([case["name"] + ".json"] + [repr(float(g)) for g in gates]))
        rows.append((case["name"], spec.get("note", ""), gates))
        print(f"gates/{case['name']:38s} {len(text):7d} B  gates={gates}")
    with open(os.path.join(gdir, "head_gates.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join("tests", "golden"),
                    help="output directory (default: tests/golden, from the repo root)")
    ap.add_argument("--only", nargs="+", metavar="NAME",
                    help="write only these cases (and the README); every case is still built and "
                         "checked against torch. For adding cases on a machine whose numpy rounds "
                         "the existing files' last bits otherwise (see the README)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_default_dtype(torch.float32)

    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    unknown = set(args.only or []) - set(names)
    assert not unknown, f"--only: no such case: {sorted(unknown)}"
    total = 0
    rows = []
    folded_names = []
    worst = 0.0
    for spec in CASES:
        case = build_case(spec)
        diff, wdiff, folded = check_against_torch(case, case["_full"])
        worst = max(worst, diff, wdiff)
        if folded:
            folded_names.append(case["name"])
        text = render_case(case)
        json.loads(text)  # well-formed
        path = os.path.join(args.out, case["name"] + ".json")
        if args.only is None or case["name"] in args.only:
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
        total += len(text.encode())
        n_full = int(case["_full"].sum())
        rows.append((case["name"], spec.get("note", ""), n_full))
        print(f"{case['name']:45s} {len(text):7d} B  |out-torch|={diff:.1e} |w-torch|={wdiff:.1e}"
              f"  full rows={n_full}  max|score|={case['_max_score']:.4g}" + ("  (folded)" if folded else ""))

    gate_rows = write_gated_cases(args.out, write=args.only is None)
    write_readme(args.out, rows, gate_rows)
    stale = sorted(set(f for f in os.listdir(args.out) if f.endswith(".json"))
                   - {n + ".json" for n in names})
    if stale:
        print("warning: JSON files in", args.out, "that this script did not write:", ", ".join(stale))
    digest = hashlib.sha256()
    for fn in sorted(os.listdir(args.out)) + sorted("gates/" + g for g in
                                                    os.listdir(os.path.join(args.out, "gates"))):
        if os.path.isdir(os.path.join(args.out, fn)):
            continue
        with open(os.path.join(args.out, fn), "rb") as f:
            digest.update(fn.encode() + b"\0" + f.read())
    print(f"\n{len(CASES)} cases, {total} bytes of JSON; worst |manual - torch| = {worst:.2e}")
    print("torch run with masks folded (float key_padding_mask + attn_mask):", ", ".join(folded_names))
    print(f"sha256 of {args.out}: {digest.hexdigest()}")


def write_readme(out, rows, gate_rows):
    lines = [
        "# Golden attention cases",
        "",
        "Each `*.json` here is one call of `torch.nn.MultiheadAttention` in the case format of",
        "`docs/case-format.md` (config, state_dict, inputs, expected output and weights).",
        "This README and the cases are generated; do not edit them by hand. Regenerate with",
        "",
        "```sh",
        "tools/setup.sh --golden                   # python3-torch, python3-numpy (Debian)",
        "/usr/bin/python3 tools/make_golden.py     # from the repo root; --out DIR to write elsewhere",
        "```",
        "",
        "The script is deterministic (one fixed seed per case, derived from its name): re-running it",
        "rewrites byte-identical files on the same kind of CPU. numpy picks SIMD code at run time",
        "(float64 `exp` has an AVX-512 path and a libm one), so on another CPU the expected values can",
        "differ in their last bits (~1e-16 relative; inputs and weights never do): the files before",
        "the ALiBi/window cases were written on an AVX-512 machine, those cases on an AVX2 one with",
        "`--only` (which writes just the named cases, still checking every case against torch).",
        "",
        "## How the expected values were made",
        "",
        "- Inputs, weights and float masks are float32 numbers drawn from fixed seeds and rounded to",
        "  multiples of 1/256 (1/64 in the `realistic-*` cases) so that their exact decimals stay short;",
        "  expected values are float64 results of exactly those numbers (written with `repr`).",
        "- Non-finite mask entries are written as the string `\"-inf\"`, as the spec allows.",
        "- `expected` comes from a small float64 implementation of the forward pass in the script. For",
        "  every case the script runs the real `torch.nn.MultiheadAttention` (PyTorch 1.13, float64, eval,",
        "  dropout 0) and asserts the two agree to 1e-10 wherever torch is finite.",
        "- Torch 1.13's `forward` has no `is_causal`: it was given the causal bool mask",
        "  (`mask[i][j] = j > i`, shape (L, S)).",
        "- Torch 1.13 mis-merges a float `key_padding_mask` with an `attn_mask` (OR-ed as bool, or",
        "  ignored); for those cases torch got both folded into one additive float 3-D `attn_mask`. The",
        "  files keep the masks as given, with the spec's meaning (float masks are added).",
        "- The float32 numerics cases (`exp-*`, `scale-before-dot-*`) use given values off the grid",
        "  (3e38, 7.9e18, scores down to -1000; all exactly float32) and are also run through torch's",
        "  float32 module, which must give the expected values within a relative error of 1e-5 with the",
        "  same non-finite entries: subnormal softmax weights count, and q is divided by sqrt(head_dim)",
        "  before q . k (unscaled, the product would overflow). `exp-subnormal-weight-inf-value`",
        "  expects an infinite output.",
        "- Grouped-query attention (`gqa-*`, `mqa-*`, `gates/gates-gqa-*`): `num_kv_heads` (G) is not a",
        "  `torch.nn.MultiheadAttention` argument. The K and V projections have G * head_dim rows",
        "  (`in_proj_weight` (E + 2 G hd, E), `k_proj_weight` (G hd, kdim), `in_proj_bias`",
        "  (E + 2 G hd), `bias_k` (1, 1, G hd)) and head h reads K/V head h // (H / G). The torch run",
        "  projects with `F.linear`, repeats K and V with `repeat_interleave(H // G, dim=1)` and calls",
        "  `F._scaled_dot_product_attention` (torch 1.13's name of `scaled_dot_product_attention`) with",
        "  the masks as one additive float mask; the same 1e-10 agreement and NaN rows are asserted.",
        "  Only these files have `num_kv_heads` in their config.",
        "- Rotary position embeddings (`rope-*`): `rope_dims` (r), `rope_layout` and `rope_base` are",
        "  not `torch.nn.MultiheadAttention` arguments. After the projections (and their biases), the",
        "  first r dims of each query head turn by the query's position i and of each key head by the",
        "  key's position j (pair p by i / rope_base^(2p / r): (a, b) -> (a cos - b sin, a sin + b cos),",
        "  pairs (p, p + r/2) with `half`, (2p, 2p + 1) with `interleaved`); the extra keys of",
        "  `add_bias_kv` / `add_zero_attn` do not turn. The torch run is the grouped-query one above",
        "  with `tools/tiny_transformer.py`'s `apply_rope` on q and the first S keys; the same 1e-10",
        "  agreement is asserted. Only these files have the `rope_*` keys in their config.",
        "- ALiBi and sliding windows (`alibi-*`, `window-*`, `gqa-*-alibi-*`, `mqa-*-alibi-*`): headscope's",
        "  forward options `alibi` and `window` (not torch arguments; in these files' `inputs` only).",
        "  Query i is at position i and key j at j; ALiBi adds -(m_h |i - j|) (m_h: Press et al.'s",
        "  slopes, `alibi_slopes` of `tools/tiny_transformer.py`, float32; the distance is symmetric",
        "  without `is_causal`) and a window w blocks j <= i - w (and j >= i + w without `is_causal`).",
        "  The extra keys of `add_bias_kv` / `add_zero_attn` get neither: always visible, never biased.",
        "  The torch run gives `torch.nn.MultiheadAttention` (or the GQA path) one additive float",
        "  `attn_mask` (N*H, L, S) holding the bias, -inf outside the window and the call's own masks;",
        "  the module pads it with zeros for the extra keys.",
        "",
        "## Fully masked rows",
        "",
        "Where every key of a (batch, head, query) row is masked, PyTorch returns NaN. headscope's policy",
        "(and these files) give that head a zero attention row: its weights are 0 and its attention",
        "output is 0 before `out_proj`. The script asserts torch is NaN exactly in those rows (and in",
        "the head-averaged weights and output rows they feed). The extra keys of `add_bias_kv` and",
        "`add_zero_attn` are never masked, so with them no row is fully masked (`rescued-*` cases).",
        "With head-averaged weights, a query row where only some heads are fully masked sums to",
        "(heads left)/num_heads. The last column below counts fully masked (batch, head, query) rows.",
        "",
        "The seed's worked example prints 1.700 for Y[0][0] because it rounds intermediate values;",
        "the exact value is 1.70055 (1.701 at 3 decimals). The script asserts the seed's other numbers.",
        "",
        "## Cases",
        "",
        "| case | covers | full rows |",
        "| --- | --- | --- |",
    ]
    for name, note, n_full in rows:
        lines.append(f"| `{name}` | {note} | {n_full or ''} |")
    lines += [
        "",
        "## Per-head gates (`gates/`)",
        "",
        "headscope's `head_gates` (`options.headGates`) is not a torch argument, and the case format",
        "has no field for it: the files in `gates/` are plain case documents holding the module's own",
        "`state_dict`, whose `expected` values are real PyTorch's for the same module with head h's",
        "columns of `out_proj.weight` multiplied by gate h (0 zeroes them, 0.5 halves them).",
        "`gates/head_gates.txt` lists each file's gates (one per head); `tests/cpp/golden_test.cc`",
        "and `tests/js/gates.test.js` run every file with them. They sit in a folder of their own",
        "because without their gates they would not match.",
        "",
        "| case | covers | gates |",
        "| --- | --- | --- |",
    ]
    for name, note, gates in gate_rows:
        lines.append(f"| `gates/{name}` | {note} | {', '.join(repr(float(g)) for g in gates)} |")
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
