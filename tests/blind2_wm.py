"""A second round of one-bug nvpair-wms written blind (from the contract and the daemon's code,
not from the kit's vectors, model or earlier stand-ins).

``python tests/blind2_wm.py MODE [nvpair-wm flags...]``, like ``tests/blind_wm.py``: a real
nvpair-wm with one function replaced or wrapped, each a mistake a team writing the daemon in Go
or TypeScript could plausibly make, weighted toward what a first round under-samples: behaviour
after a change of state (a restart, a second run of an id, a moved or unpinned peer), the order
of checks, both sides of two-sided rules, the bounds and the ``manager:status`` figures.
``tests/test_kit_blind.py`` (``CAUGHT_BY_2``) keeps the ones the
default kit missed, and a few it caught, as a regression.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from nvpair_wm import (
    broadcaster,
    cli,
    codec,
    dedup,
    dispatch,
    endpoint,
    peerlink,
    peers,
    sync,
    versions,
)
from nvpair_wm import outbox as outbox_mod
from nvpair_wm.codec import METHOD_NOT_FOUND, RpcError
from nvpair_wm.http.core import Request, Response, too_large
from nvpair_wm.outcomes import Outcome
from nvpair_wm.peerlink import LinkEvent
from nvpair_wm.proto import h1
from nvpair_wm.proto.h2 import client as h2client
from nvpair_wm.versions import CONTRACT_HEADER, OURS, ContractVersion

_MAX_SAFE = 2**53 - 1  # the contract's bound of an integer request id
_PEER_ONLY_REFUSED = frozenset({"nodes:update", "manager:status"})

# -- local channel: framing and bounds -----------------------------------------------------------


def _batch_at_bound_refused() -> None:
    """The batch bound is exclusive: a batch of exactly 10,000 elements is refused as over it
    (schema/README.md: "at most 10,000 elements")."""
    orig = codec.decode

    def decode(payload: bytes, max_batch: int = codec.MAX_BATCH_FRAMES) -> codec.Decoded:
        decoded = orig(payload, max_batch - 1)
        if decoded.too_many:
            first = decoded.items[0]
            assert isinstance(first, RpcError)
            count = int(first.reason.split()[2])
            return codec._too_many(count, max_batch)
        return decoded

    codec.decode = decode


def _oversize_resumes_mid_line() -> None:
    """After a line crosses the frame limit the reader stops discarding at once instead of at
    the next LF, so the rest of that line is read as a frame of its own (one more error)."""
    orig = codec.LineBuffer.feed

    def feed(self: codec.LineBuffer, data: bytes) -> list[bytes | codec.TooLarge]:
        out = orig(self, data)
        if codec.TOO_LARGE in out:
            self._discarding = False
        return out

    codec.LineBuffer.feed = feed  # type: ignore[method-assign]


def _depth_bound_65() -> None:
    """The nesting bound is off by one: a frame nested 65 levels deep is accepted."""
    codec.MAX_DEPTH = 65  # type: ignore[misc]


def _id_bound_exclusive() -> None:
    """A request id of exactly ±(2^53-1) is refused as out of range (the bound is inclusive)."""
    orig_frame, orig_whole, orig_decode = codec.decode_frame, codec.decode_whole, codec.decode
    reason = "id must be null, a string or an integer within the safe range"

    def at_bound(item: Any) -> bool:
        rid = getattr(item, "id", None)
        return type(rid) is int and abs(rid) >= _MAX_SAFE

    def fix(item: Any) -> Any:
        if at_bound(item):
            return RpcError(codec.INVALID_REQUEST, reason, None, True, "$.id")
        return item

    def decode_frame(raw: bytes) -> Any:
        item, compact = orig_frame(raw)
        return (fix(item), None) if at_bound(item) else (item, compact)

    def decode_whole(raw: bytes) -> Any:
        whole = orig_whole(raw)
        return None if whole is not None and at_bound(whole[0]) else whole

    def decode(payload: bytes, max_batch: int = codec.MAX_BATCH_FRAMES) -> codec.Decoded:
        decoded = orig_decode(payload, max_batch)
        if any(at_bound(i) for i in decoded.items):
            decoded.items = [fix(i) for i in decoded.items]
            decoded.encoded = None
        return decoded

    codec.decode_frame = decode_frame
    codec.decode_whole = decode_whole
    codec.decode = decode


def _blank_line_counted() -> None:
    """Blank and whitespace-only lines are counted in ``framesIn`` (spec: ignored, not
    counted)."""
    holder: list[dispatch.Dispatcher] = []
    orig_init = dispatch.Dispatcher.__init__
    orig_emit = codec.LineBuffer._emit

    def init(self: dispatch.Dispatcher, *args: Any, **kw: Any) -> None:
        orig_init(self, *args, **kw)
        holder.append(self)

    def emit(self: codec.LineBuffer, line: bytes, out: list[bytes | codec.TooLarge]) -> None:
        if holder and len(line) <= self.max_frame and (not line.strip()):
            d = holder[-1]
            d.counters.framesIn += 1
            d.broker_counters.framesIn += 1
        orig_emit(self, line, out)

    dispatch.Dispatcher.__init__ = init  # type: ignore[method-assign]
    codec.LineBuffer._emit = emit  # type: ignore[method-assign]


def _unknown_method_before_id() -> None:
    """The method is looked up before the id is checked: an unknown method with an invalid id
    (``1.5``) is answered -32601 instead of -32600 (schema/README.md, "Which code wins": 4
    before 6)."""
    orig = codec._classify

    def classify(obj: Any) -> Any:
        if (
            isinstance(obj, dict)
            and "id" in obj
            and obj.get("jsonrpc") == "2.0"
            and isinstance(obj.get("method"), str)
            and obj["method"] not in codec.KNOWN_METHODS
            and not codec._is_request_id(codec._integral_floats_to_int(obj["id"]))
        ):
            method = obj["method"]
            reason = f"unknown method {method!r}"
            return RpcError(METHOD_NOT_FOUND, reason, None, True, None, method)
        return orig(obj)

    codec._classify = classify


# -- the workload table: state changes ----------------------------------------------------------


class _Removing(NamedTuple):
    """What a call of ``WorkloadTable.remove`` was asked (its ``now`` aside)."""

    origin: str
    workload_id: str
    run_id: str | None
    local: bool


def _after_remove(change: Callable[[dedup.WorkloadTable, _Removing, Outcome], Outcome]) -> None:
    """Patch ``WorkloadTable.remove`` so that ``change`` may alter each call's outcome: one copy
    of its signature for the stand-ins that bend what a removal answers."""
    orig = dedup.WorkloadTable.remove

    def remove(
        self: dedup.WorkloadTable,
        origin: str,
        workload_id: str,
        run_id: str | None,
        now: float,
        *,
        local: bool = False,
    ) -> tuple[Outcome, dedup.Removal]:
        outcome, removal = orig(self, origin, workload_id, run_id, now, local=local)
        return change(self, _Removing(origin, workload_id, run_id, local), outcome), removal

    dedup.WorkloadTable.remove = remove  # type: ignore[method-assign]


def _tomb_forgets_earlier_runs() -> None:
    """A removal replaces the (originatedFrom, id) tombstone instead of adding its run to it,
    so removing run 2's id 7 lets a late event of the removed run 1's id 7 back."""

    def change(t: dedup.WorkloadTable, call: _Removing, outcome: Outcome) -> Outcome:
        okey = (call.origin, call.workload_id)
        tomb = t._tombs.cur.get(okey)
        if outcome is Outcome.APPLIED and tomb is not None:
            runs = dedup._tomb_runs(tomb)
            t._tombs.cur[okey] = (runs[-1],) if isinstance(tomb, tuple) else runs[-1]
        return outcome

    _after_remove(change)


def _bare_removal_covers_every_run() -> None:
    """A removal without runId tombstones every run of (originatedFrom, id), so a new run that
    reuses the id (ids restart at 1) is suppressed; the contract covers the newest run held."""

    def change(t: dedup.WorkloadTable, call: _Removing, outcome: Outcome) -> Outcome:
        okey = (call.origin, call.workload_id)
        tomb = t._tombs.cur.get(okey)
        if outcome is Outcome.APPLIED and call.run_id is None and tomb is not None:
            runs = [*dedup._tomb_runs(tomb)]
            if "" not in runs:
                runs.append("")
            t._tombs.cur[okey] = tuple(runs) if isinstance(tomb, tuple) else runs
        return outcome

    _after_remove(change)


def _peer_repeat_removal_forwarded() -> None:
    """A repeated removal from a peer is forwarded to the broker again (the local channel's
    repeats are collapsed; the inter-node side forgot the same check)."""

    def change(t: dedup.WorkloadTable, call: _Removing, outcome: Outcome) -> Outcome:
        if outcome is Outcome.DUPLICATE and not call.local:
            t.duplicates -= 1
            return Outcome.APPLIED
        return outcome

    _after_remove(change)


def _peer_stale_forwarded() -> None:
    """An event from a peer older than the newest seen is forwarded to the broker (the stale
    check exists on the local side only), so the broker's view moves backwards."""
    orig = dedup.WorkloadTable.observe

    def observe(self: dedup.WorkloadTable, info: Any, now: float, **kw: Any) -> Outcome:
        outcome = orig(self, info, now, **kw)
        if outcome is Outcome.STALE and kw.get("replay") is None:
            self.stale -= 1
            return Outcome.APPLIED
        return outcome

    dedup.WorkloadTable.observe = observe  # type: ignore[method-assign]


