"""Configuration: ``--config FILE`` (TOML) and flags → Config, and the errors that say what to fix.

The parsing is tested in-process (it is pure); every user-visible error runs the real
``nvpair-wm`` process and checks exit status 2 and exactly one stderr line naming the flag.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nvpair_wm import config
from nvpair_wm.config import Config, ConfigError
from nvpair_wm.dedup import TableLimits
from nvpair_wm.http.core import Limits
from nvpair_wm.journal import JournalLimits
from nvpair_wm.local import BrokerLimits, DialSchedule
from nvpair_wm.outbox import BroadcastLimits
from nvpair_wm.pins import PinLimits
from tests.support.tools import tool
from tests.support.wm_process import WAIT, run_cli

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import config_table  # noqa: E402

# -- the keys -------------------------------------------------------------------------------------


def test_every_field_of_every_limits_dataclass_is_a_key() -> None:
    names = {key.name for key in config.every_key()}
    for section, cls in [
        ("broker", BrokerLimits),
        ("table", TableLimits),
        ("http", Limits),
        ("broadcast", BroadcastLimits),
        ("pins", PinLimits),
        ("journal", JournalLimits),
    ]:
        for f in dataclasses.fields(cls):
            assert f"{section}.{f.name}" in names
    for top in ("port", "bind", "ipc", "cluster_dir", "log_level", "max_frame", "shutdown_grace"):
        assert top in names


def test_every_key_has_a_unit_rule_and_a_meaning() -> None:
    for key in config.every_key():
        assert key.meaning, f"{key.name}: no trailing comment in its dataclass, no MEANINGS entry"
        base = config._base(key.kind)
        if base is float:
            assert key.unit == config.UNITS.get(key.name, "s"), key.name
        elif base is int and key.name != "port":
            assert key.unit in ("bytes", "count"), key.name


def test_units_of_a_few_keys() -> None:
    units = {key.name: key.unit for key in config.every_key()}
    assert units["http.max_body"] == units["broadcast.max_queue_bytes"] == "bytes"
    assert units["http.h2_connection_window"] == units["http.h2_initial_window_size"] == "bytes"
    assert units["http.h2_max_resets_per_window"] == units["table.max_workloads"] == "count"
    assert units["http.h2_max_decoded_header_list"] == "bytes"
    assert units["broker.dial_timeout"] == units["table.live_ttl"] == "s"
    assert units["journal.compact_growth"] == "ratio"  # a float, yet not seconds


def test_compact_growth_is_a_ratio_from_0_to_100() -> None:
    """Both ends accepted (0: compact_min_records alone decides), an integer too; the documented
    table shows it as a ratio, with its default."""
    for text, want in [("0", 0.0), ("100", 100.0), ("2", 2.0), ("2.5", 2.5)]:
        cfg = config.loads(f"[journal]\ncompact_growth = {text}\n")
        assert cfg.journal == JournalLimits(compact_growth=want), text
    assert "| `journal.compact_growth` | 3 | ratio | compact once " in config.markdown_table()


def test_documented_table_is_generated_from_the_dataclasses() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert config_table.render(text) == text, "stale: run python scripts/config_table.py"
    for key in config.every_key():
        assert f"| `{key.name}` |" in text


def test_the_documented_defaults_paste_as_toml() -> None:
    """Each default in the table is what a file would say: ``true``, not Python's ``True``."""
    for key in config.every_key():
        if isinstance(key.default, bool):
            row = next(r for r in config.markdown_table().splitlines() if f"`{key.name}`" in r)
            shown = row.split("|")[2].strip()
            leaf = key.name.rsplit(".", 1)[-1]
            assert shown == config.toml_value(key.default), row
            table = key.name.rsplit(".", 1)[0]
            assert config.loads(f"[{table}]\n{leaf} = {shown}\n") is not None


