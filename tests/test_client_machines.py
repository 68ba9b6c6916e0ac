"""The client sessions as machines: bytes and ``now`` in, bytes and events out; no socket.

The HTTP/2 peer is h2's own server-side state machine (what a conforming server sends), fed
and drained by hand; GOAWAY frames are built with hyperframe where a server would send one that
h2 cannot (python-hyper/h2#1181). The HTTP/1.1 peer is literal bytes.
"""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.settings
import hpack
import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import GoAwayFrame, HeadersFrame, PingFrame

from nvpair_wm.errors import (
    ConnectionLost,
    LocalProtocolError,
    ResponseTimeout,
    StreamRefused,
)
from nvpair_wm.proto.exchanges import (
    ClientEvent,
    ConnectionEnded,
    PingAnswered,
    PingFailed,
    RequestFailed,
    ResponseReceived,
    SessionChanged,
)
from nvpair_wm.proto.h1client import H1ClientSession
from nvpair_wm.proto.h2.client import H2ClientSession
from nvpair_wm.proto.h2.frames import window_update_frame
from nvpair_wm.versions import CONTRACT_VERSION, PACKAGE_VERSION
from tests.support.client_sessions import (
    AUTHORITY,
    MIB,
    PATH,
    Server,
    connected,
    failures,
    responses,
)

# -- HTTP/2 ---------------------------------------------------------------------------------------


def test_h2_request_and_response() -> None:
    client, server = connected()
    sid = client.start_request(PATH, b'[{"a":1}]', now=1.0, timeout=10.0)
    assert client.active == 1 and client.next_deadline() == 11.0
    server.take(client)
    assert server.headers[sid] == {
        b":method": b"POST",
        b":scheme": b"https",
        b":authority": AUTHORITY,
        b":path": PATH.encode(),
        b"user-agent": b"nvpair-wm/" + PACKAGE_VERSION.encode(),
        b"nvpair-contract-version": CONTRACT_VERSION.encode(),
        b"content-type": b"application/json",
        b"content-length": b"9",
    }
    assert server.bodies[sid] == b'[{"a":1}]'
    server.respond(sid, 400, b'[{"error":1}]')
    events = client.receive_data(server.out(), 1.5)
    [got] = [e for e in events if isinstance(e, ResponseReceived)]
    assert got.request == sid and got.response.status == 400
    assert got.response.body == b'[{"error":1}]' and got.response.header(b"content-length") == b"13"
    assert client.active == 0 and client.next_deadline() is None and client.usable


@pytest.mark.parametrize("table_size", [4096, 0, 100])
def test_h2_request_headers_stay_right_as_the_block_is_reused(table_size: int) -> None:
    """The session reuses one encoded block of the fixed request fields (never indexed: its
    first block sets our table to size 0), with content-length as a literal after it. The
    server (h2, a real hpack decoder) reads every field of every request right, whatever the
    bodies' lengths and whatever table size it advertises, also after it shrinks its table
    mid-way."""
    client, server = connected(HEADER_TABLE_SIZE=table_size)
    expected = {
        b":method": b"POST",
        b":scheme": b"https",
        b":authority": AUTHORITY,
        b":path": PATH.encode(),
        b"user-agent": b"nvpair-wm/" + PACKAGE_VERSION.encode(),
        b"nvpair-contract-version": CONTRACT_VERSION.encode(),
        b"content-type": b"application/json",
    }
    sizes = [1, 9, 300, 1, 4_321, 9, 0, 77, 77, 5, 1_000]  # within the first windows
    for round_ in range(2):
        if round_:
            server.h2.update_settings({h2.settings.SettingCodes.HEADER_TABLE_SIZE: 64})
            client.receive_data(server.out(), 2.0)
            server.take(client)
        for size in sizes:
            body = b"x" * size
            sid = client.start_request(PATH, body, now=1.0, timeout=10.0)
            server.take(client)
            assert server.headers[sid] == {**expected, b"content-length": str(size).encode()}
            assert server.bodies[sid] == body
            server.respond(sid)
            assert responses(client.receive_data(server.out(), 1.5)) == {sid: 202}
            server.take(client)  # WINDOW_UPDATEs


