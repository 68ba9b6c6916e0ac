"""The journal's records back into the workload table at a start: what each record kind is to
the table (:data:`KINDS`), and the table's own reload (:meth:`WorkloadTable.reloader`) run with
the cyclic GC paused."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from nvpair_wm.dedup import Reloaded, WorkloadTable
from nvpair_wm.journal.records import (
    FORWARDED_LIVE,
    FORWARDED_REMOVAL,
    FORWARDED_TERMINAL,
    LIVE,
    REMOVAL,
    TERMINAL_EVENT,
    Record,
    collection_paused,
)

__all__ = ["KINDS", "reload_table", "reload_table_one_by_one"]

#: Each record kind a reload meets (every kind :func:`~nvpair_wm.journal.records.read_log`
#: returns), as the table sees it.
KINDS: Final = {
    LIVE: Reloaded(removal=False, local=True),
    TERMINAL_EVENT: Reloaded(removal=False, local=True, terminal=True),
    REMOVAL: Reloaded(removal=True, local=True),
    FORWARDED_LIVE: Reloaded(removal=False, local=False),
    FORWARDED_TERMINAL: Reloaded(removal=False, local=False, terminal=True),
    FORWARDED_REMOVAL: Reloaded(removal=True, local=False),
}


def reload_table(table: WorkloadTable, records: Iterable[Record], mono: float, wall: float) -> int:
    """Put journal records (oldest first) back into the table, each at ``mono - age``
    (:class:`~nvpair_wm.dedup.Reloader` says how): so that after a restart a snapshot or retry
    older than what the broker has is stale, a removed workload stays removed, and what this
    node originated is replayed to its peers. Returns how many records were skipped because
    their frame no longer decodes (a journal written by a version whose contract differed)."""
    load = table.reloader(KINDS, mono, wall)
    with collection_paused():
        load.load(records)
    return load.skipped


def reload_table_one_by_one(
    table: WorkloadTable, records: Iterable[Record], mono: float, wall: float
) -> int:
    """:func:`reload_table` a record at a time: the reference its batching (the times and
    dicts it keeps as locals across records) is tested against."""
    load = table.reloader(KINDS, mono, wall)
    with collection_paused():
        for rec in records:
            load.load((rec,))
    return load.skipped
