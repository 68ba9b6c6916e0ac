"""The ``nvpair-wm`` console script: stop signals are handled before anything heavy loads.

Importing the daemon (asyncio, cryptography, the protocol machines, the generated schema)
takes a few hundred milliseconds on a busy host, and reloading a journal can take seconds; a
supervisor's SIGTERM in that time would otherwise kill the process with status 143 and no word.
Here it ends the start-up with one line and status 0, as it ends the running node. Once the
node's event loop runs, its own handlers take over (node.py). ``nvpair-wm status`` (a running
node's account, status_command.py) is dispatched from here, before any of that.
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
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["status"]:  # a command for operators, not the daemon: nothing to stop
        from nvpair_wm import status_command  # noqa: PLC0415

        sys.exit(status_command.main(args[1:]))
    for sig in platforms.STOP_SIGNALS:
        signal.signal(sig, _interrupt)
    # A reload asked for during start-up (SIGHUP's default would end the process): the file was
    # read a moment ago; the running node's handler takes over (node.py).
    if hasattr(signal, "SIGHUP"):  # not on Windows
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
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
