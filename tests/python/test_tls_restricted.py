"""TLS and Triton's restricted APIs, with tritonclient's own TLS and header
options against a real `trtis serve`.

- HTTPS (`--http-use-ssl`, our equivalent of Triton's gRPC flags) and gRPC
  over TLS (`--grpc-use-ssl`, Triton's flags): tritonclient.http with
  `ssl=True` and a CA file, tritonclient.grpc with `ssl=True` and root
  certificates, both inferring; a plain-text client on a TLS port fails; a
  client that trusts another CA fails.
- Mutual TLS (`--*-use-ssl-mutual`, `--*-root-cert`): a client with a
  certificate from the trusted CA works, one without a certificate is refused.
- Restricted APIs (`--http-restricted-api`, `--grpc-restricted-protocol`,
  `<apis>:<key>=<value>`): a restricted group answers HTTP 403 / gRPC
  UNAVAILABLE with Triton's message without the header (or with a wrong
  value), and works with it; other groups are untouched; the v1 routes and
  methods are restricted by the same groups.
- Start-up refusals: TLS without a certificate, an unreadable or invalid
  certificate, an unknown API group, a group restricted twice.

Certificates are made for the test with the `openssl` command line.
"""

from __future__ import annotations

import http.client
import shutil
import ssl
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import EXAMPLES, TrtisServer, start_or_fail, stop_and_check, trtis_bin


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_ca(dir: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
        "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}", cwd=dir,
    )


def _make_cert(dir: Path, name: str, ca: str, ext: str) -> None:
    (dir / f"{name}.ext").write_text(ext + "\n")
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
        f"{name}.csr", "-subj", f"/CN={name}", cwd=dir,
    )
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
        cwd=dir,
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command line is needed to make test certificates")
    dir = tmp_path_factory.mktemp("certs")
    _make_ca(dir, "ca")
    _make_ca(dir, "other_ca")
    # Named localhost only: 127.0.0.1 is a name the certificate does not carry.
    _make_cert(dir, "server", "ca", "subjectAltName=DNS:localhost")
    _make_cert(dir, "client", "ca", "extendedKeyUsage=clientAuth")
    return dir


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("tls_repo")
    shutil.copytree(EXAMPLES / "simple", repo / "simple")
    return repo


class TlsServer(TrtisServer):
    """A server whose HTTP port speaks HTTPS: readiness is asked over TLS."""

    def __init__(self, repo, args, certs: Path, client_cert: bool = False):
        super().__init__(repo, args, name="tls-server")
        self.context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        if client_cert:
            self.context.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))

    def is_ready(self, timeout: float = 5.0) -> bool:
        try:
            conn = http.client.HTTPSConnection(
                "localhost", self.port, timeout=timeout, context=self.context
            )
            conn.request("GET", "/v2/health/ready")
            return conn.getresponse().status == 200
        except (OSError, ssl.SSLError):
            return False


def _tls_args(certs: Path, mutual: bool) -> list[str]:
    args = []
    for proto in ("http", "grpc"):
        args += [
            f"--{proto}-use-ssl-mutual" if mutual else f"--{proto}-use-ssl",
            f"--{proto}-server-cert", str(certs / "server.crt"),
            f"--{proto}-server-key", str(certs / "server.key"),
        ]
        if mutual:
            args += [f"--{proto}-root-cert", str(certs / "ca.crt")]
    return args


def _inputs(module):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a + b


@pytest.fixture(scope="module")
def tls_server(repo, certs):
    server = start_or_fail(TlsServer(repo, _tls_args(certs, mutual=False), certs))
    yield server
    stop_and_check(server)


@pytest.fixture(scope="module")
def mutual_server(repo, certs):
    server = start_or_fail(TlsServer(repo, _tls_args(certs, mutual=True), certs, client_cert=True))
    yield server
    stop_and_check(server)


def test_https_inference_with_tritonclient(tls_server, certs):
    client = httpclient.InferenceServerClient(
        f"localhost:{tls_server.port}", ssl=True, ssl_options={"ca_certs": str(certs / "ca.crt")}
    )
    assert client.is_server_ready()
    inputs, expected = _inputs(httpclient)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)


