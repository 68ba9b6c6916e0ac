"""What the package's command lines share: a bad flag is one line on stderr and exit status 2.

Its own module, importing nothing of the daemon, so that the light commands (``nvpair-wm
status``, ``nvpair-wm-cluster``) use it without loading what ``nvpair_wm.cli`` loads.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["OneLineParser"]


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A bad flag is one line on stderr and exit status 2 (no usage dump)."""
        one_line = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {one_line} (see --help)\n")
