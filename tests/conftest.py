"""Shared pytest fixtures. Each block says which tests it serves; add new blocks below."""

from __future__ import annotations

import asyncio
import os
import queue
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from nvpair_wm.clusterdir import init_cluster, make_self_signed
from nvpair_wm.dedup import WorkloadTable
from nvpair_wm.dispatch import Dispatcher
from nvpair_wm.endpoint import EventsEndpoint
from nvpair_wm.http.core import Limits
from nvpair_wm.io.server import InterNodeServer
from nvpair_wm.pins import Identity, PinSet
from tests.support.nodes import Node, StartNode, finish, launch, wait_ready

# ==================================================================================================
# Inter-node TLS server (tests/test_tls_server.py, test_http1.py, test_endpoint_curl.py)
#
# tls_cluster       a real cluster directory (nvpair_wm.clusterdir): server "a", pinned callers
#                   "b" and "c", and an unpinned self-signed certificate "stranger"
# start_wm_server   factory: InterNodeServer + EventsEndpoint + real Dispatcher, running on its own
#                   event-loop thread, bound to 127.0.0.1 and ::1 on a free port
# https_client      factory: a raw stdlib-ssl client socket (client cert, no server verification)
#                   with a tiny HTTP/1.1 response reader, for byte-exact tests
# ==================================================================================================

T = TypeVar("T")
WAIT = 10.0  # upper bound for anything a test waits for; reactions come much sooner


@dataclass
class CertPair:
    cert: Path
    key: Path


@dataclass
class TLSCluster:
    root: Path
    dirs: dict[str, Path]  # member → its --cluster-dir
    stranger: CertPair  # self-signed, pinned nowhere

    def pair(self, name: str) -> CertPair:
        return CertPair(self.dirs[name] / "node.crt", self.dirs[name] / "node.key")

    @property
    def server_dir(self) -> Path:
        return self.dirs["a"]


@pytest.fixture
def tls_cluster(tmp_path: Path) -> TLSCluster:
    dirs = init_cluster(tmp_path / "cluster", ["a", "b", "c"])
    cert_pem, key_pem = make_self_signed("stranger")
    sdir = tmp_path / "stranger"
    sdir.mkdir()
    (sdir / "node.crt").write_bytes(cert_pem)
    (sdir / "node.key").write_bytes(key_pem)
    (sdir / "node.key").chmod(0o600)
    return TLSCluster(tmp_path / "cluster", dirs, CertPair(sdir / "node.crt", sdir / "node.key"))


class RecordingSink:
    """A BrokerSink the test thread can watch: frames land on a thread-safe queue."""

    def __init__(self) -> None:
        self.frames: queue.Queue[bytes] = queue.Queue()
        self.is_full = False
        self.on_put: Callable[[list[bytes]], None] | None = None

    def full(self) -> bool:
        return self.is_full

    def put(self, frames: list[bytes]) -> None:
        for frame in frames:
            self.frames.put(frame)
        if self.on_put is not None:
            self.on_put(frames)

    def get(self, timeout: float = WAIT) -> bytes:
        return self.frames.get(timeout=timeout)

    def drain(self) -> list[bytes]:
        out: list[bytes] = []
        while True:
            try:
                out.append(self.frames.get_nowait())
            except queue.Empty:
                return out


