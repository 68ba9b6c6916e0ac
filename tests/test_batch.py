"""Writes deferred to the end of the event loop's batch (``nvpair_wm.io.batch``), and the server
and broker channel that use it: one pipe write per batch of requests, always before the
answers of that batch; a lone request still answered in the iteration that read it.

Also the pin check: asked once per batch, again in the next.

Real parts: the asyncio loop, real sockets to the real server driver (plaintext HTTP/1.1), the
real dispatcher and broker channel writing to a real pipe, real pin files.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import socket
from pathlib import Path

from nvpair_wm.clusterdir import cert_fingerprint, init_cluster
from nvpair_wm.dedup import TableLimits, WorkloadTable
from nvpair_wm.dispatch import Dispatcher
from nvpair_wm.endpoint import EventsEndpoint
from nvpair_wm.http.core import Request
from nvpair_wm.io.batch import EndOfBatch, for_loop
from nvpair_wm.io.pin_watch import WatchedPins
from nvpair_wm.io.server import InterNodeServer
from nvpair_wm.local import BrokerChannel, BrokerQueue, BrokerReader, FileWriter
from nvpair_wm.pins import PinSet
from tests.support.frames import event, status_result, workload

FP = "ab" * 32


def test_a_lone_callback_runs_its_deferred_work_before_it_returns() -> None:
    """Nothing else ready: the work runs inside callback_done (no extra loop iteration);
    outside an IO callback, with nothing deferred, writes are not deferred."""
    order: list[str] = []

    async def main() -> None:
        end = EndOfBatch(asyncio.get_running_loop())
        assert not end.deferring
        end.active = True
        assert end.deferring
        end.defer(lambda: order.append("broker"))
        end.defer(lambda: order.append("answer"))
        end.active = False
        order.append("callback ends")
        end.callback_done()
        order.append("returned")
        assert not end.pending

    asyncio.run(main())
    assert order == ["callback ends", "broker", "answer", "returned"]


def test_callbacks_of_one_batch_share_one_run_after_the_last() -> None:
    """Two callbacks ready together: the first defers, the second finds only the safety handle
    left and runs both deferrals, in order, before the next iteration's callbacks."""
    order: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        end = EndOfBatch(loop)

        def callback(name: str) -> None:
            end.active = True
            end.defer(lambda: order.append(f"deferred by {name}"))
            end.active = False
            order.append(name)
            end.callback_done()
            if name == "a":
                loop.call_soon(order.append, "next iteration")

        done = loop.create_future()
        loop.call_soon(callback, "a")
        loop.call_soon(callback, "b")
        loop.call_soon(lambda: loop.call_soon(done.set_result, None))
        await done

    asyncio.run(main())
    assert order == ["a", "b", "deferred by a", "deferred by b", "next iteration"]


def test_work_deferred_before_a_foreign_callback_runs_once_it_has_run() -> None:
    """The last callback of the batch is not ours: the ``call_soon`` handle runs the work."""
    order: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        end = EndOfBatch(loop)

        def ours() -> None:
            end.defer(lambda: order.append("deferred"))
            end.callback_done()
            order.append("ours")

        done = loop.create_future()
        loop.call_soon(ours)
        loop.call_soon(order.append, "foreign")
        loop.call_soon(lambda: loop.call_soon(lambda: done.set_result(None)))
        await done
        assert not end.pending

    asyncio.run(main())
    assert order == ["ours", "foreign", "deferred"]


def test_for_loop_is_one_per_loop() -> None:
    async def main() -> EndOfBatch:
        loop = asyncio.get_running_loop()
        assert for_loop(loop) is for_loop(loop)
        return for_loop(loop)

    assert asyncio.run(main()) is not asyncio.run(main())


def _request(body: bytes) -> bytes:
    return (
        b"POST /v1/workloads/events HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(body) + body
    )


class _Pins:
    def is_pinned(self, fingerprint: str) -> bool:
        return fingerprint == FP


