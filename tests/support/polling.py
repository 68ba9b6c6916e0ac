"""Polling, for the few conditions no event announces (a counter catching up, a child process
appearing in ``/proc``, a file compacted): ``eventually(probe, what)``.

Tests wait for events wherever one exists (a line on a pipe, a response, a frame); a poll is the
exception and says so by calling this. ``probe`` is called until it returns something truthy,
which is returned; between two calls the poll sleeps ``every`` seconds; after ``within``
seconds it fails with an AssertionError saying ``what`` did not happen (``what`` may be a
callable, for a message built from the state at that moment). An exception raised by ``probe``
(an assertion that must hold all along) ends the poll at once.

:func:`eventually` is the one poll: in a coroutine, ``await eventually_async(...)`` is the same
poll sleeping with ``asyncio.sleep`` so that the event loop goes on meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from tests.support.wm_process import WAIT

__all__ = ["eventually", "eventually_async"]

T = TypeVar("T")
Message = str | Callable[[], str]

EVERY = 0.01  # seconds between two looks, unless the caller knows better


def _failure(what: Message, within: float) -> AssertionError:
    text = what() if callable(what) else what
    return AssertionError(f"not within {within:g} s: {text}")


def eventually(
    probe: Callable[[], T | None], what: Message, *, within: float = WAIT, every: float = EVERY
) -> T:
    """``probe()``'s first truthy value, polling every ``every`` seconds for ``within``."""
    deadline = time.monotonic() + within
    while not (found := probe()):
        if time.monotonic() >= deadline:
            raise _failure(what, within)
        time.sleep(every)
    return found


async def eventually_async(
    probe: Callable[[], T | None], what: Message, *, within: float = WAIT, every: float = EVERY
) -> T:
    """:func:`eventually` in a coroutine: the loop runs while it waits."""
    deadline = time.monotonic() + within
    while not (found := probe()):
        if time.monotonic() >= deadline:
            raise _failure(what, within)
        await asyncio.sleep(every)
    return found
