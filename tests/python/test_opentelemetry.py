"""OpenTelemetry tracing (`--trace-config mode=opentelemetry`) against a
real `trtis serve` and an OTLP/HTTP receiver: a small HTTP server in this
process that decodes each POST with the OTLP messages of the
`opentelemetry-proto` package (PyPI), as a collector does.

Covered (facts sheet triton-2026-facts.md section C): the spans of a
request, `InferRequest` -> the model's span -> `compute`, with Triton's
names, events, `triton.*` attributes, resource and scope; a W3C
`traceparent` over HTTP and gRPC (unary and streaming) makes them children
of the caller's span, and is traced whatever the rate (rate 0: only
those); the trace settings API's view in this mode; Triton's message for a
bad setting; a collector that is down or hangs costs the requests
nothing, and what it costs the spans is counted on /metrics
(`trtis_trace_spans_dropped_total`, `..._export_failed_total`) and logged
once.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_opentelemetry.py -q
"""

from __future__ import annotations

import http.server
import os
import re
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from trtis_harness import (
    build_tiny_repository,
    free_port,
    metric,
    running_server,
    running_server_with_metrics,
    trtis_bin,
    wait_for,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"


class Collector:
    """Receives OTLP/HTTP protobuf exports on /v1/traces; keeps every span
    as a dict."""

    def __init__(self):
        self.spans: list[dict] = []
        self.posts = 0
        self.lock = threading.Lock()
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.take(self.path, self.headers.get("Content-Type"), request)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def take(self, path, content_type, request):
        with self.lock:
            self.posts += 1
            for rs in request.resource_spans:
                resource = {a.key: a.value.string_value for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append(
                            {
                                "path": path,
                                "content_type": content_type,
                                "resource": resource,
                                "scope": ss.scope.name,
                                "name": s.name,
                                "kind": s.kind,
                                "trace_id": s.trace_id.hex(),
                                "span_id": s.span_id.hex(),
                                "parent": s.parent_span_id.hex(),
                                "start": s.start_time_unix_nano,
                                "end": s.end_time_unix_nano,
                                "attributes": {
                                    a.key: (a.value.string_value or a.value.int_value) for a in s.attributes
                                },
                                "events": [(e.name, e.time_unix_nano) for e in s.events],
                            }
                        )

    def trace(self, trace_id: str, n: int = 3, timeout: float = 30.0) -> list[dict]:
        """The spans of one trace, once `n` have arrived."""

        def got():
            with self.lock:
                return [s for s in self.spans if s["trace_id"] == trace_id]

        assert wait_for(lambda: len(got()) >= n, timeout=timeout)
        return got()

    def close(self):
        self.server.shutdown()


@pytest.fixture(scope="module")
def collector():
    c = Collector()
    yield c
    c.close()


ENSEMBLE = """name: "ens"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "identity_fp32" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "MID" } },
  { model_name: "identity_fp32" model_version: -1
    input_map { key: "INPUT0" value: "MID" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""


BLS_CONFIG = """name: "bls"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""

BLS_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            call = pb_utils.InferenceRequest(
                model_name="identity_fp32", inputs=[x], requested_output_names=["OUTPUT0"],
                trace=request.trace(),
            )
            r = call.exec()
            if r.has_error():
                raise pb_utils.TritonModelException(r.error().message())
            y = pb_utils.get_output_tensor_by_name(r, "OUTPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", y)]))
        return out
"""


REPEAT_CONFIG = """name: "repeat"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

