"""Deliberately broken nvpair-wms, to show the conformance kit catches what it should.

``python tests/broken_wm.py MODE [nvpair-wm flags...]`` is a real nvpair-wm process with one
fault: before it runs nvpair-wm's own ``cli.main``, it replaces one function or method of the
daemon, so the fault is in what the daemon does (decides, keeps, sends), not a filter on what
it writes. ``MODES`` lists each with what it breaks; ``tests/test_behaviour.py`` names the
vectors that must catch each one.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
from nvpair_wm_schema.contract import INVALID_PARAMS
from nvpair_wm_schema.nodes_update_schema import NodesUpdate

from nvpair_wm import (
    cli,
    codec,
    dedup,
    dispatch,
    endpoint,
    events,
    node,
    outbox,
    outcomes,
    peerlink,
    sync,
    versions,
)
from nvpair_wm.http.core import Request, Response, error_response
from nvpair_wm.io import client
from nvpair_wm.proto import h1
from nvpair_wm.proto.h2 import connection, frames, hpack, streams
from nvpair_wm.versions import RESPONSE_FIELDS


def _wrong_code() -> None:
    """-32601 (Method not found) is reported as -32602 (Invalid params)."""
    response = codec.RpcError.response

    def broken(self: codec.RpcError, index: int | None = None) -> Any:
        if self.code == codec.METHOD_NOT_FOUND:
            return response(dataclasses.replace(self, code=INVALID_PARAMS), index)
        return response(self, index)

    codec.RpcError.response = broken  # type: ignore[method-assign]


def _nodes_update_not_applied() -> None:
    """A nodes:update request is answered "duplicate" (it is applied all the same)."""
    answer = dispatch.Dispatcher._answer

    def broken(self: dispatch.Dispatcher, item: Any, outcome: Any, answers: list[Any]) -> None:
        if isinstance(item, NodesUpdate):
            outcome = "duplicate"
        answer(self, item, outcome, answers)

    dispatch.Dispatcher._answer = broken  # type: ignore[method-assign]


def _line_limit_doubled() -> None:
    """The local channel reads lines of up to 2 MiB instead of the contract's 1 MiB."""
    init = codec.LineBuffer.__init__

    def broken(self: codec.LineBuffer, max_frame: int = codec.MAX_FRAME_BYTES) -> None:
        init(self, 2 * max_frame)

    codec.LineBuffer.__init__ = broken  # type: ignore[method-assign]


def _batch_reversed() -> None:
    """A batch's elements are handled last to first."""
    decode = codec.decode

    def broken(payload: bytes, max_batch: int = codec.MAX_BATCH_FRAMES) -> codec.Decoded:
        decoded = decode(payload, max_batch)
        if decoded.batch:
            decoded.items.reverse()
        return decoded

    codec.decode = broken


def _duplicates_applied() -> None:
    """A duplicate event is taken for a new one (answered, forwarded and re-sent as applied)."""
    observe = dedup.WorkloadTable.observe

    def broken(self: dedup.WorkloadTable, *a: Any, **kw: Any) -> outcomes.Outcome:
        outcome = observe(self, *a, **kw)
        return outcomes.Outcome.APPLIED if outcome is outcomes.Outcome.DUPLICATE else outcome

    dedup.WorkloadTable.observe = broken  # type: ignore[method-assign]


def _removal_not_narrowed() -> None:
    """A removal's runId is ignored: it removes the newest run of the id, whichever it is."""
    remove = dedup.WorkloadTable.remove

    def broken(
        self: dedup.WorkloadTable,
        origin: str,
        workload_id: str,
        run_id: str | None,
        now: float,
        *,
        local: bool = False,
    ) -> tuple[outcomes.Outcome, dedup.Removal]:
        return remove(self, origin, workload_id, None, now, local=local)

    dedup.WorkloadTable.remove = broken  # type: ignore[method-assign]


def _wrong_status() -> None:
    """400 where a wrong Content-Type earns 415."""
    head = endpoint.EventsEndpoint.head

    def broken(self: endpoint.EventsEndpoint, req: Request) -> Response | None:
        resp = head(self, req)
        if resp is not None and resp.status == 415:
            return error_response(400, "bad request")
        return resp

    endpoint.EventsEndpoint.head = broken  # type: ignore[method-assign]


