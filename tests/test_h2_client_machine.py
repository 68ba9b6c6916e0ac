"""Our HTTP/2 client session fed bytes: against our own server machine and against h2's server.

``test_client_machines`` holds the session's contract (the same tests ran on the h2-based
session before it); these add what a hand-written HTTP/2 client must get right by itself:
flow control both ways, a server that indexes its response headers, header blocks split over
CONTINUATION frames, and every malformed server frame ending the connection with the GOAWAY
code RFC 9113 names.
"""

from __future__ import annotations

import h2.events
import h2.settings
import hpack
import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from nvpair_wm.errors import ConnectionLost, StreamRefused
from nvpair_wm.http.core import Limits, Request
from nvpair_wm.http.core import Response as ServerResponse
from nvpair_wm.proto.exchanges import (
    ClientEvent,
    ConnectionEnded,
    PingAnswered,
    RequestFailed,
    Response,
    ResponseReceived,
    SessionChanged,
)
from nvpair_wm.proto.h2 import H2_PREFACE, H2ServerSession
from nvpair_wm.proto.h2.client import H2ClientSession
from nvpair_wm.proto.h2.hpack import encode_fields
from tests.support.client_sessions import AUTHORITY, MIB, PATH, connected, failures, responses
from tests.support.handlers import Recorder
from tests.support.raw_frames import frames_of, raw

# -- against our own server machine ---------------------------------------------------------------


class Echo(Recorder):
    """Answers 202, or 400 with the body's length for a body that starts with ``bad``."""

    def complete(self, req: Request, body: bytes) -> ServerResponse:
        super().complete(req, body)
        if body.startswith(b"bad"):
            return ServerResponse(400, [(b"x-length", b"%d" % len(body))], b"[%d]" % len(body))
        return ServerResponse(202, [], b"")


def converse(client: H2ClientSession, server: H2ServerSession, now: float) -> list[ClientEvent]:
    """Carry bytes both ways until both sides are quiet."""
    events: list[ClientEvent] = []
    for _ in range(1000):
        out = client.data_to_send()
        if out:
            server.receive_data(out, now)
        back = server.data_to_send()
        if back:
            events += client.receive_data(back, now)
        if not out and not back:
            return events
    raise AssertionError("the two sides never went quiet")


def test_against_our_server_many_bodies_through_small_windows() -> None:
    """Bodies of up to 300 KB through a server with 1,000-byte stream windows and 32 KiB
    frames: every body arrives whole, nothing broke the server's flow control."""
    limits = Limits(h2_initial_window_size=1000, h2_max_frame_size=32 * 1024)
    handler = Echo()
    server = H2ServerSession(handler, limits, "fp", 0.0)
    client = H2ClientSession(AUTHORITY, MIB)
    assert SessionChanged() in converse(client, server, 0.0)
    sizes = [0, 1, 999, 1000, 1001, 16_385, 65_536, 300_000, 7, 40_000]
    bodies = [bytes([65 + i]) * n for i, n in enumerate(sizes)]
    sids = [client.start_request(PATH, body, 1.0, 10.0) for body in bodies]
    assert client.active == len(sids)
    events = converse(client, server, 1.0)
    assert responses(events) == dict.fromkeys(sids, 202)
    assert sorted(handler.completed) == sorted((PATH, body) for body in bodies)
    assert client.active == 0 and client.usable and server.open_streams == 0


def test_against_our_server_error_response_ping_and_stream_limit() -> None:
    server = H2ServerSession(Echo(), Limits(), "fp", 0.0)
    client = H2ClientSession(AUTHORITY, MIB)
    converse(client, server, 0.0)
    assert client.capacity(1000) == Limits().h2_max_concurrent_streams  # from its SETTINGS
    sid = client.start_request(PATH, b"bad request body", 1.0, 10.0)
    ping = client.ping(1.0, 5.0)
    events = converse(client, server, 1.0)
    assert PingAnswered(ping) in events
    [got] = [e for e in events if isinstance(e, ResponseReceived)]
    assert got.request == sid and got.response.status == 400
    assert got.response.body == b"[16]" and got.response.header(b"x-length") == b"16"
    assert client.next_deadline() is None


