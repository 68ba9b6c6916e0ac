"""Unit tests of the journal: the record codec and fold fed records (no files), then the file
shell on tmp directories (damage, compaction, reload).

Broker frames are built with ``json`` (tests.support.frames) and go through the real Dispatcher, so
the records are what the daemon writes. Time is injected (wall and monotonic), nothing sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import random
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.dedup import Removal, TableLimits, WorkloadTable
from nvpair_wm.dispatch import Dispatcher, outbound_event, outbound_removal
from nvpair_wm.events import lifecycle_frame
from nvpair_wm.journal import (
    FORWARDED_LIVE,
    FORWARDED_REMOVAL,
    FORWARDED_TERMINAL,
    HEADER,
    JOURNAL_FILE,
    LIVE,
    REMOVAL,
    TERMINAL_EVENT,
    Compaction,
    Fold,
    Journal,
    JournalLimits,
    Record,
    collection_paused,
    decode_log,
    encode_log,
    encode_outbound,
    encode_outbounds,
    encode_record,
    fsync_and_close,
    open_journal,
    read_log,
    record_of,
    reload_table,
    reload_table_one_by_one,
)
from nvpair_wm.node import Config, Node
from tests.support.frames import LIFECYCLE, STATES, event_frame, info, line, remove_frame, workload
from tests.support.journal import (
    LIMITS,
    T0,
    broker_line,
    dispatcher,
    outbounds,
)
from tests.support.polling import eventually_async


def snapshot(table: WorkloadTable) -> tuple[list[bytes], list[Removal]]:
    """What a peer that connects is sent, in a comparable form."""
    events, removals = table.originated()
    return sorted(e.body for e in events), sorted(
        removals, key=lambda r: (r.origin, r.workload_id, r.run_id or "")
    )


def appended_log(records: list[Record]) -> bytes:
    """A journal file holding ``records`` as appended (one record each, no checkpoint)."""
    return HEADER + b"".join(map(encode_record, records))


def ev_record(
    wid: str = "1",
    run: str = "run-a",
    seq: int = 1,
    state: str = "queued",
    *,
    origin: str = "node-a",
    at: float = T0,
) -> Record:
    frame = lifecycle_frame(info(id=wid, runId=run, seq=seq, state=state, originatedFrom=origin))
    return record_of(outbound_event(frame), at)


def rm_record(
    wid: str = "1", run: str | None = None, *, origin: str = "node-a", at: float = T0
) -> Record:
    """The record of a removal (``run`` None: of every run)."""
    return record_of(outbound_removal(Removal(origin, wid, run)), at)


# -- the record codec ------------------------------------------------------------------------


class TestCodec:
    @pytest.mark.parametrize(("method", "state"), LIFECYCLE.items())
    def test_class_of_every_lifecycle_event_from_its_encoded_method(
        self, method: str, state: str
    ) -> None:
        """The class (which TTL applies) is read from the body's first member, the method."""
        out = outbound_event(lifecycle_frame(info(state=state)))
        assert out.body.startswith(b'{"method":"' + method.encode() + b'"')
        terminal = state in ("completed", "failed", "cancelled")
        assert record_of(out, T0).kind == (TERMINAL_EVENT if terminal else LIVE)

    def test_round_trip_events_and_removals(self) -> None:
        records = [
            ev_record(wid="ü-1 ✓", run="r\u00e9", state="running"),
            rm_record("7", "run-x", at=T0 + 1.5),
            rm_record("8", at=T0 + 2.0),
        ]
        decoded, damage = decode_log(appended_log(records))
        assert damage is None
        assert decoded == records
        assert decoded[0].wid == "ü-1 ✓" and decoded[0].body.startswith(b'{"method"')
        assert decoded[1].kind == REMOVAL and decoded[1].run == "run-x"
        assert decoded[2].run == ""  # a removal of every run

    def test_keys_that_are_not_utf8_are_damage_to_a_compaction_as_to_a_start(self) -> None:
        """A record whose checksum holds but whose keys are not UTF-8 (a foreign writer's)
        ends a scan where it ends a decode, with the same damage; non-ASCII UTF-8 keys do
        not."""
        good = appended_log([ev_record(wid="ü-2", run="r\u00e9")])
        bad = bytearray(encode_record(rm_record("#")))  # the only "#": its workload id
        bad[bad.index(b"#")] = 0xFF
        bad[4:8] = zlib.crc32(bad[8:]).to_bytes(4, "little")  # the frame: length, CRC-32
        data = good + bytes(bad) + encode_record(ev_record())
        records, expected = decode_log(data)
        assert expected is not None and expected.reason == "record strings are not UTF-8"
        assert (len(records), expected.offset) == (1, len(good))
        assert records[0].wid == "ü-2"

    def test_empty_file_is_empty_journal(self) -> None:
        assert decode_log(b"") == ([], None)
        assert decode_log(HEADER) == ([], None)

    def test_truncated_tail_at_every_offset_keeps_the_whole_records(self) -> None:
        records = [ev_record(wid=str(i), seq=i + 1) for i in range(3)]
        data = appended_log(records)
        last = len(appended_log(records[:2]))
        for cut in range(last, len(data)):
            got, damage = decode_log(data[:cut])
            if cut == last:
                assert (got, damage) == (records[:2], None)
                continue
            assert got == records[:2], cut
            assert damage is not None and damage.torn and damage.offset == last, (cut, damage)

    def test_header_cut_short_is_torn_and_empty(self) -> None:
        got, damage = decode_log(HEADER[:5])
        assert got == [] and damage is not None and damage.torn

    def test_zero_filled_tail_is_torn(self) -> None:
        records = [ev_record(wid=str(i)) for i in range(2)]
        data = appended_log(records)
        got, damage = decode_log(data + bytes(300))
        assert got == records
        assert damage is not None and damage.torn and damage.reason == "zero-filled tail"

    def test_last_record_failing_its_checksum_is_torn(self) -> None:
        records = [ev_record(wid=str(i)) for i in range(2)]
        data = bytearray(appended_log(records))
        data[-3] ^= 0xFF
        got, damage = decode_log(bytes(data))
        assert got == records[:1] and damage is not None and damage.torn

    def test_garbage_in_the_middle_is_corruption(self) -> None:
        records = [ev_record(wid=str(i)) for i in range(3)]
        data = bytearray(appended_log(records))
        second = len(appended_log(records[:1]))
        data[second + 20 : second + 30] = b"\xde\xad\xbe\xef" * 2 + b"!!"
        got, damage = decode_log(bytes(data))
        assert got == records[:1]
        assert damage is not None and not damage.torn and damage.offset == second
        assert damage.reason == "checksum mismatch"

    def test_garbage_file_is_corruption(self) -> None:
        got, damage = decode_log(b"\x00garbage, not a journal at all" * 10)
        assert got == [] and damage is not None and not damage.torn
        assert damage.reason == "no journal header"

    def test_impossible_length_is_corruption(self) -> None:
        data = appended_log([ev_record()]) + b"\xff\xff\xff\x7f" + bytes(4) + b"x" * 50
        got, damage = decode_log(data)
        assert len(got) == 1 and damage is not None and not damage.torn

    def test_record_with_a_valid_checksum_but_bad_fields_is_corruption(self) -> None:
        bad = Record(9, T0, "a", "b", "c")  # kind 9 does not exist
        data = appended_log([ev_record()]) + encode_record(bad) + encode_record(ev_record())
        got, damage = decode_log(data)
        assert len(got) == 1 and damage is not None and not damage.torn
        assert "kind 9" in damage.reason