def _busy_without_retry_after() -> None:
    """503 when the queue toward the broker is full, without Retry-After."""
    endpoint.EventsEndpoint._busy = staticmethod(  # type: ignore[method-assign]
        lambda: error_response(503, "queue toward the broker is full")
    )


def _timeout_as_400() -> None:
    """A request whose headers never finish gets 400 instead of 408."""
    h1.request_timeout = lambda: error_response(400, "bad request")  # type: ignore[attr-defined]


def _relays_peer_events() -> None:
    """Events received from a peer are sent on to every peer (gossip the contract forbids)."""
    nodes: list[node.Node] = []
    init = node.Node.__init__
    complete = endpoint.EventsEndpoint.complete

    def keep(self: node.Node, *a: Any, **kw: Any) -> None:
        init(self, *a, **kw)
        nodes.append(self)

    def broken(self: endpoint.EventsEndpoint, req: Request, body: bytes) -> Response:
        resp = complete(self, req, body)
        if 200 <= resp.status < 300 and nodes:
            items = codec.decode(body).items
            out = [
                dispatch.outbound_event(i) for i in items if isinstance(i, events.LIFECYCLE_TYPES)
            ]
            nodes[0].broadcaster.publish(out)
        return resp

    node.Node.__init__ = keep  # type: ignore[method-assign]
    endpoint.EventsEndpoint.complete = broken  # type: ignore[method-assign]


def _removal_without_run() -> None:
    """A local removal goes to the peers without its runId."""

    def broken(removal: dedup.Removal) -> dispatch.Outbound:
        frame = dispatch.removal_frame(removal)
        frame.params.runId = msgspec.UNSET
        key = (removal.origin, removal.workload_id, removal.run_id or "")
        return dispatch.Outbound(key, float("inf"), codec.encode(frame))

    dispatch.outbound_removal = broken


def _keeps_dropped_peers() -> None:
    """A nodes:update adds peers but never drops one."""
    update = node.Node.update_nodes
    known: dict[str, Any] = {}

    def broken(self: node.Node, nodes: list[Any]) -> None:
        known.update({n.nodeId: n for n in nodes})
        update(self, list(known.values()))

    node.Node.update_nodes = broken  # type: ignore[method-assign]


class _AnyFingerprint(str):
    """Equal to every fingerprint (a pin check that checks nothing)."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False


def _no_pin_check() -> None:
    """The broadcaster sends to whatever server answers, whatever certificate it presents."""

    def broken(self: client._PinCheck, fingerprint: str) -> bool:
        self.seen = fingerprint
        self.expected = _AnyFingerprint(self.expected)  # the backstop after the handshake too
        return True

    client._PinCheck.__call__ = broken  # type: ignore[method-assign]


def _ignores_retry_after() -> None:
    """A peer's Retry-After is not honoured: the retry follows the usual backoff."""
    failed = outbox.PeerOutbox.failed

    def broken(
        self: outbox.PeerOutbox, batch: Any, reason: str, retry_after: float | None = None
    ) -> None:
        failed(self, batch, reason, None)

    outbox.PeerOutbox.failed = broken  # type: ignore[method-assign]


def _never_gives_up() -> None:
    """A peer that keeps failing is retried for ever: nothing queued is ever given up."""
    failure = outbox.RetryRun.failure

    def broken(self: outbox.RetryRun, *a: Any, **kw: Any) -> peerlink.LinkEvent | None:
        event = failure(self, *a, **kw)
        return peerlink.LinkEvent.FAILED if event is peerlink.LinkEvent.EXHAUSTED else event

    outbox.RetryRun.failure = broken  # type: ignore[method-assign]


def _no_snapshot() -> None:
    """A new connection starts without the origin's current state (an empty snapshot)."""
    sync.Snapshot.of = classmethod(lambda cls, originated: cls([], []))  # type: ignore[assignment,method-assign]


