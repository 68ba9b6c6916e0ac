"""The per-peer outbox and the snapshot (sans-IO): no sockets, no sleeps, injected clock and RNG."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from nvpair_wm_schema.workload_info_schema import WorkloadInfo

from nvpair_wm.dedup import Removal, WorkloadTable
from nvpair_wm.dispatch import outbound_event, outbound_removal
from nvpair_wm.events import Outbound, lifecycle_frame
from nvpair_wm.outbox import Backoff, Batch, BroadcastLimits, PeerOutbox, RetryRun
from nvpair_wm.sync import Snapshot
from nvpair_wm.versions import CONTRACT_HEADER
from tests.support.frames import info

STATES = {1: "queued", 2: "running", 3: "completed"}


def kept(info: WorkloadInfo) -> Outbound:
    """The encoded frame the table keeps for replay of a local event."""
    return outbound_event(lifecycle_frame(info))


def observe_local(table: WorkloadTable, info: WorkloadInfo, now: float) -> str:
    return table.observe(info, now, replay=kept(info))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ev(wid: str = "1", seq: int = 1, run: str = "run-a", **kw: Any) -> Outbound:
    state = kw.pop("state", STATES.get(seq, "running"))
    return outbound_event(lifecycle_frame(info(id=wid, seq=seq, runId=run, state=state, **kw)))


def rm(wid: str = "1", run: str | None = "run-a") -> Outbound:
    return outbound_removal(Removal("node-a", wid, run))


def ids(batch: Batch | None) -> list[tuple[str, float]]:
    assert batch is not None
    out = []
    for frame in json.loads(batch.body):
        p = frame["params"]
        if "workloadInfo" in p:
            out.append((p["workloadInfo"]["id"], p["workloadInfo"]["seq"]))
        else:
            out.append((p["workloadId"], float("inf")))
    return out


def nothing() -> tuple[list[WorkloadInfo], list[Removal]]:
    return [], []


def make(
    originated: Any = nothing, clock: Clock | None = None, seed: int = 1, **limits: Any
) -> PeerOutbox:
    lim = BroadcastLimits(**limits)
    return PeerOutbox(
        "peer", lim, originated, clock=clock or Clock(), wall=lambda: 1.5, rng=random.Random(seed)
    )


# -- coalescing and bounds ------------------------------------------------------------------------


def test_newer_event_replaces_the_queued_one_in_place() -> None:
    box = make()
    box.push([ev("1", 1), ev("2", 1), ev("1", 2), ev("1", 3)])
    assert box.queued == 2 and box.coalesced == 2
    assert ids(box.next_batch()) == [("1", 3), ("2", 1)]  # "1" kept its turn, newest state


def test_older_or_equal_event_does_not_replace() -> None:
    box = make()
    box.push([ev("1", 2), ev("1", 1), ev("1", 2)])
    assert box.coalesced == 0
    assert ids(box.next_batch()) == [("1", 2)]


def test_removal_replaces_every_event_of_its_run() -> None:
    box = make()
    box.push([ev("1", 1), ev("1", 2), rm("1")])
    assert ids(box.next_batch()) == [("1", float("inf"))]


def test_other_runs_are_other_workloads() -> None:
    box = make()
    box.push([ev("1", 5, run="old"), ev("1", 1, run="new")])
    assert box.coalesced == 0 and box.queued == 2


def test_queue_full_in_frames_drops_new_workloads_and_counts_them() -> None:
    box = make(max_queue_frames=3)
    box.push([ev(str(i)) for i in range(5)])
    assert box.queued == 3 and box.dropped == 2
    box.push([ev("0", 2)])  # a queued workload still gets its newer state
    assert box.coalesced == 1 and box.dropped == 2


def test_queue_full_in_bytes() -> None:
    one = len(ev("1").body)
    box = make(max_queue_bytes=2 * one + one // 2)
    box.push([ev("1"), ev("2"), ev("3")])
    assert box.queued == 2 and box.dropped == 1


def test_bounds_count_frames_in_flight() -> None:
    box = make(max_queue_frames=2, max_batch_frames=2)
    box.push([ev("1"), ev("2")])
    batch = box.next_batch()
    assert batch is not None and len(batch) == 2 and box.queued == 0
    box.push([ev("3")])
    assert box.dropped == 1  # two in flight: no room
    box.delivered(batch)
    box.push([ev("3")])
    assert box.queued == 1


def test_drops_schedule_a_snapshot_once_the_queue_is_empty() -> None:
    table = WorkloadTable()
    for i in range(4):
        observe_local(table, info(id=str(i)), 0.0)
    box = make(table.originated, max_queue_frames=2)
    box.push([ev("0"), ev("1"), ev("2"), ev("3")])
    assert box.dropped == 2
    assert ids(box.next_batch()) == [("0", 1), ("1", 1)]  # the queue first: no snapshot yet
    assert box.snapshots == 0
    resync = box.next_batch()  # queue empty: now the snapshot repairs what was dropped
    assert box.snapshots == 1
    assert sorted(ids(resync)) == [("0", 1), ("1", 1), ("2", 1), ("3", 1)]


# -- batching -------------------------------------------------------------------------------------


def test_batches_are_bounded_in_frames_and_bytes_and_are_json_rpc_batches() -> None:
    box = make(max_batch_frames=3)
    box.push([ev(str(i)) for i in range(7)])
    sizes = []
    while (b := box.next_batch()) is not None:
        frames = json.loads(b.body)
        assert isinstance(frames, list) and all(f["jsonrpc"] == "2.0" for f in frames)
        assert len(b.body) == b.size
        sizes.append(len(b))
    assert sizes == [3, 3, 1]
    one = len(ev("1").body)
    box = make(max_batch_bytes=2 * one + 3)
    box.push([ev(str(i)) for i in range(5)])
    batch = box.next_batch()
    assert batch is not None and len(batch) == 2 and batch.size <= 2 * one + 3


def test_a_frame_larger_than_a_batch_goes_alone() -> None:
    box = make(max_batch_bytes=10)
    box.push([ev("1"), ev("2")])
    assert len(box.next_batch() or []) == 1
    assert len(box.next_batch() or []) == 1


def test_a_tighter_body_bound_from_the_connection_caps_the_batch() -> None:
    one = len(ev("1").body)
    box = make()
    box.push([ev(str(i)) for i in range(10)])
    batch = box.next_batch(3 * one + 4)  # the peer's stream window: three frames and "[,,]"
    assert batch is not None and len(batch) == 3 and batch.size == len(batch.body)
    rest = box.next_batch(10)  # smaller than a frame: the first one still goes, alone
    assert rest is not None and len(rest) == 1
    whole = box.next_batch(10 * one)  # the rest fits: taken whole, in order
    assert whole is not None and ids(whole) == [(str(i), 1) for i in range(4, 10)]
    assert whole.size == len(whole.body) and box.queued == 0


def test_batches_are_the_largest_that_fit_and_keep_the_order() -> None:
    rng = random.Random(7)
    for _ in range(300):
        frames, max_bytes = rng.randint(1, 12), rng.randint(5, 600)
        box = make(max_batch_frames=frames, max_batch_bytes=max_bytes)
        pushed = [ev(str(i), 1, model="m" * rng.randint(1, 60)) for i in range(rng.randint(1, 30))]
        box.push(pushed)
        sent: list[Outbound] = []
        while (b := box.next_batch()) is not None:
            assert b.size == len(b.body) and len(b) <= frames
            assert len(b) == 1 or b.size <= max_bytes
            following = box.depth and pushed[len(sent) + len(b)]
            if following and len(b) < frames:  # the next frame did not fit
                assert b.size + 1 + len(following.body) > max_bytes
            sent += b.queued
            box.delivered(b)
        assert [o.key for o in sent] == [o.key for o in pushed] and box.depth == 0


def test_idle_link_sends_at_once_busy_link_accumulates() -> None:
    box = make()
    box.push([ev("1")])
    first = box.next_batch()
    assert ids(first) == [("1", 1)]  # alone, immediately
    box.push([ev(str(i)) for i in range(2, 50)])  # arrive while the first is in flight
    second = box.next_batch()
    assert second is not None and len(second) == 48


# -- retry ----------------------------------------------------------------------------------------


def test_backoff_schedule_stays_within_bounds() -> None:
    rng = random.Random(7)
    b = Backoff(0.1, 5.0, rng)
    ceilings = [b.ceiling(n) for n in range(1, 10)]
    assert ceilings == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    for n in range(1, 200):
        d = b.delay(n)
        assert b.ceiling(n) / 2 <= d <= b.ceiling(n)
    assert b.ceiling(10_000) == 5.0  # no overflow for a peer that is gone for days


def test_retry_after_is_honoured_up_to_a_cap() -> None:
    run = RetryRun(BroadcastLimits(max_retry_after=30.0), random.Random(1))
    run.failure(100.0, retry_after=7.0)
    assert 107.0 <= run.retry_at <= 110.5  # never sooner, spread over half of it more
    run.failure(200.0, retry_after=3600.0)
    assert 230.0 <= run.retry_at <= 245.0


def test_senders_told_the_same_retry_after_do_not_come_back_together() -> None:
    """A busy peer answers 503 with Retry-After: 1 to a thousand members at once: their next
    attempts spread over [1, 1.5] s instead of landing in the same instant."""
    rng = random.Random(31)
    at = []
    for _ in range(1000):
        run = RetryRun(BroadcastLimits(), rng)
        run.failure(0.0, retry_after=1.0)
        at.append(run.retry_at)
    assert min(at) >= 1.0 and max(at) <= 1.5
    buckets = {int((t - 1.0) / 0.05) for t in at}  # 50 ms bins over the half second
    assert len(buckets) >= 10, sorted(at)[:5]


def test_failed_batch_is_retried_first_after_the_backoff() -> None:
    clock = Clock()
    box = make(clock=clock)
    box.push([ev("1"), ev("2")])
    batch = box.next_batch()
    assert batch is not None
    box.push([ev("3")])
    box.failed(batch, "HTTP 503", retry_after=2.0)
    assert box.retried == 2 and box.last_error == "HTTP 503" and box.last_error_at == 1500
    assert box.next_batch() is None  # backing off
    assert clock.now + 2.0 <= box.ready_at() <= clock.now + 3.0  # Retry-After, spread
    clock.now = box.ready_at()
    assert ids(box.next_batch()) == [("1", 1), ("2", 1), ("3", 1)]


def test_requests_in_flight_together_fail_as_one_failure_of_the_link() -> None:
    """16 requests of one HTTP/2 link time out (or get 503) together: one failure, not 16, so
    a retry budget of 4 is not spent within a millisecond (the soak's seed 302)."""
    clock = Clock()
    box = make(clock=clock, max_batch_frames=1, max_in_flight=16, retry_max_attempts=4)
    box.push([ev(str(i)) for i in range(16)])
    batches = [box.next_batch() for _ in range(16)]
    assert all(b is not None for b in batches)
    for b in batches:
        assert b is not None
        box.failed(b, "HTTP 503", retry_after=1.0)
    assert box.retry.failures == 1 and not box.given_up
    assert box.queued == 16 and box.dropped == 0
    assert box.ready_at() >= clock.now + 1.0  # the Retry-After of every failure is honoured
    # Sent again after that failure, each new round of failures counts once more.
    for attempt in range(2, 5):
        clock.now = box.ready_at()
        again = box.next_batch()
        assert again is not None
        box.failed(again, "HTTP 503")
        assert box.retry.failures == attempt
    assert box.given_up and box.dropped > 0


def test_a_failure_after_a_success_starts_a_new_run_even_for_an_older_request() -> None:
    box = make(max_batch_frames=1)
    box.push([ev("1"), ev("2")])
    first, second = box.next_batch(), box.next_batch()
    assert first is not None and second is not None
    box.delivered(first)
    box.failed(second, "reset")
    assert box.retry.failures == 1


# -- a wait the peer asked for --------------------------------------------------------------------

RETRY_AFTER_1 = [(b"retry-after", b"1")]
BAD_FIRST = b'[{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"Invalid params",'
BAD_FIRST += b'"data":{"index":0}}}]'


@pytest.mark.parametrize(
    ("status", "body"),
    [(202, b""), (404, b"no such path"), (400, BAD_FIRST)],
    ids=["taken", "final-4xx", "partly-taken"],
)
def test_an_answer_beside_a_503_keeps_its_retry_after(status: int, body: bytes) -> None:
    """Two requests in flight: one answered 503 with Retry-After: 1, then the other answered
    (taken, refused for good, taken but for a frame). That ends the run of failures, not the
    wait the peer asked for: the refused frame goes again only once it has run out."""
    clock = Clock()
    box = make(clock=clock, max_batch_frames=1)
    box.push([ev("1"), ev("2")])
    refused, beside = box.next_batch(), box.next_batch()
    assert refused is not None and beside is not None
    box.answered(refused, 503, RETRY_AFTER_1, b"busy")
    box.answered(beside, status, [], body)
    assert box.retry.failures == 0 and box.retry.since is None
    assert box.ready_at() >= clock.now + 1.0
    clock.now += 0.999
    assert box.next_batch() is None
    clock.now = box.ready_at()
    assert ids(box.next_batch()) == [("1", 1)]


def test_a_version_refusal_beside_a_503_keeps_its_retry_after() -> None:
    """The other request is refused for its contract version (409): the version probe, due in
    0.1 s, still waits for the Retry-After."""
    clock = Clock()
    table = WorkloadTable()
    observe_local(table, info(id="1"), 0.0)
    box = make(table.originated, clock=clock, max_batch_frames=1, version_probe_interval=0.1)
    box.push([ev("1"), ev("2")])
    refused, beside = box.next_batch(), box.next_batch()
    assert refused is not None and beside is not None
    box.answered(refused, 503, RETRY_AFTER_1, b"busy")
    box.answered(beside, 409, [(CONTRACT_HEADER, b"99.0.0")], b"")
    assert box.peer_state(connected=True) == "refused"
    clock.now += 0.999
    assert box.next_batch() is None
    clock.now = box.ready_at()
    assert ids(box.next_batch()) == [("1", 1)]  # the probe: a snapshot


def test_a_reload_or_a_failed_connection_does_not_shorten_a_retry_after() -> None:
    clock = Clock()
    box = make(clock=clock)
    box.push([ev("1")])
    batch = box.next_batch()
    assert batch is not None
    box.answered(batch, 503, [(b"retry-after", b"2")], b"busy")
    until = box.ready_at()
    assert until >= clock.now + 2.0
    box.set_limits(BroadcastLimits(retry_base=0.01, retry_max_delay=0.02, max_retry_after=0.5))
    assert box.ready_at() == until
    box.failed(None, "connection refused")  # counted, with a backoff of 0.02 s at most
    assert box.ready_at() == until


class CountingClock(Clock):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def test_a_success_reads_the_clock_only_while_a_retry_after_is_recorded() -> None:
    clock = CountingClock()
    run = RetryRun(BroadcastLimits(), random.Random(1))
    run.success(clock)
    assert clock.reads == 0 and run.retry_at == 0.0
    run.failure(clock.now, retry_after=1.0)
    run.success(clock)  # the wait runs: kept
    assert clock.reads == 1 and run.retry_at >= clock.now + 1.0
    clock.now = run.retry_at
    run.success(clock)  # it ran out: forgotten, so that next_batch reads no clock either
    assert run.retry_at == 0.0 and run.asked_until == 0.0
    run.success(clock)
    assert clock.reads == 2


def test_requeued_frame_loses_to_a_newer_queued_one() -> None:
    box = make()
    box.push([ev("1", 1)])
    batch = box.next_batch()
    assert batch is not None
    box.push([ev("1", 2)])
    box.failed(batch, "reset")
    assert box.coalesced == 1
    box.retry.retry_at = 0
    assert ids(box.next_batch()) == [("1", 2)]


def test_exhausted_retries_drop_the_queue_then_resync_when_the_peer_answers() -> None:
    clock = Clock()
    table = WorkloadTable()
    for i in range(3):
        observe_local(table, info(id=str(i)), 0.0)
    box = make(table.originated, clock=clock, retry_max_attempts=3)
    box.push([ev("0"), ev("1"), ev("2")])
    for _ in range(3):
        box.failed(None, "connection refused")
        clock.now = box.ready_at()
    assert box.given_up and box.queued == 0 and box.dropped == 3
    box.push([ev("9")])  # the resync will carry it
    assert box.dropped == 4 and box.queued == 0
    box.failed(None, "connection refused")  # still probing, at the capped delay
    assert box.ready_at() - clock.now <= 5.0
    clock.now = box.ready_at()
    box.connected()  # the peer is back
    resync = box.next_batch()
    assert sorted(ids(resync)) == [("0", 1), ("1", 1), ("2", 1)]
    assert resync is not None
    box.delivered(resync)
    assert not box.given_up and box.sent == 3


def test_retries_are_exhausted_by_age_too() -> None:
    clock = Clock()
    box = make(clock=clock, retry_max_attempts=100, retry_max_age=10.0)
    box.push([ev("1")])
    box.failed(None, "refused")
    clock.now += 9.9
    box.failed(None, "refused")
    assert not box.given_up
    clock.now += 0.2
    box.failed(None, "refused")
    assert box.given_up and box.dropped == 1


def test_success_resets_the_run() -> None:
    clock = Clock()
    box = make(clock=clock, retry_max_attempts=2)
    box.push([ev("1")])
    box.failed(None, "refused")
    clock.now = box.ready_at()
    batch = box.next_batch()
    assert batch is not None
    box.delivered(batch)
    assert box.retry.failures == 0 and box.ready_at() == 0
    box.failed(None, "refused")
    assert not box.given_up


def test_final_rejection_drops_the_batch_without_backing_off() -> None:
    box = make()
    box.push([ev("1"), ev("2")])
    batch = box.next_batch()
    assert batch is not None
    box.rejected(batch, 415, "content-type must be application/json")
    assert box.dropped == 2 and box.retried == 0 and box.ready_at() == 0
    assert box.last_error == "HTTP 415: content-type must be application/json"


def test_partial_400_counts_only_the_named_frames() -> None:
    box = make()
    box.push([ev("1"), ev("2"), ev("3")])
    batch = box.next_batch()
    assert batch is not None
    box.delivered(batch, frozenset({1}), "HTTP 400: ...")
    assert box.sent == 2 and box.dropped == 1


def test_413_halves_the_batch_and_retries() -> None:
    box = make()
    box.push([ev(str(i)) for i in range(10)])
    batch = box.next_batch()
    assert batch is not None and len(batch) == 10
    assert box.too_large(batch)
    assert box.batch_bytes < batch.size and box.dropped == 0 and box.queued == 10
    smaller = box.next_batch()
    assert smaller is not None and smaller.size <= box.batch_bytes


# -- snapshots ------------------------------------------------------------------------------------


def test_a_new_connection_sends_the_snapshot_first_and_it_supersedes_the_queue() -> None:
    table = WorkloadTable()
    observe_local(table, info(id="1", seq=1), 0.0)
    observe_local(table, info(id="1", seq=2, state="running"), 0.0)
    observe_local(table, info(id="2", seq=1), 0.0)
    table.remove("node-a", "2", "run-a", 0.0, local=True)
    table.observe(info(id="3", seq=1, originatedFrom="node-b"), 0.0)  # not ours: not replayed
    box = make(table.originated)
    box.push([ev("1", 1), ev("1", 2)])  # covered by the snapshot
    box.connected()
    batch = box.next_batch()
    assert ids(batch) == [("1", 2), ("2", float("inf"))]
    assert box.queued == 0 and box.snapshots == 1
    # after the snapshot, newer events follow as usual
    observe_local(table, info(id="1", seq=3, state="completed"), 0.0)
    box.push([ev("1", 3)])
    assert ids(box.next_batch()) == [("1", 3)]


def test_snapshot_frames_are_the_lifecycle_frame_of_each_state() -> None:
    table = WorkloadTable()
    observe_local(table, info(id="7", seq=4, state="failed", error="boom"), 0.0)
    box = make(table.originated)
    box.connected()
    frame = json.loads(box.next_batch().body)[0]  # type: ignore[union-attr]
    assert frame["method"] == "workload:errored"
    assert frame["params"]["workloadInfo"]["error"] == "boom"


def test_a_big_snapshot_goes_out_in_bounded_batches_and_a_reconnect_restarts_it() -> None:
    table = WorkloadTable()
    for i in range(25):
        observe_local(table, info(id=str(i)), 0.0)
    box = make(table.originated, max_batch_frames=10)
    box.connected()
    first = box.next_batch()
    assert first is not None and len(first) == 10 and box.depth == 15
    box.failed(first, "connection lost")
    box.retry.retry_at = 0
    box.connected()  # a new connection: a fresh snapshot replaces the half-sent one
    seen = []
    while (b := box.next_batch()) is not None:
        seen += ids(b)
        box.delivered(b)
    assert sorted(seen) == sorted((str(i), 1) for i in range(25))


def test_flush_only_skips_snapshots() -> None:
    table = WorkloadTable()
    observe_local(table, info(id="1"), 0.0)
    box = make(table.originated)
    box.push([ev("2")])
    box.connected()
    box.drain()
    batch = box.next_batch()
    assert ids(batch) == [("2", 1)]
    assert batch is not None and not box.idle  # in flight
    box.delivered(batch)
    assert box.idle


def test_snapshot_unpop_and_covered() -> None:
    snap = Snapshot([kept(info(id="1")), kept(info(id="2"))], [Removal("node-a", "3", None)])
    assert len(snap) == 3
    assert list(snap.covered()) == [
        (("node-a", "1", "run-a"), 1),
        (("node-a", "2", "run-a"), 1),
        (("node-a", "3", ""), float("inf")),
    ]
    a = snap.pop()
    assert a is not None
    snap.unpop([a])
    assert len(snap) == 3 and snap.pop() == a


def test_status_reports_the_counters() -> None:
    box = make()
    box.push([ev("1"), ev("1", 2)])
    st = box.status("node-b", "10.0.0.2", 14320, True, "h2")
    assert (st.nodeId, st.connected, st.protocol, st.queueDepth, st.coalesced) == (
        "node-b",
        True,
        "h2",
        1,
        1,
    )
    assert box.status("node-b", "x", 1, False, None).protocol is None
