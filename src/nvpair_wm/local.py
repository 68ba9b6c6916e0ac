"""The local channel to the broker: stdio (default) or ``--ipc PATH``.

A thin shell around :class:`~nvpair_wm.dispatch.Dispatcher`: bytes in, lines framed by
:class:`~nvpair_wm.codec.LineBuffer`, dispatched, replies and remote events out. stdout carries
nothing but JSON-RPC frames; logs go to stderr.

Everything written to the broker goes through one bounded :class:`BrokerQueue`. When the broker
does not read, the queue fills: the local reader stops reading (backpressure on the broker), and
the inter-node endpoint answers 503 (backpressure on peers). Nothing is dropped silently.

Per read, not per line: everything one read from the broker delivered is dispatched, then its
events are published (peers' queues, an idle link's request written at once, then the journal
append) in one call, then its replies are queued in one put, so that a journal record is
written before the reply that follows it can be.
Frames that arrive while nothing is waiting to be written go to the broker at once, in one
write (no hop through the writer task); the writer task only takes over while the channel has a
backlog (the pipe is full), and it is that backlog the queue's bound applies to. Frames put
while the inter-node server handles a batch of ready connections are written once, at the end
of the batch (:mod:`nvpair_wm.io.batch`), before the answers of that batch.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import logging
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Protocol, SupportsIndex

from nvpair_wm_schema.node_record_schema import NodeRecord

from nvpair_wm import codec, platforms
from nvpair_wm.dispatch import Dispatcher, Outbound
from nvpair_wm.errors import DialFailed  # defined there; still importable from here
from nvpair_wm.io.batch import EndOfBatch, for_loop
from nvpair_wm.io.readsize import cap_reads

log = logging.getLogger(__name__)

READ_CHUNK: Final = 64 * 1024
# Lines that read or change the broadcaster's state (see BrokerChannel._handle).
_STATUS: Final = b'"manager:status"'
_NODES: Final = b'"nodes:update"'
DEFAULT_QUEUE_FRAMES: Final = 10_000
#: A thread between the broker and the loop (stdio that asyncio cannot watch, e.g. any pipe on
#: Windows) holds at most this many bytes unread or unwritten before it waits.
THREAD_BUFFER_BYTES: Final = 4 * READ_CHUNK


@dataclass(frozen=True, slots=True)
class BrokerLimits:
    """The broker channel's bounds (counts, seconds)."""

    queue_frames: int = DEFAULT_QUEUE_FRAMES  # frames waiting for the broker; then peers get 503
    dial_timeout: float = 10.0  # --ipc: keep dialing this long for the broker to listen
    dial_backoff: float = 0.05  # --ipc: first pause between two attempts (then doubled)
    dial_backoff_max: float = 1.0  # --ipc: longest pause between two attempts


class DialSchedule:
    """When to try again to reach the broker's socket: exponential backoff within a budget.

    Sans-IO: the caller reports each failure with ``now`` and gets the pause before the next
    attempt, or None when the budget (counted from the first attempt) is spent.
    """

    def __init__(self, limits: BrokerLimits, start: float) -> None:
        self.limits = limits
        self.start = start
        self.attempts = 0

    def failed(self, now: float) -> float | None:
        """Count a failed attempt at ``now``; the pause before the next one, or None."""
        self.attempts += 1
        lim = self.limits
        left = self.start + lim.dial_timeout - now
        if left <= 0:
            return None
        pause = min(lim.dial_backoff_max, lim.dial_backoff * 2.0 ** min(self.attempts - 1, 60))
        return min(pause, left)


