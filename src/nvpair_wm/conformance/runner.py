"""Running behaviour vectors against an implementation: one process per group, cases in order.

Each group starts COMMAND once, with a fresh port, the cluster directory of the member under
test, ``--config`` when the group sets limits and, for ``"transport": "ipc"`` groups, ``--ipc``.
Its cases run in order against that one process (deduplication cases depend on it), then the
broker closes the channel and the process must exit 0. Beyond each case's own expectations,
every case checks what holds everywhere: no ``-32603`` (internal error), no HTTP 500, the server
presents the certificate of the member under test, and (in a group with ``peers``) every request
that reached the kit's peers kept the contract's bounds (``peerserver``).

A group with ``peers`` gets a cluster directory of its own: the subject and one member per
peer, each pinning the others, so that what the subject originated in other groups (its
journal, if it keeps one) is not in its snapshots here.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import queue
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nvpair_wm_schema.contract import INTERNAL_ERROR

from nvpair_wm import clusterdir
from nvpair_wm.conformance import expect, peer, vectors
from nvpair_wm.conformance.broker import WAIT, Implementation
from nvpair_wm.conformance.peerserver import PeerServer
from nvpair_wm.errors import BrokerError, PeerError

SUBJECT: Final = "subject"
PEER: Final = "peer"
STRANGER: Final = "stranger"
HOST: Final = "127.0.0.1"
PROTOCOLS: Final = {"h2": peer.H2, "http/1.1": peer.H1}
# How long an arrivals case waits, after the frames it wants came, for anything more.
SETTLE_S: Final = 0.3


@dataclass(slots=True)
class Result:
    group: str
    case: str
    passed: bool
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.group}/{self.case}"


@dataclass(frozen=True, slots=True)
class Cluster:
    """The cluster directory the runner made: the member under test, a pinned peer and a
    stranger whose certificate nobody pins."""

    root: Path
    subject_dir: Path
    fingerprint: str
    pinned: peer.Identity
    unpinned: peer.Identity

    @classmethod
    def create(cls, root: Path) -> Cluster:
        dirs = clusterdir.init_cluster(root / "cluster", [SUBJECT, PEER])
        cert, key = clusterdir.make_self_signed(STRANGER)
        sdir = root / STRANGER
        sdir.mkdir()
        (sdir / "node.crt").write_bytes(cert)
        (sdir / "node.key").write_bytes(key)
        (sdir / "node.key").chmod(0o600)
        subject = dirs[SUBJECT]
        return cls(
            root,
            subject,
            clusterdir.cert_fingerprint((subject / "node.crt").read_bytes()),
            peer.Identity(dirs[PEER] / "node.crt", dirs[PEER] / "node.key"),
            peer.Identity(sdir / "node.crt", sdir / "node.key"),
        )


@dataclass(frozen=True, slots=True)
class PeerCluster:
    """A group's own cluster: the subject and the kit's peers, all pinned both ways."""

    subject_dir: Path
    fingerprint: str
    members: dict[str, Path]  # peer name -> its member directory (node.crt, node.key)

    @classmethod
    def create(cls, root: Path, names: list[str]) -> PeerCluster:
        dirs = clusterdir.init_cluster(root, [SUBJECT, *names])
        subject = dirs.pop(SUBJECT)
        return cls(subject, clusterdir.cert_fingerprint((subject / "node.crt").read_bytes()), dirs)

    def identity(self, name: str) -> peer.Identity:
        return peer.Identity(self.members[name] / "node.crt", self.members[name] / "node.key")

    def record_fingerprint(self, name: str) -> str:
        return clusterdir.cert_fingerprint((self.members[name] / "node.crt").read_bytes())


def toml_text(config: dict[str, Any]) -> str:
    """A group's ``config`` (top-level keys, then one table per component) as TOML."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        raise ValueError(f"a config value TOML cannot hold here: {v!r}")

    top = [f"{k} = {value(v)}" for k, v in config.items() if not isinstance(v, dict)]
    tables = [
        f"[{name}]\n" + "".join(f"{k} = {value(v)}\n" for k, v in body.items())
        for name, body in config.items()
        if isinstance(body, dict)
    ]
    return "\n".join(["\n".join(top), *tables]).strip() + "\n"


