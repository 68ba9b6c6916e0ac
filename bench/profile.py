"""Profile a daemon process under a benchmark's load with py-spy, and say where the time goes.

    python -m bench.profile internode [h2|h2_b100|h1|h1_b100|hs] [--server ours|hypercorn]
    python -m bench.profile realpeer [h2_1|h2_32|h1_8] [--server ours|hypercorn] [--pin]
    python -m bench.profile propagation [max|low] [--node a|b]
    python -m bench.profile local_channel
    options: --seconds S (8), --rate HZ (500), --out FILE (raw collapsed stacks)

It starts the same processes and the same load as the benchmark (the same modules do it), runs
``py-spy record --format raw`` on one process while the load runs (py-spy pauses it for each
sample: exact stacks, a few per cent slower; ``--nonblocking`` does not, but then stacks can
come out torn and inclusive shares too low), and prints the
share of samples per component (by the file of the innermost Python frame: h2/hpack/
hyperframe, pyOpenSSL, asyncio, nvpair_wm's modules...) and the top functions, inclusive and
self. Samples of the event loop waiting in epoll are counted apart: shares are of busy samples.
It is a diagnosis tool, not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import Context
from bench.internode import Gens

COMPONENTS = (  # (name, path fragments): the first that matches the innermost frame's file
    (
        "h2 library (h2, hpack, hyperframe)",
        ("site-packages/h2/", "site-packages/hpack/", "site-packages/hyperframe/"),
    ),
    ("h11 library", ("h11/",)),
    ("TLS: pyOpenSSL + OpenSSL", ("OpenSSL/", "cryptography/")),
    ("nvpair_wm.tls_contexts", ("nvpair_wm/tls_contexts.py",)),
    ("nvpair_wm.http adapters", ("nvpair_wm/http/",)),
    ("nvpair_wm.pins (pin/identity checks)", ("nvpair_wm/pins.py",)),
    ("nvpair_wm.endpoint", ("nvpair_wm/endpoint.py",)),
    (
        "core: codec, dispatch, dedup, events (+ msgspec)",
        (
            "nvpair_wm/codec.py",
            "nvpair_wm/dispatch.py",
            "nvpair_wm/dedup.py",
            "nvpair_wm/events.py",
        ),
    ),
    ("nvpair_wm.local (broker channel)", ("nvpair_wm/local.py",)),
    (
        "broadcaster, client, outbox, sync, peers",
        (
            "nvpair_wm/broadcaster.py",
            "nvpair_wm/io/client.py",
            "nvpair_wm/proto/h1client.py",
            "nvpair_wm/proto/h2/client.py",
            "nvpair_wm/proto/exchanges.py",
            "nvpair_wm/outbox.py",
            "nvpair_wm/sync.py",
            "nvpair_wm/peers.py",
        ),
    ),
    ("nvpair_wm.proto + io (server sessions, driver)", ("nvpair_wm/proto/", "nvpair_wm/io/")),
    ("hypercorn", ("hypercorn/",)),
    ("bench (baseline app)", ("bench/",)),
    ("asyncio + selectors", ("asyncio/", "selectors.py")),
    ("logging", ("logging/",)),
)
_FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")
IDLE_LEAVES = ("EpollSelector.select", "select")


def _parse(frame: str) -> tuple[str, str]:
    m = _FRAME.match(frame)
    return (m.group(1), m.group(2)) if m else (frame, "")


def component(path: str) -> str:
    for name, parts in COMPONENTS:
        if any(p in path for p in parts):
            return name
    return "other (stdlib, interpreter)"


def summarize(raw: Path, top: int = 25) -> str:
    """Shares by component (self time) and the top functions, from py-spy's raw output."""
    comp: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    self_: collections.Counter[str] = collections.Counter()
    busy = idle = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = [_parse(f) for f in stack.split(";")]
        leaf_fn, leaf_path = frames[-1]
        if leaf_fn in IDLE_LEAVES and "selectors" in leaf_path:
            idle += n
            continue
        busy += n
        comp[component(leaf_path)] += n
        self_[f"{leaf_fn} ({leaf_path})"] += n
        for key in {f"{fn} ({path})" for fn, path in frames}:
            incl[key] += n
    out = [f"{busy} busy samples ({idle} more waiting in epoll, left out)", "", "by component:"]
    out += [f"  {100 * n / busy:5.1f} %  {k}" for k, n in comp.most_common()]
    out += ["", "inclusive (top):"]
    skip = ("asyncio/", "<frozen", "nvpair_wm/__main__", "nvpair_wm/cli", "bench/")
    shown = [(k, n) for k, n in incl.most_common() if not any(s in k for s in skip)]
    out += [f"  {100 * n / busy:5.1f} %  {k}" for k, n in shown[:top]]
    out += ["", "self (top):"]
    out += [f"  {100 * n / busy:5.1f} %  {k}" for k, n in self_.most_common(top)]
    return "\n".join(out)


NONBLOCKING = False


