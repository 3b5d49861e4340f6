#!/usr/bin/python3
"""Generate headscope's causal-experiment goldens (tests/golden/experiments/*.json and README.md).

Run from the repository root with Debian's interpreter (the only one that has PyTorch):

    /usr/bin/python3 tools/make_experiments_golden.py [--out DIR]

Each case is one config of the reference module tools/tiny_transformer.py (the project's
contract) with its float32 weights (made as tools/make_transformer_golden.py makes them, from the
case's name), clean tokens [B, T], corrupted tokens (a third of the positions redrawn) and
next-token targets of the clean tokens (the last position -100). Everything below is computed by
torch in float64 on those weights (src/headscope/experiments.h defines each experiment; this
script computes them independently of it, with the module's own hooks):

  logit_lens   [L + 1, B, T, V]: blocks.0.hook_resid_pre, then every blocks.{l}.hook_resid_post,
               through ln_final (pre-norm only) and unembed.
  rollout      [L, B, T, T]: Abnar & Zuidema's rollout, R_l = rownorm(0.5 mean_h(pattern_l) +
               0.5 I) R_{l-1}, R_{-1} = I.
  scores       for a few (layer, head, batch, position): terms [T, d_head] = q_d k_d / sqrt(d_head)
               (the rotated q and k under RoPE, the group's key head under grouped-query
               attention), dot = their sum, bias (ALiBi's term, -inf where masked, else 0) and
               score (attn.hook_attn_scores).
  patching     for site "heads" (attn.hook_z of one head, every position: grid [L, H]) and
               "positions" (hook_resid_pre at one position: grid [L, T]): the corrupted run
               with that clean activation patched in (the module's `patches`), its loss
               (cross-entropy against the targets) and logit (the mean of the target tokens'
               logits over the counted positions); and both for the clean and corrupted runs.

File format (one JSON object): kind "experiments", name, config (tests/golden/transformer's keys),
state_dict (float32 values written as their float64), clean, corrupted, targets, expected
{logit_lens, rollout, scores: [{layer, head, batch, position, terms, dot, bias, score}],
patching: {heads: {loss, logit}, positions: {loss, logit}, clean: {loss, logit},
corrupted: {loss, logit}}}. Re-running the script rewrites byte-identical files.
"""

import argparse
import json
import math
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in tools/

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_transformer as tt  # noqa: E402
from make_transformer_golden import (build_model32, case, config_keys, config_summary,  # noqa: E402
                                     dumps, nested)

# (spec, score queries (layer, head, batch, position))
CASES = [
    (case(V=16, L=32, D=32, layers=2, heads=2, mlp=0, norm="pre", pos="learned", B=1, T=16,
          covers="the Train view's default shape: 2 layers of 2 heads, attention only"),
     [(1, 0, 0, 15), (0, 1, 0, 7)]),
    (case(V=13, L=16, D=16, layers=2, heads=4, kv=2, mlp=16, norm="pre", pos="rope", rope="half",
          fraction=0.5, B=2, T=8, covers="grouped-query attention, partial RoPE (rotated q and k "
          "in the score terms), MLP, B = 2"),
     [(1, 3, 1, 7), (0, 0, 0, 4)]),
    (case(V=11, L=12, D=12, layers=2, heads=3, mlp=0, norm="none", pos="alibi", window=4,
          sinks=True, B=2, T=7, covers="ALiBi's bias and a window's -inf in the scores, attention "
          "sinks (rollout rows renormalised), no LayerNorm"),
     [(1, 2, 0, 6), (0, 0, 1, 3)]),
    (case(V=9, L=8, D=8, layers=3, heads=2, mlp=12, norm="post", pos="sinusoidal", causal=False,
          act="relu", B=1, T=6, covers="post-norm (no ln_final in the lens), non-causal, "
          "sinusoidal, 3 layers"),
     [(2, 1, 0, 0), (1, 0, 0, 5)]),
]


def metrics(logits, targets):
    """(cross-entropy against targets, mean logit of the target tokens over counted positions)."""
    V = logits.shape[-1]
    flat, y = logits.reshape(-1, V), targets.reshape(-1)
    counted = y != -100
    loss = F.cross_entropy(flat, y, ignore_index=-100)
    logit = flat[counted].gather(1, y[counted].view(-1, 1)).mean()
    return float(loss), float(logit)


def read_out(model, x):
    if model.ln_final is not None:
        x = model.ln_final(x)
    return model.unembed(x)