def test_h2_fed_one_byte_at_a_time() -> None:
    client, server = connected()
    sids = [client.start_request(PATH, b"[]", 0.0, 10.0) for _ in range(3)]
    server.take(client)
    for sid in sids:
        server.respond(sid)
    wire = server.out() + GoAwayFrame(0, last_stream_id=sids[-1], error_code=0).serialize()
    events: list[ClientEvent] = []
    for i in range(len(wire)):
        events += client.receive_data(wire[i : i + 1], 0.0)
    assert responses(events) == dict.fromkeys(sids, 202)
    assert not client.usable  # the GOAWAY, split over 17 calls, was seen


def test_h2_goaway_refuses_streams_above_last_and_lets_the_others_complete() -> None:
    client, server = connected()
    first, second, third = (client.start_request(PATH, b"[]", 0.0, 10.0) for _ in range(3))
    server.take(client)
    goaway = GoAwayFrame(0, last_stream_id=first, error_code=0).serialize()
    events = client.receive_data(goaway, 0.1)
    assert failures(events) == {second: StreamRefused, third: StreamRefused}
    assert SessionChanged() in events
    assert not client.usable and client.active == 1
    with pytest.raises(ConnectionLost, match="GOAWAY"):
        client.start_request(PATH, b"[]", 0.2, 10.0)
    server.respond(first)  # the server finishes what it promised
    events = client.receive_data(server.out(), 0.3)
    assert responses(events) == {first: 202}
    assert client.active == 0 and client.ended is None


def test_h2_body_waits_for_the_window() -> None:
    client, server = connected()
    body = bytes(range(256)) * 1024  # 256 KiB: four times the server's 64 KiB windows
    sid = client.start_request(PATH, body, 0.0, 10.0)
    rounds = 0
    while len(server.bodies.get(sid, b"")) < len(body):
        rounds += 1
        assert rounds < 20
        got = server.take(client)  # the server acknowledges: WINDOW_UPDATEs
        assert got, "the client stalled"
        client.receive_data(server.out(), 0.0)
    assert rounds > 1  # it had to wait for windows
    assert server.bodies[sid] == body
    assert any(isinstance(e, h2.events.StreamEnded) for e in server.events)
    server.respond(sid)
    assert responses(client.receive_data(server.out(), 0.0)) == {sid: 202}


@pytest.mark.parametrize("size", [1, 300, 16_383, 16_384, 16_385, 65_535])
def test_h2_body_sent_at_once_is_what_the_windowed_path_sends(size: int) -> None:
    """start_request writes a body that fits the windows and the frame size as one DATA frame
    itself (the usual request); the general path (_pump, here after the connection window
    reopens) must produce the same bytes and leave the same windows."""
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    fast, server = connected()
    sid = fast.start_request(PATH, body, 0.0, 10.0)
    fast_out = fast.data_to_send()
    general, _ = connected()
    window = general._send_window
    general._send_window = 0  # spent by earlier requests: the body waits in _pump
    assert general.start_request(PATH, body, 0.0, 10.0) == sid
    general_out = general.data_to_send()
    general.receive_data(window_update_frame(0, window), 0.0)  # reopened: _pump sends it
    general_out += general.data_to_send()
    assert fast_out == general_out
    assert fast._send_window == general._send_window
    st_fast, st_general = fast._streams[sid], general._streams[sid]
    assert (st_fast.offset, st_fast.send_window) == (st_general.offset, st_general.send_window)
    assert not fast._sending and not general._sending  # nothing left waiting for window
    got = server.h2.receive_data(fast_out)  # and a conforming server reads it as the request
    data = b"".join(e.data for e in got if isinstance(e, h2.events.DataReceived))
    assert data == body and any(isinstance(e, h2.events.StreamEnded) for e in got)


