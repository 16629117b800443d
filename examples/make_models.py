"""Generates the small ONNX models of the example repository.

Run with the project's Python environment (scripts/setup.sh makes it):
    .venv/bin/python examples/make_models.py

simple/1/model.onnx: Triton's classic `simple` example as ONNX. INT32 inputs
INPUT0 and INPUT1 of shape [-1, 16]; OUTPUT0 = INPUT0 + INPUT1 and
OUTPUT1 = INPUT0 - INPUT1. Written by this script with the `onnx` helper API,
so it is ours; the output is deterministic.

preprocess_inception/1/model.onnx: image_client's INCEPTION scaling as a
model (UINT8 HWC [-1, 224, 224, 3] in, FP32 NCHW x/127.5 - 1 out), the first
step of the efficientnet_ensemble pipeline.
"""
import os

import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))


def make_simple(path):
    shape = ["batch", 16]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("INPUT0", "INPUT1")]
    outputs = [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("OUTPUT0", "OUTPUT1")]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
    ]
    graph = helper.make_graph(nodes, "simple", inputs, outputs)
    model = helper.make_model(graph, producer_name="trtis-examples", opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def make_preprocess(path):
    """image_client's INCEPTION preprocessing as a model: UINT8 HWC RGB
    images [batch, 224, 224, 3] in, FP32 NCHW x/127.5 - 1 out."""
    inputs = [helper.make_tensor_value_info("IMAGE", TensorProto.UINT8, ["batch", 224, 224, 3])]
    outputs = [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", 3, 224, 224])]
    inits = [
        helper.make_tensor("scale", TensorProto.FLOAT, [], [1.0 / 127.5]),
        helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
    ]
    nodes = [
        helper.make_node("Cast", ["IMAGE"], ["f"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Mul", ["f", "scale"], ["scaled"], name="scale"),
        helper.make_node("Sub", ["scaled", "one"], ["shifted"], name="shift"),
        helper.make_node("Transpose", ["shifted"], ["INPUT"], perm=[0, 3, 1, 2], name="nchw"),
    ]
    graph = helper.make_graph(nodes, "preprocess_inception", inputs, outputs, inits)
    model = helper.make_model(graph, producer_name="trtis-examples", opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


if __name__ == "__main__":
    make_simple(os.path.join(HERE, "model_repository", "simple", "1", "model.onnx"))
    print("wrote simple/1/model.onnx")
    make_preprocess(os.path.join(HERE, "model_repository", "preprocess_inception", "1", "model.onnx"))
    print("wrote preprocess_inception/1/model.onnx")
