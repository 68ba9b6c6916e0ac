"""The inbound inter-node server: one thin ``asyncio.Protocol`` per connection.

Per connection: ``buffer_updated`` feeds the sans-IO machines (:class:`~nvpair_wm.proto.tls.
TLSMachine`, then :class:`~nvpair_wm.proto.h2.H2ServerSession` or :class:`~nvpair_wm.proto.h1.
H1Session`) and writes what they return; ONE timer handle follows the machines' next deadline
(moved only when a deadline comes earlier: a timer firing early just re-arms). No task or
future per read, no protocol decision here.

Admission: every connection starts *unauthenticated* (in the TLS handshake, or handshaken with
a certificate that is not pinned). Those live in their own budget
(``max_unauthenticated_connections``) with short timers (``unauthenticated_timeout`` for the
handshake and as their idle timeout); a new connection past that budget, or past
``max_connections``, evicts the oldest unauthenticated one. Both budgets follow the member
count unless set (:mod:`nvpair_wm.capacity`). Connections whose certificate is pinned at
handshake time take the other slots, so idle strangers cannot lock peers out.

Protocol choice by ALPN: ``h2`` → HTTP/2, ``http/1.1`` → HTTP/1.1, none → HTTP/2 if the client
opens with the HTTP/2 preface (prior knowledge), else HTTP/1.1.

Batching (:mod:`nvpair_wm.io.batch`): while one ``epoll_wait``'s batch of ready connections is
handled, the broker channel defers its pipe writes to the batch's end, and a connection whose
answer would otherwise overtake such a write defers its socket write behind it (broker first,
then the answers, as when each request was written on its own). A lone request still goes out
in the iteration that read it.

Backpressure: while the transport's write buffer is over its high-water mark, reading pauses
(``pause_reading``); a peer that does not read for ``write_timeout`` is aborted. The broker
queue answers 503 when full (the endpoint's job).

Closing: close_notify, FIN, then the peer's leftovers are read and dropped for at most
``linger_timeout`` (closing with unread input would RST away an answer the peer has not read).
Shutdown (:meth:`InterNodeServer.close`): stop accepting, GOAWAY / ``Connection: close``,
in-flight requests finish within ``grace`` seconds, then what is left is aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Callable, Sequence
from typing import Self, cast

from nvpair_wm_schema.contract import DEFAULT_PORT

from nvpair_wm import allocator
from nvpair_wm.capacity import listen_backlog
from nvpair_wm.errors import TLSError
from nvpair_wm.http.core import Handler, Limits
from nvpair_wm.io.admission import Admission, stranger_limits
from nvpair_wm.io.batch import EndOfBatch, for_loop
from nvpair_wm.pins import IdentitySource
from nvpair_wm.proto.h1 import H1Session
from nvpair_wm.proto.h2 import H2_PREFACE, H2ServerSession
from nvpair_wm.proto.sessions import ServerSession
from nvpair_wm.proto.tls import TLSMachine, pointer_to
from nvpair_wm.tls_contexts import ServerTLS, TLSPolicy
from nvpair_wm.turns import Turn, Turns

__all__ = ["DEFAULT_PORT", "H2_PREFACE", "InterNodeServer", "ServerConnection", "bind_sockets"]

log = logging.getLogger(__name__)

#: When the open connections fall to an eighth of a high-water mark of at least this many,
#: the heap is trimmed (``allocator.trim``): TLS connections leave fragmented free memory.
TRIM_AFTER_CONNECTIONS = 256

#: The server's one receive buffer: the most a single read takes from a socket (asyncio's own
#: default read size).
RECEIVE_BUFFER_BYTES = 256 * 1024


def bind_sockets(hosts: Sequence[str] | None, port: int, backlog: int = 128) -> list[socket.socket]:
    """Listening sockets for ``hosts`` (IP literals or names) sharing one port.

    ``hosts=None`` means every interface, IPv4 and IPv6. With ``port=0`` the first socket picks
    the port and the others bind the same one.
    """
    if hosts is None:
        if socket.has_ipv6 and socket.has_dualstack_ipv6():
            try:
                return [
                    socket.create_server(
                        ("::", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=backlog
                    )
                ]
            except OSError as exc:
                if exc.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                    raise
        hosts = ["0.0.0.0", "::"]
        optional_v6 = True
    else:
        optional_v6 = False
    addrs: list[tuple[socket.AddressFamily, str]] = []
    for host in hosts:
        for fam, _, _, _, sockaddr in socket.getaddrinfo(
            host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        ):
            if fam in (socket.AF_INET, socket.AF_INET6) and (fam, sockaddr[0]) not in addrs:
                addrs.append((fam, str(sockaddr[0])))
    socks: list[socket.socket] = []
    try:
        for family, addr in addrs:
            try:
                sock = socket.create_server((addr, port), family=family, backlog=backlog)
            except OSError as exc:
                if optional_v6 and family == socket.AF_INET6:
                    log.info("IPv6 unavailable (%s): listening on IPv4 only", exc)
                    continue
                raise
            socks.append(sock)
            if port == 0:
                port = sock.getsockname()[1]
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


class ServerConnection(asyncio.BufferedProtocol):
    """One accepted connection: TLS (or plaintext, for test harnesses) → HTTP/2 or HTTP/1.1.

    A buffered protocol: the transport reads into the server's one receive buffer
    (:meth:`get_buffer`), which the machines consume before the next read of any connection.
    A plain ``Protocol`` would get a new 256 KiB ``bytes`` per read, which with the pinned mmap
    threshold (``allocator``) costs an mmap, an mremap and a munmap for every request.
    """

    def __init__(self, server: InterNodeServer, tls: TLSMachine | None) -> None:
        self.server = server
        self.tls = tls
        self.loop = server.loop
        self.limits = server.unauth_limits  # until the peer turns out to be pinned
        self.session: ServerSession | None = None
        self.transport: asyncio.Transport | None = None
        self.peername: object = None
        self.peer_fingerprint: str | None = None if tls is not None else server.plain_fingerprint
        self.closed = False
        self._sniffed = b""  # plaintext before the protocol is known (no ALPN)
        self._started = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._write_stalled_since: float | None = None
        self._linger_until: float | None = None
        self._shutdown = False
        self._peer_eof = False
        self._batch = server.batch
        self._receive_buffer = server.receive_buffer
        self._receive_pointer = server.receive_pointer
        self._deferred: list[bytes] | None = None  # socket writes waiting for the batch's end
        self._turn = Turn.NONE  # its TLS handshake's turn (nvpair_wm.turns)

    # -- asyncio callbacks --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is not an asyncio.Transport subclass: no isinstance).
        self.transport = transport = cast(asyncio.Transport, transport)
        self.peername = transport.get_extra_info("peername")
        self._started = self.loop.time()
        if not self.server.accepted(self):
            self.closed = True
            transport.abort()
            return
        if self.tls is None:
            self._handshake_done(self._started)
        elif self.server.handshake_turn(self):
            self._turn = Turn.HOLDING
        else:
            self._turn = Turn.WAITING
            transport.pause_reading()  # until take_turn
        self._rearm()

    def take_turn(self) -> None:
        """Our turn to handshake: read the ClientHello that waited in the socket."""
        self._turn = Turn.HOLDING
        if self.transport is not None and self._write_stalled_since is None:
            self.transport.resume_reading()

    def _end_turn(self) -> None:
        if self._turn is Turn.HOLDING:
            self._turn = Turn.NONE
            self.server.handshake_over()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._receive_buffer

    def buffer_updated(self, nbytes: int) -> None:
        """What the peer sent is in the receive buffer (``nbytes``): every request's first call."""
        if self.closed or self._linger_until is not None:
            return  # closing: the peer's leftovers are dropped
        end = self._batch
        end.active = True
        rearm = False
        try:
            tls = self.tls
            session = self.session
            if tls is not None and session is not None and tls.handshake_done:
                # A request on an open session: _received without the handshake's bookkeeping,
                # the timer re-armed once the batch's writes went out (below).
                now = self.loop.time()
                try:
                    plain = tls.receive_from(self._receive_buffer, self._receive_pointer, nbytes)
                except TLSError as exc:
                    self._tls_failed(exc)
                    return
                if plain:
                    session.receive_data(plain, now)
                if tls.peer_closed and not self.closed:
                    self._feed(b"", now)
                rearm = self._flush_out(now)
            elif tls is not None:  # TLS copies the ciphertext into its BIO straight away
                self._received(None, nbytes)
            else:  # plaintext sessions may keep what they are given
                self._received(bytes(self._receive_buffer[:nbytes]))
        finally:  # what was deferred goes out even if a bug of ours raised
            end.active = False
            if end.queue:  # callback_done's call only when something was deferred
                end.callback_done()
        if rearm:  # _flush's timer half, once the answer (and the broker write) went out
            self._rearm_open()

    def _received(self, data: bytes | memoryview | None, nbytes: int = 0) -> None:
        """Feed ``data``, or (``None``) the first ``nbytes`` of the server's receive buffer."""
        now = self.loop.time()
        tls = self.tls
        if tls is None:
            plain = bytes(data or b"")
        else:
            was_done = tls.handshake_done
            try:
                if data is None:
                    plain = tls.receive_from(self._receive_buffer, self._receive_pointer, nbytes)
                else:
                    plain = tls.receive(data)
            except TLSError as exc:
                self._tls_failed(exc)
                return
            if not was_done and tls.handshake_done:
                self._handshake_done(now)
        if plain:
            session = self.session
            if session is not None:  # _feed's usual case, without its call
                session.receive_data(plain, now)
            else:
                self._feed(plain, now)
        if tls is not None and tls.peer_closed and not self.closed:
            self._feed(b"", now)
        self._flush(now)

    def _tls_failed(self, exc: TLSError) -> None:
        """A record or the handshake failed: send the alert, close."""
        tls = self.tls
        what = "TLS with" if tls is not None and tls.handshake_done else "TLS handshake with"
        log.debug("%s %s failed: %s", what, self.peername, exc)
        self._write_tls()  # deliver the alert
        self._close_now()

    def eof_received(self) -> bool | None:
        self._peer_eof = True
        self._end_turn()  # no handshake can end after the peer's EOF: the next one's turn
        if self.tls is not None:
            self.tls.receive_eof()
        now = self.loop.time()
        if self._linger_until is not None:
            self._close_now()
            return None
        self._feed(b"", now)
        self._flush(now)
        self._batch.callback_done()
        return True  # half-close: keep our side open to answer

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._end_turn()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.server.released(self)

    def pause_writing(self) -> None:
        self._write_stalled_since = self.loop.time()
        if self.transport is not None:
            self.transport.pause_reading()  # answer what we have before reading more
        self._rearm()

    def resume_writing(self) -> None:
        self._write_stalled_since = None
        if self.transport is not None and not self.closed and self._turn is not Turn.WAITING:
            self.transport.resume_reading()

    # -- the machines -------------------------------------------------------------------------

    def _handshake_done(self, now: float) -> None:
        self._end_turn()
        tls = self.tls
        if tls is not None:
            self.peer_fingerprint = tls.peer_fingerprint
        if self.server.authenticate(self):
            self.limits = self.server.limits
        self._started = now  # from here on: the time to say which protocol
        alpn = tls.alpn if tls is not None else self.server.plain_alpn
        if alpn == "h2":
            self._start_session(True, now)
        elif alpn == "http/1.1":
            self._start_session(False, now)

    def _start_session(self, h2: bool, now: float) -> None:
        limits, handler, fp = self.limits, self.server.handler, self.peer_fingerprint
        self.session = (
            H2ServerSession(handler, limits, fp, now) if h2 else H1Session(handler, limits, fp, now)
        )
        if self._shutdown:
            self._start_shutdown(now)

    def _feed(self, data: bytes, now: float) -> None:
        session = self.session
        if session is None:
            if self.tls is not None and not self.tls.handshake_done:
                return
            # No ALPN: HTTP/2 with prior knowledge starts with the preface; anything else 1.1.
            buf = self._sniffed + data
            if data and len(buf) < len(H2_PREFACE) and H2_PREFACE.startswith(buf):
                self._sniffed = buf
                return
            self._sniffed = b""
            if not buf:  # EOF before a byte
                self._begin_close(now)
                return
            self._start_session(buf.startswith(H2_PREFACE), now)
            session = self.session
            assert session is not None
            data = buf
        session.receive_data(data, now)

    def _flush(self, now: float) -> None:
        """Write what the machines produced; close when the session is over; re-arm."""
        if self._flush_out(now):
            self._rearm_open()

    def _flush_out(self, now: float) -> bool:
        """:meth:`_flush` up to the timer: True when the timer is still to be re-armed
        (:meth:`_rearm_open`), False when the connection is closing or closed."""
        if self.closed:
            return False
        session = self.session
        if session is not None:
            out = session.data_to_send()
            if out:
                if self.tls is not None:
                    try:
                        self.tls.send(out)
                    except TLSError as exc:
                        log.debug("TLS write to %s failed: %s", self.peername, exc)
                        self.abort()
                        return False
                else:
                    self._write(out)
            if session.closed and self._linger_until is None:
                self._begin_close(now)
                return False
        self._write_tls()
        return True

    def _rearm_open(self) -> None:
        """The timer after a flush (every answer's path): an open session's next deadline when
        it is earlier than the timer's; :meth:`_rearm` otherwise."""
        session = self.session
        if session is not None and self._linger_until is None and self._write_stalled_since is None:
            if self.closed:
                return
            when = session.next_deadline()
            if when is not None and (self._timer is None or when < self._timer_at):
                self._set_timer(when)
        else:
            self._rearm()

    def _write_tls(self) -> None:
        if self.tls is not None:
            out = self.tls.data_to_send()
            if out:
                self._write(out)

    def _write(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        deferred = self._deferred
        if deferred is not None:
            deferred.append(data)
        elif self._batch.pending:  # a broker write of this batch goes first
            self._deferred = [data]
            self._batch.defer(self._write_deferred)
        else:
            transport.write(data)

    def _write_deferred(self) -> None:
        deferred, self._deferred = self._deferred, None
        transport = self.transport
        if deferred and transport is not None and not transport.is_closing():
            transport.write(deferred[0] if len(deferred) == 1 else b"".join(deferred))

    def _run_deferred(self) -> None:
        """Before closing: what this connection deferred goes out now (the batch's broker
        writes first)."""
        if self._deferred is not None:
            self._batch.run()

    # -- the one timer --------------------------------------------------------------------------

    def _deadline(self) -> float | None:
        if self._linger_until is not None:
            return self._linger_until
        best: float | None = None
        if self._write_stalled_since is not None:
            best = self._write_stalled_since + self.limits.write_timeout
        session = self.session
        if session is not None:
            when = session.next_deadline()
        elif self.tls is not None and not self.tls.handshake_done:
            when = self._started + self.limits.handshake_timeout
        else:  # sniffing the preface
            when = self._started + self.limits.header_timeout
        if when is not None and (best is None or when < best):
            best = when
        return best

    def _rearm(self) -> None:
        if self.closed:
            return
        when = self._deadline()
        if when is None:
            return  # a timer already set fires early and re-arms: harmless
        if self._timer is None or when < self._timer_at:
            self._set_timer(when)

    def _set_timer(self, when: float) -> None:
        """The one timer, moved earlier to ``when`` (or set)."""
        timer = self._timer
        if timer is not None:
            timer.cancel()
        self._timer_at = when
        self._timer = self.loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.closed:
            return
        now = self.loop.time()
        if self._linger_until is not None:
            if now >= self._linger_until:
                self._close_now()
            else:
                self._rearm()
            return
        stalled = self._write_stalled_since
        if stalled is not None and now >= stalled + self.limits.write_timeout:
            log.debug("peer %s is not reading: aborting", self.peername)
            self.abort()
            return
        session = self.session
        if session is None:
            deadline = self._deadline()
            if deadline is not None and now >= deadline:
                log.debug("connection from %s: no handshake or request in time", self.peername)
                self._close_now()
                return
        else:
            session.handle_timeout(now)
        self._flush(now)
        self._batch.callback_done()

    # -- closing ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Graceful shutdown: finish what is in flight, then close."""
        if self._shutdown or self.closed:
            return
        self._shutdown = True
        now = self.loop.time()
        if self.session is None:
            if self.tls is not None and not self.tls.handshake_done:
                self.abort()  # a handshake is not worth finishing now
            else:
                self._begin_close(now)
            return
        self._start_shutdown(now)
        self._flush(now)
        self._batch.callback_done()

    def _start_shutdown(self, now: float) -> None:
        if self.session is not None:
            self.session.shutdown(now)

    def _begin_close(self, now: float) -> None:
        """close_notify + FIN, then drop the peer's leftovers until EOF or the linger time."""
        transport = self.transport
        if self.closed or transport is None:
            return
        if self.tls is not None:
            self.tls.close()
            self._write_tls()
        self._run_deferred()
        if transport.is_closing() or not transport.can_write_eof():
            self._close_now()
            return
        try:
            transport.write_eof()
        except OSError:  # the peer is already gone
            self.abort()
            return
        if self._peer_eof:
            self._close_now()
            return
        self._linger_until = now + self.limits.linger_timeout
        if self._write_stalled_since is None:
            transport.resume_reading()
        self._rearm()

    def _close_now(self) -> None:
        if self.closed:
            return
        self._run_deferred()
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        self.server.released(self)  # free the slot now, before the socket is gone

    def abort(self) -> None:
        """Drop the connection now, without flushing (an RST), and free its slot at once."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self.server.released(self)


class InterNodeServer:
    """The mTLS HTTP server of ``POST /v1/workloads/events`` (or any :class:`Handler`).

    ``is_pinned`` tells pinned peers from strangers at handshake time (admission only; the
    handler still authorizes every request). Without it every handshaken peer counts as pinned.
    ``plaintext`` (test harnesses, h2spec) skips TLS; every peer then has ``plain_fingerprint``
    and speaks ``plain_alpn`` (None: sniffed, as without ALPN).
    """

    def __init__(
        self,
        handler: Handler,
        identity: IdentitySource | None,
        *,
        port: int = DEFAULT_PORT,
        hosts: Sequence[str] | None = None,
        limits: Limits | None = None,
        is_pinned: Callable[[str], bool] | None = None,
        plaintext: bool = False,
        plain_fingerprint: str | None = None,
        plain_alpn: str | None = None,
        tls_policy: TLSPolicy | None = None,
        members: Callable[[], int] = lambda: 0,
    ) -> None:
        self.handler = handler
        self.members = members  # how many members the node has now (its pins)
        self.limits = lim = limits or Limits()
        self.unauth_limits = stranger_limits(lim)
        if plaintext:
            self.tls: ServerTLS | None = None
        else:
            assert identity is not None, "a TLS server needs an identity source"
            self.tls = ServerTLS(identity, tls_policy)
        self.plain_fingerprint = plain_fingerprint
        self.plain_alpn = plain_alpn
        self.is_pinned = is_pinned
        self._requested_port = port
        self._hosts = hosts
        self._servers: list[asyncio.Server] = []
        self._admission = Admission[ServerConnection](lim, members)
        self._turns = Turns[ServerConnection](lim.max_handshakes_at_once, lambda c: c.closed)
        self._socks: list[socket.socket] = []
        self._backlog = 0
        self._closing = False
        self._drained: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port: int = 0  # the bound port, once started
        self._high_water = 0  # most connections open since the last trim
        self._batch: EndOfBatch | None = None
        #: Every connection reads into this one buffer (see ``ServerConnection.get_buffer``).
        receive_bytes = bytearray(RECEIVE_BUFFER_BYTES)
        self.receive_buffer = memoryview(receive_bytes)
        # For TLSMachine.receive_from. Taken from the bytearray, not the memoryview: a
        # memoryview cleared by the garbage collector while the pointer still holds its
        # export would free the buffer under it (a bytearray is never cleared so).
        self.receive_pointer = pointer_to(receive_bytes)
        self._trim: asyncio.Handle | None = None

    def set_limits(self, limits: Limits) -> None:
        """New limits (a configuration reload): connections accepted from now on use them, the
        admission bounds apply at the next accept, and the handshake turns at once (waiters take
        the turns a larger limit adds); open connections keep their timeouts."""
        self.limits = limits
        self.unauth_limits = stranger_limits(limits)
        self._admission.limits = limits
        for conn in self._turns.set_limit(limits.max_handshakes_at_once):
            conn.take_turn()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "InterNodeServer.start() first"
        return self._loop

    @property
    def batch(self) -> EndOfBatch:
        """The loop's :class:`~nvpair_wm.io.batch.EndOfBatch` (shared with the broker channel)."""
        if self._batch is None:
            self._batch = for_loop(self.loop)
        return self._batch

    @property
    def refused_over_cap(self) -> int:
        """Connections closed at accept: over ``max_connections`` with no stranger to evict."""
        return self._admission.refused

    @property
    def evicted(self) -> int:
        """Unauthenticated connections closed to make room for a new connection."""
        return self._admission.evicted

    @property
    def unauthenticated_count(self) -> int:
        return len(self._admission.unauthenticated)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind and start accepting. Raises OSError if the port cannot be bound."""
        loop = self._loop = asyncio.get_running_loop()
        self._backlog = listen_backlog(self.limits, self.members())
        socks = self._socks = bind_sockets(self._hosts, self._requested_port, self._backlog)
        self.port = socks[0].getsockname()[1]
        try:
            for sock in socks:
                # asyncio listens again, with its own backlog (100) unless told ours.
                srv = await loop.create_server(self._new_protocol, sock=sock, backlog=self._backlog)
                self._servers.append(srv)
        except BaseException:
            for srv in self._servers:
                srv.close()
            for sock in socks:
                sock.close()
            raise
        log.info(
            "inter-node server listening on %s",
            ", ".join(_fmt_addr(s.getsockname()) for s in socks),
        )
        if self.tls is not None and not self.tls.has_identity():
            log.warning("no cluster identity yet: TLS handshakes fail until node.crt/key appear")

    def fit(self) -> None:
        """Grow the listen backlog to the member count now (``listen`` again resizes it)."""
        backlog = listen_backlog(self.limits, self.members())
        if backlog > self._backlog and not self._closing:
            self._backlog = backlog
            for sock in self._socks:
                with contextlib.suppress(OSError):
                    sock.listen(backlog)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [
            (str(sock.getsockname()[0]), int(sock.getsockname()[1]))
            for srv in self._servers
            for sock in srv.sockets
        ]

    @property
    def connection_count(self) -> int:
        return len(self._admission)

    async def close(self, grace: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish (up to ``grace`` s), close everything."""
        if grace is None:
            grace = self.limits.shutdown_grace
        self._closing = True
        for srv in self._servers:
            srv.close()
        conns = self._admission.all()
        if conns:
            self._drained = asyncio.Event()
            for conn in conns:
                conn.shutdown()
            if len(self._admission):
                try:
                    async with asyncio.timeout(grace):
                        await self._drained.wait()
                except TimeoutError:
                    for conn in self._admission.all():
                        conn.abort()
        for srv in self._servers:
            await srv.wait_closed()
        self._servers.clear()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- connections (called by ServerConnection) --------------------------------------------

    def _new_protocol(self) -> ServerConnection:
        tls = TLSMachine(self.tls.new_connection()) if self.tls is not None else None
        return ServerConnection(self, tls)

    def accepted(self, conn: ServerConnection) -> bool:
        if self._closing or not self._admission.admit(conn):
            return False
        self._high_water = max(self._high_water, len(self._admission))
        return True

    def handshake_turn(self, conn: ServerConnection) -> bool:
        """True: ``conn`` may handshake now; False: it waits its turn (:mod:`nvpair_wm.turns`)."""
        return self._turns.take(conn)

    def handshake_over(self) -> None:
        """A handshake turn ended (done, failed, or its connection closed): the next one's."""
        if (conn := self._turns.release()) is not None:
            conn.take_turn()

    def authenticate(self, conn: ServerConnection) -> bool:
        """Move a handshaken connection to the pinned slots if its certificate is pinned."""
        fp = conn.peer_fingerprint
        pinned = self.is_pinned is None or (fp is not None and self.is_pinned(fp))
        if pinned:
            self._admission.authenticate(conn)
        return pinned

    def released(self, conn: ServerConnection) -> None:
        admission = self._admission
        admission.release(conn)
        count = len(admission)
        if self._drained is not None and not count:
            self._drained.set()
        if count <= self._high_water // 8 and self._high_water >= TRIM_AFTER_CONNECTIONS:
            # A burst of connections is over: hand their freed memory back (once per burst).
            self._high_water = count
            if self._trim is None:
                self._trim = self.loop.call_soon(self._trim_now)

    def _trim_now(self) -> None:
        self._trim = None
        allocator.trim()


def _fmt_addr(addr: tuple[object, ...]) -> str:
    host, port = str(addr[0]), addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
