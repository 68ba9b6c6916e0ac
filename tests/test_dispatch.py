"""Unit tests of the dispatcher: broker lines (local) and peer HTTP bodies (peer)."""

from __future__ import annotations

import json
import logging
from typing import Any

import msgspec
import pytest
from nvpair_wm_schema.manager_status_schema import PeerStatus, StatusResult
from nvpair_wm_schema.node_record_schema import NodeRecord

from nvpair_wm import codec
from nvpair_wm.dedup import TableLimits, WorkloadTable
from nvpair_wm.dispatch import Dispatcher, LocalResult, PeerResult
from nvpair_wm.events import LIFECYCLE_TYPES, lifecycle_frame, translate
from tests.support.frames import (
    ABSENT,
    LIFECYCLE,
    METHODS,
    batch,
    dumps,
    event,
    event_frame,
    frame,
    manager_status,
    node,
    nodes_update,
    remove,
    remove_frame,
    status_result,
    workload,
)

FORBIDDEN = (b"prompt", b"messages", b"secret-text")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def disp(clock: Clock) -> Dispatcher:
    holder: list[Dispatcher] = []

    def provider() -> StatusResult:
        peer = PeerStatus(
            nodeId="node-b",
            address="10.0.0.2",
            port=14320,
            connected=True,
            protocol="h2",
            queueDepth=0,
            sent=3,
            retried=0,
            coalesced=0,
            dropped=0,
            lastError=None,
            lastErrorAt=None,
        )
        return status_result(holder[0].counters, port=14320, peers=[peer])

    d = Dispatcher(WorkloadTable(TableLimits()), provider, clock=clock)
    holder.append(d)
    return d


def replies(result: LocalResult) -> list[Any]:
    """The single reply line, parsed (None when there was no reply)."""
    assert len(result.replies) <= 1
    if not result.replies:
        return []
    [reply] = result.replies
    assert reply.endswith(b"\n") and reply.count(b"\n") == 1
    parsed = json.loads(reply)
    return parsed if isinstance(parsed, list) else [parsed]


def body_of(result: PeerResult) -> Any:
    assert result.body is not None
    assert b"\n" not in result.body
    return json.loads(result.body)


def broker_frames(result: PeerResult) -> list[dict[str, Any]]:
    out = []
    for ln in result.to_broker:
        assert ln.endswith(b"\n") and ln.count(b"\n") == 1
        for word in FORBIDDEN:
            assert word not in ln
        out.append(json.loads(ln))
    return out


def assert_only_responses(result: LocalResult) -> None:
    for reply in replies(result):
        assert "method" not in reply
        assert ("result" in reply) != ("error" in reply)


# -- local channel -----------------------------------------------------------------------------


