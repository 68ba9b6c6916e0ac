"""The HTTP/2 server under test in-process, and its clients: a raw frame peer (RawPeer, for
what a well-behaved client never sends) and an h2-library client (H2Client)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
from h2.errors import ErrorCodes
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    RstStreamFrame,
    SettingsFrame,
)

from nvpair_wm.http.core import Limits, Request, Response
from nvpair_wm.io.server import InterNodeServer, ServerConnection
from nvpair_wm.proto.h2 import H2_PREFACE, H2ServerSession

T = TypeVar("T")
WAIT = 10.0  # upper bound for anything a test waits for; reactions come much sooner
MIB = 1024 * 1024
FINGERPRINT = "ab" * 32


class EchoHandler:
    """A trivial Handler: echoes bodies, answers early on a few paths, can crash on purpose."""

    def __init__(self, max_body: int = MIB) -> None:
        self.max_body = max_body
        self.requests: list[Request] = []
        self.completed_paths: list[str] = []

    def head(self, req: Request) -> Response | None:
        self.requests.append(req)
        if req.path == "/forbidden":
            return Response(403, [(b"content-type", b"text/plain")], b"not pinned")
        if req.path == "/crash-head":
            raise RuntimeError("boom")
        return None

    @property
    def completed(self) -> int:
        return len(self.completed_paths)

    def complete(self, req: Request, body: bytes) -> Response:
        self.completed_paths.append(req.path)
        if req.path == "/crash":
            raise RuntimeError("boom")
        if req.path == "/bad-header":
            return Response(200, [(b"x-bad", b"line\r\nbreak")], b"never sent")
        if req.path.startswith("/big/"):
            return Response(200, [], b"x" * int(req.path.removeprefix("/big/")))
        payload = body if body else b"hello"
        headers = [(b"x-body-length", str(len(body)).encode()), (b"connection", b"close")]
        return Response(200, headers, payload)


def fast_limits(**overrides: Any) -> Limits:
    """Limits with short timeouts so that timeout tests finish quickly."""
    values: dict[str, Any] = {
        "header_timeout": 0.5,
        "idle_timeout": 5.0,
        "body_timeout": 5.0,
        "write_timeout": 5.0,
        "shutdown_grace": 5.0,
    }
    values.update(overrides)
    return Limits(**values)


class _RecordingServer(InterNodeServer):
    """The real server in plaintext mode, recording its connections for the tests."""

    def __init__(self, owner: H2TestServer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.owner = owner

    def _new_protocol(self) -> ServerConnection:
        conn = super()._new_protocol()
        self.owner.conns.append(conn)
        return conn

    def released(self, conn: ServerConnection) -> None:
        super().released(conn)
        self.owner.connection_released(conn)


class H2TestServer:
    """The real connection driver (``nvpair_wm.io.server``) without TLS on 127.0.0.1.

    Every peer has the fingerprint :data:`FINGERPRINT` and speaks HTTP/2 (prior knowledge), or,
    with ``sniff_preface``, the protocol is sniffed as without ALPN. ``crashes`` collects
    what the event loop reports as unhandled in the protocol callbacks.
    """

    def __init__(
        self,
        handler: EchoHandler | None = None,
        limits: Limits | None = None,
        *,
        sniff_preface: bool = False,  # True: sniffed as without ALPN; False: h2 at once
        port: int = 0,
    ) -> None:
        self.handler = handler or EchoHandler()
        self.limits = limits or fast_limits()
        self.conns: list[ServerConnection] = []
        self.finished = 0
        self.connection_done = asyncio.Event()  # set when any connection was released
        self.crashes: list[object] = []
        self.server = _RecordingServer(
            self,
            handler=self.handler,
            identity=None,
            port=port,
            hosts=["127.0.0.1"],
            limits=self.limits,
            plaintext=True,
            plain_fingerprint=FINGERPRINT,
            plain_alpn=None if sniff_preface else "h2",
        )
        self.port = port

    @property
    def sessions(self) -> list[H2ServerSession]:
        return [c.session for c in self.conns if isinstance(c.session, H2ServerSession)]

    def connection_released(self, conn: ServerConnection) -> None:
        self.finished += 1
        self.connection_done.set()

    async def __aenter__(self) -> H2TestServer:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: self.crashes.append(ctx))
        await self.server.start()
        self.port = self.server.port
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.close(grace=1.0)
        asyncio.get_running_loop().set_exception_handler(None)
        assert not self.crashes, f"the server crashed: {self.crashes!r}"


class RawPeer:
    """A client that writes raw frames (hyperframe) and reads the server's frames back."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.server_settings: dict[int, int] = {}
        self.received: list[Frame] = []

    @classmethod
    async def connect(
        cls, port: int, *, settings: dict[int, int] | None = None, handshake: bool = True
    ) -> RawPeer:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        peer = cls(reader, writer)
        if handshake:
            await peer.handshake(settings or {})
        return peer

    async def handshake(self, settings: dict[int, int]) -> None:
        self.send_raw(H2_PREFACE)
        self.send(SettingsFrame(0, settings=settings))
        got_settings = got_ack = False
        async with asyncio.timeout(WAIT):
            while not (got_settings and got_ack):
                frame = await self.next_frame()
                assert frame is not None, "server closed during the handshake"
                if isinstance(frame, SettingsFrame):
                    if "ACK" in frame.flags:
                        got_ack = True
                    else:
                        self.server_settings.update(frame.settings)
                        got_settings = True
                        self.send(SettingsFrame(0, flags=["ACK"]))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    def send(self, *frames: Frame) -> None:
        self.writer.write(b"".join(f.serialize() for f in frames))

    def block(self, headers: list[tuple[str, str]]) -> bytes:
        return bytes(self.encoder.encode(headers))

    def request_headers(
        self, method: str = "GET", path: str = "/", extra: list[tuple[str, str]] | None = None
    ) -> list[tuple[str, str]]:
        base = [(":method", method), (":scheme", "http"), (":path", path)]
        return [*base, (":authority", "localhost"), *(extra or [])]

    def headers_frame(
        self,
        stream_id: int,
        method: str = "GET",
        path: str = "/",
        *,
        extra: list[tuple[str, str]] | None = None,
        end_stream: bool = True,
        end_headers: bool = True,
    ) -> HeadersFrame:
        flags = (["END_STREAM"] if end_stream else []) + (["END_HEADERS"] if end_headers else [])
        block = self.block(self.request_headers(method, path, extra))
        return HeadersFrame(stream_id, data=block, flags=flags)

    async def next_frame(self) -> Frame | None:
        """The next frame from the server, None at EOF (or a reset connection)."""
        try:
            head = await self.reader.readexactly(9)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        frame, length = Frame.parse_frame_header(memoryview(head))
        try:
            body = await self.reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        frame.parse_body(memoryview(body))
        if isinstance(frame, HeadersFrame | ContinuationFrame):
            # Keep the HPACK decoder in step (our responses never use CONTINUATION).
            frame.decoded = self.decoder.decode(frame.data, raw=True)  # type: ignore[union-attr]
        self.received.append(frame)
        return frame

    async def wait_for(self, predicate: Callable[[Frame], bool], within: float = WAIT) -> Frame:
        """Read until a frame matches; fails on EOF or after ``timeout``."""
        async with asyncio.timeout(within):
            while True:
                frame = await self.next_frame()
                assert frame is not None, f"EOF before the expected frame; got {self.received}"
                if predicate(frame):
                    return frame

    async def read_until_closed(self, within: float = WAIT) -> list[Frame]:
        """Every frame until EOF (the server must close within ``timeout``)."""
        frames: list[Frame] = []
        async with asyncio.timeout(within):
            while (frame := await self.next_frame()) is not None:
                frames.append(frame)
        return frames

    async def goaway(self, within: float = WAIT) -> GoAwayFrame:
        """The server's GOAWAY; the connection must then close."""
        frames = await self.read_until_closed(within)
        goaways = [f for f in frames if isinstance(f, GoAwayFrame)]
        assert goaways, f"connection closed without GOAWAY; got {frames}"
        return goaways[0]

    async def response(self, stream_id: int, within: float = WAIT) -> tuple[int, bytes]:
        """Status and body of the response on ``stream_id`` (acks no window: keep bodies small)."""
        status = 0
        body = b""
        async with asyncio.timeout(within):
            while True:
                frame = await self.next_frame()
                assert frame is not None, f"EOF before the response; got {self.received}"
                if frame.stream_id != stream_id:
                    continue
                if isinstance(frame, HeadersFrame):
                    status = int(dict(frame.decoded)[b":status"])  # type: ignore[attr-defined]
                elif isinstance(frame, DataFrame):
                    body += frame.data
                elif isinstance(frame, RstStreamFrame):
                    raise AssertionError(f"stream {stream_id} reset: {frame.error_code}")
                if "END_STREAM" in frame.flags:
                    return status, body

    def close(self) -> None:
        self.writer.close()


