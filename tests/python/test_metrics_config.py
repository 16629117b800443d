"""The metrics Triton added after 2.51, on a real `trtis serve`, read as
Prometheus reads them (`prometheus_client`'s parser), the models driven by
tritonclient.

* `--metrics-config summary_latencies=true`: the `nv_inference_*_summary_us`
  summaries (quantile series, `_count`, `_sum`), quantiles from
  `summary_quantiles` (Triton's five by default).
* `--metrics-config histogram_latencies=true`:
  `nv_inference_first_response_histogram_ms` (buckets 100, 500, 2000, 5000
  or the model config's `model_metrics`).
* `counter_latencies=false` drops the `*_duration_us` counters.
* `nv_model_load_duration_secs` per loaded version.
* `--allow-cpu-metrics=false` drops `nv_cpu_*`; `--metrics-interval-ms` sets
  how often the machine is read (a scrape prints the last reading).
* The statistics' `memory_usage` (HTTP and gRPC): a Python model's worker
  resident set, taken at load.

Facts: triton-2026-facts.md B.1–B.4. Decided for trtis: an unknown
`--metrics-config` key is logged as ignored (Triton ignores it silently), a
switch's value other than `true`/`false` is refused (Triton ignores it).

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_metrics_config.py -q
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from trtis_harness import (
    EXAMPLES,
    TrtisServer,
    grpc_client_for,
    running_server_with_metrics,
    wait_for,
)

PY = "add_sub"  # Python backend
ONNX = "simple"  # ONNX Runtime backend
BUCKETS = "simple_buckets"  # ONNX, with its own first-response buckets
DEFAULT_QUANTILES = ["0.5", "0.9", "0.95", "0.99", "0.999"]
SUMMARIES = [
    "nv_inference_request_summary_us",
    "nv_inference_queue_summary_us",
    "nv_inference_compute_input_summary_us",
    "nv_inference_compute_infer_summary_us",
    "nv_inference_compute_output_summary_us",
]
FIRST = "nv_inference_first_response_histogram_ms"
RUNS = {PY: 5, ONNX: 4, BUCKETS: 3}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = (tmp_path_factory.mktemp("metrics_config") / "models").resolve()
    repo.mkdir(parents=True)
    for name in (PY, ONNX):
        shutil.copytree(EXAMPLES / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(EXAMPLES / ONNX, repo / BUCKETS)
    config = (repo / BUCKETS / "config.pbtxt").read_text()
    config = config.replace(f'name: "{ONNX}"', f'name: "{BUCKETS}"')
    config += (
        '\nmodel_metrics { metric_control [ {'
        ' metric_identifier { family: "nv_inference_first_response_histogram_ms" }'
        " histogram_options { buckets: [ 10000, 0.5, 1 ] } } ] }\n"
    )
    (repo / BUCKETS / "config.pbtxt").write_text(config)
    return repo


def serve_args(*extra: str) -> list[str]:
    return ["--python", sys.executable, *extra]


@pytest.fixture(scope="module")
def server(repo):
    """Summaries and histograms on, CPU metrics off, read every 200 ms."""
    yield from running_server_with_metrics(
        repo,
        args=serve_args(
            "--metrics-config",
            "summary_latencies=true",
            "--metrics-config",
            "histogram_latencies=true",
            "--metrics-interval-ms",
            "200",
            "--allow-cpu-metrics=false",
        ),
        name="metrics-config server",
    )


@pytest.fixture(scope="module")
def plain_server(repo):
    """Triton's defaults."""
    yield from running_server_with_metrics(repo, args=serve_args(), name="default metrics server")


@pytest.fixture(scope="module")
def counters_off_server(repo):
    """counter_latencies=false, two quantiles of our own, an unknown key,
    the machine read every 200 ms."""
    yield from running_server_with_metrics(
        repo,
        args=serve_args(
            "--metrics-config",
            "counter_latencies=false",
            "--metrics-config",
            "summary_latencies=true",
            "--metrics-config",
            "summary_quantiles=0.25:0.01,0.75:0.01",
            "--metrics-config",
            "not_a_setting=1",
            "--metrics-interval-ms",
            "200",
        ),
        name="counters-off server",
    )


def scrape(server) -> dict:
    """{family name: Metric} of the server's /metrics."""
    with urllib.request.urlopen(server.metrics_url, timeout=10) as r:
        text = r.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(families: dict, family: str, sample_name: str, model: str) -> list:
    return [
        s
        for s in families[family].samples
        if s.name == sample_name and s.labels.get("model") == model
    ]


