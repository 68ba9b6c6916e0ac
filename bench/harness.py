"""The benchmark harness: timing, statistics, ratios, targets, the table and the JSON report.

Every benchmark is one module under ``bench/`` exposing::

    NAME: str            # the name used by ``--only``
    DESCRIPTION: str     # one line: what it measures
    def run(ctx: Context) -> BenchResult

A benchmark measures its subject and its baselines in the same process and the same run, on the
same inputs, with warm-up passes excluded and at least ``MIN_REPS`` repetitions; it reports
every repetition (so medians and spread can be recomputed), the ratios against named baselines
and the issue's targets. It raises :class:`Skip` when something it needs does not exist yet.
Benchmarks never fail anything: a missed target is reported, not raised.
"""

from __future__ import annotations

import gc
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
MIN_REPS = 5
# How a measurement enters the comparison: the thing measured, what it is compared to, or context.
Role = Literal["subject", "baseline", "info"]

# Registry: benchmark name -> module; the order here is the order in which they run and are
# printed. ``scale`` comes last: it computes from the measurements of the others.
BENCHMARKS: dict[str, str] = {
    "codec": "bench.codec",
    "memory": "bench.memory",
    "local_channel": "bench.local_channel",
    "internode": "bench.internode",
    "realpeer": "bench.realpeer",
    "propagation": "bench.propagation",
    "journal": "bench.journal",
    "startup": "bench.startup",
    "scale": "bench.scale",
    "members": "bench.members",
}


# Seconds each benchmark takes on an idle 2-vCPU machine (full, quick), from recorded runs;
# `python -m bench` prints the sum before it starts and compares at the end.
ESTIMATE_SECONDS: dict[str, tuple[float, float]] = {
    "codec": (93, 17),
    "memory": (94, 11),
    "local_channel": (30, 4),
    "internode": (72, 25),
    "realpeer": (110, 50),
    "propagation": (62, 19),
    "scale": (6, 1),
    "members": (240, 60),
}


def estimate(names: Iterable[str], quick: bool) -> float:
    """Expected seconds for these benchmarks (unknown ones count 30 s full, 10 s quick)."""
    return sum(ESTIMATE_SECONDS.get(n, (30, 10))[1 if quick else 0] for n in names)


class Skip(Exception):
    """Raised by a benchmark that cannot run here (a module it measures does not exist yet)."""


@dataclass
class Context:
    quick: bool
    reps: int
    warmup: int
    log: Callable[[str], None] = print
    baseline: str | None = None  # a commit or directory to measure beside this tree
    # Results of the benchmarks already run in this invocation (``scale`` reads them).
    results: dict[str, BenchResult] = field(default_factory=dict)

    def size(self, full: int, quick: int) -> int:
        return quick if self.quick else full


class Benchmark(Protocol):
    NAME: str
    DESCRIPTION: str

    def run(self, ctx: Context) -> BenchResult: ...