@dataclass
class WmServer:
    """An InterNodeServer on a private event-loop thread (so blocking clients can drive it)."""

    server: InterNodeServer
    sink: RecordingSink
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    closed: bool = field(default=False)

    @property
    def port(self) -> int:
        return int(self.server.port)

    def url(self, path: str = "/v1/workloads/events", host: str = "127.0.0.1") -> str:
        return f"https://{host}:{self.port}{path}"

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = WAIT) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro: Coroutine[Any, Any, T]) -> Any:
        """Start ``coro`` on the server loop; returns a concurrent.futures.Future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self, grace: float = 1.0) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.call(self.server.close(grace))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(WAIT)
            self.loop.close()


def _has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


HAS_IPV6 = _has_ipv6_loopback()
LOOPBACKS: tuple[str, ...] = ("127.0.0.1", "::1") if HAS_IPV6 else ("127.0.0.1",)


@pytest.fixture
def start_wm_server(tls_cluster: TLSCluster) -> Iterator[Callable[..., WmServer]]:
    """``start_wm_server(cluster_dir=None, **limits)`` → a running :class:`WmServer`."""
    started: list[WmServer] = []

    def start(
        cluster_dir: Path | None = None,
        hosts: tuple[str, ...] = LOOPBACKS,
        handler: Any = None,
        **limits: Any,
    ) -> WmServer:
        cdir = cluster_dir or tls_cluster.server_dir
        sink = RecordingSink()
        dispatcher = Dispatcher(WorkloadTable(), _no_status)
        pins = PinSet(cdir / "trusted")
        endpoint = handler or EventsEndpoint(dispatcher, pins, sink)
        server = InterNodeServer(
            endpoint,
            Identity(cdir),
            port=0,
            hosts=list(hosts),
            limits=Limits(**limits),
            is_pinned=pins.is_pinned,
        )
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="wm-server", daemon=True)
        thread.start()
        wm = WmServer(server, sink, loop, thread)
        started.append(wm)
        wm.call(server.start())
        return wm

    yield start
    for wm in started:
        wm.stop()


def _no_status() -> Any:
    raise AssertionError("manager:status is not reachable over the inter-node endpoint")


class HTTPSClient:
    """A blocking TLS client socket with a minimal HTTP/1.1 response reader."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buf += chunk
        return bool(chunk)

    def read_until_closed(self) -> bytes:
        """Everything up to EOF (close_notify, FIN or reset)."""
        try:
            while self._fill():
                pass
        except (ssl.SSLError, ConnectionError):
            pass
        out, self.buf = self.buf, b""
        return out

    def is_closed_by_peer(self) -> bool:
        """Block until the server closes (True) or sends more bytes (False)."""
        try:
            return not self._fill()
        except (ssl.SSLError, ConnectionError):
            return True

    def response(self) -> tuple[int, dict[str, str], bytes]:
        """The next response (status, lowercased headers, body); 1xx responses included."""
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError(f"closed before a full response head: {self.buf!r}")
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0")) if status >= 200 else 0
        while len(self.buf) < length:
            if not self._fill():
                raise ConnectionError("closed mid-body")
        body, self.buf = self.buf[:length], self.buf[length:]
        return status, headers, body

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def https_client() -> Iterator[Callable[..., HTTPSClient]]:
    """``https_client(port, pair=None, host="127.0.0.1", alpn=("http/1.1",))`` → HTTPSClient."""
    clients: list[HTTPSClient] = []

    def connect(
        port: int,
        pair: CertPair | None = None,
        host: str = "127.0.0.1",
        alpn: tuple[str, ...] | None = ("http/1.1",),
        timeout: float = WAIT,
    ) -> HTTPSClient:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        if pair is not None:
            ctx.load_cert_chain(pair.cert, pair.key)
        if alpn:
            ctx.set_alpn_protocols(list(alpn))
        raw = socket.create_connection((host, port), timeout=timeout)
        try:
            sock = ctx.wrap_socket(raw)
        except BaseException:
            raw.close()
            raise
        client = HTTPSClient(sock)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()


def http_request(
    body: bytes,
    *,
    path: str = "/v1/workloads/events",
    method: str = "POST",
    content_type: str | None = "application/json",
    extra: str = "",
) -> bytes:
    """A complete HTTP/1.1 request with Content-Length (for byte-exact tests)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: test\r\n"
    if content_type is not None:
        head += f"Content-Type: {content_type}\r\n"
    head += f"Content-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


# ==================================================================================================
# nvpair-wm subprocesses on a cluster directory (test_internode_e2e.py, test_batch_bound.py,
# test_admission.py)
#
# start_node        factory: start_node(cluster_dir, *extra_args) -> a running
#                   tests.support.nodes.Node with its port known; on the way out: SIGTERM -> exit
#                   0, stdout read to EOF, only JSON-RPC frames on it
# ==================================================================================================


@pytest.fixture
def start_node() -> Iterator[StartNode]:
    started: list[Node] = []

    def start(cluster_dir: Path, *extra: str) -> Node:
        node = launch(cluster_dir, *extra)
        started.append(node)  # finished on the way out even if it never gets ready
        return wait_ready(node)

    yield start
    for node in started:
        finish(node)


# ==================================================================================================
# systemd's notify protocol (tests/test_notify.py, test_systemd_unit.py)
#
# A suite run by a systemd unit inherits $NOTIFY_SOCKET and $WATCHDOG_*: the nodes the tests
# start would tell that unit's systemd they are ready, or ping its watchdog. The tests that play
# systemd set their own.
# ==================================================================================================


@pytest.fixture(autouse=True, scope="session")
def _no_inherited_notify_socket() -> Iterator[None]:
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        os.environ.pop(name, None)
    yield


# ==================================================================================================
# The order make test hands tests out in (the whole suite)
#
# pytest-xdist gives each worker the next test in collection order as it finishes one, so a long
# test collected late is the run's tail while the other workers idle. The files holding the
# longest tests go first (longest first, as measured with --durations); within a file, and for
# every other file, the collection order stands (a stable sort). make test hands out whole files
# (--dist loadfile): the Windows checks, which share one Wine prefix and wineserver, go first.
# ==================================================================================================

LONG_POLES = (
    "test_windows.py",
    "test_properties.py",
    "test_vector_coverage.py",
    "test_packaging.py",
    "test_releases.py",
    "test_ts_package.py",
    "test_model.py",
    "test_make_run.py",
    "test_soak.py",
    "test_explore.py",
    "test_behaviour.py",
    "test_admission.py",
    "test_quicktype.py",
    "test_consumers_go.py",
    "test_consumers.py",
    "test_schema_strict.py",
    "test_fuzz_differential.py",
    "test_kit_codec.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_POLES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
