"""The HTTP/2 server session (sans-IO): bytes and ``now`` in; bytes and a deadline out.

What it shares with the client is :class:`~nvpair_wm.proto.h2.session.H2Session`; the other
pieces are listed in :mod:`nvpair_wm.proto.h2`. Its rules beyond theirs:

* A stream is tracked from its HEADERS until both directions are done
  (:class:`~nvpair_wm.proto.h2.streams.StreamState`), then remembered by how it closed
  (:class:`~nvpair_wm.proto.h2.streams.StreamEnd`) so that late frames get the error §5.1
  asks for. Frames on idle streams, even or decreasing stream ids for new streams,
  PUSH_PROMISE: connection PROTOCOL_ERROR.
* Every error the peer causes is a stream error (RST_STREAM, counted in the reset budget:
  "MadeYouReset") or a connection error (:class:`H2ConnectionError` → GOAWAY with its code).
* A stream over MAX_CONCURRENT_STREAMS gets REFUSED_STREAM; a header list over the
  advertised ``max_header_bytes`` gets 431; content-length is checked per stream (a mismatch
  resets it with PROTOCOL_ERROR); timeouts: preface, header block, body, a response stuck on
  a closed window, idle. Responses go out as the peer's windows allow.
* An early answer (from ``handler.head``, or 413) is sent at once; the rest of the body is
  read and dropped while the whole body stays within ``max_body`` +
  :data:`DISCARD_PAST_LIMIT_BYTES`, and a bigger one is cut short with RST_STREAM NO_ERROR once
  the answer is out (§8.1).
* Graceful shutdown (:meth:`H2ServerSession.shutdown`): GOAWAY NO_ERROR with the last stream
  id, in-flight streams finish, newer ones are refused, then a final GOAWAY.

The driver uses it as a :class:`~nvpair_wm.proto.sessions.ServerSession`.
"""

from __future__ import annotations

import logging

from h2.errors import ErrorCodes

from nvpair_wm.errors import H2ConnectionError
from nvpair_wm.http.core import (
    Handler,
    Limits,
    Request,
    Response,
    error_response,
    request_timeout,
    too_large,
)
from nvpair_wm.proto.h2.budgets import FloodBudgets
from nvpair_wm.proto.h2.frames import (
    ACK,
    DATA,
    END_HEADERS,
    END_STREAM,
    H2_PREFACE,
    HEADERS,
    PADDED,
    PRIORITY_FLAG,
    SETTINGS,
    WINDOW_UPDATE,
    frame_header,
    goaway_frame,
    header_block_frames,
    rst_stream_frame,
    unpad,
)
from nvpair_wm.proto.h2.hpack import encode_fields
from nvpair_wm.proto.h2.session import ConnectionEvent, ConnectionState, H2Session
from nvpair_wm.proto.h2.settings import DEFAULT_WINDOW, PeerSettings, server_settings_frame
from nvpair_wm.proto.h2.streams import (
    BodyMode,
    Stream,
    StreamEnd,
    StreamEvent,
    StreamState,
    parse_request,
    response_fields,
    trailers_problem,
    valid_fields,
)
from nvpair_wm.proto.h2.windows import ReceiveWindows

__all__ = ["DISCARD_PAST_LIMIT_BYTES", "H2ServerSession"]

log = logging.getLogger(__name__)

#: After an early answer the request body is read and dropped while it stays within the body
#: limit plus this many bytes; a bigger body is cut short with RST_STREAM NO_ERROR.
DISCARD_PAST_LIMIT_BYTES = 64 * 1024