class TestLocalEvents:
    @pytest.mark.parametrize("method", METHODS)
    def test_notification_goes_to_peers_not_back_to_broker(
        self, disp: Dispatcher, method: str
    ) -> None:
        wi = workload(state="queued", seq=3, prompt="secret-text", messages=["secret-text"])
        result = disp.local(event(method, wi))
        assert result.replies == []
        [out] = result.outbound
        assert out.key == ("node-a", "1", "run-a")
        assert out.seq == 3
        for word in FORBIDDEN:
            assert word not in out.body
        body = json.loads(out.body)
        assert body["method"] == method
        assert "id" not in body
        expected = {k: v for k, v in wi.items() if k not in ("prompt", "messages")}
        assert body["params"]["workloadInfo"] == {**expected, "state": LIFECYCLE[method]}

    def test_request_gets_outcome_and_is_still_broadcast(self, disp: Dispatcher) -> None:
        result = disp.local(event("workload:started", id="r1"))
        assert replies(result) == [{"jsonrpc": "2.0", "id": "r1", "result": {"outcome": "applied"}}]
        assert len(result.outbound) == 1
        assert_only_responses(result)

    def test_outcomes(self, disp: Dispatcher) -> None:
        def outcome(payload: bytes) -> tuple[str, int]:
            result = disp.local(payload)
            [reply] = replies(result)
            return reply["result"]["outcome"], len(result.outbound)

        assert outcome(event("workload:started", workload(seq=2), id=1)) == ("applied", 1)
        assert outcome(event("workload:started", workload(seq=2), id=2)) == ("duplicate", 0)
        assert outcome(event("workload:submitted", workload(seq=1), id=3)) == ("stale", 0)
        assert outcome(remove(id=4)) == ("applied", 1)
        assert outcome(remove(id=5)) == ("duplicate", 0)
        assert outcome(event("workload:completed", workload(seq=3), id=6)) == ("removed", 0)

    def test_removal_outbound(self, disp: Dispatcher) -> None:
        disp.local(event("workload:started"))
        [out] = disp.local(remove("1", "node-a")).outbound
        assert out.key == ("node-a", "1", "run-a")
        assert out.seq == float("inf")
        assert json.loads(out.body) == {
            "jsonrpc": "2.0",
            "method": "workloads:remove",
            "params": {"workloadId": "1", "originatedFrom": "node-a", "runId": "run-a"},
        }
        # Never seen: no run to name.
        [out] = disp.local(remove("2", "node-a")).outbound
        assert out.key == ("node-a", "2", "")
        assert "runId" not in json.loads(out.body)["params"]

    def test_local_events_are_kept_for_replay(self, disp: Dispatcher) -> None:
        disp.local(event("workload:started", workload(seq=4)))
        disp.local(remove("9", "node-a"))
        events, removals = disp.table.originated()
        kept = [json.loads(e.body)["params"]["workloadInfo"] for e in events]
        assert [(k["id"], k["seq"], k["state"]) for k in kept] == [("1", 4, "running")]
        assert [(r.origin, r.workload_id) for r in removals] == [("node-a", "9")]

    def test_absent_and_null_preserved_in_outbound(self, disp: Dispatcher) -> None:
        wi = workload(scheduledOn=ABSENT, requesterId=None)
        [out] = disp.local(event("workload:submitted", wi)).outbound
        got = json.loads(out.body)["params"]["workloadInfo"]
        assert "scheduledOn" not in got
        assert got["requesterId"] is None
        [out] = disp.local(event("workload:started", workload(requesterId=ABSENT, seq=2))).outbound
        assert "requesterId" not in json.loads(out.body)["params"]["workloadInfo"]


class TestLocalControl:
    def test_nodes_update_returns_records(self, disp: Dispatcher) -> None:
        nodes = [node(), node(nodeId="node-c", address="fe80::1", port=ABSENT)]
        result = disp.local(nodes_update(nodes))
        assert result.replies == []
        assert result.outbound == []
        assert result.nodes is not None
        assert all(isinstance(n, NodeRecord) for n in result.nodes)
        assert [(n.nodeId, n.address, n.port) for n in result.nodes] == [
            ("node-b", "10.0.0.2", 14320),
            ("node-c", "fe80::1", 14320),
        ]

    def test_nodes_update_request_and_empty_list(self, disp: Dispatcher) -> None:
        result = disp.local(nodes_update([], id=9))
        assert result.nodes == []
        assert replies(result) == [{"jsonrpc": "2.0", "id": 9, "result": {"outcome": "applied"}}]

    def test_no_nodes_update_leaves_nodes_none(self, disp: Dispatcher) -> None:
        assert disp.local(event("workload:started")).nodes is None

    def test_manager_status(self, disp: Dispatcher) -> None:
        disp.local(event("workload:started"))
        disp.local(event("workload:started"))  # duplicate
        disp.local(remove("x", "node-q"))
        disp.local(b"{")
        [reply] = replies(disp.local(manager_status("st")))
        assert reply["id"] == "st"
        result = msgspec.convert(reply["result"], StatusResult)
        assert result.port == 14320
        assert result.peers[0].protocol == "h2"
        c = result.counters
        assert (c.framesIn, c.invalid, c.duplicates, c.workloads, c.tombstones) == (5, 1, 1, 1, 1)

    def test_status_keys(self, disp: Dispatcher) -> None:
        [reply] = replies(disp.local(manager_status(None)))
        assert reply["id"] is None
        assert set(reply["result"]) == {
            "version",
            "hasIdentity",
            "fingerprint",
            "port",
            "peers",
            "counters",
        }