def free_port() -> int:
    """A port nothing listens on now (the implementation binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _internal_errors(value: Any) -> list[str]:
    values = value if isinstance(value, list) else [value]
    return [
        f"internal error (-32603) in {v}"
        for v in values
        if isinstance(v, dict)
        and isinstance(v.get("error"), dict)
        and v["error"].get("code") == INTERNAL_ERROR
    ]


class GroupRun:
    """One group against one process."""

    def __init__(
        self,
        group: dict[str, Any],
        command: Sequence[str],
        cluster: Cluster,
        timeout: float = WAIT,
        workdir: Path | None = None,
        *,
        stop: threading.Event | None = None,
    ) -> None:
        self.group = group
        # Set by --fail-fast when any group has failed: this one stops after its current case,
        # and sets it at its own first failure (a mutation run needs one disagreement).
        self.stop = stop
        self.workdir = workdir if workdir is not None else cluster.root
        self.timeout = timeout
        # An HTTP answer may come only when a server-side timeout fires (408 after a 10 s
        # header timeout): wait well past it.
        self.http_timeout = 3 * timeout
        self.name = str(group["group"])
        self.command = command
        self.cluster = cluster
        self.port = free_port()
        self.results: list[Result] = []
        self.impl: Implementation | None = None
        self.accepted = 0  # frames of the bodies a repeatUntil case saw accepted
        self.broken: str | None = None
        self.peer_cluster: PeerCluster | None = None
        self.peers: dict[str, PeerServer] = {}
        self.seen: dict[str, int] = {}  # peer -> requests already checked by arrivals cases
        self.config: Path | None = None
        self.ipc: Path | None = None
        self.kept: dict[tuple[str, str], peer.KeptConnection] = {}  # (connection, protocol)

    def _record(self, case: str, started: float, problems: list[str]) -> None:
        self.results.append(
            Result(self.name, case, not problems, problems, time.monotonic() - started)
        )

    def run(self) -> list[Result]:
        ipc_dir = None
        if self.group.get("transport") == "ipc":
            # Short and private: a Unix socket path is limited to about 100 bytes.
            ipc_dir = Path(tempfile.mkdtemp(prefix="wmc-", dir="/tmp"))
        try:
            self._prepare()
            ipc = ipc_dir / "broker.sock" if ipc_dir is not None else None
            self.ipc = ipc
            if self._start(ipc):
                for case in self.group["cases"]:
                    self._case(case)
                    if self.stop is not None and self._stopping():
                        break
                else:
                    self._exit()
        finally:
            if self.impl is not None:
                self.impl.kill()
            for server in self.peers.values():
                server.close()
            for kept in self.kept.values():
                kept.close()
            if ipc_dir is not None:
                shutil.rmtree(ipc_dir, ignore_errors=True)
        return self.results

    def _stopping(self) -> bool:
        """Whether --fail-fast ends the group here (this group failed, or another did)."""
        assert self.stop is not None
        if any(not r.passed for r in self.results):
            self.stop.set()
        return self.stop.is_set()

    def _prepare(self) -> None:
        """The group's --config file and, for the peer role, its cluster and peer servers."""
        home = self.workdir / self.name
        home.mkdir(parents=True, exist_ok=True)
        if "config" in self.group:
            self.config = home / "config.toml"
            self.config.write_text(toml_text(self.group["config"]), encoding="utf-8")
        specs = self.group.get("peers", [])
        if not specs:
            return
        cluster = PeerCluster.create(home / "cluster", [str(s["name"]) for s in specs])
        self.peer_cluster = cluster
        for spec in specs:
            name = str(spec["name"])
            cert, key = cluster.identity(name).cert, cluster.identity(name).key
            if spec.get("certificate") == "mismatch":
                # Pinned and announced under its member certificate, serving another one.
                pem, key_pem = clusterdir.make_self_signed(name)
                cert, key = home / f"{name}-other.crt", home / f"{name}-other.key"
                cert.write_bytes(pem)
                key.write_bytes(key_pem)
            self.peers[name] = PeerServer(
                name,
                cert=cert,
                key=key,
                client_cert=cluster.subject_dir / "node.crt",
                protocols=[PROTOCOLS[p] for p in spec.get("protocols", list(PROTOCOLS))],
                host=HOST,
                max_streams=spec.get("maxConcurrentStreams"),
            )
            self.seen[name] = 0

    def _records(self) -> dict[str, dict[str, Any]]:
        """The node record of each peer (and of the subject itself), as nodes:update carries."""
        if self.peer_cluster is None:
            return {}
        records = {
            name: {
                "nodeId": name,
                "address": HOST,
                "port": server.port,
                "fingerprint": self.peer_cluster.record_fingerprint(name),
            }
            for name, server in self.peers.items()
        }
        records[SUBJECT] = {
            "nodeId": SUBJECT,
            "address": HOST,
            "port": self.port,
            "fingerprint": self.peer_cluster.fingerprint,
        }
        return records

    def _start(self, ipc: Path | None) -> bool:
        """Start the process and check its first line. A process that exits before its first
        line gets one more try on another port: the free port may have been taken meanwhile."""
        started = time.monotonic()
        for attempt in range(2):
            subject = (
                self.peer_cluster.subject_dir if self.peer_cluster else self.cluster.subject_dir
            )
            flags = ["--port", str(self.port), "--cluster-dir", str(subject)]
            if self.config is not None:
                flags += ["--config", str(self.config)]
            if ipc is not None:
                ipc.unlink(missing_ok=True)
            try:
                self.impl = Implementation(self.command, flags, ipc=ipc, timeout=self.timeout)
            except (OSError, BrokerError) as exc:
                self._record("startup", started, [f"could not start {list(self.command)}: {exc}"])
                return False
            try:
                first = self.impl.read_startup()
            except BrokerError as exc:
                if attempt == 0 and self.impl.wait(1.0) is not None:
                    self.impl.kill()
                    self.port = free_port()
                    continue
                self._record("startup", started, [str(exc)])
                self.broken = str(exc).splitlines()[0]
                return True  # the cases report "not run"; the exit is still checked
            self._record("startup", started, expect.match_lines([first], self.group["startup"]))
            return True
        return False  # not reached: the second attempt returns

    def _exit(self) -> None:
        assert self.impl is not None
        started = time.monotonic()
        problems: list[str] = []
        if self.impl.proc.poll() is not None:
            problems.append(f"exited early with status {self.impl.proc.returncode}")
        else:
            final = self.group.get("atExit")
            if final is not None and self.broken is None:
                try:
                    for item in final["local"]:
                        self.impl.write(vectors.line(item))
                except BrokerError as exc:
                    problems.append(str(exc))
                    final = None
            self.impl.close_channel()
            if final is not None and self.broken is None:
                try:
                    lines = self.impl.rest()
                except queue.Empty:
                    problems.append(f"the broker channel stayed open {self.timeout} s after EOF")
                else:
                    problems += expect.match_lines(lines, final["expect"])
            status = self.impl.wait()
            if status is None:
                problems.append(
                    f"still running {self.timeout} s after the broker closed the channel"
                )
            elif status != 0:
                problems.append(f"exit status {status} after the broker closed the channel")
        self._record("exit", started, problems + ([self.impl.stderr_excerpt()] if problems else []))

    def _case(self, case: dict[str, Any]) -> None:
        assert self.impl is not None
        runs: list[tuple[str, Callable[[dict[str, Any], str], list[str]]]]
        if "local" in case:
            runs = [("", self._local)]
        elif "http" in case:
            protos = case["http"].get("protocols", list(PROTOCOLS))
            runs = [(f"[{p}]", self._http_for(p)) for p in protos]
        elif "peer" in case:
            runs = [("", self._peer_action)]
        elif "arrivals" in case:
            runs = [("", self._arrivals)]
        else:
            runs = [("", self._control)]
        for suffix, kind in runs:
            started = time.monotonic()
            if self.impl.proc.poll() is not None:
                problems = [f"the process had exited (status {self.impl.proc.returncode})"]
            elif self.broken is not None:
                problems = [f"not run: the broker channel failed earlier ({self.broken})"]
            else:
                try:
                    problems = kind(case, suffix)
                except PeerError as exc:
                    problems = [str(exc)]
                except BrokerError as exc:
                    # Out of step with the process (a timeout, a closed channel): the rest of
                    # the group fails at once instead of waiting out one timeout per case.
                    problems = [str(exc)]
                    self.broken = str(exc).splitlines()[0]
            for server in self.peers.values():
                problems += server.take_problems()
            self._record(case["name"] + suffix, started, problems)

    # -- the kinds of case ------------------------------------------------------------------------

    def _local(self, case: dict[str, Any], _: str) -> list[str]:
        assert self.impl is not None
        records = self._records()
        for item in case["local"]:
            self.impl.write(vectors.line(vectors.with_records(item, records)))
            if "pauseAfter" in item:  # read apart from the next write (no event to await)
                time.sleep(float(item["pauseAfter"]))
        lines = self.impl.collect()
        problems = expect.match_lines(lines, case.get("expect", []))
        for line in lines:
            problems += _internal_errors(line)
        return problems

    def _control(self, case: dict[str, Any], _: str) -> list[str]:
        assert self.impl is not None
        action = case["control"]
        if action == "pause-broker":
            self.impl.pause_reading()
            return []
        if action == "resume-broker":
            self.impl.resume_reading()
            lines = self.impl.collect(timeout=max(60.0, self.timeout))
            want = case.get("count")
            if want == "accepted":
                want = self.accepted
            if want is not None and len(lines) != want:
                return [f"expected {want} frames written to the broker, got {len(lines)}"]
            return []
        if action == "restart":
            return self._restart()
        if action in ("unpin", "pin"):
            self._pin(str(case["member"]), pinned=action == "pin")
            return []
        raise ValueError(f"unknown control {action!r}")

    def _restart(self) -> list[str]:
        """Close the broker channel, require a clean exit, start again on the same cluster
        directory (its journal, if it keeps one): a restart of the implementation."""
        assert self.impl is not None
        problems: list[str] = []
        self.impl.close_channel()
        try:
            lines = self.impl.rest()
        except queue.Empty:
            lines = []
            problems.append(f"the broker channel stayed open {self.timeout} s after EOF")
        problems += [f"after EOF: {p}" for p in expect.match_lines(lines, [])]
        status = self.impl.wait()
        if status != 0:
            problems.append(f"exit status {status} after the broker closed the channel")
        self.impl.kill()
        if not self._start(self.ipc):
            problems.append("could not start the implementation again")
        elif self.broken is not None:
            problems.append(f"no startup line after the restart: {self.broken}")
        return problems

    def _pin(self, member: str, *, pinned: bool) -> None:
        """Take a member's certificate out of the subject's trusted/, or put it back."""
        subject = self.peer_cluster.subject_dir if self.peer_cluster else self.cluster.subject_dir
        pin = subject / "trusted" / f"{member}.crt"
        aside = self.workdir / self.name / f"unpinned-{member}.crt"
        if pinned and aside.exists():
            aside.replace(pin)
        elif not pinned and pin.exists():
            pin.replace(aside)

    def _http_for(self, protocol: str) -> Callable[[dict[str, Any], str], list[str]]:
        return lambda case, _: self._http(case, PROTOCOLS[protocol])

    def _send(
        self,
        connection: str | None,
        identity: peer.Identity | None,
        protocol: str,
        req: peer.HttpRequest,
    ) -> peer.HttpResponse:
        """``req`` on a new connection, or on the kept one named ``connection``."""
        if connection is None:
            return peer.request(HOST, self.port, identity, protocol, req, timeout=self.http_timeout)
        kept = self.kept.get((connection, protocol))
        if kept is None:
            kept = peer.KeptConnection(HOST, self.port, identity, protocol, self.http_timeout)
            self.kept[(connection, protocol)] = kept
        return kept.request(req)

    def _http(self, case: dict[str, Any], protocol: str) -> list[str]:
        assert self.impl is not None
        spec = case["http"]
        client = spec.get("client", "pinned")
        if self.peer_cluster is not None and client in self.peer_cluster.members:
            identity: peer.Identity | None = self.peer_cluster.identity(client)
        else:
            identity = {
                "pinned": self.cluster.pinned,
                "unpinned": self.cluster.unpinned,
                "none": None,
            }[client]
        headers = list(spec.get("headers", {"content-type": "application/json"}).items())
        want = case["response"]
        until = spec.get("repeatUntil")
        rounds = int(until["max"]) if until else 1
        counter = 0
        self.accepted = 0
        problems: list[str] = []
        for _ in range(rounds):
            body = vectors.payload(spec["body"], counter) if "body" in spec else b""
            counter += vectors.batch_size(spec["body"]) if "body" in spec else 1
            req = peer.HttpRequest(
                spec.get("method", "POST"),
                spec.get("path", "/v1/workloads/events"),
                [(str(k).lower(), str(v)) for k, v in headers],
                body,
                spec.get("contentLength", True),
                str(spec["raw"]).encode() if "raw" in spec else None,
            )
            if want.get("refused"):
                try:
                    resp = peer.request(
                        HOST, self.port, identity, protocol, req, timeout=self.http_timeout
                    )
                except PeerError:
                    break
                problems.append(f"expected no HTTP response, got {resp.status}")
                break
            resp = self._send(spec.get("connection"), identity, protocol, req)
            own = self.peer_cluster.fingerprint if self.peer_cluster else self.cluster.fingerprint
            if resp.server_fingerprint != own:
                problems.append("the server did not present the member's node.crt")
            if resp.status == 500:
                problems.append("HTTP 500: no input may earn an internal error")
            problems += expect.contract_header(
                resp.headers.get(expect.CONTRACT_HEADER), f"the HTTP {resp.status} response"
            )
            if until and resp.status != until["status"]:
                if resp.status != until.get("meanwhile", 202):
                    problems.append(
                        f"status {resp.status} before {until['status']} "
                        f"(expected {until.get('meanwhile', 202)})"
                    )
                    break
                self.accepted += vectors.batch_size(spec["body"]) if "body" in spec else 1
                continue
            problems += check_response(resp, want)
            break
        else:
            if until:
                problems.append(f"no {until['status']} after {rounds} requests")
        if "broker" in case and case["broker"] is not None:
            lines = self.impl.collect()
            allowed = case.get("brokerAllowed", [])
            lines = [x for x in lines if not any(not expect.match(x, m) for m in allowed)]
            problems += [f"broker: {p}" for p in expect.match_lines(lines, case["broker"])]
        elif "broker" not in case:
            lines = self.impl.collect()
            allowed = case.get("brokerAllowed", [])
            lines = [x for x in lines if not any(not expect.match(x, m) for m in allowed)]
            problems += [f"broker: {p}" for p in expect.match_lines(lines, [])]
        return problems

    # -- the peer role ---------------------------------------------------------------------------

    def _peer_action(self, case: dict[str, Any], _: str) -> list[str]:
        server = self.peers[case["peer"]]
        if "respond" in case:
            server.respond(case["respond"])
        action = case.get("action")
        if action == "down":
            server.down()
        elif action == "up":
            server.up()
        elif action == "restart":
            server.drop_connections()
        elif action == "move":
            server.move()
        return []

    def _arrivals(self, case: dict[str, Any], _: str) -> list[str]:
        """Wait until each listed peer has the frames its matchers want (accepted since the last
        check, ``allowed`` ones not counted) and the refusals it wants, then ``settle`` seconds
        more, then match exactly what came."""
        want: dict[str, dict[str, Any]] = case["arrivals"]
        deadline = time.monotonic() + float(case.get("within", self.timeout))
        for name, spec in want.items():
            self.peers[name].wait_for(
                functools.partial(_enough, spec, self.seen[name]),
                max(0.0, deadline - time.monotonic()),
            )
        time.sleep(float(case.get("settle", SETTLE_S)))
        problems: list[str] = []
        for name, spec in want.items():
            server = self.peers[name]
            before = len(problems)
            reqs = server.requests(since=self.seen[name])
            self.seen[name] += len(reqs)
            got = [f for a in reqs if a.accepted for f in a.frames]
            allowed = spec.get("allowed", [])
            got = [f for f in got if not any(not expect.match(f, m) for m in allowed)]
            if "frames" in spec and spec.get("repeats"):
                problems += [f"{name}: {p}" for p in _cover(got, spec["frames"])]
            elif "frames" in spec:
                key = "elements" if spec.get("inOrder") else "items"
                problems += [f"{name}: {p}" for p in expect.match(got, {key: spec["frames"]})]
            else:
                problems += [f"{name}: {p}" for p in _count_distinct(got, spec)]
            most = spec.get("maxFramesPerRequest")
            big = [
                len(a.frames)
                for a in reqs
                if a.accepted and most is not None and len(a.frames) > most
            ]
            if big:
                problems.append(f"{name}: accepted requests of {big} frames, more than {most}")
            refused = sum(not a.accepted for a in reqs)
            if refused < spec.get("refusedAtLeast", 0):
                problems.append(
                    f"{name}: {refused} requests refused, expected at least "
                    f"{spec['refusedAtLeast']} (the case did not happen)"
                )
            if refused > spec.get("refusedAtMost", refused):
                problems.append(
                    f"{name}: {refused} requests refused, expected at most {spec['refusedAtMost']}"
                )
            if len(problems) > before and server.failed_handshakes:
                problems.append(
                    f"{name}: {server.failed_handshakes} TLS handshakes with it failed so far "
                    f"(the last: {server.last_handshake_error})"
                )
        return problems


