"""The outbound inter-node client: one thin ``asyncio.Protocol`` per connection to a peer.

Per connection: ``data_received`` feeds the sans-IO machines (:class:`~nvpair_wm.proto.tls.
TLSMachine`, then :class:`~nvpair_wm.proto.h2.client.H2ClientSession` or :class:`~nvpair_wm.
proto.h1client.H1ClientSession`), acts on the events they return (a request's ``done`` callback
is called, ``on_change`` when what the connection can take changed) and writes what they
produce; ONE timer handle follows the session's next deadline. No reader task, and no task or
future per read or per request (:meth:`PeerConnection.request`; :meth:`PeerConnection.post` is
the coroutine form): a connection that the server closes, or that dies, is noticed the moment
the transport says so, also while idle. What requests started in one event-loop tick is
encrypted and written once (at :meth:`PeerConnection.flush`, or at the end of the tick).

Who the server is, is decided by pin, not by CA or hostname: the handshake succeeds only if the
SHA-256 of the server's leaf certificate (DER) equals the fingerprint of the node record being
dialled **and** is pinned in ``trusted/`` at that moment. Otherwise the handshake is aborted by
our side before a single byte of HTTP is written (the session does not exist yet), and
:class:`~nvpair_wm.errors.PinRefused` says what the server presented. The client presents this
node's certificate. ALPN offers ``h2`` then ``http/1.1``; the server's choice picks the session.

TCP keepalive, and on HTTP/2 a PING (:meth:`PeerConnection.ping`), find connections that die
without a FIN. Writes need no timer of their own: every byte written belongs to a request or a
PING, each with its own deadline, or to the farewell of a closing connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass

from OpenSSL import SSL

from nvpair_wm.errors import ClientError, ConnectFailed, ConnectionLost, PinRefused, TLSError
from nvpair_wm.io.readsize import cap_reads
from nvpair_wm.pins import NodeIdentity
from nvpair_wm.proto.exchanges import (
    ClientEvent,
    ConnectionEnded,
    PingAnswered,
    PingFailed,
    RequestFailed,
    Response,
    ResponseReceived,
)
from nvpair_wm.proto.h1client import H1ClientSession
from nvpair_wm.proto.h2.client import H2ClientSession
from nvpair_wm.proto.sessions import ClientSession
from nvpair_wm.proto.tls import TLSMachine
from nvpair_wm.tls_contexts import ALPN_PROTOCOLS, TLSPolicy, client_context

__all__ = ["Outcome", "PeerConnection", "Response", "open_connection"]

_MIN_BODY_WINDOW = 16_384  # bytes: body_window's floor (HTTP/2's default frame size)
Outcome = Response | ClientError  # what a request's ``done`` callback gets


class PeerConnection(asyncio.Protocol):
    """One connection to a peer; :func:`open_connection` makes it and runs the handshake."""

    def __init__(
        self,
        tls: TLSMachine,
        check: _PinCheck,
        *,
        authority: bytes,
        on_change: Callable[[], None],
        max_response_bytes: int,
        tcp_keepalive: float,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._tls = tls
        self._check = check
        self._authority = authority
        self._on_change = on_change
        self._max_response = max_response_bytes
        self._keepalive = tcp_keepalive
        self._transport: asyncio.Transport | None = None
        self._session: ClientSession | None = None
        self._handshake: asyncio.Future[None] = self._loop.create_future()
        self._requests: dict[int, Callable[[Outcome], None]] = {}
        self._pings: dict[int, asyncio.Future[None]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._flush_handle: asyncio.Handle | None = None  # a write at the end of this tick
        self._transport_gone = False
        self._gone_waiter: asyncio.Future[None] | None = None
        self.protocol = ""  # "h2" or "http/1.1", once the handshake is done
        self.server_fingerprint: str | None = None
        self.close_reason: str | None = None
        self.last_activity = self._loop.time()

    # -- what the broadcaster looks at --------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.close_reason is not None

    @property
    def usable(self) -> bool:
        """New requests may start on this connection."""
        session = self._session
        return self.close_reason is None and session is not None and session.usable

    @property
    def active(self) -> int:
        """Requests in progress."""
        return 0 if self._session is None else self._session.active

    def capacity(self, cap: int) -> int:
        """How many requests may be in progress at once (``cap``: our own limit)."""
        return 1 if self._session is None else self._session.capacity(cap)

    def body_window(self) -> int | None:
        """The largest request body that goes out at once, without waiting for the server to
        open its window (HTTP/2: the stream window it set, but at least one default frame, so
        that a server that opens streams at 0 still gets batches); None when there is no such
        bound (HTTP/1.1)."""
        window = None if self._session is None else self._session.stream_window
        return None if window is None else max(window, _MIN_BODY_WINDOW)

    def request(
        self,
        path: str,
        body: bytes,
        *,
        response_timeout: float,
        done: Callable[[Outcome], None],
        caller_flushes: bool = False,
    ) -> None:
        """Start ``POST path`` with ``body`` (application/json); ``done`` gets the response, or
        the :class:`ClientError` that says why there is none, on the event loop. No task, no
        future: the bytes go out at :meth:`flush` or at the end of this event-loop tick
        (``caller_flushes``: the caller calls :meth:`flush` before it returns to the loop, so
        no end-of-tick write is planned, only to be called off).

        The timeout is a parameter, not the caller's ``asyncio.timeout``, because a request that
        times out leaves the connection in an unknown state: the connection closes itself.
        Raises :class:`ConnectionLost` when the connection cannot take a request now.
        """
        session = self._session
        if session is None or self.close_reason is not None:
            raise ConnectionLost(self.close_reason or "not connected")
        now = self._loop.time()
        self._requests[session.start_request(path, body, now, response_timeout)] = done
        self.last_activity = now
        # The timer, now: the new request's deadline is the only one added (_rearm, without a
        # scan of the others for the earliest).
        when = now + response_timeout
        if self._timer is None or when < self._timer_at:
            self._arm(when)
        if not caller_flushes:
            self._flush_soon()

    def flush(self) -> None:
        """Write what the requests started so far produced, now (one TLS write for all); the
        write planned for the end of this tick has nothing left to do and is called off."""
        handle = self._flush_handle
        if handle is not None:
            handle.cancel()
            self._flush_handle = None
        self._write_out()  # the timer was armed by request()

    async def post(self, path: str, body: bytes, *, response_timeout: float) -> Response:
        """:meth:`request` as a coroutine: the response, or raises :class:`ClientError`."""
        waiter: asyncio.Future[Response] = self._loop.create_future()

        def done(outcome: Outcome) -> None:
            if waiter.done():
                return
            if isinstance(outcome, Response):
                waiter.set_result(outcome)
            else:
                waiter.set_exception(outcome)

        self.request(path, body, response_timeout=response_timeout, done=done)
        return await waiter

    async def ping(self, ack_timeout: float) -> None:
        """Check that the peer still answers (HTTP/2 PING); a no-op on HTTP/1.1."""
        session = self._session
        if session is None or self.close_reason is not None:
            raise ConnectionLost(self.close_reason or "not connected")
        ping = session.ping(self._loop.time(), ack_timeout)
        if ping is None:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._pings[ping] = waiter
        self._flush_soon()
        await waiter

    def close(self, reason: str = "closed by us") -> None:
        """Close now (HTTP/2: GOAWAY first; TLS close_notify), failing what is in progress."""
        if self.close_reason is not None:
            return
        if self._session is not None:
            self._handle(self._session.end(reason, graceful=True))
        else:
            self._end(reason, graceful=False)

    async def aclose(self, reason: str = "closed by us") -> None:
        """:meth:`close`, then wait for the transport to be gone (aborted if it cannot flush)."""
        self.close(reason)
        transport = self._transport
        if transport is None or self._transport_gone:
            return
        if transport.get_write_buffer_size():
            transport.abort()  # the peer is not reading our farewell: do not wait for it
        if not self._transport_gone:
            self._gone_waiter = self._loop.create_future()
            await self._gone_waiter

    # -- asyncio callbacks --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        cap_reads(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and self._keepalive > 0:
            _set_keepalive(sock, self._keepalive)
        self._tls.start()
        self._write_tls()

    def data_received(self, data: bytes) -> None:
        if self.close_reason is not None:
            return
        now = self._loop.time()
        self.last_activity = now
        tls = self._tls
        handshaking = not tls.handshake_done
        try:
            plain = tls.receive(data)
        except TLSError as exc:
            self._write_tls()  # the alert
            if handshaking:
                self._handshake_failed(exc)
            else:
                self._handle(self._session_end(f"connection failed: {exc}"))
            return
        if handshaking:
            if not tls.handshake_done:
                self._write_tls()
                return
            if not self._handshake_done():
                return
        session = self._session
        assert session is not None
        if plain:
            self._handle(session.receive_data(plain, now))
        if tls.peer_closed:
            self._handle(session.receive_data(b"", now))
        # What the session answers (SETTINGS ACK, WINDOW_UPDATE, PING ACK...). What it received
        # set no deadline: the timer stays as it is (one that fires early finds nothing due).
        self._write_out()

    def eof_received(self) -> bool | None:
        self._tls.receive_eof()
        if self.close_reason is None:
            if self._session is None:
                self._handshake_failed(TLSError("peer closed during the TLS handshake"))
            else:
                self._handle(self._session.receive_data(b"", self._loop.time()))
        return True  # we close (or have closed) the transport ourselves

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport_gone = True
        if self.close_reason is None:
            if self._session is None:
                why = "connection lost during the TLS handshake"
                self._handshake_failed(TLSError(f"{why}: {exc}" if exc else why))
            else:
                reason = "closed by the peer" if exc is None else f"connection failed: {exc}"
                self._handle(self._session_end(reason))
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiter = self._gone_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- handshake ----------------------------------------------------------------------------

    def _handshake_done(self) -> bool:
        """Check the pin again (the verify callback decides; this is a backstop), start the
        session. False when the connection was refused."""
        tls = self._tls
        fingerprint = tls.peer_fingerprint
        if fingerprint != self._check.expected:
            self._fail_handshake(
                PinRefused(f"server certificate {fingerprint} is not the expected one")
            )
            return False
        self.server_fingerprint = fingerprint
        if tls.alpn == "h2":
            self._session = H2ClientSession(self._authority, self._max_response)
        else:
            self._session = H1ClientSession(self._authority, self._max_response)
        self.protocol = self._session.protocol
        if not self._handshake.done():
            self._handshake.set_result(None)
        return True

    def _handshake_failed(self, exc: TLSError) -> None:
        refused = self._check.refused
        self._fail_handshake(PinRefused(refused) if refused else ConnectFailed(str(exc)))

    def _fail_handshake(self, error: ConnectFailed) -> None:
        if not self._handshake.done():
            self._handshake.set_exception(error)
        self._end(str(error), graceful=False)

    # -- the machines -------------------------------------------------------------------------

    def _session_end(self, reason: str) -> list[ClientEvent]:
        session = self._session
        return [] if session is None else session.end(reason, graceful=False)

    def _handle(self, events: list[ClientEvent]) -> None:
        """Act on the session's events; ``on_change`` when what the connection can take
        changed (a request's own ``done`` tells of its end)."""
        changed = False
        for event in events:
            if isinstance(event, ResponseReceived):
                done = self._requests.pop(event.request, None)
                if done is not None:
                    done(event.response)
            elif isinstance(event, RequestFailed):
                done = self._requests.pop(event.request, None)
                if done is not None:
                    done(event.error)
            elif isinstance(event, PingAnswered):
                pinger = self._pings.pop(event.ping, None)
                if pinger is not None and not pinger.done():
                    pinger.set_result(None)
            elif isinstance(event, PingFailed):
                pinger = self._pings.pop(event.ping, None)
                if pinger is not None and not pinger.done():
                    pinger.set_exception(event.error)
            elif isinstance(event, ConnectionEnded):
                self._end(event.reason, event.graceful)
                changed = True
            else:  # SessionChanged
                changed = True
        if changed:
            self._on_change()

    def _end(self, reason: str, graceful: bool) -> None:
        """Close the transport: after the session's farewell and close_notify when graceful."""
        if self.close_reason is not None:
            return
        self.close_reason = reason
        lost = ConnectionLost(reason)
        requests, self._requests = self._requests, {}
        pings, self._pings = self._pings, {}
        for done in requests.values():  # the session failed them already; a backstop
            done(lost)
        for pinger in pings.values():
            if not pinger.done():
                pinger.set_exception(lost)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        transport = self._transport
        if transport is None:
            return
        if graceful and not transport.is_closing():
            if self._session is not None:
                self._send_plain(self._session.data_to_send())
            self._tls.close()
            self._write_tls()
            transport.close()
        else:
            transport.abort()

    def _flush_soon(self) -> None:
        """Write at the end of this event-loop tick: requests started together go out together."""
        if self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        if self._write_out():
            self._rearm()

    def _write_out(self) -> bool:
        """Encrypt and write what the session has to send; False when the connection is over
        (or ended because TLS refused it)."""
        session = self._session
        if self.close_reason is not None or session is None:
            return False
        if not self._send_plain(session.data_to_send()):
            return False
        self._write_tls()
        return True

    def _send_plain(self, data: bytes) -> bool:
        if not data:
            return True
        try:
            self._tls.send(data)
        except TLSError as exc:
            self._handle(self._session_end(f"connection failed: {exc}"))
            return False
        return True

    def _write_tls(self) -> None:
        out = self._tls.data_to_send()
        transport = self._transport
        if out and transport is not None and not transport.is_closing():
            transport.write(out)

    # -- the one timer --------------------------------------------------------------------------

    def _rearm(self) -> None:
        session = self._session
        if session is None or self.close_reason is not None:
            return
        when = session.next_deadline()
        if when is None:
            return  # a timer already set fires early and finds nothing due: harmless
        if self._timer is None or when < self._timer_at:
            self._arm(when)

    def _arm(self, when: float) -> None:
        """The one timer, at ``when`` (one set for later is called off)."""
        timer = self._timer
        if timer is not None:
            timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        session = self._session
        if session is None or self.close_reason is not None:
            return
        self._handle(session.handle_timeout(self._loop.time()))
        self._flush()


# -- opening a connection ---------------------------------------------------------------------


@dataclass(slots=True)
class _PinCheck:
    """The verify callback's verdict, kept so that a refusal can say what was presented."""

    expected: str
    is_pinned: Callable[[str], bool]
    seen: str | None = None
    refused: str | None = None

    def __call__(self, fingerprint: str) -> bool:
        self.seen = fingerprint
        if fingerprint != self.expected:
            self.refused = (
                f"server presented certificate {fingerprint[:16]}…, "
                f"not the expected {self.expected[:16]}…"
            )
            return False
        if not self.is_pinned(fingerprint):
            self.refused = f"server certificate {fingerprint[:16]}… is not pinned in trusted/"
            return False
        return True


def _set_keepalive(sock: socket.socket, idle: float) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
            opt = getattr(socket, name, None)
            if opt is not None:
                sock.setsockopt(socket.IPPROTO_TCP, opt, max(1, int(value)))


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _authority(host: str, port: int) -> bytes:
    return (f"[{host}]:{port}" if ":" in host else f"{host}:{port}").encode("idna")


async def open_connection(
    host: str,
    port: int,
    *,
    identity: NodeIdentity,
    expected_fingerprint: str,
    is_pinned: Callable[[str], bool],
    on_change: Callable[[], None] = lambda: None,
    alpn: tuple[bytes, ...] = ALPN_PROTOCOLS,
    connect_timeout: float = 5.0,
    handshake_timeout: float = 5.0,
    tcp_keepalive: float = 15.0,
    max_response_bytes: int = 1024 * 1024,
    tls_policy: TLSPolicy | None = None,
) -> PeerConnection:
    """Connect, handshake, check the server's pin, and return a ready connection.

    ``on_change`` is called (on the event loop) whenever the connection closes or what it can
    take changes (HTTP/2 SETTINGS or GOAWAY, an HTTP/1.1 connection idle again): the owner's
    cue to look at it again.
    """
    check = _PinCheck(expected_fingerprint, is_pinned)
    try:
        ctx = client_context(identity, check, alpn, tls_policy)
    except ValueError as exc:
        raise ConnectFailed(f"our identity is unusable: {exc}") from exc
    ssl_conn = SSL.Connection(ctx, None)
    if not _is_ip(host):
        with contextlib.suppress(UnicodeError, SSL.Error):
            ssl_conn.set_tlsext_host_name(host.encode("idna"))
    ssl_conn.set_connect_state()
    conn = PeerConnection(
        TLSMachine(ssl_conn),
        check,
        authority=_authority(host, port),
        on_change=on_change,
        max_response_bytes=max_response_bytes,
        tcp_keepalive=tcp_keepalive,
    )
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(connect_timeout):
            await loop.create_connection(lambda: conn, host, port)
    except TimeoutError:
        conn.close("connect timed out")
        raise ConnectFailed(f"connect to {host}:{port} timed out") from None
    except OSError as exc:
        # asyncio's own text repeats the address ("Connect call failed (...)"): use errno's.
        if isinstance(exc, socket.gaierror) or not exc.errno:
            why = exc.strerror or str(exc)
        else:
            why = os.strerror(exc.errno)
        raise ConnectFailed(f"connect to {host}:{port}: {why}") from exc
    try:
        async with asyncio.timeout(handshake_timeout):
            await conn._handshake
    except TimeoutError:
        conn.close("TLS handshake timed out")
        raise ConnectFailed("TLS handshake timed out") from None
    except BaseException:
        conn.close("handshake abandoned")
        raise
    return conn
