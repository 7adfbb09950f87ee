"""Every command line writes usage errors to a non-terminal as one plain line, whatever ``COLUMNS`` says.

A rich box wrapped at the terminal width once split an error phrase across lines (issue 13); scripts,
CI logs and journald need one grep-able ``Error: …`` line and the documented exit code 2.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CLIS = {
    "edgepath": ("edgepath.cli", ["serve", "--no-such-option"]),
    "edgepath-agent": ("edgepath_agent.cli", ["replay"]),
    "edgepath-testbed": ("edgepath_agent.testbed.cli", ["run", "--no-such-option"]),
}


@pytest.mark.parametrize("columns", [None, "20"])
@pytest.mark.parametrize("cli", sorted(CLIS))
def test_usage_error_is_one_plain_line(cli: str, columns: str | None) -> None:
    module, args = CLIS[cli]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = columns
    code = f"from {module} import app; app(prog_name={cli!r})"
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, proc.stderr
    assert "--no-such-option" in errors[0] or "Missing option '--wifi'" in errors[0]
    assert not any(ch in proc.stderr for ch in "│╭╰"), proc.stderr
