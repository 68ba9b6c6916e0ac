"""Where the nodes live and how they are cut apart: network namespaces, or loopback.

``NetnsNetwork`` (root and ``ip netns``): each node in its own namespace on a private /24,
joined by a bridge in a switch namespace (the topology of :mod:`tests.test_netns`, whose
``Net`` builds it), every node on the default port of its own address. Faults are real network
faults: ``isolate`` takes the node's switch port down (the cable is pulled: packets vanish,
only timeouts tell), ``split`` installs blackhole routes between the two groups in both
directions, and ``impair`` puts a token bucket (``tc tbf``) on both ends of the node's veth:
queueing delay and tail drops. ``tbf`` stands in for ``tc netem`` (loss and delay), which this
kernel lacks (and cannot load); a kernel with netem would use it the same way.

``LoopbackNetwork`` (anyone): every node on 127.0.0.1, its own port. A partition is made with
pins: both sides remove each other's certificate from ``trusted/`` (every request is then
refused with 403 and retried), and re-pin to heal. There is no way to delay or drop loopback
packets without root, so ``impair`` is not drawn in this mode.

Both clean up on :meth:`close`, also after a failure; namespace names carry the soak's pid
(``nvsoak-<pid>-<n>-<role>``), and namespaces of soaks whose pid is gone are removed at start.
Only these namespaces and loopback are ever touched.

:class:`PinBook` owns every ``trusted/`` file of the run, so that overlapping faults (an
unpin during a loopback partition, a rotation) compose: a pin is present exactly when no fault
holds it removed, and it holds the subject's current certificates.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from nvpair_wm.clusterdir import DEFAULT_PORT, cert_fingerprint, make_self_signed
from tests.support.netns import Net

__all__ = ["LoopbackNetwork", "NetnsNetwork", "Network", "PinBook", "SoakError"]

PREFIX = "nvsoak"
CMD_TIMEOUT = 10.0
_nets = itertools.count(1)


class SoakError(Exception):
    """The soak cannot go on (set-up failed, a node does not start); the message says why."""


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=CMD_TIMEOUT, check=False)


class PinBook:
    """Every member's ``trusted/`` in the cluster directory, under reference-counted faults."""

    def __init__(self, root: Path, names: Sequence[str]) -> None:
        self.root = root
        self.names = list(names)
        self.certs = {n: [(root / n / "node.crt").read_bytes()] for n in names}
        self.blocked: Counter[tuple[str, str]] = Counter()  # (holder, subject) → faults

    def fingerprint(self, name: str) -> str:
        return cert_fingerprint((self.root / name / "node.crt").read_bytes())

    def _write(self, holder: str, subject: str) -> None:
        path = self.root / holder / "trusted" / f"{subject}.crt"
        if self.blocked[(holder, subject)] > 0:
            path.unlink(missing_ok=True)
            return
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(b"".join(self.certs[subject]))
        tmp.replace(path)

    def block(self, holder: str, subject: str) -> None:
        self.blocked[(holder, subject)] += 1
        self._write(holder, subject)

    def unblock(self, holder: str, subject: str) -> None:
        self.blocked[(holder, subject)] -= 1
        self._write(holder, subject)

    def rotate_begin(self, subject: str) -> None:
        """Step 1 of a rotation: a new key pair for ``subject``; every member trusts both the
        old and the new certificate; then the node's own files are replaced (key, then cert,
        each atomically)."""
        cert, key = make_self_signed(subject)
        self.certs[subject] = [self.certs[subject][-1], cert]
        for holder in self.names:
            if holder != subject:
                self._write(holder, subject)
        mdir = self.root / subject
        for name, data in (("node.key", key), ("node.crt", cert)):
            tmp = mdir / f".{name}.tmp"
            tmp.write_bytes(data)
            if name == "node.key":
                tmp.chmod(0o600)
            tmp.replace(mdir / name)

    def rotate_end(self, subject: str) -> None:
        """Step 3 (after the new fingerprint was announced): the old certificate is unpinned."""
        self.certs[subject] = self.certs[subject][-1:]
        for holder in self.names:
            if holder != subject:
                self._write(holder, subject)


