"""Memory: bytes of RSS per tracked workload, and RSS over a long run with expiry on.

Each repetition runs in a fresh interpreter (``python -m bench.memory WORKER ARGS``) so that
nothing measured earlier in the run, in this process, inflates or hides the numbers. The workers
are deterministic (fixed seeds, simulated time) and memory does not care about CPU contention,
so they run two at a time.

* ``fill`` - RSS before and after filling the workload table with N distinct workloads through
  the real path: ``Dispatcher.peer`` (remote workloads: the table keeps the dedup key and seq)
  and ``Dispatcher.local`` (workloads this node originated: the table also keeps the newest
  WorkloadInfo, for replay to peers that reconnect). Frames are made on the fly from a template
  and dropped after use, so only what the table retains is counted. Before the baseline RSS is
  read, 2,000 workloads warm the allocator up and the collector runs. A second run of each with
  tracemalloc is the cross-check: it counts Python allocations only (no allocator overhead or
  slack), so RSS should be at or above it.
* ``soak`` - 1,000,000 peer events (new workloads keep arriving, ~3 events each, 10 % duplicates,
  5 % of finished workloads removed) with the daemon's default table limits and expiry called
  every simulated second, as the node does. Simulated time runs so that the terminal TTL has
  elapsed at 25 % of the run; RSS is sampled every 100,000 events; "growth" is the RSS change
  from 40 % of the run (the end of warm-up) to the end, and the least-squares slope over those
  samples. Each sample also records ``sys.getallocatedblocks()`` (live Python allocations,
  independent of what the C allocator does with its pages). The soak runs as the daemon does,
  with glibc's mmap threshold pinned at startup (``nvpair_wm.allocator``), and again with
  glibc's dynamic default as the baseline, which separates growth of the Python heap from the
  allocator's own settling.

Issue targets: < 500 B per tracked workload at 100,000 workloads; flat RSS after warm-up.
"""

# Imports of nvpair_wm are deferred on purpose: this module must import (and skip) before the
# modules it measures exist, and its workers import them in a fresh interpreter.
# ruff: noqa: PLC0415

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.harness import (
    MIN_REPS,
    ROOT,
    BenchResult,
    Check,
    Context,
    Measurement,
    Skip,
    fmt,
    rss_bytes,
)

NAME = "memory"
DESCRIPTION = "RSS per tracked workload at 100k workloads; RSS over 1M events with expiry"

PER_WORKLOAD_TARGET = 500.0
FLAT_TOLERANCE = 0.02  # growth after warm-up within 2 % of RSS counts as flat
WARMUP_WORKLOADS = 2_000
WARMUP_SHARE = 0.4  # soak: the end of warm-up, as a share of the run
PATHS = ("peer", "local")


# ------------------------------------------------------------------------------------- workers


def _fill(n: int, path: str, trace: bool) -> dict[str, Any]:
    import tracemalloc

    from bench.codec_impls import make_dispatcher
    from bench.frames import stream
    from nvpair_wm.dedup import TableLimits

    limits = TableLimits(max_workloads=max(200_000, 2 * n))
    disp = make_dispatcher(limits, clock=lambda: 1000.0)
    handle = disp.peer if path == "peer" else disp.local
    table = disp.table
    warm = stream(None, seed=1)
    for line, _ in warm:  # warm-up: allocator, caches, dict growth below the measured range
        handle(line)
        if len(table) >= WARMUP_WORKLOADS:
            break
    gc.collect()
    base_n = len(table)
    rss0 = rss_bytes()
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    frames = 0
    for line, _ in stream(None, seed=2, start_id=10_000_000):
        handle(line)
        frames += 1
        if len(table) >= base_n + n:
            break
    seconds = time.perf_counter() - t0
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] if trace else None
    rss1 = rss_bytes()
    tracked = len(table) - base_n
    return {
        "path": path,
        "workloads": tracked,
        "frames": frames,
        "rss_before": rss0,
        "rss_after": rss1,
        "rss_per_workload": (rss1 - rss0) / tracked,
        "traced_per_workload": None if traced is None else traced / tracked,
        "seconds": seconds,
    }


