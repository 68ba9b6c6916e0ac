"""What this node originated, kept on disk so that a ``kill -9`` forgets nothing.

A node replays to its peers (as the convergence snapshot, :mod:`nvpair_wm.sync`) the newest
event of every workload its broker reported and its broker's removals. Without this module that
state lived only in the process: events queued for an unreachable peer died with it, and a
restarted node's table was empty, so no snapshot ever carried them. The journal keeps exactly
that state, **``CLUSTER_DIR/journal.log``**, reloads it into the workload table at start (before
the first connection, so every peer's first snapshot carries it) and rewrites it compacted.

Mechanism: **an append-only log of checksummed records, with compaction**, rather than SQLite.

* The write path is one ``os.write`` per read from the broker (all the events and removals of
  the lines it delivered, a few hundred bytes each, already encoded: the body is the frame the
  table keeps for replay), done synchronously once those lines are dispatched, before their
  replies are queued for the broker (:mod:`nvpair_wm.local`). That is all a
  ``kill -9`` needs: the bytes are in the kernel once ``write`` returns. SQLite in WAL mode would
  cost a transaction per line (a B-tree update, WAL frame, lock and header work, several times
  the bytes) for the same guarantee, and its delete-on-expiry would need the table to report
  every eviction; here expiry and caps are applied by rewriting, which the table's TTLs make
  rare. ``bench/journal.py`` measures the cost (``python -m bench --only journal``).
* **fsync** (power failure, not process crash) is a group commit: at most every
  :attr:`JournalLimits.fsync_interval` seconds (default 1 s) if anything was written, in a
  worker thread (the loop does not wait for the disk).
  So a process crash loses nothing that was answered; a power failure loses at most the last
  ``fsync_interval`` of events (plus the record being written). ``fsync_interval = 0`` syncs
  every write on the loop before the reply is sent (durable on power failure, at the cost of
  one fsync per read from the broker).
* **Size** follows the table's own bounds. Compaction folds the log (the last record of each
  workload wins; a removal drops the events it covers), drops what the table would have
  forgotten by now (a record whose TTL, ``terminal_ttl`` / ``live_ttl`` / ``tombstone_ttl`` by
  its class, has passed since it was written) and keeps the newest ``max_workloads`` events and
  ``max_tombstones`` removals. It runs at start (when there is anything to drop), when the
  records appended since the last compaction reach :attr:`JournalLimits.compact_growth` (default
  3) times those it kept (and at least :attr:`JournalLimits.compact_min_records`) and at least
  half of them are garbage by the table's count (the file holds that many more records than the
  table has workloads and tombstones: a log of distinct workloads is not rescanned just because
  it grew), and once per shortest TTL if anything was appended. So the file holds at most about
  ``(1 + compact_growth) (max_workloads + max_tombstones) + compact_min_records`` records (for a
  ``compact_growth`` of at least 1; twice the caps below that, by the garbage rule), and each
  compaction is paid for by ``compact_growth`` times as many appends (amortised O(1) per event).
  A compaction (:class:`Compaction`) reads the log as it was when it began and writes the result
  to a temporary file (records are folded by their keys, their bytes copied, bodies never
  decoded), while the loop goes on appending to the log. The node runs that part in a **child
  process** (:mod:`nvpair_wm.compactor`: a fresh interpreter, so that the fold's pure Python on
  a busy node does not hold the GIL against the event loop), killed after
  :attr:`JournalLimits.compaction_timeout` and when the node stops; a child that dies is one
  warning line, the log stays as it was and the next check retries. What was appended meanwhile
  is copied over in a worker thread (:meth:`Compaction.catch_up`), then, back on the loop, the
  rest, and the file is renamed over the log; the node's group commit fsyncs the file and the
  directory right after, in a worker thread (:meth:`Journal.compact`, and a node with
  ``fsync_interval = 0``, fsync before the rename). A crash at any point leaves one whole file
  or the other (after a power failure, less what the group commit had not synced yet, as ever);
  a temporary file left by a crash is removed at the next start. A compaction that would keep
  every record in its place (distinct workloads, none expired) writes nothing: the log already
  is its compaction, and it counts as one. :meth:`Journal.compact` runs a whole compaction on
  the calling thread.
* **Damage** is detected, reported in one warning line and never fatal: every record carries
  its length and a CRC-32. A **torn tail** (the file ends inside a record, the last record fails
  its checksum, or the tail is zeros: what a power failure during an append leaves) keeps every
  whole record before it, which is what was written before the tear. Anything else (a bad
  header, a record in the middle failing its checksum, an impossible length) means the file
  cannot be trusted: the node starts with an empty journal. Either way the damaged file is moved
  aside (``journal.log.damaged-<unix time>``) for inspection and a fresh one is written; a file
  that cannot be read or written at start disables the journal with one line (the node still
  relays).
* **A write that fails later** (a full disk: ENOSPC, EIO) is one error line; the journal stops
  appending, says so in ``manager:status`` and the metrics (failing since when, why), and
  retries with backoff (``retry_backoff`` doubling to ``retry_backoff_max``) to rewrite the log
  whole from the table (:meth:`Journal.recover`, a compaction of the table's state rather than
  the file's), so a crash after writing works again loses nothing written meanwhile.
* **One process per journal**: the directory is ``flock``ed while the journal is open (the
  daemon also refuses a second process on its cluster directory before it starts, dirlock.py);
  a second journal on the same directory stays off and says so, rather than rewriting the first
  one's file under it.

Reloading keeps each record's age: it is written with the wall-clock time of its event, and is
put back into the table at ``monotonic now - age``, so TTLs run on from where they were (a
clock that jumped backwards counts as age 0). Ages are wall-clock ages (the only clock that
survives a reboot): a wall clock stepped forward by more than a TTL makes records look expired,
and the next compaction drops them from the file while the table still holds them (a crash
after that would lose them).

What the broker still owns: events it sent that the node never wrote (the process died while
reading them), and anything newer than the journal after a power failure. The contract says so:
after ``ready`` a broker re-reports the newest event of each workload it holds (a duplicate is
free) and its recent removals.

The record codec and the fold (:func:`encode_record`, :func:`decode_log`, :class:`Fold`) are
sans-IO: bytes and times in, records out. :class:`Journal` and :func:`open_journal` are the
thin file shell.

File format: the 8-byte header ``NVWMJNL\\x01``, then records: ``u32 length, u32 crc32`` of the
payload, then the payload ``u8 kind (1 live event, 2 terminal event, 3 removal), f64 unix time,
3 x u32 lengths`` of originatedFrom, id and runId (``""``: a removal covering every run), those
three UTF-8 strings, and (events) the encoded lifecycle frame. Little-endian.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import logging
import math
import os
import struct
import sys
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, NamedTuple, TypeVar

from nvpair_wm import codec
from nvpair_wm.dedup import MAX_TOMB_RUNS, TableLimits, WorkloadTable
from nvpair_wm.events import FRAME_OF, LIFECYCLE_TYPES, TERMINAL, Outbound, translate

log = logging.getLogger(__name__)

__all__ = [
    "JOURNAL_FILE",
    "Compaction",
    "Damage",
    "Fold",
    "Journal",
    "JournalLimits",
    "Record",
    "Span",
    "close_quietly",
    "decode_log",
    "encode_record",
    "fsync_and_close",
    "fsync_directory",
    "open_journal",
    "record_of",
    "reload_table",
    "scan_log",
]

JOURNAL_FILE: Final = "journal.log"
HEADER: Final = b"NVWMJNL\x01"

LIVE: Final = 1
TERMINAL_EVENT: Final = 2
REMOVAL: Final = 3
_EVENT_KINDS: Final = (LIVE, TERMINAL_EVENT)

_FRAME = struct.Struct("<II")  # payload length, CRC-32 of the payload
_FIELDS = struct.Struct("<BdIII")  # kind, unix time, lengths of origin, id, runId
#: No record is longer: a body is one encoded frame (the frame limit is 1 MiB), so a length
#: past this is damage, not a record.
MAX_RECORD: Final = 16 * 1024 * 1024

# An encoded lifecycle frame starts with its method (msgspec writes the tag first), which
# tells the record's class without decoding it; tests/test_journal.py checks this holds.
_TERMINAL_PREFIXES: Final = tuple(
    b'{"method":"' + str(FRAME_OF[state].__struct_config__.tag).encode() + b'"'
    for state in sorted(TERMINAL)
)


@dataclass(frozen=True, slots=True)
class JournalLimits:
    """The journal's knobs (off: no journal even with a cluster dir).

    ``fsync_interval`` (seconds): the group commit's period; 0: fsync every write before the
    broker gets its reply. Compaction is checked on the same timer, or every
    ``compaction_check_interval`` seconds when ``fsync_interval`` is 0.
    ``compact_min_records``: the log is not compacted below this many appended records.
    ``compact_growth``: the appends since the last compaction that make the next one due, as a
    multiple of the records it kept (1: as many; 0: ``compact_min_records`` alone decides);
    the larger, the rarer the compactions and the larger the file (see the module docstring).
    ``compaction_timeout`` (seconds): a compaction child running longer is killed (one warning;
    the journal appends on and the next check retries)."""

    enabled: bool = True  # keep journal.log in the cluster dir (a restart forgets nothing)
    fsync_interval: float = 1.0  # group commit period; 0: fsync every write before the answer
    compaction_check_interval: float = 1.0  # when fsync_interval is 0
    compact_min_records: int = 4096  # appended records before a compaction is worth it
    compact_growth: float = 3.0  # compact once appends reach this many times what the last one kept
    compaction_timeout: float = 60.0  # a compaction child running longer is killed; next retries
    retry_backoff: float = 0.5  # after a failed write: first pause before rewriting the state
    retry_backoff_max: float = 30.0  # longest pause between two rewrite attempts


class Record(NamedTuple):
    """One journal record: an event this node originated (``body`` its encoded frame) or one of
    its removals (``run`` is ``""`` when the removal covers every run). A tuple: a start or a
    compaction makes one per record, and a tuple is the cheapest to make."""

    kind: int
    at: float
    origin: str
    wid: str
    run: str
    body: bytes = b""

    @property
    def is_removal(self) -> bool:
        return self.kind == REMOVAL


class Span(NamedTuple):
    """A record as a compaction sees it: its keys, undecoded, and where it lies in the file."""

    kind: int
    at: float
    origin: bytes
    wid: bytes
    run: bytes
    start: int
    end: int

    @property
    def is_removal(self) -> bool:
        return self.kind == REMOVAL


@dataclass(frozen=True, slots=True)
class Damage:
    """Where and how a log is damaged; ``torn``: a torn tail (the records before it stand)."""

    offset: int
    reason: str
    torn: bool


# -- the record codec (sans-IO) ----------------------------------------------------------------


def record_of(out: Outbound, at: float) -> Record:
    """The record of an outbound item (an event or a removal) published at unix time ``at``."""
    origin, wid, run = out.key
    if out.seq == float("inf"):  # a removal (see sync.REMOVAL_SEQ)
        return Record(REMOVAL, at, origin, wid, run)
    kind = TERMINAL_EVENT if out.body.startswith(_TERMINAL_PREFIXES) else LIVE
    return Record(kind, at, origin, wid, run, out.body)


def encode_record(rec: Record) -> bytes:
    o, w, r = rec.origin.encode(), rec.wid.encode(), rec.run.encode()
    payload = b"".join((_FIELDS.pack(rec.kind, rec.at, len(o), len(w), len(r)), o, w, r, rec.body))
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


_INF: Final = float("inf")


def encode_outbounds(items: Iterable[Outbound], at: float) -> tuple[bytes, int]:
    """The records of several outbound items, in order, as one string, and how many there are:
    ``encode_record(record_of(out, at))`` for each, joined, in one pass (no call per record, the
    header joined with the payload once, with all the others). What the journal appends per
    read from the broker."""
    parts: list[bytes] = []
    add = parts.append
    fields, frame, crc32, join = _FIELDS.pack, _FRAME.pack, zlib.crc32, b"".join
    terminal = _TERMINAL_PREFIXES
    for out in items:
        origin, wid, run = out.key
        o, w, r = origin.encode(), wid.encode(), run.encode()
        if out.seq == _INF:  # a removal (see sync.REMOVAL_SEQ)
            payload = join((fields(REMOVAL, at, len(o), len(w), len(r)), o, w, r))
        else:
            body = out.body
            kind = TERMINAL_EVENT if body.startswith(terminal) else LIVE
            payload = join((fields(kind, at, len(o), len(w), len(r)), o, w, r, body))
        add(frame(len(payload), crc32(payload)))
        add(payload)
    return join(parts), len(parts) // 2


def encode_outbound(out: Outbound, at: float) -> bytes:
    """``encode_record(record_of(out, at))``: the record of one outbound item."""
    return encode_outbounds((out,), at)[0]


def _parse(payload: bytes) -> Record | str:
    """The record in a payload whose checksum held, or why it is not one."""
    if len(payload) < _FIELDS.size:
        return "record shorter than its fixed fields"
    kind, at, lo, lw, lr = _FIELDS.unpack_from(payload)
    if kind not in (LIVE, TERMINAL_EVENT, REMOVAL):
        return f"unknown record kind {kind}"
    end = _FIELDS.size + lo + lw + lr
    if end > len(payload) or (kind == REMOVAL and end != len(payload)):
        return "record fields do not add up to its length"
    a, b = _FIELDS.size + lo, _FIELDS.size + lo + lw
    keys = _utf8(payload[_FIELDS.size : a], payload[a:b], payload[b:end])
    if keys is None:
        return "record strings are not UTF-8"
    return Record(kind, at, *keys, payload[end:])


def decode_log(data: bytes) -> tuple[list[Record], Damage | None]:
    """Every whole record of a journal file, and the damage that ended the reading, if any."""
    return _walk(data, spans=False)  # type: ignore[return-value]


def scan_log(data: bytes) -> tuple[list[Span], Damage | None]:
    """As :func:`decode_log`, but each record as its keys (bytes, not decoded) and where it lies
    in ``data``: what a compaction needs, at a fraction of the cost."""
    return _walk(data, spans=True)  # type: ignore[return-value]


def _walk(data: bytes, *, spans: bool) -> tuple[list[Record] | list[Span], Damage | None]:
    if not data:
        return [], None
    if not data.startswith(HEADER):
        torn = HEADER.startswith(data)  # a file cut inside its header holds nothing yet
        return [], Damage(0, "no journal header", torn)
    items: list[Any] = []
    append = items.append
    view = memoryview(data)
    unpack_frame, unpack_fields, crc32 = _FRAME.unpack_from, _FIELDS.unpack_from, zlib.crc32
    new = tuple.__new__  # what Span(...) and Record(...) call, without their Python frame
    fsize, hsize = _FRAME.size, _FIELDS.size
    pos, size = len(HEADER), len(data)
    while pos < size:
        # The fast path: a whole, sound record. Anything else is examined by _record_at.
        if size - pos >= fsize + hsize:
            length, crc = unpack_frame(data, pos)
            start = pos + fsize
            end = start + length
            if hsize <= length and end <= size and crc32(view[start:end]) == crc:
                kind, at, lo, lw, lr = unpack_fields(data, start)
                a = start + hsize
                b, c, d = a + lo, a + lo + lw, a + lo + lw + lr
                if d <= end and (kind in _EVENT_KINDS or (kind == REMOVAL and d == end)):
                    o, w, r = data[a:b], data[b:c], data[c:d]
                    # Keys must be UTF-8 in both (ASCII, the usual, is: spans skip the decode).
                    if spans:
                        if (o.isascii() and w.isascii() and r.isascii()) or _utf8(o, w, r):
                            append(new(Span, (kind, at, o, w, r, pos, end)))
                            pos = end
                            continue
                    else:
                        try:  # inline, not _utf8: a start decodes every record
                            origin, wid, run = o.decode(), w.decode(), r.decode()
                        except UnicodeDecodeError:
                            pass
                        else:
                            append(new(Record, (kind, at, origin, wid, run, data[d:end])))
                            pos = end
                            continue
        found = _record_at(data, pos)  # keys that are not UTF-8 too: it names the damage
        if isinstance(found, Damage):
            if data.count(0, pos) == size - pos:  # only zeros from here: never written
                return items, Damage(pos, "zero-filled tail", True)
            return items, found
        return items, Damage(pos, "record the fast path refused", False)  # pragma: no cover
    return items, None


def _utf8(origin: bytes, wid: bytes, run: bytes) -> tuple[str, str, str] | None:
    """A record's keys decoded, or None if one is not UTF-8 (damage, wherever it is read)."""
    try:
        return origin.decode(), wid.decode(), run.decode()
    except UnicodeDecodeError:
        return None


