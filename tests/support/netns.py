"""Network namespaces for one test or soak run (:class:`Net`): made, wired and always deleted."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field

import pytest

SUBNET = "10.213.47"  # .1 .2 .3: node a b c; the /24 exists only inside the namespaces
NETEM = ("loss", "10%", "delay", "20ms", "5ms")


# Where the kernel has no netem (this CI's has none, and cannot load modules), a token bucket
# with a tiny queue still impairs every link for real: queueing delay, and tail drops when a
# burst (a snapshot, a batch) overflows the 4.5 kB queue.
TBF = ("rate", "300kbit", "burst", "3000", "limit", "4500")
IMPAIRMENTS = {"netem": NETEM, "tbf": TBF}
CMD_TIMEOUT = 10.0


def run_command(*cmd: str) -> subprocess.CompletedProcess[str]:
    """``cmd``, bounded by ``CMD_TIMEOUT``; its output captured, its status not checked."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=CMD_TIMEOUT, check=False)


def _failure(cmd: tuple[str, ...], res: subprocess.CompletedProcess[str]) -> str:
    text = (res.stderr or res.stdout).strip() or f"exit status {res.returncode}"
    return f"`{' '.join(cmd)}` failed: {text}"


@dataclass
class Net:
    """The namespaces of one test; ``close`` deletes every one it made."""

    tag: str
    made: list[str] = field(default_factory=list)

    def ns(self, role: str) -> str:
        return f"{self.tag}-{role}"

    @property
    def switch(self) -> str:
        return self.ns("br")

    def must(self, *cmd: str, skip: str | None = None) -> None:
        """Run a set-up command; on failure skip (with ``skip`` and the error text) or fail."""
        res = run_command(*cmd)
        if res.returncode != 0:
            message = _failure(cmd, res)
            if skip is not None:
                pytest.skip(f"{skip}: {message}")
            raise AssertionError(message)

    def add_ns(self, name: str) -> None:
        self.must("ip", "netns", "add", name, skip="cannot create a network namespace")
        self.made.append(name)
        self.must("ip", "-n", name, "link", "set", "lo", "up", skip="cannot set up the namespace")

    def build(self, roles: list[str]) -> dict[str, str]:
        """The switch and one namespace per role joined to it; returns {role: address}."""
        setup = "cannot join namespaces with veth and a bridge"
        self.add_ns(self.switch)
        self.must("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge", skip=setup)
        self.must("ip", "-n", self.switch, "link", "set", "br0", "up", skip=setup)
        addresses = {}
        for i, role in enumerate(roles, start=1):
            ns, port = self.ns(role), self.port(role)
            self.add_ns(ns)
            self.must(
                "ip", "-n", self.switch, "link", "add", port, "type", "veth",
                "peer", "name", "eth0", "netns", ns, skip=setup,
            )  # fmt: skip
            self.must("ip", "-n", self.switch, "link", "set", port, "master", "br0", skip=setup)
            self.must("ip", "-n", self.switch, "link", "set", port, "up", skip=setup)
            addresses[role] = f"{SUBNET}.{i}"
            self.must("ip", "-n", ns, "addr", "add", f"{SUBNET}.{i}/24", "dev", "eth0", skip=setup)
            self.must("ip", "-n", ns, "link", "set", "eth0", "up", skip=setup)
        return addresses

    @staticmethod
    def port(role: str) -> str:
        """The switch's end of ``role``'s veth."""
        return f"v{role}"

    def impair(self, roles: list[str], kind: str) -> None:
        """Impair both ends of every veth (so both directions) with the ``kind`` qdisc."""
        if shutil.which("tc") is None:
            pytest.skip(f"`tc` (iproute2) not found on PATH: cannot apply {kind}")
        for role in roles:
            for ns, dev in ((self.ns(role), "eth0"), (self.switch, self.port(role))):
                self.must(
                    "tc", "-n", ns, "qdisc", "add", "dev", dev, "root", kind,
                    *IMPAIRMENTS[kind], skip=f"cannot apply tc {kind}",
                )  # fmt: skip

    def link(self, role: str, up: bool) -> None:
        """Plug or unplug ``role``'s cable at the switch."""
        self.must("ip", "-n", self.switch, "link", "set", self.port(role), "up" if up else "down")

    def drops(self, roles: list[str]) -> int:
        """Packets the impairing qdiscs dropped, summed over every veth end."""
        total = 0
        for role in roles:
            for ns, dev in ((self.ns(role), "eth0"), (self.switch, self.port(role))):
                out = subprocess.run(
                    ["tc", "-s", "-n", ns, "qdisc", "show", "dev", dev],
                    capture_output=True, text=True, check=False,
                ).stdout  # fmt: skip
                total += sum(int(n) for n in re.findall(r"dropped (\d+)", out))
        return total

    def close(self) -> None:
        for name in reversed(self.made):
            run_command("ip", "netns", "del", name)
        self.made.clear()
