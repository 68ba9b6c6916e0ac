"""Another tree of nvpair-wm to measure beside this one: a commit or a directory.

A change to a hot path states its cost with the old and the new commit alternated in one
session, so drift and load affect both alike. ``python -m bench --baseline COMMIT|DIR`` gives
the benchmarks that support it (``startup``, ``realpeer``) such a tree: its daemon runs from
its own ``src/`` and ``generated/`` (``PYTHONPATH``) with this tree's interpreter and packages.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.harness import ROOT


@dataclass(frozen=True)
class Tree:
    """A tree to start: this one (``path`` None: the installed package) or a baseline."""

    name: str
    path: Path | None

    def env(self) -> dict[str, str]:
        """The environment to start it in: with bytecode cached, as a restart of an installed
        daemon finds it (pip compiles at install time), even where PYTHONDONTWRITEBYTECODE is
        set for development (compiling every module again is a cost a restart does not have)."""
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if self.path is not None:
            env["PYTHONPATH"] = f"{self.path / 'src'}{os.pathsep}{self.path / 'generated'}"
        return env


THIS_TREE = Tree("this tree", None)


def baseline_tree(spec: str, scratch: Path) -> Tree:
    """A directory as it is, or a commit exported with ``git archive`` into ``scratch``."""
    given = Path(spec)
    if (given / "src" / "nvpair_wm").is_dir():
        return Tree(f"baseline {given}", given)
    out = scratch / f"baseline-{spec}"
    out.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", spec], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return Tree(f"baseline {spec}", out)
