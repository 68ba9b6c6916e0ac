"""nvpair-wm-cluster: the library API and the command line, on real directories and certs."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import stat
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nvpair_wm.clusterdir import (
    DEFAULT_PORT,
    ClusterError,
    add_member,
    cert_fingerprint,
    init_cluster,
    make_self_signed,
    members,
    node_records,
    remove_member,
)
from nvpair_wm.pins import Identity, PinSet

SCHEMA = Path(__file__).resolve().parents[1] / "schema" / "node-record.schema.json"


def _fp(path: Path) -> str:
    return cert_fingerprint(path.read_bytes())


def _trusted(cluster: Path, name: str) -> dict[str, str]:
    """{file name: fingerprint} of a member's trusted/."""
    return {p.name: _fp(p) for p in sorted((cluster / name / "trusted").iterdir())}


def _assert_full_mesh(cluster: Path, names: list[str]) -> None:
    for holder in names:
        expected = {f"{o}.crt": _fp(cluster / o / "node.crt") for o in names if o != holder}
        assert _trusted(cluster, holder) == expected, holder


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nvpair_wm.clusterdir", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- certificates -----------------------------------------------------------------------


def test_make_self_signed_certificate_properties() -> None:
    cert_pem, key_pem = make_self_signed("gpu-7")
    cert = x509.load_pem_x509_certificate(cert_pem)
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "gpu-7"
    cert.verify_directly_issued_by(cert)  # self-signed: the signature checks out
    key = cert.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["gpu-7", "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    basic = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert basic.ca is False
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert dt.timedelta(days=3640) < lifetime < dt.timedelta(days=3660)
    assert cert.not_valid_before_utc <= dt.datetime.now(dt.UTC)
    assert b"BEGIN PRIVATE KEY" in key_pem
    # Fresh key and random serial every time.
    other = x509.load_pem_x509_certificate(make_self_signed("gpu-7")[0])
    assert other.serial_number != cert.serial_number
    assert cert_fingerprint(cert_pem) != cert_fingerprint(
        other.public_bytes(serialization.Encoding.DER)
    )


@pytest.mark.parametrize("bad", ["", "Node-1", "a_b", "-a", "a-", "a/b", "..", ".a", "a" * 64])
def test_invalid_names_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ClusterError):
        make_self_signed(bad)
    with pytest.raises(ClusterError):
        init_cluster(tmp_path / "c", [bad])
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())


# --- init / add / remove ----------------------------------------------------------------