def _spy(pid: int, out: Path, seconds: float, rate: int) -> subprocess.Popen[bytes]:
    spy = Path(sys.executable).parent / "py-spy"
    return subprocess.Popen(
        [
            *(str(spy), "record", "-f", "raw", "-r", str(rate)),
            *(["--nonblocking"] if NONBLOCKING else []),
            *("-d", str(max(1, round(seconds))), "-o", str(out), "--pid", str(pid)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.splitlines()[0])
    p.add_argument("bench", choices=("internode", "realpeer", "propagation", "local_channel"))
    p.add_argument("what", nargs="?", default="")
    p.add_argument("--server", default="ours", choices=("ours", "hypercorn"))
    p.add_argument("--node", default="a", choices=("a", "b"))
    p.add_argument("--seconds", type=int, default=8)
    p.add_argument("--rate", type=int, default=500)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument(
        "--pin",
        action="store_true",
        help="realpeer: pin the server to one core, the generator and the broker drain to the "
        "other, as the benchmark does",
    )
    p.add_argument(
        "--nonblocking",
        action="store_true",
        help="do not pause the process per sample (cheaper, but stacks can come out torn)",
    )
    args = p.parse_args()
    global NONBLOCKING  # noqa: PLW0603 - one flag for the whole run
    NONBLOCKING = args.nonblocking
    out = args.out or Path(tempfile.mkdtemp(prefix="nvpair-profile-")) / "stacks.txt"
    ctx = Context(quick=True, reps=5, warmup=1, log=lambda _: None)
    with tempfile.TemporaryDirectory(prefix="nvpair-profile-") as tmp:
        if args.bench == "internode":
            _internode(ctx, Path(tmp), args, out)
        elif args.bench == "realpeer":
            _realpeer(ctx, Path(tmp), args, out)
        elif args.bench == "propagation":
            _propagation(Path(tmp), args, out)
        else:
            _local(Path(tmp), args, out)
    if args.rate:
        print(f"{args.bench} {args.what} (py-spy, {args.rate} Hz, {args.seconds:g} s): {out}\n")
        print(summarize(out))


def _internode(ctx: Context, root: Path, args: argparse.Namespace, out: Path) -> None:
    from bench.internode import VARIANTS, Bench  # noqa: PLC0415

    v = next(x for x in VARIANTS if x.key == (args.what or "h2"))
    bench = Bench(ctx, root)
    try:
        server = bench.start_ours() if args.server == "ours" else bench.start_hypercorn()
        n, seconds, _ = _window(bench.generators(server, v), server.pid, args, out)
        print(f"{server.label} {v.label}: {n / seconds:,.0f} {v.unit} while profiled")
    finally:
        bench.close()


def _realpeer(ctx: Context, root: Path, args: argparse.Namespace, out: Path) -> None:
    from bench.realpeer import LOADS, RealPeerBench, cores_apart, pin_server  # noqa: PLC0415

    load = next(x for x in LOADS if x.key == (args.what or "h2_1"))
    bench = RealPeerBench(ctx, root)
    try:
        server = bench.start_ours() if args.server == "ours" else bench.start_hypercorn()
        server_core, gen_core = cores_apart()
        if args.pin:
            pin_server(server, server_core, gen_core)
        gens = bench.go_generators(server, load)
        n, seconds, (user, system) = _window(
            gens, server.pid, args, out, gen_core if args.pin else None
        )
        print(
            f"{server.label} {load.label}{' (pinned apart)' if args.pin else ''}: "
            f"{n / seconds:,.0f} requests/s while profiled, "
            f"server CPU per request: {user / max(n, 1) * 1e6:.0f} us user + "
            f"{system / max(n, 1) * 1e6:.0f} us system"
            + (" (py-spy included)" if args.rate else "")
        )
    finally:
        bench.close()


def _window(
    gens: Gens,
    pid: int,
    args: argparse.Namespace,
    out: Path,
    gen_core: int | None = None,
) -> tuple[int, float, tuple[float, float]]:
    """Run the load, then profile ``pid`` under it (or just wait, with ``--rate 0``).
    ``gen_core``: the core the generators are pinned to once up (with the threads they start).

    Returns the requests done, the seconds and the server's (user, system) CPU seconds of the
    profiled window.
    """
    gens.ready()
    if gen_core is not None:
        from bench.realpeer import pin_generators  # noqa: PLC0415

        pin_generators(gens, gen_core)
    gens.command(b"r")
    time.sleep(0.5)  # warm-up: the connections open and settle
    a = gens.sample()
    cpu0 = _cpu_seconds(pid)
    if args.rate:
        _spy(pid, out, args.seconds, args.rate).wait()
    else:  # --rate 0: no profiler, the undisturbed figures
        time.sleep(args.seconds)
    cpu1 = _cpu_seconds(pid)
    b = gens.sample()
    gens.pause()
    gens.stop()
    cpu = (cpu1[0] - cpu0[0], cpu1[1] - cpu0[1])
    return b["done"] - a["done"], b["t"] - a["t"], cpu


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _propagation(root: Path, args: argparse.Namespace, out: Path) -> None:
    from bench.propagation import LOW_RATE, Cluster, Driver  # noqa: PLC0415

    cluster = Cluster(root, 2)
    driver = Driver(cluster, 10**11)
    try:
        driver.closed_loop(0.2, 0.5)
        node = cluster.nodes[0 if args.node == "a" else 1]
        spy = _spy(node.wm.pid, out, args.seconds, args.rate)
        flows = []
        while spy.poll() is None:
            if args.what == "low":
                flows.append(driver.paced(LOW_RATE, 1.0))
            else:
                flows.append(driver.closed_loop(0.05, 0.5))
        rates = [round(f.rate) for f in flows]
        print(f"propagation {args.what or 'max'}, node {args.node}: events/s per run {rates}")
    finally:
        driver.close()
        cluster.close()


def _local(root: Path, args: argparse.Namespace, out: Path) -> None:
    from bench.local_channel import Channel, payload  # noqa: PLC0415

    ch = Channel("stdio", root)
    try:
        n = 50_000
        spy = _spy(ch.wm.pid, out, args.seconds, args.rate)
        rep = 0
        while spy.poll() is None:
            dt, _, _ = ch.run(payload(n, rep, False), n, f"p-{rep}")
            rep += 1
            print(f"local channel stdio: {n / dt:,.0f} frames/s")
    finally:
        ch.close()


if __name__ == "__main__":
    main()
