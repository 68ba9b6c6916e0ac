"""Load generator for the inter-node benchmark: ``python -m bench.loadgen ARGS`` (one process).

Made to cost the generator far less per request than the server: stdlib :mod:`ssl` (OpenSSL in
C) on non-blocking sockets under one ``selectors`` loop, and HTTP written by hand:

* HTTP/2 (``--mode h2``): one connection (``--conns``) with up to ``--streams`` requests in
  flight. A request is a HEADERS frame and DATA frames. The header fields are those of
  nvpair-wm's own client, HPACK-encoded as the h2 library does (indexed after first use); the
  blocks are built once, since bodies of one kind have one length (content-length included).
  The connection send window is honoured; responses are decoded with ``hpack`` (their status is
  checked) and counted on END_STREAM.
* HTTP/1.1 (``--mode h1``): ``--conns`` keep-alive connections, one request in flight on each.
* Handshakes (``--mode handshake``): ``--conns`` connections handshaking at once; each full
  handshake (no session resumption: a fresh one every time) is counted, the connection closed
  and a new one started.

Every request carries new workloads (``--id-base`` + a counter, fixed width), so the server
applies every frame. The server's certificate is pin-checked (SHA-256 of its DER) per
connection, as a peer would.

Control (lines on stdin; each is answered with one JSON line of totals on stdout: requests
done, requests in flight, statuses, errors, CPU seconds of this process): the generator
connects, prints a ``ready`` line (TLS version, cipher, ALPN) and waits, connections open.
``r`` starts (resumes) the load; ``p`` pauses it: no new request or handshake is started, those
in flight finish (``active`` reaches 0), connections stay open; ``s`` only reports. EOF on stdin
stops it (after a last line of totals). Pausing lets the benchmark keep one generator per
variant alive and interleave the repetitions without restarting processes.
"""

from __future__ import annotations

import argparse
import errno
import gc
import hashlib
import json
import os
import selectors
import socket
import ssl
import sys
import time
from collections import Counter
from typing import Any

import hpack

from bench.frames import event_batch_template, event_templates

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, WINDOW, CONT = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
PATH = "/v1/workloads/events"


def frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return (
        bytes((n >> 16, (n >> 8) & 0xFF, n & 0xFF, ftype, flags)) + sid.to_bytes(4, "big") + payload
    )


class Bodies:
    """Request bodies with new workload ids: one frame, or a batch of ``batch`` frames."""

    def __init__(self, batch: int, id_base: int) -> None:
        self.templates = event_templates()
        self.batch = batch
        self.next_id = id_base
        if batch > 1:
            self.tpl = [event_batch_template(self.templates, batch)]
        else:
            self.tpl = self.templates
        # One length per template: content-length and the HPACK block are fixed per template.
        self.lengths = [len((t % ((0,) * max(1, batch))).encode()) for t in self.tpl]
        self.turn = 0

    def next(self) -> tuple[int, bytes]:
        """(template index, body)."""
        i = self.turn
        self.turn = (i + 1) % len(self.tpl)
        k = self.next_id
        if self.batch > 1:
            self.next_id = k + self.batch
            return i, (self.tpl[i] % tuple(range(k, k + self.batch))).encode()
        self.next_id = k + 1
        return i, (self.tpl[i] % k).encode()


def client_context(cert: str, key: str, alpn: list[str]) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the pin is checked by hand, per connection
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(alpn)
    return ctx