# -- the fold and its compaction -------------------------------------------------------------


class TestFold:
    def test_newest_event_of_each_run_wins(self) -> None:
        fold = Fold([ev_record(seq=1), ev_record(seq=2, state="running"), ev_record(run="run-b")])
        assert len(fold) == 2
        assert {r.run: r.body.count(b'"seq":2') for r in fold.events[("node-a", "1")].values()} == {
            "run-a": 1,
            "run-b": 0,
        }

    def test_removal_of_a_run_drops_that_run_only(self) -> None:
        rm = rm_record("1", "run-a")
        fold = Fold([ev_record(run="run-a"), ev_record(run="run-b"), rm])
        assert list(fold.events[("node-a", "1")]) == ["run-b"]
        assert fold.tombs[("node-a", "1")] == {"run-a": rm}

    def test_removal_of_every_run_drops_them_all(self) -> None:
        rm = rm_record("1")
        fold = Fold([ev_record(run="run-a"), ev_record(run="run-b"), rm])
        assert fold.events == {} and len(fold) == 1

    def test_event_after_a_covering_removal_means_the_tombstone_had_expired(self) -> None:
        rm = rm_record("1", "run-a")
        fold = Fold([ev_record(), rm, ev_record(seq=5)])
        assert fold.tombs == {} and len(fold) == 1
        # An event of another run leaves the tombstone alone.
        fold = Fold([ev_record(), rm, ev_record(run="run-b")])
        assert list(fold.tombs) == [("node-a", "1")] and len(fold) == 2

    def test_removals_of_several_runs_of_one_id_are_all_kept(self) -> None:
        # As the table's tombstone keeps them (ids restart at 1 in every run; found by the soak).
        rm_a = rm_record("1", "run-a")
        rm_b = rm_record("1", "run-b", at=T0 + 1)
        fold = Fold([ev_record(run="run-a"), ev_record(run="run-b"), rm_a, rm_b])
        assert fold.tombs == {("node-a", "1"): {"run-a": rm_a, "run-b": rm_b}} and len(fold) == 2

    def test_compaction_applies_each_class_ttl(self) -> None:
        live = ev_record(wid="live", at=T0)
        done = ev_record(wid="done", state="completed", at=T0)
        tomb = rm_record("gone", at=T0)
        fold = Fold([live, done, tomb])
        # terminal_ttl 10 s, tombstone_ttl 20 s, live_ttl 100 s
        assert fold.compacted(T0 + 9.9, LIMITS) == [live, done, tomb]
        assert fold.compacted(T0 + 10.0, LIMITS) == [live, tomb]
        assert fold.compacted(T0 + 20.0, LIMITS) == [live]
        assert fold.compacted(T0 + 100.0, LIMITS) == []

    def test_compaction_keeps_the_newest_up_to_the_table_caps(self) -> None:
        limits = TableLimits(max_workloads=3, max_tombstones=2)
        events = [Record(LIVE, T0 + i, "node-a", f"w{i}", "run-a", b"{}") for i in range(10)]
        tombs = [Record(REMOVAL, T0 + i + 0.5, "node-a", f"t{i}", "") for i in range(10)]
        kept = Fold(events + tombs).compacted(T0 + 11, limits)
        assert [r.wid for r in kept] == ["w7", "w8", "t8", "w9", "t9"]  # oldest first


# -- the fold reproduces the table (what a peer is sent after a restart) ----------------------


def random_broker_history(seed: int, n: int) -> list[dict[str, Any]]:
    """Lifecycle events (seq moving forward, sometimes repeated or stale) and removals (with
    and without runId) over a few workloads and runs, as a broker would send them."""
    rng = random.Random(seed)
    seqs: dict[tuple[str, str], int] = {}
    frames: list[dict[str, Any]] = []
    for _ in range(n):
        wid, run = f"w{rng.randrange(6)}", f"run-{rng.randrange(3)}"
        if rng.random() < 0.15:
            frames.append(
                remove_frame(wid, "node-a", run_id=run)
                if rng.random() < 0.5
                else remove_frame(wid, "node-a")
            )
            continue
        seq = seqs.get((wid, run), 0) + rng.choice((1, 1, 2, 0, -1))
        seqs[(wid, run)] = seq = max(seq, 1)
        method = rng.choice(list(LIFECYCLE))
        frames.append(event_frame(method, workload(id=wid, runId=run, seq=seq)))
    return frames


