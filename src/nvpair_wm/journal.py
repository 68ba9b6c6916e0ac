"""What this node originated, and what it told its broker, kept on disk so that a ``kill -9``
forgets nothing.

A node replays to its peers (as the convergence snapshot, :mod:`nvpair_wm.sync`) the newest
event of every workload its broker reported and its broker's removals. Without this module that
state lived only in the process: events queued for an unreachable peer died with it, and a
restarted node's table was empty, so no snapshot ever carried them. The journal keeps that
state, **``CLUSTER_DIR/journal.log``**, reloads it into the workload table at start (before
the first connection, so every peer's first snapshot carries it) and rewrites it compacted.

It keeps, as durably, what the node **forwarded to its broker** from its peers: the newest
(runId, id, seq) of every workload it upserted and every removal it passed on (no frame: the
table keeps only the seq of a peer's workload). A workload reported over several paths (queued
by its entry node, started and completed by the node it ran on) reaches a restarted node again
in every peer's snapshot; with these records back in the table, a snapshot or retry older than
what the broker already has is stale, and a workload the broker was told is removed stays
removed. They wait in memory until the broker channel's next write, which writes them first,
one record for all of them (:meth:`Journal.flush`): the peer requests whose lines share a write
to the broker (those of one batch of the event loop) share one write to the journal, and the
broker cannot read a line before its record is in the kernel.

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
  workload wins, with a forwarded seq newer than the broker's own event kept beside it; a removal
  drops the events it covers), drops what the table would have forgotten by now (a record whose
  TTL, ``terminal_ttl`` / ``live_ttl`` / ``tombstone_ttl`` by its class, has passed since it was
  written) and keeps the newest ``max_workloads`` workloads' events and ``max_tombstones``
  removals. It runs when the records appended since the last compaction reach
  :attr:`JournalLimits.compact_growth` (default 3) times those it kept (and at least
  :attr:`JournalLimits.compact_min_records`) and at least half of them are garbage by the table's
  count (the file holds that many more records than the table has workloads and tombstones: a log
  of distinct workloads is not rescanned just because it grew), and once per shortest TTL if
  anything was appended. So the file holds at most about ``(1 + compact_growth) (max_workloads +
  max_tombstones) + compact_min_records`` records (for a ``compact_growth`` of at least 1; twice
  the caps below that, by the garbage rule), and each compaction is paid for by ``compact_growth``
  times as many appends (amortised O(1) per event). A compaction (:class:`Compaction`) reads the
  log as it was when it began and writes the result to a temporary file as **checkpoint records**
  (each a few MB of records in one msgpack array under one CRC, decoded in bulk at the next
  start), while the loop goes on appending to the log. The node runs that part in a **child
  process** (:mod:`nvpair_wm.compactor`: a fresh interpreter, so that the fold's pure Python on a
  busy node does not hold the GIL against the event loop), killed after
  :attr:`JournalLimits.compaction_timeout` and when the node stops; a child that dies is one
  warning line, the log stays as it was and the next check retries. What was appended meanwhile is
  copied over in a worker thread (:meth:`Compaction.catch_up`), then, back on the loop, the rest,
  and the file is renamed over the log; the node's group commit fsyncs the file and the directory
  right after, in a worker thread (:meth:`Journal.compact`, and a node with ``fsync_interval =
  0``, fsync before the rename). A crash at any point leaves one whole file or the other (after a
  power failure, less what the group commit had not synced yet, as ever); a temporary file left by
  a crash is removed at the next start. A compaction of checkpoint records alone that drops
  nothing writes nothing: the log already is its compaction, and it counts as one.
  :meth:`Journal.compact` runs a whole compaction on the calling thread.
* **Start** reads and reloads, nothing more: a sound file of this format is not rewritten (the
  table folds the records as it takes them, :func:`reload_table`, and skips those past their
  TTL; what follows the checkpoint records counts toward the next compaction). With the cyclic
  GC paused, a checkpoint of a full table (200,000 workloads) reloads in a fraction of a
  second; records appended since are read one by one, a few times slower each.
  ``bench/journal.py`` measures both.
* **Format version**: the header's last byte. A file of an older format (release 0.1.0 wrote
  format 1, without seq) is read and rewritten in this one at the start; a newer format is
  refused (:class:`JournalFormatError`: one line naming both formats, exit status 2), and the
  file is left as it is: it is not damage, and moving it aside would lose what it holds.
* **Damage** is detected, reported in one warning line and never fatal: every record carries its
  length and a CRC-32 (a checkpoint record, one for all its records). A **torn tail** (the file
  ends inside a record, the last record fails its checksum, or the tail is zeros: what a power
  failure during an append leaves) keeps every whole record before it, which is what was written
  before the tear. Anything else (a bad header, a record in the middle failing its checksum, an
  impossible length) means the file cannot be trusted: the node starts with an empty journal.
  Either way the damaged file is moved aside (``journal.log.damaged-<unix time>``) for inspection
  and a fresh one is written; a file that cannot be read or written at start disables the
  journal with one line (the node still relays).
* **A write that fails later** (a full disk: ENOSPC, EIO) is one error line; the journal stops
  appending, says so in ``manager:status`` and the metrics (failing since when, why), and
  retries with backoff (``retry_backoff`` doubling to ``retry_backoff_max``) to rewrite the log
  whole (:meth:`Journal.recover`): the records written before the failure, the table's state
  of what this node originated, and what was forwarded to the broker meanwhile (folded in
  memory while failing, within the table's caps), so a crash after writing works again loses
  nothing of either.
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

File format 2: the 8-byte header ``NVWMJNL\\x02``, then records: ``u32 length, u32 crc32`` of
the payload, then the payload ``u8 kind`` (1 live event and 2 terminal event the broker
reported, 3 its removal; 4 live and 5 terminal upsert and 6 removal forwarded to the broker;
7 checkpoint; 8 forwarded batch), then for kinds 1-6 ``f64 unix time, 3 x u32 lengths`` of
originatedFrom, id and runId (``""``: a removal covering every run), ``i64 seq`` (0 for a
removal), those three UTF-8 strings, and (kinds 1 and 2) the encoded lifecycle frame; for kind
7, a msgpack array of records, each an array ``[kind, time, originatedFrom, id, runId, frame,
seq]``; for kind 8, ``f64 unix time`` and a msgpack array of what was forwarded, each an array
``[originatedFrom, id, runId, seq, state]`` (read as records of kinds 4-6, by the state:
``"removed"``, a terminal state, or another). Little-endian.
Format 1 (``NVWMJNL\\x01``): kinds 1-3 without the seq field.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import logging
import math
import os
import struct
import sys
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

import msgspec

from nvpair_wm import __version__, codec, platforms
from nvpair_wm.dedup import MAX_TOMB_RUNS, TableLimits, WorkloadTable
from nvpair_wm.errors import WmError
from nvpair_wm.events import FRAME_OF, LIFECYCLE_TYPES, STATE_OF, TERMINAL, Forwarded, Outbound

log = logging.getLogger(__name__)

__all__ = [
    "JOURNAL_FILE",
    "Compaction",
    "Damage",
    "Fold",
    "Journal",
    "JournalFormatError",
    "JournalLimits",
    "Log",
    "Record",
    "close_quietly",
    "decode_log",
    "encode_record",
    "fsync_and_close",
    "fsync_directory",
    "open_journal",
    "read_log",
    "record_of",
    "reload_table",
    "reload_table_one_by_one",
]

JOURNAL_FILE: Final = "journal.log"
MAGIC: Final = b"NVWMJNL"
#: The file format this build writes. 1: release 0.1.0 (events and removals this node's broker
#: reported, no seq in the record); 2: the seq in every record, what the node forwarded to its
#: broker, and checkpoint records. Every older format is read; a newer one is refused.
FORMAT: Final = 2
HEADER: Final = MAGIC + bytes([FORMAT])

LIVE: Final = 1  # an event this node's broker reported: queued or running
TERMINAL_EVENT: Final = 2  # ... completed, failed or cancelled
REMOVAL: Final = 3  # a removal this node's broker reported
FORWARDED_LIVE: Final = 4  # an upsert this node sent its broker (a peer's event): queued, running
FORWARDED_TERMINAL: Final = 5  # ... completed, failed or cancelled
FORWARDED_REMOVAL: Final = 6  # a removal this node sent its broker (a peer's)
CHECKPOINT: Final = 7  # many records at once, as a compaction wrote them (format 2)
FORWARDED_BATCH: Final = 8  # the forwarded records of one write to the broker (format 2)
_EVENT_KINDS: Final = (LIVE, TERMINAL_EVENT, FORWARDED_LIVE, FORWARDED_TERMINAL)
_REMOVAL_KINDS: Final = (REMOVAL, FORWARDED_REMOVAL)
_ENTRY_KINDS: Final = frozenset((*_EVENT_KINDS, *_REMOVAL_KINDS))
_EVENT_KIND_SET: Final = frozenset(_EVENT_KINDS)
_FORWARDED_KINDS: Final = frozenset((FORWARDED_LIVE, FORWARDED_TERMINAL, FORWARDED_REMOVAL))
_TERMINAL_KINDS: Final = frozenset((TERMINAL_EVENT, FORWARDED_TERMINAL))

_FRAME = struct.Struct("<II")  # payload length, CRC-32 of the payload
_FIELDS = struct.Struct("<BdIIIq")  # kind, unix time, lengths of origin, id, runId; seq
_FIELDS_V1 = struct.Struct("<BdIII")  # format 1: no seq
_V1_KINDS: Final = (LIVE, TERMINAL_EVENT, REMOVAL)
#: No record is longer: a body is one encoded frame (the frame limit is 1 MiB), and a
#: checkpoint record holds at most CHECKPOINT_BYTES of entries plus one, so a length past this
#: is damage, not a record.
MAX_RECORD: Final = 16 * 1024 * 1024
#: A compaction writes its records as checkpoint records of about this many bytes each (one
#: CRC and one bulk decode per checkpoint record instead of per entry: what makes a start fast).
CHECKPOINT_BYTES: Final = 4 * 1024 * 1024

# An encoded lifecycle frame starts with its method (msgspec writes the tag first), which
# tells the record's class without decoding it; tests/test_journal.py checks this holds.
_TERMINAL_PREFIXES: Final = tuple(
    b'{"method":"' + str(FRAME_OF[state].__struct_config__.tag).encode() + b'"'
    for state in sorted(TERMINAL)
)


class JournalFormatError(WmError):
    """The journal was written in a format this build does not know (a newer release): it is
    neither read nor moved aside; the node does not start (exit status 2)."""

    def __init__(self, path: Path, found: int) -> None:
        super().__init__(
            f"journal {path} is format {found}, newer than format {FORMAT} that this build "
            f"(nvpair-wm {__version__}) reads: run a release that reads format {found}, or "
            "move the file away to start with an empty journal"
        )
        self.found = found


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
    """One journal record: an event this node's broker reported (``body`` its encoded frame) or
    one of its removals, or an upsert or removal this node forwarded to its broker (no body:
    its key and seq are what a restart needs to refuse what the broker already has). ``run`` is
    ``""`` when a removal covers every run; ``seq`` is 0 for a removal. A tuple: a start or a
    compaction makes one per record, and a tuple is the cheapest to make (and what a
    checkpoint record decodes to, in bulk)."""

    kind: int
    at: float
    origin: str
    wid: str
    run: str
    body: bytes = b""
    seq: int = 0

    @property
    def is_removal(self) -> bool:
        return self.kind in _REMOVAL_KINDS

    @property
    def forwarded(self) -> bool:
        return self.kind in _FORWARDED_KINDS


@dataclass(frozen=True, slots=True)
class Damage:
    """Where and how a log is damaged; ``torn``: a torn tail (the records before it stand)."""

    offset: int
    reason: str
    torn: bool


class Log(NamedTuple):
    """What a journal file holds: its records in order, the damage that ended the reading (if
    any), its format, and how many of its records follow its checkpoint records (appended
    since the last compaction)."""

    records: list[Record]
    damage: Damage | None
    version: int
    tail: int


# -- the record codec (sans-IO) ----------------------------------------------------------------


def record_of(out: Outbound, at: float) -> Record:
    """The record of an outbound item (an event or a removal) published at unix time ``at``."""
    origin, wid, run = out.key
    if out.seq == _INF:  # a removal (see sync.REMOVAL_SEQ)
        return Record(REMOVAL, at, origin, wid, run)
    kind = TERMINAL_EVENT if out.body.startswith(_TERMINAL_PREFIXES) else LIVE
    return Record(kind, at, origin, wid, run, out.body, int(out.seq))


#: A forwarded item's record kind by its state: every state a lifecycle method gives, and
#: ``"removed"``. One map for writing and reading: a state not in it is a bug when written and
#: damage when read.
_KIND_OF_STATE: Final = {
    state: FORWARDED_TERMINAL if state in TERMINAL else FORWARDED_LIVE
    for state in STATE_OF.values()
} | {"removed": FORWARDED_REMOVAL}


def forwarded_record(item: Forwarded, at: float) -> Record:
    """The record of an upsert or removal forwarded to the broker at unix time ``at``
    (``KeyError`` for a state no record kind holds)."""
    kind = _KIND_OF_STATE[item.state]
    # What Record(...) does, without its Python frame: a start reads many of these.
    return tuple.__new__(Record, (kind, at, item.origin, item.wid, item.run, b"", item.seq))


def encode_record(rec: Record) -> bytes:
    if rec.kind == CHECKPOINT:
        raise ValueError("a checkpoint record is written by encode_log")
    o, w, r = rec.origin.encode(), rec.wid.encode(), rec.run.encode()
    fields = _FIELDS.pack(rec.kind, rec.at, len(o), len(w), len(r), rec.seq)
    payload = b"".join((fields, o, w, r, rec.body))
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
        seq = out.seq
        if seq == _INF:  # a removal (see sync.REMOVAL_SEQ)
            payload = join((fields(REMOVAL, at, len(o), len(w), len(r), 0), o, w, r))
        else:
            body = out.body
            kind = TERMINAL_EVENT if body.startswith(terminal) else LIVE
            payload = join((fields(kind, at, len(o), len(w), len(r), int(seq)), o, w, r, body))
        add(frame(len(payload), crc32(payload)))
        add(payload)
    return join(parts), len(parts) // 2


def encode_outbound(out: Outbound, at: float) -> bytes:
    """``encode_record(record_of(out, at))``: the record of one outbound item."""
    return encode_outbounds((out,), at)[0]


def encode_forwarded(items: Sequence[Forwarded], at: float) -> tuple[bytes, int]:
    """What was forwarded to the broker (the items of one write to it) as one forwarded-batch
    record, and how many records it holds (``b""`` and 0 for none): read back, the records
    ``forwarded_record(item, at)`` of each, in order. One record, encoded by msgspec in one
    call, however many items: what each peer request costs the journal."""
    if not items:
        return b"", 0
    payload = _BATCH_HEAD.pack(FORWARDED_BATCH, at) + _BATCH_ENCODER.encode(items)
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload, len(items)


def _parse(payload: bytes, fields: struct.Struct) -> Record | str:
    """The record in a payload whose checksum held, or why it is not one."""
    if len(payload) < fields.size:
        return "record shorter than its fixed fields"
    kind, at, lo, lw, lr, *seq = fields.unpack_from(payload)
    if kind not in (_V1_KINDS if fields is _FIELDS_V1 else _ENTRY_KINDS):
        return f"unknown record kind {kind}"
    end = fields.size + lo + lw + lr
    bodiless = kind in _REMOVAL_KINDS or kind in _FORWARDED_KINDS
    if end > len(payload) or (bodiless and end != len(payload)):
        return "record fields do not add up to its length"
    a, b = fields.size + lo, fields.size + lo + lw
    keys = _utf8(payload[fields.size : a], payload[a:b], payload[b:end])
    if keys is None:
        return "record strings are not UTF-8"
    return Record(kind, at, *keys, payload[end:], seq[0] if seq else _seq_of(payload[end:]))


def _seq_of(body: bytes) -> int:
    """The seq of a format-1 event record (its frame decoded: format 1 kept no seq), 0 for a
    removal or a frame that no longer decodes (reload_table skips it)."""
    if not body:
        return 0
    decoded = codec.decode(body)
    item = decoded.items[0] if len(decoded.items) == 1 and not decoded.batch else None
    return int(item.params.workloadInfo.seq) if isinstance(item, LIFECYCLE_TYPES) else 0


def format_of(data: bytes) -> int | None:
    """The format a journal file's header names (None: no header, or not a journal)."""
    if len(data) < len(HEADER) or not data.startswith(MAGIC):
        return None
    return data[len(MAGIC)]


