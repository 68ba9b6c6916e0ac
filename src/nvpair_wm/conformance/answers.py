"""What the executable model answers with (:mod:`nvpair_wm.conformance.model`): the error a
frame earns, the answer an input earns, what a peer must and may be sent, and the validator it
asks about ``params`` (data, no rules: the rules are the model's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from nvpair_wm_schema.contract import ERROR_MESSAGES

__all__ = ["ANY_PATH", "Answer", "Deliveries", "Error", "Validator", "trust"]

ANY_PATH: Final = "*"  # Error.path: data.path must be a string, its value is free
# (method, params) -> None when the method's schema accepts them, else (path, reason): path is
# the JSON path of the offending value, or ANY_PATH when the contract does not fix it.
Validator = Callable[[str, Any], tuple[str, str] | None]


def trust(_method: str, _params: Any) -> tuple[str, str] | None:
    """The default validator: every params object fits (exploration sends only such)."""
    return None


@dataclass(frozen=True, slots=True)
class Error:
    """A JSON-RPC error the model requires: ``path`` None where the contract leaves it free."""

    code: int
    rid: Any = None
    index: int | None = None
    path: str | None = None
    respond: bool = True

    def response(self) -> dict[str, Any]:
        data: dict[str, Any] = {"reason": ""}  # free text: any string
        if self.index is not None:
            data["index"] = self.index
        if self.path is not None:
            data["path"] = self.path
        err = {"code": self.code, "message": ERROR_MESSAGES[self.code], "data": data}  # type: ignore[index]
        return {"jsonrpc": "2.0", "id": self.rid, "error": err}


@dataclass(slots=True)
class Answer:
    """What one input earns. ``response``: the JSON-RPC answer (object, array, or None for no
    line); over HTTP ``status`` and ``http_error`` (an ``HttpError`` body instead of
    JSON-RPC). ``to_broker``: the lines the broker must get, in order; ``broker_may``: lines
    it may get besides (a freedom)."""

    response: Any = None
    status: int | None = None
    http_error: bool = False
    to_broker: list[dict[str, Any]] = field(default_factory=list)
    broker_may: list[dict[str, Any]] = field(default_factory=list)
    free_outcome: bool = False  # an outcome the contract leaves open ("What a broker may rely on")


@dataclass(slots=True)
class Deliveries:
    """What one peer must get (``due``), may get besides (``may``: superseded while queued, or
    what it had), and whether a frame may come more than once (``repeats``: a snapshot)."""

    due: dict[Any, dict[str, Any]] = field(default_factory=dict)
    may: list[dict[str, Any]] = field(default_factory=list)
    repeats: bool = False