REPEAT_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            for _ in range(3):
                sender.send(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", x)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = build_tiny_repository(tmp_path_factory.mktemp("otel") / "models")
    (repo / "ens" / "1").mkdir(parents=True)
    (repo / "ens" / "config.pbtxt").write_text(ENSEMBLE)
    # A Python model calling identity_fp32 through BLS, with its trace.
    (repo / "bls" / "1").mkdir(parents=True)
    (repo / "bls" / "config.pbtxt").write_text(BLS_CONFIG)
    (repo / "bls" / "1" / "model.py").write_text(BLS_MODEL)
    # A decoupled model: three responses per request.
    (repo / "repeat" / "1").mkdir(parents=True)
    (repo / "repeat" / "config.pbtxt").write_text(REPEAT_CONFIG)
    (repo / "repeat" / "1" / "model.py").write_text(REPEAT_MODEL)
    # An echo through the OpenAI API: the prompt is the completion.
    echo = repo / "echo"
    (echo / "1").mkdir(parents=True)
    (echo / "config.pbtxt").write_text(
        'backend: "identity"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        'parameters { key: "openai_text_input" value { string_value: "INPUT0" } }\n'
        'parameters { key: "openai_text_output" value { string_value: "OUTPUT0" } }\n'
    )
    return repo


def otel_args(url: str, *more: str) -> list[str]:
    args = [
        "--python", sys.executable,
        "--trace-config", "mode=opentelemetry",
        "--trace-config", "level=TIMESTAMPS",
        "--trace-config", "rate=1",
        "--trace-config", f"opentelemetry,url={url}",
        "--trace-config", "opentelemetry,bsp_schedule_delay=50",
        "--trace-config", "opentelemetry,resource=deployment.environment=test",
    ]  # fmt: skip
    for m in more:
        args += ["--trace-config", m]
    return args


@pytest.fixture(scope="module")
def server(repo, collector):
    yield from running_server(repo, otel_args(collector.url), name="otel server")


def identity_input(module):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    inp = module.InferInput("INPUT0", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    return [inp]


def by_name(spans: list[dict]) -> dict:
    return {s["name"]: s for s in spans}


def check_request_spans(spans: list[dict], parent: str, request_id: str, t0: int, t1: int):
    s = by_name(spans)
    assert set(s) == {"InferRequest", "identity_fp32", "compute"}, [x["name"] for x in spans]
    root, model, compute = s["InferRequest"], s["identity_fp32"], s["compute"]
    assert root["parent"] == parent
    assert model["parent"] == root["span_id"] and compute["parent"] == model["span_id"]
    for span in spans:
        assert span["scope"] == "triton-server"
        assert span["kind"] == 2  # SPAN_KIND_SERVER
        assert span["path"] == "/v1/traces" and span["content_type"] == "application/x-protobuf"
        assert span["resource"]["service.name"] == "triton-inference-server"
        assert span["resource"]["deployment.environment"] == "test"
        assert t0 <= span["start"] <= span["end"] <= t1, (span["name"], t0, span["start"], span["end"], t1)
    attrs = model["attributes"]
    assert attrs["triton.model_name"] == "identity_fp32"
    assert attrs["triton.model_version"] == 1
    assert attrs["triton.trace_id"] > 0
    if request_id:
        assert attrs["triton.request_id"] == request_id
    else:
        assert "triton.request_id" not in attrs
    assert [e for e, _ in model["events"]] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert [e for e, _ in compute["events"]] == [
        "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END",
    ]  # fmt: skip
    times = [t for _, t in model["events"][:2]] + [t for _, t in compute["events"]] + [model["events"][2][1]]
    assert times == sorted(times)


def test_http_traceparent_makes_the_spans_the_callers_children(server, collector):
    client = httpclient.InferenceServerClient(server.url)
    t0 = time.time_ns()
    client.infer("identity_fp32", identity_input(httpclient), request_id="r-7", headers={"traceparent": TRACEPARENT})
    t1 = time.time_ns()
    client.close()
    check_request_spans(collector.trace(TRACE_ID), CLIENT_SPAN, "r-7", t0, t1)


def test_an_ensembles_steps_are_its_children(server, collector):
    """Triton's shape: InferRequest -> ens -> (a model span and its compute
    per step); no compute span for the ensemble itself."""
    trace_id = "33333333333333333333333333333333"
    client = httpclient.InferenceServerClient(server.url)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    inp = httpclient.InferInput("IN", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    t0 = time.time_ns()
    r = client.infer("ens", [inp], headers={"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"})
    t1 = time.time_ns()
    client.close()
    assert (r.as_numpy("OUT") == x).all()
    spans = collector.trace(trace_id, n=6)
    names = sorted(sp["name"] for sp in spans)
    assert names == ["InferRequest", "compute", "compute", "ens", "identity_fp32", "identity_fp32"], names
    ids = {sp["span_id"]: sp for sp in spans}
    root = next(sp for sp in spans if sp["name"] == "InferRequest")
    ens = next(sp for sp in spans if sp["name"] == "ens")
    assert root["parent"] == CLIENT_SPAN and ens["parent"] == root["span_id"]
    steps = [sp for sp in spans if sp["name"] == "identity_fp32"]
    for step in steps:
        assert step["parent"] == ens["span_id"]
        assert step["attributes"]["triton.trace_parent_id"] == ens["attributes"]["triton.trace_id"]
        assert ens["start"] <= step["start"] <= step["end"] <= ens["end"]
    for c in (sp for sp in spans if sp["name"] == "compute"):
        assert ids[c["parent"]]["name"] == "identity_fp32"
    assert all(t0 <= sp["start"] <= sp["end"] <= t1 for sp in spans)


def test_a_bls_call_with_the_requests_trace_is_its_child(server, collector):
    """Triton's shape: InferRequest -> bls -> {compute, identity_fp32 ->
    compute} when the model passes trace=request.trace()."""
    trace_id = "55555555555555555555555555555555"
    client = httpclient.InferenceServerClient(server.url)
    r = client.infer("bls", identity_input(httpclient), headers={"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"})
    client.close()
    assert r.as_numpy("OUTPUT0").shape == (1, 4)
    spans = collector.trace(trace_id, n=5)
    assert sorted(sp["name"] for sp in spans) == ["InferRequest", "bls", "compute", "compute", "identity_fp32"]
    ids = {sp["span_id"]: sp for sp in spans}
    bls = next(sp for sp in spans if sp["name"] == "bls")
    called = next(sp for sp in spans if sp["name"] == "identity_fp32")
    assert ids[bls["parent"]]["name"] == "InferRequest"
    assert called["parent"] == bls["span_id"]
    assert called["attributes"]["triton.trace_parent_id"] == bls["attributes"]["triton.trace_id"]
    assert sorted(ids[c["parent"]]["name"] for c in spans if c["name"] == "compute") == ["bls", "identity_fp32"]


def test_a_decoupled_request_is_traced_once(server, collector):
    trace_id = "66666666666666666666666666666666"
    t0 = time.time_ns()
    status, _, body = server.post_json(
        "/v2/models/repeat/generate_stream", {"IN": "x"}, headers={"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"}
    )
    t1 = time.time_ns()
    assert status == 200 and body.count(b"data: ") == 3, body
    spans = collector.trace(trace_id)
    s = by_name(spans)
    assert set(s) == {"InferRequest", "repeat", "compute"}, [sp["name"] for sp in spans]
    assert s["InferRequest"]["parent"] == CLIENT_SPAN
    assert s["repeat"]["parent"] == s["InferRequest"]["span_id"]
    assert all(t0 <= sp["start"] <= sp["end"] <= t1 for sp in spans)
    # Over a gRPC stream, the stream's metadata.
    grpc_trace = "77777777777777777777777777777777"
    client = grpcclient.InferenceServerClient(server.grpc_url)
    done = []
    client.start_stream(
        callback=lambda result, error: done.append((result, error)),
        headers={"traceparent": f"00-{grpc_trace}-{CLIENT_SPAN}-01"},
    )
    x = grpcclient.InferInput("IN", [1], "BYTES")
    x.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
    client.async_stream_infer("repeat", [x])
    assert wait_for(lambda: len(done) == 3)
    client.stop_stream()
    client.close()
    s = by_name(collector.trace(grpc_trace))
    assert set(s) == {"InferRequest", "repeat", "compute"} and s["InferRequest"]["parent"] == CLIENT_SPAN


def test_the_openai_api_and_generate_propagate_too(server, collector):
    for n, (path, body) in enumerate(
        [
            ("/v1/completions", {"model": "echo", "prompt": "hello"}),
            ("/v2/models/echo/generate", {"INPUT0": "hello"}),
        ]
    ):
        trace_id = f"4444444444444444444444444444444{n}"
        status, _, data = server.post_json(path, body, headers={"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"})
        assert status == 200, data
        assert "hello" in data.decode()
        s = by_name(collector.trace(trace_id))
        assert set(s) == {"InferRequest", "echo", "compute"}
        assert s["InferRequest"]["parent"] == CLIENT_SPAN


def test_grpc_metadata_unary_and_streaming(server, collector):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    parent = "b7ad6b7169203331"
    t0 = time.time_ns()
    client.infer(
        "identity_fp32", identity_input(grpcclient), headers={"traceparent": f"00-{trace_id}-{parent}-01"}
    )
    t1 = time.time_ns()
    check_request_spans(collector.trace(trace_id), parent, "", t0, t1)
    # A stream's metadata applies to each of its requests.
    stream_trace = "11111111111111111111111111111111"
    done = []
    client.start_stream(
        callback=lambda result, error: done.append((result, error)), headers={"traceparent": f"00-{stream_trace}-{parent}-01"}
    )
    for _ in range(2):
        client.async_stream_infer("identity_fp32", identity_input(grpcclient))
    assert wait_for(lambda: len(done) == 2)
    assert all(e is None for _, e in done), done
    client.stop_stream()
    client.close()
    spans = collector.trace(stream_trace, n=6)
    roots = [s for s in spans if s["name"] == "InferRequest"]
    assert len(roots) == 2 and all(r["parent"] == parent for r in roots)


def test_without_a_caller_the_request_is_a_root(server, collector):
    client = httpclient.InferenceServerClient(server.url)
    before = len(collector.spans)
    client.infer("identity_fp32", identity_input(httpclient), request_id="lonely")
    client.close()
    assert wait_for(lambda: any(s["attributes"].get("triton.request_id") == "lonely" for s in collector.spans[before:]))
    model = next(s for s in collector.spans[before:] if s["attributes"].get("triton.request_id") == "lonely")
    spans = collector.trace(model["trace_id"])
    assert by_name(spans)["InferRequest"]["parent"] == ""


def test_rate_zero_traces_only_requests_with_a_traceparent(server, collector):
    client = httpclient.InferenceServerClient(server.url)
    settings = client.update_trace_settings(settings={"trace_rate": "0"})
    try:
        assert settings["trace_rate"] == "0"
        client.infer("identity_fp32", identity_input(httpclient), request_id="untraced")
        trace_id = "22222222222222222222222222222222"
        client.infer(
            "identity_fp32", identity_input(httpclient), headers={"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"}
        )
        collector.trace(trace_id)
        time.sleep(0.3)  # a few export rounds: the untraced one never comes
        assert not [s for s in collector.spans if s["attributes"].get("triton.request_id") == "untraced"]
    finally:
        client.update_trace_settings(settings={"trace_rate": "1"})
        client.close()


def test_trace_settings_in_opentelemetry_mode(server, collector):
    client = httpclient.InferenceServerClient(server.url)
    s = client.get_trace_settings()
    client.close()
    assert s["trace_mode"] == "opentelemetry"
    assert s["url"] == collector.url
    assert s["bsp_schedule_delay"] == "50" and s["bsp_max_queue_size"] == "2048"
    assert s["resource"] in ("deployment.environment=test", ["deployment.environment=test"])
    assert "trace_file" not in s and "log_frequency" not in s


def test_a_bad_setting_stops_the_server_with_tritons_words(repo):
    out = subprocess.run(
        [str(trtis_bin()), "serve", "--model-store", str(repo), "--http-port", "0", "--grpc-port", "0",
         "--metrics-port", "0", *otel_args("http://127.0.0.1:9/v1/traces", "opentelemetry,bsp_max_queue_size=lots")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode != 0
    assert 'Bad option: "--trace-config opentelemetry,bsp_max_queue_size".' in out.stderr, out.stderr


def test_a_collector_that_is_down_costs_the_requests_nothing(repo):
    port = free_port()  # nothing listens there
    for server in running_server(repo, otel_args(f"http://127.0.0.1:{port}/v1/traces"), name="otel no collector"):
        client = httpclient.InferenceServerClient(server.url)
        for _ in range(50):
            r = client.infer("identity_fp32", identity_input(httpclient), headers={"traceparent": TRACEPARENT})
            assert r.as_numpy("OUTPUT0").shape == (1, 4)
        client.close()


def counter(server, name: str) -> float:
    """A counter on /metrics (-1 while the metrics port is not up yet)."""
    value = metric(server, name)
    return -1 if value is None else value


def test_exported_spans_are_counted(repo, collector):
    for server in running_server_with_metrics(repo, otel_args(collector.url), name="otel counted"):
        client = httpclient.InferenceServerClient(server.url)
        client.infer("identity_fp32", identity_input(httpclient))
        client.close()
        assert wait_for(lambda: counter(server, "trtis_trace_spans_exported_total") >= 3, timeout=30)
        assert counter(server, "trtis_trace_spans_dropped_total") == 0
        assert counter(server, "trtis_trace_spans_export_failed_total") == 0


def test_a_hung_collector_drops_spans_not_requests(repo):
    """A collector that takes the connection and never answers: the export
    thread waits on it (10 s), the queue (2 spans) stays full, later spans
    are dropped and counted, the requests go on; then the failure is
    logged once and counted."""
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)  # never accepted, never answered
    url = f"http://127.0.0.1:{hung.getsockname()[1]}/v1/traces"
    args = otel_args(
        url, "opentelemetry,bsp_max_queue_size=2", "opentelemetry,bsp_max_export_batch_size=2"
    )
    try:
        for server in running_server_with_metrics(repo, args, name="otel hung collector"):
            client = httpclient.InferenceServerClient(server.url)
            for _ in range(5):
                r = client.infer("identity_fp32", identity_input(httpclient))
                assert r.as_numpy("OUTPUT0").shape == (1, 4)
            client.close()
            # 15 spans, at most 2 queued while the export hangs.
            assert wait_for(lambda: counter(server, "trtis_trace_spans_dropped_total") >= 10, timeout=30)
            assert wait_for(lambda: counter(server, "trtis_trace_spans_export_failed_total") >= 2, timeout=60)
            lines = [l for l in server.log_lines() if "OpenTelemetry: exporting spans to" in l]
            assert len(lines) == 1 and url in lines[0], lines
            assert re.search(r"(^|\s)W\d{4} ", lines[0]), lines  # a warning line
    finally:
        hung.close()