def decode_log(data: bytes) -> tuple[list[Record], Damage | None]:
    """Every whole record of a journal file (checkpoint records expanded), and the damage that
    ended the reading, if any. Raises :class:`JournalFormatError` for a newer format."""
    log_ = read_log(data)
    return log_.records, log_.damage


def read_log(data: bytes, path: Path | None = None) -> Log:
    """As :func:`decode_log`, with the file's format and how many records follow its
    checkpoint records. ``path`` names the file in a :class:`JournalFormatError`."""
    if not data:
        return Log([], None, FORMAT, 0)
    version = format_of(data)
    if version is None or version == 0:
        torn = HEADER.startswith(data)  # a file cut inside its header holds nothing yet
        return Log([], Damage(0, "no journal header", torn), FORMAT, 0)
    if version > FORMAT:
        raise JournalFormatError(path or Path(JOURNAL_FILE), version)
    if version == 1:
        return _walk_v1(data)
    return _walk(data)


_CHECKPOINT_ENCODER: Final = msgspec.msgpack.Encoder()
_CHECKPOINT_DECODER: Final = msgspec.msgpack.Decoder(list[Record])
_BATCH_HEAD: Final = struct.Struct("<Bd")  # kind, unix time
_BATCH_ENCODER: Final = msgspec.msgpack.Encoder()
_BATCH_DECODER: Final = msgspec.msgpack.Decoder(list[Forwarded])


