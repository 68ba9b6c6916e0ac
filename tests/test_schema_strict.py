"""schema/ is usable by strict tooling, and the tagged unions survive that.

Ajv (Node) compiles every schema in strict mode (no unknown keywords, such as the OpenAPI
``discriminator``); ``make gen`` derives the ``discriminator`` that datamodel-code-generator needs
from the branches' ``method`` consts (``scripts/gen_types.py``), so the generated unions stay
msgspec tagged unions. Node and the npm packages are real: a missing one fails the test with the
command that installs it. json-schema-to-typescript, run as schema/README.md tells a TypeScript
team to, gives closed, named types and a discriminated union on ``method`` that ``tsc --strict``
checks for exhaustiveness. Adds about 10 s of CPU (Node, json-schema-to-typescript, two tsc runs).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from nvpair_wm_schema.broker_frame_schema import BrokerFrame
from nvpair_wm_schema.inbound_frame_schema import InboundFrame

from tests.support.tools import tool

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "schema"
TS_DIR = ROOT / "consumers" / "ts"


def node() -> str:
    exe = tool("node", "nodejs npm")
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


# json-schema-to-typescript over every schema root and definition, the way schema/README.md
# tells a TypeScript team to run it: a resolver that maps each $id to its file (no network),
# and additionalProperties: false for closed types.
JSTT_SCRIPT = r"""
import { compile } from "json-schema-to-typescript";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
const [dir, out] = process.argv.slice(1);
const base = "https://schemas.nvpair.dev/wm/v1/";
const local = {
  order: 1,
  canRead: (f) => f.url.startsWith(base),
  read: (f) => readFileSync(join(dir, f.url.slice(base.length).split("#")[0]), "utf8"),
};
const props = {};
for (const f of readdirSync(dir).filter((x) => x.endsWith(".schema.json")).sort()) {
  const s = JSON.parse(readFileSync(join(dir, f), "utf8"));
  if (s.type || s.oneOf || s.anyOf) props[s.title] = { $ref: s.$id };
  for (const d of Object.keys(s.$defs ?? {})) props[d] = { $ref: `${s.$id}#/$defs/${d}` };
}
const all = { $id: base + "all", title: "All", type: "object", properties: props };
const ts = await compile(all, "All", {
  cwd: dir, bannerComment: "", additionalProperties: false,
  $refOptions: { resolve: { nvpair: local, http: false, external: true } },
});
writeFileSync(out, ts);
"""

USE_TYPES = """
import type { InboundFrame, PeerFrame, WorkloadsRemove } from "./types";
export function tag(f: InboundFrame | PeerFrame): string {
  switch (f.method) {
    case "workload:submitted": case "workload:started": case "workload:completed":
    case "workload:errored": case "workload:cancelled": return f.params.workloadInfo.runId;
    case "workloads:remove": return f.params.originatedFrom;
    case "nodes:update": return String(f.params.nodes.length);
    case "manager:status": return String(f.id);
    default: { const unreachable: never = f; return unreachable; }
  }
}
export function typo(r: WorkloadsRemove): unknown { return TYPO; }
"""


def typescript(tmp_path: Path) -> str:
    node()
    if not (TS_DIR / "node_modules" / "json-schema-to-typescript" / "package.json").is_file():
        pytest.fail("the Node packages are not installed: npm ci --prefix consumers/ts")
    proc = subprocess.run(
        [
            node(),
            "--input-type=module",
            "-e",
            JSTT_SCRIPT,
            str(SCHEMA_DIR),
            str(tmp_path / "types.ts"),
        ],
        cwd=TS_DIR,  # bare imports resolve from consumers/ts/node_modules
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return (tmp_path / "types.ts").read_text()


def tsc(tmp_path: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    return subprocess.run(
        [
            node(),
            str(TS_DIR / "node_modules" / "typescript" / "bin" / "tsc"),
            "--strict",
            "--noEmit",
            "--target",
            "es2022",
            "--moduleResolution",
            "bundler",
            "--module",
            "es2022",
            *(str(tmp_path / name) for name in files),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_typescript_types_are_closed_named_and_exhaustive(tmp_path: Path) -> None:
    ts = typescript(tmp_path)
    names = re.findall(r"^export (?:type|interface) (\w+)", ts, re.MULTILINE)
    assert [n for n in names if re.search(r"\d$", n)] == [], "numbered alias types"
    for f in SCHEMA_DIR.glob("*.schema.json"):
        s = json.loads(f.read_text())
        for d in s.get("$defs", {}).values():
            if "title" in d:
                assert d["title"] in names, d["title"]
    # The one open object left is SuccessResponse.result (any JSON value, by design).
    assert ts.count("[k: string]: unknown") == 1
    # One tsc run: use.ts must compile (exhaustive switch), typo.ts must not (closed types).
    proc = tsc(
        tmp_path,
        {
            "use.ts": USE_TYPES.replace("TYPO", "r.params"),
            "typo.ts": USE_TYPES.replace("TYPO", "r.parms"),
        },
    )
    errors = [line for line in proc.stdout.splitlines() if "error TS" in line]
    assert proc.returncode != 0 and errors, proc.stdout + proc.stderr
    assert all(
        line.startswith(str(tmp_path / "typo.ts")) or "typo.ts" in line for line in errors
    ), errors
    assert any("parms" in line for line in errors), errors
