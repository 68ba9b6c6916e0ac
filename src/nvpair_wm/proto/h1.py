"""The HTTP/1.1 server session on h11, sans-IO: bytes and ``now`` in; bytes and a deadline out.

h11 owns the protocol (parsing, framing, keep-alive rules, chunked bodies, pipelining: it hands
out one request at a time and buffers the rest). This machine adds what h11 leaves to its user,
calling the :class:`~nvpair_wm.http.core.Handler` (synchronous, no IO) as requests complete:

* timeouts: ``idle_timeout`` while waiting for the first byte of a request (keep-alive),
  ``header_timeout`` from that byte to the end of the header block (slowloris: 408, close),
  ``body_timeout`` for the whole body (408, close);
* RFC 9112 rules h11 does not enforce: Content-Length together with Transfer-Encoding is
  answered 400 and the connection closes (§6.1: nothing pipelined behind it is read); a
  version other than HTTP/1.x gets 505; a request line over ``max_header_bytes`` gets 414;
  an absolute-form target is accepted (§3.2.2);
* the body limit: a declared Content-Length over the limit, or a streamed body that passes it,
  gets 413 and the connection is closed (the rest of the body is never read);
* ``Expect: 100-continue``: ``100 Continue`` is sent only after ``handler.head`` said go on;
* an early answer (from ``head``) to a request with a small declared body: the body is read and
  discarded so the connection stays usable; larger or chunked bodies close the connection;
* graceful shutdown (:meth:`H1Session.shutdown`): an idle connection closes at once; a busy one
  answers the request in flight with ``Connection: close``.

The driver feeds :meth:`receive_data` (``b""`` = EOF), writes :meth:`data_to_send`, arms one
timer at :meth:`next_deadline` and calls :meth:`handle_timeout`; once :attr:`closed` is true it
flushes and closes the transport.
"""

from __future__ import annotations

import logging
from http import HTTPStatus

import h11

from nvpair_wm.errors import RemoteProtocolError
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

__all__ = ["DISCARD_LIMIT", "H1Session"]

log = logging.getLogger(__name__)

#: An early answer to a request whose declared body is at most this big keeps the connection:
#: the body is read and dropped. Bigger (or chunked) bodies close the connection instead.
DISCARD_LIMIT = 64 * 1024

_NO_BODY_STATUSES = frozenset({204, 304})
_VERSIONS = frozenset({b"1.0", b"1.1"})
_REASONS: dict[int, bytes] = {s.value: s.phrase.encode("ascii") for s in HTTPStatus}

# What the session is waiting for.
_HEAD, _BODY, _DISCARD, _CLOSED = "head", "body", "discard", "closed"


