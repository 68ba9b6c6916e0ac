"""Unit tests of the workload table: duplicates, stale events, tombstones, TTLs and caps.

Time is injected (``now``), so nothing here sleeps.
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from typing import Any

import pytest
from msgspec.structs import replace
from nvpair_wm_schema.workload_info_schema import WorkloadInfo

from nvpair_wm.dedup import Removal, TableLimits, WorkloadTable, _Ids
from nvpair_wm.dispatch import outbound_event
from nvpair_wm.events import Outbound, lifecycle_frame
from tests.support.frames import info

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


def generations(t: WorkloadTable) -> list[dict[Any, Any]]:
    return [t._live.cur, t._live.prev, t._done.cur, t._done.prev]


def held(t: WorkloadTable, run: str, wid: str) -> bool:
    return any((run, wid) in gen for gen in generations(t))


def check_invariants(t: WorkloadTable) -> None:
    gens = generations(t)
    assert len(t) == sum(map(len, gens)) <= t.limits.max_workloads
    assert t.tombstones == len(t._tombs.cur) + len(t._tombs.prev) <= t.limits.max_tombstones
    # A workload is in exactly one generation, and tombstones likewise.
    keys = [k for gen in gens for k in gen]
    assert len(keys) == len(set(keys))
    assert not t._tombs.cur.keys() & t._tombs.prev.keys()
    # A run another origin's removal took: one per (origin, id), counted against the tombstones'
    # cap, and only while no run of that origin holds the id (its next one is the newest).
    assert not t._taken.cur.keys() & t._taken.prev.keys()
    assert t.tombstones + len(t._taken) <= t.limits.max_tombstones
    for origin, wid in [*t._taken.cur, *t._taken.prev]:
        entry = t._runs.get(wid)
        pairs = [] if entry is None else [entry] if isinstance(entry, tuple) else entry.newest
        assert origin not in {o for o, _ in pairs}
    # The id index has an entry for exactly the ids held: a pair when one workload holds the
    # id, else the count of those holding it and at most one (origin, run) per origin, each
    # held (the newest of its origin, which tests/test_dedup.py's Model checks).
    holders = Counter(wid for _run, wid in keys)
    assert set(t._runs) == set(holders)
    for wid, entry in t._runs.items():
        if isinstance(entry, tuple):
            assert holders[wid] == 1
            pairs = [entry]
        else:
            assert entry.held == holders[wid] >= 1
            assert not (entry.held == 1 and entry.newest)  # that is a pair
            pairs = entry.newest
        assert len({origin for origin, _ in pairs}) == len(pairs)
        for _origin, run in pairs:
            assert held(t, run, wid)
    # A workload's class is the state of its newest event (a kept frame, when it is the newest).
    lives = ((t._live.cur, False), (t._live.prev, False))
    for gen, terminal in ((t._done.cur, True), (t._done.prev, True), *lives):
        for value in gen.values():
            if isinstance(value, Outbound):
                state = json.loads(value.body)["params"]["workloadInfo"]["state"]
                assert (state not in ("queued", "running")) == terminal


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

    def test_removing_a_later_run_keeps_the_earlier_run_removed(self, table: WorkloadTable) -> None:
        # Ids restart at 1 in every run: found by the soak (tests/soak, seed 1), where a late
        # event of run r1's "1" came back after run r2's "1" was removed.
        table.observe(ev(run="r1"), 0)
        table.observe(ev(run="r2"), 0)
        assert table.remove("node-a", "1", "r1", 1)[0] == "applied"
        assert table.remove("node-a", "1", "r2", 2)[0] == "applied"
        assert table.observe(ev(run="r1", seq=3), 3) == "removed"
        assert table.observe(ev(run="r2", seq=3), 3) == "removed"
        assert table.remove("node-a", "1", "r1", 4)[0] == "duplicate"
        assert table.tombstones == 1
        # A local tombstone replays every run it removed.
        local = WorkloadTable(table.limits)
        local.remove("node-a", "1", "r1", 0, local=True)
        local.remove("node-a", "1", "r2", 0, local=True)
        assert sorted(r.run_id or "" for r in local.originated()[1]) == ["r1", "r2"]

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

    @pytest.mark.parametrize("runs", [("r1",), ("r0", "r1")])
    @pytest.mark.parametrize("local", [False, True])
    def test_remove_without_run_after_another_origin_took_the_run(
        self, table: WorkloadTable, runs: tuple[str, ...], local: bool
    ) -> None:
        # The key (runId, id) is shared by origins: node-b's removal naming r1 takes node-a's
        # workload. node-a's removal without runId still covers r1, its newest run seen (the
        # id's only run, or the newer of two), not every run (schema/README.md).
        for run in runs:
            table.observe(ev(run=run), 0)
        removed = ("applied", Removal("node-b", "1", "r1"))
        assert table.remove("node-b", "1", "r1", 1, local=local) == removed
        assert len(table) == len(runs) - 1
        removed = ("applied", Removal("node-a", "1", "r1"))
        assert table.remove("node-a", "1", None, 2, local=local) == removed
        assert table.remove("node-a", "1", None, 3, local=local)[0] == "duplicate"
        assert table.observe(ev(run="r1", seq=2), 4) == "removed"
        assert table.observe(ev(run="r0"), 4) == ("duplicate" if "r0" in runs else "applied")
        check_invariants(table)

    def test_the_taken_run_is_no_longer_the_newest_after_a_new_run(
        self, table: WorkloadTable
    ) -> None:
        # node-a's r2, first seen after node-b's removal took r1, is node-a's newest run, also
        # once node-a's own removal of it made it leave the table.
        table.observe(ev(run="r1"), 0)
        table.remove("node-b", "1", "r1", 1)
        table.observe(ev(run="r2"), 2)
        check_invariants(table)
        assert table.remove("node-a", "1", "r2", 3)[0] == "applied"
        assert table.remove("node-a", "1", None, 4) == ("duplicate", Removal("node-a", "1", "r2"))
        assert table.observe(ev(run="r1"), 5) == "applied"  # r1 was never removed by node-a

    def test_a_run_an_origin_took_from_itself_is_not_remembered_twice(
        self, table: WorkloadTable
    ) -> None:
        # Its tombstone names it already: nothing more is kept.
        table.observe(ev(run="r1"), 0)
        table.remove("node-a", "1", "r1", 1)
        assert len(table._taken) == 0
        assert table.remove("node-a", "1", None, 2) == ("duplicate", Removal("node-a", "1", "r1"))


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

    def test_a_taken_run_expires_with_the_tombstones(self, table: WorkloadTable) -> None:
        # node-b's removal took node-a's run r1: it stays node-a's newest run the tombstone TTL,
        # and is then forgotten with node-b's tombstone (as an expired workload is).
        table.observe(ev(run="r1", state="running"), 0)
        table.remove("node-b", "1", "r1", 1)
        assert table.expire(20.9) == 0
        assert table._newest("node-a", "1") == "r1"
        assert table.expire(21) == 2  # node-b's tombstone and the run taken
        assert table.remove("node-a", "1", None, 22)[1] == Removal("node-a", "1", None)

    def test_expire_drops_whole_generations_and_counts(self, table: WorkloadTable) -> None:
        # Replaces a test of per-entry instants: what goes, goes a generation at a time, each
        # entry no sooner than the TTL after its last event, and expire counts what it drops.
        for i in range(10):
            table.observe(ev(id=str(i), state="completed"), float(i))
        table.remove("node-x", "a", None, 0)
        table.remove("node-x", "b", None, 5)
        assert table.expire(14.5) == 0  # ids 0..4 are past the TTL, but 5..9 share their gen
        assert len(table) == 10
        for i in range(10, 15):  # a new generation
            table.observe(ev(id=str(i), state="completed"), float(i))
        assert table.expire(18.9) == 0
        assert table.expire(19) == 10  # ids 0..9: the newest of them (9) is now 10 old
        assert len(table) == 5
        assert table.expire(23.9) == 0
        assert table.expire(24) == 5  # ids 10..14, sealed at 19: the newest (14) is 10 old
        assert len(table) == 0
        assert table._runs == {}
        assert table.tombstones == 2
        assert table.expire(25) == 2  # both tombstones: the newer one is now 20 old
        assert table.tombstones == 0

    @pytest.mark.parametrize("period", [1.0, 0.25, 3.0])
    def test_documented_bound_under_steady_traffic(self, period: float) -> None:
        # With expire called every E (``period``) and events flowing all the time, every
        # workload is forgotten no sooner than the TTL and no later than 2 x TTL + 2 x E after
        # its last applied event (module docstring).
        ttl = 10.0
        t = WorkloadTable(TableLimits(terminal_ttl=ttl, live_ttl=ttl, tombstone_ttl=ttl))
        last: dict[str, float] = {}
        ages: list[float] = []
        finished: set[int] = set()
        now = 0.0
        next_expiry = period
        for i in range(2000):
            now = round(now + 0.05, 6)
            if now >= next_expiry:
                t.expire(now)
                next_expiry += period
                for wid in [w for w in last if not held(t, "run-a", w)]:
                    ages.append(now - last.pop(wid))
            # A new workload every step; an earlier one gets its last event 0 to 8 s late.
            assert t.observe(ev(id=str(i), seq=1, state="running"), now) == "applied"
            last[str(i)] = now
            j = i - (i * 7) % 160
            if j < i and str(j) in last and j not in finished:
                finished.add(j)
                assert t.observe(ev(id=str(j), seq=2, state="completed"), now) == "applied"
                last[str(j)] = now
        assert len(ages) > 100
        assert min(ages) >= ttl
        assert max(ages) < 2 * ttl + 2 * period
        assert max(ages) > 1.5 * ttl  # the upper bound is not a formality

    def test_idle_table_expires_exactly_after_ttl(self, table: WorkloadTable) -> None:
        # No later traffic: a generation goes as soon as its newest entry is TTL old, even
        # with a single call of expire.
        table.observe(ev(id="1", state="completed"), 0)
        table.observe(ev(id="2", state="completed"), 3)
        assert table.expire(12.9) == 0
        assert table.expire(13) == 2

    def test_touch_moves_to_current_generation(self, table: WorkloadTable) -> None:
        table.observe(ev(id="A", seq=1, state="completed"), 0)
        table.observe(ev(id="B", seq=1, state="completed"), 0)
        assert table.expire(1) == 0  # sealed: A and B are the previous generation
        table.observe(ev(id="A", seq=2, state="completed"), 5)
        assert table.expire(10) == 1  # B went; A, touched at 5, stays
        assert held(table, "run-a", "A") and not held(table, "run-a", "B")
        assert table.expire(15) == 1

    def test_tombstone_bound(self, table: WorkloadTable) -> None:
        table.remove("node-a", "1", None, 0)
        assert table.expire(1) == 0  # sealed
        table.remove("node-a", "2", None, 15)  # keeps the class busy
        assert table.expire(19.9) == 0
        assert table.observe(ev(id="1"), 19.9) == "removed"
        assert table.expire(20) == 1
        assert table.observe(ev(id="1"), 20) == "applied"
        assert table.expire(34.9) == 0
        assert table.expire(35) == 1  # the second: at 20 it was sealed, now it is 20 old

    def test_expired_newest_run_leaves_removal_without_run_covering_every_run(
        self, table: WorkloadTable
    ) -> None:
        # The index follows the workloads: when the newest run held is gone, a removal without
        # runId finds none, and covers every run (as the schema documents).
        table.observe(ev(run="r1", state="completed"), 0)
        table.expire(10)
        assert len(table) == 0
        assert table.remove("node-a", "1", None, 11) == ("applied", Removal("node-a", "1", None))
        assert table.observe(ev(run="r1"), 12) == "removed"
        assert table.observe(ev(run="r9"), 12) == "removed"


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

    def test_live_evicted_when_no_terminal(self) -> None:
        # Replaces "oldest live evicted": within a generation the victim is arbitrary, but it
        # is a live one, never the one just recorded, and it leaves the index.
        t = capped(2)
        t.observe(ev(id="A"), 0)
        t.observe(ev(id="B"), 1)
        t.observe(ev(id="C"), 2)
        assert t.evicted == 1
        assert len(t) == 2
        assert held(t, "run-a", "C")
        [gone] = [w for w in "AB" if not held(t, "run-a", w)]
        assert gone not in t._runs
        assert t.remove("node-a", gone, None, 3)[1].run_id is None  # no run held any more
        check_invariants(t)

    def test_previous_generation_evicted_first(self) -> None:
        # Replaces "touch moves to the back": a touched entry moves to the current generation,
        # and the previous one is evicted first.
        t = capped(2)
        t.observe(ev(id="A", seq=1), 0)
        t.observe(ev(id="B", seq=1), 1)
        t.expire(2)  # seals A and B into the previous generation
        t.observe(ev(id="A", seq=2), 2)
        t.observe(ev(id="C", seq=1), 3)
        assert t.observe(ev(id="A", seq=2), 4) == "duplicate"
        assert t.observe(ev(id="C", seq=1), 4) == "duplicate"
        assert t.observe(ev(id="B", seq=1), 4) == "applied"  # B was in the older generation

    def test_entries_recorded_after_the_cap_was_reached_go_last(self) -> None:
        # At the cap with no older generation, the current one is sealed: what comes after
        # that moment is evicted only once everything from before it is gone.
        t = capped(4)
        for wid in "ABCD":
            t.observe(ev(id=wid), 0)
        for wid in "EFG":
            t.observe(ev(id=wid), 1)
        assert t.evicted == 3
        assert all(held(t, "run-a", w) for w in "EFG")
        assert sum(held(t, "run-a", w) for w in "ABCD") == 1

    def test_duplicate_does_not_refresh_generation(self) -> None:
        t = capped(1)
        t.observe(ev(id="A"), 0)
        t.expire(1)  # A is in the previous generation
        assert t.observe(ev(id="A"), 2) == "duplicate"
        t.observe(ev(id="C"), 3)
        assert t.observe(ev(id="C"), 4) == "duplicate"
        assert t.observe(ev(id="A"), 4) == "applied"  # A was evicted, despite its duplicate

    def test_tombstone_cap_evicts_older_generation_first(self) -> None:
        t = capped(tombstones=2)
        t.remove("node-a", "1", None, 0)
        t.expire(1)  # sealed
        t.remove("node-a", "2", None, 1)
        t.remove("node-a", "3", None, 2)
        assert t.tombstones == 2
        assert t.evicted == 1
        assert t.observe(ev(id="1"), 3) == "applied"
        assert t.observe(ev(id="2"), 3) == "removed"
        assert t.observe(ev(id="3"), 3) == "removed"

    def test_taken_runs_count_against_the_tombstone_cap_and_go_first(self) -> None:
        t = capped(workloads=10, tombstones=4)
        for wid in "123":
            t.observe(ev(id=wid, run="r1"), 0)
        for i, wid in enumerate("123"):
            t.remove("node-b", wid, "r1", i + 1)
        # node-b's three tombstones, and of node-a's three runs taken the one just taken.
        assert (t.tombstones, len(t._taken), t.evicted) == (3, 1, 2)
        check_invariants(t)
        assert t.remove("node-a", "3", None, 5)[1] == Removal("node-a", "3", "r1")

    def test_tombstone_just_left_is_never_evicted(self) -> None:
        t = capped(tombstones=1)
        for i in range(5):
            t.remove("node-a", str(i), None, i)
            assert t.tombstones == 1
            assert t.observe(ev(id=str(i)), i) == "removed"
        assert t.evicted == 4

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

    def test_newer_seq_from_a_peer_keeps_our_frame_for_replay(self, table: WorkloadTable) -> None:
        observe_local(table, ev(id="7", seq=1), 0)
        assert table.observe(ev(id="7", seq=2, state="running"), 1) == "applied"
        assert table.observe(ev(id="7", seq=2, state="running"), 2) == "duplicate"
        assert table.observe(ev(id="7", seq=1), 2) == "stale"
        [out], _ = table.originated()
        assert out.seq == 1  # the newest frame we originated, as before
        observe_local(table, ev(id="7", seq=3, state="completed"), 3)
        [out], _ = table.originated()
        assert out.seq == 3
        check_invariants(table)


# -- representation ----------------------------------------------------------------------------


class TestRepresentation:
    def test_remote_workload_is_a_key_and_an_int(self, table: WorkloadTable) -> None:
        table.observe(ev(id="5", seq=1), 0)
        table.observe(ev(id="5", seq=2, state="running"), 1)  # in place
        table.observe(ev(id="5", seq=3, state="completed"), 2)  # moves to the terminal class
        [(key, value)] = table._done.cur.items()
        assert value == 3 and type(value) is int
        assert key[0] is sys.intern("run-a")  # one runId string per run
        # The id string survives once: the index is keyed on the same object as the table.
        [index_key] = table._runs
        assert index_key is key[1]
        assert table._runs["5"] == ("node-a", "run-a")
        assert table._runs["5"] is table._runs.get(key[1])

    def test_runs_share_one_pair(self, table: WorkloadTable) -> None:
        for i in range(5):
            table.observe(ev(id=str(i)), 0)
        pairs = list(table._runs.values())
        assert all(p is pairs[0] for p in pairs)
        table.observe(ev(id="9", run="run-b", state="completed"), 0)
        table.expire(10)  # a dropped generation clears the cache of pairs
        assert table._pairs == {}

    def test_same_id_from_several_origins(self, table: WorkloadTable) -> None:
        table.observe(ev(origin="node-a", run="ra1"), 0)
        table.observe(ev(origin="node-b", run="rb1"), 0)
        table.observe(ev(origin="node-a", run="ra2"), 0)  # a newer run for node-a
        entry = table._runs["1"]
        assert isinstance(entry, _Ids) and entry.held == 3
        assert sorted(entry.newest) == [("node-a", "ra2"), ("node-b", "rb1")]
        check_invariants(table)
        assert table.remove("node-b", "1", None, 1)[1].run_id == "rb1"
        assert table._newest("node-a", "1") == "ra2"
        assert table.remove("node-a", "1", None, 1)[1].run_id == "ra2"
        # ra1 is held, but it is not the newest run seen: no removal without runId finds it.
        assert table._newest("node-a", "1") is None
        assert held(table, "ra1", "1")
        check_invariants(table)
        table.remove("node-a", "1", "ra1", 2)
        assert "1" not in table._runs  # no workload holds the id any more
        check_invariants(table)

    def test_one_holder_left_is_a_pair_again(self, table: WorkloadTable) -> None:
        table.observe(ev(origin="node-a", run="ra1"), 0)
        table.observe(ev(origin="node-b", run="rb1"), 0)
        table.remove("node-b", "1", "rb1", 1)
        assert table._runs["1"] == ("node-a", "ra1")
        check_invariants(table)


# -- against a model of the documented semantics ----------------------------------------------


class Model:
    """Duplicates, stale events, tombstones and the newest run, with no expiry or caps."""

    def __init__(self) -> None:
        self.seqs: dict[tuple[str, str], int] = {}
        self.newest: dict[tuple[str, str], str] = {}  # (origin, id) → run first seen last
        self.taken: set[tuple[str, str]] = set()  # newest runs another origin's removal took
        # (origin, id) → the runs removed, oldest first (None: every run)
        self.tombs: dict[tuple[str, str], list[str | None]] = {}

    def observe(self, origin: str, run: str, wid: str, seq: int) -> str:
        okey = (origin, wid)
        removed = self.tombs.get(okey, [])
        if None in removed or run in removed:
            return "removed"
        key = (run, wid)
        if key not in self.seqs:
            self.seqs[key] = seq
            self.newest[okey] = run
            self.taken.discard(okey)
            return "applied"
        if seq == self.seqs[key]:
            return "duplicate"
        if seq < self.seqs[key]:
            return "stale"
        self.seqs[key] = seq
        return "applied"

    def remove(self, origin: str, wid: str, run_id: str | None) -> tuple[str, Removal]:
        okey = (origin, wid)
        run = run_id if run_id is not None else self.newest.get(okey)
        removed = self.tombs.setdefault(okey, [])
        if run is None and removed:
            run = removed[-1]
        removal = Removal(origin, wid, run)
        if removed and (None in removed or run in removed):
            return "duplicate", removal
        if run is not None and self.seqs.pop((run, wid), None) is not None:
            # A run removed stays the newest run of its origin (as in the kit's model), also when
            # another origin's removal took it (the key (runId, id) is shared by origins).
            self.taken |= {k for k, r in self.newest.items() if k[1] == wid and r == run} - {okey}
        removed.append(run)
        return "applied", removal


def agree(t: WorkloadTable, got: tuple[str, Removal], expected: tuple[str, Removal]) -> bool:
    """The same outcome, and when applied the same Removal (what is forwarded). A duplicate is
    forwarded nowhere: the run it names need only be one the tombstone covers (once a run its
    own origin removed left the table, the table names the tombstone's newest run)."""
    if got[0] != expected[0]:
        return False
    if got[0] == "applied":
        return got[1] == expected[1]
    origin, wid, run = got[1].origin, got[1].workload_id, got[1].run_id
    return got[0] == "duplicate" and t.covers(origin, wid, run or "")


@pytest.mark.parametrize("seed", range(4))
def test_same_outcomes_as_the_model(seed: int) -> None:
    rng = random.Random(seed)
    t = WorkloadTable(TableLimits(max_workloads=10**6, max_tombstones=10**6))
    m = Model()
    for step in range(20_000):
        origin = rng.choice(("node-a", "node-b", "node-c"))
        wid = str(rng.randint(1, 6))
        if rng.random() < 0.15:
            run_id = rng.choice((None, "r1", "r2", "r3"))
            local = rng.random() < 0.5
            removed = t.remove(origin, wid, run_id, step, local=local)
            assert agree(t, removed, m.remove(origin, wid, run_id)), step
        else:
            run = rng.choice(("r1", "r2", "r3", "r4"))
            seq = rng.randint(1, 5)
            state = rng.choice(("queued", "running", "completed", "failed"))
            info = ev(id=wid, run=run, seq=seq, state=state, origin=origin)
            expected = m.observe(origin, run, wid, seq)
            got = observe_local(t, info, step) if rng.random() < 0.3 else t.observe(info, step)
            assert got == expected, step
        if step % 500 == 0:
            check_invariants(t)
            assert len(t) == len(m.seqs)
    check_invariants(t)


@pytest.mark.parametrize("seed", range(4))
def test_same_outcomes_as_the_model_with_caps_and_expiry(seed: int) -> None:
    # The same model, with what the table forgot (evicted at its small cap, or expired)
    # forgotten by the model too after every step: duplicates, stale events, removals and the
    # newest run must agree on everything the table still holds; the index stays exact.
    rng = random.Random(seed)
    t = WorkloadTable(
        TableLimits(
            terminal_ttl=30.0,
            live_ttl=80.0,
            tombstone_ttl=1e9,
            max_workloads=25,
            max_tombstones=10**6,
        )
    )
    m = Model()
    now = 0.0
    expired = 0
    for step in range(6_000):
        now += rng.random()
        origin = rng.choice(("node-a", "node-b"))
        wid = str(rng.randint(1, 12))
        if rng.random() < 0.1:
            run_id = rng.choice((None, "r1", "r2", "r3"))
            local = rng.random() < 0.5
            removed = t.remove(origin, wid, run_id, now, local=local)
            assert agree(t, removed, m.remove(origin, wid, run_id)), step
        else:
            run = rng.choice(("r1", "r2", "r3", "r4"))
            seq = rng.randint(1, 5)
            state = rng.choice(("queued", "running", "completed", "failed"))
            info = ev(id=wid, run=run, seq=seq, state=state, origin=origin)
            expected = m.observe(origin, run, wid, seq)
            got = observe_local(t, info, now) if rng.random() < 0.3 else t.observe(info, now)
            assert got == expected, step
        if rng.random() < 0.05:
            expired += t.expire(now)
        for key in [k for k in m.seqs if not held(t, *k)]:
            del m.seqs[key]  # evicted or expired: forgotten
        for okey in [
            k for k, run in m.newest.items() if not held(t, run, k[1]) and k not in m.taken
        ]:
            del m.newest[okey]
        assert len(t) == len(m.seqs)
        check_invariants(t)
    assert t.evicted > 50 and expired > 50  # both ways of forgetting were exercised
