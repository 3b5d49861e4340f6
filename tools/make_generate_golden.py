#!/usr/bin/python3
"""Generate headscope's greedy-generation goldens (tests/golden/generate/*.json and README.md).

Run from the repository root with Debian's interpreter (the only one that has PyTorch):

    /usr/bin/python3 tools/make_generate_golden.py [--out DIR]

Each case is one config of the reference module tools/tiny_transformer.py (the project's
contract), its float32 weights (made as tools/make_transformer_golden.py makes them, from the
case's name), a prompt of B sequences and the tokens greedy generation appends: at every step
the module runs on the whole sequence so far (no cache: the definition), in float64, and each
sequence takes the argmax of its last position's logits, the lowest index on ties (the
contract's rule). headscope generates with a KV cache, in float32; the two agree on the tokens
only where the argmax is clear, so every step's margin (largest logit minus the runner-up) must
be at least MIN_MARGIN in float64, which the script asserts, and the float32 module (torch's, on
the same weights, recomputing the whole sequence) must choose the same tokens, also asserted.
The cases cover the attention variants: grouped-query and multi-query attention, both RoPE
layouts and partial rotary, ALiBi, sliding windows (windows shorter than the sequence, so the
cache's steps must drop keys), attention sinks, and generations that end at max_len.

File format (one JSON object): kind "generate", name, config (tests/golden/transformer's keys),
state_dict (the module's, float32 values written as their float64), prompt [B, T0] token ids,
max_new_tokens n, expected.tokens [B, T0 + n] (the prompt, then the new tokens) and
expected.min_margin (the smallest float64 margin of any step, for the reader's information).
Re-running the script rewrites byte-identical files.
"""

import argparse
import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in tools/

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_transformer as tt  # noqa: E402
from make_transformer_golden import (build_model32, case, config_keys, config_summary,  # noqa: E402
                                     dumps, nested)

MIN_MARGIN = 1e-3  # float64 logits: far above float32's error on these models (~1e-6)

# prompt: B sequences of T tokens drawn from the case's generator; new: max_new_tokens.
CASES = [
    (case(V=13, L=24, D=16, layers=2, heads=4, kv=2, mlp=16, norm="pre", pos="learned", B=2, T=5,
          covers="grouped-query attention (2 K/V heads for 4), to max_len"), 19),
    (case(V=11, L=20, D=12, layers=2, heads=3, kv=1, mlp=0, norm="post", pos="sinusoidal", B=2,
          T=3, covers="multi-query attention, post-norm, sinusoidal"), 12),
    (case(V=12, L=24, D=16, layers=2, heads=2, mlp=16, norm="pre", pos="rope", rope="half", B=2,
          T=4, covers="RoPE rotate-half: the cache's steps continue the positions, to max_len"), 20),
    (case(V=12, L=20, D=16, layers=1, heads=2, kv=1, mlp=8, norm="pre", pos="rope",
          rope="interleaved", fraction=0.5, base=100.0, B=1, T=6, covers="RoPE interleaved, "
          "partial (4 of 8 dims), base 100, multi-query"), 14),
    (case(V=10, L=24, D=16, layers=2, heads=4, mlp=16, norm="pre", pos="alibi", B=2, T=4,
          covers="ALiBi with 4 heads, to max_len"), 20),
    (case(V=10, L=24, D=12, layers=2, heads=6, kv=3, mlp=0, norm="pre", pos="alibi", window=5,
          B=2, T=3, covers="ALiBi (6 heads: not a power of two) with a window of 5 and 3 K/V "
          "heads: steps past position 5 drop keys"), 18),
    (case(V=11, L=20, D=16, layers=2, heads=2, mlp=16, norm="none", pos="learned", window=3, B=2,
          T=2, covers="a causal window of 3, learned positions, no LayerNorm"), 18),
    (case(V=12, L=20, D=16, layers=2, heads=4, kv=2, mlp=8, norm="pre", pos="rope", rope="half",
          window=6, sinks=True, B=2, T=4, covers="attention sinks with RoPE, a window of 6 and "
          "grouped-query attention, to max_len"), 16),
    (case(V=9, L=16, D=8, layers=1, heads=2, mlp=0, norm="pre", pos="learned", sinks=True, B=3,
          T=1, covers="attention sinks, a one-token prompt"), 10),
]


