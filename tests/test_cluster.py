"""Issue 4 end to end: real nvpair-wm processes with their brokers driven by the test.

Every test runs separate ``nvpair-wm`` processes on loopback with real cluster directories and real
mutual TLS (:mod:`tests.support.cluster`). Synchronisation is by events: a frame on a node's broker
side, a line in its stderr log, a process exit, each awaited with a deadline. Absence is shown by
structure plus ordering: the sender's ``manager:status`` proves it has no link (or that nothing was
sent), a fence event over the same path arrives, and only then is the broker side checked. Where no
event announces a condition (a peer dropped after a pin change, a refusal counted) the test polls
``manager:status`` with a bounded deadline (:meth:`tests.support.cluster.Node.poll_status`) and says
so.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import queue
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nvpair_wm.outbox import BroadcastLimits
from tests.support.cluster import (
    Cluster,
    Node,
    event,
    is_removal,
    is_upsert,
    removal,
    workload,
)

# A restarted or re-admitted node must have the cluster's view "within seconds": this is the
# bound the tests hold it to (generous for a loaded 2-core machine; typically well under 1 s).
CONVERGE_WITHIN = 8.0


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Clusters made by the test (not started); every process is killed at teardown."""
    made: list[Cluster] = []

    def make(size: int = 3, **kwargs: Any) -> Cluster:
        c = Cluster(tmp_path / f"cluster{len(made)}", size, **kwargs)
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.close()
    # No process hit an internal error (the log says ERROR, or a traceback was printed).
    assert [line for c in made for line in c.errors()] == []


@pytest.fixture
def cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    c = make_cluster(3)
    c.start()
    return c


def view_of(infos: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], int]:
    """(origin, id) → seq: the part of a view that says which state a broker has."""
    return {key: info["seq"] for key, info in infos.items()}


def converged(
    node: Node, expected: dict[tuple[str, str], int]
) -> Callable[[list[dict[str, Any]]], bool]:
    """For Node.wait_until: ``node``'s broker view is ``expected`` ((origin, id) → seq)."""
    return lambda _: view_of(node.view()) == expected


def per_workload(node: Node) -> dict[str, list[int]]:
    """id → the seqs of its upserts at ``node``'s broker, in arrival order."""
    out: dict[str, list[int]] = {}
    for info in node.upserts():
        out.setdefault(info["id"], []).append(info["seq"])
    return out


def fence(sender: Node, receivers: list[Node], wid: str) -> None:
    """Report a new workload on ``sender`` and wait until every receiver's broker has it."""
    sender.send(event("workload:submitted", workload(sender.name, wid)))
    for r in receivers:
        r.wait_for(is_upsert(wid))


# -- 1. exactly once, fields unchanged, every lifecycle method, removal -------------------------


def test_an_event_on_a_reaches_b_and_c_exactly_once(cluster: Cluster) -> None:
    a, b, c = cluster["node-a"], cluster["node-b"], cluster["node-c"]
    info = workload("node-a", "w1", requesterId=None, prompt="never relayed")
    a.send(event("workload:submitted", info))
    for peer in (b, c):
        got = peer.wait_for(is_upsert("w1"))["params"]["workloadInfo"]
        expected = {k: v for k, v in info.items() if k != "prompt"}
        assert got == expected  # state queued, every field unchanged, prompt dropped
    # The same event again, and reported by the other nodes' brokers too: still once.
    for n in (a, b, c):
        n.send(event("workload:submitted", info))
    a.send(event("workload:started", workload("node-a", "w1", seq=2, startedAt=5)))
    for peer in (b, c):
        peer.wait_for(is_upsert("w1", seq=2))
        peer.status()  # everything written before this response is in `seen`
        assert [u["seq"] for u in peer.upserts() if u["id"] == "w1"] == [1, 2]
    assert a.upserts() == []  # local events are never echoed


