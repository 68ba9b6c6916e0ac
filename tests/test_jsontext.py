"""RFC 8259's grammar without recursion: the daemon's check (``nvpair_wm.jsontext``) and the
model's (``nvpair_wm.conformance.grammar``), each against Python's ``json`` (NaN refused) on
mutated frames, and at depths where ``json`` itself gives up."""

from __future__ import annotations

import json
import random

import pytest

from nvpair_wm.conformance.grammar import is_json_text as model_is_json_text
from nvpair_wm.jsontext import is_json_text

FRAME = (
    b'[{"jsonrpc":"2.0","method":"x","params":{"a":[1,2.5,-3e2,true,false,null,"s\\n\\u00e9"]},'
    b'"id":1},{"b":{}},[]]'
)
NOT_JSON = [
    b"", b" ", b"[1 2]", b"[1,]", b"[,1]", b'{"a"}', b'{"a":}', b"{1:2}", b"[1]]", b"[[1]",
    b"[1}", b'{"a":1]', b"1 2", b'["a":1]', b'{"a":1,}', b"[01]", b"[-]", b"[1.]", b"[tru]",
    b'["\x01"]', b'["\\x"]', b"[\xff]", b"[NaN]", b"[-Infinity]", b'{"a",1}', b"]", b'[1]"a',
    b'["]', b'"abc\\', b'["\\u12"]', b"[+1]", b"[.5]", b"[1e]", b"\xef\xbb\xbf[1]", b"[\x0b1]",
    b"{}}", b'[!"a"]', b"[s]", b"[" * 3000 + b"1 2" + b"]" * 3000,
]  # fmt: skip
JSON = [
    b"[]", b"{}", b"1", b'"a"', b"-0.5e+3", b"null", b' [ 1 , { "a" : [ ] } , "x" ] ',
    b'["\xff\\ud800"]', b'{"\\udc00":1e400}', b'["\\"\\\\\\/\\b\\f\\n\\r\\t"]', b'["\x7f"]',
    b"\t[1]\r\n", b"[" * 3000 + b"]" * 3000, b'{"":' * 2000 + b"0" + b"}" * 2000,
]  # fmt: skip


def _reference(text: bytes) -> bool:
    def refuse(name: str) -> None:
        raise ValueError(name)

    try:
        json.loads(text.decode("utf-8"), parse_constant=refuse)
    except (ValueError, UnicodeDecodeError):
        return False
    return True


@pytest.mark.parametrize(
    "check", [is_json_text, lambda t: model_is_json_text(t.decode("utf-8", "surrogateescape"))]
)
def test_the_grammar_at_its_edges_and_at_any_depth(check: object) -> None:
    assert callable(check)
    assert [t[:40] for t in NOT_JSON if check(t)] == []
    assert [t[:40] for t in JSON if not check(t)] == []


def test_both_agree_with_json_on_mutated_frames() -> None:
    rng = random.Random(29)
    alphabet = b' []{},:"0123456789-+.eEtrufalsn\\x'
    agreed = 0
    for _ in range(5000):
        text = bytearray(FRAME)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(text) + 1)
            op = rng.random()
            if op < 0.4 and at < len(text):
                del text[at]
            elif op < 0.7:
                text.insert(at, rng.choice(alphabet))
            elif at < len(text):
                text[at] = rng.choice(alphabet)
        expected = _reference(bytes(text))
        assert is_json_text(bytes(text)) is expected, bytes(text)
        assert model_is_json_text(text.decode("utf-8", "surrogateescape")) is expected, text
        agreed += expected
    assert agreed > 500  # the mutations leave enough JSON text for the comparison to mean much
