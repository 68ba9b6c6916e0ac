"""schema/ is usable by strict tooling, and the tagged unions survive that.

Ajv (Node) compiles every schema in strict mode (no unknown keywords, such as the OpenAPI
``discriminator``); ``make gen`` derives the ``discriminator`` that datamodel-code-generator needs
from the branches' ``method`` consts (``scripts/gen_types.py``), so the generated unions stay
msgspec tagged unions. Node and the npm packages are real: a missing one fails the test with the
command that installs it. Adds about a second (two Node runs).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from nvpair_wm_schema.broker_frame_schema import BrokerFrame
from nvpair_wm_schema.inbound_frame_schema import InboundFrame

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "schema"
TS_DIR = ROOT / "consumers" / "ts"


def node() -> str:
    exe = shutil.which("node")
    if exe is None:
        pytest.fail("node is not installed: apt-get install -y nodejs npm")
    if not (TS_DIR / "node_modules" / "ajv" / "package.json").is_file():
        pytest.fail("the Node packages are not installed: npm ci --prefix consumers/ts")
    return exe


def ajv_strict(schema_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [node(), str(TS_DIR / "ajv-strict.mjs"), str(schema_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_schema_compiles_in_ajv_strict_mode() -> None:
    proc = ajv_strict(SCHEMA_DIR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for f in sorted(SCHEMA_DIR.glob("*.schema.json")):
        assert f"ok {f.name} " in proc.stdout, proc.stdout


def test_ajv_strict_refuses_a_custom_keyword(tmp_path: Path) -> None:
    """The check has teeth: the `discriminator` keyword the schemas used to carry is refused."""
    for f in SCHEMA_DIR.glob("*.schema.json"):
        shutil.copy(f, tmp_path / f.name)
    target = tmp_path / "inbound-frame.schema.json"
    schema = json.loads(target.read_text())
    schema["discriminator"] = {"propertyName": "method"}
    target.write_text(json.dumps(schema))
    proc = ajv_strict(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert 'unknown keyword: "discriminator"' in proc.stdout, proc.stdout


def load_gen_types() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_types", ROOT / "scripts" / "gen_types.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def schema_files() -> dict[str, Any]:
    return {f.name: json.loads(f.read_text()) for f in sorted(SCHEMA_DIR.glob("*.schema.json"))}


@pytest.mark.parametrize(
    ("union", "file"),
    [(InboundFrame, "inbound-frame.schema.json"), (BrokerFrame, "broker-frame.schema.json")],
)
def test_frame_unions_are_generated_as_msgspec_tagged_unions(union: Any, file: str) -> None:
    schemas = schema_files()
    assert "discriminator" not in schemas[file]
    assert schemas[file]["type"] == "object"
    gen = load_gen_types()
    gen.tag_unions(schemas)
    mapping = schemas[file]["discriminator"]["mapping"]
    members = typing.get_args(typing.get_args(union)[0])
    tags = {m.__struct_config__.tag: m.__struct_config__.tag_field for m in members}
    assert tags == dict.fromkeys(mapping, "method")
    assert len(members) == len(schemas[file]["oneOf"])


def test_tag_unions_refuses_a_branch_without_the_tag() -> None:
    gen = load_gen_types()
    schemas = schema_files()
    schemas["inbound-frame.schema.json"]["oneOf"].append({"$ref": "node-record.schema.json"})
    with pytest.raises(SystemExit, match="do not pin 'method'"):
        gen.tag_unions(schemas)


def test_tag_unions_leaves_a_union_without_tags_alone() -> None:
    gen = load_gen_types()
    schemas = {
        "a.schema.json": {"oneOf": [{"$ref": "#/$defs/X"}], "$defs": {"X": {"type": "string"}}}
    }
    gen.tag_unions(schemas)
    assert "discriminator" not in schemas["a.schema.json"]
