"""HTTP/2 and HTTP/1.1 client over one pin-checked mutual-TLS connection (asyncio).

The outbound half of the inter-node channel, as thin as the server's adapters: TLS is
:mod:`nvpair_wm.tls` (pyOpenSSL over memory BIOs, the same code the server runs), HTTP/2 is the
``h2`` library and HTTP/1.1 is ``h11``; this module moves bytes between them and adds the
timeouts and bounds they leave to their user.

Who the server is, is decided by pin, not by CA or hostname: the handshake succeeds only if the
SHA-256 of the server's leaf certificate (DER) equals the fingerprint of the node record being
dialled **and** is pinned in ``trusted/`` at that moment. Otherwise the handshake is aborted by
our side before a single byte of HTTP is written, and :class:`PinRefused` says what the server
presented. The client presents this node's certificate.

ALPN offers ``h2`` then ``http/1.1``; the server's choice picks the connection class. HTTP/2
runs several requests at once (up to the server's ``SETTINGS_MAX_CONCURRENT_STREAMS`` and our
own cap), HTTP/1.1 one at a time on a kept-alive connection.

Each connection has a reader task from the start, so a connection that the server closes, or
that dies, is noticed while it is idle (``on_change`` is called), not at the next request: the
broadcaster reconnects at once and resynchronises the peer. TCP keepalive, and on HTTP/2 a PING
(:meth:`PeerConnection.ping`), find connections that die without a FIN.

HTTP/2 GOAWAY is handled here, before ``h2`` sees it: ``h2`` closes its state machine on a
received GOAWAY and would then refuse the responses that the server still sends for streams it
promised to finish (python-hyper/h2#1181, the same issue the server side works around). Streams
above the GOAWAY's last stream id fail with :class:`StreamRefused` (never processed: safe to
retry); the others complete normally; no new stream is opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import h11
from h2.errors import ErrorCodes
from OpenSSL import SSL

from nvpair_wm.pins import NodeIdentity
from nvpair_wm.tls import (
    ALPN_PROTOCOLS,
    TLSConnection,
    TLSError,
    TLSProtocol,
    client_context,
)

__all__ = [
    "ClientError",
    "ConnectFailed",
    "ConnectionLost",
    "PeerConnection",
    "PinRefused",
    "Response",
    "ResponseTimeout",
    "StreamRefused",
    "open_connection",
]

log = logging.getLogger(__name__)

_GOAWAY: Final = 0x7
_FRAME_HEADER: Final = 9
_USER_AGENT: Final = b"nvpair-wm"


class ClientError(ConnectionError):
    """The request did not get a response; retrying it (on this or a new connection) is safe."""


class ConnectFailed(ClientError):
    """TCP connect or TLS handshake failed, or timed out."""


class PinRefused(ConnectFailed):
    """The server's certificate is not the record's fingerprint, or is not pinned."""


class ConnectionLost(ClientError):
    """The connection ended before the response was complete."""


class ResponseTimeout(ClientError):
    """No complete response within the timeout; the connection is closed (it may be dead)."""


class StreamRefused(ClientError):
    """HTTP/2: the server reset the stream or excluded it with GOAWAY."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        """First value of header ``name`` (lowercase), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


def _authority(host: str, port: int) -> bytes:
    return (f"[{host}]:{port}" if ":" in host else f"{host}:{port}").encode("idna")