def _enough(spec: dict[str, Any], start: int, server: PeerServer) -> bool:
    """Whether the requests from ``start`` on hold what ``spec`` waits for (called with the
    server's lock held)."""
    arrivals = server.arrivals
    allowed = spec.get("allowed", [])
    frames = [
        f
        for a in arrivals[start:]
        if a.accepted
        for f in a.frames
        if not any(not expect.match(f, m) for m in allowed)
    ]
    count = len(spec["frames"]) if "frames" in spec else int(spec["count"])
    refused = sum(not a.accepted for a in arrivals[start:])
    return len(frames) >= count and refused >= spec.get("refusedAtLeast", 0)


def _cover(frames: list[Any], matchers: list[dict[str, Any]]) -> list[str]:
    """Every matcher matched by some frame, every frame by some matcher: what a snapshot that
    may repeat frames the peer already has must deliver."""
    if expect.exact_only(matchers):  # sets of canonical texts: O(n) for a large snapshot
        want = {expect.canonical(m["exact"]) for m in matchers}
        got = {expect.canonical(f) for f in frames}
        return [f'nothing arrived matching {{"exact": {t[:150]}}}' for t in sorted(want - got)] + [
            f"unexpected frame {t[:160]}" for t in sorted(got - want)
        ]
    problems = [
        f"nothing arrived matching {json.dumps(m)[:160]}"
        for m in matchers
        if not any(not expect.match(f, m) for f in frames)
    ]
    problems += [
        f"unexpected frame {json.dumps(f)[:160]}"
        for f in frames
        if not any(not expect.match(f, m) for m in matchers)
    ]
    return problems


