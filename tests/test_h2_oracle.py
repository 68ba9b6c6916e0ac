"""h2 as the oracle: our HTTP/2 sessions and the h2 library fed the same bytes (issue 20, item 4).

The design names h2; our own session machines replaced it on the wire for speed, so h2 is the
reference they are checked against. A seeded generator writes a client's byte stream: valid
requests in every framing shape (one frame, HEADERS then DATA, CONTINUATION, padding, priority,
trailers) mixed with mutated frames: odd types and flags, stream ids that are zero, even, idle,
reused or closed, wrong lengths, padding longer than the frame, HPACK garbage, window
overflows, CONTINUATION runs and interruptions, bad SETTINGS, resets. Each stream goes, item
by item, to our :class:`~nvpair_wm.proto.h2.H2ServerSession` and to h2's ``H2Connection``
(server side, answering 202 to each request as our handler does), and after every item their
verdicts are compared:

* requests accepted: the same method, path, header fields and body, in the same order;
* streams reset: the same stream ids with the same error codes;
* the connection ended: with the same error code (the sequence stops there).

The client side is the same with the roles swapped: a server's byte stream (responses in every
shape, mutated frames) to our :class:`~nvpair_wm.proto.h2.client.H2ClientSession` and to h2's
client ``H2Connection``, both having sent the same requests; verdicts: responses accepted (status,
header fields, body), streams failed, the connection ended with which code.

Where the two may differ, RFC 9113 allows it; every such difference is in :data:`SERVER_DIFFERENCES`
or :data:`CLIENT_DIFFERENCES` with its section, matched by what each side said (never by which
mutation was made), so a new kind of disagreement fails the test. ``make fuzz SEED=.. N=..``
runs more sequences than ``make test`` does (``H2_ORACLE_SEED``, ``H2_ORACLE_N``).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import Frame, GoAwayFrame, RstStreamFrame

from nvpair_wm.http.core import Limits, Request, Response, empty_response
from nvpair_wm.proto.exchanges import RequestFailed, ResponseReceived
from nvpair_wm.proto.h2 import H2_PREFACE, H2ServerSession
from nvpair_wm.proto.h2.client import H2ClientSession

SEED: Final = int(os.environ.get("H2_ORACLE_SEED", "9113"))
N: Final = int(os.environ.get("H2_ORACLE_N", "2000"))
FP: Final = "ab" * 32
# The flood budgets are ours alone (h2 has none): set out of reach of one sequence's frames.
LIMITS: Final = Limits(
    h2_max_resets_per_window=10_000,
    h2_max_control_frames_per_window=10_000,
    h2_max_refused_per_window=10_000,
)

Fields = list[tuple[bytes, bytes]]


def raw(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((ftype, flags)) + sid.to_bytes(4, "big") + payload
    )


def frames_of(data: bytes) -> list[Frame]:
    out: list[Frame] = []
    while len(data) >= 9:
        f, length = Frame.parse_frame_header(memoryview(data[:9]))
        f.parse_body(memoryview(data[9 : 9 + length]))
        out.append(f)
        data = data[9 + length :]
    return out


# -- verdicts -------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """What one side made of one item's bytes."""

    accepted: list[tuple[bytes, bytes, Fields, bytes]] = field(default_factory=list)
    resets: list[tuple[int, int]] = field(default_factory=list)
    error: int | None = None  # the connection ended with this code
    reason: str = ""  # why, as the side said it (not compared: the rules below read it)
    ended_by_peer: bool = False  # the peer's GOAWAY ended it
    reset_before: frozenset[int] = frozenset()  # streams this side reset in earlier items
    failed: list[int] = field(default_factory=list)  # client side: requests that failed

    @property
    def over(self) -> bool:
        return self.error is not None or self.ended_by_peer

    def __str__(self) -> str:
        accepted = [(m, p, b) for m, p, _, b in self.accepted]
        code = None if self.error is None else ErrorCodes(self.error).name
        resets = [(sid, _name(c)) for sid, c in self.resets]
        return (
            f"accepted={accepted} resets={resets} error={code} peer_goaway={self.ended_by_peer}"
            f" failed={self.failed}"
        )


def _name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return hex(code)


class _Recorder:
    """Our handler: 202 for every request, each recorded."""

    max_body = 1024 * 1024

    def __init__(self) -> None:
        self.completed: list[tuple[Request, bytes]] = []

    def head(self, req: Request) -> Response | None:
        return None

    def complete(self, req: Request, body: bytes) -> Response:
        self.completed.append((req, body))
        return empty_response(202)


class Ours:
    """Our server session, with what it said so far."""

    def __init__(self) -> None:
        self.handler = _Recorder()
        self.session = H2ServerSession(self.handler, LIMITS, FP, 0.0)
        self.session.data_to_send()
        self.reset: set[int] = set()

    def feed(self, data: bytes) -> Verdict:
        seen = len(self.handler.completed)
        self.session.receive_data(data, 1.0)
        verdict = Verdict(reset_before=frozenset(self.reset))
        for req, body in self.handler.completed[seen:]:
            regular = [(k, v) for k, v in req.headers if k != b"host"]
            verdict.accepted.append((req.method.encode(), req.path.encode(), regular, body))
        for f in frames_of(self.session.data_to_send()):
            if isinstance(f, RstStreamFrame) and f.error_code != ErrorCodes.NO_ERROR:
                verdict.resets.append((f.stream_id, f.error_code))
                self.reset.add(f.stream_id)
            elif isinstance(f, GoAwayFrame) and f.error_code != ErrorCodes.NO_ERROR:
                verdict.error = f.error_code
                verdict.reason = f.additional_data.decode()
        if self.session.closed and verdict.error is None:
            verdict.ended_by_peer = True
        return verdict


