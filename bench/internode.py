"""Inter-node server: small POSTs over mutual TLS on loopback, nvpair-wm against hypercorn.

Two servers run side by side for the whole benchmark, each one process with one event loop,
the same certificate and key, a client certificate required, and their broker side (stdout)
read by a thread so backpressure never stalls them:

* **ours**: a real ``nvpair-wm --cluster-dir D --bind 127.0.0.1 --port 0`` (the load
  generator's certificate is pinned in ``D/trusted``);
* **hypercorn**: ``bench/hypercorn_server.py``, an ASGI app doing the endpoint's checks and the
  project's own ``Dispatcher.peer`` + ``BrokerQueue`` + stdout writer, so only the server stack
  (TLS, HTTP, request plumbing) differs. It cannot check pins per request (see its docstring).

Load: ``bench/loadgen.py`` processes (stdlib ssl, hand-written HTTP/2 and HTTP/1.1; every
frame a new workload, so every frame is applied). Variants: HTTP/2 on one connection with many
concurrent streams, HTTP/1.1 on several keep-alive connections (one request in flight on each),
each with bodies of one frame and batches of 100 frames; full TLS handshakes (connect,
handshake, close; several at once). A run starts a generator, lets it warm up (excluded), then
measures a window: requests answered (by the generator), CPU seconds of the server and of the
generator (``/proc``), bytes the generator moved through its sockets (TLS records included).
Runs are interleaved (rep 1 of every variant on both servers, then rep 2, ...).

Is the generator the bottleneck? Three answers per run, in the extra table: the server's CPU
use in the window (~1.0 CPU-s/s: saturated; it is single-threaded), the generator's CPU per
request against the server's, and a second run of the main variants on nvpair-wm with the
same load (the same connections/streams in total) made by **two** generator processes: if one
generator process limited the rate, two would raise it. (HTTP/2: two processes means two
connections of 50 streams, so the one-process side of that check is also run with two
connections of 50 streams; the comparison is paired, rep by rep.)

Issue target: >= 4x hypercorn's requests/s.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.baseline import THIS_TREE, Tree
from bench.harness import MIN_REPS, BenchResult, Check, Context, Measurement, Skip, fmt
from bench.procs import Drain, ProcError, WmProc, cpu_seconds, io_bytes, python_module

NAME = "internode"
DESCRIPTION = "mTLS POSTs on loopback: HTTP/2, HTTP/1.1, batches of 100, handshakes; vs hypercorn"

TARGET = 4.0


@dataclass(frozen=True)
class Variant:
    key: str
    label: str
    mode: str  # loadgen --mode
    batch: int = 1
    conns: int = 1
    streams: int = 1
    unit: str = "requests/s"


VARIANTS = (
    Variant("h2", "HTTP/2, 1 frame/request, 1 connection x 100 streams", "h2", 1, 1, 100),
    Variant("h2_b100", "HTTP/2, 100 frames/request, 1 connection x 16 streams", "h2", 100, 1, 16),
    Variant("h1", "HTTP/1.1, 1 frame/request, 8 keep-alive connections", "h1", 1, 8),
    Variant("h1_b100", "HTTP/1.1, 100 frames/request, 8 keep-alive connections", "h1", 100, 8),
    Variant("hs", "full TLS handshakes, 8 at once", "handshake", 0, 8, unit="handshakes/s"),
)
SCALING = ("h2", "h1", "hs")  # also run with two generator processes (nvpair-wm only)


def one_process(key: str) -> Variant:
    """What the two generator processes of ``halved(key)`` make together, from one process."""
    h = halved(key)
    return replace(h, conns=h.conns * 2)


def one_process_key(key: str) -> str:
    main = next(x for x in VARIANTS if x.key == key)
    return f"ours/{key}" if one_process(key) == main else f"ours/{key}/1p"


def halved(key: str) -> Variant:
    """The variant ``key`` with half its concurrency: two generator processes of this make the
    same load (same connections or streams in total) from two processes instead of one."""
    v = next(x for x in VARIANTS if x.key == key)
    if v.mode == "h2":
        return replace(v, streams=v.streams // 2)
    return replace(v, conns=v.conns // 2)


class Server:
    """One server process under test, its port, pin and broker-side drain."""

    def __init__(self, key: str, label: str, port: int, pid: int, drain: Drain) -> None:
        self.key = key
        self.label = label
        self.port = port
        self.pid = pid
        self.drain = drain
        self.frames_202 = 0  # frames in requests answered 202 (each must reach the broker)


@dataclass
class Run:
    rate: float  # requests (handshakes) per second, wall clock
    server_cpu: float  # CPU-s per second of the window
    gen_cpu: float
    done: int
    seconds: float
    up: float  # bytes the generators wrote per request (TLS records)
    down: float
    lines: int  # broker-side lines of the server in the window


class Bench:
    def __init__(self, ctx: Context, root: Path) -> None:
        from nvpair_wm.clusterdir import cert_fingerprint, init_cluster  # noqa: PLC0415

        self.ctx = ctx
        self.root = root
        dirs = init_cluster(root / "cluster", ["server", "client"])
        self.srv_dir, self.cli_dir = dirs["server"], dirs["client"]
        self.pin = cert_fingerprint((self.srv_dir / "node.crt").read_bytes())
        self.next_base = 1
        self.warmup = 0.05 if ctx.quick else 0.15
        self.window_s = 0.2 if ctx.quick else 0.5
        self.procs: list[Any] = []
        self.gens: list[Gens] = []

    # -- servers ---------------------------------------------------------------------------

    def start_ours(self, tree: Tree = THIS_TREE) -> Server:
        """nvpair-wm from this tree (key ``ours``) or a baseline's (key ``base``, on a copy of
        the server's node directory: each daemon holds its own journal)."""
        key, node_dir = "ours", self.srv_dir
        if tree.path is not None:
            key, node_dir = "base", self.srv_dir.with_name("server-base")
            shutil.copytree(self.srv_dir, node_dir)
        wm = WmProc(
            "--cluster-dir",
            str(node_dir),
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--log-level",
            "warn",
            log_path=self.root / f"nvpair-wm-{key}.log",
            env=tree.env(),
        )
        self.procs.append(wm)
        wm.expect_ready()
        port = wm.status()["port"]
        drain = Drain(wm.stdout_fd, f"{key}-stdout")
        drain.start()
        label = "nvpair-wm" if tree.path is None else f"nvpair-wm ({tree.name})"
        return Server(key, label, port, wm.pid, drain)

    def start_hypercorn(self) -> Server:
        log = open(self.root / "hypercorn.log", "wb")  # noqa: SIM115 - lives with the process
        proc = python_module(
            "bench.hypercorn_server",
            "--cert",
            str(self.srv_dir / "node.crt"),
            "--key",
            str(self.srv_dir / "node.key"),
            "--ca",
            str(self.srv_dir / "trusted" / "client.crt"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # nothing else is written before the first request
        if not line:
            log.flush()
            tail = (self.root / "hypercorn.log").read_text(errors="replace")[-2000:]
            raise ProcError(f"hypercorn did not start:\n{tail}")
        drain = Drain(proc.stdout.fileno(), "hypercorn-stdout")
        drain.start()
        return Server("hypercorn", "hypercorn", json.loads(line)["port"], proc.pid, drain)

    def close(self) -> None:
        for g in self.gens:
            g.kill()
        for p in self.procs:
            if isinstance(p, WmProc):
                p.close()
            else:
                p.kill()
                p.wait()

    # -- generators ----------------------------------------------------------------------

    def generators(self, server: Server, v: Variant, count: int = 1) -> Gens:
        procs = []
        for _ in range(count):
            base = self.next_base * 10**9
            self.next_base += 1
            procs.append(
                python_module(
                    "bench.loadgen",
                    "--port",
                    str(server.port),
                    "--cert",
                    str(self.cli_dir / "node.crt"),
                    "--key",
                    str(self.cli_dir / "node.key"),
                    "--pin",
                    self.pin,
                    "--mode",
                    v.mode,
                    "--batch",
                    str(max(1, v.batch)),
                    "--conns",
                    str(v.conns),
                    "--streams",
                    str(v.streams),
                    "--id-base",
                    str(base),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        gens = Gens(server, v, procs)
        self.gens.append(gens)
        return gens

    def window(self, gens: Gens) -> Run:
        """Resume the load, warm up, measure one window, pause and wait until idle."""
        gens.command(b"r")
        time.sleep(self.warmup)
        a = gens.sample()
        time.sleep(self.window_s)
        b = gens.sample()
        gens.pause()
        dt = b["t"] - a["t"]
        done = b["done"] - a["done"]
        return Run(
            rate=done / dt,
            server_cpu=(b["server_cpu"] - a["server_cpu"]) / dt,
            gen_cpu=(b["gen_cpu"] - a["gen_cpu"]) / dt,
            done=done,
            seconds=dt,
            up=(b["wchar"] - a["wchar"]) / max(1, done),
            down=(b["rchar"] - a["rchar"]) / max(1, done),
            lines=b["lines"] - a["lines"],
        )


class Gens:
    """The load generator process(es) of one (server, variant): kept alive, paused between
    windows (connections stay open), so repetitions interleave without process start-up."""

    def __init__(self, server: Server, v: Variant, procs: list[subprocess.Popen[bytes]]) -> None:
        self.server = server
        self.variant = v
        self.procs = procs
        self.tls: dict[str, Any] = {}
        self.final: list[dict[str, Any]] = []

    def ready(self) -> None:
        for g in self.procs:
            assert g.stdout is not None and g.stderr is not None
            line = g.stdout.readline()
            if not line:
                raise ProcError(f"load generator failed: {g.stderr.read().decode()[-2000:]}")
            self.tls = json.loads(line)

    def command(self, cmd: bytes) -> list[dict[str, Any]]:
        for g in self.procs:
            assert g.stdin is not None
            g.stdin.write(cmd + b"\n")
            g.stdin.flush()
        out = []
        for g in self.procs:
            assert g.stdout is not None and g.stderr is not None
            line = g.stdout.readline()
            if not line:
                raise ProcError(f"load generator died: {g.stderr.read().decode()[-2000:]}")
            out.append(json.loads(line))
        return out

    def sample(self) -> dict[str, Any]:
        t = time.monotonic()
        totals = self.command(b"s")
        rchar = wchar = 0
        for g in self.procs:
            r, w = io_bytes(g.pid)
            rchar += r
            wchar += w
        return {
            "t": t,
            "done": sum(x["done"] for x in totals),
            "server_cpu": cpu_seconds(self.server.pid),
            "gen_cpu": sum(cpu_seconds(g.pid) for g in self.procs),
            "rchar": rchar,
            "wchar": wchar,
            "lines": self.server.drain.lines,
        }

    def pause(self, timeout: float = 10.0) -> None:
        self.command(b"p")
        deadline = time.monotonic() + timeout
        while any(x["active"] for x in self.command(b"s")):
            if time.monotonic() > deadline:
                raise ProcError("load generator: requests still in flight after pausing")
            time.sleep(0.005)

    def stop(self) -> None:
        for g in self.procs:
            assert g.stdin is not None and g.stdout is not None and g.stderr is not None
            with contextlib.suppress(OSError):
                g.stdin.close()
            out = g.stdout.read().decode().strip().splitlines()
            err = g.stderr.read().decode()
            if g.wait() != 0:
                raise ProcError(f"load generator exited {g.returncode}: {err[-2000:]}")
            self.final.append(json.loads(out[-1]))

    def kill(self) -> None:
        for g in self.procs:
            if g.poll() is None:
                g.kill()
                g.wait()

    def totals(self) -> tuple[dict[str, int], dict[str, int], int]:
        """Statuses, errors, and frames answered 202, over the generators' whole life."""
        status: dict[str, int] = {}
        errors: dict[str, int] = {}
        for f in self.final:
            for k, n in f["status"].items():
                status[k] = status.get(k, 0) + n
            for k, n in f["errors"].items():
                errors[k] = errors.get(k, 0) + n
        return status, errors, status.get("202", 0) * max(1, self.variant.batch)


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def run(ctx: Context) -> BenchResult:
    try:
        import hypercorn  # noqa: F401, PLC0415

        from nvpair_wm import clusterdir  # noqa: F401, PLC0415
    except ImportError as exc:
        raise Skip(f"needs hypercorn and nvpair_wm.clusterdir: {exc}") from exc
    res = BenchResult(NAME, DESCRIPTION)
    with tempfile.TemporaryDirectory(prefix="nvpair-bench-internode-") as tmp:
        bench = Bench(ctx, Path(tmp))
        try:
            _measure(bench, ctx, res)
        finally:
            bench.close()
    return res


def _measure(bench: Bench, ctx: Context, res: BenchResult) -> None:
    servers = [bench.start_ours(), bench.start_hypercorn()]
    ours = servers[0]
    pairs = {f"{s.key}/{v.key}": bench.generators(s, v) for v in VARIANTS for s in servers}
    for key in SCALING:
        pairs[f"ours/{key}/x2"] = bench.generators(ours, halved(key), 2)
        if one_process_key(key) != f"ours/{key}":  # same connections, one process
            pairs[one_process_key(key)] = bench.generators(ours, one_process(key), 1)
    for g in pairs.values():
        g.ready()
    runs: dict[str, list[Run]] = {k: [] for k in pairs}
    for g in pairs.values():  # warm-up: one untimed window each
        bench.window(g)
    scaling_reps = min(ctx.reps, MIN_REPS)
    for rep in range(ctx.reps):
        for key, g in pairs.items():
            if key.count("/") == 2 and rep >= scaling_reps:
                continue
            runs[key].append(bench.window(g))
        ctx.log(f"internode: rep {rep + 1}/{ctx.reps} done")
    for g in pairs.values():
        g.stop()
    frames_202 = {s.key: 0 for s in servers}
    for g in pairs.values():
        frames_202[g.server.key] += g.totals()[2]
    # Every frame answered 202 must reach the broker side: wait for the drains to catch up.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(s.drain.lines < frames_202[s.key] for s in servers):
        time.sleep(0.05)
    for s in servers:
        res.notes.append(
            f"{s.label}: {frames_202[s.key]:,} frames answered 202 over the whole benchmark; "
            f"{s.drain.lines:,} workloads:upsert lines reached its broker side (stdout)"
        )
        res.params[f"{s.key}_frames_202"] = frames_202[s.key]
        res.params[f"{s.key}_broker_lines"] = s.drain.lines
    res.params["tls"] = {k: g.tls for k, g in pairs.items()}

    for v in VARIANTS:
        for s in servers:
            rs = runs[f"{s.key}/{v.key}"]
            res.measurements.append(
                Measurement(
                    f"{s.key}/{v.key}",
                    f"{s.label}: {v.label}",
                    v.unit,
                    [r.rate for r in rs],
                    role="subject" if s.key == "ours" else "baseline",
                    note=f"{bench.window_s:g} s windows, each after {bench.warmup:g} s of load",
                )
            )
        for s in servers:
            rs = runs[f"{s.key}/{v.key}"]
            res.measurements.append(
                Measurement(
                    f"{s.key}/{v.key}/cpu",
                    f"{s.label}: {v.label}, per server CPU-second",
                    v.unit.replace("/s", "/CPU-s"),
                    [r.rate / r.server_cpu for r in rs if r.server_cpu > 0],
                    role="info",
                    note="requests / CPU seconds the server process used in the window",
                )
            )
    for key in SCALING:
        if one_process_key(key) != f"ours/{key}":
            o = one_process(key)
            res.measurements.append(
                Measurement(
                    one_process_key(key),
                    f"nvpair-wm: HTTP/2, 1 frame/request, {o.conns} connections x {o.streams} "
                    "streams from ONE generator process (the shape of the two-process run)",
                    o.unit,
                    [r.rate for r in runs[one_process_key(key)]],
                    role="info",
                )
            )
        v = next(x for x in VARIANTS if x.key == key)
        h = halved(key)
        each = {
            "h2": f"1 connection x {h.streams} streams",
            "h1": f"{h.conns} keep-alive connections",
            "handshake": f"{h.conns} handshakes at once",
        }[v.mode]
        what = v.label.split(",")[0] + ("" if v.mode == "handshake" else ", 1 frame/request")
        res.measurements.append(
            Measurement(
                f"ours/{key}/x2",
                f"nvpair-wm: {what}, TWO generator processes, each {each}",
                v.unit,
                [r.rate for r in runs[f"ours/{key}/x2"]],
                role="info",
            )
        )
    for v in VARIANTS:
        target = TARGET if v.mode != "handshake" else None
        res.ratio(
            f"ours/{v.key}",
            f"hypercorn/{v.key}",
            target,
            "each inter-node request costs the server more CPU than the issue allows: a known "
            "miss (bench/README.md, Inter-node server: realpeer is the server's measure); a "
            "ratio well below the recorded one is a regression",
            f"{v.label.split(', ')[0]}, {v.label.split(', ')[1]} vs hypercorn",
        )
    for v in VARIANTS:
        res.ratio(f"ours/{v.key}/cpu", f"hypercorn/{v.key}/cpu")
    for key in SCALING:
        base = one_process_key(key)
        res.ratio(f"ours/{key}/x2", base)
        # Paired: the two-generator window of rep i against the one-generator window of the
        # same rep (they ran seconds apart), so drift on the machine cancels out.
        pairs_ = list(zip(runs[f"ours/{key}/x2"], runs[base], strict=False))
        ratios = sorted(a.rate / b.rate for a, b in pairs_)
        value = statistics.median(ratios)
        res.checks.append(
            Check(
                f"generator not the bottleneck ({key}): 2 generator processes / 1",
                value,
                "x",
                "<= 1.1x",
                value <= 1.1,
                f"the same load from two processes; median of {len(ratios)} paired reps, "
                f"{ratios[0]:.2f} .. {ratios[-1]:.2f}; a rise would mean one process limited it",
                meaning="the load generator, not the server, limited the rate: the server's "
                "numbers above are a lower bound, not a regression",
            )
        )

    rows = []
    detail: dict[str, Any] = {}
    for key, rs in runs.items():
        srv_cpu = _median([r.server_cpu for r in rs])
        gen_cpu = _median([r.gen_cpu for r in rs])
        per_req_srv = _median([r.server_cpu / r.rate * 1e6 for r in rs if r.rate])
        per_req_gen = _median([r.gen_cpu / r.rate * 1e6 for r in rs if r.rate])
        batch = next(v.batch for v in VARIANTS if key.split("/")[1] == v.key)
        lines = sum(r.lines for r in rs)
        done = sum(r.done for r in rs)
        status, errors, _ = pairs[key].totals()
        rows.append(
            [
                key,
                f"{srv_cpu:.2f}",
                f"{gen_cpu:.2f}",
                fmt(per_req_srv),
                fmt(per_req_gen),
                f"{per_req_gen / per_req_srv:.2f}" if per_req_srv else "-",
                fmt(_median([r.up for r in rs])),
                fmt(_median([r.down for r in rs])),
                " ".join(f"{k}:{n}" for k, n in sorted(status.items())) or "-",
                " ".join(f"{k}:{n}" for k, n in sorted(errors.items())) or "0",
            ]
        )
        detail[key] = {
            "server_cpu_per_s": [r.server_cpu for r in rs],
            "gen_cpu_per_s": [r.gen_cpu for r in rs],
            "server_us_per_request": per_req_srv,
            "gen_us_per_request": per_req_gen,
            "bytes_up_per_request": _median([r.up for r in rs]),
            "bytes_down_per_request": _median([r.down for r in rs]),
            "frames_per_request": batch,
            "window_requests": done,
            "window_broker_lines": lines,
            "status": status,
            "errors": errors,
        }
    res.tables.append(
        {
            "title": "who is busy (medians over the reps): CPU-s per s of the window, "
            "CPU us per request, generator/server CPU ratio, bytes per request on the "
            "generator's sockets (TLS records, no TCP/IP headers), statuses, errors",
            "columns": [
                "server/variant",
                "server CPU/s",
                "gen CPU/s",
                "server us/req",
                "gen us/req",
                "gen/server",
                "bytes up/req",
                "bytes down/req",
                "statuses",
                "errors",
            ],
            "rows": rows,
        }
    )
    res.params["runs"] = detail
    res.params["window_s"] = bench.window_s
    res.params["warmup_s"] = bench.warmup
    res.params["variants"] = [v.__dict__ for v in VARIANTS]
    res.params["frame_bytes"] = (
        "frames 290-373 B (5 lifecycle methods in turn), batch of 100: 32,701 B"
    )
    res.notes.append(
        "per-request pin check: nvpair-wm re-checks the caller's pin on every request (stat of "
        "trusted/ per request); hypercorn cannot (no client certificate in the ASGI scope): it "
        "verifies the certificate against the same pins once per handshake"
    )
    res.notes.append(
        "hypercorn: same app work (endpoint checks + Dispatcher.peer + BrokerQueue + stdout "
        "writer), one process, asyncio, session tickets off, keep-alive limits raised"
    )
