"""POST /v1/workloads/events: the endpoint's decisions without IO, then every status code through
the real server with real curl (--http1.1 and --http2), real certificates, real dispatcher."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvpair_wm.clusterdir import remove_member
from nvpair_wm.dedup import WorkloadTable
from nvpair_wm.dispatch import Dispatcher
from nvpair_wm.endpoint import EVENTS_PATH, EventsEndpoint, is_json_content_type
from nvpair_wm.http.core import MIB, Request
from tests.conftest import WAIT, CertPair, RecordingSink, TLSCluster, WmServer
from tests.support.curl import CurlResult, base_args, parse
from tests.support.frames import event, remove, workload

StartServer = Callable[..., WmServer]

GOOD = event("workload:submitted")
FP_PINNED = "aa" * 32

# ---------------------------------------------------------------------------------------------
# The endpoint alone (sans-IO)
# ---------------------------------------------------------------------------------------------


class _Pins:
    def __init__(self, *pinned: str) -> None:
        self.pinned = set(pinned)

    def is_pinned(self, fingerprint: str) -> bool:
        return fingerprint in self.pinned


def _endpoint(sink: RecordingSink | None = None) -> EventsEndpoint:
    return EventsEndpoint(
        Dispatcher(WorkloadTable(), lambda: None),  # type: ignore[arg-type,return-value]
        _Pins(FP_PINNED),
        sink or RecordingSink(),
    )


def _req(
    method: str = "POST",
    path: str = EVENTS_PATH,
    ctype: bytes | None = b"application/json",
    fp: str | None = FP_PINNED,
    length: int | None = 10,
) -> Request:
    headers = [] if ctype is None else [(b"content-type", ctype)]
    return Request(method, path, headers, fp, "http/1.1", length)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (b"application/json", True),
        (b"Application/JSON", True),
        (b"application/json; charset=utf-8", True),
        (b'application/json;charset="UTF-8"', True),
        (b"application/json; charset=latin-1", False),
        (b"application/jsonx", False),
        (b"text/plain", False),
        (b"", False),
        (None, False),
    ],
)
def test_content_type_check(value: bytes | None, ok: bool) -> None:
    assert is_json_content_type(value) is ok


def test_head_decisions_in_order() -> None:
    ep = _endpoint()
    unpinned = ep.head(_req(fp="bb" * 32, path="/elsewhere", method="GET"))
    assert unpinned is not None and unpinned.status == 403  # before 404/405: reveal nothing
    anonymous = ep.head(_req(fp=None))
    assert anonymous is not None and anonymous.status == 403
    assert json.loads(anonymous.body)["error"]
    r404 = ep.head(_req(path="/v1/workloads"))
    assert r404 is not None and r404.status == 404
    r405 = ep.head(_req(method="GET"))
    assert r405 is not None and r405.status == 405
    assert (b"allow", b"POST") in r405.headers
    r415 = ep.head(_req(ctype=b"text/plain"))
    assert r415 is not None and r415.status == 415
    r413 = ep.head(_req(length=MIB + 1))
    assert r413 is not None and r413.status == 413
    assert ep.head(_req(length=MIB)) is None
    assert ep.head(_req(length=None)) is None  # chunked: the adapter counts


def test_queue_full_is_503_with_retry_after_before_and_after_the_body() -> None:
    sink = RecordingSink()
    ep = _endpoint(sink)
    sink.is_full = True
    r = ep.head(_req())
    assert r is not None and r.status == 503
    assert (b"retry-after", b"1") in r.headers
    sink.is_full = False
    assert ep.head(_req()) is None
    sink.is_full = True  # filled up while the body was on its way
    assert ep.complete(_req(), GOOD).status == 503
    assert sink.drain() == []


def test_complete_forwards_to_the_sink_and_answers_like_the_dispatcher() -> None:
    sink = RecordingSink()
    ep = _endpoint(sink)
    r = ep.complete(_req(), GOOD)
    assert (r.status, r.body) == (202, b"")
    [frame] = sink.drain()
    assert json.loads(frame)["method"] == "workloads:upsert"
    r = ep.complete(_req(), event("workload:started", workload(state="running", seq=2), id=7))
    assert r.status == 200
    assert (b"content-type", b"application/json") in r.headers
    assert json.loads(r.body)["id"] == 7


# ---------------------------------------------------------------------------------------------
# Through the server with curl
# ---------------------------------------------------------------------------------------------

PROTOCOLS = ["--http1.1", "--http2"]


@dataclass
class Curl:
    wm: WmServer
    proto: str
    tmp: Path

    def run(
        self,
        body: bytes | None = GOOD,
        *,
        pair: CertPair | None,
        urls: list[str] | None = None,
        ctype: str | None = "application/json",
        method: str | None = None,
        check: bool = True,
    ) -> tuple[int, list[CurlResult]]:
        urls = urls or [self.wm.url()]
        cert, key = (None, None) if pair is None else (pair.cert, pair.key)
        args = base_args(self.proto, WAIT, cert, key)
        if body is not None:
            data = self.tmp / "body"
            data.write_bytes(body)
            args += ["--data-binary", f"@{data}"]
        if ctype is not None:
            args += ["-H", f"Content-Type: {ctype}"]
        if method is not None:
            args += ["-X", method]
        proc = subprocess.run([*args, *urls], capture_output=True, timeout=WAIT * 2, check=False)
        if check:
            assert proc.returncode == 0, proc.stderr.decode()
        return proc.returncode, parse(proc.stdout)


@pytest.fixture(params=PROTOCOLS)
def curl(request: pytest.FixtureRequest, start_wm_server: StartServer, tmp_path: Path) -> Curl:
    return Curl(start_wm_server(), request.param, tmp_path)


def _one(curl: Curl, body: bytes | None = GOOD, **kw: object) -> CurlResult:
    _, results = curl.run(body, **kw)  # type: ignore[arg-type]
    [result] = results
    assert result.http_version == ("2" if curl.proto == "--http2" else "1.1")
    return result


def test_pinned_caller_gets_202_and_the_event_reaches_the_broker_queue(
    curl: Curl, tls_cluster: TLSCluster
) -> None:
    r = _one(curl, pair=tls_cluster.pair("b"))
    assert (r.status, r.body) == (202, b"")
    frame = json.loads(curl.wm.sink.get())
    assert frame["method"] == "workloads:upsert"
    assert frame["params"]["workloadInfo"]["state"] == "queued"


def test_requests_get_200_with_jsonrpc_responses(curl: Curl, tls_cluster: TLSCluster) -> None:
    r = _one(curl, event("workload:submitted", id=41), pair=tls_cluster.pair("b"))
    assert r.status == 200
    assert r.headers["content-type"].startswith("application/json")
    reply = json.loads(r.body)
    assert reply["id"] == 41 and "result" in reply


def test_batch_mixing_good_and_bad_frames_gets_400_and_the_good_ones_pass(
    curl: Curl, tls_cluster: TLSCluster
) -> None:
    good = json.loads(event("workload:submitted", workload(id="9")))
    bad = json.loads(event("workload:started", workload(id="10", state="running", seq="x")))
    batch = json.dumps([good, bad, json.loads(remove("3"))]).encode()
    r = _one(curl, batch, pair=tls_cluster.pair("b"))
    assert r.status == 400
    errors = json.loads(r.body)
    assert isinstance(errors, list)
    assert any(e.get("error", {}).get("data", {}).get("index") == 1 for e in errors), errors
    frames = [json.loads(f) for f in curl.wm.sink.drain()]
    assert [f["params"]["workloadInfo"]["id"] for f in frames if "workloadInfo" in f["params"]] == [
        "9"
    ]


def test_unpinned_certificate_gets_403(curl: Curl, tls_cluster: TLSCluster) -> None:
    r = _one(curl, pair=tls_cluster.stranger)
    assert r.status == 403
    assert "pinned" in json.loads(r.body)["error"]
    assert curl.wm.sink.drain() == []


def test_no_client_certificate_fails_the_handshake(curl: Curl) -> None:
    code, results = curl.run(pair=None, check=False)
    assert code != 0
    assert all(r.status == 0 for r in results)


def test_other_path_gets_404(curl: Curl, tls_cluster: TLSCluster) -> None:
    r = _one(curl, pair=tls_cluster.pair("b"), urls=[curl.wm.url("/v1/other?x=1")])
    assert r.status == 404


def test_other_method_gets_405_with_allow(curl: Curl, tls_cluster: TLSCluster) -> None:
    r = _one(curl, None, pair=tls_cluster.pair("b"), method="PUT", ctype=None)
    assert r.status == 405
    assert r.headers["allow"] == "POST"


def test_other_content_type_gets_415(curl: Curl, tls_cluster: TLSCluster) -> None:
    r = _one(curl, pair=tls_cluster.pair("b"), ctype="text/plain")
    assert r.status == 415


def test_body_of_1_mib_plus_1_gets_413(curl: Curl, tls_cluster: TLSCluster) -> None:
    body = GOOD + b" " * (MIB + 1 - len(GOOD))
    assert len(body) == MIB + 1
    r = _one(curl, body, pair=tls_cluster.pair("b"))
    assert r.status == 413
    assert curl.wm.sink.drain() == []


def test_body_of_exactly_1_mib_is_read(curl: Curl, tls_cluster: TLSCluster) -> None:
    body = GOOD + b" " * (MIB - len(GOOD))
    r = _one(curl, body, pair=tls_cluster.pair("b"))
    assert r.status != 413


def test_full_broker_queue_gets_503_with_retry_after(curl: Curl, tls_cluster: TLSCluster) -> None:
    curl.wm.sink.is_full = True
    r = _one(curl, pair=tls_cluster.pair("b"))
    assert r.status == 503
    assert r.headers["retry-after"] == "1"
    curl.wm.sink.is_full = False
    assert _one(curl, pair=tls_cluster.pair("b")).status == 202


def test_pin_removed_between_two_requests_on_one_connection(
    curl: Curl, tls_cluster: TLSCluster
) -> None:
    # The first request's frames reaching the broker queue is the moment to revoke "b".
    curl.wm.sink.on_put = lambda frames: remove_member(tls_cluster.root, "b")
    _, results = curl.run(pair=tls_cluster.pair("b"), urls=[curl.wm.url(), curl.wm.url()])
    assert [r.status for r in results] == [202, 403]
    assert [r.new_connections for r in results] == [1, 0]  # the second reused the connection


def test_duplicate_from_two_pinned_peers_reaches_the_broker_once(
    curl: Curl, tls_cluster: TLSCluster
) -> None:
    assert _one(curl, pair=tls_cluster.pair("b")).status == 202
    assert _one(curl, pair=tls_cluster.pair("c")).status == 202
    # complete() forwards before answering, so the queue is final once curl has its answer.
    assert len(curl.wm.sink.drain()) == 1
