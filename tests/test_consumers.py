"""Consumers of ``schema/`` in other languages, run with their real toolchains.

- Go (``consumers/go``): standard-library types for every frame, decoding every valid shape
  vector with ``encoding/json`` and re-encoding it with absent and null kept apart, requests
  kept requests and notifications kept notifications (``go vet`` and ``go test``).
- TypeScript (``consumers/ts``): Ajv in strict mode validates every shape vector; types made by
  json-schema-to-typescript compile under ``tsc --strict`` with a ``never`` switch over
  ``method``.

A missing toolchain FAILS with the command that installs it (``.ci/run`` installs them first).
Adds about 10 s when the Go build cache is warm, 30 s when it is cold.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.tools import tool

ROOT = Path(__file__).resolve().parents[1]
GO_DIR = ROOT / "consumers" / "go"
TS_DIR = ROOT / "consumers" / "ts"


def _go_env() -> dict[str, str]:
    cache = Path(tempfile.gettempdir()) / f"nvpair-wm-go-{os.getuid()}"
    return {
        **os.environ,
        "GOCACHE": str(cache / "build"),
        "GOPATH": str(cache / "path"),
        "GOFLAGS": "",
        "GOPROXY": "off",  # standard library only: nothing may be downloaded
        "GO111MODULE": "on",
    }


def _run(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> str:
    proc = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def test_go_consumer_is_gofmt_clean_and_vetted() -> None:
    go = tool("go", "golang-go")
    gofmt = tool("gofmt", "golang-go")
    unformatted = _run([gofmt, "-l", "."], GO_DIR).strip()
    assert not unformatted, f"not gofmt-formatted: {unformatted}"
    _run([go, "vet", "./..."], GO_DIR, _go_env())


def test_go_consumer_round_trips_every_valid_vector() -> None:
    go = tool("go", "golang-go")
    out = _run([go, "test", "-count=1", "-v", "./..."], GO_DIR, _go_env())
    assert "--- PASS: TestEveryValidShapeVectorRoundTrips" in out, out
    for fault in (
        "TestNotificationStaysANotification",
        "TestAbsentRequesterIDStaysAbsentAndNullStaysNull",
        "TestIntegralFloatIsAnInteger",
        "TestScheduledOnNullIsRefused",
    ):
        assert f"--- PASS: {fault}" in out, out
    assert "--- FAIL" not in out


# -- TypeScript -------------------------------------------------------------------------------

TSC_FLAGS = [
    "--strict",
    "--exactOptionalPropertyTypes",
    "--noUncheckedIndexedAccess",
    "--noEmit",
    "--target",
    "es2022",
    "--module",
    "esnext",
    "--moduleResolution",
    "bundler",
]


def _node() -> str:
    exe = tool("node", "nodejs npm")
    if not (TS_DIR / "node_modules" / "typescript" / "package.json").is_file():
        pytest.fail("the Node packages are not installed: npm ci --prefix consumers/ts")
    return exe


def _node_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_node(), *args], capture_output=True, text=True, timeout=120, check=False
    )


def _tsc(*files: Path) -> subprocess.CompletedProcess[str]:
    tsc = TS_DIR / "node_modules" / "typescript" / "bin" / "tsc"
    return _node_run(str(tsc), *TSC_FLAGS, *map(str, files))


def test_ajv_strict_agrees_with_every_shape_vector() -> None:
    proc = _node_run(str(TS_DIR / "vectors.mjs"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    agree, total = map(int, proc.stdout.split()[0].split("/"))
    assert agree == total >= 800, proc.stdout


def test_ajv_vector_check_has_teeth(tmp_path: Path) -> None:
    """Drop one bound (seq's maximum) from a copy of schema/: some vectors must disagree."""
    copy = tmp_path / "schema"
    shutil.copytree(ROOT / "schema", copy, ignore=shutil.ignore_patterns("released"))
    path = copy / "workload-info.schema.json"
    text = path.read_text()
    schema = json.loads(text)
    del schema["$defs"]["Seq"]["maximum"]
    path.write_text(json.dumps(schema))
    proc = _node_run(str(TS_DIR / "vectors.mjs"), str(copy))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "WRONG workload-info.json" in proc.stdout, proc.stdout


def _package_copy(tmp_path: Path) -> Path:
    """The package's generated types and runtime, and consumer.ts, copied beside each other."""
    for sub in ("generated", "lib"):
        shutil.copytree(TS_DIR / sub, tmp_path / sub)
    shutil.copy(TS_DIR / "consumer.ts", tmp_path / "consumer.ts")
    return tmp_path / "generated" / "contract.d.ts"


def test_generated_types_are_closed_and_the_consumer_compiles_under_tsc_strict(
    tmp_path: Path,
) -> None:
    """One tsc run compiles the consumer (no error allowed) and a copy with two faults, an
    unhandled method and a typo (`f.parms`), which must each be refused: the checks have teeth."""
    types = _package_copy(tmp_path).read_text()
    assert "export type InboundFrame" in types and "export type BrokerFrame" in types
    for body in re.findall(r"^export interface \w+ \{\n(.*?)^\}", types, re.M | re.S):
        assert not re.search(r"^ +\[", body, re.M), f"a catch-all index signature: {body}"
    consumer = tmp_path / "consumer.ts"
    text = consumer.read_text()
    status_case = '    case "manager:status":\n      return `status request ${String(frame.id)}`;\n'
    assert status_case in text
    broken = tmp_path / "broken.ts"
    broken.write_text(
        text.replace(status_case, "")
        + "\nexport const typo = (f: InboundFrame): unknown => f.parms;\n"
    )
    proc = _tsc(consumer, broken)
    errors = [line for line in proc.stdout.splitlines() if ": error TS" in line]
    assert errors, proc.stdout + proc.stderr
    assert all("broken.ts(" in line for line in errors), errors  # consumer.ts is clean
    assert any("is not assignable to parameter of type 'never'" in e for e in errors), errors
    assert any("Property 'parms' does not exist" in e for e in errors), errors
    assert len(errors) == 2, errors


def test_gen_types_never_fetches_a_ref(tmp_path: Path) -> None:
    copy = tmp_path / "schema"
    copy.mkdir()
    for f in (ROOT / "schema").glob("*.schema.json"):
        shutil.copy(f, copy / f.name)
    path = copy / "node-record.schema.json"
    schema = json.loads(path.read_text())
    schema["properties"]["nodeId"] = {
        "$ref": "https://schemas.nvpair.dev/wm/v1/missing.schema.json"
    }
    path.write_text(json.dumps(schema))
    proc = _node_run(str(TS_DIR / "gen-types.mjs"), str(tmp_path / "t.ts"), str(copy))
    assert proc.returncode != 0
    assert "not one of the schema files (no network)" in proc.stdout + proc.stderr
