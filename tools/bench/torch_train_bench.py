#!/usr/bin/python3
"""Times training steps of the benchmark's 'train' shapes in native PyTorch, on the CPU, one thread.

tools/bench/bench.mjs runs this (Debian's /usr/bin/python3 with python3-torch 1.13; tools/setup.sh
installs it) and reports it as the row 'torch-cpu-train' (a reference, not a target):

    /usr/bin/python3 tools/bench/torch_train_bench.py --spec build/bench/train/train.json

train.json (written by bench.mjs) lists the shapes and how to time them:

    {"threads": 1,
     "optimizer": {"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-08, "weightDecay": 0.01, "clipGradNorm": 0},
     "timing": {"minRuns": 20, "warmupMs": 300, "minWarmupCalls": 2, "targetRunMs": 20, ...},
     "models": [{"id": "train-small", "batch": 16, "tokens": 32, "pool": 4,
                 "config": {"vocab_size": 28, ...},            # tools/tiny_transformer.py's names
                 "state_dict": [["tok_embed.weight", [28, 32]], ...],
                 "weights": "build/bench/train/train-small.weights.bin",
                 "batches": "build/bench/train/train-small.batches.bin"}, ...]}

The weights file: headscope's seeded createTransformer(config).stateDict() back to back in that
order, float32 LE (what the tfjs row starts from too). The batches file: `pool` batches, each its
tokens then its targets, (batch, tokens) int32 LE; targets are the tokens shifted left, the last
-100 (ignored by the loss). Step s trains on batch s mod pool, as the JS rows do.

A step is what headscope's trainStep is: the reference module's forward (float32, train mode; the
token ids converted to int64 inside the step, as the JS rows convert theirs), tools/tiny_transformer.py's
loss_fn (mean cross-entropy, ignore_index -100), zero_grad, backward, clip_grad_norm_ when
clipGradNorm > 0, torch.optim.AdamW (foreach=False) step, the loss as a Python float (.item()).
Timing is engines.js measure()'s: two steps first (their losses are the checks' reference), a full
collection, a warm-up (at least minWarmupCalls steps and warmupMs), steps batched to about
targetRunMs when one is fast, then minRuns timed runs; the median time per step.

Prints one JSON line: {"torch": version, "threads": n, "cpuCapability": ..., "blas": the BLAS
library file in use, "rows": [{"shape",
"ms", "min", "max", "runs", "batch", "stepsPerSecond", "losses": {"first", "second", "steps",
"firstCycle", "lastCycle", "decreased", "finite"}, "firstLosses": [step 1, step 2]}]}. Exits 3 with
{"error": ...} when torch cannot be imported.
"""
import argparse
import gc
import json
import math
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in tools/

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE_DIR = os.path.dirname(HERE)  # tools/, where tiny_transformer.py is


def now_ms():
    return time.perf_counter() * 1000.0


def summary(samples):
    """engines.js summary(): the median (interpolated), smallest and largest."""
    s = sorted(samples)

    def at(f):
        i = f * (len(s) - 1)
        lo, hi = math.floor(i), math.ceil(i)
        return s[lo] + (s[hi] - s[lo]) * (i - lo)

    return {"ms": at(0.5), "min": s[0], "max": s[-1], "q1": at(0.25), "q3": at(0.75)}


def warm_up(step, timing):
    calls, first, fastest = 0, 0.0, math.inf
    w0 = now_ms()
    while True:
        t0 = now_ms()
        step()
        t = now_ms() - t0
        if calls == 0:
            first = t
        else:
            fastest = min(fastest, t)
        calls += 1
        if calls >= timing["minWarmupCalls"] and now_ms() - w0 >= timing["warmupMs"]:
            break
        if t >= timing["slowCallMs"]:
            break
    return fastest if calls > 1 else first


def measure(step, timing):
    """engines.js measure(), for a synchronous step (no reference-row rule: this is no reference row)."""
    last = warm_up(step, timing)

    def time_batch(n):
        t0 = now_ms()
        for _ in range(n):
            step()
        return now_ms() - t0

    batch = 1
    if last * 2 < timing["targetRunMs"]:
        while True:
            t = time_batch(batch)
            if t >= timing["targetRunMs"] / 4 or batch >= 1 << 22:
                break
            batch *= 2
        t = min(t, time_batch(batch))
        batch = max(1, round(batch * timing["targetRunMs"] / max(t, 1e-3)))
    runs = timing["minRuns"]
    samples = [time_batch(batch) / batch for _ in range(runs)]
    return {**summary(samples), "runs": runs, "batch": batch}


