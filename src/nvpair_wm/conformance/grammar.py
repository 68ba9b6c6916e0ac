"""RFC 8259's grammar, read without recursion: the model's parser needs it past Python's own
depth bound (about 1,000 levels), where ``json`` raises RecursionError instead of an answer.

Short rather than fast (the model reads vectors, not hostile megabytes): the daemon's own check,
independent of this one, is ``nvpair_wm.jsontext``.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["is_json_text"]

# A string as RFC 8259 spells it (group 1), else a bare quote: a string that is not one.
_STRING_OR_QUOTE: Final = re.compile(r'("(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9A-Fa-f]{4})*")|"')
_SCALAR: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_INNERMOST: Final = re.compile(r'\[(?:[0"](?:,[0"])*)?\]|\{(?:":[0"](?:,":[0"])*)?\}')


def is_json_text(text: str) -> bool:
    """Whether ``text`` is one JSON value, whitespace around it allowed. A string becomes ``"``
    (a broken one ``!``, which no rule takes), another scalar ``0``; then the innermost arrays
    and objects fold into ``0`` until one value is left, or nothing folds."""
    strings = _STRING_OR_QUOTE.sub(lambda m: '"' if m[1] else "!", text)
    folded = re.sub(r"[ \t\n\r]+", "", _SCALAR.sub("0", strings))
    while (inner := _INNERMOST.sub("0", folded)) != folded:
        folded = inner
    return folded in ('"', "0")
