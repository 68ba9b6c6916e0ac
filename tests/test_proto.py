"""The sans-IO machines (``nvpair_wm.proto``) fed bytes and ``now``: no socket, no event loop.

HTTP/1.1 and HTTP/2 sessions get bytes written by h11/h2 clients (or by hand) and a clock
value; TLS is two :class:`TLSMachine` objects (server and client, real certificates) passing
records to each other in memory.
"""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h11
import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import Frame, GoAwayFrame, RstStreamFrame
from OpenSSL import SSL

from nvpair_wm.clusterdir import cert_fingerprint
from nvpair_wm.errors import TLSError
from nvpair_wm.http.core import Limits
from nvpair_wm.pins import Identity, PinSet
from nvpair_wm.proto import tls as tls_module
from nvpair_wm.proto.h1 import H1Session
from nvpair_wm.proto.h2 import H2_PREFACE, H2ServerSession
from nvpair_wm.proto.tls import TLSMachine, pointer_to
from nvpair_wm.tls_contexts import ServerTLS, client_context
from tests.conftest import TLSCluster
from tests.support.handlers import (
    Recorder,
)

FP = "ab" * 32


def h1_request(body: bytes = b"{}", target: str = "/e", extra: str = "") -> bytes:
    return (
        f"POST {target} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def h1_statuses(data: bytes) -> list[int]:
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="GET", target="/", headers=[("host", "t")]))
    client.send(h11.EndOfMessage())
    client.receive_data(data)
    out: list[int] = []
    while True:
        ev = client.next_event()
        if isinstance(ev, h11.Response):
            out.append(ev.status_code)
        elif ev is h11.NEED_DATA or isinstance(ev, h11.ConnectionClosed):
            return out
        elif isinstance(ev, h11.EndOfMessage):
            if client.our_state is not h11.DONE or client.their_state is not h11.DONE:
                return out
            client.start_next_cycle()
            client.send(h11.Request(method="GET", target="/", headers=[("host", "t")]))
            client.send(h11.EndOfMessage())


# -- HTTP/1.1 -------------------------------------------------------------------------------------


def test_h1_pipelined_requests_in_one_feed_are_answered_in_order() -> None:
    handler = Recorder()
    s = H1Session(handler, Limits(), FP, now=0.0)
    s.receive_data(h1_request(b"1") + h1_request(b"2", target="https://h:1/x?q"), 1.0)
    assert h1_statuses(s.data_to_send()) == [202, 202]
    assert handler.completed == [("/e", b"1"), ("/x", b"2")]  # absolute-form reduced to a path
    assert not s.closed
    assert s.next_deadline() == 1.0 + Limits().idle_timeout


