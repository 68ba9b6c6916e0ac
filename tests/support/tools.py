"""The command-line tools from apt the tests run (strace, curl, openssl, ...): each found on
``PATH``, or the test fails naming the command that installs it."""

from __future__ import annotations

import shutil


def tool(name: str, package: str | None = None) -> str:
    """The path of ``name``; missing, a failure that says ``apt-get install -y PACKAGE``
    (``package`` defaults to the tool's own name)."""
    path = shutil.which(name)
    assert path, f"{name} is missing: apt-get install -y {package or name}"
    return path