def test_every_lifecycle_method_and_a_removal_propagate_once(cluster: Cluster) -> None:
    a, b, c = cluster["node-a"], cluster["node-b"], cluster["node-c"]
    # The state in the frame is deliberately stale ("queued"): the method sets it.
    sent = [
        ("workload:submitted", workload("node-a", "w1", 1, requesterId="team-x")),
        ("workload:started", workload("node-a", "w1", 2, requesterId="team-x", startedAt=11)),
        (
            "workload:completed",
            workload("node-a", "w1", 3, requesterId="team-x", startedAt=11, completedAt=12),
        ),
        ("workload:submitted", workload("node-a", "w2", 1, engine="sglang")),
        ("workload:errored", workload("node-a", "w2", 2, completedAt=13, error="OOM: 80 GiB")),
        ("workload:submitted", workload("node-a", "w3", 1, model="qwen2.5-7b")),
        ("workload:cancelled", workload("node-a", "w3", 2, model="qwen2.5-7b", completedAt=14)),
    ]
    state = {
        "workload:submitted": "queued",
        "workload:started": "running",
        "workload:completed": "completed",
        "workload:errored": "failed",
        "workload:cancelled": "cancelled",
    }
    # One at a time: reported in one burst, they would (rightly) coalesce in A's queues.
    for method, info in sent:
        a.send(event(method, info))
        for peer in (b, c):
            got = peer.wait_for(is_upsert(info["id"], info["seq"]))["params"]["workloadInfo"]
            assert got == {**info, "state": state[method]}  # the method sets the state only
    for peer in (b, c):
        peer.status()
        assert per_workload(peer) == {"w1": [1, 2, 3], "w2": [1, 2], "w3": [1, 2]}

    # A removal propagates once (a repeat of it on A is a duplicate and is not sent again).
    a.send(removal("node-a", "w1"))
    a.send(removal("node-a", "w1"))
    for peer in (b, c):
        got_rm = peer.wait_for(is_removal("w1"))["params"]
        assert got_rm == {"workloadId": "w1", "originatedFrom": "node-a", "runId": "run-node-a"}

    # A late event after the removal resurrects nothing: reported again on A (whose tombstone
    # suppresses it) and, as a delayed copy, on C's broker (C holds the tombstone it was sent).
    late = event("workload:completed", workload("node-a", "w1", 4, completedAt=15))
    a.send(late)
    c.send(late)
    assert a.status()["counters"]["suppressed"] == 1
    assert c.status()["counters"]["suppressed"] == 1
    # Fences from A and C, over the same links, arrive after anything reported before them.
    fence(a, [b, c], "fence-a")
    fence(c, [a, b], "fence-c")
    for peer in (b, c):
        peer.status()
        w1 = [f for f in peer.seen if is_upsert("w1")(f) or is_removal("w1")(f)]
        assert [f["method"] for f in w1] == ["workloads:upsert"] * 3 + ["workloads:remove"]
        assert per_workload(peer)["w1"] == [1, 2, 3]
    assert a.removals() == [] and a.upserts() == [workload("node-c", "fence-c")]