def _413_drops_the_batch() -> None:
    """A 413 drops the batch instead of halving it."""

    def broken(self: outbox.PeerOutbox, batch: outbox.Batch) -> bool:
        self.rejected(batch, 413, "too large")
        return False

    outbox.PeerOutbox.too_large = broken  # type: ignore[method-assign]


def _unbounded_batches() -> None:
    """Requests to a peer take as many frames and bytes as are queued (no batch bound)."""
    init = outbox.PeerOutbox.__init__

    def broken(
        self: outbox.PeerOutbox, name: str, limits: outbox.BroadcastLimits, *a: Any, **kw: Any
    ) -> None:
        unbounded = dataclasses.replace(limits, max_batch_frames=10**9, max_batch_bytes=1 << 40)
        init(self, name, unbounded, *a, **kw)

    outbox.PeerOutbox.__init__ = broken  # type: ignore[method-assign]


def _bare_answers_without_versions() -> None:
    """HTTP/2's cached bare answers (every 202) lack nvpair-contract-version and server: the
    fast path that skips the usual response building forgot the version fields."""

    def broken(status: int) -> tuple[bytes, bytes]:
        fields, _ = streams.response_fields(Response(status, []), False)
        block = hpack.encode_fields(tuple(f for f in fields if f not in RESPONSE_FIELDS))
        flags = frames.END_STREAM | frames.END_HEADERS
        head = frames.frame_header(len(block), frames.HEADERS, flags, 0)
        cached = connection._BARE_HEADERS[status] = (head[:5], block)
        return cached

    connection._bare_headers = broken


def _software_is_the_whole_field() -> None:
    """A peer's software version in manager:status is its whole user-agent, not the version of
    its first product token."""

    def broken(value: bytes | None) -> str | None:
        return None if value is None else value.decode("latin-1")

    versions.software_of = broken


def _snapshot_removals_misindexed() -> None:
    """What a snapshot covers indexes its removals from the start of the events, not of the
    removals (fails once a snapshot with events and removals meets a non-empty queue)."""

    def broken(self: sync.Snapshot) -> Iterator[tuple[sync.Key, float]]:
        events, removals = self._events, self._removals
        for out in self._returned:
            yield out.key, out.seq
        for i in range(self._next, len(events) + len(removals)):
            if i < len(events):
                yield events[i].key, events[i].seq
            else:
                yield sync._removal_key(removals[i]), sync.REMOVAL_SEQ

    sync.Snapshot.covered = broken  # type: ignore[method-assign]


def _refused_snapshot_frames_lost() -> None:
    """The frames of a snapshot request that was refused (503, 413) are not handed back to the
    snapshot: the rest of it goes on, and those workloads reach the peer at its next snapshot
    at best."""
    requeue = outbox.PeerOutbox._requeue

    def broken(self: outbox.PeerOutbox, batch: outbox.Batch) -> None:
        batch.snapshot = []
        requeue(self, batch)

    outbox.PeerOutbox._requeue = broken  # type: ignore[method-assign]


MODES: dict[str, Callable[[], None]] = {
    "code": _wrong_code,
    "nodes-update": _nodes_update_not_applied,
    "line-limit": _line_limit_doubled,
    "batch-order": _batch_reversed,
    "dedup": _duplicates_applied,
    "narrow": _removal_not_narrowed,
    "status": _wrong_status,
    "busy": _busy_without_retry_after,
    "timeout": _timeout_as_400,
    "relay": _relays_peer_events,
    "remove-run": _removal_without_run,
    "keep-peers": _keeps_dropped_peers,
    "pin": _no_pin_check,
    "retry-after": _ignores_retry_after,
    "give-up": _never_gives_up,
    "snapshot": _no_snapshot,
    "413": _413_drops_the_batch,
    "bounds": _unbounded_batches,
    "versions": _bare_answers_without_versions,
    "peer-software": _software_is_the_whole_field,
    "snapshot-removals": _snapshot_removals_misindexed,
    "snapshot-refused": _refused_snapshot_frames_lost,
}


def main() -> int:
    mode, args = sys.argv[1], sys.argv[2:]
    MODES[mode]()
    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