@pytest.mark.parametrize("seed", range(12))
def test_reloaded_table_sends_the_same_snapshot(seed: int) -> None:
    """Journal every broker line, fold and compact it, reload into an empty table: a peer that
    connects then gets exactly the snapshot the original table would have sent."""
    table = WorkloadTable(LIMITS)
    disp = dispatcher(table)
    records: list[Record] = []
    for i, frame in enumerate(random_broker_history(seed, 120)):
        records += [record_of(out, T0 + i * 0.01) for out in broker_line(disp, frame)]
    kept = Fold(records).compacted(T0 + 2.0, LIMITS)
    assert len(kept) <= len(records)
    fresh = WorkloadTable(LIMITS)
    assert reload_table(fresh, kept, mono=50.0, wall=T0 + 2.0) == 0
    assert snapshot(fresh) == snapshot(table)
    # And the broker's re-reports after `ready` collapse: every newest event is a duplicate.
    again = dispatcher(fresh)
    for body in snapshot(table)[0]:
        assert again.local(body + b"\n").outbound == []


def test_reload_keeps_each_records_age() -> None:
    """A record 8 s old with a 10 s TTL is forgotten by the table 2 s (plus expiry) after."""
    done = Record(
        TERMINAL_EVENT,
        T0 - 8.0,
        "node-a",
        "1",
        "run-a",
        outbound_event(lifecycle_frame(info(state="completed"))).body,
        seq=1,
    )
    table = WorkloadTable(LIMITS)
    reload_table(table, [done], mono=500.0, wall=T0)
    assert len(table) == 1
    table.expire(501.9)
    assert len(table) == 1
    table.expire(502.0)
    assert len(table) == 0


def test_reload_skips_a_body_that_no_longer_decodes() -> None:
    bad = Record(LIVE, T0, "node-a", "1", "run-a", b'{"method":"workload:submitted"}')
    table = WorkloadTable(LIMITS)
    assert reload_table(table, [bad, ev_record(wid="2")], mono=1.0, wall=T0) == 1
    assert len(table) == 1


# -- the file shell ----------------------------------------------------------------------------


def die(journal: Journal) -> None:
    """What kill -9 does to a journal: its descriptors close (the lock goes), nothing is
    synced or flushed by the process."""
    for fd in (journal._fd, journal._lock):
        if fd >= 0:
            os.close(fd)
    journal._fd, journal._lock = -1, -1


def test_append_then_reopen(tmp_path: Path) -> None:
    journal, records = open_journal(tmp_path, JournalLimits(), LIMITS, T0)
    assert journal is not None and records == []
    assert (tmp_path / JOURNAL_FILE).read_bytes() == HEADER
    disp = dispatcher(WorkloadTable(LIMITS))
    batch = outbounds(
        disp,
        event_frame("workload:submitted", workload(id="1")),
        event_frame("workload:started", workload(id="1", seq=2)),
        event_frame("workload:submitted", workload(id="2")),
        remove_frame("2", "node-a"),
    )
    journal.append(batch, T0 + 1)
    die(journal)
    before = (tmp_path / JOURNAL_FILE).read_bytes()
    again, records = open_journal(tmp_path, JournalLimits(), LIMITS, T0 + 2)
    assert again is not None
    # A sound file is reloaded as it is: every record, in order; the table folds them.
    assert records == [record_of(o, T0 + 1) for o in batch]
    kept = Fold(records).compacted(T0 + 2, LIMITS)
    assert [(r.kind, r.wid, r.seq) for r in kept] == [(LIVE, "1", 2), (REMOVAL, "2", 0)]
    table = WorkloadTable(LIMITS)
    assert reload_table(table, records, mono=10.0, wall=T0 + 2) == 0
    assert (len(table), table.tombstones) == (1, 1)
    assert [o.seq for o in table.originated()[0]] == [2]
    # The start wrote nothing: the records it read count toward the next compaction (in a
    # child process), which folds them into checkpoint records.
    assert (tmp_path / JOURNAL_FILE).read_bytes() == before
    assert again.compaction_due(T0 + 2 + LIMITS.terminal_ttl)  # by time: 4 appended records
    again.close()


def test_one_process_per_journal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A second daemon on the same cluster dir would rewrite the first one's journal under it:
    its journal is failing instead (not off: off is only what configuration asks for), says
    so, and touches nothing until the first one is gone; its rewrite then keeps the first
    one's records ahead of its own state."""
    journal, _ = open_journal(tmp_path, JournalLimits(), LIMITS, T0)
    assert journal is not None
    journal.append(
        outbounds(dispatcher(WorkloadTable(LIMITS)), event_frame("workload:submitted")), T0
    )
    with caplog.at_level(logging.WARNING, logger="nvpair_wm.journal"):
        second, records = open_journal(tmp_path, JournalLimits(), LIMITS, T0)
    assert second is not None and records == [] and not second.healthy and not second.active
    [warning] = [r.getMessage() for r in caplog.records]
    assert "in use by another process" in warning
    assert second.last_error == "lock: in use by another process"
    table = WorkloadTable(LIMITS)
    assert not second.recover(table, T0 + 1, 1.0)  # still held: the file is left alone
    assert [r.wid for r in decode_log((tmp_path / JOURNAL_FILE).read_bytes())[0]] == ["1"]
    journal.close()
    assert second.recover(table, T0 + 1, 2.0) and second.healthy
    second.close()
    assert [r.wid for r in decode_log((tmp_path / JOURNAL_FILE).read_bytes())[0]] == ["1"]
    again, _ = open_journal(tmp_path, JournalLimits(), LIMITS, T0)
    assert again is not None and again.healthy
    again.close()


@pytest.mark.parametrize("fsync_interval", [0.0, 1.0])
def test_sync_policies_write_the_same(tmp_path: Path, fsync_interval: float) -> None:
    limits = JournalLimits(fsync_interval=fsync_interval)
    journal, _ = open_journal(tmp_path, limits, LIMITS, T0)
    assert journal is not None
    disp = dispatcher(WorkloadTable(LIMITS))
    journal.append(outbounds(disp, event_frame("workload:submitted")), T0)
    journal.sync()
    journal.close()
    records, damage = decode_log((tmp_path / JOURNAL_FILE).read_bytes())
    assert damage is None and [r.wid for r in records] == ["1"]


def damaged_files(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob(f"{JOURNAL_FILE}.damaged-*"))


