"""``counters.byChannel`` (contract 1.1.0), sans-IO: each channel counts its own frames in and
out and the outcome of each, and the totals stay the sum of the two channels."""

from __future__ import annotations

from typing import Any

import msgspec
from nvpair_wm_schema.manager_status_schema import ChannelCounters, FramesByChannel

from nvpair_wm import codec
from nvpair_wm.dedup import WorkloadTable
from nvpair_wm.dispatch import Dispatcher
from tests.support.frames import batch, event, event_frame, workload


def dispatcher(max_batch: int = codec.MAX_BATCH_FRAMES) -> Dispatcher:
    return Dispatcher(WorkloadTable(), lambda: None, lambda: 0.0, max_batch=max_batch)  # type: ignore[arg-type,return-value]


def channels(d: Dispatcher) -> dict[str, Any]:
    by_channel = d.counters.byChannel
    assert isinstance(by_channel, FramesByChannel)
    return msgspec.to_builtins(by_channel)  # type: ignore[no-any-return]


def removal(wid: str) -> bytes:
    params = {"workloadId": wid, "originatedFrom": "node-a", "runId": "run-1"}
    return msgspec.json.encode({"jsonrpc": "2.0", "method": "workloads:remove", "params": params})


def test_each_outcome_is_counted_on_the_channel_it_came_from() -> None:
    d = dispatcher()
    w = workload(id="w1", originatedFrom="node-a", runId="run-1", seq=2)
    d.local(event("workload:submitted", w))  # applied
    d.local(event("workload:submitted", w))  # duplicate
    d.local(event("workload:submitted", {**w, "seq": 1}))  # stale
    d.local(b'{"jsonrpc":"2.0","method":"workload:started","params":{}}')  # invalid
    d.peer(removal("w1"))  # applied (a removal)
    d.peer(event("workload:started", {**w, "seq": 3, "state": "running"}))  # removed
    d.peer(batch(event_frame("workload:submitted", workload(id="w2")), {"x": 1}))  # applied, bad
    got = channels(d)
    assert got["broker"] == {
        "framesIn": 4,
        "framesOut": 0,
        "applied": 1,
        "duplicate": 1,
        "stale": 1,
        "suppressed": 0,
        "invalid": 1,
    }
    assert got["peer"] == {
        "framesIn": 4,
        "framesOut": 1,  # the one applied broker event, relayed toward the peers
        "applied": 2,
        "duplicate": 0,
        "stale": 0,
        "suppressed": 1,
        "invalid": 1,
    }
    c = d.counters
    assert c.framesIn == got["broker"]["framesIn"] + got["peer"]["framesIn"]
    assert c.invalid == got["broker"]["invalid"] + got["peer"]["invalid"]
    d.wrote_to_broker(3)
    assert (c.framesOut, channels(d)["broker"]["framesOut"]) == (3, 3)


def test_a_batch_over_the_bound_is_one_frame_in_and_one_invalid_nothing_applied() -> None:
    d = dispatcher(max_batch=2)
    frames = [event_frame("workload:submitted", workload(id=f"w{i}"), id=i) for i in range(3)]
    local = d.local(batch(*frames))
    [line] = local.replies
    reply = msgspec.json.decode(line)
    assert reply["id"] is None and reply["error"]["code"] == -32600
    assert "batch of 3 frames exceeds the limit of 2" in reply["error"]["data"]["reason"]
    assert local.outbound == [] and len(d.table) == 0
    peer = d.peer(batch(*frames))
    assert peer.status == 413 and peer.to_broker == []
    assert b"max_batch" in (peer.body or b"")
    got = channels(d)
    for name in ("broker", "peer"):
        assert (got[name]["framesIn"], got[name]["invalid"], got[name]["applied"]) == (1, 1, 0)
    # At the bound: decoded as usual.
    assert d.peer(batch(*frames[:2])).status == 200
    assert len(d.table) == 2


def test_channel_counters_are_what_the_schema_describes() -> None:
    d = dispatcher()
    d.local(event("workload:submitted", workload(id="w1")))
    encoded = msgspec.json.encode(d.counters)
    back = codec.validate(encoded, type(d.counters))
    assert isinstance(back.byChannel, FramesByChannel)
    assert isinstance(back.byChannel.broker, ChannelCounters)
    assert back.byChannel.broker.applied == 1