def test_init_creates_full_mesh_with_private_keys(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    dirs = init_cluster(cluster, ["node-1", "node-2", "node-3"])
    assert dirs == {n: cluster / n for n in ("node-1", "node-2", "node-3")}
    assert members(cluster) == ["node-1", "node-2", "node-3"]
    _assert_full_mesh(cluster, members(cluster))
    fps = set()
    for d in dirs.values():
        assert stat.S_IMODE((d / "node.key").stat().st_mode) == 0o600
        ident = Identity(d).current()
        assert ident is not None  # key matches cert
        fps.add(ident.fingerprint)
        assert not list(d.rglob(".*"))  # no temporary files left behind
    assert len(fps) == 3


def test_init_refuses_existing_members_and_bad_input(tmp_path: Path) -> None:
    cluster = tmp_path / "c"
    init_cluster(cluster, ["a", "b"])
    before = {p: p.read_bytes() for p in cluster.rglob("*") if p.is_file()}
    with pytest.raises(ClusterError, match="already has members"):
        init_cluster(cluster, ["a"])
    with pytest.raises(ClusterError, match="already has members"):
        init_cluster(cluster, ["z"])
    assert {p: p.read_bytes() for p in cluster.rglob("*") if p.is_file()} == before
    with pytest.raises(ClusterError, match="duplicate"):
        init_cluster(tmp_path / "d", ["x", "x"])
    with pytest.raises(ClusterError):
        init_cluster(tmp_path / "e", [])


def test_add_joins_the_mesh_and_refuses_an_existing_member(tmp_path: Path) -> None:
    cluster = tmp_path / "c"
    init_cluster(cluster, ["node-1", "node-2"])
    pins_1 = PinSet(cluster / "node-1" / "trusted")
    assert len(pins_1.current()) == 1
    path = add_member(cluster, "node-3")
    assert path == cluster / "node-3"
    assert members(cluster) == ["node-1", "node-2", "node-3"]
    _assert_full_mesh(cluster, members(cluster))
    assert pins_1.is_pinned(_fp(path / "node.crt"))  # seen by a live PinSet at once
    key_before = (path / "node.key").read_bytes()
    with pytest.raises(ClusterError, match="already a member"):
        add_member(cluster, "node-3")
    assert (path / "node.key").read_bytes() == key_before
    with pytest.raises(ClusterError, match="not a directory"):
        add_member(tmp_path / "missing", "x")


def test_remove_revokes_both_ways_and_readd_restores_the_same_identity(tmp_path: Path) -> None:
    cluster = tmp_path / "c"
    init_cluster(cluster, ["node-1", "node-2", "node-3"])
    fp2 = _fp(cluster / "node-2" / "node.crt")
    pins = {n: PinSet(cluster / n / "trusted") for n in ("node-1", "node-2", "node-3")}
    assert pins["node-1"].is_pinned(fp2)

    remove_member(cluster, "node-2")
    assert members(cluster) == ["node-1", "node-3"]
    assert not pins["node-1"].is_pinned(fp2) and not pins["node-3"].is_pinned(fp2)
    assert pins["node-2"].current() == frozenset()  # it trusts nobody any more
    _assert_full_mesh(cluster, ["node-1", "node-3"])
    assert (cluster / "node-2" / "node.key").exists() and (cluster / "node-2" / "REMOVED").exists()
    with pytest.raises(ClusterError, match="already removed"):
        remove_member(cluster, "node-2")

    # A new member does not pick up the removed one.
    add_member(cluster, "node-4")
    assert _trusted(cluster, "node-4").keys() == {"node-1.crt", "node-3.crt"}

    add_member(cluster, "node-2")  # re-admitted with its existing key pair
    assert _fp(cluster / "node-2" / "node.crt") == fp2
    assert not (cluster / "node-2" / "REMOVED").exists()
    _assert_full_mesh(cluster, ["node-1", "node-2", "node-3", "node-4"])


def test_remove_purge_and_errors(tmp_path: Path) -> None:
    cluster = tmp_path / "c"
    init_cluster(cluster, ["a", "b", "c"])
    remove_member(cluster, "b", purge=True)
    assert not (cluster / "b").exists()
    _assert_full_mesh(cluster, ["a", "c"])
    with pytest.raises(ClusterError, match="not a member"):
        remove_member(cluster, "b")
    remove_member(cluster, "c")
    remove_member(cluster, "c", purge=True)  # a removed member can still be purged
    assert not (cluster / "c").exists()
    assert members(cluster) == ["a"]


def test_remove_also_drops_copies_under_other_names_and_reports_bundles(tmp_path: Path) -> None:
    cluster = tmp_path / "c"
    init_cluster(cluster, ["a", "b", "c"])
    b_pem = (cluster / "b" / "node.crt").read_bytes()
    c_pem = (cluster / "c" / "node.crt").read_bytes()
    (cluster / "a" / "trusted" / "copy-of-b.pem").write_bytes(b_pem)
    (cluster / "c" / "trusted" / "bundle.pem").write_bytes(b_pem + c_pem)
    with pytest.raises(ClusterError, match=r"still pinned by bundle file.*bundle\.pem"):
        remove_member(cluster, "b")
    assert not (cluster / "a" / "trusted" / "copy-of-b.pem").exists()
    assert not PinSet(cluster / "a" / "trusted").is_pinned(cert_fingerprint(b_pem))
    assert (cluster / "c" / "trusted" / "bundle.pem").exists()  # not ours to rewrite


# --- records ----------------------------------------------------------------------------


def test_node_records_match_the_schema_and_keep_ports_stable(tmp_path: Path) -> None:
    cluster = tmp_path / "c"
    names = [f"node-{i}" for i in range(1, 12)]  # node-10 and node-11 sort after node-9
    init_cluster(cluster, names)
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))

    default = node_records(cluster)
    assert [r["nodeId"] for r in default] == names
    assert {r["port"] for r in default} == {DEFAULT_PORT}
    assert {r["address"] for r in default} == {"127.0.0.1"}

    records = node_records(cluster, "::1", 20000)
    for rec in records:
        validator.validate(rec)
        assert rec["fingerprint"] == _fp(cluster / str(rec["nodeId"]) / "node.crt")
    ports = {r["nodeId"]: r["port"] for r in records}
    assert ports == {n: 20000 + i for i, n in enumerate(names)}

    remove_member(cluster, "node-2")  # other members keep their ports
    after = {r["nodeId"]: r["port"] for r in node_records(cluster, "::1", 20000)}
    assert after == {n: p for n, p in ports.items() if n != "node-2"}

    with pytest.raises(ClusterError, match="outside"):
        node_records(cluster, "127.0.0.1", 65530)


