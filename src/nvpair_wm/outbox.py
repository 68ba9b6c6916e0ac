"""One peer's outbound queue: coalescing, bounds, batching, retry and backoff (sans-IO).

The IO shell (:mod:`nvpair_wm.broadcaster`) asks :meth:`PeerOutbox.next_batch` for work and
reports what happened to each batch; everything that decides *what* is sent, *when* it is
retried and *what* is given up lives here, with time and randomness injected so that tests
can drive it without sockets or sleeps.

Queue
    Ordered by first arrival and keyed by workload (``Outbound.key``): a newer event of a queued
    workload replaces the queued one in place (**coalescing**: the queue carries state, so the
    peer's view loses nothing, and a busy workload keeps its place in line). Bounded in frames
    and bytes, counting what is in flight: a frame that does not fit is dropped (counted, one
    warning per overflow episode) and the link resynchronises with a snapshot once it has caught
    up (see :mod:`nvpair_wm.sync`).

Batching
    A batch takes the snapshot being sent (if any), then the queue, up to ``max_batch_frames``
    and ``max_batch_bytes``, and (HTTP/2) up to the peer's stream window, so that a body goes
    out whole at once instead of waiting for WINDOW_UPDATEs. The shell asks for a batch
    whenever the connection has a free request slot, so an idle link sends each event at once,
    alone, and a busy one accumulates while its requests are in flight and sends larger
    batches: low latency when quiet, high throughput under load.

Retry
    Failures count per link, not per frame: ``retry_max_attempts`` consecutive failures, or a
    run of failures older than ``retry_max_age``, exhaust the retries: queued frames are dropped
    (counted) and the link resynchronises with a snapshot when the peer is back. In between, the
    n-th consecutive failure waits a random time in [d/2, d], d = min(cap, base·2^(n-1)) (equal
    jitter: spread out, and never much shorter than the schedule); ``Retry-After`` is honoured
    up to ``max_retry_after``, spread over [r, 1.5 r] so that the senders a busy peer answered
    503 together do not all come back in the same instant. An exhausted link keeps being
    probed at the capped delay.
    Success resets the run and our own backoff, not a wait the peer asked for: a request in
    flight beside the one answered 503 may be taken, and the ``Retry-After`` still holds (no
    success, refusal, reload or reconnect brings the next attempt before it). Only a delivered
    request counts as success: a peer that accepts connections but fails every request still
    backs off. Requests that were in flight together when the link failed are one failure, not
    one each: a failure counts only when its request was sent after the last counted one
    (``Batch.generation``). Otherwise the 16 requests of an HTTP/2 link that time out together,
    or all get 503 from a peer whose broker is busy, would use up ``retry_max_attempts`` at once
    and drop the queue within a millisecond.

What is retried: connection errors, timeouts, stream resets, 408, 429, 5xx (503 with
``Retry-After``), and 403, which says the peer does not pin us *yet* (a property of the link,
not of the frames, that a cluster-directory change ends). 413 halves this link's batch size and
retries. Other 4xx are final: the frames are dropped and counted, and the body is logged; a 400
names the bad frames of a batch (``data.index``), and the others were applied by the peer.

Link state
    The link's state (:class:`nvpair_wm.peerlink.LinkState`: connecting, sending, backing off,
    given up, refused for its contract version, draining, stopped) lives here and moves only
    through :data:`nvpair_wm.peerlink.TRANSITIONS`; what a peer's answer means is
    :func:`nvpair_wm.peerlink.judge`, applied by :meth:`PeerOutbox.answered`.

Version refusal
    A peer that answers 409 with another major contract version (:mod:`nvpair_wm.versions`)
    cannot read anything we send: the link stops at once as if its retries were exhausted (the
    queue is dropped and stays empty, so it is bounded), says so in one log line, and probes the
    peer every ``version_probe_interval`` seconds with a snapshot. The first probe the peer takes
    (it was upgraded, or we were) resynchronises it and ends the refusal.
"""

