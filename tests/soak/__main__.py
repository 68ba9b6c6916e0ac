"""``python -m tests.soak``: see :mod:`tests.soak.cli`."""

import sys

from tests.soak.cli import main

sys.exit(main())
