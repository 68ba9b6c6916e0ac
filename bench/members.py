"""Members: one real node against 10, 100 and 1,000 simulated members, side by side.

For each member count N, one run of the phases below against a fresh ``nvpair-wm`` (the
simulator, :mod:`bench.members_sim`, plays the members and the node's broker):

1. **start**: spawn to ``ready`` with N pins in ``trusted/`` (wall and CPU of the node);
2. **nodes:update** with N + 1 records, as a request: time to its answer, then until the node
   holds a connection to every member, and every member one to the node;
3. **held**: RSS and descriptors of the node with the mesh up, against right after ``ready``
   (per member), and its CPU while idle;
4. **received**: members send ``EVENTS_IN`` new workloads at ``RATE_IN`` events/s (cluster
   rate, members in turn, one request per event); the node's CPU per event, and every workload
   must reach the broker once;
5. **broadcast**: the broker reports local events one at a time (the next once every member has
   the last): the node's CPU per local event and per request it became; every member must get
   every event once;
6. **restart**: ``kill -9`` and start again: the members reconnect with the daemon's own
   backoff and send their snapshots; time until every member's snapshot was taken and the
   broker holds each received workload, with the upserts it was sent again (at most once each)
   and the 503s the members got;
7. **partition**: every connection both ways cut and the members' listeners closed for
   ``PARTITION_S``, then healed: time until every link is back and has delivered its snapshot
   both ways, 503s, upserts at the broker (none: it has everything) and the node's peak RSS.

CPU is the node's, from ``/proc`` (all threads), not wall time: the machine is shared. The
simulator is one process on one core standing for N machines: its members take turns to
connect (``members_sim.HANDSHAKES_AT_ONCE``) and the node is given 60 s instead of 5 s to
connect and handshake (``SIMULATOR_TIMEOUTS``), so that the simulator's own slowness under a
thousand handshakes does not count as the node's failure. Times of the mesh, the restart and
the heal include the simulator's share of the two cores.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from bench import procs
from bench.harness import BenchResult, Check, Context, Measurement, fmt
from bench.members_sim import Cluster, event_frame

NAME = "members"
DESCRIPTION = "one node against 10, 100 and 1,000 simulated members: CPU, memory, start, resync"

SIZES: Final = (10, 100, 1_000)
QUICK_SIZES: Final = (10, 50, 200)
RATE_IN: Final = 2_000  # events/s, the whole cluster's, sent to the node
EVENTS_IN: Final = 4_000
BROADCAST_REQUESTS: Final = 20_000  # local events = this / N, within [20, 500]
PARTITION_S: Final = 3.0
WAIT_S: Final = 120.0
# The simulator's one core plays every member's TLS: a thousand handshakes it answers in turn
# take longer than a real member's would, so the node waits longer for them than its defaults
# (5 s) before it gives up and retries; the node's own side is unchanged.
SIMULATOR_TIMEOUTS: Final = """[broadcast]
connect_timeout = 60.0
handshake_timeout = 60.0
[http]
unauthenticated_timeout = 60.0
handshake_timeout = 60.0
"""


async def _idle_cpu(cluster: Cluster, seconds: float) -> float:
    c0 = procs.cpu_seconds(cluster.proc.pid)
    await asyncio.sleep(seconds)
    return (procs.cpu_seconds(cluster.proc.pid) - c0) / seconds


async def _received(cluster: Cluster, count: int, rate: float) -> dict[str, Any]:
    """Phase 4: ``count`` events from the members at ``rate`` events/s."""
    proc, members = cluster.proc, cluster.members
    ids = [f"{members[k % len(members)].name}-e{k}" for k in range(count)]
    c0 = procs.cpu_seconds(proc.pid)
    t0 = time.perf_counter()
    k = 0
    while k < count:
        due = min(count, int((time.perf_counter() - t0) * rate) + 1)
        while k < due:
            members[k % len(members)].originate(ids[k])
            k += 1
        await asyncio.sleep(0.005)
    wall = await cluster.until(
        lambda: all(proc.upserts[i] for i in ids), WAIT_S, "every received event at the broker"
    )
    cpu = procs.cpu_seconds(proc.pid) - c0
    return {
        "events": count,
        "cpu_s": cpu,
        "cpu_per_event_s": cpu / count,
        "wall_s": time.perf_counter() - t0,
        "drain_s": wall,
        "broker_max": max(proc.upserts[i] for i in ids),
        "broker_missing": sum(1 for i in ids if not proc.upserts[i]),
    }


async def _broadcast(cluster: Cluster, count: int) -> dict[str, Any]:
    """Phase 5: ``count`` local events, each once every member has the one before."""
    proc, members = cluster.proc, cluster.members
    ids = [f"local-{j}" for j in range(count)]
    r0 = cluster.requests_in
    c0 = procs.cpu_seconds(proc.pid)
    t0 = time.perf_counter()
    for wid in ids:
        proc.send(event_frame(wid, cluster.node.name))
        key = (wid, 1)
        await cluster.until(
            lambda key=key: all(m.received[key] for m in members),  # type: ignore[misc]
            WAIT_S,
            f"local event {wid} at every member",
        )
    cpu = procs.cpu_seconds(proc.pid) - c0
    requests = cluster.requests_in - r0
    counts = [m.received[(wid, 1)] for m in members for wid in ids]
    return {
        "events": count,
        "requests": requests,
        "cpu_s": cpu,
        "cpu_per_event_s": cpu / count,
        "cpu_per_request_s": cpu / max(1, requests),
        "wall_s": time.perf_counter() - t0,
        "member_max": max(counts),
        "member_missing": sum(1 for c in counts if not c),
    }


async def _restart(cluster: Cluster, in_ids: list[str], local_ids: list[str]) -> dict[str, Any]:
    """Phase 6: kill -9, start again, resynchronise both ways."""
    proc, members = cluster.proc, cluster.members
    done0 = {m.name: m.snapshots_done for m in members}
    got0 = {m.name: sum(m.received[(w, 1)] for w in local_ids) for m in members}
    proc.kill()
    await proc.wait_exit()
    before = proc.upserts.copy()
    proc.upserts.clear()
    s0 = cluster.statuses[503]
    t0 = time.perf_counter()
    start = await proc.start()
    start_cpu = procs.cpu_seconds(proc.pid)
    await cluster.nodes_update()
    await cluster.until(
        lambda: all(m.snapshots_done > done0[m.name] for m in members),
        WAIT_S,
        "every member's snapshot taken by the restarted node",
    )
    await proc.request("manager:status")  # what was written before its answer has been read
    members_in = time.perf_counter() - t0
    at_broker = sum(1 for i in in_ids if proc.upserts[i])
    await cluster.until(
        lambda: all(
            sum(m.received[(w, 1)] for w in local_ids) >= got0[m.name] + len(local_ids)
            for m in members
        ),
        WAIT_S,
        "the restarted node's snapshot at every member",
    )
    out = time.perf_counter() - t0
    return {
        "start_s": start,
        "start_cpu_s": start_cpu,
        "members_snapshots_in_s": members_in,
        "node_snapshot_out_s": out,
        "upserts_again": at_broker,
        "upserts_max": max((proc.upserts[i] for i in in_ids), default=0),
        "known_before": sum(1 for i in in_ids if before[i]),
        "http_503": cluster.statuses[503] - s0,
        "cpu_s": procs.cpu_seconds(proc.pid),
    }


async def _partition(cluster: Cluster, local_ids: list[str]) -> dict[str, Any]:
    """Phase 7: every link cut for PARTITION_S, then healed."""
    proc, members = cluster.proc, cluster.members
    done0 = {m.name: m.snapshots_done for m in members}
    got0 = {m.name: sum(m.received[(w, 1)] for w in local_ids) for m in members}
    upserts0 = sum(proc.upserts.values())
    rss0 = proc.rss()
    cluster.partition()
    await asyncio.sleep(PARTITION_S)  # how long the partition lasts: an input, not a wait
    s0 = cluster.statuses[503]
    c0 = procs.cpu_seconds(proc.pid)
    await cluster.heal()
    t0 = time.perf_counter()
    peak = rss0
    first_link: float | None = None

    def healed() -> bool:
        nonlocal peak, first_link
        peak = max(peak, proc.rss())
        if first_link is None and cluster.links_up():
            first_link = time.perf_counter() - t0
        return all(m.snapshots_done > done0[m.name] for m in members) and all(
            sum(m.received[(w, 1)] for w in local_ids) >= got0[m.name] + len(local_ids)
            for m in members
        )

    took = await cluster.until(healed, WAIT_S, "every link back with its snapshot both ways")
    await proc.request("manager:status")  # what was written before its answer has been read
    return {
        "heal_s": took,
        "first_link_s": first_link or 0.0,
        "http_503": cluster.statuses[503] - s0,
        "upserts_at_broker": sum(proc.upserts.values()) - upserts0,
        "rss_before": rss0,
        "rss_peak": peak,
        "cpu_s": procs.cpu_seconds(proc.pid) - c0,
    }


def _timeouts(root: Path) -> str:
    config = root / "simulator-timeouts.toml"
    root.mkdir(parents=True, exist_ok=True)
    config.write_text(SIMULATOR_TIMEOUTS)
    return str(config)


async def run_size(n: int, root: Path, quick: bool, log: Any = print) -> dict[str, Any]:
    """Every phase with ``n`` members; the figures as a dict."""
    out: dict[str, Any] = {"members": n}
    t0 = time.perf_counter()
    cluster = Cluster.create(root, n, ["--config", _timeouts(root), *procs.EXTRA_ARGS])
    out["keys_s"] = time.perf_counter() - t0
    try:
        await cluster.listen()
        out["start_s"] = await cluster.proc.start()
        out["start_cpu_s"] = procs.cpu_seconds(cluster.proc.pid)
        rss0, fds0 = cluster.proc.rss(), cluster.proc.fds()
        out["update_s"] = await cluster.nodes_update()
        t1 = time.perf_counter()
        await cluster.until(lambda: cluster.links_up() == n, WAIT_S, "a link to every member")
        out["links_s"] = time.perf_counter() - t1
        cluster.start_clients()
        await cluster.until(lambda: cluster.clients_up() == n, WAIT_S, "every member connected")
        out["mesh_s"] = time.perf_counter() - t1
        out["idle_cpu"] = await _idle_cpu(cluster, 1.0 if quick else 2.0)
        rss1, fds1 = cluster.proc.rss(), cluster.proc.fds()
        out.update(rss_ready=rss0, rss_mesh=rss1, fds_ready=fds0, fds_mesh=fds1)
        out["rss_per_member"] = (rss1 - rss0) / n
        log(f"members {n}: mesh up in {out['mesh_s']:.2f}s, {fmt(out['rss_per_member'])} B each")
        events_in = EVENTS_IN // (4 if quick else 1)
        out["received"] = await _received(cluster, events_in, RATE_IN)
        in_ids = [f"{cluster.members[k % n].name}-e{k}" for k in range(events_in)]
        local = max(20, min(500, BROADCAST_REQUESTS // n)) // (4 if quick else 1)
        out["broadcast"] = await _broadcast(cluster, local)
        local_ids = [f"local-{j}" for j in range(local)]
        log(f"members {n}: received and broadcast done")
        out["restart"] = await _restart(cluster, in_ids, local_ids)
        log(f"members {n}: restart done")
        out["partition"] = await _partition(cluster, local_ids)
        out["rss_end"] = cluster.proc.rss()
        problems = [p for m in cluster.members for p in m.problems]
        out["problems"] = problems[:10]
        status = await cluster.proc.request("manager:status")
        out["status_bytes"] = len(str(status))
    finally:
        await cluster.close()
    return out


def run(ctx: Context) -> BenchResult:
    res = BenchResult(NAME, DESCRIPTION)
    sizes = QUICK_SIZES if ctx.quick else SIZES
    runs: dict[int, dict[str, Any]] = {}
    for n in sizes:
        root = Path(tempfile.mkdtemp(prefix=f"nvpair-bench-members-{n}-"))
        try:
            runs[n] = asyncio.run(run_size(n, root, ctx.quick, ctx.log))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    res.params["runs"] = runs
    for n, r in runs.items():
        rc, bc = r["received"], r["broadcast"]
        for key, label, unit, value in (
            ("in", "node CPU per event received", "us/event", rc["cpu_per_event_s"] * 1e6),
            ("out", "node CPU per local event broadcast", "us/event", bc["cpu_per_event_s"] * 1e6),
            ("req", "node CPU per request sent", "us/request", bc["cpu_per_request_s"] * 1e6),
            ("mem", "RSS per member held", "B/member", r["rss_per_member"]),
        ):
            res.measurements.append(
                Measurement(f"{key}/{n}", f"{label}, {n} members", unit, [value], False)
            )
    res.tables.append(_table(runs))
    big = max(runs)
    r = runs[big]
    res.checks.append(
        Check(
            f"every event at the broker once and at every member once ({big} members)",
            float(
                r["received"]["broker_missing"]
                + r["broadcast"]["member_missing"]
                + (r["received"]["broker_max"] > 1)
                + (r["broadcast"]["member_max"] > 1)
            ),
            "faults",
            "0",
            r["received"]["broker_missing"] == 0
            and r["broadcast"]["member_missing"] == 0
            and r["received"]["broker_max"] == 1
            and r["broadcast"]["member_max"] == 1,
        )
    )
    res.checks.append(
        Check(
            f"no duplicate at the broker after a healed partition ({big} members)",
            float(r["partition"]["upserts_at_broker"]),
            "upserts",
            "0",
            r["partition"]["upserts_at_broker"] == 0,
        )
    )
    return res


def _table(runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    def row(label: str, get: Any) -> list[str]:
        return [label, *(get(r) for r in runs.values())]

    mib = 1024 * 1024

    def ms(x: float) -> str:
        return f"{x * 1e3:.1f} ms"

    def s2(x: float) -> str:
        return f"{x:.2f} s"

    def us(x: float) -> str:
        return f"{x * 1e6:,.0f} us"

    def pair(a: float, b: float) -> str:
        return f"{a:.2f} / {b:.2f} s"

    rows = [
        row("keys + trusted/ written (bench)", lambda r: s2(r["keys_s"])),
        row("start: spawn -> ready, wall / CPU", lambda r: pair(r["start_s"], r["start_cpu_s"])),
        row("nodes:update answered", lambda r: ms(r["update_s"])),
        row("links to every member", lambda r: s2(r["links_s"])),
        row("mesh up both ways", lambda r: s2(r["mesh_s"])),
        row(
            "RSS ready -> mesh",
            lambda r: f"{r['rss_ready'] / mib:.0f} -> {r['rss_mesh'] / mib:.0f} MiB",
        ),
        row("RSS per member held", lambda r: f"{fmt(r['rss_per_member'] / 1024)} KiB"),
        row("descriptors ready -> mesh", lambda r: f"{r['fds_ready']} -> {r['fds_mesh']}"),
        row("idle CPU with the mesh up", lambda r: f"{r['idle_cpu'] * 1e3:.1f} ms/s"),
        row("CPU per event received", lambda r: us(r["received"]["cpu_per_event_s"])),
        row("CPU per local event broadcast", lambda r: us(r["broadcast"]["cpu_per_event_s"])),
        row(
            "... per request it became",
            lambda r: (
                f"{us(r['broadcast']['cpu_per_request_s'])} "
                f"({r['broadcast']['requests'] / r['broadcast']['events']:.0f}/event)"
            ),
        ),
        row(
            "restart: spawn -> ready, wall / CPU",
            lambda r: pair(r["restart"]["start_s"], r["restart"]["start_cpu_s"]),
        ),
        row(
            "restart: every member's snapshot in, broker has all",
            lambda r: s2(r["restart"]["members_snapshots_in_s"]),
        ),
        row(
            "restart: own snapshot at every member",
            lambda r: s2(r["restart"]["node_snapshot_out_s"]),
        ),
        row(
            "restart: upserts again (max each) / 503s",
            lambda r: (
                f"{r['restart']['upserts_again']} ({r['restart']['upserts_max']}) / "
                f"{r['restart']['http_503']}"
            ),
        ),
        row(
            "healed: first link / all, snapshots both ways",
            lambda r: pair(r["partition"]["first_link_s"], r["partition"]["heal_s"]),
        ),
        row(
            "healed: 503s / upserts at the broker",
            lambda r: f"{r['partition']['http_503']} / {r['partition']['upserts_at_broker']}",
        ),
        row(
            "healed: RSS before -> peak, CPU",
            lambda r: (
                f"{r['partition']['rss_before'] / mib:.0f} -> "
                f"{r['partition']['rss_peak'] / mib:.0f} MiB, {r['partition']['cpu_s']:.2f} s"
            ),
        ),
    ]
    return {
        "title": "one node, N simulated members (one run each; CPU from /proc of the node)",
        "columns": ["", *(f"{n} members" for n in runs)],
        "rows": rows,
    }


if __name__ == "__main__":
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    tmp = Path(tempfile.mkdtemp(prefix="nvpair-members-"))
    try:
        figures = asyncio.run(run_size(n, tmp, quick="--quick" in sys.argv))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    import json

    print(json.dumps(figures, indent=1, default=str))
