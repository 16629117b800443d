"""Runs the documentation: every command and config snippet in README.md and
docs/*.md that is marked runnable, against a real `trtis serve` of the
example repository, so the docs cannot drift from the code.

The marker is an HTML comment on the line before a fenced block (invisible
on GitHub and in the mdBook):

    <!-- docs-test: run -->             run the block (console: each `$ `
                                         command; sh: the block as one bash
                                         script; python: with this venv's
                                         interpreter); each must exit 0
    <!-- docs-test: run, exit=1 -->     ... each command must exit 1
    <!-- docs-test: run, output -->     console: each command's output must
                                         be the block's (a line `...` stands
                                         for any lines)
    <!-- docs-test: config MODEL -->    the block is MODEL's whole
                                         config.pbtxt: written over a copy
                                         of examples/model_repository/MODEL,
                                         which `trtis validate-config` must
                                         pass
    <!-- docs-test: config-add MODEL --> the block is appended to MODEL's
                                         config.pbtxt, then checked the same
    <!-- docs-test: skip REASON -->     not run (needs a GPU, a cluster,
                                         Triton, a build, or is a fragment)

Every fenced block in sh, bash, shell, console, python, protobuf or pbtxt
must carry a marker (an unmarked one fails), so each is run or skipped on
purpose; pytest's summary counts the runs and the skips (with reasons).

The commands run in a scratch directory holding links to the checkout's
examples/, tests/, docs/ and scripts/, with `trtis` on PATH (a wrapper of
$TRTIS_BIN that points the client commands at the test's server) and
`localhost:8000`/`8001`/`8002` in a block rewritten to the server's
ephemeral HTTP, gRPC and metrics ports. The server is the one
scripts/examples.sh serves (its `--model-store`), started by the harness.

Run: TRTIS_BIN=$PWD/target/debug/trtis .venv/bin/python -m pytest tests/python/test_docs.py -q
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trtis_harness import REPO_ROOT, free_port, running_server, trtis_bin

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
CHECKED_LANGS = {"sh", "bash", "shell", "console", "python", "protobuf", "pbtxt"}
MARKER_RE = re.compile(r"^<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
FENCE_RE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
BLOCK_TIMEOUT_S = 60


@dataclass
class Block:
    page: str
    line: int
    lang: str
    text: str
    marker: str | None
    opts: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _parse_marker(marker: str) -> dict:
    """`run, output, exit=1` / `config simple` / `skip why` as a dict."""
    head, _, rest = marker.partition(" ")
    head = head.rstrip(",")
    if head in ("skip", "config", "config-add"):
        return {"kind": head, "arg": rest.strip()}
    opts = {"kind": head, "exit": 0, "output": False}
    for part in [p.strip() for p in marker.split(",")[1:] if p.strip()]:
        if part == "output":
            opts["output"] = True
        elif part.startswith("exit="):
            opts["exit"] = int(part[5:])
        else:
            opts["bad"] = part
    return opts


def extract(path: Path) -> list[Block]:
    """The fenced blocks of one page, each with the marker just above it."""
    rel = str(path.relative_to(REPO_ROOT))
    lines = path.read_text().splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        m = FENCE_RE.match(lines[i].strip())
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        marker = None
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0:
            mm = MARKER_RE.match(lines[j].strip())
            if mm:
                marker = mm.group(1)
        b = Block(rel, start + 1, lang, "\n".join(body) + "\n", marker)
        if marker is not None:
            b.opts = _parse_marker(marker)
        blocks.append(b)
    return blocks


ALL_BLOCKS = [b for p in PAGES for b in extract(p)]
CHECKED = [b for b in ALL_BLOCKS if b.lang in CHECKED_LANGS or b.marker is not None]


def test_every_code_block_is_marked():
    """Each shell, console, Python or config block says whether it runs."""
    unmarked = [b.id for b in CHECKED if b.marker is None]
    assert not unmarked, (
        "fenced blocks without a `<!-- docs-test: run|skip REASON|config MODEL -->` "
        f"marker on the line before: {unmarked}"
    )
    bad = [
        f"{b.id}: {b.marker}"
        for b in CHECKED
        if b.opts.get("kind") not in ("run", "skip", "config", "config-add")
        or "bad" in b.opts
        or (b.opts["kind"] in ("skip", "config", "config-add") and not b.opts["arg"])
    ]
    assert not bad, f"markers not understood (or without their argument): {bad}"


def test_tour_and_quick_start_run():
    """The README's tour and the quick start are runnable, not skipped."""
    for page in ("README.md", "docs/quick-start.md"):
        runs = [b for b in CHECKED if b.page == page and b.opts.get("kind") == "run"]
        assert len(runs) >= 3, f"{page} has {len(runs)} runnable blocks"


