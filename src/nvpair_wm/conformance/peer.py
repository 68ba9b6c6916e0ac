"""A minimal mutual-TLS HTTP/2 and HTTP/1.1 client that plays a peer (blocking, one request per
connection).

Kept apart from ``nvpair_wm.io.client`` on purpose: the kit must not test an implementation with
that implementation's own code. It can send what a well-behaved client would not (any method,
path and headers, a body with no ``Content-Length``) and reads the response even when the
server answers before the body is sent.
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h11

from nvpair_wm.errors import PeerError  # defined there; still importable from here

H2: Final = "h2"
H1: Final = "http/1.1"
CHUNK: Final = 16 * 1024


@dataclass(frozen=True, slots=True)
class Identity:
    """A client certificate and its key (PEM files)."""

    cert: Path
    key: Path


@dataclass(slots=True)
class HttpResponse:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # names lowercased; repeats joined
    body: bytes = b""
    server_fingerprint: str = ""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes
    content_length: bool = True  # False: HTTP/1.1 chunked, HTTP/2 without the header
    raw: bytes | None = None  # HTTP/1.1 only: these bytes instead of a well-formed request


def connect_tls(
    host: str, port: int, identity: Identity | None, alpn: str, timeout: float
) -> ssl.SSLSocket:
    """A TLS connection to a member offering ``alpn``, with ``identity`` as the client
    certificate (public: tests drive the kit's peer server over it at the frame level)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # Nodes are self-signed and checked by pin: the caller compares server_fingerprint.
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if identity is not None:
        ctx.load_cert_chain(identity.cert, identity.key)
    ctx.set_alpn_protocols([alpn])
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise PeerError(f"connect to {host}:{port}: {exc}") from exc
    try:
        sock = ctx.wrap_socket(raw)
    except (OSError, ssl.SSLError) as exc:
        raw.close()
        raise PeerError(f"TLS handshake: {exc}") from exc
    if sock.selected_alpn_protocol() not in (alpn, None):
        sock.close()
        raise PeerError(f"server chose ALPN {sock.selected_alpn_protocol()!r}, not {alpn!r}")
    return sock


def _fingerprint(sock: ssl.SSLSocket) -> str:
    der = sock.getpeercert(binary_form=True)
    return hashlib.sha256(der).hexdigest() if der else ""


def request(
    host: str,
    port: int,
    identity: Identity | None,
    protocol: str,
    req: HttpRequest,
    *,
    timeout: float = 10.0,
) -> HttpResponse:
    """Send one request on a new connection and return the response."""
    sock = connect_tls(host, port, identity, protocol, timeout)
    try:
        if protocol == H2:
            resp = _h2_exchange(sock, host, port, req)
        else:
            resp = _h1_exchange(sock, host, port, req)
        resp.server_fingerprint = _fingerprint(sock)
        return resp
    except (OSError, ssl.SSLError) as exc:
        raise PeerError(f"{protocol}: {exc}") from exc
    finally:
        sock.close()


class KeptConnection:
    """A connection that an HTTP case keeps open for the later cases naming it
    (``connection``), so that what a server must decide per request rather than per
    connection (a pin removed while the connection stays open) shows."""

    def __init__(
        self, host: str, port: int, identity: Identity | None, protocol: str, timeout: float
    ) -> None:
        self.host, self.port, self.protocol = host, port, protocol
        self.sock = connect_tls(host, port, identity, protocol, timeout)
        self.server_fingerprint = _fingerprint(self.sock)
        self._h1 = h11.Connection(h11.CLIENT)
        self._h2: H2Exchange | None = None

    def request(self, req: HttpRequest) -> HttpResponse:
        """One more request on this connection (one at a time)."""
        try:
            if self.protocol == H2:
                if self._h2 is not None:  # the last exchange's state goes; the connection stays
                    self._h2.resp, self._h2.body = HttpResponse(0), bytearray()
                    self._h2.done, self._h2.reset = False, None
                resp, self._h2 = _h2_on(self.sock, self.host, self.port, req, self._h2)
            else:
                if self._h1.our_state is h11.DONE and self._h1.their_state is h11.DONE:
                    self._h1.start_next_cycle()
                resp = _h1_exchange(self.sock, self.host, self.port, req, self._h1)
        except (OSError, ssl.SSLError, h11.LocalProtocolError) as exc:
            raise PeerError(f"{self.protocol} on a kept connection: {exc}") from exc
        resp.server_fingerprint = self.server_fingerprint
        return resp

    def close(self) -> None:
        self.sock.close()


def _h1_exchange(
    sock: ssl.SSLSocket,
    host: str,
    port: int,
    req: HttpRequest,
    conn: h11.Connection | None = None,
) -> HttpResponse:
    conn = h11.Connection(h11.CLIENT) if conn is None else conn
    if req.raw is not None:
        # h11 reads a response only after a request: play one without sending it.
        conn.send(h11.Request(method="GET", target="/", headers=[("host", host)]))
        conn.send(h11.EndOfMessage())
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, ssl.SSLError):
            sock.sendall(req.raw)
        return _h1_read(conn, sock)
    headers = [("host", f"{host}:{port}"), *req.headers]
    if req.content_length:
        headers.append(("content-length", str(len(req.body))))
    else:
        headers.append(("transfer-encoding", "chunked"))
    out = conn.send(h11.Request(method=req.method, target=req.path, headers=headers)) or b""
    try:
        sock.sendall(out)
        for i in range(0, len(req.body), CHUNK):
            sock.sendall(conn.send(h11.Data(data=req.body[i : i + CHUNK])) or b"")
        sock.sendall(conn.send(h11.EndOfMessage()) or b"")
    except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
        pass  # the server answered early (413, 403...) and closed: read what it said
    return _h1_read(conn, sock)


