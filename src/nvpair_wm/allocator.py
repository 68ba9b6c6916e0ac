"""glibc malloc tuning for a long-running daemon.

glibc raises its mmap threshold each time a large mmapped block is freed (up to 32 MiB). After
that, the workload table's large blocks (dict arrays, on resize) come from the heap instead of
their own mappings, and the heap cannot give memory back while smaller live blocks sit above
them: RSS creeps up in steps although the live data is flat (see bench/README.md, the memory
soak). A fixed threshold — what ``MALLOC_MMAP_THRESHOLD_`` sets — turns the adjustment off:
large blocks always get their own mapping and go back to the system when freed.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from typing import Final

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD: Final = -3  # from glibc's malloc.h
DEFAULT_THRESHOLD: Final = 128 * 1024  # glibc's own starting value


def pin_mmap_threshold(nbytes: int = DEFAULT_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold; a no-op elsewhere or when the operator already chose one."""
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    pinned = bool(mallopt(M_MMAP_THRESHOLD, nbytes))
    log.debug("malloc mmap threshold %s at %d bytes", "pinned" if pinned else "not set", nbytes)
    return pinned


def trim() -> bool:
    """Give the heap's free pages back to the system (glibc ``malloc_trim(0)``).

    Worth calling after a burst of short-lived allocations has been freed (a thousand TLS
    connections closing): glibc keeps the freed memory in its arenas, where fragmentation can
    keep RSS up for good although nothing is live. A no-op (False) without glibc.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    return bool(malloc_trim(0))
