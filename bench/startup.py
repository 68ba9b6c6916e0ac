"""Start-up with a full journal: seconds from spawning ``nvpair-wm`` to its ``ready`` line.

The journal is reloaded before ``ready`` (so that every peer's first snapshot carries it), so
a node restarted with a full table (``table.max_workloads``, 200,000 workloads) is not ready
until it has read it. This measures the whole thing as a supervisor sees it: the process
started with ``--cluster-dir``, to the first line on its stdout. Cases:

* ``empty``: no journal (the interpreter, the imports, TLS and the listener: the floor);
* ``full``: 200,000 workloads as the last compaction left them;
* ``full+tail``: the same plus 20,000 records appended since (a ``kill -9`` between two
  compactions: these are read one record at a time);
* ``relay``: 100,000 workloads reported by the broker and 100,000 forwarded to it from peers
  (what a relaying node journals since issue 24; a tree without that journals none of it).

Each journal is written by the tree under test itself (in a child process, with its own
``Journal``: each tree writes its own format), copied aside, and put back before every start
(a start may rewrite it). With a baseline (``--baseline COMMIT``, or ``BENCH_STARTUP_BASELINE``
for ``python -m bench``: a commit, exported with ``git archive``, or a directory holding
``src/`` and ``generated/``), the baseline and this tree start alternately, round after round,
on their own copies of the same workloads, and the table gives both medians and their ratio,
of wall time and of the CPU time the process had used when it wrote ``ready`` (steadier on a
shared machine: it does not count the moments the process waited for a core). Every tree
starts with its bytecode cached (compiled by a start before the first measured one), as a
restart of an installed daemon does, whatever ``PYTHONDONTWRITEBYTECODE`` says.

``python -m bench.startup --baseline 17e23f2`` runs it alone; ``--workloads`` and ``--rounds``
change the size and the number of rounds.
"""

# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench.baseline import THIS_TREE, Tree, baseline_tree
from bench.harness import BenchResult, Check, Context, Measurement

NAME = "startup"
DESCRIPTION = "start-up: spawn to ready with a full journal (200,000 workloads), vs a baseline"

READY_BUDGET_S: Final = 1.0  # issue 22 item 7: ready within 1 s with a full table
READY_TIMEOUT_S: Final = 120.0
ROOT: Final = Path(__file__).resolve().parent.parent

# Writes a journal with the tree on PYTHONPATH (its own Dispatcher and Journal): argv is the
# directory, the workloads its broker reports, those forwarded to it (when the tree journals
# them) and the records appended after the compaction.
_WRITER: Final = r"""
import json, sys, time
from pathlib import Path
from nvpair_wm.dedup import TableLimits, WorkloadTable
from nvpair_wm.dispatch import Dispatcher
from nvpair_wm.journal import JournalLimits, open_journal

directory, local, forwarded, tail = Path(sys.argv[1]), *map(int, sys.argv[2:5])
wall = time.time()
limits = TableLimits()
journal, _ = open_journal(directory, JournalLimits(), limits, wall)

def status():
    raise AssertionError("not asked")

def info(origin, i, seq, state):
    return {"id": f"w{i}", "model": "llama-3.1-8b-instruct", "engine": "vllm",
            "runId": f"run-{origin}", "state": state, "originatedFrom": origin,
            "createdAt": 1764690000000 + i, "startedAt": None, "completedAt": None,
            "error": None, "seq": seq}

def frame(origin, i, seq, method, state):
    return json.dumps({"jsonrpc": "2.0", "method": method,
                       "params": {"workloadInfo": info(origin, i, seq, state)}}).encode()

disp = Dispatcher(WorkloadTable(limits), status, lambda: 1000.0)
for i in range(local):
    journal.append(disp.local(frame("node-a", i, 3, "workload:completed", "completed")).outbound,
                   wall)
if forwarded:
    if not hasattr(journal, "append_forwarded"):
        sys.exit("this tree does not journal what it forwards")
    for i in range(forwarded):
        result = disp.peer(frame("node-b", i, 2, "workload:started", "running"))
        journal.append_forwarded(result.forwarded, wall)
journal.compact(wall)
for i in range(tail):
    journal.append(disp.local(frame("node-c", i, 1, "workload:submitted", "queued")).outbound,
                   wall)
journal.close()
"""


@dataclass(frozen=True)
class Case:
    name: str
    local: int
    forwarded: int
    tail: int
    label: str


def cases(workloads: int) -> list[Case]:
    half = workloads // 2
    return [
        Case("empty", 0, 0, 0, "no journal"),
        Case("full", workloads, 0, 0, f"{workloads:,} workloads, compacted"),
        Case(
            "full+tail",
            workloads,
            0,
            workloads // 10,
            f"{workloads:,} compacted + {workloads // 10:,} appended since",
        ),
        Case("relay", half, half, 0, f"{half:,} reported + {half:,} forwarded to the broker"),
    ]


def warm(tree: Tree) -> None:
    """Compile and cache the tree's bytecode before the first measured start (``--help``
    imports what a start imports)."""
    command = [sys.executable, "-m", "nvpair_wm", "--help"]
    subprocess.run(command, check=False, env=tree.env(), capture_output=True)