class BrokerQueue:
    """Frames waiting to be written to the broker, bounded in count.

    ``put`` never refuses: the producers check :meth:`full` first (the endpoint answers 503, the
    local reader waits), so the bound is exceeded by at most one HTTP body or one batch reply.

    ``direct``, when set (by :class:`BrokerChannel`), is offered the frames of a ``put`` that
    finds the queue empty; it returns True when it wrote them at once, and they are not queued.
    """

    def __init__(self, limit: int = DEFAULT_QUEUE_FRAMES) -> None:
        self.limit = limit
        self._frames: collections.deque[bytes] = collections.deque()
        self._has_frames = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.written = 0
        self.direct: Callable[[list[bytes]], bool] | None = None

    def __len__(self) -> int:
        return len(self._frames)

    def full(self) -> bool:
        return len(self._frames) >= self.limit

    def put(self, frames: list[bytes]) -> None:
        if not frames:
            return
        if not self._frames and self.direct is not None and self.direct(frames):
            return
        self._frames.extend(frames)
        self._has_frames.set()
        if self.full():
            self._room.clear()

    async def wait_room(self) -> None:
        await self._room.wait()

    async def take(self) -> list[bytes]:
        """Everything queued, waiting until there is something."""
        while not self._frames:
            self._has_frames.clear()
            await self._has_frames.wait()
        frames = list(self._frames)
        self._frames.clear()
        self._room.set()
        return frames

    def drain_nowait(self) -> list[bytes]:
        frames = list(self._frames)
        self._frames.clear()
        self._room.set()
        return frames


class BrokerReader(asyncio.StreamReader):
    """The broker channel's reader: while :attr:`consumer` is set (the reading task waits for
    data, and the queue has room), what arrives is handed to it in the same callback, with no
    hop through the task; otherwise it is buffered as usual and the task reads it.

    :attr:`room` is clear while more than :data:`THREAD_BUFFER_BYTES` wait to be read: a thread
    feeding the reader (:func:`_feed_from_thread`) waits for it, as a transport pauses reading."""

    def __init__(self) -> None:
        super().__init__(limit=2**31 - 1)
        self.consumer: Callable[[bytes], None] | None = None
        self.buffered = 0  # bytes fed and not read yet
        self.room = threading.Event()
        self.room.set()

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        consumer = self.consumer
        if consumer is None or not data:
            super().feed_data(data)
            self.buffered += len(data)  # type: ignore[arg-type]  # transports feed bytes
            if self.buffered > THREAD_BUFFER_BYTES:
                self.room.clear()
            return
        try:
            consumer(data)  # type: ignore[arg-type]  # transports feed bytes
        except Exception as exc:  # our bug, not the broker's: the reading task fails with it
            self.consumer = None
            self.set_exception(exc)

    async def read(self, n: int = -1) -> bytes:
        data = await super().read(n)
        self.buffered -= len(data)
        if self.buffered <= THREAD_BUFFER_BYTES:
            self.room.set()
        return data


class Writer(Protocol):
    """The write half of the broker channel (an asyncio StreamWriter, or a plain file)."""

    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...


class FileWriter:
    """stdout redirected to a regular file: asyncio cannot watch it, and it never blocks long."""

    def __init__(self, file: io.RawIOBase) -> None:
        self._file = file

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._file.write(view) or 0 :]

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self._file.close()


def _call_soon(
    loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: object
) -> bool:
    """Hand ``callback`` to ``loop`` from a thread; False when the loop has closed (the node
    stopped while the thread waited on the broker's pipe: nothing is left to tell)."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        return False
    return True


class ThreadWriter:
    """stdout written by a thread: where asyncio cannot drive the pipe (Windows' anonymous
    pipes are not overlapped, so the proactor loop cannot write them), a blocking write must
    not stop the loop. :meth:`drain` waits while more than :data:`THREAD_BUFFER_BYTES` wait to
    be written, as a pipe transport's does: the broker's backpressure reaches the queue."""

    def __init__(self, file: io.RawIOBase, loop: asyncio.AbstractEventLoop) -> None:
        self._file = file
        self._loop = loop
        self._pending: collections.deque[bytes] = collections.deque()
        self._bytes = 0  # written by write() and not by the thread yet
        self._cond = threading.Condition()
        self._closing = False
        self._error: OSError | None = None
        self._room = asyncio.Event()
        self._room.set()
        self._thread = threading.Thread(target=self._run, name="stdout-writer", daemon=True)
        self._thread.start()

    def write(self, data: bytes) -> None:
        with self._cond:
            self._pending.append(bytes(data))
            self._bytes += len(data)
            if self._bytes > THREAD_BUFFER_BYTES:
                self._room.clear()
            self._cond.notify()

    def get_write_buffer_size(self) -> int:
        return self._bytes

    def is_closing(self) -> bool:
        return self._closing or self._error is not None

    async def drain(self) -> None:
        while not self._room.is_set() and self._error is None:
            await self._room.wait()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return
                data = b"".join(self._pending)
                self._pending.clear()
            try:
                view = memoryview(data)
                while view:
                    view = view[self._file.write(view) or 0 :]
            except OSError as exc:  # the broker closed its end: drain() says so
                self._error = exc
                _call_soon(self._loop, self._room.set)
                return
            with self._cond:
                self._bytes -= len(data)
            if not _call_soon(self._loop, self._wake):
                return

    def _wake(self) -> None:
        if self._bytes <= THREAD_BUFFER_BYTES:
            self._room.set()

    def close(self, timeout: float = 5.0) -> None:
        """Write what is pending (for up to ``timeout`` seconds), then close the file."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)
        self._file.close()


