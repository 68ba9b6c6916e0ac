"""Logging to stderr only: stdout belongs to the JSON-RPC protocol in stdio mode."""

from __future__ import annotations

import logging
import sys
import time
from typing import Final

from rich.console import Console
from rich.logging import RichHandler

LEVELS: Final = {
    "error": logging.ERROR,
    "warn": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
}


class _PlainFormatter(logging.Formatter):
    """One greppable line per record, UTC timestamps with milliseconds."""

    converter = staticmethod(time.gmtime)

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s.%(msecs)03dZ %(levelname)-5s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"
        )


def configure(level: str) -> None:
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler: logging.Handler
    if sys.stderr.isatty():
        handler = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=True)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_PlainFormatter())
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
    # The protocol libraries log every frame at debug: too much even for our debug level.
    for noisy in ("hpack", "h2"):
        logging.getLogger(noisy).setLevel(max(LEVELS[level], logging.INFO))
    logging.captureWarnings(True)
