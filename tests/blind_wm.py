"""One-bug nvpair-wms written blind: from the contract and the daemon's code, not from the kit.

``python tests/blind_wm.py MODE [nvpair-wm flags...]``, like ``tests/unseen_wm.py``: a real
nvpair-wm with one function replaced or wrapped, each a mistake a team writing the daemon in Go or
TypeScript could plausibly make. They were written before the kit's vectors and model were read,
to measure from the outside what the kit catches; ``tests/test_kit_blind.py`` keeps the caught
ones as a regression.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from nvpair_wm import cli, codec, dedup, dispatch, endpoint, outbox, peerlink, versions
from nvpair_wm.codec import INVALID_PARAMS, KNOWN_METHODS, METHOD_NOT_FOUND, RpcError
from nvpair_wm.http.core import Response, error_response, too_large
from nvpair_wm.outcomes import Outcome

_UNSET: Any = msgspec.UNSET

# -- dedup -------------------------------------------------------------------------------------


def _runid_ignored() -> None:
    """The dedup key is (originatedFrom, id) without runId: a reused id of a new run whose seq
    is not above the old run's is answered ``stale`` (spec: runId is part of the dedup key)."""
    seen: dict[tuple[str, str], tuple[str, int]] = {}
    orig = dedup.WorkloadTable.observe

    def observe(self: dedup.WorkloadTable, info: Any, now: float, **kw: Any) -> Outcome:
        okey = (info.originatedFrom, info.id)
        held = seen.get(okey)
        if held is not None and held[0] != info.runId and info.seq <= held[1]:
            self.stale += 1
            return Outcome.STALE
        outcome = orig(self, info, now, **kw)
        if outcome is Outcome.APPLIED:
            seen[okey] = (info.runId, info.seq)
        return outcome

    dedup.WorkloadTable.observe = observe  # type: ignore[method-assign]


def _finished_forgotten() -> None:
    """A workload is forgotten once it reaches a terminal state (to save memory): a late or
    repeated event of it is applied and forwarded again instead of ``stale``/``duplicate``."""
    finished: set[tuple[str, str, str]] = set()
    orig = dedup.WorkloadTable.observe

    def observe(self: dedup.WorkloadTable, info: Any, now: float, **kw: Any) -> Outcome:
        key = (info.originatedFrom, info.runId, info.id)
        outcome = orig(self, info, now, **kw)
        if key in finished and outcome in (Outcome.STALE, Outcome.DUPLICATE):
            return Outcome.APPLIED
        if outcome is Outcome.APPLIED and info.state in ("completed", "failed", "cancelled"):
            finished.add(key)
        return outcome

    dedup.WorkloadTable.observe = observe  # type: ignore[method-assign]


def _unknown_removal_untombed() -> None:
    """A removal of a workload the table does not hold is passed on but leaves no tombstone,
    so its late event comes back (schema/README.md: nothing removed comes back for the TTL)."""
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
        wid = workload_id
        held = self._newest(origin, wid) is not None or (
            run_id is not None and self.newest_seq(run_id, wid) is not None
        )
        if not held and not self.covers(origin, wid, run_id or ""):
            return Outcome.APPLIED, dedup.Removal(origin, wid, run_id)
        return orig(self, origin, wid, run_id, now, local=local)

    dedup.WorkloadTable.remove = remove  # type: ignore[method-assign]


def _duplicate_answered_applied() -> None:
    """A redelivery is answered ``applied`` (idempotent success) instead of ``duplicate``."""
    orig = dispatch.Dispatcher._answer

    def _answer(self: dispatch.Dispatcher, item: Any, outcome: Outcome, answers: list[Any]) -> None:
        orig(self, item, Outcome.APPLIED if outcome is Outcome.DUPLICATE else outcome, answers)

    dispatch.Dispatcher._answer = _answer  # type: ignore[method-assign]


# -- local channel -----------------------------------------------------------------------------


def _set_emit(
    emit: Callable[[codec.LineBuffer, bytes, list[bytes | codec.TooLarge]], None],
) -> None:
    codec.LineBuffer._emit = emit  # type: ignore[method-assign,assignment]


