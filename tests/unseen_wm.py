"""One-bug nvpair-wms of the kinds no hand-written vector was written for.

``python tests/unseen_wm.py MODE [nvpair-wm flags...]``, like ``tests/broken_wm.py``: a real
nvpair-wm with one function of its decision code replaced. These are the bugs the executable
model and the exploration are for: a rule checked on one side only, behaviour that shows only
after a change of state (a restart, a second run of an id, a reconnection).
``tests/test_explore.py`` shows that the kit finds each of them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from nvpair_wm import cli, codec, dedup, endpoint, journal, node, outbox
from nvpair_wm.http.core import Request, Response
from nvpair_wm.outcomes import Outcome


def _tombstone_covers_every_run() -> None:
    """A removal narrowed by its runId tombstones every run of the id (narrowing ignored once
    it is recorded): a later run of the same id is suppressed."""
    runs = dedup._tomb_runs

    def broken(tomb: Any) -> Sequence[str]:
        return (*runs(tomb), "")

    dedup._tomb_runs = broken


def _stale_as_duplicate() -> None:
    """An older seq is answered ``duplicate`` instead of ``stale`` (seq compared with ``<=``
    on the duplicate test)."""
    observe = dedup.WorkloadTable.observe

    def broken(self: dedup.WorkloadTable, *a: Any, **kw: Any) -> Outcome:
        outcome = observe(self, *a, **kw)
        return Outcome.DUPLICATE if outcome is Outcome.STALE else outcome

    dedup.WorkloadTable.observe = broken  # type: ignore[method-assign]


def _restart_forgets() -> None:
    """A restart does not reload the journal: what was reported and forwarded before is new
    again (re-reports re-sent to peers, stale peer events forwarded to the broker)."""

    def broken(*_a: Any, **_kw: Any) -> int:
        return 0

    journal.reload_table = broken
    node.reload_table = broken  # type: ignore[attr-defined]


def _first_run_is_newest() -> None:
    """A removal without runId covers the first run seen of the id, not the newest one."""
    index_another = dedup.WorkloadTable._index_another

    def broken(self: dedup.WorkloadTable, wid: str, pair: Any, entry: Any) -> None:
        first = self._runs.get(wid)
        index_another(self, wid, pair, entry)
        if isinstance(first, tuple) and first[0] == pair[0]:
            self._runs[wid] = first  # the earlier run stays "newest"

    dedup.WorkloadTable._index_another = broken  # type: ignore[method-assign]


def _snapshot_without_removals() -> None:
    """A snapshot to a peer that reconnects carries the events but not the removals."""
    originated = dedup.WorkloadTable.originated

    def broken(self: dedup.WorkloadTable) -> Any:
        events, _ = originated(self)
        return events, []

    dedup.WorkloadTable.originated = broken  # type: ignore[method-assign]


def _version_ignored_over_http1() -> None:
    """``nvpair-contract-version`` is checked over HTTP/2 only: an HTTP/1.1 request of another
    major is served (the version rule held on one channel)."""
    head = endpoint.EventsEndpoint.head

    def broken(self: endpoint.EventsEndpoint, req: Request) -> Response | None:
        if req.protocol == "http/1.1":
            headers = [(k, v) for k, v in req.headers if k != b"nvpair-contract-version"]
            req = Request(req.method, req.path, headers, req.peer_fingerprint, req.protocol,
                          req.content_length)  # fmt: skip
        return head(self, req)

    endpoint.EventsEndpoint.head = broken  # type: ignore[method-assign]


def _409_as_final() -> None:
    """A peer's 409 (it speaks another major) is taken as a final refusal of that batch: the
    sender drops the batch and goes on sending, and never probes with a snapshot, so what the
    peer refused is never repaired."""

    def broken(self: outbox.PeerOutbox, batch: outbox.Batch, theirs: str, ours: str) -> None:
        self.rejected(batch, 409, f"the peer speaks contract {theirs}, we speak {ours}")

    outbox.PeerOutbox.incompatible = broken  # type: ignore[method-assign]


def _batch_bound_off_by_one() -> None:
    """A batch of exactly 10,000 elements is refused (the bound taken as exclusive)."""
    decode = codec.decode

    def broken(payload: bytes, max_batch: int = codec.MAX_BATCH_FRAMES) -> codec.Decoded:
        return decode(payload, max_batch - 1)

    codec.decode = broken


MODES: dict[str, Callable[[], None]] = {
    "tomb-every-run": _tombstone_covers_every_run,
    "stale-as-duplicate": _stale_as_duplicate,
    "restart-forgets": _restart_forgets,
    "first-run": _first_run_is_newest,
    "snapshot-no-removals": _snapshot_without_removals,
    "version-h1": _version_ignored_over_http1,
    "409-final": _409_as_final,
    "batch-bound": _batch_bound_off_by_one,
}


def main() -> int:
    mode, args = sys.argv[1], sys.argv[2:]
    MODES[mode]()
    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
