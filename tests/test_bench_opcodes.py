"""``bench/opcount``'s tracer counts exactly the opcodes a function runs, only between its two
signals (what ``python -m bench.opcodes`` reads per request), in a real interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.source_tree import ROOT

PROGRAM = """
import os, signal
def work(n):
    total = 0
    for i in range(n):
        total += i
    return total
work(5)  # before SIGUSR1: not counted
os.kill(os.getpid(), signal.SIGUSR1)
for _ in range(10):
    work(3)
os.kill(os.getpid(), signal.SIGUSR2)
work(7)  # after SIGUSR2: not counted
"""


def test_the_tracer_counts_each_call_and_its_opcodes_between_the_signals(tmp_path: Path) -> None:
    marker = tmp_path / "counts"
    env = dict(os.environ, NVPAIR_OPCOUNT=str(marker), PYTHONPATH=str(ROOT / "bench" / "opcount"))
    subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True, timeout=60)
    (written,) = tmp_path.glob("counts.*.json")
    counts = json.loads(written.read_text())
    work = "<string>:work"
    assert counts["calls"][work] == 10
    one = counts["counts"][work] / 10
    assert one == int(one) and 20 <= one <= 60, one  # the same opcodes each call, a loop of 3
    assert "<string>:<module>" not in counts["calls"]  # the caller was running, not called
