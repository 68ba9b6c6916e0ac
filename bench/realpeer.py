"""Inter-node server under real peers: Go ``net/http`` clients, one request per write sequence.

``bench/internode.py``'s generator packs many requests into each write, which hides what every
read costs the server. Real peers do not do that: Go ``net/http`` (the original workload
manager's stack), curl and nvpair-wm's own client each write one request (HEADERS, then DATA)
and wait. This benchmark drives three servers with exactly such a client,
``bench/goload/main.go`` (standard library only, built here with ``go build``):

* **nvpair-wm**: a real ``nvpair-wm --cluster-dir D --bind 127.0.0.1 --port 0`` (the
  generator's certificate pinned), its broker side drained by a thread of the harness;
* **hypercorn**: ``bench/hypercorn_server.py`` (the same endpoint checks and ``Dispatcher.peer``
  work behind hypercorn's HTTP stack), as in ``internode``;
* **nginx** (from Debian: ``apt-get install -y nginx-light``), a compiled server: one worker, no
  master, TLS with ``ssl_verify_client optional_no_ca`` and ``return 202`` — the cost of TLS and
  HTTP framing alone, with no application work at all.

Loads (each a real-peer shape): HTTP/2 with 1 request in flight; HTTP/2 with 32 concurrent
streams on one connection; HTTP/1.1 with 8 keep-alive connections, one request each. Every
body is one new workload frame. The server is pinned to one core, and the generator and the
thread that drains the server's broker side to the other (:func:`pin_server`): the server's
core is the server's alone. The server's **CPU microseconds per request** (``/proc`` CPU time
over requests answered in the window) is the figure that does not depend on how fast the
client is; the request rate is reported beside it. Windows are interleaved (rep 1 of every
server and load, then rep 2, ...) so drift affects every side alike.

With ``python -m bench --only realpeer --baseline COMMIT|DIR`` a second nvpair-wm runs from that
tree (:mod:`bench.baseline`) beside this one, on the same core and the same loads, its windows
alternating with ours rep after rep: a hot-path change states its cost as the ratio of server CPU
per request, baseline over this tree, which must stay at or above 1/1.05.

Targets (issue 9): server CPU per single-frame request <= 150 us over HTTP/2 and <= 100 us over
HTTP/1.1; requests/s >= 3x hypercorn's on the same load.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bench.baseline import Tree, baseline_tree
from bench.frames import event_templates
from bench.harness import ROOT, BenchResult, Check, Context, Measurement, Skip, fmt
from bench.internode import Bench, Gens, Run, Server, Variant
from bench.procs import Drain, ProcError

NAME = "realpeer"
DESCRIPTION = "mTLS POSTs from Go net/http (one request per write): nvpair-wm vs hypercorn, nginx"

RATE_TARGET = 3.0  # x hypercorn's requests/s
RATE_MEANING = (
    "against peers that send one request per write, the server's stack is no faster than a "
    "Python ASGI server's; a cluster's peak event rate per node is lower than issue 9 asks"
)
# With --baseline: this tree's server CPU per request may be at most this much above the
# baseline's (a ratio of baseline/ours of at least 1/1.05).
BASELINE_SLACK = 0.05
BASELINE_MEANING = "this tree's server spends more than 5% more CPU per request than the baseline"
CPU_MEANING = (
    "each single-frame request costs the server more CPU than issue 9's budget; on a busy node "
    "that CPU comes out of the broker channel and the broadcaster"
)
CPU_TARGET_US = {"h2": 150.0, "h1": 100.0}
GOLOAD_SRC = ROOT / "bench" / "goload"
INSTALL_GO = "apt-get install -y golang-go"
INSTALL_NGINX = "apt-get install -y nginx-light"


@dataclass(frozen=True)
class Load:
    key: str
    label: str
    proto: str  # goload -proto
    workers: int  # requests in flight: streams on one connection (h2) or connections (h1)


LOADS = (
    Load("h2_1", "HTTP/2, 1 request in flight", "h2", 1),
    Load("h2_32", "HTTP/2, 32 streams on 1 connection", "h2", 32),
    Load("h1_8", "HTTP/1.1, 8 keep-alive connections", "h1", 8),
)


def build_goload(out_dir: Path) -> Path:
    """``go build`` the generator (stdlib only: no module download); Skip when Go is missing."""
    go = shutil.which("go")
    if go is None:
        raise Skip(f"needs the Go toolchain: {INSTALL_GO}")
    binary = out_dir / "goload"
    env = {
        **os.environ,
        "GOCACHE": str(out_dir / "gocache"),
        "GOPATH": str(out_dir / "gopath"),
        "GOFLAGS": "",
        "GOTOOLCHAIN": "local",
    }
    proc = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=GOLOAD_SRC,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ProcError(f"go build of bench/goload failed:\n{proc.stderr[-2000:]}")
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    keepalive_requests 100000000;
    keepalive_timeout 600s;
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_verify_client optional_no_ca;
        ssl_session_tickets off;
        ssl_protocols TLSv1.2 TLSv1.3;
        location = /v1/workloads/events {{ return 202; }}
    }}
}}
"""


