"""Where a decoded frame meets the workload table, per channel (sans-IO).

Two entry points, one per channel:

* :meth:`Dispatcher.local` takes a line from the broker. Lifecycle events and removals are
  recorded and returned as :class:`Outbound` items for the broadcaster; they are never echoed
  back to the broker. ``nodes:update`` and ``manager:status`` are answered here.
* :meth:`Dispatcher.peer` takes an HTTP body from a pinned peer. Accepted events are
  deduplicated, translated and returned as ``workloads:upsert`` / ``workloads:remove`` lines for
  the broker, with the HTTP status the body deserves.

The IO layers own sockets, queues and time; this module owns what the frames mean. What an
event's outcome entails (counted, forwarded, journaled, answered) is :mod:`nvpair_wm.outcomes`'
table.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from msgspec import UNSET
from nvpair_wm_schema.http_error_schema import HttpError
from nvpair_wm_schema.jsonrpc_schema import RequestId
from nvpair_wm_schema.manager_status_schema import (
    ChannelCounters,
    Counters,
    FramesByChannel,
    ManagerStatus,
    StatusResponse,
    StatusResult,
)
from nvpair_wm_schema.node_record_schema import NodeRecord
from nvpair_wm_schema.nodes_update_schema import NodesUpdate
from nvpair_wm_schema.workload_info_schema import WorkloadInfo
from nvpair_wm_schema.workloads_remove_schema import RemoveParams, WorkloadsRemove

from nvpair_wm import codec
from nvpair_wm.codec import METHOD_NOT_FOUND, RpcError
from nvpair_wm.dedup import Removal, WorkloadTable
from nvpair_wm.events import (
    LIFECYCLE_TYPES,
    STATE_OF,
    Forwarded,
    LifecycleFrame,
    Outbound,
    lifecycle_frame,
    translate,
    upsert_line,
    upsert_line_from,
)
from nvpair_wm.outcomes import COUNTED, FORWARDED, RULES, Outcome

log = logging.getLogger(__name__)

__all__ = [
    "Dispatcher",
    "LocalResult",
    "Outbound",
    "PeerResult",
    "outbound_event",
    "outbound_removal",
    "removal_frame",
]

# What peers may send; anything else decodes but is answered -32601 on this channel.
PEER_TYPES: Final = (*LIFECYCLE_TYPES, WorkloadsRemove)


@dataclass(slots=True)
class LocalResult:
    replies: list[bytes] = field(default_factory=list)
    outbound: list[Outbound] = field(default_factory=list)
    nodes: list[NodeRecord] | None = None


class PeerResult(msgspec.Struct):
    """What a peer's request comes to (a struct: made in C, once per request)."""

    status: int
    body: bytes | None
    to_broker: list[bytes]
    # What ``to_broker`` tells the broker, one item per upsert or removal (for the journal).
    forwarded: list[Forwarded] = msgspec.field(default_factory=list)


def removal_frame(removal: Removal) -> WorkloadsRemove:
    params = RemoveParams(workloadId=removal.workload_id, originatedFrom=removal.origin)
    if removal.run_id is not None:
        params.runId = removal.run_id
    return WorkloadsRemove(jsonrpc="2.0", params=params)


def outbound_event(frame: LifecycleFrame) -> Outbound:
    return _outbound(frame.params.workloadInfo, codec.encode(frame))


def _outbound(info: WorkloadInfo, encoded: bytes) -> Outbound:
    """``encoded``: the lifecycle frame that reports ``info`` (:func:`lifecycle_frame`)."""
    # Interned: the table keeps this key for every local workload, and origin and run repeat.
    key = (sys.intern(info.originatedFrom), info.id, sys.intern(info.runId))
    # The table keeps this body for replay: msgspec's buffer is over-allocated (about 1.5x),
    # so keep an exact-size copy.
    return Outbound(key, info.seq, bytes(memoryview(encoded)))


def outbound_removal(removal: Removal) -> Outbound:
    key = (removal.origin, removal.workload_id, removal.run_id or "")
    return Outbound(key, float("inf"), codec.encode(removal_frame(removal)))


