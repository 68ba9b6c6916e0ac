"""Generate the TypeScript package's types and decoders from schema/, or check they are current.

Called by ``scripts/gen_types.py`` (``make gen`` / ``make check-gen``). Writes
``consumers/ts/generated/contract.js`` (one decoder per schema root and ``$defs`` entry, plain
ES modules, no build step) and ``contract.d.ts`` (their types). Nothing here needs Node: the
output is text made from the schemas, so it is deterministic and cheap to drift-check.

The decoders agree with the Python validator (``nvpair_wm.codec.validate``) on the verdict and on
the JSON path of the first violation, because they read in the same order: a tagged frame's
``method`` first, then the members in the order the text gives them, then the first missing
required member in declaration order. Declaration order is the generated Python types' own:
the tag first, then the required members, then the optional ones, each in ``properties`` order;
a decoded object is built in that order, so that its compact encoding is the Python one byte for
byte. Absent, null and a value stay three states: an absent member is not a key of the decoded
object, a null one is ``null``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schema"
TARGET = ROOT / "consumers" / "ts" / "generated"
JS = "contract.js"
DTS = "contract.d.ts"
HEADER = "// Generated from schema/ by `make gen` (scripts/gen_ts.py). Do not edit by hand."
TAG = "method"


@dataclass
class Named:
    """A schema root or ``$defs`` entry: one exported type and one decoder."""

    name: str
    file: str
    schema: dict[str, Any]


@dataclass
class Generator:
    schemas: dict[str, dict[str, Any]]
    named: dict[tuple[str, str], Named] = field(default_factory=dict)
    helpers: dict[str, str] = field(default_factory=dict)  # body -> function name

    # -- naming -----------------------------------------------------------------------------

    def collect(self) -> None:
        seen: dict[str, str] = {}
        for file, schema in self.schemas.items():
            entries = [("", schema.get("title") or file, schema)]
            for key, sub in schema.get("$defs", {}).items():
                entries.append((f"/$defs/{key}", sub.get("title") or key, sub))
            for pointer, name, sub in entries:
                if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", name):
                    sys.exit(f"{file}#{pointer}: {name!r} is not a type name")
                if name in seen:
                    sys.exit(f"{file}#{pointer}: type name {name} also names {seen[name]}")
                seen[name] = f"{file}#{pointer}"
                self.named[(file, pointer)] = Named(name, file, sub)

    def resolve(self, ref: str, here: str) -> Named:
        file, _, pointer = ref.partition("#")
        target = self.named.get((file or here, pointer))
        if target is None:
            sys.exit(f"{here}: $ref {ref} is not a schema root or a $defs entry")
        return target

    # -- what a schema is -------------------------------------------------------------------

    def kinds(self, s: dict[str, Any], here: str) -> set[str]:
        """The JSON types a schema can admit (for telling union branches apart)."""
        if "$ref" in s:
            target = self.resolve(s["$ref"], here)
            return self.kinds(target.schema, target.file)
        if "anyOf" in s:
            return set().union(*(self.kinds(b, here) for b in s["anyOf"]))
        if "oneOf" in s and "type" not in s:
            return set().union(*(self.kinds(b, here) for b in s["oneOf"]))
        if "type" in s:
            if s["type"] not in _KIND_TEST:
                sys.exit(f"{here}: type {s['type']!r} is not one this generator knows")
            return {s["type"]}
        values = s.get("enum", [s["const"]] if "const" in s else None)
        if values is not None:
            return {"string" if isinstance(v, str) else "integer" for v in values}
        return set(_KIND_TEST)

    def is_struct(self, s: dict[str, Any]) -> bool:
        return s.get("type") == "object" and "properties" in s

    def tag_of(self, s: dict[str, Any]) -> str | None:
        """The ``method`` const of a frame type; it must then be required."""
        const = s.get("properties", {}).get(TAG, {}).get("const")
        if const is not None and TAG not in s.get("required", []):
            sys.exit(f"a frame type pins {TAG} {const!r} without requiring it")
        return const if isinstance(const, str) else None

    def fields(self, s: dict[str, Any]) -> list[tuple[str, dict[str, Any], bool]]:
        """(name, schema, required) in declaration order: required first, then optional, each
        in ``properties`` order; the tag is not among them."""
        props = s["properties"]
        req = s.get("required", [])
        for name in req:
            if name not in props:
                sys.exit(f"required member {name} is not in properties")
        bad = [n for n in props if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)]
        if bad:
            sys.exit(f"member names {bad} are not identifiers (the decoders name them so)")
        order = [n for n in props if n in req] + [n for n in props if n not in req]
        return [(n, props[n], n in req) for n in order if not (n == TAG and self.tag_of(s))]

    # -- decoders (JavaScript) --------------------------------------------------------------

    def helper(self, body: str) -> str:
        """A named function for an inline schema that needs one (a union, an array item)."""
        name = self.helpers.get(body)
        if name is None:
            name = self.helpers[body] = f"inline{len(self.helpers) + 1}"
        return name

    def decoder(self, s: dict[str, Any], here: str) -> str:
        """The name of a ``(v, path) => value`` function for schema ``s``."""
        if "$ref" in s and len(s) == 1:
            return f"decode{self.resolve(s['$ref'], here).name}"
        return self.helper(f"  return {self.expr(s, here, 'v', 'p')};")

    def expr(self, s: dict[str, Any], here: str, v: str, p: str) -> str:
        """A JavaScript expression decoding value ``v`` at path ``p`` under schema ``s``."""
        if "$ref" in s:
            return f"decode{self.resolve(s['$ref'], here).name}({v}, {p})"
        if "anyOf" in s or ("oneOf" in s and "type" not in s):
            return self.union(s.get("anyOf") or s["oneOf"], here, v, p)
        if "oneOf" in s:  # a type with one const per branch (ErrorCode)
            consts = [b["const"] for b in s["oneOf"]]
            return f"literal({v}, {p}, {json.dumps(consts)})"
        values = s.get("enum", [s["const"]] if "const" in s else None)
        if values is not None:
            return f"literal({v}, {p}, {json.dumps(values, ensure_ascii=False)})"
        kind = s.get("type")
        if kind == "string":
            pattern = s.get("pattern")
            regex = "null" if pattern is None else f"/{pattern}/u"
            source = "null" if pattern is None else json.dumps(pattern)
            return (
                f"string({v}, {p}, {_num(s.get('minLength'))}, {_num(s.get('maxLength'))}, "
                f"{regex}, {source})"
            )
        if kind == "integer":
            return f"integer({v}, {p}, {_num(s.get('minimum'))}, {_num(s.get('maximum'))})"
        if kind == "boolean":
            return f"boolean({v}, {p})"
        if kind == "null":
            return f"nullValue({v}, {p})"
        if kind == "array":
            item = self.decoder(s.get("items", {}), here)
            return f"array({v}, {p}, {_num(s.get('minItems'))}, {_num(s.get('maxItems'))}, {item})"
        if kind == "object":
            if "properties" in s:
                sys.exit(f"{here}: an inline object with properties: give it a $defs entry")
            return f"anyObject({v}, {p}, {_num(s.get('maxProperties'))})"
        if kind is None and not (set(s) - _ANNOTATIONS):
            return f"anyValue({v}, {p})"
        sys.exit(f"{here}: a schema this generator does not know: {json.dumps(s)[:200]}")

    def union(self, branches: list[dict[str, Any]], here: str, v: str, p: str) -> str:
        """A union of scalars (or of one type and null) is told apart by JSON type, as the
        Python validator does with ``int | str | None``. A union of objects or arrays told
        apart by shape (``BrokerLine``, ``EventsBody``) takes the first branch that accepts
        the value, else the first branch's refusal, as the kit's verdict does."""
        kinds = [self.kinds(b, here) for b in branches]
        nullable = sum(ks != {"null"} for ks in kinds) == 1
        if not nullable and any(ks & {"object", "array"} for ks in kinds):
            names = ", ".join(self.decoder(b, here) for b in branches)
            return f"firstOf({v}, {p}, [{names}])"
        lines = []
        for kind, test in _KIND_TEST.items():
            admit = [b for b, ks in zip(branches, kinds, strict=True) if kind in ks]
            if not admit:
                continue
            if len(admit) == 1:
                chosen = self.expr(admit[0], here, "v", "p")
            else:
                names = ", ".join(self.decoder(b, here) for b in admit)
                chosen = f"firstOf(v, p, [{names}])"
            lines.append(f"  if ({test}) return {chosen};")
        admitted = set().union(*kinds)
        expected = " | ".join(name for k, name in _PY_NAME.items() if k in admitted)
        lines.append(
            f"  throw new DecodeError(p, `Expected \\`{expected}\\`, got \\`${{typeName(v)}}\\``);"
        )
        return f"{self.helper(chr(10).join(lines))}({v}, {p})"

    def struct(self, named: Named) -> str:
        s = named.schema
        tag = self.tag_of(s)
        fields = self.fields(s)
        lines = [f"function decode{named.name}(v, p) {{", "  const o = object(v, p);"]
        if tag is not None:
            lines.append(f"  tag(o, p, [{json.dumps(tag)}]);")
        lines += ["  const f = {};", "  for (const k of Object.keys(o)) {", "    switch (k) {"]
        for name, sub, _ in fields:
            value = self.expr(sub, named.file, f"o[{json.dumps(name)}]", f"`${{p}}.{name}`")
            lines.append(f"      case {json.dumps(name)}:")
            lines.append(f"        f.{name} = {value};")
            lines.append("        break;")
        lines += ["      default:", "        break; // not in the schema: dropped", "    }", "  }"]
        required = [name for name, _, req in fields if req]
        if required:
            lines.append(f"  required(f, {json.dumps(required)}, p);")
        members = [f'{TAG}: "{tag}"'] if tag is not None else []
        for name, sub, req in fields:
            if req:
                members.append(f"{name}: f.{name}")
            elif "default" in sub:
                members.append(f'{name}: "{name}" in f ? f.{name} : {json.dumps(sub["default"])}')
            else:
                members.append(f'...("{name}" in f ? {{ {name}: f.{name} }} : {{}})')
        lines += ["  return {", *(f"    {m}," for m in members), "  };"]
        lines.append("}")
        return "\n".join(lines)

    def tagged_union(self, named: Named) -> str | None:
        """A root ``oneOf`` whose branches are all tagged frame types: dispatch on ``method``."""
        branches = named.schema.get("oneOf")
        if not isinstance(branches, list) or named.schema.get("type") != "object":
            return None
        variants = []
        for b in branches:
            target = self.resolve(b.get("$ref", ""), named.file)
            variant_tag = self.tag_of(target.schema)
            if variant_tag is None:
                return None
            variants.append((variant_tag, target.name))
        table = ", ".join(f'"{t}": decode{n}' for t, n in variants)
        return "\n".join(
            [
                f"const {named.name}Variants = {{ {table} }};",
                f"const {named.name}Tags = Object.keys({named.name}Variants);",
                f"function decode{named.name}(v, p) {{",
                "  const o = object(v, p);",
                f"  return {named.name}Variants[tag(o, p, {named.name}Tags)](o, p);",
                "}",
            ]
        )

    def function(self, named: Named) -> str:
        if self.is_struct(named.schema):
            return self.struct(named)
        union = self.tagged_union(named)
        if union is not None:
            return union
        return "\n".join(
            [
                f"function decode{named.name}(v, p) {{",
                f"  return {self.expr(named.schema, named.file, 'v', 'p')};",
                "}",
            ]
        )

    # -- types (TypeScript declarations) ----------------------------------------------------

    def ts(self, s: dict[str, Any], here: str) -> str:
        if "$ref" in s:
            return self.resolve(s["$ref"], here).name
        if "anyOf" in s or "oneOf" in s:
            return " | ".join(self.ts(b, here) for b in s.get("anyOf") or s["oneOf"])
        values = s.get("enum", [s["const"]] if "const" in s else None)
        if values is not None:
            return " | ".join(json.dumps(x, ensure_ascii=False) for x in values)
        kind = s.get("type")
        if kind in ("string", "boolean", "null"):
            return str(kind)
        if kind == "integer":
            return "number"
        if kind == "array":
            item = self.ts(s.get("items", {}), here)
            item = f"({item})" if "|" in item else item
            return f"[{item}, ...{item}[]]" if s.get("minItems", 0) >= 1 else f"{item}[]"
        if kind == "object":
            if s.get("maxProperties") == 0:
                return "Record<string, never>"
            return "{ [member: string]: unknown }"
        return "unknown"

    def declaration(self, named: Named) -> str:
        s = named.schema
        doc = _doc(s.get("description"), "")
        if not self.is_struct(s):
            return f"{doc}export type {named.name} = {self.ts(s, named.file)};"
        tag = self.tag_of(s)
        lines = [f"{doc}export interface {named.name} {{"]
        if tag is not None:
            lines.append(f'  {TAG}: "{tag}";')
        for name, sub, req in self.fields(s):
            lines.append(_doc(sub.get("description"), "  ").rstrip("\n"))
            optional = "" if req else "?"
            lines.append(f"  {name}{optional}: {self.ts(sub, named.file)};")
        lines.append("}")
        return "\n".join(line for line in lines if line)

    # -- the two files ----------------------------------------------------------------------

    def render(self) -> tuple[str, str]:
        self.collect()
        functions = [self.function(n) for n in self.named.values()]
        names = [n.name for n in self.named.values()]
        table = "\n".join(f"  {n}: decode{n}," for n in names)
        js = "\n".join(
            [
                HEADER,
                "// Decoders for every schema root and $defs entry of schema/, by title.",
                "import { DecodeError, anyObject, anyValue, array, boolean, firstOf, integer, "
                "isObject,",
                "  literal, nullValue, object, parse, required, string, tag, text, typeName } "
                'from "../lib/runtime.js";',
                "",
                'export { DecodeError, MAX_DEPTH, parse } from "../lib/runtime.js";',
                "",
                *(f"function {n}(v, p) {{\n{b}\n}}\n" for b, n in self.helpers.items()),
                *(f"{f}\n" for f in functions),
                "const DECODERS = {",
                table,
                "};",
                "",
                "/** The type names decode and encode take: schema and $defs titles. */",
                "export const TYPES = Object.freeze(Object.keys(DECODERS));",
                "",
                _DECODE_JS,
            ]
        )
        body = [self.declaration(n) for n in self.named.values()]
        index = "\n".join(f"  {n}: {n};" for n in names)
        dts = "\n".join(
            [
                HEADER,
                "// Types of every schema root and $defs entry of schema/, by title. An optional",
                "// member (`name?:`) may be absent; one typed `| null` may be null: compile with",
                "// exactOptionalPropertyTypes to keep the two apart.",
                "",
                'export { DecodeError, MAX_DEPTH, parse } from "../lib/runtime.js";',
                "",
                *(f"{b}\n" for b in body),
                "/** Every type by name: what `decode` and `encode` take. */",
                "export interface Types {",
                index,
                "}",
                "",
                _DECODE_DTS,
            ]
        )
        return js, dts


# Keywords that say nothing about which values a schema admits.
_ANNOTATIONS = {"description", "title", "examples", "default", "$schema", "$id", "$defs"}
_KIND_TEST = {  # "number" is not used by the schemas: an integer member admits any number
    "object": "isObject(v)",
    "array": "Array.isArray(v)",
    "string": 'typeof v === "string"',
    "integer": 'typeof v === "number"',
    "boolean": 'typeof v === "boolean"',
    "null": "v === null",
}
_PY_NAME = {  # in the order the Python validator names a union's types
    "integer": "int",
    "string": "str",
    "boolean": "bool",
    "array": "array",
    "object": "object",
    "null": "null",
}

_DECODE_JS = """\
/**
 * Decode JSON text (a string, or UTF-8 bytes) as the named type, under the contract's strict
 * reading. Returns the value, with only the members the schema declares, in declaration order;
 * or the JSON path of the first violation (`$` for the root and for text that is not JSON) and
 * why.
 */
