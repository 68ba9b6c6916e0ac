"""One nvpair-wm node: the IO shells wired around the sans-IO core, and its lifecycle.

Start: reload what this node originated from its journal (with a cluster dir), bind the
inter-node port (always, identity or not), open the broker channel, write ``ready``. Run until
the broker closes the channel (EOF) or SIGTERM/SIGINT. Stop: stop accepting, let in-flight
requests finish (HTTP/2 GOAWAY), flush what is queued toward the broker and the peers within a
grace period, sync the journal, exit 0 — or 1 after one line on stderr when the channel or a task
failed for any other reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import gc
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from msgspec import UNSET, UnsetType
from nvpair_wm_schema.contract import CONTRACT_VERSION
from nvpair_wm_schema.manager_status_schema import (
    CapacityShortfall,
    ConfigStatus,
    FastPaths,
    JournalStatus,
    PeerStatus,
    StatusResult,
)
from nvpair_wm_schema.node_record_schema import NodeRecord
from nvpair_wm_schema.ready_schema import Ready, ReadyParams

from nvpair_wm import __version__, capacity, codec, internals, logs, platforms
from nvpair_wm.broadcaster import Broadcaster
from nvpair_wm.config import Config, metrics_address
from nvpair_wm.dedup import WorkloadTable
from nvpair_wm.dispatch import Dispatcher, Outbound
from nvpair_wm.endpoint import EventsEndpoint
from nvpair_wm.errors import ConfigInvalid, ListenFailed
from nvpair_wm.http.core import Handler
from nvpair_wm.io.pin_watch import WatchedIdentity, WatchedPins, open_watch
from nvpair_wm.io.server import InterNodeServer
from nvpair_wm.journal import (
    Journal,
    close_quietly,
    fsync_and_close,
    fsync_directory,
    open_journal,
    reload_table,
)
from nvpair_wm.journal.compactor import compact_in_child
from nvpair_wm.local import BrokerChannel, BrokerQueue, close_writer, dial_ipc, open_stdio
from nvpair_wm.notify import Notifier
from nvpair_wm.pins import Identity, NodeIdentity, PinSet
from nvpair_wm.reload import ReloadPlan, plan
from nvpair_wm.sync import SharedOriginated
from nvpair_wm.versions import PeerVersions

if TYPE_CHECKING:
    from nvpair_wm.metrics import Metrics

__all__ = ["Config", "Node"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def _exit_status(
    done: set[asyncio.Task[Any]], reading: asyncio.Task[None], stopping: asyncio.Task[Any]
) -> int:
    """0 when the broker ended the channel (EOF, or it closed its end) or a signal asked us to
    stop; otherwise 1, with one line on stderr saying which part failed and why, so that a
    supervisor can tell a crash from a normal end."""
    if stopping in done:
        return 0
    for task in done:
        failure = task.exception()
        if failure is None and task is reading:
            log.info("broker closed the channel; shutting down")
            return 0
        if isinstance(failure, (BrokenPipeError, ConnectionResetError)):
            log.info("broker closed the channel (%s); shutting down", type(failure).__name__)
            return 0
        why = " ".join(f"{type(failure).__name__}: {failure}".split())
        log.error("%s failed: %s; exiting with status 1", task.get_name(), why)
        return 1
    return 0  # pragma: no cover - asyncio.wait returns at least one task


class _NoIdentity:
    """Without --cluster-dir there is no identity: every handshake fails, nothing is sent."""

    def current(self) -> NodeIdentity | None:
        return None


class _NoPins:
    def current(self) -> frozenset[str]:
        return frozenset()

    def is_pinned(self, fingerprint: str) -> bool:
        return False


#: How often STATUS= is refreshed under systemd when no watchdog asks for more often.
NOTIFY_STATUS_INTERVAL = 5.0  # seconds


class Startup(enum.Enum):
    """How far the node has come in saying it is ready; it only moves forward, one step each."""

    STARTING = "starting"  # ``ready`` not written to the broker yet (GET /readyz: 503)
    READY_SENT = "ready-sent"  # ``ready`` queued for the broker; systemd not told READY=1 yet
    READY_TOLD = "ready-told"  # READY=1 told (when /readyz first said 200; a no-op off systemd)


class Node:
    def __init__(
        self,
        config: Config,
        notifier: Notifier | None = None,
        *,
        reread: Callable[[], Config] | None = None,
    ) -> None:
        self.config = config
        # A reload (SIGHUP) calls ``reread`` (cli.py: the --config file under the start's flags,
        # checked as at start; None without --config) and applies what may change live.
        self._reread = reread
        self.config_generation = 1
        self.config_loaded_at = time.time()
        self._reload_lock = asyncio.Lock()
        self._reloads: set[asyncio.Task[ReloadPlan | None]] = set()
        # systemd's notify protocol (Type=notify): a no-op without $NOTIFY_SOCKET.
        self.notifier = notifier if notifier is not None else Notifier.from_environ()
        self.table = WorkloadTable(config.table)
        self.queue = BrokerQueue(config.broker.queue_frames)
        self.dispatcher = Dispatcher(self.table, self._status, max_batch=config.max_batch)
        cluster = config.cluster_dir
        # What this node originated before a restart, back in the table before any peer
        # connects, so that every first snapshot carries it, and what it had forwarded to its
        # broker, so that nothing older reaches the broker again (nvpair_wm.journal). No
        # cluster dir: no peers, nothing to replay.
        self.journal: Journal | None = None
        if cluster:
            self.journal, records = open_journal(cluster, config.journal, config.table, time.time())
            skipped = reload_table(self.table, records, time.monotonic(), time.time())
            log.info(
                "journal: reloaded %d workloads and %d tombstones (%d records read, %d skipped)",
                len(self.table),
                self.table.tombstones,
                len(records),
                skipped,
                extra={
                    "workloads": len(self.table),
                    "tombstones": self.table.tombstones,
                    "records": len(records),
                    "skipped": skipped,
                },
            )
        self.identity: Identity | _NoIdentity = Identity(cluster) if cluster else _NoIdentity()
        self.pins: PinSet | _NoPins = (
            PinSet(cluster / "trusted", config.pins) if cluster else _NoPins()
        )
        # trusted/ and the identity files are read again only when inotify saw them change (per
        # use without inotify): one descriptor for both.
        watch = self._watch = open_watch() if cluster else None
        pins = WatchedPins(self.pins, watch) if isinstance(self.pins, PinSet) else self.pins
        self._watched_pins = pins  # what is pinned now, read again only after a change
        identity = (
            WatchedIdentity(self.identity, watch)
            if isinstance(self.identity, Identity)
            else self.identity
        )
        # Metrics are opt-in: prometheus_client is imported only then. They observe the endpoint
        # (request durations) and the broadcaster (delivery latency), wired in here as those
        # are built.
        self.metrics: Metrics | None = None
        if config.metrics:
            from nvpair_wm.metrics import Metrics  # noqa: PLC0415

            self.metrics = Metrics(
                metrics_address(config.metrics), self.dispatcher.status, readiness=self.readiness
            )
        # What each peer says of its versions, heard in its requests (the endpoint) and in its
        # responses (the broadcaster); manager:status and the metrics show it.
        self.versions = PeerVersions()
        endpoint = EventsEndpoint(
            self.dispatcher,
            pins,
            self.queue,
            max_body=config.max_frame,
            versions=self.versions,
            # What a peer's request tells the broker waits in the journal for the broker
            # channel's next write, which writes it first (its before_write, in run()): so
            # that after a restart the node still refuses what is older than the broker has.
            on_forwarded=None if self.journal is None else self.journal.forward_later,
        )
        handler: Handler = endpoint if self.metrics is None else self.metrics.timed(endpoint)
        hosts = [config.bind] if config.bind else None
        self.server = InterNodeServer(
            handler,
            identity,
            port=config.port,
            hosts=hosts,
            limits=config.http,
            is_pinned=pins.is_pinned,
            tls_policy=config.tls,
            members=self._members,
        )
        # Limits that cap this node below its member count: logged when they appear, in status.
        self._capacity = capacity.Watch(config.http)
        # One walk of the table for every link that starts a snapshot before it changes.
        self.originated = SharedOriginated(self.table.originated)
        self.broadcaster = Broadcaster(  # the same inotify-watched sources as the server
            identity,
            pins,
            self.originated,
            config.broadcast,
            observer=None if self.metrics is None else self.metrics.delivery,
            versions=self.versions,
            tls_policy=config.tls,
        )
        self._stop = asyncio.Event()
        self._startup = Startup.STARTING

    def _peers(self) -> list[PeerStatus]:
        return self.broadcaster.status()

    def _bound_port(self) -> int | None:
        return self.server.port or None

    def _identity(self) -> tuple[bool, str | None]:
        ident = self.identity.current()
        return (True, ident.fingerprint) if ident else (False, None)

    def publish(self, outbound: list[Outbound]) -> None:
        """Peers first (an idle link writes the request now), then the journal: the append is
        not needed for the send, only before the broker's reply, which the channel queues after
        this returns. A crash between the two loses only what the broker was never told was
        taken."""
        self.originated.changed()
        self.broadcaster.publish(outbound)
        if self.journal is not None:  # written before the broker's reply can be
            self.journal.append(outbound, time.time())

    def update_nodes(self, nodes: list[NodeRecord]) -> None:
        log.info("nodes:update with %d records", len(nodes), extra={"nodes": len(nodes)})
        self.broadcaster.update_nodes(nodes)
        self._check_capacity()

    def _members(self) -> int:
        """The members this node serves: the certificates pinned now (asked per accepted
        connection: the watched set, not a scan of trusted/)."""
        return len(self._watched_pins.current())

    def _check_capacity(self) -> list[capacity.Shortfall]:
        """Fit the listen backlog to the member count; log each limit that newly caps it."""
        self.server.fit()
        members = self._members()
        for short in self._capacity.check(members, capacity.open_files(), capacity.somaxconn()):
            log.warning(short.message(), extra={"key": short.key, "members": members})
        return self._capacity.current

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
            journal=self._journal_status(),
            config=ConfigStatus(
                generation=self.config_generation, loadedAt=int(self.config_loaded_at * 1000)
            ),
            fastPaths=self._fast_paths(),
            capacity=[
                CapacityShortfall(key=s.key, limit=s.limit, needed=s.needed, members=s.members)
                for s in self._check_capacity()
            ],
        )

    @staticmethod
    def _fast_paths() -> FastPaths | UnsetType:
        on = internals.report()
        return FastPaths(**on) if on else UNSET  # before the check (not started): unsaid

    def _journal_status(self) -> JournalStatus:
        journal = self.journal
        state = "off" if journal is None else journal.health.state.status  # off: configuration
        if journal is None or journal.failing_since is None:
            return JournalStatus(state=state, failingSince=None, lastError=None)
        since = int(journal.failing_since * 1000)
        return JournalStatus(state=state, failingSince=since, lastError=journal.last_error)

    async def run(self) -> int:
        """Run until the broker ends the channel or a stop signal; the exit status. Under
        systemd, the notify task runs alongside from the first moment: the watchdog pings come
        from this loop, so a stuck loop stops them."""
        notifying = (
            asyncio.create_task(self._notify_forever(), name="systemd-notify")
            if self.notifier.enabled
            else None
        )
        try:
            return await self._run()
        finally:
            if notifying is not None:
                notifying.cancel()
                await asyncio.gather(notifying, return_exceptions=True)
            self.notifier.close()

    async def _run(self) -> int:
        loop = asyncio.get_running_loop()
        internals.check(loop)  # once: which fast paths are on (manager:status, metrics)
        platforms.on_stop_signals(loop, self._on_signal)
        with contextlib.suppress(NotImplementedError, RuntimeError, AttributeError):
            loop.add_signal_handler(signal.SIGHUP, self._on_reload)  # no SIGHUP on Windows
        try:  # first, so that the probes answer while the node waits for its broker
            await self._start_metrics()
        except ListenFailed as exc:
            log.error("cannot listen on %s: %s", exc.where, exc.reason)
            return 1
        ipc = self.config.ipc
        self.notifier.status(f"waiting for the broker on --ipc {ipc}" if ipc else "starting")
        try:
            opened = await self._unless_stopped(
                dial_ipc(ipc, self.config.broker) if ipc else open_stdio()
            )
        except OSError as exc:
            where = f"--ipc {self.config.ipc}" if self.config.ipc else "stdio"
            log.error("cannot open the broker channel (%s): %s", where, exc.strerror or exc)
            await self.stop(0)
            return 1
        if opened is None:  # a signal while waiting for the broker: its line was the one
            await self.stop(0)
            return 0
        reader, writer = opened
        channel = BrokerChannel(
            reader,
            writer,
            self.dispatcher,
            self.queue,
            on_outbound=self.publish,
            on_nodes=self.update_nodes,
            max_frame=self.config.max_frame,
            before_write=None if self.journal is None else self.journal.flush,
        )
        try:
            await self.start()
        except ListenFailed as exc:
            log.error("cannot listen on %s: %s", exc.where, exc.reason)
            await self.stop(0)
            await close_writer(writer)
            return 1
        if self._stop.is_set():  # a signal during start-up: no ready, nothing to flush
            await self.stop(0)
            await close_writer(writer)
            return 0
        # What startup built (modules, TLS, the reloaded journal) lives as long as the process:
        # out of the cyclic GC's way, so that no full collection traverses it again. Without a
        # collection first: start-up leaves next to no cyclic garbage, and with a full table a
        # collection traverses all of it (its dicts, a key tuple per workload) before ``ready``.
        gc.freeze()
        params = ReadyParams(version=__version__, contractVersion=CONTRACT_VERSION)
        self.queue.put([codec.encode_line(Ready(jsonrpc="2.0", params=params))])
        self._startup = Startup.READY_SENT
        self._tell_systemd_readiness()
        tasks = [
            asyncio.create_task(channel.write_forever(), name="broker-writer"),
            asyncio.create_task(self._expire_forever(), name="expiry"),
        ]
        if self.journal is not None:
            tasks.append(asyncio.create_task(self._journal_forever(self.journal), name="journal"))
        reading = asyncio.create_task(channel.read_until_eof(), name="broker-reader")
        stopping = asyncio.create_task(self._stop.wait(), name="stop")
        done, _ = await asyncio.wait(
            {reading, stopping, *tasks}, return_when=asyncio.FIRST_COMPLETED
        )
        code = _exit_status(done, reading, stopping)
        await self.stop(self.config.shutdown_grace)
        for task in (*tasks, reading, stopping):
            task.cancel()
        await asyncio.gather(*tasks, reading, stopping, return_exceptions=True)
        with contextlib.suppress(OSError, RuntimeError):
            await asyncio.wait_for(channel.flush(), self.config.shutdown_grace)
        await close_writer(writer)
        if self.journal is not None:
            self.journal.close()
        log.info("stopped")
        return code

    async def start(self) -> None:
        """Start the inter-node parts: the port is bound whether or not there is an identity.
        Raises :class:`ListenFailed` naming the flag whose address cannot be listened on."""
        if not internals.report():  # started without run() (tests): look now
            internals.check(asyncio.get_running_loop())
        await self._start_metrics()
        if self._watch is not None:  # the loop drains its events: a pin check is no syscall
            self._watch.poll_with(asyncio.get_running_loop())
        try:
            await self.server.start()
        except OSError as exc:
            where = f"--bind {self.config.bind}" if self.config.bind else "every interface"
            raise ListenFailed(f"--port {self.config.port} ({where})", exc) from exc
        self._check_capacity()
        await self.broadcaster.start()

    async def _start_metrics(self) -> None:
        """The --metrics listener (metrics and probes), once: raises :class:`ListenFailed`."""
        if self.metrics is not None and not self.metrics.port:
            try:
                await self.metrics.start()
            except OSError as exc:
                raise ListenFailed(f"--metrics {self.config.metrics}", exc) from exc

    def readiness(self) -> list[str]:
        """Why this node does not relay yet (empty: it does), for ``GET /readyz``: ``ready``
        sent to the broker, the inter-node listener up, the identity loaded (or knowingly
        absent: no --cluster-dir), the journal healthy (or off by configuration)."""
        reasons: list[str] = []
        if self._stop.is_set():
            reasons.append("stopping")
        elif self._startup is Startup.STARTING:
            reasons.append("starting: ready not sent to the broker yet")
        if not self._bound_port():
            reasons.append("the inter-node listener is not up")
        cluster = self.config.cluster_dir
        if cluster is not None and self.identity.current() is None:
            reasons.append(
                f"no cluster identity: node.crt/node.key in {cluster} missing or unusable"
            )
        journal = self.journal
        if journal is not None and journal.failing_since is not None:
            reasons.append(f"the journal is failing: {journal.last_error}")
        return reasons

    async def _unless_stopped(self, opening: Awaitable[T]) -> T | None:
        """``opening``'s result, or None when a stop signal comes first (it is cancelled)."""
        task = asyncio.ensure_future(opening)
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return None

    async def stop(self, grace: float) -> None:
        """Stop the inter-node parts, letting in-flight work finish within ``grace``."""
        self.notifier.stopping()
        metrics = [self.metrics.close()] if self.metrics else []
        await asyncio.gather(self.server.close(grace), self.broadcaster.close(grace), *metrics)
        if self._watch is not None:
            self._watch.stop_polling()

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("%s received; shutting down", sig.name)
        self._stop.set()

    # -- reload -----------------------------------------------------------------------------------

    def _on_reload(self) -> None:
        """SIGHUP: a reload, after the one that runs. One that already waits covers this one
        (it reads the file after the running one ends): at most two, however many signals."""
        if self._stop.is_set() or sum(not t.done() for t in self._reloads) >= 2:
            return
        task = asyncio.get_running_loop().create_task(self.reload(), name="reload")
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def reload(self) -> ReloadPlan | None:
        """Read the --config file again and apply what may change live (reload.py): one line
        per key that needs a restart (its running value stays), one line for what was applied,
        or one line when the file does not validate (nothing changes). The plan, or None when
        nothing was read."""
        async with self._reload_lock:
            if self._reread is None:
                log.warning("SIGHUP: no --config file to read again; nothing changed")
                return None
            self.notifier.reloading()
            try:
                return await self._reload(self._reread)
            except Exception as exc:  # a bug: one line, the node runs on
                log.debug("reload failed", exc_info=True)
                log.error("reload failed: %s: %s; the node runs on", type(exc).__name__, exc)
                return None
            finally:
                if self._startup is Startup.READY_TOLD and not self._stop.is_set():
                    self.notifier.ready(self.status_line())

    async def _reload(self, reread: Callable[[], Config]) -> ReloadPlan | None:
        generation = self.config_generation
        try:  # in a thread: the checks may resolve a host name
            loaded = await asyncio.to_thread(reread)
        except ConfigInvalid as exc:
            log.error(
                "reload refused: %s; nothing changed (configuration generation %d stays)",
                exc,
                generation,
                extra={"generation": generation},
            )
            return None
        result = plan(self.config, loaded)
        refused = list(result.refused)
        applied = list(result.applied)
        target = result.effective(self.config)
        if result.touches("metrics") and not await self._move_metrics(target.metrics):
            moved = next(c for c in applied if c.key == "metrics")
            applied.remove(moved)
            target = dataclasses.replace(target, metrics=self.config.metrics)
        for change in refused:
            log.warning(
                "reload: %s needs a restart; the running node keeps %s",
                change,
                change.old,
                extra={"key": change.key, "generation": generation},
            )
        if not applied:
            if not refused:
                log.info(
                    "reload: the configuration is unchanged (generation %d)",
                    generation,
                    extra={"generation": generation},
                )
            return ReloadPlan((), tuple(refused))
        done = ReloadPlan(tuple(applied), tuple(refused))
        self.config_generation = generation + 1
        self.config_loaded_at = time.time()
        log.info(
            "configuration reloaded (generation %d): %s",
            self.config_generation,
            "; ".join(str(c) for c in applied),
            extra={"generation": self.config_generation, "applied": [c.key for c in applied]},
        )
        self._apply(done, target)
        return done

    def _apply(self, done: ReloadPlan, target: Config) -> None:
        """Set the live keys in each component (the metrics listener has moved already). The
        log last: the line that says what was applied is written in the old format."""
        self.config = target
        if done.touches("http."):
            self.server.set_limits(target.http)
            self._capacity.limits = target.http
        if done.touches("broadcast."):
            self.broadcaster.set_limits(target.broadcast)
        if done.touches("pins.") and isinstance(self.pins, PinSet):
            self.pins.limits = target.pins
        if done.touches("journal.") and self.journal is not None:
            self.journal.set_limits(target.journal)
        if done.touches("log_level", "log_format"):
            logs.configure(target.log_level, target.log_format)
        # table.expire_interval and shutdown_grace are read from self.config where used.

    async def _move_metrics(self, address: str | None) -> bool:
        """The metrics listener on (or off, or moved to) ``address``; False (one line, the old
        listener kept) when it cannot listen there."""
        if self.metrics is not None:
            await self.metrics.close()
        if address is None:
            log.info("metrics endpoint closed (reload)")
            return True
        if self.metrics is None:  # on for the first time: the latency histograms stay empty
            from nvpair_wm.metrics import Metrics  # noqa: PLC0415

            self.metrics = Metrics(
                metrics_address(address), self.dispatcher.status, readiness=self.readiness
            )
        old = (self.metrics.host, self.metrics.requested_port)
        try:
            await self.metrics.start(metrics_address(address))
        except OSError as exc:
            log.error(
                "reload: metrics: cannot listen on %s: %s; the running node keeps %s",
                address,
                exc.strerror or exc,
                self.config.metrics or "it off",
                extra={"key": "metrics"},
            )
            if self.config.metrics is not None:
                with contextlib.suppress(OSError):
                    await self.metrics.start(old)
            return False
        return True

    def status_line(self) -> str:
        """What the node is doing, in one line (systemd's STATUS=, ``systemctl status``)."""
        if self._stop.is_set():
            return "stopping"
        if self._startup is Startup.STARTING:
            ipc = self.config.ipc
            return f"waiting for the broker on --ipc {ipc}" if ipc else "starting"
        peers = self._peers()
        connected = sum(p.connected for p in peers)
        line = f"relaying: {len(peers)} peers, {connected} connected"
        journal = self.journal
        if journal is not None and journal.failing_since is not None:
            line += f"; journal failing: {journal.last_error}"
        if reasons := self.readiness():
            line += f"; not ready: {reasons[0]}"
        return line

    async def _notify_forever(self) -> None:
        """WATCHDOG=1 every half watchdog interval (when systemd set one) and STATUS= when it
        changed: both from this loop, so that a loop that hangs stops the pings."""
        every = self.notifier.settings.ping_every
        interval = NOTIFY_STATUS_INTERVAL if every is None else min(every, NOTIFY_STATUS_INTERVAL)
        while True:
            self.notifier.watchdog()
            if self._startup is not Startup.STARTING and not self._stop.is_set():
                self._tell_systemd_readiness()
                self.notifier.status(self.status_line())
            await asyncio.sleep(interval)

    def _tell_systemd_readiness(self) -> None:
        """READY=1 the first time the node is ready as ``GET /readyz`` says it (``ready`` sent,
        listener up, identity and journal as configured): at once, or, say, once node.crt and
        node.key appear; STATUS= says meanwhile why not."""
        if self._startup is Startup.READY_TOLD:
            return
        if not self.readiness():
            self._startup = Startup.READY_TOLD
            self.notifier.ready(self.status_line())
        else:
            self.notifier.status(self.status_line())

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.table.expire_interval)
            self.table.expire(time.monotonic())
            self.originated.changed()
            self._check_capacity()  # trusted/ may have grown

    async def _journal_forever(self, journal: Journal) -> None:
        """The journal's group commit (fsync in a worker thread) and compaction (in a child
        process: its pure-Python fold in a thread would hold the GIL against this loop for a
        second; see journal/compactor.py). Cancelled mid-compaction (the node is stopping), the
        child is killed and reaped and its temporary file removed."""
        while True:
            limits = self.config.journal  # each round: a reload may change them
            fsync = limits.fsync_interval
            interval = fsync if fsync > 0 else limits.compaction_check_interval
            retry = journal.recovery_delay(time.monotonic())
            await asyncio.sleep(interval if retry is None else min(interval, retry))
            if not journal.healthy:
                self._journal_recover(journal)
                continue
            await self._journal_commit(journal)
            wall = time.time()
            live = len(self.table) + self.table.tombstones  # what a compaction could keep
            due = journal.compaction_due(wall, live)
            job = journal.begin_compaction(wall) if due else None
            if job is not None:
                t0 = time.perf_counter()
                try:
                    await compact_in_child(job, limits.compaction_timeout)
                    t1 = time.perf_counter()
                    # What was appended meanwhile (tens of MB on a busy node), copied and
                    # synced off the loop; the loop copies only what comes in during that.
                    await asyncio.to_thread(job.catch_up, journal.size)
                except asyncio.CancelledError:
                    journal.abandon_compaction(job)
                    raise
                t2 = time.perf_counter()
                journal.finish_compaction(job, sync=fsync <= 0)
                t3 = time.perf_counter()
                await self._journal_commit(journal)  # the installed file's tail and its rename
                log.debug(
                    "journal: compaction took %.3f s in the child, %.3f s catching up, "
                    "%.1f ms on the loop",
                    t1 - t0,
                    t2 - t1,
                    (t3 - t2) * 1e3,
                )

    def _journal_recover(self, journal: Journal) -> None:
        """A failing journal, when its backoff is due: the log rewritten whole from the table, on
        the loop, so that nothing published meanwhile can slip between the state it writes and
        the appends that follow it."""
        if journal.recovery_delay(time.monotonic()) != 0.0:
            return
        journal.recover(self.table, time.time(), time.monotonic())

    @staticmethod
    async def _journal_commit(journal: Journal) -> None:
        """The group commit, in worker threads: what was written since the last one, and, after
        a compaction, the directory of its rename and the close of the old log (which frees
        it: tens of ms for a busy node's)."""
        retired = journal.retired_descriptor()
        if retired is not None:
            await asyncio.to_thread(close_quietly, retired)
        fd = journal.sync_descriptor()
        if fd is not None and (failure := await asyncio.to_thread(fsync_and_close, fd)):
            journal.sync_failed(failure)
        directory = journal.directory_to_sync()
        if directory is not None and (
            failure := await asyncio.to_thread(fsync_directory, directory)
        ):
            journal.sync_failed(failure)
