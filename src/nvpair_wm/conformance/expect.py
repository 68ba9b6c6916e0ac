"""Matching what an implementation wrote against a vector's expectation (pure functions).

A matcher is a JSON object; every key it has must hold:

- ``exact``: the value equals this JSON value (object member order is free; numbers compare
  by value, so ``1`` equals ``1.0``; ``true`` never equals ``1``);
- ``equal``: ``{pointer: value}``, each RFC 6901 JSON Pointer resolves to an equal value;
- ``present`` / ``absent``: pointers that must / must not resolve;
- ``types``: ``{pointer: type}`` with JSON types ``object``, ``array``, ``string``,
  ``integer``, ``number``, ``boolean``, ``null``;
- ``recent``: pointers to integers that are epoch-millisecond times of the last
  ``RECENT_S`` seconds by the kit's clock (a timestamp taken while the group ran; the only
  matcher that reads the clock);
- ``items``: the value is an array of exactly this many elements, matched one-to-one by these
  matchers in any order (JSON-RPC lets a batch's responses come in any order);
- ``elements``: the value is an array of exactly this many elements, the i-th matching the i-th
  matcher (this contract fixes a batch's responses in element order).

Each function returns a list of mismatch descriptions; empty means a match.

:func:`contract_header` checks the ``nvpair-contract-version`` header that every inter-node
request and response carries (contract 1.2.0 on): ``MAJOR.MINOR.PATCH`` of the kit's major.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Final

from nvpair_wm_schema.contract import CONTRACT_VERSION

_MISSING: Final = object()
CONTRACT_HEADER: Final = "nvpair-contract-version"
_SEMVER: Final = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+][0-9A-Za-z.+-]+)?"
)
_MAJOR: Final = CONTRACT_VERSION.split(".")[0]
RECENT_S: Final = 600.0  # "recent": at most this long before the check...
AHEAD_S: Final = 5.0  # ... and at most this far ahead of the kit's clock (clock granularity)
MAX_COUNT: Final = 2**53 - 1  # the schema's Count: an integer from 0 to this


def contract_header(value: str | None, where: str) -> list[str]:
    """Problems with the ``nvpair-contract-version`` value of one request or response."""
    if value is None:
        return [f"{where} without {CONTRACT_HEADER} (every inter-node request and response "
                f"carries it since contract 1.2.0)"]  # fmt: skip
    match = _SEMVER.fullmatch(value.strip())
    if match is None:
        return [f"{where}: {CONTRACT_HEADER} {value[:64]!r} is not MAJOR.MINOR.PATCH"]
    if match.group(1) != _MAJOR:
        return [f"{where}: {CONTRACT_HEADER} {value} is not of major {_MAJOR} ({CONTRACT_VERSION})"]
    return []


def json_equal(a: Any, b: Any) -> bool:
    """Equality in JSON's data model: booleans are not numbers, ``1 == 1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def resolve(value: Any, pointer: str) -> Any:
    """RFC 6901; returns ``_MISSING`` when the pointer does not resolve."""
    if pointer == "":
        return value
    if not pointer.startswith("/"):
        raise ValueError(f"not a JSON Pointer: {pointer!r}")
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict):
            if token not in value:
                return _MISSING
            value = value[token]
        elif isinstance(value, list):
            if not token.isdigit() or int(token) >= len(value):
                return _MISSING
            value = value[int(token)]
        else:
            return _MISSING
    return value


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) and value.startswith("<") else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def match(value: Any, matcher: dict[str, Any]) -> list[str]:
    """Mismatches of one value against one matcher."""
    problems: list[str] = []
    if "exact" in matcher and not json_equal(value, matcher["exact"]):
        problems.append(f"expected {_short(matcher['exact'])}, got {_short(value)}")
    for pointer, want in matcher.get("equal", {}).items():
        got = resolve(value, pointer)
        if got is _MISSING:
            problems.append(f"{pointer} missing (expected {_short(want)}) in {_short(value)}")
        elif not json_equal(got, want):
            problems.append(f"{pointer} is {_short(got)}, expected {_short(want)}")
    for pointer in matcher.get("present", []):
        if resolve(value, pointer) is _MISSING:
            problems.append(f"{pointer} missing in {_short(value)}")
    for pointer in matcher.get("absent", []):
        if resolve(value, pointer) is not _MISSING:
            problems.append(f"{pointer} must be absent in {_short(value)}")
    for pointer, want in matcher.get("types", {}).items():
        got = resolve(value, pointer)
        kind = "absent" if got is _MISSING else json_type(got)
        if kind != want and not (want == "number" and kind == "integer"):
            problems.append(f"{pointer} is {kind}, expected {want}")
    for pointer in matcher.get("recent", []):
        problems += _recent(resolve(value, pointer), pointer)
    for pointer in matcher.get("counts", []):
        got = resolve(value, pointer)
        if got is _MISSING:
            problems.append(f"{pointer} is absent, expected a Count (an integer 0 to 2^53-1)")
        elif json_type(got) != "integer" or not 0 <= got <= MAX_COUNT:
            problems.append(f"{pointer} is {_short(got)}, not a Count (an integer 0 to 2^53-1)")
    if "items" in matcher:
        problems += _match_unordered(value, matcher["items"])
    if "elements" in matcher:
        want = matcher["elements"]
        if not isinstance(value, list) or len(value) != len(want):
            problems.append(f"expected an array of {len(want)} elements, got {_short(value)}")
        else:
            for i, (v, m) in enumerate(zip(value, want, strict=True)):
                problems += [f"[{i}]: {p}" for p in match(v, m)]
    return problems