class TestLocalBatchesAndErrors:
    def test_batch_replies_in_one_array_line(self, disp: Dispatcher) -> None:
        payload = batch(
            event_frame("workload:submitted", workload(id="a"), id=1),
            event_frame("workload:submitted", workload(id="b")),  # notification: no reply
            frame("manager:status", id=2),
            event_frame("workload:submitted", workload(id="a"), id=3),
            b'"junk"',
            remove_frame("a", id="rm"),
        )
        result = disp.local(payload)
        [line] = result.replies
        parsed = json.loads(line)
        assert isinstance(parsed, list)
        assert [r["id"] for r in parsed] == [1, 2, 3, None, "rm"]
        assert parsed[0]["result"] == {"outcome": "applied"}
        assert "counters" in parsed[1]["result"]
        assert parsed[2]["result"] == {"outcome": "duplicate"}
        assert parsed[3]["error"]["code"] == codec.INVALID_REQUEST
        assert parsed[4]["result"] == {"outcome": "applied"}
        assert [o.key[1] for o in result.outbound] == ["a", "b", "a"]
        assert disp.counters.framesIn == 6
        assert_only_responses(result)

    def test_batch_of_notifications_gets_no_reply(self, disp: Dispatcher) -> None:
        result = disp.local(batch(event_frame("workload:submitted"), remove_frame("2")))
        assert result.replies == []
        assert len(result.outbound) == 2

    def test_batch_error_names_its_index(self, disp: Dispatcher) -> None:
        payload = batch(
            event_frame("workload:started", id=1),
            event_frame("workload:started", workload(seq="x"), id=2),
        )
        parsed = replies(disp.local(payload))
        assert parsed[1]["error"]["data"]["index"] == 1
        assert parsed[1]["error"]["data"]["path"] == "$.params.workloadInfo.seq"

    def test_empty_batch_is_one_error_object(self, disp: Dispatcher) -> None:
        [line] = disp.local(b"[]").replies
        parsed = json.loads(line)
        assert isinstance(parsed, dict)
        assert parsed["error"]["code"] == codec.INVALID_REQUEST
        assert parsed["id"] is None

    def test_invalid_request_answered_with_path(self, disp: Dispatcher) -> None:
        [reply] = replies(disp.local(event("workload:errored", workload(seq=0), id=5)))
        assert reply == {
            "jsonrpc": "2.0",
            "id": 5,
            "error": {
                "code": -32602,
                "message": "Invalid params",
                "data": {"reason": "Expected `int` >= 1", "path": "$.params.workloadInfo.seq"},
            },
        }
        assert disp.counters.invalid == 1

    @pytest.mark.parametrize(
        "payload",
        [
            event("workload:started", workload(seq="x")),
            dumps(frame("workload:started", [1])),
            dumps(frame("no:such")),
            dumps(frame("manager:status")),
            dumps({"jsonrpc": "1.0", "method": "workload:started"}),
        ],
    )
    def test_invalid_notification_dropped_counted_and_logged(
        self, disp: Dispatcher, payload: bytes, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="nvpair_wm.dispatch"):
            result = disp.local(payload)
        assert result.replies == []
        assert result.outbound == []
        assert disp.counters.invalid == 1
        [rec] = [r for r in caplog.records if r.name == "nvpair_wm.dispatch"]
        assert rec.levelno == logging.WARNING
        assert "broker" in rec.getMessage()
        [err] = codec.decode(payload).items
        assert isinstance(err, codec.RpcError)
        assert err.reason in rec.getMessage()

    def test_invalid_requests_are_answered_not_warned(
        self, disp: Dispatcher, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="nvpair_wm.dispatch"):
            disp.local(dumps(frame("no:such", id=1)))
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert disp.counters.invalid == 1

    def test_parse_error(self, disp: Dispatcher) -> None:
        [reply] = replies(disp.local(b'{"jsonrpc":"2.0","method":'))
        assert reply["id"] is None
        assert reply["error"]["code"] == codec.PARSE_ERROR

    def test_bad_frame_does_not_disturb_the_next(self, disp: Dispatcher) -> None:
        disp.local(b"{")
        result = disp.local(event("workload:started", id=1))
        assert replies(result)[0]["result"] == {"outcome": "applied"}

    def test_oversize(self, disp: Dispatcher) -> None:
        line = disp.oversize(4096)
        assert line.endswith(b"\n")
        reply = json.loads(line)
        assert reply["id"] is None
        assert reply["error"]["code"] == codec.FRAME_TOO_LARGE
        assert "4096" in reply["error"]["data"]["reason"]
        assert (disp.counters.framesIn, disp.counters.invalid) == (1, 1)


