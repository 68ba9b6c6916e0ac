"""One node of the demo: an nvpair-wm process, and the stand-in broker that drives it over its
stdio (submitting, starting and finishing workloads; keeping what the node tells it)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Final, Literal

from nvpair_wm.clusterdir import cert_fingerprint
from nvpair_wm.errors import DemoError

__all__ = ["DemoNode", "Entry", "Key", "Phase"]

START_TIMEOUT: Final = 30.0  # a node's process → ``ready`` and its first status
REQUEST_TIMEOUT: Final = 5.0  # a manager:status answer
STOP_TIMEOUT: Final = 5.0  # stdin closed → the node exits, else SIGKILL
FRAME_LIMIT: Final = 4 * 1024 * 1024  # longest stdout line accepted from a node
MODELS: Final = ("llama-3.1-8b-instruct", "qwen2.5-7b", "mistral-7b-v0.3", "phi-3-mini")
ENGINES: Final = ("vllm", "sglang", "llama.cpp")
IN_FLIGHT: Final = 6  # workloads a stand-in broker keeps queued or running at a time
STATES: Final = ("queued", "running", "completed", "failed", "cancelled")
# How running workloads end: (method, state, weight).
ENDINGS: Final = (
    ("workload:completed", "completed", 0.7),
    ("workload:errored", "failed", 0.15),
    ("workload:cancelled", "cancelled", 0.15),
)

Key = tuple[str, str]  # (originatedFrom, id)
Entry = tuple[str, int]  # (state, seq)
Phase = Literal["starting", "up", "down"]


def _now_ms() -> int:
    return int(time.time() * 1000)


class DemoNode:
    """One nvpair-wm process and the stand-in broker that drives it over stdio."""

    def __init__(self, name: str, cluster_dir: Path, log_path: Path, rng: random.Random) -> None:
        self.name = name
        self.cluster_dir = cluster_dir
        self.log_path = log_path
        self.fingerprint = cert_fingerprint((cluster_dir / "node.crt").read_bytes())
        self.rng = rng
        self.run_id = f"run-{name}-{rng.getrandbits(32):08x}"
        self.proc: asyncio.subprocess.Process | None = None
        self.phase: Phase = "starting"  # not "down" before its first start: nothing crashed
        self.port = 0
        self.incarnation = 0
        # The broker's own workloads (the truth for them) and the removals it reported.
        self.own: dict[str, dict[str, Any]] = {}
        self.removed: dict[str, float] = {}  # id → when removed (monotonic)
        self.remove_due: dict[str, float] = {}  # finished id → when the broker removes it
        # What the node told the broker about the others' workloads.
        self.remote: dict[Key, Entry] = {}
        self.last_remote: float | None = None  # monotonic time of the last upsert/remove
        self.peers_up = 0
        self.peers_total = 0
        self._next_wid = itertools.count(1)
        self._next_id = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._started = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    # -- the process ------------------------------------------------------------------------------

    async def start(self, port: int = 0) -> None:
        """Start the process and wait for ``ready`` and its port; a fresh manager knows nothing,
        so the broker's view of the others starts empty and its own workloads are resent."""
        self.incarnation += 1
        self.phase = "starting"
        self.remote.clear()
        self.last_remote = None
        self._started = asyncio.Event()
        args = ["--cluster-dir", str(self.cluster_dir), "--bind", "127.0.0.1"]
        args += ["--port", str(port), "--log-level", "info"]
        with self.log_path.open("ab") as log:
            log.write(f"--- {self.name} start #{self.incarnation}\n".encode())
            log.flush()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "nvpair_wm",
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                start_new_session=True,  # Ctrl-C reaches the demo only; it stops the nodes
                limit=FRAME_LIMIT,
            )
        self.proc = proc
        self._reader = asyncio.get_running_loop().create_task(self._read(proc))
        try:
            await asyncio.wait_for(self._started.wait(), START_TIMEOUT)
            status = await self.request("manager:status")
        except (TimeoutError, ConnectionError) as exc:
            await self.kill()
            raise DemoError(
                f"{self.name} did not start ({type(exc).__name__}); its log:\n{self.log_tail()}"
            ) from None
        self.port = int(status["port"])
        self.phase = "up"
        self.resend_own()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while True:
            try:
                line = await proc.stdout.readline()
            except (ValueError, ConnectionError):  # an over-long line, or the pipe broke
                break
            if not line:
                break
            try:
                frame = json.loads(line)
            except ValueError:
                continue
            if isinstance(frame, dict):
                self._on_frame(frame)
        if proc is self.proc:
            self.phase = "down"
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError(f"{self.name} exited"))
            self._pending.clear()

    def _on_frame(self, frame: dict[str, Any]) -> None:
        method = frame.get("method")
        params = frame.get("params")
        if method == "ready":
            self._started.set()
        elif method == "workloads:upsert" and isinstance(params, dict):
            info = params["workloadInfo"]
            key = (str(info["originatedFrom"]), str(info["id"]))
            old = self.remote.get(key)
            if old is None or old[1] < info["seq"]:
                self.remote[key] = (str(info["state"]), int(info["seq"]))
            self.last_remote = time.monotonic()
        elif method == "workloads:remove" and isinstance(params, dict):
            self.remote.pop((str(params["originatedFrom"]), str(params["workloadId"])), None)
            self.last_remote = time.monotonic()
        elif "id" in frame:
            future = self._pending.pop(frame["id"], None)
            if future is not None and not future.done():
                if "result" in frame:
                    future.set_result(frame["result"])
                else:
                    future.set_exception(ConnectionError(f"error answer: {frame.get('error')}"))

    def send(self, frame: dict[str, Any]) -> None:
        """Write a frame to the node (dropped if it is not running: the broker's own state
        still changes, and is resent when the node starts again)."""
        proc = self.proc
        if self.phase == "down" or proc is None or proc.stdin is None:
            return
        if proc.returncode is not None or proc.stdin.is_closing():
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            proc.stdin.write(json.dumps(frame, separators=(",", ":")).encode() + b"\n")

    async def request(self, method: str) -> Any:
        rid = next(self._next_id)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        self.send({"jsonrpc": "2.0", "method": method, "id": rid})
        try:
            return await asyncio.wait_for(future, REQUEST_TIMEOUT)
        finally:
            self._pending.pop(rid, None)

    async def poll_status(self) -> None:
        if self.phase != "up":
            return
        try:
            status = await self.request("manager:status")
        except (TimeoutError, ConnectionError):
            return
        peers = status.get("peers") or []
        self.peers_total = len(peers)
        self.peers_up = sum(1 for p in peers if p.get("connected"))

    async def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.phase = "down"
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        await self._reap()

    async def stop(self) -> None:
        """Close the broker channel (the node exits 0 on EOF); SIGKILL if it lingers."""
        proc = self.proc
        if proc is not None and proc.returncode is None:
            if proc.stdin is not None:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        await self._reap()

    async def _reap(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), 2.0)
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        self.phase = "down"
        self.peers_up = 0

    def record(self) -> dict[str, Any]:
        return {
            "nodeId": self.name,
            "address": "127.0.0.1",
            "port": self.port,
            "fingerprint": self.fingerprint,
        }

    # -- the stand-in broker ----------------------------------------------------------------------

    def _report(self, method: str, info: dict[str, Any]) -> None:
        self.own[info["id"]] = info
        self.send({"jsonrpc": "2.0", "method": method, "params": {"workloadInfo": info}})

    def resend_own(self) -> None:
        """After a (re)start: the newest event of every own workload, and recent removals."""
        method_of = {"queued": "workload:submitted", "running": "workload:started"}
        method_of.update({state: method for method, state, _ in ENDINGS})
        for info in self.own.values():
            self._report(method_of[info["state"]], info)
        for wid in self.removed:
            self._send_remove(wid)

    def _send_remove(self, wid: str) -> None:
        params = {"workloadId": wid, "originatedFrom": self.name, "runId": self.run_id}
        self.send({"jsonrpc": "2.0", "method": "workloads:remove", "params": params})

    def step(self, now: float) -> None:
        """One broker action: remove a finished workload, submit, start or finish one."""
        rng = self.rng
        for wid, due in self.remove_due.items():
            if due <= now:
                del self.remove_due[wid]
                del self.own[wid]
                self.removed[wid] = now
                self._send_remove(wid)
                return
        for wid, when in list(self.removed.items()):
            if now - when > 300:  # long gone everywhere; no need to resend it
                del self.removed[wid]
        queued = [i for i in self.own.values() if i["state"] == "queued"]
        running = [i for i in self.own.values() if i["state"] == "running"]
        roll = rng.random()
        if len(queued) + len(running) < IN_FLIGHT and (roll < 0.4 or not (queued or running)):
            wid = f"{self.name}-w{next(self._next_wid)}"
            self._report(
                "workload:submitted",
                {
                    "id": wid,
                    "model": rng.choice(MODELS),
                    "engine": rng.choice(ENGINES),
                    "runId": self.run_id,
                    "state": "queued",
                    "originatedFrom": self.name,
                    "scheduledOn": self.name,
                    "createdAt": _now_ms(),
                    "startedAt": None,
                    "completedAt": None,
                    "error": None,
                    "seq": 1,
                },
            )
        elif queued and (roll < 0.7 or not running):
            info = {**queued[0], "state": "running", "startedAt": _now_ms(), "seq": 2}
            self._report("workload:started", info)
        elif running:
            info = rng.choice(running)
            method, state, _ = rng.choices(ENDINGS, weights=[w for _, _, w in ENDINGS])[0]
            done: dict[str, Any] = {**info, "state": state, "completedAt": _now_ms(), "seq": 3}
            if state == "failed":
                done["error"] = rng.choice(("CUDA out of memory", "engine exited (code 137)"))
            self._report(method, done)
            self.remove_due[info["id"]] = now + rng.uniform(2.0, 15.0)

    # -- views ------------------------------------------------------------------------------------

    def own_view(self) -> dict[Key, Entry]:
        return {(self.name, wid): (i["state"], int(i["seq"])) for wid, i in self.own.items()}

    def view(self) -> dict[Key, Entry]:
        """The broker's view of the cluster: the others' workloads as told, and its own."""
        return {**self.remote, **self.own_view()}
