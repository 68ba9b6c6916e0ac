"""The local channel end to end: a real nvpair-wm subprocess on stdio, and one dialing a Unix
socket that the test listens on."""

from __future__ import annotations

import contextlib
import json
import queue
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from nvpair_wm_schema.contract import CONTRACT_VERSION

from nvpair_wm import __version__
from tests.support.wm_process import WAIT, WmProcess, ipc_broker, run_cli


def info(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "7",
        "model": "llama-3.1-8b-instruct",
        "engine": "vllm",
        "runId": "r-1",
        "state": "queued",
        "originatedFrom": "node-a",
        "createdAt": 1764690000000,
        "startedAt": None,
        "completedAt": None,
        "error": None,
        "seq": 1,
    }
    base.update(overrides)
    return base


def lifecycle(method: str, workload: dict[str, Any], rid: Any = None) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "jsonrpc": "2.0",
        "method": method,
        "params": {"workloadInfo": workload},
    }
    if rid is not None:
        frame["id"] = rid
    return frame


@pytest.fixture
def wm() -> Any:
    with WmProcess("--port", "0", "--log-level", "debug") as proc:
        ready = proc.recv()
        params = {"version": __version__, "contractVersion": CONTRACT_VERSION}
        assert ready == {"jsonrpc": "2.0", "method": "ready", "params": params}
        yield proc


def error_of(reply: dict[str, Any]) -> tuple[Any, int, dict[str, Any]]:
    assert reply["jsonrpc"] == "2.0"
    assert "result" not in reply
    return reply["id"], reply["error"]["code"], reply["error"].get("data", {})


def test_ready_is_first_and_eof_exits_zero(wm: WmProcess) -> None:
    wm.close_stdin()
    assert wm.wait() == 0
    assert wm.stdout_log == [
        json.dumps(
            {
                "method": "ready",
                "jsonrpc": "2.0",
                "params": {"version": __version__, "contractVersion": CONTRACT_VERSION},
            },
            separators=(",", ":"),
        ).encode()
        + b"\n"
    ]


def test_each_kind_of_bad_frame_gets_its_exact_error(wm: WmProcess) -> None:
    wm.send(b'{"jsonrpc": "2.0", "method": \n')
    rid, code, _ = error_of(wm.recv())
    assert (rid, code) == (None, -32700)

    wm.send(b"[]\n")
    rid, code, data = error_of(wm.recv())
    assert (rid, code, data["reason"]) == (None, -32600, "empty batch")

    wm.send_frame({"jsonrpc": "1.0", "method": "workload:started", "params": {}, "id": 3})
    assert error_of(wm.recv())[:2] == (3, -32600)

    wm.send_frame({"jsonrpc": "2.0", "method": 42, "id": "m"})
    assert error_of(wm.recv())[:2] == ("m", -32600)

    wm.send_frame({"jsonrpc": "2.0", "method": "workload:exploded", "params": {}, "id": 4})
    assert error_of(wm.recv())[:2] == (4, -32601)

    wm.send_frame(lifecycle("workload:started", info(seq="2"), rid=5))
    rid, code, data = error_of(wm.recv())
    assert (rid, code) == (5, -32602)
    assert data["path"] == "$.params.workloadInfo.seq"
    assert "int" in data["reason"]

    wm.send_frame(lifecycle("workload:started", info(scheduledOn=None), rid=6))
    rid, code, data = error_of(wm.recv())
    assert (rid, code, data["path"]) == (6, -32602, "$.params.workloadInfo.scheduledOn")

    wm.send_frame({"jsonrpc": "2.0", "method": "workload:started", "params": [1], "id": 8})
    assert error_of(wm.recv())[:2] == (8, -32602)


def test_oversize_line_is_refused_and_the_stream_resynchronises(wm: WmProcess) -> None:
    big = lifecycle("workload:submitted", info(error="x" * (1 << 20)), rid=1)
    wm.send(json.dumps(big).encode() + b"\n")
    rid, code, _ = error_of(wm.recv())
    assert (rid, code) == (None, -32000)
    wm.send_frame(lifecycle("workload:submitted", info(id="after"), rid=2))
    assert wm.recv() == {"jsonrpc": "2.0", "id": 2, "result": {"outcome": "applied"}}


def test_valid_frames_around_bad_ones_are_processed(wm: WmProcess) -> None:
    good1 = lifecycle("workload:submitted", info(id="a"), rid="g1")
    good2 = lifecycle("workload:submitted", info(id="b"), rid="g2")
    wm.send(json.dumps(good1).encode() + b"\n{nope\n" + json.dumps(good2).encode() + b"\r\n")
    assert wm.recv()["result"] == {"outcome": "applied"}
    assert error_of(wm.recv())[1] == -32700
    assert wm.recv() == {"jsonrpc": "2.0", "id": "g2", "result": {"outcome": "applied"}}
    counters = wm.status()["counters"]
    assert counters["workloads"] == 2
    assert counters["invalid"] == 1


