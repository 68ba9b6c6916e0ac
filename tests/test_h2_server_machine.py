"""The HTTP/2 server machine's own pieces fed bytes: HPACK, SETTINGS, frames, stream states.

No sockets, no event loop: :class:`H2ServerSession` gets bytes written by hand (or by the
``hpack`` package's encoder, the way a real client would write them) and its output is read
back with ``hyperframe``. Each RFC 9113 rule the session implements itself gets the error it
asks for: a connection error (GOAWAY with the code) or a stream error (RST_STREAM).
"""

from __future__ import annotations

import h2.config
import h2.connection
import hpack
import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import (
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvpair_wm.errors import H2ConnectionError, LocalProtocolError
from nvpair_wm.http.core import Limits, Request, Response
from nvpair_wm.proto.h1 import H1Session
from nvpair_wm.proto.h2 import H2_PREFACE, H2ServerSession
from nvpair_wm.proto.h2.hpack import Decoder, encode_fields
from nvpair_wm.proto.h2.streams import Stream, StreamEvent, StreamState
from tests.support.handlers import Recorder
from tests.support.raw_frames import (
    frames_of,
    raw,
)
from tests.support.transitions import StepTrace, reachable

FP = "ab" * 32


# -- HPACK: RFC 7541 Appendix C ------------------------------------------------------------------

C3 = [
    "828684410f7777772e6578616d706c652e636f6d",
    "828684be58086e6f2d6361636865",
    "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
]
C4 = [  # the same requests, Huffman-coded
    "828684418cf1e3c2e5f23a6ba0ab90f4ff",
    "828684be5886a8eb10649cbf",
    "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
]
REQUESTS = [
    [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b":authority", b"www.example.com"),
    ],
    [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b":authority", b"www.example.com"),
        (b"cache-control", b"no-cache"),
    ],
    [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":path", b"/index.html"),
        (b":authority", b"www.example.com"),
        (b"custom-key", b"custom-value"),
    ],
]
C5 = [  # responses through a 256-byte table: entries are evicted
    "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a323120474d54"
    "6e1768747470733a2f2f7777772e6578616d706c652e636f6d",
    "4803333037c1c0bf",
    "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738666f6f"
    "3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167653d333630303b2076"
    "657273696f6e3d31",
]
DATE1 = b"Mon, 21 Oct 2013 20:13:21 GMT"
DATE2 = b"Mon, 21 Oct 2013 20:13:22 GMT"
LOCATION = b"https://www.example.com"
COOKIE = b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"


@pytest.mark.parametrize("blocks", [C3, C4], ids=["C.3 plain", "C.4 Huffman"])
def test_hpack_request_vectors_decode_and_fill_the_dynamic_table(blocks: list[str]) -> None:
    d = Decoder(max_list=64 * 1024)
    sizes = []
    for block, expected in zip(blocks, REQUESTS, strict=True):
        assert d.decode(bytes.fromhex(block)) == expected
        sizes.append(d.table_size)
    assert sizes == [57, 110, 164]
    assert d.entries == [
        (b"custom-key", b"custom-value"),
        (b"cache-control", b"no-cache"),
        (b":authority", b"www.example.com"),
    ]


def test_hpack_response_vectors_evict_the_oldest_entries() -> None:
    d = Decoder(max_list=64 * 1024, max_table_size=256)
    first = d.decode(bytes.fromhex(C5[0]))
    assert first == [
        (b":status", b"302"),
        (b"cache-control", b"private"),
        (b"date", DATE1),
        (b"location", LOCATION),
    ]
    assert d.table_size == 222
    d.decode(bytes.fromhex(C5[1]))
    assert d.table_size == 222
    assert d.entries[0] == (b":status", b"307")
    assert (b":status", b"302") not in d.entries  # evicted to make room
    third = d.decode(bytes.fromhex(C5[2]))
    assert third == [
        (b":status", b"200"),
        (b"cache-control", b"private"),
        (b"date", DATE2),
        (b"location", LOCATION),
        (b"content-encoding", b"gzip"),
        (b"set-cookie", COOKIE),
    ]
    assert d.table_size == 215
    assert d.entries == [(b"set-cookie", COOKIE), (b"content-encoding", b"gzip"), (b"date", DATE2)]


def test_hpack_size_update_rules() -> None:
    d = Decoder(max_list=64 * 1024)
    d.decode(bytes.fromhex(C3[0]))
    assert d.table_size == 57
    # A size update to 0 at the start empties the table; then back to 4096.
    assert d.decode(b"\x20\x3f\xe1\x1f\x82") == [(b":method", b"GET")]
    assert d.table_size == 0 and d.max_table_size == 4096
    with pytest.raises(H2ConnectionError) as late:
        d.decode(b"\x82\x20")  # after a field
    assert late.value.code == ErrorCodes.COMPRESSION_ERROR
    with pytest.raises(H2ConnectionError) as big:
        d.decode(b"\x3f\xe2\x1f")  # 4097: over our SETTINGS_HEADER_TABLE_SIZE
    assert big.value.code == ErrorCodes.COMPRESSION_ERROR


def test_hpack_entry_bigger_than_the_table_empties_it() -> None:
    d = Decoder(max_list=64 * 1024, max_table_size=64)
    d.decode(b"\x40\x01a\x01b")  # 34 bytes
    assert d.table_size == 34
    d.decode(b"\x40\x01c\x1e" + b"d" * 30)  # 63 bytes: the first entry goes
    assert d.entries == [(b"c", b"d" * 30)]
    d.decode(b"\x40\x01e\x28" + b"f" * 40)  # 73 bytes > 64: the table is emptied
    assert d.entries == [] and d.table_size == 0


@pytest.mark.parametrize(
    ("block", "why"),
    [
        (b"\x80", "index 0"),
        (b"\xbe", "index past both tables"),
        (b"\xff\xff\xff\xff\xff\xff\x01", "integer overflow"),
        (b"\xff\x80", "integer cut short"),
        (b"\x00\x05ab", "string past the block"),
        (b"\x00\x81\xff", "Huffman EOS padding"),
        (b"\x00\x83\x49\x50\x90", "Huffman padded with zeros"),
    ],
)
def test_hpack_errors_are_compression_errors(block: bytes, why: str) -> None:
    with pytest.raises(H2ConnectionError) as err:
        Decoder(max_list=64 * 1024).decode(block)
    assert err.value.code == ErrorCodes.COMPRESSION_ERROR, why


