"""The docs' shell examples are tests: each runs here as written and its shown output is
checked, so an example that stops working fails the suite.

Conventions for whoever edits README.md, docs/*.md or schema/**/*.md (the parser is generic;
new blocks need nothing but these):

* Every fenced block tagged ``sh``, ``bash``, ``shell``, ``zsh`` or ``console`` is run, alone,
  with ``bash -eo pipefail`` in a fresh empty temporary directory, with this checkout's
  ``.venv/bin`` first on ``PATH`` (so ``nvpair-wm`` and ``nvpair-wm-cluster`` are the commands
  of this tree) and ``PORT`` set to the first of ``PORT_COUNT`` consecutive free loopback
  ports (a block may start several listeners from it). It must exit 0 within
  ``BLOCK_TIMEOUT`` seconds; whatever it leaves running is killed.
* A block that cannot run here (``make ...`` targets tested elsewhere, long runs, a
  placeholder) gets the exact line ``<!-- illustrative -->`` immediately before its fence.
* A block's shown output is the fenced block right after it (any tag, prose in between is
  fine) when the line immediately before that block's fence is exactly ``<!-- output -->``.
  Stdout must then match it line for line; ``…`` in the shown output stands for any text.
  Without an output block only the exit status is checked.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.ports import free_port_block
from tests.support.source_tree import ROOT

ILLUSTRATIVE = "<!-- illustrative -->"
OUTPUT = "<!-- output -->"
SHELL_TAGS = frozenset({"sh", "bash", "shell", "zsh", "console"})
BLOCK_TIMEOUT = 60.0
PORT_COUNT = 8
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "schema").rglob("*.md")),
]


@dataclass(frozen=True)
class Fence:
    line: int  # 1-based line of the opening fence
    tag: str
    body: str
    marker: str  # the line right before the opening fence


@dataclass(frozen=True)
class Example:
    doc: Path
    line: int
    script: str
    illustrative: bool
    shown: str | None

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def fences(text: str) -> list[Fence]:
    """Every fenced block (``` or ~~~, possibly indented, e.g. inside a list item)."""
    lines = text.splitlines()
    found: list[Fence] = []
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, tag = opening.groups()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not re.match(rf"^\s*{re.escape(fence)}\s*$", lines[i]):
            body.append(lines[i].removeprefix(indent))
            i += 1
        marker = lines[start - 1].strip() if start else ""
        found.append(Fence(start + 1, tag.lower(), "\n".join(body), marker))
        i += 1
    return found


def examples(doc: Path) -> list[Example]:
    blocks = fences(doc.read_text(encoding="utf-8"))
    out = []
    for n, block in enumerate(blocks):
        if block.tag not in SHELL_TAGS:
            continue
        following = blocks[n + 1] if n + 1 < len(blocks) else None
        shown = following.body if following and following.marker == OUTPUT else None
        out.append(Example(doc, block.line, block.body, block.marker == ILLUSTRATIVE, shown))
    return out


ALL = [ex for doc in DOCS for ex in examples(doc)]
RUNNABLE = [ex for ex in ALL if not ex.illustrative]


def matches(shown: str, actual: str) -> bool:
    """Line for line; ``…`` in a shown line matches any text."""
    want = shown.rstrip("\n").splitlines()
    got = actual.rstrip("\n").splitlines()
    if len(want) != len(got):
        return False
    for w, g in zip(want, got, strict=True):
        pattern = ".*".join(re.escape(part) for part in w.rstrip().split("…"))
        if not re.fullmatch(pattern, g.rstrip()):
            return False
    return True


def test_the_docs_have_runnable_examples_with_output() -> None:
    """Guards the parser: the README's own examples are found, and some show output."""
    readme = [ex for ex in RUNNABLE if ex.doc == ROOT / "README.md"]
    assert len(readme) >= 3, [ex.name for ex in ALL]
    assert sum(ex.shown is not None for ex in readme) >= 2
    assert any("make run" in ex.script for ex in ALL if ex.illustrative)


def test_matches_elisions() -> None:
    assert matches('{"port":…,"x":1}\n', '{"port":1234,"x":1}')
    assert not matches('{"port":…,"x":1}', '{"port":1234,"x":2}')
    assert not matches("a\nb", "a")


def tail(path: Path, lines: int = 20) -> str:
    """The end of a log the example wrote, so a failure shows why a node stopped."""
    return "".join(f"{line}\n" for line in path.read_text(errors="replace").splitlines()[-lines:])


@pytest.mark.parametrize("example", RUNNABLE, ids=[ex.name for ex in RUNNABLE])
def test_example_runs_as_written(example: Example, tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "nvpair-wm").exists(), "run the suite with the venv: make venv && make test"
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PORT": str(free_port_block(PORT_COUNT)),
        "TMPDIR": str(tmp_path),  # mktemp -d stays inside the test's directory
    }
    work = tmp_path / "work"
    work.mkdir()
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        # Files, not pipes: a background process the example starts must not keep us waiting.
        proc = subprocess.Popen(
            ["bash", "-eo", "pipefail", "-c", example.script],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    shown_out = stdout.read_text(errors="replace")
    report = f"{example.name}\n--- stdout\n{shown_out}--- stderr\n{stderr.read_text()}"
    for log in sorted(work.glob("*.log")):
        report += f"--- {log.name} (last lines)\n{tail(log)}"
    assert code == 0, f"exit {code} (None: timed out after {BLOCK_TIMEOUT}s)\n{report}"
    if example.shown is not None:
        assert matches(example.shown, shown_out), f"--- shown\n{example.shown}\n{report}"
