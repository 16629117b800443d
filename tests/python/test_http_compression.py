"""HTTP compression against a real `trtis serve`, as Triton's HTTP server
has it: request bodies with `Content-Encoding: gzip|deflate` are
decompressed (tritonclient's `request_compression_algorithm`), inference
responses are compressed as `Accept-Encoding` asks
(`response_compression_algorithm`), and decompression is bounded by
`--http-max-input-size`: a zip bomb gets a 400 naming the flag at once,
without the server allocating what the bomb claims.

`Inference-Header-Content-Length` counts bytes of the decompressed body
(tritonclient computes it before compressing), and in a compressed response
it counts bytes of the decompressed response.

The server: `identity_fp32` only, `--http-max-input-size` 8 MiB.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import threading
import time
import zlib

import numpy as np
import pytest
import tritonclient.http as httpclient

from trtis_harness import assert_error, binary_body, running_server

LIMIT = 8 * 1024 * 1024
INFER = "/v2/models/identity_fp32/infer"


@pytest.fixture(scope="module")
def server(tiny_repo):
    yield from running_server(
        tiny_repo, ["--http-max-input-size", str(LIMIT)], name="compression server"
    )


@pytest.fixture
def client(server):
    c = httpclient.InferenceServerClient(server.url, connection_timeout=10.0, network_timeout=30.0)
    yield c
    c.close()


def infer_doc(values: list[float]) -> dict:
    return {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, len(values)], "data": values}
        ]
    }


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@pytest.mark.parametrize("request_algorithm", [None, "gzip", "deflate"])
@pytest.mark.parametrize("response_algorithm", [None, "gzip", "deflate"])
@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient_compression(client, request_algorithm, response_algorithm, binary):
    data = np.arange(4096, dtype=np.float32).reshape(1, -1) / 7
    inp = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
    inp.set_data_from_numpy(data, binary_data=binary)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    result = client.infer(
        "identity_fp32",
        [inp],
        outputs=[out],
        request_compression_algorithm=request_algorithm,
        response_compression_algorithm=response_algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    response = result.get_response()
    assert response["model_name"] == "identity_fp32"


def test_gzip_json_body(server):
    body = gzip.compress(json.dumps(infer_doc([1.5, -2.0, 3.25])).encode())
    status, headers, data = server.request(
        "POST", INFER, body, {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    )
    assert status == 200, data
    assert "content-encoding" not in headers
    assert json.loads(data)["outputs"][0]["data"] == [1.5, -2.0, 3.25]


@pytest.mark.parametrize(
    "encoding,wbits", [("deflate", 15), ("deflate", -15), ("x-gzip", 31), ("GZIP", 31)]
)
def test_other_request_codings(server, encoding, wbits):
    """deflate is zlib-wrapped (HTTP's definition); raw deflate, x-gzip and
    any case are accepted too."""
    c = zlib.compressobj(6, zlib.DEFLATED, wbits)
    body = c.compress(json.dumps(infer_doc([4.0])).encode()) + c.flush()
    status, _, data = server.request("POST", INFER, body, {"Content-Encoding": encoding})
    assert status == 200, data
    assert json.loads(data)["outputs"][0]["data"] == [4.0]


def test_binary_body_split_counts_decompressed_bytes(server):
    values = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    header = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 3],
             "parameters": {"binary_data_size": values.nbytes}}
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    body, headers = binary_body(header, values.tobytes())
    headers["Content-Encoding"] = "gzip"
    headers["Accept-Encoding"] = "gzip"
    status, got, data = server.request("POST", INFER, gzip.compress(body), headers)
    assert status == 200, data
    assert got["content-encoding"] == "gzip"
    plain = gzip.decompress(data)
    json_len = int(got["inference-header-content-length"])
    head = json.loads(plain[:json_len])
    assert head["outputs"][0]["parameters"]["binary_data_size"] == values.nbytes
    assert np.frombuffer(plain[json_len:], dtype=np.float32).tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    "accept,expected",
    [
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("deflate, gzip", "gzip"),
        ("gzip;q=0.2, deflate;q=0.8", "deflate"),
        ("gzip;q=0", None),
        ("br", None),
        ("identity", None),
        ("*", "gzip"),
    ],
)
def test_response_follows_accept_encoding(server, accept, expected):
    doc = infer_doc([float(i) for i in range(100)])
    status, headers, data = server.post_json(INFER, doc, {"Accept-Encoding": accept})
    assert status == 200, data
    assert headers.get("content-encoding") == expected
    assert int(headers["content-length"]) == len(data)
    if expected == "gzip":
        data = gzip.decompress(data)
    elif expected == "deflate":
        data = zlib.decompress(data)
    assert json.loads(data)["outputs"][0]["data"] == doc["inputs"][0]["data"]


def test_compressed_body_on_another_endpoint(server):
    status, _, data = server.request(
        "POST", "/v2/repository/index", gzip.compress(b'{"ready": true}'),
        {"Content-Encoding": "gzip"},
    )
    assert status == 200, data
    assert any(m["name"] == "identity_fp32" for m in json.loads(data))


def test_unknown_coding_is_415(server):
    body = json.dumps(infer_doc([1.0])).encode()
    response = server.request("POST", INFER, body, {"Content-Encoding": "br"})
    assert_error(response, 415, "Unsupported Content-Encoding", "br")
    assert response[1]["accept-encoding"] == "gzip, deflate"
    response = server.request("POST", INFER, body, {"Content-Encoding": "gzip, deflate"})
    assert_error(response, 415, "Unsupported Content-Encoding")
    response = server.request("POST", "/v2/repository/index", b"{}", {"Content-Encoding": "zstd"})
    assert_error(response, 415, "zstd")


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_corrupt_and_truncated_bodies_are_400(server, encoding):
    plain = json.dumps(infer_doc([1.0] * 1000)).encode()
    packed = gzip.compress(plain) if encoding == "gzip" else zlib.compress(plain)
    for body, fragment in [
        (b"this is not compressed at all", "failed to decompress"),
        (packed[: len(packed) // 2], "ends early"),
        (packed[:20] + bytes(b ^ 0x5A for b in packed[20:40]) + packed[40:], "failed to decompress"),
        (packed + b"junk", "failed to decompress"),
        (b"", "ends early"),
    ]:
        response = server.request("POST", INFER, body, {"Content-Encoding": encoding})
        assert_error(response, 400, fragment)
    # A gzip CRC mismatch.
    bad = bytearray(gzip.compress(plain))
    bad[-8] ^= 0xFF
    response = server.request("POST", INFER, bytes(bad), {"Content-Encoding": "gzip"})
    assert_error(response, 400, "CRC")


def gzip_bomb(size_log2: int = 30) -> bytes:
    """A valid gzip of 2**size_log2 zero bytes (1 GiB: about 1 MB), built
    without ever holding the zeros: after a full flush every 1 MiB of
    zeros compresses to the same bytes."""
    chunk = bytes(1 << 20)
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    rest = c.compress(chunk) + c.flush(zlib.Z_FULL_FLUSH)
    n = 1 << (size_log2 - 20)
    crc = 0
    for _ in range(n):
        crc = zlib.crc32(chunk, crc)
    # The final empty block, CRC-32 and size.
    return first + rest * (n - 1) + b"\x03\x00" + struct.pack("<II", crc, (n << 20) & 0xFFFFFFFF)


def raw_exchange(server, head: bytes, body: bytes, timeout: float = 20.0) -> tuple[int, dict, bytes]:
    """Sends a request while reading its answer (the server may answer and
    close before the whole body is sent); the status, headers, body."""
    sock = socket.create_connection((server.host, server.port), timeout=timeout)

    def send():
        try:
            sock.sendall(head + body)
        except OSError:
            pass  # answered and closed early: fine

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed before an answer: {data!r}"
            data += chunk
        head_bytes, rest = data.split(b"\r\n\r\n", 1)
        lines = head_bytes.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            chunk = sock.recv(65536)
            assert chunk, "connection closed in the answer's body"
            rest += chunk
        return status, headers, rest[:length]
    finally:
        sock.close()
        sender.join(timeout=timeout)


def test_zip_bomb_is_refused_quickly_without_allocating_its_claim(server):
    bomb = gzip_bomb()
    assert len(bomb) < 2 * 1024 * 1024
    pid = server.proc.pid
    try:
        # Reset the peak (VmHWM) to the current RSS.
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    before = rss_kb(pid)
    head = (
        f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n\r\n"
    ).encode()
    start = time.monotonic()
    status, headers, body = raw_exchange(server, head, bomb)
    took = time.monotonic() - start
    assert_error((status, headers, body), 400, "Use --http-max-input-size to increase the limit.")
    assert took < 10, f"the refusal took {took:.1f} s"
    peak = rss_kb(pid, "VmHWM")
    # The bomb claims 1 GiB; the server may hold up to the limit (8 MiB) of
    # it, and its buffers' growth.
    assert peak - before < 128 * 1024, f"RSS {before} kB before, peak {peak} kB"
    # The server is fine afterwards.
    status, _, data = server.post_json(INFER, infer_doc([1.0]))
    assert status == 200, data


def test_compressed_body_over_the_limit_is_400(server):
    # Just over the limit once decompressed (the compressed body is small).
    doc = infer_doc([0.0] * (LIMIT // 4))
    plain = json.dumps(doc).encode()
    assert len(plain) > LIMIT
    packed = gzip.compress(plain, compresslevel=1)
    assert len(packed) < LIMIT
    head = (
        f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
        f"Content-Length: {len(packed)}\r\n\r\n"
    ).encode()
    response = raw_exchange(server, head, packed)
    msg = assert_error(response, 400, "Use --http-max-input-size to increase the limit.")
    assert str(LIMIT) in msg


def test_curl_sends_a_gzip_body_and_takes_a_compressed_answer(server, tmp_path):
    # curl as a user would: a gzipped JSON body, and --compressed (which
    # sends Accept-Encoding and decodes the answer).
    import shutil
    import subprocess

    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("no curl on this machine")
    body = tmp_path / "request.json.gz"
    body.write_bytes(gzip.compress(json.dumps(infer_doc([1.5, 2.5, 3.5])).encode()))
    done = subprocess.run(
        [curl, "-sS", "--compressed", "-D", "-", "-H", "Content-Type: application/json",
         "-H", "Content-Encoding: gzip", "--data-binary", f"@{body}", f"http://{server.url}{INFER}"],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 0, done.stderr
    # text=True reads the \r\n line ends as \n.
    head, _, text = done.stdout.partition("\n\n")
    assert " 200 " in head.splitlines()[0], done.stdout
    assert "content-encoding: gzip" in head.lower() or "content-encoding: deflate" in head.lower(), head
    answer = json.loads(text)
    assert answer["outputs"][0]["data"] == [1.5, 2.5, 3.5]
