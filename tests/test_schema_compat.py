"""The breaking-change gate (scripts/schema_compat.py): each kind of change, judged right.

Each case edits a copy of the real schema/ and compares it with the original: the breaking
cases the compatibility policy names must be reported as breaking, the additive ones must pass.
The last tests run the gate itself: on the repository (schema/ against schema/released/), and
on a breaking change with and without a major version bump.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "schema_compat.py"


def load_compat() -> ModuleType:
    spec = importlib.util.spec_from_file_location("schema_compat", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["schema_compat"] = module
    spec.loader.exec_module(module)
    return module


compat = load_compat()
Schemas = dict[str, Any]
BASE = compat.load_dir(ROOT / "schema")


def defs(s: Schemas, file: str) -> Any:
    return s[file]["$defs"]


def info(s: Schemas) -> Any:
    return s["workload-info.schema.json"]


def remove_params(s: Schemas) -> Any:
    return defs(s, "workloads-remove.schema.json")["RemoveParams"]


def rename_run_id(s: Schemas) -> None:
    props = remove_params(s)["properties"]
    props["run"] = props.pop("runId")


def add_file(s: Schemas) -> None:
    s["workloads-pause.schema.json"] = {
        "$id": "https://schemas.nvpair.dev/wm/v1/workloads-pause.schema.json",
        "title": "WorkloadsPause",
        "type": "object",
        "required": ["jsonrpc", "method"],
        "properties": {"jsonrpc": {"const": "2.0"}, "method": {"const": "workloads:pause"}},
    }
    s["inbound-frame.schema.json"]["oneOf"].append({"$ref": "workloads-pause.schema.json"})


def add_error_code(s: Schemas) -> None:
    branches = defs(s, "jsonrpc.schema.json")["ErrorCode"]["oneOf"]
    branches.append({"title": "Busy", "description": "new", "const": -32002})


BREAKING: dict[str, tuple[Callable[[Schemas], Any], str]] = {
    "removed property": (lambda s: remove_params(s)["properties"].pop("runId"), "removed"),
    "renamed property": (rename_run_id, "property removed"),
    "new required member": (lambda s: info(s)["required"].append("requesterId"), "newly"),
    "new required property": (
        lambda s: (
            remove_params(s)["properties"].update(reason={"type": "string"}),
            remove_params(s)["required"].append("reason"),
        ),
        "required property added",
    ),
    "member no longer required": (lambda s: info(s)["required"].remove("error"), "no longer"),
    "narrowed type": (
        lambda s: defs(s, "jsonrpc.schema.json")["RequestId"]["anyOf"].pop(),
        "branch",
    ),
    "narrowed type keyword": (
        lambda s: info(s)["$defs"]["Seq"].update(type="string"),
        "type narrowed",
    ),
    "lowered maximum": (
        lambda s: defs(s, "manager-status.schema.json")["Count"].update(maximum=2**31 - 1),
        "maximum narrowed",
    ),
    "raised minimum": (lambda s: info(s)["$defs"]["Seq"].update(minimum=2), "minimum narrowed"),
    "shorter maxLength": (
        lambda s: remove_params(s)["properties"]["workloadId"].update(maxLength=255),
        "maxLength narrowed",
    ),
    "new maxItems": (
        lambda s: defs(s, "manager-status.schema.json")["StatusResult"]["properties"][
            "peers"
        ].update(maxItems=10),
        "maxItems narrowed",
    ),
    "removed enum value": (
        lambda s: info(s)["$defs"]["WorkloadState"]["enum"].remove("cancelled"),
        "enum values removed",
    ),
    "removed error code": (
        lambda s: defs(s, "jsonrpc.schema.json")["ErrorCode"]["oneOf"].pop(),
        "enum values removed",
    ),
    "changed const": (
        lambda s: s["ready.schema.json"]["properties"]["method"].update(const="hello"),
        "const changed",
    ),
    "changed pattern": (
        lambda s: defs(s, "node-record.schema.json")["Fingerprint"].update(pattern="^[0-9a-f]+$"),
        "pattern changed",
    ),
    "changed default": (
        lambda s: s["node-record.schema.json"]["properties"]["port"].update(default=443),
        "default changed",
    ),
    "closed object": (
        lambda s: info(s).update(additionalProperties=False),
        "additionalProperties closed",
    ),
    "removed file": (lambda s: s.pop("workloads-upsert.schema.json"), "schema file removed"),
    "removed definition": (
        lambda s: defs(s, "manager-status.schema.json").pop("StatusResponse"),
        "definition removed",
    ),
    "removed union branch": (
        lambda s: s["broker-frame.schema.json"]["oneOf"].pop(),
        "branch",
    ),
    "renamed type": (
        lambda s: defs(s, "jsonrpc.schema.json")["ErrorData"].update(title="ErrorDetail"),
        "title changed",
    ),
}

ADDITIVE: dict[str, Callable[[Schemas], Any]] = {
    "optional property": lambda s: remove_params(s)["properties"].update(note={"type": "string"}),
    "enum value": lambda s: info(s)["$defs"]["WorkloadState"]["enum"].append("paused"),
    "error code": add_error_code,
    "wider maxLength": lambda s: remove_params(s)["properties"]["workloadId"].update(maxLength=512),
    "lower minimum": lambda s: info(s)["$defs"]["Seq"].update(minimum=0),
    "new definition": lambda s: defs(s, "jsonrpc.schema.json").update(Extra={"type": "string"}),
    "new method (file and union branch)": add_file,
    "description": lambda s: info(s).update(description="reworded"),
    "examples": lambda s: info(s).update(examples=[]),
    "type widened": lambda s: info(s)["$defs"]["Seq"].update(type=["integer", "string"]),
}


@pytest.mark.parametrize("case", sorted(BREAKING))
def test_breaking_change_is_reported(case: str) -> None:
    mutate, expected = BREAKING[case]
    new = copy.deepcopy(BASE)
    mutate(new)
    report = compat.compare(BASE, new)
    assert report.breaking, f"{case}: not reported (additive: {report.additive})"
    assert any(expected in line for line in report.breaking), report.breaking


@pytest.mark.parametrize("case", sorted(ADDITIVE))
def test_additive_change_is_allowed(case: str) -> None:
    new = copy.deepcopy(BASE)
    ADDITIVE[case](new)
    report = compat.compare(BASE, new)
    assert report.breaking == [], f"{case}: {report.breaking}"
    if case not in ("description", "examples"):
        assert report.additive, f"{case}: change not seen at all"


def test_the_same_contract_has_no_changes() -> None:
    report = compat.compare(BASE, copy.deepcopy(BASE))
    assert (report.breaking, report.additive) == ([], [])


def run_gate(schema: Path, released: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--schema", str(schema), "--released", str(released)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_repository_contract_is_compatible_with_its_last_release() -> None:
    """The gate `make test` runs: schema/ against schema/released/<major>.x/."""
    proc = run_gate(ROOT / "schema", ROOT / "schema" / "released")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (ROOT / "schema" / "released" / "1.x" / "VERSION").is_file()


def write(schemas: Schemas, version: str, path: Path) -> Path:
    path.mkdir(parents=True)
    for name, s in schemas.items():
        (path / name).write_text(json.dumps(s, indent=2))
    (path / "VERSION").write_text(version + "\n")
    return path


def test_gate_fails_a_breaking_change_without_a_major_bump(tmp_path: Path) -> None:
    released = tmp_path / "released"
    write(BASE, "1.0.0", released / "1.x")
    new = copy.deepcopy(BASE)
    info(new)["$defs"]["WorkloadState"]["enum"].remove("cancelled")
    for version, rc in (("1.0.0", 1), ("1.1.0", 1), ("2.0.0", 0)):
        proc = run_gate(write(new, version, tmp_path / version), released)
        assert proc.returncode == rc, f"{version}: {proc.stdout}{proc.stderr}"
        assert "BREAKING" in proc.stdout
    additive = copy.deepcopy(BASE)
    add_error_code(additive)
    proc = run_gate(write(additive, "1.0.0", tmp_path / "additive"), released)
    assert proc.returncode == 0, proc.stdout
    assert "release them as 1.1.0" in proc.stdout
    proc = run_gate(write(BASE, "0.9.0", tmp_path / "older"), released)
    assert proc.returncode == 1 and "older than the released" in proc.stdout


def test_release_records_the_contract(tmp_path: Path) -> None:
    src = write(BASE, "1.2.0", tmp_path / "schema")
    proc = run_gate(src, tmp_path / "rel")
    assert proc.returncode == 1 and "no released contract" in proc.stdout
    subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--release",
            "--schema",
            str(src),
            "--released",
            str(tmp_path / "rel"),
        ],
        check=True,
        capture_output=True,
    )
    assert (tmp_path / "rel" / "1.x" / "VERSION").read_text().strip() == "1.2.0"
    assert compat.load_dir(tmp_path / "rel" / "1.x") == compat.load_dir(src)
    assert run_gate(src, tmp_path / "rel").returncode == 0