# ------------------------------------------------------------------------------------ statistics


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (the same as numpy's default)."""
    if not sorted_xs:
        return math.nan
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass
class Measurement:
    """One quantity measured ``len(samples)`` times (warm-up already excluded)."""

    key: str  # short id used by ratios: "ours", "jsonschema", ...
    label: str  # what a reader sees in the table
    unit: str  # "frames/s", "ns/frame", "B/workload", ...
    samples: list[float]
    higher_is_better: bool = True
    role: Role = "info"
    note: str = ""
    wall: list[float] = field(default_factory=list)  # the same, by wall clock, when timed

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else math.nan

    def summary(self) -> dict[str, float]:
        xs = sorted(self.samples)
        q1, q3 = quantile(xs, 0.25), quantile(xs, 0.75)
        med = self.median
        return {
            "median": med,
            "min": xs[0] if xs else math.nan,
            "max": xs[-1] if xs else math.nan,
            "q1": q1,
            "q3": q3,
            "iqr_pct": 100.0 * (q3 - q1) / med if med else math.nan,
            "n": len(xs),
            "wall_median": statistics.median(self.wall) if self.wall else math.nan,
        }


@dataclass
class Ratio:
    """How many times better the subject is than a baseline, by medians (>1: subject better)."""

    subject: str
    baseline: str
    value: float
    target: float | None = None  # minimum acceptable value, from the issue
    low: float = math.nan  # worst-case ratio from the spread (subject min vs baseline max)
    high: float = math.nan
    meaning: str = ""  # what a miss means, for the closing summary
    name: str = ""  # a short name for the summary; default "<subject> vs <baseline>"

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.value >= self.target


@dataclass
class Check:
    """An absolute target from the issue (e.g. < 500 B per workload)."""

    what: str
    value: float
    unit: str
    target: str  # human-readable, e.g. "< 500"
    met: bool | None
    note: str = ""
    meaning: str = ""  # what a miss means, for the closing summary


@dataclass(frozen=True)
class Target:
    """One target as the closing summary shows it: every benchmark's ratios with a target and
    its checks become these (``BenchResult.targets``), whatever the benchmark measures."""

    benchmark: str
    name: str
    measured: str
    threshold: str
    met: bool | None
    meaning: str


MISS_MEANING = "below the target on this run (see bench/README.md, What the figures depend on)"


@dataclass
class BenchResult:
    name: str
    description: str
    measurements: list[Measurement] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Extra tables for the console: {"title": str, "columns": [str], "rows": [[str]]}.
    tables: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None
    seconds: float = 0.0

    def get(self, key: str) -> Measurement:
        for m in self.measurements:
            if m.key == key:
                return m
        raise KeyError(key)

    def ratio(
        self,
        subject: str,
        baseline: str,
        target: float | None = None,
        meaning: str = "",
        name: str = "",
    ) -> Ratio | None:
        """Add the ratio subject/baseline (inverted when lower is better). None if either is
        missing. ``meaning`` (what missing ``target`` means) and ``name`` are for the summary."""
        try:
            s, b = self.get(subject), self.get(baseline)
        except KeyError:
            return None
        if s.higher_is_better:
            val = s.median / b.median
            low, high = min(s.samples) / max(b.samples), max(s.samples) / min(b.samples)
        else:
            val = b.median / s.median
            low, high = min(b.samples) / max(s.samples), max(b.samples) / min(s.samples)
        r = Ratio(subject, baseline, val, target, low, high, meaning, name)
        self.ratios.append(r)
        return r

    def targets(self) -> list[Target]:
        """Every target of this benchmark: ratios that have one, then the checks."""
        out = [
            Target(
                self.name,
                r.name or f"{self.get(r.subject).label} vs {self.get(r.baseline).label}",
                f"{r.value:.2f}x",
                f">= {r.target:.3g}x",
                r.met,
                r.meaning or MISS_MEANING,
            )
            for r in self.ratios
            if r.target is not None
        ]
        out += [
            Target(
                self.name,
                c.what,
                f"{fmt(c.value)} {c.unit}",
                c.target,
                c.met,
                c.meaning or MISS_MEANING,
            )
            for c in self.checks
        ]
        return out

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["measurements"] = [{**asdict(m), **m.summary()} for m in self.measurements]
        out["ratios"] = [{**asdict(r), "met": r.met} for r in self.ratios]
        return out


# ---------------------------------------------------------------------------------------- timing


@dataclass
class Case:
    """One side of a comparison: ``setup()`` builds fresh state outside the timed region,
    ``run(state)`` is the timed work and processes ``work`` units (frames, events...)."""

    key: str
    label: str
    run: Callable[[Any], Any]
    setup: Callable[[], Any] = lambda: None
    work: int = 1
    role: Role = "info"
    note: str = ""
    warmup: int | None = None  # untimed passes; None: the context's


def _time_pass(case: Case) -> tuple[float, float]:
    """(CPU seconds of this thread, wall seconds) for one pass."""
    state = case.setup()
    w0, c0 = time.perf_counter(), time.thread_time()
    case.run(state)
    c1, w1 = time.thread_time(), time.perf_counter()
    return c1 - c0, w1 - w0


def measure_rates(
    cases: Iterable[Case],
    ctx: Context,
    *,
    unit: str,
    min_rep_seconds: float,
    per: float = 1.0,
) -> list[Measurement]:
    """Throughput of each case, in ``work / CPU-second * per``, interleaved round-robin.

    The clock is this thread's CPU time (``time.thread_time``): on a machine shared with other
    work, wall time also counts the moments the process was not running at all, which says
    nothing about the code. Wall-clock rates are kept too (``Measurement.wall``); on an idle
    machine the two agree.

    Each case gets ``ctx.warmup`` untimed passes first; the last warm-up pass calibrates how many
    passes make one repetition (at least ``min_rep_seconds``), so fast cases are not at the mercy
    of timer resolution. Repetitions are interleaved across cases (rep 1 of every case, then
    rep 2, ...) so that drift on the machine affects every side of a ratio alike. The garbage
    collector stays on (it is part of the real cost) but runs before each repetition, outside
    the timed region.
    """
    cases = list(cases)
    passes: dict[str, int] = {}
    for c in cases:
        t = 0.0
        for _ in range(max(1, ctx.warmup if c.warmup is None else c.warmup)):
            t = _time_pass(c)[0]
        passes[c.key] = max(1, math.ceil(min_rep_seconds / max(t, 1e-9)))
    samples: dict[str, list[float]] = {c.key: [] for c in cases}
    walls: dict[str, list[float]] = {c.key: [] for c in cases}
    for _ in range(ctx.reps):
        for c in cases:
            gc.collect()
            cpu = wall = 0.0
            for _ in range(passes[c.key]):
                dc, dw = _time_pass(c)
                cpu += dc
                wall += dw
            samples[c.key].append(c.work * passes[c.key] / cpu * per)
            walls[c.key].append(c.work * passes[c.key] / wall * per)
    return [
        Measurement(
            c.key,
            c.label,
            unit,
            samples[c.key],
            True,
            c.role,
            (c.note + "; " if c.note else "") + f"{passes[c.key]} pass(es) of {c.work} per rep",
            wall=walls[c.key],
        )
        for c in cases
    ]


# ------------------------------------------------------------------------------------- machinery


def pin_to_one_core() -> tuple[set[int] | None, int | None]:
    """Run on one core (the last one), so 'frames per second on one core' means that."""
    if not hasattr(os, "sched_getaffinity"):
        return None, None
    before = os.sched_getaffinity(0)
    core = max(before)
    os.sched_setaffinity(0, {core})
    return before, core


def unpin(before: set[int] | None) -> None:
    if before is not None:
        os.sched_setaffinity(0, before)


def rss_bytes() -> int:
    """Resident set size of this process, from /proc (Linux)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def git_commit() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.rstrip()

    # Only what can change the numbers: uncommitted changes elsewhere (other people's work in
    # progress, docs) do not make a run unreproducible.
    changed = git("status", "--porcelain", "--", "bench", "src", "generated", "schema")
    paths = [line[3:] for line in changed.splitlines()]
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(paths), "changed": paths[:20]}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def kernel_sched_params() -> list[str]:
    """The scheduler words of the kernel command line (``sched*``, e.g. a VM's
    ``sched_vcpu_pack=15``): they decide where a woken process runs, which the latency figures
    of two processes on two vCPUs follow (bench/README.md, What the figures depend on)."""
    try:
        words = Path("/proc/cmdline").read_text().split()
    except OSError:
        return []
    return [w for w in words if w.startswith("sched")]


def sched_params_line(params: list[str]) -> str:
    """The line the bench header and ``bench.timeline`` print for :func:`kernel_sched_params`."""
    return f"kernel scheduler parameters: {' '.join(params) if params else 'none'}"


def environment() -> dict[str, Any]:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "git": git_commit(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": {
            "nproc": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "cpu": cpu_model(),
            "platform": platform.platform(),
            "mem_total_kib": _mem_total_kib(),
            "kernel_sched_params": kernel_sched_params(),
        },
        "loadavg_at_start": loadavg(),
    }


def loadavg() -> list[float] | None:
    """1, 5 and 15 minute load averages: other work on the machine skews every number."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _mem_total_kib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


# ----------------------------------------------------------------------------------------- output


def fmt(x: float) -> str:
    if math.isnan(x):
        return "-"
    ax = abs(x)
    if ax >= 1e6:
        return f"{x / 1e6:.2f} M"
    if ax >= 1e4:
        return f"{x / 1e3:.1f} k"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def render(results: list[BenchResult], console: Any) -> None:
    for res in results:
        if res.skipped:
            console.print(f"[yellow]{res.name}: skipped[/yellow] - {res.skipped}")
            continue
        t = Table(title=f"{res.name} - {res.description}", title_justify="left")
        timed = any(m.wall for m in res.measurements)
        cols = ["variant", "median", "unit", "min .. max", "IQR", "n"]
        for col in cols + (["wall-clock median"] if timed else []):
            t.add_column(col, justify="left" if col in ("variant", "unit") else "right")
        for m in res.measurements:
            s = m.summary()
            row = [
                m.label,
                fmt(s["median"]),
                m.unit,
                f"{fmt(s['min'])} .. {fmt(s['max'])}",
                f"{s['iqr_pct']:.1f}%",
                str(s["n"]),
            ]
            if timed:
                row.append(fmt(s["wall_median"]))
            t.add_row(*row, style="bold" if m.role == "subject" else "")
        console.print(t)
        if res.ratios:
            rt = Table(title=f"{res.name}: ratios (by medians; range from the spread)")
            for col in ("subject", "vs baseline", "ratio", "worst .. best", "target", "met"):
                rt.add_column(col)
            for r in res.ratios:
                met = {None: "-", True: "[green]yes[/green]", False: "[red]NO[/red]"}[r.met]
                rt.add_row(
                    res.get(r.subject).label,
                    res.get(r.baseline).label,
                    f"{r.value:.2f}x",
                    f"{r.low:.2f}x .. {r.high:.2f}x",
                    "-" if r.target is None else f">= {r.target:.3g}x",
                    met,
                )
            console.print(rt)
        if res.checks:
            ct = Table(title=f"{res.name}: targets")
            for col in ("what", "value", "target", "met", "note"):
                ct.add_column(col)
            for c in res.checks:
                met = {None: "-", True: "[green]yes[/green]", False: "[red]NO[/red]"}[c.met]
                ct.add_row(c.what, f"{fmt(c.value)} {c.unit}", c.target, met, c.note)
            console.print(ct)
        for extra in res.tables:
            xt = Table(title=f"{res.name}: {extra['title']}", title_justify="left")
            for i, col in enumerate(extra["columns"]):
                xt.add_column(col, justify="left" if i == 0 else "right")
            for row in extra["rows"]:
                xt.add_row(*row)
            console.print(xt)
        for n in res.notes:
            console.print(f"  [dim]- {n}[/dim]")
        console.print(f"  [dim]({res.seconds:.1f} s)[/dim]\n")


def render_summary(results: list[BenchResult], console: Any, quick: bool) -> None:
    """The closing table: every target of every benchmark, met or missed; what a miss means
    is said once per distinct meaning, under the table; then what the exit status means."""
    targets = [t for res in results if not res.skipped for t in res.targets()]
    meanings: dict[str, int] = {}
    t = Table(title="Summary: the issue's targets", title_justify="left")
    for col in ("benchmark", "target", "measured", "threshold", "met"):
        t.add_column(col, overflow="fold")
    for x in targets:
        if x.met is False:
            ref = meanings.setdefault(x.meaning, len(meanings) + 1)
            met = f"[red]NO[/red] [{ref}]"
        else:
            met = {None: "-", True: "[green]yes[/green]"}[x.met]
        t.add_row(x.benchmark, x.name, x.measured, x.threshold, met)
    console.print(t)
    for meaning, ref in meanings.items():
        console.print(f"  \\[{ref}] a miss means: {meaning}")
    missed = sum(x.met is False for x in targets)
    skipped = [r.name for r in results if r.skipped]
    console.print(
        f"{len(targets) - missed} of {len(targets)} targets met, {missed} missed"
        + (f"; skipped: {', '.join(skipped)}" if skipped else "")
        + ". Missed targets are findings, not failures: the exit status is 0 either way."
        + (
            " Quick mode uses small inputs and few repetitions: confirm a miss with `make bench`"
            " before acting on it."
            if quick
            else ""
        )
    )


def load_factor() -> float:
    """How much longer than on an idle machine a run should take now: the 1-minute load
    average per core, at least 1 (the benchmarks' processes share the cores with the load)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = loadavg()
    return max(1.0, load[0] / (cores or 1)) if load else 1.0