class PeerConnection:
    """One open connection to a peer; :func:`open_connection` makes the right subclass."""

    protocol: str = ""

    def __init__(
        self,
        tls: TLSConnection,
        authority: bytes,
        on_change: Callable[[], None],
        max_response_bytes: int,
    ) -> None:
        self._tls = tls
        self._authority = authority
        self._on_change = on_change
        self._max_response = max_response_bytes
        self._loop = asyncio.get_running_loop()
        self.server_fingerprint = tls.peer_fingerprint
        self.close_reason: str | None = None
        self.last_activity = self._loop.time()
        self._reader: asyncio.Task[None] | None = None

    # -- what the broadcaster looks at --------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.close_reason is not None

    @property
    def usable(self) -> bool:
        """New requests may start on this connection."""
        return not self.closed

    @property
    def active(self) -> int:
        """Requests in progress."""
        raise NotImplementedError

    def capacity(self, cap: int) -> int:
        """How many requests may be in progress at once (``cap``: our own limit)."""
        raise NotImplementedError

    async def post(self, path: str, body: bytes, *, response_timeout: float) -> Response:
        """POST ``body`` as application/json; raises :class:`ClientError` without a response.

        The timeout is a parameter, not the caller's ``asyncio.timeout``, because a request that
        times out leaves the connection in an unknown state: the connection closes itself.
        """
        raise NotImplementedError

    async def ping(self, ack_timeout: float) -> None:
        """Check that the peer still answers (HTTP/2 PING); a no-op on HTTP/1.1."""

    def close(self, reason: str = "closed by us") -> None:
        """Close now (HTTP/2: GOAWAY first; TLS close_notify), failing what is in progress."""
        if self.closed:
            return
        self._goodbye()
        self._lose(reason, graceful=True)

    async def aclose(self, reason: str = "closed by us") -> None:
        self.close(reason)
        if self._reader is not None and self._reader is not asyncio.current_task():
            with contextlib.suppress(BaseException):
                await self._reader

    # -- shared machinery ---------------------------------------------------------------------

    def _start_reader(self) -> None:
        self._reader = self._loop.create_task(self._read_loop(), name=f"{self.protocol}-reader")

    async def _read_loop(self) -> None:
        reason = "closed by the peer"
        try:
            while not self.closed:
                data = await self._tls.read()
                self.last_activity = self._loop.time()
                self._received(data)
                if not data:
                    break
        except asyncio.CancelledError:
            raise
        except (TLSError, ConnectionError, OSError) as exc:
            reason = f"connection failed: {exc}"
        except Exception as exc:  # a protocol error of the peer
            reason = f"protocol error: {type(exc).__name__}: {exc}"
        self._lose(reason)

    def _received(self, data: bytes) -> None:
        raise NotImplementedError

    def _goodbye(self) -> None:
        """Protocol-level farewell before the TLS close (HTTP/2 GOAWAY)."""

    def _fail_all(self, exc: ClientError) -> None:
        raise NotImplementedError

    def _lose(self, reason: str, *, graceful: bool = False) -> None:
        if self.closed:
            return
        self.close_reason = reason
        self._fail_all(ConnectionLost(reason))
        if graceful:
            self._tls.close()
        else:
            self._tls.abort()
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
        self._on_change()


@dataclass(slots=True)
class _Exchange:
    """One request's response as it arrives (an HTTP/1.1 exchange or an HTTP/2 stream)."""

    done: asyncio.Future[Response]
    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)


# -- HTTP/1.1 ---------------------------------------------------------------------------------