from __future__ import annotations

import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Literal

from nvpair_wm_schema.manager_status_schema import PeerStatus

from nvpair_wm.dispatch import Outbound
from nvpair_wm.peerlink import (
    HOLDING,
    TRANSITIONS,
    Answer,
    LinkEvent,
    LinkState,
    Verdict,
    body_text,
    judge,
)
from nvpair_wm.sync import Key, Originated, Snapshot
from nvpair_wm.versions import CONTRACT_VERSION, Seen

__all__ = [
    "Backoff",
    "Batch",
    "BroadcastLimits",
    "PeerOutbox",
    "RetryRun",
]

log = logging.getLogger(__name__)

_NO_SNAPSHOTS: Final = frozenset({LinkState.DRAINING, LinkState.STOPPED})

MIB: Final = 1024 * 1024
_ERROR_TEXT_MAX: Final = 300


@dataclass(frozen=True, slots=True)
class BroadcastLimits:
    """Every bound of the broadcaster (seconds, bytes, counts), in one place."""

    connect_timeout: float = 5.0  # TCP connect
    handshake_timeout: float = 5.0  # TLS handshake (pin check included)
    response_timeout: float = 10.0  # request sent → complete response; then the link reconnects
    max_batch_frames: int = 512
    max_batch_bytes: int = 512 * 1024  # well under the server's 1 MiB body limit; HTTP/2: and the
    # peer's stream window (a body that fits goes out at once, see PeerConnection.body_window)
    max_queue_frames: int = 10_000  # per peer, in flight included
    max_queue_bytes: int = 16 * MIB  # per peer, in flight included
    # Concurrent requests on one HTTP/2 connection (HTTP/1.1: 1). With the server's 64 KiB
    # stream windows, more batches in flight is what keeps a busy link full (bench.experiments).
    max_in_flight: int = 16
    retry_base: float = 0.1  # first backoff delay
    retry_max_delay: float = 5.0  # backoff cap; also the probe interval of an exhausted link
    retry_max_attempts: int = 8  # consecutive failures before the queue is given up
    retry_max_age: float = 30.0  # ... or this long since the run of failures began
    max_retry_after: float = 60.0  # a peer's Retry-After is honoured up to this
    version_probe_interval: float = 10.0  # a peer that refused our contract version: next try
    min_reconnect_interval: float = 0.5  # between two connection attempts to one peer
    # Links made together (the first nodes:update, a thousand members at once) make their
    # first connection at a random moment within this much per link, not in the same tick.
    connect_spread_per_link: float = 0.002  # first connects spread over this x links added
    keepalive_interval: float = 15.0  # HTTP/2 PING after this long without traffic
    keepalive_timeout: float = 10.0  # PING unanswered this long: the connection is dead
    tcp_keepalive: float = 15.0  # TCP keepalive idle time (then probes every 5 s, 3 probes)
    reconcile_interval: float = 1.0  # re-check pins and identity at least this often
    max_response_bytes: int = MIB  # a bigger response body ends the connection
    protocols: tuple[str, ...] = ("h2", "http/1.1")  # ALPN offered to peers, preferred first


#: PeerStatus.state: what a link does now (see :meth:`PeerOutbox.peer_state`).
PeerState = Literal["connected", "connecting", "retrying", "given-up", "refused"]


