#!/usr/bin/python3
"""Generate headscope's golden optimizer cases (tests/golden/optim/*.json).

Run from the repository root with Debian's interpreter (the only one that has PyTorch):

    /usr/bin/python3 tools/make_optim_golden.py [--out DIR]

(`tools/setup.sh --golden` installs python3-torch and python3-numpy.)

Each file is one set of float32 parameter tensors (mixed shapes), its initial values and a
sequence of 5 gradient sets, and the cases run on it: torch 1.13's optimizers as the contract
(tools/tiny_transformer.py) states them, stepped 5 times from the initial values:
  * torch.optim.AdamW(params, lr, betas, eps, weight_decay, foreach=False) (_single_tensor_adamw),
  * torch.optim.SGD(params, lr, momentum=0, weight_decay=0, foreach=False),
each optionally preceded by torch.nn.utils.clip_grad_norm_(params, max_norm) at every step. A
case records the parameters after every step and, for clipping cases, whether the step clipped
(torch's coefficient max_norm / (norm + 1e-6) below 1). The file records each step's gradient norm
as clip_grad_norm_ computes it (float32) and in float64 (the exact squares of the float32
gradients summed in float64).

How the numbers are made: the parameters and gradients are float32 values from a torch generator
seeded with the crc32 of the set's name; the gradients include a tensor that is zero at every
step, one that is zero at some steps, large (~1e4) and tiny (~1e-7, where eps matters)
magnitudes and a tensor whose magnitudes span 1e-6 .. 1e4; a set clips where torch's float32
norm gives another clipping coefficient than the exact norm rounded to float32 (the one set
where headscope, which sums the norm in float64, cannot have torch's bits); a set has an empty
tensor. Everything is float32 and is written
as the shortest decimal that reads back as the same float32 (through float64, as a JSON reader
does; the script checks every value). The clipping norms of the "some" cases are chosen between
the set's step norms, so those cases clip at some steps and not at others (asserted).

Each written file is checked before the next: it is read back, its initial values and gradients
replayed through torch, and every recorded parameter must come out bit for bit. Re-running the
script rewrites byte-identical files.
"""

import argparse
import json
import math
import os
import sys
import zlib

sys.dont_write_bytecode = True

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
STEPS = 5
MAX_TOTAL_BYTES = 80_000

# ----------------------------------------------------------------------------------------------
# Parameter sets and their gradients
# ----------------------------------------------------------------------------------------------

# (name, shape, initial-value scale, gradient kind)
SETS = {
    "mixed": [
        ("w", (4, 6), 1.0, "normal"),
        ("b", (6,), 1.0, "zero-at-steps"),  # zero gradient at steps 2 and 3 (0-based 1, 2)
        ("cube", (2, 3, 4), 1.0, "span"),   # |g| log-uniform in [1e-6, 1e4], random signs
        ("one", (1,), 1.0, "normal"),
        ("frozen", (5,), 1.0, "zero"),      # zero gradient every step: only weight decay moves it
        ("large", (3, 3), 50.0, "large"),   # ~1e4
        ("tiny", (8,), 0.1, "tiny"),        # ~1e-7: sqrt(v) comparable to eps
    ],
    # Clipping where torch's float32 norm is not the float32 rounding of the exact one and the
    # clipping coefficient differs (asserted): there a float64 norm cannot give torch's bits.
    "clip-rounding": [
        ("v", (40,), 1.0, "normal"),
        ("m", (6, 7), 1.0, "normal"),
    ],
    # A set with an empty tensor: it has no elements, no norm contribution, no update.
    "with-empty": [
        ("empty", (0, 3), 1.0, "normal"),
        ("a", (3,), 1.0, "normal"),
        ("m", (2, 5), 1.0, "normal"),
    ],
}


def seed_of(name):
    return zlib.crc32(name.encode())