def _record_at(data: bytes, pos: int) -> tuple[Record, int] | Damage:
    """The record at ``pos`` and where the next one starts, or the damage found there."""
    size = len(data)
    if size - pos < _FRAME.size:
        return Damage(pos, "file ends inside a record header", True)
    length, crc = _FRAME.unpack_from(data, pos)
    if length > MAX_RECORD:
        return Damage(pos, f"record length {length} over {MAX_RECORD}", False)
    start, end = pos + _FRAME.size, pos + _FRAME.size + length
    if end > size:
        return Damage(pos, "file ends inside a record", True)
    payload = data[start:end]
    if zlib.crc32(payload) != crc:
        return Damage(pos, "checksum mismatch", end == size)
    rec = _parse(payload)
    if isinstance(rec, str):
        return Damage(pos, rec, False)
    return rec, end


def encode_log(records: Iterable[Record]) -> bytes:
    return HEADER + b"".join(map(encode_record, records))


R = TypeVar("R", Record, Span)


class Fold(Generic[R]):
    """The state a sequence of records leaves, as the table saw it: the last event of each
    (origin, id, runId), and the removals of each (origin, id), one per run as the table's
    tombstone keeps them (the newest ``MAX_TOMB_RUNS``), which dropped the events they
    covered. An event after a removal that covers it means the table had already forgotten the
    tombstone (it applied the event), so the tombstone goes too."""

    __slots__ = ("events", "tombs")

    def __init__(self, records: Iterable[R] = ()) -> None:
        self.events: dict[tuple[str | bytes, str | bytes], dict[str | bytes, R]] = {}
        # (origin, id) → run → its removal
        self.tombs: dict[tuple[str | bytes, str | bytes], dict[str | bytes, R]] = {}
        events, tombs, apply = self.events, self.tombs, self.apply
        for rec in records:  # apply's path for an event of a key without removals, inlined
            if rec.kind != REMOVAL:
                okey = (rec.origin, rec.wid)
                if not tombs or okey not in tombs:
                    runs = events.get(okey)
                    if runs is None:
                        events[okey] = {rec.run: rec}
                    else:
                        runs[rec.run] = rec
                    continue
            apply(rec)

    def apply(self, rec: R) -> None:
        okey = (rec.origin, rec.wid)
        if rec.is_removal:
            runs = self.events.get(okey)
            if runs is not None:
                if rec.run:
                    runs.pop(rec.run, None)
                else:
                    runs.clear()
                if not runs:
                    del self.events[okey]
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
        runs = self.events.get(okey)
        if runs is None:
            self.events[okey] = {rec.run: rec}
        else:
            runs[rec.run] = rec

    def __len__(self) -> int:
        return sum(map(len, self.events.values())) + sum(map(len, self.tombs.values()))

    def compacted(self, now: float, limits: TableLimits) -> list[R]:
        """What is still worth keeping at unix time ``now``: records within their TTL, at most
        the table's caps of each (the newest), oldest first (the order to reload them in)."""
        ttl = {LIVE: limits.live_ttl, TERMINAL_EVENT: limits.terminal_ttl}
        events = [
            rec
            for runs in self.events.values()
            for rec in runs.values()
            if now - rec.at < ttl[rec.kind]
        ]
        tombs = [
            rec
            for runs in self.tombs.values()
            for rec in runs.values()
            if now - rec.at < limits.tombstone_ttl
        ]
        events.sort(key=_at)
        tombs.sort(key=_at)
        kept = events[-limits.max_workloads :] if limits.max_workloads else []
        kept += tombs[-limits.max_tombstones :] if limits.max_tombstones else []
        kept.sort(key=_at)
        return kept