def test_the_documented_list_of_tables_names_every_table() -> None:
    """The prose of docs/configuration.md lists each ``[table]`` of the file."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    prose = text.split("## The configuration file", 1)[1].split("```toml", 1)[0]
    tables = {key.name.split(".", 1)[0] for key in config.every_key() if "." in key.name}
    assert tables, "no tables found"
    for table in sorted(tables):
        assert f"`[{table}]`" in prose, f"[{table}] is not in the list of tables"


def test_documented_example_file_parses() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text[text.index("## The configuration file") :]
    block = re.search(r"```toml\n(.*?)```", section, re.DOTALL)
    assert block is not None
    cfg = config.loads(block.group(1))
    assert cfg.broadcast.protocols == ("http/1.1",) and cfg.broker.dial_timeout == 30.0


# -- parsing --------------------------------------------------------------------------------------


def test_defaults_round_trip_through_toml() -> None:
    text = config.dumps(Config())
    assert config.loads(text) == Config()
    assert tomllib.loads(text)["broadcast"]["max_in_flight"] == BroadcastLimits().max_in_flight


def test_every_key_can_be_set_from_a_file() -> None:
    """Each key set to a valid non-default value arrives in the Config where its owner reads it."""
    for key in config.every_key():
        value = _other_value(key)
        cfg = config.loads(config.dumps({key.name: value}))
        got: Any = cfg
        for part in key.name.split("."):
            got = getattr(got, part)
        expected = tuple(value) if isinstance(value, list) else value
        assert str(got) == str(expected) and got != key.default, key.name


def _other_value(key: config.Key) -> Any:
    base = config._base(key.kind)
    if base is bool:
        return not key.default
    if key.name == "log_level":
        return "debug"
    if key.name == "log_format":
        return "json"
    if key.name == "broadcast.protocols":
        return ["http/1.1"]
    if key.name == "tls.min_version":
        return "1.3"
    if key.name == "port":
        return 0
    if key.name == "broadcast.retry_base":
        return 0.2  # stays below retry_max_delay
    if key.name == "broker.dial_backoff":
        return 0.1  # stays below dial_backoff_max
    if base is float:
        return key.default + 1.5
    if base is int:
        return 1 if key.default is None else key.default + 1  # unset: follows the members
    return "/some/where" if key.name in ("ipc", "cluster_dir") else "127.0.0.1"


def test_ints_are_accepted_for_seconds() -> None:
    assert config.loads("[http]\nidle_timeout = 7\n").http.idle_timeout == 7.0


@pytest.mark.parametrize(
    ("text", "key", "needle"),
    [
        ("[broadcast]\nmax_inflight = 3\n", "broadcast.max_inflight", "did you mean"),
        ("nope = 1\n", "nope", "unknown key at the top level"),
        ("[nope]\nx = 1\n", "nope", "unknown key"),
        ('[broadcast]\nmax_in_flight = "3"\n', "broadcast.max_in_flight", "expected an integer"),
        ("[broadcast]\nmax_in_flight = 1.5\n", "broadcast.max_in_flight", "expected an integer"),
        ("[broadcast]\nmax_in_flight = true\n", "broadcast.max_in_flight", "expected an integer"),
        ("[broadcast]\nmax_in_flight = 0\n", "broadcast.max_in_flight", "at least 1"),
        ("[http]\nidle_timeout = 0\n", "http.idle_timeout", "greater than 0"),
        ("[http]\nidle_timeout = -1.0\n", "http.idle_timeout", "greater than 0"),
        ("[http]\nidle_timeout = nan\n", "http.idle_timeout", "finite"),
        ("[http]\nidle_timeout = 1e300\n", "http.idle_timeout", "at most"),
        ("[journal]\ncompact_growth = -0.5\n", "journal.compact_growth", "at least 0, got -0.5"),
        ("[journal]\ncompact_growth = 100.5\n", "journal.compact_growth", "at most 100, got"),
        ('[journal]\ncompact_growth = "3"\n', "journal.compact_growth", "expected a number, got"),
        ("[http]\nh2_max_frame_size = 1000\n", "http.h2_max_frame_size", "at least 16384"),
        ("[http]\nmax_connections = 4294967296\n", "http.max_connections", "at most"),
        ("port = 65536\n", "port", "at most 65535"),
        ("http = 3\n", "http", "expected a table"),
        ("[broadcast.protocols]\n", "broadcast.protocols", "got a table"),
        ('log_level = "loud"\n', "log_level", "one of error, warn, info, debug"),
        ('[broadcast]\nprotocols = ["h3"]\n', "broadcast.protocols", "one of h2, http/1.1"),
        ("[broadcast]\nprotocols = []\n", "broadcast.protocols", "must not be empty"),
        ('[broadcast]\nprotocols = ["h2", "h2"]\n', "broadcast.protocols", "twice"),
        ('bind = ""\n', "bind", "must not be empty"),
        ("[broadcast]\nretry_base = 9.0\n", "broadcast.retry_base", "above"),
        ("[broker]\ndial_backoff = 2.0\n", "broker.dial_backoff", "above"),
        ("port = \n", "", "not valid TOML"),
    ],
)
def test_bad_values_name_the_key_and_what_is_wrong(text: str, key: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.loads(text)
    assert err.value.key == key
    assert needle in err.value.reason, err.value.reason


def test_replace_sets_dotted_keys_and_checks_them() -> None:
    cfg = config.replace(Config(), {"broker.queue_frames": 7, "port": 0})
    assert (cfg.broker.queue_frames, cfg.port) == (7, 0)
    with pytest.raises(ConfigError, match=r"broker\.queue_frames"):
        config.replace(Config(), {"broker.queue_frames": 0})


# -- the dial schedule (sans-IO) ------------------------------------------------------------------


def test_dial_schedule_doubles_from_the_base_to_the_cap_within_the_budget() -> None:
    sched = DialSchedule(BrokerLimits(dial_timeout=3.0, dial_backoff=0.05, dial_backoff_max=0.4), 0)
    now, pauses = 0.0, []
    while (pause := sched.failed(now)) is not None:
        pauses.append(pause)
        now += pause
    assert pauses[:5] == [0.05, 0.1, 0.2, 0.4, 0.4]
    assert abs(now - 3.0) < 1e-9  # the last pause is cut to end at the budget, then one attempt
    assert sched.attempts == len(pauses) + 1


def test_dial_schedule_with_no_budget_tries_once() -> None:
    sched = DialSchedule(BrokerLimits(dial_timeout=0.0), 5.0)
    assert sched.failed(5.0) is None and sched.attempts == 1


# -- the real process: flags over the file --------------------------------------------------------


def _printed(*args: str) -> dict[str, Any]:
    done = run_cli(*args, "--print-config")
    assert done.returncode == 0, done.stderr
    return tomllib.loads(done.stdout)


def test_flags_override_the_file_which_overrides_the_defaults(tmp_path: Path) -> None:
    file = tmp_path / "wm.toml"
    file.write_text(
        'port = 15000\nlog_level = "warn"\n[broker]\nqueue_frames = 5\n'
        "[broadcast]\nmax_in_flight = 3\n"
    )
    printed = _printed("--config", str(file), "--broker-queue", "9", "--port", "0")
    assert printed["port"] == 0 and printed["broker"]["queue_frames"] == 9  # the flags
    assert printed["log_level"] == "warn" and printed["broadcast"]["max_in_flight"] == 3  # file
    assert printed["http"]["idle_timeout"] == Limits().idle_timeout  # default
    assert "max_connections" not in printed["http"]  # unset: it follows the member count
    assert config.loads(config.dumps(config.parse(printed))) == config.parse(printed)


def test_a_file_setting_limits_runs(tmp_path: Path) -> None:
    """The daemon runs with the file's values (stdin is closed: ready, then exit 0)."""
    file = tmp_path / "wm.toml"
    file.write_text(f'port = 0\nbind = "127.0.0.1"\ncluster_dir = "{tmp_path}"\n')
    done = run_cli("--config", str(file))
    assert done.returncode == 0, done.stderr
    assert '"method":"ready"' in done.stdout.splitlines()[0]