def test_h2_early_response_stops_the_body_with_rst_stream_no_error() -> None:
    client, server = connected()
    sid = client.start_request(PATH, b"x" * 200_000, 0.0, 10.0)
    server.take(client)  # 64 KiB of it; no acknowledgement is sent back
    server.h2.send_headers(sid, [(b":status", b"413"), (b"content-length", b"0")], end_stream=True)
    events = client.receive_data(server.out(), 0.0)
    assert responses(events) == {sid: 413}
    got = server.take(client)
    resets = [e for e in got if isinstance(e, h2.events.StreamReset)]
    assert [(r.stream_id, r.error_code) for r in resets] == [(sid, ErrorCodes.NO_ERROR)]
    assert client.active == 0


def test_h2_stream_reset_by_the_server_is_stream_refused() -> None:
    client, server = connected()
    sid = client.start_request(PATH, b"[]", 0.0, 10.0)
    server.take(client)
    server.h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
    events = client.receive_data(server.out(), 0.0)
    [failed] = [e for e in events if isinstance(e, RequestFailed)]
    assert isinstance(failed.error, StreamRefused) and "REFUSED_STREAM" in str(failed.error)
    assert client.usable


def test_h2_response_too_large_resets_that_stream_only() -> None:
    client = H2ClientSession(AUTHORITY, 100)
    server = Server()
    server.take(client)
    client.receive_data(server.out(), 0.0)
    big, small = (client.start_request(PATH, b"[]", 0.0, 10.0) for _ in range(2))
    server.take(client)
    server.h2.send_headers(big, [(b":status", b"200")])
    server.h2.send_data(big, b"y" * 101)  # more to come: the client cuts it short
    server.respond(small, 202)
    events = client.receive_data(server.out(), 0.0)
    assert failures(events) == {big: StreamRefused} and responses(events) == {small: 202}
    got = server.take(client)
    assert any(
        isinstance(e, h2.events.StreamReset) and e.error_code == ErrorCodes.CANCEL for e in got
    )
    assert client.usable


def test_h2_max_concurrent_streams_sets_the_capacity() -> None:
    client, _ = connected(MAX_CONCURRENT_STREAMS=3)
    assert client.capacity(16) == 3 and client.capacity(2) == 2
    for _ in range(3):
        client.start_request(PATH, b"[]", 0.0, 10.0)
    with pytest.raises(LocalProtocolError):  # the broadcaster asks capacity() first
        client.start_request(PATH, b"[]", 0.0, 10.0)


def test_h2_ping_answered_and_unanswered() -> None:
    client, server = connected()
    ping = client.ping(5.0, 2.0)
    assert client.next_deadline() == 7.0
    server.take(client)  # h2 answers PINGs itself
    assert client.receive_data(server.out(), 5.1) == [PingAnswered(ping)]
    assert client.next_deadline() is None

    lost = client.ping(10.0, 2.0)
    sid = client.start_request(PATH, b"[]", 10.0, 30.0)
    assert client.handle_timeout(11.9) == []
    events = client.handle_timeout(12.0)
    assert [type(e) for e in events] == [PingFailed, RequestFailed, ConnectionEnded]
    assert isinstance(events[0], PingFailed) and events[0].ping == lost
    assert isinstance(events[0].error, ResponseTimeout)
    assert failures(events) == {sid: ConnectionLost}
    assert events[-1] == ConnectionEnded("PING unanswered for 2s", graceful=False)


def test_h2_ping_ack_with_unknown_data_is_ignored() -> None:
    client, _ = connected()
    ping = client.ping(0.0, 2.0)
    stray = PingFrame(0, flags=["ACK"])
    stray.opaque_data = (ping + 41).to_bytes(8, "big")
    assert client.receive_data(stray.serialize(), 0.1) == []
    assert client.next_deadline() == 2.0


def test_h2_response_timeout_ends_the_connection() -> None:
    client, server = connected()
    slow = client.start_request(PATH, b"[]", 0.0, 1.0)
    other = client.start_request(PATH, b"[]", 0.5, 1.0)
    server.take(client)
    assert client.next_deadline() == 1.0
    events = client.handle_timeout(1.0)
    assert failures(events) == {slow: ResponseTimeout, other: ConnectionLost}
    assert events[-1] == ConnectionEnded("no response within 1s", graceful=False)
    assert not client.usable and client.ended == "no response within 1s"
    server.respond(slow)
    assert client.receive_data(server.out(), 1.1) == []  # too late: ignored


