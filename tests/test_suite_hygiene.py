"""Rules that keep the suite independent of test order (issue 13).

Several directories have a ``conftest.py``; ``from conftest import …`` binds whichever of them was
imported first, so it works or fails with the order tests run in (pytest-randomly found this). Shared
helpers live in modules of their own name (``service_harness``, ``edge_security_helpers`` …).
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_imports_a_conftest_by_name() -> None:
    pattern = re.compile(r"^\s*(from\s+conftest\s+import|import\s+conftest\b)", re.MULTILINE)
    offenders = [str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []
