"""The executable model (``nvpair_wm.conformance.model``) against the behaviour vectors.

nvpair-wm passes every behaviour vector (``tests/test_behaviour.py``); here the model is run on
the same inputs and must meet the same expectations, so the model and the daemon agree on every
existing vector the model decides (what it leaves to the HTTP layer is listed in ``SKIPPED``).
The exploration (``tests/test_explore.py``) then compares the two directly on random scenarios.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nvpair_wm.conformance import expect, model, vectors
from nvpair_wm.conformance.schemacheck import SchemaValidator

ROOT = Path(__file__).resolve().parents[1]
VALIDATOR = SchemaValidator()
# A manager:status result with the members the vectors check by type (counters not modelled).
STATUS = {
    "hasIdentity": True,
    "version": "x",
    "fingerprint": "f" * 64,
    "port": 1,
    "peers": [],
    "counters": {"invalid": 0},
}
# Decided below the model (HTTP framing, TLS, timeouts, queues) or by counters it does not keep.
SKIPPED = {
    "http-status/handshake-without-certificate",
    "http-status/431-headers-too-large",
    "http-status/501-connect",
    "http-status/400-malformed-content-length",
    "http-status/400-broken-chunked-body",
    "http-status/413-streamed",
    "peer-retry/given-up-after-max-attempts",
    # The outbound link's figures in manager:status (PeerStatus): status contents, not modelled.
    "peer-retry/status-after-a-retry",
    "peer-retry/gave-up-once",
    "peer-retry/gave-up-at-the-third-failure",
    "peer-bounds/status-after-the-backlog",
    "peer-bounds/status-counts-it-sent",
    "peer-bounds/status-counts-one-sent-one-dropped",
    "peer-bounds/status-counts-all-six-hundred-dropped",
    "peer-snapshot-refused/status-while-the-snapshot-waits",
    # A peer's 400 naming frames (a respond rule's body): the model leaves peers' answers out.
    "peer-bounds/two-answered-400",
    "peer-snapshot/status-while-down",
    # The outcome counters of manager:status: counters the model does not keep.
    "local-dedup/counters",
    "local-errors/counters",
    "local-framing/counters",
    "http-dedup/counters",
    "http-dedup/counters-after-413",
    "http-dedup/gauges-at-the-end",
    "edge-local/invalid-notification-counted",
    "edge-local/invalid-request-counted",
    "edge-local/counters-follow-outcomes",
    # What each peer said of its versions, in manager:status: status contents, not modelled.
    "peer-versions/nothing-said-yet",
    "peer-versions/status-names-them",
    "peer-versions/status-says-unknown",
    "peer-versions/status-after-malformed",
    "peer-versions/status-after-another-major",
    "peer-versions/status-after-curl",
    "peer-versions/status-software-only",
    "peer-versions/status-after-nothing",
    "peer-versions/status-after-another-client",
    "peer-versions/status-contract-only",
    "peer-versions/status-after-its-response",
    "peer-versions/status-after-its-refusal",
    # Whether a link is up, and its protocol: status contents, not modelled.
    "peer-bounds/status-shows-the-live-link",
    "peer-snapshot-removals/status-shows-the-live-link",
    "peer-versions/status-after-nothing-again",
    # A final 4xx drops the frames it refused, counted in PeerStatus.dropped: not modelled.
    "peer-retry/busy-refused-them",
    "peer-retry/status-counts-each-frame-dropped",
    "peer-retry/nothing-sent-again-after-a-400-naming-a-frame",
    "peer-retry/status-counts-the-named-frame-dropped",
}
HTTP_GROUPS_SKIPPED = {"http-backpressure", "http-timeouts"}


def _groups() -> list[dict[str, Any]]:
    return [g for g in vectors.load() if g["group"] not in HTTP_GROUPS_SKIPPED]


def _record(name: str) -> dict[str, Any]:
    return {"nodeId": name, "address": "127.0.0.1", "port": 1, "fingerprint": "0" * 64}


def _with_status(value: Any) -> Any:
    if isinstance(value, list):
        return [_with_status(v) for v in value]
    if isinstance(value, dict) and value.get("result") is model._STATUS:
        return {**value, "result": STATUS}
    return value


def _run_group(group: dict[str, Any]) -> list[str]:
    m = model.Model(validator=VALIDATOR)
    problems: list[str] = []
    records = {
        name: _record(name) for name in [*(p["name"] for p in group.get("peers", [])), "subject"]
    }
    # A peer serving another certificate than its record's is never reached: down, for the model.
    for p in group.get("peers", []):
        if p.get("certificate") == "mismatch":
            m.peer_down(p["name"])
    for case in group["cases"]:
        name = f"{group['group']}/{case['name']}"
        if name in SKIPPED:
            for peer in case.get("arrivals", {}):
                m.take_deliveries(peer)  # not judged, but what it covers is not due later
            continue
        if "local" in case:
            data = b"".join(vectors.line(vectors.with_records(i, records)) for i in case["local"])
            lines = [_with_status(a.response) for a in m.broker_bytes(data) if a.response]
            problems += [f"{name}: {p}" for p in expect.match_lines(lines, case.get("expect", []))]
        elif "http" in case:
            problems += [f"{name}: {p}" for p in _http(m, case)]
        elif "peer" in case:
            action = case.get("action")
            rules = case.get("respond")
            if rules is not None and any(
                "count" not in r and r["status"] >= 400 and "framesAbove" not in r for r in rules
            ):
                action = "down"  # refusing every request: given up, as a peer down
            elif rules == []:
                action = "up"
            if action == "down":
                m.peer_down(case["peer"])
            elif action == "up":
                m.peer_up(case["peer"])
            elif action == "restart":
                m.peer_restarted(case["peer"])
        elif case.get("control") in ("unpin", "pin"):
            m.pin(case["member"], case["control"] == "pin")
            if case["member"] == "peer":  # the member the kit's "pinned" client presents
                m.pin("pinned", case["control"] == "pin")
        elif case.get("control") == "restart":
            m.restart()
        elif "arrivals" in case:
            for peer, spec in case["arrivals"].items():
                problems += [f"{name}[{peer}]: {p}" for p in _arrivals(m, peer, spec)]
    return problems


def _http(m: model.Model, case: dict[str, Any]) -> list[str]:
    spec = case["http"]
    want = case["response"]
    if "raw" in spec or want.get("refused") or "repeatUntil" in spec:
        return []
    client = spec.get("client", "pinned")
    if client == "unpinned":
        m.pin("stranger", False)
    headers = {
        k.lower(): v for k, v in spec.get("headers", {"content-type": "application/json"}).items()
    }
    problems: list[str] = []
    for _ in spec.get("protocols", ["h2", "http/1.1"]):
        body = vectors.payload(spec["body"]) if "body" in spec else b""
        answer = m.peer_request(
            "stranger" if client == "unpinned" else client,
            body,
            version=headers.get("nvpair-contract-version"),
            content_type=headers.get("content-type"),
            method=spec.get("method", "POST"),
            path=spec.get("path", model.PATH),
        )
        if answer.status != want["status"]:
            problems.append(f"status {answer.status}, expected {want['status']}")
        if "body" in want and want["body"] is not None and not answer.http_error:
            problems += expect.match(answer.response, want["body"])
        if "broker" in case and case["broker"] is not None:
            problems += expect.match_lines(answer.to_broker, case["broker"])
        elif "broker" not in case and answer.to_broker:
            problems.append(f"forwarded {answer.to_broker}, the vector says nothing")
    return problems


def _arrivals(m: model.Model, peer: str, spec: dict[str, Any]) -> list[str]:
    out = m.take_deliveries(peer)
    due = list(out.due.values())
    if "count" in spec:
        return [] if len(due) == spec["count"] else [f"{len(due)} due, the vector {spec['count']}"]
    problems = []
    allowed = spec.get("allowed", [])
    for matcher in spec["frames"]:
        if not any(not expect.match(f, matcher) for f in due):
            problems.append(f"the vector wants {json.dumps(matcher)[:200]}, the model not")
    for f in due:
        if not any(not expect.match(f, mt) for mt in spec["frames"] + allowed):
            problems.append(f"the model wants {json.dumps(f)[:200]}, the vector not")
    return problems


@pytest.mark.parametrize("group", _groups(), ids=lambda g: str(g["group"]))
def test_model_meets_every_vector(group: dict[str, Any]) -> None:
    assert _run_group(group) == []


def test_model_fails_a_wrong_vector() -> None:
    """The comparison can fail: a duplicate expected as applied is refused."""
    group = next(g for g in vectors.load() if g["group"] == "local-dedup")
    bent = json.loads(json.dumps(group))
    for case in bent["cases"]:
        for m in case.get("expect", []):
            if m.get("exact", {}).get("result", {}).get("outcome") == "duplicate":
                m["exact"]["result"]["outcome"] = "applied"
    assert _run_group(bent)
