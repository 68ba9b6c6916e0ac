"""Unit tests of the workload table: duplicates, stale events, tombstones, TTLs and caps.

Time is injected (``now``), so nothing here sleeps.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from msgspec.structs import replace
from nvpair_wm_schema.workload_info_schema import WorkloadInfo

from nvpair_wm.dedup import Removal, TableLimits, WorkloadTable
from nvpair_wm.dispatch import outbound_event
from nvpair_wm.events import Outbound, lifecycle_frame
from tests.frames import info

LIMITS = TableLimits(
    terminal_ttl=10.0, live_ttl=100.0, tombstone_ttl=20.0, max_workloads=50, max_tombstones=50
)


def kept(info: WorkloadInfo) -> Outbound:
    """The encoded frame the table keeps for replay of a local event."""
    return outbound_event(lifecycle_frame(info))


def observe_local(table: WorkloadTable, info: WorkloadInfo, now: float) -> str:
    return table.observe(info, now, replay=kept(info))


def ev(
    id: str = "1",
    run: str = "run-a",
    seq: int = 1,
    state: str = "queued",
    origin: str = "node-a",
    **rest: Any,
) -> WorkloadInfo:
    return info(id=id, runId=run, seq=seq, state=state, originatedFrom=origin, **rest)


@pytest.fixture
def table() -> WorkloadTable:
    return WorkloadTable(LIMITS)


def check_invariants(t: WorkloadTable) -> None:
    assert len(t) == len(t._live) + len(t._done) <= t.limits.max_workloads
    assert t.tombstones == len(t._tombs) <= t.limits.max_tombstones
    # The (origin, id) → run index only points at workloads that are still held.
    assert len(t._runs) <= len(t)
    for (_origin, wid), run in t._runs.items():
        assert (run, wid) in t._live or (run, wid) in t._done
    assert all(
        e.replay is None
        or json.loads(e.replay.body)["params"]["workloadInfo"]["state"] not in ("queued", "running")
        for e in t._done.values()
    )


# -- duplicates and stale events ---------------------------------------------------------------


class TestDuplicatesAndStale:
    def test_first_event_applied(self, table: WorkloadTable) -> None:
        assert table.observe(ev(), 0) == "applied"
        assert len(table) == 1

    def test_same_key_is_duplicate(self, table: WorkloadTable) -> None:
        table.observe(ev(seq=3), 0)
        assert table.observe(ev(seq=3), 1) == "duplicate"
        # The key is (runId, id, seq): a copy with other fields changed is still the same event.
        assert table.observe(ev(seq=3, state="completed", model="x"), 2) == "duplicate"
        assert table.duplicates == 2
        assert len(table) == 1

    def test_lower_seq_is_stale(self, table: WorkloadTable) -> None:
        assert table.observe(ev(seq=1), 0) == "applied"
        assert table.observe(ev(seq=3, state="completed"), 1) == "applied"
        assert table.observe(ev(seq=2, state="running"), 2) == "stale"
        assert table.observe(ev(seq=1), 3) == "stale"
        assert table.stale == 2
        assert table.duplicates == 0

    def test_higher_seq_applied_even_if_state_goes_back(self, table: WorkloadTable) -> None:
        # A workload that returns to a placement it already had is not a redelivery.
        table.observe(ev(seq=1, state="queued"), 0)
        table.observe(ev(seq=2, state="running"), 0)
        assert table.observe(ev(seq=3, state="queued"), 0) == "applied"

    def test_seq_gaps_are_fine(self, table: WorkloadTable) -> None:
        assert table.observe(ev(seq=5), 0) == "applied"
        assert table.observe(ev(seq=500), 0) == "applied"
        assert table.observe(ev(seq=6), 0) == "stale"

    def test_reused_id_with_other_run_is_another_workload(self, table: WorkloadTable) -> None:
        table.observe(ev(run="r1", seq=5, state="completed"), 0)
        assert table.observe(ev(run="r2", seq=1), 1) == "applied"
        assert table.observe(ev(run="r2", seq=1), 1) == "duplicate"
        assert table.observe(ev(run="r1", seq=5), 1) == "duplicate"
        assert len(table) == 2

    def test_ids_are_independent(self, table: WorkloadTable) -> None:
        table.observe(ev(id="1", seq=9), 0)
        assert table.observe(ev(id="2", seq=1), 0) == "applied"
        assert table.observe(ev(id="10", seq=1), 0) == "applied"


# -- tombstones --------------------------------------------------------------------------------


class TestTombstones:
    def test_remove_with_run_then_late_event_suppressed(self, table: WorkloadTable) -> None:
        table.observe(ev(run="r1", seq=1), 0)
        outcome, removal = table.remove("node-a", "1", "r1", 1)
        assert outcome == "applied"
        assert removal == Removal("node-a", "1", "r1")
        assert len(table) == 0
        assert table.tombstones == 1
        # Late events of that run: a redelivery, a newer one, an older one.
        for seq in (1, 2, 7):
            assert table.observe(ev(run="r1", seq=seq, state="running"), 2) == "removed"
        assert table.suppressed == 3
        assert len(table) == 0

    def test_new_run_after_removal_with_run_is_not_suppressed(self, table: WorkloadTable) -> None:
        table.observe(ev(run="r1"), 0)
        table.remove("node-a", "1", "r1", 1)
        assert table.observe(ev(run="r2"), 2) == "applied"
        assert table.suppressed == 0

    def test_remove_without_run_resolves_the_run_seen(self, table: WorkloadTable) -> None:
        table.observe(ev(run="r1", seq=2), 0)
        outcome, removal = table.remove("node-a", "1", None, 1)
        assert outcome == "applied"
        assert removal == Removal("node-a", "1", "r1")
        assert len(table) == 0
        assert table.observe(ev(run="r1", seq=3), 2) == "removed"
        # A run it had not seen is another workload.
        assert table.observe(ev(run="r2", seq=1), 2) == "applied"

    def test_remove_never_seen_without_run_covers_every_run(self, table: WorkloadTable) -> None:
        outcome, removal = table.remove("node-a", "1", None, 0)
        assert outcome == "applied"
        assert removal == Removal("node-a", "1", None)
        assert table.observe(ev(run="r1"), 1) == "removed"
        assert table.observe(ev(run="r2", seq=4), 1) == "removed"
        assert len(table) == 0

    def test_remove_never_seen_with_run_covers_that_run(self, table: WorkloadTable) -> None:
        assert table.remove("node-a", "1", "r1", 0)[0] == "applied"
        assert table.observe(ev(run="r1"), 1) == "removed"
        assert table.observe(ev(run="r2"), 1) == "applied"

    def test_tombstone_is_per_origin(self, table: WorkloadTable) -> None:
        table.remove("node-a", "1", None, 0)
        assert table.observe(ev(origin="node-b"), 1) == "applied"
        assert table.observe(ev(id="2"), 1) == "applied"

    def test_duplicate_removal_with_run(self, table: WorkloadTable) -> None:
        table.observe(ev(run="r1"), 0)
        assert table.remove("node-a", "1", "r1", 1)[0] == "applied"
        assert table.remove("node-a", "1", "r1", 2) == ("duplicate", Removal("node-a", "1", "r1"))
        assert table.duplicates == 1
        assert table.tombstones == 1

    def test_duplicate_removal_never_seen(self, table: WorkloadTable) -> None:
        assert table.remove("node-a", "1", None, 0)[0] == "applied"
        assert table.remove("node-a", "1", None, 1)[0] == "duplicate"

    def test_duplicate_removal_without_run_of_a_seen_workload(self, table: WorkloadTable) -> None:
        # The same removal arriving twice (e.g. from two peers): the second is a duplicate,
        # and it must not widen the tombstone to every run of (origin, id).
        table.observe(ev(run="r1"), 0)
        assert table.remove("node-a", "1", None, 1) == ("applied", Removal("node-a", "1", "r1"))
        assert table.remove("node-a", "1", None, 2) == ("duplicate", Removal("node-a", "1", "r1"))
        assert table.observe(ev(run="r2"), 3) == "applied"

    def test_removal_covered_by_a_wider_tombstone_is_duplicate(self, table: WorkloadTable) -> None:
        table.remove("node-a", "1", None, 0)  # never seen: covers every run
        assert table.remove("node-a", "1", "r1", 1)[0] == "duplicate"
        # ... and the tombstone was not narrowed to r1.
        assert table.observe(ev(run="r2"), 2) == "removed"

    def test_removal_of_a_new_run_after_a_tombstone(self, table: WorkloadTable) -> None:
        table.observe(ev(run="r1"), 0)
        table.remove("node-a", "1", "r1", 1)
        table.observe(ev(run="r2"), 2)
        assert table.remove("node-a", "1", None, 3) == ("applied", Removal("node-a", "1", "r2"))
        assert len(table) == 0
        assert table.observe(ev(run="r2", seq=2), 4) == "removed"

    def test_removal_leaves_other_runs_alone(self, table: WorkloadTable) -> None:
        table.observe(ev(run="r1"), 0)
        table.observe(ev(run="r2"), 0)
        table.remove("node-a", "1", "r1", 1)
        assert len(table) == 1
        assert table.observe(ev(run="r2"), 2) == "duplicate"

    def test_remove_without_run_covers_the_newest_run_seen(self, table: WorkloadTable) -> None:
        # As schema/workloads-remove.schema.json documents: the newest run, not every run.
        table.observe(ev(run="r1"), 0)
        table.observe(ev(run="r2"), 0)
        _, removal = table.remove("node-a", "1", None, 1)
        assert removal.run_id == "r2"
        assert len(table) == 1
        assert table.observe(ev(run="r2", seq=2), 2) == "removed"
        assert table.observe(ev(run="r1", seq=2), 2) == "applied"


# -- TTLs --------------------------------------------------------------------------------------


class TestExpiry:
    def test_terminal_expires_after_terminal_ttl(self, table: WorkloadTable) -> None:
        table.observe(ev(state="completed"), 100)
        assert table.expire(109.9) == 0
        assert len(table) == 1
        assert table.expire(110) == 1
        assert len(table) == 0
        assert table._runs == {}
        # Forgotten: a late copy is new again (hence TTLs above any retry horizon).
        assert table.observe(ev(state="completed"), 111) == "applied"

    def test_live_expires_after_live_ttl(self, table: WorkloadTable) -> None:
        table.observe(ev(state="running"), 0)
        assert table.expire(99) == 0
        assert table.expire(100) == 1
        assert len(table) == 0

    def test_each_state_uses_its_ttl(self, table: WorkloadTable) -> None:
        table.observe(ev(id="live", state="queued"), 0)
        table.observe(ev(id="done", state="failed"), 0)
        table.observe(ev(id="gone", state="cancelled"), 0)
        assert table.expire(50) == 2
        assert table.observe(ev(id="live"), 50) == "duplicate"

    def test_terminal_ttl_counts_from_last_event(self, table: WorkloadTable) -> None:
        table.observe(ev(seq=1, state="running"), 0)
        table.observe(ev(seq=2, state="completed"), 95)
        assert table.expire(100) == 0  # no longer live: live TTL does not apply
        assert table.expire(104.9) == 0
        assert table.expire(105) == 1

    def test_applied_event_refreshes_age(self, table: WorkloadTable) -> None:
        table.observe(ev(seq=1, state="completed"), 0)
        table.observe(ev(seq=2, state="completed"), 8)
        assert table.expire(12) == 0
        assert table.expire(18) == 1

    def test_duplicate_and_stale_do_not_refresh_age(self, table: WorkloadTable) -> None:
        table.observe(ev(seq=2, state="completed"), 0)
        assert table.observe(ev(seq=2, state="completed"), 9) == "duplicate"
        assert table.observe(ev(seq=1, state="completed"), 9) == "stale"
        assert table.expire(10) == 1

    def test_tombstone_expires(self, table: WorkloadTable) -> None:
        table.remove("node-a", "1", None, 0)
        assert table.expire(19.9) == 0
        assert table.observe(ev(), 19.9) == "removed"
        assert table.expire(20) == 1
        assert table.tombstones == 0
        assert table.observe(ev(), 21) == "applied"

    def test_expire_stops_at_first_live_entry_and_counts(self, table: WorkloadTable) -> None:
        for i in range(10):
            table.observe(ev(id=str(i), state="completed"), float(i))
        table.remove("node-x", "a", None, 0)
        table.remove("node-x", "b", None, 5)
        assert table.expire(14.5) == 5  # ids 0..4
        assert len(table) == 5
        assert table.expire(25) == 5 + 2
        assert len(table) == 0
        assert table.tombstones == 0


# -- hard caps ---------------------------------------------------------------------------------


def capped(workloads: int = 3, tombstones: int = 2) -> WorkloadTable:
    return WorkloadTable(
        TableLimits(
            terminal_ttl=1e9,
            live_ttl=1e9,
            tombstone_ttl=1e9,
            max_workloads=workloads,
            max_tombstones=tombstones,
        )
    )


class TestCaps:
    def test_terminal_evicted_first(self) -> None:
        t = capped(3)
        t.observe(ev(id="A", state="running"), 0)
        t.observe(ev(id="B", state="completed"), 1)
        t.observe(ev(id="C", state="queued"), 2)
        assert t.evicted == 0
        t.observe(ev(id="D", state="queued"), 3)
        assert len(t) == 3
        assert t.evicted == 1
        # B (terminal) went, though A is older.
        assert t.observe(ev(id="A", state="running"), 4) == "duplicate"
        assert t.observe(ev(id="B", state="completed"), 4) == "applied"

    def test_oldest_live_evicted_when_no_terminal(self) -> None:
        t = capped(2)
        t.observe(ev(id="A"), 0)
        t.observe(ev(id="B"), 1)
        t.observe(ev(id="C"), 2)
        assert t.evicted == 1
        assert t.observe(ev(id="B"), 3) == "duplicate"
        assert t.observe(ev(id="C"), 3) == "duplicate"
        assert t._runs.get(("node-a", "A")) is None

    def test_touch_moves_to_the_back(self) -> None:
        t = capped(2)
        t.observe(ev(id="A", seq=1), 0)
        t.observe(ev(id="B", seq=1), 1)
        t.observe(ev(id="A", seq=2), 2)
        t.observe(ev(id="C", seq=1), 3)
        assert t.observe(ev(id="A", seq=2), 4) == "duplicate"
        assert t.observe(ev(id="B", seq=1), 4) == "applied"  # B was the oldest

    def test_duplicate_does_not_refresh_position(self) -> None:
        t = capped(2)
        t.observe(ev(id="A"), 0)
        t.observe(ev(id="B"), 1)
        assert t.observe(ev(id="A"), 2) == "duplicate"
        t.observe(ev(id="C"), 3)
        assert t.observe(ev(id="B"), 4) == "duplicate"
        assert t.observe(ev(id="A"), 4) == "applied"  # A was evicted, despite its duplicate

    def test_tombstone_cap_evicts_oldest(self) -> None:
        t = capped(tombstones=2)
        t.remove("node-a", "1", None, 0)
        t.remove("node-a", "2", None, 1)
        t.remove("node-a", "3", None, 2)
        assert t.tombstones == 2
        assert t.evicted == 1
        assert t.observe(ev(id="1"), 3) == "applied"
        assert t.observe(ev(id="2"), 3) == "removed"
        assert t.observe(ev(id="3"), 3) == "removed"

    def test_new_terminal_entry_is_not_evicted_by_its_own_insertion(self) -> None:
        t = capped(2)
        t.observe(ev(id="A", state="running"), 0)
        t.observe(ev(id="B", state="running"), 1)
        assert t.observe(ev(id="C", state="completed"), 2) == "applied"
        assert t.observe(ev(id="C", state="completed"), 3) == "duplicate"

    def test_internal_sizes_bounded_under_100k_events(self) -> None:
        limits = TableLimits(
            terminal_ttl=50.0,
            live_ttl=500.0,
            tombstone_ttl=50.0,
            max_workloads=1000,
            max_tombstones=300,
        )
        t = WorkloadTable(limits)
        states = ("queued", "running", "completed", "failed", "cancelled")
        base = ev()
        for i in range(100_000):
            now = i / 100
            wid = str(i % 5000)
            run = f"r{i % 7}"
            t.observe(replace(base, id=wid, runId=run, seq=1 + i // 5000, state=states[i % 5]), now)
            if i % 10 == 0:
                t.remove("node-a", str((i * 7) % 5000), run if i % 20 else None, now)
            if i % 1000 == 0:
                t.expire(now)
                check_invariants(t)
        check_invariants(t)
        assert len(t) <= 1000
        assert t.tombstones <= 300
        assert t.evicted > 0


# -- replay ------------------------------------------------------------------------------------


class TestOriginated:
    def test_newest_kept_events_and_local_removals_only(self, table: WorkloadTable) -> None:
        observe_local(table, ev(id="mine", seq=1), 0)
        observe_local(table, ev(id="mine", seq=2, state="running"), 1)
        observe_local(table, ev(id="mine", seq=2, state="running", model="dup"), 2)
        observe_local(table, ev(id="done", seq=1, state="completed"), 0)
        table.observe(ev(id="theirs", origin="node-b"), 0)
        observe_local(table, ev(id="gone"), 0)
        table.remove("node-a", "gone", None, 3, local=True)
        table.remove("node-b", "x", None, 3, local=False)
        events, removals = table.originated()
        by_id = {e.key[1]: e for e in events}
        assert set(by_id) == {"mine", "done"}
        assert by_id["mine"].seq == 2
        kept_info = json.loads(by_id["mine"].body)["params"]["workloadInfo"]
        assert kept_info["model"] != "dup"  # a duplicate does not replace what is kept
        assert removals == [Removal("node-a", "gone", "run-a")]

    def test_empty(self, table: WorkloadTable) -> None:
        assert table.originated() == ([], [])
