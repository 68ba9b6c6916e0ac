"""No input stops the daemon (issue 10, items 1 and 2).

Every class of hostile input goes through a real ``nvpair-wm`` process on stdio: nesting beyond
``MAX_DEPTH`` (in known and unknown members, in ids and keys, inside a batch), numbers no double
holds, invalid UTF-8, lone surrogates, NUL, a byte order mark, CRLF, repeated names and oversize
lines. Each line gets its precise answer, and the request sent right after it is answered too:
the channel goes on. The codec-level tests pin down the bound itself (64 levels pass, 65 do not),
the reasons' wording and that :func:`nvpair_wm.codec.decode` never raises, whatever the bytes.
A failure that is not the broker's EOF ends the process with status 1 and one line on stderr.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nvpair_wm_schema.workload_info_schema import WorkloadInfo

from nvpair_wm import codec
from nvpair_wm.codec import MAX_DEPTH, PARSE_ERROR, RpcError
from nvpair_wm.local import BrokerReader, _feed_from_thread
from tests.support.frames import dumps, event_frame, workload
from tests.support.wm_process import WAIT, WmProcess

_ids = itertools.count(1)
HOLE = "@@HOLE@@"  # a placeholder value; its JSON text is replaced by raw bytes
HOLE_TEXT = b'"@@HOLE@@"'


def deep(levels: int, open_: bytes = b"[", close: bytes = b"]") -> bytes:
    return open_ * levels + close * levels


def deep_objects(levels: int) -> bytes:
    return b'{"a":' * (levels - 1) + b"{}" + b"}" * (levels - 1)


def request(rid: Any = None, **info: Any) -> dict[str, Any]:
    """A lifecycle request for a fresh workload (so a valid one is always ``applied``)."""
    fields = {"id": f"w{next(_ids)}", **info}
    return event_frame("workload:submitted", workload(**fields), id=rid)


def with_raw(
    frame: dict[str, Any], raw: bytes, *, separators: tuple[str, str] = (",", ":")
) -> bytes:
    """The frame's JSON text with the placeholder string replaced by ``raw`` bytes."""
    text = json.dumps(frame, separators=separators).encode()
    assert text.count(HOLE_TEXT) == 1, text
    return text.replace(HOLE_TEXT, raw)


def unknown(raw: bytes, rid: Any = 1) -> bytes:
    """``raw`` as the value of an unknown member of workloadInfo."""
    return with_raw(request(rid, traceId=HOLE), raw)


def known(name: str, raw: bytes, rid: Any = 1) -> bytes:
    return with_raw(request(rid, **{name: HOLE}), raw)


@dataclass(frozen=True)
class Case:
    line: bytes
    code: int | None  # None: valid, answered {"outcome": "applied"}
    reason: str = ""  # a substring of error.data.reason
    rid: Any = 1


SURROGATE = "lone surrogate"
NOT_FINITE = "beyond every finite IEEE 754 double"
TOO_DEEP = f"deeper than {MAX_DEPTH} levels"