# -- the real process: every value that cannot work is exit 2 and one line naming the flag --------


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can traverse (pytest's tmp_path is 0700 to root)."""
    path = Path(tempfile.mkdtemp(prefix=f"nvpair-config-{os.getpid()}-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for p in path.rglob("*"):
            p.chmod(0o755)
        shutil.rmtree(path)


def _bad_config(tmp: Path, text: str) -> str:
    path = tmp / "bad.toml"
    path.write_text(text)
    return str(path)


def _trusted_is_a_file(tmp: Path) -> str:
    (tmp / "trusted").write_text("not a directory\n")
    return str(tmp)


def _a_file(tmp: Path) -> str:
    (tmp / "file").write_text("")
    return str(tmp / "file")


BAD: list[tuple[str, Callable[[Path], list[str]], str, str]] = [
    ("bad address", lambda t: ["--bind", "999.1.1.1"], "--bind 999.1.1.1", "not a valid"),
    ("not our address", lambda t: ["--bind", "192.0.2.1"], "--bind 192.0.2.1", "this host"),
    ("no such host", lambda t: ["--bind", "no-such-host.invalid"], "--bind", "resolve"),
    ("port range", lambda t: ["--port", "65536"], "--port", "between 0 and 65535"),
    ("port negative", lambda t: ["--port", "-1"], "--port", "between 0 and 65535"),
    ("port word", lambda t: ["--port", "http"], "--port", "not a port number"),
    ("no cluster dir", lambda t: ["--cluster-dir", str(t / "nope")], "--cluster-dir", "no such"),
    ("cluster dir file", lambda t: ["--cluster-dir", _a_file(t)], "--cluster-dir", "not a dir"),
    (
        "trusted/ a file",
        lambda t: ["--cluster-dir", _trusted_is_a_file(t)],
        "--cluster-dir",
        "trusted is not a directory",
    ),
    ("ipc no dir", lambda t: ["--ipc", str(t / "no" / "b.sock")], "--ipc", "does not exist"),
    ("ipc a directory", lambda t: ["--ipc", str(t)], "--ipc", "is a directory"),
    ("ipc too long", lambda t: ["--ipc", str(t / ("x" * 120))], "--ipc", "longer than"),
    ("broker queue", lambda t: ["--broker-queue", "0"], "--broker-queue", "at least 1"),
    ("log level", lambda t: ["--log-level", "loud"], "--log-level", "invalid choice"),
    ("unknown flag", lambda t: ["--bogus"], "--bogus", "unrecognized"),
    ("config missing", lambda t: ["--config", str(t / "no.toml")], "--config", "cannot read"),
    (
        "config syntax",
        lambda t: ["--config", _bad_config(t, "port = \n")],
        "--config",
        "not valid TOML",
    ),
    (
        "config unknown key",
        lambda t: ["--config", _bad_config(t, "[http]\nidle = 3\n")],
        "--config",
        "http.idle: unknown key",
    ),
    (
        "config wrong type",
        lambda t: ["--config", _bad_config(t, 'port = "x"\n')],
        "--config",
        "port: expected an integer",
    ),
    (
        "config out of range",
        lambda t: ["--config", _bad_config(t, "[table]\nmax_workloads = 0\n")],
        "--config",
        "table.max_workloads: must be at least 1",
    ),
    (
        "config growth out of range",
        lambda t: ["--config", _bad_config(t, "[journal]\ncompact_growth = 101\n")],
        "--config",
        "journal.compact_growth: must be at most 100, got 101",
    ),
    (
        "config bad bind",
        lambda t: ["--config", _bad_config(t, 'bind = "999.1.1.1"\n')],
        "--config",
        ": bind: not a valid",
    ),
]


@pytest.mark.parametrize(("label", "args", "flag", "needle"), BAD, ids=[b[0] for b in BAD])
def test_a_value_that_cannot_work_is_exit_2_and_one_line_naming_the_flag(
    tmp_path: Path, label: str, args: Callable[[Path], list[str]], flag: str, needle: str
) -> None:
    argv = args(tmp_path)
    done = run_cli(*argv)
    assert done.returncode == 2, (argv, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert flag in lines[0] and needle in lines[0], lines[0]
    if flag == "--config" and "cannot read" not in needle:
        assert str(tmp_path / "bad.toml") in lines[0]  # the file is named


def _wm_argv(cluster_dir: Path) -> list[str]:
    return [sys.executable, "-m", "nvpair_wm", "--cluster-dir", str(cluster_dir), "--port", "0"]


def test_unreadable_trusted_dir_is_exit_2_naming_the_flag(shared_dir: Path) -> None:
    """Root reads anything through its capabilities, so as root the daemon runs as root with
    none (setpriv, util-linux): still the owner of the test's files and of the checkout (which
    may sit in a directory other users cannot enter), but bound by trusted/'s mode 000."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = tool("setpriv", "util-linux")
        prefix = [setpriv, "--bounding-set=-all", "--inh-caps=-all"]
    trusted = shared_dir / "trusted"
    trusted.mkdir()
    trusted.chmod(0)
    done = subprocess.run(
        [*prefix, *_wm_argv(shared_dir)],
        capture_output=True,
        text=True,
        timeout=WAIT,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"--cluster-dir {shared_dir}: cannot read {trusted}: Permission denied" in lines[0]


def test_a_missing_identity_in_an_existing_cluster_dir_stays_a_warning(tmp_path: Path) -> None:
    done = run_cli("--cluster-dir", str(tmp_path), "--port", "0", "--bind", "127.0.0.1")
    assert done.returncode == 0, done.stderr
    assert "no cluster identity" in done.stderr and "node.crt is missing" in done.stderr


def test_a_host_name_of_this_host_is_accepted_by_bind() -> None:
    done = run_cli("--bind", "localhost", "--port", "0")
    assert done.returncode == 0, done.stderr
    assert '"method":"ready"' in done.stdout


def test_the_port_in_use_names_the_address_and_exits_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = run_cli("--bind", "127.0.0.1", "--port", str(port))
    assert done.returncode == 1, done.stderr
    why = f"cannot listen on --port {port} (--bind 127.0.0.1): Address already in use"
    assert why in done.stderr
