"""Hostile input to the `trtis` command-line tools (issue 56, "nothing
grows without bound"): each must end in bounded time with a clear message
and a usage (2) or failure (1) exit, never hang, die of a signal or panic.

- `trtis infer` sending a body over the server's `--http-max-input-size`:
  the server answers 413 and closes while the client is still writing; the
  client reports it (no silent exit 141 of SIGPIPE).
- `trtis perf --shape` too large to generate, `--percentile` outside 1..99.
- FIFOs where files are expected: `validate-config` and `serve` on a
  repository whose `config.pbtxt` is one, `gen-config fifo.onnx`,
  `infer --input-data FIFO` and `--input NAME=FIFO`: refused as "not a
  regular file" (the server still starts, without that model).
- `.npy` headers whose shape is negative, overflows or disagrees with the
  data.

Servers listen on 127.0.0.1 only; every command runs under a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
from pathlib import Path

import pytest

from trtis_harness import build_tiny_repository, running_server, trtis_bin

LIMIT = 1 << 20  # --http-max-input-size of the server under test
TIMEOUT_S = 30  # no command may take longer than this


def trtis(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Runs `trtis ARGS`; a hang fails the test (TimeoutExpired)."""
    return subprocess.run(
        [str(trtis_bin()), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=cwd,
    )


def assert_clean_failure(result: subprocess.CompletedProcess, code: int, *words: str) -> None:
    """Exit `code` (not a signal), an `error:` line with `words`, no panic."""
    where = f"exit {result.returncode}\nstdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-2000:]}"
    assert result.returncode == code, where
    assert "panicked" not in result.stderr, where
    assert "error:" in result.stderr, where
    for word in words:
        assert word in result.stderr, where


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = build_tiny_repository(tmp_path_factory.mktemp("cli") / "repo")
    yield from running_server(repo, ["--http-max-input-size", str(LIMIT)], name="cli")


def url(server) -> str:
    return f"127.0.0.1:{server.port}"


# ---------------------------------------------------------------------------
# A body over the server's limit: reported, not a silent SIGPIPE
# ---------------------------------------------------------------------------


def test_infer_body_over_the_limit_is_reported(server, tmp_path):
    # 16 MiB of FP32 (16x the limit): far more than the socket buffers
    # take, so the client is still writing when the server closes.
    n = 4 << 20
    data = tmp_path / "big.json"
    data.write_text(json.dumps({"data": [{"INPUT0": {"content": [0] * n, "shape": [n]}}]}))
    for _ in range(3):
        result = trtis("infer", "-u", url(server), "-m", "identity_fp32", "--input-data", str(data))
        assert result.returncode not in (-signal.SIGPIPE, 128 + signal.SIGPIPE), (
            f"trtis infer died of SIGPIPE\nstderr: {result.stderr[-2000:]}"
        )
        assert result.returncode > 0, result.stderr[-2000:]
        assert "panicked" not in result.stderr
        # The server's 413 when it was read in time, else the closed
        # connection named as the likely refusal.
        assert "exceeds the maximum allowed" in result.stderr or (
            "closed the connection before the request was sent" in result.stderr
        ), result.stderr[-2000:]
    assert server.alive()


def test_infer_output_into_a_closed_pipe_ends_quietly(server, tmp_path):
    """SIGPIPE still ends a command whose stdout reader has gone (`| head`),
    without a panic message."""
    data = tmp_path / "small.json"
    data.write_text(json.dumps({"data": [{"INPUT0": {"content": [0.5] * 4096, "shape": [4096]}}]}))
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run(
            [str(trtis_bin()), "infer", "-u", url(server), "-m", "identity_fp32", "--json",
             "--input-data", str(data)],
            stdin=subprocess.DEVNULL,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT_S,
        )
    finally:
        os.close(write)
    assert result.returncode == -signal.SIGPIPE, result.stderr[-2000:]
    assert "panicked" not in result.stderr


# ---------------------------------------------------------------------------
# perf: bounds on --shape and --percentile
# ---------------------------------------------------------------------------


def test_perf_refuses_a_shape_too_large_to_generate(server):
    for dims in ("99999999999", "4294967296,4294967296", "-4"):
        result = trtis("perf", "-u", url(server), "-m", "identity_fp32", "--shape", f"INPUT0:{dims}",
                       "-p", "200")
        assert_clean_failure(result, 2, "INPUT0")


@pytest.mark.parametrize("percentile", ["200", "0", "100", "-5", "nan"])
def test_perf_refuses_a_percentile_outside_1_to_99(server, percentile):
    result = trtis("perf", "-u", url(server), "-m", "identity_fp32", "--shape", "INPUT0:4",
                   f"--percentile={percentile}", "-p", "200")
    assert_clean_failure(result, 2, "--percentile must be between 1 and 99")


# ---------------------------------------------------------------------------
# FIFOs where files are expected
# ---------------------------------------------------------------------------


def fifo_repository(root: Path) -> Path:
    """`identity_fp32`, and `bad` whose config.pbtxt is a FIFO."""
    repo = build_tiny_repository(root / "repo")
    (repo / "bad" / "1").mkdir(parents=True)
    (repo / "bad" / "1" / "model.onnx").write_bytes(b"")
    os.mkfifo(repo / "bad" / "config.pbtxt")
    return repo


def test_validate_config_refuses_a_fifo_config(tmp_path):
    repo = fifo_repository(tmp_path)
    result = trtis("validate-config", str(repo))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "config.pbtxt is not a regular file" in result.stdout, result.stdout


def test_validate_config_refuses_a_fifo_model_file(tmp_path):
    repo = build_tiny_repository(tmp_path / "repo")
    model = repo / "m"
    (model / "1").mkdir(parents=True)
    os.mkfifo(model / "1" / "model.onnx")
    (model / "config.pbtxt").write_text(
        'name: "m"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    result = trtis("validate-config", str(repo))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "model.onnx is not a regular file" in result.stdout, result.stdout


def test_serve_starts_without_the_model_whose_config_is_a_fifo(tmp_path):
    repo = fifo_repository(tmp_path)
    # Not strict: ready with a model that failed, so the harness sees it start.
    args = ["--exit-on-error=false", "--strict-readiness=false"]
    for server in running_server(repo, args, name="fifo"):
        status, _, _ = server.request("GET", "/v2/health/live")
        assert status == 200
        status, _, _ = server.request("GET", "/v2/models/identity_fp32/ready")
        assert status == 200
        status, _, _ = server.request("GET", "/v2/models/bad/ready")
        assert status != 200
        assert any("is not a regular file" in line for line in server.log_lines()), server.log_tail()


def test_gen_config_refuses_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo.onnx")
    os.symlink(tmp_path / "fifo.onnx", tmp_path / "link.onnx")
    for name in ("fifo.onnx", "link.onnx"):
        result = trtis("gen-config", str(tmp_path / name))
        assert_clean_failure(result, 1, "is not a regular file")


def test_infer_refuses_fifo_inputs(server, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result = trtis("infer", "-u", url(server), "-m", "identity_fp32", "--input-data", str(fifo))
    assert_clean_failure(result, 2, "is not a regular file")
    result = trtis("infer", "-u", url(server), "-m", "identity_fp32", "--input", f"INPUT0={fifo}")
    assert_clean_failure(result, 2, "is not a regular file")
    result = trtis("perf", "-u", url(server), "-m", "identity_fp32", "--input-data", str(fifo))
    assert_clean_failure(result, 2, "is not a regular file")


# ---------------------------------------------------------------------------
# .npy headers
# ---------------------------------------------------------------------------


def npy_with_shape(path: Path, shape: str, data: bytes) -> Path:
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}\n".encode()
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + data)
    return path


@pytest.mark.parametrize(
    "shape",
    ["(4294967296, 4294967296)", "(-1, 16)", "(9223372036854775807, 2)", "(1, 17)", "(1, 15)"],
)
def test_infer_refuses_a_npy_whose_shape_does_not_fit(server, tmp_path, shape):
    npy = npy_with_shape(tmp_path / "a.npy", shape, b"\0" * 64)
    result = trtis("infer", "-u", url(server), "-m", "identity_fp32", "--input", f"INPUT0={npy}")
    assert_clean_failure(result, 2, "a.npy")