CASES: dict[str, Case] = {
    # nesting: the frame is level 1, params 2, workloadInfo 3, so an unknown member of
    # workloadInfo holding n nested arrays makes the frame 3 + n deep.
    "unknown member nested 1000 deep": Case(unknown(deep(1000)), PARSE_ERROR, TOO_DEEP, None),
    "unknown member, frame exactly 64 deep": Case(unknown(deep(MAX_DEPTH - 3)), None),
    "unknown member, frame 65 deep": Case(
        unknown(deep(MAX_DEPTH - 2)), PARSE_ERROR, TOO_DEEP, None
    ),
    "unknown member, objects 1000 deep": Case(
        unknown(deep_objects(1000)), PARSE_ERROR, TOO_DEEP, None
    ),
    "known member nested 1000 deep": Case(known("model", deep(1000)), PARSE_ERROR, TOO_DEEP, None),
    "id nested 1000 deep": Case(with_raw(request(HOLE), deep(1000)), PARSE_ERROR, TOO_DEEP, None),
    "100000 brackets never closed": Case(b"[" * 100_000, PARSE_ERROR, "", None),
    "brackets inside strings do not count": Case(
        unknown(json.dumps("[" * 5000 + "{" * 5000).encode()), None
    ),
    # numbers
    "1e400 in an unknown member": Case(unknown(b"1e400"), PARSE_ERROR, NOT_FINITE, None),
    "-1E+400 in an unknown member": Case(unknown(b"-1E+400"), PARSE_ERROR, NOT_FINITE, None),
    "400-digit integer in an unknown member": Case(
        unknown(b"1" + b"0" * 400), PARSE_ERROR, NOT_FINITE, None
    ),
    "1e400 in a known member": Case(known("seq", b"1e400"), PARSE_ERROR, NOT_FINITE, None),
    "1e400 as the id": Case(with_raw(request(HOLE), b"1e400"), PARSE_ERROR, NOT_FINITE, None),
    "1e-400 underflows to 0: a finite double": Case(unknown(b"1e-400"), None),
    "a 300-digit integer is a finite double": Case(unknown(b"9" * 300), None),
    # UTF-8
    "raw 0x80 in an unknown member": Case(unknown(b'"\x80"'), PARSE_ERROR, "invalid UTF-8", None),
    "raw 0xff in a known member": Case(known("model", b'"\xff"'), PARSE_ERROR, "UTF-8", None),
    "invalid UTF-8 in an unknown name": Case(
        dumps(request(1, traceId=0)).replace(b'"traceId"', b'"tr\xc3ce"'),
        PARSE_ERROR,
        "invalid UTF-8",
        None,
    ),
    "surrogate encoded in UTF-8": Case(
        unknown(b'"\xed\xa0\x80"'), PARSE_ERROR, "surrogate encoded in UTF-8", None
    ),
    "truncated UTF-8 sequence": Case(unknown(b'"\xe2\x82"'), PARSE_ERROR, "invalid UTF-8", None),
    # surrogates
    "lone high surrogate as the id": Case(
        with_raw(request(HOLE), b'"\\ud800"'), PARSE_ERROR, f"{SURROGATE} \\ud800", None
    ),
    "lone low surrogate in an unknown member": Case(
        unknown(b'"x\\uDC00"'), PARSE_ERROR, f"{SURROGATE} \\uDC00", None
    ),
    "surrogates in the wrong order": Case(
        unknown(b'"\\udc00\\ud800"'), PARSE_ERROR, SURROGATE, None
    ),
    "high surrogate followed by a letter": Case(
        unknown(b'"\\ud83dx"'), PARSE_ERROR, f"{SURROGATE} \\ud83d", None
    ),
    "lone surrogate in a member name": Case(
        dumps(request(1, traceId=0)).replace(b'"traceId"', b'"\\ud800"'),
        PARSE_ERROR,
        SURROGATE,
        None,
    ),
    "lone surrogate in a known member": Case(
        known("requesterId", b'"\\udbff"'), PARSE_ERROR, SURROGATE, None
    ),
    "a correct pair is one character": Case(unknown(b'"\\ud83d\\ude00"'), None),
    "an escaped backslash before u is text": Case(unknown(b'"\\\\ud800"'), None),
    # control characters, BOM, line endings, whitespace
    "raw NUL in a string": Case(unknown(b'"a\x00b"'), PARSE_ERROR, "", None),
    "raw NUL between members": Case(unknown(b"0\x00"), PARSE_ERROR, "", None),
    "escaped NUL in an unknown member": Case(unknown(b'"a\\u0000b"'), None),
    "byte order mark": Case(b"\xef\xbb\xbf" + dumps(request(1)), PARSE_ERROR, "byte order", None),
    "CRLF line ending": Case(dumps(request(1)) + b"\r", None),
    "spaces everywhere": Case(
        with_raw(request(1, traceId=HOLE), b"[ 1 , 2 ]", separators=(" , ", " : ")), None
    ),
    "quote escapes in known strings and 1e400 in an unknown member": Case(
        with_raw(request(1, model='a"b"c', traceId=HOLE), b"1e400").replace(b'\\"', b"\\u0022"),
        PARSE_ERROR,
        NOT_FINITE,
        None,
    ),
    # repeated names: the last one counts
    "repeated seq, the last is valid": Case(known("seq", b'"x","seq":2'), None),
    "repeated seq, the last is invalid": Case(known("seq", b'2,"seq":"x"'), -32602, "int"),
    "repeated method, the last is unknown": Case(
        dumps(request(1))[:-1] + b',"method":"workload:exploded"}', -32601, "workload:exploded"
    ),
    "repeated method, the last is another event": Case(
        dumps(request(1))[:-1] + b',"method":"workload:started"}', None
    ),
    # size
    "line over 1 MiB": Case(unknown(b'"' + b"x" * (1 << 20) + b'"'), -32000, "1048576", None),
}