class BrokerChannel:
    """One broker connection: reads frames, dispatches them, writes the queue out."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: Writer,
        dispatcher: Dispatcher,
        queue: BrokerQueue,
        *,
        on_outbound: Callable[[list[Outbound]], None],
        on_nodes: Callable[[list[NodeRecord]], None],
        max_frame: int = codec.MAX_FRAME_BYTES,
        before_write: Callable[[], None] | None = None,
    ) -> None:
        self._reader = reader
        #: Run before every write to the broker: the node's journal writes what it holds for
        #: later (records of what the frames tell the broker go to disk before the broker
        #: can read them).
        self._before_write = before_write
        self._writer = writer
        self._dispatcher = dispatcher
        self._queue = queue
        self._on_outbound = on_outbound
        self._on_nodes = on_nodes
        self._lines = codec.LineBuffer(max_frame)
        self._draining = False  # the writer task waits for the broker to read
        self._batch: EndOfBatch | None = None
        self._batched: list[bytes] | None = None  # frames for the end of the loop's batch
        #: The pipe's transport, asked before a direct write (a plain file has none).
        self._transport: asyncio.WriteTransport | ThreadWriter | None = None
        if isinstance(writer, asyncio.StreamWriter):
            self._transport = writer.transport
        elif isinstance(writer, ThreadWriter):
            self._transport = writer
        queue.direct = self._write_now

    async def read_until_eof(self) -> None:
        """Dispatch every frame the broker sends; returns at EOF (the broker closed).

        With a :class:`BrokerReader`, data that arrives while this task waits is dispatched
        as it arrives (:meth:`_feed`), until the queue is full; the task reads what was
        buffered meanwhile once there is room again."""
        reader = self._reader
        direct = reader if isinstance(reader, BrokerReader) else None
        while True:
            await self._queue.wait_room()
            if direct is not None:
                direct.consumer = self._feed
            try:
                chunk = await reader.read(READ_CHUNK)
            finally:
                if direct is not None:
                    direct.consumer = None
            items = self._lines.feed(chunk) if chunk else self._lines.end()
            if items:
                self._handle(items)
            if not chunk:
                return

    def _feed(self, data: bytes) -> None:
        """Data the reader got while the task waited: dispatched now, in this callback."""
        items = self._lines.feed(data)
        if items:
            self._handle(items)
        if self._queue.full():
            reader = self._reader
            assert isinstance(reader, BrokerReader)
            reader.consumer = None  # no room: the task waits for it before reading more

    def _handle(self, items: list[bytes | codec.TooLarge]) -> None:
        """Dispatch the frames of one read: their events published together, then (so that
        the journal has them first) their replies queued together. A line that reads or
        changes the set of peers (``manager:status``, ``nodes:update``) first sees the events
        before it published, as if each line were handled alone."""
        try:
            text = b"\n".join(items)  # type: ignore[arg-type]  # refused when TooLarge is there
        except TypeError:
            text = None
        if text is not None and _STATUS not in text and _NODES not in text and b"\\" not in text:
            # The usual read: no line can read or change the peers, so all go to the dispatcher
            # in one call. The joined lines are searched once (no marker spans a newline): the
            # join and one search cost a fraction of a search per line.
            replies: list[bytes] = []
            published = self._dispatch_run(items, replies, [])  # type: ignore[arg-type]
            if published:
                self._on_outbound(published)
            self._queue.put(replies)
            return
        dispatcher = self._dispatcher
        replies = []
        outbound: list[Outbound] = []
        # Consecutive lines that neither read nor change the set of peers go to the dispatcher
        # together. Without a backslash, such a method can only be spelled as these bytes.
        run: list[bytes] = []
        for item in items:
            if (
                isinstance(item, bytes)
                and _STATUS not in item
                and _NODES not in item
                and b"\\" not in item
            ):
                run.append(item)
                continue
            if run:
                outbound = self._dispatch_run(run, replies, outbound)
                run = []
            if isinstance(item, codec.TooLarge):
                log.warning("broker frame over %d bytes: refused", self._lines.max_frame)
                replies.append(dispatcher.oversize(self._lines.max_frame))
                continue
            if outbound and (_STATUS in item or _NODES in item):
                self._on_outbound(outbound)
                outbound = []
            result = dispatcher.local(item)
            if result.replies:
                replies += result.replies
            if result.outbound:
                outbound += result.outbound
            if result.nodes is not None:
                if outbound:
                    self._on_outbound(outbound)
                    outbound = []
                self._on_nodes(result.nodes)
        if run:
            outbound = self._dispatch_run(run, replies, outbound)
        if outbound:
            self._on_outbound(outbound)
        self._queue.put(replies)

    def _dispatch_run(
        self, run: list[bytes], replies: list[bytes], outbound: list[Outbound]
    ) -> list[Outbound]:
        """Lines of a read in one call (:meth:`Dispatcher.local_lines`); what is left to
        publish."""
        result = self._dispatcher.local_lines(run)
        replies += result.replies
        outbound += result.outbound
        if result.nodes is not None:  # not expected (_handle keeps them out); handled as there
            if outbound:
                self._on_outbound(outbound)
                outbound = []
            self._on_nodes(result.nodes)
        return outbound

    def _write_now(self, frames: list[bytes]) -> bool:
        """Write ``frames`` at once if nothing is waiting to be written before them (the
        transport's buffer is empty: the pipe took everything so far); else False, and the
        writer task writes them in turn, waiting for the broker to read."""
        batched = self._batched
        if batched is not None:  # more of this batch: same write, same order
            batched += frames
            return True
        if self._draining:
            return False
        transport = self._transport
        if transport is not None and (transport.is_closing() or transport.get_write_buffer_size()):
            return False
        end = self._batch
        if end is None:
            end = self._batch = for_loop(asyncio.get_running_loop())
        if end.deferring:
            self._batched = list(frames)
            end.defer(self._write_batched)
            return True
        self._emit(self._writer.write, frames)
        return True

    def _write_batched(self) -> None:
        """The end of the loop's batch: its frames in one write."""
        frames, self._batched = self._batched, None
        if frames:
            # The pipe's transport itself when there is one (StreamWriter.write only calls it).
            target = self._writer if self._transport is None else self._transport
            self._emit(target.write, frames)

    def _emit(self, write: Callable[[bytes], object], frames: list[bytes]) -> None:
        """Every write to the broker, whichever path it takes: what the journal holds for
        these frames first (``before_write``), then the frames in one write, counted."""
        if self._before_write is not None:
            self._before_write()
        write(frames[0] if len(frames) == 1 else b"".join(frames))
        self._dispatcher.wrote_to_broker(len(frames))

    async def write_forever(self) -> None:
        """Write queued frames to the broker in order, one syscall per burst."""
        while True:
            frames = await self._queue.take()
            await self._write(frames)

    async def flush(self) -> None:
        """Write whatever is still queued (used at shutdown)."""
        self._write_batched()
        frames = self._queue.drain_nowait()
        if frames:
            await self._write(frames)

    async def _write(self, frames: list[bytes]) -> None:
        self._emit(self._writer.write, frames)
        self._draining = True
        try:
            await self._writer.drain()
        finally:
            self._draining = False


def _pollable(fd: int) -> bool:
    """Only pipes and sockets can be watched by epoll; files, /dev/null and TTYs are not
    reliably (epoll refuses regular files and /dev/null outright). On Windows nothing is:
    the proactor loop drives only overlapped handles, and stdio's pipes are not."""
    if platforms.WINDOWS:
        return False
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def open_stdio() -> tuple[asyncio.StreamReader, Writer]:
    """asyncio streams over fds 0 and 1, whatever they are (pipes, sockets, files, devices)."""
    loop = asyncio.get_running_loop()
    reader = BrokerReader()
    stdin = io.FileIO(os.dup(sys.stdin.fileno()), "rb")
    if _pollable(stdin.fileno()):
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), stdin
        )
        cap_reads(transport)
    else:
        _feed_from_thread(loop, reader, stdin)
    stdout = io.FileIO(os.dup(sys.stdout.fileno()), "wb")
    # Nothing else may write to stdout: it is the protocol.
    sys.stdout = sys.stderr
    if not _pollable(stdout.fileno()):
        if platforms.WINDOWS and not stat.S_ISREG(os.fstat(stdout.fileno()).st_mode):
            return reader, ThreadWriter(stdout, loop)  # a pipe: the broker may stop reading
        return reader, FileWriter(stdout)
    wtransport, wproto = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop), stdout
    )
    return reader, asyncio.StreamWriter(wtransport, wproto, reader, loop)