def test_hpack_decoded_list_is_bounded() -> None:
    d = Decoder(max_list=1000)
    d.decode(b"\x40\x01x\x7f\x91\x02" + b"b" * 400)  # one 433-byte entry
    with pytest.raises(H2ConnectionError) as err:
        d.decode(b"\xbe\xbe\xbe")  # 3 x 433 decoded from 3 bytes
    assert err.value.code == ErrorCodes.ENHANCE_YOUR_CALM


def test_hpack_huffman_strings_decode_the_same_from_the_cache() -> None:
    d = Decoder(max_list=64 * 1024)
    block = hpack.Encoder().encode([(b"content-length", b"1234")], huffman=True)
    assert d.decode(block) == [(b"content-length", b"1234")]
    assert list(d._huffman.values()) == [b"1234"]  # remembered by its raw bytes
    again = hpack.Encoder().encode([(b"content-length", b"1234")], huffman=True)
    assert d.decode(again) == [(b"content-length", b"1234")]
    long_value = "v" * 200  # long strings are decoded, not remembered
    assert d.decode(hpack.Encoder().encode([("x-long", long_value)], huffman=True)) == [
        (b"x-long", long_value.encode())
    ]
    assert len(d._huffman) == 2  # the name x-long, not the value


def test_hpack_repeated_block_is_remembered_until_the_table_changes() -> None:
    d = Decoder(max_list=64 * 1024)
    d.decode(b"\x40\x01a\x01b")  # literal with indexing: (a, b) is index 62
    indexed = b"\x83\xbe"  # :method POST, then dynamic index 62
    first = d.decode(indexed)
    assert first == [(b":method", b"POST"), (b"a", b"b")]
    assert d.decode(indexed) is first  # the table did not change: remembered
    assert d.decode(bytearray(indexed)) == first  # type: ignore[arg-type]  # decoded, not looked up
    d.decode(b"\x40\x01c\x01d")  # (c, d) is index 62 now, (a, b) index 63
    assert d.decode(indexed) == [(b":method", b"POST"), (b"c", b"d")]
    d.decode(b"\x20")  # a size update to 0 empties the table
    with pytest.raises(H2ConnectionError) as err:
        d.decode(indexed)  # not answered from memory: index 62 is gone
    assert err.value.code == ErrorCodes.COMPRESSION_ERROR
    fresh = Decoder(max_list=64 * 1024)
    adding = b"\x40\x01e\x01f"  # a block that changes the table is never remembered
    fresh.decode(adding)
    fresh.decode(adding)
    assert fresh.entries == [(b"e", b"f"), (b"e", b"f")]


def test_response_encoder_is_plain_hpack_without_indexing() -> None:
    fields = ((b":status", b"202"), (b"content-length", b"0"), (b"x-custom", b"v"))
    block = encode_fields(fields)
    assert block[:1] == b"\x08"  # literal without indexing, name :status (static 8)
    peer = hpack.Decoder()
    assert peer.decode(block, raw=True) == list(fields)
    assert len(peer.header_table.dynamic_entries) == 0  # nothing indexed: no encoder state
    assert encode_fields(fields) is block  # repeated responses come from the cache


# -- the session, fed bytes ----------------------------------------------------------------------


REQUEST = [(":method", "POST"), (":scheme", "https"), (":path", "/e"), (":authority", "t")]


class Peer:
    """A client written by hand: a session, an HPACK encoder, and what came back."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.handler = Recorder()
        self.session = H2ServerSession(self.handler, limits or Limits(), FP, 0.0)
        self.encoder = hpack.Encoder()
        self.now = 1.0
        self.got: list[Frame] = []
        self.feed(H2_PREFACE + raw(4, 0, 0) + raw(4, 1, 0))

    def feed(self, data: bytes) -> list[Frame]:
        self.session.receive_data(data, self.now)
        new = frames_of(self.session.data_to_send())
        self.got += new
        return new

    def block(self, fields: list[tuple[str, str]]) -> bytes:
        return bytes(self.encoder.encode(fields))

    def headers(
        self, sid: int, fields: list[tuple[str, str]] | None = None, flags: int = 0x5
    ) -> bytes:
        return raw(1, flags, sid, self.block(REQUEST if fields is None else fields))

    def goaway(self) -> ErrorCodes:
        goaways = [f for f in self.got if isinstance(f, GoAwayFrame)]
        assert goaways, self.got
        assert self.session.closed
        return ErrorCodes(goaways[-1].error_code)

    def resets(self) -> list[tuple[int, ErrorCodes]]:
        return [
            (f.stream_id, ErrorCodes(f.error_code))
            for f in self.got
            if isinstance(f, RstStreamFrame)
        ]

    def statuses(self) -> list[tuple[int, bytes]]:
        decoder = hpack.Decoder()
        return [
            (f.stream_id, dict(decoder.decode(f.data, raw=True))[b":status"])
            for f in self.got
            if isinstance(f, HeadersFrame)
        ]


def test_server_preface_settings_then_window_and_acks() -> None:
    p = Peer()
    first, second = p.got[0], p.got[1]
    assert isinstance(first, SettingsFrame) and "ACK" not in first.flags
    assert first.settings[0x3] == 100 and first.settings[0x6] == 16 * 1024
    assert isinstance(second, WindowUpdateFrame) and second.stream_id == 0
    acks = [f for f in p.got if isinstance(f, SettingsFrame) and "ACK" in f.flags]
    assert len(acks) == 1  # our answer to the client's SETTINGS


def test_a_request_gets_202_and_the_body_reaches_the_handler() -> None:
    p = Peer()
    p.feed(p.headers(1, flags=0x4) + raw(0, 0x1, 1, b"{}"))
    assert p.statuses() == [(1, b"202")]
    assert p.handler.completed == [("/e", b"{}")]
    assert p.session.open_streams == 0


@pytest.mark.parametrize("window", [64 * 1024 - 1, 4096])
@pytest.mark.parametrize("declared", [True, False])
def test_a_body_in_its_one_frame_equals_a_body_buffered(
    declared: bool, window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shortcut for a body that comes whole in the DATA frame ending the stream (handed
    on without the stream's buffer) against the general path (the same body ended by an empty
    DATA frame, or split in two): the same bodies reach the handler, the same answers and the
    same window credit go out, nothing stays buffered. With the small window a 3000-byte body
    is over half of it: even in one frame it takes the general path (its window is settled)."""
    whole: list[bool] = []  # per request: did the body skip the buffer (the shortcut)?
    on_end = H2ServerSession._on_end

    def spy(self: H2ServerSession, st: Stream, body: bytes | None = None) -> None:
        whole.append(body is not None)
        on_end(self, st, body)

    monkeypatch.setattr(H2ServerSession, "_on_end", spy)
    bodies = [b"{}", b"", b'{"k":"' + b"v" * 3000 + b'"}']
    if window > 4096:
        bodies.append(b"x" * 12_000)
    results = []
    for shape in ("one frame", "then empty END_STREAM", "split in two"):
        p = Peer(Limits(h2_initial_window_size=window))
        for i, body in enumerate(bodies):
            sid = 1 + 2 * i
            fields = [*REQUEST, ("content-length", str(len(body)))] if declared else REQUEST
            # HEADERS in a read of its own: with its DATA in the same read a request takes
            # the whole-request path (compared with this one in test_whole_request_*).
            p.feed(p.headers(sid, fields, flags=0x4))
            if shape == "one frame":
                wire = raw(0, 0x1, sid, body)
            elif shape == "then empty END_STREAM":
                wire = raw(0, 0x0, sid, body) + raw(0, 0x1, sid)
            else:
                half = len(body) // 2
                wire = raw(0, 0x0, sid, body[:half]) + raw(0, 0x1, sid, body[half:])
            p.feed(wire)
        assert p.session.open_streams == 0
        assert p.session._windows.buffered == 0
        credit = sum(f.window_increment for f in p.got if isinstance(f, WindowUpdateFrame))
        results.append((p.handler.completed, p.statuses(), credit))
    assert results[0][0] == [("/e", body) for body in bodies]
    assert results[0] == results[1] == results[2]
    n = len(bodies)
    # The shortcut took every one-frame body with a content-length (what peers send) but one
    # over half the small window, and in the other shapes only an empty body (nothing buffered
    # when its empty END_STREAM came).
    assert whole[:n] == [(declared or not b) and (window > 4096 or len(b) < 2048) for b in bodies]
    assert whole[n:] == [not b for b in bodies] * 2


