"""nvpair-wm speaking another contract version: a stand-in for a peer of another major release.

``python tests/other_major_wm.py VERSION [nvpair-wm flags...]`` is this tree's nvpair-wm with
``schema/VERSION`` replaced by ``VERSION`` before anything of nvpair_wm is imported, so that
every request and response it makes carries ``nvpair-contract-version: VERSION`` and it refuses
requests of any other major, exactly as a real release of that version would at the wire.
"""

from __future__ import annotations

import sys

from nvpair_wm_schema import contract


def main() -> None:
    contract.CONTRACT_VERSION = sys.argv[1]  # type: ignore[misc]  # before nvpair_wm reads it
    from nvpair_wm import cli  # noqa: PLC0415 - must come after the patch

    cli.main(sys.argv[2:])


if __name__ == "__main__":
    main()
