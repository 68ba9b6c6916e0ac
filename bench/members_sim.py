"""A member simulator: one asyncio process standing for many cluster members around one node.

Each simulated member has its own EC P-256 certificate, pinned in the ``trusted/`` of the node
under test (a real ``nvpair-wm`` subprocess), and plays both roles a real member plays:

* **peer server**: its own listening socket on 127.0.0.1 (mutual TLS, ALPN ``http/1.1``, the
  node's certificate as the only client it takes, as a pin) answering every ``POST
  /v1/workloads/events`` 202 and recording each frame it was sent;
* **client**: its own connection to the node (mutual TLS, the node's certificate as the only
  server it takes), sending what a member sends: lifecycle notifications, one request per write
  and one in flight per connection (HTTP/1.1 keep-alive); on a new connection, first a snapshot
  of what it originated (batches of at most ``BroadcastLimits.max_batch_frames``); failures and
  503s handled by the daemon's own retry policy (``nvpair_wm.outbox.RetryRun``: equal jitter,
  ``Retry-After``), so the simulated members reconnect as real ones would.

The bench process is also the node's broker (stdin/stdout): it sends ``nodes:update`` with a
record per member and local events, and counts the ``workloads:upsert`` lines per workload.

A partition is played by closing every member's listener and every connection at once (the
node sees its links fail and backs off; the members' clients do the same), a heal by listening
again on the same ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import ssl
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nvpair_wm_schema.contract import CONTRACT_VERSION

from bench.harness import ROOT
from nvpair_wm.clusterdir import cert_fingerprint, make_self_signed
from nvpair_wm.outbox import BroadcastLimits, RetryRun

__all__ = ["Cluster", "Identity", "Member", "NodeProc", "make_identities", "write_node_dir"]

EVENTS_PATH: Final = b"/v1/workloads/events"
CONTRACT: Final = CONTRACT_VERSION.encode()
_ACCEPTED: Final = (
    b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\nserver: nvpair-sim/1\r\n"
    b"nvpair-contract-version: " + CONTRACT + b"\r\n\r\n"
)
_EVENT: Final = (
    '{"jsonrpc":"2.0","method":"workload:submitted","params":{"workloadInfo":{"id":"%s",'
    '"model":"llama-3.1-8b","engine":"vllm","runId":"%s","state":"queued","originatedFrom":"%s",'
    '"createdAt":1764690000000,"startedAt":null,"completedAt":null,"error":null,"seq":1}}}'
)
_LIMITS: Final = BroadcastLimits()
HANDSHAKES_AT_ONCE: Final = 32  # the simulator's members connecting at once (see Member._run)
CONNECT_TIMEOUT: Final = 60.0  # a member's connect and handshake, from its turn (see above)


def event_frame(workload_id: str, origin: str) -> bytes:
    """A ``workload:submitted`` notification of a new workload (~300 bytes)."""
    return (_EVENT % (workload_id, f"run-{origin}", origin)).encode()


# ------------------------------------------------------------------------------------- identities


@dataclass(frozen=True, slots=True)
class Identity:
    """A certificate and key on disk (``node.crt``, ``node.key`` in ``dir``)."""

    name: str
    dir: Path
    fingerprint: str

    @property
    def cert(self) -> Path:
        return self.dir / "node.crt"

    @property
    def key(self) -> Path:
        return self.dir / "node.key"


def make_identity(root: Path, name: str) -> Identity:
    cert, key = make_self_signed(name)
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "node.crt").write_bytes(cert)
    (d / "node.key").write_bytes(key)
    os.chmod(d / "node.key", 0o600)
    return Identity(name, d, cert_fingerprint(cert))


def make_identities(root: Path, count: int, prefix: str = "member-") -> list[Identity]:
    """``count`` members (EC P-256: about a millisecond each)."""
    width = len(str(count))
    return [make_identity(root, f"{prefix}{i:0{width}d}") for i in range(1, count + 1)]


def write_node_dir(node: Identity, members: list[Identity]) -> Path:
    """The node's cluster directory: its own identity and every member pinned in trusted/."""
    trusted = node.dir / "trusted"
    trusted.mkdir(exist_ok=True)
    for m in members:
        (trusted / f"{m.name}.crt").write_bytes(m.cert.read_bytes())
    return node.dir


# ------------------------------------------------------------------------------ the peer server


