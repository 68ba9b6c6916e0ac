"""The journal's costs: per event on the broker path, per fsync, per compaction and per start.

* ``append`` - the daemon's path for one broker line (``Dispatcher.local``, then what
  ``Node.publish`` does: ``Journal.append``, one ``os.write`` per line; compaction when due, as
  the node's timer does, so its amortised cost is included) against the same lines without the
  journal. The difference, per applied event, is what the journal costs the broker path.
  Alone: ``Journal.append`` on prepared outbound items, one event per write (the worst case) and
  64 per write (a busy broker's batched line).
* ``relayed`` - the peer path: ``Dispatcher.peer`` for one event per request (what a peer
  sends at a low rate), then what the node's journal does with what it forwarded to the broker
  (``Journal.append_forwarded`` held for later, then ``Journal.flush`` as the broker channel
  calls it before its write: one forwarded-batch record and one ``os.write`` per request, the
  worst case: one request per write to the broker, as with one request in flight),
  against the same requests without the journal (what a relayed event cost before issue 24,
  whose journal kept nothing of it). The difference, per forwarded event, is what keeping the
  broker's view across a restart costs.
* ``fsync`` - the group commit: one ``os.fsync`` after 1,000 appended events (wall time: it
  waits for the disk).
* ``compact`` / ``start`` - rewriting a file of N workloads (3 events each, appended) folded to
  N records, and a start: ``open_journal`` (read, check, compact) plus ``reload_table``.

Files live in a temporary directory on the filesystem of ``$TMPDIR`` (reported), removed after.
"""

# ruff: noqa: PLC0415

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import BenchResult, Case, Check, Context, Measurement, Skip, measure_rates

NAME = "journal"
DESCRIPTION = "journal: µs per event on the broker path, fsync, compaction and start"

APPEND_BUDGET_US = 20.0  # the bound this module holds the journal to, per event (CPU)
WALL = 1_800_000_000.0


def _lines(n: int) -> list[bytes]:
    from bench.frames import stream

    return [line + b"\n" for line, _ in stream(n, seed=7, remove_rate=0.05)]


