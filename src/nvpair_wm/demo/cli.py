"""``python -m nvpair_wm.demo``: its flags, and the run from a temporary cluster directory to
the summary."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from rich.console import Console

from nvpair_wm.cli import int_in
from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.cmdline import OneLineParser
from nvpair_wm.demo import view
from nvpair_wm.demo.node import DemoNode
from nvpair_wm.demo.scenario import Demo, Timeline
from nvpair_wm.errors import DemoError

__all__ = ["main"]

PROG: Final = "python -m nvpair_wm.demo"


async def _main(duration: float, size: int, seed: int | None, console: Console) -> int:
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="nvpair-wm-demo-"))
    nodes: list[DemoNode] = []
    demo: Demo | None = None
    loop = asyncio.get_running_loop()
    try:
        names = [f"node-{i}" for i in range(1, size + 1)]
        dirs = init_cluster(tmp / "cluster", names)
        nodes = [
            DemoNode(n, dirs[n], tmp / f"{n}.log", random.Random(rng.getrandbits(64)))
            for n in names
        ]
        demo = Demo(nodes, Timeline.of(duration), console)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, demo.interrupt)
        try:
            converged = await demo.run()
        except DemoError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 1
        view.summary(nodes, converged)
        return 0
    finally:
        await asyncio.gather(*(n.stop() for n in nodes), return_exceptions=True)
        shutil.rmtree(tmp, ignore_errors=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 1.0 <= value <= 86_400.0:
        raise argparse.ArgumentTypeError(f"must be between 1 and 86400 seconds: {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(
        prog=PROG,
        description="A cluster of nvpair-wm processes on loopback with stand-in brokers: watch "
        "every node's view converge, also after one node is killed and restarted.",
    )
    parser.add_argument(
        "--duration",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="run this long, then stop and print a summary (default 60; Ctrl-C ends sooner)",
    )
    parser.add_argument(
        "--nodes", type=int_in(2, 9), default=3, metavar="N", help="cluster size (default 3)"
    )
    parser.add_argument("--seed", type=int, help="seed the brokers' random choices")
    args = parser.parse_args(argv)
    console = Console()
    try:
        return asyncio.run(_main(args.duration, args.nodes, args.seed, console))
    except KeyboardInterrupt:  # before the demo's own handler was installed
        return 130