def make_set(name):
    gen = torch.Generator().manual_seed(seed_of(name))
    params, grads = [], [[] for _ in range(STEPS)]
    for pname, shape, scale, kind in SETS[name]:
        params.append((pname, shape, torch.randn(shape, generator=gen) * scale))
        for s in range(STEPS):
            n = torch.randn(shape, generator=gen)
            if kind == "normal":
                g = n
            elif kind == "zero-at-steps":
                g = n * 0.1 if s not in (1, 2) else torch.zeros(shape)
            elif kind == "span":
                e = torch.rand(shape, generator=gen) * 10 - 6  # exponent in [-6, 4)
                g = torch.sign(n) * torch.pow(10.0, e)
            elif kind == "zero":
                g = torch.zeros(shape)
            elif kind == "large":
                g = n * 1e4
            elif kind == "tiny":
                g = n * 1e-7
            else:
                raise ValueError(kind)
            grads[s].append(g.to(torch.float32).contiguous())
    return params, grads


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------

def adamw(name, set_name, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, clip=0):
    return {"name": name, "set": set_name,
            "optimizer": {"type": "adamw", "lr": lr, "betas": list(betas), "eps": eps,
                          "weight_decay": weight_decay, "clip_grad_norm": clip}}


def sgd(name, set_name, lr, clip=0):
    return {"name": name, "set": set_name,
            "optimizer": {"type": "sgd", "lr": lr, "clip_grad_norm": clip}}


# clip "some": a norm between the set's step norms, filled in from them.
SOME = "some"

CASES = [
    adamw("adamw-defaults", "mixed", 1e-3),
    adamw("adamw-no-weight-decay", "mixed", 1e-2, weight_decay=0.0),
    adamw("adamw-clip-always", "mixed", 1e-2, betas=(0.9, 0.98), clip=1.0),
    adamw("adamw-clip-never", "mixed", 1e-2, betas=(0.9, 0.98), clip=1e6),
    adamw("adamw-clip-some", "mixed", 3e-3, clip=SOME),
    adamw("adamw-beta1-0-large-eps", "mixed", 0.1, betas=(0.0, 0.5), eps=1e-3, weight_decay=0.1),
    adamw("adamw-high-betas-tiny-eps", "mixed", 3e-4, betas=(0.99, 0.9999), eps=1e-12,
          weight_decay=1e-4),
    adamw("adamw-empty-tensor-clip", "with-empty", 5e-2, clip=0.5),
    sgd("sgd", "mixed", 1e-3),
    sgd("sgd-clip-always", "mixed", 0.5, clip=1.0),
    sgd("sgd-clip-never", "mixed", 0.05, clip=1e6),
    sgd("sgd-clip-some", "mixed", 0.01, clip=SOME),
    sgd("sgd-empty-tensor", "with-empty", 0.1),
    adamw("adamw-clip-rounding", "clip-rounding", 1e-2, clip=1.0),
    sgd("sgd-clip-rounding", "clip-rounding", 0.1, clip=1.0),
]


def torch_norm(grads):
    """clip_grad_norm_'s total norm (torch 1.13, norm_type 2), without modifying anything."""
    return torch.norm(torch.stack([torch.norm(g.detach(), 2.0) for g in grads]), 2.0)


def f64_norm(grads):
    return math.sqrt(sum(float(np.sum(g.numpy().astype(np.float64) ** 2)) for g in grads))


def clip_coef(norm32, case):
    """torch's clipping coefficient from a float32 norm: max_norm / (norm + 1e-6), clamped."""
    one, eps = np.float32(1), np.float32(1e-6)
    c = (one / np.float32(norm32 + eps)) * np.float32(case["optimizer"]["clip_grad_norm"])
    return min(np.float32(c), one)


