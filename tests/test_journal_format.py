"""The journal's format version and what it keeps of the broker's view (issues 23 and 24).

* The file's header names its format. A journal written by release 0.1.0 (format 1: no seq in
  its records) is read, and rewritten in the current format at the start; a journal of a newer
  format is refused with one line naming both formats (exit status 2 from the daemon), and the
  file is left as it is, never moved aside as damaged.
* What the node forwarded to its broker (the newest (runId, id, seq) of a peer's workload, a
  peer's removal) is journaled before the broker can read it, compacted like the rest, and
  reloaded: after a restart an older snapshot or retry is stale and a removed workload stays
  removed.

Format-1 files are built by hand with ``struct``, as release 0.1.0 wrote them (its record
layout is spelled out below, independently of the code under test), and, where the
repository's history is at hand, by release 0.1.0's own ``journal.py`` read from git.
"""

from __future__ import annotations

import importlib.util
import os
import random
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from nvpair_wm.dedup import Removal, TableLimits, WorkloadTable
from nvpair_wm.dispatch import Dispatcher, outbound_event
from nvpair_wm.endpoint import EventsEndpoint
from nvpair_wm.events import TERMINAL, Forwarded, lifecycle_frame
from nvpair_wm.journal import (
    FORMAT,
    FORWARDED_LIVE,
    FORWARDED_REMOVAL,
    FORWARDED_TERMINAL,
    HEADER,
    JOURNAL_FILE,
    LIVE,
    MAX_RECORD,
    REMOVAL,
    Fold,
    Journal,
    JournalFormatError,
    JournalLimits,
    Record,
    decode_log,
    encode_forwarded,
    encode_log,
    encode_record,
    format_of,
    forwarded_record,
    open_journal,
    read_log,
    reload_table,
)
from tests.support.frames import FINGERPRINT, dumps, event_frame, info, line, remove_frame, workload
from tests.support.wm_process import WmProcess

LIMITS = TableLimits(
    terminal_ttl=10.0, live_ttl=100.0, tombstone_ttl=20.0, max_workloads=50, max_tombstones=50
)
T0 = 1_800_000_000.0
RELEASE_0_1_0 = "17e23f2"  # the commit release 0.1.0 was built from (format 1)


def dispatcher(table: WorkloadTable) -> Dispatcher:
    def no_status() -> Any:
        raise AssertionError("not asked")

    return Dispatcher(table, no_status, clock=lambda: 1000.0)


# -- format 1, as release 0.1.0 wrote it -------------------------------------------------------


def v1_record(kind: int, at: float, key: tuple[str, str, str], body: bytes = b"") -> bytes:
    """One record of format 1: u32 length, u32 CRC-32, then u8 kind, f64 time, three u32
    lengths, the three strings and the body (little-endian; no seq). ``key``: originatedFrom,
    id and runId."""
    o, w, r = (k.encode() for k in key)
    payload = struct.pack("<BdIII", kind, at, len(o), len(w), len(r)) + o + w + r + body
    return struct.pack("<II", len(payload), zlib.crc32(payload)) + payload


def frame_body(wid: str, seq: int, state: str) -> bytes:
    return outbound_event(lifecycle_frame(info(id=wid, seq=seq, state=state))).body


def v1_file() -> bytes:
    return b"NVWMJNL\x01" + b"".join(
        [
            v1_record(1, T0, ("node-a", "1", "run-a"), frame_body("1", 2, "running")),
            v1_record(2, T0 + 1, ("node-a", "2", "run-a"), frame_body("2", 3, "completed")),
            v1_record(3, T0 + 2, ("node-a", "3", "run-a")),
        ]
    )


