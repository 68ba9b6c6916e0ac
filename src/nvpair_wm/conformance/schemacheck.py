"""The model's validator from ``schema/`` itself: jsonschema (Draft 2020-12) over the frame type
of a method. Used where the schema files are at hand (``make gen``'s vector generator, the
tests); the kit at run time does not need it (its vectors carry the outcomes), so jsonschema
stays a development dependency and is imported here only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from nvpair_wm.conformance.answers import ANY_PATH

SCHEMA_DIR: Final = Path(__file__).resolve().parents[3] / "schema"
BASE: Final = "https://schemas.nvpair.dev/wm/v1/"


class SchemaValidator:
    """``(method, params) -> None | (path, reason)``, the model's ``Validator``."""

    def __init__(self, schema_dir: Path = SCHEMA_DIR) -> None:
        docs = {
            p.name: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(schema_dir.glob("*.schema.json"))
        }
        registry: Registry[Any] = Registry().with_resources(
            (doc["$id"], Resource.from_contents(doc, default_specification=DRAFT202012))
            for doc in docs.values()
        )
        self._validators: dict[str, Any] = {}
        for branch in docs["inbound-frame.schema.json"]["oneOf"]:
            ref = BASE + branch["$ref"]
            target = registry.resolver().lookup(ref).contents
            method = target["properties"]["method"]["const"]
            self._validators[method] = Draft202012Validator({"$ref": ref}, registry=registry)

    def __call__(self, method: str, params: Any) -> tuple[str, str] | None:
        validator = self._validators.get(method)
        if validator is None:
            return None
        frame = {"jsonrpc": "2.0", "method": method, "params": params, "id": 0}
        errors = sorted(validator.iter_errors(frame), key=lambda e: list(e.absolute_path))
        if not errors:
            return None
        err = errors[0]
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        if err.validator in ("required", "oneOf", "anyOf") and not err.absolute_path:
            return ANY_PATH, err.message
        if err.validator == "required":  # a missing member: its name or its parent's path
            return ANY_PATH if path.startswith("$.params") else path, err.message
        return path, err.message
