"""Logging to stderr only: stdout belongs to the JSON-RPC protocol in stdio mode.

Three formats (``--log-format``, config key ``log_format``): ``auto`` (the default) is rich on a
terminal and plain lines otherwise; ``plain`` is one greppable UTC line per record; ``json`` is
one JSON object per line for log shippers: ``time``, ``level``, ``logger``, ``message``, and
the record's structured fields, which callers give as ``extra`` (``peer``, ``nodeId``, counts
such as ``records`` or ``frames``), plus ``exception`` when there is one.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Final

__all__ = ["FORMATS", "LEVELS", "JsonFormatter", "configure"]

LEVELS: Final = {
    "error": logging.ERROR,
    "warn": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
}
FORMATS: Final = ("auto", "plain", "json")

#: What every LogRecord has: anything else on a record came from ``extra`` (a structured field).
_RECORD_ATTRIBUTES: Final = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


class _PlainFormatter(logging.Formatter):
    """One greppable line per record, UTC timestamps with milliseconds."""

    converter = staticmethod(time.gmtime)

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s.%(msecs)03dZ %(levelname)-5s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"
        )


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in a message are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out: dict[str, object] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure(level: str, fmt: str = "auto") -> None:
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler: logging.Handler
    if fmt == "auto" and sys.stderr.isatty():
        # Imported here: rich is for a terminal only, and a service's start (stderr a pipe or
        # the journal) need not pay for importing it before ``ready``.
        from rich.console import Console  # noqa: PLC0415
        from rich.logging import RichHandler  # noqa: PLC0415

        handler = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=True)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter() if fmt == "json" else _PlainFormatter())
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
    # The protocol libraries log every frame at debug: too much even for our debug level.
    for noisy in ("hpack", "h2"):
        logging.getLogger(noisy).setLevel(max(LEVELS[level], logging.INFO))
    logging.captureWarnings(True)