def _restart_rereport_applied() -> None:
    """After a restart, the broker's re-report of an event the journal already holds is
    answered ``applied`` and sent to the peers again (spec: answered ``duplicate``, goes
    nowhere)."""
    reloaded: set[tuple[str, str]] = set()
    orig_load = dedup.Reloader.load
    orig_observe = dedup.WorkloadTable.observe

    def load(self: dedup.Reloader, records: Iterable[Any]) -> None:
        kinds = self.kinds
        kept = list(records)
        for rec in kept:
            kind, _at, _origin, wid, run = rec[0], rec[1], rec[2], rec[3], rec[4]
            if kinds[kind].local and not kinds[kind].removal:
                reloaded.add((run, wid))
        orig_load(self, kept)

    def observe(self: dedup.WorkloadTable, info: Any, now: float, **kw: Any) -> Outcome:
        outcome = orig_observe(self, info, now, **kw)
        key = (info.runId, info.id)
        if outcome is Outcome.DUPLICATE and kw.get("replay") is not None and key in reloaded:
            reloaded.discard(key)
            self.duplicates -= 1
            return Outcome.APPLIED
        return outcome

    dedup.Reloader.load = load  # type: ignore[method-assign]
    dedup.WorkloadTable.observe = observe  # type: ignore[method-assign]


