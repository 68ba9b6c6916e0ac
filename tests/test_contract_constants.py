"""The constants `make gen` writes to nvpair_wm_schema.contract come from schema/, and the code
uses them instead of retyping them."""

from __future__ import annotations

import itertools
import json
import re
import tokenize
import typing
from pathlib import Path
from typing import Any

from nvpair_wm_schema import contract
from nvpair_wm_schema.broker_frame_schema import BrokerFrame
from nvpair_wm_schema.inbound_frame_schema import InboundFrame

from nvpair_wm import codec

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "schema"


def schema(name: str) -> Any:
    return json.loads((SCHEMA_DIR / name).read_text())


def test_error_codes_and_messages_are_the_schemas() -> None:
    branches = schema("jsonrpc.schema.json")["$defs"]["ErrorCode"]["oneOf"]
    assert {b["const"]: b["title"] for b in branches} == contract.ERROR_MESSAGES
    assert len(branches) == 7
    assert (contract.PARSE_ERROR, contract.INVALID_REQUEST) == (-32700, -32600)
    assert contract.ERROR_MESSAGES[contract.METHOD_NOT_FOUND] == "Method not found"
    # The daemon answers with these messages.
    reply = codec.RpcError(contract.FRAME_TOO_LARGE, "x").response()
    assert (reply.error.code, reply.error.message) == (-32000, "Frame too large")


def test_bounds_and_default_port_are_the_schemas() -> None:
    record = schema("node-record.schema.json")
    assert contract.DEFAULT_PORT == record["properties"]["port"]["default"] == 14320
    rid = {b["type"]: b for b in schema("jsonrpc.schema.json")["$defs"]["RequestId"]["anyOf"]}
    assert contract.MAX_SAFE_INTEGER == rid["integer"]["maximum"] == 2**53 - 1
    assert rid["string"]["maxLength"] == contract.MAX_REQUEST_ID_LENGTH
    nodes = schema("nodes-update.schema.json")["$defs"]["NodesUpdateParams"]["properties"]
    assert nodes["nodes"]["maxItems"] == contract.MAX_NODE_RECORDS


def test_contract_version_is_schema_version_and_matches_the_wire_pattern() -> None:
    version = (SCHEMA_DIR / "VERSION").read_text().strip()
    assert version == contract.CONTRACT_VERSION
    ready = schema("ready.schema.json")["$defs"]["ReadyParams"]
    assert "contractVersion" in ready["required"]
    assert re.fullmatch(ready["properties"]["contractVersion"]["pattern"], version)
    # The major version is also the one in every $id (…/wm/v1/…).
    major = version.split(".")[0]
    for f in SCHEMA_DIR.glob("*.schema.json"):
        assert f"/wm/v{major}/" in schema(f.name)["$id"], f.name


def test_method_maps_are_the_generated_unions() -> None:
    for union, mapping in (
        (InboundFrame, contract.INBOUND_FRAME_TYPES),
        (BrokerFrame, contract.BROKER_FRAME_TYPES),
    ):
        members = typing.get_args(typing.get_args(union)[0])
        assert set(mapping.values()) == set(members)
        for method, typ in mapping.items():
            assert typ.__struct_config__.tag == method
    assert frozenset(contract.INBOUND_FRAME_TYPES) == codec.KNOWN_METHODS
    assert frozenset({"manager:status"}) == contract.REQUEST_ONLY_METHODS
    assert frozenset({"manager:status"}) == contract.PARAMLESS_METHODS


def test_the_code_does_not_retype_contract_constants() -> None:
    """No port number or error code literal in src/: they come from the generated module."""
    hits = []
    for path in sorted((ROOT / "src").rglob("*.py")):
        with path.open("rb") as f:
            tokens = list(tokenize.tokenize(f.readline))
        for prev, tok in itertools.pairwise(tokens):
            if tok.type != tokenize.NUMBER:
                continue
            if tok.string == "14320" or (
                prev.string == "-" and re.fullmatch("32[0-9]{3}", tok.string)
            ):
                hits.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.line.strip()}")
    assert hits == []