def _at(rec: Record | Span) -> float:
    return rec.at


def reload_table(table: WorkloadTable, records: Iterable[Record], mono: float, wall: float) -> int:
    """Put journal records (oldest first) back into the table, each at ``mono - age``.

    Returns how many records were skipped because their frame no longer decodes (a journal
    written by a version whose contract differed)."""
    skipped = 0
    for rec in records:
        now = mono - max(0.0, wall - rec.at)
        if rec.is_removal:
            table.remove(rec.origin, rec.wid, rec.run or None, now, local=True)
            continue
        decoded = codec.decode(rec.body)
        item = decoded.items[0] if len(decoded.items) == 1 and not decoded.batch else None
        if not isinstance(item, LIFECYCLE_TYPES):
            skipped += 1
            continue
        info = translate(item)
        key = (sys.intern(info.originatedFrom), info.id, sys.intern(info.runId))
        table.observe(info, now, replay=Outbound(key, info.seq, rec.body))
    return skipped


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic garbage collection inside (process-wide; as it was after).

    A fold makes a few tracked objects per record (a key tuple, a dict, the record), hundreds
    of thousands on a busy node, and frees them all by reference counting when it ends. The
    collections their allocation triggers meanwhile found nothing to collect but traversed
    them all again each time: 100-175 ms per full collection, several per compaction, each
    holding the GIL, so that the event loop stalled and a busy link fell to ~2,500 events/s.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# -- the file shell ------------------------------------------------------------------------------


