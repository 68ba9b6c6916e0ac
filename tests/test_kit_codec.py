"""The codec role's own logic (nvpair_wm.conformance.codec), without a program: how a text is
put on one line, how values are compared, how an answer is judged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nvpair_wm.conformance import codec, vectors
from tests.support.conformance import NotIJson, strict_loads


@pytest.mark.parametrize(
    "text",
    [
        '{\n"a": 1\r\n}',
        '{"a": "x\ny"}',
        '["a\\\\",\n1]',
        '["a\\"\n"]',
    ],
)
def test_one_line_keeps_the_verdict(text: str) -> None:
    line = codec.one_line(text)
    assert "\n" not in line and "\r" not in line

    def verdict(t: str) -> object:
        try:
            return strict_loads(t)
        except NotIJson:
            return "invalid"

    assert verdict(line) == verdict(text)


def test_same_value_counts_integers_as_values_and_absent_apart_from_null() -> None:
    assert codec.same_value({"a": 1.0, "b": [2]}, {"b": [2e0], "a": 1})
    assert not codec.same_value({"a": None}, {})
    assert not codec.same_value({"a": True}, {"a": 1})
    assert not codec.same_value([1, 2], [2, 1])


CASE = codec.Case("f.json: g: t", "WorkloadInfo", "{}", False, None, "$.seq")
VALID = codec.Case("f.json: g: v", "WorkloadInfo", '{"a":1}', True, {"a": 1}, "$")


@pytest.mark.parametrize(
    ("case", "answer", "kind", "problem"),
    [
        (CASE, "error\t$.seq\tbad", "refused", None),
        (
            CASE,
            "error\t$\tbad",
            "wrong-path",
            "refused at $, the contract's first violation is at $.seq",
        ),
        (CASE, "ok\t{}", "wrong", "accepted an invalid WorkloadInfo"),
        (VALID, 'ok\t{"a":1.0}', "round-tripped", None),
        (VALID, 'ok\t{"a":1,"b":null}', "accepted", "re-encoded WorkloadInfo as"),
        (VALID, "error\t$\tno", "wrong", "refused a valid WorkloadInfo at $"),
        (VALID, None, "none", "no answer"),
        (VALID, "maybe", "wrong", "neither ok nor error"),
    ],
)
def test_judge(case: codec.Case, answer: str | None, kind: str, problem: str | None) -> None:
    got_kind, got_problem = codec.judge(case, answer)
    assert got_kind == kind
    if problem is None:
        assert got_problem is None
    else:
        assert got_problem is not None and problem in got_problem
        assert got_problem.startswith(case.where)


def test_every_case_text_is_one_line_and_json_serialisable() -> None:
    cases = codec.all_cases(vectors.DEFAULT_DIR.resolve().parent, vectors.DEFAULT_DIR)
    assert all("\n" not in c.text and "\r" not in c.text for c in cases)
    json.dumps([c.encoded for c in cases])
    local = [c for c in cases if "two-frames-one-write" in c.where]
    assert len(local) == 2 and all(c.valid for c in local), local


def test_a_codec_program_that_cannot_start_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nvpair_wm.conformance", "--codec", "--", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "cannot start" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