class Gen:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.sel = selectors.DefaultSelector()
        self.done = 0  # requests answered (or handshakes completed)
        self.frames = 0  # frames in answered requests
        self.status: Counter[int] = Counter()
        self.errors: Counter[str] = Counter()
        self.addr = (args.host, args.port)
        self.pin = args.pin
        self.bodies = Bodies(args.batch, args.id_base)
        alpn = {"h2": ["h2"], "h1": ["http/1.1"], "handshake": ["h2", "http/1.1"]}[args.mode]
        self.ctx = client_context(args.cert, args.key, alpn)
        self.tls_info: dict[str, Any] = {}
        self.paused = True
        self.conns: list[Any] = []

    # -- connections ---------------------------------------------------------------------------

    def connect(self) -> ssl.SSLSocket:
        raw = socket.create_connection(self.addr)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s = self.ctx.wrap_socket(raw)
        self.check_pin(s)
        cipher = s.cipher()
        assert cipher is not None, "wrap_socket on a blocking socket has finished the handshake"
        self.tls_info = {
            "version": s.version(),
            "cipher": cipher[0],
            "alpn": s.selected_alpn_protocol(),
        }
        s.setblocking(False)
        return s

    def check_pin(self, s: ssl.SSLSocket) -> None:
        der = s.getpeercert(binary_form=True)
        if self.pin and (der is None or hashlib.sha256(der).hexdigest() != self.pin):
            raise SystemExit("loadgen: the server's certificate is not the pinned one")

    def totals(self) -> dict[str, Any]:
        t = os.times()
        return {
            "done": self.done,
            "frames": self.frames,
            "status": {str(k): v for k, v in self.status.items()},
            "errors": dict(self.errors),
            "active": sum(c.active for c in self.conns),
            "paused": self.paused,
            "cpu": t.user + t.system,
            "t": time.monotonic(),
        }

    # -- main loop -----------------------------------------------------------------------------

    def run(self) -> None:
        mode = self.args.mode
        if mode == "h2":
            conns: list[Any] = [H2(self, self.connect()) for _ in range(self.args.conns)]
        elif mode == "h1":
            conns = [H1(self, self.connect()) for _ in range(self.args.conns)]
        else:
            self.connect().close()  # one blocking handshake first: TLS details, pin check
            conns = [Handshake(self) for _ in range(self.args.conns)]
        self.conns = conns
        for c in conns:
            c.flush()  # HTTP/2: preface and SETTINGS
        stdin = sys.stdin.fileno()
        os.set_blocking(stdin, False)
        self.sel.register(stdin, selectors.EVENT_READ, None)
        self.reply({"ready": True, **self.tls_info})
        ctl = b""
        select = self.sel.select
        while True:
            for key, events in select(1.0):
                if key.data is None:
                    chunk = os.read(stdin, 4096)
                    if not chunk:
                        self.reply(self.totals())
                        return
                    ctl += chunk
                    while b"\n" in ctl:
                        cmd, ctl = ctl.split(b"\n", 1)
                        if cmd == b"r" and self.paused:
                            self.paused = False
                            for c in conns:
                                c.start()
                        elif cmd == b"p":
                            self.paused = True
                        self.reply(self.totals())
                else:
                    key.data.ready(events)

    @staticmethod
    def reply(obj: dict[str, Any]) -> None:
        os.write(1, json.dumps(obj).encode() + b"\n")


class _TLSConn:
    """A non-blocking SSL socket with an output buffer (a pending SSL_write is retried with the
    very same bytes, as OpenSSL requires)."""

    def __init__(self, gen: Gen, sock: ssl.SSLSocket) -> None:
        self.gen = gen
        self.sock = sock
        self.out = bytearray()
        self.pending: bytes | None = None
        self.want_write = False
        gen.sel.register(sock, selectors.EVENT_READ, self)

    def flush(self) -> None:
        while True:
            if self.pending is None:
                if not self.out:
                    break
                self.pending = bytes(self.out)
                self.out.clear()
            try:
                n = self.sock.send(self.pending)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                self._watch_write(True)
                return
            self.pending = None if n == len(self.pending) else self.pending[n:]
        self._watch_write(False)

    def _watch_write(self, on: bool) -> None:
        if on != self.want_write:
            self.want_write = on
            ev = selectors.EVENT_READ | (selectors.EVENT_WRITE if on else 0)
            self.gen.sel.modify(self.sock, ev, self)

    def ready(self, events: int) -> None:
        if events & selectors.EVENT_WRITE:
            self.flush()
        if events & selectors.EVENT_READ:
            recv = self.sock.recv
            while True:
                try:
                    data = recv(262_144)
                except (ssl.SSLWantReadError, BlockingIOError):
                    break
                except ssl.SSLWantWriteError:
                    self._watch_write(True)
                    break
                if not data:
                    raise SystemExit(
                        f"loadgen: the server closed the connection ({self.gen.errors})"
                    )
                self.received(data)
            self.flush()

    def received(self, data: bytes) -> None:
        raise NotImplementedError


