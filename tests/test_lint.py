"""Code standards as tests: ruff (lint + format) on everything, mypy on the whole service package and on the agent
package (the conventions of README "Developing").

Both mypy runs use the repository's ``[tool.mypy]`` (pyproject.toml): untyped third-party libraries
(pyroute2, jeepney, grpc, scipy …) are ``ignore_missing_imports``; the generated ``wire/`` code is excluded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PYTHON_TREES = ["service", "client-agent", "tests", "scripts", "proto", "loadtest"]
#: The whole service package: serving runtime (transports, plane, state, security, CLI …) and the lab code
#: (datasets, evaluation) it ships.
SERVICE_PACKAGE = ["service/src/edgepath"]
#: The whole agent package: the device runtime and the lab code (replay, testbed) it ships.
AGENT_PACKAGE = ["client-agent/src/edgepath_agent"]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_lint_is_clean() -> None:
    out = _run(str(BIN / "ruff"), "check", "--output-format", "concise", *PYTHON_TREES)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_is_clean() -> None:
    out = _run(str(BIN / "ruff"), "format", "--check", *PYTHON_TREES)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_on_the_service_package() -> None:
    out = _run(str(BIN / "mypy"), *SERVICE_PACKAGE)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_on_the_agent_package() -> None:
    out = _run(str(BIN / "mypy"), *AGENT_PACKAGE)
    assert out.returncode == 0, out.stdout + out.stderr
