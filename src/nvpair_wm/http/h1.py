"""HTTP/1.1 adapter on h11: bytes from a :class:`ByteStream` → :class:`Handler` calls.

h11 owns the protocol (parsing, framing, keep-alive rules, chunked bodies, pipelining: it hands
out one request at a time and buffers the rest). This module adds what h11 leaves to its user:

* timeouts: ``idle_timeout`` while waiting for the first byte of a request (keep-alive),
  ``header_timeout`` from that byte to the end of the header block (slowloris: 408, close),
  ``body_timeout`` for the whole body (408, close);
* the body limit: a declared Content-Length over the limit, or a streamed body that passes it,
  gets 413 and the connection is closed (the rest of the body is never read);
* ``Expect: 100-continue``: ``100 Continue`` is sent only after ``handler.head`` said go on;
  when it refused, the body is never asked for and the connection closes after the answer;
* an early answer (from ``head``) to a request with a small declared body: the body is read and
  discarded so the connection stays usable; larger or chunked bodies close the connection;
* graceful shutdown: an idle connection returns at once; a busy one answers the request in
  flight with ``Connection: close``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from http import HTTPStatus

import h11

from nvpair_wm.http.core import (
    ByteStream,
    Handler,
    Limits,
    Request,
    Response,
    ShutdownRequested,
    error_response,
    path_of,
    request_timeout,
    too_large,
)

__all__ = ["DISCARD_LIMIT", "serve_h1"]

log = logging.getLogger(__name__)

#: An early answer to a request whose declared body is at most this big keeps the connection:
#: the body is read and dropped. Bigger (or chunked) bodies close the connection instead.
DISCARD_LIMIT = 64 * 1024

_NO_BODY_STATUSES = frozenset({204, 304})


async def serve_h1(conn: ByteStream, handler: Handler, limits: Limits) -> None:
    """Serve HTTP/1.1 requests on ``conn`` until it should close. Never closes ``conn``."""
    await _H1Connection(conn, handler, limits).run()


class _Stop(Exception):
    """End the connection now (EOF, idle shutdown, or an answer that closed it)."""


class _H1Connection:
    def __init__(self, conn: ByteStream, handler: Handler, limits: Limits) -> None:
        self.conn = conn
        self.handler = handler
        self.limits = limits
        self.max_body = min(handler.max_body, limits.max_body)
        self.h = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)
        self.closing = conn.shutting_down  # finish the exchange in flight, then close
        self.idle = True  # between requests: a shutdown request ends the connection at once

    async def run(self) -> None:
        try:
            while True:
                request = await self._next_request()
                if request is None:
                    return
                await self._exchange(request)
                if self.h.our_state is not h11.DONE or self.h.their_state is not h11.DONE:
                    return
                self.h.start_next_cycle()
        except _Stop:
            return
        except h11.RemoteProtocolError as exc:
            log.debug("HTTP/1.1 protocol error: %s", exc)
            status = exc.error_status_hint if exc.error_status_hint >= 400 else 400
            await self._send_error(error_response(status, str(exc) or "bad request"))
        except (ConnectionError, h11.LocalProtocolError) as exc:
            log.debug("HTTP/1.1 connection ended: %r", exc)

    # -- receiving --------------------------------------------------------------------------

    async def _pull(self, deadline: float | None) -> None:
        """Read one chunk into h11 (b"" = EOF). Raises TimeoutError past ``deadline``."""
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    data = await self.conn.read()
            except ShutdownRequested:
                self.closing = True
                if self.idle:
                    raise _Stop() from None
                continue
            self.h.receive_data(data)
            return

    async def _next_event(self, deadline: float | None) -> h11.Event:
        while True:
            event = self.h.next_event()
            if event is h11.NEED_DATA:
                await self._pull(deadline)
                continue
            assert not isinstance(event, type)  # PAUSED cannot happen: we finish each cycle
            return event

    async def _next_request(self) -> h11.Request | None:
        """Wait (idle, then header timeout) for the next request head; None = close quietly."""
        loop = asyncio.get_running_loop()
        self.idle = True
        if self.closing:
            return None
        event = self.h.next_event()
        if event is h11.NEED_DATA and not self.h.trailing_data[0]:
            try:
                await self._pull(loop.time() + self.limits.idle_timeout)
            except TimeoutError:
                log.debug("HTTP/1.1 keep-alive connection idle: closing")
                return None
            event = self.h.next_event()
        self.idle = False
        deadline = loop.time() + self.limits.header_timeout
        try:
            while event is h11.NEED_DATA:
                await self._pull(deadline)
                event = self.h.next_event()
        except TimeoutError:
            log.debug("HTTP/1.1 request headers too slow: 408")
            await self._send_error(request_timeout())
            return None
        if isinstance(event, h11.Request):
            # h11's max_incomplete_event_size only bounds a head still in the buffer; one that
            # arrived in a single read is complete, so the limit is enforced here as well.
            size = len(event.method) + len(event.target) + 12
            size += sum(len(k) + len(v) + 4 for k, v in event.headers)
            if size > self.limits.max_header_bytes:
                raise h11.RemoteProtocolError("request header block too large", 431)
            return event
        if isinstance(event, h11.ConnectionClosed):
            return None
        raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}", error_status_hint=400)

    # -- one request/response cycle ---------------------------------------------------------

    async def _exchange(self, event: h11.Request) -> None:
        headers = [(bytes(k), bytes(v)) for k, v in event.headers]
        declared = _declared_length(headers)
        req = Request(
            method=event.method.decode("ascii", "replace"),
            path=path_of(event.target),
            headers=headers,
            peer_fingerprint=self.conn.peer_fingerprint,
            protocol="http/1.1",
            content_length=declared,
        )
        early = self._head(req)
        if early is None and declared is not None and declared > self.max_body:
            early = too_large(self.max_body)
        if early is not None:
            await self._answer_early(req, early, declared)
            return
        if self.h.they_are_waiting_for_100_continue:
            self.conn.write(self.h.send(h11.InformationalResponse(status_code=100, headers=[])))
        body = await self._read_body(req)
        if body is None:
            return
        response = self._complete(req, body)
        await self._send(req, response)

    async def _read_body(self, req: Request) -> bytes | None:
        """The whole body, or None after answering 413/408 (the connection then closes)."""
        deadline = asyncio.get_running_loop().time() + self.limits.body_timeout
        body = bytearray()
        try:
            while True:
                event = await self._next_event(deadline)
                if isinstance(event, h11.Data):
                    body += event.data
                    if len(body) > self.max_body:
                        await self._send(req, too_large(self.max_body), close=True)
                        return None
                elif isinstance(event, h11.EndOfMessage):
                    return bytes(body)
                else:  # ConnectionClosed mid-body is a RemoteProtocolError in h11
                    raise _Stop()
        except TimeoutError:
            log.debug("HTTP/1.1 request body too slow: 408")
            await self._send(req, request_timeout(), close=True)
            return None

    async def _answer_early(self, req: Request, response: Response, declared: int | None) -> None:
        """Answer without reading the body; keep the connection only if the body is small."""
        if self.h.their_state is h11.SEND_BODY and declared == 0:
            await self._next_event(None)  # the EndOfMessage h11 has ready
        if self.h.their_state is not h11.SEND_BODY:
            await self._send(req, response)
            return
        small = (
            declared is not None
            and declared <= DISCARD_LIMIT
            and response.status != 413
            and not self.h.they_are_waiting_for_100_continue
        )
        if not small:
            await self._send(req, response, close=True)
            return
        await self._send(req, response)
        deadline = asyncio.get_running_loop().time() + self.limits.body_timeout
        try:
            while not isinstance(await self._next_event(deadline), h11.EndOfMessage):
                pass
        except TimeoutError:
            raise _Stop() from None

    def _head(self, req: Request) -> Response | None:
        try:
            return self.handler.head(req)
        except Exception:
            return self._internal_error()

    def _complete(self, req: Request, body: bytes) -> Response:
        try:
            return self.handler.complete(req, body)
        except Exception:
            return self._internal_error()

    def _internal_error(self) -> Response:
        log.exception("request handler failed")
        self.closing = True
        return error_response(500, "internal error")

    # -- sending ----------------------------------------------------------------------------

    async def _send(self, req: Request, response: Response, *, close: bool = False) -> None:
        headers = [
            (k, v) for k, v in response.headers if k not in (b"content-length", b"connection")
        ]
        body = response.body
        if response.status in _NO_BODY_STATUSES or response.status < 200:
            body = b""
        else:
            headers.append((b"content-length", str(len(body)).encode()))
        if close or self.closing:
            headers.append((b"connection", b"close"))
        reason = _reason(response.status)
        out = self.h.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
        if body and req.method != "HEAD":
            out += self.h.send(h11.Data(data=body))
        out += self.h.send(h11.EndOfMessage())
        self.conn.write(out)
        await self.conn.drain()

    async def _send_error(self, response: Response) -> None:
        """Answer outside a normal cycle (bad or slow request head), then close."""
        if self.h.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        headers = [*response.headers, (b"content-length", str(len(response.body)).encode())]
        headers.append((b"connection", b"close"))
        try:
            out = self.h.send(
                h11.Response(
                    status_code=response.status, headers=headers, reason=_reason(response.status)
                )
            )
            out += self.h.send(h11.Data(data=response.body))
            out += self.h.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return
        self.conn.write(out)
        with contextlib.suppress(ConnectionError):
            await self.conn.drain()


def _declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """Content-Length as h11 validated it; None for chunked bodies."""
    for name, value in headers:
        if name == b"content-length":
            return int(value)
    if any(name == b"transfer-encoding" for name, _ in headers):
        return None
    return 0


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""