def test_h2_eof_fails_what_is_in_progress() -> None:
    client, _ = connected()
    sid = client.start_request(PATH, b"[]", 0.0, 10.0)
    events = client.receive_data(b"", 0.1)
    assert failures(events) == {sid: ConnectionLost}
    assert events[-1] == ConnectionEnded("closed by the peer", graceful=False)


def test_h2_garbage_is_a_protocol_error_answered_with_goaway() -> None:
    client, server = connected()
    sid = client.start_request(PATH, b"[]", 0.0, 10.0)
    server.take(client)
    # A DATA frame on stream 0 is a connection error (RFC 9113 §6.1).
    events = client.receive_data(b"\x00\x00\x01\x00\x00\x00\x00\x00\x00x", 0.1)
    assert failures(events) == {sid: ConnectionLost}
    ended = events[-1]
    assert isinstance(ended, ConnectionEnded) and ended.reason.startswith("protocol error:")
    got = server.take(client)
    [term] = [e for e in got if isinstance(e, h2.events.ConnectionTerminated)]
    assert term.error_code == ErrorCodes.PROTOCOL_ERROR


@pytest.mark.parametrize("status", [None, b"20", b"2xx", b"0200"])
def test_h2_response_without_a_valid_status_is_a_protocol_error(status: bytes | None) -> None:
    client, server = connected()
    sid = client.start_request(PATH, b"[]", 0.0, 10.0)
    server.take(client)
    # h2 (as a server) would refuse to send these: encode the header block by hand.
    fields = [(b"content-length", b"0")] if status is None else [(b":status", status)]
    block = hpack.Encoder().encode(fields)
    frame = HeadersFrame(sid, block, flags=["END_HEADERS", "END_STREAM"]).serialize()
    events = client.receive_data(frame, 0.1)
    assert failures(events) == {sid: ConnectionLost}
    ended = events[-1]
    assert isinstance(ended, ConnectionEnded) and "valid :status" in ended.reason
    data = client.data_to_send()  # GOAWAY PROTOCOL_ERROR (the server's h2 cannot decode it)
    assert data[3] == 0x7 and int.from_bytes(data[13:17], "big") == ErrorCodes.PROTOCOL_ERROR


def test_h2_oversized_frame_is_refused_from_its_header() -> None:
    client, server = connected()
    events = client.receive_data(b"\x10\x00\x00\x00\x00\x00\x00\x00\x01", 0.0)  # 1 MiB frame
    ended = events[-1]
    assert isinstance(ended, ConnectionEnded) and "frame of 1048576 bytes" in ended.reason
    assert ended.graceful  # GOAWAY FRAME_SIZE_ERROR goes out first
    [term] = [e for e in server.take(client) if isinstance(e, h2.events.ConnectionTerminated)]
    assert term.error_code == ErrorCodes.FRAME_SIZE_ERROR


def test_h2_close_sends_goaway_no_error() -> None:
    client, server = connected()
    sid = client.start_request(PATH, b"[]", 0.0, 10.0)
    events = client.end("closed by us", graceful=True)
    assert failures(events) == {sid: ConnectionLost}
    assert events[-1] == ConnectionEnded("closed by us", graceful=True)
    got = server.take(client)
    [term] = [e for e in got if isinstance(e, h2.events.ConnectionTerminated)]
    assert term.error_code == ErrorCodes.NO_ERROR
    assert client.end("again", graceful=True) == []


# -- HTTP/1.1 -------------------------------------------------------------------------------------


def h1_response(status: int = 202, body: bytes = b"", *extra: bytes) -> bytes:
    head = b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n" % (status, len(body))
    return head + b"".join(h + b"\r\n" for h in extra) + b"\r\n" + body


