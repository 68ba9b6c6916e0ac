"""Loopback ports for tests that must name a port before a process binds it.

A port the kernel handed out for ``bind(0)`` is in the ephemeral range, where every other
test's listeners and outgoing connections also land; ``free_port_block`` picks below that
range, in a slice of its own for each xdist worker, so a block of consecutive ports stays
free between the check and the process that binds it.
"""

from __future__ import annotations

import os
import random
import socket

BLOCK_RANGE = range(20000, 32000)  # below Linux's default ip_local_port_range (32768-60999)
WORKER_SLICE = 1000


def free_port() -> int:
    """A port that is free now; another process may take it before ours binds it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _binds(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port_block(count: int, attempts: int = 200) -> int:
    """The first of ``count`` consecutive loopback ports that are all free now."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    slices = len(BLOCK_RANGE) // WORKER_SLICE
    low = BLOCK_RANGE.start + (int(worker) if worker.isdigit() else 0) % slices * WORKER_SLICE
    for _ in range(attempts):
        base = random.randrange(low, low + WORKER_SLICE - count)
        if all(_binds(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports in {low}..{low + WORKER_SLICE}")
