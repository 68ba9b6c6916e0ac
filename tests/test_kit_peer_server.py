"""The conformance kit's peer servers (``nvpair_wm.conformance.peerserver``) check what reaches
them: each rule they hold every request to fails a request that breaks it, over real mutual TLS,
sent by the kit's own client (``nvpair_wm.conformance.peer``)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.settings
import pytest
from nvpair_wm_schema.contract import CONTRACT_VERSION

from nvpair_wm import clusterdir
from nvpair_wm.conformance import peer
from nvpair_wm.conformance.expect import CONTRACT_HEADER
from nvpair_wm.conformance.peerserver import MAX_BODY_BYTES, PeerServer
from nvpair_wm.errors import PeerError

HOST = "127.0.0.1"
EVENT = {
    "jsonrpc": "2.0",
    "method": "workload:submitted",
    "params": {"workloadInfo": {"id": "w1"}},  # the peer checks the envelope, not the params
}
GOOD_HEADERS = [("content-type", "application/json"), (CONTRACT_HEADER, CONTRACT_VERSION)]


@pytest.fixture
def cluster(tmp_path: Path) -> dict[str, Path]:
    return clusterdir.init_cluster(tmp_path / "cl", ["subject", "p", "other"])


@pytest.fixture
def server(cluster: dict[str, Path]) -> Iterator[PeerServer]:
    s = PeerServer(
        "p",
        cert=cluster["p"] / "node.crt",
        key=cluster["p"] / "node.key",
        client_cert=cluster["subject"] / "node.crt",
        protocols=[peer.H2, peer.H1],
    )
    yield s
    s.close()


def _send(
    server: PeerServer,
    cluster: dict[str, Path],
    body: bytes,
    *,
    protocol: str = peer.H2,
    method: str = "POST",
    path: str = "/v1/workloads/events",
    headers: list[tuple[str, str]] | None = None,
    member: str = "subject",
) -> peer.HttpResponse:
    identity = peer.Identity(cluster[member] / "node.crt", cluster[member] / "node.key")
    req = peer.HttpRequest(method, path, GOOD_HEADERS if headers is None else headers, body)
    return peer.request(HOST, server.port, identity, protocol, req, timeout=5)


@pytest.mark.parametrize("protocol", [peer.H2, peer.H1])
def test_a_good_request_is_accepted_and_recorded(
    server: PeerServer, cluster: dict[str, Path], protocol: str
) -> None:
    resp = _send(server, cluster, json.dumps([EVENT, EVENT]).encode(), protocol=protocol)
    assert resp.status == 202
    assert resp.headers.get(CONTRACT_HEADER) == CONTRACT_VERSION
    (arrival,) = server.requests()
    assert arrival.accepted and arrival.protocol == protocol and len(arrival.frames) == 2
    assert server.take_problems() == []


@pytest.mark.parametrize(
    ("body", "kwargs", "problem"),
    [
        (json.dumps(EVENT).encode(), {"method": "PUT"}, "PUT /v1/workloads/events"),
        (json.dumps(EVENT).encode(), {"path": "/v1/other"}, "POST /v1/other"),
        (
            json.dumps(EVENT).encode(),
            {"headers": [("content-type", "text/plain"), (CONTRACT_HEADER, CONTRACT_VERSION)]},
            "not application/json",
        ),
        (json.dumps(EVENT).encode(), {"headers": GOOD_HEADERS[:1]}, CONTRACT_HEADER),
        (b"{not json", {}, "not JSON text"),
        (b"[]", {}, "an empty batch"),
        (json.dumps({**EVENT, "method": "nodes:update"}).encode(), {}, "is not a peer frame"),
        (json.dumps({**EVENT, "jsonrpc": "1.0"}).encode(), {}, "jsonrpc '1.0'"),
        (json.dumps([EVENT] * 10_001).encode(), {}, "a batch of 10001 frames"),
        (json.dumps(EVENT).encode().ljust(MAX_BODY_BYTES + 1), {}, "over the bound"),
    ],
)
def test_a_request_that_breaks_a_rule_is_a_problem(
    server: PeerServer,
    cluster: dict[str, Path],
    body: bytes,
    kwargs: dict[str, object],
    problem: str,
) -> None:
    _send(server, cluster, body, **kwargs)  # type: ignore[arg-type]
    problems = server.take_problems()
    assert any(problem in p for p in problems), problems
    assert server.take_problems() == []  # taken once


def test_retry_after_is_enforced_and_rules_run_out(
    server: PeerServer, cluster: dict[str, Path]
) -> None:
    server.respond([{"status": 503, "headers": {"retry-after": "30"}, "count": 1}])
    body = json.dumps(EVENT).encode()
    first = _send(server, cluster, body)
    assert first.status == 503 and first.headers.get("retry-after") == "30"
    assert server.take_problems() == []
    assert _send(server, cluster, body).status == 202  # the rule's one answer was used up
    problems = server.take_problems()
    assert any("before the Retry-After" in p for p in problems), problems
    assert [a.accepted for a in server.requests()] == [False, True]


def test_a_request_in_flight_with_the_refused_one_is_not_held_to_its_retry_after(
    server: PeerServer, cluster: dict[str, Path]
) -> None:
    """Two HTTP/2 requests written together: the second was sent before the client could read
    the first one's Retry-After, so only a request read after that answer is held to it."""
    server.respond([{"status": 503, "headers": {"retry-after": "30"}, "count": 1}])
    identity = peer.Identity(cluster["subject"] / "node.crt", cluster["subject"] / "node.key")
    sock = peer.connect_tls(HOST, server.port, identity, peer.H2, 5.0)
    try:
        ex = peer.H2Exchange(sock)
        conn = ex.conn
        conn.initiate_connection()
        body = json.dumps(EVENT).encode()
        pseudo = [(":method", "POST"), (":scheme", "https"), (":authority", HOST)]
        for sid in (1, 3):  # both in one write, before any answer
            conn.send_headers(sid, [*pseudo, (":path", "/v1/workloads/events"), *GOOD_HEADERS])
            conn.send_data(sid, body, end_stream=True)
        ex.flush()
        while len(server.requests()) < 2:
            ex.pump()
    finally:
        sock.close()
    assert [a.status for a in server.requests()] == [503, 202]
    assert server.take_problems() == []
    assert _send(server, cluster, body).status == 202  # read after the Retry-After: held
    assert any("before the Retry-After" in p for p in server.take_problems())