def _walk(data: bytes) -> Log:
    """A format-2 file, record by record: a whole, sound record read here (a start reads every
    record of the journal), anything else examined by :func:`_record_at`."""
    items: list[Record] = []
    append = items.append
    view = memoryview(data)
    unpack_frame, unpack_fields, crc32 = _FRAME.unpack_from, _FIELDS.unpack_from, zlib.crc32
    new = tuple.__new__  # what Record(...) calls, without its Python frame
    fsize, hsize = _FRAME.size, _FIELDS.size
    pos, size = len(HEADER), len(data)
    tail = 0
    with collection_paused():  # hundreds of thousands of records: no collection traverses them
        while pos < size:
            # The fast path: a whole, sound record. Anything else is examined by _record_at.
            if size - pos >= fsize + 1:
                length, crc = unpack_frame(data, pos)
                start = pos + fsize
                end = start + length
                if length >= 1 and end <= size and crc32(view[start:end]) == crc:
                    kind = data[start]
                    if kind == CHECKPOINT:
                        entries = _checkpoint(view[start + 1 : end])
                        if entries is not None:
                            items += entries
                            tail = 0
                            pos = end
                            continue
                    elif kind == FORWARDED_BATCH:
                        entries = _forwarded_batch(view[start:end])
                        if entries is not None:
                            items += entries
                            tail += len(entries)
                            pos = end
                            continue
                    elif hsize <= length:
                        kind, at, lo, lw, lr, seq = unpack_fields(data, start)
                        a = start + hsize
                        b, c, d = a + lo, a + lo + lw, a + lo + lw + lr
                        if d == end or (d < end and (kind in (LIVE, TERMINAL_EVENT))):
                            try:
                                origin = data[a:b].decode()
                                wid = data[b:c].decode()
                                run = data[c:d].decode()
                            except UnicodeDecodeError:
                                pass
                            else:
                                if kind in _ENTRY_KINDS:
                                    body = data[d:end]
                                    append(new(Record, (kind, at, origin, wid, run, body, seq)))
                                    tail += 1
                                    pos = end
                                    continue
            found = _record_at(data, pos, _FIELDS)  # names the damage
            if isinstance(found, Damage):
                if data.count(0, pos) == size - pos:  # only zeros from here: never written
                    return Log(items, Damage(pos, "zero-filled tail", True), FORMAT, tail)
                return Log(items, found, FORMAT, tail)
            return Log(items, Damage(pos, "record the fast path refused", False), FORMAT, tail)
    return Log(items, None, FORMAT, tail)