class H1Session:
    """One HTTP/1.1 connection, server side."""

    def __init__(
        self, handler: Handler, limits: Limits, peer_fingerprint: str | None, now: float
    ) -> None:
        self.handler = handler
        self.limits = limits
        self.peer_fingerprint = peer_fingerprint
        self.max_body = min(handler.max_body, limits.max_body)
        self.h = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)
        self._out = bytearray()
        self._state = _HEAD
        self._closing = False  # answer what is in flight with connection: close, then close
        self._idle_since = now
        self._head_started: float | None = None  # first byte of the request head
        self._body_deadline: float | None = None
        self._req: Request | None = None
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
        self.h.receive_data(data)
        self._advance(now)

    def next_deadline(self) -> float | None:
        if self._state is _HEAD:
            if self._head_started is not None:
                return self._head_started + self.limits.header_timeout
            return self._idle_since + self.limits.idle_timeout
        if self._state in (_BODY, _DISCARD):
            return self._body_deadline
        return None

    def handle_timeout(self, now: float) -> None:
        deadline = self.next_deadline()
        if deadline is None or now < deadline:
            return
        if self._state is _HEAD:
            if self._head_started is None:
                log.debug("HTTP/1.1 keep-alive connection idle: closing")
                self._state = _CLOSED
            else:
                log.debug("HTTP/1.1 request headers too slow: 408")
                self._send_error(request_timeout())
        elif self._state is _BODY:
            log.debug("HTTP/1.1 request body too slow: 408")
            assert self._req is not None
            self._send(self._req, request_timeout(), close=True)
        else:  # discarding a body after an early answer
            self._state = _CLOSED

    def shutdown(self) -> None:
        """Graceful shutdown: close now when idle, else after answering what is in flight."""
        self._closing = True
        if self._state is _HEAD and self._head_started is None:
            self._state = _CLOSED

    # -- the loop -----------------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        try:
            while self._state is not _CLOSED:
                if self._state is _HEAD:
                    if not self._next_head(now):
                        return
                elif not self._next_body_event(now):
                    return
        except h11.RemoteProtocolError as exc:
            self._protocol_error(str(exc) or "bad request", exc.error_status_hint)
        except RemoteProtocolError as exc:
            self._protocol_error(str(exc), exc.error_status_hint)

    def _protocol_error(self, reason: str, hint: int) -> None:
        log.debug("HTTP/1.1 protocol error: %s", reason)
        if hint == 431 and self._request_line_too_long():
            hint, reason = 414, "request line too long"
        self._send_error(error_response(hint if hint >= 400 else 400, reason))

    def _request_line_too_long(self) -> bool:
        """The buffered request line alone (finished or not) passes ``max_header_bytes``."""
        if self._state is not _HEAD:
            return False
        data, _ = self.h.trailing_data
        end = data.find(b"\n")
        return (len(data) if end < 0 else end) > self.limits.max_header_bytes

    def _next_head(self, now: float) -> bool:
        """Take the next request head; False when more bytes are needed."""
        if self._closing and self._head_started is None:
            self._state = _CLOSED
            return False
        event = self.h.next_event()
        if event is h11.NEED_DATA:
            if self._head_started is None and self.h.trailing_data[0]:
                self._head_started = now
            return False
        if isinstance(event, h11.ConnectionClosed):
            self._state = _CLOSED
            return False
        if not isinstance(event, h11.Request):
            raise RemoteProtocolError(f"unexpected {type(event).__name__}")
        self._head_started = None
        self._start_request(event, now)
        return True

    def _start_request(self, event: h11.Request, now: float) -> None:
        if event.http_version not in _VERSIONS:
            raise RemoteProtocolError("HTTP version not supported", 505)
        line = len(event.method) + len(event.target) + 12
        if line > self.limits.max_header_bytes:
            raise RemoteProtocolError("request line too long", 414)
        # h11's max_incomplete_event_size only bounds a head still in the buffer; one that
        # arrived in a single read is complete, so the limit is enforced here as well.
        size = line + sum(len(k) + len(v) + 4 for k, v in event.headers)
        if size > self.limits.max_header_bytes:
            raise RemoteProtocolError("request header block too large", 431)
        headers = [(bytes(k), bytes(v)) for k, v in event.headers]
        declared = _declared_length(headers)
        req = Request(
            method=event.method.decode("ascii", "replace"),
            path=path_of(event.target),
            headers=headers,
            peer_fingerprint=self.peer_fingerprint,
            protocol="http/1.1",
            content_length=declared,
        )
        self.requests += 1
        self._req = req
        self._body = bytearray()
        early = self._call_head(req)
        if early is None and declared is not None and declared > self.max_body:
            early = too_large(self.max_body)
        if early is not None:
            self._answer_early(req, early, declared, now)
            return
        if self.h.they_are_waiting_for_100_continue:
            self._out += self.h.send(h11.InformationalResponse(status_code=100, headers=[]))
        self._state = _BODY
        self._body_deadline = now + self.limits.body_timeout

    def _next_body_event(self, now: float) -> bool:
        """Take the next body event; False when more bytes are needed."""
        event = self.h.next_event()
        if event is h11.NEED_DATA:
            return False
        req = self._req
        assert req is not None
        if isinstance(event, h11.Data):
            if self._state is _BODY:
                self._body += event.data
                if len(self._body) > self.max_body:
                    self._send(req, too_large(self.max_body), close=True)
            return True
        if isinstance(event, h11.EndOfMessage):
            if self._state is _BODY:
                body = bytes(self._body)
                self._body = bytearray()
                self._send(req, self._call_complete(req, body))
            self._cycle_done(now)
            return True
        self._state = _CLOSED  # ConnectionClosed mid-body is h11's RemoteProtocolError
        return False

    def _answer_early(
        self, req: Request, response: Response, declared: int | None, now: float
    ) -> None:
        """Answer without reading the body; keep the connection only if the body is small."""
        if self.h.their_state is h11.SEND_BODY and declared == 0:
            self.h.next_event()  # the EndOfMessage h11 has ready
        if self.h.their_state is not h11.SEND_BODY:
            self._send(req, response)
            self._cycle_done(now)
            return
        small = (
            declared is not None
            and declared <= DISCARD_LIMIT
            and response.status != 413
            and not self.h.they_are_waiting_for_100_continue
        )
        if not small:
            self._send(req, response, close=True)
            return
        self._send(req, response)
        self._state = _DISCARD
        self._body_deadline = now + self.limits.body_timeout

    def _cycle_done(self, now: float) -> None:
        self._req = None
        self._body_deadline = None
        if self._state is _CLOSED:
            return
        if self.h.our_state is not h11.DONE or self.h.their_state is not h11.DONE:
            self._state = _CLOSED
            return
        self.h.start_next_cycle()
        self._state = _HEAD
        self._idle_since = now
        if self._closing:
            self._state = _CLOSED

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

    # -- sending ------------------------------------------------------------------------------

    def _send(self, req: Request, response: Response, *, close: bool = False) -> None:
        headers = [
            (k, v) for k, v in response.headers if k not in (b"content-length", b"connection")
        ]
        body = response.body
        if response.status in _NO_BODY_STATUSES or response.status < 200:
            body = b""
        else:
            headers.append((b"content-length", str(len(body)).encode()))
        if close or self._closing:
            headers.append((b"connection", b"close"))
        reason = _REASONS.get(response.status, b"")
        out = self.h.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
        if body and req.method != "HEAD":
            out += self.h.send(h11.Data(data=body))
        out += self.h.send(h11.EndOfMessage())
        self._out += out
        if close:
            self._state = _CLOSED

    def _send_error(self, response: Response) -> None:
        """Answer outside a normal cycle (bad or slow request head), then close."""
        self._state = _CLOSED
        if self.h.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        headers = [*response.headers, (b"content-length", str(len(response.body)).encode())]
        headers.append((b"connection", b"close"))
        reason = _REASONS.get(response.status, b"")
        try:
            out = self.h.send(
                h11.Response(status_code=response.status, headers=headers, reason=reason)
            )
            out += self.h.send(h11.Data(data=response.body))
            out += self.h.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return  # h11 refuses this status for this request (e.g. after a 1xx): just close
        self._out += out


def _declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """Content-Length as h11 validated it; None for chunked bodies.

    Both Content-Length and Transfer-Encoding is request smuggling territory: RFC 9112 §6.1
    lets a server reject it and requires it to close the connection afterwards.
    """
    length: int | None = 0
    chunked = False
    seen_length = False
    for name, value in headers:
        if name == b"content-length":
            length = int(value)
            seen_length = True
        elif name == b"transfer-encoding":
            chunked = True
    if chunked and seen_length:
        raise RemoteProtocolError("both Content-Length and Transfer-Encoding", 400)
    return None if chunked else length
