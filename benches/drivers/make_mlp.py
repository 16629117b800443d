"""Writes the compute-bound model of the batching benchmark: 8 dense layers
of 1024x1024 FP32 (MatMul + Add + Relu; the last without Relu), input
INPUT0 [batch, 1024], output OUTPUT0 [batch, 1024]. Weights come from a
seeded generator (scaled so activations stay finite), so the file is the
same on every run. 32 MiB; generated, not committed.

    .venv/bin/python benches/drivers/make_mlp.py OUT.onnx
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTH, LAYERS = 1024, 8


def make(path):
    rng = np.random.default_rng(1024)
    inits, nodes = [], []
    x = "INPUT0"
    for i in range(LAYERS):
        w = (rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) / np.sqrt(WIDTH)).astype(np.float32)
        b = np.zeros(WIDTH, dtype=np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]))
        last = i == LAYERS - 1
        nodes.append(helper.make_node("Add", [f"m{i}", f"b{i}"], ["OUTPUT0" if last else f"a{i}"]))
        if not last:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [f"r{i}"]))
            x = f"r{i}"
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", WIDTH])],
        inits)
    model = helper.make_model(graph, producer_name="trtis-bench", opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


if __name__ == "__main__":
    make(sys.argv[1])
