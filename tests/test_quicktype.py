"""What the mainstream generator makes of ``schema/``: quicktype's Go, measured by the kit.

quicktype (pinned in ``tests/quicktype/package-lock.json``) generates Go from every schema file
and every ``$defs`` entry; the types compile. Wrapped in the codec role's line protocol as
quicktype tells a team to use them (``UnmarshalX``, then ``Marshal``;
``tests/quicktype/codec_main.go``), they fail ``nvpair-wm-conformance --codec``, and the kit names
the vectors: invalid frames accepted (a missing required member, an unknown ``state``, ``seq``
0), valid ones refused (``1.0`` as an integer), absent and null confused on re-encoding.

The quicktype packages come from npm (``npm ci --prefix tests/quicktype``); without them the test
fails saying so. About 20 s.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tools import tool
from tests.test_consumers_go import go_env, run

ROOT = Path(__file__).resolve().parents[1]
QT_DIR = ROOT / "tests" / "quicktype"
SCHEMA = ROOT / "schema"


def quicktype_sources() -> list[str]:
    """Every schema file and each of its $defs, as quicktype takes them (file#/pointer).

    Not the two files that only hold $defs (JsonRpcEnvelope, WorkloadEvents): quicktype makes
    each ``type X interface{}`` with a ``Marshal`` method, which does not compile.
    """
    sources = []
    for path in sorted(SCHEMA.glob("*.schema.json")):
        schema = json.loads(path.read_text("utf-8"))
        if {"type", "anyOf", "oneOf", "properties"} & set(schema):
            sources.append(path.name)
        sources += [f"{path.name}#/$defs/{name}" for name in schema.get("$defs", {})]
    return sources


@pytest.fixture(scope="module")
def quicktype_codec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    node = tool("node", "nodejs npm")
    go = tool("go", "golang-go")
    cli = QT_DIR / "node_modules" / "quicktype" / "dist" / "index.js"
    if not cli.is_file():
        pytest.fail("quicktype is not installed: npm ci --prefix tests/quicktype")
    build = tmp_path_factory.mktemp("quicktype")
    types = build / "types.go"
    args = [node, str(cli), "-s", "schema", "-l", "go", "--package", "main", "-o", str(types)]
    run([*args, *quicktype_sources()], SCHEMA)
    source = types.read_text()
    decoders = re.findall(r"^func Unmarshal(\w+)\(data \[\]byte\)", source, re.M)
    assert len(decoders) >= 40, decoders
    table = ["package main", "", "func init() {"]
    for name in decoders:
        table.append(
            f'\tcodecs["{name}"] = func(b []byte) ([]byte, error) {{\n'
            f"\t\tr, err := Unmarshal{name}(b)\n"
            "\t\tif err != nil {\n\t\t\treturn nil, err\n\t\t}\n"
            "\t\treturn r.Marshal()\n\t}"
        )
    # quicktype spells acronyms its own way (HTTPError, RequestID): the kit's TYPE is the title.
    table.append(
        "\tfor name, f := range codecs {\n"
        "\t\tfor _, title := range titles {\n"
        "\t\t\tif strings.EqualFold(name, title) {\n\t\t\t\tcodecs[title] = f\n\t\t\t}\n"
        "\t\t}\n\t}\n}"
    )
    titles = sorted(
        {
            str(node.get("title") or pointer)
            for path in SCHEMA.glob("*.schema.json")
            for pointer, node in [
                ("", json.loads(path.read_text())),
                *json.loads(path.read_text()).get("$defs", {}).items(),
            ]
        }
    )
    table.insert(1, '\nimport "strings"\n')
    table.append(f"\nvar titles = []string{{{', '.join(map(json.dumps, titles))}}}")
    (build / "table.go").write_text("\n".join(table) + "\n")
    (build / "main.go").write_text((QT_DIR / "codec_main.go").read_text())
    (build / "go.mod").write_text("module quicktype.probe/codec\n\ngo 1.19\n")
    exe = build / "codec"
    run([go, "build", "-o", str(exe), "."], build, go_env())
    return exe


def test_quicktype_go_fails_the_codec_role_naming_vectors(quicktype_codec: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nvpair_wm.conformance",
            "--codec",
            "--json",
            "--",
            str(quicktype_codec),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    found = doc["disagreements"]
    print(  # the figures for schema/README.md's consumers section (pytest -s shows them)
        f"quicktype Go: {doc['cases']} vectors, {doc['accepted']} accepted, {doc['refused']} "
        f"refused, {doc['roundTripped']} round-tripped, {len(found)} disagreements"
    )

    def named(*words: str) -> bool:
        return any(all(w in problem for w in words) for problem in found)

    # Missing required members become zero values; an unknown state passes; seq 0 passes.
    assert named("workload-info.json", "missing required id", "accepted an invalid WorkloadInfo")
    assert named("workload-info.json", "state empty", "accepted an invalid WorkloadInfo")
    assert named("workload-info.json", "seq 0", "accepted an invalid WorkloadInfo")
    # An integer written 1.0 is refused.
    assert named("refused a valid", "1.0")
    # Absent and null are two states in the contract, one in a pointer.
    assert named("WorkloadInfo", "re-encoded WorkloadInfo as")