def test_batch_answers_requests_only_and_in_order(wm: WmProcess) -> None:
    batch = [
        lifecycle("workload:submitted", info(id="n1")),  # notification: no answer
        lifecycle("workload:submitted", info(id="r1"), rid=1),
        {"jsonrpc": "2.0", "method": "nope", "id": 2},
        {"jsonrpc": "2.0", "method": "nope"},  # invalid notification: no answer
        lifecycle("workload:submitted", info(id="r1"), rid=3),  # duplicate of the second
    ]
    wm.send_frame(batch)
    replies = wm.recv()
    assert [r["id"] for r in replies] == [1, 2, 3]
    assert replies[0]["result"] == {"outcome": "applied"}
    assert replies[1]["error"]["code"] == -32601
    assert replies[2]["result"] == {"outcome": "duplicate"}


def test_invalid_notification_gets_no_response_but_a_warning(wm: WmProcess) -> None:
    wm.send_frame(lifecycle("workload:started", info(seq=0)))
    line = wm.wait_stderr("dropped invalid notification")
    assert "-32602" in line and "$.params.workloadInfo.seq" in line
    # Nothing was written for it: the next frame out is the status response.
    counters = wm.status()["counters"]
    assert counters["invalid"] == 1


def test_local_events_are_never_echoed_and_duplicates_counted(wm: WmProcess) -> None:
    for _ in range(3):
        wm.send_frame(lifecycle("workload:submitted", info(prompt="secret")))
    wm.send_frame(lifecycle("workload:submitted", info(seq=0)))  # invalid
    status = wm.status()
    assert status["counters"]["duplicates"] == 2
    assert status["counters"]["workloads"] == 1
    assert status["hasIdentity"] is False
    assert all(b"secret" not in line for line in wm.stdout_log)
    assert all(b"upsert" not in line for line in wm.stdout_log)


def test_stdout_carries_only_json_rpc_frames(wm: WmProcess) -> None:
    wm.send(b"garbage\n")
    assert error_of(wm.recv())[1] == -32700
    wm.send_frame(lifecycle("workload:errored", info(error="boom", seq=2), rid=1))
    assert wm.recv()["result"] == {"outcome": "applied"}
    wm.status()
    wm.close_stdin()
    assert wm.wait() == 0
    for line in wm.stdout_log:
        frame = json.loads(line)
        assert frame["jsonrpc"] == "2.0"
    assert any("stopped" in line for line in wm.stderr_log)


def test_sigterm_exits_zero(wm: WmProcess) -> None:
    wm.status()  # the process is up and serving
    wm.terminate(signal.SIGTERM)
    assert wm.wait() == 0
    wm.wait_stderr("SIGTERM received")


def test_unix_socket_ipc(tmp_path: Path) -> None:
    path = tmp_path / "broker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(1)
        listener.settimeout(WAIT)
        with WmProcess("--ipc", str(path), "--port", "0") as wm:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(WAIT)
                reader = conn.makefile("rb")
                assert json.loads(reader.readline())["method"] == "ready"
                conn.sendall(b"{oops\n")
                assert json.loads(reader.readline())["error"]["code"] == -32700
                frame = lifecycle("workload:completed", info(seq=3), rid=9)
                conn.sendall(json.dumps(frame).encode() + b"\n")
                assert json.loads(reader.readline()) == {
                    "jsonrpc": "2.0",
                    "id": 9,
                    "result": {"outcome": "applied"},
                }
                conn.shutdown(socket.SHUT_WR)
                assert reader.readline() == b""  # the manager closed its side too
            assert wm.wait() == 0
            assert wm.stdout_log == []  # nothing on stdout in --ipc mode


