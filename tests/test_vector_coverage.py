"""Every constraint of every schema is pinned down by some vector in schema/conformance/.

The test mutates the schemas one constraint at a time: it drops a keyword (a type, a bound, a
pattern, a ``$ref``, an ``additionalProperties: false``), drops one ``required`` member, one enum
value or one ``oneOf``/``anyOf`` branch, shifts a bound by one either way, or changes a
``const``. For each mutant it re-runs the vectors that can reach the mutated file (jsonschema,
Draft 2020-12) and stops at the first whose verdict changes. A mutant no vector notices is a gap:
the vectors would accept a schema that says something else. ``EQUIVALENT`` lists the mutants no
instance can tell apart from the original, with why; the test checks they are still unnoticed,
so the list cannot go stale. Adds about 10 s.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.support.conformance import NotIJson, strict_loads

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "schema"
VECTOR_DIR = SCHEMA_DIR / "conformance"
BASE = "https://schemas.nvpair.dev/wm/v1/"

BOUNDS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
)
DROPPED = ("type", "pattern", "$ref", "items", "additionalProperties", "unevaluatedProperties")
# Keywords whose value is a schema (or a map / list of schemas) to walk into.
SUBSCHEMA = ("items", "additionalProperties", "unevaluatedProperties", "not")
SUBSCHEMA_MAPS = ("properties", "$defs", "patternProperties")
SUBSCHEMA_LISTS = ("oneOf", "anyOf", "allOf", "prefixItems")

# (file, JSON pointer of the node, mutation) -> why no instance can notice it.
EQUIVALENT: dict[tuple[str, str, str], str] = {
    ("inbound-frame.schema.json", "", "drop type"): (
        "every branch of the oneOf is an object schema; the root type is for tools"
    ),
    ("broker-frame.schema.json", "", "drop type"): "as for inbound-frame",
    ("peer-frame.schema.json", "", "drop type"): "as for inbound-frame",
    ("jsonrpc.schema.json", "/$defs/ErrorCode", "drop type"): (
        "every oneOf branch is an integer const; the type is for generators"
    ),
    ("jsonrpc.schema.json", "/$defs/EventOutcome", "drop type"): "every enum value is a string",
    ("workload-info.schema.json", "/$defs/WorkloadState", "drop type"): "as for EventOutcome",
    (
        "manager-status.schema.json",
        "/$defs/PeerStatus/properties/protocol/anyOf/0",
        "drop type",
    ): "as for EventOutcome",
    ("node-record.schema.json", "/$defs/Fingerprint", "drop minLength"): (
        "the pattern already needs 64 characters; minLength repeats it for generators and readers"
    ),
    ("node-record.schema.json", "/$defs/Fingerprint", "minLength -1"): "as for drop minLength",
}


@dataclass(frozen=True)
class Mutant:
    file: str
    pointer: str
    what: str
    schemas: dict[str, Any]

    @property
    def key(self) -> tuple[str, str, str]:
        return self.file, self.pointer, self.what


def load_schemas() -> dict[str, Any]:
    return {f.name: json.loads(f.read_text()) for f in sorted(SCHEMA_DIR.glob("*.schema.json"))}


def node_mutations(node: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(description, mutated copy of ``node``) for every constraint of this one node."""

    def without(key: str) -> dict[str, Any]:
        return {k: v for k, v in node.items() if k != key}

    for kw in DROPPED:
        if kw in node and (kw not in SUBSCHEMA or node[kw] is not True):
            yield f"drop {kw}", without(kw)
    for kw in BOUNDS:
        if kw in node:
            yield f"drop {kw}", without(kw)
            for by in (-1, 1):
                value = node[kw] + by
                if value >= 0 or kw in ("minimum", "maximum"):
                    yield f"{kw} {by:+d}", {**node, kw: value}
    if "const" in node:
        c = node["const"]
        changed = c + "~" if isinstance(c, str) else (not c) if isinstance(c, bool) else c + 1
        yield "drop const", without("const")
        yield "change const", {**node, "const": changed}
    if "enum" in node:
        yield "drop enum", without("enum")
        for v in node["enum"]:
            yield f"enum without {v!r}", {**node, "enum": [e for e in node["enum"] if e != v]}
    for member in node.get("required", []):
        yield (
            f"not required {member}",
            {**node, "required": [r for r in node["required"] if r != member]},
        )
    for kw in ("oneOf", "anyOf"):
        branches = node.get(kw, [])
        if len(branches) > 1:
            for i in range(len(branches)):
                yield f"{kw} without #{i}", {**node, kw: branches[:i] + branches[i + 1 :]}


