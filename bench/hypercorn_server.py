"""The inter-node benchmark's baseline: hypercorn serving ``POST /v1/workloads/events``.

``python -m bench.hypercorn_server --cert C --key K --ca PINS`` binds 127.0.0.1 on a free port,
prints ``{"method":"ready","port":N}`` on stdout, then serves until killed. Only the server
stack differs from nvpair-wm's:

* the same work per request: the endpoint's checks (path, method, content-type, declared and
  actual body size, a full broker queue -> 503), then the project's own ``Dispatcher.peer``
  (decode + validate, dedup, translate, encode) on the body, its ``to_broker`` lines into the
  project's own ``BrokerQueue``, written to stdout by one writer task exactly as nvpair-wm's
  broker channel does (one ``write`` per burst, ``drain``);
* the same TLS material: the node's certificate and key, a client certificate **required**,
  verified against the same pins (the ``trusted/`` certificate as the only trust anchor);
  session tickets off (nvpair-wm sends none either, so every handshake is a full one on both);
* one process, one event loop (hypercorn's asyncio worker), as nvpair-wm; keep-alive limits
  raised so that neither the idle timeout nor ``keep_alive_max_requests`` (1000 by default)
  cuts a connection during a run; access log off.

What it cannot do: hypercorn has no per-request view of the client certificate (the ASGI scope
carries none), so there is no per-request pin check (nvpair-wm re-reads its pins per request
and answers 403 on an open connection once a peer is removed); here the certificate is checked
once, at the handshake, against the pins as they were at startup.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import socket
import ssl
import sys
from typing import Any

from hypercorn.asyncio import serve
from hypercorn.config import Config

from nvpair_wm.dedup import WorkloadTable
from nvpair_wm.dispatch import Dispatcher
from nvpair_wm.endpoint import EVENTS_PATH, is_json_content_type
from nvpair_wm.local import BrokerQueue

MAX_BODY = 1024 * 1024


class BenchConfig(Config):
    def create_ssl_context(self) -> ssl.SSLContext | None:
        ctx = super().create_ssl_context()
        assert ctx is not None
        ctx.num_tickets = 0  # TLS 1.3: no session tickets (nvpair-wm: OP_NO_TICKET)
        ctx.options |= ssl.OP_NO_TICKET | ssl.OP_NO_RENEGOTIATION
        return ctx


def _error(status: int, reason: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    body = b'{"error":"%s"}' % reason.encode()
    return status, [(b"content-type", b"application/json")], body


class App:
    """ASGI app: the endpoint's checks + Dispatcher.peer, with the broker queue on stdout."""

    def __init__(self) -> None:
        def no_status() -> Any:
            raise AssertionError("manager:status is not served here")

        self.dispatcher = Dispatcher(WorkloadTable(), no_status)
        self.queue: BrokerQueue | None = None
        self.writer_task: asyncio.Task[None] | None = None

    async def start_writer(self) -> None:
        loop = asyncio.get_running_loop()
        self.queue = BrokerQueue(10_000)
        stdout = io.FileIO(os.dup(1), "wb")
        transport, proto = await loop.connect_write_pipe(
            lambda: asyncio.streams.FlowControlMixin(loop), stdout
        )
        writer = asyncio.StreamWriter(transport, proto, None, loop)
        writer.write(b'{"method":"ready","port":%d}\n' % PORT)
        queue = self.queue

        async def write_forever() -> None:
            while True:
                frames = await queue.take()
                writer.write(b"".join(frames))
                self.dispatcher.wrote_to_broker(len(frames))
                await writer.drain()

        self.writer_task = loop.create_task(write_forever())

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await self.start_writer()
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        status, headers, body = await self.handle(scope, receive)
        headers.append((b"content-length", b"%d" % len(body)))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def handle(
        self, scope: dict[str, Any], receive: Any
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        # The same checks, in the same order, as nvpair_wm.endpoint.EventsEndpoint.head
        # (except 403: no per-request view of the client certificate).
        if scope["path"] != EVENTS_PATH:
            return _error(404, "not found")
        if scope["method"] != "POST":
            return _error(405, "method not allowed")
        ctype = clen = None
        for k, v in scope["headers"]:
            if k == b"content-type":
                ctype = v
            elif k == b"content-length":
                clen = v
        if not is_json_content_type(ctype):
            return _error(415, "content-type must be application/json")
        if clen is not None and clen.isdigit() and int(clen) > MAX_BODY:
            return _error(413, "request body too large")
        queue = self.queue
        assert queue is not None
        if queue.full():
            return _error(503, "queue toward the broker is full")
        chunks = []
        size = 0
        while True:
            msg = await receive()
            chunk = msg.get("body", b"")
            if chunk:
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_BODY:
                    return _error(413, "request body too large")
            if not msg.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if queue.full():
            return _error(503, "queue toward the broker is full")
        result = self.dispatcher.peer(body)
        if result.to_broker:
            queue.put(result.to_broker)
        if result.body is None:
            return result.status, [], b""
        return result.status, [(b"content-type", b"application/json")], result.body


PORT = 0


def main() -> None:
    global PORT  # noqa: PLW0603 - set once, before the app starts
    p = argparse.ArgumentParser(prog="python -m bench.hypercorn_server")
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--ca", required=True, help="the pins: certificate(s) a client must present")
    args = p.parse_args()
    sock = socket.create_server(("127.0.0.1", 0), backlog=128)
    PORT = sock.getsockname()[1]
    config = BenchConfig()
    config.bind = [f"fd://{sock.fileno()}"]
    config.certfile, config.keyfile, config.ca_certs = args.cert, args.key, args.ca
    config.verify_mode = ssl.CERT_REQUIRED
    config.accesslog = None
    config.errorlog = "-"
    config.loglevel = "WARNING"
    config.keep_alive_timeout = 60
    config.keep_alive_max_requests = 1 << 40
    config.h2_max_concurrent_streams = 100
    sys.stdout = sys.stderr  # stdout is the broker channel
    asyncio.run(serve(App(), config))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
