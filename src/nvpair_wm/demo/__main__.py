"""``python -m nvpair_wm.demo``."""

import sys

from nvpair_wm.demo.cli import main

sys.exit(main())