def test_records_frame_is_one_nodes_update_line(tmp_path: Path) -> None:
    """``records --frame``: the notification a broker writes, one line, valid as the contract's
    NodesUpdate, carrying the same records as ``records``."""
    from tests.support.conformance import BASE, REGISTRY  # noqa: PLC0415

    cluster = tmp_path / "c"
    init_cluster(cluster, ["node-1", "node-2", "node-3"])
    remove_member(cluster, "node-2")
    args = ("records", cluster, "--port-base", "15000")
    framed = run_cli(*args, "--frame")
    assert framed.returncode == 0, framed.stderr
    assert framed.stdout.count("\n") == 1 and framed.stdout.endswith("\n")
    frame = json.loads(framed.stdout)
    schema = {"$ref": BASE + "nodes-update.schema.json"}
    jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(frame)
    assert frame["method"] == "nodes:update" and "id" not in frame
    assert frame["params"]["nodes"] == json.loads(run_cli(*args).stdout)
    assert [(r["nodeId"], r["port"]) for r in frame["params"]["nodes"]] == [
        ("node-1", 15000),
        ("node-3", 15002),  # node-2 keeps its slot
    ]


# --- command line -----------------------------------------------------------------------


def test_cli_init_records_fingerprint_add_remove(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    res = run_cli("init", cluster, "--nodes", "3")
    assert res.returncode == 0, res.stderr
    lines = [line.split("\t") for line in res.stdout.splitlines()]
    assert [line[0] for line in lines] == ["node-1", "node-2", "node-3"]
    assert all(line[1] == _fp(cluster / line[0] / "node.crt") for line in lines)
    _assert_full_mesh(cluster, ["node-1", "node-2", "node-3"])

    res = run_cli("records", cluster, "--port-base", "15000")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [
        {
            "nodeId": f"node-{i}",
            "address": "127.0.0.1",
            "port": 15000 + i - 1,
            "fingerprint": _fp(cluster / f"node-{i}" / "node.crt"),
        }
        for i in (1, 2, 3)
    ]
    res = run_cli("records", cluster, "--address", "10.0.0.5")
    assert [(r["address"], r["port"]) for r in json.loads(res.stdout)] == [
        ("10.0.0.5", DEFAULT_PORT)
    ] * 3

    res = run_cli("fingerprint", cluster / "node-1" / "node.crt")
    assert res.returncode == 0 and res.stdout == _fp(cluster / "node-1" / "node.crt") + "\n"

    assert run_cli("add", cluster, "node-4").returncode == 0
    _assert_full_mesh(cluster, ["node-1", "node-2", "node-3", "node-4"])
    res = run_cli("remove", cluster, "node-1")
    assert res.returncode == 0, res.stderr
    _assert_full_mesh(cluster, ["node-2", "node-3", "node-4"])
    assert run_cli("remove", cluster, "node-1", "--purge").returncode == 0
    assert not (cluster / "node-1").exists()
    assert [r["nodeId"] for r in json.loads(run_cli("records", cluster).stdout)] == [
        "node-2",
        "node-3",
        "node-4",
    ]


def test_cli_init_with_names(tmp_path: Path) -> None:
    res = run_cli("init", tmp_path / "c", "--names", "alpha,beta")
    assert res.returncode == 0, res.stderr
    assert members(tmp_path / "c") == ["alpha", "beta"]
    res = run_cli("init", tmp_path / "d", "--nodes", "2", "--names", "x,y")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("bogus",),
        ("init", "{d}"),
        ("init", "{d}", "--nodes", "0"),
        ("init", "{d}", "--nodes", "two"),
        ("init", "{d}", "--nodes", "3", "--names", "a,b"),
        ("init", "{d}", "--names", "a,a"),
        ("init", "{d}", "--names", "Bad_Name"),
        ("add", "{d}", "UPPER"),
        ("records", "{d}", "--port-base", "70000"),
    ],
)
def test_cli_usage_errors_exit_2_with_one_line(tmp_path: Path, args: tuple[str, ...]) -> None:
    res = run_cli(*(a.format(d=tmp_path / "c") for a in args))
    assert res.returncode == 2
    assert res.stdout == ""
    assert len(res.stderr.splitlines()) == 1 and "error:" in res.stderr
    assert not (tmp_path / "c").exists()


def test_cli_operational_errors_exit_1_with_one_line(tmp_path: Path) -> None:
    cluster = tmp_path / "c"
    assert run_cli("init", cluster, "--nodes", "2").returncode == 0
    garbage = tmp_path / "garbage.crt"
    garbage.write_bytes(b"hello\n")
    for args in (
        ("init", cluster, "--nodes", "2"),
        ("add", cluster, "node-1"),
        ("remove", cluster, "node-9"),
        ("records", tmp_path / "missing"),
        ("fingerprint", garbage),
        ("fingerprint", tmp_path / "missing.crt"),
    ):
        res = run_cli(*args)
        assert res.returncode == 1, args
        assert len(res.stderr.splitlines()) == 1, res.stderr
        assert res.stderr.startswith("nvpair-wm-cluster: error: ")
