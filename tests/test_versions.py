"""Versions on the inter-node wire (issue: version skew): the header on every request and
response, another major refused before anything is applied, the sender's refusal handling, and
what ``manager:status`` shows of each peer's versions.

From the sans-IO pieces (parsing, the endpoint's decision, the outbox's state) to real curl on
both protocols against the real server, and real ``nvpair-wm`` processes: this tree's, and a
stand-in speaking another major (``tests/other_major_wm.py``).
"""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from nvpair_wm import __version__
from nvpair_wm.dedup import Removal, WorkloadTable
from nvpair_wm.dispatch import Dispatcher, outbound_event
from nvpair_wm.endpoint import EVENTS_PATH, EventsEndpoint
from nvpair_wm.events import Outbound, lifecycle_frame
from nvpair_wm.http.core import MIB, Request
from nvpair_wm.outbox import BroadcastLimits, PeerOutbox
from nvpair_wm.versions import (
    CONTRACT_VERSION,
    PACKAGE_VERSION,
    REFUSED_STATUS,
    ContractVersion,
    PeerVersions,
    software_of,
)
from tests.conftest import WAIT, RecordingSink, TLSCluster, WmServer
from tests.support.cluster import Cluster, event, is_upsert, workload
from tests.support.curl import CurlResult, base_args, parse
from tests.support.frames import event as frame_event
from tests.support.frames import info
from tests.support.frames import workload as frame_workload

ROOT = Path(__file__).resolve().parent.parent
OTHER_MAJOR = f"{int(CONTRACT_VERSION.split('.')[0]) + 1}.0.0"
STAND_IN = [sys.executable, str(ROOT / "tests" / "other_major_wm.py"), OTHER_MAJOR]
FP = "aa" * 32
GOOD = frame_event("workload:submitted")

# -- parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "major"),
    [(b"1.2.0", 1), (b"2.0.0", 2), (b" 1.10.3 ", 1), (b"1.2.0-rc.1", 1), (b"0.0.0+b7", 0)],
)
def test_contract_versions_parse(value: bytes, major: int) -> None:
    assert ContractVersion.parse(value).major == major


@pytest.mark.parametrize("value", [b"", b"1", b"1.2", b"v1.2.0", b"01.2.0", b"1.2.0.0", b"x" * 500])
def test_malformed_contract_versions_say_what_is_expected(value: bytes) -> None:
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR\.PATCH") as err:
        ContractVersion.parse(value)
    assert len(str(err.value)) < 200  # a long value is not repeated whole


@pytest.mark.parametrize(
    ("value", "software"),
    [
        (b"nvpair-wm/0.2.0", "0.2.0"),
        (b"nvpair-wm/1.0.0-rc1 extra", "1.0.0-rc1"),
        (b"nvpair-wm", "unknown"),  # 0.1.0 named no version
        (b"curl/8.5.0", None),
        (None, None),
        (b"", None),
    ],
)
def test_software_version_from_user_agent_or_server(
    value: bytes | None, software: str | None
) -> None:
    assert software_of(value) == software


def test_peer_versions_keep_the_newest_word_per_peer() -> None:
    seen = PeerVersions(max_peers=2)
    assert seen.get(FP).contract is None
    seen.heard(FP, b"1.1.0", b"nvpair-wm/0.1.9")
    seen.heard(FP, b"1.2.0", b"nvpair-wm/0.2.0")  # the peer restarted on a newer release
    assert (seen.get(FP).contract, seen.get(FP).software) == ("1.2.0", "0.2.0")
    seen.heard(FP, b"garbage", None)
    assert (seen.get(FP).contract, seen.get(FP).software) == (None, None)
    seen.heard("bb" * 32, None, None)
    seen.heard("cc" * 32, b"1.2.0", None)  # bounded: the oldest peer is forgotten
    assert seen.get(FP).contract is None and seen.get("cc" * 32).contract == "1.2.0"


# -- the endpoint's decision (sans-IO) ------------------------------------------------------------


class _Pins:
    def is_pinned(self, fingerprint: str) -> bool:
        return fingerprint == FP


def _endpoint(sink: RecordingSink) -> EventsEndpoint:
    dispatcher = Dispatcher(WorkloadTable(), lambda: None)  # type: ignore[arg-type,return-value]
    return EventsEndpoint(dispatcher, _Pins(), sink)


def _req(*headers: tuple[bytes, bytes], fp: str = FP) -> Request:
    fields = [(b"content-type", b"application/json"), *headers]
    return Request("POST", EVENTS_PATH, fields, fp, "h2", len(GOOD))


def _http_error_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((ROOT / "schema" / "http-error.schema.json").read_text())
    return schema


def test_other_major_is_refused_before_the_body_naming_both_versions() -> None:
    sink = RecordingSink()
    ep = _endpoint(sink)
    answer = ep.head(_req((b"nvpair-contract-version", OTHER_MAJOR.encode())))
    assert answer is not None and answer.status == REFUSED_STATUS == 409
    body = json.loads(answer.body)
    jsonschema.validate(body, _http_error_schema())
    assert body["serverContractVersion"] == CONTRACT_VERSION
    assert body["requestContractVersion"] == OTHER_MAJOR
    assert CONTRACT_VERSION in body["error"] and OTHER_MAJOR in body["error"]
    assert sink.drain() == []