def test_grpc_tls_inference_with_tritonclient(tls_server, certs):
    client = grpcclient.InferenceServerClient(
        f"localhost:{tls_server.grpc_port}", ssl=True,
        root_certificates=str(certs / "ca.crt"),
    )
    assert client.is_server_ready()
    inputs, expected = _inputs(grpcclient)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)


def test_plain_text_client_on_a_tls_port_fails(tls_server):
    conn = http.client.HTTPConnection("127.0.0.1", tls_server.port, timeout=5)
    with pytest.raises((OSError, http.client.HTTPException)):
        conn.request("GET", "/v2/health/ready")
        status = conn.getresponse().status
        assert status != 200  # a TLS server never answers plain HTTP 200
        raise OSError("answered plain HTTP")
    grpc_plain = grpcclient.InferenceServerClient(f"127.0.0.1:{tls_server.grpc_port}")
    with pytest.raises(InferenceServerException):
        grpc_plain.is_server_live(client_timeout=5)


def test_a_client_trusting_another_ca_fails(tls_server, certs):
    context = ssl.create_default_context(cafile=str(certs / "other_ca.crt"))
    conn = http.client.HTTPSConnection("localhost", tls_server.port, timeout=5, context=context)
    with pytest.raises(ssl.SSLError):
        conn.request("GET", "/v2/health/ready")
    client = grpcclient.InferenceServerClient(
        f"localhost:{tls_server.grpc_port}", ssl=True,
        root_certificates=str(certs / "other_ca.crt"),
    )
    with pytest.raises(InferenceServerException):
        client.is_server_live(client_timeout=5)


def test_mutual_tls_needs_a_client_certificate(mutual_server, certs):
    ca, crt, key = (str(certs / n) for n in ("ca.crt", "client.crt", "client.key"))
    client = httpclient.InferenceServerClient(
        f"localhost:{mutual_server.port}", ssl=True,
        ssl_options={"ca_certs": ca, "certfile": crt, "keyfile": key},
    )
    inputs, expected = _inputs(httpclient)
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), expected)
    grpc_ok = grpcclient.InferenceServerClient(
        f"localhost:{mutual_server.grpc_port}", ssl=True,
        root_certificates=ca, private_key=key, certificate_chain=crt,
    )
    inputs, expected = _inputs(grpcclient)
    np.testing.assert_array_equal(grpc_ok.infer("simple", inputs).as_numpy("OUTPUT0"), expected)

    # Without a client certificate: the handshake is refused.
    context = ssl.create_default_context(cafile=ca)
    conn = http.client.HTTPSConnection("localhost", mutual_server.port, timeout=5, context=context)
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        conn.request("GET", "/v2/health/ready")
        conn.getresponse()
    grpc_no_cert = grpcclient.InferenceServerClient(
        f"localhost:{mutual_server.grpc_port}", ssl=True, root_certificates=ca
    )
    with pytest.raises(InferenceServerException):
        grpc_no_cert.is_server_live(client_timeout=5)


RESTRICTED = [
    "--http-restricted-api", "model-repository,statistics:admin-key=admin-value",
    "--http-restricted-api", "inference:infer-key=infer-value",
    "--grpc-restricted-protocol", "model-repository,statistics:admin-key=admin-value",
    "--grpc-restricted-protocol", "inference:infer-key=infer-value",
]


@pytest.fixture(scope="module")
def restricted_server(repo):
    server = start_or_fail(TrtisServer(repo, RESTRICTED, name="restricted"))
    yield server
    stop_and_check(server)


def test_http_restricted_api(restricted_server):
    url = f"127.0.0.1:{restricted_server.port}"
    client = httpclient.InferenceServerClient(url)
    # Unrestricted groups answer as ever.
    assert client.is_server_ready()
    assert client.get_model_metadata("simple")["name"] == "simple"
    inputs, expected = _inputs(httpclient)
    for call in (
        lambda h: client.get_inference_statistics("simple", headers=h),
        lambda h: client.get_model_repository_index(headers=h),
    ):
        with pytest.raises(InferenceServerException) as e:
            call(None)
        assert "This API is restricted, expecting header 'admin-key'" in str(e.value)
        with pytest.raises(InferenceServerException):
            call({"admin-key": "wrong"})
        call({"admin-key": "admin-value"})
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", inputs, headers={"admin-key": "admin-value"})
    assert "expecting header 'infer-key'" in str(e.value)
    result = client.infer("simple", inputs, headers={"infer-key": "infer-value"})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)
    # The status code is Triton's 403.
    status, _, body = restricted_server.request("POST", "/v2/repository/index")
    assert status == 403, body
    # The v1 routes belong to the same groups.
    status, _, _ = restricted_server.request("POST", "/api/infer/simple")
    assert status == 403
    status, _, _ = restricted_server.request("GET", "/api/status")
    assert status == 403
    status, _, _ = restricted_server.request("GET", "/api/health/ready")
    assert status == 200