def _soak(
    events: int, every: int, ttl_events: int | None = None, daemon_malloc: bool = True
) -> dict[str, Any]:
    from bench.codec_impls import make_dispatcher
    from bench.frames import stream
    from nvpair_wm.dedup import TableLimits

    if daemon_malloc:  # as nvpair-wm's cli.main does at startup
        from nvpair_wm.allocator import pin_mmap_threshold

        pin_mmap_threshold()
    limits = TableLimits()  # the daemon's defaults, expire interval included
    # Simulated seconds per event: the terminal TTL has elapsed after ``ttl_events`` events
    # (by default 25 % of the run).
    dt = limits.terminal_ttl / (ttl_events or 0.25 * events)
    now = [0.0]
    disp = make_dispatcher(limits, clock=lambda: now[0])
    table = disp.table
    peer = disp.peer
    next_expiry = limits.expire_interval  # the daemon's expire() timer, in simulated seconds
    samples = [
        {
            "events": 0,
            "rss": rss_bytes(),
            "blocks": sys.getallocatedblocks(),
            "workloads": 0,
            "tombstones": 0,
        }
    ]
    expired = 0
    t0 = time.perf_counter()
    for i, (line, _) in enumerate(stream(events, seed=3, remove_rate=0.05), 1):
        now[0] += dt
        if now[0] >= next_expiry:
            expired += table.expire(now[0])
            next_expiry += limits.expire_interval
        peer(line)
        if i % every == 0:
            samples.append(
                {
                    "events": i,
                    "rss": rss_bytes(),
                    "blocks": sys.getallocatedblocks(),
                    "workloads": len(table),
                    "tombstones": table.tombstones,
                }
            )
    return {
        "events": events,
        "simulated_seconds": now[0],
        "events_per_simulated_second": 1 / dt,
        "terminal_ttl": limits.terminal_ttl,
        "expired": expired,
        "evicted": table.evicted,
        "samples": samples,
        "seconds": time.perf_counter() - t0,
    }


def _worker(argv: list[str]) -> None:
    kind, args = argv[0], json.loads(argv[1])
    out = _fill(**args) if kind == "fill" else _soak(**args)
    sys.stdout.write(json.dumps(out) + "\n")


def _spawn(kind: str, env: dict[str, str] | None = None, **args: Any) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.memory", kind, json.dumps(args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memory worker {kind} {args} failed:\n{proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


# ----------------------------------------------------------------------------------- benchmark


def _slope(xs: list[float], ys: list[float]) -> float:
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


# glibc raises its mmap threshold each time a large mmapped block is freed, so later large
# blocks (the table's dict arrays, on resize) come from the heap instead, which grows in steps
# until it fits the largest pattern. The daemon pins the threshold at startup
# (nvpair_wm.allocator); the baseline row runs the same soak with glibc's dynamic default.