def test_a_repeated_header_block_is_parsed_once_and_still_checked() -> None:
    p = Peer()
    seen: list[Request] = []
    p.handler.head = seen.append  # type: ignore[method-assign,assignment]
    fields = [*REQUEST, ("content-length", "2")]
    for sid in (1, 3, 5):  # the encoder indexes the fields once: blocks 2 and 3 are alike
        p.feed(p.headers(sid, fields, flags=0x4) + raw(0, 0x1, sid, b"{}"))
    assert p.statuses() == [(1, b"202"), (3, b"202"), (5, b"202")]
    assert seen[1] is seen[2]  # one Request for the repeated block
    assert seen[2].content_length == 2 and seen[2].path == "/e"
    p.feed(p.headers(7, fields, flags=0x4) + raw(0, 0x1, 7, b"{}x"))  # longer than declared
    assert p.resets() == [(7, ErrorCodes.PROTOCOL_ERROR)]
    assert len(p.handler.completed) == 3


@pytest.mark.parametrize(("second", "status"), [("2", b"202"), ("3", b"400")])
def test_repeated_content_length_must_agree_as_in_http1(second: str, status: bytes) -> None:
    """Repeated content-length fields count once when they agree and get 400 when they
    differ: the rule of HTTP/1.1 here (``h1parse``, RFC 9110 §8.6), not first-wins."""
    p = Peer()
    fields = [*REQUEST, ("content-length", "2"), ("content-length", second)]
    p.feed(p.headers(1, fields, flags=0x4) + raw(0, 0x1, 1, b"{}"))
    assert p.statuses() == [(1, status)]
    assert len(p.handler.completed) == (1 if status == b"202" else 0)
    wire = f"POST /e HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: {second}\r\n"
    h1 = H1Session(p.handler, Limits(), FP, 0.0)
    h1.receive_data(wire.encode() + b"\r\n{}", 0.0)
    assert h1.data_to_send().split(b" ")[1] == status


@pytest.mark.parametrize(
    ("payload", "flags", "code"),
    [
        (b"\x00\x02\x00\x00\x00\x02", 0, ErrorCodes.PROTOCOL_ERROR),  # ENABLE_PUSH 2
        (b"\x00\x04\x80\x00\x00\x00", 0, ErrorCodes.FLOW_CONTROL_ERROR),  # window 2^31
        (b"\x00\x05\x00\x00\x3f\xff", 0, ErrorCodes.PROTOCOL_ERROR),  # frame size 16383
        (b"\x00\x05\x01\x00\x00\x00", 0, ErrorCodes.PROTOCOL_ERROR),  # frame size 2^24
        (b"\x00\x03\x00", 0, ErrorCodes.FRAME_SIZE_ERROR),  # length not 6n
        (b"\x00\x03\x00\x00\x00\x64", 1, ErrorCodes.FRAME_SIZE_ERROR),  # ACK with a payload
    ],
)
def test_settings_errors(payload: bytes, flags: int, code: ErrorCodes) -> None:
    p = Peer()
    p.feed(raw(4, flags, 0, payload))
    assert p.goaway() == code


def test_settings_unknown_ids_are_ignored_and_acked() -> None:
    p = Peer()
    new = p.feed(raw(4, 0, 0, b"\x00\x99\x00\x00\x00\x01"))
    assert [type(f) for f in new] == [SettingsFrame] and "ACK" in new[0].flags


def test_ping_acked_and_checked() -> None:
    p = Peer()
    (pong,) = p.feed(raw(6, 0, 0, b"abcdefgh"))
    assert isinstance(pong, PingFrame) and "ACK" in pong.flags and pong.opaque_data == b"abcdefgh"
    assert p.feed(raw(6, 1, 0, b"abcdefgh")) == []  # an ACK is not answered
    p.feed(raw(6, 0, 0, b"abcdefg"))
    assert p.goaway() == ErrorCodes.FRAME_SIZE_ERROR
    q = Peer()
    q.feed(raw(6, 0, 1, b"abcdefgh"))
    assert q.goaway() == ErrorCodes.PROTOCOL_ERROR