def is_rst(stream_id: int, *codes: ErrorCodes) -> Callable[[Frame], bool]:
    def check(frame: Frame) -> bool:
        return (
            isinstance(frame, RstStreamFrame)
            and frame.stream_id == stream_id
            and (not codes or frame.error_code in codes)
        )

    return check


@dataclasses.dataclass
class Reply:
    status: int = 0
    headers: dict[bytes, bytes] = dataclasses.field(default_factory=dict)
    body: bytearray = dataclasses.field(default_factory=bytearray)
    reset: ErrorCodes | None = None
    done: bool = False


class H2Client:
    """A well-behaved client on the h2 library: flow control both ways, many streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.replies: dict[int, Reply] = {}
        self.pending: dict[int, memoryview] = {}  # request bodies not yet sent
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.closed = False
        self.max_data_frame = 0

    @classmethod
    async def connect(cls, port: int, settings: dict[int, int] | None = None) -> H2Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        client.conn.initiate_connection()
        if settings:
            client.conn.update_settings(settings)
        client.flush()
        return client

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.writer.write(data)

    def start(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        *,
        headers: list[tuple[bytes, bytes]] | None = None,
        content_length: bool = True,
    ) -> int:
        sid = self.conn.get_next_available_stream_id()
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"http"),
            (b":path", path.encode()),
            (b":authority", b"localhost"),
            *(headers or []),
        ]
        if body and content_length:
            fields.append((b"content-length", str(len(body)).encode()))
        self.conn.send_headers(sid, fields, end_stream=not body)
        self.replies[sid] = Reply()
        if body:
            self.pending[sid] = memoryview(body)
        self._send_bodies()
        self.flush()
        return sid

    def _send_bodies(self) -> None:
        for sid, rest in list(self.pending.items()):
            if self.replies[sid].reset is not None:
                del self.pending[sid]
                continue
            left = rest
            while left:
                window = self.conn.local_flow_control_window(sid)
                size = min(window, self.conn.max_outbound_frame_size, len(left))
                if size <= 0:
                    break
                self.conn.send_data(sid, left[:size].tobytes(), end_stream=size == len(left))
                left = left[size:]
            if left:
                self.pending[sid] = left
            else:
                del self.pending[sid]

    async def pump(self) -> bool:
        """Read one chunk and process it; False at EOF."""
        data = await self.reader.read(65536)
        if not data:
            self.closed = True
            return False
        for event in self.conn.receive_data(data):
            self._on_event(event)
        self._send_bodies()
        self.flush()
        return True

    def _on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            reply = self.replies[event.stream_id]
            reply.headers = {bytes(k): bytes(v) for k, v in event.headers}
            reply.status = int(reply.headers[b":status"])
        elif isinstance(event, h2.events.DataReceived):
            assert event.data is not None and event.flow_controlled_length is not None
            self.max_data_frame = max(self.max_data_frame, len(event.data))
            self.replies[event.stream_id].body += event.data
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            self.replies[event.stream_id].done = True
        elif isinstance(event, h2.events.StreamReset):
            reply = self.replies[event.stream_id]
            reply.reset = ErrorCodes(event.error_code)
            reply.done = True
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = event

    async def wait(self, *sids: int, within: float = WAIT) -> list[Reply]:
        """Pump until every stream in ``sids`` ended (or was reset)."""
        async with asyncio.timeout(within):
            while not all(self.replies[s].done for s in sids):
                assert await self.pump(), "server closed the connection"
        return [self.replies[s] for s in sids]

    async def wait_reset(self, sid: int, within: float = WAIT) -> ErrorCodes:
        """Pump until the server resets ``sid`` (possibly after a complete answer)."""
        async with asyncio.timeout(within):
            while self.replies[sid].reset is None:
                assert await self.pump(), "server closed the connection"
        reset = self.replies[sid].reset
        assert reset is not None
        return reset

    async def request(self, method: str, path: str, body: bytes = b"", **kw: Any) -> Reply:
        """One exchange: the whole answer, and the whole body sent (unless the stream was reset)."""
        sid = self.start(method, path, body, **kw)
        (reply,) = await self.wait(sid)
        async with asyncio.timeout(WAIT):
            while sid in self.pending and reply.reset is None:
                assert await self.pump(), "server closed the connection"
        return reply

    def close(self) -> None:
        self.writer.close()


def run(coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
    """Run one test coroutine with an overall bound."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


async def served_meanwhile(port: int, attack: Awaitable[T]) -> T:
    """Run ``attack`` while a well-behaved client keeps getting answers on its own connection."""
    client = await H2Client.connect(port)
    task = asyncio.ensure_future(attack)
    answers = 0
    try:
        while not task.done() or answers == 0:
            reply = await client.request("POST", "/echo", b"still here %d" % answers)
            assert reply.status == 200 and bytes(reply.body) == b"still here %d" % answers
            answers += 1
            assert answers < 100_000
        return await task
    finally:
        task.cancel()
        client.close()
