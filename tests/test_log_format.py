"""``--log-format json``: every stderr line of a real node is one JSON object with the time, the
level, the logger, the message and the record's structured fields; plain lines stay the default
off a terminal."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from nvpair_wm.clusterdir import init_cluster, node_records
from tests.support.wm_process import WmProcess, run_cli


def parsed(lines: list[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        obj = json.loads(line)  # fails the test on any line that is not one JSON object
        assert isinstance(obj, dict), line
        out.append(obj)
    return out


def test_json_logs_are_one_object_per_line_with_structured_fields(tmp_path: Path) -> None:
    dirs = init_cluster(tmp_path / "cluster", ["node-1", "node-2"])
    config = tmp_path / "wm.toml"
    # The config key (the flag is checked below); node-2 refused at once: the link gives up
    config.write_text(
        'log_format = "json"\n[broadcast]\nretry_max_attempts = 1\nretry_base = 0.01\n'
    )
    with WmProcess(
        "--cluster-dir", str(dirs["node-1"]), "--port", "0", "--bind", "127.0.0.1",
        "--config", str(config),
    ) as wm:  # fmt: skip
        assert wm.recv()["method"] == "ready"
        records = node_records(tmp_path / "cluster", port_base=1)  # node-2 on a closed port
        wm.request("nodes:update", {"nodes": records})
        wm.wait_stderr("giving up")
        wm.close_stdin()
        assert wm.wait() == 0
    objects = parsed(wm.stderr_log)
    for obj in objects:
        assert {"time", "level", "logger", "message"} <= obj.keys(), obj
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", obj["time"]), obj
        assert obj["level"] in {"debug", "info", "warning", "error", "critical"}, obj
    by_message = {o["message"].split(" (")[0]: o for o in objects}
    reload = next(o for o in objects if o["message"].startswith("journal: reloaded"))
    assert reload["records"] == 0 and reload["skipped"] == 0 and reload["level"] == "info"
    assert by_message["nodes:update with 2 records"]["nodes"] == 2
    identity = next(o for o in objects if o["message"].startswith("cluster identity loaded"))
    assert identity["nodeId"] == "node-1" and len(identity["fingerprint"]) == 64
    added = next(o for o in objects if o["message"].startswith("peer node-2 (127.0.0.1:2) added"))
    assert added["peer"] == "node-2" and added["address"] == "127.0.0.1:2", added
    assert added["logger"] == "nvpair_wm.broadcaster"
    gave_up = next(o for o in objects if "giving up" in o["message"])
    assert gave_up["peer"] == "node-2" and gave_up["failures"] >= 1 and gave_up["frames"] >= 0


def test_the_flag_sets_json_and_plain_stays_the_default(tmp_path: Path) -> None:
    done = run_cli("--port", "0", "--bind", "127.0.0.1", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    objects = parsed(done.stderr.splitlines())
    assert any(o["message"].startswith("inter-node server listening on") for o in objects)
    done = run_cli("--port", "0", "--bind", "127.0.0.1")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines and all(re.match(r"\d{4}-\d\d-\d\dT\S+Z (INFO|WARN)", ln) for ln in lines), lines
    done = run_cli("--log-format", "yaml")
    assert done.returncode == 2 and "--log-format" in done.stderr
