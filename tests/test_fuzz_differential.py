"""Differential fuzzing (issue 10, item 7): the daemon's codec against a reference.

Frames are drawn from the schemas by hypothesis-jsonschema (every member of the inbound union),
then one mutation class is applied: nesting depth around and far beyond ``MAX_DEPTH``, number
spellings, surrogate escapes, invalid UTF-8, repeated member names, a byte order mark, and
whitespace, each in a known member, an unknown member or a member name.

The reference is independent of the code under test: the strict I-JSON parser of
``tests/test_conformance.py`` (Python's ``json`` plus the contract's rules: UTF-8, scalar-value
strings, finite numbers, last of repeated names, at most ``MAX_DEPTH`` levels) and jsonschema's
Draft 2020-12 validator over the schema registry. The daemon side is ``nvpair_wm.codec.decode``,
the hot path every broker line and peer body takes. They must agree on every text:

* the reference cannot parse it → the codec answers -32700;
* it parses but the schema refuses it → the codec answers another error code (never -32700);
* the schema accepts it → the codec accepts it, as the same frame type, and every member the
  codec keeps has the value the reference read (so the last of repeated names wins).

A disagreement is either fixed in the codec or written as a contract rule in
``schema/README.md`` with a vector in ``schema/conformance/``. Example counts are bounded
(``EXAMPLES`` drawn frames, each through every mutation class).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any, Final

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from jsonschema import Draft202012Validator

from nvpair_wm import codec
from nvpair_wm.conformance.grammar import is_json_text as model_is_json_text
from nvpair_wm.dedup import WorkloadTable
from nvpair_wm.dispatch import Dispatcher
from tests.support.bundle import bundle
from tests.support.conformance import BASE, MAX_DEPTH, REGISTRY, NotIJson, strict_loads
from tests.support.frames import status_result

FRAME_REFS: Final = [
    *(
        f"{BASE}workload-events.schema.json#/$defs/{name}"
        for name in (
            "WorkloadSubmitted",
            "WorkloadStarted",
            "WorkloadCompleted",
            "WorkloadErrored",
            "WorkloadCancelled",
        )
    ),
    f"{BASE}workloads-remove.schema.json",
    f"{BASE}nodes-update.schema.json",
    f"{BASE}manager-status.schema.json",
]
REFERENCE: Final = Draft202012Validator(
    {"$ref": f"{BASE}inbound-frame.schema.json"}, registry=REGISTRY
)
FRAMES: Final = st.one_of([from_schema(bundle(ref), codec="utf-8") for ref in FRAME_REFS])

EXAMPLES: Final = 60
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# A real dispatcher and table: every mutated text also goes through both channels' entry points.
DISPATCHER: Final = Dispatcher(WorkloadTable(), status_result)
BROKER_ONLY: Final = frozenset({"nodes:update", "manager:status"})  # peers get -32601 for these

HOLE: Final = "@@HOLE@@"
HOLE_TEXT: Final = b'"@@HOLE@@"'
UNKNOWN: Final = "x-fuzz"

# -- the reference --------------------------------------------------------------------------------


def reference(text: bytes) -> tuple[str, Any]:
    """("unparseable", why) | ("invalid", value) | ("valid", value)."""
    try:
        value = strict_loads(text.decode("utf-8"))  # strict UTF-8: encoded surrogates refused
    except UnicodeDecodeError as exc:
        return "unparseable", f"not UTF-8: {exc}"
    except NotIJson as exc:
        return "unparseable", str(exc)
    return ("valid" if REFERENCE.is_valid(value) else "invalid"), value


def _same(kept: Any, read: Any, where: str) -> None:
    """Every member the codec kept has the value the reference read (unknown ones are dropped,
    a schema default may be filled in: those are not compared)."""
    if isinstance(kept, dict):
        assert isinstance(read, dict), where
        for name, value in kept.items():
            if name in read:
                _same(value, read[name], f"{where}.{name}")
    elif isinstance(kept, list):
        assert isinstance(read, list) and len(kept) == len(read), where
        for i, (a, b) in enumerate(zip(kept, read, strict=True)):
            _same(a, b, f"{where}[{i}]")
    else:
        assert type(kept) is bool or kept is None or type(read) is not bool, where
        assert kept == read, f"{where}: codec {kept!r}, reference {read!r}"


def _judged_as(verdict: str, item: object, detail: str) -> None:
    """The codec's item says what the reference said: -32700 for unparseable text, another
    error for an invalid frame, a frame for a valid one."""
    if verdict == "unparseable":
        assert isinstance(item, codec.RpcError), "the codec accepted unparseable text" + detail
        assert item.code == codec.PARSE_ERROR, "not a parse error" + detail
    elif verdict == "invalid":
        assert isinstance(item, codec.RpcError), "the codec accepted an invalid frame" + detail
        assert item.code != codec.PARSE_ERROR, "valid JSON called unparseable" + detail
    else:
        assert not isinstance(item, codec.RpcError), "the codec refused a valid frame" + detail


def agree(text: bytes) -> None:
    verdict, value = reference(text)
    try:
        decoded = codec.decode(text)
    except Exception as exc:  # anything escaping is a finding: report it with its text
        raise AssertionError(f"codec.decode raised {exc!r} on {text[:300]!r}") from None
    if text.lstrip()[:1] == b"[":
        return  # a mutation turned the text into a batch: not what this test compares
    assert not decoded.batch and len(decoded.items) == 1, decoded
    [item] = decoded.items
    detail = f"\n  reference: {verdict} ({str(value)[:300]})\n  codec: {item!r}"[:1200]
    detail += f"\n  text: {text[:400]!r}"
    _judged_as(verdict, item, detail)
    if verdict == "valid":
        assert not isinstance(item, codec.RpcError)
        assert item.__struct_config__.tag == value["method"], detail
        _same(msgspec.to_builtins(item), value, "$")
    # Both channels take it without raising: a peer gets 200, 202 or 400, never a 500.
    result = DISPATCHER.peer(text)
    assert result.status in (200, 202, 400), detail
    assert (result.status == 400) == (verdict != "valid" or value["method"] in BROKER_ONLY), detail
    DISPATCHER.local(text)


# -- placing a mutation ---------------------------------------------------------------------------


def _objects(frame: dict[str, Any]) -> list[dict[str, Any]]:
    found, stack = [], [frame]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _text(frame: dict[str, Any], raw: bytes, separators: tuple[str, str] = (",", ":")) -> bytes:
    text = json.dumps(frame, separators=separators).encode()
    assert text.count(HOLE_TEXT) == 1, text
    return text.replace(HOLE_TEXT, raw)


@st.composite
def placed(
    draw: st.DrawFn, frame: dict[str, Any], raws: st.SearchStrategy[bytes], *, as_name: bool = False
) -> bytes:
    """``frame`` with a drawn ``raw`` as the value of a known member, of an unknown member, or
    (for strings, ``as_name``) as a member name."""
    raw = draw(raws)
    target = draw(st.sampled_from(_objects(frame)))
    where = draw(st.sampled_from(["unknown", "known", "name"] if as_name else ["unknown", "known"]))
    if where == "known" and target:
        target[draw(st.sampled_from(sorted(target)))] = HOLE
    elif where == "name":
        target[HOLE] = 0
    else:
        target[UNKNOWN] = HOLE
    return _text(frame, raw)


def _nested(levels: int, kind: str) -> bytes:
    if kind == "array":
        return b"[" * levels + b"]" * levels
    return b'{"a":' * (levels - 1) + b"{}" + b"}" * (levels - 1)


DEPTHS = st.builds(
    _nested,
    st.one_of(st.integers(MAX_DEPTH - 6, MAX_DEPTH + 2), st.sampled_from([200, 1000, 3000])),
    st.sampled_from(["array", "object"]),
)
NUMBERS = st.sampled_from(
    [
        b"1.0",
        b"1e0",
        b"10e-1",
        b"-0",
        b"-0.0",
        b"1E+3",
        b"0.5",
        b"15e-1",
        b"1e400",
        b"-1e400",
        b"1e-400",
        b"1" + b"0" * 400,
        b"9" * 300,
        b"9007199254740991",
        b"9007199254740992",
        b"9007199254740991.0",
        b"1e20",
        b"01",
        b"+1",
        b".5",
        b"1.",
        b"NaN",
        b"Infinity",
        b"0x10",
    ]
)
ESCAPES = st.sampled_from(
    [
        b"\\ud800",
        b"\\udc00",
        b"\\uDBFF",
        b"\\udc00\\ud800",
        b"\\ud800\\u0041",
        b"\\ud83d\\ude00",
        b"\\\\ud800",
        b"\\u0000",
        b"\\u0022",
        b"\\/",
        b"\\x41",
    ]
)
SURROGATE_STRINGS = st.builds(
    lambda a, e, b: b'"' + a + e + b + b'"',
    st.sampled_from([b"", b"a"]),
    ESCAPES,
    st.sampled_from([b"", b"z"]),
)
BAD_UTF8 = st.sampled_from(
    [b"\x80", b"\xff", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xc3"]
)
UTF8_STRINGS = st.builds(lambda bad: b'"a' + bad + b'b"', BAD_UTF8)


@st.composite
def repeated_names(draw: st.DrawFn, frame: dict[str, Any]) -> bytes:
    """A member of some object written twice, the other value before or after the original."""
    target = draw(st.sampled_from([o for o in _objects(frame) if o] or [frame]))
    name = draw(st.sampled_from(sorted(target)))
    other = draw(
        st.sampled_from(
            [target[name], None, 0, 1, -1, "x", [], {}, "workload:started", "workloads:remove"]
        )
    )
    rest = {k: v for k, v in target.items() if k != name}
    original = target[name]
    target.clear()
    if draw(st.booleans()):  # the other value first, the original last
        target.update({HOLE: other, name: original, **rest})
    else:
        target.update({name: original, **rest, HOLE: other})
    text = json.dumps(frame, separators=(",", ":")).encode()
    return text.replace(HOLE_TEXT, json.dumps(name).encode())


WHITESPACE = st.sampled_from(
    [b"", b" ", b"\t", b"\r", b"\n", b"  \r\n\t", b"\x0b", b"\x0c", b"\xc2\xa0", b"\x00"]
)


@st.composite
def spaced(draw: st.DrawFn, frame: dict[str, Any]) -> bytes:
    """Whitespace (RFC 8259's four characters, and others it does not allow) around tokens."""
    around = draw(WHITESPACE).decode("utf-8")
    inner = draw(WHITESPACE).decode("utf-8")
    text = json.dumps(frame, separators=(inner + "," + inner, inner + ":" + inner)).encode()
    return around.encode() + text + draw(WHITESPACE)


@st.composite
def with_bom(draw: st.DrawFn, frame: dict[str, Any]) -> bytes:
    text = json.dumps(frame, separators=(",", ":")).encode()
    where = draw(st.sampled_from(["start", "after space", "in a string"]))
    if where == "start":
        return b"\xef\xbb\xbf" + text
    if where == "after space":
        return b" \xef\xbb\xbf" + text
    frame[UNKNOWN] = HOLE
    return _text(frame, b'"\xef\xbb\xbf"')  # U+FEFF inside a string is just a character


MUTATIONS: Final[dict[str, Callable[[dict[str, Any]], st.SearchStrategy[bytes]]]] = {
    "as drawn": lambda frame: st.just(json.dumps(frame).encode()),
    "depth": lambda frame: placed(frame, DEPTHS),
    "number spellings": lambda frame: placed(frame, NUMBERS),
    "surrogate escapes": lambda frame: placed(frame, SURROGATE_STRINGS, as_name=True),
    "invalid UTF-8": lambda frame: placed(frame, UTF8_STRINGS, as_name=True),
    "repeated names": repeated_names,
    "byte order mark": with_bom,
    "whitespace": spaced,
}


# A batch [good, mutated, good], whole or broken: only text that is not JSON is one -32700.
BATCHES: Final[dict[str, Callable[[bytes, bytes], bytes]]] = {
    "whole": lambda good, text: b"[" + good + b"," + text + b"," + good + b"]",
    "a missing comma": lambda good, text: b"[" + good + b"," + text + b" " + good + b"]",
    "a byte after the array": lambda good, text: b"[" + good + b"," + text + b"]x",
    "a trailing comma": lambda good, text: b"[" + good + b"," + text + b",]",
    "a bare word before": lambda good, text: b"[" + good[:-1] + b",oops}," + text + b"]",
}


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON text")


def is_json_text(payload: bytes) -> bool:
    """RFC 8259's grammar alone (I-JSON and depth are each element's): Python's json, which
    takes lone surrogates, big numbers and (as surrogates) invalid UTF-8 in strings; past its
    own depth bound the model's grammar, which shares no code with the codec's."""
    text = payload.decode("utf-8", "surrogateescape")
    try:
        json.loads(text, parse_constant=_no_constant)
    except ValueError:
        return False
    except RecursionError:
        return model_is_json_text(text)
    return True


def agree_in_a_batch(good: bytes, text: bytes, broken: str) -> None:
    """The mutated frame as a batch element: its own verdict if the batch is JSON text (the
    others accepted), else one -32700 for the whole line."""
    payload = BATCHES[broken](good, text)
    decoded = codec.decode(payload)
    detail = f"\n  batch ({broken}): {payload[:400]!r}\n  codec: {decoded!r}"[:1200]
    if not is_json_text(payload):
        assert not decoded.batch and len(decoded.items) == 1, "split text that is not JSON" + detail
        [item] = decoded.items
        assert isinstance(item, codec.RpcError) and item.code == codec.PARSE_ERROR, detail
        return
    assert decoded.batch and len(decoded.items) == 3, detail
    first, element = decoded.items[:2]
    assert not isinstance(first, codec.RpcError), detail
    verdict, _ = reference(text)
    _judged_as(verdict, element, detail)


@FUZZ
@given(frame=FRAMES, data=st.data())
def test_codec_agrees_with_the_reference(frame: dict[str, Any], data: st.DataObject) -> None:
    """Each drawn frame goes through every mutation class (drawing frames is the slow part),
    alone and as an element of a batch, whole or broken."""
    good = json.dumps(frame, separators=(",", ":")).encode()
    for name, mutate in MUTATIONS.items():
        text = data.draw(mutate(copy.deepcopy(frame)), label=name)
        agree(text)
        if text.lstrip()[:1] != b"[":
            agree_in_a_batch(good, text, data.draw(st.sampled_from(sorted(BATCHES))))


def test_the_reference_and_the_codec_share_the_bound() -> None:
    assert codec.MAX_DEPTH == MAX_DEPTH
