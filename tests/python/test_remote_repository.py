"""Model repositories in object storage: `trtis serve --model-store
s3://http://host:port/bucket/prefix` (Triton's custom-endpoint form) against
a real S3-compatible server, moto in server mode (PyPI), with tritonclient.

- The repository is mirrored at start and served: inference works.
- Poll mode sees the bucket change: a model uploaded later loads, a changed
  config reloads, a model whose objects are deleted unloads.
- `validate-config` reads the same URL (and reports a broken config in it).
- A missing bucket stops the server at start with the URL in the error.
- Azure Blob Storage (`as://account/container/prefix`) against Azurite (npm),
  through object_store's emulator settings: validate-config and serving.
  GCS (`gs://`) has no emulator in the registries that object_store can
  point at; its URL form is parsed and unit-tested only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

boto3 = pytest.importorskip("boto3")

import tritonclient.http as httpclient  # noqa: E402

from trtis_harness import (  # noqa: E402
    EXAMPLES,
    TrtisServer,
    free_port,
    start_or_fail,
    stop_and_check,
    trtis_bin,
    wait_for,
)

CREDS = {
    "AWS_ACCESS_KEY_ID": "trtis-test",
    "AWS_SECRET_ACCESS_KEY": "trtis-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}



@pytest.fixture(scope="module")
def moto():
    moto_server = Path(os.__file__).parents[3] / "bin" / "moto_server"
    exe = shutil.which("moto_server") or str(moto_server)
    port = free_port()
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, **{k.lower(): v for k, v in CREDS.items() if k != "AWS_DEFAULT_REGION"}, region_name="us-east-1")
    deadline = time.monotonic() + 30
    while True:
        try:
            client.list_buckets()
            break
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("moto_server did not start")
            time.sleep(0.2)
    yield endpoint, client
    proc.terminate()
    proc.wait(timeout=10)


def _upload(client, bucket: str, prefix: str, model_dir: Path, name: str | None = None) -> None:
    name = name or model_dir.name
    for path in model_dir.rglob("*"):
        if path.is_file():
            key = f"{prefix}/{name}/{path.relative_to(model_dir)}"
            client.upload_file(str(path), bucket, key)


def _delete(client, bucket: str, prefix: str) -> None:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    for obj in listed.get("Contents", []):
        client.delete_object(Bucket=bucket, Key=obj["Key"])


class RemoteServer(TrtisServer):
    """A server whose --model-store is a URL (the harness's repository is a
    scratch directory, the server's working directory)."""

    def __init__(self, url: str, args: list[str], workdir: Path):
        super().__init__(workdir / "unused", args, name="remote-server")
        self.store_url = url

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("--model-store") + 1] = self.store_url
        return cmd

    def start(self, timeout: float = 60.0):
        os.environ.update(CREDS)
        return super().start(timeout=timeout)


def _max_batch(client, name):
    try:
        return client.get_model_config(name).get("max_batch_size")
    except Exception:  # reloading: not there for a moment
        return None


def _simple_inputs():
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a + b


def test_serves_and_polls_an_s3_repository(moto, tmp_path):
    endpoint, s3 = moto
    s3.create_bucket(Bucket="models")
    _upload(s3, "models", "repo", EXAMPLES / "simple")
    url = f"s3://{endpoint}/models/repo"
    server = start_or_fail(
        RemoteServer(url, ["--model-control-mode", "poll", "--repository-poll-secs", "1"], tmp_path)
    )
    try:
        assert any("files fetched into" in line for line in server.log_lines()), server.log_tail()
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
        inputs, expected = _simple_inputs()
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), expected)

        # A model uploaded later is loaded by the next poll.
        _upload(s3, "models", "repo", EXAMPLES / "simple_identity")
        assert wait_for(lambda: client.is_model_ready("simple_identity"), timeout=30), server.log_tail()
        assert client.get_model_config("simple_identity")["max_batch_size"] == 8

        # A changed config is reloaded.
        config = (EXAMPLES / "simple_identity" / "config.pbtxt").read_text()
        assert "max_batch_size: 8" in config
        changed = tmp_path / "config.pbtxt"
        changed.write_text(config.replace("max_batch_size: 8", "max_batch_size: 4"))
        s3.upload_file(str(changed), "models", "repo/simple_identity/config.pbtxt")
        assert wait_for(
            lambda: _max_batch(client, "simple_identity") == 4,
            timeout=30,
        ), server.log_tail()

        # Deleting a model's objects unloads it.
        _delete(s3, "models", "repo/simple_identity/")
        assert wait_for(lambda: not client.is_model_ready("simple_identity"), timeout=30), server.log_tail()
        assert client.is_model_ready("simple")
    finally:
        stop_and_check(server)