def _count_distinct(frames: list[Any], spec: dict[str, Any]) -> list[str]:
    """``count`` frames, each with its own value at the pointer ``distinct``: none lost, none
    twice (for arrivals too many to list one matcher each)."""
    problems = []
    if len(frames) != spec["count"]:
        problems.append(f"{len(frames)} frames arrived, expected {spec['count']}")
    keys = [json.dumps(expect.resolve(f, spec["distinct"]), default=str) for f in frames]
    twice = len(keys) - len(set(keys))
    if twice:
        problems.append(f"{twice} frames arrived more than once (same {spec['distinct']})")
    return problems


def check_response(resp: peer.HttpResponse, want: dict[str, Any]) -> list[str]:
    """An HTTP response against a vector's ``response``."""
    problems: list[str] = []
    if resp.status != want["status"]:
        problems.append(f"status {resp.status}, expected {want['status']}")
    for name, value in want.get("headers", {}).items():
        got = resp.headers.get(name.lower())
        if got is None:
            problems.append(f"header {name} missing")
        elif not _header_equal(got, value):
            problems.append(f"header {name}: {got!r}, expected {value!r}")
    for name, pattern in want.get("headerPatterns", {}).items():
        got = resp.headers.get(name.lower())
        if got is None or not re.fullmatch(pattern, got):
            problems.append(f"header {name}: {got!r} does not match {pattern!r}")
    if "body" in want:
        matcher = want["body"]
        if matcher is None:
            if resp.body:
                problems.append(f"expected no body, got {resp.body[:160]!r}")
        else:
            try:
                value = json.loads(resp.body)
            except ValueError:
                problems.append(f"body is not JSON: {resp.body[:160]!r}")
            else:
                problems += [f"body: {p}" for p in expect.match(value, matcher)]
                problems += _internal_errors(value)
    return problems


