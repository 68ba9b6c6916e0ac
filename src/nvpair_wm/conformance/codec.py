"""The codec role: ``nvpair-wm-conformance --codec -- COMMAND [ARGS...]``.

Checks another team's decoder and encoder (types from their own generator, say) against the
contract, through a line protocol (``schema/conformance/README.md``, "The codec role"): the kit
writes ``TYPE<TAB>JSON`` per vector, the program answers ``ok<TAB>ENCODED`` or
``error<TAB>PATH<TAB>MESSAGE`` per line, in order.

The vectors are every shape vector (``schema/conformance/*.json``) and the frames of the
behaviour vectors (what brokers and peers send, what a manager writes to its broker). What the
contract says of each is what this package's Python validator says (``nvpair_wm.codec.validate``
over the generated msgspec types, which ``tests/test_conformance.py`` holds to every vector):
valid or not, the canonical re-encoding of a valid text, and the JSON path of the first
violation of an invalid one.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any, Final

import msgspec
from nvpair_wm_schema.contract import DEFAULT_PORT

from nvpair_wm import codec
from nvpair_wm.conformance import vectors

BASE: Final = "https://schemas.nvpair.dev/wm/v1/"
SUFFIX: Final = ".schema.json"
# Files with no generated Python type (scripts/gen_types.py NOT_GENERATED): unions told apart by
# their members. Their verdict is composed from their parts, as tests/test_conformance.py does.
COMPOSED_FILES: Final = frozenset({"broker-line", "http-response"})
DEFAULT_TIMEOUT: Final = 60.0
"""Seconds the program may take for all its answers."""
# The shape vectors (and the schemas beside them) ship inside the package: ``contract`` is a
# symlink to schema/ in the source tree, and a directory of copies in a built wheel.
DEFAULT_SHAPE_DIR: Final = Path(__file__).parent / "contract" / "conformance"
MAX_BATCH_ELEMENTS: Final = 64
"""Elements of one behaviour batch checked one by one (the 10,001-element batch repeats one)."""
# Stand-ins for {"$record": NAME} in behaviour frames (the kit fills real ones when it runs).
_RECORD: Final = {"address": "127.0.0.1", "port": DEFAULT_PORT, "fingerprint": "0" * 64}


@dataclass(frozen=True, slots=True)
class Case:
    """One line of the protocol and what the contract says of it."""

    where: str  # file: group: test, for reports
    type: str  # the TYPE written to the program
    text: str  # the JSON text, on one line
    valid: bool
    encoded: Any = None  # valid: the canonical re-encoding, parsed
    path: str = "$"  # invalid: where the first violation is


@dataclass(frozen=True, slots=True)
class Report:
    cases: int
    accepted: int  # valid vectors the program accepted
    refused: int  # invalid vectors the program refused
    round_tripped: int  # accepted ones whose encoding is the contract's
    disagreements: list[str]

    @property
    def passed(self) -> bool:
        return not self.disagreements


# -- what the contract says ------------------------------------------------------------------


Check = Callable[[bytes], Any]


class Contract:
    """The Python validator's verdict on a text, for each schema or definition by its $ref."""

    def __init__(self, schema_dir: Path) -> None:
        self.schemas = {
            p.name[: -len(SUFFIX)]: json.loads(p.read_text("utf-8"))
            for p in sorted(schema_dir.glob(f"*{SUFFIX}"))
        }
        if not self.schemas:
            raise ValueError(f"no {SUFFIX} files in {schema_dir}")

    def split(self, ref: str) -> tuple[str, str]:
        uri, _, pointer = ref.partition("#")
        if not (uri.startswith(BASE) and uri.endswith(SUFFIX)):
            raise ValueError(f"not one of the contract's schemas: {ref}")
        return uri[len(BASE) : -len(SUFFIX)], pointer

    def node(self, ref: str) -> dict[str, Any]:
        stem, pointer = self.split(ref)
        node: Any = self.schemas[stem]
        for part in filter(None, pointer.split("/")):
            node = node[part]
        return dict(node)

    def title(self, ref: str) -> str:
        """The TYPE of a $ref: the title of its schema or definition, else the $defs name."""
        return str(self.node(ref).get("title") or ref.rsplit("/", 1)[-1])

    def check(self, ref: str) -> Check:
        stem = self.split(ref)[0]
        if stem in COMPOSED_FILES:
            return self._composed(self.node(ref), f"{BASE}{stem}{SUFFIX}")
        module = import_module(f"nvpair_wm_schema.{stem.replace('-', '_')}_schema")
        typ = getattr(module, self.title(ref))
        return lambda text: codec.validate(text, typ)

    def _composed(self, node: dict[str, Any], base: str) -> Check:
        if "$ref" in node:
            ref = node["$ref"]
            if not ref.startswith("https:"):
                ref = f"{base}{ref}" if ref.startswith("#") else BASE + ref
            return self.check(ref)
        if "anyOf" in node:
            return _first_that_accepts([self._composed(b, base) for b in node["anyOf"]])
        if node.get("type") == "array":
            return _non_empty_array_of(self._composed(node["items"], base))
        raise ValueError(f"cannot compose {node}")

    def verdict(self, ref: str, text: str) -> tuple[bool, Any, str]:
        """(valid, canonical re-encoding parsed, path of the first violation)."""
        try:
            value = self.check(ref)(text.encode("utf-8"))
        except codec.InvalidFrame as exc:
            return False, None, exc.path or "$"
        return True, json.loads(msgspec.json.encode(value)), "$"


