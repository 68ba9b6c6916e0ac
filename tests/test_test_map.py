"""``tests/README.md`` maps every module of ``src/nvpair_wm`` to its tests: each module has a
row (its own, or its package's), and each test file a row names exists."""

from __future__ import annotations

import re

from tests.support.source_tree import ROOT

PACKAGE = ROOT / "src" / "nvpair_wm"
TESTS = ROOT / "tests"
_ROW = re.compile(r"^\| `([\w/]+)` \| (.+) \|$")


def _rows() -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in (TESTS / "README.md").read_text().splitlines():
        if (m := _ROW.match(line)) is not None:
            rows[m.group(1)] = re.findall(r"`(test_\w+\.py)`", m.group(2))
    return rows


def _modules() -> list[str]:
    """Every module, as a path under the package without ``.py`` (``__init__`` and
    ``__main__`` are their package's)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        if rel.name in ("__init__", "__main__") and len(rel.parts) == 1:
            continue
        if rel.name in ("__init__", "__main__"):
            rel = rel.parent
        found.append(rel.as_posix())
    return sorted(set(found))


def _covered(module: str, rows: dict[str, list[str]]) -> bool:
    """Its row, its package's, or (a package's own ``__init__``) a row of a module in it."""
    parts = module.split("/")
    if any("/".join(parts[:n]) in rows for n in range(len(parts), 0, -1)):
        return True
    return (PACKAGE / module).is_dir() and any(r.startswith(module + "/") for r in rows)


def test_every_module_has_a_row() -> None:
    rows = _rows()
    assert len(rows) > 10, "no table found in tests/README.md"
    assert [m for m in _modules() if not _covered(m, rows)] == []


def test_every_row_names_a_module_and_test_files_that_exist() -> None:
    for module, tests in _rows().items():
        path = PACKAGE / module
        assert path.with_suffix(".py").is_file() or path.is_dir(), f"no module {module}"
        assert tests, f"{module}: no test named"
        assert [t for t in tests if not (TESTS / t).is_file()] == [], module
