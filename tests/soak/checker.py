"""The history checker: a pure function from a recorded run to its verdict and figures.

:func:`check` feeds every record of a history (:mod:`tests.soak.history`) to a
:class:`Checker` and returns its :class:`Report`. Nothing here looks at a process, a socket or
a clock: the same code judges a live run (the runner feeds it as records arrive, to know when
the views have converged) and a history file read back later, and the unit tests feed it
hand-made histories that break each property.

The truth is what the brokers reported. A workload is keyed by (runId, id) — ids restart at 1
in every run — and every runId names its origin. The truth at any moment is, per workload, the
newest ``workloadInfo`` its origin's broker reported (its ``state`` set from the method), minus
what that broker removed. A broker's *view* is what its node told it: ``workloads:upsert``
sets an entry, ``workloads:remove`` drops it (the given run, or, without ``runId``, every run
of that (originatedFrom, id) the broker holds). A broker keeps its view across its node's
restarts, as a real supervisor does.

Properties (each violation names its property, the broker, the time and the workload):

``seq-backwards``   per (runId, id), a broker is never told a lower ``seq`` than it was told
                    before (across restarts of its node too).
``duplicate``       one node process never tells its broker the same (runId, id, seq) twice
                    (a restarted process has an empty table, so a repeat across a restart is
                    allowed: it moves nothing).
``resurrected``     after a broker was told of a removal, no upsert of a removed (runId, id)
                    reaches it.
``altered``         every upsert is exactly a ``workloadInfo`` some origin reported (same
                    fields, same values), from another node (never an echo).
``not-converged``   at the end of the run (after the ``quiesce`` record: the last fault healed,
                    the brokers stopped reporting), every broker's view of the other nodes'
                    workloads equals the truth.
``slow-convergence`` ... and it became equal within ``bound`` seconds of ``quiesce``.
``incomplete``      the history has no ``start`` or no ``quiesce`` record.

**Multi-path runs** (the ``start`` record says ``"paths": "multi"``: a workload's start and end
are reported by another broker than its entry node's; issue 24). A broker's view then also holds
its **own reports once they are applied**: a report is a request, and it is applied when its
answer is read on the broker's channel (the order of frames on stdout, not wall-clock time); a
report whose answer has not been read yet is in flight and judges nothing. So:

* ``seq-backwards`` also fires when an upsert read after the broker's own report of that
  (runId, id) was applied carries a lower seq, and ``resurrected`` when an upsert reaches it
  after its own removal was applied;
* ``altered``'s echo is an upsert of a (runId, id, seq) this same broker reported (another
  broker's report of its own workload is what it must be told);
* ``not-converged``: every broker's view (told and own) equals the truth, its own workloads
  included.

This is the documented check for another implementation: run it against that implementation's
nodes with ``python -m tests.soak --paths multi`` (kill -9 included), or judge a recorded
history with ``--check``.

Figures: faults injected (by kind), events reported, frames delivered, per-event convergence
(from an origin's first report of (runId, id, seq) until every other broker's view holds that
seq or newer, or the removal), post-quiesce convergence per broker, and peak RSS per node.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tests.soak.history import Record

__all__ = ["METHOD_STATE", "Checker", "Report", "Violation", "check", "percentile"]

METHOD_STATE: Final = {
    "workload:submitted": "queued",
    "workload:started": "running",
    "workload:completed": "completed",
    "workload:errored": "failed",
    "workload:cancelled": "cancelled",
}
REMOVE: Final = "workloads:remove"
UPSERT: Final = "workloads:upsert"
PROPERTIES: Final = (
    "seq-backwards",
    "duplicate",
    "resurrected",
    "altered",
    "not-converged",
    "slow-convergence",
    "incomplete",
)
KEEP_PER_PROPERTY: Final = 20  # violations kept verbatim per property; all are counted

WKey = tuple[str, str]  # (runId, id)


@dataclass(frozen=True, slots=True)
class Violation:
    prop: str
    node: str
    t: float
    detail: str

    def __str__(self) -> str:
        return f"[{self.prop}] {self.node or '-'} t={self.t:.3f}s: {self.detail}"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list; 0.0 for an empty one."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class Report:
    seed: int | None
    nodes: list[str]
    bound: float
    duration: float
    faults: Counter[str]
    events: int  # lifecycle events and removals first reported by the brokers
    resent: int  # reports repeated by a broker after its node restarted
    delivered: Counter[str]  # upserts and removals each broker was told
    event_latencies: list[float]  # seconds, per (runId, id, seq) and per removal
    never_converged_events: int
    convergence: dict[str, float]  # broker → seconds after quiesce until its view was final
    peak_rss_kib: dict[str, int]
    restarts: Counter[str]
    violations: list[Violation]
    violation_counts: Counter[str]
    final_workloads: int

    @property
    def ok(self) -> bool:
        return not self.violation_counts

    def summary(self) -> str:
        lat = self.event_latencies
        conv = list(self.convergence.values())
        faults = ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())) or "none"
        rss = ", ".join(f"{n} {kib / 1024:.1f} MiB" for n, kib in sorted(self.peak_rss_kib.items()))
        lines = [
            f"seed {self.seed}: {len(self.nodes)} nodes, {self.duration:.1f} s, "
            f"{sum(self.faults.values())} faults ({faults})",
            f"events reported {self.events} (+{self.resent} resent after restarts), "
            f"frames delivered {sum(self.delivered.values())}, restarts "
            f"{sum(self.restarts.values())}, workloads at the end {self.final_workloads}",
            f"per-event convergence p50 {percentile(lat, 50):.3f} s, p99 "
            f"{percentile(lat, 99):.3f} s, max {max(lat, default=0.0):.3f} s over {len(lat)} "
            f"events ({self.never_converged_events} never)",
            f"after the last heal (quiesce): every view equal to the origins' in p50 "
            f"{percentile(conv, 50):.3f} s, max {max(conv, default=0.0):.3f} s "
            f"(bound {self.bound:.0f} s)",
            f"peak RSS: {rss}",
        ]
        if self.ok:
            lines.append("violations: none")
        else:
            counts = ", ".join(f"{k} {n}" for k, n in sorted(self.violation_counts.items()))
            lines.append(f"VIOLATIONS: {counts}")
            lines += [f"  {v}" for v in self.violations]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        lat = self.event_latencies
        return {
            "seed": self.seed,
            "nodes": self.nodes,
            "duration": round(self.duration, 3),
            "faults": dict(self.faults),
            "events": self.events,
            "resent": self.resent,
            "delivered": dict(self.delivered),
            "event_convergence": {
                "p50": percentile(lat, 50),
                "p99": percentile(lat, 99),
                "max": max(lat, default=0.0),
                "n": len(lat),
                "never": self.never_converged_events,
            },
            "convergence_after_heal": self.convergence,
            "peak_rss_kib": self.peak_rss_kib,
            "restarts": dict(self.restarts),
            "violations": dict(self.violation_counts),
            "final_workloads": self.final_workloads,
        }


@dataclass
class _Broker:
    """What the checker tracks per broker."""

    view: dict[WKey, Mapping[str, Any]] = field(default_factory=dict)
    high: dict[WKey, tuple[int, int]] = field(default_factory=dict)  # → (seq, incarnation)
    own_high: dict[WKey, int] = field(default_factory=dict)  # its own applied reports (multi)
    removed: set[WKey] = field(default_factory=set)
    last_change: float = 0.0  # time of the last frame that changed the view


class Checker:
    """Feeds on records in time order; :meth:`report` judges what it has seen."""

    def __init__(self, bound: float | None = None) -> None:
        self.bound_override = bound
        self.bound = bound if bound is not None else 30.0
        self.seed: int | None = None
        self.nodes: list[str] = []
        self.multi = False  # a multi-path run (module docstring)
        self.reported_by: dict[tuple[str, str, int], str] = {}  # (runId, id, seq) → broker
        # (broker, request id) → its report not yet answered: ("event", key, seq, info) or
        # ("remove", keys)
        self.own_pending: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.started = False
        self.quiesce: float | None = None
        self.end: float | None = None
        self.last_t = 0.0
        self.truth: dict[WKey, Mapping[str, Any]] = {}
        self.truth_changed = 0.0
        self.origin_of: dict[str, str] = {}  # runId → origin
        self.reported: dict[tuple[str, str, int], Mapping[str, Any]] = {}
        self.truth_removed: set[WKey] = set()
        self.brokers: dict[str, _Broker] = defaultdict(_Broker)
        self.faults: Counter[str] = Counter()
        self.events = 0
        self.resent = 0
        self.delivered: Counter[str] = Counter()
        self.restarts: Counter[str] = Counter()
        self.rss: dict[str, int] = {}
        self.latencies: list[float] = []
        # (runId, id) → [[seq, first reported at, brokers still without it], ...]
        self.pending: dict[WKey, list[tuple[float, float, set[str]]]] = {}
        self.violations: list[Violation] = []
        self.counts: Counter[str] = Counter()

    # -- feeding ------------------------------------------------------------------------------

    def feed(self, rec: Record) -> None:
        self.last_t = max(self.last_t, rec.t)
        kind = rec.kind
        if kind == "send":
            self._send(rec)
        elif kind == "recv":
            self._recv(rec)
        elif kind == "start":
            self.started = True
            self.seed = rec.data.get("seed")
            self.nodes = list(rec.data.get("nodes", []))
            self.multi = rec.data.get("paths") == "multi"
            if self.bound_override is None and "bound" in rec.data:
                self.bound = float(rec.data["bound"])
        elif kind == "fault" and rec.data.get("phase") == "begin":
            self.faults[str(rec.data.get("fault"))] += 1
        elif kind == "spawn" and rec.inc > 1:
            self.restarts[rec.node] += 1
        elif kind == "rss":
            kib = int(rec.data.get("peak_kib", rec.data.get("kib", 0)))
            self.rss[rec.node] = max(self.rss.get(rec.node, 0), kib)
        elif kind == "quiesce":
            self.quiesce = rec.t
        elif kind == "end":
            self.end = rec.t

    def _violate(self, prop: str, node: str, t: float, detail: str) -> None:
        self.counts[prop] += 1
        if sum(1 for v in self.violations if v.prop == prop) < KEEP_PER_PROPERTY:
            self.violations.append(Violation(prop, node, t, detail))

    def _others(self, origin: str) -> set[str]:
        return {n for n in self.nodes if n != origin}

    def _send(self, rec: Record) -> None:
        frame = rec.data
        method = frame.get("method")
        params = frame.get("params") or {}
        if method in METHOD_STATE:
            info = dict(params["workloadInfo"])
            info["state"] = METHOD_STATE[method]
            key = (info["runId"], info["id"])
            seq = int(info["seq"])
            self.origin_of[info["runId"]] = info["originatedFrom"]
            ident = (info["runId"], info["id"], seq)
            if self.multi and "id" in frame:
                self.own_pending[(rec.node, str(frame["id"]))] = ("event", key, seq, info)
            if ident in self.reported:
                self.resent += 1
            else:
                self.events += 1
                self.reported[ident] = info
                self.reported_by[ident] = rec.node
                others = self._others(rec.node)
                if others:
                    self.pending.setdefault(key, []).append((seq, rec.t, others))
            newest = self.truth.get(key)
            if key not in self.truth_removed and (newest is None or newest["seq"] <= seq):
                self.truth[key] = info
                self.truth_changed = rec.t
        elif method == REMOVE:
            origin, wid = params["originatedFrom"], params["workloadId"]
            run = params.get("runId")
            keys = (
                [(run, wid)]
                if run is not None
                else [k for k in self.truth if k[1] == wid and self.origin_of.get(k[0]) == origin]
            )
            if self.multi and "id" in frame:
                self.own_pending[(rec.node, str(frame["id"]))] = ("remove", keys)
            for key in keys:
                if key in self.truth_removed:
                    self.resent += 1
                    continue
                self.events += 1
                self.truth_removed.add(key)
                self.truth.pop(key, None)
                self.truth_changed = rec.t
                others = self._others(rec.node)
                if others:
                    self.pending.setdefault(key, []).append((math.inf, rec.t, others))

    def _recv(self, rec: Record) -> None:
        frame = rec.data
        method = frame.get("method")
        if self.multi and method is None and "id" in frame:
            self._own_applied(rec)
            return
        if method not in (UPSERT, REMOVE):
            return
        node = rec.node
        b = self.brokers[node]
        params = frame.get("params") or {}
        self.delivered[node] += 1
        if method == UPSERT:
            info = params["workloadInfo"]
            key = (info["runId"], info["id"])
            seq = int(info["seq"])
            if (
                self.reported_by.get((info["runId"], info["id"], seq)) == node
                if self.multi
                else info.get("originatedFrom") == node
            ):
                self._violate("altered", node, rec.t, f"echo of its own workload {key} seq {seq}")
            sent = self.reported.get((info["runId"], info["id"], seq))
            if sent is None:
                self._violate("altered", node, rec.t, f"{key} seq {seq} was never reported")
            elif dict(info) != dict(sent):
                self._violate("altered", node, rec.t, f"{key} seq {seq}: {info} != {sent}")
            high = b.high.get(key)
            own = b.own_high.get(key, 0)
            if own > seq and (high is None or high[0] <= seq):
                self._violate(
                    "seq-backwards", node, rec.t, f"{key}: seq {seq} after its own seq {own}"
                )
            if high is not None:
                if seq < high[0]:
                    self._violate(
                        "seq-backwards", node, rec.t, f"{key}: seq {seq} after seq {high[0]}"
                    )
                elif seq == high[0] and rec.inc == high[1]:
                    self._violate(
                        "duplicate", node, rec.t, f"{key} seq {seq} twice from process #{rec.inc}"
                    )
            if key in b.removed:
                self._violate("resurrected", node, rec.t, f"{key} seq {seq} after its removal")
            if high is None or seq >= high[0]:
                b.high[key] = (seq, rec.inc)
                if key not in b.removed and seq >= own:
                    if b.view.get(key) != info:
                        b.last_change = rec.t
                    b.view[key] = info
            self._arrived(key, seq, node, rec.t)
        else:
            origin, wid = params["originatedFrom"], params["workloadId"]
            run = params.get("runId")
            keys = (
                [(run, wid)]
                if run is not None
                else [k for k, v in b.view.items() if k[1] == wid and v["originatedFrom"] == origin]
            )
            for key in keys:
                b.removed.add(key)
                if b.view.pop(key, None) is not None:
                    b.last_change = rec.t
                self._arrived(key, math.inf, node, rec.t)

    def _own_applied(self, rec: Record) -> None:
        """An answer on ``rec.node``'s channel: its own report with that id is applied now
        (multi-path; module docstring)."""
        pending = self.own_pending.pop((rec.node, str(rec.data["id"])), None)
        if pending is None:
            return
        b = self.brokers[rec.node]
        if pending[0] == "event":
            _, key, seq, info = pending
            if seq > b.own_high.get(key, 0):
                b.own_high[key] = seq
            held = b.view.get(key)
            if key not in b.removed and (held is None or int(held["seq"]) < seq):
                b.view[key] = info
                b.last_change = rec.t
            self._arrived(key, seq, rec.node, rec.t)  # it holds that seq now, as if told
            return
        for key in pending[1]:
            b.removed.add(key)
            if b.view.pop(key, None) is not None:
                b.last_change = rec.t
            self._arrived(key, math.inf, rec.node, rec.t)

    def _arrived(self, key: WKey, seq: float, node: str, t: float) -> None:
        """``node``'s broker now holds ``key`` at ``seq`` (inf: removed): settle what it covers."""
        waiting = self.pending.get(key)
        if not waiting:
            return
        keep = []
        for item in waiting:
            wseq, t0, left = item
            if wseq <= seq:
                left.discard(node)
            if left:
                keep.append(item)
            else:
                self.latencies.append(max(0.0, t - t0))
        if keep:
            self.pending[key] = keep
        else:
            del self.pending[key]

    # -- judging ------------------------------------------------------------------------------

    def expected(self, node: str) -> dict[WKey, Mapping[str, Any]]:
        """The truth about the other nodes' workloads: what ``node``'s broker must end with
        (multi-path: about every workload, its own reports being part of its view)."""
        if self.multi:
            return dict(self.truth)
        return {k: v for k, v in self.truth.items() if v["originatedFrom"] != node}

    def differences(self, node: str) -> tuple[list[WKey], list[WKey], list[WKey]]:
        """(missing, wrong, extra) of ``node``'s view against the truth."""
        want = self.expected(node)
        have = self.brokers[node].view
        missing = sorted(k for k in want if k not in have)
        wrong = sorted(k for k in want if k in have and dict(have[k]) != dict(want[k]))
        extra = sorted(k for k in have if k not in want)
        return missing, wrong, extra

    def converged(self) -> bool:
        """Every broker's view equals the truth now (the runner's "we can stop waiting")."""
        return all(not any(self.differences(n)) for n in self.nodes)

    def report(self) -> Report:
        # Violations found at the end are added to a copy, so report() can be called again.
        saved = (list(self.violations), Counter(self.counts))
        convergence: dict[str, float] = {}
        if not self.started:
            self._violate("incomplete", "", self.last_t, "no start record")
        if self.quiesce is None:
            self._violate("incomplete", "", self.last_t, "no quiesce record: the run ended early")
        else:
            settled_from = max(self.quiesce, self.truth_changed)
            for node in self.nodes:
                missing, wrong, extra = self.differences(node)
                if missing or wrong or extra:
                    view = self.brokers[node].view
                    want = self.expected(node)
                    sample = [
                        f"{k}: has {_brief(view.get(k))}, origin holds {_brief(want.get(k))}"
                        for k in (missing + wrong + extra)[:4]
                    ]
                    self._violate(
                        "not-converged",
                        node,
                        self.last_t,
                        f"{len(missing)} missing, {len(wrong)} wrong, {len(extra)} extra "
                        f"(of {len(want)}); e.g. " + "; ".join(sample),
                    )
                    continue
                took = max(0.0, self.brokers[node].last_change - settled_from)
                convergence[node] = took
                if took > self.bound:
                    self._violate(
                        "slow-convergence",
                        node,
                        self.brokers[node].last_change,
                        f"converged {took:.2f} s after quiesce, bound {self.bound:.1f} s",
                    )
        report = Report(
            seed=self.seed,
            nodes=list(self.nodes),
            bound=self.bound,
            duration=self.end if self.end is not None else self.last_t,
            faults=Counter(self.faults),
            events=self.events,
            resent=self.resent,
            delivered=Counter(self.delivered),
            event_latencies=list(self.latencies),
            never_converged_events=sum(len(v) for v in self.pending.values()),
            convergence=convergence,
            peak_rss_kib=dict(self.rss),
            restarts=Counter(self.restarts),
            violations=list(self.violations),
            violation_counts=Counter(self.counts),
            final_workloads=len(self.truth),
        )
        self.violations, self.counts = saved
        return report


def _brief(info: Mapping[str, Any] | None) -> str:
    if info is None:
        return "nothing"
    return f"{info['state']}@{info['seq']}"


def check(records: Iterable[Record], bound: float | None = None) -> Report:
    """Judge a whole history: the pure entry point (``bound`` overrides the run's own)."""
    checker = Checker(bound)
    for rec in records:
        checker.feed(rec)
    return checker.report()