# -- inter-node channel ------------------------------------------------------------------------


class TestPeer:
    def test_valid_notifications_202_no_body(self, disp: Dispatcher) -> None:
        wi = workload(prompt="secret-text", messages=[{"content": "secret-text"}])
        result = disp.peer(event("workload:completed", wi))
        assert (result.status, result.body) == (202, None)
        [up] = broker_frames(result)
        expected = {k: v for k, v in wi.items() if k not in ("prompt", "messages")}
        assert up == {
            "jsonrpc": "2.0",
            "method": "workloads:upsert",
            "params": {"workloadInfo": {**expected, "state": "completed"}},
        }

    def test_batch_of_notifications(self, disp: Dispatcher) -> None:
        payload = batch(*(event_frame(m, workload(id=m, state="queued")) for m in METHODS))
        result = disp.peer(payload)
        assert (result.status, result.body) == (202, None)
        ups = broker_frames(result)
        assert [u["params"]["workloadInfo"]["state"] for u in ups] == list(LIFECYCLE.values())

    def test_absent_and_null_preserved_to_broker(self, disp: Dispatcher) -> None:
        wi = workload(scheduledOn=ABSENT, requesterId=None)
        [up] = broker_frames(disp.peer(event("workload:submitted", wi)))
        got = up["params"]["workloadInfo"]
        assert "scheduledOn" not in got
        assert got["requesterId"] is None
        assert got == {**wi, "state": "queued"}

    def test_requests_get_200_with_responses(self, disp: Dispatcher) -> None:
        result = disp.peer(event("workload:started", id=4))
        assert result.status == 200
        assert body_of(result) == {"jsonrpc": "2.0", "id": 4, "result": {"outcome": "applied"}}
        result = disp.peer(
            batch(
                event_frame("workload:started", id="a"),
                event_frame("workload:completed", workload(seq=2)),
            )
        )
        assert result.status == 200
        assert body_of(result) == [
            {"jsonrpc": "2.0", "id": "a", "result": {"outcome": "duplicate"}}
        ]
        assert len(result.to_broker) == 1

    def test_bad_frames_400_with_index_and_valid_frames_still_forwarded(
        self, disp: Dispatcher
    ) -> None:
        payload = batch(
            event_frame("workload:submitted", workload(id="ok1")),
            event_frame("workload:submitted", workload(id="bad", seq=1.5)),
            b"42",
            event_frame("workload:started", workload(id="ok2"), id="q"),
            frame("nodes:update", {"nodes": []}),
            remove_frame("gone"),
            frame("manager:status", id=8),
        )
        result = disp.peer(payload)
        assert result.status == 400
        body = body_of(result)
        errors = [r for r in body if "error" in r]
        assert [e["error"]["data"]["index"] for e in errors] == [1, 2, 4, 6]
        assert [e["error"]["code"] for e in errors] == [-32602, -32600, -32601, -32601]
        assert errors[0]["error"]["data"]["path"] == "$.params.workloadInfo.seq"
        assert errors[3]["id"] == 8
        assert {"jsonrpc": "2.0", "id": "q", "result": {"outcome": "applied"}} in body
        sent = broker_frames(result)
        assert [f["method"] for f in sent] == [
            "workloads:upsert",
            "workloads:upsert",
            "workloads:remove",
        ]
        assert [f["params"].get("workloadInfo", {}).get("id") for f in sent[:2]] == ["ok1", "ok2"]
        assert disp.counters.invalid == 4
        assert disp.counters.framesIn == 7

    def test_single_bad_frame_400(self, disp: Dispatcher) -> None:
        result = disp.peer(b"not json")
        assert result.status == 400
        body = body_of(result)
        assert body["error"]["code"] == codec.PARSE_ERROR
        assert "index" not in body["error"]["data"]
        assert result.to_broker == []
        result = disp.peer(b"[]")
        assert result.status == 400
        assert body_of(result)["error"]["code"] == codec.INVALID_REQUEST

    @pytest.mark.parametrize(
        "payload",
        [nodes_update(), nodes_update(id=1), manager_status(1), manager_status("s")],
    )
    def test_local_only_methods_refused(self, disp: Dispatcher, payload: bytes) -> None:
        result = disp.peer(payload)
        assert result.status == 400
        body = body_of(result)
        assert body["error"]["code"] == codec.METHOD_NOT_FOUND
        assert body["id"] == json.loads(payload).get("id")
        assert "not accepted from peers" in body["error"]["data"]["reason"]
        assert result.to_broker == []

    def test_duplicate_from_two_peers_one_upsert(self, disp: Dispatcher) -> None:
        payload = event("workload:started", workload(seq=2))
        first = disp.peer(payload)
        second = disp.peer(payload)
        assert len(broker_frames(first)) == 1
        assert second.to_broker == []
        assert second.status == 202
        assert disp.table.duplicates == 1

    def test_stale_from_peer_not_forwarded(self, disp: Dispatcher) -> None:
        disp.peer(event("workload:completed", workload(seq=3)))
        result = disp.peer(event("workload:started", workload(seq=2), id=1))
        assert result.to_broker == []
        assert body_of(result)["result"] == {"outcome": "stale"}

    @pytest.mark.parametrize("seen", [False, True])
    @pytest.mark.parametrize("run_id", [ABSENT, "run-a"])
    def test_removal_forwarded_once(self, disp: Dispatcher, seen: bool, run_id: Any) -> None:
        if seen:
            disp.peer(event("workload:started"))
        payload = remove("1", "node-a", run_id=run_id)
        first = broker_frames(disp.peer(payload))
        second = broker_frames(disp.peer(payload))
        assert second == []
        [rm] = first
        assert rm["method"] == "workloads:remove"
        assert rm["params"]["workloadId"] == "1"
        assert rm["params"]["originatedFrom"] == "node-a"
        # And the workload stays removed.
        assert disp.peer(event("workload:completed", workload(seq=9))).to_broker == []

    def test_removal_request_outcomes(self, disp: Dispatcher) -> None:
        assert body_of(disp.peer(remove(id=1)))["result"]["outcome"] == "applied"
        assert body_of(disp.peer(remove(id=2)))["result"]["outcome"] == "duplicate"
        late = disp.peer(event("workload:started", id=3))
        assert body_of(late)["result"]["outcome"] == "removed"
        assert late.to_broker == []

    def test_echo_of_a_local_event_is_a_duplicate(self, disp: Dispatcher) -> None:
        payload = event("workload:started", workload(seq=5))
        assert len(disp.local(payload).outbound) == 1
        assert disp.peer(payload).to_broker == []

    def test_invalid_notification_from_peer_logged_and_counted(
        self, disp: Dispatcher, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="nvpair_wm.dispatch"):
            result = disp.peer(event("workload:started", workload(seq=True)))
        assert result.status == 400
        assert disp.counters.invalid == 1
        [rec] = [r for r in caplog.records if r.name == "nvpair_wm.dispatch"]
        assert rec.levelno == logging.WARNING
        assert "peer" in rec.getMessage()
        assert "$.params.workloadInfo.seq" in rec.getMessage()

    def test_peer_events_are_not_kept_for_replay(self, disp: Dispatcher) -> None:
        disp.peer(event("workload:started"))
        disp.peer(remove("7", "node-b"))
        assert disp.table.originated() == ([], [])

    def test_clock_is_used_for_expiry(self, disp: Dispatcher, clock: Clock) -> None:
        disp.peer(event("workload:completed"))
        clock.now += disp.table.limits.terminal_ttl
        disp.table.expire(clock.now)
        assert len(broker_frames(disp.peer(event("workload:completed")))) == 1


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "case", ["notification", "request", "other-state", "spaced", "reordered", "unknown-member"]
)
def test_relayed_body_is_the_translated_frame_encoded(
    disp: Dispatcher, method: str, case: str
) -> None:
    """Whether the body reuses the decoder's encoding (a compact notification in its method's
    state) or is encoded anew, it is byte for byte the translated lifecycle frame, without id."""
    state = LIFECYCLE[method]
    wi = workload(id=f"w-{case}", state="running" if case == "other-state" else state)
    rid: Any = 7 if case == "request" else ABSENT
    raw = event(method, wi, id=rid)
    if case == "spaced":
        raw = json.dumps(event_frame(method, wi)).encode()
    elif case == "reordered":
        raw = dumps({"params": {"workloadInfo": dict(reversed(wi.items()))}, **frame(method)})
    elif case == "unknown-member":
        raw = dumps(event_frame(method, {**wi, "x-extra": [1, 2]}))
    item = codec.decode(raw).items[0]
    assert isinstance(item, LIFECYCLE_TYPES)
    expected = codec.encode(lifecycle_frame(translate(item)))
    out = disp.local(raw).outbound
    assert [o.body for o in out] == [expected]
    assert json.loads(expected)["params"]["workloadInfo"]["state"] == state
    assert b'"id":7' not in expected


