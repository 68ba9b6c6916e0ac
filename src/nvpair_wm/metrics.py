"""Prometheus metrics (``--metrics ADDR:PORT``): what ``manager:status`` reports, for operators.

Opt-in. Off, nothing of this module is imported by the daemon and the hot path pays nothing.
On, the hot path pays almost nothing either:

* :class:`StatusCollector` reads the counters of ``manager:status`` (the same objects, the same
  call) **at scrape time**: no counter is kept twice, none is updated per frame for Prometheus.
* Two histograms are observed as things happen, because a latency cannot be read afterwards:
  ``nvpair_wm_peer_request_duration_seconds`` (the inter-node endpoint: request head → response,
  by wrapping the endpoint, see :class:`TimedHandler`) and ``nvpair_wm_delivery_seconds``
  (broker-to-peer delivery: a local event put in the peers' queues → a peer's 2xx, see
  :class:`DeliveryClock`, the broadcaster's ``DeliveryObserver``).

``nvpair_wm.node`` builds :class:`Metrics` and wires both in as it builds the server and the
broadcaster; this module knows neither.

The endpoint is plain HTTP/1.1 on the asyncio loop (GET ``/metrics``; one request per
connection): the collector then reads the node's state on the thread that changes it, with no
locks and no torn reads, which prometheus_client's ``start_http_server`` thread would not give.
It binds loopback unless an address is given; a scrape is bounded in size and time.

The same listener answers the probes of a supervisor or an orchestrator: ``GET /healthz`` is
200 whenever the loop answers (liveness), ``GET /readyz`` 200 once the node relays and 503
otherwise, each with a short JSON body (``{"ready": false, "reasons": [...]}``); the node says
what ready means (``Node.readiness``). ``GET /status`` is the node's own account for an operator
(``nvpair-wm status``): the manager:status result as a ``NodeStatus`` (node-status.schema.json).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

import h11
import msgspec
from msgspec import UnsetType
from nvpair_wm_schema.manager_status_schema import ConfigStatus, JournalStatus, StatusResult
from nvpair_wm_schema.node_status_schema import NodeStatus
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from nvpair_wm.config import METRICS_DEFAULT_HOST as DEFAULT_HOST
from nvpair_wm.config import metrics_address as parse_address
from nvpair_wm.events import Outbound
from nvpair_wm.http.core import Handler, Request, Response
from nvpair_wm.outcomes import COUNTED
from nvpair_wm.versions import CONTRACT_VERSION

__all__ = [
    "DEFAULT_HOST",
    "DeliveryClock",
    "Metrics",
    "MetricsLimits",
    "StatusCollector",
    "TimedHandler",
    "parse_address",
]

log = logging.getLogger(__name__)

PATH: Final = "/metrics"
#: Probes for a supervisor or an orchestrator: the loop answers (liveness); the node relays
#: (readiness: ready sent, listener up, identity and journal as configured).
HEALTH_PATH: Final = "/healthz"
READY_PATH: Final = "/readyz"
#: The node's own account, for ``nvpair-wm status`` (a NodeStatus).
STATUS_PATH: Final = "/status"
NOT_FOUND: Final = b"not found: /metrics, /healthz, /readyz and /status are served here\n"
_JSON: Final = "application/json"
#: The ChannelCounters fields of nvpair_wm_frame_outcomes: one per outcome, then invalid.
_OUTCOME_COUNTERS: Final = (*COUNTED.values(), "invalid")

# Inter-node requests are served in well under a millisecond when healthy; a slow broker queue
# or a big batch shows up in the upper buckets.
REQUEST_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# Delivery spans queueing, batching and retries with backoff (up to the retry give-up, 30 s).
DELIVERY_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)


@dataclass(frozen=True, slots=True)
class MetricsLimits:
    """Bounds of the metrics endpoint and of the latency bookkeeping."""

    max_request_head: int = 8 * 1024  # bytes of request line + headers
    request_timeout: float = 5.0  # seconds to receive a request head
    pending_requests: int = 4096  # inter-node requests timed at once (abandoned ones age out)
    pending_deliveries: int = 65_536  # events waiting for a peer's 2xx (oldest forgotten first)


_BAD_REQUEST: Final = (
    b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 12\r\nconnection: close\r\n\r\nbad request\n"
)


class StatusCollector(Collector):
    """The counters of ``manager:status``, read when Prometheus scrapes."""

    def __init__(self, status: Callable[[], StatusResult]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        s = self._status()
        c = s.counters
        info = GaugeMetricFamily(
            "nvpair_wm_build_info",
            "Version of this node: package and contract.",
            labels=["version", "contract_version"],
        )
        info.add_metric([s.version, CONTRACT_VERSION], 1)
        yield info
        yield GaugeMetricFamily(
            "nvpair_wm_has_identity",
            "1 when the node has a cluster identity (node.crt/node.key), else 0.",
            value=int(s.hasIdentity),
        )
        frames = CounterMetricFamily(
            "nvpair_wm_frames",
            "Frames received (direction=in, each batch element counts) and sent (direction=out: "
            "lines written to the broker; frames relayed toward the peers, once however many "
            "peers) by channel (broker, peer).",
            labels=["channel", "direction"],
        )
        outcomes = CounterMetricFamily(
            "nvpair_wm_frame_outcomes",
            "What became of the frames received, by channel: events and removals applied, "
            "duplicate, stale or suppressed (removed workload); invalid frames.",
            labels=["channel", "outcome"],
        )
        by_channel = c.byChannel
        if not isinstance(by_channel, UnsetType):
            for channel, ch in (("broker", by_channel.broker), ("peer", by_channel.peer)):
                frames.add_metric([channel, "in"], ch.framesIn)
                frames.add_metric([channel, "out"], ch.framesOut)
                for counted in _OUTCOME_COUNTERS:  # nvpair_wm.outcomes' table, and invalid
                    outcomes.add_metric([channel, counted], getattr(ch, counted))
        yield frames
        yield outcomes
        for name, value, text in (
            ("invalid", c.invalid, "Frames refused with a JSON-RPC error or dropped as invalid."),
            ("duplicates", c.duplicates, "Events collapsed as duplicates."),
            ("stale", c.stale, "Events older than the newest seen for their workload."),
            ("suppressed", c.suppressed, "Events for removed (tombstoned) workloads."),
            ("evicted", c.evicted, "Table entries evicted by the hard caps before their TTL."),
        ):
            yield CounterMetricFamily(f"nvpair_wm_{name}", text, value=value)
        for name, value, text in (
            ("workloads", c.workloads, "Workloads in the deduplication table."),
            ("tombstones", c.tombstones, "Removal tombstones in the deduplication table."),
            ("broker_queue_frames", c.brokerQueue, "Frames waiting to be written to the broker."),
        ):
            yield GaugeMetricFamily(f"nvpair_wm_{name}", text, value=value)
        yield from _journal_metrics(s)
        yield from _config_metrics(s)
        yield from _peer_metrics(s)
        yield from _fast_path_metrics(s)


def _fast_path_metrics(s: StatusResult) -> Iterator[Metric]:
    """``StatusResult.fastPaths``: 1 for each fast path on, 0 for each off (its public path)."""
    paths = s.fastPaths
    if isinstance(paths, UnsetType):
        return
    gauge = GaugeMetricFamily(
        "nvpair_wm_fast_path",
        "1 when the fast path through another library's internals is on, 0 when the public "
        "(slower) path is used; checked once at start (nvpair_wm.internals).",
        labels=["path"],
    )
    for name in paths.__struct_fields__:
        gauge.add_metric([name], int(getattr(paths, name)))
    yield gauge


def _config_metrics(s: StatusResult) -> Iterator[Metric]:
    """``StatusResult.config``: the running configuration's generation and when it loaded."""
    cfg = s.config
    if isinstance(cfg, UnsetType):
        return
    yield GaugeMetricFamily(
        "nvpair_wm_config_generation",
        "The running configuration: 1 at start, one more for each reload (SIGHUP) that applied "
        "a change.",
        value=cfg.generation,
    )
    yield GaugeMetricFamily(
        "nvpair_wm_config_loaded_timestamp_seconds",
        "When the running configuration was loaded (Unix time).",
        value=cfg.loadedAt / 1000,
    )