def test_a_format_1_journal_is_read_and_rewritten_in_the_current_format(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / JOURNAL_FILE
    path.write_bytes(v1_file())
    with caplog.at_level("INFO", logger="nvpair_wm.journal"):
        journal, records = open_journal(tmp_path, JournalLimits(), LIMITS, T0 + 3)
    assert journal is not None
    # Every record, its seq read from its frame (format 1 kept none).
    assert [(r.kind, r.wid, r.seq) for r in records] == [(1, "1", 2), (2, "2", 3), (3, "3", 0)]
    table = WorkloadTable(LIMITS)
    assert reload_table(table, records, mono=100.0, wall=T0 + 3) == 0
    assert (len(table), table.tombstones) == (2, 1)
    # Rewritten once, in this build's format, holding the same records; nothing moved aside.
    data = path.read_bytes()
    assert format_of(data) == FORMAT == 2 and decode_log(data) == (records, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == [JOURNAL_FILE]
    assert any("is format 1; rewriting it in format 2" in m for m in caplog.messages)
    # Appends go on in the current format, after it.
    disp = dispatcher(WorkloadTable(LIMITS))
    submitted = event_frame("workload:submitted", workload(id="9"))
    journal.append(disp.local(line(submitted)).outbound, T0)
    journal.close()
    assert [r.wid for r in decode_log(path.read_bytes())[0]] == ["1", "2", "3", "9"]


def release_journal_module(tmp_path: Path) -> Any:
    """Release 0.1.0's ``nvpair_wm/journal.py``, read from git and loaded under another name
    (its imports are this tree's modules, which kept what it uses)."""
    root = Path(__file__).resolve().parent.parent
    try:
        source = subprocess.run(
            ["git", "-C", str(root), "show", f"{RELEASE_0_1_0}:src/nvpair_wm/journal.py"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"release 0.1.0 is not in this checkout's git history ({exc})")
    path = tmp_path / "journal_0_1_0.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("journal_0_1_0", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["journal_0_1_0"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["journal_0_1_0"]
    return module


def test_a_journal_written_by_release_0_1_0_is_reloaded(tmp_path: Path) -> None:
    old = release_journal_module(tmp_path)
    cluster = tmp_path / "node"
    cluster.mkdir()
    journal, _ = old.open_journal(cluster, old.JournalLimits(), LIMITS, T0)
    disp = dispatcher(WorkloadTable(LIMITS))
    frames = [
        event_frame("workload:submitted", workload(id="1")),
        event_frame("workload:started", workload(id="1", seq=2)),
        event_frame("workload:submitted", workload(id="2")),
        remove_frame("2", "node-a"),
    ]
    for frame in frames:
        journal.append(disp.local(line(frame)).outbound, T0 + 1)
    journal.close()
    assert (cluster / JOURNAL_FILE).read_bytes().startswith(b"NVWMJNL\x01")
    again, records = open_journal(cluster, JournalLimits(), LIMITS, T0 + 2)
    assert again is not None
    table = WorkloadTable(LIMITS)
    assert reload_table(table, records, mono=100.0, wall=T0 + 2) == 0
    assert [(o.key[1], o.seq) for o in table.originated()[0]] == [("1", 2)]
    assert table.originated()[1] == [Removal("node-a", "2", "run-a")]
    again.close()
    assert format_of((cluster / JOURNAL_FILE).read_bytes()) == FORMAT


def test_a_newer_format_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / JOURNAL_FILE
    newer = b"NVWMJNL\x03" + b"whatever a later release writes"
    path.write_bytes(newer)
    for _ in range(2):  # the directory's lock is released: the second attempt says the same
        with pytest.raises(JournalFormatError) as refused:
            open_journal(tmp_path, JournalLimits(), LIMITS, T0)
        message = str(refused.value)
        assert "format 3" in message and f"format {FORMAT}" in message, message
        assert "\n" not in message
    assert path.read_bytes() == newer
    assert sorted(p.name for p in tmp_path.iterdir()) == [JOURNAL_FILE]  # nothing moved aside


def test_the_daemon_refuses_a_newer_journal_with_one_line_and_status_2(tmp_path: Path) -> None:
    from nvpair_wm.clusterdir import init_cluster  # noqa: PLC0415

    directory = init_cluster(tmp_path / "c", ["node-a", "node-b"])["node-a"]
    newer = b"NVWMJNL\x07" + bytes(64)
    (directory / JOURNAL_FILE).write_bytes(newer)
    with WmProcess("--cluster-dir", str(directory), "--bind", "127.0.0.1", "--port", "0") as wm:
        code = wm.wait()
        wm.wait_stderr("exiting with status 2")  # the last line: every line before it is read
        stdout = b"".join(wm.stdout_log)
        errors = [line for line in wm.stderr_log if " ERROR " in line]
    assert code == 2, wm.stderr_log
    assert stdout == b""  # no ready: it never started
    assert len(errors) == 1, wm.stderr_log
    assert "format 7" in errors[0] and f"format {FORMAT}" in errors[0], errors[0]
    assert (directory / JOURNAL_FILE).read_bytes() == newer
    assert not list(directory.glob(f"{JOURNAL_FILE}.damaged-*"))


def test_a_header_that_names_no_format_is_damage() -> None:
    records, damage = decode_log(b"NVWMJNL\x00" + bytes(20))
    assert records == [] and damage is not None and not damage.torn


# -- what the node forwarded to its broker ------------------------------------------------------


def peer_body(*frames: dict[str, Any]) -> bytes:
    return dumps(list(frames)) if len(frames) > 1 else dumps(frames[0])


def test_the_dispatcher_says_what_a_peer_request_forwards() -> None:
    disp = dispatcher(WorkloadTable(LIMITS))
    one = disp.peer(peer_body(event_frame("workload:started", workload(id="1", seq=2))))
    assert one.forwarded == [Forwarded("node-a", "1", "run-a", 2, "running")]
    many = disp.peer(
        peer_body(
            event_frame("workload:started", workload(id="1", seq=2)),  # duplicate: not forwarded
            event_frame("workload:completed", workload(id="1", seq=3)),
            remove_frame("2", "node-a"),  # nothing held: a tombstone for every run
            remove_frame("1", "node-a", run_id="run-a"),
        )
    )
    assert many.forwarded == [
        Forwarded("node-a", "1", "run-a", 3, "completed"),
        Forwarded("node-a", "2", "", 0, "removed"),
        Forwarded("node-a", "1", "run-a", 0, "removed"),
    ]
    assert len(many.to_broker) == len(many.forwarded)


def test_the_endpoint_reports_what_it_forwards_before_queuing_it() -> None:
    order: list[str] = []

    class Sink:
        def full(self) -> bool:
            return False

        def put(self, frames: list[bytes]) -> None:
            order.append(f"put {len(frames)}")

    class Pins:
        def is_pinned(self, fingerprint: str) -> bool:
            return True

    endpoint = EventsEndpoint(
        dispatcher(WorkloadTable(LIMITS)),
        Pins(),
        Sink(),
        on_forwarded=lambda items: order.append(f"journal {len(items)}"),
    )
    from nvpair_wm.http.core import Request  # noqa: PLC0415

    body = peer_body(event_frame("workload:submitted", workload(id="5")))
    req = Request(
        method="POST",
        path="/v1/workloads/events",
        headers=[(b"content-type", b"application/json")],
        peer_fingerprint=FINGERPRINT,
        protocol="h2",
        content_length=len(body),
    )
    assert endpoint.head(req) is None
    assert endpoint.complete(req, body).status == 202
    assert endpoint.complete(req, body).status == 202  # a duplicate: nothing forwarded
    assert order == ["journal 1", "put 1"]


def forwarded_records(at: float = T0) -> list[Record]:
    items = [
        Forwarded("node-b", "1", "run-b", 2, "running"),
        Forwarded("node-b", "2", "run-b", 3, "failed"),
        Forwarded("node-b", "3", "", 0, "removed"),
    ]
    return [forwarded_record(item, at + i) for i, item in enumerate(items)]


def test_forwarded_records_round_trip_appended_and_in_checkpoints() -> None:
    records = forwarded_records()
    assert [(r.kind, r.seq, r.body) for r in records] == [
        (FORWARDED_LIVE, 2, b""),
        (FORWARDED_TERMINAL, 3, b""),
        (FORWARDED_REMOVAL, 0, b""),
    ]
    appended = HEADER + b"".join(map(encode_record, records))
    assert decode_log(appended) == (records, None)
    assert read_log(appended).tail == 3
    checkpoint = encode_log(records)
    assert decode_log(checkpoint) == (records, None)
    assert read_log(checkpoint).tail == 0


def test_a_reloaded_table_refuses_what_its_broker_already_has() -> None:
    """After a restart, a peer's older snapshot is stale and a removed workload stays removed
    (the newest seq the broker had is forwarded once more); the broker's own workload keeps its
    frame for replay next to the newer forwarded seq."""
    own = outbound_event(lifecycle_frame(info(id="7", seq=1, originatedFrom="node-a")))
    records = [
        Record(LIVE, T0, "node-a", "7", "run-a", own.body, 1),
        forwarded_record(Forwarded("node-a", "7", "run-a", 2, "running"), T0 + 1),
        *forwarded_records(T0 + 2),
        Record(REMOVAL, T0 + 5, "node-a", "8", "run-a"),
    ]
    table = WorkloadTable(LIMITS)
    assert reload_table(table, records, mono=100.0, wall=T0 + 6) == 0
    disp = dispatcher(table)
    stale = disp.peer(peer_body(event_frame("workload:submitted", workload(id="7", seq=1))))
    assert (stale.to_broker, table.stale) == ([], 1)
    older = event_frame(
        "workload:submitted", workload(id="1", runId="run-b", seq=1, originatedFrom="node-b")
    )
    assert disp.peer(peer_body(older)).to_broker == []
    removed = event_frame(
        "workload:started", workload(id="3", runId="run-b", seq=9, originatedFrom="node-b")
    )
    assert disp.peer(peer_body(removed)).to_broker == []
    assert table.suppressed == 1
    # The seq the broker already has: forwarded once more (a broker that restarted too needs
    # it), then a duplicate as ever.
    same = event_frame(
        "workload:started", workload(id="1", runId="run-b", seq=2, originatedFrom="node-b")
    )
    assert len(disp.peer(peer_body(same)).to_broker) == 1
    assert disp.peer(peer_body(same)).to_broker == []
    newer = event_frame(
        "workload:completed", workload(id="1", runId="run-b", seq=3, originatedFrom="node-b")
    )
    assert len(disp.peer(peer_body(newer)).to_broker) == 1
    assert disp.peer(peer_body(newer)).to_broker == []  # no more resending: seq 3 was told
    # The broker's own workload: a peer's copy of the forwarded seq 2 goes once more too.
    again = event_frame("workload:started", workload(id="7", seq=2))
    assert len(disp.peer(peer_body(again)).to_broker) == 1
    assert disp.peer(peer_body(again)).to_broker == []
    # Its own frame (seq 1) is still what it replays to peers; the forwarded seq 2 is newer.
    events, removals = table.originated()
    assert [o.seq for o in events] == [1]
    assert removals == [Removal("node-a", "8", "run-a")]


def test_the_fold_keeps_a_forwarded_seq_only_while_it_is_the_newest() -> None:
    own = outbound_event(lifecycle_frame(info(id="7", seq=1, originatedFrom="node-a")))
    local = Record(LIVE, T0, "node-a", "7", "run-a", own.body, 1)
    seen = forwarded_record(Forwarded("node-a", "7", "run-a", 2, "running"), T0 + 1)
    assert Fold([local, seen]).compacted(T0 + 2, LIMITS) == [local, seen]
    newer = Record(LIVE, T0 + 2, "node-a", "7", "run-a", own.body, 3)
    assert Fold([local, seen, newer]).compacted(T0 + 3, LIMITS) == [newer]
    gone = forwarded_record(Forwarded("node-a", "7", "", 0, "removed"), T0 + 3)
    assert Fold([local, seen, gone]).compacted(T0 + 4, LIMITS) == [gone]
    # The cap counts workloads: one workload's two records count once.
    capped = TableLimits(max_workloads=1)
    other = forwarded_record(Forwarded("node-b", "1", "run-b", 1, "queued"), T0 - 1)
    assert Fold([other, local, seen]).compacted(T0 + 2, capped) == [local, seen]


def test_forwarded_records_expire_with_their_class() -> None:
    records = forwarded_records()  # live at T0, terminal at T0 + 1, removal at T0 + 2
    kept = Fold(records).compacted(T0 + 15, LIMITS)  # terminal_ttl 10 s, tombstone_ttl 20 s
    assert [r.kind for r in kept] == [FORWARDED_LIVE, FORWARDED_REMOVAL]
    table = WorkloadTable(LIMITS)
    reload_table(table, records, mono=100.0, wall=T0 + 15)
    assert (len(table), table.tombstones) == (1, 1)


def test_journal_appends_what_was_forwarded(tmp_path: Path) -> None:
    journal, _ = open_journal(tmp_path, JournalLimits(), LIMITS, T0)
    assert journal is not None
    items = [Forwarded("node-b", "1", "run-b", 2, "running")]
    journal.append_forwarded(items, T0 + 1)
    journal.append_forwarded([], T0 + 2)  # nothing: nothing written
    journal.close()
    records = decode_log((tmp_path / JOURNAL_FILE).read_bytes())[0]
    assert records == [forwarded_record(items[0], T0 + 1)]


@pytest.mark.parametrize("state", ["queued", "running", *sorted(TERMINAL), "removed"])
def test_a_forwarded_batch_reads_back_as_each_items_record(state: str) -> None:
    """A forwarded-batch record (what the journal writes per write to the broker) against the
    general path: it reads back as ``forwarded_record(item, at)`` of each item, in order, with
    keys in and out of ASCII, and counts toward the appended tail."""
    items = [
        Forwarded("node-b", "1", "run-b", 2, state),
        Forwarded("n\u00f6de-\U0001f600", "w\u00e9" * 40, "", 0, state),
        Forwarded("node-c", "3", "r" * 128, 2**40, state),
    ]
    data, count = encode_forwarded(items, T0 + 1.5)
    assert count == 3
    log_ = read_log(HEADER + data + encode_record(forwarded_records()[0]))
    expected = [forwarded_record(item, T0 + 1.5) for item in items]
    assert (log_.records[:3], log_.damage, log_.tail) == (expected, None, 4)
    assert encode_forwarded([], T0) == (b"", 0)


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\x08" + struct.pack("<d", T0) + b"\x91\x95\xa1a\xa1b\xa1c\x01\xa3odd", "state"),
        (b"\x08" + struct.pack("<d", T0) + b"\x91\x93\xa1a\xa1b\xa1c", "shape"),
        (b"\x08" + struct.pack("<d", T0), "empty"),
    ],
)
def test_a_forwarded_batch_that_does_not_decode_is_damage(payload: bytes, why: str) -> None:
    """A sound checksum over a batch of an unknown state, the wrong shape or nothing: the
    reading stops there, with the records before it kept."""
    before = encode_record(forwarded_records()[0])
    record = struct.pack("<II", len(payload), zlib.crc32(payload)) + payload
    log_ = read_log(HEADER + before + record)
    assert log_.records == forwarded_records()[:1], why
    assert (
        log_.damage is not None and log_.damage.reason == "forwarded-batch record does not decode"
    )
    assert not log_.damage.torn


def test_records_appended_later_wait_for_a_flush_and_keep_their_order(tmp_path: Path) -> None:
    """``forward_later``: nothing written until a flush, which writes them all as one record
    stamped with its time; anything written meanwhile (a broker's report, a forwarded
    record written now) goes after them, and closing the journal flushes too."""
    journal, _ = open_journal(tmp_path, JournalLimits(), LIMITS, T0)
    assert journal is not None
    path = tmp_path / JOURNAL_FILE
    both = [
        Forwarded("node-b", "1", "run-b", 2, "running"),
        Forwarded("node-b", "2", "", 0, "removed"),
    ]
    journal.forward_later(both[:1])
    journal.forward_later(both[1:])
    assert journal.pending and path.read_bytes() == HEADER and journal.size == len(HEADER)
    journal.flush(T0 + 1)
    assert not journal.pending
    assert path.read_bytes() == HEADER + encode_forwarded(both, T0 + 1)[0]
    written = decode_log(path.read_bytes())[0]
    assert written == [forwarded_record(item, T0 + 1) for item in both]
    own = outbound_event(lifecycle_frame(info(id="9", seq=1, originatedFrom="node-a")))
    journal.forward_later([Forwarded("node-b", "5", "run-b", 1, "queued")])
    journal.append([own], T0 + 3)  # written now, after what waits
    journal.forward_later([Forwarded("node-b", "6", "run-b", 1, "queued")])
    journal.close()
    written = decode_log(path.read_bytes())[0]
    assert [r.wid for r in written] == ["1", "2", "5", "9", "6"]
    assert journal.size == len(path.read_bytes())


def test_checkpoint_records_stay_under_the_record_limit_with_the_longest_keys() -> None:
    """Ids of 256 characters, runIds of 128, four bytes each in UTF-8: a compaction splits its
    checkpoint records so that none passes MAX_RECORD (a start would call it damage)."""
    wid, run = "\U0001f600" * 256, "\u00e9" * 128
    records = [
        Record(FORWARDED_LIVE, T0, "node-b", f"{i}{wid}"[:256], run, b"", 1) for i in range(30_000)
    ]
    data = encode_log(records)
    assert decode_log(data) == (records, None)
    sizes = []
    pos = len(HEADER)
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "little")
        sizes.append(length)
        pos += 8 + length
    assert len(sizes) > 1 and max(sizes) <= MAX_RECORD, (len(sizes), max(sizes))


