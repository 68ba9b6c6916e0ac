"""Releases you can name, and the compatibility policy's rules between consecutive releases
(docs/compatibility.md), each shown on the previous release rebuilt from git history.

- ``releases.toml`` names real commits of those versions; ``CHANGELOG.md`` has every release;
- the previous release and this tree interoperate in one cluster, both ways;
- a journal the previous release wrote is read by this tree (``kill -9``, then a restart on
  this tree: its events reach a peer that never saw them);
- a journal of a newer format is refused with one line, and left as it is.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvpair_wm import __version__, journal
from nvpair_wm.clusterdir import init_cluster
from nvpair_wm.versions import CONTRACT_VERSION
from tests.conftest import WAIT
from tests.support.cluster import Cluster, event, is_removal, is_upsert, removal, workload
from tests.support.releases import ROOT, Release, build, previous, releases, version_key


def _at(commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{commit}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_releases_toml_names_the_commit_of_each_release() -> None:
    recorded = releases()
    assert recorded and recorded[0].version == "0.1.0"
    for release in recorded:
        assert re.fullmatch(r"[0-9a-f]{40}", release.commit), release
        init = _at(release.commit, "src/nvpair_wm/__init__.py")
        assert f'__version__ = "{release.version}"' in init, release
        assert _at(release.commit, "schema/VERSION").strip() == release.contract, release
    # This tree is newer than every release, or is the newest one.
    assert all(r.key <= version_key(__version__) for r in recorded)


def test_changelog_has_every_release_and_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## (\S+)", text, re.M)
    for release in releases():
        assert release.version in headings, release.version
        assert f"## {release.version} ({release.date})" in text
    assert headings[0] == __version__  # newest first, this tree's version on top
    assert CONTRACT_VERSION in text.split("\n## ")[1]  # it says which contract it speaks


def test_the_released_contract_is_kept_for_the_major() -> None:
    major = CONTRACT_VERSION.split(".")[0]
    kept = (ROOT / "schema" / "released" / f"{major}.x" / "VERSION").read_text().strip()
    assert version_key(kept) <= version_key(CONTRACT_VERSION)
    # Every recorded release's contract of this major is at or below the kept one.
    for release in releases():
        if release.contract.split(".")[0] == major:
            assert version_key(release.contract) <= version_key(kept)


# -- the previous release, built from its commit -------------------------------------------------


@pytest.fixture(scope="module")
def old() -> tuple[Release, list[str]]:
    release = previous()
    return release, build(release)


def test_the_previous_release_builds_from_its_commit(old: tuple[Release, list[str]]) -> None:
    release, program = old
    out = subprocess.run([*program, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith(f"nvpair-wm {release.version}")


@pytest.fixture
def mixed(tmp_path: Path, old: tuple[Release, list[str]]) -> Iterator[Cluster]:
    """node-a on the previous release, node-b on this tree."""
    cluster = Cluster(tmp_path, 2)
    cluster["node-a"].program = old[1]
    yield cluster
    cluster.close()


def test_consecutive_releases_interoperate_both_ways(mixed: Cluster) -> None:
    a, b = mixed["node-a"], mixed["node-b"]
    mixed.start()
    for i in range(3):
        a.send(event("workload:submitted", workload("node-a", f"old-{i}")))
        b.send(event("workload:submitted", workload("node-b", f"new-{i}")))
    for i in range(3):
        b.wait_for(is_upsert(f"old-{i}"))
        a.wait_for(is_upsert(f"new-{i}"))
    b.send(removal("node-b", "new-0"))
    a.send(event("workload:started", workload("node-a", "old-1", seq=2, state="running")))
    a.wait_for(is_removal("new-0"))
    b.wait_for(is_upsert("old-1", seq=2))
    # This tree shows what the old release says of itself: a product token without a version,
    # no contract header (0.1.0 predates both).
    peer = b.peer(b.status(), "node-a")
    assert (peer["softwareVersion"], peer["contractVersion"]) == ("unknown", None)
    assert peer["dropped"] == 0 and peer["lastError"] is None
    assert mixed.errors() == []


def test_a_journal_of_the_previous_release_is_read(mixed: Cluster) -> None:
    """node-a's events, journaled by the previous release and never delivered (node-b is not
    up), survive a kill -9 and a restart on this tree, which replays them to node-b."""
    a, b = mixed["node-a"], mixed["node-b"]
    a.start()
    n = 4
    for i in range(n):
        a.send(event("workload:submitted", workload("node-a", f"kept-{i}")))
    a.send(removal("node-a", "kept-3"))
    before = a.status()["counters"]  # a fence: the frames before it are journaled
    a.kill()
    log = a.cluster_dir / journal.JOURNAL_FILE
    assert log.read_bytes()[: len(journal.HEADER)] == journal.HEADER[:-1] + b"\x01"  # format 1
    a.program = None  # upgraded in place: same cluster directory, same journal
    a.start()
    a.wait_log("journal: reloaded")
    after = a.status()["counters"]
    assert (after["workloads"], after["tombstones"]) == (before["workloads"], before["tombstones"])
    assert log.read_bytes()[: len(journal.HEADER)] == journal.HEADER  # now this build's format
    b.start()
    mixed.announce()
    for i in range(n - 1):
        b.wait_for(is_upsert(f"kept-{i}"))
    b.wait_for(is_removal("kept-3"))
    assert mixed.errors() == []


def test_a_newer_journal_is_refused_and_left_in_place(tmp_path: Path) -> None:
    """A journal whose header names a format above this build's (a newer release wrote it):
    one line naming both formats, exit status 2, the file untouched, nothing moved aside."""
    [cluster_dir] = init_cluster(tmp_path / "cluster", ["node-a"]).values()
    newer = journal.FORMAT + 1
    path = cluster_dir / journal.JOURNAL_FILE
    data = journal.HEADER[:-1] + bytes([newer]) + b"records of a newer format \x00\x01\x02"
    path.write_bytes(data)
    done = subprocess.run(
        [sys.executable, "-m", "nvpair_wm", "--cluster-dir", str(cluster_dir), "--port", "0",
         "--bind", "127.0.0.1"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=WAIT, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # not even ready: the node did not start
    lines = [line for line in done.stderr.splitlines() if f"format {newer}" in line]
    assert len(lines) == 1, done.stderr
    assert f"format {journal.FORMAT}" in lines[0]  # both formats named
    assert path.read_bytes() == data
    assert sorted(p.name for p in cluster_dir.iterdir() if "journal" in p.name) == [path.name]