def _feed_from_thread(
    loop: asyncio.AbstractEventLoop, reader: BrokerReader, stream: object
) -> None:
    """Read ``stream`` in a thread into ``reader``, at most :data:`THREAD_BUFFER_BYTES` ahead
    of the reading task: each chunk is fed before the next is read, and the thread waits for
    :attr:`BrokerReader.room`."""
    fed = threading.Event()

    def feed(data: bytes) -> None:
        reader.feed_data(data)
        fed.set()

    def pump() -> None:
        read = stream.read  # type: ignore[attr-defined]
        while True:
            fed.wait()
            reader.room.wait()
            fed.clear()
            try:
                data = read(READ_CHUNK)
            except OSError as exc:  # not an EOF: the channel failed, and the reader says so
                _call_soon(loop, reader.set_exception, exc)
                return
            if not data:
                _call_soon(loop, reader.feed_eof)
                return
            if not _call_soon(loop, feed, data):
                return

    fed.set()
    threading.Thread(target=pump, name="stdin-reader", daemon=True).start()


async def open_ipc(path: str) -> tuple[asyncio.StreamReader, Writer]:
    """Dial the broker's endpoint: a Unix socket, or a named pipe (``\\\\.\\pipe\\...``) on
    Windows."""
    loop = asyncio.get_running_loop()
    reader = BrokerReader()
    proto = asyncio.StreamReaderProtocol(reader)
    if platforms.WINDOWS:  # the proactor loop's; a named pipe is the only endpoint there
        transport, _ = await loop.create_pipe_connection(lambda: proto, path)  # type: ignore[attr-defined]
    else:  # as asyncio.open_unix_connection, with our reader
        transport, _ = await loop.create_unix_connection(lambda: proto, path)
    cap_reads(transport)
    return reader, asyncio.StreamWriter(transport, proto, reader, loop)