class _H2Side:
    """An h2 connection under comparison: its exceptions and its resets as a :class:`Verdict`;
    the subclass turns h2's events into the rest (``_on``)."""

    conn: h2.connection.H2Connection

    def feed(self, data: bytes) -> Verdict:
        verdict = Verdict()
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            verdict.error = int(exc.error_code)
            verdict.reason = str(exc)
            return verdict
        for event in events:
            self._on(event, verdict)
        for f in frames_of(self.conn.data_to_send()):
            if isinstance(f, RstStreamFrame) and f.error_code != ErrorCodes.NO_ERROR:
                verdict.resets.append((f.stream_id, f.error_code))
        verdict.failed.sort()
        return verdict

    def _on(self, event: h2.events.Event, verdict: Verdict) -> None:
        raise NotImplementedError


class Theirs(_H2Side):
    """h2's server connection, answering 202 to every request as our handler does."""

    def __init__(self) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.conn = h2.connection.H2Connection(config)
        self.conn.initiate_connection()
        self.conn.data_to_send()
        self.requests: dict[int, tuple[Fields, bytearray]] = {}

    def _on(self, event: h2.events.Event, verdict: Verdict) -> None:
        if isinstance(event, h2.events.RequestReceived):
            assert event.stream_id is not None and event.headers is not None
            headers = [(bytes(k), bytes(v)) for k, v in event.headers]
            self.requests[event.stream_id] = (headers, bytearray())
        elif isinstance(event, h2.events.DataReceived):
            assert event.stream_id is not None and event.data is not None
            self.requests[event.stream_id][1].extend(event.data)
            if event.flow_controlled_length:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            assert event.stream_id is not None
            headers, body = self.requests.pop(event.stream_id)
            pseudo = dict(f for f in headers if f[0].startswith(b":"))
            regular = [f for f in headers if not f[0].startswith(b":") and f[0] != b"host"]
            verdict.accepted.append((pseudo[b":method"], pseudo[b":path"], regular, bytes(body)))
            answer = [(b":status", b"202"), (b"content-length", b"0")]
            self.conn.send_headers(event.stream_id, answer, end_stream=True)
        elif isinstance(event, h2.events.StreamReset):
            assert event.stream_id is not None
            self.requests.pop(event.stream_id, None)
        elif isinstance(event, h2.events.ConnectionTerminated):
            verdict.ended_by_peer = True


# -- the client's byte streams --------------------------------------------------------------------

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20