def _journal_metrics(s: StatusResult) -> Iterator[Metric]:
    """``StatusResult.journal``: healthy or not (absent when the journal is off) and since when
    it fails."""
    journal = s.journal
    if isinstance(journal, UnsetType) or journal.state == "off":
        return
    yield GaugeMetricFamily(
        "nvpair_wm_journal_healthy",
        "1 while the journal keeps what this node originated; 0 while its writes fail (it "
        "retries, then rewrites the whole state).",
        value=int(journal.state == "healthy"),
    )
    if journal.failingSince is not None:
        yield GaugeMetricFamily(
            "nvpair_wm_journal_failing_since_timestamp_seconds",
            "When the journal started failing (Unix time; absent while healthy).",
            value=journal.failingSince / 1000,
        )


def _peer_metrics(s: StatusResult) -> Iterator[Metric]:
    labels = ["peer"]
    depth = GaugeMetricFamily(
        "nvpair_wm_peer_queue_frames", "Frames queued or in flight to the peer.", labels=labels
    )
    connected = GaugeMetricFamily(
        "nvpair_wm_peer_connected",
        "1 while a connection to the peer is open (protocol h2 or http/1.1), else 0.",
        labels=["peer", "protocol"],
    )
    last_error = GaugeMetricFamily(
        "nvpair_wm_peer_last_error_timestamp_seconds",
        "When the last error on the link to the peer happened (Unix time; absent: none yet).",
        labels=labels,
    )
    counters = {
        name: CounterMetricFamily(f"nvpair_wm_peer_{name}_frames", text, labels=labels)
        for name, text in (
            ("sent", "Frames the peer accepted."),
            ("retried", "Frames sent again after a failure."),
            ("coalesced", "Queued frames replaced by a newer event of the same workload."),
            ("dropped", "Frames given up (queue full, retries exhausted, refused by the peer)."),
        )
    }
    info = GaugeMetricFamily(
        "nvpair_wm_peer_info",
        "Always 1: the versions the peer last said it speaks (contract) and runs (software), in "
        "its requests or responses; empty when it has not said.",
        labels=["peer", "contract_version", "software_version"],
    )
    for p in s.peers:
        peer = [p.nodeId]
        contract = p.contractVersion if isinstance(p.contractVersion, str) else ""
        software = p.softwareVersion if isinstance(p.softwareVersion, str) else ""
        info.add_metric([p.nodeId, contract, software], 1)
        depth.add_metric(peer, p.queueDepth)
        connected.add_metric([p.nodeId, p.protocol or ""], int(p.connected))
        if isinstance(p.lastErrorAt, int):
            last_error.add_metric(peer, p.lastErrorAt / 1000)
        counters["sent"].add_metric(peer, p.sent)
        counters["retried"].add_metric(peer, p.retried)
        counters["coalesced"].add_metric(peer, p.coalesced)
        counters["dropped"].add_metric(peer, p.dropped)
    yield info
    yield depth
    yield connected
    yield last_error
    yield from counters.values()


