"""The pin set re-read only when ``trusted/`` changes, told by inotify (Linux).

``PinSet.current()`` scans ``trusted/`` on every call (a ``scandir`` plus a ``stat`` per file:
20-80 µs, the largest single cost of a request). Here the kernel says when to scan: an inotify
watch on ``trusted/`` (and on its parent, for the directory itself being replaced) queues an
event synchronously inside the unlink/rename/write that changes a pin, so a non-blocking read of
the inotify descriptor before each use (one syscall, EAGAIN when nothing changed) sees every
change that happened before the request arrived: removing a pin still refuses the very next
request.

Falls back to scanning on every call where that guarantee does not hold: no inotify (not Linux,
out of watches), ``trusted/`` missing, or a symlink in it (its target can change unseen).
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import sys
import termios
from pathlib import Path
from typing import Protocol

__all__ = ["WatchedPins"]

log = logging.getLogger(__name__)

_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x002, 0x004, 0x008
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x040, 0x080, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF = 0x400, 0x800
_DIR_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
)
_PARENT_MASK = _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_ATTRIB
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000


class _Pins(Protocol):
    trusted_dir: Path

    def current(self) -> frozenset[str]: ...


class _Inotify:
    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._init = libc.inotify_init1
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        fd = self._init(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd: int = fd
        self._queued = bytearray(4)  # FIONREAD's answer (an int)

    def watch(self, path: Path, mask: int) -> bool:
        return bool(self._add(self.fd, os.fsencode(path), mask) >= 0)

    def changed(self) -> bool:
        """True if any event was queued since the last call (events are drained).

        Asks how many bytes are queued first (``FIONREAD``): the usual answer, 0, costs one
        syscall and no exception, where a read would raise ``BlockingIOError``.
        """
        fcntl.ioctl(self.fd, termios.FIONREAD, self._queued)
        if not any(self._queued):
            return False
        seen = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return seen
            if not data:
                return seen
            seen = True


class WatchedPins:
    """``is_pinned`` over ``pins.current()``, rescanned only after inotify saw a change."""

    def __init__(self, pins: _Pins) -> None:
        self._pins = pins
        self._cached: frozenset[str] | None = None
        self._inotify: _Inotify | None = None
        if sys.platform.startswith("linux"):
            try:
                self._inotify = _Inotify()
            except (OSError, AttributeError) as exc:
                log.info("pins: no inotify (%s): trusted/ is scanned per request", exc)
        self._watching = False

    def current(self) -> frozenset[str]:
        ino = self._inotify
        if ino is None:
            return self._pins.current()
        if ino.changed():
            self._cached = None
            self._watching = False  # the directory may be a new one: watch it again
        cached = self._cached
        if cached is not None:
            return cached
        if not self._watching:
            trusted = self._pins.trusted_dir
            ino.watch(trusted.parent, _PARENT_MASK)
            self._watching = ino.watch(trusted, _DIR_MASK)
        # Scan AFTER the watch is in place: a change racing the scan queues an event.
        pins = self._pins.current()
        if self._watching and self._cacheable():
            self._cached = pins
        return pins

    def is_pinned(self, fingerprint: str) -> bool:
        return fingerprint in self.current()

    def _cacheable(self) -> bool:
        try:
            with os.scandir(self._pins.trusted_dir) as it:
                return not any(entry.is_symlink() for entry in it)
        except OSError:
            return False