def walk(node: Any, pointer: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(node, dict):
        return
    yield pointer, node
    for kw in SUBSCHEMA:
        if isinstance(node.get(kw), dict):
            yield from walk(node[kw], f"{pointer}/{kw}")
    for kw in SUBSCHEMA_MAPS:
        for name, sub in node.get(kw, {}).items():
            yield from walk(sub, f"{pointer}/{kw}/{name}")
    for kw in SUBSCHEMA_LISTS:
        for i, sub in enumerate(node.get(kw, [])):
            yield from walk(sub, f"{pointer}/{kw}/{i}")


def replace_at(doc: Any, pointer: str, value: Any) -> Any:
    out = copy.deepcopy(doc)
    if not pointer:
        return value
    parts = pointer.split("/")[1:]
    node = out
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


def mutants(schemas: dict[str, Any]) -> Iterator[Mutant]:
    for file, doc in schemas.items():
        for pointer, node in walk(doc, ""):
            for what, mutated in node_mutations(node):
                yield Mutant(
                    file, pointer, what, {**schemas, file: replace_at(doc, pointer, mutated)}
                )


@dataclass(frozen=True)
class Vector:
    ref: str
    instance: Any
    name: str


def load_vectors() -> list[Vector]:
    out = []
    for path in sorted(VECTOR_DIR.glob("*.json")):
        for group in json.loads(path.read_text()):
            for test in group["tests"]:
                if "json" in test:
                    try:
                        instance = strict_loads(test["json"])
                    except NotIJson:
                        continue  # invalid whatever the schema says: it cannot notice anything
                else:
                    instance = test["data"]
                name = f"{path.stem}: {group['description']}: {test['description']}"
                out.append(Vector(group["schema"]["$ref"], instance, name))
    return out


def references(schemas: dict[str, Any]) -> dict[str, set[str]]:
    """file -> the files it reaches through $ref (itself included)."""

    def refs(node: Any) -> set[str]:
        if isinstance(node, dict):
            own = {node["$ref"].partition("#")[0]} if isinstance(node.get("$ref"), str) else set()
            return own.union(*(refs(v) for v in node.values()))
        if isinstance(node, list):
            return set().union(*(refs(v) for v in node))
        return set()

    direct = {f: {r for r in refs(d) if r} | {f} for f, d in schemas.items()}
    reach = {f: set(d) for f, d in direct.items()}
    changed = True
    while changed:
        changed = False
        for files in reach.values():
            more = set().union(*(reach[g] for g in files if g in reach))
            if not more <= files:
                files.update(more)
                changed = True
    return reach


class Verdicts:
    """jsonschema's verdicts on the vectors under one set of schemas."""

    def __init__(self, schemas: dict[str, Any]) -> None:
        self.registry: Registry = Registry().with_resources(
            (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012))
            for s in schemas.values()
        )
        self.validators: dict[str, jsonschema.Draft202012Validator] = {}

    def valid(self, v: Vector) -> bool:
        validator = self.validators.get(v.ref)
        if validator is None:
            validator = jsonschema.Draft202012Validator({"$ref": v.ref}, registry=self.registry)
            self.validators[v.ref] = validator
        return bool(validator.is_valid(v.instance))


def file_of(ref: str) -> str:
    return ref.partition("#")[0].removeprefix(BASE)


def unnoticed_mutants() -> tuple[list[Mutant], int]:
    schemas = load_schemas()
    vectors = load_vectors()
    original = Verdicts(schemas)
    expected = [original.valid(v) for v in vectors]
    reach = references(schemas)
    pairs = list(zip(vectors, expected, strict=True))
    missed: list[Mutant] = []
    count = 0
    for m in mutants(schemas):
        count += 1
        verdicts = Verdicts(m.schemas)
        # The mutated file's own vectors first: they notice most mutants at once.
        own = [(v, e) for v, e in pairs if file_of(v.ref) == m.file]
        others = [
            (v, e) for v, e in pairs if file_of(v.ref) != m.file and m.file in reach[file_of(v.ref)]
        ]
        if not any(verdicts.valid(v) != e for v, e in own + others):
            missed.append(m)
    return missed, count


def test_every_constraint_is_noticed_by_some_vector() -> None:
    missed, count = unnoticed_mutants()
    assert count > 400, f"only {count} mutants: is the walk broken?"
    gaps = [m for m in missed if m.key not in EQUIVALENT]
    still_equivalent = {m.key for m in missed}
    stale = [k for k in EQUIVALENT if k not in still_equivalent]
    report = "\n".join(f"  {m.file}#{m.pointer}: {m.what}" for m in gaps)
    assert gaps == [], f"{len(gaps)} of {count} mutants go unnoticed by every vector:\n{report}"
    assert stale == [], f"EQUIVALENT entries that some vector now notices: {stale}"