def test_window_update_errors_by_scope() -> None:
    p = Peer()
    p.feed(p.headers(1, flags=0x4))  # open, body pending
    p.feed(raw(8, 0, 1, b"\x00\x00\x00\x00"))  # 0 on a stream: stream error
    assert p.resets() == [(1, ErrorCodes.PROTOCOL_ERROR)]
    p.feed(p.headers(3, flags=0x4))
    p.feed(raw(8, 0, 3, b"\x7f\xff\xff\xff"))
    assert p.resets()[-1] == (3, ErrorCodes.FLOW_CONTROL_ERROR)
    assert not p.session.closed
    p.feed(raw(8, 0, 0, b"\x7f\xff\xff\xff"))  # connection window over 2^31-1
    assert p.goaway() == ErrorCodes.FLOW_CONTROL_ERROR
    q = Peer()
    q.feed(raw(8, 0, 0, b"\x00\x00\x00\x00"))
    assert q.goaway() == ErrorCodes.PROTOCOL_ERROR
    r = Peer()
    r.feed(raw(8, 0, 0, b"\x00\x00\x01"))
    assert r.goaway() == ErrorCodes.FRAME_SIZE_ERROR
    s = Peer()
    s.feed(raw(8, 0, 5, b"\x00\x00\x00\x01"))  # idle stream
    assert s.goaway() == ErrorCodes.PROTOCOL_ERROR


def test_rst_stream_and_priority_rules() -> None:
    p = Peer()
    p.feed(raw(2, 0, 9, b"\x00\x00\x00\x00\x10"))  # PRIORITY on an idle stream: fine
    p.feed(raw(2, 0, 11, b"\x00\x00\x00\x0b\x10"))  # depends on itself
    p.feed(raw(2, 0, 13, b"\x00\x00\x00\x00"))  # 4 octets
    assert p.resets() == [(11, ErrorCodes.PROTOCOL_ERROR), (13, ErrorCodes.FRAME_SIZE_ERROR)]
    assert not p.session.closed
    p.feed(raw(3, 0, 21, b"\x00\x00\x00\x08"))  # RST_STREAM on an idle stream
    assert p.goaway() == ErrorCodes.PROTOCOL_ERROR
    q = Peer()
    q.feed(q.headers(1, flags=0x4) + raw(3, 0, 1, b"\x00\x00\x08"))
    assert q.goaway() == ErrorCodes.FRAME_SIZE_ERROR


def test_frames_before_an_oversized_one_in_the_same_read_are_handled_first() -> None:
    """A frame header announcing more than our MAX_FRAME_SIZE is a FRAME_SIZE_ERROR known
    from the header alone (§4.2), whether it comes whole in a read or in pieces; the frames
    before it in the same read are still handled (the request answered) before the GOAWAY."""
    oversized = (16 * 1024 + 1).to_bytes(3, "big") + b"\x00\x00\x00\x00\x00\x03"
    for pieces in ([oversized], [oversized[:4], oversized[4:]]):
        p = Peer()
        p.feed(p.headers(1, flags=0x4) + raw(0, 0x1, 1, b"{}") + pieces[0])
        for piece in pieces[1:]:
            assert not p.session.closed  # an incomplete header is held, not judged
            p.feed(piece)
        assert p.statuses() == [(1, b"202")]
        assert p.handler.completed == [("/e", b"{}")]
        assert p.goaway() == ErrorCodes.FRAME_SIZE_ERROR


def test_headers_padding_priority_and_continuation() -> None:
    p = Peer()
    block = p.block(REQUEST)
    padded = b"\x03" + b"\x00\x00\x00\x00\x10" + block + b"\x00" * 3  # PADDED + PRIORITY
    p.feed(raw(1, 0x1 | 0x4 | 0x8 | 0x20, 1, padded))
    half = len(block) // 2
    block3 = p.block(REQUEST)
    p.feed(raw(1, 0x1, 3, block3[:half]) + raw(9, 0x4, 3, block3[half:]))
    assert p.statuses() == [(1, b"202"), (3, b"202")]
    p.feed(raw(1, 0x1 | 0x4 | 0x8, 5, b"\x10" + p.block(REQUEST)))  # pad longer than the frame
    assert p.goaway() == ErrorCodes.PROTOCOL_ERROR


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        (lambda p: p.headers(1, flags=0x1) + raw(0, 0, 1, b"x"), ErrorCodes.PROTOCOL_ERROR),
        (lambda p: p.headers(1, flags=0x1) + raw(9, 0x4, 3, b""), ErrorCodes.PROTOCOL_ERROR),
        (lambda p: raw(9, 0x4, 1, p.block(REQUEST)), ErrorCodes.PROTOCOL_ERROR),
        (lambda p: p.headers(2), ErrorCodes.PROTOCOL_ERROR),
        (lambda p: p.headers(5) + p.headers(3), ErrorCodes.PROTOCOL_ERROR),
        (lambda p: raw(0, 1, 1, b"x"), ErrorCodes.PROTOCOL_ERROR),  # DATA on idle
        (lambda p: raw(0, 1, 0, b"x"), ErrorCodes.PROTOCOL_ERROR),  # DATA on stream 0
        (lambda p: raw(5, 4, 1, b"\x00\x00\x00\x02"), ErrorCodes.PROTOCOL_ERROR),  # PUSH_PROMISE
        (lambda p: raw(7, 0, 1, b"\x00" * 8), ErrorCodes.PROTOCOL_ERROR),  # GOAWAY on a stream
        (lambda p: p.headers(1) + raw(0, 1, 1, b"x"), ErrorCodes.STREAM_CLOSED),  # after END both
        (lambda p: p.headers(1) + p.headers(1), ErrorCodes.STREAM_CLOSED),
        (lambda p: raw(1, 5, 1, p.block(REQUEST) + b"\xfe"), ErrorCodes.COMPRESSION_ERROR),
        (lambda p: raw(1, 5, 1, p.block(REQUEST) + b"\x21"), ErrorCodes.COMPRESSION_ERROR),
        # An even stream is one only a server opens: idle for ever here (5.1, found by h2).
        (lambda p: p.headers(3) + raw(0, 1, 2, b"x"), ErrorCodes.PROTOCOL_ERROR),
        (lambda p: p.headers(3) + raw(3, 0, 2, b"\0\0\0\x08"), ErrorCodes.PROTOCOL_ERROR),
        (lambda p: p.headers(3) + raw(8, 0, 2, b"\0\0\0\x01"), ErrorCodes.PROTOCOL_ERROR),
        # Stream 1 was never opened: our reset of its DATA does not open it (5.1.1).
        (lambda p: p.headers(3) + raw(0, 0, 1, b"x") + p.headers(1), ErrorCodes.PROTOCOL_ERROR),
    ],
    ids=[
        "DATA inside a header block",
        "CONTINUATION of another stream",
        "CONTINUATION without HEADERS",
        "even stream id",
        "decreasing stream id",
        "DATA on an idle stream",
        "DATA on stream 0",
        "PUSH_PROMISE from a client",
        "GOAWAY on a stream",
        "DATA after END_STREAM both ways",
        "HEADERS after END_STREAM both ways",
        "HPACK index past both tables",
        "HPACK size update after a field",
        "DATA on an even stream below the highest",
        "RST_STREAM on an even stream below the highest",
        "WINDOW_UPDATE on an even stream below the highest",
        "HEADERS opening a stream reset before it opened",
    ],
)
def test_connection_errors(frames: object, code: ErrorCodes) -> None:
    p = Peer()
    assert callable(frames)
    p.feed(frames(p))
    assert p.goaway() == code


