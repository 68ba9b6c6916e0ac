"""Diagnosis, not part of ``make bench``: the propagation benchmark's sustained rate with some of
nvpair-wm's limits changed, to find what bounds it.

    python -m bench.experiments [--reps N] [--window S]

Each configuration starts a fresh two-node cluster of real processes (as
``bench/propagation.py`` does) whose nodes run ``python -m bench.experiments node ARGS``:
nvpair-wm's own ``Node`` with its ``Config``, except the limits given as JSON in the
environment (``NVPAIR_BENCH_BROADCAST`` -> ``BroadcastLimits``, ``NVPAIR_BENCH_HTTP`` -> the
server's ``Limits``). Nothing in ``src/`` changes; the defaults row is the daemon as shipped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIGS: list[tuple[str, dict[str, object], dict[str, object]]] = [
    ("defaults (as shipped)", {}, {}),
    (
        "server h2_initial_window_size 1 MiB (default 64 KiB)",
        {},
        {"h2_initial_window_size": 1 << 20},
    ),
    ("sender max_in_flight 16 (default 4)", {"max_in_flight": 16}, {}),
    (
        "sender max_batch_frames 2048, 1 MB (default 512, 512 KiB)",
        {"max_batch_frames": 2048, "max_batch_bytes": 1_000_000},
        {},
    ),
]


def node(argv: list[str]) -> int:
    """nvpair-wm (cli flags) with limits overridden from the environment."""
    from nvpair_wm import cli, logs  # noqa: PLC0415
    from nvpair_wm.http.core import Limits  # noqa: PLC0415
    from nvpair_wm.node import Config, Node  # noqa: PLC0415
    from nvpair_wm.outbox import BroadcastLimits  # noqa: PLC0415

    args = cli.parser().parse_args(argv)
    logs.configure(args.log_level)
    config = Config(
        port=args.port,
        ipc=args.ipc,
        cluster_dir=args.cluster_dir,
        host=args.bind,
        broker_queue=args.broker_queue,
        broadcast=BroadcastLimits(**json.loads(os.environ.get("NVPAIR_BENCH_BROADCAST", "{}"))),
        http=Limits(**json.loads(os.environ.get("NVPAIR_BENCH_HTTP", "{}"))),
    )
    return asyncio.run(Node(config).run())


def main() -> None:
    if sys.argv[1:2] == ["node"]:
        sys.exit(node(sys.argv[2:]))
    p = argparse.ArgumentParser(
        prog="python -m bench.experiments", description=__doc__.splitlines()[0]
    )
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--window", type=float, default=1.0)
    args = p.parse_args()

    from bench import procs  # noqa: PLC0415
    from bench.propagation import Cluster, Driver  # noqa: PLC0415

    real_popen = subprocess.Popen

    def popen(argv: list[str], *a: object, **k: object) -> subprocess.Popen[bytes]:
        if argv[1:3] == ["-m", "nvpair_wm"]:
            argv = [argv[0], "-m", "bench.experiments", "node", *argv[3:]]
        return real_popen(argv, *a, **k)  # type: ignore[call-overload,no-any-return]

    procs.subprocess.Popen = popen  # type: ignore[misc,assignment]
    for label, broadcast, http in CONFIGS:
        os.environ["NVPAIR_BENCH_BROADCAST"] = json.dumps(broadcast)
        os.environ["NVPAIR_BENCH_HTTP"] = json.dumps(http)
        with tempfile.TemporaryDirectory(prefix="nvpair-experiment-") as tmp:
            cluster = Cluster(Path(tmp), 2)
            driver = Driver(cluster, 10**11)
            try:
                driver.closed_loop(0.2, 0.5)
                flows = [driver.closed_loop(0.2, args.window) for _ in range(args.reps)]
            finally:
                driver.close()
                cluster.close()
        rates = [f.rate for f in flows]
        util = [statistics.median(f.node_cpu[i] for f in flows) for i in range(2)]
        print(
            f"{label:60} {statistics.median(rates):9,.0f} events/s "
            f"(min {min(rates):,.0f}, max {max(rates):,.0f}); CPU-s/s A {util[0]:.2f}, "
            f"B {util[1]:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
