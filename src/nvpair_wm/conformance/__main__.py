import sys

from nvpair_wm.conformance.cli import main

sys.exit(main())
