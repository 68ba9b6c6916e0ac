"""``--metrics``: real nvpair-wm processes (two nodes on loopback, mutual TLS between them)
scraped with real curl, the exposition parsed with prometheus_client's own parser.

About 3 s: two nodes start, a few events cross, a handful of scrapes.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.metrics import DEFAULT_HOST, parse_address
from nvpair_wm.versions import CONTRACT_VERSION
from tests.support.cluster import POLL_EVERY, Node, event, is_upsert, workload
from tests.support.polling import eventually
from tests.support.tools import tool
from tests.support.wm_process import WAIT, run_cli

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def curl() -> str:
    path = tool("curl")
    return path


def fetch(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [curl(), "-sS", "--max-time", str(WAIT), *extra, url],
        capture_output=True,
        text=True,
        timeout=WAIT + 5,
        check=False,
    )


def scrape(url: str) -> Samples:
    done = fetch(url, "--fail", "-D", "/dev/stderr")
    assert done.returncode == 0, done.stderr
    assert "content-type: text/plain" in done.stderr.lower()
    samples: Samples = {}
    for family in text_string_to_metric_families(done.stdout):
        for s in family.samples:
            samples[s.name, tuple(sorted(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[name, tuple(sorted(labels.items()))]


def metrics_url(node: Node) -> str:
    line = node.wm.wait_stderr("metrics endpoint listening on")
    match = re.search(r"(http://127\.0\.0\.1:(\d+)/metrics)", line)
    assert match and int(match.group(2)) > 0, line
    return match.group(1)


def wait_scrape(url: str, name: str, want: float, **labels: str) -> Samples:
    """Scrape until the sample reaches ``want``: a counter catching up with traffic that no
    frame announces (a poll with a bounded deadline, as ``Node.poll_status``)."""
    got = [0.0]

    def reached() -> Samples | None:
        samples = scrape(url)
        got[0] = samples.get((name, tuple(sorted(labels.items()))), 0.0)
        return samples if got[0] >= want else None

    return eventually(
        reached, lambda: f"{name}{labels} stayed at {got[0]}, wanted {want}", every=POLL_EVERY
    )


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    dirs = init_cluster(tmp_path / "cl", ["node-a", "node-b"])
    a = Node("node-a", dirs["node-a"], 0, "--metrics", "127.0.0.1:0")
    b = Node("node-b", dirs["node-b"], 0, "--metrics", "127.0.0.1:0")
    try:
        for n in (a, b):
            n.start()
        records = [a.record(), b.record()]
        for n in (a, b):
            n.send({"jsonrpc": "2.0", "method": "nodes:update", "params": {"nodes": records}})
        yield a, b
    finally:
        a.kill()
        b.kill()


def test_metrics_report_status_counters_and_latencies_as_traffic_flows(
    pair: tuple[Node, Node],
) -> None:
    a, b = pair
    url_a, url_b = metrics_url(a), metrics_url(b)
    a.poll_status(lambda s: bool(s["peers"]) and s["peers"][0]["connected"])
    before = scrape(url_a)
    version = a.status()["version"]
    build = {"version": version, "contract_version": CONTRACT_VERSION}
    assert value(before, "nvpair_wm_build_info", **build) == 1
    assert value(before, "nvpair_wm_has_identity") == 1
    assert value(before, "nvpair_wm_peer_connected", peer="node-b", protocol="h2") == 1
    assert value(before, "nvpair_wm_delivery_seconds_count") == 0
    broker_in = value(before, "nvpair_wm_frames_total", channel="broker", direction="in")
    assert value(before, "nvpair_wm_frames_total", channel="peer", direction="out") == 0
    assert value(before, "nvpair_wm_frame_outcomes_total", channel="broker", outcome="applied") == 0

    n = 5
    for i in range(n):
        a.send(event("workload:submitted", workload("node-a", f"w{i}")))
    for i in range(n):
        b.wait_for(is_upsert(f"w{i}"))

    after = wait_scrape(url_a, "nvpair_wm_peer_sent_frames_total", n, peer="node-b")
    assert value(after, "nvpair_wm_delivery_seconds_count") == n
    assert 0 < value(after, "nvpair_wm_delivery_seconds_sum") < WAIT * n
    # The broker channel of a: n events in, each applied and relayed once toward the peers.
    assert value(after, "nvpair_wm_frames_total", channel="broker", direction="in") >= broker_in + n
    assert value(after, "nvpair_wm_frame_outcomes_total", channel="broker", outcome="applied") == n
    assert value(after, "nvpair_wm_frames_total", channel="peer", direction="out") == n
    assert value(after, "nvpair_wm_frames_total", channel="peer", direction="in") == 0
    assert value(after, "nvpair_wm_workloads") == n
    assert value(after, "nvpair_wm_peer_queue_frames", peer="node-b") == 0
    status = a.status()
    peer = status["peers"][0]
    assert value(after, "nvpair_wm_peer_sent_frames_total", peer="node-b") == peer["sent"]
    assert value(after, "nvpair_wm_duplicates_total") == status["counters"]["duplicates"]

    # a heard b's versions in b's responses; b heard a's in a's requests (b sent a nothing).
    said = {"contract_version": CONTRACT_VERSION, "software_version": version}
    assert value(after, "nvpair_wm_peer_info", peer="node-b", **said) == 1
    seen_b = scrape(url_b)
    assert value(seen_b, "nvpair_wm_peer_info", peer="node-a", **said) == 1
    served = value(
        seen_b, "nvpair_wm_peer_request_duration_seconds_count", protocol="h2", code="202"
    )
    assert served >= 1
    assert value(seen_b, "nvpair_wm_workloads") == n
    # The peer channel of b: the n events in, applied; out to b's broker: ready + n upserts.
    assert value(seen_b, "nvpair_wm_frames_total", channel="peer", direction="in") == n
    assert value(seen_b, "nvpair_wm_frame_outcomes_total", channel="peer", outcome="applied") == n
    assert value(seen_b, "nvpair_wm_frame_outcomes_total", channel="peer", outcome="invalid") == 0
    assert value(seen_b, "nvpair_wm_frames_total", channel="peer", direction="out") == 0
    assert value(seen_b, "nvpair_wm_frames_total", channel="broker", direction="out") >= n + 1
    by_channel = b.status()["counters"]["byChannel"]
    assert by_channel["peer"] == {
        "framesIn": n,
        "framesOut": 0,
        "applied": n,
        "duplicate": 0,
        "stale": 0,
        "suppressed": 0,
        "invalid": 0,
    }

    # A duplicate and an invalid notification from the broker move that channel's outcomes
    # (and the totals), at the next scrape; the peer channel is untouched.
    a.send(event("workload:submitted", workload("node-a", "w0")))
    a.send({"jsonrpc": "2.0", "method": "workload:started", "params": {}})
    wait_scrape(url_a, "nvpair_wm_duplicates_total", 1)
    last = wait_scrape(
        url_a, "nvpair_wm_frame_outcomes_total", 1, channel="broker", outcome="invalid"
    )
    assert value(last, "nvpair_wm_frame_outcomes_total", channel="broker", outcome="duplicate") == 1
    assert value(last, "nvpair_wm_frames_total", channel="peer", direction="out") == n
    assert value(last, "nvpair_wm_frame_outcomes_total", channel="peer", outcome="invalid") == 0


def test_metrics_endpoint_answers_bad_requests_and_stays_up(pair: tuple[Node, Node]) -> None:
    a, _ = pair
    url = metrics_url(a)
    assert (
        fetch(
            url.removesuffix("/metrics") + "/nope", "-o", "/dev/null", "-w", "%{http_code}"
        ).stdout
        == "404"
    )
    assert fetch(url, "-X", "POST", "-o", "/dev/null", "-w", "%{http_code}").stdout == "405"
    host_port = url.removeprefix("http://").removesuffix("/metrics")
    raw = subprocess.run(
        [curl(), "-sS", "--max-time", "5", f"telnet://{host_port}"],
        input="NOT HTTP AT ALL\r\n\r\n",
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert raw.stdout.startswith("HTTP/1.1 400"), raw
    assert value(scrape(url), "nvpair_wm_has_identity") == 1
    assert a.wm.proc.poll() is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9100", (DEFAULT_HOST, 9100)),
        (":0", (DEFAULT_HOST, 0)),
        ("0.0.0.0:9100", ("0.0.0.0", 9100)),
        ("[::1]:9100", ("::1", 9100)),
        ("localhost:9100", ("localhost", 9100)),
    ],
)
def test_metrics_address_forms(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["", "x", "1.2.3.4:", "::1:9100", "127.0.0.1:70000", ":-1"])
def test_bad_metrics_value_is_exit_2_naming_the_flag(text: str) -> None:
    done = run_cli("--metrics", text)
    assert done.returncode == 2, done
    assert "--metrics" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_metrics_off_imports_nothing_of_prometheus() -> None:
    probe = (
        "import sys; from nvpair_wm import cli, node, broadcaster; "
        "cli.parser().parse_args(['--port', '0']); "
        "print('prometheus_client' in sys.modules, 'nvpair_wm.metrics' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=WAIT, check=True
    )
    assert done.stdout.split() == ["False", "False"]


def test_metrics_port_in_use_is_one_line_naming_the_flag_and_exit_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("--port", "0", "--bind", "127.0.0.1", "--metrics", f"127.0.0.1:{port}")
    assert done.returncode == 1, done
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and f"--metrics 127.0.0.1:{port}: " in errors[0], done.stderr
    assert "--port" not in errors[0] and "every interface" not in errors[0]
