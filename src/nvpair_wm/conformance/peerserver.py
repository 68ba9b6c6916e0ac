"""The kit as a peer: a pinned mutual-TLS HTTP/2 or HTTP/1.1 server that records what arrives.

An implementation broadcasts its broker's events to the peers named by ``nodes:update``. The kit
plays such peers with servers of its own (blocking sockets, one thread per connection, ``h2``
and ``h11``: nothing of the implementation under test), answers each request as the vector's
``respond`` rules say (202 by default) and records every request: when it came, its frames, the
status it got. Checks that hold for every request, whatever the vector, are recorded as
``problems``: the method, path and media type, the body and batch bounds, a client certificate
that is the subject's own, an ``nvpair-contract-version`` of the kit's major, and no request
before a ``Retry-After`` it was given ran out. Its answers carry the kit's contract version.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h11
from h2.settings import SettingCodes
from nvpair_wm_schema.contract import CONTRACT_VERSION

from nvpair_wm.conformance.expect import CONTRACT_HEADER, contract_header
from nvpair_wm.conformance.peer import H1, H2

PATH: Final = "/v1/workloads/events"
MAX_BODY_BYTES: Final = 1024 * 1024  # the contract's body bound (schema/README.md, Framing)
MAX_BATCH_FRAMES: Final = 10_000  # the contract's batch bound (max_batch)
# A request may come this much before a Retry-After runs out (clock granularity, not leniency).
RETRY_AFTER_SLACK_S: Final = 0.05
PEER_METHODS: Final = frozenset(
    {
        "workload:submitted",
        "workload:started",
        "workload:completed",
        "workload:errored",
        "workload:cancelled",
        "workloads:remove",
    }
)


@dataclass(slots=True)
class Rule:
    """One ``respond`` rule: this status (and headers, and body) for the next ``count`` requests
    (None: every one) that carry more than ``frames_above`` frames. A body lets a peer answer a
    400 that names the frames it refused (``error.data.index``), the others applied."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    count: int | None = None
    frames_above: int = 0
    body: bytes = b""

    @classmethod
    def parse(cls, spec: dict[str, Any]) -> Rule:
        return cls(
            int(spec["status"]),
            {str(k).lower(): str(v) for k, v in spec.get("headers", {}).items()},
            int(spec["count"]) if "count" in spec else None,
            int(spec.get("framesAbove", 0)),
            json.dumps(spec["body"]).encode() if "body" in spec else b"",
        )


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request as the peer saw it."""

    at: float
    protocol: str
    status: int
    frames: tuple[Any, ...]
    body_bytes: int

    @property
    def accepted(self) -> bool:
        return 200 <= self.status < 300


class PeerServer:
    """One peer of the implementation under test, listening on 127.0.0.1."""

    def __init__(
        self,
        name: str,
        *,
        cert: Path,
        key: Path,
        client_cert: Path,
        protocols: list[str],
        host: str = "127.0.0.1",
        max_streams: int | None = None,
    ) -> None:
        self.name = name
        self.host = host
        self.protocols = protocols
        self.max_streams = max_streams  # HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS, if set
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(cert, key)
        # The only client certificate this peer takes is the subject's own: a self-signed leaf,
        # trusted as itself (partial chain), as a pin.
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        ctx.load_verify_locations(cafile=str(client_cert))
        ctx.set_alpn_protocols(protocols)
        self._ctx = ctx
        self._lock = threading.Condition()
        self._rules: list[Rule] = []
        self._not_before = 0.0  # set by a response with Retry-After
        # When that response was made: a request read before it (in flight together with the
        # refused one, over HTTP/2) was sent before the client could know, and is not held to it.
        self._not_before_given = 0.0
        self._conns: set[int] = set()  # file descriptors of open connections
        self._listener: socket.socket | None = None
        self.arrivals: list[Arrival] = []
        self.problems: list[str] = []
        self.handshakes = 0  # completed TLS handshakes
        self.failed_handshakes = 0
        self.last_handshake_error = ""
        self.port = 0
        self.up()

    # -- control --------------------------------------------------------------------------------

    def up(self) -> None:
        """Listen (again, on the same port once it has one)."""
        if self._listener is None:
            self._start(self._listen(self.port))

    def _listen(self, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, port))
        sock.listen(64)
        return sock

    def _start(self, sock: socket.socket) -> None:
        self.port = int(sock.getsockname()[1])
        self._listener = sock
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def down(self) -> None:
        """Stop listening and cut every connection, as a crashed peer does: also one accepted
        just before, whose thread has not registered it yet (:meth:`_serve` closes it)."""
        with self._lock:
            sock, self._listener = self._listener, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self.drop_connections()

    def move(self) -> None:
        """Go down, then listen on another port: a member that moved (its record in a
        ``nodes:update`` built after this names the new port)."""
        sock = self._listen(0)  # before the old port closes, so it cannot be the same one
        self.down()
        self._start(sock)

    def drop_connections(self) -> None:
        """Cut every open connection without a close_notify (a peer that restarted)."""
        with self._lock:  # held: a descriptor leaves the set before it is closed
            for fd in self._conns:
                # Through a duplicate: the TLS socket owns the descriptor (and a shutdown on it
                # from this thread would race its reader); shutdown acts on the connection.
                with (
                    contextlib.suppress(OSError),
                    socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as dup,
                ):
                    dup.shutdown(socket.SHUT_RDWR)

    def respond(self, rules: list[dict[str, Any]]) -> None:
        with self._lock:
            self._rules = [Rule.parse(r) for r in rules]

    def close(self) -> None:
        self.down()

    # -- what arrived ---------------------------------------------------------------------------

    def requests(self, since: int = 0) -> list[Arrival]:
        """Every request from the ``since``-th on, in arrival order."""
        with self._lock:
            return self.arrivals[since:]

    def wait_for(self, ready: Callable[[PeerServer], bool], timeout: float) -> bool:
        """Until ``ready`` holds of this peer (its requests, its handshakes), checked whenever
        one ends; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not ready(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True

    def take_problems(self) -> list[str]:
        with self._lock:
            out, self.problems = self.problems, []
        return [f"peer {self.name}: {p}" for p in out]

    # -- serving --------------------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw, listener), daemon=True).start()

    def _serve(self, raw: socket.socket, listener: socket.socket) -> None:
        raw.settimeout(30.0)
        fd = raw.fileno()
        with self._lock:
            if self._listener is not listener:  # down since it was accepted: cut, as if down
                raw.close()
                return
            self._conns.add(fd)
        tls: ssl.SSLSocket | None = None
        try:
            try:
                tls = self._ctx.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError) as exc:
                # A client that checks our pin and leaves ends here, as it should; so does one
                # that presents another certificate than the subject's (kept for the report).
                with self._lock:
                    self.failed_handshakes += 1
                    self.last_handshake_error = str(exc)
                    self._lock.notify_all()
                return
            with self._lock:
                self.handshakes += 1
            alpn = tls.selected_alpn_protocol()
            if alpn == H2 or (alpn is None and H2 in self.protocols and H1 not in self.protocols):
                self._serve_h2(tls)
            else:
                self._serve_h1(tls)
        except (OSError, ssl.SSLError, h11.ProtocolError, h2.exceptions.ProtocolError):
            pass
        finally:
            with self._lock:
                self._conns.discard(fd)
                with contextlib.suppress(OSError):
                    (tls if tls is not None else raw).close()

    def _serve_h1(self, tls: ssl.SSLSocket) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        received = time.monotonic()
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if conn.they_are_waiting_for_100_continue:
                    tls.sendall(
                        conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
                    )
                data = tls.recv(65536)
                received = time.monotonic()
                conn.receive_data(data)
                if not data and conn.their_state is not h11.DONE:
                    return
                continue
            if isinstance(event, h11.Request):
                request, body = event, bytearray()
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                headers = {n.decode().lower(): v.decode("latin-1") for n, v in request.headers}
                status, extra, payload = self._handle(
                    H1,
                    request.method.decode(),
                    request.target.decode(),
                    headers,
                    bytes(body),
                    received=received,
                )
                out = [(k, v) for k, v in extra.items()] + [("content-length", str(len(payload)))]
                tls.sendall(conn.send(h11.Response(status_code=status, headers=out)) or b"")
                if payload:
                    tls.sendall(conn.send(h11.Data(data=payload)) or b"")
                tls.sendall(conn.send(h11.EndOfMessage()) or b"")
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                return

    def _serve_h2(self, tls: ssl.SSLSocket) -> None:
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="latin-1")
        )
        conn.initiate_connection()
        if self.max_streams is not None:
            conn.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: self.max_streams})
        tls.sendall(conn.data_to_send())
        streams: dict[int, tuple[dict[str, str], bytearray]] = {}
        while True:
            data = tls.recv(65536)
            received = time.monotonic()
            if not data:
                return
            try:
                events = conn.receive_data(data)
            except h2.exceptions.TooManyStreamsError:
                # h2 counts the limit once the client acknowledged it, as RFC 9113 5.1.2 does.
                with self._lock:
                    self.problems.append(
                        f"more streams open at once than the {self.max_streams} its "
                        "SETTINGS_MAX_CONCURRENT_STREAMS allows (RFC 9113, 5.1.2)"
                    )
                    self._lock.notify_all()
                raise
            for event in events:
                if isinstance(event, h2.events.RequestReceived):
                    hdrs = {str(n).lower(): str(v) for n, v in event.headers}
                    streams[event.stream_id] = (hdrs, bytearray())
                elif isinstance(event, h2.events.DataReceived):
                    if event.stream_id in streams:
                        streams[event.stream_id][1].extend(event.data)
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    hdrs, body = streams.pop(event.stream_id, ({}, bytearray()))
                    status, extra, payload = self._handle(
                        H2,
                        hdrs.get(":method", ""),
                        hdrs.get(":path", ""),
                        hdrs,
                        bytes(body),
                        received=received,
                    )
                    conn.send_headers(
                        event.stream_id,
                        [(":status", str(status)), *extra.items()],
                        end_stream=not payload,
                    )
                    if payload:  # a few hundred bytes: within any flow-control window
                        conn.send_data(event.stream_id, payload, end_stream=True)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    tls.sendall(conn.data_to_send())
                    return
            tls.sendall(conn.data_to_send())

    # -- one request ----------------------------------------------------------------------------

    def _handle(
        self,
        protocol: str,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        *,
        received: float,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request, whose last bytes were read at ``received`` (monotonic): its status,
        headers and body."""
        now = time.monotonic()
        problems: list[str] = []
        if method != "POST" or path != PATH:
            problems.append(f"{method} {path}: a manager sends only POST {PATH}")
        media = headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json":
            problems.append(f"content-type {headers.get('content-type')!r}, not application/json")
        if len(body) > MAX_BODY_BYTES:
            problems.append(f"a body of {len(body)} bytes, over the bound of {MAX_BODY_BYTES}")
        problems += contract_header(headers.get(CONTRACT_HEADER), f"a {method} request")
        frames: list[Any] = []
        try:
            value = json.loads(body)
        except ValueError:
            problems.append(f"a body that is not JSON text: {body[:120]!r}")
        else:
            frames = value if isinstance(value, list) else [value]
            if isinstance(value, list) and not value:
                problems.append("an empty batch")
            if len(frames) > MAX_BATCH_FRAMES:
                problems.append(f"a batch of {len(frames)} frames, over {MAX_BATCH_FRAMES}")
            problems += [p for f in frames for p in _frame_problems(f)]
        with self._lock:
            late = received > self._not_before_given  # read after the Retry-After was given
            if late and now < self._not_before - RETRY_AFTER_SLACK_S:
                problems.append(
                    f"a request {self._not_before - now:.2f} s before the Retry-After it was "
                    "given ran out"
                )
            rule = next(self._matching(len(frames)), None)
            status, extra = (202, {}) if rule is None else (rule.status, dict(rule.headers))
            payload = b"" if rule is None else rule.body
            if payload:
                extra["content-type"] = "application/json"
            if rule is not None and rule.count is not None:
                rule.count -= 1
            if "retry-after" in extra:
                self._not_before = now + float(extra["retry-after"])
                self._not_before_given = now
            self.problems += problems
            self.arrivals.append(Arrival(now, protocol, status, tuple(frames), len(body)))
            self._lock.notify_all()
        # Every peer names its contract version; a rule's header answers as another one (the
        # version rule as a client: minor skew is served, another major's 409 stops the sender).
        return status, {CONTRACT_HEADER: CONTRACT_VERSION, **extra}, payload

    def _matching(self, frames: int) -> Iterator[Rule]:
        for rule in self._rules:
            if (rule.count is None or rule.count > 0) and frames > rule.frames_above:
                yield rule


def _frame_problems(frame: Any) -> list[str]:
    if not isinstance(frame, dict):
        return [f"a frame that is not an object: {json.dumps(frame)[:120]}"]
    out = []
    if frame.get("jsonrpc") != "2.0":
        out.append(f"jsonrpc {frame.get('jsonrpc')!r}, not '2.0'")
    if frame.get("method") not in PEER_METHODS:
        out.append(f"method {frame.get('method')!r} is not a peer frame")
    return out