def test_version_and_help() -> None:
    done = run_cli("--version")
    assert (done.returncode, done.stdout.strip()) == (
        0,
        f"nvpair-wm {__version__} (contract {CONTRACT_VERSION})",
    )
    done = run_cli("--help")
    assert done.returncode == 0
    for flag in ("--port", "--ipc", "--cluster-dir", "--log-level", "--version"):
        assert flag in done.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--port", "65536"], "must be between 0 and 65535"),
        (["--port", "http"], "not a port number"),
        (["--log-level", "loud"], "invalid choice"),
        (["--bogus"], "unrecognized arguments"),
        (["--broker-queue", "0"], "must be at least 1"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: list[str], needle: str) -> None:
    done = run_cli(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


def _await_retry_after(wm: WmProcess, seconds: float) -> str:
    """The daemon's debug line for a failed dial attempt made ``seconds`` or more after the
    first one (the event that says "the broker is late by that much and it is still trying")."""
    pattern = re.compile(r"broker not reachable at --ipc .* \(attempt (\d+), ([0-9.]+) s\)")
    deadline = time.monotonic() + WAIT
    seen = 0
    while True:
        log = wm.stderr_log
        for line in log[seen:]:
            m = pattern.search(line)
            if m and float(m.group(2)) >= seconds:
                return line
        seen = len(log)
        left = deadline - time.monotonic()
        assert left > 0, "no retry logged:\n" + "\n".join(wm.stderr_log)
        with contextlib.suppress(queue.Empty):
            wm.stderr_lines.get(timeout=left)  # wakes on the next line


def test_ipc_dial_waits_for_a_broker_that_listens_half_a_second_late(tmp_path: Path) -> None:
    path = tmp_path / "broker.sock"
    with WmProcess("--ipc", str(path), "--port", "0", "--log-level", "debug") as wm:
        line = _await_retry_after(wm, 0.5)  # still dialing, with backoff, 0.5 s in
        assert "No such file or directory" in line
        with ipc_broker(path) as (conn, reader):
            conn.sendall(b'{"jsonrpc":"2.0","method":"manager:status","id":1}\n')
            assert json.loads(reader.readline())["id"] == 1
            conn.shutdown(socket.SHUT_WR)
            assert reader.readline() == b""
        assert wm.wait() == 0
    attempts = [ln for ln in wm.stderr_log if "broker not reachable" in ln]
    assert len(attempts) >= 4  # 0, 0.05, 0.15, 0.35, 0.75 s: backoff doubling from 50 ms


@pytest.mark.serial  # a wall-clock bound: run alone (Makefile: test)
@pytest.mark.parametrize("kind", ["missing", "not listening"])
def test_ipc_dial_gives_up_after_its_budget_in_one_line_exit_1(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "broker.sock"
    config = tmp_path / "wm.toml"
    config.write_text("[broker]\ndial_timeout = 0.4\ndial_backoff = 0.05\n")
    with contextlib.ExitStack() as stack:
        if kind == "not listening":  # the socket file is there, nobody accepts: ECONNREFUSED
            sock = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            sock.bind(str(path))
        started = time.monotonic()
        done = run_cli("--ipc", str(path), "--port", "0", "--config", str(config))
        took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    waiting, *lines = done.stderr.strip().splitlines()  # the wait, said at once, then the end
    assert "waiting for the broker" in waiting and "up to 0.4 s" in waiting, waiting
    assert len(lines) == 1, lines
    reason = "No such file or directory" if kind == "missing" else "Connection refused"
    assert f"--ipc {path}" in lines[0] and re.search(r"\d+ attempts in 0\.\d s", lines[0])
    assert reason in lines[0] and "dial_timeout 0.4 s" in lines[0], lines[0]
    assert done.stdout == ""
    assert 0.4 <= took < 5.0, took  # the budget, plus the interpreter's start


def test_a_response_from_the_broker_is_logged_not_answered(wm: WmProcess) -> None:
    wm.send_frame({"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": "x"}})
    wm.wait_stderr("unexpected JSON-RPC response")
    # No error went back (that could ping-pong): the next frame out is the status response.
    assert wm.status()["counters"]["invalid"] == 1


def test_missing_params_is_invalid_params(wm: WmProcess) -> None:
    wm.send_frame({"jsonrpc": "2.0", "method": "workload:started", "id": 4})
    rid, code, data = error_of(wm.recv())
    assert (rid, code, data["path"]) == (4, -32602, "$.params")


def test_every_documented_flag_is_accepted(tmp_path: Path) -> None:
    """Each flag of docs/configuration.md's table parses and the process starts (stdin closes)."""
    config = tmp_path / "wm.toml"
    config.write_text("[broadcast]\nmax_in_flight = 4\n")
    done = run_cli(
        "--port", "0", "--bind", "127.0.0.1", "--broker-queue", "7",
        "--cluster-dir", str(tmp_path), "--log-level", "warn", "--config", str(config),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["method"] == "ready"


def test_an_out_of_range_id_is_not_echoed(wm: WmProcess) -> None:
    wm.send(b'{"jsonrpc":"2.0","method":"manager:status","id":9007199254740992}\n')
    rid, code, data = error_of(wm.recv())
    assert (rid, code) == (None, -32600)
    assert "2^53" in data["reason"]
