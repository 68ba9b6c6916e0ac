"""Where a low-rate event's time goes, node by node, from kernel tracepoints.

    python -m bench.timeline [--nodes 3] [--seconds 2]

It starts the propagation benchmark's cluster (``bench/propagation.py``: real nodes, this
process as every node's broker), writes events at 100 events/s, and records system-wide with
``perf record`` the syscalls that mark each step (the broker line read, each peer's request
sent, each receiver's request read, its broker write and its 202, the broker's read of the
upsert) and the scheduler's wake-ups and switches. For every event it takes the time of each
step after the bench's write to A's stdin began, and prints their medians in order, then for
each receiver how long it waited for a CPU once woken and how often it was woken onto the
CPU of the process that woke it.

That is what the benchmark's latency figures cannot show: with three nodes and the brokers on
two cores, whether a receiver waits for a core, and behind whom. It is a diagnostic, like
``bench.profile``, not part of ``make bench``; it needs root and ``perf``
(``apt-get install -y linux-perf``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import kernel_sched_params, sched_params_line
from bench.propagation import LOW_RATE, Cluster, Driver

INSTALL_PERF = "apt-get install -y linux-perf"
EVENTS = (
    "syscalls:sys_enter_read",
    "syscalls:sys_exit_read",
    "syscalls:sys_enter_write",
    "syscalls:sys_enter_sendto",
    "syscalls:sys_exit_recvfrom",
    "sched:sched_wakeup",
    "sched:sched_switch",
)
_LINE = re.compile(r"\s*(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+\S+:(\S+):\s*(.*)")
_FD = re.compile(r"fd: 0x([0-9a-f]+)")
_RET = re.compile(r"0x([0-9a-f]+)$")
_WAKE = re.compile(r"pid=(\d+) .*target_cpu=(\d+)")
_SWITCH_IN = re.compile(r"==> next_comm=.* next_pid=(\d+)")


@dataclass(frozen=True)
class Record:
    t: float  # seconds (perf's clock)
    pid: int
    tid: int
    cpu: int
    event: str  # e.g. "sys_enter_write", "sched_wakeup"
    rest: str


@dataclass
class Cycle:
    """One event's records, from the bench's write to A's stdin on."""

    t0: float
    steps: dict[str, float] = field(default_factory=dict)  # step -> microseconds after t0


def record(nodes: int, seconds: float, out: Path) -> tuple[dict[int, str], dict[int, str]]:
    """Run the cluster at the low rate under ``perf record``.

    Returns the names of the processes by pid (``a``, ``b``, ... and ``bench``) and the
    receiver each of the bench's stdout descriptors belongs to.
    """
    perf = shutil.which("perf")
    if perf is None:
        sys.exit(f"bench.timeline needs perf: {INSTALL_PERF}")
    with tempfile.TemporaryDirectory(prefix="nvpair-timeline-") as tmp:
        cluster = Cluster(Path(tmp), nodes)
        driver = Driver(cluster, 10**11)
        try:
            driver.closed_loop(0.2, 0.5)  # connections open, code paths warm
            driver.paced(LOW_RATE, 0.5)
            names = {n.wm.pid: n.name.removeprefix("node-") for n in cluster.nodes}
            names[os.getpid()] = "bench"
            stdout_fds = {n.wm.stdout_fd: n.name.removeprefix("node-") for n in cluster.receivers}
            cmd = [perf, "record", "-a", "-o", str(out)]
            for event in EVENTS:
                cmd += ["-e", event]
            rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # perf attaching to every CPU: nothing announces when it is done
            flow = driver.paced(LOW_RATE, seconds)
            rec.send_signal(signal.SIGINT)
            rec.wait(30)
        finally:
            driver.close()
            cluster.close()
    p50 = ", ".join(
        f"{n.name} {statistics.median(lat):.2f} ms"
        for n, lat in zip(cluster.receivers, flow.latencies, strict=True)
    )
    print(f"{nodes} nodes at {LOW_RATE:g} events/s, {flow.events} events; latency p50: {p50}")
    return names, stdout_fds


def parse(data: Path, names: dict[int, str]) -> list[Record]:
    """The records of the cluster's processes (and every scheduler record), in time order."""
    text = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "pid,tid,cpu,time,event,trace"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        pid, event = int(m[1]), m[5]
        if pid in names or event.startswith("sched_"):
            rows.append(Record(float(m[4]), pid, int(m[2]), int(m[3]), event, m[6]))
    rows.sort(key=lambda r: r.t)
    return rows


