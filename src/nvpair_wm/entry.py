"""The ``nvpair-wm`` console script: stop signals are handled before anything heavy loads.

Importing the daemon (asyncio, cryptography, the protocol machines, the generated schema)
takes a few hundred milliseconds on a busy host, and reloading a journal can take seconds; a
supervisor's SIGTERM in that time would otherwise kill the process with status 143 and no word.
Here it ends the start-up with one line and status 0, as it ends the running node. Once the
node's event loop runs, its own handlers take over (node.py).
"""

from __future__ import annotations

import logging
import signal
import sys
from types import FrameType

from nvpair_wm import platforms

__all__ = ["StartupInterrupted", "main"]


class StartupInterrupted(BaseException):
    """SIGTERM or SIGINT before the event loop handles them (a BaseException, like
    KeyboardInterrupt, so that no ``except Exception`` on the way swallows it)."""

    def __init__(self, sig: signal.Signals) -> None:
        super().__init__(sig.name)
        self.signal = sig


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise StartupInterrupted(signal.Signals(signum))


def main(argv: list[str] | None = None) -> None:
    for sig in platforms.STOP_SIGNALS:
        signal.signal(sig, _interrupt)
    try:
        from nvpair_wm import cli  # noqa: PLC0415 - after the handlers: see the docstring

        code = cli.main(argv)
    except StartupInterrupted as exc:
        if logging.getLogger().handlers:  # the configured log (its format, its level)
            logging.getLogger("nvpair_wm").info("%s received during start-up; exiting", exc)
        else:  # before the command line was read
            sys.stderr.write(f"nvpair-wm: {exc} received during start-up; exiting\n")
        code = 0
    sys.exit(code)
