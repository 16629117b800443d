"""A Python model's packed EXECUTION_ENV_PATH, against a real `trtis serve`
(python-backend-facts.md §2: a conda-pack tarball or an unpacked
environment directory, `$$TRITON_MODEL_DIRECTORY` expanded; Triton unpacks
the archive and runs the model inside the environment, its `lib` first on
LD_LIBRARY_PATH).

The environment is a real one made here: a virtual environment of the
interpreter running the tests (`venv --copies`, so its interpreter is a
file of its own and the environment can move), with a `.pth` line that
makes this interpreter's site-packages (numpy) importable, packed as
`env.tar.gz` into the model directory of tests/fixtures/python/env_probe.
The model reports `sys.executable` and `sys.prefix`: they must be the
unpacked copy's, under the server's cache (`$TMPDIR/trtis-python-envs-
<uid>/<key>`; the server gets a TMPDIR of its own here), one copy for both
instances and for a reload. An archive with a `../escape` entry is refused
at load, writing nothing.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest \
     tests/python/test_python_env.py -q
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from trtis_harness import REPO_ROOT, running_server

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "python" / "env_probe"


def make_env(where):
    """A relocatable virtual environment that can import numpy."""
    env = where / "env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--copies", "--without-pip", str(env)],
        check=True,
        timeout=120,
    )
    site = subprocess.run(
        [str(env / "bin" / "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    # The test interpreter's packages (numpy) by an absolute path, which
    # stays valid wherever the environment is unpacked.
    (env / os.path.relpath(site, env) / "test_packages.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    return env


def pack(env, archive) -> None:
    """`env`'s contents at the top of a .tar.gz, as conda-pack lays it out."""
    with tarfile.open(archive, "w:gz") as tar:
        for child in sorted(env.iterdir()):
            tar.add(child, arcname=child.name)


def hostile_archive(archive) -> None:
    """A .tar.gz with an interpreter and an entry that climbs out."""
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (("bin/python3", b"#!/bin/sh\n"), ("../escape", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))


def model_copy(repo, name: str, env_path: str | None = None):
    """The env_probe fixture as model `name` (EXECUTION_ENV_PATH replaced
    when given)."""
    dest = repo / name
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    config = (dest / "config.pbtxt").read_text().replace('name: "env_probe"', f'name: "{name}"')
    if env_path is not None:
        config = config.replace("$$TRITON_MODEL_DIRECTORY/env.tar.gz", env_path)
    (dest / "config.pbtxt").write_text(config)
    return dest


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("python_env").resolve()
    env = make_env(base)
    repo = base / "models"
    repo.mkdir()
    pack(env, model_copy(repo, "env_probe") / "env.tar.gz")
    # The unpacked directory, as an environment directory.
    model_copy(repo, "env_dir", env_path=str(env))
    hostile_archive(model_copy(repo, "env_escape") / "env.tar.gz")
    tmpdir = base / "server-tmp"
    tmpdir.mkdir()
    return {"repo": repo, "env": env, "tmpdir": tmpdir, "base": base}


@pytest.fixture(scope="module")
def server(setup):
    # The server's TMPDIR (and so its environment cache) is the test's own.
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(setup["tmpdir"])
    gen = running_server(
        setup["repo"],
        args=["--python", sys.executable, "--model-control-mode", "explicit"],
        name="python env server",
    )
    try:
        started = next(gen)
    finally:
        if old is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = old
    yield started
    next(gen, None)


@pytest.fixture(scope="module")
def client(server):
    c = httpclient.InferenceServerClient(server.url, network_timeout=120.0)
    yield c
    c.close()


def cache_root(setup):
    return setup["tmpdir"] / f"trtis-python-envs-{os.getuid()}"


X = np.array([1.5, -2.0], dtype=np.float32)


def probe_input():
    inp = httpclient.InferInput("X", [2], "FP32")
    inp.set_data_from_numpy(X)
    return [inp]


def info_of(result) -> dict:
    assert result.as_numpy("Y").tolist() == (X + 1).tolist()
    return json.loads(result.as_numpy("INFO")[0])


def probe(client, model: str) -> dict:
    return info_of(client.infer(model, probe_input()))


def test_a_packed_environment_is_unpacked_and_runs_the_model(client, setup):
    client.load_model("env_probe")
    info = probe(client, "env_probe")
    root = cache_root(setup)
    copies = sorted(p.name for p in root.iterdir())
    assert len(copies) == 1, f"one unpacked copy for both instances, no leftovers: {copies}"
    unpacked = root / copies[0]
    assert info["prefix"] == str(unpacked), info
    assert info["executable"] == str(unpacked / "bin" / "python3"), info
    assert info["ld_library_path"].split(":")[0] == str(unpacked / "lib"), info
    # Activated as its bin/activate would: bin first on PATH, VIRTUAL_ENV.
    assert info["path"].split(":")[0] == str(unpacked / "bin"), info
    assert info["virtual_env"] == str(unpacked), info
    assert info["numpy"] == np.__version__, info
    # The cache is this user's alone.
    assert root.stat().st_mode & 0o777 == 0o700
    # The archive's relative link came out as a link.
    assert os.readlink(unpacked / "lib64") == "lib"


def test_both_instances_and_a_reload_share_one_copy(client, server, setup):
    client.load_model("env_probe")
    # Requests at once, so both instances answer.
    many = httpclient.InferenceServerClient(server.url, concurrency=8, network_timeout=120.0)
    try:
        pending = [many.async_infer("env_probe", probe_input()) for _ in range(16)]
        infos = [info_of(p.get_result()) for p in pending]
    finally:
        many.close()
    assert len({i["prefix"] for i in infos}) == 1, infos
    before = infos[0]["prefix"]
    client.unload_model("env_probe")
    client.load_model("env_probe")
    assert probe(client, "env_probe")["prefix"] == before
    assert len(list(cache_root(setup).iterdir())) == 1


def test_an_environment_directory_still_runs_as_it_is(client, setup):
    client.load_model("env_dir")
    info = probe(client, "env_dir")
    assert info["prefix"] == str(setup["env"]), info
    assert info["executable"] == str(setup["env"] / "bin" / "python3"), info


def test_an_archive_that_climbs_out_is_refused_and_writes_nothing(client, setup):
    before = sorted(p.name for p in cache_root(setup).iterdir()) if cache_root(setup).exists() else []
    with pytest.raises(InferenceServerException) as e:
        client.load_model("env_escape")
    message = e.value.message()
    assert "EXECUTION_ENV_PATH" in message and "env_escape" in message, message
    assert "is refused: entry '../escape' has a '..' in its path" in message, message
    assert not client.is_model_ready("env_escape")
    after = sorted(p.name for p in cache_root(setup).iterdir())
    assert after == before, "a refused archive leaves nothing in the cache"
    for d in (setup["tmpdir"], cache_root(setup), setup["base"], setup["repo"] / "env_escape"):
        assert not (d / "escape").exists(), d