def _limit_exclusive() -> None:
    """A line of exactly 1 MiB is refused -32000 (``>=`` where the limit is inclusive)."""

    def _emit(self: codec.LineBuffer, line: bytes, out: list[bytes | codec.TooLarge]) -> None:
        if len(line) >= self.max_frame:
            out.append(codec.TOO_LARGE)
            return
        line = line.removesuffix(b"\r")
        if line and not line.isspace():
            out.append(line)

    _set_emit(_emit)


def _cr_not_counted() -> None:
    """The CR of a CRLF is dropped before the length check, so a line of 1 MiB plus CR is
    accepted (schema/README.md: the limit is counted with any CR)."""

    def _emit(self: codec.LineBuffer, line: bytes, out: list[bytes | codec.TooLarge]) -> None:
        line = line.removesuffix(b"\r")
        if len(line) > self.max_frame:
            out.append(codec.TOO_LARGE)
            return
        if line and not line.isspace():
            out.append(line)

    _set_emit(_emit)


def _blank_answered() -> None:
    """A line of only whitespace is parsed and answered -32700 (only empty lines skipped)."""

    def _emit(self: codec.LineBuffer, line: bytes, out: list[bytes | codec.TooLarge]) -> None:
        if len(line) > self.max_frame:
            out.append(codec.TOO_LARGE)
            return
        line = line.removesuffix(b"\r")
        if line:
            out.append(line)

    _set_emit(_emit)


def _oversize_stops_reading() -> None:
    """After a line over the limit the channel reads nothing more (Go's bufio.Scanner stops at
    ErrTooLong): the stream does not resynchronise at the next newline."""
    stopped: set[int] = set()
    orig = codec.LineBuffer.feed

    def feed(self: codec.LineBuffer, data: bytes) -> list[Any]:
        if id(self) in stopped:
            return []
        out = orig(self, data)
        for i, item in enumerate(out):
            if isinstance(item, codec.TooLarge):
                stopped.add(id(self))
                return out[: i + 1]
        return out

    codec.LineBuffer.feed = feed  # type: ignore[method-assign]


def _null_id_is_notification() -> None:
    """``"id": null`` is taken as no id (a nil pointer): such a request gets no answer."""
    orig = dispatch.Dispatcher._answer

    def _answer(self: dispatch.Dispatcher, item: Any, outcome: Outcome, answers: list[Any]) -> None:
        if getattr(item, "id", _UNSET) is None:
            return
        orig(self, item, outcome, answers)

    dispatch.Dispatcher._answer = _answer  # type: ignore[method-assign]


def _notification_batch_empty_array() -> None:
    """A batch of notifications only is answered ``[]`` instead of with no line at all."""
    orig = dispatch.Dispatcher.local

    def local(self: dispatch.Dispatcher, payload: bytes) -> dispatch.LocalResult:
        result = orig(self, payload)
        if not result.replies and payload.lstrip()[:1] == b"[":
            result.replies.append(b"[]\n")
        return result

    dispatch.Dispatcher.local = local  # type: ignore[method-assign]


def _wrap_classify(after: Callable[[Any, Any], Any]) -> None:
    orig = codec._classify

    def _classify(obj: Any) -> Any:
        return after(obj, orig(obj))

    codec._classify = _classify


def _method_before_jsonrpc() -> None:
    """The method is looked up before ``jsonrpc`` is checked: an unknown method with a wrong
    ``jsonrpc`` gets -32601 instead of -32600 (schema/README.md, "Which code wins")."""

    def after(obj: Any, item: Any) -> Any:
        if (
            isinstance(item, RpcError)
            and item.code == codec.INVALID_REQUEST
            and isinstance(obj, dict)
            and isinstance(obj.get("method"), str)
            and obj["method"] not in KNOWN_METHODS
        ):
            m = obj["method"]
            return RpcError(METHOD_NOT_FOUND, f"unknown method {m!r}", item.id, item.respond)
        return item

    _wrap_classify(after)