class Network:
    """The interface the runner uses; see the module docstring for the two implementations."""

    kind = "none"
    impairs = False

    def address(self, name: str) -> tuple[str, int]:
        raise NotImplementedError

    def prefix(self, name: str) -> tuple[str, ...]:
        return ()

    def bind(self, name: str) -> tuple[str, int]:
        """(--bind, --port) for the node's process; port 0 lets the first start pick."""
        raise NotImplementedError

    def set_port(self, name: str, port: int) -> None:
        """The port the node's first process picked (reused by its restarts)."""

    def isolate(self, name: str, cut: bool) -> None:
        raise NotImplementedError

    def split(self, side: Sequence[str], rest: Sequence[str], cut: bool) -> None:
        raise NotImplementedError

    def impair(self, name: str, tbf: Sequence[str] | None) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Undo everything this network made."""


class LoopbackNetwork(Network):
    kind = "loopback"

    def __init__(self, names: Sequence[str], pins: PinBook) -> None:
        self.names = list(names)
        self.pins = pins
        self.ports = dict.fromkeys(names, 0)

    def address(self, name: str) -> tuple[str, int]:
        return "127.0.0.1", self.ports[name]

    def bind(self, name: str) -> tuple[str, int]:
        return "127.0.0.1", self.ports[name]

    def set_port(self, name: str, port: int) -> None:
        self.ports[name] = port

    def _cut(self, a: str, b: str, cut: bool) -> None:
        for holder, subject in ((a, b), (b, a)):
            (self.pins.block if cut else self.pins.unblock)(holder, subject)

    def isolate(self, name: str, cut: bool) -> None:
        for other in self.names:
            if other != name:
                self._cut(name, other, cut)

    def split(self, side: Sequence[str], rest: Sequence[str], cut: bool) -> None:
        for a in side:
            for b in rest:
                self._cut(a, b, cut)

    def impair(self, name: str, tbf: Sequence[str] | None) -> None:
        raise SoakError("link impairment needs network namespaces (root and `ip netns`)")


class _SoakNet(Net):
    """tests.test_netns.Net, failing with SoakError instead of skipping a pytest test."""

    def must(self, *cmd: str, skip: str | None = None) -> None:
        res = _run(*cmd)
        if res.returncode != 0:
            text = (res.stderr or res.stdout).strip() or f"exit status {res.returncode}"
            raise SoakError(f"{skip + ': ' if skip else ''}`{' '.join(cmd)}` failed: {text}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_namespaces() -> list[str]:
    """Namespaces of soaks that died without cleaning up (their pid is gone)."""
    removed = []
    for line in _run("ip", "netns", "list").stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        if len(parts) == 4 and parts[0] == PREFIX and parts[1].isdigit():
            pid = int(parts[1])
            if pid != os.getpid() and not _pid_alive(pid):
                _run("ip", "netns", "del", name)
                removed.append(name)
    return removed


def netns_available() -> str | None:
    """None when namespaces can be used, else why not."""
    if os.geteuid() != 0:
        return f"not root (euid {os.geteuid()})"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) not on PATH"
    return None


class NetnsNetwork(Network):
    kind = "netns"
    impairs = True

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.roles = {n: n.rsplit("-", 1)[-1] for n in names}  # node-a → a
        remove_stale_namespaces()
        self.net = _SoakNet(f"{PREFIX}-{os.getpid()}-{next(_nets)}")
        self.impaired: set[str] = set()
        try:
            self.addresses = self.net.build(list(self.roles.values()))
        except BaseException:
            self.net.close()
            raise
        if shutil.which("tc") is None:
            self.impairs = False

    def address(self, name: str) -> tuple[str, int]:
        return self.addresses[self.roles[name]], DEFAULT_PORT

    def bind(self, name: str) -> tuple[str, int]:
        return self.address(name)

    def prefix(self, name: str) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.net.ns(self.roles[name]))

    def isolate(self, name: str, cut: bool) -> None:
        self.net.link(self.roles[name], up=not cut)

    def split(self, side: Sequence[str], rest: Sequence[str], cut: bool) -> None:
        verb = "add" if cut else "del"
        for here, there in [(a, b) for a in side for b in rest] + [(b, a) for a in side
                                                                   for b in rest]:  # fmt: skip
            ns = self.net.ns(self.roles[here])
            addr = self.addresses[self.roles[there]]
            self.net.must("ip", "-n", ns, "route", verb, "blackhole", f"{addr}/32")

    def impair(self, name: str, tbf: Sequence[str] | None) -> None:
        role = self.roles[name]
        ends = ((self.net.ns(role), "eth0"), (self.net.switch, self.net.port(role)))
        for ns, dev in ends:
            if tbf is None:
                self.net.must("tc", "-n", ns, "qdisc", "del", "dev", dev, "root")
            else:
                self.net.must("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", *tbf)
        if tbf is None:
            self.impaired.discard(name)
        else:
            self.impaired.add(name)

    def close(self) -> None:
        self.net.close()