class H2(_TLSConn):
    def __init__(self, gen: Gen, sock: ssl.SSLSocket) -> None:
        super().__init__(gen, sock)
        self.inbuf = bytearray()
        self.decoder = hpack.Decoder()
        self.block = bytearray()  # HEADERS + CONTINUATION being assembled
        self.block_end = False
        self.next_sid = 1
        self.active = 0
        self.limit = gen.args.streams
        self.server_streams = 100  # until the server's SETTINGS say
        self.send_window = 65_535  # connection window for our DATA
        self.stream_window = 65_535  # initial window of each new stream (server's SETTINGS)
        self.max_frame = 16_384
        self.recv_unacked = 0
        # The header fields nvpair-wm's own client sends, HPACK-encoded as h2 does (Huffman,
        # incremental indexing): the first request of each body length adds its fields to the
        # server's dynamic table, later ones are fully indexed. Both block sequences are built
        # once; requests go out in the order they were encoded, so the server's decoder state
        # matches.
        authority = f"{gen.addr[0]}:{gen.addr[1]}"
        enc = hpack.Encoder()
        fields = [
            [
                (":method", "POST"),
                (":scheme", "https"),
                (":authority", authority),
                (":path", PATH),
                ("user-agent", "nvpair-wm"),
                ("content-type", "application/json"),
                ("content-length", str(length)),
            ]
            for length in gen.bodies.lengths
        ]
        self.first_blocks = [enc.encode(f) for f in fields]
        self.blocks = [enc.encode(f) for f in fields]
        if [enc.encode(f) for f in fields] != self.blocks:
            raise SystemExit("loadgen: HPACK blocks are not stable")
        self.first_pending = len(fields)  # the next requests, in order, use first_blocks
        settings = (2).to_bytes(2, "big") + (0).to_bytes(4, "big")  # ENABLE_PUSH 0
        settings += (4).to_bytes(2, "big") + (1 << 20).to_bytes(4, "big")  # INITIAL_WINDOW
        self.out += PREFACE + frame(SETTINGS, 0, 0, settings)
        self.out += frame(WINDOW, 0, 0, ((1 << 30) - 65_535).to_bytes(4, "big"))

    def start(self) -> None:
        self.fill()
        self.flush()

    def fill(self) -> None:
        if self.gen.paused:
            return
        bodies = self.gen.bodies
        cap = min(self.limit, self.server_streams)
        out = self.out
        while self.active < cap:
            i, body = bodies.next()
            n = len(body)
            if n > self.send_window:
                bodies.turn = i  # not sent: retry this kind later (ids may skip; harmless)
                break
            if n > self.stream_window:
                raise SystemExit("loadgen: body larger than a stream window")
            sid = self.next_sid
            self.next_sid += 2
            if self.first_pending:
                block = self.first_blocks[len(self.first_blocks) - self.first_pending]
                self.first_pending -= 1
            else:
                block = self.blocks[i]
            out += frame(HEADERS, END_HEADERS, sid, block)
            mf = self.max_frame
            for off in range(0, n, mf):
                last = off + mf >= n
                out += frame(DATA, END_STREAM if last else 0, sid, body[off : off + mf])
            self.send_window -= n
            self.active += 1

    def received(self, data: bytes) -> None:
        buf = self.inbuf
        buf += data
        pos = 0
        end = len(buf)
        finished = 0
        while end - pos >= 9:
            length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
            if end - pos < 9 + length:
                break
            ftype, flags = buf[pos + 3], buf[pos + 4]
            sid = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFF_FFFF
            payload = bytes(buf[pos + 9 : pos + 9 + length])
            pos += 9 + length
            if ftype in (HEADERS, CONT):
                if ftype == HEADERS:
                    if flags & PADDED:
                        payload = payload[1 : len(payload) - payload[0]]
                    if flags & PRIORITY:
                        payload = payload[5:]
                    self.block_end = bool(flags & END_STREAM)
                self.block += payload
                if flags & END_HEADERS:
                    headers = list(self.decoder.decode(bytes(self.block)))  # typed as an Iterable
                    self.block.clear()
                    # hpack types HeaderTuple as (bytes, bytes), but without raw=True it is str.
                    if headers and headers[0][0] == ":status":  # type: ignore[comparison-overlap]
                        self.gen.status[int(headers[0][1])] += 1
                    if self.block_end:
                        finished += 1
            elif ftype == DATA:
                self.recv_unacked += length
                if flags & END_STREAM:
                    finished += 1
            elif ftype == WINDOW:
                inc = int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF
                if sid == 0:
                    self.send_window += inc
            elif ftype == SETTINGS:
                if not flags & ACK:
                    for off in range(0, len(payload) - 5, 6):
                        ident = int.from_bytes(payload[off : off + 2], "big")
                        value = int.from_bytes(payload[off + 2 : off + 6], "big")
                        if ident == 3:
                            self.server_streams = value
                        elif ident == 4:
                            self.stream_window = value
                        elif ident == 5:
                            self.max_frame = value
                    self.out += frame(SETTINGS, ACK, 0)
            elif ftype == PING:
                if not flags & ACK:
                    self.out += frame(PING, ACK, 0, payload)
            elif ftype == RST:
                self.gen.errors["rst_stream"] += 1
                finished += 1
            elif ftype == GOAWAY:
                self.gen.errors["goaway"] += 1
                raise SystemExit(f"loadgen: GOAWAY {payload[:8].hex()} {payload[8:]!r}")
        del buf[:pos]
        if self.recv_unacked > 1 << 20:
            self.out += frame(WINDOW, 0, 0, self.recv_unacked.to_bytes(4, "big"))
            self.recv_unacked = 0
        if finished:
            self.active -= finished
            self.gen.done += finished
            self.gen.frames += finished * self.gen.bodies.batch
            self.fill()


