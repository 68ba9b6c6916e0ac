"""The Broadcaster end to end: real TLS, real servers, real workload tables.

The sending node is member "b" of a real cluster directory, with a real WorkloadTable and
Dispatcher (events are published exactly as the local channel publishes them). Its peers are
real InterNodeServers (the endpoint and a Dispatcher of their own, or a scripted handler) on
their own event-loop threads. Waiting is for observable conditions, with a deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import queue
import shutil
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from nvpair_wm_schema.node_record_schema import NodeRecord

from nvpair_wm.broadcaster import Broadcaster, BroadcastLimits
from nvpair_wm.clusterdir import cert_fingerprint
from nvpair_wm.dedup import WorkloadTable
from nvpair_wm.dispatch import Dispatcher
from nvpair_wm.endpoint import EventsEndpoint
from nvpair_wm.http.core import Limits, Request, Response, empty_response, error_response
from nvpair_wm.io.pin_watch import WatchedIdentity, WatchedPins, open_watch
from nvpair_wm.io.server import InterNodeServer
from nvpair_wm.pins import Identity, IdentitySource, PinSet, PinSource
from tests.conftest import WAIT, RecordingSink, TLSCluster, WmServer
from tests.support.frames import event, remove, status_result, workload
from tests.support.polling import eventually_async

T = TypeVar("T")

FAST = BroadcastLimits(
    retry_base=0.02,
    retry_max_delay=0.2,
    min_reconnect_interval=0.02,
    reconcile_interval=0.05,
    response_timeout=2.0,
)


# For tests that look at a link between a change to the pins and the next publish: with
# sources read per tick that look needs one turn of the loop, and FAST's reconcile (every 50 ms)
# may come due in that very turn on a loaded machine and drop the link first. Nothing in those
# tests waits for a reconcile; the run's bound (4 * WAIT) ends first.
NO_TICKER = dataclasses.replace(FAST, reconcile_interval=5 * WAIT)


async def reconcile_now(b: Node, nodes: list[NodeRecord]) -> None:
    """What NO_TICKER's reconcile would do, now: after one turn of the loop (sources read per
    tick read the files again), the broker's same ``nodes:update``: a link the task dropped
    while the peer was not one is added again, a link still there is left alone."""
    await asyncio.sleep(0)
    b.bc.update_nodes(nodes)


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(4 * WAIT):
            return await coro

    return asyncio.run(bounded())


# -- servers --------------------------------------------------------------------------------------


class Servers:
    """Start InterNodeServers for cluster members, on a chosen port (so one can "restart")."""

    def __init__(self) -> None:
        self.started: list[WmServer] = []

    def start(
        self, cluster_dir: Path, port: int = 0, handler: Any = None, **limits: Any
    ) -> WmServer:
        sink = RecordingSink()
        dispatcher = Dispatcher(WorkloadTable(), status_result)
        endpoint = handler or EventsEndpoint(dispatcher, PinSet(cluster_dir / "trusted"), sink)
        server = InterNodeServer(
            endpoint, Identity(cluster_dir), port=port, hosts=["127.0.0.1"], limits=Limits(**limits)
        )
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        wm = WmServer(server, sink, loop, thread)
        self.started.append(wm)
        wm.call(server.start())
        return wm


@pytest.fixture
def servers() -> Iterator[Servers]:
    s = Servers()
    yield s
    for wm in s.started:
        wm.stop(grace=0.5)


class Scripted:
    """A Handler answering from a script (then 202), recording bodies and when they came."""

    max_body = 1024 * 1024

    def __init__(self, *responses: Response, block: threading.Event | None = None) -> None:
        self.script = list(responses)
        self.bodies: queue.Queue[tuple[float, list[Any]]] = queue.Queue()
        self.block = block

    def head(self, req: Request) -> Response | None:
        return None

    def complete(self, req: Request, body: bytes) -> Response:
        self.bodies.put((time.monotonic(), json.loads(body)))
        if self.block is not None:
            self.block.wait(WAIT)
            self.block = None
        return self.script.pop(0) if self.script else empty_response(202)

    async def next(self) -> tuple[float, list[Any]]:
        return await asyncio.to_thread(self.bodies.get, True, WAIT)


# -- the sending node -----------------------------------------------------------------------------


class Node:
    """Member ``name``: a table, a dispatcher and a Broadcaster, as node.py wires them."""

    def __init__(
        self,
        cluster: TLSCluster,
        name: str = "b",
        limits: BroadcastLimits = FAST,
        cluster_dir: Path | None = None,
        protocols: tuple[str, ...] | None = None,
        *,
        watched: bool = False,
        **kw: Any,
    ) -> None:
        """``watched``: identity and pins behind one inotify descriptor, as node.py makes them."""
        self.dir = cluster_dir or cluster.dirs[name]
        self.table = WorkloadTable()
        self.dispatcher = Dispatcher(self.table, status_result)
        if protocols is not None:  # what a user sets as broadcast.protocols in --config
            limits = dataclasses.replace(limits, protocols=protocols)
        identity: IdentitySource = Identity(self.dir)
        pins: PinSource = PinSet(self.dir / "trusted")
        if watched:
            watch = open_watch()
            assert watch is not None, "inotify_init1 failed on Linux"
            identity = WatchedIdentity(Identity(self.dir), watch)
            pins = WatchedPins(PinSet(self.dir / "trusted"), watch)
        self.bc = Broadcaster(identity, pins, self.table.originated, limits, **kw)

    def report(self, frame: bytes) -> None:
        """What the broker reports locally goes through the dispatcher to the broadcaster."""
        result = self.dispatcher.local(frame)
        assert result.outbound, "the dispatcher did not apply the frame"
        self.bc.publish(result.outbound)

    def peer(self) -> Any:
        (st,) = self.bc.status()
        return st


def record(cluster: TLSCluster, name: str, port: int) -> NodeRecord:
    fp = cert_fingerprint((cluster.dirs[name] / "node.crt").read_bytes())
    return NodeRecord(nodeId=name, address="127.0.0.1", port=port, fingerprint=fp)


def submitted(wid: str, seq: int = 1) -> bytes:
    states = {1: ("workload:submitted", "queued"), 2: ("workload:started", "running")}
    method, state = states.get(seq, ("workload:started", "running"))
    return event(method, workload(id=wid, seq=seq, state=state, originatedFrom="b"))


async def upserts(sink: RecordingSink, n: int) -> list[tuple[str, int, str]]:
    """The next ``n`` frames for the peer's broker, as (id, seq, state)."""
    out = []
    for _ in range(n):
        frame = json.loads(await asyncio.to_thread(sink.get))
        assert frame["method"] == "workloads:upsert", frame
        w = frame["params"]["workloadInfo"]
        out.append((w["id"], w["seq"], w["state"]))
    return out


