"""The peer link's state table and what an answer means: pure, no sockets, no clock."""

from __future__ import annotations

import json
import random
import re

import pytest

from nvpair_wm.dedup import Removal
from nvpair_wm.dispatch import outbound_event
from nvpair_wm.events import Outbound, lifecycle_frame
from nvpair_wm.outbox import BroadcastLimits, PeerOutbox
from nvpair_wm.peerlink import (
    HOLDING,
    TRANSITIONS,
    LinkEvent,
    LinkState,
    Verdict,
    judge,
)
from nvpair_wm.versions import CONTRACT_HEADER
from tests.support.frames import info
from tests.support.source_tree import ROOT
from tests.support.transitions import reachable

S, E = LinkState, LinkEvent


def test_the_table_is_total() -> None:
    """Every event has a row in every state: no event finds a link in an unplanned state."""
    missing = [(s, e) for s in S for e in E if (s, e) not in TRANSITIONS]
    assert missing == []


def test_stopped_is_final_and_draining_ends_only_in_stopped() -> None:
    assert {TRANSITIONS[S.STOPPED, e] for e in E} == {S.STOPPED}
    assert {TRANSITIONS[S.DRAINING, e] for e in E} == {S.DRAINING, S.STOPPED}


def test_only_an_answer_ends_a_run_of_failures() -> None:
    """A new connection is no proof that the peer takes requests (it may fail every one)."""
    for state in (S.BACKING_OFF, S.GIVEN_UP, S.VERSION_REFUSED):
        assert TRANSITIONS[state, E.CONNECTED] is state
        assert TRANSITIONS[state, E.ANSWERED] is S.SENDING


def test_a_refused_link_is_not_given_up_by_its_probes_failing() -> None:
    for event in (E.FAILED, E.EXHAUSTED, E.DISCONNECTED):
        assert TRANSITIONS[S.VERSION_REFUSED, event] is S.VERSION_REFUSED
    assert {S.GIVEN_UP, S.VERSION_REFUSED} == HOLDING


@pytest.mark.parametrize("status", [200, 202, 204, 299])
def test_2xx_is_accepted_without_reading_the_rest(status: int) -> None:
    answer = judge(status, [(b"retry-after", b"junk")], b"not json", 3, 0.0)
    assert answer.verdict is Verdict.ACCEPTED and answer.status == status


def test_400_naming_frames_is_partly_and_otherwise_a_drop() -> None:
    body = json.dumps([{"jsonrpc": "2.0", "error": {"code": -32602, "data": {"index": 1}}}])
    partly = judge(400, [], body.encode(), 3, 0.0)
    assert partly.verdict is Verdict.PARTLY and partly.bad == frozenset({1})
    assert judge(400, [], b"bad", 3, 0.0).verdict is Verdict.DROP


@pytest.mark.parametrize("status", [403, 408, 429, 500, 503, 599])
def test_retryable_statuses(status: int) -> None:
    answer = judge(status, [(b"retry-after", b"7")], b"busy", 2, 0.0)
    assert answer.verdict is Verdict.RETRY and answer.retry_after == 7.0
    assert answer.detail == f"HTTP {status}: busy"


def test_retry_after_as_a_date_is_read_against_now() -> None:
    headers = [(b"retry-after", b"Wed, 21 Oct 2015 07:28:00 GMT")]
    assert judge(503, headers, b"", 1, 1445412470.0).retry_after == 10.0
    assert judge(503, [], b"", 1, 0.0).retry_after is None


@pytest.mark.parametrize("status", [401, 404, 405, 411, 415, 422])
def test_other_4xx_are_final(status: int) -> None:
    assert judge(status, [], b"no", 2, 0.0).verdict is Verdict.DROP


def test_413_splits() -> None:
    assert judge(413, [], b"", 10, 0.0).verdict is Verdict.SPLIT


