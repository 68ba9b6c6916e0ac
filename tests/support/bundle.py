"""One schema with every ``$ref`` inlined, for tools without a registry."""

from __future__ import annotations

import json
from typing import Any

from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.support.source_tree import ROOT

SCHEMA_DIR = ROOT / "schema"
SCHEMAS = {
    p.name: json.loads(p.read_text("utf-8")) for p in sorted(SCHEMA_DIR.glob("*.schema.json"))
}
REGISTRY: Registry = Registry().with_resources(
    (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012))
    for s in SCHEMAS.values()
)


# Keywords that carry no constraint (or that hypothesis-jsonschema would not understand, like the
# OpenAPI-style ``discriminator``, an annotation in 2020-12): dropped from bundled schemas.
ANNOTATIONS = {
    "$schema",
    "$id",
    "$defs",
    "$comment",
    "title",
    "description",
    "examples",
    "discriminator",
}


def _inline(schema: Any, resolver: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        resolved = resolver.lookup(schema["$ref"])
        target = _inline(resolved.contents, resolved.resolver)
        rest = {k: v for k, v in schema.items() if k != "$ref" and k not in ANNOTATIONS}
        return {"allOf": [target, _inline(rest, resolver)]} if rest else target
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ANNOTATIONS:
            continue
        if key == "properties":
            out[key] = {name: _inline(sub, resolver) for name, sub in value.items()}
        elif key in ("items", "not"):
            out[key] = _inline(value, resolver)
        elif key in ("anyOf", "oneOf", "allOf"):
            out[key] = [_inline(sub, resolver) for sub in value]
        else:
            out[key] = value
    return out


def bundle(ref: str) -> dict[str, Any]:
    """A self-contained schema for ``ref``: every $ref inlined (the contract has no cycles)."""
    bundled = _inline({"$ref": ref}, REGISTRY.resolver())
    assert "$ref" not in json.dumps(bundled)
    return bundled  # type: ignore[no-any-return]