def _not_from_peers(frame: Any) -> RpcError:
    method = str(frame.__struct_config__.tag)
    rid = getattr(frame, "id", msgspec.UNSET)
    reason = f"{method} is not accepted from peers"
    if rid is msgspec.UNSET:
        return RpcError(METHOD_NOT_FOUND, reason, None, False, None, method)
    return RpcError(METHOD_NOT_FOUND, reason, rid, True, None, method)


def _channel_counters() -> ChannelCounters:
    return ChannelCounters(
        framesIn=0, framesOut=0, applied=0, duplicate=0, stale=0, suppressed=0, invalid=0
    )


def new_counters() -> Counters:
    return Counters(
        framesIn=0,
        framesOut=0,
        invalid=0,
        duplicates=0,
        stale=0,
        suppressed=0,
        evicted=0,
        workloads=0,
        tombstones=0,
        brokerQueue=0,
        byChannel=FramesByChannel(broker=_channel_counters(), peer=_channel_counters()),
    )


class Dispatcher:
    def __init__(
        self,
        table: WorkloadTable,
        status: Callable[[], StatusResult],
        clock: Callable[[], float] = time.monotonic,
        *,
        max_batch: int = codec.MAX_BATCH_FRAMES,
    ) -> None:
        self.table = table
        self._status = status
        self._clock = clock
        self.max_batch = max_batch
        self.counters = new_counters()
        by_channel = self.counters.byChannel
        assert isinstance(by_channel, FramesByChannel)
        self.broker_counters = by_channel.broker  # counters of the local channel
        self.peer_counters = by_channel.peer  # counters of the inter-node channel

    # -- local channel (broker → manager) ---------------------------------------------------

    def local(self, payload: bytes) -> LocalResult:
        decoded = codec.decode(payload, self.max_batch)
        if decoded.too_many and isinstance(refusal := decoded.items[0], RpcError):
            log.warning("broker batch refused: %s", refusal.reason)
        result = LocalResult()
        replies: list[Any] = []
        now = self._clock()
        ch = self.broker_counters
        for index, item in enumerate(decoded.items):
            self.counters.framesIn += 1
            ch.framesIn += 1
            if isinstance(item, RpcError):
                self._refused(item, ch, "broker")
                if item.respond:
                    replies.append(item.response(index if decoded.batch else None))
                continue
            if isinstance(item, LIFECYCLE_TYPES):
                info = item.params.workloadInfo
                encoded = decoded.encoded
                if encoded is not None and item.id is UNSET and info.state == STATE_OF[type(item)]:
                    # A notification already in the state its method sets: the frame relayed is
                    # the one received, whose encoding the decoder made.
                    out = _outbound(info, encoded)
                else:
                    info = translate(item)
                    out = _outbound(info, codec.encode(lifecycle_frame(info)))
                outcome = self.table.observe(info, now, replay=out)
                if outcome in FORWARDED:
                    result.outbound.append(out)
                self._count(ch, outcome)
                self._answer(item, outcome, replies)
            elif isinstance(item, WorkloadsRemove):
                p = item.params
                run = p.runId if isinstance(p.runId, str) else None
                outcome, removal = self.table.remove(
                    p.originatedFrom, p.workloadId, run, now, local=True
                )
                if outcome in FORWARDED:
                    result.outbound.append(outbound_removal(removal))
                self._count(ch, outcome)
                self._answer(item, outcome, replies)
            elif isinstance(item, NodesUpdate):
                result.nodes = list(item.params.nodes)
                self._answer(item, Outcome.APPLIED, replies)
            elif isinstance(item, ManagerStatus):
                replies.append(StatusResponse(jsonrpc="2.0", id=item.id, result=self.status()))
        if replies:
            result.replies.append(codec.encode_line(replies if decoded.batch else replies[0]))
        self.peer_counters.framesOut += len(result.outbound)  # relayed toward the peers
        return result

    def local_lines(self, lines: list[bytes]) -> LocalResult:
        """Several lines from one read, each as :meth:`local` would take it, in order, into one
        result. None may read or change the set of peers (``manager:status``,
        ``nodes:update``): the caller hands those to :meth:`local` after publishing what came
        before. The usual line, one lifecycle notification, is handled here and its counters
        are added once per call; any other line goes through :meth:`local`."""
        replies: list[bytes] = []
        outbound: list[Outbound] = []
        result = LocalResult(replies, outbound)  # no default factories to call
        now = self._clock()
        decode, observe = codec.decode_whole, self.table.observe
        state_of = STATE_OF.get
        ch = self.broker_counters
        notifications = applied = 0  # usual lines handled here, and those applied
        for line in lines:
            whole = decode(line)
            if whole is not None:
                item, encoded = whole
                state = state_of(type(item))  # None: not a lifecycle frame
            if whole is None or state is None or item.id is not UNSET:
                one = self.local(line)  # decoded again: not the usual line
                if one.nodes is not None:  # the caller's to avoid; kept if it happens
                    result.nodes = one.nodes
                replies += one.replies
                outbound += one.outbound
                continue
            notifications += 1
            info = item.params.workloadInfo
            if info.state == state:
                out = _outbound(info, encoded)  # relayed as received (see local())
            else:
                info = translate(item)
                out = _outbound(info, codec.encode(lifecycle_frame(info)))
            outcome = observe(info, now, replay=out)
            if outcome in FORWARDED:
                outbound.append(out)
                applied += 1
            else:
                self._count(ch, outcome)
        if notifications:
            self.counters.framesIn += notifications
            ch.framesIn += notifications
            ch.applied += applied
            self.peer_counters.framesOut += applied  # relayed toward the peers
        return result

    def oversize(self, limit: int = codec.MAX_FRAME_BYTES) -> bytes:
        """The reply to a line over the frame limit (its id is unknowable: null)."""
        self.counters.framesIn += 1
        self.broker_counters.framesIn += 1
        err = codec.too_large(limit)
        self._refused(err, self.broker_counters, "broker")
        return codec.encode_line(err.response())

    def wrote_to_broker(self, lines: int) -> None:
        """Count lines written to the broker (the IO layer writes them)."""
        self.counters.framesOut += lines
        self.broker_counters.framesOut += lines

    # -- inter-node channel (peer → manager) ------------------------------------------------

    def peer(self, body: bytes) -> PeerResult:
        ch = self.peer_counters
        # What a peer sends one event at a time: one frame (Go peers, curl), or a batch of one
        # (nvpair-wm's broadcaster at a low rate). codec.decode_frame / decode_whole give the
        # item codec.decode would, without its envelope, with the compact encoding when the
        # strict pass read the frame whole.
        head = body[:1]
        item: Any = None
        compact: bytes | None = None
        if head == b"{":  # one frame: decoded once, whole or not
            item, compact = codec.decode_frame(body)
        elif head == b"[" and body[-1:] == b"]" and b"},{" not in body and self.max_batch:
            whole = codec.decode_whole(body[1:-1])  # None when it holds more than one frame
            if whole is not None:
                item, compact = whole
        if compact is not None and (lone := self._lone_notification(item, compact)) is not None:
            return lone
        if head == b"{":
            decoded = codec.Decoded([item], False, False, compact)
        else:  # a batch (of one: its answers are arrays, its errors have an index)
            decoded = codec.decode(body, self.max_batch)
        if decoded.too_many:
            # 413, as for a body over the byte limit: the retry rule for peers (schema/README.md)
            # is "on 413, send smaller batches"; a 400 would name no frame to drop.
            self.counters.framesIn += 1
            ch.framesIn += 1
            err = decoded.items[0]
            assert isinstance(err, RpcError)
            log.warning("peer batch refused with 413: %s", err.reason)
            self._refused(err, ch, "peer")
            return PeerResult(413, codec.encode(HttpError(error=err.reason)), [])
        now = self._clock()
        to_broker: list[bytes] = []
        forwarded: list[Forwarded] = []
        answers: list[Any] = []
        bad = False
        items: list[Any] = decoded.items
        self.counters.framesIn += len(items)
        ch.framesIn += len(items)
        table = self.table
        observe, state_of, append = table.observe, STATE_OF.get, to_broker.append
        # A single frame read whole: its compact encoding, reused for its upsert line.
        encoded = decoded.encoded
        applied = 0
        for index, item in enumerate(items):
            state = state_of(type(item))  # None: not a lifecycle frame
            if state is not None:
                info = item.params.workloadInfo
                if info.state != state:
                    info = translate(item)
                    encoded = None  # the frame relayed is not the one received
                outcome = observe(info, now)
                if outcome in FORWARDED:
                    line = None
                    if encoded is not None and item.id is UNSET:
                        line = upsert_line_from(type(item), encoded)
                    append(line or upsert_line(info))
                    forwarded.append(
                        Forwarded(info.originatedFrom, info.id, info.runId, info.seq, state)
                    )
                    applied += 1  # _count's usual case, added once
                else:
                    self._count(ch, outcome)
                self._answer(item, outcome, answers)
                continue
            if not isinstance(item, WorkloadsRemove):  # an error, or not a peer's frame
                err = item if isinstance(item, RpcError) else _not_from_peers(item)
                self._refused(err, ch, "peer")
                bad = True
                answers.append(err.response(index if decoded.batch else None))
                continue
            p = item.params
            run = p.runId if isinstance(p.runId, str) else None
            outcome, removal = table.remove(p.originatedFrom, p.workloadId, run, now)
            if outcome in FORWARDED:
                to_broker.append(codec.encode_line(removal_frame(removal)))
                forwarded.append(
                    Forwarded(
                        removal.origin, removal.workload_id, removal.run_id or "", 0, "removed"
                    )
                )
            self._count(ch, outcome)
            self._answer(item, outcome, answers)
        ch.applied += applied
        if not answers:
            return PeerResult(202, None, to_broker, forwarded)
        out = answers if decoded.batch else answers[0]
        return PeerResult(400 if bad else 200, codec.encode(out), to_broker, forwarded)

    def _lone_notification(self, item: Any, compact: bytes) -> PeerResult | None:
        """:meth:`peer`'s shortcut: the loop there for a body that is one lifecycle
        notification in its method's state, read whole (relayed unchanged, no answer), without
        its lists, enumerate and envelope. None for any other item: the loop then."""
        state = STATE_OF.get(type(item))
        if state is None or item.id is not UNSET:
            return None
        info = item.params.workloadInfo
        if info.state != state:
            return None
        ch = self.peer_counters
        self.counters.framesIn += 1
        ch.framesIn += 1
        outcome = self.table.observe(info, self._clock())
        if outcome not in FORWARDED:
            self._count(ch, outcome)
            return PeerResult(202, None, [])
        ch.applied += 1
        line = upsert_line_from(type(item), compact) or upsert_line(info)
        sent = Forwarded(info.originatedFrom, info.id, info.runId, info.seq, state)
        return PeerResult(202, None, [line], [sent])

    # -- shared -------------------------------------------------------------------------------

    def status(self) -> StatusResult:
        c = self.counters
        t = self.table
        c.duplicates, c.stale, c.suppressed, c.evicted = (
            t.duplicates,
            t.stale,
            t.suppressed,
            t.evicted,
        )
        c.workloads, c.tombstones = len(t), t.tombstones
        return self._status()

    def _answer(self, item: Any, outcome: Outcome, answers: list[Any]) -> None:
        rid: RequestId | msgspec.UnsetType = getattr(item, "id", msgspec.UNSET)
        if rid is not msgspec.UNSET:
            answers.append(codec.event_response(rid, RULES[outcome].answered))

    @staticmethod
    def _count(ch: ChannelCounters, outcome: Outcome) -> None:
        """One frame of ``outcome`` on channel ``ch`` (the field :data:`~nvpair_wm.outcomes.RULES`
        names)."""
        name = COUNTED[outcome]
        setattr(ch, name, getattr(ch, name) + 1)

    def _refused(self, err: RpcError, ch: ChannelCounters, channel: str) -> None:
        self.counters.invalid += 1
        ch.invalid += 1
        if not err.respond:
            log.warning(
                "%s invalid notification from %s (%s %s): %s%s",
                "dropped" if channel == "broker" else "refused",
                channel,
                err.code,
                err.method or "?",
                err.reason,
                f" at {err.path}" if err.path else "",
            )
