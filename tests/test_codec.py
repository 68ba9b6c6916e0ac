"""Unit tests of the sans-IO codec: LineBuffer framing and JSON-RPC decoding."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nvpair_wm_schema.jsonrpc_schema import ErrorCode
from nvpair_wm_schema.manager_status_schema import ManagerStatus
from nvpair_wm_schema.nodes_update_schema import NodesUpdate
from nvpair_wm_schema.workload_events_schema import (
    WorkloadCancelled,
    WorkloadCompleted,
    WorkloadErrored,
    WorkloadStarted,
    WorkloadSubmitted,
)
from nvpair_wm_schema.workload_info_schema import WorkloadInfo
from nvpair_wm_schema.workloads_remove_schema import WorkloadsRemove

from nvpair_wm import codec
from nvpair_wm.codec import (
    FRAME_TOO_LARGE,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    TOO_LARGE,
    LineBuffer,
    RpcError,
)
from tests.support.frames import (
    ABSENT,
    METHODS,
    batch,
    dumps,
    event,
    event_frame,
    frame,
    manager_status,
    nodes_update,
    remove,
    workload,
)

TYPES = dict(
    zip(
        METHODS,
        [WorkloadSubmitted, WorkloadStarted, WorkloadCompleted, WorkloadErrored, WorkloadCancelled],
        strict=True,
    )
)


def feed_all(lb: LineBuffer, chunks: list[bytes]) -> list[bytes | codec.TooLarge]:
    out: list[bytes | codec.TooLarge] = []
    for chunk in chunks:
        out += lb.feed(chunk)
        assert len(lb._buf) <= lb.max_frame
    return out


def one(payload: bytes) -> codec.Item:
    decoded = codec.decode(payload)
    assert not decoded.batch
    assert len(decoded.items) == 1
    return decoded.items[0]


def error(payload: bytes) -> RpcError:
    item = one(payload)
    assert isinstance(item, RpcError), item
    return item


# -- LineBuffer ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        b"x",
        b"x\r",
        b"x\r\r",
        b"\r",
        b"",
        b" \t",
        b"12345678",
        b"123456789",
        b"1234567\r",
        b"12345678\r",
    ],
)
def test_one_whole_line_takes_the_same_path_as_lines_split_out_of_a_read(line: bytes) -> None:
    """feed()'s shortcut for a read that is one whole line (nothing held) frames it as the
    general path does the same line after another in one read."""
    fast = LineBuffer(max_frame=8).feed(line + b"\n")
    general = LineBuffer(max_frame=8).feed(b"a\n" + line + b"\n")
    assert general[0] == b"a"
    assert fast == general[1:]


class TestLineBuffer:
    def test_one_frame(self) -> None:
        assert LineBuffer().feed(b'{"a":1}\n') == [b'{"a":1}']

    def test_several_frames_in_one_chunk(self) -> None:
        assert LineBuffer().feed(b"a\nbb\nccc\n") == [b"a", b"bb", b"ccc"]

    def test_frame_split_across_feeds(self) -> None:
        lb = LineBuffer()
        assert lb.feed(b'{"jsonrpc":') == []
        assert lb.feed(b'"2.0"') == []
        assert lb.feed(b"}\n{") == [b'{"jsonrpc":"2.0"}']
        assert lb.feed(b"}\n") == [b"{}"]

    def test_byte_by_byte(self) -> None:
        stream = b"first\r\nsecond\n\nthird\n"
        lb = LineBuffer()
        out = feed_all(lb, [stream[i : i + 1] for i in range(len(stream))])
        assert out == [b"first", b"second", b"third"]

    def test_crlf(self) -> None:
        assert LineBuffer().feed(b"a\r\nb\r\n") == [b"a", b"b"]

    def test_crlf_split_between_cr_and_lf(self) -> None:
        lb = LineBuffer()
        assert lb.feed(b"abc\r") == []
        assert lb.feed(b"\ndef\r\n") == [b"abc", b"def"]

    def test_only_one_cr_is_stripped(self) -> None:
        assert LineBuffer().feed(b"a\r\r\n") == [b"a\r"]

    def test_blank_and_whitespace_lines_ignored(self) -> None:
        assert LineBuffer().feed(b"\n\r\n  \n\t\r\nx\n\n") == [b"x"]

    def test_end_flushes_final_line_without_newline(self) -> None:
        lb = LineBuffer()
        assert lb.feed(b"a\nlast") == [b"a"]
        assert lb.end() == [b"last"]
        assert lb.end() == []

    def test_end_strips_cr_and_ignores_blank(self) -> None:
        lb = LineBuffer()
        lb.feed(b"last\r")
        assert lb.end() == [b"last"]
        lb.feed(b"   ")
        assert lb.end() == []
        assert LineBuffer().end() == []

    def test_exactly_at_limit_accepted(self) -> None:
        lb = LineBuffer(max_frame=8)
        assert lb.feed(b"12345678\n") == [b"12345678"]
        # ...also when the limit is reached before the newline arrives.
        assert lb.feed(b"abcdefgh") == []
        assert lb.feed(b"\n") == [b"abcdefgh"]
        lb.feed(b"ABCDEFGH")
        assert lb.end() == [b"ABCDEFGH"]

    def test_single_whole_line_reads(self) -> None:
        """The one-line fast path keeps the rules: oversize, CRLF, blank, empty read."""
        lb = LineBuffer(max_frame=8)
        assert lb.feed(b"123456789\n") == [codec.TOO_LARGE]
        assert lb.feed(b"ok\r\n") == [b"ok"]
        assert lb.feed(b"  \n") == []
        assert lb.feed(b"\n") == []
        assert lb.feed(b"") == []
        assert lb.feed(b"12345678\n") == [b"12345678"]
        assert lb.end() == []

    def test_oversize_in_one_chunk_then_resync(self) -> None:
        lb = LineBuffer(max_frame=8)
        assert lb.feed(b"ok\n123456789\nnext\n") == [b"ok", TOO_LARGE, b"next"]

    def test_oversize_in_pieces_emits_once(self) -> None:
        lb = LineBuffer(max_frame=8)
        out = feed_all(lb, [b"x" * 5] * 10)
        assert out == [TOO_LARGE]
        assert lb.feed(b"xxxx") == []
        assert lb.feed(b"xx\nafter\n") == [b"after"]

    def test_oversize_byte_by_byte(self) -> None:
        lb = LineBuffer(max_frame=4)
        stream = b"a" * 50 + b"\nok\n"
        out = feed_all(lb, [stream[i : i + 1] for i in range(len(stream))])
        assert out == [TOO_LARGE, b"ok"]

    def test_newline_in_later_feed_keeps_rest_of_that_feed(self) -> None:
        lb = LineBuffer(max_frame=4)
        assert lb.feed(b"12345") == [TOO_LARGE]
        assert lb.feed(b"678") == []
        assert lb.feed(b"9\nab\ncd") == [b"ab"]
        assert lb.end() == [b"cd"]

    def test_oversize_rest_after_complete_lines(self) -> None:
        lb = LineBuffer(max_frame=4)
        assert lb.feed(b"ab\ncdefgh") == [b"ab", TOO_LARGE]
        assert lb.feed(b"ij\nkl\n") == [b"kl"]

    def test_partial_then_oversize_completion(self) -> None:
        lb = LineBuffer(max_frame=4)
        assert lb.feed(b"abc") == []
        assert lb.feed(b"defgh\nxy\n") == [TOO_LARGE, b"xy"]

    def test_two_oversize_lines_each_reported(self) -> None:
        lb = LineBuffer(max_frame=3)
        assert lb.feed(b"aaaa\nbbbb\nc\n") == [TOO_LARGE, TOO_LARGE, b"c"]

    def test_end_while_discarding(self) -> None:
        lb = LineBuffer(max_frame=3)
        assert lb.feed(b"aaaaaaa") == [TOO_LARGE]
        assert lb.end() == []
        # A new stream starts clean.
        assert lb.feed(b"ok\n") == [b"ok"]

    def test_memory_bounded_by_limit_plus_one_chunk(self) -> None:
        limit = 1000
        lb = LineBuffer(max_frame=limit)
        chunk = b"y" * 333
        for _ in range(100):  # 33 kB of one line, never buffered beyond the limit
            lb.feed(chunk)
            assert len(lb._buf) <= limit
        assert lb.feed(b"\n" + b"z" * limit + b"\n") == [b"z" * limit]
        assert len(lb._buf) == 0

    def test_default_limit_is_one_mebibyte(self) -> None:
        assert LineBuffer().max_frame == codec.MAX_FRAME_BYTES == 1 << 20

    def test_too_large_repr(self) -> None:
        assert repr(TOO_LARGE) == "TOO_LARGE"


def _reference(stream: bytes, limit: int) -> list[bytes | codec.TooLarge]:
    """What a LineBuffer must produce for a whole stream, however it is chunked."""
    out: list[bytes | codec.TooLarge] = []
    for raw in stream.split(b"\n"):
        if len(raw) > limit:
            out.append(TOO_LARGE)
            continue
        text = raw[:-1] if raw.endswith(b"\r") else raw
        if text.strip():
            out.append(text)
    return out


_line_bytes = st.lists(st.sampled_from(b"ab \r{}"), max_size=14).map(bytes)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_line_bytes, max_size=8),
    trailing_newline=st.booleans(),
    limit=st.integers(1, 10),
    cuts=st.lists(st.integers(0, 200), max_size=12),
)
def test_chunking_invariance(
    lines: list[bytes], trailing_newline: bool, limit: int, cuts: list[int]
) -> None:
    stream = b"\n".join(lines) + (b"\n" if trailing_newline else b"")
    points = sorted({c % (len(stream) + 1) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    lb = LineBuffer(max_frame=limit)
    out = feed_all(lb, chunks) + lb.end()
    assert out == _reference(stream, limit)


# -- decode: accepted frames -------------------------------------------------------------------


class TestDecodeAccepted:
    @pytest.mark.parametrize("method", METHODS)
    def test_lifecycle_notification(self, method: str) -> None:
        item = one(event(method))
        assert type(item) is TYPES[method]
        assert item.id is msgspec.UNSET
        assert isinstance(item.params.workloadInfo, WorkloadInfo)

    @pytest.mark.parametrize("rid", ["abc", "", 0, -7, 2**53 - 1, -(2**53 - 1), None])
    def test_request_ids(self, rid: object) -> None:
        item = one(event("workload:started", id=rid))
        assert isinstance(item, WorkloadStarted)
        assert item.id == rid
        assert type(item.id) is type(rid)

    def test_remove(self) -> None:
        item = one(remove("9", "node-z", run_id="r"))
        assert isinstance(item, WorkloadsRemove)
        assert (item.params.workloadId, item.params.originatedFrom) == ("9", "node-z")
        assert item.params.runId == "r"
        no_run = one(remove())
        assert isinstance(no_run, WorkloadsRemove)
        assert no_run.params.runId is msgspec.UNSET

    def test_nodes_update_and_status(self) -> None:
        nu = one(nodes_update(id=3))
        assert isinstance(nu, NodesUpdate)
        assert nu.params.nodes[0].port == 14320
        st_ = one(manager_status("q"))
        assert isinstance(st_, ManagerStatus)
        assert st_.id == "q"
        assert isinstance(one(dumps(frame("manager:status", {}, id=1))), ManagerStatus)

    def test_unknown_fields_dropped(self) -> None:
        wi = workload(prompt="secret", messages=[{"role": "user"}], response={"x": 1})
        item = one(dumps({**event_frame("workload:submitted", wi), "extra": 1}))
        assert isinstance(item, WorkloadSubmitted)
        encoded = codec.encode(item)
        for word in (b"prompt", b"secret", b"messages", b"response", b"extra"):
            assert word not in encoded

    def test_absent_and_null_distinct(self) -> None:
        item = one(event("workload:submitted", workload(scheduledOn=ABSENT, requesterId=None)))
        assert isinstance(item, WorkloadSubmitted)
        wi = item.params.workloadInfo
        assert wi.scheduledOn is msgspec.UNSET
        assert wi.requesterId is None
        item = one(event("workload:submitted", workload(requesterId=ABSENT)))
        assert isinstance(item, WorkloadSubmitted)
        assert item.params.workloadInfo.requesterId is msgspec.UNSET

    @pytest.mark.parametrize(
        ("text", "value"), [("1.0", 1), ("1e3", 1000), ("1E0", 1), ("2.0e1", 20), ("100e-2", 1)]
    )
    def test_integers_written_as_floats(self, text: str, value: int) -> None:
        payload = event("workload:started", workload(seq=12345, createdAt=67890))
        payload = payload.replace(b'"seq":12345', b'"seq":' + text.encode())
        payload = payload.replace(b'"createdAt":67890', b'"createdAt":' + text.encode())
        item = one(payload)
        assert isinstance(item, WorkloadStarted)
        assert item.params.workloadInfo.seq == value
        assert type(item.params.workloadInfo.seq) is int
        assert item.params.workloadInfo.createdAt == value

    def test_integral_float_id_is_an_integer_id(self) -> None:
        item = one(manager_status(1).replace(b'"id":1', b'"id":1.0'))
        assert isinstance(item, ManagerStatus)
        assert item.id == 1
        assert type(item.id) is int

    def test_surrogate_pair_accepted(self) -> None:
        payload = event("workload:started", workload(model="MODEL")).replace(
            b"MODEL", b"m\\ud83d\\ude00"
        )
        item = one(payload)
        assert isinstance(item, WorkloadStarted)
        assert item.params.workloadInfo.model == "m\U0001f600"

    def test_leading_whitespace(self) -> None:
        assert isinstance(one(b"  \t" + manager_status(1)), ManagerStatus)
        decoded = codec.decode(b"  " + batch(json.loads(manager_status(1))))
        assert decoded.batch


# -- decode: errors ----------------------------------------------------------------------------


class TestDecodeErrors:
    @pytest.mark.parametrize(
        "payload",
        [
            b"{",
            b"not json",
            b'{"jsonrpc":"2.0",}',
            b'{"jsonrpc":"2.0"} trailing',
            b'{"jsonrpc":"2.0","method":"workload:started","id":1',
            b'{"a":"\\ud800"}',  # lone high surrogate
            b'{"a":"\\udc00"}',  # lone low surrogate
            b'{"a":"\xff"}',  # not UTF-8
            b"[1,",
        ],
    )
    def test_parse_error(self, payload: bytes) -> None:
        err = error(payload)
        assert err.code == PARSE_ERROR
        assert err.id is None
        assert err.respond  # the id cannot be read: answered with id null
        assert err.reason.startswith("malformed JSON")

    def test_lone_surrogate_inside_valid_frame(self) -> None:
        payload = event("workload:started", workload(model="MODEL"), id=4)
        err = error(payload.replace(b"MODEL", b"\\ud800"))
        assert err.code == PARSE_ERROR

    @pytest.mark.parametrize(
        "obj",
        [
            1,
            "workload:started",
            None,
            True,
            {"method": "manager:status", "id": 1},  # no jsonrpc
            {"jsonrpc": "1.0", "method": "manager:status", "id": 1},
            {"jsonrpc": 2.0, "method": "manager:status", "id": 1},
            {"jsonrpc": "2.0", "method": 5, "id": 1},
            {"jsonrpc": "2.0", "method": None, "id": 1},
            {"jsonrpc": "2.0", "id": 1},
        ],
    )
    def test_invalid_request(self, obj: object) -> None:
        err = error(dumps(obj))
        assert err.code == INVALID_REQUEST
        expected_id = obj.get("id") if isinstance(obj, dict) else None
        assert err.id == expected_id
        assert err.respond

    def test_invalid_request_notification_not_answered(self) -> None:
        err = error(dumps({"jsonrpc": "1.0", "method": "workload:started"}))
        assert (err.code, err.respond) == (INVALID_REQUEST, False)
        err = error(dumps({"jsonrpc": "2.0", "method": 5}))
        assert (err.code, err.respond) == (INVALID_REQUEST, False)

    @pytest.mark.parametrize(
        "rid", [1.5, -0.25, 1e300, 1e20, 2.0**53, True, False, [1], {"a": 1}, "x" * 257]
    )
    def test_bad_id_is_invalid_request_with_null_id(self, rid: object) -> None:
        err = error(dumps(frame("manager:status", id=rid)))
        assert err.code == INVALID_REQUEST
        assert err.id is None
        assert err.respond

    @pytest.mark.parametrize("rid", [2**53, -(2**53), 2**64])
    def test_integer_id_out_of_range_is_invalid_request(self, rid: int) -> None:
        # RequestId integers are bounded by +-(2**53 - 1), so that every language holds them.
        err = error(dumps(frame("manager:status", id=rid)))
        assert (err.code, err.path, err.id) == (INVALID_REQUEST, "$.id", None)

    def test_unknown_method(self) -> None:
        err = error(dumps(frame("workload:exploded", {}, id="u")))
        assert (err.code, err.id, err.respond) == (METHOD_NOT_FOUND, "u", True)
        assert err.method == "workload:exploded"
        assert "workload:exploded" in err.reason

    def test_unknown_method_notification_not_answered(self) -> None:
        err = error(dumps(frame("rpc.discover")))
        assert (err.code, err.respond) == (METHOD_NOT_FOUND, False)

    def test_known_methods(self) -> None:
        expected = {*METHODS, "workloads:remove", "nodes:update", "manager:status"}
        assert expected == codec.KNOWN_METHODS
        # Outbound-only methods are not accepted inbound.
        for m in ("workloads:upsert", "ready"):
            assert error(dumps(frame(m, {}, id=1))).code == METHOD_NOT_FOUND

    @pytest.mark.parametrize(
        ("overrides", "path", "reason"),
        [
            ({"seq": "1"}, "$.params.workloadInfo.seq", "Expected `int`, got `str`"),
            ({"seq": 1.5}, "$.params.workloadInfo.seq", "Expected `int`, got `float`"),
            ({"seq": True}, "$.params.workloadInfo.seq", "Expected `int`, got `bool`"),
            ({"seq": 0}, "$.params.workloadInfo.seq", "Expected `int` >= 1"),
            ({"seq": 2**53}, "$.params.workloadInfo.seq", "Expected `int` <= 9007199254740991"),
            ({"createdAt": -1}, "$.params.workloadInfo.createdAt", "Expected `int` >= 0"),
            ({"startedAt": False}, "$.params.workloadInfo.startedAt", "got `bool`"),
            ({"state": "paused"}, "$.params.workloadInfo.state", "Invalid enum value 'paused'"),
            ({"id": ""}, "$.params.workloadInfo.id", "Expected `str` of length >= 1"),
            ({"runId": "r" * 129}, "$.params.workloadInfo.runId", "length <= 128"),
            ({"scheduledOn": None}, "$.params.workloadInfo.scheduledOn", "got `null`"),
            ({"model": ABSENT}, "$.params.workloadInfo", "missing required field `model`"),
            ({"error": ABSENT}, "$.params.workloadInfo", "missing required field `error`"),
        ],
    )
    def test_invalid_params_name_path_and_reason(
        self, overrides: dict[str, object], path: str, reason: str
    ) -> None:
        err = error(event("workload:started", workload(**overrides), id=7))
        assert err.code == INVALID_PARAMS
        assert err.path == path
        assert reason in err.reason
        assert (err.id, err.respond, err.method) == (7, True, "workload:started")
        data = msgspec.to_builtins(err.response()).get("error").get("data")
        assert data["path"] == path
        assert data["reason"] == err.reason

    def test_seq_float_path_unaffected_by_integral_floats_elsewhere(self) -> None:
        payload = event("workload:started", workload(seq=2, createdAt=12345), id=1)
        payload = payload.replace(b'"createdAt":12345', b'"createdAt":1.0')
        payload = payload.replace(b'"seq":2', b'"seq":2.5')
        err = error(payload)
        assert (err.code, err.path) == (INVALID_PARAMS, "$.params.workloadInfo.seq")

    @pytest.mark.parametrize("params", [[1, 2], "x", 3, None, True])
    def test_params_not_an_object(self, params: object) -> None:
        err = error(dumps(frame("workload:started", params, id=1)))
        assert (err.code, err.path) == (INVALID_PARAMS, "$.params")

    def test_params_of_other_frames(self) -> None:
        err = error(dumps(frame("workloads:remove", {"workloadId": "1"}, id=1)))
        assert (err.code, err.path) == (INVALID_PARAMS, "$.params")
        assert "originatedFrom" in err.reason
        err = error(nodes_update([{"nodeId": "n", "address": "a", "fingerprint": "AB" * 32}], id=1))
        assert (err.code, err.path) == (INVALID_PARAMS, "$.params.nodes[0].fingerprint")
        err = error(dumps(frame("manager:status", {"verbose": True}, id=1)))
        assert (err.code, err.path) == (INVALID_PARAMS, "$.params")

    def test_missing_id_on_status_is_an_unanswered_invalid_request(self) -> None:
        err = error(dumps(frame("manager:status")))
        assert (err.code, err.respond) == (INVALID_REQUEST, False)
        assert "needs an id" in err.reason

    def test_missing_params_is_invalid_params(self) -> None:
        err = error(dumps(frame("workload:started", id=1)))
        assert (err.code, err.path) == (INVALID_PARAMS, "$.params")

    def test_invalid_notification_is_not_answered(self) -> None:
        err = error(event("workload:started", workload(seq="x")))
        assert (err.code, err.respond, err.id) == (INVALID_PARAMS, False, None)


# -- decode: batches ---------------------------------------------------------------------------


class TestBatch:
    def test_batch_order_preserved_and_bad_frames_isolated(self) -> None:
        payload = batch(
            event_frame("workload:submitted", workload(id="a"), id=1),
            b"17",
            event_frame("workload:started", workload(id="b", seq="x"), id=2),
            frame("nope", {}, id=3),
            event_frame("workload:completed", workload(id="c")),
            {"jsonrpc": "2.0", "method": "manager:status"},
            remove(),
        )
        decoded = codec.decode(payload)
        assert decoded.batch
        items = decoded.items
        assert len(items) == 7
        assert isinstance(items[0], WorkloadSubmitted)
        assert items[0].params.workloadInfo.id == "a"
        assert isinstance(items[1], RpcError)
        assert (items[1].code, items[1].id) == (INVALID_REQUEST, None)
        assert isinstance(items[2], RpcError)
        assert (items[2].code, items[2].id) == (INVALID_PARAMS, 2)
        assert isinstance(items[3], RpcError)
        assert (items[3].code, items[3].id) == (METHOD_NOT_FOUND, 3)
        assert isinstance(items[4], WorkloadCompleted)
        assert isinstance(items[5], RpcError)
        assert not items[5].respond
        assert isinstance(items[6], WorkloadsRemove)

    def test_batch_element_equals_single_decode(self) -> None:
        elements = [
            event("workload:started", id=1),
            b'"text"',
            b"null",
            manager_status(None),
            event("workload:errored", workload(seq=0)),
        ]
        decoded = codec.decode(batch(*elements))
        assert decoded.items == [one(e) for e in elements]

    def test_nested_array_element_is_invalid_request(self) -> None:
        decoded = codec.decode(b"[[" + manager_status(1) + b"]]")
        assert decoded.batch
        [err] = decoded.items
        assert isinstance(err, RpcError)
        assert err.code == INVALID_REQUEST

    @pytest.mark.parametrize("payload", [b"[]", b"[ ]", b" [\n] "])
    def test_empty_batch_is_one_invalid_request_not_an_array(self, payload: bytes) -> None:
        decoded = codec.decode(payload)
        assert not decoded.batch
        [err] = decoded.items
        assert isinstance(err, RpcError)
        assert (err.code, err.id, err.respond) == (INVALID_REQUEST, None, True)

    @pytest.mark.parametrize(
        "payload", [b"[" + manager_status(1), b"[1,]", b'[{"a":"\\ud800"]', b"[1] x"]
    )
    def test_malformed_batch_is_one_parse_error(self, payload: bytes) -> None:
        decoded = codec.decode(payload)
        assert not decoded.batch
        [err] = decoded.items
        assert isinstance(err, RpcError)
        assert err.code == PARSE_ERROR


# -- responses and encoding --------------------------------------------------------------------


class TestResponses:
    def test_error_response_shape(self) -> None:
        err = RpcError(INVALID_PARAMS, "Expected `int`", 7, True, "$.params.x", "m")
        assert json.loads(codec.encode(err.response())) == {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {
                "code": -32602,
                "message": "Invalid params",
                "data": {"reason": "Expected `int`", "path": "$.params.x"},
            },
        }
        body = json.loads(codec.encode(err.response(index=3)))
        assert body["error"]["data"]["index"] == 3

    def test_error_without_path_has_no_path_key(self) -> None:
        body = json.loads(codec.encode(RpcError(PARSE_ERROR, "bad").response()))
        assert body == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "Parse error", "data": {"reason": "bad"}},
        }

    @pytest.mark.parametrize("code", sorted(codec.ERROR_MESSAGES))
    def test_every_code_has_a_message(self, code: ErrorCode) -> None:
        body = json.loads(codec.encode(RpcError(code, "r", "i").response()))
        assert body["error"]["message"] == codec.ERROR_MESSAGES[code]
        assert body["error"]["code"] == code

    def test_too_large(self) -> None:
        err = codec.too_large(1234)
        assert (err.code, err.id, err.respond) == (FRAME_TOO_LARGE, None, True)
        assert "1234" in err.reason

    def test_event_response(self) -> None:
        body = json.loads(codec.encode(codec.event_response("x", "stale")))
        assert body == {"jsonrpc": "2.0", "id": "x", "result": {"outcome": "stale"}}

    def test_encode_line(self) -> None:
        obj = codec.event_response(None, "applied")
        assert codec.encode_line(obj) == codec.encode(obj) + b"\n"
        assert b"\n" not in codec.encode(obj)
        assert b" " not in codec.encode(obj)


# -- validate ----------------------------------------------------------------------------------


class TestValidate:
    def test_valid_and_integral_floats(self) -> None:
        text = dumps(workload(seq=3)).replace(b'"seq":3', b'"seq":3.0')
        wi = codec.validate(text, WorkloadInfo)
        assert wi.seq == 3
        assert type(wi.seq) is int

    def test_malformed(self) -> None:
        with pytest.raises(codec.InvalidFrame) as exc:
            codec.validate(b"{", WorkloadInfo)
        assert exc.value.path is None
        assert exc.value.reason.startswith("malformed JSON")

    def test_reports_the_real_error_not_the_accepted_float(self) -> None:
        # seq written 1.0 is valid; the real error is createdAt. seq comes first in the text,
        # so a strict pass alone would blame it.
        obj = {"seq": 12345, **workload(seq=ABSENT, createdAt=-1)}
        text = dumps(obj).replace(b'"seq":12345', b'"seq":1.0')
        with pytest.raises(codec.InvalidFrame) as exc:
            codec.validate(text, WorkloadInfo)
        assert exc.value.path == "$.createdAt"
        assert "Expected `int` >= 0" in exc.value.reason

    def test_integers_are_bounded_by_2_53(self) -> None:
        text = dumps(workload(seq=3)).replace(b'"seq":3', b'"seq":9007199254740991.0')
        assert codec.validate(text, WorkloadInfo).seq == 2**53 - 1
        for spelling in (b"9007199254740992", b"9.007199254740992e15", b"1e20"):
            with pytest.raises(codec.InvalidFrame) as exc:
                codec.validate(
                    dumps(workload(seq=3)).replace(b'"seq":3', b'"seq":' + spelling), WorkloadInfo
                )
            assert exc.value.path == "$.seq"

    def test_integral_floats_to_int(self) -> None:
        out = codec._integral_floats_to_int(
            {"a": [1.0, -0.0, 1.5, 9007199254740991.0, -9007199254740991.0, 2.0**53, 1e20, "1.0"]}
        )
        assert out == {"a": [1, 0, 1.5, 2**53 - 1, -(2**53 - 1), 2.0**53, 1e20, "1.0"]}
        assert [type(v) for v in out["a"]] == [int, int, float, int, int, float, float, str]


# -- validate: a tagged frame type on its own requires its tag -----------------------------------

LONE = [
    (WorkloadsRemove, json.loads(remove())),
    (NodesUpdate, json.loads(nodes_update())),
    (ManagerStatus, json.loads(manager_status(1))),
    *[(TYPES[m], json.loads(event(m))) for m in METHODS],
]


class TestValidateTag:
    @pytest.mark.parametrize(("typ", "obj"), LONE)
    def test_with_its_tag(self, typ: type, obj: dict[str, object]) -> None:
        assert type(codec.validate(dumps(obj), typ)) is typ

    @pytest.mark.parametrize(("typ", "obj"), LONE)
    def test_without_its_tag(self, typ: type, obj: dict[str, object]) -> None:
        # msgspec alone takes a missing tag as the type's own when the type is not in a union;
        # the schema requires it (required + const).
        untagged = {k: v for k, v in obj.items() if k != "method"}
        assert type(msgspec.json.decode(dumps(untagged), type=typ)) is typ
        with pytest.raises(codec.InvalidFrame) as exc:
            codec.validate(dumps(untagged), typ)
        assert "missing required field `method`" in exc.value.reason

    @pytest.mark.parametrize(("typ", "obj"), LONE)
    def test_with_another_tag(self, typ: type, obj: dict[str, object]) -> None:
        with pytest.raises(codec.InvalidFrame) as exc:
            codec.validate(dumps({**obj, "method": "workload:exploded"}), typ)
        assert exc.value.path == "$.method"

    def test_the_sentinel_tag_is_refused(self) -> None:
        sentinel = codec._target(WorkloadsRemove).sentinel
        assert sentinel is not None
        tag = sentinel.__struct_config__.tag
        obj = json.loads(remove())
        for text in (
            dumps({**obj, "method": tag}),
            # The strict pass sees the first method, the re-read the last.
            dumps(obj)[:-1] + b',"method":' + json.dumps(tag).encode() + b"}",
        ):
            with pytest.raises(codec.InvalidFrame) as exc:
                codec.validate(text, WorkloadsRemove)
            assert exc.value.path == "$.method"
        head = b'{"method":' + json.dumps(tag).encode() + b"," + dumps(obj)[1:]
        assert type(codec.validate(head, WorkloadsRemove)) is WorkloadsRemove

    def test_duplicate_method_last_one_counts(self) -> None:
        body = dumps(json.loads(remove()))[1:]
        last_ok = b'{"method":"workload:started",' + body
        assert type(codec.validate(last_ok, WorkloadsRemove)) is WorkloadsRemove
        last_bad = body[:-1] + b',"method":"workload:started"}'
        with pytest.raises(codec.InvalidFrame):
            codec.validate(b"{" + last_bad, WorkloadsRemove)

    def test_untagged_types_unchanged(self) -> None:
        assert codec._target(WorkloadInfo).sentinel is None
        assert type(codec.validate(dumps(workload()), WorkloadInfo)) is WorkloadInfo
