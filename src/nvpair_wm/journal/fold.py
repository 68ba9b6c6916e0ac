"""What compaction keeps (sans-IO): the state a sequence of journal records leaves, as the
table saw it, and the records still worth keeping of it (within their TTL and the table's
caps). A compaction (:mod:`nvpair_wm.journal.compaction`) writes these; a failing journal folds
what it forwarded meanwhile with it (:meth:`nvpair_wm.journal.file.Journal.recover`)."""

from __future__ import annotations

from collections.abc import Iterable

from nvpair_wm.dedup import MAX_TOMB_RUNS, TableLimits
from nvpair_wm.journal.records import LIVE, TERMINAL_EVENT, TERMINAL_KINDS, Record

__all__ = ["Fold"]

_Okey = tuple[str, str]  # (originatedFrom, id)


class Fold:
    """The state a sequence of records leaves, as the table saw it: per (origin, id, runId)
    the last event this node's broker reported and the newest seq forwarded to the broker
    (if newer), and the removals of each (origin, id), one per run as the table's tombstone
    keeps them (the newest ``MAX_TOMB_RUNS``), which dropped the events they covered. An event
    after a removal that covers it means the table had already forgotten the tombstone (it
    applied the event), so the tombstone goes too."""

    __slots__ = ("events", "forwarded", "tombs")

    def __init__(self, records: Iterable[Record] = ()) -> None:
        self.events: dict[_Okey, dict[str, Record]] = {}
        self.forwarded: dict[_Okey, dict[str, Record]] = {}  # newer than the event, if any
        # (origin, id) → run → its removal
        self.tombs: dict[_Okey, dict[str, Record]] = {}
        events, tombs, forwarded, apply = self.events, self.tombs, self.forwarded, self.apply
        for rec in records:  # apply's usual case taken here (tested equal to apply), else apply
            kind = rec.kind
            if kind in (LIVE, TERMINAL_EVENT):
                okey = (rec.origin, rec.wid)
                if (not tombs or okey not in tombs) and (not forwarded or okey not in forwarded):
                    runs = events.get(okey)
                    if runs is None:
                        events[okey] = {rec.run: rec}
                    else:
                        runs[rec.run] = rec
                    continue
            apply(rec)

    def apply(self, rec: Record) -> None:
        okey = (rec.origin, rec.wid)
        if rec.is_removal:
            for held in (self.events, self.forwarded):
                runs = held.get(okey)
                if runs is not None:
                    if rec.run:
                        runs.pop(rec.run, None)
                    else:
                        runs.clear()
                    if not runs:
                        del held[okey]
            tombs = self.tombs.pop(okey, None) or {}
            tombs.pop(rec.run, None)
            tombs[rec.run] = rec
            while len(tombs) > MAX_TOMB_RUNS:
                del tombs[next(iter(tombs))]
            self.tombs[okey] = tombs
            return
        if self.tombs:
            covering = self.tombs.get(okey)
            if covering is not None and (rec.run in covering or any(not r for r in covering)):
                del self.tombs[okey]
        if rec.forwarded:
            held = self.forwarded
        else:
            held = self.events
            # A forwarded seq this event reaches is no longer the newest.
            fruns = self.forwarded.get(okey)
            if fruns is not None and (f := fruns.get(rec.run)) is not None and f.seq <= rec.seq:
                del fruns[rec.run]
                if not fruns:
                    del self.forwarded[okey]
        runs = held.get(okey)
        if runs is None:
            held[okey] = {rec.run: rec}
        else:
            runs[rec.run] = rec

    def __len__(self) -> int:
        return sum(
            len(runs)
            for held in (self.events, self.forwarded, self.tombs)
            for runs in held.values()
        )

    def compacted(self, now: float, limits: TableLimits) -> list[Record]:
        """What is still worth keeping at unix time ``now``: records within their TTL, at most
        the table's caps of each (the newest workloads, with both their records when a
        forwarded seq is newer than the event), oldest first (the order to reload them in)."""
        live, terminal = limits.live_ttl, limits.terminal_ttl
        terminal_kinds = TERMINAL_KINDS
        events = [
            rec
            for held in (self.events, self.forwarded)
            for runs in held.values()
            for rec in runs.values()
            if now - rec.at < (terminal if rec.kind in terminal_kinds else live)
        ]
        tombs = [
            rec
            for runs in self.tombs.values()
            for rec in runs.values()
            if now - rec.at < limits.tombstone_ttl
        ]
        events.sort(key=_at)
        tombs.sort(key=_at)
        cap = limits.max_workloads
        if len(events) > cap:  # the newest ``cap`` workloads (a workload may have two records)
            chosen: set[tuple[str, str, str]] = set()
            newest = []
            for rec in reversed(events):
                key = (rec.origin, rec.wid, rec.run)
                if key not in chosen:
                    if len(chosen) >= cap:
                        continue
                    chosen.add(key)
                newest.append(rec)
            newest.reverse()
            events = newest
        kept = events
        kept += tombs[-limits.max_tombstones :] if limits.max_tombstones else []
        kept.sort(key=_at)
        return kept


def _at(rec: Record) -> float:
    return rec.at