class Client:
    """Writes one client's frames: its stream ids, its HPACK encoder, its open streams."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.encoder = hpack.Encoder()
        self.next_sid = 1
        self.open: list[int] = []  # the client has not ended them
        self.ended: list[int] = []  # the client ended them

    def new_sid(self) -> int:
        sid = self.next_sid
        self.next_sid += 2
        return sid

    def any_sid(self) -> int:
        """A stream id of any kind: 0, open, ended, idle, even."""
        choices = [0, self.next_sid, self.next_sid + 2, self.next_sid + 1]
        choices += self.open[-2:] + self.ended[-2:]
        return self.rng.choice(choices)

    def fields(self, body: bytes) -> Fields:
        rng = self.rng
        fields = [
            (b":method", b"POST"),
            (b":scheme", b"https"),
            (b":path", b"/e/%d" % rng.randrange(4)),
            (b":authority", b"t"),
            (b"content-type", b"application/json"),
        ]
        if rng.random() < 0.7:
            fields.append((b"content-length", b"%d" % len(body)))
        if rng.random() < 0.3:
            fields.append((b"x-n", b"%d" % rng.randrange(1000)))
        return fields

    def block(self, fields: Fields) -> bytes:
        return bytes(self.encoder.encode(fields))

    def pad(self, payload: bytes, flags: int) -> tuple[bytes, int]:
        if self.rng.random() < 0.15:
            n = self.rng.randrange(4)
            return bytes((n,)) + payload + b"\0" * n, flags | PADDED
        return payload, flags

    def headers(self, sid: int, block: bytes, flags: int) -> bytes:
        """HEADERS (maybe padded, with priority) then CONTINUATION frames for ``block``."""
        rng = self.rng
        if rng.random() < 0.15:
            dependency = rng.choice([0, max(1, sid - 2)])
            block = dependency.to_bytes(4, "big") + bytes((rng.randrange(256),)) + block
            flags |= PRIORITY_FLAG
        pieces = 1 if rng.random() < 0.75 else rng.randint(2, 4)
        cut = sorted(rng.sample(range(1, max(2, len(block))), min(pieces - 1, len(block) - 1)))
        parts = [block[a:b] for a, b in zip([0, *cut], [*cut, len(block)], strict=True)]
        if flags & PRIORITY_FLAG and len(parts[0]) < 5:
            parts = [block]
        first_flags = flags | (END_HEADERS if len(parts) == 1 else 0)
        payload, first_flags = self.pad(parts[0], first_flags)
        out = raw(HEADERS, first_flags, sid, payload)
        for i, part in enumerate(parts[1:], start=2):
            out += raw(CONTINUATION, END_HEADERS if i == len(parts) else 0, sid, part)
        return out

    def data(self, sid: int, body: bytes, end: bool) -> bytes:
        payload, flags = self.pad(body, END_STREAM if end else 0)
        return raw(DATA, flags, sid, payload)

    # -- items: each returns the bytes of one step ---------------------------------------------

    def request(self) -> bytes:
        """A valid request in one of its framing shapes (or a stream left open)."""
        rng = self.rng
        sid = self.new_sid()
        body = rng.randbytes(rng.choice([0, 2, 17, 300]))
        fields = self.fields(body)
        shape = rng.randrange(5)
        if shape == 0 and not body:
            self.ended.append(sid)
            return self.headers(sid, self.block(fields), END_STREAM)
        out = self.headers(sid, self.block(fields), 0)
        if shape == 1:  # left open: later items may send to it, reset it, or leave it
            self.open.append(sid)
            return out
        half = len(body) // 2
        if shape == 2:
            out += self.data(sid, body[:half], False) + self.data(sid, body[half:], True)
        elif shape == 3:  # trailers end it
            out += self.data(sid, body, False)
            out += self.headers(sid, self.block([(b"x-trailer", b"1")]), END_STREAM)
        else:
            out += self.data(sid, body, True)
        self.ended.append(sid)
        return out

    def finish_open(self) -> bytes:
        if not self.open:
            return self.request()
        sid = self.open.pop(0)
        self.ended.append(sid)
        return self.data(sid, b"", True)

    def odd_frame(self) -> bytes:
        """A frame of an unknown type, or a known one with odd flags."""
        rng = self.rng
        if rng.random() < 0.5:
            ftype = rng.randint(0x0B, 0xFF)  # past ALTSVC (0xA, RFC 7838), which hyperframe parses
            return raw(ftype, rng.randrange(256), self.any_sid(), b"x" * 3)
        return raw(PING, rng.randrange(256) & ~ACK, 0, rng.randbytes(8))

    def control(self) -> bytes:
        """SETTINGS, PING, PRIORITY, RST_STREAM, WINDOW_UPDATE, GOAWAY, PUSH_PROMISE: right or
        wrong in stream, length or value."""
        rng = self.rng
        sid = self.any_sid()
        kind = rng.randrange(12)
        if kind == 0:
            ident = rng.choice([0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x8, 0x99])
            value = rng.choice([0, 1, 2, 16_383, 16_384, 65_535, 2**24, 2**31 - 1, 2**31])
            return raw(
                SETTINGS,
                0,
                rng.choice([0, 0, sid]),
                ident.to_bytes(2, "big") + value.to_bytes(4, "big"),
            )
        if kind == 1:
            return raw(SETTINGS, rng.choice([0, ACK]), 0, b"\0" * rng.choice([0, 5, 6, 7]))
        if kind == 2:
            return raw(
                PING,
                rng.choice([0, ACK]),
                rng.choice([0, 0, sid]),
                b"\0" * rng.choice([7, 8, 8, 9]),
            )
        if kind == 3:
            dep = rng.choice([0, sid, sid + 2])
            length = rng.choice([5, 5, 4, 6])
            payload = (dep.to_bytes(4, "big") + b"\x10" + b"\0")[:length]
            return raw(PRIORITY, 0, sid, payload)
        if kind == 4:
            code = rng.choice([0, 1, 2, 8, 0xFF])
            return raw(RST_STREAM, 0, sid, code.to_bytes(4, "big")[: rng.choice([4, 4, 3])])
        if kind in (5, 6):
            increment = rng.choice([0, 1, 1000, 2**31 - 1])
            return raw(
                WINDOW_UPDATE,
                0,
                rng.choice([0, sid]),
                increment.to_bytes(4, "big")[: rng.choice([4, 4, 4, 3])],
            )
        if kind == 7:  # a window overflow
            target = rng.choice([0, *self.open[-1:]])
            return raw(WINDOW_UPDATE, 0, target, (2**31 - 1).to_bytes(4, "big")) * 2
        if kind == 8:
            return raw(GOAWAY, 0, rng.choice([0, 0, sid]), b"\0" * rng.choice([8, 8, 7]))
        if kind == 9:
            return raw(
                PUSH_PROMISE,
                END_HEADERS,
                sid,
                (sid + 1).to_bytes(4, "big") + self.block([(b":method", b"GET")]),
            )
        if kind == 10 and self.open:
            victim = self.open.pop(0)
            self.ended.append(victim)
            return raw(RST_STREAM, 0, victim, b"\0\0\0\x08")
        return raw(PING, 0, 0, b"\0" * 8)

    def bad_stream(self) -> bytes:
        """DATA or HEADERS where no such frame may be: stream 0, idle, even, closed, reused."""
        rng = self.rng
        sid = self.any_sid()
        if rng.random() < 0.5:
            return raw(DATA, rng.choice([0, END_STREAM]), sid, b"x" * rng.choice([0, 3]))
        fields = self.fields(b"")
        return raw(HEADERS, END_HEADERS | END_STREAM, sid, self.block(fields))

    def bad_padding(self) -> bytes:
        rng = self.rng
        sid = self.new_sid()
        self.ended.append(sid)
        block = self.block(self.fields(b""))
        pad = rng.choice([len(block) + 1, len(block) + 5, 255])
        if rng.random() < 0.5:
            return raw(HEADERS, END_HEADERS | END_STREAM | PADDED, sid, bytes((pad,)) + block)
        out = raw(HEADERS, END_HEADERS, sid, block)
        return out + raw(DATA, END_STREAM | PADDED, sid, bytes((rng.choice([3, 4, 200]),)) + b"abc")

    def hpack_garbage(self) -> bytes:
        rng = self.rng
        sid = self.new_sid()
        self.ended.append(sid)
        junk = rng.choice(
            [
                rng.randbytes(rng.randint(1, 12)),
                b"\xff\xff\xff\xff\xff",  # an integer that never ends
                b"\xbf",  # past both tables
                b"\x82\x87\x84\x41",  # a literal cut short
                b"\x82\x87\x84\x41\x01t\x3f\xe1\x1f",  # a table size update after fields
            ]
        )
        return raw(HEADERS, END_HEADERS | END_STREAM, sid, junk)

    def continuation_run(self) -> bytes:
        """A header block over CONTINUATION frames: whole, interrupted, on the wrong stream,
        or a CONTINUATION with no block open."""
        rng = self.rng
        sid = self.new_sid()
        self.ended.append(sid)
        block = self.block(self.fields(b""))
        kind = rng.randrange(4)
        if kind == 3:
            return raw(CONTINUATION, END_HEADERS, rng.choice([sid, self.any_sid()]), block)
        out = raw(HEADERS, END_STREAM, sid, block[:2])
        rest = block[2:]
        for _ in range(rng.randint(0, 3)):
            out += raw(CONTINUATION, 0, sid, b"")
        if kind == 1:
            out += raw(PING, 0, 0, b"\0" * 8)
        elif kind == 2:
            return out + raw(CONTINUATION, END_HEADERS, sid + 2, rest)
        return out + raw(CONTINUATION, END_HEADERS, sid, rest)

    def malformed_request(self) -> bytes:
        """A request whose header list or body breaks §8.1-8.3."""
        rng = self.rng
        sid = self.new_sid()
        self.ended.append(sid)
        fields = [f for f in self.fields(b"ab") if f[0] != b"content-length"]
        kind = rng.randrange(8)
        if kind == 0:
            fields = [f for f in fields if f[0] != rng.choice([b":path", b":method", b":scheme"])]
        elif kind == 1:
            fields.append((b"X-Upper", b"1"))
        elif kind == 2:
            fields.append((b"connection", b"close"))
        elif kind == 3:
            fields.append((b"te", b"gzip"))
        elif kind == 4:
            fields.append((b":path", b"/again"))
        elif kind == 5:
            fields.insert(0, (b"x-first", b"1"))
            fields.append((b":authority", b"u"))
        elif kind == 6:
            fields.append((b":status", b"200"))
        else:
            declared = rng.choice([b"1", b"3"])
            out = self.headers(sid, self.block([*fields, (b"content-length", declared)]), 0)
            return out + self.data(sid, b"ab", True)
        return self.headers(sid, self.block(fields), END_STREAM)


ITEMS: Final[list[tuple[float, Callable[[Client], bytes]]]] = [
    (6, Client.request),
    (1, Client.finish_open),
    (1, Client.odd_frame),
    (3, Client.control),
    (1, Client.bad_stream),
    (1, Client.bad_padding),
    (1, Client.hpack_garbage),
    (1, Client.continuation_run),
    (1, Client.malformed_request),
]


def client_sequence(seed: int) -> list[bytes]:
    """The items of one client's byte stream (preface and SETTINGS first)."""
    rng = random.Random(seed)
    client = Client(rng)
    items = [H2_PREFACE + raw(SETTINGS, 0, 0) + raw(SETTINGS, ACK, 0)]
    weights = [w for w, _ in ITEMS]
    for _ in range(rng.randint(1, 6)):
        [(_, make)] = rng.choices(ITEMS, weights)
        items.append(make(client))
    return items


