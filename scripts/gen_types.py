"""Generate generated/nvpair_wm_schema from schema/*.schema.json, or check that it is current.

Run through `make gen` / `make check-gen`. The generator runs on a staged copy holding only the
schema files (schema/conformance/ holds test vectors, not schemas), and any warning it prints is
an error: a warning there usually means a union msgspec cannot decode.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schema"
PACKAGE = "nvpair_wm_schema"
TARGET = ROOT / "generated" / PACKAGE
HEADER = "# Generated from schema/ by `make gen` (datamodel-code-generator). Do not edit by hand."

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


def generate(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "schema"
        staged.mkdir()
        for f in sorted(SCHEMA.glob("*.schema.json")):
            shutil.copy(f, staged / f.name)
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
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / PACKAGE
        generate(fresh)
        if args.check:
            stale = same_tree(fresh, TARGET) if TARGET.exists() else ["(missing)"]
            if stale:
                sys.exit(f"generated/{PACKAGE} is stale ({', '.join(stale)}): run `make gen`")
            print(f"generated/{PACKAGE} is up to date")
            return
        shutil.rmtree(TARGET, ignore_errors=True)
        shutil.copytree(fresh, TARGET)
        print(f"wrote generated/{PACKAGE}")


if __name__ == "__main__":
    main()
