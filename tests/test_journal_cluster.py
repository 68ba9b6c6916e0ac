"""Issue 10 item 3 end to end: an origin killed while a peer cannot take its events loses nothing.

Real ``nvpair-wm`` processes with real cluster directories and mutual TLS (:mod:`tests.cluster`).
Node A's peer B cannot take A's events (B does not pin A, or B is SIGSTOPped before A ever
reached it), so everything A's broker reports stays queued in A; A is ``kill -9``ed, restarted
with the same cluster directory (its journal), and only then can B take A's events. B's broker
must end with exactly the newest state of every workload, the removals applied, nothing
upserted twice and no ``seq`` going backwards. Synchronisation is by events (a frame on a
broker side, a ``manager:status`` answer that follows the frames before it on the same
channel); where only status tells (B refusing A), the status is polled with a deadline.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nvpair_wm.journal import JOURNAL_FILE
from tests.cluster import Cluster, Node, event, is_upsert, removal, workload

CONVERGE_WITHIN = 15.0  # A's link to B reconnects within its capped backoff (5 s), plus start-up


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(size: int = 2) -> Cluster:
        c = Cluster(tmp_path / f"cluster{len(made)}", size)
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.close()
    assert [line for c in made for line in c.errors()] == []


def report_then_kill(a: Node) -> dict[tuple[str, str], int]:
    """A's broker reports events and removals B cannot get yet; A is killed. Returns what A's
    journal must still hold: (origin, id) → newest seq."""
    st = a.status()
    before, sent_before = st["counters"], a.peer(st, "node-b")["sent"]
    a.send_all(
        [
            event("workload:submitted", workload("node-a", "w1", 1)),
            event("workload:started", workload("node-a", "w1", 2, startedAt=2)),
            event("workload:completed", workload("node-a", "w1", 3, completedAt=3)),
            event("workload:submitted", workload("node-a", "w2", 1)),
            event("workload:started", workload("node-a", "w2", 2, startedAt=2)),
            event("workload:submitted", workload("node-a", "w3", 1)),
            removal("node-a", "w3"),  # without runId: the newest run A holds
            event("workload:submitted", workload("node-a", "w4", 1)),
            event("workload:started", workload("node-a", "w4", 2, startedAt=2)),
            removal("node-a", "w4", "run-node-a"),
        ]
    )
    # Answered after every frame before it was dispatched (and so journaled): the broker now
    # knows the node has them.
    st = a.status()
    counters = st["counters"]
    assert counters["workloads"] == before["workloads"] + 2, st
    assert counters["tombstones"] == before["tombstones"] + 2, st
    assert a.peer(st, "node-b")["sent"] == sent_before, st  # nothing of it reached B
    a.kill()
    return {("node-a", "w1"): 3, ("node-a", "w2"): 2}


def restart_with_journal(cluster: Cluster, a: Node, held: int) -> None:
    """A starts again on the same cluster dir, holding what it originated before the kill; its
    new broker re-reports as the contract asks (one workload moved on meanwhile, the others
    are duplicates that cost nothing)."""
    assert (a.cluster_dir / JOURNAL_FILE).exists()
    a.start()
    st = a.status()
    assert st["counters"]["workloads"] == held and st["counters"]["tombstones"] == 2, st
    a.wait_log(f"journal: reloaded {held + 2} records")
    cluster.announce(to=[a])
    a.send_all(
        [
            event("workload:completed", workload("node-a", "w1", 3, completedAt=3)),  # duplicate
            event("workload:completed", workload("node-a", "w2", 3, completedAt=9)),  # newer
        ]
    )
    assert a.status()["counters"]["duplicates"] == 1


def check_b(b: Node, newest: dict[tuple[str, str], int]) -> None:
    """B's broker converges to ``newest``, with the removals, once, never going backwards."""
    b.wait_until(
        lambda _: (
            {k: v["seq"] for k, v in b.view().items()} == newest
            and {r["workloadId"] for r in b.removals()} == {"w3", "w4"}
        ),
        timeout=CONVERGE_WITHIN,
    )
    b.status()  # everything B wrote before this answer is in `seen`
    seqs: dict[tuple[str, str], list[int]] = {}
    for info in b.upserts():
        seqs.setdefault((info["runId"], info["id"]), []).append(info["seq"])
    for key, got in seqs.items():
        assert got == sorted(set(got)), (key, got)  # forward only, never twice
    assert ("run-node-a", "w3") not in seqs and ("run-node-a", "w4") not in seqs
    removals = b.removals()
    assert sorted(r["workloadId"] for r in removals) == ["w3", "w4"]  # each once
    assert {r["workloadId"]: r.get("runId") for r in removals} == {
        "w3": "run-node-a",
        "w4": "run-node-a",
    }


def test_origin_killed_while_its_peer_refuses_it_loses_nothing(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(2)
    cluster.start()
    a, b = cluster["node-a"], cluster["node-b"]
    a.send(event("workload:submitted", workload("node-a", "warm")))
    b.wait_for(is_upsert("warm"))
    pin = b.cluster_dir / "trusted" / "node-a.crt"
    saved = pin.read_bytes()
    pin.unlink()  # B refuses A from its next request on (403, which A retries)
    a.send(event("workload:submitted", workload("node-a", "probe")))
    a.poll_status(
        lambda st: "HTTP 403" in (a.peer(st, "node-b")["lastError"] or ""), what="403 from B"
    )
    newest = report_then_kill(a) | {("node-a", "warm"): 1, ("node-a", "probe"): 1}
    restart_with_journal(cluster, a, len(newest))
    newest[("node-a", "w2")] = 3
    tmp = pin.with_name(".node-a.crt.tmp")
    tmp.write_bytes(saved)
    tmp.rename(pin)  # B pins A again (atomically, as nvpair-wm-cluster writes)
    check_b(b, newest)


def test_origin_killed_while_its_peer_is_stopped_loses_nothing(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster(2)
    a, b = cluster["node-a"], cluster["node-b"]
    for n in (a, b):
        n.start()
    b.signal(signal.SIGSTOP)  # before A knows B: A never completes a handshake with it
    try:
        cluster.announce(to=[a])
        newest = report_then_kill(a)
        restart_with_journal(cluster, a, len(newest))
        newest[("node-a", "w2")] = 3
    finally:
        b.signal(signal.SIGCONT)
    check_b(b, newest)
