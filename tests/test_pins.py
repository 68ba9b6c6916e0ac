"""PinSet and Identity against real files and real certificates (no mocks).

The caches are keyed by a stat signature (dev, inode, size, mtime_ns, ctime_ns per
file, plus the directory's own stat and entry names). These tests check that every
change such a signature can see is seen on the very next call, including several
changes within one second, and they state the one change it cannot see: a same-size
in-place rewrite within one tick of the kernel's file-timestamp clock.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from OpenSSL import SSL

from nvpair_wm.clusterdir import cert_fingerprint, init_cluster, make_self_signed, remove_member
from nvpair_wm.pins import (
    MAX_PIN_FILE_BYTES,
    Identity,
    NodeIdentity,
    PinSet,
    fingerprint_der,
    load_certificates,
)


def _der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


def _fp(pem: bytes) -> str:
    return hashlib.sha256(_der(pem)).hexdigest()


def _replace(path: Path, data: bytes) -> None:
    """Atomic replace, as nvpair-wm-cluster writes (new inode)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _rewrite_in_place(path: Path, data: bytes) -> None:
    """Overwrite the same inode (what an editor or `cat >` does)."""
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(data)


@pytest.fixture(scope="module")
def certs() -> list[tuple[bytes, bytes]]:
    return [make_self_signed(f"peer-{i}") for i in range(4)]


# --- fingerprints -----------------------------------------------------------------------


def test_fingerprint_der_is_lowercase_hex_sha256_of_der(certs: list[tuple[bytes, bytes]]) -> None:
    pem = certs[0][0]
    der = _der(pem)
    fp = fingerprint_der(der)
    assert fp == hashlib.sha256(der).hexdigest()
    assert len(fp) == 64 and fp == fp.lower()
    assert cert_fingerprint(pem) == cert_fingerprint(der) == fp


def test_load_certificates_skips_bad_blocks_and_rejects_garbage(
    certs: list[tuple[bytes, bytes]],
) -> None:
    bad_block = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    parsed = load_certificates(certs[0][0] + bad_block + certs[1][0])
    assert [fingerprint_der(c.public_bytes(serialization.Encoding.DER)) for c in parsed] == [
        _fp(certs[0][0]),
        _fp(certs[1][0]),
    ]
    for garbage in (b"", b"hello", bad_block, b"\x30\x82\x01\x00junk", certs[0][1]):
        with pytest.raises(ValueError):
            load_certificates(garbage)


# --- PinSet -----------------------------------------------------------------------------


def test_missing_dir_is_empty_and_appears_later(
    tmp_path: Path, certs: list[tuple[bytes, bytes]]
) -> None:
    trusted = tmp_path / "trusted"
    pins = PinSet(trusted)
    assert pins.current() == frozenset()
    trusted.mkdir()
    assert pins.current() == frozenset()
    (trusted / "a.crt").write_bytes(certs[0][0])
    assert pins.current() == {_fp(certs[0][0])}
    assert pins.is_pinned(_fp(certs[0][0]))
    assert not pins.is_pinned(_fp(certs[1][0]))


def test_formats_multi_cert_pem_der_and_ignored_entries(
    tmp_path: Path, certs: list[tuple[bytes, bytes]]
) -> None:
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    (trusted / "bundle.pem").write_bytes(certs[0][0] + b"\n" + certs[1][0])
    (trusted / "c.der").write_bytes(_der(certs[2][0]))
    (trusted / "garbage.crt").write_bytes(b"not a certificate\n")
    (trusted / "key-only.pem").write_bytes(certs[3][1])  # a private key is not a pin
    (trusted / ".d.crt.tmp").write_bytes(certs[3][0])  # in-progress atomic write: ignored
    (trusted / "subdir.crt").mkdir()
    (trusted / "dangling.crt").symlink_to(tmp_path / "nowhere")
    (trusted / "linked.crt").symlink_to(tmp_path / "elsewhere.crt")
    (tmp_path / "elsewhere.crt").write_bytes(certs[3][0])  # after the link: dir unchanged

    pins = PinSet(trusted)
    assert pins.current() == {_fp(certs[i][0]) for i in range(4)}


