"""A cluster of real ``nvpair-wm`` processes on loopback, each with its broker played by the test.

Each node gets its own ``--cluster-dir`` (made by :mod:`nvpair_wm.clusterdir`), binds
127.0.0.1 on a free port, and is told about the others with ``nodes:update`` records carrying
their real ports, as a broker would. Helpers wait for frames on a node's broker side (or for a
line in its stderr log) with a deadline; nothing sleeps to synchronise. Where there is no event
to wait for, :meth:`Node.poll_status` polls ``manager:status`` until a condition holds, with a
bounded deadline.

Limits: ``Node(..., broadcast={...})`` starts the process with some fields of
:class:`nvpair_wm.outbox.BroadcastLimits` overridden (say, a short retry budget, so that a test
can exhaust it in a second or two), and ``config={"dotted.key": value}`` with any other key: the
harness writes them to a TOML file next to the cluster directory and passes ``--config``, as a
user would.
"""

from __future__ import annotations

import json
import queue
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from nvpair_wm.clusterdir import cert_fingerprint, init_cluster
from nvpair_wm.config import dumps
from nvpair_wm.pins import CERT_FILE, KEY_FILE
from tests.support.polling import eventually
from tests.support.wm_process import WAIT, WmProcess

POLL_EVERY = 0.05  # pause between two manager:status polls (a poll interval, not a sync sleep)