def test_against_our_server_graceful_shutdown_lets_requests_in_flight_finish() -> None:
    handler = Echo()
    server = H2ServerSession(handler, Limits(), "fp", 0.0)
    client = H2ClientSession(AUTHORITY, MIB)
    converse(client, server, 0.0)
    sids = [client.start_request(PATH, b"[]", 1.0, 10.0) for _ in range(3)]
    server.receive_data(client.data_to_send(), 1.0)
    server.shutdown(1.0)
    events = converse(client, server, 1.0)
    assert responses(events) == dict.fromkeys(sids, 202)
    assert not client.usable
    with pytest.raises(ConnectionLost, match="GOAWAY"):
        client.start_request(PATH, b"[]", 1.1, 10.0)


# -- against h2's server --------------------------------------------------------------------------


def test_preface_settings_and_connection_window() -> None:
    client = H2ClientSession(AUTHORITY, 4 * MIB)
    data = client.data_to_send()
    assert data.startswith(H2_PREFACE)
    settings, window = frames_of(data[len(H2_PREFACE) :])
    assert isinstance(settings, SettingsFrame)
    assert settings.settings == {0x2: 0, 0x4: 4 * MIB}  # no push; a stream window for a body
    assert isinstance(window, WindowUpdateFrame) and window.stream_id == 0
    assert window.window_increment == 4 * MIB - 65_535


def data_frames(wire: bytes) -> list[DataFrame]:
    return [f for f in frames_of(wire) if isinstance(f, DataFrame)]


def test_body_blocked_on_a_zero_window_goes_out_as_settings_and_updates_allow() -> None:
    client, server = connected(INITIAL_WINDOW_SIZE=0)
    body = bytes(range(256)) * 400  # 102,400 bytes
    sid = client.start_request(PATH, body, 0.0, 10.0)
    server.take(client)
    assert server.bodies[sid] == b""  # HEADERS only: the stream window is 0
    server.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    client.receive_data(server.out(), 0.1)
    wire = client.data_to_send()
    assert [len(f.data) for f in data_frames(wire)] == [1000]
    server.h2.receive_data(wire)
    server.h2.increment_flow_control_window(30_000, stream_id=sid)
    client.receive_data(server.out(), 0.2)
    wire = client.data_to_send()
    assert [len(f.data) for f in data_frames(wire)] == [16_384, 13_616]  # frame size, window
    server.h2.receive_data(wire)
    # The connection window (65,535, never acknowledged) now bounds the rest.
    server.h2.increment_flow_control_window(100_000, stream_id=sid)
    client.receive_data(server.out(), 0.3)
    wire = client.data_to_send()
    assert sum(len(f.data) for f in data_frames(wire)) == 65_535 - 31_000
    server.h2.receive_data(wire)
    server.h2.increment_flow_control_window(100_000)
    client.receive_data(server.out(), 0.4)
    wire = client.data_to_send()
    last = data_frames(wire)[-1]
    assert "END_STREAM" in last.flags
    server.h2.receive_data(wire)
    assert sum(len(f.data) for f in data_frames(wire)) == len(body) - 65_535
    server.respond(sid)
    assert responses(client.receive_data(server.out(), 0.5)) == {sid: 202}


def test_bodies_use_the_servers_larger_frame_size_and_share_the_connection_window() -> None:
    client, server = connected(MAX_FRAME_SIZE=65_536, INITIAL_WINDOW_SIZE=200_000)
    first, second = (client.start_request(PATH, b"z" * 50_000, 0.0, 10.0) for _ in range(2))
    wire = client.data_to_send()
    sizes = {(f.stream_id, len(f.data)) for f in data_frames(wire)}
    assert sizes == {(first, 50_000), (second, 15_535)}  # 65,535 for the connection in all
    server.h2.receive_data(wire)
    server.h2.increment_flow_control_window(65_535)
    client.receive_data(server.out(), 0.1)
    rest = data_frames(client.data_to_send())
    assert [(f.stream_id, len(f.data), "END_STREAM" in f.flags) for f in rest] == [
        (second, 34_465, True)
    ]