def _write_all(fd: int, data: bytes) -> None:
    n = os.write(fd, data)
    if n == len(data):  # the usual answer for a regular file: no view, no slicing
        return
    view = memoryview(data)[n:]
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


def _write_temp(path: Path, data: bytes) -> Path:
    """``data`` in a fresh, fsynced temporary file next to ``path``."""
    tmp = _temp_of(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


_COPY_CHUNK: Final = 1 << 20


def _copy_range(src: Path, start: int, end: int, dst: Path) -> int:
    """Append bytes ``start:end`` of ``src`` to ``dst`` and fsync it; how many were copied."""
    fin = os.open(src, os.O_RDONLY)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_APPEND)
        try:
            pos = start
            while pos < end:
                chunk = os.pread(fin, min(_COPY_CHUNK, end - pos), pos)
                if not chunk:
                    raise OSError(errno.EIO, f"{src} is shorter than {end} bytes")
                _write_all(fout, chunk)
                pos += len(chunk)
            os.fsync(fout)
        finally:
            os.close(fout)
    finally:
        os.close(fin)
    return end - start


def _install(tmp: Path, path: Path, *, sync: bool = True) -> int:
    """Rename the temporary file over the journal (durably, with ``sync``); an append
    descriptor on it."""
    os.replace(tmp, path)
    if sync:
        _fsync_dir(path.parent)
    return os.open(path, os.O_WRONLY | os.O_APPEND)


