"""Several model repositories served together (Triton's repeated
`--model-repository`, here `--model-store`): the models of each load and the
index lists them all; a model name in two repositories is an error for that
model (the server exits at start, as with any failed model, or with
--exit-on-error=false serves the rest and reports it UNAVAILABLE with the
reason).
"""

from __future__ import annotations

import shutil
import subprocess

import tritonclient.http as httpclient

from trtis_harness import EXAMPLES, TrtisServer, start_or_fail, stop_and_check, trtis_bin


def _repos(tmp_path, a_models, b_models):
    a, b = tmp_path / "a", tmp_path / "b"
    for root, models in ((a, a_models), (b, b_models)):
        root.mkdir()
        for m in models:
            shutil.copytree(EXAMPLES / m, root / m)
    return a, b


def test_two_repositories_are_served_together(tmp_path):
    a, b = _repos(tmp_path, ["simple"], ["simple_identity"])
    server = start_or_fail(TrtisServer(a, ["--model-store", str(b)]))
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
        assert client.is_model_ready("simple")
        assert client.is_model_ready("simple_identity")
        names = sorted(m["name"] for m in client.get_model_repository_index())
        assert names == ["simple", "simple_identity"]
    finally:
        stop_and_check(server)


def test_a_model_in_two_repositories_is_an_error(tmp_path):
    a, b = _repos(tmp_path, ["simple", "simple_identity"], ["simple"])
    out = subprocess.run(
        [str(trtis_bin()), "serve", "--model-store", str(a), "--model-store", str(b),
         "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 1, out.stderr
    assert "in more than one model repository" in out.stderr + out.stdout

    server = start_or_fail(TrtisServer(a, ["--model-store", str(b), "--exit-on-error=false",
                                           "--strict-readiness=false"]))
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
        assert client.is_model_ready("simple_identity")
        assert not client.is_model_ready("simple")
        entry = next(m for m in client.get_model_repository_index() if m["name"] == "simple")
        assert entry["state"] == "UNAVAILABLE"
        assert "in more than one model repository" in entry["reason"]
    finally:
        stop_and_check(server)
