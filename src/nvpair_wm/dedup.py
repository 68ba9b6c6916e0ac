"""The workload table: duplicates, stale events, tombstones, and bounded memory (sans-IO).

Key and order follow the spec: an event is identified by (runId, id, seq). ``id`` alone is not
unique (every engine facade counts from 1 and restarts at 1), ``runId`` separates runs, and
``seq`` orders one workload's events:

* same (runId, id) and same seq → **duplicate** (the same event over another path);
* a lower seq than the newest seen → **stale** (the broker's view never moves backwards);
* a (originatedFrom, id) that was removed → **removed**: a tombstone keeps a late event or a
  retry from bringing it back.

Bounds (all O(1) per event; ``expire`` is amortised O(1) per expired entry):

* terminal workloads (completed, failed, cancelled) expire ``terminal_ttl`` after their last
  event, live ones (queued, running) ``live_ttl`` after theirs, tombstones ``tombstone_ttl``
  after the removal;
* ``max_workloads`` and ``max_tombstones`` are hard caps: past them the least recently touched
  entry is evicted (terminal ones first) and counted in ``evicted``.

An expired or evicted workload is forgotten: a copy of one of its old events arriving later is
treated as new. The TTLs are therefore chosen well above any retry horizon of the broadcaster.
Time is passed in by the caller (monotonic seconds), so tests control it.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final, Literal

from nvpair_wm_schema.workload_info_schema import WorkloadInfo

from nvpair_wm.events import TERMINAL, Outbound

Outcome = Literal["applied", "duplicate", "stale", "removed"]
APPLIED: Final = "applied"


@dataclass(frozen=True, slots=True)
class TableLimits:
    terminal_ttl: float = 600.0
    live_ttl: float = 86_400.0
    tombstone_ttl: float = 600.0
    max_workloads: int = 200_000
    max_tombstones: int = 100_000


class _Entry:
    """One workload; ``replay`` (its newest event, encoded) is kept only for workloads this node
    originated, because only those are replayed to peers when they (re)connect."""

    __slots__ = ("origin", "replay", "seq", "touched")

    def __init__(self, origin: str, seq: int, touched: float, replay: Outbound | None) -> None:
        self.origin = origin
        self.seq = seq
        self.touched = touched
        self.replay = replay


class _Tomb:
    __slots__ = ("local", "run_id", "touched")

    def __init__(self, run_id: str | None, touched: float, local: bool) -> None:
        self.run_id = run_id
        self.touched = touched
        self.local = local


@dataclass(frozen=True, slots=True)
class Removal:
    """A removal as it should be reported onward (to peers or to the broker)."""

    origin: str
    workload_id: str
    run_id: str | None


_Key = tuple[str, str]


class WorkloadTable:
    def __init__(self, limits: TableLimits | None = None) -> None:
        self.limits = limits or TableLimits()
        # (runId, id) → entry, each ordered by last touch (oldest first).
        self._live: OrderedDict[_Key, _Entry] = OrderedDict()
        self._done: OrderedDict[_Key, _Entry] = OrderedDict()
        # (originatedFrom, id) → newest runId seen, so a removal without runId finds its run.
        self._runs: dict[_Key, str] = {}
        # (originatedFrom, id) → tombstone, ordered by removal time.
        self._tombs: OrderedDict[_Key, _Tomb] = OrderedDict()
        self.duplicates = 0
        self.stale = 0
        self.suppressed = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._live) + len(self._done)

    @property
    def tombstones(self) -> int:
        return len(self._tombs)

    def observe(self, info: WorkloadInfo, now: float, *, replay: Outbound | None = None) -> Outcome:
        """Record one event. ``replay`` is its encoded form, kept for peers that (re)connect
        (only for events this node originated)."""
        wid = info.id
        run = info.runId
        if self._tombs:
            tomb = self._tombs.get((info.originatedFrom, wid))
            if tomb is not None and (tomb.run_id is None or tomb.run_id == run):
                self.suppressed += 1
                return "removed"
        key = (run, wid)
        table = self._live
        entry = table.get(key)
        if entry is None:
            table = self._done
            entry = table.get(key)
        if entry is None:
            origin = sys.intern(info.originatedFrom)
            run = sys.intern(run)  # one copy per run, not one per workload
            key = (run, wid)
            entry = _Entry(origin, info.seq, now, replay)
            self._runs[(origin, wid)] = run
        else:
            # A redelivery changes nothing, not even the entry's age.
            if info.seq == entry.seq:
                self.duplicates += 1
                return "duplicate"
            if info.seq < entry.seq:
                self.stale += 1
                return "stale"
            del table[key]
            entry.seq = info.seq
            entry.touched = now
            if replay is not None:
                entry.replay = replay
        (self._done if info.state in TERMINAL else self._live)[key] = entry
        self._enforce_cap(key)
        return APPLIED

    def remove(
        self, origin: str, workload_id: str, run_id: str | None, now: float, *, local: bool = False
    ) -> tuple[Outcome, Removal]:
        """Remove a workload and leave a tombstone. A repeated removal is a duplicate."""
        okey = (origin, workload_id)
        tomb = self._tombs.get(okey)
        run = run_id if run_id is not None else self._runs.get(okey)
        if run is None and tomb is not None:
            # No run given and none seen since the tombstone: this removal is the one it records.
            run = tomb.run_id
        removal = Removal(origin, workload_id, run)
        # Already covered (the same run, or a tombstone for every run): a repeat, which must
        # neither be forwarded again nor narrow or widen the tombstone.
        if tomb is not None and (tomb.run_id is None or tomb.run_id == run):
            self.duplicates += 1
            return "duplicate", removal
        if run is not None:
            key = (run, workload_id)
            if self._live.pop(key, None) is None:
                self._done.pop(key, None)
            if self._runs.get(okey) == run:
                del self._runs[okey]
        self._tombs.pop(okey, None)
        self._tombs[okey] = _Tomb(run, now, local)
        while len(self._tombs) > self.limits.max_tombstones:
            self._tombs.popitem(last=False)
            self.evicted += 1
        return APPLIED, removal

    def expire(self, now: float) -> int:
        """Forget entries past their TTL; returns how many were dropped."""
        lim = self.limits
        dropped = 0
        for table, ttl in ((self._done, lim.terminal_ttl), (self._live, lim.live_ttl)):
            while table:
                key, entry = next(iter(table.items()))
                if entry.touched + ttl > now:
                    break
                table.popitem(last=False)
                self._unindex(key, entry)
                dropped += 1
        while self._tombs:
            tomb = next(iter(self._tombs.values()))
            if tomb.touched + lim.tombstone_ttl > now:
                break
            self._tombs.popitem(last=False)
            dropped += 1
        return dropped

    def originated(self) -> tuple[list[Outbound], list[Removal]]:
        """The newest event of every kept workload, and the local removals: what a peer that
        (re)connects is sent so that it converges without waiting for new events."""
        events = [e.replay for t in (self._live, self._done) for e in t.values() if e.replay]
        removals = [Removal(o, w, t.run_id) for (o, w), t in self._tombs.items() if t.local]
        return events, removals

    def _enforce_cap(self, just_recorded: _Key) -> None:
        """Evict least recently updated entries, terminal first, never the one just recorded
        (forgetting it at once would let its duplicates through)."""
        while len(self._live) + len(self._done) > self.limits.max_workloads:
            table = self._done
            if not table or (len(table) == 1 and just_recorded in table):
                table = self._live
            key, entry = table.popitem(last=False)
            self._unindex(key, entry)
            self.evicted += 1

    def _unindex(self, key: _Key, entry: _Entry) -> None:
        run, wid = key
        okey = (entry.origin, wid)
        if self._runs.get(okey) == run:
            del self._runs[okey]
