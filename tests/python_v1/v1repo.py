"""The model repositories of the v1 API suite and the constants tests check
against them (labels, the server id). Imported by conftest.py and the test
modules; needs tests/python (trtis_harness) on sys.path, which conftest.py
arranges."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from trtis_harness import (
    CLASS_LABELS,
    EXAMPLES,
    IDENTITY_TYPES,
    _write_identity,
    identity_model_name,
)

__all__ = [
    "CLASS_LABELS",
    "EXAMPLE_VALUES",
    "INT_LABELS",
    "SCORES",
    "SERVER_ID",
    "build_v1_repository",
    "classes_of",
    "copy_example",
    "distinct_simple_inputs",
    "expected_classes",
    "fixed_type_data",
    "identity_model_name",
    "simple_inputs",
    "_write_identity",
]

SERVER_ID = "trtis-v1-suite"

# Labels of `identity_class_i32` (INT32 [6]): line i is label i.
INT_LABELS = ["zero", "one", "two", "three", "four", "five"]

TWO_VERSIONS = """name: "two_versions"
backend: "identity"
max_batch_size: 8
version_policy: { all { } }
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""


def copy_example(repo: Path, name: str) -> None:
    shutil.copytree(EXAMPLES / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))


def build_v1_repository(repo: Path) -> Path:
    """The main server's models (see the module docstring)."""
    repo.mkdir(parents=True, exist_ok=True)
    for name in ("simple", "simple_identity", "efficientnet_lite0", "simple_sequence", "simple_accumulator"):
        copy_example(repo, name)
    for datatype, config_type in IDENTITY_TYPES:
        _write_identity(repo, identity_model_name(datatype), config_type)
    model = _write_identity(repo, "identity_class", "TYPE_FP32", dims="4", label="labels.txt")
    (model / "labels.txt").write_text("\n".join(CLASS_LABELS) + "\n")
    model = _write_identity(repo, "identity_class_i32", "TYPE_INT32", dims="6", label="labels.txt")
    (model / "labels.txt").write_text("\n".join(INT_LABELS) + "\n")
    # Fixed dims: identity models for the statistics tests (one per protocol).
    _write_identity(repo, "stats_http", "TYPE_FP32", dims="4")
    _write_identity(repo, "stats_grpc", "TYPE_FP32", dims="4")
    two = repo / "two_versions"
    for v in ("1", "2"):
        (two / v).mkdir(parents=True)
        (two / v / ".keep").write_text("")
    (two / "config.pbtxt").write_text(TWO_VERSIONS)
    return repo




# --------------------------------------------------------------------------
# Data and expectations shared by the HTTP and gRPC tests
# --------------------------------------------------------------------------

# `identity_class` scores (FP32 [4], labels CLASS_LABELS), two batch
# entries, no ties, all exactly representable.
SCORES = np.array(
    [
        [0.25, 2.5, -1.0, 1.75],
        [3.0, 0.5, 0.75, -2.0],
    ],
    dtype=np.float32,
)

# The values of Triton's example sequence clients.
EXAMPLE_VALUES = [11, 7, 5, 3, 2, 0, 1]


def simple_inputs(rng, batch: int):
    """Two INT32 [batch, 16] inputs for `simple`."""
    a = rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    return a, b


def distinct_simple_inputs(batch: int = 1):
    """Inputs whose sums and differences have no ties within a batch entry
    (so a top-k has one right order)."""
    perm = np.array([5, 12, 0, 9, 3, 15, 7, 1, 14, 10, 2, 8, 13, 4, 11, 6], dtype=np.int32)
    a = np.stack([100 * perm + k for k in range(batch)]).astype(np.int32)
    b = np.stack([np.arange(16, dtype=np.int32) * (k + 1) for k in range(batch)]).astype(np.int32)
    return a, b


def expected_classes(row, count: int, labels=None) -> list[tuple]:
    """[(idx, value, label)] of the top `count` elements of a batch entry,
    descending, as v1 classification reports them."""
    flat = np.asarray(row).reshape(-1)
    order = sorted(range(flat.size), key=lambda i: -float(flat[i]))[: min(count, flat.size)]
    return [
        (i, float(np.float32(flat[i])), labels[i] if labels else "")
        for i in order
    ]


def classes_of(output) -> list[list[tuple]]:
    """An InferResponseHeader.Output's batch_classes as [[(idx, value, label)]]."""
    return [[(c.idx, c.value, c.label) for c in entry.cls] for entry in output.batch_classes]


def fixed_type_data(rng, datatype: str, shape) -> np.ndarray:
    """Random data of a fixed-size datatype, with the edge values of the
    type (extremes; for floats -0.0, inf, nan, subnormals) in it."""
    from v1client import NP_DTYPES

    dtype = np.dtype(NP_DTYPES[datatype])
    n = int(np.prod(shape))
    if datatype == "BOOL":
        arr = rng.integers(0, 2, size=n).astype(np.bool_)
        arr[: min(n, 2)] = [True, False][: min(n, 2)]
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        arr = rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
        edge = [info.min, info.max, 0][:n]
        arr[: len(edge)] = edge
    else:
        info = np.finfo(dtype)
        arr = (rng.standard_normal(n) * 1000).astype(dtype)
        special = [-0.0, np.inf, -np.inf, np.nan, info.max, info.tiny / 2][:n]
        arr[: len(special)] = np.array(special, dtype=dtype)
    return arr.reshape(shape)
