"""Property tests: instances generated from schema/ by hypothesis-jsonschema.

For each target (WorkloadInfo, NodeRecord, every frame of the inbound union, the broker frames and
the responses a manager writes, and the generic JSON-RPC envelopes):

* every generated instance is valid JSON Schema (sanity) and is accepted by the generated msgspec
  type through ``nvpair_wm.codec.validate``; frames are also accepted by the ``InboundFrame`` /
  ``BrokerFrame`` union they belong to;
* round trip: decode -> ``msgspec.json.encode`` -> decode gives an equal object, and the encoded
  text is exactly the input restricted to the members the schema declares (an absent member stays
  absent, a null stays null, values are unchanged, unknown members are dropped; only a JSON
  Schema ``default`` is filled in, NodeRecord.port);
* an unknown member such as ``prompt`` injected into workloadInfo never reaches the output.

hypothesis-jsonschema cannot follow $refs across files, so each target is bundled into one
self-contained schema first (:func:`bundle`).

Lone surrogates: hypothesis-jsonschema is asked for UTF-8-encodable text (``codec="utf-8"``), so it
never draws them; they are not JSON text for this contract (I-JSON) and the conformance vectors
cover their rejection. The guard in :func:`_text` would say so if that ever changed.
"""

from __future__ import annotations

import json
import typing
from importlib import import_module
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from jsonschema import Draft202012Validator
from nvpair_wm_schema.broker_frame_schema import BrokerFrame
from nvpair_wm_schema.inbound_frame_schema import InboundFrame

from nvpair_wm import codec
from tests.support.bundle import (
    SCHEMAS,
    bundle,
)

BASE = "https://schemas.nvpair.dev/wm/v1/"


def generated_type(ref: str) -> Any:
    uri, _, pointer = ref.partition("#")
    stem = uri[len(BASE) : -len(".schema.json")]
    node = SCHEMAS[f"{stem}.schema.json"]
    for part in filter(None, pointer.split("/")):
        node = node[part]
    module = import_module(f"nvpair_wm_schema.{stem.replace('-', '_')}_schema")
    return getattr(module, node["title"])


_VALIDATORS: dict[str, Draft202012Validator] = {}


def _is_valid(schema: dict[str, Any], value: Any) -> bool:
    key = json.dumps(schema, sort_keys=True)
    if key not in _VALIDATORS:
        _VALIDATORS[key] = Draft202012Validator(schema)
    return _VALIDATORS[key].is_valid(value)


def _validate_union(text: bytes, union: object) -> object:
    """``codec.validate`` against a union alias (InboundFrame, BrokerFrame): a valid target at
    run time, but mypy cannot type a union passed as a value (that needs PEP 747's TypeForm)."""
    return codec.validate(text, typing.cast(type[object], union))


def project(schema: dict[str, Any], value: Any) -> Any:
    """What a generated type writes back for ``value`` (valid against ``schema``): only the
    declared members, each as received, plus the ``default`` of an absent member."""
    for key in ("oneOf", "anyOf"):
        if key in schema:
            branch = next(b for b in schema[key] if _is_valid(b, value))
            return project(branch, value)
    if "allOf" in schema:
        return project(schema["allOf"][0], value)
    if isinstance(value, dict) and "properties" in schema:
        out = {}
        for name, sub in schema["properties"].items():
            if name in value:
                out[name] = project(sub, value[name])
            elif "default" in sub:
                out[name] = sub["default"]
        return out
    if isinstance(value, list) and "items" in schema:
        return [project(schema["items"], v) for v in value]
    return value


def canonical(value: Any) -> str:
    # Canonical text keeps true != 1 and 1 != 1.0, unlike Python's ==.
    return json.dumps(value, sort_keys=True)


