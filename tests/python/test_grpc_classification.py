"""The classification extension over gRPC: InferRequestedOutput(name,
class_count=N) sets the output parameter `classification` (int64_param);
the output comes back as BYTES "<value>:<index>:<label>" strings in
`raw_output_contents`, top N, descending (server src/classification.cc,
formatted with std::to_string, i.e. "%f")."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from trtis_harness import CLASS_LABELS

SCORES = np.array(
    [
        [0.25, 2.5, -1.0, 1.75],
        [3.0, 0.5, 0.75, -2.0],
    ],
    dtype=np.float32,
)


def expected_rows(n: int) -> list[list[str]]:
    rows = []
    for row in SCORES:
        order = sorted(range(len(row)), key=lambda i: -float(row[i]))[: min(n, len(row))]
        rows.append(["%f:%d:%s" % (float(row[i]), i, CLASS_LABELS[i]) for i in order])
    return rows


def classify(grpc_client, n: int):
    inp = grpcclient.InferInput("INPUT0", list(SCORES.shape), "FP32")
    inp.set_data_from_numpy(SCORES)
    out = grpcclient.InferRequestedOutput("OUTPUT0", class_count=n)
    return grpc_client.infer("identity_class", [inp], outputs=[out])


def as_strings(result) -> list[list[str]]:
    arr = result.as_numpy("OUTPUT0")
    return [[x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in row] for row in arr]


@pytest.mark.parametrize("n", [1, 2, 4])
def test_top_n(grpc_client, n):
    result = classify(grpc_client, n)
    response = result.get_response()
    assert len(response.outputs) == 1
    out = response.outputs[0]
    assert out.name == "OUTPUT0"
    assert out.datatype == "BYTES"
    assert list(out.shape) == [2, n]
    assert len(response.raw_output_contents) == 1
    assert as_strings(result) == expected_rows(n)


def test_class_count_larger_than_classes(grpc_client):
    """Triton caps N at the number of elements."""
    result = classify(grpc_client, 10)
    assert list(result.get_response().outputs[0].shape) == [2, len(CLASS_LABELS)]
    assert as_strings(result) == expected_rows(len(CLASS_LABELS))


def test_without_classification_returns_raw_scores(grpc_client):
    result = classify(grpc_client, 0)
    out = result.get_response().outputs[0]
    assert out.datatype == "FP32"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), SCORES)


def test_same_strings_as_http(grpc_client, client):
    import tritonclient.http as httpclient

    inp = httpclient.InferInput("INPUT0", list(SCORES.shape), "FP32")
    inp.set_data_from_numpy(SCORES)
    h = client.infer(
        "identity_class", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=3)]
    )
    g = classify(grpc_client, 3)
    assert as_strings(g) == [
        [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in row]
        for row in h.as_numpy("OUTPUT0")
    ]
