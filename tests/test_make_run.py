"""``make run`` exactly as the README says, on a copy of the tree without ``.venv`` (what a fresh
clone has): it installs the runtime dependencies only, and its stdout carries nothing but the
daemon's JSON-RPC frames (no command echo, no pip output), cold and warm.

About 20 s with a warm pip cache (venv creation and the runtime install).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.source_tree import copy_tree
from tests.support.tools import tool

TIMEOUT = 300.0  # a cold pip cache downloads the runtime dependencies


def make_run(tree: Path, frame: dict[str, object]) -> subprocess.CompletedProcess[str]:
    make = tool("make")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(name, None)  # as typed in a shell, not as a sub-make
    return subprocess.run(
        [make, "run", "ARGS=--port 0 --bind 127.0.0.1"],
        cwd=tree,
        env=env,
        input=json.dumps(frame) + "\n",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def frames_only(stdout: str) -> list[dict[str, object]]:
    """Every stdout line must be a JSON-RPC frame."""
    frames = []
    for line in stdout.splitlines():
        frame = json.loads(line)  # anything else (make's echo, pip) fails here
        assert isinstance(frame, dict) and frame.get("jsonrpc") == "2.0", line
        frames.append(frame)
    return frames


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_tree(tmp_path_factory.mktemp("make-run") / "tree")


def test_make_run_installs_runtime_only_and_stdout_is_frames_only(tree: Path) -> None:
    assert not (tree / ".venv").exists()
    frame = {"jsonrpc": "2.0", "method": "manager:status", "id": 1}
    for attempt in ("cold", "warm"):
        done = make_run(tree, frame)
        assert done.returncode == 0, f"{attempt}: exit {done.returncode}\n{done.stderr}"
        ready, reply = frames_only(done.stdout)
        assert ready["method"] == "ready", attempt
        assert reply["id"] == 1 and "result" in reply, attempt
        installing = "installing nvpair-wm" in done.stderr
        assert installing == (attempt == "cold"), done.stderr
    stamps = sorted(p.name.rsplit("-", 1)[0] for p in (tree / ".venv").glob(".installed-*"))
    assert stamps == [".installed-run"]
    bin_dir = tree / ".venv" / "bin"
    assert (bin_dir / "nvpair-wm").exists() and (bin_dir / "nvpair-wm-cluster").exists()
    for dev_tool in ("pytest", "ruff", "mypy", "datamodel-codegen", "hypercorn"):
        assert not (bin_dir / dev_tool).exists(), f"make run installed {dev_tool}"