class RealPeerBench(Bench):
    """``internode.Bench`` with nginx as a third server and the Go generator."""

    def __init__(self, ctx: Context, root: Path) -> None:
        super().__init__(ctx, root)
        self.goload = build_goload(root)
        self.templates = root / "templates.json"
        self.templates.write_text(json.dumps(event_templates()))
        self.warmup = 0.2 if ctx.quick else 0.3
        self.window_s = 0.6 if ctx.quick else 1.5

    def start_nginx(self) -> Server | None:
        nginx = shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin")
        if nginx is None:
            return None
        root = self.root / "nginx"
        root.mkdir()
        port = free_port()
        conf = root / "nginx.conf"
        conf.write_text(
            NGINX_CONF.format(
                root=root,
                port=port,
                cert=self.srv_dir / "node.crt",
                key=self.srv_dir / "node.key",
            )
        )
        log = open(root / "stderr.log", "wb")  # noqa: SIM115 - lives with the process
        proc = subprocess.Popen(
            [nginx, "-p", str(root), "-c", str(conf), "-e", str(root / "nginx-error.log")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        self.procs.append(proc)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                err = (root / "nginx-error.log").read_text(errors="replace")[-2000:]
                raise ProcError(f"nginx did not start: {err}")
            time.sleep(0.02)  # polling for a port to accept: no event announces it
        # A server with no broker side: an idle drain that never counts a line.
        r, w = os.pipe()
        os.close(w)
        drain = Drain(r, "nginx-none")
        drain.start()
        return Server("nginx", "nginx", port, proc.pid, drain)

    def go_generators(self, server: Server, load: Load) -> Gens:
        base = self.next_base * 10**9
        self.next_base += 1
        proc = subprocess.Popen(
            [
                str(self.goload),
                "-addr",
                f"127.0.0.1:{server.port}",
                "-cert",
                str(self.cli_dir / "node.crt"),
                "-key",
                str(self.cli_dir / "node.key"),
                "-pin",
                self.pin,
                "-proto",
                load.proto,
                "-workers",
                str(load.workers),
                "-templates",
                str(self.templates),
                "-id-base",
                str(base),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "GOMAXPROCS": "1"},
        )
        gens = Gens(server, Variant(load.key, load.label, load.proto, 1, 1, load.workers), [proc])
        self.gens.append(gens)
        return gens


def pin(pid: int, core: int) -> None:
    """Pin a process and all its threads to one core (Go starts threads of its own)."""
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(tid), {core})


def pin_server(server: Server, core: int, client_core: int) -> None:
    """Pin ``server`` to ``core``, and the thread of this process that drains its broker side
    (the harness's stand-in broker) to ``client_core``, with the generator.

    Left to the kernel, the drain wakes where the server's broker write woke it (a pipe write
    wakes its reader with the sync hint, and this VM's kernel puts such wake-ups on the
    writer's CPU), so on the server's core, just before the answer goes out: one request in
    flight then measured 9.6k requests/s for nvpair-wm against 11.2k with the drain beside the
    generator, and hypercorn (which writes its broker lines too) 3,491 against 3,549
    (bench/README.md, "What the figures depend on").
    """
    pin(server.pid, core)
    drain = server.drain
    if drain.native_id is not None and drain.is_alive():  # nginx's ends at once: no writer
        with contextlib.suppress(OSError):  # it may end meanwhile
            os.sched_setaffinity(drain.native_id, {client_core})


def pin_generators(gens: Gens, core: int) -> None:
    """Pin every generator process of ``gens`` (once ready: its threads started) to ``core``."""
    for p in gens.procs:
        pin(p.pid, core)


def cores_apart() -> tuple[int, int]:
    """The server's core and the generator's: the first and the last this process may use."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[0], cores[-1]


def run(ctx: Context) -> BenchResult:
    try:
        import hypercorn  # noqa: F401, PLC0415
    except ImportError as exc:
        raise Skip(f"needs hypercorn (the bench extra): {exc}") from exc
    res = BenchResult(NAME, DESCRIPTION)
    with tempfile.TemporaryDirectory(prefix="nvpair-bench-realpeer-") as tmp:
        bench = RealPeerBench(ctx, Path(tmp))
        baseline = baseline_tree(ctx.baseline, Path(tmp)) if ctx.baseline else None
        try:
            _measure(bench, ctx, res, baseline)
        finally:
            bench.close()
    return res


def _measure(bench: RealPeerBench, ctx: Context, res: BenchResult, baseline: Tree | None) -> None:
    servers = [bench.start_ours()]
    if baseline is not None:  # its windows alternate with ours, load by load
        servers.append(bench.start_ours(baseline))
    servers.append(bench.start_hypercorn())
    nginx = bench.start_nginx()
    if nginx is None:
        res.notes.append(f"nginx is not installed, so its rows are missing: {INSTALL_NGINX}")
    else:
        servers.append(nginx)
    server_core, gen_core = cores_apart()
    for s in servers:
        pin_server(s, server_core, gen_core)
    pairs = {f"{s.key}/{ld.key}": bench.go_generators(s, ld) for ld in LOADS for s in servers}
    for g in pairs.values():
        g.ready()
        pin_generators(g, gen_core)
    runs: dict[str, list[Run]] = {k: [] for k in pairs}
    for g in pairs.values():  # warm-up: one untimed window each (connections open, JIT-free)
        bench.window(g)
    for rep in range(ctx.reps):
        for key, g in pairs.items():
            runs[key].append(bench.window(g))
        ctx.log(f"realpeer: rep {rep + 1}/{ctx.reps} done")
    for g in pairs.values():
        g.stop()

    rows = []
    for ld in LOADS:
        for s in servers:
            rs = runs[f"{s.key}/{ld.key}"]
            role: Literal["subject", "baseline"] = "subject" if s.key == "ours" else "baseline"
            res.measurements.append(
                Measurement(
                    f"{s.key}/{ld.key}",
                    f"{s.label}: {ld.label}",
                    "requests/s",
                    [r.rate for r in rs],
                    role=role,
                    note=f"{bench.window_s:g} s windows after {bench.warmup:g} s of load",
                )
            )
            res.measurements.append(
                Measurement(
                    f"{s.key}/{ld.key}/us",
                    f"{s.label}: {ld.label}, server CPU per request",
                    "us/request",
                    [r.server_cpu / r.rate * 1e6 for r in rs if r.rate],
                    higher_is_better=False,
                    role=role,
                )
            )
            status, errors, _ = pairs[f"{s.key}/{ld.key}"].totals()
            rows.append(
                [
                    f"{s.key}/{ld.key}",
                    fmt(statistics_median([r.server_cpu for r in rs])),
                    fmt(statistics_median([r.gen_cpu / r.rate * 1e6 for r in rs if r.rate])),
                    " ".join(f"{k}:{n}" for k, n in sorted(status.items())) or "-",
                    " ".join(f"{k}:{n}" for k, n in sorted(errors.items())) or "0",
                ]
            )
    for ld in LOADS:
        res.ratio(
            f"ours/{ld.key}",
            f"hypercorn/{ld.key}",
            RATE_TARGET,
            RATE_MEANING,
            f"real peers, {ld.label}: req/s vs hypercorn",
        )
        res.ratio(f"ours/{ld.key}/us", f"hypercorn/{ld.key}/us")
        if nginx is not None:
            res.ratio(f"ours/{ld.key}/us", f"nginx/{ld.key}/us")
        if baseline is not None:
            res.ratio(
                f"ours/{ld.key}/us",
                f"base/{ld.key}/us",
                1 / (1 + BASELINE_SLACK),
                BASELINE_MEANING,
                f"real peers, {ld.label}: server CPU per request vs {baseline.name}",
            )
        target = CPU_TARGET_US[ld.proto]
        us = res.get(f"ours/{ld.key}/us").median
        res.checks.append(
            Check(
                f"nvpair-wm server CPU per request, {ld.label}",
                us,
                "us",
                f"<= {target:g}",
                us <= target,
                "median over the reps; the server on its own core, the generator and the "
                "broker drain on the other",
                CPU_MEANING,
            )
        )
    res.tables.append(
        {
            "title": "who is busy (medians): server CPU-s per s of the window, generator CPU us "
            "per request, statuses and errors over the whole run",
            "columns": ["server/load", "server CPU/s", "gen us/req", "statuses", "errors"],
            "rows": rows,
        }
    )
    res.params["window_s"] = bench.window_s
    res.params["warmup_s"] = bench.warmup
    res.params["loads"] = [ld.__dict__ for ld in LOADS]
    res.params["cores"] = {"server": server_core, "generator": gen_core, "broker_drain": gen_core}
    res.params["runs"] = {
        k: [{"rate": r.rate, "server_cpu": r.server_cpu, "gen_cpu": r.gen_cpu} for r in rs]
        for k, rs in runs.items()
    }
    res.notes.append(
        "generator: Go net/http (bench/goload), GOMAXPROCS=1, one request per write sequence; "
        "every body a new workload frame (~300-370 B)"
    )
    res.notes.append(
        "nginx does no application work (return 202, body discarded): it bounds what TLS + "
        "HTTP framing alone cost in a compiled server"
    )


def statistics_median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")
