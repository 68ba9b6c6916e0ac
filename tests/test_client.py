"""The outbound client against the real inter-node server: real TLS, real certificates.

The server (``nvpair_wm.io.server`` + ``endpoint`` + a real Dispatcher, or a scripted handler)
runs on its own event-loop thread (tests/conftest.py); the client runs in ``asyncio.run`` here.
Every wait is for an event (a response, a callback, a queue item), never for the clock.
"""

from __future__ import annotations

import asyncio
import queue
import socket
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from nvpair_wm.clusterdir import cert_fingerprint
from nvpair_wm.errors import ConnectFailed, ConnectionLost, PinRefused, ResponseTimeout
from nvpair_wm.http.core import MIB, Limits, Request, Response, empty_response, error_response
from nvpair_wm.io.client import PeerConnection, open_connection
from nvpair_wm.io.client import Response as ClientResponse
from nvpair_wm.peerlink import bad_frames, retry_after
from nvpair_wm.pins import Identity, PinSet
from tests.conftest import WAIT, TLSCluster, WmServer
from tests.support.frames import batch, event, workload

T = TypeVar("T")
StartServer = Callable[..., WmServer]
PROTOCOLS = {"h2": (b"h2", b"http/1.1"), "http/1.1": (b"http/1.1",)}
PATH = "/v1/workloads/events"


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(3 * WAIT):
            return await coro

    return asyncio.run(bounded())


class Scripted:
    """A Handler that answers from a script (then 202) and records what it was sent."""

    max_body = MIB

    def __init__(self, *responses: Response, block: threading.Event | None = None) -> None:
        self.script = list(responses)
        self.bodies: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.heads = 0
        self.block = block

    def head(self, req: Request) -> Response | None:
        self.heads += 1
        return None

    def complete(self, req: Request, body: bytes) -> Response:
        if self.block is not None:
            self.block.wait(WAIT)  # stalls the server's loop: the client must time out
        self.bodies.put((req.protocol, body))
        return self.script.pop(0) if self.script else empty_response(202)


def fp(cluster_dir: Path) -> str:
    return cert_fingerprint((cluster_dir / "node.crt").read_bytes())


async def dial(
    cluster: TLSCluster,
    port: int,
    *,
    member: str = "b",
    expected: str | None = None,
    protocol: str = "h2",
    on_change: Callable[[], None] = lambda: None,
    **kw: Any,
) -> PeerConnection:
    me = cluster.dirs[member]
    ident = Identity(me).current()
    assert ident is not None
    return await open_connection(
        "127.0.0.1",
        port,
        identity=ident,
        expected_fingerprint=expected or fp(cluster.server_dir),
        is_pinned=PinSet(me / "trusted").is_pinned,
        on_change=on_change,
        alpn=PROTOCOLS[protocol],
        **kw,
    )


