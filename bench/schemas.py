"""The contract in ``schema/``, loaded the ways the baselines need it.

* :func:`registry` - every schema file by ``$id``, for ``jsonschema`` (Draft 2020-12).
* :func:`bundled` - one schema with every ``$ref`` inlined, for ``fastjsonschema`` (which has
  no 2020-12 support and no registry: the keywords the contract uses mean the same in draft-07
  once ``$ref`` and ``$defs`` are gone).
* :func:`pydantic_models` - pydantic v2 models generated from ``schema/`` right now by
  datamodel-code-generator (the same generator and schema as ``generated/``, only the output
  model type differs), imported from a temporary directory.
"""

from __future__ import annotations

import atexit
import copy
import functools
import importlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urldefrag, urljoin

from referencing import Registry, Resource

from bench.harness import ROOT

SCHEMA_DIR = ROOT / "schema"
BASE = "https://schemas.nvpair.dev/wm/v1/"
INBOUND = BASE + "inbound-frame.schema.json"
WORKLOAD_INFO = BASE + "workload-info.schema.json"


@functools.cache
def documents() -> dict[str, dict[str, Any]]:
    docs = {}
    for f in sorted(SCHEMA_DIR.glob("*.schema.json")):
        doc = json.loads(f.read_text())
        docs[doc["$id"]] = doc
    return docs


def registry() -> Any:
    return Registry().with_resources(
        (uri, Resource.from_contents(doc)) for uri, doc in documents().items()
    )


def info_properties() -> tuple[str, ...]:
    """The allow-list: the WorkloadInfo properties, in schema order."""
    return tuple(documents()[WORKLOAD_INFO]["properties"])


def _pointer(doc: Any, fragment: str) -> Any:
    node = doc
    for part in fragment.lstrip("/").split("/") if fragment else []:
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def bundled(root_uri: str = INBOUND) -> dict[str, Any]:
    """``root_uri`` with every ``$ref`` replaced by its target (the contract has no cycles)."""
    docs = documents()
    dropped = {"$id", "$schema", "$defs", "examples", "discriminator", "title", "description"}

    def resolve(node: Any, base: str, names: bool = False) -> Any:
        # ``names``: node is a "properties" map, whose keys are property names, not keywords.
        if isinstance(node, list):
            return [resolve(x, base) for x in node]
        if not isinstance(node, dict):
            return node
        if names:
            return {k: resolve(v, base) for k, v in node.items()}
        out: dict[str, Any] = {}
        if "$ref" in node:
            uri, frag = urldefrag(urljoin(base, node["$ref"]))
            out.update(resolve(copy.deepcopy(_pointer(docs[uri], frag)), uri))
        for k, v in node.items():
            if k in dropped or k == "$ref":
                continue
            out[k] = v if k in ("const", "enum", "default") else resolve(v, base, k == "properties")
        return out

    out = resolve(docs[root_uri], root_uri)
    assert isinstance(out, dict), "a root schema is a JSON object"
    out["$schema"] = "http://json-schema.org/draft-07/schema#"
    return out


_GEN_ARGS = [
    "--input-file-type",
    "jsonschema",
    "--output-model-type",
    "pydantic_v2.BaseModel",
    "--target-python-version",
    "3.11",
    "--use-annotated",
    "--field-constraints",
    "--use-standard-collections",
    "--use-union-operator",
    "--enum-field-as-literal",
    "all",
    "--disable-timestamp",
    # Single-value wrappers (RootModel) are slow and nobody keeps them by choice: collapse
    # them, so the baseline is what a pydantic user would run.
    "--collapse-root-models",
    "--formatters",
    "ruff-format",
]


@functools.cache
def pydantic_models() -> dict[str, ModuleType]:
    """Generate pydantic v2 models from schema/ into a temporary package and import it."""
    tmp = Path(tempfile.mkdtemp(prefix="nvpair-bench-pydantic-"))
    atexit.register(shutil.rmtree, tmp, True)
    staged = tmp / "schema"
    staged.mkdir()
    for f in sorted(SCHEMA_DIR.glob("*.schema.json")):
        shutil.copy(f, staged / f.name)
    pkg = "nvpair_bench_pydantic"
    exe = Path(sys.executable).with_name("datamodel-codegen")
    proc = subprocess.run(
        [str(exe), "--input", str(staged), "--output", str(tmp / pkg), *_GEN_ARGS],
        capture_output=True,
        text=True,
        cwd=tmp,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"datamodel-codegen failed:\n{proc.stdout}{proc.stderr}")
    sys.path.insert(0, str(tmp))
    try:
        names = ("inbound_frame_schema", "workload_events_schema", "workloads_upsert_schema")
        return {n: importlib.import_module(f"{pkg}.{n}") for n in names}
    finally:
        sys.path.remove(str(tmp))