def _checkpoint(payload: memoryview) -> list[Record] | None:
    """The entries of a checkpoint record's payload (after its kind), or None if they are not
    a list of sound records."""
    try:
        entries = _CHECKPOINT_DECODER.decode(payload)
    except msgspec.DecodeError:
        return None
    kinds = _ENTRY_KINDS
    for rec in entries:
        if rec.kind not in kinds:
            return None
    return entries


def _forwarded_batch(payload: memoryview) -> list[Record] | None:
    """The records of a forwarded-batch record's payload, or None if it does not decode to
    forwarded items of known states."""
    if len(payload) <= _BATCH_HEAD.size:
        return None
    _, at = _BATCH_HEAD.unpack_from(payload)
    try:
        items = _BATCH_DECODER.decode(payload[_BATCH_HEAD.size :])
    except msgspec.DecodeError:
        return None
    try:
        return [forwarded_record(item, at) for item in items]
    except KeyError:  # a state no forwarded record kind holds
        return None


def _walk_v1(data: bytes) -> Log:
    """A format-1 file (release 0.1.0): records without seq, read one by one (its event
    records' frames decoded for their seq). Slow, and only once: a start rewrites it."""
    items: list[Record] = []
    pos, size = len(HEADER), len(data)
    while pos < size:
        found = _record_at(data, pos, _FIELDS_V1)
        if isinstance(found, Damage):
            if data.count(0, pos) == size - pos:
                return Log(items, Damage(pos, "zero-filled tail", True), 1, len(items))
            return Log(items, found, 1, len(items))
        rec, pos = found
        items.append(rec)
    return Log(items, None, 1, len(items))


