"""The reload of journal records into the workload table at a start."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import NamedTuple

from nvpair_wm.dedup import WorkloadTable
from nvpair_wm.events import Outbound
from nvpair_wm.journal.records import (
    EVENT_KIND_SET,
    FORWARDED_LIVE,
    FORWARDED_REMOVAL,
    FORWARDED_TERMINAL,
    LIVE,
    REMOVAL,
    REMOVAL_KINDS,
    TERMINAL_EVENT,
    TERMINAL_KINDS,
    Record,
    collection_paused,
)

_INF = float("inf")


class _Key(NamedTuple):
    """What :meth:`WorkloadTable.observe` reads of an event, rebuilt from a record."""

    originatedFrom: str
    id: str
    runId: str
    state: str
    seq: int


def reload_table(table: WorkloadTable, records: Iterable[Record], mono: float, wall: float) -> int:
    """Put journal records (oldest first) back into the table, each at ``mono - age``, and
    what it forwarded to its broker as it had it: so that after a restart a snapshot or retry
    older than what the broker has is stale, and a removed workload stays removed. The newest
    seq forwarded is forwarded once more when a peer sends it again (a broker that restarted
    too gets its view back; see ``WorkloadTable.resend_once``).

    A record past its TTL is not put back (the table would have forgotten it). An event of this
    node's broker that follows a newer seq forwarded to it (a rewrite after a failure,
    :meth:`Journal.recover`, writes the table's state after the log) keeps its frame for replay
    beside that seq, as if it had come first. An event the table now calls removed was applied
    after its tombstone expired (the journal holds only what was applied): the tombstone goes
    and the event is put back.

    Returns how many records were skipped because their frame no longer decodes (a journal
    written by a version whose contract differed).

    The usual record (an event of a workload the table does not hold yet, without a tombstone,
    below the cap: all of a compacted log) is put straight into the table's dicts, as
    :meth:`WorkloadTable.restore` would (or, for an id that other runs hold, as
    :meth:`WorkloadTable.observe` would); every other one goes through :meth:`_Reload.one`,
    record by record (:func:`reload_table_one_by_one` does that for all, the reference the
    fast path is tested against). A start reloads a full table (200,000 workloads) before
    ``ready``, and ``restore``'s call and checks per record were half of that."""
    load = _Reload(table, mono, wall)
    with collection_paused():
        load.fast(records)
    return load.skipped


def reload_table_one_by_one(
    table: WorkloadTable, records: Iterable[Record], mono: float, wall: float
) -> int:
    """:func:`reload_table` without its fast path: every record through :meth:`_Reload.one`."""
    load = _Reload(table, mono, wall)
    with collection_paused():
        for rec in records:
            load.one(rec)
    return load.skipped


class _Reload:
    """One reload into a table: the TTL of each record kind, whether a forwarded event was
    reloaded yet (from then on an event of this node's broker unmarks its workload's resend),
    and how many records were skipped."""

    __slots__ = ("forwarded", "mono", "skipped", "table", "ttl", "wall")

    def __init__(self, table: WorkloadTable, mono: float, wall: float) -> None:
        limits = table.limits
        self.table, self.mono, self.wall = table, mono, wall
        self.ttl = {
            LIVE: limits.live_ttl,
            TERMINAL_EVENT: limits.terminal_ttl,
            REMOVAL: limits.tombstone_ttl,
            FORWARDED_LIVE: limits.live_ttl,
            FORWARDED_TERMINAL: limits.terminal_ttl,
            FORWARDED_REMOVAL: limits.tombstone_ttl,
        }
        self.forwarded = False
        self.skipped = 0

    def one(self, rec: Record) -> None:
        """Put one record back, whatever it is."""
        kind, at, origin, wid, run, body, seq = rec
        table = self.table
        age = self.wall - at
        if age >= self.ttl[kind]:
            return
        now = self.mono - age if age > 0 else self.mono
        if kind in REMOVAL_KINDS:
            table.remove(origin, wid, run or None, now, local=kind == REMOVAL)
            return
        if seq <= 0:  # a format-1 record whose frame no longer decodes
            self.skipped += 1
            return
        terminal = kind in TERMINAL_KINDS
        held = (sys.intern(origin), wid, sys.intern(run))
        replay = None
        if kind <= TERMINAL_EVENT:  # reported by this node's broker: replayed to peers
            replay = Outbound(held, seq, body)
        outdated = False  # this node's event, older than a seq forwarded before it
        if not table.restore(held, seq, terminal, replay, now):
            if replay is not None and table.keep_frame(replay):
                outdated = True
            else:
                key = _Key(origin, wid, run, "completed" if terminal else "queued", seq)
                if table.observe(key, now, replay=replay) == "removed":
                    table.forget_tombstone(origin, wid)
                    table.observe(key, now, replay=replay)
        # Forwarded to the broker: a peer's copy of that seq goes to it once more (until
        # the broker's own newer event, if any, follows).
        if (replay is None or self.forwarded) and not outdated:
            self.forwarded = True
            table.resend_once(held[2], wid, once=replay is None)

    def fast(self, records: Iterable[Record]) -> None:
        """Put records back, the usual ones written here (see :func:`reload_table`): what
        :meth:`WorkloadTable.restore` does for them, and the resend marks :meth:`one` sets."""
        table = self.table
        live, done, runs, pairs, tombs, resend = table.restore_fields()
        ttl, mono, wall, one = self.ttl, self.mono, self.wall, self.one
        usual, terminal_kinds, intern = EVENT_KIND_SET, TERMINAL_KINDS, sys.intern
        cap = table.limits.max_workloads
        held = len(table)
        forwarded = self.forwarded
        # The dicts written, as locals: a record taken by ``one`` may replace them (an
        # eviction seals a generation), so they are fetched again after it.
        live_cur, done_cur, tomb_cur, tomb_prev = live.cur, done.cur, tombs.cur, tombs.prev
        inf = -_INF
        live_last = done_last = inf  # the newest ``now`` put into each class since the last flush
        for rec in records:
            kind, at, origin, wid, run, body, seq = rec
            entry = runs.get(wid)
            if (
                kind not in usual
                or seq <= 0
                or held >= cap
                or (tomb_cur and (origin, wid) in tomb_cur)
                or (tomb_prev and (origin, wid) in tomb_prev)
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
                # Anything else, record by record, after what the usual case deferred: the
                # classes' newest times, as restore would have set them by now.
                live.cur_last = max(live.cur_last, live_last)
                done.cur_last = max(done.cur_last, done_last)
                live_last = done_last = inf
                self.forwarded = forwarded
                one(rec)
                forwarded = self.forwarded
                live_cur, done_cur, tomb_cur, tomb_prev = live.cur, done.cur, tombs.cur, tombs.prev
                held = len(table)
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
            if kind <= TERMINAL_EVENT:  # reported by this node's broker: replayed to peers
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
            if entry is None:  # restore's case: the newest time of its class
                runs[wid] = pair
                if terminal:
                    if now > done_last:  # noqa: PLR1730 (no call per record)
                        done_last = now
                elif now > live_last:
                    live_last = now
            else:  # observe's (a new run of an id held): its class's time is this one's
                table.index_another(wid, pair, entry)
                if terminal:
                    done.cur_last, done_last = now, inf
                else:
                    live.cur_last, live_last = now, inf
            held += 1
        self.forwarded = forwarded
        live.cur_last = max(live.cur_last, live_last)
        done.cur_last = max(done.cur_last, done_last)
