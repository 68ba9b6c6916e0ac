"""Writes deferred to the end of the event loop's current batch of ready callbacks.

When one ``epoll_wait`` reports several connections ready (eight HTTP/1.1 peers, say), each
request used to cost its own write to the broker pipe, then its own socket send. Deferring both
to the end of the batch turns the pipe writes into one (the socket sends stay one per
connection), and keeps their order: every broker write of the batch, then the answers.

"The end of the batch" is read from asyncio's run queue (CPython's, through
:func:`nvpair_wm.internals.run_queue`: the callbacks of this iteration still to run). A
callback with nothing queued behind it is the batch's last: it runs what was deferred when it
ends, so a lone request (one connection, one stream) still goes out in the iteration that read
it, and the requests of one read (HTTP/2 streams in one TLS record) share one broker write too.
When other callbacks are still queued, one ``call_soon`` handle makes sure the work runs after
them, and the last of our own callbacks runs it earlier when it finds that handle alone in the
queue. On a loop without that queue (uvloop, a proactor loop), nothing is deferred, and
``manager:status`` says so.
"""

from __future__ import annotations

import asyncio
import collections
import weakref
from collections.abc import Callable
from typing import Any

from nvpair_wm.internals import run_queue

__all__ = ["EndOfBatch", "for_loop"]

_BATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, EndOfBatch] = (
    weakref.WeakKeyDictionary()
)


def for_loop(loop: asyncio.AbstractEventLoop) -> EndOfBatch:
    """The loop's one :class:`EndOfBatch` (shared by the server and the broker channel)."""
    batch = _BATCHES.get(loop)
    if batch is None:
        batch = _BATCHES[loop] = EndOfBatch(loop)
    return batch


class EndOfBatch:
    """Work deferred until the loop's current batch of ready callbacks is through.

    A producer that may defer asks :attr:`deferring` (inside an IO callback that will call
    :meth:`callback_done`, or with work already deferred, which must keep its order), then
    :attr:`defer`\\ s a function. Every IO callback that may have deferred something ends with
    :meth:`callback_done`. :meth:`run` runs everything deferred now (before closing a
    connection, say).
    """

    __slots__ = ("__weakref__", "_handle", "_run_queue", "active", "defer", "loop", "queue")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        #: CPython's run queue, or None: then nothing is deferred.
        self._run_queue: collections.deque[Any] | None = run_queue(loop)
        #: What was deferred, in order: always this one list (run() empties it in place).
        self.queue: list[Callable[[], None]] = []
        #: Run ``fn`` at the end of the batch, after what was deferred before it: the queue's
        #: own ``append`` (no Python frame per deferral, on every request's path).
        self.defer: Callable[[Callable[[], None]], None] = self.queue.append
        self._handle: asyncio.Handle | None = None
        #: True while an IO callback that ends with :meth:`callback_done` runs.
        self.active = False

    @property
    def deferring(self) -> bool:
        """True when a write now should be deferred instead: something is deferred already
        (order), or an IO callback runs (its writes, and its batch's, are gathered)."""
        return bool(self.queue) or (self.active and self._run_queue is not None)

    @property
    def pending(self) -> bool:
        return bool(self.queue)

    def callback_done(self) -> None:
        """An IO callback ends: run the deferred work if it is the batch's last callback."""
        if not self.queue:
            return
        ready = self._run_queue
        if not ready or (len(ready) == 1 and ready[0] is self._handle):
            self.run()
        elif self._handle is None:
            self._handle = self.loop.call_soon(self.run)

    def run(self) -> None:
        """Run everything deferred, in order (and what that defers in turn)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        queue = self.queue
        while queue:
            pending = queue.copy()
            queue.clear()
            for fn in pending:
                fn()
