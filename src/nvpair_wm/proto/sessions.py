"""What the ``io/`` drivers need of a sans-IO session, HTTP/2 or HTTP/1.1, server or client.

Both sides have the same verbs: bytes from the peer in (``receive_data``, ``b""`` at EOF),
bytes to write out (``data_to_send``), one timer (``next_deadline`` then ``handle_timeout``).
A server session is over once :attr:`ServerSession.closed` (the driver flushes, then closes)
and shuts down gracefully on :meth:`ServerSession.shutdown`; a client session returns the
:mod:`~nvpair_wm.proto.exchanges` events its verbs caused and is over once ``ended`` says why.
The drivers see sessions only through these protocols: which HTTP version is on the wire is
decided once, when the session is made.
"""

from __future__ import annotations

from typing import Protocol

from nvpair_wm.proto.exchanges import ClientEvent

__all__ = ["ClientSession", "ServerSession"]


class ServerSession(Protocol):
    """One inbound connection's HTTP (``H2ServerSession``, ``H1Session``)."""

    requests: int  # requests started on the connection

    @property
    def closed(self) -> bool:
        """True once the connection should close (after writing :meth:`data_to_send`)."""

    def receive_data(self, data: bytes, now: float) -> None: ...

    def data_to_send(self) -> bytes: ...

    def next_deadline(self) -> float | None: ...

    def handle_timeout(self, now: float) -> None: ...

    def shutdown(self, now: float) -> None:
        """Graceful shutdown: requests in flight are answered, no new one is taken."""


class ClientSession(Protocol):
    """One outbound connection's HTTP (``H2ClientSession``, ``H1ClientSession``)."""

    @property
    def protocol(self) -> str:
        """The ALPN name: ``h2`` or ``http/1.1``."""

    @property
    def ended(self) -> str | None:
        """Why the session is over, once it is."""

    @property
    def usable(self) -> bool:
        """A new request may start now."""

    @property
    def active(self) -> int:
        """Requests in progress."""

    @property
    def stream_window(self) -> int | None:
        """The body bytes a new request may send before the server opens its window further;
        None where the protocol has no such bound (HTTP/1.1)."""

    def capacity(self, cap: int) -> int:
        """Requests at once: ``cap`` (ours), bounded by what the server allows."""

    def next_deadline(self) -> float | None: ...

    def data_to_send(self) -> bytes: ...

    def start_request(self, path: str, body: bytes, now: float, timeout: float) -> int: ...

    def ping(self, now: float, timeout: float) -> int | None:
        """A liveness probe's id, or None where the protocol has none."""

    def receive_data(self, data: bytes, now: float) -> list[ClientEvent]: ...

    def handle_timeout(self, now: float) -> list[ClientEvent]: ...

    def end(self, reason: str, graceful: bool) -> list[ClientEvent]: ...