def write_journal(tree: Tree, directory: Path, case: Case) -> bool:
    """The case's journal in ``directory``, written by ``tree``; False if it cannot."""
    args = [str(directory), str(case.local), str(case.forwarded), str(case.tail)]
    command = [sys.executable, "-c", _WRITER, *args]
    done = subprocess.run(command, check=False, env=tree.env(), capture_output=True, text=True)
    return done.returncode == 0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_to_ready(tree: Tree, node_dir: Path) -> tuple[float, float, str]:
    """Seconds from spawn to the first stdout line (``ready``), the CPU seconds the process
    had used by then (steadier than wall time on a shared machine), and the reload log line."""
    args = [sys.executable, "-m", "nvpair_wm", "--cluster-dir", str(node_dir),
            "--bind", "127.0.0.1", "--port", "0", "--log-level", "info"]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=tree.env(),
    )
    assert proc.stdout is not None and proc.stdin is not None
    first = proc.stdout.readline()
    took = time.perf_counter() - t0
    cpu = _cpu_seconds(proc.pid)
    try:
        _, err = proc.communicate(b"", timeout=READY_TIMEOUT_S)  # EOF: the node stops
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    if b'"ready"' not in first:
        raise RuntimeError(f"{tree.name}: no ready line: {first!r}\n{err.decode()[-2000:]}")
    reload = [line for line in err.decode().splitlines() if "journal: reloaded" in line]
    return took, cpu, (reload[0].split("journal: ", 1)[1] if reload else "")


def measure(
    trees: list[Tree], workloads: int, rounds: int, log: Callable[[str], None] = print
) -> dict[tuple[str, str, str], list[float]]:
    """(tree, case, "wall" or "cpu") → seconds to ready, rounds alternating between the
    trees."""
    from nvpair_wm.clusterdir import init_cluster

    times: dict[tuple[str, str, str], list[float]] = {}
    scratch = Path(tempfile.mkdtemp(prefix="nvpair-bench-startup-"))
    for tree in trees:
        warm(tree)
    try:
        for case in cases(workloads):
            pristine: dict[str, tuple[Path, Path]] = {}
            for index, tree in enumerate(trees):
                node = init_cluster(scratch / f"{case.name}-{index}", ["node-a", "node-b"])
                node_dir = node["node-a"]
                written = case.local or case.forwarded or case.tail
                if written and not write_journal(tree, node_dir, case):
                    log(f"  {tree.name}: cannot write case {case.name} (skipped)")
                    continue
                copy = node_dir.parent / "journal.pristine"
                if (node_dir / "journal.log").exists():
                    shutil.copyfile(node_dir / "journal.log", copy)
                pristine[tree.name] = (node_dir, copy)
            for _ in range(rounds):
                for tree in trees:
                    if tree.name not in pristine:
                        continue
                    node_dir, copy = pristine[tree.name]
                    if copy.exists():
                        shutil.copyfile(copy, node_dir / "journal.log")
                    took, cpu, line = time_to_ready(tree, node_dir)
                    times.setdefault((tree.name, case.name, "wall"), []).append(took)
                    times.setdefault((tree.name, case.name, "cpu"), []).append(cpu)
                    log(f"  {case.name:10} {tree.name:28} {took:7.3f} s ({cpu:.3f} s CPU)  {line}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return times


def run(ctx: Context) -> BenchResult:
    res = BenchResult(NAME, DESCRIPTION)
    workloads = ctx.size(200_000, 50_000)
    rounds = max(2, ctx.reps // 2) if not ctx.quick else 2
    scratch = Path(tempfile.mkdtemp(prefix="nvpair-bench-startup-tree-"))
    try:
        trees = [THIS_TREE]
        spec = ctx.baseline or os.environ.get("BENCH_STARTUP_BASELINE")
        if spec:
            trees.insert(0, baseline_tree(spec, scratch))
        times = measure(trees, workloads, rounds, ctx.log)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    res.params.update({"workloads": workloads, "rounds": rounds, "baseline": spec or "none"})
    for (tree, case, clock), samples in times.items():
        unit = "s to ready" if clock == "wall" else "CPU s to ready"
        res.measurements.append(
            Measurement(f"{tree}:{case}:{clock}", f"{tree}: {case}", unit, samples, False)
        )
    full = times.get(("this tree", "full", "wall"))
    if full:
        res.checks.append(
            Check(
                f"ready with a full table ({workloads:,} workloads)",
                statistics.median(full),
                "s",
                f"<= {READY_BUDGET_S:g}",
                statistics.median(full) <= READY_BUDGET_S,
                f"median of {len(full)}",
            )
        )
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n")[0])
    p.add_argument("--baseline", metavar="COMMIT|DIR", help="also start this tree, alternately")
    p.add_argument("--workloads", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="nvpair-bench-startup-tree-"))
    try:
        trees = [THIS_TREE]
        if args.baseline:
            trees.insert(0, baseline_tree(args.baseline, scratch))
        times = measure(trees, args.workloads, args.rounds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for clock in ("wall", "cpu"):
        what = "seconds" if clock == "wall" else "CPU seconds"
        print(f"\n{what} from spawn to ready, median of {args.rounds} (min .. max):")
        for case in cases(args.workloads):
            row = []
            for tree in trees:
                samples = times.get((tree.name, case.name, clock))
                if samples:
                    row.append(
                        f"{tree.name} {statistics.median(samples):.3f} "
                        f"({min(samples):.3f} .. {max(samples):.3f})"
                    )
                else:
                    row.append(f"{tree.name} -")
            ratio = ""
            if len(trees) == 2 and all((t.name, case.name, clock) in times for t in trees):
                old, new = (statistics.median(times[(t.name, case.name, clock)]) for t in trees)
                ratio = f"  ratio {old / new:.2f}x"
            print(f"  {case.label:52} " + "; ".join(row) + ratio)
    return 0


if __name__ == "__main__":
    sys.exit(main())