def _params_error_without_id() -> None:
    """An invalid-params error is answered with ``id`` null instead of the request's id."""

    def after(obj: Any, item: Any) -> Any:
        if isinstance(item, RpcError) and item.code == INVALID_PARAMS:
            return RpcError(item.code, item.reason, None, item.respond, item.path, item.method)
        return item

    _wrap_classify(after)


def _invalid_notification_answered() -> None:
    """An invalid notification is answered with an error (id null) instead of not at all."""

    def after(obj: Any, item: Any) -> Any:
        if (
            isinstance(item, RpcError)
            and not item.respond
            and isinstance(obj, dict)
            and "method" in obj
        ):
            return RpcError(item.code, item.reason, None, True, item.path, item.method)
        return item

    _wrap_classify(after)


def _batch_index_from_one() -> None:
    """``error.data.index`` counts a batch's elements from 1 instead of 0."""
    orig = RpcError.response

    def response(self: RpcError, index: int | None = None) -> Any:
        return orig(self, None if index is None else index + 1)

    RpcError.response = response  # type: ignore[method-assign]


def _invalid_not_counted() -> None:
    """An invalid notification is logged but not counted in ``counters.invalid``."""
    orig = dispatch.Dispatcher._refused

    def _refused(self: dispatch.Dispatcher, err: RpcError, ch: Any, channel: str) -> None:
        if not err.respond:
            return
        orig(self, err, ch, channel)

    dispatch.Dispatcher._refused = _refused  # type: ignore[method-assign]


def _ipc_last_line_dropped() -> None:
    """Over ``--ipc``, a last line without LF when the broker closes the socket is dropped
    (only the stdio reader flushes it; schema/README.md: the same rules both ways)."""
    if "--ipc" not in sys.argv:
        return
    codec.LineBuffer.end = lambda self: []  # type: ignore[method-assign]


# -- the inter-node endpoint -------------------------------------------------------------------


def _reordered_head(order: tuple[str, ...]) -> None:
    """Replace ``EventsEndpoint.head`` by the same checks in ``order``."""

    def head(self: endpoint.EventsEndpoint, req: Any) -> Response | None:
        fp = req.peer_fingerprint
        fields = dict(reversed(req.headers))

        def pin() -> Response | None:
            if fp is None or not self._is_pinned(fp):
                return error_response(403, "client certificate is not pinned")
            return None

        def path() -> Response | None:
            return error_response(404, "not found") if req.path != self.path else None

        def method() -> Response | None:
            if req.method != "POST":
                return error_response(405, "method not allowed", [(b"allow", b"POST")])
            return None

        def version() -> Response | None:
            contract = fields.get(versions.CONTRACT_HEADER)
            if fp is not None:
                self.versions.heard(fp, contract, fields.get(b"user-agent"))
            return None if contract is None else endpoint._refuse_version(contract)

        def ctype() -> Response | None:
            if not endpoint.is_json_content_type(fields.get(b"content-type")):
                return error_response(415, "content-type must be application/json")
            return None

        def size() -> Response | None:
            if req.content_length is not None and req.content_length > self.max_body:
                return too_large(self.max_body)
            return None

        def busy() -> Response | None:
            return self._busy() if self.sink.full() else None

        checks = {"pin": pin, "path": path, "method": method, "version": version}
        checks |= {"ctype": ctype, "size": size, "busy": busy}
        for name in order:
            answer = checks[name]()
            if answer is not None:
                return answer
        return None

    endpoint.EventsEndpoint.head = head  # type: ignore[method-assign]


def _415_before_409() -> None:
    """Content-Type is checked before the contract version: another major's request with a
    wrong Content-Type gets 415 instead of 409."""
    _reordered_head(("pin", "path", "method", "ctype", "version", "size", "busy"))


def _404_before_403() -> None:
    """The path is routed before the pin check: an unpinned caller on another path gets 404
    instead of 403 (schema/README.md: 403 is checked first, before the path)."""
    _reordered_head(("path", "pin", "method", "version", "ctype", "size", "busy"))