@pytest.fixture(scope="module")
def wm() -> Iterator[WmProcess]:
    """One process for every case: each one must leave the channel usable for the next."""
    with WmProcess("--port", "0") as proc:
        assert proc.recv()["method"] == "ready"
        yield proc
        proc.close_stdin()
        assert proc.wait() == 0, "\n".join(proc.stderr_log[-20:])


@pytest.mark.parametrize("name", list(CASES))
def test_each_hostile_line_gets_its_answer_and_the_next_request_is_answered(
    wm: WmProcess, name: str
) -> None:
    case = CASES[name]
    wm.send(case.line + b"\n")
    reply = wm.recv()
    if case.code is None:
        assert reply == {"jsonrpc": "2.0", "id": 1, "result": {"outcome": "applied"}}, name
    else:
        assert reply["id"] == case.rid, reply
        assert reply["error"]["code"] == case.code, reply
        assert case.reason in reply["error"]["data"]["reason"], reply
    assert wm.status()["version"]  # the next request on the same channel is answered


BATCH_ELEMENTS = {
    "nested 1000 deep (beyond msgspec's own bound)": (unknown(deep(1000), rid="b"), TOO_DEEP),
    "nested 100000 deep": (deep(100_000), TOO_DEEP),
    "a lone surrogate (msgspec's batch splitter refuses it)": (
        unknown(b'"\\udfff"', rid="b"),
        SURROGATE,
    ),
    "1e400": (unknown(b"1e400", rid="b"), NOT_FINITE),
    "invalid UTF-8": (unknown(b'"\xc3"', rid="b"), "invalid UTF-8"),
}


@pytest.mark.parametrize("name", list(BATCH_ELEMENTS))
def test_a_batch_element_breaking_a_rule_is_its_own_error_and_the_others_apply(
    wm: WmProcess, name: str
) -> None:
    bad, why = BATCH_ELEMENTS[name]
    before = wm.status()["counters"]["workloads"]
    good1, good2 = dumps(request("a")), dumps(request("c"))
    wm.send(b"[" + good1 + b", " + bad + b"," + good2 + b"]\n")
    first, error, last = wm.recv()
    assert first == {"jsonrpc": "2.0", "id": "a", "result": {"outcome": "applied"}}
    assert error["id"] is None and error["error"]["code"] == PARSE_ERROR
    assert error["error"]["data"]["index"] == 1
    assert why in error["error"]["data"]["reason"]
    assert last == {"jsonrpc": "2.0", "id": "c", "result": {"outcome": "applied"}}
    assert wm.status()["counters"]["workloads"] == before + 2


# -- the codec on its own -------------------------------------------------------------------------


def _decode_one(payload: bytes) -> codec.Item:
    decoded = codec.decode(payload)
    assert len(decoded.items) == 1 and not decoded.batch
    return decoded.items[0]


