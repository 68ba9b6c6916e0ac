"""Python opcodes the inter-node server executes per request under a real peer's load.

    python -m bench.opcodes [--load h2_1|h2_32|h1_8] [--tree DIR ...] [--seconds S] [--top N]

The deterministic companion of ``realpeer``'s CPU time (which two shared cores make noisy):
each ``--tree`` (a checkout with its own ``.venv``, default this one) runs its own
``python -m bench.profile realpeer LOAD --rate 0`` (the Go peer and the daemon of
``bench/realpeer.py``) with ``bench/opcount`` on the daemon's ``PYTHONPATH``, whose tracer
counts the daemon's opcodes per function between two signals, after a warm-up. Requests are the
calls of ``EventsEndpoint.complete`` in that window. It prints opcodes and Python calls per
request and the functions that cost most; given two trees, the functions whose cost per
request moved most from the first to the second. Counting slows the daemon tens of times, so
it says what the code does per request, not how fast; the work of C code (TLS, msgspec, the
kernel) is outside it. A diagnosis tool, not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench.harness import ROOT

OPCOUNT = ROOT / "bench" / "opcount"
WARMUP_S = 4.0


def _daemon(marker: str, within: float = 60.0) -> int:
    """The pid of the nvpair-wm daemon started with ``NVPAIR_OPCOUNT=marker``."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes()
                environ = Path(entry.path, "environ").read_bytes()
            except OSError:
                continue
            if b"nvpair_wm\0" in cmdline and f"NVPAIR_OPCOUNT={marker}".encode() in environ:
                return int(entry.name)
        time.sleep(0.1)
    raise SystemExit(f"no nvpair-wm daemon with NVPAIR_OPCOUNT={marker} within {within:g} s")


def count(tree: Path, load: str, seconds: float) -> dict[str, dict[str, float]]:
    """Opcodes and calls per request, by function, of ``tree``'s daemon under ``load``."""
    with tempfile.TemporaryDirectory(prefix="nvpair-opcodes-") as tmp:
        marker = str(Path(tmp) / "counts")
        env = dict(os.environ, NVPAIR_OPCOUNT=marker)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(OPCOUNT), env.get("PYTHONPATH")]))
        window = WARMUP_S + seconds + 8.0
        command = [str(tree / ".venv" / "bin" / "python"), "-m", "bench.profile", "realpeer"]
        command += [load, "--rate", "0", "--seconds", str(round(window))]
        with subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL) as run:
            pid = _daemon(marker)
            time.sleep(WARMUP_S)
            os.kill(pid, signal.SIGUSR1)
            time.sleep(seconds)
            os.kill(pid, signal.SIGUSR2)
            run.wait(timeout=window + 120)
        found = list(Path(tmp).glob("counts.*.json"))
        if len(found) != 1:
            raise SystemExit(f"{tree}: the daemon wrote no counts (is its bench.profile there?)")
        raw = json.loads(found[0].read_text())
    requests = raw["calls"].get("endpoint.py:complete", 0)
    if not requests:
        raise SystemExit(f"{tree}: no request was answered while counting")
    return {
        what: {k: v / requests for k, v in raw[what].items()} for what in ("counts", "calls")
    } | {"requests": {"n": requests}}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.opcodes", description=__doc__.splitlines()[0])
    p.add_argument("--load", default="h2_1", choices=("h2_1", "h2_32", "h1_8"))
    p.add_argument("--tree", type=Path, action="append", help="a checkout with .venv (repeatable)")
    p.add_argument("--seconds", type=float, default=6.0, help="counting window")
    p.add_argument("--top", type=int, default=20)
    args = p.parse_args()
    trees = [t.resolve() for t in args.tree or [ROOT]]
    if len(trees) > 2:
        p.error("at most two trees")
    results = [count(tree, args.load, args.seconds) for tree in trees]
    for tree, r in zip(trees, results, strict=True):
        ops, calls = sum(r["counts"].values()), sum(r["calls"].values())
        print(
            f"{tree} ({args.load}, {r['requests']['n']:,.0f} requests counted): "
            f"{ops:,.0f} opcodes and {calls:.1f} Python calls per request"
        )
    if len(results) == 1:
        top = sorted(results[0]["counts"].items(), key=lambda kv: -kv[1])[: args.top]
        for name, ops in top:
            print(f"  {ops:8.1f} opcodes {results[0]['calls'].get(name, 0):6.2f} calls  {name}")
        return
    a, b = results
    names = set(a["counts"]) | set(b["counts"])
    moved = sorted(names, key=lambda n: -abs(b["counts"].get(n, 0) - a["counts"].get(n, 0)))
    total_a, total_b = sum(a["counts"].values()), sum(b["counts"].values())
    print(f"second / first: {total_b / total_a:.3f}; per request, by function (first, second):")
    for name in moved[: args.top]:
        x, y = a["counts"].get(name, 0.0), b["counts"].get(name, 0.0)
        print(f"  {x:8.1f} {y:8.1f} {y - x:+8.1f}  {name}")


if __name__ == "__main__":
    main()
