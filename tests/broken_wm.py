"""A deliberately broken nvpair-wm, to show the conformance kit catches what it should.

``python tests/broken_wm.py MODE [nvpair-wm flags...]`` is a real process that behaves like
nvpair-wm except for one fault:

- ``code``: rewrites error code -32601 (Method not found) to -32602 on its way to the broker;
- ``dedup``: rewrites the outcome ``duplicate`` to ``applied`` on its way to the broker;
- ``status``: answers 400 where nvpair-wm answers 415 (a wrong Content-Type);
- ``forward``: treats a duplicate event as new, so a peer's duplicate reaches the broker again.

The first two run nvpair-wm as a child and filter its stdout line by line; the others patch
one function in this process, then run nvpair-wm's own ``cli.main``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

from nvpair_wm import cli, dedup, endpoint
from nvpair_wm.http.core import Request, Response, error_response

REWRITES = {
    "code": (b'"code":-32601', b'"code":-32602'),
    "dedup": (b'"outcome":"duplicate"', b'"outcome":"applied"'),
}


def _filter_stdout(mode: str, args: list[str]) -> int:
    old, new = REWRITES[mode]
    child = subprocess.Popen(
        [sys.executable, "-m", "nvpair_wm", *args], stdout=subprocess.PIPE, bufsize=0
    )
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    assert child.stdout is not None
    out = sys.stdout.buffer
    for line in iter(child.stdout.readline, b""):
        out.write(line.replace(old, new))
        out.flush()
    return child.wait()


def _wrong_status(args: list[str]) -> int:
    head = endpoint.EventsEndpoint.head

    def broken_head(self: endpoint.EventsEndpoint, req: Request) -> Response | None:
        resp = head(self, req)
        if resp is not None and resp.status == 415:
            return error_response(400, "bad request")
        return resp

    endpoint.EventsEndpoint.head = broken_head  # type: ignore[method-assign]
    return cli.main(args)


def _forward_duplicates(args: list[str]) -> int:
    observe = dedup.WorkloadTable.observe

    def broken_observe(self: dedup.WorkloadTable, *a: Any, **kw: Any) -> dedup.Outcome:
        outcome = observe(self, *a, **kw)
        return "applied" if outcome == "duplicate" else outcome

    dedup.WorkloadTable.observe = broken_observe  # type: ignore[method-assign]
    return cli.main(args)


def main() -> int:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "status":
        return _wrong_status(args)
    if mode == "forward":
        return _forward_duplicates(args)
    return _filter_stdout(mode, args)


if __name__ == "__main__":
    sys.exit(main())