def test_stream_state_errors_leave_the_connection_up() -> None:
    p = Peer()
    p.feed(p.headers(1, flags=0x4) + raw(3, 0, 1, b"\x00\x00\x00\x08"))  # peer resets 1
    p.feed(raw(0, 1, 1, b"x"))  # DATA after the peer's RST_STREAM
    p.feed(p.headers(3, flags=0x5))  # half-closed (remote), answered at once: closed
    p.feed(p.headers(5, [*REQUEST, ("content-length", "5")], flags=0x4))
    p.feed(raw(0, 1, 5, b"abc"))  # shorter than content-length
    assert p.resets() == [(1, ErrorCodes.STREAM_CLOSED), (5, ErrorCodes.PROTOCOL_ERROR)]
    before = len(p.got)
    p.feed(raw(0, 1, 5, b"late"))  # after our own RST_STREAM: dropped silently
    assert len(p.got) == before
    assert not p.session.closed


@pytest.mark.parametrize(
    "fields",
    [
        [*REQUEST, ("X-Upper", "a")],
        [*REQUEST, (":status", "200")],
        [*REQUEST, (":unknown", "a")],
        [("x-a", "b"), *REQUEST],
        [*REQUEST, ("connection", "keep-alive")],
        [*REQUEST, ("te", "gzip")],
        [*REQUEST, ("x-a", " padded")],
        [f for f in REQUEST if f[0] != ":path"],
        [f for f in REQUEST if f[0] != ":scheme"],
        [*REQUEST[:2], (":path", ""), REQUEST[3]],
        [*REQUEST, (":method", "GET")],
    ],
    ids=[
        "uppercase",
        ":status",
        "unknown pseudo",
        "pseudo after regular",
        "connection",
        "te gzip",
        "whitespace",
        "no :path",
        "no :scheme",
        "empty :path",
        "duplicate :method",
    ],
)
def test_malformed_requests_are_stream_errors(fields: list[tuple[str, str]]) -> None:
    p = Peer()
    p.feed(p.headers(1, fields))
    assert p.resets() == [(1, ErrorCodes.PROTOCOL_ERROR)]
    p.feed(p.headers(3, [*REQUEST, ("te", "trailers")]))  # the next one is served
    assert p.statuses() == [(3, b"202")]
    assert p.handler.completed == [("/e", b"")]


def test_trailers_end_the_request_and_bad_trailers_reset_it() -> None:
    p = Peer()
    p.feed(p.headers(1, flags=0x4) + raw(0, 0, 1, b"ab") + p.headers(1, [("x-t", "ok")]))
    assert p.handler.completed == [("/e", b"ab")]
    p.feed(p.headers(3, flags=0x4) + raw(1, 0x4, 3, p.block([("x-t", "ok")])))  # no END_STREAM
    p.feed(p.headers(5, flags=0x4) + p.headers(5, [(":method", "POST")]))
    assert p.resets() == [(3, ErrorCodes.PROTOCOL_ERROR), (5, ErrorCodes.PROTOCOL_ERROR)]


def test_padded_data_counts_padding_against_the_windows() -> None:
    p = Peer(Limits(h2_initial_window_size=100))  # Peer has acknowledged our SETTINGS
    p.feed(p.headers(1, flags=0x4) + raw(0, 0x8, 1, b"\x32" + b"x" * 40 + b"\x00" * 50))
    p.feed(raw(0, 0x1, 1, b""))
    assert p.resets() == []
    assert p.handler.completed == [("/e", b"x" * 40)]  # the padding is not body
    p.feed(p.headers(3, flags=0x4) + raw(0, 0x8, 3, b"\x5a" + b"x" * 10 + b"\x00" * 90))
    assert p.resets() == [(3, ErrorCodes.FLOW_CONTROL_ERROR)]  # 101 bytes through 100
    q = Peer(
        Limits(h2_max_frame_size=2**17, h2_initial_window_size=2**20, h2_connection_window=65535)
    )
    q.feed(q.headers(1, flags=0x4) + raw(0, 0, 1, b"x" * 70000))
    assert q.goaway() == ErrorCodes.FLOW_CONTROL_ERROR


def test_response_waits_for_the_peers_windows() -> None:
    class Big(Recorder):
        def complete(self, req: Request, body: bytes) -> Response:
            return Response(200, [], b"z" * 10)

    p = Peer()
    p.session = H2ServerSession(Big(), Limits(), FP, 0.0)
    p.encoder = hpack.Encoder()
    p.feed(H2_PREFACE + raw(4, 0, 0, b"\x00\x04\x00\x00\x00\x04") + raw(4, 1, 0))  # window 4
    new = p.feed(p.headers(1))
    assert [len(f.data) for f in new if isinstance(f, DataFrame)] == [4]
    assert p.session.next_deadline() is not None
    new = p.feed(raw(8, 0, 1, b"\x00\x00\x00\x03"))
    assert [len(f.data) for f in new if isinstance(f, DataFrame)] == [3]
    new = p.feed(raw(4, 0, 0, b"\x00\x04\x00\x00\x00\x07"))  # +3 for open streams (§6.9.2)
    data = [f for f in new if isinstance(f, DataFrame)]
    assert [len(f.data) for f in data] == [3] and "END_STREAM" in data[0].flags
    assert p.session.open_streams == 0


# -- stream states -------------------------------------------------------------------------------