def test_frames_above_selects_large_batches(server: PeerServer, cluster: dict[str, Path]) -> None:
    server.respond([{"status": 413, "framesAbove": 2}])
    assert _send(server, cluster, json.dumps([EVENT] * 3).encode()).status == 413
    assert _send(server, cluster, json.dumps([EVENT] * 2).encode()).status == 202


@pytest.mark.parametrize("protocol", [peer.H2, peer.H1])
def test_a_rule_with_a_body_answers_with_it(
    server: PeerServer, cluster: dict[str, Path], protocol: str
) -> None:
    """A 400 that names the refused frames needs a body (error.data.index); others have none."""
    errors = [{"jsonrpc": "2.0", "id": None, "error": {"code": -32602, "data": {"index": 0}}}]
    server.respond([{"status": 400, "count": 1, "body": errors}])
    resp = _send(server, cluster, json.dumps([EVENT, EVENT]).encode(), protocol=protocol)
    assert resp.status == 400
    assert json.loads(resp.body) == errors
    assert resp.headers.get("content-type") == "application/json"
    after = _send(server, cluster, json.dumps(EVENT).encode(), protocol=protocol)
    assert (after.status, after.body) == (202, b"")


def test_only_the_subjects_certificate_gets_in(
    server: PeerServer, cluster: dict[str, Path]
) -> None:
    with pytest.raises(PeerError):
        _send(server, cluster, json.dumps(EVENT).encode(), member="other")
    assert server.wait_for(lambda s: s.failed_handshakes == 1, timeout=5)  # for the report
    assert server.last_handshake_error and server.requests() == []


def test_down_refuses_connections_and_up_listens_on_the_same_port(
    server: PeerServer, cluster: dict[str, Path]
) -> None:
    port = server.port
    server.down()
    with pytest.raises(PeerError):
        _send(server, cluster, json.dumps(EVENT).encode())
    server.up()
    assert server.port == port
    assert _send(server, cluster, json.dumps(EVENT).encode()).status == 202


def test_move_listens_on_another_port_only(server: PeerServer, cluster: dict[str, Path]) -> None:
    """``move``: a member that moved is served at its new port and nowhere else."""
    port = server.port
    server.move()
    assert server.port != port
    assert _send(server, cluster, json.dumps(EVENT).encode()).status == 202
    with pytest.raises(OSError), socket.create_connection((HOST, port), timeout=5):
        pass


def test_more_streams_than_the_peer_allows_is_a_problem(cluster: dict[str, Path]) -> None:
    """``maxConcurrentStreams``: a client that opens more streams at once than the peer's
    SETTINGS allow (once it acknowledged them) fails the case; up to the limit is served."""
    server = PeerServer(
        "p",
        cert=cluster["p"] / "node.crt",
        key=cluster["p"] / "node.key",
        client_cert=cluster["subject"] / "node.crt",
        protocols=[peer.H2],
        max_streams=2,
    )
    identity = peer.Identity(cluster["subject"] / "node.crt", cluster["subject"] / "node.key")
    sock = peer.connect_tls(HOST, server.port, identity, peer.H2, 5)
    try:
        client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        client.initiate_connection()
        sock.sendall(client.data_to_send())
        while client.remote_settings.max_concurrent_streams != 2:
            client.receive_data(sock.recv(65536))
        sock.sendall(client.data_to_send())  # the SETTINGS ack: the limit holds from here
        # Our h2 would refuse to open a third stream: let it believe the limit is higher.
        client.remote_settings = h2.settings.Settings(client=False)
        body = json.dumps(EVENT).encode()
        for sid in (1, 3, 5):
            headers = [(":method", "POST"), (":scheme", "https"), (":authority", HOST)]
            headers += [(":path", "/v1/workloads/events"), *GOOD_HEADERS]
            client.send_headers(sid, headers)
            client.send_data(sid, body, end_stream=True)
        sock.sendall(client.data_to_send())
        assert server.wait_for(lambda s: bool(s.problems), 5)
    finally:
        sock.close()
        server.close()
    (problem,) = server.take_problems()
    assert "SETTINGS_MAX_CONCURRENT_STREAMS" in problem
    assert len(server.requests()) <= 2


def test_a_connection_accepted_just_before_down_is_cut(server: PeerServer) -> None:
    """``down`` between an accept and its thread registering the connection (the window a busy
    machine widens): the thread cuts it, so a peer that is down takes nothing, even over a
    connection it accepted a moment before."""
    listener = server._listener
    assert listener is not None
    ours, theirs = socket.socketpair()
    with theirs:
        server.down()
        server._serve(ours, listener)  # the accept thread's late half
        assert ours.fileno() == -1  # closed
        theirs.settimeout(5)
        assert theirs.recv(1) == b""  # the client sees the connection end
    assert not server._conns
