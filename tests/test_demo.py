"""``make demo`` (``python -m nvpair_wm.demo``) as a user runs it, with stdout not a terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SUMMARY = re.compile(r"^(node-\d+): (\d+) workloads, view hash ([0-9a-f]{12})$", re.MULTILINE)


def _processes_mentioning(text: str) -> list[int]:
    """Pids whose command line mentions ``text`` (Linux /proc; empty elsewhere)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            pids.append(int(entry.name))
    return pids


def test_demo_runs_kills_restarts_and_converges(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path), "COLUMNS": "100"}
    env.pop("FORCE_COLOR", None)
    res = subprocess.run(
        [sys.executable, "-m", "nvpair_wm.demo", "--duration", "8"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    out = res.stdout
    assert res.returncode == 0, f"exit {res.returncode}\nstdout:\n{out}\nstderr:\n{res.stderr}"
    assert "Traceback" not in res.stderr, res.stderr
    # The annotated events: node-2 killed, then restarted.
    assert "node-2 killed (SIGKILL)" in out, out
    assert "node-2 restarted on port" in out, out
    # The final summary: one line per node, all with the same view, and the verdict last.
    nodes = SUMMARY.findall(out)
    assert [n for n, _, _ in nodes] == ["node-1", "node-2", "node-3"], out
    assert len({(count, digest) for _, count, digest in nodes}) == 1, out
    assert int(nodes[0][1]) > 0, out
    assert out.rstrip().splitlines()[-1] == "converged: yes", out
    # Not a terminal: plain lines, no escape codes, and not many of them.
    assert "\x1b[" not in out, out
    assert len(out.splitlines()) < 60, out
    # Cleaned up: no temporary directory, no node process left behind.
    assert list(tmp_path.iterdir()) == []
    assert _processes_mentioning(str(tmp_path)) == []


def test_demo_refuses_a_bad_duration_in_one_line() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "nvpair_wm.demo", "--duration", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.count("\n") == 1 and "--duration" in res.stderr, res.stderr
