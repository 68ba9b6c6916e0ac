"""Command line → :class:`~nvpair_wm.node.Config`; nothing else happens here."""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from nvpair_wm import __version__, allocator, logs
from nvpair_wm.node import Config, Node


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A bad flag is one line on stderr and exit status 2 (no usage dump)."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def int_in(lo: int, hi: int | None = None, what: str = "a whole number") -> Callable[[str], int]:
    """An argparse type: a decimal integer within [lo, hi] (no upper bound when hi is None)."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
            raise argparse.ArgumentTypeError(f"must be {bound}: {value}")
        return value

    return parse


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="nvpair-wm",
        description="Relays and deduplicates inference-workload lifecycle events between this "
        "node's broker (stdio or --ipc) and the cluster's other nodes (mutual-TLS HTTP).",
    )
    p.add_argument(
        "--port",
        type=int_in(0, 65535, "a port number"),
        default=14320,
        metavar="N",
        help="inter-node port to listen on and advertise (default 14320; 0 picks a "
        "free port, reported in the log and in manager:status)",
    )
    p.add_argument(
        "--ipc",
        metavar="PATH",
        help="broker endpoint to dial: a Unix socket (or a Windows named pipe) instead of stdio",
    )
    p.add_argument(
        "--cluster-dir",
        type=Path,
        metavar="PATH",
        help="cluster config dir: node.crt, node.key and trusted/*.crt; without it "
        "the node has no cluster identity and exchanges no inter-node traffic",
    )
    p.add_argument(
        "--bind",
        metavar="ADDR",
        help="listen on this address only (default: every interface, IPv4 and IPv6)",
    )
    p.add_argument(
        "--broker-queue",
        type=int_in(1),
        default=10_000,
        metavar="N",
        help="frames that may wait for the broker before peers get 503 and the broker's own "
        "input is paused (default 10000)",
    )
    p.add_argument(
        "--log-level",
        choices=list(logs.LEVELS),
        default="info",
        help="error, warn, info (default) or debug; logs go to stderr",
    )
    p.add_argument("--version", action="version", version=f"nvpair-wm {__version__}")
    return p


def raise_fd_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit: every connection is a descriptor, and the
    default soft limit (often 1,024) is below ``max_connections`` plus what the node needs."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # e.g. an infinite hard limit the kernel caps
            logging.getLogger(__name__).warning("cannot raise the open-file limit: %s", exc)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logs.configure(args.log_level)
    allocator.pin_mmap_threshold()
    raise_fd_limit()
    config = Config(
        port=args.port,
        ipc=args.ipc,
        cluster_dir=args.cluster_dir,
        host=args.bind,
        broker_queue=args.broker_queue,
    )
    try:
        code = asyncio.run(Node(config).run())
    except KeyboardInterrupt:  # pragma: no cover - SIGINT is handled inside run()
        code = 130
    sys.exit(code)