def cycles(rows: list[Record], names: dict[int, str], stdout_fds: dict[int, str]) -> list[Cycle]:
    """Every event's steps; also each receiver's wait for a CPU and where it was woken."""
    out: list[Cycle] = []
    cur: Cycle | None = None
    reading: dict[int, int] = {}  # tid -> fd of its read in progress
    woken: dict[int, tuple[float, bool, str]] = {}  # pid -> (when, onto the waker's CPU, waker)
    a_sends = 0
    for r in rows:
        who = names.get(r.pid)
        if r.event == "sched_wakeup":
            m = _WAKE.search(r.rest)
            if m and int(m[1]) in names and cur is not None:
                woken[int(m[1])] = (r.t, int(m[2]) == r.cpu, names.get(r.pid, "other"))
            continue
        if r.event == "sched_switch":
            m = _SWITCH_IN.search(r.rest)
            if m and cur is not None:
                pid = int(m[1])
                if pid in woken and names[pid] != "a":
                    t_wake, same, waker = woken.pop(pid)
                    who = f"{names[pid]} woken by {waker}"
                    cur.steps.setdefault(f"{who}: wait for a CPU", (r.t - t_wake) * 1e6)
                    cur.steps.setdefault(f"{who}: onto the waker's CPU", float(same))
            continue
        if who == "bench" and r.event == "sys_enter_write":
            cur = Cycle(r.t)
            out.append(cur)
            a_sends = 0
            continue
        if cur is None:
            continue
        at = (r.t - cur.t0) * 1e6
        step = None
        if who == "a":
            if r.event == "sys_exit_read":
                step = "a: reads the broker's line"
            elif r.event == "sys_enter_sendto":
                a_sends += 1
                step = f"a: sends request {a_sends}"
            elif r.event == "sys_enter_write":
                step = "a: journal write"
        elif who == "bench":
            if r.event == "sys_enter_read":
                m = _FD.search(r.rest)
                reading[r.tid] = int(m[1], 16) if m else -1
            elif r.event == "sys_exit_read":
                node = stdout_fds.get(reading.pop(r.tid, -1))
                if node is not None:
                    step = f"bench: reads {node}'s upsert"
        elif who is not None:
            if r.event == "sys_exit_recvfrom":
                step = f"{who}: reads the request"
            elif r.event == "sys_enter_write":
                step = f"{who}: writes its broker"
            elif r.event == "sys_enter_sendto":
                step = f"{who}: sends the 202"
        if step is not None:
            cur.steps.setdefault(step, at)
    return out[1:-1]  # the first and last may be cut by the recording's edges


def report(events: list[Cycle]) -> None:
    by_step: dict[str, list[float]] = defaultdict(list)
    for c in events:
        for k, v in c.steps.items():
            by_step[k].append(v)
    timed = {k: v for k, v in by_step.items() if not k.endswith("CPU")}
    print(f"\n{len(events)} events: median microseconds after the bench's write to A begins")
    for k, times in sorted(timed.items(), key=lambda kv: statistics.median(kv[1])):
        print(f"  {statistics.median(times):8.0f}  {k}  (n={len(times)})")
    print("\nonce woken, the first time in an event (median wait for a CPU; share woken onto the")
    print("CPU of the process that woke it):")
    for k in sorted(by_step):
        if k.endswith("wait for a CPU"):
            who = k.split(":")[0]
            same = by_step[f"{who}: onto the waker's CPU"]
            wait = statistics.median(by_step[k])
            print(f"  {who}: {wait:6.0f} us; {sum(same) / len(same):4.0%} (n={len(same)})")
    print(sched_params_line(kernel_sched_params()))


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.timeline", description=__doc__.splitlines()[0]
    )
    p.add_argument("--nodes", type=int, default=3, choices=(2, 3))
    p.add_argument("--seconds", type=float, default=2.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvpair-timeline-") as tmp:
        data = Path(tmp) / "perf.data"
        names, stdout_fds = record(args.nodes, args.seconds, data)
        report(cycles(parse(data, names), names, stdout_fds))


if __name__ == "__main__":
    main()