def _charset_refused() -> None:
    """Content-Type is compared as a whole string: ``application/json; charset=utf-8`` is 415."""
    endpoint.is_json_content_type = lambda value: value == b"application/json"


def _wrap_peer(after: Callable[[dispatch.PeerResult], dispatch.PeerResult]) -> None:
    orig = dispatch.Dispatcher.peer

    def peer(self: dispatch.Dispatcher, body: bytes) -> dispatch.PeerResult:
        return after(orig(self, body))

    dispatch.Dispatcher.peer = peer  # type: ignore[method-assign]


def _400_applies_nothing() -> None:
    """A body with one invalid frame applies none of its frames (all or nothing), where the
    contract says the valid frames of a 400 body were applied."""

    def after(result: dispatch.PeerResult) -> dispatch.PeerResult:
        if result.status == 400:
            return dispatch.PeerResult(400, result.body, [], [])
        return result

    _wrap_peer(after)


def _202_as_200() -> None:
    """A body of notifications only is answered 200 with no body instead of 202."""

    def after(result: dispatch.PeerResult) -> dispatch.PeerResult:
        if result.status == 202:
            return dispatch.PeerResult(200, None, result.to_broker, result.forwarded)
        return result

    _wrap_peer(after)


def _prerelease_refused() -> None:
    """A contract version with a pre-release or build suffix (``1.2.0-rc.1``) is answered 400
    as malformed (schema/README.md: such a suffix is allowed)."""
    versions._SEMVER = re.compile(rb"(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})")  # type: ignore[misc]


def _minor_skew_refused() -> None:
    """A request of another minor or patch version of the same major is refused 409 (the
    version compared as a whole)."""
    versions.ContractVersion.served = lambda self: self.text == versions.OURS.text  # type: ignore[method-assign]


def _retry_after_millis_sent() -> None:
    """The 503 of a full broker queue says ``Retry-After: 1000`` (milliseconds, not seconds)."""

    def _busy() -> Response:
        return error_response(503, "queue is full", [(b"retry-after", b"1000")])

    endpoint.EventsEndpoint._busy = staticmethod(_busy)  # type: ignore[method-assign]


def _pin_checked_once() -> None:
    """A caller's pin is checked once and remembered: a member unpinned later is still served
    (spec: pins are re-read per request)."""
    remembered: dict[str, bool] = {}
    orig = endpoint.EventsEndpoint._is_pinned

    def _is_pinned(self: endpoint.EventsEndpoint, fp: str) -> bool:
        if fp not in remembered:
            remembered[fp] = orig(self, fp)
        return remembered[fp]

    endpoint.EventsEndpoint._is_pinned = _is_pinned  # type: ignore[method-assign]


# -- relay to peers ----------------------------------------------------------------------------


def _null_requester_dropped() -> None:
    """``requesterId: null`` is relayed to peers as absent (a pointer with ``omitempty``)."""
    orig = dispatch._outbound

    def _outbound(info: Any, encoded: bytes) -> Any:
        if info.requesterId is None:
            frame = msgspec.json.decode(encoded)
            del frame["params"]["workloadInfo"]["requesterId"]
            encoded = msgspec.json.encode(frame)
        return orig(info, encoded)

    dispatch._outbound = _outbound


def _removal_run_unresolved() -> None:
    """A removal is passed on with only the runId its sender named: without one it goes out
    without runId, not narrowed to the newest run seen."""
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
        outcome, _removal = orig(self, origin, workload_id, run_id, now, local=local)
        return outcome, dedup.Removal(origin, workload_id, run_id)

    dedup.WorkloadTable.remove = remove  # type: ignore[method-assign]


def _413_drops_batch() -> None:
    """A peer's 413 drops the batch instead of retrying it in smaller batches."""

    def too_large(self: outbox.PeerOutbox, batch: outbox.Batch) -> bool:
        self.rejected(batch, 413, "batch too large")
        return False

    outbox.PeerOutbox.too_large = too_large  # type: ignore[method-assign]


