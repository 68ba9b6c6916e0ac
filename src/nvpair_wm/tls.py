"""Mutual TLS for the inter-node channel: pyOpenSSL over memory BIOs, driven from asyncio.

Why pyOpenSSL and not :mod:`ssl`: the server must complete the handshake with ANY client
certificate and refuse an unpinned caller per request with a 403 (pins are re-read per request,
also on an open connection). :mod:`ssl` has no verify callback, so it can only accept
certificates that chain to a CA it was told about. pyOpenSSL gives the verify callback, ALPN
selection and per-connection certificates; memory BIOs let asyncio own the socket.

Server side (:class:`ServerTLS`): TLS >= 1.2, renegotiation off, no session resumption (every
handshake is a full one with a client certificate), client certificate REQUIRED but any
certificate accepted (authorization is the endpoint's job, by pin), ALPN ``h2`` then
``http/1.1``. The node certificate is resolved per handshake from an :class:`IdentitySource`
(``nvpair_wm.pins.Identity``: stat-cached, parsed and checked there, so this is cheap): no
identity means that handshake fails while the listener stays up; a new identity is used from
the next handshake on. Each identity gets its own ``SSL.Context`` with the certificate and key
loaded once, so a handshake costs no certificate or key conversion.

Client side (:func:`client_context` + :func:`connect`): presents the node identity and accepts
the server only if the SHA-256 of its leaf certificate is pinned.

Certificates and keys go to pyOpenSSL as cryptography objects (``NodeIdentity.certificate`` /
``private_key``): passing pyOpenSSL ``X509``/``PKey`` objects is deprecated since 24.3.

:class:`TLSConnection` is the asyncio stream face of one client connection: ``handshake()``,
``read()``, ``write()``, ``drain()``, ``close()``; it satisfies ``http.core.ByteStream``. (The
server drives the sans-IO :class:`nvpair_wm.proto.tls.TLSMachine` from ``nvpair_wm.io.server``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from cryptography.hazmat.primitives import serialization
from OpenSSL import SSL, crypto

from nvpair_wm.errors import TLSError
from nvpair_wm.http.core import ShutdownRequested
from nvpair_wm.pins import IdentitySource, NodeIdentity, fingerprint_der

__all__ = [
    "ALPN_PROTOCOLS",
    "ServerTLS",
    "TLSConnection",
    "TLSError",
    "TLSProtocol",
    "client_context",
    "connect",
]

log = logging.getLogger(__name__)

ALPN_PROTOCOLS: tuple[bytes, ...] = (b"h2", b"http/1.1")
_READ_CHUNK = 64 * 1024
_INCOMING_HIGH_WATER = 256 * 1024  # ciphertext buffered ahead of the reader → pause_reading()


def _cert_fingerprint(cert: crypto.X509) -> str:
    return fingerprint_der(crypto.dump_certificate(crypto.FILETYPE_ASN1, cert))


def _accept_any_client_cert(
    conn: SSL.Connection, cert: crypto.X509, errno: int, depth: int, ok: int
) -> bool:
    # Authorization is per request, by pin (endpoint.py). The handshake only needs A cert.
    return True


def _select_alpn(conn: SSL.Connection, offered: list[bytes]) -> bytes | SSL._NoOverlappingProtocols:
    for proto in ALPN_PROTOCOLS:
        if proto in offered:
            return proto
    return SSL.NO_OVERLAPPING_PROTOCOLS  # go on without ALPN (the server then sniffs)


def _base_context() -> SSL.Context:
    ctx = SSL.Context(SSL.TLS_METHOD)
    ctx.set_min_proto_version(SSL.TLS1_2_VERSION)
    ctx.set_options(
        SSL.OP_NO_RENEGOTIATION
        | SSL.OP_NO_TICKET
        | SSL.OP_NO_COMPRESSION
        | SSL.OP_CIPHER_SERVER_PREFERENCE
    )
    ctx.set_session_cache_mode(SSL.SESS_CACHE_OFF)
    return ctx


def _use_identity(ctx: SSL.Context, identity: NodeIdentity) -> None:
    """Load ``identity`` into ``ctx``; raises ValueError if OpenSSL refuses it."""
    try:
        ctx.use_certificate(identity.certificate)
        ctx.use_privatekey(identity.private_key)
        ctx.check_privatekey()
    except (SSL.Error, TypeError) as exc:
        reason = _describe(exc) if isinstance(exc, SSL.Error) else str(exc)
        raise ValueError(f"node identity {identity.fingerprint} unusable: {reason}") from exc


def _server_context(identity: NodeIdentity | None) -> SSL.Context:
    """The server Context; without ``identity`` it has no certificate (handshakes fail)."""
    ctx = _base_context()
    ctx.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT, _accept_any_client_cert)
    ctx.set_alpn_select_callback(_select_alpn)
    if identity is not None:
        _use_identity(ctx, identity)
    return ctx


class ServerTLS:
    """Server-side TLS: the Context of the current identity, rebuilt when the identity changes.

    ``context`` is the certificate-less Context used while there is no (usable) identity; the
    Context in use for a connection is ``conn.get_context()``.
    """

    def __init__(self, identity: IdentitySource) -> None:
        self._identity = identity
        self.context = _server_context(None)
        self._current: tuple[NodeIdentity, SSL.Context] | None = None
        self._unusable: NodeIdentity | None = None  # warned about once; retried when it changes

    def current_context(self) -> SSL.Context | None:
        """The Context of the identity of this moment, or None without a usable identity."""
        try:
            ident = self._identity.current()
        except Exception:  # a broken source must not take the listener down
            log.exception("resolving the node identity failed")
            return None
        if ident is None:
            return None
        current = self._current
        if current is not None and current[0] == ident:
            return current[1]
        if ident == self._unusable:
            return None
        try:
            ctx = _server_context(ident)
        except ValueError as exc:
            self._unusable = ident
            log.warning("%s", exc)
            return None
        self._unusable = None
        self._current = (ident, ctx)  # the old Context lives on in its open connections
        return ctx

    def has_identity(self) -> bool:
        return self.current_context() is not None

    def new_connection(self) -> SSL.Connection:
        """A server-side SSL connection over memory BIOs, with the identity of this moment.

        Without an identity the connection carries no certificate and its handshake fails
        (the client gets a handshake_failure alert); the listener is not affected.
        """
        conn = SSL.Connection(self.current_context() or self.context, None)
        conn.set_accept_state()
        return conn


def client_context(
    identity: NodeIdentity,
    is_pinned: Callable[[str], bool],
    alpn: Iterable[bytes] = ALPN_PROTOCOLS,
) -> SSL.Context:
    """Client-side Context: presents ``identity``, accepts a server only if its leaf is pinned.

    ``is_pinned`` is typically ``PinSet(trusted_dir).is_pinned``. Build a new context when the
    identity changes (cheap); the pin check runs at every handshake. Raises ValueError if
    OpenSSL refuses the identity (``nvpair_wm.pins.Identity`` has already checked it).
    """
    ctx = _base_context()
    _use_identity(ctx, identity)

    def verify(conn: SSL.Connection, cert: crypto.X509, errno: int, depth: int, ok: int) -> bool:
        if depth > 0:
            return True  # chains are irrelevant: the leaf's pin decides
        return is_pinned(_cert_fingerprint(cert))

    ctx.set_verify(SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT, verify)
    protos = list(alpn)
    if protos:
        ctx.set_alpn_protos(protos)
    return ctx


class TLSProtocol(asyncio.Protocol):
    """asyncio transport callbacks → :class:`TLSConnection`."""

    def __init__(self, tls: TLSConnection) -> None:
        self.tls = tls

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.tls._attach(transport)

    def data_received(self, data: bytes) -> None:
        self.tls._feed(data)

    def eof_received(self) -> bool | None:
        self.tls._feed_eof()
        return True  # half-close: keep our side open to answer; close() ends it

    def connection_lost(self, exc: Exception | None) -> None:
        self.tls._lost(exc)

    def pause_writing(self) -> None:
        self.tls._pause_writing()

    def resume_writing(self) -> None:
        self.tls._resume_writing()


class TLSConnection:
    """One TLS connection over an asyncio transport (satisfies ``core.ByteStream``).

    Ciphertext from the socket is buffered (bounded: the transport is paused past a high-water
    mark) and handed to OpenSSL only when the reader needs more, so memory stays bounded when
    the application is slow. All methods run on the event loop thread.
    """

    def __init__(self, ssl_conn: SSL.Connection, *, write_timeout: float = 30.0) -> None:
        self._ssl = ssl_conn
        self._write_timeout = write_timeout
        self._transport: asyncio.Transport | None = None
        self._incoming = bytearray()
        self._eof = False
        self._lost_exc: Exception | None = None
        self._closed = False
        self._reading_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._pushback = b""
        self._handshake_done = False
        self._shutting_down = False
        self._shutdown_unraised = False
        self.connection_made = asyncio.Event()
        self.peer_fingerprint: str | None = None
        self.alpn: str | None = None
        self.peername: object = None

    # -- transport side -------------------------------------------------------------------

    def _attach(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.peername = transport.get_extra_info("peername")
        self.connection_made.set()

    def _feed(self, data: bytes) -> None:
        self._incoming += data
        if len(self._incoming) > _INCOMING_HIGH_WATER and not self._reading_paused:
            self._reading_paused = True
            if self._transport is not None:
                self._transport.pause_reading()
        self._wake()

    def _feed_eof(self) -> None:
        self._eof = True
        self._wake()

    def _lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._lost_exc = exc
        self._closed = True
        self._wake()
        self._resume_writing()

    def _pause_writing(self) -> None:
        self._write_paused = True

    def _resume_writing(self) -> None:
        self._write_paused = False
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait_for_data(self, *, wake_on_shutdown: bool = True) -> None:
        """Wait until ciphertext, EOF or (if ``wake_on_shutdown``) a shutdown request arrives."""
        if self._incoming or self._eof or (wake_on_shutdown and self._shutdown_unraised):
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            if self._waiter is waiter:
                self._waiter = None

    def _feed_ssl(self) -> bool:
        """Move buffered ciphertext into OpenSSL; False if there was none."""
        if not self._incoming:
            return False
        self._ssl.bio_write(bytes(self._incoming))
        self._incoming.clear()
        if self._reading_paused and self._transport is not None and not self._closed:
            self._reading_paused = False
            self._transport.resume_reading()
        return True

    def _flush(self) -> None:
        """Send whatever OpenSSL has produced (records, alerts, close_notify)."""
        chunks: list[bytes] = []
        while True:
            try:
                chunk = self._ssl.bio_read(_READ_CHUNK)
            except SSL.WantReadError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        if chunks and self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(chunks))

    # -- application side -----------------------------------------------------------------

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    @property
    def handshake_done(self) -> bool:
        return self._handshake_done

    async def handshake(self) -> None:
        """Run the handshake to completion; raises :class:`TLSError` when it fails."""
        await self.connection_made.wait()
        while True:
            try:
                self._ssl.do_handshake()
                break
            except SSL.WantReadError:
                self._flush()
                if self._feed_ssl():
                    continue
                if self._eof:
                    raise TLSError("peer closed during the TLS handshake") from None
                await self._wait_for_data()
                self._shutdown_unraised = False  # a handshake is not worth finishing then
                if self._shutting_down:
                    raise TLSError("server shutting down") from None
            except SSL.Error as exc:
                self._flush()  # send the alert
                raise TLSError(f"TLS handshake failed: {_describe(exc)}") from exc
        self._flush()
        self._handshake_done = True
        cert = self._ssl.get_peer_certificate(as_cryptography=True)
        if cert is not None:
            self.peer_fingerprint = fingerprint_der(cert.public_bytes(serialization.Encoding.DER))
        proto = self._ssl.get_alpn_proto_negotiated()
        self.alpn = proto.decode("ascii", "replace") if proto else None

    def unread(self, data: bytes) -> None:
        """Push plaintext back: the next :meth:`read` returns it first (protocol sniffing)."""
        self._pushback = data + self._pushback

    async def read(self) -> bytes:
        """The next plaintext bytes; b"" at EOF (close_notify or TCP close).

        Raises :class:`ShutdownRequested` once after :meth:`request_shutdown`.
        """
        if self._pushback:
            data, self._pushback = self._pushback, b""
            return data
        while True:
            if self._shutdown_unraised:
                self._shutdown_unraised = False
                raise ShutdownRequested()
            try:
                data = self._ssl.recv(_READ_CHUNK)
            except SSL.WantReadError:
                self._flush()  # e.g. TLS 1.3 post-handshake messages, key updates
                if self._feed_ssl():
                    continue
                if self._eof:
                    return b""
                await self._wait_for_data()
                continue
            except SSL.ZeroReturnError:
                return b""  # close_notify
            except SSL.SysCallError:
                return b""  # unexpected EOF: same as a close for our purposes
            except SSL.Error as exc:
                self._flush()
                raise TLSError(f"TLS error: {_describe(exc)}") from exc
            return data

    def write(self, data: bytes) -> None:
        """Encrypt and queue ``data``; silently dropped once the connection is closed."""
        if self._closed or not data:
            return
        view = memoryview(data)
        try:
            while view:
                sent = self._ssl.send(view)
                view = view[sent:]
        except SSL.Error as exc:
            log.debug("TLS write failed: %s", _describe(exc))
            self.abort()
            return
        self._flush()

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark.

        Raises ConnectionError when the connection is gone or the peer does not read for
        ``write_timeout`` seconds (the connection is then aborted).
        """
        if self._closed:
            raise ConnectionResetError("connection closed")
        if not self._write_paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiter = waiter
        try:
            async with asyncio.timeout(self._write_timeout):
                await waiter
        except TimeoutError:
            self.abort()
            raise ConnectionResetError("peer is not reading") from None
        if self._closed:
            raise ConnectionResetError("connection closed")

    def request_shutdown(self) -> None:
        """Graceful shutdown: the next (or the pending) :meth:`read` raises ShutdownRequested."""
        if self._shutting_down:
            return
        self._shutting_down = True
        self._shutdown_unraised = True
        self._wake()

    def close(self) -> None:
        """Send close_notify (if the handshake completed), flush, close. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._handshake_done:
            with contextlib.suppress(SSL.Error):
                self._ssl.shutdown()
            self._flush()
        if self._transport is not None:
            self._transport.close()
        self._wake()

    async def aclose(self, linger: float = 2.0) -> None:
        """Graceful close: close_notify, FIN, then read and drop what the peer still sends
        (at most ``linger`` seconds) before closing the socket.

        Closing a socket with unread input makes the kernel send a RST, which can destroy a
        response the peer has not read yet (an early 413 while it is still uploading).
        """
        if self._closed:
            return
        transport = self._transport
        if transport is None or transport.is_closing() or not transport.can_write_eof():
            self.close()
            return
        if self._handshake_done:
            with contextlib.suppress(SSL.Error):
                self._ssl.shutdown()
            self._flush()
        try:
            transport.write_eof()
        except OSError:  # the peer is already gone
            self.abort()
            return
        self._shutting_down = True  # nothing left to finish: request_shutdown() is moot now
        try:
            async with asyncio.timeout(linger):
                while not self._eof:
                    self._incoming.clear()
                    if self._reading_paused:
                        self._reading_paused = False
                        transport.resume_reading()
                    await self._wait_for_data(wake_on_shutdown=False)
        except TimeoutError:
            pass
        self._closed = True
        transport.close()
        self._wake()

    def abort(self) -> None:
        """Drop the connection now, without flushing."""
        self._closed = True
        if self._transport is not None:
            self._transport.abort()
        self._wake()
        self._resume_writing()

    @property
    def closed(self) -> bool:
        return self._closed


def _describe(exc: SSL.Error) -> str:
    if exc.args and isinstance(exc.args[0], list) and exc.args[0]:
        return "; ".join(str(e[-1]) for e in exc.args[0] if isinstance(e, tuple))
    return str(exc) or type(exc).__name__


async def connect(
    host: str,
    port: int,
    context: SSL.Context,
    *,
    handshake_timeout: float = 10.0,
    server_hostname: str | None = None,
    write_timeout: float = 30.0,
) -> TLSConnection:
    """Open a client TLS connection (pin-verified by ``context``) with a handshake timeout."""
    loop = asyncio.get_running_loop()
    ssl_conn = SSL.Connection(context, None)
    if server_hostname:
        ssl_conn.set_tlsext_host_name(server_hostname.encode("idna"))
    ssl_conn.set_connect_state()
    tls = TLSConnection(ssl_conn, write_timeout=write_timeout)
    async with asyncio.timeout(handshake_timeout):
        await loop.create_connection(lambda: TLSProtocol(tls), host, port)
        try:
            await tls.handshake()
        except BaseException:
            tls.abort()
            raise
    return tls
