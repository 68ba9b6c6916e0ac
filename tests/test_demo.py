"""``make demo`` (``python -m nvpair_wm.demo``) as a user runs it, with stdout not a terminal."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.demo import Demo, DemoNode, Timeline

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
    # Why some workloads never finish is said on screen, with the count the views agree on.
    still = re.search(r"(\d+) workloads are still queued or running: each stand-in broker", out)
    assert still and int(still.group(1)) <= int(nodes[0][1]), out
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


def _demo_with_node_2_down(tmp_path: Path) -> Demo:
    dirs = init_cluster(tmp_path / "cl", ["node-1", "node-2"])
    nodes = [DemoNode(n, dirs[n], tmp_path / f"{n}.log", random.Random(1)) for n in dirs]
    for node in nodes:
        node.phase = "up"
        node.port = 40000
        node.own["w1"] = {"id": "w1", "state": "running", "seq": 2}
    nodes[0].remote[("node-2", "w1")] = ("running", 2)
    nodes[1].phase = "down"
    nodes[1].remote[("node-1", "w1")] = ("queued", 1)  # what it knew before it died
    return Demo(nodes, Timeline.of(20), Console(record=True, width=120, color_system=None))


def _rendered(demo: Demo) -> str:
    demo.console.print(demo.render())
    return demo.console.export_text()


def test_a_down_node_shows_no_stale_counts_and_the_footer_follows_the_run(
    tmp_path: Path,
) -> None:
    demo = _demo_with_node_2_down(tmp_path)
    text = _rendered(demo)
    row = next(line for line in text.splitlines() if line.lstrip().startswith("node-2"))
    assert "DOWN" in row and not re.search(r"\d", row.replace("node-2", "").replace("40000", ""))
    up = next(line for line in text.splitlines() if line.lstrip().startswith("node-1"))
    assert re.search(r"\b2\b", up), up  # its two workloads are counted
    assert "Ctrl-C ends the run early" in text and "though" not in text
    demo.finished = True
    text = _rendered(demo)
    assert "The run has ended." in text and "Ctrl-C" not in text
    assert "2 workloads are still queued or running" in demo.unfinished()
