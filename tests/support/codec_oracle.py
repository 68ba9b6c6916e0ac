"""The Python validator's verdict on one frame of a named type: what another language's codec
must answer (the kit's codec line protocol: ``ok`` and the compact re-encoding, or ``error`` and
the JSON path of the first violation, ``$`` for the root).

A type is named by its schema's or ``$defs`` entry's ``title`` (the ``$defs`` key when it has
none), as the vectors' groups name it. The verdict itself is the kit's
(``nvpair_wm.conformance.codec.Contract``): generated msgspec types checked with
``nvpair_wm.codec.validate``, and the unions told apart by shape (``broker-line`` and
``http-response``) composed branch by branch. This module only names the types and keeps the
re-encoding as text (``codec.encode``), byte for byte what the other side must write.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import import_module

from nvpair_wm import codec
from nvpair_wm.codec import InvalidFrame
from nvpair_wm.conformance.codec import BASE, COMPOSED_FILES, Check, Contract
from tests.support.conformance import SCHEMA_DIR, SUFFIX


@dataclass(frozen=True)
class Verdict:
    ok: bool
    encoded: str | None = None  # compact re-encoding, when ok
    path: str | None = None  # "$..." when refused
    reason: str | None = None

    def line(self) -> str:
        """The answer line of the codec protocol (without its line feed)."""
        return f"ok\t{self.encoded}" if self.ok else f"error\t{self.path}"


@cache
def _types() -> dict[str, Check]:
    """Every type name of the contract and the kit's check for it: each composed schema and
    definition, and each generated one (a ``$defs`` entry with no generated type is left out)."""
    contract = Contract(SCHEMA_DIR)
    names: dict[str, Check] = {}
    for stem, schema in contract.schemas.items():
        file = f"{BASE}{stem}{SUFFIX}"
        refs = [file] + [f"{file}#/$defs/{key}" for key in schema.get("$defs", {})]
        module = None
        if stem not in COMPOSED_FILES:
            module = import_module(f"nvpair_wm_schema.{stem.replace('-', '_')}_schema")
        for ref in refs:
            name = contract.title(ref)
            if module is None or hasattr(module, name):
                names[name] = contract.check(ref)
    return names


def type_names() -> list[str]:
    return sorted(_types())


def verdict(type_name: str, text: bytes) -> Verdict:
    """What the Python validator makes of ``text`` as ``type_name``."""
    try:
        value = _types()[type_name](text)
    except InvalidFrame as exc:
        return Verdict(False, path=exc.path or "$", reason=exc.reason)
    return Verdict(True, encoded=codec.encode(value).decode("utf-8"))
