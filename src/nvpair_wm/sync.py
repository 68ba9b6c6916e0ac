"""Convergence: how every node reaches the cluster's current view (sans-IO).

Events are pushed by the node where the broker reported them, straight to every peer (no gossip
relay). Pushing alone loses state whenever a receiver misses events: it was down, restarted with
an empty table, was partitioned away, was (re)added to the cluster, or its sender gave up
retrying or dropped events from a full queue. The repair is one mechanism, the **snapshot**:

    A snapshot is the newest event of every workload this node originated, plus this node's
    local removals (``workloads:remove`` with ``runId``), taken from the workload table
    (``WorkloadTable.originated``) at the moment it starts to go out. It is sent as ordinary
    lifecycle notifications and removals: no new frame type, no new endpoint, and a receiver
    needs nothing but the deduplication it already does.

When a peer link sends a snapshot:

1. **On every new connection** to the peer, before anything else: the first connection after
   start, a reconnect after a failure, a peer that restarted (its old connection broke), a
   partition that healed (the send that failed dropped the connection), a peer whose retries
   were exhausted and that answered a later probe, a node that appeared in ``nodes:update`` or
   became pinned. A link keeps its connection open and reconnects as soon as it is lost (a peer
   that is down is probed with capped backoff), so a restarted peer gets its snapshot within
   seconds without waiting for a new event. Dead connections that no FIN reveals are found by
   TCP keepalive and, on HTTP/2, by PING.
2. **After retries were exhausted** on a connection that then recovers (e.g. a run of 503s).
3. **When the link becomes idle after it had to drop events** (queue full): the slow peer is not
   flooded while it is behind, and is repaired as soon as it has caught up.

Why this converges: every local event is recorded in the table before it is queued, so a
snapshot taken at time T carries, for each workload, an event at least as new as anything queued
before T. Queued events that the snapshot covers (same workload, same or lower ``seq``) are
discarded when it is taken, and what is queued after T follows it. Whatever a receiver missed,
the next snapshot supplies the newest state; whatever it already has, its table collapses as a
duplicate (same runId, id, seq) or as stale (lower seq), and a tombstone suppresses events of a
removed workload. So a snapshot never produces a second ``workloads:upsert`` at a broker that
already had the state, and the order of a snapshot relative to other batches does not matter.

What a snapshot costs: one frame per workload still in the origin's table (terminal workloads
leave it between ``terminal_ttl`` and twice that after their last event, 10 to 20 minutes by
default; see :mod:`nvpair_wm.dedup`) per new connection.
Connections are long-lived, but a server closes an idle one after its ``idle_timeout`` (60 s),
and the reconnect that follows sends a snapshot again: an idle cluster therefore repeats its
snapshots about once a minute per link, which doubles as periodic anti-entropy and costs nothing
while events flow (busy links do not go idle).

Limits of the design, on purpose: a node only replays what it originated (what a node learnt
from others it does not relay). What it originated survives a restart, even ``kill -9``: the
journal (:mod:`nvpair_wm.journal`, in the cluster directory) is reloaded into the table before
any peer connects, so the first snapshot on every link carries it, including removals whose
events never left the old process. Its broker stays the source of truth for anything newer
(see the contract: what a broker re-reports after ``ready``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Final

from nvpair_wm.dedup import Removal
from nvpair_wm.dispatch import Outbound, outbound_removal

__all__ = ["REMOVAL_SEQ", "Originated", "SharedOriginated", "Snapshot"]

#: ``Outbound.seq`` of a removal: it sorts after every event of its workload.
REMOVAL_SEQ: Final = float("inf")

Key = tuple[str, str, str]
Originated = Callable[[], tuple[list[Outbound], list[Removal]]]


def _removal_key(removal: Removal) -> Key:
    return (removal.origin, removal.workload_id, removal.run_id or "")


class Snapshot:
    """A snapshot being sent: the table's state at one moment, one frame at a time.

    The events are already encoded (the table keeps each workload's newest outbound frame), so
    the only cost up front is the two lists ``originated()`` returns; removals are encoded as
    they go out.
    Frames that went out in a batch that must be retried are handed back with :meth:`unpop`.
    """

    __slots__ = ("_events", "_next", "_removals", "_returned", "taken")

    def __init__(self, events: list[Outbound], removals: list[Removal]) -> None:
        self._events = events
        self._removals = removals
        self._next = 0
        self._returned: deque[Outbound] = deque()
        self.taken = len(events) + len(removals)

    @classmethod
    def of(cls, originated: Originated) -> Snapshot:
        events, removals = originated()
        return cls(events, removals)

    def __len__(self) -> int:
        """Frames still to send."""
        return len(self._returned) + len(self._events) + len(self._removals) - self._next

    def covered(self) -> Iterator[tuple[Key, float]]:
        """(workload key, seq) of every frame not yet sent: what queued events it supersedes."""
        n_events = len(self._events)
        for out in self._returned:
            yield out.key, out.seq
        for i in range(self._next, n_events + len(self._removals)):
            if i < n_events:
                event = self._events[i]
                yield event.key, event.seq
            else:
                yield _removal_key(self._removals[i - n_events]), REMOVAL_SEQ

    def pop(self) -> Outbound | None:
        """The next frame, or None when the snapshot has been sent."""
        if self._returned:
            return self._returned.popleft()
        n_events = len(self._events)
        i = self._next
        if i < n_events:
            self._next += 1
            return self._events[i]
        if i < n_events + len(self._removals):
            self._next += 1
            return outbound_removal(self._removals[i - n_events])
        return None

    def unpop(self, items: list[Outbound]) -> None:
        """Give back frames (in order) so that they are sent first."""
        self._returned.extendleft(reversed(items))


class SharedOriginated:
    """``originated()`` taken once and shared by every link that starts a snapshot until what
    this node originated may have changed (:meth:`changed`).

    ``WorkloadTable.originated`` walks the whole table, which holds every member's workloads:
    with 1,000 members reconnecting together (after a start or a healed partition) each link
    walking it would cost 1,000 walks of a table that itself grows with the member count. A
    :class:`Snapshot` only reads the lists, so links can share them. The node calls
    :meth:`changed` when it publishes local events or removals and on every expiry tick (which
    also bounds how long an entry evicted in between can linger in a shared snapshot).
    """

    __slots__ = ("_originated", "_taken")

    def __init__(self, originated: Originated) -> None:
        self._originated = originated
        self._taken: tuple[list[Outbound], list[Removal]] | None = None

    def __call__(self) -> tuple[list[Outbound], list[Removal]]:
        taken = self._taken
        if taken is None:
            taken = self._taken = self._originated()
        return taken

    def changed(self) -> None:
        self._taken = None
