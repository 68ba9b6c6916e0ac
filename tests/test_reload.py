"""Reload on SIGHUP: the --config file read again, what may change live applied without dropping a
connection, restart-only keys refused one line each, a bad file one line and no change.

The plan (reload.py) is tested without IO; the rest with real processes: a two-node cluster whose
node-a changes its log level and a retry bound, and single nodes for the refusals.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
from pathlib import Path
from typing import Any

import pytest
from nvpair_wm_schema.node_record_schema import NodeRecord

from nvpair_wm import config, reload
from nvpair_wm.broadcaster import Broadcaster
from nvpair_wm.clusterdir import cert_fingerprint, init_cluster, make_self_signed
from nvpair_wm.config import Config
from nvpair_wm.dedup import TableLimits, WorkloadTable
from nvpair_wm.journal import JournalLimits, open_journal
from nvpair_wm.node import Node as WmNode
from nvpair_wm.outbox import BroadcastLimits
from nvpair_wm.pins import Identity, PinSet
from tests.support.cluster import Cluster, Node, event, is_upsert, workload
from tests.support.polling import eventually
from tests.support.wm_process import WmProcess

# -- the plan, without IO -------------------------------------------------------------------------


def test_live_keys_are_applied_and_restart_only_keys_refused() -> None:
    running = Config()
    loaded = config.replace(
        running,
        {
            "port": 15000,
            "log_level": "debug",
            "broadcast.retry_max_attempts": 2,
            "table.max_workloads": 7,
            "journal.enabled": False,
            "journal.fsync_interval": 0.5,
        },
    )
    plan = reload.plan(running, loaded)
    assert [c.key for c in plan.applied] == [
        "log_level",
        "broadcast.retry_max_attempts",
        "journal.fsync_interval",
    ]
    assert [c.key for c in plan.refused] == ["port", "table.max_workloads", "journal.enabled"]
    after = plan.effective(running)
    assert after.log_level == "debug" and after.broadcast.retry_max_attempts == 2
    assert after.port == running.port and after.table == running.table
    assert after.journal.enabled and after.journal.fsync_interval == 0.5
    assert str(plan.refused[0]) == "port: 14320 -> 15000"
    assert plan.touches("broadcast.") and plan.touches("log_level") and not plan.touches("http.")


def test_an_unchanged_file_is_an_empty_plan() -> None:
    plan = reload.plan(Config(), Config())
    assert plan.applied == () and plan.refused == () and not plan.changed


@pytest.mark.parametrize(
    ("key", "live"),
    [
        ("log_level", True),
        ("log_format", True),
        ("metrics", True),
        ("shutdown_grace", True),
        ("http.idle_timeout", True),
        ("broadcast.protocols", True),
        ("pins.max_file_bytes", True),
        ("journal.retry_backoff", True),
        ("table.expire_interval", True),
        ("port", False),
        ("bind", False),
        ("ipc", False),
        ("cluster_dir", False),
        ("max_frame", False),
        ("broker.queue_frames", False),
        ("table.live_ttl", False),
        ("journal.enabled", False),
        ("tls.min_version", False),
    ],
)
def test_which_keys_are_live(key: str, live: bool) -> None:
    assert key in config.key_names()
    assert reload.is_live(key) is live


# -- a running cluster ----------------------------------------------------------------------------


def _peer(node: Node, name: str) -> Any:
    peer = node.peer(node.status(), name)
    assert peer is not None, f"{node.name} has no peer {name}"
    return peer


def _peer_duplicates(node: Node) -> int:
    counted: int = node.status()["counters"]["byChannel"]["peer"]["duplicate"]
    return counted


def test_sighup_changes_the_log_level_and_a_retry_bound_live(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cl", 2)
    a, b = cluster["node-a"], cluster["node-b"]
    assert a.config_file is None
    a.config_file = tmp_path / "node-a.toml"
    a.config_file.write_text(config.dumps({"log_level": "info"}))
    a.log_level = None  # the file says it: a flag would override the file on reload too
    try:
        cluster.start()
        a.send(event("workload:submitted", workload("node-a", "w1")))
        b.wait_for(is_upsert("w1"))
        b.send(event("workload:submitted", workload("node-b", "w2")))
        a.wait_for(is_upsert("w2"))
        a.poll_status(lambda s: a.peer(s, "node-b")["connected"], what="a connected to b")
        sent_ab, sent_ba = _peer(a, "node-b")["sent"], _peer(b, "node-a")["sent"]
        dup_a, dup_b = _peer_duplicates(a), _peer_duplicates(b)
        b_connects = len(b.log_lines(": connected ("))
        b_snapshots = len(b.log_lines(": snapshot of "))
        assert a.status()["config"]["generation"] == 1
        assert not [line for line in a.wm.stderr_log if " DEBUG " in line]

        a.config_file.write_text(
            config.dumps({"log_level": "debug", "broadcast.retry_max_attempts": 1})
        )
        a.signal(signal.SIGHUP)
        line = a.wait_log("configuration reloaded (generation 2)")
        assert 'log_level: "info" -> "debug"' in line, line
        assert "broadcast.retry_max_attempts: 8 -> 1" in line, line
        status = a.status()
        assert status["config"]["generation"] == 2
        assert status["config"]["loadedAt"] >= 1764690000000

        # Both links carry the next events as before: same connections, no snapshot again.
        a.send(event("workload:submitted", workload("node-a", "w3")))
        b.wait_for(is_upsert("w3"))
        b.send(event("workload:submitted", workload("node-b", "w4")))
        a.wait_for(is_upsert("w4"))
        assert _peer(a, "node-b")["sent"] == sent_ab + 1  # w3 alone: no snapshot re-sent
        assert _peer(b, "node-a")["sent"] == sent_ba + 1  # w4 alone
        assert _peer_duplicates(a) == dup_a and _peer_duplicates(b) == dup_b
        assert len(b.log_lines(": connected (")) == b_connects, "b reconnected to a"
        assert len(b.log_lines(": snapshot of ")) == b_snapshots
        assert not a.log_lines("connection ended")
        assert _peer(a, "node-b")["connected"]

        # The retry bound took effect: one failed attempt and node-a gives up on node-b.
        b.kill()
        a.send(event("workload:submitted", workload("node-a", "w5")))
        gave_up = a.wait_log("giving up after 1 failures")
        assert "node-b" in gave_up
        peer = a.poll_status(
            lambda s: a.peer(s, "node-b")["state"] == "given-up", what="given up on b"
        )
        assert a.peer(peer, "node-b")["givenUp"] == 1
        # The log level took effect: the end of the connection is a debug line.
        assert [line for line in a.log_lines("connection ended") if " DEBUG " in line]
        assert not cluster.errors()
    finally:
        cluster.close()


# -- refusals --------------------------------------------------------------------------------------


UNCHANGED = "reload: the configuration is unchanged"


def _logged_after(wm: WmProcess, needle: str, seen: int) -> int:
    """The index of the (seen+1)-th line holding ``needle``, once logged."""

    def found() -> int | None:
        hits = [i for i, line in enumerate(wm.stderr_log) if needle in line]
        return hits[seen] if len(hits) > seen else None

    index: int = eventually(found, f"{needle!r} logged {seen + 1} times")
    return index


def _settled(wm: WmProcess) -> int:
    """A reload of the unchanged file: every line logged before it (start-up included) is in
    ``stderr_log`` once its line is; the index just after it."""
    seen = sum(UNCHANGED in line for line in wm.stderr_log)
    wm.proc.send_signal(signal.SIGHUP)
    return _logged_after(wm, UNCHANGED, seen) + 1


def _lines_of_one_reload(
    wm: WmProcess, config_file: Path, running: str, text: str, last: str
) -> list[str]:
    """The lines a reload of ``text`` logs (``last``: its last line). The file is first written
    as the node runs (``running``) and reloaded, so that nothing logged before is counted; then
    ``text``; after ``last``, a file that does not parse, whose one line ends the count (reloads
    run one at a time, and a refused one changes nothing)."""
    config_file.write_text(running)
    start = _settled(wm)
    config_file.write_text(text)
    wm.proc.send_signal(signal.SIGHUP)
    wm.wait_stderr(last)
    refused = sum("reload refused" in line for line in wm.stderr_log)
    config_file.write_text("not toml [")
    wm.proc.send_signal(signal.SIGHUP)
    end = _logged_after(wm, "reload refused", refused)
    return wm.stderr_log[start:end]


def test_a_restart_only_key_is_one_line_and_the_rest_still_applies(tmp_path: Path) -> None:
    cfg = tmp_path / "wm.toml"
    at_start = 'bind = "127.0.0.1"\nport = 0\n'
    cfg.write_text(at_start)
    with WmProcess("--config", str(cfg), "--log-format", "plain") as wm:
        assert wm.recv()["method"] == "ready"
        port = wm.status()["port"]
        lines = _lines_of_one_reload(
            wm,
            cfg,
            at_start,
            at_start.replace("port = 0", "port = 1") + "shutdown_grace = 2.0\n",
            "configuration reloaded (generation 2)",
        )
        assert len(lines) == 2, lines
        assert "reload: port: 0 -> 1 needs a restart; the running node keeps 0" in lines[0]
        assert "WARN" in lines[0]
        assert "configuration reloaded (generation 2): shutdown_grace: 5.0 -> 2.0" in lines[1]
        status = wm.status()
        assert status["port"] == port and status["config"]["generation"] == 2
        # The restart-only key alone: one line, nothing else changes.
        running = at_start + "shutdown_grace = 2.0\n"
        lines = _lines_of_one_reload(
            wm,
            cfg,
            running,
            running.replace("port = 0", "port = 2"),
            "port: 0 -> 2 needs a restart",
        )
        assert len(lines) == 1, lines
        assert wm.status()["config"]["generation"] == 2
        wm.close_stdin()
        assert wm.wait() == 0


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('bind = "127.0.0.1"\nport = 0\nlog_level = "loud"\n', "log_level: must be one of"),
        ('bind = "127.0.0.1"\nport = 0\n[broadcast\n', "not valid TOML"),
        ('bind = "127.0.0.1"\nport = 0\nshutdown_grace = 1.0\nretry = 3\n', "unknown key"),
    ],
    ids=["bad-value", "bad-toml", "unknown-key"],
)
def test_a_file_that_does_not_validate_changes_nothing(
    tmp_path: Path, text: str, reason: str
) -> None:
    cfg = tmp_path / "wm.toml"
    cfg.write_text('bind = "127.0.0.1"\nport = 0\n')
    with WmProcess("--config", str(cfg), "--log-format", "plain") as wm:
        assert wm.recv()["method"] == "ready"
        start = _settled(wm)
        cfg.write_text(text)
        wm.proc.send_signal(signal.SIGHUP)
        line = wm.wait_stderr("reload refused")
        assert f"--config {cfg}: " in line and reason in line, line
        assert "nothing changed (configuration generation 1 stays)" in line
        assert wm.status()["config"]["generation"] == 1
        # One line: the next reload (the file repaired, unchanged from the start) says so next.
        cfg.write_text('bind = "127.0.0.1"\nport = 0\n')
        end = _settled(wm)
        assert wm.stderr_log[start : end - 1] == [line]
        wm.close_stdin()
        assert wm.wait() == 0


def test_the_documented_table_of_live_keys_matches_the_code() -> None:
    """docs/operations.md's reload table claims every key, and says restart only exactly where
    reload.is_live says so."""
    import re  # noqa: PLC0415

    from tests.support.source_tree import ROOT  # noqa: PLC0415

    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("### Reload on SIGHUP", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "no table in the reload section"
    claims: dict[str, bool] = {}  # key → live, as documented
    for row in rows:
        cells = row.split("|")
        keys_cell, effect = cells[1], cells[2]
        live = "restart only" not in effect
        exact = {k for k in re.findall(r"`([a-z_.*]+)`", keys_cell) if not k.endswith(".*")}
        for key in config.key_names():
            table = key.split(".", 1)[0] + ".*"
            leaf = key.rsplit(".", 1)[-1]
            by_table = f"`{table}`" in keys_cell and f"`{table}` but `{leaf}`" not in keys_cell
            if key in exact or (by_table and "." in key):
                assert key not in claims or key in exact, f"{key} documented twice"
                claims[key] = live
    for key in sorted(config.key_names()):
        assert key in claims, f"{key} is not in the reload table of docs/operations.md"
        assert claims[key] is reload.is_live(key), f"{key}: the docs say live={claims[key]}"


def test_the_metrics_listener_is_opened_and_closed_live(tmp_path: Path) -> None:
    """metrics on, then off, by reload: the listener answers, then no longer does."""
    import json  # noqa: PLC0415
    import re  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    cfg = tmp_path / "wm.toml"
    cfg.write_text('bind = "127.0.0.1"\nport = 0\n')
    with WmProcess("--config", str(cfg), "--log-format", "plain") as wm:
        assert wm.recv()["method"] == "ready"
        cfg.write_text('bind = "127.0.0.1"\nport = 0\nmetrics = "127.0.0.1:0"\n')
        wm.proc.send_signal(signal.SIGHUP)
        line = wm.wait_stderr("metrics endpoint listening on")
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert match, line
        url = f"http://127.0.0.1:{match.group(1)}"
        wm.wait_stderr("configuration reloaded (generation 2)")
        with urllib.request.urlopen(f"{url}/status", timeout=10) as answer:
            assert json.load(answer)["config"]["generation"] == 2
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
            exposition = answer.read().decode()
        assert "\nnvpair_wm_config_generation 2.0\n" in exposition
        assert "\nnvpair_wm_config_loaded_timestamp_seconds " in exposition
        cfg.write_text('bind = "127.0.0.1"\nport = 0\n')
        wm.proc.send_signal(signal.SIGHUP)
        wm.wait_stderr("configuration reloaded (generation 3)")
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{url}/healthz", timeout=10)
        wm.close_stdin()
        assert wm.wait() == 0


def test_a_key_set_back_to_unset_is_applied() -> None:
    running = config.replace(Config(), {"metrics": "127.0.0.1:9464"})
    plan = reload.plan(running, Config())
    assert [str(c) for c in plan.applied] == ['metrics: "127.0.0.1:9464" -> unset']
    assert plan.effective(running).metrics is None


def test_a_reload_of_the_journal_backoff_reaches_its_retries(tmp_path: Path) -> None:
    """journal.retry_backoff and retry_backoff_max are live: the next failed rewrite waits by
    the new bounds, not those the journal was opened with."""
    journal, _ = open_journal(tmp_path, JournalLimits(), TableLimits(), 0.0)
    assert journal is not None
    journal.set_limits(JournalLimits(retry_backoff=2.0, retry_backoff_max=3.0))
    health = journal.health
    health.fail("write to: EIO", 0.0, 100.0)  # the first failure of a run: the base pause
    assert health.retry_at == 102.0
    health.fail("rewrite: EIO", 0.0, 200.0)
    health.fail("rewrite: EIO", 0.0, 300.0)  # doubled, then capped by the new maximum
    assert health.retry_at == 303.0
    journal.close()


def test_a_reload_reaches_the_handshake_turns_the_capacity_check_and_the_journal(
    tmp_path: Path,
) -> None:
    """The wiring in node.py: each component built from the start's configuration takes the
    live keys a reload applies (a component left out keeps the old value)."""
    cdir = init_cluster(tmp_path / "cluster", ["node-a"])["node-a"]
    running = Config(cluster_dir=cdir)
    loaded = config.replace(
        running,
        {
            "http.max_handshakes_at_once": 3,
            "http.max_connections": 2000,
            "journal.retry_backoff": 2.0,
        },
    )

    async def run() -> None:
        node = WmNode(running, reread=lambda: loaded)
        try:
            done = await node.reload()
            assert done is not None and [c.key for c in done.applied] == [
                "http.max_connections",
                "http.max_handshakes_at_once",
                "journal.retry_backoff",
            ]
            assert node.server._turns.limit == 3
            assert node._capacity.limits.max_connections == 2000
            assert node.journal is not None and node.journal.health.backoff == 2.0
        finally:
            if node.journal is not None:
                node.journal.close()

    asyncio.run(run())


def test_a_burst_of_sighups_is_at_most_one_reload_behind_the_running_one() -> None:
    """Reloads run one at a time; signals that come while one runs and another waits are
    covered by the waiting one, so a burst queues no more than two reads of the file."""
    reads: list[int] = []

    def reread() -> Config:
        reads.append(1)
        return Config()

    async def run() -> None:
        node = WmNode(Config(), reread=reread)
        for _ in range(100):
            node._on_reload()
        assert len(node._reloads) == 2
        await asyncio.gather(*node._reloads)

    asyncio.run(run())
    assert len(reads) == 2


def test_a_reload_of_min_reconnect_interval_reaches_a_link_that_is_running(
    tmp_path: Path,
) -> None:
    """A link's task reads the broadcast limits where it uses them: after set_limits raises
    broadcast.min_reconnect_interval, a link failing every connection attempt (a listener that
    speaks no TLS) stops trying every few ms and waits the new interval."""
    node = init_cluster(tmp_path / "cluster", ["node-a"])["node-a"]
    cert, _ = make_self_signed("m-1")
    (node / "trusted" / "m-1.crt").write_bytes(cert)
    fast = BroadcastLimits(min_reconnect_interval=0.01, retry_base=0.01, retry_max_delay=0.02)

    async def run() -> tuple[int, int]:
        arrivals: list[float] = []
        fifth = asyncio.Event()

        def on_connect(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            arrivals.append(asyncio.get_running_loop().time())
            if len(arrivals) >= 5:
                fifth.set()
            w.close()

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        record = NodeRecord(
            nodeId="m-1",
            address="127.0.0.1",
            port=server.sockets[0].getsockname()[1],
            fingerprint=cert_fingerprint(cert),
        )
        bc = Broadcaster(Identity(node), PinSet(node / "trusted"), WorkloadTable().originated, fast)
        try:
            await bc.start()
            bc.update_nodes([record])
            async with asyncio.timeout(30):
                await fifth.wait()  # trying every few ms
            bc.set_limits(dataclasses.replace(fast, min_reconnect_interval=60.0))
            await asyncio.sleep(0.5)  # the attempt under way, if any, ends
            before = len(arrivals)
            await asyncio.sleep(1.5)  # the window in which the old interval tries again often
            return before, len(arrivals)
        finally:
            await bc.close(0)
            server.close()

    before, after = asyncio.run(run())
    assert after - before <= 1, (before, after)
