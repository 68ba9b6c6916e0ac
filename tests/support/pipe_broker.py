"""A stand-in broker on a Windows named pipe, run under Wine by the Windows CPython.

``python.exe pipe_broker.py \\\\.\\pipe\\NAME``: serves the pipe, accepts one connection (the
node dialing ``--ipc``), and relays: what the node writes goes to this process's stdout, what
arrives on its stdin goes to the node. So a test drives a node on a named pipe exactly as one on
stdio (``WmProcess(program=...)`` around this script). Its stdin's end closes the pipe (the
broker closing the channel: the node stops); the node's end of the pipe ends this process.

``python.exe pipe_broker.py \\\\.\\pipe\\NAME -- COMMAND ARGS...`` also starts the node,
``COMMAND ARGS... --ipc \\\\.\\pipe\\NAME``, before it listens (the node dials until it does),
and exits with the node's status: the conformance kit runs it as the implementation, and so
checks the channel over the named pipe as it checks stdio. The relay writes the node's output
with blocking writes from the loop: while its reader does not read, the loop stops reading the
pipe, and the node's writes to the pipe wait (backpressure reaches the node).

Lines on stderr say what happens (``listening``, ``connected``, ``node closed``) for the test's
log. Windows only: the proactor loop's ``start_serving_pipe``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading


class Relay(asyncio.Protocol):
    def __init__(self, connected: asyncio.Future[asyncio.WriteTransport], done: asyncio.Event):
        self.connected = connected
        self.done = done

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        print("connected", file=sys.stderr, flush=True)
        if not self.connected.done():
            self.connected.set_result(transport)

    def data_received(self, data: bytes) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        print(f"node closed ({exc})", file=sys.stderr, flush=True)
        self.done.set()


def pump_stdin(loop: asyncio.AbstractEventLoop, transport: asyncio.WriteTransport) -> None:
    """stdin to the node, in a thread (an anonymous pipe is not overlapped); EOF closes."""
    while True:
        data = os.read(sys.stdin.fileno(), 65536)
        if not data:
            loop.call_soon_threadsafe(transport.close)
            return
        loop.call_soon_threadsafe(transport.write, data)


async def relay(address: str) -> None:
    loop = asyncio.get_running_loop()
    connected: asyncio.Future[asyncio.WriteTransport] = loop.create_future()
    done = asyncio.Event()
    servers = await loop.start_serving_pipe(  # type: ignore[attr-defined]
        lambda: Relay(connected, done), address
    )
    print(f"listening on {address}", file=sys.stderr, flush=True)
    transport = await connected
    for server in servers:
        server.close()  # one node: no further instance of the pipe
    threading.Thread(target=pump_stdin, args=(loop, transport), daemon=True).start()
    await done.wait()


def main(argv: list[str]) -> int:
    address, command = argv[0], argv[2:] if argv[1:2] == ["--"] else []
    node = None
    if command:
        node = subprocess.Popen([*command, "--ipc", address], stdin=subprocess.DEVNULL)
    asyncio.run(relay(address))
    return 0 if node is None else node.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
