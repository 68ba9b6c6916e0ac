"""The HTTP/1.1 client session on h11, sans-IO: one request at a time on a kept-alive connection.

The driver calls :meth:`H1ClientSession.start_request`, writes :meth:`data_to_send`, feeds what
the peer sends to :meth:`receive_data` (``b""`` at EOF) and arms a timer at
:meth:`next_deadline` (calling :meth:`handle_timeout` when it fires); it acts on the
:mod:`~nvpair_wm.proto.exchanges` events these return. No socket, clock or asyncio here.

A response that leaves h11 unable to start the next cycle (``Connection: close``, a body
delimited by EOF) ends the session gracefully right after its :class:`ResponseReceived`. A peer
that breaks HTTP/1.1 ends it at once (its error is a :class:`RemoteProtocolError` in the reason).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import h11

from nvpair_wm.errors import ConnectionLost, LocalProtocolError, ResponseTimeout
from nvpair_wm.proto.exchanges import (
    ClientEvent,
    ConnectionEnded,
    RequestFailed,
    Response,
    ResponseReceived,
    SessionChanged,
)
from nvpair_wm.versions import REQUEST_FIELDS

__all__ = ["MAX_INCOMPLETE_EVENT_BYTES", "H1ClientSession"]

MAX_INCOMPLETE_EVENT_BYTES = 64 * 1024  # a status line + headers bigger than this: protocol error


@dataclass(slots=True)
class _Pending:
    request: int
    deadline: float
    timeout: float
    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)


class H1ClientSession:
    """One HTTP/1.1 connection, client side."""

    protocol = "http/1.1"

    def __init__(self, authority: bytes, max_response_bytes: int) -> None:
        self._authority = authority
        self._max_response = max_response_bytes
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_INCOMPLETE_EVENT_BYTES)
        self._pending: _Pending | None = None
        self._out = bytearray()
        self._next_id = 0
        self.ended: str | None = None  # why the session is over, once it is

    # -- what the driver looks at -------------------------------------------------------------

    @property
    def usable(self) -> bool:
        """A new request may start now."""
        return (
            self.ended is None
            and self._pending is None
            and self._h11.our_state is h11.IDLE
            and self._h11.their_state is h11.IDLE
        )

    @property
    def active(self) -> int:
        """Requests in progress."""
        return 0 if self._pending is None else 1

    @property
    def stream_window(self) -> None:
        """HTTP/1.1 has no flow control: no bound on a request body."""
        return None

    def capacity(self, cap: int) -> int:
        """How many requests may be in progress at once: one."""
        return 1

    def next_deadline(self) -> float | None:
        pending = self._pending
        return None if pending is None else pending.deadline

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    # -- requests -----------------------------------------------------------------------------

    def start_request(self, path: str, body: bytes, now: float, timeout: float) -> int:
        """Queue ``POST path`` with ``body`` (application/json); returns the request's id.

        Raises :class:`ConnectionLost` when the session cannot take a request now.
        """
        if not self.usable:
            raise ConnectionLost(self.ended or "connection busy or closing")
        headers = [
            (b"host", self._authority),
            *REQUEST_FIELDS,
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        try:
            out = self._h11.send(h11.Request(method=b"POST", target=path, headers=headers))
            self._out += out or b""
            self._out += self._h11.send(h11.Data(data=body)) or b""
            self._out += self._h11.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError as exc:  # a path h11 refuses: our bug, not the peer's
            raise LocalProtocolError(f"HTTP/1.1 request refused by h11: {exc}") from exc
        self._next_id += 1
        self._pending = _Pending(self._next_id, now + timeout, timeout)
        return self._next_id

    def ping(self, now: float, timeout: float) -> int | None:
        """HTTP/1.1 has no PING: None (the driver's keepalive is TCP's)."""
        return None

    # -- input --------------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> list[ClientEvent]:
        """Feed what the peer sent (``b""``: EOF); returns what happened."""
        if self.ended is not None:
            return []
        events: list[ClientEvent] = []
        self._h11.receive_data(data)
        try:
            self._drain_h11(events)
        except h11.RemoteProtocolError as exc:
            events += self.end(f"protocol error: RemoteProtocolError: {exc}", graceful=False)
            return events
        if not data and self.ended is None:
            events += self.end("closed by the peer", graceful=False)
        return events

    def _drain_h11(self, events: list[ClientEvent]) -> None:
        conn = self._h11
        while self.ended is None:
            event = conn.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.ConnectionClosed):
                return  # the caller ends the session (EOF)
            pending = self._pending
            if pending is None:
                raise h11.RemoteProtocolError("response without a request")
            if isinstance(event, h11.Response):
                pending.status = event.status_code
                pending.headers = list(event.headers)
            elif isinstance(event, h11.Data):
                pending.body += event.data
                if len(pending.body) > self._max_response:
                    raise h11.RemoteProtocolError(f"response over {self._max_response} bytes")
            elif isinstance(event, h11.EndOfMessage):
                self._pending = None
                response = Response(pending.status, pending.headers, bytes(pending.body))
                events.append(ResponseReceived(pending.request, response))
                if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                    conn.start_next_cycle()
                    events.append(SessionChanged())
                else:  # Connection: close, or a body delimited by EOF
                    reason = "closed after the response, as HTTP/1.1 required"
                    events += self.end(reason, graceful=True)
            # InformationalResponse (100 Continue): nothing to do.

    def handle_timeout(self, now: float) -> list[ClientEvent]:
        pending = self._pending
        if self.ended is not None or pending is None or now < pending.deadline:
            return []
        why = f"no response within {pending.timeout:g}s"
        self._pending = None
        return [RequestFailed(pending.request, ResponseTimeout(why)), *self.end(why, False)]

    # -- the end ------------------------------------------------------------------------------

    def end(self, reason: str, graceful: bool) -> list[ClientEvent]:
        """End the session: what is in progress fails with :class:`ConnectionLost`."""
        if self.ended is not None:
            return []
        self.ended = reason
        events: list[ClientEvent] = []
        pending, self._pending = self._pending, None
        if pending is not None:
            events.append(RequestFailed(pending.request, ConnectionLost(reason)))
        events.append(ConnectionEnded(reason, graceful))
        return events