def _next(state: StreamState, event: StreamEvent) -> StreamState | None:
    """The state ``event`` moves a stream in ``state`` to, or None when the table refuses it."""
    st = Stream(1, 0, 0)
    st.state = state
    try:
        return st.step(event)
    except LocalProtocolError:
        assert st.state is state  # a refused event changes nothing
        return None


def test_stream_transition_table_is_rfc_9113_server_side() -> None:
    """§5.1 from the server's side: the peer's END_STREAM once, our response started at most
    once and ended once, in either order; CLOSED only when both ends are done."""
    S, E = StreamState, StreamEvent
    assert reachable(S.OPEN, E, _next) == set(S)  # every state is reachable from a new stream
    for state in S:
        assert (_next(state, E.RECV_END_STREAM) is None) == state.request_whole
        responded = state.sending or state in (S.HALF_CLOSED_LOCAL, S.CLOSED)
        assert (_next(state, E.SEND_HEADERS) is None) == responded
        assert (_next(state, E.SEND_END_STREAM) is None) == (
            state in (S.HALF_CLOSED_LOCAL, S.CLOSED)
        )
        for event in E:
            after = _next(state, event)
            if after is not None:
                assert after.request_whole == (state.request_whole or event is E.RECV_END_STREAM)
                assert after.sending == (
                    event is E.SEND_HEADERS or (state.sending and event is E.RECV_END_STREAM)
                )
    assert [e for e in E if _next(S.CLOSED, e) is not None] == []


def test_stream_states_of_a_response_waiting_for_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Big(Recorder):
        def complete(self, req: Request, body: bytes) -> Response:
            return Response(200, [], b"z" * 10)

    trace = StepTrace(monkeypatch, Stream)
    S, E = StreamState, StreamEvent
    p = Peer()
    p.session = H2ServerSession(Big(), Limits(), FP, 0.0)
    p.feed(H2_PREFACE + raw(4, 0, 0, b"\x00\x04\x00\x00\x00\x04") + raw(4, 1, 0))  # window 4
    p.feed(p.headers(1))  # END_STREAM: the request is whole; 4 of 10 bytes go out
    assert trace.steps == [
        (1, S.OPEN, E.RECV_END_STREAM, S.HALF_CLOSED_REMOTE),
        (1, S.HALF_CLOSED_REMOTE, E.SEND_HEADERS, S.HALF_CLOSED_REMOTE_RESPONDING),
    ]
    p.feed(raw(8, 0, 1, b"\x00\x00\x00\x06") + raw(8, 0, 0, b"\x00\x00\x00\x06"))
    assert trace.steps[2:] == [(1, S.HALF_CLOSED_REMOTE_RESPONDING, E.SEND_END_STREAM, S.CLOSED)]
    assert p.session.open_streams == 0


def test_stream_states_of_an_early_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """413 before the body (its content-length is over the limit): our response first, the
    body read and dropped, then the peer's END_STREAM closes the stream."""
    trace = StepTrace(monkeypatch, Stream)
    S, E = StreamState, StreamEvent
    p = Peer()
    over = str(p.handler.max_body + 1)
    p.feed(p.headers(1, [*REQUEST, ("content-length", over)], flags=0x4))
    assert p.statuses() == [(1, b"413")]
    assert trace.steps == [
        (1, S.OPEN, E.SEND_HEADERS, S.OPEN_RESPONDING),
        (1, S.OPEN_RESPONDING, E.SEND_END_STREAM, S.HALF_CLOSED_LOCAL),  # its body fit
    ]
    p.feed(raw(0, 0, 1, b"x" * 1000))
    assert p.session.open_streams == 1  # still receiving (to drop it)
    p.feed(raw(0, 0x1, 1, b""))
    assert trace.steps[2:] == [(1, S.HALF_CLOSED_LOCAL, E.RECV_END_STREAM, S.CLOSED)]
    assert p.session.open_streams == 0 and p.handler.completed == []


def test_data_on_a_half_closed_remote_stream_is_a_stream_error() -> None:
    class Big(Recorder):
        def complete(self, req: Request, body: bytes) -> Response:
            return Response(200, [], b"z" * 10)

    p = Peer()
    p.session = H2ServerSession(Big(), Limits(), FP, 0.0)
    p.feed(H2_PREFACE + raw(4, 0, 0, b"\x00\x04\x00\x00\x00\x00") + raw(4, 1, 0))  # window 0
    p.feed(p.headers(1))  # END_STREAM; the response waits for window
    assert p.session.open_streams == 1
    p.feed(raw(0, 0, 1, b"x"))
    assert p.resets() == [(1, ErrorCodes.STREAM_CLOSED)]
    assert p.session.open_streams == 0 and not p.session.closed


def test_streams_over_the_limit_are_refused() -> None:
    p = Peer(Limits(h2_max_concurrent_streams=2))
    p.feed(p.headers(1, flags=0x4) + p.headers(3, flags=0x4) + p.headers(5, flags=0x4))
    assert p.resets() == [(5, ErrorCodes.REFUSED_STREAM)]
    assert p.session.open_streams == 2
    p.feed(raw(0, 1, 5, b"x"))  # in flight after the refusal: dropped
    assert p.resets() == [(5, ErrorCodes.REFUSED_STREAM)] and not p.session.closed


def test_unknown_frame_types_are_ignored() -> None:
    p = Peer()
    assert p.feed(raw(0xFA, 0, 0, b"abcd") + raw(0x10, 0xFF, 1, b"")) == []
    p.feed(p.headers(1))
    assert p.statuses() == [(1, b"202")]


def test_header_list_limits_431_and_hpack_bomb() -> None:
    p = Peer(Limits(max_header_bytes=200))
    p.feed(p.headers(1, [*REQUEST, ("x-big", "v" * 300)]))
    assert p.statuses() == [(1, b"431")]
    q = Peer(Limits(h2_max_decoded_header_list=2000))
    block = q.block([*REQUEST, ("x-bomb", "b" * 500)]) + b"\xbe" * 10
    q.feed(raw(1, 5, 1, block))
    assert q.goaway() == ErrorCodes.ENHANCE_YOUR_CALM