def test_stream_window_is_the_servers_initial_window() -> None:
    client = H2ClientSession(AUTHORITY, MIB)
    assert client.stream_window == 65_535  # the default, before the server's SETTINGS
    client, _ = connected(INITIAL_WINDOW_SIZE=200_000)
    assert client.stream_window == 200_000
    sid = client.start_request(PATH, b"z" * 200_000, 0.0, 10.0)
    # A body of that size goes out at once (the connection window allowing).
    sent = sum(len(f.data) for f in data_frames(client.data_to_send()) if f.stream_id == sid)
    assert sent == 65_535  # here the connection window, never raised by this server, bounds it


def test_rst_stream_of_a_stream_still_sending_stops_its_body() -> None:
    client, server = connected(INITIAL_WINDOW_SIZE=10)
    sid = client.start_request(PATH, b"q" * 1000, 0.0, 10.0)
    server.take(client)
    server.h2.reset_stream(sid, ErrorCodes.ENHANCE_YOUR_CALM)
    events = client.receive_data(server.out(), 0.1)
    assert failures(events) == {sid: StreamRefused}
    [failed] = [e for e in events if isinstance(e, RequestFailed)]
    assert "ENHANCE_YOUR_CALM" in str(failed.error)
    client.data_to_send()  # what an update before the reset let out
    update = WindowUpdateFrame(sid, window_increment=1000).serialize()
    update += WindowUpdateFrame(0, window_increment=1000).serialize()
    assert client.receive_data(update, 0.2) == []  # late for the stream, nothing waits
    assert data_frames(client.data_to_send()) == []
    assert client.active == 0 and client.usable


def test_a_server_that_indexes_its_response_headers() -> None:
    """h2's encoder indexes fields; the later responses are mostly dynamic-table references,
    and a table size update midway evicts entries: every response still reads right."""
    client, server = connected()
    seen: list[Response] = []
    for i in range(12):
        if i == 6:
            server.h2.encoder.header_table_size = 80  # a size update leads the next block
        sid = client.start_request(PATH, b"[]", 0.0, 10.0)
        server.take(client)
        fields = [
            (b":status", b"503"),
            (b"retry-after", b"%d" % (i % 3)),
            (b"x-served-by", b"node-b"),
            (b"content-length", b"2"),
        ]
        server.h2.send_headers(sid, fields)
        server.h2.send_data(sid, b"[]", end_stream=True)
        wire = server.out()
        if i == 5:  # all four fields are in the table by now: four one-byte references
            [head] = [f for f in frames_of(wire) if isinstance(f, HeadersFrame)]
            assert len(head.data) == 4
        [got] = [e for e in client.receive_data(wire, 0.1) if isinstance(e, ResponseReceived)]
        seen.append(got.response)
    for i, response in enumerate(seen):
        assert response.status == 503 and response.body == b"[]"
        assert response.header(b"retry-after") == b"%d" % (i % 3)
        assert response.header(b"x-served-by") == b"node-b"


def test_response_headers_over_continuation_after_an_informational_response() -> None:
    client, server = connected()
    sid = client.start_request(PATH, b"[]", 0.0, 10.0)
    server.take(client)
    encoder = hpack.Encoder()
    early = HeadersFrame(sid, encoder.encode([(b":status", b"103")]), flags=["END_HEADERS"])
    block = encoder.encode([(b":status", b"202"), (b"x-long", b"v" * 300)])
    head = HeadersFrame(sid, block[:10], flags=["END_STREAM"])
    cont1 = ContinuationFrame(sid, block[10:100])
    cont2 = ContinuationFrame(sid, block[100:], flags=["END_HEADERS"])
    wire = b"".join(f.serialize() for f in (early, head, cont1, cont2))
    events: list[ClientEvent] = []
    for i in range(0, len(wire), 7):
        events += client.receive_data(wire[i : i + 7], 0.1)
    [got] = [e for e in events if isinstance(e, ResponseReceived)]
    assert got.response.status == 202 and got.response.header(b"x-long") == b"v" * 300


def test_long_request_block_is_split_into_continuation_frames() -> None:
    client, server = connected()
    path = "/v1/workloads/events?" + "p" * 20_000
    sid = client.start_request(path, b"[]", 0.0, 10.0)
    wire = client.data_to_send()
    kinds = [type(f).__name__ for f in frames_of(wire)]
    assert kinds == ["HeadersFrame", "ContinuationFrame", "DataFrame"]
    [req] = [e for e in server.h2.receive_data(wire) if isinstance(e, h2.events.RequestReceived)]
    assert req.stream_id == sid and dict(req.headers)[b":path"] == path.encode()
    server.respond(sid)
    assert responses(client.receive_data(server.out(), 0.1)) == {sid: 202}


