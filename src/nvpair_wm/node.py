"""One nvpair-wm node: the IO shells wired around the sans-IO core, and its lifecycle.

Start: bind the inter-node port (always, identity or not), open the broker channel, write
``ready``. Run until the broker closes the channel (EOF) or SIGTERM/SIGINT. Stop: stop
accepting, let in-flight requests finish (HTTP/2 GOAWAY), flush what is queued toward the broker
and the peers within a grace period, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from nvpair_wm_schema.manager_status_schema import PeerStatus, StatusResult
from nvpair_wm_schema.node_record_schema import NodeRecord
from nvpair_wm_schema.ready_schema import Ready, ReadyParams

from nvpair_wm import __version__, codec
from nvpair_wm.broadcaster import Broadcaster, BroadcastLimits
from nvpair_wm.dedup import TableLimits, WorkloadTable
from nvpair_wm.dispatch import Dispatcher, Outbound
from nvpair_wm.endpoint import EventsEndpoint
from nvpair_wm.http.core import Limits
from nvpair_wm.io.pin_watch import WatchedPins
from nvpair_wm.io.server import InterNodeServer
from nvpair_wm.local import BrokerChannel, BrokerQueue, close_writer, open_ipc, open_stdio
from nvpair_wm.pins import Identity, NodeIdentity, PinSet

log = logging.getLogger(__name__)

EXPIRE_EVERY = 1.0


@dataclass(frozen=True, slots=True)
class Config:
    port: int = 14320
    ipc: str | None = None
    cluster_dir: Path | None = None
    host: str | None = None  # None: every interface, IPv4 and IPv6
    max_frame: int = codec.MAX_FRAME_BYTES
    broker_queue: int = 10_000
    shutdown_grace: float = 5.0
    table: TableLimits = field(default_factory=TableLimits)
    http: Limits = field(default_factory=Limits)
    broadcast: BroadcastLimits = field(default_factory=BroadcastLimits)


class _NoIdentity:
    """Without --cluster-dir there is no identity: every handshake fails, nothing is sent."""

    def current(self) -> NodeIdentity | None:
        return None


class _NoPins:
    def current(self) -> frozenset[str]:
        return frozenset()

    def is_pinned(self, fingerprint: str) -> bool:
        return False


class Node:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.table = WorkloadTable(config.table)
        self.queue = BrokerQueue(config.broker_queue)
        self.dispatcher = Dispatcher(self.table, self._status)
        cluster = config.cluster_dir
        self.identity: Identity | _NoIdentity = Identity(cluster) if cluster else _NoIdentity()
        self.pins: PinSet | _NoPins = PinSet(cluster / "trusted") if cluster else _NoPins()
        # trusted/ is rescanned only when inotify saw it change (per request without inotify).
        pins = WatchedPins(self.pins) if isinstance(self.pins, PinSet) else self.pins
        endpoint = EventsEndpoint(self.dispatcher, pins, self.queue, max_body=config.max_frame)
        hosts = [config.host] if config.host else None
        self.server = InterNodeServer(
            endpoint,
            self.identity,
            port=config.port,
            hosts=hosts,
            limits=config.http,
            is_pinned=pins.is_pinned,
        )
        self.broadcaster = Broadcaster(  # the same inotify-watched pins as the server
            self.identity, pins, self.table.originated, config.broadcast
        )
        self._stop = asyncio.Event()

    def _peers(self) -> list[PeerStatus]:
        return self.broadcaster.status()

    def _bound_port(self) -> int | None:
        return self.server.port or None

    def _identity(self) -> tuple[bool, str | None]:
        ident = self.identity.current()
        return (True, ident.fingerprint) if ident else (False, None)

    def publish(self, outbound: list[Outbound]) -> None:
        self.broadcaster.publish(outbound)

    def update_nodes(self, nodes: list[NodeRecord]) -> None:
        log.info("nodes:update with %d records", len(nodes))
        self.broadcaster.update_nodes(nodes)

    def _status(self) -> StatusResult:
        has_identity, fingerprint = self._identity()
        counters = self.dispatcher.counters
        counters.brokerQueue = len(self.queue)
        return StatusResult(
            version=__version__,
            hasIdentity=has_identity,
            fingerprint=fingerprint,
            port=self._bound_port(),
            peers=self._peers(),
            counters=counters,
        )

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            reader, writer = await (open_ipc(self.config.ipc) if self.config.ipc else open_stdio())
        except OSError as exc:
            where = f"--ipc {self.config.ipc}" if self.config.ipc else "stdio"
            log.error("cannot open the broker channel (%s): %s", where, exc.strerror or exc)
            return 1
        channel = BrokerChannel(
            reader,
            writer,
            self.dispatcher,
            self.queue,
            on_outbound=self.publish,
            on_nodes=self.update_nodes,
            max_frame=self.config.max_frame,
        )
        try:
            await self.start()
        except OSError as exc:
            log.error("cannot listen on port %d: %s", self.config.port, exc.strerror or exc)
            await close_writer(writer)
            return 1
        self.queue.put([codec.encode_line(Ready(jsonrpc="2.0", params=ReadyParams(__version__)))])
        tasks = [
            asyncio.create_task(channel.write_forever(), name="broker-writer"),
            asyncio.create_task(self._expire_forever(), name="expiry"),
        ]
        reading = asyncio.create_task(channel.read_until_eof(), name="broker-reader")
        stopping = asyncio.create_task(self._stop.wait(), name="stop")
        done, _ = await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if reading in done:
            failure = reading.exception()
            if failure is not None:
                log.error("broker channel failed: %r; shutting down", failure)
            else:
                log.info("broker closed the channel; shutting down")
        await self.stop(self.config.shutdown_grace)
        for task in (*tasks, reading, stopping):
            task.cancel()
        await asyncio.gather(*tasks, reading, stopping, return_exceptions=True)
        with contextlib.suppress(OSError, RuntimeError):
            await asyncio.wait_for(channel.flush(), self.config.shutdown_grace)
        await close_writer(writer)
        log.info("stopped")
        return 0

    async def start(self) -> None:
        """Start the inter-node parts: the port is bound whether or not there is an identity."""
        await self.server.start()
        await self.broadcaster.start()

    async def stop(self, grace: float) -> None:
        """Stop the inter-node parts, letting in-flight work finish within ``grace``."""
        await asyncio.gather(self.server.close(grace), self.broadcaster.close(grace))

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("%s received; shutting down", sig.name)
        self._stop.set()

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(EXPIRE_EVERY)
            self.table.expire(time.monotonic())
