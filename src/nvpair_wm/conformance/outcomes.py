"""The model's answers as behaviour-vector expectations (matchers), so that what the model
decides is checked by the kit's runner like any hand-written vector (pure functions)."""

from __future__ import annotations

from typing import Any

from nvpair_wm.conformance import model
from nvpair_wm.conformance.answers import Answer, Deliveries

# The data.path values the contract fixes (behaviour/README.md, "Matchers"); others are free
# text the model still requires to be a string.
FIXED_PATHS = frozenset({"$.id", "$.params", "$.params.workloadInfo.seq"})


def response_matcher(value: Any, *, free_outcome: bool = False) -> dict[str, Any]:
    """One JSON-RPC response or a batch's array of them (in element order)."""
    if isinstance(value, list):
        return {"elements": [response_matcher(v, free_outcome=free_outcome) for v in value]}
    if "error" not in value:
        if value.get("result") is model._STATUS:
            return {"equal": {"/jsonrpc": "2.0", "/id": value["id"], "/result/hasIdentity": True}}
        if free_outcome:
            return {
                "equal": {"/jsonrpc": "2.0", "/id": value["id"]},
                "types": {"/result/outcome": "string"},
            }
        return {"exact": value}
    err = value["error"]
    data = err["data"]
    equal: dict[str, Any] = {
        "/jsonrpc": "2.0",
        "/id": value["id"],
        "/error/code": err["code"],
        "/error/message": err["message"],
    }
    types = {"/error/data/reason": "string"}
    absent = []
    if "index" in data:
        equal["/error/data/index"] = data["index"]
    else:
        absent.append("/error/data/index")
    if data.get("path") in FIXED_PATHS:
        equal["/error/data/path"] = data["path"]
    elif "path" in data:
        types["/error/data/path"] = "string"
    return {"equal": equal, "types": types, "absent": absent}


def local_expect(answers: list[Answer]) -> list[dict[str, Any]]:
    """The ``expect`` of a local case: one matcher per response line."""
    return [
        response_matcher(a.response, free_outcome=a.free_outcome)
        for a in answers
        if a.response is not None
    ]


def http_response(answer: Answer) -> dict[str, Any]:
    """The ``response`` of an HTTP case."""
    assert answer.status is not None
    out: dict[str, Any] = {"status": answer.status}
    if answer.http_error:
        out["body"] = {"types": {"/error": "string"}}
    elif answer.response is None:
        out["body"] = None
    else:
        out["headers"] = {"content-type": "application/json"}
        out["body"] = response_matcher(answer.response, free_outcome=answer.free_outcome)
    return out


def broker_lines(answer: Answer) -> list[dict[str, Any]]:
    return [{"exact": line} for line in answer.to_broker]


def arrivals(out: Deliveries) -> dict[str, Any]:
    """One peer's entry in an arrivals case."""
    spec: dict[str, Any] = {"frames": [{"exact": f} for f in out.due.values()]}
    due = list(out.due.values())
    may = [f for f in out.may if f not in due]
    if out.repeats:
        spec["repeats"] = True
    if may:
        spec["allowed"] = [{"exact": f} for f in _unique(may)]
    return spec


def _unique(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for f in frames:
        if f not in seen:
            seen.append(f)
    return seen
