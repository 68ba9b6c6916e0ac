"""The HTTP/2 server session (sans-IO): bytes and ``now`` in; bytes and a deadline out.

h2 owns the protocol (frame parsing, HPACK, stream states, flow-control arithmetic, inbound
header validation, automatic SETTINGS/PING acknowledgements). This session adds what h2 leaves
to its user, and the bounds h2 does not enforce, calling the (synchronous, IO-free)
:class:`~nvpair_wm.http.core.Handler` as requests arrive:

* the scanner (``frames``) and the flood budgets (``budgets``) in front of h2;
* RFC 9113 error codes where h2 answers differently: DATA/HEADERS after END_STREAM both ways is
  a connection error STREAM_CLOSED (§5.1), a SETTINGS ACK with a payload FRAME_SIZE_ERROR
  (§6.5), an undecodable field block COMPRESSION_ERROR (§4.3);
* MAX_CONCURRENT_STREAMS as a stream error: h2 would answer an extra stream with a connection
  error, so h2 only keeps a backstop above the advertised limit and extra streams get
  REFUSED_STREAM here (too many of those: GOAWAY);
* the header-list limit: h2/hpack stop decoding past ``h2_max_decoded_header_list`` (GOAWAY
  ENHANCE_YOUR_CALM); a list over the advertised ``max_header_bytes`` gets 431;
* content-length checked per stream (a mismatch resets that stream with PROTOCOL_ERROR
  instead of h2's connection error), the body limit (413), timeouts (preface, header block,
  body, a response stuck on a closed window, idle);
* flow control both ways (``windows``; responses go out as the peer's windows allow);
* graceful shutdown (:meth:`H2ServerSession.goaway`): GOAWAY NO_ERROR with the last stream id,
  in-flight streams finish, newer ones are refused. h2 cannot do this itself (sending GOAWAY
  closes its state machine, python-hyper/h2#1181), so the first GOAWAY is written by hand and
  h2's own comes last.

An early answer (from ``handler.head``, or 413) is sent at once; the rest of the request body is
read and dropped while the whole body stays within ``max_body`` + :data:`DISCARD_LIMIT`, and a
bigger body is cut short with RST_STREAM NO_ERROR once the answer is out (RFC 9113 §8.1).

The driver feeds :meth:`~H2ServerSession.receive_data` (``b""`` = EOF), writes
:meth:`~H2ServerSession.data_to_send`, arms one timer at :meth:`~H2ServerSession.next_deadline`
and calls :meth:`~H2ServerSession.handle_timeout`; once :attr:`~H2ServerSession.done` it flushes
and closes.
"""

from __future__ import annotations

import contextlib
import logging

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
from h2.errors import ErrorCodes
from hyperframe.frame import GoAwayFrame

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
from nvpair_wm.proto.h2.frames import FrameScanner
from nvpair_wm.proto.h2.streams import Stream, build_request, response_fields, valid_fields
from nvpair_wm.proto.h2.windows import ReceiveWindows

__all__ = ["DISCARD_LIMIT", "H2ServerSession"]

log = logging.getLogger(__name__)

#: After an early answer the request body is read and dropped while it stays within the body
#: limit plus this much; a bigger body is cut short with RST_STREAM NO_ERROR.
DISCARD_LIMIT = 64 * 1024

_ENDED_MEMORY = 1024  # closed stream ids remembered for RFC 9113 §5.1 connection errors

# h2 validates inbound header blocks (pseudo-headers, connection-specific fields, case: RFC
# 9113 §8.2 and h2spec need that); outbound fields are checked by ``streams.valid_fields``
# and built lowercase, so h2 need not check or normalize them again.
_CONFIG = h2.config.H2Configuration(
    client_side=False,
    header_encoding=None,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
)


def _is_hpack_error(exc: h2.exceptions.ProtocolError) -> bool:
    """h2 reports an undecodable field block as PROTOCOL_ERROR; RFC 9113 §4.3 wants
    COMPRESSION_ERROR (an oversized list stays h2's ENHANCE_YOUR_CALM)."""
    cause = exc.__cause__
    return (
        type(exc) is h2.exceptions.ProtocolError
        and isinstance(cause, hpack.HPACKError)
        and not isinstance(cause, hpack.OversizedHeaderListError)
    )


