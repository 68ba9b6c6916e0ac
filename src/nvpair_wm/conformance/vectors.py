"""Loading behaviour vectors and turning their inputs into bytes (pure, no IO but reading files).

The format is described in ``schema/conformance/behaviour/README.md`` and checked by
``behaviour-vector.schema.json`` beside it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Final

# The vectors ship inside the package: ``vectors`` is a symlink to schema/conformance/behaviour/
# in the source tree (one copy in the repository), and a directory of copies in a built wheel.
DEFAULT_DIR: Final = Path(__file__).parent / "vectors"
FORMAT_SCHEMA: Final = "behaviour-vector.schema.json"
COUNTER: Final = "{n}"
RECORD: Final = "$record"
AT: Final = "$at"


def load(directory: Path = DEFAULT_DIR) -> list[dict[str, Any]]:
    """Every group of every ``*.json`` vector file (the format schema excluded), file order."""
    groups: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.json")):
        if path.name.endswith(".schema.json"):
            continue
        for group in json.loads(path.read_text(encoding="utf-8")):
            group.setdefault("file", path.name)
            groups.append(group)
    names = [g["group"] for g in groups]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"duplicate group names: {sorted(dupes)}")
    return groups


def _pad(data: bytes, pad_to: int | None, pad_with: str = " ") -> bytes:
    if pad_to is None:
        return data
    if len(data) > pad_to:
        raise ValueError(f"padTo {pad_to} is shorter than the text ({len(data)} bytes)")
    return data + pad_with.encode() * (pad_to - len(data))


def _substitute(value: Any, n: int) -> Any:
    if isinstance(value, str):
        return value.replace(COUNTER, str(n))
    if isinstance(value, dict):
        return {k: _substitute(v, n) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, n) for v in value]
    return value


def encode(value: Any) -> bytes:
    """Compact JSON, UTF-8, no ASCII escaping: what a typical sender writes."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def payload(spec: dict[str, Any], start: int = 0) -> bytes:
    """The bytes of a line's content or of an HTTP body, without any line ending.

    ``start`` numbers the frames of a ``batch`` template (``{n}`` in its strings), so that
    repeated bodies carry fresh workloads.
    """
    if "frame" in spec:
        data = encode(spec["frame"])
    elif "text" in spec:
        data = str(spec["text"]).encode()
    elif "base64" in spec:
        data = base64.b64decode(spec["base64"])
    elif "batch" in spec:
        tpl = spec["batch"]
        data = encode([_substitute(tpl["frame"], start + i) for i in range(tpl["count"])])
    else:
        raise ValueError(f"no payload in {spec}")
    return _pad(data, spec.get("padTo"), spec.get("padWith", " "))


def with_records(value: Any, records: dict[str, Any]) -> Any:
    """``value`` with every ``{"$record": NAME}`` replaced by that member's node record (the
    kit's peers get their ports when the group starts). Other members beside ``$record``
    replace the record's (``{"$record": NAME, "port": 1}``: the member moved elsewhere), and
    ``"$at": OTHER`` takes OTHER's address and port (NAME's record naming another's server)."""
    if isinstance(value, dict):
        if RECORD in value:
            record = dict(records[value[RECORD]])
            if AT in value:
                other = records[value[AT]]
                record.update(address=other["address"], port=other["port"])
            moved = {k: with_records(v, records) for k, v in value.items() if k not in (RECORD, AT)}
            return {**record, **moved}
        return {k: with_records(v, records) for k, v in value.items()}
    if isinstance(value, list):
        return [with_records(v, records) for v in value]
    return value


def line(spec: dict[str, Any]) -> bytes:
    """One input item of the local channel: its payload and its line ending."""
    return payload(spec) + str(spec.get("eol", "\n")).encode()


def batch_size(spec: dict[str, Any]) -> int:
    return int(spec["batch"]["count"]) if "batch" in spec else 1
