"""The workload table: duplicates, stale events, tombstones, and bounded memory (sans-IO).

Key and order follow the spec: an event is identified by (runId, id, seq). ``id`` alone is not
unique (every engine facade counts from 1 and restarts at 1), ``runId`` separates runs, and
``seq`` orders one workload's events:

* same (runId, id) and same seq → **duplicate** (the same event over another path);
* a lower seq than the newest seen → **stale** (the broker's view never moves backwards);
* a (originatedFrom, id) that was removed → **removed**: a tombstone keeps a late event or a
  retry from bringing it back. A removal with runId covers that run; without it, the newest run
  of (originatedFrom, id) the table holds (the one whose first event came last), or the one
  another origin's removal took from it (the key (runId, id) is shared by origins), or, if there
  is none, every run of (originatedFrom, id) until the tombstone expires. One tombstone per
  (originatedFrom, id) remembers every run of it that was removed (up to ``MAX_TOMB_RUNS``), so
  removing run 2's workload "7" does not let a late event of run 1's "7" back in.

Expiry is generational. Each class (live workloads: queued, running; terminal ones: completed,
failed, cancelled; tombstones) has two plain dicts, *current* and *previous*, and the time of
the newest event in each. An applied event (or a removal) puts its entry in the current dict of
its class; duplicates, stale and suppressed events move nothing. ``expire(now)`` drops the
previous dict whole once its newest entry is the class's TTL old, drops the current one too if
even its newest entry is that old (an idle table empties promptly), and when the previous dict is
empty, seals the current one into it. Bounds, with E the interval between ``expire`` calls (the
daemon calls it every second):

* an entry is forgotten **no sooner than its TTL and no later than 2 TTL + 2 E** after its
  last applied event (for tombstones: after the removal): terminal workloads between
  ``terminal_ttl`` and twice that (defaults: 10 to 20 minutes), live ones between ``live_ttl``
  and twice that (24 to 48 hours), tombstones between ``tombstone_ttl`` and twice that (10 to
  20 minutes). The TTLs are therefore guarantees: a copy of an event is recognised for at least
  the TTL after the workload's last event, whatever the traffic;
* so at a steady rate the table holds between one and two TTLs' worth of workloads: size
  ``max_workloads`` for two;
* ``max_workloads`` and ``max_tombstones`` are hard caps. Past them, entries are evicted and
  counted in ``evicted``: terminal workloads first, then live ones; within a class the previous
  generation first, and when it is empty the current one is sealed into it first, so that the
  entries recorded after that moment go last. Within a generation the victim is arbitrary (it
  is whatever ``dict.popitem`` returns, the most recently inserted). The entry just recorded is
  never evicted (forgetting it at once would let its duplicates through).

An expired or evicted workload is forgotten: a copy of one of its old events arriving later is
treated as new. The TTLs are therefore chosen well above any retry horizon of the broadcaster.

Cost: O(1) per event (a few dict operations; no per-entry object but the key tuple);
``expire`` is amortised O(1) per expired entry, but it works in bursts: a class's dropped
generation is released in one call, at most once per TTL of that class, at about 0.3 µs per
entry (its index entries cleaned, its keys freed): some 30 ms per 100,000 workloads.
Time is passed in by the caller (monotonic seconds: ``now`` must not decrease), so tests
control it.

Memory per workload: the (runId, id) key tuple (runId interned, so one string per run), its
dict slot, and the newest seq (a small int, shared) for remote workloads, or the newest encoded
event (an :class:`Outbound`, which ``originated`` replays) for local ones. A removal without
runId needs the newest run of (originatedFrom, id): an index keyed by the id string alone (the
same string object as in the key) has an entry for every id the table holds under any run. When
one workload holds the id, the entry is its shared (originatedFrom, runId) pair (it is the
newest of its origin); when several do (ids restart at 1 in every run), an :class:`_Ids` counts
them and names the newest run still held of each origin. The index covers exactly the workloads
held, and is cleaned as they go. It also spares a new workload's key the lookups in the older
generations: an id the index does not hold is in none of them. When a removal of another origin
takes an origin's newest run, ``_taken`` remembers it under (originatedFrom, id) until that
origin's next new workload of the id, with the tombstones' TTL and within their cap.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Generic, NamedTuple, Protocol, TypeAlias, TypeVar

from nvpair_wm.events import TERMINAL, Outbound
from nvpair_wm.outcomes import Outcome

# What an event or a removal came to (nvpair_wm.outcomes), bound here: one global load each.
APPLIED: Final = Outcome.APPLIED
DUPLICATE: Final = Outcome.DUPLICATE
STALE: Final = Outcome.STALE
REMOVED: Final = Outcome.REMOVED


@dataclass(frozen=True, slots=True)
class TableLimits:
    """TTLs in seconds: an entry is kept at least its TTL after its last event and forgotten at
    most twice its TTL (plus two ``expire`` intervals) after it. Caps are hard limits."""

    terminal_ttl: float = 600.0  # completed, failed and cancelled workloads
    live_ttl: float = 86_400.0  # queued and running workloads
    tombstone_ttl: float = 600.0  # removals (a late event must not bring a workload back)
    max_workloads: int = 200_000  # terminal ones are evicted first, then live ones
    max_tombstones: int = 100_000
    expire_interval: float = 1.0  # how often the node runs expire() (the daemon's timer)


class Observed(Protocol):
    """What :meth:`WorkloadTable.observe` reads of an event: a ``WorkloadInfo``, or a journal
    record's key and seq at a restart."""

    @property
    def originatedFrom(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def runId(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def seq(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Removal:
    """A removal as it should be reported onward (to peers or to the broker)."""

    origin: str
    workload_id: str
    run_id: str | None


_Key = tuple[str, str]  # (runId, id) for workloads, (originatedFrom, id) for tombstones
_Pair = tuple[str, str]  # (originatedFrom, runId): one object per run, shared by its workloads
# A workload: its newest seq (remote workloads), its newest outbound frame (workloads this node
# originated: what ``originated`` replays), or both when a peer reported a newer seq of ours.
_Value = int | Outbound | tuple[int, Outbound]
# A tombstone: the runs of (originatedFrom, id) it covers, oldest first, "" for every run (a
# runId is never empty): a str for one run, a list for several (ids restart at 1 in every run, so
# one id is removed in many runs), a tuple if local (what ``originated`` replays).
_Tomb = str | list[str] | tuple[str, ...]
MAX_TOMB_RUNS: Final = (
    64  # runs one tombstone remembers; past it the earliest-removed are forgotten
)


def _tomb_runs(tomb: _Tomb) -> Sequence[str]:
    return (tomb,) if isinstance(tomb, str) else tomb


V = TypeVar("V")


class _Ids:
    """The index entry of an id that several workloads hold (several runs, or origins):
    ``held`` counts them; ``newest`` has, per origin, the (originatedFrom, runId) of its newest
    run while that workload is held (one whose newer run went is not replaced by an older one)."""

    __slots__ = ("held", "newest")

    def __init__(self, held: int, newest: list[_Pair]) -> None:
        self.held = held
        self.newest = newest


_Index = _Pair | _Ids


class _Generations(Generic[V]):
    """One class of entries: the current and the previous generation, and the time of the
    newest event in each (``now`` of the last insertion; an upper bound once entries left)."""

    __slots__ = ("cur", "cur_last", "prev", "prev_last", "ttl")

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.cur: dict[_Key, V] = {}
        self.prev: dict[_Key, V] = {}
        self.cur_last = self.prev_last = float("-inf")

    def __len__(self) -> int:
        return len(self.cur) + len(self.prev)

    def seal(self) -> None:
        self.prev, self.cur = self.cur, {}
        self.prev_last = self.cur_last

    def expire(self, now: float) -> list[dict[_Key, V]]:
        """Detach what is due (the caller counts and releases it); seal when possible."""
        due = []
        if self.prev and now >= self.prev_last + self.ttl:
            due.append(self.prev)
            self.prev = {}
        if self.cur and not self.prev and now >= self.cur_last + self.ttl:
            due.append(self.cur)
            self.cur = {}
        if self.cur and not self.prev:
            self.seal()
        return due

    def pop_oldest(self, keep: _Key) -> tuple[_Key, V] | None:
        """Take an entry of the previous generation, sealing the current one first if the
        previous one is empty; None when there is nothing but ``keep`` in this class. ``keep``
        (the entry just recorded) is in the current generation, and stays there."""
        if not self.prev:
            cur = self.cur
            if keep in cur:
                if len(cur) == 1:
                    return None
                value = cur.pop(keep)
                self.seal()
                self.cur[keep] = value
            elif cur:
                self.seal()
            else:
                return None
        return self.prev.popitem()


class WorkloadTable:
    def __init__(self, limits: TableLimits | None = None) -> None:
        self.limits = lim = limits or TableLimits()
        self._max_workloads = lim.max_workloads
        self._live: _Generations[_Value] = _Generations(lim.live_ttl)
        self._done: _Generations[_Value] = _Generations(lim.terminal_ttl)
        self._tombs: _Generations[_Tomb] = _Generations(lim.tombstone_ttl)
        # (originatedFrom, id) → its newest run, which another origin's removal took (module
        # docstring); expires as tombstones do and counts against max_tombstones.
        self._taken: _Generations[str] = _Generations(lim.tombstone_ttl)
        # id → the workloads holding it: the one's shared (originatedFrom, runId) pair, or, for
        # several, their count and the newest run held of each origin (module docstring).
        self._runs: dict[str, _Index] = {}
        # runId → its pair (a cache, cleared whenever a generation is dropped).
        self._pairs: dict[str, _Pair] = {}
        # (runId, id) of peers' workloads whose newest seq a restart reloaded from what the node
        # had forwarded to its broker (:meth:`reloader`): a peer's event of exactly that seq
        # is applied once more (a broker that restarted too gets its view back from the peers'
        # snapshots; one that did not is told a duplicate, which moves nothing), a lower one is
        # stale. Emptied as they are seen again, removed, expired or evicted.
        self._resend: set[_Key] = set()
        self.duplicates = 0
        self.stale = 0
        self.suppressed = 0
        self.evicted = 0

    def __len__(self) -> int:
        live, done = self._live, self._done
        return len(live.cur) + len(live.prev) + len(done.cur) + len(done.prev)

    @property
    def tombstones(self) -> int:
        return len(self._tombs)

    def observe(self, info: Observed, now: float, *, replay: Outbound | None = None) -> Outcome:
        """Record one event. ``replay`` is its encoded form, kept for peers that (re)connect
        (only for events this node originated)."""
        wid = info.id
        run = info.runId
        tombs = self._tombs
        if tombs.cur or tombs.prev:
            okey = (info.originatedFrom, wid)
            tomb = tombs.cur.get(okey)
            if tomb is None:
                tomb = tombs.prev.get(okey)
            if tomb is not None:
                covered = _tomb_runs(tomb)
                if "" in covered or run in covered:
                    self.suppressed += 1
                    return REMOVED
        key = (run, wid)
        live, done = self._live, self._done
        gen = live.cur
        value = gen.get(key)
        entry: _Index | None = None
        if value is None:
            gen = done.cur
            value = gen.get(key)
            # An id the index does not hold is in no generation: a new workload's key is not
            # looked up in the previous ones (large at the cap, and out of the caches).
            if value is None and (entry := self._runs.get(wid)) is not None:
                gen = live.prev
                value = gen.get(key)
                if value is None:
                    gen = done.prev
                    value = gen.get(key)
        target = done if info.state in TERMINAL else live
        if value is None:
            self._insert(info, target, now, replay, entry)
            return APPLIED
        seq = info.seq
        if isinstance(value, int):
            newest = value
        elif isinstance(value, tuple):
            newest = value[0]
        else:
            newest = int(value.seq)
        # A redelivery changes nothing, not even the entry's generation.
        if seq == newest:
            if self._resend and replay is None and key in self._resend:
                self._resend.discard(key)  # the first copy since the restart: forwarded again
                return APPLIED
            self.duplicates += 1
            return DUPLICATE
        if seq < newest:
            self.stale += 1
            return STALE
        if self._resend:  # newer than what was reloaded: what it marks is told already
            self._resend.discard(key)
        new: _Value
        if replay is not None:
            new = replay
        elif isinstance(value, int):
            new = seq
        else:  # one of ours, and a peer reported a newer seq: keep our frame for replay
            new = (seq, value if isinstance(value, Outbound) else value[1])
        cur = target.cur
        if gen is cur and replay is None:
            cur[key] = new  # in place: the stored key (and its strings) stays
        else:
            del gen[key]
            # The stored key goes: the new one takes the interned run, and the index is
            # re-keyed on this event's id string, so that only one copy of it stays alive.
            cur[(sys.intern(run), wid)] = new
            runs = self._runs
            entry = runs.pop(wid, None)
            if entry is not None:
                runs[wid] = entry
        target.cur_last = now
        return APPLIED

    def _insert(
        self,
        info: Observed,
        target: _Generations[_Value],
        now: float,
        replay: Outbound | None,
        entry: _Index | None,
    ) -> None:
        """Record a new workload; ``entry`` is its id's index entry (None: no workload holds
        the id)."""
        wid = info.id
        run = info.runId
        origin = info.originatedFrom
        pair = self._pairs.get(run)
        if pair is None or pair[0] != origin:
            pair = (sys.intern(origin), sys.intern(run))  # one copy per run, not per workload
            self._pairs[pair[1]] = pair
        key = (pair[1], wid)
        target.cur[key] = replay if replay is not None else info.seq
        target.cur_last = now
        if entry is None:
            self._runs[wid] = pair
        else:
            self._index_another(wid, pair, entry)
        taken = self._taken
        if taken.cur or taken.prev:  # it is the newest run of (origin, id) now
            taken.cur.pop((origin, wid), None)
            taken.prev.pop((origin, wid), None)
        over = len(self) - self._max_workloads
        if over > 0:
            self._evict(over, key)

    def _index_another(self, wid: str, pair: _Pair, entry: _Index) -> None:
        """Index a new workload of an id that others already hold (``entry``, its index
        entry), the newest run of its origin; ``pair`` its (originatedFrom, runId)."""
        runs = self._runs
        if isinstance(entry, tuple):
            # A second workload holds the id: re-keyed on this event's id string, as in observe.
            del runs[wid]
            runs[wid] = _Ids(2, [pair] if entry[0] == pair[0] else [entry, pair])
        else:
            entry.held += 1
            newest = entry.newest
            for i, other in enumerate(newest):
                if other[0] == pair[0]:  # a newer run of this (origin, id)
                    newest[i] = pair
                    break
            else:
                newest.append(pair)

    def remove(
        self, origin: str, workload_id: str, run_id: str | None, now: float, *, local: bool = False
    ) -> tuple[Outcome, Removal]:
        """Remove a workload and leave a tombstone. A repeated removal is a duplicate."""
        okey = (origin, workload_id)
        tombs = self._tombs
        tomb = tombs.cur.get(okey)
        if tomb is None:
            tomb = tombs.prev.get(okey)
        covered = None if tomb is None else _tomb_runs(tomb)
        run = run_id if run_id is not None else self._newest(origin, workload_id)
        if run is None and covered is not None:
            # No run given and none held or taken since the tombstone: this removal is the newest
            # one it records.
            run = covered[-1] or None
        removal = Removal(origin, workload_id, run)
        # Already covered (a run it records, or a tombstone for every run): a repeat, which must
        # neither be forwarded again nor narrow or widen the tombstone.
        if covered is not None and ("" in covered or run in covered):
            self.duplicates += 1
            return DUPLICATE, removal
        taken = self._taken
        kept = okey  # what this removal records is not evicted to make room for it
        if run is not None:
            key = (run, workload_id)
            for gen in (self._live.cur, self._live.prev, self._done.cur, self._done.prev):
                if gen.pop(key, None) is not None:
                    owner = self._unindex(key)
                    if owner is not None and owner != origin:
                        # Its owner's newest run, which no tombstone of its owner names.
                        kept = (owner, workload_id)
                        taken.prev.pop(kept, None)
                        taken.cur[kept] = run
                        taken.cur_last = now
                    self._resend.discard(key)
                    break
        tombs.prev.pop(okey, None)
        tombs.cur.pop(okey, None)
        # The runs removed before stay covered: a late event of an earlier run of the same id
        # must not come back because a later run of that id was removed since.
        runs = [*(covered or ()), run or ""][-MAX_TOMB_RUNS:]
        if local or isinstance(tomb, tuple):
            tombs.cur[okey] = tuple(runs)
        else:
            tombs.cur[okey] = runs[0] if len(runs) == 1 else runs
        tombs.cur_last = now
        while len(tombs) + len(taken) > self.limits.max_tombstones:  # taken runs go first
            if taken.pop_oldest(kept) is None and tombs.pop_oldest(okey) is None:
                break
            self.evicted += 1
        return APPLIED, removal

    def newest_seq(self, run: str, workload_id: str) -> int | None:
        """The newest seq the table holds of (runId, id), whoever reported it; None if none."""
        key = (run, workload_id)
        for gen in (self._live.cur, self._live.prev, self._done.cur, self._done.prev):
            value = gen.get(key)
            if value is not None:
                if isinstance(value, int):
                    return value
                return value[0] if isinstance(value, tuple) else int(value.seq)
        return None

    def covers(self, origin: str, workload_id: str, run: str) -> bool:
        """Whether a tombstone of (originatedFrom, id) covers ``run`` (``""``: every run)."""
        okey = (origin, workload_id)
        tomb = self._tombs.cur.get(okey)
        if tomb is None:
            tomb = self._tombs.prev.get(okey)
        if tomb is None:
            return False
        covered = _tomb_runs(tomb)
        return "" in covered or run in covered

    def _keep_frame(self, replay: Outbound) -> bool:
        """Keep the frame of an event this node originated beside the newer seq the table holds
        for it (a peer's), as :meth:`observe` does when that seq comes second: for a journal
        reload that meets the two in the other order. False (nothing done) unless the table
        holds the workload at a newer seq than ``replay``'s and no newer frame of it."""
        _origin, wid, run = replay.key
        key = (run, wid)
        for gen in (self._live.cur, self._live.prev, self._done.cur, self._done.prev):
            value = gen.get(key)
            if value is not None:
                break
        else:
            return False
        if isinstance(value, int):
            newest = value
        elif isinstance(value, tuple) and value[1].seq <= replay.seq:
            newest = value[0]
        else:
            return False
        if newest <= replay.seq:
            return False
        gen[key] = (newest, replay)
        return True

    def _resend_once(self, run: str, workload_id: str, *, once: bool = True) -> None:
        """Mark a reloaded peer's workload: its newest seq, from a peer, is applied once more
        (see ``_resend``); ``once=False`` unmarks it (its broker reported a newer event)."""
        if once:
            self._resend.add((run, workload_id))
        else:
            self._resend.discard((run, workload_id))

    def _forget_tombstone(self, origin: str, workload_id: str) -> None:
        """Drop the tombstone of (originatedFrom, id), as its expiry would: a journal reload
        puts back an event that was applied after the tombstone had expired."""
        self._tombs.cur.pop((origin, workload_id), None)
        self._tombs.prev.pop((origin, workload_id), None)

    def reloader(self, kinds: Mapping[int, Reloaded], mono: float, wall: float) -> Reloader:
        """A reload of records kept across a restart (the journal's): :meth:`Reloader.load`
        puts them back, each at ``mono - age``. ``kinds``: what each record kind is."""
        return Reloader(self, kinds, mono, wall)

    def expire(self, now: float) -> int:
        """Drop the generations that are due; returns how many entries were dropped."""
        dropped = 0
        runs = self._runs
        for gens in (self._done, self._live):
            for gen in gens.expire(now):
                dropped += len(gen)
                if self._resend:
                    self._resend.difference_update(gen)
                for key in gen:
                    run, wid = key
                    entry = runs.get(wid)
                    if entry is None:
                        continue
                    if isinstance(entry, tuple):
                        if entry[1] == run:
                            del runs[wid]
                    else:
                        self._unindex(key)
        if dropped:
            self._pairs.clear()
        for tombs in self._tombs.expire(now):
            dropped += len(tombs)
        for taken in self._taken.expire(now):
            dropped += len(taken)
        return dropped

    def originated(self) -> tuple[list[Outbound], list[Removal]]:
        """The newest event of every kept workload, and the local removals: what a peer that
        (re)connects is sent so that it converges without waiting for new events."""
        events: list[Outbound] = []
        for gens in (self._live, self._done):
            for gen in (gens.prev, gens.cur):
                for value in gen.values():
                    if isinstance(value, Outbound):
                        events.append(value)
                    elif isinstance(value, tuple):
                        events.append(value[1])
        removals = [
            Removal(origin, wid, run or None)
            for gen in (self._tombs.prev, self._tombs.cur)
            for (origin, wid), tomb in gen.items()
            if isinstance(tomb, tuple)
            for run in tomb
        ]
        return events, removals

    def _evict(self, count: int, just_recorded: _Key) -> None:
        """Evict ``count`` entries (those past ``max_workloads``): terminal first, older
        generation first, never the entry just recorded (forgetting it at once would let its
        duplicates through). A full table evicts one per new workload: the usual victim is a
        terminal workload of the previous generation, popped without a search."""
        done_prev = self._done.prev
        victim: tuple[_Key, _Value] | None
        while count > 0:
            if done_prev:
                victim = done_prev.popitem()
            else:
                victim = self._done.pop_oldest(just_recorded)
                if victim is None:
                    victim = self._live.pop_oldest(just_recorded)
                    if victim is None:
                        return
                done_prev = self._done.prev
            count -= 1
            self.evicted += 1
            key = victim[0]
            if self._resend:
                self._resend.discard(key)
            self._unindex(key)

    def _newest(self, origin: str, wid: str) -> str | None:
        """The newest run of (origin, id) that the table holds, else the one another origin's
        removal took (``_taken``), if any."""
        entry = self._runs.get(wid)
        if isinstance(entry, tuple):
            if entry[0] == origin:
                return entry[1]
        elif entry is not None:
            for pair in entry.newest:
                if pair[0] == origin:
                    return pair[1]
        taken = self._taken
        if taken.cur or taken.prev:
            return taken.cur.get((origin, wid)) or taken.prev.get((origin, wid))
        return None

    def _unindex(self, key: _Key) -> str | None:
        """(runId, id) is no longer held: count it out of the index. Returns the origin whose
        newest run it was, if it was one."""
        run, wid = key
        runs = self._runs
        entry = runs.get(wid)
        if entry is None:
            return None
        if isinstance(entry, tuple):  # it was the only workload holding the id
            if entry[1] == run:
                del runs[wid]
                return entry[0]
            return None
        newest = entry.newest
        owner = None
        for i, pair in enumerate(newest):
            if pair[1] == run:
                owner = pair[0]
                del newest[i]
                break
        entry.held -= 1
        if entry.held == 0:
            del runs[wid]
        elif entry.held == 1 and newest:  # the one left is its origin's newest: a pair again
            runs[wid] = newest[0]
        return owner


# -- the reload at a start -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a kind of reloaded record is, as the table sees it: an event or a removal, of this
    node's broker (``local``: an event's frame is replayed to peers) or forwarded to it (the
    newest seq it was told, which a peer's copy of is applied once more: ``_resend``)."""

    removal: bool
    local: bool
    terminal: bool = False


#: A reloaded record: (kind, unix time, originatedFrom, id, runId, frame, seq); runId "" for a
#: removal covering every run, frame b"" unless local, seq 0 for a removal.
ReloadRecord: TypeAlias = tuple[int, float, str, str, str, bytes, int]


class _Event(NamedTuple):
    """What :meth:`WorkloadTable.observe` reads of an event, rebuilt from a record."""

    originatedFrom: str
    id: str
    runId: str
    state: str
    seq: int


_INF: Final = float("inf")


class Reloader:
    """One reload into a table (:meth:`WorkloadTable.reloader`): records oldest first, each put
    back at ``mono - age`` unless past its TTL, as the table had them. A peer's seq that was
    forwarded to the broker is forwarded once more when a peer sends it again (a broker that
    restarted too gets its view back), until the broker's own newer event follows. An event of
    this node's broker after a newer seq forwarded to it (a rewrite after a journal failure
    writes the table's state after the log) keeps its frame beside that seq, as if it had come
    first. An event the table calls removed was applied after its tombstone expired (only what
    was applied is kept): the tombstone goes and the event is put back. ``skipped``: the events
    without a seq (a format-1 record whose frame no longer decodes).

    The usual record, a new workload without a tombstone or a taken run (``_taken``; nearly all
    of a compacted log), is written straight into the table's dicts, the index and the
    generations' times kept as locals for the whole run; any other goes through :meth:`observe`
    or :meth:`remove`. A start reloads a full table (200,000 workloads) before ``ready``: a call
    per record would be half of it."""

    __slots__ = ("forwarded", "kinds", "mono", "skipped", "table", "ttl", "wall")

    def __init__(
        self, table: WorkloadTable, kinds: Mapping[int, Reloaded], mono: float, wall: float
    ) -> None:
        lim = table.limits
        self.table, self.kinds, self.mono, self.wall = table, kinds, mono, wall
        self.ttl = {
            kind: (
                lim.tombstone_ttl
                if k.removal
                else (lim.terminal_ttl if k.terminal else lim.live_ttl)
            )
            for kind, k in kinds.items()
        }
        self.forwarded = False  # a forwarded seq was reloaded: the broker's newer ones unmark
        self.skipped = 0

    def load(self, records: Iterable[ReloadRecord]) -> None:
        t = self.table
        live, done, tombs, runs, pairs, resend = (
            t._live,
            t._done,
            t._tombs,
            t._runs,
            t._pairs,
            t._resend,
        )
        kinds, ttl, mono, wall, intern = self.kinds, self.ttl, self.mono, self.wall, sys.intern
        taken = t._taken
        usual = {kind for kind, k in kinds.items() if not k.removal}
        local = {kind for kind, k in kinds.items() if k.local}
        terminal_kinds = {kind for kind, k in kinds.items() if k.terminal}
        cap = t.limits.max_workloads
        held = len(t)
        forwarded = self.forwarded
        # The dicts written, as locals: an eviction or a record taken by observe or remove may
        # replace them (a generation sealed), so they are fetched again after either.
        live_cur, done_cur, tomb_cur, tomb_prev = live.cur, done.cur, tombs.cur, tombs.prev
        inf = -_INF
        live_last = done_last = inf  # the newest ``now`` put into each class since the last flush
        for rec in records:
            kind, at, origin, wid, run, body, seq = rec
            entry = runs.get(wid)
            if (
                kind not in usual
                or seq <= 0
                or (tomb_cur and (origin, wid) in tomb_cur)
                or (tomb_prev and (origin, wid) in tomb_prev)
                or (taken.cur and (origin, wid) in taken.cur)  # through observe, which drops it
                or (taken.prev and (origin, wid) in taken.prev)
                or (
                    entry is not None
                    and (
                        (run, wid) in live_cur
                        or (run, wid) in done_cur
                        or (run, wid) in live.prev
                        or (run, wid) in done.prev
                    )
                )
            ):
                # After what the usual case deferred: the classes' newest times.
                live.cur_last = max(live.cur_last, live_last)
                done.cur_last = max(done.cur_last, done_last)
                live_last = done_last = inf
                self.forwarded = forwarded
                self._other(rec)
                forwarded = self.forwarded
                live_cur, done_cur, tomb_cur, tomb_prev = live.cur, done.cur, tombs.cur, tombs.prev
                held = len(t)
                continue
            age = wall - at
            if age >= ttl[kind]:
                continue
            now = mono - age if age > 0 else mono
            pair = pairs.get(run)
            if pair is None or pair[0] != origin:
                pair = (intern(origin), intern(run))
                pairs[pair[1]] = pair
            key = (pair[1], wid)
            if kind in local:  # reported by this node's broker: replayed to peers
                value: int | Outbound = Outbound((pair[0], wid, pair[1]), seq, body)
                if forwarded:
                    resend.discard(key)
            else:
                value = seq
                forwarded = True
                resend.add(key)
            terminal = kind in terminal_kinds
            if terminal:
                done_cur[key] = value
            else:
                live_cur[key] = value
            if entry is None:  # a new id: its class's newest time
                runs[wid] = pair
                if terminal:
                    if now > done_last:  # noqa: PLR1730 (no call per record)
                        done_last = now
                elif now > live_last:
                    live_last = now
            else:  # a new run of an id held, as observe records it: its class's time is this one
                t._index_another(wid, pair, entry)
                if terminal:
                    done.cur_last, done_last = now, inf
                else:
                    live.cur_last, live_last = now, inf
            held += 1
            if held > cap:  # past the cap: evicted as observe evicts, after the deferred times
                live.cur_last = max(live.cur_last, live_last)
                done.cur_last = max(done.cur_last, done_last)
                live_last = done_last = inf
                t._evict(held - cap, key)
                live_cur, done_cur, tomb_cur, tomb_prev = live.cur, done.cur, tombs.cur, tombs.prev
                held = len(t)
        self.forwarded = forwarded
        live.cur_last = max(live.cur_last, live_last)
        done.cur_last = max(done.cur_last, done_last)

    def _other(self, rec: ReloadRecord) -> None:
        """A record that is not the usual case: a removal, an event without a seq, or one of a
        workload held or removed."""
        kind, at, origin, wid, run, body, seq = rec
        t, k = self.table, self.kinds[kind]
        age = self.wall - at
        if age >= self.ttl[kind]:
            return
        now = self.mono - age if age > 0 else self.mono
        if k.removal:
            t.remove(origin, wid, run or None, now, local=k.local)
            return
        if seq <= 0:  # a format-1 record whose frame no longer decodes
            self.skipped += 1
            return
        run = sys.intern(run)
        replay = Outbound((sys.intern(origin), wid, run), seq, body) if k.local else None
        if replay is not None and t._keep_frame(replay):
            return  # this node's event, older than a seq forwarded before it: its frame kept
        event = _Event(origin, wid, run, "completed" if k.terminal else "queued", seq)
        if t.observe(event, now, replay=replay) is REMOVED:
            t._forget_tombstone(origin, wid)
            t.observe(event, now, replay=replay)
        if replay is None or self.forwarded:
            self.forwarded = True
            t._resend_once(run, wid, once=replay is None)
