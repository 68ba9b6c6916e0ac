"""Run schema/conformance/*.json through two independent validators.

Every vector (JSON-Schema-Test-Suite format, see schema/conformance/README.md) is checked by

(a) jsonschema's Draft 2020-12 validator, with a ``referencing`` registry holding every schema
    file under its ``$id``; ``json``-form vectors are first parsed by a strict I-JSON parser
    (:func:`strict_loads`: duplicate names last-wins, lone surrogates and non-finite numbers
    refused);
(b) the generated msgspec types, through ``nvpair_wm.codec.validate`` on the exact JSON text;

and for frames also by (c) ``nvpair_wm.codec.decode``, the hot path the daemon runs on every
inbound line. A test fails when any validator disagrees with ``valid``, which also means whenever
the validators disagree with each other.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import jsonschema
import msgspec
import pytest
from jsonschema import Draft202012Validator
from nvpair_wm_schema.broker_frame_schema import BrokerFrame
from nvpair_wm_schema.http_error_schema import HttpError
from nvpair_wm_schema.inbound_frame_schema import InboundFrame
from nvpair_wm_schema.jsonrpc_schema import ErrorResponse, EventResponse
from nvpair_wm_schema.manager_status_schema import StatusResponse

from nvpair_wm import codec
from nvpair_wm.codec import InvalidFrame
from tests.support.conformance import (
    BASE,
    MAX_DEPTH,
    REGISTRY,
    SCHEMA_DIR,
    SCHEMAS,
    SUFFIX,
    NotIJson,
    nesting_depth,
    schema_stems,
    strict_loads,
)

VECTOR_DIR = SCHEMA_DIR / "conformance"


# --------------------------------------------------------------------------- strict I-JSON parsing


# --------------------------------------------------------------------------- schemas and vectors


def vector_stems() -> list[str]:
    return sorted(p.stem for p in VECTOR_DIR.glob("*.json"))


def load_vectors(stem: str) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = strict_loads(
        (VECTOR_DIR / f"{stem}.json").read_text("utf-8"), duplicates="error"
    )
    return groups


@dataclass(frozen=True)
class Case:
    stem: str
    group: str
    ref: str
    description: str
    valid: bool
    data: Any = None
    text: str | None = None  # the `json` form: exact JSON text

    @property
    def json_text(self) -> str:
        return self.text if self.text is not None else json.dumps(self.data)


def iter_cases() -> Iterator[Any]:
    for stem in vector_stems():
        for group in load_vectors(stem):
            ref = group["schema"]["$ref"]
            for test in group["tests"]:
                case = Case(
                    stem=stem,
                    group=group["description"],
                    ref=ref,
                    description=test["description"],
                    valid=test["valid"],
                    data=test.get("data"),
                    text=test.get("json"),
                )
                marks = [
                    pytest.mark.xfail(strict=True, reason=reason)
                    for applies, reason in KNOWN_DISAGREEMENTS
                    if applies(case)
                ]
                yield pytest.param(
                    case,
                    id=f"{stem}: {group['description']}: {test['description']}",
                    marks=marks,
                )


# --------------------------------------------------------------------------- known disagreements
#
# Where the generated msgspec path would still differ from the schema: (predicate on a Case, why
# and what fixes it). The xfail is strict, so a fix makes those tests XPASS and fail until the
# entry is deleted; the vectors themselves always state what the schema says. Empty: the two
# validators agree on every vector. Keep it that way by fixing the code or the schema, not the
# vector.

KNOWN_DISAGREEMENTS: list[tuple[Callable[[Case], bool], str]] = []


# --------------------------------------------------------------------------- the two validators


def split_ref(ref: str) -> tuple[str, str]:
    """'https://.../x.schema.json#/$defs/Y' -> ('x', '/$defs/Y')."""
    uri, _, pointer = ref.partition("#")
    assert uri.startswith(BASE) and uri.endswith(SUFFIX), f"not one of our schemas: {ref}"
    return uri[len(BASE) : -len(SUFFIX)], pointer


def subschema(ref: str) -> dict[str, Any]:
    stem, pointer = split_ref(ref)
    node: Any = SCHEMAS[stem]
    for part in filter(None, pointer.split("/")):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    assert isinstance(node, dict)
    return node


def generated_type(ref: str) -> Any:
    """The generated msgspec type for a schema or one of its $defs.

    datamodel-code-generator writes schema file `x-y.schema.json` to module `x_y_schema` and
    names each type after the schema's `title`, or, for an untitled definition, its `$defs` name.
    """
    stem, pointer = split_ref(ref)
    module = import_module(f"nvpair_wm_schema.{stem.replace('-', '_')}_schema")
    return getattr(module, subschema(ref).get("title") or pointer.rsplit("/", 1)[-1])


def jsonschema_verdict(case: Case) -> tuple[bool, str]:
    if case.text is not None:
        try:
            instance = strict_loads(case.text)
        except NotIJson as exc:
            return False, f"not I-JSON: {exc}"
    else:
        instance = case.data
    validator = Draft202012Validator({"$ref": case.ref}, registry=REGISTRY)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return True, "valid"
    return False, f"{error.json_path}: {error.message}"


# --- files with no generated type (scripts/gen_types.py NOT_GENERATED): unions told apart by
# their members. Their vectors are checked through the generated types of their parts.

Check = Callable[[bytes], None]
_raw_array: msgspec.json.Decoder[list[msgspec.Raw]] = msgspec.json.Decoder(list[msgspec.Raw])


def of_type(typ: Any) -> Check:
    def check(text: bytes) -> None:
        codec.validate(text, typ)

    return check


def one_of_types(*types: Any) -> Check:
    checks = [of_type(t) for t in types]
    return lambda text: first_that_accepts(text, checks)


def first_that_accepts(text: bytes, checks: list[Check]) -> None:
    errors: list[InvalidFrame] = []
    for check in checks:
        try:
            check(text)
        except InvalidFrame as exc:
            errors.append(exc)
        else:
            return
    raise errors[0]


def non_empty_array_of(item: Check) -> Check:
    def check(text: bytes) -> None:
        try:
            raws = _raw_array.decode(text)
        except msgspec.DecodeError as exc:
            raise InvalidFrame(f"not an array: {exc}", "$") from exc
        if not raws:
            raise InvalidFrame("empty array", "$")
        for raw in raws:
            item(bytes(raw))

    return check


def any_check(*checks: Check) -> Check:
    return lambda text: first_that_accepts(text, list(checks))


_broker_response = one_of_types(EventResponse, StatusResponse, ErrorResponse)
_peer_response = one_of_types(EventResponse, ErrorResponse)
_events_body = any_check(_peer_response, non_empty_array_of(_peer_response))
COMPOSED: dict[str, Check] = {
    f"{BASE}broker-line{SUFFIX}": any_check(
        one_of_types(BrokerFrame), _broker_response, non_empty_array_of(_broker_response)
    ),
    f"{BASE}broker-line{SUFFIX}#/$defs/BrokerResponse": _broker_response,
    f"{BASE}http-response{SUFFIX}": any_check(_events_body, one_of_types(HttpError)),
    f"{BASE}http-response{SUFFIX}#/$defs/EventsBody": _events_body,
    f"{BASE}http-response{SUFFIX}#/$defs/PeerResponse": _peer_response,
}


def msgspec_verdict(case: Case) -> tuple[bool, str]:
    if case.ref in COMPOSED:
        try:
            COMPOSED[case.ref](case.json_text.encode("utf-8"))
        except InvalidFrame as exc:
            return False, f"{exc.path}: {exc.reason}"
        return True, "valid"
    typ = generated_type(case.ref)
    try:
        codec.validate(case.json_text.encode("utf-8"), typ)
    except InvalidFrame as exc:
        assert isinstance(exc.reason, str) and exc.reason, "InvalidFrame without a reason"
        assert exc.path is None or exc.path.startswith("$"), f"bad path {exc.path!r}"
        return False, f"{exc.path}: {exc.reason}"
    return True, "valid"


INBOUND_MEMBERS = typing.get_args(typing.get_args(InboundFrame)[0])
INBOUND_REF = f"{BASE}inbound-frame{SUFFIX}"


def decode_verdict(case: Case) -> tuple[bool, Any]:
    """What the daemon's hot path makes of the text: one frame, or an error / a batch."""
    decoded = codec.decode(case.json_text.encode("utf-8"))
    if decoded.batch or len(decoded.items) != 1:
        return False, decoded
    item = decoded.items[0]
    return not isinstance(item, codec.RpcError), item


