"""The HTTP/1.1 server session, sans-IO: bytes and ``now`` in; bytes and a deadline out.

The session keeps one receive buffer. In the head state it looks for the end of the next request
head (one ``find`` of ``CRLF CRLF``), hands the head to :func:`~nvpair_wm.proto.h1parse.parse_head`
(RFC 9112 rules, strict: see that module for what is accepted and why), then reads the body the
head declared (Content-Length bytes, or chunks through
:class:`~nvpair_wm.proto.h1parse.ChunkedReader`) and calls the
:class:`~nvpair_wm.http.core.Handler` (synchronous, no IO). Requests pipelined in the buffer are
answered in order, one at a time, by the same loop. Responses are written here in one join:
status line, the handler's headers, ``server`` and ``nvpair-contract-version`` (every response,
:mod:`nvpair_wm.versions`), ``content-length`` always (none for 1xx/204/304),
``connection: close`` when the connection ends after it. We used h11 until its generality
(events, state tables, a regex per header) cost most of the CPU per request.

What the session adds around the framing:

* timeouts: ``idle_timeout`` while waiting for the first byte of a request (keep-alive),
  ``header_timeout`` from that byte to the end of the header block (slowloris: 408, close),
  ``body_timeout`` for the whole body (408, close);
* sizes: a request line over ``max_header_bytes`` gets 414, a header block over it 431, both
  decided as soon as the buffered (even unfinished) head passes the limit; a chunk-size line and
  the trailer section are bounded by the same limit;
* framing errors get their status and the connection closes, so nothing pipelined behind them
  is read: 400 (malformed; Content-Length together with Transfer-Encoding, RFC 9112 §6.1; a
  last transfer coding other than chunked, §6.3), 501 (a coding before chunked: we decode
  none), 505 (a version other than HTTP/1.x);
* keep-alive: HTTP/1.1 stays open unless ``Connection: close``; HTTP/1.0 closes unless
  ``Connection: keep-alive`` (answered with ``connection: keep-alive``);
* the body limit: a declared Content-Length over the limit, or a chunked body whose next chunk
  would pass it, gets 413 and the connection is closed (the rest of the body is never read);
* ``Expect: 100-continue``: ``100 Continue`` is sent only after ``handler.head`` said go on, and
  only when no body byte has arrived yet;
* an early answer (from ``head``) to a request with a small declared body: the body is read and
  discarded so the connection stays usable; larger or chunked bodies close the connection;
* graceful shutdown (:meth:`H1Session.shutdown`): an idle connection closes at once; a busy one
  answers the request in flight with ``connection: close``.

The driver feeds :meth:`receive_data` (``b""`` = EOF), writes :meth:`data_to_send`, arms one
timer at :meth:`next_deadline` and calls :meth:`handle_timeout`; once :attr:`closed` is true it
flushes and closes the transport.
"""

from __future__ import annotations

import enum
import logging
from http import HTTPStatus
from typing import Final

from nvpair_wm.errors import LocalProtocolError, RemoteProtocolError
from nvpair_wm.http.core import (
    Handler,
    Limits,
    Request,
    Response,
    error_response,
    path_of,
    request_timeout,
    too_large,
)
from nvpair_wm.proto.h1parse import (
    BAD_LINE_ENDING,
    ChunkedReader,
    RequestHead,
    parse_head,
    skip_empty_lines,
)
from nvpair_wm.versions import RESPONSE_FIELDS

__all__ = ["KEEP_ALIVE_DISCARD_BYTES", "H1Session"]

log = logging.getLogger(__name__)

#: An early answer to a request whose declared body is at most this big keeps the connection:
#: the body is read and dropped. Bigger (or chunked) bodies close the connection instead.
KEEP_ALIVE_DISCARD_BYTES = 64 * 1024

_NO_BODY_STATUSES = frozenset({204, 304})
_STATUS_LINES: dict[int, bytes] = {
    s.value: b"HTTP/1.1 %d %s" % (s.value, s.phrase.encode("ascii")) for s in HTTPStatus
}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_FRAMING_FIELDS = (b"content-length", b"connection")
# On every response, whoever made it (nvpair_wm.versions: server and nvpair-contract-version).
_VERSION_LINES = [name + b": " + value for name, value in RESPONSE_FIELDS]