def run_case(case, params, grads):
    """The parameters after each step, and whether each step clipped."""
    ps = [torch.nn.Parameter(p.clone()) for _, _, p in params]
    o = case["optimizer"]
    if o["type"] == "adamw":
        opt = torch.optim.AdamW(ps, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                                weight_decay=o["weight_decay"], foreach=False)
    else:
        opt = torch.optim.SGD(ps, lr=o["lr"], momentum=0, weight_decay=0, foreach=False)
    after, clipped = [], []
    for s in range(STEPS):
        for p, g in zip(ps, grads[s]):
            p.grad = g.clone()
        if o["clip_grad_norm"] > 0:
            total = torch.nn.utils.clip_grad_norm_(ps, o["clip_grad_norm"])
            assert torch.equal(total, torch_norm(grads[s])), case["name"]
            clipped.append(bool(o["clip_grad_norm"] / (total + 1e-6) < 1))
        opt.step()
        after.append([p.detach().clone() for p in ps])
    return after, clipped


# ----------------------------------------------------------------------------------------------
# Writing: float32 values as their shortest decimal
# ----------------------------------------------------------------------------------------------

def f32(x):
    """The shortest decimal of a float32 that reads back (through float64) as the same float32.
    Zeros keep their sign as "-0.0" (a JSON reader may take "-0" for the integer 0)."""
    x = np.float32(x)
    a = abs(float(x))
    if a == 0:
        s = "-0.0" if np.signbit(x) else "0.0"
    elif 1e-4 <= a < 1e6:
        s = np.format_float_positional(x, unique=True, trim="-")
    else:
        s = np.format_float_scientific(x, unique=True, trim="-", exp_digits=1)
    back = np.float32(float(s))
    assert back.tobytes() == x.tobytes(), (x, s)
    return s


def flat(t):
    return "[" + ",".join(f32(v) for v in t.reshape(-1).numpy()) + "]"