# -- manager:status figures ---------------------------------------------------------------------


def _removal_keeps_workload_count() -> None:
    """``counters.workloads`` is decremented when a workload expires, not when it is removed:
    a removed workload is still counted as tracked."""
    removed = [0]
    orig_remove = dedup.WorkloadTable.remove
    orig_status = dispatch.Dispatcher.status

    def remove(self: dedup.WorkloadTable, *args: Any, **kw: Any) -> Any:
        before = len(self)
        result = orig_remove(self, *args, **kw)
        removed[0] += before - len(self)
        return result

    def status(self: dispatch.Dispatcher) -> Any:
        result = orig_status(self)
        self.counters.workloads = len(self.table) + removed[0]  # the result holds it
        return result

    dedup.WorkloadTable.remove = remove  # type: ignore[method-assign]
    dispatch.Dispatcher.status = status  # type: ignore[method-assign]


def _stale_counted_as_duplicate() -> None:
    """Per channel, a stale event is counted under ``duplicate`` (one bucket for both), so
    ``byChannel.*.stale`` stays 0."""
    orig = dispatch.Dispatcher._count

    def count(ch: Any, outcome: Outcome) -> None:
        orig(ch, Outcome.DUPLICATE if outcome is Outcome.STALE else outcome)

    dispatch.Dispatcher._count = staticmethod(count)  # type: ignore[method-assign]


def _give_up_one_late() -> None:
    """A failing peer is given up after ``retry_max_attempts`` + 1 failures, not after
    ``retry_max_attempts``."""
    orig = outbox_mod.RetryRun.failure

    def failure(self: outbox_mod.RetryRun, now: float, *args: Any, **kw: Any) -> Any:
        event = orig(self, now, *args, **kw)
        lim = self._limits
        if (
            event is LinkEvent.EXHAUSTED
            and self.failures == lim.retry_max_attempts
            and self.since is not None
            and now - self.since < lim.retry_max_age
        ):
            return LinkEvent.FAILED
        return event

    outbox_mod.RetryRun.failure = failure  # type: ignore[method-assign]