def test_grpc_restricted_protocol(restricted_server):
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{restricted_server.grpc_port}")
    assert client.is_server_ready()
    inputs, expected = _inputs(grpcclient)
    with pytest.raises(InferenceServerException) as e:
        client.get_model_repository_index()
    assert "StatusCode.UNAVAILABLE" in str(e.value)
    assert "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'" in str(e.value)
    index = client.get_model_repository_index(
        headers={"triton-grpc-protocol-admin-key": "admin-value"}, as_json=True
    )
    assert [m["name"] for m in index["models"]] == ["simple"]
    with pytest.raises(InferenceServerException) as e:
        client.infer("simple", inputs)
    assert "triton-grpc-protocol-infer-key" in str(e.value)
    result = client.infer("simple", inputs, headers={"triton-grpc-protocol-infer-key": "infer-value"})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--grpc-use-ssl"], "--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key"),
        (["--http-use-ssl-mutual", "--http-server-cert", "{c}/server.crt", "--http-server-key",
          "{c}/server.key"], "--http-use-ssl-mutual needs --http-root-cert"),
        (["--http-server-cert", "{c}/server.crt"], "TLS is off"),
        (["--http-use-ssl", "--http-server-cert", "{c}/missing.crt", "--http-server-key",
          "{c}/server.key"], "failed to read the server certificate"),
        (["--grpc-use-ssl", "--grpc-server-cert", "{c}/server.key", "--grpc-server-key",
          "{c}/server.key"], "invalid server certificate"),
        (["--http-restricted-api", "bogus:k=v"], "unknown restricted api 'bogus'"),
        (["--grpc-restricted-protocol", "health:a=1", "--grpc-restricted-protocol", "health:b=2"],
         "restricted protocol 'health' can not be specified in multiple config groups"),
    ],
)
def test_start_up_refusals(repo, certs, args, message):
    args = [a.replace("{c}", str(certs)) for a in args]
    out = subprocess.run(
        [str(trtis_bin()), "serve", "--model-store", str(repo), "--http-port", "0",
         "--grpc-port", "0", "--metrics-port", "0", *args],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert message in out.stderr + out.stdout


def _trtis(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(trtis_bin()), *args], capture_output=True, text=True, timeout=120)