class Node:
    def __init__(
        self,
        name: str,
        cluster_dir: Path,
        port: int = 0,
        *extra: str,
        broadcast: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
        use_cluster_dir: bool = True,
        program: list[str] | None = None,
        log_level: str | None = "debug",
    ) -> None:
        self.name = name
        self.log_level = log_level  # --log-level (None: none, the --config file's holds)
        self.program = program  # another daemon than this tree's (see WmProcess); settable
        self.cluster_dir = cluster_dir
        self.extra = extra
        self.requested_port = port
        settings = {f"broadcast.{k}": v for k, v in (broadcast or {}).items()}
        settings.update(config or {})
        self.config_file: Path | None = None
        if settings:
            self.config_file = cluster_dir.parent / f"{name}.toml"
            self.config_file.write_text(dumps(settings))
        self.use_cluster_dir = use_cluster_dir  # False: run without --cluster-dir
        self.proc: WmProcess | None = None
        self.port = 0
        self.fingerprint = cert_fingerprint((cluster_dir / CERT_FILE).read_bytes())
        self.seen: list[dict[str, Any]] = []  # every notification from this node's manager
        self.runs: list[WmProcess] = []  # every process this node ran (their stderr logs stay)
        self._stash = cluster_dir.parent / f".{name}-identity"

    # -- process ----------------------------------------------------------------------------

    def spawn(self) -> None:
        """Start the process (without waiting for ``ready``): a fresh broker, nothing seen."""
        args = ["--bind", "127.0.0.1"]
        if self.use_cluster_dir:
            args += ["--cluster-dir", str(self.cluster_dir)]
        args += ["--port", str(self.port or self.requested_port)]
        if self.log_level is not None:
            args += ["--log-level", self.log_level]
        if self.config_file is not None:
            args += ["--config", str(self.config_file)]
        self.seen = []
        self.proc = WmProcess(*args, *self.extra, program=self.program)
        self.runs.append(self.proc)

    def await_ready(self) -> None:
        assert self.recv()["method"] == "ready"
        self.port = self.status()["port"]

    def start(self) -> None:
        self.spawn()
        self.await_ready()

    @property
    def wm(self) -> WmProcess:
        assert self.proc is not None, f"{self.name} is not running"
        return self.proc

    def signal(self, sig: int) -> None:
        self.wm.proc.send_signal(sig)

    def kill(self) -> None:
        """``kill -9`` (a no-op when not running); the broker side is closed with it."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.__exit__(None, None, None)
            self.proc = None

    def stop(self) -> int:
        """Close the broker channel (EOF) and return the exit status."""
        wm = self.wm
        wm.close_stdin()
        code = wm.wait()
        wm.__exit__(None, None, None)
        self.proc = None
        return code

    # -- broker side ------------------------------------------------------------------------

    def recv(self, timeout: float = WAIT) -> Any:
        return self.wm.recv(timeout)

    def send(self, frame: dict[str, Any]) -> None:
        self.wm.send_frame(frame)

    def send_all(self, frames: Iterable[dict[str, Any]]) -> None:
        """Several frames in one write (the manager reads them as one burst)."""
        self.wm.send(b"".join(json.dumps(f).encode() + b"\n" for f in frames))

    def status(self) -> Any:
        """manager:status; notifications that arrive first are kept in ``seen``."""
        return self.wm.request("manager:status", keep=self.seen)["result"]

    def poll_status(
        self, cond: Callable[[Any], bool], timeout: float = WAIT, what: str = ""
    ) -> Any:
        """Poll manager:status until ``cond(status)`` holds; for conditions no frame announces.

        Bounded by ``timeout``; between two polls it pauses ``POLL_EVERY`` so as not to keep the
        node busy answering. Returns the status that satisfied ``cond``.
        """
        last: list[Any] = []

        def satisfied() -> Any:
            last[:] = [self.status()]
            return last[0] if cond(last[0]) else None

        def failure() -> str:
            tail = "\n".join(self.wm.stderr_log[-15:])
            return (
                f"{self.name}: {what or 'condition'} not reached; last status: "
                f"{json.dumps(last[0])}\nstderr tail:\n{tail}"
            )

        return eventually(satisfied, failure, within=timeout, every=POLL_EVERY)

    def peer(self, status: Any, name: str) -> Any:
        """The PeerStatus for ``name`` in a manager:status result, or None."""
        return next((p for p in status["peers"] if p["nodeId"] == name), None)

    def record(self, address: str = "127.0.0.1") -> dict[str, Any]:
        return {
            "nodeId": self.name,
            "address": address,
            "port": self.port,
            "fingerprint": self.fingerprint,
        }

    def drain(self) -> None:
        """Move every frame already written by the manager into ``seen`` (non-blocking)."""
        while True:
            try:
                line = self.wm.raw_lines.get_nowait()
            except queue.Empty:
                return
            self.seen.append(json.loads(line))

    def wait_for(
        self, match: Callable[[dict[str, Any]], bool], timeout: float = WAIT
    ) -> dict[str, Any]:
        """The first frame (already seen or arriving within ``timeout``) that matches."""
        frame: dict[str, Any]
        for frame in self.seen:
            if match(frame):
                return frame
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                frame = json.loads(self.wm.raw_lines.get(timeout=left))
            except queue.Empty:
                break
            self.seen.append(frame)
            if match(frame):
                return frame
        raise AssertionError(
            f"{self.name}: no matching frame within {timeout}s; seen {len(self.seen)} frames;"
            f" stderr tail:\n" + "\n".join(self.wm.stderr_log[-15:])
        )

    def wait_until(
        self, done: Callable[[list[dict[str, Any]]], bool], timeout: float = WAIT
    ) -> None:
        """Wait for frames until ``done(seen)`` holds (checked after each new frame)."""
        deadline = time.monotonic() + timeout
        while not done(self.seen):
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise queue.Empty
                self.seen.append(json.loads(self.wm.raw_lines.get(timeout=left)))
            except queue.Empty:
                raise AssertionError(
                    f"{self.name}: condition not met within {timeout}s; seen {len(self.seen)} "
                    "frames; stderr tail:\n" + "\n".join(self.wm.stderr_log[-15:])
                ) from None

    def upserts(self) -> list[dict[str, Any]]:
        return [
            f["params"]["workloadInfo"] for f in self.seen if f.get("method") == "workloads:upsert"
        ]

    def removals(self) -> list[dict[str, Any]]:
        return [f["params"] for f in self.seen if f.get("method") == "workloads:remove"]

    def view(self) -> dict[tuple[str, str], dict[str, Any]]:
        """The broker's view from what it was told: (origin, id) → newest workloadInfo,
        without removed workloads (a removal applies to what came before it)."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for f in self.seen:
            if f.get("method") == "workloads:upsert":
                info = f["params"]["workloadInfo"]
                out[(info["originatedFrom"], info["id"])] = info
            elif f.get("method") == "workloads:remove":
                p = f["params"]
                out.pop((p["originatedFrom"], p["workloadId"]), None)
        return out

    # -- logs -------------------------------------------------------------------------------

    def wait_log(self, needle: str, timeout: float = WAIT) -> str:
        """The first stderr line (already logged or arriving within ``timeout``) with ``needle``."""
        return self.wm.wait_stderr(needle, timeout)

    def log_lines(self, needle: str) -> list[str]:
        return [line for line in self.wm.stderr_log if needle in line]

    def errors(self) -> list[str]:
        """ERROR lines and tracebacks in the stderr of every process this node ran."""
        return [
            line
            for run in self.runs
            for line in run.stderr_log
            if " ERROR " in line or line.startswith("Traceback")
        ]

    # -- identity ---------------------------------------------------------------------------

    def hide_identity(self) -> None:
        """Move node.crt/node.key out of the cluster dir (the node then has no identity)."""
        self._stash.mkdir(exist_ok=True)
        for name in (CERT_FILE, KEY_FILE):
            (self.cluster_dir / name).rename(self._stash / name)

    def restore_identity(self) -> None:
        """Copy node.key then node.crt back in, each atomically (copy to a dotfile, rename)."""
        for name in (KEY_FILE, CERT_FILE):
            tmp = self.cluster_dir / f".{name}.tmp"
            shutil.copy2(self._stash / name, tmp)
            tmp.rename(self.cluster_dir / name)