def test_summary():
    """How many blocks run and how many are skipped (printed with -s)."""
    kinds: dict[str, int] = {}
    for b in CHECKED:
        kinds[b.opts.get("kind", "unmarked")] = kinds.get(b.opts.get("kind", "unmarked"), 0) + 1
    print(f"\ndocs blocks: {kinds} of {len(CHECKED)} checked ({len(ALL_BLOCKS)} fenced in all)")
    assert kinds.get("run", 0) + kinds.get("config", 0) + kinds.get("config-add", 0) > 0


# --------------------------------------------------------------------------
# The server and the scratch directory the blocks run in
# --------------------------------------------------------------------------


def examples_repository() -> Path:
    """The repository scripts/examples.sh serves."""
    script = (REPO_ROOT / "scripts" / "examples.sh").read_text()
    m = re.search(r"trtis serve --model-store (\S+)", script)
    assert m, "scripts/examples.sh has no `trtis serve --model-store DIR` line"
    return REPO_ROOT / m.group(1)


@pytest.fixture(scope="module")
def docs_server():
    metrics = free_port()
    for server in running_server(
        examples_repository(),
        ["--metrics-port", str(metrics), "--python", sys.executable],
        name="docs server",
    ):
        server.metrics_port = metrics
        yield server


WRAPPER = """#!/bin/sh
# trtis for the docs' blocks: the client commands talk to the test's server.
for a in "$@"; do
  case "$a" in grpc) export TRTIS_URL="$DOCS_GRPC_URL" ;; esac
done
exec "$DOCS_TRTIS_BIN" "$@"
"""


@pytest.fixture(scope="module")
def scratch(tmp_path_factory, docs_server):
    """(cwd, env) for the blocks."""
    root = tmp_path_factory.mktemp("docs")
    work = root / "work"
    work.mkdir()
    for name in ("examples", "tests", "docs", "scripts"):
        (work / name).symlink_to(REPO_ROOT / name)
    bindir = root / "bin"
    bindir.mkdir()
    wrapper = bindir / "trtis"
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    env = dict(os.environ)
    env.update(
        PATH=f"{bindir}:{Path(sys.executable).parent}:{env.get('PATH', '')}",
        DOCS_TRTIS_BIN=str(trtis_bin().resolve()),
        TRTIS_URL=f"127.0.0.1:{docs_server.port}",
        DOCS_GRPC_URL=f"127.0.0.1:{docs_server.grpc_port}",
        TRTIS_GPUS="none",
    )
    return work, env


def localize(text: str, server) -> str:
    for port, real in (
        ("8000", server.port),
        ("8001", server.grpc_port),
        ("8002", server.metrics_port),
    ):
        text = re.sub(rf"\b(localhost|127\.0\.0\.1|0\.0\.0\.0):{port}\b", f"127.0.0.1:{real}", text)
    return text


def console_commands(text: str) -> list[tuple[str, list[str]]]:
    """A console block's commands (`$ ` lines, continued while a quote is
    open or a line ends in `\\`), each with the output lines shown under it."""
    cmds: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            if cmds:
                cmds[-1][1].append(line)
            i += 1
            continue
        cmd = line[2:]
        while True:
            try:
                shlex.split(cmd)
                complete = not cmd.endswith("\\")
            except ValueError:
                complete = False
            if complete or i + 1 >= len(lines):
                break
            i += 1
            cmd += "\n" + lines[i]
        cmds.append((cmd, []))
        i += 1
    for _, out in cmds:
        while out and not out[-1].strip():
            out.pop()
    return cmds


