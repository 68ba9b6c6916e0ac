"""Client CPU per request of the outbound stack alone, in memory: no sockets, no scheduler noise.

The path of one broadcaster request without its event loop: :class:`H2ClientSession` or
:class:`H1ClientSession` → :class:`TLSMachine` (client side, real certificates from
``nvpair_wm.clusterdir``) → records, and the response back through both. The server is h2 or
h11 behind a server-side ``TLSMachine``, answering 202; only the client's work is timed
(``time.thread_time``), so knobs can be compared on a busy machine where the propagation
benchmark is noisy.

    .venv/bin/python -m bench.client_stack [--requests N] [--frames N] [--reps N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h11
from OpenSSL import SSL

from bench.frames import event_templates
from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.pins import Identity
from nvpair_wm.proto.exchanges import ClientEvent, ResponseReceived
from nvpair_wm.proto.h1client import H1ClientSession
from nvpair_wm.proto.h2.client import H2ClientSession
from nvpair_wm.proto.tls import TLSMachine
from nvpair_wm.tls_contexts import ServerTLS, client_context

PATH = "/v1/workloads/events"
AUTHORITY = b"127.0.0.1:14320"


def _pair(root: Path, alpn: tuple[bytes, ...]) -> tuple[TLSMachine, TLSMachine]:
    """A client and a server TLS machine, handshaken in memory."""
    dirs = init_cluster(root, ["a", "b"])
    ident = Identity(dirs["b"]).current()
    assert ident is not None
    ctx = client_context(ident, lambda _fp: True, alpn)
    conn = SSL.Connection(ctx, None)
    conn.set_connect_state()
    client = TLSMachine(conn)
    server = TLSMachine(ServerTLS(Identity(dirs["a"])).new_connection())
    client.start()
    for _ in range(10):
        server.receive(client.data_to_send())
        client.receive(server.data_to_send())
        if client.handshake_done and server.handshake_done:
            break
    server.receive(client.data_to_send())
    assert client.handshake_done and server.handshake_done
    return client, server


def _body(frames: int) -> bytes:
    tpl = event_templates(origin="node-a", run_id="r-bench-client")
    return ("[" + ",".join(tpl[k % 5] % k for k in range(frames)) + "]").encode()


def run_h2(requests: int, body: bytes, root: Path) -> float:
    """Client CPU seconds per request over HTTP/2."""
    ctls, stls = _pair(root, (b"h2",))
    session = H2ClientSession(AUTHORITY, 1 << 20)
    config = h2.config.H2Configuration(client_side=False, header_encoding=None)
    server = h2.connection.H2Connection(config)
    server.initiate_connection()

    def serve(data: bytes) -> bytes:
        for ev in server.receive_data(stls.receive(data)):
            if isinstance(ev, h2.events.DataReceived):
                server.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                fields = [(b":status", b"202"), (b"content-length", b"0")]
                server.send_headers(ev.stream_id, fields, end_stream=True)
        stls.send(server.data_to_send())
        return stls.data_to_send()

    def client_out() -> bytes:
        ctls.send(session.data_to_send())
        return ctls.data_to_send()

    session.receive_data(ctls.receive(serve(client_out())), 0.0)
    serve(client_out())
    return _loop(
        requests,
        lambda: session.start_request(PATH, body, 0.0, 10.0),
        client_out,
        serve,
        lambda back: session.receive_data(ctls.receive(back), 0.0),
    )


def run_h1(requests: int, body: bytes, root: Path) -> float:
    """Client CPU seconds per request over HTTP/1.1."""
    ctls, stls = _pair(root, (b"http/1.1",))
    session = H1ClientSession(AUTHORITY, 1 << 20)
    server = h11.Connection(h11.SERVER)

    def serve(data: bytes) -> bytes:
        server.receive_data(stls.receive(data))
        while (ev := server.next_event()) is not h11.NEED_DATA:
            if isinstance(ev, h11.EndOfMessage):
                head = h11.Response(status_code=202, headers=[(b"content-length", b"0")])
                stls.send(server.send(head) or b"")
                stls.send(server.send(h11.EndOfMessage()) or b"")
                server.start_next_cycle()
        return stls.data_to_send()

    def client_out() -> bytes:
        ctls.send(session.data_to_send())
        return ctls.data_to_send()

    return _loop(
        requests,
        lambda: session.start_request(PATH, body, 0.0, 10.0),
        client_out,
        serve,
        lambda back: session.receive_data(ctls.receive(back), 0.0),
    )


def _loop(
    requests: int,
    start: Callable[[], int],
    client_out: Callable[[], bytes],
    serve: Callable[[bytes], bytes],
    receive: Callable[[bytes], list[ClientEvent]],
) -> float:
    spent = 0.0
    for _ in range(requests):
        t0 = time.thread_time()
        start()
        out = client_out()
        spent += time.thread_time() - t0
        back = serve(out)
        while True:
            t0 = time.thread_time()
            events = receive(back)
            out = client_out()  # WINDOW_UPDATEs, the rest of a body
            spent += time.thread_time() - t0
            if any(isinstance(e, ResponseReceived) for e in events):
                break
            back = serve(out)
    return spent / requests


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.client_stack", description=__doc__)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--frames", type=int, nargs="*", default=[1, 200])
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="nvpair-bench-client-") as tmp:
        for frames in args.frames:
            body = _body(frames)
            for name, fn in (("h2", run_h2), ("http/1.1", run_h1)):
                per = [
                    fn(args.requests, body, Path(tmp) / f"{name[:2]}-{frames}-{i}")
                    for i in range(args.reps)
                ]
                print(
                    f"{name:8} {frames:4} frames ({len(body):7,} B): client CPU per request "
                    f"median {statistics.median(per) * 1e6:7.1f} us, min {min(per) * 1e6:7.1f} us "
                    f"({args.reps} x {args.requests})"
                )


if __name__ == "__main__":
    main()