def _recent(got: Any, pointer: str) -> list[str]:
    """Whether ``got`` is an epoch-millisecond time of the last ``RECENT_S`` seconds."""
    if got is _MISSING or json_type(got) != "integer":
        kind = "absent" if got is _MISSING else json_type(got)
        return [f"{pointer} is {kind}, expected an epoch-millisecond integer"]
    now = time.time() * 1000
    if not now - RECENT_S * 1000 <= got <= now + AHEAD_S * 1000:
        return [f"{pointer} is {_short(got)}, not a time of the last {RECENT_S:g} s in epoch ms"]
    return []


def canonical(value: Any) -> str:
    """A text equal for two values exactly when :func:`json_equal` says they are equal."""

    def norm(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            return [norm(x) for x in v]
        return v

    return json.dumps(norm(value), sort_keys=True, ensure_ascii=False)


def exact_only(matchers: list[dict[str, Any]]) -> bool:
    return all(set(m) == {"exact"} for m in matchers)


def _match_unordered(value: Any, matchers: list[dict[str, Any]]) -> list[str]:
    if not isinstance(value, list):
        return [f"expected an array of {len(matchers)}, got {_short(value)}"]
    if len(value) != len(matchers):
        return [f"expected an array of {len(matchers)} elements, got {len(value)}: {_short(value)}"]
    if exact_only(matchers):  # many frames (a snapshot): multisets of canonical texts, O(n)
        want = sorted(canonical(m["exact"]) for m in matchers)
        got = sorted(canonical(v) for v in value)
        if want == got:
            return []
        missing = sorted(set(want) - set(got)) or want
        return [f'no element matches {{"exact": {missing[0][:150]}}}']
    fits = [[not match(v, m) for v in value] for m in matchers]
    taken: dict[int, int] = {}  # value index -> matcher index

    def assign(m: int, seen: set[int]) -> bool:  # augmenting path (bipartite matching)
        for v, ok in enumerate(fits[m]):
            if ok and v not in seen:
                seen.add(v)
                if v not in taken or assign(taken[v], seen):
                    taken[v] = m
                    return True
        return False

    unmatched = [m for m in range(len(matchers)) if not assign(m, set())]
    if not unmatched:
        return []
    first = unmatched[0]
    detail = "; ".join(match(value[0], matchers[first])[:2]) if len(value) == 1 else ""
    return [f"no element matches {_short(matchers[first])}" + (f" ({detail})" if detail else "")]


def match_lines(lines: list[Any], matchers: list[dict[str, Any]]) -> list[str]:
    """The lines written, in order, against the expected lines."""
    problems: list[str] = []
    for i, (line, m) in enumerate(zip(lines, matchers, strict=False)):
        problems += [f"line {i + 1}: {p}" for p in match(line, m)]
    if len(lines) != len(matchers):
        what = "no response" if not matchers else f"{len(matchers)} line(s)"
        extra = f": {_short(lines[len(matchers)])}" if len(lines) > len(matchers) else ""
        problems.append(f"expected {what}, got {len(lines)}{extra}")
    return problems