def test_response_bodies_reopen_our_windows() -> None:
    """Six 300 KB response bodies (1.8 MB) through our 1 MiB windows: the server may send
    only what we reopen, and every body arrives whole."""
    client, server = connected()
    sids = [client.start_request(PATH, b"[]", 0.0, 10.0) for _ in range(6)]
    server.take(client)
    left = {sid: bytes([48 + sid % 10]) * 300_000 for sid in sids}
    for sid in sids:
        server.h2.send_headers(sid, [(b":status", b"200")])
    got: dict[int, bytes] = {}
    for _ in range(200):
        for sid in list(left):
            room = min(server.h2.local_flow_control_window(sid), 16_384)
            if room:
                chunk, left[sid] = left[sid][:room], left[sid][room:]
                server.h2.send_data(sid, chunk, end_stream=not left[sid])
                if not left[sid]:
                    del left[sid]
        for e in client.receive_data(server.out(), 0.1):
            if isinstance(e, ResponseReceived):
                got[e.request] = e.response.body
        server.take(client)  # our WINDOW_UPDATEs
        if not left:
            break
    assert got == {sid: bytes([48 + sid % 10]) * 300_000 for sid in sids}


def test_padded_data_counts_against_the_window_and_is_stripped() -> None:
    client, server = connected()
    sid = client.start_request(PATH, b"[]", 0.0, 10.0)
    server.take(client)
    server.h2.send_headers(sid, [(b":status", b"200")])
    server.h2.send_data(sid, b"body", end_stream=True, pad_length=40)
    assert responses(client.receive_data(server.out(), 0.1)) == {sid: 200}


def test_server_ping_is_answered_with_its_data() -> None:
    client, server = connected()
    server.h2.ping(b"12345678")
    assert client.receive_data(server.out(), 0.1) == []
    got = server.take(client)
    assert [e.ping_data for e in got if isinstance(e, h2.events.PingAckReceived)] == [b"12345678"]


def test_goaway_with_an_error_code_refuses_the_streams_above_its_last() -> None:
    client, server = connected()
    sids = [client.start_request(PATH, b"[]", 0.0, 10.0) for _ in range(4)]
    server.take(client)
    goaway = GoAwayFrame(0, last_stream_id=sids[1], error_code=ErrorCodes.ENHANCE_YOUR_CALM)
    goaway.additional_data = b"calm down"
    events = client.receive_data(goaway.serialize(), 0.1)
    assert failures(events) == dict.fromkeys(sids[2:], StreamRefused)
    assert not client.usable and client.active == 2
    for sid in sids[:2]:
        server.respond(sid)
    assert responses(client.receive_data(server.out(), 0.2)) == dict.fromkeys(sids[:2], 202)


# -- malformed server frames ----------------------------------------------------------------------

OK = encode_fields(((b":status", b"202"),))
INFO = encode_fields(((b":status", b"103"),))
WITH_LENGTH = encode_fields(((b":status", b"202"), (b"content-length", b"5")))
TWO_STATUSES = encode_fields(((b":status", b"202"), (b":status", b"200")))
NO_STATUS = encode_fields(((b"content-length", b"0"),))
UPPER_NAME = encode_fields(((b":status", b"202"), (b"X-Upper", b"1")))
CONNECTION_FIELD = encode_fields(((b":status", b"202"), (b"connection", b"close")))
PATH_IN_RESPONSE = encode_fields(((b":status", b"202"), (b":path", b"/")))


