"""Server CPU per single-frame request, one request in flight, ONE request per write.

This is how Go net/http, curl and nvpair-wm's own client talk to a peer: each request is
written on its own (HTTP/2: HEADERS + DATA of one stream in one write; HTTP/1.1: head + body in
one write) and the next one waits for the answer. Packing many requests into one write (as
``bench/loadgen.py`` does) hides what every read costs the server.

    .venv/bin/python -m bench.cpu_per_request [--requests N] [--proto h2|h1|both]

Starts a real ``nvpair-wm`` (stdio broker drained by a thread), connects with the stdlib
``ssl`` module and a pinned client certificate, warms up, then reports the server's CPU time
(``/proc/<pid>/task/*/schedstat``) divided by the requests answered, and the wall-clock rate.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import socket
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h11

from bench.loadgen import Bodies
from bench.procs import Drain, WmProc, cpu_seconds

PATH = "/v1/workloads/events"


def _user_system(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pid`` from /proc/<pid>/stat (clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _context(cli_dir: Path, alpn: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the pin is checked by hand below
    ctx.load_cert_chain(str(cli_dir / "node.crt"), str(cli_dir / "node.key"))
    ctx.set_alpn_protocols([alpn])
    return ctx


def _connect(port: int, ctx: ssl.SSLContext, pin: str) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock = ctx.wrap_socket(raw)
    der = sock.getpeercert(binary_form=True)
    if der is None or hashlib.sha256(der).hexdigest() != pin:
        raise SystemExit("server certificate is not the pinned one")
    return sock


def start_h2(sock: ssl.SSLSocket) -> h2.connection.H2Connection:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    return conn


def run_h2(sock: ssl.SSLSocket, conn: h2.connection.H2Connection, bodies: Bodies, n: int) -> None:
    for _ in range(n):
        _, body = bodies.next()
        sid = conn.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "https"),
            (":authority", "bench"),
            (":path", PATH),
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
        ]
        conn.send_headers(sid, headers)
        conn.send_data(sid, body, end_stream=True)
        sock.sendall(conn.data_to_send())  # one request, one write
        done = False
        while not done:
            data = sock.recv(65536)
            if not data:
                raise SystemExit("server closed the connection")
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    status = dict(ev.headers).get(b":status")
                    if status != b"202":
                        raise SystemExit(f"status {status!r}")
                elif isinstance(ev, h2.events.DataReceived):
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                    done = True
            out = conn.data_to_send()
            if out:
                sock.sendall(out)


def run_h1(sock: ssl.SSLSocket, conn: h11.Connection, bodies: Bodies, n: int) -> None:
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
        sock.sendall(
            conn.send(head) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
        )
        while True:
            ev = conn.next_event()
            if ev is h11.NEED_DATA:
                conn.receive_data(sock.recv(65536))
                continue
            if isinstance(ev, h11.Response) and ev.status_code != 202:
                raise SystemExit(f"status {ev.status_code}")
            if isinstance(ev, h11.EndOfMessage):
                break
        conn.start_next_cycle()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--proto", choices=["h2", "h1", "both"], default="both")
    args = ap.parse_args()

    from nvpair_wm.clusterdir import cert_fingerprint, init_cluster  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="cpu-per-req-") as tmp:
        root = Path(tmp)
        dirs = init_cluster(root / "cluster", ["server", "client"])
        srv, cli = dirs["server"], dirs["client"]
        pin = cert_fingerprint((srv / "node.crt").read_bytes())
        wm = WmProc(
            "--cluster-dir", str(srv), "--bind", "127.0.0.1", "--port", "0",
            "--log-level", "warn", log_path=root / "wm.log",
        )  # fmt: skip
        try:
            wm.expect_ready()
            port = wm.status()["port"]
            Drain(wm.stdout_fd, "stdout").start()
            protos = ["h2", "h1"] if args.proto == "both" else [args.proto]
            base = 1
            for proto in protos:
                alpn = "h2" if proto == "h2" else "http/1.1"
                sock = _connect(port, _context(cli, alpn), pin)
                run: Callable[[Bodies, int], None]
                if proto == "h2":
                    run = functools.partial(run_h2, sock, start_h2(sock))
                else:
                    run = functools.partial(run_h1, sock, h11.Connection(h11.CLIENT))
                run(Bodies(1, base), args.warmup)
                base += args.warmup
                (u0, s0), cpu0, t0 = _user_system(wm.pid), cpu_seconds(wm.pid), time.perf_counter()
                run(Bodies(1, base), args.requests)
                cpu1, t1, (u1, s1) = cpu_seconds(wm.pid), time.perf_counter(), _user_system(wm.pid)
                base += args.requests
                sock.close()
                us = (cpu1 - cpu0) / args.requests * 1e6
                rate = args.requests / (t1 - t0)
                user = (u1 - u0) / args.requests * 1e6
                system = (s1 - s0) / args.requests * 1e6
                print(
                    f"{proto}: {us:.0f} us server CPU/request (user {user:.0f}, system "
                    f"{system:.0f}), {rate:.0f} req/s (1 in flight)"
                )
        except BaseException:
            print(wm.log_tail())
            raise
        finally:
            wm.close()
    os._exit(0)  # the stdout drain thread may still block on its pipe


if __name__ == "__main__":
    main()