async def dial_ipc(path: str, limits: BrokerLimits) -> tuple[asyncio.StreamReader, Writer]:
    """Dial ``--ipc PATH``, trying again with backoff while it is not there or not listening
    (a broker may start us before it listens). Raises :class:`DialFailed` saying what was tried.
    """
    schedule = DialSchedule(limits, time.monotonic())
    while True:
        try:
            return await open_ipc(path)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            pause = schedule.failed(time.monotonic())
            if pause is None:
                raise DialFailed(
                    f"{schedule.attempts} attempts in {time.monotonic() - schedule.start:.1f} s "
                    f"(dial_timeout {limits.dial_timeout:g} s, backoff {limits.dial_backoff:g} s "
                    f"doubling to {limits.dial_backoff_max:g} s), last: {reason}"
                ) from exc
            if schedule.attempts == 1:  # once, at once: the silence that follows is expected
                log.info(
                    "waiting for the broker to listen on --ipc %s (%s): trying again for up to "
                    "%g s (broker.dial_timeout)",
                    path,
                    reason,
                    limits.dial_timeout,
                )
            log.debug(
                "broker not reachable at --ipc %s yet (attempt %d, %.2f s): %s; again in %.2f s",
                path,
                schedule.attempts,
                time.monotonic() - schedule.start,
                reason,
                pause,
            )
            await asyncio.sleep(pause)


async def close_writer(writer: Writer) -> None:
    with contextlib.suppress(OSError, RuntimeError):
        if isinstance(writer, FileWriter | ThreadWriter):
            writer.close()
            return
        assert isinstance(writer, asyncio.StreamWriter)
        if writer.can_write_eof():
            writer.write_eof()
        writer.close()
        await writer.wait_closed()