def trajectory(losses, pool):
    """train.js lossTrajectory(): the first and the last full cycle of the pool."""
    steps = len(losses)
    finite = all(math.isfinite(x) for x in losses)
    if steps < 2 * pool:
        return {"steps": steps, "finite": finite, "decreased": False,
                "detail": f"only {steps} steps, fewer than two cycles of {pool} batches"}
    last_start = (steps // pool) * pool - pool
    first_cycle = sum(losses[:pool]) / pool
    last_cycle = sum(losses[last_start:last_start + pool]) / pool
    return {"steps": steps, "finite": finite, "firstCycle": first_cycle, "lastCycle": last_cycle,
            "decreased": finite and last_cycle < first_cycle}


def read_weights(np, path, entries):
    flat = np.fromfile(path, dtype="<f4")
    want = sum(int(np.prod(shape)) for _, shape in entries)
    if flat.size != want:
        sys.exit(f"torch_train_bench.py: {path}: expected {want} float32 values, got {flat.size}")
    out, o = {}, 0
    for name, shape in entries:
        n = int(np.prod(shape))
        out[name] = flat[o:o + n].reshape(shape)
        o += n
    return out


def bench_model(torch, np, tt, m, optimizer, timing):
    B, T, pool = int(m["batch"]), int(m["tokens"]), int(m["pool"])
    model = tt.TinyTransformer(**m["config"]).float().train()
    want = {k: list(v.shape) for k, v in model.state_dict().items()}
    got = {name: list(shape) for name, shape in m["state_dict"]}
    if want != got:
        sys.exit(f"torch_train_bench.py: {m['id']}: the state_dict is not the module's ({got} vs {want})")
    weights = read_weights(np, m["weights"], m["state_dict"])
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()}, strict=True)
    raw = np.fromfile(m["batches"], dtype="<i4")
    if raw.size != pool * 2 * B * T:
        sys.exit(f"torch_train_bench.py: {m['batches']}: expected {pool * 2 * B * T} int32 values, got {raw.size}")
    raw = raw.reshape(pool, 2, B, T)
    batches = [(raw[i, 0].copy(), raw[i, 1].copy()) for i in range(pool)]
    opt = torch.optim.AdamW(model.parameters(), lr=optimizer["lr"], betas=tuple(optimizer["betas"]),
                            eps=optimizer["eps"], weight_decay=optimizer["weightDecay"], foreach=False)
    clip = float(optimizer.get("clipGradNorm") or 0)
    losses = []

    def step():
        tokens, targets = batches[len(losses) % pool]
        logits, _ = model(torch.from_numpy(tokens).long())
        loss = tt.loss_fn(logits, torch.from_numpy(targets).long())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())

    step()
    step()
    first = losses[:2]
    gc.collect()
    row = measure(step, timing)
    return {"shape": m["id"], **row, "stepsPerSecond": 1000.0 / row["ms"],
            "losses": {"first": first[0], "second": first[1], **trajectory(losses, pool)},
            "firstLosses": first}


def cpu_capability(torch):
    for line in torch.__config__.show().splitlines():
        if "CPU capability" in line:
            return line.split(":", 1)[1].strip()
    return None


def blas_library():
    """The BLAS torch's matmuls go through: the file mapped into this process (Debian's torch is
    built with BLAS_INFO=generic, i.e. whatever libblas.so.3 the alternatives system points at:
    netlib's reference BLAS unless OpenBLAS or BLIS is installed, which makes a large difference)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/" in line}
    except OSError:
        return None
    for p in sorted(paths):
        name = os.path.basename(p)
        if any(k in name for k in ("libblas", "openblas", "libblis", "mkl_rt", "libmkl")):
            return os.path.realpath(p)
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help="train.json written by tools/bench/bench.mjs")
    args = parser.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(json.dumps({"error": f"torch is not importable by {sys.executable}: {e}"}))
        sys.exit(3)
    threads = int(spec.get("threads", 1))
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    sys.path.insert(0, REFERENCE_DIR)
    import tiny_transformer as tt

    rows = [bench_model(torch, np, tt, m, spec["optimizer"], spec["timing"]) for m in spec["models"]]
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "cpuCapability": cpu_capability(torch), "blas": blas_library(), "rows": rows}))


if __name__ == "__main__":
    main()
