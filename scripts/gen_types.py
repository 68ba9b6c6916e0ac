"""Generate generated/ (nvpair_wm_schema and openrpc.json) from schema/, or check it is current.

Run through `make gen` / `make check-gen`. The generator runs on a staged copy holding only the
schema files (schema/conformance/ holds test vectors, not schemas), and any warning it prints is
an error: a warning there usually means a union msgspec cannot decode.

The schema files use no custom keywords, so that strict validators (Ajv's strict mode) take them
as they are. A tagged union is a root ``oneOf`` whose branches are ``$ref``s to object schemas that
each require ``method`` and pin it with ``const``. datamodel-code-generator makes msgspec tagged
unions only from the OpenAPI ``discriminator`` keyword, and does not infer one across files, so
the staged copy gets that keyword, derived from the branches' ``const``s (:func:`tag_unions`):
nothing is retyped, and ``schema/`` stays strict-clean.

Besides the types, ``make gen`` writes ``contract.py``: the constants the schema owns and code
would otherwise retype (:func:`contract_module`): the contract version (``schema/VERSION``), the
error codes and their messages (``ErrorCode``'s ``oneOf`` branches: ``const`` and ``title``), the
method → type map of every tagged union, and bounds such as the default port; and
``generated/openrpc.json``, the OpenRPC document of every method (:func:`openrpc_document`).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schema"
PACKAGE = "nvpair_wm_schema"
TARGET = ROOT / "generated" / PACKAGE
OPENRPC = "openrpc.json"
HEADER = "# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand."
CONTRACT_HEADER = HEADER.replace("datamodel-code-generator", "scripts/gen_types.py")

ARGS = [
    "--input-file-type",
    "jsonschema",
    "--output-model-type",
    "msgspec.Struct",
    "--target-python-version",
    "3.11",
    "--use-annotated",
    "--field-constraints",
    "--use-standard-collections",
    "--use-union-operator",
    "--use-schema-description",
    "--use-field-description",
    "--enum-field-as-literal",
    "all",
    "--disable-timestamp",
    "--formatters",
    "ruff-format",
    "--custom-file-header",
    HEADER,
]


TAG = "method"
# Unions told apart by their members (result / error / method), not by a tag: msgspec decodes no
# such union as one type, so these files get no generated type. Every part they combine does;
# tests/test_conformance.py checks their vectors through those parts.
NOT_GENERATED = frozenset({"broker-line.schema.json", "http-response.schema.json"})


def _resolve(ref: str, here: str, schemas: dict[str, Any]) -> Any:
    """The schema a relative ``$ref`` (``file.schema.json`` or ``file#/$defs/Name``) points to."""
    file, _, pointer = ref.partition("#")
    node = schemas[file or here]
    for part in filter(None, pointer.split("/")):
        node = node[part]
    return node


def tag_unions(schemas: dict[str, Any]) -> None:
    """Give every root ``oneOf`` of frame types a ``discriminator`` on ``method``, in place.

    ``schemas`` maps file names to parsed schema files. A root ``oneOf`` whose branches all pin
    ``method`` is tagged; one where no branch does is left alone; a mix, or a branch that pins
    ``method`` without requiring it or repeats another's tag, is an error.
    """
    for name, schema in schemas.items():
        branches = schema.get("oneOf")
        if not isinstance(branches, list):
            continue
        mapping: dict[str, str] = {}
        untagged = []
        for branch in branches:
            ref = branch.get("$ref")
            target = _resolve(ref, name, schemas) if isinstance(ref, str) else branch
            tag = target.get("properties", {}).get(TAG, {}).get("const")
            if tag is None:
                untagged.append(ref)
                continue
            if TAG not in target.get("required", []) or tag in mapping or ref is None:
                sys.exit(f"{name}: branch {ref or branch} cannot be a tagged-union variant")
            mapping[tag] = ref
        if mapping and untagged:
            sys.exit(f"{name}: branches {untagged} do not pin {TAG!r}, the others do")
        if mapping:
            schema["discriminator"] = {"propertyName": TAG, "mapping": mapping}


def _module(file: str) -> str:
    """The module datamodel-code-generator writes for a schema file."""
    return file.removesuffix(".json").replace(".", "_").replace("-", "_")


def _snake(words: str) -> str:
    return "_".join(w.upper() for w in words.replace("-", " ").split())


def contract_module(schemas: dict[str, Any], version: str) -> str:
    """Python source of ``contract.py``, from the tagged schemas and ``schema/VERSION``."""
    rpc = schemas["jsonrpc.schema.json"]["$defs"]
    ready = schemas["ready.schema.json"]["$defs"]["ReadyParams"]["properties"]
    pattern = ready["contractVersion"]["pattern"]
    if not re.fullmatch(pattern, version):
        sys.exit(f"schema/VERSION {version!r} does not match ReadyParams.contractVersion {pattern}")
    id_branches = {b["type"]: b for b in rpc["RequestId"]["anyOf"]}
    node = schemas["node-record.schema.json"]["properties"]
    nodes = schemas["nodes-update.schema.json"]["$defs"]["NodesUpdateParams"]["properties"]
    lines = [
        CONTRACT_HEADER,
        '"""Constants the contract in schema/ owns: use these instead of retyping them."""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Final",
        "",
        "import msgspec",
        "",
        "from .jsonrpc_schema import ErrorCode",
    ]
    imports: set[str] = set()
    unions: list[str] = []
    requests: set[str] = set()
    paramless: set[str] = set()
    for name, schema in schemas.items():
        disc = schema.get("discriminator")
        if disc is None:
            continue
        const = _snake(re.sub(r"(?<=[a-z])(?=[A-Z])", " ", schema["title"])) + "_TYPES"
        unions.append("")
        unions.append(f"{const}: Final[dict[str, type[msgspec.Struct]]] = {{")
        for tag, ref in disc["mapping"].items():
            file = ref.partition("#")[0] or name
            target = _resolve(ref, name, schemas)
            title = target["title"]
            if "id" in target["required"]:
                requests.add(tag)
            if "params" not in target["required"]:
                paramless.add(tag)
            imports.add(_module(file))
            unions.append(f"    {tag!r}: {_module(file)}.{title},")
        unions.append("}")
        unions.append(f'"""{schema["title"]}: each method and the generated type it selects."""')
    lines.append(f"from . import {', '.join(sorted(imports))}")
    lines += [
        "",
        f"CONTRACT_VERSION: Final = {version!r}",
        '"""schema/VERSION: the contract version sent in ready.params.contractVersion."""',
        f"DEFAULT_PORT: Final = {node['port']['default']!r}",
        '"""The inter-node port when none is given (NodeRecord.port\'s default)."""',
        f"MAX_SAFE_INTEGER: Final = {id_branches['integer']['maximum']!r}",
        '"""The largest integer of the contract (RequestId\'s bound; 2**53 - 1)."""',
        f"MAX_REQUEST_ID_LENGTH: Final = {id_branches['string']['maxLength']!r}",
        '"""The longest string RequestId, in code points."""',
        f"MAX_NODE_RECORDS: Final = {nodes['nodes']['maxItems']!r}",
        '"""The most node records one nodes:update may carry."""',
        "",
    ]
    messages = []
    for branch in rpc["ErrorCode"]["oneOf"]:
        const = _snake(branch["title"])
        lines.append(f"{const}: Final = {branch['const']!r}")
        lines.append(f'"""{branch["description"]}"""')
        messages.append(f"    {const}: {branch['title']!r},")
    lines += ["", "ERROR_MESSAGES: Final[dict[ErrorCode, str]] = {", *messages, "}"]
    lines.append('"""The message (ErrorObject.message) of each error code."""')
    lines += unions
    lines += [
        "",
        f"REQUEST_ONLY_METHODS: Final = frozenset({sorted(requests)!r})",
        '"""Methods whose frame requires an id: never sent as a notification."""',
        f"PARAMLESS_METHODS: Final = frozenset({sorted(paramless)!r})",
        '"""Methods whose frame may omit params."""',
    ]
    return "\n".join(lines) + "\n"


OPENRPC_VERSION = "1.3.2"
DIRECTIONS = {
    "inbound-frame.schema.json": "broker -> manager",
    "peer-frame.schema.json": "peer -> manager",
    "broker-frame.schema.json": "manager -> broker",
}


def _camel(words: str) -> str:
    return "".join(w[:1].upper() + w[1:] for w in words.split())


def openrpc_document(schemas: dict[str, Any], version: str) -> dict[str, Any]:
    """The OpenRPC 1.x description of every method, from the tagged unions (which frames go
    where) and the frame schemas (params, whether an id is required or allowed).

    Non-standard facts go in ``x-`` extension fields, which OpenRPC allows on every object:
    ``x-direction`` (who sends the method to whom), ``x-kind`` (notification, request, or
    either) and ``x-frame`` (the frame's schema). A method's result is the ``*Result``
    definition of its frame's schema file if it has one (StatusResult), else EventResult.
    """
    rpc = schemas["jsonrpc.schema.json"]
    base = rpc["$id"].rsplit("/", 1)[0] + "/"
    components: dict[str, Any] = {}
    for branch in rpc["$defs"]["ErrorCode"]["oneOf"]:
        # No "data": on the wire it is an ErrorData object; when each code is sent is said by
        # ErrorCode's branch descriptions in jsonrpc.schema.json.
        components[_camel(branch["title"])] = {"code": branch["const"], "message": branch["title"]}
    err_ref = {
        b["const"]: f"#/components/errors/{_camel(b['title'])}"
        for b in rpc["$defs"]["ErrorCode"]["oneOf"]
    }
    methods: dict[str, dict[str, Any]] = {}
    peer_methods = set(schemas["peer-frame.schema.json"]["discriminator"]["mapping"])
    for union, direction in DIRECTIONS.items():
        for tag, ref in schemas[union]["discriminator"]["mapping"].items():
            file = ref.partition("#")[0]
            frame = _resolve(ref, union, schemas)
            method = methods.get(tag)
            if method is not None:
                method["x-direction"].append(direction)
                continue
            props = frame["properties"]
            kind = (
                "request"
                if "id" in frame["required"]
                else "notification or request"
                if "id" in props
                else "notification"
            )
            params: list[dict[str, Any]] = []
            pref = props.get("params", {}).get("$ref")
            if pref is not None:
                pfile, _, pointer = pref.partition("#")
                pfile = pfile or file
                pschema = _resolve(pref, file, schemas)
                for name, sub in pschema.get("properties", {}).items():
                    desc = {"name": name, "required": name in pschema.get("required", [])}
                    if "description" in sub:
                        desc["description"] = sub["description"]
                    desc["schema"] = {"$ref": f"{base}{pfile}#{pointer}/properties/{name}"}
                    params.append(desc)
            method = {
                "name": tag,
                "summary": frame["title"],
                "description": frame["description"],
                "paramStructure": "by-name",
                "params": params,
                "x-direction": [direction],
                "x-kind": kind,
                "x-frame": {"$ref": base + ref},
            }
            if kind != "notification":
                results = [
                    d for d, s in schemas[file].get("$defs", {}).items() if d.endswith("Result")
                ]
                rdef = (
                    f"{file}#/$defs/{results[0]}"
                    if results
                    else "jsonrpc.schema.json#/$defs/EventResult"
                )
                method["result"] = {
                    "name": rdef.rsplit("/", 1)[-1],
                    "schema": {"$ref": base + rdef},
                }
            if union != "broker-frame.schema.json":
                # Which errors a method can earn is behaviour, not a schema keyword: every code
                # the manager sends (-32001 is reserved), and -32601 where a peer may not send it.
                codes = [-32700, -32600, -32602, -32603, -32000]
                if tag not in peer_methods:
                    codes.insert(2, -32601)
                method["errors"] = [{"$ref": err_ref[c]} for c in codes]
            methods[tag] = method
    return {
        "openrpc": OPENRPC_VERSION,
        "info": {
            "title": "nvpair-wm",
            "version": version,
            "description": (
                "The contract between an nvpair-wm manager, its broker (newline-delimited JSON-RPC "
                "2.0 on stdio or --ipc) and its peers (the same frames in the body of POST "
                "/v1/workloads/events over mutual-TLS HTTP/2 or HTTP/1.1). Generated from "
                "schema/ by `make gen`; the schemas it refers to are schema/*.schema.json, by $id."
            ),
        },
        "servers": [
            {
                "name": "local",
                "url": "stdio:",
                "description": "The broker's channel: one JSON text per line on stdin/stdout, "
                "or on the --ipc socket.",
            },
            {
                "name": "inter-node",
                "url": "https://{host}:{port}/v1/workloads/events",
                "description": "Between pinned members of a cluster (a peer is another manager): "
                "mutual TLS, HTTP/2 or HTTP/1.1. Every request and response carries "
                f"`nvpair-contract-version: {version}` (x-headers); a request of another major "
                "version is refused with 409, before any frame is applied, and one without the "
                "header is served as this major.",
                "x-headers": {
                    "nvpair-contract-version": {
                        "in": ["request", "response"],
                        "value": version,
                        "description": "The contract version (MAJOR.MINOR.PATCH) the sender "
                        "speaks; another major earns 409 (HttpError naming both versions).",
                    },
                    "user-agent": {
                        "in": ["request"],
                        "value": "nvpair-wm/<package version>",
                        "description": "The sending software and its version.",
                    },
                    "server": {
                        "in": ["response"],
                        "value": "nvpair-wm/<package version>",
                        "description": "The answering software and its version.",
                    },
                },
                "variables": {
                    "host": {"default": "localhost"},
                    "port": {
                        "default": str(
                            schemas["node-record.schema.json"]["properties"]["port"]["default"]
                        )
                    },
                },
            },
        ],
        "methods": list(methods.values()),
        "components": {"errors": components},
    }


def _ruff_format(source: str, name: str) -> str:
    exe = Path(sys.executable).with_name("ruff")
    proc = subprocess.run(
        [str(exe), "format", "--stdin-filename", name, "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"ruff format failed on {name}:\n{proc.stderr}")
    return proc.stdout


def generate(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "schema"
        staged.mkdir()
        files = sorted(SCHEMA.glob("*.schema.json"))
        schemas = {f.name: json.loads(f.read_text()) for f in files}
        tag_unions(schemas)
        for name, schema in schemas.items():
            if name in NOT_GENERATED:
                continue
            (staged / name).write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n")
        exe = Path(sys.executable).with_name("datamodel-codegen")
        proc = subprocess.run(
            [str(exe), "--input", str(staged), "--output", str(out), *ARGS],
            capture_output=True,
            text=True,
            cwd=tmp,
            check=False,
        )
        noise = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0 or noise:
            sys.exit(f"datamodel-codegen failed or warned (treated as an error):\n{noise}")
    shutil.rmtree(out / ".ruff_cache", ignore_errors=True)
    (out / "py.typed").write_text("")
    version = (SCHEMA / "VERSION").read_text().strip()
    contract = contract_module(schemas, version)
    (out / "contract.py").write_text(_ruff_format(contract, f"generated/{PACKAGE}/contract.py"))
    document = openrpc_document(schemas, version)
    (out.parent / OPENRPC).write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def same_tree(a: Path, b: Path) -> list[str]:
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    diffs = [*cmp.left_only, *cmp.right_only, *cmp.diff_files, *cmp.funny_files]
    for sub in cmp.common_dirs:
        diffs += [f"{sub}/{d}" for d in same_tree(a / sub, b / sub)]
    return diffs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if generated/ is stale")
    args = parser.parse_args()
    go = [sys.executable, str(ROOT / "scripts" / "gen_go.py"), *(["--check"] * args.check)]
    if subprocess.run(go, check=False).returncode:  # consumers/go (scripts/gen_go.py)
        sys.exit(1)
    # Behaviour vectors derived from schema/ (scripts/gen_vectors.py): written or checked too.
    subprocess.run([sys.executable, str(Path(__file__).with_name("gen_vectors.py")), *sys.argv[1:]], check=True)  # fmt: skip  # noqa: E501
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / PACKAGE
        generate(fresh)
        ts = [sys.executable, str(ROOT / "scripts" / "gen_ts.py"), *(["--check"] * args.check)]
        if subprocess.run(ts, check=False).returncode:  # consumers/ts (scripts/gen_ts.py)
            sys.exit(1)
        document = fresh.parent / OPENRPC
        if args.check:
            stale = same_tree(fresh, TARGET) if TARGET.exists() else ["(missing)"]
            current = TARGET.parent / OPENRPC
            if not current.exists() or current.read_bytes() != document.read_bytes():
                stale.append(OPENRPC)
            if stale:
                sys.exit(f"generated/ is stale ({', '.join(stale)}): run `make gen`")
            print(f"generated/{PACKAGE} and generated/{OPENRPC} are up to date")
            return
        shutil.rmtree(TARGET, ignore_errors=True)
        shutil.copytree(fresh, TARGET)
        shutil.copy(document, TARGET.parent / OPENRPC)
        print(f"wrote generated/{PACKAGE} and generated/{OPENRPC}")


if __name__ == "__main__":
    main()
