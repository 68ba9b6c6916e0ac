"""Two versions of the workload table and the journal's append, side by side in one process.

``python -m bench.table_ab OLD_TREE NEW_TREE [READS] [REPS]`` loads ``src/nvpair_wm/dedup.py``
and ``src/nvpair_wm/journal.py`` (or the installed journal package) of each tree (e.g. a ``git
archive`` of main and of a branch) and gives each its own node A (``Dispatcher.local_lines``
then ``Journal.append``, per read of 256 lines from the broker) and node B (``Dispatcher.peer``
on the same 256 frames as one batch), with the propagation bench's lines (every line a new
workload). Both tables are first filled past their 200,000-workload cap, then READS reads per
version alternate, REPS times: the same load on both, so the paired differences show what a
shared, noisy machine hides between runs. Prints CPU µs per event (thread time), medians of the
reads, and the median paired difference."""

# ruff: noqa: PLC0415

from __future__ import annotations

import importlib.util
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.frames import event_templates

LINES = 256  # lines per read (the propagation bench's CHUNK)
FILL = 250_000  # events before measuring: past the table's cap


def _load(tree: str, name: str, tag: str) -> ModuleType:
    """The tree's ``nvpair_wm/NAME.py`` under its own name; a package (the journal since it is
    one) is the installed one's: its modules import each other by absolute name."""
    if not Path(f"{tree}/src/nvpair_wm/{name}.py").exists():
        return importlib.import_module(f"nvpair_wm.{name}")
    spec = importlib.util.spec_from_file_location(
        f"{name}_{tag}", f"{tree}/src/nvpair_wm/{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class _Version:
    tag: str
    a: Any  # Dispatcher of node A
    b: Any  # Dispatcher of node B
    journal: Any
    next_id: int
    us_a: list[float] = field(default_factory=list)
    us_b: list[float] = field(default_factory=list)


def main(argv: list[str]) -> None:
    from nvpair_wm.dispatch import Dispatcher

    old, new = argv[0], argv[1]
    reads = int(argv[2]) if len(argv) > 2 else 40
    reps = int(argv[3]) if len(argv) > 3 else 15
    templates = event_templates(origin="node-a", run_id="r-bench-propagation")

    def lines(k0: int) -> list[bytes]:
        return [(templates[k % 5] % k).encode() for k in range(k0, k0 + LINES)]

    versions = []
    for i, (tag, tree) in enumerate((("old", old), ("new", new))):
        dedup, journal = _load(tree, "dedup", tag), _load(tree, "journal", tag)
        limits = dedup.TableLimits()
        directory = Path(tempfile.mkdtemp(prefix=f"bench-table-ab-{tag}-"))
        opened, _ = journal.open_journal(
            directory, journal.JournalLimits(compact_min_records=10**9), limits, time.time()
        )
        a = Dispatcher(dedup.WorkloadTable(limits), lambda: None)  # type: ignore[arg-type, return-value]
        b = Dispatcher(dedup.WorkloadTable(limits), lambda: None)  # type: ignore[arg-type, return-value]
        versions.append(_Version(tag, a, b, opened, (i + 1) * 10**11))

    def step(v: _Version) -> tuple[float, float]:
        batch = lines(v.next_id)
        body = b"[" + b",".join(batch) + b"]"
        v.next_id += LINES
        t0 = time.thread_time()
        v.journal.append(v.a.local_lines(batch).outbound, time.time())
        t1 = time.thread_time()
        v.b.peer(body)
        t2 = time.thread_time()
        if v.journal.size > 150 << 20:  # keeps the file bounded, outside the timed part
            v.journal.compact(time.time())
        return (t1 - t0) / LINES * 1e6, (t2 - t1) / LINES * 1e6

    for _ in range(0, FILL, LINES):
        for v in versions:
            step(v)
    for _ in range(reps):
        for v in versions:
            runs = [step(v) for _ in range(reads)]
            v.us_a.append(statistics.median(x for x, _ in runs))
            v.us_b.append(statistics.median(y for _, y in runs))
    for v in versions:
        print(
            f"{v.tag}: A {statistics.median(v.us_a):.3f} µs/event, "
            f"B {statistics.median(v.us_b):.3f} µs/event (medians of {reps} x {reads} reads)"
        )
        v.journal.close()
    o, n = versions
    da = statistics.median(y - x for x, y in zip(o.us_a, n.us_a, strict=True))
    db = statistics.median(y - x for x, y in zip(o.us_b, n.us_b, strict=True))
    print(f"paired new - old: A {da:+.3f} µs/event, B {db:+.3f} µs/event")


if __name__ == "__main__":
    main(sys.argv[1:])
