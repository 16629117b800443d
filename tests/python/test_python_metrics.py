"""A Python model's own metrics (`pb_utils.MetricFamily` / `Metric`) on
`/metrics` of a real `trtis serve`, read with plain HTTP as Triton's
custom_metrics example client does, the model driven by tritonclient.

Triton (python-backend-facts.md, MetricFamily): families appear under their
own name with `# HELP` / `# TYPE` lines and a sample line per label set,
e.g. `requests_process_latency_ns{model="custom_metrics",version="1"}`.
Decided for trtis where the facts are silent: instances that make the same
family (same name, kind and description) or the same metric (same labels)
share it; a family with the name of another but a different kind or
description is refused; a family or metric lives until the last model
object holding it is gone (the model unloads, or the worker dies).

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_python_metrics.py -q
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import urllib.request
import uuid

import numpy as np
import pytest
import tritonclient.http as httpclient

from trtis_harness import EXAMPLES, REPO_ROOT, running_server_with_metrics, wait_for

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "python"
MODEL = "custom_metrics"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = (tmp_path_factory.mktemp("python_metrics") / "models").resolve()
    repo.mkdir(parents=True)
    for source in (EXAMPLES / "add_sub", FIXTURES / MODEL):
        shutil.copytree(source, repo / source.name, ignore=shutil.ignore_patterns("__pycache__"))
    yield from running_server_with_metrics(
        repo,
        args=["--python", sys.executable, "--model-control-mode", "explicit", "--load-model", "*"],
        name="python metrics server",
    )


@pytest.fixture(scope="module")
def http(server):
    c = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
    yield c
    c.close()


def metrics(server) -> str:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as r:
        return r.read().decode()


def infer(http, request_id: str):
    a = np.arange(4, dtype=np.float32)
    b = np.ones(4, dtype=np.float32)
    inputs = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        i = httpclient.InferInput(name, [4], "FP32")
        i.set_data_from_numpy(array)
        inputs.append(i)
    result = http.infer(MODEL, inputs, request_id=request_id)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    return json.loads(result.as_numpy("INFO")[0])


def sample(text: str, name: str, labels: str) -> float | None:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return None if m is None else float(m.group(1))


LABELS = '{model="custom_metrics",version="1"}'


def test_families_show_with_help_type_and_samples(server, http):
    runs = 6
    for _ in range(runs):
        infer(http, str(uuid.uuid4()))
    text = metrics(server)
    # What Triton's custom_metrics example client checks.
    assert "# HELP requests_process_latency_ns Cumulative time spent processing requests" in text
    assert "# TYPE requests_process_latency_ns counter" in text
    latency = sample(text, "requests_process_latency_ns", LABELS)
    assert latency is not None and latency > 0, text
    # Two instances made the same metric: one sample line, both add to it.
    assert len(re.findall(r"^requests_process_latency_ns\{", text, re.M)) == 1
    assert "# TYPE custom_inflight gauge" in text
    assert sample(text, "custom_inflight", LABELS) == 1.0
    assert "# TYPE custom_input_sum histogram" in text
    # INPUT0 = [0, 1, 2, 3]: every observation is 6, in the le="10" bucket.
    hist = LABELS[:-1]
    assert sample(text, "custom_input_sum_bucket", hist + ',le="1"}') == 0
    total = sample(text, "custom_input_sum_count", LABELS)
    assert total is not None and total >= runs
    assert sample(text, "custom_input_sum_bucket", hist + ',le="10"}') == total
    assert sample(text, "custom_input_sum_bucket", hist + ',le="+Inf"}') == total
    assert sample(text, "custom_input_sum_sum", LABELS) == 6 * total
    # No nv_ prefix on the model's own families.
    assert "nv_requests_process_latency_ns" not in text


def test_the_metric_api_answers_and_refuses_as_documented(http):
    info = infer(http, "api-check")
    assert info["per_id_value"] == 1.0
    assert info["gauge"] == 1.0
    assert "negative" in info["negative_counter"], info
    assert "gauge" in info["set_counter"], info
    assert "not supported for a histogram" in info["hist_value"], info
    assert "needs buckets" in info["hist_no_buckets"], info
    assert "already exists with a different kind" in info["other_kind"], info
    assert info["same_family_value"] == info["gauge"], info
    assert "Invalid metric operation as the corresponding 'MetricFamily' has been deleted." in info["orphan_metric"], info
    assert "not a valid Prometheus metric name" in info["bad_name"], info


def test_a_metric_the_model_lets_go_of_leaves_metrics(server, http):
    request_id = "gone-" + uuid.uuid4().hex
    # The model made it (and read it back) during the request...
    assert infer(http, request_id)["per_id_value"] == 1.0
    # The per-request metric is dropped when execute's loop lets go of it.
    assert wait_for(lambda: f'id="{request_id}"' not in metrics(server), timeout=10), (
        "the per-request metric stayed on /metrics"
    )
    assert "# TYPE custom_requests_total counter" in metrics(server), "the family stays"


def test_unloading_the_model_removes_its_families(server, http):
    infer(http, "before-unload")
    assert "requests_process_latency_ns" in metrics(server)
    http.unload_model(MODEL)
    try:
        assert wait_for(lambda: "requests_process_latency_ns" not in metrics(server), timeout=20), (
            "the families stayed on /metrics after unload"
        )
        text = metrics(server)
        for family in ("custom_inflight", "custom_input_sum", "custom_requests_total"):
            assert family not in text
    finally:
        http.load_model(MODEL)
    infer(http, "after-load")
    assert sample(metrics(server), "custom_inflight", LABELS) == 1.0