# -- a failing journal's rewrite keeps what was forwarded meanwhile ---------------------------


NAMES = ("steady", "failing")


def fail(journal: Journal) -> None:
    """A write error from here on, as a full disk gives: the journal's descriptor is closed
    behind it, so its next write fails (EBADF) and it turns to failing, as on ENOSPC. (The
    daemon is tested with a real ENOSPC, tests/test_journal_health.py; this is the same path
    in process, where a test can compare the files.)"""
    assert journal._fd >= 0
    os.close(journal._fd)


def held_state(records: list[Record]) -> list[tuple[int, str, str, str, int]]:
    """What a start reloads of a log, without times (a rewrite stamps its own): per workload
    the broker's newest event and any newer seq forwarded to it, and the removals (of either
    kind: a tombstone the broker added a run to is the broker's, and the rewrite, written from
    the table, says so of all its runs)."""
    kept = Fold(records).compacted(T0 + 5, LIMITS)
    return sorted(
        (REMOVAL if r.is_removal else r.kind, r.origin, r.wid, r.run, r.seq) for r in kept
    )


@pytest.mark.parametrize("batched", [False, True], ids=["each", "batched"])
@pytest.mark.parametrize("seed", range(40))
def test_a_rewrite_after_a_failure_holds_what_a_journal_that_never_failed_holds(
    tmp_path: Path, seed: int, batched: bool
) -> None:
    """Differential: the same broker lines and peer requests (a workload of this node's that
    a peer reports further, peers' own workloads and removals) through a real dispatcher, each
    journaled in two journals; one fails half-way and recovers at the end from the table, as
    the node does. Both files reload to the same state, and the same table. ``batched``: the
    peers' items wait (``forward_later``) and are flushed at the ends of random batches of
    steps, as the node's broker channel does before its writes; the failure comes with items
    waiting."""
    rng = random.Random(seed)
    table = WorkloadTable(LIMITS)
    disp = dispatcher(table)
    journals = []
    for name in NAMES:
        (tmp_path / name).mkdir()
        journal, _ = open_journal(tmp_path / name, JournalLimits(), LIMITS, T0)
        assert journal is not None
        journals.append(journal)
    steady, failing = journals
    seqs: dict[tuple[str, str], int] = {}
    steps = 160
    for step in range(steps):
        at = T0 + step * 0.01
        if batched and rng.random() < 0.4:  # the end of a batch
            for journal in journals:
                journal.flush(at)
        if step == steps // 2:
            if batched:  # with records of this batch still pending: the flush fails
                forwarded = disp.peer(
                    peer_body(
                        event_frame(
                            "workload:started",
                            workload(id="p", runId="run-node-b-0", seq=1, originatedFrom="node-b"),
                        )
                    )
                ).forwarded
                for journal in journals:
                    journal.forward_later(forwarded)
            fail(failing)
        origin = rng.choice(("node-a", "node-b", "node-c"))
        wid, run = f"w{rng.randrange(5)}", f"run-{origin}-{rng.randrange(2)}"
        if rng.random() < 0.12:
            frame = (
                remove_frame(wid, origin, run_id=run)
                if rng.random() < 0.6
                else remove_frame(wid, origin)
            )
        else:
            seq = seqs[(wid, run)] = seqs.get((wid, run), 0) + rng.choice((1, 1, 2, -1))
            method = rng.choice(("workload:submitted", "workload:started", "workload:completed"))
            frame = event_frame(
                method, workload(id=wid, runId=run, seq=max(seq, 1), originatedFrom=origin)
            )
        if origin == "node-a" and rng.random() < 0.7:  # this node's broker
            published = disp.local(line(frame)).outbound
            for journal in journals:
                journal.append(published, at)
        else:  # a peer: node-a's workloads too, reported by the node they ran on
            forwarded = disp.peer(peer_body(frame)).forwarded
            for journal in journals:
                if batched:
                    journal.forward_later(forwarded)
                else:
                    journal.append_forwarded(forwarded, at)
    for journal in journals:  # what waits, written (or held) as the last batch ends
        journal.flush(T0 + steps * 0.01)
    assert not failing.healthy and steady.healthy
    assert failing.recover(table, T0 + 2, 1.0)
    for journal in journals:
        journal.close()
    logs = [decode_log((tmp_path / name / JOURNAL_FILE).read_bytes()) for name in NAMES]
    assert [damage for _, damage in logs] == [None, None]
    (steady_records, _), (failing_records, _) = logs
    assert any(r.forwarded for r in failing_records[len(failing_records) // 2 :])
    if batched:  # the record pending when the journal failed was held for the rewrite
        assert ("p", 1) in [(r.wid, r.seq) for r in failing_records if r.forwarded]
    tables = []
    for records in (steady_records, failing_records):
        fresh = WorkloadTable(LIMITS)
        reload_table(fresh, records, mono=50.0, wall=T0 + 3)
        tables.append(fresh)
    # The same answers to every peer event a snapshot could bring (each seq of each key seen).
    probes = [
        event_frame(
            "workload:started",
            workload(id=wid, runId=run, seq=s, originatedFrom=run.split("-", 1)[1][:6]),
        )
        for (wid, run), top in sorted(seqs.items())
        for s in range(1, max(top, 1) + 2)
    ]
    answers = [[dispatcher(t).peer(peer_body(p)).forwarded != [] for p in probes] for t in tables]
    diff = [(p, a, b) for p, a, b in zip(probes, *answers, strict=True) if a != b]
    assert not diff, (diff, steady_records, failing_records)
    assert (len(tables[0]), tables[0].tombstones) == (len(tables[1]), tables[1].tombstones)
    # What a peer that connects is sent: the same frames and removals.
    replayed = [t.originated() for t in tables]
    frames = [sorted(out.body for out in events) for events, _ in replayed]
    removed = [sorted(removals, key=repr) for _, removals in replayed]
    assert frames[0] == frames[1] and removed[0] == removed[1]


def test_what_is_held_while_failing_is_bounded_by_the_table_caps(tmp_path: Path) -> None:
    """Ten times the caps' worth of distinct peers' workloads and removals forwarded while
    failing: what is held stays within about twice the caps (refolded as it grows), and the
    rewrite holds at most the caps, only what the table still holds."""
    table = WorkloadTable(LIMITS)
    disp = dispatcher(table)
    journal, _ = open_journal(tmp_path, JournalLimits(), LIMITS, T0)
    assert journal is not None
    fail(journal)
    caps = LIMITS.max_workloads + LIMITS.max_tombstones
    for i in range(10 * caps):
        frame = (
            remove_frame(str(i), "node-b")
            if i % 2
            else event_frame("workload:started", workload(id=str(i), runId="run-b", seq=1))
        )
        journal.append_forwarded(disp.peer(peer_body(frame)).forwarded, T0 + i * 1e-4)
        assert not journal.healthy
        assert journal._held is not None and len(journal._held) <= 2 * caps + 1
    assert journal.recover(table, T0 + 1, 1.0)
    journal.close()
    records, damage = decode_log((tmp_path / JOURNAL_FILE).read_bytes())
    assert damage is None
    events = [r for r in records if not r.is_removal]
    removals = [r for r in records if r.is_removal]
    assert 0 < len(events) <= LIMITS.max_workloads and len(removals) == LIMITS.max_tombstones
    assert all(table.newest_seq(r.run, r.wid) == r.seq for r in events)
    assert all(table.covers(r.origin, r.wid, r.run) for r in removals)
    assert {r.wid for r in removals} == {str(i) for i in range(10 * caps - 99, 10 * caps, 2)}
