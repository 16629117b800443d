"""A model repository in object storage against the same repository on local
disk: time from process start to READY, and idle RSS once ready.

In one run: moto in server mode (the S3-compatible server the tests use,
from .venv) holds the example ONNX models `simple` and `efficientnet_lite0`
(about 19 MB); `trtis serve --model-store s3://http://127.0.0.1:PORT/
bucket/repo` mirrors them into its cache and serves them, against `trtis
serve --model-store DIR` on a local copy of the same files. Each is started
five times, alternating; the mirror is emptied before each S3 start, so
every start fetches everything. Reported: median start-to-ready in ms and
median idle RSS in MiB of each, and their ratios. moto runs on the same
2 CPUs, so the S3 figure includes the storage server's own work.

Run it with scripts/bench.sh remote. Results: target/bench/remote-bench.md.
"""
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import OUT, ROOT, TRTIS, get, rss_mib  # noqa: E402

VENV_BIN = os.path.join(ROOT, ".venv", "bin")
MODELS = ["simple", "efficientnet_lite0"]
CREDS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(store, env):
    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [TRTIS, "serve", "--model-store", store, "--http-address", "127.0.0.1", "--http-port", str(port),
         "--grpc-port", "0", "--metrics-port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    while get(f"http://127.0.0.1:{port}/v2/health/ready")[0] != 200:
        if proc.poll() is not None:
            sys.exit(f"trtis serve --model-store {store} exited with {proc.returncode}")
        time.sleep(0.002)
    ready_ms = (time.perf_counter() - t0) * 1000
    time.sleep(1.0)
    rss = rss_mib(proc.pid)
    proc.terminate()
    proc.wait(timeout=30)
    return ready_ms, rss


def main():
    import boto3  # the driver runs with .venv's python

    port = free_port()
    moto = subprocess.Popen([os.path.join(VENV_BIN, "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=CREDS["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=CREDS["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    for _ in range(150):
        try:
            s3.list_buckets()
            break
        except Exception:
            time.sleep(0.2)
    s3.create_bucket(Bucket="bench")
    local = tempfile.mkdtemp(prefix="trtis-remote-bench-")
    size = 0
    for m in MODELS:
        src = os.path.join(ROOT, "examples/model_repository", m)
        shutil.copytree(src, os.path.join(local, m), ignore=shutil.ignore_patterns("__pycache__"))
        for d, _, files in os.walk(src):
            for f in files:
                path = os.path.join(d, f)
                size += os.path.getsize(path)
                s3.upload_file(path, "bench", "repo/" + os.path.relpath(path, os.path.join(ROOT, "examples/model_repository")))
    url = f"s3://{endpoint}/bench/repo"
    env = {**os.environ, **CREDS}
    cache = os.path.join(tempfile.gettempdir(), f"trtis-repos-{os.getuid()}")
    rows = {"local": [], "s3": []}
    try:
        for _ in range(5):
            rows["local"].append(start(local, env))
            shutil.rmtree(cache, ignore_errors=True)
            rows["s3"].append(start(url, env))
    finally:
        moto.terminate()
        moto.wait(timeout=10)
        shutil.rmtree(local, ignore_errors=True)
    med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in rows.items()}
    lines = [
        "# Object-storage repository benchmark",
        "",
        f"{os.cpu_count()} CPUs. The same {len(MODELS)} ONNX models ({', '.join(MODELS)}; {size / 2**20:.1f} MiB) "
        "served from a local directory and from moto's S3 server (same machine), 5 starts each, alternating, "
        "the S3 mirror emptied before each S3 start.",
        "",
        "| repository | start to READY, median ms | idle RSS, median MiB | all starts, ms |",
        "| --- | --- | --- | --- |",
    ]
    for k in ("local", "s3"):
        lines.append(f"| {k} | {med[k][0]:.0f} | {med[k][1]:.0f} | {', '.join(f'{r[0]:.0f}' for r in rows[k])} |")
    lines += ["", f"S3/local: start to READY {med['s3'][0] / med['local'][0]:.2f}, idle RSS {med['s3'][1] / med['local'][1]:.2f}."]
    text = "\n".join(lines) + "\n"
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "remote-bench.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
