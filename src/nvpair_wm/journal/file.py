"""The journal file: appends (one write per read from the broker, the forwarded records
before each write to it), the group commit, recovery after a failure, and compaction's
orchestration (begin, install). What each of these guarantees is in ``docs/crash-safety.md``."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from nvpair_wm.dedup import TableLimits, WorkloadTable
from nvpair_wm.events import Forwarded, Outbound
from nvpair_wm.journal.compaction import Compaction
from nvpair_wm.journal.disk import (
    close_quietly,
    install,
    lock_directory,
    temp_of,
    write_all,
    write_temp,
)
from nvpair_wm.journal.fold import Fold
from nvpair_wm.journal.limits import JournalLimits
from nvpair_wm.journal.records import (
    FORMAT,
    HEADER,
    JOURNAL_FILE,
    REMOVAL,
    JournalFormatError,
    Record,
    encode_forwarded,
    encode_log,
    encode_outbounds,
    encode_record,
    forwarded_record,
    read_log,
)

__all__ = ["Journal", "open_journal"]

# One logger for the journal, whichever of its modules speaks.
log = logging.getLogger("nvpair_wm.journal")


class Journal:
    """The open journal file: appended to per read from the broker, synced and compacted on a
    timer."""

    def __init__(
        self,
        path: Path,
        fd: int,
        *,
        lock: int,
        kept: int,
        size: int,
        limits: JournalLimits,
        table: TableLimits,
        wall: float,
        appended: int = 0,
    ) -> None:
        self.path = path
        self.limits = limits
        self.table_limits = table
        self._fd: int | None = fd
        self._lock = lock  # the directory, flocked: one process per journal
        self._size = size  # bytes in the file
        self._kept = kept  # records written by the last compaction
        self._appended = appended  # records appended since
        self._dirty = False
        self._directory_dirty = False  # a rename not yet fsynced (see finish_compaction)
        self._retired: int | None = None  # the replaced log's descriptor, not yet closed
        self._compacting = False
        self._compacted_at = wall
        self._min_ttl = min(table.terminal_ttl, table.live_ttl, table.tombstone_ttl)
        # Failing (a write, fsync or compaction failed): the log misses what came since, so it
        # is rewritten whole from the table once writing works again (see :meth:`recover`).
        self.failing_since: float | None = None  # unix time of the first failure of the run
        self.last_error: str | None = None
        self._retry_at = 0.0  # monotonic time of the next rewrite attempt
        self._retry_pause = limits.retry_backoff
        # What was forwarded to the broker while failing (the table cannot say it), folded, for
        # the rewrite; and how many items were folded into it since it was last refolded.
        self._held: Fold | None = None
        self._held_applied = 0
        # What :meth:`forward_later` was given, for :meth:`flush` (one record for all of it).
        self._pending: list[Forwarded] = []

    @property
    def active(self) -> bool:
        return self._fd is not None

    @property
    def healthy(self) -> bool:
        return self.failing_since is None

    def recovery_delay(self, now: float) -> float | None:
        """Seconds until the next rewrite attempt is due (0: now), or None when healthy.
        ``now``: monotonic."""
        if self.failing_since is None:
            return None
        return max(0.0, self._retry_at - now)

    def recover(self, table: WorkloadTable, wall: float, now: float) -> bool:
        """Rewrite the log: its whole records as they were before the failure (a write cut short
        by it left a torn tail, which is dropped), then the table's state of what this node
        originated (the newest event of every workload its broker reported, and its removals),
        then what was forwarded to the broker since the failure and the table still holds (kept
        folded meanwhile, see :meth:`append_forwarded`: the table keeps no origin of a peer's
        workload), and append to it again. After this a crash loses nothing this node
        originated or told its broker while the journal was failing: without the forwarded
        part, a restarted node would take a peer's older seq of a workload, or a removed one,
        for news and pass it to a broker that already had newer.

        The rewritten records are stamped ``wall`` (the table keeps no times), the broker's
        own before those forwarded; :func:`reload_table` keeps the frame of an event of this
        node's that follows a newer forwarded seq. So after a restart they live up to one TTL
        longer than they would have; the next compaction folds the old and the new. On failure
        the next attempt waits twice as long (``retry_backoff`` doubling to
        ``retry_backoff_max``); ``now``: monotonic."""
        self.flush(wall)  # what waits is written now, or held for the rewrite
        if self.failing_since is None:
            return True
        try:
            with self.path.open("rb") as f:
                before = f.read(self._size)
        except OSError:
            before = b""
        if len(before) != self._size or not before.startswith(HEADER):
            before = HEADER  # not the file the journal wrote: the table's state alone
        events, removals = table.originated()
        data, count = encode_outbounds(events, wall)
        rest = [Record(REMOVAL, wall, r.origin, r.workload_id, r.run_id or "") for r in removals]
        rest += self._held_records(table, wall)
        data += b"".join(map(encode_record, rest))
        count += len(rest)
        try:
            fd = install(write_temp(self.path, before + data), self.path)
        except OSError as exc:
            self.last_error = f"rewrite: {exc.strerror or exc}"
            self._retry_at = now + self._retry_pause
            log.debug(
                "journal: rewriting %s failed (%s); again in %g s",
                self.path,
                exc.strerror or exc,
                self._retry_pause,
            )
            self._retry_pause = min(self._retry_pause * 2, self.limits.retry_backoff_max)
            return False
        with contextlib.suppress(OSError):  # a compaction's temporary file, if one was left
            temp_of(self.path).unlink()
        log.warning(
            "journal: writing %s works again after %.1f s; rewrote the current state (%d records)",
            self.path,
            max(0.0, wall - self.failing_since),
            count,
            extra={"records": count},
        )
        self._fd = fd
        self._size = len(before) + len(data)
        self._appended += count
        self._dirty = self._directory_dirty = False
        self.failing_since = self.last_error = None
        self._held, self._held_applied = None, 0
        self._retry_pause = self.limits.retry_backoff
        return True

    def _held_records(self, table: WorkloadTable, wall: float) -> list[Record]:
        """What was forwarded to the broker while failing, as records stamped ``wall``: within
        their TTL and the table's caps, and still the table's state (a seq it still holds as
        the newest, a removal its tombstones still cover; the broker's own newer event or
        removal since replaced it, and an eviction or expiry forgot it)."""
        if self._held is None:
            return []
        newest_seq, covers = table.newest_seq, table.covers
        return [
            rec._replace(at=wall)
            for rec in self._held.compacted(wall, self.table_limits)
            if (
                covers(rec.origin, rec.wid, rec.run)
                if rec.is_removal
                else newest_seq(rec.run, rec.wid) == rec.seq
            )
        ]

    @property
    def size(self) -> int:
        """Bytes in the file: every append so far, each whole."""
        return self._size

    def append(self, items: Iterable[Outbound], at: float) -> None:
        """Write the records of these outbound items (one broker read's) before returning,
        after what :meth:`append_forwarded` left for :meth:`flush` (the file keeps their order)."""
        if self._fd is not None:
            self.flush(at)
            self._write(*encode_outbounds(items, at))

    def append_forwarded(self, items: Sequence[Forwarded], at: float) -> None:
        """Write the record of what was forwarded to the broker, with what waited for
        :meth:`flush` before it, before returning: so before the broker can read it."""
        self._pending += items
        self.flush(at)

    def forward_later(self, items: Sequence[Forwarded]) -> None:
        """:meth:`append_forwarded` at the next :meth:`flush`, which the caller runs before
        anything of this can reach the broker: the node's broker channel flushes before each of
        its writes, so the peer requests whose lines share a write to the broker (those of one
        batch of the event loop) share one record and one write here."""
        self._pending += items

    @property
    def pending(self) -> bool:
        """Whether forwarded items wait for :meth:`flush`."""
        return bool(self._pending)

    def flush(self, at: float | None = None) -> None:
        """Write what waits (:meth:`forward_later`) as one record stamped ``at`` (default:
        now). While the journal is failing (or when this write fails) the items are folded in
        memory instead, for :meth:`recover`: the table does not keep them (only a seq, without
        the origin of a peer's workload)."""
        items = self._pending
        if not items:
            return
        self._pending = []
        if at is None:
            at = time.time()
        if self._fd is not None:
            self._write(*encode_forwarded(items, at))
        if self.failing_since is not None:
            self._hold(forwarded_record(item, at) for item in items)

    def _hold(self, records: Iterable[Record]) -> None:
        """Fold forwarded records into :attr:`_held`, bounded by the table's caps: refolded
        (:meth:`Fold.compacted`) whenever the records folded since the last refold pass the
        caps, which keeps it at most about twice the caps."""
        held = self._held
        if held is None:
            held = self._held = Fold()
        apply = held.apply
        last: Record | None = None
        for last in records:
            apply(last)
            self._held_applied += 1
        limits = self.table_limits
        if last is not None and self._held_applied > limits.max_workloads + limits.max_tombstones:
            self._held = Fold(held.compacted(last.at, limits))
            self._held_applied = 0

    def _write(self, data: bytes, count: int) -> None:
        fd = self._fd
        if fd is None or not count:
            return
        try:
            write_all(fd, data)
            if self.limits.fsync_interval <= 0:
                os.fsync(fd)
            else:
                self._dirty = True
        except OSError as exc:
            self._fail("write to", exc)
            return
        self._size += len(data)
        self._appended += count

    def sync(self) -> None:
        """fsync what was written since the last sync (the group commit)."""
        self.flush()
        if self._fd is None or not self._dirty:
            return
        self._dirty = False
        try:
            os.fsync(self._fd)
        except OSError as exc:
            self._fail("fsync", exc)

    def sync_descriptor(self) -> int | None:
        """The group commit off the event loop: a duplicate of the descriptor, for
        :func:`fsync_and_close` in a worker thread (a duplicate, so that closing or replacing
        the journal's own meanwhile cannot matter); None when nothing was written since."""
        self.flush()
        if self._fd is None or not self._dirty:
            return None
        self._dirty = False
        try:
            return os.dup(self._fd)
        except OSError as exc:
            self._fail("fsync", exc)
            return None

    def retired_descriptor(self) -> int | None:
        """The old log's descriptor after a compaction installed with ``sync=False``, for
        :func:`close_quietly` in a worker thread (its close frees the old file)."""
        fd, self._retired = self._retired, None
        return fd

    def directory_to_sync(self) -> Path | None:
        """The journal's directory when a rename in it (a compaction installed with
        ``sync=False``) is not yet durable: for :func:`fsync_directory` in a worker thread."""
        if self._fd is None or not self._directory_dirty:
            return None
        self._directory_dirty = False
        return self.path.parent

    def sync_failed(self, exc: OSError) -> None:
        self._fail("fsync", exc)

    def compaction_due(self, wall: float, live: int = 0) -> bool:
        """Whether to compact now. ``live``: how many records the table would keep (its
        workloads and tombstones, an upper bound on what a compaction keeps); 0 if unknown.

        By count: once the appends since the last compaction reach ``compact_growth`` times
        what it kept (so each compaction is paid for by that many times as many appends; the
        product rounded to 6 decimals before its ceiling, so that float noise never asks for
        one more) and ``compact_min_records``, and at least half of those appends are garbage
        by the table's count (the file holds that many more records than the table keeps). A
        log of distinct workloads, which a compaction would leave as it is, is then not
        rescanned over and over as it grows; it is bounded all the same (under twice
        ``live``). By time: once per shortest TTL when anything was appended."""
        if self._fd is None or not self._appended or self._compacting:
            return False
        appended = self._appended
        if appended >= self._count_trigger:
            garbage = self._kept + appended - live
            if 2 * garbage >= appended:
                return True
        return wall - self._compacted_at >= self._min_ttl

    @property
    def _count_trigger(self) -> int:
        """The appends since the last compaction that make one due by count."""
        grown = math.ceil(round(self.limits.compact_growth * self._kept, 6))
        return max(grown, self.limits.compact_min_records)

    def begin_compaction(self, wall: float) -> Compaction | None:
        self.flush(wall)
        if self._fd is None or self._compacting:
            return None
        self._compacting = True
        return Compaction(self.path, self._size, self._appended, wall, self.table_limits)

    def finish_compaction(self, job: Compaction, *, sync: bool = True) -> None:
        """Install what the job wrote, with the records appended while it ran. A job that
        failed (``error``, ``failure``) leaves the log as it was, and the next check retries:
        what was appended since the last compaction still counts.

        ``sync=False`` (the node, with a group commit): the last records copied and the rename
        are not fsynced here but left to the caller's group commit, in a worker thread
        (:meth:`sync_descriptor`, :meth:`directory_to_sync`), so that no fsync of a busy disk
        (tens of ms) runs on the loop. Until it ran, a power failure leaves either the old
        log or the new one without its last records: the group commit's usual window."""
        self._compacting = False
        failed = job.error is not None or job.failure is not None
        if job.unchanged and not failed and self._fd is not None:
            self._kept, self._appended = job.kept, self._appended - job.appended
            self._compacted_at = job.wall
            log.debug("journal: compacted %s: %d records, nothing to drop", self.path, job.kept)
            return
        tmp = job.temp
        if failed or self._fd is None:
            if job.error is not None:
                log.warning(
                    "journal: cannot compact %s (%s); appending on",
                    self.path,
                    job.error.strerror or job.error,
                )
            elif job.failure is not None:
                log.warning(
                    "journal: compaction of %s failed (%s); appending on, the next one retries",
                    self.path,
                    job.failure,
                )
            with contextlib.suppress(OSError):
                tmp.unlink()
            return
        if job.damage is not None:  # only another writer or the disk can do this
            log.warning(
                "journal %s damaged at byte %d (%s); compacted what reads",
                self.path,
                job.damage.offset,
                job.damage.reason,
            )
        try:
            with self.path.open("rb") as f:
                f.seek(job.upto)
                since = f.read()
            fd = os.open(tmp, os.O_WRONLY | os.O_APPEND)
            try:
                write_all(fd, since)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            fd = install(tmp, self.path, sync=sync)
        except OSError as exc:
            self._fail("compact", exc)
            return
        if sync:
            close_quietly(self._fd)
        else:  # the last descriptor of the old log: closing it frees it (~20 ms for 170 MB)
            self._retired = self._fd
        self._fd = fd
        self._size = job.size + len(since)
        self._kept, self._appended = job.kept, self._appended - job.appended
        self._dirty = not sync
        self._directory_dirty = not sync
        self._compacted_at = job.wall
        log.debug(
            "journal: compacted %s: %d records read, %d kept, %d bytes appended meanwhile",
            self.path,
            job.read,
            job.kept,
            len(since),
        )

    def abandon_compaction(self, job: Compaction) -> None:
        """Forget a job whose runner was stopped (the node is stopping; its child is gone):
        its temporary file goes, the log stays as it is."""
        self._compacting = False
        with contextlib.suppress(OSError):
            job.temp.unlink()

    def compact(self, wall: float) -> None:
        """A whole compaction on this thread (the node runs :meth:`Compaction.run` in a worker
        thread instead)."""
        job = self.begin_compaction(wall)
        if job is not None:
            job.run()
            self.finish_compaction(job)

    def close(self) -> None:
        self.flush()
        if (retired := self.retired_descriptor()) is not None:
            close_quietly(retired)
        if self._fd is not None:
            self.sync()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def _fail(self, what: str, exc: OSError) -> None:
        """A write, fsync or compaction failed: stop appending (the log now misses records)
        and rewrite it whole once writing works again (:meth:`recover`, with backoff)."""
        reason = exc.strerror or str(exc)
        if self.failing_since is None:
            log.error(
                "journal: cannot %s %s (%s); retrying with backoff (%g s doubling to %g s), "
                "then the whole current state is rewritten; a crash before that loses what the "
                "peers have not received",
                what,
                self.path,
                reason,
                self.limits.retry_backoff,
                self.limits.retry_backoff_max,
            )
            self.failing_since = time.time()
            self._retry_pause = self.limits.retry_backoff
        self.last_error = f"{what}: {reason}"
        self._retry_at = time.monotonic() + self._retry_pause
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def open_journal(
    directory: Path, limits: JournalLimits, table: TableLimits, wall: float
) -> tuple[Journal | None, list[Record]]:
    """Read, check and compact the journal in ``directory``: the open journal (None when it
    is off or cannot be written) and the records to reload, oldest first."""
    if not limits.enabled:
        return None, []
    path = directory / JOURNAL_FILE
    try:
        lock = lock_directory(directory)
    except BlockingIOError:
        log.warning("journal: %s is in use by another process; journal off", path)
        return None, []
    except OSError as exc:
        log.error("journal: cannot open %s (%s); journal off", directory, exc.strerror or exc)
        return None, []
    try:
        journal, records = _open_locked(path, lock, limits, table, wall)
    except JournalFormatError:
        os.close(lock)
        raise
    if journal is None:
        os.close(lock)
    return journal, records


def _open_locked(
    path: Path, lock: int, limits: JournalLimits, table: TableLimits, wall: float
) -> tuple[Journal | None, list[Record]]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = b""
    except OSError as exc:
        log.error("journal: cannot read %s (%s); journal off", path, exc.strerror or exc)
        return None, []
    with contextlib.suppress(OSError):  # a compaction's, cut short by a crash: never installed
        temp_of(path).unlink()
    contents = read_log(data, path)  # JournalFormatError: a newer format, left as it is
    records, damage = contents.records, contents.damage
    if damage is not None:
        aside = path.with_name(f"{JOURNAL_FILE}.damaged-{int(wall)}")
        outcome = f"kept the {len(records)} records before it" if damage.torn else "starting empty"
        if not damage.torn:
            records = []
        try:
            os.replace(path, aside)
        except OSError as exc:
            aside_note = f"could not move it aside: {exc.strerror or exc}"
        else:
            aside_note = f"moved to {aside.name}"
        log.warning(
            "journal %s damaged at byte %d (%s%s); %s, %s",
            path,
            damage.offset,
            "torn tail: " if damage.torn else "",
            damage.reason,
            aside_note,
            outcome,
        )
    # A sound file of this format is reloaded as it is (reload_table skips what has expired;
    # the first compaction, in a child process, folds its tail): a start reads and reloads,
    # nothing more. A damaged file, an older format or none is written anew, compacted.
    tail = contents.tail
    try:
        if data and damage is None and contents.version == FORMAT:
            size = len(data)
            kept = len(records) - tail
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        else:
            if contents.version != FORMAT:
                log.info(
                    "journal: %s is format %d; rewriting it in format %d",
                    path,
                    contents.version,
                    FORMAT,
                )
            records = Fold(records).compacted(wall, table)
            encoded = encode_log(records)
            size, kept, tail = len(encoded), len(records), 0
            fd = install(write_temp(path, encoded), path)
    except OSError as exc:
        log.error("journal: cannot write %s (%s); journal off", path, exc.strerror or exc)
        return None, records
    journal = Journal(
        path,
        fd,
        lock=lock,
        kept=kept,
        size=size,
        limits=limits,
        table=table,
        wall=wall,
        appended=tail,  # what follows the checkpoint counts toward the next compaction
    )
    return journal, records
