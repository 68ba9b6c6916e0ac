"""The contract's schemas loaded for the jsonschema side of the conformance tests, and the strict
JSON reading (I-JSON, nesting depth) a runner must do."""

from __future__ import annotations

import json
import math
from typing import Any

from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.support.source_tree import ROOT

SCHEMA_DIR = ROOT / "schema"
BASE = "https://schemas.nvpair.dev/wm/v1/"
SUFFIX = ".schema.json"


class NotIJson(ValueError):
    """The text is not an I-JSON (RFC 7493) text as this contract reads it."""


def _check_str(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise NotIJson(f"lone surrogate in string {s!r}") from exc


def _walk_strings(value: Any) -> None:
    if isinstance(value, str):
        _check_str(value)
    elif isinstance(value, list):
        for v in value:
            _walk_strings(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_str(k)
            _walk_strings(v)


def _finite_float(s: str) -> float:
    f = float(s)
    if not math.isfinite(f):
        raise NotIJson(f"{s} is not a finite IEEE 754 double")
    return f


def _no_constant(s: str) -> Any:
    raise NotIJson(f"{s} is not JSON")


# schema/README.md, "Nesting and I-JSON in every member": levels of arrays and objects.
MAX_DEPTH = 64


def _finite_int(s: str) -> int:
    n = int(s)
    try:
        float(n)
    except OverflowError:
        raise NotIJson(f"{s[:20]}... is beyond every finite IEEE 754 double") from None
    return n


def nesting_depth(value: Any) -> int:
    """Nesting of arrays and objects, iteratively (the value may be deeper than the stack)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            stack.extend(
                (v, level + 1) for v in (node.values() if isinstance(node, dict) else node)
            )
    return deepest


def strict_loads(text: str, *, duplicates: str = "last") -> Any:
    """Parse JSON text as this contract does: RFC 8259 JSON that is also I-JSON (strings,
    numbers; also integer literals), at most ``MAX_DEPTH`` levels deep.

    ``duplicates="last"``: a repeated member name keeps its last value (the contract's rule, and
    Python's, JavaScript's and Go's default); ``"error"`` refuses it (used for the vector files
    themselves, which must not depend on that rule).
    """

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for k, v in items:
            if duplicates == "error" and k in obj:
                raise NotIJson(f"duplicate member name {k!r}")
            obj[k] = v
        return obj

    try:
        value = json.loads(
            text,
            object_pairs_hook=pairs,
            parse_float=_finite_float,
            parse_int=_finite_int,
            parse_constant=_no_constant,
        )
    except json.JSONDecodeError as exc:
        raise NotIJson(str(exc)) from exc
    except RecursionError as exc:  # Python's own parser met its bound: far beyond ours
        raise NotIJson(f"nested deeper than {MAX_DEPTH} levels") from exc
    if nesting_depth(value) > MAX_DEPTH:
        raise NotIJson(f"nested deeper than {MAX_DEPTH} levels")
    _walk_strings(value)
    return value


def schema_stems() -> list[str]:
    return sorted(p.name[: -len(SUFFIX)] for p in SCHEMA_DIR.glob(f"*{SUFFIX}"))


def load_schemas() -> dict[str, dict[str, Any]]:
    return {
        stem: strict_loads((SCHEMA_DIR / f"{stem}{SUFFIX}").read_text("utf-8"), duplicates="error")
        for stem in schema_stems()
    }


SCHEMAS = load_schemas()
REGISTRY: Registry = Registry().with_resources(
    (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012))
    for s in SCHEMAS.values()
)
