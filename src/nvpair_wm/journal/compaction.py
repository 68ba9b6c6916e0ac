"""One compaction of the journal: the heavy part (read the log, fold it, write a temporary
file), which runs in a child process (:mod:`nvpair_wm.journal.compactor`), and the catching up
with what was appended meanwhile, in a worker thread. :class:`nvpair_wm.journal.file.Journal`
begins and installs it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nvpair_wm.dedup import TableLimits
from nvpair_wm.journal.disk import copy_range, temp_of, write_temp
from nvpair_wm.journal.fold import Fold
from nvpair_wm.journal.records import Damage, collection_paused, encode_log, read_log

__all__ = ["Compaction"]


@dataclass(slots=True)
class Compaction:
    """One compaction: :meth:`run` (the heavy part, which may run in another thread or process:
    it reads the log up to ``upto`` and writes only its own temporary file; the node runs it in
    a child process, :mod:`nvpair_wm.journal.compactor`) between
    :meth:`Journal.begin_compaction` and :meth:`Journal.finish_compaction` (on the thread that
    appends)."""

    path: Path
    upto: int  # bytes of the log that existed when it began
    appended: int  # records appended before it began
    wall: float
    table: TableLimits
    kept: int = 0
    size: int = 0
    read: int = 0  # records in the log up to ``upto``
    damage: Damage | None = None
    error: OSError | None = None
    unchanged: bool = False  # nothing to drop: the log up to ``upto`` is its own compaction
    failure: str | None = None  # the child that ran it died, was killed or said nothing sound

    @property
    def temp(self) -> Path:
        """The temporary file it writes (removed when it is not installed)."""
        return temp_of(self.path)

    def catch_up(self, until: int) -> None:
        """Copy what was appended to the log between ``upto`` and ``until`` (a size the
        appending thread saw: a record boundary) to the temporary file, fsynced; ``upto`` moves
        there. For a worker thread (reads, writes and an fsync: the GIL is free meanwhile), so
        that :meth:`Journal.finish_compaction`, on the thread that appends, copies and syncs
        only what was appended since: a busy node appends tens of MB during a compaction."""
        if self.error or self.failure or self.unchanged or until <= self.upto:
            return
        try:
            copied = copy_range(self.path, self.upto, until, self.temp)
        except OSError as exc:
            self.error = exc
            return
        self.upto, self.size = until, self.size + copied

    def run(self) -> None:
        """Read, fold and rewrite, with the cyclic GC paused (:func:`collection_paused`)."""
        with collection_paused():
            self._run()

    def _run(self) -> None:
        try:
            with self.path.open("rb") as f:
                data = f.read(self.upto)
            contents = read_log(data, self.path)
            self.damage, records = contents.damage, contents.records
            self.read = len(records)
            kept = Fold(records).compacted(self.wall, self.table)
            if self.damage is None and not contents.tail and len(kept) == len(records):
                # Checkpoint records alone, none to drop (the fold only drops, and keeps the
                # order): the rewrite would be these very records. Nothing to write.
                self.unchanged = True
                self.kept, self.size = len(kept), len(data)
                return
            encoded = encode_log(kept)
            write_temp(self.path, encoded)
        except OSError as exc:
            self.error = exc
            return
        self.kept, self.size = len(kept), len(encoded)
