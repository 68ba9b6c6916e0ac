"""Whether bytes are JSON text by RFC 8259's grammar, at any depth, without recursion (sans-IO).

The codec's parser (msgspec) recurses, so past its own bound (about 1,000 levels) it cannot say
whether text is JSON. :func:`is_json_text` can, in one linear pass: the tokens are found by
regular expressions (in C), and a pushdown automaton (:data:`_MOVES`, a transition table) reads
one byte per token. It checks the grammar only. Inside strings that means escapes and no raw
control characters; the I-JSON rules (UTF-8, lone surrogates, numbers a double holds) and the
nesting bound are each frame's own faults, which the codec judges frame by frame (in a batch they
refuse only their element: ``codec.decode``).
"""

from __future__ import annotations

import re
from enum import IntEnum
from typing import Final

__all__ = ["is_json_text"]

# A string as RFC 8259 spells it (group 1), else the extent a lexer gives it: up to the first
# unescaped quote, or to the end. Every quote thus starts a match that ends where the string
# does, so no match is retried inside a string: linear, also on a string never closed.
_STRING: Final = re.compile(
    rb'("(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9A-Fa-f]{4})*")|"(?:[^"\\]|\\.)*"?', re.DOTALL
)
_SCALAR: Final = re.compile(
    rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null"
)
_WHITESPACE: Final = b" \t\n\r"
_BAD_STRING: Final = b"!"  # no token: the automaton refuses it


def _string_token(m: re.Match[bytes]) -> bytes:
    return b'"' if m.group(1) is not None else _BAD_STRING


def _tokens(text: bytes) -> bytes:
    """One byte per token: ``"`` a string, ``0`` any other scalar, the six structural characters
    as they are; whitespace dropped. A byte that starts no token stays, and fails the grammar
    (so do two scalars that touch: ``01`` is ``00``)."""
    return _SCALAR.sub(b"0", _STRING.sub(_string_token, text)).translate(None, _WHITESPACE)


class _Want(IntEnum):
    """What may come next."""

    VALUE = 0  # a value: at the start, after ':' and after an array's ','
    VALUE_OR_CLOSE = 1  # a value or ']': after '['
    NAME = 2  # a member name: after an object's ','
    NAME_OR_CLOSE = 3  # a member name or '}': after '{'
    COLON = 4  # after a member name
    MORE = 5  # after a value: ',' or the innermost container's end, or the end of the text


_TOP, _ARRAY, _OBJECT = b" [{"  # the innermost container, as the stack holds it
# (what may come next, innermost container, token) -> what may come next after it.
_MOVES: Final = {
    **{
        (want, inside, token): after
        for want in (_Want.VALUE, _Want.VALUE_OR_CLOSE)
        for inside in (_TOP, _ARRAY, _OBJECT)
        for token, after in (
            (ord('"'), _Want.MORE),
            (ord("0"), _Want.MORE),
            (_ARRAY, _Want.VALUE_OR_CLOSE),
            (_OBJECT, _Want.NAME_OR_CLOSE),
        )
    },
    (_Want.VALUE_OR_CLOSE, _ARRAY, ord("]")): _Want.MORE,
    (_Want.NAME, _OBJECT, ord('"')): _Want.COLON,
    (_Want.NAME_OR_CLOSE, _OBJECT, ord('"')): _Want.COLON,
    (_Want.NAME_OR_CLOSE, _OBJECT, ord("}")): _Want.MORE,
    (_Want.COLON, _OBJECT, ord(":")): _Want.VALUE,
    (_Want.MORE, _ARRAY, ord(",")): _Want.VALUE,
    (_Want.MORE, _OBJECT, ord(",")): _Want.NAME,
    (_Want.MORE, _ARRAY, ord("]")): _Want.MORE,
    (_Want.MORE, _OBJECT, ord("}")): _Want.MORE,
}
_OPENS: Final = frozenset(b"[{")
_CLOSES: Final = frozenset(b"]}")


def is_json_text(text: bytes) -> bool:
    """Whether ``text`` is one JSON value by RFC 8259's grammar, whitespace around it allowed.

    Not the hot path: the codec asks only about text its parser refused, in a batch. The cost is
    linear, about a quarter of a second per MiB of brackets."""
    stack = bytearray([_TOP])
    want = _Want.VALUE
    moves = _MOVES
    for token in _tokens(text):
        after = moves.get((want, stack[-1], token))
        if after is None:
            return False
        want = after
        if token in _OPENS:
            stack.append(token)
        elif token in _CLOSES:
            del stack[-1]  # the table let it close only the container it matches
    return want is _Want.MORE and len(stack) == 1