export function decode(type, input) {
  const decodeType = DECODERS[type];
  if (decodeType === undefined) throw new TypeError(`no type ${type} in the contract`);
  try {
    return { ok: true, value: decodeType(parse(text(input)), "$") };
  } catch (e) {
    if (e instanceof DecodeError) return { ok: false, path: e.path, reason: e.reason };
    throw e;
  }
}

/**
 * The compact JSON text of a value of the named type: checked as a decoded value is, unknown
 * members dropped, members in declaration order (the Python encoder's bytes). Throws
 * DecodeError for a value the type does not admit.
 */
export function encode(type, value) {
  const decodeType = DECODERS[type];
  if (decodeType === undefined) throw new TypeError(`no type ${type} in the contract`);
  return JSON.stringify(decodeType(value, "$"));
}
"""

_DECODE_DTS = """\
export type Decoded<T> =
  | { ok: true; value: T }
  | { ok: false; path: string; reason: string };

/** The type names `decode` and `encode` take. */
export declare const TYPES: readonly (keyof Types)[];

export declare function decode<K extends keyof Types>(
  type: K,
  input: string | Uint8Array,
): Decoded<Types[K]>;

export declare function encode<K extends keyof Types>(type: K, value: Types[K]): string;
"""


def _num(value: Any) -> str:
    return "null" if value is None else json.dumps(value)


def _doc(description: str | None, indent: str) -> str:
    """A JSDoc comment, wrapped at 100 columns."""
    if not description:
        return ""
    text = description.replace("*/", "* /")
    if len(indent) + len(text) + 7 <= 100:
        return f"{indent}/** {text} */\n"
    body = textwrap.wrap(text, 100 - len(indent) - 3, break_on_hyphens=False)
    return "".join([f"{indent}/**\n", *(f"{indent} * {line}\n" for line in body), f"{indent} */\n"])


def render(schema_dir: Path = SCHEMA) -> dict[str, str]:
    """The generated files, by name."""
    files = sorted(schema_dir.glob("*.schema.json"))
    schemas = {f.name: json.loads(f.read_text("utf-8")) for f in files}
    js, dts = Generator(schemas).render()
    return {JS: js, DTS: dts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the output is stale")
    args = parser.parse_args()
    fresh = render()
    where = TARGET.relative_to(ROOT)
    if args.check:
        stale = [
            name
            for name, content in fresh.items()
            if not (TARGET / name).is_file() or (TARGET / name).read_text("utf-8") != content
        ]
        if stale:
            sys.exit(f"{where} is stale ({', '.join(stale)}): run `make gen`")
        print(f"{where} is up to date")
        return
    TARGET.mkdir(parents=True, exist_ok=True)
    for name, content in fresh.items():
        (TARGET / name).write_text(content, "utf-8")
    print(f"wrote {where}")


if __name__ == "__main__":
    main()