def test_the_bound_is_exact_for_arrays_objects_and_batches() -> None:
    for nest in (deep, deep_objects):
        ok, over = unknown(nest(MAX_DEPTH - 3)), unknown(nest(MAX_DEPTH - 2))
        assert (codec.nesting_depth(ok), codec.nesting_depth(over)) == (MAX_DEPTH, MAX_DEPTH + 1)
        assert not isinstance(_decode_one(ok), RpcError)
        err = _decode_one(over)
        assert isinstance(err, RpcError) and err.code == PARSE_ERROR and TOO_DEEP in err.reason
        # The array of a batch is not counted: each element is judged alone.
        decoded = codec.decode(b"[" + ok + b"," + over + b"]")
        assert decoded.batch and [isinstance(i, RpcError) for i in decoded.items] == [False, True]
    assert codec.nesting_depth(b'{"a":"[[[[{{{{","b":["]]]]"]}') == 2
    assert codec.nesting_depth(b'"\\"[[["') == 0
    assert codec.nesting_depth(b"") == 0


def test_validate_holds_every_member_to_the_contract() -> None:
    base = dumps(workload(traceId=HOLE))
    for raw, why in [
        (b'"\\ud800"', SURROGATE),
        (b"1e400", NOT_FINITE),
        (b'"\x80"', "UTF-8"),
        (deep(MAX_DEPTH), TOO_DEEP),
        (deep(5000), TOO_DEEP),
    ]:
        with pytest.raises(codec.InvalidFrame) as exc:
            codec.validate(base.replace(HOLE_TEXT, raw), WorkloadInfo)
        assert why in exc.value.reason
    assert codec.validate(base.replace(HOLE_TEXT, b"[1e300]"), WorkloadInfo).id == "1"


def test_split_array_judges_structure_only() -> None:
    assert codec._split_array(b' [ 1 , {"a":[","]} ,"]"] ') == [b" 1 ", b' {"a":[","]} ', b'"]"']
    for bad in [b"[1,]", b"[,1]", b"[1] x", b"x [1]", b"[1", b"{}", b"[1]]", b"[]"]:
        assert codec._split_array(bad) is None, bad


# What an element of a batch answers for alone (its own -32700, with the reason's words) ...
ELEMENT_FAULTS = {
    "a lone surrogate": (unknown(b'"\\ud800"', rid="b"), SURROGATE),
    "a lone surrogate in a member name": (unknown(b'{"\\udc00":1}', rid="b"), SURROGATE),
    "1e400": (unknown(b"1e400", rid="b"), NOT_FINITE),
    "an integer of 309 digits": (unknown(b"9" * 309, rid="b"), NOT_FINITE),
    "nested 1,100 deep (past msgspec's own bound)": (unknown(deep(1100), rid="b"), TOO_DEEP),
    "a surrogate encoded in UTF-8": (unknown(b'"\xed\xa0\x80"', rid="b"), "invalid UTF-8 at byte"),
    "a UTF-8 sequence cut short": (unknown(b'"\xe2\x82"', rid="b"), "invalid UTF-8 at byte"),
}
# ... and every way a batch [a, bad, c] can fail to be JSON text: then one -32700 for the line.
NOT_JSON: dict[str, Callable[[bytes, bytes, bytes], bytes]] = {
    "a byte after the array": lambda a, bad, c: b"[" + a + b"," + bad + b"," + c + b"]x",
    "a missing comma": lambda a, bad, c: b"[" + a + b"," + bad + b" " + c + b"]",
    "one ']' too many": lambda a, bad, c: b"[" + a + b"," + bad + b"," + c + b"]]",
    "a string never closed": lambda a, bad, c: b"[" + a + b"," + bad + b',"abc]',
    "a syntax error before": lambda a, bad, c: b"[" + a[:-1] + b",oops}," + bad + b"]",
    "a syntax error after": lambda a, bad, c: b"[" + bad + b"," + c[:-1] + b",}]",
    "a syntax error inside it": lambda a, bad, c: b"[" + a + b"," + bad[:-1] + b' "z":1}]',
    "invalid UTF-8 between elements": lambda a, bad, c: b"[" + a + b", \xff ," + bad + b"]",
    "NaN in another element": lambda a, bad, c: b"[" + a[:-1] + b',"n":NaN},' + bad + b"]",
}