class Backoff:
    """Exponential backoff with equal jitter: failure n waits U(d/2, d),
    d = min(cap, base·2^(n-1)): spread out, yet never much sooner than the schedule."""

    def __init__(self, base: float, cap: float, rng: random.Random) -> None:
        self.base = base
        self.cap = cap
        self._rng = rng

    def ceiling(self, failures: int) -> float:
        """The upper bound d of the delay after ``failures`` consecutive failures (>= 1)."""
        exponent = min(max(failures, 1) - 1, 62)
        return min(self.cap, self.base * (2.0**exponent))

    def delay(self, failures: int) -> float:
        d = self.ceiling(failures)
        return self._rng.uniform(d / 2, d)

    def after(self, wait: float) -> float:
        """A Retry-After of ``wait`` s, spread over [wait, 1.5 wait]: never sooner than asked,
        and not every sender that got it (a busy peer's 503 to all) in the same instant."""
        return self._rng.uniform(wait, 1.5 * wait)

    def spread(self, seconds: float) -> float:
        """A moment within the next ``seconds``, uniformly."""
        return self._rng.uniform(0.0, seconds) if seconds > 0 else 0.0


class RetryRun:
    """The current run of consecutive failures of one link."""

    def __init__(self, limits: BroadcastLimits, rng: random.Random) -> None:
        self._limits = limits
        self.backoff = Backoff(limits.retry_base, limits.retry_max_delay, rng)
        self.failures = 0
        self.since: float | None = None
        self.retry_at = 0.0
        self.asked_until = 0.0  # the end of the peer's last Retry-After (0.0: none running)
        self.generation = 0  # counted failures so far, ever: batches remember it when sent

    def failure(
        self, now: float, retry_after: float | None = None, generation: int | None = None
    ) -> LinkEvent | None:
        """Count a failure and schedule the next attempt: EXHAUSTED when the run has used up
        the retry budget, else FAILED; None when it is not counted.

        ``generation``: that of the failed request's batch. A request sent before the last
        counted failure failed with it (they were in flight together): it moves the next
        attempt (a later Retry-After still wins) but is not counted again."""
        lim = self._limits
        if generation is not None and generation != self.generation:
            if retry_after is not None:
                self.asked(now + min(retry_after, lim.max_retry_after))
            return None
        self.generation += 1
        self.failures += 1
        if self.since is None:
            self.since = now
        delay = self.backoff.delay(self.failures)
        if retry_after is not None:
            self.asked(now + self.backoff.after(min(retry_after, lim.max_retry_after)))
        self.retry_at = max(now + delay, self.asked_until)
        if self.failures >= lim.retry_max_attempts or now - self.since >= lim.retry_max_age:
            return LinkEvent.EXHAUSTED
        return LinkEvent.FAILED

    def asked(self, until: float) -> None:
        """The peer asked us to wait until ``until``: the later of its waits holds."""
        self.asked_until = max(self.asked_until, until)
        self.retry_at = max(self.retry_at, self.asked_until)

    def refused(self, now: float, wait: float) -> None:
        """The peer cannot read us (another major version): counted, next try in ``wait``
        seconds (or once a Retry-After it gave runs out, if later)."""
        self.generation += 1
        self.failures += 1
        if self.since is None:
            self.since = now
        self.retry_at = max(now + wait, self.asked_until)

    def set_limits(self, limits: BroadcastLimits) -> None:
        """New bounds: the run so far is judged by them from its next failure (a wait already
        scheduled, and the peer's Retry-After, stand)."""
        self._limits = limits
        self.backoff.base = limits.retry_base
        self.backoff.cap = limits.retry_max_delay

    def success(self, clock: Callable[[], float]) -> None:
        """End the run and our backoff, not the peer's Retry-After (a request in flight beside
        the refused one may succeed first); ``clock`` is read only while one is recorded."""
        self.failures = 0
        self.since = None
        if self.asked_until and clock() >= self.asked_until:
            self.asked_until = 0.0
        self.retry_at = self.asked_until