def test_h1_content_length_and_transfer_encoding_close_and_skip_what_follows() -> None:
    handler = Recorder()
    s = H1Session(handler, Limits(), FP, now=0.0)
    smuggled = (
        b"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    s.receive_data(smuggled + b"0\r\n\r\n" + h1_request(b"behind"), 0.0)
    out = s.data_to_send()
    assert out.startswith(b"HTTP/1.1 400 ")
    assert b"connection: close" in out.lower()
    assert s.closed
    assert handler.completed == []


def test_h1_version_line_and_header_limits() -> None:
    for request, status in [
        (h1_request().replace(b"HTTP/1.1", b"HTTP/2.0", 1), 505),
        (h1_request(target="/" + "x" * 100_000), 414),
        (h1_request(extra="x-big: " + "y" * 20_000 + "\r\n"), 431),
    ]:
        s = H1Session(Recorder(), Limits(), FP, now=0.0)
        s.receive_data(request[:8000], 0.0)  # a first piece, then the rest
        s.receive_data(request[8000:], 0.0)
        assert s.data_to_send().startswith(f"HTTP/1.1 {status} ".encode()), status
        assert s.closed


def test_h1_timers_idle_header_and_body() -> None:
    limits = Limits(idle_timeout=60, header_timeout=10, body_timeout=30)
    s = H1Session(Recorder(), limits, FP, now=100.0)
    assert s.next_deadline() == 160.0  # idle
    s.receive_data(b"POST /e HT", 150.0)
    assert s.next_deadline() == 160.0  # header timeout from the first byte
    s.handle_timeout(159.9)
    assert not s.closed
    s.handle_timeout(160.0)
    assert s.data_to_send().startswith(b"HTTP/1.1 408 ")
    assert s.closed

    s = H1Session(Recorder(), limits, FP, now=0.0)
    s.receive_data(h1_request(b"0123456789")[:-5], 1.0)
    assert s.next_deadline() == 31.0  # body timeout
    s.handle_timeout(31.0)
    assert s.data_to_send().startswith(b"HTTP/1.1 408 ")
    assert s.closed

    s = H1Session(Recorder(), limits, FP, now=0.0)
    s.handle_timeout(60.0)  # idle keep-alive connection: closed quietly
    assert s.closed and s.data_to_send() == b""


def test_h1_shutdown_idle_closes_busy_answers_with_close() -> None:
    s = H1Session(Recorder(), Limits(), FP, now=0.0)
    s.shutdown(0.0)
    assert s.closed
    s = H1Session(Recorder(), Limits(), FP, now=0.0)
    s.receive_data(h1_request(b"0123")[:-2], 0.0)
    s.shutdown(0.0)
    assert not s.closed
    s.receive_data(b"23", 0.0)
    assert b"connection: close" in s.data_to_send().lower()
    assert s.closed


# -- HTTP/2 ---------------------------------------------------------------------------------------


def h2_client() -> h2.connection.H2Connection:
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    return c


def post(c: h2.connection.H2Connection, body: bytes = b"{}", path: str = "/e") -> int:
    sid = c.get_next_available_stream_id()
    headers = [(":method", "POST"), (":scheme", "https"), (":authority", "t"), (":path", path)]
    c.send_headers(sid, [*headers, ("content-length", str(len(body)))])
    c.send_data(sid, body, end_stream=True)
    return sid


def frames_of(data: bytes) -> list[Frame]:
    out: list[Frame] = []
    while len(data) >= 9:
        frame, length = Frame.parse_frame_header(memoryview(data[:9]))
        frame.parse_body(memoryview(data[9 : 9 + length]))
        out.append(frame)
        data = data[9 + length :]
    return out


def test_h2_request_response_by_bytes() -> None:
    handler = Recorder()
    s = H2ServerSession(handler, Limits(), FP, now=0.0)
    c = h2_client()
    sid = post(c, b"hello")
    s.receive_data(c.data_to_send(), 0.5)
    events = c.receive_data(s.data_to_send())
    responses = [e for e in events if isinstance(e, h2.events.ResponseReceived)]
    assert [(e.stream_id, dict(e.headers)[b":status"]) for e in responses] == [(sid, b"202")]
    assert handler.completed == [("/e", b"hello")]
    assert s.open_streams == 0 and not s.closed
    assert s.next_deadline() == 0.5 + Limits().idle_timeout


def test_h2_no_preface_in_time_is_goaway_protocol_error() -> None:
    s = H2ServerSession(Recorder(), Limits(header_timeout=2.0), FP, now=0.0)
    assert s.next_deadline() == 2.0
    s.handle_timeout(2.0)
    goaways = [f for f in frames_of(s.data_to_send()) if isinstance(f, GoAwayFrame)]
    assert [g.error_code for g in goaways] == [ErrorCodes.PROTOCOL_ERROR]
    assert s.closed


def test_h2_rapid_reset_budget_is_counted_per_window() -> None:
    limits = Limits(h2_max_resets_per_window=5, h2_rate_window=1.0)
    s = H2ServerSession(Recorder(), limits, FP, now=0.0)
    c = h2_client()
    s.receive_data(c.data_to_send(), 0.0)
    c.receive_data(s.data_to_send())

    def reset_burst(n: int, now: float) -> None:
        for _ in range(n):
            sid = c.get_next_available_stream_id()
            c.send_headers(
                sid, [(":method", "GET"), (":scheme", "https"), (":authority", "t"), (":path", "/")]
            )
            c.reset_stream(sid)
        s.receive_data(c.data_to_send(), now)

    reset_burst(5, 0.1)
    reset_burst(5, 1.2)  # a new window: still within budget
    assert not s.closed
    reset_burst(6, 1.3)
    goaways = [f for f in frames_of(s.data_to_send()) if isinstance(f, GoAwayFrame)]
    assert [g.error_code for g in goaways] == [ErrorCodes.ENHANCE_YOUR_CALM]
    assert s.closed


def test_h2_body_over_the_limit_is_413_and_the_rest_dropped() -> None:
    handler = Recorder()
    handler.max_body = 10
    s = H2ServerSession(handler, Limits(), FP, now=0.0)
    c = h2_client()
    post(c, b"x" * 11)
    s.receive_data(c.data_to_send(), 0.0)
    events = c.receive_data(s.data_to_send())
    statuses = [dict(e.headers)[b":status"] for e in events if hasattr(e, "headers") and e.headers]
    assert statuses == [b"413"]
    assert handler.completed == []


def test_h2_graceful_goaway_finishes_in_flight_refuses_newer() -> None:
    handler = Recorder()
    s = H2ServerSession(handler, Limits(), FP, now=0.0)
    c = h2_client()
    sid = c.get_next_available_stream_id()
    c.send_headers(
        sid, [(":method", "POST"), (":scheme", "https"), (":authority", "t"), (":path", "/e")]
    )
    s.receive_data(c.data_to_send(), 0.0)
    s.shutdown(1.0)
    first = [f for f in frames_of(s.data_to_send()) if isinstance(f, GoAwayFrame)]
    assert [(g.error_code, g.last_stream_id) for g in first] == [(ErrorCodes.NO_ERROR, sid)]
    # The client has not read the GOAWAY yet when it opens a newer stream.
    newer = c.get_next_available_stream_id()
    c.send_headers(
        newer, [(":method", "GET"), (":scheme", "https"), (":authority", "t"), (":path", "/")]
    )
    c.send_data(sid, b"done", end_stream=True)
    s.receive_data(c.data_to_send(), 1.5)
    out = frames_of(s.data_to_send())
    assert any(isinstance(f, RstStreamFrame) and f.stream_id == newer for f in out)
    assert handler.completed == [("/e", b"done")]
    assert s.closed  # nothing left in flight: the final GOAWAY went out


def test_h2_preface_pieces_and_sniffed_start() -> None:
    s = H2ServerSession(Recorder(), Limits(), FP, now=0.0)
    c = h2_client()
    data = c.data_to_send()
    assert data.startswith(H2_PREFACE)
    for i in range(0, len(data), 7):  # byte dribbles: the scanner reassembles
        s.receive_data(data[i : i + 7], 0.0)
    assert not s.closed
    assert any(
        isinstance(e, h2.events.RemoteSettingsChanged) for e in c.receive_data(s.data_to_send())
    )


# -- TLS ------------------------------------------------------------------------------------------


@pytest.fixture(params=["direct", "public"])
def record_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each TLS test twice: records through OpenSSL's calls directly (the usual path), and
    through pyOpenSSL's public methods, the path taken when its internals are missing."""
    if request.param == "public":
        monkeypatch.setattr(tls_module, "_lib", None)
        monkeypatch.setattr(tls_module, "ssl_parts", lambda _conn: None)  # internals: off
    return str(request.param)


def _handshaken(tls_cluster: TLSCluster) -> tuple[TLSMachine, TLSMachine]:
    server = TLSMachine(ServerTLS(Identity(tls_cluster.server_dir)).new_connection())
    ident = Identity(tls_cluster.dirs["b"]).current()
    assert ident is not None
    pins = PinSet(tls_cluster.dirs["b"] / "trusted")
    conn = SSL.Connection(client_context(ident, pins.is_pinned, [b"h2"]), None)
    conn.set_connect_state()
    client = TLSMachine(conn)
    client.start()
    for _ in range(4):
        server.receive(client.data_to_send())
        client.receive(server.data_to_send())
    assert server.handshake_done and client.handshake_done
    return server, client


def test_tls_machines_handshake_and_exchange_in_memory(
    tls_cluster: TLSCluster, record_path: str
) -> None:
    server, client = _handshaken(tls_cluster)
    b = tls_cluster.pair("b")
    assert server.alpn == client.alpn == "h2"
    assert server.peer_fingerprint == cert_fingerprint(b.cert.read_bytes())
    client.send(b"ping")
    assert server.receive(client.data_to_send()) == b"ping"
    server.send(b"pong")
    assert client.receive(server.data_to_send()) == b"pong"
    client.close()
    assert server.receive(client.data_to_send()) == b""
    assert server.peer_closed


def test_tls_records_split_anywhere_or_packed_together_come_out_whole(
    tls_cluster: TLSCluster, record_path: str
) -> None:
    """The record path reads every complete record a feed completes and no further: records
    split at odd offsets, several records in one feed, plaintext over one record's 16 KiB,
    and a reply bigger than one record, all arrive intact and in order."""
    server, client = _handshaken(tls_cluster)
    messages = [b"a" * 10, b"b" * 300, bytes(range(256)) * 100, b"d"]  # the third: 2 records
    wire = b""
    for m in messages:
        client.send(m)
        wire += client.data_to_send()
    got = b""
    for i in range(0, len(wire), 97):  # splits inside headers and bodies of records
        got += server.receive(wire[i : i + 97])
    assert got == b"".join(messages)
    # The same through the server's one receive buffer and its pointer (receive_from).
    buffer = bytearray(4096)
    pointer = pointer_to(buffer)
    assert (pointer is None) == (record_path == "public")
    got = b""
    for m in messages:
        client.send(m)
    wire = client.data_to_send()
    for i in range(0, len(wire), 1000):
        piece = wire[i : i + 1000]
        buffer[: len(piece)] = piece
        got += server.receive_from(memoryview(buffer), pointer, len(piece))
    assert got == b"".join(messages)
    for m in messages:
        client.send(m)
    assert server.receive(client.data_to_send()) == b"".join(messages)  # one feed, 5 records
    assert server.receive(b"") == b""
    reply = bytes(range(251)) * 300  # 75 KB: five records out, read in one call
    server.send(reply)
    assert client.receive(server.data_to_send()) == reply
    assert server.data_to_send() == b""


def test_tls_a_forged_record_after_the_handshake_is_a_tls_error(
    tls_cluster: TLSCluster, record_path: str
) -> None:
    server, client = _handshaken(tls_cluster)
    client.send(b"fine")
    assert server.receive(client.data_to_send()) == b"fine"
    client.send(b"x" * 40)
    record = bytearray(client.data_to_send())
    record[-1] ^= 1  # the authentication tag no longer matches
    with pytest.raises(TLSError, match="TLS error"):
        server.receive(bytes(record))
    assert server.data_to_send()  # the alert to send


def test_tls_garbage_is_the_peers_tls_error(tls_cluster: TLSCluster, record_path: str) -> None:
    server = TLSMachine(ServerTLS(Identity(tls_cluster.server_dir)).new_connection())
    with pytest.raises(TLSError, match="handshake failed"):
        server.receive(b"GET / HTTP/1.1\r\n\r\n")
    assert not server.handshake_done and server.peer_fingerprint is None
