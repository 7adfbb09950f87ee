"""The README's Python gRPC client example ("Using it") runs as written against a real service on loopback: a
decision, its outcome accepted, and a refusal whose details name the field."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from service_harness import running_service

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_python_client() -> str:
    """The first ```python block of README "Using it"."""
    section = README.read_text().split("## Using it", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_python_client_runs_as_written() -> None:
    code = readme_python_client()
    assert '"127.0.0.1:50051"' in code
    with running_service() as svc:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code.replace("127.0.0.1:50051", f"127.0.0.1:{svc.grpc_port}"), "README", "exec"), {})
    lines = printed.getvalue().splitlines()
    assert re.fullmatch(r"(wlan0|wwan0) \S+", lines[0]), lines
    assert lines[1] == "accepted", lines
    assert lines[2].startswith("INVALID_ARGUMENT [('interfaces[0].rsrp_dbm', "), lines