def test_h1_request_bytes_and_keepalive() -> None:
    client = H1ClientSession(AUTHORITY, MIB)
    assert client.usable and client.capacity(16) == 1
    first = client.start_request(PATH, b"[1]", 0.0, 10.0)
    assert client.data_to_send() == (
        b"POST /v1/workloads/events HTTP/1.1\r\nhost: 10.0.0.2:14320\r\n"
        b"user-agent: nvpair-wm/%s\r\nnvpair-contract-version: %s\r\n"
        b"content-type: application/json\r\ncontent-length: 3\r\n\r\n[1]"
        % (PACKAGE_VERSION.encode(), CONTRACT_VERSION.encode())
    )
    assert not client.usable and client.next_deadline() == 10.0
    with pytest.raises(ConnectionLost, match="busy"):
        client.start_request(PATH, b"[]", 0.0, 10.0)
    wire = h1_response(503, b"full", b"retry-after: 1")
    events: list[ClientEvent] = []
    for i in range(len(wire)):
        events += client.receive_data(wire[i : i + 1], 0.5)
    [got] = [e for e in events if isinstance(e, ResponseReceived)]
    assert got.request == first and got.response.status == 503 and got.response.body == b"full"
    assert got.response.header(b"retry-after") == b"1"
    assert events[-1] == SessionChanged()
    assert client.usable and client.next_deadline() is None
    second = client.start_request(PATH, b"[2]", 1.0, 10.0)
    assert second != first and client.data_to_send().endswith(b"[2]")
    assert responses(client.receive_data(h1_response(), 1.1)) == {second: 202}


def test_h1_connection_close_ends_the_session_after_the_response() -> None:
    client = H1ClientSession(AUTHORITY, MIB)
    rid = client.start_request(PATH, b"[]", 0.0, 10.0)
    events = client.receive_data(h1_response(202, b"", b"connection: close"), 0.1)
    assert responses(events) == {rid: 202}
    assert events[-1] == ConnectionEnded(
        "closed after the response, as HTTP/1.1 required", graceful=True
    )
    assert not client.usable


def test_h1_eof_while_idle_and_mid_response() -> None:
    idle = H1ClientSession(AUTHORITY, MIB)
    assert idle.receive_data(b"", 0.0) == [ConnectionEnded("closed by the peer", graceful=False)]

    busy = H1ClientSession(AUTHORITY, MIB)
    rid = busy.start_request(PATH, b"[]", 0.0, 10.0)
    events = busy.receive_data(b"HTTP/1.1 202 OK\r\ncontent-length: 10\r\n\r\nabc", 0.1)
    assert events == []
    events = busy.receive_data(b"", 0.2)
    assert failures(events) == {rid: ConnectionLost}
    ended = events[-1]
    assert isinstance(ended, ConnectionEnded) and ended.reason.startswith("protocol error:")


def test_h1_peer_errors_end_the_session() -> None:
    unasked = H1ClientSession(AUTHORITY, MIB)
    events = unasked.receive_data(h1_response(), 0.0)
    assert isinstance(events[-1], ConnectionEnded) and "without a request" in events[-1].reason

    small = H1ClientSession(AUTHORITY, 10)
    rid = small.start_request(PATH, b"[]", 0.0, 10.0)
    events = small.receive_data(h1_response(200, b"z" * 11), 0.0)
    assert failures(events) == {rid: ConnectionLost}
    assert isinstance(events[-1], ConnectionEnded) and "over 10 bytes" in events[-1].reason

    garbage = H1ClientSession(AUTHORITY, MIB)
    garbage.start_request(PATH, b"[]", 0.0, 10.0)
    events = garbage.receive_data(b"SSH-2.0-OpenSSH\r\n\r\n", 0.0)
    assert isinstance(events[-1], ConnectionEnded) and not events[-1].graceful


def test_h1_response_timeout() -> None:
    client = H1ClientSession(AUTHORITY, MIB)
    rid = client.start_request(PATH, b"[]", 3.0, 0.5)
    assert client.handle_timeout(3.4) == []
    events = client.handle_timeout(3.5)
    assert failures(events) == {rid: ResponseTimeout}
    assert events[-1] == ConnectionEnded("no response within 0.5s", graceful=False)
    assert client.ping(4.0, 1.0) is None  # HTTP/1.1 has no PING