class _ServerConn(asyncio.Protocol):
    """One connection from the node to a member: HTTP/1.1 requests, answered 202."""

    def __init__(self, member: Member) -> None:
        self.member = member
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.member.server_conns.add(self)
        self.member.links_made += 1
        self.member.cluster.link_made(self.member)

    def connection_lost(self, exc: Exception | None) -> None:
        self.member.server_conns.discard(self)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end]).lower()
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name == b"content-length":
                    length = int(value)
            if len(buf) < end + 4 + length:
                return
            body = bytes(buf[end + 4 : end + 4 + length])
            del buf[: end + 4 + length]
            if not head.startswith(b"post " + EVENTS_PATH):
                self.member.problems.append(f"unexpected request {head[:60]!r}")
            self.member.received_body(body)
            assert self.transport is not None
            self.transport.write(_ACCEPTED)


# ------------------------------------------------------------------------------------ the client


class _ClientConn(asyncio.Protocol):
    """One member's connection to the node: one request at a time, response parsed."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[tuple[int, dict[bytes, bytes]]] | None = None
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection lost"))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = bytes(buf[:end]).split(b"\r\n")
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get(b"content-length", b"0"))
        if len(buf) < end + 4 + length:
            return
        del buf[: end + 4 + length]
        status = int(lines[0].split()[1])
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result((status, headers))

    async def post(self, body: bytes, within: float) -> tuple[int, dict[bytes, bytes]]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(
            b"POST /v1/workloads/events HTTP/1.1\r\nhost: node\r\n"
            b"content-type: application/json\r\nnvpair-contract-version: " + CONTRACT + b"\r\n"
            b"user-agent: nvpair-sim/1\r\ncontent-length: %d\r\n\r\n" % len(body) + body
        )
        async with asyncio.timeout(within):
            return await self.waiter


# ------------------------------------------------------------------------------------ one member


class Member:
    """One simulated member: a peer server for the node's broadcasts and a client of its own."""

    def __init__(self, cluster: Cluster, ident: Identity, rng: random.Random) -> None:
        self.cluster = cluster
        self.ident = ident
        self.name = ident.name
        self.port = 0
        self.server: asyncio.Server | None = None
        self.server_conns: set[_ServerConn] = set()
        self.links_made = 0
        # What the node sent this member: (workload id, seq) -> times.
        self.received: Counter[tuple[str, int]] = Counter()
        self.requests = 0
        self.problems: list[str] = []
        # What this member originated: the newest frame of each workload (its snapshot).
        self.originated: dict[str, bytes] = {}
        self._pending: list[bytes] = []  # events not yet sent to the node
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.client: _ClientConn | None = None
        self.retry = RetryRun(_LIMITS, rng)
        self.connects = 0
        self.snapshots_done = 0  # snapshots the node took (every frame answered 2xx)
        self.sent_ok = 0  # frames answered 2xx
        self.statuses: Counter[int] = Counter()
        self.server_ctx = self._server_context()
        self.client_ctx = self._client_context()

    def _server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.ident.cert, self.ident.key)
        ctx.verify_mode = ssl.CERT_REQUIRED  # the node's certificate only: a pin
        ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        ctx.load_verify_locations(cafile=str(self.cluster.node.cert))
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    def _client_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_REQUIRED  # the node's certificate only: a pin
        ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        ctx.load_verify_locations(cafile=str(self.cluster.node.cert))
        ctx.load_cert_chain(self.ident.cert, self.ident.key)
        ctx.set_alpn_protocols(["http/1.1"])
        return ctx

    # -- peer server ------------------------------------------------------------------------------

    async def listen(self) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: _ServerConn(self),
            "127.0.0.1",
            self.port,
            ssl=self.server_ctx,
            backlog=64,
            reuse_address=True,
        )
        self.port = self.server.sockets[0].getsockname()[1]

    def cut(self) -> None:
        """The partition: stop listening, drop every connection both ways."""
        if self.server is not None:
            self.server.close()
            self.server = None
        for conn in list(self.server_conns):
            if conn.transport is not None:
                conn.transport.abort()
        if self.client is not None and self.client.transport is not None:
            self.client.transport.abort()

    def received_body(self, body: bytes) -> None:
        self.requests += 1
        self.cluster.requests_in += 1
        for frame in json.loads(body):
            info = frame["params"]["workloadInfo"]
            self.received[(info["id"], info["seq"])] += 1
        self.cluster.member_progress()

    def record(self) -> dict[str, Any]:
        """This member's node record for ``nodes:update``."""
        return {
            "nodeId": self.name,
            "address": "127.0.0.1",
            "port": self.port,
            "fingerprint": self.ident.fingerprint,
        }

    # -- client -----------------------------------------------------------------------------------

    def originate(self, workload_id: str) -> None:
        """A new local event of this member: kept for snapshots, queued for the node."""
        frame = event_frame(workload_id, self.name)
        self.originated[workload_id] = frame
        self._pending.append(frame)
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.client is not None and self.client.transport is not None:
            self.client.transport.close()
        if self.server is not None:
            self.server.close()
        for conn in list(self.server_conns):
            if conn.transport is not None:
                conn.transport.abort()

    async def _run(self) -> None:
        """Keep a connection to the node; a new one starts with a snapshot, then events."""
        loop = asyncio.get_running_loop()
        cluster = self.cluster
        next_connect = 0.0
        while True:
            client = self.client
            if client is None or client.lost.done():
                self.client = None
                wait = max(self.retry.retry_at, next_connect) - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                next_connect = loop.time() + _LIMITS.min_reconnect_interval
                if cluster.partitioned:  # the network is down: the attempt fails
                    self.retry.failure(loop.time())
                    continue
                try:
                    # Each real member handshakes on its own CPU: here they take turns, and a
                    # member's timeout runs from its turn, so the simulator's one core does not
                    # make every member time out at once.
                    async with cluster.handshakes, asyncio.timeout(CONNECT_TIMEOUT):
                        _, client = await loop.create_connection(
                            _ClientConn,
                            "127.0.0.1",
                            cluster.node_port,
                            ssl=self.client_ctx,
                            server_hostname="node",
                        )
                except (OSError, TimeoutError, ssl.SSLError):
                    self.retry.failure(loop.time())
                    continue
                self.client = client
                self.connects += 1
                # A new connection: the snapshot goes first (all of what this member
                # originated; what was pending is in it).
                self._pending.clear()
                frames = list(self.originated.values())
                if not await self._send(client, frames, loop):
                    continue
                self.snapshots_done += 1
                cluster.member_progress()
            if not self._pending:
                self._wake.clear()
                waiter = loop.create_task(self._wake.wait())
                await asyncio.wait([waiter, client.lost], return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                continue
            frames, self._pending = self._pending, []
            if not await self._send(client, frames, loop):
                self._pending[:0] = frames
                continue
            cluster.member_progress()

    async def _send(self, client: _ClientConn, frames: list[bytes], loop: Any) -> bool:
        """Send ``frames`` in batches as a member does; False when the connection failed."""
        size = _LIMITS.max_batch_frames
        i = 0
        while i < len(frames):
            chunk = frames[i : i + size]
            body = chunk[0] if len(chunk) == 1 else b"[" + b",".join(chunk) + b"]"
            wait = self.retry.retry_at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                status, headers = await client.post(body, _LIMITS.response_timeout)
            except (ConnectionError, TimeoutError, OSError):
                self.retry.failure(loop.time())
                if client.transport is not None:
                    client.transport.abort()
                return False
            self.statuses[status] += 1
            self.cluster.statuses[status] += 1
            if 200 <= status < 300:
                self.retry.success(loop.time)
                self.sent_ok += len(chunk)
                i += len(chunk)
                continue
            if status < 500 and status not in (403, 408, 429):
                self.problems.append(f"the node answered {status}: frames given up")
                i += len(chunk)
                continue
            after = headers.get(b"retry-after")
            self.retry.failure(loop.time(), float(after) if after else None)
        return True


# ----------------------------------------------------------------------------- the node process


class NodeProc:
    """The node under test: ``nvpair-wm`` on stdio, with the bench as its broker."""

    def __init__(self, cluster_dir: Path, log_path: Path, extra: list[str]) -> None:
        self.cluster_dir = cluster_dir
        self.log_path = log_path
        self.extra = extra
        self.proc: asyncio.subprocess.Process | None = None
        self.pid = 0
        self.port = 0
        self.upserts: Counter[str] = Counter()  # workload id -> upserts seen
        self.lines = 0
        self._waiters: dict[str, asyncio.Future[Any]] = {}
        self._ready: asyncio.Future[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._next = 0
        self.on_upsert: Callable[[], None] = lambda: None

    def _log(self) -> Any:
        return open(self.log_path, "ab")

    async def start(self) -> float:
        """Spawn and wait for ``ready``; returns the wall seconds it took."""
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        with self._log() as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "nvpair_wm",
                "--cluster-dir",
                str(self.cluster_dir),
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                *self.extra,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                cwd=ROOT,
                limit=1 << 24,
            )
        self.pid = self.proc.pid
        self._ready = loop.create_future()
        self._reader = loop.create_task(self._read())
        async with asyncio.timeout(60):
            await self._ready
        took = time.perf_counter() - t0
        if not self.port:
            self.port = int((await self.request("manager:status"))["port"])
        return took

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        out = self.proc.stdout
        while line := await out.readline():
            self.lines += 1
            if b'"workloads:upsert"' in line:
                frame = json.loads(line)
                self.upserts[frame["params"]["workloadInfo"]["id"]] += 1
                self.on_upsert()
                continue
            frame = json.loads(line)
            if frame.get("method") == "ready" and self._ready is not None:
                self._ready.set_result(None)
            elif "id" in frame and (fut := self._waiters.pop(str(frame["id"]), None)):
                fut.set_result(frame)

    def send(self, frame: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(frame + b"\n")

    async def request(self, method: str, params: Any = None, within: float = 60) -> Any:
        self._next += 1
        rid = f"sim-{self._next}"
        fut = asyncio.get_running_loop().create_future()
        self._waiters[rid] = fut
        frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": rid}
        if params is not None:
            frame["params"] = params
        self.send(json.dumps(frame, separators=(",", ":")).encode())
        async with asyncio.timeout(within):
            answer = await fut
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)

    async def wait_exit(self) -> None:
        if self.proc is not None:
            await self.proc.wait()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await self._reader

    async def close(self) -> None:
        """EOF on stdin (the node exits 0), else SIGKILL after 15 s."""
        if self.proc is None or self.proc.returncode is not None:
            await self.wait_exit()
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            async with asyncio.timeout(15):
                await self.proc.wait()
        except TimeoutError:
            self.kill()
        await self.wait_exit()

    # -- /proc ------------------------------------------------------------------------------------

    def rss(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


# --------------------------------------------------------------------------------- the cluster


@dataclass
class Cluster:
    """A node under test and ``len(members)`` simulated members around it."""

    root: Path
    node: Identity
    idents: list[Identity]
    extra: list[str] = field(default_factory=list)
    seed: int = 31
    members: list[Member] = field(init=False)
    proc: NodeProc = field(init=False)
    requests_in: int = 0  # requests the members' servers took
    partitioned: bool = False  # members can neither be reached nor reach the node
    statuses: Counter[int] = field(default_factory=Counter)  # what the node answered members
    _progress: asyncio.Event = field(init=False)
    handshakes: asyncio.Semaphore = field(init=False)  # members' connects at once
    _links: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        self.members = [Member(self, i, random.Random(rng.random())) for i in self.idents]
        self.proc = NodeProc(self.node.dir, self.root / "node.log", self.extra)
        self.proc.on_upsert = self.member_progress
        self._progress = asyncio.Event()
        self.handshakes = asyncio.Semaphore(HANDSHAKES_AT_ONCE)

    @classmethod
    def create(cls, root: Path, count: int, extra: list[str] | None = None) -> Cluster:
        """Identities for the node and ``count`` members, the node's directory pinning them."""
        node = make_identity(root, "node-under-test")
        idents = make_identities(root / "members", count)
        write_node_dir(node, idents)
        return cls(root, node, idents, list(extra or []))

    @property
    def node_port(self) -> int:
        return self.proc.port

    def member_progress(self) -> None:
        self._progress.set()

    def link_made(self, member: Member) -> None:
        self._links.add(member.name)
        self._progress.set()

    async def until(self, cond: Callable[[], bool], within: float, what: str) -> float:
        """Wait (woken by progress, else every 50 ms) until ``cond()``; seconds it took."""
        t0 = time.perf_counter()
        deadline = t0 + within
        while not cond():
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"not within {within:g}s: {what}")
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 0.05)):
                    await self._progress.wait()
        return time.perf_counter() - t0

    # -- phases -----------------------------------------------------------------------------------

    async def listen(self) -> None:
        for m in self.members:
            await m.listen()

    def records(self) -> list[dict[str, Any]]:
        own = {
            "nodeId": self.node.name,
            "address": "127.0.0.1",
            "port": self.proc.port,
            "fingerprint": self.node.fingerprint,
        }
        return [own, *(m.record() for m in self.members)]

    async def nodes_update(self) -> float:
        """Send ``nodes:update`` as a request; seconds until it is answered."""
        t0 = time.perf_counter()
        await self.proc.request("nodes:update", {"nodes": self.records()})
        return time.perf_counter() - t0

    def links_up(self) -> int:
        """Members the node holds a connection to now."""
        return sum(1 for m in self.members if m.server_conns)

    def start_clients(self) -> None:
        for m in self.members:
            m.start()

    def clients_up(self) -> int:
        return sum(1 for m in self.members if m.client is not None and m.snapshots_done)

    def partition(self) -> None:
        self.partitioned = True
        for m in self.members:
            m.cut()

    async def heal(self) -> None:
        await self.listen()
        self.partitioned = False

    async def close(self) -> None:
        await asyncio.gather(*(m.stop() for m in self.members), return_exceptions=True)
        await self.proc.close()
