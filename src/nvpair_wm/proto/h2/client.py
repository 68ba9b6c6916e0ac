"""The HTTP/2 client session (sans-IO), our own implementation: no h2 library on the path.

The broadcaster's requests are all one shape (``POST`` of a JSON batch to a pinned peer), so
the client is written for that shape: per request one dict insert, one header block built from
cached bytes, the DATA frames the windows allow; per response one HPACK decode and one
``Response``. What it shares with the server is :class:`~nvpair_wm.proto.h2.session.H2Session`;
the driver uses it as a :class:`~nvpair_wm.proto.sessions.ClientSession`.

* Request headers: the fixed fields are encoded once per connection (per path), never
  indexed (no encoder state to keep in step with the server's SETTINGS_HEADER_TABLE_SIZE: the
  first block says our table is 0); ``content-length`` follows as a literal. Responses follow
  the field rules of :func:`~nvpair_wm.proto.h2.streams.response_status` (and of trailers): a
  malformed response is the server's protocol error (RFC 9113 §8.1.1).
* Request bodies go out as the server's windows and SETTINGS_MAX_FRAME_SIZE allow; the rest
  waits for a WINDOW_UPDATE or SETTINGS. A response that completes before its body was all
  sent ends the stream with RST_STREAM NO_ERROR (§8.1): the rest is not wanted.
* Response bodies: we advertise a stream window of at least ``max_response_bytes`` and reopen
  windows as DATA arrives; a bigger body fails that request
  (:class:`~nvpair_wm.errors.StreamRefused`) and the stream is cancelled.
* GOAWAY: streams above its last stream id fail with :class:`~nvpair_wm.errors.StreamRefused`
  (never processed: safe to retry); the others complete; no new stream opens (DRAINING).
  RST_STREAM from the server fails that request the same way.
* Errors of the server are :class:`~nvpair_wm.errors.H2ConnectionError`: GOAWAY with the code,
  and every request in progress fails with :class:`~nvpair_wm.errors.ConnectionLost`. Its
  stream errors are treated as connection errors (§5.4.2 allows it): a server that breaks the
  protocol on one stream is not trusted with the others. Our own misuse (a request over the
  server's stream limit) is :class:`~nvpair_wm.errors.LocalProtocolError`.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Final

from h2.errors import ErrorCodes

from nvpair_wm.errors import (
    ClientError,
    ConnectionLost,
    H2ConnectionError,
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
    Response,
    ResponseReceived,
    SessionChanged,
)
from nvpair_wm.proto.h2.frames import (
    ACK,
    DATA,
    END_STREAM,
    H2_PREFACE,
    MAX_WINDOW,
    PADDED,
    PING,
    SETTINGS,
    frame,
    frame_header,
    goaway_frame,
    header_block_frames,
    rst_stream_frame,
    unpad,
    window_update_frame,
)
from nvpair_wm.proto.h2.hpack import encode_field
from nvpair_wm.proto.h2.session import ConnectionEvent, ConnectionState, H2Session, no_transition
from nvpair_wm.proto.h2.settings import (
    DEFAULT_WINDOW,
    ENABLE_PUSH,
    INITIAL_WINDOW_SIZE,
    PeerSettings,
)
from nvpair_wm.proto.h2.streams import response_status, trailers_problem
from nvpair_wm.proto.h2.windows import ConnectionWindow
from nvpair_wm.versions import REQUEST_FIELDS

__all__ = ["H2ClientSession", "StreamEvent", "StreamState"]

log = logging.getLogger(__name__)

_MAX_FRAME: Final = 16384  # the frame size we accept: the default, we never advertise more
_MAX_STREAM_ID: Final = 2**31 - 1
_TABLE_SIZE_ZERO: Final = b"\x20"  # HPACK dynamic table size update to 0 (RFC 7541 §6.3)
# content-length (static table index 28) as a literal without indexing (RFC 7541 §6.2.2):
# 0000 1111 then 28 - 15 = 13; the value follows, its length on a 7-bit prefix, not Huffman.
_CONTENT_LENGTH_LITERAL: Final = b"\x0f\x0d"
_HEADER_BLOCK_MIN: Final = 64 * 1024  # header bytes always allowed, whatever the body limit


def _error(reason: str, code: int = ErrorCodes.PROTOCOL_ERROR) -> H2ConnectionError:
    return H2ConnectionError(code, reason)


class StreamState(enum.Enum):
    """Where a request's stream is (RFC 9113 §5.1, client side): our request sent whole or its
    body still going out (as the server's windows allow), and the final response not begun or
    begun (its HEADERS in). A stream reset, refused or timed out is no longer tracked."""

    # (what it means, body_to_send, response_begun)
    OPEN = ("sending the request body; no response yet", True, False)
    OPEN_RECEIVING = ("sending the request body; the response begun (an early answer)", True, True)
    HALF_CLOSED_LOCAL = ("the request sent whole; no response yet", False, False)
    HALF_CLOSED_LOCAL_RECEIVING = ("the request sent whole; the response begun", False, True)
    CLOSED = ("the response ended: no longer tracked", False, True)

    def __init__(self, meaning: str, body_to_send: bool, response_begun: bool) -> None:
        self.meaning = meaning
        self.body_to_send = body_to_send  # our END_STREAM not yet sent
        self.response_begun = response_begun  # the final response's HEADERS came

    __hash__ = object.__hash__  # identity: table lookups stay in C (as the server's)


class StreamEvent(enum.Enum):
    """What moves a request's stream from one :class:`StreamState` to the next."""

    SEND_END_STREAM = "the request's last byte went out"
    RECV_RESPONSE = "the final response's HEADERS came"
    RECV_END_STREAM = "the server ended the response"

    __hash__ = object.__hash__


_S, _E = StreamState, StreamEvent
#: (state, event) → next state; any other pair is a bug of ours (:class:`LocalProtocolError`).
_TRANSITIONS: Final[dict[tuple[StreamState, StreamEvent], StreamState]] = {
    (_S.OPEN, _E.SEND_END_STREAM): _S.HALF_CLOSED_LOCAL,
    (_S.OPEN, _E.RECV_RESPONSE): _S.OPEN_RECEIVING,
    (_S.OPEN_RECEIVING, _E.SEND_END_STREAM): _S.HALF_CLOSED_LOCAL_RECEIVING,
    (_S.OPEN_RECEIVING, _E.RECV_END_STREAM): _S.CLOSED,  # the rest of the body is not wanted
    (_S.HALF_CLOSED_LOCAL, _E.RECV_RESPONSE): _S.HALF_CLOSED_LOCAL_RECEIVING,
    (_S.HALF_CLOSED_LOCAL_RECEIVING, _E.RECV_END_STREAM): _S.CLOSED,
}
_SEND_END_STREAM = StreamEvent.SEND_END_STREAM  # looked up once (see connection.py)
_RECV_RESPONSE = StreamEvent.RECV_RESPONSE
_RECV_END_STREAM = StreamEvent.RECV_END_STREAM
_OPEN_CONNECTION = ConnectionState.OPEN
_CLOSED_CONNECTION = ConnectionState.CLOSED


@dataclass(slots=True, eq=False)
class _Stream:
    """One request on the wire: its state, deadline, the body still to send, the response."""

    sid: int
    deadline: float
    timeout: float
    to_send: bytes  # the request body; sent up to ``offset``
    send_window: int  # what the server lets us send on this stream
    recv_window: int  # what the server may still send on it
    state: StreamState = StreamState.OPEN
    offset: int = 0
    status: int = 0  # of the final response, once its HEADERS came
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    length: int = -1  # the response's content-length, if it has one
    chunks: list[bytes] = field(default_factory=list)
    received: int = 0

    def step(self, event: StreamEvent) -> StreamState:
        """Move to the state :data:`_TRANSITIONS` gives for ``event``, and return it."""
        try:
            state = self.state = _TRANSITIONS[self.state, event]
        except KeyError:
            raise no_transition(self.state, event, "client stream", self.sid) from None
        return state


class H2ClientSession(H2Session[_Stream]):
    """One HTTP/2 connection, client side (the connection preface is queued at once)."""

    protocol = "h2"

    __slots__ = (
        "_authority",
        "_blocks",
        "_events",
        "_goaway_sent",
        "_max_response",
        "_next_sid",
        "_ping_count",
        "_pings",
        "_recv",
        "_recv_initial",
        "_sending",
        "ended",
    )

    def __init__(self, authority: bytes, max_response_bytes: int) -> None:
        window = min(MAX_WINDOW, max(DEFAULT_WINDOW, max_response_bytes))
        settings = (ENABLE_PUSH, 0), (INITIAL_WINDOW_SIZE, window)
        payload = b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in settings)
        preface = H2_PREFACE + frame(SETTINGS, 0, 0, payload)
        max_block = max(_HEADER_BLOCK_MIN, max_response_bytes)
        super().__init__(
            [preface],
            PeerSettings(server=True),
            0.0,
            max_frame=_MAX_FRAME,
            max_header_list=max_block,
            max_block=max_block,
            max_continuations=None,
        )
        self._authority = authority
        self._max_response = max_response_bytes
        self._recv_initial = window  # our stream window, and the connection's
        self._recv = ConnectionWindow(self._out, window)  # opened to ``window`` at once
        self._events: list[ClientEvent] = []  # what the frames being read made happen
        self._blocks: dict[str, bytes] = {}  # path → the request's fixed header fields
        self._next_sid = 1
        self._sending: dict[int, _Stream] = {}  # streams whose body waits for window, oldest 1st
        self._pings: dict[int, tuple[float, float]] = {}  # id → (deadline, timeout)
        self._ping_count = 0
        self._goaway_sent = False
        self.ended: str | None = None  # why the session is over, once it is (CLOSED)

    # -- what the driver looks at -------------------------------------------------------------

    @property
    def usable(self) -> bool:
        """New requests may start: OPEN (no GOAWAY, not ended), stream ids left."""
        return self.state is _OPEN_CONNECTION and self._next_sid <= _MAX_STREAM_ID

    @property
    def active(self) -> int:
        return len(self._streams)

    def capacity(self, cap: int) -> int:
        """Requests at once: ``cap`` (ours), bounded by the server's MAX_CONCURRENT_STREAMS."""
        return max(1, min(cap, self._peer.max_concurrent_streams))

    @property
    def stream_window(self) -> int:
        """The body bytes a new stream may send before the server opens its window further
        (its SETTINGS_INITIAL_WINDOW_SIZE; the default until its SETTINGS came)."""
        return self._peer.initial_window

    def next_deadline(self) -> float | None:
        times = [st.deadline for st in self._streams.values()]
        times += [deadline for deadline, _ in self._pings.values()]
        return min(times, default=None)

    # -- requests and PINGs -------------------------------------------------------------------

    def start_request(self, path: str, body: bytes, now: float, timeout: float) -> int:
        """Queue ``POST path`` with ``body`` (application/json); returns its stream id.

        Raises :class:`ConnectionLost` after GOAWAY or the end of the session, and
        :class:`LocalProtocolError` over the server's MAX_CONCURRENT_STREAMS (ask
        :meth:`capacity` first).
        """
        if not self.usable:
            if self.state is _OPEN_CONNECTION:
                raise ConnectionLost("HTTP/2 stream ids used up")
            raise ConnectionLost(self.ended or "the server sent GOAWAY")
        sid = self._next_sid
        streams = self._streams
        limit = self._peer.max_concurrent_streams
        if len(streams) >= limit:
            raise LocalProtocolError(f"HTTP/2 request over the server's {limit} concurrent streams")
        self._next_sid = sid + 2
        fixed = self._blocks.get(path)
        if fixed is None:
            fixed = self._fixed_block(path)
        length = b"%d" % len(body)
        block = fixed + _CONTENT_LENGTH_LITERAL + bytes((len(length),)) + length
        if sid == 1:  # our first header block
            block = _TABLE_SIZE_ZERO + block
        self._out += header_block_frames(sid, block, not body, self._peer.max_frame_size)
        window = self._peer.initial_window
        st = _Stream(sid, now + timeout, timeout, body, window, self._recv_initial)
        streams[sid] = st
        if body:
            self._pump(st)
        else:
            st.step(_SEND_END_STREAM)
        return sid

    def _fixed_block(self, path: str) -> bytes:
        fields = (
            (b":method", b"POST"),
            (b":scheme", b"https"),
            (b":authority", self._authority),
            (b":path", path.encode("ascii")),
            *REQUEST_FIELDS,
            (b"content-type", b"application/json"),
        )
        block = b"".join([encode_field(name, value) for name, value in fields])
        if len(self._blocks) < 16:  # one path in practice; a bound all the same
            self._blocks[path] = block
        return block

    def ping(self, now: float, timeout: float) -> int:
        """Send a PING; :class:`PingAnswered` or :class:`PingFailed` follows with its id."""
        if self.ended is not None:
            raise ConnectionLost(self.ended)
        self._ping_count += 1
        pid = self._ping_count
        self._out.append(frame(PING, 0, 0, pid.to_bytes(8, "big")))
        self._pings[pid] = (now + timeout, timeout)
        return pid

    def _pump(self, st: _Stream) -> None:
        """Send as much of ``st``'s body as the windows allow; the rest waits in ``_sending``."""
        body = st.to_send
        total = len(body)
        out = self._out
        max_frame = self._peer.max_frame_size
        while True:
            size = min(self._send_window, st.send_window, max_frame, total - st.offset)
            if size <= 0:
                self._sending[st.sid] = st
                return  # a WINDOW_UPDATE or SETTINGS resumes it
            start = st.offset
            end = st.offset = start + size
            self._send_window -= size
            st.send_window -= size
            if end == total:
                out.append(frame_header(size, DATA, END_STREAM, st.sid))
                out.append(body if size == total else body[start:end])
                self._sending.pop(st.sid, None)
                st.step(_SEND_END_STREAM)
                return
            out.append(frame_header(size, DATA, 0, st.sid))
            out.append(body[start:end])

    def _pump_all(self) -> None:
        for st in list(self._sending.values()):
            if self._send_window <= 0:
                return
            self._pump(st)

    # -- input --------------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> list[ClientEvent]:
        """Feed what the peer sent (``b""``: EOF); returns what happened."""
        if self.state is _CLOSED_CONNECTION:
            return []
        if not data:
            return self.end("closed by the peer", graceful=False)
        self._now = now
        events = self._events = []
        try:
            self._receive(data)
        except H2ConnectionError as exc:  # the server's error (ours would propagate: a bug)
            self._say_goaway(exc.code)
            events += self.end(f"protocol error: {exc.reason}", graceful=True)
        return events

    def _receive(self, data: bytes) -> None:
        reader = self._reader
        for ftype, flags, sid, payload in reader.frames(data):
            if not self._settings_seen:
                if ftype != SETTINGS or flags & ACK:
                    raise _error("the server's preface is not a SETTINGS frame")
                self._settings_seen = True
            self._dispatch(ftype, flags, sid, payload)
        if reader.error is not None:
            raise reader.error

    def _stream_error(self, sid: int, code: int, why: str = "") -> None:
        """A stream error of the server's: treated as the connection's (§5.4.2 allows it)."""
        raise _error(why, code)

    def _on_ping(self, flags: int, sid: int, payload: bytes) -> None:
        H2Session._on_ping(self, flags, sid, payload)  # the server's PING is answered there
        pid = int.from_bytes(payload, "big")
        if flags & ACK and self._pings.pop(pid, None) is not None:
            self._events.append(PingAnswered(pid))

    def _on_priority(self, flags: int, sid: int, payload: bytes) -> None:
        pass  # priorities mean nothing to us; the frame's rules were checked

    def _known(self, sid: int, what: str) -> _Stream | None:
        """The stream ``sid`` if it is in progress; None for one that was (frames in flight
        after its end are dropped); PROTOCOL_ERROR for one never opened (§5.1: idle)."""
        st = self._streams.get(sid)
        if st is None and (not sid & 1 or sid >= self._next_sid):
            raise _error(f"{what} on idle stream {sid}")
        return st

    def _on_settings(self, flags: int, sid: int, payload: bytes) -> None:
        H2Session._on_settings(self, flags, sid, payload)
        if not flags & ACK:
            self._events.append(SessionChanged())

    def _on_window_update(self, flags: int, sid: int, payload: bytes) -> None:
        if not int.from_bytes(payload, "big") & 0x7FFF_FFFF:  # on any stream, closed ones too
            raise _error(f"WINDOW_UPDATE of 0 on stream {sid}")
        H2Session._on_window_update(self, flags, sid, payload)

    def _on_header_block(
        self, sid: int, end_stream: bool, block: bytes, dependency: int | None
    ) -> None:
        fields = self._decoder.decode(block)
        st = self._known(sid, "HEADERS")
        if st is None:
            return
        if st.state.response_begun:  # trailers
            if not end_stream:
                raise _error(f"second HEADERS on stream {sid} without END_STREAM")
            if (problem := trailers_problem(fields)) is not None:
                raise _error(f"stream {sid}: {problem}")
        else:
            status = response_status(fields)
            if isinstance(status, str):
                raise _error(status)
            if status < 200:  # informational (1xx): the final response follows
                if end_stream:
                    raise _error(f"stream {sid} ended by a {status} response")
                return
            st.step(_RECV_RESPONSE)
            st.status = status
            st.headers = fields
            for key, value in fields:
                if key == b"content-length":
                    if not value.isdigit():
                        raise _error(f"response content-length {value!r}")
                    st.length = int(value)
        if end_stream:
            self._complete(st)

    def _on_data(self, flags: int, sid: int, payload: bytes) -> None:
        flow = len(payload)
        if flow:
            self._recv.consume(flow)
        st = self._known(sid, "DATA")
        if st is None:
            return
        if not st.state.response_begun:
            raise _error(f"DATA before the response HEADERS on stream {sid}")
        data = payload
        if flags & PADDED:
            start, end = unpad(payload)
            data = payload[start:end]
        if flow:
            st.recv_window -= flow
            if st.recv_window < 0:
                raise _error(f"stream {sid} window exceeded", ErrorCodes.FLOW_CONTROL_ERROR)
        if data:
            st.received += len(data)
            if st.received > self._max_response:
                self._out.append(rst_stream_frame(sid, ErrorCodes.CANCEL))
                self._fail(sid, StreamRefused("response body too large"))
                return
            st.chunks.append(data)
        if flags & END_STREAM:
            self._complete(st)
        elif st.recv_window <= self._recv_initial // 2:
            self._out.append(window_update_frame(sid, self._recv_initial - st.recv_window))
            st.recv_window = self._recv_initial

    def _complete(self, st: _Stream) -> None:
        """The response ended the stream: hand it over."""
        sid = st.sid
        if st.length >= 0 and st.length != st.received:
            raise _error(
                f"response body of {st.received} bytes on stream {sid}, content-length {st.length}"
            )
        del self._streams[sid]
        if st.state.body_to_send:  # answered early: the rest is not wanted
            self._sending.pop(sid, None)
            self._out.append(rst_stream_frame(sid, ErrorCodes.NO_ERROR))
        st.step(_RECV_END_STREAM)
        chunks = st.chunks
        body = b"" if not chunks else chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._events.append(ResponseReceived(sid, Response(st.status, st.headers, body)))

    def _fail(self, sid: int, error: ClientError) -> None:
        """Stream ``sid`` is over without a response: forgotten, its request failed."""
        del self._streams[sid]
        self._sending.pop(sid, None)
        self._events.append(RequestFailed(sid, error))

    def _on_rst_stream(self, flags: int, sid: int, payload: bytes) -> None:
        if self._known(sid, "RST_STREAM") is not None:
            code = _code_name(int.from_bytes(payload, "big"))
            self._fail(sid, StreamRefused(f"stream reset by the peer: {code}"))

    def _on_goaway(self, flags: int, sid: int, payload: bytes) -> None:
        last = int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF
        code = int.from_bytes(payload[4:8], "big")
        self._move(ConnectionEvent.GOAWAY)
        for refused in [s for s in self._streams if s > last]:
            self._fail(refused, StreamRefused(f"stream {refused} refused by GOAWAY"))
        if code != ErrorCodes.NO_ERROR:
            detail = payload[8:].decode("utf-8", "replace")
            log.info("peer sent GOAWAY %s %s", _code_name(code), detail)
        self._events.append(SessionChanged())

    def handle_timeout(self, now: float) -> list[ClientEvent]:
        if self.state is _CLOSED_CONNECTION:
            return []
        for sid, st in self._streams.items():
            if now >= st.deadline:
                why = f"no response within {st.timeout:g}s"
                del self._streams[sid]
                return [RequestFailed(sid, ResponseTimeout(why)), *self.end(why, False)]
        for pid, (deadline, timeout) in self._pings.items():
            if now >= deadline:
                why = f"PING unanswered for {timeout:g}s"
                del self._pings[pid]
                return [PingFailed(pid, ResponseTimeout(why)), *self.end(why, False)]
        return []

    # -- the end ------------------------------------------------------------------------------

    def end(self, reason: str, graceful: bool) -> list[ClientEvent]:
        """End the session (``graceful``: GOAWAY NO_ERROR queued); what is in progress fails."""
        if self.state is _CLOSED_CONNECTION:
            return []
        self._move(ConnectionEvent.END)
        self.ended = reason
        events: list[ClientEvent] = []
        for sid in self._streams:
            events.append(RequestFailed(sid, ConnectionLost(reason)))
        for pid in self._pings:
            events.append(PingFailed(pid, ConnectionLost(reason)))
        self._streams.clear()
        self._pings.clear()
        self._sending.clear()
        if graceful:
            self._say_goaway(ErrorCodes.NO_ERROR)
        events.append(ConnectionEnded(reason, graceful))
        return events

    def _say_goaway(self, code: int) -> None:
        """Queue our one GOAWAY (last stream id 0: we accept no pushed streams)."""
        if not self._goaway_sent:
            self._goaway_sent = True
            self._out.append(goaway_frame(0, code))


def _code_name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return f"0x{code:x}"
