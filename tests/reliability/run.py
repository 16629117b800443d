"""Runs the reliability drivers one after another (never two at once: the
machine has 2 cores), each in its own process with a time limit, and writes
the markdown summary. Called by scripts/reliability.sh.

    .venv/bin/python tests/reliability/run.py [--quick] [NAME...] [-- DRIVER ARGS...]

NAME is one of churn, halfopen, sigterm, soak, seqflood, or any other
driver file here (default: all, in that order, then the others).
Exit status: 0 when every case passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# The drivers in the order they run; any other driver file in this
# directory (a module with a main()) runs after them.
ORDER = ["churn", "halfopen", "sigterm", "soak", "seqflood"]
NOT_DRIVERS = {"common", "run"}


def discover() -> list[str]:
    found = sorted(p.stem for p in HERE.glob("*.py") if p.stem not in NOT_DRIVERS and not p.stem.startswith("_"))
    return [n for n in ORDER if n in found] + [n for n in found if n not in ORDER]


def what(name: str) -> str:
    """The first line of a driver's docstring, after its name."""
    try:
        doc = ast.get_docstring(ast.parse((HERE / f"{name}.py").read_text())) or ""
    except (OSError, SyntaxError):
        return ""
    first = doc.strip().split("\n\n")[0].replace("\n", " ")
    head, sep, rest = first.partition(":")
    text = rest.strip() if sep and " " not in head else first
    return text.rstrip(".")
SUMMARY = ROOT / "target" / "bench" / "reliability.md"
OUT_DIR = ROOT / "target" / "bench" / "reliability"



def limit_s(name: str, quick: bool, extra: list[str]) -> float:
    if name == "soak":
        minutes = 1.0 if quick else 10.0
        if "--minutes" in extra:
            minutes = float(extra[extra.index("--minutes") + 1])
        return minutes * 60 + 240
    return 600.0 if quick else 1200.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("names", nargs="*")
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    args = ap.parse_args(argv)
    cases = discover()
    names = args.names or cases
    unknown = [n for n in names if n not in cases]
    if unknown:
        print(f"unknown case(s): {' '.join(unknown)}; known: {' '.join(cases)}", file=sys.stderr)
        return 2
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, RELIABILITY_OUT=str(OUT_DIR), PYTHONUNBUFFERED="1")
    binary = env.setdefault("TRTIS_BIN", str(ROOT / "target" / "release" / "trtis"))
    results = []
    t_all = time.monotonic()
    for name in names:
        record_path = OUT_DIR / f"{name}.json"
        record_path.unlink(missing_ok=True)
        cmd = [sys.executable, str(HERE / f"{name}.py")] + (["--quick"] if args.quick else []) + extra
        print(f"==> {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, env=env, timeout=limit_s(name, args.quick, extra))
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - t0
        record = None
        if record_path.exists():
            try:
                record = json.loads(record_path.read_text())
            except ValueError:
                record = None
        passed = code == 0 and record is not None and record.get("passed")
        if record is None:
            why = "timed out" if code is None else f"exited {code} without a result"
            record = {"name": name, "passed": False, "figures": {}, "checks": [{"what": why, "ok": False}],
                      "notes": []}
            print(f"RESULT {name} FAIL ({why})", flush=True)
        results.append((name, passed, took, record))
    total = time.monotonic() - t_all

    lines = [
        "# Reliability", "",
        f"{time.strftime('%Y-%m-%d %H:%M')}, binary `{os.path.relpath(binary, ROOT)}`, "
        f"{'quick' if args.quick else 'full'} mode, {os.cpu_count()} CPUs, {total:.0f} s in all. "
        "Drivers: tests/reliability/; run with scripts/reliability.sh.", "",
        "| case | what | result | time |", "| --- | --- | --- | --- |",
    ]
    for name, passed, took, _ in results:
        lines.append(f"| {name} | {what(name)} | {'PASS' if passed else '**FAIL**'} | {took:.0f} s |")
    for name, passed, took, record in results:
        lines += ["", f"## {name}: {'PASS' if passed else 'FAIL'}", ""]
        for c in record.get("checks", []):
            lines.append(f"- [{'x' if c['ok'] else ' '}] {c['what']}")
        figs = {k: v for k, v in record.get("figures", {}).items() if k != "rss_series"}
        if figs:
            lines += ["", "| figure | value |", "| --- | --- |"]
            lines += [f"| {k} | {v} |" for k, v in figs.items()]
        series = record.get("figures", {}).get("rss_series")
        if series:
            step = max(1, len(series) // 24)
            lines += ["", "RSS samples (s: MiB): " + ", ".join(f"{t}: {v}" for t, v in series[::step])]
        for n in record.get("notes", []):
            lines.append(f"\n> {n}")
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text("\n".join(lines) + "\n")
    failed = [name for name, passed, _, _ in results if not passed]
    print(f"reliability: {len(results)} cases, {len(failed)} failed{': ' + ' '.join(failed) if failed else ''} "
          f"({total:.0f} s); summary in {os.path.relpath(SUMMARY, ROOT)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