class _ObservedBroker(FileWriter):
    """The broker's end of stdout (a real pipe) that notes, at each write, how many frames it
    carries and how many clients already hold an answer."""

    def __init__(self, clients: list[socket.socket]) -> None:
        self.r, w = os.pipe()
        super().__init__(io.FileIO(w, "wb"))
        self.clients = clients
        self.writes: list[tuple[int, int]] = []

    def write(self, data: bytes) -> None:
        answered = 0
        for c in self.clients:
            with contextlib.suppress(BlockingIOError):
                answered += bool(c.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        self.writes.append((data.count(b"\n"), answered))
        super().write(data)


def _serve_batch(n: int) -> tuple[list[tuple[int, int]], list[bytes], list[bytes]]:
    """``n`` keep-alive clients, each answered once on its own (the connection is set up), then
    each with one more request sent before the server's loop polls (so their connections are
    ready in one batch); the broker writes seen, the batch's answers, and what the broker's
    pipe carried."""
    clients: list[socket.socket] = []
    broker = _ObservedBroker(clients)

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        dispatcher = Dispatcher(WorkloadTable(TableLimits()), status_result)
        queue = BrokerQueue()
        BrokerChannel(
            BrokerReader(),
            broker,
            dispatcher,
            queue,
            on_outbound=lambda _: None,
            on_nodes=lambda _: None,
        )
        endpoint = EventsEndpoint(dispatcher, _Pins(), queue)
        server = InterNodeServer(
            endpoint,
            None,
            port=0,
            hosts=["127.0.0.1"],
            plaintext=True,
            plain_fingerprint=FP,
            plain_alpn="http/1.1",
        )
        await server.start()

        async def answer(c: socket.socket) -> bytes:
            data = b""
            while not data.endswith(b"\r\n\r\n"):
                data += await loop.sock_recv(c, 4096)
            return data

        try:
            async with asyncio.timeout(10):
                for i in range(n):
                    c = socket.create_connection(("127.0.0.1", server.port))
                    c.setblocking(False)
                    clients.append(c)
                    c.send(_request(event("workload:submitted", workload(id=f"first{i}"))))
                    await answer(c)
                for i, c in enumerate(clients):  # no await in between: one batch
                    c.send(_request(event("workload:submitted", workload(id=f"w{i}"))))
                return [await answer(c) for c in clients]
        finally:
            for c in clients:
                c.close()
            await server.close(0.5)

    try:
        answers = asyncio.run(main())
        os.set_blocking(broker.r, False)
        carried = os.read(broker.r, 1 << 20).splitlines()
    finally:
        os.close(broker.r)
        broker.close()
    return broker.writes, answers, carried


def test_a_batch_of_requests_makes_one_broker_write_before_any_answer() -> None:
    """Eight requests ready together: their eight upserts reach the broker in one write, and
    at that write no client holds its 202 yet (the broker write comes first)."""
    writes, answers, carried = _serve_batch(8)
    assert [a.split(b"\r\n", 1)[0] for a in answers] == [b"HTTP/1.1 202 Accepted"] * 8
    assert writes == [(1, 0)] * 8 + [(8, 0)]  # one at a time, then the batch
    assert len(carried) == 16 and all(b'"workloads:upsert"' in x for x in carried)


def test_a_lone_request_is_written_to_the_broker_before_its_answer() -> None:
    writes, answers, carried = _serve_batch(1)
    assert answers[0].startswith(b"HTTP/1.1 202 ")
    assert writes == [(1, 0), (1, 0)]
    assert len(carried) == 2


def test_the_pin_check_is_asked_once_per_batch_and_again_in_the_next(tmp_path: Path) -> None:
    """Requests of one batch share the batch's first pin answer (one inotify check instead of
    one per request); a pin removed meanwhile refuses the first request of the next batch, and
    outside a batch every request asks at once. Real files, the daemon's WatchedPins."""
    dirs = init_cluster(tmp_path / "c", ["a", "b", "c"])
    trusted = dirs["a"] / "trusted"
    b = cert_fingerprint((dirs["b"] / "node.crt").read_bytes())
    c = cert_fingerprint((dirs["c"] / "node.crt").read_bytes())
    dispatcher = Dispatcher(WorkloadTable(TableLimits()), status_result)
    endpoint = EventsEndpoint(dispatcher, WatchedPins(PinSet(trusted)), BrokerQueue())

    def status(fp: str) -> int:
        req = Request(
            "POST", "/v1/workloads/events", [(b"content-type", b"application/json")], fp, "h2", 10
        )
        answer = endpoint.head(req)
        return 100 if answer is None else answer.status  # 100: go on

    async def main() -> None:
        end = for_loop(asyncio.get_running_loop())
        end.active = True  # as ServerConnection.buffer_updated does
        assert status(b) == 100
        (trusted / "b.crt").unlink()
        assert status(b) == 100  # the same batch: its first answer stands
        end.active = False
        end.callback_done()  # the batch is over
        end.active = True
        assert status(b) == 403  # the next batch asks again
        assert status(c) == 100
        end.active = False
        end.callback_done()
        (trusted / "c.crt").unlink()
        assert status(c) == 403  # outside a batch: every request asks

    asyncio.run(main())