@dataclass(slots=True, init=False)
class Batch:
    """Frames that go out in one request: ``snapshot`` ones first, then ``queued`` ones."""

    snapshot: list[Outbound]
    queued: list[Outbound]
    size: int  # bytes of the body: "[" + frames joined by "," + "]"
    queued_bytes: int  # bytes of the ``queued`` frames (counted in flight by the outbox)
    generation: int  # RetryRun.generation when the batch was sent

    def __init__(
        self,
        snapshot: list[Outbound] | None = None,
        queued: list[Outbound] | None = None,
        size: int = 2,
        queued_bytes: int = 0,
        generation: int = 0,
    ) -> None:
        # Written out, not generated: a generated __init__ with default factories is several
        # calls, and one Batch is made per request (per event and peer at a low rate).
        self.snapshot = [] if snapshot is None else snapshot
        self.queued = [] if queued is None else queued
        self.size = size
        self.queued_bytes = queued_bytes
        self.generation = generation

    def __len__(self) -> int:
        return len(self.snapshot) + len(self.queued)

    @property
    def items(self) -> list[Outbound]:
        return self.snapshot + self.queued

    @property
    def body(self) -> bytes:
        """A JSON-RPC batch: the frames' own bytes, joined."""
        snapshot, queued = self.snapshot, self.queued
        if not snapshot and len(queued) == 1:  # one event: the usual batch at a low rate
            return b"[" + queued[0].body + b"]"
        return b"[" + b",".join([o.body for o in snapshot + queued]) + b"]"

    def room(self, item: Outbound, max_frames: int, max_bytes: int) -> bool:
        """Whether ``item`` fits (the first frame always does: it is sent alone if it must)."""
        if not self:
            return True
        return len(self) < max_frames and self.size + 1 + len(item.body) <= max_bytes

    def add(self, item: Outbound, *, snapshot: bool) -> None:
        size = len(item.body)
        self.size += size + (1 if self else 0)
        if snapshot:
            self.snapshot.append(item)
        else:
            self.queued.append(item)
            self.queued_bytes += size


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _ERROR_TEXT_MAX else text[: _ERROR_TEXT_MAX - 3] + "..."