# -- where the two may differ ----------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """A disagreement RFC 9113 allows, recognised by what the two sides said."""

    section: str
    what: str
    applies: Callable[[Verdict, Verdict], bool]
    example: int  # a seed whose sequence ends in this difference (so the list stays true)


PROTOCOL, FRAME_SIZE = ErrorCodes.PROTOCOL_ERROR, ErrorCodes.FRAME_SIZE_ERROR
COMPRESSION, STREAM_CLOSED = ErrorCodes.COMPRESSION_ERROR, ErrorCodes.STREAM_CLOSED
_HEADER_BLOCK_FAULTS: Final = (
    "Error decoding header block",
    "Received frame with invalid padding.",
    "Invalid frame during header block.",
)


def _stream_error_as_connection_error(ours: Verdict, theirs: Verdict) -> bool:
    return (
        ours.error is None
        and bool(ours.resets)
        and theirs.error == ours.resets[-1][1]
        and ours.accepted == theirs.accepted
    )


SERVER_DIFFERENCES: Final = [
    Difference(
        "5.4.1",
        "h2 ends the connection where a stream error is asked for (a malformed request, 8.1.1; "
        "a stream depending on itself, 5.3.1; a PRIORITY frame of the wrong size, 6.3): 5.4.1 "
        "lets any endpoint treat a stream error as a connection error; we reset the stream",
        _stream_error_as_connection_error,
        4,
    ),
    Difference(
        "4.3",
        "a field block that cannot be decoded: we say COMPRESSION_ERROR, as 4.3 asks; h2 says "
        "PROTOCOL_ERROR",
        lambda ours, theirs: (
            ours.error == COMPRESSION
            and theirs.error == PROTOCOL
            and theirs.reason.startswith("Error decoding header block")
        ),
        6,
    ),
    Difference(
        "6.5",
        "SETTINGS with ACK and a payload: we say FRAME_SIZE_ERROR, as 6.5 asks; hyperframe says "
        "PROTOCOL_ERROR",
        lambda ours, theirs: (
            ours.error == FRAME_SIZE
            and ours.reason.startswith("SETTINGS ACK")
            and theirs.error == PROTOCOL
        ),
        36,
    ),
    Difference(
        "6.4",
        "RST_STREAM on an idle stream: we end the connection with PROTOCOL_ERROR, as 6.4 asks; "
        "h2 lets it pass",
        lambda ours, theirs: (
            ours.error == PROTOCOL
            and ours.reason.startswith("RST_STREAM on idle")
            and theirs.error is None
            and not theirs.resets
        ),
        157,
    ),
    Difference(
        "5.1",
        "DATA or HEADERS on a stream closed by END_STREAM both ways: we end the connection with "
        "STREAM_CLOSED (5.1 allows it for a closed stream) before reading the frame further; h2 "
        "resets the stream, or first finds the frame's other fault (padding, header block)",
        lambda ours, theirs: (
            ours.error == STREAM_CLOSED
            and ours.reason.startswith("frame on closed stream")
            and (
                (theirs.error is None and [c for _, c in theirs.resets[-1:]] == [STREAM_CLOSED])
                or (theirs.error == PROTOCOL and theirs.reason.startswith(_HEADER_BLOCK_FAULTS))
            )
        ),
        311,
    ),
    Difference(
        "5.1",
        "DATA on a stream we reset: dropped (5.1: frames in flight after our RST_STREAM are "
        "ignored); h2 resets the stream again with STREAM_CLOSED",
        lambda ours, theirs: (
            ours.error is None
            and not ours.resets
            and theirs.error is None
            and len(theirs.resets) == 1
            and theirs.resets[0][1] == STREAM_CLOSED
            and theirs.resets[0][0] in ours.reset_before
        ),
        14027,
    ),
    Difference(
        "6.10",
        "CONTINUATION with no header block open: we end the connection with PROTOCOL_ERROR, as "
        "6.10 asks; h2 first finds its stream closed (STREAM_CLOSED)",
        lambda ours, theirs: (
            ours.error == PROTOCOL
            and ours.reason.startswith("CONTINUATION out of")
            and theirs.error == STREAM_CLOSED
        ),
        2780,
    ),
    Difference(
        "5.1",
        "WINDOW_UPDATE with an increment of 0 on a closed stream: we ignore it (5.1: WINDOW_UPDATE "
        "on a closed stream MUST be ignored); hyperframe refuses the frame before h2 looks at the "
        "stream",
        lambda ours, theirs: (
            ours.error is None
            and not ours.resets
            and theirs.error == PROTOCOL
            and theirs.reason == "Received frame with non-compliant data"
        ),
        1489,
    ),
]


