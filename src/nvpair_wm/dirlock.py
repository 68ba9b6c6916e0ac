"""One daemon per cluster directory: ``CLUSTER/nvpair-wm.lock``, flocked, holding its pid.

Two daemons on one cluster directory would run with one identity (its peers could not tell
them apart) and race over its journal, so the second one is refused before it starts. The lock
is an ``flock`` (``LockFileEx`` on Windows: :mod:`nvpair_wm.platforms`; the system releases it
when the holder ends, however it ends: there is never a stale lock to clean up) on a file that
holds the holder's pid, so that the refusal can name it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from nvpair_wm.errors import ClusterDirInUse
from nvpair_wm.platforms import lock_file, read_at, write_at

__all__ = ["LOCK_FILE", "ClusterDirLock", "acquire"]

LOCK_FILE: Final = "nvpair-wm.lock"
#: A pid is at most this many bytes of text (Linux caps pids at 2**22).
_PID_TEXT_BYTES: Final = 32


class ClusterDirLock:
    """The held lock: released by :meth:`release` or by the process's end."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _holder(fd: int) -> int | None:
    """The pid the holder wrote, or None (not written yet, or not a pid)."""
    text = read_at(fd, _PID_TEXT_BYTES, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def acquire(directory: Path) -> ClusterDirLock:
    """Lock ``directory`` for this process and write its pid into the lock file.

    Raises :class:`ClusterDirInUse` (naming the lock and the holder's pid) when another
    process holds it, and OSError when the lock file cannot be opened. Nothing is written when
    the lock is refused."""
    path = directory / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited (PEP 446)
    try:
        lock_file(fd)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise ClusterDirInUse(path, holder) from None
    except OSError:
        os.close(fd)
        raise
    try:
        os.ftruncate(fd, 0)
        write_at(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        os.close(fd)
        raise
    return ClusterDirLock(path, fd)
