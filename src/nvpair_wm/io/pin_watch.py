"""The pin set and the node identity re-read only when their files change, told by inotify (Linux).

``PinSet.current()`` scans ``trusted/`` on every call (a ``scandir`` plus a ``stat`` per file:
the largest single cost of a request), and ``Identity.current()`` stats ``node.crt``
and ``node.key`` on every call (the broadcaster re-checks it before every batch). Here the kernel
says when to look again: inotify watches on the files and directories involved queue an event
synchronously inside the unlink/rename/write/chmod that changes them. The node's event loop
polls the inotify descriptor with its sockets (:meth:`Watch.poll_with`): an event is drained by
the loop's callback, which moves the watch's generation, so a check before each use is one
comparison, and a change is seen by every request and handshake the loop reads after the
iteration that saw the event (the request after a removed pin is refused, a rotated identity is
used by the next handshake or batch). Before the loop polls it (and in code that runs without
one) a check asks the descriptor itself, one ``FIONREAD`` syscall (0 when nothing changed).

One descriptor (:class:`Watch`) can serve both: any event moves its generation, and each
watched source re-reads when the generation moved since it last looked (a change to one makes
the other re-check by ``stat``, which is cheap and rare).

Falls back to reading on every call where that guarantee does not hold: no inotify (not Linux,
e.g. Windows, or out of watches), a watched path missing or unwatchable, or a symlink among the
files (its target can change unseen). Reading is then what :class:`~nvpair_wm.pins.PinSet` and
:class:`~nvpair_wm.pins.Identity` do on each use: compare ``stat`` signatures, parse on change.

:class:`PerTick` is the broadcaster's look at both before each batch: one check of the shared
descriptor, or one read per event-loop tick of sources that are not watched.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if sys.platform != "win32":  # inotify is Linux's; elsewhere open_watch() answers None
    import fcntl
    import termios

if TYPE_CHECKING:
    from nvpair_wm.pins import IdentitySource, NodeIdentity, PinSource

__all__ = [
    "Both",
    "PerTick",
    "TickIdentity",
    "TickPins",
    "Watch",
    "WatchedIdentity",
    "WatchedPins",
    "open_watch",
    "shared_watch",
]

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
# A file's content and metadata; replacing it by rename unlinks the old inode (IN_ATTRIB).
_FILE_MASK = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_DELETE_SELF | _IN_MOVE_SELF
# The cluster directory: entries coming and going, itself moved or removed; not IN_MODIFY, so
# that the journal's appends (it lives there too) queue nothing.
_CLUSTER_MASK = _PARENT_MASK | _IN_DELETE_SELF | _IN_MOVE_SELF
_IN_MASK_ADD = 0x20000000  # sources sharing a descriptor may watch one directory: masks add up
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000
_NOTHING_QUEUED = bytes(4)  # FIONREAD's answer when no event is queued


class _Pins(Protocol):
    trusted_dir: Path

    def current(self) -> frozenset[str]: ...


class _Identity(Protocol):
    cert_path: Path
    key_path: Path

    def current(self) -> NodeIdentity | None: ...


class Watch:
    """One inotify descriptor; :meth:`generation` moves whenever anything watched changed."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._init = libc.inotify_init1
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        fd = self._init(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd: int = fd
        self.queued = bytearray(4)  # FIONREAD's answer (an int)
        #: What :meth:`generation` last returned.
        self.generation_seen = 0
        #: The loop that polls the descriptor and drains its events (:meth:`poll_with`).
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self, path: Path, mask: int) -> bool:
        return bool(self._add(self.fd, os.fsencode(path), mask | _IN_MASK_ADD) >= 0)

    def poll_with(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have ``loop`` poll the descriptor with its sockets and drain each event as it comes
        (moving the generation): :meth:`unchanged_since` is then a comparison, with no syscall.
        An event queued while the loop runs its callbacks is drained in the next iteration."""
        loop.add_reader(self.fd, self._drain)
        self._loop = loop

    def stop_polling(self) -> None:
        """Undo :meth:`poll_with` (the loop is about to close): checks ask the descriptor."""
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self.fd)

    def unchanged_since(self, generation: int) -> bool:
        """Nothing changed since :meth:`generation` returned ``generation``: nothing drained
        since, and (unless the loop polls the descriptor) nothing queued, one ``FIONREAD``."""
        if self._loop is None:
            fcntl.ioctl(self.fd, termios.FIONREAD, self.queued)
            if self.queued != _NOTHING_QUEUED:
                return False
        return self.generation_seen == generation

    def generation(self) -> int:
        """A number that moves when an event was queued since the last call (they are drained).

        Asks how many bytes are queued first (``FIONREAD``): the usual answer, 0, costs one
        syscall and no exception, where a read would raise ``BlockingIOError``.
        """
        fcntl.ioctl(self.fd, termios.FIONREAD, self.queued)
        if self.queued != _NOTHING_QUEUED:
            self._drain()
        return self.generation_seen

    def _drain(self) -> None:
        """Read every queued event; the generation moves if there was any."""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            if not data:
                return
            self.generation_seen += 1


def open_watch() -> Watch | None:
    """An inotify descriptor, or None (logged) where there is none: then sources read per call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return Watch()
    except (OSError, AttributeError) as exc:
        log.info("no inotify (%s): trusted/ and the identity files are read per use", exc)
        return None


class WatchedPins:
    """``is_pinned`` over ``pins.current()``, rescanned only after inotify saw a change."""

    def __init__(self, pins: _Pins, watch: Watch | None = None) -> None:
        """``watch``: a descriptor shared with other sources; by default one of its own."""
        self._pins = pins
        self._cached: frozenset[str] | None = None
        self._inotify = watch if watch is not None else open_watch()
        self._seen = -1
        self._watching = False

    def current(self) -> frozenset[str]:
        ino = self._inotify
        if ino is None:
            return self._pins.current()
        cached = self._cached
        if cached is not None and ino.unchanged_since(self._seen):
            return cached  # no syscall while the loop polls the descriptor (per accept)
        generation = ino.generation()
        if generation != self._seen:
            self._seen = generation
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

    @property
    def settled(self) -> bool:
        """The last answer is cached: it stands until the watch sees a change."""
        return self._cached is not None

    def is_pinned(self, fingerprint: str) -> bool:
        cached = self._cached
        ino = self._inotify
        if cached is not None and ino is not None and ino.unchanged_since(self._seen):
            return fingerprint in cached  # the usual case (every request)
        return fingerprint in self.current()

    def _cacheable(self) -> bool:
        try:
            with os.scandir(self._pins.trusted_dir) as it:
                return not any(entry.is_symlink() for entry in it)
        except OSError:
            return False


class WatchedIdentity:
    """``identity.current()``, read again only after inotify saw a change to ``node.crt``,
    ``node.key`` or the directory holding them (or its parent: the directory replaced)."""

    def __init__(self, identity: _Identity, watch: Watch | None = None) -> None:
        """``watch``: a descriptor shared with other sources; by default one of its own."""
        self._identity = identity
        self._inotify = watch if watch is not None else open_watch()
        self._seen = -1
        self._cached: tuple[NodeIdentity | None] | None = None

    def current(self) -> NodeIdentity | None:
        ino = self._inotify
        if ino is None:
            return self._identity.current()
        cached = self._cached
        if cached is not None and ino.unchanged_since(self._seen):
            return cached[0]  # the usual case (every handshake)
        generation = ino.generation()
        if generation != self._seen:
            self._seen = generation
            self._cached = None
        cached = self._cached
        if cached is not None:
            return cached[0]
        # Watch first, then read: a change racing the read queues an event. Files are watched
        # again after every change (a rename puts a new inode under the name).
        cacheable = self._watch(ino)
        ident = self._identity.current()
        if cacheable:
            self._cached = (ident,)
        return ident

    @property
    def settled(self) -> bool:
        """The last answer is cached: it stands until the watch sees a change."""
        return self._cached is not None

    def _watch(self, ino: Watch) -> bool:
        """Watch the directory, its parent and both files; False when a change could go
        unseen (the directory missing or unwatchable, or a file a symlink or unwatchable)."""
        cert, key = self._identity.cert_path, self._identity.key_path
        directory = cert.parent
        if key.parent != directory:
            return False
        ino.watch(directory.parent, _PARENT_MASK)
        if not ino.watch(directory, _CLUSTER_MASK):
            return False
        for path in (cert, key):
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                continue  # its creation is a directory event
            except OSError:
                return False
            if stat.S_ISLNK(mode) or not ino.watch(path, _FILE_MASK):
                return False
        return True


def shared_watch(identity: object, pins: object) -> Watch | None:
    """The one descriptor both sources watch through, or None (not both watched, or not by
    the same descriptor): then a reader of both cannot tell with one check that neither
    changed."""
    if (
        isinstance(identity, WatchedIdentity)
        and isinstance(pins, WatchedPins)
        and identity._inotify is not None
        and identity._inotify is pins._inotify
    ):
        return identity._inotify
    return None


Both = tuple["NodeIdentity | None", frozenset[str]]  # our identity and the pins, one look


class PerTick:
    """The identity and the pin set, read again only when they may have changed.

    With the node's inotify-watched sources sharing one descriptor (:func:`shared_watch`), a
    look is one check of it for both (:meth:`both`): the answer read last stands while the
    watch saw no change since, so a removed pin or a rotated identity is seen by the next look
    after the watch saw it (:class:`Watch`).
    With other sources (a few ``stat`` calls and a ``scandir`` per read) they are read at most
    once per event-loop tick, since reading them before every batch would be most of a
    broadcast's cost at a low event rate; the next tick reads again, so a change is seen by the
    next batch started after it. Outside a running loop nothing is cached.
    """

    __slots__ = ("_both", "_identity", "_loop", "_pins", "_seen", "_stale", "_watch")

    def __init__(self, identity: IdentitySource, pins: PinSource) -> None:
        self._identity = identity
        self._pins = pins
        self._both: tuple[NodeIdentity | None, frozenset[str]] = (None, frozenset())
        self._stale = True
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watch = shared_watch(identity, pins)
        self._seen = -1  # the watch's generation _both was read at; -1: not cached

    def both(self) -> Both:
        """Our identity and the pins, as they are now (see the class docstring)."""
        watch = self._watch
        if watch is not None:
            if watch.unchanged_since(self._seen):
                return self._both
            return self._read_watched(watch)
        if self._stale:
            self._refresh()
        return self._both

    def _read_watched(self, watch: Watch) -> tuple[NodeIdentity | None, frozenset[str]]:
        # The generation first: an event queued while the sources read moves it past the one
        # kept, and the next look reads again.
        seen = watch.generation()
        identity, pins = self._identity, self._pins
        both = self._both = (identity.current(), pins.current())
        settled = isinstance(identity, WatchedIdentity) and identity.settled
        settled = settled and isinstance(pins, WatchedPins) and pins.settled
        # Not cached by the sources (a symlink among the files, a path unwatchable): read per look.
        self._seen = seen if settled else -1
        return both

    def _refresh(self) -> None:
        self._both = (self._identity.current(), self._pins.current())
        loop = self._loop
        if loop is None or not loop.is_running():
            # Looked up once per loop: on Python 3.11 each asyncio.get_running_loop() is a
            # getpid syscall, and a refresh comes before every send at a low event rate.
            try:
                loop = self._loop = asyncio.get_running_loop()
            except RuntimeError:
                return
        self._stale = False
        loop.call_soon(self._expire)

    def _expire(self) -> None:
        self._stale = True

    def identity(self) -> NodeIdentity | None:
        return self.both()[0]

    def pins(self) -> frozenset[str]:
        return self.both()[1]

    def is_pinned(self, fingerprint: str) -> bool:
        return fingerprint in self.both()[1]


class TickIdentity:
    """:class:`PerTick`'s identity as an ``IdentitySource``."""

    __slots__ = ("_tick",)

    def __init__(self, tick: PerTick) -> None:
        self._tick = tick

    def current(self) -> NodeIdentity | None:
        return self._tick.identity()


class TickPins:
    """:class:`PerTick`'s pins as a ``PinSource``."""

    __slots__ = ("_tick",)

    def __init__(self, tick: PerTick) -> None:
        self._tick = tick

    def current(self) -> frozenset[str]:
        return self._tick.pins()

    def is_pinned(self, fingerprint: str) -> bool:
        return self._tick.is_pinned(fingerprint)
