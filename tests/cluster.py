"""A cluster of real ``nvpair-wm`` processes on loopback, each with its broker played by the test.

Each node gets its own ``--cluster-dir`` (made by :mod:`nvpair_wm.clusterdir`), binds
127.0.0.1 on a free port, and is told about the others with ``nodes:update`` records carrying
their real ports, as a broker would. Helpers wait for frames on a node's broker side with a
deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nvpair_wm.clusterdir import cert_fingerprint, init_cluster
from tests.wm_process import WAIT, WmProcess


class Node:
    def __init__(self, name: str, cluster_dir: Path, port: int = 0, *extra: str) -> None:
        self.name = name
        self.cluster_dir = cluster_dir
        self.extra = extra
        self.requested_port = port
        self.proc: WmProcess | None = None
        self.port = 0
        self.fingerprint = cert_fingerprint((cluster_dir / "node.crt").read_bytes())
        self.seen: list[dict[str, Any]] = []  # every notification from this node's manager

    def start(self) -> None:
        args = ["--cluster-dir", str(self.cluster_dir), "--bind", "127.0.0.1"]
        args += ["--port", str(self.port or self.requested_port), "--log-level", "debug"]
        self.proc = WmProcess(*args, *self.extra)
        assert self.recv()["method"] == "ready"
        self.port = self.status()["port"]

    @property
    def wm(self) -> WmProcess:
        assert self.proc is not None, f"{self.name} is not running"
        return self.proc

    def recv(self, timeout: float = WAIT) -> Any:
        return self.wm.recv(timeout)

    def status(self) -> Any:
        """manager:status; notifications that arrive first are kept in ``seen``."""
        wm = self.wm
        wm._next_id += 1
        rid = wm._next_id
        wm.send_frame({"jsonrpc": "2.0", "method": "manager:status", "id": rid})
        while True:
            frame = wm.recv()
            if frame.get("id") == rid:
                return frame["result"]
            self.seen.append(frame)

    def send(self, frame: dict[str, Any]) -> None:
        self.wm.send_frame(frame)

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

    def upserts(self) -> list[dict[str, Any]]:
        return [
            f["params"]["workloadInfo"] for f in self.seen if f.get("method") == "workloads:upsert"
        ]

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.__exit__(None, None, None)
            self.proc = None

    def stop(self) -> int:
        wm = self.wm
        wm.close_stdin()
        code = wm.wait()
        wm.__exit__(None, None, None)
        self.proc = None
        return code


class Cluster:
    def __init__(self, root: Path, size: int) -> None:
        self.root = root
        names = [f"node-{chr(ord('a') + i)}" for i in range(size)]
        dirs = init_cluster(root, names)
        self.nodes = {name: Node(name, dirs[name]) for name in names}

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    def start(self) -> None:
        for node in self:
            node.start()
        self.announce()

    def announce(self, to: list[Node] | None = None) -> None:
        """Send every running node (or ``to``) the current records, as its broker would."""
        records = [n.record() for n in self]
        for node in to or [n for n in self if n.proc is not None]:
            node.send({"jsonrpc": "2.0", "method": "nodes:update", "params": {"nodes": records}})

    def close(self) -> None:
        for node in self:
            node.kill()


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


def is_upsert(wid: str, seq: int | None = None) -> Callable[[dict[str, Any]], bool]:
    def match(frame: dict[str, Any]) -> bool:
        if frame.get("method") != "workloads:upsert":
            return False
        info = frame["params"]["workloadInfo"]
        return bool(info["id"] == wid and (seq is None or info["seq"] == seq))

    return match