def _dropped_counts_batches() -> None:
    """``PeerStatus.dropped`` counts dropped batches, not frames (a 4xx-refused batch of three
    frames adds 1)."""
    orig = outbox_mod.PeerOutbox.rejected

    def rejected(self: outbox_mod.PeerOutbox, batch: Any, status: int, detail: str) -> None:
        before = self.dropped
        orig(self, batch, status, detail)
        if self.dropped > before:
            self.dropped = before + 1

    outbox_mod.PeerOutbox.rejected = rejected  # type: ignore[method-assign]


# -- HTTP server: order of checks, bounds, versions ---------------------------------------------


def _body_at_limit_refused() -> None:
    """The inter-node body limit is exclusive: a body of exactly 1 MiB gets 413."""
    orig_head = endpoint.EventsEndpoint.head
    orig_complete = endpoint.EventsEndpoint.complete

    def head(self: endpoint.EventsEndpoint, req: Request) -> Response | None:
        answer = orig_head(self, req)
        if answer is None and req.content_length == self.max_body:
            return too_large(self.max_body)
        return answer

    def complete(self: endpoint.EventsEndpoint, req: Request, body: bytes) -> Response:
        if len(body) >= self.max_body:
            return too_large(self.max_body)
        return orig_complete(self, req, body)

    endpoint.EventsEndpoint.head = head  # type: ignore[method-assign]
    endpoint.EventsEndpoint.complete = complete  # type: ignore[method-assign]


def _size_before_version() -> None:
    """The declared Content-Length is checked right after the method, before the contract
    version and the content type: an oversized request of another major gets 413, not 409
    (schema/README.md: 409, then 415, then 413)."""
    orig = endpoint.EventsEndpoint.head

    def head(self: endpoint.EventsEndpoint, req: Request) -> Response | None:
        answer = orig(self, req)
        if (
            answer is not None
            and answer.status in (409, 415, 400)
            and req.content_length is not None
            and req.content_length > self.max_body
        ):
            return too_large(self.max_body)
        return answer

    endpoint.EventsEndpoint.head = head  # type: ignore[method-assign]


def _lower_major_served() -> None:
    """Only a higher major version is refused; a request of a lower major (``0.9.0``) is
    served, and a peer's 409 naming a lower major is not taken as a refusal."""

    def served(self: ContractVersion) -> bool:
        return self.major <= OURS.major

    ContractVersion.served = served  # type: ignore[method-assign]


def _peer_only_method_before_params() -> None:
    """On the inter-node channel a ``nodes:update`` or ``manager:status`` with invalid params
    is answered -32601 (not a peer's method) before its params are judged (-32602; schema
    README: step 8 before 9)."""
    orig_peer = dispatch.Dispatcher.peer
    orig_frame = codec.decode_frame
    orig_decode = codec.decode
    inside = [False]

    def fix(item: Any) -> Any:
        if (
            inside[0]
            and isinstance(item, RpcError)
            and item.method in _PEER_ONLY_REFUSED
            and item.code != METHOD_NOT_FOUND
        ):
            reason = f"{item.method} is not accepted from peers"
            return dataclasses.replace(item, code=METHOD_NOT_FOUND, reason=reason, path=None)
        return item

    def decode_frame(raw: bytes) -> Any:
        item, compact = orig_frame(raw)
        return fix(item), compact

    def decode(payload: bytes, max_batch: int = codec.MAX_BATCH_FRAMES) -> codec.Decoded:
        decoded = orig_decode(payload, max_batch)
        decoded.items = [fix(i) for i in decoded.items]
        return decoded

    def peer(self: dispatch.Dispatcher, body: bytes) -> Any:
        inside[0] = True
        try:
            return orig_peer(self, body)
        finally:
            inside[0] = False

    codec.decode_frame = decode_frame
    codec.decode = decode
    dispatch.Dispatcher.peer = peer  # type: ignore[method-assign]


def _h1_responses_unversioned() -> None:
    """The HTTP/1.1 server's responses lack ``nvpair-contract-version`` (the HTTP/2 ones carry
    it)."""
    h1._VERSION_LINES = [line for line in h1._VERSION_LINES if not line.startswith(CONTRACT_HEADER)]


# -- broadcaster: client side, versions, peers that change --------------------------------------


def _h2_requests_unversioned() -> None:
    """Requests sent to peers over HTTP/2 lack ``nvpair-contract-version`` (the HTTP/1.1 client
    sends it)."""
    fields: tuple[tuple[bytes, bytes], ...] = versions.REQUEST_FIELDS
    unversioned = tuple(f for f in fields if f[0] != CONTRACT_HEADER)
    h2client.REQUEST_FIELDS = unversioned  # type: ignore[attr-defined,assignment]