def node_status(s: StatusResult) -> NodeStatus:
    """A manager:status result as ``GET /status`` serves it: every member, and the contract
    version this node speaks."""
    journal = s.journal
    if isinstance(journal, UnsetType):  # pragma: no cover - the node always sets it
        journal = JournalStatus(state="off", failingSince=None, lastError=None)
    config = s.config
    if isinstance(config, UnsetType):  # pragma: no cover - the node always sets it
        config = ConfigStatus(generation=1, loadedAt=0)
    return NodeStatus(
        version=s.version,
        contractVersion=CONTRACT_VERSION,
        hasIdentity=s.hasIdentity,
        fingerprint=s.fingerprint,
        port=s.port,
        peers=s.peers,
        counters=s.counters,
        journal=journal,
        config=config,
    )


class TimedHandler:
    """The inter-node endpoint with its request durations observed (head → response)."""

    def __init__(self, inner: Handler, histogram: Histogram, limits: MetricsLimits) -> None:
        self._inner = inner
        self._histogram = histogram
        self._limit = limits.pending_requests
        self._started: dict[int, float] = {}  # id(request) → when its head arrived
        self.max_body = inner.max_body

    def head(self, req: Request) -> Response | None:
        now = time.perf_counter()
        response = self._inner.head(req)
        if response is not None:
            self._observe(req, response, now)
            return response
        if len(self._started) >= self._limit:  # bodies that never came: forget the oldest
            del self._started[next(iter(self._started))]
        self._started[id(req)] = now
        return None

    def complete(self, req: Request, body: bytes) -> Response:
        response = self._inner.complete(req, body)
        started = self._started.pop(id(req), None)
        if started is not None:
            self._observe(req, response, started)
        return response

    def _observe(self, req: Request, response: Response, started: float) -> None:
        self._histogram.labels(req.protocol, str(response.status)).observe(
            time.perf_counter() - started
        )


class DeliveryClock:
    """Broker-to-peer delivery latency: from a local event's entry into the peers' queues to
    each peer's 2xx for it. Keyed by (workload, seq); an event coalesced away or dropped on
    some link is forgotten when its entry is the oldest of ``pending_deliveries``."""

    def __init__(self, histogram: Histogram, limits: MetricsLimits) -> None:
        self._histogram = histogram
        self._limit = limits.pending_deliveries
        # (key, seq) → [enqueued at, deliveries still expected]
        self._pending: dict[tuple[tuple[str, str, str], float], list[float]] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def enqueued(self, items: Iterable[Outbound], links: int) -> None:
        if not links:
            return
        now = time.monotonic()
        pending = self._pending
        for item in items:
            pending[item.key, item.seq] = [now, links]
        while len(pending) > self._limit:
            del pending[next(iter(pending))]

    def delivered(self, items: Iterable[Outbound]) -> None:
        now = time.monotonic()
        pending = self._pending
        for item in items:
            entry = pending.get((item.key, item.seq))
            if entry is None:
                continue
            self._histogram.observe(now - entry[0])
            entry[1] -= 1
            if entry[1] <= 0:
                del pending[item.key, item.seq]