def greedy(model, prompt, n):
    """Greedy tokens and the smallest margin: the whole sequence recomputed at every step."""
    tokens, margin = prompt.clone(), float("inf")
    with torch.no_grad():
        for _ in range(n):
            last = model(tokens)[0][:, -1]                       # [B, V]
            top = last.max(dim=-1).values
            # The lowest index among the maxima (the contract's tie rule), not torch's choice.
            pick = torch.stack([torch.nonzero(row == t)[0, 0] for row, t in zip(last, top)])
            second = last.clone()
            second[torch.arange(len(pick)), pick] = -float("inf")
            margin = min(margin, float((top - second.max(dim=-1).values).min()))
            tokens = torch.cat([tokens, pick.view(-1, 1)], dim=1)
    return tokens, margin


def build_doc(spec, n):
    c = spec["config"]
    assert spec["targets"] is None and spec["gates"] is None and spec["B"] is not None
    assert spec["T"] + n <= c["max_len"]
    model32, gen = build_model32(spec)
    prompt = torch.randint(0, c["vocab_size"], (spec["B"], spec["T"]), generator=gen)
    sd32 = model32.state_dict()
    model64 = tt.TinyTransformer(**c)
    model64.load_state_dict(sd32)
    model64 = model64.double().eval()
    tokens, margin = greedy(model64, prompt, n)
    assert margin >= MIN_MARGIN, f"{spec['name']}: a step's margin is {margin:.3g}"
    tokens32, _ = greedy(model32, prompt, n)
    assert torch.equal(tokens32, tokens), spec["name"] + ": float32 chooses other tokens"
    return {"kind": "generate", "name": spec["name"], "config": {k: c[k] for k in config_keys(c)},
            "state_dict": {k: nested(v) for k, v in sd32.items()}, "prompt": prompt.tolist(),
            "max_new_tokens": n,
            "expected": {"tokens": tokens.tolist(), "min_margin": float(f"{margin:.6g}")}}


def render(doc):
    """Top-level keys one per line, state_dict entries one per line."""
    lines = ["{"]
    for key, v in doc.items():
        if key == "state_dict":
            lines.append('"state_dict": {')
            items = list(v.items())
            for i, (k, x) in enumerate(items):
                lines.append(f"  {dumps(k)}: {dumps(x)}" + ("," if i + 1 < len(items) else ""))
            lines.append("},")
        else:
            lines.append(f"{dumps(key)}: {json.dumps(v, allow_nan=False)},")
    lines[-1] = lines[-1].rstrip(",")
    return "\n".join(lines + ["}"]) + "\n"


README_HEAD = """\
# Golden greedy generations

Each `*.json` here is a greedy generation of the reference module `tools/tiny_transformer.py`
(the project's contract) with PyTorch: config and `state_dict` (as in `tests/golden/transformer`),
a `prompt` [B, T0], `max_new_tokens` n and `expected.tokens` [B, T0 + n]. Every step ran the
module on the whole sequence so far in float64 and took the argmax of the last position's logits
(lowest index on ties); every step's margin (top logit minus the runner-up) is at least 1e-3
(`expected.min_margin` is the smallest), and torch's float32 module chose the same tokens.
headscope's `generate` (a KV cache, float32) must give exactly these tokens
(`tests/cpp/transformer_generate_test.cc`, `tests/js/generate.test.js`). Generated by
`/usr/bin/python3 tools/make_generate_golden.py`; do not edit by hand.

| case | config | prompt, new tokens | min margin | covers |
| --- | --- | --- | --- | --- |
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "golden", "generate"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for spec, n in CASES:
        doc = build_doc(spec, n)
        with open(os.path.join(args.out, spec["name"] + ".json"), "w", encoding="utf-8",
                  newline="\n") as f:
            f.write(render(doc))
        margin = doc["expected"]["min_margin"]
        rows.append(f"| `{spec['name']}` | {config_summary(spec['config'])} | B={spec['B']} "
                    f"T0={spec['T']}, {n} new | {margin:g} | {spec['covers']} |")
        print(f"{spec['name']}: {n} tokens, min margin {margin:g}")
    names = {spec["name"] + ".json" for spec, _ in CASES}
    stale = sorted(f for f in os.listdir(args.out) if f.endswith(".json") and f not in names)
    assert not stale, f"stale files in {args.out}: {stale}"
    with open(os.path.join(args.out, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(README_HEAD + "\n".join(rows) + "\n")
    print(f"{len(CASES)} cases")


if __name__ == "__main__":
    main()