_raw_array: msgspec.json.Decoder[list[msgspec.Raw]] = msgspec.json.Decoder(list[msgspec.Raw])


def _first_that_accepts(checks: list[Check]) -> Check:
    def check(text: bytes) -> Any:
        errors: list[codec.InvalidFrame] = []
        for each in checks:
            try:
                return each(text)
            except codec.InvalidFrame as exc:
                errors.append(exc)
        raise errors[0]

    return check


def _non_empty_array_of(item: Check) -> Check:
    def check(text: bytes) -> Any:
        try:
            raws = _raw_array.decode(text)
        except msgspec.DecodeError as exc:
            raise codec.InvalidFrame(f"not an array: {exc}", "$") from exc
        if not raws:
            raise codec.InvalidFrame("empty array", "$")
        return [item(bytes(raw)) for raw in raws]

    return check


# -- the vectors -----------------------------------------------------------------------------


def one_line(text: str) -> str:
    """The text on one line, with the same verdict: a raw line break (CR or LF) outside strings
    is whitespace, so it becomes a space; inside a string it makes the text invalid, and becomes
    a raw TAB, which does too (JSON strings hold no raw control characters)."""
    if "\n" not in text and "\r" not in text:
        return text
    out, in_string, escaped = [], False, False
    for ch in text:
        if ch in "\r\n":
            out.append("\t" if in_string else " ")
            escaped = False
            continue
        out.append(ch)
        if escaped:
            escaped = False
        elif ch == "\\" and in_string:
            escaped = True
        elif ch == '"':
            in_string = not in_string
    return "".join(out)


def shape_cases(shape_dir: Path, contract: Contract) -> Iterator[Case]:
    for path in sorted(shape_dir.glob("*.json")):
        for group in json.loads(path.read_text("utf-8")):
            ref = group["schema"]["$ref"]
            for test in group["tests"]:
                text = test["json"] if "json" in test else json.dumps(test["data"])
                where = f"{path.name}: {group['description']}: {test['description']}"
                yield _case(contract, where, ref, one_line(text))


def _case(contract: Contract, where: str, ref: str, text: str) -> Case:
    valid, encoded, at = contract.verdict(ref, text)
    return Case(where, contract.title(ref), text, valid, encoded, at)


def behaviour_cases(behaviour_dir: Path, contract: Contract) -> Iterator[Case]:
    """The frames of the behaviour vectors: each input line or body as the frame union its
    channel takes (a batch as a Batch and each element as a frame), and each line a manager
    must write to its broker as a BrokerLine."""
    inbound, peer = (f"{BASE}{s}{SUFFIX}" for s in ("inbound-frame", "peer-frame"))
    batch, line = f"{BASE}jsonrpc{SUFFIX}#/$defs/Batch", f"{BASE}broker-line{SUFFIX}"
    for group in vectors.load(behaviour_dir):
        names = {p["name"] for p in group.get("peers", [])} | {"subject", "peer"}
        records = {n: {"nodeId": n, **_RECORD} for n in names}
        for case in group.get("cases", []):
            where = f"{group['file']}: {group['group']}: {case.get('name', '')}"
            payloads = [(inbound, s) for s in case.get("local", [])]
            body = case.get("http", {}).get("body")
            if body is not None:
                payloads.append((peer, body))
            for frame_ref, given in payloads:
                spec = dict(given)
                if "frame" in spec:
                    spec["frame"] = vectors.with_records(spec["frame"], records)
                try:
                    text = vectors.payload(spec).decode("utf-8")
                except UnicodeDecodeError:
                    continue  # not text: the line protocol carries text
                # The local channel reads one frame per line; an HTTP body is one text.
                lines = text.split("\n") if frame_ref == inbound else [text]
                texts = [one_line(each.removesuffix("\r")) for each in lines]
                for each in texts:
                    if each.strip(" \t"):
                        yield from _payload_cases(contract, where, frame_ref, batch, each)
            expected = [*case.get("expect", []), *(case.get("broker") or [])]
            for matcher in expected:
                if isinstance(matcher, dict) and "exact" in matcher:
                    yield _case(contract, f"{where} (written)", line, _compact(matcher["exact"]))