class Metrics:
    """The registry, the two latency recorders and the HTTP endpoint of one node.

    ``status`` is ``manager:status``'s answer (read at scrape time); :meth:`timed` wraps the
    inter-node handler and :attr:`delivery` observes the broadcaster: both are wired in by
    ``nvpair_wm.node`` when it builds them. :meth:`start` binds and serves."""

    def __init__(
        self,
        address: tuple[str, int],
        status: Callable[[], StatusResult],
        limits: MetricsLimits = MetricsLimits(),
        *,
        readiness: Callable[[], list[str]] = list,
    ) -> None:
        self.host, self.requested_port = address
        self.limits = limits
        self._readiness = readiness  # why the node is not ready; empty: it is
        self._status = status
        self.registry = CollectorRegistry()
        self.registry.register(StatusCollector(status))
        ProcessCollector(registry=self.registry)
        requests = Histogram(
            "nvpair_wm_peer_request_duration_seconds",
            "Inter-node endpoint: from a request's head to its response, by protocol and status.",
            ["protocol", "code"],
            registry=self.registry,
            buckets=REQUEST_BUCKETS,
        )
        deliveries = Histogram(
            "nvpair_wm_delivery_seconds",
            "A local event: from entering the peers' queues to a peer's 2xx (once per peer).",
            registry=self.registry,
            buckets=DELIVERY_BUCKETS,
        )
        self._requests = requests
        self.delivery = DeliveryClock(deliveries, limits)
        self._server: asyncio.Server | None = None
        self.port = 0

    def timed(self, handler: Handler) -> TimedHandler:
        """``handler`` with its request durations observed (the server's handler)."""
        return TimedHandler(handler, self._requests, self.limits)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    async def start(self, address: tuple[str, int] | None = None) -> None:
        """Bind and serve, at ``address`` when given (a reload moves the listener); an OSError
        as the OS raised it: the node names the flag."""
        if address is not None:
            self.host, self.requested_port = address
        self._server = await asyncio.start_server(
            self._serve, self.host, self.requested_port, limit=self.limits.max_request_head
        )
        sock = self._server.sockets[0].getsockname()
        self.port = sock[1]
        host = f"[{sock[0]}]" if ":" in sock[0] else sock[0]
        log.info("metrics endpoint listening on http://%s:%d%s", host, self.port, PATH)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._server.wait_closed()
            self._server = None
            self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One request, one response, close. A malformed request gets 400; a slow one nothing."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_request_head)
        try:
            async with asyncio.timeout(self.limits.request_timeout):
                event = conn.next_event()
                while event is h11.NEED_DATA:
                    conn.receive_data(await reader.read(4096))
                    event = conn.next_event()
            if isinstance(event, h11.Request):
                status, ctype, body = self._answer(event)
                headers = [
                    ("content-type", ctype),
                    ("content-length", str(len(body))),
                    ("connection", "close"),
                ]
                if status == 405:
                    headers.append(("allow", "GET, HEAD"))
                reason = HTTPStatus(status).phrase.encode()
                out = conn.send(h11.Response(status_code=status, headers=headers, reason=reason))
                if event.method != b"HEAD":
                    out += conn.send(h11.Data(data=body)) or b""
                writer.write((out or b"") + (conn.send(h11.EndOfMessage()) or b""))
            await writer.drain()
        except h11.RemoteProtocolError:
            writer.write(_BAD_REQUEST)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    def _answer(self, request: h11.Request) -> tuple[int, str, bytes]:
        target = request.target.split(b"?", 1)[0].decode("ascii", "replace")
        if target not in (PATH, HEALTH_PATH, READY_PATH, STATUS_PATH):
            return 404, "text/plain; charset=utf-8", NOT_FOUND
        if request.method not in (b"GET", b"HEAD"):
            return 405, "text/plain; charset=utf-8", b"method not allowed\n"
        if target == HEALTH_PATH:  # answered at all: the event loop runs
            return 200, _JSON, b'{"status":"ok"}\n'
        if target == READY_PATH:
            reasons = self._readiness()
            body = {"ready": not reasons, **({"reasons": reasons} if reasons else {})}
            return 503 if reasons else 200, _JSON, json.dumps(body).encode() + b"\n"
        if target == STATUS_PATH:
            return 200, _JSON, msgspec.json.encode(node_status(self._status())) + b"\n"
        return 200, CONTENT_TYPE_LATEST, self.exposition()