@pytest.mark.parametrize(
    ("wire", "code", "why"),
    [
        (raw(4, 0, 1), ErrorCodes.PROTOCOL_ERROR, "SETTINGS on a stream"),
        (raw(4, 0, 0, b"\x00\x04\x00"), ErrorCodes.FRAME_SIZE_ERROR, "6n"),
        (raw(4, 0, 0, b"\x00\x04\x80\x00\x00\x00"), ErrorCodes.FLOW_CONTROL_ERROR, "WINDOW"),
        (raw(4, 0, 0, b"\x00\x05\x00\x00\x00\x01"), ErrorCodes.PROTOCOL_ERROR, "MAX_FRAME"),
        (raw(4, 1, 0, b"\x00" * 6), ErrorCodes.FRAME_SIZE_ERROR, "ACK with a payload"),
        (raw(6, 0, 0, b"\x00" * 7), ErrorCodes.FRAME_SIZE_ERROR, "PING not 8"),
        (raw(6, 0, 1, b"\x00" * 8), ErrorCodes.PROTOCOL_ERROR, "PING on a stream"),
        (raw(8, 0, 0, b"\x00\x00\x00\x00"), ErrorCodes.PROTOCOL_ERROR, "WINDOW_UPDATE of 0"),
        (raw(8, 0, 1, b"\x00\x00\x00\x00"), ErrorCodes.PROTOCOL_ERROR, "WINDOW_UPDATE of 0"),
        (raw(8, 0, 0, b"\x7f\xff\xff\xff"), ErrorCodes.FLOW_CONTROL_ERROR, "over 2^31-1"),
        (raw(8, 0, 1, b"\x7f\xff\xff\xff"), ErrorCodes.FLOW_CONTROL_ERROR, "over 2^31-1"),
        (raw(8, 0, 0, b"\x00\x01"), ErrorCodes.FRAME_SIZE_ERROR, "not 4 octets"),
        (raw(8, 0, 9, b"\x00\x00\x00\x01"), ErrorCodes.PROTOCOL_ERROR, "idle stream 9"),
        (raw(1, 5, 3, OK), ErrorCodes.PROTOCOL_ERROR, "HEADERS on idle stream 3"),
        (raw(1, 5, 2, OK), ErrorCodes.PROTOCOL_ERROR, "HEADERS on idle stream 2"),
        (raw(1, 5, 0, OK), ErrorCodes.PROTOCOL_ERROR, "HEADERS on stream 0"),
        (raw(1, 5, 1, b"\xff\xff\xff\xff\xff"), ErrorCodes.COMPRESSION_ERROR, "integer"),
        (raw(1, 5, 1, b"\xbf"), ErrorCodes.COMPRESSION_ERROR, "past both tables"),
        (raw(1, 0xD, 1, b"\x10" + OK), ErrorCodes.PROTOCOL_ERROR, "padding longer"),
        (raw(1, 0x25, 1, b"\x00\x00"), ErrorCodes.FRAME_SIZE_ERROR, "priority cut short"),
        (raw(1, 5, 1, INFO), ErrorCodes.PROTOCOL_ERROR, "ended by a 103"),
        (raw(1, 5, 1, TWO_STATUSES), ErrorCodes.PROTOCOL_ERROR, "without a valid :status"),
        (raw(1, 5, 1, NO_STATUS), ErrorCodes.PROTOCOL_ERROR, "without a valid :status"),
        (raw(4, 0, 0, b"\x00\x02\x00\x00\x00\x01"), ErrorCodes.PROTOCOL_ERROR, "ENABLE_PUSH"),
        (raw(1, 5, 1, UPPER_NAME), ErrorCodes.PROTOCOL_ERROR, "bad field name"),
        (raw(1, 5, 1, CONNECTION_FIELD), ErrorCodes.PROTOCOL_ERROR, "connection-specific"),
        (raw(1, 5, 1, PATH_IN_RESPONSE), ErrorCodes.PROTOCOL_ERROR, "pseudo-header"),
        (raw(1, 4, 1, OK) + raw(1, 4, 1, OK), ErrorCodes.PROTOCOL_ERROR, "without END_STREAM"),
        (raw(1, 4, 1, WITH_LENGTH) + raw(0, 1, 1, b"abc"), ErrorCodes.PROTOCOL_ERROR, "length 5"),
        (raw(1, 0, 1, OK) + raw(6, 0, 0, b"\x00" * 8), ErrorCodes.PROTOCOL_ERROR, "inside"),
        (raw(9, 4, 1, OK), ErrorCodes.PROTOCOL_ERROR, "CONTINUATION out of"),
        (raw(1, 0, 1, OK) + raw(9, 4, 3, b""), ErrorCodes.PROTOCOL_ERROR, "CONTINUATION out of"),
        (raw(0, 1, 1, b"x"), ErrorCodes.PROTOCOL_ERROR, "DATA before the response HEADERS"),
        (raw(0, 1, 5, b"x"), ErrorCodes.PROTOCOL_ERROR, "DATA on idle stream 5"),
        (raw(0, 1, 0, b"x"), ErrorCodes.PROTOCOL_ERROR, "DATA on stream 0"),
        (raw(3, 0, 1, b"\x00\x00\x00"), ErrorCodes.FRAME_SIZE_ERROR, "RST_STREAM not 4"),
        (raw(3, 0, 0, b"\x00\x00\x00\x08"), ErrorCodes.PROTOCOL_ERROR, "RST_STREAM on stream 0"),
        (raw(3, 0, 7, b"\x00\x00\x00\x08"), ErrorCodes.PROTOCOL_ERROR, "idle stream 7"),
        (raw(7, 0, 1, b"\x00" * 8), ErrorCodes.PROTOCOL_ERROR, "GOAWAY on a stream"),
        (raw(7, 0, 0, b"\x00" * 7), ErrorCodes.FRAME_SIZE_ERROR, "GOAWAY frame too short"),
        (raw(5, 4, 1, b"\x00\x00\x00\x02" + OK), ErrorCodes.PROTOCOL_ERROR, "PUSH_PROMISE"),
        (raw(2, 0, 0, b"\x00" * 5), ErrorCodes.PROTOCOL_ERROR, "PRIORITY on stream 0"),
        (raw(2, 0, 1, b"\x00" * 4), ErrorCodes.FRAME_SIZE_ERROR, "PRIORITY not 5"),
    ],
)
def test_malformed_server_frames_end_the_connection_with_the_right_goaway(
    wire: bytes, code: ErrorCodes, why: str
) -> None:
    client, server = connected()
    sid = client.start_request(PATH, b"[]", 0.0, 10.0)
    assert sid == 1
    server.take(client)
    events = client.receive_data(wire, 0.1)
    assert failures(events) == {sid: ConnectionLost}
    ended = events[-1]
    assert isinstance(ended, ConnectionEnded) and ended.graceful
    assert ended.reason.startswith("protocol error:") and why in ended.reason
    [goaway] = frames_of(client.data_to_send())
    assert isinstance(goaway, GoAwayFrame) and goaway.error_code == code
    assert client.receive_data(raw(6, 0, 0, b"\x00" * 8), 0.2) == []  # over: nothing more


