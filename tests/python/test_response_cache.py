"""The response cache (`--cache-config local,size=BYTES`, per model
`response_cache { enable: true }`) through tritonclient over HTTP and gRPC:
a repeated request is answered without running the model, the statistics
count hits and misses as Triton does (hits are successes, not inferences or
executions), the metrics carry Triton's cache names, and a model without
`response_cache` is never cached."""

from __future__ import annotations

import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from trtis_harness import grpc_client_for, running_server

CONFIG = """name: "{name}"
backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
{extra}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("cache") / "models"
    for name, extra in [
        ("cached_http", "response_cache { enable: true }"),
        ("cached_grpc", "response_cache { enable: true }"),
        ("big_cached", "response_cache { enable: true }"),
        ("uncached", ""),
    ]:
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, extra=extra))
    # 64 KiB: room for the small answers, not for a 1 MiB one.
    yield from running_server(repo, ["--cache-config", "local,size=65536"], name="cache server")


def infer(client, module, model, values):
    data = np.array([values], dtype=np.float32)
    inp = module.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    out = client.infer(model, [inp]).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, data)


def stats_of(client, protocol, model):
    if protocol == "http":
        s = client.get_inference_statistics(model)["model_stats"][0]
        st = s["inference_stats"]
        return {
            "inference_count": int(s["inference_count"]),
            "execution_count": int(s["execution_count"]),
            "success": int(st["success"]["count"]),
            "hit": int(st["cache_hit"]["count"]),
            "miss": int(st["cache_miss"]["count"]),
        }
    s = client.get_inference_statistics(model).model_stats[0]
    st = s.inference_stats
    return {
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "success": st.success.count,
        "hit": st.cache_hit.count,
        "miss": st.cache_miss.count,
    }


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_repeated_request_is_answered_from_the_cache(server, protocol):
    if protocol == "http":
        client, module = httpclient.InferenceServerClient(server.url), httpclient
    else:
        client, module = grpc_client_for(server), grpcclient
    model = f"cached_{protocol}"
    infer(client, module, model, [1.0, 2.0, 3.0])
    infer(client, module, model, [1.0, 2.0, 3.0])
    infer(client, module, model, [1.0, 2.0, 3.0])
    infer(client, module, model, [4.0, 5.0])
    assert stats_of(client, protocol, model) == {
        "inference_count": 2,  # cache hits are not inferences
        "execution_count": 2,
        "success": 4,
        "hit": 2,
        "miss": 2,
    }
    client.close()


def test_a_model_without_response_cache_always_runs(server):
    client = httpclient.InferenceServerClient(server.url)
    for _ in range(3):
        infer(client, httpclient, "uncached", [7.0])
    s = stats_of(client, "http", "uncached")
    assert (s["execution_count"], s["hit"], s["miss"]) == (3, 0, 0)


def test_an_answer_larger_than_the_cache_is_not_kept(server):
    client = httpclient.InferenceServerClient(server.url, network_timeout=60.0)
    big = list(np.arange(256 * 1024, dtype=np.float32))
    infer(client, httpclient, "big_cached", big)
    infer(client, httpclient, "big_cached", big)
    s = stats_of(client, "http", "big_cached")
    assert (s["execution_count"], s["hit"], s["miss"]) == (2, 0, 2)


def test_metrics_carry_tritons_cache_names(server):
    client = httpclient.InferenceServerClient(server.url)
    infer(client, httpclient, "cached_http", [9.0])
    infer(client, httpclient, "cached_http", [9.0])
    port = next(
        int(line.rsplit(":", 1)[1])
        for line in server.log_lines()
        if "Started Metrics Service at " in line
    )
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for family in [
        "nv_cache_num_hits_per_model",
        "nv_cache_num_misses_per_model",
        "nv_cache_hit_duration_per_model",
        "nv_cache_miss_duration_per_model",
    ]:
        assert f'{family}{{model="cached_http",version="1"}}' in text, family
    assert 'nv_cache_num_hits_per_model{model="uncached"' not in text
