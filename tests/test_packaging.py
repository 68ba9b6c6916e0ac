"""The daemon as a user or a broker team installs it: a wheel built with ``python -m build``
from a copy of the tree, installed with its real runtime dependencies into a fresh virtual
environment, then run from there (not from this tree, not from the dev .venv).

Also ``pipx install .``. pip's cache keeps this to some tens of seconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from nvpair_wm_schema.contract import CONTRACT_VERSION

from nvpair_wm import __version__
from nvpair_wm.conformance import codec
from tests.support.conformance import SCHEMA_DIR
from tests.support.source_tree import ROOT, copy_tree

TIMEOUT = 300.0  # a cold pip cache downloads every runtime dependency


def run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, input: str = "") -> str:
    """Run to completion; fail with the command's own output if it does not exit 0."""
    done = subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without this test run's virtualenv or import path."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(extra)
    return env


def packages_in_tree() -> set[str]:
    """Every importable package of the project: each directory with ``__init__.py`` under
    ``src/`` and ``generated/``. Found on disk so that a new subpackage is checked unasked."""
    found = set()
    for base in (ROOT / "src", ROOT / "generated"):
        for init in base.rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(".".join(init.parent.relative_to(base).parts))
    return found


@dataclass
class Installed:
    wheel: Path
    bin: Path
    work: Path  # an empty directory to run commands in, outside the source tree


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    assert importlib.util.find_spec("build"), "build is missing: make venv (or pip install build)"
    base = tmp_path_factory.mktemp("packaging")
    src = copy_tree(base / "src")
    dist = base / "dist"
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(src)], cwd=base)
    (wheel,) = dist.glob("*.whl")
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    run([str(py), "-m", "pip", "install", "--quiet", str(wheel)], cwd=base, env=clean_env())
    work = base / "work"
    work.mkdir()
    yield Installed(wheel, env_dir / "bin", work)