@pytest.mark.parametrize(
    "value", [None, CONTRACT_VERSION.encode(), b"1.0.0", b"1.99.7", b"1.3.0-beta"]
)
def test_own_major_and_no_header_are_served(value: bytes | None) -> None:
    sink = RecordingSink()
    ep = _endpoint(sink)
    req = _req() if value is None else _req((b"nvpair-contract-version", value))
    assert ep.head(req) is None
    assert ep.complete(req, GOOD).status == 202
    assert len(sink.drain()) == 1


def test_malformed_version_is_400_and_unpinned_callers_learn_nothing() -> None:
    ep = _endpoint(RecordingSink())
    bad = ep.head(_req((b"nvpair-contract-version", b"two")))
    assert bad is not None and bad.status == 400
    assert "MAJOR.MINOR.PATCH" in json.loads(bad.body)["error"]
    stranger = ep.head(_req((b"nvpair-contract-version", b"9.0.0"), fp="bb" * 32))
    assert stranger is not None and stranger.status == 403  # the pin check comes first


def test_the_endpoint_records_what_callers_say() -> None:
    ep = _endpoint(RecordingSink())
    ep.head(_req((b"nvpair-contract-version", b"1.1.0"), (b"user-agent", b"nvpair-wm/0.1.5")))
    seen = ep.versions.get(FP)
    assert (seen.contract, seen.software) == ("1.1.0", "0.1.5")


# -- the sender's side (sans-IO outbox) -----------------------------------------------------------


class _Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def _ev(wid: str, seq: int = 1) -> Outbound:
    return outbound_event(lifecycle_frame(info(id=wid, seq=seq)))


def test_a_refused_link_stops_keeps_nothing_logs_once_and_probes_with_a_snapshot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()

    def table() -> tuple[list[Outbound], list[Removal]]:
        return [_ev("kept")], []  # what this node originated: a snapshot carries it

    limits = BroadcastLimits(version_probe_interval=30.0, max_queue_frames=5)
    box = PeerOutbox("peer-x", limits, table, clock=clock, rng=random.Random(1))
    box.push([_ev("1"), _ev("2")])
    batch = box.next_batch()
    assert batch is not None
    caplog.set_level(logging.INFO, logger="nvpair_wm.outbox")
    box.incompatible(batch, "2.0.0", CONTRACT_VERSION)
    assert box.refused_by == "2.0.0" and box.depth == 0 and box.dropped >= 2
    box.push([_ev(str(i)) for i in range(50)])  # bounded: nothing is kept while refused
    assert box.depth == 0 and box.next_batch() is None
    clock.now += 29.0
    assert box.next_batch() is None  # not before the probe interval
    clock.now += 1.5
    probe = box.next_batch()
    assert probe is not None and len(probe.snapshot) == 1  # the probe is a snapshot
    box.incompatible(probe, "2.0.0", CONTRACT_VERSION)  # refused again: no second warning
    clock.now += 31.0
    probe = box.next_batch()
    assert probe is not None
    box.delivered(probe)  # the peer takes our version now
    assert box.refused_by is None and not box.given_up
    warnings = [r for r in caplog.records if "speaks contract 2.0.0" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    assert CONTRACT_VERSION in warnings[0].getMessage()
    assert any("takes our contract version again" in r.getMessage() for r in caplog.records)
    status = box.status("x", "127.0.0.1", 1, True, "h2")
    assert status.lastError is not None and "409" in status.lastError


# -- real curl, both protocols: the header on every response -----------------------------------

PROTOCOLS = ["--http1.1", "--http2"]


def _curl(
    wm: WmServer,
    proto: str,
    tmp: Path,
    pair: Any,
    *extra: str,
    body: bytes | None = GOOD,
    path: str = EVENTS_PATH,
    ctype: str = "application/json",
) -> CurlResult:
    args = base_args(proto, WAIT, pair.cert, pair.key)
    if body is not None:
        data = tmp / "body"
        data.write_bytes(body)
        args += ["--data-binary", f"@{data}", "-H", f"Content-Type: {ctype}"]
    proc = subprocess.run(
        [*args, *extra, wm.url(path)], capture_output=True, timeout=WAIT * 2, check=False
    )
    assert proc.returncode == 0, proc.stderr.decode()
    [result] = parse(proc.stdout)
    assert result.http_version == ("2" if proto == "--http2" else "1.1")
    return result


@pytest.fixture(params=PROTOCOLS)
def proto(request: pytest.FixtureRequest) -> str:
    param: str = request.param
    return param


def _assert_versions(result: CurlResult) -> None:
    assert result.headers.get("nvpair-contract-version") == CONTRACT_VERSION, result.headers
    assert result.headers.get("server") == f"nvpair-wm/{PACKAGE_VERSION}", result.headers


def test_every_response_carries_the_versions(
    proto: str,
    start_wm_server: Callable[..., WmServer],
    tls_cluster: TLSCluster,
    tmp_path: Path,
) -> None:
    wm = start_wm_server()
    b = tls_cluster.pair("b")
    version = ("-H", f"nvpair-contract-version: {OTHER_MAJOR}")
    request = frame_event("workload:submitted", frame_workload(id="2"), id=7)
    fresh = frame_event("workload:submitted", frame_workload(id="3"))  # new: would be applied
    cases: list[tuple[int, CurlResult]] = [
        (202, _curl(wm, proto, tmp_path, b)),  # the bare answer (a cached block on h2)
        (200, _curl(wm, proto, tmp_path, b, body=request)),
        (400, _curl(wm, proto, tmp_path, b, body=b"[1]")),
        (403, _curl(wm, proto, tmp_path, tls_cluster.stranger)),
        (404, _curl(wm, proto, tmp_path, b, path="/elsewhere")),
        (405, _curl(wm, proto, tmp_path, b, "-X", "PUT", body=None)),
        (409, _curl(wm, proto, tmp_path, b, *version, body=fresh)),
        (413, _curl(wm, proto, tmp_path, b, body=b" " * (MIB + 1))),
        (415, _curl(wm, proto, tmp_path, b, ctype="text/plain")),
        # 431 is made by the session itself, not by the endpoint
        (431, _curl(wm, proto, tmp_path, b, "-H", "x-big: " + "y" * 17_000)),
    ]
    for status, result in cases:
        assert result.status == status, (status, result)
        _assert_versions(result)
    refused = json.loads(cases[6][1].body)
    assert refused["requestContractVersion"] == OTHER_MAJOR
    assert refused["serverContractVersion"] == CONTRACT_VERSION
    # Only the 202 and the 200 (one frame each) reached the broker: not the refused request.
    assert len(wm.sink.drain()) == 2


def test_a_timed_out_request_gets_408_with_the_versions(
    start_wm_server: Callable[..., WmServer], tls_cluster: TLSCluster, tmp_path: Path
) -> None:
    """408 comes from the HTTP/1.1 session's own timer: a body shorter than announced."""
    wm = start_wm_server(body_timeout=0.3)
    r = _curl(wm, "--http1.1", tmp_path, tls_cluster.pair("b"), "-H", "Content-Length: 999")
    assert r.status == 408
    _assert_versions(r)


# -- real processes: a node of another major, then the same node upgraded ---------------------


@pytest.fixture
def pair_cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path, 2, broadcast={"version_probe_interval": 0.5, "retry_base": 0.05})
    yield cluster
    cluster.close()


