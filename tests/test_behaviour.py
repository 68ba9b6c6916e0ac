"""The behaviour vectors and the conformance kit (``nvpair-wm-conformance``).

The kit runs as its users run it: a subprocess given ``-- COMMAND``, in both roles (the
implementation's broker and clients, and its peers). It must pass ``nvpair-wm`` and fail each
stand-in with one fault (``tests/broken_wm.py``, at least one per group), naming the vector that
catches it. The full kit runs once (within 60 s); each stand-in runs only the groups of its
vectors, with a 3 s answer timeout.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from nvpair_wm.conformance import cli, expect, vectors
from tests.test_kit_blind import groups_with_a_stand_in

ROOT = Path(__file__).resolve().parents[1]
BEHAVIOUR = ROOT / "schema" / "conformance" / "behaviour"
FORMAT = json.loads((BEHAVIOUR / "behaviour-vector.schema.json").read_text())
NVPAIR_WM = [sys.executable, "-m", "nvpair_wm", "--bind", "127.0.0.1"]
BROKEN = [sys.executable, str(ROOT / "tests" / "broken_wm.py")]
# What the tables list but no input may produce; the kit checks their absence everywhere.
NO_VECTOR = {-32603: "Internal error: a bug", -32001: "Overloaded: reserved, never sent"}
NO_VECTOR_STATUS = {500: "a bug"}


def kit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvpair_wm.conformance", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def kit_json(*args: str) -> tuple[int, dict[str, Any]]:
    proc = kit("--json", *args)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


# -- the vectors ----------------------------------------------------------------------------


def _vector_files() -> list[Path]:
    return sorted(p for p in BEHAVIOUR.glob("*.json") if not p.name.endswith(".schema.json"))


def test_format_schema_is_valid_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(FORMAT)


@pytest.mark.parametrize("path", _vector_files(), ids=lambda p: p.name)
def test_vector_file_matches_the_format(path: Path) -> None:
    validator = jsonschema.Draft202012Validator(FORMAT)
    errors = [
        f"{e.json_path}: {e.message[:200]}"
        for e in validator.iter_errors(json.loads(path.read_text()))
    ]
    assert not errors, "\n".join(errors[:10])


def test_format_refuses_a_typo_and_a_case_with_two_kinds() -> None:
    validator = jsonschema.Draft202012Validator(FORMAT)
    good = {"name": "x", "local": [{"text": "{}"}], "expect": []}
    group = {"group": "g", "description": "", "startup": [], "cases": [good]}
    assert validator.is_valid([group])
    for bad in (
        {**good, "expect": [{"equals": {"/id": 1}}]},  # typo in a matcher
        {**good, "http": {}, "response": {"status": 200}},  # local and http at once
        {**good, "local": [{"text": "{}", "frame": {}}]},  # two payloads
        {**good, "local": [{"text": "{}", "eol": "\r"}]},  # CR alone is no line ending
    ):
        assert not validator.is_valid([{**group, "cases": [bad]}]), bad


def test_case_names_are_unique_within_each_group() -> None:
    for group in vectors.load(BEHAVIOUR):
        names = [c["name"] + str(c.get("http", {}).get("protocols", "")) for c in group["cases"]]
        assert len(names) == len(set(names)), group["group"]


def _codes_in_vectors() -> tuple[set[int], set[int]]:
    codes: set[int] = set()
    statuses: set[int] = set()
    for group in vectors.load(BEHAVIOUR):
        text = json.dumps(group)
        codes |= {int(c) for c in re.findall(r'"/error/code": (-3\d{4})', text)}
        for case in group["cases"]:
            if "response" in case and "status" in case["response"]:
                statuses.add(case["response"]["status"])
    return codes, statuses


def test_every_error_code_and_status_of_the_readme_tables_has_a_vector() -> None:
    readme = (ROOT / "schema" / "README.md").read_text()
    table_codes = {int(c) for c in re.findall(r"^\|\s*`?(-3\d{4})`?\s*\|", readme, re.M)}
    table_statuses = {int(s) for s in re.findall(r"^\|\s*`?([2-5]\d\d)`?\s*\|", readme, re.M)}
    assert {-32700, -32600, -32601, -32602, -32000} <= table_codes  # the tables were found
    assert {202, 200, 400, 403, 404, 405, 413, 415, 503} <= table_statuses
    codes, statuses = _codes_in_vectors()
    assert table_codes - set(NO_VECTOR) <= codes, table_codes - set(NO_VECTOR) - codes
    wanted = table_statuses - set(NO_VECTOR_STATUS)
    assert wanted <= statuses, wanted - statuses


def test_every_error_code_is_reached_by_two_different_inputs() -> None:
    """One input per code would let an implementation pass by matching on that input; -32600
    and -32602 in particular are told apart by several (the envelope against the params)."""
    inputs: dict[int, set[str]] = {}
    for group in vectors.load(BEHAVIOUR):
        for case in group["cases"]:
            sent = json.dumps(case.get("local") or case.get("http", {}), sort_keys=True)
            for code in re.findall(r'"/error/code": (-3\d{4})', json.dumps(case)):
                inputs.setdefault(int(code), set()).add(sent)
    readme = (ROOT / "schema" / "README.md").read_text()
    table_codes = {int(c) for c in re.findall(r"^\|\s*`?(-3\d{4})`?\s*\|", readme, re.M)}
    few = {
        c: len(inputs.get(c, ()))
        for c in table_codes - set(NO_VECTOR)
        if len(inputs.get(c, ())) < 2
    }
    assert not few, few


def _contract_validator(file: str) -> jsonschema.Draft202012Validator:
    schemas = [json.loads(p.read_text()) for p in (ROOT / "schema").glob("*.schema.json")]
    registry: Registry = Registry().with_resources(
        (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012)) for s in schemas
    )
    ref = {"$ref": f"https://schemas.nvpair.dev/wm/v1/{file}"}
    return jsonschema.Draft202012Validator(ref, registry=registry)


def _exact_values(matchers: list[dict[str, Any]] | None) -> list[Any]:
    found: list[Any] = []
    for m in matchers or []:
        if "exact" in m:
            found.append(m["exact"])
        found += _exact_values(m.get("items"))
    return found


def test_exact_expectations_are_valid_contract_values() -> None:
    """A vector that expects an exact line or body must expect something the contract allows:
    every line to the broker is a BrokerLine, every HTTP body an HttpResponseBody, every frame
    that reaches a peer a PeerFrame."""
    line = _contract_validator("broker-line.schema.json")
    body = _contract_validator("http-response.schema.json")
    sent = _contract_validator("peer-frame.schema.json")
    checked = 0
    for group in vectors.load(BEHAVIOUR):
        for case in group["cases"]:
            for name, spec in case.get("arrivals", {}).items():
                for value in _exact_values(spec.get("frames", []) + spec.get("allowed", [])):
                    assert sent.is_valid(value), (group["group"], case["name"], name, value)
                    checked += 1
            lines = _exact_values(case.get("expect")) + _exact_values(case.get("broker"))
            for value in lines:
                assert line.is_valid(value), (group["group"], case["name"], value)
            response_body = case.get("response", {}).get("body")
            for value in _exact_values([response_body] if response_body else []):
                assert body.is_valid(value), (group["group"], case["name"], value)
                checked += 1
            checked += len(lines)
    assert checked > 40


# -- the matchers ---------------------------------------------------------------------------


def test_json_equality_is_json_s() -> None:
    assert expect.json_equal({"a": [1, None]}, {"a": [1.0, None]})
    assert not expect.json_equal(True, 1)
    assert not expect.json_equal(0, False)
    assert not expect.json_equal({"a": 1}, {"a": 1, "b": None})
    assert not expect.json_equal("1", 1)


def test_pointers_and_constraints() -> None:
    value = {"error": {"code": -32602, "data": {"a/b": 1, "t~": 2}}, "id": None}
    assert expect.match(value, {"equal": {"/error/data/a~1b": 1, "/error/data/t~0": 2}}) == []
    assert expect.match(value, {"present": ["/id"], "absent": ["/result"]}) == []
    assert expect.match(value, {"types": {"/id": "null", "/error/code": "integer"}}) == []
    assert expect.match(value, {"absent": ["/id"]})  # present but null is not absent
    assert expect.match(value, {"equal": {"/error/code": -32601}})
    assert expect.match(value, {"types": {"/error/data/path": "string"}})


def test_counts_are_the_schemas_count() -> None:
    value = {"zero": 0, "big": 2**53 - 1, "neg": -32, "over": 2**53, "float": 1.5, "s": "1"}
    assert expect.match(value, {"counts": ["/zero", "/big"]}) == []
    for pointer in ("/neg", "/over", "/float", "/s", "/missing"):
        assert expect.match(value, {"counts": [pointer]}), pointer


def test_recent_is_an_epoch_millisecond_time_of_the_last_minutes() -> None:
    now = int(time.time() * 1000)
    value = {"at": now - 1000, "old": now - 20 * 86_400_000, "soon": now + 86_400_000, "s": "x"}
    assert expect.match(value, {"recent": ["/at"]}) == []
    for pointer in ("/old", "/soon", "/s", "/missing"):
        assert expect.match(value, {"recent": [pointer]}), pointer


def test_items_match_in_any_order_one_to_one() -> None:
    a, b = {"equal": {"/id": 1}}, {"equal": {"/id": 2}}
    assert expect.match([{"id": 2}, {"id": 1}], {"items": [a, b]}) == []
    assert expect.match([{"id": 1}, {"id": 1}], {"items": [a, b]})  # one element, two matchers
    assert expect.match([{"id": 1}], {"items": [a, b]})
    assert expect.match({"id": 1}, {"items": [a]})  # not an array
    loose = {"present": ["/id"]}
    assert expect.match([{"id": 1}, {"id": 2}], {"items": [loose, a]}) == []  # needs backtracking


def test_elements_match_in_order() -> None:
    a, b = {"equal": {"/id": 1}}, {"equal": {"/id": 2}}
    assert expect.match([{"id": 1}, {"id": 2}], {"elements": [a, b]}) == []
    assert expect.match([{"id": 2}, {"id": 1}], {"elements": [a, b]})
    assert expect.match([{"id": 1}], {"elements": [a, b]})


def test_no_response_means_no_line() -> None:
    assert expect.match_lines([], []) == []
    assert expect.match_lines([{"id": 1}], []) != []
    assert expect.match_lines([], [{"present": ["/id"]}]) != []


# -- the kit against implementations ---------------------------------------------------------


@pytest.mark.serial  # a wall-clock bound: run alone (Makefile: test)
def test_kit_passes_nvpair_wm_over_every_group() -> None:
    status, doc = kit_json("--", *NVPAIR_WM)
    failed = [(r["name"], r["problems"]) for r in doc["results"] if not r["passed"]]
    assert status == 0 and not failed, failed
    groups = {g["group"]: g for g in vectors.load(BEHAVIOUR)}
    # The default run adds a fixed seeded budget of exploration, one row per scenario.
    explored = [r for r in doc["results"] if r["group"] == "explore"]
    assert len(explored) == cli.DEFAULT_BUDGET
    doc["results"] = [r for r in doc["results"] if r["group"] != "explore"]
    doc["passed"] -= len(explored)
    ran = {r["group"] for r in doc["results"]}
    assert ran == set(groups)
    # every case ran (http cases once per protocol), plus startup and exit per group, and a
    # startup row again after each restart of the implementation
    expected = sum(
        2
        + sum(
            len(c.get("http", {}).get("protocols", ["h2", "http/1.1"])) if "http" in c else 1
            for c in g["cases"]
        )
        + sum(c.get("control") == "restart" for c in g["cases"])
        for g in groups.values()
    )
    assert len(doc["results"]) == doc["passed"] == expected
    assert doc["seconds"] < 60, f"the whole kit took {doc['seconds']} s (at most 60 s)"


def test_kit_prints_a_table_and_exits_0() -> None:
    proc = kit("--only", "local-ipc", "--", *NVPAIR_WM)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "local-ipc" in proc.stdout and "oversize-then-resync" in proc.stdout
    assert "all passed" in proc.stdout


# Each stand-in of tests/broken_wm.py: {vector it must fail: words in why}. Its run covers the
# groups of those vectors only; every group has at least one stand-in.
STAND_INS: dict[str, dict[str, str]] = {
    "nodes-update": {"local-requests/nodes-update-request": '"outcome": "duplicate"'},
    "code": {"local-errors/unknown-method": "/error/code is -32602, expected -32601"},
    "line-limit": {
        "local-framing/line-over-1MiB": "expected -32000",
        "local-ipc/oversize-then-resync": "expected -32000",
    },
    "batch-order": {"local-batches/mixed-batch": "[0]: expected"},
    "dedup": {
        "local-dedup/duplicate": '"outcome": "duplicate"',
        "generated-schema/depth-64-local-batch": '"outcome": "duplicate"',
        "http-dedup/duplicate-notification-not-forwarded[http/1.1]": (
            "broker: expected no response, got 1"
        ),
        "peer-relay/duplicate-and-stale-not-resent": "h2: expected an array of 0 elements",
    },
    "narrow": {
        "local-dedup/narrowed-remove-of-the-older-run": '"outcome": "removed"',
        "http-dedup/narrowed-remove-then-another-run-h2-2[h2]": "broker: expected 1 line(s)",
    },
    "status": {
        "http-status/415-text-plain[h2]": "status 400, expected 415",
        "http-status/415-text-plain[http/1.1]": "status 400, expected 415",
    },
    "busy": {"http-backpressure/503-when-queue-full[h2]": "header retry-after: None"},
    "timeout": {"http-timeouts/408-headers-too-slow[http/1.1]": "status 400, expected 408"},
    "relay": {"peer-relay/peer-events-not-relayed": "h2: expected an array of 0 elements"},
    "remove-run": {"peer-relay/remove-carries-the-runid": '"runId": "r1"'},
    "keep-peers": {"peer-relay/dropped-peer-gets-nothing": "gone: expected an array of 0"},
    "pin": {"peer-relay/event-reaches-every-peer": "imposter: expected an array of 0"},
    "retry-after": {"peer-retry/retried-after-retry-after": "before the Retry-After"},
    "give-up": {"peer-retry/given-up-after-max-attempts": "dropped is 0, expected 1"},
    "snapshot": {
        "peer-snapshot/snapshot-after-restart": "fresh: expected an array of 4",
        "generated-versions-as-client/probe-after-2-0-0-repairs": "nothing arrived matching",
    },
    "413": {"peer-batches/413-halves-the-batch": "0 frames arrived, expected 40"},
    "bounds": {"peer-bounds/requests-within-the-bounds": "over the bound of 1048576"},
    "versions": {
        "http-status/202-notification[h2]": "HTTP 202 response without nvpair-contract-version"
    },
    "peer-software": {"peer-versions/status-names-them": "softwareVersion is"},
    "snapshot-removals": {"peer-snapshot-removals/snapshot-with-two-removals": "back: expected"},
    "snapshot-refused": {
        "peer-snapshot-refused/snapshot-sent-again-after-503": "6 frames arrived, expected 10",
        "peer-snapshot-refused/snapshot-sent-again-after-413": "6 frames arrived, expected 10",
    },
}


def test_every_group_has_a_stand_in() -> None:
    caught = {name.split("/")[0] for vectors_ in STAND_INS.values() for name in vectors_}
    caught |= groups_with_a_stand_in()  # edges.json: stand-ins in tests/blind_wm.py
    assert caught == {g["group"] for g in vectors.load(BEHAVIOUR)}
    spec = importlib.util.spec_from_file_location("broken_wm", ROOT / "tests" / "broken_wm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert set(module.MODES) == set(STAND_INS)


# Groups run beside a stand-in's own where its fault fails about half of them (local-batches
# is all batches): cases the fault cannot touch, so that "one fault, not chaos" stays a claim.
CONTEXT: dict[str, list[str]] = {"batch-order": ["local-requests"]}


@pytest.mark.parametrize("mode", sorted(STAND_INS))
def test_kit_catches_a_broken_implementation(mode: str) -> None:
    caught = STAND_INS[mode]
    groups = sorted({name.split("/")[0] for name in caught} | set(CONTEXT.get(mode, [])))
    only = [a for g in groups for a in ("--only", g)]
    # A short answer timeout: some faults make the kit wait for what never comes.
    status, doc = kit_json(*only, "--timeout", "3", "--", *BROKEN, mode, "--bind", "127.0.0.1")
    assert status == 1
    failed = {r["name"]: " ".join(r["problems"]) for r in doc["results"] if not r["passed"]}
    for name, why in caught.items():
        assert name in failed, sorted(failed)
        assert why in failed[name], failed[name]
    assert doc["failed"] == len(failed) and doc["passed"] > len(failed)  # one fault, not chaos


def test_kit_reports_an_implementation_that_does_not_start() -> None:
    status, doc = kit_json("--only", "local-requests", "--", sys.executable, "-c", "pass")
    assert status == 1
    assert doc["results"][0]["name"] == "local-requests/startup"
    assert not doc["results"][0]["passed"]


def test_kit_usage_errors_exit_2() -> None:
    assert kit("--only", "no-such-group", "--", *NVPAIR_WM).returncode == 2
    assert kit("--only", "local-requests").returncode == 2  # no command
    listed = kit("--list")
    assert listed.returncode == 0 and "http-backpressure" in listed.stdout


@pytest.mark.serial  # a wall-clock bound: run alone (Makefile: test)
def test_kit_fails_a_silent_implementation_quickly(tmp_path: Path) -> None:
    """An implementation that says ready and then never answers: one timeout, not one per case."""
    script = tmp_path / "silent.py"
    script.write_text(
        "import sys\n"
        'print(\'{"jsonrpc":"2.0","method":"ready","params":{"version":"0","contractVersion":"1.0.0"}}\','
        " flush=True)\n"
        "sys.stdin.read()\n"
    )
    status, doc = kit_json(
        "--only", "local-requests", "--timeout", "2", "--", sys.executable, str(script)
    )
    assert status == 1
    results = {r["name"]: r for r in doc["results"]}
    assert results["local-requests/startup"]["passed"]
    first = results["local-requests/status-integer-id"]
    assert not first["passed"] and "within" in first["problems"][0]
    rest = [r for r in doc["results"] if r["case"] not in ("startup", "status-integer-id", "exit")]
    assert rest and all("not run" in r["problems"][0] for r in rest)
    assert doc["seconds"] < 15