def _header_equal(got: str, want: str) -> bool:
    """Case-insensitive; a media type matches with or without parameters."""
    g, w = got.strip().lower(), want.strip().lower()
    return g == w or g.split(";")[0].strip() == w


def run(
    groups: list[dict[str, Any]],
    command: Sequence[str],
    *,
    on_result: Callable[[Result], None] | None = None,
    timeout: float = WAIT,
    jobs: int = 1,
    fail_fast: bool = False,
) -> list[Result]:
    """Every group, ``jobs`` of them at once (each has its own process, port and directory);
    results come in the groups' order. ``fail_fast`` starts no group once one has failed and
    stops the running ones after their current case: a mutation run needs one disagreement,
    not all of them."""
    results: list[Result] = []
    failed = threading.Event()
    with tempfile.TemporaryDirectory(prefix="nvpair-wm-conformance-") as tmp:

        def one(numbered: tuple[int, dict[str, Any]]) -> list[Result]:
            index, group = numbered
            if fail_fast and failed.is_set():
                return []
            # A cluster directory per group: the member under test keeps its state there (its
            # journal), and a group must not start from what another left, or its outcome
            # would hang on the groups before it and on --jobs.
            root = Path(tmp) / f"g{index}"
            root.mkdir()
            cluster = Cluster.create(root)
            stop = failed if fail_fast else None
            rows = GroupRun(group, command, cluster, timeout, root, stop=stop).run()
            if any(not r.passed for r in rows):
                failed.set()
            return rows

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for rows in pool.map(one, enumerate(groups)):
                for result in rows:
                    results.append(result)
                    if on_result is not None:
                        on_result(result)
    return results
