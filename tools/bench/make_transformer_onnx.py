#!/usr/bin/python3
"""Exports the benchmark's transformers to ONNX with torch.onnx (tools/bench/bench.mjs runs this).

Run with Debian's /usr/bin/python3, its python3-torch (1.13) and python3-onnx (tools/setup.sh
installs both):

    /usr/bin/python3 tools/bench/make_transformer_onnx.py --spec build/bench/onnx/transformers.json

transformers.json (written by bench.mjs) lists one entry per model:

    {"out": "build/bench/onnx", "models": [
      {"id": "tt-small", "batch": 1, "tokens": 32,
       "config": {"vocab_size": 28, "max_len": 32, "d_model": 32, "n_layers": 2, "n_heads": 2,
                  "d_mlp": 0, "norm": "pre", "positions": "learned", "causal": true,
                  "act": "gelu", "bias": true, "ln_eps": 1e-05},
       "state_dict": [["tok_embed.weight", [28, 32]], ...],
       "weights": "build/bench/onnx/tt-small.weights.bin"}, ...]}

The weights file holds the state_dict's tensors back to back in that order, float32 little-endian,
row-major: the numbers headscope's `createTransformer({ ..., seed }).stateDict()` gives, so both
engines compute the same function.

Each entry becomes two models, the reference module tools/tiny_transformer.py (the
project's contract) in float32 with that state_dict, in eval
mode, wrapped so that its one output is the logits (the module returns (logits, hooks)), traced by
torch.onnx.export at opset 17 (LayerNormalization is an ONNX op from 17 on), torch's constant
folding on; input `tokens` int64 (batch, tokens), output `logits` float32 (batch, tokens,
vocab_size):

  <id>.onnx          fixed shapes: the exporter and onnxruntime fold every shape computation, the
                     positions' Range and the causal mask into constants;
  <id>.dynamic.onnx  batch and tokens as dynamic axes (B, T), as a model is usually exported.

Which one onnxruntime-web runs faster depends on the size (measured: fixed clearly on the
2-layer d32 model, about even on the 4-layer d128 one), so the benchmark times both and compares
headscope with the faster.

A model is exported again only when its inputs changed: <file>.sha256 holds the SHA-256 of the
entry (config, shapes, state_dict layout), the variant, the weights, this script,
tools/tiny_transformer.py and the torch version it was exported from.
"""
import hashlib
import importlib.metadata
import json
import os
import sys
import warnings

sys.dont_write_bytecode = True  # no __pycache__ in tools/

from make_onnx import read_spec  # noqa: E402  (this folder, first on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(os.path.dirname(HERE), "tiny_transformer.py")
OPSET = 17
# variant -> (file suffix, dynamic axes)
VARIANTS = {
    "fixed": (".onnx", None),
    "dynamic": (".dynamic.onnx", {"tokens": {0: "B", 1: "T"}, "logits": {0: "B", 1: "T"}}),
}


def read_weights(path, entries):
    import numpy as np

    flat = np.fromfile(path, dtype="<f4")
    want = sum(int(np.prod(shape)) for _, shape in entries)
    if flat.size != want:
        sys.exit(f"make_transformer_onnx.py: {path}: expected {want} float32 values, got {flat.size}")
    out, o = {}, 0
    for name, shape in entries:
        n = int(np.prod(shape))
        out[name] = flat[o : o + n].reshape(shape)
        o += n
    return out


def torch_version():
    # Without importing torch (a second): an up-to-date run stays fast.
    return importlib.metadata.version("torch")


def stamp(m, variant):
    h = hashlib.sha256()
    layout = {k: m[k] for k in ("batch", "tokens", "config", "state_dict")}
    layout["variant"] = variant
    h.update(json.dumps(layout, sort_keys=True).encode())
    for path in (m["weights"], __file__, REFERENCE):
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    h.update(torch_version().encode())
    return h.hexdigest()


def reference_model(m):
    """The reference module with the entry's weights, its logits as its one output."""
    import torch

    sys.path.insert(0, os.path.dirname(REFERENCE))
    import tiny_transformer as tt

    model = tt.TinyTransformer(**m["config"]).float().eval()
    want = {k: list(v.shape) for k, v in model.state_dict().items()}
    got = {name: list(shape) for name, shape in m["state_dict"]}
    if want != got:
        diff = [f"{k}: {got.get(k, 'missing')} (module: {want.get(k, 'none')})"
                for k in {**want, **got} if got.get(k) != want.get(k)]
        sys.exit(f"make_transformer_onnx.py: {m['id']}: the state_dict is not the module's: {'; '.join(diff)}")
    weights = read_weights(m["weights"], m["state_dict"])
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()}, strict=True)

    class Logits(torch.nn.Module):
        """The reference module with its logits as the only output (no hooks)."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, tokens):
            return self.inner(tokens)[0]

    return Logits(model)


def export(model, m, path, dynamic_axes):
    import onnx
    import torch

    tokens = torch.zeros(m["batch"], m["tokens"], dtype=torch.int64)
    tmp = path + ".tmp"
    with torch.no_grad(), warnings.catch_warnings():
        # The module's `q / math.sqrt(dh)`: a Python float, a constant of the graph (dh is fixed).
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.onnx.export(model, (tokens,), tmp, input_names=["tokens"], output_names=["logits"],
                          opset_version=OPSET, do_constant_folding=True, dynamic_axes=dynamic_axes)

    onnx.checker.check_model(onnx.load(tmp))
    os.replace(tmp, path)


def main():
    models, out = read_spec(__doc__, "transformers.json")
    written = 0
    for m in models:
        model = None
        for variant, (suffix, dynamic_axes) in VARIANTS.items():
            path = os.path.join(out, m["id"] + suffix)
            digest = stamp(m, variant)
            stamp_file = path + ".sha256"
            if os.path.exists(path) and os.path.exists(stamp_file):
                with open(stamp_file) as f:
                    if f.read().strip() == digest:
                        continue
            model = model or reference_model(m)
            export(model, m, path, dynamic_axes)
            with open(stamp_file, "w") as f:
                f.write(digest + "\n")
            written += 1
    print(f"make_transformer_onnx.py: {written} model(s) exported to {out} (torch {torch_version()}, opset {OPSET})")


if __name__ == "__main__":
    main()