class H1Connection(PeerConnection):
    """HTTP/1.1 on h11: one request at a time on a kept-alive connection."""

    protocol = "http/1.1"

    def __init__(
        self,
        tls: TLSConnection,
        authority: bytes,
        on_change: Callable[[], None],
        max_response_bytes: int,
    ) -> None:
        super().__init__(tls, authority, on_change, max_response_bytes)
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=64 * 1024)
        self._pending: _Exchange | None = None
        self._start_reader()

    @property
    def usable(self) -> bool:
        return (
            not self.closed
            and self._pending is None
            and self._h11.our_state is h11.IDLE
            and self._h11.their_state is h11.IDLE
        )

    @property
    def active(self) -> int:
        return 0 if self._pending is None else 1

    def capacity(self, cap: int) -> int:
        return 1

    async def post(self, path: str, body: bytes, *, response_timeout: float) -> Response:
        if not self.usable:
            raise ConnectionLost(self.close_reason or "connection busy or closing")
        ex = _Exchange(self._loop.create_future())
        self._pending = ex
        headers = [
            (b"host", self._authority),
            (b"user-agent", _USER_AGENT),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        try:
            async with asyncio.timeout(response_timeout):
                out = self._h11.send(h11.Request(method=b"POST", target=path, headers=headers))
                out = (out or b"") + (self._h11.send(h11.Data(data=body)) or b"")
                out += self._h11.send(h11.EndOfMessage()) or b""
                self._tls.write(out)
                self.last_activity = self._loop.time()
                await self._tls.drain()
                response = await ex.done
        except TimeoutError:
            self._lose(f"no response within {response_timeout:g}s")
            raise ResponseTimeout(f"no response within {response_timeout:g}s") from None
        except h11.LocalProtocolError as exc:
            self._lose(f"HTTP/1.1 state error: {exc}")
            raise ConnectionLost(str(exc)) from exc
        except ConnectionResetError as exc:  # from drain(): the peer is gone or not reading
            self._lose(str(exc))
            raise ConnectionLost(str(exc)) from exc
        finally:
            self._pending = None
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            self._on_change()
        else:  # the server said Connection: close (or answered before the body was sent)
            self.close("closed after the response, as HTTP/1.1 required")
        return response

    def _received(self, data: bytes) -> None:
        self._h11.receive_data(data)
        while True:
            event = self._h11.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.ConnectionClosed):
                return  # _read_loop sees the EOF and closes
            ex = self._pending
            if ex is None:
                raise h11.RemoteProtocolError("response without a request")
            if isinstance(event, h11.Response):
                ex.status = event.status_code
                ex.headers = list(event.headers)
            elif isinstance(event, h11.Data):
                ex.body += event.data
                if len(ex.body) > self._max_response:
                    raise h11.RemoteProtocolError(f"response over {self._max_response} bytes")
            elif isinstance(event, h11.EndOfMessage) and not ex.done.done():
                ex.done.set_result(Response(ex.status, ex.headers, bytes(ex.body)))
            # InformationalResponse (100 Continue): nothing to do.

    def _fail_all(self, exc: ClientError) -> None:
        ex = self._pending
        if ex is not None and not ex.done.done():
            ex.done.set_exception(exc)


# -- HTTP/2 -----------------------------------------------------------------------------------


