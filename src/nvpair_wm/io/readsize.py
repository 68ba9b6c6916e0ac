"""How much one read of an asyncio transport may take.

asyncio's selector transports read up to 256 KiB into a fresh bytes object, a size glibc serves
by ``mmap``: every read then costs an mmap, an mremap and an munmap, and a freshly zeroed page,
before the first byte is looked at. At a low event rate each of those is cold and sits between
the arrival of an event and its relay. A cap under glibc's mmap threshold (128 KiB) keeps the
buffer on the heap; larger arrivals just take more reads.
"""

from __future__ import annotations

import asyncio
from typing import Final

from nvpair_wm.internals import set_read_size

READ_SIZE: Final = 64 * 1024  # bytes per read


def cap_reads(transport: asyncio.BaseTransport, size: int = READ_SIZE) -> None:
    """Read at most ``size`` bytes per read (a no-op for transports without a read size)."""
    set_read_size(transport, size)