def test_truncated_tail_is_reported_moved_aside_and_the_rest_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = [ev_record(wid=str(i)) for i in range(3)]
    data = appended_log(records)
    (tmp_path / JOURNAL_FILE).write_bytes(data[:-7])
    with caplog.at_level(logging.WARNING, logger="nvpair_wm.journal"):
        journal, kept = open_journal(tmp_path, JournalLimits(), LIMITS, T0 + 1)
    assert journal is not None and kept == records[:2]
    [warning] = [r.getMessage() for r in caplog.records]
    assert "torn tail" in warning and "kept the 2 records" in warning
    [aside] = damaged_files(tmp_path)
    assert aside.read_bytes() == data[:-7]  # kept as it was, for inspection
    assert decode_log((tmp_path / JOURNAL_FILE).read_bytes()) == (records[:2], None)
    journal.close()


def test_garbage_is_reported_moved_aside_and_the_node_starts_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = [ev_record(wid=str(i)) for i in range(3)]
    data = bytearray(appended_log(records))
    data[40:60] = b"\x13\x37" * 10
    (tmp_path / JOURNAL_FILE).write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="nvpair_wm.journal"):
        journal, kept = open_journal(tmp_path, JournalLimits(), LIMITS, T0 + 1)
    assert journal is not None and kept == []
    [warning] = [r.getMessage() for r in caplog.records]
    assert "damaged at byte 8" in warning and "starting empty" in warning
    assert len(damaged_files(tmp_path)) == 1
    assert (tmp_path / JOURNAL_FILE).read_bytes() == HEADER
    # The next start finds a sound file: no second warning, no crash loop.
    journal.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="nvpair_wm.journal"):
        again, _ = open_journal(tmp_path, JournalLimits(), LIMITS, T0 + 2)
    assert again is not None and caplog.records == []
    again.close()


