"""``nvpair-wm status``: a real two-node cluster, asked through node-a's metrics listener by the
installed command; its ``--json`` validates against schema/node-status.schema.json; no node (or
something else) answering is one line and exit status 1."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import jsonschema

from nvpair_wm import status_command
from tests.support.cluster import Cluster, event, is_upsert, workload
from tests.support.conformance import BASE, REGISTRY
from tests.support.ports import free_port
from tests.support.wm_process import WAIT

COMMAND = Path(sys.executable).parent / "nvpair-wm"


def status(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COMMAND), "status", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def validate(document: Any) -> None:
    schema = {"$ref": BASE + "node-status.schema.json"}
    jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(document)


def test_status_of_a_running_node_lists_its_peers(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cl", 2)
    a, b = cluster["node-a"], cluster["node-b"]
    a.extra = ("--metrics", "127.0.0.1:0")
    try:
        cluster.start()
        line = a.wait_log("metrics endpoint listening on")
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        assert match, line
        metrics = f"127.0.0.1:{match.group(1)}"
        a.send(event("workload:submitted", workload("node-a", "w1")))
        b.wait_for(is_upsert("w1"))

        shown = status("--json", "--metrics", metrics)
        assert shown.returncode == 0, shown.stderr
        document = json.loads(shown.stdout)
        validate(document)
        [peer] = document["peers"]
        assert peer["nodeId"] == "node-b" and peer["state"] == "connected"
        assert peer["sent"] >= 1 and isinstance(peer["lastSuccessAt"], int)
        assert peer["softwareVersion"] and peer["contractVersion"]
        assert document["journal"]["state"] == "healthy"
        assert document["config"]["generation"] == 1
        assert document["counters"]["framesIn"] >= 1
        assert document["port"] == a.port

        table = status("--metrics", metrics)
        assert table.returncode == 0, table.stderr
        assert table.stderr == ""
        text = table.stdout
        assert "journal healthy" in text and "configuration generation 1" in text, text
        row = next(line for line in text.splitlines() if "node-b" in line)
        assert "connected" in row and f"127.0.0.1:{b.port}" in row and "s ago" in row, row
        assert "frames in" in text and "broker queue" in text

        # The node's config file says where its listener is.
        config_file = tmp_path / "a.toml"
        config_file.write_text(f'metrics = "{metrics}"\n')
        via_file = status("--json", "--config", str(config_file))
        assert via_file.returncode == 0, via_file.stderr
        assert json.loads(via_file.stdout)["peers"][0]["nodeId"] == "node-b"

        # b gone: a's view says so.
        b.kill()
        a.poll_status(lambda s: not a.peer(s, "node-b")["connected"], what="b seen down")
        down = json.loads(status("--json", "--metrics", metrics).stdout)
        validate(down)
        assert down["peers"][0]["state"] in ("connecting", "retrying", "given-up")
        assert not cluster.errors()
    finally:
        cluster.close()


def test_no_node_answering_is_one_line() -> None:
    port = free_port()
    done = status("--metrics", f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"nvpair-wm status: no node answers at http://127.0.0.1:{port}/")
    assert f"--metrics 127.0.0.1:{port}" in lines[0]


@contextmanager
def something_else(code: int, body: bytes) -> Iterator[int]:
    """An HTTP server on loopback that answers every GET with ``code`` and ``body``."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(code)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT)


def test_something_else_answering_is_one_line() -> None:
    cases = [
        (404, b"not found", "answered HTTP 404"),
        (200, b'{"version": "1"}', "not a node status"),
        (200, b"<html>", "not JSON"),
    ]
    for code, body, why in cases:
        with something_else(code, body) as port:
            done = status("--metrics", f"127.0.0.1:{port}")
        assert done.returncode == 1, done
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and why in lines[0], done.stderr


def test_a_config_without_a_metrics_listener_is_one_line(tmp_path: Path) -> None:
    config_file = tmp_path / "wm.toml"
    config_file.write_text("port = 0\n")
    done = status("--config", str(config_file))
    assert done.returncode == 1
    assert "sets no metrics listener" in done.stderr and len(done.stderr.splitlines()) == 1


def test_the_default_address_is_the_units() -> None:
    unit = (Path(__file__).parent.parent / "packaging" / "nvpair-wm.service").read_text()
    assert f"--metrics {status_command.DEFAULT_ADDRESS}" in unit