def test_the_servers_first_frame_must_be_settings() -> None:
    client = H2ClientSession(AUTHORITY, MIB)
    client.data_to_send()
    events = client.receive_data(PingFrame(0).serialize(), 0.0)
    ended = events[-1]
    assert isinstance(ended, ConnectionEnded) and "not a SETTINGS frame" in ended.reason


def test_unknown_frames_priority_and_late_frames_of_ended_streams_are_ignored() -> None:
    client, server = connected()
    sid = client.start_request(PATH, b"[]", 0.0, 10.0)
    server.take(client)
    server.respond(sid)
    assert responses(client.receive_data(server.out(), 0.1)) == {sid: 202}
    late = (
        raw(0xEE, 0, 0, b"whatever")
        + raw(2, 0, sid, b"\x00\x00\x00\x00\x10")
        + RstStreamFrame(sid, error_code=0).serialize()
        + WindowUpdateFrame(sid, window_increment=5).serialize()
        + raw(0, 1, sid, b"late")
    )
    assert client.receive_data(late, 0.2) == []
    assert client.usable and client.ended is None
    assert all(not isinstance(f, GoAwayFrame) for f in frames_of(client.data_to_send()))


def test_the_last_stream_id_is_used_then_the_session_takes_no_more() -> None:
    client, _ = connected()
    client._next_sid = 2**31 - 1  # a billion requests later
    sid = client.start_request(PATH, b"[]", 0.0, 10.0)
    assert sid == 2**31 - 1 and not client.usable
    with pytest.raises(ConnectionLost, match="stream ids used up"):
        client.start_request(PATH, b"[]", 0.0, 10.0)
    assert client.active == 1