class _State(enum.Enum):
    """What the session is waiting for."""

    HEAD = "the next request head"
    BODY = "the body of the request in flight, for the handler"
    DISCARD = "the body of a request answered early, read and dropped"
    CLOSED = "nothing: the connection closes once the output is written"

    # Members are singletons: hashed by identity, the transition table's lookups stay in C
    # (Enum's own __hash__ is Python code, run on every move).
    __hash__ = object.__hash__


_HEAD, _BODY, _DISCARD, _CLOSED = _State.HEAD, _State.BODY, _State.DISCARD, _State.CLOSED
#: state → the states it may move to (a request with no body goes from HEAD to HEAD).
_TRANSITIONS: Final[dict[_State, frozenset[_State]]] = {
    _HEAD: frozenset({_HEAD, _BODY, _DISCARD, _CLOSED}),
    _BODY: frozenset({_HEAD, _CLOSED}),
    _DISCARD: frozenset({_HEAD, _CLOSED}),
    _CLOSED: frozenset({_CLOSED}),
}


class H1Session:
    """One HTTP/1.1 connection, server side."""

    __slots__ = (
        "_body",
        "_body_deadline",
        "_buf",
        "_chunked",
        "_closing",
        "_eof",
        "_head_started",
        "_http10",
        "_idle_since",
        "_keep_alive",
        "_out",
        "_remaining",
        "_req",
        "_scan",
        "_state",
        "handler",
        "limits",
        "max_body",
        "peer_fingerprint",
        "requests",
    )

    def __init__(
        self, handler: Handler, limits: Limits, peer_fingerprint: str | None, now: float
    ) -> None:
        self.handler = handler
        self.limits = limits
        self.peer_fingerprint = peer_fingerprint
        self.max_body = min(handler.max_body, limits.max_body)
        self._buf = bytearray()  # received, not yet consumed
        self._scan = 0  # where to resume looking for the end of an unfinished head
        self._eof = False
        self._out = bytearray()
        self._state = _HEAD
        self._closing = False  # answer what is in flight with connection: close, then close
        self._idle_since = now
        self._head_started: float | None = None  # first byte of the request head
        self._body_deadline: float | None = None
        self._req: Request | None = None
        self._keep_alive = True  # the request in flight lets the connection stay open
        self._http10 = False  # the request in flight is HTTP/1.0
        self._remaining = 0  # Content-Length bytes still to read
        self._chunked: ChunkedReader | None = None  # the request in flight is chunked
        self._body = bytearray()
        self.requests = 0

    # -- the driver's side ------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the connection should be closed (after sending :meth:`data_to_send`)."""
        return self._state is _CLOSED

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def receive_data(self, data: bytes, now: float) -> None:
        """Feed bytes from the peer (``b""``: the peer closed its side)."""
        if self._state is _CLOSED:
            return
        if data:
            self._buf += data
        else:
            self._eof = True
        try:
            while self._state is not _CLOSED:
                if self._state is _HEAD:
                    if not self._next_head(now):
                        break
                elif not self._next_body_part(now):
                    break
            if self._eof and self._state is not _CLOSED:
                self._at_eof()
        except RemoteProtocolError as exc:
            self._protocol_error(str(exc), exc.error_status_hint)

    def next_deadline(self) -> float | None:
        if self._state is _HEAD:
            if self._head_started is not None:
                return self._head_started + self.limits.header_timeout
            return self._idle_since + self.limits.idle_timeout
        if self._state is _BODY or self._state is _DISCARD:
            return self._body_deadline
        return None

    def handle_timeout(self, now: float) -> None:
        deadline = self.next_deadline()
        if deadline is None or now < deadline:
            return
        if self._state is _HEAD:
            if self._head_started is None:
                log.debug("HTTP/1.1 keep-alive connection idle: closing")
                self._go(_CLOSED)
            else:
                log.debug("HTTP/1.1 request headers too slow: 408")
                self._send_error(request_timeout())
        elif self._state is _BODY:
            log.debug("HTTP/1.1 request body too slow: 408")
            assert self._req is not None
            self._send(self._req, request_timeout(), close=True)
        else:  # discarding a body after an early answer
            self._go(_CLOSED)

    def shutdown(self, now: float) -> None:
        """Graceful shutdown: close now when idle, else after answering what is in flight."""
        self._closing = True
        if self._state is _HEAD and self._head_started is None:
            self._go(_CLOSED)

    def _go(self, state: _State) -> None:
        """Move to ``state``; a move :data:`_TRANSITIONS` does not allow is a bug of ours."""
        if state not in _TRANSITIONS[self._state]:
            raise LocalProtocolError(f"HTTP/1.1 session: {self._state.name} to {state.name}")
        self._state = state

    # -- reading ------------------------------------------------------------------------------

    def _next_head(self, now: float) -> bool:
        """Take the next request head and start it; False when more bytes are needed."""
        if self._closing and self._head_started is None:
            self._go(_CLOSED)
            return False
        buf = self._buf
        if buf[:1] == b"\r":
            skip_empty_lines(buf)
        if not buf:
            return False
        if self._head_started is None:
            self._head_started = now
        end = buf.find(b"\r\n\r\n", self._scan)
        limit = self.limits.max_header_bytes
        if end < 0:
            self._unfinished_head(limit)
            return False
        if buf.find(b"\r\n") > limit:
            raise RemoteProtocolError("request line too long", 414)
        if end + 4 > limit:
            raise RemoteProtocolError("request header block too large", 431)
        head = parse_head(bytes(buf[:end]))
        del buf[: end + 4]
        self._scan = 0
        self._head_started = None
        self._start_request(head, now)
        return True

    def _unfinished_head(self, limit: int) -> None:
        """Judge a head that has not ended yet: too long already, or ended by a bare LF."""
        buf = self._buf
        line_end = buf.find(b"\r\n")
        if (line_end if line_end >= 0 else len(buf)) > limit:
            raise RemoteProtocolError("request line too long", 414)
        if len(buf) > limit:
            raise RemoteProtocolError("request header block too large", 431)
        # A client ending its lines with bare LF would otherwise wait for the header timeout.
        if buf.find(b"\n\n", self._scan) >= 0 or buf.find(b"\n\r\n", self._scan) >= 0:
            raise RemoteProtocolError(BAD_LINE_ENDING)
        self._scan = max(0, len(buf) - 3)

    def _start_request(self, head: RequestHead, now: float) -> None:
        declared = head.content_length
        req = Request(
            method=head.method,
            path=path_of(head.target),
            headers=head.headers,
            peer_fingerprint=self.peer_fingerprint,
            protocol="http/1.1",
            content_length=declared,
        )
        self.requests += 1
        self._req = req
        self._keep_alive = head.keep_alive
        self._http10 = head.version == b"1.0"
        self._body.clear()
        early = self._call_head(req)
        if early is None and declared is not None and declared > self.max_body:
            early = too_large(self.max_body)
        if early is not None:
            self._answer_early(req, early, head, now)
            return
        if head.chunked:
            limit = self.limits.max_header_bytes
            self._chunked = ChunkedReader(limit, limit)
        else:
            self._chunked = None
            self._remaining = declared or 0
        if head.expect_continue and not self._buf and (head.chunked or declared):
            self._out += _CONTINUE
        self._go(_BODY)
        self._body_deadline = now + self.limits.body_timeout

    def _next_body_part(self, now: float) -> bool:
        """Read what the buffer holds of the body; False when more bytes are needed."""
        buf = self._buf
        keep = self._state is _BODY
        chunked = self._chunked
        body: bytes | None = None
        if chunked is None:
            take = min(self._remaining, len(buf))
            if take == self._remaining and keep and not self._body:
                body = bytes(buf[:take])  # the usual case: the whole body arrived at once
            elif keep:
                self._body += buf[:take]
            del buf[:take]
            self._remaining -= take
            done = not self._remaining
        else:
            done = chunked.read(buf, self._body if keep else None)
            if keep and len(self._body) + chunked.pending > self.max_body:
                assert self._req is not None
                self._send(self._req, too_large(self.max_body), close=True)
                return False
        if not done:
            return False
        if keep:
            req = self._req
            assert req is not None
            if body is None:
                body = bytes(self._body)
                self._body.clear()
            self._send(req, self._call_complete(req, body))
        self._cycle_done(now)
        return True

    def _at_eof(self) -> None:
        """The peer closed its side with no complete request left in the buffer."""
        if self._state is _HEAD and not self._buf:
            self._go(_CLOSED)  # between requests: the normal end of a connection
        elif self._state is _DISCARD:
            self._go(_CLOSED)  # already answered
        else:
            what = "head" if self._state is _HEAD else "body"
            raise RemoteProtocolError(f"connection closed inside a request {what}")

    def _protocol_error(self, reason: str, status: int) -> None:
        log.debug("HTTP/1.1 protocol error: %s", reason)
        if self._state is _DISCARD:
            self._go(_CLOSED)  # the request was answered already: just close
            return
        self._send_error(error_response(status, reason))

    def _answer_early(
        self, req: Request, response: Response, head: RequestHead, now: float
    ) -> None:
        """Answer without reading the body; keep the connection only if the body is small."""
        declared = head.content_length
        if declared == 0:
            self._send(req, response)
            self._cycle_done(now)
            return
        small = (
            declared is not None
            and declared <= KEEP_ALIVE_DISCARD_BYTES
            and response.status != 413
            and not head.expect_continue  # the client may never send it: no way to frame on
        )
        if not small:
            self._send(req, response, close=True)
            return
        self._send(req, response)
        if self._state is _CLOSED:
            return
        self._chunked = None
        self._remaining = declared or 0
        self._go(_DISCARD)
        self._body_deadline = now + self.limits.body_timeout

    def _cycle_done(self, now: float) -> None:
        self._req = None
        self._chunked = None
        self._body_deadline = None
        if self._state is _CLOSED:
            return
        # A shutdown that came while a discarded body was still arriving ends the connection
        # here: its answer went out before the shutdown, without connection: close.
        self._go(_CLOSED if self._closing else _HEAD)
        self._idle_since = now

    # -- the handler: a crash is OUR bug, answered 500 (never blamed on the peer) -------------

    def _call_head(self, req: Request) -> Response | None:
        try:
            return self.handler.head(req)
        except Exception:  # any handler bug: logged as ours, answered 500
            return self._internal_error()

    def _call_complete(self, req: Request, body: bytes) -> Response:
        try:
            return self.handler.complete(req, body)
        except Exception:  # any handler bug: logged as ours, answered 500
            return self._internal_error()

    def _internal_error(self) -> Response:
        log.exception("request handler failed")
        self._closing = True
        return error_response(500, "internal error")

    # -- writing ------------------------------------------------------------------------------

    def _send(self, req: Request, response: Response, *, close: bool = False) -> None:
        """Write ``response`` to ``req``; the connection closes after it when ``close``, during
        a shutdown, or when the client asked for it."""
        close = close or self._closing or not self._keep_alive
        self._out += _response_bytes(response, close, self._http10, req.method == "HEAD")
        if close:
            self._go(_CLOSED)

    def _send_error(self, response: Response) -> None:
        """Answer outside a normal cycle (bad or slow request head, broken body), then close."""
        self._out += _response_bytes(response, True, False, False)
        self._go(_CLOSED)


def _response_bytes(response: Response, close: bool, http10: bool, head: bool) -> bytes:
    """A whole response in one join: status line, fields, framing fields, blank line, body.

    An HTTP/1.0 client that asked to keep the connection is told it stays open (``http10``).

    The handler's fields are our own code's (lower-case names, no CR/LF), so they are not
    validated again here; ``content-length`` and ``connection`` are always the session's.
    """
    status = response.status
    line = _STATUS_LINES.get(status) or b"HTTP/1.1 %d " % status
    lines = [line]
    for name, value in response.headers:
        if name not in _FRAMING_FIELDS:
            lines.append(name + b": " + value)
    lines += _VERSION_LINES
    body = response.body
    if status < 200 or status in _NO_BODY_STATUSES:
        body = b""
    else:
        lines.append(b"content-length: %d" % len(body))
        if head:
            body = b""  # HEAD: the length of the body a GET would get, no body
    if close:
        lines.append(b"connection: close")
    elif http10:
        lines.append(b"connection: keep-alive")
    lines.append(b"")
    lines.append(body)
    return b"\r\n".join(lines)
