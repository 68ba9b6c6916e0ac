"""What a peer's requests make the node forward to its broker reaches the journal first, and
the requests of one read cost the journal one write.

Seen from outside, with ``strace``: a real daemon under ``strace -f -e trace=write`` takes
sixteen HTTP/2 requests from a pinned peer, written in one go over mutual TLS (so that one read
holds them all). For every workload, the first write that carries it to the journal comes
before the first write that carries it to the broker (stdout); and the journal got them in at
most two writes (one per read of the server: the requests may straddle two reads, never
sixteen).
"""

from __future__ import annotations

import json
import re
import socket
import ssl
from pathlib import Path

import h2.config
import h2.connection
import h2.events

from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.endpoint import EVENTS_PATH
from nvpair_wm.pins import CERT_FILE, KEY_FILE
from tests.support.tools import tool
from tests.support.wm_process import WAIT, WmProcess

REQUESTS = 16

_WRITE = re.compile(r'^\d+ +write\((\d+), "(.*)", \d+\) += \d+$')


def event(wid: str) -> bytes:
    info = {
        "id": wid,
        "model": "m",
        "engine": "vllm",
        "runId": "r1",
        "state": "queued",
        "originatedFrom": "node-2",
        "createdAt": 1,
        "startedAt": None,
        "completedAt": None,
        "error": None,
        "seq": 1,
    }
    frame = {"jsonrpc": "2.0", "method": "workload:submitted", "params": {"workloadInfo": info}}
    return json.dumps(frame).encode()


def post_in_one_write(port: int, member: Path, bodies: list[bytes]) -> list[int]:
    """Every body a request on its own stream, all written with one ``sendall``; the statuses."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(member / CERT_FILE, member / KEY_FILE)
    ctx.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=WAIT) as raw,
        ctx.wrap_socket(raw) as sock,
    ):
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        statuses: dict[int, int] = {}
        for body in bodies:
            sid = conn.get_next_available_stream_id()
            head = [(":method", "POST"), (":scheme", "https"), (":path", EVENTS_PATH)]
            head += [(":authority", "node-1"), ("content-type", "application/json")]
            conn.send_headers(sid, [*head, ("content-length", str(len(body)))])
            conn.send_data(sid, body, end_stream=True)
        sock.sendall(conn.data_to_send())  # every request in one write
        ended: set[int] = set()
        while len(ended) < len(bodies):
            data = sock.recv(65536)
            assert data, "the node closed the connection"
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    statuses[ev.stream_id] = int(dict(ev.headers)[b":status"])
                elif isinstance(ev, h2.events.StreamEnded):
                    ended.add(ev.stream_id)
            sock.sendall(conn.data_to_send())
        return [statuses[sid] for sid in sorted(statuses)]


def test_forwarded_records_reach_the_journal_before_the_broker_one_write_per_read(
    tmp_path: Path,
) -> None:
    strace = tool("strace")
    cluster = init_cluster(tmp_path / "cluster", ["node-1", "node-2"])
    node, member = cluster["node-1"], cluster["node-2"]
    trace = tmp_path / "trace"
    prefix = [strace, "-f", "-o", str(trace), "-e", "trace=write", "-s", "1000000"]
    wids = [f"order-{i:02d}" for i in range(REQUESTS)]
    args = ["--cluster-dir", str(node), "--port", "0", "--bind", "127.0.0.1"]
    with WmProcess(*args, prefix=prefix) as wm:
        assert wm.recv()["method"] == "ready"
        port = wm.status()["port"]
        assert post_in_one_write(port, member, [event(w) for w in wids]) == [202] * REQUESTS
        seen = {wm.recv()["params"]["workloadInfo"]["id"] for _ in wids}
        assert seen == set(wids)
        wm.close_stdin()
        assert wm.wait() == 0
    journal_writes: list[int] = []  # line numbers of the journal writes carrying our workloads
    first_journal: dict[str, int] = {}
    first_broker: dict[str, int] = {}
    for number, line in enumerate(trace.read_text(errors="replace").splitlines()):
        m = _WRITE.match(line)
        if m is None:
            continue
        data = m.group(2)
        carried = [w for w in wids if w in data]
        if not carried or int(m.group(1)) == 2:  # a socket's writes are ciphertext; 2: the log
            continue
        # The broker's frames are JSON text (on a duplicate of stdout); the journal's binary.
        to_broker = data.startswith(("{", "["))
        first = first_broker if to_broker else first_journal
        for w in carried:
            first.setdefault(w, number)
        if not to_broker:
            journal_writes.append(number)
    assert set(first_journal) == set(wids), sorted(set(wids) - set(first_journal))
    assert set(first_broker) == set(wids)
    late = [w for w in wids if first_journal[w] > first_broker[w]]
    assert not late, f"reached the broker before the journal: {late}"
    assert 1 <= len(journal_writes) <= 2, f"{len(journal_writes)} journal writes for one read"