def close_quietly(fd: int) -> None:
    """Close a descriptor whose errors no longer matter (any thread)."""
    with contextlib.suppress(OSError):
        os.close(fd)


def fsync_directory(directory: Path) -> OSError | None:
    """fsync a directory from :meth:`Journal.directory_to_sync` (any thread)."""
    try:
        _fsync_dir(directory)
    except OSError as exc:
        return exc
    return None


def fsync_and_close(fd: int) -> OSError | None:
    """fsync a descriptor from :meth:`Journal.sync_descriptor` and close it (any thread)."""
    try:
        os.fsync(fd)
    except OSError as exc:
        return exc
    finally:
        os.close(fd)
    return None


@dataclass(slots=True)
class Compaction:
    """One compaction: :meth:`run` (the heavy part, which may run in another thread or process:
    it reads the log up to ``upto`` and writes only its own temporary file; the node runs it in
    a child process, :mod:`nvpair_wm.compactor`) between :meth:`Journal.begin_compaction` and
    :meth:`Journal.finish_compaction` (on the thread that appends)."""

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
        return _temp_of(self.path)

    def catch_up(self, until: int) -> None:
        """Copy what was appended to the log between ``upto`` and ``until`` (a size the
        appending thread saw: a record boundary) to the temporary file, fsynced; ``upto`` moves
        there. For a worker thread (reads, writes and an fsync: the GIL is free meanwhile), so
        that :meth:`Journal.finish_compaction`, on the thread that appends, copies and syncs
        only what was appended since: a busy node appends tens of MB during a compaction."""
        if self.error or self.failure or self.unchanged or until <= self.upto:
            return
        try:
            copied = _copy_range(self.path, self.upto, until, self.temp)
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
            spans, self.damage = scan_log(data)
            self.read = len(spans)
            kept = Fold(spans).compacted(self.wall, self.table)
            if (
                self.damage is None
                and len(kept) == len(spans)
                and all(k is s for k, s in zip(kept, spans, strict=True))
            ):
                # Every record stays, in the same order: the rewrite would be these very bytes
                # (a log of distinct workloads, as a busy node's often is). Nothing to write.
                self.unchanged = True
                self.kept, self.size = len(kept), len(data)
                return
            view = memoryview(data)
            encoded = HEADER + b"".join([view[s.start : s.end] for s in kept])
            _write_temp(self.path, encoded)
        except OSError as exc:
            self.error = exc
            return
        self.kept, self.size = len(kept), len(encoded)


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
    ) -> None:
        self.path = path
        self.limits = limits
        self.table_limits = table
        self._fd: int | None = fd
        self._lock = lock  # the directory, flocked: one process per journal
        self._size = size  # bytes in the file
        self._kept = kept  # records written by the last compaction
        self._appended = 0  # records appended since
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

    def recover(self, items: Iterable[Outbound], wall: float, now: float) -> bool:
        """Rewrite the log whole from ``items`` (the table's current state: every workload this
        node originated and its removals), as a compaction would, and append to it again: after
        this a crash loses nothing that was written while the journal was failing. Every record
        is stamped ``wall`` (their own times are not in the table), so after a restart they live
        up to one TTL longer than they would have. On failure the next attempt waits twice as
        long (``retry_backoff`` doubling to ``retry_backoff_max``); ``now``: monotonic."""
        if self.failing_since is None:
            return True
        data, count = encode_outbounds(items, wall)
        try:
            fd = _install(_write_temp(self.path, HEADER + data), self.path)
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
            _temp_of(self.path).unlink()
        log.warning(
            "journal: writing %s works again after %.1f s; rewrote the current state (%d records)",
            self.path,
            max(0.0, wall - self.failing_since),
            count,
            extra={"records": count},
        )
        self._fd = fd
        self._size = len(HEADER) + len(data)
        self._kept, self._appended = count, 0
        self._dirty = self._directory_dirty = False
        self._compacted_at = wall
        self.failing_since = self.last_error = None
        self._retry_pause = self.limits.retry_backoff
        return True

    @property
    def size(self) -> int:
        """Bytes in the file: every append so far, each whole."""
        return self._size

    def append(self, items: Iterable[Outbound], at: float) -> None:
        """Write the records of these outbound items (one broker read's) before returning."""
        fd = self._fd
        if fd is None:
            return
        data, count = encode_outbounds(items, at)
        if not count:
            return
        try:
            _write_all(fd, data)
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
                _write_all(fd, since)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            fd = _install(tmp, self.path, sync=sync)
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
        lock = _lock(directory)
    except BlockingIOError:
        log.warning("journal: %s is in use by another process; journal off", path)
        return None, []
    except OSError as exc:
        log.error("journal: cannot open %s (%s); journal off", directory, exc.strerror or exc)
        return None, []
    journal, kept = _open_locked(path, lock, limits, table, wall)
    if journal is None:
        os.close(lock)
    return journal, kept


def _lock(directory: Path) -> int:
    """The directory, flocked for this process (BlockingIOError: another one holds it)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


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
        _temp_of(path).unlink()
    records, damage = decode_log(data)
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
    kept = Fold(records).compacted(wall, table)
    try:
        if data and damage is None and len(kept) == len(records):  # nothing to drop: as it is
            size = len(data)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        else:
            encoded = encode_log(kept)
            size = len(encoded)
            fd = _install(_write_temp(path, encoded), path)
    except OSError as exc:
        log.error("journal: cannot write %s (%s); journal off", path, exc.strerror or exc)
        return None, kept
    journal = Journal(
        path,
        fd,
        lock=lock,
        kept=len(kept),
        size=size,
        limits=limits,
        table=table,
        wall=wall,
    )
    return journal, kept