def test_big_responses_follow_the_peers_frame_size() -> None:
    """A header block over the peer's MAX_FRAME_SIZE goes out as HEADERS + CONTINUATION;
    DATA frames are cut to MAX_FRAME_SIZE too (and grow when the peer allows bigger ones)."""

    class Big(Recorder):
        def complete(self, req: Request, body: bytes) -> Response:
            return Response(200, [(b"x-big", b"h" * 40000)], b"z" * 40000)

    p = Peer()
    p.session = H2ServerSession(Big(), Limits(), FP, 0.0)
    p.feed(H2_PREFACE + raw(4, 0, 0) + raw(4, 1, 0))
    p.feed(raw(8, 0, 0, (100000).to_bytes(4, "big")))  # room beyond the 65,535 default
    new = p.feed(p.headers(1))
    kinds = [type(f).__name__ for f in new]
    assert kinds[:4] == ["HeadersFrame", "ContinuationFrame", "ContinuationFrame", "DataFrame"]
    assert "END_HEADERS" in new[2].flags and "END_HEADERS" not in new[0].flags
    block = b"".join(bytes(f.data) for f in new[:3])  # type: ignore[attr-defined]
    assert dict(hpack.Decoder().decode(block, raw=True))[b"x-big"] == b"h" * 40000
    sizes = [len(f.data) for f in new if isinstance(f, DataFrame)]
    assert sizes == [16384, 16384, 7232]
    q = Peer()
    q.session = H2ServerSession(Big(), Limits(), FP, 0.0)
    q.feed(H2_PREFACE + raw(4, 0, 0, b"\x00\x05\x00\x01\x00\x00") + raw(4, 1, 0))  # 65,536
    q.feed(raw(8, 0, 0, (100000).to_bytes(4, "big")))
    new = q.feed(q.headers(1))
    assert [len(f.data) for f in new if isinstance(f, DataFrame)] == [40000]
    assert [type(f).__name__ for f in new][:2] == ["HeadersFrame", "DataFrame"]


def test_bytes_fed_one_at_a_time_make_the_same_frames() -> None:
    """The preface, a request split over CONTINUATION, padded DATA: all fed byte by byte."""
    whole = Peer()
    enc = hpack.Encoder()
    block = bytes(enc.encode(REQUEST))
    stream = (
        raw(1, 0x0, 1, block[:3])
        + raw(9, 0x4, 1, block[3:])
        + raw(0, 0x8, 1, b"\x02" + b"{}" + b"\x00\x00")
        + raw(0, 0x1, 1, b"")
        + raw(6, 0, 0, b"12345678")
    )
    whole.session.receive_data(stream, 1.0)
    expected = whole.session.data_to_send()
    fresh = H2ServerSession(Recorder(), Limits(), FP, 0.0)
    opening = H2_PREFACE + raw(4, 0, 0) + raw(4, 1, 0)
    for i in range(len(opening)):
        fresh.receive_data(opening[i : i + 1], 1.0)
    fresh.data_to_send()
    out = b""
    for i in range(len(stream)):
        fresh.receive_data(stream[i : i + 1], 1.0)
        out += fresh.data_to_send()
    assert out == expected
    assert [type(f).__name__ for f in frames_of(out)] == ["HeadersFrame", "PingFrame"]