class Cluster:
    def __init__(
        self,
        root: Path,
        size: int,
        *,
        broadcast: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.root = root
        names = [f"node-{chr(ord('a') + i)}" for i in range(size)]
        dirs = init_cluster(root, names)
        self.nodes = {
            name: Node(name, dirs[name], broadcast=broadcast, config=config) for name in names
        }

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    def start(self) -> None:
        """Start every node (the processes start in parallel), then announce."""
        for node in self:
            node.spawn()
        for node in self:
            node.await_ready()
        self.announce()

    def records(self) -> list[dict[str, Any]]:
        return [n.record() for n in self]

    def announce(
        self, to: list[Node] | None = None, records: list[dict[str, Any]] | None = None
    ) -> None:
        """Send every running node (or ``to``) the current records (or ``records``), as its
        broker would."""
        nodes = self.records() if records is None else records
        for node in to or [n for n in self if n.proc is not None]:
            node.send({"jsonrpc": "2.0", "method": "nodes:update", "params": {"nodes": nodes}})

    def close(self) -> None:
        for node in self:
            node.kill()

    def errors(self) -> list[str]:
        """ERROR lines and tracebacks logged by any process of the cluster (see Node.errors)."""
        return [f"{node.name}: {line}" for node in self for line in node.errors()]


def workload(origin: str, wid: str, seq: int = 1, **overrides: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "id": wid,
        "model": "llama-3.1-8b-instruct",
        "engine": "vllm",
        "runId": f"run-{origin}",
        "state": "queued",
        "originatedFrom": origin,
        "createdAt": 1764690000000,
        "startedAt": None,
        "completedAt": None,
        "error": None,
        "seq": seq,
    }
    info.update(overrides)
    return info


def event(method: str, info: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": {"workloadInfo": info}}


def removal(origin: str, wid: str, run_id: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"workloadId": wid, "originatedFrom": origin}
    if run_id is not None:
        params["runId"] = run_id
    return {"jsonrpc": "2.0", "method": "workloads:remove", "params": params}


def is_upsert(wid: str, seq: int | None = None) -> Callable[[dict[str, Any]], bool]:
    def match(frame: dict[str, Any]) -> bool:
        if frame.get("method") != "workloads:upsert":
            return False
        info = frame["params"]["workloadInfo"]
        return bool(info["id"] == wid and (seq is None or info["seq"] == seq))

    return match


def is_removal(wid: str) -> Callable[[dict[str, Any]], bool]:
    def match(frame: dict[str, Any]) -> bool:
        return frame.get("method") == "workloads:remove" and frame["params"]["workloadId"] == wid

    return match
