"""``python -m bench`` ends with a summary of every target (bench/harness.py): checked here on
made-up results, since tests time nothing; ``make bench-quick`` prints the real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from bench.harness import (
    MISS_MEANING,
    BenchResult,
    Check,
    Measurement,
    estimate,
    load_factor,
    render_summary,
)
from tests.support.source_tree import ROOT


def results() -> list[BenchResult]:
    codec = BenchResult("codec", "frames/s")
    codec.measurements += [
        Measurement("ours", "ours", "frames/s", [100.0] * 5, role="subject"),
        Measurement("slow", "slow baseline", "frames/s", [10.0] * 5, role="baseline"),
        Measurement("fast", "fast baseline", "frames/s", [90.0] * 5, role="baseline"),
    ]
    codec.ratio("ours", "slow", 5.0, "codec got slower")
    codec.ratio("ours", "fast", 2.0)  # no meaning given: the generic one
    codec.ratio("ours", "ours")  # no target: not in the summary
    memory = BenchResult("memory", "bytes")
    memory.checks.append(Check("RSS per workload", 600.0, "B", "< 500", False, meaning="big"))
    return [codec, memory, BenchResult("later", "not yet", skipped="module missing")]


def test_targets_are_ratios_with_a_target_and_checks() -> None:
    codec, memory, _ = results()
    names = [(t.benchmark, t.name, t.met) for t in codec.targets() + memory.targets()]
    assert names == [
        ("codec", "ours vs slow baseline", True),
        ("codec", "ours vs fast baseline", False),
        ("memory", "RSS per workload", False),
    ]
    assert codec.targets()[1].meaning == MISS_MEANING
    assert codec.targets()[1].measured == "1.11x" and codec.targets()[1].threshold == ">= 2x"


def test_summary_names_every_target_and_what_a_miss_means() -> None:
    console = Console(record=True, width=250, color_system=None)
    render_summary(results(), console, quick=True)
    text = console.export_text()
    lines = [line for line in text.splitlines() if "│" in line]
    row = {line.split("│")[2].strip(): line for line in lines}
    assert "yes" in row["ours vs slow baseline"] and "codec got slower" not in text
    assert "NO [1]" in row["ours vs fast baseline"] and "NO [2]" in row["RSS per workload"]
    # Each distinct meaning once, under the table, referenced from the rows that miss.
    assert f"[1] a miss means: {MISS_MEANING}" in text and "[2] a miss means: big" in text
    assert "1 of 3 targets met, 2 missed; skipped: later." in " ".join(text.split())
    assert "exit status is 0" in text and "make bench" in text


def test_estimate_adds_up_per_mode_and_scales_with_the_load() -> None:
    assert estimate(["codec", "scale"], quick=True) < estimate(["codec", "scale"], quick=False)
    assert estimate(["unknown"], quick=True) > 0
    load = os.getloadavg()[0] / len(os.sched_getaffinity(0))
    assert load_factor() == pytest.approx(max(1.0, load), abs=0.5)


def test_the_run_prints_its_summary_first_and_names_the_details_file(tmp_path: Path) -> None:
    """A real ``python -m bench`` (``scale`` alone: it needs the others' results, so it is
    skipped at once): standard output starts with the summary table and ends naming the files;
    the benchmark's own output is in the details file; standard error has one line for it."""
    details, report = tmp_path / "details.txt", tmp_path / "run.json"
    argv = ["--quick", "--only", "scale", "--details", str(details), "--out", str(report)]
    done = subprocess.run(
        [sys.executable, "-m", "bench", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Summary: the issue's targets"), lines[:3]
    assert "scale:" not in done.stdout  # no per-benchmark output on stdout
    assert f"Details (each benchmark's tables and log): {details}" in " ".join(done.stdout.split())
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    assert "scale: skipped" in details.read_text()
    assert json.loads(report.read_text())["benchmarks"]["scale"]["skipped"]
    progress = [ln for ln in done.stderr.splitlines() if ln.startswith("scale:")]
    assert len(progress) == 1 and "targets: skipped" in progress[0], done.stderr