def _response_versions_unheard() -> None:
    """``PeerStatus.contractVersion``/``softwareVersion`` come from peers' requests only; what a
    peer says in its responses to our broadcaster is not recorded."""

    def hear(self: Any, response: Any) -> None:
        self._heard = self.conn

    broadcaster._Link._hear = hear  # type: ignore[method-assign]


def _refusal_retried() -> None:
    """A 409 (peer speaks another major) is retried like a 5xx with backoff until the retries
    run out, instead of stopping, dropping the queue and probing with a snapshot."""
    orig = peerlink.judge

    def judge(status: int, headers: Any, body: bytes, frames: int, now: float) -> Any:
        answer = orig(status, headers, body, frames, now)
        if answer.verdict is peerlink.Verdict.REFUSED:
            return peerlink.Answer(peerlink.Verdict.RETRY, status, "HTTP 409")
        return answer

    outbox_mod.judge = judge  # type: ignore[attr-defined]


def _moved_peer_not_followed() -> None:
    """A ``nodes:update`` that moves a peer (same fingerprint, new address or port) is ignored:
    the link keeps dialling the old address."""

    def retarget(self: Any, peer: peers.Peer) -> None:
        self.wake()

    broadcaster._Link.retarget = retarget  # type: ignore[method-assign]


def _pins_read_at_update() -> None:
    """The broadcaster reads the pins when a ``nodes:update`` arrives, not per send: a peer
    unpinned since keeps getting events until the next ``nodes:update``."""
    orig_update = peers.PeerDirectory.update
    frozen: dict[int, frozenset[str]] = {}

    def update(self: peers.PeerDirectory, records: Iterable[Any]) -> None:
        orig_update(self, records)
        frozen[id(self)] = self._pins.current()

    def pinned(self: peers.PeerDirectory) -> frozenset[str]:
        return frozen.get(id(self), frozenset())

    def evaluate(self: peers.PeerDirectory) -> dict[str, peers.Peer]:
        own = self.own_fingerprint()
        if own is None:
            return {}
        return peers.select_peers(self._records, own, pinned(self))

    def is_peer(self: peers.PeerDirectory, peer: peers.Peer) -> bool:
        return peers.is_peer_of(peer.fingerprint, self.own_fingerprint(), pinned(self))

    peers.PeerDirectory.update = update  # type: ignore[method-assign]
    peers.PeerDirectory.evaluate = evaluate  # type: ignore[method-assign]
    peers.PeerDirectory.is_peer = is_peer  # type: ignore[method-assign]


def _snapshot_without_removals() -> None:
    """A snapshot to a peer that reconnects carries the newest events but not the removals, so
    a peer restarted empty never learns what was removed while it was away."""

    def of(cls: type[sync.Snapshot], originated: sync.Originated) -> sync.Snapshot:
        events, _removals = originated()
        return cls(events, [])

    sync.Snapshot.of = classmethod(of)  # type: ignore[method-assign, assignment]


# -- written after the first measurement (not blind: the vector lists had been read) -------------


def _pin_checked_per_connection() -> None:
    """The pin is checked on a connection's first request and remembered for the connection
    (as a check at accept time would): a member unpinned since is still served on a connection
    it kept open (spec: pins are re-read per request)."""
    from nvpair_wm.proto.h2 import connection as h2conn  # noqa: PLC0415

    seen: dict[int, set[str]] = {}

    def wrap(call: Callable[[Any, Request], Response | None], attr: str) -> Any:
        def head(self: Any, req: Request) -> Response | None:
            handler = getattr(self, attr)
            fp = req.peer_fingerprint
            cache: dict[str, bool] = getattr(handler, "_pinned", {})
            held = fp is not None and fp in seen.get(id(self), set())
            added = held and fp not in cache
            if added and fp is not None:
                cache[fp] = True
            try:
                answer = call(self, req)
            finally:
                if added and fp is not None:
                    cache.pop(fp, None)
            if fp is not None and (answer is None or answer.status != 403):
                seen.setdefault(id(self), set()).add(fp)
            return answer

        return head

    h1.H1Session._call_head = wrap(h1.H1Session._call_head, "handler")  # type: ignore[method-assign]
    h2conn.H2ServerSession._head = wrap(  # type: ignore[method-assign]
        h2conn.H2ServerSession._head, "_handler"
    )