def _utf8(origin: bytes, wid: bytes, run: bytes) -> tuple[str, str, str] | None:
    """A record's keys decoded, or None if one is not UTF-8 (damage, wherever it is read)."""
    try:
        return origin.decode(), wid.decode(), run.decode()
    except UnicodeDecodeError:
        return None


def _record_at(data: bytes, pos: int, fields: struct.Struct) -> tuple[Record, int] | Damage:
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
    if payload[:1] == bytes([CHECKPOINT]) and fields is _FIELDS:
        return Damage(pos, "checkpoint record does not decode", False)
    if payload[:1] == bytes([FORWARDED_BATCH]) and fields is _FIELDS:
        return Damage(pos, "forwarded-batch record does not decode", False)
    rec = _parse(payload, fields)
    if isinstance(rec, str):
        return Damage(pos, rec, False)
    return rec, end


def encode_log(records: Iterable[Record]) -> bytes:
    """A whole journal file holding ``records`` (in order) as checkpoint records: what a
    compaction writes."""
    parts = [HEADER]
    chunk: list[Record] = []
    size = 0
    for rec in records:
        chunk.append(rec)
        # An upper bound of its encoding: a UTF-8 character is at most 4 bytes; the fields
        # and msgpack's headers under 48. So no checkpoint record passes MAX_RECORD.
        size += len(rec.body) + 4 * (len(rec.origin) + len(rec.wid) + len(rec.run)) + 48
        if size >= CHECKPOINT_BYTES:
            parts.append(_encode_checkpoint(chunk))
            chunk, size = [], 0
    if chunk:
        parts.append(_encode_checkpoint(chunk))
    return b"".join(parts)