def render(set_name, params, grads, cases):
    lines = ["{",
             f'  "generator": "tools/make_optim_golden.py", "torch": "{torch.__version__}",',
             f'  "set": "{set_name}", "steps": {STEPS},',
             '  "params": [']
    for k, (name, shape, p) in enumerate(params):
        sep = "," if k + 1 < len(params) else ""
        lines.append(f'    {{"name": "{name}", "shape": {json.dumps(list(shape))}, '
                     f'"init": {flat(p)}}}{sep}')
    lines.append("  ],")
    lines.append('  "grads": [')
    for s in range(STEPS):
        sep = "," if s + 1 < STEPS else ""
        lines.append("    [" + ", ".join(flat(g) for g in grads[s]) + "]" + sep)
    lines.append("  ],")
    norms = [torch_norm(grads[s]) for s in range(STEPS)]
    lines.append('  "grad_norm": [' + ", ".join(f32(n) for n in norms) + "],")
    lines.append('  "grad_norm_f64": [' + ", ".join(repr(f64_norm(grads[s])) for s in range(STEPS))
                 + "],")
    lines.append('  "cases": [')
    for c, (case, after, clipped) in enumerate(cases):
        lines.append(f'    {{"name": "{case["name"]}", '
                     f'"optimizer": {json.dumps(case["optimizer"], allow_nan=False)},')
        if clipped:
            lines.append(f'     "clipped": {json.dumps(clipped)},')
        lines.append('     "after": [')
        for s in range(STEPS):
            sep = "," if s + 1 < STEPS else ""
            lines.append("       [" + ", ".join(flat(p) for p in after[s]) + "]" + sep)
        lines.append("     ]}" + ("," if c + 1 < len(cases) else ""))
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def check_file(path, set_name):
    """Replays the file through torch: every recorded parameter bit for bit."""
    with open(path) as f:
        doc = json.load(f)
    assert doc["set"] == set_name and doc["steps"] == STEPS
    params = [(p["name"], tuple(p["shape"]),
               torch.tensor(p["init"], dtype=torch.float32).reshape(p["shape"]))
              for p in doc["params"]]
    grads = [[torch.tensor(g, dtype=torch.float32).reshape(p[1]) for g, p in zip(step, params)]
             for step in doc["grads"]]
    for s in range(STEPS):
        assert np.float32(doc["grad_norm"][s]) == torch_norm(grads[s]).numpy()
        assert abs(doc["grad_norm_f64"][s] - f64_norm(grads[s])) == 0
    for case in doc["cases"]:
        after, clipped = run_case(case, params, grads)
        assert clipped == case.get("clipped", []), case["name"]
        for s in range(STEPS):
            for got, want, p in zip(after[s], case["after"][s], params):
                want = torch.tensor(want, dtype=torch.float32).reshape(p[1])
                assert torch.equal(got, want), (case["name"], s, p[0])
    return len(doc["cases"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden", "optim"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    total = 0
    readme_rows = []
    for set_name in SETS:
        params, grads = make_set(set_name)
        norms = sorted(float(torch_norm(grads[s])) for s in range(STEPS))
        ran = []
        for case in CASES:
            if case["set"] != set_name:
                continue
            case = json.loads(json.dumps(case))
            if case["optimizer"]["clip_grad_norm"] == SOME:
                # A round number between the second and fourth smallest step norms.
                mid = math.sqrt(norms[1] * norms[3])
                case["optimizer"]["clip_grad_norm"] = float(f"{mid:.2g}")
            after, clipped = run_case(case, params, grads)
            if case["name"].endswith("-some"):
                assert any(clipped) and not all(clipped), (case["name"], clipped)
            if case["name"].endswith("-always"):
                assert all(clipped), case["name"]
            if case["name"].endswith("-never"):
                assert not any(clipped), case["name"]
            if case["name"].endswith("-rounding"):
                assert all(clipped) and any(
                    clip_coef(torch_norm(grads[s]).numpy(), case) !=
                    clip_coef(np.float32(f64_norm(grads[s])), case) for s in range(STEPS)), \
                    case["name"]
            ran.append((case, after, clipped))
            readme_rows.append((case, set_name, clipped))
        path = os.path.join(args.out, f"{set_name}.json")
        text = render(set_name, params, grads, ran)
        with open(path, "w") as f:
            f.write(text)
        n = check_file(path, set_name)
        total += len(text)
        print(f"{path}: {n} cases, {len(text)} bytes")
    assert total <= MAX_TOTAL_BYTES, f"{total} bytes: keep the optimizer goldens small"
    write_readme(args.out, readme_rows)


def write_readme(out, rows):
    lines = [
        "# Golden optimizer cases",
        "",
        "Written by `/usr/bin/python3 tools/make_optim_golden.py` (torch 1.13; see its docstring);",
        "do not edit by hand. Each file is a parameter set (float32 tensors of mixed shapes, 5",
        "gradient sets) and the cases stepped on it: the parameters after each of 5 steps of",
        "torch's AdamW or SGD (momentum 0, no weight decay), with `clip_grad_norm_` before each",
        "step when `clip_grad_norm` > 0; each step's gradient norm as torch computes it (float32,",
        "`grad_norm`) and in float64 (`grad_norm_f64`). Checked by `tests/cpp/optim_test.cc`.",
        "",
        "| case | set | optimizer | clipped at steps |",
        "| --- | --- | --- | --- |",
    ]
    for case, set_name, clipped in rows:
        o = case["optimizer"]
        if o["type"] == "adamw":
            desc = (f"AdamW lr {o['lr']:g}, betas ({o['betas'][0]:g}, {o['betas'][1]:g}), "
                    f"eps {o['eps']:g}, weight_decay {o['weight_decay']:g}")
        else:
            desc = f"SGD lr {o['lr']:g}"
        if o["clip_grad_norm"] > 0:
            desc += f", clip {o['clip_grad_norm']:g}"
        at = ", ".join(str(s + 1) for s, c in enumerate(clipped) if c) if clipped else ""
        if clipped and not at:
            at = "none"
        lines.append(f"| `{case['name']}` | `{set_name}` | {desc} | {at} |")
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
