"""Rules that keep the suite independent of test order (issue 13).

Several directories have a ``conftest.py``; ``from conftest import …`` binds whichever of them was
imported first, so it works or fails with the order tests run in (pytest-randomly found this). Shared
helpers live in modules of their own name (``service_harness``, ``edge_security_helpers`` …).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_imports_a_conftest_by_name() -> None:
    pattern = re.compile(r"^\s*(from\s+conftest\s+import|import\s+conftest\b)", re.MULTILINE)
    offenders = [str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_every_compiled_twin_module_binds_its_requirement() -> None:
    """``native_twin.require_compiled`` returns the autouse fixture that fails the module's tests where the compiled
    part is missing: a module that does not bind it to a name would run them against a stale package instead."""
    call = re.compile(r"^(\w+ = )?require_compiled\(", re.MULTILINE)
    unbound = [
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("test_*.py")
        if any(m.group(1) is None for m in call.finditer(p.read_text()))
    ]
    assert unbound == []


def test_a_missing_compiled_part_fails_each_test_of_its_module_not_the_collection(tmp_path: Path) -> None:
    """Where cargo is but the compiled part is missing (or stale), each test of the module needing it fails with
    the message naming ``make setup``; the other modules still run (a failure at import was a collection error,
    which interrupted the whole run)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cargo = bin_dir / "cargo"  # what require_compiled looks for: a machine that can build the package
    cargo.write_text("#!/bin/sh\nexit 0\n")
    cargo.chmod(0o755)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "test_needs_it.py").write_text(
        "from native_twin import require_compiled\n"
        "compiled_part = require_compiled(False, 'the compiled thing')\n"
        "def test_a() -> None:\n    pass\n"
        "def test_b() -> None:\n    pass\n"
    )
    (suite / "test_other.py").write_text("def test_c() -> None:\n    pass\n")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
    }
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(suite)],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = out.stdout + out.stderr
    assert "Interrupted" not in text and "error during collection" not in text, text
    assert re.search(r"\b1 passed\b", text) and re.search(r"\b2 errors?\b", text), text
    assert text.count("the compiled thing is not installed (or does not match this checkout) though cargo is") >= 2
    assert out.returncode != 0


def test_a_test_that_configures_logging_leaves_the_root_logger_as_it_found_it() -> None:
    """The suite's autouse fixture (conftest ``root_logging_kept``): ``configure_logging`` in one test (a CLI command
    run in process) does not leave its handler and level to the tests after it."""
    import logging

    from edgepath.logs import configure_logging
    from service_harness import root_logging_kept

    def own() -> list[logging.Handler]:  # pytest's log capture handlers come and go around each phase
        return [h for h in root.handlers if not type(h).__module__.startswith("_pytest")]

    root = logging.getLogger()
    handlers, level = own(), root.level
    with root_logging_kept():
        configure_logging("DEBUG", "json")
        assert root.level == logging.DEBUG and own() != handlers
    assert own() == handlers and root.level == level
