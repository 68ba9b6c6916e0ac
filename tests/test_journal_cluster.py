"""Issue 10 item 3 end to end: an origin killed while a peer cannot take its events loses nothing.

Real ``nvpair-wm`` processes with real cluster directories and mutual TLS
(:mod:`tests.support.cluster`). Node A's peer B cannot take A's events (B does not pin A, or B is
SIGSTOPped before A ever reached it), so everything A's broker reports stays queued in A; A is
``kill -9``ed, restarted with the same cluster directory (its journal), and only then can B take A's
events. B's broker must end with exactly the newest state of every workload, the removals applied,
nothing upserted twice and no ``seq`` going backwards. Synchronisation is by events (a frame on a
broker side, a ``manager:status`` answer that follows the frames before it on the same channel);
where only status tells (B refusing A), the status is polled with a deadline.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nvpair_wm.journal import JOURNAL_FILE
from tests.support.cluster import Cluster, Node, event, is_upsert, removal, workload

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
    a.wait_log(f"journal: reloaded {held} workloads and 2 tombstones")
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
    # ...read after B's event loop saw the change: a request read in the same loop iteration
    # as the inotify event (both ready after one epoll_wait, the socket's callback first) is
    # still judged by the old pins and accepted, and A would then have nothing left to send.
    # B's reconcile dropping A as a peer says B's watch has seen it (it is the same watch the
    # endpoint checks); it comes within broadcast.reconcile_interval (1 s), well inside WAIT.
    dropped = b.wait_log(") removed (not in nodes:update, unpinned")
    assert "peer node-a (" in dropped, dropped
    a.send(event("workload:submitted", workload("node-a", "probe")))
    # A's log line for the 403, not its status: lastError holds the latest failure only, and
    # a closed connection or a failed reconnect between two retries can replace the 403 there
    # before a poll reads it.
    refused = a.wait_log("): HTTP 403: ")
    assert refused.split(" DEBUG ")[-1].startswith("nvpair_wm.outbox: peer node-b "), refused
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


@pytest.mark.parametrize("damage", ["truncated tail", "garbage in the middle"])
def test_damaged_journal_is_reported_and_the_node_starts(
    make_cluster: Callable[..., Cluster], damage: str
) -> None:
    """A torn or corrupt journal: one warning line, the file moved aside, the node starts (no
    crash loop) with what could be trusted, and journals again from there."""
    cluster = make_cluster(1)
    a = cluster["node-a"]
    a.start()
    a.send_all(event("workload:submitted", workload("node-a", f"w{i}")) for i in range(3))
    assert a.status()["counters"]["workloads"] == 3
    a.kill()
    path = a.cluster_dir / JOURNAL_FILE
    data = path.read_bytes()
    if damage == "truncated tail":
        path.write_bytes(data[:-5])  # what a power failure during the last append leaves
        held, needle = 2, "torn tail: file ends inside a record"
    else:
        path.write_bytes(data[:40] + b"\x00garbage\xff" * 4 + data[76:])
        held, needle = 0, "checksum mismatch"
    a.start()
    line = a.wait_log(f"journal {path} damaged at byte")
    assert needle in line and " WARN" in line, line
    assert len(a.log_lines(f"journal {path} damaged")) == 1
    assert a.status()["counters"]["workloads"] == held
    [aside] = a.cluster_dir.glob(f"{JOURNAL_FILE}.damaged-*")
    assert aside.read_bytes() != path.read_bytes()
    # Healthy from here: a new event survives the next kill -9, with no new warning.
    a.send(event("workload:submitted", workload("node-a", "after")))
    assert a.status()["counters"]["workloads"] == held + 1
    a.kill()
    a.start()
    assert a.status()["counters"]["workloads"] == held + 1
    assert not a.log_lines("damaged at byte")


@pytest.mark.parametrize("seed", [1, 2])
def test_repeated_kills_while_the_peer_is_stopped_lose_nothing(
    make_cluster: Callable[..., Cluster], seed: int
) -> None:
    """Three rounds of seeded broker traffic (events moving forward, removals with and without
    runId), each ended by ``kill -9`` and a restart whose broker re-reports its live workloads
    (the contract's duty; all duplicates here), while B is stopped throughout. Once B runs, its
    broker holds exactly the model's view: the newest seq of every live workload, a removal for
    every removed one, each upsert once, seq only forward."""
    rng = random.Random(seed)
    cluster = make_cluster(2)
    a, b = cluster["node-a"], cluster["node-b"]
    for n in (a, b):
        n.start()
    b.signal(signal.SIGSTOP)
    newest: dict[str, dict[str, Any]] = {}  # the broker's live workloads: id → newest info
    removed: set[str] = set()
    try:
        cluster.announce(to=[a])
        for rnd in range(3):
            frames: list[dict[str, Any]] = []
            for i in range(30):
                live = sorted(newest)
                if live and rng.random() < 0.15:
                    wid = rng.choice(live)
                    del newest[wid]
                    removed.add(wid)
                    frames.append(removal("node-a", wid, "run-node-a" if i % 2 else None))
                    continue
                wid = rng.choice([*live, f"r{rnd}-{i}"]) if live else f"r{rnd}-{i}"
                seq = newest[wid]["seq"] + rng.randint(1, 2) if wid in newest else 1
                method = rng.choice(["workload:submitted", "workload:started"])
                newest[wid] = info = workload("node-a", wid, seq, startedAt=seq)
                frames.append(event(method, info))
            a.send_all(frames)
            a.status()  # answered: every frame before it is journaled
            a.kill()
            a.start()
            cluster.announce(to=[a])
            a.send_all(event("workload:started", info) for info in newest.values())
            assert a.status()["counters"]["workloads"] == len(newest)
    finally:
        b.signal(signal.SIGCONT)
    expected = {("node-a", wid): info["seq"] for wid, info in newest.items()}
    b.wait_until(
        lambda _: (
            {k: v["seq"] for k, v in b.view().items()} == expected
            and {r["workloadId"] for r in b.removals()} == removed
        ),
        timeout=CONVERGE_WITHIN,
    )
    b.status()
    seqs: dict[str, list[int]] = {}
    for upserted in b.upserts():
        seqs.setdefault(upserted["id"], []).append(upserted["seq"])
    assert not seqs.keys() & removed  # B never saw those events: only their removals
    for wid, order in seqs.items():
        assert order == sorted(set(order)), (wid, order)
    assert len(b.removals()) == len(removed)  # each once


def test_a_restarted_relay_forwards_nothing_older_than_its_broker_has(
    make_cluster: Callable[..., Cluster],
) -> None:
    """Issue 24, the spec's multi-path workload: it enters on A (queued), runs on C (C's broker
    reports it started, then completed), and A's broker removes another. B relays all of it to
    its broker. After B's ``kill -9`` and restart, A's snapshot still holds the queued event
    and C's (which refuses A meanwhile) the completed workload A removed: B's journal knows
    what its broker was told, so B finds the first stale and the second removed, and its
    broker is told neither (only, once, the newest seq it already had)."""
    cluster = make_cluster(3)
    cluster.start()
    a, b, c = cluster["node-a"], cluster["node-b"], cluster["node-c"]
    a.send(event("workload:submitted", workload("node-a", "w1", 1)))
    c.wait_for(is_upsert("w1", 1))
    c.send(event("workload:started", workload("node-a", "w1", 2, scheduledOn="node-c")))
    a.send(event("workload:submitted", workload("node-a", "w2", 1)))
    c.wait_for(is_upsert("w2", 1))
    c.send_all(
        [
            event("workload:started", workload("node-a", "w2", 2, scheduledOn="node-c")),
            event("workload:completed", workload("node-a", "w2", 3, scheduledOn="node-c")),
        ]
    )
    a.wait_for(is_upsert("w2", 3))
    b.wait_for(is_upsert("w2", 3))
    (c.cluster_dir / "trusted" / "node-a.crt").unlink()  # C refuses A: no removal for C
    a.send(removal("node-a", "w2", "run-node-a"))
    b.wait_until(
        lambda _: (
            {k: v["seq"] for k, v in b.view().items()} == {("node-a", "w1"): 2}
            and [r["workloadId"] for r in b.removals()] == ["w2"]
        ),
        timeout=CONVERGE_WITHIN,
    )
    b.kill()
    b.start()  # the broker keeps its view across B's restart
    cluster.announce(to=[b])
    # A's and C's snapshots reach B: A's queued w1 (seq 1) is stale, C's w2 removed, A's
    # removal a duplicate. Only status tells (none of them is forwarded).
    st = b.poll_status(
        lambda st: (
            st["counters"]["byChannel"]["peer"]["stale"] >= 1
            and st["counters"]["byChannel"]["peer"]["suppressed"] >= 1
        ),
        timeout=CONVERGE_WITHIN,
        what="A's stale snapshot and C's removed workload refused",
    )
    assert st["counters"]["workloads"] == 1 and st["counters"]["tombstones"] == 1, st
    # C's w1 at the seq the broker already has goes to it once more (a broker that restarted
    # too needs it back); nothing older, and not the removed w2.
    b.wait_for(is_upsert("w1", 2), timeout=CONVERGE_WITHIN)
    b.status()  # everything B wrote before this answer is in `seen`
    assert [(u["id"], u["seq"]) for u in b.upserts()] == [("w1", 2)], b.seen
    assert b.removals() == [], b.seen