def test_our_client_over_tls(tls_server, mutual_server, certs):
    """trtis status / infer / perf with perf_analyzer's TLS flags."""
    ca, crt, key = (str(certs / n) for n in ("ca.crt", "client.crt", "client.key"))
    out = _trtis("status", "-u", f"localhost:{tls_server.port}", "--ssl-https-ca-certificates-file", ca)
    assert out.returncode == 0, out.stderr
    assert "live, ready" in out.stdout
    out = _trtis(
        "infer", "-m", "simple", "-i", "grpc", "-u", f"localhost:{tls_server.grpc_port}",
        "--ssl-grpc-use-ssl", "--ssl-grpc-root-certifications-file", ca, "--data", "zero", "--json",
    )
    assert out.returncode == 0, out.stderr
    # Without the CA the server's certificate is not trusted.
    out = _trtis("status", "-u", f"https://localhost:{tls_server.port}")
    assert out.returncode != 0
    # --ssl-https-verify-peer 0 accepts it anyway; verify-host 0 accepts
    # a name the certificate does not carry (127.0.0.1 is not in it).
    out = _trtis("status", "-u", f"localhost:{tls_server.port}", "--ssl-https-verify-peer", "0")
    assert out.returncode == 0, out.stderr
    out = _trtis(
        "status", "-u", f"127.0.0.1:{tls_server.port}", "--ssl-https-ca-certificates-file", ca,
    )
    assert out.returncode != 0, "a name the certificate lacks must fail with host checks on"
    out = _trtis(
        "status", "-u", f"127.0.0.1:{tls_server.port}", "--ssl-https-ca-certificates-file", ca,
        "--ssl-https-verify-host", "0",
    )
    assert out.returncode == 0, out.stderr
    # Mutual TLS: with the client certificate, over both protocols.
    out = _trtis(
        "infer", "-m", "simple", "-u", f"localhost:{mutual_server.port}",
        "--ssl-https-ca-certificates-file", ca, "--ssl-https-client-certificate-file", crt,
        "--ssl-https-private-key-file", key, "--data", "zero", "--json",
    )
    assert out.returncode == 0, out.stderr
    out = _trtis(
        "perf", "-m", "simple", "-i", "grpc", "-u", f"localhost:{mutual_server.grpc_port}",
        "--ssl-grpc-use-ssl", "--ssl-grpc-root-certifications-file", ca,
        "--ssl-grpc-certificate-chain-file", crt, "--ssl-grpc-private-key-file", key,
        "-p", "300", "-r", "3", "-s", "100",
    )
    assert out.returncode == 0, out.stderr + out.stdout
    assert "Throughput" in out.stdout
    out = _trtis(
        "status", "-i", "grpc", "-u", f"localhost:{mutual_server.grpc_port}",
        "--ssl-grpc-use-ssl", "--ssl-grpc-root-certifications-file", ca,
    )
    assert out.returncode != 0, "mutual TLS without a client certificate must fail"


def test_our_client_flags_are_checked(tls_server):
    out = _trtis("perf", "-m", "simple", "-u", f"localhost:{tls_server.port}", "--ssl-grpc-use-ssl")
    assert out.returncode == 2
    assert "--ssl-grpc-* options are for -i grpc" in out.stderr
    out = _trtis("status", "-u", f"localhost:{tls_server.port}", "--ssl-https-private-key-type", "DER")
    assert out.returncode != 0
    assert "PEM files only" in out.stderr


def test_our_client_sends_headers(restricted_server):
    http = f"127.0.0.1:{restricted_server.port}"
    grpc = f"127.0.0.1:{restricted_server.grpc_port}"
    out = _trtis("infer", "-m", "simple", "-u", http, "--data", "zero")
    assert out.returncode == 1
    assert "expecting header 'infer-key'" in out.stderr
    out = _trtis("infer", "-m", "simple", "-u", http, "--data", "zero", "-H", "infer-key:infer-value")
    assert out.returncode == 0, out.stderr
    out = _trtis(
        "infer", "-m", "simple", "-i", "grpc", "-u", grpc, "--data", "zero",
        "-H", "triton-grpc-protocol-infer-key: infer-value",
    )
    assert out.returncode == 0, out.stderr
    out = _trtis(
        "perf", "-m", "simple", "-u", http, "-H", "infer-key:infer-value",
        "-H", "admin-key:admin-value", "-p", "300", "-r", "3", "-s", "100",
    )
    assert out.returncode == 0, out.stderr + out.stdout


def test_a_stalled_header_over_https_is_cut_at_the_bound(repo, certs):
    # The slowloris bound holds behind TLS too: a client that completes the
    # handshake, sends half a request header and stalls is closed after
    # --http-header-timeout-secs, while a whole request on another
    # connection is answered.
    import socket
    import time

    server = start_or_fail(
        TlsServer(repo, [*_tls_args(certs, mutual=False), "--http-header-timeout-secs", "1"], certs)
    )
    try:
        raw = socket.create_connection(("localhost", server.port), timeout=10)
        stalled = server.context.wrap_socket(raw, server_hostname="localhost")
        stalled.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: localhost\r\n")
        start = time.monotonic()
        assert server.is_ready()
        try:
            got = stalled.recv(1024)
        except (ConnectionResetError, ssl.SSLError):
            got = b""
        waited = time.monotonic() - start
        stalled.close()
        assert got == b"", got
        assert 0.5 < waited < 5.0, waited
    finally:
        stop_and_check(server)