def _empty_nodes_update_ignored() -> None:
    """A ``nodes:update`` with no records is ignored (taken for a broker glitch) instead of
    leaving no peers: the peers of the last non-empty one keep getting events."""
    orig = broadcaster.Broadcaster.update_nodes

    def update_nodes(self: broadcaster.Broadcaster, nodes: list[Any]) -> None:
        if nodes:
            orig(self, nodes)

    broadcaster.Broadcaster.update_nodes = update_nodes  # type: ignore[method-assign]


def _restart_removal_repeat_applied() -> None:
    """After a restart, the broker's re-sent removal (schema/README.md: it re-sends its
    removals of the last 10 minutes) is answered ``applied`` and sent to the peers again,
    instead of ``duplicate``."""
    reloaded: set[tuple[str, str]] = set()
    orig_load = dedup.Reloader.load

    def load(self: dedup.Reloader, records: Iterable[Any]) -> None:
        kept = list(records)
        for rec in kept:
            kind = self.kinds[rec[0]]
            if kind.local and kind.removal:
                reloaded.add((rec[2], rec[3]))
        orig_load(self, kept)

    def change(t: dedup.WorkloadTable, call: _Removing, outcome: Outcome) -> Outcome:
        okey = (call.origin, call.workload_id)
        if outcome is Outcome.DUPLICATE and call.local and okey in reloaded:
            reloaded.discard(okey)
            t.duplicates -= 1
            return Outcome.APPLIED
        return outcome

    dedup.Reloader.load = load  # type: ignore[method-assign]
    _after_remove(change)


def _partial_400_retried() -> None:
    """A peer's 400 that names the refused frames (``error.data.index``) is retried whole, like
    a 5xx: the frames it applied are sent again and the refused one until the link gives up
    (schema/README.md: on a 400, drop only the frames the errors name)."""
    orig = peerlink.judge

    def judge(status: int, headers: Any, body: bytes, frames: int, now: float) -> Any:
        answer = orig(status, headers, body, frames, now)
        if answer.verdict is peerlink.Verdict.PARTLY:
            return peerlink.Answer(peerlink.Verdict.RETRY, status, answer.detail)
        return answer

    outbox_mod.judge = judge  # type: ignore[attr-defined]


MODES: dict[str, Callable[[], None]] = {
    "batch-at-bound-refused": _batch_at_bound_refused,
    "oversize-resumes-mid-line": _oversize_resumes_mid_line,
    "depth-bound-65": _depth_bound_65,
    "id-bound-exclusive": _id_bound_exclusive,
    "blank-line-counted": _blank_line_counted,
    "unknown-method-before-id": _unknown_method_before_id,
    "tomb-forgets-earlier-runs": _tomb_forgets_earlier_runs,
    "bare-removal-covers-every-run": _bare_removal_covers_every_run,
    "peer-repeat-removal-forwarded": _peer_repeat_removal_forwarded,
    "peer-stale-forwarded": _peer_stale_forwarded,
    "restart-rereport-applied": _restart_rereport_applied,
    "removal-keeps-workload-count": _removal_keeps_workload_count,
    "stale-counted-as-duplicate": _stale_counted_as_duplicate,
    "give-up-one-late": _give_up_one_late,
    "dropped-counts-batches": _dropped_counts_batches,
    "body-at-limit-refused": _body_at_limit_refused,
    "size-before-version": _size_before_version,
    "lower-major-served": _lower_major_served,
    "peer-only-method-before-params": _peer_only_method_before_params,
    "h1-responses-unversioned": _h1_responses_unversioned,
    "h2-requests-unversioned": _h2_requests_unversioned,
    "response-versions-unheard": _response_versions_unheard,
    "refusal-retried": _refusal_retried,
    "moved-peer-not-followed": _moved_peer_not_followed,
    "pins-read-at-update": _pins_read_at_update,
    "snapshot-without-removals": _snapshot_without_removals,
    "pin-checked-per-connection": _pin_checked_per_connection,
    "empty-nodes-update-ignored": _empty_nodes_update_ignored,
    "restart-removal-repeat-applied": _restart_removal_repeat_applied,
    "partial-400-retried": _partial_400_retried,
}


def main() -> int:
    mode, args = sys.argv[1], sys.argv[2:]
    MODES[mode]()
    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
