"""Triton 2.51 as a same-run reference for the benches: scripts/setup-triton.sh
makes tritonserver (from the nvidia-pytriton wheel) runnable here with its
Python backend and trtis's own minimal identity backend
(benches/triton_identity.c); Triton runs a repository of those models.
"""
import os
import shlex
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import OUT, ROOT, Server, get  # noqa: E402


class TritonUnavailable(Exception):
    pass


def run_setup(script, timeout):
    """Runs a setup script of the project (idempotent), echoing what it
    prints; TritonUnavailable with its last error line when it fails."""
    try:
        done = subprocess.run(["bash", os.path.join(ROOT, script)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TritonUnavailable(f"{script} took over {timeout // 60} minutes")
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        sys.stdout.write(done.stderr)
        why = [line for line in done.stderr.splitlines() if line.strip()]
        raise TritonUnavailable(why[-1] if why else f"{script} exited {done.returncode}")


def triton_settings():
    """Runs scripts/setup-triton.sh (idempotent; quick once done) and reads
    the target/bench/triton.env it writes."""
    if os.environ.get("TRTIS_BENCH_NO_TRITON") == "1":
        raise TritonUnavailable("skipped: TRTIS_BENCH_NO_TRITON=1")
    print("setting up Triton for the reference (scripts/setup-triton.sh)", flush=True)
    run_setup("scripts/setup-triton.sh", timeout=900)
    settings = {}
    for line in open(os.path.join(OUT, "triton.env")):
        if line.strip() and not line.startswith("#"):
            key, _, value = shlex.split(line)[0].partition("=")
            settings[key] = value
    return settings


class Triton:
    """tritonserver on a repository, CPU only, with what perf() needs of a
    server (proc, grpc_port, inferences()). Only `models` are loaded
    (explicit model control); its log goes to `log`."""

    def __init__(self, settings, repo, port, models, log):
        self.port = port
        self.grpc_port = port + 1
        self.models, self.log_path = models, log
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = settings["TRITON_LD_LIBRARY_PATH"] + (
            ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        self.log = open(self.log_path, "w")
        t0 = time.perf_counter()
        try:
            self.proc = self.start(settings, repo, env)
        except OSError as e:
            self.log.close()
            raise TritonUnavailable(f"cannot run {settings['TRITONSERVER']}: {e}")
        while get(self.url("/v2/health/ready"))[0] != 200:
            if self.proc.poll() is not None:
                self.log.close()
                raise TritonUnavailable(f"tritonserver exited with {self.proc.returncode}: {self.log_reason()}")
            if time.perf_counter() - t0 > 120:
                self.stop()
                raise TritonUnavailable(f"tritonserver not ready after 120 s: {self.log_reason()}")
            time.sleep(0.02)
        self.ready_s = time.perf_counter() - t0

    def start(self, settings, repo, env):
        return subprocess.Popen(
            [settings["TRITONSERVER"], "--model-repository", repo,
             "--backend-directory", settings["TRITON_BACKEND_DIR"],
             "--http-port", str(self.port), "--http-address", "127.0.0.1",
             "--grpc-port", str(self.grpc_port), "--grpc-address", "127.0.0.1",
             "--model-control-mode", "explicit", *(f"--load-model={m}" for m in self.models),
             "--metrics-port", "0", "--allow-metrics=false", "--exit-timeout-secs", "10"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def log_reason(self):
        """The most telling line of the server's log: a model's load error,
        else its last error line, else its last line."""
        if not self.log.closed:
            self.log.flush()
        lines = [line.strip() for line in open(self.log_path) if line.strip()]
        load = [line for line in lines if "UNAVAILABLE" in line]
        errors = [line for line in lines if line.startswith("E") or "error" in line.lower()]
        return (load or errors or lines or ["no output"])[-1][:300] + f" (log: {os.path.relpath(self.log_path, ROOT)})"

    url = Server.url
    inferences = Server.inferences

    def children(self):
        """{pid: command name} of tritonserver's live children (its stubs)."""
        kids = {}
        for task in os.listdir(f"/proc/{self.proc.pid}/task"):
            for kid in open(f"/proc/{self.proc.pid}/task/{task}/children").read().split():
                try:
                    kids[int(kid)] = open(f"/proc/{kid}/comm").read().strip()
                except OSError:
                    pass
        return kids

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