def _unencodable(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _text(instance: Any) -> bytes:
    # Should never fire (codec="utf-8"); if it does, this is no JSON text for us: see docstring.
    assert not _unencodable(instance), f"generated a lone surrogate: {instance!r}"
    return json.dumps(instance).encode("utf-8")


INBOUND = typing.get_args(typing.get_args(InboundFrame)[0])
BROKER = typing.get_args(typing.get_args(BrokerFrame)[0])

EVENTS = [
    "WorkloadSubmitted",
    "WorkloadStarted",
    "WorkloadCompleted",
    "WorkloadErrored",
    "WorkloadCancelled",
]
# Each target is drawn from the bundled schema of each of its refs. The five lifecycle frames
# share one structure (they differ in the method const), so they share one example budget.
TARGETS: dict[str, list[str]] = {
    "workload-info": [f"{BASE}workload-info.schema.json"],
    "node-record": [f"{BASE}node-record.schema.json"],
    "lifecycle-events": [f"{BASE}workload-events.schema.json#/$defs/{d}" for d in EVENTS],
    "workloads-remove": [f"{BASE}workloads-remove.schema.json"],
    "nodes-update": [f"{BASE}nodes-update.schema.json"],
    "manager-status": [f"{BASE}manager-status.schema.json"],
    "ready": [f"{BASE}ready.schema.json"],
    "workloads-upsert": [f"{BASE}workloads-upsert.schema.json"],
    "status-response": [f"{BASE}manager-status.schema.json#/$defs/StatusResponse"],
    "error-response": [f"{BASE}jsonrpc.schema.json#/$defs/ErrorResponse"],
    "event-response": [f"{BASE}jsonrpc.schema.json#/$defs/EventResponse"],
    "generic-envelopes": [
        f"{BASE}jsonrpc.schema.json#/$defs/{d}"
        for d in ("Request", "Notification", "SuccessResponse", "Batch")
    ],
}

# Responses are what a manager writes, not what it accepts; StatusResponse (lists of 12-member
# PeerStatus objects) is by far the slowest to draw, so they get half the budget.
BUDGET = {"status-response": 50, "error-response": 50, "event-response": 50}

PROPERTY_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    # Bundled frames embed a whole WorkloadInfo (or a list of node records) and
    # hypothesis-jsonschema rebuilds object strategies on every draw: on a loaded machine one
    # draw can exceed Hypothesis' default budget without anything being wrong. It also meets
    # some constraints by filtering, and for the largest object (StatusResult) most raw draws can
    # be filtered out: nothing wrong either, and every instance kept is checked in full.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _drawn_with_ref(ref: str) -> st.SearchStrategy[tuple[str, Any]]:
    return from_schema(bundle(ref), codec="utf-8").map(lambda instance: (ref, instance))


# Hang guard, not a bound: drawing is all CPU (about a minute over every target alone), and
# while make test's other workers share the cores one target can take past the default 120 s.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("target", list(TARGETS))
def test_generated_instances_validate_and_round_trip(target: str) -> None:
    refs = TARGETS[target]
    schemas = {ref: bundle(ref) for ref in refs}
    checks = {ref: Draft202012Validator(schema) for ref, schema in schemas.items()}
    types = {ref: generated_type(ref) for ref in refs}

    @settings(PROPERTY_SETTINGS, max_examples=BUDGET.get(target, 100))
    @given(st.one_of([_drawn_with_ref(ref) for ref in refs]))
    def run(drawn: tuple[str, Any]) -> None:
        ref, instance = drawn
        schema, typ = schemas[ref], types[ref]
        assert checks[ref].is_valid(instance), "hypothesis-jsonschema drew an invalid instance"
        text = _text(instance)
        obj = codec.validate(text, typ)
        if typ in INBOUND:
            assert type(_validate_union(text, InboundFrame)) is typ
            [item] = codec.decode(text).items
            assert type(item) is typ, item
        if typ in BROKER:
            assert type(_validate_union(text, BrokerFrame)) is typ

        encoded = msgspec.json.encode(obj)
        assert canonical(json.loads(encoded)) == canonical(project(schema, instance))
        again = codec.validate(encoded, typ)
        assert again == obj
        assert msgspec.json.encode(again) == encoded
        assert codec.encode(obj) == encoded

    run()


WORKLOAD_INFO = bundle(f"{BASE}workload-info.schema.json")
WI_TYPE = generated_type(f"{BASE}workload-info.schema.json")
OPTIONAL = ("scheduledOn", "requesterId")
NULLABLE = ("startedAt", "completedAt", "error", "requesterId")
LIFECYCLE = [
    "workload:submitted",
    "workload:started",
    "workload:completed",
    "workload:errored",
    "workload:cancelled",
]


@PROPERTY_SETTINGS
@given(from_schema(WORKLOAD_INFO, codec="utf-8"))
def test_workload_info_absent_stays_absent_null_stays_null(info: dict[str, Any]) -> None:
    out = json.loads(msgspec.json.encode(codec.validate(_text(info), WI_TYPE)))
    for name in OPTIONAL:
        assert (name in out) == (name in info), name
    for name in NULLABLE:
        if name in info and info[name] is None:
            assert name in out and out[name] is None, name
    assert set(out) == set(info) & set(WORKLOAD_INFO["properties"])
    for name, value in out.items():
        assert canonical(value) == canonical(info[name]), name


@PROPERTY_SETTINGS
@given(
    info=from_schema(WORKLOAD_INFO, codec="utf-8"),
    prompt=st.text(st.characters(codec="utf-8"), max_size=50),
    method=st.sampled_from([*LIFECYCLE, "workloads:upsert"]),
    request_id=st.one_of(st.none(), st.integers(0, 2**53 - 1), st.text(max_size=8)),
)
def test_unknown_fields_never_leave(
    info: dict[str, Any], prompt: str, method: str, request_id: Any
) -> None:
    marker = "PROMPT-" + prompt.encode("utf-8").hex() + "-END"
    info = {
        **info,
        "prompt": marker,
        "messages": [{"role": "user", "content": marker}],
        "response": {"body": marker},
    }
    frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": {"workloadInfo": info}}
    if method != "workloads:upsert":
        frame["id"] = request_id
    frame["params"]["prompt"] = marker
    frame["prompt"] = marker
    text = _text(frame)
    union = BrokerFrame if method == "workloads:upsert" else InboundFrame
    obj = _validate_union(text, union)
    for encoded in (msgspec.json.encode(obj), codec.encode(obj), codec.encode_line(obj)):
        assert b"PROMPT-" not in encoded
        assert b'"prompt"' not in encoded
        assert b'"messages"' not in encoded
        assert b'"response"' not in encoded
        out = json.loads(encoded)
        assert canonical(out["params"]["workloadInfo"]) == canonical(project(WORKLOAD_INFO, info))


def test_bundles_are_self_contained() -> None:
    for ref in (r for refs in TARGETS.values() for r in refs):
        text = json.dumps(bundle(ref))
        assert "$ref" not in text and "discriminator" not in text