def _retry_after_read_as_millis() -> None:
    """A peer's ``Retry-After`` is read as milliseconds, so the broadcaster retries at once."""
    orig = peerlink.retry_after

    def retry_after(value: bytes | None, now: float) -> float | None:
        seconds = orig(value, now)
        return None if seconds is None else seconds / 1000

    peerlink.retry_after = retry_after


def _user_agent_unparsed() -> None:
    """A peer's ``user-agent`` is shown whole as its software version (not parsed)."""

    def software_of(value: bytes | None) -> str | None:
        return None if value is None else value.decode("latin-1")

    versions.software_of = software_of


# -- snapshots and restarts --------------------------------------------------------------------


def _snapshot_once() -> None:
    """A peer gets a snapshot on its first connection only, not when it comes back after being
    down or restarted empty."""
    orig = outbox.PeerOutbox._start_snapshot

    def _start_snapshot(self: outbox.PeerOutbox) -> None:
        if self.snapshots:
            self._sync_now = self._sync_when_idle = False
            self.snapshot = None
            return
        orig(self)

    outbox.PeerOutbox._start_snapshot = _start_snapshot  # type: ignore[method-assign]


def _journal_without_tombstones() -> None:
    """A restart reloads the journal's events but not its removals, so a peer's snapshot
    brings a removed workload back to the broker."""
    orig = dedup.Reloader._other

    def _other(self: dedup.Reloader, rec: Any) -> None:
        if self.kinds[rec[0]].removal:
            return
        orig(self, rec)

    dedup.Reloader._other = _other  # type: ignore[method-assign]


def _journal_local_only() -> None:
    """A restart reloads only what this node's broker reported, not what peers' events were
    forwarded, so an older seq from a peer reaches the broker after the restart."""
    orig = dedup.Reloader.load

    def load(self: dedup.Reloader, records: Iterable[Any]) -> None:
        kinds = self.kinds
        orig(self, (r for r in records if kinds[r[0]].local or kinds[r[0]].removal))

    dedup.Reloader.load = load  # type: ignore[method-assign]


MODES: dict[str, Callable[[], None]] = {
    "runid-ignored": _runid_ignored,
    "finished-forgotten": _finished_forgotten,
    "unknown-removal-untombed": _unknown_removal_untombed,
    "duplicate-answered-applied": _duplicate_answered_applied,
    "limit-exclusive": _limit_exclusive,
    "cr-not-counted": _cr_not_counted,
    "blank-answered": _blank_answered,
    "oversize-stops-reading": _oversize_stops_reading,
    "null-id-notification": _null_id_is_notification,
    "notification-batch-empty-array": _notification_batch_empty_array,
    "method-before-jsonrpc": _method_before_jsonrpc,
    "params-error-without-id": _params_error_without_id,
    "invalid-notification-answered": _invalid_notification_answered,
    "batch-index-from-one": _batch_index_from_one,
    "invalid-not-counted": _invalid_not_counted,
    "ipc-last-line-dropped": _ipc_last_line_dropped,
    "415-before-409": _415_before_409,
    "404-before-403": _404_before_403,
    "charset-refused": _charset_refused,
    "400-applies-nothing": _400_applies_nothing,
    "202-as-200": _202_as_200,
    "prerelease-refused": _prerelease_refused,
    "minor-skew-refused": _minor_skew_refused,
    "retry-after-millis-sent": _retry_after_millis_sent,
    "pin-checked-once": _pin_checked_once,
    "null-requester-dropped": _null_requester_dropped,
    "removal-run-unresolved": _removal_run_unresolved,
    "413-drops-batch": _413_drops_batch,
    "retry-after-read-as-millis": _retry_after_read_as_millis,
    "user-agent-unparsed": _user_agent_unparsed,
    "snapshot-once": _snapshot_once,
    "journal-without-tombstones": _journal_without_tombstones,
    "journal-local-only": _journal_local_only,
}


def main() -> int:
    mode, args = sys.argv[1], sys.argv[2:]
    MODES[mode]()
    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