class Side(Protocol):
    """One session under comparison, ours or h2's: bytes in, what it made of them out."""

    def feed(self, data: bytes) -> Verdict: ...


#: A comparison's outcome: None when both sides agree on every item, the allowed
#: :class:`Difference` that ended it, or the first item where they disagree otherwise (its bytes
#: in hex, our verdict, h2's).
Outcome = tuple[str, Verdict, Verdict] | Difference | None


def compare(
    ours: Side, theirs: Side, sequence: list[bytes], differences: list[Difference]
) -> Outcome:
    """Feed ``sequence`` to both sides, item by item, until they part or ours ends."""
    for item in sequence:
        a, b = ours.feed(item), theirs.feed(item)
        if str(a) != str(b) or a.accepted != b.accepted:
            for difference in differences:
                if difference.applies(a, b):
                    return difference
            return item.hex(), a, b
        if a.over:
            return None
    return None


def assert_most_agree(compare_seed: Callable[[int], Outcome]) -> None:
    """Seeds ``SEED`` .. ``SEED + N``: none parts outside the list, most agree to the end."""
    agreed = 0
    for seed in range(SEED, SEED + N):
        outcome = compare_seed(seed)
        if isinstance(outcome, tuple):
            item, ours, theirs = outcome
            raise AssertionError(f"seed {seed}, item {item}:\n ours: {ours}\n h2:   {theirs}")
        agreed += outcome is None
    assert agreed >= N // 2


def compare_server(seed: int) -> Outcome:
    """Our server session and h2's, on client sequence ``seed``."""
    return compare(Ours(), Theirs(), client_sequence(seed), SERVER_DIFFERENCES)


def test_our_server_session_agrees_with_h2() -> None:
    assert_most_agree(compare_server)


@pytest.mark.parametrize("difference", SERVER_DIFFERENCES, ids=lambda d: d.section)
def test_each_listed_server_difference_still_happens(difference: Difference) -> None:
    assert compare_server(difference.example) is difference


