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
from typing import Final

from nvpair_wm import platforms
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
from nvpair_wm.journal.health import Event, Health, JournalHealth
from nvpair_wm.journal.limits import JournalLimits
from nvpair_wm.journal.records import (
    FORMAT,
    HEADER,
    JOURNAL_FILE,
    REMOVAL,
    Damage,
    JournalFormatError,
    Log,
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

#: ``Journal._size`` of a file the journal did not read (it failed at start before it could):
#: what of it to keep is decided when the rewrite reads it (:meth:`Journal._kept_bytes`).
_UNREAD = -1
_FAILING: Final = JournalHealth.FAILING  # a global: the request path compares with it


class Journal:
    """The journal file: appended to per read from the broker, synced and compacted on a
    timer; its health (:mod:`nvpair_wm.journal.health`) says whether it appends, compacts or
    fails. Made by :func:`open_journal`."""

    def __init__(
        self, path: Path, *, limits: JournalLimits, table: TableLimits, wall: float
    ) -> None:
        self.path = path
        self.limits = limits
        self.table_limits = table
        self.health = Health(limits.retry_backoff, limits.retry_backoff_max)
        self._fd = -1  # the log, open for appending while the health says so
        self._lock = -1  # the directory, flocked: one process per journal
        self._retired = -1  # INSTALLED: the replaced log's descriptor, for the group commit
        self._size = _UNREAD  # bytes in the file
        self._kept = 0  # records written by the last compaction
        self._appended = 0  # records appended since
        self._dirty = False
        self._compacted_at = wall
        self._min_ttl = min(table.terminal_ttl, table.live_ttl, table.tombstone_ttl)
        # What was forwarded to the broker while failing (the table cannot say it), folded, for
        # the rewrite; and how many items were folded into it since it was last refolded.
        self._held: Fold | None = None
        self._held_applied = 0
        # What :meth:`forward_later` was given, for :meth:`flush` (one record for all of it).
        self._pending: list[Forwarded] = []

    def open(self, wall: float) -> list[Record]:
        """Lock, read, check and (when damaged, of an older format or new) rewrite the file:
        the records to reload, oldest first. A failure of any step turns the journal to
        failing, as a failure later does: it is retried, and the rewrite keeps what the file
        holds (:meth:`recover`). Raises :class:`JournalFormatError` for a newer format."""
        path = self.path
        try:
            self._lock = lock_directory(path.parent)
        except OSError as exc:
            self._fail("lock", exc)
            return []
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        except OSError as exc:
            self._fail("read", exc)
            return []
        with contextlib.suppress(OSError):  # a compaction's, cut short by a crash: never installed
            temp_of(path).unlink()
        try:
            contents = read_log(data, path)  # a newer format: left as it is, the node stops
        except JournalFormatError:
            close_quietly(self._lock)
            self._lock = -1
            raise
        records, damage = contents.records, contents.damage
        if damage is not None:
            if damage.torn:
                _move_aside(path, damage, f"kept the {len(records)} records before it", wall)
            else:
                _move_aside(path, damage, "starting empty", wall)
                records = []
        # A sound file of this format is reloaded as it is (reload_table skips what has expired;
        # the first compaction, in a child process, folds its tail): a start reads and reloads,
        # nothing more. A damaged file, an older format or none is written anew, compacted.
        tail = contents.tail
        what = "open"
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
                records = Fold(records).compacted(wall, self.table_limits)
                encoded = encode_log(records)
                size, kept, tail = len(encoded), len(records), 0
                what = "write"  # the temporary file, fsynced
                tmp = write_temp(path, encoded)
                what = "install"  # renamed over the log, the directory fsynced, opened
                fd = install(tmp, path)
        except OSError as exc:
            # The table gets the records; what it cannot give back (the origin of what was
            # forwarded to the broker) is held for the rewrite, as while failing.
            self._hold(rec for rec in records if rec.forwarded)
            self._fail(what, exc)
            return records
        self._fd, self._size, self._kept = fd, size, kept
        self._appended = tail  # what follows the checkpoint counts toward the next compaction
        self.health.move(Event.OPENED)
        return records

    def set_limits(self, limits: JournalLimits) -> None:
        """New knobs (a configuration reload; ``enabled`` needs a restart): the next sync,
        compaction check and rewrite attempt use them."""
        self.limits = limits
        self.health.set_backoff(limits.retry_backoff, limits.retry_backoff_max)

    @property
    def active(self) -> bool:
        """Whether records go to the file."""
        return self.health.appending

    @property
    def healthy(self) -> bool:
        return self.health.state is not JournalHealth.FAILING

    @property
    def failing_since(self) -> float | None:
        """Unix time of the first failure of the current failing run (None: not failing)."""
        return self.health.failing_since

    @property
    def last_error(self) -> str | None:
        """What failed last, and why, while failing."""
        return self.health.last_error

    def recovery_delay(self, now: float) -> float | None:
        """Seconds until the next rewrite attempt is due (0: now), or None when healthy.
        ``now``: monotonic."""
        return self.health.recovery_delay(now)

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
        health = self.health
        if health.state is not JournalHealth.FAILING:
            return True
        events, removals = table.originated()
        data, count = encode_outbounds(events, wall)
        rest = [Record(REMOVAL, wall, r.origin, r.workload_id, r.run_id or "") for r in removals]
        rest += self._held_records(table, wall)
        data += b"".join(map(encode_record, rest))
        count += len(rest)
        try:
            if self._lock < 0:  # it failed at start before it held the directory
                self._lock = lock_directory(self.path.parent)
            before = self._kept_bytes(wall)
            fd = install(write_temp(self.path, before + data), self.path)
        except OSError as exc:
            health.fail(f"rewrite: {_reason(exc)}", wall, now)
            log.debug(
                "journal: rewriting %s failed (%s); again in %.3g s",
                self.path,
                _reason(exc),
                health.retry_at - now,
            )
            return False
        with contextlib.suppress(OSError):  # a compaction's temporary file, if one was left
            temp_of(self.path).unlink()
        log.warning(
            "journal: writing %s works again after %.1f s; rewrote the current state (%d records)",
            self.path,
            max(0.0, wall - (health.failing_since or wall)),
            count,
            extra={"records": count},
        )
        if self._size == _UNREAD:  # what of the file's own records was kept counts as appended
            count += len(read_log(before).records)
        self._fd = fd
        self._size = len(before) + len(data)
        self._appended += count
        self._dirty = False
        self._held, self._held_applied = None, 0
        health.recovered()
        return True

    def _kept_bytes(self, wall: float) -> bytes:
        """What of the file stays ahead of a rewrite: the records this journal wrote before it
        failed (a write cut short by the failure left a torn tail, which is dropped); or, when
        it failed at start before reading the file, the file's whole records of this format (a
        file it cannot use, damaged or of another format, is moved aside first); or the header
        alone (the table's state is all there is)."""
        size = self._size
        try:
            with self.path.open("rb") as f:
                before = f.read() if size == _UNREAD else f.read(size)
        except FileNotFoundError:
            return HEADER
        if size != _UNREAD:
            if len(before) != size or not before.startswith(HEADER):
                return HEADER  # not the file the journal wrote: the table's state alone
            return before
        if not before:
            return HEADER
        try:
            contents = read_log(before, self.path)
        except JournalFormatError as exc:
            contents = Log([], Damage(0, str(exc), False), FORMAT, 0)
        damage = contents.damage
        if contents.version == FORMAT and (damage is None or damage.torn):
            whole = before if damage is None else before[: damage.offset]
            return whole if whole.startswith(HEADER) else HEADER
        if damage is None:
            damage = Damage(0, f"format {contents.version}, not rewritten at start", False)
        _move_aside(self.path, damage, "rewriting the current state without it", wall)
        return HEADER

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
        after what :meth:`append_forwarded` left for :meth:`flush` (the file keeps their order).
        Not while failing: the table holds them, and the rewrite writes them."""
        if self.health.appending:
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
        if self.health.appending:
            self._write(*encode_forwarded(items, at))
            if self.health.appending:  # written (else the write failed: held, below)
                return
        if self.health.state is _FAILING:
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
        if fd < 0 or not count:  # closed by a failure of the flush before it
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
        if not self.health.appending or not self._dirty:
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
        if not self.health.appending or not self._dirty:
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
        fd, self._retired = self._retired, -1
        return fd if fd >= 0 else None

    def directory_to_sync(self) -> Path | None:
        """The journal's directory when a rename in it (a compaction installed with
        ``sync=False``) is not yet durable: for :func:`fsync_directory` in a worker thread
        (whose failure, :meth:`sync_failed`, turns the journal to failing)."""
        if self.health.state is not JournalHealth.INSTALLED:
            return None
        self.health.move(Event.COMMITTED)
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
        if self.health.state is not JournalHealth.OK or not self._appended:
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
        if self.health.state is not JournalHealth.OK:
            return None
        self.health.move(Event.BEGAN)
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
        health = self.health
        failed = job.error is not None or job.failure is not None
        appending = health.state is JournalHealth.COMPACTING  # not failing since it began
        if failed or job.unchanged or not appending:
            health.move(Event.ENDED)
        if job.unchanged and not failed and appending:
            self._kept, self._appended = job.kept, self._appended - job.appended
            self._compacted_at = job.wall
            log.debug("journal: compacted %s: %d records, nothing to drop", self.path, job.kept)
            return
        tmp = job.temp
        if failed or not appending:
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
        old = self._fd
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
            if platforms.WINDOWS and old >= 0:  # an open file cannot be replaced there
                close_quietly(old)
                self._fd = old = -1
            fd = install(tmp, self.path, sync=sync)
        except OSError as exc:
            self._fail("compact", exc)
            return
        health.move(Event.INSTALLED)
        if sync or old < 0:
            if old >= 0:
                close_quietly(old)
            health.move(Event.COMMITTED)
        else:  # the last descriptor of the old log: closing it frees it (~20 ms for 170 MB)
            self._retired = old
        self._fd = fd
        self._size = job.size + len(since)
        self._kept, self._appended = job.kept, self._appended - job.appended
        self._dirty = not sync
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
        self.health.move(Event.ENDED)
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
        if self.health.appending:
            self.sync()
        if self._fd >= 0:
            close_quietly(self._fd)
            self._fd = -1
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1
        self.health.move(Event.CLOSED)

    def _fail(self, what: str, exc: OSError) -> None:
        """Opening, a write, an fsync or a compaction's install failed: stop appending (the log
        now misses records) and rewrite it whole once writing works again (:meth:`recover`,
        with backoff). The same path for every failure, at start or later."""
        reason = _reason(exc)
        if self.health.fail(f"{what}: {reason}", time.time(), time.monotonic()):
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
        for fd in (self._fd, self._retired):
            if fd >= 0:
                close_quietly(fd)
        self._fd = self._retired = -1


def _reason(exc: OSError) -> str:
    if isinstance(exc, BlockingIOError):  # the directory's flock
        return "in use by another process"
    return exc.strerror or str(exc)


def _move_aside(path: Path, damage: Damage, outcome: str, wall: float) -> None:
    """Move a damaged (or otherwise unusable) journal aside for inspection, in one line."""
    aside = path.with_name(f"{JOURNAL_FILE}.damaged-{int(wall)}")
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


def open_journal(
    directory: Path, limits: JournalLimits, table: TableLimits, wall: float
) -> tuple[Journal | None, list[Record]]:
    """The journal in ``directory``, opened (:meth:`Journal.open`: healthy, or failing and
    retrying), and the records to reload, oldest first; None when configuration turned it off.
    Raises :class:`JournalFormatError` for a file of a newer format."""
    if not limits.enabled:
        return None, []
    journal = Journal(directory / JOURNAL_FILE, limits=limits, table=table, wall=wall)
    return journal, journal.open(wall)