def seqs_now(seen: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in seen:
        if f.get("method") == "workloads:upsert":
            info = f["params"]["workloadInfo"]
            out[info["id"]] = max(out.get(info["id"], 0), info["seq"])
    return out


# -- 2, 3. a killed node, restarted, converges (also after its peers gave up) -------------------


def _report_while_b_is_down(a: Node, c: Node) -> dict[tuple[str, str], int]:
    """New workloads, state changes and a removal on A and C; returns the expected view."""
    a.send_all(
        [
            event("workload:started", workload("node-a", "a1", 2, startedAt=21)),
            event("workload:completed", workload("node-a", "a2", 2, completedAt=22)),
            event("workload:submitted", workload("node-a", "a3")),
            removal("node-a", "a-gone"),
        ]
    )
    c.send_all(
        [
            event("workload:errored", workload("node-c", "c1", 2, error="boom", completedAt=23)),
            event("workload:submitted", workload("node-c", "c2")),
            event("workload:started", workload("node-c", "c2", 2, startedAt=24)),
        ]
    )
    for n in (a, c):
        n.status()  # each has read and dispatched all of the above
    return {
        ("node-a", "a-still"): 1,  # only a snapshot can bring these back to a restarted B
        ("node-c", "c-still"): 1,
        ("node-a", "a1"): 2,
        ("node-a", "a2"): 2,
        ("node-a", "a3"): 1,
        ("node-c", "c1"): 2,
        ("node-c", "c2"): 2,
    }


def _report_before_the_kill(a: Node, b: Node, c: Node) -> None:
    """Workloads B's broker has before it dies; a-still and c-still never change after."""
    a.send_all(
        event("workload:submitted", workload("node-a", w))
        for w in ("a1", "a2", "a-gone", "a-still")
    )
    c.send_all(event("workload:submitted", workload("node-c", w)) for w in ("c1", "c-still"))
    b.wait_until(lambda seen: len(seqs_now(seen)) == 6)


def _restart_and_converge(cluster: Cluster, b: Node, expected: dict[tuple[str, str], int]) -> float:
    """Restart B on its port with a fresh broker; wait for the full view; returns seconds."""
    port = b.port
    b.start()
    assert b.port == port
    started = time.monotonic()
    cluster.announce(to=[b])
    b.wait_until(converged(b, expected), timeout=CONVERGE_WITHIN)
    took = time.monotonic() - started
    # Each upsert once: fences from A and C follow anything their links still had for B.
    fence(cluster["node-a"], [b], "fence-a")
    fence(cluster["node-c"], [b], "fence-c")
    b.status()
    counts = per_workload(b)
    assert {w: s for w, s in counts.items() if not w.startswith("fence")} == {
        wid: [seq] for (_, wid), seq in expected.items()
    }
    # The removal is respected: never upserted, and the broker is told (from A's tombstone).
    assert "a-gone" not in counts
    assert [r["workloadId"] for r in b.removals()] == ["a-gone"]
    # Every field as reported: c1 is failed with its error text.
    c1 = next(u for u in b.upserts() if u["id"] == "c1")
    assert c1 == workload("node-c", "c1", 2, state="failed", error="boom", completedAt=23)
    return took


def test_kill_9_then_restart_on_the_same_port_converges(cluster: Cluster) -> None:
    a, b, c = cluster["node-a"], cluster["node-b"], cluster["node-c"]
    _report_before_the_kill(a, b, c)
    b.kill()
    expected = _report_while_b_is_down(a, c)
    _restart_and_converge(cluster, b, expected)
    # The restarted node is a full member again: its own events reach A and C.
    fence(b, [a, c], "fence-b")


@pytest.mark.serial  # a wall-clock bound: run alone (Makefile: test)
def test_peer_whose_retries_were_exhausted_converges_on_restart(
    make_cluster: Callable[..., Cluster],
) -> None:
    # A small retry budget (4 consecutive failures) so that it runs out in well under a second;
    # an exhausted link probes every retry_max_delay.
    limits: dict[str, Any] = {
        "retry_base": 0.05,
        "retry_max_delay": 0.4,
        "retry_max_attempts": 4,
        "min_reconnect_interval": 0.05,
    }
    cluster = make_cluster(3, broadcast=limits)
    cluster.start()
    a, b, c = cluster["node-a"], cluster["node-b"], cluster["node-c"]
    _report_before_the_kill(a, b, c)
    b.kill()
    a.send(event("workload:started", workload("node-a", "a1", 2, startedAt=21)))  # queued
    for n in (a, c):
        n.wait_log(f"peer node-b (127.0.0.1:{b.port}): giving up after 4 failures")
    # Given up: what is reported now for B is dropped at once (the resync will carry it).
    expected = _report_while_b_is_down(a, c)
    for n, reported in ((a, 4), (c, 3)):
        st = n.peer(n.status(), "node-b")
        assert st["dropped"] >= reported and not st["connected"]
        assert "Connection refused" in st["lastError"] and st["lastErrorAt"] is not None
    # The retries up to and past exhaustion kept to the (small) backoff, capped at 0.4 s.
    needle = f"peer node-b (127.0.0.1:{b.port}): cannot connect"
    for n in (a, c):
        lines = n.log_lines(needle)
        assert len(lines) >= 3
        assert_backoff(lines, BroadcastLimits(**limits))
    took = _restart_and_converge(cluster, b, expected)
    # Probed every <= 0.4 s: the restarted node is found within about that (plus a start).
    assert took < 3.0, took


# -- 4. unpinned peers, nodes without identity ----------------------------------------------------


def test_unpinned_peer_gets_nothing_and_its_traffic_is_refused(cluster: Cluster) -> None:
    a, b, c = cluster["node-a"], cluster["node-b"], cluster["node-c"]
    fence(a, [b, c], "warm-a")  # the links are up
    (a.cluster_dir / "trusted" / "node-c.crt").unlink()  # A no longer pins C; C still pins A
    # No event says A re-read trusted/ (its reconcile tick is 1 s): poll A's status.
    a.poll_status(
        lambda st: [p["nodeId"] for p in st["peers"]] == ["node-b"], what="node-c dropped"
    )
    # A sends to B only.
    fence(a, [b], "from-a")
    # C's traffic to A is refused with 403 (C retries it); B takes it.
    c.send(event("workload:submitted", workload("node-c", "from-c")))
    b.wait_for(is_upsert("from-c"))
    # The refusal is only visible in C's status: poll it (bounded).
    st = c.poll_status(
        lambda st: "HTTP 403" in (c.peer(st, "node-a")["lastError"] or ""), what="403 from A"
    )
    assert c.peer(st, "node-a")["sent"] == 0  # C has sent A nothing that A accepted
    a.status()
    assert not any(is_upsert("from-c")(f) for f in a.seen)
    c.status()
    assert not any(is_upsert("from-a")(f) for f in c.seen)
    assert a.peer(a.status(), "node-c") is None
    # Pinned again (written atomically, as nvpair-wm-cluster does): C's retried event gets in,
    # and A's snapshot brings C what it missed; each broker gets each workload once.
    tmp = a.cluster_dir / "trusted" / ".node-c.crt.tmp"
    tmp.write_bytes((c.cluster_dir / "node.crt").read_bytes())
    tmp.rename(a.cluster_dir / "trusted" / "node-c.crt")
    a.wait_for(is_upsert("from-c"), timeout=CONVERGE_WITHIN)
    c.wait_for(is_upsert("from-a"), timeout=CONVERGE_WITHIN)
    fence(a, [b, c], "fence-a")
    for n, ids in ((a, ["from-c"]), (c, ["warm-a", "from-a", "fence-a"])):
        n.status()
        assert [u["id"] for u in n.upserts()] == ids


def test_node_without_identity_sends_nothing_until_its_files_appear(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(4)
    a, b, c, d = (cluster[f"node-{x}"] for x in "abcd")
    c.hide_identity()  # C: a cluster dir without node.crt/node.key
    d.use_cluster_dir = False  # D: no --cluster-dir at all
    cluster.start()
    c.send(event("workload:submitted", workload("node-c", "from-c")))
    d.send(event("workload:submitted", workload("node-d", "from-d")))
    for n in (c, d):
        st = n.status()  # after nodes:update and the event, on the same channel
        assert not st["hasIdentity"] and st["fingerprint"] is None
        assert st["peers"] == []  # no links: nothing can be sent
        assert st["counters"]["workloads"] == 1  # the event was taken, just not sent
    # The others' brokers never got anything from C or D; A and B still talk to each other.
    fence(a, [b], "fence-a")
    fence(b, [a], "fence-b")
    for n in (a, b):
        n.status()
        assert {u["id"] for u in n.upserts()} <= {"fence-a", "fence-b"}
    # Copy C's files in: no restart, it starts sending (its snapshot carries what it took).
    pid = c.wm.proc.pid
    c.restore_identity()
    for n in (a, b):
        n.wait_for(is_upsert("from-c"), timeout=CONVERGE_WITHIN)
    st = c.status()
    assert st["hasIdentity"] and st["fingerprint"] == c.fingerprint
    assert {p["nodeId"] for p in st["peers"]} == {"node-a", "node-b", "node-d"}
    assert c.wm.proc.pid == pid and c.wm.proc.poll() is None
    for n in (a, b, c):
        n.status()
        assert not any(is_upsert("from-d")(f) for f in n.seen)
    assert d.status()["peers"] == []


# -- 5. a server with the wrong certificate ------------------------------------------------------


def test_server_with_the_wrong_certificate_gets_nothing(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(3)
    for n in cluster:
        n.start()
    a, b, c = cluster["node-a"], cluster["node-b"], cluster["node-c"]
    right = cluster.records()
    swapped = [dict(r) for r in right]
    swapped[1]["port"], swapped[2]["port"] = right[2]["port"], right[1]["port"]
    cluster.announce(to=[b, c])
    cluster.announce(to=[a], records=swapped)  # A dials node-b at C's port and vice versa
    a.send(event("workload:submitted", workload("node-a", "secret")))

    def refused(st: Any) -> bool:
        return all("pin check failed" in (p["lastError"] or "") for p in st["peers"])

    # A pin refusal shows only in A's status (and log): poll the status (bounded).
    st = a.poll_status(refused, what="both pin checks failed")
    for p, presented in zip(st["peers"], (c, b), strict=True):
        assert not p["connected"] and p["sent"] == 0
        assert f"presented certificate {presented.fingerprint[:16]}" in p["lastError"]
    assert len(a.log_lines("refusing to send: server presented certificate")) >= 2
    # Nothing reached either wrongly addressed node. Fence: C's own event reaches B.
    fence(c, [b], "fence-c")
    for n in (b, c):
        n.status()
        assert not any(is_upsert("secret")(f) for f in n.seen)
    # The right addresses: A connects and its snapshot brings what it had held back.
    cluster.announce(to=[a])
    for n in (b, c):
        n.wait_for(is_upsert("secret"), timeout=CONVERGE_WITHIN)


# -- 6. coalescing under a slow peer ---------------------------------------------------------------


def test_slow_peer_gets_coalesced_newest_state(cluster: Cluster) -> None:
    a, b, c = cluster["node-a"], cluster["node-b"], cluster["node-c"]
    fence(a, [b, c], "warm-a")  # connections up before B stops answering
    rounds, wids = 20, ("k1", "k2", "k3")
    b.signal(signal.SIGSTOP)
    try:
        for seq in range(1, rounds + 1):
            a.send_all(
                event("workload:started", workload("node-a", w, seq, startedAt=seq)) for w in wids
            )
            a.status()  # A has queued this round before the next one is reported
        peer_b = a.peer(a.status(), "node-b")
    finally:
        b.signal(signal.SIGCONT)  # stopped for well under the 10 s response timeout
    pushed = rounds * len(wids)
    # B answers nothing: at most max_in_flight batches of <= 3 frames (one per workload) left
    # the queue; every other event replaced a queued one (plus the <= 3 still queued).
    in_flight_max = BroadcastLimits().max_in_flight * len(wids)
    assert peer_b["coalesced"] >= pushed - in_flight_max - len(wids), peer_b
    assert peer_b["queueDepth"] <= len(wids) and peer_b["dropped"] == 0
    newest = {("node-a", w): rounds for w in wids} | {("node-a", "warm-a"): 1}
    for n in (b, c):
        n.wait_until(converged(n, newest))
    fence(a, [b, c], "fence-a")
    b.status()
    got = per_workload(b)
    for w in wids:
        seqs = got[w]
        assert seqs == sorted(set(seqs)) and seqs[-1] == rounds  # newer only, never twice
    assert sum(len(got[w]) for w in wids) < pushed  # the broker saw the coalescing too


# -- 7. retry timing ------------------------------------------------------------------------------


def _log_time(line: str) -> float:
    stamp = line.split(" ", 1)[0]  # 2026-12-02T17:25:32.123Z (logs.py)
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


def _wait_log_count(node: Node, needle: str, count: int, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(lines := node.log_lines(needle)) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{node.name}: {len(lines)} of {count} {needle!r} lines")
        with contextlib.suppress(queue.Empty):
            node.wm.stderr_lines.get(timeout=left)  # a new line: look again
    return lines


_FAILURE = re.compile(r"cannot connect \(failure (\d+) in a row; next attempt in ([0-9.]+)s\)")


def assert_backoff(lines: list[str], lim: BroadcastLimits) -> list[float]:
    """Consecutive connect failures (log lines) keep to the backoff; returns their times.

    Each line names the run's failure count n and the wait w it chose before the next attempt:
    U(d/2, d) with d = min(cap, base * 2^(n-1)), or up to min_reconnect_interval after the failed
    attempt began if that is later. Nothing connects in between, so the next line is failure n+1;
    its attempt began no sooner than w after this line (less the millisecond rounding of the
    stamps), and a generous 1.5 s later at most: a loaded machine only ever makes retries later.
    """
    found = [(_log_time(line), _FAILURE.search(line)) for line in lines]
    parsed = [(t, int(m[1]), float(m[2])) for t, m in found if m is not None]
    assert len(parsed) == len(lines), lines
    for (t0, n0, w0), (t1, n1, _) in itertools.pairwise(parsed):
        d = min(lim.retry_max_delay, lim.retry_base * 2 ** (n0 - 1))
        assert d / 2 - 0.002 <= w0 <= max(d, lim.min_reconnect_interval) + 0.001, (n0, w0, d)
        assert n1 == n0 + 1, (n0, n1)
        assert w0 - 0.002 <= t1 - t0 <= w0 + 1.5, (n0, round(t1 - t0, 3), w0)
    return [t for t, _, _ in parsed]


def test_retries_to_a_down_peer_follow_the_documented_backoff(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(2)  # the shipped limits
    cluster.start()
    a, b = cluster["node-a"], cluster["node-b"]
    fence(a, [b], "warm-a")
    b.kill()
    killed_at = time.time()
    lim = BroadcastLimits()
    attempts = 6  # delays ~0.5, 0.5, 0.5, <=0.8, <=1.6 (one more if the kill failed a request)
    needle = f"peer node-b (127.0.0.1:{b.port}): cannot connect"
    lines = _wait_log_count(a, needle, attempts, timeout=15)[:attempts]
    times = assert_backoff(lines, lim)
    assert times[0] - killed_at < 2.0  # the lost connection is noticed and retried at once
    # And never more often than min_reconnect_interval (0.5 s): attempts 1 to 4 span >= 1.5 s
    # from start to start; from log line to log line, less the first refused connect's time.
    assert times[3] - times[0] >= 3 * lim.min_reconnect_interval - 0.5
    st = a.peer(a.status(), "node-b")
    assert not st["connected"] and "Connection refused" in st["lastError"]
    assert st["lastErrorAt"] / 1000 >= times[attempts - 1] - 0.002
    assert st["dropped"] == 0 and not a.log_lines("giving up")  # 8 attempts are allowed


# -- 8. SIGTERM flushes what is queued ------------------------------------------------------------


def test_sigterm_flushes_events_queued_for_a_live_peer(cluster: Cluster) -> None:
    a, b, c = cluster["node-a"], cluster["node-b"], cluster["node-c"]
    fence(a, [b, c], "warm-a")
    rounds, per_round = 24, 10  # more rounds than max_in_flight batches
    count = rounds * per_round
    b.signal(signal.SIGSTOP)  # B is alive but slow: A's frames for it stay queued
    try:
        # In rounds: one batch can carry a whole round, and at most max_in_flight (16) batches
        # wait for B's answers, so the last rounds stay in A's queue.
        for r in range(rounds):
            a.send_all(
                event("workload:submitted", workload("node-a", f"q{r * per_round + i}"))
                for i in range(per_round)
            )
            a.status()
        queued = a.peer(a.status(), "node-b")["queueDepth"]
        assert queued >= per_round, queued
        a.signal(signal.SIGTERM)
        a.wait_log("SIGTERM received; shutting down")
    finally:
        b.signal(signal.SIGCONT)
    assert a.wm.wait(timeout=10) == 0
    assert not a.log_lines("unsent to peers")
    want = {f"q{i}" for i in range(count)}
    for n in (b, c):
        n.wait_until(lambda seen: want <= set(seqs_now(seen)))
        n.status()
        got = per_workload(n)
        assert all(got[w] == [1] for w in want)  # every one, once