def test_unwritable_place_is_a_failing_journal_not_an_off_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A failure at open takes the path of every failure: failing, retried; off is only what
    configuration asks for."""
    not_a_dir = tmp_path / "file"
    not_a_dir.write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="nvpair_wm.journal"):
        journal, kept = open_journal(not_a_dir, JournalLimits(), LIMITS, T0)
    assert journal is not None and kept == [] and not journal.healthy
    assert journal.health.state.status == "failing"
    assert journal.last_error == "lock: Not a directory"
    [error] = [r.getMessage() for r in caplog.records]
    assert "retrying with backoff" in error
    assert not journal.recover(WorkloadTable(LIMITS), T0 + 1, 1.0)
    journal.close()


def test_disabled_journal_touches_nothing(tmp_path: Path) -> None:
    assert open_journal(tmp_path, JournalLimits(enabled=False), LIMITS, T0) == (None, [])
    assert list(tmp_path.iterdir()) == []


def test_compaction_bounds_the_file(tmp_path: Path) -> None:
    """Many events of a few workloads: the file is compacted once the appends reach
    ``compact_min_records`` (over ``compact_growth`` times the 3 records the last compaction
    kept), and then holds one record per workload."""
    limits = JournalLimits(compact_min_records=100)
    journal, _ = open_journal(tmp_path, limits, LIMITS, T0)
    assert journal is not None
    disp = dispatcher(WorkloadTable(LIMITS))
    path = tmp_path / JOURNAL_FILE
    peak = 0
    for seq in range(1, 400):
        batch = outbounds(
            disp,
            *(event_frame("workload:started", workload(id=f"w{i}", seq=seq)) for i in range(3)),
        )
        journal.append(batch, T0 + seq * 0.001)
        peak = max(peak, path.stat().st_size)
        if journal.compaction_due(T0 + 1):
            journal.compact(T0 + 1)
            records, damage = decode_log(path.read_bytes())
            assert damage is None and sorted(r.wid for r in records) == ["w0", "w1", "w2"]
    one = len(encode_record(record_of(batch[0], T0)))
    assert peak <= len(HEADER) + (100 + 3 + 3) * one  # min records + kept + one batch
    journal.close()
    _, records = open_journal(tmp_path, limits, LIMITS, T0 + 2)
    kept = Fold(records).compacted(T0 + 2, LIMITS)
    assert [(b'"seq":399' in r.body, r.seq) for r in kept] == [(True, 399)] * 3


def test_a_log_of_distinct_workloads_is_not_rescanned_as_it_grows(tmp_path: Path) -> None:
    """Told how many records the table keeps, the count trigger waits for garbage: appends of
    new workloads (which a compaction would keep in place) never make one due; once at least
    half of what was appended since superseded something, it is due."""
    # 40 workloads: under the table's cap; the second 40 appends reach 1 x the 40 kept
    limits = JournalLimits(compact_min_records=10, compact_growth=1.0)
    journal, _ = open_journal(tmp_path, limits, LIMITS, T0)
    assert journal is not None
    table = WorkloadTable(LIMITS)
    disp = dispatcher(table)
    for i in range(40):
        frame = event_frame("workload:submitted", workload(id=f"w{i}"))
        journal.append(outbounds(disp, frame), T0)
        assert not journal.compaction_due(T0 + 1, len(table) + table.tombstones)
        assert journal.compaction_due(T0 + 1) == (i + 1 >= 10)  # not told: the count decides
    for i in range(40):  # a second event of each: due when half the appends are garbage
        frame = event_frame("workload:started", workload(id=f"w{i}", seq=2))
        journal.append(outbounds(disp, frame), T0)
        assert journal.compaction_due(T0 + 1, len(table) + table.tombstones) == (i == 39), i
    journal.compact(T0 + 1)
    assert len(decode_log((tmp_path / JOURNAL_FILE).read_bytes())[0]) == 40
    assert not journal.compaction_due(T0 + 1, len(table) + table.tombstones)
    for i in range(40, 80):  # past the table's cap (50): what it evicted is garbage too
        frame = event_frame("workload:submitted", workload(id=f"w{i}"))
        journal.append(outbounds(disp, frame), T0)
    assert len(table) == 50
    assert journal.compaction_due(T0 + 1, len(table) + table.tombstones)
    journal.compact(T0 + 1)
    assert len(decode_log((tmp_path / JOURNAL_FILE).read_bytes())[0]) == 50
    journal.close()


def compacted(tmp_path: Path, limits: JournalLimits, kept: int) -> tuple[Journal, Dispatcher]:
    """A journal whose last compaction was a real rewrite that kept ``kept`` records (two
    events of each of ``kept`` workloads, folded to the newest), and the dispatcher that wrote
    them (its table holds those workloads)."""
    journal, _ = open_journal(tmp_path, limits, LIMITS, T0)
    assert journal is not None
    disp = dispatcher(WorkloadTable(LIMITS))
    for seq in (1, 2):
        frames = [
            event_frame("workload:started", workload(id=f"w{i}", seq=seq)) for i in range(kept)
        ]
        journal.append(outbounds(disp, *frames), T0)
    journal.compact(T0 + 1)
    assert len(decode_log((tmp_path / JOURNAL_FILE).read_bytes())[0]) == kept
    return journal, disp


@pytest.mark.parametrize(
    ("growth", "kept", "min_records", "due_at"),
    [
        (1.0, 30, 1, 30),  # as many appends as were kept: the behaviour before compact_growth
        (3.0, 30, 1, 90),  # the default
        (2.5, 7, 1, 18),  # 17.5 appends: the ceiling
        (0.1, 30, 1, 3),  # under 1: fewer appends than were kept
        (2.2, 25, 1, 55),  # 2.2 * 25 is 55.00000000000001 in floats: 55, not 56
        (1.1, 50, 1, 55),  # 55.00000000000001 too
        (0.0, 30, 5, 5),  # 0: compact_min_records alone decides
        (3.0, 30, 100, 100),  # compact_min_records over compact_growth times what was kept
    ],
)
def test_the_count_trigger_waits_for_compact_growth_times_what_was_kept(
    tmp_path: Path, growth: float, kept: int, min_records: int, due_at: int
) -> None:
    """After a compaction that kept K records, appends that supersede them make the next one
    due by count at exactly max(ceil(compact_growth x K), compact_min_records), not one
    before; the garbage rule (at least half of the appends garbage by the table's count) still
    holds it back, and the time trigger is not reached (the shortest TTL is 10 s)."""
    limits = JournalLimits(compact_min_records=min_records, compact_growth=growth)
    journal, disp = compacted(tmp_path, limits, kept)
    for n in range(1, due_at + 1):
        frame = event_frame("workload:started", workload(id=f"w{n % kept}", seq=3 + n // kept))
        journal.append(outbounds(disp, frame), T0 + 1)
        assert journal.compaction_due(T0 + 2) == (n == due_at), n  # not told: the count alone
        assert journal.compaction_due(T0 + 2, kept) == (n == due_at), n  # the table: K live
    # Told that the table keeps more, the same appends are not garbage enough: at least half
    # of them (half of due_at, rounded up) must be.
    half = (due_at + 1) // 2
    assert journal.compaction_due(T0 + 2, kept + due_at - half)
    assert not journal.compaction_due(T0 + 2, kept + due_at - half + 1)
    assert not journal.compaction_due(T0 + 2, kept + due_at)  # every append a new workload
    journal.close()


def test_compaction_follows_the_shortest_ttl(tmp_path: Path) -> None:
    """A quiet node's file still sheds what expired: compaction is due once per shortest TTL
    (terminal_ttl here, 10 s) after an append, and drops the expired records."""
    journal, _ = open_journal(tmp_path, JournalLimits(), LIMITS, T0)
    assert journal is not None
    disp = dispatcher(WorkloadTable(LIMITS))
    journal.append(outbounds(disp, event_frame("workload:completed", workload(id="done"))), T0)
    assert not journal.compaction_due(T0 + 9.9)
    assert journal.compaction_due(T0 + 10.0)
    journal.compact(T0 + 10.0)
    assert decode_log((tmp_path / JOURNAL_FILE).read_bytes()) == ([], None)
    assert not journal.compaction_due(T0 + 100)  # nothing appended since
    journal.close()


def test_appends_during_a_compaction_are_kept(tmp_path: Path) -> None:
    """The node runs the heavy part of a compaction in a thread while the loop appends: what
    was appended between its start and its end is in the compacted file, after what it kept."""
    journal, _ = open_journal(tmp_path, JournalLimits(), LIMITS, T0)
    assert journal is not None
    disp = dispatcher(WorkloadTable(LIMITS))
    for seq in (1, 2, 3):
        journal.append(
            outbounds(disp, event_frame("workload:started", workload(id="1", seq=seq))), T0
        )
    job = journal.begin_compaction(T0 + 1)
    assert job is not None and journal.begin_compaction(T0 + 1) is None  # one at a time
    assert not journal.compaction_due(T0 + 1000)
    job.run()
    journal.append(outbounds(disp, event_frame("workload:started", workload(id="1", seq=4))), T0)
    journal.append(outbounds(disp, remove_frame("1", "node-a")), T0 + 2)
    journal.finish_compaction(job)
    records, damage = decode_log((tmp_path / JOURNAL_FILE).read_bytes())
    assert damage is None
    assert [(r.kind, r.body.count(b'"seq":')) for r in records] == [
        (LIVE, 1),
        (LIVE, 1),
        (REMOVAL, 0),
    ]
    assert b'"seq":3' in records[0].body and b'"seq":4' in records[1].body
    # Appending goes on into the installed file; a later start folds it all.
    journal.append(outbounds(disp, event_frame("workload:submitted", workload(id="2"))), T0 + 3)
    die(journal)
    _, records = open_journal(tmp_path, JournalLimits(), LIMITS, T0 + 4)
    kept = Fold(records).compacted(T0 + 4, LIMITS)
    assert [(r.kind, r.wid) for r in kept] == [(REMOVAL, "1"), (LIVE, "2")]


def test_a_compaction_that_cannot_write_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    journal, _ = open_journal(tmp_path, JournalLimits(), LIMITS, T0)
    assert journal is not None
    disp = dispatcher(WorkloadTable(LIMITS))
    journal.append(outbounds(disp, event_frame("workload:submitted")), T0)
    journal.append(outbounds(disp, event_frame("workload:started", workload(seq=2))), T0)
    before = (tmp_path / JOURNAL_FILE).read_bytes()
    job = journal.begin_compaction(T0)
    assert job is not None
    (tmp_path / f".{JOURNAL_FILE}.tmp").mkdir()  # the temporary file cannot be created
    job.run()
    assert job.error is not None
    (tmp_path / f".{JOURNAL_FILE}.tmp").rmdir()
    journal.finish_compaction(job)
    assert journal.active and (tmp_path / JOURNAL_FILE).read_bytes() == before
    journal.append(outbounds(disp, event_frame("workload:submitted", workload(id="2"))), T0)
    assert journal.compaction_due(T0 + 1000)
    journal.close()


def test_node_journals_what_it_publishes_and_compacts_on_its_timer(tmp_path: Path) -> None:
    """The wiring in node.py: ``publish`` journals; the timer task syncs and compacts (in a
    child process, journal/compactor.py) once the appends reach ``compact_min_records`` (nothing was
    kept); a new Node reloads the newest."""
    cdir = init_cluster(tmp_path / "cluster", ["node-a"])["node-a"]
    limits = JournalLimits(fsync_interval=0.01, compact_min_records=10)
    config = Config(cluster_dir=cdir, journal=limits)
    path = cdir / JOURNAL_FILE

    async def run() -> None:
        node = Node(config)
        journal = node.journal
        assert journal is not None
        for seq in range(1, 31):
            frame = event_frame("workload:started", workload(id="1", seq=seq))
            node.publish(node.dispatcher.local(line(frame)).outbound)
        assert len(decode_log(path.read_bytes())[0]) == 30  # written at once
        task = asyncio.create_task(node._journal_forever(journal))
        try:
            # No event announces a compaction: poll the file, bounded.
            await eventually_async(
                lambda: len(decode_log(path.read_bytes())[0]) == 1, "not compacted", within=10
            )
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        journal.close()

    asyncio.run(run())
    node = Node(config)
    assert node.journal is not None
    events, removals = node.table.originated()
    assert [b'"seq":30' in e.body for e in events] == [True] and removals == []
    node.journal.close()


def test_group_commit_off_the_loop_syncs_a_duplicate(tmp_path: Path) -> None:
    """The node fsyncs a duplicate descriptor in a worker thread: only when something was
    written, and closing the journal meanwhile does not matter."""
    journal, _ = open_journal(tmp_path, JournalLimits(), LIMITS, T0)
    assert journal is not None
    assert journal.sync_descriptor() is None  # nothing written yet
    disp = dispatcher(WorkloadTable(LIMITS))
    journal.append(outbounds(disp, event_frame("workload:submitted")), T0)
    fd = journal.sync_descriptor()
    assert fd is not None and journal.sync_descriptor() is None  # one commit per write burst
    journal.close()
    assert fsync_and_close(fd) is None
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)  # closed by it


def test_a_compaction_with_nothing_to_drop_writes_nothing(tmp_path: Path) -> None:
    """Checkpoint records alone, none expired: the log already is its compaction. The job
    writes no temporary file, the log is left byte for byte (with what was appended
    meanwhile), and it counts as a compaction (not due again until as many records are
    appended, growth 1). Appended records make the next one a rewrite into checkpoint records,
    even of distinct workloads (so that a start reads them in bulk)."""
    limits = JournalLimits(compact_min_records=4, compact_growth=1.0)
    journal, _ = open_journal(tmp_path, limits, LIMITS, T0)
    assert journal is not None
    disp = dispatcher(WorkloadTable(LIMITS))
    for i in range(4):
        journal.append(outbounds(disp, event_frame("workload:submitted", workload(id=f"{i}"))), T0)
    assert journal.compaction_due(T0 + 1)
    journal.compact(T0 + 1)  # a rewrite: the four appended records become a checkpoint
    path = tmp_path / JOURNAL_FILE
    contents = read_log(path.read_bytes())
    assert (len(contents.records), contents.damage, contents.tail) == (4, None, 0)
    job = journal.begin_compaction(T0 + 1)
    assert job is not None
    job.run()
    assert job.unchanged and job.kept == 4
    assert not (tmp_path / f".{JOURNAL_FILE}.tmp").exists()
    journal.append(outbounds(disp, event_frame("workload:submitted", workload(id="4"))), T0 + 1)
    before = path.read_bytes()
    journal.finish_compaction(job)
    assert path.read_bytes() == before
    assert not journal.compaction_due(T0 + 2)  # 1 appended since, 4 kept
    for i in range(5, 8):
        journal.append(outbounds(disp, event_frame("workload:submitted", workload(id=f"{i}"))), T0)
    assert journal.compaction_due(T0 + 2)
    journal.append(outbounds(disp, event_frame("workload:started", workload(id="0", seq=2))), T0)
    journal.compact(T0 + 2)
    contents = read_log(path.read_bytes())
    assert contents.damage is None and contents.tail == 0
    assert sorted(r.wid for r in contents.records) == [f"{i}" for i in range(8)]
    journal.close()


# The differential test's caps, small enough to bite; its ages straddle every TTL (terminal 10 s,
# tombstone 20 s, live 100 s), include the TTLs themselves (expired: the TTL is exclusive) and
# repeat, so that many records share a time (how the fold orders equal times is compared too).
# Its compactions run at several times: at T0 the caps bite (what they keep is younger than
# live_ttl, so that live_ttl cannot show), at T0 + 97 live_ttl does.
CAPPED = dataclasses.replace(LIMITS, max_workloads=6, max_tombstones=2)
AGES = (0.0, 0.5, 3.0, 9.5, 10.0, 15.0, 19.5, 20.0, 50.0, 99.5, 100.0, 150.0, 200.0, 1000.0)
WALLS = (T0, T0 + 15.0, T0 + 97.0)
#: Each way a record is dropped after the fold, and the limits without it.
WITHOUT = {
    "terminal_ttl": dataclasses.replace(CAPPED, terminal_ttl=math.inf),
    "live_ttl": dataclasses.replace(CAPPED, live_ttl=math.inf),
    "tombstone_ttl": dataclasses.replace(CAPPED, tombstone_ttl=math.inf),
    "max_workloads": dataclasses.replace(CAPPED, max_workloads=10**6),
    "max_tombstones": dataclasses.replace(CAPPED, max_tombstones=10**6),
}


def random_log(seed: int, n: int) -> list[Record]:
    """Events (of every lifecycle state, each key's seq moving on) and removals (of one run or
    of every run) over 3 origins x 8 ids x 3 runs, in random order of age (``T0`` minus one of
    ``AGES``): many supersede each other, some removals cover earlier events and some events
    come after a removal that covered them."""
    rng = random.Random(seed)
    seqs: dict[tuple[str, str, str], int] = {}
    records: list[Record] = []
    for _ in range(n):
        origin, wid, run = (
            rng.choice(("node-a", "node-b", "node-c")),
            f"w{rng.randrange(8)}",
            f"run-{rng.randrange(3)}",
        )
        at = T0 - rng.choice(AGES)
        if rng.random() < 0.3:
            records.append(
                rm_record(wid, run if rng.random() < 0.5 else None, origin=origin, at=at)
            )
            continue
        seqs[origin, wid, run] = seq = seqs.get((origin, wid, run), 0) + 1
        records.append(ev_record(wid, run, seq, rng.choice(STATES), origin=origin, at=at))
    return records


def covers(removal: Record, event: Record) -> bool:
    """Whether a removal covers an event (of its run, or of any run if it has none)."""
    same = (removal.origin, removal.wid) == (event.origin, event.wid)
    return same and removal.run in ("", event.run)


@pytest.mark.parametrize("seed", range(6))
def test_a_compaction_writes_what_a_start_keeps(tmp_path: Path, seed: int) -> None:
    """The compaction writes, byte for byte and so record for record in order, what a fold of
    the decoded log keeps (records folded, re-encoded as checkpoint records) at the same
    time."""
    records = random_log(seed, 300)
    data = appended_log(records)
    path = tmp_path / JOURNAL_FILE
    path.write_bytes(data)
    decoded, damage = decode_log(data)  # what a start reads (_open_locked)
    assert (decoded, damage) == (records, None)
    for wall in WALLS:
        # The reference: what a start keeps.
        kept = Fold(decoded).compacted(wall, CAPPED)
        assert len(kept) < len(records)
        # The fast path: what the node runs (in a child process; here on this thread).
        job = Compaction(path, len(data), len(records), wall, CAPPED)
        job.run()
        assert (job.error, job.failure, job.damage, job.unchanged) == (None, None, None, False)
        written = job.temp.read_bytes()
        assert decode_log(written) == (kept, None), wall  # the same records, in the same order
        # And the same bytes, the stronger statement (equal bytes decode to equal records; equal
        # records, whose times compare by value, need not be equal bytes).
        assert written == encode_log(kept), wall
        assert (job.read, job.kept, job.size) == (len(records), len(kept), len(written))

    # The log exercised every way a record goes: a generator that made every key distinct or
    # every record fresh would fail here.
    events = [r for r in records if not r.is_removal]
    assert len(events) - len({(r.origin, r.wid, r.run) for r in events}) >= 100  # superseded
    ways: set[str] = set()
    for i, rec in enumerate(records):
        before = records[:i]
        if rec.is_removal and any(covers(rec, e) for e in before if not e.is_removal):
            ways.add("removal of every run" if rec.run == "" else "removal of one run")
        if not rec.is_removal and any(covers(r, rec) for r in before if r.is_removal):
            ways.add("event after a removal that covered it")
    assert len(ways) == 3, ways
    # Each TTL and each cap changed what was kept, at one of the times at least.
    fold = Fold(records)
    shown = {
        name
        for name, without in WITHOUT.items()
        for wall in WALLS
        if fold.compacted(wall, without) != fold.compacted(wall, CAPPED)
    }
    assert shown == set(WITHOUT)


def test_encode_outbound_is_encode_record_of_record_of() -> None:
    """The append path's fused encoder writes the very bytes of the record codec, for live and
    terminal events and for removals with and without a run."""
    disp = dispatcher(WorkloadTable(LIMITS))
    outs = outbounds(
        disp,
        event_frame("workload:submitted", workload(id="a")),
        event_frame("workload:completed", workload(id="b")),
        remove_frame("a", "node-a"),
        remove_frame("b", "node-a", run_id="run-1"),
    )
    assert len(outs) == 4
    kinds = set()
    for out in outs:
        assert encode_outbound(out, T0) == encode_record(record_of(out, T0))
        kinds.add(record_of(out, T0).kind)
    assert kinds == {LIVE, TERMINAL_EVENT, REMOVAL}
    # The whole read's encoder: the same records, in order, in one string.
    records = b"".join(encode_record(record_of(o, T0)) for o in outs)
    assert encode_outbounds(outs, T0) == (records, 4)
    assert encode_outbounds([], T0) == (b"", 0)


def test_a_compaction_folds_with_the_cyclic_gc_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fold's hundreds of thousands of short-lived tracked objects would otherwise trigger
    full collections that traverse them all, holding the GIL; collection is back on after, also
    when the job fails, and stays off if it was off."""
    import gc  # noqa: PLC0415

    from nvpair_wm.journal import compaction as journal_module  # noqa: PLC0415

    seen: list[bool] = []
    real_read = read_log
    journal, _ = open_journal(tmp_path, JournalLimits(), LIMITS, T0)

    def scan(data: bytes, path: Path | None = None) -> Any:
        seen.append(gc.isenabled())
        return real_read(data, path)

    monkeypatch.setattr(journal_module, "read_log", scan)
    assert journal is not None
    disp = dispatcher(WorkloadTable(LIMITS))
    for seq in (1, 2):
        journal.append(
            outbounds(disp, event_frame("workload:started", workload(id="1", seq=seq))), T0
        )
    assert gc.isenabled()
    journal.compact(T0 + 1)
    assert seen == [False] and gc.isenabled()

    def boom(data: bytes, path: Path | None = None) -> Any:
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(journal_module, "read_log", boom)
    journal.append(outbounds(disp, event_frame("workload:started", workload(id="1", seq=3))), T0)
    job = journal.begin_compaction(T0 + 2)
    assert job is not None
    with pytest.raises(RuntimeError):
        job.run()
    assert gc.isenabled()
    gc.disable()
    try:
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    die(journal)


def table_state(table: WorkloadTable) -> Any:
    """Everything a table holds, in order (eviction pops in insertion order), comparable."""
    classes = (table._live, table._done, table._tombs, table._taken)
    index = [
        (wid, entry if isinstance(entry, tuple) else (entry.held, list(entry.newest)))
        for wid, entry in table._runs.items()
    ]
    return (
        [(list(g.cur.items()), list(g.prev.items()), g.cur_last, g.prev_last) for g in classes],
        index,
        list(table._pairs.items()),
        sorted(table._resend),
        (table.duplicates, table.stale, table.suppressed, table.evicted),
    )


def random_records(rng: random.Random, n: int) -> list[Record]:
    """Records of every kind over few ids, runs and origins (ids shared across origins and
    runs), some past their TTL, a few with seq 0, as a start may read them."""
    kinds = (LIVE, TERMINAL_EVENT, REMOVAL, FORWARDED_LIVE, FORWARDED_TERMINAL, FORWARDED_REMOVAL)
    records = []
    for _ in range(n):
        kind = rng.choice(kinds)
        origin = rng.choice(("node-a", "node-b"))
        # A run is now and then one of the other origin's (the key (runId, id) is shared).
        owner = origin if rng.random() < 0.8 else rng.choice(("node-a", "node-b"))
        wid, run = f"w{rng.randrange(12)}", rng.choice(("", f"run-{owner}-{rng.randrange(3)}"))
        at = T0 - rng.choice((0.0, 1.0, 5.0, 50.0, 150.0))  # 150 s: past every TTL
        if kind in (REMOVAL, FORWARDED_REMOVAL):
            records.append(Record(kind, at, origin, wid, run))
            continue
        run = run or f"run-{owner}-0"
        seq = rng.choice((0, 1, 2, 3, 5))
        body = b'{"method":"x"}' if kind in (LIVE, TERMINAL_EVENT) else b""
        records.append(Record(kind, at, origin, wid, run, body, seq))
    return records


@pytest.mark.parametrize("seed", range(150))
def test_the_reload_fast_path_leaves_the_table_the_general_load_leaves(seed: int) -> None:
    """Differential: reload_table (the usual record inline) and reload_table_one_by_one
    (every record through the general path) leave the same table, in the same order, with
    the same resend marks and counters: from empty, and from a table already holding some,
    under caps small enough that records are evicted."""
    rng = random.Random(seed)
    limits = dataclasses.replace(
        LIMITS, max_workloads=rng.choice((6, 30)), max_tombstones=rng.choice((4, 30))
    )
    before = random_records(rng, rng.randrange(0, 8))
    records = random_records(rng, 80)
    tables = []
    for load in (reload_table, reload_table_one_by_one):
        table = WorkloadTable(limits)
        reload_table_one_by_one(table, before, mono=500.0, wall=T0)
        skipped = load(table, records, mono=1000.0, wall=T0)
        tables.append((skipped, table_state(table)))
    assert tables[0] == tables[1]


def test_the_reload_fast_path_takes_a_compacted_full_log_inline() -> None:
    """The case it is for: distinct workloads, as a compaction writes them, all put back."""
    records = [ev_record(wid=str(i), seq=2, at=T0 - 1) for i in range(100)]
    records += [
        Record(FORWARDED_LIVE, T0 - 1, "node-b", str(i), "run-b", b"", 3) for i in range(100)
    ]
    limits = dataclasses.replace(LIMITS, max_workloads=1000)
    fast, general = WorkloadTable(limits), WorkloadTable(limits)
    assert reload_table(fast, records, mono=10.0, wall=T0) == 0
    reload_table_one_by_one(general, records, mono=10.0, wall=T0)
    assert len(fast) == 200 and table_state(fast) == table_state(general)


def forwarded(origin: str, run: str, at: float) -> Record:
    """A peer's event of id "1", seq 1, as forwarded to the broker."""
    return Record(FORWARDED_LIVE, at, origin, "1", run, b"", 1)


@pytest.mark.parametrize("load", [reload_table, reload_table_one_by_one])
def test_a_run_another_origin_removed_is_still_its_origins_newest_after_a_reload(
    load: Callable[[WorkloadTable, list[Record], float, float], int],
) -> None:
    """node-b's removal naming r1 took node-a's workload of r1 (the key (runId, id) is shared)
    before the restart: after it, node-a's removal without runId covers r1 alone, as before;
    and a later run of node-a reloaded after that removal is its newest instead."""
    records = [
        forwarded("node-a", "r0", T0 - 4),
        forwarded("node-a", "r1", T0 - 3),
        Record(FORWARDED_REMOVAL, T0 - 2, "node-b", "1", "r1"),
    ]
    table = WorkloadTable(LIMITS)
    load(table, records, 10.0, T0)
    assert table.remove("node-a", "1", None, 10.0) == ("applied", Removal("node-a", "1", "r1"))
    assert table.newest_seq("r0", "1") == 1  # r0 was not removed
    later = WorkloadTable(LIMITS)
    load(later, [*records, forwarded("node-a", "r2", T0 - 1)], 10.0, T0)
    assert later.remove("node-a", "1", "r2", 10.0)[0] == "applied"
    assert later.remove("node-a", "1", None, 10.0) == ("duplicate", Removal("node-a", "1", "r2"))


@pytest.mark.parametrize("seed", range(100))
def test_folding_records_at_once_equals_applying_them_one_by_one(seed: int) -> None:
    """Differential: ``Fold(records)`` (its loop takes the usual event itself) and an empty
    ``Fold`` given every record through ``apply`` hold the same state, in the same order."""
    records = random_records(random.Random(seed), 400)
    general = Fold()
    for rec in records:
        general.apply(rec)
    fast = Fold(records)
    for name in ("events", "forwarded", "tombs"):
        assert list(getattr(fast, name).items()) == list(getattr(general, name).items()), name
