"""The transports' read cap: reads stay under it, and nothing is lost across reads."""

from __future__ import annotations

import asyncio
import socket

from nvpair_wm.io.readsize import READ_SIZE, cap_reads


class _Collect(asyncio.Protocol):
    def __init__(self, want: int) -> None:
        self.chunks: list[bytes] = []
        self.want = want
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        if sum(map(len, self.chunks)) >= self.want and not self.done.done():
            self.done.set_result(None)


async def _capped_reads() -> None:
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    payload = bytes(range(256)) * (3 * READ_SIZE // 256 + 7)  # several caps' worth
    proto = _Collect(len(payload))
    transport, _ = await loop.create_connection(lambda: proto, sock=ours)
    try:
        cap_reads(transport)
        assert transport.max_size == READ_SIZE  # type: ignore[attr-defined]
        theirs.setblocking(False)
        await loop.sock_sendall(theirs, payload)
        await asyncio.wait_for(proto.done, 10)
        assert b"".join(proto.chunks) == payload
        assert max(map(len, proto.chunks)) <= READ_SIZE
    finally:
        transport.close()
        theirs.close()


def test_capped_reads_deliver_everything_in_reads_of_at_most_the_cap() -> None:
    asyncio.run(_capped_reads())
