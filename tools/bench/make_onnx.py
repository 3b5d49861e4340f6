#!/usr/bin/python3
"""Builds the onnxruntime-web graphs of the benchmark (tools/bench/bench.mjs runs this).

Run with Debian's /usr/bin/python3 and its python3-onnx (tools/setup.sh installs it):

    /usr/bin/python3 tools/bench/make_onnx.py --spec build/bench/onnx/spec.json

spec.json (written by bench.mjs) lists one entry per graph pair:

    {"out": "build/bench/onnx", "models": [
      {"id": "e768-h12", "E": 768, "H": 12, "causal": false,
       "weights": "build/bench/onnx/e768-h12.weights.bin"}, ...]}

The weights file holds float32 little-endian values in PyTorch's state_dict order and layout:
in_proj_weight (3E, E), in_proj_bias (3E), out_proj.weight (E, E), out_proj.bias (E). These are
the very numbers headscope is given, so every engine computes the same function.

Per entry two models, both with inputs query (1, L, E), key (1, S, E), value (1, S, E) and output
(1, L, E), L and S symbolic (one model serves every sequence length of an (E, H) pair):

  <id>.mha.onnx     Q/K/V projections as MatMul + Add, com.microsoft.MultiHeadAttention (causal:
                    its `unidirectional` attribute), then the output projection as MatMul + Add:
                    what ORT's transformer optimizer produces for a fused attention layer.
  <id>.matmul.onnx  the same attention in standard ONNX ops: MatMul/Add projections, Reshape +
                    Transpose into heads, q scaled by 1/sqrt(head_dim), MatMul, (causal: + a
                    -inf upper triangle built in-graph with Trilu), Softmax, MatMul, Transpose +
                    Reshape back, output projection.

Weights are initializers, stored transposed as (in, out) for MatMul (as torch.onnx exports
nn.Linear). A model is rewritten only when its weights file or this script is newer than it.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


def read_weights(path, E):
    w = np.fromfile(path, dtype="<f4")
    want = 3 * E * E + 3 * E + E * E + E
    if w.size != want:
        sys.exit(f"make_onnx.py: {path}: expected {want} float32 values for E={E}, got {w.size}")
    in_w = w[: 3 * E * E].reshape(3 * E, E)
    o = 3 * E * E
    in_b = w[o : o + 3 * E]
    o += 3 * E
    out_w = w[o : o + E * E].reshape(E, E)
    o += E * E
    out_b = w[o : o + E]
    return {  # float32 throughout
        "wq_t": np.ascontiguousarray(in_w[:E].T),
        "wk_t": np.ascontiguousarray(in_w[E : 2 * E].T),
        "wv_t": np.ascontiguousarray(in_w[2 * E :].T),
        "bq": in_b[:E].copy(),
        "bk": in_b[E : 2 * E].copy(),
        "bv": in_b[2 * E :].copy(),
        "wo_t": np.ascontiguousarray(out_w.T),
        "bo": out_b.copy(),
    }


def io_infos(E):
    inputs = [
        helper.make_tensor_value_info("query", TensorProto.FLOAT, [1, "L", E]),
        helper.make_tensor_value_info("key", TensorProto.FLOAT, [1, "S", E]),
        helper.make_tensor_value_info("value", TensorProto.FLOAT, [1, "S", E]),
    ]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, "L", E])]
    return inputs, outputs


def initializers(w):
    return [numpy_helper.from_array(np.asarray(v), name=k) for k, v in w.items()]


def projection_nodes():
    nodes = []
    for src, name in (("query", "q"), ("key", "k"), ("value", "v")):
        nodes.append(helper.make_node("MatMul", [src, f"w{name}_t"], [f"{name}_mm"]))
        nodes.append(helper.make_node("Add", [f"{name}_mm", f"b{name}"], [f"{name}_proj"]))
    return nodes


def output_nodes(src):
    return [
        helper.make_node("MatMul", [src, "wo_t"], ["out_mm"]),
        helper.make_node("Add", ["out_mm", "bo"], ["output"]),
    ]


def finish(graph, domains):
    opsets = [helper.make_opsetid("", OPSET)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="headscope-bench")
    model.ir_version = IR_VERSION
    if not domains:
        onnx.checker.check_model(model)
    return model


def mha_model(w, E, H, causal):
    nodes = projection_nodes()
    attrs = {"num_heads": H}
    if causal:
        attrs["unidirectional"] = 1
    nodes.append(
        helper.make_node(
            "MultiHeadAttention", ["q_proj", "k_proj", "v_proj"], ["attn"], domain="com.microsoft", **attrs
        )
    )
    nodes += output_nodes("attn")
    inputs, outputs = io_infos(E)
    graph = helper.make_graph(nodes, "mha", inputs, outputs, initializer=initializers(w))
    return finish(graph, ["com.microsoft"])


def matmul_model(w, E, H, causal):
    hd = E // H
    consts = dict(w)
    consts["heads_shape"] = np.array([0, 0, H, hd], dtype=np.int64)  # 0: copy that input dim
    consts["merge_shape"] = np.array([0, 0, E], dtype=np.int64)
    consts["scale"] = np.array(1.0 / math.sqrt(hd), dtype=np.float32)
    nodes = projection_nodes()
    nodes += [
        helper.make_node("Mul", ["q_proj", "scale"], ["q_scaled"]),
        helper.make_node("Reshape", ["q_scaled", "heads_shape"], ["q_heads"]),
        helper.make_node("Transpose", ["q_heads"], ["q_t"], perm=[0, 2, 1, 3]),  # (1, H, L, hd)
        helper.make_node("Reshape", ["k_proj", "heads_shape"], ["k_heads"]),
        helper.make_node("Transpose", ["k_heads"], ["k_t"], perm=[0, 2, 3, 1]),  # (1, H, hd, S)
        helper.make_node("Reshape", ["v_proj", "heads_shape"], ["v_heads"]),
        helper.make_node("Transpose", ["v_heads"], ["v_t"], perm=[0, 2, 1, 3]),  # (1, H, S, hd)
        helper.make_node("MatMul", ["q_t", "k_t"], ["scores"]),  # (1, H, L, S)
    ]
    scores = "scores"
    if causal:
        consts["last_two"] = np.array([-2], dtype=np.int64)
        consts["diag_offset"] = np.array(1, dtype=np.int64)
        nodes += [
            helper.make_node("Shape", ["scores"], ["scores_shape"]),
            helper.make_node("Slice", ["scores_shape", "last_two", "_end"], ["ls_shape"]),
            helper.make_node(
                "ConstantOfShape",
                ["ls_shape"],
                ["neg_inf"],
                value=numpy_helper.from_array(np.array([-np.inf], dtype=np.float32)),
            ),
            # keeps -inf where key j > query i (j - i >= 1), zero elsewhere: torch's causal mask
            helper.make_node("Trilu", ["neg_inf", "diag_offset"], ["causal_mask"], upper=1),
            helper.make_node("Add", ["scores", "causal_mask"], ["scores_masked"]),
        ]
        consts["_end"] = np.array([np.iinfo(np.int64).max], dtype=np.int64)
        scores = "scores_masked"
    nodes += [
        helper.make_node("Softmax", [scores], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "v_t"], ["ctx"]),  # (1, H, L, hd)
        helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_t", "merge_shape"], ["ctx_merged"]),
    ]
    nodes += output_nodes("ctx_merged")
    inputs, outputs = io_infos(E)
    graph = helper.make_graph(nodes, "mha_matmul", inputs, outputs, initializer=initializers(consts))
    return finish(graph, [])


def newer(target, source):
    return os.path.exists(target) and os.path.getmtime(target) >= os.path.getmtime(source)


def read_spec(doc, name):
    """The --spec file bench.mjs wrote (also make_transformer_onnx.py's): its models and output
    folder, which is created. doc: the script's docstring, whose first paragraph is its --help."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--spec", required=True, help=f"{name} written by tools/bench/bench.mjs")
    args = parser.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    os.makedirs(spec["out"], exist_ok=True)
    return spec["models"], spec["out"]


def main():
    models, out = read_spec(__doc__, "spec.json")
    written = 0
    for m in models:
        E, H, causal = int(m["E"]), int(m["H"]), bool(m["causal"])
        targets = {
            "mha": os.path.join(out, f"{m['id']}.mha.onnx"),
            "matmul": os.path.join(out, f"{m['id']}.matmul.onnx"),
        }
        if all(newer(t, m["weights"]) and newer(t, __file__) for t in targets.values()):
            continue
        w = read_weights(m["weights"], E)
        for kind, path in targets.items():
            model = (mha_model if kind == "mha" else matmul_model)(w, E, H, causal)
            tmp = path + ".tmp"
            onnx.save(model, tmp)
            os.replace(tmp, path)
            written += 1
    print(f"make_onnx.py: {written} model(s) written to {out} (onnx {onnx.__version__})")


if __name__ == "__main__":
    main()