def output_matches(shown: list[str], actual: list[str]) -> bool:
    """`shown` against `actual` line by line, trailing spaces ignored; a
    shown `...` matches any number of lines."""
    shown = [s.rstrip() for s in shown]
    actual = [a.rstrip() for a in actual]

    def match(i: int, j: int) -> bool:
        if i == len(shown):
            return j == len(actual)
        if shown[i] == "...":
            return any(match(i + 1, k) for k in range(j, len(actual) + 1))
        return j < len(actual) and shown[i] == actual[j] and match(i + 1, j + 1)

    return match(0, 0)


def run(cmd: list[str], block: Block, cwd: Path, env: dict, what: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.id}: {what} ran past {BLOCK_TIMEOUT_S} s", pytrace=False)


def fail(block: Block, what: str, proc: subprocess.CompletedProcess, why: str) -> None:
    pytest.fail(
        f"{block.id} ({block.lang} block): {why}\n--- command\n{what}\n"
        f"--- exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}",
        pytrace=False,
    )


def check_config(block: Block, tmp_path: Path, env: dict) -> None:
    model = block.opts["arg"]
    source = REPO_ROOT / "examples" / "model_repository" / model
    assert source.is_dir(), f"{block.id}: no example model '{model}'"
    repo = tmp_path / "repo"
    repo.mkdir()
    # The whole repository, so an ensemble's steps resolve; the model copied.
    for entry in source.parent.iterdir():
        (repo / entry.name).symlink_to(entry)
    (repo / model).unlink()
    shutil.copytree(source, repo / model, symlinks=True)
    config = repo / model / "config.pbtxt"
    if block.opts["kind"] == "config":
        config.write_text(block.text)
    else:
        config.write_text(config.read_text() + "\n" + block.text)
    cmd = [str(trtis_bin()), "validate-config", str(repo / model)]
    proc = run(cmd, block, tmp_path, env, "validate-config")
    if proc.returncode != 0:
        fail(block, " ".join(cmd) + f"\n--- config.pbtxt\n{config.read_text()}", proc,
             f"the snippet, as {model}'s config, does not pass validate-config")


@pytest.mark.parametrize(
    "block", [b for b in CHECKED if b.marker is not None], ids=lambda b: b.id
)
def test_block(block, request, tmp_path):
    kind = block.opts.get("kind")
    if kind == "skip":
        pytest.skip(f"{block.id}: {block.opts['arg']}")
    if kind in ("config", "config-add"):
        check_config(block, tmp_path, dict(os.environ, TRTIS_GPUS="none"))
        return
    if kind != "run":
        pytest.fail(f"{block.id}: marker '{block.marker}' not understood", pytrace=False)
    server = request.getfixturevalue("docs_server")
    cwd, env = request.getfixturevalue("scratch")
    text = localize(block.text, server)
    expected = block.opts["exit"]
    if block.lang == "console":
        cmds = console_commands(text)
        assert cmds, f"{block.id}: a console block without `$ ` commands"
        for cmd, shown in cmds:
            proc = run(["bash", "-o", "pipefail", "-c", cmd], block, cwd, env, cmd)
            if proc.returncode != expected:
                fail(block, cmd, proc, f"exit {proc.returncode}, expected {expected}")
            if block.opts["output"]:
                actual = (proc.stdout + proc.stderr).splitlines()
                while actual and not actual[-1].strip():
                    actual.pop()
                if not output_matches(shown, actual):
                    fail(block, cmd, proc, "the output differs from the block's:\n"
                         + "\n".join(shown))
    elif block.lang in ("sh", "bash", "shell"):
        proc = run(["bash", "-euo", "pipefail", "-c", text], block, cwd, env, text)
        if proc.returncode != expected:
            fail(block, text, proc, f"exit {proc.returncode}, expected {expected}")
    elif block.lang == "python":
        proc = run([sys.executable, "-c", text], block, cwd, env, text)
        if proc.returncode != expected:
            fail(block, text, proc, f"exit {proc.returncode}, expected {expected}")
    else:
        pytest.fail(f"{block.id}: cannot run a {block.lang or 'plain'} block", pytrace=False)