class PeerOutbox:
    """Queue, snapshot cursor, retry run, state and counters of one peer link."""

    def __init__(
        self,
        name: str,
        limits: BroadcastLimits,
        originated: Originated,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        fields: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        #: The structured fields of this peer's log records (``extra``): its nodeId and address.
        self.fields: dict[str, str] = fields or {"peer": name}
        self.limits = limits
        self._originated = originated
        self._clock = clock
        self._wall = wall
        self.retry = RetryRun(limits, rng or random.Random())
        self.state = LinkState.CONNECTING  # moved only by _move (peerlink.TRANSITIONS)
        self.connections = 0  # connections made, ever
        self.connect_failures = 0  # failed connection attempts since the last connection
        self._queue: OrderedDict[Key, Outbound] = OrderedDict()
        self._queued_bytes = 0
        self._inflight_frames = 0
        self._inflight_bytes = 0
        self._inflight_batches = 0
        self.snapshot: Snapshot | None = None
        self._sync_now = False  # take a snapshot before the next batch
        self._sync_when_idle = False  # take one once the queue is empty (after drops)
        self.batch_bytes = limits.max_batch_bytes  # halved on 413
        self._overflow_dropped = 0  # frames dropped in the current overflow episode
        # counters (PeerStatus)
        self.sent = 0
        self.retried = 0
        self.coalesced = 0
        self.dropped = 0
        self.snapshots = 0
        self.last_error: str | None = None
        self.last_error_at: int | None = None
        self.refused_by: str | None = None  # VERSION_REFUSED: the contract version it speaks
        self.gave_up = 0  # runs of failures that exhausted the retries (PeerStatus.givenUp)
        self.last_success_at: int | None = None  # the last 2xx, epoch ms (lastSuccessAt)

    # -- state -----------------------------------------------------------------------------------

    def _move(self, event: LinkEvent) -> LinkState:
        """The one place the link's state changes; returns the state it leaves."""
        before = self.state
        self.state = TRANSITIONS[before, event]
        return before

    @property
    def draining(self) -> bool:
        """Shutting down (or stopped): send the queue, skip snapshots."""
        return self.state in _NO_SNAPSHOTS

    @property
    def given_up(self) -> bool:
        """Retries exhausted, or the peer refuses our contract version: the queue takes
        nothing, the link probes, and a resync repairs the peer when it answers."""
        return self.state in HOLDING

    def drain(self) -> None:
        """Shutdown began: send what is queued, skip snapshots."""
        self._move(LinkEvent.DRAIN)

    def stop(self) -> None:
        self._move(LinkEvent.STOP)

    def disconnected(self) -> None:
        """The connection ended (with no request in flight)."""
        self._move(LinkEvent.DISCONNECTED)

    # -- queue ---------------------------------------------------------------------------------

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def depth(self) -> int:
        """Frames waiting: the rest of a snapshot being sent, and the queue."""
        return len(self._queue) + (len(self.snapshot) if self.snapshot is not None else 0)

    @property
    def in_flight(self) -> int:
        return self._inflight_batches

    @property
    def idle(self) -> bool:
        """Nothing to send and nothing in flight."""
        return not self.has_work and not self._inflight_batches

    @property
    def has_work(self) -> bool:
        """Frames to send, or a snapshot to take, now or once the backoff is over."""
        return bool(self._queue or self.snapshot) or self._sync_pending()

    def push(self, items: Iterable[Outbound]) -> None:
        """Queue local events/removals, coalescing by workload; drop what does not fit."""
        for item in items:
            self._push(item)

    def _push(self, item: Outbound) -> None:
        if self.state in HOLDING:
            # The peer is unreachable and the resync on its return carries this state.
            self._drop(1, "retries exhausted")
            return
        old = self._queue.get(item.key)
        if old is not None:
            if item.seq <= old.seq:
                return  # the queue already holds this state or a newer one
            self.coalesced += 1
            if self._fits(len(item.body) - len(old.body), 0):
                self._queue[item.key] = item  # in place: the workload keeps its turn
                self._queued_bytes += len(item.body) - len(old.body)
                return
            del self._queue[item.key]
            self._queued_bytes -= len(old.body)
        if not self._fits(len(item.body), 1):
            self._overflow()
            return
        if self._overflow_dropped:
            log.warning(
                "peer %s: queue has room again; %d frames were dropped while it was full",
                self.name,
                self._overflow_dropped,
                extra=self.fields,
            )
            self._overflow_dropped = 0
        self._queue[item.key] = item
        self._queued_bytes += len(item.body)

    def _fits(self, extra_bytes: int, extra_frames: int) -> bool:
        lim = self.limits
        frames = len(self._queue) + self._inflight_frames + extra_frames
        size = self._queued_bytes + self._inflight_bytes + extra_bytes
        return frames <= lim.max_queue_frames and size <= lim.max_queue_bytes

    def _overflow(self) -> None:
        if not self._overflow_dropped:
            log.warning(
                "peer %s: queue full (%d frames, %d bytes): dropping events until it drains; a "
                "snapshot repairs the peer's view once it has caught up",
                self.name,
                len(self._queue) + self._inflight_frames,
                self._queued_bytes + self._inflight_bytes,
                extra=self.fields,
            )
        self._overflow_dropped += 1
        self.dropped += 1
        self._sync_when_idle = True

    def _drop(self, frames: int, why: str) -> None:
        self.dropped += frames
        self._sync_when_idle = True
        log.debug(
            "peer %s: dropped %d frames (%s)",
            self.name,
            frames,
            why,
            extra={**self.fields, "frames": frames},
        )

    # -- snapshots -------------------------------------------------------------------------------

    def connected(self) -> bool:
        """A new connection: resynchronise first (the peer may have missed anything). True
        when it is routine: a reconnect whose previous attempt connected too (after an idle
        close, say)."""
        routine = self.connections > 0 and self.connect_failures == 0
        self._move(LinkEvent.CONNECTED)
        self.connections += 1
        self.connect_failures = 0
        self.snapshot = None
        self._sync_now = True
        return routine

    def connect_failed(self, reason: str) -> bool:
        """A connection attempt failed (a retryable failure). True when it is the first since
        a connection was made (a lost peer, said louder than the probes that follow)."""
        first = self.connections > 0 and self.connect_failures == 0
        self.connect_failures += 1
        self.failed(None, reason)
        return first

    def _sync_pending(self) -> bool:
        if self.state in _NO_SNAPSHOTS:
            return False
        return self._sync_now or (self._sync_when_idle and not self._queue and not self.snapshot)

    def _start_snapshot(self) -> None:
        self._sync_now = self._sync_when_idle = False
        snap = Snapshot.of(self._originated)
        self.snapshots += 1
        if self._queue:
            # Queued events the snapshot carries in the same or a newer version go with it.
            queue = self._queue
            for key, seq in snap.covered():
                old = queue.get(key)
                if old is not None and old.seq <= seq:
                    del queue[key]
                    self._queued_bytes -= len(old.body)
        self.snapshot = snap if len(snap) else None
        log.debug(
            "peer %s: snapshot of %d frames",
            self.name,
            snap.taken,
            extra={**self.fields, "frames": snap.taken},
        )

    # -- batches ---------------------------------------------------------------------------------

    def ready_at(self) -> float:
        """Monotonic time before which no request should be sent (backoff)."""
        return self.retry.retry_at

    def next_batch(self, max_bytes: int | None = None) -> Batch | None:
        """The next request's frames, or None (nothing to send, or backing off). ``max_bytes``:
        a tighter bound on the body than this link's own (the connection's body window)."""
        queue = self._queue
        sync = self._sync_pending()
        if not queue and self.snapshot is None and not sync:
            return None  # nothing at all
        retry_at = self.retry.retry_at
        # Not backing off (0.0 after a success, unless the peer's Retry-After runs): no clock read.
        if retry_at and self._clock() < retry_at:
            return None
        if sync:
            self._start_snapshot()
        batch = Batch()
        max_frames = self.limits.max_batch_frames
        max_bytes = self.batch_bytes if max_bytes is None else min(max_bytes, self.batch_bytes)
        snap = self.snapshot
        frames = 0
        if snap is not None and self.state not in _NO_SNAPSHOTS:
            while (item := snap.pop()) is not None:
                if not batch.room(item, max_frames, max_bytes):
                    snap.unpop([item])
                    break
                batch.add(item, snapshot=True)
            if not len(snap):
                self.snapshot = None
            frames = len(batch)
        queued_bytes = self._queued_bytes
        if queue and (
            frames + len(queue) <= max_frames
            and batch.size + queued_bytes + len(queue) - (0 if frames else 1) <= max_bytes
        ):
            # All of the queue fits (its bytes and one comma per frame): taken whole, in order,
            # without a popitem per frame (a busy link's usual batch).
            batch.queued.extend(queue.values())
            batch.size += queued_bytes + len(queue) - (0 if frames else 1)
            batch.queued_bytes = queued_bytes
            self._queued_bytes = 0
            queue.clear()
        elif queue:
            while queue:
                key, item = queue.popitem(last=False)
                if not batch.room(item, max_frames, max_bytes):
                    queue[key] = item  # back to the front: it opens the next batch
                    queue.move_to_end(key, last=False)
                    break
                batch.add(item, snapshot=False)
            self._queued_bytes -= batch.queued_bytes
        taken = batch.queued
        if not taken and not batch.snapshot:
            return None
        batch.generation = self.retry.generation
        self._inflight_batches += 1
        self._inflight_frames += len(taken)
        self._inflight_bytes += batch.queued_bytes
        return batch

    def _settle(self, batch: Batch) -> None:
        self._inflight_batches -= 1
        self._inflight_frames -= len(batch.queued)
        self._inflight_bytes -= batch.queued_bytes

    # -- outcomes --------------------------------------------------------------------------------

    def answered(
        self, batch: Batch, status: int, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> Answer:
        """The peer answered ``batch``: account for it as :func:`~nvpair_wm.peerlink.judge`
        says, and return that judgement (the shell tells its observers)."""
        answer = judge(status, headers, body, len(batch), self._wall())
        verdict = answer.verdict
        if verdict is Verdict.ACCEPTED:
            self.delivered(batch)
        elif verdict is Verdict.RETRY:
            log.debug("peer %s: %s (retrying)", self.name, answer.detail, extra=self.fields)
            self.failed(batch, answer.detail, answer.retry_after)
        elif verdict is Verdict.PARTLY:
            log.warning(
                "peer %s refused %d of %d frames: %s",
                self.name,
                len(answer.bad),
                len(batch),
                body_text(body),
                extra=self.fields,
            )
            self.delivered(batch, answer.bad, answer.detail)
        elif verdict is Verdict.SPLIT:
            self.too_large(batch)
        elif verdict is Verdict.REFUSED:
            assert answer.theirs is not None
            self.incompatible(batch, answer.theirs, CONTRACT_VERSION)
        else:
            log.warning(
                "peer %s refused a batch of %d frames with HTTP %d: %s",
                self.name,
                len(batch),
                status,
                answer.detail,
                extra={**self.fields, "frames": len(batch)},
            )
            self.rejected(batch, status, answer.detail)
        return answer

    def delivered(self, batch: Batch, bad: frozenset[int] = frozenset(), detail: str = "") -> None:
        """The peer took the batch (2xx), or applied all of it but the frames at ``bad`` (a 400
        names them: they are refused for good and counted as dropped)."""
        self._settle(batch)
        self.sent += len(batch.snapshot) + len(batch.queued) - len(bad)
        self.last_success_at = int(self._wall() * 1000)
        if bad:
            self.dropped += len(bad)
            self._error(detail or f"{len(bad)} frames refused")
        self._answered()

    def failed(self, batch: Batch | None, reason: str, retry_after: float | None = None) -> None:
        """A retryable failure (``batch`` None: no request was made, e.g. connect failed)."""
        self._error(reason)
        if batch is not None:
            self._settle(batch)
            self._requeue(batch)
        generation = batch.generation if batch is not None else None
        event = self.retry.failure(self._clock(), retry_after, generation)
        if event is None:
            return  # failed with a counted one: the state has moved already
        if self._move(event) not in HOLDING and event is LinkEvent.EXHAUSTED:
            self._exhausted()

    def rejected(self, batch: Batch, status: int, detail: str) -> None:
        """A final answer (4xx other than those retried): the frames are given up."""
        self._settle(batch)
        self._error(f"HTTP {status}: {detail}")
        self.dropped += len(batch)
        # The peer is reachable and answering: this is not a failure of the link.
        self._answered()

    def _answered(self) -> None:
        self.retry.success(self._clock)
        if self._move(LinkEvent.ANSWERED) is LinkState.VERSION_REFUSED:
            self._accepted_again()

    def incompatible(self, batch: Batch, theirs: str, ours: str) -> None:
        """The peer refused our contract version (it speaks ``theirs``, another major): stop
        sending, drop the queue, and probe again in ``version_probe_interval`` seconds."""
        self._settle(batch)
        self._error(f"HTTP 409: the peer speaks contract {theirs}, we speak {ours}")
        wait = self.limits.version_probe_interval
        if self.refused_by != theirs:
            log.warning(
                "peer %s speaks contract %s, we speak %s: sending it nothing (probing every "
                "%gs; it is resynchronised once it takes our version)",
                self.name,
                theirs,
                ours,
                wait,
            )
        self.refused_by = theirs
        self.dropped += len(batch.queued) + len(self._queue)
        self._queue.clear()
        self._queued_bytes = 0
        self.snapshot = None
        self._sync_now = True
        self.retry.refused(self._clock(), wait)
        self._move(LinkEvent.REFUSED)

    def _accepted_again(self) -> None:
        log.info(
            "peer %s takes our contract version again (it spoke %s); resynchronising",
            self.name,
            self.refused_by,
        )
        self.refused_by = None

    def too_large(self, batch: Batch) -> bool:
        """413: halve the batch size and retry; False if a single frame is too large."""
        if len(batch) <= 1:
            self.rejected(batch, 413, "a single frame exceeds the peer's body limit")
            return False
        self._settle(batch)
        self.batch_bytes = max(1024, min(self.batch_bytes, batch.size) // 2)
        self._error(f"HTTP 413: batch of {batch.size} bytes too large; now {self.batch_bytes}")
        self._requeue(batch)
        return True

    def _requeue(self, batch: Batch) -> None:
        """Put a failed batch back at the front; newer queued versions win."""
        self.retried += len(batch)
        if batch.snapshot:
            if self.snapshot is None:
                self.snapshot = Snapshot([], [])
            self.snapshot.unpop(batch.snapshot)
        back: list[Outbound] = []
        for item in batch.queued:
            newer = self._queue.get(item.key)
            if newer is not None and newer.seq >= item.seq:
                self.coalesced += 1
                continue
            if newer is not None:
                del self._queue[item.key]
                self._queued_bytes -= len(newer.body)
            back.append(item)
        for item in reversed(back):
            self._queue[item.key] = item
            self._queue.move_to_end(item.key, last=False)
            self._queued_bytes += len(item.body)

    def _exhausted(self) -> None:
        self.gave_up += 1
        queued = len(self._queue)
        self._queue.clear()
        self._queued_bytes = 0
        self.snapshot = None
        self._sync_now = True
        self.dropped += queued  # a snapshot's frames are not lost: the table keeps them
        run = self.retry
        log.warning(
            "peer %s: giving up after %d failures over %.1fs (%s); dropped %d queued frames; "
            "probing every <=%gs and resynchronising when it answers",
            self.name,
            run.failures,
            self._clock() - (run.since or self._clock()),
            self.last_error,
            queued,
            self.limits.retry_max_delay,
            extra={**self.fields, "failures": run.failures, "frames": queued},
        )

    def _error(self, reason: str) -> None:
        self.last_error = _short(reason)
        self.last_error_at = int(self._wall() * 1000)

    def set_limits(self, limits: BroadcastLimits) -> None:
        """New bounds (a configuration reload): the next check, batch and backoff use them."""
        if limits.max_batch_bytes != self.limits.max_batch_bytes:
            self.batch_bytes = limits.max_batch_bytes  # what a 413 halved starts over
        self.limits = limits
        self.retry.set_limits(limits)

    # -- status ----------------------------------------------------------------------------------

    def peer_state(self, connected: bool) -> PeerState:
        """What the link does now, in the contract's words (PeerStatus.state)."""
        if self.state is LinkState.VERSION_REFUSED:
            return "refused"
        if connected:
            return "connected"
        if self.state is LinkState.GIVEN_UP:
            return "given-up"
        return "retrying" if self.retry.failures else "connecting"

    def status(
        self,
        node_id: str,
        address: str,
        port: int,
        connected: bool,
        protocol: str | None,
        *,
        seen: Seen | None = None,
    ) -> PeerStatus:
        return PeerStatus(
            nodeId=node_id,
            address=address,
            port=port,
            connected=connected,
            protocol="h2" if protocol == "h2" else "http/1.1" if protocol == "http/1.1" else None,
            queueDepth=self.depth,
            sent=self.sent,
            retried=self.retried,
            coalesced=self.coalesced,
            dropped=self.dropped,
            lastError=self.last_error,
            lastErrorAt=self.last_error_at,
            contractVersion=seen.contract if seen is not None else None,
            softwareVersion=seen.software if seen is not None else None,
            state=self.peer_state(connected),
            lastSuccessAt=self.last_success_at,
            givenUp=self.gave_up,
        )
