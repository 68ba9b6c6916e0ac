"""Frame builders for tests: plain dicts and JSON bytes, independent of the code under test.

Everything here is built with the standard library's ``json`` so that a test never checks the
codec against itself. Typical use::

    from tests.support.frames import event, workload

    line = event("workload:started", workload(id="7", seq=2), id=1) + b"\\n"

``ABSENT`` removes a key: ``workload(scheduledOn=ABSENT)`` has no ``scheduledOn`` member, and
``event(..., id=ABSENT)`` (the default) is a notification.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec
from nvpair_wm_schema.manager_status_schema import Counters, StatusResult
from nvpair_wm_schema.workload_info_schema import WorkloadInfo

from nvpair_wm.dispatch import new_counters


class _Absent:
    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()
"""Pass as a value to leave the key out altogether (absent is not null)."""

LIFECYCLE: Final = {
    "workload:submitted": "queued",
    "workload:started": "running",
    "workload:completed": "completed",
    "workload:errored": "failed",
    "workload:cancelled": "cancelled",
}
"""Each lifecycle method and the state it sets."""

METHODS: Final = tuple(LIFECYCLE)
STATES: Final = tuple(LIFECYCLE.values())

FINGERPRINT: Final = "ab" * 32


def _apply(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overrides.items():
        if value is ABSENT:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def workload(**overrides: Any) -> dict[str, Any]:
    """A valid ``WorkloadInfo`` as a dict: every required field, plus ``scheduledOn`` and
    ``requesterId``. Override any field; ``ABSENT`` removes it; unknown keys are kept as given."""
    base: dict[str, Any] = {
        "id": "1",
        "model": "llama-3.1-8b-instruct",
        "engine": "vllm",
        "runId": "run-a",
        "state": "queued",
        "originatedFrom": "node-a",
        "scheduledOn": "node-b",
        "createdAt": 1_764_690_000_000,
        "startedAt": None,
        "completedAt": None,
        "error": None,
        "requesterId": "alice",
        "seq": 1,
    }
    return _apply(base, overrides)


def info(**overrides: Any) -> WorkloadInfo:
    """``workload(**overrides)`` as the generated struct (unknown keys dropped)."""
    return msgspec.convert(workload(**overrides), WorkloadInfo)


def frame(method: Any, params: Any = ABSENT, *, id: Any = ABSENT, **extra: Any) -> dict[str, Any]:
    """A JSON-RPC 2.0 frame as a dict. ``extra`` overrides envelope members (``jsonrpc=ABSENT``)."""
    base: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params, "id": id}
    return {k: v for k, v in _apply(base, extra).items() if v is not ABSENT}


def event_frame(
    method: str, info: dict[str, Any] | None = None, *, id: Any = ABSENT
) -> dict[str, Any]:
    """A lifecycle frame as a dict (a notification unless ``id`` is given)."""
    wi = workload() if info is None else info
    return frame(method, {"workloadInfo": wi}, id=id)


def remove_frame(
    workload_id: str = "1",
    origin: str = "node-a",
    *,
    run_id: str | _Absent = ABSENT,
    id: Any = ABSENT,
) -> dict[str, Any]:
    params: dict[str, Any] = {"workloadId": workload_id, "originatedFrom": origin}
    if not isinstance(run_id, _Absent):
        params["runId"] = run_id
    return frame("workloads:remove", params, id=id)


def node(**overrides: Any) -> dict[str, Any]:
    """A valid ``NodeRecord`` dict."""
    base = {"nodeId": "node-b", "address": "10.0.0.2", "port": 14320, "fingerprint": FINGERPRINT}
    return _apply(base, overrides)


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes (no newline)."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


def line(obj: Any) -> bytes:
    """``dumps(obj)`` plus a newline: one NDJSON line."""
    return dumps(obj) + b"\n"


def event(method: str, info: dict[str, Any] | None = None, *, id: Any = ABSENT) -> bytes:
    """A lifecycle frame as JSON bytes (no newline)."""
    return dumps(event_frame(method, info, id=id))


def remove(
    workload_id: str = "1",
    origin: str = "node-a",
    *,
    run_id: str | _Absent = ABSENT,
    id: Any = ABSENT,
) -> bytes:
    """A ``workloads:remove`` frame as JSON bytes."""
    return dumps(remove_frame(workload_id, origin, run_id=run_id, id=id))


def nodes_update(nodes: list[dict[str, Any]] | None = None, *, id: Any = ABSENT) -> bytes:
    return dumps(frame("nodes:update", {"nodes": [node()] if nodes is None else nodes}, id=id))


def manager_status(id: Any = 1) -> bytes:
    return dumps(frame("manager:status", id=id))


def batch(*frames: dict[str, Any] | bytes) -> bytes:
    """A JSON array of frames; each given as a dict or as already-encoded JSON bytes."""
    parts = [f if isinstance(f, bytes) else dumps(f) for f in frames]
    return b"[" + b",".join(parts) + b"]"


def loads(data: bytes) -> Any:
    return json.loads(data)


def loads_lines(lines: list[bytes]) -> list[Any]:
    """Parse NDJSON lines, checking each is exactly one line ending in a newline."""
    out = []
    for ln in lines:
        assert ln.endswith(b"\n") and ln.count(b"\n") == 1, ln
        out.append(json.loads(ln))
    return out


def status_result(counters: Counters | None = None, **overrides: Any) -> StatusResult:
    """A real ``StatusResult`` for a status provider."""
    fields: dict[str, Any] = {
        "version": "0.0.0-test",
        "hasIdentity": False,
        "fingerprint": None,
        "port": None,
        "peers": [],
        "counters": counters if counters is not None else zero_counters(),
    }
    fields.update(overrides)
    return StatusResult(**fields)


def zero_counters() -> Counters:
    return new_counters()
