"""The journal's file operations: whole writes, temporary files renamed over the log, fsyncs
of files and directories (any thread), and the directory lock (one process per journal)."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Final

from nvpair_wm import platforms
from nvpair_wm.platforms import lock_directory  # one process per journal: the directory's lock

__all__ = [
    "close_quietly",
    "copy_range",
    "fsync_and_close",
    "fsync_dir",
    "fsync_directory",
    "install",
    "lock_directory",
    "temp_of",
    "write_all",
    "write_temp",
]


def write_all(fd: int, data: bytes) -> None:
    n = os.write(fd, data)
    if n == len(data):  # the usual answer for a regular file: no view, no slicing
        return
    view = memoryview(data)[n:]
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(directory: Path) -> None:
    """A rename in ``directory`` made durable (nothing to do on Windows: ``platforms``)."""
    platforms.sync_directory(directory)


def temp_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


def write_temp(path: Path, data: bytes) -> Path:
    """``data`` in a fresh, fsynced temporary file next to ``path``."""
    tmp = temp_of(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


_COPY_CHUNK: Final = 1 << 20


def copy_range(src: Path, start: int, end: int, dst: Path) -> int:
    """Append bytes ``start:end`` of ``src`` to ``dst`` and fsync it; how many were copied."""
    fin = os.open(src, os.O_RDONLY)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_APPEND)
        try:
            pos = start
            while pos < end:
                chunk = platforms.read_at(fin, min(_COPY_CHUNK, end - pos), pos)
                if not chunk:
                    raise OSError(errno.EIO, f"{src} is shorter than {end} bytes")
                write_all(fout, chunk)
                pos += len(chunk)
            os.fsync(fout)
        finally:
            os.close(fout)
    finally:
        os.close(fin)
    return end - start


def install(tmp: Path, path: Path, *, sync: bool = True) -> int:
    """Rename the temporary file over the journal (durably, with ``sync``); an append
    descriptor on it."""
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)
    return os.open(path, os.O_WRONLY | os.O_APPEND)


def close_quietly(fd: int) -> None:
    """Close a descriptor whose errors no longer matter (any thread)."""
    with contextlib.suppress(OSError):
        os.close(fd)


def fsync_directory(directory: Path) -> OSError | None:
    """fsync a directory from :meth:`Journal.directory_to_sync` (any thread)."""
    try:
        fsync_dir(directory)
    except OSError as exc:
        return exc
    return None


def fsync_and_close(fd: int) -> OSError | None:
    """fsync a descriptor from :meth:`Journal.sync_descriptor` and close it (any thread)."""
    try:
        os.fsync(fd)
    except OSError as exc:
        return exc
    finally:
        os.close(fd)
    return None
