"""The Python validator's verdict on one frame of a named type: what another language's codec
must answer (the kit's codec line protocol: ``ok`` and the compact re-encoding, or ``error`` and
the JSON path of the first violation, ``$`` for the root).

A type is named by its schema's or ``$defs`` entry's ``title`` (the ``$defs`` key when it has
none), as the vectors' groups name it. Most names are generated msgspec types, checked with
``nvpair_wm.codec.validate`` and re-encoded with ``codec.encode``. The unions told apart by shape
(``broker-line`` and ``http-response``, which ``scripts/gen_types.py`` does not generate) are
checked branch by branch, as the kit's codec role does: the first branch that accepts wins,
else the first branch's refusal stands.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from typing import Any

import msgspec

from nvpair_wm import codec
from nvpair_wm.codec import InvalidFrame
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


Check = Callable[[bytes], Any]  # returns the decoded value or raises InvalidFrame
_raw_array: msgspec.json.Decoder[list[msgspec.Raw]] = msgspec.json.Decoder(list[msgspec.Raw])


def _of_type(typ: Any) -> Check:
    return lambda text: codec.validate(text, typ)


def _first_of(*checks: Check) -> Check:
    def check(text: bytes) -> Any:
        errors: list[InvalidFrame] = []
        for c in checks:
            try:
                return c(text)
            except InvalidFrame as exc:
                errors.append(exc)
        raise errors[0]

    return check


def _non_empty_array_of(item: Check) -> Check:
    def check(text: bytes) -> Any:
        try:
            raws = _raw_array.decode(text)
        except msgspec.DecodeError as exc:
            raise InvalidFrame(f"not an array: {exc}", "$") from exc
        if not raws:
            raise InvalidFrame("Expected `array` of length >= 1", "$")
        values = []
        for i, raw in enumerate(raws):
            try:
                values.append(item(bytes(raw)))
            except InvalidFrame as exc:
                where = (exc.path or "$").removeprefix("$")
                raise InvalidFrame(exc.reason, f"$[{i}]{where}") from exc
        return values

    return check


@cache
def _types() -> dict[str, Check]:
    """Every type name of the contract and how the Python side checks it."""
    names: dict[str, Check] = {}
    for path in sorted(SCHEMA_DIR.glob(f"*{SUFFIX}")):
        schema = json.loads(path.read_text("utf-8"))
        stem = path.name.removesuffix(SUFFIX).replace("-", "_")
        try:
            module = import_module(f"nvpair_wm_schema.{stem}_schema")
        except ModuleNotFoundError:
            module = None  # a union told apart by shape: composed below
        entries = [schema.get("title")] + [
            sub.get("title") or key for key, sub in schema.get("$defs", {}).items()
        ]
        for name in entries:
            if module is not None and hasattr(module, name):
                names[name] = _of_type(getattr(module, name))
    jsonrpc = import_module("nvpair_wm_schema.jsonrpc_schema")
    status = import_module("nvpair_wm_schema.manager_status_schema")
    event, error = _of_type(jsonrpc.EventResponse), _of_type(jsonrpc.ErrorResponse)
    names["BrokerResponse"] = _first_of(event, _of_type(status.StatusResponse), error)
    names["PeerResponse"] = _first_of(event, error)
    names["EventsBody"] = _first_of(
        names["PeerResponse"], _non_empty_array_of(names["PeerResponse"])
    )
    names["BrokerLine"] = _first_of(
        names["BrokerFrame"], names["BrokerResponse"], _non_empty_array_of(names["BrokerResponse"])
    )
    names["HttpResponseBody"] = _first_of(names["EventsBody"], names["HttpError"])
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