class H1(_TLSConn):
    def __init__(self, gen: Gen, sock: ssl.SSLSocket) -> None:
        super().__init__(gen, sock)
        self.inbuf = bytearray()
        self.active = 0
        host = f"{gen.addr[0]}:{gen.addr[1]}"
        self.heads = [
            (
                f"POST {PATH} HTTP/1.1\r\nhost: {host}\r\nuser-agent: nvpair-wm\r\n"
                f"content-type: application/json\r\ncontent-length: {n}\r\n\r\n"
            ).encode()
            for n in gen.bodies.lengths
        ]

    def start(self) -> None:
        if not self.active:
            self.send_one()
        self.flush()

    def send_one(self) -> None:
        if self.gen.paused:
            self.active = 0
            return
        self.active = 1
        i, body = self.gen.bodies.next()
        self.out += self.heads[i]
        self.out += body

    def received(self, data: bytes) -> None:
        buf = self.inbuf
        buf += data
        while True:
            head_end = buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = bytes(buf[:head_end]).lower() + b"\r\n"
            status = int(head[9:12])
            at = head.find(b"\ncontent-length:")
            if at >= 0:
                total = head_end + 4 + int(head[at + 16 : head.find(b"\r", at)])
            elif b"\ntransfer-encoding: chunked" in head:
                # Small bodies only: the whole chunked body ends with the last-chunk line.
                stop = buf.find(b"0\r\n\r\n", head_end + 4)
                if stop < 0:
                    return
                total = stop + 5
            else:
                total = head_end + 4
            if len(buf) < total:
                return
            del buf[:total]
            if status == 100:
                continue
            self.gen.status[status] += 1
            self.gen.done += 1
            self.gen.frames += self.gen.bodies.batch
            if b"\nconnection: close" in head:
                raise SystemExit("loadgen: the server closed a keep-alive connection")
            self.send_one()


class Handshake:
    """One connection at a time per slot: connect, full handshake, count, close, again."""

    def __init__(self, gen: Gen) -> None:
        self.gen = gen
        self.sock: socket.socket | ssl.SSLSocket | None = None
        self.tls = False
        self.active = 0

    def flush(self) -> None:
        pass

    def start(self) -> None:
        """Start a connection unless one is in progress or the load is paused."""
        if self.gen.paused or self.active:
            return
        self.active = 1
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setblocking(False)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        err = raw.connect_ex(self.gen.addr)
        if err not in (0, errno.EINPROGRESS):
            raise SystemExit(f"loadgen: connect: {os.strerror(err)}")
        self.sock = raw
        self.tls = False
        self.gen.sel.register(raw, selectors.EVENT_WRITE, self)

    def ready(self, events: int) -> None:
        sel = self.gen.sel
        sock = self.sock
        assert sock is not None
        if not self.tls:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            sel.unregister(sock)
            if err:
                self.gen.errors[os.strerror(err)] += 1
                sock.close()
                self.again()
                return
            sock = self.sock = self.gen.ctx.wrap_socket(sock, do_handshake_on_connect=False)
            self.tls = True
            sel.register(sock, selectors.EVENT_READ, self)
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            sel.modify(sock, selectors.EVENT_READ, self)
            return
        except ssl.SSLWantWriteError:
            sel.modify(sock, selectors.EVENT_WRITE, self)
            return
        except (ssl.SSLError, OSError) as exc:
            self.gen.errors[type(exc).__name__] += 1
            sel.unregister(sock)
            sock.close()
            self.again()
            return
        self.gen.check_pin(sock)
        self.gen.done += 1
        sel.unregister(sock)
        sock.close()
        self.again()

    def again(self) -> None:
        self.active = 0
        self.sock = None
        self.start()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--pin", default="", help="sha256 hex of the server's certificate (DER)")
    p.add_argument("--mode", choices=("h2", "h1", "handshake"), required=True)
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--streams", type=int, default=100)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--id-base", type=int, default=0)
    gc.disable()  # nothing here makes cycles; no collector pauses in the generator
    Gen(p.parse_args()).run()


if __name__ == "__main__":
    main()
