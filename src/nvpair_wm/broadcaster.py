"""The outbound broadcaster: local events to every peer, over one connection per peer.

The IO shell around three sans-IO parts:

* :mod:`nvpair_wm.peers` decides who the peers are (``nodes:update`` records that are not us
  and are pinned now);
* :mod:`nvpair_wm.outbox` decides what each peer is sent and when (coalescing bounded queue,
  batching, retry with backoff), and holds the link's state (:mod:`nvpair_wm.peerlink`: its
  states, their transition table, and what a peer's answer means);
* :mod:`nvpair_wm.sync` decides how a peer is brought up to date (a snapshot on every new
  connection; its docstring is the convergence design);

and :mod:`nvpair_wm.io.client` speaks HTTP/2 or HTTP/1.1 over pin-checked mutual TLS.

One task per peer link keeps a connection open (connecting again as soon as it is lost, with
backoff while the peer does not answer) and sleeps otherwise. Requests start, one per free
slot while the outbox has a batch: at once when frames are published to an idle link (one read
from the broker, one request), at the end of the event-loop tick in which a response came back
if frames are waiting (a busy link accumulates meanwhile), and when the task wakes. Before each
connection attempt and each batch it re-checks that the peer is still a peer (pinned, not us)
and that we still have an identity (with the node's inotify-watched files one check for both,
and one for all the links a publish starts batches on; else read at most once per event-loop
tick); the set of links is reconciled on every
``nodes:update``, and every ``reconcile_interval`` for changes to ``trusted/`` and to our own
certificate. A node without an identity has no links and sends
nothing; once its files appear, links start at the next reconcile. A rotated identity closes
the connections made with the old one. A peer dropped and announced again (or unpinned and
pinned again) while a ``Retry-After`` it gave runs gets a new link that still waits for it.

Shutdown (:meth:`Broadcaster.close`): no more publishing, snapshots are skipped, each link
sends what is queued and stops; whatever is left after ``grace`` seconds is abandoned.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from nvpair_wm_schema.manager_status_schema import PeerStatus
from nvpair_wm_schema.node_record_schema import NodeRecord

from nvpair_wm.dispatch import Outbound
from nvpair_wm.errors import ClientError, PinRefused, ResponseTimeout
from nvpair_wm.io.client import Outcome, PeerConnection, Response, open_connection
from nvpair_wm.io.pin_watch import Both, PerTick, TickIdentity, TickPins
from nvpair_wm.outbox import Batch, BroadcastLimits, PeerOutbox
from nvpair_wm.peerlink import LinkState, Verdict
from nvpair_wm.peers import Peer, PeerDirectory, diff, is_peer_of
from nvpair_wm.pins import IdentitySource, NodeIdentity, PinSource
from nvpair_wm.sync import Originated
from nvpair_wm.tls_contexts import TLSPolicy
from nvpair_wm.versions import CONTRACT_HEADER, PeerVersions

__all__ = ["EVENTS_PATH", "BroadcastLimits", "Broadcaster", "DeliveryObserver"]

log = logging.getLogger(__name__)

EVENTS_PATH = "/v1/workloads/events"


class DeliveryObserver(Protocol):
    """Told when local events enter the peers' queues and when a peer accepts them (its 2xx):
    what ``--metrics`` times (``nvpair_wm.metrics.DeliveryClock``). Without one, the links
    skip both calls."""

    def enqueued(self, items: Iterable[Outbound], links: int) -> None:
        """``items`` were queued for each of ``links`` peers."""
        ...

    def delivered(self, items: Iterable[Outbound]) -> None:
        """One peer answered 2xx to a batch of ``items``."""
        ...


@dataclass(frozen=True, slots=True)
class _LinkContext:
    """What every link shares, built once by the :class:`Broadcaster`."""

    limits: BroadcastLimits
    originated: Originated  # what this node originated: the snapshots
    rng: random.Random  # backoff jitter
    fresh: PerTick  # our identity and the pins, one look for both
    identity: IdentitySource  # ``fresh``'s identity
    pins: PinSource  # ``fresh``'s pins
    directory: PeerDirectory  # who the peers are
    alpn: tuple[bytes, ...]  # offered to peers, preferred first
    tls_policy: TLSPolicy  # versions and suites, as the server's
    observer: DeliveryObserver | None
    reconcile_soon: Callable[[], None]  # a link that is no longer a peer asks for a reconcile
    versions: PeerVersions  # what each peer said of its versions (the endpoint's too)


class _Link:
    """One peer: its outbox, its connection, and what moves one into the other.

    A task keeps the connection (connecting, backing off, PINGs); requests need no task of
    their own: batches start from :meth:`_fill` (see :meth:`publish` and :meth:`_done`) and
    end in :meth:`_done`, called by the connection. The link's state is the outbox's
    (:class:`nvpair_wm.peerlink.LinkState`); what is kept here is IO: the connection, the
    task, its wake-up and timers, and what was last logged.
    """

    def __init__(self, peer: Peer, ctx: _LinkContext) -> None:
        self.peer = peer
        self._ctx = ctx
        self._limits = ctx.limits
        self.outbox = PeerOutbox(
            f"{peer.node_id} ({peer.address}:{peer.port})",
            ctx.limits,
            ctx.originated,
            rng=ctx.rng,
            fields={"peer": peer.node_id, "address": f"{peer.address}:{peer.port}"},
        )
        self.conn: PeerConnection | None = None
        self._conn_identity: str | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # set by start()
        self._keepalive_armed = False  # the task's sleep ends in time for the next PING
        self._pump_pending = False  # a _pump is scheduled for the end of this tick
        self._ping: asyncio.Task[None] | None = None
        self._next_connect_at = 0.0
        self._last_refusal: str | None = None  # logged as a warning once
        self._heard: PeerConnection | None = None  # the connection whose versions are known

    # -- control --------------------------------------------------------------------------------

    def start(self, delay: float = 0.0) -> None:
        """Run the link; its first connection in ``delay`` seconds."""
        self._loop = asyncio.get_running_loop()
        self._next_connect_at = self._loop.time() + delay
        self._task = self._loop.create_task(self._run(), name=f"peer-{self.peer.node_id}")
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A link task that died of a bug says so at once (``stop`` gathers it quietly)."""
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error(
                "peer %s: link task failed",
                self.outbox.name,
                exc_info=exc,
                extra=self.outbox.fields,
            )

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    def wake(self) -> None:
        self._wake.set()

    def publish(self, items: list[Outbound], both: Both | None = None) -> None:
        """Queue frames. An idle link sends them at once (the broker channel publishes what
        one read delivered in one call: one read, one request); a busy one lets them
        accumulate until a response comes back, which then starts the next (larger) batches:
        fewer requests per frame under load. ``both``: our identity and the pins as the
        broadcaster looked at them for this publish (else the link looks itself)."""
        self.outbox.push(items)
        if not self.outbox.in_flight and not self._pump_pending:
            self._pump(both)

    def pump_soon(self) -> None:
        """Start batches at the end of this event-loop tick, without waking the task."""
        if not self._pump_pending:
            self._pump_pending = True
            # The link's loop, kept: on Python 3.11 asyncio.get_running_loop() is a getpid
            # syscall, and this runs after every response.
            (self._loop or asyncio.get_running_loop()).call_soon(self._pump)

    def set_context(self, ctx: _LinkContext) -> None:
        """New limits (a reload): used from the next batch, check and backoff on."""
        self._ctx = ctx
        self._limits = ctx.limits
        self.outbox.set_limits(ctx.limits)

    def retarget(self, peer: Peer) -> None:
        """The record moved (address or port): reconnect there; the queue stays."""
        moved = peer.target != self.peer.target
        self.peer = peer
        self.outbox.name = f"{peer.node_id} ({peer.address}:{peer.port})"
        if moved and self.conn is not None:
            self.conn.close(f"peer moved to {peer.address}:{peer.port}")
        self.wake()

    async def stop(self) -> None:
        """Stop now: cancel everything, close the connection, forget the queue."""
        self.outbox.stop()
        tasks = [t for t in (self._task, self._ping) if t is not None]
        for task in tasks:
            task.cancel()
        if self.conn is not None:
            self.conn.close("peer link stopped")
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.conn is not None:
            await self.conn.aclose()

    def status(self) -> PeerStatus:
        conn = self.conn
        connected = conn is not None and not conn.closed
        p = self.peer
        seen = self._ctx.versions.get(p.fingerprint)
        return self.outbox.status(
            p.node_id,
            p.address,
            p.port,
            connected,
            conn.protocol if connected and conn else None,
            seen=seen,
        )

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        # self._limits is read where used, not bound here: a reload (set_context) replaces it.
        outbox = self.outbox
        ctx = self._ctx
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            ident = ctx.identity.current()
            if ident is None or not ctx.directory.is_peer(self.peer):
                # Not (or no longer) a peer: send nothing; the next reconcile drops this link.
                if self.conn is not None:
                    self.conn.close("no longer a peer")
                ctx.reconcile_soon()
                await self._sleep(self._limits.reconcile_interval)
                continue
            conn = self.conn
            if conn is not None and (
                conn.closed or not conn.usable or self._conn_identity != ident.fingerprint
            ):
                if outbox.in_flight:
                    await self._sleep(None)  # let the requests in progress finish first
                    continue
                self._forget(conn, ident.fingerprint)
                conn = None
            if conn is None:
                if outbox.draining and outbox.idle:
                    return
                now = loop.time()
                at = max(outbox.ready_at(), self._next_connect_at)
                if at > now:
                    await self._sleep(at - now)
                    continue
                self._next_connect_at = now + self._limits.min_reconnect_interval
                conn = await self._connect(ident)
                if conn is None:
                    continue
            self._fill(conn)
            if outbox.draining and outbox.idle:
                return
            await self._sleep(self._timers(conn, loop.time()))

    def _timers(self, conn: PeerConnection, now: float) -> float | None:
        """Start a keepalive PING if one is due; seconds until the next thing due without a
        wake-up (the end of a backoff, the next PING), None if nothing is."""
        lim = self._limits
        due: list[float] = []
        if self.outbox.has_work and self.outbox.ready_at() > now:
            due.append(self.outbox.ready_at() - now)
        # A PING in flight wakes the task when it ends; otherwise an idle h2 link's sleep ends
        # at the next PING. Busy, it is not armed, and the link's last response wakes the task.
        self._keepalive_armed = self._ping is not None
        if conn.protocol == "h2" and not conn.active and self._ping is None:
            idle_for = now - conn.last_activity
            if idle_for >= lim.keepalive_interval:
                self._ping = asyncio.get_running_loop().create_task(self._keepalive(conn))
            else:
                due.append(lim.keepalive_interval - idle_for)
            self._keepalive_armed = True
        return min(due) if due else None

    async def _sleep(self, seconds: float | None) -> None:
        """Until woken (new frames, a request done, the connection changed) or ``seconds``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    async def _connect(self, ident: NodeIdentity) -> PeerConnection | None:
        p = self.peer
        pins = self._ctx.pins
        lim = self._limits
        try:
            conn = await open_connection(
                p.address,
                p.port,
                identity=ident,
                expected_fingerprint=p.fingerprint,
                is_pinned=pins.is_pinned,
                on_change=self.wake,
                alpn=self._ctx.alpn,
                connect_timeout=lim.connect_timeout,
                handshake_timeout=lim.handshake_timeout,
                tcp_keepalive=lim.tcp_keepalive,
                max_response_bytes=lim.max_response_bytes,
                tls_policy=self._ctx.tls_policy,
            )
        except PinRefused as exc:
            # Warn once per distinct refusal; the probes that follow repeat it at debug level.
            level = logging.WARNING if str(exc) != self._last_refusal else logging.DEBUG
            log.log(
                level,
                "peer %s: refusing to send: %s",
                self.outbox.name,
                exc,
                extra=self.outbox.fields,
            )
            self._last_refusal = str(exc)
            self.outbox.failed(None, f"pin check failed: {exc}")
            return None
        except ClientError as exc:
            # Said at info level once a connection is lost, the repeats at debug level.
            lost = self.outbox.connect_failed(str(exc))
            # The run's count and the wait it chose, so that a reader of the log (and the tests)
            # can check the backoff without guessing how many failures went unlogged before.
            run = self.outbox.retry
            wait = max(run.retry_at, self._next_connect_at) - asyncio.get_running_loop().time()
            level = logging.INFO if lost else logging.DEBUG
            log.log(
                level,
                "peer %s: cannot connect (failure %d in a row; next attempt in %.3fs): %s",
                self.outbox.name,
                run.failures,
                max(wait, 0.0),
                exc,
                extra=self.outbox.fields,
            )
            return None
        self.conn = conn
        self._conn_identity = ident.fingerprint
        self._last_refusal = None
        # A reconnect after an idle close is routine (about once a minute on a quiet link).
        routine = self.outbox.connected()
        level = logging.DEBUG if routine else logging.INFO
        log.log(
            level,
            "peer %s: connected (%s); resynchronising",
            self.outbox.name,
            conn.protocol,
            extra=self.outbox.fields,
        )
        return conn

    def _forget(self, conn: PeerConnection, identity: str) -> None:
        if not conn.closed:
            why = "our identity changed" if self._conn_identity != identity else "unusable"
            conn.close(why)
        log.debug(
            "peer %s: connection ended: %s",
            self.outbox.name,
            conn.close_reason,
            extra=self.outbox.fields,
        )
        if self._ping is not None:
            self._ping.cancel()
            self._ping = None
        self.conn = None
        self.outbox.disconnected()

    async def _keepalive(self, conn: PeerConnection) -> None:
        try:
            await conn.ping(self._limits.keepalive_timeout)
        except ResponseTimeout as exc:  # the peer is silent: count it, back off, reconnect
            self.outbox.failed(None, f"keepalive: {exc}")
        except ClientError:
            pass  # the connection closed meanwhile: the link loop reconnects
        finally:
            self._ping = None
            self.wake()

    # -- requests -------------------------------------------------------------------------------

    def _pump(self, both: Both | None = None) -> None:
        """Start batches if the connection is up and the peer still a peer (pinned, not us,
        with our identity of this moment, or of ``both`` when given); otherwise let the task
        sort it out."""
        self._pump_pending = False
        conn = self.conn
        if self.outbox.state is LinkState.STOPPED or conn is None or not conn.usable:
            self.wake()
            return
        # Still a peer: our identity is the connection's, and the peer is still pinned and not
        # us (is_peer_of), on one look at both.
        ident, pinned = self._ctx.fresh.both() if both is None else both
        own = self._conn_identity
        if (
            ident is None
            or ident.fingerprint != own
            or not is_peer_of(self.peer.fingerprint, own, pinned)
        ):
            self.wake()
            return
        self._fill(conn, checked=True)
        if not self.outbox.in_flight and self.outbox.has_work:
            self.wake()  # backing off: the task keeps the timer

    def _fill(self, conn: PeerConnection, *, checked: bool = False) -> None:
        """Start a request per free slot while the outbox has a batch; one write for all.
        ``checked``: the caller has just seen that ``conn`` is usable."""
        outbox = self.outbox
        lim = self._limits
        # A body that fits the server's stream window is sent whole at once: no round trip for
        # WINDOW_UPDATE per request, no DATA written piecemeal as the window reopens.
        window = conn.body_window()
        started = False
        # A link with no request in progress may start one (capacity() is at least 1): the
        # connection is asked for its capacity only for a second one. The usual fill at a low
        # rate is one batch, and then an empty outbox: ``has_work`` ends the loop without
        # asking the connection and the outbox again.
        cap = 0
        while checked or conn.usable:
            checked = False
            if sending := outbox.in_flight:
                cap = cap or conn.capacity(lim.max_in_flight)
                if sending >= cap:
                    break
            batch = outbox.next_batch(window)
            if batch is None:
                break
            try:
                conn.request(
                    EVENTS_PATH,
                    batch.body,
                    response_timeout=lim.response_timeout,
                    done=functools.partial(self._done, batch),
                    caller_flushes=True,  # below, once for all
                )
            except ClientError as exc:  # the connection cannot take it after all
                outbox.failed(batch, str(exc))
                self.wake()
                break
            started = True
            if not outbox.has_work:
                break
        if started:
            conn.flush()

    def _done(self, batch: Batch, outcome: Outcome) -> None:
        """A request ended (called by the connection): account for it, start the next."""
        outbox = self.outbox
        if isinstance(outcome, Response):
            if self._heard is not self.conn:  # a peer's versions hold for a connection's life
                self._hear(outcome)
            verdict = outbox.answered(batch, outcome.status, outcome.headers, outcome.body).verdict
            if verdict is Verdict.ACCEPTED:
                observer = self._ctx.observer
                if observer is not None:  # --metrics: delivery latency
                    observer.delivered(batch.items)
            elif verdict is Verdict.REFUSED:
                self._hear(outcome)  # it may have been upgraded on this very connection's peer
        else:
            outbox.failed(batch, str(outcome))
        state = outbox.state
        if state is LinkState.STOPPED:
            return
        if state is LinkState.DRAINING or self.conn is None or not self.conn.usable:
            self.wake()
            return
        if outbox.has_work:
            # The next batch starts at the end of this tick, not at once: what the broker wrote
            # meanwhile (read in the same tick) goes with it, in one request instead of two.
            self.pump_soon()
        # Nothing to send (the usual case at a low rate): no pump, so no callback and no extra
        # turn of the loop per response, and no look at the pins: the next batch looks before
        # it starts, and a link that is no longer a peer is dropped by the next reconcile.
        if not outbox.in_flight and not self._keepalive_armed:
            self.wake()  # the link went idle while the task slept without a PING timer

    def _hear(self, response: Response) -> None:
        """What the peer says of its versions in its responses (for ``manager:status``)."""
        self._heard = self.conn
        contract, server = response.header(CONTRACT_HEADER), response.header(b"server")
        self._ctx.versions.heard(self.peer.fingerprint, contract, server)


class Broadcaster:
    """Pushes local events and removals to every peer (see the module docstring)."""

    def __init__(
        self,
        identity: IdentitySource,
        pins: PinSource,
        originated: Originated,
        limits: BroadcastLimits = BroadcastLimits(),  # noqa: B008 - frozen, shared on purpose
        *,
        rng: random.Random | None = None,
        observer: DeliveryObserver | None = None,
        tls_policy: TLSPolicy | None = None,
        versions: PeerVersions | None = None,
    ) -> None:
        self.limits = limits
        self.versions = versions or PeerVersions()  # shared with the endpoint: both hear peers
        tick = self._fresh = PerTick(identity, pins)
        self._identity: IdentitySource = TickIdentity(tick)
        self._pins: PinSource = TickPins(tick)
        self._directory = PeerDirectory(self._identity, self._pins)
        self._observer = observer
        self._link_context = _LinkContext(
            limits=limits,
            originated=originated,
            rng=rng or random.Random(),
            fresh=tick,
            identity=self._identity,
            pins=self._pins,
            directory=self._directory,
            alpn=tuple(p.encode("ascii") for p in limits.protocols),
            tls_policy=tls_policy or TLSPolicy(),
            observer=observer,
            reconcile_soon=self._reconcile_soon,
            versions=self.versions,
        )
        self._links: dict[str, _Link] = {}
        self._started = False
        self._closing = False
        self._ticker: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        self._no_identity_logged = False
        # fingerprint → the end of a Retry-After a removed link was given (monotonic): a link
        # made for that peer again waits for it. Pruned once past: each lives at most
        # 1.5 max_retry_after.
        self._waits: dict[str, float] = {}

    # -- the API node.py uses ---------------------------------------------------------------------

    def update_nodes(self, nodes: list[NodeRecord]) -> None:
        """A ``nodes:update`` snapshot: it replaces the last one; peers follow at once."""
        self._directory.update(nodes)
        self._reconcile()

    def publish(self, items: list[Outbound]) -> None:
        """Local events and removals, for every peer's queue."""
        if not items or self._closing:
            return
        links = self._links
        if self._observer is not None:  # --metrics: delivery latency
            self._observer.enqueued(items, len(links))
        if not links:
            return
        # One look at our identity and the pins for every link (not one per link): no turn of
        # the event loop comes between the links.
        both = self._fresh.both()
        for link in links.values():
            link.publish(items, both)

    def set_limits(self, limits: BroadcastLimits) -> None:
        """New bounds (a configuration reload), without dropping a connection or a queue:
        every link's next batch, check and backoff use them; ``protocols``, its next
        connection."""
        self.limits = limits
        ctx = self._link_context = dataclasses.replace(
            self._link_context,
            limits=limits,
            alpn=tuple(p.encode("ascii") for p in limits.protocols),
        )
        for link in self._links.values():
            link.set_context(ctx)

    def status(self) -> list[PeerStatus]:
        """One PeerStatus per current peer, ordered by nodeId."""
        links = sorted(self._links.values(), key=lambda lk: (lk.peer.node_id, lk.peer.fingerprint))
        return [link.status() for link in links]

    async def start(self) -> None:
        self._started = True
        self._reconcile()
        waiting = [link for link in self._links.values() if link.task is None]
        spread = self.limits.connect_spread_per_link * len(waiting)
        for link in waiting:
            link.start(link.outbox.retry.backoff.spread(spread))
        self._ticker = asyncio.get_running_loop().create_task(self._tick(), name="peers-tick")

    async def close(self, grace: float) -> None:
        """Stop publishing, send what is queued within ``grace`` seconds, then stop."""
        self._closing = True
        if self._ticker is not None:
            self._ticker.cancel()
        links = list(self._links.values())
        for link in links:
            link.outbox.drain()
            link.wake()
        tasks = [lk.task for lk in links if lk.task is not None and not lk.task.done()]
        if tasks and grace > 0:
            await asyncio.wait(tasks, timeout=grace)
        leftover = sum(lk.outbox.depth for lk in links)
        if leftover:
            log.warning(
                "shutting down with %d frames unsent to peers", leftover, extra={"frames": leftover}
            )
        await asyncio.gather(*(lk.stop() for lk in links), *self._stopping, return_exceptions=True)
        if self._ticker is not None:
            await asyncio.gather(self._ticker, return_exceptions=True)
        self._links.clear()

    # -- peers ------------------------------------------------------------------------------------

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.limits.reconcile_interval)
            self._reconcile()

    def _reconcile_soon(self) -> None:
        if self._started and not self._closing:
            asyncio.get_running_loop().call_soon(self._reconcile)

    def _reconcile(self) -> None:
        """Make the links match the peers as records, pins and identity are now."""
        if self._closing:
            return
        wanted = self._directory.evaluate()
        if not wanted and self._directory.records and self._directory.own_fingerprint() is None:
            if not self._no_identity_logged:
                log.warning(
                    "no cluster identity: sending nothing to the %d cluster nodes",
                    len(self._directory.records),
                )
                self._no_identity_logged = True
        else:
            self._no_identity_logged = False
        changes = diff({fp: lk.peer for fp, lk in self._links.items()}, wanted)
        if self._waits:
            now = time.monotonic()
            self._waits = {fp: until for fp, until in self._waits.items() if until > now}
        for peer in changes.removed:
            link = self._links.pop(peer.fingerprint)
            if link.outbox.retry.asked_until:
                self._waits[peer.fingerprint] = link.outbox.retry.asked_until
            log.info(
                "peer %s removed (not in nodes:update, unpinned, or we lost our identity); "
                "dropping %d queued frames",
                link.outbox.name,
                link.outbox.depth,
                extra={**link.outbox.fields, "frames": link.outbox.depth},
            )
            if self._started:
                task = asyncio.get_running_loop().create_task(link.stop())
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)
        for _, peer in changes.changed:
            self._links[peer.fingerprint].retarget(peer)
        # Links made together connect at random moments over a time that grows with their
        # number (handshakes and snapshots of a thousand members not in one tick).
        spread = self.limits.connect_spread_per_link * len(changes.added)
        for peer in changes.added:
            link = _Link(peer, self._link_context)
            link.outbox.retry.asked(self._waits.pop(peer.fingerprint, 0.0))
            self._links[peer.fingerprint] = link
            log.info("peer %s added", link.outbox.name, extra=link.outbox.fields)
            if self._started:
                link.start(link.outbox.retry.backoff.spread(spread))
