"""The classification extension: an output requested with `class_count=N`
comes back as BYTES "<value>:<index>:<label>" strings, top N, descending.

Triton formats the value with C++ std::to_string (printf "%f", six decimals;
server src/classification.cc), so exactly representable values give exact
strings."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient

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


def classify(client, n: int, binary: bool):
    inp = httpclient.InferInput("INPUT0", list(SCORES.shape), "FP32")
    inp.set_data_from_numpy(SCORES, binary_data=True)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=n)
    return client.infer("identity_class", [inp], outputs=[out])


def as_strings(result) -> list[list[str]]:
    arr = result.as_numpy("OUTPUT0")
    return [
        [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in row] for row in arr
    ]


def test_expected_strings_are_what_triton_prints():
    # Guards the test's own expectation against a typo.
    assert expected_rows(2) == [
        ["2.500000:1:dog", "1.750000:3:fish"],
        ["3.000000:0:cat", "0.750000:2:bird"],
    ]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_top_n(client, binary, n):
    result = classify(client, n, binary)
    out = result.get_output("OUTPUT0")
    assert out["datatype"] == "BYTES"
    assert out["shape"] == [2, n]
    assert as_strings(result) == expected_rows(n)


def test_class_count_larger_than_classes(client):
    """Triton caps N at the number of elements."""
    result = classify(client, 10, binary=True)
    assert result.get_output("OUTPUT0")["shape"] == [2, len(CLASS_LABELS)]
    assert as_strings(result) == expected_rows(len(CLASS_LABELS))


def test_without_classification_returns_raw_scores(client):
    result = classify(client, 0, binary=True)
    out = result.get_output("OUTPUT0")
    assert out["datatype"] == "FP32"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), SCORES)
