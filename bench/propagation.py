"""Propagation: events from A's broker to the other nodes' brokers through real nodes.

Two clusters run side by side on loopback, started as ``tests/support/cluster.py`` does: real
``nvpair-wm`` processes, each with its own ``--cluster-dir`` (``nvpair_wm.clusterdir``), bound
to 127.0.0.1 on a free port, told about each other by ``nodes:update`` records with the real
ports, as a broker would; the bench waits until A's links to every peer are connected. One
cluster has two nodes (A, B), the other three (A, B, C). The bench is every node's broker: it
writes lifecycle events to A's stdin (each a new workload with a unique id, so nothing is
collapsed on the way) and reads every node's stdout. One non-blocking ``selectors`` loop does
all of it, so writing never delays reading.

* **Sustained events/s** (closed loop): events are written whenever fewer than ``WINDOW`` are
  on their way (written to A, not yet read as ``workloads:upsert`` at every receiver); the
  window stays under A's per-peer queue bound, so nothing is dropped and every event arrives
  (checked: counts equal, and A's ``manager:status`` reports no dropped frame). The rate is
  the receivers' (the slowest one's) upserts per second over a window after a ramp-up.
* **Latency**: events written on a schedule (about 100 events/s, then half the measured
  sustained rate), each timestamped just before its write to A's stdin begins and when its
  ``workloads:upsert`` is read from a receiver's stdout (``time.monotonic``; the id says which
  event it is): p50, p99 and max per repetition. At the higher rate the schedule is kept with
  1 ms ticks, so events are written in small bursts.

Every run also records the CPU time of every node (``/proc``), for the per-event costs that
``bench/scale.py`` uses: what the sender spends per event and per peer, what a receiver spends
per event, batched (sustained rate) and unbatched (100 events/s: each event its own request).

Issue targets (issue 9): >= 80,000 events/s A->B; at the low rate p50 < 1 ms and p99 < 3 ms.
"""

from __future__ import annotations

import math
import os
import selectors
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.frames import event_templates
from bench.harness import BenchResult, Check, Context, Measurement, Skip, fmt, quantile
from bench.procs import ProcError, WmProc, cpu_seconds

NAME = "propagation"
DESCRIPTION = "A's broker -> B's broker through 2 and 3 real nodes: events/s; latency p50/p99/max"

TARGET_RATE = 80_000.0
TARGET_P50_MS = 1.0
TARGET_P99_MS = 3.0
# Events in flight at most. A's per-peer queue holds 10,000 frames, counting batches in flight
# until their response (up to 4 x 512 frames, which may already be at B's broker): 6,000 keeps
# clear of it. (The rate does not depend on it: 1,000 to 8,000 give the same.)
WINDOW = 6_000
CHUNK = 256  # events per write in the closed loop
LOW_RATE = 100.0
ID_MARK = b'"id":"'


@dataclass
class Node:
    name: str
    wm: WmProc
    port: int = 0
    fingerprint: str = ""
    buf: bytearray = field(default_factory=bytearray)
    received: int = 0


class Cluster:
    def __init__(self, root: Path, size: int, config: Path | None = None) -> None:
        """``config``: a TOML file every node gets as ``--config`` (limits other than the
        defaults; see bench/experiments.py)."""
        from nvpair_wm.clusterdir import cert_fingerprint, init_cluster  # noqa: PLC0415

        self.size = size
        self.tag = f"{size} nodes"
        names = [f"node-{chr(ord('a') + i)}" for i in range(size)]
        dirs = init_cluster(root / f"cluster{size}", names)
        self.nodes: list[Node] = []
        try:
            for name in names:
                wm = WmProc(
                    "--cluster-dir",
                    str(dirs[name]),
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--log-level",
                    "info",
                    *(["--config", str(config)] if config else []),
                    log_path=root / f"cluster{size}-{name}.log",
                )
                self.nodes.append(
                    Node(
                        name,
                        wm,
                        fingerprint=cert_fingerprint((dirs[name] / "node.crt").read_bytes()),
                    )
                )
            for n in self.nodes:
                n.wm.expect_ready()
                n.port = n.wm.status()["port"]
            records = [
                {
                    "nodeId": n.name,
                    "address": "127.0.0.1",
                    "port": n.port,
                    "fingerprint": n.fingerprint,
                }
                for n in self.nodes
            ]
            for n in self.nodes:
                n.wm.request("nodes:update", {"nodes": records})
            deadline = time.monotonic() + 20
            while True:
                peers = [p for n in self.nodes for p in n.wm.status()["peers"]]
                if len(peers) == size * (size - 1) and all(p["connected"] for p in peers):
                    break
                if time.monotonic() > deadline:
                    raise self.a.wm.error(f"peers not connected: {peers}")
                time.sleep(0.02)
        except BaseException:
            self.close()
            raise
        self.templates = event_templates(origin="node-a", run_id="r-bench-propagation")

    @property
    def a(self) -> Node:
        return self.nodes[0]

    @property
    def receivers(self) -> list[Node]:
        return self.nodes[1:]

    def cpu(self) -> list[float]:
        return [cpu_seconds(n.wm.pid) for n in self.nodes]

    def peer_status(self) -> list[dict[str, Any]]:
        return list(self.a.wm.status()["peers"])

    def close(self) -> None:
        for n in self.nodes:
            n.wm.close()


