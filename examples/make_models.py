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

simple_sequence, simple_dyna_sequence: Triton's sequence examples of the
same names as ONNX models (the sequence batcher's control inputs in, so the
official sequence client examples get the answers they check for);
simple_accumulator: a running sum kept by the server as implicit state.

simple_ragged: ragged batching: requests of different lengths batched
without padding, with a batch input giving the model each request's offsets
and an output scattered back by the requests' input shapes.
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



def _save(nodes, name, inputs, outputs, path, inits=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    model = helper.make_model(graph, producer_name="trtis-examples", opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def _int32(name):
    return helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 1])


def make_simple_sequence(path):
    """Triton's simple_sequence example as ONNX (the sequence batcher fills
    START and READY): OUTPUT = READY ? INPUT + START : 0."""
    nodes = [
        helper.make_node("Add", ["INPUT", "START"], ["sum"], name="add_start"),
        helper.make_node("Mul", ["sum", "READY"], ["OUTPUT"], name="mask_ready"),
    ]
    _save(nodes, "simple_sequence", [_int32("INPUT"), _int32("START"), _int32("READY")], [_int32("OUTPUT")], path)


def make_simple_dyna_sequence(path):
    """Triton's simple_dyna_sequence example as ONNX (oldest strategy, the
    batcher fills START, END, READY and CORRID):
    OUTPUT = READY ? INPUT + START + (END ? CORRID : 0) : 0."""
    corrid = helper.make_tensor_value_info("CORRID", TensorProto.UINT64, ["batch", 1])
    nodes = [
        helper.make_node("Cast", ["CORRID"], ["corrid"], to=TensorProto.INT32, name="corrid_int32"),
        helper.make_node("Mul", ["corrid", "END"], ["at_end"], name="corrid_at_end"),
        helper.make_node("Add", ["INPUT", "START"], ["sum"], name="add_start"),
        helper.make_node("Add", ["sum", "at_end"], ["total"], name="add_corrid"),
        helper.make_node("Mul", ["total", "READY"], ["OUTPUT"], name="mask_ready"),
    ]
    inputs = [_int32("INPUT"), _int32("START"), _int32("END"), _int32("READY"), corrid]
    _save(nodes, "simple_dyna_sequence", inputs, [_int32("OUTPUT")], path)


def make_simple_accumulator(path):
    """A stateful accumulator with implicit state (the server keeps the
    running sum between requests): OUTPUT_STATE = INPUT on START, else
    INPUT + INPUT_STATE; OUTPUT = OUTPUT_STATE."""
    inits = [helper.make_tensor("one", TensorProto.INT32, [], [1])]
    nodes = [
        helper.make_node("Sub", ["one", "START"], ["keep"], name="not_start"),
        helper.make_node("Mul", ["INPUT_STATE", "keep"], ["carried"], name="carry_state"),
        helper.make_node("Add", ["INPUT", "carried"], ["OUTPUT_STATE"], name="accumulate"),
        helper.make_node("Identity", ["OUTPUT_STATE"], ["OUTPUT"], name="output"),
    ]
    inputs = [_int32("INPUT"), _int32("START"), _int32("INPUT_STATE")]
    _save(nodes, "simple_accumulator", inputs, [_int32("OUTPUT"), _int32("OUTPUT_STATE")], path, inits)


def make_simple_ragged(path):
    """Ragged batching: INPUT is every request's FP32 values back to back
    ([elements], the server flattens the ragged input), OFFSETS the batch
    input BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO ([requests + 1]). SUM is
    each request's sum ([requests, 1]); DOUBLED is INPUT * 2, scattered
    back to the requests by their INPUT shapes (BATCH_SCATTER_WITH_INPUT_SHAPE)."""
    inits = [
        helper.make_tensor("axis0", TensorProto.INT64, [], [0]),
        helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]),
        helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
        helper.make_tensor("s0", TensorProto.INT64, [1], [0]),
        helper.make_tensor("s1", TensorProto.INT64, [1], [1]),
        helper.make_tensor("e_last", TensorProto.INT64, [1], [-1]),
        helper.make_tensor("e_end", TensorProto.INT64, [1], [2**62]),
        helper.make_tensor("axes1", TensorProto.INT64, [1], [1]),
    ]
    nodes = [
        helper.make_node("CumSum", ["INPUT", "axis0"], ["running"], name="running_sum"),
        helper.make_node("Concat", ["zero", "running"], ["running0"], axis=0, name="from_zero"),
        helper.make_node("Slice", ["OFFSETS", "s1", "e_end", "s0"], ["ends"], name="ends"),
        helper.make_node("Slice", ["OFFSETS", "s0", "e_last", "s0"], ["starts"], name="starts"),
        helper.make_node("Gather", ["running0", "ends"], ["at_end"], axis=0, name="at_end"),
        helper.make_node("Gather", ["running0", "starts"], ["at_start"], axis=0, name="at_start"),
        helper.make_node("Sub", ["at_end", "at_start"], ["sums"], name="segment_sums"),
        helper.make_node("Unsqueeze", ["sums", "axes1"], ["SUM"], name="sum"),
        helper.make_node("Mul", ["INPUT", "two"], ["DOUBLED"], name="doubled"),
    ]
    inputs = [
        helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["elements"]),
        helper.make_tensor_value_info("OFFSETS", TensorProto.INT32, ["offsets"]),
    ]
    outputs = [
        helper.make_tensor_value_info("SUM", TensorProto.FLOAT, ["requests", 1]),
        helper.make_tensor_value_info("DOUBLED", TensorProto.FLOAT, ["elements"]),
    ]
    _save(nodes, "simple_ragged", inputs, outputs, path, inits)


if __name__ == "__main__":
    make_simple(os.path.join(HERE, "model_repository", "simple", "1", "model.onnx"))
    print("wrote simple/1/model.onnx")
    make_preprocess(os.path.join(HERE, "model_repository", "preprocess_inception", "1", "model.onnx"))
    print("wrote preprocess_inception/1/model.onnx")
    for name, make in (("simple_sequence", make_simple_sequence),
                       ("simple_dyna_sequence", make_simple_dyna_sequence),
                       ("simple_accumulator", make_simple_accumulator),
                       ("simple_ragged", make_simple_ragged)):
        os.makedirs(os.path.join(HERE, "model_repository", name, "1"), exist_ok=True)
        make(os.path.join(HERE, "model_repository", name, "1", "model.onnx"))
        print(f"wrote {name}/1/model.onnx")
