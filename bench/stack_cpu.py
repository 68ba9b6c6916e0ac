"""Server CPU per request of the protocol stack alone, in memory: no sockets, no scheduler noise.

The same server path as the daemon's ``buffer_updated`` — :class:`TLSMachine` → HTTP/2 or
HTTP/1.1 session → the real ``EventsEndpoint`` + ``Dispatcher`` (broker sink: a list) → TLS
records out — fed records a real client produced beforehand (one request per record, as Go
net/http and curl write them). Only the server's work is timed (``time.process_time``), so
knobs can be compared on a busy machine where the real-peer benchmark (``bench.realpeer``) is noisy.

    .venv/bin/python -m bench.stack_cpu [--requests N]
        [--pins watched|scan|fixed]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h11
from OpenSSL import SSL

from bench.loadgen import Bodies
from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.dedup import WorkloadTable
from nvpair_wm.dispatch import Dispatcher
from nvpair_wm.endpoint import EventsEndpoint, PinCheck
from nvpair_wm.http.core import Limits
from nvpair_wm.io.pin_watch import WatchedPins
from nvpair_wm.pins import Identity, PinSet
from nvpair_wm.proto.h1 import H1Session
from nvpair_wm.proto.h2 import H2ServerSession
from nvpair_wm.proto.tls import TLSMachine
from nvpair_wm.tls_contexts import ServerTLS, client_context

PATH = "/v1/workloads/events"


class ListSink:
    def __init__(self) -> None:
        self.frames = 0

    def full(self) -> bool:
        return False

    def put(self, frames: list[bytes]) -> None:
        self.frames += len(frames)


class FixedPins:
    """The pin set read once (what a perfect cache would cost)."""

    def __init__(self, pins: PinSet) -> None:
        self.pins = pins.current()

    def is_pinned(self, fingerprint: str) -> bool:
        return fingerprint in self.pins


def _no_status() -> Any:
    raise AssertionError


def serve(
    server: TLSMachine, session: H1Session | H2ServerSession, chunk: bytes, now: float
) -> None:
    """What ``ServerConnection.buffer_updated`` does with one chunk, minus the socket."""
    plain = server.receive(chunk)
    session.receive_data(plain, now)
    server.send(session.data_to_send())
    server.data_to_send()
    session.next_deadline()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument(
        "--pins",
        choices=["watched", "scan", "fixed"],
        default="watched",
        help="trusted/ checked by inotify (the daemon's way), scanned per request, or read once",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dirs = init_cluster(Path(tmp) / "c", ["server", "client"])
        for proto in ("h2", "h1"):
            n = args.requests
            server_tls = ServerTLS(Identity(dirs["server"]))
            server = TLSMachine(server_tls.new_connection())
            ident = Identity(dirs["client"]).current()
            assert ident is not None
            pinset = PinSet(dirs["client"] / "trusted")
            alpn = b"h2" if proto == "h2" else b"http/1.1"
            conn = SSL.Connection(client_context(ident, pinset.is_pinned, [alpn]), None)
            conn.set_connect_state()
            client = TLSMachine(conn)
            client.start()
            while not (server.handshake_done and client.handshake_done):
                server.receive(client.data_to_send())
                client.receive(server.data_to_send())
            server_pins = PinSet(dirs["server"] / "trusted")
            pins: PinCheck
            if args.pins == "watched":
                pins = WatchedPins(server_pins)
            elif args.pins == "scan":
                pins = server_pins
            else:
                pins = FixedPins(server_pins)
            sink = ListSink()
            endpoint = EventsEndpoint(Dispatcher(WorkloadTable(), _no_status), pins, sink)
            fp = server.peer_fingerprint
            session: H1Session | H2ServerSession
            bodies = Bodies(1, 1)
            records: list[bytes] = []
            if proto == "h2":
                session = H2ServerSession(endpoint, Limits(), fp, 0.0)
                hc = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
                hc.initiate_connection()
                # The server reopens the connection window as it reads (its WINDOW_UPDATEs are
                # not fed back to this pre-generating client), so the client may assume it.
                hc.outbound_flow_control_window = 2**30
                client.send(hc.data_to_send())
                records.append(client.data_to_send())
                for _ in range(n):
                    _, body = bodies.next()
                    sid = hc.get_next_available_stream_id()
                    hc.send_headers(
                        sid,
                        [
                            (":method", "POST"),
                            (":scheme", "https"),
                            (":authority", "bench"),
                            (":path", PATH),
                            ("content-type", "application/json"),
                            ("content-length", str(len(body))),
                        ],
                    )
                    hc.send_data(sid, body, end_stream=True)
                    client.send(hc.data_to_send())
                    records.append(client.data_to_send())
            else:
                session = H1Session(endpoint, Limits(), fp, 0.0)
                c11 = h11.Connection(h11.CLIENT)
                for _ in range(n):
                    _, body = bodies.next()
                    head = h11.Request(
                        method="POST",
                        target=PATH,
                        headers=[
                            ("host", "bench"),
                            ("content-type", "application/json"),
                            ("content-length", str(len(body))),
                        ],
                    )
                    data = c11.send(head) + c11.send(h11.Data(data=body))
                    data += c11.send(h11.EndOfMessage())
                    client.send(data)
                    records.append(client.data_to_send())
                    c11 = h11.Connection(h11.CLIENT)  # the client side need not track answers
            warm = records[: n // 10 + 1]
            timed = records[n // 10 + 1 :]

            for i, chunk in enumerate(warm):
                serve(server, session, chunk, i * 1e-4)
            start = time.process_time()
            for i, chunk in enumerate(timed):
                serve(server, session, chunk, 1.0 + i * 1e-4)
            cpu = time.process_time() - start
            assert sink.frames == len(warm) + len(timed) - (1 if proto == "h2" else 0), sink.frames
            print(f"{proto}: {cpu / len(timed) * 1e6:.1f} us CPU/request ({len(timed)} requests)")


if __name__ == "__main__":
    main()
