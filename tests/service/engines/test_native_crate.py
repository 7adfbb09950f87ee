"""The compiled engines' crate (service/native): its own Rust tests (``fsum`` on ``math.fsum``'s known cases, Eq. 1
on a line, a hand-back), ``rustfmt`` and ``clippy -D warnings``, run where the machine has a Rust toolchain."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[3] / "service" / "native"


def _cargo(*args: str) -> subprocess.CompletedProcess[str]:
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.skip("no Rust toolchain (cargo) on this machine: the compiled engines are not built here")
    return subprocess.run([cargo, *args], cwd=NATIVE, capture_output=True, text=True, timeout=590, check=False)


@pytest.mark.timeout(600)  # a first build of the crate's test binary on 2 cores: ~1 min
def test_cargo_test_passes() -> None:
    proc = _cargo("test", "--release", "--quiet")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"test result: ok\. [1-9]\d* passed", proc.stdout), proc.stdout[-3000:]  # tests ran


@pytest.mark.timeout(600)
def test_rustfmt_and_clippy_are_clean() -> None:
    fmt = _cargo("fmt", "--check")
    assert fmt.returncode == 0, fmt.stdout[-3000:] + fmt.stderr[-3000:]
    clippy = _cargo("clippy", "--release", "--quiet", "--", "-D", "warnings")
    assert clippy.returncode == 0, clippy.stdout[-3000:] + clippy.stderr[-3000:]