CASES = list(iter_cases())


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("case", CASES)
def test_vector(case: Case) -> None:
    js_ok, js_why = jsonschema_verdict(case)
    ms_ok, ms_why = msgspec_verdict(case)
    detail = (
        f"\n  expected valid={case.valid}"
        f"\n  jsonschema: {js_ok} ({js_why})"
        f"\n  msgspec:    {ms_ok} ({ms_why})"
        f"\n  text: {case.json_text[:300]}"
    )
    assert js_ok == ms_ok, "jsonschema and the generated msgspec types disagree" + detail
    assert js_ok == case.valid, "both validators disagree with the vector" + detail

    # (c) the daemon's hot path must agree on frames, too.
    if case.ref in COMPOSED:
        return
    typ = generated_type(case.ref)
    if case.ref == INBOUND_REF:
        ok, item = decode_verdict(case)
        assert ok == case.valid, f"codec.decode disagrees: {item!r}" + detail
        if case.text is not None and not case.valid:
            try:
                strict_loads(case.text)
            except NotIJson:
                # Not JSON (or not I-JSON) text: the codec must call it a parse error.
                assert isinstance(item, codec.RpcError), item
                assert item.code == codec.PARSE_ERROR, item
    elif typ in INBOUND_MEMBERS and case.valid:
        ok, item = decode_verdict(case)
        assert ok and type(item) is typ, f"codec.decode refused a valid {typ.__name__}: {item!r}"