class H2Connection(PeerConnection):
    """HTTP/2 on h2: many concurrent requests, flow control both ways, PING, GOAWAY."""

    protocol = "h2"

    def __init__(
        self,
        tls: TLSConnection,
        authority: bytes,
        on_change: Callable[[], None],
        max_response_bytes: int,
    ) -> None:
        super().__init__(tls, authority, on_change, max_response_bytes)
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config)
        self._h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: max(65_535, max_response_bytes),
            },
        )
        self._h2.initiate_connection()
        self._streams: dict[int, _Exchange] = {}
        self._goaway_last: int | None = None
        self._inbox = bytearray()  # undecoded frames (split here to catch GOAWAY)
        self._window_waiters: list[asyncio.Future[None]] = []
        self._pings: dict[bytes, asyncio.Future[None]] = {}
        self._ping_count = 0
        self._flush()
        self._start_reader()

    @property
    def usable(self) -> bool:
        return not self.closed and self._goaway_last is None

    @property
    def active(self) -> int:
        return len(self._streams)

    def capacity(self, cap: int) -> int:
        remote = self._h2.remote_settings.max_concurrent_streams
        return max(1, min(cap, remote))

    async def post(self, path: str, body: bytes, *, response_timeout: float) -> Response:
        if not self.usable:
            raise ConnectionLost(self.close_reason or "the server sent GOAWAY")
        sid = self._h2.get_next_available_stream_id()
        st = _Exchange(self._loop.create_future())
        self._streams[sid] = st
        headers = [
            (b":method", b"POST"),
            (b":scheme", b"https"),
            (b":authority", self._authority),
            (b":path", path.encode("ascii")),
            (b"user-agent", _USER_AGENT),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        try:
            async with asyncio.timeout(response_timeout):
                self._h2.send_headers(sid, headers, end_stream=not body)
                self._flush()
                await self._send_body(sid, st, body)
                return await st.done
        except TimeoutError:
            self._lose(f"no response within {response_timeout:g}s")
            raise ResponseTimeout(f"no response within {response_timeout:g}s") from None
        except h2.exceptions.ProtocolError as exc:
            self._lose(f"HTTP/2 protocol error: {exc}")
            raise ConnectionLost(str(exc)) from exc
        except ConnectionResetError as exc:
            self._lose(str(exc))
            raise ConnectionLost(str(exc)) from exc
        finally:
            self._streams.pop(sid, None)
            self._on_change()

    async def _send_body(self, sid: int, st: _Exchange, body: bytes) -> None:
        view = memoryview(body)
        while view:
            if st.done.done():
                return  # answered (or reset) early: the rest of the body is not wanted
            try:
                window = self._h2.local_flow_control_window(sid)
            except h2.exceptions.StreamClosedError:
                return
            size = min(window, self._h2.max_outbound_frame_size, len(view))
            if size <= 0:
                await self._wait_window(st)
                continue
            self._h2.send_data(sid, bytes(view[:size]), end_stream=size == len(view))
            view = view[size:]
            self._flush()
            await self._tls.drain()

    async def _wait_window(self, st: _Exchange) -> None:
        waiter = self._loop.create_future()
        self._window_waiters.append(waiter)
        try:
            await asyncio.wait([waiter, st.done], return_when=asyncio.FIRST_COMPLETED)
        finally:
            with contextlib.suppress(ValueError):
                self._window_waiters.remove(waiter)
        if self.closed and not st.done.done():
            raise ConnectionLost(self.close_reason or "closed")

    def _wake_windows(self) -> None:
        waiters, self._window_waiters = self._window_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def ping(self, ack_timeout: float) -> None:
        if self.closed:
            raise ConnectionLost(self.close_reason or "closed")
        self._ping_count += 1
        data = self._ping_count.to_bytes(8, "big")
        waiter = self._loop.create_future()
        self._pings[data] = waiter
        try:
            self._h2.ping(data)
            self._flush()
            async with asyncio.timeout(ack_timeout):
                await waiter
        except TimeoutError:
            self._lose(f"PING unanswered for {ack_timeout:g}s")
            raise ResponseTimeout(f"PING unanswered for {ack_timeout:g}s") from None
        finally:
            self._pings.pop(data, None)

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data:
            self._tls.write(data)

    def _goodbye(self) -> None:
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._h2.close_connection(ErrorCodes.NO_ERROR)
            self._flush()

    def _received(self, data: bytes) -> None:
        if not data:
            return
        self._inbox += data
        inbox = self._inbox
        start = 0
        h2_data = bytearray()
        while len(inbox) - start >= _FRAME_HEADER:
            length = int.from_bytes(inbox[start : start + 3], "big")
            if length > self._h2.local_settings.max_frame_size:
                raise h2.exceptions.FrameTooLargeError(f"frame of {length} bytes")
            end = start + _FRAME_HEADER + length
            if len(inbox) < end:
                break
            if inbox[start + 3] == _GOAWAY:
                if h2_data:
                    self._feed(bytes(h2_data))
                    h2_data.clear()
                self._goaway(bytes(inbox[start + _FRAME_HEADER : end]))
            else:
                h2_data += inbox[start:end]
            start = end
        del inbox[:start]
        if h2_data:
            self._feed(bytes(h2_data))

    def _goaway(self, payload: bytes) -> None:
        if len(payload) < 8:
            raise h2.exceptions.ProtocolError("GOAWAY frame too short")
        last = int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF
        code = int.from_bytes(payload[4:8], "big")
        if self._goaway_last is None or last < self._goaway_last:
            self._goaway_last = last
        for sid, st in list(self._streams.items()):
            if sid > last and not st.done.done():
                st.done.set_exception(StreamRefused(f"stream {sid} refused by GOAWAY"))
        if code != ErrorCodes.NO_ERROR:
            detail = payload[8:].decode("utf-8", "replace")
            log.info("peer sent GOAWAY %s %s", _code_name(code), detail)
        self._on_change()

    def _feed(self, data: bytes) -> None:
        events = self._h2.receive_data(data)
        for event in events:
            self._event(event)
        self._flush()

    def _event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            st = self._streams.get(event.stream_id)
            if st is not None:
                st.headers = [(bytes(k), bytes(v)) for k, v in event.headers]
                status = dict(st.headers).get(b":status", b"0")
                st.status = int(status) if status.isdigit() else 0
        elif isinstance(event, h2.events.DataReceived):
            sid = event.stream_id
            self._h2.acknowledge_received_data(event.flow_controlled_length, sid)
            st = self._streams.get(sid)
            if st is not None and not st.done.done():
                st.body += event.data
                if len(st.body) > self._max_response:
                    self._h2.reset_stream(sid, ErrorCodes.CANCEL)
                    st.done.set_exception(StreamRefused("response body too large"))
        elif isinstance(event, h2.events.StreamEnded):
            st = self._streams.get(event.stream_id)
            if st is not None and not st.done.done():
                st.done.set_result(Response(st.status, st.headers, bytes(st.body)))
        elif isinstance(event, h2.events.StreamReset):
            st = self._streams.get(event.stream_id)
            if st is not None and not st.done.done():
                code = _code_name(event.error_code)
                st.done.set_exception(StreamRefused(f"stream reset by the peer: {code}"))
        elif isinstance(event, h2.events.PingAckReceived):
            waiter = self._pings.get(event.ping_data)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif isinstance(event, h2.events.WindowUpdated):
            self._wake_windows()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self._wake_windows()
            self._on_change()
        elif isinstance(event, h2.events.ConnectionTerminated):  # pragma: no cover - see _goaway
            self._goaway_last = event.last_stream_id or 0

    def _fail_all(self, exc: ClientError) -> None:
        for st in self._streams.values():
            if not st.done.done():
                st.done.set_exception(exc)
        for waiter in self._pings.values():
            if not waiter.done():
                waiter.set_exception(exc)
        self._wake_windows()


def _code_name(code: int) -> str:
    try:
        return ErrorCodes(code).name
    except ValueError:
        return f"0x{code:x}"


# -- opening a connection ---------------------------------------------------------------------


class _ClientProtocol(TLSProtocol):
    """TLSProtocol that turns on TCP keepalive, so a silently dead peer is noticed."""

    def __init__(self, tls: TLSConnection, keepalive: float) -> None:
        super().__init__(tls)
        self._keepalive = keepalive

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None and self._keepalive > 0:
            _set_keepalive(sock, self._keepalive)
        super().connection_made(transport)


def _set_keepalive(sock: socket.socket, idle: float) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
            opt = getattr(socket, name, None)
            if opt is not None:
                sock.setsockopt(socket.IPPROTO_TCP, opt, max(1, int(value)))


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


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


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
) -> PeerConnection:
    """Connect, handshake, check the server's pin, and return a ready connection.

    ``on_change`` is called (on the event loop) whenever the connection closes, a request
    finishes, or its capacity changes: the owner's cue to look at it again.
    """
    check = _PinCheck(expected_fingerprint, is_pinned)
    try:
        ctx = client_context(identity, check, alpn)
    except ValueError as exc:
        raise ConnectFailed(f"our identity is unusable: {exc}") from exc
    ssl_conn = SSL.Connection(ctx, None)
    if not _is_ip(host):
        with contextlib.suppress(UnicodeError, SSL.Error):
            ssl_conn.set_tlsext_host_name(host.encode("idna"))
    ssl_conn.set_connect_state()
    tls = TLSConnection(ssl_conn)
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(connect_timeout):
            await loop.create_connection(lambda: _ClientProtocol(tls, tcp_keepalive), host, port)
    except TimeoutError:
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
            await tls.handshake()
    except TimeoutError:
        tls.abort()
        raise ConnectFailed("TLS handshake timed out") from None
    except (TLSError, ConnectionError) as exc:
        tls.abort()
        if check.refused is not None:
            raise PinRefused(check.refused) from exc
        raise ConnectFailed(str(exc)) from exc
    except BaseException:
        tls.abort()
        raise
    if tls.peer_fingerprint != expected_fingerprint:  # the callback decides; this is a backstop
        tls.abort()
        raise PinRefused(f"server certificate {tls.peer_fingerprint} is not the expected one")
    authority = _authority(host, port)
    if tls.alpn == "h2":
        return H2Connection(tls, authority, on_change, max_response_bytes)
    return H1Connection(tls, authority, on_change, max_response_bytes)