class _Dirs:
    """Fresh directories for the passes, each removed when the next one is made."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.last: Path | None = None

    def fresh(self) -> Path:
        if self.last is not None:
            shutil.rmtree(self.last, ignore_errors=True)
        self.last = Path(tempfile.mkdtemp(dir=self.root))
        return self.last


def run(ctx: Context) -> BenchResult:
    try:
        from nvpair_wm.journal import JournalLimits, open_journal, reload_table
    except ImportError as exc:
        raise Skip(f"nvpair_wm.journal not importable: {exc}") from exc
    from bench.codec_impls import make_dispatcher
    from nvpair_wm.dedup import TableLimits, WorkloadTable

    res = BenchResult(NAME, DESCRIPTION)
    n = ctx.size(20_000, 4_000)
    lines = _lines(n)
    limits = JournalLimits()
    table_limits = TableLimits()
    root = Path(tempfile.mkdtemp(prefix="nvpair-wm-bench-journal-"))
    fs = os.statvfs(root)
    res.params.update(
        {"lines": n, "tmpdir": str(root.parent), "fs_block": fs.f_bsize, "limits": str(limits)}
    )
    dirs = _Dirs(root)
    try:
        # How many lines produce events (duplicates produce none), and the outbound items.
        disp = make_dispatcher(clock=lambda: 1000.0)
        outs = [disp.local(line).outbound for line in lines]
        events = sum(map(len, outs))
        flat = [o for batch in outs for o in batch]
        batches64 = [flat[i : i + 64] for i in range(0, len(flat), 64)]

        def plain_setup() -> Any:
            return make_dispatcher(clock=lambda: 1000.0)

        def plain(d: Any) -> None:
            for line in lines:
                d.local(line)

        def journaled_setup() -> Any:
            journal, _ = open_journal(dirs.fresh(), limits, table_limits, WALL)
            assert journal is not None
            return make_dispatcher(clock=lambda: 1000.0), journal

        def journaled(state: Any) -> None:
            d, journal = state
            for i, line in enumerate(lines):
                out = d.local(line).outbound
                if out:
                    journal.append(out, WALL)
                if i % 1000 == 999 and journal.compaction_due(WALL):
                    journal.compact(WALL)
            journal.close()

        def alone_setup() -> Any:
            journal, _ = open_journal(dirs.fresh(), limits, table_limits, WALL)
            assert journal is not None
            return journal

        def alone(batches: list[Any]) -> Any:
            def go(journal: Any) -> None:
                for batch in batches:
                    journal.append(batch, WALL)
                journal.close()

            return go

        cases = [
            Case("plain", "Dispatcher.local, no journal", plain, plain_setup, work=events),
            Case(
                "journaled",
                "Dispatcher.local + Journal.append (+ compaction)",
                journaled,
                journaled_setup,
                work=events,
                role="subject",
            ),
            Case("append1", "Journal.append, 1 event per write", alone(outs), alone_setup, events),
            Case("append64", "Journal.append, 64 per write", alone(batches64), alone_setup, events),
        ]
        rates = measure_rates(cases, ctx, unit="events/s", min_rep_seconds=0.2)
        per_event: dict[str, list[float]] = {}
        for m in rates:
            us = [1e6 / r for r in m.samples]
            per_event[m.key] = us
            res.measurements.append(
                Measurement(
                    m.key,
                    m.label,
                    "µs/event (CPU)",
                    us,
                    higher_is_better=False,
                    role=m.role,
                    note=m.note,
                    wall=[1e6 / r for r in m.wall],
                )
            )
        relay = _relay_cases(lines, dirs, limits, table_limits, open_journal)
        for m in measure_rates(relay, ctx, unit="events/s", min_rep_seconds=0.2):
            us = [1e6 / r for r in m.samples]
            per_event[m.key] = us
            res.measurements.append(
                Measurement(
                    m.key,
                    m.label,
                    "µs/event (CPU)",
                    us,
                    False,
                    m.role,
                    m.note,
                    [1e6 / r for r in m.wall],
                )
            )
        relay_cost = [
            j - p
            for j, p in zip(per_event["relay_journaled"], per_event["relay_plain"], strict=True)
        ]
        res.measurements.append(
            Measurement(
                "relay_cost",
                "journal's cost per event forwarded to the broker",
                "µs/event (CPU)",
                relay_cost,
                False,
            )
        )
        cost = [j - p for j, p in zip(per_event["journaled"], per_event["plain"], strict=True)]
        res.measurements.append(
            Measurement("cost", "journal's cost on the broker path", "µs/event (CPU)", cost, False)
        )
        res.checks.append(
            Check(
                "journal cost per event on the broker path",
                statistics.median(cost),
                "µs",
                f"< {APPEND_BUDGET_US:g}",
                statistics.median(cost) < APPEND_BUDGET_US,
                f"{events} events in {n} lines",
            )
        )

        # fsync after 1,000 events: wall clock (it waits for the device).
        journal, _ = open_journal(dirs.fresh(), limits, table_limits, WALL)
        assert journal is not None
        syncs: list[float] = []
        for rep in range(ctx.reps):
            journal.append(flat[rep * 1000 % len(flat) :][:1000], WALL)
            t0 = time.perf_counter()
            journal.sync()
            syncs.append((time.perf_counter() - t0) * 1e3)
        journal.close()
        res.measurements.append(
            Measurement("fsync", "fsync after 1,000 events (group commit)", "ms", syncs, False)
        )

        # Compaction and start with N workloads written as 3N appended records.
        workloads = ctx.size(20_000, 5_000)
        compact_ms: list[float] = []
        start_ms: list[float] = []
        records = 0
        for _ in range(ctx.reps):
            d = make_dispatcher(clock=lambda: 1000.0)
            where = dirs.fresh()
            journal, _ = open_journal(where, limits, table_limits, WALL)
            assert journal is not None
            for line in _stream_workloads(workloads):
                out = d.local(line).outbound
                if out:
                    journal.append(out, WALL)
            records = journal._appended  # what the compaction reads
            t0 = time.perf_counter()
            journal.compact(WALL)
            compact_ms.append((time.perf_counter() - t0) * 1e3)
            journal.close()
            t0 = time.perf_counter()
            again, kept = open_journal(where, limits, table_limits, WALL)
            reload_table(WorkloadTable(table_limits), kept, 1000.0, WALL)
            start_ms.append((time.perf_counter() - t0) * 1e3)
            assert again is not None and len(kept) == workloads
            again.close()
        res.measurements += [
            Measurement(
                "compact",
                f"compaction: {records:,} records → {workloads:,}",
                "ms",
                compact_ms,
                False,
            ),
            Measurement(
                "start", f"start: open + reload {workloads:,} workloads", "ms", start_ms, False
            ),
        ]
        res.notes.append(
            f"files in {root.parent} (block {fs.f_bsize} B); compaction cost per record read: "
            f"{statistics.median(compact_ms) * 1e3 / records:.2f} µs"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return res


def _relay_cases(
    lines: list[bytes], dirs: _Dirs, limits: Any, table_limits: Any, open_journal: Any
) -> list[Case]:
    """The peer path with and without the journal of what it forwards (module docstring)."""
    from bench.codec_impls import make_dispatcher

    bodies = [line.rstrip(b"\n") for line in lines]
    probe = make_dispatcher(clock=lambda: 1000.0)
    forwarded = sum(len(probe.peer(body).forwarded) for body in bodies)

    def plain_setup() -> Any:
        return make_dispatcher(clock=lambda: 1000.0)

    def plain(d: Any) -> None:
        for body in bodies:
            d.peer(body)

    def journaled_setup() -> Any:
        journal, _ = open_journal(dirs.fresh(), limits, table_limits, WALL)
        assert journal is not None
        return make_dispatcher(clock=lambda: 1000.0), journal

    def journaled(state: Any) -> None:
        d, journal = state
        for body in bodies:
            result = d.peer(body)
            if result.forwarded:  # the node, then its broker channel before writing the lines
                journal.append_forwarded(result.forwarded, WALL, later=True)
                journal.flush()
        journal.close()

    return [
        Case("relay_plain", "Dispatcher.peer, no journal", plain, plain_setup, work=forwarded),
        Case(
            "relay_journaled",
            "Dispatcher.peer + Journal.append_forwarded, flush",
            journaled,
            journaled_setup,
            work=forwarded,
            role="subject",
        ),
    ]


def _stream_workloads(n: int) -> list[bytes]:
    """Three events (submitted, started, completed) for each of n workloads, as broker lines."""
    import json

    out = []
    for i in range(n):
        for seq, method in enumerate(("submitted", "started", "completed"), start=1):
            info = {
                "id": f"w{i}",
                "model": "llama-3.1-8b-instruct",
                "engine": "vllm",
                "runId": "r-5f2c9a17",
                "state": "queued",
                "originatedFrom": "node-a",
                "createdAt": 1_764_690_000_000 + i,
                "startedAt": None,
                "completedAt": None,
                "error": None,
                "seq": seq,
            }
            frame = {
                "jsonrpc": "2.0",
                "method": f"workload:{method}",
                "params": {"workloadInfo": info},
            }
            out.append(json.dumps(frame).encode() + b"\n")
    return out