def build_doc(spec, queries):
    c = spec["config"]
    L, H, D = c["n_layers"], c["n_heads"], c["d_model"]
    G, dh = c.get("n_kv_heads") or H, D // H
    model32, gen = build_model32(spec)
    B, T = spec["B"], spec["T"]
    clean = torch.randint(0, c["vocab_size"], (B, T), generator=gen)
    corrupted = clean.clone()
    redraw = torch.rand(B, T, generator=gen) < 1 / 3
    corrupted[redraw] = torch.randint(0, c["vocab_size"], (int(redraw.sum()),), generator=gen)
    targets = torch.roll(clean, -1, dims=1)
    targets[:, -1] = -100
    sd32 = model32.state_dict()
    model = tt.TinyTransformer(**c)
    model.load_state_dict(sd32)
    model = model.double().eval()
    expected = {}
    with torch.no_grad():
        logits, hooks = model(clean)
        stages = [hooks["blocks.0.hook_resid_pre"]] + [hooks[f"blocks.{l}.hook_resid_post"]
                                                       for l in range(L)]
        lens = torch.stack([read_out(model, x) for x in stages])
        assert torch.allclose(lens[-1], logits, rtol=0, atol=1e-12)
        expected["logit_lens"] = nested(lens)

        eye = torch.eye(T, dtype=torch.float64)
        rollout, rows = torch.eye(T, dtype=torch.float64).expand(B, T, T), []
        for l in range(L):
            a = 0.5 * hooks[f"blocks.{l}.attn.hook_pattern"].mean(dim=1) + 0.5 * eye
            a = a / a.sum(dim=-1, keepdim=True)
            rollout = a @ rollout
            rows.append(rollout)
        expected["rollout"] = nested(torch.stack(rows))

        rope = c["positions"] == "rope"
        mask = tt.window_mask(T, c["causal"], c.get("attn_window", 0))
        alibi = tt.alibi_bias(H, T, torch.float64) if c["positions"] == "alibi" else None
        scores = []
        for (l, h, b, i) in queries:
            q = hooks[f"blocks.{l}.attn.hook_{'rot_q' if rope else 'q'}"][b, h, i]       # [dh]
            k = hooks[f"blocks.{l}.attn.hook_{'rot_k' if rope else 'k'}"][b, h // (H // G)]  # [T, dh]
            terms = q.view(1, dh) * k / math.sqrt(dh)
            bias = alibi[h, i].clone() if alibi is not None else torch.zeros(T, dtype=torch.float64)
            if mask is not None:
                bias[mask[i]] = -math.inf
            score = hooks[f"blocks.{l}.attn.hook_attn_scores"][b, h, i]
            visible = torch.isfinite(bias)
            assert torch.allclose((terms.sum(-1) + bias)[visible], score[visible], atol=1e-12)
            scores.append({"layer": l, "head": h, "batch": b, "position": i,
                           "terms": nested(terms), "dot": nested(terms.sum(-1)),
                           "bias": nested(bias), "score": nested(score)})
        expected["scores"] = scores

        clean_hooks = hooks
        patching = {"clean": dict(zip(("loss", "logit"), metrics(logits, targets))),
                    "corrupted": dict(zip(("loss", "logit"),
                                          metrics(model(corrupted)[0], targets)))}
        for site, suffix, cells in (("heads", "attn.hook_z", H), ("positions", "hook_resid_pre", T)):
            loss, logit = torch.zeros(L, cells, dtype=torch.float64), torch.zeros(L, cells,
                                                                                 dtype=torch.float64)
            for l in range(L):
                name = f"blocks.{l}.{suffix}"
                source = clean_hooks[name]
                for k in range(cells):
                    def patch(x, k=k, source=source, site=site):
                        x = x.clone()
                        if site == "heads":
                            x[:, k] = source[:, k]      # [B, H, T, dh]: head k
                        else:
                            x[:, k] = source[:, k]      # [B, T, D]: position k
                        return x
                    out, _ = model(corrupted, patches={name: patch})
                    loss[l, k], logit[l, k] = metrics(out, targets)
            patching[site] = {"loss": nested(loss), "logit": nested(logit)}
        expected["patching"] = patching
    return {"kind": "experiments", "name": spec["name"],
            "config": {k: c[k] for k in config_keys(c)},
            "state_dict": {k: nested(v) for k, v in sd32.items()},
            "clean": clean.tolist(), "corrupted": corrupted.tolist(), "targets": targets.tolist(),
            "expected": expected}


def render(doc):
    """Top-level keys one per line, state_dict and expected entries one per line."""
    lines = ["{"]
    for key, v in doc.items():
        if key in ("state_dict", "expected"):
            lines.append(f'"{key}": {{')
            items = list(v.items())
            for i, (k, x) in enumerate(items):
                lines.append(f"  {dumps(k)}: {dumps(x)}" + ("," if i + 1 < len(items) else ""))
            lines.append("},")
        else:
            lines.append(f"{dumps(key)}: {json.dumps(v, allow_nan=False)},")
    lines[-1] = lines[-1].rstrip(",")
    return "\n".join(lines + ["}"]) + "\n"


README_HEAD = """\
# Golden causal experiments

Each `*.json` here holds one model of the reference module `tools/tiny_transformer.py` (config
and float32 `state_dict`, as in `tests/golden/transformer`), clean and corrupted tokens, targets,
and what torch computes from them in float64: the logit lens, attention rollout, a few scores
split into their per-dimension terms, and activation patching over heads and residual positions
(the definitions: `tools/make_experiments_golden.py` and `src/headscope/experiments.h`).
headscope's engine must agree within 1e-5 (`tests/cpp/experiments_test.cc` natively and in
WebAssembly, `tests/js/causal.test.js` through the package). Generated by
`/usr/bin/python3 tools/make_experiments_golden.py`; do not edit by hand.

| case | config | tokens | covers |
| --- | --- | --- | --- |
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "golden", "experiments"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for spec, queries in CASES:
        doc = build_doc(spec, queries)
        with open(os.path.join(args.out, spec["name"] + ".json"), "w", encoding="utf-8",
                  newline="\n") as f:
            f.write(render(doc))
        rows.append(f"| `{spec['name']}` | {config_summary(spec['config'])} | B={spec['B']} "
                    f"T={spec['T']} | {spec['covers']} |")
        print(f"{spec['name']}: clean vs corrupted loss {doc['expected']['patching']['clean']['loss']:.4f}"
              f" / {doc['expected']['patching']['corrupted']['loss']:.4f}")
    names = {spec["name"] + ".json" for spec, _ in CASES}
    stale = sorted(f for f in os.listdir(args.out) if f.endswith(".json") and f not in names)
    assert not stale, f"stale files in {args.out}: {stale}"
    with open(os.path.join(args.out, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(README_HEAD + "\n".join(rows) + "\n")
    print(f"{len(CASES)} cases")


if __name__ == "__main__":
    main()