@pytest.fixture(params=["h2", "http/1.1"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- both protocols -------------------------------------------------------------------------------


def test_post_reaches_the_broker_side_of_a_real_server(
    start_wm_server: StartServer, tls_cluster: TLSCluster, protocol: str
) -> None:
    wm = start_wm_server()

    async def go() -> list[int]:
        conn = await dial(tls_cluster, wm.port, protocol=protocol)
        assert conn.protocol == protocol
        assert conn.server_fingerprint == fp(tls_cluster.server_dir)
        statuses = []
        for seq in (1, 2):  # two requests, one connection
            w = workload(seq=seq, state="queued" if seq == 1 else "running")
            method = "workload:submitted" if seq == 1 else "workload:started"
            r = await conn.post(PATH, batch(event(method, w)), response_timeout=WAIT)
            statuses.append(r.status)
        assert conn.usable
        # What the broadcaster bounds a batch's body by: the server's stream window (h2).
        assert conn.body_window() == (Limits().h2_initial_window_size if protocol == "h2" else None)
        await conn.aclose()
        return statuses

    assert run(go()) == [202, 202]
    assert b'"queued"' in wm.sink.get() and b'"running"' in wm.sink.get()


def test_400_names_the_bad_frames_and_the_good_ones_are_applied(
    start_wm_server: StartServer, tls_cluster: TLSCluster, protocol: str
) -> None:
    wm = start_wm_server()
    body = batch(event("workload:submitted"), b'{"jsonrpc":"2.0","method":"workload:started"}')

    async def go() -> Any:
        conn = await dial(tls_cluster, wm.port, protocol=protocol)
        r = await conn.post(PATH, body, response_timeout=WAIT)
        await conn.aclose()
        return r

    r = run(go())
    assert r.status == 400
    assert bad_frames(r.body, 2) == frozenset({1})
    assert b"workloads:upsert" in wm.sink.get()


def test_503_with_retry_after_is_returned_to_the_caller(
    start_wm_server: StartServer, tls_cluster: TLSCluster, protocol: str
) -> None:
    wm = start_wm_server()
    wm.sink.is_full = True  # the real endpoint's backpressure

    async def go() -> Any:
        conn = await dial(tls_cluster, wm.port, protocol=protocol)
        r = await conn.post(PATH, batch(event("workload:submitted")), response_timeout=WAIT)
        await conn.aclose()
        return r

    r = run(go())
    assert r.status == 503 and retry_after(r.header(b"retry-after"), now=0.0) == 1.0


def test_large_body_respects_flow_control(
    start_wm_server: StartServer, tls_cluster: TLSCluster, protocol: str
) -> None:
    handler = Scripted()
    wm = start_wm_server(handler=handler)
    frames = [event("workload:submitted", workload(id=str(i))) for i in range(1500)]
    body = batch(*frames)
    assert 300_000 < len(body) < MIB  # several HTTP/2 windows of 64 KiB

    async def go() -> int:
        conn = await dial(tls_cluster, wm.port, protocol=protocol)
        r = await conn.post(PATH, body, response_timeout=WAIT)
        await conn.aclose()
        return r.status

    assert run(go()) == 202
    assert handler.bodies.get(timeout=WAIT) == (protocol, body)


@pytest.mark.parametrize(("window", "expected"), [(300_000, 300_000), (100, 16_384)])
def test_h2_body_window_follows_the_servers_stream_window(
    start_wm_server: StartServer, tls_cluster: TLSCluster, window: int, expected: int
) -> None:
    """The bound the broadcaster puts on a batch's body: the server's SETTINGS_INITIAL_WINDOW_SIZE,
    but never under one default frame (a server that opens streams small still gets batches)."""
    wm = start_wm_server(h2_initial_window_size=window)

    async def go() -> int | None:
        conn = await dial(tls_cluster, wm.port, protocol="h2")
        r = await conn.post(
            PATH, batch(event("workload:submitted", workload())), response_timeout=WAIT
        )
        assert r.status == 202  # the server's SETTINGS came before its answer
        hint = conn.body_window()
        await conn.aclose()
        return hint

    assert run(go()) == expected


def test_connection_closed_by_the_server_is_noticed_while_idle(
    start_wm_server: StartServer, tls_cluster: TLSCluster, protocol: str
) -> None:
    wm = start_wm_server(idle_timeout=0.2)

    async def go() -> str | None:
        changed = asyncio.Event()
        conn = await dial(tls_cluster, wm.port, protocol=protocol, on_change=changed.set)
        r = await conn.post(PATH, batch(event("workload:submitted")), response_timeout=WAIT)
        assert r.status == 202
        while not conn.closed:
            changed.clear()
            await changed.wait()
        return conn.close_reason

    assert run(go()) == "closed by the peer"


def test_response_timeout_closes_the_connection(
    start_wm_server: StartServer, tls_cluster: TLSCluster, protocol: str
) -> None:
    release = threading.Event()
    wm = start_wm_server(handler=Scripted(block=release))

    async def go() -> PeerConnection:
        conn = await dial(tls_cluster, wm.port, protocol=protocol)
        with pytest.raises(ResponseTimeout):
            await conn.post(PATH, batch(event("workload:submitted")), response_timeout=0.3)
        return conn

    try:
        conn = run(go())
    finally:
        release.set()
    assert conn.closed and not conn.usable


# -- pins -----------------------------------------------------------------------------------------


def test_server_with_the_wrong_certificate_gets_nothing(
    start_wm_server: StartServer, tls_cluster: TLSCluster, protocol: str
) -> None:
    # The server at this address presents c's certificate; the record said "a".
    handler = Scripted()
    wm = start_wm_server(cluster_dir=tls_cluster.dirs["c"], handler=handler)

    async def go() -> None:
        with pytest.raises(PinRefused, match="not the expected"):
            await dial(tls_cluster, wm.port, protocol=protocol)

    run(go())
    assert handler.heads == 0 and handler.bodies.empty()


def test_server_whose_certificate_is_not_pinned_gets_nothing(
    start_wm_server: StartServer, tls_cluster: TLSCluster
) -> None:
    handler = Scripted()
    wm = start_wm_server(handler=handler)
    (tls_cluster.dirs["b"] / "trusted" / "a.crt").unlink()  # b no longer pins a

    async def go() -> None:
        with pytest.raises(PinRefused, match="not pinned"):
            await dial(tls_cluster, wm.port)

    run(go())
    assert handler.heads == 0


def test_handshake_timeout(tls_cluster: TLSCluster) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never speaks TLS
        port = silent.getsockname()[1]

        async def go() -> None:
            with pytest.raises(ConnectFailed, match="handshake timed out"):
                await dial(tls_cluster, port, handshake_timeout=0.3)

        run(go())


def test_connection_refused(tls_cluster: TLSCluster) -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    with pytest.raises(ConnectFailed, match="connect to"):
        run(dial(tls_cluster, port))


# -- HTTP/2 specifics -----------------------------------------------------------------------------


def test_h2_runs_requests_concurrently_on_one_connection(
    start_wm_server: StartServer, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()

    async def go() -> list[int]:
        conn = await dial(tls_cluster, wm.port)
        assert conn.capacity(8) == 8
        bodies = [batch(event("workload:submitted", workload(id=str(i)))) for i in range(8)]
        responses = await asyncio.gather(
            *(conn.post(PATH, b, response_timeout=WAIT) for b in bodies)
        )
        await conn.ping(WAIT)
        await conn.aclose()
        return [r.status for r in responses]

    assert run(go()) == [202] * 8
    assert len([wm.sink.get() for _ in range(8)]) == 8


def test_requests_started_in_one_tick_complete_through_their_callbacks(
    start_wm_server: StartServer, tls_cluster: TLSCluster, protocol: str
) -> None:
    wm = start_wm_server()

    async def go() -> list[object]:
        conn = await dial(tls_cluster, wm.port, protocol=protocol)
        outcomes: list[object] = []
        finished = asyncio.Event()
        count = conn.capacity(8)
        assert count == (8 if protocol == "h2" else 1)

        def done(outcome: object) -> None:
            outcomes.append(outcome)
            if len(outcomes) == count:
                finished.set()

        for i in range(count):  # no await in between: one write carries them all
            body = batch(event("workload:submitted", workload(id=f"cb-{i}")))
            conn.request(PATH, body, response_timeout=WAIT, done=done)
        assert conn.active == count
        conn.flush()
        await finished.wait()
        assert conn.active == 0 and conn.usable
        await conn.aclose()
        with pytest.raises(ConnectionLost, match="closed by us"):
            conn.request(PATH, b"[]", response_timeout=WAIT, done=done)
        return outcomes

    outcomes = run(go())
    assert [o.status for o in outcomes if isinstance(o, ClientResponse)] == [202] * len(outcomes)
    assert len([wm.sink.get() for _ in outcomes]) == len(outcomes)


def test_h2_goaway_on_server_shutdown(
    start_wm_server: StartServer, tls_cluster: TLSCluster
) -> None:
    wm = start_wm_server()

    async def go() -> PeerConnection:
        changed = asyncio.Event()
        conn = await dial(tls_cluster, wm.port, on_change=changed.set)
        r = await conn.post(PATH, batch(event("workload:submitted")), response_timeout=WAIT)
        assert r.status == 202
        stopping = asyncio.get_running_loop().run_in_executor(None, wm.stop)
        while conn.usable:
            changed.clear()
            await changed.wait()
        await stopping
        return conn

    conn = run(go())
    assert not conn.usable


def test_4xx_from_the_endpoint_are_answers_not_errors(
    start_wm_server: StartServer, tls_cluster: TLSCluster
) -> None:
    handler = Scripted(error_response(415, "content-type must be application/json"))
    wm = start_wm_server(handler=handler)

    async def go() -> Any:
        conn = await dial(tls_cluster, wm.port)
        r = await conn.post(PATH, b"[]", response_timeout=WAIT)
        await conn.aclose()
        return r

    r = run(go())
    assert r.status == 415 and b"content-type" in r.body


def test_retry_after_parsing() -> None:
    assert retry_after(None, now=0.0) is None
    assert retry_after(b"7", now=0.0) == 7.0
    assert retry_after(b"Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after(b"soon", now=0.0) is None


def test_bad_frames_parsing() -> None:
    err = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"x","data":{"index":%d}}}'
    assert bad_frames(b"[" + err % 0 + b"," + err % 2 + b"]", 3) == frozenset({0, 2})
    assert bad_frames(b"[" + err % 5 + b"]", 3) is None  # out of range: not trusted
    assert bad_frames(b'{"error":"x"}', 3) is None
    assert bad_frames(b"not json", 3) is None