# -- the client side: a server's byte streams -----------------------------------------------------

REQUESTS: Final = 3  # both clients start these requests (streams 1, 3, 5) before any reply
PATH: Final = "/v1/workloads/events"
BODY: Final = b'{"x":1}'


class OurClient:
    """Our client session, with its requests started."""

    def __init__(self) -> None:
        self.session = H2ClientSession(b"t", 65_535)
        for _ in range(REQUESTS):
            self.session.start_request(PATH, BODY, 0.0, 10.0)
        self.session.data_to_send()

    def feed(self, data: bytes) -> Verdict:
        verdict = Verdict()
        for event in self.session.receive_data(data, 1.0):
            if isinstance(event, ResponseReceived):
                r = event.response
                regular = [f for f in r.headers if not f[0].startswith(b":")]
                verdict.accepted.append((b"%d" % event.request, b"%d" % r.status, regular, r.body))
            elif isinstance(event, RequestFailed):
                verdict.failed.append(event.request)
        for f in frames_of(self.session.data_to_send()):
            if isinstance(f, RstStreamFrame) and f.error_code != ErrorCodes.NO_ERROR:
                verdict.resets.append((f.stream_id, f.error_code))
            elif isinstance(f, GoAwayFrame) and f.error_code != ErrorCodes.NO_ERROR:
                verdict.error = f.error_code
                verdict.reason = self.session.ended or ""
        if verdict.error is not None:
            verdict.failed = []  # every request in progress fails: h2 names none
        elif not self.session.usable and self.session.ended is None:
            verdict.ended_by_peer = True  # the server's GOAWAY: see compare_client
        verdict.failed.sort()
        return verdict


class TheirClient(_H2Side):
    """h2's client connection, with the same requests started (push disabled, as ours)."""

    def __init__(self) -> None:
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.conn = h2.connection.H2Connection(config)
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.ENABLE_PUSH: 0}
        )
        self.conn.initiate_connection()
        request = [
            (b":method", b"POST"),
            (b":scheme", b"https"),
            (b":authority", b"t"),
            (b":path", PATH.encode()),
            (b"content-length", b"%d" % len(BODY)),
        ]
        for sid in range(1, 2 * REQUESTS, 2):
            self.conn.send_headers(sid, request)
            self.conn.send_data(sid, BODY, end_stream=True)
        self.conn.data_to_send()
        self.responses: dict[int, tuple[bytes, Fields, bytearray]] = {}
        self.open = set(range(1, 2 * REQUESTS, 2))

    def _on(self, event: h2.events.Event, verdict: Verdict) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            assert event.stream_id is not None and event.headers is not None
            headers = [(bytes(k), bytes(v)) for k, v in event.headers]
            status = dict(headers)[b":status"]
            regular = [f for f in headers if not f[0].startswith(b":")]
            self.responses[event.stream_id] = (status, regular, bytearray())
        elif isinstance(event, h2.events.DataReceived):
            assert event.stream_id is not None and event.data is not None
            self.responses[event.stream_id][2].extend(event.data)
            if event.flow_controlled_length:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            assert event.stream_id is not None
            status, regular, body = self.responses.pop(event.stream_id)
            self.open.discard(event.stream_id)
            verdict.accepted.append((b"%d" % event.stream_id, status, regular, bytes(body)))
        elif isinstance(event, h2.events.StreamReset):
            assert event.stream_id is not None
            if event.stream_id in self.open:
                self.open.discard(event.stream_id)
                verdict.failed.append(event.stream_id)
        elif isinstance(event, h2.events.ConnectionTerminated):
            assert event.last_stream_id is not None
            verdict.ended_by_peer = True
            refused = {sid for sid in self.open if sid > event.last_stream_id}
            verdict.failed += sorted(refused)
            self.open -= refused


