"""Diagnosis, not part of ``make bench``: the propagation benchmark's sustained rate with some of
nvpair-wm's limits changed, to find what bounds it.

    python -m bench.experiments [--reps N] [--window S]

Each configuration starts a fresh two-node cluster of real processes (as
``bench/propagation.py`` does), each node given the configuration's limits the way a user sets
them: a TOML file passed as ``--config`` (README, "Configuration"). The defaults row is the
daemon as shipped.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

# (label, {dotted config key: value}); keys as in the README's configuration table.
CONFIGS: list[tuple[str, dict[str, object]]] = [
    ("defaults (as shipped)", {}),
    (
        "server h2_initial_window_size 1 MiB (default 64 KiB)",
        {"http.h2_initial_window_size": 1 << 20},
    ),
    ("sender max_in_flight 4 (default 16)", {"broadcast.max_in_flight": 4}),
    (
        "sender max_batch_frames 2048, 1 MB (default 512, 512 KiB)",
        {"broadcast.max_batch_frames": 2048, "broadcast.max_batch_bytes": 1_000_000},
    ),
]


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.experiments", description=__doc__.splitlines()[0]
    )
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--window", type=float, default=1.0)
    args = p.parse_args()

    from bench.propagation import Cluster, Driver  # noqa: PLC0415
    from nvpair_wm.config import dumps  # noqa: PLC0415

    for label, settings in CONFIGS:
        with tempfile.TemporaryDirectory(prefix="nvpair-experiment-") as tmp:
            config = Path(tmp) / "limits.toml"
            config.write_text(dumps(settings))
            cluster = Cluster(Path(tmp), 2, config=config)
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
