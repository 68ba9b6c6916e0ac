"""HTTP/2 adapter on h2: bytes from a :class:`ByteStream` → :class:`Handler` calls.

h2 owns the protocol (frame parsing, HPACK, stream states, flow-control arithmetic, header
validation, automatic SETTINGS/PING acknowledgements). This module adds what h2 leaves to its
user, and the bounds h2 does not enforce:

* a frame scanner in front of h2 that splits the input at frame boundaries, so every frame is
  checked before h2 buffers it: an over-long frame header is refused at once (h2 would buffer
  the whole announced length first), a header block (HEADERS + CONTINUATION) is bounded in
  bytes, frames and time (CONTINUATION flood, slow header block), and floods are counted per
  ``h2_rate_window``: RST_STREAM (rapid reset, CVE-2023-44487, plus the resets the client makes
  us send), SETTINGS, PING, PRIORITY, empty DATA, DATA on streams already reset or finished,
  and pointless WINDOW_UPDATE frames. A flood ends in GOAWAY ENHANCE_YOUR_CALM;
* RFC 9113 error codes where h2 answers differently: DATA/HEADERS after END_STREAM both ways is
  a connection error STREAM_CLOSED (§5.1), a SETTINGS ACK with a payload FRAME_SIZE_ERROR
  (§6.5), an undecodable field block COMPRESSION_ERROR (§4.3);
* MAX_CONCURRENT_STREAMS as a stream error: h2 would answer an extra stream with a connection
  error, so h2 only keeps a backstop above the advertised limit and extra streams get
  REFUSED_STREAM here (too many of those: GOAWAY);
* the header-list limit: h2/hpack stop decoding past ``h2_max_decoded_header_list`` (GOAWAY
  ENHANCE_YOUR_CALM, the HPACK state is lost); a list over the advertised
  ``max_header_bytes`` (RFC 9113 §6.5.2 size: name + value + 32 per field) gets 431;
* content-length checked per stream (a mismatch resets that stream with PROTOCOL_ERROR
  instead of h2's connection error), the body limit (413), timeouts (preface, header block,
  body, a response stuck on a closed window, idle);
* flow control both ways: the connection window is reopened for every DATA byte, stream windows
  as bodies are buffered while the connection holds less than ``h2_body_buffer_budget`` of them
  (the oldest body always progresses); responses go out as the peer's windows allow;
* graceful shutdown (:meth:`H2Session.goaway` or :class:`ShutdownRequested` from ``read``):
  GOAWAY NO_ERROR with the last stream id, in-flight streams finish, newer ones are refused.
  h2 cannot do this itself (sending GOAWAY closes its state machine, python-hyper/h2#1181), so
  the first GOAWAY is written by hand and h2's own comes last.

An early answer (from ``handler.head``, or 413) is sent at once; the rest of the request body is
read and dropped while the whole body stays within ``max_body`` + :data:`DISCARD_LIMIT` (with
content-length still checked), and a bigger body is cut short with RST_STREAM NO_ERROR once the
answer is out (RFC 9113 §8.1). Resetting every early answer at once would also be allowed, but
curl 7.88 reports an error instead of the answer when it sees that reset mid-upload (so a
1 MiB + 1 byte upload would not show its 413), and a peer's later frames on the stream (a
content-length mismatch, a WINDOW_UPDATE overflow) could no longer get the right stream error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
from h2.errors import ErrorCodes
from hyperframe.frame import GoAwayFrame

from nvpair_wm.http.core import (
    ByteStream,
    Handler,
    Limits,
    Request,
    Response,
    ShutdownRequested,
    content_length_of,
    error_response,
    path_of,
    request_timeout,
    too_large,
)

__all__ = ["DISCARD_LIMIT", "H2_PREFACE", "H2Session", "serve_h2"]

log = logging.getLogger(__name__)

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

#: After an early answer the request body is read and dropped while it stays within the body
#: limit plus this much; a bigger body is cut short with RST_STREAM NO_ERROR.
DISCARD_LIMIT = 64 * 1024

# Frame types and flags (RFC 9113 §6).
_DATA, _HEADERS, _PRIORITY, _RST_STREAM, _SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
_PUSH_PROMISE, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
_END_STREAM, _ACK, _END_HEADERS = 0x1, 0x1, 0x4

_NO_BODY_STATUSES = frozenset({204, 304})
# Response fields from the handler are checked here: h2 sends CR/LF in a value unchanged.
_FIELD_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(rb"[\x00\r\n]")
_ENDED_MEMORY = 1024  # closed stream ids remembered for RFC 9113 §5.1 connection errors
# Connection-specific fields are malformed in HTTP/2 (RFC 9113 §8.2.2); framing is ours.
_DROPPED_RESPONSE_FIELDS = frozenset(
    {
        b"connection",
        b"content-length",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
        b"te",
    }
)


async def serve_h2(
    stream: ByteStream,
    handler: Handler,
    limits: Limits,
    *,
    preface: bytes = b"",
) -> None:
    """Serve HTTP/2 on ``stream`` until the connection is done. Never closes ``stream``.

    ``preface`` holds bytes the server already read (while sniffing for prior knowledge).
    """
    session = H2Session(stream, handler, limits, preface=preface)
    await session.run()


def _is_hpack_error(exc: h2.exceptions.ProtocolError) -> bool:
    """h2 reports an undecodable field block as PROTOCOL_ERROR; RFC 9113 §4.3 wants
    COMPRESSION_ERROR (an oversized list stays h2's ENHANCE_YOUR_CALM)."""
    cause = exc.__cause__
    return (
        type(exc) is h2.exceptions.ProtocolError
        and isinstance(cause, hpack.HPACKError)
        and not isinstance(cause, hpack.OversizedHeaderListError)
    )


class _Abort(Exception):
    """End the connection with GOAWAY ``code`` (abuse, timeout or a protocol error of ours)."""

    def __init__(self, code: ErrorCodes, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class _Rate:
    """A counter over fixed windows of ``window`` seconds; :meth:`hit` says when it overflows."""

    __slots__ = ("count", "limit", "start", "window")

    def __init__(self, window: float, limit: int) -> None:
        self.window = window
        self.limit = limit
        self.start = float("-inf")
        self.count = 0

    def hit(self, now: float) -> bool:
        if now - self.start >= self.window:
            self.start = now
            self.count = 0
        self.count += 1
        return self.count > self.limit


@dataclass(slots=True)
class _Frame:
    type: int  # -1 for the connection preface
    flags: int
    stream_id: int
    length: int
    raw: bytes


class _FrameScanner:
    """Splits inbound bytes into whole frames before h2 sees them (sans-IO).

    Holds at most one incomplete frame (≤ ``max_frame_size`` + 9 bytes), refuses an over-long
    frame from its header alone, and bounds each header block in bytes and frames; the caller
    bounds it in time through :attr:`block_started`.
    """

    def __init__(self, max_frame_size: int, max_block_bytes: int, max_continuations: int) -> None:
        self.max_frame_size = max_frame_size
        self.max_block_bytes = max_block_bytes
        self.max_continuations = max_continuations
        self._buf = bytearray()
        self._preface_left = len(H2_PREFACE)
        self.block_started: float | None = None  # a header block is open since then
        self._block_bytes = 0
        self._block_continuations = 0

    def feed(self, data: bytes, now: float) -> Iterator[_Frame]:
        self._buf += data
        if self._preface_left and self._buf:
            take = min(self._preface_left, len(self._buf))
            raw = bytes(self._buf[:take])
            del self._buf[:take]
            self._preface_left -= take
            yield _Frame(-1, 0, 0, take, raw)
        while not self._preface_left and len(self._buf) >= 9:
            length = int.from_bytes(self._buf[0:3], "big")
            if length > self.max_frame_size:
                raise _Abort(ErrorCodes.FRAME_SIZE_ERROR, f"frame of {length} bytes")
            if len(self._buf) < 9 + length:
                return
            ftype, flags = self._buf[3], self._buf[4]
            stream_id = int.from_bytes(self._buf[5:9], "big") & 0x7FFF_FFFF
            raw = bytes(self._buf[: 9 + length])
            del self._buf[: 9 + length]
            self._track_header_block(ftype, flags, length, now)
            yield _Frame(ftype, flags, stream_id, length, raw)

    def _track_header_block(self, ftype: int, flags: int, length: int, now: float) -> None:
        if ftype in (_HEADERS, _PUSH_PROMISE) and self.block_started is None:
            if not flags & _END_HEADERS:
                self.block_started = now
                self._block_bytes = length
                self._block_continuations = 0
        elif ftype == _CONTINUATION and self.block_started is not None:
            self._block_bytes += length
            self._block_continuations += 1
            if self._block_bytes > self.max_block_bytes:
                raise _Abort(ErrorCodes.ENHANCE_YOUR_CALM, "header block too large")
            if self._block_continuations > self.max_continuations:
                raise _Abort(ErrorCodes.ENHANCE_YOUR_CALM, "too many CONTINUATION frames")
            if flags & _END_HEADERS:
                self.block_started = None


@dataclass(slots=True, eq=False)
class _Stream:
    """What the adapter keeps per request stream, until both directions are done."""

    sid: int
    request: Request | None = None
    mode: str = "body"  # "body": buffering for complete(); "discard": answered early
    body: bytearray = field(default_factory=bytearray)
    received: int = 0  # DATA payload bytes, checked against request.content_length
    owed: int = 0  # flow-controlled bytes received whose stream window is not yet reopened
    remote_done: bool = False
    out: bytes | None = None  # response body still to send (None: no response yet)
    out_off: int = 0
    response_done: bool = False
    reset_after_send: ErrorCodes | None = None
    body_deadline: float | None = None
    send_deadline: float | None = None


class H2Session:
    """One HTTP/2 connection: :meth:`run` serves it, :meth:`goaway` shuts it down gracefully."""

    def __init__(
        self,
        stream: ByteStream,
        handler: Handler,
        limits: Limits,
        *,
        preface: bytes = b"",
    ) -> None:
        self._io = stream
        self._handler = handler
        self._limits = limits
        self._preface = preface
        self._max_body = min(handler.max_body, limits.max_body)
        self._discard_cap = self._max_body + DISCARD_LIMIT
        self._loop = asyncio.get_running_loop()
        self._conn = self._new_connection()
        self._scanner = _FrameScanner(
            limits.h2_max_frame_size,
            self._limits.h2_max_header_block_bytes,
            limits.h2_max_continuation_frames,
        )
        window = limits.h2_rate_window
        self._resets = _Rate(window, limits.h2_max_resets_per_window)
        self._control = _Rate(window, limits.h2_max_control_frames_per_window)
        self._refused = _Rate(window, self._limits.h2_max_refused_per_window)
        self._streams: dict[int, _Stream] = {}
        # Recently closed by END_STREAM both ways (bounded; older ids fall back to h2's rules).
        self._ended: dict[int, None] = {}
        self._buffered = 0  # request-body bytes held across streams
        self._conn_window = max(65535, self._limits.h2_connection_window)
        self._conn_owed = 0  # DATA bytes whose connection window is not yet reopened
        self._out = bytearray()  # frames of our own, ahead of h2's next output
        self._settings_seen = False
        self._started = self._loop.time()
        self._idle_since = self._started
        self._goaway_last: int | None = None  # set once a graceful GOAWAY went out
        self._drain_deadline: float | None = None
        self._done = False
        self._wake: asyncio.Future[None] | None = None
        self._read_task: asyncio.Task[bytes] | None = None

    # -- public -------------------------------------------------------------------------------

    @property
    def open_streams(self) -> int:
        """Streams the adapter still tracks (request or response in progress)."""
        return len(self._streams)

    def goaway(self) -> None:
        """Begin a graceful shutdown: GOAWAY NO_ERROR, finish in-flight streams, then return."""
        if self._goaway_last is not None or self._done:
            return
        last = self._conn.highest_inbound_stream_id
        self._goaway_last = last
        self._drain_deadline = self._loop.time() + self._limits.shutdown_grace
        self._out += self._conn.data_to_send()
        self._out += GoAwayFrame(0, last_stream_id=last, error_code=ErrorCodes.NO_ERROR).serialize()
        self._wakeup()

    async def run(self) -> None:
        """Serve until EOF, a GOAWAY (ours or the peer's), a timeout or a write failure."""
        try:
            await self._serve()
        except (ConnectionError, TimeoutError) as exc:
            log.debug("HTTP/2 connection ended: %r", exc)
        finally:
            self._done = True
            if self._read_task is not None and not self._read_task.done():
                self._read_task.cancel()
                await asyncio.gather(self._read_task, return_exceptions=True)

    # -- the loop -----------------------------------------------------------------------------

    def _new_connection(self) -> h2.connection.H2Connection:
        limits = self._limits
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        advertised = {
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: limits.h2_max_concurrent_streams,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: limits.max_header_bytes,
            h2.settings.SettingCodes.MAX_FRAME_SIZE: limits.h2_max_frame_size,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: limits.h2_initial_window_size,
        }
        conn.local_settings = h2.settings.Settings(client=False, initial_values=advertised)
        conn.max_inbound_frame_size = limits.h2_max_frame_size
        conn.decoder.max_header_list_size = self._limits.h2_max_decoded_header_list
        conn.initiate_connection()
        # h2 answers a stream over MAX_CONCURRENT_STREAMS with a connection error; we refuse it
        # with REFUSED_STREAM ourselves, so h2 keeps only a backstop. Streams are handled frame
        # by frame, so at most one stream above the advertised limit is ever open.
        backstop = dict(advertised)
        backstop[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] = (
            2 * limits.h2_max_concurrent_streams + 1
        )
        conn.local_settings = h2.settings.Settings(client=False, initial_values=backstop)
        extra = self._limits.h2_connection_window - 65535
        if extra > 0:
            conn.increment_flow_control_window(extra)
        return conn

    async def _serve(self) -> None:
        pending = self._preface
        while True:
            if self._goaway_last is not None and not self._done:
                self._check_drained()
            await self._flush()
            if self._done:
                return
            if pending:
                data: bytes | None = pending
                pending = b""
            else:
                data = await self._read(self._next_deadline())
            now = self._loop.time()
            try:
                if data is None:
                    self._on_timers(now)
                elif not data:
                    log.debug("HTTP/2 peer closed the connection")
                    return
                else:
                    self._receive(data, now)
            except _Abort as abort:
                log.info("HTTP/2 GOAWAY %s: %s", abort.code.name, abort.reason)
                self._close(abort.code, abort.reason.encode())
                self._done = True
            except h2.exceptions.ProtocolError as exc:
                log.info("HTTP/2 protocol error: %s", exc)
                if self._conn.state_machine.state is not h2.connection.ConnectionState.CLOSED:
                    # Raised by a call of ours, not by receive_data (which queues its GOAWAY).
                    self._close(ErrorCodes.INTERNAL_ERROR)
                elif _is_hpack_error(exc):
                    self._recode_goaway(ErrorCodes.COMPRESSION_ERROR)
                self._done = True

    def _recode_goaway(self, code: ErrorCodes) -> None:
        """Rewrite the error code of the GOAWAY h2 just queued (always its last 17 bytes)."""
        data = self._conn.data_to_send()
        if len(data) >= 17 and data[-17:-13] == b"\x00\x00\x08\x07":
            data = data[:-4] + int(code).to_bytes(4, "big")
        self._out += data

    async def _read(self, deadline: float | None) -> bytes | None:
        """Next chunk (b"" = EOF), or None when a deadline passed or :meth:`goaway` woke us."""
        if self._read_task is None:
            self._read_task = self._loop.create_task(self._io.read())
        self._wake = self._loop.create_future()
        timeout = None if deadline is None else max(0.0, deadline - self._loop.time())
        waiters: list[asyncio.Future[Any]] = [self._read_task, self._wake]
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        self._wake = None
        if not self._read_task.done():
            return None
        task, self._read_task = self._read_task, None
        try:
            return task.result()
        except ShutdownRequested:
            self.goaway()
            return None

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _flush(self) -> None:
        data = bytes(self._out) + self._conn.data_to_send()
        self._out.clear()
        if data:
            self._io.write(data)
            async with asyncio.timeout(self._limits.write_timeout):
                await self._io.drain()

    # -- timers -------------------------------------------------------------------------------

    def _next_deadline(self) -> float | None:
        limits = self._limits
        candidates: list[float] = []
        if not self._settings_seen:
            candidates.append(self._started + limits.header_timeout)
        if self._scanner.block_started is not None:
            candidates.append(self._scanner.block_started + limits.header_timeout)
        if not self._streams and self._scanner.block_started is None:
            candidates.append(self._idle_since + limits.idle_timeout)
        if self._drain_deadline is not None:
            candidates.append(self._drain_deadline)
        for st in self._streams.values():
            if st.body_deadline is not None:
                candidates.append(st.body_deadline)
            if st.send_deadline is not None:
                candidates.append(st.send_deadline)
        return min(candidates) if candidates else None

    def _on_timers(self, now: float) -> None:
        limits = self._limits
        if not self._settings_seen and now >= self._started + limits.header_timeout:
            raise _Abort(ErrorCodes.PROTOCOL_ERROR, "no connection preface in time")
        block = self._scanner.block_started
        if block is not None and now >= block + limits.header_timeout:
            raise _Abort(ErrorCodes.ENHANCE_YOUR_CALM, "header block not finished in time")
        if self._drain_deadline is not None and now >= self._drain_deadline:
            log.debug("HTTP/2 shutdown grace over with %d streams open", len(self._streams))
            self._finish_graceful()
            return
        idle = not self._streams and block is None
        if idle and now >= self._idle_since + limits.idle_timeout:
            log.debug("HTTP/2 connection idle: closing")
            self._close(ErrorCodes.NO_ERROR)
            self._done = True
            return
        for st in list(self._streams.values()):
            if st.body_deadline is not None and now >= st.body_deadline:
                st.body_deadline = None
                self._body_timed_out(st)
            if st.send_deadline is not None and now >= st.send_deadline:
                log.debug("HTTP/2 stream %d: peer's window stayed closed", st.sid)
                self._reset(st, ErrorCodes.CANCEL)

    def _body_timed_out(self, st: _Stream) -> None:
        if st.out is None:
            log.debug("HTTP/2 stream %d: request body too slow: 408", st.sid)
            self._release_body(st)
            st.mode = "discard"
            self._respond(st, request_timeout(), reset_after=ErrorCodes.NO_ERROR)
        else:
            self._end_discard(st)

    # -- receiving ----------------------------------------------------------------------------

    def _receive(self, data: bytes, now: float) -> None:
        for frame in self._scanner.feed(data, now):
            if frame.type >= 0:
                self._account(frame, now)
            for event in self._conn.receive_data(frame.raw):
                self._dispatch(event, now)
                if self._done:
                    return

    def _account(self, frame: _Frame, now: float) -> None:
        """Check the handshake order and count the frames that cost us without progress."""
        ftype = frame.type
        if not self._settings_seen:
            if ftype != _SETTINGS or frame.flags & _ACK:
                raise _Abort(ErrorCodes.PROTOCOL_ERROR, "the preface must end with SETTINGS")
            self._settings_seen = True
        if ftype == _SETTINGS and frame.flags & _ACK and frame.length:
            raise _Abort(ErrorCodes.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")  # §6.5
        if ftype in (_DATA, _HEADERS) and frame.stream_id in self._ended:
            # RFC 9113 §5.1: after END_STREAM both ways this is a connection error (h2 would
            # answer DATA with a stream error only).
            raise _Abort(ErrorCodes.STREAM_CLOSED, f"frame on closed stream {frame.stream_id}")
        if ftype == _RST_STREAM:
            if self._resets.hit(now):
                raise _Abort(ErrorCodes.ENHANCE_YOUR_CALM, "too many stream resets")
            return
        if ftype in (_SETTINGS, _PING, _PRIORITY) or ftype > _CONTINUATION:
            control = True
        elif ftype == _DATA:
            # Empty DATA moves nothing; DATA for a stream we no longer track (reset, refused,
            # finished) only makes h2 answer with RST_STREAM.
            empty = frame.length == 0 and not frame.flags & _END_STREAM
            control = empty or frame.stream_id not in self._streams
        elif ftype == _WINDOW_UPDATE:
            control = not self._waiting_for_window(frame.stream_id)
        else:
            control = False
        if control and self._control.hit(now):
            raise _Abort(ErrorCodes.ENHANCE_YOUR_CALM, "control frame flood")

    def _waiting_for_window(self, stream_id: int) -> bool:
        if stream_id:
            st = self._streams.get(stream_id)
            return st is not None and st.send_deadline is not None
        return any(st.send_deadline is not None for st in self._streams.values())

    def _dispatch(self, event: h2.events.Event, now: float) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self._on_request(event, now)
        elif isinstance(event, h2.events.DataReceived):
            self._on_data(event)
        elif isinstance(event, h2.events.StreamEnded):
            self._on_end(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            self._on_reset(event, now)
        elif isinstance(event, h2.events.WindowUpdated):
            self._on_window(event.stream_id)
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            if h2.settings.SettingCodes.INITIAL_WINDOW_SIZE in event.changed_settings:
                self._on_window(0)
        elif isinstance(event, h2.events.ConnectionTerminated):
            log.debug("HTTP/2 peer sent GOAWAY %s", event.error_code)
            self._done = True

    def _on_request(self, event: h2.events.RequestReceived, now: float) -> None:
        sid = event.stream_id
        if self._goaway_last is not None and sid > self._goaway_last:
            self._conn.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            return
        if self._conn.open_inbound_streams > self._limits.h2_max_concurrent_streams:
            self._conn.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            if self._refused.hit(now):
                raise _Abort(ErrorCodes.ENHANCE_YOUR_CALM, "too many refused streams")
            return
        self._disable_h2_length_check(sid)
        st = _Stream(sid)
        self._streams[sid] = st
        request, early = self._build_request(event.headers)
        st.request = request
        if early is None and request is not None:
            early = self._call(lambda: self._handler.head(request))
        if early is None and request is not None and (request.content_length or 0) > self._max_body:
            early = too_large(self._max_body)
        if early is not None:
            self._answer_early(st, early)
        if event.stream_ended is None and sid in self._streams:
            st.body_deadline = now + self._limits.body_timeout

    def _build_request(
        self, headers: list[tuple[bytes, bytes]]
    ) -> tuple[Request | None, Response | None]:
        """The :class:`Request` (h2 validated the pseudo-headers), or an answer instead of one."""
        size = 0
        pseudo: dict[bytes, bytes] = {}
        fields: list[tuple[bytes, bytes]] = []
        for name, value in headers:
            size += len(name) + len(value) + 32
            if name.startswith(b":"):
                pseudo[name] = value
            else:
                fields.append((name, value))
        if size > self._limits.max_header_bytes:
            return None, error_response(431, "request header fields too large")
        method = pseudo.get(b":method", b"").decode("ascii", "replace")
        if method == "CONNECT":
            return None, error_response(501, "CONNECT is not supported")
        authority = pseudo.get(b":authority")
        if authority is not None and not any(name == b"host" for name, _ in fields):
            fields.append((b"host", authority))
        try:
            length = content_length_of(fields)
        except ValueError:
            return None, error_response(400, "bad content-length")
        request = Request(
            method=method,
            path=path_of(pseudo.get(b":path", b"/")),
            headers=fields,
            peer_fingerprint=self._io.peer_fingerprint,
            protocol="h2",
            content_length=length,
        )
        return request, None

    def _disable_h2_length_check(self, sid: int) -> None:
        """Content-length is checked here, per stream; h2 would make a mismatch fatal."""
        h2_stream = self._conn.streams.get(sid)
        if h2_stream is not None and hasattr(h2_stream, "_expected_content_length"):
            h2_stream._expected_content_length = None

    def _on_data(self, event: h2.events.DataReceived) -> None:
        sid = event.stream_id
        data = event.data or b""
        flow = event.flow_controlled_length or 0
        self._ack_connection(flow)
        st = self._streams.get(sid)
        if st is None or st.remote_done:
            return
        st.received += len(data)
        st.owed += flow
        declared = st.request.content_length if st.request is not None else None
        if declared is not None and st.received > declared:
            self._malformed(st, "body longer than content-length")
            return
        if st.mode == "discard":
            if st.received > self._discard_cap:
                self._end_discard(st)
            else:
                self._settle_acks()
            return
        if st.received > self._max_body:
            self._release_body(st)
            self._answer_early(st, too_large(self._max_body))
            return
        st.body += data
        self._buffered += len(data)
        self._settle_acks()

    def _on_end(self, sid: int) -> None:
        st = self._streams.get(sid)
        if st is None:
            return
        st.remote_done = True
        st.body_deadline = None
        request = st.request
        if request is not None and request.content_length not in (None, st.received):
            self._malformed(st, "body shorter than content-length")
            return
        if st.mode == "body" and st.out is None and request is not None:
            body = bytes(st.body)
            self._release_body(st)
            self._respond(st, self._call(lambda: self._handler.complete(request, body)))
        self._forget_if_done(st)

    def _on_reset(self, event: h2.events.StreamReset, now: float) -> None:
        st = self._streams.get(event.stream_id)
        if st is not None:
            self._drop(st)
        if not event.remote_reset and self._resets.hit(now):
            # h2 reset a stream because of the peer's frames (e.g. a window overflow): the
            # same cost as a client RST_STREAM ("MadeYouReset"), so the same budget.
            raise _Abort(ErrorCodes.ENHANCE_YOUR_CALM, "too many stream errors")

    def _on_window(self, stream_id: int) -> None:
        if stream_id:
            st = self._streams.get(stream_id)
            if st is not None:
                self._pump(st)
            return
        for st in list(self._streams.values()):
            if st.out is not None and not st.response_done:
                self._pump(st)

    # -- flow control of request bodies ------------------------------------------------------

    def _ack_connection(self, flow: int) -> None:
        """Return connection window for every DATA byte at once (batched to half a window).

        Only stream windows are withheld (see :meth:`_settle_acks`): a connection window
        held back would be spent by the peer on younger streams and starve the oldest one.
        """
        self._conn_owed += flow
        if self._conn_owed >= self._conn_window // 2:
            self._conn.increment_flow_control_window(self._conn_owed)
            self._conn_owed = 0

    def _settle_acks(self) -> None:
        """Reopen stream windows: for bodies being dropped always; for buffered bodies while
        the connection holds under ``h2_body_buffer_budget`` of them, and for the oldest one
        in any case (so one body always completes). Batched to half a stream window.

        Memory per connection stays under the budget + ``max_body`` + one initial stream
        window per open stream.
        """
        half = max(1, self._limits.h2_initial_window_size // 2)
        under_budget = self._buffered <= self._limits.h2_body_buffer_budget
        oldest = True
        for st in list(self._streams.values()):
            receiving = not st.remote_done
            if receiving and st.owed >= half and (st.mode == "discard" or oldest or under_budget):
                with contextlib.suppress(h2.exceptions.StreamClosedError):
                    self._conn.increment_flow_control_window(st.owed, stream_id=st.sid)
                st.owed = 0
            if receiving and st.mode == "body":
                oldest = False

    def _release_body(self, st: _Stream) -> None:
        self._buffered -= len(st.body)
        st.body = bytearray()
        self._settle_acks()

    # -- sending ------------------------------------------------------------------------------

    def _call(self, fn: Callable[[], Response | None]) -> Response | None:
        """Run a handler method; a crash answers 500 instead of ending the connection."""
        try:
            return fn()
        except Exception:
            log.exception("HTTP/2 handler failed")
            return error_response(500, "internal error")

    def _respond(
        self, st: _Stream, response: Response | None, reset_after: ErrorCodes | None = None
    ) -> None:
        if response is None:  # head() said go on where an answer was due: treat as a bug
            response = error_response(500, "internal error")
        if not all(
            _FIELD_NAME.fullmatch(k) and not _BAD_VALUE.search(v) for k, v in response.headers
        ):
            log.error("HTTP/2 handler returned invalid header fields: %r", response.headers)
            response = error_response(500, "internal error")
        status = response.status
        headers: list[tuple[bytes, bytes]] = [(b":status", str(status).encode())]
        headers += [
            (k, v) for k, v in response.headers if k.lower() not in _DROPPED_RESPONSE_FIELDS
        ]
        body = response.body
        if status in _NO_BODY_STATUSES:
            body = b""
        else:
            headers.append((b"content-length", str(len(body)).encode()))
        if st.request is not None and st.request.method == "HEAD":
            body = b""
        st.out = body
        st.out_off = 0
        st.reset_after_send = reset_after
        self._conn.send_headers(st.sid, headers, end_stream=not body)
        if not body:
            self._response_sent(st)
        else:
            self._pump(st)

    def _answer_early(self, st: _Stream, response: Response | None) -> None:
        """Answer before the body is complete; drop the rest unless it is known to be too big."""
        st.mode = "discard"
        declared = st.request.content_length if st.request is not None else None
        too_big = declared is not None and declared > self._discard_cap
        self._respond(st, response, reset_after=ErrorCodes.NO_ERROR if too_big else None)

    def _pump(self, st: _Stream) -> None:
        """Send as much of the response body as the peer's windows allow."""
        out = st.out
        if out is None or st.response_done:
            return
        while st.out_off < len(out):
            window = self._conn.local_flow_control_window(st.sid)
            size = min(window, self._conn.max_outbound_frame_size, len(out) - st.out_off)
            if size <= 0:
                if st.send_deadline is None:
                    st.send_deadline = self._loop.time() + self._limits.write_timeout
                return
            end = st.out_off + size
            self._conn.send_data(st.sid, out[st.out_off : end], end_stream=end == len(out))
            st.out_off = end
            st.send_deadline = None
        self._response_sent(st)

    def _response_sent(self, st: _Stream) -> None:
        st.response_done = True
        st.send_deadline = None
        st.out = b""
        if st.reset_after_send is not None and not st.remote_done:
            self._reset(st, st.reset_after_send)
            return
        self._forget_if_done(st)

    def _end_discard(self, st: _Stream) -> None:
        """Stop reading a body we do not want: reset now, or once the answer is out."""
        st.body_deadline = None
        if st.response_done:
            self._reset(st, ErrorCodes.NO_ERROR)
        else:
            st.reset_after_send = ErrorCodes.NO_ERROR

    def _malformed(self, st: _Stream, reason: str) -> None:
        log.debug("HTTP/2 stream %d malformed: %s", st.sid, reason)
        self._reset(st, ErrorCodes.PROTOCOL_ERROR)
        if self._resets.hit(self._loop.time()):
            raise _Abort(ErrorCodes.ENHANCE_YOUR_CALM, "too many malformed requests")

    def _reset(self, st: _Stream, code: ErrorCodes) -> None:
        with contextlib.suppress(h2.exceptions.StreamClosedError):
            self._conn.reset_stream(st.sid, code)
        self._drop(st)

    def _drop(self, st: _Stream) -> None:
        if self._streams.pop(st.sid, None) is None:
            return
        if st.body:
            self._release_body(st)
        if not self._streams:
            self._idle_since = self._loop.time()

    def _forget_if_done(self, st: _Stream) -> None:
        if st.response_done and st.remote_done:
            self._ended[st.sid] = None
            if len(self._ended) > _ENDED_MEMORY:
                del self._ended[next(iter(self._ended))]
            self._drop(st)

    # -- graceful shutdown --------------------------------------------------------------------

    def _check_drained(self) -> None:
        if not self._streams and self._scanner.block_started is None:
            self._finish_graceful()

    def _finish_graceful(self) -> None:
        self._close(ErrorCodes.NO_ERROR)
        self._done = True

    def _close(self, code: ErrorCodes, debug: bytes = b"") -> None:
        """Queue the final GOAWAY; its last stream id never exceeds a graceful one sent before."""
        last = self._conn.highest_inbound_stream_id
        if self._goaway_last is not None:
            last = min(last, self._goaway_last)
        self._conn.close_connection(code, additional_data=debug or None, last_stream_id=last)