def test_local_lines_is_local_per_line(clock: Clock) -> None:
    """The lines of one read in one call: the same replies, bodies, outcomes and counters as
    each line through local(), whatever mix of the inline path and the general one."""
    wi = workload(id="9", state="queued")
    lines = [
        event("workload:submitted", workload(id="1")),  # inline, applied
        event("workload:submitted", workload(id="1")),  # inline, duplicate
        event("workload:started", workload(id="2", state="queued", seq=2)),  # inline, translated
        event("workload:submitted", workload(id="2", seq=1)),  # inline, stale
        event("workload:started", wi, id=5),  # a request: general path, answered
        json.dumps(event_frame("workload:completed", workload(id="3"))).encode(),  # spaced
        dumps(event_frame("workload:submitted", {**workload(id="4"), "extra": 1})),  # re-read
        remove("1", id="r1"),
        event("workload:started", workload(id="1", seq=3)),  # inline, suppressed (removed)
        b'{"jsonrpc":"2.0","method":"nope"}',
        b"not json",
        batch(event_frame("workload:submitted", workload(id="6")), remove_frame("6")),
    ]

    def fresh() -> Dispatcher:
        return Dispatcher(WorkloadTable(TableLimits()), status_result, clock=clock)

    one, each = fresh(), fresh()
    together = one.local_lines(lines)
    separate = [each.local(line) for line in lines]
    assert together.replies == [r for res in separate for r in res.replies]
    assert [o.body for o in together.outbound] == [o.body for res in separate for o in res.outbound]
    assert together.nodes is None
    assert msgspec.to_builtins(one.counters) == msgspec.to_builtins(each.counters)
    counters = msgspec.to_builtins(one.counters)["byChannel"]
    assert counters["broker"]["duplicate"] == 1 and counters["broker"]["stale"] == 1
    assert counters["broker"]["suppressed"] == 1 and counters["broker"]["invalid"] == 2
    assert len(together.outbound) == 8
    assert one.table.originated()[0] == each.table.originated()[0]