def test_validate_config_reads_the_same_url(moto, tmp_path):
    endpoint, s3 = moto
    s3.create_bucket(Bucket="validate")
    _upload(s3, "validate", "r", EXAMPLES / "simple")
    env = {**os.environ, **CREDS}
    out = subprocess.run(
        [str(trtis_bin()), "validate-config", f"s3://{endpoint}/validate/r"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 model checked" in out.stdout
    broken = tmp_path / "config.pbtxt"
    broken.write_text('name: "broken"\nplatform: "onnxruntime_onnx"\nmax_batch_size: -3\n')
    s3.upload_file(str(broken), "validate", "r/broken/config.pbtxt")
    out = subprocess.run(
        [str(trtis_bin()), "validate-config", f"s3://{endpoint}/validate/r"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "broken" in out.stdout


def test_a_missing_bucket_stops_the_server(moto):
    endpoint, _ = moto
    url = f"s3://{endpoint}/no-such-bucket/repo"
    out = subprocess.run(
        [str(trtis_bin()), "serve", "--model-store", url, "--http-port", "0", "--grpc-port", "0",
         "--metrics-port", "0"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **CREDS},
    )
    assert out.returncode == 1, out.stderr
    assert url in out.stderr + out.stdout


# -- Azure Blob Storage: Azurite, the emulator (npm, scripts/setup.sh) --------

AZURITE = Path(__file__).resolve().parents[2] / ".npm-tools" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's well-known development account.
AZ_ACCOUNT = "devstoreaccount1"
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    if not AZURITE.exists():
        pytest.fail(f"Azurite is not installed at {AZURITE} (scripts/setup.sh installs it from npm)")
    from azure.storage.blob import BlobServiceClient

    port = free_port()
    data = tmp_path_factory.mktemp("azurite")
    proc = subprocess.Popen(
        [str(AZURITE), "--silent", "--disableTelemetry", "--skipApiVersionCheck", "--loose",
         "--location", str(data), "--blobHost", "127.0.0.1", "--blobPort", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    conn = (
        f"DefaultEndpointsProtocol=http;AccountName={AZ_ACCOUNT};AccountKey={AZ_KEY};"
        f"BlobEndpoint={url}/{AZ_ACCOUNT};"
    )
    service = BlobServiceClient.from_connection_string(conn)
    deadline = time.monotonic() + 30
    while True:
        try:
            list(service.list_containers())
            break
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("azurite did not start")
            time.sleep(0.2)
    yield url, service
    proc.terminate()
    proc.wait(timeout=10)


def test_serves_an_azure_repository(azurite, tmp_path):
    url, service = azurite
    container = service.create_container("models")
    for path in (EXAMPLES / "simple").rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                container.upload_blob(f"repo/simple/{path.relative_to(EXAMPLES / 'simple')}", f)
    env = {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": url}
    store = f"as://{AZ_ACCOUNT}/models/repo"
    out = subprocess.run(
        [str(trtis_bin()), "validate-config", store],
        capture_output=True, text=True, timeout=60, env={**os.environ, **env},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    os.environ.update(env)
    try:
        server = start_or_fail(RemoteServer(store, [], tmp_path))
        try:
            client = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
            inputs, expected = _simple_inputs()
            np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), expected)
        finally:
            stop_and_check(server)
    finally:
        for k in env:
            os.environ.pop(k, None)


def test_triton_credential_file_picks_the_longest_matching_entry(azurite, tmp_path):
    """TRITON_CLOUD_CREDENTIAL_PATH: the entry whose key is the longest
    prefix of the repository's URL gives the credentials (Azurite checks the
    account key: a wrong one is refused)."""
    url, service = azurite
    container = service.create_container("credmodels")
    for path in (EXAMPLES / "simple").rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                container.upload_blob(f"r/simple/{path.relative_to(EXAMPLES / 'simple')}", f)
    store = f"as://{AZ_ACCOUNT}/credmodels/r"
    wrong = {"account_str": AZ_ACCOUNT, "account_key": "d3Jvbmc="}
    right = {"account_str": AZ_ACCOUNT, "account_key": AZ_KEY}

    def validate(entries: dict) -> subprocess.CompletedProcess:
        creds = tmp_path / "creds.json"
        creds.write_text(json.dumps({"as": entries}))
        env = {**os.environ, "AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": url,
               "TRITON_CLOUD_CREDENTIAL_PATH": str(creds)}
        return subprocess.run([str(trtis_bin()), "validate-config", store],
                              capture_output=True, text=True, timeout=60, env=env)

    out = validate({"": wrong, f"as://{AZ_ACCOUNT}/credmodels": right})
    assert out.returncode == 0, out.stdout + out.stderr
    out = validate({"": right, f"as://{AZ_ACCOUNT}/credmodels": wrong})
    assert out.returncode == 2 and "403" in out.stderr, out.stdout + out.stderr
    out = validate({"": {"account_str": "someone-else", "account_key": AZ_KEY}})
    assert out.returncode == 2 and "account_str" in out.stderr, out.stderr


def test_explicit_load_fetches_from_the_store(moto, tmp_path):
    """In explicit mode a load request mirrors the store first, so a model
    uploaded after the server started loads."""
    endpoint, s3 = moto
    s3.create_bucket(Bucket="explicit")
    _upload(s3, "explicit", "repo", EXAMPLES / "simple")
    server = start_or_fail(
        RemoteServer(f"s3://{endpoint}/explicit/repo", ["--model-control-mode", "explicit"], tmp_path)
    )
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
        _upload(s3, "explicit", "repo", EXAMPLES / "simple_identity")
        client.load_model("simple_identity")
        assert client.is_model_ready("simple_identity")
        client.load_model("simple")
        assert client.is_model_ready("simple")
    finally:
        stop_and_check(server)


def test_folder_markers_and_a_mirror_left_by_an_earlier_run(moto):
    """Console-made "folder" objects (`simple/`, `simple/1/`, empty) are
    directories, not files; and a mirror left by an earlier process loses
    what was deleted from the store since."""
    endpoint, s3 = moto
    s3.create_bucket(Bucket="markers")
    for key in ("repo/simple/", "repo/simple/1/", "repo/simple_identity/", "repo/simple_identity/1/"):
        s3.put_object(Bucket="markers", Key=key, Body=b"")
    _upload(s3, "markers", "repo", EXAMPLES / "simple")
    _upload(s3, "markers", "repo", EXAMPLES / "simple_identity")
    env = {**os.environ, **CREDS}
    url = f"s3://{endpoint}/markers/repo"

    def validate():
        return subprocess.run([str(trtis_bin()), "validate-config", url],
                              capture_output=True, text=True, timeout=60, env=env)

    out = validate()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 models checked" in out.stdout, out.stdout
    _delete(s3, "markers", "repo/simple_identity")
    out = validate()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 model checked" in out.stdout, out.stdout
