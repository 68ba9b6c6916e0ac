"""Every use of another library's private API, in one place, each checked once.

Three fast paths reach past a library's public surface. Each has a public fallback, so a
release of the library that renames what it uses would not break nvpair-wm, only slow it down;
that is why each is checked once (at import, per event loop, per transport class) and the
verdicts are reported (:func:`report`: ``manager:status`` ``fastPaths``, the metric
``nvpair_wm_fast_path``, one warning at start for each that is off), and why
``tests/test_internals.py`` fails when one is off with the dependency versions
``pyproject.toml`` allows.

``opensslDirect``
    pyOpenSSL's cffi binding (``OpenSSL._util``: ``lib``, ``ffi``) and its ``Connection``'s
    ``_ssl``, ``_into_ssl``, ``_from_ssl`` and ``_raise_ssl_error``: TLS records go through
    ``SSL_read``/``SSL_write``/``BIO_read`` without pyOpenSSL's per-call checks and exceptions
    (:mod:`nvpair_wm.proto.tls`). Off: pyOpenSSL's public methods.
``loopRunQueue``
    CPython's event loop run queue (the loop's ready deque): where the end of the loop's
    batch of callbacks is (:mod:`nvpair_wm.io.batch`). Off (uvloop, Windows' proactor loop
    without it): nothing is deferred; each request writes on its own.
``transportReadSize``
    The read size of asyncio's selector and pipe transports: one read stays under glibc's mmap
    threshold (:mod:`nvpair_wm.io.readsize`). Off (proactor transports): asyncio's default.
"""

from __future__ import annotations

import collections
import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from OpenSSL import SSL

if TYPE_CHECKING:  # proto/tls imports this module: no asyncio at run time for it
    import asyncio

__all__ = [
    "OPENSSL",
    "FastPath",
    "OpenSSLBinding",
    "check",
    "raise_ssl_error",
    "report",
    "run_queue",
    "set_read_size",
    "ssl_parts",
]

log = logging.getLogger(__name__)


class FastPath(enum.Enum):
    OPENSSL_DIRECT = "opensslDirect"
    LOOP_RUN_QUEUE = "loopRunQueue"
    TRANSPORT_READ_SIZE = "transportReadSize"


# -- pyOpenSSL -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenSSLBinding:
    """The cffi binding pyOpenSSL calls OpenSSL through, and what the record path needs of it."""

    lib: Any
    ffi: Any
    alloc: Any  # an allocator that does not zero (buffers are written before they are read)
    null: Any
    want_read: int  # SSL_ERROR_WANT_READ


_CONNECTION_PARTS: Final = ("_ssl", "_into_ssl", "_from_ssl")


def _load_openssl() -> tuple[OpenSSLBinding | None, str | None]:
    try:
        from OpenSSL._util import ffi, lib  # noqa: PLC0415 - private: only here, guarded

        binding = OpenSSLBinding(
            lib,
            ffi,
            ffi.new_allocator(should_clear_after_alloc=False),
            ffi.NULL,
            lib.SSL_ERROR_WANT_READ,
        )
        for name in ("SSL_read", "SSL_write", "SSL_pending", "SSL_get_error"):
            getattr(lib, name)
        for name in ("BIO_read", "BIO_write", "BIO_get_mem_data"):
            getattr(lib, name)
        conn = SSL.Connection(SSL.Context(SSL.TLS_METHOD), None)  # memory BIOs, as ours
        for name in _CONNECTION_PARTS:
            if getattr(conn, name, None) is None:
                return None, f"pyOpenSSL's Connection has no {name}"
        if not callable(getattr(conn, "_raise_ssl_error", None)):
            return None, "pyOpenSSL's Connection has no _raise_ssl_error"
    except (ImportError, AttributeError) as exc:
        return None, f"pyOpenSSL's cffi binding is not as expected: {exc}"
    return binding, None


#: The binding, or None (then :mod:`nvpair_wm.proto.tls` takes pyOpenSSL's public methods).
OPENSSL, _OPENSSL_OFF = _load_openssl()


def ssl_parts(conn: SSL.Connection) -> tuple[Any, Any, Any] | None:
    """``conn``'s ``SSL*`` and its two memory BIOs (in, out), or None without the direct path."""
    if OPENSSL is None:
        return None
    raw = getattr(conn, "_ssl", None)
    bio_in = getattr(conn, "_into_ssl", None)
    bio_out = getattr(conn, "_from_ssl", None)
    if raw is None or bio_in is None or bio_out is None:
        return None
    return raw, bio_in, bio_out


def raise_ssl_error(conn: SSL.Connection, raw: Any, result: int) -> None:
    """Raise what pyOpenSSL makes of a failed ``SSL_read``/``SSL_write`` returning ``result``
    (its own mapping: the same exceptions as its public methods raise)."""
    conn._raise_ssl_error(raw, result)


# -- asyncio -------------------------------------------------------------------------------------


def run_queue(loop: asyncio.AbstractEventLoop) -> collections.deque[Any] | None:
    """The loop's queue of callbacks ready to run in this iteration, or None (another loop)."""
    ready = getattr(loop, "_ready", None)
    return ready if isinstance(ready, collections.deque) else None


_read_size_types: dict[type, bool] = {}  # transport class: has the read size (checked once)


def set_read_size(transport: asyncio.BaseTransport, size: int) -> bool:
    """Read at most ``size`` bytes per read; False (nothing done) for a transport without a
    read size (checked once per transport class)."""
    cls = type(transport)
    settable = _read_size_types.get(cls)
    if settable is None:
        settable = _read_size_types[cls] = isinstance(getattr(cls, "max_size", None), int)
    if settable:
        transport.max_size = size  # type: ignore[attr-defined]
    return settable


def _read_size_off(loop: asyncio.AbstractEventLoop) -> str | None:
    """Why the loop's transports have no read size to set, or None when they have one."""
    from asyncio import selector_events  # noqa: PLC0415

    if not isinstance(loop, selector_events.BaseSelectorEventLoop):
        return f"{type(loop).__name__} is not a selector event loop"
    transport_cls: Any = getattr(selector_events, "_SelectorSocketTransport", None)
    if not isinstance(getattr(transport_cls, "max_size", None), int):
        return "asyncio's socket transport has no read size"
    return None


# -- the checks ----------------------------------------------------------------------------------

_verdicts: dict[FastPath, str | None] = {}  # None: on; else why it is off


def check(loop: asyncio.AbstractEventLoop) -> Mapping[FastPath, str | None]:
    """Look at each fast path once (for ``loop``, the node's); a warning for each one off.
    Returns, per fast path, None when it is on or why it is off."""
    queue_off = None if run_queue(loop) is not None else f"{type(loop).__name__} has no run queue"
    found = {
        FastPath.OPENSSL_DIRECT: _OPENSSL_OFF,
        FastPath.LOOP_RUN_QUEUE: queue_off,
        FastPath.TRANSPORT_READ_SIZE: _read_size_off(loop),
    }
    for path, why in found.items():
        if why is not None and _verdicts.get(path, "") != why:
            log.warning("fast path %s is off (slower, still correct): %s", path.value, why)
    _verdicts.clear()
    _verdicts.update(found)
    return dict(_verdicts)


def report() -> dict[str, bool]:
    """Which fast paths are on, by name, as :func:`check` found them (empty before it ran)."""
    return {path.value: why is None for path, why in _verdicts.items()}
