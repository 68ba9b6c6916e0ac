"""generated/openrpc.json (written by `make gen`) is a valid OpenRPC 1.x document that describes
every method of the contract, and every reference in it resolves to schema/.

The OpenRPC meta-schema is vendored in tests/vendor/open-rpc-meta-schema/ (from npm
@open-rpc/meta-schema and the JSON Schema meta-schema it refers to); one test checks the vendored
copy against the npm packages in consumers/ts.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from jsonschema import Draft7Validator
from nvpair_wm_schema import contract
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7, DRAFT202012

from tests.support.tools import tool

ROOT = Path(__file__).resolve().parent.parent
DOC = json.loads((ROOT / "generated" / "openrpc.json").read_text())
VENDOR = ROOT / "tests" / "vendor" / "open-rpc-meta-schema"
META = json.loads((VENDOR / "openrpc-1.14.9.json").read_text())
JSON_SCHEMA_META = json.loads((VENDOR / "json-schema-tools-meta-schema-1.8.0.json").read_text())
SCHEMAS = {f.name: json.loads(f.read_text()) for f in (ROOT / "schema").glob("*.schema.json")}


def meta_validator() -> Draft7Validator:
    js = Resource.from_contents(JSON_SCHEMA_META, default_specification=DRAFT7)
    registry: Registry = Registry().with_resources(
        [("https://meta.json-schema.tools", js), ("https://meta.json-schema.tools/", js)]
    )
    return Draft7Validator(META, registry=registry)


def errors_of(doc: Any) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in meta_validator().iter_errors(doc)]


def test_document_is_valid_openrpc() -> None:
    assert errors_of(DOC) == []
    assert DOC["openrpc"].startswith("1.")
    assert DOC["info"]["version"] == contract.CONTRACT_VERSION


@pytest.mark.parametrize(
    "breakage",
    ["method without params", "unknown member", "error code a string", "bad openrpc version"],
)
def test_meta_schema_refuses_a_broken_document(breakage: str) -> None:
    doc = copy.deepcopy(DOC)
    if breakage == "method without params":
        del doc["methods"][0]["params"]
    elif breakage == "unknown member":
        doc["methods"][0]["direction"] = "in"  # extensions must start with x-
    elif breakage == "error code a string":
        next(iter(doc["components"]["errors"].values()))["code"] = "-32700"
    else:
        doc["openrpc"] = "9.9.9"
    assert errors_of(doc) != []


def test_every_method_with_its_direction_and_kind() -> None:
    methods = {m["name"]: m for m in DOC["methods"]}
    expected = {
        "broker -> manager": set(contract.INBOUND_FRAME_TYPES),
        "peer -> manager": set(contract.PEER_FRAME_TYPES),
        "manager -> broker": set(contract.BROKER_FRAME_TYPES),
    }
    assert set(methods) == set().union(*expected.values())
    for direction, names in expected.items():
        assert {n for n, m in methods.items() if direction in m["x-direction"]} == names
    assert methods["manager:status"]["x-kind"] == "request"
    assert methods["manager:status"]["result"]["name"] == "StatusResult"
    assert methods["workload:started"]["x-kind"] == "notification or request"
    assert methods["workload:started"]["result"]["name"] == "EventResult"
    assert methods["ready"]["x-kind"] == "notification" and "result" not in methods["ready"]
    assert [p["name"] for p in methods["workloads:remove"]["params"]] == [
        "workloadId",
        "originatedFrom",
        "runId",
    ]
    assert [p["required"] for p in methods["workloads:remove"]["params"]] == [True, True, False]
    # -32601 for the methods a peer may not send, and only for those.
    for name, m in methods.items():
        refs = [e["$ref"].rsplit("/", 1)[-1] for e in m.get("errors", [])]
        codes = {DOC["components"]["errors"][r]["code"] for r in refs}
        if "manager -> broker" in m["x-direction"] and len(m["x-direction"]) == 1:
            assert codes == set(), name
        else:
            assert (-32601 in codes) == (name not in contract.PEER_FRAME_TYPES), name
            assert {-32700, -32600, -32602} <= codes, name


def test_error_components_are_the_schemas_codes() -> None:
    errors = DOC["components"]["errors"]
    assert {e["code"]: e["message"] for e in errors.values()} == contract.ERROR_MESSAGES


def all_refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in all_refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in all_refs(v)]
    return []


def test_every_reference_resolves() -> None:
    registry: Registry = Registry().with_resources(
        (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012))
        for s in SCHEMAS.values()
    )
    resolver = registry.resolver()
    refs = all_refs(DOC)
    assert len(refs) > 30
    for ref in refs:
        if ref.startswith("#/"):
            node: Any = DOC
            for part in ref[2:].split("/"):
                node = node[part]
            assert isinstance(node, dict), ref
        else:
            assert ref.startswith("https://schemas.nvpair.dev/wm/v1/"), ref
            contents = resolver.lookup(ref).contents
            assert isinstance(contents, dict) and contents, ref
    # And a param's schema is the real one: workloadInfo is WorkloadInfo.
    started = next(m for m in DOC["methods"] if m["name"] == "workload:started")
    resolved = resolver.lookup(started["params"][0]["schema"]["$ref"])
    target = resolved.resolver.lookup(resolved.contents["$ref"]).contents
    assert target["title"] == "WorkloadInfo"


def test_a_frame_validates_against_its_method_params() -> None:
    """The params of a real frame validate against the schemas the document names."""
    registry: Registry = Registry().with_resources(
        (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012))
        for s in SCHEMAS.values()
    )
    remove = next(m for m in DOC["methods"] if m["name"] == "workloads:remove")
    good = {"workloadId": "17", "originatedFrom": "node-a"}
    for param in remove["params"]:
        if param["name"] in good:
            v = jsonschema.Draft202012Validator(param["schema"], registry=registry)
            assert v.is_valid(good[param["name"]])
            assert not v.is_valid("")


def test_vendored_meta_schema_is_the_npm_packages() -> None:
    node = tool("node", "nodejs npm")
    modules = ROOT / "consumers" / "ts" / "node_modules"
    if not (modules / "@open-rpc" / "meta-schema" / "package.json").is_file():
        pytest.fail("the Node packages are not installed: npm ci --prefix consumers/ts")
    script = (
        'process.stdout.write(JSON.stringify(require("@open-rpc/meta-schema").openrpcDocument))'
    )
    out = subprocess.run(
        [node, "-e", script], cwd=modules.parent, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == META
    tools = modules / "@json-schema-tools" / "meta-schema" / "schema.json"
    assert json.loads(tools.read_text()) == JSON_SCHEMA_META


def readme_catalogue() -> dict[str, list[str]]:
    text = (ROOT / "schema" / "README.md").read_text()
    section = text.split("## Method catalogue", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {
        cells[0].strip("`"): cells[1:]
        for cells in ([c.strip() for c in row.strip("|").split("|")] for row in rows)
    }


def test_readme_method_catalogue_matches_the_document() -> None:
    """schema/README.md's one-table catalogue says what generated/openrpc.json says."""
    table = readme_catalogue()
    kinds = {
        "notification or request": "either",
        "request": "request",
        "notification": "notification",
    }
    assert list(table) == [m["name"] for m in DOC["methods"]]
    for m in DOC["methods"]:
        direction, kind, params, result, errors = table[m["name"]]
        assert direction.replace("→", "->").split(", ") == m["x-direction"], m["name"]
        assert kind == kinds[m["x-kind"]], m["name"]
        names = [p["name"] + ("" if p["required"] else "?") for p in m["params"]]
        assert params == (
            ", ".join(f"`{n[:-1]}`?" if n.endswith("?") else f"`{n}`" for n in names) or "none"
        )
        assert result == (f"`{m['result']['name']}`" if "result" in m else "none"), m["name"]
        refs = [e["$ref"].rsplit("/", 1)[-1] for e in m.get("errors", [])]
        codes = [str(DOC["components"]["errors"][r]["code"]) for r in refs]
        assert errors == (" ".join(codes) or "none"), m["name"]