@dataclass
class Flow:
    """One run's outcome."""

    events: int
    seconds: float
    rate: float  # events/s reaching every receiver (closed loop) or written (paced)
    cpu_per_event: list[float]  # seconds, per node (A first)
    latencies: list[list[float]] = field(default_factory=list)  # ms, per receiver
    bench_cpu: float = 0.0  # CPU-s per second of this process (the brokers' side), same window
    node_cpu: list[float] = field(default_factory=list)  # CPU-s per second of each node


class Driver:
    """The bench as every node's broker: one loop writing to A and reading all stdouts."""

    def __init__(self, cluster: Cluster, next_id: int) -> None:
        self.c = cluster
        self.next_id = next_id
        self.sel = selectors.DefaultSelector()
        self.a_fd = cluster.a.wm.stdin_fd
        for n in cluster.nodes:
            os.set_blocking(n.wm.stdout_fd, False)
            self.sel.register(n.wm.stdout_fd, selectors.EVENT_READ, n)
        os.set_blocking(self.a_fd, False)
        self.watching_a = False
        self.pending = memoryview(b"")
        self.written = 0
        self.t_write: dict[int, float] = {}
        self.lat: dict[str, list[float]] = {}
        self.track = False

    def close(self) -> None:
        self.sel.close()
        self.watching_a = False
        for n in self.c.nodes:
            os.set_blocking(n.wm.stdout_fd, True)
        os.set_blocking(self.a_fd, True)

    def events(self, count: int) -> bytes:
        tpl = self.c.templates
        k0 = self.next_id
        self.next_id += count
        return "".join([tpl[k % 5] % k + "\n" for k in range(k0, k0 + count)]).encode()

    def _write(self) -> bool:
        """Write what is pending; True when all of it went."""
        try:
            n = os.write(self.a_fd, self.pending)
        except BlockingIOError:
            return False
        self.pending = self.pending[n:]
        return not self.pending

    def _read(self, timeout: float) -> None:
        """Read whatever the nodes wrote, waiting up to ``timeout`` (or until A's stdin can
        take more, if something is pending)."""
        if bool(self.pending) != self.watching_a:
            self.watching_a = bool(self.pending)
            if self.watching_a:
                self.sel.register(self.a_fd, selectors.EVENT_WRITE, None)
            else:
                self.sel.unregister(self.a_fd)
        for key, _ in self.sel.select(timeout):
            if key.data is None:
                continue  # A's stdin has room: the caller writes
            node: Node = key.data
            try:
                chunk = os.read(key.fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise node.wm.error("stdout closed")
            t = time.monotonic()
            if node is self.c.a:
                continue  # A's broker gets nothing of its own events
            if not self.track:
                node.received += chunk.count(b"\n")
                continue
            buf = node.buf
            buf += chunk
            end = buf.rfind(b"\n")
            if end < 0:
                continue
            lines = bytes(buf[:end]).split(b"\n")
            del buf[: end + 1]
            node.received += len(lines)
            lat = self.lat.setdefault(node.name, [])
            t_write = self.t_write
            for line in lines:
                at = line.find(ID_MARK) + 6
                k = int(line[at : at + 12])
                lat.append((t - t_write[k]) * 1e3)

    def _floor(self) -> int:
        return min(n.received for n in self.c.receivers)

    def settle(self, timeout: float = 30.0) -> None:
        """Wait until every receiver has every event written so far."""
        deadline = time.monotonic() + timeout
        while self.pending and not self._write():
            self._read(0.001)
        while self._floor() < self.written:
            if time.monotonic() > deadline:
                got = {n.name: n.received for n in self.c.receivers}
                raise self.c.a.wm.error(f"events lost: wrote {self.written}, receivers {got}")
            self._read(0.05)

    def closed_loop(self, ramp: float, window: float) -> Flow:
        """Keep WINDOW events in flight; measure the receivers' rate over ``window`` seconds."""
        self.track = False
        t_end_ramp = time.monotonic() + ramp
        mark: tuple[float, int, list[float]] | None = None
        while True:
            now = time.monotonic()
            if mark is None and now >= t_end_ramp:
                mark = (now, self._floor(), self.c.cpu())
                bench0 = time.process_time()
            elif mark is not None and now >= mark[0] + window:
                break
            if not self.pending and self.written - self._floor() < WINDOW - CHUNK:
                self.pending = memoryview(self.events(CHUNK))
                self.written += CHUNK
            if self.pending:
                self._write()
            self._read(0.001)
        t1, n1, cpu1 = time.monotonic(), self._floor(), self.c.cpu()
        bench1 = time.process_time()
        t0, n0, cpu0 = mark
        self.settle()
        events = n1 - n0
        return Flow(
            events,
            t1 - t0,
            events / (t1 - t0),
            [(b - a) / max(1, events) for a, b in zip(cpu0, cpu1, strict=True)],
            bench_cpu=(bench1 - bench0) / (t1 - t0),
            node_cpu=[(b - a) / (t1 - t0) for a, b in zip(cpu0, cpu1, strict=True)],
        )

    def paced(self, rate: float, seconds: float) -> Flow:
        """Write ``rate`` events/s for ``seconds`` (1 ms ticks); latency of every event."""
        self.track = True
        self.lat = {}
        self.t_write = {}
        total = max(1, int(rate * seconds))
        base = self.next_id
        cpu0 = self.c.cpu()
        bench0 = time.process_time()
        t0 = time.monotonic()
        sent = 0
        tick = max(1.0 / rate, 0.001)
        while sent < total:
            now = time.monotonic()
            due = min(total, int((now - t0) * rate) + 1) - sent
            if due > 0:
                self.pending = memoryview(self.events(due))
                # Stamped as the broker's send begins (the write counts too), and before any
                # of it can come back.
                t = time.monotonic()
                for k in range(base + sent, base + sent + due):
                    self.t_write[k] = t
                while not self._write():
                    self._read(0.001)
                sent += due
                self.written += due
            next_due = t0 + sent / rate
            self._read(max(0.0, min(tick, next_due - time.monotonic())))
        self.settle()
        t1 = time.monotonic()
        cpu1 = self.c.cpu()
        bench1 = time.process_time()
        self.track = False
        return Flow(
            total,
            t1 - t0,
            total / (t1 - t0),
            [(b - a) / total for a, b in zip(cpu0, cpu1, strict=True)],
            [self.lat.get(n.name, []) for n in self.c.receivers],
            bench_cpu=(bench1 - bench0) / (t1 - t0),
            node_cpu=[(b - a) / (t1 - t0) for a, b in zip(cpu0, cpu1, strict=True)],
        )


def cold_penalty(ctx: Context) -> tuple[list[float], list[float]]:
    """CPU seconds of the same small piece of the per-event path (h2 encoding of one request,
    ``Dispatcher.peer`` of 5 frames), back to back and after 10 ms asleep (as every event is at
    100 events/s): medians per repetition. It says how much slower this machine runs code that
    wakes up cold, which the low-rate costs and latencies include."""
    import h2.config  # noqa: PLC0415
    import h2.connection  # noqa: PLC0415

    from bench.codec_impls import make_dispatcher  # noqa: PLC0415
    from bench.frames import event_line  # noqa: PLC0415

    tpl = event_templates()
    disp = make_dispatcher()
    counter = [0]
    headers = [(":method", "POST"), (":scheme", "https"), (":authority", "127.0.0.1:1")]
    headers += [(":path", "/v1/workloads/events"), ("content-type", "application/json")]

    def unit() -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.send_headers(1, headers)
        conn.send_data(1, b"x" * 330, end_stream=True)
        conn.data_to_send()
        for _ in range(5):
            counter[0] += 1
            disp.peer(event_line(tpl, counter[0]))

    warm: list[float] = []
    cold: list[float] = []
    per_rep = ctx.size(50, 20)
    for _ in range(ctx.reps):
        for gap, out in ((0.0, warm), (0.01, cold)):
            xs = []
            for _ in range(per_rep):
                if gap:
                    time.sleep(gap)
                c0 = time.thread_time()
                unit()
                xs.append(time.thread_time() - c0)
            out.append(statistics.median(xs))
    return warm, cold


def _pct(xs: list[float], q: float) -> float:
    return quantile(sorted(xs), q) if xs else math.nan


def run(ctx: Context) -> BenchResult:
    try:
        from nvpair_wm import clusterdir  # noqa: F401, PLC0415
    except ImportError as exc:
        raise Skip(f"nvpair_wm.clusterdir is not importable: {exc}") from exc
    res = BenchResult(NAME, DESCRIPTION)
    ramp = 0.15 if ctx.quick else 0.2
    window = 0.3 if ctx.quick else 0.6
    low_s = 0.5 if ctx.quick else 2.0
    half_s = 0.3 if ctx.quick else 0.8
    with tempfile.TemporaryDirectory(prefix="nvpair-bench-propagation-") as tmp:
        clusters = [Cluster(Path(tmp), 2), Cluster(Path(tmp), 3)]
        drivers = [Driver(c, (i + 1) * 10**11) for i, c in enumerate(clusters)]
        try:
            _measure(
                ctx, res, clusters, drivers, ramp=ramp, window=window, low_s=low_s, half_s=half_s
            )
        finally:
            for d in drivers:
                d.close()
            for c in clusters:
                c.close()
    return res


def _measure(
    ctx: Context,
    res: BenchResult,
    clusters: list[Cluster],
    drivers: list[Driver],
    *,
    ramp: float,
    window: float,
    low_s: float,
    half_s: float,
) -> None:
    flows: dict[str, list[Flow]] = {}
    for d in drivers:  # warm-up, excluded
        d.closed_loop(ramp, window)
        d.paced(LOW_RATE, 0.2)
    for _ in range(ctx.reps):
        for c, d in zip(clusters, drivers, strict=True):
            flows.setdefault(f"max/{c.size}", []).append(d.closed_loop(ramp, window))
    for _ in range(ctx.reps):
        for c, d in zip(clusters, drivers, strict=True):
            flows.setdefault(f"low/{c.size}", []).append(d.paced(LOW_RATE, low_s))
    half: dict[int, float] = {}
    for c in clusters:
        half[c.size] = 0.5 * statistics.median(f.rate for f in flows[f"max/{c.size}"])
    for _ in range(ctx.reps):
        for c, d in zip(clusters, drivers, strict=True):
            flows.setdefault(f"half/{c.size}", []).append(d.paced(half[c.size], half_s))
    statuses = {c.size: c.peer_status() for c in clusters}
    warm, cold = cold_penalty(ctx)

    for c in clusters:
        fs = flows[f"max/{c.size}"]
        res.measurements.append(
            Measurement(
                f"max/{c.size}",
                f"{c.tag}: sustained events/s A -> {'B' if c.size == 2 else 'B and C'}",
                "events/s",
                [f.rate for f in fs],
                role="subject",
                note=f"closed loop, <= {WINDOW} in flight; {window:g} s windows",
            )
        )
    for c in clusters:
        fs = flows[f"max/{c.size}"]
        res.measurements.append(
            Measurement(
                f"max/{c.size}/slowest",
                f"{c.tag}: slowest sustained window",
                "events/s",
                [min(f.rate for f in fs)],
                role="info",
                note=f"the lowest of the {len(fs)} windows above: a stall (a journal compaction, "
                "a full collection) shows here first",
            )
        )
    for c in clusters:
        for kind, rate in (("low", LOW_RATE), ("half", half[c.size])):
            fs = flows[f"{kind}/{c.size}"]
            for q, qn in ((0.5, "p50"), (0.99, "p99"), (1.0, "max")):
                res.measurements.append(
                    Measurement(
                        f"{kind}/{c.size}/{qn}",
                        f"{c.tag}: latency {qn} at {rate:,.0f} events/s",
                        "ms",
                        [_pct([x for lat in f.latencies for x in lat], q) for f in fs],
                        higher_is_better=False,
                        role="subject" if kind == "low" else "info",
                        note="stdin of A -> stdout of every receiver, per repetition",
                    )
                )
    res.measurements.append(
        Measurement(
            "machine/warm",
            "this machine: a piece of the per-event path, back to back",
            "us CPU",
            [x * 1e6 for x in warm],
            higher_is_better=False,
            note="h2 encode of one request + Dispatcher.peer of 5 frames",
        )
    )
    res.measurements.append(
        Measurement(
            "machine/cold",
            "this machine: the same, each after 10 ms asleep (as at 100 events/s)",
            "us CPU",
            [x * 1e6 for x in cold],
            higher_is_better=False,
        )
    )
    res.ratio("machine/warm", "machine/cold")
    two = res.get("max/2")
    res.checks.append(
        Check(
            "sustained events/s A -> B (2 nodes)",
            two.median,
            "events/s",
            f">= {TARGET_RATE:,.0f}",
            two.median >= TARGET_RATE,
            f"{100 * (two.median / TARGET_RATE - 1):+.0f} % of the target; spread "
            f"{fmt(min(two.samples))} .. {fmt(max(two.samples))}",
            meaning="two nodes carry fewer events/s than the target: the cluster's peak rate is "
            "lower (bench/README.md, Propagation and What the figures depend on)",
        )
    )
    for c in clusters:
        for qn, target in (("p50", TARGET_P50_MS), ("p99", TARGET_P99_MS)):
            m = res.get(f"low/{c.size}/{qn}")
            res.checks.append(
                Check(
                    f"{c.tag}: {qn} latency at {LOW_RATE:.0f} events/s",
                    m.median,
                    "ms",
                    f"< {target:g} ms",
                    m.median < target,
                    f"spread {m.summary()['min']:.2f} .. {m.summary()['max']:.2f} ms",
                    meaning="an event reaches the other nodes' brokers later than the target at a "
                    "low rate: the cluster's views lag by that much"
                    + (" (p99: the slow tail)" if qn == "p99" else ""),
                )
            )
    rows = []
    costs: dict[str, Any] = {}
    for key, fs in flows.items():
        kind, size = key.split("/")
        per_node = [statistics.median(f.cpu_per_event[i] for f in fs) for i in range(int(size))]
        pooled = [x for f in fs for lat in f.latencies for x in lat]
        util = [statistics.median(f.node_cpu[i] for f in fs) for i in range(int(size))]
        rows.append(
            [
                f"{size} nodes, {kind}",
                fmt(statistics.median(f.rate for f in fs)),
                " / ".join(f"{x * 1e6:.1f}" for x in per_node),
                " / ".join(f"{x:.2f}" for x in util)
                + f" + {statistics.median(f.bench_cpu for f in fs):.2f}",
                f"{_pct(pooled, 0.5):.2f} / {_pct(pooled, 0.99):.2f} / {max(pooled):.2f}"
                if pooled
                else "-",
                str(sum(f.events for f in fs)),
            ]
        )
        costs[key] = {
            "rate": statistics.median(f.rate for f in fs),
            "cpu_s_per_event": per_node,
            "cpu_s_per_event_samples": [f.cpu_per_event for f in fs],
            "cpu_s_per_s": util,
            "bench_cpu_s_per_s": [f.bench_cpu for f in fs],
            "pooled_ms": {
                "p50": _pct(pooled, 0.5),
                "p99": _pct(pooled, 0.99),
                "max": max(pooled) if pooled else math.nan,
                "n": len(pooled),
            },
        }
    res.tables.append(
        {
            "title": "per run kind (medians over repetitions): rate, CPU us per event of each "
            "node (A first), CPU-s per second of each node and of this process (the brokers), "
            "latency pooled over every repetition p50 / p99 / max (ms)",
            "columns": [
                "run",
                "events/s",
                "CPU us/event A / B (/ C)",
                "CPU-s/s A / B (/ C) + bench",
                "latency ms",
                "events",
            ],
            "rows": rows,
        }
    )
    res.params["costs"] = costs
    res.params["half_rates"] = half
    res.params["window_events"] = WINDOW
    res.params["peer_status_of_a"] = statuses
    dropped = sum(p["dropped"] for s in statuses.values() for p in s)
    res.notes.append(
        "every event written reached every receiver (checked after each run); A's links over "
        f"the whole benchmark: {dropped} frames dropped, "
        + "; ".join(
            f"{c.tag}: " + ", ".join(f"{p['nodeId']} sent {p['sent']:,}" for p in statuses[c.size])
            for c in clusters
        )
    )
    if dropped:
        raise ProcError(f"A dropped {dropped} frames: the closed loop's window is too large")
