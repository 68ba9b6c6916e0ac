"""Certificate pins (``trusted/``) and this node's identity (``node.crt``/``node.key``).

Both are read from ``--cluster-dir`` and must follow the files without a restart: the
spec says removing a member takes effect on the very next request, and a node that
gains (or rotates) its certificate serves with it on the very next handshake. So every
call re-checks the files, but only by ``stat``: the parsed result is cached under a
*stat signature* and the files are read and parsed again only when that signature
changes. Nothing here is time-based, and nothing here does network or asyncio work.

What a stat signature can and cannot see (per file: device, inode, size, mtime_ns,
ctime_ns; per directory the same plus the sorted entry names):

* adding, removing or renaming a file, and replacing it by rename (new inode): always;
* rewriting it in place with a different size: always;
* rewriting it in place with the same size: only if mtime_ns or ctime_ns moves. The
  kernel stamps files from a coarse clock (one scheduler tick, typically 1-4 ms on
  Linux; coarser on some filesystems), so two same-size in-place rewrites within one
  tick are indistinguishable. ``ctime`` cannot be set by ``utime``, so restoring the
  old mtime does not hide a rewrite made in a later tick.

Writers should therefore replace files atomically (write a temporary file, then
rename), which is what ``nvpair-wm-cluster`` does; that is always detected, and a
reader never sees a half-written file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509 import Certificate
from cryptography.x509.oid import NameOID

__all__ = [
    "CERT_FILE",
    "KEY_FILE",
    "MAX_PIN_FILE_BYTES",
    "TRUSTED_DIR",
    "Identity",
    "NodeIdentity",
    "OpenSSLPrivateKey",
    "PinLimits",
    "PinSet",
    "fingerprint_der",
    "load_certificates",
]

_log = logging.getLogger(__name__)

CERT_FILE = "node.crt"
KEY_FILE = "node.key"
TRUSTED_DIR = "trusted"

#: Files in trusted/ larger than this are skipped: a pin file is a few certificates,
#: and a stray large file must not make every change of trusted/ expensive.
MAX_PIN_FILE_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class PinLimits:
    """Bounds of reading ``trusted/`` (bytes)."""

    max_file_bytes: int = MAX_PIN_FILE_BYTES  # a bigger file in trusted/ is skipped


_PEM_CERT_RE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)

#: Private-key types pyOpenSSL accepts (PKey.from_cryptography_key, Context.use_privatekey).
OpenSSLPrivateKey = (
    rsa.RSAPrivateKey
    | ec.EllipticCurvePrivateKey
    | ed25519.Ed25519PrivateKey
    | ed448.Ed448PrivateKey
    | dsa.DSAPrivateKey
)
_OPENSSL_KEY_TYPES = (
    rsa.RSAPrivateKey,
    ec.EllipticCurvePrivateKey,
    ed25519.Ed25519PrivateKey,
    ed448.Ed448PrivateKey,
    dsa.DSAPrivateKey,
)

# (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)
_FileSig = tuple[int, int, int, int, int]


def fingerprint_der(der: bytes) -> str:
    """Lowercase hex SHA-256 of a DER certificate: the pin and NodeRecord format."""
    return hashlib.sha256(der).hexdigest()


def _parse_certificates(data: bytes) -> tuple[list[x509.Certificate], list[str]]:
    """Every certificate in ``data`` (PEM blocks, or one DER certificate), plus problems."""
    certs: list[x509.Certificate] = []
    problems: list[str] = []
    if b"-----BEGIN" in data:
        blocks = _PEM_CERT_RE.findall(data)
        if not blocks:
            problems.append("PEM without a CERTIFICATE block")
        for i, block in enumerate(blocks):
            try:
                certs.append(x509.load_pem_x509_certificate(block))
            except ValueError as exc:
                problems.append(f"PEM block {i}: {exc}")
    else:
        try:
            certs.append(x509.load_der_x509_certificate(data))
        except ValueError:
            problems.append("neither PEM nor a DER certificate")
    return certs, problems


def load_certificates(data: bytes) -> list[x509.Certificate]:
    """Parse PEM (any number of CERTIFICATE blocks) or a single DER certificate.

    Unparsable PEM blocks are skipped; raises ValueError when nothing parses.
    """
    certs, problems = _parse_certificates(data)
    if not certs:
        raise ValueError("; ".join(problems) or "no certificate found")
    return certs


def _der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


def _file_sig(st: os.stat_result) -> _FileSig:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class PinSet:
    """The fingerprints pinned in a ``trusted/`` directory, re-checked on every call.

    Cheap enough to call per request: one ``scandir`` plus one ``stat`` per entry; files
    are read only when the stat signature changes. Never raises: a missing directory
    pins nothing, and unreadable or unparsable files are skipped with one debug log
    each (per change). Dotfiles are ignored (they are in-progress atomic writes),
    symlinks are followed, subdirectories are skipped. Safe to share between threads:
    the cache is swapped as one tuple, so the worst case is a redundant re-read.
    """

    def __init__(self, trusted_dir: Path | str, limits: PinLimits | None = None) -> None:
        self.trusted_dir = Path(trusted_dir)
        self.limits = limits or PinLimits()
        self._cache: tuple[object, frozenset[str]] | None = None

    def _scan(self) -> tuple[object, list[tuple[str, _FileSig]], str | None]:
        """(hashable signature, regular files, why nothing can be listed) of trusted/."""
        try:
            dir_sig = _file_sig(os.stat(self.trusted_dir))
        except OSError as exc:
            return ("unstattable", exc.errno), [], f"cannot stat it: {exc.strerror}"
        files: list[tuple[str, _FileSig]] = []
        try:
            with os.scandir(self.trusted_dir) as it:
                for entry in it:
                    if entry.name.startswith("."):
                        continue
                    try:
                        st = entry.stat()  # follows symlinks
                    except OSError:
                        # Vanished since the listing, or a dangling symlink. (A symlink
                        # whose target appears later is seen only once trusted/ changes.)
                        continue
                    if stat.S_ISREG(st.st_mode):
                        files.append((entry.name, _file_sig(st)))
        except OSError as exc:
            return ("unlistable", dir_sig, exc.errno), [], f"cannot list it: {exc.strerror}"
        files.sort()
        return (dir_sig, tuple(files)), files, None

    def _load(self, files: list[tuple[str, _FileSig]]) -> frozenset[str]:
        pins: set[str] = set()
        cap = self.limits.max_file_bytes
        for name, fsig in files:
            path = self.trusted_dir / name
            if fsig[2] > cap:
                _log.debug("pins: skipping %s: %d bytes is too large", path, fsig[2])
                continue
            try:
                with open(path, "rb") as f:
                    data = f.read(cap + 1)  # it may have grown since stat()
            except OSError as exc:
                _log.debug("pins: skipping unreadable %s: %s", path, exc.strerror)
                continue
            if len(data) > cap:
                _log.debug("pins: skipping %s: it grew too large", path)
                continue
            certs, problems = _parse_certificates(data)
            if problems:
                _log.debug("pins: %s: %s", path, "; ".join(problems))
            pins.update(fingerprint_der(_der(c)) for c in certs)
        return frozenset(pins)

    def current(self) -> frozenset[str]:
        """Fingerprints (lowercase hex SHA-256 of DER) of every certificate in trusted/."""
        sig, files, unavailable = self._scan()
        cached = self._cache
        if cached is not None and cached[0] == sig:
            return cached[1]
        if unavailable is not None:
            _log.debug("pins: %s: %s; pinning nothing", self.trusted_dir, unavailable)
            pins: frozenset[str] = frozenset()
        else:
            # Files read by _load may already be newer than ``sig``. Caching under the
            # older signature is conservative: the change moved the signature, so the
            # next call reloads.
            pins = self._load(files)
        self._cache = (sig, pins)
        return pins

    def is_pinned(self, fingerprint: str) -> bool:
        """Whether ``fingerprint`` (lowercase hex, as fingerprint_der returns) is pinned now."""
        return fingerprint in self.current()


@dataclass(frozen=True)
class NodeIdentity:
    """This node's certificate and key, checked to match, ready for an SSL context.

    ``cert_pem``/``cert_der`` hold the leaf only (the first certificate of node.crt);
    ``key_pem`` is the key re-encoded as unencrypted PKCS#8. The same pair is also given
    parsed: as cryptography objects (``certificate``, ``private_key``), which is what
    pyOpenSSL >= 24.3 wants for ``Context/Connection.use_certificate/use_privatekey``
    (passing ``X509``/``PKey`` there is deprecated).
    Equality and hashing use the bytes and fingerprint; everything but the fingerprint
    is kept out of ``repr`` so that logging an identity never prints the private key.
    """

    cert_pem: bytes = field(repr=False)
    key_pem: bytes = field(repr=False)
    cert_der: bytes = field(repr=False)
    fingerprint: str
    certificate: Certificate = field(repr=False, compare=False)
    private_key: OpenSSLPrivateKey = field(repr=False, compare=False)


def _common_name(cert: Certificate) -> str | None:
    """The certificate's CN: the node's id, as ``nvpair-wm-cluster`` names it."""
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = names[0].value if names else None
    return value if isinstance(value, str) else None


class IdentitySource(Protocol):
    """What the TLS layers and the broadcaster need: :class:`Identity`, or a stand-in that
    never has one (a node started without ``--cluster-dir``)."""

    def current(self) -> NodeIdentity | None: ...


class PinSource(Protocol):
    """What the endpoint and the broadcaster need: :class:`PinSet`, or a stand-in that pins
    nothing."""

    def current(self) -> frozenset[str]: ...

    def is_pinned(self, fingerprint: str) -> bool: ...


class Identity:
    """This node's identity from ``cluster_dir/node.crt`` + ``node.key``, re-checked per call.

    Called per TLS handshake (the spec resolves the certificate per handshake), so it
    costs two ``stat`` calls unless the files changed. ``current()`` is None while the
    files are absent, unreadable, unparsable, or the key does not match the
    certificate; the reason is logged at warning level once per change of the files,
    not per call. A rotation shows up on the next call. Replacing the two files is not
    atomic as a pair, so a rotation may yield None (a failed handshake) for the moment
    between the two renames; it heals by itself on the next call.
    """

    def __init__(self, cluster_dir: Path | str) -> None:
        self.cluster_dir = Path(cluster_dir)
        self.cert_path = self.cluster_dir / CERT_FILE
        self.key_path = self.cluster_dir / KEY_FILE
        self._cache: tuple[object, NodeIdentity | None] | None = None

    @staticmethod
    def _stat(path: Path) -> object:
        try:
            return _file_sig(os.stat(path))
        except FileNotFoundError:
            return None
        except OSError as exc:
            return ("unstattable", exc.errno)

    def _load(self) -> NodeIdentity | None:
        try:
            cert_data = self.cert_path.read_bytes()
            key_data = self.key_path.read_bytes()
        except FileNotFoundError as exc:
            _log.warning("no cluster identity: %s is missing", exc.filename)
            return None
        except OSError as exc:
            _log.warning("no cluster identity: cannot read %s: %s", exc.filename, exc.strerror)
            return None
        certs, problems = _parse_certificates(cert_data)
        if not certs:
            _log.warning("no cluster identity: %s: %s", self.cert_path, "; ".join(problems))
            return None
        cert = certs[0]
        try:
            key = serialization.load_pem_private_key(key_data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            # TypeError: the key is encrypted (a password would be needed).
            _log.warning("no cluster identity: %s: %s", self.key_path, exc)
            return None
        spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        if cert.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
            _log.warning(
                "no cluster identity: %s does not belong to the certificate in %s",
                self.key_path,
                self.cert_path,
            )
            return None
        if not isinstance(key, _OPENSSL_KEY_TYPES):
            _log.warning(
                "no cluster identity: %s: pyOpenSSL cannot use a %s key",
                self.key_path,
                type(key).__name__,
            )
            return None
        der = _der(cert)
        ident = NodeIdentity(
            cert_pem=cert.public_bytes(serialization.Encoding.PEM),
            key_pem=key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
            cert_der=der,
            fingerprint=fingerprint_der(der),
            certificate=cert,
            private_key=key,
        )
        _log.info(
            "cluster identity loaded: %s (fingerprint %s)",
            self.cert_path,
            ident.fingerprint,
            extra={"nodeId": _common_name(cert), "fingerprint": ident.fingerprint},
        )
        return ident

    def current(self) -> NodeIdentity | None:
        """The identity as the files are now, or None (see the class docstring)."""
        sig = (self._stat(self.cert_path), self._stat(self.key_path))
        cached = self._cache
        if cached is not None and cached[0] == sig:
            return cached[1]
        # Files read below may be newer than ``sig``; caching under the older signature
        # is conservative: whatever changed moved the signature, so the next call reloads.
        ident = self._load()
        self._cache = (sig, ident)
        return ident
