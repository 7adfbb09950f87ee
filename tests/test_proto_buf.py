"""``buf lint`` and ``buf breaking`` on the wire API (issue 22, item 3).

buf is the Go program scripts/setup.sh builds into ``.tools/bin`` (pinned); without it (no Go toolchain at
setup) these tests skip, saying so. ``buf breaking`` compares ``proto/`` with the ``main`` branch of this
repository (its git directory, which worktrees share), so a change that would break deployed agents fails
here before it merges; a deliberately renumbered field shows that the check bites.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUF = ROOT / ".tools" / "bin" / "buf"
PROTO = ROOT / "proto"

pytestmark = pytest.mark.skipif(
    not BUF.is_file(), reason="buf not built (scripts/setup.sh builds it with the Go toolchain into .tools/bin)"
)


def buf(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BUF), *args], cwd=cwd, capture_output=True, text=True, timeout=50, check=False)


def main_branch() -> str:
    """``<git dir>#branch=main,subdir=proto``, or skip when this checkout has no ``main`` branch."""
    git = subprocess.run(
        ["git", "rev-parse", "--git-common-dir"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    has_main = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", "refs/heads/main"], cwd=ROOT, capture_output=True, check=False
    )
    if git.returncode != 0 or has_main.returncode != 0:
        pytest.skip("no local main branch to compare proto/ against (a shallow or detached checkout)")
    return f"{(ROOT / git.stdout.strip()).resolve()}#branch=main,subdir=proto"


def test_buf_lint_passes() -> None:
    result = buf("lint", cwd=PROTO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_breaking_change_against_main() -> None:
    result = buf("breaking", "proto", "--against", main_branch())
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_breaking_catches_a_renumbered_field(tmp_path: Path) -> None:
    changed = tmp_path / "proto"
    shutil.copytree(PROTO, changed, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    source = changed / "edgepath" / "v1" / "edgepath.proto"
    text = source.read_text()
    renumbered, count = re.subn(r"optional double rsrp_dbm = 6;", "optional double rsrp_dbm = 99;", text)
    assert count == 1
    source.write_text(renumbered)
    result = buf("breaking", str(changed), "--against", str(PROTO))
    assert result.returncode != 0 and "rsrp_dbm" in result.stdout + result.stderr, result.stdout + result.stderr