class Server:
    """Writes one server's frames for the requests on streams 1, 3 and 5."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.encoder = hpack.Encoder()
        self.waiting = list(range(1, 2 * REQUESTS, 2))  # no final response yet
        self.done: list[int] = []

    def block(self, fields: Fields) -> bytes:
        return bytes(self.encoder.encode(fields))

    def any_sid(self) -> int:
        """A stream id of any kind: 0, waiting, answered, idle, even."""
        return self.rng.choice([0, 2, 7, 9, *self.waiting[:1], *self.done[-1:]])

    def pad(self, payload: bytes, flags: int) -> tuple[bytes, int]:
        if self.rng.random() < 0.15:
            n = self.rng.randrange(4)
            return bytes((n,)) + payload + b"\0" * n, flags | PADDED
        return payload, flags

    def headers(self, sid: int, block: bytes, flags: int) -> bytes:
        rng = self.rng
        if rng.random() < 0.1:
            block = b"\0\0\0\0\x10" + block
            flags |= PRIORITY_FLAG
        split = rng.random() < 0.25 and len(block) > 6
        cut = rng.randint(6, len(block) - 1) if split and len(block) > 7 else len(block)
        payload, first = self.pad(block[:cut], flags | (0 if cut < len(block) else END_HEADERS))
        out = raw(HEADERS, first, sid, payload)
        if cut < len(block):
            out += raw(CONTINUATION, END_HEADERS, sid, block[cut:])
        return out

    def data(self, sid: int, body: bytes, end: bool) -> bytes:
        payload, flags = self.pad(body, END_STREAM if end else 0)
        return raw(DATA, flags, sid, payload)

    def response(self) -> bytes:
        """A valid response to a waiting request, in one of its framing shapes."""
        rng = self.rng
        if not self.waiting:
            return raw(PING, 0, 0, b"\0" * 8)
        sid = self.waiting.pop(rng.randrange(len(self.waiting)))
        self.done.append(sid)
        body = rng.randbytes(rng.choice([0, 3, 40]))
        fields = [(b":status", rng.choice([b"202", b"200", b"400", b"503"]))]
        if rng.random() < 0.7:
            fields.append((b"content-length", b"%d" % len(body)))
        if rng.random() < 0.3:
            fields.append((b"x-n", b"%d" % rng.randrange(100)))
        out = b""
        if rng.random() < 0.1:
            out += self.headers(sid, self.block([(b":status", b"103")]), 0)
        if not body and rng.random() < 0.5:
            return out + self.headers(sid, self.block(fields), END_STREAM)
        out += self.headers(sid, self.block(fields), 0)
        half = len(body) // 2
        shape = rng.randrange(3)
        if shape == 0:
            return out + self.data(sid, body, True)
        if shape == 1:
            return out + self.data(sid, body[:half], False) + self.data(sid, body[half:], True)
        out += self.data(sid, body, False)
        return out + self.headers(sid, self.block([(b"x-trailer", b"1")]), END_STREAM)

    def control(self) -> bytes:
        """SETTINGS, PING, PRIORITY, RST_STREAM, WINDOW_UPDATE, GOAWAY, PUSH_PROMISE, unknown
        frames: right or wrong in stream, length or value."""
        rng = self.rng
        sid = self.any_sid()
        kind = rng.randrange(11)
        if kind == 0:
            ident = rng.choice([0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x8, 0x99])
            value = rng.choice([0, 1, 2, 100, 16_383, 16_384, 65_535, 2**24, 2**31 - 1, 2**31])
            payload = ident.to_bytes(2, "big") + value.to_bytes(4, "big")
            return raw(SETTINGS, 0, rng.choice([0, 0, sid]), payload)
        if kind == 1:
            return raw(SETTINGS, rng.choice([0, ACK]), 0, b"\0" * rng.choice([0, 5, 6]))
        if kind == 2:
            flags = rng.choice([0, ACK, 0xFE])
            return raw(PING, flags, rng.choice([0, 0, sid]), b"\0" * rng.choice([7, 8, 8]))
        if kind == 3:
            return raw(PRIORITY, 0, sid, b"\0\0\0\0\x10"[: rng.choice([5, 5, 4])])
        if kind == 4:
            code = rng.choice([0, 1, 7, 8]).to_bytes(4, "big")
            if sid in self.waiting:
                self.waiting.remove(sid)
                self.done.append(sid)
            return raw(RST_STREAM, 0, sid, code[: rng.choice([4, 4, 3])])
        if kind == 5:
            increment = rng.choice([0, 1, 1000, 2**31 - 1]).to_bytes(4, "big")
            return raw(WINDOW_UPDATE, 0, rng.choice([0, sid]), increment[: rng.choice([4, 4, 3])])
        if kind == 6:
            last = rng.choice([0, 1, 3, 5, 2**31 - 1])
            payload = last.to_bytes(4, "big") + rng.choice([0, 2]).to_bytes(4, "big")
            return raw(GOAWAY, 0, rng.choice([0, 0, sid]), payload[: rng.choice([8, 8, 7])])
        if kind == 7:
            block = self.block([(b":method", b"GET"), (b":path", b"/")])
            return raw(PUSH_PROMISE, END_HEADERS, sid or 1, b"\0\0\0\x02" + block)
        if kind == 8:
            return raw(rng.randint(0x0B, 0xFF), rng.randrange(256), sid, b"xyz")
        return raw(PING, 0, 0, b"\0" * 8)

    def broken(self) -> bytes:
        """A response, or a frame, that breaks a rule: bad stream ids, padding, HPACK
        garbage, CONTINUATION runs, header lists, body lengths."""
        rng = self.rng
        if not self.waiting:
            return raw(PING, 0, 0, b"\0" * 8)
        sid = self.waiting[0]
        ok = self.block([(b":status", b"202")])
        kind = rng.randrange(10)
        if kind == 0:
            return raw(DATA, END_STREAM, self.any_sid(), b"x")
        if kind == 1:
            return raw(HEADERS, END_HEADERS | END_STREAM, self.any_sid(), ok)
        if kind == 2:
            return raw(HEADERS, END_HEADERS | END_STREAM | PADDED, sid, bytes((len(ok) + 1,)) + ok)
        if kind == 3:
            junk = rng.choice([rng.randbytes(rng.randint(1, 8)), b"\xff\xff\xff\xff\xff", b"\xbf"])
            return raw(HEADERS, END_HEADERS | END_STREAM, sid, junk)
        if kind == 4:  # a CONTINUATION run: interrupted, on another stream, or alone
            out = raw(HEADERS, END_STREAM, sid, ok[:1]) + raw(CONTINUATION, 0, sid, b"")
            return out + rng.choice(
                [raw(PING, 0, 0, b"\0" * 8), raw(CONTINUATION, END_HEADERS, sid + 2, ok[1:])]
            )
        if kind == 5:
            return raw(CONTINUATION, END_HEADERS, sid, ok)
        if kind == 6:
            fields = rng.choice(
                [
                    [(b"content-length", b"0")],
                    [(b":status", b"202"), (b":status", b"200")],
                    [(b":status", b"2x2")],
                    [(b":status", b"202"), (b"Upper", b"1")],
                    [(b":status", b"202"), (b"connection", b"close")],
                    [(b":status", b"202"), (b":path", b"/")],
                ]
            )
            return raw(HEADERS, END_HEADERS | END_STREAM, sid, self.block(fields))
        if kind == 7:
            fields = [(b":status", b"202"), (b"content-length", rng.choice([b"1", b"5"]))]
            return raw(HEADERS, END_HEADERS, sid, self.block(fields)) + self.data(sid, b"abc", True)
        if kind == 8:
            return raw(DATA, END_STREAM, sid, b"early")  # DATA before the response HEADERS
        return raw(HEADERS, END_HEADERS | END_STREAM, sid, self.block([(b":status", b"101")]))


SERVER_ITEMS: Final[list[tuple[float, Callable[[Server], bytes]]]] = [
    (4, Server.response),
    (3, Server.control),
    (2, Server.broken),
]


def server_sequence(seed: int) -> list[bytes]:
    """The items of one server's byte stream (its SETTINGS and the ACK of ours first)."""
    rng = random.Random(seed)
    server = Server(rng)
    items = [raw(SETTINGS, 0, 0) + raw(SETTINGS, ACK, 0)]
    weights = [w for w, _ in SERVER_ITEMS]
    for _ in range(rng.randint(1, 6)):
        [(_, make)] = rng.choices(SERVER_ITEMS, weights)
        items.append(make(server))
    return items