def _compact(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a vector that sends one): keep it escaped
        return json.dumps(value, separators=(",", ":"))
    return text


def _payload_cases(
    contract: Contract, where: str, frame_ref: str, batch: str, text: str
) -> Iterator[Case]:
    if not text.lstrip(" \t").startswith("["):
        yield _case(contract, where, frame_ref, text)
        return
    yield _case(contract, f"{where} (batch)", batch, text)
    try:
        items = json.loads(text)
    except (ValueError, RecursionError):
        return
    if isinstance(items, list):
        # A batch template repeats one frame with a counter: its first elements stand for all.
        for i, item in enumerate(items[:MAX_BATCH_ELEMENTS]):
            yield _case(contract, f"{where} [{i}]", frame_ref, _compact(item))


def all_cases(shape_dir: Path, behaviour_dir: Path) -> list[Case]:
    """Every case once (the same TYPE and text from two places count once)."""
    contract = Contract(shape_dir.parent)
    seen: set[tuple[str, str]] = set()
    out: list[Case] = []
    for case in [*shape_cases(shape_dir, contract), *behaviour_cases(behaviour_dir, contract)]:
        if (case.type, case.text) not in seen:
            seen.add((case.type, case.text))
            out.append(case)
    return out


# -- comparing -------------------------------------------------------------------------------


def same_value(a: Any, b: Any) -> bool:
    """JSON values equal as the contract counts them: the same members present (absent is not
    null), integers as values (1.0 is 1), booleans never numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same_value, a, b))
    return type(a) is type(b) and a == b


def judge(case: Case, answer: str | None) -> tuple[str, str | None]:
    """(what the answer counts as, a disagreement or None)."""
    if answer is None:
        return "none", f"{case.where}: no answer to {case.type} {case.text[:120]}"
    verdict, _, rest = answer.partition("\t")
    if verdict == "ok":
        if not case.valid:
            return "wrong", (
                f"{case.where}: accepted an invalid {case.type} (the contract refuses it at "
                f"{case.path}): {case.text[:200]}"
            )
        try:
            got = json.loads(rest)
        except ValueError:
            return "wrong", f"{case.where}: the re-encoding is not JSON: {rest[:200]}"
        if not same_value(got, case.encoded):
            want = _compact(case.encoded)
            return "accepted", (
                f"{case.where}: re-encoded {case.type} as {rest[:300]}, the contract says "
                f"{want[:300]}"
            )
        return "round-tripped", None
    if verdict == "error":
        path = rest.partition("\t")[0]
        if case.valid:
            return "wrong", (
                f"{case.where}: refused a valid {case.type} at {path} "
                f"({rest.partition(chr(9))[2][:160]}): {case.text[:200]}"
            )
        if path != case.path:
            return "wrong-path", (
                f"{case.where}: refused at {path}, the contract's first violation is at "
                f"{case.path}: {case.text[:200]}"
            )
        return "refused", None
    return "wrong", f"{case.where}: an answer that is neither ok nor error: {answer[:200]}"


def run(command: list[str], cases: list[Case], timeout: float = DEFAULT_TIMEOUT) -> Report:
    """Feed every case to the program and judge each answer line."""
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,  # the program's own diagnostics go to the kit's stderr
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    answers: queue.Queue[bytes] = queue.Queue()

    def write() -> None:
        try:
            for case in cases:
                stdin.write(f"{case.type}\t{case.text}\n".encode())
            stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the program stopped reading: its missing answers are reported

    def read() -> None:
        for raw in stdout:
            answers.put(raw)
        answers.put(b"")

    threads = [threading.Thread(target=f, daemon=True) for f in (write, read)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    counts = {"accepted": 0, "refused": 0, "round-tripped": 0}
    problems: list[str] = []
    ended = False
    try:
        for case in cases:
            answer: str | None = None
            if not ended:
                try:
                    raw = answers.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raw = b""
                ended = raw == b""
                answer = None if ended else raw.decode("utf-8", "replace").rstrip("\r\n")
            kind, problem = judge(case, answer)
            if kind == "round-tripped":
                counts["accepted"] += 1
            if kind in counts:
                counts[kind] += 1
            if problem is not None:
                problems.append(problem)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        stdout.close()
    return Report(
        len(cases), counts["accepted"], counts["refused"], counts["round-tripped"], problems
    )