_CLOSED_MEMORY = 1024  # closed stream ids remembered for the §5.1 rules
_PARSED_REMEMBERED = 16  # requests parsed from header lists the decoder remembered
_BARE_HEADERS: dict[int, tuple[bytes, bytes]] = {}  # _bare_headers' (cheaper than an lru_cache)
# The stream events and states the per-request path names, looked up once (an attribute of an
# Enum class is looked up in Python code).
_RECV_END_STREAM = StreamEvent.RECV_END_STREAM
_SEND_HEADERS = StreamEvent.SEND_HEADERS
_SEND_END_STREAM = StreamEvent.SEND_END_STREAM
_HALF_CLOSED_LOCAL = StreamState.HALF_CLOSED_LOCAL
_HALF_CLOSED_REMOTE = StreamState.HALF_CLOSED_REMOTE
_CLOSED = StreamState.CLOSED
_OPEN_CONNECTION = ConnectionState.OPEN
_CLOSED_CONNECTION = ConnectionState.CLOSED


class H2ServerSession(H2Session[Stream]):
    """One HTTP/2 connection, server side."""

    __slots__ = (
        "_budgets",
        "_closed",
        "_discard_cap",
        "_drain_deadline",
        "_goaway_last",
        "_handler",
        "_highest",
        "_idle_since",
        "_limits",
        "_max_body",
        "_parsed",
        "_preface_left",
        "_recv_initial",
        "_started",
        "_windows",
        "peer_fingerprint",
        "requests",
    )

    def __init__(
        self,
        handler: Handler,
        limits: Limits,
        peer_fingerprint: str | None,
        now: float,
        *,
        expect_preface: bool = True,
    ) -> None:
        super().__init__(
            [server_settings_frame(limits)],
            PeerSettings(),
            now,
            max_frame=limits.h2_max_frame_size,
            max_header_list=limits.h2_max_decoded_header_list,
            max_block=limits.h2_max_header_block_bytes,
            max_continuations=limits.h2_max_continuation_frames,
        )
        self._handler = handler
        self._limits = limits
        self.peer_fingerprint = peer_fingerprint
        self._max_body = min(handler.max_body, limits.max_body)
        self._discard_cap = self._max_body + DISCARD_PAST_LIMIT_BYTES
        self._preface_left = H2_PREFACE if expect_preface else b""
        self._windows = ReceiveWindows(self._out, limits)
        self._budgets = FloodBudgets(limits)
        # Until the peer acknowledges our SETTINGS it may assume the default window.
        self._recv_initial = max(DEFAULT_WINDOW, limits.h2_initial_window_size)
        self._closed: dict[int, StreamEnd] = {}  # stream id → how it closed (bounded, oldest out)
        self._parsed: dict[tuple[int, bytes], Request] = {}  # see _parse
        self._highest = 0  # the highest stream id the peer opened
        self._started = now
        self._idle_since = now
        self._goaway_last: int | None = None  # the last stream id of our graceful GOAWAY
        self._drain_deadline: float | None = None
        self.requests = 0

    # -- the driver's side --------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """The session is over: the driver flushes :meth:`data_to_send`, then closes."""
        return self.state is _CLOSED_CONNECTION

    @property
    def open_streams(self) -> int:
        """Streams the session still tracks (request or response in progress)."""
        return len(self._streams)

    def _draining(self) -> None:
        if not self._streams and self._block is None:  # nothing left in flight
            self._end(ErrorCodes.NO_ERROR)

    def receive_data(self, data: bytes, now: float) -> None:
        """Feed bytes from the peer (``b""``: the peer closed its side)."""
        if self.state is _CLOSED_CONNECTION:
            return
        self._now = now
        if not data:
            log.debug("HTTP/2 peer closed the connection")
            self._move(ConnectionEvent.END)
            return
        try:
            self._receive(data)
        except H2ConnectionError as abort:  # the peer's: GOAWAY with its code
            self._abort(abort)

    def shutdown(self, now: float) -> None:
        """Begin a graceful shutdown: GOAWAY NO_ERROR, finish in-flight streams, then done."""
        if self.state is not _OPEN_CONNECTION:
            return
        self._now = now
        self._move(ConnectionEvent.GOAWAY)
        self._goaway_last = self._highest
        self._drain_deadline = now + self._limits.shutdown_grace
        self._out.append(goaway_frame(self._highest, ErrorCodes.NO_ERROR))

    def next_deadline(self) -> float | None:
        limits = self._limits
        block = self._block
        idle = not self._streams and block is None
        if idle and self._drain_deadline is None and self._settings_seen:
            return self._idle_since + limits.idle_timeout  # between requests: the usual case
        times = [self._drain_deadline]
        if not self._settings_seen:
            times.append(self._started + limits.header_timeout)
        if block is not None:
            times.append(block.started + limits.header_timeout)
        if idle:
            times.append(self._idle_since + limits.idle_timeout)
        for st in self._streams.values():
            times += (st.body_deadline, st.send_deadline)
        return min((t for t in times if t is not None), default=None)

    def handle_timeout(self, now: float) -> None:
        if self.state is _CLOSED_CONNECTION:
            return
        self._now = now
        try:
            self._on_timers(now)
        except H2ConnectionError as abort:  # the peer's: GOAWAY with its code
            self._abort(abort)

    # -- errors -------------------------------------------------------------------------------

    def _abort(self, abort: H2ConnectionError) -> None:
        log.info("HTTP/2 GOAWAY %s: %s", ErrorCodes(abort.code).name, abort.reason)
        self._end(abort.code, abort.reason.encode())

    def _stream_error(self, sid: int, code: int, why: str = "") -> None:
        """RST_STREAM for a stream error the peer caused; such resets share the reset budget."""
        log.debug("HTTP/2 stream %d: %s %s", sid, ErrorCodes(code).name, why)
        st = self._streams.get(sid)
        if st is not None:
            self._reset(st, code)
        else:
            self._out.append(rst_stream_frame(sid, code))
            if sid in self._closed:  # a stream once open: what is in flight is dropped now
                self._remember(sid, StreamEnd.RESET_SENT)
        self._budgets.reset(self._now, "too many stream errors")

    # -- timers -------------------------------------------------------------------------------

    def _on_timers(self, now: float) -> None:
        limits = self._limits
        if not self._settings_seen and now >= self._started + limits.header_timeout:
            raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, "no connection preface in time")
        block = self._block
        if block is not None and now >= block.started + limits.header_timeout:
            raise H2ConnectionError(
                ErrorCodes.ENHANCE_YOUR_CALM, "header block not finished in time"
            )
        if self._drain_deadline is not None and now >= self._drain_deadline:
            log.debug("HTTP/2 shutdown grace over with %d streams open", len(self._streams))
            self._end(ErrorCodes.NO_ERROR)
            return
        idle = not self._streams and block is None
        if idle and now >= self._idle_since + limits.idle_timeout:
            log.debug("HTTP/2 connection idle: closing")
            self._end(ErrorCodes.NO_ERROR)
            return
        for st in list(self._streams.values()):
            if st.body_deadline is not None and now >= st.body_deadline:
                st.body_deadline = None
                if st.state is not StreamState.OPEN:  # answered already
                    self._end_discard(st)
                else:
                    log.debug("HTTP/2 stream %d: request body too slow: 408", st.sid)
                    self._release_body(st)
                    st.mode = BodyMode.DISCARD
                    self._respond(st, request_timeout(), reset_after=ErrorCodes.NO_ERROR)
            if st.send_deadline is not None and now >= st.send_deadline:
                log.debug("HTTP/2 stream %d: peer's window stayed closed", st.sid)
                self._reset(st, ErrorCodes.CANCEL)

    # -- receiving: frames --------------------------------------------------------------------

    def _receive(self, data: bytes) -> None:
        if self._preface_left:
            data = self._take_preface(data)
        reader = self._reader
        frames = reader.frames(data)
        streams = self._streams
        closed = _CLOSED_CONNECTION
        i, count = 0, len(frames)
        while i < count:
            ftype, flags, sid, payload = frames[i]
            i += 1
            # A request's own frames in their usual shape go straight to their handler: they
            # count in no budget and no rule of _frame can refuse them (see there).
            if self._block is not None or not self._settings_seen or flags & PADDED:
                self._frame(ftype, flags, sid, payload)
            elif (
                ftype == HEADERS
                and flags & (END_HEADERS | PRIORITY_FLAG) == END_HEADERS
                and sid > self._highest
                and sid & 1
            ):  # a whole header block opening a new stream
                if not flags & END_STREAM and not streams and i < count:
                    # With the DATA frame that ends the stream (END_STREAM its only flag) next
                    # in this read: a whole request, the way Go, curl and our own client send it.
                    dtype, dflags, dsid, body = frames[i]
                    if dtype == DATA and dflags == END_STREAM and dsid == sid:
                        if self._whole_request(sid, payload, body):
                            i += 1  # its DATA frame too (else the loop reads it next)
                        if self.state is closed:
                            return
                        continue
                self._on_header_block(sid, bool(flags & END_STREAM), payload, None)
            elif ftype == DATA and (payload or flags & END_STREAM) and sid in streams:
                self._on_data(flags, sid, payload)
            else:
                self._frame(ftype, flags, sid, payload)
            if self.state is closed:
                return
        if reader.error is not None:
            raise reader.error

    def _take_preface(self, data: bytes) -> bytes:
        """Match ``data`` against the rest of the client preface; what follows the preface."""
        expected = self._preface_left
        take = min(len(expected), len(data))
        if data[:take] != expected[:take]:
            raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, "invalid connection preface")
        self._preface_left = expected[take:]
        return data[take:]

    def _frame(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        """One frame: the protocol's rules that hold for every frame, its flood budget, the
        rules of its type (:data:`FRAME_RULES`), then its handler."""
        if not self._settings_seen:
            if ftype != SETTINGS or flags & ACK:
                raise H2ConnectionError(
                    ErrorCodes.PROTOCOL_ERROR, "the preface must end with SETTINGS"
                )
            self._settings_seen = True
        ended = sid <= self._highest and self._closed.get(sid) is StreamEnd.ENDED
        if ended and ftype in (DATA, HEADERS):
            # RFC 9113 §5.1: after END_STREAM both ways this is a connection error.
            raise H2ConnectionError(ErrorCodes.STREAM_CLOSED, f"frame on closed stream {sid}")
        # A request's own frames (HEADERS opening a new stream; DATA that moves bytes or ends
        # an open stream) count in no budget.
        if not (
            (ftype == HEADERS and sid > self._highest)
            or (ftype == DATA and (payload or flags & END_STREAM) and sid in self._streams)
        ):
            waiting = ftype == WINDOW_UPDATE and self._waiting_for_window(sid)
            self._budgets.account(ftype, self._now, waiting_for_window=waiting)
        self._dispatch(ftype, flags, sid, payload)  # (an unknown type counted in the budgets)

    def _on_goaway(self, flags: int, sid: int, payload: bytes) -> None:
        log.debug("HTTP/2 peer sent GOAWAY %d", int.from_bytes(payload[4:8], "big"))
        self._move(ConnectionEvent.END)

    def _waiting_for_window(self, stream_id: int) -> bool:
        if stream_id:
            st = self._streams.get(stream_id)
            return st is not None and st.send_deadline is not None
        return any(st.send_deadline is not None for st in self._streams.values())

    def _not_open(self, sid: int) -> None:
        """DATA or trailers for a stream once open, no longer tracked (§5.1): dropped after
        our RST_STREAM (they were in flight), else a stream error STREAM_CLOSED. (After
        END_STREAM both ways :meth:`_frame` made them a connection error already.)"""
        if self._closed.get(sid) is not StreamEnd.RESET_SENT:
            self._stream_error(sid, ErrorCodes.STREAM_CLOSED)

    def _on_data(self, flags: int, sid: int, payload: bytes) -> None:
        st = self._known(sid, "DATA")
        flow = len(payload)
        if flow:  # credited whatever became of the stream
            self._windows.consume(flow)
        data = payload
        if flags & PADDED:
            start, end = unpad(payload)
            data = payload[start:end]
        if st is None:
            self._not_open(sid)
            return
        if st.state.request_whole:  # half-closed (remote): §5.1
            self._stream_error(sid, ErrorCodes.STREAM_CLOSED)
            return
        st.recv_window -= flow
        if st.recv_window < 0:
            self._stream_error(sid, ErrorCodes.FLOW_CONTROL_ERROR)
            return
        self._on_body(st, data, flow, bool(flags & END_STREAM))

    def _on_header_block(
        self, sid: int, end_stream: bool, block: bytes, dependency: int | None
    ) -> None:
        fields = self._decoder.decode(block)
        self._on_fields(sid, end_stream, block, fields, self_dependent=dependency == sid)

    def _on_fields(
        self,
        sid: int,
        end_stream: bool,
        block: bytes,
        fields: list[tuple[bytes, bytes]],
        *,
        self_dependent: bool = False,
    ) -> None:
        """The decoded header block ``block`` of stream ``sid``: a new request, or trailers."""
        st = self._streams.get(sid)
        if st is not None:
            if self_dependent:
                self._stream_error(sid, ErrorCodes.PROTOCOL_ERROR)  # §5.3.1
            else:
                self._on_trailers(st, end_stream, fields)
            return
        if sid <= self._highest:
            if sid not in self._closed:  # never opened: a decreasing stream id (§5.1.1)
                raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, f"stream id {sid} reused")
            self._not_open(sid)
            return
        self._highest = sid
        if self_dependent:
            self._remember(sid, StreamEnd.RESET_SENT)  # opened, then reset
            self._stream_error(sid, ErrorCodes.PROTOCOL_ERROR)
            return
        if self._goaway_last is not None and sid > self._goaway_last:
            self._refuse(sid)
            return
        if len(self._streams) >= self._limits.h2_max_concurrent_streams:
            self._refuse(sid)
            self._budgets.refuse(self._now)
            return
        parsed = self._parse(block, fields)
        if isinstance(parsed, str):
            log.debug("HTTP/2 stream %d malformed: %s", sid, parsed)
            self._remember(sid, StreamEnd.RESET_SENT)  # opened, then reset
            self._stream_error(sid, ErrorCodes.PROTOCOL_ERROR)
            return
        self.requests += 1
        early = None
        if isinstance(parsed, Request):
            early = self._head(parsed)
            if early is None and (parsed.content_length or 0) > self._max_body:
                early = too_large(self._max_body)
        self._open(sid, parsed, early, end_stream)

    def _open(
        self, sid: int, parsed: Request | Response, early: Response | None, end: bool
    ) -> None:
        """Open stream ``sid`` for a request, or for the answer its header list already had
        (431, ...); ``early``: the answer it gets before its body; ``end``: it has none."""
        st = Stream(sid, self._recv_initial, self._peer.initial_window)
        self._streams[sid] = st
        if isinstance(parsed, Response):
            early = parsed
        else:
            st.request = parsed
        if early is not None:
            self._answer_early(st, early)
        if self._streams.get(sid) is not st:
            return
        if end:
            self._on_end(st)
        else:
            st.body_deadline = self._now + self._limits.body_timeout

    def _whole_request(self, sid: int, block: bytes, body: bytes) -> bool:
        """A new stream's whole request in one read, no other stream open: its header block
        (END_HEADERS; no priority, padding or END_STREAM) and the DATA frame that ends it
        (END_STREAM only). True if both frames were handled here, False if only the header
        block was.
        Served without a :class:`Stream` when nothing needs one (a body that matches its
        content-length and fits the limits and windows owing no stream WINDOW_UPDATE, no early
        answer, a bare answer such as 202), with the general path's frames, handler calls and
        state; every other case goes on on the general path from where they part."""
        fields = self._decoder.decode(block)
        if self.state is not _OPEN_CONNECTION or self._limits.h2_max_concurrent_streams < 1:
            self._on_fields(sid, False, block, fields)
            return False
        parsed = self._parse(block, fields)
        flow = len(body)
        windows = self._windows
        if (
            not isinstance(parsed, Request)
            or parsed.content_length not in (None, flow)
            or flow > self._max_body
            or flow >= windows.half_stream  # (so within the stream's window, acked or not)
            or flow > windows.conn_available
        ):
            self._on_fields(sid, False, block, fields)
            return False
        self._highest = sid
        self.requests += 1
        early = self._head(parsed)
        if early is not None:  # the general path from here: the stream is needed
            self._open(sid, parsed, early, False)
            return False
        if flow:
            windows.consume(flow)
        response = self._complete(parsed, body)
        if response is None or response.headers or response.body:
            # The stream as the general path has it at _on_end's _respond.
            st = Stream(sid, self._recv_initial - flow, self._peer.initial_window)
            st.request = parsed
            st.received = st.owed = flow
            st.step(_RECV_END_STREAM)
            self._streams[sid] = st
            self._respond(st, response)
            return True
        self._send_bare(sid, response.status)
        self._remember(sid, StreamEnd.ENDED)
        self._idle_since = self._now
        return True

    def _head(self, request: Request) -> Response | None:
        """The handler's ``head``; a crash in it is OUR bug, answered 500 (never blamed on
        the peer). (One method per handler call: a bound method passed on costs more.)"""
        try:
            return self._handler.head(request)
        except Exception:  # any handler bug: logged as ours, answered 500
            log.exception("HTTP/2 handler failed")
            return error_response(500, "internal error")

    def _complete(self, request: Request, body: bytes) -> Response | None:
        """The handler's ``complete``, as :meth:`_head`."""
        try:
            return self._handler.complete(request, body)
        except Exception:
            log.exception("HTTP/2 handler failed")
            return error_response(500, "internal error")

    def _parse(self, block: bytes, fields: list[tuple[bytes, bytes]]) -> Request | Response | str:
        """:func:`parse_request` of ``fields``, decoded from ``block``; remembered by the block
        and the decoder's table_changes (the same block decodes the same fields while the
        table stays as it was): a Request is only read, never changed, so streams may share it.
        """
        key = (self._decoder.table_changes, block)
        known = self._parsed.get(key)
        if known is not None:
            return known
        parsed = parse_request(fields, self._limits.max_header_bytes, self.peer_fingerprint)
        if isinstance(parsed, Request):
            if len(self._parsed) >= _PARSED_REMEMBERED:
                self._parsed.clear()
            self._parsed[key] = parsed
        return parsed

    def _on_trailers(self, st: Stream, end_stream: bool, fields: list[tuple[bytes, bytes]]) -> None:
        if st.state.request_whole:  # half-closed (remote): §5.1
            self._stream_error(st.sid, ErrorCodes.STREAM_CLOSED)
        elif not end_stream:
            self._malformed(st, "trailers without END_STREAM")
        elif (problem := trailers_problem(fields)) is not None:
            self._malformed(st, problem)
        else:
            self._on_end(st)

    def _acked(self) -> None:
        """Our window applies from now on (§6.5.3); a later ACK changes nothing."""
        ours = self._limits.h2_initial_window_size
        delta = ours - self._recv_initial
        self._recv_initial = ours
        for st in self._streams.values():
            st.recv_window += delta

    def _known(self, sid: int, what: str) -> Stream | None:
        if sid > self._highest or not sid & 1:  # even: a stream only a server opens
            raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, f"{what} on idle stream {sid}")
        return self._streams.get(sid)

    def _on_rst_stream(self, flags: int, sid: int, payload: bytes) -> None:
        st = self._known(sid, "RST_STREAM")
        if st is not None:
            self._drop(st, StreamEnd.RESET_RECEIVED)

    # -- receiving: requests ------------------------------------------------------------------

    def _on_body(self, st: Stream, data: bytes, flow: int, end_stream: bool) -> None:
        """A DATA frame's ``data`` (``flow`` flow-controlled bytes) on an open stream."""
        st.received += len(data)
        st.owed += flow
        declared = st.request.content_length if st.request is not None else None
        if declared is not None and st.received > declared:
            self._malformed(st, "body longer than content-length")
            return
        streams = self._streams
        if st.mode is BodyMode.DISCARD:
            if st.received > self._discard_cap:
                self._end_discard(st)
            else:
                self._windows.settle(streams.values())
        elif st.received > self._max_body:
            self._release_body(st)
            self._answer_early(st, too_large(self._max_body))
            return
        elif (
            end_stream
            and not st.body
            and len(streams) == 1
            and st.owed < self._windows.half_stream
            and (declared is not None or not data)
        ):
            # A declared body whole in the frame that ends it, on the one stream (what every
            # peer sends): handed on as it is, without the buffer's copy in and out (no window
            # is due before the end).
            self._on_end(st, data)
            return
        else:
            if data:
                st.body += data
                self._windows.buffered += len(data)
            if st.owed >= self._windows.half_stream or len(streams) > 1:
                # (A lone stream's window is due only once half of it is owed: settle's rule.)
                self._windows.settle(streams.values())
        if end_stream and streams.get(st.sid) is st and not st.state.request_whole:
            self._on_end(st)

    def _on_end(self, st: Stream, whole: bytes | None = None) -> None:
        """The peer ended the stream; ``whole``: the body, when it came in the frame that ended
        it and was never buffered (``st.body`` is then empty)."""
        state = st.step(_RECV_END_STREAM)
        st.body_deadline = None
        request = st.request
        if request is not None and request.content_length not in (None, st.received):
            self._malformed(st, "body shorter than content-length")
            return
        if st.mode is BodyMode.BUFFER and state is _HALF_CLOSED_REMOTE and request is not None:
            body = whole
            if body is None:  # the buffered body leaves the buffer (settled once, below)
                body = bytes(st.body)
                self._windows.buffered -= len(body)
                st.body = bytearray()
            streams = self._streams
            if len(streams) > 1 or st.sid not in streams:  # else nothing to settle
                self._windows.settle(streams.values())
            self._respond(st, self._complete(request, body))
            return
        if state is _CLOSED:  # the response was out already
            self._drop(st, StreamEnd.ENDED)

    def _release_body(self, st: Stream) -> None:
        if st.body:
            self._windows.buffered -= len(st.body)
            st.body = bytearray()
        streams = self._streams
        # Nothing to settle when the one stream left is this one, done receiving (every
        # lone request's end): settle only reopens windows of streams still receiving.
        if len(streams) > 1 or (streams and not (st.state.request_whole and st.sid in streams)):
            self._windows.settle(streams.values())

    # -- sending ------------------------------------------------------------------------------

    def _respond(
        self, st: Stream, response: Response | None, reset_after: ErrorCodes | None = None
    ) -> None:
        if response is None:  # head() said go on where an answer was due: treat as a bug
            response = error_response(500, "internal error")
        if response.headers and not valid_fields(response.headers):
            log.error("HTTP/2 handler returned invalid header fields: %r", response.headers)
            response = error_response(500, "internal error")
        head_request = st.request is not None and st.request.method == "HEAD"
        st.out_off = 0
        st.reset_after_send = reset_after
        if not response.headers and not response.body:
            # A bare answer (every 202): its whole HEADERS frame after the stream id is cached.
            self._send_bare(st.sid, response.status)
            self._response_sent(st)
            return
        headers, body = response_fields(response, head_request)
        st.out = body
        block = encode_fields(tuple(headers))
        self._out += header_block_frames(st.sid, block, not body, self._peer.max_frame_size)
        if not body:
            self._response_sent(st)
        else:
            st.step(_SEND_HEADERS)
            self._pump(st)

    def _send_bare(self, sid: int, status: int) -> None:
        """HEADERS with END_STREAM for a response without fields or body, from a cache."""
        prefix, block = _BARE_HEADERS.get(status) or _bare_headers(status)
        self._out.append(prefix + sid.to_bytes(4, "big") + block)

    def _answer_early(self, st: Stream, response: Response | None) -> None:
        """Answer before the body is complete; drop the rest unless it is known to be too big."""
        st.mode = BodyMode.DISCARD
        declared = st.request.content_length if st.request is not None else None
        too_big = declared is not None and declared > self._discard_cap
        self._respond(st, response, reset_after=ErrorCodes.NO_ERROR if too_big else None)

    def _pump_all(self) -> None:
        for st in list(self._streams.values()):
            if st.state.sending:
                self._pump(st)

    def _pump(self, st: Stream) -> None:
        """Send as much of the response body as the peer's windows allow."""
        if not st.state.sending:
            return
        out = st.out
        while st.out_off < len(out):
            window = min(self._send_window, st.send_window)
            size = min(window, self._peer.max_frame_size, len(out) - st.out_off)
            if size <= 0:
                if st.send_deadline is None:
                    st.send_deadline = self._now + self._limits.write_timeout
                return
            end = st.out_off + size
            flags = END_STREAM if end == len(out) else 0
            self._out.append(frame_header(size, DATA, flags, st.sid) + out[st.out_off : end])
            self._send_window -= size
            st.send_window -= size
            st.out_off = end
            st.send_deadline = None
        self._response_sent(st)

    def _response_sent(self, st: Stream) -> None:
        state = st.step(_SEND_END_STREAM)
        st.send_deadline = None
        st.out = b""
        if state is _HALF_CLOSED_LOCAL and st.reset_after_send is not None:
            self._reset(st, st.reset_after_send)
        elif state is _CLOSED:
            self._drop(st, StreamEnd.ENDED)

    def _end_discard(self, st: Stream) -> None:
        """Stop reading a body we do not want: reset now, or once the answer is out."""
        st.body_deadline = None
        if st.state is _HALF_CLOSED_LOCAL:  # the answer is out
            self._reset(st, ErrorCodes.NO_ERROR)
        else:
            st.reset_after_send = ErrorCodes.NO_ERROR

    def _malformed(self, st: Stream, reason: str) -> None:
        log.debug("HTTP/2 stream %d malformed: %s", st.sid, reason)
        self._reset(st, ErrorCodes.PROTOCOL_ERROR)
        self._budgets.reset(self._now, "too many malformed requests")

    def _refuse(self, sid: int) -> None:
        self._out.append(rst_stream_frame(sid, ErrorCodes.REFUSED_STREAM))
        self._remember(sid, StreamEnd.RESET_SENT)

    def _reset(self, st: Stream, code: int) -> None:
        self._out.append(rst_stream_frame(st.sid, code))
        self._drop(st, StreamEnd.RESET_SENT)

    def _drop(self, st: Stream, how: StreamEnd) -> None:
        if self._streams.pop(st.sid, None) is None:
            return
        self._remember(st.sid, how)
        if st.body:
            self._release_body(st)
        if not self._streams:
            self._idle_since = self._now

    def _remember(self, sid: int, how: StreamEnd) -> None:
        closed = self._closed
        closed[sid] = how
        if len(closed) > _CLOSED_MEMORY:
            del closed[next(iter(closed))]

    def _end(self, code: int, debug: bytes = b"") -> None:
        """Queue the final GOAWAY (its last stream id never exceeds a graceful one sent
        before); the session is over."""
        last = self._highest
        if self._goaway_last is not None:
            last = min(last, self._goaway_last)
        self._out.append(goaway_frame(last, code, debug))
        self._move(ConnectionEvent.END)


def _bare_headers(status: int) -> tuple[bytes, bytes]:
    """(the HEADERS frame header up to its stream id, the block) of a bare response, cached."""
    headers, _ = response_fields(Response(status, []), False)
    block = encode_fields(tuple(headers))
    head = frame_header(len(block), HEADERS, END_STREAM | END_HEADERS, 0)
    cached = _BARE_HEADERS[status] = (head[:5], block)
    return cached
