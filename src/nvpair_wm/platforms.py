"""What differs between POSIX and Windows, in one place: each piece has a POSIX side and a
Windows side, and the rest of the daemon calls only these functions.

* File locks (the cluster directory's, the journal's): ``flock`` on POSIX, ``LockFileEx`` on
  Windows. Both are released by the system when the holder ends, however it ends.
* A directory cannot be opened on Windows: its lock is a file in it
  (:data:`DIRECTORY_LOCK_FILE`), and its entries are not fsynced (NTFS journals its metadata;
  Python has no call that flushes a directory there).
* Positioned reads and writes (``pread``/``pwrite`` are POSIX only).
* A file that is open cannot be replaced by a rename on Windows: the journal closes the
  descriptor it appends to before a compaction's file takes the log's name (``WINDOWS``).
* Files opened with ``os.open`` are binary on Windows (the C runtime's default is text, which
  turns every ``\\n`` written to the journal into ``\\r\\n``): set once, when this module loads,
  for the whole process (the node and its compaction child both import it through the
  journal).
* The descriptor limit (``RLIMIT_NOFILE``) exists on POSIX only; Windows sockets have none.
* Stop signals: SIGTERM and SIGINT through the event loop on POSIX; on Windows the proactor
  loop has no ``add_signal_handler``, so Ctrl+C (SIGINT) and Ctrl+Break (SIGBREAK) are caught
  by ``signal.signal`` and handed to the loop.
* ``--ipc``: a Windows named pipe (``\\\\.\\pipe\\NAME``) or a Unix socket path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "DIRECTORY_LOCK_FILE",
    "STOP_SIGNALS",
    "WINDOWS",
    "is_named_pipe",
    "lock_directory",
    "lock_file",
    "on_stop_signals",
    "open_files_limit",
    "raise_descriptor_limit",
    "read_at",
    "sync_directory",
    "write_at",
]

WINDOWS: Final = sys.platform == "win32"
#: Windows: the file in a directory whose lock stands for the directory's (POSIX locks the
#: directory itself).
DIRECTORY_LOCK_FILE: Final = "nvpair-wm.dir.lock"
_PIPE_PREFIXES: Final = ("\\\\.\\pipe\\", "//./pipe/")

if sys.platform == "win32":
    import ctypes
    import msvcrt
    from ctypes import wintypes

    _O_BINARY: Final = 0x8000
    _LOCKFILE_FAIL_IMMEDIATELY: Final = 0x1
    _LOCKFILE_EXCLUSIVE_LOCK: Final = 0x2
    _ERROR_LOCK_VIOLATION: Final = 33
    _ERROR_IO_PENDING: Final = 997
    #: The locked byte: far past anything written, so that the holder's pid stays readable
    #: (a Windows lock is mandatory: it blocks reads of the bytes it covers).
    _LOCK_OFFSET_HIGH: Final = 0x100  # 2**40

    class _Overlapped(ctypes.Structure):
        _fields_ = (
            ("Internal", ctypes.c_void_p),
            ("InternalHigh", ctypes.c_void_p),
            ("Offset", wintypes.DWORD),
            ("OffsetHigh", wintypes.DWORD),
            ("hEvent", wintypes.HANDLE),
        )

    #: The signals that stop the node cleanly (as the broker closing the channel does).
    STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGBREAK)

    _kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    _kernel32.LockFileEx.argtypes = (
        wintypes.HANDLE,
        wintypes.DWORD,
        wintypes.DWORD,
        wintypes.DWORD,
        wintypes.DWORD,
        ctypes.POINTER(_Overlapped),
    )
    _kernel32.LockFileEx.restype = wintypes.BOOL

    def _binary_by_default() -> None:
        """``os.open`` without ``O_TEXT`` opens binary files (the C runtime's ``_fmode``)."""
        ucrt = ctypes.CDLL("ucrtbase")
        ucrt._set_fmode(_O_BINARY)

    _binary_by_default()

    def lock_file(fd: int) -> None:
        """Lock ``fd``'s file for this process; BlockingIOError when another one holds it."""
        handle = msvcrt.get_osfhandle(fd)
        overlapped = _Overlapped(0, 0, 0, _LOCK_OFFSET_HIGH, None)
        flags = _LOCKFILE_EXCLUSIVE_LOCK | _LOCKFILE_FAIL_IMMEDIATELY
        if not _kernel32.LockFileEx(handle, flags, 0, 1, 0, ctypes.byref(overlapped)):
            code = ctypes.get_last_error()
            if code in (_ERROR_LOCK_VIOLATION, _ERROR_IO_PENDING):
                raise BlockingIOError(errno.EAGAIN, "locked by another process")
            raise ctypes.WinError(code)

    def read_at(fd: int, size: int, offset: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` (moves the file position, unlike ``pread``)."""
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, size)

    def write_at(fd: int, data: bytes, offset: int) -> int:
        """Write ``data`` at ``offset`` (moves the file position, unlike ``pwrite``)."""
        os.lseek(fd, offset, os.SEEK_SET)
        return os.write(fd, data)

    def _open_directory_lock(directory: Path) -> int:
        """Its :data:`DIRECTORY_LOCK_FILE`: a directory cannot be opened."""
        return os.open(directory / DIRECTORY_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)

    def sync_directory(directory: Path) -> None:
        """Nothing to do: a directory cannot be opened to fsync it (see the module docstring)."""

    def raise_descriptor_limit() -> str | None:
        """Nothing to raise: Windows has no per-process limit on sockets."""
        return None

    def open_files_limit() -> int | None:
        """None: Windows has no per-process limit on sockets."""
        return None

    def on_stop_signals(
        loop: asyncio.AbstractEventLoop, stop: Callable[[signal.Signals], None]
    ) -> None:
        """Ctrl+C, Ctrl+Break (and SIGTERM, raised in-process) call ``stop`` on ``loop``: the
        handler runs between two bytecodes of the main thread and hands over to the loop
        (the proactor loop wakes up for a signal: it set its self-pipe as the wakeup fd).

        The wakeup fd is set again without the warning on a full buffer: a full self-pipe
        already holds a wakeup, yet the warning printed a traceback under Wine."""

        def handler(signum: int, _frame: FrameType | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the node is ending
                loop.call_soon_threadsafe(stop, signal.Signals(signum))

        for sig in STOP_SIGNALS:
            signal.signal(sig, handler)
        wakeup = signal.set_wakeup_fd(-1)
        if wakeup != -1:
            signal.set_wakeup_fd(wakeup, warn_on_full_buffer=False)

else:
    import fcntl
    import resource

    #: The signals that stop the node cleanly (as the broker closing the channel does).
    STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)

    def lock_file(fd: int) -> None:
        """Lock ``fd``'s file for this process; BlockingIOError when another one holds it."""
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def read_at(fd: int, size: int, offset: int) -> bytes:
        """Up to ``size`` bytes at ``offset``."""
        return os.pread(fd, size, offset)

    def write_at(fd: int, data: bytes, offset: int) -> int:
        """Write ``data`` at ``offset``."""
        return os.pwrite(fd, data, offset)

    def _open_directory_lock(directory: Path) -> int:
        """The directory itself."""
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY)

    def sync_directory(directory: Path) -> None:
        """fsync ``directory``: its entries (a rename, a new file) are on disk after this."""
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def open_files_limit() -> int | None:
        """The soft open-file limit of this process (None: unlimited)."""
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return None if soft == resource.RLIM_INFINITY else soft

    def raise_descriptor_limit() -> str | None:
        """Soft RLIMIT_NOFILE up to the hard limit: every connection is a descriptor, and the
        default soft limit (often 1,024) is below ``max_connections`` plus what the node
        needs. Why it could not be raised, or None."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            except (ValueError, OSError) as exc:  # e.g. an infinite hard limit the kernel caps
                return f"cannot raise the open-file limit: {exc}"
        return None

    def on_stop_signals(
        loop: asyncio.AbstractEventLoop, stop: Callable[[signal.Signals], None]
    ) -> None:
        """SIGTERM and SIGINT call ``stop`` on ``loop`` (nothing outside the main thread)."""
        for sig in STOP_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop, sig)


def is_named_pipe(path: str) -> bool:
    """``path`` names a Windows named pipe (``\\\\.\\pipe\\NAME``), not a Unix socket."""
    return path[: len(_PIPE_PREFIXES[0])].lower() in _PIPE_PREFIXES


def lock_directory(directory: Path) -> int:
    """A descriptor holding the lock of ``directory`` (the directory's own on POSIX, its
    :data:`DIRECTORY_LOCK_FILE`'s on Windows); BlockingIOError when another process holds it."""
    fd = _open_directory_lock(directory)
    try:
        lock_file(fd)
    except OSError:
        os.close(fd)
        raise
    return fd
