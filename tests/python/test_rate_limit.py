"""The rate limiter (`--rate-limit=execution_count`,
`--rate-limit-resource=NAME:COUNT`), through tritonclient: two models
whose instances share a resource of count 1 never execute at the same time
(their traced compute intervals never overlap), while the same two models
on a server with Triton's default `--rate-limit=off` do overlap."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import tritonclient.http as httpclient

from trtis_harness import running_server

CONFIG = """name: "{name}"
backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU rate_limiter {{ resources [ {{ name: "R" count: 1 }} ] priority: 1 }} }} ]
parameters [ {{ key: "execute_delay_ms" value: {{ string_value: "300" }} }} ]
"""


def repo(tmp_path_factory, tag):
    root = tmp_path_factory.mktemp(f"rate_{tag}")
    models = root / "models"
    for name in ["left", "right"]:
        (models / name / "1").mkdir(parents=True)
        (models / name / "config.pbtxt").write_text(CONFIG.format(name=name))
    return root


def intervals(server, trace):
    """Sends one request to each model at once; returns each request's
    (COMPUTE_START, COMPUTE_END) from the trace file."""
    def one(model):
        client = httpclient.InferenceServerClient(server.url, network_timeout=30.0)
        inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        client.infer(model, [inp])

    threads = [threading.Thread(target=one, args=(m,)) for m in ["left", "right"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = []
    for entry in json.loads(trace.read_text()):
        stamps = {t["name"]: t["ns"] for t in entry["timestamps"]}
        spans.append((stamps["COMPUTE_START"], stamps["COMPUTE_END"]))
    assert len(spans) == 2, spans
    return sorted(spans)


def overlap_ms(spans):
    """How long the two executions ran together (the trace's stamps are
    rebuilt from durations, so they carry microseconds of error)."""
    (_, first_end), (second_start, _) = spans
    return (first_end - second_start) / 1e6


@pytest.mark.parametrize("limited", [True, False])
def test_a_shared_resource_of_one_serializes_two_models(tmp_path_factory, limited):
    root = repo(tmp_path_factory, "on" if limited else "off")
    trace = root / "trace.json"
    args = ["--trace-config", f"triton,file={trace}", "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1"]
    if limited:
        args += ["--rate-limit", "execution_count", "--rate-limit-resource", "R:1"]
    for server in running_server(root / "models", args, name=f"rate limit {'on' if limited else 'off'}"):
        spans = intervals(server, trace)
        # Each execution takes 300 ms: together means overlapping by most
        # of that, one after the other by nothing (stamps' error aside).
        if limited:
            assert overlap_ms(spans) < 5, f"ran together under the rate limiter: {spans}"
        else:
            assert overlap_ms(spans) > 100, f"without the rate limiter both should run at once: {spans}"
        if not limited:
            assert any("rate_limiter, but the server runs with --rate-limit=off" in line for line in server.log_lines())


def test_bad_rate_limit_flags_stop_the_server(tmp_path_factory):
    import subprocess

    from trtis_harness import trtis_bin

    root = repo(tmp_path_factory, "bad")
    for flags, why in [
        (["--rate-limit", "sometimes"], "expected off or execution_count"),
        (["--rate-limit-resource", "R:1"], "needs --rate-limit=execution_count"),
        (["--rate-limit", "execution_count", "--rate-limit-resource", "R"], "NAME:COUNT"),
    ]:
        out = subprocess.run(
            [str(trtis_bin()), "serve", "--model-store", str(root / "models"), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", *flags],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 2, (flags, out.stderr)
        assert why in out.stderr, (flags, out.stderr)