def value(families: dict, family: str, sample_name: str, model: str) -> float:
    found = samples(families, family, sample_name, model)
    assert len(found) == 1, (family, sample_name, model, found)
    return found[0].value


def counter(families: dict, family: str, model: str) -> float:
    """A counter's sample (the parser names it `<family>_total`)."""
    assert families[family].type == "counter", family
    return value(families, family, family + "_total", model)


def infer(server, model: str, times: int) -> None:
    client = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
    try:
        for _ in range(times):
            if model == PY:
                a, b = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
                dtype, shape = "FP32", [4]
            else:
                a, b = np.arange(16, dtype=np.int32)[None], np.ones((1, 16), dtype=np.int32)
                dtype, shape = "INT32", [1, 16]
            inputs = []
            for name, array in (("INPUT0", a), ("INPUT1", b)):
                i = httpclient.InferInput(name, shape, dtype)
                i.set_data_from_numpy(array)
                inputs.append(i)
            result = client.infer(model, inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    finally:
        client.close()


@pytest.fixture(scope="module")
def inferred(server):
    for model, n in RUNS.items():
        infer(server, model, n)
    return scrape(server)


def test_summaries_have_tritons_quantiles_count_and_sum(inferred):
    for model, n in RUNS.items():
        for family in SUMMARIES:
            assert inferred[family].type == "summary", family
            count = value(inferred, family, family + "_count", model)
            assert count == n, (family, model, count)
            total = value(inferred, family, family + "_sum", model)
            quantiles = {
                s.labels["quantile"]: s.value
                for s in samples(inferred, family, family, model)
            }
            assert sorted(quantiles, key=float) == DEFAULT_QUANTILES, quantiles
            values = [quantiles[q] for q in DEFAULT_QUANTILES]
            assert all(math.isfinite(v) and v >= 0 for v in values), (family, values)
            assert values == sorted(values), (family, values)
            # The window holds every request: the top quantile is the
            # largest duration, at least the mean (HDR values within 1%).
            assert values[-1] * 1.01 + 1 >= total / n, (family, values, total)
            assert values[0] <= total, (family, values, total)
        # The request summary's sum is the request duration counter's.
        summed = value(inferred, SUMMARIES[0], SUMMARIES[0] + "_sum", model)
        duration = counter(inferred, "nv_inference_request_duration_us", model)
        assert summed > 0 and math.isclose(summed, duration, rel_tol=1e-9), (summed, duration)


def test_first_response_histogram_counts_each_request_once(inferred):
    family = inferred[FIRST]
    assert family.type == "histogram"
    assert family.documentation == "Duration from request to first response in milliseconds"
    for model, n in RUNS.items():
        buckets = {
            s.labels["le"]: s.value for s in samples(inferred, FIRST, FIRST + "_bucket", model)
        }
        # Sorted, written as Triton writes them (le="100").
        expected = (
            ["0.5", "1", "10000", "+Inf"]
            if model == BUCKETS
            else ["100", "500", "2000", "5000", "+Inf"]
        )
        assert list(buckets) == expected, (model, buckets)
        counts = list(buckets.values())
        assert counts == sorted(counts), (model, buckets)
        assert buckets["+Inf"] == n
        assert value(inferred, FIRST, FIRST + "_count", model) == n
        # Whole milliseconds, each under 10 s here.
        ms = value(inferred, FIRST, FIRST + "_sum", model)
        assert ms == int(ms) and ms < 10_000 * n
        if model == BUCKETS:
            assert buckets["10000"] == n


def test_load_duration_is_a_gauge_per_loaded_version(inferred):
    family = inferred["nv_model_load_duration_secs"]
    assert family.type == "gauge"
    for model in RUNS:
        secs = value(inferred, "nv_model_load_duration_secs", "nv_model_load_duration_secs", model)
        assert 0 < secs < 120, (model, secs)
    labels = {tuple(sorted(s.labels.items())) for s in family.samples}
    assert (("model", PY), ("version", "1")) in labels


def test_cpu_metrics_are_off_and_the_rest_stays(inferred):
    assert not [name for name in inferred if name.startswith("nv_cpu_")]
    assert not [name for name in inferred if name.startswith("nv_gpu_")]
    assert counter(inferred, "nv_inference_request_success", PY) == RUNS[PY]
    # trtis's own histograms are there as before.
    assert "trtis_inference_request_duration_us" in inferred


def test_defaults_have_no_summaries_or_first_response_histogram(plain_server):
    infer(plain_server, ONNX, 2)
    families = scrape(plain_server)
    for family in [*SUMMARIES, FIRST, "nv_cache_hit_summary_per_model"]:
        assert family not in families, family
    assert counter(families, "nv_inference_request_success", ONNX) == 2
    assert counter(families, "nv_inference_request_duration_us", ONNX) > 0
    secs = value(families, "nv_model_load_duration_secs", "nv_model_load_duration_secs", ONNX)
    assert secs > 0
    for name in ("nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"):
        assert families[name].type == "gauge", name
    total = families["nv_cpu_memory_total_bytes"].samples[0].value
    used = families["nv_cpu_memory_used_bytes"].samples[0].value
    assert 0 < used <= total
    utilization = families["nv_cpu_utilization"].samples[0].value
    assert 0 <= utilization <= 1


def machine(server) -> tuple:
    families = scrape(server)
    return tuple(
        families[n].samples[0].value
        for n in ("nv_cpu_utilization", "nv_cpu_memory_used_bytes", "nv_cpu_memory_total_bytes")
    )


def test_a_scrape_prints_the_last_reading(plain_server):
    """Read every 2 s (the default): scrapes in a row print the same
    reading (the old behaviour, reading at each scrape, gave each scrape its
    own utilization since the one before)."""
    readings = [machine(plain_server) for _ in range(3)]
    # Two scrapes in a row with an interval boundary between both is not
    # possible within a few ms; one pair at least shares a reading.
    assert readings[0] == readings[1] or readings[1] == readings[2], readings


def test_counter_latencies_false_drops_the_duration_counters(counters_off_server):
    infer(counters_off_server, ONNX, 3)
    families = scrape(counters_off_server)
    for name in (
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    ):
        assert name not in families, name
    # Unlike Triton (whose counters stay 0 then), the counts still count.
    assert counter(families, "nv_inference_request_success", ONNX) == 3
    assert counter(families, "nv_inference_count", ONNX) == 3
    family = SUMMARIES[0]
    quantiles = sorted(s.labels["quantile"] for s in samples(families, family, family, ONNX))
    assert quantiles == ["0.25", "0.75"]
    assert value(families, family, family + "_count", ONNX) == 3
    assert any(
        "unknown setting 'not_a_setting' ignored" in line
        for line in counters_off_server.log_lines()
    ), counters_off_server.log_tail()


def test_the_machine_is_read_every_interval(counters_off_server):
    """Read every 200 ms: the reading changes without any request."""
    first = machine(counters_off_server)
    changed = wait_for(lambda: machine(counters_off_server) != first, timeout=10.0, interval=0.1)
    assert changed, first


@pytest.mark.parametrize(
    "setting, message",
    [
        (
            "model,summary_latencies=true",
            "--metrics-config option format is <setting>=<value>. Got model,summary_latencies=true",
        ),
        ("summary_latencies", "--metrics-config option format is <setting>=<value>. Got summary_latencies"),
        ("summary_latencies=True", "the value of 'summary_latencies' must be true or false"),
    ],
)
def test_a_bad_metrics_config_stops_serve_with_the_message(repo, setting, message):
    command = TrtisServer(repo, ["--metrics-config", setting]).command()
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done
    assert message in done.stdout + done.stderr, done


def test_statistics_report_the_python_workers_memory(server):
    client = httpclient.InferenceServerClient(server.url)
    try:
        stats = client.get_inference_statistics(PY)["model_stats"]
    finally:
        client.close()
    assert len(stats) == 1
    usage = stats[0]["memory_usage"]
    assert len(usage) == 1, usage
    assert usage[0]["type"] == "CPU" and usage[0]["id"] == 0, usage
    # A Python interpreter with numpy holds well over 8 MiB.
    http_bytes = usage[0]["byte_size"]
    assert http_bytes > 8 << 20, usage

    grpc = grpc_client_for(server)
    try:
        stats = grpc.get_inference_statistics(PY, as_json=True)["model_stats"]
    finally:
        grpc.close()
    usage = stats[0]["memory_usage"]
    assert len(usage) == 1, usage
    assert usage[0]["type"] == "CPU"
    assert int(usage[0].get("id", 0)) == 0
    # Taken at load: the same figure over both protocols.
    assert int(usage[0]["byte_size"]) == http_bytes

    # Every model's entry has the list; its items are well formed.
    client = httpclient.InferenceServerClient(server.url)
    try:
        every = client.get_inference_statistics()["model_stats"]
    finally:
        client.close()
    for entry in every:
        assert isinstance(entry["memory_usage"], list), entry
        for u in entry["memory_usage"]:
            assert u["type"] == "CPU" and u["byte_size"] > 0, entry