def _valid_exchange() -> bytes:
    """Three requests as a real client writes them (h2 library), after the preface."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    for _ in range(3):
        sid = client.get_next_available_stream_id()
        client.send_headers(sid, [*REQUEST, ("content-length", "2")])
        client.send_data(sid, b"{}", end_stream=True)
    client.ping(b"abcdefgh")
    return client.data_to_send()


VALID = _valid_exchange()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6
    ),
    cut=st.integers(1, 64),
)
def test_mutated_byte_streams_never_escape_the_machine(
    edits: list[tuple[int, int]], cut: int
) -> None:
    """Whatever bytes arrive, the session answers with frames (or closes with GOAWAY): no
    exception reaches the driver, and what it sends parses as HTTP/2 frames."""
    data = bytearray(VALID)
    for pos, value in edits:
        data[pos] = value
    session = H2ServerSession(Recorder(), Limits(), FP, 0.0)
    out = b""
    for i in range(0, len(data), cut):
        session.receive_data(bytes(data[i : i + cut]), 1.0)
        out += session.data_to_send()
    session.handle_timeout(100.0)
    out += session.data_to_send()
    assert frames_of(out)
    assert session.open_streams <= 3


# -- the whole-request path against the general one -------------------------------------------


class _Scripted:
    """A handler that records every call and answers by path: early, with a body, or a bug."""

    max_body = 4096

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, object]] = []

    def head(self, req: Request) -> Response | None:
        self.calls.append(("head", req.path, (req.content_length, tuple(req.headers))))
        if req.path == "/early":
            return Response(403, [], b"no")
        if req.path == "/head-bug":
            raise RuntimeError("a bug of ours")
        return None

    def complete(self, req: Request, body: bytes) -> Response:
        self.calls.append(("complete", req.path, body))
        if req.path == "/body":
            return Response(200, [(b"x-a", b"1")], b"ok")
        if req.path == "/bug":
            raise RuntimeError("a bug of ours")
        return Response(202, [])


def _state(s: H2ServerSession) -> tuple[object, ...]:
    w, b = s._windows, s._budgets
    return (
        (w.conn_available, w.conn_owed, w.buffered),
        (b.resets.count, b.control.count, b.refused.count),
        dict(s._closed),
        {
            sid: (st.recv_window, st.send_window, st.received, st.mode)
            for sid, st in s._streams.items()
        },
        (s._highest, s.requests, s.closed, s._idle_since, s.next_deadline()),
    )


def _fields(
    path: str, length: int | None, extra: list[tuple[str, str]] | None = None
) -> list[tuple[str, str]]:
    fields = [(":method", "POST"), (":scheme", "https"), (":path", path), (":authority", "t")]
    if length is not None:
        fields.append(("content-length", str(length)))
    return fields + (extra or [])


# (name, path, declared content-length, body, DATA flags, whether the whole-request path
# serves it without a Stream, with one, or not at all: "fast", "stream", "general").
WHOLE_CASES = [
    ("202", "/e", 2, b"{}", 0x1, "fast"),
    ("202, no content-length", "/e", None, b'{"a":1}', 0x1, "fast"),
    ("202, empty body", "/e", 0, b"", 0x1, "fast"),
    ("answer with a body", "/body", 2, b"{}", 0x1, "stream"),
    ("complete() bug: 500", "/bug", 2, b"{}", 0x1, "stream"),
    ("content-length over the body", "/e", 5, b"{}", 0x1, "general"),
    ("content-length under the body", "/e", 1, b"{}", 0x1, "general"),
    ("body owing a stream WINDOW_UPDATE", "/e", 3000, b"x" * 3000, 0x1, "general"),
    ("body over max_body", "/e", None, b"x" * 4097, 0x1, "general"),
    ("declared over max_body", "/e", 5000, b"x" * 10, 0x1, "general"),
    ("early answer from head()", "/early", 2, b"{}", 0x1, "general"),
    ("head() bug: 500", "/head-bug", 2, b"{}", 0x1, "general"),
    ("DATA without END_STREAM", "/e", 2, b"{}", 0x0, "general"),
    ("padded DATA", "/e", 2, b"\x01{}\x00", 0x9, "general"),
    ("DATA with an undefined flag too", "/e", 2, b"{}", 0x3, "general"),
]


@pytest.mark.parametrize("case", WHOLE_CASES, ids=[case[0] for case in WHOLE_CASES])
def test_whole_request_in_one_read_equals_the_general_path(
    case: tuple[str, str, int | None, bytes, int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """HEADERS and DATA of each request in one read (the whole-request path where it applies)
    against the same frames in two reads (always the general path): the same handler calls,
    the same bytes out, the same windows, budgets, remembered streams and deadlines, request
    after request (two of the case, then a plain one), with a small stream window so that a
    2 KiB body owes a WINDOW_UPDATE. Which requests the path served, and how, is checked too."""
    _, path, declared, body, data_flags, expected = case
    served: list[tuple[bool, int]] = []  # per whole-request call: (both frames?, streams made)
    whole_request = H2ServerSession._whole_request

    def spy(self: H2ServerSession, sid: int, block: bytes, data: bytes) -> bool:
        before = made[0]
        result = whole_request(self, sid, block, data)
        served.append((result, made[0] - before))
        return result

    made = [0]
    stream_init = Stream.__init__

    def counting(self: Stream, sid: int, recv_window: int, send_window: int) -> None:
        made[0] += 1
        stream_init(self, sid, recv_window, send_window)

    monkeypatch.setattr(H2ServerSession, "_whole_request", spy)
    monkeypatch.setattr(Stream, "__init__", counting)
    requests = [(path, declared, body, data_flags)] * 2 + [("/e", 2, b"{}", 0x1)]
    results = []
    for one_read in (True, False):
        handler = _Scripted()
        session = H2ServerSession(handler, Limits(h2_initial_window_size=4096), FP, 0.0)
        encoder = hpack.Encoder()
        out = bytearray()
        states = []
        session.receive_data(H2_PREFACE + raw(4, 0, 0) + raw(4, 1, 0), 1.0)
        out += session.data_to_send()
        for i, (p, n, b, f) in enumerate(requests):
            sid = 1 + 2 * i
            headers = raw(1, 0x4, sid, bytes(encoder.encode(_fields(p, n))))
            data = raw(0, f, sid, b)
            now = 2.0 + i
            if one_read:
                session.receive_data(headers + data, now)
            else:
                session.receive_data(headers, now)
                session.receive_data(data, now)
            out += session.data_to_send()
            states.append(_state(session))
        results.append((handler.calls, bytes(out), states))
        if one_read:
            taken = list(served)
    assert results[0] == results[1]
    assert served[len(taken) :] == []  # two reads: the path never runs
    if expected == "general" and data_flags & ~0x1:
        assert taken == [(True, 0)]  # padded, or another flag: only the plain last one takes it
    elif expected == "general" and not data_flags & 0x1:
        # DATA without END_STREAM: not whole; the stream stays open, so neither is the next.
        assert taken == []
    elif expected == "general":
        assert [r for r, _ in taken] == [False, False, True]
    elif expected == "stream":
        assert taken == [(True, 1), (True, 1), (True, 0)]
    else:
        assert taken == [(True, 0)] * 3


def test_whole_request_path_is_not_taken_where_the_general_path_must_decide() -> None:
    """With another stream open, after GOAWAY, for a DATA frame on another stream or one cut
    short by the read, and for a malformed or 431 header list, the session answers as the
    general path does (compared frame by frame with the same bytes fed in two reads)."""

    def run(one_read: bool, limits: Limits, script: list[tuple[bytes, bytes]]) -> list[object]:
        handler = _Scripted()
        session = H2ServerSession(handler, limits, FP, 0.0)
        session.receive_data(H2_PREFACE + raw(4, 0, 0) + raw(4, 1, 0), 1.0)
        got: list[object] = [session.data_to_send()]
        for first, second in script:
            if first == b"goaway":
                session.shutdown(1.5)
                continue
            if one_read:
                session.receive_data(first + second, 2.0)
            else:
                session.receive_data(first, 2.0)
                if second:  # (b"" would be the peer's EOF)
                    session.receive_data(second, 2.0)
            got += [session.data_to_send(), _state(session)]
        got.append(handler.calls)
        return got

    enc = hpack.Encoder()

    def hdr(sid: int, fields: list[tuple[str, str]], flags: int = 0x4) -> bytes:
        return raw(1, flags, sid, bytes(enc.encode(fields)))

    # The encoder's dynamic table must be fed once per scenario: build each script once.
    scripts = [
        # a request still open (stream 1) when a whole one (stream 3) comes
        [
            (hdr(1, _fields("/e", 2)), b""),
            (hdr(3, _fields("/e", 2)), raw(0, 1, 3, b"{}")),
            (raw(0, 1, 1, b"{}"), b""),
        ],
        # DATA of another stream, and a DATA frame the read cuts short
        [
            (hdr(1, _fields("/e", 2)), raw(0, 1, 3, b"{}")),
            (hdr(5, _fields("/e", 2)), raw(0, 1, 5, b"{}")[:-1]),
            (b"}", b""),
        ],
        # malformed (uppercase name), then a header list over max_header_bytes (431)
        [
            (hdr(1, _fields("/e", 2, [("X-Up", "1")])), raw(0, 1, 1, b"{}")),
            (hdr(3, _fields("/e", 2, [("x-big", "v" * 9000)])), raw(0, 1, 3, b"{}")),
        ],
        # after a graceful GOAWAY a new stream is refused
        [
            (hdr(1, _fields("/e", 2)), raw(0, 1, 1, b"{}")),
            (b"goaway", b""),
            (hdr(3, _fields("/e", 2)), raw(0, 1, 3, b"{}")),
        ],
    ]
    for script in scripts:
        limits = Limits(max_header_bytes=8192)
        assert run(True, limits, script) == run(False, limits, script)