def ids(frames: list[Any]) -> list[tuple[str, Any]]:
    out = []
    for f in frames:
        p = f["params"]
        if "workloadInfo" in p:
            out.append((p["workloadInfo"]["id"], p["workloadInfo"]["seq"]))
        else:
            out.append((p["workloadId"], "removed"))
    return out


@pytest.fixture(params=["h2", "http/1.1"])
def protocols(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """What the sender offers: both (the peer picks h2) or HTTP/1.1 only."""
    return ("h2", "http/1.1") if request.param == "h2" else ("http/1.1",)


# -- delivery -------------------------------------------------------------------------------------


def test_local_events_reach_the_peer_once_with_fields_unchanged(
    servers: Servers, tls_cluster: TLSCluster, protocols: tuple[str, ...]
) -> None:
    a = servers.start(tls_cluster.dirs["a"])
    b = Node(tls_cluster, protocols=protocols)

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", a.port), record(tls_cluster, "b", 1)])
        await b.bc.start()
        # reported before start: it arrives with the first connection's snapshot
        assert await upserts(a.sink, 1) == [("0", 1, "queued")]
        b.report(submitted("1"))
        assert await upserts(a.sink, 1) == [("1", 1, "queued")]
        b.report(submitted("1", 2))
        assert await upserts(a.sink, 1) == [("1", 2, "running")]
        await eventually_async(lambda: b.peer().sent == 3, "the third response")
        st = b.peer()
        assert st.nodeId == "a" and st.connected and st.protocol == protocols[0]
        assert st.sent == 3 and st.dropped == 0 and st.lastError is None
        await b.bc.close(1.0)

    b.report(submitted("0"))
    run(go())
    assert a.sink.drain() == []  # each exactly once


def test_fields_pass_through_unchanged(servers: Servers, tls_cluster: TLSCluster) -> None:
    a = servers.start(tls_cluster.dirs["a"])
    b = Node(tls_cluster)
    w = workload(id="9", originatedFrom="b", requesterId=None, scheduledOn="node-z", seq=3)
    del w["scheduledOn"]

    async def go() -> dict[str, Any]:
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        await b.bc.start()
        b.report(event("workload:submitted", w))
        frame = json.loads(await asyncio.to_thread(a.sink.get))
        await b.bc.close(1.0)
        return dict(frame["params"]["workloadInfo"])

    got = run(go())
    assert got == {**w, "state": "queued"}
    assert "scheduledOn" not in got and got["requesterId"] is None


def test_a_new_peer_gets_a_snapshot_of_everything_we_originated(
    servers: Servers, tls_cluster: TLSCluster
) -> None:
    a = servers.start(tls_cluster.dirs["a"])
    b = Node(tls_cluster)
    for i in range(30):
        b.report(submitted(str(i)))
    b.report(submitted("3", 2))
    b.report(remove("4", "b", run_id="run-a"))

    async def go() -> None:
        await b.bc.start()
        assert b.bc.status() == []  # no nodes:update yet: no peers
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        got = []
        for _ in range(29 + 1):
            got.append(json.loads(await asyncio.to_thread(a.sink.get)))
        await b.bc.close(1.0)
        upserted = {
            f["params"]["workloadInfo"]["id"]: f for f in got if "workloadInfo" in f["params"]
        }
        assert set(upserted) == {str(i) for i in range(30)} - {"4"}
        assert upserted["3"]["params"]["workloadInfo"]["seq"] == 2
        removals = [f for f in got if f["method"] == "workloads:remove"]
        assert [r["params"]["workloadId"] for r in removals] == ["4"]

    run(go())
    assert a.sink.drain() == []  # and nothing twice


# -- convergence ----------------------------------------------------------------------------------


def test_restarted_peer_is_caught_up_without_new_events(
    servers: Servers, tls_cluster: TLSCluster, protocols: tuple[str, ...]
) -> None:
    a1 = servers.start(tls_cluster.dirs["a"])
    port = a1.port
    b = Node(tls_cluster, protocols=protocols)

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", port)])
        await b.bc.start()
        b.report(submitted("1"))
        assert await upserts(a1.sink, 1) == [("1", 1, "queued")]
        await asyncio.to_thread(a1.stop, 0.5)
        await eventually_async(lambda: not b.peer().connected, "b notices that a went away")
        b.report(submitted("2"))  # while a is down
        b.report(submitted("1", 2))
        # a restarts with an empty table (a new process): b reconnects and resynchronises.
        a2 = await asyncio.to_thread(servers.start, tls_cluster.dirs["a"], port)
        got = sorted(await upserts(a2.sink, 2))
        assert got == [("1", 2, "running"), ("2", 1, "queued")]
        await b.bc.close(1.0)
        assert a2.sink.drain() == []

    run(go())


def test_peer_whose_retries_were_exhausted_is_probed_and_caught_up(
    servers: Servers, tls_cluster: TLSCluster
) -> None:
    a1 = servers.start(tls_cluster.dirs["a"])
    port = a1.port
    a1.stop(0.1)
    limits = BroadcastLimits(
        retry_base=0.01,
        retry_max_delay=0.05,
        retry_max_attempts=3,
        min_reconnect_interval=0.01,
        reconcile_interval=0.05,
    )
    b = Node(tls_cluster, limits=limits)

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", port)])
        await b.bc.start()
        b.report(submitted("1"))
        await eventually_async(lambda: b.peer().dropped >= 1, "retries exhausted: queue dropped")
        st = b.peer()
        assert not st.connected and st.lastError and "connect" in st.lastError
        b.report(submitted("2"))  # dropped at once: the resync will carry it
        a2 = await asyncio.to_thread(servers.start, tls_cluster.dirs["a"], port)
        assert sorted(await upserts(a2.sink, 2)) == [("1", 1, "queued"), ("2", 1, "queued")]
        await eventually_async(lambda: b.peer().connected and b.peer().queueDepth == 0, "caught up")
        await b.bc.close(1.0)

    run(go())


def test_readded_peer_gets_a_snapshot(servers: Servers, tls_cluster: TLSCluster) -> None:
    a = servers.start(tls_cluster.dirs["a"])
    b = Node(tls_cluster)

    async def go() -> None:
        rec = record(tls_cluster, "a", a.port)
        b.bc.update_nodes([rec])
        await b.bc.start()
        b.report(submitted("1"))
        assert await upserts(a.sink, 1) == [("1", 1, "queued")]
        b.bc.update_nodes([])  # a leaves the cluster view
        assert b.bc.status() == []
        b.report(submitted("1", 2))  # a is not a peer: not sent
        b.bc.update_nodes([rec])  # and comes back
        assert await upserts(a.sink, 1) == [("1", 2, "running")]
        await b.bc.close(1.0)

    run(go())


# -- pins and identity ----------------------------------------------------------------------------


def test_unpinned_peer_gets_nothing_more_and_is_caught_up_when_pinned_again(
    servers: Servers, tls_cluster: TLSCluster
) -> None:
    handler = Scripted()
    a = servers.start(tls_cluster.dirs["a"], handler=handler)
    b = Node(tls_cluster)
    pin = tls_cluster.dirs["b"] / "trusted" / "a.crt"
    saved = pin.read_bytes()

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        await b.bc.start()
        b.report(submitted("1"))
        assert ids((await handler.next())[1]) == [("1", 1)]
        pin.unlink()
        await eventually_async(lambda: b.bc.status() == [], "a dropped after it was unpinned")
        b.report(submitted("2"))  # not sent: a is not pinned
        pin.write_bytes(saved)
        _, frames = await handler.next()
        # the first thing a sees again is the resync, which carries "2": it was never sent alone
        assert sorted(ids(frames)) == [("1", 1), ("2", 1)]
        await b.bc.close(1.0)

    run(go())


@pytest.mark.parametrize("watched", [False, True], ids=["read-per-tick", "inotify"])
def test_a_removed_pin_or_identity_stops_the_very_next_batch(
    servers: Servers, tls_cluster: TLSCluster, watched: bool
) -> None:
    """Checked as the link starts a batch, in the same call that published it (no reconcile
    in between). With the node's inotify-watched sources a change is seen by a batch started
    right after it, in the same tick; with sources read per tick, by one in the next tick."""
    handler = Scripted()
    a = servers.start(tls_cluster.dirs["a"], handler=handler)
    b = Node(tls_cluster, limits=NO_TICKER, watched=watched)
    pin = tls_cluster.dirs["b"] / "trusted" / "a.crt"
    key = tls_cluster.dirs["b"] / "node.key"
    saved_pin, saved_key = pin.read_bytes(), key.read_bytes()

    async def go() -> None:
        nodes = [record(tls_cluster, "a", a.port)]
        b.bc.update_nodes(nodes)
        await b.bc.start()
        (link,) = b.bc._links.values()
        await eventually_async(lambda: link.conn is not None and link.conn.usable, "a connected")
        b.report(submitted("1"))
        assert link.outbox.in_flight == 1  # started at once, inside publish
        assert ids((await handler.next())[1]) == [("1", 1)]
        await eventually_async(lambda: link.outbox.in_flight == 0, "the batch answered")
        pin.unlink()
        if not watched:
            await asyncio.sleep(0)  # the next tick: read again there
        b.report(submitted("2"))
        assert (link.outbox.in_flight, link.outbox.depth) == (0, 1)  # not sent: a is unpinned
        pin.write_bytes(saved_pin)
        await reconcile_now(b, nodes)
        _, frames = await handler.next()
        assert ("2", 1) in ids(frames)
        await eventually_async(lambda: link.outbox.in_flight == 0, "the batch answered")
        key.unlink()  # our identity gone
        if not watched:
            await asyncio.sleep(0)
        b.report(submitted("3"))
        assert (link.outbox.in_flight, link.outbox.depth) == (0, 1)
        key.write_bytes(saved_key)
        await reconcile_now(b, nodes)
        _, frames = await handler.next()
        assert ("3", 1) in ids(frames)
        await b.bc.close(1.0)

    run(go())


@pytest.mark.parametrize("watched", [False, True])
def test_one_look_per_publish_gives_each_link_its_own_verdict(
    servers: Servers, tls_cluster: TLSCluster, watched: bool
) -> None:
    """Broadcaster.publish looks at the pins once for all its links: a pin removed just before
    stops that peer's very next batch, and only that peer's; put back, that peer is caught up."""
    ha, hc = Scripted(), Scripted()
    a = servers.start(tls_cluster.dirs["a"], handler=ha)
    c = servers.start(tls_cluster.dirs["c"], handler=hc)
    b = Node(tls_cluster, limits=NO_TICKER, watched=watched)
    pin = tls_cluster.dirs["b"] / "trusted" / "a.crt"
    saved = pin.read_bytes()

    async def go() -> None:
        nodes = [record(tls_cluster, "a", a.port), record(tls_cluster, "c", c.port)]
        b.bc.update_nodes(nodes)
        await b.bc.start()
        links = {lk.peer.node_id: lk for lk in b.bc._links.values()}
        await eventually_async(
            lambda: all(lk.conn is not None and lk.conn.usable for lk in links.values()),
            "a and c connected",
        )
        b.report(submitted("1"))
        assert [links[n].outbox.in_flight for n in "ac"] == [1, 1]  # both at once, in publish
        assert ids((await ha.next())[1]) == [("1", 1)]
        assert ids((await hc.next())[1]) == [("1", 1)]
        await eventually_async(
            lambda: links["c"].outbox.idle and links["a"].outbox.idle, "answered"
        )
        pin.unlink()
        if not watched:
            await asyncio.sleep(0)  # sources read per tick: the next tick reads again
        b.report(submitted("2"))
        assert (links["a"].outbox.in_flight, links["a"].outbox.depth) == (0, 1)  # unpinned
        assert links["c"].outbox.in_flight == 1  # still pinned: sent at once
        assert ids((await hc.next())[1]) == [("2", 1)]
        pin.write_bytes(saved)
        await reconcile_now(b, nodes)
        frames: list[Any] = []
        while ("2", 1) not in ids(frames):
            frames += (await ha.next())[1]  # a snapshot when re-added, or the queued frame
        await b.bc.close(1.0)

    run(go())


def test_a_burst_to_an_idle_link_starts_as_many_requests_as_it_may(
    servers: Servers, tls_cluster: TLSCluster
) -> None:
    """Frames published together to an idle link start one request per batch at once, up to
    max_in_flight (the link asks the connection for its capacity after the first request)."""
    release = threading.Event()
    handler = Scripted(block=release)
    a = servers.start(tls_cluster.dirs["a"], handler=handler)
    limits = dataclasses.replace(FAST, max_batch_frames=1, max_in_flight=2)
    b = Node(tls_cluster, limits=limits)

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        await b.bc.start()
        (link,) = b.bc._links.values()
        await eventually_async(lambda: link.conn is not None and link.conn.usable, "a connected")
        await eventually_async(lambda: link.outbox.idle, "the first snapshot (empty) settled")
        items = [b.dispatcher.local(submitted(str(i))).outbound[0] for i in range(3)]
        b.bc.publish(items)
        assert (link.outbox.in_flight, link.outbox.depth) == (2, 1)
        release.set()
        got: list[Any] = []
        for _ in range(3):
            got += ids((await handler.next())[1])
        assert sorted(got) == [("0", 1), ("1", 1), ("2", 1)]
        await eventually_async(lambda: link.outbox.idle, "all answered")
        await b.bc.close(1.0)

    try:
        run(go())
    finally:
        release.set()


def test_server_with_the_wrong_certificate_gets_nothing(
    servers: Servers, tls_cluster: TLSCluster
) -> None:
    handler = Scripted()
    impostor = servers.start(tls_cluster.dirs["c"], handler=handler)  # c's cert at a's address
    b = Node(tls_cluster)

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", impostor.port)])
        await b.bc.start()
        b.report(submitted("1"))
        await eventually_async(lambda: b.peer().lastError is not None, "the pin check failed")
        st = b.peer()
        assert "pin check failed" in (st.lastError or "") and not st.connected and st.sent == 0
        await b.bc.close(0.1)

    run(go())
    assert handler.bodies.empty()


def test_node_without_identity_sends_nothing_until_its_files_appear(
    servers: Servers, tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    a = servers.start(tls_cluster.dirs["a"])
    late = tmp_path / "late"
    shutil.copytree(tls_cluster.dirs["b"] / "trusted", late / "trusted")
    b = Node(tls_cluster, cluster_dir=late)

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        await b.bc.start()
        b.report(submitted("1"))
        assert b.bc.status() == []  # no identity: no peers at all
        for name in ("node.key", "node.crt"):
            shutil.copy(tls_cluster.dirs["b"] / name, late / name)
        assert await upserts(a.sink, 1) == [("1", 1, "queued")]  # no restart needed
        await b.bc.close(1.0)

    run(go())


# -- retry and rejection --------------------------------------------------------------------------


def test_503_with_retry_after_is_retried_after_the_delay(
    servers: Servers, tls_cluster: TLSCluster
) -> None:
    busy = error_response(503, "queue toward the broker is full", [(b"retry-after", b"1")])
    handler = Scripted(empty_response(202), busy)
    a = servers.start(tls_cluster.dirs["a"], handler=handler)
    b = Node(tls_cluster)

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        await b.bc.start()
        assert ids((await handler.next())[1]) == [("1", 1)]  # the snapshot: 202
        b.report(submitted("2"))
        t1, first = await handler.next()
        t2, again = await handler.next()
        assert ids(first) == ids(again) == [("2", 1)]
        assert t2 - t1 >= 1.0  # Retry-After honoured
        await eventually_async(lambda: b.peer().sent == 2, "the retry's response")
        st = b.peer()
        assert st.retried == 1 and st.sent == 2 and st.dropped == 0
        assert st.lastError is not None and st.lastError.startswith("HTTP 503")
        await b.bc.close(1.0)

    b.report(submitted("1"))
    run(go())


def test_400_is_not_retried(servers: Servers, tls_cluster: TLSCluster) -> None:
    handler = Scripted(error_response(400, "no"))
    a = servers.start(tls_cluster.dirs["a"], handler=handler)
    b = Node(tls_cluster)

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        await b.bc.start()
        b.report(submitted("1"))
        assert ids((await handler.next())[1]) == [("1", 1)]  # snapshot or event: refused
        await eventually_async(lambda: b.peer().dropped == 1, "the refused frame is counted")
        b.report(submitted("2"))
        assert ids((await handler.next())[1]) == [("2", 1)]  # next is new, not a retry
        st = b.peer()
        assert st.retried == 0 and st.lastError == 'HTTP 400: {"error":"no"}'
        await b.bc.close(1.0)

    run(go())


def test_slow_peer_gets_coalesced_state(servers: Servers, tls_cluster: TLSCluster) -> None:
    release = threading.Event()
    handler = Scripted(block=release)
    a = servers.start(tls_cluster.dirs["a"], handler=handler)
    b = Node(tls_cluster, protocols=("http/1.1",))  # one request at a time

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        await b.bc.start()
        b.report(submitted("1"))
        assert ids((await handler.next())[1]) == [("1", 1)]  # this request now hangs
        for seq in range(2, 7):
            b.report(submitted("1", seq))
        for seq in range(1, 4):
            b.report(submitted("2", seq))
        st = b.peer()
        assert st.queueDepth == 2 and st.coalesced == 6
        release.set()
        assert ids((await handler.next())[1]) == [("1", 6), ("2", 3)]
        await b.bc.close(1.0)

    try:
        run(go())
    finally:
        release.set()


def test_close_flushes_what_is_queued(servers: Servers, tls_cluster: TLSCluster) -> None:
    a = servers.start(tls_cluster.dirs["a"])
    b = Node(tls_cluster)

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        await b.bc.start()
        await eventually_async(lambda: b.peer().connected, "connected")
        for i in range(20):
            b.report(submitted(str(i)))
        await b.bc.close(5.0)
        b.report(submitted("late"))  # after close: ignored

    run(go())
    got = {json.loads(a.sink.get())["params"]["workloadInfo"]["id"] for _ in range(20)}
    assert got == {str(i) for i in range(20)}


# -- three nodes, in one process ----------------------------------------------------------------


class FullNode:
    """A whole node minus the broker channel: table, dispatcher, server and broadcaster on the
    test's event loop (so its server and its broadcaster share the table, as in node.py)."""

    def __init__(self, cluster: TLSCluster, name: str, port: int = 0) -> None:
        d = cluster.dirs[name]
        self.name = name
        self.table = WorkloadTable()
        self.dispatcher = Dispatcher(self.table, status_result)
        self.broker = RecordingSink()
        pins = PinSet(d / "trusted")
        endpoint = EventsEndpoint(self.dispatcher, pins, self.broker)
        self.server = InterNodeServer(endpoint, Identity(d), port=port, hosts=["127.0.0.1"])
        self.bc = Broadcaster(Identity(d), pins, self.table.originated, FAST)

    async def start(self, records: list[NodeRecord]) -> None:
        await self.server.start()
        self.bc.update_nodes(records)
        await self.bc.start()

    async def stop(self) -> None:
        await self.bc.close(0.5)
        await self.server.close(0.5)

    def report(self, frame: bytes) -> None:
        self.bc.publish(self.dispatcher.local(frame).outbound)

    async def view(self, n: int) -> set[tuple[str, str, int]]:
        """The next ``n`` upserts this node's broker gets, as (origin, id, seq), all distinct."""
        got = []
        for _ in range(n):
            frame = json.loads(await asyncio.to_thread(self.broker.get))
            w = frame["params"]["workloadInfo"]
            got.append((w["originatedFrom"], w["id"], w["seq"]))
        assert len(set(got)) == n, f"duplicates reached {self.name}'s broker: {got}"
        return set(got)


def origin_event(origin: str, wid: str, seq: int = 1) -> bytes:
    method, state = (
        ("workload:submitted", "queued") if seq == 1 else ("workload:started", "running")
    )
    return event(method, workload(id=wid, seq=seq, state=state, originatedFrom=origin))


def test_three_nodes_converge_and_a_restarted_node_catches_up(tls_cluster: TLSCluster) -> None:
    async def go() -> None:
        nodes = {n: FullNode(tls_cluster, n) for n in "abc"}
        for node in nodes.values():
            await node.server.start()
        records = [record(tls_cluster, n, nodes[n].server.port) for n in "abc"]
        for node in nodes.values():
            node.bc.update_nodes(records)
            await node.bc.start()
        a, b, c = nodes["a"], nodes["b"], nodes["c"]

        a.report(origin_event("a", "1"))
        assert await b.view(1) == await c.view(1) == {("a", "1", 1)}

        # The same event reported on two nodes reaches the third node's broker once.
        b.report(origin_event("x", "7"))
        c.report(origin_event("x", "7"))
        assert await a.view(1) == {("x", "7", 1)}

        # b dies; a and c go on; b restarts with an empty table on the same port.
        port = b.server.port
        await b.stop()
        a.report(origin_event("a", "1", 2))
        a.report(origin_event("a", "2"))
        c.report(origin_event("c", "3"))
        assert await c.view(2) == {("a", "1", 2), ("a", "2", 1)}
        b2 = FullNode(tls_cluster, "b", port)
        await b2.start(records)
        # b2's broker converges to everything a and c originated, newest state, once each.
        assert await b2.view(4) == {("a", "1", 2), ("a", "2", 1), ("c", "3", 1), ("x", "7", 1)}
        for node in (a, c, b2):
            await node.stop()
        assert b2.broker.drain() == []

    run(go())


# -- liveness -----------------------------------------------------------------------------------


def test_h2_keepalive_finds_a_silent_peer(servers: Servers, tls_cluster: TLSCluster) -> None:
    a = servers.start(tls_cluster.dirs["a"])
    limits = BroadcastLimits(
        keepalive_interval=0.1, keepalive_timeout=0.2, retry_base=0.02, retry_max_delay=0.1
    )
    b = Node(tls_cluster, limits=limits)
    frozen = threading.Event()

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        await b.bc.start()
        await eventually_async(lambda: b.peer().connected, "connected")
        # a's process hangs (no FIN, no answers): its event loop stops running.
        a.loop.call_soon_threadsafe(frozen.wait, WAIT)
        await eventually_async(
            lambda: "PING unanswered" in (b.peer().lastError or ""), "the PING times out"
        )
        frozen.set()  # a recovers: b reconnects (and resynchronises)
        await eventually_async(lambda: b.peer().connected, "reconnected")
        await b.bc.close(1.0)

    try:
        run(go())
    finally:
        frozen.set()


def test_h2_keepalive_resumes_once_a_busy_link_goes_idle(
    servers: Servers, tls_cluster: TLSCluster
) -> None:
    handler = Scripted()
    a = servers.start(tls_cluster.dirs["a"], handler=handler)
    limits = BroadcastLimits(
        keepalive_interval=0.1, keepalive_timeout=0.2, retry_base=0.02, retry_max_delay=0.1
    )
    b = Node(tls_cluster, limits=limits)
    frozen = threading.Event()

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        await b.bc.start()
        await eventually_async(lambda: b.peer().connected, "connected")
        b.report(submitted("1"))  # the link is busy, then idle again after the response
        assert ids((await handler.next())[1]) == [("1", 1)]
        await eventually_async(lambda: b.peer().sent == 1, "the response")
        a.loop.call_soon_threadsafe(frozen.wait, WAIT)  # a hangs: no FIN, no answers
        await eventually_async(
            lambda: "PING unanswered" in (b.peer().lastError or ""), "the PING times out"
        )
        frozen.set()
        await b.bc.close(1.0)

    try:
        run(go())
    finally:
        frozen.set()


def test_idle_close_by_the_server_is_followed_by_a_reconnect_and_a_resync(
    servers: Servers, tls_cluster: TLSCluster, protocols: tuple[str, ...]
) -> None:
    handler = Scripted()
    a = servers.start(tls_cluster.dirs["a"], handler=handler, idle_timeout=0.2)
    b = Node(tls_cluster, protocols=protocols)
    b.report(submitted("1"))

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        await b.bc.start()
        assert ids((await handler.next())[1]) == [("1", 1)]
        # a closes the idle connection; b cannot tell that from a restart: it resyncs.
        assert ids((await handler.next())[1]) == [("1", 1)]
        await b.bc.close(1.0)

    run(go())


def test_403_from_a_peer_that_does_not_pin_us_yet_is_retried_until_it_does(
    servers: Servers, tls_cluster: TLSCluster
) -> None:
    pin = tls_cluster.dirs["a"] / "trusted" / "b.crt"
    saved = pin.read_bytes()
    pin.unlink()  # a does not trust b (yet); b trusts a
    a = servers.start(tls_cluster.dirs["a"])
    b = Node(tls_cluster)
    b.report(submitted("1"))

    async def go() -> None:
        b.bc.update_nodes([record(tls_cluster, "a", a.port)])
        await b.bc.start()
        await eventually_async(lambda: b.peer().retried >= 2, "b retries after 403")
        st = b.peer()
        assert (st.lastError or "").startswith("HTTP 403") and st.sent == 0
        pin.write_bytes(saved)  # a now pins b
        assert await upserts(a.sink, 1) == [("1", 1, "queued")]
        await b.bc.close(1.0)

    run(go())