def test_another_major_is_refused_both_ways_then_repaired_by_the_snapshot(
    pair_cluster: Cluster,
) -> None:
    """node-b speaks the next major: each side refuses the other's requests (409, nothing
    applied), each logs one line, status shows the peer's versions; once node-b restarts on
    our contract, node-a's next probe carries its snapshot and node-b's broker gets it all."""
    a, b = pair_cluster["node-a"], pair_cluster["node-b"]
    b.program = STAND_IN
    pair_cluster.start()
    for i in range(5):
        a.send(event("workload:submitted", workload("node-a", f"w{i}")))
    b.send(event("workload:submitted", workload("node-b", "from-b")))
    b.status()  # a fence: node-b answered after the event, so its journal holds it
    status = a.poll_status(
        lambda s: (
            (p := a.peer(s, "node-b"))["contractVersion"] == OTHER_MAJOR
            and "409" in (p["lastError"] or "")
        ),
        what="node-a sees node-b's major and its refusal",
    )
    peer = a.peer(status, "node-b")
    assert peer["softwareVersion"] == __version__  # the stand-in is this tree's software
    assert peer["sent"] == 0
    a.wait_log(f"speaks contract {OTHER_MAJOR}")
    b.wait_log(f"speaks contract {CONTRACT_VERSION}")
    # Several probes later (0.5 s apart), still one line each, and nothing crossed.
    probes = f"refused a request of contract {CONTRACT_VERSION}"  # node-b's endpoint, debug
    a.poll_status(lambda _: len(b.log_lines(probes)) >= 4, what="node-a probes node-b again")
    assert len(a.log_lines(f"speaks contract {OTHER_MAJOR}")) == 1
    assert not [f for f in b.seen if f.get("method") == "workloads:upsert"]
    assert not [f for f in a.seen if f.get("method") == "workloads:upsert"]
    # node-b is upgraded (restarted on this tree, same port): the snapshots repair both views.
    b.kill()
    b.program = None
    b.start()
    pair_cluster.announce()
    for i in range(5):
        b.wait_for(is_upsert(f"w{i}"))
    a.wait_for(is_upsert("from-b"))  # node-b's journal, replayed to node-a at last
    a.wait_log("takes our contract version again")
    status = a.poll_status(lambda s: a.peer(s, "node-b")["contractVersion"] == CONTRACT_VERSION)
    assert a.peer(status, "node-b")["softwareVersion"] == __version__
    assert pair_cluster.errors() == []
