"""Judge schema/ against the last released contract: is every change compatible (additive)?

Run by `make test` (`make check-compat`). The released contract is kept in the repository, in
``schema/released/<MAJOR>.x/`` (the schema files and their ``VERSION``); ``--release`` copies the
current ``schema/`` there when a version is released. A breaking change is allowed only with a
higher major version in ``schema/VERSION``. The rules (``schema/README.md``, "Versions and
compatibility"):

breaking: a schema file, ``$defs`` entry, property, enum value, ``oneOf``/``anyOf`` branch or
error code removed (a rename is a removal); a member newly required, or no longer required; a
type, bound, length, item count or pattern narrowed (or added); a ``const`` changed or added; a
``default``, ``format``, ``title`` (the generated type's name) or ``$id`` changed; closing an
object (``additionalProperties: false``).

additive: a new file, ``$defs`` entry, optional property, enum value, branch or error code; a
bound widened or dropped; descriptions, examples and comments (never judged).

The maintained diff libraries were tried first and do not judge these cases: ``json-schema-diff``
(npm 1.0.0) reads Draft 07 only, misses removed enum values, changed ``const``s and removed
properties, and calls an added optional property breaking; ``jsonschema-diff`` (PyPI 0.1.11)
renders differences without classifying them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schema"
RELEASED = SCHEMA / "released"

# Keywords whose larger value accepts less, and those whose larger value accepts more.
LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
# Keywords that must not change at all, once present (adding one narrows, too, except default).
EXACT = ("const", "pattern", "format", "default", "title", "$id")
ANNOTATIONS = frozenset({"description", "examples", "$comment", "$schema", "deprecated"})
KNOWN = frozenset(
    {
        *LOWER_BOUNDS,
        *UPPER_BOUNDS,
        *EXACT,
        *ANNOTATIONS,
        "$ref",
        "$defs",
        "type",
        "enum",
        "properties",
        "required",
        "items",
        "oneOf",
        "anyOf",
        "additionalProperties",
        "unevaluatedProperties",
    }
)


@dataclass
class Report:
    breaking: list[str] = field(default_factory=list)
    additive: list[str] = field(default_factory=list)

    def br(self, where: str, what: str) -> None:
        self.breaking.append(f"{where}: {what}")

    def add(self, where: str, what: str) -> None:
        self.additive.append(f"{where}: {what}")


def load_dir(path: Path) -> dict[str, Any]:
    return {f.name: json.loads(f.read_text()) for f in sorted(path.glob("*.schema.json"))}


def read_version(path: Path) -> tuple[int, int, int]:
    text = (path / "VERSION").read_text().strip()
    major, minor, patch = (int(p) for p in text.split("."))
    return major, minor, patch


def values(node: dict[str, Any]) -> list[Any] | None:
    """The values an enumeration allows: ``enum``, or a ``oneOf`` of ``const`` branches (the
    form that gives each value a title and a description, as ``ErrorCode`` does)."""
    if "enum" in node:
        return list(node["enum"])
    branches = node.get("oneOf")
    if isinstance(branches, list) and all(
        isinstance(b, dict) and "const" in b and b.keys() <= ANNOTATIONS | {"const", "title"}
        for b in branches
    ):
        return [b["const"] for b in branches]
    return None


class Comparer:
    """Walks an old and a new schema set side by side."""

    def __init__(self, old: dict[str, Any], new: dict[str, Any], report: Report) -> None:
        self.old, self.new, self.report = old, new, report
        self.seen: set[tuple[str, str, str, str]] = set()

    def resolve(self, docs: dict[str, Any], file: str, ref: str) -> tuple[str, Any]:
        target, _, pointer = ref.partition("#")
        file = target or file
        node = docs.get(file)
        for part in filter(None, pointer.split("/")):
            if not isinstance(node, dict) or part not in node:
                return file, None
            node = node[part]
        return file, node

    def run(self) -> None:
        for name, old in self.old.items():
            if name not in self.new:
                self.report.br(name, "schema file removed")
                continue
            self.node(name, name, old, name, self.new[name])
            old_defs, new_defs = old.get("$defs", {}), self.new[name].get("$defs", {})
            for d, sub in old_defs.items():
                where = f"{name}#/$defs/{d}"
                if d not in new_defs:
                    self.report.br(where, "definition removed")
                else:
                    self.node(where, name, sub, name, new_defs[d])
            for d in new_defs.keys() - old_defs.keys():
                self.report.add(f"{name}#/$defs/{d}", "definition added")
        for name in self.new.keys() - self.old.keys():
            self.report.add(name, "schema file added")

    def node(self, where: str, ofile: str, old: Any, nfile: str, new: Any) -> None:
        if not isinstance(old, dict) or not isinstance(new, dict):
            if old != new:
                self.report.br(where, f"schema {old!r} became {new!r}")
            return
        oref, nref = old.get("$ref"), new.get("$ref")
        if oref is not None or nref is not None:
            if oref == nref and ofile == nfile:
                return  # the same definition, judged on its own
            if oref is not None:
                ofile, old = self.resolve(self.old, ofile, oref)
            if nref is not None:
                nfile, new = self.resolve(self.new, nfile, nref)
            key = (ofile, str(oref), nfile, str(nref))
            if key in self.seen or old is None or new is None:
                if new is None:
                    self.report.br(where, f"$ref {nref} does not resolve")
                return
            self.seen.add(key)
            self.node(where, ofile, old, nfile, new)
            return
        for kw in (old.keys() | new.keys()) - KNOWN:
            if old.get(kw) != new.get(kw):
                self.report.br(where, f"keyword {kw!r} changed (not judged: treated as breaking)")
        self.types(where, old, new)
        self.enum(where, old, new)
        self.bounds(where, old, new)
        self.exact(where, old, new)
        self.objects(where, ofile, old, nfile, new)
        self.branches(where, ofile, old, nfile, new)
        if "items" in old or "items" in new:
            self.node(f"{where}/items", ofile, old.get("items", {}), nfile, new.get("items", {}))

    def types(self, where: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        def as_set(t: Any) -> set[str] | None:
            return None if t is None else {t} if isinstance(t, str) else set(t)

        ot, nt = as_set(old.get("type")), as_set(new.get("type"))
        if ot == nt:
            return
        # "integer" is part of "number".
        widen = {"integer": {"number"}}
        if nt is None or (ot is not None and all(t in nt or widen.get(t, set()) & nt for t in ot)):
            self.report.add(where, f"type widened {sorted(ot or [])} -> {sorted(nt or ['any'])}")
        else:
            self.report.br(where, f"type narrowed {sorted(ot or ['any'])} -> {sorted(nt)}")

    def enum(self, where: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        ov, nv = values(old), values(new)
        if ov is None and nv is None:
            return
        if nv is None:
            self.report.add(where, "enum dropped")
            return
        if ov is None:
            self.report.br(where, f"enum added {nv}")
            return
        if gone := [v for v in ov if v not in nv]:
            self.report.br(where, f"enum values removed {gone}")
        if more := [v for v in nv if v not in ov]:
            self.report.add(where, f"enum values added {more}")

    def bounds(self, where: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        for kw, tighter in [*((k, 1) for k in LOWER_BOUNDS), *((k, -1) for k in UPPER_BOUNDS)]:
            ov, nv = old.get(kw), new.get(kw)
            if ov == nv:
                continue
            if nv is None:
                self.report.add(where, f"{kw} {ov} dropped")
            elif ov is None or (nv - ov) * tighter > 0:
                self.report.br(where, f"{kw} narrowed {ov} -> {nv}")
            else:
                self.report.add(where, f"{kw} widened {ov} -> {nv}")

    def exact(self, where: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        for kw in EXACT:
            if kw not in old and kw not in new:
                continue
            ov, nv = old.get(kw), new.get(kw)
            if ov == nv:
                continue
            if kw not in new and kw in ("const", "pattern", "format"):
                self.report.add(where, f"{kw} {ov!r} dropped")
            elif kw not in old and kw == "title":
                self.report.add(where, f"title {nv!r} added")
            else:
                self.report.br(where, f"{kw} changed {ov!r} -> {nv!r}")

    def objects(
        self, where: str, ofile: str, old: dict[str, Any], nfile: str, new: dict[str, Any]
    ) -> None:
        oprops, nprops = old.get("properties", {}), new.get("properties", {})
        for p, sub in oprops.items():
            if p not in nprops:
                self.report.br(f"{where}/{p}", "property removed")
            else:
                self.node(f"{where}/{p}", ofile, sub, nfile, nprops[p])
        for p in nprops.keys() - oprops.keys():
            required = p in new.get("required", [])
            (self.report.br if required else self.report.add)(
                f"{where}/{p}", "required property added" if required else "property added"
            )
        oreq, nreq = set(old.get("required", [])), set(new.get("required", []))
        if newly := sorted((nreq - oreq) & oprops.keys()):
            self.report.br(where, f"newly required {newly}")
        if no_longer := sorted(oreq - nreq):
            self.report.br(where, f"no longer required {no_longer} (a receiver may rely on it)")
        for kw in ("additionalProperties", "unevaluatedProperties"):
            ov, nv = old.get(kw, True), new.get(kw, True)
            if ov != nv:
                if nv is True:
                    self.report.add(where, f"{kw} opened")
                elif isinstance(ov, dict) and isinstance(nv, dict):
                    self.node(f"{where}/{kw}", ofile, ov, nfile, nv)
                else:
                    self.report.br(where, f"{kw} closed ({nv!r})")

    def branches(
        self, where: str, ofile: str, old: dict[str, Any], nfile: str, new: dict[str, Any]
    ) -> None:
        for kw in ("oneOf", "anyOf"):
            if kw not in old and kw not in new:
                continue
            if kw == "oneOf" and values(old) is not None and values(new) is not None:
                continue  # an enumeration written as const branches: judged by enum()
            if kw not in old:
                self.report.br(where, f"{kw} added")
                continue
            if kw not in new:
                self.report.add(where, f"{kw} dropped")
                continue

            def key(branch: Any, i: int) -> str:
                if isinstance(branch, dict):
                    for k in ("$ref", "const", "type"):
                        if k in branch:
                            return f"{k}={json.dumps(branch[k])}"
                return f"#{i}"

            obr = {key(b, i): b for i, b in enumerate(old[kw])}
            nbr = {key(b, i): b for i, b in enumerate(new[kw])}
            for k, b in obr.items():
                if k not in nbr:
                    self.report.br(where, f"{kw} branch {k} removed")
                else:
                    self.node(f"{where}/{kw}[{k}]", ofile, b, nfile, nbr[k])
            for k in nbr.keys() - obr.keys():
                self.report.add(where, f"{kw} branch {k} added")


def compare(old: dict[str, Any], new: dict[str, Any]) -> Report:
    report = Report()
    Comparer(old, new, report).run()
    return report


def latest_release(released: Path) -> Path | None:
    dirs = [d for d in released.glob("*.x") if (d / "VERSION").is_file()]
    return max(dirs, key=read_version, default=None)


def check(current: Path, released: Path) -> int:
    base = latest_release(released)
    if base is None:
        print(f"no released contract under {released}: nothing to judge against")
        return 1
    old_v, new_v = read_version(base), read_version(current)
    report = compare(load_dir(base), load_dir(current))
    shown = ".".join(map(str, old_v)), ".".join(map(str, new_v))
    print(f"{current} {shown[1]} against the released {shown[0]} ({base})")
    for line in report.additive:
        print(f"  additive: {line}")
    for line in report.breaking:
        print(f"  BREAKING: {line}")
    if new_v < old_v:
        print(f"schema/VERSION {shown[1]} is older than the released {shown[0]}")
        return 1
    if report.breaking and new_v[0] == old_v[0]:
        print(
            f"{len(report.breaking)} breaking change(s) under the same major version: undo "
            f"them, or bump schema/VERSION to {old_v[0] + 1}.0.0 (and the /v{old_v[0]}/ in the "
            "$ids) and say why in schema/CHANGELOG.md"
        )
        return 1
    if report.additive and new_v[:2] == old_v[:2]:
        print(f"note: additive changes; release them as {old_v[0]}.{old_v[1] + 1}.0")
    print("compatible" if not report.breaking else "breaking, with a major version bump")
    return 0


def release(current: Path, released: Path) -> None:
    major = read_version(current)[0]
    target = released / f"{major}.x"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for f in sorted(current.glob("*.schema.json")):
        shutil.copy(f, target / f.name)
    shutil.copy(current / "VERSION", target / "VERSION")
    print(f"released {current} as {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schema", type=Path, default=SCHEMA, help="the contract to judge")
    parser.add_argument("--released", type=Path, default=RELEASED, help="released contracts")
    parser.add_argument(
        "--release", action="store_true", help="record --schema as the released contract"
    )
    args = parser.parse_args()
    if args.release:
        release(args.schema, args.released)
        return
    sys.exit(check(args.schema, args.released))


if __name__ == "__main__":
    main()
