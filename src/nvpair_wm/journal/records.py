"""The journal's record format (sans-IO): bytes and times in, records out.

Encoding (what an append and a compaction write), decoding (what a start and a compaction
read, checkpoint records in bulk, the rest one by one, damage named where it is), and the
reader of format 1 (release 0.1.0's, read once and rewritten). The layout is in
``docs/crash-safety.md``; in short:

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
import gc
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

import msgspec

from nvpair_wm import __version__, codec
from nvpair_wm.errors import WmError
from nvpair_wm.events import FRAME_OF, LIFECYCLE_TYPES, STATE_OF, TERMINAL, Forwarded, Outbound

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
EVENT_KINDS: Final = (LIVE, TERMINAL_EVENT, FORWARDED_LIVE, FORWARDED_TERMINAL)
REMOVAL_KINDS: Final = (REMOVAL, FORWARDED_REMOVAL)
ENTRY_KINDS: Final = frozenset((*EVENT_KINDS, *REMOVAL_KINDS))
EVENT_KIND_SET: Final = frozenset(EVENT_KINDS)
FORWARDED_KINDS: Final = frozenset((FORWARDED_LIVE, FORWARDED_TERMINAL, FORWARDED_REMOVAL))
TERMINAL_KINDS: Final = frozenset((TERMINAL_EVENT, FORWARDED_TERMINAL))

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
        return self.kind in REMOVAL_KINDS

    @property
    def forwarded(self) -> bool:
        return self.kind in FORWARDED_KINDS


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
    if kind not in (_V1_KINDS if fields is _FIELDS_V1 else ENTRY_KINDS):
        return f"unknown record kind {kind}"
    end = fields.size + lo + lw + lr
    bodiless = kind in REMOVAL_KINDS or kind in FORWARDED_KINDS
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
                                if kind in ENTRY_KINDS:
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
    kinds = ENTRY_KINDS
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