def test_never_raises_on_garbage_and_logs_once_per_change(
    tmp_path: Path, certs: list[tuple[bytes, bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    (trusted / "good.crt").write_bytes(certs[0][0])
    (trusted / "garbage.crt").write_bytes(os.urandom(300))
    pins = PinSet(trusted)
    with caplog.at_level(logging.DEBUG, logger="nvpair_wm.pins"):
        for _ in range(5):
            assert pins.current() == {_fp(certs[0][0])}
    assert len([r for r in caplog.records if "garbage.crt" in r.getMessage()]) == 1


def test_trusted_path_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "trusted").write_bytes(b"x")
    assert PinSet(tmp_path / "trusted").current() == frozenset()


def test_unreadable_entries_are_skipped(tmp_path: Path, certs: list[tuple[bytes, bytes]]) -> None:
    """Entries that cannot be read, even by root: a dangling symlink and a directory."""
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    (trusted / "good.crt").write_bytes(certs[0][0])
    (trusted / "dangling.crt").symlink_to(tmp_path / "missing.crt")
    (trusted / "folder.crt").mkdir()
    assert PinSet(trusted).current() == {_fp(certs[0][0])}
    (tmp_path / "missing.crt").write_bytes(certs[1][0])  # the link now resolves
    assert PinSet(trusted).current() == {_fp(certs[0][0]), _fp(certs[1][0])}


def test_unchanged_files_are_not_reparsed(tmp_path: Path, certs: list[tuple[bytes, bytes]]) -> None:
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    (trusted / "a.crt").write_bytes(certs[0][0])
    pins = PinSet(trusted)
    first = pins.current()
    assert pins.current() is first  # the cached object: only stat() ran


def test_remove_add_replace_rewrite_seen_on_next_call_within_one_second(
    tmp_path: Path, certs: list[tuple[bytes, bytes]]
) -> None:
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    a, b, c, d = (_fp(pem) for pem, _ in certs)
    (trusted / "a.crt").write_bytes(certs[0][0])
    (trusted / "b.crt").write_bytes(certs[1][0])
    pins = PinSet(trusted)
    assert pins.current() == {a, b}

    # All of this happens well within one second; none of it relies on time passing.
    (trusted / "b.crt").unlink()
    assert pins.current() == {a}

    (trusted / "c.crt").write_bytes(certs[2][0])
    assert pins.current() == {a, c}

    _replace(trusted / "c.crt", certs[3][0])  # rename over it: new inode
    assert pins.current() == {a, d}

    # In place, different size: the size alone gives it away.
    _rewrite_in_place(trusted / "a.crt", certs[1][0] + b"\n")
    assert pins.current() == {b, d}

    # In place, same size, mtime set to a value the signature has not seen.
    _rewrite_in_place(trusted / "a.crt", certs[0][0] + b"\n")
    os.utime(trusted / "a.crt", ns=(1_000_000_123, 1_000_000_123))
    assert pins.current() == {a, d}


def _same_length_pair(certs: list[tuple[bytes, bytes]]) -> tuple[bytes, bytes]:
    """Two different certificates whose PEM is as long: P-256 certificates made the same way
    differ in length only by their ECDSA signature's DER (70 to 72 bytes), so a few more are
    made until two lengths match."""
    pems = [pem for pem, _ in certs]
    for i in range(64):
        by_length: dict[int, bytes] = {}
        for pem in pems:
            if len(pem) in by_length:
                return by_length[len(pem)], pem
            by_length[len(pem)] = pem
        pems.append(make_self_signed(f"extra-{i}")[0])
    raise AssertionError("no two certificates of the same PEM length in 68")


def test_same_size_in_place_rewrite_within_one_clock_tick_is_the_documented_limit(
    tmp_path: Path, certs: list[tuple[bytes, bytes]]
) -> None:
    """Same inode, same size, mtime put back: only ctime can tell, and the kernel stamps
    ctime from a coarse clock. If the clock ticked between the two writes the rewrite is
    seen; if it did not, it cannot be (write files by rename to avoid this entirely)."""
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    path = trusted / "a.crt"
    pem_a, pem_b = _same_length_pair(certs)
    path.write_bytes(pem_a)
    os.utime(path, ns=(5_000_000_000, 5_000_000_000))
    pins = PinSet(trusted)
    assert pins.current() == {_fp(pem_a)}
    before = os.stat(path)

    _rewrite_in_place(path, pem_b)
    os.utime(path, ns=(5_000_000_000, 5_000_000_000))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    if after.st_ctime_ns != before.st_ctime_ns:
        assert pins.current() == {_fp(pem_b)}
    else:  # same clock tick: the signature is identical, so the stale pin set is returned
        assert pins.current() == {_fp(pem_a)}


def test_removing_a_member_unpins_it_immediately(tmp_path: Path) -> None:
    dirs = init_cluster(tmp_path / "c", ["a", "b", "c"])
    pins = PinSet(dirs["a"] / "trusted")
    fp_b = cert_fingerprint((dirs["b"] / "node.crt").read_bytes())
    assert pins.is_pinned(fp_b)
    remove_member(tmp_path / "c", "b")
    assert not pins.is_pinned(fp_b)


# --- Identity ---------------------------------------------------------------------------


def _write_identity(d: Path, cert_pem: bytes, key_pem: bytes) -> None:
    d.mkdir(parents=True, exist_ok=True)
    _replace(d / "node.key", key_pem)
    _replace(d / "node.crt", cert_pem)


def test_identity_absent_then_appears_then_rotates(
    tmp_path: Path, certs: list[tuple[bytes, bytes]]
) -> None:
    d = tmp_path / "node"
    ident = Identity(d)
    assert ident.current() is None  # no directory at all
    d.mkdir()
    assert ident.current() is None
    (d / "node.crt").write_bytes(certs[0][0])
    assert ident.current() is None  # key still missing

    (d / "node.key").write_bytes(certs[0][1])
    first = ident.current()
    assert isinstance(first, NodeIdentity)
    assert first.fingerprint == _fp(certs[0][0])
    assert first.cert_der == _der(certs[0][0])
    assert x509.load_pem_x509_certificate(first.cert_pem).public_bytes(
        serialization.Encoding.DER
    ) == _der(certs[0][0])
    assert ident.current() is first  # cached while the files are unchanged

    _write_identity(d, *certs[1])
    second = ident.current()
    assert second is not None and second != first
    assert second.fingerprint == _fp(certs[1][0])


def test_identity_is_usable_by_pyopenssl(tmp_path: Path, certs: list[tuple[bytes, bytes]]) -> None:
    _write_identity(tmp_path, *certs[0])
    ident = Identity(tmp_path).current()
    assert ident is not None
    # The cryptography objects are what pyOpenSSL >= 24.3 takes without a deprecation.
    ctx = SSL.Context(SSL.TLS_METHOD)
    ctx.use_certificate(ident.certificate)
    ctx.use_privatekey(ident.private_key)
    ctx.check_privatekey()  # raises if they do not match
    assert ident.certificate.public_bytes(serialization.Encoding.DER) == ident.cert_der
    # The PEM fields load too, and the key never shows in repr().
    serialization.load_pem_private_key(ident.key_pem, password=None)
    assert b"PRIVATE" not in repr(ident).encode()
    assert ident.fingerprint in repr(ident)


def test_mismatched_key_is_none_and_warns_once_per_change(
    tmp_path: Path, certs: list[tuple[bytes, bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    _write_identity(tmp_path, certs[0][0], certs[1][1])
    ident = Identity(tmp_path)
    with caplog.at_level(logging.WARNING, logger="nvpair_wm.pins"):
        for _ in range(5):
            assert ident.current() is None
        assert len(caplog.records) == 1
        assert "does not belong" in caplog.records[0].getMessage()

        _replace(tmp_path / "node.key", certs[0][1])  # the right key arrives
        assert ident.current() is not None
        _replace(tmp_path / "node.key", certs[2][1])  # and a wrong one again
        for _ in range(3):
            assert ident.current() is None
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


@pytest.mark.parametrize(
    "cert_bytes, key_bytes",
    [
        pytest.param(b"garbage", None, id="garbage-cert"),
        pytest.param(
            None,
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            id="garbage-key",
        ),
        pytest.param(None, b"", id="empty-key"),
    ],
)
def test_unparsable_files_give_none(
    tmp_path: Path,
    certs: list[tuple[bytes, bytes]],
    cert_bytes: bytes | None,
    key_bytes: bytes | None,
) -> None:
    _write_identity(
        tmp_path,
        certs[0][0] if cert_bytes is None else cert_bytes,
        certs[0][1] if key_bytes is None else key_bytes,
    )
    assert Identity(tmp_path).current() is None


def test_encrypted_key_gives_none(tmp_path: Path, certs: list[tuple[bytes, bytes]]) -> None:
    key = serialization.load_pem_private_key(certs[0][1], password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    _write_identity(tmp_path, certs[0][0], encrypted)
    assert Identity(tmp_path).current() is None


def test_identity_files_removed_gives_none_again(
    tmp_path: Path, certs: list[tuple[bytes, bytes]]
) -> None:
    _write_identity(tmp_path, *certs[0])
    ident = Identity(tmp_path)
    assert ident.current() is not None
    (tmp_path / "node.key").unlink()
    assert ident.current() is None


def test_identity_from_cluster_dir_matches_pins_of_peers(tmp_path: Path) -> None:
    dirs = init_cluster(tmp_path, ["a", "b"])
    ident_a = Identity(dirs["a"]).current()
    assert ident_a is not None
    assert PinSet(dirs["b"] / "trusted").is_pinned(ident_a.fingerprint)
    assert not PinSet(dirs["a"] / "trusted").is_pinned(ident_a.fingerprint)


def test_unreadable_identity_file_gives_none(
    tmp_path: Path, certs: list[tuple[bytes, bytes]]
) -> None:
    """Works as root too: reading a directory fails whatever the permissions."""
    (tmp_path / "node.crt").mkdir()
    (tmp_path / "node.key").write_bytes(certs[0][1])
    ident = Identity(tmp_path)
    assert ident.current() is None
    (tmp_path / "node.crt").rmdir()
    (tmp_path / "node.crt").write_bytes(certs[0][0])
    assert ident.current() is not None


def test_oversized_file_is_skipped(tmp_path: Path, certs: list[tuple[bytes, bytes]]) -> None:
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    (trusted / "small.crt").write_bytes(certs[0][0])
    big = certs[1][0] + b"\n" * (MAX_PIN_FILE_BYTES + 1 - len(certs[1][0]))
    (trusted / "big.crt").write_bytes(big)
    assert PinSet(trusted).current() == {_fp(certs[0][0])}