@pytest.mark.parametrize("fault", list(ELEMENT_FAULTS))
def test_a_batch_that_is_not_json_text_is_one_error_whatever_faults_it_holds(fault: str) -> None:
    bad, why = ELEMENT_FAULTS[fault]
    a, c = dumps(request("a")), dumps(request("c"))
    decoded = codec.decode(b"[" + a + b"," + bad + b"," + c + b"]")  # JSON text: each alone
    assert decoded.batch and [type(i) is RpcError for i in decoded.items] == [False, True, False]
    error = decoded.items[1]
    assert isinstance(error, RpcError) and error.code == PARSE_ERROR and why in error.reason
    for syntax, build in NOT_JSON.items():
        decoded = codec.decode(build(a, bad, c))
        assert not decoded.batch and len(decoded.items) == 1, (fault, syntax, decoded)
        [error] = decoded.items
        assert isinstance(error, RpcError) and error.code == PARSE_ERROR, (fault, syntax)
        assert error.id is None and error.respond, (fault, syntax)


def test_the_whole_line_error_names_the_syntax_error_not_the_element_fault() -> None:
    a, c = dumps(request("a")), dumps(request("c"))
    bad = unknown(b'"\\ud800"', rid="b")
    [error] = codec.decode(b"[" + a + b"," + bad + b" " + c + b"]").items
    assert isinstance(error, RpcError) and "expected ','" in error.reason, error
    assert f"(byte {len(a) + len(bad) + 3})" in error.reason, error  # offsets survive


def test_an_unclosed_string_of_escaped_quotes_is_refused_in_linear_time() -> None:
    """Each quote of such a string once started a match that ran to the end: quadratic."""
    never_closed = b'"' + b'\\"' * 200_000
    for payload in (b"[" * 1100 + never_closed, b'{"x":' + b"[" * 200 + never_closed):
        started = time.perf_counter()
        [error] = codec.decode(payload).items
        assert isinstance(error, RpcError) and error.code == PARSE_ERROR
        assert time.perf_counter() - started < 20  # minutes before; well under a second here


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_decode_never_raises_on_any_bytes(data: bytes) -> None:
    for payload in (data, b"[" + data + b"]", unknown(data)):
        decoded = codec.decode(payload)
        assert decoded.items


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from([b"[", b"]", b"{", b"}", b'"a":', b",", b'"', b"\\", b"1"]), max_size=400
    )
)
def test_decode_never_raises_on_bracket_soup(parts: list[bytes]) -> None:
    soup = b"".join(parts)
    for payload in (soup, b"[" + soup, unknown(soup), b"[" + soup * 20 + b"]"):
        assert codec.decode(payload).items


# -- how the process ends -------------------------------------------------------------------------


def test_a_failing_channel_exits_1_with_one_line(tmp_path: Path) -> None:
    """stdout on /dev/full: writing fails (ENOSPC), which is neither EOF nor a signal."""
    with open("/dev/full", "wb") as full:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nvpair_wm", "--port", "0"],
            stdin=subprocess.PIPE,
            stdout=full,
            stderr=subprocess.PIPE,
        )
    try:
        proc.wait(timeout=WAIT)  # stdin stays open: no EOF races with the failure
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stderr):
            assert stream is not None
            stream.close()
    errors = [line for line in err.decode().splitlines() if " ERROR " in line]
    assert proc.returncode == 1, err.decode()
    assert len(errors) == 1 and "No space left on device" in errors[0], err.decode()
    assert "exiting with status 1" in errors[0]
    assert "Traceback" not in err.decode()


def test_a_read_error_in_the_stdin_thread_fails_the_reader() -> None:
    """stdin that asyncio cannot watch is read by a thread; a read error there (here a real TCP
    reset: the peer closed with SO_LINGER 0) must reach the reader as that error, not end the
    thread silently and leave the daemon waiting forever."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        peer, _ = listener.accept()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.close()
    stream = client.makefile("rb", buffering=0)

    async def main() -> None:
        reader = BrokerReader()
        _feed_from_thread(asyncio.get_running_loop(), reader, stream)
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(10), WAIT)

    try:
        asyncio.run(main())
    finally:
        stream.close()
        client.close()
