"""Unit tests of the method → state translation and of pass-through."""

from __future__ import annotations

import gc
import json
from typing import Any

import msgspec
import pytest

from nvpair_wm import codec, events
from nvpair_wm.events import lifecycle_frame, translate, upsert
from tests.support.frames import ABSENT, LIFECYCLE, METHODS, STATES, event, info, workload

FORBIDDEN = ("prompt", "messages", "response", "secret-text")


def decode_event(payload: bytes) -> events.LifecycleFrame:
    [item] = codec.decode(payload).items
    assert isinstance(item, events.LIFECYCLE_TYPES), item
    return item


def encoded_info(obj: Any) -> dict[str, Any]:
    body = json.loads(codec.encode(obj))
    wi = body["params"]["workloadInfo"]
    assert isinstance(wi, dict)
    return wi


@pytest.mark.parametrize("incoming", STATES)
@pytest.mark.parametrize("method", METHODS)
def test_method_decides_state(method: str, incoming: str) -> None:
    frame = decode_event(event(method, workload(state=incoming)))
    out = translate(frame)
    assert out.state == LIFECYCLE[method]
    # The frame itself is not mutated.
    assert frame.params.workloadInfo.state == incoming


def test_state_table_is_complete() -> None:
    tagged = {t.__struct_config__.tag: s for t, s in events.STATE_OF.items()}
    assert tagged == LIFECYCLE
    assert set(events.FRAME_OF) == set(STATES)
    assert {"completed", "failed", "cancelled"} == events.TERMINAL


@pytest.mark.parametrize("method", METHODS)
def test_everything_but_state_passes_through(method: str) -> None:
    wi = workload(
        id="w-ü-17",
        model="m" * 512,
        engine="e",
        runId="r" * 128,
        state="queued",
        originatedFrom="node-é",
        scheduledOn="node-ß",
        createdAt=0,
        startedAt=2**53 - 1,
        completedAt=1_764_690_000_999,
        error="CUDA out of memory\nline two",
        requesterId="",
        seq=2**53 - 1,
    )
    out = translate(decode_event(event(method, wi)))
    got = encoded_info(upsert(out))
    assert got == {**wi, "state": LIFECYCLE[method]}


@pytest.mark.parametrize("method", METHODS)
def test_absent_stays_absent(method: str) -> None:
    wi = workload(scheduledOn=ABSENT, requesterId=ABSENT)
    out = translate(decode_event(event(method, wi)))
    for obj in (upsert(out), lifecycle_frame(out)):
        got = encoded_info(obj)
        assert "scheduledOn" not in got
        assert "requesterId" not in got
        assert got == {**wi, "state": LIFECYCLE[method]}


@pytest.mark.parametrize("method", METHODS)
def test_null_stays_null(method: str) -> None:
    wi = workload(requesterId=None, startedAt=None, completedAt=None, error=None)
    out = translate(decode_event(event(method, wi)))
    for obj in (upsert(out), lifecycle_frame(out)):
        got = encoded_info(obj)
        for key in ("requesterId", "startedAt", "completedAt", "error"):
            assert key in got
            assert got[key] is None


@pytest.mark.parametrize("method", METHODS)
def test_unknown_fields_never_encoded(method: str) -> None:
    wi = workload(
        prompt="secret-text",
        messages=[{"role": "user", "content": "secret-text"}],
        response={"text": "secret-text"},
    )
    out = translate(decode_event(event(method, wi)))
    for obj in (upsert(out), lifecycle_frame(out), out):
        encoded = codec.encode(obj)
        for word in FORBIDDEN:
            assert word.encode() not in encoded


@pytest.mark.parametrize("state", STATES)
def test_lifecycle_frame_method_follows_state(state: str) -> None:
    wi = info(state=state)
    frame = lifecycle_frame(wi)
    body = json.loads(codec.encode(frame))
    assert body["method"] == {s: m for m, s in LIFECYCLE.items()}[state]
    assert body["jsonrpc"] == "2.0"
    assert "id" not in body  # a notification: peers never answer it
    # What is sent decodes back to the same workload.
    again = decode_event(codec.encode(frame))
    assert translate(again) == wi


def test_upsert_shape() -> None:
    wi = info(seq=4)
    body = json.loads(codec.encode(upsert(wi)))
    assert body == {
        "jsonrpc": "2.0",
        "method": "workloads:upsert",
        "params": {"workloadInfo": json.loads(codec.encode(wi))},
    }


def test_translate_keeps_identity_when_state_already_right() -> None:
    frame = decode_event(event("workload:started", workload(state="running")))
    assert translate(frame) is frame.params.workloadInfo


def test_translated_info_is_a_value_copy() -> None:
    frame = decode_event(event("workload:completed", workload(state="running")))
    out = translate(frame)
    assert out is not frame.params.workloadInfo
    assert msgspec.structs.replace(out, state="running") == frame.params.workloadInfo


def test_outbound_items_are_not_tracked_by_the_cyclic_gc() -> None:
    """The table keeps one per workload originated here: a full collection must not traverse
    them (they hold strings, a float and bytes, so they can be in no cycle)."""
    out = events.Outbound(("node-a", "w1", "r1"), 3.0, b'{"jsonrpc":"2.0"}')
    assert not gc.is_tracked(out)
    assert out == events.Outbound(("node-a", "w1", "r1"), 3.0, b'{"jsonrpc":"2.0"}')
    assert hash(out) == hash(events.Outbound(("node-a", "w1", "r1"), 3.0, b'{"jsonrpc":"2.0"}'))
    with pytest.raises(AttributeError):
        out.seq = 4.0  # type: ignore[misc]