def _encode_checkpoint(entries: list[Record]) -> bytes:
    payload = bytes([CHECKPOINT]) + _CHECKPOINT_ENCODER.encode(entries)
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


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
        terminal_kinds = _TERMINAL_KINDS
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
        if kind in _REMOVAL_KINDS:
            table.remove(origin, wid, run or None, now, local=kind == REMOVAL)
            return
        if seq <= 0:  # a format-1 record whose frame no longer decodes
            self.skipped += 1
            return
        terminal = kind in _TERMINAL_KINDS
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
        usual, terminal_kinds, intern = _EVENT_KIND_SET, _TERMINAL_KINDS, sys.intern
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


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic garbage collection inside (process-wide; as it was after).

    A fold makes a few tracked objects per record (a key tuple, a dict, the record), hundreds
    of thousands on a busy node, and frees them all by reference counting when it ends. The
    collections their allocation triggers meanwhile found nothing to collect but traversed
    them all again each time, several full collections per compaction, each holding the GIL
    long enough to stall the event loop and a busy link with it.
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
    platforms.sync_directory(directory)


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
                chunk = platforms.read_at(fin, min(_COPY_CHUNK, end - pos), pos)
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
            fd = _install(_write_temp(self.path, before + data), self.path)
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
        old: int | None = self._fd
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
            if platforms.WINDOWS and old is not None:  # an open file cannot be replaced there
                close_quietly(old)
                self._fd = old = None
            fd = _install(tmp, self.path, sync=sync)
        except OSError as exc:
            self._fail("compact", exc)
            return
        if old is not None and sync:
            close_quietly(old)
        elif old is not None:
            # The last descriptor of the old log: closing it frees it (~20 ms for 170 MB).
            self._retired = old
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
        lock = _lock(directory)
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


def _lock(directory: Path) -> int:
    """The directory, locked for this process (BlockingIOError: another one holds it)."""
    return platforms.lock_directory(directory)


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
            fd = _install(_write_temp(path, encoded), path)
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