def test_409_with_another_major_refuses_and_same_major_is_final() -> None:
    other = judge(409, [(CONTRACT_HEADER, b"99.0.0")], b"", 1, 0.0)
    assert other.verdict is Verdict.REFUSED and other.theirs == "99.0.0"
    assert judge(409, [(CONTRACT_HEADER, b"junk")], b"", 1, 0.0).verdict is Verdict.DROP
    assert judge(409, [], b"", 1, 0.0).verdict is Verdict.DROP


# -- the outbox moves through the table ----------------------------------------------------------


class _Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def _box(**limits: object) -> tuple[PeerOutbox, _Clock]:
    clock = _Clock()
    box = PeerOutbox(
        "p",
        BroadcastLimits(**limits),  # type: ignore[arg-type]
        _origin,
        clock=clock,
        wall=lambda: 0.0,
        rng=random.Random(1),
    )
    return box, clock


def _origin() -> tuple[list[Outbound], list[Removal]]:
    """What this node originated: the snapshot of every new connection."""
    return [_ev(0)], []


def state(box: PeerOutbox) -> LinkState:
    """The box's state, read afresh (not narrowed by an earlier assert)."""
    return box.state


def _ev(i: int) -> Outbound:
    return outbound_event(lifecycle_frame(info(id=str(i), seq=1, state="queued")))


def test_a_link_walks_connecting_sending_backing_off_given_up_and_back() -> None:
    box, clock = _box(retry_max_attempts=2)
    assert state(box) is S.CONNECTING
    box.connected()
    assert state(box) is S.SENDING
    box.push([_ev(1)])
    batch = box.next_batch()
    assert batch is not None
    assert box.answered(batch, 503, [], b"busy").verdict is Verdict.RETRY
    assert state(box) is S.BACKING_OFF
    box.disconnected()
    assert state(box) is S.BACKING_OFF
    box.failed(None, "refused")
    assert state(box) is S.GIVEN_UP and box.queued == 0 and box.dropped == 1
    clock.now = box.ready_at()
    box.connected()
    assert state(box) is S.GIVEN_UP  # the resync is the probe
    resync = box.next_batch()
    assert resync is not None
    box.answered(resync, 202, [], b"")
    assert state(box) is S.SENDING and box.retry.failures == 0


def test_a_version_refusal_and_its_end() -> None:
    box, clock = _box()
    box.connected()
    box.push([_ev(1)])
    batch = box.next_batch()
    assert batch is not None
    box.answered(batch, 409, [(CONTRACT_HEADER, b"99.0.0")], b"")
    assert state(box) is S.VERSION_REFUSED and box.refused_by == "99.0.0"
    box.push([_ev(2)])
    assert box.queued == 0  # held: the resync carries it
    clock.now = box.ready_at()
    box.connected()
    probe = box.next_batch()
    assert probe is not None
    box.answered(probe, 202, [], b"")
    assert state(box) is S.SENDING and box.refused_by is None


def test_draining_then_stopped() -> None:
    box, _ = _box()
    box.connected()
    box.drain()
    assert state(box) is S.DRAINING and box.draining
    box.failed(None, "reset")
    assert state(box) is S.DRAINING
    box.stop()
    assert state(box) is S.STOPPED and box.draining


def test_every_state_is_reachable_from_connecting() -> None:
    assert reachable(S.CONNECTING, E, lambda s, e: TRANSITIONS.get((s, e))) == set(S)


def test_the_state_is_written_in_one_place() -> None:
    """Moved only through the table: besides the initial state, one assignment, in
    ``PeerOutbox._move``; none in the IO shell."""
    source = (ROOT / "src" / "nvpair_wm").joinpath
    writes = re.compile(r"self\.state\s*=[^=].*?(?:  #|$)", re.M)
    assert writes.findall(source("outbox.py").read_text()) == [
        "self.state = LinkState.CONNECTING  #",
        "self.state = TRANSITIONS[before, event]",
    ]
    assert re.findall(r"\.state\s*=[^=]", source("broadcaster.py").read_text()) == []