def run(ctx: Context) -> BenchResult:
    try:
        import nvpair_wm.dedup
        import nvpair_wm.dispatch  # noqa: F401
    except ImportError as exc:
        raise Skip(f"nvpair_wm.dispatch / dedup not importable: {exc}") from exc

    res = BenchResult(NAME, DESCRIPTION)
    n = ctx.size(100_000, 20_000)
    events = ctx.size(1_000_000, 100_000)
    every = events // 10
    # Every worker is deterministic (fixed seeds, simulated time): repetitions show that, and
    # MIN_REPS of them are enough. tracemalloc (6x slower) and the allocator variant are
    # cross-checks and run twice (once with --quick).
    reps, extra = MIN_REPS, (1 if ctx.quick else 2)
    res.params.update({"workloads": n, "soak_events": events, "sample_every": every, "reps": reps})
    jobs: list[tuple[str, str, dict[str, Any]]] = []
    for _ in range(extra):  # slowest first
        jobs += [(f"{p}_traced", "fill", {"n": n, "path": p, "trace": True}) for p in PATHS]
    for _ in range(reps):
        jobs += [(p, "fill", {"n": n, "path": p, "trace": False}) for p in PATHS]
        jobs.append(("soak", "soak", {"events": events, "every": every}))
    glibc_default = {"events": events, "every": every, "daemon_malloc": False}
    jobs += [("soak_mmap", "soak", glibc_default)] * extra
    # Memory does not care about CPU contention: use every core (results stay in job order).
    workers = max(1, min(len(os.sched_getaffinity(0)), 4))
    ctx.log(f"memory: {len(jobs)} fresh interpreters, {workers} at a time")
    with ThreadPoolExecutor(workers) as pool:
        outs = list(pool.map(lambda j: _spawn(j[1], **j[2]), jobs))
    runs: dict[str, list[dict[str, Any]]] = {}
    for (key, _, _), out in zip(jobs, outs, strict=True):
        runs.setdefault(key, []).append(out)

    labels = {
        "peer": "remote workloads (Dispatcher.peer): RSS",
        "local": "own workloads (Dispatcher.local, info kept): RSS",
        "peer_traced": "remote workloads: tracemalloc (cross-check)",
        "local_traced": "own workloads: tracemalloc (cross-check)",
    }
    for key, label in labels.items():
        field = "traced_per_workload" if key.endswith("_traced") else "rss_per_workload"
        r = runs[key]
        res.measurements.append(
            Measurement(
                key,
                label,
                "B/workload",
                [x[field] for x in r],
                higher_is_better=False,
                role="info" if key.endswith("_traced") else "subject",
                note=f"{r[0]['frames']} frames for {r[0]['workloads']} workloads",
            )
        )
    for key in PATHS:
        m = res.get(key)
        res.checks.append(
            Check(
                f"RSS per {'remote' if key == 'peer' else 'own'} workload at {n:,}",
                m.median,
                "B",
                f"< {PER_WORKLOAD_TARGET:.0f}",
                m.median < PER_WORKLOAD_TARGET,
                f"tracemalloc {fmt(res.get(key + '_traced').median)} B; "
                f"{100 * (m.median / PER_WORKLOAD_TARGET - 1):+.0f} % vs target",
                meaning="a workload costs more memory than budgeted: the table at its cap "
                "(200,000 workloads) takes more RAM than planned",
            )
        )

    warm_from = int(WARMUP_SHARE * events)
    for key, label in (("soak", "as the daemon runs"), ("soak_mmap", "glibc default malloc")):
        growth, slopes, warm_rss, blocks = [], [], [], []
        for s in runs[key]:
            after = [x for x in s["samples"] if x["events"] >= warm_from]
            # The table forgets whole generations at once, so RSS is a sawtooth by design:
            # compare the high-water marks of the two halves after warm-up, not two points.
            mid = (warm_from + events) / 2
            early = max(x["rss"] for x in after if x["events"] < mid)
            late = max(x["rss"] for x in after if x["events"] >= mid)
            growth.append(float(late - early))
            warm_rss.append(float(after[0]["rss"]))
            blocks.append(float(after[-1]["blocks"] - after[0]["blocks"]))
            xs = [x["events"] for x in after]
            slopes.append(_slope(xs, [x["rss"] for x in after]) * 100_000)
        role: Any = "subject" if key == "soak" else "info"
        span = f"{warm_from:,} -> {events:,} events"
        res.measurements += [
            Measurement(
                f"{key}_growth",
                f"soak, {label}: RSS high-water growth, {span}",
                "B",
                growth,
                higher_is_better=False,
                role=role,
            ),
            Measurement(
                f"{key}_slope",
                f"soak, {label}: RSS slope after warm-up",
                "B/100k events",
                slopes,
                higher_is_better=False,
            ),
            Measurement(
                f"{key}_blocks",
                f"soak, {label}: allocated blocks growth, {span}",
                "blocks",
                blocks,
                higher_is_better=False,
            ),
            Measurement(
                f"{key}_rss",
                f"soak, {label}: RSS at the end of warm-up",
                "B",
                warm_rss,
                higher_is_better=False,
            ),
        ]
    g, w = res.get("soak_growth").median, res.get("soak_rss").median
    gm, wm = res.get("soak_mmap_growth").median, res.get("soak_mmap_rss").median
    res.checks.append(
        Check(
            "RSS growth after warm-up (as the daemon runs)",
            g,
            "B",
            f"flat (within {FLAT_TOLERANCE:.0%} of RSS)",
            abs(g) <= FLAT_TOLERANCE * w,
            f"{100 * g / w:+.2f} % of {fmt(w)} B; with glibc's default malloc "
            f"{100 * gm / wm:+.2f} %; allocated blocks {res.get('soak_blocks').median:+,.0f}",
            meaning="memory keeps growing under a steady load (a leak or an unbounded "
            "structure): a long-running daemon would grow until restarted",
        )
    )
    res.params["runs"] = runs
    first, glibc = runs["soak"][0], runs["soak_mmap"][0]
    res.tables.append(
        {
            "title": "soak, first repetition: RSS (as the daemon runs, glibc default malloc), "
            "allocated blocks and table size per sample",
            "columns": ["events", "RSS MiB", "RSS MiB glibc", "blocks", "workloads", "tombstones"],
            "rows": [
                [
                    f"{x['events']:,}",
                    f"{x['rss'] / 2**20:.1f}",
                    f"{y['rss'] / 2**20:.1f}",
                    f"{x['blocks']:,}",
                    f"{x['workloads']:,}",
                    f"{x['tombstones']:,}",
                ]
                for x, y in zip(first["samples"], glibc["samples"], strict=True)
            ],
        }
    )
    res.notes.append(
        f"fill: {n:,} distinct workloads beyond a {WARMUP_WORKLOADS:,}-workload warm-up, one "
        "fresh interpreter per repetition; RSS from /proc/self/statm after gc.collect()"
    )
    res.notes.append(
        f"soak: {events:,} peer events at {first['events_per_simulated_second']:.0f} "
        f"events per simulated second, terminal TTL {first['terminal_ttl']:.0f} s (elapsed at "
        f"25 % of the run), expiry every simulated second, warm-up until {warm_from:,} events; "
        f"{first['expired']:,} entries expired, {first['evicted']:,} evicted; "
        f"{first['seconds']:.1f} s of wall time per repetition"
    )
    res.notes.append(
        "'blocks' is sys.getallocatedblocks(): live Python allocations, whatever the allocator "
        "does with the pages; the daemon pins glibc's mmap threshold at startup "
        "(nvpair_wm.allocator), the 'glibc default' rows run the same soak without it"
    )
    return res


if __name__ == "__main__":
    _worker(sys.argv[1:])
