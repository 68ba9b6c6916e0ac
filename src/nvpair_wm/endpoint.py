"""``POST /v1/workloads/events``: the inter-node endpoint, protocol-neutral (no IO).

Order of the checks, all before the body is read (``head``):

1. **403** the caller's certificate is not pinned (checked per request, so removing a member
   from ``trusted/`` refuses its next request read after the event loop saw the change, also on
   an open connection). This comes
   first so an unpinned caller learns nothing about paths or methods. Requests handled in one
   batch of the server's ready connections (:mod:`nvpair_wm.io.batch`: one ``epoll_wait``'s
   worth, or the HTTP/2 streams of one read) share the batch's first answer per caller, as the
   issue's "cached per event-loop tick" allows: they were all on their way when the batch
   began, and the next batch asks again. That saves a look per request where a look costs
   (without inotify, a ``stat`` of ``trusted/``; with it, the check is a comparison).
2. **404** any other path; **405** any other method (with ``Allow: POST``).
3. **409** an ``nvpair-contract-version`` of another major version (:mod:`nvpair_wm.versions`),
   with a body naming both versions; **400** a value that is not ``MAJOR.MINOR.PATCH``. No header
   is our own major. What the caller said of its versions is recorded here, for ``manager:status``.
4. **415** a Content-Type other than ``application/json`` (parameters are fine, a charset must be
   UTF-8).
5. **413** a declared Content-Length over 1 MiB (the adapters also stop a streamed body there).
6. **503** with ``Retry-After: 1`` when the queue toward the broker is full (backpressure).

Then ``complete`` hands the body to the dispatcher, which answers 202 / 200 / 400 and gives the
frames for the broker, which go into the :class:`BrokerSink` in arrival order, after what they
tell the broker was handed to ``on_forwarded`` (the node's journal: before the broker can read
it, see :mod:`nvpair_wm.journal`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from nvpair_wm.events import Forwarded
from nvpair_wm.http.core import (
    MIB,
    Request,
    Response,
    empty_response,
    error_response,
    json_response,
    too_large,
)
from nvpair_wm.io.batch import EndOfBatch, for_loop
from nvpair_wm.versions import (
    CONTRACT_HEADER,
    CONTRACT_VERSION,
    REFUSED_STATUS,
    ContractVersion,
    PeerVersions,
)

__all__ = [
    "EVENTS_PATH",
    "BrokerSink",
    "EventsEndpoint",
    "PeerDispatcher",
    "PeerResultLike",
    "PinCheck",
    "is_json_content_type",
]

log = logging.getLogger(__name__)

EVENTS_PATH = "/v1/workloads/events"


class BrokerSink(Protocol):
    """The queue toward the broker (local channel)."""

    def full(self) -> bool:
        """True when no more frames should be accepted (answer 503)."""
        ...

    def put(self, frames: list[bytes]) -> None:
        """Enqueue NDJSON lines for the broker, in order. Must not drop them."""
        ...


class PeerResultLike(Protocol):
    """``nvpair_wm.dispatch.PeerResult``."""

    @property
    def status(self) -> int: ...
    @property
    def body(self) -> bytes | None: ...
    @property
    def to_broker(self) -> list[bytes]: ...
    @property
    def forwarded(self) -> list[Forwarded]: ...


class PeerDispatcher(Protocol):
    """``nvpair_wm.dispatch.Dispatcher`` as the endpoint uses it."""

    def peer(self, body: bytes) -> PeerResultLike: ...


class PinCheck(Protocol):
    """``nvpair_wm.pins.PinSet``."""

    def is_pinned(self, fingerprint: str) -> bool: ...


_OURS = CONTRACT_VERSION.encode("ascii")


def _refuse_version(value: bytes) -> Response | None:
    """The answer to a request whose contract version is ``value``: None when it is served
    (our major), 409 naming both versions for another major, 400 for a malformed value."""
    try:
        theirs = ContractVersion.parse(value)
    except ValueError as exc:
        return error_response(400, str(exc))
    if theirs.served():
        return None
    log.debug("refused a request of contract %s (we speak %s)", theirs.text, CONTRACT_VERSION)
    body = {
        "error": f"contract version {theirs.text} is not served here: this node speaks "
        f"{CONTRACT_VERSION} (major {CONTRACT_VERSION.split('.')[0]} only)",
        "serverContractVersion": CONTRACT_VERSION,
        "requestContractVersion": theirs.text,
    }
    return json_response(REFUSED_STATUS, body)


#: The sessions only read a handler's responses: a bare one can be shared.
_BARE: dict[int, Response] = {202: empty_response(202)}


def is_json_content_type(value: bytes | None) -> bool:
    """``application/json`` with optional parameters; a charset, if any, must be UTF-8."""
    if value is None:
        return False
    if value == b"application/json":  # what every peer sends: no parsing
        return True
    media, *params = value.decode("latin-1").split(";")
    if media.strip().lower() != "application/json":
        return False
    for param in params:
        name, _, val = param.partition("=")
        if name.strip().lower() == "charset" and val.strip().strip('"').lower() not in (
            "utf-8",
            "utf8",
        ):
            return False
    return True


class EventsEndpoint:
    """The :class:`nvpair_wm.http.core.Handler` of the inter-node server."""

    def __init__(
        self,
        dispatcher: PeerDispatcher,
        pins: PinCheck,
        sink: BrokerSink,
        *,
        max_body: int = MIB,
        path: str = EVENTS_PATH,
        versions: PeerVersions | None = None,
        on_forwarded: Callable[[list[Forwarded]], None] | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.versions = versions or PeerVersions()
        # Told what a request forwards to the broker before the lines are queued (the journal).
        self.on_forwarded = on_forwarded
        self.pins = pins
        self.sink = sink
        self.max_body = max_body
        self.path = path
        self._batch: EndOfBatch | None = None
        self._pinned: dict[str, bool] = {}  # this batch's answers, per caller (see above)

    def head(self, req: Request) -> Response | None:
        fp = req.peer_fingerprint
        if fp is None or not (self._pinned.get(fp) or self._is_pinned(fp)):
            log.debug("refused unpinned caller %s (%s %s)", fp, req.method, req.path)
            return error_response(403, "client certificate is not pinned by this cluster")
        if req.path != self.path:
            return error_response(404, "not found")
        if req.method != "POST":
            return error_response(405, "method not allowed", [(b"allow", b"POST")])
        fields = dict(reversed(req.headers))  # the first of each field decides
        content_type = fields.get(b"content-type")
        contract = fields.get(CONTRACT_HEADER)
        self.versions.heard(fp, contract, fields.get(b"user-agent"))
        if contract is not None and contract != _OURS:
            refused = _refuse_version(contract)
            if refused is not None:
                return refused
        if content_type is None or (
            content_type != b"application/json" and not is_json_content_type(content_type)
        ):
            return error_response(415, "content-type must be application/json")
        if req.content_length is not None and req.content_length > self.max_body:
            return too_large(self.max_body)
        if self.sink.full():
            return self._busy()
        return None

    def complete(self, req: Request, body: bytes) -> Response:
        if len(body) > self.max_body:  # adapters stop earlier; this is a safety net
            return too_large(self.max_body)
        if self.sink.full():  # it may have filled up while the body was on its way
            return self._busy()
        result = self.dispatcher.peer(body)
        if result.to_broker:
            if self.on_forwarded is not None:
                self.on_forwarded(result.forwarded)
            self.sink.put(result.to_broker)
        if result.body is None:
            return _BARE.get(result.status) or empty_response(result.status)
        return Response(result.status, [(b"content-type", b"application/json")], result.body)

    def _is_pinned(self, fp: str) -> bool:
        """The pin check, held for the rest of the batch (``head`` looks in ``_pinned`` first;
        only a True is taken from there, a False is asked here again)."""
        answer = self._pinned.get(fp)
        if answer is not None:
            return answer
        answer = self.pins.is_pinned(fp)
        batch = self._batch or self._current_batch()
        if batch is not None and batch.active:  # inside the server's callback: hold it
            if not self._pinned:
                batch.defer(self._pinned.clear)
            self._pinned[fp] = answer
        return answer

    def _current_batch(self) -> EndOfBatch | None:
        """The batches of the loop that first ran this (asking the running loop costs a
        ``getpid`` per call). On another loop later its batch is never active: no caching."""
        batch = self._batch
        if batch is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # called outside an event loop (tests, tools): no batches
                return None
            batch = self._batch = for_loop(loop)
        return batch

    @staticmethod
    def _busy() -> Response:
        return error_response(503, "queue toward the broker is full", [(b"retry-after", b"1")])