def test_every_schema_file_has_a_vector_file() -> None:
    schemas, vectors = set(schema_stems()), set(vector_stems())
    assert schemas, "no schema files found"
    assert schemas - vectors == set(), f"schema files without vectors: {sorted(schemas - vectors)}"
    assert vectors - schemas == set(), f"vector files without a schema: {sorted(vectors - schemas)}"


def test_every_vector_file_is_collected() -> None:
    collected = {p.values[0].stem for p in CASES}
    assert collected == set(vector_stems())


def test_every_schema_and_def_has_vectors() -> None:
    """Each schema root and each of its $defs is the subject of at least one group."""
    covered = {group["schema"]["$ref"] for stem in vector_stems() for group in load_vectors(stem)}
    wanted = set()
    for s in SCHEMAS.values():
        wanted.add(s["$id"])
        wanted |= {f"{s['$id']}#/$defs/{name}" for name in s.get("$defs", {})}
    assert wanted - covered == set()


@pytest.mark.parametrize("stem", vector_stems())
def test_vector_file_shape(stem: str) -> None:
    """Vector files are portable: strict I-JSON, no duplicate names, the documented keys only."""
    groups = load_vectors(stem)
    assert isinstance(groups, list) and groups
    verdicts = set()
    for group in groups:
        assert set(group) <= {"description", "comment", "schema", "tests"}, group.keys()
        assert isinstance(group["description"], str) and group["description"]
        assert set(group["schema"]) == {"$ref"}, "schema must be a single $ref (msgspec maps it)"
        split_ref(group["schema"]["$ref"])
        subschema(group["schema"]["$ref"])  # the ref resolves
        Draft202012Validator({"$ref": group["schema"]["$ref"]}, registry=REGISTRY)
        descriptions = [t["description"] for t in group["tests"]]
        assert len(descriptions) == len(set(descriptions)), f"repeated descriptions in {group}"
        for test in group["tests"]:
            keys = set(test)
            assert keys in (
                {"description", "data", "valid"},
                {"description", "json", "valid"},
                {"description", "comment", "data", "valid"},
                {"description", "comment", "json", "valid"},
            ), f"{test['description']}: keys {sorted(keys)}"
            assert isinstance(test["valid"], bool)
            if "json" in test:
                assert isinstance(test["json"], str)
            verdicts.add(test["valid"])
    assert verdicts == {True, False}, "a vector file needs both valid and invalid cases"


@pytest.mark.parametrize("stem", schema_stems())
def test_schema_file_is_2020_12(stem: str) -> None:
    schema = SCHEMAS[stem]
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"{BASE}{stem}{SUFFIX}"
    for key in ("title", "description", "examples"):
        assert schema.get(key), f"{stem}: missing {key}"


def test_strict_parser() -> None:
    """The jsonschema side's parser does what the README says a runner must do."""
    assert strict_loads('{"a":1,"a":2}') == {"a": 2}
    assert strict_loads('"\\ud83d\\ude00"') == "\U0001f600"
    assert nesting_depth(strict_loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)) == MAX_DEPTH
    assert strict_loads("9" * 300) == int("9" * 300)  # a finite double, if not an exact one
    for bad in [
        '"\\ud800"',
        '{"\\udc00":1}',
        "NaN",
        "1e400",
        "-Infinity",
        "\ufeff{}",
        "{} x",
        "1" + "0" * 400,
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
        "[" * 5000 + "]" * 5000,
    ]:
        with pytest.raises(NotIJson):
            strict_loads(bad)
    with pytest.raises(NotIJson):
        strict_loads('{"a":1,"a":1}', duplicates="error")
