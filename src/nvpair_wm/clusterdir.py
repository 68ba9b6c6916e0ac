"""nvpair-wm-cluster: make and maintain a cluster directory of pinned, self-signed nodes.

Layout (``CLUSTER`` is the directory given on the command line; each node runs with
``--cluster-dir CLUSTER/<name>``)::

    CLUSTER/<name>/node.crt            self-signed EC P-256 certificate, CN=<name>
    CLUSTER/<name>/node.key            its private key (PKCS#8 PEM, mode 0600)
    CLUSTER/<name>/trusted/<other>.crt every OTHER current member's certificate

There is no CA: peers are authorised by the SHA-256 fingerprint of their certificate
being present in ``trusted/`` (see nvpair_wm.pins). Every file is written atomically
(temporary dotfile + rename), so a running node never reads a half-written file and
its stat-signature cache always sees the change.

``remove`` revokes trust both ways (the member's certificate leaves every other
``trusted/``, and the others' certificates leave its ``trusted/``) and keeps the
member's own key pair, marked by a ``REMOVED`` file, so that ``add`` can later
re-admit it with the same identity; ``--purge`` deletes its directory instead.

Not safe against two invocations changing the same directory at the same time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import os
import re
import secrets
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from nvpair_wm_schema.contract import DEFAULT_PORT

from nvpair_wm.cmdline import OneLineParser
from nvpair_wm.errors import ClusterError  # defined there; still importable from here
from nvpair_wm.pins import (
    CERT_FILE,
    KEY_FILE,
    TRUSTED_DIR,
    fingerprint_der,
    load_certificates,
)

__all__ = [
    "DEFAULT_PORT",
    "REMOVED_MARKER",
    "ClusterError",
    "add_member",
    "cert_fingerprint",
    "init_cluster",
    "main",
    "make_self_signed",
    "members",
    "node_records",
    "nodes_update_line",
    "remove_member",
    "validate_name",
]

PROG = "nvpair-wm-cluster"
REMOVED_MARKER = "REMOVED"
VALIDITY_DAYS = 3650

# DNS-style, lowercase (the name is a directory, a DNS SAN and the nodeId; lowercase
# keeps it unambiguous on case-insensitive filesystems and in DNS).
_NAME_RE = re.compile(
    r"^(?=.{1,63}$)[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$"
)


def validate_name(name: str) -> str:
    """Return ``name`` if it is a valid member name, else raise ClusterError."""
    if not _NAME_RE.match(name):
        raise ClusterError(
            f"invalid member name {name!r}: use 1-63 lowercase letters, digits, '-' and '.'"
            " (DNS-style, starting and ending with a letter or digit)"
        )
    return name


def make_self_signed(name: str, *, days: int = VALIDITY_DAYS) -> tuple[bytes, bytes]:
    """A fresh self-signed EC P-256 certificate for ``name``: (cert PEM, key PEM).

    CN=name; SAN DNS:name, DNS:localhost, IP:127.0.0.1, IP:::1; random serial; usable
    as both TLS server and client certificate. Not registered anywhere, so it is also
    the way to make an "unpinned" certificate in tests.
    """
    validate_name(name)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # tolerate small clock skew
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName(name),
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert_pem, key_pem


def cert_fingerprint(pem_or_der: bytes) -> str:
    """Lowercase hex SHA-256 of the (first) certificate's DER; ValueError if none parses."""
    cert = load_certificates(pem_or_der)[0]
    return fingerprint_der(cert.public_bytes(serialization.Encoding.DER))


# --- directory helpers -------------------------------------------------------------------


def _natural_key(name: str) -> str:
    """Sort node-2 before node-10."""
    return re.sub(r"\d+", lambda m: m.group().zfill(20), name)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write via a dotfile in the same directory and rename it into place."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, mode)  # os.open's mode is filtered by the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _member_dirs(cluster: Path, *, include_removed: bool) -> list[str]:
    """Names of the member directories (those holding a node.crt), naturally sorted."""
    if not cluster.is_dir():
        raise ClusterError(f"{cluster} is not a directory")
    names = []
    for entry in cluster.iterdir():
        if entry.name.startswith(".") or not _NAME_RE.match(entry.name):
            continue
        if not (entry / CERT_FILE).is_file():
            continue
        if not include_removed and (entry / REMOVED_MARKER).exists():
            continue
        names.append(entry.name)
    return sorted(names, key=_natural_key)