def _h1_read(conn: h11.Connection, sock: ssl.SSLSocket) -> HttpResponse:
    resp = HttpResponse(0)
    body = bytearray()
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise PeerError(f"HTTP/1.1 response: {exc}") from exc
        if event is h11.NEED_DATA:
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, ssl.SSLError) as exc:
                if resp.status:
                    break
                raise PeerError(f"HTTP/1.1: no response ({exc})") from exc
            conn.receive_data(data)
            if not data and not resp.status:
                raise PeerError("HTTP/1.1: the server closed without a response")
            continue
        if isinstance(event, h11.InformationalResponse):
            continue
        if isinstance(event, h11.Response):
            resp.status = event.status_code
            resp.headers = _join(
                (n.decode("latin-1"), v.decode("latin-1")) for n, v in event.headers
            )
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            break
    resp.body = bytes(body)
    return resp


def _join(pairs: object) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in pairs:  # type: ignore[attr-defined]
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


class H2Exchange:
    """Requests over one HTTP/2 connection, driven by h2 (the kit's client side)."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="latin-1")
        )
        self.resp = HttpResponse(0)
        self.body = bytearray()
        self.done = False
        self.reset: int | None = None

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def pump(self) -> None:
        """Read once and handle what arrived."""
        data = self.sock.recv(65536)
        if not data:
            self.done = True
            return
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            raise PeerError(f"HTTP/2: {exc}") from exc
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                hdrs = [(str(n), str(v)) for n, v in event.headers]
                self.resp.status = int(dict(hdrs)[":status"])
                self.resp.headers = _join((n, v) for n, v in hdrs if not n.startswith(":"))
            elif isinstance(event, h2.events.DataReceived):
                self.body += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.done = True
            elif isinstance(event, h2.events.StreamReset):
                self.reset = event.error_code
                self.done = True
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.done = True
        self.flush()


def _h2_exchange(sock: ssl.SSLSocket, host: str, port: int, req: HttpRequest) -> HttpResponse:
    return _h2_on(sock, host, port, req, None)[0]


def _h2_on(
    sock: ssl.SSLSocket, host: str, port: int, req: HttpRequest, ex: H2Exchange | None
) -> tuple[HttpResponse, H2Exchange]:
    """One request on a new stream of ``ex``'s connection (None: a new connection)."""
    if ex is None:
        ex = H2Exchange(sock)
        ex.conn.initiate_connection()
    conn = ex.conn
    sid = conn.get_next_available_stream_id()
    if req.raw is not None:
        raise PeerError("a raw request is HTTP/1.1 only")
    if req.method == "CONNECT":  # RFC 9113 8.5: no :scheme, no :path
        pseudo = [(":method", "CONNECT"), (":authority", f"{host}:{port}")]
    else:
        pseudo = [
            (":method", req.method),
            (":scheme", "https"),
            (":authority", f"{host}:{port}"),
            (":path", req.path),
        ]
    headers = [*pseudo, *req.headers]
    if req.content_length:
        headers.append(("content-length", str(len(req.body))))
    conn.send_headers(sid, headers, end_stream=not req.body)
    ex.flush()
    view = memoryview(req.body)
    while view and not ex.done:
        window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
        if window <= 0:
            ex.pump()
            continue
        chunk, view = view[:window], view[window:]
        try:
            conn.send_data(sid, bytes(chunk), end_stream=not view)
        except h2.exceptions.StreamClosedError:
            break  # reset by the server: its answer is on the way
        ex.flush()
    while not ex.done:
        ex.pump()
    if not ex.resp.status:
        raise PeerError(f"HTTP/2: stream ended without a response (reset {ex.reset})")
    ex.resp.body = bytes(ex.body)
    return ex.resp, ex