def test_wheel_holds_every_package_py_typed_and_the_generated_schema(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    expected = packages_in_tree()
    assert {"nvpair_wm", "nvpair_wm.http", "nvpair_wm_schema"} <= expected
    for package in sorted(expected):
        assert f"{package.replace('.', '/')}/__init__.py" in names, package
    assert "nvpair_wm/py.typed" in names
    assert "nvpair_wm_schema/py.typed" in names
    modules = {p.removesuffix(".py") for p in names if p.endswith(".py")}
    for path in (ROOT / "src").rglob("*.py"):
        assert str(path.relative_to(ROOT / "src").with_suffix("")) in modules, path


def test_version_comes_from_one_place(installed: Installed) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert installed.wheel.name.startswith(f"nvpair_wm-{__version__}-")
    out = run([str(installed.bin / "nvpair-wm"), "--version"], cwd=installed.work)
    assert out.strip() == f"nvpair-wm {__version__} (contract {CONTRACT_VERSION})"


def test_installed_daemon_answers_on_stdio_and_exits_0_at_eof(installed: Installed) -> None:
    where = run(
        [str(installed.bin / "python"), "-c", "import nvpair_wm.http; print(nvpair_wm.__file__)"],
        cwd=installed.work,
        env=clean_env(),
    )
    assert Path(where.strip()).is_relative_to(installed.bin.parent), where  # not this tree
    frame = {"jsonrpc": "2.0", "method": "manager:status", "id": 1}
    out = run(
        [str(installed.bin / "nvpair-wm"), "--port", "0", "--bind", "127.0.0.1"],
        cwd=installed.work,
        env=clean_env(),
        input=json.dumps(frame) + "\n",
    )
    ready, reply = (json.loads(line) for line in out.splitlines())
    params = {"version": __version__, "contractVersion": CONTRACT_VERSION}
    assert ready == {"jsonrpc": "2.0", "method": "ready", "params": params}
    assert reply["id"] == 1 and reply["result"]["version"] == __version__
    assert reply["result"]["port"] > 0


def test_installed_cluster_tool_makes_a_cluster(installed: Installed) -> None:
    tool = str(installed.bin / "nvpair-wm-cluster")
    run([tool, "init", "cl", "--nodes", "2"], cwd=installed.work, env=clean_env())
    fingerprint = run(
        [tool, "fingerprint", "cl/node-1/node.crt"], cwd=installed.work, env=clean_env()
    ).strip()
    assert len(fingerprint) == 64 and int(fingerprint, 16) >= 0
    pinned = installed.work / "cl" / "node-2" / "trusted" / "node-1.crt"
    assert run([tool, "fingerprint", str(pinned)], cwd=installed.work).strip() == fingerprint


def test_installed_conformance_kit_carries_its_vectors_and_passes_the_installed_daemon(
    installed: Installed,
) -> None:
    """A team in another language installs the wheel and runs the kit, in both roles (broker
    and client, and peer): the behaviour vectors must be inside it (they live in
    schema/conformance/behaviour/ in the tree)."""
    kit = str(installed.bin / "nvpair-wm-conformance")
    groups = run([kit, "--list"], cwd=installed.work, env=clean_env())
    for group in ("local-errors", "local-framing", "http-status", "http-dedup", "peer-relay"):
        assert group in groups, groups
    daemon = str(installed.bin / "nvpair-wm")
    out = run(
        [kit, "--json", "--only", "local-errors", "--only", "peer-relay", "--", daemon],
        cwd=installed.work,
        env=clean_env(),
    )
    report = json.loads(out)
    ran = {r["group"] for r in report["results"]}
    assert ran == {"local-errors", "peer-relay"}, out
    assert report["failed"] == 0 and report["passed"] >= 30, out
    # The vectors make gen derives from the schema, and a seeded exploration judged by the
    # model: both run from the wheel alone (no jsonschema, no hypothesis in it).
    out = run(
        [kit, "--json", "--only", "generated-*", "--scenarios", "1", "--", daemon],
        cwd=installed.work,
        env=clean_env(),
    )
    report = json.loads(out)
    ran = {r["group"] for r in report["results"]}
    assert ran == {"generated-schema", "generated-versions-as-client", "explore"}, out
    assert report["failed"] == 0 and report["passed"] >= 400, out
    # The codec role from the wheel alone: every shape vector and behaviour frame goes to the
    # program (here one that refuses everything, so the kit exits 1 and names disagreements).
    refuser = installed.work / "refuse.py"
    refuser.write_text('import sys\nfor _ in sys.stdin:\n    print("error\\t$\\tno", flush=True)\n')
    proc = subprocess.run(
        [kit, "--json", "--codec", "--", sys.executable, str(refuser)],
        cwd=installed.work,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    cases = codec.all_cases(SCHEMA_DIR / "conformance", SCHEMA_DIR / "conformance" / "behaviour")
    assert doc["cases"] == len(cases), proc.stdout[-2000:]
    assert len(doc["disagreements"]) >= sum(c.valid for c in cases) > 0  # each valid one refused


def test_pipx_install_gives_working_commands(tmp_path: Path) -> None:
    """``pipx install .`` from a copy of the tree; pipx itself comes from pip, into a venv."""
    tools = tmp_path / "tools"
    venv.EnvBuilder(with_pip=True).create(tools)
    run([str(tools / "bin" / "python"), "-m", "pip", "install", "--quiet", "pipx"], cwd=tmp_path)
    src = copy_tree(tmp_path / "src")
    env = clean_env(
        PIPX_HOME=str(tmp_path / "pipx-home"),
        PIPX_BIN_DIR=str(tmp_path / "bin"),
        PIPX_MAN_DIR=str(tmp_path / "man"),
    )
    run([str(tools / "bin" / "pipx"), "install", str(src)], cwd=tmp_path, env=env)
    out = run([str(tmp_path / "bin" / "nvpair-wm"), "--version"], cwd=tmp_path, env=env)
    assert out.strip() == f"nvpair-wm {__version__} (contract {CONTRACT_VERSION})"
    out = run([str(tmp_path / "bin" / "nvpair-wm-cluster"), "--help"], cwd=tmp_path, env=env)
    assert "init" in out
