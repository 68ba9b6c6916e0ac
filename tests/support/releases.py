"""Earlier releases of nvpair-wm, rebuilt from git history into venvs of their own.

``releases.toml`` names the commit of every release. :func:`build` takes that commit's tree out
of git (``git archive COMMIT | tar -x``: no checkout, the working tree is not touched), makes a
venv beside it and ``pip install``s it there, as a user would install that release; what it
returns runs that release's ``nvpair-wm``. A build is kept under ``.releases/`` (named by
version and commit, so a moved record builds again) and reused; a lock makes concurrent
builders wait for one another instead of building twice.

It needs the commit in this clone's history (a shallow clone says so, with the command that
fetches it) and PyPI for the release's dependencies, nothing else.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nvpair_wm import __version__

__all__ = ["RELEASES_FILE", "Release", "ReleaseError", "build", "previous", "releases"]

ROOT: Final = Path(__file__).resolve().parents[2]
RELEASES_FILE: Final = ROOT / "releases.toml"
CACHE: Final = ROOT / ".releases"
BUILD_TIMEOUT: Final = 600.0  # seconds for one venv + pip install (a busy machine, cold cache)


class ReleaseError(RuntimeError):
    """A release cannot be built here; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Release:
    version: str
    contract: str
    commit: str
    date: str

    @property
    def key(self) -> tuple[int, ...]:
        return version_key(self.version)


def version_key(version: str) -> tuple[int, ...]:
    """``0.10.1`` → (0, 10, 1): releases sort by number, not by text."""
    return tuple(int(part) for part in version.split("-", 1)[0].split("."))


def releases(path: Path = RELEASES_FILE) -> list[Release]:
    """Every recorded release, oldest first."""
    data = tomllib.loads(path.read_text())
    found = [Release(**entry) for entry in data.get("release", [])]
    return sorted(found, key=lambda r: r.key)


def previous(current: str = __version__) -> Release:
    """The newest release older than ``current`` (this tree's version by default)."""
    older = [r for r in releases() if r.key < version_key(current)]
    if not older:
        raise ReleaseError(f"releases.toml records no release older than {current}")
    return older[-1]


def find(version: str) -> Release:
    for release in releases():
        if release.version == version:
            return release
    known = ", ".join(r.version for r in releases())
    raise ReleaseError(f"release {version} is not in releases.toml (recorded: {known})")


def build(release: Release, cache: Path = CACHE) -> list[str]:
    """The command that runs ``release``'s ``nvpair-wm`` (built on first use, then kept)."""
    where = cache / f"{release.version}-{release.commit[:12]}"
    exe = where / "venv" / "bin" / "nvpair-wm"
    done = where / ".built"
    if done.exists():
        return [str(exe)]
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another builder finishes first; then it is there
        if not done.exists():
            _build(release, where)
            done.touch()
    return [str(exe)]


def _build(release: Release, where: Path) -> None:
    _have_commit(release)
    shutil.rmtree(where, ignore_errors=True)  # what a killed build left
    tree = where / "src"
    tree.mkdir(parents=True)
    archive = subprocess.Popen(
        ["git", "-C", str(ROOT), "archive", "--format=tar", release.commit],
        stdout=subprocess.PIPE,
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
    assert archive.stdout is not None
    archive.stdout.close()
    if archive.wait() != 0:
        raise ReleaseError(f"git archive {release.commit} failed")
    venv = where / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], f"python -m venv for {release.version}")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-input"]
    _run([*pip, str(tree)], f"pip install of release {release.version} ({release.commit[:12]})")
    out = subprocess.run(
        [str(venv / "bin" / "nvpair-wm"), "--version"], capture_output=True, text=True, check=False
    )
    if release.version not in out.stdout:
        raise ReleaseError(
            f"the build of {release.commit[:12]} says {out.stdout.strip()!r}, not "
            f"{release.version}: releases.toml names the wrong commit"
        )


def _have_commit(release: Release) -> None:
    probe = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{release.commit}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        raise ReleaseError(
            f"commit {release.commit[:12]} of release {release.version} is not in this clone "
            "(a shallow clone?): git fetch --unshallow (or git fetch origin "
            f"{release.commit}) fetches it"
        )


def _run(cmd: list[str], what: str) -> None:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT, env=env, check=False
    )
    if proc.returncode != 0:
        raise ReleaseError(f"{what} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
