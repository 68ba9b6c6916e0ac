"""The inbound inter-node server: asyncio listener → TLS → HTTP/2 or HTTP/1.1 adapter.

Per connection: accept (closed at once over ``max_connections``), TLS handshake within
``handshake_timeout`` (the node certificate is resolved for this handshake; without an identity
the handshake fails and the listener stays up), then the adapter by ALPN: ``h2`` → HTTP/2,
``http/1.1`` → HTTP/1.1, none → HTTP/2 if the client opens with the HTTP/2 preface (prior
knowledge), else HTTP/1.1. The adapter runs until the connection is done; then the connection
is closed gracefully (close_notify, FIN, a bounded linger).

Binding: by default ``[::]`` dual-stack (IPv4 and IPv6 on one socket), or ``0.0.0.0`` plus
``[::]`` on the same port where dual-stack sockets are unavailable. Port 0 picks a free port,
shared by every socket (see :attr:`InterNodeServer.port`).

Shutdown (:meth:`InterNodeServer.close`): stop accepting, ask every connection to finish what
is in flight (HTTP/1.1: ``Connection: close`` / close when idle; HTTP/2: GOAWAY), wait up to
``grace`` seconds, then abort what is left.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Self

from nvpair_wm_schema.contract import DEFAULT_PORT

from nvpair_wm.http.core import ByteStream, Handler, Limits, ShutdownRequested
from nvpair_wm.http.h1 import serve_h1
from nvpair_wm.pins import IdentitySource
from nvpair_wm.tls import ServerTLS, TLSConnection, TLSError, TLSProtocol

__all__ = ["DEFAULT_PORT", "H2_PREFACE", "InterNodeServer", "bind_sockets"]

log = logging.getLogger(__name__)

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

ServeFn = Callable[[ByteStream, Handler, Limits], Awaitable[None]]


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


class _ServerProtocol(TLSProtocol):
    def __init__(self, tls: TLSConnection, server: InterNodeServer) -> None:
        super().__init__(tls)
        self._server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._server._accepted(self.tls)


class InterNodeServer:
    """The mTLS HTTP server of ``POST /v1/workloads/events`` (or any :class:`Handler`)."""

    def __init__(
        self,
        handler: Handler,
        identity: IdentitySource,
        *,
        port: int = DEFAULT_PORT,
        hosts: Sequence[str] | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.handler = handler
        self.limits = limits or Limits()
        self.tls = ServerTLS(identity)
        self._requested_port = port
        self._hosts = hosts
        self._servers: list[asyncio.Server] = []
        self._conns: dict[TLSConnection, asyncio.Task[None]] = {}
        self._closing = False
        self.port: int = 0  # the bound port, once started
        self.refused_over_cap = 0  # connections closed at accept: over max_connections

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind and start accepting. Raises OSError if the port cannot be bound."""
        loop = asyncio.get_running_loop()
        socks = bind_sockets(self._hosts, self._requested_port)
        self.port = socks[0].getsockname()[1]
        try:
            for sock in socks:
                srv = await loop.create_server(self._new_protocol, sock=sock)
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
        if not self.tls.has_identity():
            log.warning("no cluster identity yet: TLS handshakes fail until node.crt/key appear")

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [
            (str(sock.getsockname()[0]), int(sock.getsockname()[1]))
            for srv in self._servers
            for sock in srv.sockets
        ]

    @property
    def connection_count(self) -> int:
        return len(self._conns)

    async def close(self, grace: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish (up to ``grace`` s), close everything."""
        if grace is None:
            grace = self.limits.shutdown_grace
        self._closing = True
        for srv in self._servers:
            srv.close()
        for tls in list(self._conns):
            if tls.handshake_done:
                tls.request_shutdown()
            else:
                tls.abort()
        tasks = list(self._conns.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for tls, task in list(self._conns.items()):
                if task in pending:
                    tls.abort()
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for srv in self._servers:
            await srv.wait_closed()
        self._servers.clear()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- connections -------------------------------------------------------------------------

    def _new_protocol(self) -> _ServerProtocol:
        tls = TLSConnection(self.tls.new_connection(), write_timeout=self.limits.write_timeout)
        return _ServerProtocol(tls, self)

    def _accepted(self, tls: TLSConnection) -> None:
        if self._closing:
            tls.abort()
            return
        if len(self._conns) >= self.limits.max_connections:
            self.refused_over_cap += 1
            # Once loudly, then quietly: a connection flood must not become a log flood.
            level = logging.WARNING if self.refused_over_cap == 1 else logging.DEBUG
            log.log(level, "refusing connection from %s: at max_connections", tls.peername)
            tls.abort()
            return
        task = asyncio.get_running_loop().create_task(self._serve(tls))
        self._conns[tls] = task
        task.add_done_callback(lambda _: self._conns.pop(tls, None))

    async def _serve(self, tls: TLSConnection) -> None:
        limits = self.limits
        try:
            try:
                async with asyncio.timeout(limits.handshake_timeout):
                    await tls.handshake()
            except (TLSError, TimeoutError) as exc:
                log.debug("TLS handshake with %s failed: %s", tls.peername, exc or "timeout")
                tls.close()  # delivers the alert, if any
                return
            serve = await self._pick_adapter(tls)
            if serve is not None:
                await serve(tls, self.handler, limits)
        except asyncio.CancelledError:
            tls.abort()
            raise
        except (ConnectionError, TLSError) as exc:
            log.debug("connection from %s ended: %r", tls.peername, exc)
        except Exception:
            log.exception("connection from %s failed", tls.peername)
            tls.abort()
        finally:
            if not tls.closed:
                try:
                    await tls.aclose(limits.linger_timeout)
                except Exception:  # closing must never raise out of a connection task
                    log.debug("closing connection from %s failed", tls.peername, exc_info=True)
                    tls.abort()
            # Free the slot now: the socket itself closes on the next loop iteration, so a
            # client that saw this close and reconnects always finds the slot free.
            self._conns.pop(tls, None)

    async def _pick_adapter(self, tls: TLSConnection) -> ServeFn | None:
        if tls.alpn == "h2":
            return _serve_h2()
        if tls.alpn == "http/1.1":
            return serve_h1
        # No ALPN: HTTP/2 with prior knowledge starts with the preface; anything else is 1.1.
        buf = b""
        try:
            async with asyncio.timeout(self.limits.header_timeout):
                while len(buf) < len(H2_PREFACE) and H2_PREFACE.startswith(buf):
                    data = await tls.read()
                    if not data:
                        return None
                    buf += data
        except (TimeoutError, ShutdownRequested):
            return None  # too slow to say even 24 bytes (or shutting down): close
        tls.unread(buf)
        return _serve_h2() if buf.startswith(H2_PREFACE) else serve_h1


def _serve_h2() -> ServeFn:
    from nvpair_wm.http.h2 import serve_h2  # noqa: PLC0415 - optional until the adapter lands

    return serve_h2


def _fmt_addr(addr: tuple[object, ...]) -> str:
    host, port = str(addr[0]), addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
