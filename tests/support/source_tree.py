"""A copy of this source tree as a fresh clone would have it, for tests that build or install.

``git clone`` would miss uncommitted work, so the copy takes what git would commit: tracked files
plus untracked ones that ``.gitignore`` does not exclude (no ``.venv``, no caches, no build
outputs). Building in a copy also keeps ``build/`` and ``*.egg-info`` out of the working tree.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests/support/source_tree.py


def tree_files(root: Path = ROOT) -> list[str]:
    """Paths (relative to ``root``) of the files a commit of the working tree would hold."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    paths = out.decode().split("\0")
    return [p for p in paths if p and ((root / p).is_symlink() or (root / p).is_file())]


def copy_tree(dest: Path, root: Path = ROOT) -> Path:
    """Copy the working tree (see the module docstring) into ``dest``; returns ``dest``."""
    for rel in tree_files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if (root / rel).is_symlink():  # as git stores it: the link, not what it points to
            target.symlink_to((root / rel).readlink())
        else:
            shutil.copy2(root / rel, target)
    return dest
