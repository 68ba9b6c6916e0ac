"""The HTTP/2 client session on h2, sans-IO: many requests at once, flow control, PING, GOAWAY.

The driver calls :meth:`H2ClientSession.start_request` / :meth:`ping`, writes
:meth:`data_to_send`, feeds what the peer sends to :meth:`receive_data` (``b""`` at EOF) and
arms one timer at :meth:`next_deadline` (calling :meth:`handle_timeout`); it acts on the
:mod:`~nvpair_wm.proto.exchanges` events these return. No socket, clock or asyncio here.

Request bodies go out as the peer's flow-control windows allow (the rest waits in the session
for a WINDOW_UPDATE or a SETTINGS change). A response that completes before its body was all
sent ends the stream with RST_STREAM NO_ERROR (RFC 9113 §8.1): the rest is not wanted.

GOAWAY is handled here, before h2 sees it: h2 closes its state machine on a received GOAWAY
and would then refuse the responses the server still sends for streams it promised to finish
(python-hyper/h2#1181, which the server session works around too). Streams above the GOAWAY's
last stream id fail with :class:`StreamRefused` (never processed: safe to retry); the others
complete normally; no new stream is opened.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Final

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
from h2.errors import ErrorCodes

from nvpair_wm.errors import (
    ConnectionLost,
    H2ConnectionError,
    LocalProtocolError,
    ResponseTimeout,
    StreamRefused,
)
from nvpair_wm.proto.exchanges import (
    USER_AGENT,
    ClientEvent,
    ConnectionEnded,
    PingAnswered,
    PingFailed,
    RequestFailed,
    Response,
    ResponseReceived,
    SessionChanged,
)

__all__ = ["H2ClientSession"]

log = logging.getLogger(__name__)

_FRAME_HEADER: Final = 9
_GOAWAY: Final = 0x7

# Our outbound header fields are built here, lowercase and valid: h2 need not check them again.
# Of a response we read ``:status`` (checked here: three digits, else a protocol error) and
# ``retry-after`` (parsed leniently): h2's checks of every inbound field are not needed (they
# cost about 6 % of a request's client CPU: 110 -> 104 us, median of an in-memory A/B).
_CONFIG = h2.config.H2Configuration(
    client_side=True,
    header_encoding=None,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
    validate_inbound_headers=False,
)


# content-length (static table index 28) as a literal without indexing (RFC 7541 §6.2.2):
# 0000 1111 then 28 - 15 = 13; the value follows, its length on a 7-bit prefix, not Huffman.
_CONTENT_LENGTH_LITERAL: Final = b"\x0f\x0d"


class _RequestEncoder(hpack.Encoder):
    """hpack's encoder, for the one shape of request this client sends: the fixed fields
    (method, scheme, authority, path, user-agent, content-type), then content-length.

    Once the fixed fields are all in the dynamic table, encoding them again changes nothing
    and yields the same bytes: that block is kept and reused while the table stays as it
    was, and content-length follows as a literal without indexing (a new length per request
    would otherwise churn both ends' dynamic tables). Anything else is hpack's own encode.
    About a third of h2's cost of starting a request was this encoding."""

    def __init__(self) -> None:
        super().__init__()
        self._fixed: tuple[tuple[bytes, bytes], ...] = ()
        self._block = b""
        self._table: tuple[int, int, int] = (-1, -1, -1)

    def _table_state(self) -> tuple[int, int, int]:
        t = self.header_table
        return len(t.dynamic_entries), t._current_size, t.maxsize

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        if (
            not isinstance(headers, list)
            or not headers
            or headers[-1][0] != b"content-length"
            or self.header_table.resized
        ):
            return super().encode(headers, huffman)
        length = bytes(headers[-1][1])
        if len(length) >= 127:  # never for a body length; keeps the one-byte length prefix
            return super().encode(headers, huffman)
        fixed = tuple((bytes(k), bytes(v)) for k, v in headers[:-1])
        state = self._table_state()
        if fixed != self._fixed or state != self._table:
            block = super().encode(list(fixed), huffman)
            if self._table_state() == state:  # nothing was added: these bytes stand
                self._fixed, self._block, self._table = fixed, block, state
            else:
                self._fixed, self._block, self._table = (), b"", (-1, -1, -1)
        else:
            block = self._block
        return block + _CONTENT_LENGTH_LITERAL + bytes((len(length),)) + length


class _Stream:
    """One request on the wire: its deadline, the body still to send, the response so far."""

    __slots__ = ("body", "deadline", "headers", "offset", "status", "timeout", "to_send")

    def __init__(self, deadline: float, timeout: float, to_send: bytes) -> None:
        self.deadline = deadline
        self.timeout = timeout
        self.to_send = to_send  # the request body; sent up to ``offset``
        self.offset = 0
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()


class H2ClientSession:
    """One HTTP/2 connection, client side (the connection preface is queued at once)."""

    protocol = "h2"

    def __init__(self, authority: bytes, max_response_bytes: int) -> None:
        self._max_response = max_response_bytes
        self._h2 = h2.connection.H2Connection(_CONFIG)
        self._h2.encoder = _RequestEncoder()  # before anything is encoded
        self._h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: max(65_535, max_response_bytes),
            },
        )
        self._h2.initiate_connection()
        self._head = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", authority)]
        self._tail = [(b"user-agent", USER_AGENT), (b"content-type", b"application/json")]
        self._streams: dict[int, _Stream] = {}
        self._sending: set[int] = set()  # streams whose body waits for window
        self._pings: dict[int, tuple[float, float]] = {}  # id → (deadline, timeout)
        self._ping_count = 0
        self._goaway_last: int | None = None
        self._goaway_sent = False
        self._inbox = bytearray()  # an incomplete frame (frames are split here to catch GOAWAY)
        self.ended: str | None = None  # why the session is over, once it is

    # -- what the driver looks at -------------------------------------------------------------

    @property
    def usable(self) -> bool:
        """New requests may start: not ended, no GOAWAY received."""
        return self.ended is None and self._goaway_last is None

    @property
    def active(self) -> int:
        return len(self._streams)

    def capacity(self, cap: int) -> int:
        """Requests at once: ``cap`` (ours), bounded by the server's MAX_CONCURRENT_STREAMS."""
        return max(1, min(cap, self._h2.remote_settings.max_concurrent_streams))

    def next_deadline(self) -> float | None:
        best: float | None = None
        for st in self._streams.values():
            if best is None or st.deadline < best:
                best = st.deadline
        for deadline, _ in self._pings.values():
            if best is None or deadline < best:
                best = deadline
        return best

    def data_to_send(self) -> bytes:
        return self._h2.data_to_send()

    # -- requests and PINGs -------------------------------------------------------------------

    def start_request(self, path: str, body: bytes, now: float, timeout: float) -> int:
        """Queue ``POST path`` with ``body`` (application/json); returns its stream id.

        Raises :class:`ConnectionLost` after GOAWAY or the end of the session.
        """
        if not self.usable:
            raise ConnectionLost(self.ended or "the server sent GOAWAY")
        conn = self._h2
        sid = conn.get_next_available_stream_id()
        headers = [
            *self._head,
            (b":path", path.encode("ascii")),
            *self._tail,
            (b"content-length", str(len(body)).encode()),
        ]
        try:
            conn.send_headers(sid, headers, end_stream=not body)
        except h2.exceptions.ProtocolError as exc:  # e.g. over the server's stream limit
            raise LocalProtocolError(f"HTTP/2 request refused by h2: {exc}") from exc
        st = _Stream(now + timeout, timeout, body)
        self._streams[sid] = st
        if body:
            self._sending.add(sid)
            self._pump(sid, st)
        return sid

    def ping(self, now: float, timeout: float) -> int:
        """Send a PING; :class:`PingAnswered` or :class:`PingFailed` follows with its id."""
        if self.ended is not None:
            raise ConnectionLost(self.ended)
        self._ping_count += 1
        pid = self._ping_count
        self._h2.ping(pid.to_bytes(8, "big"))
        self._pings[pid] = (now + timeout, timeout)
        return pid

    def _pump(self, sid: int, st: _Stream) -> None:
        """Send as much of ``st``'s body as the windows allow."""
        conn = self._h2
        body = st.to_send
        total = len(body)
        while st.offset < total:
            try:
                window = conn.local_flow_control_window(sid)
            except h2.exceptions.StreamClosedError:
                self._sending.discard(sid)
                return
            size = min(window, conn.max_outbound_frame_size, total - st.offset)
            if size <= 0:
                return  # a WINDOW_UPDATE or SETTINGS resumes it
            start = st.offset
            chunk = body if size == total else body[start : start + size]
            st.offset = start + size
            conn.send_data(sid, chunk, end_stream=st.offset == total)
        self._sending.discard(sid)

    def _pump_all(self) -> None:
        for sid in list(self._sending):
            st = self._streams.get(sid)
            if st is None:
                self._sending.discard(sid)
            else:
                self._pump(sid, st)

    # -- input --------------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> list[ClientEvent]:
        """Feed what the peer sent (``b""``: EOF); returns what happened."""
        if self.ended is not None:
            return []
        if not data:
            return self.end("closed by the peer", graceful=False)
        events: list[ClientEvent] = []
        if self._inbox:
            self._inbox += data
            buf: bytes | bytearray = self._inbox
        else:
            buf = data
        limit = self._h2.local_settings.max_frame_size
        start = 0  # of the frames not yet given to h2
        pos = 0
        size = len(buf)
        try:
            while size - pos >= _FRAME_HEADER:
                length = int.from_bytes(buf[pos : pos + 3], "big")
                if length > limit:
                    raise H2ConnectionError(ErrorCodes.FRAME_SIZE_ERROR, f"frame of {length} bytes")
                end = pos + _FRAME_HEADER + length
                if size < end:
                    break
                if buf[pos + 3] == _GOAWAY:
                    if pos > start:
                        self._feed(bytes(buf[start:pos]), events)
                    self._goaway(bytes(buf[pos + _FRAME_HEADER : end]), events)
                    start = end
                pos = end
            if pos > start:
                self._feed(buf[start:pos] if start or pos < size else buf, events)
        except H2ConnectionError as exc:  # the peer's error (ours would propagate: a bug)
            self._say_goaway(exc.code)
            events += self.end(f"protocol error: {exc.reason}", graceful=True)
            return events
        if pos == size:
            self._inbox.clear()
        elif buf is self._inbox:
            del self._inbox[:pos]
        else:
            self._inbox += buf[pos:]
        return events

    def _feed(self, data: bytes | bytearray, events: list[ClientEvent]) -> None:
        try:
            received = self._h2.receive_data(bytes(data))
        except h2.exceptions.ProtocolError as exc:
            self._goaway_sent = True  # h2 has queued its own GOAWAY
            raise H2ConnectionError(exc.error_code, f"{type(exc).__name__}: {exc}") from exc
        for event in received:
            if self.ended is not None:
                return
            self._event(event, events)

    def _event(self, event: h2.events.Event, events: list[ClientEvent]) -> None:
        streams = self._streams
        if isinstance(event, h2.events.DataReceived):
            sid = event.stream_id
            self._h2.acknowledge_received_data(event.flow_controlled_length, sid)
            st = streams.get(sid)
            if st is not None and event.data:
                st.body += event.data
                if len(st.body) > self._max_response:
                    del streams[sid]
                    self._sending.discard(sid)
                    with contextlib.suppress(h2.exceptions.StreamClosedError):  # both ends done
                        self._h2.reset_stream(sid, ErrorCodes.CANCEL)
                    events.append(RequestFailed(sid, StreamRefused("response body too large")))
        elif isinstance(event, h2.events.ResponseReceived):
            st = streams.get(event.stream_id)
            if st is not None:
                st.headers = [(k, v) for k, v in event.headers]
                st.status = _status(st.headers)
        elif isinstance(event, h2.events.StreamEnded):
            sid = event.stream_id
            st = streams.pop(sid, None)
            if st is not None:
                if st.offset < len(st.to_send):  # answered early: the rest is not wanted
                    self._sending.discard(sid)
                    with contextlib.suppress(h2.exceptions.StreamClosedError):
                        self._h2.reset_stream(sid, ErrorCodes.NO_ERROR)
                response = Response(st.status, st.headers, bytes(st.body))
                events.append(ResponseReceived(sid, response))
        elif isinstance(event, h2.events.StreamReset):
            sid = event.stream_id
            self._sending.discard(sid)
            if streams.pop(sid, None) is not None:
                code = _code_name(event.error_code)
                events.append(
                    RequestFailed(sid, StreamRefused(f"stream reset by the peer: {code}"))
                )
        elif isinstance(event, h2.events.PingAckReceived):
            pid = int.from_bytes(event.ping_data, "big")
            if self._pings.pop(pid, None) is not None:
                events.append(PingAnswered(pid))
        elif isinstance(event, h2.events.WindowUpdated):
            if self._sending:
                self._pump_all()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            if self._sending:
                self._pump_all()
            events.append(SessionChanged())
        elif isinstance(event, h2.events.ConnectionTerminated):  # pragma: no cover - see _goaway
            self._goaway_last = event.last_stream_id or 0

    def _goaway(self, payload: bytes, events: list[ClientEvent]) -> None:
        if len(payload) < 8:
            raise H2ConnectionError(ErrorCodes.FRAME_SIZE_ERROR, "GOAWAY frame too short")
        last = int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF
        code = int.from_bytes(payload[4:8], "big")
        if self._goaway_last is None or last < self._goaway_last:
            self._goaway_last = last
        for sid in [sid for sid in self._streams if sid > last]:
            del self._streams[sid]
            self._sending.discard(sid)
            events.append(RequestFailed(sid, StreamRefused(f"stream {sid} refused by GOAWAY")))
        if code != ErrorCodes.NO_ERROR:
            detail = payload[8:].decode("utf-8", "replace")
            log.info("peer sent GOAWAY %s %s", _code_name(code), detail)
        events.append(SessionChanged())

    def handle_timeout(self, now: float) -> list[ClientEvent]:
        if self.ended is not None:
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
        if self.ended is not None:
            return []
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
        """Queue our one GOAWAY (h2 would send one per call)."""
        if not self._goaway_sent:
            self._goaway_sent = True
            self._h2.close_connection(code)


def _status(headers: list[tuple[bytes, bytes]]) -> int:
    """The response's ``:status`` (RFC 9113 §8.3.2: exactly one, three digits), or a protocol
    error of the peer."""
    for key, value in headers:
        if key == b":status":
            if len(value) == 3 and value.isdigit() and value[0] != ord("0"):
                return int(value)
            break
    raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, "response without a valid :status")


def _code_name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return f"0x{code:x}"
