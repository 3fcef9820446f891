"""No test module skips itself because one of the repo's own imports is missing.

tests/integration/conftest.py's rule is "fails, never skips": `pytest.importorskip('gen_models')` turned a
broken import path into whole modules reported as skipped. The repo's modules (tests/lab, benchmarks, the
collection) are on pytest's one import path (pytest.ini) and are imported directly; a missing one fails.
"""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMPORTORSKIP = re.compile(r"\bimportorskip\s*\(")


def findings(text, where):
    return ["%s:%d: %s" % (where, n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
            if IMPORTORSKIP.search(line) and not line.lstrip().startswith("#")]


def python_files():
    for tree in ("tests", "molecule", "benchmarks"):
        yield from sorted((REPO / tree).rglob("*.py"))


def test_no_test_skips_on_a_missing_import():
    found = []
    for path in python_files():
        if path == Path(__file__).resolve():
            continue
        found += findings(path.read_text(), str(path.relative_to(REPO)))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("line", ['gen_models = pytest.importorskip("gen_models")',
                                  "    mod = pytest.importorskip ('fit_accuracy')",
                                  "from pytest import importorskip; importorskip('x')"])
def test_the_scan_finds_every_spelling(line):
    assert findings(line, "t")


def test_the_scan_leaves_direct_imports_alone():
    assert findings("import gen_models\n# never importorskip( here\n", "t") == []