def members(cluster: Path | str) -> list[str]:
    """Current members of ``cluster`` (removed-but-kept ones excluded), naturally sorted."""
    return _member_dirs(Path(cluster), include_removed=False)


def _read_cert(cluster: Path, name: str) -> bytes:
    path = cluster / name / CERT_FILE
    try:
        data = path.read_bytes()
        cert_fingerprint(data)
    except (OSError, ValueError) as exc:
        raise ClusterError(f"member {name!r} has an unusable {path}: {exc}") from exc
    return data


def _check_key_matches(mdir: Path, cert_pem: bytes) -> None:
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    try:
        key = serialization.load_pem_private_key((mdir / KEY_FILE).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ClusterError(f"cannot re-admit {mdir.name!r}: {mdir / KEY_FILE}: {exc}") from exc
    cert = load_certificates(cert_pem)[0]
    if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
        raise ClusterError(f"cannot re-admit {mdir.name!r}: its node.key does not match node.crt")


def _create_member(cluster: Path, name: str) -> bytes:
    """Make CLUSTER/<name>/ with a new key pair; return the certificate PEM."""
    mdir = cluster / name
    if (mdir / CERT_FILE).exists() or (mdir / KEY_FILE).exists():
        raise ClusterError(f"{mdir} already holds a node certificate or key; refusing to overwrite")
    cert_pem, key_pem = make_self_signed(name)
    (mdir / TRUSTED_DIR).mkdir(parents=True, exist_ok=True)
    _write_atomic(mdir / KEY_FILE, key_pem, 0o600)
    _write_atomic(mdir / CERT_FILE, cert_pem, 0o644)
    return cert_pem


def _pin(cluster: Path, holder: str, subject: str, cert_pem: bytes) -> None:
    """Put ``subject``'s certificate into ``holder``'s trusted/."""
    tdir = cluster / holder / TRUSTED_DIR
    tdir.mkdir(parents=True, exist_ok=True)
    _write_atomic(tdir / f"{subject}.crt", cert_pem, 0o644)


# --- operations --------------------------------------------------------------------------


def init_cluster(cluster: Path | str, names: Sequence[str]) -> dict[str, Path]:
    """Create a cluster of ``names`` in ``cluster`` (created if needed); every member pins
    every other. Refuses a directory that already has members (use add_member).
    Returns {name: member directory}, i.e. each node's ``--cluster-dir``.
    """
    cluster = Path(cluster)
    if not names:
        raise ClusterError("a cluster needs at least one member")
    for name in names:
        validate_name(name)
    if len(set(names)) != len(names):
        raise ClusterError(f"duplicate member names in {list(names)}")
    if cluster.exists():
        existing = _member_dirs(cluster, include_removed=True)
        if existing:
            raise ClusterError(
                f"{cluster} already has members ({', '.join(existing)}); use 'add' to grow it"
            )
    cluster.mkdir(parents=True, exist_ok=True)
    certs = {name: _create_member(cluster, name) for name in names}
    for holder in names:
        for subject, pem in certs.items():
            if subject != holder:
                _pin(cluster, holder, subject, pem)
    return {name: cluster / name for name in names}


def add_member(cluster: Path | str, name: str) -> Path:
    """Add ``name``: it pins every current member and every current member pins it.

    A member removed without purge is re-admitted with its existing key pair. Refuses
    to overwrite a current member. Returns the member's directory.
    """
    cluster = Path(cluster)
    validate_name(name)
    current = members(cluster)  # also checks that ``cluster`` is a directory
    if name in current:
        raise ClusterError(f"{name!r} is already a member of {cluster}")
    # Validate every existing certificate before writing anything.
    others = {other: _read_cert(cluster, other) for other in current}
    mdir = cluster / name
    if (mdir / REMOVED_MARKER).exists():
        cert_pem = _read_cert(cluster, name)
        _check_key_matches(mdir, cert_pem)
    else:
        cert_pem = _create_member(cluster, name)
    for other, pem in others.items():
        _pin(cluster, name, other, pem)
    for other in others:
        _pin(cluster, other, name, cert_pem)
    (mdir / REMOVED_MARKER).unlink(missing_ok=True)
    return mdir


def _unpin(tdir: Path, subject: str, fingerprint: str | None) -> list[Path]:
    """Remove ``subject``'s certificate from ``tdir``: its ``<subject>.crt`` and any other
    file holding only that certificate. Returns bundles that hold it among others
    (left alone: they are not ours to rewrite)."""
    (tdir / f"{subject}.crt").unlink(missing_ok=True)
    if fingerprint is None or not tdir.is_dir():
        return []
    leftovers = []
    for path in sorted(tdir.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        try:
            fps = {
                fingerprint_der(c.public_bytes(serialization.Encoding.DER))
                for c in load_certificates(path.read_bytes())
            }
        except (OSError, ValueError):
            continue
        if fingerprint not in fps:
            continue
        if fps == {fingerprint}:
            path.unlink(missing_ok=True)
        else:
            leftovers.append(path)
    return leftovers


def remove_member(cluster: Path | str, name: str, purge: bool = False) -> None:
    """Remove ``name`` from the cluster: no current member pins it any more.

    Without ``purge`` its directory and key pair stay (marked REMOVED) and its own
    trusted/ is emptied of the other members, so it neither trusts nor is trusted;
    with ``purge`` its directory is deleted. Raises ClusterError if its certificate is
    still pinned somewhere afterwards (in a multi-certificate bundle it did not write).
    """
    cluster = Path(cluster)
    validate_name(name)
    mdir = cluster / name
    if name not in _member_dirs(cluster, include_removed=True):
        raise ClusterError(f"{name!r} is not a member of {cluster}")
    already_removed = (mdir / REMOVED_MARKER).exists()
    if already_removed and not purge:
        raise ClusterError(f"{name!r} was already removed; use --purge to delete {mdir}")
    try:
        fingerprint: str | None = cert_fingerprint((mdir / CERT_FILE).read_bytes())
    except (OSError, ValueError):
        fingerprint = None  # unpin by file name only
    others = [m for m in members(cluster) if m != name]
    leftovers: list[Path] = []
    # Revoke first: this is the step that matters to running peers.
    for other in others:
        leftovers += _unpin(cluster / other / TRUSTED_DIR, name, fingerprint)
    if purge:
        shutil.rmtree(mdir)
    else:
        for other in others:
            (mdir / TRUSTED_DIR / f"{other}.crt").unlink(missing_ok=True)
        _write_atomic(
            mdir / REMOVED_MARKER,
            b"removed from the cluster; 'nvpair-wm-cluster add' re-admits this key pair\n",
            0o644,
        )
    if leftovers:
        raise ClusterError(
            f"{name!r} is still pinned by bundle file(s) {', '.join(map(str, leftovers))};"
            " remove its certificate from them by hand"
        )


def node_records(
    cluster: Path | str, address: str = "127.0.0.1", port_base: int | None = None
) -> list[dict[str, str | int]]:
    """NodeRecord objects ({nodeId, address, port, fingerprint}) for the current members,
    as the broker sends them in ``nodes:update``.

    ``port`` is DEFAULT_PORT, or ``port_base + index`` where index is the member's
    position in the naturally sorted list of member directories *including* ones removed
    without purge, so removing a member never moves another member's port. Adding a
    name that sorts earlier, or purging, does shift later members.
    """
    cluster = Path(cluster)
    all_dirs = _member_dirs(cluster, include_removed=True)
    current = set(members(cluster))
    records: list[dict[str, str | int]] = []
    for index, name in enumerate(all_dirs):
        if name not in current:
            continue
        port = DEFAULT_PORT if port_base is None else port_base + index
        if not 1 <= port <= 65535:
            raise ClusterError(f"port {port} for {name!r} is outside 1-65535")
        records.append(
            {
                "nodeId": name,
                "address": address,
                "port": port,
                "fingerprint": cert_fingerprint(_read_cert(cluster, name)),
            }
        )
    return records


def nodes_update_line(records: list[dict[str, str | int]]) -> str:
    """The ``nodes:update`` notification carrying ``records``, as one line a broker writes to
    its node (checked against the contract: a ClusterError when it is not a valid frame)."""
    import msgspec  # noqa: PLC0415 - only this subcommand needs it
    from nvpair_wm_schema.nodes_update_schema import NodesUpdate  # noqa: PLC0415

    frame = {"jsonrpc": "2.0", "method": "nodes:update", "params": {"nodes": records}}
    line = json.dumps(frame, separators=(",", ":"))
    try:
        msgspec.json.decode(line, type=NodesUpdate)
    except msgspec.ValidationError as exc:
        raise ClusterError(f"the records make no valid nodes:update frame: {exc}") from None
    return line


# --- command line ------------------------------------------------------------------------


def _name_arg(value: str) -> str:
    try:
        return validate_name(value)
    except ClusterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return number


def _port_arg(value: str) -> int:
    number = _positive_int(value)
    if number > 65535:
        raise argparse.ArgumentTypeError(f"not a port: {value}")
    return number


def _build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog=PROG,
        description="Make and maintain an nvpair-wm cluster directory: one self-signed "
        "certificate per node, pinned by the other members in trusted/.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    p = sub.add_parser("init", help="create a cluster directory with N members")
    p.add_argument("dir", type=Path)
    p.add_argument("--nodes", type=_positive_int, help="number of members (default: len(--names))")
    p.add_argument("--names", help="comma-separated member names (default: node-1..node-N)")

    p = sub.add_parser("add", help="add a member (or re-admit one removed without --purge)")
    p.add_argument("dir", type=Path)
    p.add_argument("name", type=_name_arg)

    p = sub.add_parser("remove", help="remove a member: nobody pins it any more")
    p.add_argument("dir", type=Path)
    p.add_argument("name", type=_name_arg)
    p.add_argument("--purge", action="store_true", help="also delete its directory and key")

    p = sub.add_parser(
        "records",
        help="print the members as a JSON list of NodeRecords (--frame: the nodes:update line)",
        description="Print the current members as NodeRecords. Member i (0-based, in the sorted "
        "list of member directories, removed members included: a removal never moves another "
        "member's port) gets port PORT_BASE + i; without --port-base every record names "
        f"{DEFAULT_PORT}.",
    )
    p.add_argument("dir", type=Path)
    p.add_argument("--address", default="127.0.0.1", help="address of every node")
    p.add_argument(
        "--port-base", type=_port_arg, help=f"port of member i (default: all {DEFAULT_PORT})"
    )
    p.add_argument(
        "--frame",
        action="store_true",
        help="print the ready-to-send nodes:update notification, one line, for a node's stdin "
        "or --ipc socket",
    )

    p = sub.add_parser("fingerprint", help="print the SHA-256 fingerprint of a certificate file")
    p.add_argument("file", type=Path)
    return parser


def _init_names(parser: OneLineParser, nodes: int | None, names_arg: str | None) -> list[str]:
    if names_arg is None:
        if nodes is None:
            parser.error("init needs --nodes N or --names a,b,c")
        return [f"node-{i}" for i in range(1, nodes + 1)]
    names = [n.strip() for n in names_arg.split(",")]
    for name in names:
        try:
            validate_name(name)
        except ClusterError as exc:
            parser.error(str(exc))
    if len(set(names)) != len(names):
        parser.error(f"duplicate names in --names {names_arg!r}")
    if nodes is not None and nodes != len(names):
        parser.error(f"--nodes {nodes} but --names lists {len(names)} names")
    return names


def _run(parser: OneLineParser, args: argparse.Namespace) -> None:
    if args.command == "init":
        names = _init_names(parser, args.nodes, args.names)
        for name, path in init_cluster(args.dir, names).items():
            print(f"{name}\t{cert_fingerprint((path / CERT_FILE).read_bytes())}\t{path}")
    elif args.command == "add":
        path = add_member(args.dir, args.name)
        print(f"{args.name}\t{cert_fingerprint((path / CERT_FILE).read_bytes())}\t{path}")
    elif args.command == "remove":
        remove_member(args.dir, args.name, purge=args.purge)
    elif args.command == "records":
        records = node_records(args.dir, args.address, args.port_base)
        print(nodes_update_line(records) if args.frame else json.dumps(records, indent=2))
    elif args.command == "fingerprint":
        try:
            certs = load_certificates(args.file.read_bytes())
        except OSError as exc:
            raise ClusterError(f"cannot read {args.file}: {exc.strerror}") from exc
        except ValueError as exc:
            raise ClusterError(f"{args.file}: {exc}") from exc
        for cert in certs:
            print(fingerprint_der(cert.public_bytes(serialization.Encoding.DER)))


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit status (0 ok, 1 failed, 2 usage)."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        _run(parser, args)
    except ClusterError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        print(f"{PROG}: error:{where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