class H2ServerSession:
    """One HTTP/2 connection, server side."""

    def __init__(
        self,
        handler: Handler,
        limits: Limits,
        peer_fingerprint: str | None,
        now: float,
        *,
        expect_preface: bool = True,
    ) -> None:
        self._handler = handler
        self._limits = limits
        self.peer_fingerprint = peer_fingerprint
        self._max_body = min(handler.max_body, limits.max_body)
        self._discard_cap = self._max_body + DISCARD_LIMIT
        self._now = now
        self._conn = self._new_connection()
        self._windows = ReceiveWindows(self._conn, limits)
        self._windows.open_connection_window()
        self._scanner = FrameScanner(
            limits.h2_max_frame_size,
            limits.h2_max_header_block_bytes,
            limits.h2_max_continuation_frames,
            expect_preface,
        )
        self._budgets = FloodBudgets(limits)
        self._streams: dict[int, Stream] = {}
        # Recently closed by END_STREAM both ways (bounded; older ids fall back to h2's rules).
        self._ended: dict[int, None] = {}
        self._out = bytearray()  # frames of our own, ahead of h2's next output
        self._started = now
        self._idle_since = now
        self._goaway_last: int | None = None  # set once a graceful GOAWAY went out
        self._drain_deadline: float | None = None
        self.done = False
        self.requests = 0

    # -- the driver's side --------------------------------------------------------------------

    @property
    def open_streams(self) -> int:
        """Streams the session still tracks (request or response in progress)."""
        return len(self._streams)

    def data_to_send(self) -> bytes:
        if self._goaway_last is not None and not self.done:
            self._check_drained()
        out = self._conn.data_to_send()
        if self._out:
            out = bytes(self._out) + out
            self._out.clear()
        return out

    def receive_data(self, data: bytes, now: float) -> None:
        """Feed bytes from the peer (``b""``: the peer closed its side)."""
        if self.done:
            return
        self._now = now
        if not data:
            log.debug("HTTP/2 peer closed the connection")
            self.done = True
            return
        self._guarded(self._receive, data, now)

    def goaway(self, now: float) -> None:
        """Begin a graceful shutdown: GOAWAY NO_ERROR, finish in-flight streams, then done."""
        if self._goaway_last is not None or self.done:
            return
        self._now = now
        last = self._conn.highest_inbound_stream_id
        self._goaway_last = last
        self._drain_deadline = now + self._limits.shutdown_grace
        self._out += self._conn.data_to_send()
        self._out += GoAwayFrame(0, last_stream_id=last, error_code=ErrorCodes.NO_ERROR).serialize()

    def next_deadline(self) -> float | None:
        limits = self._limits
        best: float | None = None
        if not self._budgets.settings_seen:
            best = self._started + limits.header_timeout
        block = self._scanner.block_started
        if block is not None:
            best = _earlier(best, block + limits.header_timeout)
        if not self._streams and block is None:
            best = _earlier(best, self._idle_since + limits.idle_timeout)
        if self._drain_deadline is not None:
            best = _earlier(best, self._drain_deadline)
        for st in self._streams.values():
            if st.body_deadline is not None:
                best = _earlier(best, st.body_deadline)
            if st.send_deadline is not None:
                best = _earlier(best, st.send_deadline)
        return best

    def handle_timeout(self, now: float) -> None:
        if self.done:
            return
        self._now = now
        self._guarded(self._on_timers, now)

    # -- errors -------------------------------------------------------------------------------

    def _guarded(self, step: object, *args: object) -> None:
        """Run ``step``; the peer's protocol errors end the connection with the right GOAWAY."""
        assert callable(step)
        try:
            step(*args)
        except H2ConnectionError as abort:
            log.info("HTTP/2 GOAWAY %s: %s", ErrorCodes(abort.code).name, abort.reason)
            self._close(ErrorCodes(abort.code), abort.reason.encode())
            self.done = True
        except h2.exceptions.ProtocolError as exc:
            if self._conn.state_machine.state is not h2.connection.ConnectionState.CLOSED:
                # Raised by a call of ours, not by receive_data: our bug, not the peer's.
                log.exception("HTTP/2 session bug: GOAWAY INTERNAL_ERROR")
                self._close(ErrorCodes.INTERNAL_ERROR)
                self.done = True
                return
            log.info("HTTP/2 protocol error: %s", exc)
            if _is_hpack_error(exc):
                self._recode_goaway(ErrorCodes.COMPRESSION_ERROR)
            self.done = True

    def _recode_goaway(self, code: ErrorCodes) -> None:
        """Rewrite the error code of the GOAWAY h2 just queued (always its last 17 bytes)."""
        data = self._conn.data_to_send()
        if len(data) >= 17 and data[-17:-13] == b"\x00\x00\x08\x07":
            data = data[:-4] + int(code).to_bytes(4, "big")
        self._out += data

    # -- setup --------------------------------------------------------------------------------

    def _new_connection(self) -> h2.connection.H2Connection:
        limits = self._limits
        conn = h2.connection.H2Connection(_CONFIG)
        codes = h2.settings.SettingCodes
        advertised = {
            codes.MAX_CONCURRENT_STREAMS: limits.h2_max_concurrent_streams,
            codes.MAX_HEADER_LIST_SIZE: limits.max_header_bytes,
            codes.MAX_FRAME_SIZE: limits.h2_max_frame_size,
            codes.INITIAL_WINDOW_SIZE: limits.h2_initial_window_size,
        }
        conn.local_settings = h2.settings.Settings(client=False, initial_values=advertised)
        conn.max_inbound_frame_size = limits.h2_max_frame_size
        conn.decoder.max_header_list_size = limits.h2_max_decoded_header_list
        conn.initiate_connection()
        # h2 answers a stream over MAX_CONCURRENT_STREAMS with a connection error; we refuse it
        # with REFUSED_STREAM ourselves, so h2 keeps only a backstop. Streams are handled frame
        # by frame, so at most one stream above the advertised limit is ever open.
        backstop = dict(advertised)
        backstop[codes.MAX_CONCURRENT_STREAMS] = 2 * limits.h2_max_concurrent_streams + 1
        conn.local_settings = h2.settings.Settings(client=False, initial_values=backstop)
        return conn

    # -- timers -------------------------------------------------------------------------------

    def _on_timers(self, now: float) -> None:
        limits = self._limits
        if not self._budgets.settings_seen and now >= self._started + limits.header_timeout:
            raise H2ConnectionError(ErrorCodes.PROTOCOL_ERROR, "no connection preface in time")
        block = self._scanner.block_started
        if block is not None and now >= block + limits.header_timeout:
            raise H2ConnectionError(
                ErrorCodes.ENHANCE_YOUR_CALM, "header block not finished in time"
            )
        if self._drain_deadline is not None and now >= self._drain_deadline:
            log.debug("HTTP/2 shutdown grace over with %d streams open", len(self._streams))
            self._finish_graceful()
            return
        idle = not self._streams and block is None
        if idle and now >= self._idle_since + limits.idle_timeout:
            log.debug("HTTP/2 connection idle: closing")
            self._close(ErrorCodes.NO_ERROR)
            self.done = True
            return
        for st in list(self._streams.values()):
            if st.body_deadline is not None and now >= st.body_deadline:
                st.body_deadline = None
                self._body_timed_out(st)
            if st.send_deadline is not None and now >= st.send_deadline:
                log.debug("HTTP/2 stream %d: peer's window stayed closed", st.sid)
                self._reset(st, ErrorCodes.CANCEL)

    def _body_timed_out(self, st: Stream) -> None:
        if st.out is None:
            log.debug("HTTP/2 stream %d: request body too slow: 408", st.sid)
            self._release_body(st)
            st.mode = "discard"
            self._respond(st, request_timeout(), reset_after=ErrorCodes.NO_ERROR)
        else:
            self._end_discard(st)

    # -- receiving ----------------------------------------------------------------------------

    def _receive(self, data: bytes, now: float) -> None:
        streams = self._streams
        for frame in self._scanner.feed(data, now):
            if frame.type >= 0:
                sid = frame.stream_id
                self._budgets.account(
                    frame,
                    now,
                    tracked=sid in streams,
                    ended=sid in self._ended,
                    waiting_for_window=frame.type == 8 and self._waiting_for_window(sid),
                )
            for event in self._conn.receive_data(frame.raw):
                self._dispatch(event, now)
                if self.done:
                    return

    def _waiting_for_window(self, stream_id: int) -> bool:
        if stream_id:
            st = self._streams.get(stream_id)
            return st is not None and st.send_deadline is not None
        return any(st.send_deadline is not None for st in self._streams.values())

    def _dispatch(self, event: h2.events.Event, now: float) -> None:
        kind = type(event)
        if kind is h2.events.RequestReceived:
            assert isinstance(event, h2.events.RequestReceived)
            self._on_request(event, now)
        elif kind is h2.events.DataReceived:
            assert isinstance(event, h2.events.DataReceived)
            self._on_data(event)
        elif kind is h2.events.StreamEnded:
            assert isinstance(event, h2.events.StreamEnded)
            self._on_end(event.stream_id)
        elif kind is h2.events.StreamReset:
            assert isinstance(event, h2.events.StreamReset)
            self._on_reset(event, now)
        elif kind is h2.events.WindowUpdated:
            assert isinstance(event, h2.events.WindowUpdated)
            self._on_window(event.stream_id)
        elif kind is h2.events.RemoteSettingsChanged:
            assert isinstance(event, h2.events.RemoteSettingsChanged)
            if h2.settings.SettingCodes.INITIAL_WINDOW_SIZE in event.changed_settings:
                self._on_window(0)
        elif kind is h2.events.ConnectionTerminated:
            assert isinstance(event, h2.events.ConnectionTerminated)
            log.debug("HTTP/2 peer sent GOAWAY %s", event.error_code)
            self.done = True

    def _on_request(self, event: h2.events.RequestReceived, now: float) -> None:
        sid = event.stream_id
        assert sid is not None
        if self._goaway_last is not None and sid > self._goaway_last:
            self._conn.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            return
        if self._conn.open_inbound_streams > self._limits.h2_max_concurrent_streams:
            self._conn.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
            self._budgets.refuse(now)
            return
        self._disable_h2_length_check(sid)
        st = Stream(sid)
        self._streams[sid] = st
        assert event.headers is not None
        headers: list[tuple[bytes, bytes]] = event.headers
        request, early = build_request(
            headers, self._limits.max_header_bytes, self.peer_fingerprint
        )
        st.request = request
        self.requests += 1
        if early is None and request is not None:
            early = self._call_head(request)
        if early is None and request is not None and (request.content_length or 0) > self._max_body:
            early = too_large(self._max_body)
        if early is not None:
            self._answer_early(st, early)
        if event.stream_ended is None and sid in self._streams:
            st.body_deadline = now + self._limits.body_timeout

    def _disable_h2_length_check(self, sid: int) -> None:
        """Content-length is checked here, per stream; h2 would make a mismatch fatal."""
        h2_stream = self._conn.streams.get(sid)
        if h2_stream is not None and hasattr(h2_stream, "_expected_content_length"):
            h2_stream._expected_content_length = None

    def _on_data(self, event: h2.events.DataReceived) -> None:
        sid = event.stream_id
        assert sid is not None
        data = event.data or b""
        self._windows.data_received(event.flow_controlled_length or 0)
        st = self._streams.get(sid)
        if st is None or st.remote_done:
            return
        st.received += len(data)
        st.owed += event.flow_controlled_length or 0
        declared = st.request.content_length if st.request is not None else None
        if declared is not None and st.received > declared:
            self._malformed(st, "body longer than content-length")
            return
        if st.mode == "discard":
            if st.received > self._discard_cap:
                self._end_discard(st)
            else:
                self._windows.settle(self._streams.values())
            return
        if st.received > self._max_body:
            self._release_body(st)
            self._answer_early(st, too_large(self._max_body))
            return
        st.body += data
        self._windows.buffered += len(data)
        self._windows.settle(self._streams.values())

    def _on_end(self, sid: int | None) -> None:
        st = self._streams.get(sid or 0)
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
            self._respond(st, self._call_complete(request, body))
        self._forget_if_done(st)

    def _on_reset(self, event: h2.events.StreamReset, now: float) -> None:
        st = self._streams.get(event.stream_id or 0)
        if st is not None:
            self._drop(st)
        if not event.remote_reset:
            # h2 reset a stream because of the peer's frames (e.g. a window overflow): the
            # same cost as a client RST_STREAM ("MadeYouReset"), so the same budget.
            self._budgets.reset(now, "too many stream errors")

    def _on_window(self, stream_id: int | None) -> None:
        if stream_id:
            st = self._streams.get(stream_id)
            if st is not None:
                self._pump(st)
            return
        for st in list(self._streams.values()):
            if st.out is not None and not st.response_done:
                self._pump(st)

    def _release_body(self, st: Stream) -> None:
        self._windows.buffered -= len(st.body)
        st.body = bytearray()
        self._windows.settle(self._streams.values())

    # -- the handler: a crash is OUR bug, answered 500 (never blamed on the peer) -------------

    def _call_head(self, request: Request) -> Response | None:
        try:
            return self._handler.head(request)
        except Exception:  # any handler bug: logged as ours, answered 500
            log.exception("HTTP/2 handler failed")
            return error_response(500, "internal error")

    def _call_complete(self, request: Request, body: bytes) -> Response:
        try:
            return self._handler.complete(request, body)
        except Exception:  # any handler bug: logged as ours, answered 500
            log.exception("HTTP/2 handler failed")
            return error_response(500, "internal error")

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
        headers, body = response_fields(response, head_request)
        st.out = body
        st.out_off = 0
        st.reset_after_send = reset_after
        self._conn.send_headers(st.sid, headers, end_stream=not body)
        if not body:
            self._response_sent(st)
        else:
            self._pump(st)

    def _answer_early(self, st: Stream, response: Response | None) -> None:
        """Answer before the body is complete; drop the rest unless it is known to be too big."""
        st.mode = "discard"
        declared = st.request.content_length if st.request is not None else None
        too_big = declared is not None and declared > self._discard_cap
        self._respond(st, response, reset_after=ErrorCodes.NO_ERROR if too_big else None)

    def _pump(self, st: Stream) -> None:
        """Send as much of the response body as the peer's windows allow."""
        out = st.out
        if out is None or st.response_done:
            return
        while st.out_off < len(out):
            window = self._conn.local_flow_control_window(st.sid)
            size = min(window, self._conn.max_outbound_frame_size, len(out) - st.out_off)
            if size <= 0:
                if st.send_deadline is None:
                    st.send_deadline = self._now + self._limits.write_timeout
                return
            end = st.out_off + size
            self._conn.send_data(st.sid, out[st.out_off : end], end_stream=end == len(out))
            st.out_off = end
            st.send_deadline = None
        self._response_sent(st)

    def _response_sent(self, st: Stream) -> None:
        st.response_done = True
        st.send_deadline = None
        st.out = b""
        if st.reset_after_send is not None and not st.remote_done:
            self._reset(st, st.reset_after_send)
            return
        self._forget_if_done(st)

    def _end_discard(self, st: Stream) -> None:
        """Stop reading a body we do not want: reset now, or once the answer is out."""
        st.body_deadline = None
        if st.response_done:
            self._reset(st, ErrorCodes.NO_ERROR)
        else:
            st.reset_after_send = ErrorCodes.NO_ERROR

    def _malformed(self, st: Stream, reason: str) -> None:
        log.debug("HTTP/2 stream %d malformed: %s", st.sid, reason)
        self._reset(st, ErrorCodes.PROTOCOL_ERROR)
        self._budgets.reset(self._now, "too many malformed requests")

    def _reset(self, st: Stream, code: ErrorCodes) -> None:
        with contextlib.suppress(h2.exceptions.StreamClosedError):  # closed: nothing to reset
            self._conn.reset_stream(st.sid, code)
        self._drop(st)

    def _drop(self, st: Stream) -> None:
        if self._streams.pop(st.sid, None) is None:
            return
        if st.body:
            self._release_body(st)
        if not self._streams:
            self._idle_since = self._now

    def _forget_if_done(self, st: Stream) -> None:
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
        self.done = True

    def _close(self, code: ErrorCodes, debug: bytes = b"") -> None:
        """Queue the final GOAWAY; its last stream id never exceeds a graceful one sent before."""
        last = self._conn.highest_inbound_stream_id
        if self._goaway_last is not None:
            last = min(last, self._goaway_last)
        self._conn.close_connection(code, additional_data=debug or None, last_stream_id=last)


def _earlier(a: float | None, b: float) -> float:
    return b if a is None or b < a else a
