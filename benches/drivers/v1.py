"""The legacy TRTIS v1 API against KServe v2: the same model, the same client.

In one run, on one `trtis serve` (one repository, one model: identity_fp32,
the built-in identity backend, max_batch_size 8, FP32 [16] in and out), it
measures four clients of the same shape: one Python process, one
connection, sequential unary requests in a loop, batch 1, 16 FP32 values
(64 bytes) per request, after a warm-up, for about 5 s each:
  - v1 HTTP: http.client keep-alive, POST /api/infer/identity_fp32 with the
    NV-InferRequest header (one-line text InferRequestHeader) and the 64 raw
    bytes as the body (run by .venv-v1's python);
  - v2 HTTP: the same connection type, POST /v2/models/identity_fp32/infer
    with the binary tensor extension (JSON header + 64 raw bytes,
    Inference-Header-Content-Length, binary_data_output), the cheapest v2
    form (.venv's python);
  - v1 gRPC: nvidia.inferenceserver.GRPCService/Infer through the
    tensorrtserver==1.11.0 wheel's generated GRPCServiceStub, the input in
    raw_input (.venv-v1: the wheel's modules need protobuf 3; they are
    loaded without the package's broken __init__);
  - v2 gRPC: inference.GRPCInferenceService/ModelInfer with
    raw_input_contents through a generic channel.unary_unary, messages from
    tritonclient.grpc.service_pb2 (.venv).
Each client checks one answer for correctness (v1: NV-Status / request
status SUCCESS, output bytes equal to the input) before it is timed. The
four are measured in turn, then again in another order (v2 before v1 within
each protocol), so drift between the rounds shows.

For each: requests/s seen by the client; the server's CPU per inference in
µs (utime+stime of the trtis process from /proc/<pid>/stat over the timed
loop only, divided by the requests the client made; the inferences the
server's statistics counted over the same window are checked against that
number); the client process's own CPU per request for context. Then the
ratios v1/v2 per protocol (from both rounds together).

Run it with scripts/bench.sh v1 (which builds trtis in release mode).
Results: target/bench/v1-bench.md, also printed. TRTIS_BENCH_SECONDS sets
the timed seconds per measurement (default 5).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, ROOT, Server, cpu_seconds  # noqa: E402

MODEL = "identity_fp32"
PORT = 18600
SECONDS = float(os.environ.get("TRTIS_BENCH_SECONDS", "5"))
WARMUP_S = 0.5
V1_PYTHON = os.path.join(ROOT, ".venv-v1/bin/python")
V2_PYTHON = os.path.join(ROOT, ".venv/bin/python")
# (key, API, protocol, interpreter)
CLIENTS = {
    "v1-http": ("v1", "HTTP", V1_PYTHON),
    "v2-http": ("v2", "HTTP", V2_PYTHON),
    "v1-grpc": ("v1", "gRPC", V1_PYTHON),
    "v2-grpc": ("v2", "gRPC", V2_PYTHON),
}
ROUNDS = (("v1-http", "v2-http", "v1-grpc", "v2-grpc"),
          ("v2-http", "v1-http", "v2-grpc", "v1-grpc"))
CONFIG = ('name: "identity_fp32"\nbackend: "identity"\nmax_batch_size: 8\n'
          'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
          'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n')


# ---------------------------------------------------------------------------
# The client, run as a child process: `PYTHON v1.py --client KEY PORT SECONDS`.
# It sets up, checks one answer, warms up, prints {"ready": ...}, waits for a
# line on stdin, runs the timed loop and prints {"n", "wall_s", "cpu_s"}.
# ---------------------------------------------------------------------------

def load_v1_modules():
    """The 1.11 wheel's generated modules, without tensorrtserver.api's
    __init__ (it loads a C++ library that needs libssl 1.1)."""
    import importlib
    import importlib.util
    import types
    spec = importlib.util.find_spec("tensorrtserver")
    if spec is None:
        sys.exit(f"the tensorrtserver==1.11.0 wheel is not installed in {sys.executable} (scripts/setup.sh)")
    root = list(spec.submodule_search_locations)[0]
    pkg = types.ModuleType("tensorrtserver")
    pkg.__path__ = [root]
    api = types.ModuleType("tensorrtserver.api")
    api.__path__ = [os.path.join(root, "api")]
    pkg.api = api
    sys.modules["tensorrtserver"] = pkg
    sys.modules["tensorrtserver.api"] = api
    return types.SimpleNamespace(**{name: importlib.import_module("tensorrtserver.api." + name)
                                    for name in ("api_pb2", "request_status_pb2", "grpc_service_pb2",
                                                 "grpc_service_pb2_grpc")})


def client_v1_http(port, data):
    import http.client
    from google.protobuf import text_format
    pb = load_v1_modules()
    conn = http.client.HTTPConnection("127.0.0.1", port)
    path = f"/api/infer/{MODEL}"
    headers = {"NV-InferRequest": 'batch_size: 1 input { name: "INPUT0" dims: 16 } output { name: "OUTPUT0" }',
               "Content-Type": "application/octet-stream"}

    def once():
        conn.request("POST", path, data, headers)
        r = conn.getresponse()
        return r, r.read()

    r, body = once()
    if r.status != 200:
        sys.exit(f"v1 HTTP: {r.status} {r.reason} (NV-Status {r.getheader('NV-Status')!r}) {body[:200]!r}")
    status = text_format.Parse(r.getheader("NV-Status") or "", pb.request_status_pb2.RequestStatus())
    header = text_format.Parse(r.getheader("NV-InferResponse") or "", pb.api_pb2.InferResponseHeader())
    if status.code != pb.request_status_pb2.SUCCESS or header.output[0].raw.batch_byte_size != len(data) \
            or body[:len(data)] != data:
        sys.exit(f"v1 HTTP: wrong answer: NV-Status {r.getheader('NV-Status')!r}, "
                 f"NV-InferResponse {r.getheader('NV-InferResponse')!r}, body {body[:80]!r}")
    trailer = pb.api_pb2.InferResponseHeader()
    text_format.Parse(body[len(data):].decode(), trailer)
    if trailer.model_name != MODEL:
        sys.exit(f"v1 HTTP: wrong trailing header {body[len(data):]!r}")
    return once


def client_v2_http(port, data):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port)
    path = f"/v2/models/{MODEL}/infer"
    head = json.dumps({
        "inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                    "parameters": {"binary_data_size": len(data)}}],
        "outputs": [{"name": "OUTPUT0"}],
        "parameters": {"binary_data_output": True},
    }, separators=(",", ":")).encode()
    body = head + data
    headers = {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"}

    def once():
        conn.request("POST", path, body, headers)
        r = conn.getresponse()
        return r, r.read()

    r, answer = once()
    length = int(r.getheader("Inference-Header-Content-Length") or -1)
    if r.status != 200 or length < 0:
        sys.exit(f"v2 HTTP: {r.status} {r.reason} {answer[:200]!r}")
    meta = json.loads(answer[:length])
    out = meta["outputs"][0]
    if out["name"] != "OUTPUT0" or out["parameters"]["binary_data_size"] != len(data) or answer[length:] != data:
        sys.exit(f"v2 HTTP: wrong answer {answer[:200]!r}")
    return once


def client_v1_grpc(port, data):
    import grpc
    pb = load_v1_modules()
    api = pb.api_pb2
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = pb.grpc_service_pb2_grpc.GRPCServiceStub(channel)
    header = api.InferRequestHeader(batch_size=1)
    header.input.add(name="INPUT0", dims=[16])
    header.output.add(name="OUTPUT0")
    request = pb.grpc_service_pb2.InferRequest(model_name=MODEL, model_version=-1, meta_data=header,
                                               raw_input=[data])

    def once():
        return stub.Infer(request, timeout=30)

    r = once()
    if r.request_status.code != pb.request_status_pb2.SUCCESS or list(r.raw_output) != [data] \
            or r.meta_data.model_name != MODEL:
        sys.exit(f"v1 gRPC: wrong answer {r}")
    return once


def client_v2_grpc(port, data):
    import grpc
    from tritonclient.grpc import service_pb2
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                request_serializer=service_pb2.ModelInferRequest.SerializeToString,
                                response_deserializer=service_pb2.ModelInferResponse.FromString)
    request = service_pb2.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    request.outputs.add(name="OUTPUT0")
    request.raw_input_contents.append(data)

    def once():
        return infer(request, timeout=30)

    r = once()
    if [o.name for o in r.outputs] != ["OUTPUT0"] or list(r.raw_output_contents) != [data]:
        sys.exit(f"v2 gRPC: wrong answer {r}")
    return once


def client_main(key, port, seconds):
    import struct
    data = struct.pack("<16f", *(float(i) * 0.5 - 3.0 for i in range(16)))
    once = {"v1-http": client_v1_http, "v2-http": client_v2_http,
            "v1-grpc": client_v1_grpc, "v2-grpc": client_v2_grpc}[key](port, data)
    # Warm-up, which also sizes the timed loop.
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < WARMUP_S:
        once()
        n += 1
    total = max(int(n / (time.perf_counter() - t0) * seconds), 100)
    print(json.dumps({"ready": total}), flush=True)
    sys.stdin.readline()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(total):
        once()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"n": total, "wall_s": wall, "cpu_s": cpu}), flush=True)


# ---------------------------------------------------------------------------
# The driver.
# ---------------------------------------------------------------------------

def measure(server, key):
    api, protocol, python = CLIENTS[key]
    port = server.port if protocol == "HTTP" else server.grpc_port
    child = subprocess.Popen([python, os.path.abspath(__file__), "--client", key, str(port), str(SECONDS)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        if not line:
            child.wait()
            sys.exit(f"{key} client failed (exit {child.returncode}): see its message above")
        n0 = server.inferences(MODEL)
        cpu0 = cpu_seconds(server.proc.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        line = child.stdout.readline()
        cpu1 = cpu_seconds(server.proc.pid)
        n1 = server.inferences(MODEL)
        if not line:
            child.wait()
            sys.exit(f"{key} client failed during the timed loop (exit {child.returncode})")
        r = json.loads(line)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    n = r["n"]
    return {"key": key, "api": api, "protocol": protocol, "n": n, "counted": n1 - n0,
            "rps": n / r["wall_s"], "server_cpu_s": cpu1 - cpu0,
            "server_us": (cpu1 - cpu0) / n * 1e6, "client_us": r["cpu_s"] / n * 1e6, "wall_s": r["wall_s"]}


def versions(python, code):
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or "?"


def main():
    os.makedirs(OUT, exist_ok=True)
    repo = tempfile.mkdtemp(prefix="trtis-v1-")
    os.makedirs(os.path.join(repo, MODEL, "1"))
    open(os.path.join(repo, MODEL, "1", ".keep"), "w").close()
    open(os.path.join(repo, MODEL, "config.pbtxt"), "w").write(CONFIG)

    server = Server(repo, PORT)
    results = []
    try:
        for i, order in enumerate(ROUNDS, 1):
            for key in order:
                r = measure(server, key)
                r["round"] = i
                results.append(r)
                print(f"round {i} {key}: {r['rps']:.0f} req/s, server {r['server_us']:.1f} µs/inf, "
                      f"client {r['client_us']:.1f} µs/req ({r['n']} requests, server counted {r['counted']})",
                      flush=True)
    finally:
        server.stop()
    import shutil
    shutil.rmtree(repo)

    lines = ["# v1 API vs KServe v2 benchmark", "",
             f"{os.cpu_count()} CPUs. One trtis serve, identity_fp32 (built-in identity backend, FP32 [16]), "
             f"batch 1, one client process, one connection, sequential unary requests, ~{SECONDS:g} s each "
             "after a 0.5 s warm-up; two rounds in different orders.", "",
             "| round | API | protocol | requests | req/s | server CPU µs/inf | client CPU µs/req |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['round']} | {r['api']} | {r['protocol']} | {r['n']} | {r['rps']:.0f} | "
                     f"{r['server_us']:.1f} | {r['client_us']:.1f} |")
    ratios = []
    for protocol in ("HTTP", "gRPC"):
        agg = {}
        for api in ("v1", "v2"):
            rs = [r for r in results if r["api"] == api and r["protocol"] == protocol]
            n = sum(r["n"] for r in rs)
            agg[api] = {"server_us": sum(r["server_cpu_s"] for r in rs) / n * 1e6,
                        "rps": n / sum(r["wall_s"] for r in rs),
                        "client_us": sum(r["client_us"] * r["n"] for r in rs) / n}
        per_round = [
            next(r for r in results if r["round"] == i and r["api"] == "v1" and r["protocol"] == protocol)["server_us"]
            / next(r for r in results if r["round"] == i and r["api"] == "v2" and r["protocol"] == protocol)[
                "server_us"]
            for i in range(1, len(ROUNDS) + 1)]
        ratios.append(f"{protocol}: server CPU/inf {agg['v1']['server_us'] / agg['v2']['server_us']:.2f} "
                      f"(rounds {', '.join(f'{x:.2f}' for x in per_round)}), "
                      f"req/s {agg['v1']['rps'] / agg['v2']['rps']:.2f}, "
                      f"client CPU/req {agg['v1']['client_us'] / agg['v2']['client_us']:.2f}")
    lines += ["", "v1/v2 (both rounds together; CPU below 1 = v1 cheaper, req/s above 1 = v1 faster): "
              + "; ".join(ratios) + "."]
    mismatched = [r for r in results if r["counted"] != r["n"]]
    if mismatched:
        lines += ["", "Warning: the server's statistics counted a different number of inferences than the client "
                  "sent in: " + ", ".join(f"round {r['round']} {r['key']} ({r['counted']} vs {r['n']})"
                                          for r in mismatched) + "."]
    probe = ("import google.protobuf as p, grpc\n"
             "from google.protobuf.internal import api_implementation as a\n"
             "print(f'protobuf {p.__version__} ({a.Type()}), grpcio {grpc.__version__}')")
    v1_versions, v2_versions = versions(V1_PYTHON, probe), versions(V2_PYTHON, probe)
    lines += ["", "Measured: each client is a child process (v1: .venv-v1's python with the tensorrtserver==1.11.0 "
              f"wheel's generated modules, {v1_versions}; v2: .venv's python with tritonclient's service_pb2, "
              f"{v2_versions}) that checks one answer, warms up, then sends the timed requests, "
              "each built once and reused (HTTP: http.client keep-alive, v1 NV-InferRequest + 64 raw bytes, v2 "
              "JSON header + 64 raw bytes with binary_data_output; gRPC: v1 GRPCService/Infer with raw_input via "
              "the wheel's stub, v2 ModelInfer with raw_input_contents via a generic unary_unary). Server CPU is "
              "the trtis process's utime+stime from /proc/<pid>/stat over the timed loop only, divided by the "
              "requests sent (checked against the inferences the server's statistics counted); client CPU is "
              "the child's own process time over the loop."]
    if "(python)" in v1_versions and "(python)" not in v2_versions:
        lines += ["", "Note: the v1 client's protobuf 3 runs as pure Python here (no compiled module for this "
                  "interpreter), v2's does not: the v1 gRPC client spends more CPU per request on its own messages, "
                  "and where client and server share the CPUs its req/s is partly client-bound. Server CPU per "
                  "inference is the comparison of the two APIs."]
    lines.append("")
    report = "\n".join(lines)
    open(os.path.join(OUT, "v1-bench.md"), "w").write(report)
    print(report)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--client":
        client_main(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        main()