#: h2's errors for a frame on a stream it closed: its stream machine's, or a fault it finds in
#: the frame's header block first.
_CLOSED_STREAM_FAULTS: Final = (
    "Invalid input StreamInputs",
    "Cannot set END_STREAM on informational responses",
)


def _closed_stream_frame_dropped(ours: Verdict, theirs: Verdict) -> bool:
    nothing = Verdict(reset_before=ours.reset_before)
    reset_closed = not theirs.over and [c for _, c in theirs.resets] == [STREAM_CLOSED]
    return str(ours) == str(nothing) and (
        reset_closed
        or theirs.error == STREAM_CLOSED
        or theirs.reason.startswith(_CLOSED_STREAM_FAULTS)
    )


CLIENT_DIFFERENCES: Final = [
    Difference(
        "4.3",
        "a field block that cannot be decoded: we say COMPRESSION_ERROR, as 4.3 asks; h2 says "
        "PROTOCOL_ERROR",
        SERVER_DIFFERENCES[1].applies,
        6,
    ),
    Difference(
        "6.4",
        "RST_STREAM on an idle stream (one we never opened, even ones included): we end the "
        "connection with PROTOCOL_ERROR, as 6.4 asks; h2 lets it pass",
        lambda ours, theirs: (
            ours.error == PROTOCOL
            and "RST_STREAM on idle" in ours.reason
            and theirs.error is None
            and not theirs.resets
        ),
        20,
    ),
    Difference(
        "6.5",
        "SETTINGS with ACK and a payload: we say FRAME_SIZE_ERROR, as 6.5 asks; hyperframe says "
        "PROTOCOL_ERROR",
        lambda ours, theirs: (
            ours.error == FRAME_SIZE and "SETTINGS ACK" in ours.reason and theirs.error == PROTOCOL
        ),
        73,
    ),
    Difference(
        "8.3.2",
        "a :status that is not three digits: a malformed response to us (8.3.2, 8.1.1), which "
        "h2 accepts",
        lambda ours, theirs: (
            ours.error == PROTOCOL
            and ours.reason.endswith("response without a valid :status")
            and theirs.error is None
            and bool(theirs.accepted)
        ),
        133,
    ),
    Difference(
        "5.1",
        "a frame on a stream whose response is over: we drop it (5.1 allows, never asks, a "
        "connection error STREAM_CLOSED for a closed stream); h2 resets the stream or ends the "
        "connection",
        _closed_stream_frame_dropped,
        92,
    ),
    Difference(
        "5.4.1",
        "a stream error of the server's (a stream window past 2^31-1, 6.9.1): we end the "
        "connection with its code, as 5.4.1 lets any endpoint do; h2 resets the stream",
        lambda ours, theirs: (
            ours.error is not None
            and theirs.error is None
            and [c for _, c in theirs.resets] == [ours.error]
        ),
        1951,
    ),
]


def compare_client(seed: int) -> Outcome:
    """Our client session and h2's, on server sequence ``seed``.

    The comparison stops after the server's GOAWAY (once both said which requests it
    refused): h2 then refuses every frame, where 6.8 lets the streams it did not refuse
    finish, as ours does."""
    return compare(OurClient(), TheirClient(), server_sequence(seed), CLIENT_DIFFERENCES)


def test_our_client_session_agrees_with_h2() -> None:
    assert_most_agree(compare_client)


@pytest.mark.parametrize("difference", CLIENT_DIFFERENCES, ids=lambda d: d.section)
def test_each_listed_client_difference_still_happens(difference: Difference) -> None:
    assert compare_client(difference.example) is difference
